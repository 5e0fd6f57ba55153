"""Storage configs: defaults and synonyms of shared/reference/kafka-storage.md §2, validation,
precedence, server.properties syntax, describe."""

from __future__ import annotations

import dataclasses
import math
import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidelog.errors import ConfigError, StorageError
from tidelog.storage.config import (
    BROKER_CONFIGS,
    TOPIC_CONFIGS,
    BrokerConfig,
    ConfigSource,
    LogConfig,
    describe,
    java_double_string,
)
from tidelog.storage.properties import format_properties, parse_properties

LONG_MAX = 2**63 - 1

# §2.1 with Kafka 4.x defaults (message.timestamp.after.max.ms = 1 h)
TOPIC_DEFAULTS = {
    "segment_bytes": 1073741824,
    "segment_ms": 604800000,
    "segment_jitter_ms": 0,
    "segment_index_bytes": 10485760,
    "index_interval_bytes": 4096,
    "retention_bytes": -1,
    "retention_ms": 604800000,
    "cleanup_policy": frozenset({"delete"}),
    "min_cleanable_dirty_ratio": 0.5,
    "min_compaction_lag_ms": 0,
    "max_compaction_lag_ms": LONG_MAX,
    "delete_retention_ms": 86400000,
    "file_delete_delay_ms": 60000,
    "flush_messages": LONG_MAX,
    "flush_ms": LONG_MAX,
    "message_timestamp_type": "CreateTime",
    "message_timestamp_before_max_ms": LONG_MAX,
    "message_timestamp_after_max_ms": 3600000,
    "max_message_bytes": 1048588,
    "preallocate": False,
    "compression_type": "producer",
    "compression_gzip_level": -1,
    "compression_lz4_level": 9,
    "compression_zstd_level": 3,
}

# §2.2 with Kafka 4.x defaults (num.recovery.threads.per.data.dir = 2)
BROKER_DEFAULTS = {
    "log_retention_check_interval_ms": 300000,
    "log_flush_scheduler_interval_ms": LONG_MAX,
    "log_flush_offset_checkpoint_interval_ms": 60000,
    "log_flush_start_offset_checkpoint_interval_ms": 60000,
    "replica_high_watermark_checkpoint_interval_ms": 5000,
    "num_recovery_threads_per_data_dir": 2,
    "log_initial_task_delay_ms": 30000,
    "log_cleaner_enable": True,
    "log_cleaner_threads": 1,
    "log_cleaner_dedupe_buffer_size": 134217728,
    "log_cleaner_io_buffer_load_factor": 0.9,
    "log_cleaner_io_buffer_size": 524288,
    "log_cleaner_io_max_bytes_per_second": 1.7976931348623157e308,
    "log_cleaner_backoff_ms": 15000,
    "message_max_bytes": 1048588,
    "log_dir_failure_timeout_ms": 30000,
}

# §2.1 synonyms, in precedence order
SYNONYMS = {
    "segment.bytes": ["log.segment.bytes"],
    "segment.ms": ["log.roll.ms", "log.roll.hours"],
    "segment.jitter.ms": ["log.roll.jitter.ms", "log.roll.jitter.hours"],
    "segment.index.bytes": ["log.index.size.max.bytes"],
    "index.interval.bytes": ["log.index.interval.bytes"],
    "retention.bytes": ["log.retention.bytes"],
    "retention.ms": ["log.retention.ms", "log.retention.minutes", "log.retention.hours"],
    "cleanup.policy": ["log.cleanup.policy"],
    "min.cleanable.dirty.ratio": ["log.cleaner.min.cleanable.ratio"],
    "min.compaction.lag.ms": ["log.cleaner.min.compaction.lag.ms"],
    "max.compaction.lag.ms": ["log.cleaner.max.compaction.lag.ms"],
    "delete.retention.ms": ["log.cleaner.delete.retention.ms"],
    "file.delete.delay.ms": ["log.segment.delete.delay.ms"],
    "flush.messages": ["log.flush.interval.messages"],
    "flush.ms": ["log.flush.interval.ms", "log.flush.scheduler.interval.ms"],
    "message.timestamp.type": ["log.message.timestamp.type"],
    "message.timestamp.before.max.ms": ["log.message.timestamp.before.max.ms"],
    "message.timestamp.after.max.ms": ["log.message.timestamp.after.max.ms"],
    "max.message.bytes": ["message.max.bytes"],
    "preallocate": ["log.preallocate"],
    "compression.type": ["compression.type"],
    "compression.gzip.level": ["compression.gzip.level"],
    "compression.lz4.level": ["compression.lz4.level"],
    "compression.zstd.level": ["compression.zstd.level"],
}


