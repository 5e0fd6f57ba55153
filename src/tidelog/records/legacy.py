"""Legacy message format v0/v1 (``LegacyRecord``): read-only views, plus builders for tests and tools.

A ``.log`` written by a pre-0.11 message format holds log entries, each one message:

| bytes (v0 / v1)    | field            | notes                                                     |
|--------------------|------------------|-----------------------------------------------------------|
| 0-7                | int64 offset     | absolute; for a compressed wrapper: the **last** inner offset |
| 8-11               | int32 size       | bytes that follow (entry = 12 + size)                     |
| 12-15              | uint32 crc       | CRC-32 (IEEE, ``zlib.crc32``) of bytes [16, end)          |
| 16                 | int8 magic       | 0 or 1                                                    |
| 17                 | int8 attributes  | bits 0-2 codec (no zstd), bit 3 LogAppendTime (v1 only)   |
| - / 18-25          | int64 timestamp  | v1 only; wrapper: max inner timestamp or log-append time  |
| 18-21 / 26-29      | int32 keyLength  | -1 = null                                                 |
| ...                | key bytes        |                                                           |
| ...                | int32 valueLength| -1 = null                                                 |
| ...                | value bytes      | wrapper: the compressed concatenation of inner entries    |

Overhead after the 12-byte log header: v0 14 bytes, v1 22 bytes. Inner entries of a wrapper have
the same layout; v0 inner offsets are absolute, v1 inner offsets are relative (0..n-1 as written by
producers) and become ``wrapper offset - last inner offset + inner offset`` (Kafka keeps them
relative when that base would be negative). No headers, producer ids, transactions or control
records exist in these formats.

:class:`LegacyBatch` offers the read-only properties of :class:`~tidelog.records.batch.RecordBatch`
with the legacy values Kafka reports (leader epoch -1, producer fields -1, never control). Properties
that depend on the inner messages of a compressed wrapper (``base_offset``, ``records_count``,
``last_offset_delta``) decompress the wrapper once and cache the result.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from tidelog.errors import CorruptRecordError, InvalidRecordError, UnsupportedCompressionError
from tidelog.records.compression import CompressionType, compress, decompress
from tidelog.records.layout import (
    COMPRESSION_CODEC_MASK,
    LEGACY_HEADER,
    LEGACY_TIMESTAMP_OFFSET,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    RECORD_OVERHEAD_V0,
    RECORD_OVERHEAD_V1,
    TIMESTAMP,
    TIMESTAMP_TYPE_MASK,
)
from tidelog.records.record import Record, TimestampType, make_record

CODEC_MASK = COMPRESSION_CODEC_MASK

_HEADER = LEGACY_HEADER
_TIMESTAMP = TIMESTAMP
_INT32 = struct.Struct(">i")  # key and value lengths

Buffer = bytes | bytearray | memoryview
LegacyMessage = tuple[int, int, bytes | None, bytes | None]
"""``(offset, timestamp, key, value)`` of one message to write."""


def record_overhead(magic: int) -> int:
    """Bytes of a v0/v1 message after the log header, without key and value bytes."""
    return RECORD_OVERHEAD_V0 if magic == 0 else RECORD_OVERHEAD_V1


class _Entry:
    """One parsed log entry (outer or inner); positions are relative to its own buffer."""

    __slots__ = ("offset", "size", "crc", "magic", "attributes", "timestamp", "key", "value")

    def __init__(self, buf: memoryview, pos: int) -> None:
        self.offset, self.size, self.crc, self.magic, self.attributes = _HEADER.unpack_from(buf, pos)
        end = pos + LOG_OVERHEAD + self.size
        if self.magic not in (0, 1) or self.size < record_overhead(self.magic) or end > len(buf):
            raise CorruptRecordError(
                f"invalid legacy message (magic {self.magic}, size {self.size})", position=pos)
        at = pos + LEGACY_TIMESTAMP_OFFSET
        self.timestamp = -1
        if self.magic == 1:
            (self.timestamp,) = _TIMESTAMP.unpack_from(buf, at)
            at += 8
        self.key, at = _read_bytes(buf, at, end)
        self.value, at = _read_bytes(buf, at, end)
        if at != end:
            raise CorruptRecordError(
                f"legacy message has {end - at} bytes after its value", position=pos)


def _read_bytes(buf: memoryview, pos: int, end: int) -> tuple[memoryview | None, int]:
    if pos + 4 > end:
        raise CorruptRecordError("legacy message ends inside a length field", position=pos)
    (size,) = _INT32.unpack_from(buf, pos)
    pos += 4
    if size < 0:
        return None, pos
    if pos + size > end:
        raise CorruptRecordError(f"legacy field of {size} bytes runs past the message", position=pos)
    return buf[pos:pos + size], pos + size


class LegacyBatch:
    """Read-only view over one v0/v1 log entry (a message or a compressed wrapper). No copy.

    A wrapper whose inner messages have another magic is read, as Kafka's readers do (KAFKA-4298:
    v0 messages inside v1 wrappers, written by old brokers); :attr:`inner_magics_match` tells the
    validator, which refuses them on append, and the cleaner, which rewrites them.
    """

    __slots__ = ("_buffer", "_entry", "_inner")

    def __init__(self, buffer: Buffer) -> None:
        view = buffer if isinstance(buffer, memoryview) else memoryview(buffer)
        if len(view) < LOG_OVERHEAD + RECORD_OVERHEAD_V0:
            raise CorruptRecordError(f"legacy entry of {len(view)} bytes is shorter than the minimum")
        entry = _Entry(view, 0)
        self._buffer = view[:LOG_OVERHEAD + entry.size]
        self._entry = entry
        self._inner: list[_Entry] | None = None

    def __repr__(self) -> str:
        e = self._entry
        return (f"LegacyBatch(magic={e.magic}, offset={e.offset}, size={self.size_in_bytes}, "
                f"attributes={e.attributes:#x})")

    # --- header fields -----------------------------------------------------------------------

    @property
    def buffer(self) -> memoryview:
        return self._buffer

    @property
    def batch_length(self) -> int:
        return self._entry.size

    @property
    def size_in_bytes(self) -> int:
        return LOG_OVERHEAD + self._entry.size

    @property
    def magic(self) -> int:
        return self._entry.magic

    @property
    def crc(self) -> int:
        return self._entry.crc

    @property
    def attributes(self) -> int:
        return self._entry.attributes

    @property
    def compression(self) -> CompressionType:
        codec = self._entry.attributes & CODEC_MASK
        if codec == CompressionType.ZSTD:
            raise UnsupportedCompressionError(
                f"zstd is not allowed for magic {self._entry.magic}", offset=self._entry.offset)
        return CompressionType.from_id(codec)

    @property
    def timestamp_type(self) -> TimestampType:
        if self._entry.magic == 0:
            return TimestampType.NO_TIMESTAMP
        if self._entry.attributes & TIMESTAMP_TYPE_MASK:
            return TimestampType.LOG_APPEND_TIME
        return TimestampType.CREATE_TIME

    partition_leader_epoch = property(lambda self: -1, doc="Always -1: no leader epoch before v2.")
    producer_id = property(lambda self: -1, doc="Always -1.")
    producer_epoch = property(lambda self: -1, doc="Always -1.")
    base_sequence = property(lambda self: -1, doc="Always -1.")
    last_sequence = property(lambda self: -1, doc="Always -1.")
    has_producer_id = property(lambda self: False, doc="Always False.")
    is_transactional = property(lambda self: False, doc="Always False.")
    is_control = property(lambda self: False, doc="Always False.")
    has_delete_horizon = property(lambda self: False, doc="Always False.")
    delete_horizon_ms = property(lambda self: None, doc="Always None.")

    @property
    def max_timestamp(self) -> int:
        """The entry's timestamp (v1; the wrapper's for compressed sets), -1 for v0."""
        return self._entry.timestamp

    @property
    def base_timestamp(self) -> int:
        """Same as :attr:`max_timestamp`: legacy entries carry one timestamp."""
        return self._entry.timestamp

    @property
    def last_offset(self) -> int:
        return self._entry.offset

    @property
    def next_offset(self) -> int:
        return self._entry.offset + 1

    @property
    def base_offset(self) -> int:
        """First inner offset (decompresses a wrapper once)."""
        if not self._is_wrapper():
            return self._entry.offset
        return self._absolute_offsets()[0]

    @property
    def last_offset_delta(self) -> int:
        return self.last_offset - self.base_offset

    @property
    def records_count(self) -> int:
        """1 for a plain message, the number of inner messages for a wrapper (decompresses)."""
        return len(self._inner_entries()) if self._is_wrapper() else 1

    # --- validation --------------------------------------------------------------------------

    def compute_crc(self) -> int:
        """CRC-32 (IEEE) of bytes [16, end) of the entry."""
        return zlib.crc32(self._buffer[MAGIC_OFFSET:self.size_in_bytes])

    def is_valid(self) -> bool:
        """Size at least the magic's overhead, buffer holds exactly the entry, and the CRC matches."""
        return self._size_problem() is None and self.compute_crc() == self._entry.crc

    def ensure_valid(self, path: Any = None, position: int | None = None) -> None:
        """Raise CorruptRecordError (with path/position/offset) unless :meth:`is_valid`."""
        problem = self._size_problem()
        if problem is not None:
            raise CorruptRecordError(problem, path=path, position=position, offset=self._entry.offset)
        computed = self.compute_crc()
        if computed != self._entry.crc:
            raise CorruptRecordError(
                f"Record is corrupt (stored crc = {self._entry.crc}, computed crc = {computed})",
                path=path, position=position, offset=self._entry.offset,
                stored_crc=self._entry.crc, computed_crc=computed)

    def _size_problem(self) -> str | None:
        if self.size_in_bytes != len(self._buffer):
            return f"legacy entry declares {self.size_in_bytes} bytes but the buffer holds {len(self._buffer)}"
        return None

    # --- records -----------------------------------------------------------------------------

    def records(self) -> Iterator[Record]:
        """The messages with absolute offsets (a wrapper yields its inner messages)."""
        entry = self._entry
        if not self._is_wrapper():
            yield make_record(entry.offset, entry.timestamp, _opt(entry.key), _opt(entry.value), ())
            return
        log_append = self.timestamp_type is TimestampType.LOG_APPEND_TIME
        for inner, offset in zip(self._inner_entries(), self._absolute_offsets()):
            timestamp = entry.timestamp if log_append and inner.magic > 0 else inner.timestamp
            yield make_record(offset, timestamp, _opt(inner.key), _opt(inner.value), ())

    @property
    def inner_magics_match(self) -> bool:
        """Every inner message has the wrapper's magic (always true for a plain message)."""
        return not self._is_wrapper() or all(e.magic == self._entry.magic for e in self._inner_entries())

    def _is_wrapper(self) -> bool:
        return self._entry.attributes & CODEC_MASK != 0

    def _absolute_offsets(self) -> list[int]:
        inner = self._inner_entries()
        base = self._entry.offset - inner[-1].offset if self._entry.magic > 0 else -1
        if base < 0:
            return [e.offset for e in inner]
        return [base + e.offset for e in inner]

    def _inner_entries(self) -> list[_Entry]:
        if self._inner is None:
            self._inner = self._decode_inner()
        return self._inner

    def _decode_inner(self) -> list[_Entry]:
        entry = self._entry
        if entry.value is None:
            raise InvalidRecordError("compressed legacy message has a null value", offset=entry.offset)
        data = memoryview(decompress(self.compression, entry.value, magic=entry.magic))
        inner = []
        pos = 0
        while pos < len(data):
            if len(data) - pos < LOG_OVERHEAD + RECORD_OVERHEAD_V0:
                raise CorruptRecordError("truncated inner message", offset=entry.offset, position=pos)
            message = _Entry(data, pos)
            _check_inner(entry, message)
            inner.append(message)
            pos += LOG_OVERHEAD + message.size
        if not inner:
            raise InvalidRecordError(
                "Found invalid compressed record set with no inner records", offset=entry.offset)
        return inner


