"""Decompression bombs built by hand, for the bomb tests and the fuzz regressions."""

from __future__ import annotations

import struct
import time
import zlib

import lz4.frame

ZSTD_MAGIC = struct.pack("<I", 0xFD2FB528)


def zstd_rle_bomb(blocks: int) -> bytes:
    """A zstd frame of ``blocks`` RLE blocks of 128 KiB each: 4 bytes of input per 128 KiB out."""
    rle = struct.pack("<I", (128 << 10) << 3 | 1 << 1)[:3] + b"\x00"
    last = struct.pack("<I", (128 << 10) << 3 | 1 << 1 | 1)[:3] + b"\x00"
    return ZSTD_MAGIC + b"\x00\x58" + rle * (blocks - 1) + last  # no content size; window 128 MiB


def lz4_frame_claiming(size: int) -> bytes:
    """An LZ4 frame whose descriptor declares ``size`` bytes of content (the found crash: the
    library allocated that much before decoding anything)."""
    frame = bytearray(lz4.frame.compress(b"x" * 64, content_checksum=False, store_size=True))
    frame[6:14] = struct.pack("<Q", size)  # FLG(4), BD(5), content size (6..13), HC(14)
    return bytes(frame)


def gzip_record_bomb(value_size: int, *, timestamp: int | None = None) -> bytes:
    """A CRC-valid gzip RecordBatch v2 of one record whose value is ``value_size`` zero bytes: a
    well-formed batch (Kafka stores it) of about ``value_size / 1000`` bytes on the wire. The
    stream is built 1 MiB at a time, so a 300 MiB bomb costs its builder a few MiB."""
    from tidelog.records import build_batch, write_crc
    from tidelog.records.varint import encode_varint

    ts = int(time.time() * 1000) if timestamp is None else timestamp
    fields = b"\x00" + encode_varint(0) + encode_varint(0) + encode_varint(-1) + encode_varint(value_size)
    body_size = len(fields) + value_size + 1  # + the header count varint (0)
    deflater = zlib.compressobj(6, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    parts = [deflater.compress(encode_varint(body_size) + fields)]
    chunk = bytes(1 << 20)
    for start in range(0, value_size, len(chunk)):
        parts.append(deflater.compress(chunk[:min(len(chunk), value_size - start)]))
    parts.append(deflater.compress(encode_varint(0)) + deflater.flush())
    area = b"".join(parts)
    header = bytearray(build_batch([(b"k", b"v")], compression=1, timestamp=ts)[:61])
    struct.pack_into(">i", header, 8, 49 + len(area))
    batch = bytearray(header + area)
    write_crc(batch)
    return bytes(batch)
