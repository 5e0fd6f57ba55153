"""Building record batches: v2 (``MemoryRecordsBuilder``), the 61-byte empty batch, and v0/v1 sets.

The v2 layout is documented in :mod:`tidelog.records.batch` and the record layout in
:mod:`tidelog.records.record`. What :meth:`BatchBuilder.build` writes into the header:

| field                | value                                                                    |
|----------------------|--------------------------------------------------------------------------|
| baseOffset           | ``base_offset`` given to the builder (records carry offset - baseOffset) |
| partitionLeaderEpoch | ``partition_leader_epoch``                                               |
| attributes           | codec, bit 3 LogAppendTime, bit 4 transactional, bit 5 control, bit 6 delete horizon |
| lastOffsetDelta      | last appended offset - baseOffset, or ``build(last_offset_delta=...)`` (the cleaner keeps the original) |
| baseTimestamp        | first appended record's timestamp, or ``delete_horizon_ms`` when set (deltas are then relative to it) |
| maxTimestamp         | max record timestamp (CreateTime) or ``log_append_time`` (LogAppendTime) |
| producerId/Epoch, baseSequence | as given (-1 = none)                                           |
| recordsCount         | number of appended records                                               |

LogAppendTime: pass ``timestamp_type=TimestampType.LOG_APPEND_TIME`` and ``log_append_time=ms`` to the
constructor (as Kafka's builder takes ``logAppendTime``); the appended timestamps are still written
as deltas, and readers report ``log_append_time`` for every record.

Compression always applies when a codec is set (Kafka never falls back to uncompressed).
With ``magic`` 0 or 1 the builder writes a legacy message set instead (see
:mod:`tidelog.records.legacy`): one entry per record, or one compressed wrapper.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from crc32c import crc32c

from tidelog.errors import InvalidRecordError, UnsupportedCompressionError
from tidelog.records.batch import INT32_MAX, NO_TIMESTAMP
from tidelog.records.compression import CompressionType, compress
from tidelog.records.layout import (
    AFTER_CRC,
    BEFORE_CRC,
    CONTROL_FLAG_MASK,
    CRC,
    CURRENT_MAGIC,
    DELETE_HORIZON_FLAG_MASK,
    LOG_OVERHEAD,
    RECORD_BATCH_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_FLAG_MASK,
)
from tidelog.records.legacy import LegacyMessage, build_legacy_batch
from tidelog.records.record import Header, TimestampType, encode_record

_BEFORE_CRC, _AFTER_CRC, _CRC = BEFORE_CRC, AFTER_CRC, CRC

Bytes = bytes | bytearray | memoryview


def encode_v2_batch(
    *,
    base_offset: int,
    partition_leader_epoch: int,
    attributes: int,
    last_offset_delta: int,
    base_timestamp: int,
    max_timestamp: int,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    records_count: int,
    records_area: Bytes = b"",
) -> bytes:
    """A complete v2 batch: header with its CRC-32C, then ``records_area`` as given."""
    tail = _AFTER_CRC.pack(attributes, last_offset_delta, base_timestamp, max_timestamp,
                           producer_id, producer_epoch, base_sequence, records_count)
    crc = crc32c(records_area, crc32c(tail))
    length = RECORD_BATCH_OVERHEAD - LOG_OVERHEAD + len(records_area)
    head = _BEFORE_CRC.pack(base_offset, length, partition_leader_epoch, CURRENT_MAGIC)
    return b"".join((head, _CRC.pack(crc), tail, records_area))


def batch_attributes(
    compression: int, timestamp_type: TimestampType, is_transactional: bool, is_control: bool,
    has_delete_horizon: bool,
) -> int:
    """The attributes int16 of a v2 batch (Kafka ``computeAttributes``)."""
    if timestamp_type == TimestampType.NO_TIMESTAMP:
        raise InvalidRecordError("a v2 batch needs CreateTime or LogAppendTime")
    attributes = int(compression)
    if timestamp_type == TimestampType.LOG_APPEND_TIME:
        attributes |= TIMESTAMP_TYPE_MASK
    if is_transactional:
        attributes |= TRANSACTIONAL_FLAG_MASK
    if is_control:
        attributes |= CONTROL_FLAG_MASK
    if has_delete_horizon:
        attributes |= DELETE_HORIZON_FLAG_MASK
    return attributes


class BatchBuilder:
    """Accumulates records (absolute, strictly increasing offsets) and writes one batch.

    Not thread-safe. ``build`` may be called more than once; it does not reset the builder.
    """

    __slots__ = ("_magic", "_codec", "_level", "_timestamp_type", "_base_offset", "_epoch",
                 "_producer_id", "_producer_epoch", "_base_sequence", "_transactional",
                 "_control", "_horizon", "_log_append_time", "_base_timestamp", "_max_timestamp",
                 "_last_offset", "_records", "_legacy")

    def __init__(
        self,
        *,
        magic: int = 2,
        compression: int = CompressionType.NONE,
        compression_level: int | None = None,
        timestamp_type: TimestampType = TimestampType.CREATE_TIME,
        base_offset: int = 0,
        partition_leader_epoch: int = -1,
        producer_id: int = -1,
        producer_epoch: int = -1,
        base_sequence: int = -1,
        is_transactional: bool = False,
        is_control: bool = False,
        delete_horizon_ms: int | None = None,
        log_append_time: int | None = None,
    ) -> None:
        self._magic = magic
        self._codec = CompressionType.from_id(compression)
        self._level = compression_level
        self._timestamp_type = TimestampType(timestamp_type)
        self._base_offset = base_offset
        self._epoch = partition_leader_epoch
        self._producer_id = producer_id
        self._producer_epoch = producer_epoch
        self._base_sequence = base_sequence
        self._transactional = is_transactional
        self._control = is_control
        self._horizon = delete_horizon_ms
        self._log_append_time = log_append_time
        self._base_timestamp = delete_horizon_ms
        self._max_timestamp = NO_TIMESTAMP
        self._last_offset: int | None = None
        self._records: list[bytes] = []
        self._legacy: list[LegacyMessage] = []
        self._check_settings()

    def _check_settings(self) -> None:
        if self._magic not in (0, 1, 2):
            raise InvalidRecordError(f"magic must be 0, 1 or 2, got {self._magic}")
        if self._timestamp_type is TimestampType.LOG_APPEND_TIME and self._log_append_time is None:
            raise InvalidRecordError("LogAppendTime batches need log_append_time")
        if self._magic == CURRENT_MAGIC:
            batch_attributes(self._codec, self._timestamp_type, False, False, False)
            return
        if self._codec is CompressionType.ZSTD:
            raise UnsupportedCompressionError(f"zstd is not allowed for magic {self._magic}")
        legacy_only_defaults = (self._producer_id, self._producer_epoch, self._base_sequence) == (-1, -1, -1)
        if not legacy_only_defaults or self._transactional or self._control or self._horizon is not None:
            raise InvalidRecordError(
                f"magic {self._magic} has no producer ids, transactions, control batches or delete horizon")

    @property
    def records_count(self) -> int:
        return len(self._records) + len(self._legacy)

    @property
    def last_offset(self) -> int | None:
        """Last appended offset, None before the first append."""
        return self._last_offset

    def append(
        self,
        offset: int,
        timestamp: int,
        key: Bytes | None,
        value: Bytes | None,
        headers: Iterable[Header] = (),
    ) -> None:
        """Add one record at absolute ``offset`` (> the previous one, >= base_offset)."""
        self._check_offset(offset)
        headers = tuple(headers)
        if self._magic < CURRENT_MAGIC:
            if headers:
                raise InvalidRecordError(f"magic {self._magic} messages have no headers", offset=offset)
            self._legacy.append((offset, timestamp, key, value))
        else:
            self._append_v2(offset, timestamp, key, value, headers)
        self._last_offset = offset
        if timestamp > self._max_timestamp:
            self._max_timestamp = timestamp

    def _check_offset(self, offset: int) -> None:
        if self._last_offset is not None and offset <= self._last_offset:
            raise InvalidRecordError(
                f"offsets must strictly increase: {offset} after {self._last_offset}", offset=offset)
        if not 0 <= offset - self._base_offset <= INT32_MAX:
            raise InvalidRecordError(
                f"offset {offset} is outside [base_offset, base_offset + Int.MAX]",
                offset=offset, base_offset=self._base_offset)

    def _append_v2(
        self, offset: int, timestamp: int, key: Bytes | None, value: Bytes | None, headers: tuple[Header, ...]
    ) -> None:
        if self._base_timestamp is None:
            self._base_timestamp = timestamp
        self._records.append(
            encode_record(offset - self._base_offset, timestamp - self._base_timestamp, key, value, headers))

    def build(self, *, last_offset_delta: int | None = None) -> bytes:
        """The batch bytes. ``last_offset_delta`` forces lastOffsetDelta (>= the real one; v2 only).

        InvalidRecordError when no record was appended (write an empty batch with
        :func:`build_empty_batch` instead).
        """
        if self._last_offset is None:
            raise InvalidRecordError("no records appended; use build_empty_batch for an empty batch")
        if self._magic < CURRENT_MAGIC:
            if last_offset_delta is not None:
                raise InvalidRecordError("last_offset_delta only applies to v2 batches")
            return build_legacy_batch(
                self._legacy, magic=self._magic, compression=self._codec,
                compression_level=self._level, timestamp_type=self._timestamp_type,
                log_append_time=self._log_append_time)
        return self._build_v2(self._checked_delta(last_offset_delta))

    def _checked_delta(self, forced: int | None) -> int:
        actual = self._last_offset - self._base_offset  # type: ignore[operator]
        if forced is None:
            return actual
        if not actual <= forced <= INT32_MAX:
            raise InvalidRecordError(
                f"last_offset_delta {forced} is below the last record's delta {actual} or above Int.MAX")
        return forced

    def _build_v2(self, last_offset_delta: int) -> bytes:
        area = b"".join(self._records)
        if self._codec is not CompressionType.NONE:
            area = compress(self._codec, area, self._level)
        log_append = self._timestamp_type is TimestampType.LOG_APPEND_TIME
        return encode_v2_batch(
            base_offset=self._base_offset,
            partition_leader_epoch=self._epoch,
            attributes=batch_attributes(self._codec, self._timestamp_type, self._transactional,
                                        self._control, self._horizon is not None),
            last_offset_delta=last_offset_delta,
            base_timestamp=self._base_timestamp,  # type: ignore[arg-type]
            max_timestamp=self._log_append_time if log_append else self._max_timestamp,  # type: ignore[arg-type]
            producer_id=self._producer_id,
            producer_epoch=self._producer_epoch,
            base_sequence=self._base_sequence,
            records_count=len(self._records),
            records_area=area,
        )


def build_empty_batch(
    *,
    base_offset: int,
    last_offset_delta: int,
    max_timestamp: int,
    timestamp_type: TimestampType,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    is_transactional: bool,
    is_control: bool,
    partition_leader_epoch: int = -1,
) -> bytes:
    """The 61-byte batch with no records the cleaner keeps for producer state (Kafka ``writeEmptyHeader``).

    Compression none, recordsCount 0, baseTimestamp -1, delete-horizon bit clear.
    """
    return encode_v2_batch(
        base_offset=base_offset,
        partition_leader_epoch=partition_leader_epoch,
        attributes=batch_attributes(CompressionType.NONE, timestamp_type, is_transactional, is_control, False),
        last_offset_delta=last_offset_delta,
        base_timestamp=NO_TIMESTAMP,
        max_timestamp=max_timestamp,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        records_count=0,
    )


def build_batch(
    records: Iterable[Any],
    *,
    base_offset: int | None = None,
    timestamp: int = 0,
    last_offset_delta: int | None = None,
    **builder_kwargs: Any,
) -> bytes:
    """One batch from ``(key, value)`` / ``(key, value, headers)`` tuples or Record-like objects.

    Tuples get offsets ``base_offset + i`` (base_offset defaults to 0) and ``timestamp``.
    Objects with ``offset``, ``timestamp``, ``key``, ``value`` (and optionally ``headers``)
    keep their own; base_offset then defaults to the first one's offset.
    ``builder_kwargs`` go to :class:`BatchBuilder` (compression, magic, producer_id, ...).
    """
    items = list(records)
    if not items:
        raise InvalidRecordError("build_batch needs at least one record")
    keeps_offsets = hasattr(items[0], "offset")
    if base_offset is None:
        base_offset = items[0].offset if keeps_offsets else 0
    builder = BatchBuilder(base_offset=base_offset, **builder_kwargs)
    for index, item in enumerate(items):
        builder.append(*_as_row(item, index, base_offset + index, timestamp))
    return builder.build(last_offset_delta=last_offset_delta)


def _as_row(item: Any, index: int, offset: int, timestamp: int) -> tuple[int, int, Any, Any, Sequence[Header]]:
    if hasattr(item, "offset"):
        return item.offset, item.timestamp, item.key, item.value, tuple(getattr(item, "headers", ()))
    if len(item) == 2:
        return offset, timestamp, item[0], item[1], ()
    if len(item) == 3:
        return offset, timestamp, item[0], item[1], tuple(item[2])
    raise InvalidRecordError(f"record {index}: expected (key, value[, headers]) or a Record, got {item!r}")
