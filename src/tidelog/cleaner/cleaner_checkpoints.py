"""The ``cleaner-offset-checkpoint`` of each log dir: every compacted partition's first dirty offset.

The files are read once, when a dir is opened (one that does not parse counts as empty, with a
warning, as the log manager does for its checkpoints), kept in memory, and rewritten whole on
every change; a rewrite keeps only partitions that exist (Kafka's rule), as last seen in
:attr:`CleanerCheckpoints.live`. A write that fails is logged and the in-memory value kept: the
cleaner then goes on from memory, and at worst re-cleans from the old offset after a restart.

Threading: :class:`CleanerCheckpoints` is not thread-safe and takes no lock; its one owner, the
:class:`~.manager.CleanerManager`, calls it under the manager lock. A write costs two fsyncs.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from pathlib import Path

from tidelog.errors import CheckpointError, StorageError
from tidelog.storage.checkpoints import CLEANER_OFFSET_CHECKPOINT_FILE, OffsetCheckpointFile
from tidelog.topic_partition import TopicPartition

log = logging.getLogger("tidelog.cleaner.manager")


def dir_key(log_dir: Path | str) -> Path:
    """A log dir as the cleaner keys it: absolute, not resolved (Kafka's ``getAbsolutePath``)."""
    return Path(os.path.abspath(log_dir))


class CleanerCheckpoints:
    """The cleaner checkpoints of the online log dirs, keyed by :func:`dir_key`. Not thread-safe:
    the caller holds the cleaner manager's lock."""

    def __init__(self, log_dirs: Iterable[Path | str]) -> None:
        self._files: dict[Path, OffsetCheckpointFile] = {}
        self._entries: dict[Path, dict[TopicPartition, int]] = {}
        self.live: frozenset[TopicPartition] | None = None  # the partitions that exist; None: not known yet
        for log_dir in log_dirs:
            self.open(dir_key(log_dir))

    def open(self, key: Path) -> None:
        """Read ``key``'s checkpoint (created empty if missing) and keep it from now on; a dir whose
        file cannot be opened is logged and left out."""
        try:
            checkpoint = OffsetCheckpointFile(key / CLEANER_OFFSET_CHECKPOINT_FILE)
        except StorageError as e:
            log.error("%s: cannot open the cleaner checkpoint, not cleaning this dir: %s", key, e)
            return
        self._files[key] = checkpoint
        self._entries[key] = _read_checkpoint(checkpoint)

    def close(self, key: Path) -> None:
        """Forget ``key``'s checkpoint (a failed dir): never written again until :meth:`open`."""
        self._files.pop(key, None)
        self._entries.pop(key, None)

    def __contains__(self, key: Path) -> bool:
        return key in self._files

    @property
    def dirs(self) -> list[Path]:
        return list(self._files)

    def merged(self) -> dict[TopicPartition, int]:
        """Every dir's entries merged (a partition in two dirs: the later dir's value)."""
        merged: dict[TopicPartition, int] = {}
        for entries in self._entries.values():
            merged.update(entries)
        return merged

    def get(self, key: Path, tp: TopicPartition) -> int | None:
        return self._entries.get(key, {}).get(tp)

    def offset_for(self, tp: TopicPartition, key: Path) -> int | None:
        """``tp``'s checkpoint in its log dir ``key``, or in any dir when ``key`` is not online."""
        own = self._entries.get(key)
        return own.get(tp) if own is not None else self.merged().get(tp)

    def write(self, key: Path, tp: TopicPartition, offset: int | None) -> None:
        """Set ``tp``'s offset in ``key``'s checkpoint, or remove it (None), and rewrite the file
        without partitions that no longer exist."""
        checkpoint = self._files.get(key)
        if checkpoint is None:
            log.warning("%s: not an online log dir of the cleaner; checkpoint of %s not written", key, tp)
            return
        live = self.live
        entries = {t: o for t, o in self._entries[key].items() if live is None or t in live}
        if offset is None:
            entries.pop(tp, None)
        else:
            entries[tp] = offset
        self._entries[key] = entries
        try:
            checkpoint.write(entries)
        except (StorageError, CheckpointError) as e:
            log.error("%s: cannot write the cleaner checkpoint: %s", key, e)

    def remove(self, tp: TopicPartition) -> None:
        """A deleted partition: no longer live, its entries removed from every dir's file."""
        if self.live is not None:
            self.live = self.live - {tp}
        for key, entries in list(self._entries.items()):
            if tp in entries:
                self.write(key, tp, None)


def _read_checkpoint(checkpoint: OffsetCheckpointFile) -> dict[TopicPartition, int]:
    try:
        return checkpoint.read()
    except (CheckpointError, StorageError) as e:
        log.warning("%s: ignoring unreadable cleaner checkpoint: %s", checkpoint.path, e)
        return {}
