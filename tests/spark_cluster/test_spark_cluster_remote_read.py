"""``spark.read.format("tidelog").option("path", "s3://…")`` on the standalone cluster: the remote
tier of a topic read straight from the real S3 server by executors that cannot see the data dir.

A topic (2 partitions) and a compacted one (offset gaps) are written through a LogManager under the
pytest tmp tree (hidden from the workers), their sealed segments copied to the store and deleted
locally. A second test adds ``kafka.bootstrap.servers``: the store part from S3, the tail not yet
tiered through a tidelog broker's Fetch API, both on the executors. The reference rows are taken on the driver with ``tidelog consume``'s record iterator before
the local deletion (no local Spark session here: one SparkContext per process, and this module's is
the cluster's).

soak: the cluster start, the driver's SparkContext and the first job's executors cost ~1 min on 2
shared cores.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from pyspark import cloudpickle

sys.path.append(str(Path(__file__).parent.parent / "spark"))  # the read-side helpers of tests/spark
from spark_read_data import T0, append_simple, batch, expected_rows, open_manager  # noqa: E402
from test_spark_remote_read import TIERED, s3_options  # noqa: E402
from test_spark_remote_tail import delete_tiered_locally, fill, serve  # noqa: E402

from tidelog.topic_partition import TopicPartition  # noqa: E402

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from object_store_oracle import WeedS3Server
    from spark_cluster_oracle import SparkStandaloneCluster

pytestmark = pytest.mark.soak
# executors cannot import a test module: ship this module's functions by value
cloudpickle.register_pickle_by_value(sys.modules[__name__])

_EXECUTOR_DIR = re.compile(r"/worker(\d+)/app-[^/]+/(\d+)$")
COLUMNS = ["key", "value", "topic", "partition", "offset", "unix_millis(timestamp) AS ts", "timestampType", "headers"]
COUNTS = {0: 2000, 1: 2600}
GAPS = TopicPartition("gaps", 0)


def _in_task(data_dir: str):  # type: ignore[no-untyped-def]
    """The function each read task runs on the rows it read: (executor cwd, what opening the data
    dir gave, the rows as plain tuples with headers as (key, value) lists or None)."""
    def run(rows):  # type: ignore[no-untyped-def]
        import os
        try:
            seen = f"listed {os.listdir(data_dir)}"
        except OSError as e:
            seen = type(e).__name__
        out = []
        for row in rows:
            values = list(row)
            if values[-1] is not None:
                values[-1] = [(h["key"], h["value"]) for h in values[-1]]
            out.append(tuple(values))
        return [(os.getcwd(), seen, out)]
    return run


def test_the_cluster_reads_the_s3_tier_row_for_row_as_the_local_log(
        cluster_spark: SparkSession, spark_cluster: SparkStandaloneCluster, object_store: WeedS3Server,
        bucket: str, tmp_path: Path) -> None:
    uri, store_options = f"s3://{bucket}/tiered", s3_options(object_store)
    data = tmp_path / "data"
    manager = open_manager(data, **{"remote.log.storage.system.enable": "true", "remote.log.storage.uri": uri,
                                    **{f"rsm.config.{k}": v for k, v in store_options.items()}})
    try:
        manager.create_topic("events", 2, TIERED)
        manager.create_topic("gaps", 1, {**TIERED, "cleanup.policy": "compact"})
        for p, count in COUNTS.items():  # keys, headers, null keys and null values (append_simple's pattern)
            append_simple(manager, TopicPartition("events", p), count, per_batch=10)
        for first in range(0, 1500, 10):  # 25 keys over and over: compaction leaves offset gaps
            manager.append(GAPS, batch([(j, T0 + first + j, b"k%d" % ((first + j) % 25), b"v%d" % (first + j), [])
                                        for j in range(10)]))
        assert manager.cleaner.clean_now(GAPS, force=True) is not None
        manager.remote_tier.copy_pass()
        ends = {s.topic_partition: s.highest_remote_offset + 1 for s in manager.remote_tier.status()}
        assert sorted(map(str, ends)) == ["events-0", "events-1", "gaps-0"], ends
        assert all(end > 100 for end in ends.values()), ends
        expected = []
        for tp in sorted(ends):
            expected += expected_rows(manager, tp, None, ends[tp], headers=True)
        manager.run_retention()
        for tp, end in ends.items():
            assert manager.get_log(tp).local_log_start_offset >= end, "the tiered segments are gone locally"
            assert not any(int(f.stem) < end for f in (data / str(tp)).glob("*.log")), "no tiered segment file left"
        assert (data / "events-0").is_dir()  # the driver sees the data dir; the executors must not
    finally:
        manager.shutdown()

    reader = cluster_spark.read.format("tidelog").option("subscribe", "events,gaps").option("includeHeaders", "true")
    for key, value in store_options.items():
        reader = reader.option(f"rsm.config.{key}", value)
    df = reader.option("path", uri).load().selectExpr(*COLUMNS)
    tasks = df.rdd.mapPartitions(_in_task(str(data / "events-0"))).collect()

    got = sorted((row for _, _, rows in tasks for row in rows), key=lambda r: (r[2], r[3], r[4]))
    assert len(got) == len(expected) > 3000
    assert got == expected
    gaps = [r[4] for r in got if r[2] == "gaps"]
    assert 0 < len(gaps) < gaps[-1] + 1, "compaction gaps, as stored"
    assert sum(1 for r in got if r[2] == "events") == sum(end for tp, end in ends.items() if tp.topic == "events")
    assert any(r[0] is None for r in got) and any(r[1] is None for r in got) and any(r[-1] for r in got)
    assert any(r[-1] and (r[-1][1][1] is None) for r in got), "a header with a null value"

    placed = {}
    for cwd, seen, rows in tasks:
        match = _EXECUTOR_DIR.search(cwd)
        assert match is not None and cwd.startswith(str(spark_cluster.work_dir)), f"a task ran outside a worker: {cwd}"
        assert seen == "FileNotFoundError", f"{cwd}: the executor saw the data dir: {seen}"
        placed.setdefault(match.group(1), set()).add(match.group(2))  # worker index -> executor ids
    assert sorted(placed) == ["1", "2"], f"read tasks per worker: {placed}"
    assert sum(1 for _, _, rows in tasks if rows) == 3, "one read task per tiered partition"


def test_the_cluster_reads_the_s3_tier_plus_the_brokers_tail_row_for_row(
        cluster_spark: SparkSession, spark_cluster: SparkStandaloneCluster, object_store: WeedS3Server,
        bucket: str, tmp_path: Path) -> None:
    served = serve(tmp_path / "data", f"s3://{bucket}/tail", s3_options(object_store))
    try:
        ends = fill(served)
        expected = []
        for tp in [TopicPartition("events", 0), TopicPartition("events", 1), GAPS, TopicPartition("plain", 0)]:
            expected += expected_rows(served.manager, tp, headers=True)
        delete_tiered_locally(served, ends)
        reader = cluster_spark.read.format("tidelog").option("subscribe", "events,gaps,plain")
        for key, value in served.options(includeHeaders="true", minPartitions="6").items():
            reader = reader.option(key, value)
        tasks = reader.load().selectExpr(*COLUMNS).rdd.mapPartitions(_in_task(str(served.data / "events-0"))).collect()
    finally:
        served.stop()
    got = sorted((row for _, _, rows in tasks for row in rows), key=lambda r: (r[2], r[3], r[4]))
    assert len(got) == len(expected) > 2500
    assert got == expected
    for tp, end in ends.items():  # both tiers in every tiered partition
        offsets = [r[4] for r in got if (r[2], r[3]) == (tp.topic, tp.partition)]
        assert offsets[0] < end <= offsets[-1], tp
    workers = {_EXECUTOR_DIR.search(cwd).group(1) for cwd, _, rows in tasks if rows}  # type: ignore[union-attr]
    assert workers == {"1", "2"} and all(seen == "FileNotFoundError" for _, seen, _ in tasks)
