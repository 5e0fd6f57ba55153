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

The manager is the only door to a partition's ``Log``: the server, the CLI and Spark call its
record methods (:meth:`LogManager.append`, :meth:`LogManager.read`, :meth:`LogManager.fetch`,
:meth:`LogManager.list_offsets`, :meth:`LogManager.offsets`, :meth:`LogManager.delete_records`
...), each one lookup in the partition map and one call of the log. The class is split by file:
the partition map and its lock (:class:`~.partition_map.PartitionMap`, shared by reference),
loading logs (:class:`~.loading.PartitionLoader`), the registry state and its writes
(:class:`~.topic_registry.TopicRegistry`), the staged-commit holds
(:class:`~.staged_holds.StagedHolds`), log dir failures (``manager.offline_dirs``:
:class:`~.offline_dirs.OfflineDirs`), registry reconciliation (``manager.registry_sync``:
:class:`~.registry_sync.RegistrySync`), topic changes (``manager.topic_changes``:
:class:`~.topic_changes.TopicChanges`) and background tasks (``manager.background``:
:class:`~.background.BackgroundTasks`) are components it owns, each with its own state and
what it needs passed in; the manager's public methods delegate to them.

Thread-safety: topic changes and the partition map are guarded by one lock (an ``RLock``, the
map's: :mod:`.partition_map` says what it guards); each ``Log`` guards itself. Reads of the partition map by the record methods take no lock: an entry
is only replaced under it, and one dict lookup is atomic. Background tasks run on the
scheduler's thread and take the same locks. Each public method says what it takes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import MappingProxyType

from tidelog.cleaner.log_cleaner import NO_ENGINES, EngineFactory, LogCleaner
from tidelog.clock import SYSTEM_CLOCK, Clock
from tidelog.errors import StorageError, TidelogError
from tidelog.manager import recovery
from tidelog.manager.background import BackgroundTasks
from tidelog.manager.loading import PartitionLoader, PartitionLoadFault, Progress, ProgressCallback
from tidelog.manager.log_dir import LogDir, open_log_dirs
from tidelog.manager.log_dir_failure import FaultCause, FaultKind, FaultReportingCleaner, OfflineLogDir, ProbeBackoff
from tidelog.manager.offline_dirs import ManagerSteps, OfflineDirs
from tidelog.manager.partition_map import PartitionMap
from tidelog.manager.record_reads import RecordReads
from tidelog.manager.registry_sync import RegistrySteps, RegistrySync
from tidelog.manager.remote_retention import remote_data_deletion
from tidelog.manager.remote_tier import RemoteTier
from tidelog.manager.reports import (
    LogDirInfo,
    PartitionInfo,
    SetAside,
    TopicDescription,
)
from tidelog.manager.staged_commit import complete_pending
from tidelog.manager.staged_holds import StagedHolds
from tidelog.manager.topic_changes import TopicChanges
from tidelog.manager.topic_registry import TopicRegistry
from tidelog.manager.topics import RegistryState, TopicRecord, read_newest_registry
from tidelog.manager.txn_doors import TxnDoors
from tidelog.retention import RetentionPlan
from tidelog.scheduler import Scheduler, ThreadScheduler
from tidelog.storage.append_info import AppendOrigin, LogAppendInfo
from tidelog.storage.config import BrokerConfig, LogConfig
from tidelog.storage.log import Log
from tidelog.topic_partition import TopicPartition

log = logging.getLogger(__name__)


class LogManager(RecordReads, TxnDoors):
    """Owner of ``log_dirs``; build with :meth:`open`, end with :meth:`shutdown` (or ``with``)."""

    def __init__(self, broker: BrokerConfig, dirs: list[LogDir], clock: Clock, scheduler: Scheduler,
                 owns_scheduler: bool, probe_backoff: ProbeBackoff | None = None,
                 cleaner_engines: Mapping[str, EngineFactory] = NO_ENGINES) -> None:
        self.broker = broker
        self._clock = clock
        self._scheduler = scheduler
        self._owns_scheduler = owns_scheduler
        self._map = pm = PartitionMap(dirs)
        # the map's parts the manager reads itself (the lookup on the produce and fetch paths, one dict)
        self._lock, self._dirs, self._logs, self._set_aside = pm.lock, pm.dirs, pm.logs, pm.set_aside
        self._topic_registry = TopicRegistry(broker, clock)
        self._loader = PartitionLoader(broker, clock, scheduler, self._topic_registry.config_for,
                                       pm.set_partition_aside)
        self.staged_holds = StagedHolds(self._logs.get, self._no_log_error, self._append_to)
        self._closed = False
        # Kafka creates the cleaner only with log.cleaner.enable; without it compacted logs are
        # neither compacted nor deleted by the periodic tasks.
        self.cleaner: LogCleaner | None = None
        if broker.log_cleaner_enable:
            self.cleaner = FaultReportingCleaner(broker, [d.path for d in dirs], self.logs, clock,
                                                 on_failure=lambda *failed: self.offline_dirs.cleaner_failed(*failed),
                                                 engines=cleaner_engines,  # offline_dirs is built next
                                                 remote=lambda *a: self.remote_tier.cleaner_source(*a)
                                                 if self.remote_tier is not None else None)
        # registry_sync and offline_dirs call topic_changes, built last (it calls them): bound late
        self.registry_sync = rs = RegistrySync(broker, pm, self._topic_registry, self.cleaner, RegistrySteps(
            lambda *a, **kw: self.topic_changes.commit(*a, **kw),
            lambda *a: self.topic_changes.apply_topic_config(*a), lambda: self.offline_dirs.online_dirs(),
            lambda *a: self.topic_changes.place(*a), lambda *a: self.topic_changes.create_partition_dirs(*a),
            self._ensure_open))
        steps = ManagerSteps(rs.rejoin, rs.reconcile, rs.sync_topic_copies, rs.await_held, self._load_dir_late,
                             lambda *a: self.topic_changes.delete_partition_dir(*a),
                             lambda: complete_pending(self, [d.path for d in dirs], clock))
        self.offline_dirs = od = OfflineDirs(pm, clock, probe_backoff, self._loader, self.staged_holds,
                                             self.cleaner, steps)
        # the failure steps the manager uses; an instance attribute is the cheapest lookup for the
        # append path's storage_op
        self._failures, self._storage_op, self._online_dirs = od.failures, od.storage_op, od.online_dirs
        # The remote tier (tiered storage) when remote.log.storage.system.enable: copy passes, status.
        self.remote_tier = RemoteTier.for_broker(broker, clock, scheduler, self.logs,
                                                 lambda topic: self._record(topic).topic_id, lambda: self._closed)
        self.background = BackgroundTasks(broker, pm, clock, scheduler, od, rs, self.cleaner, self.logs,
                                          self._ensure_open, lambda: self._closed, self.remote_tier)
        if self.remote_tier is not None:  # remote retention checkpoints the log start offsets it raises
            self.remote_tier.retention.checkpoint_log_start_offsets = self.checkpoint_log_start_offsets
        self.topic_changes = TopicChanges(broker, pm, self._topic_registry, self._loader, scheduler, od, rs,
                                          self.cleaner, self.describe_topic, self._ensure_open)

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
        The manager is shared only once this returns: loading runs one thread per dir.
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
                self.offline_dirs.failed_loading(log_dir, "reading the topic registry", error, cause)
        if read.unreadable and not self._online_dirs():  # as when no dir opens
            raise next(iter(read.unreadable.values()))
        self._topic_registry.load(read)
        for path, reason in read.stale.items():
            log.info("topic registry copy in %s is rewritten (%s)", path, reason)
        plans = {log_dir: self._loading_plan(log_dir) for log_dir in self._online_dirs()}
        progress = Progress(sum(len(plan) for plan in plans.values()), on_progress)
        loaded: dict[TopicPartition, list[Log]] = {}
        # Worker processes are forked here, before any loading thread exists: a fork while another
        # thread holds a lock (numba's compiler lock, logging's) would leave it locked in the child.
        recovered = {log_dir: self._loader.recover_in_processes(log_dir, plan) for log_dir, plan in plans.items()}
        with ThreadPoolExecutor(max_workers=max(1, len(plans))) as pool:
            for found in pool.map(lambda item: self._load_dir_at_start(item[0], item[1], progress, recovered[item[0]]),
                                  plans.items()):
                for tp, lg in found:
                    loaded.setdefault(tp, []).append(lg)
        self._map.register_loaded(loaded)
        self.registry_sync.reconcile(bool(read.stale))
        for log_dir in self._online_dirs():  # a dir with a partition set aside gets no clean-shutdown marker
            log_dir.loaded_completely = self._map.loaded_completely(log_dir)

    def _loading_plan(self, log_dir: LogDir) -> dict[TopicPartition, Path]:
        """The partition dirs of ``log_dir`` to load; ``-delete`` dirs (and dirs of deleted topics,
        renamed now) are scheduled for removal, the rest set aside."""
        scan = log_dir.scan()
        for path in scan.to_delete:
            self.topic_changes.schedule_dir_deletion(path)
        for path, reason in scan.set_aside.items():
            self._set_aside[path] = SetAside(path, reason)
        finish_deletion = self.topic_changes.finish_interrupted_deletion
        return {tp: path for tp, path in scan.partitions.items() if not finish_deletion(tp, path)}

    def _load_dir_at_start(self, log_dir: LogDir, to_load: dict[TopicPartition, Path], progress: Progress,
                           recovered: Mapping[TopicPartition, recovery.RecoveryFailure | None]
                           ) -> list[tuple[TopicPartition, Log]]:
        """Load ``log_dir`` (:meth:`PartitionLoader.load_dir`); a disk fault takes it offline,
        loaded when its probe passes."""
        try:
            return self._loader.load_dir(log_dir, to_load, progress, recovered)
        except PartitionLoadFault as e:
            self.offline_dirs.failed_loading(log_dir, f"loading of {e.topic_partition}", e)
            return []

    def _load_dir_late(self, log_dir: LogDir) -> list[tuple[TopicPartition, Log]]:
        """Load a dir that was offline since start-up (:class:`OfflineDirs`), on this thread."""
        return self._loader.load_dir(log_dir, self._loading_plan(log_dir))

    @property
    def clock(self) -> Clock:
        """The clock every time of this manager comes from. Thread-safe (never rebound)."""
        return self._clock

    @property
    def closed(self) -> bool:
        """Whether :meth:`shutdown` has begun. Thread-safe (one attribute read)."""
        return self._closed

    def schedule_periodic(self, name: str, task: Callable[[], None], delay_ms: int, period_ms: int) -> None:
        """Run ``task`` every ``period_ms`` on the manager's scheduler (its other tasks' thread),
        first after ``delay_ms``. Thread-safe (the scheduler's own lock)."""
        self._scheduler.schedule_periodic(name, task, delay_ms, period_ms)

    # --- topics -------------------------------------------------------------------------------

    def topics(self) -> list[str]:
        """Names of every topic, sorted. Thread-safe without the lock: the registry is replaced
        whole on each change (:mod:`.topic_registry`), so this reads one registry or the next."""
        return sorted(self._registry.topics)

    def has_topic(self, name: str) -> bool:
        """Whether ``name`` is registered. Thread-safe without the lock, as :meth:`topics`."""
        return name in self._registry.topics

    @property
    def _registry(self) -> RegistryState:
        return self._topic_registry.state

    def _record(self, name: str) -> TopicRecord:
        return self._topic_registry.record(name)

    def partitions(self, topic: str) -> list[int]:
        """The partition numbers of ``topic`` (0..N-1); :class:`UnknownTopicOrPartitionError` if none.
        Thread-safe without the lock, as :meth:`topics`."""
        return list(range(self._record(topic).partitions))

    def topic_config(self, topic: str) -> LogConfig:
        """``topic``'s config (the broker's with its overrides); unknown raises. Thread-safe
        without the lock: a lookup in the config cache (filled on first use)."""
        self._record(topic)
        return self._topic_registry.config_for(topic)

    def topic_overrides(self, topic: str) -> dict[str, str]:
        """``topic``'s stored overrides; unknown raises. Thread-safe without the lock, as :meth:`topics`."""
        return dict(self._record(topic).configs)

    def describe_topic(self, name: str) -> TopicDescription:
        """``name``'s id, configs and partitions (live ones with their offsets, the others with why
        they are offline). Thread-safe: under the manager's lock (the server's worker threads
        describe while others change topics)."""
        with self._lock:
            record = self._record(name)
            infos, offline = [], []
            for partition in range(record.partitions):
                tp = TopicPartition(name, partition)
                found = self._logs.get(tp)
                if found is not None:
                    infos.append(self._partition_info(tp, found))
                else:
                    offline.append(self.offline_dirs.offline_entry(tp))
        return TopicDescription(name, record.topic_id, tuple(infos), tuple(offline), MappingProxyType(dict(record.configs)),
                                record.unconfirmed)

    def create_topic(self, name: str, partitions: int = 1, configs: Mapping[str, str] | None = None) -> TopicDescription:
        """Create ``name`` (:meth:`TopicChanges.create_topic` says what it checks). Thread-safe:
        under the manager's lock."""
        return self.topic_changes.create_topic(name, partitions, configs)

    def create_partitions(self, name: str, total: int) -> TopicDescription:
        """Grow ``name`` to ``total`` partitions (never shrinks). Thread-safe: the manager's lock."""
        return self.topic_changes.create_partitions(name, total)

    def delete_topic(self, name: str) -> None:
        """Delete ``name`` (:meth:`TopicChanges.delete_topic`). Thread-safe: under the manager's
        lock, after waiting for the cleaner outside it. A tiered topic's remote data goes too
        (:meth:`.remote_retention.RemoteRetention.deleting`): a pending-deletion PUT before the
        change, then, outside the manager's lock, the deletes (one LIST and a DELETE per object
        per partition) in the calling thread."""
        with remote_data_deletion(self.remote_tier, lambda: self._record(name)):
            self.topic_changes.delete_topic(name)

    def alter_topic_config(self, topic: str, set: Mapping[str, str] | None = None,
                           delete: Iterable[str] = ()) -> LogConfig:
        """Set and/or remove ``topic``'s overrides, applied to its live logs at once. Thread-safe:
        under the manager's lock; each log swaps its config under its own. Turning
        ``remote.storage.enable`` off with ``remote.log.delete.on.disable`` deletes the remote data."""
        delete = tuple(delete)
        with remote_data_deletion(self.remote_tier, lambda: self._record(topic), (set, delete)):
            return self.topic_changes.alter_topic_config(topic, set, delete)

    # --- partitions and records: the doors of the server, the CLI and Spark ----------------
    # Each looks the live log up once (:meth:`log`) and calls it; none takes the manager's lock.

    def log(self, tp: TopicPartition) -> Log:
        """The live log of ``tp``, for the manager's own layer (staged commits) and tests: the
        server, the CLI and Spark use the record methods below and never hold a ``Log``.
        :class:`UnknownTopicOrPartitionError`, or :class:`LogDirOfflineError` when it exists but
        was set aside, is offline, or belongs to an interrupted staged commit not resolved yet
        (:mod:`.staged_holds`). Thread-safe without the lock: one lookup in the partition map,
        whose entries change only under the manager's lock (a dict lookup is atomic)."""
        found = self._logs.get(tp)
        if found is None:
            raise self._no_log_error(tp)
        held = self.staged_holds.held
        if held and tp in held:
            raise self.staged_holds.error(tp)
        return found

    def get_log(self, tp: TopicPartition) -> Log | None:
        """The live log of ``tp`` or None, holds ignored (for tests). Thread-safe as :meth:`log`."""
        return self._logs.get(tp)

    def logs(self, topic: str | None = None) -> list[tuple[TopicPartition, Log]]:
        """Live logs (of ``topic``, when given; unknown topic raises), sorted by partition, for the
        manager's own layer (the cleaner takes this as its view of the logs) and tests.
        Thread-safe: the partition map is copied under the manager's lock."""
        if topic is not None:
            self._record(topic)
        with self._lock:
            items = list(self._logs.items())
        return sorted((tp, lg) for tp, lg in items if topic is None or tp.topic == topic)

    def live_logs(self) -> dict[TopicPartition, Log]:
        """A copy of the live logs by partition, unsorted (what a metrics scrape reads: cheaper than
        :meth:`logs`). Thread-safe: copied under the manager's lock, O(partitions)."""
        with self._lock:
            return dict(self._logs)

    def live_partitions(self, topic: str | None = None) -> list[TopicPartition]:
        """The partitions (of ``topic``; unknown raises) with a live log, sorted. Thread-safe as :meth:`logs`."""
        return [tp for tp, _ in self.logs(topic)]

    def partition_config(self, tp: TopicPartition) -> LogConfig:
        """The config ``tp``'s live log runs with; raises as :meth:`log`. Thread-safe."""
        return self.log(tp).config

    def partition_info(self, tp: TopicPartition) -> PartitionInfo:
        """Where ``tp``'s live log lives, its offsets and size; raises as :meth:`log`. Thread-safe."""
        return self._partition_info(tp, self.log(tp))

    def highest_producer_id(self) -> int:
        """The highest producer id in the producer state of the live logs (-1: none). Thread-safe:
        each log's state is read under that log's lock."""
        highest = -1
        for _, lg in self.logs():
            with lg.lock:
                highest = max(highest, max(lg.producer_state.active_producers, default=-1))
        return highest

    def _no_log_error(self, tp: TopicPartition) -> TidelogError:
        """Why ``tp`` has no live log: its topic or partition is unknown, or it is offline."""
        return self.offline_dirs.no_log_error(tp, self._record(tp.topic))

    def append(self, tp: TopicPartition, records: bytes | bytearray | memoryview,
               origin: AppendOrigin = AppendOrigin.CLIENT, check: Callable[[LogConfig], None] | None = None,
               verified: Mapping[int, int] | None = None) -> LogAppendInfo:
        """Append record batches as the partition's leader; the high watermark follows the log end.
        ``check``, when given, is called first with the config of the log the append found (one
        lookup for both) and refuses the append by raising (acks=-1's ``min.insync.replicas``);
        ``verified``: a transactional request's tokens (:mod:`tidelog.storage.txn_verification`).
        A disk fault takes the partition's dir offline (:class:`LogDirOfflineError`). Thread-safe:
        the log serializes its appends; the manager's lock is taken only on a disk fault."""
        target = self.log(tp)
        if check is not None:
            check(target.config)
        return self._append_to(tp, target, records, origin, verified)

    def _append_to(self, tp: TopicPartition, target: Log, records: bytes | bytearray | memoryview,
                   origin: AppendOrigin = AppendOrigin.CLIENT, verified: Mapping[int, int] | None = None) -> LogAppendInfo:
        with self._storage_op(tp, target, "append", len(records)):
            info = target.append_as_leader(records, origin=origin, verified=verified)
        if info.appended:  # to this append's end, not the log end: a live commit may have appended since
            target.maybe_increment_high_watermark(info.next_offset)
        return info

    def delete_records(self, tp: TopicPartition, offset: int) -> int:
        """Kafka's DeleteRecords (offset -1 = the high watermark); returns the new log start offset.

        A log start offset that moved is checkpointed before this returns (two fsyncs per log dir):
        Kafka checkpoints it only periodically, so a crash soon after could bring the deleted
        records back. Thread-safe: the log takes its own lock; the checkpoint takes the manager's."""
        target = self.log(tp)
        with self._storage_op(tp, target, "delete records"):
            before = target.log_start_offset
            after = target.delete_records(offset)
        if after != before:
            self.checkpoint_log_start_offsets()
        return after

    def log_dir_paths(self) -> list[Path]:
        """Every log dir, online or offline, in the broker's order. Thread-safe without a lock: the
        dir list's entries are replaced, never added or removed."""
        return [d.path for d in self._dirs]

    def offline_partitions(self) -> list[TopicPartition]:
        """The partitions whose log dir is offline. Thread-safe: copied under the manager's lock."""
        with self._lock:
            return list(self._map.offline_logs)

    def set_aside(self) -> list[SetAside]:
        """Dirs that did not load, and why. Thread-safe: copied under the manager's lock."""
        return self._map.entries_set_aside()

    def log_dirs(self) -> list[LogDirInfo]:
        """Each log dir: its live partitions with their offsets and sizes, the dirs set aside, and,
        while it is offline, its failure and partitions. Thread-safe: under the manager's lock."""
        infos = []
        with self._lock:
            for log_dir in self._dirs:
                parts = tuple(self._partition_info(tp, lg) for tp, lg in self.logs() if self._map.log_dir_of.get(tp) is log_dir)
                aside = tuple(s for s in self.set_aside() if s.path.parent == log_dir.path)
                offline = tuple(self.offline_dirs.offline_entry(tp) for tp, o in sorted(self._map.offline_logs.items())
                                if o.path.parent == log_dir.path)
                infos.append(LogDirInfo(log_dir.path, parts, aside + offline, self._failures.get(log_dir.path)))
        return infos

    def confirm_topic_configs(self, topic: str) -> bool:
        """An operator vouches for ``topic``'s configs; False when they were not unconfirmed.
        Thread-safe: :meth:`RegistrySync.confirm_topic_configs` says which locks it takes."""
        return self.registry_sync.confirm_topic_configs(topic)

    # --- background tasks: :class:`~.background.BackgroundTasks` ---------------------------------

    def startup(self) -> None:
        """Schedule the periodic tasks and the probe of offline dirs, start the cleaner; idempotent.
        Thread-safe: under the manager's lock."""
        self.background.startup()
        if self.remote_tier is not None:
            self.remote_tier.startup()

    def retention_task(self) -> list[RetentionPlan]:
        """The periodic retention pass (logs without ``compact``, each paused for the cleaner).
        Thread-safe: each log's deletion takes that log's lock, the pause the cleaner's."""
        return self.background.retention_task()

    def run_retention(self, topic: str | None = None, *, dry_run: bool = False) -> list[RetentionPlan]:
        """One retention pass over every live log (of ``topic``), on demand: what it deleted (or,
        with ``dry_run``, would) and why. Thread-safe: each log's deletion takes that log's lock."""
        return self.background.run_retention(topic, dry_run=dry_run)

    def explain_retention(self, topic: str | None = None) -> list[RetentionPlan]:
        """What the next retention pass would delete, and why or why not, per partition.
        Thread-safe: reads each log under that log's lock."""
        return self.background.explain_retention(topic)

    def flush_dirty_logs(self) -> None:
        """Flush every log whose last flush is ``flush.ms`` old. Thread-safe: each flush takes its log's lock."""
        self.background.flush_dirty_logs()

    def checkpoint_recovery_points(self) -> None:
        """Rewrite every online dir's recovery-point checkpoint (under the manager's lock)."""
        self.background.checkpoint_recovery_points()

    def checkpoint_log_start_offsets(self) -> None:
        """Rewrite every online dir's log-start-offset checkpoint (under the manager's lock)."""
        self.background.checkpoint_log_start_offsets()

    def checkpoint_high_watermarks(self) -> None:
        """Rewrite every online dir's high-watermark checkpoint (under the manager's lock)."""
        self.background.checkpoint_high_watermarks()

    # --- log dir failures: :class:`~.offline_dirs.OfflineDirs` --------------------------------

    def offline_log_dirs(self) -> list[OfflineLogDir]:
        """The log dirs offline now, with what took each offline. Thread-safe: the channel's lock."""
        return self.offline_dirs.offline_log_dirs()

    def report_storage_error(self, tp: TopicPartition, operation: str, error: BaseException) -> bool:
        """:meth:`OfflineDirs.report_storage_error`. Thread-safe: the manager's lock when the dir
        goes offline."""
        return self.offline_dirs.report_storage_error(tp, operation, error)

    def report_read_error(self, tp: TopicPartition, operation: str, error: BaseException) -> bool:
        """:meth:`OfflineDirs.report_read_error`; thread-safe (the read-fault counts' lock, the
        manager's if the dir goes offline)."""
        return self.offline_dirs.report_read_error(tp, operation, error)

    def probe_offline_dirs(self) -> list[Path]:
        """:meth:`OfflineDirs.probe_offline_dirs`: probe the offline dirs due, bring back those that
        pass; the dirs online again. Thread-safe: the map changes under the manager's lock."""
        return self.offline_dirs.probe_offline_dirs()

    def _partition_info(self, tp: TopicPartition, lg: Log) -> PartitionInfo:
        return PartitionInfo(tp, lg.dir.parent, lg.log_start_offset, lg.high_watermark, lg.log_end_offset,
                             lg.recovery_point, lg.size, lg.num_segments)

    # --- shutdown -----------------------------------------------------------------------------

    def shutdown(self, broker_epoch: int | None = None) -> None:
        """Clean shutdown: flush and close every log, write the checkpoints, mark each fully
        loaded dir cleanly shut down (with ``broker_epoch``, by default the one its marker held at
        start-up), release the locks. Idempotent. Thread-safe: the first caller wins under the
        manager's lock; the closing runs outside it (each log flushed and closed under its own)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        if self._owns_scheduler:
            self._scheduler.shutdown()
        if self.cleaner is not None:
            self.cleaner.shutdown()
        self.close_remote_reader()
        clean = self.background.close_logs()
        self.offline_dirs.close_offline_logs()
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

    def __repr__(self) -> str:
        return f"LogManager({[str(d.path) for d in self._dirs]}, partitions={len(self._logs)})"