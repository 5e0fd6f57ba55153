"""RecordBatch v2: Kafka's vectors and DefaultRecordBatchTest / MemoryRecordsTest scenarios."""

from __future__ import annotations

import struct

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from records_strategies import ALL_CODECS, record_rows

from tidelog.errors import CorruptRecordError, InvalidRecordError, UnsupportedCompressionError
from tidelog.records import (
    ATTRIBUTES_OFFSET,
    BASE_OFFSET_OFFSET,
    BASE_SEQUENCE_OFFSET,
    BASE_TIMESTAMP_OFFSET,
    CRC_OFFSET,
    LAST_OFFSET_DELTA_OFFSET,
    LENGTH_OFFSET,
    MAGIC_OFFSET,
    MAX_TIMESTAMP_OFFSET,
    PARTITION_LEADER_EPOCH_OFFSET,
    PRODUCER_EPOCH_OFFSET,
    PRODUCER_ID_OFFSET,
    RECORD_BATCH_OVERHEAD,
    RECORDS_COUNT_OFFSET,
    BatchBuilder,
    CompressionType,
    Record,
    RecordBatch,
    TimestampType,
    build_batch,
    build_empty_batch,
    increment_sequence,
    set_base_offset,
    set_last_offset,
    set_max_timestamp,
    set_partition_leader_epoch,
)
from tidelog.records.batch import HEADER

WORKED_EXAMPLE = bytes.fromhex(
    "0000000000000000" "0000003a" "00000000" "02" "e99b8dd8" "0000" "00000000"
    "0000018bcfe56800" "0000018bcfe56800" "ffffffffffffffff" "ffff" "ffffffff" "00000001"
    "10000000026b027600"
)
ABC = [(b"a", b"1"), (b"b", b"2"), (b"c", b"3")]


def _abc_batch(**kwargs: object) -> bytearray:
    """Kafka's test batch: records a/1, b/2, c/3 at timestamps 1, 2, 3."""
    builder = BatchBuilder(**kwargs)  # type: ignore[arg-type]
    for i, (key, value) in enumerate(ABC):
        builder.append(i, i + 1, key, value)
    return bytearray(builder.build())


def test_crc32c_matches_kafka_vector() -> None:
    assert crc32c.crc32c(b"Some String") == 608512271


def test_builder_writes_worked_example_bytes() -> None:
    built = build_batch([(b"k", b"v")], timestamp=1700000000000, partition_leader_epoch=0)
    assert built == WORKED_EXAMPLE


def test_worked_example_header_fields() -> None:
    batch = RecordBatch(WORKED_EXAMPLE)
    assert (batch.base_offset, batch.batch_length, batch.size_in_bytes) == (0, 58, 70)
    assert (batch.partition_leader_epoch, batch.magic, batch.crc) == (0, 2, 0xE99B8DD8)
    assert batch.compute_crc() == 0xE99B8DD8 and batch.is_valid()
    assert (batch.attributes, batch.compression, batch.timestamp_type) == (0, CompressionType.NONE, TimestampType.CREATE_TIME)
    assert (batch.base_timestamp, batch.max_timestamp) == (1700000000000, 1700000000000)
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence, batch.last_sequence) == (-1, -1, -1, -1)
    assert not (batch.has_producer_id or batch.is_transactional or batch.is_control or batch.has_delete_horizon)
    assert (batch.records_count, batch.last_offset, batch.next_offset, batch.delete_horizon_ms) == (1, 0, 1, None)
    assert list(batch.records()) == [Record(0, 1700000000000, b"k", b"v")]


def test_header_offsets_match_struct_layout() -> None:
    fields = "qiibIhiqqqhii"
    offsets = [struct.calcsize(">" + fields[:i]) for i in range(len(fields))]
    assert offsets == [
        BASE_OFFSET_OFFSET, LENGTH_OFFSET, PARTITION_LEADER_EPOCH_OFFSET, MAGIC_OFFSET, CRC_OFFSET,
        ATTRIBUTES_OFFSET, LAST_OFFSET_DELTA_OFFSET, BASE_TIMESTAMP_OFFSET, MAX_TIMESTAMP_OFFSET,
        PRODUCER_ID_OFFSET, PRODUCER_EPOCH_OFFSET, BASE_SEQUENCE_OFFSET, RECORDS_COUNT_OFFSET,
    ]
    assert HEADER.size == RECORD_BATCH_OVERHEAD == 61


