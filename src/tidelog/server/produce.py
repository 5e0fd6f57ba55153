"""Produce (v3+): each partition's RecordBatch v2 bytes go to the log's leader append path, as
``tidelog produce`` appends them (:meth:`LogManager.append`: validation, offsets assigned, the high
watermark moved to the log end). acks 1 and -1 are answered alike once the append returns (this
broker is the only replica of every partition, its own ISR); acks 0 gets no response, and a
failed partition then closes the connection, as Kafka does, so the producer notices.

Per-partition errors, as Kafka's: UNKNOWN_TOPIC_OR_PARTITION, INVALID_RECORD (not exactly one
magic-2 batch; a record rule broken, with the failing records' indexes from v8), CORRUPT_MESSAGE
(size or CRC), MESSAGE_TOO_LARGE, RECORD_LIST_TOO_LARGE, KAFKA_STORAGE_ERROR, NOT_ENOUGH_REPLICAS
(acks -1 with ``min.insync.replicas`` above 1: the ISR is this broker alone); INVALID_REQUIRED_ACKS
for acks outside {-1, 0, 1}; INVALID_TOPIC_EXCEPTION for an internal topic (:mod:`.internal_topics`).

A compressed batch is decompressed into at most what ``max.message.bytes`` allows it uncompressed
(``storage.validator``); past that it gets MESSAGE_TOO_LARGE, on which a Java producer splits the
batch and retries. Before a request's batches are validated, it reserves that allowance from the
broker-wide ``tidelog.produce.decompression.memory.bytes`` budget (:func:`decompression_reservation`),
so concurrent produces of compressed batches hold at most the budget decompressed (or one batch's
allowance when a topic allows more), however many connections send them.

Idempotent producers (producer ids from InitProducerId, :mod:`.init_producer_id`) are checked by
the log's producer state: a retried batch gets NONE and its original base offset (nothing is
written twice), an older epoch INVALID_PRODUCER_EPOCH, a sequence gap OUT_OF_ORDER_SEQUENCE_NUMBER.
Transactional batches (a request with a transactional id) are verified with the transaction
coordinator before the append (Kafka's ``transaction.partition.verification.enable``, KIP-890 part 1):
a partition not in the producer's ongoing transaction gets INVALID_TXN_STATE (TRANSACTION_ABORTABLE
from v11, as Kafka answers), a stale epoch INVALID_PRODUCER_EPOCH, and while the coordinator cannot
tell (loading, a transition in flight) NOT_ENOUGH_REPLICAS, which producers retry. A transactional
batch in a request without a transactional id gets TRANSACTIONAL_ID_AUTHORIZATION_FAILED.
Non-transactional requests pay nothing for this (the check is behind the request's transactional id).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tidelog.errors import InvalidRecordError, TidelogError
from tidelog.manager import LogManager
from tidelog.manager.internal_topics import check_appendable
from tidelog.records.layout import (
    ATTRIBUTES,
    ATTRIBUTES_OFFSET,
    COMPRESSION_CODEC_MASK,
    LOG_OVERHEAD,
    PREFIX,
    PRODUCER_FIELDS,
    PRODUCER_ID_OFFSET,
    TRANSACTIONAL_FLAG_MASK,
)
from tidelog.server.codec import Request
from tidelog.server.context import ApiContext, ConnectionInfo
from tidelog.server.errors import (
    ErrorCode,
    NotEnoughReplicasError,
    error_code,
    error_message,
    record_errors,
)
from tidelog.server.metrics.broker_metrics import BrokerTopicMetrics, RequestMetrics
from tidelog.server.wire.produce_response import PartitionProduceResponse, encode_produce_response
from tidelog.storage.config import LogConfig
from tidelog.storage.validator import decompressed_records_limit
from tidelog.topic_partition import TopicPartition

_ATTRIBUTES = ATTRIBUTES  # at ATTRIBUTES_OFFSET of a v2 batch


@dataclass(slots=True)  # not frozen: a frozen dataclass's __init__ costs ~6x (object.__setattr__ per field)
class PartitionResult:
    partition: int
    error: ErrorCode = ErrorCode.NONE
    base_offset: int = -1
    log_append_time: int = -1
    log_start_offset: int = -1
    message: str | None = None
    record_errors: tuple[tuple[int, str | None], ...] = ()
    size: int = 0  # bytes of the partition's records in the request (BytesIn, BytesRejected)
    appended_records: int = 0  # records appended (MessagesIn)


class ProduceOutcome:
    """What a Produce request did: per-topic results, and the partitions appended to."""

    def __init__(self) -> None:
        self.topics: dict[str, list[PartitionResult]] = {}
        self.appended: list[TopicPartition] = []

    @property
    def failed(self) -> bool:
        return any(r.error != ErrorCode.NONE for results in self.topics.values() for r in results)


async def handle_produce(ctx: ApiContext, conn: ConnectionInfo, request: Request) -> Any:
    """The response, or None for acks=0 (see the module doc for when the connection closes)."""
    (answer,) = await handle_produces(ctx, [request])
    if isinstance(answer, Exception):
        raise answer
    return answer


async def handle_produces(ctx: ApiContext, requests: list[Request]) -> list[Any]:
    """Produce requests pipelined on one connection, appended in request order in ONE thread-pool
    call (one hop for all). Each element of the answer is what :func:`handle_produce` returns for
    that request, in order; the answer may end with the exception one raised
    (:class:`AcksZeroFailure`, or a handler bug), and then holds nothing after it: the connection
    closes there, so nothing after it is appended (Kafka mutes a connection until its request is
    done). Event loop."""
    works: list[ProduceWork] = []
    refused: Exception | None = None
    for request in requests:
        try:
            works.append(begin_produce(ctx, request))
        except Exception as e:  # noqa: BLE001 - the connection's handler logs it and closes
            refused = e
            break
    # the requests' batches are validated one after another: the largest allowance covers them all
    done, failure = 0, None
    if works:
        async with ctx.decompression.reserve(max(w.reservation for w in works)):
            done, failure = await ctx.run(append_requests, ctx.manager, works)
    answers: list[Any] = []
    for work in works[:done]:
        try:
            answers.append(end_produce(ctx, work))
        except Exception as e:  # noqa: BLE001 - AcksZeroFailure, or a bug: the connection closes here
            answers.append(e)
            return answers
    if failure is not None or refused is not None:
        answers.append(failure if failure is not None else refused)
    return answers


@dataclass(slots=True)
class ProduceWork:
    """One Produce request between its phases: checked on the event loop (:func:`begin_produce`),
    appended in the thread pool (:func:`append_requests`), answered on the event loop
    (:func:`end_produce`)."""

    request: Request
    body: Any
    refused: dict[TopicPartition, ErrorCode] | None = None  # by transaction verification
    verified: dict[TopicPartition, dict[int, int]] | None = None  # its tokens (None: verification off)
    reservation: int = 0  # decompression budget its validation needs
    outcome: ProduceOutcome | None = None  # set before the pool when nothing is to be appended


def begin_produce(ctx: ApiContext, request: Request) -> ProduceWork:
    """The event-loop phase before the append: acks checked, transactional batches verified with
    the coordinator, the decompression allowance computed. O(partitions), no file work."""
    body = request.body
    if body.acks not in (-1, 0, 1):
        return ProduceWork(request, body, outcome=_refuse_all(body, ErrorCode.INVALID_REQUIRED_ACKS))
    refused, verified = (verify_transactional(ctx, body, request.api_version) if body.transactional_id is not None
                         else (None, None))
    return ProduceWork(request, body, refused, verified,
                       decompression_reservation(ctx.manager, body.topic_data, ctx.decompression.capacity))


def append_requests(manager: LogManager, works: list[ProduceWork]) -> tuple[int, Exception | None]:
    """The thread-pool phase of pipelined requests: each one's :func:`append_all` in order. Returns
    how many were done and, when one raised, its exception (that one is not done). Stops after an
    acks=0 request that failed (the connection closes on it). Runs in the thread pool."""
    for done, work in enumerate(works):
        if work.outcome is None:
            body = work.body
            try:
                work.outcome = append_all(manager, body.topic_data, body.acks, work.refused,
                                          body.transactional_id is not None, work.verified)
            except Exception as e:  # noqa: BLE001 - a handler bug: answered as handle_produce's would be
                return done, e
            if body.acks == 0 and work.outcome.failed:
                return done + 1, None
    return len(works), None


def end_produce(ctx: ApiContext, work: ProduceWork) -> Any:
    """The event-loop phase after the append: metrics counted, delayed fetches woken, the response
    built; None for acks=0; raises :class:`AcksZeroFailure` for a failed acks=0 request."""
    body, outcome = work.body, work.outcome
    assert outcome is not None
    if body.acks in (-1, 0, 1):
        _count_topics(ctx.metrics.topics, outcome, work.refused)
    if outcome.appended:
        ctx.arrivals.notify(outcome.appended)
    if body.acks == 0:
        if outcome.failed:
            _count_errors(ctx.metrics.requests, outcome)  # Kafka counts a closing response's errors too
            raise AcksZeroFailure(outcome)
        return None  # no response: no errors counted (Kafka's NoOpResponse)
    _count_errors(ctx.metrics.requests, outcome)
    return encode_produce_response(work.request.api_version, work.request.correlation_id,
                                   [(n, _partition_responses(rs)) for n, rs in outcome.topics.items()])


def _count_topics(topics: BrokerTopicMetrics, outcome: ProduceOutcome,
                  refused: dict[TopicPartition, ErrorCode] | None = None) -> None:
    """BrokerTopicMetrics of the partitions that reached the append (not the ``refused`` ones, as
    Kafka's ReplicaManager marks none for a failed verification). Event loop; O(partitions)."""
    for name, results in outcome.topics.items():
        for r in results:
            if not refused or TopicPartition(name, r.partition) not in refused:
                topics.on_produce(name, r.error, r.size, r.appended_records)


def _count_errors(requests: RequestMetrics, outcome: ProduceOutcome) -> None:
    """ErrorsPerSec of the response: one per partition's error code (NONE included)."""
    counts: dict[int, int] = {}
    for results in outcome.topics.values():
        for r in results:
            counts[r.error] = counts.get(r.error, 0) + 1
    requests.on_error_counts("Produce", counts)


def decompression_reservation(manager: LogManager, topic_data: list[Any], capacity: int) -> int:
    """What validating the request's compressed batches may hold decompressed at once: the largest
    of their topics' allowances (they are validated one after another), capped at ``capacity``
    so that any request fits the budget; 0 when nothing is compressed."""
    need = 0
    for topic in topic_data:
        for part in topic.partition_data:
            if _attributes(part.records) & COMPRESSION_CODEC_MASK:
                need = max(need, _decompressed_allowance(manager, TopicPartition(topic.name, part.index)))
    return min(need, capacity) if capacity > 0 else need


def _decompressed_allowance(manager: LogManager, tp: TopicPartition) -> int:
    try:
        config = manager.partition_config(tp)
    except TidelogError:  # no live log: the append answers why, decompressing nothing
        return 0
    return decompressed_records_limit(config.max_message_bytes)


class AcksZeroFailure(Exception):
    """An acks=0 produce that failed for some partition: the connection is closed (Kafka's rule)."""

    def __init__(self, outcome: ProduceOutcome) -> None:
        super().__init__("acks=0 produce failed; closing the connection")
        self.outcome = outcome


def append_all(manager: LogManager, topic_data: list[Any], acks: int,
               refused: dict[TopicPartition, ErrorCode] | None = None, transactional: bool = False,
               verified: dict[TopicPartition, dict[int, int]] | None = None) -> ProduceOutcome:
    """Append every partition's batch in request order, except the ``refused`` ones, which get
    their error (``transactional``: the request has a transactional id; ``verified``: the tokens
    of its verification, checked by the append). Runs in the thread pool."""
    outcome = ProduceOutcome()
    for topic in topic_data:
        results = outcome.topics.setdefault(topic.name, [])
        for part in topic.partition_data:
            tp = TopicPartition(topic.name, part.index)
            if refused and tp in refused:
                results.append(PartitionResult(tp.partition, refused[tp], size=len(part.records or b""),
                                               message=_REFUSALS.get(refused[tp])))
                continue
            result = _append_one(manager, tp, part.records, acks, transactional,
                                 None if verified is None else verified.get(tp, {}))
            if result.error == ErrorCode.NONE and result.base_offset >= 0:
                outcome.appended.append(tp)
            results.append(result)
    return outcome


def _append_one(manager: LogManager, tp: TopicPartition, records: bytes | None, acks: int,
                transactional: bool = False, verified: dict[int, int] | None = None) -> PartitionResult:
    size = len(records) if records else 0
    try:
        check_appendable(tp.topic)
        check_one_v2_batch(records, tp, transactional)
        check = _min_insync_replicas_check(tp) if acks == -1 else None
        info = manager.append(tp, records or b"", check=check, verified=verified)
    except Exception as e:  # noqa: BLE001 - every failure becomes this partition's error code
        return PartitionResult(tp.partition, error_code(e), message=error_message(e),
                               record_errors=tuple(record_errors(e)), size=size)
    return PartitionResult(tp.partition, ErrorCode.NONE, info.first_offset, info.log_append_time, info.log_start_offset,
                           size=size, appended_records=info.record_count if info.appended else 0)


def _min_insync_replicas_check(tp: TopicPartition) -> Callable[[LogConfig], None]:
    """Kafka's leader check for acks=-1, run by the append on the config of the log it found: the
    ISR (this broker alone) must reach ``min.insync.replicas``."""
    def check(config: LogConfig) -> None:
        if config.min_insync_replicas > 1:
            raise NotEnoughReplicasError(f"The size of the current ISR Set(1) is insufficient to satisfy the min.isr "
                                         f"requirement of {config.min_insync_replicas} for partition {tp}",
                                         topic_partition=str(tp))
    return check


def check_one_v2_batch(records: bytes | None, tp: TopicPartition, transactional: bool = False) -> None:
    """Kafka's rule for Produce v3+: exactly one record batch, of magic 2 (INVALID_RECORD otherwise);
    a transactional batch only in a request with a transactional id (``transactional``)."""
    if not records or len(records) < PREFIX.size:
        raise InvalidRecordError("Produce requests with version 3+ must have exactly one record batch per partition",
                                 topic_partition=str(tp))
    _, length, _, magic = PREFIX.unpack_from(records)  # base offset, batch length, leader epoch, magic
    if magic != 2:
        raise InvalidRecordError("Produce requests with version 3+ are only allowed to contain record batches "
                                 f"with magic version 2 (found {magic})", topic_partition=str(tp))
    if LOG_OVERHEAD + length != len(records):  # trailing bytes, or a batch cut short
        raise InvalidRecordError("Produce requests with version 3+ must have exactly one record batch per partition",
                                 topic_partition=str(tp))
    if not transactional and _attributes(records) & TRANSACTIONAL_FLAG_MASK:
        raise TransactionalIdRequiredError("a transactional batch needs the request's transactional id",
                                           topic_partition=str(tp))


class TransactionalIdRequiredError(TidelogError):
    """A transactional batch in a Produce request without a transactional id (Kafka answers
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED: the id is what authorizes transactional writes)."""

    error_code = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED


_REFUSALS = {
    ErrorCode.INVALID_TXN_STATE: "the partition is not in the producer's ongoing transaction (AddPartitionsToTxn first)",
    ErrorCode.TRANSACTION_ABORTABLE: "the partition is not in the producer's ongoing transaction (AddPartitionsToTxn first)",
    ErrorCode.INVALID_PRODUCER_EPOCH: "the producer was fenced: a newer epoch holds its transactional id",
    ErrorCode.INVALID_PRODUCER_ID_MAPPING: "no transactional id holds this producer id",
    ErrorCode.NOT_ENOUGH_REPLICAS: "the transaction coordinator cannot verify the transaction yet; retry",
}
_COORDINATOR_BUSY = frozenset({ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                               ErrorCode.NOT_COORDINATOR, ErrorCode.CONCURRENT_TRANSACTIONS})
ABORTABLE_SINCE = 11  # Produce version from which a partition outside the transaction is TRANSACTION_ABORTABLE


def verify_transactional(ctx: ApiContext, body: Any, version: int) -> tuple[
        dict[TopicPartition, ErrorCode] | None, dict[TopicPartition, dict[int, int]] | None]:
    """The partitions whose transactional batch the coordinator refuses, with the code Produce
    answers (Kafka's mapping of verification errors), and for those it accepts the token the
    append checks (:mod:`tidelog.storage.txn_verification`: no marker for the producer since);
    ``(None, None)`` when verification is off. Event loop; O(partitions), reads each batch's
    header and one dict entry of its partition's producer state."""
    coordinator = getattr(ctx, "transactions", None)
    if coordinator is None or not coordinator.config.verification:
        return None, None
    refused: dict[TopicPartition, ErrorCode] = {}
    verified: dict[TopicPartition, dict[int, int]] = {}
    for topic in body.topic_data:
        for part in topic.partition_data:
            records = part.records
            if not records or len(records) < PRODUCER_ID_OFFSET + PRODUCER_FIELDS.size \
                    or not _attributes(records) & TRANSACTIONAL_FLAG_MASK:
                continue  # not transactional, or too short: the append answers
            pid, epoch, _ = PRODUCER_FIELDS.unpack_from(records, PRODUCER_ID_OFFSET)
            tp = TopicPartition(topic.name, part.index)
            code = coordinator.verify_partition(pid, epoch, tp)
            if code is not ErrorCode.NONE:
                refused[tp] = _produce_code(code, version)
                continue
            try:
                verified[tp] = {pid: ctx.manager.verification_token(tp, pid)}
            except TidelogError:
                continue  # no live log: the append answers why
    return refused, verified


def _produce_code(code: ErrorCode, version: int) -> ErrorCode:
    if code is ErrorCode.PRODUCER_FENCED:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    if code in _COORDINATOR_BUSY:
        return ErrorCode.NOT_ENOUGH_REPLICAS
    if code is ErrorCode.INVALID_TXN_STATE and version >= ABORTABLE_SINCE:
        return ErrorCode.TRANSACTION_ABORTABLE
    return code


def _attributes(records: bytes | None) -> int:
    """The attributes of the v2 batch ``records`` starts with; 0 when it is too short to hold them
    (the append refuses it)."""
    if not records or len(records) < ATTRIBUTES_OFFSET + _ATTRIBUTES.size:
        return 0
    return _ATTRIBUTES.unpack_from(records, ATTRIBUTES_OFFSET)[0]


def _refuse_all(body: Any, code: ErrorCode, message: str | None = None) -> ProduceOutcome:
    outcome = ProduceOutcome()
    for topic in body.topic_data:
        outcome.topics.setdefault(topic.name, []).extend(PartitionResult(p.index, code, message=message)
                                                         for p in topic.partition_data)
    return outcome


def _partition_responses(results: list[PartitionResult]) -> list[PartitionProduceResponse]:
    return [PartitionProduceResponse(r.partition, r.error, r.base_offset, r.log_append_time, r.log_start_offset,
                                     r.record_errors, r.message if r.error != ErrorCode.NONE else None)
            for r in results]
