"""The LogManager's partition map: which partitions have a live log, in which log dir, which
are set aside or offline; shared by reference by the manager and its components
(:class:`~.offline_dirs.OfflineDirs`, the registry reconciliation, topic changes, background
tasks).

Which lock guards what:

* :attr:`PartitionMap.lock` (an ``RLock``, the manager's lock) guards every change of
  :attr:`~PartitionMap.logs`, :attr:`~PartitionMap.log_dir_of`, :attr:`~PartitionMap.set_aside`,
  :attr:`~PartitionMap.offline_logs`, :attr:`~PartitionMap.offline_deleted` and of the entries
  of :attr:`~PartitionMap.dirs` (a dir loaded late replaces its placeholder; the list never
  grows nor shrinks). Topic changes, the registry reconciliation and a dir going offline or
  coming back take it for their whole change, so readers under it see one consistent map.
* Readers on the produce and fetch paths take no lock: they do one lookup in :attr:`logs`,
  whose entries are only replaced under the lock (one dict lookup is atomic). Anything that
  iterates a dict of the map takes the lock, or copies it under the lock first.

Lock order: the map's lock may be taken before a log's lock or the cleaner's, never after them.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

from tidelog.manager.log_dir import LogDir
from tidelog.manager.log_dir_failure import OfflineLog
from tidelog.manager.reports import SetAside
from tidelog.storage.log import Log
from tidelog.topic_partition import TopicPartition

log = logging.getLogger(__name__)


class PartitionMap:
    """The partitions of a set of log dirs and the lock that guards them (see the module doc).

    The attributes are the map itself, read and changed in place by the manager's components
    under :attr:`lock` (the lock-free reads of :attr:`logs` excepted); none is ever rebound."""

    def __init__(self, dirs: list[LogDir]) -> None:
        self.lock = threading.RLock()
        self.dirs = dirs  # every log dir, online or not, in the broker's order
        self.logs: dict[TopicPartition, Log] = {}  # live logs, served
        self.log_dir_of: dict[TopicPartition, LogDir] = {}  # the log dir of each live log
        self.set_aside: dict[Path, SetAside] = {}  # partition dirs that did not load, and why
        self.offline_logs: dict[TopicPartition, OfflineLog] = {}  # partitions of offline dirs
        self.offline_deleted: dict[Path, TopicPartition] = {}  # deleted while their dir was offline

    def set_partition_aside(self, path: Path, tp: TopicPartition, reason: str) -> None:
        """Record that ``tp``'s dir ``path`` failed to load, and why. Thread-safe: under :attr:`lock`."""
        log.error("%s: partition set aside, it failed to load: %s", path, reason)
        with self.lock:
            self.set_aside[path] = SetAside(path, reason, tp)

    def register_loaded(self, loaded: dict[TopicPartition, list[Log]]) -> None:
        """Take the logs loaded at start-up; a partition found in several log dirs is set aside in
        all of them (which copy is right is an operator's call; Kafka refuses to start). Called by
        the start-up load alone, before the manager is shared."""
        dir_by_path = {d.path: d for d in self.dirs}
        for tp, copies in loaded.items():
            if len(copies) == 1:
                self.logs[tp] = copies[0]
                self.log_dir_of[tp] = dir_by_path[copies[0].dir.parent]
                continue
            where = ", ".join(str(c.dir) for c in copies)
            for copy in copies:
                copy.close()
                self.set_aside[copy.dir] = SetAside(copy.dir, f"partition {tp} found in several log dirs: {where}", tp)

    def set_log_aside(self, tp: TopicPartition, reason: str) -> None:
        """Close ``tp``'s live log and set it aside (its checkpoint entries are kept). Not
        thread-safe alone: the caller holds :attr:`lock`."""
        lg = self.logs.pop(tp)
        self.log_dir_of.pop(tp, None)
        lg.close()
        log.error("%s: partition set aside: %s", lg.dir, reason)
        self.set_aside[lg.dir] = SetAside(lg.dir, reason, tp)

    def set_aside_partitions(self) -> dict[TopicPartition, SetAside]:
        """The partitions set aside, each with its entry. The caller holds :attr:`lock` (or is
        the start-up load, single threaded)."""
        return {s.topic_partition: s for s in self.set_aside.values() if s.topic_partition is not None}

    def entries_set_aside(self) -> list[SetAside]:
        """Every set-aside entry, sorted by path. Thread-safe: copied under :attr:`lock`."""
        with self.lock:
            entries = list(self.set_aside.values())
        return sorted(entries, key=lambda s: str(s.path))

    def live(self) -> list[tuple[TopicPartition, Log]]:
        """The live logs, sorted by partition. Thread-safe: copied under :attr:`lock`."""
        with self.lock:
            items = list(self.logs.items())
        return sorted(items)

    def loaded_completely(self, log_dir: LogDir) -> bool:
        """Whether no partition of ``log_dir`` was set aside. The caller holds :attr:`lock`
        (or is the start-up load)."""
        return not any(s.topic_partition is not None and s.path.parent == log_dir.path
                       for s in self.set_aside.values())

    def dir_at(self, path: Path) -> LogDir | None:
        """The log dir at ``path``, or None. Thread-safe: one pass over a list whose entries are
        replaced (never added or removed) under :attr:`lock`."""
        return next((d for d in self.dirs if d.path == path), None)
