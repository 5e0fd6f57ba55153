"""RemoteTier: the LogManager's remote tier (Kafka's ``RemoteLogManager``, copy side).

Built by the manager when ``remote.log.storage.system.enable`` is on, over the store at
``remote.log.storage.uri`` (options: the ``rsm.config.`` keys). Every
``remote.log.manager.task.interval.ms`` a copy pass runs over the live logs of tiered topics
(``remote.storage.enable``), ``remote.log.manager.copier.thread.pool.size`` partitions at a time.
For each partition it:

1. loads the partition's remote metadata once (one LIST of its ``metadata/`` prefix; kept in
   memory after, this process being the partition's only writer) and tells the log the highest
   offset the remote tier holds (Kafka's ``updateHighestOffsetInRemoteStorage``: until then local
   retention deletes nothing of a tiered log, after a restart too);
2. unless ``remote.log.copy.disable``, runs :func:`tidelog.remote.copy.copy_log` (cleanup of what a
   crash left, then every sealed segment below the last stable offset not yet copied), and tells
   the log the new highest offset, also after a failure.

The last outcome per partition (copied segments, the error and when) is kept for
:meth:`RemoteTier.status`. After the copy pass, the same task runs remote retention
(:class:`~tidelog.manager.remote_retention.RemoteRetention`, :attr:`RemoteTier.retention`). A
copy failing with a retriable store error is retried after a backoff by :attr:`RemoteTier.retries`
(:mod:`tidelog.remote.backoff`), a non-retriable one at the next pass; a pass leaves a partition
waiting for its retry alone.

Thread-safety: every public method is thread-safe. Passes take ``_pass_lock`` (one at a time, so
a partition never has two copiers), the per-partition state ``_lock``; logs are read through
their own locks by the functions called.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from tidelog.clock import Clock
from tidelog.errors import TidelogError
from tidelog.manager.remote_retention import RemoteRetention
from tidelog.remote.backoff import Backoff, CopyRetries
from tidelog.remote.copy import copy_log
from tidelog.remote.errors import RemoteStorageError
from tidelog.remote.metadata import TopicIdPartition
from tidelog.remote.metadata_log import RemotePartitionMetadata
from tidelog.remote.quota import CopyQuota
from tidelog.remote.store import RemoteStore, open_store
from tidelog.scheduler import Scheduler
from tidelog.storage.config import BrokerConfig
from tidelog.storage.log import Log
from tidelog.topic_partition import TopicPartition

log = logging.getLogger(__name__)

TASK_NAME = "tidelog-remote-log-copy"


@dataclass(frozen=True, slots=True)
class TieredPartitionStatus:
    """One tiered partition as ``tidelog tiered status`` shows it."""

    topic_partition: TopicPartition
    log_start_offset: int
    local_log_start_offset: int
    log_end_offset: int
    highest_remote_offset: int  # -1: none
    remote_segments: int
    remote_bytes: int
    copy_lag_segments: int  # sealed local segments not yet in the remote tier (Kafka's RemoteCopyLagSegments)
    copy_lag_bytes: int
    copy_enabled: bool
    last_error: str | None  # the last pass's error, None when it succeeded or none ran
    last_pass_ms: int | None
    # what remote retention would delete next and why (ExpirationPlan.to_json(); None before the
    # metadata is loaded), and the last expiration's error
    remote_retention: dict[str, object] | None = None
    remote_retention_error: str | None = None

    def summary(self, task_interval_ms: int) -> str:
        """One line for ``tidelog explain``: both tiers' ranges, and what waits to be copied and why."""
        local = f"local [{self.local_log_start_offset}, {self.log_end_offset})"
        remote = (f"remote [{self.log_start_offset}, {self.highest_remote_offset}] in {self.remote_segments} segment(s)"
                  if self.highest_remote_offset >= 0 else "remote tier empty")
        if not self.copy_enabled:
            waiting = "copying is off (remote.log.copy.disable): nothing more is copied"
        elif self.last_error is not None:
            waiting = f"{self.copy_lag_segments} segment(s) waiting to be copied; the last copy failed: {self.last_error}"
        elif self.copy_lag_segments:
            waiting = (f"{self.copy_lag_segments} sealed segment(s) waiting to be copied: the next copy pass "
                       f"(every {task_interval_ms} ms) copies those below the last stable offset")
        else:
            waiting = "nothing waiting to be copied: the active segment is copied once it is rolled"
        expiring = ""
        if self.remote_retention is not None:
            expiring = f"; {self.remote_retention['summary']}"
        if self.remote_retention_error is not None:
            expiring += f"; the last remote retention failed: {self.remote_retention_error}"
        return f"tiered: {local}, {remote}; {waiting}{expiring}"


@dataclass(slots=True)
class _PartitionState:
    metadata: RemotePartitionMetadata | None = None  # None until loaded
    last_error: str | None = None
    last_pass_ms: int | None = None


