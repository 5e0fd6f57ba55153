"""Reads from the remote tier through the manager (manager/remote_reads.py and the doors of
record_reads.py): a consumer's fetch below the local log start read from the store with the
bytes the local log held, ListOffsets by timestamp into the remote range, the reader queue's
bound, and (through the server's fetch) a slow store that must not hold a local partition's
answer beyond remote.fetch.max.wait.ms."""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import pytest
from manager_helpers import T0, Opener, batch, tp
from read_helpers_manager import counting_chunks

from tidelog.errors import OffsetMovedToTieredStorageError, OffsetOutOfRangeError
from tidelog.manager import LogManager
from tidelog.manager.remote_reads import RemoteReadQueueFullError
from tidelog.remote.index_cache import CACHE_DIR_NAME
from tidelog.server.context import DataArrival
from tidelog.server.errors import ErrorCode
from tidelog.server.fetch import FetchSpec, _read_until
from tidelog.storage.fetch_info import FetchIsolation

TOPIC = "orders"
TIERED = {"remote.storage.enable": "true", "segment.bytes": "2000", "local.retention.bytes": "1"}
BATCHES = 60


def tiered_props(uri: str, **extra: str) -> dict[str, str]:
    return {"remote.log.storage.system.enable": "true", "remote.log.storage.uri": uri, **extra}


def tiered_manager(broker: Opener, dirs: list[Path], tmp_path: Path, **extra: str) -> tuple[LogManager, bytes]:
    """A manager whose ``orders-0`` holds BATCHES batches of 5 records (batch i at T0 + 1000 i),
    every sealed segment copied and deleted locally; returns it and the log's bytes before that."""
    manager = broker.open(dirs, tiered_props((tmp_path / "store").as_uri(), **extra))
    manager.create_topic(TOPIC, 1, TIERED)
    for i in range(BATCHES):
        manager.append(tp(TOPIC), batch(5, timestamp=T0 + 1000 * i, value_size=40))
    log = manager.get_log(tp(TOPIC))
    assert log is not None and log.num_segments > 4
    before = b"".join(s.log.read(0, s.size) for s in log.segments)
    manager.remote_tier.copy_pass()  # type: ignore[union-attr]
    manager.run_retention()
    assert log.log_start_offset == 0 and log.local_log_start_offset > 100
    return manager, before


def read_all(manager: LogManager, max_bytes: int = 3000) -> bytes:
    """Every batch from offset 0, as a consumer fetches: local first, the remote door when moved."""
    out, offset = [], 0
    end = manager.offsets(tp(TOPIC)).high_watermark
    while offset < end:
        try:
            got = manager.fetch(tp(TOPIC), offset, max_bytes, FetchIsolation.HIGH_WATERMARK)
        except OffsetMovedToTieredStorageError:
            got = manager.fetch_remote(tp(TOPIC), offset, max_bytes, FetchIsolation.HIGH_WATERMARK).result(10)
        assert got.records, offset
        out.append(got.records)
        offset = _next_offset(got.records)
    return b"".join(out)


def _next_offset(records: bytes) -> int:
    from tidelog.records import iter_batches
    return [b for _, b in iter_batches(records)][-1].next_offset


def test_a_fetch_below_the_local_start_is_served_from_the_remote_tier(broker: Opener, one_dir: list[Path],
                                                                      tmp_path: Path) -> None:
    manager, before = tiered_manager(broker, one_dir, tmp_path)
    with pytest.raises(OffsetMovedToTieredStorageError):
        manager.fetch(tp(TOPIC), 0, 3000, FetchIsolation.HIGH_WATERMARK)
    got = manager.fetch_remote(tp(TOPIC), 7, 3000, FetchIsolation.HIGH_WATERMARK).result(10)
    one_batch = len(before) // BATCHES  # every batch has the same size
    assert got.records and before.find(got.records) == one_batch, "from the batch holding offset 7"
    assert 0 < len(got.records) <= 3000 and len(got.records) % one_batch == 0
    assert got.high_watermark == BATCHES * 5 and got.log_start_offset == 0
    assert read_all(manager) == before, "every byte, in order, across both tiers"
    cache = one_dir[0] / CACHE_DIR_NAME
    assert sorted(p.suffix for p in cache.iterdir()) and all(p.suffix in (".index", ".timeindex") for p in cache.iterdir())


def test_read_committed_gets_an_empty_aborted_list(broker: Opener, one_dir: list[Path], tmp_path: Path) -> None:
    manager, _ = tiered_manager(broker, one_dir, tmp_path)
    got = manager.fetch_remote(tp(TOPIC), 0, 3000, FetchIsolation.TXN_COMMITTED).result(10)
    assert got.records and got.aborted == ()
    assert manager.aborted_transactions(tp(TOPIC), 0, BATCHES * 5) == []


