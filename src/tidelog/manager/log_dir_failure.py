"""Log dir failures: which dirs are offline, why, and when to try them again.

Kafka's ``LogDirFailureChannel`` (``ReplicaManager.handleLogDirFailure``): an ``IOException`` from
any storage operation of a log — append, roll, flush, checkpoint write, segment deletion, the
cleaner's swap — takes the whole log dir offline. Its partitions answer ``KAFKA_STORAGE_ERROR``
(56), their metadata names no leader (``LEADER_NOT_AVAILABLE``, the replica listed offline) and
DescribeLogDirs answers the dir with ``KAFKA_STORAGE_ERROR``; the other dirs keep serving. Kafka
needs a broker restart to use the dir again; tidelog **probes** it instead, with a doubling
backoff, and brings it back once the probe succeeds (:meth:`LogManager.probe_offline_dirs`).

**The probe tests what failed** (:class:`FaultCause`): a write, an fsync and an unlink of a probe
file always, plus a reservation of as many bytes as the failed write moved (an append of N bytes
that met ENOSPC is retried as a reservation of N bytes, not one page: a nearly full disk may take
a page yet refuse the batch, so the dir comes back only when the batch that failed would fit), and
a re-read of every file region whose read failed. **Backoff is per cause**: a dir that fails again
for the same kind of operation and errno soon after it came back starts from the doubled backoff
of last time, so a disk that keeps filling is probed ever less often (capped), not every second.

**Reads serving clients** (fetch, list offsets: :class:`ReadFaults`) fail only their partition
(KAFKA_STORAGE_ERROR) while the rest of the dir works: one unreadable file must not stop produces
to every other partition of the dir. The dir goes offline only when read faults spread to
:data:`READ_FAULT_SPREAD` partitions within :data:`READ_FAULT_WINDOW_MS`, or when a write fails.
Kafka takes the dir offline on any ``IOException``.

**Loading**: a partition that meets an environment fault while it loads at start-up
(:func:`is_environment_fault`: ENOSPC, EIO, EROFS, EDQUOT, EACCES ...) takes its dir offline
instead of being set aside for good; the probe loads the dir later. Errnos that describe the data
(a missing file, a file where a dir should be) still set the partition aside.

What counts as a dir fault (:func:`is_storage_fault`): an ``OSError`` anywhere in the error's
cause chain. A :class:`~tidelog.errors.StorageError` without one ("log is closed", a partition
set aside) is not a fault of the dir. One exception (:func:`is_cleaner_scratch_fault`): a fault
writing the cleaner's own ``.cleaned`` files (ENOSPC while copying, say) touches no file a log
serves from; the clean is abandoned, its ``.cleaned`` files removed and the partition quarantined
for cleaning (the cleaner's own backoff), while the dir stays online. Kafka takes the dir offline
then too; a full disk that only the cleaner's extra copy hits should not stop producers. Any
fault of a rename (the ``.cleaned`` → ``.swap`` step) or of a file the log serves from takes the
dir offline, as in Kafka.

Thread-safety: :class:`LogDirFailureChannel` and :class:`ReadFaults` are each guarded by their own lock.
"""

from __future__ import annotations

import dataclasses
import errno as errno_module
import logging
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
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
#: Bytes a probe re-reads of a failed read whose size is unknown (an index map, say).
READ_PROBE_BYTES = 64 << 10
#: Bytes a probe writes at a time where the file system cannot reserve blocks (no ``fallocate``).
_PROBE_CHUNK = 1 << 20
#: Read faults (of reads serving clients) in this many partitions of one dir within
#: READ_FAULT_WINDOW_MS take the dir offline; fewer fail only their own reads.
READ_FAULT_SPREAD = 2
READ_FAULT_WINDOW_MS = 60_000
#: Errnos that describe the data, not the disk: a load that meets one sets the partition aside
#: (the data needs an operator); any other errno takes the dir offline until its probe passes.
DATA_ERRNOS = frozenset({errno_module.ENOENT, errno_module.ENOTDIR, errno_module.EISDIR, errno_module.EEXIST,
                         errno_module.ENOTEMPTY, errno_module.EINVAL, errno_module.ELOOP,
                         errno_module.ENAMETOOLONG, errno_module.EXDEV})


class FaultKind(StrEnum):
    """What kind of operation failed, which is what its probe repeats."""

    WRITE = "write"  # anything that changes the disk: append, flush, checkpoint, rename ...
    READ = "read"  # a read serving a client (fetch, list offsets)


