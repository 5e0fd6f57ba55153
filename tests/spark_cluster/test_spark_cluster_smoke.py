"""The standalone cluster itself (no driver): two ALIVE workers on loopback, a worker's mount
namespace hiding the pytest tmp tree, and a stop that leaves no process and no port behind.

Costs one cluster start for the session (~10-22 s on 2 shared cores); the stop test (soak) starts
a 1-worker cluster of its own (~15 s).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from spark_cluster_oracle import SparkClusterError, SparkStandaloneCluster, is_loopback, listeners


def test_master_reports_two_alive_workers_with_one_core_each(spark_cluster: SparkStandaloneCluster) -> None:
    state = spark_cluster.master_state()
    assert state["status"] == "ALIVE"
    assert state["url"] == spark_cluster.master_url
    alive = spark_cluster.alive_workers()
    assert len(alive) == 2
    assert all(worker["host"] == "127.0.0.1" and worker["cores"] == 1 for worker in alive)
    assert {worker["memory"] for worker in alive} == {1024}


def test_every_daemon_listens_on_loopback_only(spark_cluster: SparkStandaloneCluster) -> None:
    open_ports = listeners()
    for port in spark_cluster.ports:  # master RPC + UI, each worker's RPC + UI
        assert port in open_ports, f"nothing listens on {port}"
        assert is_loopback(open_ports[port]), f"port {port} is bound to {open_ports[port]}, not 127.0.0.1"
    assert 6066 not in open_ports or not any(  # the REST submission server stays off
        pid in spark_cluster.pids for pid in _owners(6066))


def test_workers_cannot_see_the_pytest_tmp_tree_the_driver_sees(spark_cluster: SparkStandaloneCluster,
                                                                 tmp_path: Path) -> None:
    data_dir = tmp_path / "broker-data" / "orders-0"
    data_dir.mkdir(parents=True)
    (data_dir / "00000000000000000000.log").write_bytes(b"x" * 10)
    assert os.listdir(data_dir) == ["00000000000000000000.log"]
    for pid in spark_cluster.pids[1:]:  # the workers (executors are their children, in their namespace)
        assert os.readlink(f"/proc/{pid}/ns/mnt") != os.readlink("/proc/self/ns/mnt")
        seen_through = Path(f"/proc/{pid}/root")
        with pytest.raises(FileNotFoundError):
            os.listdir(seen_through / data_dir.relative_to("/"))
        assert os.listdir(seen_through / spark_cluster.hidden[0].relative_to("/")) == []
        with pytest.raises(OSError, match="Read-only file system"):
            (seen_through / spark_cluster.hidden[0].relative_to("/") / "x").write_bytes(b"")
        # their own work dir (outside the hidden tree) they do see
        assert (seen_through / spark_cluster.work_dir.relative_to("/")).is_dir()


@pytest.mark.soak  # a second cluster start: ~15 s
def test_stop_leaves_no_process_and_no_port(tmp_path: Path) -> None:
    work = Path(os.environ.get("TMPDIR", "/tmp")) / f"tidelog-spark-stop-{os.getpid()}"
    cluster = SparkStandaloneCluster(work, workers=1, hidden=[tmp_path])
    try:
        cluster.start()
        pids, ports = cluster.pids, cluster.ports
        assert len(pids) == 2 and len(cluster.alive_workers()) == 1
        with pytest.raises(SparkClusterError, match="already started"):
            cluster.start()
    finally:
        cluster.stop()
        cluster.stop()  # idempotent
        shutil.rmtree(work, ignore_errors=True)
    assert not [pid for pid in pids if Path(f"/proc/{pid}").exists()]
    assert not set(ports) & set(listeners())


def test_a_work_dir_inside_a_hidden_path_is_refused(tmp_path: Path) -> None:
    cluster = SparkStandaloneCluster(tmp_path / "work", hidden=[tmp_path])
    with pytest.raises(SparkClusterError, match="inside hidden path"):
        cluster.start()
    assert cluster.pids == []


def _owners(port: int) -> list[int]:
    """Pids holding a listening socket on ``port`` (by matching socket inodes in /proc/*/fd)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and int(fields[1].split(":")[1], 16) == port:
                inodes.add(f"socket:[{fields[9]}]")
    owners = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            if any(os.readlink(f"/proc/{entry}/fd/{fd}") in inodes for fd in os.listdir(f"/proc/{entry}/fd")):
                owners.append(int(entry))
        except OSError:
            continue
    return owners
