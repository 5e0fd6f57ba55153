"""What loading and recovery do to one segment: check its index files, find where its data ends,
validate its batches and cut an invalid tail, rebuild its indexes from the ``.log``.

Recovery stops at the first batch that fails its CRC or size check, whose offsets leave the
segment's range or go back, or that is cut short, and truncates the ``.log`` there; then it
rebuilds the offset and time indexes per batch, which may differ byte-wise from append-built
ones (both are valid). The leading run of valid v2 batches is checked in columns (one header
walk, one CRC pass); the rest, legacy entries, and the whole segment under a fileops fault plan
(whose reads must go through the seam) batch by batch.

:class:`~tidelog.storage.segment.LogSegment`'s ``recover``, ``rebuild_indexes``, ``check_tail``,
``sanity_check`` and ``read_next_offset`` call these. Not thread-safe: the caller holds the
owning log's lock, or has the segment to itself (loading, cleaning).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Container
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from tidelog.errors import CorruptIndexError, CorruptRecordError, InvalidRecordError, LogSegmentOffsetOverflowError
from tidelog.records import NO_TIMESTAMP, FileBatch
from tidelog.records.batch import CONTROL_FLAG_MASK, TRANSACTIONAL_FLAG_MASK
from tidelog.records.varint import INT32_MAX, INT64_MAX
from tidelog.storage import fileops, files
from tidelog.storage.file_records import BatchHeaders
from tidelog.storage.index import OffsetIndex, TimeIndex, TimestampOffset

if TYPE_CHECKING:
    from tidelog.storage.segment import LogSegment

log = logging.getLogger(__name__)

_TXN_MARKER = TRANSACTIONAL_FLAG_MASK | CONTROL_FLAG_MASK  # both bits: an end-transaction marker


@dataclass(frozen=True, slots=True)
class TailCheck:
    """What :func:`check_tail` found: the offset after the last valid batch it walked (the base
    offset if none), the byte where valid batches stop, and whether that is the end."""

    next_offset: int
    valid_end: int
    whole: bool


@dataclass(frozen=True, slots=True)
class RecoveryResult:
    """What recovering a segment found: bytes cut off, and where each run of batches with one
    leader epoch starts (``(epoch, base offset)``, v2 batches with an epoch only) — all that
    the leader-epoch cache needs. Batches themselves are not kept: they pin their read buffers,
    which for a 1 GiB segment would hold the whole segment in memory."""

    truncated_bytes: int
    epoch_starts: list[tuple[int, int]]


@dataclass(slots=True)
class _RecoveryState:
    """Where recovery's batch checks have got to: the end of the last valid batch, the offset
    after it, the first batch's max timestamp and the leader-epoch starts so far."""

    end_offset: int
    valid_bytes: int = 0
    first_batch_max_ts: int | None = None
    epoch_starts: list[tuple[int, int]] = field(default_factory=list)


def sanity_check(segment: LogSegment, dir_names: Container[str] | None = None) -> None:
    """Check every index file without reading the ``.log`` (O(1) per index).

    Kafka checks only that the offset index exists and the transaction index is sane; a cheap
    check of all three lets corrupt offset or time indexes be rebuilt at load time rather than
    misdirect reads. Raises :class:`~tidelog.errors.CorruptIndexError` (or FileNotFoundError for a missing index).
    ``dir_names``: the dir's file names, when the caller has just listed it (the loader): whether
    a transaction index exists is looked up there instead of with a ``stat``.
    """
    # FileNotFoundError when missing: Kafka recreates a missing time index empty; we rebuild it.
    # Unmapped indexes are checked by path strings: a Path per index costs more than its check.
    base, suffix, dir = segment.base_offset, segment.file_suffix, os.fspath(segment.dir)
    offset_index, time_index = segment.mapped_indexes()
    if offset_index is not None:
        offset_index.sanity_check()
    else:
        name = files.segment_file_name(base, files.INDEX_SUFFIX, suffix)
        segment.note_checked_offset_entry(OffsetIndex.check_file(os.path.join(dir, name), base))
    if time_index is not None:
        time_index.sanity_check()
    else:
        name = files.segment_file_name(base, files.TIME_INDEX_SUFFIX, suffix)
        last = TimeIndex.check_file(os.path.join(dir, name), base)
        if segment.append_state.max_timestamp is None:  # keep it: retention asks for it next
            segment.set_max_timestamp(TimeIndex.parse_entry(last, base), in_index=True)
    if dir_names is None:
        has_txn_index = files.transaction_index_file(segment.dir, base, suffix).exists()
    else:
        has_txn_index = files.segment_file_name(base, files.TXN_INDEX_SUFFIX, suffix) in dir_names
    if has_txn_index:
        segment.txn_index.sanity_check()


