"""``tidelog consume`` and ``tidelog offsets`` on a tiered topic whose first segments only the
remote tier (file://) holds: every record from offset 0 across both tiers, ``--timestamp`` and
``offsets --time`` into the remote range."""

from __future__ import annotations

import json
import time
from pathlib import Path

import orjson
from cli_helpers import run_cli

T0 = (int(time.time()) - 3600) * 1000  # recent: retention.ms (7 days) deletes nothing


def ok(data_dir: Path, *args: str, stdin: bytes = b"") -> str:
    code, out, err = run_cli(data_dir, *args, stdin=stdin)
    assert code == 0, err
    return out.decode()


def test_consume_and_offsets_read_the_remote_tier(tmp_path: Path) -> None:
    data = tmp_path / "data"
    opts = ["--override", "remote.log.storage.system.enable=true",
            "--override", f"remote.log.storage.uri={(tmp_path / 'store').as_uri()}"]
    ok(data, *opts, "topics", "create", "orders", "--config", "remote.storage.enable=true",
       "--config", "segment.bytes=600", "--config", "local.retention.bytes=1")
    records = b"".join(orjson.dumps({"key": f"k{i}", "value": f"value-{i:04d}", "timestamp": T0 + 1000 * i}) + b"\n"
                       for i in range(40))
    ok(data, *opts, "produce", "orders", "--format", "json", "--batch-size", "4", stdin=records)
    ok(data, *opts, "tiered", "copy")
    ok(data, *opts, "retention", "run")
    status = json.loads(ok(data, *opts, "tiered", "status", "orders", "--json"))[0]
    local_start = status["local_log_start_offset"]
    assert status["log_start_offset"] == 0 and local_start >= 8

    printed = ok(data, *opts, "consume", "orders", "--from-beginning", "--format", "json").splitlines()
    assert [json.loads(line)["value"] for line in printed] == [f"value-{i:04d}" for i in range(40)]
    from_time = ok(data, *opts, "consume", "orders", "--timestamp", str(T0 + 2500), "--format", "json").splitlines()
    assert [json.loads(line)["offset"] for line in from_time] == list(range(3, 40))
    assert ok(data, *opts, "offsets", "orders", "--time", str(T0 + 4500)).split() == ["orders:0:5"]
