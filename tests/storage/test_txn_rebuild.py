"""Rebuilding ``.txnindex`` files from the ABORT markers in the log (storage/txn_rebuild.py) and the
log's check of each segment's index before it is served (TxnIndexCheck).

One scenario, three segments, the entries Kafka's producer state writes for it (kafka-storage.md
§1.10, transactions.md §3: only an ABORT of a transaction that holds data is indexed, its last
stable offset is the first offset of another producer's open transaction, else marker + 1)::

    segment 0:  0 p1 data   1 p1 data   2 p1 COMMIT   3 p1 data
    segment 4:  4 p2 data   5 p1 ABORT  6 p2 data     7 p1 ABORT (no data: not indexed)   8 plain
    segment 9:  9 p2 ABORT  10 plain
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import threading

import pytest
from storage_helpers import T0, MakeLog, batch, crash, read_all

from tidelog.records.control import build_end_txn_marker_batch
from tidelog.storage import fileops, files, txn_rebuild
from tidelog.storage.log import Log
from tidelog.storage.txn_index import AbortedTxn
from tidelog.storage.txn_rebuild import abort_markers, rebuild_aborted_txns

KAFKA_ENTRIES = {0: [], 4: [AbortedTxn(1, 3, 5, 4)], 9: [AbortedTxn(2, 4, 9, 10)]}


def data(offset: int, producer_id: int = -1) -> bytes:
    txn = {"producer_id": producer_id, "producer_epoch": 0, "base_sequence": offset, "is_transactional": True}
    return batch(b"v%d" % offset, base_offset=offset, **(txn if producer_id >= 0 else {}))


def marker(offset: int, producer_id: int, commit: bool) -> bytes:
    return build_end_txn_marker_batch(commit=commit, producer_id=producer_id, producer_epoch=0,
                                      coordinator_epoch=0, base_offset=offset, timestamp=T0)


def write_scenario(make_log: MakeLog) -> Log:
    """The scenario, with each segment's .txnindex as Kafka writes it, closed cleanly."""
    log = make_log()
    for appended in ([data(0, 1), data(1, 1), marker(2, 1, True), data(3, 1)],
                     [data(4, 2), marker(5, 1, False), data(6, 2), marker(7, 1, False), data(8)],
                     [marker(9, 2, False), data(10)]):
        if log.log_end_offset:
            log.roll()
        for one in appended:
            log.append_as_follower(one)
        for txn in KAFKA_ENTRIES[log.active_segment.base_offset]:
            log.active_segment.txn_index.append(txn)
    log.update_high_watermark(log.log_end_offset)
    log.close()
    return log


def committed_view(log: Log) -> list[int]:
    """The offsets a read_committed consumer keeps: a client drops the records of each aborted
    producer from the entry's first offset up to its marker (and every control batch)."""
    aborted = log.collect_aborted_transactions(0, log.log_end_offset)
    kept = []
    for rec in read_all(log):
        if rec.key is not None and rec.key.startswith(b"\x00\x00\x00"):
            continue  # a marker
        if not any(t.first_offset <= rec.offset <= t.last_offset and rec.value == b"v%d" % rec.offset
                   and _producer_of(rec.offset) == t.producer_id for t in aborted):
            kept.append(rec.offset)
    return kept


def _producer_of(offset: int) -> int:
    return {0: 1, 1: 1, 3: 1, 4: 2, 6: 2}.get(offset, -1)


def txn_files(dir: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(dir.glob("*.txnindex"))}


def test_abort_markers_are_found_from_the_headers(make_log: MakeLog) -> None:
    log = write_scenario(make_log)
    reopened = make_log(config=log.config, had_clean_shutdown=True)
    assert [abort_markers(s) for s in reopened.segments] == [[], [(1, 5), (1, 7)], [(2, 9)]]


