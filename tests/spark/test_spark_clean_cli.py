"""``tidelog clean run --engine spark``: the CLI cleans on Spark (the test session, reused by the
engine's get-or-create) and leaves what ``--engine in-process`` leaves, byte for byte."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import orjson

from tests.cli_helpers import run_cli

KEYS = 15


def ok(data: Path, *args: str, stdin: bytes = b"") -> str:
    code, out, err = run_cli(data, *args, stdin=stdin)
    assert code == 0, err
    return out.decode()


def produce_table(data: Path) -> None:
    ok(data, "topics", "create", "table", "--config", "cleanup.policy=compact", "--config", "segment.bytes=500")
    lines = b"".join(orjson.dumps({"key": f"k{k}", "value": f"v{r}-{k}"}) + b"\n" for r in range(3) for k in range(KEYS))
    ok(data, "produce", "table", "--format", "json", "--batch-size", "1", stdin=lines)


def tree(data: Path) -> dict[str, bytes]:
    return {str(p.relative_to(data)): p.read_bytes() for p in sorted(data.rglob("*"))
            if p.is_file() and p.name != ".lock"}


def test_clean_run_on_spark_cleans_like_in_process(spark, tmp_path: Path) -> None:
    produce_table(tmp_path / "spark")
    shutil.copytree(tmp_path / "spark", tmp_path / "local")

    dry_run = ("clean", "run", "--json", "--dry-run")
    (measured,) = json.loads(ok(tmp_path / "spark", *dry_run, "--engine", "spark"))
    assert measured == json.loads(ok(tmp_path / "local", *dry_run))[0]
    assert measured["outcome"] == "dry run" and measured["records_read"] > measured["records_kept"]
    assert tree(tmp_path / "spark") == tree(tmp_path / "local"), "a dry run writes nothing"

    (row,) = json.loads(ok(tmp_path / "spark", "clean", "run", "--json", "--force", "--engine", "spark",
                           "--master", "local[1]"))
    (expected,) = json.loads(ok(tmp_path / "local", "clean", "run", "--json", "--force", "--engine", "in-process"))

    assert row["outcome"] == "cleaned" and row["passes"] == 1
    assert row == expected
    assert row["records_read"] > row["records_kept"] >= KEYS
    assert tree(tmp_path / "spark") == tree(tmp_path / "local")
    out = ok(tmp_path / "spark", "consume", "table", "--from-beginning", "--format", "json")
    assert {r["key"]: r["value"] for r in map(json.loads, out.splitlines())} == {f"k{k}": f"v2-{k}" for k in range(KEYS)}


def test_master_without_the_spark_engine_is_a_usage_error(tmp_path: Path) -> None:
    code, _, err = run_cli(tmp_path, "clean", "run", "--master", "local[1]")
    assert code == 2 and "--master needs --engine spark" in err


def test_an_unknown_engine_in_the_broker_config_names_the_key(tmp_path: Path) -> None:
    code, _, err = run_cli(tmp_path, "--override", "tidelog.cleaner.engine=flink", "clean", "run")
    assert code != 0 and "tidelog.cleaner.engine" in err and "in-process, spark" in err