def read_next_offset(segment: LogSegment) -> int:
    """The offset after the last batch (scans from the last offset-index entry)."""
    next_offset = segment.base_offset
    for location in segment.reader().batch_locations(_last_entry_position(segment)):
        next_offset = location.last_offset + 1
    return next_offset


def check_tail(segment: LogSegment) -> TailCheck:
    """Whether the ``.log`` ends with the end of a batch recovery would keep: recovery's batch
    by batch check runs from the last offset-index entry to the end (after a clean stop the
    index is whole, so that is at most ``index.interval.bytes`` plus one batch, read a chunk at
    a time; the data before the entry is not read). For an active segment reopened after a
    clean stop, whose tail nothing else checks before the next append is written after it."""
    start = _last_entry_position(segment)
    state = _recover_batches_one_by_one(segment, _RecoveryState(segment.base_offset, start))
    found = state.first_batch_max_ts is not None
    # An index entry points at a batch: from it on there must be one, unless the log is empty.
    whole = state.valid_bytes == segment.log.size_in_bytes and (found or state.valid_bytes == 0)
    return TailCheck(state.end_offset, state.valid_bytes, whole)


def _last_entry_position(segment: LogSegment) -> int:
    checked = segment.take_checked_offset_entry()
    if checked is not None:
        # The entry sanity_check just read: a load after a clean stop maps no index for it.
        return OffsetIndex.parse_entry(checked, segment.base_offset).position
    return segment.offset_index.lookup(INT64_MAX).position


def recover(segment: LogSegment) -> RecoveryResult:
    """Validate every batch, truncate an invalid tail, then rebuild the indexes from the ``.log``
    (:meth:`LogSegment.rebuild_indexes`); the transaction index is kept up to the recovered end.
    Returns the bytes removed and the leader-epoch starts seen. Reads the whole segment."""
    if fileops.active():  # a fault plan: every read goes through the seam
        state, headers = _recover_batches_one_by_one(segment, _RecoveryState(segment.base_offset)), None
    else:
        state, headers = _recover_batches_columnar(segment)
    valid_bytes, end_offset = state.valid_bytes, state.end_offset
    first_batch_max_ts, epoch_starts = state.first_batch_max_ts, state.epoch_starts
    truncated = segment.log.size_in_bytes - valid_bytes
    if truncated > 0:
        log.warning("truncating %s from %d to %d bytes", segment.log.path, segment.log.size_in_bytes, valid_bytes)
        segment.log.truncate_to(valid_bytes)
    segment.rebuild_indexes(headers)
    segment.offset_index.trim_to_valid_size()
    mts = segment.max_timestamp_and_offset_so_far  # set by rebuild_indexes
    segment.time_index.maybe_append(mts.timestamp, mts.offset, skip_full_check=True)
    segment.time_index.trim_to_valid_size()
    _recover_txn_index(segment, end_offset, headers)
    segment.set_first_batch_timestamp(first_batch_max_ts)
    return RecoveryResult(truncated, epoch_starts)