@pytest.mark.parametrize("snapshots", [True, False], ids=["from-snapshots", "from-log-start"])
def test_rebuilt_entries_are_kafkas(make_log: MakeLog, tp_dir: Path, snapshots: bool) -> None:
    log = write_scenario(make_log)
    reopened = make_log(config=log.config, had_clean_shutdown=True)
    offsets = reopened.producer_state.snapshot_offsets if snapshots else []
    assert not snapshots or 9 in offsets, "a snapshot at the last segment's base: p2's open transaction"
    cache: dict[int, dict[int, int]] = {}
    segments = reopened.segments
    for segment in reversed(segments):  # the latest first: no cache to lean on
        assert rebuild_aborted_txns(segments, segment, 0, offsets, tp_dir, {}) == KAFKA_ENTRIES[segment.base_offset]
    for segment in segments:  # in order, through the cache
        assert rebuild_aborted_txns(segments, segment, 0, offsets, tp_dir, cache) == KAFKA_ENTRIES[segment.base_offset]
    assert cache[9] == {2: 4}


def _delete(path: Path) -> None:
    path.unlink()


def _cut_mid_entry(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:-5])


def _empty(path: Path) -> None:
    path.write_bytes(b"")


def _newer_version(path: Path) -> None:
    path.write_bytes(b"\x00\x07" + path.read_bytes()[2:])


