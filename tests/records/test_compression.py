"""Codecs: round trips, Kafka's framings (xerial snappy, Kafka LZ4 frame), and corrupt input."""

from __future__ import annotations

import gzip
import io
import os
import struct

import cramjam
import lz4.frame
import numpy as np
import pytest
import zstandard
from records_strategies import ALL_CODECS
from hypothesis import given, settings
from hypothesis import strategies as st

from tidelog.errors import CorruptRecordError, UnsupportedCompressionError
from tidelog.records import CompressionType, compress, decompress
from tidelog.records.compression import _WRITE_ZERO, XERIAL_HEADER, xxh32

PAYLOADS = [b"", b"x", bytes(range(256)) * 40, os.urandom(70_000), b"abc" * 50_000]


@pytest.mark.parametrize("codec", ALL_CODECS)
@pytest.mark.parametrize("payload", PAYLOADS, ids=lambda p: f"{len(p)}B")
def test_codec_round_trips(codec: CompressionType, payload: bytes) -> None:
    assert decompress(codec, compress(codec, payload)) == payload


@pytest.mark.parametrize("codec", ALL_CODECS)
def test_codec_accepts_memoryview_input(codec: CompressionType) -> None:
    data = b"hello " * 1000
    assert decompress(codec, memoryview(compress(codec, memoryview(data)))) == data


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(ALL_CODECS), st.binary(max_size=3000), st.sampled_from([0, 1, 2]))
def test_codec_round_trips_for_any_bytes_and_magic(codec: CompressionType, payload: bytes, magic: int) -> None:
    assert decompress(codec, compress(codec, payload, magic=magic), magic=magic) == payload


def test_from_name_accepts_kafka_names() -> None:
    names = {"none": 0, "uncompressed": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4, "ZSTD": 4}
    assert {n: int(CompressionType.from_name(n)) for n in names} == names
    with pytest.raises(UnsupportedCompressionError, match="'brotli'"):
        CompressionType.from_name("brotli")


@pytest.mark.parametrize("function", [compress, decompress])
def test_unknown_codec_id_is_named(function) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(UnsupportedCompressionError, match="codec id 6"):
        function(6, b"data")


def test_gzip_writes_a_standard_stream_at_level_six() -> None:
    data = b"kafka " * 5000
    out = compress(CompressionType.GZIP, data)
    assert out[:3] == b"\x1f\x8b\x08" and gzip.decompress(out) == data
    assert len(out) == len(gzip.compress(data, compresslevel=6, mtime=0))


def test_gzip_reads_concatenated_members() -> None:
    assert decompress(CompressionType.GZIP, gzip.compress(b"ab") + gzip.compress(b"cd")) == b"abcd"


def test_snappy_writes_xerial_header_and_32k_blocks() -> None:
    data = os.urandom(80_000)
    out = compress(CompressionType.SNAPPY, data)
    assert out[:16] == bytes.fromhex("82534e41505059000000000100000001") == XERIAL_HEADER
    pos, blocks = 16, []
    while pos < len(out):
        (size,) = struct.unpack_from(">i", out, pos)
        blocks.append(bytes(cramjam.snappy.decompress_raw(out[pos + 4:pos + 4 + size])))
        pos += 4 + size
    assert [len(b) for b in blocks] == [32768, 32768, 14464] and b"".join(blocks) == data


def test_snappy_reads_raw_block_without_header() -> None:
    raw = bytes(cramjam.snappy.compress_raw(b"plain snappy" * 10))
    assert decompress(CompressionType.SNAPPY, raw) == b"plain snappy" * 10


def test_snappy_reads_concatenated_xerial_streams() -> None:
    stream = compress(CompressionType.SNAPPY, b"one") + compress(CompressionType.SNAPPY, b"two")
    assert decompress(CompressionType.SNAPPY, stream) == b"onetwo"


