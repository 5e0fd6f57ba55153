"""read_committed over a read-only view (storage/view_txns.py): the last stable offset found from
producer snapshots and batch headers alone, kept up to date as the log grows, and the aborted
transactions of a range read from the ``.txnindex`` files as the log itself answers them."""

from __future__ import annotations

import random
from pathlib import Path

from storage_helpers import T0, MakeLog, batch

from tidelog.records.builder import build_empty_batch
from tidelog.records.control import build_end_txn_marker_batch
from tidelog.records.record import TimestampType
from tidelog.storage import files
from tidelog.storage.log import Log
from tidelog.storage.log_view import LogView, PartitionView
from tidelog.storage.producer_snapshot import SnapshotEntry, write_snapshot
from tidelog.storage.txn_index import AbortedTxn
from tidelog.storage.view_txns import aborted_transactions, last_stable_offset
from tidelog.topic_partition import TopicPartition

TP = TopicPartition("topic", 0)


def data(offset: int, producer_id: int = -1, count: int = 1) -> bytes:
    txn = {"producer_id": producer_id, "producer_epoch": 0, "base_sequence": offset, "is_transactional": True}
    return batch(*[b"v%d" % (offset + i) for i in range(count)], base_offset=offset,
                 **(txn if producer_id >= 0 else {}))


def marker(offset: int, producer_id: int, commit: bool) -> bytes:
    return build_end_txn_marker_batch(commit=commit, producer_id=producer_id, producer_epoch=0,
                                      coordinator_epoch=0, base_offset=offset, timestamp=T0)


def fresh_view(tp_dir: Path) -> PartitionView:
    view = LogView([tp_dir.parent]).partition(TP)
    view.refresh()
    return view


class Model:
    """What Kafka's producer state says, replayed from offset 0 every time (no snapshot, no
    incremental state): producer id -> first offset of its open transaction."""

    def __init__(self) -> None:
        self.open: dict[int, int] = {}
        self.aborted: list[AbortedTxn] = []

    def data(self, offset: int, producer_id: int) -> None:
        if producer_id >= 0:
            self.open.setdefault(producer_id, offset)

    def marker(self, offset: int, producer_id: int, commit: bool) -> AbortedTxn | None:
        first = self.open.pop(producer_id, None)
        if first is None or commit:
            return None
        entry = AbortedTxn(producer_id, first, offset, min(self.open.values(), default=offset + 1))
        self.aborted.append(entry)
        return entry

    def lso(self, end: int) -> int:
        return min(min(self.open.values(), default=end), end)


def append_marker(log: Log, model: Model, offset: int, producer_id: int, commit: bool) -> None:
    """The marker and, for an ABORT, the ``.txnindex`` entry Kafka's producer state writes (a
    follower append leaves it to its caller)."""
    log.append_as_follower(marker(offset, producer_id, commit))
    entry = model.marker(offset, producer_id, commit)
    if entry is not None:
        log.active_segment.txn_index.append(entry)


def test_open_transactions_hold_the_lso_until_their_marker(make_log: MakeLog, tp_dir: Path) -> None:
    log, model = make_log(), Model()
    view = fresh_view(tp_dir)  # created before anything is written: its replay is carried along
    steps = [("data", 0, 1), ("data", 1, -1), ("data", 2, 2), ("commit", 3, 1), ("data", 4, -1),
             ("data", 5, 1), ("abort", 6, 2), ("data", 7, -1), ("commit", 8, 1)]
    seen = []
    for kind, offset, pid in steps:
        if kind == "data":
            log.append_as_follower(data(offset, pid))
            model.data(offset, pid)
        else:
            append_marker(log, model, offset, pid, kind == "commit")
        view.refresh()
        seen.append(last_stable_offset(view))
        assert seen[-1] == model.lso(offset + 1) == last_stable_offset(fresh_view(tp_dir))
    assert seen == [0, 0, 0, 2, 2, 2, 5, 5, 9]


def test_random_transactions_over_rolls_and_restarts(make_log: MakeLog, tp_dir: Path) -> None:
    """Three transactional producers and plain writes, segments rolled at random (each roll takes
    a producer snapshot that the view starts from), the log closed and reopened twice: after every
    append the view kept from the start, a new view, the model and the log itself agree."""
    rng = random.Random(23)
    log, model = make_log(), Model()
    kept = fresh_view(tp_dir)
    offset = 0
    for step in range(300):
        if step in (100, 200):
            log.close()  # a clean close: a snapshot at the log end, open transactions in it
            log = make_log(had_clean_shutdown=True, recovery_point=offset)
        if rng.random() < 0.05 and log.log_end_offset > log.active_segment.base_offset:
            log.roll()
        pid = rng.choice([-1, 1, 2, 3])
        if pid >= 0 and pid in model.open and rng.random() < 0.3:
            append_marker(log, model, offset, pid, commit=rng.random() < 0.5)
            offset += 1
        else:
            count = rng.randint(1, 3)
            log.append_as_follower(data(offset, pid, count))
            model.data(offset, pid)
            offset += count
        log.update_high_watermark(log.log_end_offset)
        kept.refresh()
        assert last_stable_offset(kept) == model.lso(offset) == last_stable_offset(fresh_view(tp_dir)), step
        assert log.last_stable_offset == model.lso(offset), step  # the log's own, from its producer state
    assert list(tp_dir.glob("*.snapshot")) and model.aborted


