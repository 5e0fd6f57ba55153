"""Kill points of the remote index cache (remote/index_cache.py): the process is SIGKILLed before
and after each of its file operations (the temporary file's open, write and fsync, the rename, the
unlinks of evictions) while it downloads the indexes of three remote segments within a bound that
evicts; a new process's cache over the same directory must then serve every index correctly
(reusing what is whole, fetching again what is not), leave no temporary file and keep its bound.

Marked soak for every point; a sample of every fifth runs in ``make test``.

Method: as the storage kill points (``kill_harness``): a counting run under a fault plan gives the
number of file operations under the cache's directory; each point forks a child that installs a
rule killing it at that operation and runs the same reads; the parent then checks."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest

from tidelog.remote.index_cache import RemoteIndexCache
from tidelog.remote.metadata import TopicIdPartition
from tidelog.remote.store import ArrowRemoteStore
from tidelog.storage import fileops
from tidelog.storage.fileops import FaultRule
from tidelog.topic_partition import TopicPartition

sys.path.append(str(Path(__file__).parent.parent / "remote"))  # the remote-read tests' helpers
from read_helpers import tiered_log  # noqa: E402 - needs the path above

TIP = TopicIdPartition("Zx3vYqS2QmK0b1c2d3e4fA", TopicPartition("orders", 2))


@pytest.fixture(scope="module")
def tiered(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("kill-index-cache")
    store = ArrowRemoteStore((root / "store").as_uri())
    log, copied = tiered_log(root / "orders-2", store, TIP, segments=3, batches=20)
    one = sum(p.stat().st_size for p in log.dir.glob(f"{copied[0].start_offset:020d}.*index"))
    yield store, log, copied, 2 * one  # a bound of about two segments' indexes: the third evicts
    log.close()


def _workload(store: ArrowRemoteStore, directory: Path, bound: int, copied) -> None:
    cache = RemoteIndexCache(store, directory, bound)
    for segment in (*copied, copied[0]):
        with cache.indexes(segment) as idx:
            idx.offset.lookup(segment.end_offset)
    cache.close()


def _check(store: ArrowRemoteStore, directory: Path, bound: int, log, copied) -> None:
    cache = RemoteIndexCache(store, directory, bound)
    assert not [p for p in directory.iterdir() if p.name.endswith(".tmp")]
    for local, segment in zip(log.segments, copied):
        with cache.indexes(segment) as idx:
            for offset in range(segment.start_offset, segment.end_offset + 1, 37):
                assert idx.offset.lookup(offset) == local.offset_index.lookup(offset)
            assert idx.time.last_entry == local.time_index.last_entry
    assert cache.total_bytes <= bound
    cache.close()


def _ops(store, directory: Path, bound: int, copied) -> int:
    rule = FaultRule(ops=fileops.WRITE_OPS, path_glob=f"{directory}*")
    with fileops.inject(rule) as stats:
        _workload(store, directory, bound, copied)
    return stats.matched[0]


@pytest.mark.soak
def test_a_kill_at_any_cache_file_operation_leaves_a_usable_cache(tiered, tmp_path: Path) -> None:
    _kill_points(tiered, tmp_path, step=1)


def test_a_kill_at_a_sample_of_cache_file_operations_leaves_a_usable_cache(tiered, tmp_path: Path) -> None:
    """Every fifth point (``make test``); the soak test above runs them all (~60 forks)."""
    _kill_points(tiered, tmp_path, step=5)


def _kill_points(tiered, tmp_path: Path, step: int) -> None:
    store, log, copied, bound = tiered
    count = _ops(store, tmp_path / "counting", bound, copied)
    assert count >= 26, "4 downloads of 2 files (open, write, fsync, rename each), mkdir, eviction unlinks"
    for n in range(0, count, step):
        for when in ("before", "after"):
            directory = tmp_path / f"cache-{n}-{when}"
            pid = os.fork()
            if pid == 0:  # pragma: no cover - the child; it never returns
                code = 3
                try:
                    signal.alarm(60)
                    fileops.clear()
                    fileops.install([FaultRule(ops=fileops.WRITE_OPS, path_glob=f"{directory}*", kill=when,
                                               skip=n, times=1)])
                    _workload(store, directory, bound, copied)
                    code = 0
                finally:
                    os._exit(code)
            _, status = os.waitpid(pid, 0)
            assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, (n, when, status)
            _check(store, directory, bound, log, copied)
