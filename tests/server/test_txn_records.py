"""The ``__transaction_state`` records byte for byte: Kafka's TransactionLogKey/TransactionLogValue
layouts (the Empty record's 45 bytes as a Kafka 4.3.1 broker wrote them), version 0 read too,
corrupt bytes refused, and an id's partition as Kafka's hash places it. Kafka's own DumpLogSegments
decodes what the coordinator writes in test_txn_coordinator_dump."""

from __future__ import annotations

import struct

import pytest

from tidelog.errors import CorruptRecordError
from tidelog.server.transactions.records import (
    TxnLogValue,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
    txn_partition_for,
)
from tidelog.server.transactions.state import TxnMetadata, TxnState, can_transition
from tidelog.topic_partition import TopicPartition

PID, UPDATED = 1000, 1_764_000_000_123


def test_key_golden_bytes() -> None:
    assert encode_key("tx-1") == b"\x00\x00" + b"\x00\x04tx-1"
    assert decode_key(encode_key("tx-é")) == "tx-é"


def test_keys_of_other_record_types_are_skipped() -> None:
    assert decode_key(b"\x00\x01\x00\x01a") is None


def test_empty_record_is_the_45_bytes_kafka_writes() -> None:
    value = TxnLogValue(PID, 0, 10000, TxnState.EMPTY.id, None, UPDATED, -1, previous_producer_id=PID)
    data = encode_value(value)
    expected = (b"\x00\x01" + struct.pack(">qhi", PID, 0, 10000) + b"\x00" + b"\x00" + struct.pack(">qq", UPDATED, -1)
                + b"\x01\x00\x08" + struct.pack(">q", PID))
    assert data == expected and len(data) == 45
    assert decode_value(data) == value


def test_ongoing_record_lists_partitions_by_topic() -> None:
    parts = frozenset({TopicPartition("b", 1), TopicPartition("a", 2), TopicPartition("a", 0)})
    value = TxnLogValue(PID, 3, 60000, TxnState.ONGOING.id, parts, UPDATED, UPDATED - 5, previous_producer_id=PID)
    data = encode_value(value)
    body = data[2 + 8 + 2 + 4 + 1:]
    # compact array of 2 topics: "a" [0, 2], "b" [1], each with empty tagged fields
    assert body.startswith(b"\x03" + b"\x02a" + b"\x03" + struct.pack(">ii", 0, 2) + b"\x00"
                           + b"\x02b" + b"\x02" + struct.pack(">i", 1) + b"\x00")
    assert decode_value(data) == value


def test_complete_record_has_an_empty_not_a_null_array() -> None:
    value = TxnLogValue(PID, 3, 60000, TxnState.COMPLETE_COMMIT.id, frozenset(), UPDATED, UPDATED - 5, PID)
    data = encode_value(value)
    assert data[17] == 1  # compact length 0 + 1
    assert decode_value(data).partitions == frozenset()


def test_tagged_fields_at_their_defaults_are_not_written() -> None:
    value = TxnLogValue(PID, 0, 1, TxnState.EMPTY.id, None, UPDATED, -1)
    assert encode_value(value).endswith(struct.pack(">qq", UPDATED, -1) + b"\x00")
    full = TxnLogValue(PID, 0, 1, TxnState.EMPTY.id, None, UPDATED, -1, 7, 8, 2, 9)
    assert decode_value(encode_value(full)) == full


def test_version_0_values_decode() -> None:
    data = (b"\x00\x00" + struct.pack(">qhib", PID, 2, 5000, TxnState.PREPARE_COMMIT.id)
            + struct.pack(">i", 1) + struct.pack(">h", 1) + b"t" + struct.pack(">iii", 2, 0, 3)
            + struct.pack(">qq", UPDATED, UPDATED - 1))
    value = decode_value(data)
    assert (value.version, value.producer_epoch, value.state_id) == (0, 2, 2)
    assert value.partitions == frozenset({TopicPartition("t", 0), TopicPartition("t", 3)})
    null = b"\x00\x00" + struct.pack(">qhib", PID, 0, 5000, 0) + struct.pack(">i", -1) + struct.pack(">qq", 1, -1)
    assert decode_value(null).partitions is None


@pytest.mark.parametrize("data", [b"", b"\x00", b"\x00\x02" + bytes(30), b"\x00\x01" + bytes(5),
                                  b"\x00\x01" + struct.pack(">qhib", 1, 0, 1, 1) + b"\x05\x02a"])
def test_corrupt_values_raise_corrupt_record_error(data: bytes) -> None:
    with pytest.raises(CorruptRecordError):
        decode_value(data)


@pytest.mark.parametrize("data", [b"", b"\x00", b"\x00\x00\x00\x09ab"])
def test_corrupt_keys_raise_corrupt_record_error(data: bytes) -> None:
    with pytest.raises(CorruptRecordError):
        decode_key(data)


def test_partition_of_an_id_is_kafkas() -> None:
    # seen on a Kafka 4.3.1 broker with 50 partitions
    assert (txn_partition_for("tx-1", 50), txn_partition_for("tx-2", 50)) == (20, 21)


def test_state_table_is_kafkas() -> None:
    S = TxnState
    assert can_transition(S.ONGOING, S.PREPARE_COMMIT) and not can_transition(S.EMPTY, S.PREPARE_COMMIT)
    assert can_transition(S.PREPARE_EPOCH_FENCE, S.PREPARE_ABORT) and not can_transition(S.ONGOING, S.COMPLETE_ABORT)
    assert can_transition(S.COMPLETE_ABORT, S.ONGOING) and not can_transition(S.PREPARE_ABORT, S.ONGOING)
    assert [s.state_name for s in S] == ["Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit",
                                         "CompleteAbort", "Dead", "PrepareEpochFence"]


def test_metadata_round_trips_through_its_record() -> None:
    meta = TxnMetadata("tx", PID, 4, 60000, TxnState.ONGOING, frozenset({TopicPartition("t", 0)}), 10, 20, PID)
    back = TxnMetadata.from_value("tx", decode_value(encode_value(meta.value())))
    assert back == meta
    value = meta.prepare(TxnState.PREPARE_COMMIT, now=30)
    assert meta.pending is TxnState.PREPARE_COMMIT and value.last_update_timestamp == 30
    meta.complete()
    assert (meta.state, meta.pending, meta.last_update_timestamp, meta.start_timestamp) == (
        TxnState.PREPARE_COMMIT, None, 30, 10)
