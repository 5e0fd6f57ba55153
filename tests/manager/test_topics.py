"""Topics: names, the registry file, the lifecycle through the LogManager (create, describe, add
partitions, alter configs, delete) and the registry's crash completion at start-up.

Crash-phase tests fake the on-disk state a crash leaves between the registry write (the commit
point) and the partition dirs, then reopen: (a) registry written, dirs missing; (b) deletion
recorded, dir not yet renamed; (c) dirs without a registry (a Kafka data dir); (d) copies with
different epochs; (e) an unreadable copy.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from types import MappingProxyType

import pytest
from manager_helpers import (
    Opener,
    batch,
    read_offsets,
    registry,
    sub_dirs,
    tp,
    write_registry_json,
)

from tidelog.errors import (
    CheckpointError,
    ConfigError,
    InvalidPartitionsError,
    InvalidTopicError,
    TidelogError,
    TopicExistsError,
    UnknownTopicOrPartitionError,
)
from tidelog.storage.metadata import read_meta_properties
from tidelog.manager.topics import (
    REGISTRY_FILE,
    RegistryState,
    TopicRecord,
    check_collision,
    decode_registry,
    read_newest_registry,
    validate_topic_name,
    write_registry,
)
from tidelog.storage.log import Log
from tidelog.storage.metadata import PartitionMetadataFile, new_topic_id

# --- names ----------------------------------------------------------------------------------

BAD_NAMES = [
    ("", "Topic name is illegal, it can't be empty"),
    (".", 'Topic name cannot be "." or ".."'),
    ("..", 'Topic name cannot be "." or ".."'),
    ("x" * 250, "Topic name is illegal, it can't be longer than 249 characters, topic name: " + "x" * 250),
    ("with space", 'Topic name "with space" is illegal, it contains a character other than ASCII alphanumerics, '
                   "'.', '_' and '-'"),
    ("slash/name", "contains a character other than ASCII alphanumerics"),
    ("caf\u00e9", "contains a character other than ASCII alphanumerics"),
    ("star*", "contains a character other than ASCII alphanumerics"),
]


@pytest.mark.parametrize(("name", "message"), BAD_NAMES, ids=["empty", "dot", "dotdot", "250", "space", "slash",
                                                              "non-ascii", "star"])
def test_validate_topic_name_refuses_with_kafka_wording(name: str, message: str) -> None:
    with pytest.raises(InvalidTopicError, match=re.escape(message)) as raised:
        validate_topic_name(name)
    assert raised.value.error_code == 17


@pytest.mark.parametrize("name", ["a", "x" * 249, "a.b_c-D9", "...", "-", "_"])
def test_validate_topic_name_accepts_legal_names(name: str) -> None:
    validate_topic_name(name)


def test_check_collision_on_dot_and_underscore() -> None:
    with pytest.raises(InvalidTopicError, match=re.escape("Topic 'a_b.c' collides with existing topic: a.b_c")):
        check_collision("a_b.c", ["other", "a.b_c"])
    check_collision("a.b", ["a.b"])  # the same name is TopicExists, not a collision
    check_collision("a-b", ["a_b"])


# --- the registry file ----------------------------------------------------------------------

def test_registry_encodes_and_decodes_round_trip(tmp_path: Path) -> None:
    state = RegistryState(7, MappingProxyType({
        "orders": TopicRecord("orders", new_topic_id(), 3, MappingProxyType({"retention.ms": "60000"})),
        "logs": TopicRecord("logs", new_topic_id(), 1),
    }), frozenset({new_topic_id()}))
    decoded = decode_registry(state.encode(), tmp_path / REGISTRY_FILE)
    assert decoded == state
    assert list(registry_dict(state)["topics"]) == ["logs", "orders"]


def registry_dict(state: RegistryState) -> dict[str, object]:
    return json.loads(state.encode())


@pytest.mark.parametrize("data", [
    b"{not json", b"\xff\xfe", b"[]", b'{"version": 1, "epoch": 1, "topics": {}}',
    b'{"version": 0, "topics": {}}', b'{"version": 0, "epoch": "1", "topics": {}}',
    b'{"version": 0, "epoch": 1, "topics": {}, "deleted_topic_ids": "x"}',
    b'{"version": 0, "epoch": 1, "topics": {"t": 3}}',
    b'{"version": 0, "epoch": 1, "topics": {"t": {"topic_id": "x", "partitions": 0}}}',
    b'{"version": 0, "epoch": 1, "topics": {"t": {"partitions": 1}}}',
    b'{"version": 0, "epoch": 1, "topics": {"t": {"topic_id": "x", "partitions": 1, "configs": []}}}',
], ids=["not-json", "not-utf8", "list", "version", "no-epoch", "str-epoch", "deleted-str", "topic-int",
        "zero-partitions", "no-id", "configs-list"])
def test_decode_registry_refuses_bad_content_naming_the_file(data: bytes, tmp_path: Path) -> None:
    path = tmp_path / REGISTRY_FILE
    with pytest.raises(CheckpointError) as raised:
        decode_registry(data, path)
    assert str(path) in str(raised.value)


def test_read_newest_registry_picks_highest_epoch_and_reports_unreadable(tmp_path: Path) -> None:
    dirs = [tmp_path / n for n in ("a", "b", "c", "d")]
    for d in dirs:
        d.mkdir()
    old = RegistryState(3, MappingProxyType({"t": TopicRecord("t", new_topic_id(), 1)}))
    new = RegistryState(4, MappingProxyType({"t": TopicRecord("t", new_topic_id(), 2)}))
    write_registry(dirs[:1], old)
    write_registry(dirs[1:2], new)
    (dirs[2] / REGISTRY_FILE).write_bytes(b"garbage")
    read = read_newest_registry(dirs)
    assert read.state == new
    assert sorted(read.stale) == [dirs[0], dirs[2], dirs[3]]  # older, unreadable, missing: all rewritten
    assert "older" in read.stale[dirs[0]] and "not JSON" in read.stale[dirs[2]] and read.stale[dirs[3]] == "missing"
    assert read_newest_registry(dirs[3:]).state == RegistryState()


# --- lifecycle through the manager --------------------------------------------------------------

def test_create_describe_grow_and_delete(broker: Opener, log_dirs: list[Path]) -> None:
    manager = broker.open(log_dirs[:2])
    created = manager.create_topic("life", 2, {"retention.ms": "60000"})
    assert (created.name, created.partition_count, dict(created.configs)) == ("life", 2, {"retention.ms": "60000"})
    assert created.offline == ()
    manager.append(tp("life", 1), batch(3))

    grown = manager.create_partitions("life", 5)
    assert grown.topic_id == created.topic_id and grown.partition_count == 5
    assert [p.log_end_offset for p in grown.partitions] == [0, 3, 0, 0, 0]
    assert manager.log(tp("life", 4)).config.retention_ms == 60000
    assert PartitionMetadataFile(manager.log(tp("life", 4)).dir).read().topic_id == created.topic_id
    manager.shutdown()

    reopened = broker.open(log_dirs[:2])
    assert reopened.describe_topic("life").partition_count == 5
    assert read_offsets(reopened.log(tp("life", 1))) == [0, 1, 2]
    reopened.delete_topic("life")
    assert reopened.topics() == [] and not reopened.has_topic("life")
    with pytest.raises(UnknownTopicOrPartitionError):
        reopened.describe_topic("life")
    for d in log_dirs[:2]:
        copy = registry(d)
        assert copy["topics"] == {} and created.topic_id in copy["deleted_topic_ids"]


def test_create_partitions_refuses_shrink_and_equal_with_kafka_wording(broker: Opener, one_dir: list[Path]) -> None:
    manager = broker.open(one_dir)
    manager.create_topic("three", 3)
    epoch = registry(one_dir[0])["epoch"]
    with pytest.raises(InvalidPartitionsError,
                       match=re.escape("Topic currently has 3 partitions, which is higher than the requested 2.")):
        manager.create_partitions("three", 2)
    with pytest.raises(InvalidPartitionsError, match=re.escape("Topic already has 3 partitions.")) as raised:
        manager.create_partitions("three", 3)
    assert raised.value.error_code == 37
    with pytest.raises(UnknownTopicOrPartitionError):
        manager.create_partitions("nope", 4)
    assert registry(one_dir[0])["epoch"] == epoch
    assert sub_dirs(one_dir[0]) == ["three-0", "three-1", "three-2"]


@pytest.mark.parametrize(("name", "message"), BAD_NAMES[:5], ids=["empty", "dot", "dotdot", "250", "space"])
def test_create_topic_refuses_invalid_names_writing_nothing(broker: Opener, one_dir: list[Path], name: str,
                                                            message: str) -> None:
    manager = broker.open(one_dir)
    epoch = registry(one_dir[0])["epoch"]
    with pytest.raises(InvalidTopicError, match=re.escape(message)):
        manager.create_topic(name, 1)
    assert registry(one_dir[0])["epoch"] == epoch and sub_dirs(one_dir[0]) == []


def test_create_existing_or_colliding_topic_is_refused(broker: Opener, one_dir: list[Path]) -> None:
    manager = broker.open(one_dir)
    manager.create_topic("a.b", 1)
    with pytest.raises(TopicExistsError, match=re.escape("Topic 'a.b' already exists.")) as raised:
        manager.create_topic("a.b", 2)
    assert raised.value.error_code == 36
    with pytest.raises(InvalidTopicError, match=re.escape("Topic 'a_b' collides with existing topic: a.b")):
        manager.create_topic("a_b", 1)
    assert manager.topics() == ["a.b"] and sub_dirs(one_dir[0]) == ["a.b-0"]


@pytest.mark.parametrize("partitions", [0, -1])
def test_create_topic_needs_a_positive_partition_count(broker: Opener, one_dir: list[Path], partitions: int) -> None:
    manager = broker.open(one_dir)
    with pytest.raises(InvalidPartitionsError, match="Number of partitions was set to an invalid non-positive value."):
        manager.create_topic("t", partitions)
    assert manager.topics() == [] and sub_dirs(one_dir[0]) == []


@pytest.mark.parametrize("configs", [
    {"no.such.config": "1"},
    {"segment.bytes": "abc"},
    {"segment.bytes": "10"},
    {"cleanup.policy": "bogus"},
    {"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"},
    {"message.format.version": "0.10.0"},
], ids=["unknown", "not-a-number", "below-min", "bad-policy", "lag-conflict", "removed"])
def test_create_topic_refuses_bad_configs_writing_nothing(broker: Opener, log_dirs: list[Path],
                                                          configs: dict[str, str]) -> None:
    manager = broker.open(log_dirs)
    epochs = [registry(d)["epoch"] for d in log_dirs]
    with pytest.raises(ConfigError) as raised:
        manager.create_topic("bad", 2, configs)
    assert raised.value.error_code == 40
    assert [registry(d)["epoch"] for d in log_dirs] == epochs
    assert all(sub_dirs(d) == [] for d in log_dirs)
    assert manager.topics() == []


def test_cluster_metadata_topic_cannot_be_created(broker: Opener, one_dir: list[Path]) -> None:
    manager = broker.open(one_dir)
    with pytest.raises(TidelogError, match="__cluster_metadata"):
        manager.create_topic("__cluster_metadata", 1)


def test_alter_topic_config_set_and_delete_persist_across_reopen(broker: Opener, log_dirs: list[Path]) -> None:
    manager = broker.open(log_dirs[:2], {"log.retention.ms": "999999"})
    manager.create_topic("conf", 2, {"retention.ms": "5000"})
    config = manager.alter_topic_config("conf", {"retention.bytes": "4096", "cleanup.policy": "compact,delete"})
    assert config.retention_bytes == 4096 and config.retention_ms == 5000
    assert manager.topic_overrides("conf") == {"retention.ms": "5000", "retention.bytes": "4096",
                                               "cleanup.policy": "compact,delete"}
    manager.alter_topic_config("conf", delete=["retention.ms"])
    assert manager.topic_config("conf").retention_ms == 999999  # back to the broker's value
    assert all(lg.config.retention_ms == 999999 for _, lg in manager.logs("conf"))
    manager.shutdown()

    reopened = broker.open(log_dirs[:2], {"log.retention.ms": "999999"})
    assert reopened.topic_overrides("conf") == {"retention.bytes": "4096", "cleanup.policy": "compact,delete"}
    assert all(lg.config.retention_bytes == 4096 and lg.config.compact for _, lg in reopened.logs("conf"))
    assert dict(reopened.describe_topic("conf").configs) == reopened.topic_overrides("conf")


def test_alter_segment_bytes_makes_the_next_append_roll(broker: Opener, one_dir: list[Path]) -> None:
    manager = broker.open(one_dir)
    manager.create_topic("roll", 1)
    manager.append(tp("roll"), batch(2))
    lg = manager.log(tp("roll"))
    assert lg.num_segments == 1
    manager.alter_topic_config("roll", {"segment.bytes": str(lg.size)})
    assert lg.config.segment_bytes == lg.size
    manager.append(tp("roll"), batch(2))
    assert lg.num_segments == 2 and lg.segments[1].base_offset == 2


@pytest.mark.parametrize(("set_", "delete"), [
    ({"segment.bytes": "x"}, ()),
    ({"no.such.config": "1"}, ()),
    ({}, ("no.such.config",)),
    ({"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"}, ()),
], ids=["bad-value", "unknown-set", "unknown-delete", "conflict"])
def test_alter_topic_config_refuses_bad_changes_writing_nothing(broker: Opener, one_dir: list[Path],
                                                                set_: dict[str, str], delete: tuple[str, ...]) -> None:
    manager = broker.open(one_dir)
    manager.create_topic("conf", 1, {"retention.ms": "5000"})
    epoch = registry(one_dir[0])["epoch"]
    with pytest.raises(ConfigError):
        manager.alter_topic_config("conf", set_, delete)
    assert registry(one_dir[0])["epoch"] == epoch
    assert manager.topic_overrides("conf") == {"retention.ms": "5000"}
    assert manager.log(tp("conf")).config.retention_ms == 5000


def test_alter_config_of_unknown_topic(broker: Opener, one_dir: list[Path]) -> None:
    manager = broker.open(one_dir)
    with pytest.raises(UnknownTopicOrPartitionError):
        manager.alter_topic_config("nope", {"retention.ms": "1"})


# --- crash completion at start-up ---------------------------------------------------------------

def test_a_registry_written_but_partition_dirs_missing_are_created(broker: Opener, log_dirs: list[Path]) -> None:
    manager = broker.open(log_dirs[:2])
    created = manager.create_topic("half", 3, {"retention.ms": "7000"})
    manager.append(tp("half", 0), batch(2))
    manager.shutdown()
    missing = [d / "half-1" for d in log_dirs[:2] if (d / "half-1").exists()]
    assert len(missing) == 1
    shutil.rmtree(missing[0])
    epoch = registry(log_dirs[0])["epoch"]

    reopened = broker.open(log_dirs[:2])
    lg = reopened.log(tp("half", 1))
    assert lg.dir.is_dir() and lg.log_end_offset == 0 and lg.config.retention_ms == 7000
    assert PartitionMetadataFile(lg.dir).read().topic_id == created.topic_id
    assert read_offsets(reopened.log(tp("half", 0))) == [0, 1]
    assert registry(log_dirs[0])["epoch"] == epoch  # nothing to commit: the registry already said so


def test_b_deleted_topic_dir_still_named_normally_is_renamed_and_never_adopted(broker: Opener,
                                                                               one_dir: list[Path]) -> None:
    log_dir = one_dir[0]
    manager = broker.open(one_dir, {"log.segment.delete.delay.ms": "1000"})
    manager.create_topic("doomed", 1)
    manager.create_topic("kept", 1)
    manager.append(tp("doomed"), batch(4))
    manager.shutdown()
    shutil.copytree(log_dir / "doomed-0", log_dir.parent / "doomed-0.saved")
    broker.open(one_dir).delete_topic("doomed")
    broker.close_all()
    shutil.copytree(log_dir.parent / "doomed-0.saved", log_dir / "doomed-0")  # the rename never happened

    reopened = broker.open(one_dir, {"log.segment.delete.delay.ms": "1000"})
    assert reopened.topics() == ["kept"] and reopened.get_log(tp("doomed")) is None
    assert reopened.set_aside() == []
    assert "doomed-0" not in sub_dirs(log_dir)
    assert [n for n in sub_dirs(log_dir) if n.startswith("doomed-0.")] != []
    assert "doomed" not in registry(log_dir)["topics"]
    broker.clock.advance(1000)
    assert sub_dirs(log_dir) == ["kept-0"]
    assert reopened.create_topic("doomed", 1).partitions[0].log_end_offset == 0


def write_kafka_partition(log_dir: Path, topic: str, partition: int, topic_id: str | None, records: int) -> None:
    """A partition dir as a Kafka broker leaves it, written by tidelog's Log without a manager."""
    lg = Log.open(log_dir / f"{topic}-{partition}")
    for _ in range(records):
        lg.append_as_leader(batch(1))
    lg.close()
    if topic_id is not None:
        PartitionMetadataFile(lg.dir).write(topic_id)


