"""Benchmark of the cleaner's :class:`~tidelog.cleaner.offset_map.OffsetMap` against a Python dict.

| row                  | figure                                                          | baseline (same run)                                   | target |
|----------------------|-----------------------------------------------------------------|-------------------------------------------------------|--------|
| ``offset_map_put``   | records/s of ``put_records`` over a scan (the twin chosen at import) | records/s of ``dict(zip(keys, offsets))``, one ``bytes`` per record | none (informational) |
| ``offset_map_get``   | records/s of ``get_records`` over the same scan                 | records/s of ``list(map(d.get, keys))``               | none (informational) |
| ``offset_map_memory``| keys per MB of the map at its load factor (0.9, Kafka's default) | keys per MB of that dict: the dict, its keys and its offsets (``sys.getsizeof``) | <= 32 bytes per key (>= 31,250 keys/MB) |

Data (perf.md §1 shapes): 8 M records (``--quick``: 200 k) in uncompressed batches of 1000 records,
16-byte random keys drawn from 1 M distinct ones (``--quick``: 25 k; every key occurs at least
once), 100-byte values, 1% tombstones; offsets 0..N-1. The segment is scanned once, untimed
(bench_scan times the scan); the map is sized for the distinct keys at load factor 0.9, the size
of a cleaning round that fills it, so probes run as long as they get (the details also give the
rates with the default 128 MiB map, ``default_buffer_records_per_s``, where 1 M keys fill 18% of
its slots and probes are short, but the table outgrows the CPU caches). The baseline dict gets one
``bytes`` object per record, made untimed, as a Python cleaner reading the log would have.
Timings are medians of ``repeats`` runs, baseline and figure alternating; each put starts from an
empty map (``clear``, untimed: a fresh zero table whose pages the put commits, as in a cleaning
round) and an empty dict.

Run alone with ``python -m bench.bench_offset_map [--quick]``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from bench.bench_storage import Row, Settings, Target, alternate, median, profile_call, timed
from tidelog.cleaner.offset_map import ACTIVE_IMPLEMENTATION, OffsetMap
from tidelog.records import BatchBuilder
from tidelog.records.scan import ScanResult, scan_batches

KEY_SIZE = 16
VALUE_SIZE = 100
RECORDS_PER_BATCH = 1000
LOAD_FACTOR = 0.9  # Kafka's log.cleaner.io.buffer.load.factor default
MAX_BYTES_PER_KEY = 32  # issue 4: offset map memory <= 32 bytes per key at the load factor
DEFAULT_BUFFER = 128 << 20  # log.cleaner.dedupe.buffer.size default, one cleaner thread


# --- data -------------------------------------------------------------------------------------

def make_segment(records: int, distinct: int, seed: int = 5) -> np.ndarray:
    """Batches of 1000 records whose keys are drawn from ``distinct`` random 16-byte keys."""
    template = _template_batch()
    key_at = scan_batches(template).key_pos  # where each record's key sits in the batch
    batches = records // RECORDS_PER_BATCH
    segment = np.tile(np.frombuffer(template, np.uint8), (batches, 1))
    rng = np.random.default_rng(seed)
    pool = rng.integers(0, 256, (distinct, KEY_SIZE), dtype=np.uint8)
    which = np.concatenate([np.arange(distinct), rng.integers(0, distinct, batches * RECORDS_PER_BATCH - distinct)])
    rng.shuffle(which)
    columns = key_at[:, None] + np.arange(KEY_SIZE)  # (records per batch, key bytes)
    segment[:, columns.reshape(-1)] = pool[which].reshape(batches, -1)
    base_offsets = (np.arange(batches) * RECORDS_PER_BATCH).astype(">i8")
    segment[:, 0:8] = base_offsets.view(np.uint8).reshape(batches, 8)  # CRCs left stale: not checked
    return segment.reshape(-1)


def _template_batch() -> bytes:
    builder = BatchBuilder()
    for i in range(RECORDS_PER_BATCH):
        value = None if i % 100 == 99 else bytes(VALUE_SIZE)
        builder.append(i, 0, bytes(KEY_SIZE), value)
    return builder.build()


def key_objects(scan: ScanResult) -> list[bytes]:
    """One ``bytes`` object per record (the dict baseline's keys; all keys are 16 bytes)."""
    windows = np.lib.stride_tricks.sliding_window_view(scan.arenas[0], KEY_SIZE)
    packed = windows[scan.key_pos].tobytes()
    return [packed[i:i + KEY_SIZE] for i in range(0, len(packed), KEY_SIZE)]


def dict_bytes(d: dict[bytes, int]) -> int:
    """What ``d`` holds in memory: the dict, its keys and its values (``sys.getsizeof``)."""
    return sys.getsizeof(d) + sum(sys.getsizeof(key) + sys.getsizeof(value) for key, value in d.items())


# --- measuring --------------------------------------------------------------------------------

def map_for(distinct: int) -> OffsetMap:
    """A map that holds ``distinct`` keys at LOAD_FACTOR: a cleaning round that fills it."""
    return OffsetMap.with_slots(math.ceil(distinct / LOAD_FACTOR) + 1, LOAD_FACTOR)


def put_rate(offset_map: OffsetMap, scan: ScanResult, eligible: np.ndarray) -> float:
    offset_map.clear()
    with timed() as elapsed:
        stop = offset_map.put_records(scan, eligible)
    if stop != scan.record_count:
        raise RuntimeError(f"the map filled up at row {stop} of {scan.record_count}")
    return scan.record_count / elapsed[0]


def get_rate(offset_map: OffsetMap, scan: ScanResult) -> float:
    with timed() as elapsed:
        offset_map.get_records(scan)
    return scan.record_count / elapsed[0]


def dict_put_rate(keys: list[bytes], holder: list[dict[bytes, int]]) -> float:
    holder.clear()  # the previous dict is freed before timing
    with timed() as elapsed:
        holder.append(dict(zip(keys, range(len(keys)))))
    return len(keys) / elapsed[0]


def dict_get_rate(keys: list[bytes], d: dict[bytes, int]) -> float:
    with timed() as elapsed:
        list(map(d.get, keys))
    return len(keys) / elapsed[0]


def bench_offset_map(settings: Settings) -> list[Row]:
    records, distinct = settings.pick((8_000_000, 1_000_000), (200_000, 25_000))
    scan = scan_batches(make_segment(records, distinct))
    eligible = scan.key_len >= 0
    offset_map = map_for(distinct)
    put_rate(offset_map, scan, eligible)  # warm-ups: load (or compile) the kernels
    get_rate(offset_map, scan)
    keys, holder = key_objects(scan), []
    dict_put, put = alternate(settings.repeats, lambda r: dict_put_rate(keys, holder),
                              lambda r: put_rate(offset_map, scan, eligible))
    dict_get, get = alternate(settings.repeats, lambda r: dict_get_rate(keys, holder[0]),
                              lambda r: get_rate(offset_map, scan))
    default = OffsetMap(DEFAULT_BUFFER)
    default_put, default_get = alternate(settings.repeats, lambda r: put_rate(default, scan, eligible),
                                         lambda r: get_rate(default, scan))
    profile_call(settings, "offset_map_put", lambda p: _profiled_put(offset_map, scan, eligible, p))
    rows = _rows(offset_map, holder[0], records, (dict_put, put, dict_get, get))
    rows[0].details.update(default_buffer_records_per_s=median(default_put), default_buffer_samples=default_put)
    rows[1].details.update(default_buffer_records_per_s=median(default_get), default_buffer_samples=default_get)
    return rows


def _profiled_put(offset_map: OffsetMap, scan: ScanResult, eligible: np.ndarray, profiler: Any) -> None:
    offset_map.clear()
    with timed(profiler):
        offset_map.put_records(scan, eligible)


def _rows(offset_map: OffsetMap, d: dict[bytes, int], records: int,
          samples: tuple[list[float], ...]) -> list[Row]:
    dict_put, put, dict_get, get = samples
    keys = offset_map.size
    map_per_key = offset_map.memory_bytes / keys
    dict_per_key = dict_bytes(d) / len(d)
    details = {"records": records, "distinct_keys": keys, "dict_keys": len(d), "slots": offset_map.slots,
               "load_factor": offset_map.load_factor, "utilization": offset_map.utilization,
               "implementation": ACTIVE_IMPLEMENTATION}
    memory = {**details, "map_bytes": offset_map.memory_bytes, "map_bytes_per_key": map_per_key,
              "dict_bytes_per_key": dict_per_key, "bytes_per_entry": offset_map.bytes_per_entry}
    return [
        Row("offset_map_put", f"OffsetMap.put_records, {records:,} records / {keys:,} keys", median(put),
            "records/s", median(dict_put), "dict(zip(bytes keys, offsets))", None,
            {**details, "samples": put, "baseline_samples": dict_put}),
        Row("offset_map_get", "OffsetMap.get_records of the same scan", median(get), "records/s",
            median(dict_get), "list(map(dict.get, bytes keys))", None,
            {**details, "samples": get, "baseline_samples": dict_get}),
        Row("offset_map_memory", f"keys per MB: {map_per_key:.1f} bytes per key (dict: {dict_per_key:.0f})",
            1e6 / map_per_key, "keys/MB", 1e6 / dict_per_key, "a dict of bytes keys",
            Target("at_least", 1e6 / MAX_BYTES_PER_KEY, f"<= {MAX_BYTES_PER_KEY} bytes per key"), memory),
    ]


def main(quick: bool = False) -> dict[str, Any]:
    """Run the benchmark; print and return its rows as a dict."""
    with tempfile.TemporaryDirectory() as work:
        rows = bench_offset_map(Settings(Path(work), quick))
    figures = {row.benchmark: row.to_json() for row in rows}
    json.dump(figures, sys.stdout, indent=2)
    print()
    return figures


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (smoke run)")
    main(parser.parse_args().quick)
