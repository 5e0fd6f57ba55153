"""Retention while copying for legacy (magic 0/1) entries: Kafka's filterTo for message sets
written before 0.11, kept apart from the vectorised v2 path of :mod:`tidelog.cleaner.retain`
(legacy data is rare; one map lookup per record is fine).

Entries are read as Kafka's streaming iterator reads them, without requiring an inner message's
magic to equal its wrapper's (KAFKA-4298), and rewritten in the wrapper's own format and codec.
An entry that would be kept with no record left is dropped: there is no empty legacy entry
(Kafka throws IllegalStateException there).
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from tidelog.errors import CorruptRecordError
from tidelog.records.batch import (
    COMPRESSION_CODEC_MASK,
    HEADER_SIZE_UP_TO_MAGIC,
    LOG_OVERHEAD,
    MIN_ENTRY_LENGTH,
    TIMESTAMP_TYPE_MASK,
)
from tidelog.records.builder import BatchBuilder
from tidelog.records.compression import CompressionType, decompress
from tidelog.records.record import TimestampType

if TYPE_CHECKING:  # the v2 module imports this one
    from tidelog.cleaner.retain import CleaningRound, FilteredChunk
    from tidelog.cleaner.transactions import CleanedTransactionMetadata

NO_TIMESTAMP = -1


def offset_at(data: np.ndarray, pos: int) -> int | None:
    if len(data) - pos < 8:
        return None
    return int.from_bytes(data[pos:pos + 8].tobytes(), "big", signed=True)


_LEGACY = struct.Struct(">qiIbb")  # offset, size, crc, magic, attributes
_INT64 = struct.Struct(">q")
_INT32 = struct.Struct(">i")


@dataclass(frozen=True, slots=True)
class _Message:
    """One v0/v1 message (outer or inner) and where its entry ends."""

    offset: int
    magic: int
    attributes: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    end: int


def _read_message(buf: memoryview, pos: int, position: int, offset: int | None) -> _Message:
    """The v0/v1 entry at ``pos``; CorruptRecordError (``position``, ``offset``) if it does not parse."""
    try:
        base, size, _, magic, attributes = _LEGACY.unpack_from(buf, pos)
        end = pos + LOG_OVERHEAD + size
        if magic not in (0, 1) or size < (14 if magic == 0 else 22) or end > len(buf):
            raise CorruptRecordError(f"invalid legacy message (magic {magic}, size {size})")
        at = pos + 18
        timestamp = NO_TIMESTAMP
        if magic == 1:
            (timestamp,) = _INT64.unpack_from(buf, at)
            at += 8
        key, at = _legacy_bytes(buf, at, end)
        value, at = _legacy_bytes(buf, at, end)
        if at != end:
            raise CorruptRecordError("legacy message has bytes after its value")
    except (struct.error, CorruptRecordError) as err:
        message = err.message if isinstance(err, CorruptRecordError) else "truncated legacy message"
        raise CorruptRecordError(message, position=position, offset=offset) from err
    return _Message(base, magic, attributes, timestamp, key, value, end)


def _legacy_bytes(buf: memoryview, pos: int, end: int) -> tuple[bytes | None, int]:
    (size,) = _INT32.unpack_from(buf, pos)
    pos += 4
    if size < 0:
        return None, pos
    if pos + size > end:
        raise CorruptRecordError(f"legacy field of {size} bytes runs past the message")
    return bytes(buf[pos:pos + size]), pos + size


def filter_legacy(data: np.ndarray, source: memoryview, pos: int, round: CleaningRound,
                   txn: CleanedTransactionMetadata, retain_tombstones: bool, result: FilteredChunk) -> int:
    """Filter the v0/v1 entry at ``pos`` into ``result``; returns its size. Anything else found
    where the walk stopped (not a legacy magic, a bad length) is corruption."""
    length = int.from_bytes(source[pos + 8:pos + 12], "big", signed=True)
    magic = source[pos + HEADER_SIZE_UP_TO_MAGIC - 1]
    if magic not in (0, 1) or length < MIN_ENTRY_LENGTH:
        raise CorruptRecordError(f"invalid batch header (length {length}, magic {magic})",
                                 position=pos, offset=offset_at(data, pos))
    size = LOG_OVERHEAD + length
    outer = _read_message(source[pos:pos + size], 0, pos, offset_at(data, pos))
    _check_legacy_crc(source, pos, size, outer)
    records = _legacy_records(outer, pos)
    txn.on_data(outer.offset, -1, False)
    kept, invalid = _keep_legacy(records, round, retain_tombstones)
    result.messages_read += len(records)
    result.invalid_messages += invalid
    if kept and len(kept) == len(records) and all(m.magic == outer.magic for _, m in kept):
        result._retained(source[pos:pos + size], len(kept), outer.timestamp, outer.offset, outer.offset)
    elif kept:
        _rebuild_legacy(outer, kept, result)
    # Nothing kept: dropped, even when it ends at upper_bound_offset (see the module docstring).
    return size


def _check_legacy_crc(source: memoryview, pos: int, size: int, outer: _Message) -> None:
    (stored,) = struct.unpack_from(">I", source, pos + 12)
    computed = zlib.crc32(source[pos + 16:pos + size])
    if stored != computed:
        raise CorruptRecordError(f"Record is corrupt (stored crc = {stored}, computed crc = {computed})",
                                 position=pos, offset=outer.offset, stored_crc=stored, computed_crc=computed)


def _legacy_records(outer: _Message, position: int) -> list[tuple[int, _Message]]:
    """``(absolute offset, message)`` of a plain message or of a wrapper's inner messages, read as
    Kafka's streaming iterator does: without requiring inner magic == wrapper magic (KAFKA-4298)."""
    codec = outer.attributes & COMPRESSION_CODEC_MASK
    if codec == 0:
        return [(outer.offset, outer)]
    if outer.value is None or codec == CompressionType.ZSTD:
        raise CorruptRecordError("compressed legacy message without a valid payload", position=position,
                                 offset=outer.offset)
    try:
        payload = memoryview(decompress(codec, outer.value, magic=outer.magic))
    except CorruptRecordError as err:
        raise CorruptRecordError(err.message, position=position, offset=outer.offset) from err
    inner, at = [], 0
    while at < len(payload):
        message = _read_message(payload, at, position, outer.offset)
        inner.append(message)
        at = message.end
    if not inner:
        raise CorruptRecordError("compressed legacy message with no inner messages", position=position,
                                 offset=outer.offset)
    base = outer.offset - inner[-1].offset if outer.magic > 0 else -1
    log_append = outer.magic > 0 and bool(outer.attributes & TIMESTAMP_TYPE_MASK)
    return [(base + m.offset if base >= 0 else m.offset, _inner_timestamped(m, outer, log_append))
            for m in inner]


