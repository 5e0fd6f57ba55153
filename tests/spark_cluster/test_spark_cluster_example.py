"""``examples/cluster_pipeline.py`` runs as a user runs it, against the standalone cluster (executors
that cannot see the broker's data dir), a ``tidelog serve`` tiering to the real S3 server, and
nothing else: two runs, with the first run's sealed segments copied to the store in between, so the
second run reads its orders from both tiers.

soak: two Spark applications on the cluster, ~40-60 s each on 2 shared cores.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

sys.path.append(str(Path(__file__).parent.parent / "spark"))  # the tiered broker of the read tests
from test_spark_remote_read import s3_options  # noqa: E402
from test_spark_remote_tail import serve  # noqa: E402

from tidelog.topic_partition import TopicPartition  # noqa: E402

if TYPE_CHECKING:
    from object_store_oracle import WeedS3Server
    from spark_cluster_oracle import SparkStandaloneCluster

pytestmark = pytest.mark.soak
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "cluster_pipeline.py"
CUSTOMERS = ("alice", "bob", "carol", "dave", "erin")


def _run(cluster: SparkStandaloneCluster, bootstrap: str, uri: str, options: dict[str, str], orders: int) -> dict:
    args = [sys.executable, str(EXAMPLE), "--master", cluster.master_url, "--bootstrap-server", bootstrap,
            "--store", uri, "--orders", str(orders), "--conf", "spark.executor.memory=512m",
            "--conf", "spark.driver.host=127.0.0.1", "--conf", "spark.driver.bindAddress=127.0.0.1",
            *[item for key, value in options.items() for item in ("--store-option", f"{key}={value}")]]
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    done = subprocess.run(args, capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _expected(orders: int, runs: int) -> dict[str, int]:
    """Each run writes orders 0..orders-1: customer id % 5, amount id % 97 + 1."""
    totals = dict.fromkeys(CUSTOMERS, 0)
    for i in range(orders):
        totals[CUSTOMERS[i % 5]] += (i % 97 + 1) * runs
    return totals


def test_the_cluster_example_writes_and_reads_through_both_tiers(spark_cluster: SparkStandaloneCluster,
                                                                 object_store: WeedS3Server, bucket: str,
                                                                 tmp_path: Path) -> None:
    uri, options = f"s3://{bucket}/example", s3_options(object_store)
    # segments larger than the sink's batches (~22 KB here), small enough that each run seals several
    served = serve(tmp_path / "data", uri, options, **{"log.segment.bytes": "65536"})
    try:
        first = _run(spark_cluster, served.bootstrap, uri, options, 3_000)
        assert first == {"orders_read": 3_000, "totals_written": 5, "totals": _expected(3_000, 1)}
        for p in range(3):
            served.manager.log(TopicPartition("orders", p)).roll()
        served.manager.remote_tier.copy_pass()
        tiered = {s.topic_partition: s.highest_remote_offset for s in served.manager.remote_tier.status()}
        assert all(tiered.get(TopicPartition("orders", p), -1) >= 0 for p in range(3)), tiered

        second = _run(spark_cluster, served.bootstrap, uri, options, 3_000)
        assert second["orders_read"] == 6_000 and second["totals_written"] == 5
        assert second["totals"] == _expected(3_000, 2)
    finally:
        served.stop()