def _check_inner(wrapper: _Entry, inner: _Entry) -> None:
    if inner.attributes & CODEC_MASK:
        raise InvalidRecordError("compressed inner message (double compression)", offset=wrapper.offset)


def _opt(view: memoryview | None) -> bytes | None:
    return None if view is None else view.tobytes()


# --- writing (tests and tools) ---------------------------------------------------------------

def encode_legacy_message(
    offset: int, magic: int, attributes: int, timestamp: int, key: Buffer | None, value: Buffer | None
) -> bytes:
    """One v0/v1 log entry with its CRC (``timestamp`` is ignored for v0)."""
    if magic not in (0, 1):
        raise InvalidRecordError(f"legacy magic must be 0 or 1, got {magic}")
    body = bytearray(struct.pack(">bb", magic, attributes))
    if magic == 1:
        body += _TIMESTAMP.pack(timestamp)
    for field in (key, value):
        body += _INT32.pack(-1 if field is None else len(field))
        if field is not None:
            body += field
    crc = zlib.crc32(body)
    return _HEADER.pack(offset, len(body) + 4, crc, magic, attributes) + body[2:]


def build_legacy_batch(
    messages: Sequence[LegacyMessage],
    *,
    magic: int,
    compression: int = CompressionType.NONE,
    compression_level: int | None = None,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
    log_append_time: int | None = None,
) -> bytes:
    """A v0/v1 message set: one entry per message, or one compressed wrapper holding them all.

    Offsets are absolute and strictly increasing. v1 wrappers store relative inner offsets and the
    last absolute offset outside; their timestamp is the max inner timestamp (CreateTime) or
    ``log_append_time`` (LogAppendTime, which also stamps uncompressed v1 messages).
    """
    codec = CompressionType.from_id(compression)
    _check_legacy_args(messages, magic, codec, timestamp_type, log_append_time)
    if codec is CompressionType.NONE:
        return _plain_message_set(messages, magic, timestamp_type, log_append_time)
    return _wrapper(messages, magic, codec, compression_level, timestamp_type, log_append_time)


