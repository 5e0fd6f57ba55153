"""Driver side of the sink: publish staged batches exactly once, safe to repeat after any crash.

A write is a *job*: a batch ``save()`` (``job-<uuid>``) or one micro-batch of a streaming query
(``query-<queryId>/batch-<batchId>``). Executors staged its batches (:mod:`tidelog.spark.staging`);
the driver publishes them by appending them to the logs, as the partitions' leader, while owning
the data dir: :meth:`LogManager.open` takes every log dir's ``.lock``, so a running ``tidelog
serve`` or Kafka broker (or another commit) excludes it. A commit waits a little for another
commit to finish, then fails saying the dir is owned by a running process and how to write
instead (stop it, or use Spark's Kafka sink against ``tidelog serve``).

**The commit log** is a root-level *file* of the first log dir, ``tidelog-spark-commits.json``
(Kafka ignores files there; a directory would stop it from starting), replaced atomically
(tmp + fsync + rename + dir fsync) under the dir lock::

    {"version": 1,
     "jobs": [{"id": job key, "state": "intent" | "committed", "commit_time": ms,
               "staging": staging root, "query": queryId | null, "batch": batchId | null,
               "partitions": [{"topic", "partition", "start": log end offset before the job,
                               "batches": [[file, position, size, records, fingerprint, stamp], ...]}]}],
     "queries": {queryId: {"last_batch": batchId}}}

A committed entry keeps per partition ``start`` and ``end`` only. The file keeps every intent,
the latest :data:`MAX_BATCH_JOBS` committed batch jobs, and each streaming query's latest entry.

**Protocol** (one job, lock held):

1. committed entry for the job → nothing to do (a driver retry); streaming: ``batchId <=
   last_batch`` of its query → skipped (a replayed micro-batch);
2. no entry → write the *intent*: per topic-partition (sorted), the log end offset now and the
   job's staged batches in a deterministic order (by Spark partition id, then file position,
   one manifest per Spark partition), with one commit time;
3. *roll forward* every partition of the intent: read the log from ``start``, match its batches
   one by one against the intent's (same record count and fingerprint; see staging), and append
   only the missing suffix, patching the commit time into batches staged without timestamps;
   then flush the log;
4. mark the entry committed (streaming: ``last_batch`` = batchId, in the same write);
5. release the dir, then delete the job's staging dir (with orphans of failed attempts).

A crash (or exception) anywhere after step 2 leaves an intent; the job is then decided and is
completed by whichever comes first: the driver's retry of ``commit()``, ``abort()`` (which Spark
calls after a failed commit), or the next commit of any job on the data dir (step 0: pending
intents of other jobs are rolled forward first). A crash before step 2 published nothing:
``abort()`` deletes the staging dir by its job prefix (its messages may be None even for tasks
that staged). If the log holds other batches after an interrupted commit's start (another writer
got the dir in between), the roll forward stops with an error and keeps the staged data.
"""

from __future__ import annotations

import json
import logging
import os
import struct
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from crc32c import crc32c

from tidelog.clock import SYSTEM_CLOCK, Clock
from tidelog.errors import CheckpointError, LogDirLockedError, StorageError
from tidelog.manager import LogManager
from tidelog.records.batch import BASE_TIMESTAMP_OFFSET, MAX_TIMESTAMP_OFFSET, RECORD_BATCH_OVERHEAD, iter_batches, write_crc
from tidelog.spark.staging import StagedBatch, TaskManifest, job_dir, remove_job_dir, stream_job_key
from tidelog.storage.atomic import read_file, write_atomically
from tidelog.storage.config import BrokerConfig
from tidelog.storage.fetch_info import FetchIsolation
from tidelog.storage.lock import LogDirLock, read_lock_holder
from tidelog.storage.log import Log
from tidelog.topic_partition import TopicPartition

log = logging.getLogger(__name__)

