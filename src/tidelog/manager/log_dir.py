"""One log dir owned by the LogManager: its ``.lock``, identity, checkpoints and what is inside.

Opening a log dir (Kafka's ``LogManager.loadLogs`` preamble, kafka-storage.md §3.9):

1. :meth:`LogDir.open`: create it if missing, take ``.lock`` (a second owner fails with
   :class:`LogDirLockedError`) and read ``meta.properties``, writing nothing, so the manager can
   refuse dirs of two different clusters before it changes anything;
2. :meth:`LogDir.begin_loading`: write ``meta.properties`` when absent (a fresh dir; Kafka's storage
   tool formats it), note whether ``.kafka_cleanshutdown`` exists and the broker epoch it holds,
   and delete it *before* any log is loaded, so a crash while loading counts as unclean
   (KAFKA-10471), and read the recovery-point, log-start-offset and high-watermark checkpoints;
   one that does not parse counts as empty, with a warning (Kafka's rule: recovery from offset 0
   is slow but safe).

**The clean-shutdown marker's broker epoch.** A clean shutdown writes the marker back with the
broker epoch it held at start-up (-1 when there was none): a Kafka broker sends that epoch when it
registers, and a -1 makes its controller treat the stop as unclean (an unclean leader election on
every partition of the dir, KIP-966). A dir opened with ``keep_marker`` (the read-only CLI
commands) leaves the marker alone: not deleted at start-up, not written at shutdown, its bytes
as the broker wrote them, so a marker stays true (and an absent one stays absent: the next broker
start recovers as it would have). Such a session appends no records but those of a Spark job
interrupted mid-commit (:mod:`.staged_commit`), and that can only be pending where no marker is:
the writer's own open removed it, and a writer killed mid-commit writes none.

:meth:`LogDir.scan` then sorts the sub-directories into partition dirs to load, ``-delete`` dirs
to remove, and dirs set aside (names that do not parse, ``-future``/``-stray`` dirs): Kafka
refuses to start on a bad name; tidelog reports it and loads the rest.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tidelog.errors import CheckpointError, InvalidLogDirNameError, LogDirLockedError, StorageError, TidelogError
from tidelog.manager.log_dir_failure import is_storage_fault
from tidelog.storage import fileops, files
from tidelog.storage.checkpoints import (
    LOG_START_OFFSET_CHECKPOINT_FILE,
    RECOVERY_POINT_CHECKPOINT_FILE,
    REPLICATION_OFFSET_CHECKPOINT_FILE,
    OffsetCheckpointFile,
)
from tidelog.storage.lock import LogDirLock
from tidelog.storage.metadata import (
    MetaProperties,
    delete_clean_shutdown,
    has_clean_shutdown,
    read_clean_shutdown,
    read_meta_properties,
    uuid_to_topic_id,
    write_clean_shutdown,
    write_meta_properties,
)
from tidelog.topic_partition import TopicPartition

log = logging.getLogger(__name__)

#: Dirs inside a log dir that are not partitions and that Kafka's LogManager skips.
SKIPPED_DIRS = frozenset({"__cluster_metadata-0", "remote-log-index-cache", "remote-log-cleaner"})
DEFAULT_NODE_ID = 1


@dataclass(slots=True)
class DirScan:
    """What :meth:`LogDir.scan` found: partition dirs to load, ``-delete`` dirs, and set-aside dirs
    with the reason."""

    partitions: dict[TopicPartition, Path] = field(default_factory=dict)
    to_delete: list[Path] = field(default_factory=list)
    set_aside: dict[Path, str] = field(default_factory=dict)


class LogDir:
    """An opened, locked log dir. Not thread-safe: the LogManager serializes checkpoint writes.

    ``checkpointed_*`` hold the checkpoint entries read at start-up (partitions set aside keep
    theirs through every later rewrite)."""

    def __init__(self, path: Path, lock: LogDirLock | None, meta: MetaProperties | None) -> None:
        self.path = path
        self._lock = lock
        self.meta = meta
        self.had_clean_shutdown = False
        self.broker_epoch = -1  # the marker's at start-up; written back at a clean shutdown
        self.keep_marker = False  # opened read-only: the marker, there or not, is left as it is
        self.checkpointed_recovery_points: dict[TopicPartition, int] = {}
        self.checkpointed_log_start_offsets: dict[TopicPartition, int] = {}
        self.checkpointed_high_watermarks: dict[TopicPartition, int] = {}
        self.loaded_completely = False

    @classmethod
    def open(cls, path: Path) -> LogDir:
        """Step 1 (create and lock) and read ``meta.properties``; nothing is written yet, so a
        start-up that fails after this (another cluster's dir, say) leaves the dir as it was.
        Raises :class:`LogDirLockedError`, or :class:`StorageError`/:class:`CheckpointError` naming the dir."""
        try:
            fileops.mkdir(path, parents=True, exist_ok=True)
        except OSError as e:
            raise StorageError("cannot create log dir", path=path, operation="mkdir") from e
        lock = LogDirLock.acquire(path)
        try:
            return cls(path, lock, read_meta_properties(path))
        except BaseException:
            lock.release()
            raise

    # Checkpoint files are made on first use: an unopened dir may not even exist.
    @functools.cached_property
    def recovery_points(self) -> OffsetCheckpointFile:
        return OffsetCheckpointFile(self.path / RECOVERY_POINT_CHECKPOINT_FILE)

    @functools.cached_property
    def log_start_offsets(self) -> OffsetCheckpointFile:
        return OffsetCheckpointFile(self.path / LOG_START_OFFSET_CHECKPOINT_FILE)

    @functools.cached_property
    def high_watermarks(self) -> OffsetCheckpointFile:
        return OffsetCheckpointFile(self.path / REPLICATION_OFFSET_CHECKPOINT_FILE)

    @classmethod
    def unopened(cls, path: Path) -> LogDir:
        """A log dir that could not be opened at start-up (a disk fault): not locked, nothing
        read; the manager keeps it offline and opens it for real once its probe passes."""
        return cls(path, None, None)

    @property
    def opened(self) -> bool:
        return self._lock is not None

    @property
    def cluster_id(self) -> str | None:
        return self.meta.cluster_id if self.meta else None

    @property
    def directory_id(self) -> str | None:
        return self.meta.directory_id if self.meta else None

    def begin_loading(self, cluster_id: str, node_id: int = DEFAULT_NODE_ID, *, keep_marker: bool = False) -> None:
        """Steps 2-4: format a fresh dir (or give an old one a ``directory.id``), note the
        clean-shutdown marker and its broker epoch and delete it (not with ``keep_marker``: see the
        module doc), read the checkpoints."""
        if self.meta is None:
            self.meta = MetaProperties(1, node_id, cluster_id, _new_uuid())
            write_meta_properties(self.path, self.meta)
        elif self.meta.directory_id is None:  # as Kafka 3.7+ does to older dirs
            self.meta = dataclasses.replace(self.meta, directory_id=_new_uuid())
            write_meta_properties(self.path, self.meta)
        self.had_clean_shutdown = has_clean_shutdown(self.path)
        self.broker_epoch = self._marker_epoch() if self.had_clean_shutdown else -1
        self.keep_marker = keep_marker
        if not keep_marker:
            delete_clean_shutdown(self.path)
        self.checkpointed_recovery_points = self.read_checkpoint(self.recovery_points)
        self.checkpointed_log_start_offsets = self.read_checkpoint(self.log_start_offsets)
        self.checkpointed_high_watermarks = self.read_checkpoint(self.high_watermarks)

    def _marker_epoch(self) -> int:
        """The marker's broker epoch; -1 (with a warning) when it does not parse: its existence
        alone decides a clean shutdown, as in Kafka."""
        try:
            epoch = read_clean_shutdown(self.path)
        except (CheckpointError, StorageError) as e:
            log.warning("%s: clean shutdown marker unreadable, its broker epoch taken as -1: %s", self.path, e)
            return -1
        return -1 if epoch is None else epoch

    def read_checkpoint(self, checkpoint: OffsetCheckpointFile) -> dict[TopicPartition, int]:
        """A checkpoint's entries, or none (with a warning) when it does not parse."""
        try:
            return checkpoint.read()
        except (CheckpointError, StorageError) as e:
            log.warning("%s: ignoring unreadable checkpoint: %s", self.path, e)
            return {}

    def scan(self) -> DirScan:
        """Sort the sub-directories (see the module doc). Lists the dir once."""
        found = DirScan()
        try:
            with os.scandir(self.path) as listing:  # d_type: no stat per entry
                entries = sorted(Path(e.path) for e in listing if e.is_dir())
        except OSError as e:
            raise StorageError("cannot list log dir", path=self.path, operation="list") from e
        for entry in entries:
            self._sort_entry(entry, found)
        return found

    def _sort_entry(self, entry: Path, found: DirScan) -> None:
        name = entry.name
        if name in SKIPPED_DIRS:
            return
        if name.endswith(files.DELETE_DIR_SUFFIX):
            found.to_delete.append(entry)
            return
        if files.is_renamed_partition_dir(name):
            found.set_aside[entry] = "future or stray replica dir: tidelog does not move replicas between log dirs"
            return
        try:
            tp = files.parse_topic_partition_name(name)
        except InvalidLogDirNameError as e:
            found.set_aside[entry] = str(e)
            return
        found.partitions[tp] = entry

    def mark_clean_shutdown(self, broker_epoch: int | None = None) -> None:
        """Write ``.kafka_cleanshutdown``, only if the dir had one at start-up or every log of it
        loaded (Kafka's rule: a log that never loaded was never recovered). ``broker_epoch``:
        None keeps the one read at start-up. With ``keep_marker`` nothing is written."""
        if self.keep_marker:
            return
        if self.had_clean_shutdown or self.loaded_completely:
            write_clean_shutdown(self.path, self.broker_epoch if broker_epoch is None else broker_epoch)

    def mark_unclean(self) -> None:
        """The dir did not shut down cleanly (a log failed to close, the dir went offline): a kept
        marker is no longer true, so it goes."""
        if self.keep_marker and self.had_clean_shutdown:
            delete_clean_shutdown(self.path)

    def release(self) -> None:
        if self._lock is not None:
            self._lock.release()

    def __repr__(self) -> str:
        return f"LogDir({self.path})"


def _new_uuid() -> str:
    return uuid_to_topic_id(uuid.uuid4())


def describe_error(error: BaseException) -> str:
    """One line for an error that set a partition or dir aside."""
    return str(error) if isinstance(error, TidelogError) else f"{type(error).__name__}: {error}"


def open_log_dirs(paths: Sequence[Path], *,
                  keep_marker: bool = False) -> tuple[list[LogDir], dict[Path, BaseException]]:
    """Lock and begin loading each of ``paths``, in order; one failing on the disk is kept as an
    unopened :class:`LogDir` with its error (see :meth:`LogManager.open`). On any error raised,
    no dir stays locked. ``keep_marker``: see :meth:`LogDir.begin_loading`."""
    dirs: list[LogDir] = []
    failed: dict[Path, BaseException] = {}
    try:
        for path in paths:
            dirs.append(_open_or_fail(path, lambda: LogDir.open(path), failed))
        cluster_id = one_cluster_id([d for d in dirs if d.opened])
        for i, log_dir in enumerate(dirs):
            if log_dir.opened:
                dirs[i] = _open_or_fail(log_dir.path, lambda: _begin_loading(log_dir, cluster_id, keep_marker), failed)
        if len(failed) == len(dirs) and failed:
            raise next(iter(failed.values()))
    except BaseException:
        for log_dir in dirs:
            log_dir.release()
        raise
    return dirs, failed


def _begin_loading(log_dir: LogDir, cluster_id: str, keep_marker: bool) -> LogDir:
    try:
        log_dir.begin_loading(cluster_id, keep_marker=keep_marker)
    except BaseException:
        log_dir.release()
        raise
    return log_dir


def _open_or_fail(path: Path, opener: Callable[[], LogDir], failed: dict[Path, BaseException]) -> LogDir:
    """``opener()``, or an unopened dir with the error noted in ``failed`` when it is a disk fault."""
    try:
        return opener()
    except LogDirLockedError:
        raise
    except (StorageError, CheckpointError) as e:
        if not is_storage_fault(e):
            raise
        failed[path] = e
        return LogDir.unopened(path)


def one_cluster_id(dirs: Sequence[LogDir]) -> str:
    """The cluster id the dirs share (a new one for fresh dirs); :class:`StorageError` when they
    belong to different clusters, as Kafka refuses to start then."""
    ids = {d.cluster_id for d in dirs if d.cluster_id is not None}
    if len(ids) > 1:
        listing = ", ".join(f"{d.path} ({d.cluster_id})" for d in dirs if d.cluster_id is not None)
        raise StorageError(f"log dirs belong to different clusters: {listing}")
    return ids.pop() if ids else uuid_to_topic_id(uuid.uuid4())
