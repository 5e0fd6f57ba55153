"""``tidelog metrics`` on a stopped dir: the Prometheus text of the manager's families, parsed
back with prometheus_client's parser, with one vocabulary across ``log-dirs --json`` (Kafka's
gauge names), ``explain --json`` ("reason", "dirty_ratio") and the metrics; the dir is read, never
written, and a dir a running manager holds is refused."""

from __future__ import annotations

import json
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families
from test_clean_cli import compacted, ok, produce_dups, tree
from test_produce import run

from tidelog.manager import LogManager
from tidelog.storage.config import BrokerConfig


def scrape(data: Path, *args: str) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """``tidelog metrics`` parsed: family name → {sorted labels: value}."""
    text = ok(data, "metrics", *args)
    return {f.name: {tuple(sorted(s.labels.items())): s.value for s in f.samples}
            for f in text_string_to_metric_families(text)}


def labels(topic: str, partition: int = 0, **more: str) -> tuple[tuple[str, str], ...]:
    return tuple(sorted({"topic": topic, "partition": str(partition), **more}.items()))


def make_dir(data: Path) -> None:
    compacted(data, "table")
    produce_dups(data, "table")
    ok(data, "topics", "create", "events", "--config", "segment.bytes=600", "--config", "retention.bytes=600")
    produce_dups(data, "events", rounds=1)


def test_metrics_match_log_dirs_and_explain(tmp_path: Path) -> None:
    data = tmp_path / "data"
    make_dir(data)
    before = tree(data)
    families = scrape(data)
    assert tree(data) == before, "a stopped dir is only read"

    [log_dir] = json.loads(ok(data, "log-dirs", "--json"))
    assert families["kafka_log_logmanager_logdirectoryoffline"] == {(("logDirectory", f'"{log_dir["logDir"]}"'),): 0}
    for part in log_dir["partitions"]:
        topic, _, partition = part["partition"].rpartition("-")
        key = labels(topic, int(partition))
        assert families["kafka_log_log_size"][key] == part["size"] > 0
        assert families["kafka_log_log_numlogsegments"][key] == part["numLogSegments"] > 1
        assert families["kafka_log_log_logstartoffset"][key] == part["logStartOffset"]
        assert families["kafka_log_log_logendoffset"][key] == part["logEndOffset"] > 0

    explained = {p["topic"]: p for p in json.loads(ok(data, "explain", "--json"))}
    cleaning = explained["table"]["cleaning"]
    assert cleaning["reason"] == "cleanable" and cleaning["dirty_ratio"] > 0.5
    assert families["tidelog_log_cleaner_reason"] == {labels("table", reason="cleanable"): 1}
    assert families["tidelog_log_cleaner_dirty_ratio"] == {labels("table"): cleaning["dirty_ratio"]}
    assert families["kafka_log_logcleanermanager_max_dirty_percent"][()] == int(100 * cleaning["dirty_ratio"])
    assert (explained["table"]["reason"], explained["events"]["reason"]) == ("compacted", "deleting")
    assert families["tidelog_log_retention_reason"] == {labels("table", reason="compacted"): 1,
                                                        labels("events", reason="deleting"): 1}
    assert families["kafka_server_replicamanager_partitioncount"][()] == 2
    assert families["tidelog_log_recovery_complete"][()] == 1
    assert families["tidelog_log_recovery_partitions_loaded"][()] == 2


def test_a_compaction_and_retention_change_the_figures(tmp_path: Path) -> None:
    data = tmp_path / "data"
    make_dir(data)
    ok(data, "clean", "run")
    ok(data, "retention", "run")
    families = scrape(data)
    explained = {p["topic"]: p for p in json.loads(ok(data, "explain", "--json"))}
    cleaning = explained["table"]["cleaning"]
    assert cleaning["reason"] == "nothing_dirty" and cleaning["dirty_ratio"] == 0
    assert families["tidelog_log_cleaner_reason"] == {labels("table", reason="nothing_dirty"): 1}
    assert families["kafka_log_logcleanermanager_max_dirty_percent"][()] == 0
    assert explained["events"]["reason"] == "within_retention"
    assert families["tidelog_log_retention_reason"][labels("events", reason="within_retention")] == 1


def test_prefix_keeps_only_the_families_named(tmp_path: Path) -> None:
    data = tmp_path / "data"
    make_dir(data)
    families = scrape(data, "--prefix", "kafka_log_log_", "--prefix", "tidelog_log_recovery_complete")
    assert set(families) == {"kafka_log_log_size", "kafka_log_log_numlogsegments", "kafka_log_log_logendoffset",
                             "kafka_log_log_logstartoffset", "tidelog_log_recovery_complete"}


def test_a_dir_in_use_is_refused_in_one_line(tmp_path: Path) -> None:
    data = tmp_path / "data"
    make_dir(data)
    manager = LogManager.open(BrokerConfig.from_properties({}), [data])
    try:
        code, out, err = run(data, "metrics")
    finally:
        manager.shutdown()
    assert code != 0 and out == b"" and len(err.strip().splitlines()) == 1 and str(data) in err, err


def test_a_missing_dir_is_an_error_and_is_not_created(tmp_path: Path) -> None:
    data = tmp_path / "mistyped"
    code, out, err = run(data, "metrics")
    assert code != 0 and out == b"" and err.strip() == f"error: no such log dir: {data} (path='{data}')", err
    assert not data.exists()
