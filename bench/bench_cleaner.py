"""Log cleaner benchmarks of issue 4: one cleaner thread end to end, and a dirty range with far
more distinct keys than the offset map holds.

| name | figure | baseline (same run) | target |
|------|--------|---------------------|--------|
| ``clean_1gb`` | MB/s of ``Cleaner.clean`` (offset map, rewrite, swap) over a 1 GB dirty log of 8 M records, 1 M keys, 16-byte keys, 110-byte values, uncompressed | MB/s of copying the same segment files (read + write, ``shutil.copyfile``) | >= 250 MB/s |
| ``clean_1gb_records`` | records/s of the same clean | records/s of the same copy (records in the bytes copied) | none (informational) |
| ``clean_many_keys`` | MB/s of cleaning 50 M distinct keys with a 128 MiB dedupe buffer (about 10 offset-map passes), peak RSS growth in the details | MB/s of the same copy | finishes within the map's memory (informational rate) |

``clean_1gb`` cleans with one engine (offset map and buffers), as one cleaner thread does: a first,
untimed clean warms it, then two timed ones (median); each copy of the log is synced before timing.
The log is generated untimed: one template batch of 32 records is built by ``BatchBuilder``, then
every batch is that records area with its keys replaced (drawn uniformly from the key set) and a
fresh header and CRC. ``--quick`` sizes: 40 MB / 1 M records / 40 k keys, and 400 k keys with a
1 MiB map.
"""

from __future__ import annotations

import logging
import os
import resource
import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from bench.bench_storage import Row, Settings, Target, median, scratch_dir, seconds_of
from tidelog.cleaner.clean import Cleaner, CleanerBuffers, InProcessEngine
from tidelog.cleaner.plan import log_to_clean
from tidelog.records import BatchBuilder
from tidelog.records.builder import encode_v2_batch
from tidelog.records.scan import scan_batches
from tidelog.scheduler import ThreadScheduler
from tidelog.storage.config import LogConfig
from tidelog.storage.log import Log

MB = 1_000_000
RECORDS_PER_BATCH = 32
KEY_SIZE = 16
TARGET_MB_PER_S = 250.0
T0 = 1_700_000_000_000


def _template(value_size: int) -> tuple[bytes, np.ndarray]:
    """The records area of a 32-record batch and the positions of its keys in that area."""
    builder = BatchBuilder(base_offset=0)
    for i in range(RECORDS_PER_BATCH):
        builder.append(i, T0, bytes(KEY_SIZE), b"v" * value_size)
    batch = builder.build()
    scan = scan_batches(batch)
    return batch[61:], scan.key_pos.astype(np.int64) - 61


