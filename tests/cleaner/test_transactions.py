"""Transaction state of a cleaning pass (cleaner/transactions.py) and the producer state the
cleaner protects (cleaner/producers.py): Kafka's CleanedTransactionMetadata and
lastRecordsOfActiveProducers, kafka-storage.md §3.7.6."""

from __future__ import annotations

import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from cleaner_helpers import MakeLog, all_records, cleaner_config, keyed_batch
from hypothesis import given, settings
from hypothesis import strategies as st

from tidelog.cleaner.clean import Cleaner, CleanerBuffers, InProcessEngine
from tidelog.cleaner.offset_map import OffsetMap
from tidelog.cleaner.producers import ProducerLastBatch, producer_last_batches
from tidelog.cleaner.retain import discardable_batches
from tidelog.cleaner.transactions import CleanedTransactionMetadata
from tidelog.errors import CorruptRecordError
from tidelog.records.scan import scan_batches
from tidelog.storage.file_records import FileRecords
from tidelog.records import (
    BatchBuilder,
    ControlRecordType,
    RecordBatch,
    build_empty_batch,
    build_end_txn_marker_batch,
    build_legacy_batch,
)
from tidelog.storage.log import Log
from tidelog.storage.txn_index import AbortedTxn
from tidelog.testing import FakeClock, FakeScheduler
from tests.txn_helpers import write_segments

T = 1_700_000_000_000
ABORT, COMMIT = ControlRecordType.ABORT, ControlRecordType.COMMIT


def metadata(*aborted: AbortedTxn) -> tuple[CleanedTransactionMetadata, list[AbortedTxn]]:
    kept: list[AbortedTxn] = []
    return CleanedTransactionMetadata(list(aborted), kept.append), kept


# --- CleanedTransactionMetadata ----------------------------------------------------------------

def test_aborted_data_is_discardable_only_once_the_pass_reaches_its_first_offset() -> None:
    txn, _ = metadata(AbortedTxn(producer_id=1, first_offset=5, last_offset=9, last_stable_offset=9))
    assert txn.on_data(4, 1, True) is False  # before the aborted transaction: committed data
    assert txn.on_data(6, 1, True) is True
    assert txn.on_data(7, 2, True) is False  # another producer


def test_abort_marker_stays_and_is_reindexed_when_its_data_was_seen() -> None:
    aborted = AbortedTxn(1, 0, 3, 4)
    txn, kept = metadata(aborted)
    assert txn.on_data(2, 1, True) is True
    assert txn.on_control(3, 1, ABORT) is False and kept == [aborted]
    assert txn.on_data(5, 1, True) is False  # the next transaction of that producer commits


def test_abort_marker_is_discardable_when_no_data_of_it_was_seen() -> None:
    txn, kept = metadata(AbortedTxn(1, 0, 3, 4))
    assert txn.on_data(2, 1, False) is False  # non-transactional data of the same producer
    assert txn.on_control(3, 1, ABORT) is True and kept == []


def test_commit_marker_is_discardable_unless_data_of_its_producer_was_seen() -> None:
    txn, _ = metadata()
    assert txn.on_control(0, 1, COMMIT) is True
    assert txn.on_data(1, 1, True) is False
    assert txn.on_control(2, 1, COMMIT) is False
    assert txn.on_control(3, 1, COMMIT) is True  # the set was cleared by the previous marker


def test_empty_control_batch_is_discardable_and_other_control_types_are_kept() -> None:
    txn, _ = metadata()
    assert txn.on_control(0, 1, None) is True
    assert txn.on_control(1, -1, ControlRecordType.LEADER_CHANGE) is False
    assert txn.on_control(2, -1, ControlRecordType.UNKNOWN) is False


def test_a_producer_keeps_its_first_ongoing_aborted_transaction() -> None:
    first, second = AbortedTxn(1, 0, 5, 6), AbortedTxn(1, 2, 8, 9)
    txn, kept = metadata(second, first)
    assert txn.on_data(3, 1, True) is True
    assert txn.on_control(5, 1, ABORT) is False and kept == [first]
    assert txn.on_data(6, 1, True) is False  # `second` was dequeued while `first` was ongoing: lost, as in Kafka


def test_duplicate_entries_from_segments_a_transaction_spans_are_harmless() -> None:
    aborted = AbortedTxn(1, 0, 10, 11)
    txn, kept = metadata(aborted)
    assert txn.on_data(3, 1, True) is True
    txn.add_aborted([aborted])  # collected again for the next segment
    assert txn.on_data(7, 1, True) is True
    assert txn.on_control(10, 1, ABORT) is False and kept == [aborted]


