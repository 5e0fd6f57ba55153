"""LogSegment: one ``.log`` file and its indexes, named by the segment's base offset.

Index entries are sparse (kafka-storage.md §1.12): one offset-index entry and one time-index
entry per append call once more than ``index.interval.bytes`` were written since the last entry,
so lookups land within a few KiB of the target and finish with a short header scan. The first
append of a segment never gets an entry; lookups fall back to ``(base_offset, 0)``. Recovery
rebuilds the indexes per batch, which may differ byte-wise from append-built ones; both are valid.

Index files are created lazily, on first use (Kafka's ``LazyIndex``): a freshly rolled segment
has only its ``.log`` until something appends to, reads or flushes it.

Not thread-safe: the owning :class:`~tidelog.storage.log.Log` holds its lock around every
mutating call. Reads of sealed segments are safe alongside appends to the active one.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Container
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tidelog.clock import Clock
from tidelog.errors import (
    CorruptIndexError,
    CorruptRecordError,
    InvalidRecordError,
    LogSegmentOffsetOverflowError,
)
from tidelog.records import FileBatch
from tidelog.records.batch import CONTROL_FLAG_MASK, TRANSACTIONAL_FLAG_MASK
from tidelog.storage import fileops, files
from tidelog.storage._append_kernel import (
    PRODUCED_INDEX_DUE,
    TAIL_BYTES_SINCE_LAST_INDEX_ENTRY,
    TAIL_OFFSET_OF_MAX_TIMESTAMP,
    roll_due,
)
from tidelog.storage.append_state import TailSlot, invalidates_append_state
from tidelog.storage.fetch_info import FetchDataInfo, LogOffsetMetadata, TimestampAndOffset
from tidelog.storage.file_records import (
    BatchHeaders,
    BatchLocation,
    Chunks,
    FileRecords,
    chunks_size,
    set_file_mtime,
)
from tidelog.storage.index import OffsetIndex, TimeIndex, TimestampOffset
from tidelog.storage.log_config import SegmentConfig
from tidelog.storage.roll import RollLimits, max_timestamp_limit
from tidelog.storage.segment_reader import SegmentReader, offset_for_timestamp
from tidelog.storage.txn_index import TransactionIndex

log = logging.getLogger(__name__)

INT32_MAX = 2**31 - 1
_TXN_MARKER = TRANSACTIONAL_FLAG_MASK | CONTROL_FLAG_MASK  # both bits: an end-transaction marker
INT64_MAX = 2**63 - 1
NO_TIMESTAMP = -1


@dataclass(frozen=True, slots=True)
class TailCheck:
    """What :meth:`LogSegment.check_tail` found: the offset after the last valid batch it walked
    (the base offset if none), the byte where valid batches stop, and whether that is the end."""

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


class LogSegment:
    def __init__(
        self,
        dir: Path,
        base_offset: int,
        log_file: FileRecords,
        config: SegmentConfig,
        clock: Clock,
        *,
        rolling_jitter_ms: int = 0,
        file_suffix: str = "",
    ) -> None:
        self._dir = dir
        self.base_offset = base_offset
        self.log = log_file
        self._config = config
        self._clock = clock
        self.rolling_jitter_ms = rolling_jitter_ms
        self._suffix = file_suffix
        self._offset_index: OffsetIndex | None = None
        self._time_index: TimeIndex | None = None
        self._txn_index: TransactionIndex | None = None
        # Whether the owning log has checked the .txnindex against the ABORT markers in the .log
        # (TxnIndexCheck); recovery clears it again, and sets the second when the log
        # should check it as soon as it is loaded (see _recover_txn_index).
        self.txn_index_checked = False
        self.txn_index_suspect = False
        # The segment's append state (storage.append_state): its bookkeeping below lives there (see
        # the properties after open()), where the compiled leader append reads and updates it in
        # the call that writes. Created with the .log's FileRecords, whose size is one of its slots.
        self.append_state = log_file.append_state  # a new file's: zeros, not armed
        self.tail_slots = self.append_state.tail_slots  # for the TailSlot attributes
        self._bytes_since_last_index_entry = 0
        self._rolling_based_timestamp: int | None = None
        self._created_ms = clock.milliseconds()
        # The largest timestamp and the offset it was first reached at, as two ints (a value object
        # per change would cost the append path); None: not known yet (read on demand).
        self._max_timestamp = None
        self._offset_of_max_timestamp = base_offset
        self._max_timestamp_in_index = False  # it was read from the time index: close need not append it
        self._deferred_index_size: int | None = None  # see defer_index_resize
        # The offset index's last entry as sanity_check read it from the unmapped file (b"": no
        # entry), for read_next_offset; dropped when the index is mapped (every change maps it).
        self._checked_offset_entry: bytes | None = None

    @classmethod
    def open(
        cls,
        dir: Path,
        base_offset: int,
        config: SegmentConfig,
        clock: Clock,
        *,
        file_already_exists: bool = False,
        file_suffix: str = "",
        rolling_jitter_ms: int = 0,
    ) -> LogSegment:
        """Open (or create) the segment at ``base_offset``; index files stay lazy.
        ``rolling_jitter_ms`` is this segment's draw of ``segment.jitter.ms`` (see
        :meth:`LogConfig.random_segment_jitter`)."""
        path = files.log_file(dir, base_offset, file_suffix)
        log_file = FileRecords.open(
            path,
            file_already_exists=file_already_exists,
            init_file_size=config.init_file_size,
            preallocate=config.preallocate,
        )
        return cls(dir, base_offset, log_file, config, clock, rolling_jitter_ms=rolling_jitter_ms, file_suffix=file_suffix)

    # --- the append state (storage.append_state), shared with the .log's FileRecords ------------
    # The segment's bookkeeping is read and written through these names; the compiled append
    # updates the same slots in the call that writes.

    @property
    def _max_timestamp(self) -> int | None:
        return self.append_state.max_timestamp

    @_max_timestamp.setter
    def _max_timestamp(self, value: int | None) -> None:
        self.append_state.max_timestamp = value

    _offset_of_max_timestamp = TailSlot(TAIL_OFFSET_OF_MAX_TIMESTAMP)
    _bytes_since_last_index_entry = TailSlot(TAIL_BYTES_SINCE_LAST_INDEX_ENTRY)

    @property
    def _max_timestamp_in_index(self) -> bool:
        return self.append_state.max_timestamp_in_index

    @_max_timestamp_in_index.setter
    def _max_timestamp_in_index(self, value: bool) -> None:
        self.append_state.max_timestamp_in_index = value

    def arm_fast_append(self, limits: RollLimits, rules: tuple[int, bool, int, int]) -> bool:
        """Arm the append state for the compiled leader append
        (``storage.append_state.produced_batch_appender``): True when this segment holds data, has
        its index files open with room and its max timestamp known, and its first batch has a
        timestamp (the segment.ms rule then becomes a max-timestamp limit); the state then carries
        ``limits``, the descriptor and the topic's ``rules`` (max.message.bytes, compact, the two
        timestamp bounds). The caller (the log, under its lock) arms its active segment only, and
        again after any change of limits or rules; every method declared
        ``@invalidates_append_state`` here invalidates it first."""
        first = self._rolling_based_timestamp
        if not self.log.size_in_bytes or first is None or first < 0 or self._suffix or not self._state_loaded_with_room():
            return False
        limit = max_timestamp_limit(first, limits.max_segment_ms, self.rolling_jitter_ms)
        self.append_state.arm(self.log.descriptor(), self.base_offset, limits.segment_bytes, limit,
                              self._config.index_interval_bytes, rules)
        return True

    def finish_fast_append(
        self, records: bytes, first_offset: int, leader_epoch: int, delta: int, max_timestamp: int, status: int,
    ) -> None:
        """After the compiled append wrote ``records`` and left something to Python (``status``):
        PRODUCED_INDEX_DUE, the sparse index entry for the batch; PRODUCED_SHORT_WRITE, the rest of
        a write that stopped at ``append_state.written`` bytes (finished as :meth:`FileRecords.append` would),
        then the bookkeeping the kernel left undone."""
        last_offset = first_offset + delta
        size = len(records)
        if status == PRODUCED_INDEX_DUE:
            self._append_index_entry(last_offset, self.log.size_in_bytes - size)
            return
        position = self.log.size_in_bytes
        self.log.finish_produced(records, self.append_state.written, first_offset, leader_epoch)
        self._note_fast_append(position, size, last_offset, max_timestamp,
                               last_offset if max_timestamp > NO_TIMESTAMP else -1)

    def _append_index_entry(self, last_offset: int, position: int) -> None:
        """The sparse index entries of the fast appends (state loaded): (last offset, position) and
        the max timestamp so far; a full index invalidates the append state (the next append rolls). The
        caller counts the bytes since (the kernel did already)."""
        offset_index, time_index = self._offset_index, self._time_index
        offset_index.append(last_offset, position)  # type: ignore[union-attr]  # loaded
        time_index.maybe_append(self._max_timestamp, self._offset_of_max_timestamp)  # type: ignore[union-attr,arg-type]
        if offset_index.is_full() or time_index.is_full():  # type: ignore[union-attr]
            self.append_state.invalidate()

    # --- indexes (lazy) -----------------------------------------------------------------------

    @property
    def offset_index(self) -> OffsetIndex:
        if self._offset_index is None:
            self._checked_offset_entry = None
            path = files.offset_index_file(self._dir, self.base_offset, self._suffix)
            # Its state in the append state's slots, where the compiled append adds the entries it is due.
            state = self.append_state.offset_index_state()
            self._offset_index = OffsetIndex(path, self.base_offset, self._config.max_index_size, state=state)
            if self._deferred_index_size is not None:
                self._resize_offset_index(self._deferred_index_size)
        return self._offset_index

    @property
    def time_index(self) -> TimeIndex:
        if self._time_index is None:
            path = files.time_index_file(self._dir, self.base_offset, self._suffix)
            state = self.append_state.time_index_state()
            self._time_index = TimeIndex(path, self.base_offset, self._config.max_index_size, state=state)
            if self._deferred_index_size is not None:
                self._resize_time_index(self._deferred_index_size)
        return self._time_index

    @property
    def txn_index(self) -> TransactionIndex:
        if self._txn_index is None:
            path = files.transaction_index_file(self._dir, self.base_offset, self._suffix)
            self._txn_index = TransactionIndex(path, self.base_offset)
        return self._txn_index

    def has_index_files(self) -> bool:
        return files.offset_index_file(self._dir, self.base_offset, self._suffix).exists()

    @invalidates_append_state
    def sanity_check(self, dir_names: Container[str] | None = None) -> None:
        """Check every index file without reading the ``.log`` (O(1) per index).

        Kafka checks only that the offset index exists and the transaction index is sane; a cheap
        check of all three lets corrupt offset or time indexes be rebuilt at load time rather than
        misdirect reads. Raises :class:`~tidelog.errors.CorruptIndexError` (or FileNotFoundError for a missing index).
        ``dir_names``: the dir's file names, when the caller has just listed it (the loader): whether
        a transaction index exists is looked up there instead of with a ``stat``.
        """
        # FileNotFoundError when missing: Kafka recreates a missing time index empty; we rebuild it.
        # Unmapped indexes are checked by path strings: a Path per index costs more than its check.
        dir = os.fspath(self._dir)
        if self._offset_index is not None:
            self._offset_index.sanity_check()
        else:
            name = files.segment_file_name(self.base_offset, files.INDEX_SUFFIX, self._suffix)
            self._checked_offset_entry = OffsetIndex.check_file(os.path.join(dir, name), self.base_offset)
        if self._time_index is not None:
            self._time_index.sanity_check()
        else:
            name = files.segment_file_name(self.base_offset, files.TIME_INDEX_SUFFIX, self._suffix)
            last = TimeIndex.check_file(os.path.join(dir, name), self.base_offset)
            if self._max_timestamp is None:  # keep it: retention asks for it next
                self._set_max_timestamp(TimeIndex.parse_entry(last, self.base_offset), in_index=True)
        if dir_names is None:
            has_txn_index = files.transaction_index_file(self._dir, self.base_offset, self._suffix).exists()
        else:
            has_txn_index = files.segment_file_name(self.base_offset, files.TXN_INDEX_SUFFIX, self._suffix) in dir_names
        if has_txn_index:
            self.txn_index.sanity_check()

    # --- sizes and timestamps -----------------------------------------------------------------

    @property
    def size(self) -> int:
        return self.log.size_in_bytes

    @property
    def dir(self) -> Path:
        return self._dir

    @property
    def max_timestamp_and_offset_so_far(self) -> TimestampOffset:
        if self._max_timestamp is None:
            if self._time_index is None:  # read one entry; do not map the index just for this
                path = files.time_index_file(self._dir, self.base_offset, self._suffix)
                self._set_max_timestamp(TimeIndex.read_last_entry(path, self.base_offset), in_index=True)
            else:
                self._set_max_timestamp(self.time_index.last_entry, in_index=True)
        return TimestampOffset(self._max_timestamp, self._offset_of_max_timestamp)  # type: ignore[arg-type]  # set above

    @invalidates_append_state
    def _set_max_timestamp(self, entry: TimestampOffset | None, in_index: bool = False) -> None:
        """Record the max timestamp and its offset (None: unknown, read again on demand)."""
        if entry is None:
            self._max_timestamp, self._offset_of_max_timestamp = None, self.base_offset
        else:
            self._max_timestamp, self._offset_of_max_timestamp = entry.timestamp, entry.offset
        self._max_timestamp_in_index = in_index

    @property
    def max_timestamp_so_far(self) -> int:
        return self.max_timestamp_and_offset_so_far.timestamp

    @property
    def largest_timestamp(self) -> int:
        """The largest record timestamp, or the ``.log`` mtime when no record has one (Kafka's rule)."""
        ts = self.max_timestamp_so_far
        return ts if ts >= 0 else self.log.last_modified_ms()

    def first_batch_timestamp(self) -> int:
        """The max timestamp of the first batch, or Long.MAX when the segment is empty or that
        batch has no timestamp (-1): Kafka's ``getFirstBatchTimestamp`` only reports values >= 0,
        so a timestamp-less segment never looks overdue to the cleaner's max compaction lag."""
        self._load_first_batch_timestamp()
        ts = self._rolling_based_timestamp
        return ts if ts is not None and ts >= 0 else 2**63 - 1

    def _load_first_batch_timestamp(self) -> None:
        if self._rolling_based_timestamp is None:
            reader = self.reader()
            location = next(reader.batch_locations(0), None)
            for _, batch in reader.batches(0, 0 if location is None else location.size):
                self._rolling_based_timestamp = batch.max_timestamp
                break

    # --- append -------------------------------------------------------------------------------

    @invalidates_append_state
    def append(self, largest_offset: int, largest_timestamp: int, shallow_offset_of_max_timestamp: int, records: Chunks) -> None:
        """Write already-validated batches and maintain the sparse indexes (§1.12).

        ``records``: a buffer, or a tuple of buffers written back to back with one gathered write.
        ``largest_offset`` is the last offset in ``records``; ``shallow_offset_of_max_timestamp`` the
        last offset of the first batch carrying ``largest_timestamp``. Needs the log lock.
        """
        size = chunks_size(records)
        if size == 0:
            return
        position = self.log.size_in_bytes
        if position == 0:
            self._rolling_based_timestamp = largest_timestamp
        self._ensure_offset_in_range(largest_offset)
        self.log.append(records)
        if largest_timestamp > self.max_timestamp_so_far:
            self._max_timestamp, self._offset_of_max_timestamp = largest_timestamp, shallow_offset_of_max_timestamp
            self._max_timestamp_in_index = False
        if self._bytes_since_last_index_entry > self._config.index_interval_bytes:
            self.offset_index.append(largest_offset, position)
            mts = self.max_timestamp_and_offset_so_far
            self.time_index.maybe_append(mts.timestamp, mts.offset)
            self._bytes_since_last_index_entry = 0
        self._bytes_since_last_index_entry += size

    def append_if_no_roll(
        self, records: Chunks, size: int, last_offset: int, max_timestamp: int, offset_of_max_timestamp: int,
        limits: RollLimits, now: int,
    ) -> bool:
        """:func:`.roll.should_roll` then :meth:`append` for the leader's common path, in integer
        comparisons: ``records`` (``size`` bytes) are written when the segment has every piece of
        state loaded (index files open, first batch timestamp and max timestamp known) and no roll
        rule fires; else nothing happens and False comes back (the caller takes the general path,
        which loads that state or rolls). The outcome, files and state are those of the general
        path. Needs the log lock.
        """
        position = self.log.size_in_bytes
        limit = INT64_MAX  # the time rule (segment.ms with jitter) only rolls a segment holding data
        if position:
            first = self._rolling_based_timestamp
            if first is None:
                return False
            if first >= 0:
                limit = max_timestamp_limit(first, limits.max_segment_ms, self.rolling_jitter_ms)
            elif now - self._created_ms > limits.max_segment_ms - self.rolling_jitter_ms:  # the wall clock's rule
                return False
        if (roll_due(position, size, limits.segment_bytes, last_offset - self.base_offset, 0, max_timestamp, limit)
                or not self._state_loaded_with_room()):
            return False
        self.log.append(records)
        self._note_fast_append(position, size, last_offset, max_timestamp, offset_of_max_timestamp)
        return True

    def _state_loaded_with_room(self) -> bool:
        """What both fast appends need of the segment: index files open and not full, the max
        timestamp known (the general path loads them, or rolls)."""
        offset_index, time_index = self._offset_index, self._time_index
        return (offset_index is not None and time_index is not None and self._max_timestamp is not None
                and not offset_index.is_full() and not time_index.is_full())

    def _note_fast_append(
        self, position: int, size: int, last_offset: int, max_timestamp: int, offset_of_max_timestamp: int
    ) -> None:
        """What :meth:`append` does after its write, for the two fast appends (whose state
        :meth:`_state_loaded_with_room` found loaded): the rolling timestamp of a first batch, the
        max timestamp so far, the sparse index entries."""
        if not position:
            self._rolling_based_timestamp = max_timestamp
        if max_timestamp > self._max_timestamp:  # type: ignore[operator]  # loaded
            self._max_timestamp, self._offset_of_max_timestamp = max_timestamp, offset_of_max_timestamp
            self._max_timestamp_in_index = False
        if self._bytes_since_last_index_entry > self._config.index_interval_bytes:
            self._append_index_entry(last_offset, position)
            self._bytes_since_last_index_entry = 0
        self._bytes_since_last_index_entry += size

    def can_convert_to_relative_offset(self, offset: int) -> bool:
        return 0 <= offset - self.base_offset <= INT32_MAX

    def _ensure_offsets_go_up(self, batch: FileBatch, next_offset: int, position: int) -> None:
        """A batch's offsets start at ``next_offset`` (the offset after the batch before it) or
        above. A v2 batch's base offset is outside its CRC, so a damaged one passes every other
        check; kept, it would break offset lookups and then, when the index rebuild met it, cost
        Kafka's answer to an out-of-order offset: the whole segment. (A legacy entry by its last
        offset: its first needs the wrapper decompressed.)"""
        first = batch.base_offset if batch.magic >= 2 else batch.last_offset
        if first < next_offset:
            raise InvalidRecordError(
                "batch offsets go back: they must start above the batch before it",
                path=self.log.path, position=position, offset=first, expected_at_least=next_offset,
            )

    def _ensure_offset_in_range(self, offset: int) -> None:
        if not self.can_convert_to_relative_offset(offset):
            raise LogSegmentOffsetOverflowError(
                "offset does not fit in the segment's relative offset range",
                path=self.log.path, offset=offset, base_offset=self.base_offset,
            )

    # --- roll ---------------------------------------------------------------------------------

    def time_waited_for_roll(self, now: int, message_timestamp: int) -> int:
        self._load_first_batch_timestamp()
        ts = self._rolling_based_timestamp
        if ts is not None and ts >= 0:
            return message_timestamp - ts
        return now - self._created_ms

    @invalidates_append_state
    def on_become_inactive_segment(self) -> None:
        """On roll: the final time-index entry, then trim indexes and any preallocated ``.log`` tail."""
        mts = self.max_timestamp_and_offset_so_far
        self.time_index.maybe_append(mts.timestamp, mts.offset, skip_full_check=True)
        self.offset_index.trim_to_valid_size()
        self.time_index.trim_to_valid_size()
        self.log.trim()

    # --- read ---------------------------------------------------------------------------------

    def reader(self) -> SegmentReader:
        """A :class:`~tidelog.storage.segment_reader.SegmentReader` of the ``.log`` up to its
        current size (the segment's own descriptor, opened now if it was not). Under the log's
        lock, or for a sealed segment."""
        return SegmentReader(self.log.descriptor(), self.log.size_in_bytes, self.base_offset, self.log.path)

    def translate_offset(self, offset: int) -> BatchLocation | None:
        """Locate the first batch whose last offset is >= ``offset`` (index lookup, then header scan)."""
        return self.reader().search_for_offset(offset, self.offset_index.lookup(offset).position)

    def read(self, start_offset: int, max_size: int, max_position: int | None = None, min_one_message: bool = False) -> FetchDataInfo | None:
        """Bytes from the batch holding ``start_offset``; None when no batch in this segment reaches it.

        The slice starts at that batch's first byte (so it may include lower offsets) and may end
        mid-batch. With ``min_one_message`` the first batch is returned whole even past ``max_size``.
        ``max_position`` bounds the slice (the high watermark's position); None means the bound is
        not in this segment's known range, and the result carries the position but no bytes.
        """
        if max_size < 0:
            raise ValueError(f"invalid max size {max_size} for segment read")
        reader = self.reader()
        location = reader.search_for_offset(start_offset, self.offset_index.lookup(start_offset).position)
        if location is None:
            return None
        metadata = LogOffsetMetadata(start_offset, self.base_offset, location.position)
        adjusted = max(max_size, location.size) if min_one_message else max_size
        if adjusted == 0 or max_position is None:
            return FetchDataInfo(metadata, b"")
        fetch_size = max(0, min(max_position - location.position, adjusted))
        data = reader.read(location.position, fetch_size)
        return FetchDataInfo(metadata, data, first_entry_incomplete=adjusted < location.size)

    def read_next_offset(self) -> int:
        """The offset after the last batch (scans from the last offset-index entry)."""
        next_offset = self.base_offset
        for location in self.reader().batch_locations(self._last_entry_position()):
            next_offset = location.last_offset + 1
        return next_offset

    def check_tail(self) -> TailCheck:
        """Whether the ``.log`` ends with the end of a batch recovery would keep: recovery's batch
        by batch check runs from the last offset-index entry to the end (after a clean stop the
        index is whole, so that is at most ``index.interval.bytes`` plus one batch, read a chunk at
        a time; the data before the entry is not read). For an active segment reopened after a
        clean stop, whose tail nothing else checks before the next append is written after it."""
        start = self._last_entry_position()
        state = self._recover_batches_one_by_one(_RecoveryState(self.base_offset, start))
        found = state.first_batch_max_ts is not None
        # An index entry points at a batch: from it on there must be one, unless the log is empty.
        whole = state.valid_bytes == self.log.size_in_bytes and (found or state.valid_bytes == 0)
        return TailCheck(state.end_offset, state.valid_bytes, whole)

    def _last_entry_position(self) -> int:
        checked, self._checked_offset_entry = self._checked_offset_entry, None
        if checked is not None and self._offset_index is None:
            # The entry sanity_check just read: a load after a clean stop maps no index for it.
            return OffsetIndex.parse_entry(checked, self.base_offset).position
        return self.offset_index.lookup(2**63 - 1).position

    def find_offset_by_timestamp(self, timestamp: int, start_offset: int) -> TimestampAndOffset | None:
        """The first record with timestamp >= ``timestamp`` and offset >= ``start_offset`` (§3.4)."""
        return offset_for_timestamp(self.reader(), self.time_index.lookup(timestamp).offset,
                                    lambda offset: self.offset_index.lookup(offset).position, timestamp, start_offset)

    # --- recovery and truncation --------------------------------------------------------------

    @invalidates_append_state
    def recover(self) -> RecoveryResult:
        """Validate every batch, truncate an invalid tail, then rebuild the indexes from the ``.log``.

        Stops at the first batch that fails its CRC or size check, or at a partial batch, and
        truncates the ``.log`` there. The offset and time indexes are rebuilt by
        :meth:`rebuild_indexes`; the transaction index is kept up to the recovered end. Returns
        the bytes removed and the leader-epoch starts seen. Scans the whole segment: columns
        for the leading run of valid v2 batches, batch by batch from where that run ends (and
        all of it under a fault plan, whose reads must go through the seam).
        """
        if fileops.active():  # a fault plan: every read goes through the seam
            state, headers = self._recover_batches_one_by_one(_RecoveryState(self.base_offset)), None
        else:
            state, headers = self._recover_batches_columnar()
        valid_bytes, end_offset = state.valid_bytes, state.end_offset
        first_batch_max_ts, epoch_starts = state.first_batch_max_ts, state.epoch_starts
        truncated = self.log.size_in_bytes - valid_bytes
        if truncated > 0:
            log.warning("truncating %s from %d to %d bytes", self.log.path, self.log.size_in_bytes, valid_bytes)
            self.log.truncate_to(valid_bytes)
        self.rebuild_indexes(headers)
        self.offset_index.trim_to_valid_size()
        mts = self.max_timestamp_and_offset_so_far  # set by rebuild_indexes
        self.time_index.maybe_append(mts.timestamp, mts.offset, skip_full_check=True)
        self.time_index.trim_to_valid_size()
        self._recover_txn_index(end_offset, headers)
        self._rolling_based_timestamp = first_batch_max_ts
        return RecoveryResult(truncated, epoch_starts)

    def _recover_batches_columnar(self) -> tuple[_RecoveryState, BatchHeaders | None]:
        """:meth:`_recover_batches_one_by_one`'s result with columns for the leading run of valid
        v2 batches (one header walk, one CRC pass, numpy for the offset range and the epoch
        starts); the loop checks the rest from the first batch the run does not cover, so the
        stop, its warning and any legacy entries are the loop's. Also the run's headers for
        :meth:`rebuild_indexes` when they are the whole recovered ``.log``, else None."""
        headers = self.log.valid_v2_headers()
        last_offsets = headers["last_offset"]
        # Kafka's relative offset range, 0 <= last - base <= INT32_MAX, without int64 wrap-around;
        # and each batch above the one before it (the loop below says why not).
        in_range = (last_offsets >= self.base_offset) & (last_offsets <= min(self.base_offset + INT32_MAX, INT64_MAX))
        in_range[1:] &= headers["base_offset"][1:] > last_offsets[:-1]
        out = np.flatnonzero(~in_range)
        if len(out):
            headers = {name: column[:out[0]] for name, column in headers.items()}
        state = _RecoveryState(self.base_offset)
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
        if covered < self.log.size_in_bytes:
            self._recover_batches_one_by_one(state)
        return state, (headers if state.valid_bytes == covered else None)

    def _recover_batches_one_by_one(self, state: _RecoveryState) -> _RecoveryState:
        """Validate batch by batch from ``state.valid_bytes`` (0 for the whole segment), updating
        ``state``, until the first invalid batch (logged) or the end: the specification of
        :meth:`_recover_batches_columnar`, and the path for legacy entries and fault plans."""
        try:
            for position, batch in self.log.batches(state.valid_bytes):
                batch.ensure_valid(path=self.log.path, position=position)
                self._ensure_offset_in_range(batch.last_offset)
                if state.valid_bytes:  # a valid batch before it
                    self._ensure_offsets_go_up(batch, state.end_offset, position)
                state.valid_bytes += batch.size_in_bytes
                state.end_offset = batch.last_offset + 1
                if state.first_batch_max_ts is None:
                    state.first_batch_max_ts = batch.max_timestamp
                _note_epoch_start(state.epoch_starts, batch)
        except (CorruptRecordError, InvalidRecordError, LogSegmentOffsetOverflowError) as e:
            log.warning("found invalid data in %s at byte %d: %s; truncating there", self.log.path, state.valid_bytes, e)
        return state

    @invalidates_append_state
    def rebuild_indexes(self, headers: BatchHeaders | None = None) -> None:
        """Re-create the offset and time indexes from the ``.log``'s batch headers, with the entries
        single-batch appends would have made (one per ``index.interval.bytes``): after recovery,
        and for the cleaner, whose multi-megabyte appends would get one entry each. The
        transaction index is kept; nothing is validated (the caller validated or wrote the bytes).
        ``headers``: the ``.log``'s batch headers when the caller has them (recovery)."""
        if headers is None:
            headers = self.log.batch_headers()
        self.offset_index.reset()
        self.time_index.reset()
        positions, last_offsets = headers["position"], headers["last_offset"]
        # Max timestamp so far at each batch, and the first batch that reached it (its offset).
        running = np.maximum.accumulate(np.maximum(headers["max_timestamp"], NO_TIMESTAMP))
        reached = np.searchsorted(running, running, side="left")
        offsets_of_max = np.where(running > NO_TIMESTAMP, last_offsets[reached], self.base_offset)
        picks = _index_entry_batches(positions, self._config.index_interval_bytes)
        self._make_room_for_entries(len(picks))
        self.offset_index.append_entries(last_offsets[picks], positions[picks])
        self.time_index.append_entries(running[picks], offsets_of_max[picks])
        last_entry = int(positions[picks[-1]]) if len(picks) else 0
        end = int(positions[-1] + headers["size"][-1]) if len(positions) else 0
        max_ts = int(running[-1]) if len(running) else NO_TIMESTAMP
        self._set_max_timestamp(TimestampOffset(max_ts, int(offsets_of_max[-1]) if len(running) else self.base_offset))
        self._bytes_since_last_index_entry = end - last_entry

    def _make_room_for_entries(self, entries: int) -> None:
        """Grow the (just reset) indexes to hold ``entries`` rebuilt entries, and the time index's
        final one: with ``segment.index.bytes`` lowered since the segment was written, a rebuild
        keeps every entry and the segment counts as full (as :meth:`resize_indexes` does), where
        a fixed size would fail the load."""
        if entries > self.offset_index.max_entries:
            self.offset_index.resize(entries * self.offset_index.ENTRY_SIZE)
        if entries + 1 > self.time_index.max_entries:
            self.time_index.resize((entries + 1) * self.time_index.ENTRY_SIZE)

    def _recover_txn_index(self, end_offset: int, headers: BatchHeaders | None) -> None:
        """Kafka rebuilds the ``.txnindex`` here, from the producer state at the segment's base
        offset, which this segment does not have: it keeps the file's entries for transactions
        that ended below ``end_offset`` (a file that does not read is emptied) and leaves the
        rebuild to the owning log, which checks the index against the ABORT markers in the
        ``.log`` before any entry is served (:class:`.TxnIndexCheck`), right after the
        load when :attr:`txn_index_suspect` says so: the recovered data holds transaction markers
        (or ``headers``, the recovered batches' columns, are not known), or the file was unreadable."""
        self.txn_index_checked = False
        self.txn_index_suspect = headers is None or bool(np.any((headers["attributes"] & _TXN_MARKER) == _TXN_MARKER))
        try:
            self.txn_index.sanity_check()
            self.txn_index.truncate_to(end_offset)
        except CorruptIndexError as e:
            log.warning("%s: dropping an unreadable transaction index: %s", self.log.path, e)
            self.txn_index.reset()
            self.txn_index_suspect = True

    @invalidates_append_state
    def truncate_to(self, offset: int) -> int:
        """Remove every batch whose last offset is >= ``offset``; returns bytes removed."""
        location = self.translate_offset(offset)
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        self.txn_index.truncate_to(offset)
        self.resize_indexes(self._config.max_index_size)
        removed = 0 if location is None else self.log.truncate_to(location.position)
        if self.log.size_in_bytes == 0:
            self._created_ms = self._clock.milliseconds()
            self._rolling_based_timestamp = None
        self._bytes_since_last_index_entry = 0
        self._set_max_timestamp(None)
        if self.size > 0:
            self._reload_max_timestamp()
        return removed

    @invalidates_append_state
    def resize_indexes(self, size: int) -> None:
        """Kafka's ``resizeIndexes`` (active segment after load or truncation), except that an index
        is never cut below its entries: with ``segment.index.bytes`` lowered since they were written,
        the segment is then full (the time index keeping its slot for the roll's final entry) and
        rolls on the next append, where a plain resize would fail the load."""
        self._deferred_index_size = None
        self._resize_offset_index(size)
        self._resize_time_index(size)

    def _resize_offset_index(self, size: int) -> None:
        self.offset_index.resize(max(size, self.offset_index.size_in_bytes))

    def _resize_time_index(self, size: int) -> None:
        self.time_index.resize(max(size, (self.time_index.entries + 1) * self.time_index.ENTRY_SIZE))

    @invalidates_append_state
    def defer_index_resize(self, size: int) -> None:
        """:meth:`resize_indexes` on first use instead of now, releasing maps and descriptors.

        For the active segment right after loading (its index files are trimmed then): opening a
        data dir of many partitions maps no index and holds no descriptor until a partition is
        used, where an eager resize costs two maps and two descriptors per partition (Python's
        mmap keeps a duplicate descriptor) and hits the process's open-file limit.
        """
        for index in (self._offset_index, self._time_index):
            if index is not None:
                index.trim_to_valid_size()  # a reopened index trusts its file length
        self.release_indexes()
        self.log.close()
        self._deferred_index_size = size

    def _reload_max_timestamp(self) -> None:
        last = self.time_index.last_entry
        best = TimestampOffset(last.timestamp, last.offset)
        start = self.offset_index.lookup(last.offset).position
        for _, batch in self.reader().batches(start):
            if batch.max_timestamp > best.timestamp:
                best = TimestampOffset(batch.max_timestamp, batch.last_offset)
        self._set_max_timestamp(best)

    # --- files --------------------------------------------------------------------------------

    def flush(self) -> None:
        """fsync the ``.log`` and every index this process wrote, and create index files that do
        not exist yet (as Kafka's flush does for a new empty segment). Indexes never opened here
        are left unmapped: nothing of theirs can be unsynced (a shutdown flushes every log)."""
        self.log.flush()
        for opened, file_of, index in ((self._offset_index, files.offset_index_file, "offset_index"),
                                       (self._time_index, files.time_index_file, "time_index")):
            if opened is not None:
                opened.flush()
            elif not file_of(self._dir, self.base_offset, self._suffix).exists():
                getattr(self, index).flush()
        if self._txn_index is not None:
            self._txn_index.flush()

    @invalidates_append_state
    def close(self) -> None:
        """Final time-index entry, trim, close. Index files are created if still lazy."""
        # Known only if this process appended, recovered or looked it up; when it came from the
        # unopened time index itself there is nothing to append (and no reason to map it).
        if self._max_timestamp is not None and not (self._max_timestamp_in_index and self._time_index is None):
            self.time_index.maybe_append(self._max_timestamp, self._offset_of_max_timestamp, skip_full_check=True)
        self.close_handlers()
        self.log.trim()

    @invalidates_append_state
    def close_handlers(self) -> None:
        """Release files without writing anything more (indexes trimmed by their own close)."""
        for index in (self._offset_index, self._time_index, self._txn_index):
            if index is not None:
                index.close()
        self.log.close()

    def all_files(self) -> list[Path]:
        return [
            self.log.path,
            files.offset_index_file(self._dir, self.base_offset, self._suffix),
            files.time_index_file(self._dir, self.base_offset, self._suffix),
            files.transaction_index_file(self._dir, self.base_offset, self._suffix),
        ]

    @invalidates_append_state
    def change_file_suffixes(self, old_suffix: str, new_suffix: str) -> None:
        """Rename every existing file of the segment, e.g. ``""`` → ``.deleted`` (lazy indexes stay lazy)."""
        if old_suffix != self._suffix:
            raise ValueError(f"segment {self.base_offset} has suffix {self._suffix!r}, not {old_suffix!r}")
        self.log.rename_to(files.log_file(self._dir, self.base_offset, new_suffix))
        pairs = (
            (self._offset_index, files.offset_index_file),
            (self._time_index, files.time_index_file),
            (self._txn_index, files.transaction_index_file),
        )
        for index, name in pairs:
            old_path, new_path = name(self._dir, self.base_offset, old_suffix), name(self._dir, self.base_offset, new_suffix)
            if index is not None:
                # Always: rename_to also records the new path when the file does not exist yet
                # (a loaded txn index with no aborted transaction), so a later first append
                # creates it under the segment's current suffix, not the old one.
                index.rename_to(new_path)
            elif old_path.exists():
                fileops.rename(old_path, new_path)
        self._suffix = new_suffix

    @property
    def last_modified_ms(self) -> int:
        """The ``.log`` file's modification time (time retention's fallback without timestamps)."""
        return self.log.last_modified_ms()

    def set_last_modified_ms(self, ms: int) -> None:
        """Set the modification time of the ``.log``, ``.index`` and ``.timeindex`` files (the
        cleaner keeps the replaced segments' time so retention and legacy tombstones age as before)."""
        self.log.set_last_modified_ms(ms)
        for name in (files.offset_index_file, files.time_index_file):  # a lazy index may have no file yet
            path = name(self._dir, self.base_offset, self._suffix)
            if path.exists():
                set_file_mtime(path, ms)

    @invalidates_append_state
    def release_indexes(self) -> None:
        """Unmap index files without trimming them; they reopen lazily on next use.

        Keeps memory maps (bounded by ``vm.max_map_count``) and descriptors for segments nobody is
        reading. Only for segments whose index files are trimmed (sealed, or just loaded): the
        length of a reopened index file is trusted.
        """
        for index in (self._offset_index, self._time_index):
            if index is not None:
                index.close_handler()
        self._offset_index = self._time_index = None

    @invalidates_append_state
    def delete_files(self) -> None:
        """Unlink every file of the segment (used for ``.deleted`` files after the delay)."""
        self.close_handlers()
        for path in self.all_files():
            fileops.unlink(path, missing_ok=True)

    def __repr__(self) -> str:
        return f"LogSegment(base_offset={self.base_offset}, size={self.size}, dir={str(self._dir)!r})"


@dataclass(slots=True)
class _RecoveryState:
    """Where recovery's batch checks have got to: the end of the last valid batch, the offset
    after it, the first batch's max timestamp and the leader-epoch starts so far."""

    end_offset: int
    valid_bytes: int = 0
    first_batch_max_ts: int | None = None
    epoch_starts: list[tuple[int, int]] = field(default_factory=list)


def _note_epoch_start(epoch_starts: list[tuple[int, int]], batch: FileBatch) -> None:
    epoch = batch.partition_leader_epoch
    if batch.magic >= 2 and epoch >= 0 and (not epoch_starts or epoch_starts[-1][0] != epoch):
        epoch_starts.append((epoch, batch.base_offset))


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