def generate_log(dir: Path, records: int, keys: int, value_size: int, segment_bytes: int, seed: int = 7) -> Log:
    """A compacted log of ``records`` records over ``keys`` distinct keys, every segment sealed."""
    area, key_pos = _template(value_size)
    rng = np.random.default_rng(seed)
    key_set = rng.integers(0, 255, size=(keys, KEY_SIZE), dtype=np.uint8)
    if keys <= records:  # every key used at least once
        key_set[:, :8] = np.arange(keys, dtype=">u8").view(np.uint8).reshape(keys, 8)
    config = LogConfig.from_props(overrides={"cleanup.policy": "compact", "segment.bytes": str(segment_bytes),
                                             "min.cleanable.dirty.ratio": "0.01"})
    scheduler = ThreadScheduler(name="bench-cleaner-generate")
    log = Log.open(dir, config, scheduler=scheduler)
    offset = 0
    per_chunk = max(1, min(4096, segment_bytes // (4 * (61 + len(area)))))  # batches per append
    template = np.frombuffer(area, dtype=np.uint8)
    columns = key_pos[:, None] + np.arange(KEY_SIZE)[None, :]
    for chunk in _chunks(records // RECORDS_PER_BATCH, per_chunk):
        draws = rng.integers(0, keys, size=(chunk, RECORDS_PER_BATCH)) if keys < records else \
            (np.arange(offset, offset + chunk * RECORDS_PER_BATCH) % keys).reshape(chunk, RECORDS_PER_BATCH)
        areas = np.broadcast_to(template, (chunk, len(template))).copy()
        areas[:, columns] = key_set[draws]
        batches = []
        for b in range(chunk):
            batches.append(encode_v2_batch(
                base_offset=offset, partition_leader_epoch=0, attributes=0,
                last_offset_delta=RECORDS_PER_BATCH - 1, base_timestamp=T0, max_timestamp=T0,
                producer_id=-1, producer_epoch=-1, base_sequence=-1, records_count=RECORDS_PER_BATCH,
                records_area=areas[b].tobytes()))
            offset += RECORDS_PER_BATCH
        log.append_as_follower(b"".join(batches))
    log.roll()
    log.update_high_watermark(log.log_end_offset)
    log.flush()
    log.close()
    scheduler.shutdown()
    return log


def _chunks(total: int, size: int) -> Iterator[int]:
    while total > 0:
        yield min(size, total)
        total -= size


def _copy_seconds(source: Path, target: Path) -> float:
    def copy() -> None:
        target.mkdir()
        for path in sorted(source.glob("*.log")):
            shutil.copyfile(path, target / path.name)
    seconds = seconds_of(copy)
    shutil.rmtree(target)
    return seconds


def _engine(dedupe_bytes: int, io_buffer_size: int = 262_144) -> InProcessEngine:
    return InProcessEngine(CleanerBuffers(dedupe_buffer_size=dedupe_bytes, load_factor=0.9,
                                          io_buffer_size=io_buffer_size, max_io_buffer_size=1_048_588))


def _clean_seconds(template: Path, work: Path, dedupe_bytes: int, io_buffer_size: int = 262_144,
                   engine: InProcessEngine | None = None) -> tuple[float, dict[str, float]]:
    """Copy the template log (untimed), open it, clean it once, timed; with ``engine`` (its offset
    map and buffers) reused from an earlier clean, as a cleaner thread reuses its own."""
    shutil.copytree(template, work)
    os.sync()  # the copy's writeback is set-up, not cleaning (bench_kafka does the same for both engines)
    scheduler = ThreadScheduler(name="bench-cleaner")
    log = Log.open(work, _config_of(template), had_clean_shutdown=True, scheduler=scheduler)
    try:
        dirty = sum(s.size for s in log.segments[:-1])
        to_clean = log_to_clean(log.topic_partition, log, None, T0 + 1000)
        cleaner = Cleaner(engine if engine is not None else _engine(dedupe_bytes, io_buffer_size), log.clock)
        rss_before = _max_rss()
        seconds = seconds_of(lambda: cleaner.clean(to_clean))
        details = {"dirty_bytes": float(dirty), "size_after": float(log.size),
                   "max_rss_growth_bytes": float(_max_rss() - rss_before),
                   "map_bytes": float(cleaner.engine.offset_map.memory_bytes)}
        return seconds, details
    finally:
        log.close()
        scheduler.shutdown()
        shutil.rmtree(work)


def _config_of(template: Path) -> LogConfig:
    segment_bytes = (template / "segment.bytes").read_text()
    return LogConfig.from_props(overrides={"cleanup.policy": "compact", "segment.bytes": segment_bytes})


def _max_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _prepare(root: Path, name: str, records: int, keys: int, value_size: int, segment_bytes: int) -> tuple[Path, int]:
    template = root / f"{name}-0"
    generate_log(template, records, keys, value_size, segment_bytes)
    (template / "segment.bytes").write_text(str(segment_bytes))
    size = sum(p.stat().st_size for p in template.glob("*.log"))
    return template, size


def bench_clean(settings: Settings) -> list[Row]:
    records = settings.pick(8_000_000, 320_000)
    keys = settings.pick(1_000_000, 40_000)
    with scratch_dir(settings.work_dir / "cleaner") as root:
        template, size = _prepare(root, "dirty", records, keys, 110, settings.pick(128 * 1024 * 1024, 4 * 1024 * 1024))
        # one engine, as one cleaner thread: its offset map is allocated once and warmed by a first,
        # untimed clean (Kafka's cleaner thread likewise allocates its map once; bench_kafka does the same)
        engine = _engine(128 * 1024 * 1024)
        runs = [_clean_seconds(template, root / f"work-{i}", 128 * 1024 * 1024, engine=engine)
                for i in range(settings.pick(3, 1))][settings.pick(1, 0):]
        copies = [_copy_seconds(template, root / f"copy-{i}") for i in range(settings.pick(2, 1))]
    clean_s, copy_s = median([r[0] for r in runs]), median(copies)
    details = {"records": records, "keys": keys, "log_bytes": size, "clean_seconds": [r[0] for r in runs],
               "copy_seconds": copies, **runs[0][1]}
    return [
        Row("clean_1gb", f"Cleaner.clean of {size / MB:,.0f} MB, {records:,} records, {keys:,} keys, one thread",
            size / MB / clean_s, "MB/s", size / MB / copy_s, "shutil.copyfile of the same .log files",
            Target("at_least", TARGET_MB_PER_S, ">= 250 MB/s"), details),
        Row("clean_1gb_records", "the same clean in records/s", records / clean_s, "records/s",
            records / copy_s, "records in the bytes copied per second", None, {}),
    ]


def bench_many_keys(settings: Settings) -> list[Row]:
    keys = settings.pick(50_000_000, 400_000)
    dedupe = settings.pick(128 * 1024 * 1024, 1024 * 1024)
    with scratch_dir(settings.work_dir / "cleaner-keys") as root:
        template, size = _prepare(root, "keys", keys, keys, 8, settings.pick(256 * 1024 * 1024, 4 * 1024 * 1024))
        seconds, details = _clean_seconds(template, root / "work-0", dedupe)
        copy_s = _copy_seconds(template, root / "copy-0")
    details.update(keys=keys, dedupe_buffer_size=dedupe, log_bytes=size, seconds=seconds)
    return [Row("clean_many_keys", f"clean {keys:,} distinct keys with a {dedupe // (1024 * 1024)} MiB dedupe buffer",
                size / MB / seconds, "MB/s", size / MB / copy_s, "shutil.copyfile of the same .log files", None,
                details)]


def run_benchmark(name: str, settings: Settings) -> list[Row]:
    logging.getLogger("tidelog").setLevel(logging.WARNING)
    return BENCHMARKS[name][1](settings)


BENCHMARKS = {
    "clean_1gb": ("one cleaner thread over a 1 GB dirty log (8 M records, 1 M keys) vs copying the files", bench_clean),
    "clean_many_keys": ("50 M distinct keys through a 128 MiB offset map, in passes, vs copying the files",
                        bench_many_keys),
}
