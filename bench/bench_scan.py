"""Benchmark of :func:`tidelog.records.scan.scan_batches`, both twins, against the memory read rate.

Data as in perf.md §1: an in-memory segment of uncompressed RecordBatch v2 batches of 1000 records,
each record a 16-byte random key and a 100-byte random value (1% tombstones), no headers; plus a
segment of 1-record batches (the per-batch overhead case) and a zstd-compressed one. The baseline
is measured in the same run: numpy summing the same segment as uint64 (the memory read rate).

Figures are medians of ``REPEATS`` runs (the pure-Python twin runs once, on a slice). Run with
``python -m bench.bench_scan [--mb 256]``; :func:`main` returns the figures as a dict.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import struct
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import cramjam
import crc32c
import numpy as np

from tidelog.records import scan
from tidelog.records.builder import encode_v2_batch
from tidelog.records.varint import zigzag_bytes

REPEATS = 5
RECORDS_PER_BATCH = 1000
KEY_SIZE = 16
VALUE_SIZE = 100
BASE_TIMESTAMP = 1_700_000_000_000

# --- test data: records encoded here, batches by tidelog's encoder ---------------------------

def _record(delta: int, key: bytes, value: bytes | None) -> tuple[bytes, int, int]:
    """A record, and where its key and value start within it."""
    head = b"\x00" + zigzag_bytes(delta) + zigzag_bytes(delta) + zigzag_bytes(len(key))
    tail = zigzag_bytes(-1) if value is None else zigzag_bytes(len(value))
    body = head + key + tail + (value or b"") + zigzag_bytes(0)
    size = zigzag_bytes(len(body))
    key_at = len(size) + len(head)
    return size + body, key_at, key_at + len(key) + len(tail)


def _batch(records: bytes, count: int, attributes: int = 0) -> bytes:
    return encode_v2_batch(
        base_offset=0, partition_leader_epoch=0, attributes=attributes, last_offset_delta=count - 1,
        base_timestamp=BASE_TIMESTAMP, max_timestamp=BASE_TIMESTAMP + count - 1, producer_id=-1,
        producer_epoch=-1, base_sequence=-1, records_count=count, records_area=records)


def _template(count: int) -> tuple[np.ndarray, np.ndarray]:
    """One batch of ``count`` records (as uint8) and a mask of its key/value bytes."""
    parts, payload, at = [], [], 61
    for i in range(count):
        value = None if i % 100 == 99 else bytes(VALUE_SIZE)
        record, key_at, value_at = _record(i, bytes(KEY_SIZE), value)
        payload.append(np.arange(at + key_at, at + key_at + KEY_SIZE))
        if value is not None:
            payload.append(np.arange(at + value_at, at + value_at + VALUE_SIZE))
        parts.append(record)
        at += len(record)
    batch = np.frombuffer(_batch(b"".join(parts), count), dtype=np.uint8)
    mask = np.zeros(len(batch), dtype=bool)
    mask[np.concatenate(payload)] = True
    return batch, mask


def make_segment(total_bytes: int, records_per_batch: int, seed: int = 7) -> np.ndarray:
    """A segment of identical-layout batches with random keys/values and consecutive offsets."""
    template, payload = _template(records_per_batch)
    n = max(1, total_bytes // len(template))
    rng = np.random.default_rng(seed)
    segment = np.tile(template, (n, 1))
    segment[:, payload] = np.frombuffer(rng.bytes(n * int(payload.sum())), np.uint8).reshape(n, -1)
    offsets = np.arange(n, dtype=">i8") * records_per_batch
    segment[:, 0:8] = offsets.view(np.uint8).reshape(n, 8)
    for row in segment:  # keep the segment valid: CRC-32C of bytes [21, end)
        row[17:21] = np.frombuffer(struct.pack(">I", crc32c.crc32c(row[21:])), np.uint8)
    return segment.reshape(-1)


def make_zstd_segment(batches: int) -> bytes:
    """Zstd batches of 1000 records with JSON-like (compressible) values."""
    rng = np.random.default_rng(11)
    out = []
    for b in range(batches):
        values = (b'{"user": %d, "event": "click", "n": %d}' % (b, i) for i in range(RECORDS_PER_BATCH))
        records = b"".join(_record(i, rng.bytes(KEY_SIZE), v)[0] for i, v in enumerate(values))
        out.append(_batch(bytes(cramjam.zstd.compress(records)), RECORDS_PER_BATCH, attributes=4))
    return b"".join(out)


# --- measuring ------------------------------------------------------------------------------

def _seconds(action: Callable[[], Any], repeats: int = REPEATS) -> tuple[float, float]:
    """(median, best) wall time of ``repeats`` runs: the best shows the rate without the noise
    of other work sharing this machine's two cores."""
    times = []
    for _ in range(repeats):
        began = time.perf_counter()
        action()
        times.append(time.perf_counter() - began)
    return statistics.median(times), min(times)