def test_batch_is_a_view_over_the_callers_buffer() -> None:
    buf = bytearray(WORKED_EXAMPLE)
    batch = RecordBatch(buf)
    assert batch.buffer.obj is buf
    buf[-2] = ord("w")  # value byte: the view sees it, the CRC no longer matches
    assert bytes(batch.buffer[-3:]) == b"\x02w\x00"
    assert not batch.is_valid()


def test_batch_over_longer_buffer_is_trimmed_to_declared_size() -> None:
    batch = RecordBatch(WORKED_EXAMPLE + b"trailing")
    assert len(batch.buffer) == 70 and batch.is_valid()


def test_constructor_rejects_short_buffer_and_wrong_magic() -> None:
    with pytest.raises(CorruptRecordError, match="61 header bytes"):
        RecordBatch(WORKED_EXAMPLE[:60])
    wrong = bytearray(WORKED_EXAMPLE)
    wrong[MAGIC_OFFSET] = 1
    with pytest.raises(CorruptRecordError, match="magic 1"):
        RecordBatch(wrong)


def test_invalid_crc_detected_and_reported() -> None:
    buf = _abc_batch()
    struct.pack_into(">i", buf, LAST_OFFSET_DELTA_OFFSET, 23)
    batch = RecordBatch(buf)
    assert not batch.is_valid()
    with pytest.raises(CorruptRecordError, match="stored crc") as err:
        batch.ensure_valid(path="/x/00.log", position=4096)
    assert (err.value.path, err.value.position, err.value.offset) == ("/x/00.log", 4096, 0)
    assert err.value.stored_crc == batch.crc != err.value.computed_crc == batch.compute_crc()


def test_invalid_record_size_fails_validation() -> None:
    buf = _abc_batch()
    struct.pack_into(">i", buf, LENGTH_OFFSET, 10)
    batch = RecordBatch(buf)
    assert not batch.is_valid()
    with pytest.raises(CorruptRecordError, match="smaller than the minimum allowed overhead 61"):
        batch.ensure_valid()


def test_declared_size_beyond_buffer_fails_validation() -> None:
    buf = _abc_batch()
    batch = RecordBatch(buf[:-1])
    assert not batch.is_valid()
    with pytest.raises(CorruptRecordError, match="only 87 bytes present"):
        batch.ensure_valid()


def test_set_last_offset_moves_base_offset_and_keeps_crc() -> None:
    buf = _abc_batch()
    set_last_offset(buf, 500)
    batch = RecordBatch(buf)
    assert (batch.last_offset, batch.base_offset) == (500, 498)
    assert batch.is_valid()
    assert [r.offset for r in batch.records()] == [498, 499, 500]


def test_set_base_offset_keeps_crc() -> None:
    buf = _abc_batch()
    before = bytes(buf[CRC_OFFSET:])
    set_base_offset(buf, 1 << 40)
    assert bytes(buf[CRC_OFFSET:]) == before
    assert [r.offset for r in RecordBatch(buf).records()] == [1 << 40, (1 << 40) + 1, (1 << 40) + 2]


def test_set_partition_leader_epoch_keeps_crc() -> None:
    buf = _abc_batch()
    set_partition_leader_epoch(buf, 500)
    batch = RecordBatch(buf)
    assert batch.partition_leader_epoch == 500 and batch.is_valid()


def test_patchers_work_at_a_position_in_a_larger_buffer() -> None:
    first = _abc_batch()
    buf = first + _abc_batch()
    set_partition_leader_epoch(buf, 7, position=len(first))
    set_max_timestamp(buf, TimestampType.LOG_APPEND_TIME, 99, position=len(first))
    assert RecordBatch(buf[:len(first)]).partition_leader_epoch == -1
    second = RecordBatch(buf[len(first):])
    assert (second.partition_leader_epoch, second.max_timestamp) == (7, 99) and second.is_valid()


def test_set_log_append_time_rewrites_timestamps_and_crc() -> None:
    buf = _abc_batch()
    set_max_timestamp(buf, TimestampType.LOG_APPEND_TIME, 15)
    batch = RecordBatch(buf)
    assert (batch.timestamp_type, batch.max_timestamp) == (TimestampType.LOG_APPEND_TIME, 15)
    assert batch.is_valid()
    assert [r.timestamp for r in batch.records()] == [15, 15, 15]


def test_set_max_timestamp_same_values_writes_nothing() -> None:
    buf = _abc_batch()
    buf[ATTRIBUTES_OFFSET] |= 0x80  # an unknown attribute bit, only cleared by a real rewrite
    before = bytes(buf)
    set_max_timestamp(buf, TimestampType.CREATE_TIME, 3)
    assert bytes(buf) == before


