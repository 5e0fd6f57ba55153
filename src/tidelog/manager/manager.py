"""LogManager: the single owner of a set of log dirs, their topics and their background work.

Kafka's ``LogManager`` (kafka-storage.md §3.6, §3.9), minus replication:

* **Start-up** (:meth:`LogManager.open`): lock every log dir (all of one cluster), read the
  topic registry (:mod:`.topics`), and load every partition dir with its checkpointed recovery
  point and log start offset, skipping recovery after a clean shutdown; after an unclean one,
  recovery runs in ``num.recovery.threads.per.data.dir`` processes (:mod:`.recovery`). A
  partition that fails to load is *set aside* (reported by :meth:`set_aside`, its checkpoint
  entries kept so nothing resurfaces once it is repaired) and the others load: Kafka would take
  the whole dir offline. The registry and the dirs are then reconciled (restored, adopted,
  completed, stray dirs set aside: :mod:`.registry_sync`). Last, multi-partition jobs a crash
  interrupted (a Spark write) are completed or rolled back, and their abandoned staging dirs
  deleted (:mod:`.staged_commit`; partitions of one that can be neither are held:
  :mod:`.staged_holds`).
* **Topics**: create (partitions placed in the dir with the fewest), add partitions, delete
  (dirs renamed ``-delete``, removed after the broker's ``log.segment.delete.delay.ms``), alter
  per-topic overrides (persisted in the registry, applied to live logs at once).
* **Appends**: tidelog is the only replica of every partition, so, as for a Kafka leader whose ISR
  is itself, the high watermark moves to the log end right after each append.
* **Background tasks** (:meth:`startup`): retention every ``log.retention.check.interval.ms``, the
  ``flush.ms`` flusher, and the recovery-point, log-start-offset and high-watermark checkpoints, all
  after ``log.initial.task.delay.ms``. Each task is also a public method, run on demand by the CLI
  and tests.
* **Disk faults** (:mod:`.offline_dirs`, :mod:`.log_dir_failure`): an I/O error of any storage
  operation takes its log dir offline (its partitions answer KAFKA_STORAGE_ERROR), the other dirs
  keep serving, and a probe brings the dir back, the logs the fault touched reopened with recovery.
  A dir that fails while it is opened, or whose partition meets a disk fault (ENOSPC, EIO ...)
  while it loads, starts offline and is loaded when its probe passes.
* **Clean shutdown** (:meth:`shutdown`): flush and close every log, write the checkpoints, then
  ``.kafka_cleanshutdown`` in every dir whose logs all loaded, then release the locks.

Thread-safety: topic changes and the partition map are guarded by one lock; each ``Log`` guards
itself. Background tasks run on the scheduler's thread and take the same locks.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import MappingProxyType

from tidelog import retention
from tidelog.clock import SYSTEM_CLOCK, Clock
from tidelog.cleaner.log_cleaner import NO_ENGINES, EngineFactory, LogCleaner
from tidelog.errors import (
    CheckpointError,
    InvalidPartitionsError,
    InvalidRequestError,
    LogDirOfflineError,
    StorageError,
    TidelogError,
    TopicExistsError,
    UnknownTopicOrPartitionError,
)
from tidelog.manager import recovery
from tidelog.manager.internal_topics import check_deletable
from tidelog.manager.log_dir import LogDir, describe_error, open_log_dirs
from tidelog.manager.log_dir_failure import (
    FaultCause,
    FaultKind,
    FaultReportingCleaner,
    LogDirFailureChannel,
    OfflineLog,
    ProbeBackoff,
    ReadFaults,
    is_environment_fault,
)
from tidelog.manager.offline_dirs import OfflineDirs, close_failed_log
from tidelog.manager.reports import LogDirInfo, PartitionInfo, SetAside, TopicDescription
from tidelog.manager.registry_sync import RegistrySync, placed_assignments, read_topic_id, unconfirmed_note
from tidelog.manager.staged_commit import complete_pending
from tidelog.manager.staged_holds import StagedHolds
from tidelog.manager.topic_copies import write_topic_copy
from tidelog.manager.topics import (
    RegistryState,
    TopicRecord,
    check_collision,
    keep_damaged_registry,
    read_newest_registry,
    validate_topic_name,
    write_registry,
)
from tidelog.scheduler import Scheduler, ThreadScheduler
from tidelog.storage import fileops, files
from tidelog.storage.append_info import AppendOrigin, LogAppendInfo
from tidelog.storage.atomic import fsync_dir
from tidelog.storage.checkpoints import OffsetCheckpointFile
from tidelog.storage.config import BrokerConfig, LogConfig, check_topic_config_names
from tidelog.storage.log import Log
from tidelog.storage.metadata import PartitionMetadataFile, new_topic_id
from tidelog.storage.stored_overrides import loadable_overrides
from tidelog.topic_partition import TopicPartition

log = logging.getLogger(__name__)

ProgressCallback = Callable[[int, int], None]
CLUSTER_METADATA_TOPIC = "__cluster_metadata"


class LogManager(OfflineDirs, RegistrySync, StagedHolds):
    """Owner of ``log_dirs``; build with :meth:`open`, end with :meth:`shutdown` (or ``with``)."""

    def __init__(self, broker: BrokerConfig, dirs: list[LogDir], clock: Clock, scheduler: Scheduler,
                 owns_scheduler: bool, probe_backoff: ProbeBackoff | None = None,
                 cleaner_engines: Mapping[str, EngineFactory] = NO_ENGINES) -> None:
        self.broker = broker
        self._dirs = dirs
        self._clock = clock
        self._scheduler = scheduler
        self._owns_scheduler = owns_scheduler
        self._lock = threading.RLock()
        self._logs: dict[TopicPartition, Log] = {}
        self._log_dir_of: dict[TopicPartition, LogDir] = {}
        self._set_aside: dict[Path, SetAside] = {}
        self._failures = LogDirFailureChannel(clock, probe_backoff)
        self._offline_logs: dict[TopicPartition, OfflineLog] = {}
        self._offline_deleted: dict[Path, TopicPartition] = {}  # deleted while their dir was offline
        self._read_faults = ReadFaults(clock)
        self._unloaded: set[Path] = set()  # opened, their load cut short by a disk fault
        self._cleaning_stopped: dict[Path, set[TopicPartition]] = {}  # paused while their dir is offline
        self._staged_holds: dict[TopicPartition, str] = {}  # see staged_holds
        self._registry = RegistryState()
        self._epoch_floor = 0  # the next registry epoch is above this (and above the registry's)
        self._damaged_registries: dict[Path, int | None] = {}  # kept aside before their dir's next write
        self._held: set[TopicPartition] = set()  # cleaning paused here until the topic's configs are confirmed
        self._configs: dict[str, LogConfig] = {}
        self._started = False
        self._closed = False
        # Kafka creates the cleaner only with log.cleaner.enable; without it compacted logs are
        # neither compacted nor deleted by the periodic tasks.
        self.cleaner: LogCleaner | None = None
        if broker.log_cleaner_enable:
            self.cleaner = FaultReportingCleaner(broker, [d.path for d in dirs], self.logs, clock,
                                                 on_failure=self._cleaner_failed, engines=cleaner_engines)

    # --- opening ------------------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        broker: BrokerConfig,
        log_dirs: Sequence[Path] | None = None,
        *,
        clock: Clock = SYSTEM_CLOCK,
        scheduler: Scheduler | None = None,
        on_progress: ProgressCallback | None = None,
        probe_backoff: ProbeBackoff | None = None,
        read_only: bool = False,
        cleaner_engines: Mapping[str, EngineFactory] = NO_ENGINES,
    ) -> LogManager:
        """Lock and load ``log_dirs`` (default: the broker's ``log.dirs``). ``probe_backoff``: how
        often a dir that went offline is probed (:mod:`.log_dir_failure`). ``read_only`` (commands
        that only read): each dir's ``.kafka_cleanshutdown`` is left exactly as it is
        (:mod:`.log_dir`); the caller must not write records. ``cleaner_engines``: the cleaner
        engines besides in-process that ``tidelog.cleaner.engine`` may name, from the front door.

        A dir that fails on the disk while it is opened (an I/O error, a read-only lock file) starts
        offline, as in Kafka, and is loaded once its probe passes, provided another dir opens.
        Raises :class:`LogDirLockedError` when another process owns one of them (no dir stays
        locked then), :class:`StorageError` when none can be opened, or when one cannot be read
        for another reason (dirs of different clusters, a malformed ``meta.properties``).
        """
        paths = [Path(p) for p in (log_dirs if log_dirs is not None else broker.log_dirs)]
        dirs, failed = open_log_dirs(paths, keep_marker=read_only)
        own = scheduler is None
        manager = cls(broker, dirs, clock, scheduler or ThreadScheduler(clock, "tidelog-manager"), own,
                      probe_backoff, cleaner_engines)
        for path, error in failed.items():
            manager._failures.mark_offline(path, "opening the log dir", error)
            log.error("%s; the other log dirs are loaded", manager._failures.get(path).describe())
        try:
            manager._load(on_progress)
            # before anyone can append or read through this manager: jobs in flight are finished
            complete_pending(manager, [d.path for d in dirs], clock)
        except BaseException:
            manager._abort()
            raise
        return manager

    def _load(self, on_progress: ProgressCallback | None) -> None:
        read = read_newest_registry([d.path for d in self._online_dirs()])
        for log_dir in self._online_dirs():  # a disk fault: the dir is loaded once its probe passes
            if (error := read.unreadable.get(log_dir.path)) is not None:
                cause = FaultCause.of(FaultKind.READ, error)  # the probe reads the registry again
                self._failed_loading(log_dir, "reading the topic registry", error, cause)
        if read.unreadable and not self._online_dirs():  # as when no dir opens
            raise next(iter(read.unreadable.values()))
        self._registry = read.state
        self._epoch_floor = read.floor_epoch
        self._damaged_registries = dict(read.damaged)
        for path, reason in read.stale.items():
            log.info("topic registry copy in %s is rewritten (%s)", path, reason)
        plans = {log_dir: self._loading_plan(log_dir) for log_dir in self._online_dirs()}
        progress = _Progress(sum(len(plan) for plan in plans.values()), on_progress)
        loaded: dict[TopicPartition, list[Log]] = {}
        # Worker processes are forked here, before any loading thread exists: a fork while another
        # thread holds a lock (numba's compiler lock, logging's) would leave it locked in the child.
        recovered = {log_dir: self._recover_in_processes(log_dir, plan) for log_dir, plan in plans.items()}
        with ThreadPoolExecutor(max_workers=max(1, len(plans))) as pool:
            for found in pool.map(lambda item: self._load_dir_at_start(item[0], item[1], progress, recovered[item[0]]),
                                  plans.items()):
                for tp, lg in found:
                    loaded.setdefault(tp, []).append(lg)
        self._register_loaded(loaded)
        self._reconcile_registry(bool(read.stale))
        for log_dir in self._online_dirs():
            self._note_loaded(log_dir)

    def _note_loaded(self, log_dir: LogDir) -> None:
        """Whether every partition of ``log_dir`` loaded (else it gets no clean-shutdown marker)."""
        log_dir.loaded_completely = not any(
            s.topic_partition is not None and s.path.parent == log_dir.path for s in self._set_aside.values())

    def _loading_plan(self, log_dir: LogDir) -> dict[TopicPartition, Path]:
        """The partition dirs of ``log_dir`` to load; ``-delete`` dirs (and dirs of deleted topics,
        renamed now) are scheduled for removal, the rest set aside."""
        scan = log_dir.scan()
        for path in scan.to_delete:
            self._schedule_dir_deletion(path)
        for path, reason in scan.set_aside.items():
            self._set_aside[path] = SetAside(path, reason)
        return {tp: path for tp, path in scan.partitions.items() if not self._deleted_partition(tp, path)}

    def _load_dir_at_start(self, log_dir: LogDir, to_load: dict[TopicPartition, Path], progress: _Progress,
                           recovered: Mapping[TopicPartition, recovery.RecoveryFailure | None]
                           ) -> list[tuple[TopicPartition, Log]]:
        """:meth:`_load_dir`; a disk fault takes ``log_dir`` offline, loaded when its probe passes."""
        try:
            return self._load_dir(log_dir, to_load, progress, recovered)
        except _PartitionLoadFault as e:
            self._failed_loading(log_dir, f"loading of {e.topic_partition}", e)
            return []

    def _load_dir(self, log_dir: LogDir, to_load: dict[TopicPartition, Path], progress: _Progress,
                  recovered: Mapping[TopicPartition, recovery.RecoveryFailure | None]
                  ) -> list[tuple[TopicPartition, Log]]:
        """Open ``to_load``; a partition that fails is set aside and the others go on, unless it
        failed on the disk (:func:`is_environment_fault`): then the logs opened so far are closed
        and :class:`_PartitionLoadFault` is raised (the dir goes offline: a full disk is no
        reason to set a partition aside for good).

        ``recovered``: what process recovery (after an unclean stop with
        ``num.recovery.threads.per.data.dir`` > 1 and enough data, :mod:`.recovery`) did; opening
        skips recovery for those. Opening itself runs on one thread per dir: it is GIL-bound
        Python, and more threads made it ~1.5x slower here."""
        loaded: list[tuple[TopicPartition, Log]] = []
        try:
            for tp, path in sorted(to_load.items()):
                failure = recovered.get(tp)
                if failure is not None:
                    if (error := failure.os_error()) is not None and is_environment_fault(error):
                        raise _PartitionLoadFault(failure.reason, topic_partition=str(tp)) from error
                    self._set_partition_aside(path, tp, failure.reason)
                else:
                    found = self._open_partition(log_dir, tp, path, recovered_elsewhere=tp in recovered)
                    if found is not None:
                        loaded.append((tp, found))
                progress.advance()
        except _PartitionLoadFault:
            for tp, lg in loaded:
                close_failed_log(tp, lg)
            raise
        return loaded

    def _load_dir_late(self, log_dir: LogDir) -> list[tuple[TopicPartition, Log]]:
        """Load a dir that was offline since start-up (:class:`OfflineDirs`), on this thread."""
        return self._load_dir(log_dir, self._loading_plan(log_dir), _Progress(0, None), {})

    def _recover_in_processes(self, log_dir: LogDir, to_load: dict[TopicPartition, Path]
                              ) -> Mapping[TopicPartition, recovery.RecoveryFailure | None]:
        workers = self.broker.num_recovery_threads_per_data_dir
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

    def _open_partition(self, log_dir: LogDir, tp: TopicPartition, path: Path, *,
                        recovered_elsewhere: bool) -> Log | None:
        try:
            return Log.open(
                path, self._config_for(tp.topic),
                log_start_offset=log_dir.checkpointed_log_start_offsets.get(tp, 0),
                recovery_point=log_dir.checkpointed_recovery_points.get(tp, 0),
                had_clean_shutdown=log_dir.had_clean_shutdown, clock=self._clock, scheduler=self._scheduler,
                topic_partition=tp, recovered_elsewhere=recovered_elsewhere, **self._producer_state_settings(),
            )
        except Exception as e:  # noqa: BLE001 - one bad partition never stops the others
            if is_environment_fault(e):
                raise _PartitionLoadFault(describe_error(e), topic_partition=str(tp)) from e
            self._set_partition_aside(path, tp, describe_error(e))
            return None

    def _set_partition_aside(self, path: Path, tp: TopicPartition, reason: str) -> None:
        log.error("%s: partition set aside, it failed to load: %s", path, reason)
        with self._lock:
            self._set_aside[path] = SetAside(path, reason, tp)

    def _register_loaded(self, loaded: dict[TopicPartition, list[Log]]) -> None:
        """Take the loaded logs; a partition found in several log dirs is set aside in all of them
        (which copy is right is an operator's call; Kafka refuses to start)."""
        dir_by_path = {d.path: d for d in self._dirs}
        for tp, copies in loaded.items():
            if len(copies) == 1:
                self._logs[tp] = copies[0]
                self._log_dir_of[tp] = dir_by_path[copies[0].dir.parent]
                continue
            where = ", ".join(str(c.dir) for c in copies)
            for copy in copies:
                copy.close()
                self._set_aside[copy.dir] = SetAside(copy.dir, f"partition {tp} found in several log dirs: {where}", tp)

    def _set_log_aside(self, tp: TopicPartition, reason: str) -> None:
        """Close a loaded log and set it aside (its checkpoint entries are kept)."""
        lg = self._logs.pop(tp)
        self._log_dir_of.pop(tp, None)
        lg.close()
        log.error("%s: partition set aside: %s", lg.dir, reason)
        self._set_aside[lg.dir] = SetAside(lg.dir, reason, tp)

    def _set_aside_partitions(self) -> dict[TopicPartition, SetAside]:
        return {s.topic_partition: s for s in self._set_aside.values() if s.topic_partition is not None}

    def _deleted_partition(self, tp: TopicPartition, path: Path) -> bool:
        """Finish a topic deletion a crash interrupted: the dir of a deleted topic id goes ``-delete``."""
        deleted = self._registry.deleted_topic_ids
        if not deleted:
            return False
        topic_id = read_topic_id(path)
        if topic_id is None or topic_id not in deleted:
            return False
        log.info("%s: finishing the deletion of topic %s", path, tp.topic)
        self._schedule_dir_deletion(self._rename_for_deletion(path, tp))
        return True

    def _apply_topic_config(self, topic: str, configs: Mapping[str, str]) -> LogConfig:
        """Live logs of ``topic`` take ``configs`` at once (they were opened with what was known then)."""
        config = self.broker.log_config(dict(configs))
        self._configs[topic] = config
        for tp, lg in self._logs.items():
            if tp.topic == topic:
                lg.update_config(config)
        return config

    # --- topics -------------------------------------------------------------------------------

    def topics(self) -> list[str]:
        """Names of every topic, sorted."""
        return sorted(self._registry.topics)

    def has_topic(self, name: str) -> bool:
        return name in self._registry.topics

    def _record(self, name: str) -> TopicRecord:
        record = self._registry.topics.get(name)
        if record is None:
            raise UnknownTopicOrPartitionError(f"unknown topic {name!r}", topic=name)
        return record

    def partitions(self, topic: str) -> list[int]:
        """The partition numbers of ``topic`` (0..N-1); :class:`UnknownTopicOrPartitionError` if none."""
        return list(range(self._record(topic).partitions))

    def create_topic(self, name: str, partitions: int = 1, configs: Mapping[str, str] | None = None) -> TopicDescription:
        """Create ``name`` with ``partitions`` partitions and topic-level ``configs`` overrides.

        Errors (nothing is created then): :class:`InvalidTopicError` (name, or a ``.``/``_``
        collision), :class:`TopicExistsError`, :class:`InvalidPartitionsError`, :class:`ConfigError`.
        """
        validate_topic_name(name)
        if name == CLUSTER_METADATA_TOPIC:
            raise InvalidRequestError(f"Creation of internal topic {name} is prohibited.", topic=name)
        overrides = {k: str(v) for k, v in (configs or {}).items()}
        with self._lock:
            self._ensure_open()
            if name in self._registry.topics:
                raise TopicExistsError(f"Topic '{name}' already exists.", topic=name)
            check_collision(name, list(self._registry.topics))
            if partitions < 1:
                raise InvalidPartitionsError("Number of partitions was set to an invalid non-positive value.",
                                             topic=name, partitions=partitions)
            self.broker.log_config(overrides)  # validates every override before anything is written
            placement = self._place(partitions)
            record = TopicRecord(name, new_topic_id(), partitions, MappingProxyType(overrides),
                                 placed_assignments(placement))
            self._commit({**self._registry.topics, name: record}, self._registry.deleted_topic_ids)
            self._create_partitions(record, placement)
            return self.describe_topic(name)

    def create_partitions(self, name: str, total: int) -> TopicDescription:
        """Grow ``name`` to ``total`` partitions (Kafka's CreatePartitions: never shrinks)."""
        with self._lock:
            self._ensure_open()
            record = self._record(name)
            if total == record.partitions:
                raise InvalidPartitionsError(f"Topic already has {total} partitions.", topic=name)
            if total < record.partitions:
                raise InvalidPartitionsError(
                    f"Topic currently has {record.partitions} partitions, which is higher than the requested {total}.",
                    topic=name,
                )
            placement = dict(zip(range(record.partitions, total), self._place(total - record.partitions).values()))
            grown = record.replace(partitions=total,
                                   assignments=MappingProxyType({**record.assignments, **placed_assignments(placement)}))
            self._commit({**self._registry.topics, name: grown}, self._registry.deleted_topic_ids)
            self._create_partitions(grown, placement)
            held = self._hold_unconfirmed()  # new partitions of a held topic are held too
            described = self.describe_topic(name)
        self._await_held(held)
        return described

    def _place(self, count: int) -> dict[int, LogDir]:
        """Kafka's ``nextLogDirs`` for ``count`` new partitions in turn: each to the dir holding
        the fewest partitions (first listed on a tie)."""
        online = self._online_dirs()
        if not online and count:
            raise LogDirOfflineError("every log dir is offline: no partition can be created",
                                     log_dirs=", ".join(str(d.path) for d in self._dirs))
        counts = {id(d): 0 for d in online}
        for log_dir in self._log_dir_of.values():
            counts[id(log_dir)] = counts.get(id(log_dir), 0) + 1
        placement = {}
        for partition in range(count):
            chosen = min(online, key=lambda d: counts[id(d)])
            counts[id(chosen)] += 1
            placement[partition] = chosen
        return placement

    def _create_partitions(self, record: TopicRecord, placement: Mapping[int, LogDir]) -> None:
        """Create the dirs of a committed change; one that fails is set aside (the registry
        already says the partition exists: the next start-up tries again)."""
        for partition, log_dir in placement.items():
            try:
                self._create_partition(record, partition, log_dir)
            except TidelogError as e:
                tp = TopicPartition(record.name, partition)
                where = files.partition_dir(log_dir.path, tp)
                log.error("%s: cannot create partition dir: %s", where, e)
                self._set_aside[where] = SetAside(where, f"cannot create its dir: {describe_error(e)}", tp)

    def delete_topic(self, name: str) -> None:
        """Delete ``name``: recorded in the registry first, then each partition dir is renamed
        ``-delete`` and removed after the broker's ``log.segment.delete.delay.ms``. A clean in
        progress on one of its partitions is aborted first, or waited for when a dir failure or
        a hold aborted it already (outside the manager's lock: the cleaner thread may need it to
        finish its current step). An internal topic is refused (:func:`.internal_topics.check_deletable`):
        every door, the broker's DeleteTopics and the CLI alike, gets the same answer."""
        check_deletable(name)
        doomed_tps = [TopicPartition(name, p) for p in self.partitions(name)]
        if self.cleaner is not None:
            self.cleaner.manager.pause_cleaning(*doomed_tps)
            self.cleaner.manager.await_stopped(*doomed_tps)
        try:
            self._delete_topic(name)
        except BaseException:
            if self.cleaner is not None:
                for tp in doomed_tps:
                    self.cleaner.manager.resume_cleaning(tp)
            raise
        if self.cleaner is not None:
            for tp in doomed_tps:
                self.cleaner.manager.remove_partition(tp)

    def _delete_topic(self, name: str) -> None:
        with self._lock:
            self._ensure_open()
            record = self._record(name)
            remaining = {k: v for k, v in self._registry.topics.items() if k != name}
            self._commit(remaining, self._registry.deleted_topic_ids | {record.topic_id})
            self._configs.pop(name, None)
            self._held.difference_update([tp for tp in self._held if tp.topic == name])
            for partition in range(record.partitions):
                tp = TopicPartition(name, partition)
                if (offline := self._offline_logs.pop(tp, None)) is not None:  # removed once its dir is back
                    self._offline_deleted[offline.path] = tp
                if offline is not None and offline.log is not None:
                    close_failed_log(tp, offline.log)
                doomed = self._logs.pop(tp, None)
                self._log_dir_of.pop(tp, None)
                if doomed is not None:
                    doomed.close(producer_snapshot=False)
                    self._delete_partition_dir(doomed.dir, tp)
            for path, aside in list(self._set_aside.items()):  # broken copies go too, or they would come back
                if aside.topic_partition is not None and aside.topic_partition.topic == name:
                    del self._set_aside[path]
                    if path.is_dir():
                        self._schedule_dir_deletion(self._rename_for_deletion(path, aside.topic_partition))
            log.info("deleted topic %s (%d partitions)", name, record.partitions)

    def topic_config(self, topic: str) -> LogConfig:
        self._record(topic)
        return self._config_for(topic)

    def topic_overrides(self, topic: str) -> dict[str, str]:
        return dict(self._record(topic).configs)

    def alter_topic_config(self, topic: str, set: Mapping[str, str] | None = None,
                           delete: Iterable[str] = ()) -> LogConfig:
        """Set and/or remove topic-level overrides (Kafka's IncrementalAlterConfigs SET/DELETE);
        validated as a whole before anything is written; live logs use the new config at once."""
        with self._lock:
            self._ensure_open()
            record = self._record(topic)
            removed = list(delete)
            check_topic_config_names([*removed, *(set or {})])
            overrides = {k: v for k, v in record.configs.items() if k not in removed}
            overrides.update({k: str(v) for k, v in (set or {}).items()})
            self.broker.log_config(overrides)  # validates every override before anything is written
            updated = record.replace(configs=MappingProxyType(overrides))  # keeps the partitions' log dirs
            self._commit({**self._registry.topics, topic: updated}, self._registry.deleted_topic_ids)
            return self._apply_topic_config(topic, overrides)

    def describe_topic(self, name: str) -> TopicDescription:
        # under the manager lock: the server's worker threads describe while others change topics
        with self._lock:
            record = self._record(name)
            infos, offline = [], []
            for partition in range(record.partitions):
                tp = TopicPartition(name, partition)
                found = self._logs.get(tp)
                if found is not None:
                    infos.append(self._partition_info(tp, found))
                else:
                    offline.append(self._offline_entry(tp))
        return TopicDescription(name, record.topic_id, tuple(infos), tuple(offline), MappingProxyType(dict(record.configs)),
                                record.unconfirmed)

    def _offline_entry(self, tp: TopicPartition) -> SetAside:
        offline = self._offline_logs.get(tp)
        if offline is not None and (failure := self._failures.get(offline.path.parent)) is not None:
            return SetAside(offline.path, failure.describe(), tp)
        for entry in self._set_aside.values():
            if entry.topic_partition == tp:
                return entry
        return SetAside(Path(files.partition_dir_name(tp)), "partition has no log (offline)", tp)

    # --- partitions and records ---------------------------------------------------------------

    def log(self, tp: TopicPartition) -> Log:
        """The live log of ``tp``; :class:`UnknownTopicOrPartitionError`, or :class:`LogDirOfflineError`
        when it exists but was set aside, or belongs to an interrupted staged commit not resolved yet
        (:mod:`.staged_holds`). Thread-safe: a lookup in the partition map, which is only replaced
        entry by entry under the lock."""
        found = self._logs.get(tp)
        if found is None:
            raise self._no_log_error(tp)
        if self._staged_holds and tp in self._staged_holds:
            raise self._staged_hold_error(tp)
        return found

    def _no_log_error(self, tp: TopicPartition) -> TidelogError:
        """Why ``tp`` has no live log: its topic or partition is unknown, or it is offline."""
        record = self._record(tp.topic)
        offline = self._offline_logs.get(tp)
        if offline is not None:
            return self._offline_error(tp, offline.path.parent)
        if 0 <= tp.partition < record.partitions:
            entry = self._offline_entry(tp)
            return LogDirOfflineError(f"partition {tp} is offline: {entry.reason}", topic_partition=str(tp))
        return UnknownTopicOrPartitionError(
            f"topic {tp.topic!r} has no partition {tp.partition} (it has {record.partitions})",
            topic_partition=str(tp),
        )

    def get_log(self, tp: TopicPartition) -> Log | None:
        return self._logs.get(tp)

    def logs(self, topic: str | None = None) -> list[tuple[TopicPartition, Log]]:
        """Live logs (of ``topic``, when given; unknown topic raises), sorted by partition."""
        if topic is not None:
            self._record(topic)
        items = list(self._logs.items())
        return sorted((tp, lg) for tp, lg in items if topic is None or tp.topic == topic)

    def append(self, tp: TopicPartition, records: bytes | bytearray | memoryview,
               origin: AppendOrigin = AppendOrigin.CLIENT) -> LogAppendInfo:
        """Append record batches as the partition's leader; the high watermark follows the log end.
        Thread-safe: the log serializes its appends."""
        return self._append_to(tp, self.log(tp), records, origin)

    def _append_to(self, tp: TopicPartition, target: Log, records: bytes | bytearray | memoryview,
                   origin: AppendOrigin = AppendOrigin.CLIENT) -> LogAppendInfo:
        with self._storage_op(tp, target, "append", len(records)):
            info = target.append_as_leader(records, origin=origin)
        target.maybe_increment_high_watermark(target.log_end_offset)
        return info

    def delete_records(self, tp: TopicPartition, offset: int) -> int:
        """Kafka's DeleteRecords (offset -1 = the high watermark); returns the new log start offset.

        A log start offset that moved is checkpointed before this returns (two fsyncs per log dir):
        Kafka checkpoints it only periodically, so a crash soon after could bring the deleted
        records back (found by the kill points of ``tests/reliability``)."""
        target = self.log(tp)
        with self._storage_op(tp, target, "delete records"):
            before = target.log_start_offset
            after = target.delete_records(offset)
        if after != before:
            self.checkpoint_log_start_offsets()
        return after

    def set_aside(self) -> list[SetAside]:
        """Dirs that did not load, and why."""
        return sorted(self._set_aside.values(), key=lambda s: str(s.path))

    def log_dirs(self) -> list[LogDirInfo]:
        infos = []
        for log_dir in self._dirs:
            parts = tuple(self._partition_info(tp, lg) for tp, lg in self.logs() if self._log_dir_of.get(tp) is log_dir)
            aside = tuple(s for s in self.set_aside() if s.path.parent == log_dir.path)
            offline = tuple(self._offline_entry(tp) for tp, o in sorted(self._offline_logs.items())
                            if o.path.parent == log_dir.path)
            infos.append(LogDirInfo(log_dir.path, parts, aside + offline, self._failures.get(log_dir.path)))
        return infos

    def _partition_info(self, tp: TopicPartition, lg: Log) -> PartitionInfo:
        return PartitionInfo(tp, lg.dir.parent, lg.log_start_offset, lg.high_watermark, lg.log_end_offset,
                             lg.recovery_point, lg.size, lg.num_segments)

    # --- background work, each runnable on demand ---------------------------------------------

    def startup(self) -> None:
        """Schedule the periodic tasks (what ``tidelog serve`` runs), and the probe of offline log dirs."""
        b = self.broker
        delay = b.log_initial_task_delay_ms
        with self._lock:
            self._ensure_open()
            if self._started:
                return
            self._started = True
            tasks = (
                ("tidelog-log-retention", self.retention_task, b.log_retention_check_interval_ms),
                ("tidelog-log-flusher", self.flush_dirty_logs, b.log_flush_scheduler_interval_ms),
                ("tidelog-recovery-point-checkpoint", self.checkpoint_recovery_points,
                 b.log_flush_offset_checkpoint_interval_ms),
                ("tidelog-log-start-offset-checkpoint", self.checkpoint_log_start_offsets,
                 b.log_flush_start_offset_checkpoint_interval_ms),
                ("tidelog-high-watermark-checkpoint", self.checkpoint_high_watermarks,
                 b.replica_high_watermark_checkpoint_interval_ms),
            )
            for name, task, period in tasks:
                self._scheduler.schedule_periodic(name, self._while_open(task), delay, period)
            # not held back by log.initial.task.delay.ms: a dir may fail (and recover) at once
            probe_every = self._failures.backoff.initial_ms
            self._scheduler.schedule_periodic("tidelog-log-dir-probe", self._while_open(self.probe_offline_dirs),
                                              probe_every, probe_every)
            if self.cleaner is not None:
                self.cleaner.startup()

    def _while_open(self, task: Callable[[], object]) -> Callable[[], None]:
        """A periodic task that does nothing once the manager is shut down (a scheduler the
        caller passed in outlives the manager, and the dirs may have a new owner by then)."""
        def run() -> None:
            if not self._closed:
                task()
        return run

    def retention_task(self) -> list[retention.RetentionPlan]:
        """The periodic retention task, as Kafka's: logs without ``compact`` only (compacted logs
        get their retention from the cleaner threads, after each cleaning attempt), each paused
        for the cleaner while the pass runs, so a policy switched to ``compact`` meanwhile cannot
        have the cleaner and retention on one log at once."""
        if self.cleaner is None:
            return self._retention_over([(tp, lg) for tp, lg in self.logs() if not lg.config.compact], dry_run=False)
        with self.cleaner.manager.paused_non_compacted() as held:
            return self._retention_over(held, dry_run=False)

    def run_retention(self, topic: str | None = None, *, dry_run: bool = False) -> list[retention.RetentionPlan]:
        """One retention pass over every live log (of ``topic``), on demand: what was deleted (or,
        with ``dry_run``, would be) and why. Compacted logs get what their policy allows (only
        the log-start-offset pass for ``compact``)."""
        return self._retention_over(self.logs(topic), dry_run=dry_run)

    def _retention_over(self, logs: Iterable[tuple[TopicPartition, Log]], *, dry_run: bool) -> list[retention.RetentionPlan]:
        now = self._clock.milliseconds()
        decide = retention.plan_retention if dry_run else retention.delete_old_segments
        plans = []
        for tp, lg in logs:
            if self._unconfirmed(tp.topic):
                plans.append(retention.held_plan(lg, now, dry_run=dry_run, reason=unconfirmed_note(tp.topic)))
                continue
            try:
                with self._storage_op(tp, lg, "retention"):
                    plans.append(decide(lg, now))
            except TidelogError as e:  # e.g. an unreadable index: the other partitions go on
                log.error("%s: retention failed: %s", tp, e)
        return plans

    def explain_retention(self, topic: str | None = None) -> list[retention.RetentionPlan]:
        """What the next retention pass would delete, and why or why not, per partition."""
        return self.run_retention(topic, dry_run=True)

    def flush_dirty_logs(self) -> None:
        """Kafka's ``flushDirtyLogs``: flush every log whose last flush is ``flush.ms`` old."""
        now = self._clock.milliseconds()
        for tp, lg in self.logs():
            if now - lg.last_flush_time >= lg.config.flush_ms:
                try:
                    with self._storage_op(tp, lg, "flush"):
                        lg.flush(include_active=False)
                except StorageError as e:
                    log.error("%s: flush failed: %s", tp, e)

    def checkpoint_recovery_points(self) -> None:
        self._checkpoint(lambda d: d.recovery_points, lambda d: d.checkpointed_recovery_points,
                         lambda lg: lg.recovery_point)

    def checkpoint_log_start_offsets(self) -> None:
        """Only logs whose start offset is past their first segment's base are listed (Kafka's rule)."""
        self._checkpoint(lambda d: d.log_start_offsets, lambda d: d.checkpointed_log_start_offsets,
                         _log_start_entry)

    def checkpoint_high_watermarks(self) -> None:
        self._checkpoint(lambda d: d.high_watermarks, lambda d: d.checkpointed_high_watermarks,
                         lambda lg: lg.high_watermark)

    def _checkpoint(self, file_of: Callable[[LogDir], OffsetCheckpointFile],
                    loaded_of: Callable[[LogDir], dict[TopicPartition, int]],
                    value_of: Callable[[Log], int | None]) -> None:
        """Rewrite one checkpoint file in every dir: the live logs' values, plus the entries read at
        start-up for partitions set aside (forgetting a set-aside partition's log start offset
        would bring its deleted records back once it is repaired)."""
        failed: list[tuple[LogDir, BaseException]] = []
        with self._lock:
            for log_dir in self._online_dirs():
                loaded = loaded_of(log_dir)
                entries = {s.topic_partition: loaded[s.topic_partition] for s in self._set_aside.values()
                           if s.topic_partition in loaded and s.path.parent == log_dir.path}
                for tp, lg in self._logs.items():
                    if self._log_dir_of.get(tp) is log_dir and (value := value_of(lg)) is not None:
                        entries[tp] = value
                try:
                    file_of(log_dir).write(entries)
                except (StorageError, CheckpointError) as e:
                    log.error("%s: checkpoint failed: %s", log_dir.path, e)
                    failed.append((log_dir, e))
        for log_dir, error in failed:
            self._handle_dir_error(log_dir, f"checkpoint write of {file_of(log_dir).path.name}", error)

    # --- shutdown -----------------------------------------------------------------------------

    def shutdown(self, broker_epoch: int | None = None) -> None:
        """Clean shutdown: flush and close every log, write the checkpoints, mark each fully
        loaded dir cleanly shut down (with ``broker_epoch``, by default the one its marker held at
        start-up), release the locks. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        if self._owns_scheduler:
            self._scheduler.shutdown()
        if self.cleaner is not None:
            self.cleaner.shutdown()
        clean = self._close_logs()
        self._close_offline_logs()
        for failure in self._failures.offline_dirs():  # its logs are closed; it was not shut down cleanly
            clean[failure.path] = False
        self.checkpoint_recovery_points()
        self.checkpoint_log_start_offsets()
        self.checkpoint_high_watermarks()
        for log_dir in self._dirs:
            try:
                if clean.get(log_dir.path, True):
                    log_dir.mark_clean_shutdown(broker_epoch)
                else:
                    log_dir.mark_unclean()
            except StorageError as e:
                log.error("%s: cannot write the clean shutdown marker: %s", log_dir.path, e)
        self._release()

    close = shutdown

    def _close_logs(self) -> dict[Path, bool]:
        """Flush (active segment included) and close every log, in parallel per dir; a dir with a
        log that failed to close gets no clean-shutdown marker."""
        clean: dict[Path, bool] = {}

        def close_one(item: tuple[TopicPartition, Log]) -> None:
            tp, lg = item
            try:
                lg.flush()
                lg.close()
            except Exception as e:  # noqa: BLE001 - the other logs must still close
                log.error("%s: failed to close cleanly: %s", tp, describe_error(e))
                clean[lg.dir.parent] = False

        with ThreadPoolExecutor(max_workers=self.broker.num_recovery_threads_per_data_dir) as pool:
            list(pool.map(close_one, self.logs()))
        return clean

    def _release(self) -> None:
        for log_dir in self._dirs:
            log_dir.release()

    def _abort(self) -> None:
        """A failed start-up: close what loaded (no flush, no checkpoint, no marker), unlock."""
        self._closed = True
        if self._owns_scheduler:
            self._scheduler.shutdown()
        if self.cleaner is not None:
            self.cleaner.shutdown()
        for _, lg in self.logs():
            try:
                lg.close()
            except Exception as e:  # noqa: BLE001 - the original error matters more
                log.warning("%s: close after a failed start-up failed: %s", lg.dir, e)
        self._release()

    def __enter__(self) -> LogManager:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    # --- internals ----------------------------------------------------------------------------

    def _ensure_open(self) -> None:
        if self._closed:
            raise StorageError("log manager is shut down")

    def _config_for(self, topic: str) -> LogConfig:
        config = self._configs.get(topic)
        if config is None:
            record = self._registry.topics.get(topic)
            config = self._loadable_config(topic, record.configs if record else {})
            self._configs[topic] = config
        return config

    def _loadable_config(self, topic: str, overrides: Mapping[str, str]) -> LogConfig:
        """``topic``'s config from its stored overrides: one that no longer validates (written under
        older rules) loads as the nearest usable value, with a warning, and never keeps a partition
        from loading."""
        usable, notes = loadable_overrides(self.broker, overrides)
        for note in notes:
            log.warning("topic %s: stored override %s", topic, note)
        return self.broker.log_config(usable)

    def _commit(self, topics: Mapping[str, TopicRecord], deleted: frozenset[str],
                returning: LogDir | None = None, *, sync_copies: bool = True) -> None:
        """Write the registry with ``topics`` (each changed entry stamped with the new epoch, never
        lower than any epoch seen), then the changed topics' copies in their partition dirs (not
        with ``sync_copies`` False: the caller syncs every copy next).
        ``returning``: an offline dir coming back, written too (a fault there raises: it stays offline)."""
        epoch = max(self._registry.epoch, self._epoch_floor) + 1
        stamped, changed = {}, []
        for name, record in topics.items():
            old = self._registry.topics.get(name)
            if old is not None and record.same_content(old):
                stamped[name] = old
            else:
                stamped[name] = record.replace(epoch=epoch)
                changed.append(name)
        state = RegistryState(epoch, MappingProxyType(stamped), frozenset(deleted))
        failed: list[tuple[LogDir, StorageError]] = []
        online = self._online_dirs()
        if returning is not None:
            self._keep_damaged_registry(returning.path)
            write_registry([returning.path], state)
        for log_dir in online:
            try:
                self._keep_damaged_registry(log_dir.path)
                write_registry([log_dir.path], state)
            except StorageError as e:
                failed.append((log_dir, e))
        if len(failed) == len(online) and returning is None:  # not written anywhere: the change did not happen
            if failed:
                raise failed[0][1]
            raise LogDirOfflineError("every log dir is offline: the topic registry cannot be written",
                                     log_dirs=", ".join(str(d.path) for d in self._dirs))
        self._registry = state
        for log_dir, error in failed:
            self._handle_dir_error(log_dir, "topic registry write", error)
        if sync_copies:
            self._sync_topic_copies(changed)

    def _keep_damaged_registry(self, log_dir: Path) -> None:
        """An unreadable registry copy is renamed aside, never overwritten (see :mod:`.topics`)."""
        if log_dir not in self._damaged_registries:
            return
        kept = keep_damaged_registry(log_dir, self._clock.milliseconds())
        epoch = self._damaged_registries.pop(log_dir)
        log.warning("%s: the unreadable topic registry (epoch %s) is kept as %s; the registry is rewritten "
                    "from the other copies and the partitions' copies", log_dir,
                    "unknown" if epoch is None else epoch, kept.name)

    def _create_partition(self, record: TopicRecord, partition: int, log_dir: LogDir) -> Log:
        """Create and open an empty partition dir with its ``partition.metadata``."""
        tp = TopicPartition(record.name, partition)
        path = files.partition_dir(log_dir.path, tp)
        created = Log.open(path, self._config_for(record.name), had_clean_shutdown=True, clock=self._clock,
                           scheduler=self._scheduler, topic_partition=tp, **self._producer_state_settings())
        PartitionMetadataFile(path).write(record.topic_id)
        write_topic_copy(path, self._registry.topics.get(record.name, record))
        fsync_dir(log_dir.path)
        with self._lock:
            self._logs[tp] = created
            self._log_dir_of[tp] = log_dir
        return created

    def _producer_state_settings(self) -> dict[str, int]:
        """The broker's producer-id expiration settings, as :meth:`Log.open` takes them."""
        return {"producer_id_expiration_ms": self.broker.producer_id_expiration_ms,
                "producer_id_expiration_check_interval_ms": self.broker.producer_id_expiration_check_interval_ms}

    def _rename_for_deletion(self, path: Path, tp: TopicPartition) -> Path:
        target = path.parent / files.log_delete_dir_name(tp)
        try:
            fileops.rename(path, target)
            fsync_dir(path.parent)
        except OSError as e:
            raise StorageError("cannot rename partition dir for deletion", path=path, operation="rename") from e
        return target

    def _delete_partition_dir(self, path: Path, tp: TopicPartition) -> None:
        """Rename ``path`` for deletion and schedule its removal; on a disk fault its log dir goes
        offline and the dir is renamed once the log dir is back."""
        try:
            self._schedule_dir_deletion(self._rename_for_deletion(path, tp))
        except StorageError as e:
            log_dir = next((d for d in self._dirs if d.path == path.parent), None)
            if log_dir is None or not self._handle_dir_error(log_dir, f"deletion of {tp}", e):
                raise
            self._offline_deleted[path] = tp

    def _schedule_dir_deletion(self, path: Path) -> None:
        delay = self.broker.log_config().file_delete_delay_ms  # the broker default, as Kafka does
        self._scheduler.schedule_once(f"delete-dir-{path.name}", lambda: _remove_tree(path), delay)

    def __repr__(self) -> str:
        return f"LogManager({[str(d.path) for d in self._dirs]}, partitions={len(self._logs)})"


class _PartitionLoadFault(StorageError):
    """A partition met a disk fault while its dir loaded (context: ``topic_partition``); its dir
    goes offline and is loaded again when the probe passes."""

    topic_partition: str


class _Progress:
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


def _log_start_entry(lg: Log) -> int | None:
    first = lg.segments[0].base_offset if lg.num_segments else lg.log_start_offset
    return lg.log_start_offset if lg.log_start_offset > first else None


def _remove_tree(path: Path) -> None:
    fileops.rmtree(path, ignore_errors=True)
    log.info("removed %s", path)
