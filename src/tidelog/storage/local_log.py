"""LocalLog: one partition's segments on local disk — roll, read, flush, truncate, swap, delete, close.

Kafka's ``LocalLog``. It owns the partition dir, the segment map, the recovery point and the
segments renamed ``.deleted`` whose delayed unlink has not run. :class:`~tidelog.storage.log.Log`
(Kafka's ``UnifiedLog``) owns the offsets, the leader epochs, producer state and the append
rules, and calls in here; the log end offset stays there (every append and fetch reads it), and
is passed in where a method here needs it.

Thread-safety, as Kafka's: not thread-safe by itself. Every method needs the caller to hold
:attr:`lock`, the log's one lock, which is created here and shared with the :class:`Log`; the
exceptions say so (:meth:`read_from` and :meth:`flush_segments` run without it, the delayed
unlink takes it).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from tidelog.clock import Clock
from tidelog.errors import IndexStateError, StorageError, TidelogError
from tidelog.scheduler import Scheduler
from tidelog.storage import fileops, files
from tidelog.storage.atomic import fsync_dir
from tidelog.storage.config import LogConfig
from tidelog.storage.fetch_info import FetchDataInfo, TimestampAndOffset
from tidelog.storage.loader import LoadedLog, LoadParams, SegmentRecovered, load_log
from tidelog.storage.log_config import segment_config
from tidelog.storage.segment import LogSegment
from tidelog.storage.segments import LogSegments
from tidelog.topic_partition import TopicPartition

log = logging.getLogger(__name__)

# What a retirement does with the producer snapshot at a segment's base offset: producer state's
# ``mark_snapshot_for_deletion`` (renames it ``.deleted``; None when there is none).
MarkSnapshot = Callable[[int], Path | None]


@dataclass(frozen=True, slots=True)
class ReadBound:
    """An upper read bound with its segment and byte position (None position: unknown)."""

    offset: int
    segment_base: int
    position: int | None


class LocalLog:
    """The segments of one partition dir and what is done to them as files.

    Attributes (read by the :class:`Log` under :attr:`lock`): ``dir``, ``config`` (set by the
    Log's ``update_config``), ``segments`` (the one :class:`LogSegments` object, never rebound),
    ``recovery_point`` (everything below it is fsynced), ``last_flush_ms``, ``clock``,
    ``scheduler``, ``topic_partition``, ``lock``.
    """

    def __init__(
        self, dir: Path, config: LogConfig, segments: LogSegments, *, recovery_point: int, clock: Clock,
        scheduler: Scheduler, topic_partition: TopicPartition,
    ) -> None:
        self.dir = dir
        self.config = config
        self.segments = segments
        self.recovery_point = recovery_point
        self.clock = clock
        self.scheduler = scheduler
        self.topic_partition = topic_partition
        self.lock = threading.RLock()
        self.last_flush_ms = clock.milliseconds()
        self._bound_cache: ReadBound | None = None  # the last bound below the log end, located
        # Segments renamed .deleted whose delayed unlink has not run: their handles stay open
        # meanwhile (a fetch may still be reading them, as in Kafka) and are released by close().
        self._retired: list[LogSegment] = []
        self._closed = False  # set before close() or close_handlers() releases a segment

    @classmethod
    def load(
        cls, dir: Path, config: LogConfig, *, clock: Clock, scheduler: Scheduler, topic_partition: TopicPartition,
        log_start_offset: int, recovery_point: int, had_clean_shutdown: bool, recovered_elsewhere: bool,
        on_segment_recovered: SegmentRecovered,
    ) -> tuple[LocalLog, LoadedLog]:
        """Load the segments of ``dir`` (:func:`~tidelog.storage.loader.load_log`: swaps completed,
        temporary files removed, recovery from the checkpointed ``recovery_point`` unless
        ``had_clean_shutdown``); returns the local log and what loading found. Not shared until it returns."""
        loaded = load_log(LoadParams(
            dir=dir, config=segment_config(config), clock=clock,
            log_start_offset_checkpoint=log_start_offset, recovery_point_checkpoint=recovery_point,
            had_clean_shutdown=had_clean_shutdown, draw_jitter=config.random_segment_jitter,
            recovered_elsewhere=recovered_elsewhere, on_segment_recovered=on_segment_recovered,
            remote_log_enabled=config.remote_storage_enable,
        ))
        local = cls(dir, config, loaded.segments, recovery_point=loaded.recovery_point, clock=clock,
                    scheduler=scheduler, topic_partition=topic_partition)
        return local, loaded

    @property
    def active_segment(self) -> LogSegment:
        """The last segment, the one appends go to. Raises :class:`StorageError` when there is none."""
        active = self.segments.last
        if active is None:
            raise StorageError("log has no segment", path=self.dir)
        return active

    def new_segment(self, base_offset: int) -> LogSegment:
        """A new empty segment's files at ``base_offset`` (not yet in the map). Caller holds the lock."""
        return LogSegment.open(
            self.dir, base_offset, segment_config(self.config), self.clock,
            rolling_jitter_ms=self.config.random_segment_jitter(),
        )

    # --- roll ---------------------------------------------------------------------------------

    def roll(self, new_base: int) -> LogSegment:
        """Seal the active segment and add a new one at ``new_base``; an empty active segment at
        that base offset is recreated in place (its files are already gone, and sealing it would
        recreate index files under its and the new segment's name). Caller holds the lock."""
        active = self.active_segment
        if self.segments.contains(new_base):
            self._recreate_empty_active(active, new_base)
        elif new_base < active.base_offset:
            raise TidelogError(
                f"cannot roll to base offset {new_base}: below the active segment's {active.base_offset}",
                topic_partition=str(self.topic_partition),
            )
        else:
            self._remove_stale_files(new_base)
            active.on_become_inactive_segment()
        segment = self.new_segment(new_base)
        self.segments.add(segment)
        return segment

    def _recreate_empty_active(self, active: LogSegment, new_base: int) -> None:
        if active.base_offset != new_base or active.size > 0:
            raise TidelogError(
                f"cannot roll: a segment with base offset {new_base} already exists",
                topic_partition=str(self.topic_partition),
            )
        log.warning("%s: recreating empty active segment %d", self.topic_partition, new_base)
        self.segments.remove(new_base)
        active.delete_files()

    def _remove_stale_files(self, base: int) -> None:
        for name in (files.log_file, files.offset_index_file, files.time_index_file, files.transaction_index_file):
            path = name(self.dir, base)
            if path.exists():
                log.warning("%s: removing stale file %s before roll", self.topic_partition, path)
                fileops.unlink(path)

    # --- read ---------------------------------------------------------------------------------

    def bound(self, offset: int, log_end_offset: int) -> ReadBound:
        """The read bound at ``offset`` with its byte position. A bound below the log end is
        located once (index lookup and header scan) and kept while it is asked for again; every
        change that can move a position (truncation, swap, deletion) forgets it. Caller holds the lock."""
        if offset == log_end_offset:
            active = self.active_segment
            return ReadBound(offset, active.base_offset, active.size)
        cached = self._bound_cache
        if cached is None or cached.offset != offset:
            cached = self._bound_cache = self._locate(offset)
        return cached

    def _locate(self, offset: int) -> ReadBound:
        segment = self.segments.floor(offset)
        if segment is None:
            return ReadBound(offset, -1, None)
        location = segment.translate_offset(offset)
        position = location.position if location is not None else segment.size
        return ReadBound(offset, segment.base_offset, position)

    def read_from(
        self, segment: LogSegment | None, start_offset: int, max_length: int, bound: ReadBound, min_one_message: bool,
        as_slice: bool = False,
    ) -> FetchDataInfo | None:
        """Batches from ``start_offset`` in ``segment`` or, past a gap at its end (compaction), in
        the next ones, never past ``bound``; None when no segment holds any. Runs without the
        lock (the segments were taken under it and are read up to a bound complete then); takes
        it for each step to the next segment. ``as_slice``: as :meth:`LogSegment.read`."""
        while segment is not None:
            info = segment.read(start_offset, max_length, _max_position(segment, bound), min_one_message,
                                as_slice=as_slice)
            if info is not None:
                return info
            with self.lock:
                segment = self.segments.higher(segment.base_offset)
        return None

    # --- ListOffsets --------------------------------------------------------------------------

    def offset_for_timestamp(self, timestamp: int, log_start_offset: int) -> TimestampAndOffset | None:
        """The first record with a timestamp >= ``timestamp``. Any thread: reads a snapshot of the map."""
        for segment in self.segments.snapshot():
            if segment.largest_timestamp >= timestamp:
                return segment.find_offset_by_timestamp(timestamp, log_start_offset)
        return None

    def max_timestamp_offset(self) -> TimestampAndOffset | None:
        """The first record with the log's max timestamp. Any thread: reads a snapshot of the map."""
        best: LogSegment | None = None
        for segment in self.segments.snapshot():
            if best is None or segment.max_timestamp_so_far > best.max_timestamp_so_far:
                best = segment
        if best is None or best.max_timestamp_so_far < 0:
            return None
        target = best.max_timestamp_and_offset_so_far
        position = best.offset_index.lookup(target.offset).position
        # No batch of the segment has a max timestamp above the target: the first record reaching
        # it is the first record at it.
        return best.reader().first_record_reaching(target.timestamp, position, 0)

    # --- flush --------------------------------------------------------------------------------

    def flush_segments(self, segments: Sequence[LogSegment], recovery_point: int) -> None:
        """fsync ``segments`` (taken under the lock), then the partition dir when one of them was
        created at or after ``recovery_point``. Runs without the lock; does not move the recovery
        point (:meth:`mark_flushed` does). A segment closed meanwhile because it left the map
        (retention, a clean's swap, the delayed unlink) or the log was closed (a shutdown under a
        scheduled flush) is skipped: nothing of it is left to make durable; a live one that fails
        raises."""
        for segment in segments:
            try:
                segment.flush()
            except IndexStateError:
                if not self._closed and self.segments.get(segment.base_offset) is segment:
                    raise
        if any(segment.base_offset >= recovery_point for segment in segments):
            fsync_dir(self.dir)

    def mark_flushed(self, recovery_point: int, log_end_offset: int) -> None:
        """Move the recovery point forward to ``recovery_point`` (at most the log end). Caller holds the lock."""
        if recovery_point > self.recovery_point:
            self.recovery_point = min(recovery_point, log_end_offset)
            self.last_flush_ms = self.clock.milliseconds()

    # --- truncation, swap and deletion ---------------------------------------------------------

    def truncate_to(self, target_offset: int, mark: MarkSnapshot) -> None:
        """Delete the segments above ``target_offset`` and cut the (new) active one there; the
        recovery point follows. A segment must start at or below ``target_offset``. Caller holds the lock."""
        later = [s for s in self.segments.snapshot() if s.base_offset > target_offset]
        self.delete_segments(later, "truncation", mark)
        self.active_segment.truncate_to(target_offset)
        self.recovery_point = min(self.recovery_point, target_offset)
        self._bound_cache = None

    def start_at(self, offset: int) -> None:
        """After every segment was deleted: a new empty segment at ``offset``, the recovery point there.
        Caller holds the lock."""
        self.segments.add(self.new_segment(offset))
        self.recovery_point = offset

    def end_of_oldest(self, segments: Sequence[LogSegment], log_end_offset: int) -> int:
        """The first offset after ``segments``, which must be the oldest segments in order
        (:class:`StorageError` otherwise): the next segment's base offset, or the log end. Caller holds the lock."""
        current = self.segments.snapshot()
        chosen = [s.base_offset for s in segments]
        if chosen != [s.base_offset for s in current[:len(chosen)]]:
            raise StorageError(f"segments {chosen} are not the oldest segments of the log", path=self.dir)
        return log_end_offset if segments[-1] is current[-1] else current[len(chosen)].base_offset

    def replace_segments(self, new_segments: Sequence[LogSegment], old_segments: Sequence[LogSegment],
                         mark: MarkSnapshot) -> None:
        """Swap cleaned segments in for the segments they replace, crash-safely (Kafka's
        ``replaceSegments``; the loader completes or rolls back each step, see :mod:`.loader`):

        1. each new segment's files ``.cleaned`` → ``.swap``, highest base offset first, and into
           the segment map (replacing an old segment with the same base offset);
        2. the old segments still in the log, lowest first: out of the map and their files renamed
           ``.deleted`` (unlinked after ``file.delete.delay.ms``), with the producer snapshots of
           those no new segment took the place of;
        3. the new segments' files ``.swap`` → final names; fsync the partition dir.

        Old segments already deleted meanwhile (retention) are skipped. Caller holds the lock.
        """
        new_sorted = sorted(new_segments, key=lambda s: s.base_offset)
        new_bases = {s.base_offset for s in new_sorted}
        old_live = [s for s in sorted(old_segments, key=lambda s: s.base_offset) if self.segments.get(s.base_offset) is s]
        self._bound_cache = None  # it may point into a segment going away
        try:
            for segment in reversed(new_sorted):
                segment.change_file_suffixes(files.CLEANED_SUFFIX, files.SWAP_SUFFIX)
                self.segments.add(segment)
            for segment in old_live:
                if segment.base_offset not in new_bases:  # else the new segment took its map entry
                    self.segments.remove(segment.base_offset)
            self._retire(old_live, f"replaced by {sorted(new_bases)}", mark,
                         snapshots_of=[s for s in old_live if s.base_offset not in new_bases])
            for segment in new_sorted:
                segment.change_file_suffixes(files.SWAP_SUFFIX, "")
            fsync_dir(self.dir)
        except BaseException:
            self._release_unreachable([*new_sorted, *old_live])
            raise

    def _release_unreachable(self, segments: Sequence[LogSegment]) -> None:
        """After a failed swap (its files are for the loader to complete or roll back at the next
        open): close the handles of the segments neither in the map nor retired, which nothing
        else would ever close."""
        kept = {id(segment) for segment in (*self.segments.snapshot(), *self._retired)}
        for segment in segments:
            if id(segment) not in kept:
                segment.close_handlers()

    def delete_segments(self, segments: Sequence[LogSegment], reason: str, mark: MarkSnapshot) -> None:
        """Take segments out of the map, rename their files and producer snapshots ``.deleted``
        and unlink them after ``file.delete.delay.ms`` in the background (a large unlink blocks
        for a long time)."""
        self._bound_cache = None  # it may point into a segment going away
        for segment in segments:
            self.segments.remove(segment.base_offset)
        self._retire(segments, reason, mark, snapshots_of=segments)

    def _retire(self, segments: Sequence[LogSegment], reason: str, mark: MarkSnapshot,
                snapshots_of: Sequence[LogSegment] = ()) -> None:
        """Rename segments already out of the map ``.deleted``, then the producer snapshots at the
        base offsets of ``snapshots_of`` (Kafka's ``deleteProducerSnapshots``), and schedule the
        unlink of both."""
        for segment in segments:
            segment.change_file_suffixes("", files.DELETED_SUFFIX)
        snapshots = [p for p in (mark(s.base_offset) for s in snapshots_of) if p]
        if segments or snapshots:
            doomed = list(segments)
            self._retired.extend(doomed)
            log.info("%s: deleting segments %s (%s)", self.topic_partition, [s.base_offset for s in doomed], reason)
            self.scheduler.schedule_once(
                f"delete-segments-{self.topic_partition}", lambda: self._delete_retired(doomed, snapshots),
                self.config.file_delete_delay_ms,
            )

    def _delete_retired(self, segments: list[LogSegment], snapshots: Sequence[Path]) -> None:
        """The delayed unlink of :meth:`_retire` (scheduler thread; takes the lock for the list)."""
        with self.lock:
            done = {id(segment) for segment in segments}
            self._retired = [segment for segment in self._retired if id(segment) not in done]
        for segment in segments:
            segment.delete_files()
        for path in snapshots:
            fileops.unlink(path, missing_ok=True)

    # --- closing ------------------------------------------------------------------------------

    def close(self) -> None:
        """Close every segment: final time-index entries, trimmed indexes and ``.log`` files. Caller holds the lock."""
        self._closed = True
        for segment in self.segments.snapshot():
            segment.close()
        # Retired segments whose delayed unlink has not run (the scheduler may never run it now):
        # release their descriptors and maps, or a process that closes and reopens logs (offline
        # dirs, tools, tests) keeps them, and the disk space of files the next open unlinks, until
        # it exits. Their .deleted files stay; the next open removes them (as Kafka's loader does).
        for segment in self._retired:
            segment.close_handlers()

    def close_handlers(self) -> None:
        """Release every segment's descriptors and maps, writing nothing but a best-effort
        truncation of the active ``.log`` to its data (it frees and never allocates, and removes
        the partial bytes of an append that failed). Caller holds the lock."""
        self._closed = True
        segments = self.segments.snapshot()
        if segments:
            try:
                segments[-1].log.trim()
            except StorageError:
                pass  # the disk is failing: the next open's recovery cuts them
        for segment in (*segments, *self._retired):
            segment.close_handlers()


def _max_position(segment: LogSegment, bound: ReadBound) -> int | None:
    if segment.base_offset < bound.segment_base:
        return segment.size
    if segment.base_offset == bound.segment_base:
        return bound.position
    return None
