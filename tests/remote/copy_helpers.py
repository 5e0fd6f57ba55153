"""Helpers of the copy tests: a real :class:`Log` with sealed segments, and the checks that a
remote segment's objects are the local files byte for byte."""

from __future__ import annotations

from pathlib import Path

from tidelog.records import BatchBuilder
from tidelog.remote.metadata import RemoteFileKind, RemoteLogSegmentMetadata, object_key
from tidelog.remote.store import RemoteStore
from tidelog.storage import files
from tidelog.storage.checkpoints import format_epoch_checkpoint
from tidelog.storage.log import Log
from tidelog.storage.txn_index import AbortedTxn
from tidelog.testing import FakeClock

T0 = 1_700_000_000_000


def batch(count: int, ts: int = T0, size: int = 100) -> bytes:
    builder = BatchBuilder(base_offset=0)
    for i in range(count):
        builder.append(i, ts + i, f"k{i}".encode(), bytes([i % 251]) * size)
    return builder.build()


def make_log(dir: Path, segments: int = 3, *, batches: int = 4, records: int = 5, epochs: tuple[int, ...] = (0,),
             aborted_in: tuple[int, ...] = (), clock: FakeClock | None = None) -> Log:
    """A log of ``segments`` sealed segments plus an empty active one; segment ``i`` is written
    in epoch ``epochs[min(i, len - 1)]``; the segments in ``aborted_in`` get a ``.txnindex`` entry."""
    log = Log.open(dir, clock=clock or FakeClock())
    for i in range(segments):
        epoch = epochs[min(i, len(epochs) - 1)]
        for b in range(batches):
            log.append_as_leader(batch(records, T0 + 1000 * i + b), leader_epoch=epoch)
        if i in aborted_in:
            start = log.active_segment.base_offset
            log.active_segment.txn_index.append(AbortedTxn(7, start, log.log_end_offset - 1, start))
        log.roll()
    log.update_high_watermark(log.log_end_offset)
    return log


def assert_matches_local(store: RemoteStore, segment: RemoteLogSegmentMetadata, dir: Path, next_base: int,
                         epochs_text: str | None = None) -> None:
    """Every object of ``segment`` holds the local file's bytes; the txn index only when non-empty."""
    base = segment.start_offset
    local = {RemoteFileKind.SEGMENT: files.log_file(dir, base), RemoteFileKind.OFFSET_INDEX: files.offset_index_file(dir, base),
             RemoteFileKind.TIME_INDEX: files.time_index_file(dir, base),
             RemoteFileKind.TRANSACTION_INDEX: files.transaction_index_file(dir, base),
             RemoteFileKind.PRODUCER_SNAPSHOT: files.producer_snapshot_file(dir, next_base)}
    for kind, path in local.items():
        key = object_key(segment, kind)
        if kind is RemoteFileKind.TRANSACTION_INDEX and segment.txn_idx_empty:
            assert not path.exists() or path.stat().st_size == 0
            assert key not in {i.key for i in store.list(key.rpartition("/")[0])}
            continue
        assert store.get(key) == path.read_bytes(), kind
    assert segment.segment_size_in_bytes == files.log_file(dir, base).stat().st_size
    if epochs_text is not None:
        assert store.get(object_key(segment, RemoteFileKind.LEADER_EPOCH)).decode() == epochs_text


def expected_epochs_text(log: Log, next_base: int) -> str:
    return format_epoch_checkpoint(e for e in log.leader_epoch_cache.entries if e.start_offset < next_base)