# --- tables and defaults --------------------------------------------------------------------

@pytest.mark.parametrize(("attribute", "expected"), TOPIC_DEFAULTS.items())
def test_topic_default(attribute: str, expected: object) -> None:
    assert getattr(LogConfig.defaults(), attribute) == expected
    assert getattr(LogConfig.from_props(), attribute) == expected
    assert getattr(BrokerConfig.from_properties({}).log_config(), attribute) == expected


@pytest.mark.parametrize(("attribute", "expected"), BROKER_DEFAULTS.items())
def test_broker_default(attribute: str, expected: object) -> None:
    assert getattr(BrokerConfig.from_properties({}), attribute) == expected


def test_log_config_fields_match_the_topic_table() -> None:
    fields = [f.name for f in dataclasses.fields(LogConfig) if f.name != "overridden"]
    assert fields == [key.attribute for key in TOPIC_CONFIGS.values()]


@pytest.mark.parametrize(("name", "synonyms"), SYNONYMS.items())
def test_topic_synonyms_in_precedence_order(name: str, synonyms: list[str]) -> None:
    assert [s.name for s in TOPIC_CONFIGS[name].synonyms] == synonyms
    assert all(s in BROKER_CONFIGS for s in synonyms)


@pytest.mark.parametrize("key", TOPIC_CONFIGS.values(), ids=lambda k: k.name)
def test_broker_synonym_defaults_agree_with_topic_default(key) -> None:  # type: ignore[no-untyped-def]
    for synonym in key.synonyms:
        broker_default = BROKER_CONFIGS[synonym.name].default
        if broker_default is not None:
            converted = broker_default * synonym.ms_per_unit if synonym.ms_per_unit != 1 else broker_default
            assert key.parse(converted) == key.parse(key.default), synonym.name


def test_log_dirs_default_is_tmp_kafka_logs() -> None:
    assert BrokerConfig.from_properties({}).log_dirs == ["/tmp/kafka-logs"]


# --- precedence -----------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("broker", "expected"),
    [
        ({}, 604800000),
        ({"log.retention.hours": "24"}, 86400000),
        ({"log.retention.hours": "24", "log.retention.minutes": "30"}, 1800000),
        ({"log.retention.hours": "24", "log.retention.minutes": "30", "log.retention.ms": "1234"}, 1234),
        ({"log.retention.minutes": "30", "log.retention.ms": "1234"}, 1234),
        ({"log.retention.hours": "-1"}, -1),
        ({"log.retention.minutes": "-5"}, -1),
        ({"log.retention.ms": "-5"}, -1),
        ({"log.retention.ms": "-1", "log.retention.hours": "1"}, -1),
    ],
)
def test_retention_ms_synonym_precedence(broker: dict[str, str], expected: int) -> None:
    assert LogConfig.from_props(broker).retention_ms == expected


@pytest.mark.parametrize(
    ("broker", "expected"),
    [({}, 604800000), ({"log.roll.hours": "1"}, 3600000), ({"log.roll.hours": "1", "log.roll.ms": "500"}, 500)],
)
def test_segment_ms_synonym_precedence(broker: dict[str, str], expected: int) -> None:
    assert LogConfig.from_props(broker).segment_ms == expected


@pytest.mark.parametrize(
    ("broker", "expected"),
    [({}, 0), ({"log.roll.jitter.hours": "2"}, 7200000), ({"log.roll.jitter.hours": "2", "log.roll.jitter.ms": "9"}, 9)],
)
def test_segment_jitter_ms_synonym_precedence(broker: dict[str, str], expected: int) -> None:
    assert LogConfig.from_props(broker).segment_jitter_ms == expected


