"""``make bench``: run every benchmark, print a table of ratios to same-run baselines, save JSON.

Usage::

    python -m bench.run                      # everything, full sizes (9-10 minutes, half of it vs Kafka)
    python -m bench.run --quick              # small sizes: a smoke run of every benchmark (about 1.5 min)
    python -m bench.run --only append_1000 --only fetch_1m --profile   # cProfile hot spots too
    python -m bench.run --list               # the benchmark names

Each benchmark yields rows of (figure, baseline, ratio, target). Figures and baselines are both
rates, so ``ratio = figure / baseline``; a target is either on the ratio or on the figure itself
(issue 2). A missed target is reported, never an error: benchmarks are not tests. The exit status
is 1 only when a benchmark crashed (its traceback is in the JSON and on stderr).

Results go to ``bench/results/latest.json`` (``--out``), with ``kafka_side_by_side.png`` next to it
when a benchmark against Kafka ran (``bench/bench_kafka.py``); scratch data to ``bench/.work/run-<pid>``
(``--work-dir DIR``: ``DIR/run-<pid>``), removed at the end. What each benchmark measures: ``bench/README.md``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import os
import platform
import shutil
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from bench import (
    bench_cleaner, bench_kafka, bench_manager, bench_memory, bench_metrics, bench_offset_map, bench_produce,
    bench_remote, bench_remote_fetch, bench_remote_passes, bench_server, bench_spark, bench_spark_cluster,
    bench_spark_cluster_clean, bench_storage, bench_txn,
)
from bench.bench_storage import Row, Settings

BENCH_DIR = Path(__file__).resolve().parent
DEFAULT_OUT = BENCH_DIR / "results" / "latest.json"
BUSY_LOAD = 1.0  # 1-minute load average above which the run is flagged as noisy


@dataclass(slots=True)
class Outcome:
    """What one benchmark produced: rows, or the traceback of its crash."""

    name: str
    seconds: float = 0.0
    rows: list[Row] = field(default_factory=list)
    error: str | None = None
    profiles: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"seconds": self.seconds, "error": self.error, "profiles": self.profiles,
                "rows": [_finite(row.to_json()) for row in self.rows]}


# --- the scan benchmark (bench/bench_scan.py, another module's entry point) --------------------

QUICK_SCAN_BYTES = 8_000_000
QUICK_ZSTD_BATCHES = 20


def run_scan(settings: Settings) -> list[Row]:
    """Call ``bench_scan.main`` (its own JSON printout silenced) and turn its dict into rows.

    Adaptations, made here and undone after the call: the cold-start probe may fail without
    losing the other figures; with ``--quick`` the fixed-size inputs of ``main`` (a 32 MB segment
    of 1-record batches, 200 zstd batches built in pure Python: ~5 s) are capped and the probe
    (a subprocess) is skipped.
    """
    from bench import bench_scan

    errors: list[str] = []
    replacements: dict[str, Any] = {"_cold_start_seconds": _tolerant(bench_scan._cold_start_seconds, errors)}
    if settings.quick:
        make_segment, make_zstd_segment = bench_scan.make_segment, bench_scan.make_zstd_segment
        replacements = {
            "_cold_start_seconds": lambda: math.nan,
            "make_segment": lambda size, per_batch: make_segment(min(size, QUICK_SCAN_BYTES), per_batch),
            "make_zstd_segment": lambda batches: make_zstd_segment(min(batches, QUICK_ZSTD_BATCHES)),
        }
    segment_mb, pure_mb = settings.pick((256, 4), (8, 1))
    with _patched(bench_scan, replacements), contextlib.redirect_stdout(io.StringIO()):
        figures = bench_scan.main(segment_mb, pure_mb)
    return scan_rows(figures, errors)


@contextlib.contextmanager
def _patched(module: Any, replacements: dict[str, Any]) -> Iterator[None]:
    """Replace module attributes for the ``with`` body."""
    originals = {name: getattr(module, name) for name in replacements}
    for name, value in replacements.items():
        setattr(module, name, value)
    try:
        yield
    finally:
        for name, value in originals.items():
            setattr(module, name, value)


def _tolerant(probe: Callable[[], float], errors: list[str]) -> Callable[[], float]:
    """bench_scan's cold-start probe runs a subprocess; if it fails, record why and return NaN."""
    def tolerant() -> float:
        try:
            return probe()
        except subprocess.CalledProcessError as e:
            lines = (e.stderr or "").strip().splitlines()
            errors.append(lines[-1] if lines else str(e))
            return math.nan
    return tolerant


