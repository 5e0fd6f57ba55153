"""A segment's ``.log`` file: append-only record batches with positional reads.

The file holds concatenated batches and nothing else (kafka-storage.md §1.2). Its logical size
is the end of the data written so far; a preallocated file (``preallocate=true``) is longer than
that on disk until it is trimmed on roll or close. After an unclean stop the loader trusts the
file length, and segment recovery truncates whatever does not form complete, valid batches.

An append of RESERVE_FROM bytes or more first reserves the disk blocks of RESERVE_AHEAD bytes past
it (``fallocate`` keeping the size: :meth:`FileRecords.reserve_for`). Writes into reserved blocks
skip the file system's per-page block reservation: on ext4 a 125 KB append costs ~20% less, a
200-byte one the same (figures: docs/architecture.md, design notes). The file's size, and so every byte a
reader or Kafka sees, is unchanged; the blocks past the end are freed on roll and close (and by
any truncation), also when a process that died left them.

The file descriptor is opened on first use, so opening a data dir of many partitions costs one
``stat`` per segment and no descriptors. Not thread-safe: the owning log serialises writers.
"""

from __future__ import annotations

import errno
import logging
import mmap
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tidelog.errors import CorruptRecordError, StorageError
from tidelog.records import FileBatch, read_batch_at
from tidelog.records.layout import (
    ATTRIBUTES_OFFSET,
    CRC_OFFSET,
    HEADER_DTYPE,
    HEADER_SIZE_UP_TO_MAGIC,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    PARTITION_LEADER_EPOCH_OFFSET,
    PATCHED_PREFIX,
    declared_size,
)
from tidelog.records.scan import BATCH_COLUMNS, batch_crcs, walk_batch_headers
from tidelog.storage import fileops
from tidelog.storage._append_kernel import TAIL_SIZE
from tidelog.storage.append_state import AppendState, TailSlot

log = logging.getLogger(__name__)

# Block reservation (see the module docstring). Writes of at least 4 KiB gain from it, smaller ones
# neither gain nor lose; one reservation per MiB keeps the fallocate calls rare, and bounds what a
# partition's active segment holds past its end.
RESERVE_FROM = 4096
RESERVE_AHEAD = 1 << 20
# trim frees blocks past the end when the file holds this much more than its data: a reservation
# of a process that died (ours are known), but not an extent tree's own few blocks.
_TRIM_SLACK = 256 << 10

# Reads while scanning a whole file (recovery, dumps).
SCAN_CHUNK_BYTES = 1 << 20

# Recovery's gathered reads of each batch's stored CRC and partitionLeaderEpoch.
_CRC_BYTES = np.arange(CRC_OFFSET, ATTRIBUTES_OFFSET)
_CRC_DTYPE = HEADER_DTYPE["crc"]
_EPOCH_BYTES = np.arange(PARTITION_LEADER_EPOCH_OFFSET, MAGIC_OFFSET)
_EPOCH_DTYPE = HEADER_DTYPE["partition_leader_epoch"]

Buffer = bytes | bytearray | memoryview
Chunks = Buffer | tuple[Buffer, ...]  # one buffer, or several written back to back


def chunks_size(data: Chunks) -> int:
    return sum(len(chunk) for chunk in data) if isinstance(data, tuple) else len(data)


@dataclass(frozen=True, slots=True)
class BatchLocation:
    """Where a batch sits in a ``.log`` file, from its header alone."""

    base_offset: int  # for legacy entries: the last offset (the base needs decompression)
    last_offset: int
    position: int
    size: int
    magic: int


BatchHeaders = dict[str, np.ndarray]  # see FileRecords.batch_headers


