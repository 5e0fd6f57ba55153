"""Parallel recovery after an unclean stop, in worker processes.

Kafka recovers the partitions of a log dir on ``num.recovery.threads.per.data.dir`` threads. In
CPython, recovery (a Python walk over every batch from the recovery point) holds the GIL, so
threads make it slower, not faster. tidelog recovers in that many *processes* instead: each
worker opens its partitions uncleanly (validating, truncating torn tails, rebuilding indexes
exactly as the loader does) and closes them, so their files are whole; the manager then opens
them with ``recovered_elsewhere``: no second recovery, and the recovery point stays at the
checkpoint, exactly as after recovering in process (nothing recovered is claimed durable before
the next flush; a crash before it just recovers again).

Work the worker cannot finish is reported as a :class:`RecoveryFailure` (its reason, and the errno
of a disk fault behind it): the manager sets that partition aside, or takes the dir offline when
the disk failed (a full disk is no reason to set a partition aside for good); a worker that dies (a broken pool) leaves its partitions to the in-process path. Workers
start with ``fork`` (no second import of numba), drop every scheduled task (a recovery that cut a
segment leaves ``.deleted`` files, which the manager's clean open removes), and use the system
clock (recovery reads no time that matters).
"""

from __future__ import annotations

import logging
import multiprocessing
import os
from collections.abc import Mapping
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path

from tidelog.errors import TidelogError
from tidelog.manager.log_dir_failure import describe_fault, os_error_of
from tidelog.scheduler import Task
from tidelog.storage import files
from tidelog.storage.config import LogConfig
from tidelog.storage.log import Log
from tidelog.topic_partition import TopicPartition

log = logging.getLogger(__name__)

#: Processes pay off only when recovery is heavy per partition: many small partitions recover more
#: slowly in workers than in process, since the open afterwards costs as much as such a recovery.
#: Below these bounds (in all, and on average per partition), recover in process.
MIN_BYTES_FOR_PROCESSES = 32 << 20
MIN_AVERAGE_BYTES_FOR_PROCESSES = 1 << 20


def worth_processes(total_bytes: int, partitions: int) -> bool:
    return (partitions >= 2 and total_bytes >= MIN_BYTES_FOR_PROCESSES
            and total_bytes >= MIN_AVERAGE_BYTES_FOR_PROCESSES * partitions)


def bytes_to_recover(path: Path, recovery_point: int) -> int:
    """Size of the ``.log`` files of partition dir ``path`` from the segment holding
    ``recovery_point`` on: what an unclean open re-validates. One directory listing."""
    sizes: dict[int, int] = {}
    try:
        with os.scandir(path) as listing:
            for entry in listing:
                if entry.name.endswith(files.LOG_SUFFIX) and entry.name[:1].isdigit():
                    sizes[files.offset_from_file_name(entry.name)] = entry.stat().st_size
    except (OSError, TidelogError):
        return 0  # the open reports it
    floor = max((base for base in sizes if base <= recovery_point), default=0)
    return sum(size for base, size in sizes.items() if base >= floor)


@dataclass(frozen=True, slots=True)
class RecoveryJob:
    """What a worker needs to recover one partition (picklable)."""

    topic_partition: TopicPartition
    path: Path
    config: LogConfig
    log_start_offset: int
    recovery_point: int


class _DroppingScheduler:
    """A worker's scheduler: recovery's background tasks are the manager's business."""

    def schedule_once(self, name: str, task: Task, delay_ms: int = 0) -> None:
        pass

    def schedule_periodic(self, name: str, task: Task, delay_ms: int, period_ms: int) -> None:
        pass

    def shutdown(self) -> None:
        pass


@dataclass(frozen=True, slots=True)
class RecoveryFailure:
    """Why a worker could not recover a partition (one line), and the errno of the ``OSError``
    behind it, if any (picklable, unlike the error)."""

    reason: str
    errno: int | None = None

    def os_error(self) -> OSError | None:
        return OSError(self.errno, os.strerror(self.errno)) if self.errno is not None else None


def recover_partition(job: RecoveryJob) -> RecoveryFailure | None:
    """Recover and close one partition; None on success, else why it failed."""
    try:
        Log.open(
            job.path, job.config, log_start_offset=job.log_start_offset, recovery_point=job.recovery_point,
            had_clean_shutdown=False, scheduler=_DroppingScheduler(), topic_partition=job.topic_partition,
        ).close()
    except Exception as e:  # noqa: BLE001 - reported to the manager, which sets the partition aside
        fault = os_error_of(e)
        return RecoveryFailure(describe_fault(e), fault.errno if fault is not None else None)
    return None


def recover_in_processes(jobs: list[RecoveryJob], workers: int) -> Mapping[TopicPartition, RecoveryFailure | None]:
    """Run :func:`recover_partition` for ``jobs`` on ``workers`` processes. The result maps each
    partition that was attempted to None (recovered) or its error; partitions missing from it
    (the pool broke) must be recovered in process."""
    results: dict[TopicPartition, RecoveryFailure | None] = {}
    context = multiprocessing.get_context("fork")
    try:
        with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
            chunk = max(1, len(jobs) // (workers * 8))
            for job, outcome in zip(jobs, pool.map(recover_partition, jobs, chunksize=chunk)):
                results[job.topic_partition] = outcome
    except BrokenProcessPool as e:
        log.error("recovery worker died (%s); %d partition(s) are recovered in process", e, len(jobs) - len(results))
    return results
