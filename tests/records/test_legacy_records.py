"""Legacy v0/v1 messages and compressed wrappers: reading (built here and by hand)."""

from __future__ import annotations

import struct
import zlib

import pytest

from tidelog.errors import CorruptRecordError, InvalidRecordError, UnsupportedCompressionError
from tidelog.records import (
    CompressionType,
    LegacyBatch,
    Record,
    TimestampType,
    build_legacy_batch,
    compress,
    encode_legacy_message,
    iter_batches,
)

LEGACY_CODECS = [CompressionType.NONE, CompressionType.GZIP, CompressionType.SNAPPY, CompressionType.LZ4]
MESSAGES = [(100, 1000, b"k1", b"v1"), (101, 1003, None, b"v2"), (105, 1001, b"k3", None)]


def test_v0_message_bytes_and_fields() -> None:
    wire = encode_legacy_message(7, 0, 0, -1, b"k", b"v")
    body = bytes.fromhex("0000" "00000001" "6b" "00000001" "76")
    assert wire == struct.pack(">qiI", 7, 16, zlib.crc32(body)) + body
    batch = LegacyBatch(wire)
    assert (batch.magic, batch.base_offset, batch.last_offset, batch.size_in_bytes) == (0, 7, 7, 28)
    assert (batch.timestamp_type, batch.max_timestamp, batch.crc) == (TimestampType.NO_TIMESTAMP, -1, zlib.crc32(body))
    assert batch.is_valid() and list(batch.records()) == [Record(7, -1, b"k", b"v")]


def test_legacy_batch_reports_v2_defaults() -> None:
    batch = LegacyBatch(encode_legacy_message(7, 1, 0, 55, None, None))
    assert (batch.partition_leader_epoch, batch.producer_id, batch.producer_epoch) == (-1, -1, -1)
    assert (batch.base_sequence, batch.last_sequence, batch.records_count) == (-1, -1, 1)
    assert not (batch.is_control or batch.is_transactional or batch.has_producer_id or batch.has_delete_horizon)
    assert batch.delete_horizon_ms is None and batch.timestamp_type is TimestampType.CREATE_TIME
    assert list(batch.records()) == [Record(7, 55, None, None)]


@pytest.mark.parametrize("magic", [0, 1])
def test_uncompressed_message_set_reads_one_message_per_entry(magic: int) -> None:
    built = build_legacy_batch(MESSAGES, magic=magic)
    batches = [b for _, b in iter_batches(built)]
    assert len(batches) == 3 and all(b.is_valid() for b in batches)
    expected_ts = [m[1] if magic else -1 for m in MESSAGES]
    assert [r for b in batches for r in b.records()] == [
        Record(o, ts, k, v) for (o, _, k, v), ts in zip(MESSAGES, expected_ts)]


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", LEGACY_CODECS[1:])
def test_compressed_wrapper_yields_inner_messages_with_absolute_offsets(magic: int, codec: CompressionType) -> None:
    (position, batch), = iter_batches(build_legacy_batch(MESSAGES, magic=magic, compression=codec))
    assert isinstance(batch, LegacyBatch) and batch.is_valid() and position == 0
    assert (batch.compression, batch.base_offset, batch.last_offset) == (codec, 100, 105)
    assert (batch.records_count, batch.last_offset_delta) == (3, 5)
    assert batch.max_timestamp == (1003 if magic else -1)
    assert list(batch.records()) == [Record(o, ts if magic else -1, k, v) for o, ts, k, v in MESSAGES]


def test_v1_wrapper_stores_relative_inner_offsets_and_last_offset_outside() -> None:
    built = build_legacy_batch(MESSAGES, magic=1, compression=CompressionType.GZIP)
    (outer_offset,) = struct.unpack_from(">q", built)
    value_size_at = 12 + 14 + 4
    (size,) = struct.unpack_from(">i", built, value_size_at)
    inner = zlib.decompress(built[value_size_at + 4:value_size_at + 4 + size], 16 + zlib.MAX_WBITS)
    first_inner_offset = struct.unpack_from(">q", inner)[0]
    assert (outer_offset, first_inner_offset) == (105, 0)


def test_v1_log_append_time_wrapper_reports_wrapper_timestamp() -> None:
    built = build_legacy_batch(MESSAGES, magic=1, compression=CompressionType.SNAPPY,
                               timestamp_type=TimestampType.LOG_APPEND_TIME, log_append_time=9999)
    (_, batch), = iter_batches(built)
    assert batch.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert [r.timestamp for r in batch.records()] == [9999] * 3


