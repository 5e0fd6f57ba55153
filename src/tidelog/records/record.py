"""One v2 record (``DefaultRecord``), the record value type, and the records-area decoder.

A v2 record, as it follows the batch header (uncompressed) or inside the decompressed stream:

| field             | type    | meaning                                                        |
|-------------------|---------|----------------------------------------------------------------|
| length            | varint  | bytes of the rest of the record (excludes this field)          |
| attributes        | int8    | unused, written 0, ignored when read                           |
| timestampDelta    | varlong | record timestamp - batch baseTimestamp (may be < 0 after KIP-534) |
| offsetDelta       | varint  | record offset - batch baseOffset                               |
| keyLength         | varint  | -1 (any negative when read) = null key                         |
| key               | bytes   |                                                                |
| valueLength       | varint  | -1 (any negative when read) = null value (a tombstone)         |
| value             | bytes   |                                                                |
| headersCount      | varint  | must be >= 0 and <= the bytes left                             |
| headerKeyLength   | varint  | must be >= 0 (null header keys are rejected)                   |
| headerKey         | bytes   | UTF-8                                                          |
| headerValueLength | varint  | -1 (any negative when read) = null value                       |
| headerValue       | bytes   |                                                                |

Example: key ``k``, value ``v``, deltas 0, no headers = ``10 00 00 00 02 6b 02 76 00``; the
tombstone of key ``k`` = ``0e 00 00 00 02 6b 01 00``.

Reader checks (Kafka ``DefaultRecord.readFrom`` and the batch iterator), each raising
:class:`InvalidRecordError` naming the batch base offset and the record index: declared length
larger than the bytes left; header count negative or larger than the bytes left; negative header
key length; bytes consumed != declared length; input ending inside a record ("premature EOF").
Varints longer than allowed, and input ending inside a varint of 3 or more bytes, raise
:class:`CorruptRecordError`: callers treat both errors as "this batch does not decode"
(``tidelog.records.RECORD_ERRORS``).

Header keys are decoded and encoded as UTF-8 with ``surrogateescape``, so a key that is not valid
UTF-8 survives a decode/encode round trip byte for byte (Kafka would replace such bytes).

Cost: :func:`decode_records` reads from one ``bytes`` object with the 1- and 2-byte varint cases
inlined, two Python calls per record (its key/value helper and ``make``); building a
:class:`Record` costs about as much as decoding it, so hot loops pass :func:`record_tuple`. Bulk
key scans belong to :mod:`tidelog.records.scan`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from enum import IntEnum
from typing import TypeVar

from tidelog.errors import InvalidRecordError
from tidelog.records.varint import (
    INT32_MAX,
    INT32_MIN,
    INT64_MAX,
    INT64_MIN,
    VARINT_MAX_BYTES,
    VARLONG_MAX_BYTES,
    decode_varint,
    read_raw_varint,
    zigzag_bytes,
)

Header = tuple[str, bytes | None]
"""One record header: ``(key, value)``; the key is a ``str`` (never None), the value may be None."""



class TimestampType(IntEnum):
    """What a batch's timestamps mean (Kafka ``TimestampType``; attribute bit 3 in v1/v2)."""

    NO_TIMESTAMP = -1  # magic 0 (no timestamps at all)
    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


@dataclass(frozen=True, slots=True)
class Record:
    """One record with its absolute offset and its effective timestamp.

    ``timestamp`` is what a consumer sees: for LogAppendTime batches the batch maxTimestamp, else
    baseTimestamp + timestampDelta (-1 for magic-0 messages).
    """

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()


_new_object = object.__new__
_set_offset = Record.offset.__set__  # type: ignore[attr-defined]
_set_timestamp = Record.timestamp.__set__  # type: ignore[attr-defined]
_set_key = Record.key.__set__  # type: ignore[attr-defined]
_set_value = Record.value.__set__  # type: ignore[attr-defined]
_set_headers = Record.headers.__set__  # type: ignore[attr-defined]


def make_record(
    offset: int, timestamp: int, key: bytes | None, value: bytes | None, headers: tuple[Header, ...]
) -> Record:
    """A :class:`Record` built without the frozen dataclass ``__init__`` (twice as fast).

    The generated ``__init__`` of a frozen dataclass sets each field through
    ``object.__setattr__``; the slot descriptors do the same store directly. Equal to
    ``Record(offset, timestamp, key, value, headers)`` in every way.
    """
    record = _new_object(Record)
    _set_offset(record, offset)
    _set_timestamp(record, timestamp)
    _set_key(record, key)
    _set_value(record, value)
    _set_headers(record, headers)
    return record


