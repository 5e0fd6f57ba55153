"""Reading records from one remote segment (Kafka's ``RemoteLogManager.read`` steps 3-6 and the
remote part of ``findOffsetByTimestamp``).

- :func:`read_segment`: whole batches of one remote segment from an offset, up to a byte limit,
  fetched with ranged GETs (:meth:`RemoteStore.get_range`) starting at the position the cached
  offset index gives; never the whole ``.log`` for a small fetch.
- :func:`offset_for_timestamp`: the first record of a remote segment with a timestamp at least
  the one asked for (time index, offset index, then a ranged scan).
- :class:`RemoteSegmentReader`: the storage layer's :class:`~tidelog.storage.segment_reader.SegmentReader`
  whose reads are ranged GETs, so the remote tier runs the local tier's searches unchanged.

Framing is checked for everything returned: each batch's length, its offsets within the segment's
``[start_offset, end_offset]`` and ascending, and its CRC-32C. A failure raises
:class:`RemoteSegmentCorruptError` naming the partition, the segment's ``.log`` object and the
byte position. Only v2 batches are read (a v0/v1 entry is refused with a clear error).

Costs: a read of ``max_bytes`` is one GET of ``max_bytes`` plus :data:`INDEX_SLACK_BYTES` (the
distance from the index entry to the batch asked for, at most ``index.interval.bytes`` plus a
batch for a log written by tidelog or Kafka), in pieces of at most :data:`READ_CHUNK_BYTES`;
an oversized first batch costs one more GET of its size. Memory: what is returned plus one piece.
Pure functions over a store: thread-safe as the store is; no lock.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from tidelog.errors import CorruptRecordError
from tidelog.records.layout import (
    CRC_OFFSET,
    LAST_OFFSET_DELTA,
    LAST_OFFSET_DELTA_OFFSET,
    LOG_OVERHEAD,
    PREFIX,
    RECORD_BATCH_OVERHEAD,
)
from tidelog.records.scan import batch_crcs, walk_batch_headers
from tidelog.remote.errors import RemoteResourceNotFoundError, with_context
from tidelog.remote.metadata import RemoteFileKind, RemoteLogSegmentMetadata, object_key
from tidelog.remote.store import RemoteStore
from tidelog.storage.fetch_info import TimestampAndOffset
from tidelog.storage.index import OffsetIndex, TimeIndex
from tidelog.storage.segment_reader import SegmentReader
from tidelog.storage.segment_reader import offset_for_timestamp as _segment_offset_for_timestamp

if TYPE_CHECKING:
    from tidelog.remote.index_cache import RemoteIndexCache

READ_CHUNK_BYTES = 8 << 20
"""The largest single ranged GET of a read."""
INDEX_SLACK_BYTES = 64 << 10
"""Bytes read past ``max_bytes`` by the first GET: room for the batches between the offset index's
entry and the batch asked for."""
MIN_READ_BYTES = 16 << 10
"""The smallest GET (a header walk needs whole headers; small GETs cost a round trip each)."""
_CRC_WEIGHTS = np.array([1 << 24, 1 << 16, 1 << 8, 1], np.int64)


class RemoteSegmentCorruptError(CorruptRecordError):
    """A remote segment's bytes are not what its metadata and index promise: a batch whose framing
    or CRC is wrong, an object shorter than the metadata's size, an index position past the end,
    offsets outside the segment. Context: ``partition``, ``key`` (the object), ``position``."""


@dataclass(frozen=True, slots=True)
class SegmentRead:
    """What :func:`read_segment` returned: whole batches (``records``, possibly empty), whether the
    read ends in this segment (``found``: a batch holding an offset >= the one asked for is in it,
    returned or not fitting the limit, or no byte was asked for; when not, the segment holds no
    such batch and the read goes on in the next segment), and the ranged GETs it took (``gets``,
    ``fetched`` bytes)."""

    records: bytes
    found: bool
    next_offset: int  # the offset after the last batch returned; -1 when none was
    gets: int
    fetched: int


class RemoteSegmentReader(SegmentReader):
    """A :class:`SegmentReader` over a remote segment's ``.log``: each read is one ranged GET
    (``path`` is the object key, for messages). Thread-safe as the store; no lock."""

    __slots__ = ("_store",)

    def __init__(self, store: RemoteStore, segment: RemoteLogSegmentMetadata) -> None:
        key = object_key(segment, RemoteFileKind.SEGMENT)
        super().__init__(-1, segment.segment_size_in_bytes, segment.start_offset, key)  # type: ignore[arg-type]
        self._store = store

    def read(self, position: int, size: int) -> bytes:
        """Up to ``size`` bytes from ``position``, never past the segment's size: one ranged GET."""
        size = min(size, self.limit - position)
        if size <= 0:
            return b""
        return self._store.get_range(str(self.path), position, size)


