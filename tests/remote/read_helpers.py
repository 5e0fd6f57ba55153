"""Helpers of the remote-read tests: a log of big sealed segments copied to a store, a store
wrapper counting the bytes fetched, and the batches of a local ``.log`` for comparison."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from tidelog.records import BatchBuilder
from tidelog.records.layout import PREFIX
from tidelog.remote.copy import copy_log
from tidelog.remote.metadata import RemoteLogSegmentMetadata, TopicIdPartition
from tidelog.remote.metadata_log import RemotePartitionMetadata
from tidelog.remote.store import RemoteStore
from tidelog.storage import files
from tidelog.storage.log import Log
from tidelog.storage.log_config import LogConfig
from tidelog.testing import FakeClock

T0 = 1_700_000_000_000


def record_batch(first: int, count: int, value_bytes: int, ts: int) -> bytes:
    builder = BatchBuilder(base_offset=0)
    for i in range(count):
        builder.append(i, ts + 10 * i, f"k{first + i}".encode(), bytes([(first + i) % 251]) * value_bytes)
    return builder.build()


def tiered_log(dir: Path, store: RemoteStore, tip: TopicIdPartition, *, segments: int = 3, batches: int = 40,
               records: int = 10, value_bytes: int = 1000, clock: FakeClock | None = None
               ) -> tuple[Log, list[RemoteLogSegmentMetadata]]:
    """A log of ``segments`` sealed segments (``batches`` batches of ``records`` records each, record
    ``n``'s timestamp T0 + 10 n) plus an empty active one, every sealed segment copied to ``store``."""
    config = LogConfig(segment_bytes=1 << 30, index_interval_bytes=4096)
    log = Log.open(dir, config, clock=clock or FakeClock())
    for _ in range(segments):
        for _ in range(batches):
            n = log.log_end_offset
            log.append_as_leader(record_batch(n, records, value_bytes, T0 + 10 * n), leader_epoch=0)
        log.roll()
    log.update_high_watermark(log.log_end_offset)
    metadata = RemotePartitionMetadata.load(store, tip, clock=clock or FakeClock(), broker_id=1)
    copied = copy_log(log, store, metadata, epochs=log.leader_epoch_cache.entries)
    assert len(copied) == segments
    return log, copied


def local_batches(log: Log, base_offset: int) -> list[tuple[int, int, int, int]]:
    """``(position, size, base offset, last offset)`` of every batch of the local segment."""
    data = files.log_file(log.dir, base_offset).read_bytes()
    found, position = [], 0
    while position < len(data):
        base, length, _, _ = PREFIX.unpack_from(data, position)
        last_delta = int.from_bytes(data[position + 23:position + 27], "big", signed=True)
        found.append((position, 12 + length, base, base + last_delta))
        position += 12 + length
    return found


class CountingStore:
    """A store that counts what ranged and whole GETs fetch (bytes and calls), and may sleep per
    ``get_range`` (a slow store). Thread-safe."""

    def __init__(self, inner: RemoteStore, delay_s: float = 0.0) -> None:
        self.inner = inner
        self.uri = inner.uri
        self.delay_s = delay_s
        self._lock = threading.Lock()
        self.range_bytes = self.range_calls = self.get_bytes = self.get_calls = 0

    def get_range(self, key: str, start: int, length: int) -> bytes:
        if self.delay_s:
            time.sleep(self.delay_s)
        data = self.inner.get_range(key, start, length)
        with self._lock:
            self.range_bytes += len(data)
            self.range_calls += 1
        return data

    def get(self, key: str) -> bytes:
        data = self.inner.get(key)
        with self._lock:
            self.get_bytes += len(data)
            self.get_calls += 1
        return data

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)
