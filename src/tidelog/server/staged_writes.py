"""tidelog's own APIs for Spark jobs staged through the broker: StageBatches, CommitStagedJob,
AbortStagedJob (messages: :mod:`.staged_api`; the work: :mod:`tidelog.manager.live_commit`).

* **StageBatches** writes one chunk of a task attempt's staged file into the broker's staging
  dir for the job (fsynced on the file's last chunk), and moves the job's time lease forward.
* **CommitStagedJob** publishes the job exactly once with the staged-commit protocol on the live
  logs (:class:`~tidelog.manager.live_commit.LiveCommitter`): ``published``, or ``already
  committed`` when repeated, ``skipped`` for a streaming micro-batch at or below its query's last
  committed batch; a rolled-back job is an error. Delayed fetches of its partitions are woken.
* **AbortStagedJob** is Spark's abort(): rolls forward a job with an intent, else deletes its
  staging dir.

Errors go in the response (``ErrorCode``, ``ErrorMessage``), as Kafka's codes
(:func:`~tidelog.server.errors.error_code`). Sizes: a request is bounded by
``socket.request.max.bytes`` like any other (the connection closes on a larger size prefix);
the sink sends chunks far below it. Authorization: as Produce, these run only on a connection
that passed its listener's authentication (SASL listeners); there is no authorizer.

:func:`attach` makes the broker's :class:`~tidelog.manager.live_commit.LiveCommits` (the server
calls it at start, with ``tidelog.spark.staging.lease.ms``) and schedules its reclaim;
:func:`write_address` leaves the broker's listeners in each log dir for the sink to find.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import weakref
from typing import Any

from tidelog.manager import LogManager
from tidelog.manager.internal_topics import check_appendable
from tidelog.manager.live_commit import STAGING_LEASE_KEY, LiveCommits
from tidelog.server.codec import Request
from tidelog.server.context import ApiContext, ConnectionInfo
from tidelog.server.errors import ErrorCode, error_code
from tidelog.errors import StorageError
from tidelog.server.staged_api import (
    SERVE_ADDRESS_FILE,
    AbortStagedJobResponse,
    CommitStagedJobResponse,
    StageBatchesResponse,
)
from tidelog.storage.atomic import write_atomically
from tidelog.storage.commit_log import StagedBatch
from tidelog.topic_partition import TopicPartition

log = logging.getLogger(__name__)
_LIVE: weakref.WeakKeyDictionary[LogManager, LiveCommits] = weakref.WeakKeyDictionary()


def attach(manager: LogManager) -> LiveCommits:
    """The broker's staged writes over ``manager`` (made once, its reclaim scheduled)."""
    found = _LIVE.get(manager)
    if found is None:
        found = _LIVE[manager] = LiveCommits(manager, manager.clock, int(manager.broker.get(STAGING_LEASE_KEY)))
        found.schedule_reclaim()
    return found


def write_address(manager: LogManager, bound: list[Any], protocols: dict[str, str], *,
                  metrics: str | None = None) -> None:
    """Leave this broker's listeners (advertised endpoints) in :data:`SERVE_ADDRESS_FILE` of each
    online log dir, where the Spark sink finds them (a failure is logged: the sink then needs
    ``kafka.bootstrap.servers``), and, under ``"metrics"``, its Prometheus endpoint's URL when it
    serves one."""
    address: dict[str, Any] = {"pid": os.getpid(), "host": socket.gethostname(), "listeners": [
        {"name": b.listener_name, "host": b.advertised.host, "port": b.advertised.port,
         "security_protocol": protocols.get(b.listener_name, b.listener_name)} for b in bound]}
    if metrics is not None:
        address["metrics"] = metrics
    content = json.dumps(address).encode()
    for info in manager.log_dirs():
        if info.offline is None:
            try:
                write_atomically(info.path / SERVE_ADDRESS_FILE, content)
            except (OSError, StorageError) as e:
                log.warning("cannot write the broker's address for the Spark sink in %s: %s", info.path, e)


def remove_address(manager: LogManager) -> None:
    """Remove :data:`SERVE_ADDRESS_FILE` from every log dir (the broker stops listening)."""
    for info in manager.log_dirs():
        try:
            (info.path / SERVE_ADDRESS_FILE).unlink(missing_ok=True)
        except OSError as e:
            log.warning("cannot remove %s: %s", info.path / SERVE_ADDRESS_FILE, e)


def _failure(e: BaseException) -> tuple[int, str]:
    return error_code(e), f"{type(e).__name__}: {e}"


async def handle_stage_batches(ctx: ApiContext, conn: ConnectionInfo, request: Request) -> Any:
    body = request.body
    try:
        size = await ctx.run(attach(ctx.manager).stage, body.job_key, body.file_name, body.position, body.data,
                             body.last)
    except Exception as e:  # noqa: BLE001 - every failure is the response's error
        code, message = _failure(e)
        return StageBatchesResponse(error_code=code, error_message=message, size=-1)
    return StageBatchesResponse(error_code=ErrorCode.NONE, error_message=None, size=size)


async def handle_commit_staged_job(ctx: ApiContext, conn: ConnectionInfo, request: Request) -> Any:
    body = request.body
    staged = [(b.file_name, StagedBatch(b.topic, b.partition, b.position, b.size, b.records, b.fingerprint,
                                        b.stamp_at_commit)) for b in body.batches]
    batch = None if body.batch_id < 0 else body.batch_id
    try:
        for topic in {b.topic for b in body.batches}:
            check_appendable(topic)  # as Produce: only the broker writes its coordinators' topics
        outcome = await ctx.run(attach(ctx.manager).commit, body.job_key, staged, body.query_id, batch)
    except Exception as e:  # noqa: BLE001
        code, message = _failure(e)
        return CommitStagedJobResponse(error_code=code, error_message=message, state="failed", ranges=[])
    ranges = []
    for key, (start, end) in sorted(outcome.ranges.items()):
        topic, _, partition = key.rpartition("-")
        ranges.append(CommitStagedJobResponse.Range(topic=topic, partition=int(partition), start=start, end=end))
    if outcome.state == "published":
        ctx.arrivals.notify([TopicPartition(r.topic, r.partition) for r in ranges])
    return CommitStagedJobResponse(error_code=ErrorCode.NONE, error_message=None, state=outcome.state, ranges=ranges)


async def handle_abort_staged_job(ctx: ApiContext, conn: ConnectionInfo, request: Request) -> Any:
    body = request.body
    batch = None if body.batch_id < 0 else body.batch_id
    try:
        outcome = await ctx.run(attach(ctx.manager).abort, body.job_key, body.query_id, batch)
    except Exception as e:  # noqa: BLE001
        code, message = _failure(e)
        return AbortStagedJobResponse(error_code=code, error_message=message, state="failed")
    return AbortStagedJobResponse(error_code=ErrorCode.NONE, error_message=None, state=outcome.state)
