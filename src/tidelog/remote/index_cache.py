"""The local disk cache of remote segments' indexes (Kafka's ``RemoteIndexCache``).

A read from the remote tier needs the segment's offset index (where in the ``.log`` an offset
starts), a ListOffsets by time its time index, and a ``read_committed`` fetch its transaction
index. Each is fetched from the store once (one GET) and kept as a file under
``<first log dir>/remote-log-index-cache/``, named as Kafka names them::

    <start offset>_<segment uuid>.index      .timeindex      .txnindex (only when non-empty)

and opened with the storage layer's own readers (:class:`~tidelog.storage.index.OffsetIndex`,
:class:`~tidelog.storage.index.TimeIndex` read-only, :class:`~tidelog.storage.txn_index.TransactionIndex`).

Bound. The files of all cached segments take at most ``remote.log.index.file.cache.total.size.bytes``
(``max_bytes``); adding a segment evicts the least recently used others until the total fits (a
segment larger than the whole budget is still served, then evicted first). Kafka's cache is
W-TinyLFU; this one is plain LRU.

Eviction while a reader holds the segment (:meth:`RemoteIndexCache.indexes` is a context manager):
the files are unlinked at once, and the open objects (the mappings of the offset and time
indexes, the transaction index's descriptor, all opened eagerly when the entry is loaded) keep
the data readable until the last reader leaves, which closes them (POSIX unlink semantics; Kafka
renames to ``.deleted`` and lets a cleaner thread delete instead).

Restart. Files found at start-up are reused when their sanity check passes (length whole entries,
first and last entries consistent with the start offset) and deleted when it fails; temporary
files of an interrupted download are deleted. A download is written to a temporary name, fsynced
and renamed, so a crash never leaves a partial file under a final name.

Thread safety: every public method is thread-safe. The cache's ``_lock`` guards the entry map,
the LRU order, the byte total and reference counts; each entry's ``load_lock`` serialises its
download (two readers of one segment fetch it once), taken without the cache's lock held.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from tidelog.errors import CorruptIndexError, StorageError, TidelogError
from tidelog.remote.metadata import RemoteFileKind, RemoteLogSegmentMetadata, object_key
from tidelog.remote.store import RemoteStore
from tidelog.storage import fileops
from tidelog.storage.index import OffsetIndex, TimeIndex
from tidelog.storage.txn_index import TransactionIndex

log = logging.getLogger(__name__)

CACHE_DIR_NAME = "remote-log-index-cache"
_TEMP_SUFFIX = ".tmp"
_NAME = re.compile(r"^(\d+)_([A-Za-z0-9_-]{22})\.(index|timeindex|txnindex)$")
_SUFFIX_OF = {RemoteFileKind.OFFSET_INDEX: ".index", RemoteFileKind.TIME_INDEX: ".timeindex",
              RemoteFileKind.TRANSACTION_INDEX: ".txnindex"}


class RemoteIndexCacheError(TidelogError):
    """A cached or downloaded index of a remote segment is unusable. Context: ``path``, ``key``
    (the object in the store), ``segment``, ``cause``."""


@dataclass(frozen=True, slots=True)
class SegmentIndexes:
    """The opened indexes of one remote segment: ``txn`` is None when the segment has no aborted
    transaction (Kafka's ``txnIdxEmpty``). Valid only inside :meth:`RemoteIndexCache.indexes`."""

    start_offset: int
    offset: OffsetIndex
    time: TimeIndex
    txn: TransactionIndex | None


@dataclass(eq=False)
class _Entry:
    start_offset: int
    segment_id: str
    files: dict[str, int] = field(default_factory=dict)  # suffix -> bytes, files present on disk
    opened: SegmentIndexes | None = None
    users: int = 0
    evicted: bool = False
    load_lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def size(self) -> int:
        return sum(self.files.values())


class RemoteIndexCache:
    """The index cache of the remote tier (see the module doc). ``directory``: where the files
    live (created when missing); ``max_bytes``: ``remote.log.index.file.cache.total.size.bytes``."""

    def __init__(self, store: RemoteStore, directory: Path, max_bytes: int) -> None:
        if max_bytes < 1:
            raise ValueError(f"remote.log.index.file.cache.total.size.bytes must be >= 1, got {max_bytes}")
        self._store = store
        self.directory = Path(directory)
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._entries: OrderedDict[str, _Entry] = OrderedDict()  # by segment uuid, least recent first
        self._total = 0
        self._closed = False
        self.fetches = 0  # index objects downloaded (for tests and status)
        try:
            fileops.mkdir(self.directory, parents=True, exist_ok=True)
        except OSError as e:
            raise StorageError(f"cannot create the remote index cache dir: {e.strerror}", path=self.directory) from e
        self._reuse_files()

    # --- public --------------------------------------------------------------------------------

    @contextmanager
    def indexes(self, segment: RemoteLogSegmentMetadata) -> Iterator[SegmentIndexes]:
        """The segment's indexes, downloaded first when not cached, for the ``with`` block (they stay
        readable even if evicted meanwhile). Raises the store's ``RemoteStorageError`` (naming the
        object) when a download fails and :class:`RemoteIndexCacheError` when an index is corrupt.
        Thread-safe: the cache lock for the bookkeeping, the entry's load lock for a download
        (store calls run without the cache lock)."""
        entry = self._acquire(segment)
        try:
            with entry.load_lock:
                loaded = entry.opened is None
                if loaded:
                    self._load(entry, segment)
                opened = entry.opened
            assert opened is not None
            if loaded:
                self._account(entry)
            yield opened
        finally:
            self._release(entry)

    @property
    def total_bytes(self) -> int:
        """Bytes of the cached files now. Thread-safe: the cache lock."""
        with self._lock:
            return self._total

    def cached_segments(self) -> list[str]:
        """The uuids of the cached segments, least recently used first. Thread-safe: the cache lock."""
        with self._lock:
            return list(self._entries)

    def close(self) -> None:
        """Close every open index (files stay for the next start). Idempotent. Thread-safe: the cache lock."""
        with self._lock:
            self._closed = True
            entries = list(self._entries.values())
        for entry in entries:
            with entry.load_lock:
                if entry.users == 0:
                    _close(entry)

    # --- entries -------------------------------------------------------------------------------

    def _acquire(self, segment: RemoteLogSegmentMetadata) -> _Entry:
        with self._lock:
            if self._closed:
                raise StorageError("the remote index cache is closed", path=self.directory)
            entry = self._entries.get(segment.id)
            if entry is None:
                entry = self._entries[segment.id] = _Entry(segment.start_offset, segment.id)
            self._entries.move_to_end(segment.id)
            entry.users += 1
            return entry

    def _release(self, entry: _Entry) -> None:
        with self._lock:
            entry.users -= 1
            close = entry.evicted and entry.users == 0
        if close:
            with entry.load_lock:
                _close(entry)

    def _account(self, entry: _Entry) -> None:
        """After ``entry`` loaded: count its files and evict least recently used others over the
        bound (their files unlinked under the lock, so a new entry for the same segment never loses
        its files to an old one's eviction; segments still loading are skipped)."""
        idle = []
        with self._lock:
            self._total = sum(e.size for e in self._entries.values())
            for other in list(self._entries.values()):
                if self._total <= self.max_bytes:
                    break
                if other is entry or (other.users and other.opened is None):
                    continue
                del self._entries[other.segment_id]
                self._total -= other.size
                other.evicted = True
                self._unlink(other)
                if other.users == 0:
                    idle.append(other)
        for victim in idle:
            with victim.load_lock:
                _close(victim)

    def _unlink(self, entry: _Entry) -> None:
        for suffix in list(entry.files):
            try:
                fileops.unlink(self._path(entry, suffix), missing_ok=True)
            except OSError as e:
                log.warning("remote index cache: cannot delete %s: %s", self._path(entry, suffix), e)
        entry.files.clear()

    # --- loading -------------------------------------------------------------------------------

    def _load(self, entry: _Entry, segment: RemoteLogSegmentMetadata) -> None:
        """Download what is missing and open the indexes (under the entry's load lock)."""
        kinds = [RemoteFileKind.OFFSET_INDEX, RemoteFileKind.TIME_INDEX]
        if not segment.txn_idx_empty:
            kinds.append(RemoteFileKind.TRANSACTION_INDEX)
        for kind in kinds:
            suffix = _SUFFIX_OF[kind]
            if suffix not in entry.files:
                entry.files[suffix] = self._download(entry, segment, kind)
        path = self._path
        key = object_key(segment, RemoteFileKind.OFFSET_INDEX)
        try:
            offset = OffsetIndex(path(entry, ".index"), segment.start_offset, writable=False)
            offset.sanity_check()
            time = TimeIndex(path(entry, ".timeindex"), segment.start_offset, writable=False)
            time.sanity_check()
            txn = None
            if not segment.txn_idx_empty:
                txn = TransactionIndex(path(entry, ".txnindex"), segment.start_offset)
                if txn.is_empty:  # also opens the descriptor, so an eviction's unlink cannot lose it
                    raise CorruptIndexError("transaction index is empty but the metadata says it is not",
                                            path=path(entry, ".txnindex"))
        except (CorruptIndexError, StorageError) as e:
            self._drop_files(entry)
            raise RemoteIndexCacheError(
                f"index of remote segment {segment.id} of {segment.topic_id_partition} is unusable: {e}",
                path=str(self.directory), key=key, segment=segment.id, cause=str(e)) from e
        entry.opened = SegmentIndexes(segment.start_offset, offset, time, txn)

    def _download(self, entry: _Entry, segment: RemoteLogSegmentMetadata, kind: RemoteFileKind) -> int:
        data = self._store.get(object_key(segment, kind))
        with self._lock:
            self.fetches += 1
        target = self._path(entry, _SUFFIX_OF[kind])
        temp = target.with_name(target.name + _TEMP_SUFFIX)
        try:  # through the file-operation seam: every step is a kill point of the crash tests
            fd = fileops.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
            try:
                fileops.write_fully(fd, data, temp)
                fileops.fsync(fd, temp)
            finally:
                os.close(fd)
            fileops.rename(temp, target)
        except OSError as e:
            fileops.unlink(temp, missing_ok=True)
            raise StorageError(f"cannot write a remote index to the cache: {e.strerror}", path=target) from e
        return len(data)

    def _drop_files(self, entry: _Entry) -> None:
        _close(entry)
        self._unlink(entry)

    def _path(self, entry: _Entry, suffix: str) -> Path:
        return self.directory / f"{entry.start_offset}_{entry.segment_id}{suffix}"

    def _reuse_files(self) -> None:
        """Register the valid files a previous run left, oldest first (LRU by mtime); delete the rest."""
        found: dict[str, _Entry] = {}
        stamps: dict[str, float] = {}
        for path in sorted(self.directory.iterdir()):
            match = _NAME.match(path.name)
            if match is None or not self._valid(path, int(match.group(1)), match.group(3)):
                _remove(path)
                continue
            entry = found.setdefault(match.group(2), _Entry(int(match.group(1)), match.group(2)))
            if entry.start_offset != int(match.group(1)):
                _remove(path)
                continue
            stat = path.stat()
            entry.files["." + match.group(3)] = stat.st_size
            stamps[entry.segment_id] = max(stamps.get(entry.segment_id, 0.0), stat.st_mtime)
        for segment_id in sorted(found, key=lambda s: stamps[s]):
            self._entries[segment_id] = found[segment_id]
        self._total = sum(e.size for e in self._entries.values())

    @staticmethod
    def _valid(path: Path, start_offset: int, kind: str) -> bool:
        try:
            if kind == "index":
                OffsetIndex.check_file(path, start_offset)
            elif kind == "timeindex":
                TimeIndex.check_file(path, start_offset)
            else:
                txn = TransactionIndex(path, start_offset)
                try:
                    txn.sanity_check()
                finally:
                    txn.close()
            return True
        except (CorruptIndexError, StorageError, OSError) as e:
            log.warning("remote index cache: %s is not reused: %s", path, e)
            return False


def _close(entry: _Entry) -> None:
    opened, entry.opened = entry.opened, None
    if opened is None:
        return
    opened.offset.close_handler()
    opened.time.close_handler()
    if opened.txn is not None:
        opened.txn.close()


def _remove(path: Path) -> None:
    try:
        if path.is_dir():
            return
        fileops.unlink(path, missing_ok=True)
    except OSError as e:
        log.warning("remote index cache: cannot delete %s: %s", path, e)
