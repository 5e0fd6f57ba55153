"""The transaction coordinator's APIs: requests in, :class:`~.coordinator.TransactionCoordinator`
calls, responses out.

AddPartitionsToTxn v0-v3 (the client form; v4+ is the broker-to-broker batched form of
transaction protocol V2, not served): partitions of topics this broker does not have get
UNKNOWN_TOPIC_OR_PARTITION and the others OPERATION_NOT_ATTEMPTED, nothing added (Kafka's answer);
otherwise every partition gets the coordinator's answer. AddOffsetsToTxn v0-v3 (v4 is V2 only),
EndTxn v0-v4 (v5 is V2 only). PRODUCER_FENCED is answered as INVALID_PRODUCER_EPOCH to v0-v1 of
the three (Kafka's KafkaApis does the same: those clients do not know the newer code).
"""

from __future__ import annotations

from typing import Any

from kafka.protocol.producer import AddOffsetsToTxnResponse, AddPartitionsToTxnResponse, EndTxnResponse

from tidelog.manager import LogManager
from tidelog.server.codec import Request
from tidelog.server.context import ApiContext, ConnectionInfo
from tidelog.server.errors import ErrorCode
from tidelog.server.transactions.coordinator import transaction_coordinator
from tidelog.topic_partition import TopicPartition

E = ErrorCode
FENCED_CODE_SINCE = 2  # request version from which PRODUCER_FENCED is sent as itself


def fenced_for(error: ErrorCode, version: int, since: int = FENCED_CODE_SINCE) -> ErrorCode:
    """PRODUCER_FENCED as INVALID_PRODUCER_EPOCH below request version ``since``."""
    if error is E.PRODUCER_FENCED and version < since:
        return E.INVALID_PRODUCER_EPOCH
    return error


def _unknown(manager: LogManager, partitions: list[TopicPartition]) -> set[TopicPartition]:
    """The partitions this broker does not have."""
    counts: dict[str, int] = {}
    for topic in {tp.topic for tp in partitions}:
        counts[topic] = len(manager.partitions(topic)) if manager.has_topic(topic) else 0
    return {tp for tp in partitions if not 0 <= tp.partition < counts[tp.topic]}


async def handle_add_partitions_to_txn(ctx: ApiContext, conn: ConnectionInfo, request: Request) -> Any:
    body, version = request.body, request.api_version
    wanted = [TopicPartition(t.name or "", p) for t in body.v3_and_below_topics or () for p in t.partitions or ()]
    unknown = await ctx.run(_unknown, ctx.manager, wanted)
    errors: dict[TopicPartition, ErrorCode]
    if not wanted:
        errors = {}  # nothing to add: nothing changes
    elif unknown:
        errors = {tp: E.UNKNOWN_TOPIC_OR_PARTITION if tp in unknown else E.OPERATION_NOT_ATTEMPTED for tp in wanted}
    else:
        error = await transaction_coordinator(ctx).add_partitions(
            body.v3_and_below_transactional_id, body.v3_and_below_producer_id, body.v3_and_below_producer_epoch,
            wanted)
        errors = dict.fromkeys(wanted, fenced_for(error, version))
    by_topic: dict[str, list[Any]] = {}
    R = AddPartitionsToTxnResponse.AddPartitionsToTxnTopicResult
    P = R.AddPartitionsToTxnPartitionResult
    for tp, error in errors.items():
        by_topic.setdefault(tp.topic, []).append(P(partition_index=tp.partition, partition_error_code=error))
    return AddPartitionsToTxnResponse(throttle_time_ms=0, results_by_topic_v3_and_below=[
        R(name=name, results_by_partition=results) for name, results in by_topic.items()])


async def handle_add_offsets_to_txn(ctx: ApiContext, conn: ConnectionInfo, request: Request) -> Any:
    body = request.body
    error = await transaction_coordinator(ctx).add_offsets(body.transactional_id, body.producer_id,
                                                           body.producer_epoch, body.group_id)
    return AddOffsetsToTxnResponse(throttle_time_ms=0, error_code=fenced_for(error, request.api_version))


async def handle_end_txn(ctx: ApiContext, conn: ConnectionInfo, request: Request) -> Any:
    body = request.body
    error = await transaction_coordinator(ctx).end_txn(body.transactional_id, body.producer_id,
                                                       body.producer_epoch, bool(body.committed))
    return EndTxnResponse(throttle_time_ms=0, error_code=fenced_for(error, request.api_version))
