"""The LogManager's side of the topic registry at start-up and when a log dir comes back: making
the registry (:mod:`.topics`), the partitions' copies of it (:mod:`.topic_copies`) and the
partition dirs found agree.

* **Restore**: a topic whose partitions hold a copy newer than its registry entry (or one the
  registry lacks, unless its id was deleted) is restored from that copy: the registry was lost,
  damaged or is stale.
* **Adopt**: partition dirs of a topic nothing recorded get an entry: Kafka's id and overrides
  when its metadata log knows the topic (:mod:`.kraft_metadata`), else Kafka's configs for an
  internal topic, else the defaults marked unconfirmed.
* **Complete**: registered partitions whose dir is missing are created in their log dir (a create
  a crash interrupted), or reported offline when that log dir is not open or unknown; dirs that
  are no partition of their registered topic are set aside.
* **Hold**: a topic whose configs are unconfirmed keeps its cleaning paused (retention checks the
  topic itself) until :meth:`RegistrySync.confirm_topic_configs`.
* **Rejoin**: the registry copy of a log dir coming back joins as at start-up.

:class:`RegistrySync` is a component of :class:`~tidelog.manager.manager.LogManager`
(``manager.registry_sync``). It owns the holds of unconfirmed topics and Kafka's metadata log
once read; it works on the :class:`~.partition_map.PartitionMap` and the
:class:`~.topic_registry.TopicRegistry` it shares with the manager, and runs the manager's
steps it needs (registry commit, topic configs, placement, partition creation) through the
:class:`RegistrySteps` it is given.

Thread-safety: everything here but :meth:`RegistrySync.confirm_topic_configs` and
:meth:`RegistrySync.await_held` runs under the partition map's lock, the manager's (the
start-up load is single threaded until it returns); those two wait for the cleaner outside it.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from tidelog.cleaner.log_cleaner import LogCleaner
from tidelog.errors import CheckpointError, ConfigError, StorageError, TidelogError
from tidelog.manager.kraft_metadata import (
    INTERNAL_TOPIC_CONFIGS,
    KraftTopic,
    MetadataImage,
    find_metadata_log,
    read_metadata_log,
)
from tidelog.manager.log_dir import LogDir
from tidelog.manager.partition_map import PartitionMap
from tidelog.manager.reports import SetAside
from tidelog.manager.topic_copies import copy_matches, encode_topic_copy, read_topic_copy, write_topic_copy
from tidelog.manager.topic_registry import TopicRegistry
from tidelog.manager.topics import RegistryState, TopicRecord, read_newest_registry, write_registry
from tidelog.storage import files
from tidelog.storage.config import BrokerConfig, LogConfig
from tidelog.storage.metadata import (
    PARTITION_METADATA_FILE,
    PARTITION_METADATA_VERSION,
    PartitionMetadata,
    PartitionMetadataFile,
    new_topic_id,
)
from tidelog.topic_partition import TopicPartition

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RegistrySteps:
    """The manager's steps :class:`RegistrySync` runs (each under the partition map's lock)."""

    commit: Callable[..., None]  # write the registry: (topics, deleted ids, returning dir, *, sync_copies)
    apply_topic_config: Callable[[str, Mapping[str, str]], LogConfig]  # live logs of a topic take configs
    online_dirs: Callable[[], list[LogDir]]  # the log dirs not offline
    place: Callable[[int], dict[int, LogDir]]  # log dirs for new partitions (Kafka's nextLogDirs)
    create_partitions: Callable[[TopicRecord, Mapping[int, LogDir]], None]  # create and open partition dirs
    ensure_open: Callable[[], None]  # raise once the manager is shut down


class RegistrySync:
    """Registry reconciliation of a LogManager (see the module doc). It owns the holds of
    unconfirmed topics (:attr:`held`) and Kafka's metadata log once read; it works on the
    partition map and the registry it shares with the manager."""

    def __init__(self, broker: BrokerConfig, partition_map: PartitionMap, topic_registry: TopicRegistry,
                 cleaner: LogCleaner | None, steps: RegistrySteps) -> None:
        self._broker = broker
        self._map = partition_map
        self._topic_registry = topic_registry
        self.cleaner = cleaner
        self._steps = steps
        # cleaning paused here until the topic's configs are confirmed; changed under the map's lock
        self.held: set[TopicPartition] = set()

    @property
    def _registry(self) -> RegistryState:
        return self._topic_registry.state

    def forget_holds(self, topic: str) -> None:
        """A deleted ``topic``'s partitions are held no more. The caller holds the map's lock."""
        self.held.difference_update([tp for tp in self.held if tp.topic == topic])

    def reconcile(self, stale_copies: bool) -> list[TopicPartition]:
        """Make the registry and the dirs agree (see :mod:`.topics`): adopt topics the registry
        does not know; set aside dirs that are not a partition of their registered topic (a
        partition number past its count, another topic id); create registered partitions whose
        dir is missing when their log dir is open (a create a crash interrupted). The registry is
        written back when anything changed or a copy is stale. Returns the partitions newly held
        (:meth:`hold_unconfirmed`). Not thread-safe alone: the caller holds the map's lock (or is
        the start-up load)."""
        topics = dict(self._registry.topics)
        placed: dict[str, dict[int, str]] = {}  # log dirs learned, merged once per topic
        found: dict[str, list[TopicPartition]] = {}
        for tp in sorted({*self._map.logs, *self._map.set_aside_partitions()}):
            found.setdefault(tp.topic, []).append(tp)
        before = dict(topics)
        current = self._restore_from_copies(topics, found)
        restored = {n for n in topics if n not in before}  # their missing partitions' log dirs are unknown
        for name, partitions in found.items():
            if name not in topics and self._deleted_by_kafka(name, partitions):
                continue  # set aside, never adopted: a deleted topic does not come back
            for tp in partitions:
                record = topics.get(tp.topic)
                if record is None:
                    record = topics[tp.topic] = self._adopted(tp.topic, partitions)
                directory_id = self._check_found_partition(record, tp)
                if directory_id is not None and record.assignments.get(tp.partition) != directory_id:
                    placed.setdefault(tp.topic, {})[tp.partition] = directory_id
        for name, record in list(topics.items()):
            placed_here = {**placed.get(name, {}), **self._complete_partitions(record, name not in restored)}
            if placed_here:
                topics[name] = record.replace(assignments=MappingProxyType({**record.assignments, **placed_here}))
        if stale_copies or self._topic_registry.has_damaged() or topics != dict(self._registry.topics):
            self._steps.commit(topics, self._registry.deleted_topic_ids, sync_copies=False)  # all synced below
        now_expected = {n: encode_topic_copy(r) for n, r in self._registry.topics.items() if n in found}
        self.sync_topic_copies(skip={tp for tp, data in current.items() if now_expected.get(tp.topic) == data})
        return self.hold_unconfirmed()

    def _restore_from_copies(self, topics: dict[str, TopicRecord],
                             found: Mapping[str, list[TopicPartition]]) -> dict[TopicPartition, bytes]:
        """Take, for each topic found, the newest of its registry entry and its partitions' copies
        (:mod:`.topic_copies`): a copy newer than the entry (or one of a topic the registry lacks,
        unless its id was deleted) means the registry was lost, damaged or is stale, and the
        topic is restored from it into ``topics``. Returns the live partitions whose copy already
        matched its entry, with those bytes (nothing to rewrite for them). One read per partition."""
        current: dict[TopicPartition, bytes] = {}
        for name, partitions in found.items():
            record = topics.get(name)
            expected = encode_topic_copy(record) if record is not None else None
            newest: TopicRecord | None = None
            for tp in partitions:
                lg = self._map.logs.get(tp)
                if lg is None:
                    continue
                if expected is not None and copy_matches(lg.dir, expected):
                    current[tp] = expected
                    continue
                copy = _read_copy(lg.dir)
                if copy is None or copy.name != name:
                    continue
                self._topic_registry.raise_floor(copy.epoch)
                if newest is None or copy.epoch > newest.epoch:
                    newest = copy
            if newest is None or newest.topic_id in self._registry.deleted_topic_ids:
                continue
            if record is None or newest.epoch > record.epoch:
                topics[name] = self._restored(newest, record)
        return current

    def _restored(self, copy: TopicRecord, record: TopicRecord | None) -> TopicRecord:
        configs = self._adoptable_overrides(copy.name, copy.configs)
        restored = copy.replace(configs=MappingProxyType(configs),
                                assignments=record.assignments if record is not None else MappingProxyType({}))
        why = "the topic registry lacks it" if record is None else f"the topic registry's entry is older ({record.epoch})"
        log.warning("topic %s: id %s, %d partition(s) and configs %s restored from its partitions' copy "
                    "(epoch %d): %s", copy.name, copy.topic_id, copy.partitions, show_configs(configs),
                    copy.epoch, why)
        self._steps.apply_topic_config(copy.name, configs)
        return restored

    def sync_topic_copies(self, topics: Iterable[str] | None = None, skip: Iterable[TopicPartition] = ()) -> None:
        """Rewrite each live partition's copy (of ``topics``; all when None) that differs from its
        registry entry. A copy that cannot be written is only a warning: the registry is the
        commit point, and the next start-up rewrites the copy. The caller holds the map's lock."""
        wanted = None if topics is None else set(topics)
        skipped = set(skip)
        expected: dict[str, bytes] = {}
        for tp, lg in sorted(self._map.logs.items()):
            record = self._registry.topics.get(tp.topic)
            if record is None or tp in skipped or (wanted is not None and tp.topic not in wanted):
                continue
            data = expected.setdefault(tp.topic, encode_topic_copy(record))
            if copy_matches(lg.dir, data):
                continue
            try:
                write_topic_copy(lg.dir, record)
            except StorageError as e:
                log.warning("%s: cannot write the copy of topic %s's registry entry: %s", lg.dir, tp.topic, e)

    def hold_unconfirmed(self) -> list[TopicPartition]:
        """Under the lock: pause the cleaner on each live partition of a topic whose configs are
        unconfirmed (the retention passes check the topic themselves), and say so loudly. The
        pause never waits here (a clean in progress is aborted; its cleaner thread may need this
        lock to finish): callers wait with :meth:`await_held` once the lock is released. Returns
        the partitions newly held."""
        held = []
        for name in sorted(n for n, r in self._registry.topics.items() if r.unconfirmed):
            newly = [tp for tp in self._map.logs if tp.topic == name and tp not in self.held]
            if not newly:
                continue
            if self.cleaner is not None:
                self.cleaner.manager.pause_cleaning(*newly)
            self.held.update(newly)
            held.extend(newly)
            log.warning("topic %s: %s", name, unconfirmed_note(name))
        return held

    def await_held(self, held: list[TopicPartition]) -> None:
        """Outside the lock: wait until cleans aborted by :meth:`hold_unconfirmed` have stopped.
        Thread-safe: takes the cleaner's lock only."""
        if self.cleaner is not None and held:
            self.cleaner.manager.await_stopped(*held)

    def unconfirmed(self, topic: str) -> bool:
        """Whether ``topic``'s configs are unconfirmed. Thread-safe without a lock: the registry
        state is replaced whole on each change."""
        record = self._registry.topics.get(topic)
        return record is not None and record.unconfirmed

    def _deleted_by_kafka(self, topic: str, partitions: list[TopicPartition]) -> bool:
        """Whether Kafka's metadata log deleted the topic id in these dirs' ``partition.metadata``
        (and does not have the topic again): then each loaded log is set aside as a stray, as
        Kafka's broker keeps such dirs aside, rather than adopted and served again."""
        image = self._kraft_metadata
        if image is None or topic in image.topics:
            return False
        ids = {read_topic_id(self._map.logs[tp].dir) for tp in partitions if tp in self._map.logs}
        deleted = ids & image.removed_topic_ids
        if not deleted:
            return False
        for tp in partitions:
            if tp in self._map.logs:
                self._map.set_log_aside(tp, f"stray partition dir: Kafka's metadata log deleted topic {topic} "
                                        f"(id {', '.join(sorted(deleted))}); kept aside, not adopted")
        return True

    def _adopted(self, topic: str, partitions: list[TopicPartition]) -> TopicRecord:
        """A registry entry for the partition dirs found of an unknown topic (e.g. a Kafka data dir);
        its loaded logs take its configs at once (they were opened with the defaults).

        Its topic id and overrides are Kafka's when its metadata log knows the topic (read once,
        on the first adoption: :mod:`.kraft_metadata`); else a Kafka internal topic gets the
        configs Kafka creates it with (``__consumer_offsets`` stays compacted), any other the
        defaults. The partition count is what the dirs show (partitions Kafka has elsewhere, on
        another broker or in a log dir not opened, are not created here)."""
        count = max(tp.partition for tp in partitions) + 1
        image = self._kraft_metadata
        kafka = image.topics.get(topic) if image is not None else None
        record = (self._adopted_from_kafka(kafka, count, len(partitions)) if kafka is not None
                  else self._adopted_without_kafka(topic, partitions, count, image))
        self._steps.apply_topic_config(topic, record.configs)
        return record

    def _adopted_from_kafka(self, kafka: KraftTopic, count: int, found: int) -> TopicRecord:
        configs = self._adoptable_overrides(kafka.name, kafka.configs)
        log.info("adopting topic %s (%d partition dirs found) with Kafka's topic id %s and overrides %s",
                 kafka.name, found, kafka.topic_id, show_configs(configs))
        if kafka.partitions > count:
            log.warning("topic %s: Kafka's metadata log has %d partitions, the log dirs hold %d: adopted with %d",
                        kafka.name, kafka.partitions, count, count)
        return TopicRecord(kafka.name, kafka.topic_id, count, MappingProxyType(configs))

    def _adopted_without_kafka(self, topic: str, partitions: list[TopicPartition], count: int,
                               image: MetadataImage | None) -> TopicRecord:
        ids = [read_topic_id(self._map.logs[tp].dir) for tp in partitions if tp in self._map.logs]
        topic_id = next((i for i in ids if i is not None), None) or new_topic_id()
        why = "no Kafka metadata log was read" if image is None else "Kafka's metadata log does not have it"
        configs = self._adoptable_overrides(topic, INTERNAL_TOPIC_CONFIGS.get(topic, {}))
        what = f"the configs Kafka creates it with, {show_configs(configs)}" if configs else "default configs"
        # Nobody vouches for defaults given to a topic of unknown configs (a registry and its
        # copies lost, a Kafka dir without its metadata log): they could delete what it keeps.
        unconfirmed = topic not in INTERNAL_TOPIC_CONFIGS
        log.warning("adopting topic %s (%d partition dirs found) with %s (%s)%s", topic, len(partitions), what, why,
                    "; its configs are unconfirmed" if unconfirmed else "")
        return TopicRecord(topic, topic_id, count, MappingProxyType(configs), unconfirmed=unconfirmed)

    def _adoptable_overrides(self, topic: str, overrides: Mapping[str, str]) -> dict[str, str]:
        """``overrides`` as :meth:`create_topic` validates them (:meth:`BrokerConfig.checked_topic_config`,
        Kafka's tiered-storage refusals included), each kept only when it passes with those kept
        before it (in name order); the others are left out with a warning."""
        kept: dict[str, str] = {}
        for name, value in sorted(overrides.items()):
            try:
                self._broker.checked_topic_config(topic, {**kept, name: value})
            except ConfigError as e:
                log.warning("topic %s: Kafka's override %s=%s is left out: %s", topic, name, value, e)
            else:
                kept[name] = value
        return kept

    @functools.cached_property
    def _kraft_metadata(self) -> MetadataImage | None:
        """Kafka's metadata log (``__cluster_metadata-0`` in ``metadata.log.dir`` when the broker
        config sets it, else in the first log dir having one), read on first use; None, with a
        warning when it is there, if it is missing or does not read."""
        metadata_log_dir = self._broker.get("metadata.log.dir") if self._broker.is_set("metadata.log.dir") else None
        where = find_metadata_log([d.path for d in self._map.dirs], Path(metadata_log_dir) if metadata_log_dir else None)
        if where is None:
            return None
        try:
            return read_metadata_log(where)
        except TidelogError as e:
            log.warning("%s: Kafka's metadata log is not used, it does not read: %s", where, e)
            return None

    def _check_found_partition(self, record: TopicRecord, tp: TopicPartition) -> str | None:
        """Set a loaded log aside if it is not a partition of ``record``; else the directory.id of
        the log dir it lives in (None for a set-aside one, or a dir without an id)."""
        if tp not in self._map.logs:
            return None
        lg = self._map.logs[tp]
        if tp.partition >= record.partitions:
            self._map.set_log_aside(tp, f"stray partition dir: topic {tp.topic} has {record.partitions} partition(s)")
            return None
        topic_id = record.topic_id if _has_topic_id(lg.dir, record.topic_id) else read_topic_id(lg.dir)
        if topic_id is not None and topic_id != record.topic_id:
            self._map.set_log_aside(tp, f"partition.metadata names topic id {topic_id}, but topic {tp.topic} has id "
                                    f"{record.topic_id} (Kafka's InconsistentTopicIdException)")
            return None
        if topic_id is None:
            PartitionMetadataFile(lg.dir).write(record.topic_id)
        return self._map.log_dir_of[tp].directory_id

    def _complete_partitions(self, record: TopicRecord, create_unassigned: bool = True) -> dict[int, str]:
        """Create the registered partitions of ``record`` that have no dir, in their assigned log
        dir (or the least loaded one, unless not ``create_unassigned``); set aside those whose log
        dir is not open or not known. Returns the log dirs of created partitions that the
        registry did not have yet."""
        dirs_by_id = {d.directory_id: d for d in self._steps.online_dirs()}  # never create in an offline dir
        aside = self._map.set_aside_partitions()
        to_create: dict[int, LogDir] = {}
        unassigned = []
        for partition in range(record.partitions):
            tp = TopicPartition(record.name, partition)
            if tp in self._map.logs or tp in aside or tp in self._map.offline_logs:
                continue
            assigned = record.assignments.get(partition)
            if assigned is None and not create_unassigned:
                placeholder = Path("<log dir unknown>") / files.partition_dir_name(tp)
                self._map.set_aside[placeholder] = SetAside(
                    placeholder, "its dir was not found, and the topic registry that knew its log dir is lost: "
                                 "not created empty (open the log dir that holds it)", tp)
            elif assigned is None:
                unassigned.append(partition)
            elif assigned in dirs_by_id:
                to_create[partition] = dirs_by_id[assigned]
            else:
                placeholder = Path(f"<log dir {assigned}>") / files.partition_dir_name(tp)
                self._map.set_aside[placeholder] = SetAside(
                    placeholder, f"its log dir (directory.id {assigned}) is not among the log dirs opened, "
                                 "or it is offline", tp)
        to_create.update(zip(unassigned, self._steps.place(len(unassigned)).values()))
        if to_create:
            log.info("creating %d missing partition dir(s) of %s (an interrupted create)", len(to_create), record.name)
            self._steps.create_partitions(record, to_create)
        return {p: d for p, d in placed_assignments(to_create).items() if record.assignments.get(p) != d}

    def confirm_topic_configs(self, topic: str) -> bool:
        """An operator vouches for ``topic``'s configs (``tidelog topics confirm-configs``): the
        registry stops calling them unconfirmed and retention and cleaning resume. False when
        they were not unconfirmed (nothing changes). Thread-safe: the registry changes under the
        manager's lock; the wait for a clean its hold aborted, and the resume, come after it."""
        with self._map.lock:
            self._steps.ensure_open()
            record = self._topic_registry.record(topic)
            if not record.unconfirmed:
                return False
            self._steps.commit({**self._registry.topics, topic: record.replace(unconfirmed=False)},
                         self._registry.deleted_topic_ids)
            held = sorted(tp for tp in self.held if tp.topic == topic)
            self.held.difference_update(held)
        if self.cleaner is not None and held:
            self.await_held(held)  # a clean its hold aborted may still be stopping
            self.cleaner.manager.resume_cleaning(*held)
        log.warning("topic %s: configs %s confirmed by an operator; retention and cleaning resume", topic,
                    show_configs(record.configs))
        return True

    def rejoin(self, log_dir: LogDir) -> None:
        """Under the lock: the registry copy of a dir coming back joins as at start-up: a damaged
        one is kept aside, an entry newer than ours wins (a returning dir deletes nothing), the
        epoch never goes lower than any it shows, and the dir gets the merged registry. A copy
        whose read fails on the disk raises that error: the dir stays offline."""
        path = log_dir.path
        read = read_newest_registry([path])
        if path in read.unreadable:
            raise read.unreadable[path]
        self._topic_registry.raise_floor(read.floor_epoch)
        if path in read.damaged:
            self._topic_registry.note_damaged(path, read.damaged[path])
        ours = self._registry
        topics = dict(ours.topics)
        for name, theirs in read.state.topics.items():
            mine = topics.get(name)
            # a topic we lack is taken only if changed after all we know (else it may be one deleted)
            if theirs.topic_id in ours.deleted_topic_ids or theirs.epoch <= (ours.epoch if mine is None else mine.epoch):
                continue
            if mine is not None and mine.topic_id != theirs.topic_id:
                continue
            configs = self._adoptable_overrides(name, theirs.configs)
            assignments = {**theirs.assignments, **(mine.assignments if mine is not None else {})}
            topics[name] = theirs.replace(configs=MappingProxyType(configs), assignments=MappingProxyType(assignments))
            log.warning("topic %s: configs %s taken from the topic registry of %s (epoch %d, newer than %s)",
                        name, configs, path, theirs.epoch, "none" if mine is None else mine.epoch)
        if topics != dict(ours.topics) or read.floor_epoch > ours.epoch or self._topic_registry.has_damaged(path):
            self._steps.commit(topics, ours.deleted_topic_ids, returning=log_dir)
            for name, record in topics.items():  # live logs take the configs once they are committed
                if ours.topics.get(name) != record:
                    self._steps.apply_topic_config(name, record.configs)
        elif read.state != ours:
            write_registry([path], ours)


