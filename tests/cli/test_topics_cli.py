"""``tidelog topics``, ``configs``, ``log-dirs`` and ``serve`` end to end: output, persistence
across invocations, and every bad input as one line and a non-zero exit with nothing written."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_produce import run

from tidelog.cli.main import hoist_global_options, main
from tidelog.manager import LogManager
from tidelog.manager.topics import REGISTRY_FILE
from tidelog.storage.config import BrokerConfig
from tidelog.storage.metadata import read_clean_shutdown


def ok(data_dir: Path, *args: str) -> str:
    code, out, err = run(data_dir, *args)
    assert code == 0, err
    return out.decode()


def fails(data_dir: Path, *args: str) -> str:
    code, out, err = run(data_dir, *args)
    assert code != 0, out
    assert len(err.strip().splitlines()) <= 3, err  # one clear line (click usage errors add a hint)
    return err


def test_create_list_describe_alter_delete(tmp_path: Path) -> None:
    data = tmp_path / "data"
    assert ok(data, "topics", "create", "orders", "--partitions", "3", "--config", "retention.ms=1000") \
        == "Created topic orders.\n"
    ok(data, "topics", "create", "audit")
    assert ok(data, "topics", "list").split() == ["audit", "orders"]
    assert json.loads(ok(data, "topics", "list", "--json")) == ["audit", "orders"]

    text = ok(data, "topics", "describe", "orders")
    assert "Topic: orders\t" in text and "PartitionCount: 3" in text and "Configs: retention.ms=1000" in text
    [described] = json.loads(ok(data, "topics", "describe", "orders", "--json"))
    assert [p["partition"] for p in described["partitions"]] == [0, 1, 2]
    assert described["configs"] == {"retention.ms": "1000"}

    ok(data, "topics", "alter", "orders", "--partitions", "5")
    [grown] = json.loads(ok(data, "topics", "describe", "orders", "--json"))
    assert grown["partition_count"] == 5 and grown["topic_id"] == described["topic_id"]

    assert ok(data, "topics", "delete", "audit") == "Deleted topic audit.\n"
    assert ok(data, "topics", "list").split() == ["orders"]
    assert not (data / "audit-0").exists()
    assert [p.name.endswith("-delete") for p in data.iterdir() if p.name.startswith("audit")] == [True]


def test_configs_describe_and_alter_persist(tmp_path: Path) -> None:
    data = tmp_path / "data"
    ok(data, "topics", "create", "orders")
    ok(data, "configs", "alter", "orders", "--set", "segment.bytes=2048", "--set", "retention.ms=5000")
    ok(data, "configs", "alter", "orders", "--delete", "retention.ms")
    described = json.loads(ok(data, "configs", "describe", "orders", "--json"))
    assert [(c["Name"], c["Value"], c["Source"]) for c in described["configs"]] == [
        ("segment.bytes", "2048", "TOPIC_CONFIG")]
    every = json.loads(ok(data, "configs", "describe", "orders", "--all", "--json"))["configs"]
    by_name = {c["Name"]: c for c in every}
    assert by_name["retention.ms"]["Value"] == "604800000" and by_name["retention.ms"]["Source"] == "DEFAULT_CONFIG"
    with LogManager.open(BrokerConfig.from_properties({}), [data]) as manager:
        assert manager.topic_config("orders").segment_bytes == 2048


def test_broker_overrides_reach_new_topics(tmp_path: Path) -> None:
    data = tmp_path / "data"
    ok(data, "topics", "create", "t", "--override", "log.retention.hours=1", "--override", "num.partitions=2")
    every = json.loads(ok(data, "configs", "describe", "t", "--all", "--json", "--override", "log.retention.hours=1"))
    assert {c["Name"]: c for c in every["configs"]}["retention.ms"]["Value"] == "3600000"
    assert [p.name for p in sorted(data.glob("t-*"))] == ["t-0", "t-1"]


def test_log_dirs_reports_sizes_and_segments(tmp_path: Path) -> None:
    data = tmp_path / "data"
    ok(data, "topics", "create", "t", "--partitions", "2")
    run(data, "produce", "t", "--partition", "1", stdin=b"a\nb\nc\n")
    [info] = json.loads(ok(data, "log-dirs", "--json"))
    parts = {p["partition"]: p for p in info["partitions"]}
    assert parts["t-1"]["logEndOffset"] == 3 and parts["t-1"]["size"] > 0 and parts["t-0"]["size"] == 0
    assert info["size"] == parts["t-1"]["size"] and parts["t-1"]["numLogSegments"] == 1
    assert "t-1" in ok(data, "log-dirs")


@pytest.mark.parametrize(("args", "message"), [
    (("topics", "describe", "nope"), "unknown topic 'nope'"),
    (("topics", "create", "x", "--partitions", "0"), "invalid non-positive value"),
    (("topics", "create", "bad/name"), "illegal"),
    (("topics", "create", "x", "--config", "bogus.key=1"), "Unknown topic config name: bogus.key"),
    (("topics", "create", "x", "--config", "retention.ms=soon"), "retention.ms"),
    (("topics", "create", "x", "--config", "novalue"), "KEY=VALUE"),
    (("configs", "alter", "nope", "--set", "retention.ms=1"), "unknown topic"),
    (("configs", "alter", "t", "--set", "segment.bytes=-5"), "segment.bytes"),
    (("configs", "alter", "t"), "nothing to alter"),
    (("topics", "alter", "t", "--partitions", "1"), "Topic already has 1 partitions."),
    (("topics", "create", "t"), "already exists"),
    (("--override", "log.retention.ms=x", "topics", "list"), "log.retention.ms"),
])
def test_bad_input_is_one_line_and_writes_nothing(tmp_path: Path, args: tuple[str, ...], message: str) -> None:
    data = tmp_path / "data"
    ok(data, "topics", "create", "t")
    registry = (data / REGISTRY_FILE).read_bytes()
    entries = sorted(p.name for p in data.iterdir())
    assert message in fails(data, *args)
    assert (data / REGISTRY_FILE).read_bytes() == registry
    assert sorted(p.name for p in data.iterdir()) == entries


def test_a_second_process_on_an_owned_dir_fails_clearly(tmp_path: Path) -> None:
    data = tmp_path / "data"
    ok(data, "topics", "create", "t")
    with LogManager.open(BrokerConfig.from_properties({}), [data]):
        err = fails(data, "topics", "list")
    assert "locked" in err and str(os.getpid()) in err


def test_topic_config_option_is_not_taken_for_the_server_properties() -> None:
    assert hoist_global_options(["topics", "create", "t", "--config", "a=b"]) == ["topics", "create", "t", "--config", "a=b"]
    assert hoist_global_options(["topics", "list", "--config", "server.properties"]) == \
        ["--config", "server.properties", "topics", "list"]


def test_serve_runs_until_sigterm_then_shuts_down_cleanly(tmp_path: Path) -> None:
    data = tmp_path / "data"
    ok(data, "topics", "create", "t")
    # port 0: the test must not depend on 9092 being free (make run may hold it)
    process = subprocess.Popen([sys.executable, "-m", "tidelog.cli.main", "--data-dir", str(data),
                                "--override", "listeners=PLAINTEXT://127.0.0.1:0", "serve"],
                               stderr=subprocess.PIPE, text=True)
    try:
        banner = process.stderr.readline()
        assert "serving 1 partition(s) of 1 topic(s)" in banner
        assert read_clean_shutdown(data) is None, "the marker is removed while the dir is owned"
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0
    finally:
        if process.poll() is None:
            process.kill()
    assert read_clean_shutdown(data) == -1
    started = time.monotonic()
    with LogManager.open(BrokerConfig.from_properties({}), [data]) as manager:
        assert manager.log_dirs()[0].partitions[0].log_end_offset == 0
        assert manager.get_log(manager.logs()[0][0]).had_clean_shutdown
    assert time.monotonic() - started < 60


def test_log_dirs_come_from_the_config_when_no_data_dir_is_given(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TIDELOG_DATA_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    dirs = [tmp_path / "a", tmp_path / "b"]
    properties = tmp_path / "server.properties"
    properties.write_text(f"log.dirs={dirs[0]},{dirs[1]}\n")
    main(["--config", str(properties), "topics", "create", "t", "--partitions", "2"])  # exits only on errors
    assert sorted(p.name for d in dirs for p in d.iterdir() if p.is_dir()) == ["t-0", "t-1"]
    assert not (tmp_path / "data").exists(), "./data is only the default when nothing names a log dir"


def test_deleting_an_internal_topic_is_refused_and_keeps_its_data(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with LogManager.open(BrokerConfig.from_properties({}), [data]) as manager:
        manager.create_topic("__consumer_offsets", 1)
    registry = (data / REGISTRY_FILE).read_bytes()
    assert "Cannot delete internal topic __consumer_offsets" in fails(data, "topics", "delete", "__consumer_offsets")
    assert (data / REGISTRY_FILE).read_bytes() == registry
    assert (data / "__consumer_offsets-0").is_dir()