def test_an_offset_below_the_log_start_is_out_of_range(broker: Opener, one_dir: list[Path], tmp_path: Path) -> None:
    manager, _ = tiered_manager(broker, one_dir, tmp_path)
    metadata = manager.remote_tier.metadata_of(tp(TOPIC), manager.get_log(tp(TOPIC)))  # type: ignore[union-attr]
    first = metadata.finished_segments()[0]
    with metadata.task_lock:  # as remote retention would: the first segment is gone from the tier
        metadata.begin_delete(first)
        metadata.finish_delete(first)
    with pytest.raises(OffsetOutOfRangeError, match="does not exist in the remote tier"):
        manager.fetch_remote(tp(TOPIC), 0, 3000, FetchIsolation.HIGH_WATERMARK).result(10)


def test_list_offsets_by_timestamp_searches_the_remote_tier(broker: Opener, one_dir: list[Path],
                                                           tmp_path: Path) -> None:
    manager, _ = tiered_manager(broker, one_dir, tmp_path)
    local_start = manager.get_log(tp(TOPIC)).local_log_start_offset  # type: ignore[union-attr]
    for i in (0, 3, local_start // 5 - 1, local_start // 5, BATCHES - 1):
        found = manager.list_offsets(tp(TOPIC), T0 + 1000 * i - 1)
        assert found is not None and (found.offset, found.timestamp) == (5 * i, T0 + 1000 * i), i
    assert manager.list_offsets(tp(TOPIC), T0 + 1000 * BATCHES) is None


def test_a_full_reader_queue_is_a_clear_error(broker: Opener, one_dir: list[Path], tmp_path: Path) -> None:
    manager, _ = tiered_manager(broker, one_dir, tmp_path, **{"remote.log.reader.threads": "1",
                                                             "remote.log.reader.max.pending.tasks": "1"})
    reader = manager.remote_reader()
    gate = threading.Event()
    running = [reader.submit(gate.wait, 10), reader.submit(gate.wait, 10)]  # one running, one queued
    with pytest.raises(RemoteReadQueueFullError, match="remote.log.reader.max.pending.tasks"):
        manager.fetch_remote(tp(TOPIC), 0, 3000, FetchIsolation.HIGH_WATERMARK)
    gate.set()
    assert all(f.result(10) for f in running)
    assert manager.fetch_remote(tp(TOPIC), 0, 3000, FetchIsolation.HIGH_WATERMARK).result(10).records


def test_a_slow_remote_read_does_not_hold_a_local_partition(broker: Opener, one_dir: list[Path],
                                                            tmp_path: Path) -> None:
    manager, _ = tiered_manager(broker, one_dir, tmp_path, **{"remote.fetch.max.wait.ms": "300"})
    manager.create_topic("local", 1)
    manager.append(tp("local"), batch(3))
    store = manager.remote_tier.store  # type: ignore[union-attr]

    class SlowStore:
        uri = store.uri

        def __getattr__(self, name: str):
            return getattr(store, name)

        def get_range(self, key: str, start: int, length: int) -> bytes:
            time.sleep(3)
            return store.get_range(key, start, length)

    manager.remote_tier.store = SlowStore()  # type: ignore[union-attr,assignment]
    specs = [FetchSpec(TOPIC, 0, 0, 3000), FetchSpec("local", 0, 0, 3000)]
    with ThreadPoolExecutor(2) as pool:
        async def run(fn, *args):
            return await asyncio.get_running_loop().run_in_executor(pool, fn, *args)

        async def fetch():
            ctx = SimpleNamespace(manager=manager, run=run, arrivals=DataArrival())
            return await _read_until(ctx, specs, FetchIsolation.HIGH_WATERMARK, 1 << 20, 1, 5000)

        started = time.monotonic()
        remote, local = asyncio.run(fetch())
        elapsed = time.monotonic() - started
    assert elapsed < 2.0, f"the answer waited {elapsed:.2f} s for a 3 s remote read (max wait 300 ms)"
    assert local.error == ErrorCode.NONE and local.records
    assert remote.error == ErrorCode.NONE and remote.records == b"" and remote.high_watermark == BATCHES * 5


def test_a_small_remote_fetch_reads_a_chunk_not_the_segment(broker: Opener, one_dir: list[Path],
                                                            tmp_path: Path) -> None:
    manager = broker.open(one_dir, tiered_props((tmp_path / "store").as_uri()))
    manager.create_topic("big", 1, {"remote.storage.enable": "true", "segment.bytes": str(1 << 20),
                                    "local.retention.bytes": "1"})
    for i in range(500):  # ~2.5 MiB: two sealed segments of ~1 MiB
        manager.append(tp("big"), batch(5, timestamp=T0 + i, value_size=1000))
    manager.remote_tier.copy_pass()  # type: ignore[union-attr]
    manager.run_retention()
    segment_bytes = manager.remote_tier.metadata_of(  # type: ignore[union-attr]
        tp("big"), manager.get_log(tp("big"))).finished_segments()[0].segment_size_in_bytes
    counting = counting_chunks(manager.remote_reader(), chunk_bytes=64 << 10, prefetch_chunks=1)
    got = manager.fetch_remote(tp("big"), 700, 3000, FetchIsolation.HIGH_WATERMARK).result(10)
    manager.remote_reader().chunks.close()  # waits for the read-ahead
    assert got.records and len(got.records) <= 3000 + 5200
    # the read (3000 bytes plus the index slack) spans at most two chunks, then one is read ahead
    assert counting.range_bytes <= 3 * (64 << 10) < segment_bytes // 4, (counting.range_bytes, segment_bytes)


def test_a_slow_remote_list_offsets_times_out_without_holding_a_thread(broker: Opener, one_dir: list[Path],
                                                                       tmp_path: Path) -> None:
    from tidelog.server.list_offsets import _finish_remote, _Remote, list_offsets

    manager, _ = tiered_manager(broker, one_dir, tmp_path, **{"remote.list.offsets.request.timeout.ms": "300"})
    store = manager.remote_tier.store  # type: ignore[union-attr]
    release = threading.Event()

    class StuckStore:
        uri = store.uri

        def __getattr__(self, name: str):
            return getattr(store, name)

        def get(self, key: str) -> bytes:
            release.wait(10)
            return store.get(key)

    manager.remote_tier.store = StuckStore()  # type: ignore[union-attr,assignment]
    asked = [SimpleNamespace(name=TOPIC, partitions=[SimpleNamespace(partition_index=0, timestamp=T0 + 2000),
                                                     SimpleNamespace(partition_index=0, timestamp=-1)])]
    answers = list_offsets(manager, asked, FetchIsolation.HIGH_WATERMARK, 7)
    [(_, [waiting, latest])] = answers
    assert isinstance(waiting, _Remote) and latest.offset == BATCHES * 5

    async def finish() -> None:
        ctx = SimpleNamespace(manager=manager, run=None)  # no thread is asked for: the lookup did not end
        await _finish_remote(ctx, [waiting], FetchIsolation.HIGH_WATERMARK)

    started = time.monotonic()
    asyncio.run(finish())
    assert time.monotonic() - started < 2.0
    assert waiting.response.error_code == 7  # REQUEST_TIMED_OUT
    release.set()
    manager.remote_tier.store = store  # type: ignore[union-attr]


def test_no_remote_reader_is_built_after_shutdown(broker: Opener, one_dir: list[Path], tmp_path: Path) -> None:
    """A fetch racing the manager's shutdown must not build a new reader (its threads and index
    cache would outlive the manager, never closed)."""
    from tidelog.errors import StorageError

    manager, _ = tiered_manager(broker, one_dir, tmp_path)
    assert manager.fetch_remote(tp(TOPIC), 0, 3000, FetchIsolation.HIGH_WATERMARK).result(10).records
    manager.shutdown()
    with pytest.raises(StorageError, match="shut down"):
        manager.remote_reader()
    assert manager._remote_reader is None
    assert not [t for t in threading.enumerate() if t.name.startswith("tidelog-remote-reader")]


def test_without_a_remote_tier_a_moved_offset_is_offset_moved_to_tiered_storage(broker: Opener, one_dir: list[Path],
                                                                                tmp_path: Path) -> None:
    """A manager without a remote tier (here: detached) asked for an offset only the remote tier
    holds: the server's fetch answers OFFSET_MOVED_TO_TIERED_STORAGE (109) and builds no reader."""
    from tidelog.server.fetch import read_partitions

    manager, _ = tiered_manager(broker, one_dir, tmp_path)
    tier, manager.remote_tier = manager.remote_tier, None
    try:
        [read] = read_partitions(manager, [FetchSpec(TOPIC, 0, 0, 3000)], FetchIsolation.HIGH_WATERMARK, 1 << 20)
        assert read.error == 109 and read.remote is None and not read.records
        assert manager._remote_reader is None
    finally:
        manager.remote_tier = tier
