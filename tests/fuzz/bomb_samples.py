"""Decompression bombs built by hand, for the bomb tests and the fuzz regressions."""

from __future__ import annotations

import struct

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