def test_callback_can_change_between_segment_groups() -> None:
    txn, first_group = metadata(AbortedTxn(1, 0, 1, 2), AbortedTxn(2, 3, 4, 5))
    txn.on_data(0, 1, True)
    txn.on_control(1, 1, ABORT)
    second_group: list[AbortedTxn] = []
    txn.on_aborted_kept = second_group.append
    txn.on_data(3, 2, True)
    txn.on_control(4, 2, ABORT)
    assert first_group == [AbortedTxn(1, 0, 1, 2)] and second_group == [AbortedTxn(2, 3, 4, 5)]


def test_advance_to_equals_reading_plain_data_batches() -> None:
    stepwise, _ = metadata(AbortedTxn(1, 4, 9, 9))
    bulk, _ = metadata(AbortedTxn(1, 4, 9, 9))
    for last in (2, 5, 7):
        stepwise.on_data(last, -1, False)
    bulk.advance_to(7)
    assert not bulk._pending and not stepwise._pending  # nothing left waiting
    assert stepwise.on_data(8, 1, True) is bulk.on_data(8, 1, True) is True


def test_discardable_batches_reads_the_scanned_batches() -> None:
    """What the map and copy phases both call: aborted data, then its marker (kept, re-indexed,
    since data of the transaction was seen), then an empty control batch (discardable)."""
    txn, kept = metadata(AbortedTxn(7, 0, 1, 2))
    data = BatchBuilder(base_offset=0, producer_id=7, producer_epoch=0, base_sequence=0, is_transactional=True)
    data.append(0, T, b"k", b"v")
    abort = build_end_txn_marker_batch(commit=False, producer_id=7, producer_epoch=0, coordinator_epoch=0,
                                       base_offset=1, timestamp=T)
    empty = build_empty_batch(base_offset=2, last_offset_delta=0, max_timestamp=T, timestamp_type=0, producer_id=7,
                              producer_epoch=0, base_sequence=-1, is_transactional=True, is_control=True)
    scan = scan_batches(data.build() + abort + empty)
    assert discardable_batches(scan, txn).tolist() == [True, False, True]
    assert kept == [AbortedTxn(7, 0, 1, 2)]


def test_control_batch_without_a_control_key_is_corrupt() -> None:
    b = BatchBuilder(base_offset=0, is_control=True)
    b.append(0, T, b"x", b"")
    with pytest.raises(CorruptRecordError):
        discardable_batches(scan_batches(b.build()), metadata()[0])


# --- producer_last_batches ---------------------------------------------------------------------

def produced(base: int, pid: int, epoch: int, n: int = 1, *, txn: bool = False, ts: int = T) -> bytes:
    b = BatchBuilder(base_offset=base, producer_id=pid, producer_epoch=epoch, base_sequence=base,
                     is_transactional=txn)
    for i in range(n):
        b.append(base + i, ts, b"k%d" % i, b"v")
    return b.build()


def end_txn(base: int, pid: int, epoch: int, commit: bool = True, ts: int = T) -> bytes:
    return build_end_txn_marker_batch(commit=commit, producer_id=pid, producer_epoch=epoch, coordinator_epoch=0,
                                      base_offset=base, timestamp=ts)


def plain(base: int) -> bytes:
    b = BatchBuilder(base_offset=base)
    b.append(base, T, b"p", b"v")
    return b.build()


def write(make_log: MakeLog, *batches: bytes, roll_after: tuple[int, ...] = ()) -> Any:
    log = make_log(segment_bytes=1 << 20)
    for i, data in enumerate(batches):
        log.append_as_follower(data)
        if i in roll_after:
            log.roll()
    return log


def test_last_data_batch_of_each_producer_across_segments(make_log: MakeLog) -> None:
    log = write(make_log, produced(0, 1, 0, 2), produced(2, 2, 0), plain(3), produced(4, 1, 0, 3), plain(7),
                roll_after=(1, 3))
    assert log.num_segments == 3
    assert producer_last_batches(log) == {1: ProducerLastBatch(6, 0, False, T), 2: ProducerLastBatch(2, 0, False, T)}


def test_marker_after_data_keeps_the_data_batch_protected(make_log: MakeLog) -> None:
    log = write(make_log, produced(0, 1, 0, 2, txn=True), end_txn(2, 1, 0, ts=T + 5))
    assert producer_last_batches(log) == {1: ProducerLastBatch(1, 0, False, T + 5)}


