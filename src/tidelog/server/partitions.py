"""CreatePartitions (v0-v3) and DeleteRecords (v0-v2), through the LogManager.

CreatePartitions grows a topic to ``count`` partitions, never shrinks it (INVALID_PARTITIONS with
Kafka's wording, from :meth:`LogManager.create_partitions`). Manual ``assignments`` must give one
entry per new partition, each on this broker alone (INVALID_REPLICA_ASSIGNMENT otherwise); a
topic named twice in one request fails with INVALID_REQUEST; ``validate_only`` changes nothing.
New partitions count against the request's budget (:data:`~.topics.MAX_PARTITIONS_PER_REQUEST`).

DeleteRecords moves a partition's log start offset (``-1`` = the high watermark) and answers the
new low watermark. Kafka's answers: an unknown partition UNKNOWN_TOPIC_OR_PARTITION, an offset past
the high watermark OFFSET_OUT_OF_RANGE, a topic without ``delete`` in ``cleanup.policy``
POLICY_VIOLATION; the low watermark is -1 on any error.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from kafka.protocol.admin import CreatePartitionsResponse, DeleteRecordsResponse

from tidelog.errors import InvalidPartitionsError, InvalidRequestError, UnknownTopicOrPartitionError
from tidelog.manager import LogManager
from tidelog.server.codec import Request
from tidelog.server.context import ApiContext, ConnectionInfo
from tidelog.server.errors import InvalidReplicaAssignmentError, error_code, error_message
from tidelog.server.topics import PartitionBudget
from tidelog.topic_partition import TopicPartition

Grown = CreatePartitionsResponse.CreatePartitionsTopicResult
Deleted = DeleteRecordsResponse.DeleteRecordsTopicResult
DeletedPartition = Deleted.DeleteRecordsPartitionResult


async def handle_create_partitions(ctx: ApiContext, conn: ConnectionInfo, request: Request) -> Any:
    body = request.body
    results = await ctx.run(create_partitions, ctx.manager, ctx.node_id, body.topics, bool(body.validate_only))
    return CreatePartitionsResponse(throttle_time_ms=0, results=results)


def create_partitions(manager: LogManager, node_id: int, topics: list[Any], validate_only: bool) -> list[Any]:
    """One result per topic entry. Runs in the thread pool."""
    counts = Counter(t.name for t in topics)
    results = []
    budget = PartitionBudget()
    for topic in topics:
        try:
            if counts[topic.name] > 1:
                raise InvalidRequestError(f"Create topics partitions request from client contains a duplicate "
                                          f"topic {topic.name}.")
            _grow(manager, node_id, topic, validate_only, budget)
            results.append(Grown(name=topic.name, error_code=0, error_message=None))
        except Exception as e:  # noqa: BLE001 - every failure becomes this topic's error code
            results.append(Grown(name=topic.name, error_code=error_code(e), error_message=error_message(e)))
    return results


def _grow(manager: LogManager, node_id: int, topic: Any, validate_only: bool, budget: PartitionBudget) -> None:
    if not manager.has_topic(topic.name):
        raise UnknownTopicOrPartitionError(f"The topic '{topic.name}' does not exist.", topic=topic.name)
    current = len(manager.partitions(topic.name))
    budget.spend(topic.count - current, topic.name)
    if topic.assignments is not None:
        if len(topic.assignments) != topic.count - current:
            raise InvalidReplicaAssignmentError(
                f"Increasing the number of partitions by {topic.count - current} but {len(topic.assignments)} "
                "assignments provided.", topic=topic.name)
        if any(list(a.broker_ids) != [node_id] for a in topic.assignments):
            raise InvalidReplicaAssignmentError(f"every new partition must be assigned to broker {node_id} alone "
                                                "(the only broker)", topic=topic.name)
    if validate_only:
        if topic.count == current:
            raise InvalidPartitionsError(f"Topic already has {current} partitions.", topic=topic.name)
        if topic.count < current:
            raise InvalidPartitionsError(f"Topic currently has {current} partitions, which is higher than the "
                                         f"requested {topic.count}.", topic=topic.name)
        return
    manager.create_partitions(topic.name, topic.count)


async def handle_delete_records(ctx: ApiContext, conn: ConnectionInfo, request: Request) -> Any:
    wanted = [(t.name, [(p.partition_index, p.offset) for p in t.partitions]) for t in request.body.topics]
    results = await ctx.run(delete_records, ctx.manager, wanted)
    return DeleteRecordsResponse(throttle_time_ms=0, topics=results)


def delete_records(manager: LogManager, wanted: list[tuple[str, list[tuple[int, int]]]]) -> list[Any]:
    """One result per topic, one partition result per requested partition. Runs in the thread pool.

    :meth:`LogManager.delete_records` checkpoints a moved log start offset before it returns, so
    an answered DeleteRecords survives a crash (tests/reliability/test_crash_serve_promises.py).
    """
    results = []
    for topic, partitions in wanted:
        answers = []
        for partition, offset in partitions:
            try:
                low_watermark = manager.delete_records(TopicPartition(topic, partition), offset)
                answers.append(DeletedPartition(partition_index=partition, low_watermark=low_watermark, error_code=0))
            except Exception as e:  # noqa: BLE001 - every failure becomes this partition's error code
                answers.append(DeletedPartition(partition_index=partition, low_watermark=-1, error_code=error_code(e)))
        results.append(Deleted(name=topic, partitions=answers))
    return results