@dataclass(frozen=True, slots=True)
class FaultCause:
    """What failed, as a probe must test it again: the kind, the errno, the file, and for a read
    the region (``position``, ``size``), for a write the bytes it moved (``size``, 0 unknown)."""

    kind: FaultKind
    errno: int | None
    path: str | None
    position: int | None = None
    size: int = 0

    @classmethod
    def of(cls, kind: FaultKind, error: BaseException, size: int = 0) -> FaultCause:
        fault = os_error_of(error)
        position = _context_of(error, "position")
        return cls(kind, fault.errno if fault else None, _failed_path(fault) or _context_of(error, "path"),
                   position if isinstance(position, int) else None, size)

    @property
    def key(self) -> tuple[FaultKind, int | None]:
        """What per-cause backoff is kept by."""
        return self.kind, self.errno


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
    causes: tuple[FaultCause, ...] = ()  # what the probe tests again (see the module doc)

    @property
    def errno_name(self) -> str | None:
        return errno_module.errorcode.get(self.errno) if self.errno is not None else None

    def describe(self) -> str:
        """One line for logs and reports: the dir, the operation, the errno and the error."""
        code = f" [{self.errno_name}]" if self.errno_name else ""
        return f"log dir {self.path} is offline: {self.operation} failed{code}: {self.error}"


class LogDirFailureChannel:
    """The set of offline log dirs (Kafka's ``LogDirFailureChannel``), keyed by path, and the
    backoff each cause reached, kept for a while after its dir came back (see the module doc)."""

    def __init__(self, clock: Clock, backoff: ProbeBackoff | None = None) -> None:
        self._clock = clock
        self.backoff = backoff or ProbeBackoff()
        self._lock = threading.Lock()
        self._offline: dict[Path, OfflineLogDir] = {}
        # (dir, cause key) -> (backoff reached, when the dir came back): a relapse within
        # backoff.max_ms of coming back starts from the doubled backoff
        self._relapses: dict[tuple[Path, tuple[FaultKind, int | None]], tuple[int, int]] = {}

    def mark_offline(self, path: Path, operation: str, error: BaseException,
                     cause: FaultCause | None = None) -> OfflineLogDir | None:
        """Record ``path`` offline; None when it already was (the first error is kept; ``cause``
        joins what the probe tests)."""
        fault = os_error_of(error)
        cause = cause or FaultCause.of(FaultKind.WRITE, error)
        now = self._clock.milliseconds()
        with self._lock:
            if path in self._offline:
                self._add_cause(path, cause)
                return None
            backoff = self._first_backoff(path, cause, now)
            record = OfflineLogDir(
                path, operation, describe_fault(error), fault.errno if fault else None,
                _failed_path(fault), now, now + backoff, backoff, causes=(cause,))
            self._offline[path] = record
        return record

    def _first_backoff(self, path: Path, cause: FaultCause, now: int) -> int:
        relapse = self._relapses.get((path, cause.key))
        if relapse is None or now - relapse[1] > self.backoff.max_ms:
            return self.backoff.initial_ms
        return self.backoff.after(relapse[0])

    def _add_cause(self, path: Path, cause: FaultCause) -> None:
        record = self._offline[path]
        if cause not in record.causes:
            self._offline[path] = dataclasses.replace(record, causes=_merged(record.causes, cause))

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
        """Forget ``path``'s failure (its causes' backoff is kept for a relapse); what it was, or None."""
        now = self._clock.milliseconds()
        with self._lock:
            record = self._offline.pop(path, None)
            if record is not None:
                for cause in record.causes:
                    self._relapses[(path, cause.key)] = (record.backoff_ms, now)
            return record


def _merged(causes: tuple[FaultCause, ...], cause: FaultCause) -> tuple[FaultCause, ...]:
    """``causes`` with ``cause``: one write cause per errno (the largest size), at most 16 reads."""
    if cause.kind is FaultKind.WRITE:
        same = [c for c in causes if c.kind is FaultKind.WRITE and c.errno == cause.errno]
        if same and same[0].size >= cause.size:
            return causes
        return (*(c for c in causes if c not in same), cause)
    reads = [c for c in causes if c.kind is FaultKind.READ]
    return causes if len(reads) >= 16 else (*causes, cause)