def read_segment(store: RemoteStore, segment: RemoteLogSegmentMetadata, offset_index: OffsetIndex, offset: int,
                 max_bytes: int, min_one_message: bool, *, partition: str, chunk_bytes: int = READ_CHUNK_BYTES,
                 get_range: Callable[[str, int, int], bytes] | None = None) -> SegmentRead:
    """Whole batches of ``segment`` from the one holding ``offset`` (Kafka's step 5: the first
    batch whose last offset is >= ``offset``), at most ``max_bytes`` in all, except that with
    ``min_one_message`` the first batch comes whole however large (Kafka's step 6; one segment
    only). Starts at ``offset_index``'s position for ``offset``. ``get_range(key, start, length)``
    replaces ``store.get_range`` (a chunk cache). Raises :class:`RemoteSegmentCorruptError` (see
    the module doc) and the store's errors."""
    read = _Read(store, segment, partition, chunk_bytes, get_range or store.get_range)
    position = offset_index.lookup(offset).position
    if not 0 <= position < max(read.size, 1):
        raise read.corrupt(f"offset index position {position} for offset {offset} is outside the segment's "
                           f"{read.size} bytes", position)
    return read.run(position, offset, max_bytes, min_one_message)


class _Read:
    """One :func:`read_segment` call's state."""

    def __init__(self, store: RemoteStore, segment: RemoteLogSegmentMetadata, partition: str, chunk_bytes: int,
                 get_range: Callable[[str, int, int], bytes]) -> None:
        self.store, self.segment, self.partition, self.get_range = store, segment, partition, get_range
        self.key = object_key(segment, RemoteFileKind.SEGMENT)
        self.size = segment.segment_size_in_bytes
        self.chunk_bytes = max(chunk_bytes, MIN_READ_BYTES)
        self.gets = self.fetched = 0

    def run(self, position: int, offset: int, max_bytes: int, min_one: bool) -> SegmentRead:
        if max_bytes <= 0 and not min_one:  # nothing asked for: the read ends here, empty
            return SegmentRead(b"", True, -1, 0, 0)
        parts: list[bytes] = []
        total, found, next_offset = 0, False, -1
        while position < self.size:
            room = max_bytes - total
            if room <= 0 and found:
                break
            want = max(room, 0) + (0 if found else INDEX_SLACK_BYTES)
            chunk = self.get(position, min(self.size - position, self.chunk_bytes, max(want, MIN_READ_BYTES)))
            walk = walk_batch_headers(chunk)
            count = len(walk.batches["position"])
            if count == 0:  # the batch here is larger than the chunk (or the bytes are not a batch)
                need, last = self.header(chunk, position)
                if not found and last < offset:
                    position += need  # skipped without reading it
                    continue
                found = True  # this batch holds the offset (or the first one past it)
                if need > room and (parts or not min_one):
                    break
                chunk = self.get(position, need)
                walk = walk_batch_headers(chunk)
                count = len(walk.batches["position"])
                if count != 1:
                    self.header(chunk, position)  # raises with the reason
            batches = walk.batches
            self.check_offsets(batches, position)
            first = 0 if found else int(np.searchsorted(batches["last_offset"], offset, side="left"))
            if first < count:
                found = True
                sizes = np.cumsum(batches["size"][first:])
                take = int(np.searchsorted(sizes, room, side="right"))
                if take == 0 and not parts and min_one:
                    take = 1
                if take:
                    start = int(batches["position"][first])
                    self.check_crcs(chunk, batches, first, first + take, position)
                    parts.append(chunk[start:start + int(sizes[take - 1])])
                    total += int(sizes[take - 1])
                    next_offset = int(batches["last_offset"][first + take - 1]) + 1
                if first + take < count:
                    break  # the next batch does not fit
            if walk.stop_position is not None:
                self.header(chunk[walk.stop_position:], position + walk.stop_position)
            position += walk.end_position
        return SegmentRead(b"".join(parts), found, next_offset, self.gets, self.fetched)

    def get(self, position: int, length: int) -> bytes:
        data = self.get_range(self.key, position, length)
        self.gets += 1
        self.fetched += len(data)
        if len(data) != length:
            raise self.corrupt(f"object is {position + len(data)} bytes, shorter than the "
                               f"{self.size} bytes its metadata says", position + len(data))
        return data

    def header(self, chunk: bytes, position: int) -> tuple[int, int]:
        """``(size, last offset)`` of the v2 batch whose header starts ``chunk``; raises when the
        bytes there are not one (the reason named)."""
        if len(chunk) < RECORD_BATCH_OVERHEAD:
            raise self.corrupt(f"truncated batch header ({len(chunk)} bytes)", position)
        base, length, _epoch, magic = PREFIX.unpack_from(chunk)
        if magic in (0, 1):
            raise self.corrupt(f"a message format v{magic} entry: remote reads serve v2 batches only", position)
        size = LOG_OVERHEAD + length
        if magic != 2 or size < RECORD_BATCH_OVERHEAD:
            raise self.corrupt(f"invalid batch header (length {length}, magic {magic})", position)
        if position + size > self.size:
            raise self.corrupt(f"batch of {size} bytes runs past the segment's end ({self.size} bytes)", position)
        (delta,) = LAST_OFFSET_DELTA.unpack_from(chunk, LAST_OFFSET_DELTA_OFFSET)
        if base < self.segment.start_offset or delta < 0 or base + delta > self.segment.end_offset:
            raise self.corrupt(f"batch offsets {base}..{base + delta} are outside the segment's "
                               f"{self.segment.start_offset}..{self.segment.end_offset}", position)
        return size, base + delta

    def check_offsets(self, batches: dict[str, np.ndarray], position: int) -> None:
        base, last = batches["base_offset"], batches["last_offset"]
        bad = np.flatnonzero((base < self.segment.start_offset) | (last > self.segment.end_offset) | (last < base))
        if len(bad) == 0 and len(last) > 1:
            bad = np.flatnonzero(base[1:] <= last[:-1]) + 1
        if len(bad):
            i = int(bad[0])
            raise self.corrupt(f"batch offsets {int(base[i])}..{int(last[i])} are out of order or outside the "
                               f"segment's {self.segment.start_offset}..{self.segment.end_offset}",
                               position + int(batches["position"][i]))

    def check_crcs(self, chunk: bytes, batches: dict[str, np.ndarray], first: int, stop: int, position: int) -> None:
        positions, sizes = batches["position"][first:stop], batches["size"][first:stop]
        data = np.frombuffer(chunk, np.uint8)
        stored = data[positions[:, None] + np.arange(CRC_OFFSET, CRC_OFFSET + 4)].astype(np.int64) @ _CRC_WEIGHTS
        bad = np.flatnonzero(batch_crcs(data, positions, sizes) != stored)
        if len(bad):
            i = int(bad[0])
            raise self.corrupt("batch CRC-32C does not match its bytes", position + int(positions[i]))

    def corrupt(self, message: str, position: int) -> RemoteSegmentCorruptError:
        return RemoteSegmentCorruptError(f"remote segment {self.segment.id}: {message}", partition=self.partition,
                                         key=self.key, uri=self.store.uri, position=position)


