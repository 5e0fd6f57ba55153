"""Storage-engine benchmarks of issue 2: append, fetch, recovery and opening many partitions.

Every figure is set against a baseline measured in the same run, on the same bytes and in the
same directory, so the ratio says how close the engine gets to what the machine does with plain
system calls (perf.md §0 gives the machine's limits). Benchmarks are not tests: nothing here
asserts; the runner (:mod:`bench.run`) compares each figure with its issue-2 target.

| name              | figure (through tidelog)                              | baseline (same run)                         | target          |
|-------------------|-------------------------------------------------------|---------------------------------------------|-----------------|
| ``append_1000``   | MB/s of ``Log.append_as_leader`` of 1000-record batches | MB/s of ``os.write`` of the same bytes      | ratio >= 0.7    |
| ``append_1``      | appends/s of 1-record batches                         | ``os.write``/s of the same small buffers    | >= 200,000 /s   |
| ``append_1_idempotent`` | the same, each batch with a producer id and the next sequence | the same                         | none (informational) |
| ``fetch_1m``      | MB/s of ``Log.read(random offset, 1 MiB)``, warm       | MB/s of ``os.pread(1 MiB)`` at random spots  | ratio >= 0.5    |
| ``recovery``      | GB/s of ``Log.open`` after an unclean stop (index files present) | GB/s of a sequential read of the file, warm | >= 1 GB/s |
| ``recovery_no_index`` | the same with the index files deleted (still one pass: a segment rebuilt whole is not validated again) | the same | >= 1 GB/s |
| ``recovery_small_batches`` | ``recovery`` of a segment of 1-record batches; batches/s in the label | the same | none (informational) |
| ``open_partitions`` | partitions/s of ``Log.open(had_clean_shutdown=True)`` + a first ``log_end_offset`` | partitions/s of ``os.listdir`` + ``stat`` | 10k in <= 10 s (>= 1,000/s) |

Data as in perf.md §1: uncompressed v2 batches, 16-byte random keys, 100-byte random values, 1%
tombstones, no headers; a 1000-record batch is about 126 KB. Batches are built before timing
(building is not appending). Segments for the read-side benchmarks are written directly (the
benchmark batches with consecutive base offsets patched in; the base offset is outside the CRC),
so those figures do not depend on the append path's speed.

Timings are medians of ``repeats`` runs (``append_1000``: APPEND_1000_REPEATS, its runs being
short), baseline and figure alternating (:func:`alternate`). Every
recovery open starts from the same files, restored untimed from a copy saved after a warm-up open.
Run alone with ``python -m bench.bench_storage [--quick] [--only NAME]``; :func:`main` returns the
figures.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import json
import logging
import os
import pstats
import random
import shutil
import statistics
import struct
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from tidelog.records import build_batch, write_crc
from tidelog.scheduler import ThreadScheduler
from tidelog.storage import files
from tidelog.storage.config import LogConfig
from tidelog.storage.log import Log

KEY_SIZE = 16
VALUE_SIZE = 100
SEGMENT_BYTES = 1 << 30
MIB = 1 << 20
_BASE_OFFSET = struct.Struct(">q")  # bytes 0..8 of a batch; not covered by the CRC
# Partition dirs must be named <topic>-<partition>: repeats use 0.., these two the numbers below.
CALIBRATION_RUN = 1000
PROFILE_RUN = 1001


# --- what a benchmark returns ------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Target:
    """An issue-2 target: ``ratio`` compares figure/baseline, ``at_least`` the figure itself."""

    kind: Literal["ratio", "at_least"]
    value: float
    text: str

    def met(self, figure: float, ratio: float | None) -> bool | None:
        measured = ratio if self.kind == "ratio" else figure
        return None if measured is None else measured >= self.value


@dataclass(frozen=True, slots=True)
class Row:
    """One measured figure. Both figure and baseline are rates (higher is better), so
    ``ratio = figure / baseline`` reads as "fraction of what plain system calls achieve"."""

    benchmark: str
    label: str
    figure: float
    unit: str
    baseline: float | None = None
    baseline_label: str = ""
    target: Target | None = None
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def ratio(self) -> float | None:
        return None if not self.baseline else self.figure / self.baseline

    @property
    def passed(self) -> bool | None:
        return None if self.target is None else self.target.met(self.figure, self.ratio)

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out.update(ratio=self.ratio, passed=self.passed)
        return out


@dataclass(slots=True)
class Settings:
    """Sizes and repeats of one run; ``quick`` shrinks everything for a smoke run."""

    work_dir: Path
    quick: bool = False
    profile: bool = False
    profiles: dict[str, str] = field(default_factory=dict)

    def pick(self, full: Any, quick: Any) -> Any:
        return quick if self.quick else full

    @property
    def repeats(self) -> int:
        return self.pick(3, 1)


# --- timing and profiling ----------------------------------------------------------------------

def seconds_of(action: Callable[[], object]) -> float:
    began = time.perf_counter()
    action()
    return time.perf_counter() - began


def median(samples: Sequence[float]) -> float:
    return statistics.median(samples)


@contextlib.contextmanager
def timed(profiler: cProfile.Profile | None = None) -> Iterator[list[float]]:
    """Time the ``with`` body (seconds appended to the yielded list), profiling it if asked."""
    elapsed: list[float] = []
    if profiler is not None:
        profiler.enable()
    began = time.perf_counter()
    try:
        yield elapsed
    finally:
        elapsed.append(time.perf_counter() - began)
        if profiler is not None:
            profiler.disable()


def alternate(repeats: int, *measures: Callable[[int], float]) -> list[list[float]]:
    """Run every measure once per repeat (given the repeat's number), in turn: baseline and
    figure alternate, so a change in the machine's state hits both alike. Returns each
    measure's samples."""
    samples: list[list[float]] = [[] for _ in measures]
    for repeat in range(repeats):
        for own, measure in zip(samples, measures):
            own.append(measure(repeat))
    return samples


def fd_rate(path: Path, flags: int, work: Callable[[int], int]) -> float:
    """Units per second of ``work(fd)``, which returns the units it did (writes, bytes), on
    ``path`` opened with ``flags``; opening and closing are not timed."""
    fd = os.open(path, flags, 0o644)
    try:
        with timed() as elapsed:
            units = work(fd)
    finally:
        os.close(fd)
    return units / elapsed[0]


def profile_call(settings: Settings, name: str, run: Callable[[cProfile.Profile], object], top: int = 25) -> None:
    """With ``settings.profile``: run once more, the timed section under cProfile; keep its hot spots."""
    if not settings.profile:
        return
    profiler = cProfile.Profile()
    run(profiler)
    settings.profiles[name] = hot_spots(pstats.Stats(profiler), top)


def hot_spots(stats: pstats.Stats, top: int) -> str:
    """Two tables, in % of the profiled time: the ``top`` functions by own time, then tidelog's
    own functions by cumulative time (where the time goes, top-down)."""
    wall = stats.total_tt or 1e-9  # type: ignore[attr-defined]
    entries = stats.stats.items()  # type: ignore[attr-defined]
    by_own = sorted(entries, key=lambda item: item[1][2], reverse=True)[:top]
    ours = [item for item in entries if "/tidelog/" in item[0][0]]
    by_cumulative = sorted(ours, key=lambda item: item[1][3], reverse=True)[:top]
    lines = [f"profiled time of the timed section {wall:.3f} s (cProfile overhead included)"]
    for title, rows in (("by own time", by_own), ("tidelog functions by cumulative time", by_cumulative)):
        lines += ["", f"{title}:", f"{'own %':>6} {'cum %':>6} {'calls':>9}  function"]
        for (path, line, function), (_, calls, own, cumulative, _) in rows:
            lines.append(f"{100 * own / wall:6.1f} {100 * cumulative / wall:6.1f} {calls:9d}  "
                         f"{_short_path(path)}:{line}({function})")
    return "\n".join(lines)


def _short_path(path: str) -> str:
    for marker in ("/src/", "/site-packages/", "/lib/python"):
        if marker in path:
            return path.split(marker, 1)[1]
    return path


# --- data --------------------------------------------------------------------------------------

INDEX_SUFFIXES = (files.INDEX_SUFFIX, files.TIME_INDEX_SUFFIX, files.TXN_INDEX_SUFFIX)


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def build_batches(count: int, records_per_batch: int, seed: int) -> list[bytes]:
    """``count`` distinct producer batches (base offset 0, CreateTime = now), as perf.md §1."""
    rng = random.Random(seed)
    timestamp = now_ms()
    batches = []
    for _ in range(count):
        records = [(rng.randbytes(KEY_SIZE), None if i % 100 == 99 else rng.randbytes(VALUE_SIZE))
                   for i in range(records_per_batch)]
        batches.append(build_batch(records, timestamp=timestamp))
    return batches


@dataclass(frozen=True, slots=True)
class SegmentFile:
    """A ``.log`` written by :func:`write_segment`."""

    path: Path
    size: int
    batches: int


def write_segment(path: Path, pool: Sequence[bytes], records_per_batch: int, max_bytes: int) -> SegmentFile:
    """A ``.log`` of pool batches with consecutive base offsets, at most ``max_bytes`` long."""
    copies = [bytearray(batch) for batch in pool]
    size, offset, i = 0, 0, 0
    with open(path, "wb") as out:
        while size + len(copies[i % len(copies)]) <= max_bytes:
            batch = copies[i % len(copies)]
            _BASE_OFFSET.pack_into(batch, 0, offset)
            out.write(batch)
            size, offset, i = size + len(batch), offset + records_per_batch, i + 1
    return SegmentFile(path, size, i)


def warm_segment(dir: Path, pool: Sequence[bytes], records_per_batch: int, max_bytes: int) -> SegmentFile:
    """Segment 0 of ``dir`` (see :func:`write_segment`), read once so the page cache holds it."""
    segment = write_segment(files.log_file(dir, 0), pool, records_per_batch, max_bytes)
    read_file(segment.path, bytearray(MIB))
    return segment


def read_file(path: Path, buffer: bytearray) -> int:
    """Read the whole file sequentially into a reused buffer (the machine's read rate)."""
    total = 0
    with open(path, "rb", buffering=0) as f:
        while (n := f.readinto(buffer)) > 0:  # type: ignore[attr-defined]
            total += n
    return total


def copy_synced(source: Path, target: Path) -> None:
    """Copy ``source`` over ``target`` and fsync it: its pages are then clean in the page cache,
    and no writeback of them runs during a timed section that follows."""
    shutil.copyfile(source, target)
    fd = os.open(target, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def log_config() -> LogConfig:
    return LogConfig.from_props(overrides={"segment.bytes": SEGMENT_BYTES})


def remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


@contextlib.contextmanager
def scratch_dir(path: Path) -> Iterator[Path]:
    """A new directory for the ``with`` body, removed with everything in it afterwards."""
    path.mkdir()
    try:
        yield path
    finally:
        remove(path)


# --- 1. append of 1000-record batches ----------------------------------------------------------

APPEND_1000_REPEATS = 7

def bench_append_1000(settings: Settings, scheduler: ThreadScheduler) -> list[Row]:
    pool = build_batches(settings.pick(32, 4), 1000, seed=1)
    count = settings.pick(256, 8) * MIB // len(pool[0])
    work = settings.work_dir
    _append_rate(work / f"append-{CALIBRATION_RUN}", pool, len(pool), scheduler)  # warm-up
    # A run takes ~0.2 s and single runs on the VM vary by 15-20%: the median of 7, not of 3.
    raw, log_rate = alternate(settings.pick(APPEND_1000_REPEATS, settings.repeats),
                              lambda r: _raw_write_rate(work / f"raw-{r}.bin", pool, count),
                              lambda r: _append_rate(work / f"append-{r}", pool, count, scheduler))
    profile_call(settings, "append_1000",
                 lambda p: _append_rate(work / f"append-{PROFILE_RUN}", pool, count, scheduler, p))
    total = sum(len(pool[i % len(pool)]) for i in range(count))
    return [Row("append_1000", "append 1000-record batches", median(log_rate) * total / count / 1e6, "MB/s",
                median(raw) * total / count / 1e6, "os.write of the same bytes", Target("ratio", 0.7, ">= 0.7x"),
                {"batches": count, "bytes": total, "batch_bytes": len(pool[0]),
                 "log_batches_per_s": log_rate, "raw_writes_per_s": raw})]


def _raw_write_rate(path: Path, pool: Sequence[bytes], count: int) -> float:
    """Writes per second of ``count`` pool buffers to a new file (no fsync, like the log)."""
    def write_all(fd: int) -> int:
        for i in range(count):
            os.write(fd, pool[i % len(pool)])
        return count

    try:
        return fd_rate(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, write_all)
    finally:
        path.unlink()


def _append_rate(
    dir: Path, pool: Sequence[bytes], count: int, scheduler: ThreadScheduler, profiler: cProfile.Profile | None = None
) -> float:
    """Appends per second of ``count`` pool batches through a new log (open/close not timed)."""
    log = Log.open(dir, log_config(), scheduler=scheduler)
    try:
        with timed(profiler) as elapsed:
            for i in range(count):
                log.append_as_leader(pool[i % len(pool)])
    finally:
        log.close()
        remove(dir)
    return count / elapsed[0]


# --- 2. append of 1-record batches -------------------------------------------------------------

def bench_append_1(settings: Settings, scheduler: ThreadScheduler) -> list[Row]:
    pool = build_batches(1024, 1, seed=2)
    seconds = settings.pick(2.0, 0.2)
    work = settings.work_dir
    _append_rate(work / f"append-{CALIBRATION_RUN}", pool, 100, scheduler)  # warm-up
    log_count = _calibrate(lambda n: n / _append_rate(work / f"append-{CALIBRATION_RUN}", pool, n, scheduler), seconds)
    raw_count = _calibrate(lambda n: n / _raw_write_rate(work / "raw-calibration.bin", pool, n), seconds)
    raw, log_rate = alternate(settings.repeats,
                              lambda r: _raw_write_rate(work / f"raw-{r}.bin", pool, raw_count),
                              lambda r: _append_rate(work / f"append-{r}", pool, log_count, scheduler))
    profile_call(settings, "append_1", lambda p: _append_rate(work / f"append-{PROFILE_RUN}", pool, log_count, scheduler, p))
    return [Row("append_1", "append 1-record batches", median(log_rate), "appends/s",
                median(raw), "os.write of the same buffers", Target("at_least", 200_000, ">= 200,000/s"),
                {"appends": log_count, "writes": raw_count, "batch_bytes": len(pool[0]),
                 "log_appends_per_s": log_rate, "raw_writes_per_s": raw})]


# --- 2b. append of 1-record batches from an idempotent producer (informational) ------------------

_PRODUCER_ID = 1000  # an idempotent producer's id, epoch 0 (producerId, producerEpoch, baseSequence at byte 43)


def bench_append_1_idempotent(settings: Settings, scheduler: ThreadScheduler) -> list[Row]:
    """``append_1`` for what most clients send now (idempotence is on by default): every batch
    has a producer id and the next sequence, so producer state is checked and updated per append.
    Informational: issue 2's target is for ``append_1``."""
    seconds = settings.pick(2.0, 0.2)
    work = settings.work_dir
    template = build_batches(1, 1, seed=7)[0]
    _append_rate(work / f"append-{CALIBRATION_RUN}", sequenced_batches(template, 100), 100, scheduler)  # warm-up
    log_count = _calibrate(lambda n: n / _append_rate(work / f"append-{CALIBRATION_RUN}",
                                                      sequenced_batches(template, n), n, scheduler), seconds)
    pool = sequenced_batches(template, log_count)  # one producer's sequences 0..n-1: each run is a new log
    raw, log_rate = alternate(settings.repeats,
                              lambda r: _raw_write_rate(work / f"raw-{r}.bin", pool, log_count),
                              lambda r: _append_rate(work / f"append-{r}", pool, log_count, scheduler))
    profile_call(settings, "append_1_idempotent",
                 lambda p: _append_rate(work / f"append-{PROFILE_RUN}", pool, log_count, scheduler, p))
    return [Row("append_1_idempotent", "append 1-record batches, idempotent producer", median(log_rate), "appends/s",
                median(raw), "os.write of the same buffers", None,
                {"appends": log_count, "batch_bytes": len(template), "log_appends_per_s": log_rate,
                 "raw_writes_per_s": raw})]


def sequenced_batches(template: bytes, count: int) -> list[bytes]:
    """``count`` copies of the producer batch ``template`` from one idempotent producer, with
    baseSequence 0, 1, ... (their CRCs recomputed)."""
    batches = []
    for sequence in range(count):
        batch = bytearray(template)
        struct.pack_into(">qhi", batch, 43, _PRODUCER_ID, 0, sequence)
        write_crc(batch)
        batches.append(bytes(batch))
    return batches


def _calibrate(run: Callable[[int], float], seconds: float, first: int = 200) -> int:
    """A count that makes ``run(count)`` (which returns its seconds) take about ``seconds``."""
    elapsed = run(first)
    return int(min(max(first * seconds / max(elapsed, 1e-9), 1_000), 2_000_000))


# --- 3. fetch of 1 MiB from random offsets -----------------------------------------------------

def bench_fetch(settings: Settings, scheduler: ThreadScheduler) -> list[Row]:
    with scratch_dir(settings.work_dir / "fetch-0") as dir:
        return _fetch_rows(settings, dir, scheduler)


def _fetch_rows(settings: Settings, dir: Path, scheduler: ThreadScheduler) -> list[Row]:
    segment = warm_segment(dir, build_batches(settings.pick(16, 4), 1000, seed=3), 1000, settings.pick(512, 32) * MIB)
    log = Log.open(dir, log_config(), had_clean_shutdown=True, scheduler=scheduler)  # builds the indexes
    try:
        log.update_high_watermark(log.log_end_offset)
        end, reads, repeats = log.log_end_offset, settings.pick(2000, 200), settings.pick(5, 2)
        rng = random.Random(3)  # fresh offsets and positions for every repeat, drawn before its timing
        _fetch_rate(log, _draws(random.Random(33), end, 10))  # warm-up, offsets of its own
        raw, fetched = alternate(repeats, lambda _: _pread_rate(segment.path, _draws(rng, segment.size - MIB, reads)),
                                 lambda _: _fetch_rate(log, _draws(rng, end, reads)))
        profile_call(settings, "fetch_1m", lambda p: _fetch_rate(log, _draws(rng, end, reads), p))
    finally:
        log.close()
    return [Row("fetch_1m", "fetch 1 MiB at random offsets (warm)", median(fetched) / 1e6, "MB/s",
                median(raw) / 1e6, "os.pread 1 MiB at random positions", Target("ratio", 0.5, ">= 0.5x"),
                {"log_bytes": segment.size, "reads": reads, "repeats": repeats,
                 "log_bytes_per_s": fetched, "raw_bytes_per_s": raw})]


def _draws(rng: random.Random, below: int, count: int) -> list[int]:
    return [rng.randrange(below) for _ in range(count)]


def _fetch_rate(log: Log, offsets: Sequence[int], profiler: cProfile.Profile | None = None) -> float:
    """Bytes per second returned by ``Log.read(offset, 1 MiB)`` for each offset."""
    total = 0
    with timed(profiler) as elapsed:
        for offset in offsets:
            total += len(log.read(offset, MIB).records)
    return total / elapsed[0]


def _pread_rate(path: Path, positions: Sequence[int]) -> float:
    """Bytes per second of ``os.pread(1 MiB)`` at each position."""
    return fd_rate(path, os.O_RDONLY, lambda fd: sum(len(os.pread(fd, MIB, position)) for position in positions))


# --- 4. unclean recovery of the active segment -------------------------------------------------

def bench_recovery(settings: Settings, scheduler: ThreadScheduler) -> list[Row]:
    work = settings.work_dir
    with scratch_dir(work / "recovery-0") as dir, scratch_dir(work / "pristine-0") as aside:
        rows = _recovery_rows(settings, dir, aside, scheduler)
    with scratch_dir(work / "recovery-1") as dir, scratch_dir(work / "pristine-1") as aside:
        rows.append(_small_batches_row(settings, dir, aside, scheduler))
    return rows


def _recovery_rows(settings: Settings, dir: Path, aside: Path, scheduler: ThreadScheduler) -> list[Row]:
    pool = build_batches(settings.pick(16, 4), 1000, seed=4)
    segment, pristine = _recovery_setup(dir, aside, pool, 1000, settings.pick(1024, 32) * MIB, scheduler)
    raw, with_index, no_index = alternate(
        settings.repeats, lambda _: _read_seconds(segment.path),
        lambda _: _recovery_seconds(pristine, scheduler, indexes=True),
        lambda _: _recovery_seconds(pristine, scheduler, indexes=False))
    profile_call(settings, "recovery", lambda p: _recovery_seconds(pristine, scheduler, indexes=True, profiler=p))
    profile_call(settings, "recovery_no_index",
                 lambda p: _recovery_seconds(pristine, scheduler, indexes=False, profiler=p))
    size = segment.size
    raw_rate = size / median(raw) / 1e9
    details = {"segment_bytes": size, "batches": segment.batches, "raw_read_seconds": raw}
    return [
        Row("recovery", "unclean open, 1 active segment, indexes present", size / median(with_index) / 1e9, "GB/s",
            raw_rate, "sequential read of the .log (warm)", Target("at_least", 1.0, ">= 1 GB/s"),
            {**details, "open_seconds": with_index}),
        Row("recovery_no_index", "unclean open, index files deleted (one pass)", size / median(no_index) / 1e9,
            "GB/s", raw_rate, "sequential read of the .log (warm)", Target("at_least", 1.0, ">= 1 GB/s"),
            {**details, "open_seconds": no_index}),
    ]


def _small_batches_row(settings: Settings, dir: Path, aside: Path, scheduler: ThreadScheduler) -> Row:
    """Recovery's per-batch cost: the same open of a segment of 1-record batches (informational)."""
    pool = build_batches(1024, 1, seed=6)
    segment, pristine = _recovery_setup(dir, aside, pool, 1, settings.pick(64, 4) * MIB, scheduler)
    raw, opened = alternate(settings.repeats, lambda _: _read_seconds(segment.path),
                            lambda _: _recovery_seconds(pristine, scheduler, indexes=True))
    profile_call(settings, "recovery_small_batches",
                 lambda p: _recovery_seconds(pristine, scheduler, indexes=True, profiler=p))
    batches_per_s = segment.batches / median(opened)
    return Row("recovery_small_batches", f"unclean open, 1-record batches ({batches_per_s:,.0f} batches/s)",
               segment.size / median(opened) / 1e9, "GB/s", segment.size / median(raw) / 1e9,
               "sequential read of the .log (warm)", None,
               {"segment_bytes": segment.size, "batches": segment.batches, "batches_per_s": batches_per_s,
                "open_seconds": opened, "raw_read_seconds": raw})


@dataclass(frozen=True, slots=True)
class PristineCopy:
    """A partition dir as ``Log.close`` leaves it, restored before each timed open so that every
    open starts from the same files: the ``.log`` copied to ``aside``, the small files in memory."""

    dir: Path
    aside: Path
    small_files: dict[str, bytes]

    @classmethod
    def save(cls, dir: Path, aside: Path) -> PristineCopy:
        copy_synced(files.log_file(dir, 0), aside)
        names = [name for name in os.listdir(dir) if not name.endswith(files.LOG_SUFFIX)]
        return cls(dir, aside, {name: (dir / name).read_bytes() for name in names})

    def restore(self, *, indexes: bool) -> None:
        """Put the saved files back, without the index files unless ``indexes``."""
        for name in os.listdir(self.dir):
            if not name.endswith(files.LOG_SUFFIX):
                (self.dir / name).unlink()
        copy_synced(self.aside, files.log_file(self.dir, 0))
        for name, data in self.small_files.items():
            if indexes or not name.endswith(INDEX_SUFFIXES):
                (self.dir / name).write_bytes(data)


def _recovery_setup(
    dir: Path, aside: Path, pool: Sequence[bytes], records_per_batch: int, max_bytes: int, scheduler: ThreadScheduler
) -> tuple[SegmentFile, PristineCopy]:
    """Write and warm segment 0, open it once untimed (the warm-up; it also builds the index
    files, which its close trims) and save that state."""
    segment = warm_segment(dir, pool, records_per_batch, max_bytes)
    _unclean_open_seconds(dir, scheduler)
    return segment, PristineCopy.save(dir, aside / segment.path.name)


def _read_seconds(path: Path) -> float:
    buffer = bytearray(MIB)
    return seconds_of(lambda: read_file(path, buffer))


def _recovery_seconds(
    pristine: PristineCopy, scheduler: ThreadScheduler, *, indexes: bool, profiler: cProfile.Profile | None = None
) -> float:
    """Restore the saved dir (untimed; without index files unless ``indexes``), then time an
    unclean open of it."""
    pristine.restore(indexes=indexes)
    return _unclean_open_seconds(pristine.dir, scheduler, profiler)


def _unclean_open_seconds(dir: Path, scheduler: ThreadScheduler, profiler: cProfile.Profile | None = None) -> float:
    """Time ``Log.open`` after a crash (recovery point 0); closing (untimed) leaves trimmed indexes."""
    with timed(profiler) as elapsed:
        log = Log.open(dir, log_config(), had_clean_shutdown=False, recovery_point=0, scheduler=scheduler)
    log.close()
    return elapsed[0]


# --- 5. opening many partitions after a clean shutdown -----------------------------------------

def bench_open_partitions(settings: Settings, scheduler: ThreadScheduler) -> list[Row]:
    with scratch_dir(settings.work_dir / "partitions") as root:
        return _open_rows(settings, root, scheduler)


def _open_rows(settings: Settings, root: Path, scheduler: ThreadScheduler) -> list[Row]:
    count = settings.pick(10_000, 500)
    template = _template_partition(root / "template-0", scheduler)
    create_seconds = seconds_of(lambda: _copy_partitions(root, template, count))
    dirs = [root / f"bench-{i}" for i in range(count)]
    listing = [seconds_of(lambda: _list_and_stat(dirs)) for _ in range(3)]
    before = _open_fd_count()
    logs, opened = _open_all(dirs, scheduler)  # one run: 10k opens + closes are not cheap
    fds = _fds_per_log(before, _open_fd_count(), count)
    closed = seconds_of(lambda: _close_all(logs))
    profile_call(settings, "open_partitions", lambda p: _close_all(_open_all(dirs, scheduler, p)[0]))
    rate = count / opened
    return [Row("open_partitions", f"open {count:,} partitions after a clean shutdown", rate, "partitions/s",
                count / median(listing), "os.listdir + stat of every file",
                Target("at_least", 1000, "10k in <= 10 s (>= 1,000/s)"),
                {"partitions": count, "open_seconds": opened, "seconds_for_10k": 10_000 / rate,
                 "listdir_stat_seconds": listing, "create_seconds": create_seconds,
                 "close_seconds_4_threads": closed, "files_per_partition": len(template),
                 "open_fds_per_partition": fds, "fd_soft_limit": _fd_limit()})]


def _open_fd_count() -> int | None:
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:  # not Linux
        return None


def _fds_per_log(before: int | None, after: int | None, logs: int) -> float | None:
    return None if before is None or after is None else (after - before) / logs


def _fd_limit() -> int | None:
    try:
        import resource
        return resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    except (ImportError, OSError):
        return None


def _template_partition(dir: Path, scheduler: ThreadScheduler) -> dict[str, bytes]:
    """A small partition (8 appends of 10 records, ~10 KB, 2 index entries) closed cleanly."""
    log = Log.open(dir, log_config(), scheduler=scheduler)
    for batch in build_batches(8, 10, seed=5):
        log.append_as_leader(batch)
    log.close()
    template = {name: (dir / name).read_bytes() for name in os.listdir(dir)}
    remove(dir)
    return template


def _copy_partitions(root: Path, template: dict[str, bytes], count: int) -> None:
    """``count`` copies of the template (4 threads: file creation costs ~0.2-1 ms each here)."""
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda i: _copy_partition(root / f"bench-{i}", template), range(count)))