def record_tuple(
    offset: int, timestamp: int, key: bytes | None, value: bytes | None, headers: tuple[Header, ...]
) -> tuple[int, int, bytes | None, bytes | None, tuple[Header, ...]]:
    """The record as a plain tuple, for hot loops that do not need :class:`Record` objects."""
    return (offset, timestamp, key, value, headers)


# --- encoding --------------------------------------------------------------------------------

def encode_record(
    offset_delta: int,
    timestamp_delta: int,
    key: bytes | bytearray | memoryview | None,
    value: bytes | bytearray | memoryview | None,
    headers: Iterable[Header] = (),
) -> bytes:
    """One complete record: length varint, then the body of the table above (attributes 0).

    InvalidRecordError when ``offset_delta`` is not an int32, ``timestamp_delta`` not an int64,
    or a header key is not a ``str``.
    """
    if not INT32_MIN <= offset_delta <= INT32_MAX or not INT64_MIN <= timestamp_delta <= INT64_MAX:
        raise InvalidRecordError(
            f"record deltas out of range: offset {offset_delta}, timestamp {timestamp_delta}")
    parts = [b"\x00", zigzag_bytes(timestamp_delta), zigzag_bytes(offset_delta)]
    _put_bytes(parts, key)
    _put_bytes(parts, value)
    if headers:
        _put_headers(parts, headers)
    else:
        parts.append(b"\x00")
    body = b"".join(parts)
    return zigzag_bytes(len(body)) + body


def _put_bytes(parts: list[bytes | bytearray | memoryview], data: bytes | bytearray | memoryview | None) -> None:
    if data is None:
        parts.append(b"\x01")  # varint -1
    else:
        parts.append(zigzag_bytes(len(data)))
        parts.append(data)


def _put_headers(parts: list[bytes | bytearray | memoryview], headers: Iterable[Header]) -> None:
    headers = tuple(headers)
    parts.append(zigzag_bytes(len(headers)))
    for index, (key, value) in enumerate(headers):
        if not isinstance(key, str):
            raise InvalidRecordError(f"header key must be a str, got {type(key).__name__}", header=index)
        _put_bytes(parts, key.encode("utf-8", "surrogateescape"))
        _put_bytes(parts, value)


# --- decoding --------------------------------------------------------------------------------

T = TypeVar("T")
RecordFactory = Callable[[int, int, "bytes | None", "bytes | None", "tuple[Header, ...]"], T]


def decode_records(
    data: bytes,
    count: int,
    base_offset: int,
    base_timestamp: int,
    log_append_time: int | None,
    make: RecordFactory[T] = make_record,  # type: ignore[assignment]
) -> Iterator[T]:
    """Decode ``count`` records filling exactly ``data``; yield ``make(offset, ts, key, value, headers)``.

    ``log_append_time`` (when not None) replaces every record timestamp. Lazy: each record is
    decoded when it is asked for. Raises InvalidRecordError ("Incorrect declared batch size") when
    ``data`` ends early or has bytes left after ``count`` records, and for the per-record checks in
    the module docstring.
    """
    return _records(data, count, base_offset, base_timestamp, log_append_time, make)


def _records(data: bytes, count: int, base_offset: int, base_timestamp: int, log_append_time: int | None,
             make: RecordFactory[T]) -> Iterator[T]:
    """:func:`decode_records`' loop. The 1- and 2-byte cases of the varints are inlined (3x faster
    than calls): a record costs two Python calls, :func:`_key_and_value` and ``make``."""
    pos = index = 0
    try:
        for index in range(count):
            raw = data[pos]
            if raw < 0x80:
                pos += 1
            elif data[pos + 1] < 0x80:
                raw, pos = (raw & 0x7F) | (data[pos + 1] << 7), pos + 2
            else:
                raw, pos = read_raw_varint(data, pos, VARINT_MAX_BYTES)
            start, length = pos, (raw >> 1) ^ -(raw & 1)
            raw = data[pos + 1]  # pos + 1: skip the unused attributes byte
            if raw < 0x80:
                pos += 2
            elif data[pos + 2] < 0x80:
                raw, pos = (raw & 0x7F) | (data[pos + 2] << 7), pos + 3
            else:
                raw, pos = read_raw_varint(data, pos + 1, VARLONG_MAX_BYTES)
            timestamp = base_timestamp + ((raw >> 1) ^ -(raw & 1))
            raw = data[pos]
            if raw < 0x80:
                pos += 1
            elif data[pos + 1] < 0x80:
                raw, pos = (raw & 0x7F) | (data[pos + 1] << 7), pos + 2
            else:
                raw, pos = read_raw_varint(data, pos, VARINT_MAX_BYTES)
            key, value, pos = _key_and_value(data, pos)
            if data[pos] == 0:
                pos += 1
                headers: tuple[Header, ...] = ()
            else:
                headers, pos = _decode_headers(data, pos, start + length, base_offset, index)
            if pos - start != length:
                raise _size_mismatch(length, pos - start, base_offset, index)
            yield make(base_offset + ((raw >> 1) ^ -(raw & 1)),
                       timestamp if log_append_time is None else log_append_time, key, value, headers)
    except IndexError:
        raise InvalidRecordError("Incorrect declared batch size, premature EOF reached",
                                 offset=base_offset, record=index) from None
    if pos != len(data):
        raise InvalidRecordError(f"Incorrect declared batch size, {len(data) - pos} bytes remain after "
                                 f"{count} records", offset=base_offset)


