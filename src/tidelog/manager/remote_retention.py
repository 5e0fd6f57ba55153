"""RemoteRetention: the remote tier's retention for a LogManager (Kafka's ``RLMExpirationTask``
per tiered partition, and the deletion of a partition's remote data).

- :meth:`RemoteRetention.expiration_pass`: per tiered partition (``remote.storage.enable``, copying
  on or off), :mod:`tidelog.remote.expiration`'s steps on the partition's cached metadata,
  ``remote.log.manager.expiration.thread.pool.size`` partitions at a time. The log start offsets it
  raises are checkpointed (the manager's ``checkpoint_log_start_offsets``, once per pass) before
  any delete; a checkpoint whose log dir failed deletes nothing of its logs. A pass makes no
  LIST: the metadata was loaded once per partition per process; with nothing to delete it makes
  no request at all, and no checkpoint.
- :meth:`RemoteRetention.deleting`: around a topic deletion or a config change that turns
  ``remote.storage.enable`` off with ``remote.log.delete.on.disable=true``: a pending-deletion
  object is written first, the change is made, then the partitions' remote data goes
  (:mod:`tidelog.remote.partition_delete`); for a disable, each live log's start offset first
  moves to its local log start offset (Kafka's ``ConfigHandler``) and is checkpointed.
- :meth:`RemoteRetention.resume_pending`: once per process (and again after a failed deletion),
  finishes the deletions a crash or an outage left (or drops those whose change did not commit).

Thread-safety: every public method is thread-safe; the per-partition work holds the partition
metadata's ``task_lock``; the dicts of last plans and errors and the pending-deletion bookkeeping
are under ``_lock``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Protocol

from tidelog.clock import Clock
from tidelog.errors import StorageError, TidelogError
from tidelog.remote.errors import RemoteStorageError, with_context
from tidelog.remote.expiration import ExpirationPlan, carry_out, plan_for_log, prepare_expiration
from tidelog.remote.metadata import TopicIdPartition
from tidelog.remote.metadata_log import RemotePartitionMetadata
from tidelog.remote.partition_delete import (
    REMOTE_DISABLED,
    TOPIC_DELETED,
    PendingDeletion,
    finish_pending,
    list_pending,
    record_pending,
)
from tidelog.remote.store import RemoteStore
from tidelog.storage.config import BrokerConfig
from tidelog.storage.log import Log
from tidelog.topic_partition import TopicPartition

log = logging.getLogger(__name__)

__all__ = ["REMOTE_DISABLED", "TOPIC_DELETED", "RemoteRetention", "remote_data_deletion", "turns_tiering_off"]


class RemoteRetention:
    """Remote retention of one LogManager's remote tier (module docstring). ``metadata_of``: the
    partition's metadata, loaded once then cached (the tier's); ``cached``: the cached one or
    None; ``forget``: drop the cached one; ``topic_id_of``: a live topic's id (raises for an
    unknown topic). Set :attr:`checkpoint_log_start_offsets` to the manager's checkpoint."""

    def __init__(self, broker: BrokerConfig, store: RemoteStore, clock: Clock,
                 logs: Callable[..., list[tuple[TopicPartition, Log]]],
                 metadata_of: Callable[[TopicPartition, Log], RemotePartitionMetadata],
                 cached: Callable[[TopicPartition], RemotePartitionMetadata | None],
                 forget: Callable[[TopicPartition], None], topic_id_of: Callable[[str], str]) -> None:
        self.store = store
        self._broker = broker
        self._clock = clock
        self._logs = logs
        self._metadata_of = metadata_of
        self._cached = cached
        self._forget = forget
        self._topic_id_of = topic_id_of
        #: Makes every log dir's log start offsets durable (the manager's checkpoint).
        self.checkpoint_log_start_offsets: Callable[[], None] = lambda: None
        self._lock = threading.Lock()
        self._last_plans: dict[TopicPartition, ExpirationPlan] = {}
        self._last_errors: dict[TopicPartition, str] = {}
        self._resumed = False
        self._in_flight: set[str] = set()  # pending-deletion keys of changes running in deleting()
        self._failed_settles = 0  # deleting()'s failures so far

    # --- expiration -----------------------------------------------------------------------------

    def expiration_pass(self, topic: str | None = None, *, dry_run: bool = False) -> dict[TopicPartition, ExpirationPlan]:
        """One expiration of every tiered partition (of ``topic``): the plan each carried out (or,
        with ``dry_run``, would), in two phases of ``expiration.thread.pool.size`` workers: every
        partition's plan made and log start offset raised; ONE checkpoint of the log start
        offsets (not one per partition: the file lists every partition of its dir); then the
        deletes, of the logs still live (a failed checkpoint takes its dir's logs out). A
        partition's failure is logged and kept (:meth:`last_error`); the others go on. Thread-safe."""
        tiered = [(tp, lg) for tp, lg in self._logs(topic) if lg.config.remote_storage_enable]
        if not tiered:
            return {}
        workers = max(1, min(self._broker.remote_log_manager_expiration_thread_pool_size, len(tiered)))
        with ThreadPoolExecutor(workers, thread_name_prefix="tidelog-remote-expiration") as pool:
            prepared = list(pool.map(lambda item: self._prepare(*item, dry_run=dry_run), tiered))
            made = {tp: found for (tp, _), found in zip(tiered, prepared) if found is not None}
            plans = {tp: plan for tp, (plan, _) in made.items()}
            doomed = [(tp, lg, *made[tp]) for tp, lg in tiered if tp in made and made[tp][0].deletions]
            if doomed and not dry_run:
                self.checkpoint_log_start_offsets()
                live = {id(lg) for _, lg in self._logs(topic)}
                done = pool.map(lambda item: self._carry_out(*item, live=id(item[1]) in live), doomed)
                for (tp, *_), ok in zip(doomed, list(done)):
                    if not ok:
                        del plans[tp]
        return plans

    def _prepare(self, tp: TopicPartition, lg: Log, *,
                 dry_run: bool) -> tuple[ExpirationPlan, RemotePartitionMetadata] | None:
        """The plan and the metadata it was made on (the deletes go through that same instance)."""
        try:
            metadata = self._metadata_of(tp, lg)
            if dry_run:  # recorded nowhere: last_plan and last_error are of passes carried out
                return plan_for_log(lg, metadata, self._clock.milliseconds()), metadata
            plan = prepare_expiration(self.store, metadata, lg, now_ms=self._clock.milliseconds())
        except TidelogError as e:
            if not dry_run:
                self._failed(tp, e)
            else:
                log.warning("%s: remote retention not planned: %s", tp, e)
            return None
        if not plan.deletions:
            self._succeeded(tp, plan)
        return plan, metadata

    def _carry_out(self, tp: TopicPartition, lg: Log, plan: ExpirationPlan, metadata: RemotePartitionMetadata, *,
                   live: bool) -> bool:
        try:
            if not live:
                raise StorageError(f"{tp}: no longer live after the log start offset checkpoint (its log dir went "
                                   "offline, or it was deleted): no remote segment deleted", path=lg.dir)
            carry_out(self.store, metadata, plan)
        except TidelogError as e:
            self._failed(tp, e)
            return False
        self._succeeded(tp, plan)
        return True

    def _succeeded(self, tp: TopicPartition, plan: ExpirationPlan) -> None:
        with self._lock:
            self._last_plans[tp] = plan
            self._last_errors.pop(tp, None)

    def _failed(self, tp: TopicPartition, error: TidelogError) -> None:
        log.warning("%s: remote retention failed: %s", tp, error)
        with self._lock:
            self._last_errors[tp] = str(error)

    def plan(self, tp: TopicPartition, lg: Log) -> ExpirationPlan | None:
        """What the next expiration would delete from ``tp``, on the cached metadata (None before
        it is loaded). No request. Thread-safe."""
        metadata = self._cached(tp)
        return None if metadata is None else plan_for_log(lg, metadata, self._clock.milliseconds())

    def last_error(self, tp: TopicPartition) -> str | None:
        """The last expiration's error for ``tp``, None after a success. Thread-safe."""
        with self._lock:
            return self._last_errors.get(tp)

    def last_plan(self, tp: TopicPartition) -> ExpirationPlan | None:
        """The last expiration carried out on ``tp`` by this process. Thread-safe."""
        with self._lock:
            return self._last_plans.get(tp)

    # --- deleting a partition's remote data -----------------------------------------------------

    @contextmanager
    def deleting(self, topic: str, topic_id: str, partitions: int, reason: str) -> Iterator[None]:
        """Around the change that calls for deleting ``topic``'s remote data (``reason``:
        :data:`~tidelog.remote.partition_delete.TOPIC_DELETED` or ``REMOTE_DISABLED``): the
        pending-deletion object is written first (a store failure raises, naming the topic, and
        the change is not made), then the change runs; if it raised, the object is dropped; else the data goes
        (failures are logged; :meth:`resume_pending` at the next pass finishes). Meanwhile
        :meth:`resume_pending` leaves the object alone. Thread-safe."""
        pending = PendingDeletion(topic, topic_id, partitions, reason)
        with self._lock:
            self._in_flight.add(pending.key)
        try:
            try:
                record_pending(self.store, pending)
            except RemoteStorageError as e:
                change = "not deleted" if reason == TOPIC_DELETED else "remote.storage.enable is not turned off"
                raise with_context(e, f"topic {topic}: {change}: the pending deletion of its remote data could not "
                                      f"be written: {e.message}", topic=topic, key=pending.key) from e
            try:
                yield
            except BaseException:
                self._settle_in_flight(pending)
                raise
            self._settle_in_flight(pending)
        finally:
            with self._lock:
                self._in_flight.discard(pending.key)

    def _settle_in_flight(self, pending: PendingDeletion) -> None:
        if not self._settle(pending):
            with self._lock:  # the next pass lists the pending deletions again
                self._resumed, self._failed_settles = False, self._failed_settles + 1

    def resume_pending(self) -> None:
        """Finish every pending deletion the store holds whose change committed, drop the others
        (those of a change in flight in :meth:`deleting` are left to it). Runs once per process,
        and again after a failure (its own or :meth:`deleting`'s): one LIST then. Failures are
        logged and retried at the next call. Thread-safe."""
        with self._lock:
            if self._resumed:
                return
            failed_before = self._failed_settles
        try:
            pending = list_pending(self.store)
        except TidelogError as e:
            log.error("remote tier: pending remote deletions not read (retried at the next pass): %s", e)
            return
        settled = [self._settle(p) for p in pending if not self._is_in_flight(p)]
        with self._lock:  # a deletion that failed meanwhile is listed again at the next pass
            self._resumed = all(settled) and self._failed_settles == failed_before

    def _is_in_flight(self, pending: PendingDeletion) -> bool:
        with self._lock:
            return pending.key in self._in_flight

    def _settle(self, pending: PendingDeletion) -> bool:
        """Finish ``pending`` when its change committed, else drop its object; False on a store
        failure. A topic re-created under the same name (a new topic id) is never touched: only
        metadata cached for ``pending``'s topic id is used and forgotten, and only the logs of
        that topic id have their log start offsets moved."""
        try:
            live = self._live_topic_id(pending.topic) == pending.topic_id
            if live and not self._committed_in_place(pending):
                self.store.delete(pending.key)
                return True
            if live and pending.reason == REMOTE_DISABLED:
                self._move_log_starts(pending.topic)
            finish_pending(self.store, pending, self._cached_for)
            return True
        except TidelogError as e:
            log.error("remote data of topic %s not deleted yet (%s; retried at the next pass): %s",
                      pending.topic, pending.reason, e)
            return False
        finally:
            for number in range(pending.partitions):
                tip = pending.partition(number)
                if self._cached_for(tip) is not None:
                    self._forget(tip.topic_partition)

    def _cached_for(self, tip: TopicIdPartition) -> RemotePartitionMetadata | None:
        """The cached metadata of ``tip``'s partition when it is of ``tip``'s topic id, else None."""
        metadata = self._cached(tip.topic_partition)
        return metadata if metadata is not None and metadata.topic_id_partition == tip else None

    def _live_topic_id(self, topic: str) -> str | None:
        try:
            return self._topic_id_of(topic)
        except TidelogError:
            return None

    def _committed_in_place(self, pending: PendingDeletion) -> bool:
        """Whether the change ``pending`` was written for took effect, its topic (by id) still
        live: never for a deletion; for a disable, when none of the topic's live logs is tiered.
        Raises ``StorageError`` (the object stays for a later pass) when no log is live (their
        dirs offline): not known."""
        if pending.reason == TOPIC_DELETED:
            return False
        live = self._logs(pending.topic)
        if not live:
            raise StorageError(f"topic {pending.topic}: no live log tells whether remote.storage.enable was turned "
                               "off (its log dirs are offline); the pending remote deletion waits", key=pending.key)
        return not any(lg.config.remote_storage_enable for _, lg in live)

    def _move_log_starts(self, topic: str) -> None:
        """Kafka's ``ConfigHandler`` on a disable with delete: each live log starts at its local log
        start offset (never past its high watermark), checkpointed before the remote data goes."""
        for tp, lg in self._logs(topic):
            target = min(lg.local_log_start_offset, lg.high_watermark)
            lg.maybe_increment_log_start_offset(target, "remote storage disabled with remote.log.delete.on.disable")
        self.checkpoint_log_start_offsets()