def _recover_batches_columnar(segment: LogSegment) -> tuple[_RecoveryState, BatchHeaders | None]:
    """:func:`_recover_batches_one_by_one`'s result with columns for the leading run of valid
    v2 batches (one header walk, one CRC pass, numpy for the offset range and the epoch
    starts); the loop checks the rest from the first batch the run does not cover, so the
    stop, its warning and any legacy entries are the loop's. Also the run's headers for
    :func:`rebuild_indexes` when they are the whole recovered ``.log``, else None."""
    base = segment.base_offset
    headers = segment.log.valid_v2_headers()
    last_offsets = headers["last_offset"]
    # Kafka's relative offset range, 0 <= last - base <= INT32_MAX, without int64 wrap-around;
    # and each batch above the one before it (see _ensure_offsets_go_up).
    in_range = (last_offsets >= base) & (last_offsets <= min(base + INT32_MAX, INT64_MAX))
    in_range[1:] &= headers["base_offset"][1:] > last_offsets[:-1]
    out = np.flatnonzero(~in_range)
    if len(out):
        headers = {name: column[:out[0]] for name, column in headers.items()}
    state = _RecoveryState(base)
    count = len(headers["position"])
    if count:
        state.valid_bytes = int(headers["position"][-1] + headers["size"][-1])
        state.end_offset = int(headers["last_offset"][-1]) + 1
        state.first_batch_max_ts = int(headers["max_timestamp"][0])
        # _note_epoch_start for every batch: v2 batches with an epoch, a new entry at each change.
        with_epoch = np.flatnonzero(headers["leader_epoch"] >= 0)
        epochs = headers["leader_epoch"][with_epoch]
        starts = with_epoch[np.concatenate(([True], epochs[1:] != epochs[:-1]))] if len(with_epoch) else with_epoch
        state.epoch_starts = list(zip(headers["leader_epoch"][starts].tolist(), headers["base_offset"][starts].tolist()))
    covered = state.valid_bytes
    if covered < segment.log.size_in_bytes:
        _recover_batches_one_by_one(segment, state)
    return state, (headers if state.valid_bytes == covered else None)


def _recover_batches_one_by_one(segment: LogSegment, state: _RecoveryState) -> _RecoveryState:
    """Validate batch by batch from ``state.valid_bytes`` (0 for the whole segment), updating
    ``state``, until the first invalid batch (logged) or the end: the specification of
    :func:`_recover_batches_columnar`, and the path for legacy entries and fault plans."""
    path = segment.log.path
    try:
        for position, batch in segment.log.batches(state.valid_bytes):
            batch.ensure_valid(path=path, position=position)
            segment.ensure_offset_in_range(batch.last_offset)
            if state.valid_bytes:  # a valid batch before it
                _ensure_offsets_go_up(batch, state.end_offset, path, position)
            state.valid_bytes += batch.size_in_bytes
            state.end_offset = batch.last_offset + 1
            if state.first_batch_max_ts is None:
                state.first_batch_max_ts = batch.max_timestamp
            _note_epoch_start(state.epoch_starts, batch)
    except (CorruptRecordError, InvalidRecordError, LogSegmentOffsetOverflowError) as e:
        log.warning("found invalid data in %s at byte %d: %s; truncating there", path, state.valid_bytes, e)
    return state


def _ensure_offsets_go_up(batch: FileBatch, next_offset: int, path: Path, position: int) -> None:
    """A batch's offsets start at ``next_offset`` (the offset after the batch before it) or
    above. A v2 batch's base offset is outside its CRC, so a damaged one passes every other
    check; kept, it would break offset lookups and then, when the index rebuild met it, cost
    Kafka's answer to an out-of-order offset: the whole segment. (A legacy entry by its last
    offset: its first needs the wrapper decompressed.)"""
    first = batch.base_offset if batch.magic >= 2 else batch.last_offset
    if first < next_offset:
        raise InvalidRecordError(
            "batch offsets go back: they must start above the batch before it",
            path=path, position=position, offset=first, expected_at_least=next_offset,
        )


def _note_epoch_start(epoch_starts: list[tuple[int, int]], batch: FileBatch) -> None:
    epoch = batch.partition_leader_epoch
    if batch.magic >= 2 and epoch >= 0 and (not epoch_starts or epoch_starts[-1][0] != epoch):
        epoch_starts.append((epoch, batch.base_offset))


