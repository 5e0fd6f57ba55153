"""FileSlice: a byte range of a segment's ``.log`` held by its own descriptor, not read yet.

A read asked ``as_slice`` (:meth:`LogSegment.read <tidelog.storage.segment.LogSegment.read>`)
returns one instead of the bytes, so that the server can hand the range to the kernel
(``sendfile``) without copying it through Python. The slice owns a duplicate (``os.dup``) of the
segment's descriptor: a segment closed, renamed (``.deleted``, a clean's swap) or unlinked after
the read still reads the same bytes through it, as an open file does. A file cut short underneath
(truncation) is the one change it cannot hide: :meth:`read` then fails naming the file.

The duplicate shares the file offset with the segment's descriptor; every read and write of a
segment file is positional (``pread``/``pwrite``), so moving it (``sendfile`` does) changes nothing.

Only ranges of at least :data:`MIN_SLICE_BYTES` become slices: below it, the duplicate, the close
and the sendfile call cost the server more than copying the bytes (a 4 KiB fetch ~1.2x, 64 KiB
~1.2x, 128 KiB ~1.05x the CPU of the copy; 256 KiB ~0.65x, 1 MiB ~0.8x), and the bound keeps a
fetch of many small partitions from holding a descriptor for each (a response holds at most
``fetch.max.bytes`` / 256 KiB of them). A process out of descriptors reads the bytes instead.

Costs one descriptor from the read until :meth:`close`; the owner closes it (every path of a
fetch does, see :mod:`tidelog.server.fetch`). Dropping an unclosed slice closes it too (CPython
frees it at once), so a path that forgets cannot leak descriptors beyond the slice's life.

Not thread-safe for :meth:`close` against a concurrent :meth:`read`; one owner at a time (a read
thread makes it, the event loop sends and closes it).
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from types import TracebackType

from tidelog.errors import StorageError
from tidelog.storage import fileops

MIN_SLICE_BYTES = 256 * 1024  # smaller ranges are read as bytes (see the module doc)
_OUT_OF_DESCRIPTORS = frozenset({errno.EMFILE, errno.ENFILE})


class FileSlice:
    """``size`` bytes at ``position`` of the file open as ``fd`` (this slice's own descriptor)."""

    __slots__ = ("_fd", "path", "position", "size")

    def __init__(self, fd: int, position: int, size: int, path: Path) -> None:
        if position < 0 or size <= 0:
            raise ValueError(f"invalid file slice of {path}: position {position}, size {size}")
        self._fd: int | None = fd
        self.path = path
        self.position = position
        self.size = size

    @classmethod
    def of(cls, fd: int, position: int, size: int, path: Path) -> FileSlice | None:
        """A slice of the file open as ``fd`` (the segment's descriptor, duplicated here: the
        caller keeps and closes its own); None when the process has no descriptor left (the
        caller reads the bytes: a busy broker is no disk fault). :class:`StorageError` naming
        ``path`` when the descriptor cannot be duplicated otherwise (a segment closed meanwhile)."""
        try:
            own = os.dup(fd)
        except OSError as e:
            if e.errno in _OUT_OF_DESCRIPTORS:
                return None
            raise StorageError(f"cannot hold the read's file: {e.strerror}", path=path, position=position) from e
        return cls(own, position, size, path)

    def __len__(self) -> int:
        return self.size

    @property
    def closed(self) -> bool:
        return self._fd is None

    def fileno(self) -> int:
        """This slice's descriptor; ValueError once closed."""
        fd = self._fd
        if fd is None:
            raise ValueError(f"file slice of {self.path} is closed")
        return fd

    def read(self) -> bytes:
        """The slice's bytes (a ``pread`` of exactly :attr:`size`, repeated over short reads).
        :class:`StorageError` naming the file when it ends before the slice does or the read fails."""
        fd = self.fileno()
        parts: list[bytes] = []
        done = 0
        try:
            while done < self.size:
                chunk = fileops.pread(fd, self.size - done, self.position + done, self.path)
                if not chunk:
                    raise StorageError(f"file ends {self.size - done} bytes before the read's end",
                                       path=self.path, position=self.position + done)
                parts.append(chunk)
                done += len(chunk)
        except OSError as e:
            raise StorageError(f"read failed: {e.strerror}", path=self.path, position=self.position + done) from e
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def read_into(self, buffer: memoryview, start: int) -> int:
        """Fill ``buffer`` (at most its length) from byte ``start`` of the slice; returns the bytes
        read, short only where the file ends (0: nothing there). :class:`StorageError` on a
        failed read."""
        fd = self.fileno()
        want = min(len(buffer), self.size - start)
        done = 0
        try:
            while done < want:
                n = os.preadv(fd, [buffer[done:want]], self.position + start + done)
                if not n:
                    break
                done += n
        except OSError as e:
            raise StorageError(f"read failed: {e.strerror}", path=self.path, position=self.position + start) from e
        return done

    def close(self) -> None:
        """Release the descriptor. Idempotent."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    def __enter__(self) -> FileSlice:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def __del__(self) -> None:
        fd = getattr(self, "_fd", None)
        if fd is not None:
            self._fd = None
            try:
                os.close(fd)
            except OSError:
                pass

    def __repr__(self) -> str:
        state = "closed" if self._fd is None else f"fd {self._fd}"
        return f"FileSlice({str(self.path)!r}, position={self.position}, size={self.size}, {state})"


def close_records(records: object) -> None:
    """Close ``records`` when it is a :class:`FileSlice` (bytes need nothing)."""
    if records.__class__ is FileSlice:
        records.close()  # type: ignore[attr-defined]
