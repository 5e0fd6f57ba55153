"""A bounded in-memory cache of fixed-size chunks of remote objects, with sequential read-ahead
(tidelog's; Kafka's broker has none, the Aiven remote storage plugin has the same idea as its
chunk cache with prefetching).

A consumer catching up from the remote tier reads a segment front to back, one fetch at a time,
and its next fetch is sent only once the previous answer arrived: without read-ahead every fetch
pays a full GET round trip on top of the broker's own work. Here a ranged read is served from
aligned chunks of ``chunk_bytes`` (one GET each, ``[i * chunk_bytes, (i + 1) * chunk_bytes)``),
and a read that touches chunk ``i`` starts GETs of chunks ``i + 1 .. i + prefetch_chunks`` of the
same object in the background, so the next fetch usually finds its bytes in memory.

Bounds. Cached chunks take at most ``max_bytes`` (least recently used evicted; a chunk being read
is evicted only from the cache, its bytes live until the reader drops them); read-ahead runs on
its own ``prefetch_threads`` threads and is skipped when ``prefetch_chunks`` GETs per thread are
already asked for, so its queue stays that short; a read wanting a chunk that is queued for
read-ahead waits for that GET (behind at most that queue) rather than asking twice. A small read
costs at most one chunk plus the read-ahead: never the whole object when it is larger than that.
Read-ahead GETs in flight are not counted in ``max_bytes``: at most ``prefetch_chunks *
prefetch_threads`` chunks more.

Errors: a GET's error is raised to every reader waiting for that chunk and the chunk is
forgotten (the next read tries again); a failed read-ahead is forgotten silently.

Thread safety: every public method is thread-safe; ``_lock`` guards the chunk map, the byte total
and the read-ahead count; GETs run without it.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor

from tidelog.remote.store import RemoteStore

log = logging.getLogger(__name__)

CHUNK_BYTES = 8 << 20
MAX_BYTES = 64 << 20
PREFETCH_CHUNKS = 3
PREFETCH_THREADS = 2


class ChunkCache:
    """Ranged reads of ``store`` through cached chunks (see the module doc). ``uri``: the store's."""

    def __init__(self, store: RemoteStore, *, chunk_bytes: int = CHUNK_BYTES, max_bytes: int = MAX_BYTES,
                 prefetch_chunks: int = PREFETCH_CHUNKS, prefetch_threads: int = PREFETCH_THREADS) -> None:
        if chunk_bytes < 1 or max_bytes < chunk_bytes or prefetch_chunks < 0:
            raise ValueError(f"need chunk_bytes >= 1, max_bytes >= chunk_bytes, prefetch_chunks >= 0; got "
                             f"{chunk_bytes}, {max_bytes}, {prefetch_chunks}")
        self.store = store
        self.uri = store.uri
        self.chunk_bytes = chunk_bytes
        self.max_bytes = max_bytes
        self.prefetch_chunks = prefetch_chunks
        self._lock = threading.Lock()
        self._chunks: OrderedDict[tuple[str, int], Future[bytes]] = OrderedDict()
        self._sizes: dict[tuple[str, int], int] = {}  # bytes of the chunks loaded
        self._total = 0
        self._prefetching = 0
        self._prefetch_cap = prefetch_chunks * max(1, prefetch_threads)
        self._pool = ThreadPoolExecutor(max(1, prefetch_threads), thread_name_prefix="tidelog-remote-prefetch")
        self.gets = 0  # chunk GETs made (reads and read-ahead)

    def get_range(self, key: str, start: int, length: int, *, object_size: int | None = None) -> bytes:
        """``length`` bytes of ``key`` from ``start`` (fewer when the object ends first), from the
        cached chunks, GETting those missing; then the read-ahead past the last chunk touched,
        below ``object_size`` when given. Raises the store's errors. Thread-safe."""
        if length <= 0:
            return b""
        first, last = start // self.chunk_bytes, (start + length - 1) // self.chunk_bytes
        parts = []
        for index in range(first, last + 1):
            chunk = self._chunk(key, index)
            parts.append(chunk)
            if len(chunk) < self.chunk_bytes:
                break  # the object ends in this chunk
        self._read_ahead(key, last + 1, object_size)
        offset = start - first * self.chunk_bytes
        if len(parts) == 1:
            return parts[0][offset:offset + length]
        return b"".join(parts)[offset:offset + length]

    @property
    def total_bytes(self) -> int:
        """Bytes of the chunks held now. Thread-safe: ``_lock``."""
        with self._lock:
            return self._total

    def close(self) -> None:
        """Stop the read-ahead threads, after the read-ahead GETs already asked for (at most
        ``prefetch_chunks`` per thread), and drop every chunk. Thread-safe."""
        self._pool.shutdown(wait=True)
        with self._lock:
            self._chunks.clear()
            self._sizes.clear()
            self._total = 0

    # --- internals ------------------------------------------------------------------------------

    def _chunk(self, key: str, index: int) -> bytes:
        future, mine = self._claim(key, index)
        if mine:
            self._load(key, index, future)
        try:
            return future.result()
        except Exception:
            if mine:
                raise
        future, mine = self._claim(key, index)  # a read-ahead's GET failed: this reader tries once itself
        if mine:
            self._load(key, index, future)
        return future.result()

    def _claim(self, key: str, index: int) -> tuple[Future[bytes], bool]:
        with self._lock:
            future = self._chunks.get((key, index))
            if future is not None:
                self._chunks.move_to_end((key, index))
                return future, False
            future = self._chunks[key, index] = Future()
            return future, True

    def _load(self, key: str, index: int, future: Future[bytes]) -> None:
        try:
            data = self.store.get_range(key, index * self.chunk_bytes, self.chunk_bytes)
        except BaseException as e:
            with self._lock:
                if self._chunks.get((key, index)) is future:
                    del self._chunks[key, index]
            future.set_exception(e)
            return
        with self._lock:
            self.gets += 1
            if self._chunks.get((key, index)) is future:
                self._sizes[key, index] = len(data)
                self._total += len(data)
                self._evict((key, index))
        future.set_result(data)

    def _evict(self, keep: tuple[str, int]) -> None:
        """Drop least recently used loaded chunks until the total fits (under ``_lock``)."""
        for name in list(self._chunks):
            if self._total <= self.max_bytes:
                return
            if name == keep or name not in self._sizes:
                continue  # the chunk just loaded, or one still loading
            del self._chunks[name]
            self._total -= self._sizes.pop(name)

    def _read_ahead(self, key: str, index: int, object_size: int | None) -> None:
        for ahead in range(index, index + self.prefetch_chunks):
            if object_size is not None and ahead * self.chunk_bytes >= object_size:
                return
            with self._lock:
                if (key, ahead) in self._chunks:
                    continue
                if self._prefetching >= self._prefetch_cap:
                    return
                self._prefetching += 1
                future: Future[bytes] = Future()
                self._chunks[key, ahead] = future
            try:
                self._pool.submit(self._prefetch, key, ahead, future)
            except RuntimeError:  # closed
                with self._lock:
                    self._prefetching -= 1
                    self._chunks.pop((key, ahead), None)
                return

    def _prefetch(self, key: str, index: int, future: Future[bytes]) -> None:
        try:
            self._load(key, index, future)
            if future.exception() is not None:
                log.debug("remote read-ahead of %s chunk %d failed: %s", key, index, future.exception())
        finally:
            with self._lock:
                self._prefetching -= 1
