"""read_committed over a read-only :class:`~tidelog.storage.log_view.PartitionView`: the last
stable offset and the aborted transactions of a range, from the files alone.

A process that reads a data dir it does not own (the Spark source) has no producer state in
memory, so it finds both as a broker would after a restart, without writing anything:

* **last stable offset** (:func:`last_stable_offset`): the transactions open at the view's
  readable end (which plays the high watermark) come from the newest readable producer snapshot
  (``<offset>.snapshot``: each producer's ``currentTxnFirstOffset``) at or below that end, then
  a replay of the transactional batch headers after it (Kafka's ``ProducerAppendInfo``: a data
  batch opens its producer's transaction at its base offset, a control batch holding a marker
  closes it, a control batch the cleaner emptied closes nothing). The LSO is the first offset of
  the earliest open transaction (not below the log start offset), or the readable end when none
  is open (Kafka's ``UnifiedLog.lastStableOffset`` with the high watermark at the readable end).
  The snapshot start, the replay step and the LSO rule are :mod:`.txn_tracking`'s, shared with
  the live log and the rebuild of a lost ``.txnindex`` (:mod:`.txn_rebuild`); here a control
  batch counts as a marker when it holds a record (its type is not decoded). The replay is
  kept per view and continued from where it stopped, so a repeated call costs a header walk of
  the bytes appended since; a segment swapped or deleted under it starts it again.
* **aborted transactions** (:func:`aborted_transactions`): the segments' ``.txnindex`` entries
  overlapping ``[start, end)``, read with ``pread`` from the segment holding ``start`` on until
  an entry's last stable offset reaches ``end`` (Kafka's ``collectAbortedTransactions``), for
  :class:`~tidelog.storage.read_committed.AbortedBatchFilter`. Each segment's entries are
  checked against the ABORT markers in its ``.log`` first, as tidelog's broker checks them before
  serving a segment (:class:`~.txn_rebuild.TxnIndexCheck`): where they disagree (a ``.txnindex``
  lost, cut short or corrupt), the entries are rebuilt in memory by the same replay
  (:func:`~.txn_rebuild.rebuild_aborted_txns`) and the file is left as it is (the view writes
  nothing). A sealed segment is checked once per view; the last one at each call, as it grows.

Not thread-safe: one caller per view, like the view itself.
"""

from __future__ import annotations

import os
import weakref
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tidelog.errors import CorruptIndexError
from tidelog.records.batch import CONTROL_FLAG_MASK, TRANSACTIONAL_FLAG_MASK
from tidelog.storage import files
from tidelog.storage.file_records import FileRecords
from tidelog.storage.log_view import DataLossError, PartitionView, SegmentInfo
from tidelog.storage.segment_reader import SegmentReplacedError, open_segment
from tidelog.storage.txn_index import ENTRY_SIZE, AbortedTxn
from tidelog.storage.txn_rebuild import abort_markers, merge_entries, rebuild_aborted_txns
from tidelog.storage.txn_tracking import open_txns_at_snapshot, replay_txn_batch, stable_offset

WALK_CHUNK = 4 << 20  # bytes of headers walked per read


@dataclass(slots=True)
class _Replay:
    """Transactions open below ``next_offset``, and where the walk over the log stands."""

    next_offset: int
    open_txns: dict[int, int] = field(default_factory=dict)  # producer id -> first offset
    segment_base: int = -1  # the segment the walk is in, with its .log's inode; -1 = look it up
    inode: int = -1
    position: int = 0


_REPLAYS: weakref.WeakKeyDictionary[PartitionView, _Replay] = weakref.WeakKeyDictionary()


def last_stable_offset(view: PartitionView) -> int:
    """The last stable offset of ``view``'s partition as of its last refresh (see the module
    doc). Cost: nothing new to walk when the readable end did not move since the last call;
    the first call reads a snapshot and walks the headers after it."""
    bounds = view.bounds
    end = bounds.end_offset
    for attempt in (0, 1):
        replay = _REPLAYS.get(view)
        try:
            if replay is None or replay.next_offset > end:  # first call, or the log was truncated
                replay = _REPLAYS[view] = _from_snapshot(view, bounds.log_start_offset, end)
            _advance(view, replay, end)
            break
        except (SegmentReplacedError, FileNotFoundError, DataLossError):
            _REPLAYS.pop(view, None)  # a segment swapped or deleted under the walk: start again
            if attempt == 1:
                raise
            view.refresh()
            end = view.bounds.end_offset
    first_unstable = min(replay.open_txns.values(), default=None)
    return stable_offset(first_unstable, view.bounds.log_start_offset, end)  # the readable end plays the HW