@pytest.mark.parametrize(
    ("broker", "expected"),
    [
        ({}, LONG_MAX),
        ({"log.flush.scheduler.interval.ms": "2000"}, 2000),
        ({"log.flush.scheduler.interval.ms": "2000", "log.flush.interval.ms": "100"}, 100),
    ],
)
def test_flush_ms_synonym_precedence(broker: dict[str, str], expected: int) -> None:
    assert LogConfig.from_props(broker).flush_ms == expected


@pytest.mark.parametrize(
    ("broker_key", "raw", "attribute", "expected"),
    [
        ("log.segment.bytes", "2048", "segment_bytes", 2048),
        ("log.index.size.max.bytes", "1024", "segment_index_bytes", 1024),
        ("log.index.interval.bytes", "1", "index_interval_bytes", 1),
        ("log.retention.bytes", "100", "retention_bytes", 100),
        ("log.cleanup.policy", "compact", "cleanup_policy", frozenset({"compact"})),
        ("log.cleaner.min.cleanable.ratio", "0.1", "min_cleanable_dirty_ratio", 0.1),
        ("log.cleaner.min.compaction.lag.ms", "5", "min_compaction_lag_ms", 5),
        ("log.cleaner.max.compaction.lag.ms", "50", "max_compaction_lag_ms", 50),
        ("log.cleaner.delete.retention.ms", "7", "delete_retention_ms", 7),
        ("log.segment.delete.delay.ms", "0", "file_delete_delay_ms", 0),
        ("log.flush.interval.messages", "1", "flush_messages", 1),
        ("log.message.timestamp.type", "LogAppendTime", "message_timestamp_type", "LogAppendTime"),
        ("log.message.timestamp.before.max.ms", "10", "message_timestamp_before_max_ms", 10),
        ("log.message.timestamp.after.max.ms", "20", "message_timestamp_after_max_ms", 20),
        ("message.max.bytes", "100", "max_message_bytes", 100),
        ("log.preallocate", "true", "preallocate", True),
        ("compression.type", "zstd", "compression_type", "zstd"),
        ("compression.gzip.level", "9", "compression_gzip_level", 9),
        ("compression.lz4.level", "1", "compression_lz4_level", 1),
        ("compression.zstd.level", "-5", "compression_zstd_level", -5),
    ],
)
def test_single_broker_synonym_supplies_topic_default(broker_key: str, raw: str, attribute: str, expected: object) -> None:
    assert getattr(LogConfig.from_props({broker_key: raw}), attribute) == expected


def test_topic_override_beats_every_broker_synonym() -> None:
    broker = BrokerConfig.from_properties({"log.retention.ms": "1", "log.retention.hours": "2", "log.segment.bytes": "100"})
    config = LogConfig.from_props(broker, {"retention.ms": "42", "segment.bytes": 77})
    assert (config.retention_ms, config.segment_bytes) == (42, 77)
    assert config.overridden == {"retention.ms", "segment.bytes"}


def test_topic_retention_below_minus_one_is_rejected_while_broker_side_clamps() -> None:
    with pytest.raises(ConfigError, match="Invalid value -2 for configuration retention.ms: Value must be at least -1"):
        LogConfig.from_props(overrides={"retention.ms": "-2"})
    assert LogConfig.from_props({"log.retention.ms": "-2"}).retention_ms == -1


def test_broker_synonym_that_breaks_topic_rule_is_reported_under_broker_name() -> None:
    with pytest.raises(ConfigError, match="for configuration log.roll.ms: Value must be at least 1 \\(as segment.ms\\)"):
        BrokerConfig.from_properties({"log.roll.ms": "0"})


def test_invalid_value_keeps_the_reason_as_an_attribute() -> None:
    with pytest.raises(ConfigError) as raised:
        BrokerConfig.from_properties({"log.roll.ms": "0"})
    assert raised.value.reason == "Value must be at least 1 (as segment.ms)"
    assert raised.value.config == "log.roll.ms"
    assert isinstance(raised.value.__cause__, ConfigError)
    assert raised.value.__cause__.reason == "Value must be at least 1"


