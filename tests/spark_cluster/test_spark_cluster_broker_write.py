"""``format("tidelog")`` writes from the standalone cluster through a live ``tidelog serve``: the
executors cannot see the broker's data dir (the pytest tmp tree is hidden from them), they stage
through the broker, the broker commits; a kafka-python producer keeps producing to the same
topic meanwhile; every record is there once and each job is contiguous in each partition.

soak: the driver's SparkContext on the cluster plus the first job's executor JVMs cost ~30-40 s.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

sys.path.append(str(Path(__file__).parent.parent / "spark"))  # test_spark_broker_write's helpers
sys.path.append(str(Path(__file__).parent.parent / "server"))
from server_helpers import start_broker  # noqa: E402
from test_spark_broker_write import PARTITIONS, Producing, check_whole, consume, rows  # noqa: E402

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from tidelog.manager import LogManager
    from tidelog.server import ServerThread

pytestmark = pytest.mark.soak


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[LogManager, ServerThread, str]]:
    manager, thread = start_broker(tmp_path / "data")
    manager.create_topic("t", PARTITIONS)
    try:
        yield manager, thread, f"127.0.0.1:{thread.server.bound[0].port}"
    finally:
        thread.stop()
        manager.shutdown()


def test_a_write_from_the_cluster_goes_through_the_broker_whole(cluster_spark: SparkSession, served: tuple) -> None:
    manager, _, bootstrap = served
    data = manager.log_dirs()[0].path
    with Producing(bootstrap) as producer:
        rows(cluster_spark, 0, 20_000).repartition(4).write.format("tidelog").mode("append") \
            .option("kafka.bootstrap.servers", bootstrap).option("topic", "t").save()
        rows(cluster_spark, 20_000, 20_000).repartition(4).write.format("tidelog").mode("append") \
            .option("path", str(data)).option("topic", "t").save()  # the driver finds the broker by the path
    found = consume(bootstrap, 40_000 + producer.sent)
    check_whole(found, 2, 20_000, producer.sent)
