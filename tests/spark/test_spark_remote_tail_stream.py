"""``readStream.format("tidelog")`` of a store path with ``kafka.bootstrap.servers`` across the tier
boundary, against a real ``tidelog serve`` process that tiers segments every 100 ms and deletes
them locally while the query runs: every produced record arrives exactly once.

Also the stream reader's driver calls in process (latest from the broker's high watermark, asked
at most once a second; ``minOffsetsPerTrigger`` on a store path)."""

from __future__ import annotations

import json
import queue
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka import KafkaProducer
from pyspark.sql.streaming.datasource import ReadMinRows

from tidelog.remote.metadata import TopicIdPartition
from tidelog.remote.metadata_log import RemotePartitionMetadata
from tidelog.remote.store import open_store
from tidelog.spark.offsets import canonical
from tidelog.spark.remote_source import parse_remote_options
from tidelog.spark.remote_stream import RemoteStreamReader
from tidelog.storage.metadata import decode_partition_metadata
from tidelog.testing import FakeClock
from tidelog.topic_partition import TopicPartition

LISTENING = re.compile(r"listening on PLAINTEXT://127\.0\.0\.1:(\d+)")
ROUNDS, PER_ROUND = 8, 600


class Serve:
    """``tidelog serve`` in a subprocess tiering to ``uri`` (copy pass every 100 ms, local
    retention every 200 ms keeping no tiered segment)."""

    def __init__(self, data: Path, uri: str) -> None:
        base = [sys.executable, "-m", "tidelog.cli.main", "--data-dir", str(data)]
        for override in ("listeners=PLAINTEXT://127.0.0.1:0", "remote.log.storage.system.enable=true",
                         f"remote.log.storage.uri={uri}", "remote.log.manager.task.interval.ms=100",
                         "log.retention.check.interval.ms=200", "log.segment.bytes=16384"):
            base += ["--override", override]
        self.process = subprocess.Popen([*base, "serve"], stderr=subprocess.PIPE, text=True)
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()
        deadline = time.monotonic() + 60
        while True:
            line = self.lines.get(timeout=max(0.1, deadline - time.monotonic()))
            if found := LISTENING.search(line):
                self.bootstrap = f"127.0.0.1:{found.group(1)}"
                return

    def _pump(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.lines.put(line)

    def stop(self) -> None:
        self.process.terminate()
        assert self.process.wait(timeout=60) == 0


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Serve, Path, str]]:
    data, uri = tmp_path / "data", (tmp_path / "store").as_uri()
    subprocess.run([sys.executable, "-m", "tidelog.cli.main", "--data-dir", str(data), "--override",
                    "remote.log.storage.system.enable=true", "--override", f"remote.log.storage.uri={uri}",
                    "topics", "create", "events", "--partitions", "2", "--config", "remote.storage.enable=true",
                    "--config", "local.retention.bytes=1"], check=True, capture_output=True, timeout=120)
    serve = Serve(data, uri)
    try:
        yield serve, data, uri
    finally:
        if serve.process.poll() is None:
            serve.stop()


def produce(bootstrap: str, first: int, count: int) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
    for i in range(first, first + count):
        producer.send("events", key=b"k%d" % i, value=b"v%d-" % i + b"x" * 200, partition=i % 2)
    producer.flush(60)
    producer.close()


def remote_end(data: Path, uri: str, partition: int) -> int:
    """The highest tiered offset + 1 of events-<partition>, from the store."""
    topic_id = decode_partition_metadata((data / f"events-{partition}" / "partition.metadata").read_bytes()).topic_id
    tip = TopicIdPartition(topic_id, TopicPartition("events", partition))
    return RemotePartitionMetadata.load(open_store(uri), tip).highest_offset() + 1


def local_start(data: Path, partition: int) -> int:
    return min(int(p.name.split(".")[0]) for p in (data / f"events-{partition}").glob("*.log"))


