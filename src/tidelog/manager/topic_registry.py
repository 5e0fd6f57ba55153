"""The LogManager's copy of the topic registry (:mod:`.topics`): :class:`TopicRegistry` holds the
registry state, the epoch floor, the damaged copies to keep aside and the topics' configs, and
writes a change to every online log dir.

A change is stamped with a new epoch, above the registry's and above any epoch seen in a copy
(the *floor*), so a copy written later always wins over an older one. A copy found unreadable is
renamed aside (never overwritten) before its dir's next write. The change takes effect only once
it is written to at least one dir; the dirs where the write failed are returned for the manager
to take offline.

Thread-safety: :attr:`TopicRegistry.state` is replaced whole, never changed in place, so readers
without a lock see the old registry or the new one. Every change (:meth:`TopicRegistry.commit`,
:meth:`TopicRegistry.load`, the floor and damaged-copy notes, the config cache) runs under the
manager's lock; the component has no lock of its own. The config cache may also be filled by
the loading threads at start-up (one dict store each, atomic).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import MappingProxyType

from tidelog.clock import Clock
from tidelog.errors import LogDirOfflineError, StorageError, UnknownTopicOrPartitionError
from tidelog.manager.log_dir import LogDir
from tidelog.manager.topics import RegistryRead, RegistryState, TopicRecord, keep_damaged_registry, write_registry
from tidelog.storage.config import BrokerConfig, LogConfig
from tidelog.storage.stored_overrides import loadable_overrides

log = logging.getLogger(__name__)


class TopicRegistry:
    """The registry state and its writes (see the module doc)."""

    def __init__(self, broker: BrokerConfig, clock: Clock) -> None:
        self._broker = broker
        self._clock = clock
        self.state = RegistryState()
        self._epoch_floor = 0  # the next registry epoch is above this (and above the registry's)
        self._damaged: dict[Path, int | None] = {}  # kept aside before their dir's next write
        self._configs: dict[str, LogConfig] = {}

    def load(self, read: RegistryRead) -> None:
        """Take the newest registry read at start-up, its floor epoch and its damaged copies."""
        self.state = read.state
        self._epoch_floor = read.floor_epoch
        self._damaged = dict(read.damaged)

    def raise_floor(self, epoch: int) -> None:
        """A copy showed ``epoch``: the next change is stamped above it."""
        self._epoch_floor = max(self._epoch_floor, epoch)

    def note_damaged(self, path: Path, epoch: int | None) -> None:
        """The registry copy of log dir ``path`` (of ``epoch``, when known) does not read: it is
        kept aside before the dir's next write."""
        self._damaged[path] = epoch

    def has_damaged(self, path: Path | None = None) -> bool:
        """Whether a damaged copy (of log dir ``path``, when given) waits to be kept aside."""
        return bool(self._damaged) if path is None else path in self._damaged

    def record(self, name: str) -> TopicRecord:
        """``name``'s entry; :class:`UnknownTopicOrPartitionError` when there is none."""
        record = self.state.topics.get(name)
        if record is None:
            raise UnknownTopicOrPartitionError(f"unknown topic {name!r}", topic=name)
        return record

    # --- configs ------------------------------------------------------------------------------

    def config_for(self, topic: str) -> LogConfig:
        """``topic``'s config from its stored overrides (the defaults for a topic not registered),
        computed once and cached until :meth:`set_config` or :meth:`forget_config`."""
        config = self._configs.get(topic)
        if config is None:
            record = self.state.topics.get(topic)
            config = self.loadable_config(topic, record.configs if record else {})
            self._configs[topic] = config
        return config

    def loadable_config(self, topic: str, overrides: Mapping[str, str]) -> LogConfig:
        """``topic``'s config from its stored overrides: one that no longer validates (written under
        older rules) loads as the nearest usable value, with a warning, and never keeps a partition
        from loading."""
        usable, notes = loadable_overrides(self._broker, overrides)
        for note in notes:
            log.warning("topic %s: stored override %s", topic, note)
        return self._broker.log_config(usable)

    def set_config(self, topic: str, configs: Mapping[str, str], config: LogConfig | None = None) -> LogConfig:
        """``topic``'s config is now the broker's with ``configs`` (validated: :class:`ConfigError`);
        ``config``: that LogConfig when the caller built it already (not built again)."""
        config = config if config is not None else self._broker.log_config(dict(configs))
        self._configs[topic] = config
        return config

    def forget_config(self, topic: str) -> None:
        self._configs.pop(topic, None)

    # --- writing ------------------------------------------------------------------------------

    def commit(self, topics: Mapping[str, TopicRecord], deleted: frozenset[str], online: Sequence[LogDir],
               all_dirs: Sequence[LogDir], returning: LogDir | None = None
               ) -> tuple[list[str], list[tuple[LogDir, StorageError]]]:
        """Write the registry with ``topics`` to every ``online`` dir (each changed entry stamped
        with the new epoch, never lower than any epoch seen) and make it the state; the names of
        the changed topics and the dirs whose write failed. ``returning``: an offline dir coming
        back, written too (a fault there raises: it stays offline). Nothing changes when no dir
        was written (the first error raised, or :class:`LogDirOfflineError` when none is online)."""
        epoch = max(self.state.epoch, self._epoch_floor) + 1
        stamped, changed = {}, []
        for name, record in topics.items():
            old = self.state.topics.get(name)
            if old is not None and record.same_content(old):
                stamped[name] = old
            else:
                stamped[name] = record.replace(epoch=epoch)
                changed.append(name)
        state = RegistryState(epoch, MappingProxyType(stamped), frozenset(deleted))
        failed: list[tuple[LogDir, StorageError]] = []
        if returning is not None:
            self._keep_damaged(returning.path)
            write_registry([returning.path], state)
        for log_dir in online:
            try:
                self._keep_damaged(log_dir.path)
                write_registry([log_dir.path], state)
            except StorageError as e:
                failed.append((log_dir, e))
        if len(failed) == len(online) and returning is None:  # not written anywhere: the change did not happen
            if failed:
                raise failed[0][1]
            raise LogDirOfflineError("every log dir is offline: the topic registry cannot be written",
                                     log_dirs=", ".join(str(d.path) for d in all_dirs))
        self.state = state
        return changed, failed

    def _keep_damaged(self, log_dir: Path) -> None:
        """An unreadable registry copy is renamed aside, never overwritten (see :mod:`.topics`)."""
        if log_dir not in self._damaged:
            return
        kept = keep_damaged_registry(log_dir, self._clock.milliseconds())
        epoch = self._damaged.pop(log_dir)
        log.warning("%s: the unreadable topic registry (epoch %s) is kept as %s; the registry is rewritten "
                    "from the other copies and the partitions' copies", log_dir,
                    "unknown" if epoch is None else epoch, kept.name)
