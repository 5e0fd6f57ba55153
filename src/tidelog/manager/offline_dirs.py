"""Log dir failures: taking a dir offline, answering for its partitions, probing it and
bringing it back (:mod:`.log_dir_failure` has the rules, the failure channel and the probe
itself; ``docs/faults.md`` the whole story).

:class:`OfflineDirs` is a component of :class:`~tidelog.manager.manager.LogManager`
(``manager.offline_dirs``). It owns the failure channel, the read-fault counts, the dirs whose
load a fault cut short and the partitions whose cleaning it paused; it works on the
:class:`~.partition_map.PartitionMap` it shares with the manager, reopens logs with the
:class:`~.loading.PartitionLoader`, and runs the manager's steps for a dir coming back through
the :class:`ManagerSteps` it is given (registry rejoin and reconciliation, a late load, the
deletion of a partition dir, pending staged commits).

A dir that comes back finishes the staged commits (:mod:`.staged_commit`) its absence kept
pending: their partitions, held (unserved) meanwhile, rejoin still held and are released once the
job is completed or rolled back.

A dir going offline closes only the logs the failed operation belonged to (they reopen with
recovery when the dir is back); the dir's other logs stay open, unserved, and rejoin the live set
as they were: a dir that comes back re-recovers nothing the fault did not touch. Its cleaning
stops (a clean in progress is aborted, the cleaner checkpoint no longer written) and resumes
when it is back. A dir coming back brings its topic registry as a dir does at start-up (a
damaged one kept aside, a newer entry wins, epochs never lower) and its partitions' copies of
the registry are brought up to date. A read serving a client that fails fails only its own
partition unless read faults spread (:class:`ReadFaults`).

Thread-safety: the partition map changes under its lock (the manager's); logs are closed and
reopened outside it (a reopen runs recovery), and a topic deleted meanwhile is noticed when the
reopened logs are registered. The failure channel and the read-fault counts have their own
locks, taken after the map's. Each public method says what it takes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tidelog.cleaner.log_cleaner import LogCleaner
from tidelog.clock import Clock
from tidelog.errors import (
    CleanerStateError,
    LogDirOfflineError,
    StorageError,
    TidelogError,
    UnknownTopicOrPartitionError,
)
from tidelog.manager.log_dir import LogDir, describe_error, one_cluster_id
from tidelog.manager.loading import PartitionLoader, close_failed_log
from tidelog.manager.log_dir_failure import (
    FaultCause,
    FaultKind,
    LogDirFailureChannel,
    OfflineLog,
    OfflineLogDir,
    ProbeBackoff,
    ReadFaults,
    describe_fault,
    is_cleaner_scratch_fault,
    is_storage_fault,
    probe,
)
from tidelog.manager.partition_map import PartitionMap
from tidelog.manager.reports import SetAside
from tidelog.manager.staged_holds import StagedHolds
from tidelog.manager.topics import TopicRecord
from tidelog.storage import files
from tidelog.storage.log import Log
from tidelog.topic_partition import TopicPartition

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ManagerSteps:
    """The manager's steps :class:`OfflineDirs` runs when a dir comes back."""

    rejoin_registry: Callable[[LogDir], None]  # under the map's lock: the dir's registry copy joins
    reconcile_registry: Callable[[bool], list[TopicPartition]]  # under the lock: partitions newly held
    sync_topic_copies: Callable[..., None]  # under the lock: rewrite the partitions' registry copies
    await_held: Callable[[list[TopicPartition]], None]  # outside the lock: cleans a hold aborted stop
    load_dir_late: Callable[[LogDir], list[tuple[TopicPartition, Log]]]  # load a dir as start-up does
    delete_partition_dir: Callable[[Path, TopicPartition], None]  # rename for deletion, schedule removal
    complete_pending: Callable[[], None]  # finish the staged commits left pending (outside the lock)