def _check_legacy_args(
    messages: Sequence[LegacyMessage], magic: int, codec: CompressionType,
    timestamp_type: TimestampType, log_append_time: int | None,
) -> None:
    if magic not in (0, 1):
        raise InvalidRecordError(f"legacy magic must be 0 or 1, got {magic}")
    if codec is CompressionType.ZSTD:
        raise UnsupportedCompressionError(f"zstd is not allowed for magic {magic}")
    if not messages:
        raise InvalidRecordError("a legacy message set needs at least one message")
    offsets = [m[0] for m in messages]
    if any(b <= a for a, b in zip(offsets, offsets[1:])):
        raise InvalidRecordError("legacy message offsets must strictly increase", offsets=offsets)
    if timestamp_type is TimestampType.LOG_APPEND_TIME and (magic == 0 or log_append_time is None):
        raise InvalidRecordError("LogAppendTime needs magic 1 and a log_append_time")


def _plain_message_set(
    messages: Iterable[LegacyMessage], magic: int, timestamp_type: TimestampType, log_append_time: int | None
) -> bytes:
    attributes = 0
    if timestamp_type is TimestampType.LOG_APPEND_TIME:
        attributes = TIMESTAMP_TYPE_MASK
        messages = [(offset, log_append_time, key, value) for offset, _, key, value in messages]  # type: ignore[misc]
    return b"".join(
        encode_legacy_message(offset, magic, attributes, timestamp, key, value)
        for offset, timestamp, key, value in messages)


def _wrapper(
    messages: Sequence[LegacyMessage], magic: int, codec: CompressionType, level: int | None,
    timestamp_type: TimestampType, log_append_time: int | None,
) -> bytes:
    first = messages[0][0] if magic == 1 else 0
    inner = b"".join(
        encode_legacy_message(offset - first, magic, 0, timestamp, key, value)
        for offset, timestamp, key, value in messages)
    attributes = int(codec)
    timestamp = max(m[1] for m in messages)
    if timestamp_type is TimestampType.LOG_APPEND_TIME:
        attributes |= TIMESTAMP_TYPE_MASK
        timestamp = log_append_time  # type: ignore[assignment]
    payload = compress(codec, inner, level, magic=magic)
    return encode_legacy_message(messages[-1][0], magic, attributes, timestamp, None, payload)
