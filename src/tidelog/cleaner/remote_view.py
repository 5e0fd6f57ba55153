"""Remote segments as the cleaning engine reads them: downloaded on demand, one at a time.

The engine (:class:`~tidelog.cleaner.clean.CleaningEngine`) reads a log through a few methods
(``segments_between``, ``segment_after``, ``collect_aborted_transactions``, ``config``, ``dir``,
``clock``, ``topic_partition``) and its segments through a few attributes. :class:`TierView` gives
it those over a list mixing :class:`RemoteSegment` stand-ins (a finished remote segment, known by
its metadata) and local :class:`~tidelog.storage.segment.LogSegment`\\ s, so the same engine code
maps and rewrites remote segments as it does local ones (no second cleaning implementation).

A :class:`RemoteSegment` answers ``base_offset``, ``size``, ``last_modified_ms`` (its max
timestamp) and ``read_next_offset()`` from its metadata, without I/O. Anything else (its ``log``,
``offset_index``, ``time_index``) makes the :class:`Workspace` download its ``.log``, ``.index``,
``.timeindex`` and ``.txnindex`` (the ``.log`` streamed in ranges of :data:`DOWNLOAD_CHUNK`) into
the workspace and open them as a real segment; opening one releases the one before (files
deleted), so the workspace holds at most one downloaded source segment at a time. Its aborted
transactions (:meth:`RemoteSegment.transaction_index`) need only its ``.txnindex`` object, and
only when the metadata says it is non-empty.

The workspace is a directory of the log dir, :data:`WORKSPACE_DIR` (skipped by the log-dir scan),
one sub-directory per partition, wiped when a pass opens it and when it closes (a crash leaves at
most one pass's scratch files, removed by the next pass). Not thread-safe: one cleaner pass owns
its view and workspace.
"""

from __future__ import annotations

import bisect
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tidelog.clock import Clock
from tidelog.records.varint import INT64_MAX
from tidelog.remote.errors import RemoteStorageError
from tidelog.remote.metadata import RemoteFileKind, RemoteLogSegmentMetadata, object_key
from tidelog.remote.store import RemoteStore
from tidelog.storage import fileops, files
from tidelog.storage.atomic import write_file
from tidelog.storage.config import LogConfig
from tidelog.storage.log import Log
from tidelog.storage.log_config import segment_config
from tidelog.storage.segment import LogSegment
from tidelog.storage.txn_index import AbortedTxn, TransactionIndex
from tidelog.topic_partition import TopicPartition

logger = logging.getLogger(__name__)

WORKSPACE_DIR = "remote-log-cleaner"  # in a log dir: the remote cleaning scratch space
DOWNLOAD_CHUNK = 8 << 20  # a remote .log is streamed to disk in ranges of this size


def download(store: RemoteStore, key: str, path: Path, size: int) -> None:
    """Stream the object ``key`` of ``size`` bytes to ``path`` in ranges (memory: one range)."""
    fd = fileops.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        position = 0
        while position < size:
            chunk = store.get_range(key, position, min(DOWNLOAD_CHUNK, size - position))
            if not chunk:
                raise RemoteStorageError(f"remote object ended at {position} of its {size} bytes", key=key,
                                         uri=store.uri, operation="get_range")
            fileops.write_fully(fd, chunk, path)
            position += len(chunk)
    finally:
        os.close(fd)


