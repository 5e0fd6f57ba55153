"""DescribeConfigs (v1-v4), AlterConfigs (v0-v2) and IncrementalAlterConfigs (v0-v1).

Topics: every topic config with its effective value, its source (the topic's override, a
``server.properties`` synonym, or the default) and, on request, its synonyms in precedence order
and its documentation, as :func:`tidelog.storage.config.describe` computes them. AlterConfigs
replaces a topic's overrides with exactly the given set (Kafka's legacy semantics: what is not
named goes back to the default); IncrementalAlterConfigs applies SET, DELETE, APPEND and SUBTRACT
(the last two on list configs only) to the current overrides. Both validate the whole new set
before anything is written (:meth:`LogManager.alter_topic_config`), and ``validate_only`` writes
nothing.

The broker (resource name = this node's id, or "" for the cluster-wide defaults, which are always
empty here): its known keys, as set in ``server.properties`` (STATIC_BROKER_CONFIG) or defaulted.
A key that may carry a secret (``ConfigKey.sensitive``: ``remote.log.storage.uri``, whose query
may hold an Azure SAS token) is answered as Kafka answers its PASSWORD keys: ``is_sensitive`` set
and the value (and its synonyms' values) null.
Where tidelog differs from Kafka: broker configs are static. There is no dynamic broker config, so
altering one is refused with INVALID_REQUEST ("cannot update these configs dynamically", Kafka's
words for keys that are not dynamic), and describing the cluster defaults answers none.
BROKER_LOGGER and other resource types are refused with INVALID_REQUEST.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from kafka.protocol.admin import AlterConfigsResponse, DescribeConfigsResponse, IncrementalAlterConfigsResponse

from tidelog.errors import ConfigError, InvalidRequestError, UnknownTopicOrPartitionError
from tidelog.manager import LogManager
from tidelog.server.codec import Request
from tidelog.server.context import ApiContext, ConnectionInfo
from tidelog.server.errors import error_code, error_message
from tidelog.storage.config import (
    BROKER_CONFIGS,
    TOPIC_CONFIGS,
    BrokerConfig,
    ConfigSource,
    ConfigType,
    check_topic_config_names,
    describe,
)

TOPIC, BROKER = 2, 4  # Kafka's ConfigResource.Type ids
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3  # AlterConfigOp.OpType ids

# DescribeConfigsResponse.ConfigSource ids
_SOURCE_IDS = {ConfigSource.TOPIC_CONFIG: 1, ConfigSource.STATIC_BROKER_CONFIG: 4, ConfigSource.DEFAULT_CONFIG: 5}
# DescribeConfigsResponse.ConfigType ids
_TYPE_IDS = {ConfigType.BOOLEAN: 1, ConfigType.STRING: 2, ConfigType.INT: 3, ConfigType.LONG: 5,
             ConfigType.DOUBLE: 6, ConfigType.LIST: 7}

Described = DescribeConfigsResponse.DescribeConfigsResult
Entry = Described.DescribeConfigsResourceResult
Synonym = Entry.DescribeConfigsSynonym


# --- DescribeConfigs ------------------------------------------------------------------------------

async def handle_describe_configs(ctx: ApiContext, conn: ConnectionInfo, request: Request) -> Any:
    body = request.body
    synonyms = bool(body.include_synonyms)
    docs = request.api_version >= 3 and bool(body.include_documentation)
    results = await ctx.run(describe_configs, ctx.manager, ctx.node_id, body.resources, synonyms, docs)
    return DescribeConfigsResponse(throttle_time_ms=0, results=results)


def describe_configs(manager: LogManager, node_id: int, resources: list[Any], synonyms: bool,
                     docs: bool) -> list[Any]:
    """One result per resource. Runs in the thread pool."""
    results = []
    for resource in resources:
        keys = None if resource.configuration_keys is None else set(resource.configuration_keys)
        try:
            entries = _describe_resource(manager, node_id, resource.resource_type, resource.resource_name,
                                         synonyms, docs)
            configs = [e for e in entries if keys is None or e.name in keys]
            results.append(Described(error_code=0, error_message=None, resource_type=resource.resource_type,
                                     resource_name=resource.resource_name, configs=configs))
        except Exception as e:  # noqa: BLE001 - every failure becomes this resource's error code
            results.append(Described(error_code=error_code(e), error_message=error_message(e),
                                     resource_type=resource.resource_type, resource_name=resource.resource_name,
                                     configs=[]))
    return results


def _describe_resource(manager: LogManager, node_id: int, resource_type: int, name: str, synonyms: bool,
                       docs: bool) -> list[Any]:
    if resource_type == TOPIC:
        _require_topic(manager, name)
        return [_topic_entry(e, synonyms, docs) for e in describe(manager.topic_config(name), manager.broker)]
    if resource_type == BROKER:
        if name == "":
            return []  # no dynamic cluster-wide defaults: broker configs are static
        _require_this_broker(node_id, name)
        return _broker_entries(manager.broker, synonyms, docs)
    raise InvalidRequestError(f"Unsupported resource type {resource_type} (tidelog describes topics and "
                              "this broker)", resource_type=resource_type)


def _topic_entry(entry: Any, synonyms: bool, docs: bool) -> Any:
    key = TOPIC_CONFIGS[entry.name]
    return Entry(name=entry.name, value=entry.value, read_only=False, config_source=_SOURCE_IDS[entry.source],
                 is_default=entry.source is ConfigSource.DEFAULT_CONFIG, is_sensitive=False,
                 synonyms=[Synonym(name=s.name, value=s.value, source=_SOURCE_IDS[s.source]) for s in entry.synonyms]
                 if synonyms else [],
                 config_type=_TYPE_IDS.get(key.type, 0), documentation=entry.doc if docs else None)


def _broker_entries(broker: BrokerConfig, synonyms: bool, docs: bool) -> list[Any]:
    entries = []
    for name in sorted(BROKER_CONFIGS):
        key = BROKER_CONFIGS[name]
        explicit = name in broker.explicit
        value = broker.get(name)
        shown = None if value is None or key.sensitive else key.format(value)  # Kafka: a sensitive value is null
        source = ConfigSource.STATIC_BROKER_CONFIG if explicit else ConfigSource.DEFAULT_CONFIG
        found = [Synonym(name=name, value=shown, source=_SOURCE_IDS[source])] if synonyms else []
        if synonyms and explicit and key.default is not None:
            default = None if key.sensitive else key.format(key.default)
            found.append(Synonym(name=name, value=default, source=_SOURCE_IDS[ConfigSource.DEFAULT_CONFIG]))
        entries.append(Entry(name=name, value=shown, read_only=True, config_source=_SOURCE_IDS[source],
                             is_default=not explicit, is_sensitive=key.sensitive, synonyms=found,
                             config_type=_TYPE_IDS.get(key.type, 0), documentation=key.doc if docs else None))
    return entries


# --- AlterConfigs and IncrementalAlterConfigs -----------------------------------------------------

async def handle_alter_configs(ctx: ApiContext, conn: ConnectionInfo, request: Request) -> Any:
    body = request.body
    changes = [(r.resource_type, r.resource_name, [(c.name, SET, c.value) for c in r.configs]) for r in body.resources]
    results = await ctx.run(alter_configs, ctx.manager, ctx.node_id, changes, bool(body.validate_only), True)
    return AlterConfigsResponse(throttle_time_ms=0, responses=[AlterConfigsResponse.AlterConfigsResourceResponse(**r)
                                                               for r in results])


async def handle_incremental_alter_configs(ctx: ApiContext, conn: ConnectionInfo, request: Request) -> Any:
    body = request.body
    changes = [(r.resource_type, r.resource_name, [(c.name, c.config_operation, c.value) for c in r.configs])
               for r in body.resources]
    results = await ctx.run(alter_configs, ctx.manager, ctx.node_id, changes, bool(body.validate_only), False)
    response = IncrementalAlterConfigsResponse.AlterConfigsResourceResponse
    return IncrementalAlterConfigsResponse(throttle_time_ms=0, responses=[response(**r) for r in results])


def alter_configs(manager: LogManager, node_id: int, changes: list[tuple[int, str, list[tuple[str, int, Any]]]],
                  validate_only: bool, replace: bool) -> list[dict[str, Any]]:
    """One result (response fields) per resource. ``replace``: AlterConfigs' semantics (the given
    set becomes the topic's overrides). Runs in the thread pool."""
    results = []
    for resource_type, name, ops in changes:
        try:
            _alter_resource(manager, node_id, resource_type, name, ops, validate_only, replace)
            results.append(dict(error_code=0, error_message=None, resource_type=resource_type, resource_name=name))
        except Exception as e:  # noqa: BLE001 - every failure becomes this resource's error code
            results.append(dict(error_code=error_code(e), error_message=error_message(e), resource_type=resource_type,
                                resource_name=name))
    return results