def _copy_partition(dir: Path, template: dict[str, bytes]) -> None:
    dir.mkdir()
    for name, data in template.items():
        fd = os.open(dir / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)


def _list_and_stat(dirs: Sequence[Path]) -> int:
    stats = 0
    for dir in dirs:
        for name in os.listdir(dir):
            os.stat(os.path.join(dir, name))
            stats += 1
    return stats


def _open_all(
    dirs: Sequence[Path], scheduler: ThreadScheduler, profiler: cProfile.Profile | None = None
) -> tuple[list[Log], float]:
    """Open every partition and read its log end offset (a first access: a log that deferred
    work past ``open`` pays it here), all in one timed section."""
    config = log_config()
    logs, ends = [], 0
    with timed(profiler) as elapsed:
        for dir in dirs:
            log = Log.open(dir, config, had_clean_shutdown=True, scheduler=scheduler)
            ends += log.log_end_offset
            logs.append(log)
    return logs, elapsed[0]


def _close_all(logs: Sequence[Log]) -> None:
    """Close every log, 4 at a time (a close trims index files and may rewrite a checkpoint)."""
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(Log.close, logs))


# --- registry and entry point ------------------------------------------------------------------

Benchmark = Callable[[Settings, ThreadScheduler], list[Row]]

BENCHMARKS: dict[str, tuple[str, Benchmark]] = {
    "append_1000": ("Log.append_as_leader of 1000-record batches vs os.write", bench_append_1000),
    "append_1": ("Log.append_as_leader of 1-record batches vs os.write", bench_append_1),
    "append_1_idempotent": ("append_1 from an idempotent producer (informational)", bench_append_1_idempotent),
    "fetch_1m": ("Log.read of 1 MiB at random offsets vs os.pread (warm)", bench_fetch),
    "recovery": ("Log.open after an unclean stop vs a sequential read", bench_recovery),
    "open_partitions": ("Log.open of many small partitions vs listdir + stat", bench_open_partitions),
}


