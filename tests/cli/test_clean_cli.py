"""``tidelog clean run`` / ``clean status`` and the cleaner section of ``tidelog explain``, end to
end through ``main`` on a temp data dir (real time: records are produced now; nothing here
depends on time passing).

A compacted topic with 600-byte segments gets 20 keys x 3 rounds, one record per batch, so it
rolls several times; the cleaner cleans below the active segment's base offset.
"""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import orjson
import pytest
from test_produce import run

from tidelog.records import iter_batches

KEYS = 20
SEGMENT_BYTES = "600"


def ok(data_dir: Path, *args: str, stdin: bytes = b"") -> str:
    code, out, err = run(data_dir, *args, stdin=stdin)
    assert code == 0, err
    return out.decode()


def produce_dups(data_dir: Path, topic: str, rounds: int = 3, partition: int = 0) -> None:
    """``rounds`` x keys k0..k19, value ``v<round>-<key>``, one record per batch."""
    lines = b"".join(orjson.dumps({"key": f"k{k}", "value": f"v{r}-{k}"}) + b"\n"
                     for r in range(rounds) for k in range(KEYS))
    ok(data_dir, "produce", topic, "--format", "json", "--batch-size", "1", "--partition", str(partition), stdin=lines)


def compacted(data_dir: Path, topic: str = "table", *configs: str, partitions: int = 1) -> Path:
    ok(data_dir, "topics", "create", topic, "--partitions", str(partitions), "--config", "cleanup.policy=compact",
       "--config", f"segment.bytes={SEGMENT_BYTES}", *(a for c in configs for a in ("--config", c)))
    return data_dir / f"{topic}-0"


def active_base(partition_dir: Path) -> int:
    return max(int(p.name.split(".")[0]) for p in partition_dir.glob("*.log"))


def tree(data_dir: Path) -> dict[str, bytes]:
    """Every file under the data dir, by relative path."""
    return {str(p.relative_to(data_dir)): p.read_bytes() for p in sorted(data_dir.rglob("*")) if p.is_file()}


def consumed(data_dir: Path, topic: str, partition: int = 0) -> list[tuple[int, str, str]]:
    """(offset, key, value) of every record of the partition, through ``tidelog consume``."""
    out = ok(data_dir, "consume", topic, "--from-beginning", "--partition", str(partition), "--format", "json")
    return [(r["offset"], r["key"], r["value"]) for r in map(json.loads, out.splitlines())]


def clean_rows(data_dir: Path, *args: str) -> list[dict]:
    return json.loads(ok(data_dir, "clean", "run", "--json", *args))


def test_clean_run_removes_superseded_records_and_says_how_many(tmp_path: Path) -> None:
    data = tmp_path / "data"
    partition_dir = compacted(data)
    produce_dups(data, "table")
    end = active_base(partition_dir)
    assert end > KEYS, "three rounds span several segments"

    out = ok(data, "clean", "run")
    removed = end - KEYS  # every key's latest record below the end stays
    size = r"[\d.]+ (?:B|KiB)"
    assert re.fullmatch(rf"table-0: cleaned: offsets \[0, {end}\) cleaned; removed {removed} of {end} records, "
                        rf"{size} of {size} \(0 keyless\), 1 pass\(es\)\n", out), out
    records = consumed(data, "table")
    below = [(o, k) for o, k, _ in records if o < end]
    assert len(below) == KEYS and len({k for _, k in below}) == KEYS, "one record per key in the cleaned part"
    assert {k: v for _, k, v in records} == {f"k{k}": f"v2-{k}" for k in range(KEYS)}
    offsets = [o for o, _, _ in records]
    assert offsets == sorted(set(offsets)) and offsets[-1] == 3 * KEYS - 1
    assert ok(data, "clean", "run").splitlines()[0].startswith("table-0: not cleaned: not cleanable now"), \
        "a second run finds nothing dirty"


def test_dry_run_changes_nothing_and_reports_what_a_clean_removes(tmp_path: Path) -> None:
    data = tmp_path / "data"
    compacted(data)
    produce_dups(data, "table")
    ok(data, "clean", "status")  # opened and shut down once: later opens rewrite the same bytes
    before = tree(data)
    [dry] = clean_rows(data, "--dry-run")
    assert tree(data) == before, "--dry-run writes nothing"
    assert dry["outcome"] == "dry run" and "would remove" in dry["detail"]
    end = dry["first_uncleanable_offset"]
    assert (dry["records_read"], dry["records_kept"]) == (end, KEYS)
    assert dry["bytes_kept"] < dry["bytes_read"]

    [done] = clean_rows(data)
    assert done["outcome"] == "cleaned" and done["end_offset"] == end
    numbers = ("records_read", "records_kept", "bytes_read", "bytes_kept", "keyless_records", "passes")
    assert {n: done[n] for n in numbers} == {n: dry[n] for n in numbers}
    assert tree(data) != before