# --- validation -----------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("name", "raw", "message"),
    [
        ("segment.bytes", "-5", "Invalid value -5 for configuration segment.bytes: Value must be at least 14"),
        ("segment.bytes", "13", "Value must be at least 14"),
        ("segment.bytes", "2147483648", "Not a number of type INT"),
        ("segment.bytes", "abc", "Invalid value abc for configuration segment.bytes: Not a number of type INT"),
        ("segment.bytes", "1e3", "Not a number of type INT"),
        ("segment.bytes", "1_000", "Not a number of type INT"),
        ("segment.bytes", "", "Not a number of type INT"),
        ("segment.ms", "0", "Value must be at least 1"),
        ("segment.ms", "9223372036854775808", "Not a number of type LONG"),
        ("segment.jitter.ms", "-1", "Value must be at least 0"),
        ("segment.index.bytes", "3", "Value must be at least 12"),
        ("segment.index.bytes", "11", "Invalid value 11 for configuration segment.index.bytes: Value must be at least 12"),
        ("index.interval.bytes", "-1", "Value must be at least 0"),
        ("min.cleanable.dirty.ratio", "1.5", "Value must be no more than 1"),
        ("min.cleanable.dirty.ratio", "-0.1", "Value must be at least 0"),
        ("min.cleanable.dirty.ratio", "NaN", "Value must be a number"),
        ("min.cleanable.dirty.ratio", "half", "Not a number of type DOUBLE"),
        ("min.compaction.lag.ms", "-1", "Value must be at least 0"),
        ("max.compaction.lag.ms", "0", "Value must be at least 1"),
        ("delete.retention.ms", "-1", "Value must be at least 0"),
        ("file.delete.delay.ms", "-1", "Value must be at least 0"),
        ("flush.messages", "0", "Value must be at least 1"),
        ("flush.ms", "-1", "Value must be at least 0"),
        ("cleanup.policy", "compact,remove", "String must be one of: compact, delete"),
        ("cleanup.policy", "compact,,delete", "String must be one of: compact, delete"),
        ("message.timestamp.type", "WallClock", "String must be one of: CreateTime, LogAppendTime"),
        ("message.timestamp.before.max.ms", "-1", "Value must be at least 0"),
        ("message.timestamp.after.max.ms", "-1", "Value must be at least 0"),
        ("max.message.bytes", "-1", "Value must be at least 0"),
        ("preallocate", "yes", "Expected value to be either true or false"),
        ("compression.type", "brotli", "String must be one of: uncompressed, zstd, lz4, snappy, gzip, producer"),
        ("compression.gzip.level", "0", "Value must be between 1 and 9, or -1"),
        ("compression.gzip.level", "10", "Value must be between 1 and 9, or -1"),
        ("compression.lz4.level", "18", "Value must be no more than 17"),
        ("compression.zstd.level", "23", "Value must be no more than 22"),
        ("compression.zstd.level", "-131073", "Value must be at least -131072"),
        ("min.insync.replicas", "0", "Value must be at least 1"),
        ("leader.replication.throttled.replicas", "0:1,x", "must be the literal '*'"),
        ("local.retention.ms", "-3", "Value must be at least -2"),
    ],
)
def test_invalid_topic_value_names_key_value_and_rule(name: str, raw: str, message: str) -> None:
    with pytest.raises(ConfigError) as raised:
        LogConfig.from_props(overrides={name: raw})
    assert message in raised.value.message
    assert (raised.value.config, raised.value.value) == (name, raw)
    assert raised.value.error_code == 40


@pytest.mark.parametrize(
    ("name", "raw", "expected"),
    [
        ("segment.bytes", "14", 14),
        ("segment.bytes", " 1024 ", 1024),
        ("segment.bytes", "+1024", 1024),
        ("segment.bytes", "2147483647", 2147483647),
        ("retention.bytes", "-9223372036854775808", -(2**63)),
        ("min.cleanable.dirty.ratio", "0", 0.0),
        ("min.cleanable.dirty.ratio", "1e-1", 0.1),
        ("min.cleanable.dirty.ratio", ".25d", 0.25),
        ("preallocate", "TRUE", True),
        ("preallocate", " False ", False),
        ("cleanup.policy", "Compact , DELETE", frozenset({"compact", "delete"})),
        ("cleanup.policy", "", frozenset()),
        ("message.timestamp.type", "logappendtime", "LogAppendTime"),
        ("compression.type", "GZIP", "gzip"),
        ("compression.gzip.level", "-1", -1),
        ("leader.replication.throttled.replicas", "*", ("*",)),
        ("leader.replication.throttled.replicas", "0:1, 1:2", ("0:1", "1:2")),
    ],
)
def test_valid_topic_value_is_parsed_and_normalized(name: str, raw: str, expected: object) -> None:
    config = LogConfig.from_props(overrides={name: raw})
    assert getattr(config, TOPIC_CONFIGS[name].attribute) == expected


