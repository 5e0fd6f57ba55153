"""Helpers shared by the cleaner tests (Kafka's LogCleanerTest fixtures, our way).

* :func:`cleaner_config`: a LogConfig from snake_case keywords on top of LogCleanerTest's defaults
  (``segment.bytes=1024``, ``segment.index.bytes=1024``, ``cleanup.policy=compact``).
* :func:`record` / :func:`keyed_batch`: uncompressed v2 batches with decimal-string keys and values,
  as Kafka's ``record(k, v)``.
* :func:`keys_in_log` / :func:`offsets_in_log`: Kafka's ``keysInLog`` / ``offsetsInLog`` (only records
  with both a key and a value count; tombstones are invisible).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from tidelog.records import BatchBuilder, CompressionType
from tidelog.storage.config import LogConfig
from tidelog.storage.log import Log

T0 = 1_700_000_000_000  # FakeClock's default start, ms

MakeLog = Callable[..., Log]

DEFAULTS = {"segment.bytes": "1024", "segment.index.bytes": "1024", "cleanup.policy": "compact"}


def cleaner_config(**overrides: Any) -> LogConfig:
    props = dict(DEFAULTS)
    props.update({name.replace("_", "."): str(value) for name, value in overrides.items()})
    return LogConfig.from_props(overrides=props)


def record(key: int | bytes | None, value: int | bytes | None, *, timestamp: int = T0,
           compression: int = CompressionType.NONE, **builder: Any) -> bytes:
    """One v2 batch holding one record (offset assigned by the leader append)."""
    return keyed_batch([(key, value)], timestamp=timestamp, compression=compression, **builder)


def keyed_batch(pairs: Sequence[tuple[int | bytes | None, int | bytes | None]], *, timestamp: int = T0,
                compression: int = CompressionType.NONE, base_offset: int = 0, **builder: Any) -> bytes:
    b = BatchBuilder(base_offset=base_offset, compression=compression, **builder)
    for i, (key, value) in enumerate(pairs):
        b.append(base_offset + i, timestamp, _bytes(key), _bytes(value))
    return b.build()


def _bytes(x: int | bytes | None) -> bytes | None:
    if x is None or isinstance(x, bytes):
        return x
    return str(x).encode()


def all_records(log: Log) -> list[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of every record of every batch, control batches excluded."""
    out = []
    for segment in log.segments:
        for _, batch in segment.log.batches():
            if getattr(batch, "is_control", False):
                continue
            for r in batch.records():
                out.append((r.offset, r.key, r.value))
    return out


def keys_in_log(log: Log) -> list[int]:
    return [int(k) for _, k, v in all_records(log) if k is not None and v is not None]


def offsets_in_log(log: Log) -> list[int]:
    return [o for o, k, v in all_records(log) if k is not None and v is not None]


def crash(log: Log) -> None:
    """Release a log's descriptors and maps without writing anything, as a killed process would
    (test seam: reaches into private fields on purpose)."""
    log._closed = True
    for segment in log._segments.snapshot():
        segment.release_indexes()
        segment.log.close()
        if segment._txn_index is not None:
            segment._txn_index.close()
    for segment in log._local._retired:  # renamed .deleted, their delayed unlink pending
        segment.close_handlers()


# --- LogCleanerManagerTest's writers (added for test_plan.py / test_cleaner_manager.py) ---------

def append_records(log: Log, count: int, *, timestamp: int = T0) -> None:
    """Kafka's ``appendRecords``: one batch of ``count`` records keyed ``key-<offset>``, then the
    high watermark moves to the log end (a sole leader's)."""
    start = log.log_end_offset
    pairs = [(f"key-{o}".encode(), f"value-{o}".encode()) for o in range(start, start + count)]
    log.append_as_leader(keyed_batch(pairs, timestamp=timestamp), leader_epoch=1)
    log.update_high_watermark(log.log_end_offset)


def write_batches(log: Log, num_batches: int, records_per_batch: int, batches_per_segment: int, *,
                  timestamp: int = T0) -> None:
    """Kafka's ``writeRecords``: ``num_batches`` appends, rolling after batch i when
    i % batches_per_segment == 0, and once more at the end."""
    for i in range(num_batches):
        append_records(log, records_per_batch, timestamp=timestamp)
        if i % batches_per_segment == 0:
            log.roll()
    log.roll()


def fill_segments(log: Log, segments: int, *, timestamp: int = T0) -> None:
    """Append one-record batches (key = value = offset) until the log has ``segments`` segments
    (Kafka's ``while (log.numberOfSegments < n) log.appendAsLeader(records(...))``)."""
    while log.num_segments < segments:
        offset = log.log_end_offset
        log.append_as_leader(record(offset, offset, timestamp=timestamp))


# --- integration helpers (added for test_log_cleaner.py, test_cleaner_integration.py and the interop test) ---

NO_TIMESTAMP = -1  # Kafka's RecordBatch.NO_TIMESTAMP: what TestUtils.singletonRecords writes by default

Append = Callable[[bytes], Any]  # appends one batch as the leader, returns a LogAppendInfo


def leader_appender(log: Log) -> Append:
    """Append as the leader and move the high watermark to the log end (Kafka's integration tests
    call ``updateHighWatermark(logEndOffset)`` after every append, so the LSO never bounds them)."""
    def append(batch: bytes) -> Any:
        info = log.append_as_leader(batch)
        log.update_high_watermark(log.log_end_offset)
        return info
    return append


def write_dups(append: Append, num_keys: int, num_dups: int, counter: Iterator[int], *, start_key: int = 0,
               compression: int = CompressionType.NONE, timestamp: int = NO_TIMESTAMP) -> list[tuple[int, bytes, int]]:
    """Kafka's ``writeDups``: ``num_dups`` rounds of keys ``start_key ..`` in order, one record per
    batch, each value the next number of ``counter`` (shared across calls, as Kafka's counter is).
    Returns (key, value, offset) of every append."""
    out = []
    for _ in range(num_dups):
        for key in range(start_key, start_key + num_keys):
            value = str(next(counter)).encode()
            info = append(record(key, value, timestamp=timestamp, compression=compression))
            out.append((key, value, info.first_offset))
    return out


def latest_of(appends: Sequence[tuple[int, bytes | None, int]]) -> dict[int, tuple[bytes | None, int]]:
    """Kafka's ``toMap``: key -> (value, offset) of its last append."""
    return {key: (value, offset) for key, value, offset in appends}


def read_latest(log: Log) -> dict[int, tuple[bytes | None, int]]:
    """Kafka's ``toMap(readFromLog(log))``: key -> (value, offset) of its last record in the log."""
    return {int(k): (v, o) for o, k, v in all_records(log) if k is not None}


def dir_snapshot(path: Path) -> dict[str, bytes]:
    """Name -> bytes of every file in ``path`` (a partition dir): to show nothing changed."""
    return {p.name: p.read_bytes() for p in sorted(path.iterdir()) if p.is_file()}


def leftovers(path: Path) -> list[str]:
    """Files of an unfinished clean or swap (``.cleaned``, ``.swap``) in ``path``."""
    return sorted(p.name for p in path.iterdir() if p.name.endswith((".cleaned", ".swap")))


def wait_until(condition: Callable[[], bool], what: str, timeout_s: float = 10.0) -> None:
    """Poll ``condition`` in real time (only for tests with real threads, which run on their own)."""
    deadline = time.monotonic() + timeout_s
    pause = threading.Event()
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        pause.wait(0.005)
