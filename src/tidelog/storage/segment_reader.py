"""The one read path of a segment's ``.log``: positional reads (``pread``, never ``mmap``) of
batches from a byte position, the offset and timestamp searches of Kafka's ``LogSegment``
(``translateOffset``, ``findOffsetByTimestamp``), whole-batch chunks for bulk readers, and the
``pread`` read of an index file's valid entries for readers that map no index
(:func:`read_index_entries`).

Used by :class:`~tidelog.storage.segment.LogSegment` (broker fetch, ListOffsets, the cleaner's
lookups: the log's lock is held, the descriptor is the segment's own) and by
:mod:`~tidelog.storage.log_view` (the Spark source and the tools: no lock, files opened by path).

A :class:`SegmentReader` is a descriptor, the readable end (the segment's logical size, or what
a lock-free reader checked), the segment's base offset and its path. It keeps no state between
calls, so it is as thread-safe as ``pread``; it takes no lock.

**Walking.** :meth:`SegmentReader.batch_locations` walks headers one batch at a time in small
chunks (v0/v1 entries included: index-guided searches cover a few KiB); :meth:`whole_batches`
hands out chunks of whole v2 batches with their columnar header walk (bulk reads: the compiled
walk of :func:`~tidelog.records.scan.walk_batch_headers`). Both stop quietly at a partial tail, as
Kafka's ``FileLogInputStream``.

**Lock-free readers.** A reader that runs without the log lock can find the segment it listed
deleted, or another file swapped in under its name (retention, a cleaner swap, a roll's rename).
:func:`open_segment` answers a vanished file with :class:`SegmentReplacedError`: re-list the
partition and retry. A position taken from an index that may belong to the replaced file is
checked first (:meth:`SegmentReader.checked_start`): a header that does not check out restarts the
walk at the segment's first byte.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from tidelog.errors import CorruptRecordError, StorageError, TidelogError
from tidelog.records import FileBatch, read_batch_at
from tidelog.records.layout import (
    HEADER_SIZE_UP_TO_MAGIC,
    LAST_OFFSET_DELTA,
    LAST_OFFSET_DELTA_OFFSET,
    LOG_OVERHEAD,
    MIN_ENTRY_LENGTH,
    PREFIX,
    RECORD_BATCH_OVERHEAD,
    declared_size,
)
from tidelog.records.scan import HeaderWalk, walk_batch_headers
from tidelog.storage import fileops
from tidelog.storage.fetch_info import TimestampAndOffset
from tidelog.storage.file_records import BatchLocation, chunked_batches

SEARCH_CHUNK_BYTES = 16 << 10  # per read of an index-guided header walk
INT64_MAX = 2**63 - 1
_SEARCH_HEADER_SIZE = LAST_OFFSET_DELTA_OFFSET + LAST_OFFSET_DELTA.size  # what a header walk reads of a v2 batch


class SegmentReplacedError(TidelogError, FileNotFoundError):
    """The segment a lock-free reader listed is gone (deleted, or renamed for a swap): re-list the
    partition and retry. Context: ``path``. A FileNotFoundError too, as the other files of the
    segment (its indexes) answer the same event."""


@contextmanager
def open_segment(path: Path, base_offset: int, limit: int | None = None) -> Iterator[SegmentReader]:
    """A reader of the ``.log`` at ``path`` opened read-only for the ``with`` block (readers
    without the log lock). ``limit``: the readable end (default: the file's size now).
    :class:`SegmentReplacedError` when the file is gone."""
    try:
        f = open(path, "rb", buffering=0)
    except FileNotFoundError:
        raise SegmentReplacedError("segment is gone", path=path) from None
    with f:
        size = os.fstat(f.fileno()).st_size
        yield SegmentReader(f.fileno(), size if limit is None else min(limit, size), base_offset, path)


class SegmentReader:
    """Positional reads of one segment's ``.log`` below ``limit`` (see the module docstring).
    Stateless between calls: thread-safe as ``pread`` is; takes no lock."""

    __slots__ = ("fd", "limit", "base_offset", "path")

    def __init__(self, fd: int, limit: int, base_offset: int, path: Path) -> None:
        self.fd = fd
        self.limit = limit
        self.base_offset = base_offset
        self.path = path

    def read(self, position: int, size: int) -> bytes:
        """Up to ``size`` bytes from ``position``, never past the readable end. StorageError on
        an I/O error."""
        size = min(size, self.limit - position)
        if size <= 0:
            return b""
        try:
            return fileops.pread(self.fd, size, position, self.path)
        except OSError as e:
            raise StorageError(f"read failed: {e.strerror}", path=self.path, position=position) from e

    # --- header walk, batch by batch ------------------------------------------------------

    def batch_locations(self, start: int = 0) -> Iterator[BatchLocation]:
        """Batch headers from byte ``start`` in order (small chunks: for index-guided searches).
        Stops at a partial tail; CorruptRecordError (``path``, ``position``) where a header cannot
        be a batch."""
        position = start
        while position + HEADER_SIZE_UP_TO_MAGIC <= self.limit:
            chunk = self.read(position, SEARCH_CHUNK_BYTES)
            relative = 0
            while (location := self._location_in(chunk, relative, position + relative)) is not None:
                yield location
                relative += location.size
            if relative == 0:
                return  # partial tail, or a header cut by the chunk that is also past the end
            position += relative

    def _location_in(self, chunk: bytes, relative: int, position: int) -> BatchLocation | None:
        if relative + HEADER_SIZE_UP_TO_MAGIC > len(chunk):
            return None
        base, length, _epoch, magic = PREFIX.unpack_from(chunk, relative)
        if length < MIN_ENTRY_LENGTH or magic not in (0, 1, 2):
            raise CorruptRecordError(
                f"invalid batch header (length {length}, magic {magic})", path=self.path, position=position
            )
        size = LOG_OVERHEAD + length
        if position + size > self.limit:
            return None
        if magic < 2:
            return BatchLocation(base, base, position, size, magic)
        if relative + _SEARCH_HEADER_SIZE > len(chunk):
            return None  # header cut by the chunk: the caller re-reads from here
        (last_offset_delta,) = LAST_OFFSET_DELTA.unpack_from(chunk, relative + LAST_OFFSET_DELTA_OFFSET)
        return BatchLocation(base, base + last_offset_delta, position, size, magic)

    def search_for_offset(self, target_offset: int, start: int = 0) -> BatchLocation | None:
        """The first batch at or after byte ``start`` whose last offset is >= ``target_offset``
        (Kafka's ``FileRecords.searchForOffsetWithSize``); None when none is before the end. A
        v0/v1 entry's base offset is read from its (possibly compressed) messages."""
        for location in self.batch_locations(start):
            if location.last_offset >= target_offset:
                return self._legacy_location(location) if location.magic < 2 else location
        return None

    def _legacy_location(self, location: BatchLocation) -> BatchLocation:
        batch = read_batch_at(self.read(location.position, location.size), 0)
        base = batch.base_offset if batch is not None else location.base_offset
        return BatchLocation(base, location.last_offset, location.position, location.size, location.magic)

    def checked_start(self, position: int) -> int:
        """``position`` when a batch header of this segment starts there (length and magic
        plausible, base offset not below the segment's), else 0: for a position read from an
        index that may belong to a file swapped in since (lock-free readers)."""
        if position == 0:
            return 0
        head = self.read(position, HEADER_SIZE_UP_TO_MAGIC)
        if len(head) < HEADER_SIZE_UP_TO_MAGIC:
            return 0
        base, length, _epoch, magic = PREFIX.unpack_from(head)
        plausible = magic in (0, 1, 2) and length >= MIN_ENTRY_LENGTH and position + LOG_OVERHEAD + length <= self.limit
        return position if plausible and base >= self.base_offset else 0

    # --- batches and records --------------------------------------------------------------

    def batches(self, start: int = 0, end: int | None = None) -> Iterator[tuple[int, FileBatch]]:
        """``(position, batch)`` of every complete batch in bytes ``[start, end)`` (default: to the
        readable end; v2 and v0/v1), read a chunk at a time; stops at a partial tail;
        CorruptRecordError (``path``, ``position``) where a header cannot be a batch. CRCs are not
        checked."""
        yield from chunked_batches(self.read, self.path, start, self.limit if end is None else min(end, self.limit))

    def first_record_reaching(self, timestamp: int, start: int, min_offset: int,
                              end_offset: int = INT64_MAX) -> TimestampAndOffset | None:
        """The first record at or after byte ``start`` whose timestamp is >= ``timestamp`` and
        offset in ``[min_offset, end_offset)`` (Kafka's ``FileRecords.searchForTimestamp``:
        batches whose max timestamp is below it are skipped undecoded)."""
        for _, batch in self.batches(start):
            if batch.max_timestamp < timestamp:
                continue
            for record in batch.records():
                if record.offset >= end_offset:
                    return None
                if record.timestamp >= timestamp and record.offset >= min_offset:
                    epoch = batch.partition_leader_epoch
                    return TimestampAndOffset(record.timestamp, record.offset, epoch if epoch >= 0 else None)
        return None

    # --- whole batches, columnar ----------------------------------------------------------

    def whole_batches(self, position: int, chunk_bytes: int) -> Iterator[tuple[bytes, HeaderWalk]]:
        """``(buffer, its header walk)`` for consecutive whole v2 batches from ``position`` to the
        readable end; each buffer holds at least one batch (a batch larger than ``chunk_bytes``
        comes alone). Stops at a partial tail and where the walk stops (a v0/v1 entry, bytes that
        are not a batch)."""
        limit = self.limit
        while position < limit:
            data = os.pread(self.fd, min(chunk_bytes, limit - position), position)
            walked = walk_batch_headers(data)
            if len(walked.batches["position"]) == 0:
                big = whole_batch_size(data)
                if big is None or big <= len(data) or position + big > limit:
                    return
                data = os.pread(self.fd, big, position)
                walked = walk_batch_headers(data)
                if len(walked.batches["position"]) == 0:
                    return
            end = walked.end_position
            yield (data if end == len(data) else data[:end]), walked
            position += end
            if walked.stop_position is not None:
                return


def whole_batch_size(data: bytes) -> int | None:
    """The size of the v2 batch at ``data[0]`` per its length field; None when fewer than
    ``LOG_OVERHEAD`` bytes are there or the size is below a v2 header's."""
    if len(data) < LOG_OVERHEAD:
        return None
    size = declared_size(data)
    return size if size >= RECORD_BATCH_OVERHEAD else None


def offset_for_timestamp(reader: SegmentReader, time_floor_offset: int, offset_floor: Callable[[int], int],
                         timestamp: int, start_offset: int, end_offset: int = INT64_MAX) -> TimestampAndOffset | None:
    """Kafka's ``LogSegment.findOffsetByTimestamp`` (ListOffsets by time within one segment): the
    first record with a timestamp >= ``timestamp`` and an offset in ``[start_offset, end_offset)``.
    ``time_floor_offset``: the offset of the time index's largest entry <= ``timestamp`` (the base
    offset when none); ``offset_floor(offset)``: the byte position of the offset index's largest
    entry <= ``offset`` (0 when none). The search starts at the offset index's floor of the larger of
    the two offsets, so a record of that timestamp before the time entry's offset is still found."""
    position = offset_floor(max(time_floor_offset, start_offset))
    return reader.first_record_reaching(timestamp, position, start_offset, end_offset)


def index_floor(keys: np.ndarray, target: int) -> int:
    """Index of the largest entry of the sorted ``keys`` <= ``target``; -1 when none."""
    return int(np.searchsorted(keys, target, side="right")) - 1


def read_index_entries(path: Path, dtype: np.dtype, size: int | None = None) -> np.ndarray:
    """The valid entries of the index file at ``path`` read with ``pread`` (readers without the
    log lock; ``dtype``: the layout's OFFSET_INDEX_DTYPE or TIME_INDEX_DTYPE): the non-zero prefix
    (an active segment's file is preallocated with zeros), cut at the first entry that does not
    strictly increase (one being written). FileNotFoundError when the file is gone."""
    with open(path, "rb", buffering=0) as f:
        fd = f.fileno()
        total = (os.fstat(fd).st_size if size is None else size) // dtype.itemsize
        count = _nonzero_prefix(fd, dtype.itemsize, total)
        raw = os.pread(fd, count * dtype.itemsize, 0)
    entries = np.frombuffer(raw[: len(raw) - len(raw) % dtype.itemsize], dtype)
    keys = entries[dtype.names[0]]
    bad = np.flatnonzero(np.diff(keys.astype(np.int64)) <= 0)
    return entries[: int(bad[0]) + 1] if len(bad) else entries


def _nonzero_prefix(fd: int, entry_size: int, total: int) -> int:
    """How many leading entries are not all-zero (binary search: ~log2(total) 1-entry reads)."""
    zero = bytes(entry_size)
    lo, hi = 0, total  # entries [0, lo) are non-zero; [hi, total) are zero
    while lo < hi:
        mid = (lo + hi) // 2
        if os.pread(fd, entry_size, mid * entry_size) == zero:
            hi = mid
        else:
            lo = mid + 1
    return lo
