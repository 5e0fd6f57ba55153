"""``remote_fetch``: issue 21's target "a consumer reading 1 GB from the remote tier through the
broker >= 0.5x of reading it from local segments".

Two topics hold the same records (16 KiB incompressible values, 64 per batch): ``tiered``, whose
sealed segments were copied to a SeaweedFS S3 server on loopback (``object_store_oracle``) and
then deleted locally (``local.retention.ms=0``, a copy pass, a retention run), and ``local``,
not tiered. ``tidelog serve`` runs in a subprocess over that data dir; a kafka-python consumer in
this process (default fetch sizes: 1 MiB per partition) reads each topic from offset 0 to the end,
the two alternating, after one warm-up read of each (the remote index cache fills then). Figures:
medians of the record bytes consumed per second. 1 GiB per topic (64 MiB with ``--quick``).
Needs weed (``make weed``); without it the row says "skipped". Run alone:
``python -m bench.bench_remote_fetch [--quick]``.
"""

from __future__ import annotations

import os
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from bench.bench_remote import skipped_row, tier_overrides, timed_rounds, weed_server
from bench.bench_storage import Row, Settings, Target, scratch_dir

MIB = 1 << 20
TOTAL_MIB = (1024, 64)  # full, quick
SEGMENT_MIB = (128, 16)
ROUNDS = (5, 5)
VALUE = 16 << 10
PER_BATCH = 64


def bench_remote_fetch(settings: Settings) -> list[Row]:
    from object_store_oracle import WeedToolMissing

    with scratch_dir(settings.work_dir / "remote-fetch") as root:
        try:
            with weed_server(root) as server:
                overrides = tier_overrides(server)
                total = settings.pick(*TOTAL_MIB) * MIB
                _write(root / "data", overrides, total, settings.pick(*SEGMENT_MIB) * MIB)
                times = _measure(root / "data", overrides, total, settings.pick(*ROUNDS))
        except WeedToolMissing as missing:
            return [skipped_row("remote_fetch", missing)]
    rate = {name: total / statistics.median(ts) / MIB for name, ts in times.items()}
    details = {"bytes_per_topic": total, **{f"{name}_seconds": [round(t, 3) for t in ts] for name, ts in times.items()}}
    label = f"kafka-python reading {total / MIB:.0f} MiB from the remote tier (SeaweedFS S3) through tidelog serve"
    return [Row("remote_fetch", label, rate["tiered"], "MiB/s", rate["local"],
                "MiB/s of the same records from local segments through the same broker",
                Target("ratio", 0.5, ">= 0.5x of reading from local segments"), details)]


def _write(data: Path, overrides: dict[str, str], total: int, segment_bytes: int) -> None:
    """Both topics with ``total`` bytes of values; ``tiered`` copied, then deleted locally."""
    from tidelog.manager import LogManager
    from tidelog.records import BatchBuilder
    from tidelog.storage.config import BrokerConfig
    from tidelog.topic_partition import TopicPartition

    manager = LogManager.open(BrokerConfig.from_properties({"log.dirs": str(data), **overrides}))
    try:
        common = {"segment.bytes": str(segment_bytes), "max.message.bytes": str(4 * MIB)}
        manager.create_topic("tiered", 1, {**common, "remote.storage.enable": "true", "local.retention.ms": "0"})
        manager.create_topic("local", 1, common)
        payload = os.urandom(VALUE * PER_BATCH)
        now = int(time.time() * 1000)
        for _ in range(total // (VALUE * PER_BATCH)):
            builder = BatchBuilder(base_offset=0)
            for i in range(PER_BATCH):
                builder.append(i, now, None, payload[i * VALUE:(i + 1) * VALUE])
            batch = builder.build()
            manager.append(TopicPartition("tiered", 0), batch)
            manager.append(TopicPartition("local", 0), batch)
        for topic in ("tiered", "local"):  # the active segments sealed too, so all of "tiered" goes remote
            manager.log(TopicPartition(topic, 0)).roll()
        manager.remote_tier.copy_pass()  # type: ignore[union-attr]
        manager.run_retention()
        tiered = manager.log(TopicPartition("tiered", 0))
        assert tiered.local_log_start_offset == tiered.log_end_offset, "every record is only in the remote tier"
    finally:
        manager.shutdown()


def _measure(data: Path, overrides: dict[str, str], total: int, rounds: int) -> dict[str, list[float]]:
    args = [sys.executable, "-m", "tidelog.cli.main", "--data-dir", str(data),
            "--override", "listeners=PLAINTEXT://127.0.0.1:0"]
    for key, value in overrides.items():
        args += ["--override", f"{key}={value}"]
    process = subprocess.Popen([*args, "serve"], stderr=subprocess.PIPE, text=True)
    try:
        bootstrap = _banner(process)
        runs: list[tuple[str, Callable[[], None]]] = [
            (topic, lambda topic=topic: _consume(bootstrap, topic, total)) for topic in ("tiered", "local")]
        return timed_rounds(runs, rounds)  # the warm-up opens connections, fills the remote index cache
    finally:
        process.terminate()
        process.wait(timeout=60)


def _banner(process: subprocess.Popen[str]) -> str:
    assert process.stderr is not None
    for line in process.stderr:
        found = re.search(r"listening on PLAINTEXT://127\.0\.0\.1:(\d+)", line)
        if found:
            import threading
            threading.Thread(target=lambda: [None for _ in process.stderr], daemon=True).start()  # type: ignore[union-attr]
            return f"127.0.0.1:{found.group(1)}"
    raise RuntimeError("tidelog serve exited before listening")


def _consume(bootstrap: str, topic: str, total: int) -> None:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False)
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek(tp, 0)
    got = 0
    try:
        while got < total:
            polled = consumer.poll(timeout_ms=30_000)
            if not polled:
                raise RuntimeError(f"{topic}: no records within 30 s after {got} bytes")
            got += sum(len(r.value) for r in polled[tp])
    finally:
        consumer.close()


BENCHMARKS: dict[str, tuple[str, Callable[[Settings], list[Row]]]] = {
    "remote_fetch": ("kafka-python reading from the remote tier (SeaweedFS S3) through tidelog serve vs "
                     "from local segments", bench_remote_fetch),
}


if __name__ == "__main__":
    quick = "--quick" in sys.argv
    work = Path(sys.argv[sys.argv.index("--work-dir") + 1]) if "--work-dir" in sys.argv else Path("bench/.work")
    work = work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    for row in bench_remote_fetch(Settings(work, quick=quick)):
        print(f"{row.benchmark}: {row.figure:.1f} {row.unit} | ratio {row.ratio} | {row.label} | {row.details}")
