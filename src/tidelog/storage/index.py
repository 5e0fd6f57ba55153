"""A segment's offset index (``.index``) and time index (``.timeindex``): sparse, sorted, memory-mapped.

Byte layouts (big-endian, no header, no checksum; shared/reference/kafka-storage.md §1.8, §1.9;
declared in :mod:`tidelog.records.layout`)::

    .index — 8-byte entries
    +------+------+----------------+----------------------------------------------------------+
    | byte | type | field          | meaning                                                  |
    +------+------+----------------+----------------------------------------------------------+
    | 0    | i32  | relativeOffset | offset - segment base offset, in [0, 2^31-1]             |
    | 4    | i32  | position       | byte position in the .log where the batch (or append     |
    |      |      |                | chunk) whose LAST offset is ``offset`` starts             |
    +------+------+----------------+----------------------------------------------------------+
    e.g. base 100, offset 150 at position 4096 -> 00000032 00001000

    .timeindex — 12-byte entries
    +------+------+----------------+----------------------------------------------------------+
    | 0    | i64  | timestamp      | largest timestamp seen in the segment up to and          |
    |      |      |                | including the batch whose last offset is ``offset``      |
    | 8    | i32  | relativeOffset | offset - segment base offset                             |
    +------+------+----------------+----------------------------------------------------------+

Offset-index offsets strictly increase; time-index timestamps strictly increase and their offsets
never decrease. Relative offsets never leave the index classes: every offset in and out is absolute.

The shared core (file, mapping, lookups, lifecycle, state, thread-safety) is
:class:`~tidelog.storage.mapped_index.MappedIndex`.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tidelog.errors import (
    CorruptIndexError,
    IndexFullError,
    InvalidOffsetError,
    StorageError,
)
from tidelog.records.layout import (
    OFFSET_INDEX_DTYPE,
    OFFSET_INDEX_ENTRY,
    OFFSET_INDEX_ENTRY_SIZE,
    TIME_INDEX_DTYPE,
    TIME_INDEX_ENTRY,
    TIME_INDEX_ENTRY_SIZE,
)
from tidelog.storage._append_kernel import (
    INDEX_CAPACITY,
    INDEX_ENTRIES,
    INDEX_LAST_KEY,
    INDEX_LAST_OFFSET,
)
from tidelog.storage import fileops
from tidelog.storage.append_state import TailSlot
from tidelog.storage.mapped_index import MappedIndex

NO_TIMESTAMP = -1  # Kafka's RecordBatch.NO_TIMESTAMP

_INT32_MAX = 2**31 - 1
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_OFFSET_ENTRY = OFFSET_INDEX_DTYPE  # .index, 8 bytes
_TIME_ENTRY = TIME_INDEX_DTYPE  # .timeindex, 12 bytes
_INT32, _INT64 = struct.Struct(">i"), struct.Struct(">q")  # one column of an entry


@dataclass(frozen=True, slots=True)
class OffsetPosition:
    """Offset-index entry: the batch whose last offset is ``offset`` starts at ``.log`` byte ``position``."""

    offset: int
    position: int


@dataclass(frozen=True, slots=True)
class TimestampOffset:
    """Time-index entry: ``timestamp`` is the largest timestamp up to the batch whose last offset is ``offset``."""

    timestamp: int
    offset: int


class OffsetIndex(MappedIndex):
    """Sparse map from offset to ``.log`` byte position for one segment (``<base>.index``)."""

    ENTRY_SIZE = OFFSET_INDEX_ENTRY_SIZE
    _ENTRY = OFFSET_INDEX_ENTRY
    _OFFSET_COLUMN = (_INT32.unpack_from, OFFSET_INDEX_DTYPE.fields["relative_offset"][1])
    _POSITION_COLUMN = (_INT32.unpack_from, OFFSET_INDEX_DTYPE.fields["position"][1])
    _KIND = "offset index"

    _last_offset = TailSlot(INDEX_LAST_KEY)

    @classmethod
    def parse_entry(cls, raw: bytes, base_offset: int) -> OffsetPosition:
        """An entry from its 8 bytes; ``(base_offset, 0)`` for no bytes (an empty index), as
        :meth:`lookup` answers then."""
        if not raw:
            return OffsetPosition(base_offset, 0)
        relative, position = cls._ENTRY.unpack(raw)
        return OffsetPosition(base_offset + relative, position)

    @property
    def last_offset(self) -> int:
        """Offset of the last entry; ``base_offset`` when empty."""
        return self._last_offset

    def lookup(self, target_offset: int) -> OffsetPosition:
        """The entry with the largest offset <= ``target_offset``, else ``(base_offset, 0)``."""
        unpack, at = self._OFFSET_COLUMN
        slot = self._floor_slot(unpack, at, target_offset - self._base_offset)
        return OffsetPosition(self._base_offset, 0) if slot < 0 else self._parse(slot)

    def entry(self, n: int) -> OffsetPosition:
        """The ``n``-th entry; :class:`IndexStateError` unless ``0 <= n < entries``."""
        self._check_slot(n)
        return self._parse(n)

    def fetch_upper_bound_offset(self, fetch_position: int, fetch_size: int) -> OffsetPosition | None:
        """The first entry whose position is >= ``fetch_position + fetch_size``, or None.

        Its offset bounds what a fetch of ``fetch_size`` bytes from ``fetch_position`` can
        return (used to limit the aborted-transaction search).
        """
        unpack, at = self._POSITION_COLUMN
        slot = self._floor_slot(unpack, at, fetch_position + fetch_size - 1) + 1
        return self._parse(slot) if slot < self._entries else None

    def append(self, offset: int, position: int) -> None:
        """Add ``(offset, position)``; ``offset`` must be above :attr:`last_offset` when non-empty.

        Raises :class:`IndexFullError`, :class:`InvalidOffsetError` (offset not increasing, or
        position outside [0, 2^31-1]), :class:`IndexOffsetOverflowError`, or
        :class:`IndexStateError` (read-only or closed), checked in that order.
        """
        relative = offset - self._base_offset
        slots = self.tail_slots
        entries = slots[INDEX_ENTRIES]
        if (0 <= relative <= _INT32_MAX and 0 <= position <= _INT32_MAX and (offset > slots[INDEX_LAST_KEY] or not entries)
                and entries < slots[INDEX_CAPACITY] and self._writable and not self._closed):
            # The common case, every check below passing, in one test.
            self._ENTRY.pack_into(self._buffer, entries * 8, relative, position)
            slots[INDEX_LAST_KEY] = offset
            slots[INDEX_ENTRIES] = entries + 1
            return
        self._require_open()
        if self.is_full():
            raise IndexFullError("attempt to append to a full offset index", path=self._path, entries=self._entries)
        if self._entries and offset <= self._last_offset:
            raise InvalidOffsetError(
                "offset index append is not above the last offset",
                path=self._path, offset=offset, last_offset=self._last_offset, slot=self._entries,
            )
        relative = self._relative_offset(offset)
        if not 0 <= position <= _INT32_MAX:
            raise InvalidOffsetError("offset index position outside [0, 2^31-1]", path=self._path, position=position)
        self._put_entry(relative, position)
        self._last_offset = offset

    def append_entries(self, offsets: np.ndarray, positions: np.ndarray) -> None:
        """:meth:`append` of many entries at once (one copy into the map, for index rebuilds):
        the same checks, raised before anything is written, naming the first entry that fails."""
        if len(offsets) == 0:
            return
        self._require_open()
        offsets, positions = np.asarray(offsets, np.int64), np.asarray(positions, np.int64)
        if self._entries + len(offsets) > self.max_entries:
            raise IndexFullError("attempt to append past the end of an offset index", path=self._path,
                                 entries=self._entries, appending=len(offsets))
        previous = np.concatenate(([self._last_offset if self._entries else offsets[0] - 1], offsets[:-1]))
        bad = np.flatnonzero(offsets <= previous)
        if len(bad):
            at = int(bad[0])
            raise InvalidOffsetError("offset index append is not above the last offset", path=self._path,
                                     offset=int(offsets[at]), last_offset=int(previous[at]), slot=self._entries + at)
        relative = self._relative_offsets(offsets)
        outside = np.flatnonzero((positions < 0) | (positions > _INT32_MAX))
        if len(outside):
            raise InvalidOffsetError("offset index position outside [0, 2^31-1]", path=self._path,
                                     position=int(positions[outside[0]]))
        entries = np.empty(len(offsets), _OFFSET_ENTRY)
        entries["relative_offset"], entries["position"] = relative, positions
        self._put_entries(entries)
        self._last_offset = int(offsets[-1])

    def truncate_to(self, offset: int) -> None:
        """Drop every entry whose offset is >= ``offset``."""
        self._truncate_to_offset(offset)

    @classmethod
    def _relative_offset_of(cls, entry: bytes) -> int:
        return cls._ENTRY.unpack(entry)[0]

    def _parse(self, slot: int) -> OffsetPosition:
        relative, position = self._ENTRY.unpack_from(self._buffer, slot * 8)  # caller checked open
        return OffsetPosition(self._base_offset + relative, position)

    def _on_entries_changed(self) -> None:
        self._last_offset = self._parse(self._entries - 1).offset if self._entries else self._base_offset


class TimeIndex(MappedIndex):
    """Sparse map from timestamp to offset for one segment (``<base>.timeindex``)."""

    ENTRY_SIZE = TIME_INDEX_ENTRY_SIZE
    _FREE_SLOTS_KEPT = 1  # for the final entry a roll or close appends with ``skip_full_check``
    _ENTRY = TIME_INDEX_ENTRY
    _TIMESTAMP_COLUMN = (_INT64.unpack_from, TIME_INDEX_DTYPE.fields["timestamp"][1])
    _OFFSET_COLUMN = (_INT32.unpack_from, TIME_INDEX_DTYPE.fields["relative_offset"][1])
    _KIND = "time index"

    @property
    def _last_entry(self) -> TimestampOffset:
        slots = self.tail_slots
        return TimestampOffset(slots[INDEX_LAST_KEY], slots[INDEX_LAST_OFFSET])

    @_last_entry.setter
    def _last_entry(self, entry: TimestampOffset) -> None:
        self.tail_slots[INDEX_LAST_KEY], self.tail_slots[INDEX_LAST_OFFSET] = entry.timestamp, entry.offset

    @classmethod
    def parse_entry(cls, raw: bytes, base_offset: int) -> TimestampOffset:
        """An entry from its 12 bytes; ``(-1, base_offset)`` for no bytes (an empty index)."""
        if not raw:
            return TimestampOffset(NO_TIMESTAMP, base_offset)
        timestamp, relative = cls._ENTRY.unpack(raw)
        return TimestampOffset(timestamp, base_offset + relative)

    @classmethod
    def read_last_entry(cls, path: Path, base_offset: int) -> TimestampOffset:
        """The last entry of the index file at ``path`` with one ``pread``: no map, no resize, no
        descriptor kept (retention asks this of thousands of segments it never reads). The file
        length is trusted, as when an index is opened. ``(-1, base_offset)`` when missing or empty;
        :class:`StorageError` when it cannot be read."""
        try:
            fd = fileops.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return TimestampOffset(NO_TIMESTAMP, base_offset)
        except OSError as e:
            raise StorageError(f"cannot open {cls._KIND}", path=path, operation="open") from e
        try:
            entries = os.fstat(fd).st_size // cls.ENTRY_SIZE
            if entries == 0:
                return TimestampOffset(NO_TIMESTAMP, base_offset)
            data = os.pread(fd, cls.ENTRY_SIZE, (entries - 1) * cls.ENTRY_SIZE)
        except OSError as e:
            raise StorageError(f"cannot read {cls._KIND}", path=path, operation="read") from e
        finally:
            os.close(fd)
        return cls.parse_entry(data, base_offset)


    @property
    def last_entry(self) -> TimestampOffset:
        """The last entry; ``(-1, base_offset)`` when empty."""
        return self._last_entry

    def lookup(self, target_timestamp: int) -> TimestampOffset:
        """The entry with the largest timestamp <= ``target_timestamp``, else ``(-1, base_offset)``."""
        unpack, at = self._TIMESTAMP_COLUMN
        slot = self._floor_slot(unpack, at, target_timestamp)
        return TimestampOffset(NO_TIMESTAMP, self._base_offset) if slot < 0 else self._parse(slot)

    def entry(self, n: int) -> TimestampOffset:
        """The ``n``-th entry; :class:`IndexStateError` unless ``0 <= n < entries``."""
        self._check_slot(n)
        return self._parse(n)

    def maybe_append(self, timestamp: int, offset: int, skip_full_check: bool = False) -> None:
        """Add ``(timestamp, offset)`` if ``timestamp`` is above the last entry's (so -1 never lands).

        Raises :class:`IndexFullError` (full, unless ``skip_full_check``; or no slot at all),
        :class:`InvalidOffsetError` when the offset or the timestamp goes back (or the timestamp
        is outside int64), :class:`IndexOffsetOverflowError`, :class:`IndexStateError`.
        """
        # The two common cases, every check below passing, in one test each (a large batch asks
        # this on every append): no newer timestamp, or a newer one landing.
        slots = self.tail_slots
        entries, last_timestamp = slots[INDEX_ENTRIES], slots[INDEX_LAST_KEY]
        if (offset >= slots[INDEX_LAST_OFFSET] and not self._closed
                and (skip_full_check or entries < slots[INDEX_CAPACITY])):
            if timestamp == last_timestamp:
                return
            relative = offset - self._base_offset
            if (last_timestamp < timestamp <= _INT64_MAX and 0 <= relative <= _INT32_MAX and self._writable
                    and entries < self._length // 12):
                self._ENTRY.pack_into(self._buffer, entries * 12, timestamp, relative)
                slots[INDEX_LAST_KEY], slots[INDEX_LAST_OFFSET] = timestamp, offset
                slots[INDEX_ENTRIES] = entries + 1
                return
        self._require_open()
        if not skip_full_check and self.is_full():
            raise IndexFullError("attempt to append to a full time index", path=self._path, entries=self._entries)
        self._check_order(timestamp, offset)
        if timestamp <= self._last_entry.timestamp:
            return
        if self._entries >= self.max_entries:
            raise IndexFullError("time index has no slot left", path=self._path, entries=self._entries)
        self._put_entry(timestamp, self._relative_offset(offset))
        self._last_entry = TimestampOffset(timestamp, offset)

    def append_entries(self, timestamps: np.ndarray, offsets: np.ndarray) -> None:
        """:meth:`maybe_append` of many entries at once (one copy into the map, for index
        rebuilds): ``timestamps`` and ``offsets`` must not go back; an entry lands only where its
        timestamp is above every earlier one. Checks raise before anything is written."""
        if len(timestamps) == 0:
            return
        self._require_open()
        timestamps, offsets = np.asarray(timestamps, np.int64), np.asarray(offsets, np.int64)
        self._check_order(int(timestamps[0]), int(offsets[0]))
        back_in_time = np.flatnonzero(np.diff(timestamps) < 0)
        back_in_offset = np.flatnonzero(np.diff(offsets) < 0)
        if len(back_in_time) or len(back_in_offset):
            at = int(min(np.concatenate((back_in_time, back_in_offset)))) + 1
            self._check_order_against(TimestampOffset(int(timestamps[at - 1]), int(offsets[at - 1])),
                                      int(timestamps[at]), int(offsets[at]), self._entries)
        previous = np.concatenate(([self._last_entry.timestamp], timestamps[:-1]))
        landing = np.flatnonzero(timestamps > previous)  # non-decreasing: above the previous = above all
        if len(landing) == 0:
            return
        if self._entries + len(landing) > self.max_entries - 1:
            raise IndexFullError("attempt to append past the end of a time index", path=self._path,
                                 entries=self._entries, appending=len(landing))
        entries = np.empty(len(landing), _TIME_ENTRY)
        entries["timestamp"], entries["relative_offset"] = timestamps[landing], self._relative_offsets(offsets[landing])
        self._put_entries(entries)
        self._last_entry = TimestampOffset(int(timestamps[landing[-1]]), int(offsets[landing[-1]]))

    def _check_order(self, timestamp: int, offset: int) -> None:
        if self._entries:
            self._check_order_against(self._last_entry, timestamp, offset, self._entries)
        if not _INT64_MIN <= timestamp <= _INT64_MAX:
            raise InvalidOffsetError("time index timestamp outside int64", path=self._path, timestamp=timestamp)

    def _check_order_against(self, last: TimestampOffset, timestamp: int, offset: int, slot: int) -> None:
        if offset < last.offset:
            raise InvalidOffsetError(
                "time index append goes back in offset",
                path=self._path, offset=offset, last_offset=last.offset, slot=slot,
            )
        if timestamp < last.timestamp:
            raise InvalidOffsetError(
                "time index append goes back in time",
                path=self._path, timestamp=timestamp, last_timestamp=last.timestamp, slot=slot,
            )

    def truncate_to(self, offset: int) -> None:
        """Drop every entry whose OFFSET is >= ``offset``."""
        self._truncate_to_offset(offset)

    @classmethod
    def _check_first_and_last(cls, path: Path | str, base_offset: int, length: int, entries: int, first: bytes,
                              last: bytes) -> None:
        first_timestamp, _ = cls._ENTRY.unpack(first)
        last_timestamp, _ = cls._ENTRY.unpack(last)
        if last_timestamp < first_timestamp:
            raise CorruptIndexError(
                "corrupt time index: last timestamp is below the first timestamp",
                path=Path(path), entries=entries, last_timestamp=last_timestamp, first_timestamp=first_timestamp,
                length=length,
            )

    @classmethod
    def _relative_offset_of(cls, entry: bytes) -> int:
        return cls._ENTRY.unpack(entry)[1]

    def _parse(self, slot: int) -> TimestampOffset:
        timestamp, relative = self._ENTRY.unpack_from(self._buffer, slot * 12)  # caller checked open
        return TimestampOffset(timestamp, self._base_offset + relative)

    def _on_entries_changed(self) -> None:
        if self._entries:
            self._last_entry = self._parse(self._entries - 1)
        else:
            self._last_entry = TimestampOffset(NO_TIMESTAMP, self._base_offset)
