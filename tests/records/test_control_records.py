"""Control records: keys, end-transaction markers, marker batches (DefaultRecordBatchTest control case)."""

from __future__ import annotations

import pytest

from tidelog.errors import CorruptRecordError
from tidelog.records import (
    ControlRecordType,
    EndTransactionMarker,
    RecordBatch,
    build_end_txn_marker_batch,
    control_key,
    control_record_type,
)
from tidelog.records.builder import build_empty_batch
from tidelog.records.control import control_batch_type


@pytest.mark.parametrize("control_type", [t for t in ControlRecordType if t is not ControlRecordType.UNKNOWN])
def test_control_key_round_trips(control_type: ControlRecordType) -> None:
    key = control_key(control_type)
    assert key == bytes((0, 0, 0, int(control_type)))
    assert control_record_type(key) is control_type


def test_unknown_type_and_newer_version_still_parse() -> None:
    assert control_record_type(bytes.fromhex("00000063")) is ControlRecordType.UNKNOWN
    assert control_record_type(bytes.fromhex("00050001ffff")) is ControlRecordType.COMMIT


@pytest.mark.parametrize("key", [None, b"\x00\x00\x00", bytes.fromhex("ffff0001")])
def test_bad_control_key_is_corrupt(key: bytes | None) -> None:
    with pytest.raises(CorruptRecordError):
        control_record_type(key)


def test_end_transaction_marker_round_trips() -> None:
    marker = EndTransactionMarker(0, 15)
    assert marker.encode().hex() == "00000000000f"
    assert EndTransactionMarker.decode(marker.encode() + b"future") == marker


@pytest.mark.parametrize("value", [None, b"\x00\x00\x00\x00\x00", bytes.fromhex("fffe00000001")])
def test_bad_end_transaction_marker_is_corrupt(value: bytes | None) -> None:
    with pytest.raises(CorruptRecordError):
        EndTransactionMarker.decode(value)


@pytest.mark.parametrize("commit", [True, False])
def test_read_and_write_control_batch(commit: bool) -> None:
    built = build_end_txn_marker_batch(commit=commit, producer_id=1, producer_epoch=0, coordinator_epoch=15,
                                       base_offset=42, timestamp=1234, partition_leader_epoch=7)
    batch = RecordBatch(built)
    assert batch.is_valid() and batch.is_control and batch.is_transactional
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (1, 0, -1)
    assert (batch.base_offset, batch.records_count, batch.partition_leader_epoch) == (42, 1, 7)
    (record,) = batch.records()
    expected = ControlRecordType.COMMIT if commit else ControlRecordType.ABORT
    assert (record.offset, record.timestamp) == (42, 1234)
    assert control_record_type(record.key) is expected
    assert EndTransactionMarker.decode(record.value) == EndTransactionMarker(0, 15)
    assert control_batch_type(batch) is expected


def test_an_emptied_control_batch_is_of_unknown_type() -> None:
    """The cleaner keeps a removed marker's batch header with no record in it."""
    empty = RecordBatch(build_empty_batch(base_offset=5, last_offset_delta=0, max_timestamp=1234, timestamp_type=0,
                                          producer_id=1, producer_epoch=0, base_sequence=-1, is_transactional=True,
                                          is_control=True))
    assert empty.records_count == 0
    assert control_batch_type(empty) is ControlRecordType.UNKNOWN
