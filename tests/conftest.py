"""Fixtures for every test directory.

* ``clock`` / ``scheduler``: a :class:`FakeClock` (at T0 = 1,700,000,000,000 ms) and the
  :class:`FakeScheduler` it drives; ``clock.advance(ms)`` runs due tasks, so no test sleeps.
* A real S3-compatible store (SeaweedFS, ``object_store_oracle``), for every test of the remote tier:
  ``object_store``: one running ``weed server -s3`` per xdist worker (session-scoped: each worker is
  its own session), data in a session tmp dir, stopped (then killed after 5 s) at the end; the
  ``weed`` binary is built and cached by ``make weed`` (run by ``make test``) or on first use.
  Skipped, with the reason, only where ``go`` is missing; a failing build or start fails the test.
  ``s3_filesystem``: a factory for ``pyarrow.fs.S3FileSystem`` clients of a server (one attempt per
  request, short timeouts: an error surfaces at once instead of after the SDK's retries).
  ``s3``: a client of ``object_store``. ``bucket``: a fresh, empty bucket per test, deleted after.
  ``fault_proxy``: a fault-injecting proxy in front of ``object_store`` (5xx, 403, slow, dropped,
  refused; ``object_store_oracle/fault_proxy.py``), one per test.
* A real Spark standalone cluster (``spark_cluster_oracle``): ``spark_cluster``, one master and two
  workers (1 core, 1g each) per session, started from PySpark's jars on loopback; each worker runs in
  a mount namespace where this session's whole pytest tmp tree is an empty read-only tmpfs, so a data
  dir made under ``tmp_path`` is visible to the driver (this process) and never to an executor.
  ``spark_cluster.session()`` is a SparkSession on it. Skipped, with the reason, only where Java or
  PySpark's ``spark-class`` is missing; a failing start fails the test.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tidelog.testing import FakeClock, FakeScheduler

if TYPE_CHECKING:  # imported by the fixtures that use them: most sessions start no store
    from pyarrow import fs as pafs

    from object_store_oracle import FaultProxy, S3Credentials, WeedS3Server
    from spark_cluster_oracle import SparkStandaloneCluster

    S3FilesystemFactory = Callable[..., pafs.S3FileSystem]

T0 = 1_700_000_000_000  # FakeClock's default start, ms
SPARK_TESTS = Path(__file__).parent / "spark"
SPARK_CLUSTER_TESTS = Path(__file__).parent / "spark_cluster"  # one SparkContext per process: same xdist worker


def pytest_itemcollected(item: pytest.Item) -> None:
    """Spark tests share one session, so xdist runs them all on one worker (``--dist loadgroup``).

    Marked as each is collected: xdist turns the mark into a group before other
    ``pytest_collection_modifyitems`` hooks see the items.
    """
    if SPARK_TESTS in item.path.parents or SPARK_CLUSTER_TESTS in item.path.parents:
        item.add_marker(pytest.mark.xdist_group("spark"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Soak tests run only when asked for by name (``make soak`` = ``pytest -m soak``)."""
    if "soak" in (config.getoption("markexpr") or ""):
        return
    kept = [item for item in items if item.get_closest_marker("soak") is None]
    if len(kept) != len(items):
        config.hook.pytest_deselected(items=[item for item in items if item.get_closest_marker("soak")])
        items[:] = kept


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


@pytest.fixture
def scheduler(clock: FakeClock) -> FakeScheduler:
    return FakeScheduler(clock)


@pytest.fixture(scope="session")
def object_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WeedS3Server]:
    from object_store_oracle import WeedS3Server, WeedToolMissing

    server = WeedS3Server(tmp_path_factory.mktemp("weed"))
    try:
        server.start()
    except WeedToolMissing as missing:
        pytest.skip(f"the object-store tests need Go to build SeaweedFS: {missing}")
    try:
        yield server
    finally:
        server.stop(timeout_s=5.0)  # its data is thrown away: no need to wait out weed's ~15 s SIGTERM


@pytest.fixture
def fault_proxy(object_store: WeedS3Server) -> Iterator[FaultProxy]:
    """A :class:`~object_store_oracle.fault_proxy.FaultProxy` in front of ``object_store``: passes
    every request through until the test switches a fault on; stopped (listener, connections,
    threads) after the test. ``fault_proxy.store_options(object_store.credentials)`` reaches it."""
    from object_store_oracle import FaultProxy

    with FaultProxy(object_store.endpoint_url) as proxy:
        yield proxy


@pytest.fixture(scope="session")
def s3_filesystem() -> S3FilesystemFactory:
    from pyarrow import fs as pafs

    def connect(credentials: S3Credentials, *, secret_key: str | None = None) -> pafs.S3FileSystem:
        host = credentials.endpoint_url.removeprefix("http://")
        return pafs.S3FileSystem(
            access_key=credentials.access_key, secret_key=secret_key or credentials.secret_key,
            region=credentials.region, endpoint_override=host, scheme="http",
            allow_bucket_creation=True, allow_bucket_deletion=True,
            connect_timeout=2.0, request_timeout=30.0,
            retry_strategy=pafs.AwsStandardS3RetryStrategy(max_attempts=1))
    return connect


@pytest.fixture
def s3(object_store: WeedS3Server, s3_filesystem: S3FilesystemFactory) -> pafs.S3FileSystem:
    return s3_filesystem(object_store.credentials)


@pytest.fixture
def bucket(s3: pafs.S3FileSystem) -> Iterator[str]:
    name = f"t-{uuid.uuid4().hex[:16]}"
    s3.create_dir(name)
    try:
        yield name
    finally:
        s3.delete_dir(name)


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkStandaloneCluster]:
    """A started :class:`~spark_cluster_oracle.SparkStandaloneCluster` (master + 2 workers) whose
    workers cannot see this session's pytest tmp tree (under xdist: every worker's); its own work dir
    lies outside that tree. Stopped at the end of the session, nothing of it left running."""
    import shutil
    import tempfile

    from spark_cluster_oracle import SparkClusterUnavailable, SparkStandaloneCluster, check_java, spark_home

    try:
        spark_home()
        check_java()
    except SparkClusterUnavailable as missing:
        pytest.skip(f"the Spark cluster tests need Java and PySpark's spark-class: {missing}")
    tmp_root = tmp_path_factory.getbasetemp()
    if tmp_root.name.startswith("popen-gw"):  # xdist: hide every worker's tmp tree
        tmp_root = tmp_root.parent
    work = Path(tempfile.mkdtemp(prefix="tidelog-spark-cluster-"))
    cluster = SparkStandaloneCluster(work, workers=2, hidden=[tmp_root])
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(work, ignore_errors=True)
