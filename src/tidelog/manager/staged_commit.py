"""Staged commits: publish a job's staged batches to many partitions, all of them or none, once.

A *job* (today a Spark ``save()`` or micro-batch; any later multi-partition write path uses the
same steps) has staged producer batches in files under its staging dir (:mod:`tidelog.storage.staging_dirs`).
The owner of the data dir publishes them with these steps, each durable before the next,
recorded in the staged-commit log (:mod:`tidelog.storage.commit_log`):

1. a committed (or rolled back) entry for the job: nothing to do; a streaming job whose batch id
   is not above its query's ``last_batch``: skipped (a replayed micro-batch);
2. check that every staged file is there, then write the *intent* (fsynced): per partition the log
   end offset now (``start``) and the job's batches in commit order, and one commit time. No log
   is touched before it is durable;
3. *roll forward* every partition: read the log from ``start``, recognise the job's batches
   already there (same record count and fingerprint, in order), append only the missing ones,
   then flush the log;
4. replace the intent by the committed entry (streaming: ``last_batch`` in the same write);
5. delete the job's staging dir.

**Who finishes an interrupted job**: whoever owns the dir next. :meth:`LogManager.open` (the
broker at start-up before it listens, the next job's commit, every tidelog command that opens
the dir) runs :func:`complete_pending` on every intent before anything else can append: step 3
and 4 again, idempotently. When the job cannot be completed (its staged data gone or damaged, an
append refused by the log, a disk error), it is *rolled back* instead: each partition truncated
to ``start`` (only when what follows ``start`` is the job's own batches), flushed, and the entry
marked ``rolled back``; the driver's retry then fails saying so. Either way, then staging is reclaimed
(:func:`~tidelog.storage.staging_dirs.reclaim_staging`). A roll-back truncates only the job's own
batches: when anything follows them in a log it refuses, and the job stays pending.

**A job that can be neither** (one of its partitions in a log dir offline at start-up, or set
aside; another writer's records after its start) stays pending, and every partition it names is
*held*: :meth:`LogManager.log` and :meth:`LogManager.append` refuse it (KAFKA_STORAGE_ERROR to
clients, who retry), so no reader sees part of the job and no produce lands after it (which would
make it impossible to complete). The completion runs again whenever an offline dir comes back
(:mod:`tidelog.manager.offline_dirs`, once its logs are back, still held); a job resolved then
releases its partitions. The check costs a dict lookup only while some job is held.

**Why a reader never sees part of a job**: the broker cannot serve a dir it has not opened, and
it completes every intent while opening, before it listens; a commit needs the dir's ``.lock``, so
it never runs while a broker owns the dir. Readers that take no lock (the Spark source, reports:
:class:`~tidelog.storage.log_view.LogView`) stop each partition at a pending intent's ``start``
(:mod:`tidelog.storage.commit_log`). So a job's records become visible to every reader at one
moment: the write of step 4 (or the open that completes it).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from crc32c import crc32c

from tidelog.clock import SYSTEM_CLOCK, Clock
from tidelog.errors import CheckpointError, StorageError
from tidelog.records.batch import iter_batches, write_crc
from tidelog.records.layout import BASE_TIMESTAMP_OFFSET, MAX_TIMESTAMP_OFFSET, RECORD_BATCH_OVERHEAD, TIMESTAMP
from tidelog.storage import fileops
from tidelog.storage.commit_log import (
    COMMIT_LOG_FILE,
    COMMITTED,
    INTENT,
    ROLLED_BACK,
    CommitLog,
    StagedBatch,
    default_staging_root,
    find_commit_log,
    tp_key,
)
from tidelog.storage.fetch_info import FetchIsolation
from tidelog.storage.staging_dirs import (
    candidates,
    job_dir,
    read_lease,
    reclaim_staging,
    remove_job_dir,
    scratch_lease,
)
from tidelog.storage.log import Log
from tidelog.topic_partition import TopicPartition

if TYPE_CHECKING:
    from tidelog.manager.manager import LogManager

log = logging.getLogger(__name__)

PUBLISH_THREADS = 4
_READ_BYTES = 8 << 20

StagedRef = tuple[str, StagedBatch]  # (file name in the job dir, batch)


@dataclass(frozen=True, slots=True)
class Job:
    """One write: its key (staging dir name and commit-log id), and its query and batch when streaming."""

    key: str
    staging_root: str
    query: str | None = None
    batch: int | None = None


@dataclass(frozen=True, slots=True)
class CommitOutcome:
    """What a commit did: ``published`` (this call appended the job's missing batches),
    ``already committed``, ``skipped`` (a replayed micro-batch) or ``empty``; offsets per partition."""

    state: str
    ranges: dict[str, tuple[int, int]] = field(default_factory=dict)  # "topic-p" -> (start, end)

    @property
    def records(self) -> int:
        return sum(end - start for start, end in self.ranges.values())


class StagedDataMissing(StorageError):
    """A job's staged batch cannot be read back (deleted, truncated, damaged): the job cannot be
    completed, only rolled back."""


# --- at open ---------------------------------------------------------------------------------

def complete_pending(manager: LogManager, log_dirs: Sequence[Path], clock: Clock = SYSTEM_CLOCK) -> None:
    """What :meth:`LogManager.open` runs last, and again when an offline log dir comes back:
    finish (or roll back) every job in flight, then reclaim staging dirs whose owner is dead.
    Never fails: a job it can neither finish nor roll back (a partition offline, another writer
    appended after its start) is logged and left pending, its partitions held (not served)."""
    try:
        with manager.staged_holds.commit_lock:  # a live broker's commits (live_commit) take it too
            _complete_pending(manager, [str(d) for d in log_dirs], clock)
    except OSError as e:  # a dir failing on the disk: its own checks take it offline, the open goes on
        log.error("cannot look for interrupted jobs: %s", e)


def _complete_pending(manager: LogManager, dirs: list[str], clock: Clock) -> None:
    roots = {str(default_staging_root(d)) for d in dirs}
    if find_commit_log(dirs).exists():
        try:
            committer = Committer(manager, dirs, clock)
        except (CheckpointError, StorageError) as e:
            log.error("cannot read the staged-commit log, jobs in flight are not completed: %s", e)
            return
        committer.finish_pending()
        pending = committer.commits.pending()
        manager.staged_holds.hold(holds(pending))
        roots |= {*committer.commits.staging_roots, *(job["staging"] for job in pending)}
        keep = {job["id"] for job in pending}
    else:
        keep = set()
    reclaim_staging(roots, keep, clock.milliseconds())


def holds(pending: Sequence[dict[str, Any]]) -> dict[TopicPartition, str]:
    """Every partition of the jobs ``pending`` -> its job's key: what the manager must not serve."""
    return {TopicPartition(part["topic"], part["partition"]): job["id"]
            for job in pending for part in job["partitions"]}


def startup_findings(log_dir: Path) -> list[tuple[Path, str, str, bool]]:
    """For ``tidelog verify``: ``(path, finding, what the broker does with it, whether it is a
    problem)`` for the staged-commit log of ``log_dir`` and the staging dirs beside it."""
    path = log_dir / COMMIT_LOG_FILE
    found: list[tuple[Path, str, str, bool]] = []
    roots = {str(default_staging_root(log_dir))}
    keep: set[str] = set()
    if path.exists():
        try:
            commits = CommitLog.read([log_dir])
        except (CheckpointError, StorageError) as e:
            return [(path, f"unreadable: {e}", "the broker logs it and completes no interrupted job; jobs in flight "
                     "stay invisible to the Spark source, and the next format(\"tidelog\") write fails", True)]
        roots |= set(commits.staging_roots)
        for job in commits.pending():
            keep.add(job["id"])
            parts = ", ".join(tp_key(p) for p in job["partitions"])
            found.append((path, f"job {job['id']} was interrupted mid-commit ({parts}); readers see none of it",
                          "completed before the broker listens (rolled back when it cannot be: staged data gone, "
                          "batches refused; when neither can be done, e.g. a partition offline, its partitions are not "
                          "served until it is); any tidelog command that opens the dir does the same", False))
    for root in sorted(roots):
        for key, directory in candidates(Path(root)):
            lease = read_lease(directory) or scratch_lease(directory.name)
            if key not in keep and lease is not None and lease.owner_is_dead():
                found.append((directory, f"staging dir of a dead driver (pid {lease.pid} on {lease.host})",
                              "deleted at start-up", False))
    return found


# --- the protocol ----------------------------------------------------------------------------

class Committer:
    """The protocol's steps over an owned data dir (``manager``). Each step is durable on return,
    so a crash between any two leaves a state the next owner completes."""

    def __init__(self, manager: LogManager, log_dirs: Sequence[str], clock: Clock = SYSTEM_CLOCK) -> None:
        self.manager, self.log_dirs, self.clock = manager, list(log_dirs), clock
        self.commits = CommitLog.read(log_dirs)

    def commit(self, job: Job, staged: list[StagedRef] | None) -> CommitOutcome:
        """Steps 1-4 for ``job``; ``staged`` None: roll forward only."""
        entry = self.commits.find(job.key)
        if entry is not None and entry["state"] == COMMITTED:
            return CommitOutcome("already committed", _ranges(entry))
        if entry is not None and entry["state"] == ROLLED_BACK:
            raise StorageError(f"the commit of {job.key} was rolled back ({entry.get('reason', 'no reason kept')}): "
                               "none of its records is visible; run the write again")
        if entry is None:
            last = None if job.query is None else self.commits.last_batch(job.query)
            if last is not None and job.batch is not None and job.batch <= last:
                return CommitOutcome("skipped")
            if not staged:
                return CommitOutcome("empty")
            check_staged(job, staged)
            entry = self.write_intent(job, staged)
        ranges = self.publish(entry)
        self.mark_committed(entry, ranges)
        return CommitOutcome("published", ranges)

    def write_intent(self, job: Job, staged: list[StagedRef]) -> dict[str, Any]:
        """Step 2: record where each partition ends now and which batches the job appends there."""
        parts: dict[tuple[str, int], list[list[Any]]] = {}
        for file, batch in staged:
            parts.setdefault((batch.topic, batch.partition), []).append(
                [file, batch.position, batch.size, batch.records, batch.fingerprint, batch.stamp_at_commit])
        entry = {"id": job.key, "state": INTENT, "commit_time": self.clock.milliseconds(),
                 "staging": job.staging_root, "query": job.query, "batch": job.batch,
                 "partitions": [{"topic": t, "partition": p,
                                 "start": self.start_offset(TopicPartition(t, p)),
                                 "batches": refs} for (t, p), refs in sorted(parts.items())]}
        self.commits.add(entry)
        self.commits.write()
        return entry

    def start_offset(self, tp: TopicPartition) -> int:
        """Where the job's records of ``tp`` will start: its log end now (a live broker's
        committer fences the log first, :mod:`.live_commit`)."""
        return self.manager.offsets(tp).log_end_offset

    def append(self, tp: TopicPartition, data: bytearray) -> None:
        """Append one of the job's batches to ``tp`` (also when its pending job holds it)."""
        self.manager.staged_holds.committing_append(tp, data)

    def publish(self, entry: dict[str, Any]) -> dict[str, tuple[int, int]]:
        """Step 3 for every partition of the intent, partitions in parallel (appends validate in
        numba kernels that release the GIL); ``{"topic-p": (start, end)}``."""
        parts = entry["partitions"]
        with StagedReader(job_dir(entry["staging"], entry["id"])) as staged, \
                ThreadPoolExecutor(max(1, min(PUBLISH_THREADS, len(parts)))) as pool:
            ranges = pool.map(lambda part: self.publish_partition(entry, part, staged), parts)
            return {tp_key(part): found for part, found in zip(parts, ranges)}

    def publish_partition(self, entry: dict[str, Any], part: dict[str, Any], staged: StagedReader) -> tuple[int, int]:
        """Append what the log lacks of the partition's batches; flush. ``(start, end)`` of the job's records."""
        tp, refs = intent_batches(part)
        target = self.manager.staged_holds.committing_log(tp)
        files = [r[0] for r in part["batches"]]
        present, start, _ = matched_prefix(target, int(part["start"]), refs, entry["id"])
        for file, ref in zip(files[present:], refs[present:]):
            data = staged.read(file, ref)
            if ref.stamp_at_commit:
                stamp(data, int(entry["commit_time"]))
            self.append(tp, data)
        target.flush()
        return start, start + sum(ref.records for ref in refs)  # the job's batches are contiguous from start

    def mark_committed(self, entry: dict[str, Any], ranges: dict[str, tuple[int, int]]) -> None:
        """Step 4."""
        self.commits.mark_committed(entry, ranges)
        self.commits.write()
        self.manager.staged_holds.hold(holds(self.commits.pending()))

    def roll_back(self, entry: dict[str, Any], reason: str) -> None:
        """Undo what reached the logs of a job that cannot be completed: each partition back to
        its ``start`` (flushed), then the entry marked rolled back. StorageError, changing nothing,
        when a log holds anything but the job's own batches after ``start``: records of someone
        else, inside the job or after it (acknowledged records are never truncated)."""
        targets = []
        for part in entry["partitions"]:
            tp, refs = intent_batches(part)
            target = self.manager.staged_holds.committing_log(tp)
            _, start, job_end = matched_prefix(target, int(part["start"]), refs, entry["id"])  # raises inside the job
            if target.log_end_offset != job_end:
                raise StorageError(f"cannot roll back the commit of {entry['id']}: the log holds other records from "
                                   f"offset {job_end}, after the job's (appended after the interrupted commit); "
                                   "nothing is truncated", topic_partition=str(tp), offset=job_end)
            targets.append((target, start))
        for target, start in targets:
            if target.truncate_to(start):
                target.flush()
        self.commits.mark_rolled_back(entry, reason)
        self.commits.write()
        self.manager.staged_holds.hold(holds(self.commits.pending()))

    def finish_pending(self, except_key: str | None = None) -> None:
        """Roll forward every intent (except ``except_key``'s); one that cannot be completed (its
        staged data gone, an append refused) is rolled back; then its staging dir is deleted. When
        neither can be done (another writer appended after the job's start) the intent is kept
        and logged."""
        for entry in self.commits.pending():
            if entry["id"] == except_key:
                continue
            try:
                self.mark_committed(entry, self.publish(entry))
                log.warning("completed the interrupted commit of %s (%d partitions)", entry["id"],
                            len(entry["partitions"]))
            except Exception as e:  # noqa: BLE001 - whatever stops it, the job must not stay half visible
                try:
                    self.roll_back(entry, str(e))
                except Exception as undo:  # noqa: BLE001 - one job must not block the dir, nor other jobs
                    log.error("cannot complete nor roll back the interrupted commit of %s: %s; %s", entry["id"], e, undo)
                    continue
                log.warning("rolled back the interrupted commit of %s, which cannot be completed: %s", entry["id"], e)
            try:
                remove_job_dir(entry["staging"], entry["id"])
            except StorageError as e:
                log.warning("cannot delete the staging dir of %s (reclaimed later): %s", entry["id"], e)


def intent_batches(part: dict[str, Any]) -> tuple[TopicPartition, list[StagedBatch]]:
    """One partition of an intent (as :meth:`Committer.write_intent` records it): the partition
    and its batches in commit order."""
    tp = TopicPartition(part["topic"], part["partition"])
    return tp, [StagedBatch(tp.topic, tp.partition, r[1], r[2], r[3], r[4], bool(r[5])) for r in part["batches"]]


def check_staged(job: Job, staged: Sequence[StagedRef]) -> None:
    """Every staged file of the job is there and long enough (a reclaimed or damaged staging
    dir fails the commit before anything is recorded)."""
    ends: dict[str, int] = {}
    for file, batch in staged:
        ends[file] = max(ends.get(file, 0), batch.position + batch.size)
    directory = job_dir(job.staging_root, job.key)
    for file, end in sorted(ends.items()):
        try:
            size = os.stat(directory / file).st_size
        except OSError:
            size = -1
        if size < end:
            raise StagedDataMissing(f"the staged batches of {job.key} are missing or cut short (was its staging dir "
                                    "deleted?); nothing was published", path=directory / file)


def _ranges(entry: dict[str, Any]) -> dict[str, tuple[int, int]]:
    return {tp_key(p): (int(p["start"]), int(p["end"])) for p in entry["partitions"]}


def matched_prefix(target: Log, start: int, refs: Sequence[StagedBatch], job_key: str) -> tuple[int, int, int]:
    """How many of ``refs`` the log already holds from ``start``, in order, where the job's records
    start and where those present end (the log end when nothing follows them). StorageError when
    the log holds anything else where the job's next batch should be."""
    end = target.log_end_offset
    if end <= start:  # nothing of the job (a crash lost an unflushed tail before it): all of it goes at the end
        return 0, end, end
    if start < target.log_start_offset:
        raise StorageError(f"cannot complete the commit of {job_key}: its records from offset {start} were deleted "
                           "(retention) before they could be checked", offset=start)
    offset, matched = start, 0
    while offset < end:
        records = target.read(offset, _READ_BYTES, FetchIsolation.LOG_END).records
        progressed = False
        for _, batch in iter_batches(records):
            if batch.next_offset <= offset:
                continue
            if matched == len(refs):  # all of the job is there; what follows was appended later
                return matched, start, offset
            if batch.base_offset != offset or not _same(batch, refs[matched]):
                raise StorageError(
                    f"cannot complete the commit of {job_key}: the log holds other records at offset {offset} "
                    "(something else appended after the interrupted commit); its staged batches are kept",
                    topic_partition=f"{refs[0].topic}-{refs[0].partition}" if refs else None, offset=offset)
            matched += 1
            offset = batch.next_offset
            progressed = True
        if not progressed or matched == len(refs):
            break
    return matched, start, offset


def _same(batch: Any, ref: StagedBatch) -> bool:
    return (batch.records_count == ref.records
            and crc32c(batch.buffer[RECORD_BATCH_OVERHEAD:]) == ref.fingerprint)


def stamp(data: bytearray, commit_time: int) -> None:
    """Give a batch staged without timestamps the commit time (deltas are 0: every record gets it)."""
    TIMESTAMP.pack_into(data, BASE_TIMESTAMP_OFFSET, commit_time)
    TIMESTAMP.pack_into(data, MAX_TIMESTAMP_OFFSET, commit_time)
    write_crc(data)


class StagedReader:
    """Staged batches read back by (file, position), each file opened once; checks each batch's
    fingerprint. Thread-safe (positional reads)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._fds: dict[str, int] = {}
        self._guard = threading.Lock()

    def read(self, name: str, ref: StagedBatch) -> bytearray:
        path = self.directory / name
        try:
            data = bytearray(fileops.pread(self._fd(name, path), ref.size, ref.position, path))
        except OSError as e:
            raise StagedDataMissing("cannot read a staged batch file: the commit cannot complete", path=path,
                                    operation="read") from e
        if len(data) != ref.size or crc32c(memoryview(data)[RECORD_BATCH_OVERHEAD:]) != ref.fingerprint:
            raise StagedDataMissing("a staged batch is truncated or damaged: the commit cannot complete", path=path,
                                    position=ref.position)
        return data

    def _fd(self, name: str, path: Path) -> int:
        with self._guard:
            fd = self._fds.get(name)
            if fd is None:
                fd = self._fds[name] = fileops.open(path, os.O_RDONLY | os.O_CLOEXEC)
            return fd

    def __enter__(self) -> StagedReader:
        return self

    def __exit__(self, *exc: object) -> None:
        for fd in self._fds.values():
            os.close(fd)
