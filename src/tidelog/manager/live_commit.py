"""Staged commits on a live broker: jobs staged through ``tidelog serve`` and committed by it.

A Spark job whose driver cannot own the data dir (a broker owns it) stages its producer batches
*through the broker* (``StageBatches``, :mod:`tidelog.server.staged_writes`): the broker writes
them into its own staging root (:func:`~tidelog.storage.commit_log.default_staging_root` of its
first log dir). The driver then asks the broker to commit the job (``CommitStagedJob``): the
broker runs the one protocol of :mod:`.staged_commit` (:class:`~.staged_commit.Committer`:
intent, roll forward, committed) on its live :class:`~tidelog.manager.manager.LogManager`, through
:class:`LiveCommitter`, which adds only what a live log needs:

**No other append lands inside a job.** Before the intent's ``start`` of a partition is read,
its log is *fenced*: :attr:`Log.append_fence <tidelog.storage.log_append.AppendPath.append_fence>`
is set under the log's lock, and ``start`` is read under that same lock hold. Every append path
tests the fence under the lock, so an append that passed the manager's checks before the fence
existed (and was still on its way to the lock) fails when it gets there, with
KAFKA_STORAGE_ERROR, which producers retry: nothing lands between ``start`` and the job's batches.
The job's own batches are appended with the lock held and the fence lifted for that call only,
so no other append can slip in while it is lifted. Cost on the produce path: one attribute
test under the lock, fenced or not.

**Readers never see part of a job.** A consumer reads up to the high watermark. The job's
batches are appended without moving it (the manager's append moves it; this one does not), and
it moves to the log end once the committed entry is durable, with the fence lifted, under the
log's lock. Reads keep flowing meanwhile (up to ``start``); so does produce to every other
partition. Readers that take no lock (the Spark source, reports) stop at a pending intent's
``start`` as for every staged commit (:mod:`tidelog.storage.commit_log`).

**A commit that fails halfway** (an append refused, a disk error) is rolled back at once when it
can be (:meth:`Committer.roll_back`), else its partitions are held (:mod:`.staged_holds`) until
a later completion resolves it, as an interrupted job found at open. **A broker killed
mid-commit** completes the intent at its next :meth:`LogManager.open`, before it listens; the
driver retries the commit on a new connection and gets "already committed".

**One commit at a time**: commits, aborts and reclaims of one broker are serialized by one
lock, :attr:`StagedHolds.commit_lock <.staged_holds.StagedHolds.commit_lock>`, which the
completion of interrupted jobs (at open, when an offline log dir comes back) takes too: the
staged-commit log is read, changed and written whole.

**Staging leases**: a job dir staged through the broker has a *time lease*
(``tidelog.spark.staging.lease.ms``): every chunk staged moves its expiry forward (the lease
file is rewritten at most every tenth of the lease); :meth:`LiveCommits.reclaim` (periodic, on
the manager's scheduler, and at open) deletes expired dirs no intent needs. An abort deletes the
job's dir at once.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tidelog.clock import SYSTEM_CLOCK, Clock
from tidelog.errors import InvalidRequestError, LogDirOfflineError, StorageError
from tidelog.manager.staged_commit import CommitOutcome, Committer, Job, StagedRef, holds
from tidelog.storage import fileops
from tidelog.storage.atomic import fsync_dir
from tidelog.storage.commit_log import INTENT, ROLLED_BACK, default_staging_root
from tidelog.storage.log import Log
from tidelog.storage.staging_dirs import Lease, ensure_job_dir, job_dir, reclaim_staging, remove_job_dir, replace_lease
from tidelog.topic_partition import TopicPartition

if TYPE_CHECKING:
    from tidelog.manager.manager import LogManager

log = logging.getLogger(__name__)

STAGING_LEASE_MS = 30 * 60 * 1000  # tidelog.spark.staging.lease.ms default
STAGING_LEASE_KEY = "tidelog.spark.staging.lease.ms"
LEASE_HOST = "staged-through-broker"
_JOB_KEY = re.compile(r"job-[0-9a-f]{32}|query-[0-9A-Za-z-]{1,64}/batch-[0-9]{1,18}")
_FILE_NAME = re.compile(r"part-[0-9]{1,10}-attempt-[0-9]{1,10}-task-[0-9]{1,19}\.batches")


def check_job_key(key: str) -> str:
    """``key`` when it is a job key the sink makes (``job-<32 hex>`` or ``query-<id>/batch-<n>``);
    InvalidRequestError otherwise (it becomes a path under the staging root)."""
    if not _JOB_KEY.fullmatch(key):
        raise InvalidRequestError(f"job key {key!r} is not job-<32 hex digits> nor query-<query id>/batch-<n>")
    return key


def check_file_name(name: str) -> str:
    """``name`` when it is a staged file name the sink makes; InvalidRequestError otherwise."""
    if not _FILE_NAME.fullmatch(name):
        raise InvalidRequestError(f"staged file name {name!r} is not part-<n>-attempt-<n>-task-<n>.batches")
    return name


class LiveCommitter(Committer):
    """:class:`Committer` on a live manager: fences each partition before reading its start,
    appends the job's batches without moving the high watermark, and on the way out (committed
    or not) moves the high watermark to the log end and lifts the fences. Not thread-safe: one
    commit at a time (:class:`LiveCommits` serializes them)."""

    def __init__(self, manager: LogManager, log_dirs: Sequence[str], clock: Clock = SYSTEM_CLOCK) -> None:
        super().__init__(manager, log_dirs, clock)
        self.touched: dict[TopicPartition, Log] = {}
        self._key = ""

    def commit(self, job: Job, staged: list[StagedRef] | None) -> CommitOutcome:
        """Steps 1-4 (:meth:`Committer.commit`); a failure after the intent rolls the job back when
        it can, else holds its partitions. Always releases what it fenced."""
        self._key = job.key
        try:
            return super().commit(job, staged)
        except BaseException as e:
            entry = self.commits.find(job.key)
            if entry is not None and entry["state"] == INTENT:
                self._resolve_failed(entry, e)
            raise
        finally:
            self.release()

    def start_offset(self, tp: TopicPartition) -> int:
        """Fence ``tp``'s log, then read its log end under the same lock hold."""
        target = self.manager.log(tp)  # unknown, offline or held: refused before anything is recorded
        with target.lock:
            target.append_fence = LogDirOfflineError(
                f"partition {tp} is being written by the staged commit of {self._key}: retry", topic_partition=str(tp))
            self.touched[tp] = target
            return target.log_end_offset

    def append(self, tp: TopicPartition, data: bytearray) -> None:
        """The job's batch, with the fence lifted for this call only (the lock is held across it)
        and without moving the high watermark."""
        target = self.manager.staged_holds.committing_log(tp)
        self.touched[tp] = target
        with target.lock:
            fence, target.append_fence = target.append_fence, None
            try:
                with self.manager.offline_dirs.storage_op(tp, target, "append", len(data)):
                    target.append_as_leader(data)
            finally:
                target.append_fence = fence

    def release(self) -> None:
        """Every touched log: the high watermark to the log end, then the fence lifted (one lock hold)."""
        for target in self.touched.values():
            with target.lock:
                target.maybe_increment_high_watermark(target.log_end_offset)
                target.append_fence = None
        self.touched.clear()

    def _resolve_failed(self, entry: dict[str, Any], error: BaseException) -> None:
        try:
            self.roll_back(entry, str(error))
            log.warning("rolled back the staged commit of %s, which failed: %s", entry["id"], error)
        except Exception as undo:  # noqa: BLE001 - left pending: its partitions are held until resolved
            self.manager.staged_holds.hold(holds(self.commits.pending()))
            log.error("the staged commit of %s failed (%s) and cannot be rolled back (%s): its partitions are not "
                      "served until a later completion resolves it", entry["id"], error, undo)


