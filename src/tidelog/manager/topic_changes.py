"""The LogManager's topic changes: create a topic, add partitions, delete a topic, alter its
overrides; each recorded in the topic registry first (:class:`.topic_registry.TopicRegistry`),
then applied to the partition dirs.

* **Create** (and add partitions): each new partition goes to the online log dir holding the
  fewest (Kafka's ``nextLogDirs``); a dir that cannot be created is set aside (the registry
  already says it exists: the next start-up tries again).
* **Delete**: dirs renamed ``-delete``, removed after the broker's ``log.segment.delete.delay.ms``;
  a partition whose dir is offline is renamed once the dir is back.
* **Alter**: overrides validated as a whole, persisted, applied to the live logs at once.

:class:`TopicChanges` is a component of :class:`~tidelog.manager.manager.LogManager`
(``manager.topic_changes``): it works on the :class:`~.partition_map.PartitionMap` and the
:class:`~.topic_registry.TopicRegistry` it shares with the manager, opens new logs with the
:class:`~.loading.PartitionLoader`, and uses :class:`~.offline_dirs.OfflineDirs` (online dirs, a
disk fault) and :class:`~.registry_sync.RegistrySync` (holds, the partitions' registry copies).

Thread-safety: every change runs under the partition map's lock (the manager's); :meth:`TopicChanges.delete_topic`
waits for the cleaner to leave the topic's partitions before taking it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from types import MappingProxyType

from tidelog.cleaner.log_cleaner import LogCleaner
from tidelog.errors import (
    InvalidPartitionsError,
    InvalidRequestError,
    LogDirOfflineError,
    StorageError,
    TidelogError,
    TopicExistsError,
)
from tidelog.manager.internal_topics import check_deletable
from tidelog.manager.loading import PartitionLoader, close_failed_log
from tidelog.manager.log_dir import LogDir, describe_error
from tidelog.manager.offline_dirs import OfflineDirs
from tidelog.manager.partition_map import PartitionMap
from tidelog.manager.registry_sync import RegistrySync, placed_assignments, read_topic_id
from tidelog.manager.reports import SetAside, TopicDescription
from tidelog.manager.topic_copies import write_topic_copy
from tidelog.manager.topic_registry import TopicRegistry
from tidelog.manager.topics import RegistryState, TopicRecord, check_collision, validate_topic_name
from tidelog.scheduler import Scheduler
from tidelog.storage import fileops, files
from tidelog.storage.atomic import fsync_dir
from tidelog.storage.config import BrokerConfig, LogConfig, check_topic_config_names
from tidelog.storage.log import Log
from tidelog.storage.metadata import PartitionMetadataFile, new_topic_id
from tidelog.topic_partition import TopicPartition

log = logging.getLogger(__name__)

CLUSTER_METADATA_TOPIC = "__cluster_metadata"


class TopicChanges:
    """Topic creation, growth, deletion and config changes of a LogManager (see the module doc).
    ``describe_topic``: the manager's description of a topic (the answer of a create);
    ``ensure_open``: raises once the manager is shut down."""

    def __init__(self, broker: BrokerConfig, partition_map: PartitionMap, topic_registry: TopicRegistry,
                 loader: PartitionLoader, scheduler: Scheduler, offline_dirs: OfflineDirs,
                 registry_sync: RegistrySync, cleaner: LogCleaner | None,
                 describe_topic: Callable[[str], TopicDescription], ensure_open: Callable[[], None]) -> None:
        self._broker = broker
        self._map = partition_map
        self._topic_registry = topic_registry
        self._loader = loader
        self._scheduler = scheduler
        self._offline_dirs = offline_dirs
        self._registry_sync = registry_sync
        self.cleaner = cleaner
        self._describe_topic = describe_topic
        self._ensure_open = ensure_open

    @property
    def _registry(self) -> RegistryState:
        return self._topic_registry.state

    def create_topic(self, name: str, partitions: int = 1, configs: Mapping[str, str] | None = None) -> TopicDescription:
        """Create ``name`` with ``partitions`` partitions and topic-level ``configs`` overrides.

        Errors (nothing is created then): :class:`InvalidTopicError` (name, or a ``.``/``_``
        collision), :class:`TopicExistsError`, :class:`InvalidPartitionsError`, :class:`ConfigError`.
        Thread-safe: under the manager's lock (the registry written, the partition dirs created).
        """
        validate_topic_name(name)
        if name == CLUSTER_METADATA_TOPIC:
            raise InvalidRequestError(f"Creation of internal topic {name} is prohibited.", topic=name)
        overrides = {k: str(v) for k, v in (configs or {}).items()}
        with self._map.lock:
            self._ensure_open()
            if name in self._registry.topics:
                raise TopicExistsError(f"Topic '{name}' already exists.", topic=name)
            check_collision(name, list(self._registry.topics))
            if partitions < 1:
                raise InvalidPartitionsError("Number of partitions was set to an invalid non-positive value.",
                                             topic=name, partitions=partitions)
            self._broker.checked_topic_config(name, overrides)  # validates every override before anything is written
            placement = self.place(partitions)
            record = TopicRecord(name, new_topic_id(), partitions, MappingProxyType(overrides),
                                 placed_assignments(placement))
            self.commit({**self._registry.topics, name: record}, self._registry.deleted_topic_ids)
            self.create_partition_dirs(record, placement)
            return self._describe_topic(name)

    def create_partitions(self, name: str, total: int) -> TopicDescription:
        """Grow ``name`` to ``total`` partitions (Kafka's CreatePartitions: never shrinks).
        Thread-safe: under the manager's lock; the wait for a held topic's cleaning comes after it."""
        with self._map.lock:
            self._ensure_open()
            record = self._topic_registry.record(name)
            if total == record.partitions:
                raise InvalidPartitionsError(f"Topic already has {total} partitions.", topic=name)
            if total < record.partitions:
                raise InvalidPartitionsError(
                    f"Topic currently has {record.partitions} partitions, which is higher than the requested {total}.",
                    topic=name,
                )
            placement = dict(zip(range(record.partitions, total), self.place(total - record.partitions).values()))
            grown = record.replace(partitions=total,
                                   assignments=MappingProxyType({**record.assignments, **placed_assignments(placement)}))
            self.commit({**self._registry.topics, name: grown}, self._registry.deleted_topic_ids)
            self.create_partition_dirs(grown, placement)
            held = self._registry_sync.hold_unconfirmed()  # new partitions of a held topic are held too
            described = self._describe_topic(name)
        self._registry_sync.await_held(held)
        return described

    def place(self, count: int) -> dict[int, LogDir]:
        """Kafka's ``nextLogDirs`` for ``count`` new partitions in turn: each to the dir holding
        the fewest partitions (first listed on a tie). The caller holds the map's lock."""
        online = self._offline_dirs.online_dirs()
        if not online and count:
            raise LogDirOfflineError("every log dir is offline: no partition can be created",
                                     log_dirs=", ".join(str(d.path) for d in self._map.dirs))
        counts = {id(d): 0 for d in online}
        for log_dir in self._map.log_dir_of.values():
            counts[id(log_dir)] = counts.get(id(log_dir), 0) + 1
        placement = {}
        for partition in range(count):
            chosen = min(online, key=lambda d: counts[id(d)])
            counts[id(chosen)] += 1
            placement[partition] = chosen
        return placement

    def create_partition_dirs(self, record: TopicRecord, placement: Mapping[int, LogDir]) -> None:
        """Create the dirs of a committed change; one that fails is set aside (the registry
        already says the partition exists: the next start-up tries again). The caller holds the
        map's lock (each new log registered under it)."""
        for partition, log_dir in placement.items():
            try:
                self._create_partition(record, partition, log_dir)
            except TidelogError as e:
                tp = TopicPartition(record.name, partition)
                where = files.partition_dir(log_dir.path, tp)
                log.error("%s: cannot create partition dir: %s", where, e)
                self._map.set_aside[where] = SetAside(where, f"cannot create its dir: {describe_error(e)}", tp)

    def delete_topic(self, name: str) -> None:
        """Delete ``name``: recorded in the registry first, then each partition dir is renamed
        ``-delete`` and removed after the broker's ``log.segment.delete.delay.ms``. A clean in
        progress on one of its partitions is aborted first, or waited for when a dir failure or
        a hold aborted it already (outside the manager's lock: the cleaner thread may need it to
        finish its current step). An internal topic is refused (:func:`.internal_topics.check_deletable`):
        every door, the broker's DeleteTopics and the CLI alike, gets the same answer.
        Thread-safe: the registry and the partition map change under the manager's lock."""
        check_deletable(name)
        doomed_tps = [TopicPartition(name, p) for p in range(self._topic_registry.record(name).partitions)]
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
        with self._map.lock:
            self._ensure_open()
            record = self._topic_registry.record(name)
            remaining = {k: v for k, v in self._registry.topics.items() if k != name}
            self.commit(remaining, self._registry.deleted_topic_ids | {record.topic_id})
            self._topic_registry.forget_config(name)
            self._registry_sync.forget_holds(name)
            for partition in range(record.partitions):
                tp = TopicPartition(name, partition)
                if (offline := self._map.offline_logs.pop(tp, None)) is not None:  # removed once its dir is back
                    self._map.offline_deleted[offline.path] = tp
                if offline is not None and offline.log is not None:
                    close_failed_log(tp, offline.log)
                doomed = self._map.logs.pop(tp, None)
                self._map.log_dir_of.pop(tp, None)
                if doomed is not None:
                    doomed.close(producer_snapshot=False)
                    self.delete_partition_dir(doomed.dir, tp)
            for path, aside in list(self._map.set_aside.items()):  # broken copies go too, or they would come back
                if aside.topic_partition is not None and aside.topic_partition.topic == name:
                    del self._map.set_aside[path]
                    if path.is_dir():
                        self.schedule_dir_deletion(self._rename_for_deletion(path, aside.topic_partition))
            log.info("deleted topic %s (%d partitions)", name, record.partitions)

    def alter_topic_config(self, topic: str, set: Mapping[str, str] | None = None,
                           delete: Iterable[str] = ()) -> LogConfig:
        """Set and/or remove topic-level overrides (Kafka's IncrementalAlterConfigs SET/DELETE);
        validated as a whole before anything is written; live logs use the new config at once.
        Thread-safe: under the manager's lock; each log swaps its config under its own."""
        with self._map.lock:
            self._ensure_open()
            record = self._topic_registry.record(topic)
            removed = list(delete)
            check_topic_config_names([*removed, *(set or {})])
            overrides = {k: v for k, v in record.configs.items() if k not in removed}
            overrides.update({k: str(v) for k, v in (set or {}).items()})
            config = self._broker.checked_topic_config(topic, overrides, current=record.configs)  # before anything is written
            updated = record.replace(configs=MappingProxyType(overrides))  # keeps the partitions' log dirs
            self.commit({**self._registry.topics, topic: updated}, self._registry.deleted_topic_ids)
            return self.apply_topic_config(topic, overrides, config)

    def commit(self, topics: Mapping[str, TopicRecord], deleted: frozenset[str],
                returning: LogDir | None = None, *, sync_copies: bool = True) -> None:
        """Write the registry with ``topics`` (each changed entry stamped with the new epoch, never
        lower than any epoch seen), then the changed topics' copies in their partition dirs (not
        with ``sync_copies`` False: the caller syncs every copy next).
        ``returning``: an offline dir coming back, written too (a fault there raises: it stays offline).
        The caller holds the map's lock."""
        changed, failed = self._topic_registry.commit(topics, deleted, self._offline_dirs.online_dirs(), self._map.dirs, returning)
        for log_dir, error in failed:
            self._offline_dirs.handle_dir_error(log_dir, "topic registry write", error)
        if sync_copies:
            self._registry_sync.sync_topic_copies(changed)

    def _create_partition(self, record: TopicRecord, partition: int, log_dir: LogDir) -> Log:
        """Create and open an empty partition dir with its ``partition.metadata``."""
        tp = TopicPartition(record.name, partition)
        path = files.partition_dir(log_dir.path, tp)
        created = self._loader.open_log(path, tp, had_clean_shutdown=True)
        PartitionMetadataFile(path).write(record.topic_id)
        write_topic_copy(path, self._registry.topics.get(record.name, record))
        fsync_dir(log_dir.path)
        with self._map.lock:
            self._map.logs[tp] = created
            self._map.log_dir_of[tp] = log_dir
        return created

    def _rename_for_deletion(self, path: Path, tp: TopicPartition) -> Path:
        target = path.parent / files.log_delete_dir_name(tp)
        try:
            fileops.rename(path, target)
            fsync_dir(path.parent)
        except OSError as e:
            raise StorageError("cannot rename partition dir for deletion", path=path, operation="rename") from e
        return target

    def apply_topic_config(self, topic: str, configs: Mapping[str, str], config: LogConfig | None = None) -> LogConfig:
        """Live logs of ``topic`` take ``configs`` at once (they were opened with what was known
        then); ``config``: the LogConfig of ``configs`` when the caller built and checked it already.
        The caller holds the map's lock (or is the start-up load); each log swaps its config under its own."""
        config = self._topic_registry.set_config(topic, configs, config)
        for tp, lg in self._map.logs.items():
            if tp.topic == topic:
                lg.update_config(config)
        return config

    def finish_interrupted_deletion(self, tp: TopicPartition, path: Path) -> bool:
        """Whether ``path`` is the dir of a deleted topic id (a deletion a crash interrupted): it
        goes ``-delete`` then. Thread-safe: touches only the dir and the scheduler."""
        deleted = self._registry.deleted_topic_ids
        if not deleted:
            return False
        topic_id = read_topic_id(path)
        if topic_id is None or topic_id not in deleted:
            return False
        log.info("%s: finishing the deletion of topic %s", path, tp.topic)
        self.schedule_dir_deletion(self._rename_for_deletion(path, tp))
        return True

    def delete_partition_dir(self, path: Path, tp: TopicPartition) -> None:
        """Rename ``path`` for deletion and schedule its removal; on a disk fault its log dir goes
        offline and the dir is renamed once the log dir is back. Thread-safe when the caller holds
        the map's lock (the offline-deleted entry is recorded under it)."""
        try:
            self.schedule_dir_deletion(self._rename_for_deletion(path, tp))
        except StorageError as e:
            log_dir = next((d for d in self._map.dirs if d.path == path.parent), None)
            if log_dir is None or not self._offline_dirs.handle_dir_error(log_dir, f"deletion of {tp}", e):
                raise
            self._map.offline_deleted[path] = tp

    def schedule_dir_deletion(self, path: Path) -> None:
        """Remove ``path`` after the broker's ``file.delete.delay.ms``. Thread-safe (the scheduler's lock)."""
        delay = self._broker.log_config().file_delete_delay_ms  # the broker default, as Kafka does
        self._scheduler.schedule_once(f"delete-dir-{path.name}", lambda: _remove_tree(path), delay)


def _remove_tree(path: Path) -> None:
    fileops.rmtree(path, ignore_errors=True)
    log.info("removed %s", path)
