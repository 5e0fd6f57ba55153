"""The transaction admin APIs (KIP-664; what Kafka's ``kafka-transactions.sh`` sends), and
WriteTxnMarkers, with which its ``abort`` ends a hanging transaction.

* **ListTransactions** (v0-v2): the transaction coordinator's ids, Dead ones left out, filtered
  by state names (Kafka's names, exact case; a name Kafka does not know is returned in
  ``UnknownStateFilters`` and matches nothing), producer ids, v1's duration (only transactions
  running longer than it, from their start time; -1: any) and v2's transactional id pattern (a
  regular expression the whole id must match, as Kafka's RE2/J ``matches``; null or empty: any;
  one that does not compile answers INVALID_REQUEST). While the coordinator loads:
  COORDINATOR_LOAD_IN_PROGRESS.
* **DescribeTransactions** (v0): per id its state, timeout, start time, producer id and epoch and
  partitions; an empty id answers INVALID_REQUEST, an unknown (or Dead) one
  TRANSACTIONAL_ID_NOT_FOUND, a loading coordinator COORDINATOR_LOAD_IN_PROGRESS.
* **DescribeProducers** (v0): per partition every producer its log knows (id, epoch, last
  sequence, last timestamp, coordinator epoch of its last marker, first offset of its open
  transaction; -1 where none); UNKNOWN_TOPIC_OR_PARTITION for a partition this broker lacks.
* **WriteTxnMarkers** (v1; v0 was removed in Kafka 4.0, v2 is transaction protocol V2's): each
  marker's COMMIT or ABORT is appended to each of its partitions as the partition's leader
  (``LogManager.write_txn_marker``; on a ``__consumer_offsets`` partition the group coordinator
  then completes the producer's pending offsets), one error per partition: UNKNOWN_TOPIC_OR_PARTITION,
  INVALID_PRODUCER_EPOCH (the producer has a newer epoch), TRANSACTION_COORDINATOR_FENCED (an
  older coordinator epoch than the one stored), KAFKA_STORAGE_ERROR. A marker for a producer with
  no open transaction is appended and changes nothing (Kafka's rule). Delayed fetches of the
  partition are woken (its last stable offset moved).

Every handler runs on the event loop; log reads and appends go through the thread pool.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from kafka.protocol.admin import (
    DescribeProducersResponse,
    DescribeTransactionsResponse,
    ListTransactionsResponse,
)
from kafka.protocol.producer import WriteTxnMarkersResponse

from tidelog.manager import LogManager
from tidelog.server.codec import Request
from tidelog.server.context import ApiContext, ConnectionInfo
from tidelog.server.errors import CoordinatorNotAvailableError, ErrorCode, error_code, error_message
from tidelog.server.transactions.coordinator import transaction_coordinator
from tidelog.server.transactions.service import marker_written
from tidelog.topic_partition import TopicPartition

log = logging.getLogger(__name__)
E = ErrorCode
# Kafka's TransactionState names (TransactionState.java), the only ones a state filter matches.
KAFKA_STATE_NAMES = ("Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort", "Dead",
                     "PrepareEpochFence")


def _coordinator(ctx: ApiContext) -> Any:
    """The server's transaction coordinator (:func:`transaction_coordinator`), or None when it runs none."""
    try:
        return transaction_coordinator(ctx)
    except CoordinatorNotAvailableError:
        return None


def _coordinator_error(coordinator: Any) -> ErrorCode:
    if coordinator is None:
        return E.COORDINATOR_NOT_AVAILABLE
    return E.COORDINATOR_LOAD_IN_PROGRESS if coordinator.loading else E.NONE


# --- ListTransactions --------------------------------------------------------------------------

async def handle_list_transactions(ctx: ApiContext, conn: ConnectionInfo, request: Request) -> Any:
    body, version = request.body, request.api_version
    states = list(body.state_filters)
    coordinator = _coordinator(ctx)
    error = _coordinator_error(coordinator)
    pattern = body.transactional_id_pattern if version >= 2 else None
    try:
        matcher = re.compile(pattern) if pattern else None
    except re.error as e:
        log.info("ListTransactions: transactional id pattern %r does not compile: %s", pattern, e)
        error = E.INVALID_REQUEST
    listed: list[Any] = []
    unknown = [s for s in states if s not in KAFKA_STATE_NAMES] if error is E.NONE else []
    if error is E.NONE:
        listed = _listed(ctx, coordinator, states, list(body.producer_id_filters),
                         body.duration_filter if version >= 1 else -1, matcher)
    S = ListTransactionsResponse.TransactionState
    return ListTransactionsResponse(throttle_time_ms=0, error_code=error, unknown_state_filters=unknown,
                                    transaction_states=[S(transactional_id=t.transactional_id, producer_id=t.producer_id,
                                                          transaction_state=t.state) for t in listed])


