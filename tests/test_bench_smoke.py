"""Smoke test of ``make bench``: ``python -m bench.run --quick`` runs every benchmark and saves them.

Benchmarks are not tests: this checks only that each one runs to the end and reports a figure and
a same-run baseline, never how fast anything is. Sizes are ``--quick`` ones (about 10-20 s with a
warm numba cache, plus about 80 s for the three benchmarks against a real Kafka broker, which
report "skipped: ..." rows where java or mvn is missing, and about 3-4 min for the Spark rows on
the standalone cluster and through a broker); scratch data, the JSON and the chart go to
a tmp dir, not to bench/.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bench.bench_kafka import CHART_NAME, PRODUCE_FETCH_ROWS, SIDE_BY_SIDE_ROWS, kafka_missing
from bench.bench_kafka_wire import PF_TARGETED_ROWS

# one xdist worker for the module: each worker would otherwise run its own quick_run (minutes each)
pytestmark = pytest.mark.xdist_group("bench_smoke")
REPO = Path(__file__).resolve().parents[1]
BENCHMARK_NAMES = {"append_1000", "append_1", "append_1_idempotent", "fetch_1m", "recovery", "open_partitions", "scan",
                   "manager_startup", "manager_recovery_parallel", "retention_pass", "produce_json",
                   "offset_map", "clean_1gb", "clean_many_keys", "kafka_cleaner", "kafka_recovery",
                   "kafka_produce_fetch", "spark_read", "spark_write", "spark_vs_kafka_connector",
                   "server_idle_connections", "server_produce_latency", "server_fetch_memory",
                   "server_partial_requests_memory", "server_decompression_memory", "remote_upload",
                   "remote_passes_10k", "remote_fetch", "spark_cluster_remote_read", "spark_cluster_remote_clean",
                   "spark_broker_write", "metrics_scrape_produce", "metrics_scrape_10k",
                   "txn_produce", "txn_produce_overhead"}
TARGETED_ROWS = {"append_1000", "append_1", "fetch_1m", "recovery", "recovery_no_index", "open_partitions",
                 "manager_startup", "retention_pass", "produce_json", "offset_map_memory", "clean_1gb",
                 "spark_read", "spark_write", "server_idle_connections", "remote_passes_10k",
                 "metrics_scrape_produce", "metrics_scrape_10k"}
INFORMATIONAL_ROWS = {"append_1_idempotent", "recovery_small_batches", "scan", "scan_vs_python", "scan_1_record", "scan_zstd",
                      "manager_startup_unclean_1", "manager_startup_unclean_2", "manager_recovery_parallel",
                      "produce_json_steady", "offset_map_put", "offset_map_get", "clean_1gb_records",
                      "clean_many_keys", "server_produce_latency", "server_fetch_memory",
                      "server_partial_requests_memory", "server_decompression_memory", *SIDE_BY_SIDE_ROWS,
                      "spark_cluster_remote_clean", "txn_produce_overhead", "txn_nontxn_produce"}  # informational; "skipped: ..." without weed or Java
# Spark's own Kafka connector: targeted where it can be resolved, a "skipped" row (no target) where not
CONNECTOR_ROW = "spark_vs_kafka_connector"
BROKER_WRITE_ROW = "spark_broker_write"
# Transactional produce vs Kafka: targeted where Java and Maven are here, a "skipped" row (no target) where not
TXN_ROW = "txn_produce"
# The remote tier's upload and reads: targeted where SeaweedFS can be built (Go), a "skipped" row where not
UPLOAD_ROW = "remote_upload"
REMOTE_FETCH_ROW = "remote_fetch"
# Spark on the two-worker cluster: targeted where weed, Java and the connector are here, "skipped" where not
CLUSTER_READ_ROW = "spark_cluster_remote_read"
KAFKA_BENCHMARKS = ("kafka_cleaner", "kafka_recovery", "kafka_produce_fetch")
# produce/fetch vs Kafka with a client that can push a broker (lean, librdkafka): targeted where Kafka runs
KAFKA_TARGETED_ROWS = set(PF_TARGETED_ROWS)


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], Path, Path]:
    tmp = tmp_path_factory.mktemp("bench")
    out, work = tmp / "results" / "latest.json", tmp / "work"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    result = subprocess.run(
        [sys.executable, "-m", "bench.run", "--quick", "--out", str(out), "--work-dir", str(work)],
        cwd=tmp, env=env, capture_output=True, text=True, timeout=1500,
    )
    return result, out, work


def test_quick_run_exits_zero_and_writes_every_benchmark(quick_run) -> None:
    result, out, _ = quick_run
    assert result.returncode == 0, result.stderr[-4000:]
    document = json.loads(out.read_text())
    assert document["quick"] is True
    if (REPO / ".git").exists():  # a checkout: the run records the commit and whether the tree had changes
        assert re.fullmatch(r"[0-9a-f]{40}", document["git"]["commit"]) and isinstance(document["git"]["dirty"], bool)
    assert set(document["benchmarks"]) == BENCHMARK_NAMES
    for name, outcome in document["benchmarks"].items():
        assert outcome["error"] is None, f"{name}: {outcome['error']}"
        assert outcome["rows"], f"{name} reported no figure"


CAN_BE_ZERO = {"server_fetch_memory"}  # peak RSS growth: none when the records go from the page cache (sendfile)


def test_quick_run_reports_figure_baseline_and_target_for_each_row(quick_run) -> None:
    _, out, _ = quick_run
    rows = [row for outcome in json.loads(out.read_text())["benchmarks"].values() for row in outcome["rows"]]
    for row in rows:
        if row["details"].get("kafka_skipped"):  # the latency row without a Kafka baseline
            assert row["figure"] > 0, row
        elif not row["details"].get("skipped"):  # only the Kafka rows, where Kafka cannot run (next test)
            assert (row["figure"] > 0 or row["benchmark"] in CAN_BE_ZERO) and row["baseline"] > 0, row
    assert sorted(row["benchmark"] for row in rows) == sorted(TARGETED_ROWS | INFORMATIONAL_ROWS | {CONNECTOR_ROW, UPLOAD_ROW,
                                                                                          REMOTE_FETCH_ROW, CLUSTER_READ_ROW,
                                                                                          BROKER_WRITE_ROW, TXN_ROW})
    targeted = {row["benchmark"]: row for row in rows if row["target"] is not None}
    optional = {row["benchmark"] for row in rows if row["benchmark"] in (CONNECTOR_ROW, UPLOAD_ROW, REMOTE_FETCH_ROW, CLUSTER_READ_ROW,
                                                              BROKER_WRITE_ROW, TXN_ROW, *KAFKA_TARGETED_ROWS)
                and not row["details"].get("skipped")}
    assert set(targeted) == TARGETED_ROWS | optional
    assert all(isinstance(row["passed"], bool) for row in targeted.values())


def test_quick_run_sets_tidelog_against_kafka_or_says_why_not(quick_run) -> None:
    _, out, _ = quick_run
    benchmarks = json.loads(out.read_text())["benchmarks"]
    rows = {row["benchmark"]: row for name in KAFKA_BENCHMARKS for row in benchmarks[name]["rows"]}
    assert set(rows) == set(SIDE_BY_SIDE_ROWS)
    chart = out.parent / CHART_NAME
    missing = kafka_missing()
    if missing is not None:
        assert all(row["label"] == f"skipped: {missing}" and row["figure"] is None for row in rows.values()), rows
        assert not chart.exists()
        return
    assert all(row["figure"] > 0 and row["baseline"] > 0 and row["ratio"] > 0 for row in rows.values()), rows
    cleaner = rows["kafka_cleaner"]["details"]
    assert 0 < cleaner["kept_records"] < cleaner["records"]  # both cleaners kept these (checked in the run)
    assert rows["kafka_recovery"]["details"]["log_end_offset"] > 0
    assert all(rows[name]["details"]["records"] > 0 for name in PRODUCE_FETCH_ROWS)  # same records both sides
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_kafka_benchmarks_report_skipped_without_java(tmp_path: Path) -> None:
    out = tmp_path / "results" / "latest.json"
    env = {**os.environ, "PATH": str(tmp_path), "PYTHONPATH": str(REPO)}  # no java, no mvn, no git
    only = [item for name in KAFKA_BENCHMARKS for item in ("--only", name)]
    result = subprocess.run([sys.executable, "-m", "bench.run", "--quick", *only, "--out", str(out),
                             "--work-dir", str(tmp_path / "work")],
                            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-4000:]
    benchmarks = json.loads(out.read_text())["benchmarks"]
    rows = [row for outcome in benchmarks.values() for row in outcome["rows"]]
    assert sorted(row["benchmark"] for row in rows) == sorted(SIDE_BY_SIDE_ROWS)
    assert all(row["label"].startswith("skipped: no `java` on PATH") and row["figure"] is None for row in rows)
    assert "skipped: no `java` on PATH" in result.stdout
    assert not (out.parent / CHART_NAME).exists()


def test_quick_run_removes_its_scratch_data(quick_run) -> None:
    _, _, work = quick_run
    assert not work.exists() or not any(work.iterdir())


def test_list_names_every_benchmark() -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    result = subprocess.run([sys.executable, "-m", "bench.run", "--list"], cwd=REPO, env=env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert {line.split()[0] for line in result.stdout.splitlines() if line.strip()} == BENCHMARK_NAMES


def test_unknown_benchmark_name_is_rejected() -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    result = subprocess.run([sys.executable, "-m", "bench.run", "--only", "nope"], cwd=REPO, env=env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "unknown benchmark(s) nope" in result.stderr
