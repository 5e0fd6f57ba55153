"""Transactions in the log: markers appended by the coordinator, producer state's open and
unreplicated transactions, the last stable offset (Kafka's ``UnifiedLog.lastStableOffset``),
the ``.txnindex`` entries the append path writes, INVALID_TXN_STATE and the fencing errors, and
open transactions across close, crash, truncation and producer expiration (Kafka's
UnifiedLogTest / ProducerStateManagerTest transaction scenarios)."""

from __future__ import annotations

import contextlib
import struct
from pathlib import Path

import pytest
from storage_helpers import MakeLog, T0, crash, log_batches, read_all, records

from tidelog.errors import InvalidProducerEpochError, InvalidTxnStateError, TransactionCoordinatorFencedError
from tidelog.records import CompressionType, iter_batches
from tidelog.records.control import ControlRecordType, EndTransactionMarker, build_end_txn_marker_batch, control_batch_type
from tidelog.storage import fileops
from tidelog.storage.append_info import AppendOrigin
from tidelog.storage.fetch_info import FetchIsolation
from tidelog.storage.log import Log
from tidelog.storage.txn_index import AbortedTxn
from tidelog.testing import FakeClock, FakeScheduler

COMMITTED = FetchIsolation.TXN_COMMITTED


def txn(pid: int, seq: int, count: int = 1, epoch: int = 0, **kw: object) -> bytes:
    return records(count, producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=True, **kw)


def idem(pid: int, seq: int, count: int = 1, epoch: int = 0) -> bytes:
    return records(count, producer_id=pid, producer_epoch=epoch, base_sequence=seq)


def append(log: Log, data: bytes, *, move_hw: bool = True) -> int:
    """A leader append as the manager does it (the high watermark follows); its first offset."""
    info = log.append_as_leader(data)
    if move_hw:
        log.maybe_increment_high_watermark(info.next_offset)
    return info.first_offset


def end(log: Log, pid: int, commit: bool, *, epoch: int = 0, coordinator_epoch: int = 0, move_hw: bool = True,
        ts: int = T0) -> int:
    """The coordinator's marker (AppendOrigin.COORDINATOR); its offset."""
    marker = build_end_txn_marker_batch(commit=commit, producer_id=pid, producer_epoch=epoch,
                                        coordinator_epoch=coordinator_epoch, timestamp=ts)
    info = log.append_as_leader(marker, origin=AppendOrigin.COORDINATOR)
    if move_hw:
        log.maybe_increment_high_watermark(info.next_offset)
    return info.first_offset


def entries(log: Log) -> list[AbortedTxn]:
    return [t for s in log.segments for t in s.txn_index.all_aborted_txns()]


def index_bytes(dir: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(dir.glob("*.txnindex"))}


def test_a_marker_is_kafkas_control_batch(make_log: MakeLog) -> None:
    """78 bytes: transactional and control bits, base sequence -1, the producer's id and epoch,
    CreateTime; key version 0 + type, value version 0 + coordinator epoch (reference §3)."""
    log = make_log()
    append(log, txn(7, 0, epoch=3))
    offset = end(log, 7, True, epoch=3, coordinator_epoch=9, ts=T0 + 5)
    [(_, batch)] = [(p, b) for p, b in iter_batches(log.read(offset, 1 << 20, FetchIsolation.LOG_END).records)]
    assert (batch.size_in_bytes, batch.is_control, batch.is_transactional) == (78, True, True)
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence, batch.base_offset) == (7, 3, -1, offset)
    [record] = list(batch.records())
    assert (record.key, record.timestamp) == (struct.pack(">hh", 0, 1), T0 + 5)
    assert EndTransactionMarker.decode(record.value) == EndTransactionMarker(0, 9)
    assert control_batch_type(batch) is ControlRecordType.COMMIT


