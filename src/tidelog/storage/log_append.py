"""AppendPath: the append half of :class:`~tidelog.storage.log.Log` — the append rules and their one path.

A produced batch is checked once (:func:`~tidelog.storage.validator.validate_produced_batch`), written
by one segment write, then :meth:`AppendPath._appended` does the bookkeeping; the general path
(the validator's two steps, a roll when due, producer state's checks) takes everything else.

``AppendPath`` is a base class of ``Log`` with no state and no ``__init__`` of its own: the fields it
reads are declared below and set by ``Log.__init__`` and :meth:`AppendPath._take_config`. It is a
base class, not a composed object, because the leader's 1-record append makes about ten attribute
loads on one instance, and a second object would add one hop to each (about 1% of the append;
docs/architecture.md's design notes). Thread-safety: the public methods take the log's lock; the
``_`` methods run under it, except that ``_append_checked`` and ``_append_as_leader`` check the
batch unlocked first and then take it.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING

from tidelog.clock import Clock
from tidelog.errors import RecordBatchTooLargeError, StorageError, UnexpectedAppendOffsetError
from tidelog.records import CompressionType, FileBatch
from tidelog.records.batch import increment_sequence, stored_crc_matches
from tidelog.records.layout import LOG_OVERHEAD, PATCHED_PREFIX, PATCHED_PREFIX_SIZE, PRODUCER_FIELDS, PRODUCER_ID_OFFSET
from tidelog.records.scan import CRC_IN_KERNEL_BELOW, PRODUCED_COMPRESSED, PRODUCED_IDEMPOTENT, PRODUCED_OK
from tidelog.storage import fileops
from tidelog.storage._append_kernel import (
    NOW_FROM_CLOCK,
    PRODUCED_INDEX_DUE,
    PRODUCED_SHORT_WRITE,
    PRODUCED_UNARMED,
    TAIL_PRODUCER_CHECKED,
)
from tidelog.storage.append_info import NO_TIMESTAMP, AppendOrigin, LogAppendInfo
from tidelog.storage.append_state import ProducedBatchAppend, crc_checked_batch_appender, produced_batch_appender
from tidelog.storage.checkpoints import LeaderEpochCache
from tidelog.storage.config import LogConfig
from tidelog.storage.local_log import LocalLog
from tidelog.storage.log_txn import TxnLog
from tidelog.storage.producer_state import BatchMetadata, ProducerStateManager, producer_batch
from tidelog.storage.roll import RollLimits, RollParams, should_roll
from tidelog.storage.segment import LogSegment
from tidelog.storage.segments import LogSegments
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

_LONG_MAX = 2**63 - 1
_CLIENT = AppendOrigin.CLIENT
_UNCOMPRESSED = CompressionType.NONE
_FAULT_PLANS = fileops.PLANS  # non-empty while a fault plan is installed (fileops.active())
_new_tuple = tuple.__new__  # LogAppendInfo._make without its length check: the leader's common path builds one per append
_COPY_BELOW = 4096  # bytes: a smaller batch is written as one patched copy, a larger one as head + view


class AppendPath(TxnLog):
    """Appends to a log: leader (checked, offsets assigned) and follower (offsets kept)."""

    # Set by Log.__init__ (shared with its LocalLog, never rebound):
    _local: LocalLog
    _segments: LogSegments
    _lock: threading.RLock
    _clock: Clock
    _system_clock: bool  # the clock is SYSTEM_CLOCK: the append kernel reads that one itself
    topic_partition: TopicPartition
    # The log's own state (Log.__init__, then its methods under the lock):
    _log_start_offset: int
    _log_end_offset: int
    _closed: bool
    leader_epoch_cache: LeaderEpochCache
    producer_state: ProducerStateManager
    # Set by _take_config from the current config:
    _leader_rules: LeaderRules | None
    _flush_messages: int
    _flush_due_at: int  # recovery point + flush.messages: an append reaching it flushes
    _roll_limits: RollLimits
    _append_produced: ProducedBatchAppend | None
    _append_crc_checked: ProducedBatchAppend | None
    _tail_rules: tuple[int, bool, int, int]
    # Set by an upper layer under the lock (a staged commit on a live broker): while not None,
    # every append raises it, checked under the lock on each path; the one attribute test is the
    # only cost on the leader's common path. The fence's owner appends with the lock held and the
    # fence lifted for the call, so nothing else lands between its reading of the log end and its
    # own batches. A class default: a log never fenced reads it from here, as fast as its own.
    append_fence: BaseException | None = None

    if TYPE_CHECKING:  # Log's, called from here
        def roll(self, expected_next_offset: int | None = None) -> LogSegment: ...
        def flush(self, include_active: bool = True) -> None: ...

    def _take_config(self, config: LogConfig) -> None:
        """What the leader's common append path reads of the config, taken once per config (caller
        holds the lock, or the log is not shared yet)."""
        rules = self._leader_rules = LeaderRules.of(config)
        self._flush_messages = config.flush_messages
        self._sync_flush_due()
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

    def _sync_flush_due(self) -> None:
        """Recompute :attr:`_flush_due_at` after the recovery point or flush.messages moved (caller holds the lock)."""
        self._flush_due_at = self._local.recovery_point + self._flush_messages

    def append_as_leader(
        self, records: bytes | bytearray | memoryview, leader_epoch: int = 0, origin: AppendOrigin = AppendOrigin.CLIENT,
        verified: Mapping[int, int] | None = None,
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
        and return the same info. The bytes are in the OS when this returns. ``verified``: the
        tokens of a transactional request's verification (:mod:`.txn_verification`; general path).
        """
        if verified is not None:
            return self._append_as_leader(records, leader_epoch, origin, verified)
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
                    if (self._append_produced is not None and not self._closed and segment is not None
                            and self.append_fence is None):
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
            if (rules is not self._leader_rules or self._closed or segment is None or self.append_fence is not None
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
        if last + 1 >= self._flush_due_at:
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
        self, records: bytes | bytearray | memoryview, leader_epoch: int, origin: AppendOrigin,
        verified: Mapping[int, int] | None = None,
    ) -> LogAppendInfo:
        """The general leader append: the validator's two steps, then :meth:`_append`."""
        analyzed = analyze_batches(records, origin=origin, max_message_bytes=self._local.config.max_message_bytes)
        if analyzed.valid_bytes == 0:
            return self._empty_append_info(analyzed.source_compression)
        with self._lock:
            self._ensure_open()
            if self.append_fence is not None:
                raise self.append_fence
            # Producer state step 1: epoch, sequence and duplicate checks (nothing changes yet).
            producer_batches = self.producer_state.check_leader_append(analyzed.batches, self._log_end_offset, origin,
                                                                       verified)
            if isinstance(producer_batches, BatchMetadata):
                return self._duplicate_append_info(producer_batches, analyzed.source_compression)
            validated = assign_offsets(
                analyzed, next_offset=self._log_end_offset, config=self._local.config, now=self._clock.milliseconds(),
                origin=origin, leader_epoch=leader_epoch, topic_partition=str(self.topic_partition),
            )
            # Producer state step 2 (in _append, before a flush): the written batches at their offsets.
            self._append(validated, [(leader_epoch, validated.first_offset)], producer_batches, origin)
            return self._append_info(validated, analyzed.source_compression)

    def append_as_follower(self, records: bytes | bytearray | memoryview) -> LogAppendInfo:
        """Append batches that already carry their offsets (replication, tools, repair).

        Offsets must be increasing and start at or after the log end; the batch CRCs are checked;
        ``max.message.bytes`` is not (as for Kafka followers). Producer state follows the batches
        unchecked, transactions included; the ``.txnindex`` entries of ABORT markers are left to
        the caller (what appends this way copies a log whose index comes with it; a lost entry is
        rebuilt from the markers at the first read: :class:`~.txn_rebuild.TxnIndexCheck`).
        Thread-safe: takes the log's lock around the write and the bookkeeping.
        """
        analyzed = analyze_batches(records, origin=AppendOrigin.REPLICATION, max_message_bytes=_LONG_MAX)
        if analyzed.valid_bytes == 0:
            return self._empty_append_info(analyzed.source_compression)
        check_offsets_in_order(analyzed)
        with self._lock:
            self._ensure_open()
            if self.append_fence is not None:
                raise self.append_fence
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
            producers = [batch for _, batch in analyzed.batches if batch.producer_id >= 0]
            self._append(validated, epochs, producers, AppendOrigin.REPLICATION)
            return self._append_info(validated, analyzed.source_compression)

    def _append(self, validated: ValidatedRecords, epochs: list[tuple[int, int]],
                producer_batches: list[FileBatch], origin: AppendOrigin) -> None:
        """Write ``validated`` (rolling first when due), then the epoch cache, the log end, producer
        state for ``producer_batches`` (with the ``.txnindex`` entries of ABORT markers), and a
        flush when flush.messages says so, in that order: a flush covers the index entry too."""
        size = validated.size
        if size > self._local.config.segment_bytes:
            raise RecordBatchTooLargeError(
                f"append of {size} bytes is larger than segment.bytes {self._local.config.segment_bytes}",
                topic_partition=str(self.topic_partition),
            )
        segment = self._maybe_roll(size, validated)
        segment.append(validated.last_offset, validated.max_timestamp, validated.shallow_offset_of_max_timestamp, validated.records)
        for epoch, start in epochs:
            if epoch >= 0:
                self.leader_epoch_cache.assign(epoch, start)
        self._log_end_offset = validated.last_offset + 1
        if producer_batches:
            self._update_producer_state(producer_batches, validated.first_offset, validated.log_append_time, origin)
        self.producer_state.update_map_end_offset(self._log_end_offset)
        if self._log_end_offset >= self._flush_due_at:
            self.flush()

    def _append_info(self, validated: ValidatedRecords, source: CompressionType) -> LogAppendInfo:
        return LogAppendInfo(
            first_offset=validated.first_offset, last_offset=validated.last_offset,
            max_timestamp=validated.max_timestamp, shallow_offset_of_max_timestamp=validated.shallow_offset_of_max_timestamp,
            log_append_time=validated.log_append_time, log_start_offset=self._log_start_offset,
            record_count=validated.record_count, valid_bytes=validated.size,
            source_compression=source, target_compression=validated.target_compression,
        )

    def _update_producer_state(self, batches: list[FileBatch], first_offset: int, log_append_time: int,
                               origin: AppendOrigin) -> None:
        """Each producer batch, in order: a leader's at the offsets the validator gave it (contiguous
        from ``first_offset``), stamped with the broker time for LogAppendTime; a follower's as
        they came. A marker that completes a transaction is indexed (a leader's) and completed
        before the next batch (:meth:`TxnLog._index_completed`)."""
        leader = origin is not AppendOrigin.REPLICATION
        stamp = log_append_time if log_append_time != NO_TIMESTAMP else None
        for batch in batches:
            completed = self.producer_state.update(
                producer_batch(batch, first_offset, stamp) if leader else producer_batch(batch), origin)
            if completed is not None:
                self._index_completed(completed, leader)
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
            raise StorageError("log is closed", path=self._local.dir)

    def _maybe_roll(self, messages_size: int, validated: ValidatedRecords) -> LogSegment:
        segment = self._local.active_segment
        params = RollParams(
            max_segment_ms=self._local.config.max_segment_ms, max_segment_bytes=self._local.config.segment_bytes,
            max_timestamp_in_messages=validated.max_timestamp, max_offset_in_messages=validated.last_offset,
            messages_size=messages_size, now=self._clock.milliseconds(),
        )
        if should_roll(segment, params):
            return self.roll(validated.first_offset)
        return segment

