"""The LogManager's background work: retention, the ``flush.ms`` flusher and the recovery-point,
log-start-offset and high-watermark checkpoints, scheduled by :meth:`BackgroundTasks.startup`
after ``log.initial.task.delay.ms`` (the probe of offline log dirs at once); each task is also a
public method, run on demand by the CLI and tests.

:class:`BackgroundTasks` is a component of :class:`~tidelog.manager.manager.LogManager`
(``manager.background``): it reads the :class:`~.partition_map.PartitionMap` it shares with the
manager under the map's lock and runs each storage operation through
:meth:`~.offline_dirs.OfflineDirs.storage_op` (a disk fault takes the dir offline).

Thread-safety: every task is thread-safe. Retention and the flusher take a snapshot of the live
logs (:meth:`~tidelog.manager.manager.LogManager.logs`) and work on each log under its own lock;
a checkpoint holds the manager's lock while it writes (a log dir's checkpoint files are written
by one thread at a time), and takes a failed dir offline after releasing it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from types import MappingProxyType

from tidelog import retention
from tidelog.cleaner.log_cleaner import LogCleaner
from tidelog.clock import Clock
from tidelog.errors import CheckpointError, StorageError, TidelogError
from tidelog.manager.log_dir import LogDir, describe_error
from tidelog.manager.offline_dirs import OfflineDirs
from tidelog.manager.partition_map import PartitionMap
from tidelog.manager.registry_sync import RegistrySync, unconfirmed_note
from tidelog.manager.remote_tier import RemoteTier
from tidelog.scheduler import Scheduler
from tidelog.storage.checkpoints import OffsetCheckpointFile
from tidelog.storage.config import BrokerConfig
from tidelog.storage.log import Log
from tidelog.topic_partition import TopicPartition

log = logging.getLogger(__name__)


class BackgroundTasks:
    """Periodic and on-demand maintenance of a LogManager (see the module doc). ``logs``: the
    manager's :meth:`~tidelog.manager.manager.LogManager.logs` (a snapshot of the live logs, of a
    topic when given); ``ensure_open`` raises once the manager is shut down, ``is_closed`` says so."""

    def __init__(self, broker: BrokerConfig, partition_map: PartitionMap, clock: Clock, scheduler: Scheduler,
                 offline_dirs: OfflineDirs, registry_sync: RegistrySync, cleaner: LogCleaner | None,
                 logs: Callable[..., list[tuple[TopicPartition, Log]]],
                 ensure_open: Callable[[], None], is_closed: Callable[[], bool],
                 remote_tier: RemoteTier | None = None) -> None:
        self._broker = broker
        self._map = partition_map
        self._clock = clock
        self._scheduler = scheduler
        self._offline_dirs = offline_dirs
        self._registry_sync = registry_sync
        self.cleaner = cleaner
        self._logs = logs
        self._ensure_open = ensure_open
        self._is_closed = is_closed
        self._remote_tier = remote_tier
        self._started = False  # under the map's lock
        # each partition's retention reason code as the last pass that ran over it decided it
        # (retention.RetentionPlan.reason); a read-only mapping replaced whole: read without a lock
        self._retention_reasons: Mapping[TopicPartition, str] = MappingProxyType({})

    def startup(self) -> None:
        """Schedule the periodic tasks (what ``tidelog serve`` runs), and the probe of offline log
        dirs, and start the cleaner; idempotent. Thread-safe: under the manager's lock."""
        b = self._broker
        delay = b.log_initial_task_delay_ms
        with self._map.lock:
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
            probe_every = self._offline_dirs.failures.backoff.initial_ms
            probe = self._while_open(self._offline_dirs.probe_offline_dirs)
            self._scheduler.schedule_periodic("tidelog-log-dir-probe", probe,
                                              probe_every, probe_every)
            if self.cleaner is not None:
                self.cleaner.startup()

    def _while_open(self, task: Callable[[], object]) -> Callable[[], None]:
        """A periodic task that does nothing once the manager is shut down (a scheduler the
        caller passed in outlives the manager, and the dirs may have a new owner by then)."""
        def run() -> None:
            if not self._is_closed():
                task()
        return run

    def retention_task(self) -> list[retention.RetentionPlan]:
        """The periodic retention task, as Kafka's: logs without ``compact`` only (compacted logs
        get their retention from the cleaner threads, after each cleaning attempt), each paused
        for the cleaner while the pass runs, so a policy switched to ``compact`` meanwhile cannot
        have the cleaner and retention on one log at once. Thread-safe: each log's deletion takes
        that log's lock; the pause takes the cleaner's."""
        if self.cleaner is None:
            return self._retention_over([(tp, lg) for tp, lg in self._logs() if not lg.config.compact], dry_run=False)
        with self.cleaner.manager.paused_non_compacted() as held:
            return self._retention_over(held, dry_run=False)

    def run_retention(self, topic: str | None = None, *, dry_run: bool = False) -> list[retention.RetentionPlan]:
        """One retention pass over every live log (of ``topic``), on demand: what was deleted (or,
        with ``dry_run``, would be) and why. Compacted logs get what their policy allows (only
        the log-start-offset pass for ``compact``). Tiered logs first learn what the remote tier
        holds (:meth:`RemoteTier.refresh`: in a process that ran no copy pass, local retention
        would otherwise delete nothing of them), then run remote retention (retention.* over
        both tiers, :class:`~.remote_retention.RemoteRetention`), whose plan becomes a note of the
        partition's plan. Thread-safe as :meth:`retention_task`, without the cleaner's pause."""
        remote = {}
        if self._remote_tier is not None:
            self._remote_tier.refresh(topic)
            if not dry_run:
                self._remote_tier.retention.resume_pending()
            remote = self._remote_tier.retention.expiration_pass(topic, dry_run=dry_run)
        plans = self._retention_over(self._logs(topic), dry_run=dry_run)
        return [replace(p, notes=(*p.notes, remote[p.topic_partition].summary())) if p.topic_partition in remote else p
                for p in plans]

    @property
    def retention_reasons(self) -> Mapping[TopicPartition, str]:
        """Each partition's retention reason code (:func:`retention.retention_reason`) as the last
        retention pass that ran over it (the periodic task or :meth:`run_retention`, not a dry
        run) decided it; empty before the first. Thread-safe without a lock: a read-only mapping
        replaced whole by each pass (what a metrics scrape reads)."""
        return self._retention_reasons

    def _record_reasons(self, plans: Iterable[retention.RetentionPlan]) -> None:
        """Merge ``plans``' reasons into :attr:`retention_reasons`, dropping partitions no longer live."""
        self._retention_reasons = retention.merged_reasons(self._retention_reasons, plans, self._map.logs)

    def _retention_over(self, logs: Iterable[tuple[TopicPartition, Log]], *, dry_run: bool) -> list[retention.RetentionPlan]:
        plans = self._decide_over(logs, dry_run=dry_run)
        if not dry_run:
            self._record_reasons(plans)
        return plans

    def _decide_over(self, logs: Iterable[tuple[TopicPartition, Log]], *, dry_run: bool) -> list[retention.RetentionPlan]:
        now = self._clock.milliseconds()
        decide = retention.plan_retention if dry_run else retention.delete_old_segments
        plans = []
        for tp, lg in logs:
            if self._registry_sync.unconfirmed(tp.topic):
                plans.append(retention.held_plan(lg, now, dry_run=dry_run, reason=unconfirmed_note(tp.topic)))
                continue
            try:
                with self._offline_dirs.storage_op(tp, lg, "retention"):
                    plans.append(decide(lg, now))
            except TidelogError as e:  # e.g. an unreadable index: the other partitions go on
                log.error("%s: retention failed: %s", tp, e)
        return plans

    def explain_retention(self, topic: str | None = None) -> list[retention.RetentionPlan]:
        """What the next retention pass would delete, and why or why not, per partition; tiered
        logs first learn what the remote tier holds, as in :meth:`run_retention`. Thread-safe:
        reads each log's segments under that log's lock; changes nothing. A tiered partition's
        remote retention is in its :meth:`RemoteTier.status` row, not in the plan's notes."""
        if self._remote_tier is not None:
            self._remote_tier.refresh(topic)
        return self._retention_over(self._logs(topic), dry_run=True)

    def flush_dirty_logs(self) -> None:
        """Kafka's ``flushDirtyLogs``: flush every log whose last flush is ``flush.ms`` old.
        Thread-safe: each flush takes its log's lock."""
        now = self._clock.milliseconds()
        for tp, lg in self._logs():
            if now - lg.last_flush_time >= lg.config.flush_ms:
                try:
                    with self._offline_dirs.storage_op(tp, lg, "flush"):
                        lg.flush(include_active=False)
                except StorageError as e:
                    log.error("%s: flush failed: %s", tp, e)

    def checkpoint_recovery_points(self) -> None:
        """Rewrite every online dir's recovery-point checkpoint. Thread-safe: under the manager's lock."""
        self._checkpoint(lambda d: d.recovery_points, lambda d: d.checkpointed_recovery_points,
                         lambda lg: lg.recovery_point)

    def checkpoint_log_start_offsets(self) -> None:
        """Rewrite every online dir's log-start-offset checkpoint: only logs whose start offset is past
        their first segment's base are listed (Kafka's rule). Thread-safe: under the manager's lock."""
        self._checkpoint(lambda d: d.log_start_offsets, lambda d: d.checkpointed_log_start_offsets,
                         _log_start_entry)

    def checkpoint_high_watermarks(self) -> None:
        """Rewrite every online dir's high-watermark checkpoint. Thread-safe: under the manager's lock."""
        self._checkpoint(lambda d: d.high_watermarks, lambda d: d.checkpointed_high_watermarks,
                         lambda lg: lg.high_watermark)

    def _checkpoint(self, file_of: Callable[[LogDir], OffsetCheckpointFile],
                    loaded_of: Callable[[LogDir], dict[TopicPartition, int]],
                    value_of: Callable[[Log], int | None]) -> None:
        """Rewrite one checkpoint file in every dir: the live logs' values, plus the entries read at
        start-up for partitions set aside (forgetting a set-aside partition's log start offset
        would bring its deleted records back once it is repaired)."""
        failed: list[tuple[LogDir, BaseException]] = []
        with self._map.lock:
            for log_dir in self._offline_dirs.online_dirs():
                loaded = loaded_of(log_dir)
                entries = {s.topic_partition: loaded[s.topic_partition] for s in self._map.set_aside.values()
                           if s.topic_partition in loaded and s.path.parent == log_dir.path}
                for tp, lg in self._map.logs.items():
                    if self._map.log_dir_of.get(tp) is log_dir and (value := value_of(lg)) is not None:
                        entries[tp] = value
                try:
                    file_of(log_dir).write(entries)
                except (StorageError, CheckpointError) as e:
                    log.error("%s: checkpoint failed: %s", log_dir.path, e)
                    failed.append((log_dir, e))
        for log_dir, error in failed:
            self._offline_dirs.handle_dir_error(log_dir, f"checkpoint write of {file_of(log_dir).path.name}", error)

    def close_logs(self) -> dict[Path, bool]:
        """At shutdown: flush (active segment included) and close every live log, in parallel
        (``num.recovery.threads.per.data.dir`` threads); the dirs with a log that failed to close,
        mapped to False (they get no clean-shutdown marker). Thread-safe: a snapshot of the live
        logs; each flush and close takes that log's lock."""
        clean: dict[Path, bool] = {}

        def close_one(item: tuple[TopicPartition, Log]) -> None:
            tp, lg = item
            try:
                lg.flush()
                lg.close()
            except Exception as e:  # noqa: BLE001 - the other logs must still close
                log.error("%s: failed to close cleanly: %s", tp, describe_error(e))
                clean[lg.dir.parent] = False

        with ThreadPoolExecutor(max_workers=self._broker.num_recovery_threads_per_data_dir) as pool:
            list(pool.map(close_one, self._logs()))
        return clean


def _log_start_entry(lg: Log) -> int | None:
    """Kafka's rule: a tiered log's log start offset is always checkpointed (its records below the
    first local segment are the remote tier's); another log's only when above its first segment."""
    if lg.config.remote_storage_enable:
        return lg.log_start_offset
    first = lg.segments[0].base_offset if lg.num_segments else lg.log_start_offset
    return lg.log_start_offset if lg.log_start_offset > first else None