def test_the_lso_stops_at_the_first_open_transaction_and_moves_when_it_ends(make_log: MakeLog) -> None:
    log = make_log()
    append(log, records(2))
    assert log.last_stable_offset == log.high_watermark == 2
    first = append(log, txn(1, 0))  # producer 1 opens at 2
    append(log, records(1))
    append(log, txn(2, 0))  # producer 2 opens at 4 ...
    end(log, 2, True)  # ... and commits at 5
    assert (log.high_watermark, log.last_stable_offset) == (6, first)
    assert log.fetch_offset_by_timestamp(-1, COMMITTED).offset == first  # ListOffsets latest, read_committed
    assert log.fetch_offset_by_timestamp(-1).offset == 6
    assert [r.offset for r in read_all(log, 0, COMMITTED)] == [0, 1]
    assert log.fetch_offset_by_timestamp(T0, COMMITTED).offset == 0
    append(log, records(1, timestamp=T0 + 100))
    assert log.fetch_offset_by_timestamp(T0 + 50, COMMITTED) is None  # found past the LSO: none
    assert log.fetch_offset_by_timestamp(T0 + 50).offset == 6
    end(log, 1, False)  # producer 1 aborts at 7
    assert log.last_stable_offset == log.high_watermark == 8
    assert [r.offset for r in read_all(log, 0, COMMITTED)] == list(range(8))  # consumers drop markers and aborts
    assert log.fetch_offset_by_timestamp(T0 + 50, COMMITTED).offset == 6


def test_a_transaction_decided_above_the_high_watermark_holds_the_lso_until_it_passes(make_log: MakeLog) -> None:
    """Kafka keeps a completed transaction among the unreplicated ones until the high watermark
    passes its marker: read_committed never sees a decision that could still be lost."""
    log = make_log()
    first = append(log, txn(1, 0, 3))
    append(log, records(2))
    marker = end(log, 1, True, move_hw=False)
    assert (log.high_watermark, log.last_stable_offset) == (5, first)
    log.maybe_increment_high_watermark(marker)
    assert log.last_stable_offset == first
    log.maybe_increment_high_watermark(marker + 1)
    assert log.last_stable_offset == log.high_watermark == marker + 1
    assert log.producer_state.txns.unreplicated == {}


def test_the_lso_never_passes_the_high_watermark_and_never_falls_below_the_log_start(make_log: MakeLog) -> None:
    log = make_log()
    append(log, records(3))
    append(log, txn(1, 0, 2), move_hw=False)  # open at 3, the high watermark still at 3
    assert log.last_stable_offset == 3
    log.maybe_increment_high_watermark(log.log_end_offset)
    log.delete_records(4)  # the log start passes the open transaction's first offset
    assert log.last_stable_offset == 4


def test_abort_entries_are_kafkas_and_the_rebuild_writes_the_same_bytes(make_log: MakeLog, tp_dir: Path) -> None:
    """The reference's observed entries (``11 21 22``; ``22 38 39`` when the abort came after another
    producer's commit; an abort while another transaction is open points at its start), written
    by the append path; then every ``.txnindex`` deleted and rebuilt from the markers: same bytes."""
    log = make_log(segment_bytes=1200)
    append(log, records(11))
    first = append(log, txn(1, 0, 5))
    append(log, txn(1, 5, 5))
    assert end(log, 1, False) == 21
    assert append(log, txn(1, 0, 6, epoch=1)) == 22
    append(log, txn(2, 0, 5))  # 28-32
    end(log, 2, True)  # 33
    append(log, records(4))  # 34-37
    assert end(log, 1, False, epoch=1) == 38
    other = append(log, txn(3, 0, 2))  # open at 39
    mine = append(log, txn(4, 0, 2))  # 41
    end(log, 4, False)  # 43: producer 3's transaction is open
    end(log, 3, False)  # 44
    assert entries(log) == [AbortedTxn(1, first, 21, 22), AbortedTxn(1, 22, 38, 39), AbortedTxn(4, mine, 43, other),
                            AbortedTxn(3, other, 44, 45)]
    assert log.num_segments > 1, "the entries are spread over segments"
    expected, written = entries(log), index_bytes(tp_dir)
    assert b"".join(written.values()) == b"".join(t.encode() for t in expected)
    log.close()
    for path in tp_dir.glob("*.txnindex"):
        path.unlink()
    reopened = make_log(segment_bytes=1200, had_clean_shutdown=True)
    assert reopened.collect_aborted_transactions(0, reopened.log_end_offset) == expected
    assert index_bytes(tp_dir) == written


