"""The copy quota: N bytes at R B/s take N/R s of (injected) sleep, within one window; unlimited
costs nothing; a throttled copy stays byte for byte."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from tidelog.remote.copy import copy_log
from tidelog.remote.metadata_log import RemotePartitionMetadata
from tidelog.remote.quota import UNLIMITED, WINDOW_SECONDS, CopyQuota
from tidelog.remote.store import ArrowRemoteStore
from tidelog.testing import FakeClock
from copy_helpers import assert_matches_local, make_log


class NsClock(FakeClock):
    """A fake clock whose sleep moves it by exactly the seconds asked (to the nanosecond)."""

    def sleep_seconds(self, seconds: float) -> None:
        self._ns += round(seconds * 1e9)


def _quota(rate: int, clock: NsClock) -> CopyQuota:
    return CopyQuota(rate, clock=clock, sleep=clock.sleep_seconds)


@pytest.mark.parametrize(("total", "chunk", "rate"), [(10_000_000, 100_000, 1_000_000), (3_000_000, 1_000_000, 1_000_000),
                                                       (5_000, 1, 1_000)])
def test_n_bytes_at_r_take_n_over_r_seconds(total: int, chunk: int, rate: int) -> None:
    clock = NsClock()
    quota = _quota(rate, clock)
    start = clock.nanoseconds()
    for _ in range(total // chunk):
        quota.acquire(chunk)
    waited = (clock.nanoseconds() - start) / 1e9
    assert abs(waited - total / rate) <= WINDOW_SECONDS
    assert quota.throttled_seconds == pytest.approx(waited, abs=0.01)


def test_the_rate_never_runs_ahead_of_the_quota() -> None:
    clock = NsClock()
    quota = _quota(1000, clock)
    t0, sent = clock.nanoseconds(), 0
    for n in [300, 50, 700, 1, 999, 400] * 5:
        quota.acquire(n)
        elapsed = (clock.nanoseconds() - t0) / 1e9
        assert sent <= 1000 * elapsed + 1e-6  # what started before this chunk had its time
        sent += n


def test_an_idle_quota_does_not_wait() -> None:
    clock = NsClock()
    quota = _quota(1000, clock)
    assert quota.acquire(500) == 0
    clock.advance(5000)
    assert quota.acquire(500) == 0


def test_unlimited_is_free() -> None:
    slept = []
    quota = CopyQuota(UNLIMITED, sleep=slept.append)
    assert quota.unlimited
    assert all(quota.acquire(1 << 40) == 0 for _ in range(3)) and slept == []
    with pytest.raises(ValueError):
        CopyQuota(0)


def test_threads_share_the_quota() -> None:
    clock, lock = NsClock(), threading.Lock()

    def sleep(seconds: float) -> None:
        with lock:
            clock.sleep_seconds(seconds)

    quota = CopyQuota(1_000_000, clock=clock, sleep=sleep)
    threads = [threading.Thread(target=lambda: [quota.acquire(100_000) for _ in range(10)]) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # 4 MB reserved at 1 MB/s: the last reservation starts 3.9 s after the first
    assert quota.throttled_seconds >= 3.9 - WINDOW_SECONDS


def test_a_throttled_copy_waits_and_stays_byte_for_byte(tmp_path: Path, store: ArrowRemoteStore, tip) -> None:
    log = make_log(tmp_path / "orders-2", 1, batches=10, records=20)
    clock = NsClock()
    quota = _quota(50_000, clock)
    metadata = RemotePartitionMetadata.load(store, tip, clock=clock)
    [copied] = copy_log(log, store, metadata, epochs=log.leader_epoch_cache.entries, quota=quota)
    uploaded = sum(i.size for i in store.list() if "/metadata/" not in i.key)
    assert abs(quota.throttled_seconds - uploaded / 50_000) <= WINDOW_SECONDS
    assert_matches_local(store, copied, log.dir, log.segments[1].base_offset)
    log.close()


def test_put_file_asks_the_hook_before_each_chunk(tmp_path: Path, store: ArrowRemoteStore) -> None:
    from tidelog.remote.store import CHUNK_BYTES

    source = tmp_path / "big.log"
    source.write_bytes(b"x" * (2 * CHUNK_BYTES + 5))
    asked: list[int] = []
    store.put_file("t/0/big.log", source, on_chunk=asked.append)
    assert asked == [CHUNK_BYTES, CHUNK_BYTES, 5] and store.size("t/0/big.log") == 2 * CHUNK_BYTES + 5

    def refuse(n: int) -> None:
        raise RuntimeError("quota wait interrupted")

    with pytest.raises(RuntimeError):
        store.put_file("t/0/other.log", source, on_chunk=refuse)
    assert [i.key for i in store.list()] == ["t/0/big.log"]  # nothing published


def test_the_default_sleep_is_the_clocks(tmp_path: Path, store: ArrowRemoteStore, tip) -> None:
    """A throttled copy under a fake clock moves the clock and sleeps no real time."""
    import time

    log = make_log(tmp_path / "orders-2", 1, batches=10, records=20)
    clock = FakeClock()
    quota = CopyQuota(10_000, clock=clock)  # ~20 KB of objects: ~2 s at 10 KB/s
    began_real, began_fake = time.monotonic(), clock.milliseconds()
    [copied] = copy_log(log, store, RemotePartitionMetadata.load(store, tip, clock=clock),
                        epochs=log.leader_epoch_cache.entries, quota=quota)
    uploaded = sum(i.size for i in store.list() if "/metadata/" not in i.key)
    assert clock.milliseconds() - began_fake >= (uploaded - log.segments[0].size) / 10
    assert time.monotonic() - began_real < 1.0
    assert_matches_local(store, copied, log.dir, log.segments[1].base_offset)
    log.close()
