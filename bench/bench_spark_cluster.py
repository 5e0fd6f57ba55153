"""Spark on a real standalone cluster (``spark_cluster_oracle``: a master and two workers, one core
each, whose executors cannot see the data dir) against a real S3 server (SeaweedFS on loopback).

``spark_cluster_remote_read``: issue 22's target "a Spark read of 2 M records from the remote tier
on the two-worker cluster >= 3x Spark's own Kafka connector reading the same records through
``tidelog serve`` on the same cluster". One topic (4 partitions, 9-byte keys, 20-byte values,
1000-record batches, as ``spark_read``) is written, sealed and copied to the store; its local
segments stay, so ``tidelog serve`` answers the connector from local files (the connector's best
case). The figure reads the remote tier straight from the store
(``format("tidelog").option("path", "s3://…")``) into Spark's ``noop`` sink; the baseline reads
the same topic with ``format("kafka")`` through ``tidelog serve``. After one warm-up of each, the
two alternate for ``ROUNDS`` rounds; figures are medians in rows/s. 2 M records (100 k with
``--quick``). Skipped, saying why, without weed (``make weed``), Java or the connector's jars.
Run alone: ``python -m bench.bench_spark_cluster [--quick]``.

This module starts its own SparkContext on the cluster (one per process): it stops any other active
one first, and stops its own at the end.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.bench_remote import tier_overrides, timed_rounds, weed_server
from bench.bench_storage import Row, Settings, Target, scratch_dir

RECORDS = (2_000_000, 100_000)  # full, quick
ROUNDS = (5, 1)
PARTITIONS = 4
SEGMENT_BYTES = 8 << 20
KEY_VALUE_BYTES = (9, 20)
RECORDS_PER_BATCH = 1000
ROW = "spark_cluster_remote_read"


def bench_spark_cluster_remote_read(settings: Settings) -> list[Row]:
    from object_store_oracle import WeedToolMissing

    records = settings.pick(*RECORDS)
    label = f"format(\"tidelog\") from the S3 tier on a 2-worker cluster, {records:,} rows"
    with scratch_dir(settings.work_dir / "spark-cluster-read") as root:
        try:
            with weed_server(root) as server:
                options = tier_overrides(server)
                data = root / "data"
                _fill_tiered_topic(data, options, records)
                with _cluster(root, hidden=data) as cluster, _serve(data, options) as bootstrap:
                    missing, session = _session(cluster)
                    if missing is not None:
                        return [_skipped(missing)]
                    times = _measure(session, options, bootstrap, records, settings.pick(*ROUNDS))
                    connector = session.sparkContext.getConf().get("spark.tidelog.bench.connector")
        except (WeedToolMissing, _Missing) as missing:
            return [_skipped(str(missing))]
    rate = {name: records / statistics.median(ts) for name, ts in times.items()}
    return [Row(ROW, label, rate["remote"], "rows/s", rate["connector"],
                f"Spark's Kafka connector {connector} through tidelog serve, same cluster",
                Target("ratio", 3.0, ">= 3x the connector"),
                {"records": records, **{f"{name}_seconds": [round(t, 3) for t in ts] for name, ts in times.items()}})]


_store_options = tier_overrides  # the name bench_spark_cluster_clean imports


class _Missing(RuntimeError):
    """Something the benchmark needs is not on this machine (the message says what)."""


def _skipped(missing: str) -> Row:
    return Row(ROW, f"skipped: {missing}", 0.0, "rows/s", details={"skipped": missing})


def _fill_tiered_topic(data: Path, options: dict[str, str], records: int) -> None:
    """Topic ``t``: ``records`` records over :data:`PARTITIONS`, every segment sealed and copied."""
    from tidelog.manager import LogManager
    from tidelog.records.builder import build_batch
    from tidelog.storage.config import BrokerConfig
    from tidelog.topic_partition import TopicPartition

    manager = LogManager.open(BrokerConfig.from_properties({"log.dirs": str(data), **options}))
    try:
        manager.create_topic("t", PARTITIONS, {"segment.bytes": str(SEGMENT_BYTES), "remote.storage.enable": "true"})
        value = b"v" * KEY_VALUE_BYTES[1]
        stamp = int(time.time() * 1000)
        per_partition = records // PARTITIONS
        for partition in range(PARTITIONS):
            tp = TopicPartition("t", partition)
            for first in range(0, per_partition, RECORDS_PER_BATCH):
                count = min(RECORDS_PER_BATCH, per_partition - first)
                manager.append(tp, build_batch([(b"k%08d" % (first + i), value) for i in range(count)],
                                               timestamp=stamp))
            manager.log(tp).roll()  # the active segment sealed too: every record goes to the store
        manager.remote_tier.copy_pass()  # type: ignore[union-attr]
        copied = sum(s.highest_remote_offset + 1 for s in manager.remote_tier.status())  # type: ignore[union-attr]
        if copied != per_partition * PARTITIONS:
            raise RuntimeError(f"{ROW}: {copied} records copied to the store, expected {per_partition * PARTITIONS}")
    finally:
        manager.shutdown()


@contextmanager
def _cluster(root: Path, hidden: Path) -> Iterator[Any]:
    """The two-worker cluster, its executors unable to see ``hidden``; stopped on exit."""
    from spark_cluster_oracle import SparkClusterUnavailable, SparkStandaloneCluster

    cluster = SparkStandaloneCluster(root / "cluster", hidden=[hidden])
    try:
        cluster.start()
    except SparkClusterUnavailable as e:  # no Java, or no spark-class in this PySpark
        raise _Missing(str(e)) from None
    try:
        yield cluster
    finally:
        from pyspark import SparkContext

        active = SparkContext._active_spark_context
        if active is not None:
            active.stop()
        cluster.stop()


@contextmanager
def _serve(data: Path, options: dict[str, str]) -> Iterator[str]:
    """``tidelog serve`` over ``data`` (the tiered overrides too); its bootstrap address."""
    from bench.bench_kafka_wire import TidelogServe

    serve = TidelogServe(data, data.parent / "serve.stderr", options)
    serve.start()
    try:
        yield serve.bootstrap_servers
    finally:
        serve.stop()


def _session(cluster: Any) -> tuple[str | None, Any]:
    """A session on ``cluster`` with Spark's Kafka connector on its classpath, or why it cannot have it."""
    import pyspark

    from kafka_oracle.spark_connector import connector_jars

    found = connector_jars(pyspark.__version__)
    if found is None:
        return "Spark's Kafka connector (spark-sql-kafka-0-10) could not be resolved from Maven Central here", None
    session = cluster.session("tidelog bench cluster", **{"spark.jars": ",".join(found[1]),
                                                          "spark.tidelog.bench.connector": found[0]})
    session.sparkContext.setLogLevel("ERROR")
    return None, session