def test_typed_values_are_accepted_and_bool_is_not_an_int() -> None:
    config = LogConfig.from_props(overrides={"segment.bytes": 100, "preallocate": True, "min.cleanable.dirty.ratio": 1})
    assert (config.segment_bytes, config.preallocate, config.min_cleanable_dirty_ratio) == (100, True, 1.0)
    with pytest.raises(ConfigError, match="segment.bytes"):
        LogConfig.from_props(overrides={"segment.bytes": True})
    with pytest.raises(ConfigError, match="Not a number of type INT"):
        LogConfig.from_props(overrides={"segment.bytes": 2**31})


def test_unknown_topic_config_is_rejected() -> None:
    with pytest.raises(ConfigError, match="Unknown topic config name: segment.size"):
        LogConfig.from_props(overrides={"segment.size": "1"})


def test_topic_key_passed_as_broker_property_is_rejected() -> None:
    with pytest.raises(ConfigError, match="segment.bytes is a topic config, not a broker config"):
        LogConfig.from_props({"segment.bytes": "100"})


def test_broker_key_is_not_a_topic_config() -> None:
    with pytest.raises(ConfigError, match="Unknown topic config name: log.segment.bytes"):
        LogConfig.from_props(overrides={"log.segment.bytes": "1"})


@pytest.mark.parametrize(
    ("name", "replacement"),
    [
        ("message.timestamp.difference.max.ms", "message.timestamp.before.max.ms and message.timestamp.after.max.ms"),
        ("message.format.version", "v2 record format"),
        ("message.downconversion.enable", "no longer down-convert"),
    ],
)
def test_topic_config_removed_in_4_0_is_rejected_naming_replacement(name: str, replacement: str) -> None:
    with pytest.raises(ConfigError, match=f"{name} was removed in Kafka 4.0") as raised:
        LogConfig.from_props(overrides={name: "1"})
    assert replacement in raised.value.message


@pytest.mark.parametrize(
    "name", ["log.message.timestamp.difference.max.ms", "log.message.format.version", "log.message.downconversion.enable"]
)
def test_broker_config_removed_in_4_0_is_rejected(name: str) -> None:
    with pytest.raises(ConfigError, match=f"{name} was removed in Kafka 4.0"):
        BrokerConfig.from_properties({name: "1"})


def test_min_compaction_lag_above_max_is_rejected_naming_both() -> None:
    with pytest.raises(ConfigError) as raised:
        LogConfig.from_props(overrides={"min.compaction.lag.ms": "100", "max.compaction.lag.ms": "99"})
    assert "min.compaction.lag.ms (100) > max.compaction.lag.ms (99)" in raised.value.message


def test_min_compaction_lag_above_broker_max_is_rejected() -> None:
    with pytest.raises(ConfigError, match="min.compaction.lag.ms \\(100\\) > max.compaction.lag.ms \\(50\\)"):
        LogConfig.from_props({"log.cleaner.max.compaction.lag.ms": "50"}, {"min.compaction.lag.ms": "100"})


def test_broker_compaction_lags_in_conflict_are_rejected_at_load() -> None:
    broker = {"log.cleaner.min.compaction.lag.ms": "100", "log.cleaner.max.compaction.lag.ms": "50"}
    with pytest.raises(ConfigError, match="min.compaction.lag.ms \\(100\\) > max.compaction.lag.ms \\(50\\)"):
        BrokerConfig.from_properties(broker)


def test_direct_construction_validates_and_normalizes() -> None:
    assert LogConfig(cleanup_policy="compact, delete").cleanup_policy == {"compact", "delete"}  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="Invalid value 13 for configuration segment.bytes"):
        LogConfig(segment_bytes=13)


def test_invalid_broker_value_names_broker_key() -> None:
    with pytest.raises(ConfigError, match="Invalid value 0 for configuration log.roll.hours: Value must be at least 1"):
        BrokerConfig.from_properties({"log.roll.hours": "0"})
    with pytest.raises(ConfigError, match="log.cleaner.threads"):
        BrokerConfig.from_properties({"log.cleaner.threads": "-1"})
    with pytest.raises(ConfigError, match="num.recovery.threads.per.data.dir"):
        BrokerConfig.from_properties({"num.recovery.threads.per.data.dir": "0"})


