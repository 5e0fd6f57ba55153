"""CreateTopics (v2-v7) and DeleteTopics (v1-v6), through the LogManager.

CreateTopics: ``num_partitions`` -1 means ``num.partitions``; replication factor -1 or 1 (this
broker is the only one; more is INVALID_REPLICATION_FACTOR, as Kafka answers when too few brokers
are registered); manual assignments must put every partition on this broker alone, numbered
0..N-1, and then leave both counts at -1 (INVALID_REPLICA_ASSIGNMENT / INVALID_REQUEST). A topic
named twice in one request fails with INVALID_REQUEST. ``validate_only`` checks everything and
creates nothing. From v5 the answer carries the partition count, replication factor and the
topic's overrides (``configs`` with source TOPIC_CONFIG).

One request creates at most :data:`MAX_PARTITIONS_PER_REQUEST` partitions (CreateTopics and
CreatePartitions alike): a topic that would go past it fails with POLICY_VIOLATION, as Kafka's
controller refuses an operation of more than ``MAX_RECORDS_PER_USER_OP`` records; a count of
2^31-1 is answered at once instead of creating directories until the disk is full.

DeleteTopics: by name, or by topic id from v6; unknown names get UNKNOWN_TOPIC_OR_PARTITION,
unknown ids UNKNOWN_TOPIC_ID, an internal topic (``__consumer_offsets``...) INVALID_TOPIC_EXCEPTION
(:mod:`.internal_topics`).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from kafka.protocol.admin import CreateTopicsResponse, DeleteTopicsResponse

from tidelog.errors import (
    ConfigError,
    InvalidPartitionsError,
    InvalidRequestError,
    PolicyViolationError,
    TopicExistsError,
)
from tidelog.manager import LogManager
from tidelog.manager.topics import check_collision, validate_topic_name
from tidelog.server.codec import Request
from tidelog.server.context import ApiContext, ConnectionInfo
from tidelog.server.errors import (
    ErrorCode,
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
    error_code,
    error_message,
)
from tidelog.storage.metadata import topic_id_to_uuid

Created = CreateTopicsResponse.CreatableTopicResult
Deleted = DeleteTopicsResponse.DeletableTopicResult
TOPIC_CONFIG_SOURCE = 1  # DescribeConfigs' DYNAMIC_TOPIC_CONFIG
MAX_PARTITIONS_PER_REQUEST = 10_000  # Kafka's QuorumController.MAX_RECORDS_PER_USER_OP


class PartitionBudget:
    """The partitions one request may still create (see the module doc)."""

    def __init__(self) -> None:
        self.left = MAX_PARTITIONS_PER_REQUEST

    def spend(self, partitions: int, topic: str) -> None:
        """Take ``partitions`` (nothing when not positive) or raise PolicyViolationError."""
        if partitions > self.left:
            raise PolicyViolationError("Unable to perform excessively large batch operation.", topic=topic,
                                       partitions=partitions, max_partitions_per_request=MAX_PARTITIONS_PER_REQUEST)
        self.left -= max(partitions, 0)


async def handle_create_topics(ctx: ApiContext, conn: ConnectionInfo, request: Request) -> Any:
    body = request.body
    results = await ctx.run(create_topics, ctx.manager, ctx.node_id, body.topics, bool(body.validate_only))
    return CreateTopicsResponse(throttle_time_ms=0, topics=results)


def create_topics(manager: LogManager, node_id: int, topics: list[Any], validate_only: bool) -> list[Any]:
    """One result per topic entry. Runs in the thread pool."""
    counts = Counter(t.name for t in topics)
    results = []
    budget = PartitionBudget()
    for topic in topics:
        try:
            if counts[topic.name] > 1:
                raise InvalidRequestError(f"Create topics request from client contains a duplicate topic {topic.name}.")
            partitions = _partition_count(manager, node_id, topic)
            budget.spend(partitions, topic.name)
            configs = {c.name: c.value for c in topic.configs}
            if None in configs.values():
                raise ConfigError("Null value not supported for topic configs: "
                                  + ", ".join(k for k, v in configs.items() if v is None), topic=topic.name)
            results.append(_create(manager, topic.name, partitions, configs, validate_only))
        except Exception as e:  # noqa: BLE001 - every failure becomes this topic's error code
            results.append(Created(name=topic.name, error_code=error_code(e), error_message=error_message(e),
                                   num_partitions=-1, replication_factor=-1, configs=None))
    return results


def _partition_count(manager: LogManager, node_id: int, topic: Any) -> int:
    if topic.assignments:
        if topic.num_partitions != -1 or topic.replication_factor != -1:
            raise InvalidRequestError("Both numPartitions or replicationFactor and replicasAssignments were set. "
                                      "Both cannot be used at the same time.")
        indexes = sorted(a.partition_index for a in topic.assignments)
        if indexes != list(range(len(indexes))):
            raise InvalidReplicaAssignmentError("partitions should be a consecutive 0-based integer sequence",
                                                topic=topic.name)
        if any(list(a.broker_ids) != [node_id] for a in topic.assignments):
            raise InvalidReplicaAssignmentError(f"every partition must be assigned to broker {node_id} alone "
                                                "(the only broker)", topic=topic.name)
        return len(indexes)
    if topic.replication_factor not in (-1, 1):
        factor = topic.replication_factor
        raise InvalidReplicationFactorError(f"Unable to replicate the partition {factor} time(s): The target "
                                            f"replication factor of {factor} cannot be reached because only 1 "
                                            "broker(s) are registered.", topic=topic.name)
    return manager.broker.num_partitions if topic.num_partitions == -1 else topic.num_partitions


def _create(manager: LogManager, name: str, partitions: int, configs: dict[str, str], validate_only: bool) -> Any:
    if validate_only:
        _validate(manager, name, partitions, configs)
        return Created(name=name, topic_id=None, error_code=0, num_partitions=partitions, replication_factor=1,
                       configs=_configs(configs))
    description = manager.create_topic(name, partitions, configs)
    return Created(name=name, topic_id=topic_id_to_uuid(description.topic_id), error_code=0,
                   num_partitions=description.partition_count, replication_factor=1,
                   configs=_configs(description.configs))


def _validate(manager: LogManager, name: str, partitions: int, configs: dict[str, str]) -> None:
    """What :meth:`LogManager.create_topic` checks, without creating anything."""
    validate_topic_name(name)
    if manager.has_topic(name):
        raise TopicExistsError(f"Topic '{name}' already exists.", topic=name)
    check_collision(name, manager.topics())
    if partitions < 1:
        raise InvalidPartitionsError("Number of partitions was set to an invalid non-positive value.", topic=name)
    manager.broker.checked_topic_config(name, configs)


def _configs(configs: Any) -> list[Any]:
    return [Created.CreatableTopicConfigs(name=k, value=v, read_only=False, config_source=TOPIC_CONFIG_SOURCE,
                                          is_sensitive=False) for k, v in sorted(configs.items())]


async def handle_delete_topics(ctx: ApiContext, conn: ConnectionInfo, request: Request) -> Any:
    body = request.body
    if request.api_version >= 6:
        wanted = [(t.name, t.topic_id) for t in body.topics]
    else:
        wanted = [(name, None) for name in body.topic_names]
    results = await ctx.run(delete_topics, ctx.manager, wanted)
    return DeleteTopicsResponse(throttle_time_ms=0, responses=results)


def delete_topics(manager: LogManager, wanted: list[tuple[str | None, Any]]) -> list[Any]:
    """One result per name or id. Runs in the thread pool."""
    by_id = {}
    if any(name is None for name, _ in wanted):
        by_id = {topic_id_to_uuid(manager.describe_topic(n).topic_id): n for n in manager.topics()}
    results = []
    for name, topic_id in wanted:
        target = name if name is not None else by_id.get(topic_id)
        if target is None:
            results.append(Deleted(name=None, topic_id=topic_id, error_code=ErrorCode.UNKNOWN_TOPIC_ID,
                                   error_message="This server does not host this topic ID."))
            continue
        try:
            found_id = topic_id_to_uuid(manager.describe_topic(target).topic_id)
            manager.delete_topic(target)
            results.append(Deleted(name=target, topic_id=found_id, error_code=0))
        except Exception as e:  # noqa: BLE001 - every failure becomes this topic's error code
            results.append(Deleted(name=target, topic_id=topic_id, error_code=error_code(e),
                                   error_message=error_message(e)))
    return results