def offset_for_timestamp(store: RemoteStore, segment: RemoteLogSegmentMetadata, offset_index: OffsetIndex,
                         time_index: TimeIndex, timestamp: int, start_offset: int) -> TimestampAndOffset | None:
    """The first record of ``segment`` with a timestamp >= ``timestamp`` and an offset >=
    ``start_offset`` (Kafka's ``LogSegment.findOffsetByTimestamp`` on a remote segment): the time
    index's floor, the offset index's position for it, then a scan of ranged GETs (1 MiB each)
    from there; None when the segment has no such record."""
    if segment.max_timestamp_ms < timestamp:
        return None
    reader = RemoteSegmentReader(store, segment)
    floor = time_index.lookup(timestamp).offset
    return _segment_offset_for_timestamp(reader, floor, lambda o: offset_index.lookup(o).position, timestamp,
                                         start_offset)


def offset_for_timestamp_in(store: RemoteStore, index_cache: RemoteIndexCache,
                            segments: Iterable[RemoteLogSegmentMetadata], timestamp: int,
                            floor: int = 0) -> TimestampAndOffset | None:
    """Kafka's ListOffsets by time over ``segments`` (finished ones, in offset order): the first
    record at or past ``floor`` whose timestamp is >= ``timestamp``. A segment ending below
    ``floor``, or whose newest record is older, is skipped without a request; the first other one
    with such a record answers (:func:`offset_for_timestamp`). An object gone raises
    ``RemoteResourceNotFoundError`` with the segment's id as ``segment`` in its context (the
    caller decides whether the metadata changed meanwhile)."""
    for segment in segments:
        if segment.end_offset < floor or segment.max_timestamp_ms < timestamp:
            continue
        try:
            with index_cache.indexes(segment) as indexes:
                found = offset_for_timestamp(store, segment, indexes.offset, indexes.time, timestamp,
                                             max(floor, segment.start_offset))
        except RemoteResourceNotFoundError as e:
            raise with_context(e, segment=segment.id) from e
        if found is not None:
            return found
    return None
