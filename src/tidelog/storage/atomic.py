"""Small metadata files: the one place that replaces one crash-safely (write-new, fsync, rename,
fsync dir) and the one place that reads one whole (:func:`read_file`).

Every metadata file that must survive a crash (checkpoints, ``partition.metadata``,
``meta.properties``, the clean-shutdown marker) is written through :func:`write_atomically`,
following Kafka's ``CheckpointFile.write`` + ``Utils.atomicMoveWithFallback``:

1. write the whole new content to ``<path>.tmp`` (opened with truncation, so a ``.tmp`` left by
   an earlier crash is simply overwritten), flush and ``fsync`` it;
2. ``os.replace(<path>.tmp, <path>)``, atomic on POSIX file systems;
3. ``fsync`` the parent directory so the rename itself is durable.

A crash before step 2 leaves the old file untouched (plus a stray ``.tmp`` that readers never
look at); a crash after it leaves the complete new file. Readers therefore see either the old or
the new content, never a torn mix.

Every ``OSError`` becomes a :class:`~tidelog.errors.StorageError` naming the path and the
operation that failed (``raise ... from`` the original), which is where a log dir goes offline.
:func:`read_file` reads such a file whole, with the same error rule; decoding is the caller's.
"""

from __future__ import annotations

import os
from pathlib import Path

from tidelog.errors import StorageError
from tidelog.storage import fileops
from tidelog.storage.files import temporary_write_path


def write_atomically(path: Path, data: bytes, *, sync: bool = True) -> None:
    """Replace ``path`` with ``data`` so that a crash leaves either the old or the new content.

    ``sync=False`` skips both fsyncs (Kafka's ``sync`` flag); the rename stays atomic but may be
    lost on power failure. Costs two fsyncs; not for hot paths.
    """
    tmp = temporary_write_path(path)
    try:
        write_file(tmp, data, sync=sync)
    except StorageError:
        _discard(tmp)
        raise
    try:
        fileops.rename(tmp, path)
    except OSError as e:
        _discard(tmp)
        raise StorageError("cannot rename temporary file into place", path=path, operation="rename") from e
    if sync:
        fsync_dir(path.parent)


def fsync_dir(dir: Path) -> None:
    """Make the directory's entries (creations, renames, deletions) durable."""
    try:
        fd = fileops.open_dir(dir)
    except OSError as e:
        raise StorageError("cannot open directory for fsync", path=dir, operation="open") from e
    try:
        fileops.fsync(fd, dir)
    except OSError as e:
        raise StorageError("cannot fsync directory", path=dir, operation="fsync") from e
    finally:
        os.close(fd)


_READ_CHUNK = 1 << 16  # below malloc's mmap threshold: a small file costs one small buffer


def read_file(path: Path, what: str) -> bytes:
    """The whole content of a small file; :class:`StorageError` "cannot read <what>" naming ``path``.

    Plain ``open``/``read`` until end of file/``close`` (a READ op of the seam): a partition's
    load reads two or three such files, and ``Path.read_bytes`` costs twice the system calls
    and Python work (buffered file object, size probe) for them."""
    try:
        fd = fileops.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            chunks = []
            while chunk := os.read(fd, _READ_CHUNK):
                chunks.append(chunk)
        finally:
            os.close(fd)
    except OSError as e:
        raise StorageError(f"cannot read {what}", path=path, operation="read") from e
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def write_file(path: Path, data: bytes, *, sync: bool, what: str = "file") -> None:
    """Create or replace ``path`` in place with ``data`` (mode 0644), fsynced when ``sync``;
    :class:`StorageError` "cannot write <what>" naming ``path``. Not atomic: for files whose
    readers detect a torn write themselves (a CRC); otherwise use :func:`write_atomically`."""
    try:
        fd = fileops.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        try:
            fileops.write_fully(fd, data, path)
            if sync:
                fileops.fsync(fd, path)
        finally:
            os.close(fd)
    except OSError as e:
        raise StorageError(f"cannot write {what}", path=path, operation="write") from e


def _discard(path: Path) -> None:
    """Best-effort removal of a scratch file after a failure; the original error matters more."""
    try:
        fileops.unlink(path, missing_ok=True)
    except OSError:
        pass
