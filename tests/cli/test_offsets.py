"""``tidelog offsets``: ListOffsets by time, printed like kafka-get-offsets (``topic:partition:offset``)."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from test_produce import create_topic, jsonl, open_manager, run

from tidelog.topic_partition import TopicPartition


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    """Topic ``t``: p0 holds timestamps 100, 300, 200 (offsets 0-2), p1 holds 50 (offset 0), p2 is empty."""
    path = tmp_path / "data"
    create_topic(path, "t", 3)
    stdin = jsonl(*({"value": "x", "timestamp": ts, "partition": p} for ts, p in ((100, 0), (300, 0), (200, 0), (50, 1))))
    assert run(path, "produce", "t", "--format", "json", "--batch-size", "1", stdin=stdin)[0] == 0
    return path


def offsets(data_dir: Path, *args: str) -> list[str]:
    code, out, err = run(data_dir, "offsets", "t", *args)
    assert code == 0, err
    return out.decode().splitlines()


@pytest.mark.parametrize("time", [None, "-1", "latest"])
def test_latest_is_the_high_watermark(data_dir: Path, time: str | None) -> None:
    args = () if time is None else ("--time", time)
    assert offsets(data_dir, *args) == ["t:0:3", "t:1:1", "t:2:0"]


@pytest.mark.parametrize("time", ["-2", "earliest", "-4", "earliest-local"])
def test_earliest_is_the_log_start_offset(data_dir: Path, time: str) -> None:
    with open_manager(data_dir) as manager:
        manager.delete_records(TopicPartition("t", 0), 2)
    assert offsets(data_dir, "--time", time) == ["t:0:2", "t:1:0", "t:2:0"]


@pytest.mark.parametrize("time", ["-3", "max-timestamp"])
def test_max_timestamp_is_the_record_with_the_largest_timestamp(data_dir: Path, time: str) -> None:
    assert offsets(data_dir, "--time", time) == ["t:0:1", "t:1:0"]  # the empty partition has none


def test_a_timestamp_finds_the_first_record_at_or_after_it(data_dir: Path) -> None:
    assert offsets(data_dir, "--time", "150") == ["t:0:1"]
    assert offsets(data_dir, "--time", "50") == ["t:0:0", "t:1:0"]
    assert offsets(data_dir, "--time", "301") == []


def test_latest_tiered_finds_nothing(data_dir: Path) -> None:
    assert offsets(data_dir, "--time", "-5") == []


def test_one_partition_and_json(data_dir: Path) -> None:
    assert offsets(data_dir, "--partition", "1") == ["t:1:1"]
    lines = offsets(data_dir, "--time", "-3", "--json")
    assert [orjson.loads(line) for line in lines] == [
        {"topic": "t", "partition": 0, "offset": 1, "timestamp": 300, "leaderEpoch": 0},
        {"topic": "t", "partition": 1, "offset": 0, "timestamp": 50, "leaderEpoch": 0}]


@pytest.mark.parametrize("time", ["yesterday", "-7", "1.5"])
def test_malformed_time_is_a_usage_error(data_dir: Path, time: str) -> None:
    code, _, err = run(data_dir, "offsets", "t", "--time", time)
    assert code == 2 and "malformed time" in err


def test_unknown_topic_and_partition(data_dir: Path) -> None:
    code, _, err = run(data_dir, "offsets", "nope")
    assert code == 1 and err.startswith("error: unknown topic 'nope'")
    code, _, err = run(data_dir, "offsets", "t", "--partition", "3")
    assert code == 1 and err.startswith("error: topic 't' has no partition 3")
