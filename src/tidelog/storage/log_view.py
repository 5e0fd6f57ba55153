"""A read-only view of one or more log dirs: partitions, their bounds, and where an offset lives.

Used where a process reads a data dir it does not own (the Spark source's driver and executors,
reports): it takes no ``.lock``, writes nothing, runs no recovery and rebuilds no index. The owner
(``tidelog serve``, a ``LogManager``, a Kafka broker) may meanwhile append, roll, delete segments
(the ``.deleted`` rename) and swap cleaned ones in; the view tolerates all of it.

What a partition shows (:class:`PartitionBounds`)::

    log start offset = max(log-start-offset-checkpoint entry, first segment's base offset)
    readable end     = the offset after the last complete batch (length and CRC-32C checked)
                       of the last segment; it plays the high watermark for readers; while a
                       multi-partition job (a Spark write) is in flight, its start in that
                       partition (:mod:`tidelog.storage.commit_log`): no reader sees part of one

**How the end is found cheaply.** The last segment's batch headers are walked from its last
offset-index entry (or from the segment start) once; afterwards each :meth:`PartitionView.refresh`
costs two ``stat`` calls (the partition dir, for rolls and deletions, and the last ``.log``, for
appends) plus a walk over the bytes appended since (their CRCs checked). An active segment's
``.index`` is preallocated and holds a zero tail: the valid entries are found by a binary search
for the last non-zero entry, then kept only while they strictly increase (an entry being written
concurrently is dropped).

**Lookups.** Reads go through the segment read path the broker uses
(:mod:`~tidelog.storage.segment_reader`). :meth:`PartitionView.locate` gives the segment and byte
position of the first batch whose last offset is >= a target: the offset index's largest entry <=
the target, then a header walk. :meth:`PartitionView.offset_for_timestamp` is Kafka's ListOffsets
by time (the first offset whose record timestamp is >= T), Kafka's ``findOffsetByTimestamp`` on
the first segment that can hold such a record.

**Concurrency.** Files are read with ``pread`` (never ``mmap``: a file truncated under a mapping
raises SIGBUS). A segment deleted or swapped between listing and opening shows up as
:class:`~tidelog.storage.segment_reader.SegmentReplacedError` (or ``FileNotFoundError`` for its
index files): the view re-lists once and retries; when the wanted offset is then below the log
start offset, the data is gone and :class:`DataLossError` tells the caller (who applies
``failOnDataLoss``). A cleaner swap can also put a different file behind a position read from the
old index; a position whose batch header does not check out falls back to walking from the
segment's first byte. Instances are not thread-safe (one per thread or process).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from crc32c import crc32c

from tidelog.errors import CheckpointError, CorruptRecordError, OffsetOutOfRangeError, StorageError
from tidelog.records.layout import CRC_OFFSET, CRC_SIZE, CRC_START, OFFSET_INDEX_DTYPE, TIME_INDEX_DTYPE
from tidelog.storage import files
from tidelog.storage.checkpoints import LOG_START_OFFSET_CHECKPOINT_FILE, OFFSET_ENTRY_FORMAT, parse_checkpoint
from tidelog.storage.commit_log import PendingJobs
from tidelog.storage.file_records import BatchLocation
from tidelog.storage.segment_reader import (
    SegmentReader,
    index_floor,
    offset_for_timestamp,
    open_segment,
    read_index_entries,
)
from tidelog.topic_partition import TopicPartition

WALK_CHUNK = 4 << 20  # bytes read per header walk / read step
READ_CHUNK = 8 << 20  # bytes per chunk handed to readers (whole batches, more for one big batch)


class DataLossError(OffsetOutOfRangeError):
    """Offsets a caller asked for are gone: below the log start offset (retention, DeleteRecords),
    or the partition itself was deleted. Context: ``topic_partition``, ``offset``,
    ``log_start_offset`` (None when the partition is gone)."""


@dataclass(frozen=True, slots=True)
class SegmentInfo:
    """One segment as listed: its base offset and ``.log`` file (size as of the listing)."""

    base_offset: int
    log_path: Path

    @property
    def index_path(self) -> Path:
        return files.offset_index_file(self.log_path.parent, self.base_offset)

    @property
    def time_index_path(self) -> Path:
        return files.time_index_file(self.log_path.parent, self.base_offset)


@dataclass(frozen=True, slots=True)
class PartitionBounds:
    """A partition's readable range ``[log_start_offset, end_offset)`` at one refresh."""

    topic_partition: TopicPartition
    log_start_offset: int
    end_offset: int

    @property
    def size(self) -> int:
        """Offsets in the range (records, less compaction gaps and control records)."""
        return self.end_offset - self.log_start_offset