def _has_topic_id(path: Path, topic_id: str) -> bool:
    """Whether ``partition.metadata`` holds exactly what tidelog writes for ``topic_id``: one read,
    no parse (start-up checks every partition)."""
    try:
        expected = PartitionMetadata(PARTITION_METADATA_VERSION, topic_id).encode()
        return (path / PARTITION_METADATA_FILE).read_bytes() == expected
    except OSError:
        return False


def read_topic_id(path: Path) -> str | None:
    metadata = PartitionMetadataFile(path)
    if not metadata.exists():
        return None
    try:
        return metadata.read().topic_id
    except (CheckpointError, StorageError) as e:
        log.warning("%s: unreadable partition.metadata: %s", path, e)
        return None


def _read_copy(path: Path) -> TopicRecord | None:
    try:
        return read_topic_copy(path)
    except (CheckpointError, StorageError) as e:
        log.warning("%s: unreadable copy of the topic's registry entry: %s", path, e)
        return None


def unconfirmed_note(topic: str) -> str:
    """What holds an unconfirmed topic, and the command that ends the hold."""
    return (f"retention and cleaning paused: the configs of topic {topic} are unconfirmed (no registry entry, "
            f"partition copy or Kafka metadata log recorded them, so they are the defaults); check them, then "
            f"run `tidelog topics confirm-configs {topic}`")


def show_configs(configs: Mapping[str, str]) -> str:
    return "{" + ", ".join(f"{k}={v}" for k, v in sorted(configs.items())) + "}"


def placed_assignments(placement: Mapping[int, LogDir]) -> Mapping[int, str]:
    """The registry's ``assignments`` of partitions placed in log dirs (those with a directory.id)."""
    return MappingProxyType({p: d.directory_id for p, d in placement.items() if d.directory_id is not None})