def test_force_cleans_below_the_dirty_ratio(tmp_path: Path) -> None:
    data = tmp_path / "data"
    compacted(data, "table", "min.cleanable.dirty.ratio=1.0")  # never exceeded
    produce_dups(data, "table")
    before = tree(data)
    [row] = clean_rows(data)
    assert row["outcome"] == "not cleaned"
    assert "dirty ratio 1.000 is not above min.cleanable.dirty.ratio 1" in row["detail"]
    assert {k: v for k, v in tree(data).items() if k.startswith("table-0/")} == \
        {k: v for k, v in before.items() if k.startswith("table-0/")}
    [forced] = clean_rows(data, "--force")
    assert forced["outcome"] == "cleaned" and forced["records_kept"] == KEYS


def test_partition_needs_topic(tmp_path: Path) -> None:
    code, out, err = run(tmp_path / "data", "clean", "run", "--partition", "0")
    assert code == 2 and out == b""
    assert "--partition needs --topic" in err


def test_topic_and_partition_choose_what_is_cleaned_and_other_policies_are_skipped(tmp_path: Path) -> None:
    data = tmp_path / "data"
    compacted(data, "table", partitions=2)
    for partition in (0, 1):
        produce_dups(data, "table", partition=partition)
    ok(data, "topics", "create", "events", "--config", f"segment.bytes={SEGMENT_BYTES}")
    produce_dups(data, "events")

    [only] = clean_rows(data, "--topic", "table", "--partition", "1")
    assert (only["topic_partition"], only["outcome"]) == ("table-1", "cleaned")
    rows = {r["topic_partition"]: r for r in clean_rows(data)}
    assert set(rows) == {"events-0", "table-0", "table-1"}
    assert rows["table-0"]["outcome"] == "cleaned"
    assert rows["table-1"]["outcome"] == "not cleaned", "cleaned a moment ago"
    assert (rows["events-0"]["outcome"], rows["events-0"]["detail"]) == ("skipped", "not compacted (cleanup.policy=delete)")
    text = ok(data, "clean", "run", "--topic", "events")
    assert text == "events-0: skipped: not compacted (cleanup.policy=delete)\n"
    assert len(consumed(data, "events")) == 3 * KEYS, "a skipped topic keeps every record"


def test_unknown_topic_and_disabled_cleaner_are_errors(tmp_path: Path) -> None:
    data = tmp_path / "data"
    compacted(data)
    code, _, err = run(data, "clean", "run", "--topic", "nope")
    assert code == 1 and "nope" in err
    code, _, err = run(data, "--override", "log.cleaner.enable=false", "clean", "run")
    assert code == 1 and "log.cleaner.enable" in err


def test_clean_status_json(tmp_path: Path) -> None:
    data = tmp_path / "data"
    compacted(data)
    status = json.loads(ok(data, "clean", "status", "--json"))
    assert status["quarantined"] == []
    metrics = status["metrics"]
    for name in ("max-buffer-utilization-percent", "cleaner-recopy-percent", "max-clean-time-secs",
                 "max-compaction-delay-secs", "DeadThreadCount", "max-dirty-percent", "time-since-last-run-ms"):
        assert name in metrics
    key = f"uncleanable-partitions-count[{data.absolute()}]"
    assert metrics[key] == 0 and metrics[f"uncleanable-bytes[{data.absolute()}]"] == 0
    text = ok(data, "clean", "status")
    assert key in text and "no quarantined partitions" in text