def test_marker_with_a_bumped_epoch_protects_control_batches_of_that_epoch(make_log: MakeLog) -> None:
    log = write(make_log, produced(0, 1, 0, txn=True), end_txn(1, 1, 1, commit=False), roll_after=(0,))
    assert producer_last_batches(log) == {1: ProducerLastBatch(1, 1, True, T)}


def test_a_new_epoch_forgets_the_data_of_the_old_one_across_segments(make_log: MakeLog) -> None:
    log = write(make_log, produced(0, 1, 0), end_txn(1, 1, 1), produced(2, 1, 1), end_txn(3, 1, 2),
                roll_after=(0, 2))
    assert producer_last_batches(log) == {1: ProducerLastBatch(3, 2, True, T)}
    log.append_as_follower(produced(4, 1, 2))
    assert producer_last_batches(log) == {1: ProducerLastBatch(4, 2, False, T)}


def test_expired_producers_are_left_out_unless_in_a_transaction(make_log: MakeLog) -> None:
    log = write(make_log, produced(0, 1, 0, ts=T), produced(1, 2, 0, ts=T + 10), produced(2, 3, 0, txn=True, ts=T),
                produced(3, 4, 0, txn=True, ts=T), end_txn(4, 4, 0, ts=T))
    now = T + 1000
    assert set(producer_last_batches(log, now, 995)) == {2, 3}
    assert set(producer_last_batches(log, now, 1001)) == {1, 2, 3, 4}
    assert set(producer_last_batches(log, T + 86_400_000)) == {2, 3}  # Kafka's default expiration
    assert set(producer_last_batches(log)) == {1, 2, 3, 4}


def test_legacy_batches_and_empty_segments_are_walked_past(make_log: MakeLog) -> None:
    legacy = build_legacy_batch([(1, T, b"a", b"1"), (2, T, b"b", b"2")], magic=1)
    log = write(make_log, produced(0, 5, 0), legacy, produced(3, 6, 0), roll_after=(2,))
    assert producer_last_batches(log) == {5: ProducerLastBatch(0, 0, False, T), 6: ProducerLastBatch(3, 0, False, T)}


def test_corrupt_header_is_reported_with_the_segment_path(make_log: MakeLog) -> None:
    log = write(make_log, produced(0, 5, 0), produced(1, 5, 0))
    path = log.segments[0].log.path
    data = bytearray(path.read_bytes())
    data[len(data) // 2 + 16] = 0x7F
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptRecordError) as err:
        producer_last_batches(log)
    assert err.value.path == path and err.value.position == len(data) // 2


