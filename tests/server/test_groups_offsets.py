"""``__consumer_offsets`` through a real LogManager: created on first write with Kafka's configs,
records placed by the group's hash, replayed on load (latest wins, tombstones delete), and a
coordinator restored from it after a restart of the log manager."""

from __future__ import annotations

import errno
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli_helpers import run_cli
from tidelog.errors import StorageError
from tidelog.manager import LogManager
from tidelog.server.errors import ErrorCode as E
from tidelog.server.groups.coordinator import GroupCoordinator
from tidelog.server.groups.messages import CommitRequest, GroupConfig, JoinRequest, SyncRequest
from tidelog.server.groups.group import GroupState
from tidelog.server.groups.offsets import OffsetsTopic
from tidelog.server.groups.records import (
    OFFSETS_TOPIC,
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitValue,
    encode_group_metadata_key,
    encode_group_metadata_value,
    encode_offset_commit_key,
    encode_offset_commit_value,
    offsets_partition_for,
)
from tidelog.storage import fileops
from tidelog.storage.config import BrokerConfig
from tidelog.storage.fileops import FaultRule, FileOp
from tidelog.testing import FakeClock, FakeScheduler
from tidelog.topic_partition import TopicPartition


@pytest.fixture
def data(tmp_path: Path) -> Path:
    return tmp_path / "data"


def _open(data: Path) -> LogManager:
    broker = BrokerConfig.from_properties({"log.dirs": str(data), "offsets.topic.num.partitions": "5",
                                           "offsets.topic.segment.bytes": "1048576"})
    clock = FakeClock()
    return LogManager.open(broker, clock=clock, scheduler=FakeScheduler(clock))


@pytest.fixture
def manager(data: Path) -> Iterator[LogManager]:
    opened = _open(data)
    yield opened
    opened.shutdown()


def _topic(manager: LogManager) -> OffsetsTopic:
    return OffsetsTopic.from_broker(manager, FakeClock(), manager.broker)


def _commit(topic: OffsetsTopic, group: str, tp: tuple[str, int], offset: int) -> None:
    topic.append(group, [(encode_offset_commit_key(group, *tp), encode_offset_commit_value(OffsetCommitValue(offset, "", 1)))])


def test_first_write_creates_the_topic_with_kafkas_configs(manager: LogManager) -> None:
    topic = _topic(manager)
    assert not manager.has_topic(OFFSETS_TOPIC) and topic.load().groups == {}
    _commit(topic, "g", ("t", 0), 5)
    assert manager.partitions(OFFSETS_TOPIC) == [0, 1, 2, 3, 4]
    assert manager.topic_overrides(OFFSETS_TOPIC) == {"cleanup.policy": "compact", "segment.bytes": "1048576"}
    placed = TopicPartition(OFFSETS_TOPIC, offsets_partition_for("g", 5))
    assert manager.log(placed).log_end_offset == 1
    assert sum(manager.log(TopicPartition(OFFSETS_TOPIC, p)).log_end_offset for p in range(5)) == 1


def test_an_existing_topic_keeps_its_partition_count(manager: LogManager) -> None:
    manager.create_topic(OFFSETS_TOPIC, 3, {"cleanup.policy": "compact"})
    topic = _topic(manager)
    assert topic.partition_for("spark-kafka-source-0a1b") == 1258001507 % 3


def test_load_replays_latest_values_and_tombstones(manager: LogManager) -> None:
    topic = _topic(manager)
    _commit(topic, "g", ("t", 0), 5)
    _commit(topic, "g", ("t", 0), 9)
    _commit(topic, "g", ("t", 1), 3)
    topic.append("g", [(encode_offset_commit_key("g", "t", 1), None)])
    member = MemberMetadata("m", None, "c", "/h", 1000, 6000, b"s", b"a")
    topic.append("g", [(encode_group_metadata_key("g"), encode_group_metadata_value(
        GroupMetadataValue("consumer", 3, "range", "m", 1, (member,))))])
    _commit(topic, "gone", ("t", 0), 1)
    topic.append("gone", [(encode_offset_commit_key("gone", "t", 0), None), (encode_group_metadata_key("gone"), None)])
    topic.append("g", [(b"\x00\x05other-record-type", b"ignored")])
    topic.append("g", [(encode_offset_commit_key("g", "t", 0), b"\x00\x03garbage")])  # does not decode
    loaded = topic.load()
    assert loaded.skipped == 1
    assert {g: {tp: v.offset for tp, v in o.items()} for g, o in loaded.offsets.items()} == {"g": {("t", 0): 9}}
    assert list(loaded.groups) == ["g"] and loaded.groups["g"].members == (member,)


