"""Helpers of the remote-compaction tests: a tiered compacted log on a real store, the remote
tier as the broker injects it into the cleaner, and the records both tiers hold as a fresh
reader of the store sees them."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from cleaner_helpers import cleaner_config, record

from tidelog import retention
from tidelog.cleaner.clean import Cleaner, CleanerBuffers, InProcessEngine
from tidelog.cleaner.remote_clean import RemoteCleaning
from tidelog.records import iter_batches
from tidelog.remote.copy import copy_log
from tidelog.remote.metadata import RemoteFileKind, TopicIdPartition, object_key
from tidelog.remote.metadata_log import RemotePartitionMetadata
from tidelog.remote.store import RemoteStore
from tidelog.storage.log import Log
from tidelog.testing import FakeClock
from tidelog.topic_partition import TopicPartition

TP = TopicPartition("events", 0)
TIP = TopicIdPartition("Zx3vYqS2QmK0b1c2d3e4fA", TP)
BUFFERS = CleanerBuffers(dedupe_buffer_size=1 << 20, load_factor=0.9, io_buffer_size=1 << 16,
                         max_io_buffer_size=1 << 20)
Rec = tuple[int, bytes | None, bytes | None]


class Tier:
    """A partition's remote tier as the manager hands it to the cleaner (load once, then cached)."""

    def __init__(self, store: RemoteStore, clock: FakeClock) -> None:
        self.store, self.clock = store, clock
        self.metadata: RemotePartitionMetadata | None = None

    def source(self, tp: TopicPartition, log: Log, load: bool) -> tuple[RemoteStore, RemotePartitionMetadata] | None:
        if not log.config.remote_storage_enable:
            return None
        if self.metadata is None:
            if not load:
                return None
            self.metadata = RemotePartitionMetadata.load(self.store, TIP, clock=self.clock, broker_id=1,
                                                         snapshot_interval=3)
        return self.store, self.metadata

    def copy(self, log: Log) -> None:
        """One copy pass (cleanup first), the log told the highest remote offset."""
        found = self.source(TP, log, True)
        assert found is not None
        metadata = found[1]
        with metadata.task_lock:
            copy_log(log, self.store, metadata, epochs=log.leader_epoch_cache.entries, clock=self.clock)
        log.update_highest_offset_in_remote_storage(metadata.highest_offset())


def tiered_config(**overrides: Any) -> Any:
    props = {"remote_storage_enable": "true", "local_retention_ms": "0", "file_delete_delay_ms": "60000",
             "delete_retention_ms": "1000"}
    props.update(overrides)
    return cleaner_config(**props)


def open_log(dir: Path, clock: FakeClock, *, tiered: bool, **overrides: Any) -> Log:
    config = tiered_config(**overrides) if tiered else cleaner_config(
        **{"delete_retention_ms": "1000", **overrides})
    return Log.open(dir, config, clock=clock)


def append(log: Log, pairs: Sequence[tuple[int, Any]]) -> None:
    for key, value in pairs:
        log.append_as_leader(record(key, value, timestamp=log.clock.milliseconds()))
    log.update_high_watermark(log.log_end_offset)


def roll(log: Log) -> None:
    log.roll()
    log.update_high_watermark(log.log_end_offset)


def cleaner(clock: FakeClock, tier: Tier | None, buffers: CleanerBuffers = BUFFERS) -> tuple[Cleaner, RemoteCleaning | None]:
    remote = RemoteCleaning(tier.source) if tier is not None else None
    return Cleaner(InProcessEngine(buffers), clock, remote=remote), remote


def clean(log: Log, clock: FakeClock, tier: Tier | None, first_dirty: int = 0) -> int:
    """One pass from ``first_dirty`` to the active segment; the new first dirty offset."""
    c, _ = cleaner(clock, tier)
    end, _ = c.clean_pass(log, TP, first_dirty, log.active_segment.base_offset)
    return end


def clean_all(log: Log, clock: FakeClock, tier: Tier | None, buffers: CleanerBuffers) -> tuple[int, int]:
    """A whole clean (as many offset-map passes as it takes); (new first dirty offset, passes)."""
    c, _ = cleaner(clock, tier, buffers)
    end, stats = c.clean(SimpleNamespace(topic_partition=TP, log=log, first_dirty_offset=0,
                                         first_uncleanable_offset=log.active_segment.base_offset))
    return end, stats.passes


def local_retention(log: Log, clock: FakeClock) -> None:
    retention.delete_old_segments(log, clock.milliseconds())


def fresh(store: RemoteStore) -> RemotePartitionMetadata:
    return RemotePartitionMetadata.load(store, TIP)


def batch_records(data: bytes) -> list[Rec]:
    out = []
    for _, batch in iter_batches(data):
        if getattr(batch, "is_control", False):
            continue
        out.extend((r.offset, r.key, r.value) for r in batch.records())
    return out


def remote_records(store: RemoteStore, below: int | None = None) -> list[Rec]:
    """What a fresh reader of the store reads from the finished segments (below ``below``)."""
    out: list[Rec] = []
    for segment in fresh(store).finished_segments():
        out += batch_records(store.get(object_key(segment, RemoteFileKind.SEGMENT)))
    return [r for r in out if below is None or r[0] < below]


def local_records(log: Log) -> list[Rec]:
    out: list[Rec] = []
    for segment in log.segments:
        for _, batch in segment.log.batches():
            if not getattr(batch, "is_control", False):
                out.extend((r.offset, r.key, r.value) for r in batch.records())
    return out


def both_tiers(store: RemoteStore, log: Log) -> list[Rec]:
    """The remote records below the local start, then the local ones: what a consumer reads."""
    start = log.local_log_start_offset
    return remote_records(store, start) + [r for r in local_records(log) if r[0] >= start]


def segment_objects(store: RemoteStore) -> set[str]:
    """The keys every finished segment needs (a fresh reader's view)."""
    return {object_key(s, k) for s in fresh(store).finished_segments() for k in RemoteFileKind
            if not (k is RemoteFileKind.TRANSACTION_INDEX and s.txn_idx_empty)}


def stored_segment_objects(store: RemoteStore) -> set[str]:
    return {i.key for i in store.list() if "/metadata/" not in i.key}


Scenario = Callable[[Log], None]