def test_many_producers_interleaved_in_one_segment(make_log: MakeLog) -> None:
    log = make_log(segment_bytes=1 << 30)
    log.append_as_follower(b"".join(produced(i, i % 100, i // 5000) for i in range(20_000)))
    result = producer_last_batches(log)
    assert len(result) == 100 and result[7] == ProducerLastBatch(19_907, 3, False, T)


# --- a lost or damaged .txnindex: rebuilt from the markers, the aborted data still goes ----------

def _write_transactions(log: Log) -> None:
    """Keyed transactional data of two producers, an abort spanning segments, Kafka's entries."""
    def data(offset: int, key: bytes, pid: int) -> bytes:
        return keyed_batch([(key, b"v%d" % offset)], base_offset=offset, producer_id=pid, producer_epoch=0,
                           base_sequence=offset, is_transactional=True)

    def marker(offset: int, pid: int, commit: bool) -> bytes:
        return build_end_txn_marker_batch(commit=commit, producer_id=pid, producer_epoch=0, coordinator_epoch=0,
                                          base_offset=offset, timestamp=T)

    write_segments(log, [([data(0, b"a", 1), marker(1, 1, True), data(2, b"b", 1)], []),
                         ([data(3, b"c", 2), marker(4, 1, False), data(5, b"a", 2)], [AbortedTxn(1, 2, 4, 3)]),
                         ([marker(6, 2, False), keyed_batch([(b"d", b"v7")], base_offset=7)], [AbortedTxn(2, 3, 6, 7)])])
    log.roll()
    log.update_high_watermark(log.log_end_offset)


def _cleaned(log: Log, clock: FakeClock) -> list[tuple[int, bytes | None, bytes | None]]:
    buffers = CleanerBuffers(dedupe_buffer_size=1024 * 24, load_factor=0.75, io_buffer_size=65536,
                             max_io_buffer_size=65536)
    cleaner = Cleaner(InProcessEngine(buffers, offset_map=OffsetMap.with_slots(1024, 0.75)), clock)
    cleaner.clean_pass(log, log.topic_partition, 0, log.active_segment.base_offset)
    return all_records(log)


@pytest.mark.parametrize("damage", ["deleted", "cut-mid-entry"])
@pytest.mark.parametrize("clean_shutdown", [True, False], ids=["clean-open", "recovery"])
def test_the_cleaner_drops_aborted_data_when_the_txn_index_was_lost(
    tmp_path: Path, clock: FakeClock, scheduler: FakeScheduler, damage: str, clean_shutdown: bool,
) -> None:
    outputs = []
    for damaged in (False, True):
        dir = tmp_path / f"{damaged}-0"
        log = Log.open(dir, cleaner_config(), clock=clock, scheduler=scheduler)
        _write_transactions(log)
        log.close()
        for path in dir.glob("*.txnindex") if damaged else ():
            if damage == "deleted":
                path.unlink()
            else:
                path.write_bytes(path.read_bytes()[:-3])
        reopened = Log.open(dir, cleaner_config(), had_clean_shutdown=clean_shutdown, clock=clock, scheduler=scheduler)
        outputs.append(_cleaned(reopened, clock))
        reopened.close()
    intact, rebuilt = outputs
    assert [(o, k) for o, k, _ in intact] == [(0, b"a"), (7, b"d")], "the aborted records of both producers go"
    assert rebuilt == intact


# --- the producer walk against a plain replay of Kafka's ProducerStateEntry rules -----------------

@dataclass
class _Replayed:
    epoch: int
    last_data: int = -1
    last_offset: int = -1
    last_timestamp: int = -1
    in_txn: bool = False


def replay(batches: list[RecordBatch]) -> dict[int, ProducerLastBatch]:
    """Batch by batch: a new epoch forgets the data offset; data sets it; transactional data opens
    a transaction and a marker closes it."""
    state: dict[int, _Replayed] = {}
    for b in batches:
        if b.producer_id < 0:
            continue
        s = state.setdefault(b.producer_id, _Replayed(b.producer_epoch))
        if s.epoch != b.producer_epoch:
            s.epoch, s.last_data = b.producer_epoch, -1
        if b.is_control:
            s.in_txn = False
        else:
            s.last_data = b.last_offset
            s.in_txn = s.in_txn or b.is_transactional
        s.last_offset, s.last_timestamp = b.last_offset, b.max_timestamp
    return {pid: ProducerLastBatch(s.last_data, s.epoch, False, s.last_timestamp) if s.last_data >= 0
            else ProducerLastBatch(s.last_offset, s.epoch, True, s.last_timestamp) for pid, s in state.items()}


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(-1, 3), st.integers(0, 2), st.sampled_from(["data", "txn", "commit"]),
                          st.integers(0, 50), st.booleans()), min_size=1, max_size=40))
def test_producer_walk_agrees_with_a_batch_by_batch_replay(spec: list[tuple[int, int, str, int, bool]]) -> None:
    raw, offset = [], 0
    for pid, epoch, kind, ts, _ in spec:
        if pid < 0:
            raw.append(plain(offset))
        elif kind == "commit":
            raw.append(end_txn(offset, pid, epoch, ts=T + ts))
        else:
            raw.append(produced(offset, pid, epoch, 2, txn=kind == "txn", ts=T + ts))
        offset = RecordBatch(raw[-1]).last_offset + 1
    with tempfile.TemporaryDirectory() as tmp:
        segments, current = [], []
        for i, data in enumerate(raw):
            current.append(data)
            if spec[i][4] or i == len(raw) - 1:
                path = Path(tmp) / f"{len(segments):020d}.log"
                path.write_bytes(b"".join(current))
                segments.append(SimpleNamespace(log=FileRecords(path, path.stat().st_size), size=path.stat().st_size))
                current = []
        log = SimpleNamespace(lock=threading.RLock(), segments=segments)
        batches = [RecordBatch(b) for b in raw]
        expected = replay(batches)
        assert producer_last_batches(log) == expected
        now = T + 30  # expire producers whose last batch is 10 ms old or older, unless in a transaction
        assert set(producer_last_batches(log, now, 10)) == {
            p for p, e in expected.items() if _open_transaction(batches, p) or now - e.last_timestamp < 10}


def _open_transaction(batches: list[RecordBatch], pid: int) -> bool:
    transactional = [b for b in batches if b.producer_id == pid and b.is_transactional]
    return bool(transactional) and not transactional[-1].is_control
