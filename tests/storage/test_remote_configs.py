"""Tiered storage's configs: the broker's RemoteLogManagerConfig keys (Kafka 4.x names, defaults and
ranges), the ``rsm.config.`` passthrough, ``remote.log.storage.uri``, the topic keys' effective
local retention, and Kafka's refusals (``LogConfig.validateTopicLogConfigValues``, quoted from
/work/shared/reference/tiered-storage.md §1 and Kafka's source) at topic creation and on alter,
through the manager and the Kafka-protocol handlers. Where tidelog goes past Kafka: compacted
topics may be tiered."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from tidelog.errors import ConfigError
from tidelog.manager import LogManager
from tidelog.server.configs import BROKER, SET, TOPIC, alter_configs, describe_configs
from tidelog.server.topics import _validate as validate_create_topic
from tidelog.storage.config import BROKER_CONFIGS, TOPIC_CONFIGS, BrokerConfig, ConfigSource, LogConfig, describe
from tidelog.storage.log_config import check_tiered_storage
from tidelog.storage.stored_overrides import loadable_overrides
from tidelog.testing import FakeClock, FakeScheduler

LONG_MAX = 2**63 - 1
ON = {"remote.log.storage.system.enable": "true", "remote.log.storage.uri": "file:///tmp/tidelog-remote"}
TIERED = {"remote.storage.enable": "true"}

# Kafka's messages, verbatim
SYSTEM_DISABLED = ("Tiered Storage functionality is disabled in the broker. "
                   "Topic cannot be configured with remote log storage.")
DISABLE_WITHOUT_DELETE = (
    "It is invalid to disable remote storage without deleting remote data. "
    "If you want to keep the remote data and turn to read only, please set "
    "`remote.storage.enable=true,remote.log.copy.disable=true`. "
    "If you want to disable remote storage and delete all remote data, please set "
    "`remote.storage.enable=false,remote.log.delete.on.disable=true`."
)
COPY_DISABLED = ("When `remote.log.copy.disable` is set to true, the `local.retention.{0}` and `retention.{0}` "
                 "must be set to the identical value because there will be no more logs copied to the remote storage.")
STARTUP_REFUSAL = ("You have to delete all topics with the property remote.storage.enable=true before disabling "
                   "tiered storage cluster-wide")

# (key, BrokerConfig attribute, Kafka 4.x default, smallest valid value or None)
BROKER_KEYS = [
    ("remote.log.storage.system.enable", "remote_log_storage_system_enable", False, None),
    ("remote.log.storage.uri", "remote_log_storage_uri", "", None),
    ("remote.log.storage.manager.impl.prefix", "remote_log_storage_manager_impl_prefix", "rsm.config.", None),
    ("remote.log.manager.task.interval.ms", "remote_log_manager_task_interval_ms", 30000, 1),
    ("remote.log.manager.copier.thread.pool.size", "remote_log_manager_copier_thread_pool_size", 10, 1),
    ("remote.log.manager.expiration.thread.pool.size", "remote_log_manager_expiration_thread_pool_size", 10, 1),
    ("remote.log.reader.threads", "remote_log_reader_threads", 10, 1),
    ("remote.log.reader.max.pending.tasks", "remote_log_reader_max_pending_tasks", 100, 1),
    ("remote.log.index.file.cache.total.size.bytes", "remote_log_index_file_cache_total_size_bytes", 1 << 30, 1),
    ("remote.log.manager.copy.max.bytes.per.second", "remote_log_manager_copy_max_bytes_per_second", LONG_MAX, 1),
    ("remote.log.manager.fetch.max.bytes.per.second", "remote_log_manager_fetch_max_bytes_per_second", LONG_MAX, 1),
    ("remote.fetch.max.wait.ms", "remote_fetch_max_wait_ms", 500, 1),
    ("remote.list.offsets.request.timeout.ms", "remote_list_offsets_request_timeout_ms", 30000, 1),
]
INT_KEYS = {"remote.log.manager.copier.thread.pool.size", "remote.log.manager.expiration.thread.pool.size",
            "remote.log.reader.threads", "remote.log.reader.max.pending.tasks", "remote.fetch.max.wait.ms"}


def broker(**props: str) -> BrokerConfig:
    return BrokerConfig.from_properties({k.replace("_", "."): v for k, v in props.items()})


def on(extra: dict[str, str] | None = None) -> BrokerConfig:
    return BrokerConfig.from_properties({**ON, **(extra or {})})


def refusal(call: object) -> str:
    with pytest.raises(ConfigError) as caught:
        call()  # type: ignore[operator]
    return caught.value.message


# --- broker keys ----------------------------------------------------------------------------

@pytest.mark.parametrize(("name", "attribute", "default", "minimum"), BROKER_KEYS, ids=[k[0] for k in BROKER_KEYS])
def test_broker_key_default_parse_and_range(name: str, attribute: str, default: object, minimum: int | None) -> None:
    assert BROKER_CONFIGS[name].default == default
    assert getattr(BrokerConfig.from_properties({}), attribute) == default
    if minimum is None:
        return
    assert getattr(BrokerConfig.from_properties({name: f" {minimum + 41} "}), attribute) == minimum + 41
    message = refusal(lambda: BrokerConfig.from_properties({name: str(minimum - 1)}))
    assert message == f"Invalid value {minimum - 1} for configuration {name}: Value must be at least {minimum}"
    too_big = "2147483648" if name in INT_KEYS else "9223372036854775808"
    assert name in refusal(lambda: BrokerConfig.from_properties({name: too_big}))
    assert name in refusal(lambda: BrokerConfig.from_properties({name: "ten"}))


def test_system_switch_parses_as_a_kafka_boolean() -> None:
    assert on({"remote.log.storage.system.enable": "TRUE"}).remote_log_storage_system_enable is True
    assert "remote.log.storage.system.enable" in refusal(
        lambda: BrokerConfig.from_properties({"remote.log.storage.system.enable": "yes"}))


def test_impl_prefix_may_not_be_empty() -> None:
    assert refusal(lambda: broker(**{"remote.log.storage.manager.impl.prefix": " "})) == (
        "Invalid value   for configuration remote.log.storage.manager.impl.prefix: String may not be empty")


def test_system_on_without_a_uri_names_both_keys() -> None:
    message = refusal(lambda: BrokerConfig.from_properties({"remote.log.storage.system.enable": "true"}))
    assert "remote.log.storage.system.enable" in message and "remote.log.storage.uri" in message
    assert BrokerConfig.from_properties({"remote.log.storage.system.enable": "false"}).remote_log_storage_uri == ""


@pytest.mark.parametrize("uri", ["s3://bucket/prefix", "S3://bucket", "gs://bucket/p", "abfs://c@a.dfs.core.windows.net/p",
                                 "abfss://c@a.dfs.core.windows.net/p", "hdfs://namenode:8020/tidelog", "file:///var/tidelog"])
def test_supported_store_uris_are_accepted(uri: str) -> None:
    assert on({"remote.log.storage.uri": uri}).remote_log_storage_uri == uri


@pytest.mark.parametrize("uri", ["ftp://host/dir", "/var/tidelog", "http://host/bucket", "gcs://bucket/p"])
def test_unsupported_store_uri_names_key_and_value(uri: str) -> None:
    message = refusal(lambda: BrokerConfig.from_properties({"remote.log.storage.uri": uri}))
    assert message == (f"Invalid value {uri} for configuration remote.log.storage.uri: "
                       "the URI's scheme must be one of s3, gs, abfs, abfss, hdfs, file")


def test_uri_refusal_hides_user_info() -> None:
    with pytest.raises(ConfigError) as caught:
        BrokerConfig.from_properties({"remote.log.storage.uri": "sftp://user:hunter2@host/dir"})
    assert "hunter2" not in str(caught.value)
    assert "sftp://***@host/dir" in caught.value.message


# --- rsm.config. passthrough -----------------------------------------------------------------

def test_rsm_config_keys_are_passed_through_prefix_stripped() -> None:
    config = on({"rsm.config.endpoint.url": "http://127.0.0.1:8333", "rsm.config.secret.key": "s3cr3t",
                 "rsm.config.region": "eu-west-1", "node.id": "1"})
    assert dict(config.rsm_config) == {"endpoint.url": "http://127.0.0.1:8333", "region": "eu-west-1",
                                       "secret.key": "s3cr3t"}
    assert config.unknown["node.id"] == "1"  # other unknown keys are kept as before
    assert config.get("rsm.config.region") == "eu-west-1"
    with pytest.raises(TypeError):
        config.rsm_config["region"] = "x"  # type: ignore[index]


def test_rsm_config_follows_the_configured_prefix() -> None:
    config = on({"remote.log.storage.manager.impl.prefix": "store.", "store.region": "r1", "rsm.config.region": "r2"})
    assert dict(config.rsm_config) == {"region": "r1"}
    assert dict(BrokerConfig.from_properties({}).rsm_config) == {}


# --- broker defaults of local retention ------------------------------------------------------

@pytest.mark.parametrize(("props", "message"), [
    ({"log.retention.ms": "1000", "log.local.retention.ms": "-1"},
     "Invalid value -1 for configuration local.retention.ms: Value must not be -1 as retention.ms value is set as 1000."),
    ({"log.retention.hours": "1", "log.local.retention.ms": "3600001"},
     "Invalid value 3600001 for configuration local.retention.ms: Value must not be more than retention.ms property "
     "value: 3600000"),
    ({"log.retention.bytes": "100", "log.local.retention.bytes": "-1"},
     "Invalid value -1 for configuration local.retention.bytes: Value must not be -1 as retention.bytes value is set "
     "as 100."),
    ({"log.retention.bytes": "100", "log.local.retention.bytes": "101"},
     "Invalid value 101 for configuration local.retention.bytes: Value must not be more than retention.bytes "
     "property value: 100"),
])
def test_broker_local_retention_defaults_are_checked_when_the_system_is_on(props: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        on(props)
    assert caught.value.message == message
    assert caught.value.config.startswith("log.local.retention.")  # the key to fix in server.properties
    BrokerConfig.from_properties(props)  # Kafka checks them only with tiered storage on


def test_broker_local_retention_defaults_that_fit_are_accepted() -> None:
    config = on({"log.retention.ms": "1000", "log.local.retention.ms": "1000", "log.local.retention.bytes": "-1"})
    assert config.log_config().local_retention_ms == 1000
    assert config.log_config().local_retention_bytes == -1  # retention.bytes is -1: anything goes


# --- effective local retention --------------------------------------------------------------

def test_effective_local_retention_follows_retention_when_minus_two() -> None:
    config = LogConfig.from_props(None, {"retention.ms": "5000", "retention.bytes": "7000"})
    assert (config.configured_local_retention_ms, config.configured_local_retention_bytes) == (-2, -2)
    assert (config.local_retention_ms, config.local_retention_bytes) == (5000, 7000)
    set_ = config.with_overrides({"local.retention.ms": "100"}, local_retention_bytes=200)
    assert (set_.local_retention_ms, set_.local_retention_bytes) == (100, 200)
    assert set_.overrides_as_properties()["local.retention.ms"] == "100"


def test_effective_local_retention_from_broker_defaults() -> None:
    config = on({"log.retention.hours": "2", "log.local.retention.ms": "60000"}).log_config()
    assert (config.retention_ms, config.local_retention_ms) == (7200000, 60000)
    assert on({"log.retention.hours": "2"}).log_config().local_retention_ms == 7200000


def test_remote_flags() -> None:
    plain = LogConfig.defaults()
    assert not plain.remote_storage_enable and not plain.remote_copy_enabled
    tiered = plain.with_overrides(TIERED)
    assert tiered.remote_storage_enable and tiered.remote_copy_enabled
    read_only = tiered.with_overrides({"remote.log.copy.disable": "true"})
    assert read_only.remote_storage_enable and not read_only.remote_copy_enabled
    assert tiered.with_overrides({"remote.log.delete.on.disable": "true"}).remote_log_delete_on_disable


# --- topic refusals (BrokerConfig.checked_topic_config) --------------------------------------

def test_tiered_topic_is_refused_while_the_system_is_off() -> None:
    assert refusal(lambda: broker().checked_topic_config("t", TIERED)) == SYSTEM_DISABLED
    assert on().checked_topic_config("t", TIERED).remote_storage_enable
    assert not broker().checked_topic_config("t", {"remote.storage.enable": "false"}).remote_storage_enable


@pytest.mark.parametrize("policy", ["compact", "compact,delete", "delete,compact", "delete", ""])
def test_compacted_topics_may_be_tiered(policy: str) -> None:
    config = on().checked_topic_config("t", {**TIERED, "cleanup.policy": policy})
    assert config.remote_storage_enable and config.compact == ("compact" in policy)


@pytest.mark.parametrize("topic", ["__consumer_offsets", "__transaction_state"])
def test_internal_topics_are_never_tiered(topic: str) -> None:
    message = refusal(lambda: on().checked_topic_config(topic, TIERED))
    assert message == f"Topic {topic} is internal and is never tiered: remote.storage.enable=true is not allowed on it"
    assert not on().checked_topic_config(topic, {"cleanup.policy": "compact"}).remote_storage_enable


@pytest.mark.parametrize(("overrides", "message"), [
    ({"retention.ms": "1000", "local.retention.ms": "-1"},
     "Invalid value -1 for configuration local.retention.ms: Value must not be -1 as retention.ms value is set as 1000."),
    ({"retention.ms": "1000", "local.retention.ms": "1001"},
     "Invalid value 1001 for configuration local.retention.ms: Value must not be more than retention.ms property "
     "value: 1000"),
    ({"retention.bytes": "100", "local.retention.bytes": "-1"},
     "Invalid value -1 for configuration local.retention.bytes: Value must not be -1 as retention.bytes value is set "
     "as 100."),
    ({"retention.bytes": "100", "local.retention.bytes": "101"},
     "Invalid value 101 for configuration local.retention.bytes: Value must not be more than retention.bytes "
     "property value: 100"),
    ({"local.retention.ms": "604800001"},  # the default retention.ms is 7 days
     "Invalid value 604800001 for configuration local.retention.ms: Value must not be more than retention.ms property "
     "value: 604800000"),
])
def test_bad_local_retention_of_a_tiered_topic(overrides: dict[str, str], message: str) -> None:
    assert refusal(lambda: on().checked_topic_config("t", {**TIERED, **overrides})) == message
    on().checked_topic_config("t", overrides)  # an untiered topic's local retention is not checked


@pytest.mark.parametrize("overrides", [
    {"retention.ms": "-1", "local.retention.ms": "-1"},
    {"retention.ms": "-1", "local.retention.ms": "99999999999"},
    {"retention.bytes": "-1", "local.retention.bytes": "-1"},
    {"retention.bytes": "-5", "local.retention.bytes": "-1"},  # any negative retention.bytes is unlimited
    {"retention.ms": "1000", "local.retention.ms": "1000", "retention.bytes": "10", "local.retention.bytes": "0"},
])
def test_local_retention_that_fits_is_accepted(overrides: dict[str, str]) -> None:
    on().checked_topic_config("t", {**TIERED, **overrides})


@pytest.mark.parametrize(("overrides", "unit"), [
    ({"retention.ms": "1000", "local.retention.ms": "500"}, "ms"),
    ({"retention.bytes": "1000", "local.retention.bytes": "500"}, "bytes"),
])
def test_copy_disabled_needs_local_retention_equal_to_retention(overrides: dict[str, str], unit: str) -> None:
    read_only = {**TIERED, "remote.log.copy.disable": "true"}
    assert refusal(lambda: on().checked_topic_config("t", {**read_only, **overrides})) == COPY_DISABLED.format(unit)
    on().checked_topic_config("t", {**TIERED, **overrides})  # copying on: a smaller local retention is the point
    on().checked_topic_config("t", read_only)  # -2 follows retention
    equal = {k: v for k, v in overrides.items() if k.startswith("retention")}
    equal[f"local.retention.{unit}"] = equal[f"retention.{unit}"]
    on().checked_topic_config("t", {**read_only, **equal})


def test_disabling_tiering_needs_delete_on_disable() -> None:
    config = on()
    assert refusal(lambda: config.checked_topic_config("t", {}, current=TIERED)) == DISABLE_WITHOUT_DELETE
    assert refusal(lambda: config.checked_topic_config(
        "t", {"remote.storage.enable": "false", "remote.log.copy.disable": "true"}, current=TIERED)) == DISABLE_WITHOUT_DELETE
    config.checked_topic_config("t", {"remote.storage.enable": "false", "remote.log.delete.on.disable": "true"},
                                current=TIERED)
    config.checked_topic_config("t", {**TIERED, "remote.log.copy.disable": "true"}, current=TIERED)  # read-only
    config.checked_topic_config("t", {}, current={"remote.storage.enable": "false"})
    config.checked_topic_config("t", {})  # creation: nothing was tiered


def test_refusals_are_independent_of_the_broker_object() -> None:
    check_tiered_storage("t", LogConfig.defaults(), system_enabled=False)
    with pytest.raises(ConfigError, match="Tiered Storage functionality is disabled"):
        check_tiered_storage("t", LogConfig.defaults().with_overrides(TIERED), system_enabled=False)


# --- stored overrides ------------------------------------------------------------------------

def test_stored_tiered_topic_loads_untiered_while_the_system_is_off() -> None:
    usable, notes = loadable_overrides(broker(), {**TIERED, "retention.ms": "1000"})
    assert usable == {"retention.ms": "1000"}
    assert len(notes) == 1 and notes[0].startswith("remote.storage.enable=true left out") and STARTUP_REFUSAL in notes[0]
    assert loadable_overrides(on(), TIERED) == (TIERED, [])


# --- describe --------------------------------------------------------------------------------

def test_describe_lists_the_topic_keys_as_configured_with_their_broker_synonyms() -> None:
    config = on({"log.local.retention.ms": "60000"})
    entries = {e.name: e for e in describe(config.log_config({**TIERED, "local.retention.bytes": "4096"}), config)}
    for name in ("remote.storage.enable", "local.retention.ms", "local.retention.bytes", "remote.log.copy.disable",
                 "remote.log.delete.on.disable"):
        assert name in entries and "unused" not in entries[name].doc.lower()
    assert (entries["remote.storage.enable"].value, entries["remote.storage.enable"].source) == (
        "true", ConfigSource.TOPIC_CONFIG)
    assert (entries["local.retention.bytes"].value, entries["local.retention.bytes"].source) == (
        "4096", ConfigSource.TOPIC_CONFIG)
    local_ms = entries["local.retention.ms"]
    assert (local_ms.value, local_ms.source) == ("60000", ConfigSource.STATIC_BROKER_CONFIG)
    assert [(s.name, s.value, s.source) for s in local_ms.synonyms] == [
        ("log.local.retention.ms", "60000", ConfigSource.STATIC_BROKER_CONFIG),
        ("log.local.retention.ms", "-2", ConfigSource.DEFAULT_CONFIG),
    ]
    assert entries["remote.log.copy.disable"].value == "false"
    assert describe(LogConfig.defaults()) and {e.name for e in describe(LogConfig.defaults())} == set(TOPIC_CONFIGS)


# --- through the manager and the Kafka-protocol handlers -------------------------------------

@pytest.fixture
def manager_on(tmp_path: Path) -> Iterator[LogManager]:
    yield from _manager(tmp_path, ON)


@pytest.fixture
def manager_off(tmp_path: Path) -> Iterator[LogManager]:
    yield from _manager(tmp_path, {})


def _manager(tmp_path: Path, props: dict[str, str]) -> Iterator[LogManager]:
    clock = FakeClock()
    config = BrokerConfig.from_properties({"log.dirs": str(tmp_path / "logs"), **props})
    manager = LogManager.open(config, clock=clock, scheduler=FakeScheduler(clock))
    try:
        yield manager
    finally:
        manager.shutdown()


def test_manager_refuses_a_tiered_topic_while_the_system_is_off(manager_off: LogManager) -> None:
    assert refusal(lambda: manager_off.create_topic("t", 1, TIERED)) == SYSTEM_DISABLED
    assert not manager_off.has_topic("t")
    manager_off.create_topic("t", 1)
    assert refusal(lambda: manager_off.alter_topic_config("t", set=TIERED)) == SYSTEM_DISABLED
    assert manager_off.topic_overrides("t") == {}


def test_manager_creates_compacted_tiered_topics_and_refuses_a_bare_disable(manager_on: LogManager) -> None:
    manager_on.create_topic("c", 1, {**TIERED, "cleanup.policy": "compact", "local.retention.ms": "1000"})
    assert manager_on.topic_config("c").local_retention_ms == 1000
    assert refusal(lambda: manager_on.alter_topic_config("c", delete=["remote.storage.enable"])) == DISABLE_WITHOUT_DELETE
    assert manager_on.topic_overrides("c")["remote.storage.enable"] == "true"
    manager_on.alter_topic_config("c", set={"remote.storage.enable": "false", "remote.log.delete.on.disable": "true"})
    assert not manager_on.topic_config("c").remote_storage_enable
    assert "internal" in refusal(lambda: manager_on.create_topic("__consumer_offsets", 1, TIERED))


def test_incremental_alter_configs_and_validate_only_create_refuse_like_kafka(manager_on: LogManager) -> None:
    manager_on.create_topic("t", 1, TIERED)
    results = alter_configs(manager_on, 0, [(TOPIC, "t", [("remote.storage.enable", SET, "false")])], True, False)
    assert results[0]["error_code"] == 40  # the wire message is Kafka's, then the context tidelog adds
    assert results[0]["error_message"].startswith(DISABLE_WITHOUT_DELETE + " (config='remote.storage.enable'")
    results = alter_configs(manager_on, 0, [(TOPIC, "t", [("local.retention.ms", SET, "-1"),
                                                          ("retention.ms", SET, "1000")])], True, False)
    assert results[0]["error_code"] == 40
    assert results[0]["error_message"].startswith("Invalid value -1 for configuration local.retention.ms: Value must "
                                                  "not be -1 as retention.ms value is set as 1000. (")
    assert manager_on.topic_overrides("t") == TIERED
    with pytest.raises(ConfigError, match="is internal and is never tiered"):
        validate_create_topic(manager_on, "__transaction_state", 1, dict(TIERED))
    validate_create_topic(manager_on, "compacted", 1, {**TIERED, "cleanup.policy": "compact,delete"})


def test_describe_configs_lists_the_remote_broker_keys(manager_on: LogManager) -> None:
    resource = SimpleNamespace(resource_type=BROKER, resource_name="0", configuration_keys=None)
    [result] = describe_configs(manager_on, 0, [resource], False, True)
    entries = {entry.name: entry for entry in result.configs}
    for name, _attribute, default, _minimum in BROKER_KEYS:
        assert name in entries and entries[name].documentation
    assert entries["remote.log.storage.system.enable"].value == "true"
    assert entries["remote.log.reader.threads"].value == "10"
    topic = SimpleNamespace(resource_type=TOPIC, resource_name="t", configuration_keys=["local.retention.ms"])
    manager_on.create_topic("t", 1, {**TIERED, "local.retention.ms": "5"})
    [described] = describe_configs(manager_on, 0, [topic], False, False)
    assert [(e.name, e.value) for e in described.configs] == [("local.retention.ms", "5")]