def _listed(ctx: ApiContext, coordinator: Any, states: list[str], producer_ids: list[int], duration_ms: int,
            matcher: re.Pattern[str] | None) -> list[Any]:
    known = [s for s in states if s in KAFKA_STATE_NAMES]
    if states and not known:
        return []  # only unknown names: nothing matches them (Kafka's rule)
    now = ctx.manager.clock.milliseconds()
    return [t for t in coordinator.list_transactions(known, producer_ids)
            if (not known or t.state in known)
            and (duration_ms < 0 or now - t.start_timestamp > duration_ms)
            and (matcher is None or matcher.fullmatch(t.transactional_id))]


# --- DescribeTransactions ----------------------------------------------------------------------

async def handle_describe_transactions(ctx: ApiContext, conn: ConnectionInfo, request: Request) -> Any:
    coordinator = _coordinator(ctx)
    found = _coordinator_error(coordinator)
    return DescribeTransactionsResponse(throttle_time_ms=0, transaction_states=[
        _described(coordinator, found, transactional_id) for transactional_id in request.body.transactional_ids])


def _described(coordinator: Any, error: ErrorCode, transactional_id: str) -> Any:
    S = DescribeTransactionsResponse.TransactionState
    if error is E.NONE and not transactional_id:
        error = E.INVALID_REQUEST
    described = coordinator.describe(transactional_id) if error is E.NONE else None
    if error is E.NONE and described is None:
        error = E.TRANSACTIONAL_ID_NOT_FOUND
    if described is None:
        return S(error_code=error, transactional_id=transactional_id, transaction_state="", transaction_timeout_ms=0,
                 transaction_start_time_ms=0, producer_id=0, producer_epoch=0, topics=[])
    by_topic: dict[str, list[int]] = {}
    for tp in described.partitions:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return S(error_code=E.NONE, transactional_id=transactional_id, transaction_state=described.state,
             transaction_timeout_ms=described.timeout_ms, transaction_start_time_ms=described.start_timestamp,
             producer_id=described.producer_id, producer_epoch=described.producer_epoch,
             topics=[S.TopicData(topic=topic, partitions=partitions) for topic, partitions in by_topic.items()])


# --- DescribeProducers -------------------------------------------------------------------------

async def handle_describe_producers(ctx: ApiContext, conn: ConnectionInfo, request: Request) -> Any:
    wanted = [(t.name, list(t.partition_indexes)) for t in request.body.topics]
    return DescribeProducersResponse(throttle_time_ms=0, topics=await ctx.run(_producers, ctx.manager, wanted))


def _producers(manager: LogManager, wanted: list[tuple[str, list[int]]]) -> list[Any]:
    """Response topics of DescribeProducers (file work: each log's producer state under its lock)."""
    T = DescribeProducersResponse.TopicResponse
    P = T.PartitionResponse
    topics = []
    for topic, partitions in wanted:
        answered = []
        for partition in partitions:
            try:
                states = manager.producer_states(TopicPartition(topic, partition))
            except Exception as e:  # noqa: BLE001 - the partition's error goes in its answer
                answered.append(P(partition_index=partition, error_code=error_code(e), error_message=error_message(e),
                                  active_producers=[]))
                continue
            answered.append(P(partition_index=partition, error_code=0, error_message=None, active_producers=[
                P.ProducerState(producer_id=s.producer_id, producer_epoch=s.producer_epoch,
                                last_sequence=s.last_sequence, last_timestamp=s.last_timestamp,
                                coordinator_epoch=s.coordinator_epoch,
                                current_txn_start_offset=s.current_txn_start_offset) for s in states]))
        topics.append(T(name=topic, partitions=answered))
    return topics


# --- WriteTxnMarkers ---------------------------------------------------------------------------

async def handle_write_txn_markers(ctx: ApiContext, conn: ConnectionInfo, request: Request) -> Any:
    R = WriteTxnMarkersResponse.WritableTxnMarkerResult
    results = []
    for marker in request.body.markers:
        topics = []
        for topic in marker.topics:
            partitions = [await _write_marker(ctx, marker, TopicPartition(topic.name, p))
                          for p in topic.partition_indexes]
            topics.append(R.WritableTxnMarkerTopicResult(name=topic.name, partitions=partitions))
        results.append(R(producer_id=marker.producer_id, topics=topics))
    return WriteTxnMarkersResponse(markers=results)


async def _write_marker(ctx: ApiContext, marker: Any, tp: TopicPartition) -> Any:
    """Append one marker to ``tp``; its partition result."""
    P = WriteTxnMarkersResponse.WritableTxnMarkerResult.WritableTxnMarkerTopicResult.WritableTxnMarkerPartitionResult
    commit = bool(marker.transaction_result)
    try:
        await ctx.run(ctx.manager.write_txn_marker, tp, marker.producer_id, marker.producer_epoch,
                      marker.coordinator_epoch, commit)
    except Exception as e:  # noqa: BLE001 - the partition's error goes in its answer
        log.info("WriteTxnMarkers: no %s marker of producer %d on %s: %s", "COMMIT" if commit else "ABORT",
                 marker.producer_id, tp, e)
        return P(partition_index=tp.partition, error_code=error_code(e))
    marker_written(ctx, getattr(ctx, "groups", None), tp, marker.producer_id, marker.producer_epoch, commit)
    return P(partition_index=tp.partition, error_code=E.NONE)