@dataclass(frozen=True, slots=True)
class BatchPosition:
    """The batch that holds (or first follows) an offset: its segment, byte position and offsets."""

    segment: SegmentInfo
    position: int
    base_offset: int
    last_offset: int


@dataclass(slots=True)
class _Walk:
    """How far the last segment's headers were walked (and checked)."""

    segment_base: int
    inode: int  # of the .log walked: a file replaced under the same name is walked again
    position: int
    next_offset: int


# --- log dirs -------------------------------------------------------------------------------

def is_data_dir(path: Path) -> bool:
    """True when ``path`` is a directory that looks like a Kafka/tidelog log dir: it holds
    ``meta.properties`` or at least one ``<topic>-<partition>`` directory."""
    if not path.is_dir():
        return False
    if files.meta_properties_file(path).is_file():
        return True
    return any(_parse_partition_dir(entry.name) is not None for entry in os.scandir(path) if entry.is_dir())


def _parse_partition_dir(name: str) -> TopicPartition | None:
    """The partition a live partition dir holds; None for renamed (-delete/-stray/-future) dirs,
    hidden dirs and names that do not parse."""
    if name.startswith(".") or files.is_renamed_partition_dir(name):
        return None
    try:
        return files.parse_topic_partition_name(name)
    except Exception:  # InvalidLogDirNameError: not a partition dir, skipped
        return None


class LogView:
    """Read-only access to the partitions of ``log_dirs`` (see the module docstring).

    Cheap to create; :meth:`partitions` lists the dirs (once per call), :meth:`partition` keeps
    one :class:`PartitionView` per partition so their caches live as long as the view.
    """

    def __init__(self, log_dirs: Sequence[Path | str]) -> None:
        self.log_dirs = tuple(Path(d) for d in log_dirs)
        self._views: dict[TopicPartition, PartitionView] = {}
        self._checkpoints: dict[Path, tuple[tuple[int, int], dict[TopicPartition, int]]] = {}
        self._listing: tuple[tuple[int, ...], dict[TopicPartition, Path]] | None = None
        self._checkpoint_paths: dict[Path, Path] = {}
        self.pending_jobs = PendingJobs(self.log_dirs)

    def partitions(self) -> dict[TopicPartition, Path]:
        """Every live partition dir, by partition, sorted by (topic, partition). A partition found
        in two log dirs is an error (Kafka refuses to start on it too). The listing is kept while
        no log dir's mtime changes (creating, renaming or deleting a partition dir changes it), so
        a repeated call costs one ``stat`` per log dir."""
        stamp = tuple(_mtime(d) for d in self.log_dirs)
        if self._listing is not None and self._listing[0] == stamp:
            return dict(self._listing[1])
        found = self._list_partitions()
        self._listing = (stamp, found)
        return dict(found)

    def _list_partitions(self) -> dict[TopicPartition, Path]:
        found: dict[TopicPartition, Path] = {}
        for log_dir in self.log_dirs:
            try:
                entries = list(os.scandir(log_dir))
            except FileNotFoundError:
                continue
            except OSError as e:
                raise StorageError("cannot list log dir", path=log_dir) from e
            for entry in entries:
                tp = _parse_partition_dir(entry.name)
                if tp is None or not entry.is_dir():
                    continue
                if tp in found:
                    raise StorageError(f"partition {tp} found in two log dirs", path=found[tp], other=Path(entry.path))
                found[tp] = Path(entry.path)
        return dict(sorted(found.items()))

    def topics(self) -> list[str]:
        """Topic names with at least one partition dir, sorted."""
        return sorted({tp.topic for tp in self.partitions()})

    def partition(self, tp: TopicPartition, dir: Path | None = None) -> PartitionView:
        """The view of ``tp`` (``dir``: its partition dir, when the caller listed it already).
        Raises :class:`DataLossError` (no log start offset) when no dir holds ``tp``."""
        view = self._views.get(tp)
        if view is None or (dir is not None and view.dir != dir):
            if dir is None:
                dir = self.partitions().get(tp)
                if dir is None:
                    raise DataLossError("partition does not exist (deleted?)", topic_partition=str(tp))
            view = PartitionView(self, tp, dir)
            self._views[tp] = view
        return view

    def bounds(self, partitions: Mapping[TopicPartition, Path] | None = None) -> dict[TopicPartition, PartitionBounds]:
        """Refreshed bounds of ``partitions`` (each with its dir; by default every live partition),
        with one look at the staged-commit log for all: a job in flight is seen whole or not at all."""
        def read(starts: dict[TopicPartition, int]) -> dict[TopicPartition, PartitionBounds]:
            chosen = self.partitions() if partitions is None else partitions
            return {tp: self.partition(tp, d).refresh(starts) for tp, d in chosen.items()}

        return self.pending_jobs.consistent(read)

    def checkpointed_log_start_offset(self, log_dir: Path, tp: TopicPartition) -> int | None:
        """``tp``'s entry in ``log_dir``'s log-start-offset checkpoint (re-read when the file
        changed); None when absent or unreadable."""
        path = self._checkpoint_paths.get(log_dir)
        if path is None:
            path = self._checkpoint_paths[log_dir] = log_dir / LOG_START_OFFSET_CHECKPOINT_FILE
        try:
            st = os.stat(path)
        except OSError:
            return None
        key = (st.st_mtime_ns, st.st_size)
        cached = self._checkpoints.get(path)
        if cached is None or cached[0] != key:
            cached = (key, _read_offset_checkpoint(path))
            self._checkpoints[path] = cached
        return cached[1].get(tp)


