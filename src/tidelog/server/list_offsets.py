"""ListOffsets (v1-v10): -2 earliest (the log start offset), -1 latest (the high watermark, or the
last stable offset for ``read_committed``), -3 the record with the largest timestamp (v7+), -4
earliest local (v8+), -5 latest tiered (v9+; -1 on a topic that is not tiered), else the first
offset whose timestamp is at least the one asked for; -1/-1 when no record matches (Kafka's answer).
On a tiered topic the search by timestamp looks at the remote segments below the local log start
first (:meth:`LogManager.list_offsets`, on a remote reader thread within
``remote.list.offsets.request.timeout.ms``; REQUEST_TIMED_OUT past it).
A special timestamp below the version that introduced it gets UNSUPPORTED_VERSION for its partition.
"""

from __future__ import annotations

from typing import Any

from kafka.protocol.consumer import ListOffsetsResponse

from tidelog.manager import LogManager
from tidelog.server.codec import Request
from tidelog.server.context import ApiContext, ConnectionInfo
from tidelog.server.errors import ErrorCode, error_code
from tidelog.storage.fetch_info import FetchIsolation
from tidelog.topic_partition import TopicPartition

TopicResponse = ListOffsetsResponse.ListOffsetsTopicResponse
PartitionResponse = TopicResponse.ListOffsetsPartitionResponse
MIN_VERSION_OF = {-3: 7, -4: 8, -5: 9}  # Kafka's ListOffsetsRequest rules (KIP-734, KIP-405, KIP-1005)
READ_COMMITTED = 1


async def handle_list_offsets(ctx: ApiContext, conn: ConnectionInfo, request: Request) -> Any:
    body = request.body
    isolation = FetchIsolation.TXN_COMMITTED if getattr(body, "isolation_level", 0) == READ_COMMITTED \
        else FetchIsolation.HIGH_WATERMARK
    topics = await ctx.run(list_offsets, ctx.manager, body.topics, isolation, request.api_version)
    return ListOffsetsResponse(throttle_time_ms=0, topics=topics)


def list_offsets(manager: LogManager, topics: list[Any], isolation: FetchIsolation, version: int) -> list[Any]:
    """The answer for every partition asked for. Runs in the thread pool."""
    return [TopicResponse(name=t.name, partitions=[
        _one(manager, t.name, p.partition_index, p.timestamp, isolation, version) for p in t.partitions]) for t in topics]


def _one(manager: LogManager, topic: str, partition: int, timestamp: int, isolation: FetchIsolation,
         version: int) -> Any:
    if version < MIN_VERSION_OF.get(timestamp, 0) or timestamp < -5:
        return PartitionResponse(partition_index=partition, error_code=ErrorCode.UNSUPPORTED_VERSION)
    tp = TopicPartition(topic, partition)
    try:
        found = manager.list_offsets(tp, timestamp, isolation)
    except Exception as e:  # noqa: BLE001 - every failure becomes this partition's error code
        manager.report_read_error(tp, "list offsets", e)  # a disk fault fails this partition's read
        return PartitionResponse(partition_index=partition, error_code=error_code(e))
    if found is None:
        return PartitionResponse(partition_index=partition, error_code=0, timestamp=-1, offset=-1, leader_epoch=-1)
    epoch = found.leader_epoch if found.leader_epoch is not None else -1
    return PartitionResponse(partition_index=partition, error_code=0, timestamp=found.timestamp, offset=found.offset,
                             leader_epoch=epoch)
