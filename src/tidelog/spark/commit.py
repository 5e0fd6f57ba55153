"""Driver side of the sink: publish staged batches exactly once, safe to repeat after any crash.

A write is a *job*: a batch ``save()`` (``job-<uuid>``) or one micro-batch of a streaming query
(``query-<queryId>/batch-<batchId>``). Executors staged its batches (:mod:`tidelog.spark.staging`);
the driver publishes them by appending them to the logs, as the partitions' leader, while owning
the data dir: :meth:`LogManager.open` takes every log dir's ``.lock``, so a running ``tidelog
serve`` or Kafka broker (or another commit) excludes it. A commit waits a little for another
commit to finish, then fails saying the dir is owned by a running process and how to write
instead (stop it, or use Spark's Kafka sink against ``tidelog serve``).

The protocol itself (intent, roll forward, commit mark, roll back) is
:mod:`tidelog.manager.staged_commit`, below the manager, so that whoever opens the dir next (the
broker at start-up, the next job, any tidelog command) completes a job whose driver died; the
commit log's file and the rule that keeps readers from seeing part of a job are
:mod:`tidelog.storage.commit_log`. What this module adds is Spark's side: the manifests to commit
order, ``commit()``/``abort()`` and cleaning the staging dirs of a streaming query.

A crash (or exception) after the intent leaves a decided job, completed by whichever opens the
dir first: the driver's retry of ``commit()``, ``abort()`` (which Spark calls after a failed
commit), the next job, or ``tidelog serve``. A crash before the intent published nothing: ``abort()``
deletes the staging dir by its job prefix (its messages may be None even for tasks that staged),
and a driver that died leaves a staging dir the next opener of the data dir deletes (its lease
names a dead process; :mod:`tidelog.storage.staging_dirs`).

When a running ``tidelog serve`` owns the dir, or ``kafka.bootstrap.servers`` is given, the job
was staged through that broker and the broker commits it with the same protocol
(:func:`commit_plan`, :mod:`tidelog.spark.broker_commit`, :mod:`tidelog.manager.live_commit`).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from pathlib import Path

from tidelog.clock import SYSTEM_CLOCK, Clock
from tidelog.errors import LogDirLockedError, StorageError
from tidelog.manager import LogManager
from tidelog.manager.staged_commit import CommitOutcome, Committer, Job
from tidelog.spark.sink_options import SinkPlan
from tidelog.spark.staging import TaskManifest, stream_job_key
from tidelog.storage.commit_log import INTENT, ROLLED_BACK, CommitLog, StagedBatch
from tidelog.storage.config import BrokerConfig
from tidelog.storage.lock import LogDirLock, read_lock_holder
from tidelog.storage.staging_dirs import job_dir, remove_job_dir

LOCK_TIMEOUT_S = 30.0  # how long a commit waits for another owner (usually another commit) to let go
CHECK_TIMEOUT_S = 5.0  # how long writer() waits so before refusing (a running server never lets go)


# --- owning the data dir ---------------------------------------------------------------------

def owned_error(error: LogDirLockedError, log_dir: str) -> LogDirLockedError:
    holder = read_lock_holder(Path(log_dir)) or "an unknown process"
    return LogDirLockedError(
        f"the data dir is owned by a running process ({holder}) that left no tidelog serve address there: a Kafka "
        "broker, an older tidelog serve or another tidelog command holds its .lock. Stop that process; or, when it "
        "is a tidelog serve, write through it: .option(\"kafka.bootstrap.servers\", \"<its host:port>\"); to a "
        "Kafka broker, write with format(\"kafka\")",
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

def commit_job(log_dirs: Sequence[str], job: Job, manifests: Iterable[TaskManifest | None] | None, *,
               clock: Clock = SYSTEM_CLOCK, lock_timeout_s: float = LOCK_TIMEOUT_S) -> CommitOutcome:
    """Publish ``job`` exactly once (:mod:`tidelog.manager.staged_commit`; opening the dir has
    completed every interrupted job, this one's too). ``manifests`` None: only roll forward an
    existing intent (``abort()``); a job without an intent then publishes nothing."""
    staged = commit_order(manifests) if manifests is not None else []
    if manifests is not None and not staged and CommitLog.read(log_dirs).find(job.key) is None:
        remove_job_dir(job.staging_root, job.key)  # nothing to publish: no need to own the dir
        return CommitOutcome("empty")
    manager = open_owner(log_dirs, lock_timeout_s, clock=clock)
    try:
        outcome = Committer(manager, log_dirs, clock).commit(job, staged if manifests is not None else None)
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
    """Spark's ``abort()``: roll forward when the job has an intent (a commit failed halfway; rolled
    back instead when it cannot be completed), else delete its staging dir by prefix. Never undoes
    a committed job."""
    entry = CommitLog.read(log_dirs).find(job.key)
    if entry is not None and entry["state"] == INTENT:
        try:
            return commit_job(log_dirs, job, None, clock=clock, lock_timeout_s=lock_timeout_s)
        except StorageError:
            entry = CommitLog.read(log_dirs).find(job.key)
            if entry is None or entry["state"] != ROLLED_BACK:
                raise  # still pending: the next owner of the dir completes or rolls it back
    remove_job_dir(job.staging_root, job.key)
    return CommitOutcome(entry["state"] if entry is not None else "aborted")


def commit_plan(plan: SinkPlan, job: Job, manifests: Iterable[TaskManifest | None]) -> CommitOutcome:
    """Publish ``job`` of ``plan``: through its broker when it has one
    (:func:`~tidelog.spark.broker_commit.commit_through_broker`), else by owning the data dir."""
    if plan.bootstrap is None:
        return commit_job(plan.log_dirs, job, manifests)
    from tidelog.spark.broker_commit import commit_through_broker

    return commit_through_broker(plan.bootstrap, job.key, commit_order(manifests), job.query, job.batch)


def abort_plan(plan: SinkPlan, job: Job) -> CommitOutcome:
    """Spark's ``abort()`` of ``job`` of ``plan`` (:func:`abort_job`, or the broker's abort)."""
    if plan.bootstrap is None:
        return abort_job(plan.log_dirs, job)
    from tidelog.spark.broker_commit import abort_through_broker

    return abort_through_broker(plan.bootstrap, job.key, job.query, job.batch)


def commit_order(manifests: Iterable[TaskManifest | None]) -> list[tuple[str, StagedBatch]]:
    """Staged batches in commit order: by Spark partition id, then position; one manifest per Spark
    partition (the first one; Spark hands one per partition)."""
    by_partition: dict[int, TaskManifest] = {}
    for manifest in manifests:
        if manifest is not None and manifest.file is not None:
            by_partition.setdefault(manifest.spark_partition, manifest)
    return [(str(by_partition[p].file), batch) for p in sorted(by_partition)
            for batch in sorted(by_partition[p].batches, key=lambda b: b.position)]
