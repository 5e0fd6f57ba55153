"""A segment's aborted-transaction index (``<base>.txnindex``).

Byte layout (big-endian, no header, no checksum; shared/reference/kafka-storage.md §1.10) — a
sequence of 34-byte entries, one per transaction aborted by an ABORT marker in this segment::

    +------+------+------------------+-------------------------------------------------------+
    | byte | type | field            | meaning                                               |
    +------+------+------------------+-------------------------------------------------------+
    | 0    | i16  | version          | 0; a higher version makes the index corrupt           |
    | 2    | i64  | producerId       | producer whose transaction aborted                    |
    | 10   | i64  | firstOffset      | first offset of the transaction (may lie in an        |
    |      |      |                  | earlier segment)                                      |
    | 18   | i64  | lastOffset       | offset of the ABORT marker; strictly increasing       |
    | 26   | i64  | lastStableOffset | the partition's LSO when the abort was written        |
    +------+------+------------------+-------------------------------------------------------+

Unlike the offset and time indexes this file is not preallocated nor mapped: it is created by the
first :meth:`TransactionIndex.append` (most segments never have one) and read with ``pread``.
A fetch under READ_COMMITTED asks each segment from the fetch offset onwards for the aborted
transactions overlapping ``[fetch offset, upper bound)`` until one segment's answer is
*complete*: an entry whose lastStableOffset is >= the upper bound proves that no later segment
holds a transaction that started below the bound (KIP-98).

Every read (scan, the first append after opening) checks that the file is whole entries and that
no entry has a version above 0, and raises :class:`CorruptIndexError` naming the path otherwise;
the segment loader's :meth:`TransactionIndex.sanity_check` turns that into a segment recovery.

**Thread-safety.** None inside; appends and truncations need the partition lock.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass, fields
from pathlib import Path

from tidelog.errors import CorruptIndexError, InvalidOffsetError
from tidelog.storage import fileops
from tidelog.storage.index_file import IndexFile

ENTRY_SIZE = 34
CURRENT_VERSION = 0

_ENTRY = struct.Struct(">hqqqq")
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_READ_ENTRIES = 1024  # entries read per pread while scanning
_OPEN_FLAGS = os.O_RDWR | os.O_APPEND | os.O_CLOEXEC


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    """One aborted transaction: producer, its first offset, the ABORT marker offset, the LSO then."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    def __post_init__(self) -> None:
        for field in fields(self):
            value = getattr(self, field.name)
            if not _INT64_MIN <= value <= _INT64_MAX:
                raise InvalidOffsetError("aborted transaction field outside int64", field=field.name, value=value)

    def encode(self) -> bytes:
        """The 34-byte entry, version 0."""
        return _ENTRY.pack(
            CURRENT_VERSION, self.producer_id, self.first_offset, self.last_offset, self.last_stable_offset
        )

    @classmethod
    def decode(cls, data: bytes | bytearray | memoryview, position: int = 0) -> AbortedTxn:
        """The entry at byte ``position`` of ``data``; :class:`CorruptIndexError` if short or of a newer version."""
        try:
            entry = _ENTRY.unpack_from(data, position)
        except struct.error as e:
            raise CorruptIndexError("truncated aborted transaction entry", position=position) from e
        return _from_entry(entry, None, position)


def _from_entry(entry: tuple[int, ...], path: Path | None, position: int) -> AbortedTxn:
    version, producer_id, first_offset, last_offset, last_stable_offset = entry
    if version > CURRENT_VERSION:
        raise CorruptIndexError(
            "unsupported aborted transaction version", path=path, position=position, version=version
        )
    return AbortedTxn(producer_id, first_offset, last_offset, last_stable_offset)


@dataclass(frozen=True, slots=True)
class TxnIndexSearchResult:
    """Aborted transactions found in one segment; ``is_complete`` means later segments need no search."""

    aborted_transactions: tuple[AbortedTxn, ...]
    is_complete: bool


