"""Compression codecs of record batches, with the stream framing Kafka's Java clients write.

The compressed area of a batch (v2: everything after the 61-byte header; v0/v1: the value of the
wrapper message) is one stream of the batch's codec:

| id | codec  | framing written                                             | decoder accepts                    |
|----|--------|-------------------------------------------------------------|------------------------------------|
| 0  | none   | raw bytes                                                   | raw bytes                          |
| 1  | gzip   | one gzip member (RFC 1952), mtime 0, XFL 0, OS 255 (as Java's | concatenated gzip members          |
|    |        | GZIPOutputStream), zlib level 6 by default                 |                                    |
| 2  | snappy | xerial snappy-java stream (below), 32 KiB blocks            | xerial stream, or one raw block    |
| 3  | lz4    | LZ4 frame: 64 KiB independent blocks, no content size or     | any LZ4 frame; for magic 0 the     |
|    |        | checksum (``KafkaLZ4BlockOutputStream``), level 9 by default | broken header checksum (below)     |
| 4  | zstd   | one zstd frame, level 3 by default                          | zstd frames with or without size   |

xerial snappy-java stream (``SnappyOutputStream``):

| bytes | field                                  |
|-------|----------------------------------------|
| 0-7   | magic ``82 53 4e 41 50 50 59 00`` (``\\x82SNAPPY\\0``) |
| 8-11  | int32 BE version = 1                    |
| 12-15 | int32 BE minimum compatible version = 1 |
| ...   | blocks: int32 BE compressed length + raw snappy block of at most 32 KiB input |

A decoder also accepts a concatenation of such streams (the header may reappear between blocks),
as snappy-java does, and plain raw snappy data without the header, as Kafka's clients do.

LZ4 and magic 0: Kafka before 0.10 wrote the frame-descriptor checksum (HC byte) over the 4 magic
bytes as well as the descriptor, and Kafka still ignores that checksum when reading magic-0
messages. :func:`decompress` with ``magic=0`` therefore recomputes the correct HC before decoding;
:func:`compress` with ``magic=0`` writes the historical (broken) one, for tests of legacy reading.

Decompression bombs: a few bytes of a compressed stream can claim gigabytes (a zstd RLE block
turns 4 bytes into 128 KiB; a raw snappy block or an LZ4/zstd frame header declares its own
content size). :func:`decompress` never produces more than ``max_size`` bytes, by default
:data:`MAX_DECOMPRESSED_BYTES`: gzip and LZ4 stop inflating one byte past it, snappy checks each
block's declared length before decoding it, and zstd is decoded in one call when the frame and
block headers (RFC 8878: content size, block sizes, at most 128 KiB out of a compressed block)
bound its output below it, else into an output buffer of ``max_size + 1`` bytes that the decoder
cannot write past. Above the bound, :class:`CorruptRecordError` (``max_size`` in its context),
and nothing past it was allocated. A leader append passes the topic's ``max.message.bytes`` as the
bound (``storage.validator``): a bomb then costs at most that much memory before it is refused.

Compressed bytes differ between libraries and versions (see the storage reference §1.7): treat them
as opaque and compare decompressed records. Errors: an unknown codec id raises
:class:`UnsupportedCompressionError`; data that does not decode raises :class:`CorruptRecordError`
chained ``from`` the library's error.
"""

from __future__ import annotations

import struct
import zlib
from enum import IntEnum

import cramjam
import lz4.frame
import numpy as np

from tidelog.errors import CorruptRecordError, UnsupportedCompressionError

Buffer = bytes | bytearray | memoryview