def run_benchmark(name: str, settings: Settings) -> list[Row]:
    """Run one storage benchmark with its own scheduler and quiet tidelog logging."""
    logging.getLogger("tidelog").setLevel(logging.ERROR)  # recovery warnings are expected here
    scheduler = ThreadScheduler(name=f"bench-{name}")
    try:
        return BENCHMARKS[name][1](settings, scheduler)
    finally:
        scheduler.shutdown()


def main(quick: bool = False, only: Sequence[str] = (), work_dir: Path | None = None) -> dict[str, Any]:
    """Run the storage benchmarks (all, or ``only``); print and return their rows as a dict.

    Scratch data goes in ``<work_dir>/storage-<pid>`` (default ``bench/.work``), removed at the end."""
    root = (work_dir or Path(__file__).parent / ".work") / f"storage-{os.getpid()}"
    root.mkdir(parents=True)
    try:
        figures: dict[str, Any] = {}
        for name in only or BENCHMARKS:
            bench_dir = root / name
            bench_dir.mkdir()
            figures[name] = [row.to_json() for row in run_benchmark(name, Settings(bench_dir, quick))]
    finally:
        remove(root)
    json.dump(figures, sys.stdout, indent=2)
    print()
    return figures


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (smoke run)")
    parser.add_argument("--only", action="append", choices=sorted(BENCHMARKS), default=[])
    arguments = parser.parse_args()
    main(arguments.quick, arguments.only)