DAMAGE: dict[str, Callable[[Path], None]] = {
    "deleted": _delete, "cut-mid-entry": _cut_mid_entry, "emptied": _empty, "newer-version": _newer_version,
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
@pytest.mark.parametrize("clean", [True, False], ids=["clean-open", "recovery"])
@pytest.mark.parametrize("snapshots", [True, False], ids=["with-snapshots", "no-snapshots"])
def test_a_lost_or_damaged_txn_index_is_rebuilt_before_read_committed_reads_use_it(
    make_log: MakeLog, tp_dir: Path, damage: str, clean: bool, snapshots: bool,
) -> None:
    log = write_scenario(make_log)
    intact = make_log(config=log.config, had_clean_shutdown=True)
    expected_aborted, expected_view = intact.collect_aborted_transactions(0, 11), committed_view(intact)
    assert expected_view == [0, 1, 8, 10]
    intact.close()
    originals = txn_files(tp_dir)
    assert set(originals) == {"00000000000000000004.txnindex", "00000000000000000009.txnindex"}
    for name in originals:
        DAMAGE[damage](tp_dir / name)
    if not snapshots:
        for path in tp_dir.glob("*" + files.PRODUCER_SNAPSHOT_SUFFIX):
            path.unlink()
    reopened = make_log(config=log.config, had_clean_shutdown=clean, recovery_point=0)
    assert reopened.collect_aborted_transactions(0, 11) == expected_aborted
    assert committed_view(reopened) == expected_view
    assert txn_files(tp_dir) == originals, "rebuilt byte for byte as Kafka wrote them"
    crash(reopened)
    again = make_log(config=log.config, had_clean_shutdown=False, recovery_point=0)
    assert again.collect_aborted_transactions(0, 11) == expected_aborted


def test_a_txn_index_that_lost_entries_at_a_whole_entry_boundary_gets_them_back(make_log: MakeLog, tp_dir: Path) -> None:
    log = write_scenario(make_log)
    path = tp_dir / "00000000000000000004.txnindex"
    original = path.read_bytes()
    extra = AbortedTxn(3, 6, 7, 8).encode()  # an entry no marker stands for goes too
    path.write_bytes(extra)
    reopened = make_log(config=log.config, had_clean_shutdown=True)
    assert reopened.collect_aborted_transactions(4, 9) == [AbortedTxn(1, 3, 5, 4), AbortedTxn(2, 4, 9, 10)]
    assert path.read_bytes() == original


def test_entries_the_markers_agree_with_are_kept_as_written(make_log: MakeLog, tp_dir: Path) -> None:
    """A broker that wrote the index knew its producer state first hand: its values stay."""
    log = write_scenario(make_log)
    path = tp_dir / "00000000000000000009.txnindex"
    written = AbortedTxn(2, 4, 9, 5)  # another last stable offset than the replay would give
    path.write_bytes(written.encode())
    reopened = make_log(config=log.config, had_clean_shutdown=True)
    assert reopened.collect_aborted_transactions(9, 11) == [written]
    assert path.read_bytes() == written.encode()


def test_a_log_without_transactions_checks_each_index_once_and_writes_nothing(make_log: MakeLog, tp_dir: Path) -> None:
    log = make_log(segment_bytes=300)
    for i in range(20):
        log.append_as_leader(batch(b"x" * 20))
    assert log.collect_aborted_transactions(0, log.log_end_offset) == []
    assert all(s.txn_index_checked for s in log.segments)
    assert txn_files(tp_dir) == {}


@pytest.mark.parametrize("damage", ["deleted", "cut-mid-entry"])
def test_recovery_rebuilds_the_txn_index_at_open_as_kafka_does(make_log: MakeLog, tp_dir: Path, damage: str) -> None:
    """A recovered segment holding transaction markers, or whose index was unreadable, has its
    index rebuilt by the open itself (before any read), so the dir is right for Kafka too."""
    log = write_scenario(make_log)
    originals = txn_files(tp_dir)
    for name in originals:
        DAMAGE[damage](tp_dir / name)
    reopened = make_log(config=log.config, had_clean_shutdown=False, recovery_point=0)
    assert txn_files(tp_dir) == originals
    assert all(s.txn_index_checked for s in reopened.segments)


def test_a_segment_whose_headers_do_not_walk_keeps_its_index_and_reads_go_on(
    make_log: MakeLog, tp_dir: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    log = write_scenario(make_log)
    first = tp_dir / "00000000000000000000.log"
    data = bytearray(first.read_bytes())
    data[16] = 9  # the first batch's magic: no batch header can be walked past it
    first.write_bytes(bytes(data))
    reopened = make_log(config=log.config, had_clean_shutdown=True)
    assert reopened.collect_aborted_transactions(0, 11) == KAFKA_ENTRIES[4] + KAFKA_ENTRIES[9]
    assert "transaction index of" in caplog.text and "not checked" in caplog.text


def test_a_txn_index_rewrite_holds_the_append_lock_for_no_fsync(
    make_log: MakeLog, tp_dir: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    log = write_scenario(make_log)
    (tp_dir / "00000000000000000009.txnindex").unlink()
    reopened = make_log(config=log.config, had_clean_shutdown=True)
    under_lock: list[bool] = []
    fsync = fileops.fsync

    def watched_fsync(fd: int, path: Path) -> None:
        free: list[bool] = []
        other = threading.Thread(target=lambda: free.append(_try_lock(reopened)))
        other.start()
        other.join()
        under_lock.append(not free[0])
        fsync(fd, path)

    monkeypatch.setattr(fileops, "fsync", watched_fsync)
    assert reopened.collect_aborted_transactions(9, 11) == KAFKA_ENTRIES[9]
    assert not any(under_lock), "an append would wait for the rewrite's fsync"


def _try_lock(log: Log) -> bool:
    if log._lock.acquire(timeout=0):
        log._lock.release()
        return True
    return False


def test_a_truncation_during_a_txn_index_check_keeps_the_stale_entries_out(
    make_log: MakeLog, tp_dir: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    log = write_scenario(make_log)
    (tp_dir / "00000000000000000009.txnindex").unlink()
    reopened = make_log(config=log.config, had_clean_shutdown=True)
    rebuild = txn_rebuild.rebuild_aborted_txns

    def rebuild_then_truncate(*args: object, **kwargs: object) -> list[AbortedTxn]:
        found = rebuild(*args, **kwargs)  # type: ignore[arg-type]
        reopened.truncate_to(9)  # a follower cut the log meanwhile: the marker at 9 is gone
        return found

    monkeypatch.setattr(txn_rebuild, "rebuild_aborted_txns", rebuild_then_truncate)
    assert reopened.collect_aborted_transactions(9, 11) == []
    monkeypatch.undo()
    reopened.append_as_follower(data(9, 2))
    assert reopened.collect_aborted_transactions(0, 10) == KAFKA_ENTRIES[4]
    assert reopened.active_segment.txn_index.all_aborted_txns() == []
