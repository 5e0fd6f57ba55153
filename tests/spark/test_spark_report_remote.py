"""``tidelog spark report`` shows both tiers: a tiered partition's row carries its remote
segments, bytes and offsets, read from the store's metadata (a file:// store here) without a
broker, next to its local figures; a store it cannot read is the row's ``remote_error``.
Most checks call the executor's function directly (no Spark); one goes through the CLI on Spark."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.cli_helpers import run_cli
from tidelog.manager import LogManager
from tidelog.records.builder import build_batch
from tidelog.spark.report import REPORT_COLUMNS, partition_row, plan_tasks
from tidelog.storage.config import BrokerConfig
from tidelog.topic_partition import TopicPartition

NOW = int(time.time() * 1000)  # records must be younger than the default retention.ms (7 days)


def remote_props(data: Path, store: Path) -> dict[str, str]:
    return {"log.dirs": str(data), "remote.log.storage.system.enable": "true",
            "remote.log.storage.uri": store.as_uri()}


def overrides(props: dict[str, str]) -> list[str]:
    return [arg for name, value in props.items() if name != "log.dirs" for arg in ("--override", f"{name}={value}")]


@pytest.fixture(scope="module")
def tiers(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, list]:
    """A data dir with a tiered topic (its sealed segments copied, the local copies deleted) and
    a plain one; the store; the remote segments copied."""
    root = tmp_path_factory.mktemp("report-remote")
    data, store = root / "data", root / "store"
    manager = LogManager.open(BrokerConfig.from_properties(remote_props(data, store)))
    try:
        manager.create_topic("tiered", 1, {"remote.storage.enable": "true", "segment.bytes": "600",
                                           "local.retention.bytes": "1"})
        manager.create_topic("plain", 1, {"segment.bytes": "600"})
        for i in range(30):
            for topic in ("tiered", "plain"):
                manager.append(TopicPartition(topic, 0), build_batch([(b"k", b"v%04d" % i * 10)], timestamp=NOW + i))
        manager.remote_tier.copy_pass()
        manager.run_retention()
        copied = manager.remote_tier.status("tiered")[0]
        assert copied.remote_segments >= 2 and copied.local_log_start_offset > 0
    finally:
        manager.shutdown()
    return data, store, [copied]


def rows(data: Path, broker: BrokerConfig | None) -> dict[str, dict]:
    return {t.topic: partition_row(t, broker, NOW) for t in plan_tasks([data])}


def test_a_tiered_partition_row_shows_both_tiers(tiers) -> None:
    data, store, [status] = tiers
    found = rows(data, BrokerConfig.from_properties(remote_props(data, store)))
    tiered, plain = found["tiered"], found["plain"]
    assert tiered["tiered"] is True and tiered["remote_error"] is None
    assert (tiered["remote_segments"], tiered["remote_bytes"]) == (status.remote_segments, status.remote_bytes)
    assert (tiered["remote_start_offset"], tiered["remote_end_offset"]) == (0, status.highest_remote_offset)
    # the local columns are the local tier's (LogView reads the local files: its start is the first local segment)
    assert (tiered["log_start_offset"], tiered["end_offset"]) == (status.local_log_start_offset, 30)
    assert tiered["remote_end_offset"] + 1 == status.local_log_start_offset  # the two tiers meet
    assert tiered["size_bytes"] < plain["size_bytes"]  # the local tier only: copied segments were freed
    assert plain["tiered"] is False and plain["remote_segments"] is None
    assert set(tiered) == {name for name, _ in REPORT_COLUMNS}


def test_without_the_remote_tier_in_the_broker_config_nothing_is_read(tiers) -> None:
    data, _, _ = tiers
    found = rows(data, BrokerConfig.from_properties({"log.dirs": str(data)}))
    assert found["tiered"]["tiered"] is False and found["tiered"]["remote_bytes"] is None


def test_an_unreadable_remote_tier_is_the_rows_error(tiers, tmp_path: Path) -> None:
    data, store, _ = tiers
    event = next(store.rglob("metadata/00000000000000000001.json"))
    original = event.read_bytes()
    event.write_bytes(b"{broken")
    try:
        tiered = rows(data, BrokerConfig.from_properties(remote_props(data, store)))["tiered"]
    finally:
        event.write_bytes(original)
    assert tiered["tiered"] is True and tiered["remote_segments"] is None
    assert "00000000000000000001.json" in tiered["remote_error"]
    missing = rows(data, BrokerConfig.from_properties(remote_props(data, tmp_path / "elsewhere")))["tiered"]
    assert missing["remote_segments"] == 0 and missing["remote_error"] is None  # an empty store holds nothing yet


def test_cli_report_shows_the_remote_tier(spark, tiers) -> None:
    data, store, [status] = tiers
    props = remote_props(data, store)
    code, out, err = run_cli(data, *overrides(props), "spark", "report", "--json")
    assert code == 0, err
    found = {r["topic"]: r for r in json.loads(out)}
    assert (found["tiered"]["remote_segments"], found["tiered"]["remote_end_offset"]) == (
        status.remote_segments, status.highest_remote_offset)
    code, out, err = run_cli(data, *overrides(props), "spark", "report")
    assert code == 0, err
    header = out.decode().splitlines()[0]
    assert "remote_segments" in header and "remote_bytes" in header