class TransactionIndex(IndexFile):
    """The aborted transactions of one segment whose base offset is ``start_offset``.

    The file is opened on first use and created on first append; :meth:`close` releases the
    descriptor, and a later call opens it again.
    """

    def __init__(self, path: Path, start_offset: int) -> None:
        self._path = Path(path)
        self._start_offset = start_offset
        self._fd: int | None = None
        self._absent = False  # the file was missing: only this object creates it (one owner per dir)
        self._last_offset: int | None = None
        self._last_offset_known = False

    @property
    def path(self) -> Path:
        return self._path

    @property
    def start_offset(self) -> int:
        return self._start_offset

    @property
    def is_empty(self) -> bool:
        """True while the file is missing or holds no complete entry."""
        return self._file_length() < ENTRY_SIZE

    def __repr__(self) -> str:
        return f"TransactionIndex({self._path}, start_offset={self._start_offset})"

    # --- writing --------------------------------------------------------------------------

    def append(self, txn: AbortedTxn) -> None:
        """Add ``txn``, creating the file if needed.

        Raises :class:`InvalidOffsetError` unless ``txn.last_offset`` is above the last entry's
        (appended, or read from an existing file), and :class:`CorruptIndexError` when the
        existing file is not whole entries.
        """
        last = self._known_last_offset()
        if last is not None and txn.last_offset <= last:
            raise InvalidOffsetError(
                "aborted transactions must be appended in increasing last offset",
                path=self._path, last_offset=txn.last_offset, previous_last_offset=last,
            )
        fileops.write_fully(self._open_or_create(), txn.encode(), self._path)
        self._last_offset = txn.last_offset

    def truncate_to(self, offset: int) -> None:
        """Drop the first entry whose last offset is >= ``offset`` and every entry after it."""
        last: int | None = None
        for position, txn in self._scan():
            if txn.last_offset >= offset:
                fileops.ftruncate(self._open_or_create(), position, self._path)
                break
            last = txn.last_offset
        self._last_offset, self._last_offset_known = last, True

    def reset(self) -> None:
        """Drop every entry (an existing file is truncated to 0 bytes)."""
        fd = self._open()
        if fd is not None:
            fileops.ftruncate(fd, 0, self._path)
        self._last_offset, self._last_offset_known = None, True

    # --- reading --------------------------------------------------------------------------

    def all_aborted_txns(self) -> list[AbortedTxn]:
        """Every entry in file order (reads the whole file)."""
        return [txn for _, txn in self._scan()]

    def collect_aborted_txns(self, fetch_offset: int, upper_bound_offset: int) -> TxnIndexSearchResult:
        """Transactions with ``last_offset >= fetch_offset`` and ``first_offset < upper_bound_offset``.

        Scans in file order and stops, complete, after the first entry whose last stable offset is
        >= ``upper_bound_offset``; otherwise the result is incomplete and the caller goes on with
        the next segment.
        """
        found: list[AbortedTxn] = []
        for _, txn in self._scan():
            if txn.last_offset >= fetch_offset and txn.first_offset < upper_bound_offset:
                found.append(txn)
            if txn.last_stable_offset >= upper_bound_offset:
                return TxnIndexSearchResult(tuple(found), True)
        return TxnIndexSearchResult(tuple(found), False)

    def sanity_check(self) -> None:
        """:class:`CorruptIndexError` if the file is not whole entries, an entry has a newer version,
        or an entry's last offset is below the segment's start offset. Reads the whole file."""
        for position, txn in self._scan():
            if txn.last_offset < self._start_offset:
                raise CorruptIndexError(
                    "aborted transaction ends below the segment's start offset",
                    path=self._path, position=position, last_offset=txn.last_offset,
                    start_offset=self._start_offset, producer_id=txn.producer_id,
                )

    # --- file operations ------------------------------------------------------------------

    def flush(self) -> None:
        """``fsync`` the file if it is open."""
        if self._fd is not None:
            fileops.fsync(self._fd, self._path)

    def close(self) -> None:
        """Release the descriptor. Idempotent; a later call reopens the file."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _release(self) -> None:
        self.close()

    # --- internals ------------------------------------------------------------------------

    def _open(self) -> int | None:
        """The descriptor, opening the file first; None when the file is missing."""
        if self._fd is None:
            if self._absent:  # most segments have no aborted transaction: one failed open, not one per search
                return None
            try:
                self._fd = fileops.open(self._path, _OPEN_FLAGS)
            except FileNotFoundError:
                self._absent = True
                return None
        return self._fd

    def _open_or_create(self) -> int:
        if self._fd is None:
            self._fd = fileops.open(self._path, _OPEN_FLAGS | os.O_CREAT, 0o644)
            self._absent = False
        return self._fd

    def _file_length(self) -> int:
        fd = self._open()
        return 0 if fd is None else os.fstat(fd).st_size

    def _whole_entries_length(self, fd: int) -> int:
        length = os.fstat(fd).st_size
        if length % ENTRY_SIZE != 0:
            raise CorruptIndexError(
                f"transaction index length is not a multiple of {ENTRY_SIZE}", path=self._path, length=length
            )
        return length

    def _known_last_offset(self) -> int | None:
        """The last entry's last offset, read from the file the first time it is needed."""
        if not self._last_offset_known:
            fd = self._open()
            length = 0 if fd is None else self._whole_entries_length(fd)
            if fd is not None and length:
                entry = _ENTRY.unpack(os.pread(fd, ENTRY_SIZE, length - ENTRY_SIZE))
                self._last_offset = _from_entry(entry, self._path, length - ENTRY_SIZE).last_offset
            self._last_offset_known = True
        return self._last_offset

    def _scan(self) -> Iterator[tuple[int, AbortedTxn]]:
        """``(byte position, entry)`` in file order, read in chunks; nothing if the file is missing."""
        fd = self._open()
        if fd is None:
            return
        length = self._whole_entries_length(fd)
        chunk_size = ENTRY_SIZE * _READ_ENTRIES
        for start in range(0, length, chunk_size):
            chunk = os.pread(fd, min(chunk_size, length - start), start)
            whole = len(chunk) - len(chunk) % ENTRY_SIZE  # a concurrent truncation shortens the read
            for i, entry in enumerate(_ENTRY.iter_unpack(chunk[:whole])):
                position = start + i * ENTRY_SIZE
                yield position, _from_entry(entry, self._path, position)