COMMIT_LOG_FILE = "tidelog-spark-commits.json"
COMMIT_LOG_VERSION = 1
MAX_BATCH_JOBS = 100
PUBLISH_THREADS = 4
LOCK_TIMEOUT_S = 30.0  # how long a commit waits for another owner (usually another commit) to let go
CHECK_TIMEOUT_S = 5.0  # how long writer() waits so before refusing (a running server never lets go)
INTENT = "intent"
COMMITTED = "committed"
_READ_BYTES = 8 << 20
_TIMESTAMP = struct.Struct(">q")


# --- outcome ---------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class CommitOutcome:
    """What a commit did: ``published`` (this call appended the job's missing batches),
    ``already committed``, ``skipped`` (a replayed micro-batch) or ``empty``; offsets per partition."""

    state: str
    ranges: dict[str, tuple[int, int]] = field(default_factory=dict)  # "topic-p" -> (start, end)

    @property
    def records(self) -> int:
        return sum(end - start for start, end in self.ranges.values())


# --- the commit log --------------------------------------------------------------------------

def commit_log_path(log_dirs: Sequence[str]) -> Path:
    return Path(log_dirs[0]) / COMMIT_LOG_FILE


class CommitLog:
    """The commit log's content (see the module doc); read and written whole, under the dir lock."""

    def __init__(self, path: Path, jobs: list[dict[str, Any]], queries: dict[str, dict[str, Any]]) -> None:
        self.path, self.jobs, self.queries = path, jobs, queries

    @classmethod
    def read(cls, log_dirs: Sequence[str]) -> CommitLog:
        path = commit_log_path(log_dirs)
        if not path.exists():
            return cls(path, [], {})
        try:
            content = json.loads(read_file(path, "spark commit log"))
            if content.get("version") != COMMIT_LOG_VERSION:
                raise ValueError(f"unknown version {content.get('version')!r}")
            return cls(path, list(content["jobs"]), dict(content["queries"]))
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise CheckpointError(f"spark commit log is not readable: {e}", path=path) from e

    def write(self) -> None:
        content = {"version": COMMIT_LOG_VERSION, "jobs": self.jobs, "queries": self.queries}
        write_atomically(self.path, json.dumps(content, separators=(",", ":")).encode())

    def find(self, job_key: str) -> dict[str, Any] | None:
        return next((job for job in self.jobs if job["id"] == job_key), None)

    def last_batch(self, query: str) -> int | None:
        entry = self.queries.get(query)
        return None if entry is None else int(entry["last_batch"])

    def pending(self) -> list[dict[str, Any]]:
        return [job for job in self.jobs if job["state"] == INTENT]

    def add(self, entry: dict[str, Any]) -> None:
        self.jobs.append(entry)

    def mark_committed(self, entry: dict[str, Any], ranges: dict[str, tuple[int, int]]) -> None:
        entry["state"] = COMMITTED
        entry["partitions"] = [{"topic": p["topic"], "partition": p["partition"], "start": ranges[_tp_key(p)][0],
                                "end": ranges[_tp_key(p)][1]} for p in entry["partitions"]]
        if entry.get("query") is not None:
            last = self.last_batch(entry["query"])
            self.queries[entry["query"]] = {"last_batch": max(entry["batch"], -1 if last is None else last)}
        self._trim()

    def _trim(self) -> None:
        """Keep intents, the newest committed entry of each query, the newest MAX_BATCH_JOBS batch jobs."""
        kept: list[dict[str, Any]] = []
        queries_seen: set[str] = set()
        batch_jobs = 0
        for job in reversed(self.jobs):
            if job["state"] == INTENT:
                kept.append(job)
            elif job.get("query") is not None:
                if job["query"] not in queries_seen:
                    queries_seen.add(job["query"])
                    kept.append(job)
            elif batch_jobs < MAX_BATCH_JOBS:
                batch_jobs += 1
                kept.append(job)
        self.jobs = kept[::-1]


def _tp_key(part: dict[str, Any]) -> str:
    return f"{part['topic']}-{part['partition']}"


# --- owning the data dir ---------------------------------------------------------------------

