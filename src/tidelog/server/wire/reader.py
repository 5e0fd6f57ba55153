"""Kafka's request encoding read in place: the primitives of the purpose-built request decoders.

Every reader takes the frame (``bytes``, or any buffer ``struct.unpack_from`` reads) and a
position, and returns ``(value, position after it)``; nothing is copied but the strings and the
bytes a field holds. The frame's end is the bound of every length: a field whose declared length
runs past it raises :class:`WireError` (Kafka's readers throw a buffer underflow there), never a
short value. A fixed-size field past the end raises ``struct.error``, and the first byte of a
compact length past the end ``IndexError`` (read inline: the one-byte case is one index), which
the decoders turn into WireError; :func:`tidelog.server.codec.decode_request` makes any of them a
malformed request.

| kind                  | classic (non-flexible)          | compact (flexible versions)                    |
|-----------------------|---------------------------------|------------------------------------------------|
| string                | int16 length, then UTF-8        | uvarint length+1, then UTF-8                   |
| nullable string       | int16 -1 (any negative) is null | uvarint 0 is null                              |
| array                 | int32 count                     | uvarint count+1                                |
| nullable bytes        | int32 -1 (any negative) is null | uvarint 0 is null                              |
| tagged fields         | (none)                          | uvarint count, then per field: uvarint tag,    |
|                       |                                 | uvarint size, ``size`` bytes                   |

An unsigned varint is at most 5 bytes, its value taken as a Java ``int`` (the low 32 bits,
two's complement), as Kafka's ``readUnsignedVarint``: a length of 2**31 or more is negative. A
negative length or count is null where the field is nullable and malformed where it is not
(Kafka: "non-nullable field ... was serialized as null"); an array count larger than the bytes
left is malformed before any element is read (Kafka refuses such a collection the same way).
Unknown tagged fields are skipped, bounded by the frame.
"""

from __future__ import annotations

import struct

I16 = struct.Struct(">h")
I32 = struct.Struct(">i")
_HEAD = struct.Struct(">hhih")  # api_key, api_version, correlation_id, client_id length
_UINT32 = 1 << 32
_INT32_MAX = (1 << 31) - 1


class WireError(ValueError):
    """Bytes that do not parse as the field being read; the message names the field and the byte."""


def short(what: str, need: int, pos: int, data: bytes) -> WireError:
    """The error of ``what``, declared ``need`` bytes long at ``pos``, running past the frame."""
    return WireError(f"{what}: {need} bytes declared at byte {pos}, {len(data) - pos} left in the frame "
                     f"(runs past the end)")


def uvarint(data: bytes, pos: int, what: str) -> tuple[int, int]:
    """An unsigned varint of at most 5 bytes as a Java int (see the module doc)."""
    try:
        b = data[pos]
        if b < 0x80:
            return b, pos + 1
        value, shift = b & 0x7F, 7
        for i in range(1, 5):
            b = data[pos + i]
            value |= (b & 0x7F) << shift
            if b < 0x80:
                value &= _UINT32 - 1
                return (value - _UINT32 if value > _INT32_MAX else value), pos + i + 1
            shift += 7
    except IndexError:
        raise WireError(f"{what}: the frame ends inside a varint at byte {pos}") from None
    raise WireError(f"{what}: a varint longer than 5 bytes at byte {pos}")


def compact_length(data: bytes, pos: int, what: str) -> tuple[int, int]:
    """A compact length or count (uvarint minus one; negative: null)."""
    n, pos = uvarint(data, pos, what)
    return (n - 1 if n > 0 else -1), pos


def text(data: bytes, pos: int, n: int, what: str) -> tuple[str, int]:
    """The ``n`` UTF-8 bytes at ``pos`` as a string."""
    end = pos + n
    if end > len(data):
        raise short(what, n, pos, data)
    try:
        return str(data[pos:end], "utf-8"), end
    except UnicodeDecodeError as e:
        raise WireError(f"{what}: not UTF-8 at byte {pos}: {e.reason}") from None


def string(data: bytes, pos: int, compact: bool, what: str) -> tuple[str, int]:
    """A non-nullable string (null is malformed)."""
    value, end = nullable_string(data, pos, compact, what)
    if value is None:
        raise WireError(f"{what}: null where a string is required, at byte {pos}")
    return value, end


def nullable_string(data: bytes, pos: int, compact: bool, what: str) -> tuple[str | None, int]:
    """A nullable string (any negative length: null)."""
    if compact:
        n = data[pos]
        n, pos = (n - 1, pos + 1) if n < 0x80 else compact_length(data, pos, what)
    else:
        n, pos = I16.unpack_from(data, pos)[0], pos + 2
    return (None, pos) if n < 0 else text(data, pos, n, what)


def count(data: bytes, pos: int, compact: bool, what: str) -> tuple[int, int]:
    """A non-nullable array's element count, each element at least one byte (so no more than
    the bytes left)."""
    if compact:
        n = data[pos]
        n, pos = (n - 1, pos + 1) if n < 0x80 else compact_length(data, pos, what)
    else:
        n, pos = I32.unpack_from(data, pos)[0], pos + 4
    if n < 0:
        raise WireError(f"{what}: null array (count {n}) where an array is required, at byte {pos}")
    if n > len(data) - pos:
        raise WireError(f"{what}: {n} elements declared at byte {pos}, {len(data) - pos} bytes left in the frame "
                        f"(runs past the end)")
    return n, pos


def tagged_fields(data: bytes, pos: int, what: str,
                  known: dict[int, str] | None = None) -> tuple[dict[str, bytes] | None, int]:
    """Skip a tagged-field section; the raw bytes of the ``known`` tags (tag -> name) come back by
    name (None when there are none: the common case costs one byte and no allocation)."""
    if data[pos:pos + 1] == b"\0":
        return None, pos + 1
    n, pos = uvarint(data, pos, f"{what} tagged fields")
    found: dict[str, bytes] | None = None
    for _ in range(n):
        tag, pos = uvarint(data, pos, f"{what} tag")
        size, pos = uvarint(data, pos, f"{what} tag {tag} size")
        if size < 0 or pos + size > len(data):
            raise WireError(f"{what} tag {tag}: {size} bytes declared at byte {pos}, {len(data) - pos} left "
                            f"in the frame (runs past the end)")
        if known and tag in known:
            found = found or {}
            found[known[tag]] = bytes(data[pos:pos + size])
        pos += size
    return found, pos


def skip_tags(data: bytes, pos: int, what: str) -> int:
    """The position after a tagged-field section, every field skipped."""
    if data[pos:pos + 1] == b"\0":  # none: the common case, without a call
        return pos + 1
    return tagged_fields(data, pos, what)[1]


def request_header(frame: bytes, flexible: bool) -> tuple[int, int, int, str | None, int]:
    """``(api_key, api_version, correlation_id, client_id, body position)`` of a request frame:
    header v1, or v2 (its tagged fields skipped) when the API version is ``flexible``. The client
    id is never compact."""
    api_key, version, correlation_id, n = _HEAD.unpack_from(frame)
    pos = _HEAD.size
    client_id = None
    if n >= 0:
        client_id, pos = text(frame, pos, n, "client_id")
    if flexible:
        pos = skip_tags(frame, pos, "request header")
    return api_key, version, correlation_id, client_id, pos
