"""What the LogManager reports: partitions, set-aside dirs, topics and log dirs (frozen values)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from tidelog.manager.log_dir_failure import OfflineLogDir
from tidelog.storage.file_slice import FileSlice
from tidelog.topic_partition import TopicPartition


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    """One live partition: where it lives and its offsets and size."""

    topic_partition: TopicPartition
    log_dir: Path
    log_start_offset: int
    high_watermark: int
    log_end_offset: int
    recovery_point: int
    size: int
    segments: int


class PartitionOffsets(NamedTuple):
    """A live partition's offsets, read one after another (a tuple: cheap on the read path)."""

    log_start_offset: int
    high_watermark: int
    last_stable_offset: int
    log_end_offset: int


class PartitionFetch(NamedTuple):
    """One partition's fetch (:meth:`~tidelog.manager.manager.LogManager.fetch`): the raw batches
    and the offsets taken after the read; ``aborted`` (producer id, first offset) pairs for
    ``read_committed`` only; ``records`` a :class:`~tidelog.storage.file_slice.FileSlice` where
    the fetch asked ``as_slice``. A tuple: built once per partition of every fetch."""

    records: bytes | FileSlice
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    aborted: tuple[tuple[int, int], ...] | None


@dataclass(frozen=True, slots=True)
class SetAside:
    """A partition dir (or stray dir) that did not load, and why."""

    path: Path
    reason: str
    topic_partition: TopicPartition | None = None


@dataclass(frozen=True, slots=True)
class TopicDescription:
    name: str
    topic_id: str
    partitions: tuple[PartitionInfo, ...]
    offline: tuple[SetAside, ...]
    configs: Mapping[str, str]
    configs_unconfirmed: bool = False  # retention and cleaning paused until an operator confirms

    @property
    def partition_count(self) -> int:
        return len(self.partitions) + len(self.offline)


@dataclass(frozen=True, slots=True)
class LogDirInfo:
    """One log dir: its live partitions, the dirs set aside (and, while it is ``offline``, its
    partitions, each with the dir's failure as the reason)."""

    path: Path
    partitions: tuple[PartitionInfo, ...]
    set_aside: tuple[SetAside, ...]
    offline: OfflineLogDir | None = None

    @property
    def size(self) -> int:
        return sum(p.size for p in self.partitions)