def _mtime(path: Path) -> int:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return -1


def _read_offset_checkpoint(path: Path) -> dict[TopicPartition, int]:
    try:
        return dict(parse_checkpoint(path.read_text("utf-8"), OFFSET_ENTRY_FORMAT, path))
    except (OSError, UnicodeDecodeError, CheckpointError):
        return {}  # replaced concurrently or damaged: the first segment's base still bounds the start


# --- one partition --------------------------------------------------------------------------

class PartitionView:
    """One partition dir, read-only. Call :meth:`refresh` to see new data; lookups use the
    segment list of the last refresh (and re-list once when a file vanished)."""

    def __init__(self, owner: LogView, tp: TopicPartition, dir: Path) -> None:
        self.topic_partition = tp
        self.dir = dir
        self._log_dir = dir.parent
        self._dir_name = str(dir)
        self._owner = owner
        self._dir_mtime: tuple[int, int] | None = None  # (inode, mtime) of the partition dir
        self._segments: list[SegmentInfo] = []
        self._walk: _Walk | None = None
        self._bounds: PartitionBounds | None = None
        self._index_cache: dict[tuple[Path, int, int], np.ndarray] = {}

    # --- listing and bounds ---------------------------------------------------------------

    @property
    def segments(self) -> list[SegmentInfo]:
        """Segments of the last refresh, in base-offset order."""
        if self._bounds is None:
            self.refresh()
        return list(self._segments)

    def refresh(self, pending: dict[TopicPartition, int] | None = None) -> PartitionBounds:
        """Re-read what changed (dir listing, checkpoint, appended bytes) and return the bounds.
        ``pending``: the starts of jobs in flight, when the caller read them (and checks the
        staged-commit log did not change meanwhile, as :meth:`LogView.bounds`).

        Raises :class:`DataLossError` when the partition dir is gone. Cost when nothing changed:
        three ``stat`` calls, plus two reads per log dir of the staged-commit log without ``pending``."""
        for attempt in (0, 1):
            try:
                return self._refresh(pending)
            except FileNotFoundError:
                self._dir_mtime = None  # a file vanished between listing and reading: re-list
                if attempt == 1 or not self.dir.is_dir():
                    raise DataLossError("partition dir is gone (topic deleted?)",
                                        topic_partition=str(self.topic_partition), path=self.dir) from None
        raise AssertionError("unreachable")

    def _refresh(self, pending: dict[TopicPartition, int] | None) -> PartitionBounds:
        st = os.stat(self._dir_name)
        key = (st.st_ino, st.st_mtime_ns)
        if key != self._dir_mtime:
            if self._dir_mtime is not None and self._dir_mtime[0] != st.st_ino:  # deleted and created again
                self._walk, self._index_cache = None, {}
            self._segments = _list_segments(self.dir)
            self._dir_mtime = key
        end = self._visible_end(pending)
        start = self._segments[0].base_offset if self._segments else end
        checkpointed = self._owner.checkpointed_log_start_offset(self._log_dir, self.topic_partition)
        if checkpointed is not None:
            start = max(start, checkpointed)
        self._bounds = PartitionBounds(self.topic_partition, min(start, end), end)
        return self._bounds

    def _visible_end(self, starts: dict[TopicPartition, int] | None) -> int:
        """The readable end, stopped at the start of a job in flight (:mod:`.commit_log`: the
        commit log's generation is read before and after the end, unless the caller did)."""
        def capped(found: dict[TopicPartition, int]) -> int:
            end, cap = self._walk_end(), found.get(self.topic_partition)
            return end if cap is None else min(end, cap)

        return capped(starts) if starts is not None else self._owner.pending_jobs.consistent(capped)

    def _walk_end(self) -> int:
        """The readable end: continue the last segment's header walk over appended bytes."""
        if not self._segments:
            self._walk = None
            return self._checkpoint_or_zero()
        last = self._segments[-1]
        st = os.stat(last.log_path)
        size = st.st_size
        walk = self._walk
        if walk is None or (walk.segment_base, walk.inode) != (last.base_offset, st.st_ino) or size < walk.position:
            position, next_offset = _last_index_entry(last)
            walk = _Walk(last.base_offset, st.st_ino, position, next_offset)
        if size > walk.position:
            with open_segment(last.log_path, last.base_offset, size) as reader:
                walk.position, walk.next_offset = _walk_checked(reader, walk.position, walk.next_offset)
        self._walk = walk
        return walk.next_offset

    def _checkpoint_or_zero(self) -> int:
        checkpointed = self._owner.checkpointed_log_start_offset(self.dir.parent, self.topic_partition)
        return checkpointed or 0

    @property
    def bounds(self) -> PartitionBounds:
        """The bounds of the last refresh (refreshing first if there was none)."""
        return self._bounds if self._bounds is not None else self.refresh()

    def readable_size(self, segment: SegmentInfo) -> int:
        """Bytes of ``segment``'s ``.log`` that hold whole batches as of the last refresh: its
        size, or for the last segment how far its headers were walked (a batch being appended
        is left out). Not thread-safe (as the view)."""
        walk = self._walk
        if walk is not None and segment is self._segments[-1] and walk.segment_base == segment.base_offset:
            return walk.position
        return os.stat(segment.log_path).st_size

    # --- lookups --------------------------------------------------------------------------

    def locate(self, offset: int) -> BatchPosition | None:
        """The first batch whose last offset is >= ``offset`` (below the readable end of the last
        refresh); None when there is none. Raises :class:`DataLossError` when ``offset`` is below
        the log start offset. Cost: one index read (cached for sealed segments) and a short walk."""
        bounds = self.bounds
        self._check_not_lost(offset, bounds)
        for attempt in (0, 1):
            try:
                return self._locate(offset, bounds.end_offset)
            except FileNotFoundError:
                if attempt == 1:
                    raise
                bounds = self.refresh()
                self._check_not_lost(offset, bounds)
        return None

    def _check_not_lost(self, offset: int, bounds: PartitionBounds) -> None:
        if offset < bounds.log_start_offset:
            raise DataLossError("offset is below the log start offset", topic_partition=str(self.topic_partition),
                                offset=offset, log_start_offset=bounds.log_start_offset)

    def _locate(self, offset: int, end: int) -> BatchPosition | None:
        if offset >= end or not self._segments:
            return None
        first = self._segment_index(offset)
        for i in range(first, len(self._segments)):
            segment = self._segments[i]
            with open_segment(segment.log_path, segment.base_offset) as reader:
                start = reader.checked_start(self._index_floor(segment, offset)) if i == first else 0
                found = _first_batch_reaching(reader, segment, start, offset)
            if found is not None:
                return found if found.base_offset < end else None
        return None

    def _segment_index(self, offset: int) -> int:
        bases = [s.base_offset for s in self._segments]
        return max(0, index_floor(np.asarray(bases, np.int64), offset))

    def _index_floor(self, segment: SegmentInfo, offset: int) -> int:
        """Byte position of the offset index's largest entry <= ``offset`` (0 when none)."""
        entries = self._offset_entries(segment)
        i = index_floor(entries["relative_offset"], offset - segment.base_offset)
        return int(entries["position"][i]) if i >= 0 else 0

    def _offset_entries(self, segment: SegmentInfo) -> np.ndarray:
        is_last = segment is self._segments[-1]
        try:
            st = os.stat(segment.index_path)
        except FileNotFoundError:
            if not segment.log_path.exists():
                raise
            return np.zeros(0, OFFSET_INDEX_DTYPE)  # no index (Kafka rebuilds it; we walk from 0)
        key = (segment.index_path, st.st_ino, st.st_size)
        cached = None if is_last else self._index_cache.get(key)
        if cached is None:
            cached = read_index_entries(segment.index_path, OFFSET_INDEX_DTYPE, st.st_size)
            if not is_last:
                self._index_cache[key] = cached
        return cached

    def read_batches(self, start: int, end: int, chunk_bytes: int = READ_CHUNK) -> Iterator[bytes]:
        """Buffers of whole batches covering offsets ``[start, end)``, in order.

        The first buffer starts with the batch holding ``start`` (it may hold lower offsets, and
        the last one higher offsets: callers filter records by offset). Stops after the batch
        reaching ``end - 1`` or at the readable end of the last refresh. A segment that vanished
        mid-read (retention, a cleaner swap) is re-listed and the read goes on from the next
        offset; :class:`DataLossError` when that offset fell below the log start offset."""
        next_offset = start
        retried = False
        while next_offset < end:
            try:
                for buf, last_offset in self._read_from(next_offset, end, chunk_bytes):
                    retried = False
                    next_offset = last_offset + 1
                    yield buf
                return
            except FileNotFoundError:
                if retried:
                    raise
                retried = True
                self.refresh()

    def _read_from(self, start: int, end: int, chunk_bytes: int) -> Iterator[tuple[bytes, int]]:
        found = self.locate(start)
        if found is None:
            return
        bound = self.bounds.end_offset
        first = self._segments.index(found.segment) if found.segment in self._segments else 0
        position = found.position
        for segment in self._segments[first:]:
            with self._open(segment) as reader:
                for buf, walked in reader.whole_batches(position, chunk_bytes):
                    last = int(walked.batches["last_offset"][-1])
                    yield buf, last
                    if last >= end - 1 or last >= bound - 1:
                        return
            position = 0

    def _open(self, segment: SegmentInfo) -> AbstractContextManager[SegmentReader]:
        """A reader of ``segment`` up to its readable end: for the last segment, only what the last
        refresh checked; else the file's size."""
        walk = self._walk
        limit = walk.position if walk is not None and segment.base_offset == walk.segment_base else None
        return open_segment(segment.log_path, segment.base_offset, limit)

    def offset_for_timestamp(self, timestamp: int) -> int | None:
        """Kafka's ListOffsets by time: the first offset >= the log start offset whose record
        timestamp is >= ``timestamp`` (control records count, as in Kafka); None when no record
        qualifies. Reads each segment's last time-index entry (and walks its tail) until one can
        hold such a record, then searches it as the broker does
        (:func:`~tidelog.storage.segment_reader.offset_for_timestamp`), below the readable end."""
        bounds = self.bounds
        for attempt in (0, 1):
            try:
                return self._offset_for_timestamp(timestamp, bounds)
            except FileNotFoundError:
                if attempt == 1:
                    raise
                bounds = self.refresh()
        return None

    def _offset_for_timestamp(self, timestamp: int, bounds: PartitionBounds) -> int | None:
        if bounds.log_start_offset >= bounds.end_offset:
            return None
        for segment in self._segments:
            if self._segment_max_timestamp(segment) < timestamp:
                continue
            times = _time_entries(segment)
            i = index_floor(times["timestamp"], timestamp)
            floor = segment.base_offset + int(times["relative_offset"][i]) if i >= 0 else segment.base_offset
            with self._open(segment) as reader:
                try:
                    found = offset_for_timestamp(
                        reader, floor, lambda offset: reader.checked_start(self._index_floor(segment, offset)),
                        timestamp, bounds.log_start_offset, bounds.end_offset)
                except CorruptRecordError:  # bytes that are not batches (a file swapped in): no record here
                    found = None
            if found is not None:
                return found.offset
        return None

    def _segment_max_timestamp(self, segment: SegmentInfo) -> int:
        """Largest batch max timestamp in ``segment``: its last time-index entry, and the batches
        after its last offset-index entry (the active segment's tail has no entry yet)."""
        times = _time_entries(segment)
        best = int(times["timestamp"][-1]) if len(times) else -1
        entries = self._offset_entries(segment)
        position = int(entries["position"][-1]) if len(entries) else 0
        with self._open(segment) as reader:
            for _, walked in reader.whole_batches(position, WALK_CHUNK):
                best = max(best, int(walked.batches["max_timestamp"].max()))
        return best


