"""Kill points of a tiered log's clean on Spark (``tidelog.spark.remote_compaction``): the clean
dies at every store write of the pass, wherever it runs (the owner's reservations, the
executors' uploads, the deletion of unchanged groups' reservations, the swap, the metadata's
snapshots and pruning), before the write or just after it, and a new process resumes.

Method: :class:`SharedKillingStore` counts the mutating operations of the owner and of every
Spark worker in one counter file, and from operation N on every operation anywhere raises
:class:`Killed` (a ``BaseException``: no ``except Exception`` cleanup of the owner runs, as after
SIGKILL; an executor that dies fails its task, and the owner's attempt to clean up dies too).
Then, as in ``test_kill_points_remote_clean``: a new process's view of the metadata sees the old
set or the new set whole, and cleanup plus a new pass converge to what an uninterrupted pass
leaves, with no orphan object once the replaced objects' delay is over.

soak: one Spark pass per kill point (a few seconds each on 2 shared cores).
"""

from __future__ import annotations

import fcntl
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.append(str(Path(__file__).parent.parent / "cleaner"))  # the remote-compaction helpers
from remote_clean_helpers import BUFFERS, TP, Tier  # noqa: E402 - needs the path above
from test_kill_points_remote_clean import _converges, _Expected, _scenario, _seen_whole  # noqa: E402

from tidelog.cleaner.clean import Cleaner  # noqa: E402
from tidelog.cleaner.remote_clean import RemoteCleaning  # noqa: E402
from tidelog.remote.store import ArrowRemoteStore, RemoteStore  # noqa: E402
from tidelog.storage.log import Log  # noqa: E402
from tidelog.testing import FakeClock  # noqa: E402

pytestmark = pytest.mark.soak


class Killed(BaseException):
    """The clean's processes died here."""


class SharedKillingStore:
    """A :class:`RemoteStore` whose mutating operations are numbered across processes (a counter
    file under ``state``, locked); from number ``kill_at`` on (``when``: before it, or after it
    completed) every mutating operation in any process raises :class:`Killed`. ``kill_at=None``
    only counts. Picklable: Spark ships it to the executors with the job."""

    def __init__(self, inner: RemoteStore, state: Path, kill_at: int | None = None, when: str = "before") -> None:
        self.inner, self.uri, self.state = inner, inner.uri, state
        self.kill_at, self.when = kill_at, when

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name == "inner":  # unpickling: no inner yet
            raise AttributeError(name)
        return getattr(self.inner, name)

    def _number(self) -> int:
        with open(self.state / "counter", "a+") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            f.seek(0)
            number = int(f.read() or 0)
            f.seek(0)
            f.truncate()
            f.write(str(number + 1))
        return number

    def _mutate(self, operation: str, key: str, run: Callable[[], Any]) -> Any:
        number = self._number()
        dead = self.state / "dead"
        if dead.exists() or (number == self.kill_at and self.when == "before"):
            dead.touch()
            raise Killed(f"killed before {operation} {key}")
        result = run()
        if number == self.kill_at:
            dead.touch()
            raise Killed(f"killed after {operation} {key}")
        return result

    def put(self, key: str, data: Any) -> None:
        self._mutate("put", key, lambda: self.inner.put(key, data))

    def put_file(self, key: str, path: Any, **kwargs: Any) -> None:
        self._mutate("put_file", key, lambda: self.inner.put_file(key, path, **kwargs))

    def delete(self, key: str) -> None:
        self._mutate("delete", key, lambda: self.inner.delete(key))

    def delete_prefix(self, prefix: str) -> None:
        self._mutate("delete_prefix", prefix, lambda: self.inner.delete_prefix(prefix))


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    from pyspark import cloudpickle

    from tidelog.spark.session import local_session

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # executors cannot import a test module
    session = local_session(**{"spark.sql.shuffle.partitions": "4", "spark.default.parallelism": "2",
                               "spark.python.worker.reuse": "true", "spark.driver.memory": "2g"})
    session.sparkContext.setLogLevel("OFF")
    yield session


def _spark_clean(spark: Any) -> Callable[[Log, FakeClock, RemoteStore], None]:
    def clean(log: Log, clock: FakeClock, store: RemoteStore) -> None:
        from tidelog.spark.compaction import SparkCleaningEngine

        tier = Tier(store, clock)
        cleaner = Cleaner(SparkCleaningEngine(BUFFERS, spark=spark), clock, remote=RemoteCleaning(tier.source))
        cleaner.clean_pass(log, TP, 0, log.active_segment.base_offset)
    return clean


@pytest.mark.parametrize("when", ["before", "after"])
def test_every_kill_point_of_a_spark_remote_clean_switches_whole_and_converges(
        spark: Any, kill_root: Callable[[], Path], when: str) -> None:
    expected = _Expected(kill_root())
    clean = _spark_clean(spark)
    root = kill_root()
    store = ArrowRemoteStore((root / "store").as_uri())
    log, clock = _scenario(root, store)
    clean(log, clock, SharedKillingStore(store, root))
    log.close()
    total = int((root / "counter").read_text())
    assert total >= 8, "reservation, the executor's uploads, the swap"
    for n in range(total):
        root = kill_root()
        store = ArrowRemoteStore((root / "store").as_uri())
        log, clock = _scenario(root, store)
        with pytest.raises((Killed, Exception)) as died:
            clean(log, clock, SharedKillingStore(store, root, n, when))
        assert (root / "dead").exists(), f"kill point {n}: {died.value!r}"
        _seen_whole(log, store, expected)
        _converges(log, clock, store, expected)
        log.close()