def test_set_max_timestamp_keeps_codec_and_flags() -> None:
    buf = _abc_batch(compression=CompressionType.GZIP, producer_id=9, producer_epoch=1,
                     base_sequence=0, is_transactional=True)
    set_max_timestamp(buf, TimestampType.LOG_APPEND_TIME, 15)
    batch = RecordBatch(buf)
    assert batch.compression is CompressionType.GZIP and batch.is_transactional and batch.is_valid()
    set_max_timestamp(buf, TimestampType.CREATE_TIME, 3)
    assert RecordBatch(buf).timestamp_type is TimestampType.CREATE_TIME
    assert [r.timestamp for r in RecordBatch(buf).records()] == [1, 2, 3]


def test_set_no_timestamp_type_not_allowed() -> None:
    with pytest.raises(InvalidRecordError, match="CreateTime or LogAppendTime"):
        set_max_timestamp(_abc_batch(), TimestampType.NO_TIMESTAMP, -1)


def test_patchers_reject_read_only_and_legacy_buffers() -> None:
    with pytest.raises(TypeError):
        set_base_offset(bytes(_abc_batch()), 5)  # type: ignore[arg-type]
    legacy = bytearray(build_batch([(b"k", b"v")], magic=1))
    with pytest.raises(InvalidRecordError, match="magic 1"):
        set_partition_leader_epoch(legacy, 1)


def _with_record_count(codec: CompressionType, count: int) -> RecordBatch:
    builder = BatchBuilder(compression=codec)
    for i, value in enumerate([b"hello", b"there", b"beautiful"]):
        builder.append(i, 1000, None, value)
    buf = bytearray(builder.build())
    struct.pack_into(">i", buf, RECORDS_COUNT_OFFSET, count)
    return RecordBatch(buf)


@pytest.mark.parametrize("codec", [CompressionType.NONE, CompressionType.GZIP])
@pytest.mark.parametrize(("count", "message"), [(5, "premature EOF"), (2, "remain after 2 records")])
def test_invalid_record_count_detected_while_iterating(codec: CompressionType, count: int, message: str) -> None:
    with pytest.raises(InvalidRecordError, match=message):
        list(_with_record_count(codec, count).records())


def test_negative_record_count_rejected() -> None:
    with pytest.raises(InvalidRecordError, match="invalid record count -1"):
        _with_record_count(CompressionType.NONE, -1).records()


@pytest.mark.parametrize("timestamp_type", [TimestampType.CREATE_TIME, TimestampType.LOG_APPEND_TIME])
@pytest.mark.parametrize("transactional", [True, False])
@pytest.mark.parametrize("control", [True, False])
def test_write_empty_header(timestamp_type: TimestampType, transactional: bool, control: bool) -> None:
    built = build_empty_batch(
        base_offset=15, last_offset_delta=22, max_timestamp=1700000000123, timestamp_type=timestamp_type,
        producer_id=23423, producer_epoch=145, base_sequence=983, is_transactional=transactional,
        is_control=control, partition_leader_epoch=15)
    batch = RecordBatch(built)
    assert len(built) == RECORD_BATCH_OVERHEAD and batch.batch_length == 49 and batch.is_valid()
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (23423, 145, 983)
    assert (batch.last_sequence, batch.base_offset, batch.last_offset) == (983 + 22, 15, 37)
    assert (batch.partition_leader_epoch, batch.max_timestamp, batch.base_timestamp) == (15, 1700000000123, -1)
    assert (batch.timestamp_type, batch.is_transactional, batch.is_control) == (timestamp_type, transactional, control)
    assert (batch.records_count, batch.compression, batch.has_delete_horizon) == (0, CompressionType.NONE, False)
    assert list(batch.records()) == []


def test_sequence_wraps_around_int_max() -> None:
    built = build_batch([(b"a", b"v"), (b"b", b"v"), (b"c", b"v")], base_offset=1234567,
                        producer_id=23423, producer_epoch=145, base_sequence=(1 << 31) - 2)
    batch = RecordBatch(built)
    assert (batch.base_sequence, batch.last_sequence, batch.has_producer_id) == ((1 << 31) - 2, 0, True)


def test_increment_sequence_matches_kafka() -> None:
    assert increment_sequence(5, 5) == 10
    assert increment_sequence((1 << 31) - 1, 1) == 0
    assert increment_sequence((1 << 31) - 6, 10) == 4