class Workspace:
    """One partition's scratch directory for a remote cleaning pass: ``src/`` holds the one
    downloaded source segment, ``out/`` the cleaned segment being built (module docstring)."""

    def __init__(self, root: Path, store: RemoteStore, config: LogConfig, clock: Clock) -> None:
        self.root = root
        self.store = store
        self._config = config
        self._clock = clock
        fileops.rmtree(root, ignore_errors=True)
        self.src = root / "src"
        self.out = root / "out"
        fileops.mkdir(self.src, parents=True)
        fileops.mkdir(self.out)
        self._open: tuple[RemoteSegment, LogSegment] | None = None
        self._txn: dict[str, TransactionIndex | None] = {}

    def materialize(self, segment: RemoteSegment) -> LogSegment:
        """``segment`` downloaded and opened (the one opened before released first)."""
        if self._open is not None and self._open[0] is segment:
            return self._open[1]
        self.release()
        meta = segment.metadata
        base = meta.start_offset
        download(self.store, object_key(meta, RemoteFileKind.SEGMENT), files.log_file(self.src, base),
                 meta.segment_size_in_bytes)
        for kind, name in ((RemoteFileKind.OFFSET_INDEX, files.offset_index_file),
                           (RemoteFileKind.TIME_INDEX, files.time_index_file)):
            write_file(name(self.src, base), self.store.get(object_key(meta, kind)), sync=False,
                       what="downloaded remote index")
        opened = LogSegment.open(self.src, base, segment_config(self._config), self._clock, file_already_exists=True)
        self._open = (segment, opened)
        return opened

    def transaction_index(self, segment: RemoteSegment) -> TransactionIndex | None:
        """The segment's ``.txnindex`` (downloaded once per pass), None when its metadata says empty."""
        meta = segment.metadata
        if meta.txn_idx_empty:
            return None
        if meta.id not in self._txn:
            path = self.root / f"{meta.id}{files.TXN_INDEX_SUFFIX}"
            write_file(path, self.store.get(object_key(meta, RemoteFileKind.TRANSACTION_INDEX)), sync=False,
                       what="downloaded remote transaction index")
            self._txn[meta.id] = TransactionIndex(path, meta.start_offset)
        return self._txn[meta.id]

    def release(self) -> None:
        """Close and delete the downloaded source segment, if any."""
        if self._open is not None:
            self._open[1].delete_files()
            self._open = None

    def close(self) -> None:
        """Release everything and remove the directory."""
        self.release()
        for index in self._txn.values():
            if index is not None:
                index.close()
        self._txn.clear()
        fileops.rmtree(self.root, ignore_errors=True)


class RemoteSegment:
    """A finished remote segment standing in for a :class:`LogSegment` (module docstring)."""

    def __init__(self, metadata: RemoteLogSegmentMetadata, workspace: Workspace) -> None:
        self.metadata = metadata
        self._workspace = workspace
        self.base_offset = metadata.start_offset
        self.size = metadata.segment_size_in_bytes
        self.last_modified_ms = metadata.max_timestamp_ms

    def read_next_offset(self) -> int:
        return self.metadata.end_offset + 1

    def transaction_index(self) -> TransactionIndex | None:
        return self._workspace.transaction_index(self)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or name == "metadata":
            raise AttributeError(name)
        return getattr(self._workspace.materialize(self), name)

    def __repr__(self) -> str:
        m = self.metadata
        return f"RemoteSegment({m.start_offset}..{m.end_offset}, {m.id})"


class TierView:
    """A log as the engine reads it, over ``segments`` (remote stand-ins first, then local
    segments; base offsets strictly ascending). Offsets past the last remote segment's end fall
    through to ``log`` for aborted transactions. Writes (``dir``) go to ``dir``."""

    def __init__(self, log: Log, segments: Sequence[RemoteSegment | LogSegment], dir: Path) -> None:
        self._log = log
        self.segments = list(segments)
        self._bases = [s.base_offset for s in self.segments]
        remote = [s for s in self.segments if isinstance(s, RemoteSegment)]
        self._remote_end = remote[-1].metadata.end_offset + 1 if remote else -1
        self.dir = dir

    @property
    def config(self) -> LogConfig:
        return self._log.config

    @property
    def clock(self) -> Clock:
        return self._log.clock

    @property
    def topic_partition(self) -> TopicPartition:
        return self._log.topic_partition

    def segments_between(self, from_offset: int, to_offset: int) -> list[Any]:
        """Kafka's ``logSegments(from, to)`` over the view's segments."""
        if from_offset >= to_offset:
            return []
        start = max(bisect.bisect_right(self._bases, from_offset) - 1, 0)
        return self.segments[start:bisect.bisect_left(self._bases, to_offset)]

    def segment_after(self, segment: Any) -> Any:
        i = bisect.bisect_right(self._bases, segment.base_offset)
        return self.segments[i] if i < len(self.segments) else None

    def collect_aborted_transactions(self, start_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
        """Kafka's ``collectAbortedTransactions``: the remote segments' ``.txnindex`` objects from
        the one holding ``start_offset`` on (an abort is indexed in the segment of its marker, which
        may lie past the upper bound) until one says the search is complete, then the local
        log's past the remote end."""
        found: list[AbortedTxn] = []
        if upper_bound_offset <= start_offset:
            return found
        for segment in self.segments_between(start_offset, INT64_MAX):
            if not isinstance(segment, RemoteSegment):
                break
            index = segment.transaction_index()
            if index is None:
                continue
            result = index.collect_aborted_txns(start_offset, upper_bound_offset)
            found.extend(result.aborted_transactions)
            if result.is_complete:
                return found
        local_from = max(start_offset, self._remote_end)
        if upper_bound_offset > local_from:
            found.extend(self._log.collect_aborted_transactions(local_from, upper_bound_offset))
        return found