def scan_rows(figures: dict[str, Any], cold_start_error: list[str]) -> list[Row]:
    big, small = figures["numba_1000_record_batches"], figures["numba_1_record_batches"]
    zstd, python = figures["numba_zstd_1000_record_batches"], figures["python_1000_record_batches"]
    cold = {"cold_start_seconds": figures.get("cold_start_seconds"), "cold_start_error": cold_start_error or None}
    return [
        Row("scan", "scan 1000-record batches (numba)", big["mb_per_s"], "MB/s",
            figures["memory_read_mb_per_s"], "numpy sum of the segment (memory read)", None,
            {**big, "segment_mb": figures["segment_mb"], **cold}),
        Row("scan_vs_python", "scan 1000-record batches (numba)", big["records_per_s"], "records/s",
            python["records_per_s"], "pure-Python twin", None, python),
        Row("scan_1_record", "scan 1-record batches (numba)", small["records_per_s"], "records/s",
            figures["python_1_record_batches"]["records_per_s"], "pure-Python twin", None, small),
        Row("scan_zstd", "scan zstd 1000-record batches (numba)", zstd["records_per_s"], "records/s",
            big["records_per_s"], "numba, uncompressed", None, zstd),
    ]


# --- registry ----------------------------------------------------------------------------------

Runner = Callable[[Settings], list[Row]]


def _storage(name: str) -> Runner:
    return lambda settings: bench_storage.run_benchmark(name, settings)


BENCHMARKS: dict[str, tuple[str, Runner]] = {
    **{name: (description, _storage(name)) for name, (description, _) in bench_storage.BENCHMARKS.items()},
    "scan": ("records.scan kernels (bench/bench_scan.py) vs memory read and the pure twin", run_scan),
    **{name: (description, (lambda n: lambda settings: bench_manager.run_benchmark(n, settings))(name))
       for name, (description, _) in bench_manager.BENCHMARKS.items()},
    "produce_json": ("tidelog produce of JSON lines through the CLI vs orjson.loads of the same lines",
                     bench_produce.bench_produce),
    "offset_map": ("cleaner OffsetMap put/get over a scan vs a dict of bytes keys, and memory per key",
                   bench_offset_map.bench_offset_map),
    **{name: (description, (lambda n: lambda settings: bench_cleaner.run_benchmark(n, settings))(name))
       for name, (description, _) in bench_cleaner.BENCHMARKS.items()},
    **{name: (description, (lambda n: lambda settings: bench_kafka.run_benchmark(n, settings))(name))
       for name, (description, _) in bench_kafka.BENCHMARKS.items()},
    **bench_server.BENCHMARKS,
    **bench_metrics.BENCHMARKS,
    **bench_txn.BENCHMARKS,
    **bench_memory.BENCHMARKS,
    **bench_spark.BENCHMARKS,
    **bench_remote.BENCHMARKS,
    **bench_remote_passes.BENCHMARKS,
    **bench_remote_fetch.BENCHMARKS,
    **bench_spark_cluster.BENCHMARKS,  # last: it stops the local Spark session the spark rows share
    **bench_spark_cluster_clean.BENCHMARKS,  # its own cluster and SparkContext, after the local session stopped
}


def run_one(name: str, settings: Settings) -> Outcome:
    outcome = Outcome(name)
    began = time.perf_counter()
    try:
        outcome.rows = BENCHMARKS[name][1](settings)
    except Exception:  # noqa: BLE001 - one broken benchmark must not hide the others
        outcome.error = traceback.format_exc()
        print(f"benchmark {name} failed:\n{outcome.error}", file=sys.stderr)
    outcome.seconds = time.perf_counter() - began
    outcome.profiles = dict(settings.profiles)
    return outcome


# --- output ------------------------------------------------------------------------------------

def format_rate(value: float | None, unit: str) -> str:
    if value is None or not math.isfinite(value):
        return "—"
    if unit == "GB/s":
        return f"{value:.2f} {unit}"
    if value < 100:
        return f"{value:.1f} {unit}"
    return f"{value:,.0f} {unit}"


def render(outcomes: Sequence[Outcome], quick: bool, console: Console) -> None:
    title = "tidelog benchmarks" + (" (--quick: small sizes, targets are for full runs)" if quick else "")
    table = Table(title=title, show_lines=True)
    for column, justify in (("benchmark", "left"), ("figure", "right"), ("baseline (same run)", "right"),
                            ("ratio", "right"), ("target", "left"), ("result", "center")):
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    for outcome in outcomes:
        if outcome.error is not None:
            last = outcome.error.strip().splitlines()[-1]
            table.add_row(outcome.name, "—", "—", "—", "—", f"[bold red]ERROR[/]\n{last}")
        for row in outcome.rows:
            table.add_row(*_cells(row))
    console.print(table)


def _cells(row: Row) -> tuple[str, ...]:
    ratio = "—" if row.ratio is None else f"{row.ratio:.3g}x"
    result = {True: "[bold green]PASS[/]", False: "[bold red]FAIL[/]", None: "[dim]info[/]"}[row.passed]
    baseline = format_rate(row.baseline, row.unit) + (f"\n[dim]{row.baseline_label}[/]" if row.baseline_label else "")
    return (f"{row.benchmark}\n[dim]{row.label}[/]", format_rate(row.figure, row.unit), baseline, ratio,
            row.target.text if row.target else "—", result)


