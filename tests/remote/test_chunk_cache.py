"""The chunk cache of remote reads (remote/chunk_cache.py): exact bytes for any range, aligned
chunk GETs, the read-ahead of the next chunks, the byte bound, errors raised and forgotten."""

from __future__ import annotations

import os
import threading

import pytest
from read_helpers import CountingStore

from tidelog.remote.chunk_cache import ChunkCache
from tidelog.remote.errors import RemoteStoreUnreachableError
from tidelog.remote.store import ArrowRemoteStore

DATA = os.urandom(10_000)


@pytest.fixture
def counting(store: ArrowRemoteStore) -> CountingStore:
    store.put("a/x.log", DATA)
    return CountingStore(store)


@pytest.mark.parametrize("start,length", [(0, 1), (0, 10_000), (999, 2), (1000, 1000), (2500, 4000), (9_990, 50),
                                          (10_000, 5), (3, 0)])
def test_any_range_reads_the_object_s_bytes(counting: CountingStore, start: int, length: int) -> None:
    cache = ChunkCache(counting, chunk_bytes=1000, max_bytes=4000, prefetch_chunks=0)
    assert cache.get_range("a/x.log", start, length) == DATA[start:start + length]
    assert cache.get_range("a/x.log", start, length) == DATA[start:start + length]
    cache.close()


def test_chunks_are_fetched_once_and_read_ahead(counting: CountingStore) -> None:
    cache = ChunkCache(counting, chunk_bytes=1000, max_bytes=10_000, prefetch_chunks=2)
    cache.get_range("a/x.log", 1500, 100, object_size=len(DATA))  # chunk 1; chunks 2 and 3 ahead
    cache.close()  # waits for the read-ahead
    assert counting.range_calls == 3 and counting.range_bytes == 3000


def test_read_ahead_stops_at_the_object_end(counting: CountingStore) -> None:
    cache = ChunkCache(counting, chunk_bytes=4000, max_bytes=16_000, prefetch_chunks=4)
    cache.get_range("a/x.log", 0, 10, object_size=len(DATA))
    cache.close()
    assert counting.range_calls == 3 and counting.range_bytes == len(DATA)


def test_the_bound_evicts_the_least_recently_used(counting: CountingStore) -> None:
    cache = ChunkCache(counting, chunk_bytes=1000, max_bytes=3000, prefetch_chunks=0)
    for start in (0, 1000, 2000, 0, 3000):  # chunk 1 is then the least recently used
        cache.get_range("a/x.log", start, 10)
    assert cache.total_bytes <= 3000
    calls = counting.range_calls
    cache.get_range("a/x.log", 10, 10)
    cache.get_range("a/x.log", 3010, 10)
    assert counting.range_calls == calls, "chunks 0 and 3 are still cached"
    cache.get_range("a/x.log", 1010, 10)
    assert counting.range_calls == calls + 1, "chunk 1 was evicted"
    cache.close()


def test_a_failed_get_is_raised_then_forgotten(counting: CountingStore) -> None:
    failing = threading.Event()
    failing.set()
    real = counting.get_range

    def get_range(key: str, start: int, length: int) -> bytes:
        if failing.is_set():
            raise RemoteStoreUnreachableError("injected outage", operation="get_range", key=key, uri="x")
        return real(key, start, length)

    counting.get_range = get_range  # type: ignore[method-assign]
    cache = ChunkCache(counting, chunk_bytes=1000, max_bytes=3000, prefetch_chunks=0)
    with pytest.raises(RemoteStoreUnreachableError, match="injected"):
        cache.get_range("a/x.log", 0, 10)
    failing.clear()
    assert cache.get_range("a/x.log", 0, 10) == DATA[:10]
    cache.close()


def test_close_waits_for_a_queued_read_ahead_and_leaves_no_chunk_claimed(store: ArrowRemoteStore) -> None:
    """One read-ahead thread, two chunks ahead: the second waits in the queue while the first's slow
    GET runs. close() runs both (cancelling the queued one left its chunk claimed by a future that
    never completes, and a later read of that chunk waited forever)."""
    store.put("a/x.log", DATA)
    slow = CountingStore(store, delay_s=0.1)
    cache = ChunkCache(slow, chunk_bytes=1000, max_bytes=10_000, prefetch_chunks=2, prefetch_threads=1)
    cache.get_range("a/x.log", 0, 10, object_size=len(DATA))  # chunk 0; chunks 1 and 2 ahead
    cache.close()
    assert slow.range_calls == 3 and slow.range_bytes == 3000
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(cache.get_range("a/x.log", 2000, 10)), daemon=True)
    reader.start()
    reader.join(10)
    assert got == [DATA[2000:2010]], "a read after close must not wait for a read-ahead that never ran"
