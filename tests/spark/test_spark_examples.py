"""The examples in examples/ run and say what they claim: the streaming pipeline's compacted
totals equal a batch groupBy over every order, and the time-range read counts each hour."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

from examples import orders_pipeline, read_by_time_range


def test_orders_pipeline_keeps_the_latest_total_per_customer(spark, tmp_path: Path) -> None:
    lines: list[str] = []
    summary = orders_pipeline.run(spark, tmp_path / "data", tmp_path / "checkpoint", say=lines.append)
    assert summary["totals"] == summary["expected"]
    assert set(summary["totals"]) == set(orders_pipeline.CUSTOMERS)
    customers = len(orders_pipeline.CUSTOMERS)
    assert summary["records_before"] == orders_pipeline.ROUNDS * customers  # one new total per customer per round
    # the latest total per customer below the active segment, plus the active segment's records
    assert customers < summary["records_after"] <= 2 * customers
    assert any("compaction:" in line for line in lines)


def test_read_by_time_range_counts_each_hour(spark, tmp_path: Path) -> None:
    data = tmp_path / "data"
    read_by_time_range.write_demo(data, minutes=6 * 60)
    since = datetime(2026, 11, 1, 1, tzinfo=timezone.utc)
    until = datetime(2026, 11, 1, 4, 30, tzinfo=timezone.utc)
    assert read_by_time_range.per_hour(spark, data, "clicks", since, until) == [
        ("2026-11-01 01:00", 60), ("2026-11-01 02:00", 60), ("2026-11-01 03:00", 60), ("2026-11-01 04:00", 30)]
