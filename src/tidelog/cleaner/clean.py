"""Cleaning one log: offset map over the dirty range, segment groups rewritten, swapped in.

Kafka's ``Cleaner`` (kafka-storage.md §3.7.4-3.7.7), in two halves behind a seam:

* the **engine** does the heavy work: :meth:`CleaningEngine.build_offset_map` (latest offset per
  key over [first dirty, first uncleanable), partial when the map fills) and
  :meth:`CleaningEngine.clean_group` (copy what survives of a group of segments into one new
  ``.cleaned`` segment). :class:`InProcessEngine` runs both in this thread on the numba kernels;
  :class:`tidelog.spark.compaction.SparkCleaningEngine` plugs in and produces identical segments,
  sharing :func:`copy_segment` and :func:`seal_cleaned_segment`; an engine may also clean every
  group of a pass at once (:class:`BatchCleaningEngine`), the owner then swaps them in one by one;
* the **owner**, :class:`Cleaner`, decides the round (groups, times, bounds), installs each cleaned
  segment with :meth:`Log.replace_segments` (``.cleaned`` → ``.swap`` → swap-in, each step
  recoverable by the loader) and checks for an abort before every chunk and every swap.

Beyond Kafka: when the offset map fills before the dirty range ends, Kafka cleans what it mapped
(up to the last record put, possibly inside a batch) and waits to be chosen again, which may be
never if the ratio drops below ``min.cleanable.dirty.ratio``; :meth:`Cleaner.clean` goes on with
further passes until the range chosen is clean, checkpointing after each, so any number of distinct
keys finishes in the map's fixed memory (each pass maps at least one key; only a map of zero
entries is refused, with an error naming the buffer setting).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

from tidelog.clock import Clock
from tidelog.cleaner.offset_map import OffsetMap
from tidelog.cleaner.producers import producer_last_batches
from tidelog.cleaner.retain import CleaningRound, OffsetLookup, discardable_batches, filter_chunk
from tidelog.cleaner.stats import CleanerStats
from tidelog.cleaner.throttler import Throttler
from tidelog.cleaner.transactions import CleanedTransactionMetadata
from tidelog.errors import CorruptRecordError, InvalidRecordError, LogCleaningError, UnsupportedCompressionError
from tidelog.records import read_batch_at
from tidelog.records.layout import LOG_OVERHEAD, declared_size
from tidelog.records.legacy import LegacyBatch
from tidelog.records.batch import CONTROL_FLAG_MASK
from tidelog.records.scan import ScanResult, scan_batches
from tidelog.storage import fileops, files
from tidelog.storage.config import BrokerConfig
from tidelog.storage.log import Log
from tidelog.storage.log_config import SegmentConfig, segment_config
from tidelog.storage.segment import LogSegment
from tidelog.topic_partition import TopicPartition

logger = logging.getLogger(__name__)

INT32_MAX = 2**31 - 1
MIN_MAP_READ = 1 << 20  # offset-map reads: the partial-cleaning boundary depends on batches, not reads
# Copy reads: the fixed cost of filtering a chunk (the scan, ~60 numpy calls) dominates at Kafka's
# 256 KiB; the cleaned segment's indexes are rebuilt afterwards, so nothing depends on this size.
MIN_COPY_READ = 4 << 20


class TieredPassLike(Protocol):
    """The remote side of one pass over a tiered log (:class:`tidelog.cleaner.remote_clean.TieredPass`)."""

    def map_source(self, first_dirty: int) -> Log: ...
    def clean_remote(self, engine: CleaningEngine, round: CleaningRound, legacy_horizon: int, stats: CleanerStats,
                     end_offset: int, check_done: CheckDone) -> int: ...
    @property
    def highest_remote(self) -> int: ...
    def close(self) -> None: ...


class TieredCleaning(Protocol):
    """Opens the remote side of a pass (:class:`tidelog.cleaner.remote_clean.RemoteCleaning`)."""

    def open_pass(self, tp: TopicPartition, log: Log) -> TieredPassLike | None: ...


class LogToCleanLike(Protocol):
    """What the cleaner needs of the planner's choice (:class:`tidelog.cleaner.plan.LogToClean`)."""

    @property
    def topic_partition(self) -> TopicPartition: ...
    @property
    def log(self) -> Log: ...
    @property
    def first_dirty_offset(self) -> int: ...
    @property
    def first_uncleanable_offset(self) -> int: ...


