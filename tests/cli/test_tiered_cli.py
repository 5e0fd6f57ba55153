"""``tidelog tiered copy`` and ``tidelog tiered status`` through the command line, on a file:// remote
tier: records produced to a tiered topic, one copy pass, the status a second process shows, and
local retention that then frees the copied segments."""

from __future__ import annotations

import json
from pathlib import Path

import orjson
from cli_helpers import run_cli


def ok(data_dir: Path, *args: str, stdin: bytes = b"") -> str:
    code, out, err = run_cli(data_dir, *args, stdin=stdin)
    assert code == 0, err
    return out.decode()


def remote(store: Path) -> list[str]:
    return ["--override", "remote.log.storage.system.enable=true", "--override", f"remote.log.storage.uri={store.as_uri()}"]


def test_copy_then_status_then_local_retention(tmp_path: Path) -> None:
    data, store = tmp_path / "data", tmp_path / "store"
    opts = remote(store)
    ok(data, *opts, "topics", "create", "orders", "--config", "remote.storage.enable=true",
       "--config", "segment.bytes=600", "--config", "local.retention.bytes=1")
    records = b"".join(orjson.dumps({"key": f"k{i}", "value": f"value-{i:04d}"}) + b"\n" for i in range(40))
    ok(data, *opts, "produce", "orders", "--batch-size", "4", stdin=records)

    before = json.loads(ok(data, *opts, "tiered", "status", "orders", "--json"))
    assert [(p["topic_partition"], p["remote_segments"], p["highest_remote_offset"]) for p in before] == [("orders-0", 0, -1)]
    lag = before[0]["copy_lag_segments"]
    assert lag >= 2

    out = ok(data, *opts, "tiered", "copy", "--topic", "orders")
    assert f"copied {lag} segment(s) from 1 tiered partition(s)" in out and "orders-0" in out

    after = json.loads(ok(data, *opts, "tiered", "status", "--json"))
    assert (after[0]["remote_segments"], after[0]["copy_lag_segments"], after[0]["last_error"]) == (lag, 0, None)
    assert any(store.rglob("*.log")), "Kafka's file set in the store"

    ok(data, *opts, "retention", "run")
    final = json.loads(ok(data, *opts, "tiered", "status", "orders", "--json"))[0]
    assert final["log_start_offset"] == 0 and final["local_log_start_offset"] == final["highest_remote_offset"] + 1


def test_tiered_commands_need_the_remote_tier(tmp_path: Path) -> None:
    code, _, err = run_cli(tmp_path / "data", "tiered", "status")
    assert code != 0 and "remote.log.storage.system.enable=true" in err


def test_explain_shows_both_tiers_and_what_waits_to_be_copied(tmp_path: Path) -> None:
    data, store = tmp_path / "data", tmp_path / "store"
    opts = remote(store)
    ok(data, *opts, "topics", "create", "orders", "--config", "remote.storage.enable=true",
       "--config", "segment.bytes=600", "--config", "local.retention.ms=0")
    records = b"".join(orjson.dumps({"key": f"k{i}", "value": f"value-{i:04d}"}) + b"\n" for i in range(40))
    ok(data, *opts, "produce", "orders", "--batch-size", "4", stdin=records)

    before = ok(data, *opts, "explain", "orders")
    assert "tiered: local [0, 40), remote tier empty; " in before
    assert "sealed segment(s) waiting to be copied: the next copy pass (every 30000 ms)" in before
    assert "is not in the remote tier yet (it holds nothing yet)" in before

    ok(data, *opts, "tiered", "copy")
    after = ok(data, *opts, "explain", "orders")
    assert "would delete" in after and "; in the remote tier" in after
    assert "nothing waiting to be copied: the active segment is copied once it is rolled" in after
    tiered = json.loads(ok(data, *opts, "explain", "orders", "--json"))[0]["tiered"]
    assert tiered["remote_segments"] >= 2 and tiered["copy_lag_segments"] == 0