@pytest.mark.soak  # a tidelog serve, ~5,000 records in rounds and a Spark query: ~40 s on 2 shared cores
def test_a_stream_crosses_the_tier_boundary_as_segments_are_tiered_and_deleted(spark, served, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    serve, data, uri = served
    produce(serve.bootstrap, 0, PER_ROUND)
    stream = (spark.readStream.format("tidelog").option("subscribe", "events").option("startingOffsets", "earliest")
              .option("kafka.bootstrap.servers", serve.bootstrap).option("maxOffsetsPerTrigger", "400").load(uri))
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    query = (stream.selectExpr("partition", "offset", "CAST(key AS STRING) AS k").writeStream.format("parquet")
             .option("path", str(out)).option("checkpointLocation", str(checkpoint))
             .trigger(processingTime="200 milliseconds").start())
    try:
        for r in range(1, ROUNDS):
            produce(serve.bootstrap, r * PER_ROUND, PER_ROUND)
            time.sleep(0.5)
        total = ROUNDS * PER_ROUND
        deadline = time.monotonic() + 120
        while True:
            assert query.exception() is None, query.exception()
            progress = query.lastProgress
            end = progress["sources"][0]["endOffset"] if progress else None
            end = json.loads(end) if isinstance(end, str) else end
            if end and sum(int(v) for v in end["events"].values()) == total:
                break
            assert time.monotonic() < deadline, f"the query did not reach {total} offsets: {end}"
            time.sleep(0.3)
    finally:
        query.stop()
    for p in (0, 1):  # the boundary moved during the run: segments tiered and gone locally
        assert remote_end(data, uri, p) > 0 and local_start(data, p) > 0, p
    rows = sorted((r.partition, r.offset, r.k) for r in spark.read.parquet(str(out)).collect())
    assert len(rows) == total, "each record once"
    for p in (0, 1):
        mine = [(o, k) for q, o, k in rows if q == p]
        assert [o for o, _ in mine] == list(range(total // 2)), p
        assert [k for _, k in mine] == [f"k{2 * o + p}" for o in range(total // 2)]


def test_latest_is_the_high_watermark_asked_at_most_once_a_second(served, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from tidelog.spark import broker_tail

    serve, data, uri = served
    produce(serve.bootstrap, 0, 100)
    ropts = parse_remote_options({"path": uri, "subscribe": "events", "kafka.bootstrap.servers": serve.bootstrap,
                                  "minOffsetsPerTrigger": "80", "maxTriggerDelay": "5s"}, streaming=True)
    clock = FakeClock(1_000_000)
    reader = RemoteStreamReader(ropts, clock)
    asked = []  # ListOffsets for the high watermark
    offsets = broker_tail.BrokerPartitions.offsets
    monkeypatch.setattr(broker_tail.BrokerPartitions, "offsets",
                        lambda self, tps, ts: (ts == -1 and asked.append(ts)) or offsets(self, tps, ts))
    start = reader.initialOffset()
    assert start == {"events": {"0": 50, "1": 50}}, "startingOffsets latest: the high watermarks"
    asked.clear()
    limit = ReadMinRows(80)
    first = reader.latestOffset(start, limit)
    assert first == start and len(asked) == 1  # the first batch never waits (nothing new)
    produce(serve.bootstrap, 100, 40)  # 40 new offsets: fewer than minOffsetsPerTrigger
    for _ in range(20):
        assert reader.latestOffset(first, limit) == first  # cached: the new ones not seen yet
    assert len(asked) == 1, "one ListOffsets for the high watermarks per second at most"
    clock.advance(1000)
    assert reader.latestOffset(first, limit) == first, "40 < 80 new offsets: held back"
    assert len(asked) == 2 and reader.reportLatestOffset() == {"events": {"0": 70, "1": 70}}
    clock.advance(5000)  # maxTriggerDelay passed
    end = reader.latestOffset(first, limit)
    assert end == canonical({TopicPartition("events", 0): 70, TopicPartition("events", 1): 70})
    ranges = reader.partitions(first, end)
    assert [(r.partition, r.start, r.end) for r in ranges] == [(0, 50, 70), (1, 50, 70)]
    assert all(r.boundary is not None for r in ranges), "split into a store and a broker part at plan time"


@pytest.mark.soak  # two AvailableNow drains of ~3,000 offsets in 900-offset batches: ~1 min on 2 shared cores
def test_available_now_drains_store_and_tail_then_a_restart_reads_only_the_new(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Rate-limited batches over both tiers equal the local read; more records tiered and
    appended, then a restart on the same checkpoint reads those only."""
    sys.path.append(str(Path(__file__).parent))
    from spark_read_data import append_simple
    from test_spark_remote_tail import delete_tiered_locally, fill, serve

    served = serve(tmp_path / "data", (tmp_path / "store").as_uri(), {})
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"

    def drain() -> list[tuple]:  # type: ignore[type-arg]
        stream = spark.readStream.format("tidelog")
        for key, value in served.options(subscribe="events,gaps,plain", startingOffsets="earliest",
                                         maxOffsetsPerTrigger="900").items():
            stream = stream.option(key, value)
        query = (stream.load().selectExpr("topic", "partition", "offset", "key", "value").writeStream
                 .format("parquet").option("path", str(out)).option("checkpointLocation", str(checkpoint))
                 .trigger(availableNow=True).start())
        query.awaitTermination(180)
        assert query.exception() is None
        return sorted(tuple(r) for r in spark.read.parquet(str(out)).collect())

    def local() -> list[tuple]:  # type: ignore[type-arg]
        rows = (spark.read.format("tidelog").option("path", str(served.data)).option("subscribe", "events,gaps,plain")
                .load().selectExpr("topic", "partition", "offset", "key", "value").collect())
        return sorted(tuple(r) for r in rows)

    try:
        ends = fill(served)
        expected = local()
        delete_tiered_locally(served, ends)
        assert drain() == expected
        for p in (0, 1):
            append_simple(served.manager, TopicPartition("events", p), 400, per_batch=10)
        # the sink holds both runs: the first's rows, and the new ones read locally before tiering
        expected = sorted(set(expected) | set(local()))
        served.manager.remote_tier.copy_pass()
        delete_tiered_locally(served, {s.topic_partition: s.highest_remote_offset + 1
                                       for s in served.manager.remote_tier.status()})
        assert drain() == expected, "the new offsets once, the old ones not again"
    finally:
        served.stop()