class FileRecords:
    def __init__(self, path: Path, size: int, *, fd: int | None = None) -> None:
        self._path = path
        # The segment's append state (storage.append_state), this file's size among its slots: the
        # compiled leader append updates the size in the call that writes. The segment that opens
        # this file owns the rest of the state.
        self.append_state = AppendState()
        self.tail_slots = self.append_state.tail_slots
        self._size = size
        self._fd = fd
        self._reserved_end = 0  # blocks are reserved up to here; -1: never again for this file

    _size = TailSlot(TAIL_SIZE)

    @classmethod
    def open(
        cls, path: Path, *, file_already_exists: bool, init_file_size: int = 0, preallocate: bool = False
    ) -> FileRecords:
        """Open or create. A new preallocated file is ``init_file_size`` long on disk, size 0 logically."""
        try:
            if file_already_exists:
                return cls(path, path.stat().st_size)
            fd = fileops.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            if preallocate and init_file_size > 0:
                fileops.ftruncate(fd, init_file_size, path)
            return cls(path, 0, fd=fd)
        except OSError as e:
            raise StorageError(f"cannot open segment file: {e.strerror}", path=path) from e

    # --- properties ---------------------------------------------------------------------------

    @property
    def path(self) -> Path:
        return self._path

    @property
    def size_in_bytes(self) -> int:
        return self._size

    def last_modified_ms(self) -> int:
        try:
            return self._path.stat().st_mtime_ns // 1_000_000
        except OSError as e:
            raise StorageError(f"cannot stat segment file: {e.strerror}", path=self._path) from e

    def set_last_modified_ms(self, ms: int) -> None:
        set_file_mtime(self._path, ms)

    # --- I/O ----------------------------------------------------------------------------------

    def descriptor(self) -> int:
        """The open descriptor of the file (opened now if it was not)."""
        return self._descriptor()

    def _descriptor(self) -> int:
        if self._fd is None:
            try:
                self._fd = fileops.open(self._path, os.O_RDWR)
            except OSError as e:
                raise StorageError(f"cannot open segment file: {e.strerror}", path=self._path) from e
        return self._fd

    def append(self, data: Chunks) -> int:
        """Write ``data`` (one buffer, or a tuple written with one gathered ``pwritev``) at the end
        of the logical data; returns the bytes written. The bytes are in the OS (page cache) when
        this returns: another process reading the file sees them, a killed process keeps them."""
        if type(data) is not bytes:
            if type(data) is tuple and len(data) <= IOV_MAX:
                return self._append_chunks(data)
            chunks = data if isinstance(data, tuple) else (data,)
            return self._append_views([memoryview(chunk).cast("B") for chunk in chunks], 0)
        # The common case (a produced batch with its patched header): one plain pwrite.
        if len(data) >= RESERVE_FROM:  # reserve_for's own first test, spared a call for small batches
            self.reserve_for(len(data))
        fd = self._fd if self._fd is not None else self._descriptor()
        try:
            written = fileops.pwrite(fd, data, self._size, self._path)
        except OSError as e:
            raise StorageError(f"append failed: {e.strerror}", path=self._path, position=self._size) from e
        if written != len(data):  # a short write: go on from there
            return self._append_views([memoryview(data)], written)
        self._size += written
        return written

    def _append_chunks(self, chunks: tuple[Buffer, ...]) -> int:
        """A large produced batch's path (its patched head and a view of the rest): one
        ``pwritev`` of the chunks as they are; only a short write pays for byte views of them."""
        total = 0
        for chunk in chunks:
            total += chunk.nbytes if type(chunk) is memoryview else len(chunk)
        self.reserve_for(total)
        fd = self._fd if self._fd is not None else self._descriptor()
        try:
            written = fileops.pwritev(fd, chunks, self._size, self._path)
        except OSError as e:
            raise StorageError(f"append failed: {e.strerror}", path=self._path, position=self._size) from e
        if written != total:  # a short write: go on from there
            return self._append_views([memoryview(chunk).cast("B") for chunk in chunks], written)
        self._size += written
        return written

    def reserve_for(self, size: int) -> None:
        """Before an append of ``size`` bytes: when it is RESERVE_FROM or more and would pass the
        blocks reserved so far, reserve them and RESERVE_AHEAD more. Advisory: where the file
        system cannot, or the disk is full, nothing is reserved for this file again, and the
        write itself says what matters."""
        if size < RESERVE_FROM or self._size + size <= self._reserved_end or self._reserved_end < 0:
            return
        position, length = self._size, size + RESERVE_AHEAD
        try:
            reserved = fileops.reserve_blocks(self._descriptor(), position, length, self._path)
        except OSError as e:
            log.warning("%s: cannot reserve %d bytes of blocks at byte %d (%s); appends go on without",
                        self._path, length, position, e.strerror)
            reserved = False
        self._reserved_end = position + length if reserved else -1

    def finish_produced(self, records: bytes, written: int, base_offset: int, leader_epoch: int) -> None:
        """After the compiled append's write of a patched batch stopped at ``written`` (its error,
        when negative): what :meth:`append` does after ``os.pwrite`` did that."""
        if written < 0 and written != -errno.EINTR:  # EINTR: os.pwritev below retries, as os.pwrite does
            error = OSError(-written, os.strerror(-written))
            raise StorageError(f"append failed: {error.strerror}", path=self._path, position=self._size) from error
        patched = PATCHED_PREFIX.pack(base_offset, len(records) - LOG_OVERHEAD, leader_epoch) + records[PATCHED_PREFIX.size:]
        self._append_views([memoryview(patched)], max(written, 0))

    def _append_views(self, views: list[memoryview], written: int) -> int:
        """Write ``views`` at the end, of which the first ``written`` bytes already are (loops over
        short writes); the logical size then grows by all of them, which this returns."""
        fd = self._descriptor()
        total = sum(len(view) for view in views)
        try:
            while written < total:
                n = fileops.pwritev(fd, _remaining(views, written)[:IOV_MAX], self._size + written, self._path)
                if n == 0:  # would loop forever; the bytes written so far are cut by recovery
                    raise StorageError("append wrote nothing", path=self._path, position=self._size + written)
                written += n
        except OSError as e:
            raise StorageError(f"append failed: {e.strerror}", path=self._path, position=self._size) from e
        self._size += written
        return written

    def read(self, position: int, size: int) -> bytes:
        """Up to ``size`` bytes from ``position``, never past the logical end."""
        size = min(size, self._size - position)
        if size <= 0:
            return b""
        try:
            return fileops.pread(self._descriptor(), size, position, self._path)
        except OSError as e:
            raise StorageError(f"read failed: {e.strerror}", path=self._path, position=position) from e

    def flush(self) -> None:
        if self._fd is None:
            return  # nothing written through this object since it was opened
        try:
            fileops.fsync(self._fd, self._path)
        except OSError as e:
            raise StorageError(f"fsync failed: {e.strerror}", path=self._path) from e

    def truncate_to(self, target_size: int) -> int:
        """Cut the file to ``target_size`` bytes (also trims preallocated space); returns bytes removed."""
        if target_size < 0 or target_size > self._size:
            raise StorageError(
                f"cannot truncate to {target_size} bytes: file holds {self._size}", path=self._path
            )
        removed = self._size - target_size
        try:
            fileops.ftruncate(self._descriptor(), target_size, self._path)  # frees reserved blocks too
        except OSError as e:
            raise StorageError(f"truncate failed: {e.strerror}", path=self._path) from e
        self._size = target_size
        self._reserved_end = min(self._reserved_end, 0)
        return removed

    def trim(self) -> None:
        """Drop what the file holds past its data (on roll and close): the length of a
        preallocated file, and blocks reserved past the end, by this process or one that died."""
        try:
            stat = os.stat(self._path)
            if (stat.st_size != self._size or self._reserved_end > self._size
                    or stat.st_blocks * 512 > self._size + _TRIM_SLACK):
                fileops.truncate(self._path, self._size)  # also at the same size: frees the blocks past it
        except OSError as e:
            raise StorageError(f"trim failed: {e.strerror}", path=self._path) from e
        self._reserved_end = min(self._reserved_end, 0)

    def close(self) -> None:
        self.append_state.invalidate()  # the compiled append must never write to a closed descriptor
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def rename_to(self, new_path: Path) -> None:
        try:
            fileops.rename(self._path, new_path)
        except OSError as e:
            raise StorageError(f"rename to {new_path.name} failed: {e.strerror}", path=self._path) from e
        self._path = new_path

    def delete_if_exists(self) -> bool:
        self.close()
        try:
            fileops.unlink(self._path)
            return True
        except FileNotFoundError:
            return False

    # --- scanning -----------------------------------------------------------------------------

    def batches(self, start: int = 0, end: int | None = None) -> Iterator[tuple[int, FileBatch]]:
        """Every complete batch from byte ``start`` to ``end`` (default: the logical end), in order
        (:func:`chunked_batches` over :meth:`read`)."""
        yield from chunked_batches(self.read, self._path, start, self._size if end is None else min(end, self._size))

    def batch_headers(self, size: int | None = None) -> BatchHeaders:
        """The header columns (:data:`~tidelog.records.scan.BATCH_COLUMNS`, by name) of every
        complete batch in the first ``size`` bytes (default all), from a header walk of the mapped
        file: the scan kernel's walk for v2 runs, legacy entries read one by one (no producer:
        ``producer_id`` -1). Pages of the records are never touched. CorruptRecordError for a
        header that cannot be a batch; FileNotFoundError if the file is gone."""
        size = self._size if size is None else min(size, self._size)
        parts: list[BatchHeaders] = []
        bad = None
        if size > 0:
            with open(self._path, "rb") as f, fileops.mapped(f.fileno(), size, writable=False, path=self._path) as mapped:
                data = np.frombuffer(mapped, np.uint8, size)
                bad = _walk_headers(data, mapped, parts)
                del data  # the map cannot close while a view of it is exported
        if bad is not None:  # raised after the map is closed (the error must not hold a view of it)
            raise CorruptRecordError("invalid batch header", path=self._path, position=bad)
        return {name: np.concatenate([p[name] for p in parts]) if parts else np.zeros(0, dtype)
                for name, dtype in BATCH_COLUMNS}

    def valid_v2_headers(self) -> BatchHeaders:
        """The header columns of the leading run of v2 batches that recovery's batch-by-batch
        check accepts as far as the batch goes (complete, size and magic right, CRC matching),
        plus ``leader_epoch``: one header walk and one CRC pass over the mapped file. The run
        ends before the first batch that fails, or where the walk stops (partial tail, a legacy
        entry, a header that cannot be a batch, an int64 offset overflow); the caller checks the
        rest one by one from the run's end. Reads through the map, so only for a caller that
        has checked ``fileops.active()`` is False when it must match the read path's faults."""
        size = self._size
        columns: BatchHeaders = {name: np.zeros(0, dtype) for name, dtype in BATCH_COLUMNS}
        epochs = np.zeros(0, np.int32)
        if size > 0:
            with open(self._path, "rb") as f, fileops.mapped(f.fileno(), size, writable=False, path=self._path) as mapped:
                data = np.frombuffer(mapped, np.uint8, size)
                columns = walk_batch_headers(data).batches
                positions = columns["position"]
                if len(positions):
                    # Stored CRC and partitionLeaderEpoch, big-endian, gathered at once.
                    stored = data[positions[:, None] + _CRC_BYTES].view(_CRC_DTYPE).ravel().astype(np.int64)
                    epochs = data[positions[:, None] + _EPOCH_BYTES].view(_EPOCH_DTYPE).ravel().astype(np.int32)
                    bad = np.flatnonzero(batch_crcs(data, positions, columns["size"]) != stored)
                    if len(bad):
                        columns = {name: column[:bad[0]] for name, column in columns.items()}
                        epochs = epochs[:bad[0]]
                del data  # the map cannot close while a view of it is exported
        columns["leader_epoch"] = epochs
        return columns


