"""``tidelog verify --remote [URI]`` through the command line, on a file:// remote tier filled by
``tidelog tiered copy``: a clean tier passes (exit 0), a damaged object fails (exit 1) with one
line naming the partition, the segment and the object; ``--json``; the URI defaults to
``remote.log.storage.uri``; local paths and the remote tier together."""

from __future__ import annotations

import json
from pathlib import Path

import orjson
from cli_helpers import run_cli


def remote(store: Path) -> list[str]:
    return ["--override", "remote.log.storage.system.enable=true", "--override", f"remote.log.storage.uri={store.as_uri()}"]


def tiered_topic(tmp_path: Path) -> tuple[Path, Path]:
    data, store = tmp_path / "data", tmp_path / "store"
    for args, stdin in ((("topics", "create", "orders", "--config", "remote.storage.enable=true",
                          "--config", "segment.bytes=600"), b""),
                        (("produce", "orders", "--batch-size", "4"),
                         b"".join(orjson.dumps({"key": f"k{i}", "value": f"value-{i:04d}"}) + b"\n" for i in range(40))),
                        (("tiered", "copy"), b"")):
        code, _, err = run_cli(data, *remote(store), *args, stdin=stdin)
        assert code == 0, err
    return data, store


def test_a_clean_tier_passes_with_the_uri_from_the_broker_config(tmp_path: Path) -> None:
    data, store = tiered_topic(tmp_path)
    code, out, err = run_cli(data, *remote(store), "verify", "--remote")
    assert code == 0, err
    lines = out.decode().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"OK: {store.as_uri()}: 1 partition(s), ") and "0 warning(s)" in lines[0]

    code, out, _ = run_cli(data, "verify", "--json", "--remote", store.as_uri())  # the URI given, no broker config
    report = json.loads(out)
    assert code == 0 and report["ok"] and report["segments"] >= 2 and report["problems"] == [] and report["batches"] > 0


def test_a_damaged_log_object_fails_naming_partition_segment_and_object(tmp_path: Path) -> None:
    data, store = tiered_topic(tmp_path)
    log = sorted(store.rglob("*.log"))[1]
    content = bytearray(log.read_bytes())
    content[50] ^= 0xFF  # inside the first batch's CRC-covered header
    log.write_bytes(bytes(content))
    key = log.relative_to(store).as_posix()
    code, out, _ = run_cli(data, *remote(store), "verify", "--remote")
    lines = out.decode().splitlines()
    assert code == 1
    assert lines[0].startswith("ERROR [crc] orders-0 segment ") and f"{key} at byte 0:" in lines[0]
    assert lines[-1].startswith("1 problem(s): ")

    code, out, _ = run_cli(data, *remote(store), "verify", "--remote", "--json")
    report = json.loads(out)
    assert code == 1 and not report["ok"]
    assert [(p["kind"], p["partition"], p["key"], p["position"]) for p in report["problems"]] == [("crc", "orders-0", key, 0)]


def test_a_missing_index_and_an_orphan(tmp_path: Path) -> None:
    data, store = tiered_topic(tmp_path)
    index = sorted(store.rglob("*.index"))[0]
    index.unlink()
    (index.parent / "leftover.bin").write_bytes(b"?")
    code, out, _ = run_cli(data, "verify", "--remote", store.as_uri())
    text = out.decode()
    assert code == 1
    assert "ERROR [missing_object] orders-0 segment " in text and index.relative_to(store).as_posix() in text
    assert "WARNING [orphan] orders-0 " in text and "leftover.bin" in text and "1 warning(s)" in text


def test_local_paths_and_the_remote_tier_together(tmp_path: Path) -> None:
    data, store = tiered_topic(tmp_path)
    code, out, err = run_cli(data, *remote(store), "verify", str(data), "--remote", "--json")
    report = json.loads(out)
    assert code == 0, err
    assert report["ok"] and report["files_checked"] > 0 and report["remote"]["ok"] and report["remote"]["segments"] >= 2


def test_remote_needs_a_uri_and_verify_needs_something(tmp_path: Path) -> None:
    code, _, err = run_cli(tmp_path / "data", "verify", "--remote")
    assert code == 2 and "remote.log.storage.uri" in err
    code, _, err = run_cli(tmp_path / "data", "verify")
    assert code == 2 and "--remote" in err
    code, _, err = run_cli(tmp_path / "data", "verify", "--remote", "ftp://host/x")
    assert code == 1 and "ftp" in err
