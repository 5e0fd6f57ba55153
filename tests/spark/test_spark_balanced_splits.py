"""``minPartitions`` and ``maxRecordsPerPartition`` give even Spark partitions even when producer
batches are large: cuts fall inside batches and each task keeps only its own offsets, so nothing
is lost or read twice at a cut. (Spark's Kafka source cuts at offsets too: the consumer of each
split seeks to its start offset and stops at its end.)"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from spark_read_data import append_simple, open_manager

from tidelog.records import CompressionType
from tidelog.topic_partition import TopicPartition


@pytest.fixture(scope="module")
def log_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    log_dir = tmp_path_factory.mktemp("splits") / "logs"
    m = open_manager(log_dir, **{"log.segment.bytes": str(1 << 20)})
    try:
        m.create_topic("b100", 1)
        m.create_topic("b1000", 1)
        m.create_topic("gz", 1)
        append_simple(m, TopicPartition("b100", 0), 1000, per_batch=100)
        append_simple(m, TopicPartition("b1000", 0), 1000, per_batch=1000)
        append_simple(m, TopicPartition("gz", 0), 1000, per_batch=500, compression=CompressionType.GZIP)
    finally:
        m.shutdown()
    return log_dir


def per_task(spark, log_dir: Path, topic: str, **options: str) -> list[list[int]]:  # type: ignore[no-untyped-def]
    """The offsets each Spark partition (task) read, in partition order."""
    reader = spark.read.format("tidelog").option("subscribe", topic)
    for key, value in options.items():
        reader = reader.option(key, value)
    df = reader.load(str(log_dir))
    return df.select("offset").rdd.glom().map(lambda rows: [r.offset for r in rows]).collect()


@pytest.mark.parametrize("topic", ["b100", "b1000", "gz"])
def test_min_partitions_splits_evenly_inside_batches(spark, log_dir: Path, topic: str) -> None:  # type: ignore[no-untyped-def]
    tasks = per_task(spark, log_dir, topic, minPartitions="5")
    assert [len(t) for t in tasks] == [200] * 5
    assert [(t[0], t[-1]) for t in tasks] == [(0, 199), (200, 399), (400, 599), (600, 799), (800, 999)]
    offsets = Counter(o for t in tasks for o in t)
    assert sorted(offsets) == list(range(1000)) and set(offsets.values()) == {1}  # none lost, none twice


def test_max_records_per_partition_splits_evenly_inside_one_batch(spark, log_dir: Path) -> None:  # type: ignore[no-untyped-def]
    tasks = per_task(spark, log_dir, "b1000", maxRecordsPerPartition="150")
    assert len(tasks) == 7 and {len(t) for t in tasks} <= {142, 143}
    assert sorted(o for t in tasks for o in t) == list(range(1000))
    tasks = per_task(spark, log_dir, "gz", startingOffsets='{"gz":{"0":3}}', endingOffsets='{"gz":{"0":998}}',
                     minPartitions="4")
    assert [len(t) for t in tasks] == [248, 249, 249, 249]
    assert sorted(o for t in tasks for o in t) == list(range(3, 998))