# --- derived values and copies --------------------------------------------------------------

def test_compact_and_delete_flags() -> None:
    assert (LogConfig().compact, LogConfig().delete) == (False, True)
    both = LogConfig.from_props(overrides={"cleanup.policy": "compact,delete"})
    assert (both.compact, both.delete) == (True, True)
    neither = LogConfig.from_props(overrides={"cleanup.policy": ""})
    assert (neither.compact, neither.delete) == (False, False)


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({"segment.ms": "1000", "max.compaction.lag.ms": "10"}, 1000),
        ({"segment.ms": "1000", "max.compaction.lag.ms": "10", "cleanup.policy": "compact"}, 10),
        ({"segment.ms": "5", "max.compaction.lag.ms": "10", "cleanup.policy": "compact"}, 5),
        ({"segment.ms": "1000", "cleanup.policy": "compact"}, 1000),
    ],
)
def test_max_segment_ms(overrides: dict[str, str], expected: int) -> None:
    assert LogConfig.from_props(overrides=overrides).max_segment_ms == expected


def test_init_file_size() -> None:
    assert LogConfig(segment_bytes=1024).init_file_size == 0
    assert LogConfig(segment_bytes=1024, preallocate=True).init_file_size == 1024


def test_random_segment_jitter_bound() -> None:
    rng = random.Random(7)
    assert LogConfig().random_segment_jitter(rng) == 0
    config = LogConfig(segment_ms=100, segment_jitter_ms=1000)
    draws = {config.random_segment_jitter(rng) for _ in range(500)}
    assert min(draws) >= 0 and max(draws) < 100 and len(draws) > 50


def test_with_overrides_by_name_and_keyword() -> None:
    base = LogConfig.from_props({"log.retention.hours": "1"}, {"segment.bytes": "2048"})
    changed = base.with_overrides({"cleanup.policy": "compact"}, retention_ms=-1, segment_index_bytes="4096")
    assert (changed.cleanup_policy, changed.retention_ms, changed.segment_index_bytes) == ({"compact"}, -1, 4096)
    assert changed.segment_bytes == 2048
    assert changed.overridden == {"segment.bytes", "cleanup.policy", "retention.ms", "segment.index.bytes"}
    assert base.retention_ms == 3600000


def test_with_overrides_validates() -> None:
    with pytest.raises(ConfigError, match="Unknown topic config name: segment.byte"):
        LogConfig().with_overrides(segment_byte=1)
    with pytest.raises(ConfigError, match="segment.bytes"):
        LogConfig().with_overrides(segment_bytes=1)


def test_to_properties_round_trips() -> None:
    config = LogConfig.from_props(
        {"log.retention.minutes": "3"},
        {"cleanup.policy": "delete,compact", "min.cleanable.dirty.ratio": "0.25", "preallocate": "true"},
    )
    props = config.to_properties()
    assert props["cleanup.policy"] == "compact,delete"
    assert props["preallocate"] == "true"
    assert props["retention.ms"] == "180000"
    assert props["min.cleanable.dirty.ratio"] == "0.25"
    assert set(props) == set(TOPIC_CONFIGS)
    assert LogConfig.from_props(overrides=props) == config


def test_overrides_as_properties_lists_only_topic_overrides() -> None:
    config = LogConfig.from_props({"log.retention.hours": "1"}, {"segment.bytes": "2048"}).with_overrides(retention_ms=5)
    assert config.overrides_as_properties() == {"segment.bytes": "2048", "retention.ms": "5"}


def test_equality_ignores_how_values_were_set() -> None:
    assert LogConfig.from_props(overrides={"segment.bytes": "1073741824"}) == LogConfig.defaults()


@pytest.mark.parametrize(
    ("value", "text"),
    [(0.5, "0.5"), (1.0, "1.0"), (0.0, "0.0"), (1e7, "1.0E7"), (1.7976931348623157e308, "1.7976931348623157E308"),
     (1e-4, "1.0E-4"), (0.001, "0.001"), (-2.5e10, "-2.5E10"), (math.inf, "Infinity")],
)
def test_java_double_string(value: float, text: str) -> None:
    assert java_double_string(value) == text


