"""Remote retention through the command line, on a file:// remote tier: ``tidelog explain`` says what
remote retention deletes next and why (text and --json), ``tidelog delete-records`` then
``tidelog retention run`` deletes the remote segments below the new log start offset, and
``tidelog topics delete`` of a tiered topic leaves nothing in the store."""

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


def _tiered_topic(data: Path, opts: list[str]) -> list[dict[str, object]]:
    ok(data, *opts, "topics", "create", "orders", "--config", "remote.storage.enable=true",
       "--config", "segment.bytes=600", "--config", "retention.ms=3600000", "--config", "local.retention.ms=-2")
    records = b"".join(orjson.dumps({"key": f"k{i}", "value": f"value-{i:04d}"}) + b"\n" for i in range(40))
    ok(data, *opts, "produce", "orders", "--batch-size", "4", stdin=records)
    ok(data, *opts, "tiered", "copy")
    return json.loads(ok(data, *opts, "explain", "orders", "--json"))


def test_explain_delete_records_retention_run_and_topic_deletion(tmp_path: Path) -> None:
    data, store = tmp_path / "data", tmp_path / "store"
    opts = remote(store)
    [explained] = _tiered_topic(data, opts)
    plan = explained["tiered"]["remote_retention"]
    assert plan["deletions"] == [] and "within retention.ms=3600000" in plan["stop"]
    text = ok(data, *opts, "explain", "orders")
    assert "remote retention: nothing: oldest remote segment [0, " in text

    ok(data, *opts, "delete-records", "orders", "--partition", "0", "--offset", "9")
    [explained] = json.loads(ok(data, *opts, "explain", "orders", "--json"))
    plan = explained["tiered"]["remote_retention"]
    assert [d["cause"] for d in plan["deletions"]] and all(d["cause"] == "log start offset" for d in plan["deletions"])
    assert all(d["end_offset"] < 9 for d in plan["deletions"]) and plan["log_start_offset_after"] == 9
    assert "ends below the log start offset 9" in ok(data, *opts, "explain", "orders")

    out = ok(data, *opts, "retention", "run", "--topic", "orders")
    assert f"remote retention: {len(plan['deletions'])} segment(s) [0, " in out
    [status] = json.loads(ok(data, *opts, "tiered", "status", "orders", "--json"))
    assert status["remote_segments"] >= 1 and status["log_start_offset"] == 9
    assert status["remote_retention"]["deletions"] == []

    ok(data, *opts, "topics", "delete", "orders")
    assert [p for p in store.rglob("*") if p.is_file()] == [], "the topic's remote data is gone"