def _from_snapshot(view: PartitionView, log_start: int, end: int) -> _Replay:
    """The replay's start (:func:`~.txn_tracking.open_txns_at_snapshot` over the snapshots in the
    view's dir)."""
    start, open_txns = open_txns_at_snapshot(view.dir, _snapshot_offsets(view), log_start, end)
    return _Replay(start, open_txns)


def _snapshot_offsets(view: PartitionView) -> list[int]:
    """The offsets of the producer snapshots in ``view``'s dir; DataLossError when the dir is gone."""
    try:
        names = os.listdir(view.dir)
    except FileNotFoundError:
        raise DataLossError("partition dir is gone (topic deleted?)", topic_partition=str(view.topic_partition),
                            path=view.dir) from None
    return [int(name.split(".", 1)[0]) for name in names
            if name.endswith(files.PRODUCER_SNAPSHOT_SUFFIX) and name.split(".", 1)[0].isdigit()]


def _advance(view: PartitionView, replay: _Replay, end: int) -> None:
    """Replay the transactional batches of ``[replay.next_offset, end)``. Raises
    :class:`SegmentReplacedError` when the segment the walk stood in was replaced, deleted or cut
    short (a cleaner swap, retention, a truncation): the caller starts again from a snapshot."""
    if replay.next_offset >= end:
        return
    segments = view.segments
    if replay.segment_base < 0:  # a new replay: find where its first offset lies
        log_start = view.bounds.log_start_offset
        replay.next_offset = max(replay.next_offset, log_start)  # Kafka's producer state starts there too
        found = view.locate(replay.next_offset) if replay.next_offset < end else None
        if found is None:
            return
        replay.segment_base, replay.position = found.segment.base_offset, found.position
        replay.inode = _inode(found.segment)
    current = next((s for s in segments if s.base_offset == replay.segment_base), None)
    if current is None or _inode(current) != replay.inode or os.stat(current.log_path).st_size < replay.position:
        raise SegmentReplacedError("the segment a read_committed replay stood in changed", path=view.dir)
    for segment in segments[segments.index(current):]:
        if segment is not current:
            replay.segment_base, replay.inode, replay.position = segment.base_offset, _inode(segment), 0
        if not _walk(segment, replay, end):
            return


def _walk(segment: SegmentInfo, replay: _Replay, end: int) -> bool:
    """Apply ``segment``'s batches from the replay's position while they end below ``end``;
    whether the walk reached the end of the segment's file (so the next segment follows)."""
    with open_segment(segment.log_path, segment.base_offset) as reader:
        for _, walked in reader.whole_batches(replay.position, WALK_CHUNK):
            b = walked.batches
            last = b["last_offset"]
            below = int(np.searchsorted(last, end - 1, side="right"))  # last offsets increase
            _apply(b, below, replay.open_txns)
            if below < len(last):
                replay.position += int(b["position"][below])
                replay.next_offset = int(b["base_offset"][below])
                return False
            replay.position += walked.end_position
            replay.next_offset = int(last[-1]) + 1
            if walked.stop_position is not None:
                return False
        return True


def _apply(batches: dict[str, np.ndarray], count: int, open_txns: dict[int, int]) -> None:
    """Kafka's producer-state replay of the first ``count`` batches' headers (module doc)."""
    attributes, producer_ids = batches["attributes"][:count], batches["producer_id"][:count]
    rows = np.flatnonzero(((attributes & TRANSACTIONAL_FLAG_MASK) != 0) & (producer_ids >= 0))
    for i in rows.tolist():
        replay_txn_batch(open_txns, int(producer_ids[i]), int(batches["base_offset"][i]),
                         bool(int(attributes[i]) & CONTROL_FLAG_MASK), int(batches["records_count"][i]) > 0)


