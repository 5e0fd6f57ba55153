"""Metadata: this broker is the only one and leads every partition (leader epoch 0, the epoch
tidelog's appends stamp). Topics come from the LogManager; an unknown topic is created with
``num.partitions`` partitions when ``auto.create.topics.enable`` and the request allow it (the
create is synchronous, so the answer already lists its partitions, where Kafka answers
LEADER_NOT_AVAILABLE until its controller catches up). A partition set aside at start-up, or in a
log dir that is offline, has no leader: LEADER_NOT_AVAILABLE, leader -1, its replica listed
offline (Kafka's KRaft metadata cache for a partition whose only replica's dir failed).
"""

from __future__ import annotations

from typing import Any

from kafka.protocol.metadata import MetadataResponse

from tidelog.errors import TidelogError, UnknownTopicOrPartitionError
from tidelog.manager import LogManager
from tidelog.manager.internal_topics import INTERNAL_TOPICS
from tidelog.manager.reports import TopicDescription
from tidelog.server.codec import Request
from tidelog.server.context import ApiContext, ConnectionInfo
from tidelog.server.errors import ErrorCode, error_code
from tidelog.storage.metadata import topic_id_to_uuid

Topic = MetadataResponse.MetadataResponseTopic
Partition = Topic.MetadataResponsePartition
NO_OPERATIONS = None  # encodes as -2147483648 (bit 31), Kafka's "authorized operations not requested"


async def handle_metadata(ctx: ApiContext, conn: ConnectionInfo, request: Request) -> Any:
    body = request.body
    wanted = _wanted_topics(request)
    allowed = request.api_version < 4 or body.allow_auto_topic_creation  # v0-v3 always allow it
    auto_create = ctx.manager.broker.auto_create_topics_enable and allowed
    topics = await ctx.run(_describe, ctx.manager, wanted, auto_create, request.api_version)
    broker = MetadataResponse.MetadataResponseBroker(node_id=ctx.node_id, host=conn.advertised.host,
                                                     port=conn.advertised.port, rack=None)
    return MetadataResponse(throttle_time_ms=0, brokers=[broker], cluster_id=ctx.cluster_id,
                            controller_id=ctx.node_id, topics=[_topic(ctx.node_id, t) for t in topics],
                            authorized_operations=NO_OPERATIONS, error_code=0)


def _wanted_topics(request: Request) -> list[tuple[str | None, Any]] | None:
    """``[(name, topic id)]`` asked for, or None for every topic (null list; v0's empty list)."""
    topics = request.body.topics
    if topics is None or (request.api_version == 0 and not topics):
        return None
    return [(t.name, getattr(t, "topic_id", None)) for t in topics]


def _describe(manager: LogManager, wanted: list[tuple[str | None, Any]] | None, auto_create: bool,
              version: int) -> list[TopicDescription | tuple[str | None, Any, ErrorCode]]:
    """Per topic asked for: its description, or ``(name, id, error)``. Runs in the thread pool."""
    if wanted is None:
        return [found for name in manager.topics() if isinstance(found := _one(manager, name, False), TopicDescription)]
    by_id = {topic_id_to_uuid(manager.describe_topic(n).topic_id): n for n in manager.topics()} if any(
        name is None for name, _ in wanted) else {}
    found: list[TopicDescription | tuple[str | None, Any, ErrorCode]] = []
    for name, topic_id in wanted:
        if name is None:
            name = by_id.get(topic_id)
            if name is None:
                found.append((None, topic_id, ErrorCode.UNKNOWN_TOPIC_ID))
                continue
        found.append(_one(manager, name, auto_create))
    return found


def _one(manager: LogManager, name: str, auto_create: bool) -> TopicDescription | tuple[str | None, Any, ErrorCode]:
    try:
        return manager.describe_topic(name)
    except UnknownTopicOrPartitionError as e:
        if not auto_create:
            return (name, None, error_code(e))
    try:
        return manager.create_topic(name, manager.broker.num_partitions)
    except TidelogError as e:
        code = error_code(e)
        if code == ErrorCode.TOPIC_ALREADY_EXISTS:  # created by another request meanwhile
            return manager.describe_topic(name)
        return (name, None, code)


def _topic(node_id: int, found: TopicDescription | tuple[str | None, Any, ErrorCode]) -> Any:
    if not isinstance(found, TopicDescription):
        name, topic_id, code = found
        return Topic(error_code=code, name=name, topic_id=topic_id, is_internal=False, partitions=[],
                     authorized_operations=NO_OPERATIONS)
    partitions = [Partition(error_code=0, partition_index=p.topic_partition.partition, leader_id=node_id,
                            leader_epoch=0, replica_nodes=[node_id], isr_nodes=[node_id], offline_replicas=[])
                  for p in found.partitions]
    partitions += [Partition(error_code=ErrorCode.LEADER_NOT_AVAILABLE, partition_index=o.topic_partition.partition,
                             leader_id=-1, leader_epoch=0, replica_nodes=[node_id], isr_nodes=[],
                             offline_replicas=[node_id])
                   for o in found.offline if o.topic_partition is not None]
    partitions.sort(key=lambda p: p.partition_index)
    return Topic(error_code=0, name=found.name, topic_id=topic_id_to_uuid(found.topic_id),
                 is_internal=found.name in INTERNAL_TOPICS, partitions=partitions, authorized_operations=NO_OPERATIONS)
