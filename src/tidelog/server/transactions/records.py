"""The key/value records of ``__transaction_state``, in Kafka's own format (Kafka's
``transaction-coordinator/src/main/resources/common/message/TransactionLogKey.json`` /
``TransactionLogValue.json``, written by ``TransactionLog``), so Kafka's ``DumpLogSegments
--transaction-log-decoder`` decodes them and a Kafka broker adopting the dir loads the same
transactions.

TransactionLogKey (record type 0, key version 0)::

    int16  type             0 (Kafka's CoordinatorRecordType.TRANSACTION_LOG)
    string transactionalId  int16 length + UTF-8

TransactionLogValue, version 1 (what a Kafka 4.x broker writes at ``transaction.version`` >= 1;
flexible: compact strings and arrays, unsigned-varint length + 1, 0 = null; tagged fields)::

    int16  version                        1
    int64  producerId
    int16  producerEpoch
    int32  transactionTimeoutMs
    int8   transactionStatus              the state id (TransactionState: 0 Empty .. 7 PrepareEpochFence)
    array  transactionPartitions          nullable: null for Empty, empty for Complete*
        string topic
        array  int32 partitionIds
        tagged fields                     none
    int64  transactionLastUpdateTimestampMs
    int64  transactionStartTimestampMs    -1: no transaction started
    tagged fields, each written only when it is not its default:
        tag 0  int64 previousProducerId   default -1 (Kafka writes the producer id before the change)
        tag 1  int64 nextProducerId       default -1
        tag 2  int16 clientTransactionVersion  default 0
        tag 3  int16 nextProducerEpoch    default -1

Version 0 (classic encoding: int16 strings, int32 array counts, -1 = null; no tagged fields) is
read too: a Kafka broker at ``transaction.version`` 0 writes it. A tombstone (null value) deletes
the id (its expiration). Every record is one uncompressed batch appended with
``AppendOrigin.COORDINATOR``.

A transactional id's records go to partition ``abs(id.hashCode()) % partitions`` of
``__transaction_state``, Java's String hash (:func:`txn_partition_for`).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass, field

from tidelog.errors import CorruptRecordError, InvalidRecordError
from tidelog.records.fields import FieldReader
from tidelog.records.varint import encode_unsigned_varint
from tidelog.server.groups.records import offsets_partition_for
from tidelog.topic_partition import TopicPartition

TXN_LOG_KEY_TYPE = 0
VALUE_VERSION = 1  # flexible, Kafka's TransactionVersion >= 1
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_DECODE_ERRORS = (struct.error, UnicodeDecodeError, IndexError, ValueError, InvalidRecordError)
_TAG_PREVIOUS_PID, _TAG_NEXT_PID, _TAG_CLIENT_TV, _TAG_NEXT_EPOCH = 0, 1, 2, 3


@dataclass(frozen=True, slots=True)
class TxnLogValue:
    """One transactional id's state as ``__transaction_state`` stores it. ``partitions`` None is
    Kafka's null array (an Empty record)."""

    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state_id: int
    partitions: frozenset[TopicPartition] | None
    last_update_timestamp: int
    start_timestamp: int
    previous_producer_id: int = NO_PRODUCER_ID
    next_producer_id: int = NO_PRODUCER_ID
    client_transaction_version: int = 0
    next_producer_epoch: int = NO_PRODUCER_EPOCH
    version: int = field(default=VALUE_VERSION, compare=False)


def txn_partition_for(transactional_id: str, partitions: int) -> int:
    """Kafka's ``Utils.abs(transactionalId.hashCode()) % partitions`` (MIN_VALUE maps to 0)."""
    return offsets_partition_for(transactional_id, partitions)


# --- encoding ----------------------------------------------------------------------------------

def encode_key(transactional_id: str) -> bytes:
    raw = transactional_id.encode()
    return _I16.pack(TXN_LOG_KEY_TYPE) + _I16.pack(len(raw)) + raw


def _compact_string(text: str) -> bytes:
    raw = text.encode()
    return encode_unsigned_varint(len(raw) + 1) + raw


def _by_topic(partitions: Iterable[TopicPartition]) -> dict[str, list[int]]:
    grouped: dict[str, list[int]] = {}
    for tp in sorted(partitions, key=lambda p: (p.topic, p.partition)):
        grouped.setdefault(tp.topic, []).append(tp.partition)
    return grouped