CheckDone = Callable[[TopicPartition], None]  # raises LogCleaningAbortedError when aborted


def _never_aborted(tp: TopicPartition) -> None:
    return None


@dataclass(frozen=True, slots=True)
class CleanerBuffers:
    """One cleaner thread's memory (Kafka splits the broker settings evenly over the threads)."""

    dedupe_buffer_size: int  # offset-map bytes
    load_factor: float
    io_buffer_size: int  # initial read (and write) buffer
    max_io_buffer_size: int  # the largest a buffer may grow to: max(message.max.bytes, topic max)

    @classmethod
    def for_thread(cls, broker: BrokerConfig) -> CleanerBuffers:
        threads = max(1, broker.log_cleaner_threads)
        return cls(
            dedupe_buffer_size=min(broker.log_cleaner_dedupe_buffer_size // threads, INT32_MAX),  # Kafka's cap
            load_factor=broker.log_cleaner_io_buffer_load_factor,
            io_buffer_size=max(1, broker.log_cleaner_io_buffer_size // threads // 2),
            max_io_buffer_size=broker.message_max_bytes,
        )


# --- the engine seam ------------------------------------------------------------------------

class CleaningEngine(Protocol):
    """The dedupe and rewrite steps; the owner (:class:`Cleaner`) plans the round and swaps."""

    def build_offset_map(self, log: Log, start: int, end: int, stats: CleanerStats,
                         check_done: CheckDone) -> OffsetLookup:
        """Latest offset of every key in [start, end) (aborted transactional data and control
        batches excluded), ``latest_offset`` = the last offset mapped completely (partial when the
        map filled). ``utilization`` = share of the map in use."""
        ...

    def clean_group(self, log: Log, group: Sequence[LogSegment], round: CleaningRound,
                    txn: CleanedTransactionMetadata, legacy_delete_horizon_ms: int, stats: CleanerStats,
                    check_done: CheckDone) -> LogSegment:
        """Copy what survives of ``group`` into one new segment with the first one's base offset,
        files named ``.cleaned``, sealed (final time-index entry, trimmed), flushed, and with the
        last source segment's modification time. Not yet part of the log."""
        ...

    def measure_group(self, log: Log, group: Sequence[LogSegment], round: CleaningRound,
                      txn: CleanedTransactionMetadata, legacy_delete_horizon_ms: int, stats: CleanerStats,
                      check_done: CheckDone) -> None:
        """:meth:`clean_group`'s counting without writing anything (dry runs)."""
        ...


class BatchCleaningEngine(CleaningEngine, Protocol):
    """An engine that rewrites every group of a pass in one go (a Spark job): the owner then
    swaps the cleaned segments in, in order, exactly as it does group by group."""

    def clean_groups(self, log: Log, groups: Sequence[Sequence[LogSegment]], round: CleaningRound,
                     txn: CleanedTransactionMetadata, legacy_delete_horizon_ms: int, stats: CleanerStats,
                     check_done: CheckDone, *, dry_run: bool = False) -> list[LogSegment]:
        """:meth:`CleaningEngine.clean_group` of every group, in order, as if called one after the
        other with the same ``txn`` (one cleaned segment per group, none yet part of the log; on
        an error none is left behind). With ``dry_run`` nothing is written, only ``stats`` change,
        and the list is empty."""
        ...


class InProcessEngine:
    """Both steps in the calling thread, on the scan and offset-map kernels (numba; the GIL is
    released inside them, so cleaner threads overlap)."""

    def __init__(self, buffers: CleanerBuffers, throttler: Throttler | None = None,
                 offset_map: OffsetMap | None = None) -> None:
        self.buffers = buffers
        self._offset_map = offset_map
        self._throttler = throttler
        self._read_size = buffers.io_buffer_size

    @property
    def offset_map(self) -> OffsetMap:
        """Allocated on first use: a process that never cleans never pays for it."""
        if self._offset_map is None:
            self._offset_map = OffsetMap(self.buffers.dedupe_buffer_size, self.buffers.load_factor)
        return self._offset_map

    def _throttle(self, size: int) -> None:
        if self._throttler is not None:
            self._throttler.maybe_throttle(size)

    def _max_buffer(self, log: Log) -> int:
        return max(self.buffers.max_io_buffer_size, log.config.max_message_bytes)

    # --- offset map -------------------------------------------------------------------------

    def build_offset_map(self, log: Log, start: int, end: int, stats: CleanerStats,
                         check_done: CheckDone) -> OffsetLookup:
        offset_map = self.offset_map
        offset_map.clear()
        txn = CleanedTransactionMetadata(log.collect_aborted_transactions(start, end), lambda _: None)
        dirty = log.segments_between(start, end)
        nexts = [s.base_offset for s in dirty[1:]] + [end]
        for segment, next_start in zip(dirty, nexts):
            check_done(log.topic_partition)
            if self._map_segment(log, segment, start, next_start, txn, stats, check_done):
                return offset_map
        return offset_map

    def _map_segment(self, log: Log, segment: LogSegment, start: int, next_start: int,
                     txn: CleanedTransactionMetadata, stats: CleanerStats, check_done: CheckDone) -> bool:
        """Map one segment's keys from ``start``; True when the map filled (partial)."""
        offset_map = self.offset_map
        position = segment.offset_index.lookup(start).position
        size = segment.size
        read_size = max(self._read_size, MIN_MAP_READ)
        while position < size:
            check_done(log.topic_partition)
            data = segment.log.read(position, min(read_size, size - position))
            self._throttle(len(data))
            try:
                consumed, full = self._map_chunk(data, start, txn, stats)
            except CorruptRecordError as e:
                raise _in_file(e, segment.log.path, position) from e
            if full:
                return True
            position += consumed
            stats.index_bytes_read(consumed)
            if consumed == 0:
                read_size = _grown(read_size, self._max_buffer(log), data, segment.log.path, position, size)
        offset_map.latest_offset = next_start - 1  # skip offset gaps to the next segment
        return False

    def _map_chunk(self, data: bytes, start: int, txn: CleanedTransactionMetadata,
                   stats: CleanerStats) -> tuple[int, bool]:
        """Map the complete batches of ``data``: (bytes consumed, map full)."""
        pos = 0
        while pos < len(data):
            scan = scan_batches(data, pos, stop_at_legacy=True)
            if scan.batch_count and self._map_scan(data, scan, start, txn, stats):
                return pos, True
            pos = scan.end_position
            if not scan.stopped_at_legacy:
                return pos, False  # the end, or a partial batch: read on from here
            legacy = read_batch_at(data, pos)
            if legacy is None:  # cut by the read: read on from here
                return pos, False
            try:
                full = self._map_legacy(legacy, start, stats)
            except (InvalidRecordError, UnsupportedCompressionError) as e:
                raise CorruptRecordError(e.message, position=pos, offset=legacy.last_offset) from e
            if full:
                return pos, True
            pos += legacy.size_in_bytes
        return pos, False

    def _map_scan(self, data: bytes, scan: ScanResult, start: int, txn: CleanedTransactionMetadata,
                  stats: CleanerStats) -> bool:
        offset_map = self.offset_map
        control = (scan.batch_attributes & CONTROL_FLAG_MASK) != 0
        aborted = discardable_batches(scan, txn) & ~control  # markers only move the transaction state
        rows_batch = scan.batch
        eligible = (scan.key_len >= 0) & (scan.offset >= start) & ~control[rows_batch] & ~aborted[rows_batch]
        stop = offset_map.put_records(scan, eligible)  # each put moves latest_offset to its offset
        full = stop < scan.record_count
        stats.index_messages_read(stop)
        # Kafka's order of updates: a put sets the latest offset to the record's offset, a batch
        # read to the end sets it to the batch's last offset (if >= start). When the map fills
        # inside a batch, the last update was that batch's last put, if it had one before the stop.
        complete = int(rows_batch[stop]) if full else scan.batch_count
        if full:
            first_row = int(np.searchsorted(rows_batch, complete))
            if eligible[first_row:stop].any():
                return True
        last_offsets = scan.batch_last_offset[:complete]
        mapped = last_offsets[last_offsets >= start]
        if len(mapped):
            offset_map.latest_offset = int(mapped[-1])
        return full

    def _map_legacy(self, batch: LegacyBatch, start: int, stats: CleanerStats) -> bool:
        offset_map = self.offset_map
        for record in batch.records():
            if record.key is not None and record.offset >= start:
                if offset_map.size >= offset_map.max_entries:
                    return True
                offset_map.put(bytes(record.key), record.offset)
            stats.index_messages_read(1)
        if batch.last_offset >= start:
            offset_map.latest_offset = batch.last_offset
        return False

    # --- rewrite ----------------------------------------------------------------------------

    def clean_group(self, log: Log, group: Sequence[LogSegment], round: CleaningRound,
                    txn: CleanedTransactionMetadata, legacy_delete_horizon_ms: int, stats: CleanerStats,
                    check_done: CheckDone) -> LogSegment:
        cleaned = create_cleaned_segment(log.dir, group[0].base_offset, segment_config(log.config), log.clock)
        try:
            txn.on_aborted_kept = cleaned.txn_index.append
            self._copy_group(log, group, cleaned, round, txn, legacy_delete_horizon_ms, stats, check_done)
            seal_cleaned_segment(cleaned, group[-1].last_modified_ms)
            return cleaned
        except BaseException:
            _discard(cleaned)
            raise

    def measure_group(self, log: Log, group: Sequence[LogSegment], round: CleaningRound,
                      txn: CleanedTransactionMetadata, legacy_delete_horizon_ms: int, stats: CleanerStats,
                      check_done: CheckDone) -> None:
        """:meth:`clean_group` without writing: only ``stats`` change (dry runs)."""
        txn.on_aborted_kept = lambda _: None
        self._copy_group(log, group, None, round, txn, legacy_delete_horizon_ms, stats, check_done)

    def _copy_group(self, log: Log, group: Sequence[LogSegment], dest: LogSegment | None, round: CleaningRound,
                    txn: CleanedTransactionMetadata, legacy_delete_horizon_ms: int, stats: CleanerStats,
                    check_done: CheckDone) -> None:
        """Kafka's ``cleanSegments`` loop: each source segment's aborted transactions (up to where
        the next segment starts), then its batches through :meth:`_clean_into`."""
        for segment in group:
            following = log.segment_after(segment)
            upper = following.base_offset if following is not None else segment.read_next_offset()
            txn.add_aborted(log.collect_aborted_transactions(segment.base_offset, upper))
            retain_legacy = segment.last_modified_ms > legacy_delete_horizon_ms
            self._clean_into(log, segment, dest, round, txn, retain_legacy, stats, check_done)

    def _clean_into(self, log: Log, source: LogSegment, dest: LogSegment | None, round: CleaningRound,
                    txn: CleanedTransactionMetadata, retain_legacy: bool, stats: CleanerStats,
                    check_done: CheckDone) -> None:
        copy_segment(source.log.read, source.size, source.log.path, dest, round, txn, retain_legacy, stats,
                     read_size=max(self._read_size, MIN_COPY_READ), max_read_size=self._max_buffer(log),
                     check=lambda: check_done(log.topic_partition), throttle=self._throttle)


# --- the copy and the sealing, shared by every engine (same code, same bytes) ------------------

def copy_segment(read: Callable[[int, int], bytes], size: int, path: Path, dest: LogSegment | None,
                 round: CleaningRound, txn: CleanedTransactionMetadata, retain_legacy: bool, stats: CleanerStats,
                 *, read_size: int, max_read_size: int, check: Callable[[], None] = lambda: None,
                 throttle: Callable[[int], None] = lambda size: None) -> None:
    """Kafka's ``cleanInto``: what survives of the ``size`` bytes of one source segment
    (``read(position, n)`` reads them; ``path`` names it in errors) appended to ``dest`` (None:
    count only), in reads of ``read_size`` bytes grown up to ``max_read_size`` for a larger batch.
    ``check`` runs before every read (it raises to abort), ``throttle`` gets every size read and
    written. The reads decide the appends, so engines sharing this loop write the same bytes."""
    position = 0
    while position < size:
        check()
        data = read(position, min(read_size, size - position))
        throttle(len(data))
        at_end = position + len(data) >= size
        try:
            chunk = filter_chunk(data, 0, len(data), round, txn, retain_legacy, at_end_of_file=at_end)
        except CorruptRecordError as e:
            raise _in_file(e, path, position) from e
        stats.read_messages(chunk.messages_read, chunk.bytes_read)
        stats.recopy_messages(chunk.messages_retained, chunk.bytes_retained)
        stats.invalid_messages_read += chunk.invalid_messages
        position += chunk.bytes_read
        if chunk.output and dest is not None:
            dest.append(chunk.largest_offset, chunk.max_timestamp, chunk.offset_of_max_timestamp,
                        tuple(chunk.output))
            throttle(chunk.bytes_retained)
        if chunk.bytes_read == 0:
            read_size = _grown(read_size, max_read_size, data, path, position, size)


def create_cleaned_segment(dir: Path, base_offset: int, config: SegmentConfig, clock: Clock) -> LogSegment:
    """A new segment at ``base_offset`` in ``dir`` whose files end in ``.cleaned`` (stale ones
    removed first)."""
    for name in (files.log_file, files.offset_index_file, files.time_index_file, files.transaction_index_file):
        fileops.unlink(name(dir, base_offset, files.CLEANED_SUFFIX), missing_ok=True)
    return LogSegment.open(dir, base_offset, config, clock, file_suffix=files.CLEANED_SUFFIX)


def seal_cleaned_segment(cleaned: LogSegment, last_modified_ms: int) -> None:
    """Finish a cleaned segment: indexes rebuilt (entries as appends of single batches would place
    them: the copy appends far more than Kafka's 256 KiB at a time; this also creates the index
    files), the final time-index entry, trimmed, flushed, and the replaced segments' last
    modification time."""
    cleaned.rebuild_indexes()
    cleaned.on_become_inactive_segment()
    cleaned.flush()
    cleaned.set_last_modified_ms(last_modified_ms)


def _in_file(error: CorruptRecordError, path: Path, read_position: int) -> CorruptRecordError:
    """``error`` from a chunk read at ``read_position``, re-stated with the segment's file and the
    position in it."""
    return CorruptRecordError(error.message, path=path,
                              position=read_position + (getattr(error, "position", 0) or 0),
                              offset=getattr(error, "offset", None))


def _grown(read_size: int, max_size: int, data: bytes, path: Path, position: int, size: int) -> int:
    """Kafka's ``growBuffersOrFail``: no complete batch fit the buffer; double it up to the max,
    or fail when the next batch claims more bytes than the segment has left."""
    if read_size < max_size:
        return min(read_size * 2, max_size)
    if len(data) < LOG_OVERHEAD:
        raise CorruptRecordError("cannot read the next batch's size", path=path, position=position)
    next_size = declared_size(data)
    left = size - position
    if next_size <= LOG_OVERHEAD:
        raise CorruptRecordError(f"invalid batch size {next_size}", path=path, position=position)
    if next_size > left:
        raise CorruptRecordError(f"log segment may be corrupt: batch size {next_size} > {left} bytes left in segment",
                                 path=path, position=position)
    if next_size <= read_size:
        raise CorruptRecordError(f"batch of {next_size} bytes fits the {read_size}-byte buffer but does not parse",
                                 path=path, position=position)
    return next_size


def _discard(segment: LogSegment) -> None:
    try:
        segment.delete_files()
    except OSError:
        logger.warning("cannot remove %s", segment, exc_info=True)


# --- grouping -------------------------------------------------------------------------------

def group_segments_by_size(segments: Sequence[LogSegment], max_size: int, max_index_size: int,
                           first_uncleanable_offset: int) -> list[list[LogSegment]]:
    """Kafka's ``groupSegmentsBySize`` (§3.7.5): consecutive segments whose total ``.log`` size
    fits ``segment.bytes``, whose index sizes fit ``segment.index.bytes``, and whose offsets stay
    within Int.MAX of the group's base (checked on the estimated last offset, skipped for empty
    segments so cleaned-out ranges still merge)."""
    groups: list[list[LogSegment]] = []
    i = 0
    while i < len(segments):
        first = segments[i]
        group = [first]
        log_size, index_size, time_index_size = first.size, _index_bytes(first), _time_index_bytes(first)
        i += 1
        while i < len(segments):
            seg = segments[i]
            estimated_last = segments[i + 1].base_offset - 1 if i + 1 < len(segments) else first_uncleanable_offset - 1
            if (log_size + seg.size <= max_size
                    and index_size + _index_bytes(seg) <= max_index_size
                    and time_index_size + _time_index_bytes(seg) <= max_index_size
                    and (seg.size == 0 or estimated_last - first.base_offset <= INT32_MAX)):
                group.append(seg)
                log_size += seg.size
                index_size += _index_bytes(seg)
                time_index_size += _time_index_bytes(seg)
                i += 1
            else:
                break
        groups.append(group)
    return groups


def split_groups_at(groups: Sequence[list[LogSegment]], highest_remote_offset: int) -> list[list[LogSegment]]:
    """``groups`` of a tiered log, each split where its segments pass the highest remote offset:
    a group never mixes segments the remote tier holds with ones it does not (else the copy
    pass would copy a merged segment overlapping remote ones)."""
    out: list[list[LogSegment]] = []
    for group in groups:
        held = [s for s in group if s.base_offset <= highest_remote_offset]
        rest = [s for s in group if s.base_offset > highest_remote_offset]
        out.extend(g for g in (held, rest) if g)
    return out


def _index_bytes(segment: LogSegment) -> int:
    return segment.offset_index.entries * 8


def _time_index_bytes(segment: LogSegment) -> int:
    return segment.time_index.entries * 12


# --- the owner ------------------------------------------------------------------------------

class Cleaner:
    """Cleans one chosen log at a time (one per cleaner thread; not thread-safe itself)."""

    def __init__(self, engine: CleaningEngine, clock: Clock, *, check_done: CheckDone = _never_aborted,
                 on_pass_done: Callable[[TopicPartition, int], None] | None = None,
                 producer_id_expiration_ms: int = 86_400_000, name: str = "cleaner-0",
                 all_passes: bool = True, remote: TieredCleaning | None = None) -> None:
        self.engine = engine
        self._remote = remote
        self._clock = clock
        self._check_done = check_done
        self._on_pass_done = on_pass_done
        self._expiration_ms = producer_id_expiration_ms
        self.name = name
        self._all_passes = all_passes

    def clean(self, to_clean: LogToCleanLike) -> tuple[int, CleanerStats]:
        """Clean [first dirty, first uncleanable) of the chosen log, in as many offset-map passes as
        it takes; returns the new first dirty offset (for the cleaner checkpoint) and the stats."""
        tp = to_clean.topic_partition
        start, bound = to_clean.first_dirty_offset, to_clean.first_uncleanable_offset
        end, total = self.clean_pass(to_clean.log, tp, start, bound)
        while self._all_passes and end < bound:
            if self._on_pass_done is not None:
                self._on_pass_done(tp, end)
            next_end, stats = self.clean_pass(to_clean.log, tp, end, bound)
            total.add(stats)
            end = next_end
        return end, total

    def measure_pass(self, log: Log, tp: TopicPartition, first_dirty: int, first_uncleanable: int) -> CleanerStats:
        """What :meth:`clean_pass` would read and keep, without writing (``clean run --dry-run``)."""
        _, stats = self.clean_pass(log, tp, first_dirty, first_uncleanable, dry_run=True)
        return stats

    def clean_pass(self, log: Log, tp: TopicPartition, first_dirty: int, first_uncleanable: int,
                   current_time: int | None = None, *, dry_run: bool = False) -> tuple[int, CleanerStats]:
        """One pass (Kafka's ``doClean``): map from ``first_dirty``, then rewrite every segment
        below the map's end, from the start of the log."""
        now = self._clock.milliseconds() if current_time is None else current_time
        tier = None if dry_run or self._remote is None else self._remote.open_pass(tp, log)
        try:
            return self._clean_pass(log, tp, first_dirty, first_uncleanable, now, tier, dry_run)
        finally:
            if tier is not None:
                tier.close()

    def _engine_for(self, tier: TieredPassLike | None) -> CleaningEngine:
        """The engine of a pass: for a tiered log, a batch engine's ``for_tiered_pass(tier)``
        when it has one (the Spark engine: executors read and write the store), else the pass
        runs in process with the configured engine's buffers."""
        if tier is None or not hasattr(self.engine, "clean_groups"):
            return self.engine
        tiered = getattr(self.engine, "for_tiered_pass", None)
        return tiered(tier) if tiered is not None else InProcessEngine(getattr(self.engine, "buffers"))

    def _clean_pass(self, log: Log, tp: TopicPartition, first_dirty: int, first_uncleanable: int, now: int,
                    tier: TieredPassLike | None, dry_run: bool) -> tuple[int, CleanerStats]:
        stats = CleanerStats(self._clock, passes=1)
        engine = self._engine_for(tier)
        source = log if tier is None else tier.map_source(first_dirty)
        lookup = engine.build_offset_map(source, first_dirty, first_uncleanable, stats,  # type: ignore[arg-type]
                                         self._check_done)
        end_offset = lookup.latest_offset + 1
        if end_offset <= first_dirty:
            raise LogCleaningError(
                f"the offset map ({getattr(lookup, 'max_entries', '?')} keys) cannot hold the distinct keys of the "
                f"batch at offset {first_dirty}; raise log.cleaner.dedupe.buffer.size or lower log.cleaner.threads",
                topic_partition=str(tp),
            )
        stats.index_done()
        before_dirty = source.segments_between(0, first_dirty)
        legacy_horizon = before_dirty[-1].last_modified_ms - log.config.delete_retention_ms if before_dirty else 0
        round = CleaningRound(
            offset_map=lookup, current_time=now, delete_retention_ms=log.config.delete_retention_ms,
            upper_bound_offset=first_uncleanable,
            producers=producer_last_batches(log, now, self._expiration_ms),
        )
        txn = CleanedTransactionMetadata([], lambda _: None)
        groups = group_segments_by_size(log.segments_between(0, end_offset), log.config.segment_bytes,
                                        log.config.segment_index_bytes, first_uncleanable)
        if tier is not None:
            tier.clean_remote(engine, round, legacy_horizon, stats, end_offset, self._check_done)
        if log.config.remote_storage_enable:
            groups = split_groups_at(groups, log.highest_offset_in_remote_storage if tier is None else tier.highest_remote)
        if hasattr(engine, "clean_groups"):
            self._clean_all(log, tp, groups, round, txn, legacy_horizon, stats, dry_run)
            groups = []
        for group in groups:
            if dry_run:
                engine.measure_group(log, group, round, txn, legacy_horizon, stats, self._check_done)
                continue
            cleaned = engine.clean_group(log, group, round, txn, legacy_horizon, stats, self._check_done)
            try:
                self._check_done(tp)
            except BaseException:
                _discard(cleaned)
                raise
            log.replace_segments([cleaned], group)
        stats.buffer_utilization = float(getattr(lookup, "utilization", 0.0))
        stats.all_done()
        logger.info("%s", stats.summary(f"{self.name} {tp}"))
        return end_offset, stats

    def _clean_all(self, log: Log, tp: TopicPartition, groups: Sequence[Sequence[LogSegment]],
                   round: CleaningRound, txn: CleanedTransactionMetadata, legacy_horizon: int,
                   stats: CleanerStats, dry_run: bool) -> None:
        """A :class:`BatchCleaningEngine`'s pass: every group cleaned at once, then swapped in
        group by group with the same abort check before each swap as the one-group path."""
        engine: BatchCleaningEngine = self.engine  # type: ignore[assignment]
        cleaned = engine.clean_groups(log, groups, round, txn, legacy_horizon, stats, self._check_done,
                                      dry_run=dry_run)
        untouched = 0  # cleaned[untouched:] are neither swapped nor half swapped
        try:
            for group, segment in zip(groups, cleaned):
                self._check_done(tp)
                untouched += 1  # from here on the loader completes or rolls back this swap
                log.replace_segments([segment], group)
        except BaseException:
            for left in cleaned[untouched:]:
                _discard(left)
            raise
