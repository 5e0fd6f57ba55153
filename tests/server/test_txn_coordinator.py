"""The transaction coordinator over a real LogManager (no server): InitProducerId, AddPartitions,
EndTxn with markers in the data partitions, fencing, the timeout abort, id expiration, loading after
a restart that stopped between the PrepareCommit record and the markers, and every out-of-order
call of the issue's "Bad input" list answered with Kafka's error code, nothing changed."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tidelog.manager import LogManager
from tidelog.manager.internal_topics import TRANSACTION_STATE
from tidelog.records import RecordBatch, iter_batches
from tidelog.records.builder import BatchBuilder
from tidelog.server.errors import ErrorCode
from tidelog.server.groups.offsets import OffsetsTopic
from tidelog.server.groups.records import OFFSETS_TOPIC, offsets_partition_for
from tidelog.server.init_producer_id import producer_ids
from tidelog.server.transactions.coordinator import TransactionCoordinator, TxnConfig
from tidelog.server.transactions.records import decode_key, decode_value, txn_partition_for
from tidelog.server.transactions.state import TxnMetadata, TxnState
from tidelog.storage.config import BrokerConfig
from tidelog.storage.fetch_info import FetchIsolation
from tidelog.testing import FakeClock, FakeScheduler
from tidelog.topic_partition import TopicPartition

E = ErrorCode
S = TxnState
PARTITIONS = 4
T0, T1 = TopicPartition("data", 0), TopicPartition("data", 1)


@pytest.fixture
def manager(tmp_path: Path) -> Iterator[LogManager]:
    m = _open(tmp_path)
    m.create_topic("data", 2)
    yield m
    m.shutdown()


def _open(tmp_path: Path) -> LogManager:
    broker = BrokerConfig.from_properties({"log.dirs": str(tmp_path / "data")})
    return LogManager.open(broker, scheduler=FakeScheduler(FakeClock()))


def _coordinator(manager: LogManager, clock: FakeClock, **config: Any) -> TransactionCoordinator:
    async def run(fn: Callable[..., Any], *args: object) -> Any:
        return await asyncio.to_thread(fn, *args)
    settings = TxnConfig(num_partitions=PARTITIONS, **config)
    return TransactionCoordinator(manager, settings, clock, run, producer_ids(manager).generate_producer_id)


def _drive(manager: LogManager, body: Callable[[TransactionCoordinator, FakeClock], Awaitable[None]],
           clock: FakeClock | None = None, **config: Any) -> None:
    clock = clock or FakeClock()

    async def main() -> None:
        coordinator = _coordinator(manager, clock, **config)
        await coordinator.load()
        try:
            await body(coordinator, clock)
        finally:
            await coordinator.stop()
    asyncio.run(main())


def _batches(manager: LogManager, tp: TopicPartition) -> Iterator[RecordBatch]:
    """Every batch of ``tp`` up to its log end (a read returns one segment's batches at most)."""
    offset = manager.offsets(tp).log_start_offset
    while offset < manager.offsets(tp).log_end_offset:
        data = manager.read(tp, offset, 1 << 20, FetchIsolation.LOG_END).records
        for _, batch in iter_batches(data):
            if isinstance(batch, RecordBatch):
                yield batch
            offset = batch.next_offset


def _state_records(manager: LogManager, transactional_id: str) -> list[tuple[str, int, int] | None]:
    """(state name, producer id, epoch) of every record of the id (None: a tombstone)."""
    tp = TopicPartition(TRANSACTION_STATE, txn_partition_for(transactional_id, PARTITIONS))
    found: list[tuple[str, int, int] | None] = []
    for batch in _batches(manager, tp):
        for record in batch.records():
            if record.key is not None and decode_key(record.key) == transactional_id:
                if record.value is None:
                    found.append(None)
                else:
                    v = decode_value(record.value)
                    found.append((S.from_id(v.state_id).state_name, v.producer_id, v.producer_epoch))
    return found


def _markers(manager: LogManager, tp: TopicPartition) -> list[tuple[int, int, bool]]:
    """(producer id, epoch, commit) of every control batch of ``tp``."""
    found = []
    for batch in _batches(manager, tp):
        if batch.is_control:
            record = next(iter(batch.records()))
            found.append((batch.producer_id, batch.producer_epoch, record.key[3] == 1))
    return found


def _data(manager: LogManager, tp: TopicPartition) -> list[tuple[int, int, bytes | None, bytes | None]]:
    """(offset, producer id, key, value) of every data record of ``tp``."""
    found = []
    for batch in _batches(manager, tp):
        if not batch.is_control:
            found += [(r.offset, batch.producer_id, r.key, r.value) for r in batch.records()]
    return found


def _txn_batch(pid: int, epoch: int, seq: int, values: list[bytes]) -> bytes:
    b = BatchBuilder(producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=True)
    for i, v in enumerate(values):
        b.append(i, 1_700_000_000_000, None, v)
    return b.build()


# --- InitProducerId ------------------------------------------------------------------------------

def test_init_gives_a_new_id_epoch_0_then_bumps_it(manager: LogManager) -> None:
    async def body(c: TransactionCoordinator, clock: FakeClock) -> None:
        first = await c.init_producer_id("tx", 60000)
        assert first.error is E.NONE and first.producer_epoch == 0
        again = await c.init_producer_id("tx", 30000)
        assert (again.error, again.producer_id, again.producer_epoch) == (E.NONE, first.producer_id, 1)
        assert c.describe("tx").state == "Empty" and c.describe("tx").timeout_ms == 30000
        other = await c.init_producer_id("other", 60000)
        assert other.producer_id != first.producer_id
    _drive(manager, body)
    assert len(manager.partitions(TRANSACTION_STATE)) == PARTITIONS
    pid = _state_records(manager, "tx")[0][1]
    assert _state_records(manager, "tx") == [("Empty", pid, 0), ("Empty", pid, 1)]


def test_init_refuses_bad_timeouts_and_empty_ids_writing_nothing(manager: LogManager) -> None:
    async def body(c: TransactionCoordinator, clock: FakeClock) -> None:
        assert (await c.init_producer_id("tx", 900001)).error is E.INVALID_TRANSACTION_TIMEOUT
        assert (await c.init_producer_id("tx", 0)).error is E.INVALID_TRANSACTION_TIMEOUT
        assert (await c.init_producer_id("", 1000)).error is E.INVALID_REQUEST
        assert c.describe("tx") is None
    _drive(manager, body)
    assert not manager.has_topic(TRANSACTION_STATE)


def test_init_with_a_stale_expected_epoch_is_fenced(manager: LogManager) -> None:
    async def body(c: TransactionCoordinator, clock: FakeClock) -> None:
        first = await c.init_producer_id("tx", 60000)
        second = await c.init_producer_id("tx", 60000)
        assert second.producer_epoch == 1
        stale = await c.init_producer_id("tx", 60000, first.producer_id, 5)
        assert stale.error is E.PRODUCER_FENCED
        resumed = await c.init_producer_id("tx", 60000, first.producer_id, 1)  # KIP-360: the current epoch
        assert (resumed.error, resumed.producer_epoch) == (E.NONE, 2)
        retried = await c.init_producer_id("tx", 60000, first.producer_id, 1)  # the same call again: no bump
        assert (retried.error, retried.producer_epoch) == (E.NONE, 2)
    _drive(manager, body)


# --- a transaction ------------------------------------------------------------------------------

def test_commit_writes_prepare_markers_and_complete(manager: LogManager) -> None:
    async def body(c: TransactionCoordinator, clock: FakeClock) -> None:
        r = await c.init_producer_id("tx", 60000)
        assert await c.add_partitions("tx", r.producer_id, 0, [T0, T1]) is E.NONE
        assert c.verify_partition(r.producer_id, 0, T0) is E.NONE
        manager.append(T0, _txn_batch(r.producer_id, 0, 0, [b"a", b"b"]))
        assert manager.offsets(T0).last_stable_offset == 0
        assert await c.end_txn("tx", r.producer_id, 0, True) is E.NONE
        assert c.describe("tx").state == "CompleteCommit" and c.describe("tx").partitions == ()
        assert manager.offsets(T0).last_stable_offset == 3
        assert await c.end_txn("tx", r.producer_id, 0, True) is E.NONE  # a retry of what is done
        assert _markers(manager, T0) == [(r.producer_id, 0, True)] and _markers(manager, T1) == [(r.producer_id, 0, True)]
    _drive(manager, body)
    names = [s[0] for s in _state_records(manager, "tx") if s]
    assert names == ["Empty", "Ongoing", "PrepareCommit", "CompleteCommit"]


def test_abort_writes_abort_markers(manager: LogManager) -> None:
    async def body(c: TransactionCoordinator, clock: FakeClock) -> None:
        r = await c.init_producer_id("tx", 60000)
        assert await c.add_partitions("tx", r.producer_id, 0, [T0]) is E.NONE
        manager.append(T0, _txn_batch(r.producer_id, 0, 0, [b"x"]))
        assert await c.end_txn("tx", r.producer_id, 0, False) is E.NONE
        assert c.describe("tx").state == "CompleteAbort"
        assert _markers(manager, T0) == [(r.producer_id, 0, False)]
        assert [(a.producer_id, a.first_offset) for a in manager.aborted_transactions(T0, 0, 10)] == [(r.producer_id, 0)]
    _drive(manager, body)


def test_adding_partitions_already_in_writes_nothing(manager: LogManager) -> None:
    async def body(c: TransactionCoordinator, clock: FakeClock) -> None:
        r = await c.init_producer_id("tx", 60000)
        assert await c.add_partitions("tx", r.producer_id, 0, [T0, T1]) is E.NONE
        assert await c.add_partitions("tx", r.producer_id, 0, [T1]) is E.NONE
    _drive(manager, body)
    assert [s[0] for s in _state_records(manager, "tx") if s] == ["Empty", "Ongoing"]


# --- bad input: Kafka's code, nothing changed -----------------------------------------------------

def test_out_of_order_calls_get_kafkas_errors_and_change_nothing(manager: LogManager) -> None:
    async def body(c: TransactionCoordinator, clock: FakeClock) -> None:
        r = await c.init_producer_id("tx", 60000)
        pid = r.producer_id
        tp = TopicPartition(TRANSACTION_STATE, txn_partition_for("tx", PARTITIONS))
        end = manager.offsets(tp).log_end_offset
        assert await c.end_txn("tx", pid, 0, True) is E.INVALID_TXN_STATE  # EndTxn without AddPartitions
        assert await c.end_txn("tx", pid, 0, False) is E.INVALID_TXN_STATE
        assert await c.add_partitions("tx", pid, 7, [T0]) is E.PRODUCER_FENCED  # a stale (here: wrong) epoch
        assert await c.add_partitions("tx", pid + 1, 0, [T0]) is E.INVALID_PRODUCER_ID_MAPPING
        assert await c.add_partitions("nobody", pid, 0, [T0]) is E.INVALID_PRODUCER_ID_MAPPING
        assert await c.end_txn("", pid, 0, True) is E.INVALID_REQUEST
        assert manager.offsets(tp).log_end_offset == end
        assert await c.add_partitions("tx", pid, 0, [T0]) is E.NONE
        # a transactional batch for a partition not in the transaction, or from a stale epoch
        assert c.verify_partition(pid, 0, T1) is E.INVALID_TXN_STATE
        assert c.verify_partition(pid, 1, T0) is E.PRODUCER_FENCED
        assert c.verify_partition(pid + 99, 0, T0) is E.INVALID_PRODUCER_ID_MAPPING
        assert c.describe("tx").state == "Ongoing"
    _drive(manager, body)


@pytest.mark.parametrize("stopped_after", ["prepare", "markers"])
def test_a_restart_after_prepare_commit_finishes_the_commit(manager: LogManager, stopped_after: str) -> None:
    """A coordinator killed after its PrepareCommit record (before the markers, or after them and
    before CompleteCommit): after loading, the markers are written (again: a second marker changes
    no offset) and CompleteCommit stored; meanwhile AddPartitions gets CONCURRENT_TRANSACTIONS and
    an ABORT INVALID_TXN_STATE."""
    clock = FakeClock()
    pid = producer_ids(manager).generate_producer_id()

    async def stage(c: TransactionCoordinator, _: FakeClock) -> None:
        await asyncio.to_thread(c.topic.ensure)
        meta = TxnMetadata("tx", pid, 0, 60000, S.PREPARE_COMMIT, frozenset({T0}), clock.milliseconds(),
                           clock.milliseconds(), pid)
        await asyncio.to_thread(c.topic.append, "tx", meta.value())
    _drive(manager, stage, clock)
    manager.append(T0, _txn_batch(pid, 0, 0, [b"a"]))
    assert manager.offsets(T0).last_stable_offset == 0
    if stopped_after == "markers":
        manager.write_txn_marker(T0, pid, 0, 0, True)
        assert manager.offsets(T0).last_stable_offset == 2

    async def reload(c: TransactionCoordinator, _: FakeClock) -> None:
        assert c.describe("tx").state in ("PrepareCommit", "CompleteCommit")
        if c.describe("tx").state == "PrepareCommit":
            assert await c.add_partitions("tx", pid, 0, [T1]) is E.CONCURRENT_TRANSACTIONS
            assert await c.end_txn("tx", pid, 0, False) is E.INVALID_TXN_STATE
        for _ in range(200):
            if c.describe("tx").state == "CompleteCommit":
                break
            await asyncio.sleep(0.02)
        assert c.describe("tx").state == "CompleteCommit"
    _drive(manager, reload, clock)
    assert _markers(manager, T0) == [(pid, 0, True)] * (2 if stopped_after == "markers" else 1)
    assert manager.offsets(T0).last_stable_offset == manager.offsets(T0).log_end_offset
    assert [r[3] for r in _data(manager, T0)] == [b"a"]
    assert [s[0] for s in _state_records(manager, "tx") if s] == ["PrepareCommit", "CompleteCommit"]


def test_requests_before_the_load_get_load_in_progress(manager: LogManager) -> None:
    async def main() -> None:
        c = _coordinator(manager, FakeClock())
        assert (await c.init_producer_id("tx", 1000)).error is E.COORDINATOR_LOAD_IN_PROGRESS
        assert await c.end_txn("tx", 1, 0, True) is E.COORDINATOR_LOAD_IN_PROGRESS
        assert c.verify_partition(1, 0, T0) is E.COORDINATOR_LOAD_IN_PROGRESS
    asyncio.run(main())


# --- fencing, timeouts, expiration ----------------------------------------------------------------

def test_a_new_producer_fences_the_ongoing_one(manager: LogManager) -> None:
    async def body(c: TransactionCoordinator, clock: FakeClock) -> None:
        old = await c.init_producer_id("tx", 60000)
        pid = old.producer_id
        assert await c.add_partitions("tx", pid, 0, [T0]) is E.NONE
        manager.append(T0, _txn_batch(pid, 0, 0, [b"old"]))
        assert (await c.init_producer_id("tx", 60000)).error is E.CONCURRENT_TRANSACTIONS
        assert c.describe("tx").state == "CompleteAbort" and c.describe("tx").producer_epoch == 1
        new = await c.init_producer_id("tx", 60000)
        assert (new.error, new.producer_id, new.producer_epoch) == (E.NONE, pid, 2)
        assert await c.add_partitions("tx", pid, 0, [T0]) is E.PRODUCER_FENCED
        assert await c.end_txn("tx", pid, 0, True) is E.PRODUCER_FENCED
        assert c.verify_partition(pid, 0, T0) is E.PRODUCER_FENCED
    _drive(manager, body)
    assert _markers(manager, T0) == [(_state_records(manager, "tx")[0][1], 1, False)]
    names = [s[0] for s in _state_records(manager, "tx") if s]
    assert names == ["Empty", "Ongoing", "PrepareAbort", "CompleteAbort", "Empty"]


def test_a_transaction_past_its_timeout_is_aborted(manager: LogManager) -> None:
    clock = FakeClock()

    async def body(c: TransactionCoordinator, _: FakeClock) -> None:
        r = await c.init_producer_id("tx", 5000)
        assert await c.add_partitions("tx", r.producer_id, 0, [T0]) is E.NONE
        manager.append(T0, _txn_batch(r.producer_id, 0, 0, [b"late"]))
        clock.advance(5000)
        assert c.abort_timed_out() == 0  # start + timeout is not yet past
        clock.advance(1)
        assert c.abort_timed_out() == 1
        for _ in range(200):
            if c.describe("tx").state == "CompleteAbort":
                break
            await asyncio.sleep(0.02)
        assert (c.describe("tx").state, c.describe("tx").producer_epoch) == ("CompleteAbort", 1)
        assert await c.end_txn("tx", r.producer_id, 0, True) is E.PRODUCER_FENCED
    _drive(manager, body, clock)
    assert manager.offsets(T0).last_stable_offset == 2
    assert _markers(manager, T0)[0][1:] == (1, False)


def test_idle_ids_expire_with_a_tombstone(manager: LogManager) -> None:
    clock = FakeClock()

    async def body(c: TransactionCoordinator, _: FakeClock) -> None:
        await c.init_producer_id("idle", 60000)
        r = await c.init_producer_id("busy", 60000)
        await c.add_partitions("busy", r.producer_id, 0, [T0])
        clock.advance(10_000)
        assert c.expire_ids() == 1  # the Ongoing one stays
        for _ in range(200):
            if c.describe("idle") is None:
                break
            await asyncio.sleep(0.02)
        assert c.describe("idle") is None and c.describe("busy").state == "Ongoing"
    _drive(manager, body, clock, id_expiration_ms=10_000)
    assert _state_records(manager, "idle")[-1] is None

    async def reload(c: TransactionCoordinator, _: FakeClock) -> None:
        assert c.describe("idle") is None and c.describe("busy").state == "Ongoing"
        assert [t.transactional_id for t in c.list_transactions(["ongoing"])] == ["busy"]
    _drive(manager, reload, clock)


def test_markers_carry_the_coordinator_epoch_the_partition_stored(manager: LogManager) -> None:
    """A dir adopted from Kafka: the data partition holds a marker Kafka's coordinator wrote at
    coordinator epoch 5 for the producer; the coordinator's markers go out at 5 too, so the partition
    takes them (at 0 they would be refused as a zombie's and the transaction left open there)."""
    async def body(c: TransactionCoordinator, _: FakeClock) -> None:
        r = await c.init_producer_id("tx", 60000)
        pid = r.producer_id
        manager.write_txn_marker(T0, pid, 0, 5, False)  # a marker Kafka's coordinator wrote at epoch 5
        assert await c.add_partitions("tx", pid, 0, [T0]) is E.NONE
        manager.append(T0, _txn_batch(pid, 0, 0, [b"a"]))
        assert await c.end_txn("tx", pid, 0, True) is E.NONE
        assert manager.offsets(T0).last_stable_offset == manager.offsets(T0).log_end_offset
    _drive(manager, body)
    epochs = [int.from_bytes(bytes(next(iter(b.records())).value[2:6]), "big") for b in _batches(manager, T0) if b.is_control]
    assert epochs == [5, 5] and [m[2] for m in _markers(manager, T0)] == [False, True]


def test_add_offsets_adds_the_groups_offsets_partition(manager: LogManager) -> None:
    clock = FakeClock()
    offsets = OffsetsTopic(manager, clock, partitions=3, segment_bytes=1 << 20)

    async def main() -> None:
        async def run(fn: Callable[..., Any], *args: object) -> Any:
            return await asyncio.to_thread(fn, *args)
        c = TransactionCoordinator(manager, TxnConfig(num_partitions=PARTITIONS), clock, run,
                                   producer_ids(manager).generate_producer_id, offsets_partitions=offsets.ensure)
        await c.load()
        r = await c.init_producer_id("tx", 60000)
        assert await c.add_offsets("tx", r.producer_id, 1, "grp") is E.PRODUCER_FENCED
        assert await c.add_offsets("tx", r.producer_id, 0, "") is E.INVALID_REQUEST
        assert await c.add_offsets("tx", r.producer_id, 0, "grp") is E.NONE
        tp = TopicPartition(OFFSETS_TOPIC, offsets_partition_for("grp", 3))
        assert c.describe("tx").partitions == (tp,) and c.verify_partition(r.producer_id, 0, tp) is E.NONE
        await c.stop()
    asyncio.run(main())
    assert len(manager.partitions(OFFSETS_TOPIC)) == 3