def _walk_headers(data: np.ndarray, mapped: mmap.mmap, parts: list[BatchHeaders]) -> int | None:
    """Append the header columns of ``data``'s runs of batches to ``parts``; the position of a
    header that cannot be a batch, or None."""
    pos = 0
    while pos < len(data):
        walk = walk_batch_headers(data, pos)
        parts.append(walk.batches)
        pos = walk.end_position
        if walk.stop_position is None:
            return None
        if int(data[pos + HEADER_SIZE_UP_TO_MAGIC - 1]) not in (0, 1):
            return pos
        try:
            legacy = read_batch_at(mapped, pos)
        except CorruptRecordError:
            return pos
        if legacy is None:
            return pos
        row = {"position": pos, "size": legacy.size_in_bytes, "base_offset": legacy.last_offset,
               "last_offset": legacy.last_offset, "attributes": legacy.attributes,
               "base_timestamp": legacy.max_timestamp, "max_timestamp": legacy.max_timestamp,
               "producer_id": -1, "producer_epoch": -1, "records_count": 1}
        parts.append({name: np.array([row[name]], dtype) for name, dtype in BATCH_COLUMNS})
        pos += legacy.size_in_bytes
    return None


def set_file_mtime(path: Path, ms: int) -> None:
    """Set a segment file's modification time (StorageError naming the file on failure)."""
    try:
        os.utime(path, ns=(ms * 1_000_000, ms * 1_000_000))
    except OSError as e:
        raise StorageError(f"cannot set the modification time: {e.strerror}", path=path, operation="utime") from e