def test_a_marker_without_an_open_transaction_is_appended_and_changes_no_offset(make_log: MakeLog) -> None:
    log = make_log()
    append(log, records(2))
    assert end(log, 5, False) == 2
    assert (log.log_end_offset, log.last_stable_offset, entries(log)) == (3, 3, [])
    assert log.producer_state.last_entry(5).current_txn_first_offset is None  # type: ignore[union-attr]


@pytest.mark.parametrize("path", ["compiled", "python"])
def test_a_plain_batch_while_the_transaction_is_open_is_invalid_txn_state(make_log: MakeLog, path: str) -> None:
    """Kafka's ProducerAppendInfo: 'Expected transactional write'; the leader's common append paths
    (the compiled one, and the Python one a fault plan leaves) ask producer state first, so the
    refusal and the nothing-written hold there too."""
    log = make_log()
    append(log, txn(1, 0, 2))
    size = log.size
    plan = fileops.inject(fileops.FaultRule(ops=fileops.WRITE_OPS)) if path == "python" else contextlib.nullcontext()
    with plan, pytest.raises(InvalidTxnStateError) as refused:
        append(log, idem(1, 2))
    assert (refused.value.error_code, refused.value.producer_id, refused.value.offset) == (48, 1, 2)
    assert (log.size, log.log_end_offset) == (size, 2)
    end(log, 1, True)
    append(log, idem(1, 2))  # after the commit, plain batches again
    assert log.log_end_offset == 4


def test_stale_producer_and_coordinator_epochs_are_fenced_and_write_nothing(make_log: MakeLog) -> None:
    log = make_log()
    append(log, txn(1, 0, epoch=2))
    end(log, 1, False, epoch=2, coordinator_epoch=5)
    append(log, txn(1, 1, epoch=2))
    size = log.size
    with pytest.raises(InvalidProducerEpochError):
        end(log, 1, False, epoch=1, coordinator_epoch=5)
    with pytest.raises(TransactionCoordinatorFencedError) as fenced:
        end(log, 1, False, epoch=2, coordinator_epoch=4)
    assert fenced.value.error_code == 52
    assert (log.size, log.last_stable_offset) == (size, 2)
    end(log, 1, True, epoch=3, coordinator_epoch=6)  # a bumped epoch (a fencing abort) is accepted
    assert log.last_stable_offset == log.log_end_offset


@pytest.mark.parametrize("codec", ["gzip", "zstd"])
def test_a_marker_stays_a_marker_on_a_topic_with_a_codec(make_log: MakeLog, codec: str) -> None:
    log = make_log(compression_type=codec)
    append(log, txn(1, 0, 2, compression=CompressionType.NONE))
    offset = end(log, 1, False)
    [batch] = [b for _, b in iter_batches(log.read(offset, 1 << 20, FetchIsolation.LOG_END).records)]
    assert batch.is_control and batch.is_transactional and control_batch_type(batch) is ControlRecordType.ABORT
    assert entries(log) == [AbortedTxn(1, 0, 2, 3)] and log.last_stable_offset == 3


def open_state(log: Log) -> tuple[int, list[tuple[int, int]]]:
    return log.last_stable_offset, [(t.producer_id, t.first_offset) for t in log.ongoing_transactions()]


def test_open_transactions_come_back_after_a_close_and_after_a_crash(make_log: MakeLog, tp_dir: Path) -> None:
    """From the snapshot (its currentTxnFirstOffset) and the batches replayed after it."""
    log = make_log(segment_bytes=300)
    append(log, records(3))
    append(log, txn(1, 0, 2))
    for _ in range(4):
        append(log, records(3))  # rolls: snapshots with producer 1's open transaction
    assert log.num_segments > 2
    append(log, txn(2, 0))
    end(log, 2, False)
    append(log, txn(3, 0))  # after the last snapshot: replayed
    before = open_state(log)
    assert before == (3, [(1, 3), (3, log.log_end_offset - 1)])
    log.close()
    reopened = make_log(segment_bytes=300, had_clean_shutdown=True)
    assert open_state(reopened) == before
    append(reopened, records(1))
    crash(reopened)
    recovered = make_log(segment_bytes=300)
    assert open_state(recovered) == before
    end(recovered, 1, True)
    end(recovered, 3, True)
    assert recovered.last_stable_offset == recovered.log_end_offset


