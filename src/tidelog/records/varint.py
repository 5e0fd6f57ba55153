"""Kafka's variable-length integers (``ByteUtils``), as used inside v2 records.

| kind            | value range        | wire form                                         | max bytes |
|-----------------|--------------------|---------------------------------------------------|-----------|
| varint          | int32              | zig-zag ``(n << 1) ^ (n >> 31)`` then LEB128      | 5         |
| varlong         | int64              | zig-zag ``(n << 1) ^ (n >> 63)`` then LEB128      | 10        |
| unsigned varint | uint32 (or int32 as two's complement) | LEB128, no zig-zag             | 5         |

LEB128: 7 bits per byte, least significant group first, the high bit (0x80) of a byte says
"another byte follows". Like Kafka's reader, a decoder takes the low 32 (64) bits of a value whose
last allowed byte carries more bits than fit, and rejects a continuation bit on the last allowed
byte. Decoders return ``(value, position after the value)``; a truncated or over-long encoding
raises :class:`~tidelog.errors.CorruptRecordError` with the byte position where it started.

The record decoder in :mod:`tidelog.records.record` inlines the one-byte case of these functions
for speed and falls back to :func:`read_raw_varint` for longer values.
"""

from __future__ import annotations

from tidelog.errors import CorruptRecordError, InvalidRecordError

INT32_MIN = -(1 << 31)
INT32_MAX = (1 << 31) - 1
INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1
UINT32_MAX = (1 << 32) - 1

VARINT_MAX_BYTES = 5
VARLONG_MAX_BYTES = 10

_MASK = {VARINT_MAX_BYTES: UINT32_MAX, VARLONG_MAX_BYTES: (1 << 64) - 1}


# --- encoding --------------------------------------------------------------------------------

def _leb128(raw: int) -> bytes:
    """Unsigned LEB128 of a non-negative ``raw``."""
    if raw < 0x80:
        return bytes((raw,))
    out = bytearray()
    while raw >= 0x80:
        out.append((raw & 0x7F) | 0x80)
        raw >>= 7
    out.append(raw)
    return bytes(out)


def _check_range(n: int, low: int, high: int, kind: str) -> None:
    if not low <= n <= high:
        raise InvalidRecordError(f"value {n} does not fit a {kind}", low=low, high=high)


def zigzag_bytes(n: int) -> bytes:
    """Zig-zag LEB128 of ``n`` without a range check (the caller guarantees int64, or int32 for
    a varint field: zig-zag 64 and 32 agree on int32 values). The fast path of the encoders."""
    raw = (n << 1) ^ (n >> 63)
    if raw < 0x80:
        return _ONE_BYTE[raw]
    if raw < 0x4000:
        return bytes(((raw & 0x7F) | 0x80, raw >> 7))
    return _leb128(raw & _MASK[VARLONG_MAX_BYTES])


_ONE_BYTE = [bytes((i,)) for i in range(0x80)]


def encode_varint(n: int) -> bytes:
    """Zig-zag varint of an int32 (1-5 bytes)."""
    if not INT32_MIN <= n <= INT32_MAX:
        _check_range(n, INT32_MIN, INT32_MAX, "varint (int32)")
    return zigzag_bytes(n)


def encode_varlong(n: int) -> bytes:
    """Zig-zag varlong of an int64 (1-10 bytes)."""
    if not INT64_MIN <= n <= INT64_MAX:
        _check_range(n, INT64_MIN, INT64_MAX, "varlong (int64)")
    return zigzag_bytes(n)


def encode_unsigned_varint(n: int) -> bytes:
    """Unsigned varint of a uint32; a negative int32 is written as its two's complement (as Kafka)."""
    _check_range(n, INT32_MIN, UINT32_MAX, "unsigned varint (uint32)")
    return _leb128(n & UINT32_MAX)


def size_of_varint(n: int) -> int:
    """Bytes :func:`encode_varint` writes for ``n`` (no range check)."""
    return _size_of_raw(((n << 1) ^ (n >> 31)) & UINT32_MAX)


def size_of_varlong(n: int) -> int:
    """Bytes :func:`encode_varlong` writes for ``n`` (no range check)."""
    return _size_of_raw(((n << 1) ^ (n >> 63)) & _MASK[VARLONG_MAX_BYTES])


def size_of_unsigned_varint(n: int) -> int:
    """Bytes :func:`encode_unsigned_varint` writes for ``n``."""
    return _size_of_raw(n & UINT32_MAX)


def _size_of_raw(raw: int) -> int:
    return max(1, (raw.bit_length() + 6) // 7)


# --- decoding --------------------------------------------------------------------------------

def read_raw_varint(buf: bytes | bytearray | memoryview, pos: int, max_bytes: int) -> tuple[int, int]:
    """Unsigned LEB128 at ``pos`` of at most ``max_bytes`` bytes, masked to 32 or 64 bits.

    Raises CorruptRecordError when the input ends first or the last allowed byte still has its
    continuation bit.
    """
    raw = 0
    shift = 0
    start = pos
    try:
        for _ in range(max_bytes):
            b = buf[pos]
            pos += 1
            raw |= (b & 0x7F) << shift
            if b < 0x80:
                return raw & _MASK[max_bytes], pos
            shift += 7
    except IndexError:
        raise CorruptRecordError("truncated varint", position=start) from None
    raise CorruptRecordError(f"varint longer than {max_bytes} bytes", position=start)


def decode_varint(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    """Zig-zag int32 at ``pos``: ``(value, next position)``."""
    raw, pos = read_raw_varint(buf, pos, VARINT_MAX_BYTES)
    return (raw >> 1) ^ -(raw & 1), pos


def decode_varlong(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    """Zig-zag int64 at ``pos``: ``(value, next position)``."""
    raw, pos = read_raw_varint(buf, pos, VARLONG_MAX_BYTES)
    return (raw >> 1) ^ -(raw & 1), pos


def decode_unsigned_varint(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    """Unsigned varint at ``pos``: ``(value in [0, 2**32), next position)``."""
    return read_raw_varint(buf, pos, VARINT_MAX_BYTES)
