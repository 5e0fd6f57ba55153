"""Kafka's source metrics (``min/max/avgOffsetsBehindLatest``) and description for a tidelog
stream. Spark's Kafka source reports them itself (``KafkaMicroBatchStream.metrics``: per
partition, latest available offset minus the batch's end offset, 0 for an unreached partition;
description ``KafkaV2[Subscribe[t]]``). PySpark's Python source API has no hook for either (the
JVM wrapper implements neither ``ReportsSourceMetrics`` nor ``toString``), so tidelog computes
them from the progress Spark does record (``endOffset``, and ``latestOffset`` from the reader's
``reportLatestOffset``): :mod:`tidelog.spark.progress`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from spark_read_data import append_simple, open_manager

from tidelog.spark.progress import description, java_double, source_metrics
from tidelog.topic_partition import TopicPartition


def test_metrics_follow_kafkas_formula() -> None:
    source = {"endOffset": '{"t":{"0":5,"1":7}}', "latestOffset": '{"t":{"0":10,"1":7,"2":3}}'}
    assert source_metrics(source) == {"minOffsetsBehindLatest": "0", "maxOffsetsBehindLatest": "5",
                                      "avgOffsetsBehindLatest": "2.6666666666666665"}
    assert source_metrics({"endOffset": '{"t":{"0":5}}', "latestOffset": None}) == {}
    assert [java_double(x) for x in (0.0, 12.5, 1e7, 1.5e-4)] == ["0.0", "12.5", "1.0E7", "1.5E-4"]


@pytest.mark.parametrize(("options", "expected"), [
    ({"subscribe": "a,b"}, "TidelogV2[Subscribe[a, b]]"),
    ({"subscribePattern": "orders.*"}, "TidelogV2[SubscribePattern[orders.*]]"),
    ({"assign": '{"t":[0,1]}'}, "TidelogV2[Assign[t-0, t-1]]"),
])
def test_description_has_kafkas_form(options: dict[str, str], expected: str) -> None:
    assert description({"path": "/data", **options}) == expected


def test_a_rate_limited_stream_reports_how_far_behind_it_is(spark: Any, tmp_path: Path) -> None:
    log_dir = tmp_path / "logs"
    m = open_manager(log_dir)
    try:
        m.create_topic("m", 2)
        append_simple(m, TopicPartition("m", 0), 60)
        append_simple(m, TopicPartition("m", 1), 40)
    finally:
        m.shutdown()
    query = (spark.readStream.format("tidelog").option("path", str(log_dir)).option("subscribe", "m")
             .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "50").load()
             .writeStream.format("noop").option("checkpointLocation", str(tmp_path / "ckpt"))
             .trigger(availableNow=True).start())
    assert query.awaitTermination(300)
    progress = [p for p in query.recentProgress if p.numInputRows > 0]
    assert [p.numInputRows for p in progress] == [50, 50]
    first, last = progress[0].sources[0], progress[-1].sources[0]
    # what Spark itself shows for a Python source: no metrics, the JVM wrapper's name
    assert not first.metrics and "PythonMicroBatchStream" in first.description
    assert json.loads(first.latestOffset) == {"m": {"0": 60, "1": 40}}
    assert json.loads(first.endOffset) == {"m": {"0": 30, "1": 20}}
    assert source_metrics(first) == {"minOffsetsBehindLatest": "20", "maxOffsetsBehindLatest": "30",
                                     "avgOffsetsBehindLatest": "25.0"}
    assert source_metrics(last) == {"minOffsetsBehindLatest": "0", "maxOffsetsBehindLatest": "0",
                                    "avgOffsetsBehindLatest": "0.0"}
