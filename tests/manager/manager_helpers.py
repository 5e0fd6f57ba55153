"""Helpers shared by the LogManager tests: batches, a crash, readers of checkpoints and the registry.

Fixtures live in ``conftest.py``; this module holds the plain functions test modules import
(``from manager_helpers import batch, crash, ...``). ``tests/storage/storage_helpers.py`` is not
on the path when only this directory is collected, so the few builders needed here are repeated.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from tidelog.manager import LogManager
from tidelog.records import BatchBuilder, iter_batches
from tidelog.storage.checkpoints import (
    LOG_START_OFFSET_CHECKPOINT_FILE,
    RECOVERY_POINT_CHECKPOINT_FILE,
    REPLICATION_OFFSET_CHECKPOINT_FILE,
    OffsetCheckpointFile,
)
from tidelog.storage.fetch_info import FetchIsolation
from tidelog.storage.config import BrokerConfig
from tidelog.storage.log import Log
from tidelog.testing import FakeClock, FakeScheduler
from tidelog.topic_partition import TopicPartition

T0 = 1_700_000_000_000  # FakeClock's default start, ms


def tp(topic: str, partition: int = 0) -> TopicPartition:
    return TopicPartition(topic, partition)


def batch(count: int = 1, *, timestamp: int = T0, value_size: int = 10) -> bytes:
    """One uncompressed v2 batch of ``count`` records (keys ``k<i>``, values of ``value_size``
    bytes); a leader append assigns its offsets, so every call returns the same bytes."""
    builder = BatchBuilder(base_offset=0)
    for i in range(count):
        builder.append(i, timestamp, b"k%d" % i, (b"v%d" % i).ljust(value_size, b"."))
    return builder.build()


def read_offsets(log: Log) -> list[int]:
    """Offsets of every record from the log start to the log end, read through ``Log.read``."""
    offset, out = log.log_start_offset, []
    while offset < log.log_end_offset:
        info = log.read(offset, 1 << 20, FetchIsolation.LOG_END)
        found = [b for _, b in iter_batches(info.records)]
        if not found:
            break
        out.extend(r.offset for b in found for r in b.records() if r.offset >= offset)
        offset = found[-1].next_offset
    return out


def crash(manager: LogManager) -> None:
    """Stop ``manager`` as a killed process would: release descriptors, maps and dir locks and
    write nothing (no flush, no checkpoint, no ``.kafka_cleanshutdown``).

    Test seam: reaches into private fields of LogManager, Log and LogSegment on purpose (nothing
    public may do this). Queued scheduler tasks of the crashed manager must not be run after.
    """
    manager._closed = True
    for _, log in manager.logs():
        log._closed = True
        for segment in log._segments.snapshot():
            segment.release_indexes()
            segment.log.close()
            if segment._txn_index is not None:
                segment._txn_index.close()
    for log_dir in manager._dirs:
        log_dir.release()


# --- files ---------------------------------------------------------------------------------

def recovery_points(log_dir: Path) -> dict[TopicPartition, int]:
    return OffsetCheckpointFile(log_dir / RECOVERY_POINT_CHECKPOINT_FILE).read()


def log_start_offsets(log_dir: Path) -> dict[TopicPartition, int]:
    return OffsetCheckpointFile(log_dir / LOG_START_OFFSET_CHECKPOINT_FILE).read()


def high_watermarks(log_dir: Path) -> dict[TopicPartition, int]:
    return OffsetCheckpointFile(log_dir / REPLICATION_OFFSET_CHECKPOINT_FILE).read()


def registry(log_dir: Path) -> dict[str, Any]:
    """The topic registry copy of ``log_dir``, parsed."""
    return json.loads((log_dir / "tidelog-topics.json").read_text("utf-8"))


def write_registry_json(log_dir: Path, content: dict[str, Any]) -> None:
    """Write a registry copy by hand (crash-phase tests fake states the manager left behind)."""
    (log_dir / "tidelog-topics.json").write_text(json.dumps(content), "utf-8")


def sub_dirs(log_dir: Path) -> list[str]:
    return sorted(p.name for p in log_dir.iterdir() if p.is_dir())


def names(dir: Path) -> list[str]:
    return sorted(p.name for p in dir.iterdir())


def break_partition(partition_dir: Path) -> Path:
    """Make ``Log.open`` fail on ``partition_dir`` (the tests run as root, so ``chmod 000`` would
    not): its first ``.log`` moves aside and a directory takes its name. Returns the moved file
    for :func:`repair_partition`."""
    log_file = sorted(partition_dir.glob("*.log"))[0]
    aside = log_file.with_name(log_file.name + ".aside")
    os.rename(log_file, aside)
    log_file.mkdir()
    return aside


def repair_partition(aside: Path) -> None:
    log_file = aside.with_name(aside.name.removesuffix(".aside"))
    log_file.rmdir()
    os.rename(aside, log_file)


# --- opening managers ------------------------------------------------------------------------

DEFAULTS = {
    "log.segment.bytes": "1024",
    "log.retention.check.interval.ms": "1000",
    "log.initial.task.delay.ms": "0",
}


class Opener:
    """Opens managers on fake clocks: see the ``broker`` fixture in ``conftest.py``."""

    def __init__(self, log_dirs: list[Path]) -> None:
        self.log_dirs = log_dirs
        self.clock = FakeClock(T0)
        self.scheduler = FakeScheduler(self.clock)
        self.opened: list[LogManager] = []
        self._fresh = True

    def config(self, dirs: Sequence[Path] | None = None, props: Mapping[str, str] | None = None) -> BrokerConfig:
        """``log.dirs`` = ``dirs`` (default: all three), then :data:`DEFAULTS`, then ``props``."""
        chosen = self.log_dirs if dirs is None else dirs
        return BrokerConfig.from_properties(
            {"log.dirs": ",".join(str(d) for d in chosen), **DEFAULTS, **(props or {})})

    def open(self, dirs: Sequence[Path] | None = None, props: Mapping[str, str] | None = None, *,
             on_progress: Callable[[int, int], None] | None = None) -> LogManager:
        """Open a manager on ``dirs`` (default: all three) with broker ``props`` on top of :data:`DEFAULTS`."""
        chosen = list(self.log_dirs if dirs is None else dirs)
        if not self._fresh:
            self.clock = FakeClock(self.clock.milliseconds())
            self.scheduler = FakeScheduler(self.clock)
        self._fresh = False
        manager = LogManager.open(self.config(chosen, props), chosen, clock=self.clock, scheduler=self.scheduler,
                                  on_progress=on_progress)
        self.opened.append(manager)
        return manager

    def close_all(self) -> None:
        for manager in self.opened:
            manager.shutdown()  # idempotent; a crashed manager is marked closed by crash()
