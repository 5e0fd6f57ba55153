"""The memory-mapped core both segment indexes share (:class:`MappedIndex`): the file, its mapping,
the entry count, resize and trim, and the sorted search. The entry layouts and the two indexes are
in :mod:`tidelog.storage.index`.

**Lookups.** An index is sparse: one entry per ``index.interval.bytes`` of appended data. A lookup
returns the entry with the largest key <= the target (the caller scans batches forward from its
position), or a floor value when every entry is above the target: ``(base_offset, 0)`` for the
offset index, ``(-1, base_offset)`` for the time index. The search is a binary search over the
mapping with ``struct.unpack_from``; like Kafka (KAFKA-6432) it first tries the last
``8192 / entry size`` entries ("warm section", 1024 offset entries, 682 time entries), which most
lookups hit and whose pages stay resident. The answer equals a plain bisect; only the pages
touched differ.

**Lifecycle** (§1.12). A new index file is preallocated (sparse ``ftruncate``) to the largest
multiple of the entry size <= ``max_index_size`` and mapped whole. An existing file is trusted:
``entries = file length // entry size``, and it is mapped as it is (a trimmed file is therefore
full until :meth:`resize`; the segment resizes its active segment's indexes to the maximum).
:meth:`close` trims the file to ``entries * entry size``.

**State.** An index's entry count, fullness and last entry are int64 slots of a small array
(``storage._append_kernel.INDEX_*``), with the address of its writable mapping: a segment hands
its two indexes slices of its append state (``storage.append_state``), where the compiled leader
append reads them and adds the sparse entries a batch is due
(``storage._append_kernel.append_index_entries``) in the call that writes the batch. The
address slot is set only while this object's writable mapping is open, and cleared before the
mapping closes, so the kernel never writes through a stale one.

**Thread-safety.** None inside. Appends, truncations, resizes and close need the partition lock;
lookups may run concurrently with each other and with appends, but not with a resize or close
(they remap the file).
"""

from __future__ import annotations

import mmap
import os
from abc import abstractmethod
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from tidelog.errors import (
    ConfigError,
    CorruptIndexError,
    IndexOffsetOverflowError,
    IndexStateError,
    InvalidOffsetError,
    StorageError,
)
from tidelog.storage._append_kernel import (
    INDEX_CAPACITY,
    INDEX_ENTRIES,
    INDEX_MAP,
    INDEX_STATE_SLOTS,
)
from tidelog.storage import fileops
from tidelog.storage.append_state import TailSlot
from tidelog.storage.index_file import IndexFile

DEFAULT_MAX_INDEX_SIZE = 10 * 1024 * 1024  # segment.index.bytes default
WARM_SECTION_BYTES = 8192  # bytes at the end of an index searched first

_INT32_MAX = 2**31 - 1
_EMPTY = b""

_Unpack = Callable[[Any, int], tuple[Any, ...]]