def _time_entries(segment: SegmentInfo) -> np.ndarray:
    try:
        return read_index_entries(segment.time_index_path, TIME_INDEX_DTYPE)
    except FileNotFoundError:
        return np.zeros(0, TIME_INDEX_DTYPE)


# --- files ----------------------------------------------------------------------------------

def _list_segments(dir: Path) -> list[SegmentInfo]:
    """The ``.log`` files of a partition dir (temporary .deleted/.cleaned/.swap names skipped)."""
    segments = []
    for entry in os.scandir(dir):
        name = entry.name
        if not name.endswith(files.LOG_SUFFIX):
            continue
        prefix = name[: -len(files.LOG_SUFFIX)]
        if prefix.isascii() and prefix.isdigit():
            segments.append(SegmentInfo(int(prefix), Path(entry.path)))
    segments.sort(key=lambda s: s.base_offset)
    return segments


def _last_index_entry(segment: SegmentInfo) -> tuple[int, int]:
    """Where a walk to the segment's end can start: ``(position, next offset)`` of the last
    offset-index entry whose batch header checks out, else ``(0, base offset)``."""
    try:
        entries = read_index_entries(segment.index_path, OFFSET_INDEX_DTYPE)
    except FileNotFoundError:
        return 0, segment.base_offset
    with open_segment(segment.log_path, segment.base_offset) as reader:
        for i in range(len(entries) - 1, max(-1, len(entries) - 4), -1):
            position = int(entries["position"][i])
            if reader.checked_start(position) != position:
                continue
            found = next(_v2_batches_from(reader, position), None)
            if found is not None and found.position == position:
                return position, found.base_offset
    return 0, segment.base_offset


