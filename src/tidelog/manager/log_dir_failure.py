"""Log dir failures: which dirs are offline, why, and when to try them again.

Kafka's ``LogDirFailureChannel`` (``ReplicaManager.handleLogDirFailure``): an ``IOException`` from
any storage operation of a log — append, roll, flush, checkpoint write, segment deletion, the
cleaner's swap — takes the whole log dir offline. Its partitions answer ``KAFKA_STORAGE_ERROR``
(56), their metadata names no leader (``LEADER_NOT_AVAILABLE``, the replica listed offline) and
DescribeLogDirs answers the dir with ``KAFKA_STORAGE_ERROR``; the other dirs keep serving. Kafka
needs a broker restart to use the dir again; tidelog **probes** it instead: a write, an fsync and
an unlink of a probe file, with a doubling backoff, and reopens its logs with recovery once the
probe succeeds (:meth:`LogManager.probe_offline_dirs`).

What counts as a dir fault (:func:`is_storage_fault`): an ``OSError`` anywhere in the error's
cause chain. A :class:`~tidelog.errors.StorageError` without one ("log is closed", a partition
set aside) is not a fault of the dir. One exception (:func:`is_cleaner_scratch_fault`): a fault
writing the cleaner's own ``.cleaned`` files (ENOSPC while copying, say) touches no file a log
serves from; the clean is abandoned, its ``.cleaned`` files removed and the partition quarantined
for cleaning (the cleaner's own backoff), while the dir stays online. Kafka takes the dir offline
then too; a full disk that only the cleaner's extra copy hits should not stop producers. Any
fault of a rename (the ``.cleaned`` → ``.swap`` step) or of a file the log serves from takes the
dir offline, as in Kafka.

Thread-safety: :class:`LogDirFailureChannel` is guarded by its own lock.
"""

from __future__ import annotations

import dataclasses
import errno as errno_module
import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tidelog.cleaner.log_cleaner import LogCleaner
from tidelog.cleaner.manager import PHASE_CLEANING
from tidelog.clock import Clock
from tidelog.storage import fileops, files
from tidelog.storage.log import Log
from tidelog.topic_partition import TopicPartition

log = logging.getLogger(__name__)

#: Written, fsynced and removed in an offline log dir to tell whether it works again.
PROBE_FILE = ".tidelog-probe"


@dataclass(frozen=True, slots=True)
class ProbeBackoff:
    """How often an offline dir is probed: ``initial_ms`` after it fails, doubling after every
    failed probe up to ``max_ms``."""

    initial_ms: int = 1_000
    max_ms: int = 60_000

    def __post_init__(self) -> None:
        if not 0 < self.initial_ms <= self.max_ms:
            raise ValueError(f"probe backoff must satisfy 0 < initial <= max: {self}")

    def after(self, previous_ms: int) -> int:
        return min(self.max_ms, previous_ms * 2)


@dataclass(frozen=True, slots=True)
class OfflineLogDir:
    """An offline log dir: the operation that failed, its error, and the probe schedule.

    ``errno`` and ``failed_path`` come from the ``OSError`` behind the error (None when unknown);
    ``since_ms`` is when the dir went offline; ``probes`` counts failed probes since."""

    path: Path
    operation: str
    error: str
    errno: int | None
    failed_path: str | None
    since_ms: int
    next_probe_ms: int
    backoff_ms: int
    probes: int = 0
    last_probe_error: str | None = None

    @property
    def errno_name(self) -> str | None:
        return errno_module.errorcode.get(self.errno) if self.errno is not None else None

    def describe(self) -> str:
        """One line for logs and reports: the dir, the operation, the errno and the error."""
        code = f" [{self.errno_name}]" if self.errno_name else ""
        return f"log dir {self.path} is offline: {self.operation} failed{code}: {self.error}"


