"""Stopping a cluster that has run a job: the executors' JVMs and their Python workers go with the
workers, and no port of the cluster is left listening. Its own 1-worker cluster and SparkContext
(soak: ~40 s on 2 shared cores)."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest
from pyspark import cloudpickle

from spark_cluster_oracle import SparkStandaloneCluster, listeners

pytestmark = pytest.mark.soak
# executors cannot import a test module (pytest puts tests/ on no path of theirs): ship its functions by value
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def _pids(_: object) -> list[tuple[int, int, int]]:
    """In a task: the Python worker, pyspark's daemon (its parent) and the executor JVM (the daemon's parent)."""
    import os
    daemon = os.getppid()
    with open(f"/proc/{daemon}/stat") as stat:
        executor = int(stat.read().rsplit(")", 1)[1].split()[1])
    return [(os.getpid(), daemon, executor)]


def test_stop_after_a_job_leaves_no_executor_no_python_worker_and_no_port(tmp_path: Path) -> None:
    work = Path(tempfile.mkdtemp(prefix="tidelog-spark-stop-"))
    cluster = SparkStandaloneCluster(work, workers=1, hidden=[tmp_path])
    session = None
    try:
        cluster.start()
        session = cluster.session(app_name="stop-test")
        started = set(session.sparkContext.parallelize(range(2), 2).mapPartitions(_pids).collect())
        daemons, ports = cluster.pids, cluster.ports
        python_workers = {pid for row in started for pid in row}  # Python workers, daemons, executor JVMs
        assert len({executor for _, _, executor in started}) == 1  # one worker: one executor
        assert all(_running(pid) for pid in python_workers)
        assert not set(python_workers) & set(daemons)
        # stop the cluster under a live application: the executor must go with its worker
        cluster.stop()
    finally:
        cluster.stop()
        if session is not None:
            session.stop()
        shutil.rmtree(work, ignore_errors=True)
    left = [pid for pid in [*daemons, *python_workers] if _running(pid)]
    assert left == [], f"left running: {left}"
    assert not set(ports) & set(listeners())
    assert os.path.isdir(tmp_path)


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"