# --- broker config --------------------------------------------------------------------------

def test_log_dirs_wins_over_log_dir_and_is_comma_separated() -> None:
    assert BrokerConfig.from_properties({"log.dir": "/x"}).log_dirs == ["/x"]
    assert BrokerConfig.from_properties({"log.dir": "/x", "log.dirs": " /a , /b,/c "}).log_dirs == ["/a", "/b", "/c"]
    assert BrokerConfig.from_properties({"log.dirs": "/a,,/b,"}).log_dirs == ["/a", "/b"]


def test_empty_log_dirs_is_rejected() -> None:
    with pytest.raises(ConfigError, match="At least one log directory"):
        BrokerConfig.from_properties({"log.dirs": " ", "log.dir": "/x"})


def test_duplicate_log_dirs_are_rejected() -> None:
    with pytest.raises(ConfigError, match="duplicate log directories: /a"):
        BrokerConfig.from_properties({"log.dirs": "/a,/b,/a"})


def test_unknown_broker_keys_are_kept_untyped() -> None:
    broker = BrokerConfig.from_properties({"process.roles": "broker", "node.id": "1", "log.cleaner.threads": "3"})
    assert broker.unknown == {"process.roles": "broker", "node.id": "1"}
    assert broker.get("node.id") == "1"
    assert broker.get("log.cleaner.threads") == 3
    assert broker.log_cleaner_threads == 3
    assert broker.is_set("process.roles") and not broker.is_set("log.cleaner.backoff.ms")
    assert broker.get("log.roll.ms") is None
    with pytest.raises(ConfigError, match="Unknown broker config name: nope"):
        broker.get("nope")


def test_topic_default_reports_supplying_broker_key() -> None:
    broker = BrokerConfig.from_properties({"log.retention.minutes": "2"})
    assert broker.topic_default(TOPIC_CONFIGS["retention.ms"]) == (120000, "log.retention.minutes")
    assert broker.topic_default(TOPIC_CONFIGS["segment.bytes"]) == (1073741824, None)


SERVER_PROPERTIES = """\
# Licensed to the Apache Software Foundation (ASF) ...
! bang comment too
node.id=1
process.roles = broker,controller
listeners:PLAINTEXT://:9092,CONTROLLER://:9093
log.dirs   /data/one,\\
           /data/two

    log.retention.hours=24
log.segment.bytes=1048576
# a comment ending in a backslash is not continued \\
log.cleaner.threads=2
"""


def test_load_server_properties_file(tmp_path: Path) -> None:
    path = tmp_path / "server.properties"
    path.write_text(SERVER_PROPERTIES)
    broker = BrokerConfig.load(path, overrides={"log.cleaner.threads": "4"})
    assert broker.log_dirs == ["/data/one", "/data/two"]
    assert broker.log_cleaner_threads == 4
    assert broker.unknown == {"node.id": "1", "process.roles": "broker,controller"}
    assert broker.listeners == "PLAINTEXT://:9092,CONTROLLER://:9093"  # a server key, typed
    config = broker.log_config()
    assert (config.retention_ms, config.segment_bytes) == (86400000, 1048576)


def test_server_keys_are_typed_with_kafkas_defaults() -> None:
    broker = BrokerConfig.from_properties({})
    assert (broker.listeners, broker.socket_request_max_bytes) == ("PLAINTEXT://127.0.0.1:9092", 104857600)
    with pytest.raises(ConfigError, match="socket.request.max.bytes"):
        BrokerConfig.from_properties({"socket.request.max.bytes": "0"})


def test_load_invalid_value_names_file_and_key(tmp_path: Path) -> None:
    path = tmp_path / "server.properties"
    path.write_text("log.segment.bytes=1\n")
    with pytest.raises(ConfigError) as raised:
        BrokerConfig.load(path)
    assert raised.value.path == path and raised.value.config == "log.segment.bytes"


def test_load_missing_file_raises_storage_error(tmp_path: Path) -> None:
    with pytest.raises(StorageError):
        BrokerConfig.load(tmp_path / "missing.properties")


# --- Java properties syntax -----------------------------------------------------------------

