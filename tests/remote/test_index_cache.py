"""The remote index cache (remote/index_cache.py): one download per index, Kafka's file names, the
byte bound with least-recently-used eviction, evicted indexes still readable by a reader holding
them, reuse across restarts (and refusal of a corrupt file), and one download under concurrency."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
from read_helpers import CountingStore, tiered_log

from tidelog.remote.index_cache import RemoteIndexCache, RemoteIndexCacheError
from tidelog.remote.metadata import RemoteFileKind, object_key
from tidelog.remote.store import ArrowRemoteStore


@pytest.fixture
def tiered(tmp_path: Path, store: ArrowRemoteStore, tip):
    log, copied = tiered_log(tmp_path / "orders-2", store, tip, segments=4, batches=20)
    yield log, copied
    log.close()


def _sizes(store, segment) -> int:
    return sum(len(store.get(object_key(segment, k))) for k in (RemoteFileKind.OFFSET_INDEX, RemoteFileKind.TIME_INDEX))


def test_indexes_are_fetched_once_and_named_as_kafka(tiered, store, tmp_path: Path) -> None:
    log, copied = tiered
    counting = CountingStore(store)
    cache = RemoteIndexCache(counting, tmp_path / "cache", 1 << 30)
    segment = copied[1]
    for _ in range(3):
        with cache.indexes(segment) as idx:
            local = log.segments[1].offset_index
            assert idx.offset.lookup(segment.start_offset + 50) == local.lookup(segment.start_offset + 50)
            assert idx.txn is None
    assert counting.get_calls == 2
    names = sorted(p.name for p in (tmp_path / "cache").iterdir())
    assert names == [f"{segment.start_offset}_{segment.id}.index", f"{segment.start_offset}_{segment.id}.timeindex"]
    assert cache.total_bytes == _sizes(store, segment) > 0
    cache.close()


def test_a_transaction_index_is_fetched_only_when_not_empty(tmp_path: Path, store: ArrowRemoteStore, tip) -> None:
    from copy_helpers import make_log
    from tidelog.remote.copy import copy_log
    from tidelog.remote.metadata_log import RemotePartitionMetadata
    log = make_log(tmp_path / "orders-2", 3, aborted_in=(1,))
    copied = copy_log(log, store, RemotePartitionMetadata.load(store, tip), epochs=log.leader_epoch_cache.entries)
    cache = RemoteIndexCache(store, tmp_path / "cache", 1 << 30)
    with cache.indexes(copied[1]) as idx:
        assert idx.txn is not None
        assert [t.producer_id for t in idx.txn.all_aborted_txns()] == [7]
    with cache.indexes(copied[0]) as idx:
        assert idx.txn is None
    assert sum(p.suffix == ".txnindex" for p in (tmp_path / "cache").iterdir()) == 1
    cache.close()
    log.close()


def test_the_bound_evicts_the_least_recently_used(tiered, store, tmp_path: Path) -> None:
    _, copied = tiered
    one = _sizes(store, copied[0])
    cache = RemoteIndexCache(store, tmp_path / "cache", 2 * one + one // 2)  # room for two segments
    for segment in (copied[0], copied[1], copied[0], copied[2]):  # copied[1] is the least recently used
        with cache.indexes(segment):
            pass
    assert cache.cached_segments() == [copied[0].id, copied[2].id]
    assert cache.total_bytes <= cache.max_bytes
    on_disk = {p.name.split("_", 1)[1].rsplit(".", 1)[0] for p in (tmp_path / "cache").iterdir()}
    assert on_disk == {copied[0].id, copied[2].id}
    cache.close()


def test_an_evicted_index_stays_readable_while_held(tiered, store, tmp_path: Path) -> None:
    log, copied = tiered
    one = _sizes(store, copied[0])
    cache = RemoteIndexCache(store, tmp_path / "cache", one)  # room for one segment
    target = copied[0].start_offset + 77
    with cache.indexes(copied[0]) as held:
        with cache.indexes(copied[1]):
            pass  # evicts copied[0], whose files are unlinked now
        assert copied[0].id not in cache.cached_segments()
        assert not any(p.name.startswith(f"{copied[0].start_offset}_") for p in (tmp_path / "cache").iterdir())
        assert held.offset.lookup(target) == log.segments[0].offset_index.lookup(target)
        assert held.time.last_entry == log.segments[0].time_index.last_entry
    with cache.indexes(copied[0]) as again:  # fetched again
        assert again.offset.lookup(target) == log.segments[0].offset_index.lookup(target)
    cache.close()


def test_files_are_reused_after_a_restart_and_a_corrupt_one_refetched(tiered, store, tmp_path: Path) -> None:
    _, copied = tiered
    first = RemoteIndexCache(store, tmp_path / "cache", 1 << 30)
    for segment in copied[:3]:
        with first.indexes(segment):
            pass
    first.close()
    broken = tmp_path / "cache" / f"{copied[1].start_offset}_{copied[1].id}.index"
    with open(broken, "ab") as f:
        f.write(b"\x01\x02\x03")  # not whole entries
    (tmp_path / "cache" / "stray.index.tmp").write_bytes(b"x")
    counting = CountingStore(store)
    second = RemoteIndexCache(counting, tmp_path / "cache", 1 << 30)
    assert not broken.exists() and not (tmp_path / "cache" / "stray.index.tmp").exists()
    assert set(second.cached_segments()) == {s.id for s in copied[:3]}
    for segment in copied[:3]:
        with second.indexes(segment) as idx:
            assert idx.offset.entries > 0
    assert counting.get_calls == 1, "only the corrupt offset index is fetched again"
    second.close()


def test_a_corrupt_index_object_is_a_clear_error(tiered, store, tmp_path: Path) -> None:
    _, copied = tiered
    key = object_key(copied[0], RemoteFileKind.TIME_INDEX)
    store.put(key, store.get(key)[:-5])
    cache = RemoteIndexCache(store, tmp_path / "cache", 1 << 30)
    with pytest.raises(RemoteIndexCacheError) as caught, cache.indexes(copied[0]):
        pass
    assert copied[0].id in str(caught.value) and "time index" in str(caught.value)
    assert list((tmp_path / "cache").iterdir()) == []
    cache.close()


def test_concurrent_readers_fetch_a_segment_once(tiered, store, tmp_path: Path) -> None:
    _, copied = tiered
    counting = CountingStore(store, delay_s=0)
    slow_get = counting.get

    def get(key: str) -> bytes:
        threading.Event().wait(0.05)
        return slow_get(key)

    counting.get = get  # type: ignore[method-assign]
    cache = RemoteIndexCache(counting, tmp_path / "cache", 1 << 30)
    errors: list[BaseException] = []

    def read() -> None:
        try:
            with cache.indexes(copied[2]) as idx:
                assert idx.offset.entries > 0
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=read) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and counting.get_calls == 2
    assert os.listdir(tmp_path / "cache") != []
    cache.close()


def test_verify_of_a_data_dir_skips_the_cache(tiered, store, tmp_path: Path) -> None:
    import shutil

    from tidelog.storage.verify import verify_paths

    log, copied = tiered
    data = tmp_path / "data"
    shutil.copytree(log.dir, data / log.dir.name)
    cache = RemoteIndexCache(store, data / "remote-log-index-cache", 1 << 30)
    with cache.indexes(copied[0]):
        pass
    cache.close()
    report = verify_paths([data])
    assert report.ok, report.problems
    assert report.files_checked == len(list(log.dir.glob("*.*index"))) + len(list(log.dir.glob("*.log")))
