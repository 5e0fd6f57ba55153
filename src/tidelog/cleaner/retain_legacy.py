"""Retention while copying for legacy (magic 0/1) entries: Kafka's filterTo for message sets
written before 0.11, kept apart from the vectorised v2 path of :mod:`tidelog.cleaner.retain`
(legacy data is rare; one map lookup per record is fine).

Entries are read as Kafka's streaming iterator reads them, without requiring an inner message's
magic to equal its wrapper's (KAFKA-4298), and rewritten in the wrapper's own format and codec.
An entry that would be kept with no record left is dropped: there is no empty legacy entry
(Kafka throws IllegalStateException there).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from tidelog.errors import CorruptRecordError, InvalidRecordError, UnsupportedCompressionError
from tidelog.records.builder import BatchBuilder
from tidelog.records.layout import BASE_OFFSET_OFFSET, COMPRESSION_CODEC_MASK, LENGTH_OFFSET, declared_size
from tidelog.records.legacy import LegacyBatch
from tidelog.records.record import Record, TimestampType

if TYPE_CHECKING:  # the v2 module imports this one
    from tidelog.cleaner.retain import CleaningRound, FilteredChunk
    from tidelog.cleaner.transactions import CleanedTransactionMetadata

NO_TIMESTAMP = -1


def offset_at(data: np.ndarray, pos: int) -> int | None:
    if len(data) - pos < LENGTH_OFFSET:
        return None
    return int.from_bytes(data[pos + BASE_OFFSET_OFFSET:pos + LENGTH_OFFSET].tobytes(), "big", signed=True)


def filter_legacy(data: np.ndarray, source: memoryview, pos: int, round: CleaningRound,
                  txn: CleanedTransactionMetadata, retain_tombstones: bool, result: FilteredChunk) -> int:
    """Filter the complete v0/v1 entry at ``pos`` (the scan stopped there) into ``result``;
    returns its size. CorruptRecordError (``position``, ``offset``) if it does not read."""
    size = declared_size(source, pos)
    try:
        batch = LegacyBatch(source[pos:pos + size])
        batch.ensure_valid(position=pos)
        records = list(batch.records())
        verbatim_ok = batch.inner_magics_match
    except (CorruptRecordError, InvalidRecordError, UnsupportedCompressionError) as err:
        raise CorruptRecordError(err.message, position=pos, offset=offset_at(data, pos)) from err
    txn.on_data(batch.last_offset, -1, False)
    kept, invalid = _keep_legacy(records, round, retain_tombstones)
    result.messages_read += len(records)
    result.invalid_messages += invalid
    if kept and len(kept) == len(records) and verbatim_ok:
        result._retained(source[pos:pos + size], len(kept), batch.max_timestamp, batch.last_offset, batch.last_offset)
    elif kept:
        _rebuild_legacy(batch, kept, result)
    # Nothing kept: dropped, even when it ends at upper_bound_offset (see the module docstring).
    return size


def _keep_legacy(records: list[Record], round: CleaningRound, retain_tombstones: bool) -> tuple[list[Record], int]:
    """Step 3 for legacy records (one map lookup each: legacy data is rare)."""
    lookup = round.offset_map
    kept, invalid = [], 0
    for record in records:
        if record.offset > lookup.latest_offset:
            kept.append(record)
        elif record.key is None:
            invalid += 1
        elif record.offset >= lookup.get(record.key) and (record.value is not None or retain_tombstones):
            kept.append(record)
    return kept, invalid


def _rebuild_legacy(outer: LegacyBatch, kept: list[Record], result: FilteredChunk) -> None:
    """The kept records in a new v0/v1 entry of the wrapper's magic and codec (Kafka's
    ``buildRetainedRecordsInto``: base offset = first kept offset, no offset override); this also
    repairs KAFKA-4298 wrappers, whose inner messages had another magic."""
    codec = outer.attributes & COMPRESSION_CODEC_MASK
    log_append = outer.timestamp_type is TimestampType.LOG_APPEND_TIME
    builder = BatchBuilder(
        magic=outer.magic, compression=codec, base_offset=kept[0].offset,
        timestamp_type=TimestampType.LOG_APPEND_TIME if log_append else TimestampType.CREATE_TIME,
        log_append_time=outer.max_timestamp if log_append else None)
    max_ts, offset_of_max = NO_TIMESTAMP, -1
    for record in kept:
        timestamp = record.timestamp if outer.magic > 0 else NO_TIMESTAMP
        builder.append(record.offset, timestamp, record.key, record.value)
        if timestamp > max_ts:
            max_ts, offset_of_max = timestamp, record.offset
    last = kept[-1].offset
    if log_append:  # MemoryRecordsBuilder.info(): LogAppendTime
        max_ts, shallow = outer.max_timestamp, (last if codec else kept[0].offset)
    elif max_ts == NO_TIMESTAMP:
        shallow = -1
    else:
        shallow = last if codec else offset_of_max
    result._retained(builder.build(), len(kept), max_ts, shallow, max(r.offset for r in kept))
