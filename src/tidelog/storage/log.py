"""Log: one partition's log — its offsets, leader epochs, producer state and append rules, over its segments.

Kafka's ``UnifiedLog`` without the remote tier. The segments as files (roll, read, flush, truncate,
swap, delete, close) are :class:`~tidelog.storage.local_log.LocalLog`'s, Kafka's ``LocalLog``; the
appends are :class:`~tidelog.storage.log_append.AppendPath`'s, a base class of this one. The offsets
(kafka-storage.md §3.5)::

    log start offset  <=  high watermark  <=  log end offset
          first readable     last offset+1 consumers      next offset to assign
                             may read (reads, retention
                             and DeleteRecords stop here)
    recovery point: everything below it is fsynced; recovery after a crash starts there.

Thread-safety: every mutation takes the log's one re-entrant lock (:attr:`Log.lock`, shared with
its LocalLog). Reads take a consistent snapshot of the segment list and bound under the lock, then
read files without it; sealed segments never change in place (cleaning swaps whole segments), and
the active segment is read only up to a bound that was complete when taken.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from pathlib import Path

from tidelog.clock import SYSTEM_CLOCK, Clock
from tidelog.errors import OffsetMovedToTieredStorageError, OffsetOutOfRangeError, PolicyViolationError, StorageError
from tidelog.records.varint import INT64_MAX
from tidelog.scheduler import Scheduler, shared_scheduler
from tidelog.storage import fileops, files
from tidelog.storage.checkpoints import LEADER_EPOCH_CHECKPOINT_FILE, LeaderEpochCache, LeaderEpochCheckpointFile
from tidelog.storage.config import LogConfig
from tidelog.storage.fetch_info import FetchDataInfo, FetchIsolation, LogOffsetMetadata, TimestampAndOffset
from tidelog.storage.local_log import LocalLog
from tidelog.storage.log_append import AppendPath
from tidelog.storage.producer_snapshot import fsync_snapshot
from tidelog.storage.producer_state import (
    DEFAULT_PRODUCER_ID_EXPIRATION_CHECK_INTERVAL_MS,
    DEFAULT_PRODUCER_ID_EXPIRATION_MS,
    ProducerStateManager,
    rebuild_producer_state,
)
from tidelog.storage.segment import LogSegment
from tidelog.storage.txn_index import AbortedTxn
from tidelog.storage.txn_rebuild import LogState, TxnIndexCheck
from tidelog.topic_partition import TopicPartition

log = logging.getLogger(__name__)

EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4
LATEST_TIERED_TIMESTAMP = -5


class Log(AppendPath):
    """One partition's log: offsets, leader epochs, producer state and the appends (:class:`AppendPath`)
    over its :class:`LocalLog`. Shared by every thread of the process; each public method says
    which lock it takes (all take the one log lock, :attr:`lock`)."""

    def __init__(
        self,
        local: LocalLog,
        *,
        log_start_offset: int,
        next_offset: int,
        high_watermark: int | None,
        leader_epoch_cache: LeaderEpochCache,
        producer_state: ProducerStateManager,
        had_clean_shutdown: bool = True,
        producer_id_expiration_check_interval_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_CHECK_INTERVAL_MS,
    ) -> None:
        # The LocalLog's objects, held here too: the append path reads them on this instance.
        self._local = local
        self._segments = local.segments
        self._lock = local.lock
        self._clock = local.clock
        self._system_clock = local.clock is SYSTEM_CLOCK  # the append kernel reads that one itself
        self.topic_partition = local.topic_partition
        self._log_start_offset = log_start_offset
        self._log_end_offset = next_offset
        self.leader_epoch_cache = leader_epoch_cache
        self.producer_state = producer_state
        self.had_clean_shutdown = had_clean_shutdown
        self._txn_index_check = TxnIndexCheck(self.topic_partition, local.dir, self._lock, self._txn_log_state)
        self._high_watermark = self._clamp_hw(next_offset if high_watermark is None else high_watermark)
        self._closed = False
        # Kafka's highestOffsetInRemoteStorage: the last offset the remote tier holds in a finished
        # segment, -1 until the remote tier says (kept in memory only, as in Kafka: after a restart
        # no local segment of a tiered log is deleted until the remote tier has been asked again).
        self._highest_remote_offset = -1
        self._take_config(local.config)
        self._producer_state_expiry(producer_id_expiration_check_interval_ms)

    # --- opening ------------------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        dir: Path,
        config: LogConfig | None = None,
        *,
        log_start_offset: int = 0,
        recovery_point: int = 0,
        had_clean_shutdown: bool = False,
        high_watermark: int | None = None,
        clock: Clock = SYSTEM_CLOCK,
        scheduler: Scheduler | None = None,
        topic_partition: TopicPartition | None = None,
        recovered_elsewhere: bool = False,
        producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
        producer_id_expiration_check_interval_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_CHECK_INTERVAL_MS,
    ) -> Log:
        """Open (creating if needed) the partition dir ``dir`` and load it (see :mod:`.loader`).

        ``log_start_offset`` and ``recovery_point`` are the checkpointed values (0 when unknown);
        ``had_clean_shutdown`` skips recovery. ``high_watermark`` defaults to the log end offset:
        tidelog is a single replica, and a sole leader's high watermark reaches its log end as soon
        as it leads, so nothing that was written becomes unreadable after a restart.
        ``recovered_elsewhere`` (with ``had_clean_shutdown=False``): another process has just
        recovered these files (parallel recovery); recovery is skipped, the recovery point stays
        at the checkpoint. Producer state is loaded from the latest ``.snapshot`` and the batches
        after it (:func:`~tidelog.storage.producer_state.rebuild_producer_state`); producers expire
        after ``producer_id_expiration_ms``, checked every ``producer_id_expiration_check_interval_ms``.
        Not shared until it returns.
        """
        config = config or LogConfig.defaults()
        tp = topic_partition or files.parse_topic_partition_name(dir.name)
        try:
            fileops.mkdir(dir, parents=True, exist_ok=True)
        except OSError as e:
            raise StorageError("cannot create partition dir", path=dir, operation="mkdir") from e
        epoch_cache = LeaderEpochCache(LeaderEpochCheckpointFile(dir / LEADER_EPOCH_CHECKPOINT_FILE))
        local, loaded = LocalLog.load(
            dir, config, clock=clock, scheduler=scheduler or shared_scheduler(), topic_partition=tp,
            log_start_offset=log_start_offset, recovery_point=recovery_point, had_clean_shutdown=had_clean_shutdown,
            recovered_elsewhere=recovered_elsewhere, on_segment_recovered=epoch_cache.assign_recovered,
        )
        epoch_cache.truncate_from_end(loaded.next_offset)
        epoch_cache.truncate_from_start(loaded.log_start_offset)
        producer_state = ProducerStateManager.recovered(
            dir, tp, loaded.segments.snapshot(), loaded.log_start_offset, loaded.next_offset, clock.milliseconds(),
            producer_id_expiration_ms=producer_id_expiration_ms, dir_names=loaded.dir_names,
        )
        opened = cls(
            local, log_start_offset=loaded.log_start_offset, next_offset=loaded.next_offset,
            high_watermark=high_watermark, leader_epoch_cache=epoch_cache, producer_state=producer_state,
            had_clean_shutdown=loaded.had_clean_shutdown,
            producer_id_expiration_check_interval_ms=producer_id_expiration_check_interval_ms,
        )
        try:
            opened._txn_index_check.check_recovered(loaded.segments.snapshot())
        except BaseException:
            opened.close_handlers()  # its files and its scheduled producer-expiry task go with it
            raise
        return opened

    # --- offsets and properties ---------------------------------------------------------------

    @property
    def dir(self) -> Path:
        return self._local.dir

    @property
    def clock(self) -> Clock:
        return self._clock

    @property
    def config(self) -> LogConfig:
        return self._local.config

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self._log_end_offset

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @property
    def local_log_start_offset(self) -> int:
        """Kafka's ``localLogStartOffset``: the first offset held on local disk, never below the
        log start offset. Below it (and at or above the log start offset) only the remote tier
        holds records; for a log that is not tiered it equals the log start offset once
        retention has run. Takes no lock."""
        first = self._segments.first
        return self._log_start_offset if first is None else max(self._log_start_offset, first.base_offset)

    @property
    def highest_offset_in_remote_storage(self) -> int:
        """The last offset of a finished remote segment, -1 when none is known. Takes no lock."""
        return self._highest_remote_offset

    def update_highest_offset_in_remote_storage(self, offset: int) -> None:
        """What the remote tier reports it holds (after a copy, or when asked after a restart);
        only moves forward. Thread-safe: takes the log's lock."""
        with self._lock:
            if offset > self._highest_remote_offset:
                self._highest_remote_offset = offset

    @property
    def recovery_point(self) -> int:
        return self._local.recovery_point

    @property
    def last_flush_time(self) -> int:
        return self._local.last_flush_ms

    @property
    def active_segment(self) -> LogSegment:
        return self._local.active_segment

    @property
    def segments(self) -> list[LogSegment]:
        return self._segments.snapshot()

    @property
    def num_segments(self) -> int:
        return len(self._segments)

    @property
    def size(self) -> int:
        """Bytes in all segments, active included (what ``retention.bytes`` limits). Takes no lock:
        sums a snapshot of the segment list."""
        return self._segments.size_in_bytes()

    def update_config(self, config: LogConfig) -> None:
        """Thread-safe: takes the log's lock."""
        with self._lock:
            self._local.config = config
            self._take_config(config)

    @property
    def lock(self) -> threading.RLock:
        """The log's (re-entrant) lock, for upper layers that must decide and act on one consistent
        state: retention plans and deletes a prefix under it, so no append, roll or truncation
        slips in between; the server's event loop reads under it when it is free (it must never
        wait for it)."""
        return self._lock

    # --- high watermark and log start offset --------------------------------------------------

    def _clamp_hw(self, offset: int) -> int:
        return min(max(offset, self._log_start_offset), self._log_end_offset)

    def update_high_watermark(self, offset: int) -> int:
        """Set the high watermark, clamped to [log start, log end]; returns the value set.
        Thread-safe: takes the log's lock."""
        with self._lock:
            self._high_watermark = self._clamp_hw(offset)
            return self._high_watermark

    def maybe_increment_high_watermark(self, offset: int) -> int:
        """Move the high watermark forward only (a leader's rule). Thread-safe: takes the log's lock."""
        with self._lock:
            if offset > self._high_watermark:
                self._high_watermark = self._clamp_hw(offset)
            return self._high_watermark

    def maybe_increment_log_start_offset(self, new_offset: int, reason: str = "") -> bool:
        """Raise the log start offset; never past the high watermark. No file is touched:
        segments wholly below it go at the next retention pass. Thread-safe: takes the log's lock."""
        with self._lock:
            if new_offset > self._high_watermark:
                raise OffsetOutOfRangeError(
                    f"cannot move the log start offset to {new_offset}: it is past the high watermark "
                    f"{self._high_watermark}", topic_partition=str(self.topic_partition),
                )
            if new_offset <= self._log_start_offset:
                return False
            log.info("%s: log start offset %d -> %d (%s)", self.topic_partition, self._log_start_offset, new_offset, reason)
            self._log_start_offset = new_offset
            self.leader_epoch_cache.truncate_from_start(new_offset)
            self.producer_state.on_log_start_offset_incremented(new_offset)
            return True

    def delete_records(self, offset: int) -> int:
        """Kafka's DeleteRecords: move the log start offset to ``offset`` (-1 = the high watermark).

        Refused with :class:`PolicyViolationError` unless ``cleanup.policy`` contains ``delete``.
        Returns the log start offset after the call. Thread-safe: takes the log's lock.
        """
        if not self.config.delete:
            raise PolicyViolationError(
                "records can only be deleted from topics whose cleanup.policy includes 'delete'",
                topic_partition=str(self.topic_partition), cleanup_policy=",".join(sorted(self.config.cleanup_policy)),
            )
        with self._lock:
            target = self._high_watermark if offset == -1 else offset
            if target < 0:
                raise OffsetOutOfRangeError(f"invalid delete-records offset {offset}", topic_partition=str(self.topic_partition))
            self.maybe_increment_log_start_offset(target, "delete records")
            return self._log_start_offset

    # --- roll ---------------------------------------------------------------------------------

    def roll(self, expected_next_offset: int | None = None) -> LogSegment:
        """Seal the active segment and open a new one at ``max(expected_next_offset, log end)``
        (:meth:`LocalLog.roll`), with Kafka's producer snapshot at its base offset. The sealed
        segments are flushed in the background (that is what normally advances the recovery
        point). Thread-safe: takes the log's lock."""
        with self._lock:
            new_base = max(expected_next_offset or 0, self._log_end_offset)
            segment = self._local.roll(new_base)
            self.producer_state.update_map_end_offset(new_base)
            snapshot = self.producer_state.take_snapshot(sync=False)  # fsynced with the flush
            self._local.scheduler.schedule_once(f"flush-{self.topic_partition}",
                                                lambda: self._flush_after_roll(new_base, snapshot))
            return segment

    def _flush_after_roll(self, new_base: int, snapshot: Path | None) -> None:
        if snapshot is not None:
            fsync_snapshot(snapshot)
        self.flush_upto(new_base)

    # --- read ---------------------------------------------------------------------------------

    def read(
        self, start_offset: int, max_length: int,
        isolation: FetchIsolation = FetchIsolation.HIGH_WATERMARK, min_one_message: bool = True,
        as_slice: bool = False,
    ) -> FetchDataInfo:
        """Raw batches from ``start_offset``, at most ``max_length`` bytes, never past the bound of
        ``isolation``. Raises :class:`OffsetOutOfRangeError` below the log start or past the log end.
        Offset gaps (compaction) are skipped: the read continues in the next segment. ``as_slice``:
        the records as a :class:`~tidelog.storage.file_slice.FileSlice` (the caller closes it)
        rather than bytes (:meth:`LogSegment.read`). Thread-safe: takes the log's lock for the
        bound, reads the files without it."""
        with self._lock:
            self._check_in_range(start_offset)
            end = self._log_end_offset
            bound = self._local.bound(self._isolation_bound(isolation), end)
            segment = self._segments.floor(start_offset)
            if segment is None:  # below the first local segment: only a tiered log has records there
                self._check_local(start_offset)
        if start_offset >= bound.offset:
            return FetchDataInfo(LogOffsetMetadata(start_offset), b"")
        info = self._local.read_from(segment, start_offset, max_length, bound, min_one_message, as_slice)
        return info if info is not None else FetchDataInfo(LogOffsetMetadata(self._log_end_offset), b"")

    def _check_local(self, offset: int) -> None:
        local_start = self.local_log_start_offset
        if offset < local_start and self._local.config.remote_storage_enable:
            raise OffsetMovedToTieredStorageError(
                f"offset {offset} is held only by the remote tier (local log starts at {local_start})",
                topic_partition=str(self.topic_partition),
            )

    def _check_in_range(self, offset: int) -> None:
        if offset < self._log_start_offset or offset > self._log_end_offset:
            raise OffsetOutOfRangeError(
                f"offset {offset} is out of range [{self._log_start_offset}, {self._log_end_offset}]",
                topic_partition=str(self.topic_partition),
            )

    # --- ListOffsets --------------------------------------------------------------------------

    def fetch_offset_by_timestamp(
        self, timestamp: int, isolation: FetchIsolation = FetchIsolation.HIGH_WATERMARK
    ) -> TimestampAndOffset | None:
        """Kafka's ListOffsets (§3.4): -2 earliest, -1 latest (the high watermark for consumers, the
        last stable offset for ``TXN_COMMITTED``, the log end for ``LOG_END``), -3 the record with
        the max timestamp (local segments, as in Kafka), -4 earliest local (the local log start
        offset of a tiered log, else as -2), -5 the highest offset in the remote tier (-1 when none
        or not tiered), else the first local record with a timestamp >= ``timestamp``. None when
        nothing matches, and under ``TXN_COMMITTED`` when the record found (-3, by timestamp) lies
        at or past the last stable offset (Kafka's ``fetchOffsetForTimestamp``). Thread-safe: takes
        no lock (the offsets read once, a snapshot of the segments; the LSO's lock with open transactions)."""
        tiered = self._local.config.remote_storage_enable
        if timestamp == EARLIEST_LOCAL_TIMESTAMP and tiered:
            local_start = self.local_log_start_offset
            return TimestampAndOffset(-1, local_start, self.leader_epoch_cache.epoch_for_offset(local_start))
        if timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
            return TimestampAndOffset(-1, self._log_start_offset, self._earliest_epoch())
        if timestamp == LATEST_TIMESTAMP:
            return TimestampAndOffset(-1, self._isolation_bound(isolation), self.leader_epoch_cache.latest_epoch)
        if timestamp == LATEST_TIERED_TIMESTAMP:
            highest = self._highest_remote_offset if tiered else -1
            return TimestampAndOffset(-1, highest, self.leader_epoch_cache.epoch_for_offset(highest) if highest >= 0 else None)
        if timestamp < 0 and timestamp != MAX_TIMESTAMP:
            raise OffsetOutOfRangeError(f"invalid ListOffsets timestamp {timestamp}", topic_partition=str(self.topic_partition))
        found = self._local.max_timestamp_offset() if timestamp == MAX_TIMESTAMP \
            else self._local.offset_for_timestamp(timestamp, self._log_start_offset)
        if found is not None and isolation is FetchIsolation.TXN_COMMITTED and found.offset >= self.last_stable_offset:
            return None
        return found

    def _earliest_epoch(self) -> int | None:
        entry = self.leader_epoch_cache.earliest_entry
        if entry is not None and entry.start_offset <= self._log_start_offset:
            return entry.epoch
        return None

    # --- flush --------------------------------------------------------------------------------

    def flush(self, include_active: bool = True) -> None:
        """fsync every segment from the recovery point to the log end (the active segment too,
        even when empty, if ``include_active``) and move the recovery point to the log end.
        Thread-safe: takes the log's lock before and after the fsyncs, not during them."""
        end = self._log_end_offset
        self._flush(end + 1 if include_active else end, end)

    def flush_upto(self, offset: int) -> None:
        """fsync segments holding offsets below ``offset``; the recovery point becomes ``offset``.
        Thread-safe, as :meth:`flush`."""
        self._flush(offset, offset)

    def _flush(self, flush_offset: int, new_recovery_point: int) -> None:
        local = self._local
        with self._lock:
            if self._closed or flush_offset <= local.recovery_point:
                return
            old = local.recovery_point
            to_flush = self._segments.values_between(old, flush_offset)
        local.flush_segments(to_flush, old)
        with self._lock:
            local.mark_flushed(new_recovery_point, self._log_end_offset)
            self._sync_flush_due()

    # --- truncation and deletion --------------------------------------------------------------

    def truncate_to(self, target_offset: int) -> bool:
        """Remove every record at or after ``target_offset``; False when nothing was there.
        Thread-safe: takes the log's lock."""
        if target_offset < 0:
            raise OffsetOutOfRangeError(f"cannot truncate to negative offset {target_offset}")
        with self._lock:
            if target_offset >= self._log_end_offset:
                return False
            first = self._segments.first
            if first is None or first.base_offset > target_offset:
                self.truncate_fully_and_start_at(target_offset)
                return True
            self._local.truncate_to(target_offset, self.producer_state.mark_snapshot_for_deletion)
            rebuild_producer_state(self.producer_state, self._segments.snapshot(), min(self._log_start_offset, target_offset),
                                   target_offset, self._clock.milliseconds())
            self._log_end_offset = target_offset
            self._log_start_offset = min(self._log_start_offset, target_offset)
            self._sync_flush_due()
            self._high_watermark = self._clamp_hw(self._high_watermark)
            self.leader_epoch_cache.truncate_from_end(target_offset)
            self._txn_index_check.truncated()
            return True

    def truncate_fully_and_start_at(self, new_offset: int) -> None:
        """Delete every segment and start empty at ``new_offset`` (all offsets become ``new_offset``).
        Thread-safe: takes the log's lock."""
        with self._lock:
            self.delete_segments(self._segments.snapshot(), "full truncation")
            self.producer_state.truncate_fully_and_start_at(new_offset)
            self._local.start_at(new_offset)
            self._log_start_offset = self._log_end_offset = self._high_watermark = new_offset
            self._sync_flush_due()
            self.leader_epoch_cache.clear()
            self._txn_index_check.truncated()
            # Kafka's clearAndFlush: a stale checkpoint would, after a crash, be cut at the new log
            # start and claim that its last epoch starts there.
            self.leader_epoch_cache.flush()

    def delete_oldest_segments(self, segments: Sequence[LogSegment], reason: str, *, move_log_start: bool = True) -> int:
        """Kafka's ``deleteSegments`` for a prefix retention chose: ``segments`` must be the oldest
        segments, in order, each ending at or below the high watermark. When they are every
        segment, the log rolls first so an (empty) active segment remains. The log start offset
        moves to the base offset of the first segment kept, unless ``move_log_start`` is False
        (a tiered log's local retention: the records stay readable from the remote tier, and
        only the local log start offset moves). Returns how many were deleted.
        Thread-safe: takes the log's lock."""
        with self._lock:
            if not segments:
                return 0
            upper = self._local.end_of_oldest(segments, self._log_end_offset)
            if upper > self._high_watermark:
                raise StorageError(
                    f"cannot delete segments ending at offset {upper}: past the high watermark {self._high_watermark}",
                    path=self.dir,
                )
            last = segments[-1]
            doomed = list(segments)
            if len(doomed) == len(self._segments):
                self.roll()
                if self.active_segment.base_offset == last.base_offset:  # the empty active one was recreated
                    doomed.pop()
            kept = self._segments.higher(last.base_offset)
            if kept is not None and move_log_start:
                self.maybe_increment_log_start_offset(kept.base_offset, reason)
            self.delete_segments(doomed, reason)
            return len(doomed)

    def segments_between(self, from_offset: int, to_offset: int) -> list[LogSegment]:
        """Segments that may hold offsets in [from, to) (Kafka's ``logSegments(from, to)``).
        Thread-safe: takes the log's lock."""
        with self._lock:
            return self._segments.values_between(from_offset, to_offset)

    def segment_after(self, segment: LogSegment) -> LogSegment | None:
        """The segment following ``segment`` in the log (None for the active one). Thread-safe:
        takes the log's lock (a roll or deletion meanwhile would move the list under the search)."""
        with self._lock:
            return self._segments.higher(segment.base_offset)

    def collect_aborted_transactions(self, start_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
        """Aborted transactions overlapping [start, upper bound) from the segments' ``.txnindex``
        files, from the segment holding ``start`` on through the later ones (an abort is indexed
        in the segment of its marker, which may lie past the upper bound) until one says the
        search is complete (Kafka's ``collectAbortedTransactions``). Each segment's index is
        checked against its ``.log`` the first time it is asked (:class:`.TxnIndexCheck`).
        Thread-safe: takes the log's lock for the segment list, reads the indexes without it."""
        found: list[AbortedTxn] = []
        if upper_bound_offset <= start_offset:
            return found
        with self._lock:
            segments = self._segments.values_between(start_offset, INT64_MAX)
        for segment in segments:
            result = self._txn_index_check.checked(segment).collect_aborted_txns(start_offset, upper_bound_offset)
            found.extend(result.aborted_transactions)
            if result.is_complete:
                break
        return found

    def _txn_log_state(self) -> LogState:
        with self._lock:
            return LogState(self._segments.snapshot(), self._log_start_offset, self.producer_state.snapshot_offsets,
                            self._log_end_offset)

    def replace_segments(self, new_segments: Sequence[LogSegment], old_segments: Sequence[LogSegment]) -> None:
        """Swap cleaned segments in for the segments they replace, crash-safely
        (:meth:`LocalLog.replace_segments`). Thread-safe: takes the log's lock."""
        with self._lock:
            self._ensure_open()
            self._local.replace_segments(new_segments, old_segments, self.producer_state.mark_snapshot_for_deletion)

    def delete_segments(self, segments: list[LogSegment], reason: str) -> None:
        """Take segments out of the log, rename their files ``.deleted`` and unlink them after
        ``file.delete.delay.ms`` in the background (:meth:`LocalLog.delete_segments`), with their
        producer snapshots. Thread-safe: takes the log's lock."""
        with self._lock:
            self._local.delete_segments(segments, reason, self.producer_state.mark_snapshot_for_deletion)

    # --- closing ------------------------------------------------------------------------------

    def close(self, producer_snapshot: bool = True) -> None:
        """Close every segment: final time-index entries, trimmed indexes and ``.log`` files.
        With ``producer_snapshot`` (Kafka's close), first a producer snapshot at the log end, so
        the next open replays nothing; without it (a log being deleted, or whose dir failed:
        Kafka only closes its handles then), no new file is written for producer state.
        Thread-safe: takes the log's lock."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            try:
                if producer_snapshot:
                    self.producer_state.update_map_end_offset(self._log_end_offset)
                    self.producer_state.take_snapshot()
            finally:  # a failing snapshot write (a failing disk) still closes the segments
                self._local.close()
                self.leader_epoch_cache.flush()

    def close_handlers(self) -> None:
        """Kafka's ``closeHandlers``, for a log whose dir failed: mark it closed and release every
        segment's descriptors and maps, writing nothing (no final time-index entry, no trim of
        the ``.log``, no snapshot): on a full disk, a write into a sparse index page is a SIGBUS.
        The one change it makes is a truncation of the active ``.log`` to its data, best effort
        (:meth:`LocalLog.close_handlers`; the next recovery would cut the partial bytes of the
        append that failed; ``verify`` finds none meanwhile). Thread-safe: takes the log's lock."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._local.close_handlers()

    # --- producer id expiration ---------------------------------------------------------------

    def _producer_state_expiry(self, interval_ms: int) -> None:
        """Every ``interval_ms``, forget producers idle for ``producer.id.expiration.ms`` (Kafka's
        PeriodicProducerExpirationCheck). One task at a time, rescheduled until the log closes.
        A bound method, not a closure: a data dir of 10,000 logs keeps 10,000 of them queued."""
        self._expiry_interval_ms = interval_ms
        self._local.scheduler.schedule_once(f"producer-expiration-{self.topic_partition}", self._expire_producers,
                                            interval_ms)

    def _expire_producers(self) -> None:
        with self._lock:
            if self._closed:
                return
            self.producer_state.remove_expired_producers(self._clock.milliseconds())
        self._local.scheduler.schedule_once(f"producer-expiration-{self.topic_partition}", self._expire_producers,
                                            self._expiry_interval_ms)

    def __repr__(self) -> str:
        return (f"Log({self.topic_partition}, start={self._log_start_offset}, hw={self._high_watermark}, "
                f"end={self._log_end_offset}, segments={len(self._segments)})")