def _key_and_value(data: bytes, pos: int) -> tuple[bytes | None, bytes | None, int]:
    """The key and the value at ``pos`` (each a length varint, odd = negative = null, then the
    bytes) and the position after them; IndexError when ``data`` ends inside a length."""
    raw = data[pos]
    if raw < 0x80:
        pos += 1
    elif data[pos + 1] < 0x80:
        raw, pos = (raw & 0x7F) | (data[pos + 1] << 7), pos + 2
    else:
        raw, pos = read_raw_varint(data, pos, VARINT_MAX_BYTES)
    if raw & 1:
        key = None
    else:
        raw = pos + (raw >> 1)
        key, pos = data[pos:raw], raw
    raw = data[pos]
    if raw < 0x80:
        pos += 1
    elif data[pos + 1] < 0x80:
        raw, pos = (raw & 0x7F) | (data[pos + 1] << 7), pos + 2
    else:
        raw, pos = read_raw_varint(data, pos, VARINT_MAX_BYTES)
    if raw & 1:
        return key, None, pos
    raw = pos + (raw >> 1)
    return key, data[pos:raw], raw


def _size_mismatch(length: int, read: int, base_offset: int, index: int) -> InvalidRecordError:
    return InvalidRecordError(f"Invalid record size: expected to read {length} bytes in record payload, "
                              f"but instead read {read}", offset=base_offset, record=index)


def _decode_headers(
    data: bytes, pos: int, record_end: int, base_offset: int, index: int
) -> tuple[tuple[Header, ...], int]:
    """The header list at ``pos`` (count varint first); ``(headers, next position)``."""
    count, pos = decode_varint(data, pos)
    if count < 0 or count > len(data) - pos:
        raise InvalidRecordError(
            f"Found invalid number of record headers {count}", offset=base_offset, record=index)
    headers = []
    for _ in range(count):
        key_size, pos = decode_varint(data, pos)
        if key_size < 0:
            raise InvalidRecordError(
                f"Invalid negative header key size {key_size}", offset=base_offset, record=index)
        key = data[pos:pos + key_size].decode("utf-8", "surrogateescape")
        pos += key_size
        value_size, pos = decode_varint(data, pos)
        value = None
        if value_size >= 0:
            value = data[pos:pos + value_size]
            pos += value_size
        headers.append((key, value))
        if pos > record_end:
            break  # the caller reports the size mismatch
    return tuple(headers), pos


def decode_record(
    data: bytes, pos: int, base_offset: int = 0, base_timestamp: int = 0
) -> tuple[Record, int]:
    """The single record at ``pos`` of ``data``: ``(record, next position)``.

    Same checks as :func:`decode_records`, except that bytes after the record are allowed.
    """
    raw, body = read_raw_varint(data, pos, VARINT_MAX_BYTES)
    length = (raw >> 1) ^ -(raw & 1)
    if length < 0 or body + length > len(data):
        raise InvalidRecordError(
            f"Invalid record size {length} at position {pos}: {len(data) - body} bytes remain",
            offset=base_offset)
    (record,) = decode_records(bytes(data[pos:body + length]), 1, base_offset, base_timestamp, None)
    return record, body + length


__all__ = [
    "Header",
    "Record",
    "TimestampType",
    "decode_record",
    "decode_records",
    "encode_record",
    "make_record",
    "record_tuple",
]