IOV_MAX = os.sysconf("SC_IOV_MAX") if "SC_IOV_MAX" in os.sysconf_names else 1024
"""Most buffers one ``pwritev`` takes (more is EINVAL); a longer list is written in several calls."""


def _remaining(views: list[memoryview], skip: int) -> list[memoryview]:
    """The buffers still to write after ``skip`` bytes (a short write resumes mid-buffer)."""
    if skip == 0:
        return views
    out = []
    for view in views:
        if skip >= len(view):
            skip -= len(view)
            continue
        out.append(view[skip:])
        skip = 0
    return out


def chunked_batches(read: Callable[[int, int], bytes], path: Path | str, start: int,
                    end: int, chunk_bytes: int | None = None) -> Iterator[tuple[int, FileBatch]]:
    """``(position, batch)`` of every complete batch (v2 and v0/v1) in bytes ``[start, end)`` of a
    file or object read by ``read(position, size)``, ``chunk_bytes`` at a time (default
    :data:`SCAN_CHUNK_BYTES`; a chunk grows to
    hold a batch larger than it). Stops quietly at a partial tail, and where ``read`` returns fewer
    bytes than asked (the data ends there: an object shorter than listed); CorruptRecordError
    (``path``, the byte position) where a header cannot be a batch. CRCs are not checked."""
    position, chunk_size = start, chunk_bytes or SCAN_CHUNK_BYTES
    while position + HEADER_SIZE_UP_TO_MAGIC <= end:
        asked = min(chunk_size, end - position)
        chunk = read(position, asked)
        if len(chunk) < asked:
            end = position + len(chunk)
        relative = 0
        while True:
            try:
                batch = read_batch_at(chunk, relative)
            except CorruptRecordError as e:
                raise CorruptRecordError(e.message, path=path, position=position + relative) from e
            if batch is None:
                break
            yield position + relative, batch
            relative += batch.size_in_bytes
        if relative == 0:
            needed = declared_size(chunk) if len(chunk) >= LOG_OVERHEAD else None
            if needed is None or needed > end - position:
                return  # partial tail
            chunk_size = max(chunk_size, needed)
        position += relative