@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a=b", {"a": "b"}),
        ("a = b", {"a": "b"}),
        ("a:b", {"a": "b"}),
        ("a b", {"a": "b"}),
        ("a \t: b", {"a": "b"}),
        ("a==b", {"a": "=b"}),
        ("a", {"a": ""}),
        ("a=", {"a": ""}),
        ("a=b  ", {"a": "b  "}),
        ("  #c\n!c\n\n\t\fa=1", {"a": "1"}),
        ("a=1\r\nb=2\rc=3", {"a": "1", "b": "2", "c": "3"}),
        ("a=x\\\n   y\\\n  z", {"a": "xyz"}),
        ("a=x\\\n#not a comment", {"a": "x#not a comment"}),
        ("a=x\\\n\nb=2", {"a": "x", "b": "2"}),
        ("a=x\\\\\nb=2", {"a": "x\\", "b": "2"}),
        ("a=x\\", {"a": "x"}),
        ("k\\=ey=v", {"k=ey": "v"}),
        ("k\\ ey=v", {"k ey": "v"}),
        ("k\\:=v", {"k:": "v"}),
        ("a=\\t\\n\\r\\f\\\\\\q", {"a": "\t\n\r\f\\q"}),
        ("a=\\u00e9\\u0041", {"a": "éA"}),
        ("a=\\ud83d\\ude00", {"a": "\U0001F600"}),
        ("a=1\na=2", {"a": "2"}),
        ("# only comments\n", {}),
        ("", {}),
    ],
)
def test_parse_properties_like_java(text: str, expected: dict[str, str]) -> None:
    assert parse_properties(text) == expected


def test_parse_properties_malformed_unicode_escape_names_line() -> None:
    with pytest.raises(ConfigError, match="Malformed \\\\uxxxx encoding") as raised:
        parse_properties("a=1\nb=\\u12")
    assert raised.value.line_number == 2


def test_format_properties_escapes_like_java_store() -> None:
    text = format_properties({"k ey": " lead=:#! é\t", "b": "x\\y"}, comments=("", "Thu Oct 24 12:00:05 UTC 2024"))
    assert text == "#\n#Thu Oct 24 12:00:05 UTC 2024\nb=x\\\\y\nk\\ ey=\\ lead\\=\\:\\#\\! \\u00E9\\t\n"


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(st.text(min_size=1, max_size=12), st.text(max_size=20), max_size=6))
def test_format_then_parse_properties_round_trips(props: dict[str, str]) -> None:
    assert parse_properties(format_properties(props, comments=("",))) == props


# --- describe -------------------------------------------------------------------------------

def test_describe_sources_and_synonyms() -> None:
    broker = BrokerConfig.from_properties({"log.retention.hours": "24", "log.retention.minutes": "60"})
    entries = {e.name: e for e in describe(broker.log_config({"segment.bytes": "2048"}), broker)}
    assert list(entries) == sorted(TOPIC_CONFIGS)

    segment = entries["segment.bytes"]
    assert (segment.value, segment.source) == ("2048", ConfigSource.TOPIC_CONFIG)
    assert [(s.name, s.value, s.source) for s in segment.synonyms] == [
        ("segment.bytes", "2048", ConfigSource.TOPIC_CONFIG),
        ("log.segment.bytes", "1073741824", ConfigSource.DEFAULT_CONFIG),
    ]

    retention = entries["retention.ms"]
    assert (retention.value, retention.source) == ("3600000", ConfigSource.STATIC_BROKER_CONFIG)
    assert [(s.name, s.value, s.source) for s in retention.synonyms] == [
        ("log.retention.minutes", "60", ConfigSource.STATIC_BROKER_CONFIG),
        ("log.retention.hours", "24", ConfigSource.STATIC_BROKER_CONFIG),
        ("log.retention.hours", "168", ConfigSource.DEFAULT_CONFIG),
    ]

    throttle = entries["leader.replication.throttled.replicas"]
    assert (throttle.value, throttle.source) == ("", ConfigSource.DEFAULT_CONFIG)


def test_describe_without_broker_reports_defaults() -> None:
    entries = {e.name: e for e in describe(LogConfig.defaults())}
    assert all(e.source is ConfigSource.DEFAULT_CONFIG for e in entries.values())
    assert entries["cleanup.policy"].value == "delete"