def render_profiles(outcomes: Sequence[Outcome], console: Console) -> None:
    for outcome in outcomes:
        for name, text in outcome.profiles.items():
            console.rule(f"cProfile: {name} (top functions by own time)")
            console.print(text, markup=False, highlight=False)


def load_average() -> float | None:
    """The 1-minute load average (None where the OS has none): above ~1 on this 2-core box,
    something else is running and the figures are noisy."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


def write_results(path: Path, outcomes: Sequence[Outcome], quick: bool, seconds: float, load_before: float | None) -> None:
    """Write the JSON atomically (``<path>.tmp`` then rename)."""
    document = {
        "finished": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "quick": quick,
        "seconds": seconds,
        "machine": {"python": platform.python_version(), "platform": platform.platform(), "cpus": os.cpu_count(),
                    "load_average_before": load_before, "load_average_after": load_average()},
        "git": _git_state(),
        "benchmarks": {outcome.name: outcome.to_json() for outcome in outcomes},
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(json.dumps(document, indent=2) + "\n")
    os.replace(temporary, path)


def _git_state() -> dict[str, Any]:
    """The commit benchmarked and whether the tree had local changes (read-only git calls)."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=BENCH_DIR, capture_output=True, text=True, timeout=30).stdout.strip()
    try:
        status = git("--no-optional-locks", "status", "--porcelain", "--untracked-files=no")  # never takes index.lock
        return {"commit": git("rev-parse", "HEAD") or None, "dirty": bool(status)}
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}


def _finite(value: Any) -> Any:
    """JSON has no NaN/inf: turn them into null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


# --- entry point -------------------------------------------------------------------------------

def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke run of every benchmark")
    parser.add_argument("--only", action="append", default=[], metavar="NAME",
                        help="run only this benchmark (repeatable, or comma-separated); see --list")
    parser.add_argument("--profile", action="store_true",
                        help="also run each measured action once under cProfile and print its hot spots")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"results JSON (default {DEFAULT_OUT})")
    parser.add_argument("--work-dir", type=Path,
                        help="scratch data goes in <DIR>/run-<pid>, removed at the end (default DIR: bench/.work)")
    parser.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    arguments = parser.parse_args(argv)
    arguments.only = [name.strip() for item in arguments.only for name in item.split(",") if name.strip()]
    unknown = sorted(set(arguments.only) - BENCHMARKS.keys())
    if unknown:
        parser.error(f"unknown benchmark(s) {', '.join(unknown)}; choose from {', '.join(BENCHMARKS)}")
    return arguments


def main(argv: Sequence[str] | None = None) -> int:
    arguments = parse_args(argv)
    console = Console(width=None if sys.stdout.isatty() else 150)
    if arguments.list:
        for name, (description, _) in BENCHMARKS.items():
            console.print(f"{name:16} {description}", highlight=False)
        return 0
    work = ((arguments.work_dir or BENCH_DIR / ".work") / f"run-{os.getpid()}").resolve()
    names = [name for name in BENCHMARKS if not arguments.only or name in arguments.only]
    began, load_before = time.perf_counter(), load_average()
    outcomes = _run_all(names, work, arguments.quick, arguments.profile, console)
    write_results(arguments.out, outcomes, arguments.quick, time.perf_counter() - began, load_before)
    rows = [row for outcome in outcomes for row in outcome.rows]
    chart = bench_kafka.write_chart(rows, arguments.out.parent / bench_kafka.CHART_NAME, quick=arguments.quick,
                                    load=load_before)
    render(outcomes, arguments.quick, console)
    render_profiles(outcomes, console)
    if load_before is not None and load_before > BUSY_LOAD:
        console.print(f"[yellow]note: load average was {load_before:.1f} when the run started: other work "
                      f"shared the CPUs, so these figures are noisy[/]")
    if chart is not None:
        console.print(f"chart of the side-by-side figures vs Kafka: {chart}", highlight=False)
    console.print(f"results: {arguments.out}  ({time.perf_counter() - began:.1f} s)", highlight=False)
    return 1 if any(outcome.error for outcome in outcomes) else 0


def _run_all(names: Sequence[str], work: Path, quick: bool, profile: bool, console: Console) -> list[Outcome]:
    outcomes = []
    try:
        for name in names:
            bench_dir = work / name
            bench_dir.mkdir(parents=True)
            with console.status(f"running {name} ..."):
                outcome = run_one(name, Settings(bench_dir, quick=quick, profile=profile))
            console.print(f"  {name}: {outcome.seconds:.1f} s" + (" [red]ERROR[/]" if outcome.error else ""))
            outcomes.append(outcome)
            shutil.rmtree(bench_dir, ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return outcomes


if __name__ == "__main__":
    sys.exit(main())