class OfflineDirs:
    """Log dir failure handling of a LogManager (see the module doc). ``partition_map``: shared
    with the manager; ``cleaner``: paused and resumed with the dirs (None without one)."""

    def __init__(self, partition_map: PartitionMap, clock: Clock, probe_backoff: ProbeBackoff | None,
                 loader: PartitionLoader, staged_holds: StagedHolds, cleaner: LogCleaner | None,
                 steps: ManagerSteps) -> None:
        self._map = partition_map
        self.failures = LogDirFailureChannel(clock, probe_backoff)  # which dirs are offline, and why
        self._read_faults = ReadFaults(clock)
        self._unloaded: set[Path] = set()  # opened, their load cut short by a disk fault; under the map's lock
        self._cleaning_stopped: dict[Path, set[TopicPartition]] = {}  # paused while their dir is offline; ditto
        self._loader = loader
        self._staged_holds = staged_holds
        self.cleaner = cleaner
        self._steps = steps

    def offline_log_dirs(self) -> list[OfflineLogDir]:
        """The log dirs offline now, each with the operation and error that took it offline.
        Thread-safe: the failure channel has its own lock."""
        return self.failures.offline_dirs()

    def report_storage_error(self, tp: TopicPartition, operation: str, error: BaseException) -> bool:
        """Take ``tp``'s log dir offline when ``error`` is a disk fault (for callers that use a
        :class:`Log` directly); returns whether it is offline now. Reads serving clients report
        through :meth:`report_read_error` instead. Thread-safe: a dir goes offline under the
        map's lock."""
        log_dir = self._map.log_dir_of.get(tp) or self._offline_dir_of(tp, None, error)
        if log_dir is None:
            return tp in self._map.offline_logs
        return self.handle_dir_error(log_dir, f"{operation} of {tp}", error, tp)

    def report_read_error(self, tp: TopicPartition, operation: str, error: BaseException) -> bool:
        """A read serving a client (fetch, list offsets) of ``tp`` failed: when ``error`` is a
        disk fault, only this read fails (KAFKA_STORAGE_ERROR) unless read faults spread over
        the dir, which then goes offline (see the module doc). Returns whether ``tp`` is offline now.
        Thread-safe: the read-fault counts have their own lock; a dir goes offline under the
        map's lock. Costs nothing but one lookup for an error that is no disk fault."""
        log_dir = self._map.log_dir_of.get(tp)
        if log_dir is None:
            return tp in self._map.offline_logs
        if not is_storage_fault(error):
            return self.failures.is_offline(log_dir.path)
        cause = FaultCause.of(FaultKind.READ, error)
        again = self._read_faults.seen_recently(log_dir.path, tp)
        spread = self._read_faults.record(log_dir.path, tp, cause)
        if spread is None:
            log.log(logging.DEBUG if again else logging.WARNING,
                    "%s: %s failed, only this read fails (the log dir stays online): %s",
                    tp, operation, describe_fault(error))
            return False
        self._take_offline(log_dir, f"{operation} of {tp} (read faults in {len(spread)} partitions)", error,
                           causes=spread)
        return True

    @contextmanager
    def storage_op(self, tp: TopicPartition, lg: Log, operation: str, size: int = 0) -> Iterator[None]:
        """Run a storage operation of ``lg`` (``size``: the bytes it writes, when known): a disk
        fault takes its dir offline and surfaces as :class:`LogDirOfflineError`
        (KAFKA_STORAGE_ERROR), chained to the original error. Thread-safe: takes no lock unless
        the operation fails on the disk (then the dir goes offline under the map's lock); on the
        append path it costs a ``try`` and one generator."""
        try:
            yield
        except (StorageError, OSError) as e:
            if isinstance(e, LogDirOfflineError):
                raise
            log_dir = self._map.log_dir_of.get(tp)
            if log_dir is None or lg.dir.parent != log_dir.path:
                log_dir = self._offline_dir_of(tp, lg, e)
                if log_dir is None:
                    raise
            cause = FaultCause.of(FaultKind.WRITE, e, size)
            if not self.handle_dir_error(log_dir, f"{operation} of {tp}", e, tp, cause):
                raise
            raise self.offline_error(tp, log_dir.path) from e

    def _offline_dir_of(self, tp: TopicPartition, lg: Log | None, error: BaseException) -> LogDir | None:
        """The dir of ``tp``'s log (``lg``, or any) kept open in an offline dir, when ``error`` is
        a disk fault of that log's own operation (it is no longer untouched), else None."""
        offline = self._map.offline_logs.get(tp)
        if offline is None or offline.log is None or not is_storage_fault(error):
            return None
        if lg is not None and offline.log is not lg:
            return None
        return next((d for d in self._map.dirs if d.path == offline.path.parent), None)

    def offline_error(self, tp: TopicPartition, path: Path) -> LogDirOfflineError:
        """The error for ``tp`` while its dir ``path`` is offline. Thread-safe (the channel's lock)."""
        failure = self.failures.get(path)
        why = failure.describe() if failure is not None else f"log dir {path} is offline"
        return LogDirOfflineError(f"partition {tp} is offline: {why}", topic_partition=str(tp))

    def cleaner_failed(self, tp: TopicPartition, lg: Log, error: BaseException) -> None:
        """A partition the cleaner quarantined: its dir goes offline unless only the cleaner's
        scratch files failed. Thread-safe: a dir goes offline under the map's lock (the cleaner's
        thread calls this)."""
        if is_cleaner_scratch_fault(error):
            return
        log_dir = self._map.log_dir_of.get(tp)
        if log_dir is None or lg.dir.parent != log_dir.path:
            log_dir = self._offline_dir_of(tp, lg, error)  # kept open in an offline dir meanwhile
            if log_dir is None:
                return
        self.handle_dir_error(log_dir, f"cleaning of {tp}", error, tp)  # its files changed: recover it

    def handle_dir_error(self, log_dir: LogDir, operation: str, error: BaseException,
                         tp: TopicPartition | None = None, cause: FaultCause | None = None) -> bool:
        """Take ``log_dir`` offline when ``error`` is a disk fault of an operation (of ``tp``'s
        log, when given); whether it is offline now. Thread-safe: under the map's lock, which the
        caller may hold already (it is reentrant)."""
        if not is_storage_fault(error):
            return self.failures.is_offline(log_dir.path)
        self._take_offline(log_dir, operation, error, tp, [cause] if cause is not None else None)
        return True

    def _take_offline(self, log_dir: LogDir, operation: str, error: BaseException,
                      touched: TopicPartition | None = None, causes: list[FaultCause] | None = None) -> None:
        """Kafka's ``handleLogDirFailure``: every log of the dir leaves the live set at once. The
        log of ``touched`` (whose operation failed) is closed, errors ignored (the disk is
        failing); the others stay open as they are, unserved. Its cleaning stops with it
        (:meth:`_stop_cleaning`)."""
        causes = causes or [FaultCause.of(FaultKind.WRITE, error)]
        with self._map.lock:
            failure = self.failures.mark_offline(log_dir.path, operation, error, causes[0])
            for cause in causes[1:]:
                self.failures.mark_offline(log_dir.path, operation, error, cause)
            doomed = [(tp, lg) for tp, lg in self._map.logs.items() if self._map.log_dir_of.get(tp) is log_dir]
            for tp, lg in doomed:
                del self._map.logs[tp]
                del self._map.log_dir_of[tp]
                self._map.offline_logs[tp] = OfflineLog(lg.dir, lg.log_start_offset, lg.recovery_point, lg)
            self._stop_cleaning(log_dir.path, [tp for tp, _ in doomed])
            closing = self._close_for_recovery(touched)
        if failure is not None:
            log.error("%s; %d partition(s) offline, the other log dirs keep serving", failure.describe(), len(doomed))
        if closing is not None:
            close_failed_log(*closing)

    def _stop_cleaning(self, path: Path, tps: Iterable[TopicPartition]) -> None:
        """Under the lock: the cleaner forgets the dir's checkpoint (Kafka's ``handleLogDirFailure``:
        nothing is written to the dir any more) and pauses ``tps``; a clean in progress is aborted
        and stops at its next chunk. Never waits for it: this may run on the cleaner thread whose
        clean failed, or under this lock, which that thread may need. :meth:`_resume_cleaning`
        waits for it before the dir's logs rejoin."""
        if self.cleaner is None:
            return
        if path not in self._cleaning_stopped:
            self.cleaner.manager.handle_log_dir_failure(path)
        stopped = self._cleaning_stopped.setdefault(path, set())
        newly = [tp for tp in tps if tp not in stopped]
        self.cleaner.manager.pause_cleaning(*newly)
        stopped.update(newly)

    def _await_cleaning_stopped(self, path: Path) -> None:
        """Outside the lock: wait for the cleans aborted when ``path`` went offline to stop."""
        if self.cleaner is not None:
            with self._map.lock:
                stopped = list(self._cleaning_stopped.get(path, ()))
            self.cleaner.manager.await_stopped(*stopped)

    def _resume_cleaning(self, path: Path) -> None:
        """Outside the lock, once ``path`` is back: its cleaner checkpoint is kept again and the
        partitions paused when it went offline resume."""
        if self.cleaner is None:
            return
        with self._map.lock:
            stopped = sorted(self._cleaning_stopped.pop(path, ()))
        self.cleaner.manager.handle_log_dir_online(path)
        for tp in stopped:
            try:
                self.cleaner.manager.resume_cleaning(tp)
            except CleanerStateError as e:  # e.g. deleted and created again meanwhile
                log.warning("%s: cleaning not resumed: %s", tp, e)

    def _close_for_recovery(self, tp: TopicPartition | None) -> tuple[TopicPartition, Log] | None:
        """Under the lock: mark the offline log of ``tp`` for a reopen with recovery; the log to close."""
        offline = self._map.offline_logs.get(tp) if tp is not None else None
        if tp is None or offline is None or offline.log is None:
            return None
        lg = offline.log
        self._map.offline_logs[tp] = OfflineLog(offline.path, lg.log_start_offset, lg.recovery_point)
        return tp, lg

    def failed_loading(self, log_dir: LogDir, operation: str, error: BaseException,
                       cause: FaultCause | None = None) -> None:
        """``operation`` (reading the dir's registry, loading a partition) met a disk fault while
        ``log_dir`` loaded at start-up: the dir goes offline, unloaded (its logs loaded so far
        were closed), and is loaded, with recovery, when its probe passes. Thread-safe: under
        the map's lock (each dir loads on its own thread)."""
        with self._map.lock:
            self._unloaded.add(log_dir.path)
            log_dir.had_clean_shutdown = False  # a load cut short: recover when it is loaded again
            failure = self.failures.mark_offline(log_dir.path, operation, error, cause)
        if failure is not None:
            log.error("%s; the log dir is loaded when its probe passes, the other log dirs are loaded",
                      failure.describe())

    def probe_offline_dirs(self) -> list[Path]:
        """Probe each offline dir whose backoff has passed, testing what failed (see
        :func:`~.log_dir_failure.probe`); bring back those that pass: their logs closed by the
        fault reopen with recovery (no clean shutdown) from the lower of their last recovery point
        and the checkpointed one, the others rejoin as they were. Returns the dirs that are
        online again. The periodic probe task runs this. Thread-safe: the partition map changes
        under the manager's lock; logs are reopened (with recovery) outside it."""
        back = []
        for path in self.failures.due_for_probe():
            log_dir = next(d for d in self._map.dirs if d.path == path)
            failure = self.failures.get(path)
            try:
                probe(path, failure.causes if failure is not None else ())
                self._bring_online(log_dir)
            except (OSError, TidelogError) as e:  # e.g. still failing, or locked by another process now
                self.failures.probe_failed(path, e)
                log.warning("%s: still offline, probe failed: %s", path, describe_fault(e))
            else:
                back.append(path)
        return back

    def _bring_online(self, log_dir: LogDir) -> None:
        """Reopen the closed offline logs of ``log_dir`` (all or none: a disk fault while
        reopening leaves the dir offline), then serve them and the dir's other logs again."""
        if not log_dir.opened or log_dir.path in self._unloaded:
            self._load_late(log_dir)
            return
        self._await_cleaning_stopped(log_dir.path)
        with self._map.lock:
            self._steps.rejoin_registry(log_dir)
            offline = {tp: o for tp, o in self._map.offline_logs.items() if o.path.parent == log_dir.path}
        closed = {tp: o for tp, o in offline.items() if o.log is None}
        reopened = self._reopen_all(log_dir, closed)
        with self._map.lock:
            again = [tp for tp, o in offline.items() if self._map.offline_logs.get(tp, o) is not o]
            if again:  # a kept log's operation failed on the disk meanwhile: it needs recovery first
                for lg in reopened.values():
                    lg.close()
                raise StorageError(f"partition {again[0]} failed again while its log dir came back",
                                   path=log_dir.path)
            for tp, o in offline.items():
                lg = o.log if o.log is not None else reopened.pop(tp, None)
                if self._map.offline_logs.get(tp) is not o:  # its topic was deleted meanwhile
                    if lg is not None and o.log is None:
                        lg.close()
                    continue
                del self._map.offline_logs[tp]
                if lg is not None:
                    self._map.logs[tp] = lg
                    self._map.log_dir_of[tp] = log_dir
            deleted = {p: tp for p, tp in self._map.offline_deleted.items() if p.parent == log_dir.path}
            for path in deleted:
                del self._map.offline_deleted[path]
            self._steps.sync_topic_copies(skip=[tp for tp, d in self._map.log_dir_of.items() if d is not log_dir])
            failure = self.failures.mark_online(log_dir.path)
            self._read_faults.forget(log_dir.path)
        self._resume_cleaning(log_dir.path)
        for path, tp in deleted.items():  # topics deleted while the dir was offline
            self._steps.delete_partition_dir(path, tp)
        since = f" (offline since {failure.since_ms}: {failure.describe()})" if failure else ""
        log.warning("%s: back online, %d partition(s) reopened with recovery, %d resumed as they were%s",
                    log_dir.path, len(closed), len(offline) - len(closed), since)
        self._complete_staged_commits()

    def _reopen_all(self, log_dir: LogDir, closed: Mapping[TopicPartition, OfflineLog]) -> dict[TopicPartition, Log]:
        """Reopen ``closed`` with recovery; a disk fault closes those reopened and raises."""
        recovery_points = log_dir.read_checkpoint(log_dir.recovery_points)
        start_offsets = log_dir.read_checkpoint(log_dir.log_start_offsets)
        reopened: dict[TopicPartition, Log] = {}
        try:
            for tp, o in sorted(closed.items()):
                if (found := self._reopen(tp, o, recovery_points, start_offsets)) is not None:
                    reopened[tp] = found
        except BaseException:
            for lg in reopened.values():
                lg.close()
            raise
        return reopened

    def _load_late(self, unloaded: LogDir) -> None:
        """A dir that could not be opened or loaded at start-up: lock it (when it was not) and
        load it as start-up does, then reconcile it with the registry (its partitions, set aside
        as in a missing log dir, are served from it again). A fault on the way leaves it
        offline (unlocked, when this call locked it)."""
        log_dir = unloaded
        if not unloaded.opened:
            log_dir = LogDir.open(unloaded.path)
        try:
            if not unloaded.opened:
                log_dir.begin_loading(one_cluster_id([d for d in self._map.dirs if d.opened] + [log_dir]))
            self._await_cleaning_stopped(log_dir.path)
            with self._map.lock:
                self._steps.rejoin_registry(log_dir)
            found = self._steps.load_dir_late(log_dir)
        except BaseException:
            if log_dir is not unloaded:
                log_dir.release()
            raise
        with self._map.lock:
            self._map.dirs[self._map.dirs.index(unloaded)] = log_dir
            self._unloaded.discard(log_dir.path)
            self._take_late_logs(log_dir, found)
            held = self._steps.reconcile_registry(False)
            log_dir.loaded_completely = self._map.loaded_completely(log_dir)
            failure = self.failures.mark_online(log_dir.path)
        self._steps.await_held(held)
        self._resume_cleaning(log_dir.path)
        since = f" (offline since {failure.since_ms}: {failure.describe()})" if failure else ""
        log.warning("%s: back online, loaded with %d partition(s)%s", log_dir.path, len(found), since)
        self._complete_staged_commits()

    def _take_late_logs(self, log_dir: LogDir, found: list[tuple[TopicPartition, Log]]) -> None:
        """Register the logs of a dir loaded late; each replaces the placeholder that set its
        partition aside, unless the partition lives in another dir meanwhile (then this copy is
        set aside, as a partition found in two dirs at start-up is)."""
        loaded = {tp for tp, _ in found}
        for path, aside in list(self._map.set_aside.items()):
            if aside.topic_partition in loaded and str(path).startswith("<log dir "):
                del self._map.set_aside[path]
        for tp, lg in found:
            if tp in self._map.logs:
                lg.close()
                where = f"{self._map.logs[tp].dir}, {lg.dir}"
                self._map.set_aside[lg.dir] = SetAside(lg.dir, f"partition {tp} found in several log dirs: {where}", tp)
                continue
            self._map.logs[tp] = lg
            self._map.log_dir_of[tp] = log_dir

    def _reopen(self, tp: TopicPartition, offline: OfflineLog, recovery_points: Mapping[TopicPartition, int],
                start_offsets: Mapping[TopicPartition, int]) -> Log | None:
        """One log of a dir coming back; None when it fails to load for a reason other than the
        disk (it is set aside)."""
        try:
            return self._loader.open_log(
                offline.path, tp, log_start_offset=max(offline.log_start_offset, start_offsets.get(tp, 0)),
                recovery_point=min(offline.recovery_point, recovery_points.get(tp, 0)), had_clean_shutdown=False)
        except (StorageError, OSError) as e:
            if is_storage_fault(e):
                raise
            self._map.set_partition_aside(offline.path, tp, describe_error(e))
            return None
        except TidelogError as e:
            self._map.set_partition_aside(offline.path, tp, describe_error(e))
            return None

    def _complete_staged_commits(self) -> None:
        """An offline dir came back: finish (or roll back) the staged commits left pending, whose
        partitions are held meanwhile (their logs rejoined, still unserved). Outside the map's
        lock (the commit appends through the manager)."""
        if self._staged_holds.held:
            self._steps.complete_pending()

    def online_dirs(self) -> list[LogDir]:
        """The log dirs not offline now, in the broker's order. Thread-safe: the channel's lock
        per dir (a dir may go offline right after it is listed)."""
        return [d for d in self._map.dirs if not self.failures.is_offline(d.path)]

    def no_log_error(self, tp: TopicPartition, record: TopicRecord) -> TidelogError:
        """Why ``tp`` of the topic ``record`` has no live log: its partition is unknown, or it is
        offline. Thread-safe as :meth:`offline_entry` (the answer is an error message)."""
        offline = self._map.offline_logs.get(tp)
        if offline is not None:
            return self.offline_error(tp, offline.path.parent)
        if 0 <= tp.partition < record.partitions:
            entry = self.offline_entry(tp)
            return LogDirOfflineError(f"partition {tp} is offline: {entry.reason}", topic_partition=str(tp))
        return UnknownTopicOrPartitionError(
            f"topic {tp.topic!r} has no partition {tp.partition} (it has {record.partitions})",
            topic_partition=str(tp),
        )

    def offline_entry(self, tp: TopicPartition) -> SetAside:
        """Why ``tp``, which has no live log, is not served: its dir's failure, its set-aside
        entry, or a placeholder. The caller holds the map's lock, or accepts a racy answer (an
        error message)."""
        offline = self._map.offline_logs.get(tp)
        if offline is not None and (failure := self.failures.get(offline.path.parent)) is not None:
            return SetAside(offline.path, failure.describe(), tp)
        for entry in list(self._map.set_aside.values()):
            if entry.topic_partition == tp:
                return entry
        return SetAside(Path(files.partition_dir_name(tp)), "partition has no log (offline)", tp)

    def close_offline_logs(self) -> None:
        """At shutdown: close the logs kept open in offline dirs (nothing flushed; the dir gets
        no clean-shutdown marker and recovers at the next start). Thread-safe: the map changes
        under its lock; the logs are closed outside it."""
        with self._map.lock:
            kept = [(tp, o.log) for tp, o in self._map.offline_logs.items() if o.log is not None]
            for tp, _ in kept:
                o = self._map.offline_logs[tp]
                self._map.offline_logs[tp] = OfflineLog(o.path, o.log_start_offset, o.recovery_point)
        for tp, lg in kept:
            close_failed_log(tp, lg)

