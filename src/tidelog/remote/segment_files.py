"""A sealed local segment's files, pinned for an upload that runs without the log's lock.

A copy reads a sealed segment while the log goes on: the cleaner may swap in a cleaned
segment at the same base offset (renaming files over the same names) and retention may rename
the segment's files to ``.deleted`` and unlink them. :func:`pin_segment_files` opens every file
the copy uploads at once and records its identity (device, inode) and size; holding the
descriptors keeps those inodes alive, so no other file can take their numbers meanwhile, and
each upload reads its pinned descriptor (:attr:`PinnedFile.source`), never the path again.
:meth:`SegmentFiles.check_unchanged`, called after the uploads, stats each path again: a path
that is gone or names another inode, or a size that moved, means the segment was replaced or
deleted meanwhile, and the copy answers :class:`SegmentSourceGoneError` (retriable: list the
partition's segments again).

The set is Kafka's ``LogSegmentData``: the ``.log``, ``.index``, ``.timeindex``, the
``.txnindex`` only when non-empty, and the producer snapshot at the next segment's base offset
(required: Kafka refuses a copy without it). Not thread-safe; one copy owns a pin.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from tidelog.remote.errors import RemoteStorageError
from tidelog.remote.metadata import RemoteFileKind
from tidelog.storage import files
from tidelog.storage.index import TimeIndex


class SegmentSourceGoneError(RemoteStorageError):
    """A local file of the segment being copied is gone or was replaced (retention deleted the
    segment, or the cleaner swapped it) while it was read: list the segments again and retry.
    Context: ``path``, ``partition``."""

    retriable = True


class MissingSegmentFileError(RemoteStorageError):
    """A file a copy requires is missing while the segment itself is still there (for example
    the producer snapshot at the next segment's base offset). Context: ``path``, ``partition``."""


@dataclass(frozen=True, slots=True)
class PinnedFile:
    """One file of the set: its object kind, path, size, (device, inode) when pinned, and the
    open file (``source``, unbuffered) an upload reads, so it reads the pinned inode whatever
    happens to the path meanwhile."""

    kind: RemoteFileKind
    path: Path
    size: int
    identity: tuple[int, int]
    source: BinaryIO = field(compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class SegmentFiles:
    """The pinned file set of one sealed segment (:func:`pin_segment_files`)."""

    partition: str
    base_offset: int
    next_base_offset: int
    files: tuple[PinnedFile, ...]
    max_timestamp_ms: int

    def file(self, kind: RemoteFileKind) -> PinnedFile | None:
        """The pinned file of ``kind``, ``None`` when the set has none (an empty txn index)."""
        return next((f for f in self.files if f.kind is kind), None)

    @property
    def log_size(self) -> int:
        """The ``.log``'s bytes (the segment's size in the remote metadata)."""
        log = self.file(RemoteFileKind.SEGMENT)
        assert log is not None  # pin_segment_files always pins it
        return log.size

    @property
    def txn_index_empty(self) -> bool:
        return self.file(RemoteFileKind.TRANSACTION_INDEX) is None

    def check_unchanged(self) -> None:
        """Raise :class:`SegmentSourceGoneError` unless every path still names its pinned inode
        with the pinned size. One ``stat`` per file."""
        for pinned in self.files:
            try:
                st = os.stat(pinned.path)
            except FileNotFoundError:
                st = None
            if st is None or (st.st_dev, st.st_ino) != pinned.identity or st.st_size != pinned.size:
                raise SegmentSourceGoneError(
                    "the local segment was deleted or replaced during its copy; list the segments again",
                    partition=self.partition, path=pinned.path,
                    cause="path gone" if st is None else "path names another file or its size changed")


_SEGMENT_KINDS = ((RemoteFileKind.SEGMENT, files.log_file), (RemoteFileKind.OFFSET_INDEX, files.offset_index_file),
                  (RemoteFileKind.TIME_INDEX, files.time_index_file),
                  (RemoteFileKind.TRANSACTION_INDEX, files.transaction_index_file))


@contextmanager
def pin_segment_files(dir: Path, base_offset: int, next_base_offset: int, *,
                      partition: str) -> Iterator[SegmentFiles]:
    """Open and pin the file set of the sealed segment at ``base_offset`` in the partition dir
    ``dir`` (module docstring) for the ``with`` block. :class:`SegmentSourceGoneError` when its
    ``.log`` is gone, :class:`MissingSegmentFileError` naming the file when an index or the
    producer snapshot is missing while the ``.log`` is there. Costs an open and an fstat per
    file and one ``pread`` of the time index's last entry (the max timestamp)."""
    with ExitStack() as stack:
        pinned: list[PinnedFile] = []
        log_path = files.log_file(dir, base_offset)
        wanted = [(kind, name(dir, base_offset)) for kind, name in _SEGMENT_KINDS]
        wanted.append((RemoteFileKind.PRODUCER_SNAPSHOT, files.producer_snapshot_file(dir, next_base_offset)))
        log_mtime_ms = 0
        for kind, path in wanted:
            try:
                fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            except FileNotFoundError:
                if kind is RemoteFileKind.TRANSACTION_INDEX:
                    continue
                if kind is RemoteFileKind.SEGMENT or not log_path.exists():
                    raise SegmentSourceGoneError("the local segment is gone (deleted or replaced); list the "
                                                 "segments again", partition=partition, path=path) from None
                raise MissingSegmentFileError(f"cannot copy segment {base_offset}: its {_what(kind)} is missing",
                                              partition=partition, path=path) from None
            source = stack.enter_context(open(fd, "rb", buffering=0, closefd=True))
            st = os.fstat(fd)
            if kind is RemoteFileKind.TRANSACTION_INDEX and st.st_size == 0:
                continue
            if kind is RemoteFileKind.SEGMENT:
                log_mtime_ms = st.st_mtime_ns // 1_000_000
            pinned.append(PinnedFile(kind, path, st.st_size, (st.st_dev, st.st_ino), source))
        last = TimeIndex.read_last_entry(files.time_index_file(dir, base_offset), base_offset)
        max_timestamp = last.timestamp if last.timestamp >= 0 else log_mtime_ms  # Kafka's largestTimestamp
        segment = SegmentFiles(partition, base_offset, next_base_offset, tuple(pinned), max_timestamp)
        yield segment


def _what(kind: RemoteFileKind) -> str:
    if kind is RemoteFileKind.PRODUCER_SNAPSHOT:
        return "producer snapshot at the next segment's base offset (Kafka requires it)"
    return f"{kind.value} file"
