"""Jobs on the standalone cluster from a driver in this process: tasks spread over both workers'
executors, which run this interpreter (tidelog importable), read the S3 server the tiered-storage
tests start, and cannot see a data dir the driver sees; a stop after a job leaves nothing behind.

soak: the driver's SparkContext on the cluster plus the first job's executor JVMs cost ~30-40 s
on 2 shared cores on top of the cluster start.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from pyspark import cloudpickle

from spark_cluster_oracle import SparkStandaloneCluster

if TYPE_CHECKING:
    from pyarrow import fs as pafs
    from pyspark.sql import SparkSession

    from object_store_oracle import WeedS3Server

pytestmark = pytest.mark.soak
# executors cannot import a test module (pytest puts tests/ on no path of theirs): ship its functions by value
cloudpickle.register_pickle_by_value(sys.modules[__name__])

_EXECUTOR_DIR = re.compile(r"/worker(\d+)/app-[^/]+/(\d+)$")


def _where(_: object) -> list[tuple[str, str, int, int]]:
    """In a task: (cwd, sys.executable, pid, whether tidelog imports) of the Python worker."""
    import importlib.util
    import os
    import sys
    return [(os.getcwd(), sys.executable, os.getpid(), int(importlib.util.find_spec("tidelog") is not None))]


def test_a_job_spreads_over_both_workers_executors(cluster_spark: SparkSession,
                                                   spark_cluster: SparkStandaloneCluster) -> None:
    assert cluster_spark.sparkContext.master == spark_cluster.master_url
    rows = cluster_spark.sparkContext.parallelize(range(16), 16).mapPartitions(_where).collect()
    placed = {}
    for cwd, executable, _pid, has_tidelog in rows:
        match = _EXECUTOR_DIR.search(cwd)
        assert match is not None, f"a task ran outside a worker's executor dir: {cwd}"
        assert cwd.startswith(str(spark_cluster.work_dir))
        placed[match.group(2)] = match.group(1)  # executor id -> worker index
        assert executable == sys.executable and has_tidelog == 1
    assert sorted(placed.values()) == ["1", "2"], f"executors per worker: {placed}"
    assert len(spark_cluster.master_state()["activeapps"]) == 1


def test_executors_cannot_see_a_data_dir_the_driver_reads(cluster_spark: SparkSession, tmp_path: Path) -> None:
    data_dir = tmp_path / "broker" / "orders-0"
    data_dir.mkdir(parents=True)
    segment = data_dir / "00000000000000000000.log"
    segment.write_bytes(b"records")
    assert segment.read_bytes() == b"records"  # the driver sees it

    def probe(_: object) -> list[tuple[str, str, str]]:
        import os
        outcomes = []
        for attempt in (lambda: os.listdir(data_dir), lambda: open(segment, "rb").read(),
                        lambda: os.listdir(tmp_path)):
            try:
                outcomes.append(("ok", repr(attempt()), os.getcwd()))
            except OSError as e:
                outcomes.append((type(e).__name__, str(e), os.getcwd()))
        return outcomes

    results = cluster_spark.sparkContext.parallelize(range(8), 8).mapPartitions(probe).collect()
    assert len({cwd for _, _, cwd in results}) >= 2, "the probe did not reach both executors"
    for index, (kind, detail, cwd) in enumerate(results):
        if index % 3 == 2:  # the pytest tmp tree itself: an empty tmpfs, nothing of the driver's in it
            assert kind == "FileNotFoundError", f"{cwd}: listing {tmp_path} gave {kind} {detail}"
        else:
            assert kind == "FileNotFoundError", f"{cwd}: the executor saw the data dir: {detail}"


def test_executors_read_the_object_store(cluster_spark: SparkSession, object_store: WeedS3Server,
                                         s3: pafs.S3FileSystem, bucket: str) -> None:
    with s3.open_output_stream(f"{bucket}/segments/0.log") as out:
        out.write(b"remote bytes")
    c = object_store.credentials  # plain strings to the executors: they cannot import object_store_oracle
    access_key, secret_key, region, host = c.access_key, c.secret_key, c.region, c.endpoint_url.removeprefix("http://")

    def read(_: object) -> list[bytes]:
        from pyarrow import fs
        store = fs.S3FileSystem(access_key=access_key, secret_key=secret_key, region=region, scheme="http",
                                endpoint_override=host)
        with store.open_input_stream(f"{bucket}/segments/0.log") as stream:
            return [stream.read()]

    assert cluster_spark.sparkContext.parallelize(range(2), 2).mapPartitions(read).collect() == [b"remote bytes"] * 2