class CompressionType(IntEnum):
    """Codec id stored in attribute bits 0-2 of a batch (Kafka ``CompressionType``)."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4

    @classmethod
    def from_id(cls, codec_id: int) -> CompressionType:
        """The codec for an id; UnsupportedCompressionError names an unknown id."""
        if 0 <= codec_id < len(_BY_ID):
            return _BY_ID[codec_id]  # a tuple index: Enum(value) costs ~1 us on every batch header read
        raise UnsupportedCompressionError(f"unknown compression codec id {codec_id}")

    @classmethod
    def from_name(cls, name: str) -> CompressionType:
        """Kafka's codec names (``compression.type``): none/uncompressed, gzip, snappy, lz4, zstd."""
        codec = _BY_NAME.get(name.strip().lower())
        if codec is None:
            raise UnsupportedCompressionError(f"unknown compression type name {name!r}")
        return codec

    @property
    def kafka_name(self) -> str:
        """Kafka's name of the codec (``none``, ``gzip``, ...)."""
        return self.name.lower()


_BY_NAME = {
    "none": CompressionType.NONE,
    "uncompressed": CompressionType.NONE,
    "gzip": CompressionType.GZIP,
    "snappy": CompressionType.SNAPPY,
    "lz4": CompressionType.LZ4,
    "zstd": CompressionType.ZSTD,
}
_BY_ID: tuple[CompressionType, ...] = tuple(CompressionType)

GZIP_DEFAULT_LEVEL = 6
LZ4_DEFAULT_LEVEL = 9
ZSTD_DEFAULT_LEVEL = 3

XERIAL_MAGIC = b"\x82SNAPPY\x00"
XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
XERIAL_BLOCK_SIZE = 32 * 1024
_INT32 = struct.Struct(">i")

# LZ4 frame: 4-byte magic, FLG, BD, [8-byte content size], HC.
_LZ4_MAGIC = b"\x04\x22\x4d\x18"
_LZ4_FLG_CONTENT_SIZE = 0x08

# The most one compressed stream may decompress to: 2.5x the 100 MiB a client may send in one
# request (socket.request.max.bytes' default), so any batch a client can produce uncompressed
# also decompresses; a batch claiming more is refused before it is allocated (module doc).
MAX_DECOMPRESSED_BYTES = 256 << 20


# --- public entry points ---------------------------------------------------------------------

def compress(codec: int, data: Buffer, level: int | None = None, *, magic: int = 2) -> bytes:
    """Compress ``data`` into the stream a Kafka client writes for ``codec`` (see the table)."""
    codec = CompressionType.from_id(codec)
    if codec is CompressionType.NONE:
        return bytes(data)
    if codec is CompressionType.GZIP:
        return _gzip_compress(data, GZIP_DEFAULT_LEVEL if level is None else level)
    if codec is CompressionType.SNAPPY:
        return _snappy_compress(data)
    if codec is CompressionType.LZ4:
        return _lz4_compress(data, LZ4_DEFAULT_LEVEL if level is None else level, magic)
    return bytes(cramjam.zstd.compress(data, level=ZSTD_DEFAULT_LEVEL if level is None else level))


def decompress(codec: int, data: Buffer, *, magic: int = 2, max_size: int = MAX_DECOMPRESSED_BYTES) -> bytes:
    """Decode one compressed stream of ``codec``; CorruptRecordError when it does not decode or
    would decode to more than ``max_size`` bytes (which are then never allocated)."""
    codec = CompressionType.from_id(codec)
    try:
        return _DECODERS[codec](data, magic, max_size)
    except CorruptRecordError:
        raise
    except (zlib.error, cramjam.DecompressionError, RuntimeError, ValueError, struct.error) as err:
        raise CorruptRecordError(f"{codec.kafka_name} data does not decompress: {err}") from err


# --- gzip ------------------------------------------------------------------------------------

