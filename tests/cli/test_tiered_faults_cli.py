"""A faulty remote tier as the command line shows it: ``tidelog tiered status``, ``tidelog explain``
and ``tidelog retention run`` in a fresh process, after the partition's remote metadata was
corrupted behind tidelog's back (a file:// store) and with the S3 store refusing the credentials
(the real S3 server behind the fault proxy): each names the partition, the object and the cause,
and local retention deletes nothing."""

from __future__ import annotations

import json
from pathlib import Path

import orjson
from cli_helpers import run_cli


def ok(data_dir: Path, *args: str, stdin: bytes = b"") -> str:
    code, out, err = run_cli(data_dir, *args, stdin=stdin)
    assert code == 0, err
    return out.decode()


def produce_and_copy(data: Path, opts: list[str]) -> None:
    ok(data, *opts, "topics", "create", "orders", "--config", "remote.storage.enable=true",
       "--config", "segment.bytes=600", "--config", "local.retention.ms=0")
    records = b"".join(orjson.dumps({"key": f"k{i}", "value": f"value-{i:04d}"}) + b"\n" for i in range(40))
    ok(data, *opts, "produce", "orders", "--batch-size", "4", stdin=records)


def test_corrupt_remote_metadata_shows_in_status_explain_and_keeps_local_segments(tmp_path: Path) -> None:
    data, store = tmp_path / "data", tmp_path / "store"
    opts = ["--override", "remote.log.storage.system.enable=true", "--override", f"remote.log.storage.uri={store.as_uri()}"]
    produce_and_copy(data, opts)
    ok(data, *opts, "tiered", "copy")
    events = sorted(store.rglob("metadata/*.json"))
    events[-1].write_bytes(b"\x00 not json")
    key = events[-1].relative_to(store).as_posix()

    [row] = json.loads(ok(data, *opts, "tiered", "status", "orders", "--json"))
    for part in ("orders-0", key, "corrupt remote metadata object", "JSONDecodeError"):
        assert part in row["last_error"], part
    assert row["highest_remote_offset"] == -1
    table = ok(data, *opts, "tiered", "status")
    assert "corrupt remote metadata object" in table
    explained = ok(data, *opts, "explain", "orders")
    assert "the last copy failed: loading the remote metadata of orders-0 failed: corrupt" in explained
    assert key in explained

    segments = sorted(p.name for p in (data / "orders-0").glob("*.log"))
    ok(data, *opts, "retention", "run")
    assert sorted(p.name for p in (data / "orders-0").glob("*.log")) == segments, "nothing local goes"


def test_refused_credentials_show_in_status(tmp_path: Path, object_store, fault_proxy, bucket: str) -> None:
    data = tmp_path / "data"
    options = fault_proxy.store_options(object_store.credentials, **{"secret.key": "not-the-secret"})
    opts = ["--override", "remote.log.storage.system.enable=true", "--override", f"remote.log.storage.uri=s3://{bucket}/t"]
    for name, value in options.items():
        opts += ["--override", f"rsm.config.{name}={value}"]
    produce_and_copy(data, opts)
    out = ok(data, *opts, "tiered", "copy")
    assert "copied 0 segment(s)" in out
    [row] = json.loads(ok(data, *opts, "tiered", "status", "--json"))
    for part in ("orders-0", "access denied", "metadata/", "SIGNATURE_DOES_NOT_MATCH"):
        assert part in row["last_error"], part
    assert "not-the-secret" not in row["last_error"] and row["copy_lag_segments"] >= 2