def test_c_partition_dirs_without_registry_are_adopted(broker: Opener, log_dirs: list[Path]) -> None:
    topic_id = new_topic_id()
    log_dirs[0].mkdir()
    log_dirs[1].mkdir()
    write_kafka_partition(log_dirs[0], "foo", 0, topic_id, 3)
    write_kafka_partition(log_dirs[1], "foo", 1, topic_id, 5)

    manager = broker.open(log_dirs[:2])
    described = manager.describe_topic("foo")
    assert manager.topics() == ["foo"]
    assert (described.topic_id, described.partition_count, dict(described.configs)) == (topic_id, 2, {})
    assert manager.topic_config("foo") == broker.config(log_dirs[:2]).log_config()
    assert [p.log_end_offset for p in described.partitions] == [3, 5]
    dir_ids = [read_meta_properties(d).directory_id for d in log_dirs[:2]]
    for d in log_dirs[:2]:
        assert registry(d)["topics"]["foo"] == {"topic_id": topic_id, "partitions": 2, "configs": {},
                                                "assignments": {"0": dir_ids[0], "1": dir_ids[1]},
                                                "epoch": 1, "configs_unconfirmed": True}
    assert described.configs_unconfirmed  # defaults nobody vouched for: retention and cleaning hold


def test_c_adopted_partitions_without_metadata_get_one_new_topic_id(broker: Opener, one_dir: list[Path]) -> None:
    one_dir[0].mkdir()
    write_kafka_partition(one_dir[0], "bar", 0, None, 1)
    write_kafka_partition(one_dir[0], "bar", 1, None, 1)
    manager = broker.open(one_dir)
    topic_id = manager.describe_topic("bar").topic_id
    assert {PartitionMetadataFile(one_dir[0] / f"bar-{p}").read().topic_id for p in (0, 1)} == {topic_id}


