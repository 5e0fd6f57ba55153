"""Log: one partition's log — ordered segments and the offsets that bound them.

Kafka splits this between ``UnifiedLog`` and ``LocalLog``; tidelog keeps one class because there
is no tiered storage. The offsets (kafka-storage.md §3.5)::

    log start offset  <=  high watermark  <=  log end offset
          first readable     last offset+1 consumers      next offset to assign
                             may read (reads, retention
                             and DeleteRecords stop here)
    recovery point: everything below it is fsynced; recovery after a crash starts there.

Thread-safety: every mutation takes ``self._lock``. Reads take a consistent snapshot of the
segment list and bound under the lock, then read files without it; sealed segments never change
in place (cleaning swaps whole segments), and the active segment is read only up to a bound
that was complete when taken.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tidelog.clock import SYSTEM_CLOCK, Clock
from tidelog.errors import (
    OffsetOutOfRangeError,
    PolicyViolationError,
    RecordBatchTooLargeError,
    StorageError,
    TidelogError,
    UnexpectedAppendOffsetError,
)
from tidelog.records import CompressionType, FileBatch
from tidelog.records.batch import increment_sequence, stored_crc_matches
from tidelog.records.layout import LOG_OVERHEAD, PATCHED_PREFIX, PATCHED_PREFIX_SIZE, PRODUCER_FIELDS, PRODUCER_ID_OFFSET
from tidelog.records.scan import CRC_IN_KERNEL_BELOW, PRODUCED_COMPRESSED, PRODUCED_IDEMPOTENT, PRODUCED_OK
from tidelog.records.varint import INT64_MAX
from tidelog.scheduler import Scheduler, shared_scheduler
from tidelog.storage import fileops, files
from tidelog.storage._append_kernel import (
    NOW_FROM_CLOCK,
    PRODUCED_INDEX_DUE,
    PRODUCED_SHORT_WRITE,
    PRODUCED_UNARMED,
    TAIL_PRODUCER_CHECKED,
)
from tidelog.storage.append_state import ProducedBatchAppend, crc_checked_batch_appender, produced_batch_appender
from tidelog.storage.atomic import fsync_dir
from tidelog.storage.append_info import NO_TIMESTAMP, AppendOrigin, LogAppendInfo
from tidelog.storage.checkpoints import LEADER_EPOCH_CHECKPOINT_FILE, LeaderEpochCache, LeaderEpochCheckpointFile
from tidelog.storage.config import LogConfig
from tidelog.storage.fetch_info import FetchDataInfo, FetchIsolation, LogOffsetMetadata, TimestampAndOffset
from tidelog.storage.loader import LoadParams, load_log
from tidelog.storage.producer_snapshot import fsync_snapshot
from tidelog.storage.producer_state import (
    DEFAULT_PRODUCER_ID_EXPIRATION_CHECK_INTERVAL_MS,
    DEFAULT_PRODUCER_ID_EXPIRATION_MS,
    BatchMetadata,
    ProducerStateManager,
    producer_batch,
    rebuild_producer_state,
)
from tidelog.storage.log_config import SegmentConfig
from tidelog.storage.roll import RollLimits, RollParams, should_roll
from tidelog.storage.segment import LogSegment
from tidelog.storage.segments import LogSegments
from tidelog.storage.txn_index import AbortedTxn
from tidelog.storage.txn_rebuild import LogState, TxnIndexCheck
from tidelog.storage.validator import (
    LeaderRules,
    ValidatedRecords,
    analyze_batches,
    assign_offsets,
    check_offsets_in_order,
    validate_produced_batch,
)
from tidelog.topic_partition import TopicPartition

if TYPE_CHECKING:
    import numpy as np

log = logging.getLogger(__name__)

EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4
LATEST_TIERED_TIMESTAMP = -5

_LONG_MAX = 2**63 - 1
_CLIENT = AppendOrigin.CLIENT
_UNCOMPRESSED = CompressionType.NONE
_FAULT_PLANS = fileops.PLANS  # non-empty while a fault plan is installed (fileops.active())
_new_tuple = tuple.__new__  # LogAppendInfo._make without its length check: the leader's common path builds one per append
_COPY_BELOW = 4096  # bytes: a smaller batch is written as one patched copy, a larger one as head + view


@dataclass(frozen=True, slots=True)
class _Bound:
    """An upper read bound with its segment and byte position (None position: unknown)."""

    offset: int
    segment_base: int
    position: int | None


class Log:
    def __init__(
        self,
        dir: Path,
        config: LogConfig,
        segments: LogSegments,
        *,
        log_start_offset: int,
        recovery_point: int,
        next_offset: int,
        high_watermark: int | None,
        clock: Clock,
        scheduler: Scheduler,
        topic_partition: TopicPartition,
        leader_epoch_cache: LeaderEpochCache,
        had_clean_shutdown: bool = True,
        producer_state: ProducerStateManager | None = None,
        producer_id_expiration_check_interval_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_CHECK_INTERVAL_MS,
    ) -> None:
        self._dir = dir
        self._config = config
        self._segments = segments
        self._log_start_offset = log_start_offset
        self._recovery_point = recovery_point
        self._log_end_offset = next_offset
        self._clock = clock
        self._system_clock = clock is SYSTEM_CLOCK  # the append kernel reads that one itself
        self._scheduler = scheduler
        self.topic_partition = topic_partition
        self.leader_epoch_cache = leader_epoch_cache
        self.had_clean_shutdown = had_clean_shutdown
        self._lock = threading.RLock()
        self._txn_index_check = TxnIndexCheck(topic_partition, dir, self._lock, self._txn_log_state)
        self._last_flush_ms = clock.milliseconds()
        self._high_watermark = self._clamp_hw(next_offset if high_watermark is None else high_watermark)
        self._hw_bound: _Bound | None = None  # the high watermark's position, kept until it moves
        self._closed = False
        # Segments renamed .deleted whose delayed unlink has not run: their handles stay open
        # meanwhile (a fetch may still be reading them, as in Kafka) and are released by close().
        self._retired: list[LogSegment] = []
        self._take_config(config)
        self.producer_state = producer_state or ProducerStateManager(dir, topic_partition)
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
        """
        config = config or LogConfig.defaults()
        tp = topic_partition or files.parse_topic_partition_name(dir.name)
        try:
            fileops.mkdir(dir, parents=True, exist_ok=True)
        except OSError as e:
            raise StorageError("cannot create partition dir", path=dir, operation="mkdir") from e
        epoch_cache = LeaderEpochCache(LeaderEpochCheckpointFile(dir / LEADER_EPOCH_CHECKPOINT_FILE))
        loaded = load_log(LoadParams(
            dir=dir, config=segment_config(config), clock=clock,
            log_start_offset_checkpoint=log_start_offset, recovery_point_checkpoint=recovery_point,
            had_clean_shutdown=had_clean_shutdown, draw_jitter=config.random_segment_jitter,
            recovered_elsewhere=recovered_elsewhere,
            on_segment_recovered=lambda epoch_starts: _assign_epochs(epoch_cache, epoch_starts),
        ))
        epoch_cache.truncate_from_end(loaded.next_offset)
        epoch_cache.truncate_from_start(loaded.log_start_offset)
        producer_state = ProducerStateManager(dir, tp, producer_id_expiration_ms=producer_id_expiration_ms,
                                              dir_names=loaded.dir_names)
        producer_state.remove_stray_snapshots(s.base_offset for s in loaded.segments)
        rebuild_producer_state(producer_state, loaded.segments.snapshot(), loaded.log_start_offset,
                               loaded.next_offset, clock.milliseconds())
        opened = cls(
            dir, config, loaded.segments,
            log_start_offset=loaded.log_start_offset, recovery_point=loaded.recovery_point,
            next_offset=loaded.next_offset, high_watermark=high_watermark, clock=clock,
            scheduler=scheduler or shared_scheduler(), topic_partition=tp,
            leader_epoch_cache=epoch_cache, had_clean_shutdown=loaded.had_clean_shutdown,
            producer_state=producer_state, producer_id_expiration_check_interval_ms=producer_id_expiration_check_interval_ms,
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
        return self._dir

    @property
    def clock(self) -> Clock:
        return self._clock

    @property
    def config(self) -> LogConfig:
        return self._config

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
    def last_stable_offset(self) -> int:
        """No open-transaction tracking yet: the LSO equals the high watermark."""
        return self._high_watermark

    @property
    def recovery_point(self) -> int:
        return self._recovery_point

    @property
    def last_flush_time(self) -> int:
        return self._last_flush_ms

    @property
    def active_segment(self) -> LogSegment:
        active = self._segments.last
        if active is None:
            raise StorageError("log has no segment", path=self._dir)
        return active

    @property
    def segments(self) -> list[LogSegment]:
        return self._segments.snapshot()

    @property
    def num_segments(self) -> int:
        return len(self._segments)

    @property
    def size(self) -> int:
        """Bytes in all segments, active included (what ``retention.bytes`` limits)."""
        return self._segments.size_in_bytes()

    def _new_segment(self, base_offset: int) -> LogSegment:
        return LogSegment.open(
            self._dir, base_offset, segment_config(self._config), self._clock,
            rolling_jitter_ms=self._config.random_segment_jitter(),
        )

    def update_config(self, config: LogConfig) -> None:
        with self._lock:
            self._config = config
            self._take_config(config)

    def _take_config(self, config: LogConfig) -> None:
        """What the leader's common append path reads of the config, taken once per config."""
        rules = self._leader_rules = LeaderRules.of(config)
        self._flush_messages = config.flush_messages
        self._roll_limits = RollLimits(config.segment_bytes, config.max_segment_ms)
        # The compiled check-and-write kernel (None: the interpreted twin, no kernel on this
        # platform, or a topic whose uncompressed batches are not written as they came), and the
        # rules it finds in an armed append state: the active segment's is invalidated here.
        appender = produced_batch_appender()
        self._append_produced: ProducedBatchAppend | None = None
        self._append_crc_checked: ProducedBatchAppend | None = None
        self._tail_rules = (0, False, 0, 0)
        if appender is not None and rules is not None and rules.codecs[_UNCOMPRESSED] is not None:
            self._append_produced, self._append_crc_checked = appender, crc_checked_batch_appender()
            self._tail_rules = (rules.max_message_bytes, rules.compact, rules.before_max_ms, rules.after_max_ms)
        active = self._segments.last
        if active is not None:
            active.append_state.invalidate()

    @property
    def lock(self) -> threading.RLock:
        """The log's (re-entrant) lock, for upper layers that must decide and act on one consistent
        state: retention plans and deletes a prefix under it, so no append, roll or truncation
        slips in between."""
        return self._lock

    # --- high watermark and log start offset --------------------------------------------------

    def _clamp_hw(self, offset: int) -> int:
        return min(max(offset, self._log_start_offset), self._log_end_offset)

    def update_high_watermark(self, offset: int) -> int:
        """Set the high watermark, clamped to [log start, log end]; returns the value set."""
        with self._lock:
            self._set_high_watermark(self._clamp_hw(offset))
            return self._high_watermark

    def _set_high_watermark(self, offset: int) -> None:
        if offset != self._high_watermark:
            self._high_watermark = offset
            self._hw_bound = None

    def maybe_increment_high_watermark(self, offset: int) -> int:
        """Move the high watermark forward only (a leader's rule)."""
        with self._lock:
            if offset > self._high_watermark:
                self._set_high_watermark(self._clamp_hw(offset))
            return self._high_watermark

    def maybe_increment_log_start_offset(self, new_offset: int, reason: str = "") -> bool:
        """Raise the log start offset; never past the high watermark. No file is touched:
        segments wholly below it go at the next retention pass."""
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
        Returns the log start offset after the call.
        """
        if not self._config.delete:
            raise PolicyViolationError(
                "records can only be deleted from topics whose cleanup.policy includes 'delete'",
                topic_partition=str(self.topic_partition), cleanup_policy=",".join(sorted(self._config.cleanup_policy)),
            )
        with self._lock:
            target = self._high_watermark if offset == -1 else offset
            if target < 0:
                raise OffsetOutOfRangeError(f"invalid delete-records offset {offset}", topic_partition=str(self.topic_partition))
            self.maybe_increment_log_start_offset(target, "delete records")
            return self._log_start_offset

    # --- append -------------------------------------------------------------------------------

    def append_as_leader(
        self, records: bytes | bytearray | memoryview, leader_epoch: int = 0, origin: AppendOrigin = AppendOrigin.CLIENT
    ) -> LogAppendInfo:
        """Validate ``records`` as Kafka's leader does, assign offsets from the log end, append.
        Thread-safe: takes the log's lock around the write and the bookkeeping.

        One path, three steps: the batch is checked once (one v2 batch from a producer that is
        written as it came: :func:`~tidelog.storage.validator.validate_produced_batch`), written by
        one segment write, then :meth:`_appended` does the bookkeeping (epoch cache, log end,
        producer state, flush.messages) and answers. Where numba is, with no fileops fault plan
        installed, the first two steps are ONE compiled call on the active segment's append state
        (``storage/_append_kernel.append_produced_batch``, the compiled twin of the same check and
        write; :meth:`_kernel_left` for what it leaves); elsewhere, the check's kernel call and one ``pwrite``
        through fileops (:meth:`_append_checked`). An idempotent batch takes either only when
        producer state has nothing to say about its sequence (``continues_in_sequence``).
        Everything else, and every error, takes the general path (:meth:`_append_as_leader`):
        validator's two steps, a roll when due, producer state's checks. All write the same bytes
        and return the same info. The bytes are in the OS when this returns.
        """
        append = self._append_produced
        if append is not None and origin is _CLIENT and type(records) is bytes and not _FAULT_PLANS:
            # The compiled twin (written out here, not in a helper: every Python call adds to each
            # 1-record append). A large batch's CRC here (the crc32c library, ~20 GB/s against ~12
            # for the kernel's crc32 steps), then the same call without it, its blocks reserved.
            if len(records) >= CRC_IN_KERNEL_BELOW:
                append = self._append_reserving if stored_crc_matches(records) else None
            if append is not None:
                now = NOW_FROM_CLOCK if self._system_clock else self._clock.milliseconds()
                lock = self._lock  # acquire/release, not ``with``: ~0.12 us less per append
                lock.acquire()
                try:
                    segment = self._segments.last
                    if self._append_produced is not None and not self._closed and segment is not None:
                        first = self._log_end_offset
                        status, delta, max_timestamp = append(records, segment.append_state.array, now, first,
                                                              leader_epoch)
                        producer = None
                        if status != PRODUCED_OK:
                            status, delta, max_timestamp, producer = self._kernel_left(
                                append, segment, records, now, first, leader_epoch, status, delta, max_timestamp)
                        if status == PRODUCED_OK:
                            return self._appended(len(records), first, delta, max_timestamp, delta + 1,
                                                  _UNCOMPRESSED, producer, leader_epoch)
                        if status != PRODUCED_COMPRESSED and status != PRODUCED_UNARMED:
                            append = None  # a roll, a sequence producer state has something to say about...
                finally:
                    lock.release()
            if append is None:
                return self._append_as_leader(records, leader_epoch, origin)
        if origin is _CLIENT:
            info = self._append_checked(records, leader_epoch)
            if info is not None:
                return info
        return self._append_as_leader(records, leader_epoch, origin)

    def _kernel_left(
        self, append: ProducedBatchAppend, segment: LogSegment, records: bytes, now: int, first: int,
        leader_epoch: int, status: int, delta: int, max_timestamp: int,
    ) -> tuple[int, int, int, tuple[int, int, int] | None]:
        """What the compiled call left (``status`` other than PRODUCED_OK), under the lock: arm the
        active segment's append state and call again; let an idempotent batch through when
        producer state has nothing to say about its sequence (the same call again writes it, ~0.5
        us); finish a write the kernel left a rest of. ``(status, delta, max_timestamp, producer
        fields or None)``: PRODUCED_OK when written."""
        producer = None
        if status == PRODUCED_UNARMED and segment.arm_fast_append(self._roll_limits, self._tail_rules):
            status, delta, max_timestamp = append(records, segment.append_state.array, now, first, leader_epoch)
        if status == PRODUCED_IDEMPOTENT:
            producer = PRODUCER_FIELDS.unpack_from(records, PRODUCER_ID_OFFSET)
            if self.producer_state.continues_in_sequence(*producer, delta):
                slots = segment.append_state.tail_slots
                slots[TAIL_PRODUCER_CHECKED] = 1
                status, delta, max_timestamp = append(records, segment.append_state.array, now, first, leader_epoch)
                slots[TAIL_PRODUCER_CHECKED] = 0
        if status == PRODUCED_INDEX_DUE or status == PRODUCED_SHORT_WRITE:  # written, a rest left
            segment.finish_fast_append(records, first, leader_epoch, delta, max_timestamp, status)
            status = PRODUCED_OK
        return status, delta, max_timestamp, producer

    def _append_checked(self, records: bytes | bytearray | memoryview, leader_epoch: int) -> LogAppendInfo | None:
        """The check (:func:`validate_produced_batch`, one kernel call for an uncompressed batch),
        one write through fileops when no roll rule fires (:meth:`LogSegment.append_if_no_roll`),
        then :meth:`_appended`; None: the general path decides."""
        rules = self._leader_rules
        if rules is None:
            return None
        now = self._clock.milliseconds()
        checked = validate_produced_batch(records, rules, now)
        if checked is None:
            return None
        delta, max_timestamp, count, codec, producer = checked
        size = len(records)
        with self._lock:
            segment = self._segments.last
            if (rules is not self._leader_rules or self._closed or segment is None
                    or (producer is not None and not self.producer_state.continues_in_sequence(*producer, delta))):
                return None
            first = self._log_end_offset
            last = first + delta
            head = PATCHED_PREFIX.pack(first, size - LOG_OVERHEAD, leader_epoch)  # fields outside the CRC
            data = (head + records[PATCHED_PREFIX_SIZE:] if size < _COPY_BELOW
                    else (head, memoryview(records)[PATCHED_PREFIX_SIZE:]))
            if not segment.append_if_no_roll(data, size, last, max_timestamp, last if max_timestamp > NO_TIMESTAMP else -1,
                                             self._roll_limits, now):
                return None
            return self._appended(size, first, delta, max_timestamp, count, codec, producer, leader_epoch)

    def _appended(
        self, size: int, first: int, delta: int, max_timestamp: int, count: int, codec: CompressionType,
        producer: tuple[int, int, int] | None, leader_epoch: int,
    ) -> LogAppendInfo:
        """The one after-append step of a checked batch written at ``first`` (under the lock): the
        epoch cache, the log end, producer state (``producer``: the batch's producer id, epoch and
        base sequence, that ``continues_in_sequence`` let through), flush.messages; then the info."""
        last = first + delta
        if leader_epoch >= 0:
            latest = self.leader_epoch_cache.latest  # assign() changes nothing if:
            if latest is None or latest.epoch != leader_epoch or first < latest.start_offset:
                self.leader_epoch_cache.assign(leader_epoch, first)
        self._log_end_offset = last + 1
        if producer is not None:
            self._note_in_sequence(producer, delta, first, max_timestamp)
        if last + 1 - self._recovery_point >= self._flush_messages:
            self.flush()
        return _new_tuple(LogAppendInfo, (first, last, max_timestamp, last if max_timestamp > NO_TIMESTAMP else -1,
                                          NO_TIMESTAMP, self._log_start_offset, count, size, codec, codec))

    def _append_reserving(
        self, records: bytes, tail: np.ndarray, now: int, base_offset: int, leader_epoch: int
    ) -> tuple[int, int, int]:
        """``append_crc_checked_batch`` for a large batch, the active segment's blocks reserved for
        it first (:meth:`FileRecords.reserve_for`; a no-op when they are). Under the lock."""
        self._segments.last.log.reserve_for(len(records))  # type: ignore[union-attr]  # the caller's segment
        return self._append_crc_checked(records, tail, now, base_offset, leader_epoch)  # type: ignore[misc]

    def _note_in_sequence(self, producer: tuple[int, int, int], delta: int, first: int, max_timestamp: int) -> None:
        """What _update_producer_state and _append do for one written client batch with a producer
        id (``(producer id, epoch, base sequence)``) that ``continues_in_sequence`` let through."""
        producer_id, producer_epoch, base_sequence = producer
        self.producer_state.update_in_sequence(producer_id, producer_epoch, increment_sequence(base_sequence, delta),
                                               first, first + delta, max_timestamp)

    def _append_as_leader(
        self, records: bytes | bytearray | memoryview, leader_epoch: int, origin: AppendOrigin
    ) -> LogAppendInfo:
        """The general leader append: the validator's two steps, then :meth:`_append`."""
        analyzed = analyze_batches(records, origin=origin, max_message_bytes=self._config.max_message_bytes)
        if analyzed.valid_bytes == 0:
            return self._empty_append_info(analyzed.source_compression)
        with self._lock:
            self._ensure_open()
            # Producer state step 1: epoch, sequence and duplicate checks (nothing changes yet).
            producer_batches = self.producer_state.check_leader_append(analyzed.batches, self._log_end_offset, origin)
            if isinstance(producer_batches, BatchMetadata):
                return self._duplicate_append_info(producer_batches, analyzed.source_compression)
            validated = assign_offsets(
                analyzed, next_offset=self._log_end_offset, config=self._config, now=self._clock.milliseconds(),
                origin=origin, leader_epoch=leader_epoch, topic_partition=str(self.topic_partition),
            )
            self._append(validated, epochs=[(leader_epoch, validated.first_offset)])
            # Producer state step 2: record the written batches at their assigned offsets.
            if producer_batches:
                self._update_producer_state(producer_batches, validated.first_offset, validated.log_append_time)
            return self._append_info(validated, analyzed.source_compression)

    def append_as_follower(self, records: bytes | bytearray | memoryview) -> LogAppendInfo:
        """Append batches that already carry their offsets (replication, tools, repair).

        Offsets must be increasing and start at or after the log end; the batch CRCs are checked;
        ``max.message.bytes`` is not (as for Kafka followers).
        """
        analyzed = analyze_batches(records, origin=AppendOrigin.REPLICATION, max_message_bytes=_LONG_MAX)
        if analyzed.valid_bytes == 0:
            return self._empty_append_info(analyzed.source_compression)
        check_offsets_in_order(analyzed)
        with self._lock:
            self._ensure_open()
            if analyzed.first_offset < self._log_end_offset:
                raise UnexpectedAppendOffsetError(
                    f"append starting at offset {analyzed.first_offset} is below the log end offset {self._log_end_offset}",
                    topic_partition=str(self.topic_partition), first_offset=analyzed.first_offset, last_offset=analyzed.last_offset,
                )
            validated = ValidatedRecords(
                (analyzed.records,), analyzed.first_offset, analyzed.last_offset, analyzed.max_timestamp,
                analyzed.shallow_offset_of_max_timestamp, NO_TIMESTAMP, -1, analyzed.source_compression,
            )
            epochs = [(b.partition_leader_epoch, b.base_offset) for _, b in analyzed.batches if b.magic >= 2]
            self._append(validated, epochs=epochs)
            for _, batch in analyzed.batches:  # producer state, unchecked (Kafka's REPLICATION origin)
                if batch.producer_id >= 0:
                    self.producer_state.update(producer_batch(batch))
            return self._append_info(validated, analyzed.source_compression)

    def _append(self, validated: ValidatedRecords, epochs: list[tuple[int, int]]) -> None:
        size = validated.size
        if size > self._config.segment_bytes:
            raise RecordBatchTooLargeError(
                f"append of {size} bytes is larger than segment.bytes {self._config.segment_bytes}",
                topic_partition=str(self.topic_partition),
            )
        segment = self._maybe_roll(size, validated)
        segment.append(validated.last_offset, validated.max_timestamp, validated.shallow_offset_of_max_timestamp, validated.records)
        for epoch, start in epochs:
            if epoch >= 0:
                self.leader_epoch_cache.assign(epoch, start)
        self._log_end_offset = validated.last_offset + 1
        self.producer_state.update_map_end_offset(self._log_end_offset)
        if self._log_end_offset - self._recovery_point >= self._config.flush_messages:
            self.flush()

    def _append_info(self, validated: ValidatedRecords, source: CompressionType) -> LogAppendInfo:
        return LogAppendInfo(
            first_offset=validated.first_offset, last_offset=validated.last_offset,
            max_timestamp=validated.max_timestamp, shallow_offset_of_max_timestamp=validated.shallow_offset_of_max_timestamp,
            log_append_time=validated.log_append_time, log_start_offset=self._log_start_offset,
            record_count=validated.record_count, valid_bytes=validated.size,
            source_compression=source, target_compression=validated.target_compression,
        )

    def _update_producer_state(self, batches: list[FileBatch], first_offset: int, log_append_time: int) -> None:
        """Leader appends: each producer batch at the offsets the validator gave it (contiguous
        from ``first_offset``), stamped with the broker time for LogAppendTime."""
        for batch in batches:
            stamp = log_append_time if log_append_time != NO_TIMESTAMP else None
            self.producer_state.update(producer_batch(batch, first_offset, stamp), AppendOrigin.CLIENT)
            first_offset += batch.last_offset_delta + 1

    def _duplicate_append_info(self, duplicate: BatchMetadata, codec: CompressionType) -> LogAppendInfo:
        """Kafka's answer to a retried batch: its original offsets, and the cached batch's
        timestamp as the log append time; nothing was written."""
        return LogAppendInfo(duplicate.first_offset, duplicate.last_offset, duplicate.timestamp, duplicate.last_offset,
                             duplicate.timestamp, self._log_start_offset, 0, 0, codec, codec)

    def _empty_append_info(self, codec: CompressionType) -> LogAppendInfo:
        return LogAppendInfo(-1, -1, NO_TIMESTAMP, -1, NO_TIMESTAMP, self._log_start_offset, 0, 0, codec, codec)

    def _ensure_open(self) -> None:
        if self._closed:
            raise StorageError("log is closed", path=self._dir)

    # --- roll ---------------------------------------------------------------------------------

    def _maybe_roll(self, messages_size: int, validated: ValidatedRecords) -> LogSegment:
        segment = self.active_segment
        params = RollParams(
            max_segment_ms=self._config.max_segment_ms, max_segment_bytes=self._config.segment_bytes,
            max_timestamp_in_messages=validated.max_timestamp, max_offset_in_messages=validated.last_offset,
            messages_size=messages_size, now=self._clock.milliseconds(),
        )
        if should_roll(segment, params):
            return self.roll(validated.first_offset)
        return segment

    def roll(self, expected_next_offset: int | None = None) -> LogSegment:
        """Seal the active segment and open a new one at ``max(expected_next_offset, log end)``.

        An empty active segment at that base offset is recreated in place. The sealed segments are
        flushed in the background (that is what normally advances the recovery point).
        """
        with self._lock:
            new_base = max(expected_next_offset or 0, self._log_end_offset)
            active = self.active_segment
            if self._segments.contains(new_base):
                # The empty active segment is replaced, not sealed: its files are already gone, and
                # sealing it would recreate index files under its (and the new segment's) name.
                self._recreate_empty_active(active, new_base)
            elif new_base < active.base_offset:
                raise TidelogError(
                    f"cannot roll to base offset {new_base}: below the active segment's {active.base_offset}",
                    topic_partition=str(self.topic_partition),
                )
            else:
                self._remove_stale_files(new_base)
                active.on_become_inactive_segment()
            segment = self._new_segment(new_base)
            self._segments.add(segment)
            # Kafka's rule: a producer snapshot at the new segment's base offset, fsynced with the flush.
            self.producer_state.update_map_end_offset(new_base)
            snapshot = self.producer_state.take_snapshot(sync=False)
            self._scheduler.schedule_once(f"flush-{self.topic_partition}", lambda: self._flush_after_roll(new_base, snapshot))
            return segment

    def _flush_after_roll(self, new_base: int, snapshot: Path | None) -> None:
        if snapshot is not None:
            fsync_snapshot(snapshot)
        self.flush_upto(new_base)

    def _recreate_empty_active(self, active: LogSegment, new_base: int) -> None:
        if active.base_offset != new_base or active.size > 0:
            raise TidelogError(
                f"cannot roll: a segment with base offset {new_base} already exists",
                topic_partition=str(self.topic_partition),
            )
        log.warning("%s: recreating empty active segment %d", self.topic_partition, new_base)
        self._segments.remove(new_base)
        active.delete_files()

    def _remove_stale_files(self, base: int) -> None:
        for name in (files.log_file, files.offset_index_file, files.time_index_file, files.transaction_index_file):
            path = name(self._dir, base)
            if path.exists():
                log.warning("%s: removing stale file %s before roll", self.topic_partition, path)
                fileops.unlink(path)

    # --- read ---------------------------------------------------------------------------------

    def read(
        self, start_offset: int, max_length: int,
        isolation: FetchIsolation = FetchIsolation.HIGH_WATERMARK, min_one_message: bool = True,
    ) -> FetchDataInfo:
        """Raw batches from ``start_offset``, at most ``max_length`` bytes, never past the bound of
        ``isolation``. Raises :class:`OffsetOutOfRangeError` below the log start or past the log end.
        Offset gaps (compaction) are skipped: the read continues in the next segment."""
        with self._lock:
            self._check_in_range(start_offset)
            bound = self._bound(isolation)
            segment = self._segments.floor(start_offset)
        if start_offset >= bound.offset:
            return FetchDataInfo(LogOffsetMetadata(start_offset), b"")
        while segment is not None:
            info = segment.read(start_offset, max_length, self._max_position(segment, bound), min_one_message)
            if info is not None:
                return info
            with self._lock:  # a gap at the segment's end (compaction): go on with the next one
                segment = self._segments.higher(segment.base_offset)
        return FetchDataInfo(LogOffsetMetadata(self._log_end_offset), b"")

    def _check_in_range(self, offset: int) -> None:
        if offset < self._log_start_offset or offset > self._log_end_offset:
            raise OffsetOutOfRangeError(
                f"offset {offset} is out of range [{self._log_start_offset}, {self._log_end_offset}]",
                topic_partition=str(self.topic_partition),
            )

    @staticmethod
    def _max_position(segment: LogSegment, bound: _Bound) -> int | None:
        if segment.base_offset < bound.segment_base:
            return segment.size
        if segment.base_offset == bound.segment_base:
            return bound.position
        return None

    def _bound(self, isolation: FetchIsolation) -> _Bound:
        """The read bound with its byte position. Needs the lock. A high watermark below the log
        end is located once (index lookup and header scan) and kept until it moves."""
        offset = self._log_end_offset if isolation is FetchIsolation.LOG_END else self._high_watermark
        if offset == self._log_end_offset:
            active = self.active_segment
            return _Bound(offset, active.base_offset, active.size)
        if self._hw_bound is None or self._hw_bound.offset != offset:
            self._hw_bound = self._locate(offset)
        return self._hw_bound

    def _locate(self, offset: int) -> _Bound:
        segment = self._segments.floor(offset)
        if segment is None:
            return _Bound(offset, -1, None)
        location = segment.translate_offset(offset)
        position = location.position if location is not None else segment.size
        return _Bound(offset, segment.base_offset, position)

    # --- ListOffsets --------------------------------------------------------------------------

    def fetch_offset_by_timestamp(
        self, timestamp: int, isolation: FetchIsolation = FetchIsolation.HIGH_WATERMARK
    ) -> TimestampAndOffset | None:
        """Kafka's ListOffsets (§3.4): -2 earliest, -1 latest (the high watermark for consumers, the
        log end for ``LOG_END``), -3 the record with the max timestamp, -4 earliest local,
        else the first record with a timestamp >= ``timestamp``. None when nothing matches."""
        if timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
            return TimestampAndOffset(-1, self._log_start_offset, self._earliest_epoch())
        if timestamp == LATEST_TIMESTAMP:
            offset = self._log_end_offset if isolation is FetchIsolation.LOG_END else self._high_watermark
            return TimestampAndOffset(-1, offset, self.leader_epoch_cache.latest_epoch)
        if timestamp == LATEST_TIERED_TIMESTAMP:
            return TimestampAndOffset(-1, -1, None)
        if timestamp == MAX_TIMESTAMP:
            return self._max_timestamp_offset()
        if timestamp < 0:
            raise OffsetOutOfRangeError(f"invalid ListOffsets timestamp {timestamp}", topic_partition=str(self.topic_partition))
        return self._offset_for_timestamp(timestamp)

    def _earliest_epoch(self) -> int | None:
        entry = self.leader_epoch_cache.earliest_entry
        if entry is not None and entry.start_offset <= self._log_start_offset:
            return entry.epoch
        return None

    def _offset_for_timestamp(self, timestamp: int) -> TimestampAndOffset | None:
        for segment in self.segments:
            if segment.largest_timestamp >= timestamp:
                return segment.find_offset_by_timestamp(timestamp, self._log_start_offset)
        return None

    def _max_timestamp_offset(self) -> TimestampAndOffset | None:
        best: LogSegment | None = None
        for segment in self.segments:
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

    def flush(self, include_active: bool = True) -> None:
        """fsync every segment from the recovery point to the log end (the active segment too,
        even when empty, if ``include_active``) and move the recovery point to the log end."""
        end = self._log_end_offset
        self._flush(end + 1 if include_active else end, end)

    def flush_upto(self, offset: int) -> None:
        """fsync segments holding offsets below ``offset``; the recovery point becomes ``offset``."""
        self._flush(offset, offset)

    def _flush(self, flush_offset: int, new_recovery_point: int) -> None:
        with self._lock:
            if self._closed or flush_offset <= self._recovery_point:
                return
            old = self._recovery_point
            to_flush = self._segments.values_between(old, flush_offset)
        for segment in to_flush:
            segment.flush()
        if any(segment.base_offset >= old for segment in to_flush):
            fsync_dir(self._dir)
        with self._lock:
            if new_recovery_point > self._recovery_point:
                self._recovery_point = min(new_recovery_point, self._log_end_offset)
                self._last_flush_ms = self._clock.milliseconds()

    # --- truncation and deletion --------------------------------------------------------------

    def truncate_to(self, target_offset: int) -> bool:
        """Remove every record at or after ``target_offset``; False when nothing was there."""
        if target_offset < 0:
            raise OffsetOutOfRangeError(f"cannot truncate to negative offset {target_offset}")
        with self._lock:
            if target_offset >= self._log_end_offset:
                return False
            first = self._segments.first
            if first is None or first.base_offset > target_offset:
                self.truncate_fully_and_start_at(target_offset)
                return True
            later = [s for s in self._segments.snapshot() if s.base_offset > target_offset]
            self.delete_segments(later, "truncation")
            self.active_segment.truncate_to(target_offset)
            rebuild_producer_state(self.producer_state, self._segments.snapshot(), min(self._log_start_offset, target_offset),
                                   target_offset, self._clock.milliseconds())
            self._log_end_offset = target_offset
            self._log_start_offset = min(self._log_start_offset, target_offset)
            self._recovery_point = min(self._recovery_point, target_offset)
            self._high_watermark = self._clamp_hw(self._high_watermark)
            self._hw_bound = None
            self.leader_epoch_cache.truncate_from_end(target_offset)
            self._txn_index_check.truncated()
            return True

    def truncate_fully_and_start_at(self, new_offset: int) -> None:
        """Delete every segment and start empty at ``new_offset`` (all offsets become ``new_offset``)."""
        with self._lock:
            self.delete_segments(self._segments.snapshot(), "full truncation")
            self.producer_state.truncate_fully_and_start_at(new_offset)
            self._segments.add(self._new_segment(new_offset))
            self._log_start_offset = self._log_end_offset = new_offset
            self._recovery_point = self._high_watermark = new_offset
            self.leader_epoch_cache.clear()
            self._txn_index_check.truncated()
            # Kafka's clearAndFlush: a stale checkpoint would, after a crash, be cut at the new log
            # start and claim that its last epoch starts there.
            self.leader_epoch_cache.flush()

    def delete_oldest_segments(self, segments: Sequence[LogSegment], reason: str) -> int:
        """Kafka's ``deleteSegments`` for a prefix retention chose: ``segments`` must be the oldest
        segments, in order, each ending at or below the high watermark. When they are every
        segment, the log rolls first so an (empty) active segment remains. The log start offset
        moves to the base offset of the first segment kept. Returns how many were deleted."""
        with self._lock:
            if not segments:
                return 0
            current = self._segments.snapshot()
            chosen = [s.base_offset for s in segments]
            if chosen != [s.base_offset for s in current[:len(chosen)]]:
                raise StorageError(
                    f"segments {chosen} are not the oldest segments of the log", path=self._dir,
                )
            last = segments[-1]
            upper = self._log_end_offset if last is current[-1] else current[len(chosen)].base_offset
            if upper > self._high_watermark:
                raise StorageError(
                    f"cannot delete segments ending at offset {upper}: past the high watermark {self._high_watermark}",
                    path=self._dir,
                )
            doomed = list(segments)
            if len(doomed) == len(current):
                self.roll()
                if self.active_segment.base_offset == last.base_offset:  # the empty active one was recreated
                    doomed.pop()
            kept = self._segments.higher(last.base_offset)
            if kept is not None:
                self.maybe_increment_log_start_offset(kept.base_offset, reason)
            self.delete_segments(doomed, reason)
            return len(doomed)

    def segments_between(self, from_offset: int, to_offset: int) -> list[LogSegment]:
        """Segments that may hold offsets in [from, to) (Kafka's ``logSegments(from, to)``)."""
        with self._lock:
            return self._segments.values_between(from_offset, to_offset)

    def segment_after(self, segment: LogSegment) -> LogSegment | None:
        """The segment following ``segment`` in the log (None for the active one)."""
        return self._segments.higher(segment.base_offset)

    def collect_aborted_transactions(self, start_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
        """Aborted transactions overlapping [start, upper bound) from the segments' ``.txnindex``
        files, from the segment holding ``start`` on through the later ones (an abort is indexed
        in the segment of its marker, which may lie past the upper bound) until one says the
        search is complete (Kafka's ``collectAbortedTransactions``). Each segment's index is
        checked against its ``.log`` the first time it is asked (:class:`.TxnIndexCheck`)."""
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
            return LogState(self._segments.snapshot(), self._log_start_offset, self.producer_state.snapshot_offsets)

    def replace_segments(self, new_segments: Sequence[LogSegment], old_segments: Sequence[LogSegment]) -> None:
        """Swap cleaned segments in for the segments they replace, crash-safely (Kafka's
        ``replaceSegments``; the loader completes or rolls back each step, see :mod:`.loader`):

        1. each new segment's files ``.cleaned`` → ``.swap``, highest base offset first, and into
           the segment map (replacing an old segment with the same base offset);
        2. the old segments still in the log, lowest first: out of the map and their files renamed
           ``.deleted`` (unlinked after ``file.delete.delay.ms``);
        3. the new segments' files ``.swap`` → final names; fsync the partition dir.

        Old segments already deleted meanwhile (retention) are skipped. Needs no caller lock.
        """
        with self._lock:
            self._ensure_open()
            new_sorted = sorted(new_segments, key=lambda s: s.base_offset)
            new_bases = {s.base_offset for s in new_sorted}
            old_live = [s for s in sorted(old_segments, key=lambda s: s.base_offset)
                        if self._segments.get(s.base_offset) is s]
            self._hw_bound = None  # it may point into a segment going away
            try:
                for segment in reversed(new_sorted):
                    segment.change_file_suffixes(files.CLEANED_SUFFIX, files.SWAP_SUFFIX)
                    self._segments.add(segment)
                for segment in old_live:
                    if segment.base_offset not in new_bases:  # else the new segment took its map entry
                        self._segments.remove(segment.base_offset)
                self._retire(old_live, f"replaced by {sorted(new_bases)}",
                             snapshots_of=[s for s in old_live if s.base_offset not in new_bases])
                for segment in new_sorted:
                    segment.change_file_suffixes(files.SWAP_SUFFIX, "")
                fsync_dir(self._dir)
            except BaseException:
                self._release_unreachable([*new_sorted, *old_live])
                raise

    def _release_unreachable(self, segments: Sequence[LogSegment]) -> None:
        """After a failed swap (its files are for the loader to complete or roll back at the next
        open): close the handles of the segments neither in the map nor retired, which nothing
        else would ever close."""
        kept = {id(segment) for segment in (*self._segments.snapshot(), *self._retired)}
        for segment in segments:
            if id(segment) not in kept:
                segment.close_handlers()

    def delete_segments(self, segments: list[LogSegment], reason: str) -> None:
        """Take segments out of the log, rename their files ``.deleted`` and unlink them after
        ``file.delete.delay.ms`` in the background (a large unlink blocks for a long time)."""
        with self._lock:
            self._hw_bound = None  # it may point into a segment going away
            for segment in segments:
                self._segments.remove(segment.base_offset)
            self._retire(segments, reason, snapshots_of=segments)

    def _retire(self, segments: Sequence[LogSegment], reason: str, snapshots_of: Sequence[LogSegment] = ()) -> None:
        """Rename segments already out of the map ``.deleted`` and unlink them after
        ``file.delete.delay.ms`` in the background (a large unlink blocks for a long time); the
        producer snapshots at the base offsets of ``snapshots_of`` go the same way (Kafka's
        ``deleteProducerSnapshots``)."""
        for segment in segments:
            segment.change_file_suffixes("", files.DELETED_SUFFIX)
        snapshots = [p for p in (self.producer_state.mark_snapshot_for_deletion(s.base_offset) for s in snapshots_of) if p]
        if segments or snapshots:
            doomed = list(segments)
            self._retired.extend(doomed)
            log.info("%s: deleting segments %s (%s)", self.topic_partition, [s.base_offset for s in doomed], reason)
            self._scheduler.schedule_once(
                f"delete-segments-{self.topic_partition}", lambda: self._delete_retired(doomed, snapshots),
                self._config.file_delete_delay_ms,
            )

    def _delete_retired(self, segments: list[LogSegment], snapshots: Sequence[Path]) -> None:
        """The delayed unlink of :meth:`_retire`."""
        with self._lock:
            done = {id(segment) for segment in segments}
            self._retired = [segment for segment in self._retired if id(segment) not in done]
        _delete_files(segments, snapshots)

    # --- closing ------------------------------------------------------------------------------

    def close(self, producer_snapshot: bool = True) -> None:
        """Close every segment: final time-index entries, trimmed indexes and ``.log`` files.
        With ``producer_snapshot`` (Kafka's close), first a producer snapshot at the log end, so
        the next open replays nothing; without it (a log being deleted, or whose dir failed:
        Kafka only closes its handles then), no new file is written for producer state."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            try:
                if producer_snapshot:
                    self.producer_state.update_map_end_offset(self._log_end_offset)
                    self.producer_state.take_snapshot()
            finally:  # a failing snapshot write (a failing disk) still closes the segments
                for segment in self._segments.snapshot():
                    segment.close()
                # Retired segments whose delayed unlink has not run (the scheduler may never run
                # it now): release their descriptors and maps, or a process that closes and
                # reopens logs (offline dirs, tools, tests) keeps them, and the disk space of
                # files the next open unlinks, until it exits. Their .deleted files stay; the
                # next open removes them (Kafka's loader does the same).
                for segment in self._retired:
                    segment.close_handlers()
                self.leader_epoch_cache.flush()

    def close_handlers(self) -> None:
        """Kafka's ``closeHandlers``, for a log whose dir failed: mark it closed and release every
        segment's descriptors and maps, writing nothing (no final time-index entry, no trim of
        the ``.log``, no snapshot): on a full disk, a write into a sparse index page is a SIGBUS.
        The one change it makes is a truncation of the active ``.log`` to its data, best effort:
        it frees and never allocates, and removes the partial bytes of the append that failed
        (the next recovery would cut them; ``verify`` finds none meanwhile)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            segments = self._segments.snapshot()
            if segments:
                try:
                    segments[-1].log.trim()
                except StorageError:
                    pass  # the disk is failing: the next open's recovery cuts them
            for segment in (*segments, *self._retired):
                segment.close_handlers()

    # --- producer id expiration ---------------------------------------------------------------

    def _producer_state_expiry(self, interval_ms: int) -> None:
        """Every ``interval_ms``, forget producers idle for ``producer.id.expiration.ms`` (Kafka's
        PeriodicProducerExpirationCheck). One task at a time, rescheduled until the log closes.
        A bound method, not a closure: a data dir of 10,000 logs keeps 10,000 of them queued."""
        self._expiry_interval_ms = interval_ms
        self._scheduler.schedule_once(f"producer-expiration-{self.topic_partition}", self._expire_producers, interval_ms)

    def _expire_producers(self) -> None:
        with self._lock:
            if self._closed:
                return
            self.producer_state.remove_expired_producers(self._clock.milliseconds())
        self._scheduler.schedule_once(f"producer-expiration-{self.topic_partition}", self._expire_producers,
                                      self._expiry_interval_ms)

    def __repr__(self) -> str:
        return (f"Log({self.topic_partition}, start={self._log_start_offset}, hw={self._high_watermark}, "
                f"end={self._log_end_offset}, segments={len(self._segments)})")


def segment_config(config: LogConfig) -> SegmentConfig:
    return SegmentConfig(
        index_interval_bytes=config.index_interval_bytes, max_index_size=config.segment_index_bytes,
        init_file_size=config.init_file_size, preallocate=config.preallocate,
    )


def _assign_epochs(cache: LeaderEpochCache, epoch_starts: list[tuple[int, int]]) -> None:
    """Recovery's rule (Kafka's ``LogSegment.recover``): only an epoch newer than the cache's latest
    starts an entry, so a recovered batch never cuts back a checkpointed later epoch."""
    for epoch, start_offset in epoch_starts:
        latest = cache.latest_epoch
        if latest is None or epoch > latest:
            cache.assign(epoch, start_offset)


def _delete_files(segments: list[LogSegment], snapshots: Sequence[Path] = ()) -> None:
    for segment in segments:
        segment.delete_files()
    for path in snapshots:
        fileops.unlink(path, missing_ok=True)

