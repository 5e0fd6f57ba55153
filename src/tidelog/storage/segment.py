"""LogSegment: one ``.log`` file and its indexes, named by the segment's base offset.

Index entries are sparse (kafka-storage.md §1.12): one offset-index entry and one time-index
entry per append call once more than ``index.interval.bytes`` were written since the last entry,
so lookups land within a few KiB of the target and finish with a short header scan. The first
append of a segment never gets an entry; lookups fall back to ``(base_offset, 0)``.
Index files are created lazily, on first use (Kafka's ``LazyIndex``): a freshly rolled segment
has only its ``.log`` until something appends to, reads or flushes it. What loading and recovery
do is :mod:`.segment_recovery`'s; the roll rules are :mod:`.roll`'s.

Not thread-safe: the owning :class:`~tidelog.storage.log.Log` holds its lock around every
mutating call. Reads of sealed segments are safe alongside appends to the active one.
"""

from __future__ import annotations

from collections.abc import Container
from pathlib import Path

from tidelog.clock import Clock
from tidelog.errors import LogSegmentOffsetOverflowError
from tidelog.records import NO_TIMESTAMP
from tidelog.records.varint import INT32_MAX, INT64_MAX
from tidelog.storage import file_slice, fileops, files, segment_recovery
from tidelog.storage._append_kernel import (
    PRODUCED_INDEX_DUE,
    TAIL_BYTES_SINCE_LAST_INDEX_ENTRY,
    TAIL_OFFSET_OF_MAX_TIMESTAMP,
    roll_due,
)
from tidelog.storage.append_state import TailSlot, invalidates_append_state
from tidelog.storage.fetch_info import FetchDataInfo, LogOffsetMetadata, TimestampAndOffset
from tidelog.storage.file_records import BatchHeaders, BatchLocation, Chunks, FileRecords, chunks_size, set_file_mtime
from tidelog.storage.file_slice import FileSlice
from tidelog.storage.index import OffsetIndex, TimeIndex, TimestampOffset
from tidelog.storage.log_config import SegmentConfig
from tidelog.storage.roll import RollLimits, max_timestamp_limit
from tidelog.storage.segment_reader import SegmentReader, offset_for_timestamp
from tidelog.storage.segment_recovery import RecoveryResult, TailCheck
from tidelog.storage.txn_index import TransactionIndex



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
        # Whether the log has checked the .txnindex against the .log's ABORT markers (TxnIndexCheck),
        # and whether it should as soon as the segment is loaded (recovery sets both).
        self.txn_index_checked = False
        self.txn_index_suspect = False
        # The bookkeeping lives in the append state (storage.append_state), which the .log's
        # FileRecords shares and the compiled append updates in the call that writes.
        state = self.append_state = log_file.append_state  # a new file's: zeros, not armed
        self.tail_slots = state.tail_slots  # for the TailSlot attributes
        self._bytes_since_last_index_entry = 0
        self._rolling_based_timestamp: int | None = None
        self._created_ms = clock.milliseconds()
        state.max_timestamp, state.max_timestamp_in_index = None, False  # None: not known yet, read on demand
        self._offset_of_max_timestamp = base_offset
        self._deferred_index_size: int | None = None  # see defer_index_resize
        self._checked_offset_entry: bytes | None = None  # see note_checked_offset_entry

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
        log_file = FileRecords.open(path, file_already_exists=file_already_exists, init_file_size=config.init_file_size,
                                    preallocate=config.preallocate)
        return cls(dir, base_offset, log_file, config, clock, rolling_jitter_ms=rolling_jitter_ms, file_suffix=file_suffix)

    # --- the append state (storage.append_state): slots the compiled append updates as it writes -

    _offset_of_max_timestamp = TailSlot(TAIL_OFFSET_OF_MAX_TIMESTAMP)
    _bytes_since_last_index_entry = TailSlot(TAIL_BYTES_SINCE_LAST_INDEX_ENTRY)

    def arm_fast_append(self, limits: RollLimits, rules: tuple[int, bool, int, int]) -> bool:
        """Arm the append state for the compiled leader append: True when this segment holds data,
        has its index files open with room and its max timestamp known, and its first batch has a
        timestamp (segment.ms is then a max-timestamp limit). The log arms its active segment only,
        under its lock, again after any change of ``limits`` or ``rules`` (max.message.bytes,
        compact, the two timestamp bounds); every ``@invalidates_append_state`` method disarms it."""
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
        time_index.maybe_append(self.append_state.max_timestamp, self._offset_of_max_timestamp)  # type: ignore[union-attr,arg-type]
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
        """Check every index file without reading the ``.log`` (:func:`.segment_recovery.sanity_check`)."""
        segment_recovery.sanity_check(self, dir_names)

    # --- what loading and recovery read and set (storage.segment_recovery) ----------------------

    @property
    def config(self) -> SegmentConfig:
        return self._config

    @property
    def file_suffix(self) -> str:
        return self._suffix

    def mapped_indexes(self) -> tuple[OffsetIndex | None, TimeIndex | None]:
        """The offset and time indexes where mapped (None: not opened yet); opens nothing."""
        return self._offset_index, self._time_index

    def note_checked_offset_entry(self, entry: bytes) -> None:
        """The offset index's last entry as a check read it from the unmapped file (b"": none),
        for :meth:`take_checked_offset_entry`; mapping the index drops it."""
        self._checked_offset_entry = entry

    def take_checked_offset_entry(self) -> bytes | None:
        """That entry, once, while the index is still unmapped; else None."""
        checked, self._checked_offset_entry = self._checked_offset_entry, None
        return checked if self._offset_index is None else None

    @invalidates_append_state
    def set_first_batch_timestamp(self, timestamp: int | None) -> None:
        """The first batch's max timestamp as recovery found it (None: no batch)."""
        self._rolling_based_timestamp = timestamp

    @invalidates_append_state
    def set_rebuilt_index_state(self, max_timestamp: TimestampOffset, bytes_since_last_index_entry: int) -> None:
        """The max timestamp and the index-entry spacing as an index rebuild leaves them."""
        self.set_max_timestamp(max_timestamp)
        self._bytes_since_last_index_entry = bytes_since_last_index_entry

    # --- sizes and timestamps -----------------------------------------------------------------

    @property
    def size(self) -> int:
        return self.log.size_in_bytes

    @property
    def dir(self) -> Path:
        return self._dir

    @property
    def max_timestamp_and_offset_so_far(self) -> TimestampOffset:
        if self.append_state.max_timestamp is None:
            if self._time_index is None:  # read one entry; do not map the index just for this
                path = files.time_index_file(self._dir, self.base_offset, self._suffix)
                self.set_max_timestamp(TimeIndex.read_last_entry(path, self.base_offset), in_index=True)
            else:
                self.set_max_timestamp(self.time_index.last_entry, in_index=True)
        return TimestampOffset(self.append_state.max_timestamp, self._offset_of_max_timestamp)  # type: ignore[arg-type]  # set above

    @invalidates_append_state
    def set_max_timestamp(self, entry: TimestampOffset | None, in_index: bool = False) -> None:
        """Record the max timestamp and its offset (None: unknown, read again on demand);
        ``in_index``: read from the time index, so closing need not append it."""
        state = self.append_state
        if entry is None:
            state.max_timestamp, self._offset_of_max_timestamp = None, self.base_offset
        else:
            state.max_timestamp, self._offset_of_max_timestamp = entry.timestamp, entry.offset
        state.max_timestamp_in_index = in_index

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
        self.ensure_offset_in_range(largest_offset)
        self.log.append(records)
        if largest_timestamp > self.max_timestamp_so_far:
            state = self.append_state
            state.max_timestamp, self._offset_of_max_timestamp = largest_timestamp, shallow_offset_of_max_timestamp
            state.max_timestamp_in_index = False
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
        """:func:`.roll.should_roll` then :meth:`append`, in integer comparisons, for the leader's
        common path: writes ``records`` (``size`` bytes) and returns True when the segment's state
        is loaded (index files open with room, first batch and max timestamps known) and no roll
        rule fires; else writes nothing and returns False (the general path loads or rolls). Files
        and state end as the general path leaves them. Needs the log lock."""
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
        return (offset_index is not None and time_index is not None and self.append_state.max_timestamp is not None
                and not offset_index.is_full() and not time_index.is_full())

    def _note_fast_append(
        self, position: int, size: int, last_offset: int, max_timestamp: int, offset_of_max_timestamp: int
    ) -> None:
        """What :meth:`append` does after its write, for the two fast appends (whose state
        :meth:`_state_loaded_with_room` found loaded): the rolling timestamp of a first batch, the
        max timestamp so far, the sparse index entries."""
        if not position:
            self._rolling_based_timestamp = max_timestamp
        state = self.append_state
        if max_timestamp > state.max_timestamp:  # type: ignore[operator]  # loaded
            state.max_timestamp, self._offset_of_max_timestamp = max_timestamp, offset_of_max_timestamp
            state.max_timestamp_in_index = False
        if self._bytes_since_last_index_entry > self._config.index_interval_bytes:
            self._append_index_entry(last_offset, position)
            self._bytes_since_last_index_entry = 0
        self._bytes_since_last_index_entry += size

    def can_convert_to_relative_offset(self, offset: int) -> bool:
        return 0 <= offset - self.base_offset <= INT32_MAX

    def ensure_offset_in_range(self, offset: int) -> None:
        """Raises LogSegmentOffsetOverflowError when ``offset`` is outside the 32-bit relative range."""
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

    def read(self, start_offset: int, max_size: int, max_position: int | None = None, min_one_message: bool = False,
             *, as_slice: bool = False) -> FetchDataInfo | None:
        """Bytes from the batch holding ``start_offset``; None when no batch in this segment reaches it.

        The slice starts at that batch's first byte (so it may include lower offsets) and may end
        mid-batch. With ``min_one_message`` the first batch is returned whole even past ``max_size``.
        ``max_position`` bounds the slice (the high watermark's position); None means the bound is
        not in this segment's known range, and the result carries the position but no bytes.
        ``as_slice``: the range as a :class:`~tidelog.storage.file_slice.FileSlice` (own descriptor,
        unread; the caller closes it) when it holds ``file_slice.MIN_SLICE_BYTES`` and a descriptor is left.
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
        data: bytes | FileSlice | None = None
        if as_slice:
            size = min(fetch_size, reader.limit - location.position)  # as reader.read bounds it
            if size >= file_slice.MIN_SLICE_BYTES:
                data = FileSlice.of(reader.fd, location.position, size, reader.path)
        if data is None:
            data = reader.read(location.position, fetch_size)
        return FetchDataInfo(metadata, data, first_entry_incomplete=adjusted < location.size)

    def read_next_offset(self) -> int:
        """The offset after the last batch (scans from the last offset-index entry)."""
        return segment_recovery.read_next_offset(self)

    def check_tail(self) -> TailCheck:
        """Whether the ``.log`` ends with the end of a batch recovery would keep (:func:`.segment_recovery.check_tail`)."""
        return segment_recovery.check_tail(self)

    def find_offset_by_timestamp(self, timestamp: int, start_offset: int) -> TimestampAndOffset | None:
        """The first record with timestamp >= ``timestamp`` and offset >= ``start_offset`` (§3.4)."""
        return offset_for_timestamp(self.reader(), self.time_index.lookup(timestamp).offset,
                                    lambda offset: self.offset_index.lookup(offset).position, timestamp, start_offset)

    # --- recovery and truncation --------------------------------------------------------------

    @invalidates_append_state
    def recover(self) -> RecoveryResult:
        """Validate every batch, truncate an invalid tail, rebuild the indexes (:func:`.segment_recovery.recover`)."""
        return segment_recovery.recover(self)

    @invalidates_append_state
    def rebuild_indexes(self, headers: BatchHeaders | None = None) -> None:
        """Re-create the offset and time indexes from the ``.log`` (:func:`.segment_recovery.rebuild_indexes`)."""
        segment_recovery.rebuild_indexes(self, headers)

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
        self.set_max_timestamp(None)
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
        """:meth:`resize_indexes` on first use instead of now, releasing maps and descriptors: for
        the active segment right after loading (its index files trimmed), so that a data dir of
        many partitions holds no map or descriptor (two each, eagerly) for a partition not used."""
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
        self.set_max_timestamp(best)

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
        state = self.append_state
        if state.max_timestamp is not None and not (state.max_timestamp_in_index and self._time_index is None):
            self.time_index.maybe_append(state.max_timestamp, self._offset_of_max_timestamp, skip_full_check=True)
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
        names = (files.offset_index_file, files.time_index_file, files.transaction_index_file)
        return [self.log.path, *(name(self._dir, self.base_offset, self._suffix) for name in names)]

    @invalidates_append_state
    def change_file_suffixes(self, old_suffix: str, new_suffix: str) -> None:
        """Rename every existing file of the segment, e.g. ``""`` → ``.deleted`` (lazy indexes stay lazy)."""
        if old_suffix != self._suffix:
            raise ValueError(f"segment {self.base_offset} has suffix {self._suffix!r}, not {old_suffix!r}")
        self.log.rename_to(files.log_file(self._dir, self.base_offset, new_suffix))
        pairs = ((self._offset_index, files.offset_index_file), (self._time_index, files.time_index_file),
                 (self._txn_index, files.transaction_index_file))
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
        """Unmap index files without trimming them (they reopen lazily), saving maps and
        descriptors for segments nobody reads. Only for segments whose index files are trimmed
        (sealed, or just loaded): a reopened index trusts its file length."""
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
