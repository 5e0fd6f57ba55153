"""``df.write.format("tidelog")`` and ``df.writeStream.format("tidelog")``: exactly-once writers.

Thin Spark adapters over :mod:`tidelog.spark.sink_options` (validation, on the driver at
``save()``/``start()``), :mod:`tidelog.spark.staging` (executors stage batches) and
:mod:`tidelog.spark.commit` (the driver publishes them once). What Spark calls where:

* ``writer()``/``streamWriter()`` (driver): validate; refuse early when a running process owns the
  data dir; a batch write gets its job id here. The writer pickled into tasks holds only the
  small :class:`~tidelog.spark.sink_options.SinkPlan` and that id.
* ``write()`` (executor task): stage the task's rows; the task's identity comes from
  ``TaskContext`` (partition id, attempt number, task attempt id; for streaming the query id and
  micro-batch id local properties).
* ``commit()`` (driver): publish; ``abort()`` (driver): roll forward an interrupted commit, else
  delete the job's staging dir. Spark calls ``abort()`` after a failed ``commit()`` as well.

With a broker (``kafka.bootstrap.servers``, or a data dir a running ``tidelog serve`` owns) tasks
stage through it and ``commit()``/``abort()`` are requests to it (:mod:`tidelog.spark.broker_commit`);
the ownership check is skipped (the broker owns the dir).

The stream writer is built again for every micro-batch (and once more for its commit): it keeps
no state. Its ``commit()``/``abort()`` learn the query id from the task manifests, or, when every
message is None, from the checkpoint's ``metadata`` file.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage

from tidelog.spark.sink_options import SinkPlan, parse_plan
from tidelog.spark.staging import TaskIdentity, TaskManifest, batch_job_key, driver_lease, stage_task, stream_job_key

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import StructType

    from tidelog.manager.staged_commit import Job
    from tidelog.storage.staging_dirs import Lease

# tidelog.spark.commit (and the LogManager it imports) is imported where the driver needs it, not
# at module level: executors unpickle the writers and only stage.

log = logging.getLogger(__name__)

QUERY_ID_PROPERTY = "sql.streaming.queryId"
BATCH_ID_PROPERTY = "streaming.sql.batchId"


def batch_writer(options: dict[str, str], schema: StructType, overwrite: bool) -> TidelogBatchWriter:
    """The writer of one ``save()`` (validates now: errors surface at ``save()``)."""
    from tidelog.spark.commit import check_not_owned

    plan = parse_plan(options, schema, overwrite)
    if plan.bootstrap is None:
        check_not_owned(plan.log_dirs)
    return TidelogBatchWriter(plan, uuid.uuid4().hex, driver_lease())


def stream_writer(options: dict[str, str], schema: StructType, overwrite: bool) -> TidelogStreamWriter:
    """The writer of one micro-batch of a streaming query (validates now: errors surface at ``start()``)."""
    from tidelog.spark.commit import check_not_owned

    plan = parse_plan(options, schema, overwrite, streaming=True)
    if plan.bootstrap is None:
        check_not_owned(plan.log_dirs)
    return TidelogStreamWriter(plan, options.get("checkpointlocation"), driver_lease())


def _task() -> TaskContext:
    context = TaskContext.get()
    if context is None:
        raise RuntimeError("write() runs in a Spark task only")
    return context


def _identity(context: TaskContext) -> TaskIdentity:
    return TaskIdentity(context.partitionId(), context.attemptNumber(), context.taskAttemptId())


class TidelogBatchWriter(DataSourceArrowWriter):
    """One batch job: stage on executors, publish once on the driver."""

    def __init__(self, plan: SinkPlan, job_id: str, lease: Lease | None = None) -> None:
        self.plan = plan
        self.job_id = job_id
        self.lease = lease  # the driver's: its staging dir is reclaimed once the driver is dead

    def job(self) -> Job:
        from tidelog.manager.staged_commit import Job

        return Job(batch_job_key(self.job_id), self.plan.staging_root)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return stage_task(self.plan, batch_job_key(self.job_id), iterator, _identity(_task()), lease=self.lease)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        from tidelog.spark.commit import commit_plan

        job = self.job()
        outcome = commit_plan(self.plan, job, _manifests(messages))
        log.info("tidelog write %s: %s, %d records", job.key, outcome.state, outcome.records)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        from tidelog.spark.commit import abort_plan

        abort_plan(self.plan, self.job())


class TidelogStreamWriter(DataSourceStreamArrowWriter):
    """Micro-batches of a streaming query, each published once (keyed by query id and batch id)."""

    def __init__(self, plan: SinkPlan, checkpoint: str | None, lease: Lease | None = None) -> None:
        self.plan = plan
        self.checkpoint = checkpoint
        self.lease = lease

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        context = _task()
        query = context.getLocalProperty(QUERY_ID_PROPERTY)
        batch = context.getLocalProperty(BATCH_ID_PROPERTY)
        if query is None or batch is None:
            raise RuntimeError("streaming write without a query id or batch id in the task's local properties")
        key = stream_job_key(query, int(batch))
        return stage_task(self.plan, key, iterator, _identity(context), query, int(batch), lease=self.lease)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        from tidelog.spark.commit import commit_plan

        job = self._job(messages, batchId)
        if job is None:
            return  # no task ran: nothing was staged
        outcome = commit_plan(self.plan, job, _manifests(messages))
        log.info("tidelog stream write %s: %s, %d records", job.key, outcome.state, outcome.records)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        from tidelog.spark.commit import abort_plan

        job = self._job(messages, batchId)
        if job is None:
            log.warning("tidelog stream abort of batch %d: query id unknown; its staging dir is removed by the "
                        "query's next commit", batchId)
            return
        abort_plan(self.plan, job)

    def _job(self, messages: list[WriterCommitMessage | None], batch_id: int) -> Job | None:
        from tidelog.manager.staged_commit import Job

        query = next((m.query for m in _manifests(messages) if m.query is not None), None)
        if query is None:
            query = query_id_from_checkpoint(self.checkpoint)
        if query is None:
            return None
        return Job(stream_job_key(query, batch_id), self.plan.staging_root, query, batch_id)


def _manifests(messages: list[WriterCommitMessage | None]) -> list[TaskManifest]:
    return [m for m in messages if isinstance(m, TaskManifest)]


def query_id_from_checkpoint(checkpoint: str | None) -> str | None:
    """The query id Spark keeps in ``<checkpointLocation>/metadata`` (local paths only)."""
    if not checkpoint:
        return None
    path = checkpoint.removeprefix("file://") if checkpoint.startswith("file://") else checkpoint.removeprefix("file:")
    try:
        first = (Path(path) / "metadata").read_text("utf-8").splitlines()[0]
        return str(json.loads(first)["id"])
    except (OSError, ValueError, KeyError, IndexError, TypeError):
        return None
