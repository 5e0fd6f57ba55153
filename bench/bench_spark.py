"""The Spark data pipeline on ``local[2]`` (issue 6): reads, writes, and reads against Spark's own
Kafka connector through ``tidelog serve``, each against a baseline measured in the same session.

* ``spark_read``: ``spark.read.format("tidelog")`` of a 2-partition topic into Spark's ``noop``
  sink, against ``spark.range`` producing the same seven columns into ``noop`` (the JVM-only
  pipeline: what a source that cost nothing would reach). Target: >= 1 M rows/s.
* ``spark_write``: ``df.write.format("tidelog")`` (staged on executors, committed by the driver)
  of ``spark.range`` rows with a key and a 20-byte value, against the same DataFrame into
  ``noop``. Target: >= 0.5 M rows/s.
* ``spark_vs_kafka_connector``: the same topic read directly (``format("tidelog")``) and through
  ``tidelog serve`` by Spark's own Kafka connector (``format("kafka")``, spark-sql-kafka from
  Maven Central via :mod:`kafka_oracle.spark_connector`). Target: direct >= 2x the connector.
  Skipped, saying why, when the connector cannot be resolved.
* ``spark_broker_write``: ``df.write.format("tidelog")`` through a running ``tidelog serve``
  (``kafka.bootstrap.servers``: staged through the broker, committed by it, exactly once) against
  Spark's Kafka sink (``format("kafka")``, at-least-once) writing the same cached DataFrame
  (2 M rows, 9-byte keys, 20-byte values, 4 Spark partitions) to another topic of the same
  broker. After one warm-up each, the two alternate for 5 rounds; medians. Target: >= 0.8x the
  Kafka sink. Skipped, saying why, when the connector cannot be resolved.

One Spark session serves every benchmark here (start-up costs ~10 s); each figure is the median of
``repeats`` timed runs after one warm-up run (the first Python-source query of a session pays
worker start-up).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

from bench.bench_storage import Row, Settings, Target, median, scratch_dir

KEY_VALUE_BYTES = (9, 20)  # record key and value sizes, as the reference prototypes (spark.md §3.1)
RECORDS_PER_BATCH = 1000


@cache
def _session() -> Any:
    """The one session; with the Kafka connector on its classpath when it can be fetched."""
    import pyspark

    from kafka_oracle.spark_connector import connector_jars
    from tidelog.spark.session import local_session

    conf = {"spark.sql.shuffle.partitions": "4", "spark.driver.memory": "4g"}
    found = connector_jars(pyspark.__version__)
    if found is not None:
        conf["spark.jars"] = ",".join(found[1])
        conf["spark.tidelog.bench.connector"] = found[0]
    spark = local_session(app_name="tidelog bench", **conf)
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _connector_missing(spark: Any) -> str | None:
    if not spark.sparkContext.getConf().get("spark.tidelog.bench.connector", ""):
        return "Spark's Kafka connector (spark-sql-kafka-0-10) could not be resolved from Maven Central here"
    return None


def _timed(action: Callable[[], object], repeats: int) -> float:
    """Median seconds of ``repeats`` runs of ``action`` after one warm-up run."""
    action()
    samples = []
    for _ in range(repeats):
        began = time.perf_counter()
        action()
        samples.append(time.perf_counter() - began)
    return median(samples)


def _fill_topic(data: Path, topic: str, records: int, partitions: int = 2) -> None:
    """``records`` records split over ``partitions``, in 1000-record uncompressed batches."""
    from tidelog.manager import LogManager
    from tidelog.records.builder import build_batch
    from tidelog.storage.config import BrokerConfig
    from tidelog.topic_partition import TopicPartition

    manager = LogManager.open(BrokerConfig.from_properties({"log.dirs": str(data)}))
    try:
        manager.create_topic(topic, partitions)
        key_size, value_size = KEY_VALUE_BYTES
        value = b"v" * value_size
        stamp = int(time.time() * 1000)
        per_partition = records // partitions
        for partition in range(partitions):
            tp = TopicPartition(topic, partition)
            for first in range(0, per_partition, RECORDS_PER_BATCH):
                count = min(RECORDS_PER_BATCH, per_partition - first)
                manager.append(tp, build_batch([(b"k%08d" % ((first + i) % 10**8), value) for i in range(count)],
                                               timestamp=stamp))
    finally:
        manager.shutdown()


def _range_like_kafka(spark: Any, rows: int) -> Any:
    """``spark.range`` with the seven columns of a Kafka row (the JVM-only baseline)."""
    return spark.range(rows).selectExpr(
        "cast(lpad(cast(id as string), 9, 'k') as binary) as key", "cast(repeat('v', 20) as binary) as value",
        "'t' as topic", "cast(id % 2 as int) as partition", "id as offset",
        "cast(current_timestamp() as timestamp) as timestamp", "0 as timestampType")


def bench_spark_read(settings: Settings) -> list[Row]:
    spark = _session()
    rows = settings.pick(4_000_000, 200_000)
    with scratch_dir(settings.work_dir / "spark-read") as root:
        data = root / "data"
        _fill_topic(data, "t", rows)
        reader = spark.read.format("tidelog").option("path", str(data)).option("subscribe", "t")
        count = reader.load().count()
        if count != rows:
            raise RuntimeError(f"spark_read: read {count} rows of the {rows} written")
        ours = _timed(lambda: reader.load().write.format("noop").mode("overwrite").save(), settings.repeats)
        base = _timed(lambda: _range_like_kafka(spark, rows).write.format("noop").mode("overwrite").save(),
                      settings.repeats)
    return [Row("spark_read", f"format(\"tidelog\") -> noop, {rows:,} rows, 2 partitions", rows / ours, "rows/s",
                rows / base, "spark.range, same columns -> noop", Target("at_least", 1_000_000, ">= 1 M rows/s"),
                {"seconds": ours, "baseline_seconds": base})]


def bench_spark_write(settings: Settings) -> list[Row]:
    spark = _session()
    rows = settings.pick(2_000_000, 100_000)
    with scratch_dir(settings.work_dir / "spark-write") as root:
        data = root / "data"
        _fill_topic(data, "w", 0)
        frame = spark.range(rows).selectExpr("cast(lpad(cast(id as string), 9, 'k') as binary) as key",
                                             "cast(repeat('v', 20) as binary) as value").repartition(2).cache()
        frame.count()
        writes = [0]

        def write() -> None:
            frame.write.format("tidelog").option("path", str(data)).option("topic", "w").mode("append").save()
            writes[0] += 1

        ours = _timed(write, settings.repeats)
        base = _timed(lambda: frame.write.format("noop").mode("overwrite").save(), settings.repeats)
        written = spark.read.format("tidelog").option("path", str(data)).option("subscribe", "w").load().count()
        frame.unpersist()
        if written != rows * writes[0]:
            raise RuntimeError(f"spark_write: {written} rows in the topic after {writes[0]} writes of {rows}")
    return [Row("spark_write", f"format(\"tidelog\") save, {rows:,} rows", rows / ours, "rows/s", rows / base,
                "the same DataFrame -> noop", Target("at_least", 500_000, ">= 0.5 M rows/s"),
                {"seconds": ours, "baseline_seconds": base})]


def bench_spark_vs_kafka_connector(settings: Settings) -> list[Row]:
    spark = _session()
    missing = _connector_missing(spark)
    label = "format(\"tidelog\") direct vs format(\"kafka\") through tidelog serve"
    if missing is not None:
        return [Row("spark_vs_kafka_connector", f"skipped: {missing}", math.nan, "rows/s", None, "", None,
                    {"skipped": missing})]
    from bench.bench_kafka_wire import TidelogServe

    rows = settings.pick(2_000_000, 100_000)
    with scratch_dir(settings.work_dir / "spark-kafka") as root:
        data = root / "data"
        _fill_topic(data, "t", rows)
        serve = TidelogServe(data, root / "serve.stderr", {})
        serve.start()
        try:
            direct = spark.read.format("tidelog").option("path", str(data)).option("subscribe", "t")
            connector = (spark.read.format("kafka").option("kafka.bootstrap.servers", serve.bootstrap_servers)
                         .option("subscribe", "t").option("startingOffsets", "earliest"))
            counts = (direct.load().count(), connector.load().count())
            if counts != (rows, rows):
                raise RuntimeError(f"spark_vs_kafka_connector: read {counts} rows, expected {rows} each")
            ours = _timed(lambda: direct.load().write.format("noop").mode("overwrite").save(), settings.repeats)
            theirs = _timed(lambda: connector.load().write.format("noop").mode("overwrite").save(), settings.repeats)
        finally:
            serve.stop()
    connector = spark.sparkContext.getConf().get("spark.tidelog.bench.connector")
    return [Row("spark_vs_kafka_connector", f"{label}, {rows:,} rows", rows / ours, "rows/s", rows / theirs,
                f"Spark's Kafka connector {connector} via tidelog serve", Target("ratio", 2.0, ">= 2x the connector"),
                {"seconds": ours, "connector_seconds": theirs, "connector": connector})]


def bench_spark_broker_write(settings: Settings) -> list[Row]:
    from bench.bench_kafka_wire import TidelogServe
    from bench.bench_remote import timed_rounds

    spark = _session()
    missing = _connector_missing(spark)
    if missing is not None:
        return [Row("spark_broker_write", f"skipped: {missing}", math.nan, "rows/s", None, "", None,
                    {"skipped": missing})]
    rows, rounds = settings.pick(2_000_000, 100_000), settings.pick(5, 1)
    with scratch_dir(settings.work_dir / "spark-broker-write") as root:
        data = root / "data"
        for topic in ("exactly_once", "kafka_sink"):
            _fill_topic(data, topic, 0, partitions=4)
        frame = spark.range(rows).selectExpr("cast(lpad(cast(id as string), 9, 'k') as binary) as key",
                                             "cast(repeat('v', 20) as binary) as value").repartition(4).cache()
        frame.count()
        serve = TidelogServe(data, root / "serve.stderr", {})
        serve.start()
        try:
            bootstrap = serve.bootstrap_servers

            def ours() -> None:
                frame.write.format("tidelog").option("kafka.bootstrap.servers", bootstrap) \
                    .option("topic", "exactly_once").mode("append").save()

            def theirs() -> None:
                frame.write.format("kafka").option("kafka.bootstrap.servers", bootstrap) \
                    .option("topic", "kafka_sink").save()

            times = timed_rounds([("tidelog", ours), ("kafka", theirs)], rounds)
            counts = {topic: spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap)
                      .option("subscribe", topic).option("startingOffsets", "earliest").load().count()
                      for topic in ("exactly_once", "kafka_sink")}
        finally:
            serve.stop()
            frame.unpersist()
    if counts["exactly_once"] != rows * (rounds + 1) or counts["kafka_sink"] < rows * (rounds + 1):
        raise RuntimeError(f"spark_broker_write: {counts} rows after {rounds + 1} writes of {rows} each")
    rate = {name: rows / median(ts) for name, ts in times.items()}
    connector = spark.sparkContext.getConf().get("spark.tidelog.bench.connector")
    return [Row("spark_broker_write", f"format(\"tidelog\") through tidelog serve, exactly once, {rows:,} rows",
                rate["tidelog"], "rows/s", rate["kafka"],
                f"Spark's Kafka sink {connector} (at-least-once), same broker", Target("ratio", 0.8, ">= 0.8x the Kafka sink"),
                {**{f"{name}_seconds": [round(t, 3) for t in ts] for name, ts in times.items()}, "connector": connector})]


BENCHMARKS: dict[str, tuple[str, Callable[[Settings], list[Row]]]] = {
    "spark_read": ("Spark batch read of a topic (format tidelog) vs spark.range with the same columns",
                   bench_spark_read),
    "spark_write": ("Spark batch write to a topic (staged, driver-committed) vs the same DataFrame to noop",
                    bench_spark_write),
    "spark_vs_kafka_connector": ("direct segment reads vs Spark's Kafka connector through tidelog serve",
                                 bench_spark_vs_kafka_connector),
    "spark_broker_write": ("exactly-once writes through tidelog serve vs Spark's Kafka sink through the same broker",
                           bench_spark_broker_write),
}