def test_coordinator_restored_after_a_restart(data: Path) -> None:
    manager = _open(data)
    topic = _topic(manager)

    class SyncStore:
        def write(self, group_id: str, records: list, done) -> None:  # type: ignore[no-untyped-def,type-arg]
            topic.append(group_id, records)
            done(None)

    clock = FakeClock()
    coordinator = GroupCoordinator(GroupConfig(initial_rebalance_delay_ms=0), SyncStore(), clock, FakeScheduler(clock))
    answers: list = []  # type: ignore[type-arg]
    join = JoinRequest("g", "", None, "c", "/h", 6000, 6000, "consumer", (("range", b"sub"),), False)
    coordinator.join(join, answers.append)
    member = answers[0].member_id
    coordinator.sync(SyncRequest("g", 1, member, None, None, None, {member: b"assigned"}), answers.append)
    coordinator.commit_offsets(CommitRequest("g", 1, member, None, {("t", 0): OffsetCommitValue(77, "meta", -1)}),
                               answers.append)
    assert answers[-1] == {("t", 0): E.NONE}
    manager.shutdown()

    reopened = _open(data)
    try:
        loaded = _topic(reopened).load()
        restored = GroupCoordinator(GroupConfig(), SyncStore(), clock, FakeScheduler(clock))
        restored.load(loaded.groups, loaded.offsets)
        group = restored.group("g")
        assert group is not None and group.state is GroupState.STABLE and group.generation_id == 1
        assert group.members[member].assignment == b"assigned"
        value = restored.fetch_offsets("g", [("t", 0)])[("t", 0)]
        assert value is not None and (value.offset, value.metadata) == (77, "meta")
    finally:
        reopened.shutdown()


def test_the_cleaner_compacts_the_topic_and_loading_gives_the_same_groups(data: Path) -> None:
    """Kafka's key/value records are what the log cleaner dedupes: after ``tidelog clean run`` the
    topic holds the last commit per partition, and a load restores the same state as before."""
    manager = _open(data)
    manager.create_topic(OFFSETS_TOPIC, 1, {"cleanup.policy": "compact", "segment.bytes": "1024"})
    topic = _topic(manager)
    for offset in range(60):
        _commit(topic, "busy", ("t", offset % 3), offset)
    _commit(topic, "gone", ("t", 0), 1)
    topic.append("gone", [(encode_offset_commit_key("gone", "t", 0), None)])
    before = topic.load()
    tp = TopicPartition(OFFSETS_TOPIC, 0)
    records_before = manager.log(tp).log_end_offset
    manager.log(tp).roll()
    manager.shutdown()

    code, out, err = run_cli(data, "clean", "run", "--topic", OFFSETS_TOPIC, "--force")
    assert code == 0, err

    reopened = _open(data)
    try:
        after = _topic(reopened).load()
        assert (after.groups, after.offsets) == (before.groups, before.offsets)
        assert {tp: v.offset for tp, v in after.offsets["busy"].items()} == {("t", 0): 57, ("t", 1): 58, ("t", 2): 59}
        assert after.records < records_before / 10
    finally:
        reopened.shutdown()


def test_a_disk_fault_while_loading_is_reported_as_a_read_fault_and_raised(manager: LogManager, data: Path,
                                                                            caplog: pytest.LogCaptureFixture) -> None:
    topic = _topic(manager)
    _commit(topic, "g", ("t", 0), 7)
    unreadable = FaultRule(frozenset({FileOp.READ}), f"{data}/{OFFSETS_TOPIC}-*/*.log", error=errno.EIO)
    with caplog.at_level(logging.WARNING, "tidelog.manager.offline_dirs"), fileops.inject(unreadable):
        with pytest.raises(StorageError):
            topic.load()
    assert "group load failed, only this read fails" in caplog.text  # the read-fault policy saw it
    assert manager.offline_log_dirs() == []
    assert topic.load().offsets["g"][("t", 0)].offset == 7  # nothing lost: the next load reads it