_ENABLE = "remote.storage.enable"
_DELETE_ON_DISABLE = "remote.log.delete.on.disable"


def _true(value: object) -> bool:
    return str(value).strip().lower() == "true"  # Kafka's Boolean.parseBoolean


def turns_tiering_off(current: Mapping[str, str], set: Mapping[str, str] | None, delete: Iterable[str]) -> bool:
    """Whether an alter of a topic whose overrides are ``current`` (SET ``set``, DELETE ``delete``)
    turns ``remote.storage.enable`` from true to false with ``remote.log.delete.on.disable=true``
    (the change that deletes the remote data; without the flag the alter is refused anyway)."""
    removed = frozenset(delete)
    merged = {k: v for k, v in current.items() if k not in removed}
    merged.update({k: str(v) for k, v in (set or {}).items()})
    return _true(current.get(_ENABLE, "false")) and not _true(merged.get(_ENABLE, "false")) \
        and _true(merged.get(_DELETE_ON_DISABLE, "false"))


@contextmanager
def remote_data_deletion(tier: _Tier | None, record_of: Callable[[], _Record],
                         alter: tuple[Mapping[str, str] | None, Iterable[str]] | None = None) -> Iterator[None]:
    """:meth:`RemoteRetention.deleting` around a topic change that deletes remote data: the topic's
    deletion (``alter`` None) when it is tiered, or an alter (``alter``: its SET and DELETE) that
    :func:`turns_tiering_off`; otherwise (no remote tier, a topic the lookup ``record_of`` does not
    find: the change raises its own error) just the change."""
    record = None
    if tier is not None:
        try:
            record = record_of()
        except TidelogError:
            record = None
    if record is None or tier is None:
        yield
        return
    if alter is None:
        reason = TOPIC_DELETED if _true(record.configs.get(_ENABLE, "false")) else None
    else:
        reason = REMOTE_DISABLED if turns_tiering_off(record.configs, *alter) else None
    if reason is None:
        yield
        return
    with tier.retention.deleting(record.name, record.topic_id, record.partitions, reason):
        yield


class _Record(Protocol):
    name: str
    topic_id: str
    partitions: int
    configs: Mapping[str, str]


class _Tier(Protocol):
    retention: RemoteRetention