def _partitions_v1(partitions: frozenset[TopicPartition] | None) -> bytes:
    if partitions is None:
        return encode_unsigned_varint(0)
    grouped = _by_topic(partitions)
    parts = [encode_unsigned_varint(len(grouped) + 1)]
    for topic, ids in grouped.items():
        parts += [_compact_string(topic), encode_unsigned_varint(len(ids) + 1), *(_I32.pack(i) for i in ids), b"\x00"]
    return b"".join(parts)


def _tagged(value: TxnLogValue) -> bytes:
    fields = [(tag, packed) for tag, packed, default in (
        (_TAG_PREVIOUS_PID, _I64.pack(value.previous_producer_id), value.previous_producer_id == NO_PRODUCER_ID),
        (_TAG_NEXT_PID, _I64.pack(value.next_producer_id), value.next_producer_id == NO_PRODUCER_ID),
        (_TAG_CLIENT_TV, _I16.pack(value.client_transaction_version), value.client_transaction_version == 0),
        (_TAG_NEXT_EPOCH, _I16.pack(value.next_producer_epoch), value.next_producer_epoch == NO_PRODUCER_EPOCH),
    ) if not default]
    out = [encode_unsigned_varint(len(fields))]
    for tag, packed in fields:
        out += [encode_unsigned_varint(tag), encode_unsigned_varint(len(packed)), packed]
    return b"".join(out)


def encode_value(value: TxnLogValue) -> bytes:
    """Version 1, as Kafka 4.x writes it at transaction.version >= 1."""
    return b"".join((
        _I16.pack(VALUE_VERSION), _I64.pack(value.producer_id), _I16.pack(value.producer_epoch),
        _I32.pack(value.timeout_ms), _I8.pack(value.state_id), _partitions_v1(value.partitions),
        _I64.pack(value.last_update_timestamp), _I64.pack(value.start_timestamp), _tagged(value)))


# --- decoding ----------------------------------------------------------------------------------

def decode_key(data: bytes) -> str | None:
    """The transactional id of a key, or None for a record type other than the transaction log's
    (Kafka skips those too). :class:`CorruptRecordError` when the bytes do not parse."""
    try:
        reader = FieldReader(data)
        if reader.int16() != TXN_LOG_KEY_TYPE:
            return None
        return reader.required_string()
    except _DECODE_ERRORS as e:
        raise CorruptRecordError(f"cannot decode a __transaction_state key: {e}") from e


def _partitions(reader: FieldReader) -> frozenset[TopicPartition] | None:
    topics = reader.count()
    if topics < 0:
        return None
    found: set[TopicPartition] = set()
    for _ in range(topics):
        topic = reader.required_string()
        for _ in range(max(0, reader.count())):
            found.add(TopicPartition(topic, reader.int32()))
        reader.tagged_fields()
    return frozenset(found)


def decode_value(data: bytes) -> TxnLogValue:
    """TransactionLogValue v0 or v1; :class:`CorruptRecordError` for another version or bad bytes."""
    try:
        reader = FieldReader(data)
        version = reader.int16()
        if version not in (0, 1):
            raise CorruptRecordError(f"unknown TransactionLogValue version {version}")
        reader.flexible = version >= 1
        pid, epoch, timeout, state_id = reader.int64(), reader.int16(), reader.int32(), reader.int8()
        partitions = _partitions(reader)
        updated, started = reader.int64(), reader.int64()
        tags = reader.tags()
    except _DECODE_ERRORS as e:
        raise CorruptRecordError(f"cannot decode a TransactionLogValue: {e}") from e

    def tag(number: int, s: struct.Struct, default: int) -> int:
        raw = tags.get(number)
        return int(s.unpack(raw)[0]) if raw is not None and len(raw) == s.size else default

    return TxnLogValue(pid, epoch, timeout, state_id, partitions, updated, started,
                       tag(_TAG_PREVIOUS_PID, _I64, NO_PRODUCER_ID), tag(_TAG_NEXT_PID, _I64, NO_PRODUCER_ID),
                       tag(_TAG_CLIENT_TV, _I16, 0), tag(_TAG_NEXT_EPOCH, _I16, NO_PRODUCER_EPOCH), version)