class LogDirFailureChannel:
    """The set of offline log dirs (Kafka's ``LogDirFailureChannel``), keyed by path."""

    def __init__(self, clock: Clock, backoff: ProbeBackoff | None = None) -> None:
        self._clock = clock
        self.backoff = backoff or ProbeBackoff()
        self._lock = threading.Lock()
        self._offline: dict[Path, OfflineLogDir] = {}

    def mark_offline(self, path: Path, operation: str, error: BaseException) -> OfflineLogDir | None:
        """Record ``path`` offline; None when it already was (the first error is kept)."""
        fault = os_error_of(error)
        now = self._clock.milliseconds()
        record = OfflineLogDir(
            path, operation, describe_fault(error), fault.errno if fault else None,
            _failed_path(fault), now, now + self.backoff.initial_ms, self.backoff.initial_ms)
        with self._lock:
            if path in self._offline:
                return None
            self._offline[path] = record
        return record

    def is_offline(self, path: Path) -> bool:
        return path in self._offline

    def get(self, path: Path) -> OfflineLogDir | None:
        return self._offline.get(path)

    def offline_dirs(self) -> list[OfflineLogDir]:
        with self._lock:
            return sorted(self._offline.values(), key=lambda r: str(r.path))

    def due_for_probe(self) -> list[Path]:
        """Offline dirs whose next probe time has come."""
        now = self._clock.milliseconds()
        with self._lock:
            return sorted((p for p, r in self._offline.items() if r.next_probe_ms <= now), key=str)

    def probe_failed(self, path: Path, error: BaseException) -> None:
        """Push the next probe of ``path`` back by the doubled backoff."""
        now = self._clock.milliseconds()
        with self._lock:
            record = self._offline.get(path)
            if record is None:
                return
            backoff = self.backoff.after(record.backoff_ms)
            self._offline[path] = dataclasses.replace(
                record, next_probe_ms=now + backoff, backoff_ms=backoff, probes=record.probes + 1,
                last_probe_error=describe_fault(error))

    def mark_online(self, path: Path) -> OfflineLogDir | None:
        """Forget ``path``'s failure; what it was, or None."""
        with self._lock:
            return self._offline.pop(path, None)


def os_error_of(error: BaseException) -> OSError | None:
    """The first ``OSError`` in ``error``'s cause/context chain (``error`` itself included)."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if isinstance(current, OSError):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def is_storage_fault(error: BaseException) -> bool:
    """Whether ``error`` is a failure of the disk (an ``OSError`` behind it): see the module doc."""
    return os_error_of(error) is not None


def is_cleaner_scratch_fault(error: BaseException) -> bool:
    """Whether ``error`` is a fault on the cleaner's ``.cleaned`` files only (not a rename): the
    partition is quarantined for cleaning and its dir stays online (see the module doc)."""
    fault = os_error_of(error)
    if fault is None or fault.filename2 is not None or fault.filename is None:
        return False
    return os.fsdecode(fault.filename).endswith(files.CLEANED_SUFFIX)


def describe_fault(error: BaseException) -> str:
    """The error's own words, with the ``OSError`` behind it when the message does not name it."""
    text = str(error)
    fault = os_error_of(error)
    if fault is not None and fault is not error and fault.strerror and fault.strerror not in text:
        text = f"{text}: {fault.strerror}"
    return text


def probe(log_dir: Path) -> None:
    """Write, fsync and remove :data:`PROBE_FILE` in ``log_dir`` (and fsync the dir); raises the
    ``OSError`` of the first step that fails. Leaves no probe file behind when it can remove it."""
    path = log_dir / PROBE_FILE
    fileops.mkdir(log_dir, parents=True, exist_ok=True)  # a dir that could not even be created
    fd = fileops.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC)
    try:
        fileops.write_fully(fd, b"tidelog log dir probe\n", path)
        fileops.fsync(fd, path)
    finally:
        os.close(fd)
        fileops.unlink(path, missing_ok=True)
    fileops.fsync_dir(log_dir)


def _failed_path(fault: OSError | None) -> str | None:
    if fault is None or fault.filename is None:
        return None
    return os.fsdecode(fault.filename)


@dataclass(frozen=True, slots=True)
class OfflineLog:
    """A partition of an offline dir, closed: what its reopening needs from the log that was live
    (its log start offset must not go back; recovery restarts from its recovery point or the
    checkpointed one, whichever is lower)."""

    path: Path
    log_start_offset: int
    recovery_point: int


class FaultReportingCleaner(LogCleaner):
    """The log cleaner, with each failure that quarantines a partition also given to
    ``on_failure(tp, log, error)``, which takes the log's dir offline when the error is a disk
    fault of a file the log serves from (see the module doc)."""

    def __init__(self, *args: Any, on_failure: Callable[[TopicPartition, Log, BaseException], None],
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._on_failure = on_failure

    def quarantine(self, tp: TopicPartition, lg: Log, error: BaseException, phase: str = PHASE_CLEANING) -> None:
        super().quarantine(tp, lg, error, phase)
        self._on_failure(tp, lg, error)