@pytest.mark.parametrize("codec", ALL_CODECS)
def test_delete_horizon_keeps_record_timestamps(codec: CompressionType) -> None:
    horizon = ((1 << 31) - 1) // 2
    builder = BatchBuilder(compression=codec, partition_leader_epoch=998, delete_horizon_ms=horizon)
    for offset, (ts, key, value) in enumerate([(5, b"0", b"0"), (10, b"1", None), (15, b"2", b"2")]):
        builder.append(offset, ts, key, value)
    batch = RecordBatch(builder.build())
    assert batch.has_delete_horizon and batch.delete_horizon_ms == horizon == batch.base_timestamp
    assert batch.max_timestamp == 15 and batch.partition_leader_epoch == 998
    assert [(r.timestamp, r.key, r.value) for r in batch.records()] == [(5, b"0", b"0"), (10, b"1", None), (15, b"2", b"2")]


@pytest.mark.parametrize("codec", ALL_CODECS)
def test_log_append_time_batch_reports_broker_time(codec: CompressionType) -> None:
    batch = RecordBatch(_abc_batch(compression=codec, timestamp_type=TimestampType.LOG_APPEND_TIME,
                                   log_append_time=424242))
    assert (batch.timestamp_type, batch.max_timestamp, batch.base_timestamp) == (TimestampType.LOG_APPEND_TIME, 424242, 1)
    assert [r.timestamp for r in batch.records()] == [424242] * 3


def test_forced_last_offset_delta_kept_after_compaction() -> None:
    rows = [Record(100, 1, b"a", b"1"), Record(104, 2, b"b", b"2")]
    batch = RecordBatch(build_batch(rows, base_offset=100, last_offset_delta=9))
    assert (batch.base_offset, batch.last_offset, batch.records_count) == (100, 109, 2)
    assert [r.offset for r in batch.records()] == [100, 104]


def test_unknown_codec_id_raises_unsupported_compression() -> None:
    buf = _abc_batch()
    buf[ATTRIBUTES_OFFSET + 1] |= 0x05
    batch = RecordBatch(buf)
    with pytest.raises(UnsupportedCompressionError, match="id 5"):
        _ = batch.compression
    with pytest.raises(UnsupportedCompressionError):
        batch.records()


@pytest.mark.parametrize("codec", [c for c in ALL_CODECS if c is not CompressionType.NONE])
def test_corrupt_compressed_payload_raises_corrupt_record(codec: CompressionType) -> None:
    buf = bytearray(build_batch([(b"k", b"v" * 200)] * 3, compression=codec))
    buf[RECORD_BATCH_OVERHEAD:] = b"\x11" * (len(buf) - RECORD_BATCH_OVERHEAD)
    set_max_timestamp(buf, TimestampType.LOG_APPEND_TIME, 1)  # recompute the CRC: the batch is "valid"
    batch = RecordBatch(buf)
    assert batch.is_valid()
    with pytest.raises((CorruptRecordError, InvalidRecordError)):
        list(batch.records())


@settings(max_examples=120, deadline=None)
@given(
    rows=record_rows(),
    codec=st.sampled_from(ALL_CODECS),
    producer=st.sampled_from([(-1, -1, -1), (77, 3, 12), (1 << 40, 0, (1 << 31) - 1)]),
    epoch=st.integers(-1, 1 << 20),
    transactional=st.booleans(),
)
def test_batch_round_trips(rows, codec, producer, epoch, transactional) -> None:  # type: ignore[no-untyped-def]
    pid, pepoch, seq = producer
    builder = BatchBuilder(compression=codec, base_offset=rows[0][0], partition_leader_epoch=epoch,
                           producer_id=pid, producer_epoch=pepoch, base_sequence=seq,
                           is_transactional=transactional and pid >= 0)
    for row in rows:
        builder.append(*row)
    batch = RecordBatch(builder.build())
    assert batch.is_valid()
    assert (batch.base_offset, batch.last_offset, batch.records_count) == (rows[0][0], rows[-1][0], len(rows))
    assert (batch.base_timestamp, batch.max_timestamp) == (rows[0][1], max(r[1] for r in rows))
    assert (batch.producer_id, batch.partition_leader_epoch, batch.compression) == (pid, epoch, codec)
    assert list(batch.records()) == [Record(*row) for row in rows]
    assert list(batch.record_tuples()) == [tuple(row) for row in rows]