def _rate(data: Any, kernels: scan.ScanKernels, end: int | None = None,
          repeats: int = REPEATS) -> dict[str, float]:
    result = scan.scan_batches(data, 0, end, kernels=kernels)  # warm-up; also the record count
    median, best = _seconds(lambda: scan.scan_batches(data, 0, end, kernels=kernels), repeats)
    scanned = result.end_position
    return {"records": result.record_count, "bytes": scanned, "seconds": median,
            "records_per_s": result.record_count / median, "mb_per_s": scanned / median / 1e6,
            "best_records_per_s": result.record_count / best, "best_mb_per_s": scanned / best / 1e6}


def _memory_read_rate(segment: np.ndarray) -> float:
    """MB/s of numpy summing the segment as uint64 words: the memory read rate (median)."""
    words = segment[: len(segment) // 8 * 8].view(np.uint64)
    return len(words) * 8 / _seconds(lambda: words.sum())[0] / 1e6


def _cold_start_seconds() -> float:
    """A fresh process: import scan and scan one batch (numba import + loading cached kernels)."""
    tiny = _batch(_record(0, b"k", b"v")[0], 1).hex()
    code = ("import time; t = time.perf_counter(); from tidelog.records import scan; "
            f"scan.scan_batches(bytes.fromhex('{tiny}')); print(time.perf_counter() - t)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def _ratios(figures: dict[str, Any]) -> dict[str, float]:
    """The rates as ratios: to the memory read rate of the same run, and numba to pure Python."""
    big, py = figures["numba_1000_record_batches"], figures["python_1000_record_batches"]
    one, py_one = figures["numba_1_record_batches"], figures["python_1_record_batches"]
    memory = figures["memory_read_mb_per_s"]
    return {"ratio_numba_to_memory_read": big["mb_per_s"] / memory,
            "ratio_numba_best_to_memory_read": big["best_mb_per_s"] / memory,
            "ratio_numba_to_python": big["records_per_s"] / py["records_per_s"],
            "ratio_numba_to_python_1_record_batches": one["records_per_s"] / py_one["records_per_s"]}


def main(segment_mb: int = 256, pure_mb: int = 4) -> dict[str, Any]:
    """Measure and print the figures; returns them as a dict (rates, and ratios to baselines)."""
    numba_twin = scan.get_kernels(pure=False)
    python_twin = scan.get_kernels(pure=True)
    segment = make_segment(segment_mb * 1_000_000, RECORDS_PER_BATCH)
    small = make_segment(32_000_000, 1)
    zstd = make_zstd_segment(200)
    figures: dict[str, Any] = {
        "load_average_before": os.getloadavg()[0],  # other work on this machine skews the rates
        "segment_mb": len(segment) / 1e6,
        "memory_read_mb_per_s": _memory_read_rate(segment),
        "numba_1000_record_batches": _rate(segment, numba_twin),
        "numba_1_record_batches": _rate(small, numba_twin),
        "numba_zstd_1000_record_batches": _rate(zstd, numba_twin),
        "python_1000_record_batches": _rate(segment, python_twin, pure_mb * 1_000_000, 1),
        "python_1_record_batches": _rate(small, python_twin, pure_mb * 250_000, 1),
        "cold_start_seconds": _cold_start_seconds(),
    }
    figures.update(_ratios(figures))
    print(json.dumps(figures, indent=2))
    return figures


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=256, help="size of the 1000-record-batch segment")
    parser.add_argument("--pure-mb", type=int, default=4, help="slice the pure-Python twin scans")
    arguments = parser.parse_args()
    main(arguments.mb, arguments.pure_mb)
