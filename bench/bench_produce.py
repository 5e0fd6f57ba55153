"""``tidelog produce`` benchmark: JSON lines from a file into a topic, through the real CLI.

| row                     | figure                                                             | baseline (same run)                         | target |
|-------------------------|--------------------------------------------------------------------|---------------------------------------------|--------|
| ``produce_json``        | records/s of ``tidelog produce TOPIC --format json < FILE``, a new process, start-up included | records/s of ``orjson.loads`` of every line of the same file, in process | >= 200,000 records/s |
| ``produce_json_steady`` | records/s of the same produce run in process (``run_producer``), no interpreter start-up | the same baseline | none (informational) |

Data (perf.md §1): 1 M lines (``--quick``: 50 k) of ``{"key": <16 chars>, "value": <100 chars>}``,
1% tombstones (``"value": null``), keys drawn from 100 k; a topic of 4 partitions, default batch
size (200 records) and ``max.message.bytes``, no compression. The figure covers JSON parsing,
murmur2 partitioning, record and batch encoding and the log appends, plus the CLI's start-up
(interpreter, imports, loading the numba kernels from their cache, opening the manager), which
the steady row leaves out. Each repeat writes to a fresh data dir; creating the topic is not
timed. A warm-up produce, in a process and in this one, first fills numba's on-disk cache and
loads the kernels here.

Run alone: ``python -m bench.bench_produce [--quick]``.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import random
import string
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson

from bench.bench_storage import Row, Settings, Target, alternate, median, profile_call, remove, timed
from tidelog.cli.produce import ConsoleProducer, ProduceOptions, run_producer
from tidelog.manager import LogManager
from tidelog.storage.config import BrokerConfig

TOPIC = "bench"
PARTITIONS = 4
KEY_SPACE = 100_000
VALUE_SIZE = 100
TOMBSTONE_EVERY = 100
TARGET_RECORDS_PER_S = 200_000
REPO = Path(__file__).resolve().parents[1]


def write_lines(path: Path, count: int, seed: int = 1) -> int:
    """``count`` JSON lines as in the module doc; returns the file size."""
    rng = random.Random(seed)
    alphabet = string.ascii_letters + string.digits
    with path.open("wb") as out:
        for i in range(count):
            value = None if i % TOMBSTONE_EVERY == TOMBSTONE_EVERY - 1 else "".join(rng.choices(alphabet, k=VALUE_SIZE))
            out.write(orjson.dumps({"key": f"key-{rng.randrange(KEY_SPACE):012d}", "value": value}) + b"\n")
    return path.stat().st_size


def new_topic(data_dir: Path) -> None:
    remove(data_dir)
    manager = LogManager.open(BrokerConfig.from_properties({}), [data_dir])
    try:
        manager.create_topic(TOPIC, PARTITIONS)
    finally:
        manager.shutdown()


def cli_rate(data_dir: Path, source: Path, count: int) -> float:
    """Records/s of one ``tidelog produce`` process fed ``source`` on stdin (topic made untimed)."""
    new_topic(data_dir)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO / "src"), os.environ.get("PYTHONPATH")]))}
    command = [sys.executable, "-m", "tidelog.cli.main", "--data-dir", str(data_dir), "produce", TOPIC, "--format", "json"]
    with source.open("rb") as stdin, timed() as elapsed:
        result = subprocess.run(command, stdin=stdin, capture_output=True, text=True, env=env, timeout=600)
    if result.returncode != 0 or f"{count} records written" not in result.stdout:
        raise RuntimeError(f"tidelog produce failed ({result.returncode}): {result.stderr.strip()[-2000:]}")
    return count / elapsed[0]


def in_process_rate(data_dir: Path, source: Path, count: int, profiler: cProfile.Profile | None = None) -> float:
    """Records/s of ``run_producer`` in this process (manager opened and closed untimed)."""
    new_topic(data_dir)
    manager = LogManager.open(BrokerConfig.from_properties({}), [data_dir])
    try:
        producer = ConsoleProducer(manager, TOPIC, ProduceOptions(format="json"))
        with source.open("rb") as stdin, timed(profiler) as elapsed:
            run_producer(producer, stdin)
    finally:
        manager.shutdown()
    if producer.records_written != count:
        raise RuntimeError(f"wrote {producer.records_written} of {count} records")
    return count / elapsed[0]


def orjson_rate(source: Path, count: int) -> float:
    """Records/s of ``orjson.loads`` of every line of ``source`` (read line by line, warm)."""
    loads = orjson.loads
    with source.open("rb") as lines, timed() as elapsed:
        for line in lines:
            loads(line)
    return count / elapsed[0]


def bench_produce(settings: Settings) -> list[Row]:
    count = settings.pick(1_000_000, 50_000)
    work = settings.work_dir
    source = work / "records.jsonl"
    size = write_lines(source, count)
    warm = work / "warm.jsonl"
    write_lines(warm, 2_000, seed=2)
    cli_rate(work / "data-warm", warm, 2_000)  # fills numba's cache if the kernels changed
    in_process_rate(work / "data-warm", warm, 2_000)  # loads the kernels into this process
    baseline, cli, steady = alternate(
        settings.repeats,
        lambda r: orjson_rate(source, count),
        lambda r: cli_rate(work / f"data-cli-{r}", source, count),
        lambda r: in_process_rate(work / f"data-steady-{r}", source, count))
    profile_call(settings, "produce_json", lambda p: in_process_rate(work / "data-profile", source, count, p))
    details = {"records": count, "file_bytes": size, "partitions": PARTITIONS, "orjson_records_per_s": baseline,
               "cli_records_per_s": cli, "in_process_records_per_s": steady,
               "cli_startup_and_shutdown_s": median([count / c - count / s for c, s in zip(cli, steady)])}
    return [
        Row("produce_json", f"tidelog produce --format json, {count:,} lines, new process", median(cli), "records/s",
            median(baseline), "orjson.loads of each line", Target("at_least", TARGET_RECORDS_PER_S, ">= 200,000/s"),
            details),
        Row("produce_json_steady", "the same produce in process (no start-up)", median(steady), "records/s",
            median(baseline), "orjson.loads of each line", None, {"records": count}),
    ]


def main(quick: bool = False, work_dir: Path | None = None) -> dict[str, Any]:
    """Run the benchmark; print and return its rows as a dict."""
    root = (work_dir or Path(__file__).parent / ".work") / f"produce-{os.getpid()}"
    root.mkdir(parents=True)
    try:
        figures = {"produce_json": [row.to_json() for row in bench_produce(Settings(root, quick))]}
    finally:
        remove(root)
    json.dump(figures, sys.stdout, indent=2)
    print()
    return figures


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (smoke run)")
    main(parser.parse_args().quick)