def _alter_resource(manager: LogManager, node_id: int, resource_type: int, name: str,
                    ops: list[tuple[str, int, Any]], validate_only: bool, replace: bool) -> None:
    duplicates = sorted(k for k, n in Counter(op[0] for op in ops).items() if n > 1)
    if duplicates:
        raise InvalidRequestError(f"Error due to duplicate config keys: {', '.join(duplicates)}")
    if resource_type == BROKER:
        if name != "":
            _require_this_broker(node_id, name)
        raise InvalidRequestError("Cannot update these configs dynamically: "
                                  f"{', '.join(op[0] for op in ops) or '(none)'} (tidelog broker configs are static: "
                                  "set them in server.properties and restart)")
    if resource_type != TOPIC:
        raise InvalidRequestError(f"Unsupported resource type {resource_type} (tidelog alters topic configs)",
                                  resource_type=resource_type)
    _require_topic(manager, name)
    current = manager.topic_overrides(name)
    updated = {} if replace else dict(current)
    for config, op, value in ops:
        _apply(updated, config, op, value, manager, name)
    check_topic_config_names(updated)
    if validate_only:  # the check alter_topic_config makes before writing, and nothing written
        manager.broker.checked_topic_config(name, updated, current=current)  # the whole new set (ConfigError)
        return
    manager.alter_topic_config(name, set=updated, delete=[k for k in current if k not in updated])  # checks, then writes