def owned_error(error: LogDirLockedError, log_dir: str) -> LogDirLockedError:
    holder = read_lock_holder(Path(log_dir)) or "an unknown process"
    return LogDirLockedError(
        f"the data dir is owned by a running process ({holder}): a tidelog serve, a Kafka broker or another "
        "tidelog command holds its .lock, and format(\"tidelog\") writes only to a data dir no process owns. "
        "Stop that process, or write through the running tidelog serve with Spark's Kafka sink: "
        "df.write.format(\"kafka\").option(\"kafka.bootstrap.servers\", \"<its host:port>\")",
        log_dir=log_dir)


def check_not_owned(log_dirs: Sequence[str], timeout_s: float = CHECK_TIMEOUT_S) -> None:
    """Fail early (at ``save()``) when a running process owns a log dir, after waiting up to
    ``timeout_s`` for a short owner (another job's commit) to let go; the commit checks again."""
    deadline = time.monotonic() + timeout_s
    for log_dir in log_dirs:
        while True:
            try:
                LogDirLock.acquire(Path(log_dir)).release()
                break
            except LogDirLockedError as e:
                if time.monotonic() >= deadline:
                    raise owned_error(e, log_dir) from None
                time.sleep(0.2)


def open_owner(log_dirs: Sequence[str], lock_timeout_s: float = LOCK_TIMEOUT_S, *,
               clock: Clock = SYSTEM_CLOCK) -> LogManager:
    """Own the data dir (every log dir's ``.lock``), waiting up to ``lock_timeout_s`` for another owner."""
    broker = BrokerConfig.from_properties({"log.cleaner.enable": "false"})
    deadline = time.monotonic() + lock_timeout_s
    while True:
        try:
            return LogManager.open(broker, [Path(d) for d in log_dirs], clock=clock)
        except LogDirLockedError as e:
            if time.monotonic() >= deadline:
                raise owned_error(e, str(getattr(e, "log_dir", log_dirs[0]))) from None
            time.sleep(0.2)


# --- the protocol ----------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Job:
    """One write: its key (staging dir name and commit-log id), and its query and batch when streaming."""

    key: str
    staging_root: str
    query: str | None = None
    batch: int | None = None


def commit_job(log_dirs: Sequence[str], job: Job, manifests: Iterable[TaskManifest | None] | None, *,
               clock: Clock = SYSTEM_CLOCK, lock_timeout_s: float = LOCK_TIMEOUT_S) -> CommitOutcome:
    """Publish ``job`` exactly once (steps 0-5 of the module doc). ``manifests`` None: only roll
    forward an existing intent (``abort()``); a job without an intent then publishes nothing."""
    staged = commit_order(manifests) if manifests is not None else []
    if manifests is not None and not staged and CommitLog.read(log_dirs).find(job.key) is None:
        remove_job_dir(job.staging_root, job.key)  # nothing to publish: no need to own the dir
        return CommitOutcome("empty")
    manager = open_owner(log_dirs, lock_timeout_s, clock=clock)
    try:
        committer = Committer(manager, log_dirs, clock)
        committer.finish_pending(except_key=job.key)
        outcome = committer.commit(job, staged if manifests is not None else None)
    finally:
        manager.shutdown()
    remove_job_dir(job.staging_root, job.key)
    if job.query is not None and job.batch is not None:
        remove_older_batches(job.staging_root, job.query, job.batch, CommitLog.read(log_dirs))
    return outcome


def remove_older_batches(staging_root: str, query: str, batch: int, commits: CommitLog) -> None:
    """Delete staging dirs of the query's earlier micro-batches that have no intent: orphans of
    aborts that could not tell the query id (Spark may hand abort() no message at all)."""
    pending = {job["id"] for job in commits.pending()}
    query_dir = job_dir(staging_root, stream_job_key(query, 0)).parent
    try:
        names = [p.name for p in query_dir.iterdir()]
    except OSError:
        return
    for name in names:
        number = name.removeprefix("batch-")
        key = stream_job_key(query, int(number)) if number.isdigit() else None
        if key is not None and int(number) < batch and key not in pending:
            remove_job_dir(staging_root, key)