def _gzip_compress(data: Buffer, level: int) -> bytes:
    deflater = zlib.compressobj(level, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    member = bytearray(deflater.compress(data) + deflater.flush())
    # Java's GZIPOutputStream (Kafka's clients and cleaner) writes XFL 0 and OS 255 (unknown) where
    # zlib writes its level hint and OS 3 (Unix): with these two header bytes (outside every
    # checksum) our gzip batches are byte-identical to Kafka's for the same records and level.
    member[8:10] = _JAVA_GZIP_XFL_OS
    return bytes(member)


_JAVA_GZIP_XFL_OS = b"\x00\xff"


def _gzip_decompress(data: Buffer, magic: int, limit: int) -> bytes:
    parts = []
    total = 0
    rest: Buffer = data  # zlib reads any buffer; later members arrive as unused_data bytes
    while True:
        inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
        parts.append(inflater.decompress(rest, limit - total + 1))  # one byte past the limit, no more
        total += len(parts[-1])
        _check_size(CompressionType.GZIP, total, limit)
        if not inflater.eof:
            raise CorruptRecordError("gzip stream ends before its trailer")
        rest = inflater.unused_data
        if not rest:
            return b"".join(parts)


# --- snappy (xerial framing) -----------------------------------------------------------------

def _snappy_compress(data: Buffer) -> bytes:
    view = memoryview(data)
    out = [XERIAL_HEADER]
    for start in range(0, len(view), XERIAL_BLOCK_SIZE):
        block = bytes(cramjam.snappy.compress_raw(view[start:start + XERIAL_BLOCK_SIZE]))
        out.append(_INT32.pack(len(block)))
        out.append(block)
    return b"".join(out)


def _snappy_decompress(data: Buffer, magic: int, limit: int) -> bytes:
    view = memoryview(data)
    if bytes(view[:8]) != XERIAL_MAGIC or len(view) < len(XERIAL_HEADER):
        return _snappy_raw(view, 0, limit)
    parts: list[bytes] = []
    pos = len(XERIAL_HEADER)
    total = 0
    while pos < len(view):
        if bytes(view[pos:pos + 8]) == XERIAL_MAGIC:
            pos += len(XERIAL_HEADER)
            continue
        pos = _snappy_block(view, pos, parts, total, limit)
        total += len(parts[-1])
    return b"".join(parts)


def _snappy_block(view: memoryview, pos: int, parts: list[bytes], total: int, limit: int) -> int:
    if pos + 4 > len(view):
        raise CorruptRecordError("snappy stream ends inside a block length", position=pos)
    (length,) = _INT32.unpack_from(view, pos)
    end = pos + 4 + length
    if length < 0 or end > len(view):
        raise CorruptRecordError(f"snappy block length {length} runs past the stream", position=pos)
    parts.append(_snappy_raw(view[pos + 4:end], total, limit))
    return end


def _snappy_raw(block: memoryview, total: int, limit: int) -> bytes:
    """One raw snappy block after ``total`` bytes decoded, whose preamble declares its decoded
    length: checked against ``limit`` before decoding."""
    _check_size(CompressionType.SNAPPY, total + cramjam.snappy.decompress_raw_len(block), limit)
    return bytes(cramjam.snappy.decompress_raw(block))


# --- lz4 -------------------------------------------------------------------------------------

def _lz4_compress(data: Buffer, level: int, magic: int) -> bytes:
    frame = lz4.frame.compress(
        data,
        compression_level=level,
        block_size=lz4.frame.BLOCKSIZE_MAX64KB,
        block_linked=False,
        content_checksum=False,
        store_size=False,
    )
    if magic == 0:
        return _with_header_checksum(frame, broken=True)
    return frame


def _lz4_decompress(data: Buffer, magic: int, limit: int) -> bytes:
    """One LZ4 frame (bytes after its end mark are ignored, as Kafka's KafkaLZ4BlockInputStream does).
    Output comes in growing pieces (the library allocates each piece's ``max_length`` up front)."""
    pending: Buffer = _with_header_checksum(bytes(data), broken=False) if magic == 0 else data
    inflater = lz4.frame.LZ4FrameDecompressor()
    parts: list[bytes] = []
    total, piece = 0, _LZ4_FIRST_PIECE
    while True:
        parts.append(inflater.decompress(pending, max_length=min(piece, limit + 1 - total)))
        pending, total, piece = b"", total + len(parts[-1]), piece * 2
        _check_size(CompressionType.LZ4, total, limit)
        if inflater.eof:
            return b"".join(parts)
        if inflater.needs_input:
            raise CorruptRecordError("LZ4 frame ends before its end mark")


_LZ4_FIRST_PIECE = 256 << 10


def _with_header_checksum(frame: bytes, *, broken: bool) -> bytes:
    """``frame`` with its HC byte set to the correct or to Kafka's historical (broken) value."""
    if len(frame) < 7 or frame[:4] != _LZ4_MAGIC:
        raise CorruptRecordError("not an LZ4 frame (bad magic or too short)")
    hc_pos = 6 + (8 if frame[4] & _LZ4_FLG_CONTENT_SIZE else 0)
    if len(frame) <= hc_pos:
        raise CorruptRecordError("LZ4 frame ends inside its descriptor")
    covered = frame[0:hc_pos] if broken else frame[4:hc_pos]
    hc = (xxh32(covered) >> 8) & 0xFF
    return frame[:hc_pos] + bytes((hc,)) + frame[hc_pos + 1:]


_P1, _P2, _P3, _P4, _P5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
_U32 = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _U32


def xxh32(data: bytes, seed: int = 0) -> int:
    """XXH32 of ``data`` (only used on LZ4 frame descriptors, a few bytes long)."""
    n = len(data)
    pos = 0
    if n >= 16:
        acc = [(seed + _P1 + _P2) & _U32, (seed + _P2) & _U32, seed & _U32, (seed - _P1) & _U32]
        while pos + 16 <= n:
            for i in range(4):
                lane = int.from_bytes(data[pos:pos + 4], "little")
                acc[i] = (_rotl((acc[i] + lane * _P2) & _U32, 13) * _P1) & _U32
                pos += 4
        h = (_rotl(acc[0], 1) + _rotl(acc[1], 7) + _rotl(acc[2], 12) + _rotl(acc[3], 18)) & _U32
    else:
        h = (seed + _P5) & _U32
    h = (h + n) & _U32
    while pos + 4 <= n:
        h = (_rotl((h + int.from_bytes(data[pos:pos + 4], "little") * _P3) & _U32, 17) * _P4) & _U32
        pos += 4
    for b in data[pos:]:
        h = (_rotl((h + b * _P5) & _U32, 11) * _P1) & _U32
    h = ((h ^ (h >> 15)) * _P2) & _U32
    h = ((h ^ (h >> 13)) * _P3) & _U32
    return h ^ (h >> 16)


# --- zstd / none -----------------------------------------------------------------------------

_ZSTD_MAGIC = 0xFD2FB528
_ZSTD_SKIPPABLE = 0x184D2A50  # magics 0x184D2A50..5F: a skippable frame, u32 LE size, then content
_ZSTD_BLOCK_MAX = 128 << 10  # RFC 8878 Block_Maximum_Size: the most a compressed block decodes to
_ZSTD_RLE, _ZSTD_COMPRESSED, _ZSTD_RESERVED = 1, 2, 3


def _zstd_decompress(data: Buffer, magic: int, limit: int) -> bytes:
    view = memoryview(data)
    least, most = _zstd_bounds(view, limit)
    _check_size(CompressionType.ZSTD, least, limit)  # headers alone prove it too large: nothing decoded
    if most <= limit:
        return bytes(cramjam.zstd.decompress(view))
    return _zstd_bounded(view, limit)


def _zstd_bounded(view: memoryview, limit: int) -> bytes:
    """Decode into a buffer of ``limit + 1`` bytes, for streams whose headers do not bound them
    below ``limit`` (each compressed block may hold up to 128 KiB). The buffer is left
    uninitialised, so only what is decoded takes memory."""
    out = np.empty(limit + 1, np.uint8)
    try:
        size = cramjam.zstd.decompress_into(view, out)
    except cramjam.DecompressionError as err:
        if _WRITE_ZERO in str(err):  # the output buffer is full: the stream holds more than limit
            _check_size(CompressionType.ZSTD, limit + 1, limit)
        raise
    _check_size(CompressionType.ZSTD, size, limit)
    return out[:size].tobytes()


_WRITE_ZERO = "failed to write whole buffer"  # cramjam's error when the output buffer is too small


def _zstd_bounds(view: memoryview, limit: int) -> tuple[int, int]:
    """``(least, most)`` that ``view``'s zstd frames decode to, read from frame and block headers
    only (counting stops once ``least`` is above ``limit``). Where the bytes stop being zstd
    frames, counting stops too: the decoder refuses that point without producing anything past it."""
    pos = least = most = 0
    try:
        while pos < len(view) and least <= limit:
            magic = _u32le(view, pos)
            if magic & 0xFFFFFFF0 == _ZSTD_SKIPPABLE:
                pos += 8 + _u32le(view, pos + 4)
            elif magic == _ZSTD_MAGIC:
                pos, frame_least, frame_most = _zstd_frame_bounds(view, pos + 4, limit - least)
                least, most = least + frame_least, most + frame_most
            else:
                break
    except _NotZstd:
        pass
    return least, most


class _NotZstd(Exception):
    """The bytes stop being a well-formed zstd frame here (the decoder will say why)."""


def _zstd_frame_bounds(view: memoryview, pos: int, room: int) -> tuple[int, int, int]:
    """(position after the frame, least, most of its content): both the declared content size
    when present (the decoder allocates that), else over blocks: raw and RLE blocks their size,
    compressed ones 0 to 128 KiB. Walks one 3-byte header per block; stops once ``least`` is
    above ``room``."""
    descriptor = _byte(view, pos)
    size_field = (1 if descriptor & 0x20 else 0, 2, 4, 8)[descriptor >> 6]
    pos += 1 + (0 if descriptor & 0x20 else 1) + (0, 1, 2, 4)[descriptor & 3] + size_field
    declared = int.from_bytes(view[pos - size_field:pos], "little") + (256 if size_field == 2 else 0)
    if size_field and declared > room:
        return pos, declared, declared
    least = most = 0
    while least <= room:
        header = _byte(view, pos) | _byte(view, pos + 1) << 8 | _byte(view, pos + 2) << 16
        kind, size = header >> 1 & 3, header >> 3
        if kind == _ZSTD_RESERVED:
            raise _NotZstd
        exact = kind != _ZSTD_COMPRESSED
        least, most = least + (size if exact else 0), most + (size if exact else _ZSTD_BLOCK_MAX)
        pos += 3 + (1 if kind == _ZSTD_RLE else size)
        if header & 1:  # Last_Block
            end = pos + (4 if descriptor & 0x04 else 0)
            return (end, declared, declared) if size_field else (end, least, most)
    return pos, least, most


def _byte(view: memoryview, pos: int) -> int:
    if pos >= len(view):
        raise _NotZstd
    return view[pos]


def _u32le(view: memoryview, pos: int) -> int:
    if pos + 4 > len(view):
        raise _NotZstd
    return int.from_bytes(view[pos:pos + 4], "little")


def _none_decompress(data: Buffer, magic: int, limit: int) -> bytes:
    _check_size(CompressionType.NONE, len(data), limit)
    return bytes(data)


def _check_size(codec: CompressionType, size: int, limit: int) -> None:
    if size > limit:
        raise CorruptRecordError(f"{codec.kafka_name} data decompresses to more than {limit} bytes",
                                 max_size=limit)


_DECODERS = {
    CompressionType.NONE: _none_decompress,
    CompressionType.GZIP: _gzip_decompress,
    CompressionType.SNAPPY: _snappy_decompress,
    CompressionType.LZ4: _lz4_decompress,
    CompressionType.ZSTD: _zstd_decompress,
}
