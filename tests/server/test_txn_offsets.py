"""Transactional offsets in the group coordinator: TxnOffsetCommit held pending until the
transaction's marker (commit: visible, abort: dropped), Kafka's group checks, the order rule between
transactional and regular commits, deletion and expiration with open transactions; and
``__consumer_offsets`` written as Kafka's coordinator writes transactional commits and loaded back
honouring the markers."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tidelog.errors import InvalidProducerEpochError
from tidelog.manager import LogManager
from tidelog.records import RecordBatch, iter_batches
from tidelog.server.errors import ErrorCode as E
from tidelog.server.groups.coordinator import GroupCoordinator
from tidelog.server.groups.group import GroupState
from tidelog.server.groups.messages import CommitRequest, GroupConfig, StoreRecord, TxnCommitRequest
from tidelog.server.groups.offsets import OffsetsTopic
from tidelog.server.groups.records import (
    OFFSETS_TOPIC,
    OffsetCommitKey,
    OffsetCommitValue,
    decode_key,
    decode_offset_commit_value,
    encode_offset_commit_key,
    encode_offset_commit_value,
    offsets_partition_for,
)
from tidelog.server.groups.txn_offsets import PendingTxnOffsets
from tidelog.storage.config import BrokerConfig
from tidelog.testing import FakeClock, FakeScheduler
from tidelog.topic_partition import TopicPartition
from test_groups_coordinator import Harness

PID, EPOCH = 4000, 3


class TxnMemoryStore:
    """Plain and transactional writes kept in one list; ``fail`` makes writes fail."""

    def __init__(self) -> None:
        self.written: list[tuple[str, int, list[StoreRecord]]] = []
        self.fail: BaseException | None = None

    def write(self, group_id: str, records: list[StoreRecord], done: Any) -> None:
        self.write_transactional(group_id, -1, -1, records, done)

    def write_transactional(self, group_id: str, producer_id: int, producer_epoch: int, records: list[StoreRecord],
                            done: Any) -> None:
        if self.fail is None:
            self.written.append((group_id, producer_id, records))
        done(self.fail)


class TxnHarness(Harness):
    def __init__(self) -> None:
        super().__init__()
        self.store = TxnMemoryStore()  # type: ignore[assignment]
        self.coordinator = GroupCoordinator(GroupConfig(initial_rebalance_delay_ms=0), self.store, self.clock,
                                            self.scheduler)

    def txn_commit(self, offsets: dict[tuple[str, int], int], group: str = "g", pid: int = PID, generation: int = -1,
                   member: str = "", instance: str | None = None, metadata: str = "") -> dict[tuple[str, int], E]:
        answers: list[dict[tuple[str, int], E]] = []
        values = {tp: OffsetCommitValue(o, metadata, -1) for tp, o in offsets.items()}
        self.coordinator.commit_transactional_offsets(
            TxnCommitRequest(group, pid, EPOCH, generation, member, instance, values), answers.append)
        assert len(answers) == 1
        return answers[0]

    def commit(self, offsets: dict[tuple[str, int], int], group: str = "g") -> None:
        answers: list[Any] = []
        self.coordinator.commit_offsets(CommitRequest(group, -1, "", None, {
            tp: OffsetCommitValue(o, "", -1) for tp, o in offsets.items()}), answers.append)
        assert set(answers[0].values()) == {E.NONE}

    def visible(self, group: str = "g") -> dict[tuple[str, int], int]:
        return {tp: v.offset for tp, v in self.coordinator.fetch_offsets(group, None).items() if v is not None}


# --- the coordinator ---------------------------------------------------------------------------

def test_offsets_stay_hidden_until_the_commit_marker_then_become_the_groups() -> None:
    h = TxnHarness()
    assert h.txn_commit({("t", 0): 10, ("t", 1): 20}) == {("t", 0): E.NONE, ("t", 1): E.NONE}
    (group, producer, records), = h.store.written
    assert (group, producer) == ("g", PID)
    assert [decode_key(k) for k, _ in records] == [OffsetCommitKey("g", "t", 0), OffsetCommitKey("g", "t", 1)]
    assert h.visible() == {} and h.coordinator.fetch_offsets("g", [("t", 0)]) == {("t", 0): None}
    assert h.coordinator.unstable_partitions("g") == {("t", 0), ("t", 1)}
    assert h.coordinator.complete_transaction(PID, lambda group: True, commit=True) == 2
    assert h.visible() == {("t", 0): 10, ("t", 1): 20}
    assert h.coordinator.unstable_partitions("g") == set()


def test_an_aborted_transaction_leaves_the_committed_offsets_as_they_were() -> None:
    h = TxnHarness()
    h.commit({("t", 0): 5})
    h.txn_commit({("t", 0): 10})
    assert h.coordinator.complete_transaction(PID, lambda group: True, commit=False) == 0
    assert h.visible() == {("t", 0): 5} and h.coordinator.unstable_partitions("g") == set()
    assert h.coordinator.complete_transaction(PID, lambda group: True, commit=True) == 0  # nothing left


def test_a_marker_completes_only_the_groups_of_its_partition() -> None:
    h = TxnHarness()
    h.txn_commit({("t", 0): 1}, group="a")
    h.txn_commit({("t", 0): 2}, group="b")
    assert h.coordinator.complete_transaction(PID, lambda group: group == "a", commit=True) == 1
    assert h.visible("a") == {("t", 0): 1} and h.visible("b") == {}
    assert h.coordinator.unstable_partitions("b") == {("t", 0)}
    h.coordinator.complete_transaction(PID, lambda group: group == "b", commit=True)
    assert h.visible("b") == {("t", 0): 2}


def test_a_regular_commit_after_the_transactional_one_wins_at_the_commit() -> None:
    """Kafka keeps the most recent committed offset when transactional and regular commits mix."""
    h = TxnHarness()
    h.txn_commit({("t", 0): 10, ("t", 1): 11})
    h.commit({("t", 0): 99})
    h.coordinator.complete_transaction(PID, lambda group: True, commit=True)
    assert h.visible() == {("t", 0): 99, ("t", 1): 11}


def test_of_two_transactions_the_later_written_offset_stays_whatever_the_commit_order() -> None:
    h = TxnHarness()
    h.txn_commit({("t", 0): 1}, pid=1)
    h.txn_commit({("t", 0): 2}, pid=2)
    h.coordinator.complete_transaction(2, lambda group: True, commit=True)
    h.coordinator.complete_transaction(1, lambda group: True, commit=True)
    assert h.visible() == {("t", 0): 2}


def test_unknown_group_with_a_generation_is_illegal_and_nothing_is_written() -> None:
    h = TxnHarness()
    assert h.txn_commit({("t", 0): 1}, group="nobody", generation=4, member="m") == {("t", 0): E.ILLEGAL_GENERATION}
    assert h.store.written == [] and h.coordinator.group("nobody") is None
    assert h.txn_commit({("t", 0): 1}, group="", generation=-1) == {("t", 0): E.INVALID_GROUP_ID}


def test_a_group_another_generation_owns_refuses_the_commit_and_nothing_changes() -> None:
    h = TxnHarness()
    leader, follower, generation = h.stable_pair()
    written = len(h.store.written)
    for kwargs, error in [({"generation": generation - 1, "member": leader}, E.ILLEGAL_GENERATION),
                          ({"generation": generation, "member": "stranger"}, E.UNKNOWN_MEMBER_ID),
                          ({"generation": generation, "member": leader, "instance": "i-1"}, E.UNKNOWN_MEMBER_ID),
                          ({"generation": -1, "member": ""}, E.NONE)]:
        assert h.txn_commit({("t", 0): 7}, **kwargs) == {("t", 0): error}, kwargs
    # only the last one (no member, generation -1: a v0-v2 request) was written
    assert len(h.store.written) == written + 1
    assert h.txn_commit({("t", 1): 8}, generation=generation, member=follower) == {("t", 1): E.NONE}
    assert h.coordinator.unstable_partitions("g") == {("t", 0), ("t", 1)}


def test_a_transactional_commit_is_not_refused_while_the_group_completes_a_rebalance() -> None:
    h = TxnHarness()
    member = h.member()
    generation = h.join(member)[0].generation_id
    assert h.state() is GroupState.COMPLETING_REBALANCE
    assert h.txn_commit({("t", 0): 1}, generation=generation, member=member) == {("t", 0): E.NONE}
    regular: list[Any] = []
    h.coordinator.commit_offsets(CommitRequest("g", generation, member, None, {("t", 0): OffsetCommitValue(2, "", -1)}),
                                 regular.append)
    assert regular == [{("t", 0): E.REBALANCE_IN_PROGRESS}]


def test_a_static_member_replaced_is_fenced() -> None:
    h = TxnHarness()
    first = h.join(instance_id="i-1")
    member = first[0].member_id
    generation = first[0].generation_id
    assert h.sync(member, generation, {member: b"x"}, instance_id="i-1")[0].error == E.NONE
    assert h.txn_commit({("t", 0): 1}, generation=generation, member="other", instance="i-1") == {
        ("t", 0): E.FENCED_INSTANCE_ID}
    assert h.txn_commit({("t", 0): 1}, generation=generation, member=member, instance="i-1") == {("t", 0): E.NONE}


def test_too_large_metadata_is_refused_for_its_partition_only() -> None:
    h = TxnHarness()
    answers: list[Any] = []
    h.coordinator.commit_transactional_offsets(TxnCommitRequest("g", PID, EPOCH, -1, "", None, {
        ("t", 0): OffsetCommitValue(1, "x" * 4097, -1), ("t", 1): OffsetCommitValue(2, "", -1)}), answers.append)
    assert answers[0] == {("t", 0): E.OFFSET_METADATA_TOO_LARGE, ("t", 1): E.NONE}
    assert h.coordinator.unstable_partitions("g") == {("t", 1)}


def test_a_failed_write_answers_kafkas_error_and_holds_nothing() -> None:
    h = TxnHarness()
    h.store.fail = InvalidProducerEpochError("epoch 3 is smaller than 4")
    assert h.txn_commit({("t", 0): 1}) == {("t", 0): E.INVALID_PRODUCER_EPOCH}
    h.store.fail = OSError("disk gone")
    assert h.txn_commit({("t", 0): 1}) == {("t", 0): E.NOT_COORDINATOR}
    assert h.coordinator.unstable_partitions("g") == set()
    assert h.coordinator.pending_offsets.producers() == set()


def test_deleting_the_group_tombstones_its_pending_partitions_and_drops_them() -> None:
    h = TxnHarness()
    h.commit({("t", 0): 1})
    h.txn_commit({("t", 1): 2})
    answers: list[Any] = []
    h.coordinator.delete_groups(["g"], answers.append)
    assert answers == [{"g": E.NONE}]
    _, _, tombstones = h.store.written[-1]
    assert {(decode_key(k), v) for k, v in tombstones} >= {(OffsetCommitKey("g", "t", 0), None),
                                                           (OffsetCommitKey("g", "t", 1), None)}
    assert h.coordinator.unstable_partitions("g") == set()
    assert h.coordinator.complete_transaction(PID, lambda group: True, commit=True) == 0
    assert h.coordinator.group("g") is None


def test_expiration_keeps_offsets_an_open_transaction_holds_and_the_group_with_it() -> None:
    h = TxnHarness()
    h.commit({("t", 0): 1, ("t", 1): 1})
    h.txn_commit({("t", 0): 5})
    h.clock.advance(GroupConfig().offsets_retention_ms + 1)
    assert h.coordinator.expire_offsets() == 1  # ("t", 1) only
    assert h.visible() == {("t", 0): 1} and h.coordinator.group("g") is not None
    h.coordinator.complete_transaction(PID, lambda group: True, commit=False)
    assert h.coordinator.expire_offsets() == 1 and h.coordinator.group("g") is None


def test_pending_store_drop_keeps_the_transaction_open_for_other_partitions() -> None:
    pending = PendingTxnOffsets()
    pending.add(1, "g", {("t", 0): OffsetCommitValue(1, "", 0), ("t", 1): OffsetCommitValue(2, "", 0)}, stamp=5)
    pending.drop("g", ("t", 0))
    assert pending.pending_partitions("g") == {("t", 1)} and pending.has_open_transactions("g")
    assert pending.end(1, lambda group: True, commit=True) == [("g", ("t", 1), OffsetCommitValue(2, "", 0))]
    assert not pending.has_open_transactions("g") and pending.producers() == set()


# --- __consumer_offsets through a real LogManager ------------------------------------------------

@pytest.fixture
def manager(tmp_path: Path) -> Iterator[LogManager]:
    broker = BrokerConfig.from_properties({"log.dirs": str(tmp_path / "data"), "offsets.topic.num.partitions": "3"})
    clock = FakeClock()
    opened = LogManager.open(broker, clock=clock, scheduler=FakeScheduler(clock))
    yield opened
    opened.shutdown()


def _records(group: str, offsets: dict[tuple[str, int], int]) -> list[StoreRecord]:
    return [(encode_offset_commit_key(group, *tp), encode_offset_commit_value(OffsetCommitValue(o, "", 1)))
            for tp, o in offsets.items()]


def _partition(group: str) -> TopicPartition:
    return TopicPartition(OFFSETS_TOPIC, offsets_partition_for(group, 3))


def _offsets(loaded: Any, group: str = "g") -> dict[tuple[str, int], int]:
    return {tp: v.offset for tp, v in loaded.offsets.get(group, {}).items()}


def test_a_transactional_commit_is_one_transactional_batch_of_the_producer(manager: LogManager) -> None:
    topic = OffsetsTopic.from_broker(manager, FakeClock(), manager.broker)
    topic.append("g", _records("g", {("t", 0): 10, ("t", 1): 11}), PID, EPOCH)
    data = manager.read(_partition("g"), 0, 1 << 20).records
    (_, batch), = list(iter_batches(data))
    assert isinstance(batch, RecordBatch)
    assert (batch.is_transactional, batch.is_control, batch.producer_id, batch.producer_epoch, batch.base_sequence) == (
        True, False, PID, EPOCH, 0)
    assert [decode_offset_commit_value(r.value).offset for r in batch.records()] == [10, 11]
    assert manager.ongoing_transactions(_partition("g"))[0][:3] == (PID, EPOCH, 0)


def test_loading_holds_offsets_until_their_marker_commit_shows_abort_drops(manager: LogManager) -> None:
    topic = OffsetsTopic.from_broker(manager, FakeClock(), manager.broker)
    topic.append("g", _records("g", {("t", 0): 5}))
    topic.append("g", _records("g", {("t", 0): 10, ("t", 1): 11}), PID, EPOCH)
    loaded = topic.load()
    assert _offsets(loaded) == {("t", 0): 5}
    assert loaded.pending.held(PID) == {"g": {("t", 0): OffsetCommitValue(10, "", 1), ("t", 1): OffsetCommitValue(11, "", 1)}}
    manager.write_txn_marker(_partition("g"), PID, EPOCH, 0, commit=False)
    loaded = topic.load()
    assert _offsets(loaded) == {("t", 0): 5} and loaded.pending.producers() == set()

    topic.append("g", _records("g", {("t", 0): 20}), PID, EPOCH)
    manager.write_txn_marker(_partition("g"), PID, EPOCH, 0, commit=True)
    loaded = topic.load()
    assert _offsets(loaded) == {("t", 0): 20} and loaded.pending.producers() == set()
    assert loaded.last_offset == manager.offsets(_partition("g")).high_watermark - 1


def test_loading_keeps_a_regular_commit_written_after_the_transactional_one(manager: LogManager) -> None:
    topic = OffsetsTopic.from_broker(manager, FakeClock(), manager.broker)
    topic.append("g", _records("g", {("t", 0): 10, ("t", 1): 11}), PID, EPOCH)
    topic.append("g", _records("g", {("t", 0): 99}))
    manager.write_txn_marker(_partition("g"), PID, EPOCH, 0, commit=True)
    assert _offsets(topic.load()) == {("t", 0): 99, ("t", 1): 11}


def test_loading_a_tombstone_drops_the_pending_offset_of_its_partition(manager: LogManager) -> None:
    topic = OffsetsTopic.from_broker(manager, FakeClock(), manager.broker)
    topic.append("g", _records("g", {("t", 0): 10, ("t", 1): 11}), PID, EPOCH)
    topic.append("g", [(encode_offset_commit_key("g", "t", 0), None)])
    manager.write_txn_marker(_partition("g"), PID, EPOCH, 0, commit=True)
    assert _offsets(topic.load()) == {("t", 1): 11}


def test_a_marker_in_another_partition_leaves_these_offsets_pending(manager: LogManager) -> None:
    a, b = "g", next(g for g in (f"g{i}" for i in range(100)) if _partition(g) != _partition("g"))
    topic = OffsetsTopic.from_broker(manager, FakeClock(), manager.broker)
    topic.append(a, _records(a, {("t", 0): 1}), PID, EPOCH)
    topic.append(b, _records(b, {("t", 0): 2}), PID, EPOCH)
    manager.write_txn_marker(_partition(b), PID, EPOCH, 0, commit=True)
    loaded = topic.load()
    assert _offsets(loaded, b) == {("t", 0): 2} and _offsets(loaded, a) == {}
    assert loaded.pending.held(PID) == {a: {("t", 0): OffsetCommitValue(1, "", 1)}}


def test_a_stale_epoch_is_refused_by_the_log_and_nothing_is_held(manager: LogManager) -> None:
    topic = OffsetsTopic.from_broker(manager, FakeClock(), manager.broker)
    topic.append("g", _records("g", {("t", 0): 1}), PID, EPOCH + 1)
    manager.write_txn_marker(_partition("g"), PID, EPOCH + 1, 0, commit=True)
    with pytest.raises(InvalidProducerEpochError):
        topic.append("g", _records("g", {("t", 0): 2}), PID, EPOCH)
    loaded = topic.load()
    assert _offsets(loaded) == {("t", 0): 1} and loaded.pending.producers() == set()


def test_a_coordinator_loaded_with_an_open_transaction_completes_it_later(manager: LogManager) -> None:
    topic = OffsetsTopic.from_broker(manager, FakeClock(), manager.broker)
    topic.append("g", _records("g", {("t", 0): 10}), PID, EPOCH)
    topic.append("g", _records("g", {("t", 1): 3}))
    loaded = topic.load()
    h = TxnHarness()
    h.coordinator.load(loaded.groups, loaded.offsets)
    h.coordinator.load_pending(loaded.pending, loaded.last_offset)
    assert h.coordinator.group("g") is not None and h.coordinator.unstable_partitions("g") == {("t", 0)}
    h.commit({("t", 1): 4})  # a later write: stamped above every loaded record
    assert h.coordinator.complete_transaction(PID, topic.groups_of(_partition("g").partition), commit=True) == 1
    assert h.visible() == {("t", 0): 10, ("t", 1): 4}