def test_explain_shows_the_cleaner_section_for_compacted_partitions_only(tmp_path: Path) -> None:
    data = tmp_path / "data"
    partition_dir = compacted(data)
    produce_dups(data, "table")
    ok(data, "topics", "create", "events", "--config", f"segment.bytes={SEGMENT_BYTES}")
    produce_dups(data, "events", rounds=1)
    end = active_base(partition_dir)

    text = ok(data, "explain")
    cleaner_lines = [line for line in text.splitlines() if "cleaner:" in line]
    assert len(cleaner_lines) == 1 and cleaner_lines[0].strip().startswith("cleaner: table-0: cleanable now")
    assert "first dirty offset 0 (log start offset)" in text and "ratio 1.000" in text
    assert f"first uncleanable offset {end}: active segment {end} (not rolled yet)" in text

    ok(data, "clean", "run")
    explained = {f"{p['topic']}-{p['partition']}": p for p in json.loads(ok(data, "explain", "--json"))}
    assert set(explained) == {"events-0", "table-0"} and "cleaning" not in explained["events-0"]
    section = explained["table-0"]["cleaning"]
    assert (section["topic"], section["first_dirty_offset"], section["checkpoint"]) == ("table", end, end)
    assert section["first_uncleanable_offset"] == end and section["uncleanable_bound"] == "active segment"
    assert section["dirty_bytes"] == 0 and section["cleanable_now"] is False
    assert f"first dirty offset {end} (cleaner checkpoint)" in ok(data, "explain", "table")


def test_explain_names_the_min_compaction_lag_as_the_bound(tmp_path: Path) -> None:
    data = tmp_path / "data"
    compacted(data, "table", "min.compaction.lag.ms=86400000")
    produce_dups(data, "table")
    text = ok(data, "explain", "table")
    assert "first uncleanable offset 0: min.compaction.lag.ms=86400000: segment 0 has records from" in text
    assert "not cleanable now; eligible at" in text
    [row] = clean_rows(data, "--force")
    assert row["outcome"] == "not cleaned", "nothing is old enough, even with --force"


@pytest.mark.parametrize(("where", "dry_run"), [(0, False), (1, False), (1, True)],
                         ids=["first-batch", "third-batch", "third-batch-dry-run"])
def test_a_corrupt_partition_fails_alone_and_nothing_of_it_changes(tmp_path: Path, where: int, dry_run: bool) -> None:
    """Bad input: a batch of a sealed segment is corrupt: the first one (the dirty-ratio stats read
    it) or a later one (met while cleaning, or measuring for a dry run). That partition fails with
    an error naming the file, its files stay as they were (never truncated), and the other
    partition is still cleaned (or measured)."""
    data = tmp_path / "data"
    broken_dir = compacted(data, "broken")
    compacted(data, "table")
    for topic in ("broken", "table"):
        produce_dups(data, topic)
    segment = sorted(broken_dir.glob("*.log"))[1]
    position = [p for p, _ in iter_batches(segment.read_bytes())][2 * where]
    with open(segment, "r+b") as f:
        f.seek(position + 16)  # the batch's magic byte
        f.write(bytes([7]))
    before = {k: v for k, v in tree(data).items() if k.startswith("broken-0/")}
    code, out, err = run(data, "clean", "run", "--json", *(["--dry-run"] if dry_run else []))
    assert out, f"exit {code}: {err}"
    assert code == 1  # a partition that could not be cleaned makes the run fail, as `verify`
    rows = {r["topic_partition"]: r for r in json.loads(out)}
    assert rows["table-0"]["outcome"] == ("dry run" if dry_run else "cleaned")
    assert rows["broken-0"]["outcome"] == "failed"
    assert "magic" in rows["broken-0"]["detail"]
    assert {k: v for k, v in tree(data).items() if k.startswith("broken-0/")} == before
    assert segment.name in rows["broken-0"]["detail"], rows["broken-0"]["detail"]


# --- the spark engine, handed to the cleaner by the CLI ------------------------------------------

def test_the_cli_hands_the_cleaner_the_spark_engine(tmp_path: Path) -> None:
    """``tidelog.cleaner.engine=spark`` opens (the Spark session is only taken by a clean)."""
    compacted(tmp_path)
    out = ok(tmp_path, "--override", "tidelog.cleaner.engine=spark", "clean", "status", "--json")
    assert "metrics" in json.loads(out)


def test_the_spark_engine_without_pyspark_is_a_config_error_naming_the_key(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "pyspark" else find_spec(name, *a))
    compacted(tmp_path)
    for args in (["clean", "run", "--engine", "spark"], ["--override", "tidelog.cleaner.engine=spark", "clean", "run"]):
        code, _, err = run(tmp_path, *args)
        assert code != 0 and "the spark cleaner engine needs pyspark" in err and "tidelog.cleaner.engine" in err, err