def test_the_replay_starts_at_the_newest_snapshot(make_log: MakeLog, tp_dir: Path) -> None:
    """A snapshot's open transaction counts although no batch of it is in the log: the view
    started from the snapshot, not from the log start."""
    log = make_log()
    log.append_as_follower(data(0, count=5))
    log.close(producer_snapshot=False)
    write_snapshot(files.producer_snapshot_file(tp_dir, 5), [SnapshotEntry(
        producer_id=99, producer_epoch=0, last_sequence=2, last_offset=4, offset_delta=0, timestamp=T0,
        coordinator_epoch=0, current_txn_first_offset=3)], sync=False)
    assert last_stable_offset(fresh_view(tp_dir)) == 3


def test_a_marker_the_cleaner_emptied_closes_nothing(make_log: MakeLog, tp_dir: Path) -> None:
    """An empty control batch (its transaction was cleaned away) is not a marker: Kafka's producer
    state skips it, so a transaction opened before it stays open."""
    log = make_log()
    log.append_as_follower(data(0, 7))
    log.append_as_follower(marker(1, 7, True))
    log.append_as_follower(data(2, 7))
    log.append_as_follower(build_empty_batch(
        base_offset=3, last_offset_delta=0, max_timestamp=T0, timestamp_type=TimestampType.CREATE_TIME,
        producer_id=7, producer_epoch=0, base_sequence=-1, is_transactional=True, is_control=True))
    assert last_stable_offset(fresh_view(tp_dir)) == 2
    log.append_as_follower(marker(4, 7, False))
    assert last_stable_offset(fresh_view(tp_dir)) == 5


def test_aborted_transactions_match_the_logs_own_answer(make_log: MakeLog, tp_dir: Path) -> None:
    """Over three segments with ABORTs indexed in later segments than their data, every range's
    aborted transactions read by the view equal the log's (which it serves to read_committed
    fetches)."""
    log, _ = _three_segments(make_log)
    view = fresh_view(tp_dir)
    assert [t.producer_id for t in aborted_transactions(view, 0, 14)] == [1, 2, 3]
    for start in range(14):
        for end in range(start + 1, 15):
            assert aborted_transactions(view, start, end) == log.collect_aborted_transactions(start, end), (start, end)


def _three_segments(make_log: MakeLog) -> tuple[Log, Model]:
    """Three segments whose ABORTs are indexed in later segments than their data, and an ABORT of
    a transaction with no data (offset 13: no entry, as Kafka writes none)."""
    log, model = make_log(), Model()
    script = [[("d", 0, 1), ("d", 1, 1), ("c", 2, 1), ("d", 3, 1)],
              [("d", 4, 2), ("a", 5, 1), ("d", 6, 2), ("a", 7, 1), ("d", 8, -1)],
              [("a", 9, 2), ("d", 10, -1), ("d", 11, 3), ("a", 12, 3), ("a", 13, 4)]]
    for segment in script:
        if log.log_end_offset:
            log.roll()
        for kind, offset, pid in segment:
            if kind == "d":
                log.append_as_follower(data(offset, pid))
                model.data(offset, pid)
            else:
                append_marker(log, model, offset, pid, kind == "c")
    log.update_high_watermark(log.log_end_offset)
    return log, model


def test_a_lost_or_corrupt_txnindex_is_rebuilt_from_the_markers_in_memory(make_log: MakeLog, tp_dir: Path) -> None:
    """As the broker checks each segment's ``.txnindex`` against its ABORT markers before serving
    it, the view does too: a deleted index, one cut short and one with an unreadable entry give
    the same aborted transactions as the intact files, and the files are left as they were."""
    log, model = _three_segments(make_log)
    intact = {(s, e): log.collect_aborted_transactions(s, e) for s in range(14) for e in range(s + 1, 15)}
    assert [t.producer_id for t in intact[0, 14]] == [1, 2, 3]
    bases = [s.base_offset for s in log.segments]
    log.close()
    indexes = [files.transaction_index_file(tp_dir, base) for base in bases]
    indexes[1].unlink()  # holds the ABORTs of 5 and 7
    indexes[2].write_bytes(indexes[2].read_bytes()[:20])  # cut mid-entry: the ABORTs of 9 and 12 lost
    for damage in ("cut", "corrupt"):
        if damage == "corrupt":
            indexes[2].write_bytes(b"\x07" + bytes(39))  # an entry of version 7
        before = {p: p.read_bytes() for p in indexes if p.exists()}
        view = fresh_view(tp_dir)
        for (start, end), expected in intact.items():
            assert aborted_transactions(view, start, end) == expected, (damage, start, end)
        assert {p: p.read_bytes() for p in indexes if p.exists()} == before  # nothing written
        assert not indexes[1].exists()


def test_a_checked_sealed_segment_is_not_walked_again(make_log: MakeLog, tp_dir: Path,
                                                      monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Each sealed segment's markers are walked once per view; the last one at every call."""
    from tidelog.storage import view_txns

    _three_segments(make_log)[0].close()
    walked: list[int] = []
    real = view_txns.abort_markers

    def counting(segment, end):  # type: ignore[no-untyped-def]
        walked.append(segment.base_offset)
        return real(segment, end)

    monkeypatch.setattr(view_txns, "abort_markers", counting)
    view = fresh_view(tp_dir)
    aborted_transactions(view, 0, 14)
    first = sorted(walked)
    walked.clear()
    aborted_transactions(view, 0, 14)
    assert len(first) == 3 and walked == [first[-1]]
