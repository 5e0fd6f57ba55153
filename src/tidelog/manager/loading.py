"""Opening partition logs: :class:`PartitionLoader`, the LogManager's component that turns the
partition dirs of a log dir into open :class:`~tidelog.storage.log.Log` objects.

It knows how a log is opened (the broker's settings, the log dir's checkpoints, process recovery
after an unclean stop: :mod:`.recovery`) and what a failure means: a partition that fails for a
reason of its own is *set aside* (through the callback it was given) and the others go on; one
that meets a disk fault (ENOSPC, EIO ...) stops the dir's load with :class:`PartitionLoadFault`,
its logs opened so far closed (the dir goes offline: a full disk is no reason to set a partition
aside for good). It never touches the manager's partition map: the manager registers what it
returns.

Thread-safety: a loader holds no mutable state; one dir's load runs on one thread, several dirs
in parallel (each ``Log.open`` is independent). The set-aside callback must be thread-safe.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from pathlib import Path

from tidelog.clock import Clock
from tidelog.errors import StorageError
from tidelog.manager import recovery
from tidelog.manager.log_dir import LogDir, describe_error
from tidelog.manager.log_dir_failure import is_environment_fault
from tidelog.scheduler import Scheduler
from tidelog.storage.config import BrokerConfig, LogConfig
from tidelog.storage.log import Log
from tidelog.topic_partition import TopicPartition

log = logging.getLogger(__name__)

ProgressCallback = Callable[[int, int], None]
SetAsideCallback = Callable[[Path, TopicPartition, str], None]


class PartitionLoadFault(StorageError):
    """A partition met a disk fault while its dir loaded (context: ``topic_partition``); its dir
    goes offline and is loaded again when the probe passes."""

    topic_partition: str


class Progress:
    """Counts loaded partitions for an ``on_progress(done, total)`` callback. Thread-safe (own lock)."""

    def __init__(self, total: int, callback: ProgressCallback | None) -> None:
        self._total = total
        self._done = 0
        self._callback = callback
        self._lock = threading.Lock()

    def advance(self) -> None:
        if self._callback is None:
            return
        with self._lock:
            self._done += 1
            self._callback(self._done, self._total)


NO_PROGRESS = Progress(0, None)


class PartitionLoader:
    """Opens the logs of partition dirs (see the module doc). ``config_for``: the config of a
    topic's logs; ``set_aside``: called with (dir, partition, reason) for a partition that fails
    to load for a reason of its own."""

    def __init__(self, broker: BrokerConfig, clock: Clock, scheduler: Scheduler,
                 config_for: Callable[[str], LogConfig], set_aside: SetAsideCallback) -> None:
        self._broker = broker
        self._clock = clock
        self._scheduler = scheduler
        self._config_for = config_for
        self._set_aside = set_aside

    def open_log(self, path: Path, tp: TopicPartition, **settings: object) -> Log:
        """``Log.open`` of ``tp``'s dir with the broker's producer-id expiration settings, the
        manager's clock and scheduler and the topic's config; ``settings``: the rest of
        ``Log.open``'s keywords (offsets, ``had_clean_shutdown`` ...). Raises what it raises."""
        return Log.open(
            path, self._config_for(tp.topic), clock=self._clock, scheduler=self._scheduler, topic_partition=tp,
            producer_id_expiration_ms=self._broker.producer_id_expiration_ms,
            producer_id_expiration_check_interval_ms=self._broker.producer_id_expiration_check_interval_ms,
            **settings)  # type: ignore[arg-type]

    def recover_in_processes(self, log_dir: LogDir, to_load: Mapping[TopicPartition, Path]
                             ) -> Mapping[TopicPartition, recovery.RecoveryFailure | None]:
        """After an unclean stop with ``num.recovery.threads.per.data.dir`` > 1 and enough data to
        recover, recover ``to_load`` in worker processes (:mod:`.recovery`): what each did.
        Must run before any loading thread exists (a fork copies locks other threads hold)."""
        workers = self._broker.num_recovery_threads_per_data_dir
        if log_dir.had_clean_shutdown or workers < 2:
            return {}
        jobs = [recovery.RecoveryJob(tp, path, self._config_for(tp.topic),
                                     log_dir.checkpointed_log_start_offsets.get(tp, 0),
                                     log_dir.checkpointed_recovery_points.get(tp, 0))
                for tp, path in sorted(to_load.items())]
        work = sum(recovery.bytes_to_recover(job.path, job.recovery_point) for job in jobs)
        if not recovery.worth_processes(work, len(jobs)):
            return {}
        log.info("%s: recovering %d partitions (%d bytes) in %d processes", log_dir.path, len(jobs), work, workers)
        return recovery.recover_in_processes(jobs, workers)

    def load_dir(self, log_dir: LogDir, to_load: Mapping[TopicPartition, Path], progress: Progress = NO_PROGRESS,
                 recovered: Mapping[TopicPartition, recovery.RecoveryFailure | None] | None = None
                 ) -> list[tuple[TopicPartition, Log]]:
        """Open ``to_load``; a partition that fails is set aside and the others go on, unless it
        failed on the disk (:func:`is_environment_fault`): then the logs opened so far are closed
        and :class:`PartitionLoadFault` is raised.

        ``recovered``: what process recovery did (:meth:`recover_in_processes`); opening skips
        recovery for those. Opening itself runs on one thread per dir: it is GIL-bound Python,
        which more threads make slower, not faster."""
        recovered = recovered or {}
        loaded: list[tuple[TopicPartition, Log]] = []
        try:
            for tp, path in sorted(to_load.items()):
                failure = recovered.get(tp)
                if failure is not None:
                    if (error := failure.os_error()) is not None and is_environment_fault(error):
                        raise PartitionLoadFault(failure.reason, topic_partition=str(tp)) from error
                    self._set_aside(path, tp, failure.reason)
                else:
                    found = self._open_partition(log_dir, tp, path, recovered_elsewhere=tp in recovered)
                    if found is not None:
                        loaded.append((tp, found))
                progress.advance()
        except PartitionLoadFault:
            for tp, lg in loaded:
                close_failed_log(tp, lg)
            raise
        return loaded

    def _open_partition(self, log_dir: LogDir, tp: TopicPartition, path: Path, *,
                        recovered_elsewhere: bool) -> Log | None:
        try:
            return self.open_log(
                path, tp, log_start_offset=log_dir.checkpointed_log_start_offsets.get(tp, 0),
                recovery_point=log_dir.checkpointed_recovery_points.get(tp, 0),
                had_clean_shutdown=log_dir.had_clean_shutdown, recovered_elsewhere=recovered_elsewhere)
        except Exception as e:  # noqa: BLE001 - one bad partition never stops the others
            if is_environment_fault(e):
                raise PartitionLoadFault(describe_error(e), topic_partition=str(tp)) from e
            self._set_aside(path, tp, describe_error(e))
            return None


def close_failed_log(tp: TopicPartition, lg: Log) -> None:
    """Close a log whose dir failed as Kafka's ``closeHandlers`` does: descriptors and maps
    released, nothing written (a final time-index entry into a full disk's sparse page would be a
    SIGBUS); it is marked closed under its lock, so no append can start after. Errors are logged,
    never raised."""
    try:
        lg.close_handlers()
    except Exception as e:  # noqa: BLE001 - the disk is failing; what matters is that the log is out
        log.warning("%s: closing after its log dir went offline failed: %s", tp, describe_error(e))