class LiveCommits:
    """The staged writes of one live broker (see the module doc): staging chunks, commits, aborts,
    reclaims. Thread-safe: commits, aborts and reclaims take one lock; chunks of different files
    run in parallel (each file is written by its one task attempt)."""

    def __init__(self, manager: LogManager, clock: Clock = SYSTEM_CLOCK, lease_ms: int = STAGING_LEASE_MS) -> None:
        if lease_ms <= 0:
            raise InvalidRequestError(f"{STAGING_LEASE_KEY}={lease_ms}: must be above 0")
        self.manager, self.clock, self.lease_ms = manager, clock, lease_ms
        self.log_dirs = [str(d.path) for d in manager.log_dirs()]
        self.staging_root = str(default_staging_root(self.log_dirs[0]))
        self._lock = manager.staged_holds.commit_lock  # shared with the completion at open and when a dir returns
        self._leases_guard = threading.Lock()
        self._refreshed: dict[str, int] = {}  # job key -> when its lease was last written (ms)

    # --- staging ------------------------------------------------------------------------------

    def stage(self, job_key: str, file_name: str, position: int, data: bytes | memoryview, last: bool) -> int:
        """Write one chunk of a staged file at ``position``: the file becomes its first ``position``
        bytes and the chunk (chunks come in order; a retried chunk, or a new writer of the same file
        name starting at 0, such as a restarted streaming query's task, replaces what followed);
        fsync file and dir when ``last``. The file's size after it. InvalidRequestError when
        ``position`` is past the file's end. Thread-safe (see the class doc)."""
        directory = self._job_dir(check_job_key(job_key))
        path = directory / check_file_name(file_name)
        try:
            fd = fileops.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC)
        except OSError as e:
            raise StorageError("cannot open the staged batch file", path=path, operation="open") from e
        try:
            size = os.fstat(fd).st_size
            if position > size or position < 0:
                raise InvalidRequestError(f"chunk at position {position} of staged file {file_name} of {job_key}, "
                                          f"which holds {size} bytes: chunks must come in order")
            if size > position:
                fileops.ftruncate(fd, position, path)
            os.lseek(fd, position, os.SEEK_SET)
            fileops.write_fully(fd, data, path)
            size = position + len(data)
            if last:
                fileops.fsync(fd, path)
        except OSError as e:
            raise StorageError("cannot write the staged batch file", path=path, operation="write") from e
        finally:
            os.close(fd)
        if last:
            fsync_dir(directory)
        return size

    def _job_dir(self, job_key: str) -> Path:
        """The job's dir, created with a fresh time lease, its lease moved forward when due."""
        now = self.clock.milliseconds()
        lease = Lease(LEASE_HOST, 0, None, expires=now + self.lease_ms)
        directory = job_dir(self.staging_root, job_key)
        with self._leases_guard:
            last = self._refreshed.get(job_key)
            due = last is None or now - last >= self.lease_ms // 10
            if due:
                self._refreshed[job_key] = now
        if not due and directory.is_dir():
            return directory
        if directory.is_dir():
            try:
                replace_lease(directory, lease)
                return directory
            except FileNotFoundError:
                pass  # reclaimed meanwhile: made anew
        return ensure_job_dir(self.staging_root, job_key, lease)

    # --- commits ------------------------------------------------------------------------------

    def commit(self, job_key: str, staged: list[StagedRef], query: str | None = None,
               batch: int | None = None) -> CommitOutcome:
        """Publish the job exactly once (:class:`LiveCommitter`); its staging dir is deleted after.
        Thread-safe: one commit at a time."""
        job = Job(check_job_key(job_key), self.staging_root, query, batch)
        with self._lock:
            outcome = LiveCommitter(self.manager, self.log_dirs, self.clock).commit(job, staged)
            self._forget(job.key)
        return outcome

    def abort(self, job_key: str, query: str | None = None, batch: int | None = None) -> CommitOutcome:
        """Spark's abort(): roll forward a job with an intent (a commit that failed halfway: rolled
        back when it cannot be completed), else delete its staging dir. Never undoes a committed
        job. Thread-safe: under the commit lock."""
        job = Job(check_job_key(job_key), self.staging_root, query, batch)
        with self._lock:
            committer = LiveCommitter(self.manager, self.log_dirs, self.clock)
            entry = committer.commits.find(job.key)
            if entry is not None and entry["state"] == INTENT:
                try:
                    return committer.commit(job, None)
                except StorageError:
                    if (committer.commits.find(job.key) or {}).get("state") != ROLLED_BACK:
                        raise
            self._forget(job.key)
            return CommitOutcome(entry["state"] if entry is not None else "aborted")

    def _forget(self, job_key: str) -> None:
        remove_job_dir(self.staging_root, job_key)
        with self._leases_guard:
            self._refreshed.pop(job_key, None)

    # --- reclaiming ---------------------------------------------------------------------------

    def reclaim(self) -> list[Path]:
        """Delete the staging dirs whose time lease expired and that no intent needs. Thread-safe:
        under the commit lock."""
        with self._lock:
            committer = LiveCommitter(self.manager, self.log_dirs, self.clock)
            keep = {job["id"] for job in committer.commits.pending()}
            removed = reclaim_staging([self.staging_root], keep, self.clock.milliseconds())
        with self._leases_guard:
            for path in removed:
                self._refreshed.pop(path.name, None)
        return removed

    def schedule_reclaim(self) -> None:
        """Run :meth:`reclaim` every tenth of the lease (at most every minute) on the manager's
        scheduler, doing nothing once the manager is shut down."""
        period = max(1, min(60_000, self.lease_ms // 10))
        manager = self.manager

        def run() -> None:
            if not manager.closed:
                try:
                    self.reclaim()
                except Exception as e:  # noqa: BLE001 - a periodic task must not die
                    log.warning("reclaiming staging dirs failed (tried again in %d ms): %s", period, e)
        manager.schedule_periodic("tidelog-staging-reclaim", run, period, period)