def abort_job(log_dirs: Sequence[str], job: Job, *, clock: Clock = SYSTEM_CLOCK,
              lock_timeout_s: float = LOCK_TIMEOUT_S) -> CommitOutcome:
    """Spark's ``abort()``: roll forward when the job has an intent (a commit failed halfway),
    else delete its staging dir by prefix. Never undoes a committed job."""
    entry = CommitLog.read(log_dirs).find(job.key)
    if entry is not None and entry["state"] == INTENT:
        return commit_job(log_dirs, job, None, clock=clock, lock_timeout_s=lock_timeout_s)
    remove_job_dir(job.staging_root, job.key)
    return CommitOutcome(COMMITTED if entry is not None else "aborted")


def commit_order(manifests: Iterable[TaskManifest | None]) -> list[tuple[str, StagedBatch]]:
    """Staged batches in commit order: by Spark partition id, then position; one manifest per Spark
    partition (the first one; Spark hands one per partition)."""
    by_partition: dict[int, TaskManifest] = {}
    for manifest in manifests:
        if manifest is not None and manifest.file is not None:
            by_partition.setdefault(manifest.spark_partition, manifest)
    return [(str(by_partition[p].file), batch) for p in sorted(by_partition)
            for batch in sorted(by_partition[p].batches, key=lambda b: b.position)]


class Committer:
    """The protocol's steps over an owned data dir (``manager``). Each step is durable on return,
    so a crash between any two leaves a state the next :meth:`commit` (or :func:`abort_job`) completes."""

    def __init__(self, manager: LogManager, log_dirs: Sequence[str], clock: Clock = SYSTEM_CLOCK) -> None:
        self.manager, self.log_dirs, self.clock = manager, list(log_dirs), clock
        self.commits = CommitLog.read(log_dirs)

    def commit(self, job: Job, staged: list[tuple[str, StagedBatch]] | None) -> CommitOutcome:
        """Steps 1-4 for ``job``; ``staged`` None: roll forward only."""
        entry = self.commits.find(job.key)
        if entry is not None and entry["state"] == COMMITTED:
            return CommitOutcome("already committed", _ranges(entry))
        if entry is None:
            last = None if job.query is None else self.commits.last_batch(job.query)
            if last is not None and job.batch is not None and job.batch <= last:
                return CommitOutcome("skipped")
            if not staged:
                return CommitOutcome("empty")
            entry = self.write_intent(job, staged)
        ranges = self.publish(entry)
        self.mark_committed(entry, ranges)
        return CommitOutcome("published", ranges)

    def write_intent(self, job: Job, staged: list[tuple[str, StagedBatch]]) -> dict[str, Any]:
        """Step 2: record where each partition ends now and which batches the job appends there."""
        parts: dict[tuple[str, int], list[list[Any]]] = {}
        for file, batch in staged:
            parts.setdefault((batch.topic, batch.partition), []).append(
                [file, batch.position, batch.size, batch.records, batch.fingerprint, batch.stamp_at_commit])
        entry = {"id": job.key, "state": INTENT, "commit_time": self.clock.milliseconds(),
                 "staging": job.staging_root, "query": job.query, "batch": job.batch,
                 "partitions": [{"topic": t, "partition": p,
                                 "start": self.manager.log(TopicPartition(t, p)).log_end_offset,
                                 "batches": refs} for (t, p), refs in sorted(parts.items())]}
        self.commits.add(entry)
        self.commits.write()
        return entry

    def publish(self, entry: dict[str, Any]) -> dict[str, tuple[int, int]]:
        """Step 3 for every partition of the intent, partitions in parallel (appends validate in
        numba kernels that release the GIL); ``{"topic-p": (start, end)}``."""
        parts = entry["partitions"]
        with StagedReader(job_dir(entry["staging"], entry["id"])) as staged, \
                ThreadPoolExecutor(max(1, min(PUBLISH_THREADS, len(parts)))) as pool:
            ranges = pool.map(lambda part: self.publish_partition(entry, part, staged), parts)
            return {_tp_key(part): found for part, found in zip(parts, ranges)}

    def publish_partition(self, entry: dict[str, Any], part: dict[str, Any], staged: StagedReader) -> tuple[int, int]:
        """Append what the log lacks of the partition's batches; flush. ``(start, end)`` of the job's records."""
        tp = TopicPartition(part["topic"], part["partition"])
        target = self.manager.log(tp)
        refs = [StagedBatch(tp.topic, tp.partition, r[1], r[2], r[3], r[4], bool(r[5])) for r in part["batches"]]
        files = [r[0] for r in part["batches"]]
        present, start = matched_prefix(target, int(part["start"]), refs, entry["id"])
        for file, ref in zip(files[present:], refs[present:]):
            data = staged.read(file, ref)
            if ref.stamp_at_commit:
                stamp(data, int(entry["commit_time"]))
            self.manager.append(tp, data)
        target.flush()
        return start, start + sum(ref.records for ref in refs)  # the job's batches are contiguous from start

    def mark_committed(self, entry: dict[str, Any], ranges: dict[str, tuple[int, int]]) -> None:
        """Step 4."""
        self.commits.mark_committed(entry, ranges)
        self.commits.write()

    def finish_pending(self, except_key: str | None = None) -> None:
        """Step 0: roll forward other jobs' intents (their commit and abort both failed); a failure
        is logged and the intent kept."""
        for entry in self.commits.pending():
            if entry["id"] == except_key:
                continue
            try:
                self.mark_committed(entry, self.publish(entry))
                remove_job_dir(entry["staging"], entry["id"])
                log.info("rolled forward the interrupted commit of %s", entry["id"])
            except Exception as e:  # noqa: BLE001 - this job must not be blocked by another one's problem
                log.warning("cannot roll forward the interrupted commit of %s: %s", entry["id"], e)