def _walk_checked(reader: SegmentReader, position: int, next_offset: int) -> tuple[int, int]:
    """Walk complete batches from ``position`` to the reader's end, checking their CRCs; stop at
    the first partial, unparsable or CRC-failing batch. Returns the new ``(position, next offset)``."""
    for data, walked in reader.whole_batches(position, WALK_CHUNK):
        positions, sizes = walked.batches["position"], walked.batches["size"]
        view = memoryview(data)
        for j in range(len(positions)):
            p, n = int(positions[j]), int(sizes[j])
            stored = int.from_bytes(view[p + CRC_OFFSET:p + CRC_OFFSET + CRC_SIZE], "big")
            if crc32c(view[p + CRC_START:p + n]) != stored:
                return position + p, next_offset
            next_offset = int(walked.batches["last_offset"][j]) + 1
        position += len(data)
    return position, next_offset


def _v2_batches_from(reader: SegmentReader, position: int) -> Iterator[BatchLocation]:
    """The v2 batch headers from ``position`` on, up to the first v0/v1 entry or bytes that are
    not a batch (a lock-free reader's walk: it stops rather than raise)."""
    try:
        for location in reader.batch_locations(position):
            if location.magic != 2:
                return
            yield location
    except CorruptRecordError:
        return


def _first_batch_reaching(reader: SegmentReader, segment: SegmentInfo, position: int,
                          offset: int) -> BatchPosition | None:
    """The first v2 batch at or after ``position`` whose last offset is >= ``offset`` (headers only)."""
    for location in _v2_batches_from(reader, position):
        if location.last_offset >= offset:
            return BatchPosition(segment, location.position, location.base_offset, location.last_offset)
    return None