class MappedIndex(IndexFile):
    """The shared core of both indexes: file, mapping, entry count, resize and trim, sorted search.

    Subclasses name their entry struct and columns and keep a cache of their last entry
    (:meth:`_on_entries_changed`). ``state``: the int64 array of INDEX_STATE_SLOTS slots that
    holds the index's state (a segment's tail slice; else the index's own).
    """

    ENTRY_SIZE: ClassVar[int]
    _FREE_SLOTS_KEPT: ClassVar[int] = 0  # slots that must stay free for the index not to be full
    _ENTRY: ClassVar[struct.Struct]
    _OFFSET_COLUMN: ClassVar[tuple[_Unpack, int]]  # (unpack_from, byte within the entry) of relativeOffset
    _KIND: ClassVar[str]

    def __init__(
        self,
        path: Path,
        base_offset: int,
        max_index_size: int = DEFAULT_MAX_INDEX_SIZE,
        writable: bool = True,
        state: np.ndarray | None = None,
    ) -> None:
        if base_offset < 0:
            raise InvalidOffsetError("index base offset must be >= 0", path=path, base_offset=base_offset)
        # (named as a .log's tail: TailSlot attributes read it; the view keeps the array alive)
        self.tail_slots = memoryview(np.zeros(INDEX_STATE_SLOTS, np.int64) if state is None else state)
        self.tail_slots[INDEX_MAP] = 0
        self._map_address = 0  # of this object's writable mapping (0: none)
        self._path = Path(path)
        self._base_offset = base_offset
        self._max_index_size = max_index_size
        self._writable = writable
        self._closed = False
        self._mmap: mmap.mmap | None = None
        self._buffer: mmap.mmap | bytes = _EMPTY  # the mapping, or b"" while there is none
        self._length = 0
        try:
            fd, created = self._open_or_create()
            self._map(fd)
        except OSError as e:
            raise StorageError(f"cannot open {self._KIND} file: {e.strerror}", path=self._path, operation="open") from e
        self._entries = 0 if created else self._length // self.ENTRY_SIZE
        self._update_capacity()
        self._on_entries_changed()

    # --- opening and mapping ---------------------------------------------------------------

    def _open_or_create(self) -> tuple[int, bool]:
        """A descriptor of the file and whether it was created (preallocated; writable index only)."""
        if not self._writable:
            return fileops.open(self._path, os.O_RDONLY | os.O_CLOEXEC), False
        try:
            fd = fileops.open(self._path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        except FileExistsError:
            return fileops.open(self._path, os.O_RDWR | os.O_CLOEXEC), False
        try:
            fileops.ftruncate(fd, self._preallocated_size(), self._path)
        except BaseException:
            os.close(fd)
            fileops.unlink(self._path, missing_ok=True)
            raise
        return fd, True

    def _preallocated_size(self) -> int:
        size = self._round_down(self._max_index_size)
        if size <= 0:
            raise ConfigError(
                f"max index size must hold at least one {self.ENTRY_SIZE}-byte entry",
                key="segment.index.bytes", value=self._max_index_size, path=self._path,
            )
        return size

    def _map(self, fd: int) -> None:
        """Map the whole file and close ``fd`` (the mapping keeps its own descriptor)."""
        try:
            self._length = os.fstat(fd).st_size
            self._mmap = fileops.mmap(fd, self._length, writable=self._writable, path=self._path) if self._length else None
            self._buffer = _EMPTY if self._mmap is None else self._mmap
            if self._mmap is not None and self._writable:
                self._map_address = np.frombuffer(self._mmap, np.uint8, count=1).ctypes.data  # (the view is dropped)
                self.tail_slots[INDEX_MAP] = self._map_address
        finally:
            os.close(fd)

    def _unmap(self) -> None:
        # First: nothing may write through the address once the mapping is gone. (Only this
        # object's: a segment's new index object may share the slots of one it released.)
        if self._map_address and self.tail_slots[INDEX_MAP] == self._map_address:
            self.tail_slots[INDEX_MAP] = 0
        self._map_address = 0
        self._buffer = _EMPTY
        if self._mmap is not None:
            fileops.close_mapping(self._mmap)
            self._mmap = None

    def _round_down(self, size: int) -> int:
        return size // self.ENTRY_SIZE * self.ENTRY_SIZE

    # --- state ----------------------------------------------------------------------------

    @property
    def path(self) -> Path:
        return self._path

    @property
    def base_offset(self) -> int:
        return self._base_offset

    @property
    def entries(self) -> int:
        return self._entries

    @property
    def max_entries(self) -> int:
        """Entries the current file length holds (the mapped length, not ``max_index_size``)."""
        return self._length // self.ENTRY_SIZE

    @property
    def max_index_size(self) -> int:
        return self._max_index_size

    @property
    def size_in_bytes(self) -> int:
        """Bytes the entries occupy: ``entries * ENTRY_SIZE``."""
        return self._entries * self.ENTRY_SIZE

    @property
    def length(self) -> int:
        """Length of the file as mapped (preallocated slack included)."""
        return self._length

    @property
    def writable(self) -> bool:
        return self._writable

    _entries = TailSlot(INDEX_ENTRIES)

    def is_full(self) -> bool:
        """No slot left for :meth:`append` (a roll check asks on every append)."""
        slots = self.tail_slots
        return slots[INDEX_ENTRIES] >= slots[INDEX_CAPACITY]  # type: ignore[no-any-return]

    def _update_capacity(self) -> None:
        """Keep the capacity slot current as the length changes."""
        self.tail_slots[INDEX_CAPACITY] = self._length // self.ENTRY_SIZE - self._FREE_SLOTS_KEPT

    def can_append_offset(self, offset: int) -> bool:
        """Whether ``offset`` is representable as a relative offset of this index."""
        return 0 <= offset - self._base_offset <= _INT32_MAX

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._path}, base_offset={self._base_offset}, entries={self._entries})"

    # --- file operations ------------------------------------------------------------------

    def resize(self, new_size: int) -> bool:
        """Set the file length to ``new_size`` rounded down to whole entries, keeping the entries.

        Returns whether the length changed. Remaps the file. Raises :class:`IndexStateError` when
        the new length cannot hold the entries, or the index is read-only or closed.
        """
        self._require_open()
        rounded = self._round_down(new_size)
        if rounded == self._length:
            return False
        self._require_writable("resize")
        if rounded < self.size_in_bytes:
            raise IndexStateError(
                "resize would cut off index entries", path=self._path, new_size=new_size,
                entries=self._entries, entry_size=self.ENTRY_SIZE,
            )
        self._remap(rounded)
        return True

    def _remap(self, length: int) -> None:
        try:
            fd = fileops.open(self._path, os.O_RDWR | os.O_CLOEXEC)
            self._unmap()
            try:
                fileops.ftruncate(fd, length, self._path)
            finally:
                self._map(fd)
                self._update_capacity()
        except OSError as e:
            raise StorageError(f"cannot resize {self._KIND} file to {length} bytes: {e.strerror}",
                               path=self._path, operation="resize") from e

    def trim_to_valid_size(self) -> None:
        """Cut the file to ``entries * ENTRY_SIZE`` bytes (done on roll and close)."""
        self.resize(self.size_in_bytes)

    def reset(self) -> None:
        """Drop every entry and grow the file back to ``max_index_size`` (segment recovery)."""
        self.truncate()
        self.resize(self._max_index_size)

    def truncate(self) -> None:
        """Drop every entry (the file keeps its length)."""
        self._truncate_to_entries(0)

    def flush(self) -> None:
        """``msync`` the mapping to disk."""
        self._require_open()
        if self._mmap is not None and self._writable:
            fileops.msync(self._mmap, self._path)

    def close(self) -> None:
        """Trim the file to its entries (when writable), then unmap it. Idempotent."""
        if not self._closed and self._writable:
            self.trim_to_valid_size()
        self.close_handler()

    def close_handler(self) -> None:
        """Unmap without trimming. Every later access raises :class:`IndexStateError`."""
        self._unmap()
        self._closed = True

    def _release(self) -> None:
        self.close_handler()

    @classmethod
    def check_file(cls, path: Path | str, base_offset: int) -> bytes:
        """:meth:`sanity_check` of the index file at ``path`` without mapping it: one ``fstat``
        and two preads, one for a single entry (the loader checks every segment's indexes; maps
        are costly there).
        Returns the last entry's bytes (empty when there is none). FileNotFoundError when the
        file is missing; :class:`StorageError` when it cannot be read. ``path`` may be a string
        (the loader's, to spare a Path per index); errors name it as a Path all the same."""
        fd = fileops.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            length = os.fstat(fd).st_size
            entries = length // cls.ENTRY_SIZE
            first = os.pread(fd, cls.ENTRY_SIZE, 0) if entries else b""
            last = os.pread(fd, cls.ENTRY_SIZE, (entries - 1) * cls.ENTRY_SIZE) if entries > 1 else first
        except OSError as e:
            raise StorageError(f"cannot read {cls._KIND} file: {e.strerror}", path=Path(path), operation="read") from e
        finally:
            os.close(fd)
        cls._check_entries(path, base_offset, length, entries, first, last)
        return last

    def sanity_check(self) -> None:
        """:class:`CorruptIndexError` when the file cannot be this kind of index: its length is not
        whole entries, or its first and last entries contradict each other or the base offset.
        O(1): reads two entries."""
        buffer = self._require_open()
        size = self.ENTRY_SIZE
        first = bytes(buffer[:size]) if self._entries else b""
        last = bytes(buffer[(self._entries - 1) * size:self._entries * size]) if self._entries else b""
        self._check_entries(self._path, self._base_offset, self._length, self._entries, first, last)

    @classmethod
    def _check_entries(cls, path: Path | str, base_offset: int, length: int, entries: int, first: bytes,
                       last: bytes) -> None:
        if length % cls.ENTRY_SIZE != 0:
            raise CorruptIndexError(
                f"{cls._KIND} file length is not a multiple of {cls.ENTRY_SIZE}",
                path=Path(path), length=length, entries=entries, base_offset=base_offset,
            )
        if not entries:
            return
        cls._check_first_and_last(path, base_offset, length, entries, first, last)
        relative = cls._relative_offset_of(last)
        if relative < 0:
            raise CorruptIndexError(
                f"corrupt {cls._KIND}: last offset is below the base offset",
                path=Path(path), entries=entries, last_offset=base_offset + relative, base_offset=base_offset,
                length=length,
            )

    @classmethod
    @abstractmethod
    def _relative_offset_of(cls, entry: bytes) -> int:
        """The relative offset in a raw entry."""

    @classmethod
    def _check_first_and_last(cls, path: Path | str, base_offset: int, length: int, entries: int, first: bytes,
                              last: bytes) -> None:
        """Raise :class:`CorruptIndexError` if the raw first and last entries contradict each other."""

    # --- entries --------------------------------------------------------------------------

    def _require_open(self) -> mmap.mmap | bytes:
        if self._closed:
            raise IndexStateError(f"{self._KIND} is closed", path=self._path)
        return self._buffer

    def _require_writable(self, operation: str) -> mmap.mmap | bytes:
        buffer = self._require_open()
        if not self._writable:
            raise IndexStateError(f"cannot {operation} a read-only {self._KIND}", path=self._path)
        return buffer

    def _check_slot(self, n: int) -> mmap.mmap | bytes:
        buffer = self._require_open()
        if not 0 <= n < self._entries:
            raise IndexStateError(
                f"{self._KIND} entry number out of range", path=self._path, n=n, entries=self._entries
            )
        return buffer

    def _put_entry(self, *fields: int) -> None:
        """Write one entry into the next free slot (the caller checked order, range and space)."""
        buffer = self._require_writable("append to")
        self._ENTRY.pack_into(buffer, self._entries * self.ENTRY_SIZE, *fields)
        self._entries += 1

    def _put_entries(self, entries: np.ndarray) -> None:
        """Write packed entries (a structured array of this index's entry layout) into the next
        free slots with one copy (the caller checked order, range and space)."""
        buffer = self._require_writable("append to")
        start = self._entries * self.ENTRY_SIZE
        raw = entries.view(np.uint8).reshape(-1)
        np.frombuffer(buffer, np.uint8, count=len(raw), offset=start)[:] = raw
        self._entries += len(entries)

    def _relative_offsets(self, offsets: np.ndarray) -> np.ndarray:
        """:meth:`_relative_offset` of a sorted column: checks its first and last values."""
        for bound in (int(offsets[0]), int(offsets[-1])):
            self._relative_offset(bound)
        return offsets - self._base_offset

    def _relative_offset(self, offset: int) -> int:
        if not self.can_append_offset(offset):
            raise IndexOffsetOverflowError(
                f"offset does not fit in the {self._KIND}'s int32 relative offset",
                path=self._path, offset=offset, base_offset=self._base_offset,
            )
        return offset - self._base_offset

    def _truncate_to_entries(self, entries: int) -> None:
        self._require_open()
        self._entries = entries
        self._on_entries_changed()

    def _truncate_to_offset(self, offset: int) -> None:
        """Drop every entry whose offset is >= ``offset`` (offsets are sorted in both indexes)."""
        unpack, at = self._OFFSET_COLUMN
        self._truncate_to_entries(self._floor_slot(unpack, at, offset - self._base_offset - 1) + 1)

    @abstractmethod
    def _on_entries_changed(self) -> None:
        """Refresh the cached last entry after a load or truncation."""

    def _floor_slot(self, unpack: _Unpack, at: int, target: int) -> int:
        """Largest slot whose column (``unpack`` at byte ``at`` of the entry) is <= ``target``; -1 if none.

        Hot path, hence written out: the warm section first, then a bisect of one half.
        """
        if self._closed:  # inline test: a method call per lookup costs ~2% here
            self._require_open()
        buffer, entries, size = self._buffer, self._entries, self.ENTRY_SIZE
        if entries == 0:
            return -1
        lo = max(0, entries - 1 - WARM_SECTION_BYTES // size)
        if unpack(buffer, lo * size + at)[0] <= target:
            hi = entries - 1
        elif unpack(buffer, at)[0] > target:
            return -1
        else:
            lo, hi = 0, lo - 1
        while lo < hi:
            mid = (lo + hi + 1) >> 1
            if unpack(buffer, mid * size + at)[0] <= target:
                lo = mid
            else:
                hi = mid - 1
        return lo
