"""ListOffsets (v1-v10): -2 earliest (the log start offset), -1 latest (the high watermark, or the
last stable offset for ``read_committed``), -3 the record with the largest timestamp (v7+), -4
earliest local (v8+), -5 latest tiered (v9+; -1 on a topic that is not tiered), else the first
offset whose timestamp is at least the one asked for; -1/-1 when no record matches (Kafka's answer).
On a tiered topic the search by timestamp looks at the remote segments below the local log start
first (:meth:`LogManager.list_offsets_remote`, on a remote reader thread; the handler waits for
it on the event loop, holding no thread, within ``remote.list.offsets.request.timeout.ms``:
REQUEST_TIMED_OUT past it), then the local log.
A special timestamp below the version that introduced it gets UNSUPPORTED_VERSION for its partition.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from kafka.protocol.consumer import ListOffsetsResponse

from tidelog.manager import LogManager
from tidelog.server.codec import Request
from tidelog.server.context import ApiContext, ConnectionInfo
from tidelog.server.errors import ErrorCode, error_code
from tidelog.storage.fetch_info import FetchIsolation, TimestampAndOffset
from tidelog.topic_partition import TopicPartition

TopicResponse = ListOffsetsResponse.ListOffsetsTopicResponse
PartitionResponse = TopicResponse.ListOffsetsPartitionResponse
MIN_VERSION_OF = {-3: 7, -4: 8, -5: 9}  # Kafka's ListOffsetsRequest rules (KIP-734, KIP-405, KIP-1005)
READ_COMMITTED = 1


async def handle_list_offsets(ctx: ApiContext, conn: ConnectionInfo, request: Request) -> Any:
    body = request.body
    isolation = FetchIsolation.TXN_COMMITTED if getattr(body, "isolation_level", 0) == READ_COMMITTED \
        else FetchIsolation.HIGH_WATERMARK
    answers = await ctx.run(list_offsets, ctx.manager, body.topics, isolation, request.api_version)
    pending = [a for _, partitions in answers for a in partitions if isinstance(a, _Remote)]
    if pending:
        await _finish_remote(ctx, pending, isolation)
    return ListOffsetsResponse(throttle_time_ms=0, topics=[
        TopicResponse(name=name, partitions=[a.response if isinstance(a, _Remote) else a for a in partitions])
        for name, partitions in answers])


@dataclass(slots=True)
class _Remote:
    """A partition whose answer waits for the remote tier (a lookup by timestamp under way)."""

    tp: TopicPartition
    timestamp: int
    future: Future[TimestampAndOffset | None]
    response: Any = None


def list_offsets(manager: LogManager, topics: list[Any], isolation: FetchIsolation,
                 version: int) -> list[tuple[str, list[Any]]]:
    """The answer for every partition asked for, one entry per topic entry of the request (as
    Kafka's); a partition whose lookup needs the remote tier gets a :class:`_Remote` (its lookup
    started on the remote reader threads). Runs in the thread pool."""
    return [(t.name, [_one(manager, t.name, p.partition_index, p.timestamp, isolation, version)
                      for p in t.partitions]) for t in topics]


def _one(manager: LogManager, topic: str, partition: int, timestamp: int, isolation: FetchIsolation,
         version: int) -> Any:
    if version < MIN_VERSION_OF.get(timestamp, 0) or timestamp < -5:
        return PartitionResponse(partition_index=partition, error_code=ErrorCode.UNSUPPORTED_VERSION)
    tp = TopicPartition(topic, partition)
    try:
        future = manager.list_offsets_remote(tp, timestamp) if timestamp >= 0 else None
        if future is not None:
            return _Remote(tp, timestamp, future)
        return _response(partition, manager.list_offsets(tp, timestamp, isolation, remote=False))
    except Exception as e:  # noqa: BLE001 - every failure becomes this partition's error code
        manager.report_read_error(tp, "list offsets", e)  # a disk fault fails this partition's read
        return PartitionResponse(partition_index=partition, error_code=error_code(e))


def _response(partition: int, found: TimestampAndOffset | None) -> Any:
    if found is None:
        return PartitionResponse(partition_index=partition, error_code=0, timestamp=-1, offset=-1, leader_epoch=-1)
    epoch = found.leader_epoch if found.leader_epoch is not None else -1
    return PartitionResponse(partition_index=partition, error_code=0, timestamp=found.timestamp, offset=found.offset,
                             leader_epoch=epoch)


async def _finish_remote(ctx: ApiContext, pending: list[_Remote], isolation: FetchIsolation) -> None:
    """Wait on the event loop (no thread held) for the remote lookups, at most
    ``remote.list.offsets.request.timeout.ms``; a lookup that found nothing searches the local
    log (in the thread pool), one not done by then is cancelled and answers REQUEST_TIMED_OUT."""
    waited = {id(p): asyncio.wrap_future(p.future) for p in pending}
    await asyncio.wait(waited.values(), timeout=ctx.manager.broker.remote_list_offsets_request_timeout_ms / 1000)
    local = []
    for p in pending:
        done = waited[id(p)]
        if not done.done() or done.cancelled():
            done.cancel()
            expired = ctx.manager.remote_reader().list_offsets_timeout(p.tp, p.timestamp)  # REQUEST_TIMED_OUT
            p.response = PartitionResponse(partition_index=p.tp.partition, error_code=error_code(expired))
        elif done.exception() is not None:
            p.response = PartitionResponse(partition_index=p.tp.partition, error_code=error_code(done.exception()))
        elif done.result() is not None:
            p.response = _response(p.tp.partition, done.result())
        else:
            local.append(p)
    if local:
        await ctx.run(_answer_locally, ctx.manager, local, isolation)


def _answer_locally(manager: LogManager, pending: list[_Remote], isolation: FetchIsolation) -> None:
    for p in pending:
        try:
            p.response = _response(p.tp.partition, manager.list_offsets(p.tp, p.timestamp, isolation, remote=False))
        except Exception as e:  # noqa: BLE001 - every failure becomes this partition's error code
            manager.report_read_error(p.tp, "list offsets", e)
            p.response = PartitionResponse(partition_index=p.tp.partition, error_code=error_code(e))
