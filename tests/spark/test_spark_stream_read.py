"""``spark.readStream.format("tidelog")``: exactly-once across restarts from a checkpoint, data
appended between batches, rate limits, AvailableNow and Once, and the admission rules on the driver."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from spark_read_data import append_simple, open_manager

from tidelog.spark import options as o
from tidelog.spark.reader import TidelogStreamReader
from tidelog.testing import FakeClock
from tidelog.topic_partition import TopicPartition

TPS = [TopicPartition("events", 0), TopicPartition("events", 1)]


class Collect:
    """A foreachBatch sink keeping ``(batch id, [(partition, offset)])`` (runs in this process)."""

    def __init__(self) -> None:
        self.batches: list[tuple[int, list[tuple[int, int]]]] = []

    def __call__(self, df, batch_id: int) -> None:  # type: ignore[no-untyped-def]
        rows = sorted((r.partition, r.offset) for r in df.select("partition", "offset").collect())
        self.batches.append((batch_id, rows))

    @property
    def rows(self) -> list[tuple[int, int]]:
        return [row for _, rows in self.batches for row in rows]


@pytest.fixture
def events(tmp_path: Path):  # type: ignore[no-untyped-def]
    m = open_manager(tmp_path / "logs")
    m.create_topic("events", 2)
    yield tmp_path, m
    m.shutdown()


def add(m, count: int) -> None:  # type: ignore[no-untyped-def]
    for tp in TPS:
        append_simple(m, tp, count, per_batch=5)


def stream(spark, log_dir: Path, **options: object):  # type: ignore[no-untyped-def]
    reader = spark.readStream.format("tidelog").option("subscribe", "events")
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load(str(log_dir))


def everything(per_partition: int) -> list[tuple[int, int]]:
    return sorted((p, o) for p in (0, 1) for o in range(per_partition))


def test_restarts_from_a_checkpoint_read_every_record_exactly_once(spark, events) -> None:  # type: ignore[no-untyped-def]
    tmp_path, m = events
    add(m, 20)
    sink, checkpoint = Collect(), str(tmp_path / "checkpoint")
    df = stream(spark, tmp_path / "logs", startingOffsets="earliest")
    query = df.writeStream.foreachBatch(sink).option("checkpointLocation", checkpoint).start()
    query.processAllAvailable()
    add(m, 10)  # appended while the query runs
    query.processAllAvailable()
    query.stop()
    assert sorted(sink.rows) == everything(30)
    add(m, 15)  # appended while the query is stopped
    query = df.writeStream.foreachBatch(sink).option("checkpointLocation", checkpoint).trigger(availableNow=True).start()
    query.awaitTermination(120)
    assert sorted(sink.rows) == everything(45) and len(sink.rows) == 90
    logged = [p for p in (tmp_path / "checkpoint" / "offsets").iterdir() if p.name.isdigit()]
    last = max(logged, key=lambda p: int(p.name))
    assert json.loads(last.read_text().splitlines()[-1]) == {"events": {"0": 45, "1": 45}}


def test_available_now_drains_in_rate_limited_batches(spark, events) -> None:  # type: ignore[no-untyped-def]
    tmp_path, m = events
    add(m, 30)
    sink = Collect()
    df = stream(spark, tmp_path / "logs", startingOffsets="earliest", maxOffsetsPerTrigger=7)
    query = (df.writeStream.foreachBatch(sink).option("checkpointLocation", str(tmp_path / "ck"))
             .trigger(availableNow=True).start())
    query.awaitTermination(180)
    assert sorted(sink.rows) == everything(30) and len(sink.rows) == 60
    assert all(len(rows) <= 7 for _, rows in sink.batches)
    assert len(sink.batches) == 10  # each partition's share: floor(7 * 30 / 60) = 3
    assert query.lastProgress["sources"][0]["latestOffset"] == '{"events": {"0": 30, "1": 30}}' or \
        json.loads(query.lastProgress["sources"][0]["latestOffset"]) == {"events": {"0": 30, "1": 30}}


def test_once_reads_everything_and_latest_start_skips_the_backlog(spark, events) -> None:  # type: ignore[no-untyped-def]
    tmp_path, m = events
    add(m, 12)
    sink = Collect()
    df = stream(spark, tmp_path / "logs", startingOffsets="earliest", maxOffsetsPerTrigger=3)
    query = df.writeStream.foreachBatch(sink).option("checkpointLocation", str(tmp_path / "a")).trigger(once=True).start()
    query.awaitTermination(120)
    assert len(sink.batches) == 1 and sorted(sink.rows) == everything(12)
    latest, late = Collect(), stream(spark, tmp_path / "logs")  # startingOffsets defaults to latest
    query = late.writeStream.foreachBatch(latest).option("checkpointLocation", str(tmp_path / "b")).start()
    query.processAllAvailable()
    add(m, 2)
    query.processAllAvailable()
    query.stop()
    assert sorted(latest.rows) == [(p, o) for p in (0, 1) for o in (12, 13)]


# --- admission rules on the driver (no Spark job) -------------------------------------------

def reader(tmp_path: Path, clock: FakeClock, **options: str) -> TidelogStreamReader:
    parsed = o.parse_source_options({"path": str(tmp_path / "logs"), "subscribe": "events",
                                     **{k.lower(): v for k, v in options.items()}}, streaming=True)
    return TidelogStreamReader(parsed, clock=clock)


def test_min_offsets_per_trigger_waits_until_enough_or_max_trigger_delay(events) -> None:  # type: ignore[no-untyped-def]
    from pyspark.sql.streaming.datasource import ReadMaxRows, ReadMinRows

    tmp_path, m = events
    clock = FakeClock()
    add(m, 2)
    r = reader(tmp_path, clock, startingOffsets="earliest", minOffsetsPerTrigger="10", maxTriggerDelay="30s")
    assert r.getDefaultReadLimit() == ReadMinRows(10)
    start = r.initialOffset()
    assert start == {"events": {"0": 0, "1": 0}}
    assert r.latestOffset(start, ReadMinRows(10)) == {"events": {"0": 2, "1": 2}}  # the first batch never waits
    first = {"events": {"0": 2, "1": 2}}
    add(m, 3)
    assert r.latestOffset(first, ReadMinRows(10)) == first  # 6 new < 10: held back
    add(m, 2)
    assert r.latestOffset(first, ReadMinRows(10)) == {"events": {"0": 7, "1": 7}}  # 10 new
    add(m, 1)
    clock.advance(29_999)
    assert r.latestOffset({"events": {"0": 7, "1": 7}}, ReadMinRows(10)) == {"events": {"0": 7, "1": 7}}
    clock.advance(1)
    assert r.latestOffset({"events": {"0": 7, "1": 7}}, ReadMinRows(10)) == {"events": {"0": 8, "1": 8}}
    both = reader(tmp_path, clock, maxOffsetsPerTrigger="4", minOffsetsPerTrigger="2")
    assert both.getDefaultReadLimit() == ReadMaxRows(4)
    assert both.latestOffset({"events": {"0": 0, "1": 0}}, ReadMaxRows(4)) == {"events": {"0": 2, "1": 2}}
    assert both.reportLatestOffset() == {"events": {"0": 8, "1": 8}}


def test_available_now_target_excludes_later_data_and_new_partitions_start_at_earliest(events) -> None:  # type: ignore[no-untyped-def]
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    tmp_path, m = events
    add(m, 5)
    r = reader(tmp_path, FakeClock(), startingOffsets="earliest")
    r.prepareForTriggerAvailableNow()
    add(m, 5)
    assert r.latestOffset({"events": {"0": 0, "1": 0}}, ReadAllAvailable()) == {"events": {"0": 5, "1": 5}}
    planned = r.partitions({"events": {"0": 3}}, {"events": {"0": 5, "1": 5}})
    assert [(p.partition, p.start, p.end) for p in planned] == [(0, 3, 5), (1, 0, 5)]
    assert r.partitions({"events": {"0": 5, "1": 5}}, {"events": {"0": 5, "1": 5}}) == []
