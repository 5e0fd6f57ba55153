"""Helpers shared by the partition-log tests: config, crash, batch builders, readers of log and files.

Fixtures live in ``conftest.py``; this module holds the plain functions test modules import
(``from storage_helpers import batch, crash, ...``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tidelog.records import BatchBuilder, CompressionType, FileBatch, iter_batches
from tidelog.storage import files
from tidelog.storage.config import LogConfig
from tidelog.storage.fetch_info import FetchIsolation
from tidelog.storage.log import Log

T0 = 1_700_000_000_000  # FakeClock's default start, ms

MakeLog = Callable[..., Log]


def log_config(**overrides: Any) -> LogConfig:
    """A LogConfig from snake_case topic-config keywords (``segment_index_bytes=1024``)."""
    return LogConfig.from_props(overrides={name.replace("_", "."): str(value) for name, value in overrides.items()})


def crash(log: Log) -> None:
    """Release a log's descriptors and maps without writing anything, as a killed process would.

    Test seam: reaches into private fields on purpose, nothing public may do this.
    """
    log._closed = True  # pending flush tasks of this log now do nothing
    for segment in log._segments.snapshot():
        segment.release_indexes()  # unmap without trimming
        segment.log.close()
        if segment._txn_index is not None:
            segment._txn_index.close()
    for segment in log._local._retired:  # renamed .deleted, their delayed unlink pending
        segment.close_handlers()


# --- batches --------------------------------------------------------------------------------

def batch(
    *values: bytes | None,
    keys: list[bytes | None] | None = None,
    base_offset: int = 0,
    timestamp: int = T0,
    timestamps: list[int] | None = None,
    compression: int = CompressionType.NONE,
    **builder: Any,
) -> bytes:
    """One v2 batch of ``values`` (keys ``k<offset>`` unless given) at ``base_offset``."""
    if not values:
        raise ValueError("a batch needs at least one value")
    b = BatchBuilder(base_offset=base_offset, compression=compression, **builder)
    for i, value in enumerate(values):
        key = keys[i] if keys is not None else b"k%d" % (base_offset + i)
        ts = timestamps[i] if timestamps is not None else timestamp
        b.append(base_offset + i, ts, key, value)
    return b.build()


def single(ts: int = T0, value: bytes = b"test") -> bytes:
    """A one-record batch (key ``k0``) at offset 0: a leader append assigns its offset."""
    return batch(value, timestamp=ts)


def records(count: int, *, base_offset: int = 0, timestamp: int = T0, value_size: int = 10, **builder: Any) -> bytes:
    """One batch of ``count`` records with values ``v<offset>`` padded to ``value_size`` bytes."""
    values = [(b"v%d" % (base_offset + i)).ljust(value_size, b".") for i in range(count)]
    return batch(*values, base_offset=base_offset, timestamp=timestamp, **builder)


@dataclass(frozen=True, slots=True)
class Rec:
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None


def read_all(log: Log, start: int | None = None, isolation: FetchIsolation = FetchIsolation.LOG_END) -> list[Rec]:
    """Every record from ``start`` (default: log start) to the bound, read through ``Log.read``."""
    offset = log.log_start_offset if start is None else start
    out: list[Rec] = []
    while offset < log.log_end_offset:
        info = log.read(offset, 1 << 20, isolation)
        found = [b for _, b in iter_batches(info.records)]
        if not found:
            break
        for b in found:
            out.extend(Rec(r.offset, r.timestamp, r.key, r.value) for r in b.records() if r.offset >= offset)
        offset = found[-1].next_offset
    return out


@dataclass(frozen=True, slots=True)
class OnDisk:
    """A batch as found in a ``.log`` file (ground truth read from the bytes, not through the log)."""

    segment: int
    position: int
    base_offset: int
    last_offset: int
    size: int
    max_timestamp: int
    values: tuple[bytes | None, ...]


def file_batches(log_file: Path, size: int | None = None) -> list[OnDisk]:
    """Every complete batch of ``log_file``; only its first ``size`` bytes when given (the zero
    tail of a preallocated file is not data)."""
    data = log_file.read_bytes()[:size]
    base = files.offset_from_file_name(log_file.name)
    return [OnDisk(base, pos, b.base_offset, b.last_offset, b.size_in_bytes, b.max_timestamp,
                   tuple(r.value for r in b.records()))
            for pos, b in iter_batches(data)]


def log_batches(log: Log) -> list[OnDisk]:
    """:func:`file_batches` of every segment of ``log``, each up to its logical size."""
    return [found for segment in log.segments for found in file_batches(segment.log.path, segment.size)]


def batches_of(data: bytes) -> list[FileBatch]:
    return [b for _, b in iter_batches(data)]


def segment_names(dir: Path, suffix: str = ".log") -> list[str]:
    return sorted(p.name for p in dir.iterdir() if p.name.endswith(suffix))
