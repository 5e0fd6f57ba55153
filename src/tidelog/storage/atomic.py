"""Crash-safe replacement of a small file: the one place that does write-new, fsync, rename, fsync dir.

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
"""

from __future__ import annotations

import os
from pathlib import Path

from tidelog.errors import StorageError

# Kafka's name for the scratch file of an atomic write: the target name plus ".tmp".
TEMPORARY_WRITE_SUFFIX = ".tmp"


def temporary_write_path(path: Path) -> Path:
    """``<path>.tmp``: where :func:`write_atomically` stages the new content."""
    return path.with_name(path.name + TEMPORARY_WRITE_SUFFIX)


def write_atomically(path: Path, data: bytes, *, sync: bool = True) -> None:
    """Replace ``path`` with ``data`` so that a crash leaves either the old or the new content.

    ``sync=False`` skips both fsyncs (Kafka's ``sync`` flag); the rename stays atomic but may be
    lost on power failure. Costs two fsyncs; not for hot paths.
    """
    tmp = temporary_write_path(path)
    try:
        _write_file(tmp, data, sync=sync)
    except StorageError:
        _discard(tmp)
        raise
    try:
        os.replace(tmp, path)
    except OSError as e:
        _discard(tmp)
        raise StorageError("cannot rename temporary file into place", path=path, operation="rename") from e
    if sync:
        fsync_dir(path.parent)


def fsync_dir(dir: Path) -> None:
    """Make the directory's entries (creations, renames, deletions) durable."""
    try:
        fd = os.open(dir, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError as e:
        raise StorageError("cannot open directory for fsync", path=dir, operation="open") from e
    try:
        os.fsync(fd)
    except OSError as e:
        raise StorageError("cannot fsync directory", path=dir, operation="fsync") from e
    finally:
        os.close(fd)


def fsync_file(path: Path) -> None:
    """Flush an existing file's data and metadata to the device."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as e:
        raise StorageError("cannot open file for fsync", path=path, operation="open") from e
    try:
        os.fsync(fd)
    except OSError as e:
        raise StorageError("cannot fsync file", path=path, operation="fsync") from e
    finally:
        os.close(fd)


def _write_file(path: Path, data: bytes, *, sync: bool) -> None:
    try:
        with open(path, "wb") as f:
            f.write(data)
            f.flush()
            if sync:
                os.fsync(f.fileno())
    except OSError as e:
        raise StorageError("cannot write file", path=path, operation="write") from e


def _discard(path: Path) -> None:
    """Best-effort removal of a scratch file after a failure; the original error matters more."""
    try:
        path.unlink(missing_ok=True)
    except OSError:
        pass
