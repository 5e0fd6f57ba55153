"""BatchBuilder and the convenience builders: argument rules and header values."""

from __future__ import annotations

import pytest

from tidelog.errors import InvalidRecordError, UnsupportedCompressionError
from tidelog.records import (
    BatchBuilder,
    CompressionType,
    LegacyBatch,
    Record,
    RecordBatch,
    TimestampType,
    build_batch,
    read_batch_at,
)


def test_offsets_must_strictly_increase() -> None:
    builder = BatchBuilder()
    builder.append(0, 1, b"a", b"1")
    with pytest.raises(InvalidRecordError, match="strictly increase: 0 after 0"):
        builder.append(0, 1, b"b", b"2")


def test_offset_below_base_offset_rejected() -> None:
    with pytest.raises(InvalidRecordError, match="outside"):
        BatchBuilder(base_offset=10).append(9, 1, b"a", b"1")


def test_offset_delta_above_int_max_rejected() -> None:
    with pytest.raises(InvalidRecordError, match="outside"):
        BatchBuilder().append(1 << 31, 1, b"a", b"1")


def test_build_without_records_rejected() -> None:
    with pytest.raises(InvalidRecordError, match="build_empty_batch"):
        BatchBuilder().build()


def test_forced_last_offset_delta_below_actual_rejected() -> None:
    builder = BatchBuilder()
    builder.append(3, 1, b"a", b"1")
    with pytest.raises(InvalidRecordError, match="below the last record's delta 3"):
        builder.build(last_offset_delta=2)


def test_log_append_time_needs_the_time() -> None:
    with pytest.raises(InvalidRecordError, match="log_append_time"):
        BatchBuilder(timestamp_type=TimestampType.LOG_APPEND_TIME)


def test_v2_needs_a_timestamp_type() -> None:
    with pytest.raises(InvalidRecordError, match="CreateTime or LogAppendTime"):
        BatchBuilder(timestamp_type=TimestampType.NO_TIMESTAMP)


def test_unknown_codec_rejected_naming_the_id() -> None:
    with pytest.raises(UnsupportedCompressionError, match="id 7"):
        BatchBuilder(compression=7)


@pytest.mark.parametrize(
    "kwargs",
    [{"producer_id": 5, "producer_epoch": 0, "base_sequence": 0}, {"is_transactional": True},
     {"is_control": True}, {"delete_horizon_ms": 5}],
)
def test_legacy_magic_rejects_v2_only_settings(kwargs: dict[str, object]) -> None:
    with pytest.raises(InvalidRecordError, match="magic 1 has no"):
        BatchBuilder(magic=1, **kwargs)  # type: ignore[arg-type]


def test_legacy_magic_rejects_zstd_and_headers() -> None:
    with pytest.raises(UnsupportedCompressionError, match="zstd"):
        BatchBuilder(magic=0, compression=CompressionType.ZSTD)
    with pytest.raises(InvalidRecordError, match="no headers"):
        BatchBuilder(magic=1).append(0, 1, b"k", b"v", [("h", b"1")])


def test_compression_applies_even_when_it_does_not_shrink() -> None:
    batch = RecordBatch(build_batch([(b"k", b"v")], compression=CompressionType.GZIP))
    assert batch.compression is CompressionType.GZIP
    assert list(batch.records()) == [Record(0, 0, b"k", b"v")]


def test_build_batch_keeps_offsets_and_timestamps_of_record_objects() -> None:
    rows = [Record(40, 400, b"a", None, (("h", None),)), Record(45, 300, None, b"v")]
    batch = RecordBatch(build_batch(rows))
    assert (batch.base_offset, batch.last_offset, batch.base_timestamp, batch.max_timestamp) == (40, 45, 400, 400)
    assert list(batch.records()) == rows


def test_build_batch_numbers_tuples_from_base_offset() -> None:
    batch = RecordBatch(build_batch([(b"a", b"1"), (b"b", b"2", [("h", b"x")])], base_offset=7, timestamp=9))
    assert list(batch.records()) == [Record(7, 9, b"a", b"1"), Record(8, 9, b"b", b"2", (("h", b"x"),))]


def test_build_batch_rejects_malformed_rows_and_empty_input() -> None:
    with pytest.raises(InvalidRecordError, match="expected"):
        build_batch([(b"a",)])
    with pytest.raises(InvalidRecordError, match="at least one"):
        build_batch([])


def test_build_can_be_called_twice_with_same_result() -> None:
    builder = BatchBuilder(compression=CompressionType.ZSTD)
    builder.append(0, 5, b"k", b"v")
    assert builder.build() == builder.build()
    assert (builder.records_count, builder.last_offset) == (1, 0)


def test_legacy_builder_writes_one_entry_per_uncompressed_message() -> None:
    built = build_batch([(b"a", b"1"), (b"b", b"2")], magic=1, timestamp=33, base_offset=10)
    first = read_batch_at(built, 0)
    assert isinstance(first, LegacyBatch) and first.size_in_bytes < len(built)
    assert list(first.records()) == [Record(10, 33, b"a", b"1")]
