"""Helpers of the manager's remote-read tests: a reader whose chunk cache counts its GETs."""

from __future__ import annotations

import threading
from typing import Any

from tidelog.manager.remote_reads import RemoteReader
from tidelog.remote.chunk_cache import ChunkCache


class CountingStore:
    """Delegates to ``inner``; counts the bytes of ranged GETs. Thread-safe."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.uri = inner, inner.uri
        self._lock = threading.Lock()
        self.range_bytes = 0

    def get_range(self, key: str, start: int, length: int) -> bytes:
        data = self.inner.get_range(key, start, length)
        with self._lock:
            self.range_bytes += len(data)
        return data

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def counting_chunks(reader: RemoteReader, **chunk_options: Any) -> CountingStore:
    """Replace ``reader``'s chunk cache by one over a counting store (with ``chunk_options``)."""
    counting = CountingStore(reader.store)
    reader.chunks.close()
    reader.chunks = ChunkCache(counting, **chunk_options)  # type: ignore[arg-type]
    return counting