def rebuild_indexes(segment: LogSegment, headers: BatchHeaders | None = None) -> None:
    """Re-create the offset and time indexes from the ``.log``'s batch headers, with the entries
    single-batch appends would have made (one per ``index.interval.bytes``): after recovery,
    and for the cleaner, whose multi-megabyte appends would get one entry each. The
    transaction index is kept; nothing is validated (the caller validated or wrote the bytes).
    ``headers``: the ``.log``'s batch headers when the caller has them (recovery)."""
    if headers is None:
        headers = segment.log.batch_headers()
    offset_index, time_index = segment.offset_index, segment.time_index
    offset_index.reset()
    time_index.reset()
    positions, last_offsets = headers["position"], headers["last_offset"]
    # Max timestamp so far at each batch, and the first batch that reached it (its offset).
    running = np.maximum.accumulate(np.maximum(headers["max_timestamp"], NO_TIMESTAMP))
    reached = np.searchsorted(running, running, side="left")
    offsets_of_max = np.where(running > NO_TIMESTAMP, last_offsets[reached], segment.base_offset)
    picks = _index_entry_batches(positions, segment.config.index_interval_bytes)
    _make_room_for_entries(offset_index, time_index, len(picks))
    offset_index.append_entries(last_offsets[picks], positions[picks])
    time_index.append_entries(running[picks], offsets_of_max[picks])
    last_entry = int(positions[picks[-1]]) if len(picks) else 0
    end = int(positions[-1] + headers["size"][-1]) if len(positions) else 0
    max_ts = int(running[-1]) if len(running) else NO_TIMESTAMP
    max_entry = TimestampOffset(max_ts, int(offsets_of_max[-1]) if len(running) else segment.base_offset)
    segment.set_rebuilt_index_state(max_entry, end - last_entry)


def _make_room_for_entries(offset_index: OffsetIndex, time_index: TimeIndex, entries: int) -> None:
    """Grow the (just reset) indexes to hold ``entries`` rebuilt entries, and the time index's
    final one: with ``segment.index.bytes`` lowered since the segment was written, a rebuild
    keeps every entry and the segment counts as full (as ``LogSegment.resize_indexes`` does),
    where a fixed size would fail the load."""
    if entries > offset_index.max_entries:
        offset_index.resize(entries * offset_index.ENTRY_SIZE)
    if entries + 1 > time_index.max_entries:
        time_index.resize((entries + 1) * time_index.ENTRY_SIZE)


def _index_entry_batches(positions: np.ndarray, interval: int) -> np.ndarray:
    """The batches that get index entries when appended one by one: the first batch starting
    more than ``interval`` bytes into the segment, then each first batch starting more than
    ``interval`` bytes after the last entry's batch (Kafka's index.interval.bytes rule)."""
    picks, threshold = [], interval
    for i, position in enumerate(positions.tolist()):  # a list walk: ~50 ns a batch
        if position > threshold:
            picks.append(i)
            threshold = position + interval
    return np.asarray(picks, np.int64)


def _recover_txn_index(segment: LogSegment, end_offset: int, headers: BatchHeaders | None) -> None:
    """Kafka rebuilds the ``.txnindex`` here, from the producer state at the segment's base
    offset, which this segment does not have: it keeps the file's entries for transactions
    that ended below ``end_offset`` (a file that does not read is emptied) and leaves the
    rebuild to the owning log, which checks the index against the ABORT markers in the
    ``.log`` before any entry is served (:class:`.TxnIndexCheck`), right after the load when
    ``segment.txn_index_suspect`` says so: the recovered data holds transaction markers (or
    ``headers``, the recovered batches' columns, are not known), or the file was unreadable."""
    segment.txn_index_checked = False
    segment.txn_index_suspect = headers is None or bool(np.any((headers["attributes"] & _TXN_MARKER) == _TXN_MARKER))
    try:
        segment.txn_index.sanity_check()
        segment.txn_index.truncate_to(end_offset)
    except CorruptIndexError as e:
        log.warning("%s: dropping an unreadable transaction index: %s", segment.log.path, e)
        segment.txn_index.reset()
        segment.txn_index_suspect = True