class ReadFaults:
    """Recent read faults of reads serving clients, per log dir: which partitions met one, and
    the regions that failed (what a probe re-reads if the dir goes offline). Guarded by its own lock."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._seen: dict[Path, dict[TopicPartition, tuple[int, FaultCause]]] = {}

    def seen_recently(self, log_dir: Path, tp: TopicPartition) -> bool:
        """Whether ``tp`` met a read fault within READ_FAULT_WINDOW_MS (its next is not logged again)."""
        now = self._clock.milliseconds()
        with self._lock:
            found = self._seen.get(log_dir, {}).get(tp)
            return found is not None and now - found[0] <= READ_FAULT_WINDOW_MS

    def record(self, log_dir: Path, tp: TopicPartition, cause: FaultCause) -> list[FaultCause] | None:
        """Note a read fault of ``tp``; when faults of READ_FAULT_SPREAD partitions of ``log_dir``
        fell within READ_FAULT_WINDOW_MS, the causes to probe (the dir must go offline), else None."""
        now = self._clock.milliseconds()
        with self._lock:
            seen = self._seen.setdefault(log_dir, {})
            for old in [t for t, (at, _) in seen.items() if now - at > READ_FAULT_WINDOW_MS]:
                del seen[old]
            first = seen.get(tp)
            seen[tp] = (first[0] if first is not None else now, cause)
            if len(seen) < READ_FAULT_SPREAD:
                return None
            del self._seen[log_dir]
            return [c for _, c in seen.values()]

    def forget(self, log_dir: Path) -> None:
        with self._lock:
            self._seen.pop(log_dir, None)


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


def is_environment_fault(error: BaseException) -> bool:
    """Whether ``error`` is a disk or system fault that may pass (ENOSPC, EIO, EROFS, EDQUOT,
    EACCES, EMFILE ...), not one that describes the data (:data:`DATA_ERRNOS`): a load that
    meets one takes the dir offline rather than setting the partition aside."""
    fault = os_error_of(error)
    return fault is not None and fault.errno is not None and fault.errno not in DATA_ERRNOS


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


def probe(log_dir: Path, causes: Sequence[FaultCause] = ()) -> None:
    """Test ``log_dir`` again (see the module doc): write, fsync and remove :data:`PROBE_FILE`
    (and fsync the dir), reserving in it as many bytes as the largest failed write of ``causes``
    moved; then re-read each failed read region of ``causes`` (a file gone since passes). Raises
    the ``OSError`` of the first step that fails; leaves no probe file behind when it can remove it."""
    path = log_dir / PROBE_FILE
    line = b"tidelog log dir probe\n"
    reserve = max((c.size for c in causes if c.kind is FaultKind.WRITE), default=0)
    fileops.mkdir(log_dir, parents=True, exist_ok=True)  # a dir that could not even be created
    fd = fileops.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC)
    try:
        fileops.write_fully(fd, line, path)
        if reserve:
            _reserve(fd, len(line), reserve, path)
        fileops.fsync(fd, path)
    finally:
        os.close(fd)
        fileops.unlink(path, missing_ok=True)
    fileops.fsync_dir(log_dir)
    for cause in causes:
        if cause.kind is FaultKind.READ and cause.path is not None:
            _reread(Path(cause.path), cause.position or 0, cause.size or READ_PROBE_BYTES)


def _reserve(fd: int, offset: int, size: int, path: Path) -> None:
    """Have the disk give ``size`` bytes to the probe file: blocks reserved where the file system
    can, else written."""
    if fileops.reserve_blocks(fd, offset, size, path):
        return
    chunk = bytes(min(size, _PROBE_CHUNK))
    written = 0
    while written < size:
        written += fileops.pwrite(fd, chunk[:size - written], offset + written, path)


def _reread(path: Path, position: int, size: int) -> None:
    try:
        fd = fileops.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return  # removed since (retention, a deleted topic): nothing left that fails
    try:
        fileops.pread(fd, size, position, path)
    finally:
        os.close(fd)


def _context_of(error: BaseException, name: str) -> Any:
    """A context field (``path``, ``position``) of the first tidelog error in ``error``'s chain
    that has it, or None."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        context = getattr(current, "context", None)
        if isinstance(context, dict) and name in context:
            value = context[name]
            return os.fspath(value) if isinstance(value, os.PathLike) else value
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def _failed_path(fault: OSError | None) -> str | None:
    if fault is None or fault.filename is None:
        return None
    return os.fsdecode(fault.filename)


@dataclass(frozen=True, slots=True)
class OfflineLog:
    """A partition of an offline dir. Closed when the failed operation was its own: then what its
    reopening needs from the log that was live (its log start offset must not go back; recovery
    restarts from its recovery point or the checkpointed one, whichever is lower). Else ``log``
    is the live log, kept open and unserved until the dir is back."""

    path: Path
    log_start_offset: int
    recovery_point: int
    log: Log | None = None  # kept open, as it was, when the fault did not touch it (no recovery then)


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
