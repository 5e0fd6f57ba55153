"""The writer under real task retries: a Spark of its own (``local[2,4]``: up to 4 attempts per
task, which the shared ``local[2]`` session cannot give) writes while attempts fail after staging
and while a Python worker dies; every row lands exactly once.

Runs in a subprocess: one JVM holds one SparkContext, and the shared session's master is fixed.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from tidelog.manager import LogManager
from tidelog.records import iter_batches
from tidelog.storage.config import BrokerConfig
from tidelog.storage.fetch_info import FetchIsolation
from tidelog.topic_partition import TopicPartition

ROWS = 600

JOB = textwrap.dedent('''
    import os, sys, time
    from pathlib import Path
    from pyspark import TaskContext
    from pyspark.sql.functions import udf
    from tidelog.spark.session import local_session

    data, marker = sys.argv[1], Path(sys.argv[2])
    spark = local_session("local[2,4]", **{"spark.sql.shuffle.partitions": "2"})
    staging = Path(str(Path(data).resolve()) + ".tidelog-staging")

    @udf("binary")
    def flaky(value):
        context = TaskContext.get()
        if context.attemptNumber() == 0:
            if context.partitionId() == 1 and value == b"299":
                raise RuntimeError("injected failure after rows were handed to the writer")
            if context.partitionId() == 2 and value == b"450":
                os._exit(3)  # the Python worker dies mid-task
        return value

    frame = spark.range(0, %d, 1, 3).selectExpr("cast(cast(id as string) as binary) as value")
    frame.select(flaky("value").alias("value")).write.format("tidelog").option("path", data) \\
        .option("topic", "t").mode("append").save()
    marker.write_text("done")
    spark.stop()
''' % ROWS)


def test_retried_attempts_and_a_dead_worker_still_write_every_row_once(tmp_path: Path) -> None:
    data = tmp_path / "data"
    manager = LogManager.open(BrokerConfig.from_properties({"log.dirs": str(data)}))
    manager.create_topic("t", 2)
    manager.shutdown()
    marker = tmp_path / "done"
    result = subprocess.run([sys.executable, "-c", JOB, str(data), str(marker)], capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0 and marker.exists(), result.stderr[-4000:]
    # both failures happened (Spark logs each failed attempt), and the job still succeeded
    assert "injected failure after rows were handed to the writer" in result.stderr
    assert "exited unexpectedly" in result.stderr or "crashed" in result.stderr
    values = []
    manager = LogManager.open(BrokerConfig.from_properties({"log.dirs": str(data)}))
    try:
        for partition in (0, 1):
            log = manager.log(TopicPartition("t", partition))
            offset = log.log_start_offset
            while offset < log.high_watermark:
                for _, batch in iter_batches(log.read(offset, 1 << 20, FetchIsolation.HIGH_WATERMARK).records):
                    values += [int(r.value) for r in batch.records() if r.offset >= offset]
                    offset = batch.next_offset
    finally:
        manager.shutdown()
    assert sorted(values) == list(range(ROWS))  # every row, none twice
    staging = Path(str(data.resolve()) + ".tidelog-staging")
    assert not any(staging.rglob("*.batches"))  # the failed attempts' files were swept at commit