def _inode(segment: SegmentInfo) -> int:
    return os.stat(segment.log_path).st_ino


def aborted_transactions(view: PartitionView, start: int, end: int) -> list[AbortedTxn]:
    """The aborted transactions overlapping ``[start, end)`` of ``view``'s partition, from the
    ``.txnindex`` files of the segments of the last refresh, each checked against its ABORT
    markers (module doc). Raises :class:`CorruptIndexError` naming a ``.txnindex`` whose entry has
    a version above 0 and whose segment cannot be replayed instead."""
    found: list[AbortedTxn] = []
    if end <= start:
        return found
    segments = view.segments
    first = max((i for i, s in enumerate(segments) if s.base_offset <= start), default=0)
    checks = _CHECKS.setdefault(view, _Checks())
    for segment in segments[first:]:
        for txn in checks.entries(view, segment):
            if txn.last_offset >= start and txn.first_offset < end:
                found.append(txn)
            if txn.last_stable_offset >= end:
                return found
    return found


@dataclass(frozen=True, slots=True)
class _ViewSegment:
    """A listed segment as :mod:`.txn_rebuild` reads one: its ``.log`` (read-only) up to ``size``."""

    base_offset: int
    log: FileRecords
    size: int


@dataclass(slots=True)
class _Checks:
    """One view's checked entries of sealed segments (by base offset and ``.log`` inode), and the
    open transactions at segment bases its replays found (:func:`rebuild_aborted_txns`'s cache)."""

    sealed: dict[tuple[int, int], list[AbortedTxn]] = field(default_factory=dict)
    open_at: dict[int, dict[int, int]] = field(default_factory=dict)

    def entries(self, view: PartitionView, segment: SegmentInfo) -> list[AbortedTxn]:
        """``segment``'s entries, checked against its markers below the view's readable end."""
        segments = view.segments
        sealed = segment is not segments[-1]
        try:
            key = (segment.base_offset, _inode(segment))
            if sealed and key in self.sealed:
                return self.sealed[key]
            checked = self._check(view, segment, segments)
        except FileNotFoundError:  # deleted or swapped since the refresh: its reads fail on their own
            return _read_entries(_txn_index_path(segment))
        if sealed:
            self.sealed[key] = checked
        return checked

    def _check(self, view: PartitionView, segment: SegmentInfo, segments: list[SegmentInfo]) -> list[AbortedTxn]:
        end = view.bounds.end_offset
        try:
            existing: list[AbortedTxn] | None = [t for t in _read_entries(_txn_index_path(segment)) if t.last_offset < end]
        except CorruptIndexError:
            existing = None
        target = _view_segment(view, segment)
        markers = abort_markers(target, end)
        if existing is not None and [(t.producer_id, t.last_offset) for t in existing] == markers:
            return existing
        if not markers:
            return []
        rebuilt = rebuild_aborted_txns([_view_segment(view, s) for s in segments], target, view.bounds.log_start_offset,
                                       _snapshot_offsets(view), view.dir, self.open_at, end)
        return merge_entries(existing or [], rebuilt)


_CHECKS: weakref.WeakKeyDictionary[PartitionView, _Checks] = weakref.WeakKeyDictionary()


def _view_segment(view: PartitionView, segment: SegmentInfo) -> _ViewSegment:
    size = view.readable_size(segment)
    return _ViewSegment(segment.base_offset, FileRecords(segment.log_path, size), size)


def _txn_index_path(segment: SegmentInfo) -> Path:
    return files.transaction_index_file(segment.log_path.parent, segment.base_offset)


def _read_entries(path: os.PathLike[str]) -> list[AbortedTxn]:
    """The whole entries of a ``.txnindex`` (none when it is missing; a partial last entry,
    being appended, is left out)."""
    try:
        with open(path, "rb", buffering=0) as f:
            data = f.read()
    except FileNotFoundError:
        return []
    try:
        return [AbortedTxn.decode(data, p) for p in range(0, len(data) - len(data) % ENTRY_SIZE, ENTRY_SIZE)]
    except CorruptIndexError as e:
        raise CorruptIndexError(f"{e} (read_committed cannot tell aborted records)", path=path) from None
