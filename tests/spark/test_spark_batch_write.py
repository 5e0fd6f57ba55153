"""``df.write.format("tidelog")`` on real local Spark: rows written equal the records read back.

Records are read back with the library (LogManager, ``Log.read``), not the Spark reader. The
shared ``local[2]`` session cannot retry tasks (local mode allows one attempt), so the
exactly-once pieces that need retries (orphaned attempt files, abort with None messages, a
commit crashing at each step) are tested without Spark in ``test_spark_commit.py``; here a task
failure aborts the job end to end.
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from tidelog.manager import LogManager
from tidelog.partitioner import partition_for_key
from tidelog.records import CompressionType, iter_batches
from tidelog.storage.commit_log import COMMIT_LOG_FILE
from tidelog.storage.config import BrokerConfig
from tidelog.storage.fetch_info import FetchIsolation

UTC = timezone.utc
ROW_SCHEMA = ("key binary, value binary, partition int, "
              "headers array<struct<key: string, value: binary>>, timestamp timestamp")


def make_data_dir(root: Path, topics: dict[str, int], configs: dict[str, dict[str, str]] | None = None) -> Path:
    root.mkdir(parents=True)
    with LogManager.open(BrokerConfig.from_properties({}), [root]) as manager:
        for name, partitions in topics.items():
            manager.create_topic(name, partitions, (configs or {}).get(name))
    return root


def read_back(root: Path, topic: str) -> list[dict[str, Any]]:
    """Every record of ``topic``, partition by partition, in offset order."""
    out = []
    with LogManager.open(BrokerConfig.from_properties({}), [root]) as manager:
        for tp, lg in manager.logs(topic):
            offset = lg.log_start_offset
            while offset < lg.log_end_offset:
                batches = [b for _, b in iter_batches(lg.read(offset, 1 << 22, FetchIsolation.LOG_END).records)]
                for batch in batches:
                    out += [{"partition": tp.partition, "offset": r.offset, "key": r.key, "value": r.value,
                             "timestamp": r.timestamp, "headers": tuple(r.headers), "codec": batch.compression}
                            for r in batch.records()]
                offset = batches[-1].next_offset
    return out


def save(df: Any, root: Path, **options: str) -> None:
    writer = df.write.format("tidelog").mode("append").option("path", str(root))
    for key, value in options.items():
        writer = writer.option(key, value)
    writer.save()


def test_rows_written_equal_records_read_back(spark: Any, tmp_path: Path) -> None:
    root = make_data_dir(tmp_path / "data", {"t": 3})
    stamp = datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=UTC)  # microseconds: floored to ms
    keyed = [(f"k{i}".encode(), f"v{i}".encode(), None, None, stamp) for i in range(200)]
    explicit = [(b"x", b"explicit", 2, [("h1", b"a"), ("h2", None)], stamp)]
    keyless = [(None, f"free{i}".encode(), None, [], stamp) for i in range(30)]
    tombstone = [(b"gone", None, 0, None, stamp)]
    rows = keyed + explicit + keyless + tombstone
    df = spark.createDataFrame(rows, ROW_SCHEMA).repartition(2)

    save(df, root, topic="t")
    records = read_back(root, "t")

    assert sorted((r["key"] or b"", r["value"] or b"") for r in records) == sorted(
        (row[0] or b"", row[1] or b"") for row in rows)  # every row once, nothing else
    by_value = {r["value"]: r for r in records}
    for key, value, *_ in keyed:  # Kafka's default partitioner: murmur2 of the key
        assert by_value[value]["partition"] == partition_for_key(key, 3)
    assert by_value[b"explicit"]["partition"] == 2
    assert by_value[b"explicit"]["headers"] == (("h1", b"a"), ("h2", None))
    assert by_value[b"v0"]["headers"] == () and by_value[b"free0"]["headers"] == ()
    assert {r["timestamp"] for r in records} == {int(stamp.timestamp() * 1000)}  # 1714979289123
    assert [r["partition"] for r in records if r["value"] is None] == [0]
    for partition in range(3):  # offsets dense from 0 in every partition
        offsets = [r["offset"] for r in records if r["partition"] == partition]
        assert offsets == list(range(len(offsets)))
    assert not list(Path(str(root.resolve()) + ".tidelog-staging").iterdir())  # staging swept
    assert (root / COMMIT_LOG_FILE).is_file()


def test_topic_column_string_columns_commit_time_and_the_topics_codec(spark: Any, tmp_path: Path) -> None:
    root = make_data_dir(tmp_path / "data", {"plain": 1, "zipped": 2}, {"zipped": {"compression.type": "gzip"}})
    rows = [(f"k{i}", f"é{i}", "zipped" if i % 2 else "plain") for i in range(40)]
    df = spark.createDataFrame(rows, "key string, value string, topic string").coalesce(1)

    before = int(datetime.now(UTC).timestamp() * 1000)
    save(df, root)
    after = int(datetime.now(UTC).timestamp() * 1000)

    plain, zipped = read_back(root, "plain"), read_back(root, "zipped")
    assert [r["value"].decode() for r in plain] == [v for _, v, t in rows if t == "plain"]  # one task: in order
    assert sorted(r["value"].decode() for r in zipped) == sorted(v for _, v, t in rows if t == "zipped")
    assert {r["codec"] for r in zipped} == {CompressionType.GZIP} and {r["codec"] for r in plain} == {
        CompressionType.NONE}
    stamps = {r["timestamp"] for r in plain + zipped}
    assert len(stamps) == 1 and before <= stamps.pop() <= after  # no timestamp column: the commit time


def test_keyless_rows_spread_over_partitions_and_keep_their_order(spark: Any, tmp_path: Path) -> None:
    root = make_data_dir(tmp_path / "data", {"t": 4}, {"t": {"max.message.bytes": "2000"}})  # small batches
    df = spark.range(0, 3000, 1, 1).selectExpr("cast(cast(id as string) as binary) as value")
    save(df, root, topic="t")
    records = read_back(root, "t")
    assert len(records) == 3000
    assert len({r["partition"] for r in records}) == 4  # sticky partition moves on at each sealed batch
    for partition in range(4):
        numbers = [int(r["value"]) for r in records if r["partition"] == partition]
        assert numbers == sorted(numbers)


def test_a_failing_task_aborts_the_job_publishes_nothing_and_sweeps_what_others_staged(spark: Any,
                                                                                      tmp_path: Path) -> None:
    from pyspark.errors import PySparkException
    from pyspark.sql.functions import udf

    root = make_data_dir(tmp_path / "data", {"t": 2})
    staging = Path(str(root.resolve()) + ".tidelog-staging")

    @udf("binary")
    def fail_in_partition_1(value):  # type: ignore[no-untyped-def]  # (hints would make pyspark guess an eval type)
        import time

        from pyspark import TaskContext

        if TaskContext.get().partitionId() == 1 and value == b"199":  # type: ignore[union-attr]
            deadline = time.monotonic() + 30
            while not any(staging.rglob("part-00000-*")) and time.monotonic() < deadline:
                time.sleep(0.05)  # let partition 0 stage its file first: abort must sweep it
            raise RuntimeError("injected task failure")
        return value

    df = spark.range(0, 200, 1, 2).selectExpr("cast(cast(id as string) as binary) as value") \
        .select(fail_in_partition_1("value").alias("value"))
    with pytest.raises(PySparkException, match="injected task failure"):
        save(df, root, topic="t")
    assert read_back(root, "t") == []
    assert staging.is_dir() and not any(staging.rglob("*.batches"))  # abort swept the job's dir by prefix
    assert not (root / COMMIT_LOG_FILE).exists()


def test_a_data_dir_owned_by_a_running_process_is_refused_at_save(spark: Any, tmp_path: Path) -> None:
    from pyspark.errors import AnalysisException

    root = make_data_dir(tmp_path / "data", {"t": 1})
    df = spark.createDataFrame([(b"v",)], "value binary")
    with LogManager.open(BrokerConfig.from_properties({}), [root]):  # as a running tidelog serve would
        with pytest.raises(AnalysisException, match=r"owned by a running process .*format\(\"kafka\"\)"):
            save(df, root, topic="t")
    save(df, root, topic="t")
    assert [r["value"] for r in read_back(root, "t")] == [b"v"]