def _measure(spark: Any, options: dict[str, str], bootstrap: str, records: int, rounds: int) -> dict[str, list[float]]:
    remote = spark.read.format("tidelog").option("path", options["remote.log.storage.uri"]).option("subscribe", "t")
    for key, value in options.items():
        if key.startswith("rsm.config."):
            remote = remote.option(key, value)
    connector = (spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap)
                 .option("subscribe", "t").option("startingOffsets", "earliest"))
    counts = (remote.load().count(), connector.load().count())
    if counts != (records, records):
        raise RuntimeError(f"{ROW}: read {counts} rows (remote tier, connector), expected {records} each")
    runs: list[tuple[str, Callable[[], None]]] = [
        ("remote", lambda: remote.load().write.format("noop").mode("overwrite").save()),
        ("connector", lambda: connector.load().write.format("noop").mode("overwrite").save())]
    return timed_rounds(runs, rounds)


BENCHMARKS: dict[str, tuple[str, Callable[[Settings], list[Row]]]] = {
    ROW: ("Spark on a 2-worker standalone cluster: the remote tier read from S3 vs Spark's Kafka connector "
          "through tidelog serve", bench_spark_cluster_remote_read),
}


if __name__ == "__main__":
    quick = "--quick" in sys.argv
    work = Path(sys.argv[sys.argv.index("--work-dir") + 1]) if "--work-dir" in sys.argv else Path("bench/.work")
    work = work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    for row in bench_spark_cluster_remote_read(Settings(work, quick=quick)):
        print(f"{row.benchmark}: {row.figure:,.0f} {row.unit} | ratio {row.ratio} | {row.label} | {row.details}")