def test_a_crash_between_the_abort_and_its_index_entry_is_repaired_from_the_marker(make_log: MakeLog,
                                                                                   tp_dir: Path) -> None:
    """The entry lost (as a SIGKILL before its write would leave it): the recovered segment's index
    is rebuilt from the ABORT marker with the same rule, so the reopened log serves the same entry."""
    log = make_log()
    append(log, txn(1, 0, 2))
    append(log, txn(2, 0))
    end(log, 1, False)
    written = entries(log)
    assert written == [AbortedTxn(1, 0, 3, 2)]
    crash(log)
    for path in tp_dir.glob("*.txnindex"):
        path.write_bytes(b"")
    recovered = make_log()
    assert recovered.collect_aborted_transactions(0, recovered.log_end_offset) == written
    assert open_state(recovered) == (2, [(2, 2)])


def test_truncation_below_a_transaction_forgets_it(make_log: MakeLog) -> None:
    log = make_log()
    append(log, records(2))
    append(log, txn(1, 0, 2))
    log.truncate_to(2)
    assert open_state(log) == (2, [])
    append(log, txn(4, 0))
    assert open_state(log) == (2, [(4, 2)])


def test_a_producer_with_an_open_transaction_never_expires(tp_dir: Path, clock: FakeClock,
                                                          scheduler: FakeScheduler) -> None:
    log = Log.open(tp_dir, clock=clock, scheduler=scheduler, producer_id_expiration_ms=5000,
                   producer_id_expiration_check_interval_ms=1000)
    try:
        append(log, txn(1, 0))
        append(log, idem(2, 0))
        clock.advance(10_000)
        assert sorted(log.producer_state.active_producers) == [1]
        assert log.last_stable_offset == 0
    finally:
        log.close()


def test_describe_producers_view(make_log: MakeLog) -> None:
    log = make_log()
    append(log, idem(4, 0, 3, epoch=1))
    append(log, txn(9, 0, 2, epoch=2))
    append(log, txn(8, 0, epoch=0))
    end(log, 8, True, coordinator_epoch=3, ts=T0 + 9)
    views = {v.producer_id: v for v in log.producer_views()}
    assert [v.producer_id for v in log.producer_views()] == [4, 8, 9]
    assert (views[4].producer_epoch, views[4].last_sequence, views[4].current_txn_start_offset) == (1, 2, -1)
    assert (views[9].last_sequence, views[9].current_txn_start_offset, views[9].coordinator_epoch) == (1, 3, -1)
    assert (views[8].coordinator_epoch, views[8].last_timestamp, views[8].current_txn_start_offset) == (3, T0 + 9, -1)
    [ongoing] = log.ongoing_transactions()
    assert (ongoing.producer_id, ongoing.producer_epoch, ongoing.first_offset, ongoing.last_timestamp) == (9, 2, 3, T0)
    assert len(log_batches(log)) == 4


def test_an_abort_appended_while_the_index_is_checked_keeps_its_entry(make_log: MakeLog,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The first read checks the active segment's index (here: an ABORT copied in without its
    entry, so it is rebuilt); an ABORT appended by the coordinator between the check's look and
    its rewrite keeps the entry the append path wrote."""
    from tidelog.storage import txn_rebuild

    log = make_log()
    append(log, txn(1, 0))
    log.append_as_follower(build_end_txn_marker_batch(commit=False, producer_id=1, producer_epoch=0,
                                                      coordinator_epoch=0, base_offset=1, timestamp=T0))
    log.maybe_increment_high_watermark(2)
    append(log, txn(2, 0))
    rebuild = txn_rebuild.rebuild_aborted_txns

    def interleaved(*args: object, **kw: object) -> list[AbortedTxn]:
        end(log, 2, False)  # lands after the check took its log end, before it rewrites
        return rebuild(*args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(txn_rebuild, "rebuild_aborted_txns", interleaved)
    assert log.collect_aborted_transactions(0, 2) == [AbortedTxn(1, 0, 1, 2)]
    assert entries(log) == [AbortedTxn(1, 0, 1, 2), AbortedTxn(2, 2, 3, 4)]