class RemoteTier:
    """The copy side of the remote tier for one LogManager (see the module doc). ``logs``: the
    manager's live logs; ``topic_id_of``: a topic's id (objects are named by it)."""

    def __init__(self, broker: BrokerConfig, store: RemoteStore, clock: Clock, scheduler: Scheduler,
                 logs: Callable[..., list[tuple[TopicPartition, Log]]],
                 topic_id_of: Callable[[str], str], is_closed: Callable[[], bool] = lambda: False) -> None:
        self.store = store
        self._is_closed = is_closed
        self._broker = broker
        self._clock = clock
        self._scheduler = scheduler
        self._logs = logs
        self._topic_id_of = topic_id_of
        self._quota = CopyQuota(broker.remote_log_manager_copy_max_bytes_per_second, clock=clock)
        self._lock = threading.Lock()
        self._pass_lock = threading.Lock()
        self._partitions: dict[TopicPartition, _PartitionState] = {}
        self._started = False
        backoff = Backoff(broker.remote_log_manager_task_retry_backoff_ms,
                          broker.remote_log_manager_task_retry_backoff_max_ms, broker.remote_log_manager_task_retry_jitter)
        self.retries = CopyRetries[TopicPartition](backoff, clock, scheduler, self._retry, is_closed=is_closed)
        #: Remote retention (Kafka's RLMExpirationTask) and deletion of remote data; run after each copy pass.
        self.retention = RemoteRetention(broker, store, clock, logs, self._learn, self._cached, self.forget,
                                         topic_id_of)

    @classmethod
    def for_broker(cls, broker: BrokerConfig, clock: Clock, scheduler: Scheduler,
                   logs: Callable[..., list[tuple[TopicPartition, Log]]], topic_id_of: Callable[[str], str],
                   is_closed: Callable[[], bool]) -> RemoteTier | None:
        """The remote tier the broker config asks for; None with ``remote.log.storage.system.enable`` off."""
        if not broker.remote_log_storage_system_enable:
            return None
        store = open_store(broker.remote_log_storage_uri, dict(broker.rsm_config))
        return cls(broker, store, clock, scheduler, logs, topic_id_of, is_closed)

    def startup(self) -> None:
        """Schedule the copy pass every ``remote.log.manager.task.interval.ms``; idempotent. Thread-safe."""
        with self._lock:
            if self._started:
                return
            self._started = True
        period = self._broker.remote_log_manager_task_interval_ms
        self._scheduler.schedule_periodic(TASK_NAME, self._periodic_pass, period, period)

    def _periodic_pass(self) -> None:
        if self._is_closed():  # the scheduler may outlive the manager
            return
        try:
            self.copy_pass()
        except Exception:  # noqa: BLE001 - a pass must not kill the scheduler's thread
            log.exception("remote tier: copy pass failed")
        try:  # Kafka's RLMExpirationTask, after the copy (also for topics with copying off)
            self.retention.resume_pending()
            self.retention.expiration_pass()
        except Exception:  # noqa: BLE001 - as above
            log.exception("remote tier: expiration pass failed")

    def copy_pass(self, topic: str | None = None) -> dict[TopicPartition, int]:
        """One pass over the tiered logs (of ``topic``): returns, per partition, how many segments
        were copied. A partition's failure is logged and kept for :meth:`status`; it does not stop
        the others; one waiting for its retry after a retriable error is left to the retry
        (:mod:`tidelog.remote.backoff`). Thread-safe: passes run one at a time."""
        tiered = [(tp, lg) for tp, lg in self._logs(topic) if lg.config.remote_storage_enable]
        return self._copy_each([item for item in tiered if not self.retries.waiting(item[0])])

    def _retry(self, due: list[TopicPartition]) -> None:
        """The backoff's retry task: copy the partitions in ``due`` that are still live and tiered."""
        wanted = set(due)
        self._copy_each([(tp, lg) for tp, lg in self._logs(None) if tp in wanted and lg.config.remote_storage_enable])

    def _copy_each(self, tiered: list[tuple[TopicPartition, Log]]) -> dict[TopicPartition, int]:
        with self._pass_lock:
            workers = max(1, min(self._broker.remote_log_manager_copier_thread_pool_size, len(tiered)))
            with ThreadPoolExecutor(workers, thread_name_prefix="tidelog-remote-copier") as pool:
                counts = list(pool.map(lambda item: self._copy_partition(*item), tiered))
        return {tp: count for (tp, _), count in zip(tiered, counts)}

    def _copy_partition(self, tp: TopicPartition, lg: Log) -> int:
        try:
            metadata = self._learn(tp, lg)
            copied = []
            if lg.config.remote_copy_enabled:
                try:
                    with metadata.task_lock:
                        copied = copy_log(lg, self.store, metadata, epochs=lg.leader_epoch_cache.entries,
                                          clock=self._clock, delete_delay_ms=lg.config.file_delete_delay_ms,
                                          quota=self._quota)
                finally:
                    lg.update_highest_offset_in_remote_storage(metadata.highest_offset())
            self._note(tp, None)
            self.retries.succeeded(tp)
            return len(copied)
        except TidelogError as e:
            delay = self.retries.failed(tp, e)
            when = "at the next pass" if delay is None else f"in {delay} ms (failure {self.retries.failures(tp)} in a row)"
            log.warning("%s: remote copy failed, retried %s: %s", tp, when, e)
            self._note(tp, f"{e}; retried {when}")
            return 0

    def _learn(self, tp: TopicPartition, lg: Log) -> RemotePartitionMetadata:
        """The partition's remote metadata (loaded on first use, then kept), and the log told the
        highest offset it holds (Kafka's ``updateHighestOffsetInRemoteStorage``)."""
        with self._lock:
            metadata = self._partitions.setdefault(tp, _PartitionState()).metadata
        if metadata is None:
            tip = TopicIdPartition(self._topic_id_of(tp.topic), tp)
            loaded = RemotePartitionMetadata.load(self.store, tip, clock=self._clock)
            with self._lock:
                state = self._partitions.get(tp)
                if state is None:  # forget() ran meanwhile: what was loaded may be gone from the store
                    raise RemoteStorageError(f"{tp}: the remote metadata was dropped while it loaded (its remote "
                                             "data was deleted meanwhile); it is loaded again at the next use",
                                             partition=str(tp), uri=self.store.uri)
                metadata = state.metadata = state.metadata or loaded
        lg.update_highest_offset_in_remote_storage(metadata.highest_offset())
        return metadata

    def _note(self, tp: TopicPartition, error: str | None) -> None:
        now = self._clock.milliseconds()
        with self._lock:
            state = self._partitions.setdefault(tp, _PartitionState())
            state.last_error, state.last_pass_ms = error, now

    def metadata_of(self, tp: TopicPartition, lg: Log) -> RemotePartitionMetadata:
        """The partition's remote metadata for a reader (loaded on first use as a pass does, then
        kept); the log is told its highest remote offset. Thread-safe: ``_lock``, the log's lock."""
        return self._learn(tp, lg)

    def cleaner_source(self, tp: TopicPartition, lg: Log,
                       load: bool) -> tuple[RemoteStore, RemotePartitionMetadata] | None:
        """The log cleaner's access to a tiered log's remote tier
        (:data:`tidelog.cleaner.remote_clean.RemoteSource`): the store and the partition's
        metadata, loaded if needed when ``load`` (else only what is cached: no I/O); None for a
        log that is not tiered. Thread-safe: ``_lock`` (and the log's lock when loading)."""
        if not lg.config.remote_storage_enable:
            return None
        if load:
            return self.store, self._learn(tp, lg)
        with self._lock:
            state = self._partitions.get(tp)
        return None if state is None or state.metadata is None else (self.store, state.metadata)

    def refresh(self, topic: str | None = None) -> None:
        """Load the remote metadata of every tiered partition (of ``topic``) not loaded yet and tell
        each log its highest remote offset, copying nothing (what a status needs in a process
        that ran no pass). A failure is kept for :meth:`status`. Thread-safe."""
        for tp, lg in self._logs(topic):
            if lg.config.remote_storage_enable:
                try:
                    self._learn(tp, lg)
                except TidelogError as e:
                    self._note(tp, str(e))

    @property
    def task_interval_ms(self) -> int:
        """``remote.log.manager.task.interval.ms``: how often the copy pass runs. Thread-safe."""
        return self._broker.remote_log_manager_task_interval_ms

    def status(self, topic: str | None = None) -> list[TieredPartitionStatus]:
        """Each tiered partition's local and remote ranges, copy lag and last error, as of the
        last pass (remote figures from this process's cached metadata). Thread-safe."""
        return [self._status_of(tp, lg) for tp, lg in self._logs(topic) if lg.config.remote_storage_enable]

    def _status_of(self, tp: TopicPartition, lg: Log) -> TieredPartitionStatus:
        with self._lock:
            state = self._partitions.get(tp) or _PartitionState()
        finished = state.metadata.finished_segments() if state.metadata is not None else []
        highest = lg.highest_offset_in_remote_storage
        sealed = lg.segments[:-1]
        lagging = [s for s in sealed if s.base_offset > highest]
        return TieredPartitionStatus(
            tp, lg.log_start_offset, lg.local_log_start_offset, lg.log_end_offset, highest, len(finished),
            sum(m.segment_size_in_bytes for m in finished), len(lagging), sum(s.size for s in lagging),
            lg.config.remote_copy_enabled, state.last_error, state.last_pass_ms,
            *self._retention_of(tp, lg))

    def _retention_of(self, tp: TopicPartition, lg: Log) -> tuple[dict[str, object] | None, str | None]:
        plan = self.retention.plan(tp, lg)
        return (None if plan is None else plan.to_json()), self.retention.last_error(tp)

    def _cached(self, tp: TopicPartition) -> RemotePartitionMetadata | None:
        with self._lock:
            state = self._partitions.get(tp)
        return None if state is None else state.metadata

    def forget(self, tp: TopicPartition) -> None:
        """Drop ``tp``'s cached remote metadata (its remote data was deleted): the next use loads
        it again. Thread-safe: takes ``_lock``."""
        with self._lock:
            self._partitions.pop(tp, None)
