"""``tidelog spark report``: each partition's row agrees with what tidelog's own tools say.

Cross-checks: records and timestamps with the library's read of the log, deletable segments and
bytes with ``tidelog explain``'s retention plan, the dirty ratio with the cleaner's explanation
(both judged on the same files), and the CLI's JSON and PNG outputs.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.cli_helpers import run_cli
from tidelog.manager import LogManager
from tidelog.records import iter_batches
from tidelog.records.builder import build_batch
from tidelog.spark.report import partition_report, plan_tasks
from tidelog.storage.config import BrokerConfig
from tidelog.storage.fetch_info import FetchIsolation
from tidelog.topic_partition import TopicPartition

OLD = 1_600_000_000_000  # 2020: far older than any retention.ms used here
SEGMENT = {"segment.bytes": "2000"}


def _write_dir(data: Path) -> None:
    broker = BrokerConfig.from_properties({"log.dirs": str(data)})
    manager = LogManager.open(broker)
    try:
        manager.create_topic("events", 2, {**SEGMENT, "retention.ms": str(7 * 86_400_000)})
        manager.create_topic("state", 1, {**SEGMENT, "cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.3"})
        for i in range(30):
            manager.append(TopicPartition("events", 0), build_batch([(None, b"e%03d" % i * 10)], timestamp=OLD + i))
        manager.append(TopicPartition("events", 1), build_batch([(b"k", b"now")], timestamp=int(time.time() * 1000)))
        for i in range(40):
            manager.append(TopicPartition("state", 0), build_batch([(b"k%d" % (i % 5), b"s%03d" % i * 10)],
                                                                   timestamp=OLD + 1000 + i))
    finally:
        manager.shutdown()


def _library_view(data: Path, tp: TopicPartition) -> tuple[int, int, int]:
    """(records, oldest, newest timestamp) as the library reads the partition."""
    manager = LogManager.open(BrokerConfig.from_properties({"log.dirs": str(data)}))
    try:
        log = manager.log(tp)
        stamps = []
        offset = log.log_start_offset
        while offset < log.high_watermark:  # one read returns one segment's batches at most
            for _, batch in iter_batches(log.read(offset, 1 << 24, FetchIsolation.HIGH_WATERMARK).records):
                stamps += [r.timestamp for r in batch.records() if r.offset >= offset]
                offset = batch.next_offset
        return len(stamps), min(stamps), max(stamps)
    finally:
        manager.shutdown()


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("report") / "data"
    _write_dir(path)
    code, _, err = run_cli(path, "clean", "run", "--force")  # state-0: a cleaner checkpoint, then more dirt
    assert code == 0, err
    manager = LogManager.open(BrokerConfig.from_properties({"log.dirs": str(path)}))
    try:
        for i in range(60):
            manager.append(TopicPartition("state", 0), build_batch([(b"k%d" % (i % 5), b"t%03d" % i * 10)],
                                                                   timestamp=OLD + 5000 + i))
    finally:
        manager.shutdown()
    return path


def test_report_rows_agree_with_the_library_explain_and_the_cleaner(spark, data: Path) -> None:
    rows = {(r.topic, r.partition): r.asDict()
            for r in partition_report(spark, [data], now_ms=int(time.time() * 1000)).collect()}
    assert sorted(rows) == [("events", 0), ("events", 1), ("state", 0)]
    code, out, err = run_cli(data, "explain", "--json")
    assert code == 0, err
    explained = {(p["topic"], p["partition"]): p for p in json.loads(out)}
    for key, row in rows.items():
        tp = TopicPartition(*key)
        records, oldest, newest = _library_view(data, tp)
        assert row["records"] == records
        assert int(row["oldest_timestamp"].timestamp() * 1000) == oldest
        assert int(row["newest_timestamp"].timestamp() * 1000) == newest
        plan = explained[key]
        assert (row["deletable_segments"], row["deletable_bytes"]) == (len(plan["segments"]), plan["total_bytes"])
        assert (row["log_start_offset"], row["end_offset"]) == (plan["log_start_offset"], plan["high_watermark"])
    assert rows[("events", 0)]["deletable_segments"] > 0      # 2020 records, retention of 7 days
    assert rows[("events", 1)]["deletable_segments"] == 0     # one fresh record in the active segment
    state = rows[("state", 0)]
    cleaning = explained[("state", 0)]["cleaning"]
    assert 0 < state["dirty_ratio"] < 1
    assert state["dirty_ratio"] == pytest.approx(cleaning["dirty_ratio"])
    assert (state["clean_bytes"], state["dirty_bytes"]) == (cleaning["clean_bytes"], cleaning["dirty_bytes"])
    assert state["cleanable"] is (state["dirty_ratio"] >= 0.3)
    assert state["cleanup_policy"] == "compact" and rows[("events", 0)]["first_dirty_offset"] is None
    assert rows[("events", 0)]["dirty_ratio"] is None and rows[("events", 0)]["cleanable"] is False
    assert 0 < state["active_segment_bytes"] < state["size_bytes"]


def test_report_is_read_only_and_needs_no_lock(spark, data: Path) -> None:
    before = {p: p.stat().st_mtime_ns for p in data.rglob("*")}
    manager = LogManager.open(BrokerConfig.from_properties({"log.dirs": str(data)}))  # holds the .lock
    try:
        assert partition_report(spark, [data]).count() == 3
    finally:
        manager.shutdown()
    assert len(plan_tasks([data])) == 3
    manager_free = {p: p.stat().st_mtime_ns for p in data.rglob("*.log")}
    assert all(before[p] == t for p, t in manager_free.items() if p in before)


def test_cli_report_prints_json_and_writes_a_png(spark, data: Path, tmp_path: Path) -> None:
    png = tmp_path / "report.png"
    code, out, err = run_cli(data, "spark", "report", "--json", "--png", str(png))
    assert code == 0, err
    rows = json.loads(out)
    assert [(r["topic"], r["partition"]) for r in rows] == [("events", 0), ("events", 1), ("state", 0)]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000
    code, out, err = run_cli(data, "spark", "report")
    assert code == 0 and "dirty_ratio" in out.decode() and "events" in out.decode()