def _apply(overrides: dict[str, str], config: str, op: int, value: Any, manager: LogManager, topic: str) -> None:
    if op == SET:
        if value is None:
            raise InvalidRequestError(f"Null value not supported for : {config}", config=config)
        overrides[config] = value
    elif op == DELETE:
        overrides.pop(config, None)
    elif op in (APPEND, SUBTRACT):
        key = TOPIC_CONFIGS.get(config)
        if key is None or key.type is not ConfigType.LIST:
            raise ConfigError(f"Config value {'append' if op == APPEND else 'subtract'} is not allowed for config "
                              f"key: {config}", config=config)
        current = overrides.get(config)
        items = _list_items(current if current is not None else key.format(getattr(manager.topic_config(topic),
                                                                                     key.attribute)))
        given = _list_items(value or "")
        if op == APPEND:
            items += [v for v in given if v not in items]
        else:
            items = [v for v in items if v not in given]
        overrides[config] = ",".join(items)
    else:
        raise InvalidRequestError(f"Unknown config operation {op} for config {config}", config=config)


def _list_items(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip()]


# --- shared ---------------------------------------------------------------------------------------

def _require_topic(manager: LogManager, name: str) -> None:
    if not manager.has_topic(name):
        raise UnknownTopicOrPartitionError(f"Topic '{name}' does not exist.", topic=name)


def _require_this_broker(node_id: int, name: str) -> None:
    try:
        requested = int(name)
    except ValueError:
        raise InvalidRequestError(f"Broker id must be an integer, but it is: {name}") from None
    if requested != node_id:
        raise InvalidRequestError(f"Unexpected broker id, expected {node_id} or empty string, but received {name}")