@pytest.mark.parametrize("newer", [0, 1])
def test_d_newest_registry_copy_wins(broker: Opener, log_dirs: list[Path], newer: int) -> None:
    manager = broker.open(log_dirs[:2])
    manager.create_topic("multi", 1, {"retention.ms": "1111"})
    manager.shutdown()
    content = registry(log_dirs[newer])
    content["epoch"] += 5
    content["topics"]["multi"]["configs"] = {"retention.ms": "2222"}
    write_registry_json(log_dirs[newer], content)

    reopened = broker.open(log_dirs[:2])
    assert reopened.topic_overrides("multi") == {"retention.ms": "2222"}
    assert reopened.log(tp("multi")).config.retention_ms == 2222


def test_e_unreadable_registry_copy_is_ignored_then_rewritten(broker: Opener, log_dirs: list[Path]) -> None:
    manager = broker.open(log_dirs[:2])
    manager.create_topic("safe", 2, {"retention.ms": "3333"})
    manager.shutdown()
    (log_dirs[0] / REGISTRY_FILE).write_text("{not json", "utf-8")

    reopened = broker.open(log_dirs[:2])
    assert reopened.topic_overrides("safe") == {"retention.ms": "3333"}
    assert reopened.describe_topic("safe").partition_count == 2
    reopened.alter_topic_config("safe", {"retention.ms": "4444"})
    assert registry(log_dirs[0]) == registry(log_dirs[1])
    assert registry(log_dirs[0])["topics"]["safe"]["configs"] == {"retention.ms": "4444"}


def test_registry_is_written_to_a_dir_that_lacks_it(broker: Opener, log_dirs: list[Path]) -> None:
    manager = broker.open(log_dirs[:2])
    manager.create_topic("t", 1)
    manager.shutdown()
    (log_dirs[1] / REGISTRY_FILE).unlink()
    broker.open(log_dirs[:2])
    assert registry(log_dirs[1])["topics"] == registry(log_dirs[0])["topics"]


def test_stale_registry_copy_is_rewritten_at_open(broker: Opener, log_dirs: list[Path]) -> None:
    manager = broker.open(log_dirs[:2])
    manager.create_topic("foo", 1)
    manager.shutdown()
    newest = registry(log_dirs[0])
    (log_dirs[1] / REGISTRY_FILE).write_bytes(b"garbage")

    broker.open(log_dirs[:2]).shutdown()
    assert registry(log_dirs[1])["topics"] == newest["topics"]
    assert registry(log_dirs[1])["epoch"] == registry(log_dirs[0])["epoch"] > newest["epoch"]
