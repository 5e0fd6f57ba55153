"""LogManager benchmarks of issue 3: start-up over many partitions and a retention pass with
nothing to delete.

| name               | figure                                                        | baseline (same run)                             | target |
|--------------------|---------------------------------------------------------------|-------------------------------------------------|--------|
| ``manager_startup`` | partitions/s of ``LogManager.open`` after a clean shutdown    | partitions/s of bare ``Log.open`` of the same dirs | 10k in <= 10 s (>= 1,000/s) |
| (same)             | partitions/s after an unclean stop, 1 and 2 recovery threads per dir | the same baseline                        | none (informational: parallel recovery) |
| ``manager_recovery_parallel`` | partitions/s of an unclean ``LogManager.open`` of 16 partitions of 4 MiB of 1-record batches with 2 recovery processes | the same with 1 recovery thread | none (informational: the speed-up) |
| ``retention_pass`` | partitions/s of ``LogManager.run_retention()``, nothing to delete | partitions/s of ``os.stat`` of each active ``.log`` | 10k in <= 1 s (>= 10,000/s) |

The partitions are copies of one small template partition (8 batches of 10 records, ~10 KB),
created untimed; the first open adopts them into the topic registry, untimed too.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path

from bench.bench_storage import (
    Row,
    Settings,
    Target,
    _copy_partitions,
    _template_partition,
    build_batches,
    median,
    scratch_dir,
    seconds_of,
    timed,
    write_segment,
)
from tidelog.manager import LogManager
from tidelog.scheduler import ThreadScheduler
from tidelog.storage import files
from tidelog.storage.config import BrokerConfig
from tidelog.storage.log import Log
from tidelog.storage.metadata import delete_clean_shutdown


def _broker(threads: int) -> BrokerConfig:
    return BrokerConfig.from_properties({"num.recovery.threads.per.data.dir": str(threads)})


def bench_manager_startup(settings: Settings, scheduler: ThreadScheduler) -> list[Row]:
    with scratch_dir(settings.work_dir / "startup") as root:
        count = settings.pick(10_000, 500)
        log_dir = _populate(root, count, scheduler)
        LogManager.open(_broker(2), [log_dir], scheduler=scheduler).shutdown()  # adopt, untimed
        bare = [_bare_open_seconds(log_dir, scheduler) for _ in range(settings.repeats)]
        clean = [_manager_open_seconds(log_dir, 2, scheduler, clean=True) for _ in range(settings.repeats)]
        unclean = {t: _manager_open_seconds(log_dir, t, scheduler, clean=False) for t in (1, 2)}
    baseline = count / median(bare)
    rows = [Row("manager_startup", f"LogManager.open of {count:,} partitions after a clean shutdown",
                count / median(clean), "partitions/s", baseline, "bare Log.open of every partition dir",
                Target("at_least", 1000, "10k in <= 10 s (>= 1,000/s)"),
                {"partitions": count, "seconds": clean, "bare_seconds": bare,
                 "seconds_for_10k": 10_000 * median(clean) / count})]
    for threads, seconds in unclean.items():
        rows.append(Row(f"manager_startup_unclean_{threads}", f"... after an unclean stop, {threads} recovery thread(s) per dir",
                        count / seconds, "partitions/s", baseline, "bare Log.open of every partition dir",
                        None, {"partitions": count, "seconds": seconds}))
    return rows


def _populate(root: Path, count: int, scheduler: ThreadScheduler) -> Path:
    log_dir = root / "data"
    log_dir.mkdir()
    template = _template_partition(root / "template-0", scheduler)
    _copy_partitions(log_dir, template, count)
    return log_dir


def _partition_dirs(log_dir: Path) -> list[Path]:
    return sorted(p for p in log_dir.iterdir() if p.is_dir())


def _bare_open_seconds(log_dir: Path, scheduler: ThreadScheduler) -> float:
    dirs = _partition_dirs(log_dir)
    logs: list[Log] = []
    with timed() as elapsed:
        for dir in dirs:
            logs.append(Log.open(dir, had_clean_shutdown=True, scheduler=scheduler))
    for log in logs:
        log.close()
    return elapsed[0]


def _manager_open_seconds(log_dir: Path, threads: int, scheduler: ThreadScheduler, *, clean: bool) -> float:
    """Time ``LogManager.open``; the shutdown after it (untimed) leaves the dir clean again."""
    if not clean:
        delete_clean_shutdown(log_dir)
    with timed() as elapsed:
        manager = LogManager.open(_broker(threads), [log_dir], scheduler=scheduler)
    manager.shutdown()
    return elapsed[0]


def bench_recovery_parallel(settings: Settings, scheduler: ThreadScheduler) -> list[Row]:
    """Unclean start of a dir whose recovery is heavy (1-record batches), with 2 recovery
    processes against 1: the ratio is the speed-up of parallel recovery."""
    count, size = settings.pick((16, 4 << 20), (4, 1 << 20))
    with scratch_dir(settings.work_dir / "recovery") as root:
        log_dir = root / "data"
        log_dir.mkdir()
        pool = build_batches(1024, 1, seed=3)
        for i in range(count):
            (log_dir / f"heavy-{i}").mkdir()
            write_segment(log_dir / f"heavy-{i}" / "00000000000000000000.log", pool, 1, size)
        LogManager.open(_broker(1), [log_dir], scheduler=scheduler).shutdown()  # adopt, untimed
        runs = {threads: [] for threads in (1, 2)}
        for _ in range(settings.repeats):
            for threads in (1, 2):
                runs[threads].append(_manager_open_seconds(log_dir, threads, scheduler, clean=False))
    one, two = median(runs[1]), median(runs[2])
    return [Row("manager_recovery_parallel", f"unclean start, {count} partitions of {size >> 20} MiB of 1-record "
                f"batches, 2 recovery processes", count / two, "partitions/s", count / one, "1 recovery thread",
                None, {"seconds_1": runs[1], "seconds_2": runs[2]})]


def bench_retention_pass(settings: Settings, scheduler: ThreadScheduler) -> list[Row]:
    with scratch_dir(settings.work_dir / "retention") as root:
        count = settings.pick(10_000, 500)
        log_dir = _populate(root, count, scheduler)
        with LogManager.open(_broker(2), [log_dir], scheduler=scheduler) as manager:
            first = seconds_of(manager.run_retention)  # the task's first run after start-up
            passes = [seconds_of(manager.run_retention) for _ in range(settings.repeats)]
            deleted = sum(len(plan.segments) for plan in manager.run_retention())
            logs = [log for _, log in manager.logs()]
        actives = [files.log_file(log.dir, log.active_segment.base_offset) for log in logs]
        stats = [seconds_of(lambda: _stat_all(actives)) for _ in range(settings.repeats)]
    return [Row("retention_pass", f"retention pass over {count:,} partitions, nothing to delete (first pass "
                f"after start-up: {count / first:,.0f}/s)", count / median(passes), "partitions/s",
                count / median(stats), "os.stat of each active .log",
                Target("at_least", 10_000, "10k in <= 1 s (>= 10,000/s)"),
                {"partitions": count, "seconds": passes, "seconds_for_10k": 10_000 * median(passes) / count,
                 "first_pass_seconds": first, "segments_deleted": deleted})]


def _stat_all(paths: Sequence[Path]) -> int:
    return sum(os.stat(p).st_size for p in paths)


def run_benchmark(name: str, settings: Settings) -> list[Row]:
    """Run one manager benchmark with its own scheduler and quiet tidelog logging."""
    logging.getLogger("tidelog").setLevel(logging.ERROR)  # unclean-start recovery warnings are expected
    scheduler = ThreadScheduler(name=f"bench-{name}")
    try:
        return BENCHMARKS[name][1](settings, scheduler)
    finally:
        scheduler.shutdown()


BENCHMARKS = {
    "manager_startup": ("LogManager.open of many partitions, clean and unclean, vs bare Log.open", bench_manager_startup),
    "manager_recovery_parallel": ("unclean start with heavy recovery, 2 processes vs 1 thread",
                                  bench_recovery_parallel),
    "retention_pass": ("LogManager.run_retention over many partitions with nothing to delete vs os.stat", bench_retention_pass),
}