def _inner_timestamped(inner: _Message, outer: _Message, log_append: bool) -> _Message:
    """Kafka's inner record timestamp: none for v0, the wrapper's for LogAppendTime."""
    if inner.magic == 0 or not log_append:
        return inner
    return _Message(inner.offset, inner.magic, inner.attributes, outer.timestamp, inner.key, inner.value,
                    inner.end)


def _keep_legacy(records: list[tuple[int, _Message]], round: CleaningRound,
                 retain_tombstones: bool) -> tuple[list[tuple[int, _Message]], int]:
    """Step 3 for legacy records (one map lookup each: legacy data is rare)."""
    lookup = round.offset_map
    kept, invalid = [], 0
    for offset, message in records:
        if offset > lookup.latest_offset:
            kept.append((offset, message))
        elif message.key is None:
            invalid += 1
        elif offset >= lookup.get(message.key) and (message.value is not None or retain_tombstones):
            kept.append((offset, message))
    return kept, invalid


def _rebuild_legacy(outer: _Message, kept: list[tuple[int, _Message]], result: FilteredChunk) -> None:
    """The kept records in a new v0/v1 entry of the wrapper's magic and codec (Kafka's
    ``buildRetainedRecordsInto``: base offset = first kept offset, no offset override)."""
    codec = outer.attributes & COMPRESSION_CODEC_MASK
    log_append = outer.magic > 0 and bool(outer.attributes & TIMESTAMP_TYPE_MASK)
    builder = BatchBuilder(
        magic=outer.magic, compression=codec, base_offset=kept[0][0],
        timestamp_type=TimestampType.LOG_APPEND_TIME if log_append else TimestampType.CREATE_TIME,
        log_append_time=outer.timestamp if log_append else None)
    max_ts, offset_of_max = NO_TIMESTAMP, -1
    for offset, message in kept:
        timestamp = message.timestamp if outer.magic > 0 else NO_TIMESTAMP
        builder.append(offset, timestamp, message.key, message.value)
        if timestamp > max_ts:
            max_ts, offset_of_max = timestamp, offset
    last = kept[-1][0]
    if log_append:  # MemoryRecordsBuilder.info(): LogAppendTime
        max_ts, shallow = outer.timestamp, (last if codec else kept[0][0])
    elif max_ts == NO_TIMESTAMP:
        shallow = -1
    else:
        shallow = last if codec else offset_of_max
    result._retained(builder.build(), len(kept), max_ts, shallow, max(o for o, _ in kept))
