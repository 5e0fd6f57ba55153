"""Decompression bombs: a small compressed stream that claims or decodes to more than
``max_size`` (MAX_DECOMPRESSED_BYTES by default) is refused with CorruptRecordError, and what
it claims is never allocated (the Python heap's peak stays far below it)."""

from __future__ import annotations

import random
import struct

import cramjam
import pytest
import zstandard

from bomb_samples import ZSTD_MAGIC, lz4_frame_claiming, zstd_rle_bomb
from fuzz_strategies import peak_allocation
from tidelog.errors import CorruptRecordError
from tidelog.records import CompressionType, RecordBatch, build_batch, compress, decompress, write_crc
from tidelog.records.compression import MAX_DECOMPRESSED_BYTES
from tidelog.records.scan import get_kernels, scan_batches
from tidelog.records.varint import encode_unsigned_varint

MIB = 1 << 20
BOMBS = {
    "gzip": (CompressionType.GZIP, lambda: compress(CompressionType.GZIP, bytes(64 * MIB))),
    "snappy-raw-claim": (CompressionType.SNAPPY, lambda: encode_unsigned_varint(0xFFFFFFFF) + b"\x00" * 8),
    "snappy-xerial": (CompressionType.SNAPPY, lambda: compress(CompressionType.SNAPPY, bytes(8 * MIB))),
    "lz4-stream": (CompressionType.LZ4, lambda: compress(CompressionType.LZ4, bytes(64 * MIB))),
    "lz4-claim": (CompressionType.LZ4, lambda: lz4_frame_claiming(1 << 62)),
    "zstd-stream": (CompressionType.ZSTD, lambda: bytes(cramjam.zstd.compress(bytes(64 * MIB)))),
    "zstd-stream-no-size": (CompressionType.ZSTD, lambda: _zstd_jni_style(bytes(64 * MIB))),
    "zstd-rle-blocks": (CompressionType.ZSTD, lambda: zstd_rle_bomb(1024)),
    "zstd-claim": (CompressionType.ZSTD, lambda: ZSTD_MAGIC + b"\xc0" + struct.pack("<Q", 1 << 62) + b"\x01\x00\x00"),
}


@pytest.mark.parametrize("name", sorted(BOMBS))
def test_a_bomb_is_refused_without_allocating_what_it_claims(name: str) -> None:
    codec, make = BOMBS[name]
    bomb = make()
    limit = 4 * MIB

    def run() -> None:
        with pytest.raises(CorruptRecordError, match="decompresses to more than|does not decompress") as err:
            decompress(codec, bomb, max_size=limit)
        assert "more than" in str(err.value) or name.endswith("claim"), err.value

    assert peak_allocation(run) < 2 * limit + MIB


def test_the_default_limit_refuses_a_gigabyte_from_a_few_kilobytes() -> None:
    bomb = zstd_rle_bomb(8192)  # 1 GiB from 32 KiB
    assert len(bomb) < 40_000

    def run() -> None:
        with pytest.raises(CorruptRecordError) as err:
            decompress(CompressionType.ZSTD, bomb)
        assert err.value.context["max_size"] == MAX_DECOMPRESSED_BYTES

    assert peak_allocation(run) < MIB


@pytest.mark.parametrize("codec", list(CompressionType))
def test_a_stream_just_within_the_limit_decompresses(codec: CompressionType) -> None:
    payload = b"tidelog " * (MIB // 8)
    assert decompress(codec, compress(codec, payload), max_size=len(payload)) == payload
    if codec is not CompressionType.NONE:
        with pytest.raises(CorruptRecordError, match="more than"):
            decompress(codec, compress(codec, payload), max_size=len(payload) - 1)


def _zstd_jni_style(data: bytes) -> bytes:
    """A zstd frame without content size, as Kafka's Java clients (zstd-jni streams) write them."""
    return zstandard.ZstdCompressor(write_content_size=False).compress(data)


def test_a_zstd_stream_without_content_size_is_bounded_by_what_it_holds_not_by_its_headers() -> None:
    rng = random.Random(19)
    payload = bytes(rng.choice(b"tidelog kafka ") for _ in range(MIB + 1000))  # 9 compressed blocks,
    # which their headers bound only to 9 x 128 KiB
    stream = _zstd_jni_style(payload)
    assert decompress(CompressionType.ZSTD, stream, max_size=len(payload)) == payload
    with pytest.raises(CorruptRecordError, match="more than") as err:
        decompress(CompressionType.ZSTD, stream, max_size=len(payload) - 1)
    assert err.value.context["max_size"] == len(payload) - 1


def _bomb_batch() -> bytes:
    """A CRC-valid zstd batch whose records area is a 1 GiB RLE bomb."""
    header = bytearray(build_batch([(b"k", b"v")], compression=CompressionType.ZSTD)[:61])
    area = zstd_rle_bomb(8192)
    struct.pack_into(">i", header, 8, 49 + len(area))
    batch = bytearray(header + area)
    write_crc(batch)
    return bytes(batch)


def test_a_bomb_batch_is_corrupt_for_the_record_reader_and_the_scan() -> None:
    batch = _bomb_batch()
    assert RecordBatch(batch).is_valid()
    for pure in (True, False):  # numba compiles outside the measured heap
        scan_batches(build_batch([(b"k", b"v")]), kernels=get_kernels(pure))

    def run() -> None:
        with pytest.raises(CorruptRecordError):
            list(RecordBatch(batch).records())
        for pure in (True, False):
            with pytest.raises(CorruptRecordError):
                scan_batches(batch, kernels=get_kernels(pure))

    assert peak_allocation(run) < 4 * MIB