def _ranges(entry: dict[str, Any]) -> dict[str, tuple[int, int]]:
    return {_tp_key(p): (int(p["start"]), int(p["end"])) for p in entry["partitions"]}


def matched_prefix(target: Log, start: int, refs: Sequence[StagedBatch], job_key: str) -> tuple[int, int]:
    """How many of ``refs`` the log already holds from ``start``, in order, and where the job's
    records start. StorageError when the log holds anything else there."""
    end = target.log_end_offset
    if end <= start:  # nothing of the job (a crash lost an unflushed tail before it): all of it goes at the end
        return 0, end
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
                return matched, start
            if matched >= len(refs) or batch.base_offset != offset or not _same(batch, refs[matched]):
                raise StorageError(
                    f"cannot complete the commit of {job_key}: the log holds other records at offset {offset} "
                    "(something else appended after the interrupted commit); its staged batches are kept",
                    topic_partition=f"{refs[0].topic}-{refs[0].partition}" if refs else None, offset=offset)
            matched += 1
            offset = batch.next_offset
            progressed = True
        if not progressed or matched == len(refs):
            break
    return matched, start


def _same(batch: Any, ref: StagedBatch) -> bool:
    return (batch.records_count == ref.records
            and crc32c(batch.buffer[RECORD_BATCH_OVERHEAD:]) == ref.fingerprint)


def stamp(data: bytearray, commit_time: int) -> None:
    """Give a batch staged without timestamps the commit time (deltas are 0: every record gets it)."""
    _TIMESTAMP.pack_into(data, BASE_TIMESTAMP_OFFSET, commit_time)
    _TIMESTAMP.pack_into(data, MAX_TIMESTAMP_OFFSET, commit_time)
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
            data = bytearray(os.pread(self._fd(name, path), ref.size, ref.position))
        except OSError as e:
            raise StorageError("cannot read a staged batch file: the commit cannot complete", path=path,
                               operation="read") from e
        if len(data) != ref.size or crc32c(memoryview(data)[RECORD_BATCH_OVERHEAD:]) != ref.fingerprint:
            raise StorageError("a staged batch is truncated or damaged: the commit cannot complete", path=path,
                               position=ref.position)
        return data

    def _fd(self, name: str, path: Path) -> int:
        with self._guard:
            fd = self._fds.get(name)
            if fd is None:
                fd = self._fds[name] = os.open(path, os.O_RDONLY)
            return fd

    def __enter__(self) -> StagedReader:
        return self

    def __exit__(self, *exc: object) -> None:
        for fd in self._fds.values():
            os.close(fd)