def test_snappy_block_length_past_end_is_corrupt() -> None:
    out = bytearray(compress(CompressionType.SNAPPY, b"x" * 100))
    struct.pack_into(">i", out, 16, 10_000)
    with pytest.raises(CorruptRecordError, match="runs past the stream"):
        decompress(CompressionType.SNAPPY, out)


def test_lz4_writes_kafka_frame_descriptor() -> None:
    out = compress(CompressionType.LZ4, b"y" * 200_000)
    assert out[:4] == b"\x04\x22\x4d\x18"
    assert out[4] == 0x60  # version 01, independent blocks, no block/content checksum, no content size
    assert out[5] == 0x40  # max block size 64 KiB
    assert out[6] == (xxh32(out[4:6]) >> 8) & 0xFF


def test_lz4_reads_any_standard_frame() -> None:
    frame = lz4.frame.compress(b"z" * 1000, content_checksum=True, store_size=True, block_linked=True)
    assert decompress(CompressionType.LZ4, frame) == b"z" * 1000


def test_lz4_magic_zero_uses_kafkas_broken_header_checksum() -> None:
    out = compress(CompressionType.LZ4, b"legacy" * 100, magic=0)
    assert out[6] == (xxh32(out[0:6]) >> 8) & 0xFF  # checksum over magic bytes + descriptor
    with pytest.raises(RuntimeError):
        lz4.frame.decompress(out)  # a standard reader rejects it ...
    assert decompress(CompressionType.LZ4, out, magic=0) == b"legacy" * 100  # ... Kafka ignores it


def test_lz4_magic_zero_also_reads_a_correct_checksum() -> None:
    assert decompress(CompressionType.LZ4, compress(CompressionType.LZ4, b"ok"), magic=0) == b"ok"


def test_xxh32_matches_reference_vectors() -> None:
    assert [xxh32(b""), xxh32(b"a"), xxh32(b"abc")] == [0x02CC5D05, 0x550D7456, 0x32D153FF]
    assert xxh32(b"Nobody inspects the spammish repetition") == 0xE2293B2F


def test_zstd_reads_frames_without_content_size() -> None:
    data = b"stream " * 10_000
    buffer = io.BytesIO()
    with zstandard.ZstdCompressor(write_content_size=False).stream_writer(buffer, closefd=False) as writer:
        writer.write(data)
    assert decompress(CompressionType.ZSTD, buffer.getvalue()) == data


@pytest.mark.parametrize("codec", [c for c in ALL_CODECS if c is not CompressionType.NONE])
@pytest.mark.parametrize("damage", ["garbage", "truncated"])
def test_corrupt_data_raises_corrupt_record_from_library_error(codec: CompressionType, damage: str) -> None:
    good = compress(codec, os.urandom(5000))
    bad = b"\x00garbage-garbage-garbage" if damage == "garbage" else good[: len(good) // 2]
    with pytest.raises(CorruptRecordError) as err:
        decompress(codec, bad)
    if damage == "garbage":  # the library's own error is chained
        assert err.value.__cause__ is not None and not isinstance(err.value.__cause__, CorruptRecordError)
        assert codec.kafka_name in str(err.value)


def test_cramjam_says_an_output_buffer_is_full_in_the_words_the_zstd_bound_looks_for() -> None:
    """The bounded zstd decode tells "more than max_size" from "not zstd" by cramjam's message (its
    error has no kind); pinned here against the installed cramjam: a frame without content size,
    as Kafka's Java clients write them, into a buffer one byte too small."""
    payload = b"tidelog " * 4096
    stream = zstandard.ZstdCompressor(write_content_size=False).compress(payload)
    assert cramjam.zstd.decompress_into(stream, np.empty(len(payload), np.uint8)) == len(payload)
    with pytest.raises(cramjam.DecompressionError, match=_WRITE_ZERO):
        cramjam.zstd.decompress_into(stream, np.empty(len(payload) - 1, np.uint8))