def test_magic_zero_lz4_wrapper_with_broken_checksum_reads() -> None:
    built = build_legacy_batch(MESSAGES, magic=0, compression=CompressionType.LZ4)
    (_, batch), = iter_batches(built)
    assert [r.offset for r in batch.records()] == [100, 101, 105]


def test_v1_wrapper_with_offset_zero_keeps_relative_offsets_like_kafka() -> None:
    built = bytearray(build_legacy_batch(MESSAGES, magic=1, compression=CompressionType.GZIP))
    struct.pack_into(">q", built, 0, 0)  # producer-side wrapper, offsets not yet assigned
    assert [r.offset for r in LegacyBatch(built).records()] == [0, 1, 5]


def test_corrupt_legacy_crc_detected() -> None:
    built = bytearray(encode_legacy_message(3, 1, 0, 5, b"key", b"value"))
    built[-1] ^= 1
    batch = LegacyBatch(built)
    assert not batch.is_valid()
    with pytest.raises(CorruptRecordError, match="stored crc") as err:
        batch.ensure_valid(path="p", position=12)
    assert (err.value.offset, err.value.position, err.value.path) == (3, 12, "p")


def _wrapper_around(inner: bytes, magic: int = 1) -> bytes:
    return encode_legacy_message(0, magic, int(CompressionType.GZIP), 0, None, compress(CompressionType.GZIP, inner))


def test_wrapper_with_null_value_is_invalid() -> None:
    batch = LegacyBatch(encode_legacy_message(0, 1, int(CompressionType.GZIP), 0, None, None))
    with pytest.raises(InvalidRecordError, match="null value"):
        list(batch.records())


def test_wrapper_without_inner_messages_is_invalid() -> None:
    with pytest.raises(InvalidRecordError, match="no inner records"):
        list(LegacyBatch(_wrapper_around(b"")).records())


def test_inner_magic_other_than_the_wrappers_is_read_as_kafka_reads_it() -> None:
    batch = LegacyBatch(_wrapper_around(encode_legacy_message(0, 0, 0, 0, b"k", b"v")))
    assert [(r.offset, r.key, r.value) for r in batch.records()] == [(0, b"k", b"v")]
    assert not batch.inner_magics_match


def test_lenient_read_of_a_kafka_4298_wrapper() -> None:
    """v0 messages inside a v1 wrapper read as Kafka's streaming iterator reads them: no timestamp
    (v0 has none), offsets relative to the wrapper's."""
    inner = encode_legacy_message(0, 0, 0, 0, b"a", b"1") + encode_legacy_message(1, 0, 0, 0, b"b", None)
    wrapper = encode_legacy_message(11, 1, int(CompressionType.GZIP) | 0x08, 777, None,
                                    compress(CompressionType.GZIP, inner))
    batch = LegacyBatch(wrapper)
    assert not batch.inner_magics_match
    assert [(r.offset, r.timestamp, r.key, r.value) for r in batch.records()] == [(10, -1, b"a", b"1"), (11, -1, b"b", None)]
    plain = LegacyBatch(encode_legacy_message(5, 1, 0, 9, b"k", b"v"))
    assert plain.inner_magics_match


def test_double_compression_is_invalid() -> None:
    inner = encode_legacy_message(0, 1, int(CompressionType.GZIP), 0, None, b"x")
    with pytest.raises(InvalidRecordError, match="double compression"):
        list(LegacyBatch(_wrapper_around(inner)).records())


def test_truncated_inner_message_is_corrupt() -> None:
    inner = encode_legacy_message(0, 1, 0, 0, b"k", b"v")
    with pytest.raises(CorruptRecordError):
        list(LegacyBatch(_wrapper_around(inner + inner[:20])).records())


def test_zstd_is_not_a_legacy_codec() -> None:
    batch = LegacyBatch(encode_legacy_message(0, 1, int(CompressionType.ZSTD), 0, None, b"x"))
    with pytest.raises(UnsupportedCompressionError, match="zstd"):
        list(batch.records())
    with pytest.raises(UnsupportedCompressionError):
        build_legacy_batch(MESSAGES, magic=1, compression=CompressionType.ZSTD)
