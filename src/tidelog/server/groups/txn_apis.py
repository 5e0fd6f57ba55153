"""TxnOffsetCommit (v0-v4): a transactional producer's consumer offsets, held until its transaction ends.

What Kafka 4.3's broker does, in order (``KafkaApis.handleTxnOffsetCommitRequest``, then the group
coordinator's ``commitTransactionalOffsets``):

1. Partitions of topics this broker does not have answer UNKNOWN_TOPIC_OR_PARTITION (partition by
   partition); the others go on.
2. An empty group id answers INVALID_GROUP_ID.
3. Verification (``transaction.partition.verification.enable``, Kafka's default true): the group's
   ``__consumer_offsets`` partition must be in the producer's ongoing transaction (AddOffsetsToTxn
   put it there), asked of the transaction coordinator. Not in it: INVALID_TXN_STATE (v0-v3) or
   TRANSACTION_ABORTABLE (v4+); a stale epoch: INVALID_PRODUCER_EPOCH (Kafka's
   AddPartitionsToTxnManager turns PRODUCER_FENCED into it); a coordinator that is loading or
   between states answers as it does (COORDINATOR_LOAD_IN_PROGRESS, CONCURRENT_TRANSACTIONS:
   clients retry).
4. The group checks (``validateTransactionalOffsetCommit``): an unknown group is created when the
   generation is -1, else ILLEGAL_GENERATION; a member id, instance id or generation given must
   match (UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID, ILLEGAL_GENERATION); metadata over 4096 bytes
   answers OFFSET_METADATA_TOO_LARGE for its partition.
5. The offsets are appended to the group's partition in a transactional batch of the producer
   (the log refuses a stale epoch: INVALID_PRODUCER_EPOCH) and held pending until the marker
   (:meth:`~.service.GroupService.complete_transaction`).

Requests below v2 get COORDINATOR_NOT_AVAILABLE instead of COORDINATOR_LOAD_IN_PROGRESS (old
clients crash on the latter, as Kafka's KafkaApis notes). Nothing is written when any check fails.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from kafka.protocol.producer import TxnOffsetCommitResponse

from tidelog.manager import LogManager
from tidelog.server.codec import Request
from tidelog.server.context import ApiContext, ConnectionInfo
from tidelog.server.errors import CoordinatorNotAvailableError, ErrorCode
from tidelog.server.groups.messages import TxnCommitRequest
from tidelog.server.groups.records import OFFSETS_TOPIC, OffsetCommitValue
from tidelog.server.groups.service import group_service
from tidelog.server.transactions.coordinator import transaction_coordinator
from tidelog.topic_partition import TopicPartition

log = logging.getLogger(__name__)
E = ErrorCode
TP = tuple[str, int]
FIRST_ABORTABLE_VERSION = 4  # TxnOffsetCommit v4+ clients handle TRANSACTION_ABORTABLE (KIP-890)
_VERIFY_KEY = "transaction.partition.verification.enable"


async def handle_txn_offset_commit(ctx: ApiContext, conn: ConnectionInfo, request: Request) -> Any:
    body, version = request.body, request.api_version
    wanted = [(t.name, p.partition_index) for t in body.topics for p in t.partitions]
    known = await ctx.run(_existing, ctx.manager, wanted)
    results: dict[TP, ErrorCode] = {tp: E.UNKNOWN_TOPIC_OR_PARTITION for tp in wanted if tp not in known}
    offsets = {(t.name, p.partition_index): OffsetCommitValue(
        p.committed_offset, p.committed_metadata or "", -1, p.committed_leader_epoch if version >= 2 else -1)
        for t in body.topics for p in t.partitions if (t.name, p.partition_index) in known}
    if offsets:
        results.update(await _commit(ctx, body, version, offsets))
    if version < 2:
        results = {tp: E.COORDINATOR_NOT_AVAILABLE if e is E.COORDINATOR_LOAD_IN_PROGRESS else e
                   for tp, e in results.items()}
    return _response(body, results)


async def _commit(ctx: ApiContext, body: Any, version: int, offsets: dict[TP, OffsetCommitValue]) -> dict[TP, ErrorCode]:
    if not body.group_id:
        return {tp: E.INVALID_GROUP_ID for tp in offsets}
    service = group_service(ctx)
    error = await _verify(ctx, body, version, await ctx.run(service.topic.partition_for, body.group_id))
    if error is not E.NONE:
        return {tp: error for tp in offsets}
    commit = TxnCommitRequest(body.group_id, body.producer_id, body.producer_epoch,
                              body.generation_id if version >= 3 else -1, body.member_id if version >= 3 else "",
                              body.group_instance_id if version >= 3 else None, offsets)
    future: asyncio.Future[dict[TP, ErrorCode]] = asyncio.get_running_loop().create_future()
    service.coordinator.commit_transactional_offsets(commit, _resolver(future))
    return await future


def _resolver(future: asyncio.Future[dict[TP, ErrorCode]]) -> Callable[[dict[TP, ErrorCode]], None]:
    def respond(results: dict[TP, ErrorCode]) -> None:
        if not future.done():
            future.set_result(results)
    return respond


async def _verify(ctx: ApiContext, body: Any, version: int, partition: int) -> ErrorCode:
    """Whether the group's partition is in the producer's ongoing transaction (step 3 of the module doc)."""
    if not ctx.manager.broker.get(_VERIFY_KEY):
        return E.NONE
    try:
        coordinator = transaction_coordinator(ctx)
    except CoordinatorNotAvailableError as e:
        log.warning("TxnOffsetCommit of group %s: %s", body.group_id, e)
        return E.COORDINATOR_NOT_AVAILABLE
    error = ErrorCode(coordinator.verify_partition(body.producer_id, body.producer_epoch,
                                                   TopicPartition(OFFSETS_TOPIC, partition)))
    if error in (E.PRODUCER_FENCED, E.INVALID_PRODUCER_EPOCH):
        return E.INVALID_PRODUCER_EPOCH
    if error in (E.INVALID_TXN_STATE, E.TRANSACTION_ABORTABLE):
        return E.TRANSACTION_ABORTABLE if version >= FIRST_ABORTABLE_VERSION else E.INVALID_TXN_STATE
    return error


def _existing(manager: LogManager, wanted: list[TP]) -> set[TP]:
    """The partitions of ``wanted`` this broker has."""
    counts = {topic: len(manager.partitions(topic)) for topic in {t for t, _ in wanted} if manager.has_topic(topic)}
    return {(topic, p) for topic, p in wanted if 0 <= p < counts.get(topic, 0)}


def _response(body: Any, results: dict[TP, ErrorCode]) -> Any:
    """One entry per requested partition, in request order."""
    T = TxnOffsetCommitResponse.TxnOffsetCommitResponseTopic
    P = T.TxnOffsetCommitResponsePartition
    return TxnOffsetCommitResponse(throttle_time_ms=0, topics=[
        T(name=t.name, partitions=[P(partition_index=p.partition_index, error_code=results[(t.name, p.partition_index)])
                                   for p in t.partitions]) for t in body.topics])
