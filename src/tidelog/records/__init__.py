"""Kafka's record formats as bytes: RecordBatch v2 views and builders, legacy v0/v1, codecs, varints.

The storage layer treats batches as opaque bytes: :func:`read_batch_at` / :func:`iter_batches` find
them in a ``.log``, :class:`RecordBatch` reads a v2 header without copying, the ``set_*`` patchers
rewrite the fields the broker owns, and :meth:`RecordBatch.records` decodes records on demand.
Each module opens with the byte layout it encodes.

| module        | concept                                                         |
|---------------|-----------------------------------------------------------------|
| `varint`      | zig-zag varint/varlong, unsigned varint                          |
| `record`      | one v2 record, :class:`Record`, the records-area decoder         |
| `layout`      | byte layouts: v2 batch header, v0/v1 header, index entries        |
| `batch`       | :class:`RecordBatch` over the v2 header, log reading, patchers    |
| `builder`     | :class:`BatchBuilder`, empty batches, convenience builders       |
| `compression` | gzip / snappy (xerial) / lz4 (Kafka frame) / zstd                 |
| `control`     | control record keys, transaction markers                         |
| `legacy`      | v0/v1 messages and compressed wrappers (read; build for tests)    |
"""

from __future__ import annotations

from tidelog.records.layout import (
    ATTRIBUTES_OFFSET,
    BASE_OFFSET_OFFSET,
    BASE_SEQUENCE_OFFSET,
    BASE_TIMESTAMP_OFFSET,
    CRC_OFFSET,
    HEADER_SIZE_UP_TO_MAGIC,
    LAST_OFFSET_DELTA_OFFSET,
    LENGTH_OFFSET,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    MAX_TIMESTAMP_OFFSET,
    PARTITION_LEADER_EPOCH_OFFSET,
    PRODUCER_EPOCH_OFFSET,
    PRODUCER_ID_OFFSET,
    RECORD_BATCH_OVERHEAD,
    RECORDS_COUNT_OFFSET,
)
from tidelog.records.batch import (
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    NO_TIMESTAMP,
    RECORD_ERRORS,
    FileBatch,
    RecordBatch,
    increment_sequence,
    iter_batches,
    read_batch_at,
    set_base_offset,
    set_last_offset,
    set_max_timestamp,
    set_partition_leader_epoch,
    write_crc,
)
from tidelog.records.builder import (
    BatchBuilder,
    build_batch,
    build_empty_batch,
    encode_v2_batch,
)
from tidelog.records.compression import CompressionType, compress, decompress
from tidelog.records.control import (
    ControlRecordType,
    EndTransactionMarker,
    build_end_txn_marker_batch,
    control_key,
    control_record_type,
)
from tidelog.records.legacy import LegacyBatch, build_legacy_batch, encode_legacy_message
from tidelog.records.record import Header, Record, TimestampType

__all__ = [
    "ATTRIBUTES_OFFSET",
    "BASE_OFFSET_OFFSET",
    "BASE_SEQUENCE_OFFSET",
    "BASE_TIMESTAMP_OFFSET",
    "CRC_OFFSET",
    "HEADER_SIZE_UP_TO_MAGIC",
    "LAST_OFFSET_DELTA_OFFSET",
    "LENGTH_OFFSET",
    "LOG_OVERHEAD",
    "MAGIC_OFFSET",
    "MAX_TIMESTAMP_OFFSET",
    "NO_PARTITION_LEADER_EPOCH",
    "NO_PRODUCER_EPOCH",
    "NO_PRODUCER_ID",
    "NO_SEQUENCE",
    "NO_TIMESTAMP",
    "PARTITION_LEADER_EPOCH_OFFSET",
    "PRODUCER_EPOCH_OFFSET",
    "PRODUCER_ID_OFFSET",
    "RECORD_BATCH_OVERHEAD",
    "RECORD_ERRORS",
    "RECORDS_COUNT_OFFSET",
    "BatchBuilder",
    "CompressionType",
    "ControlRecordType",
    "EndTransactionMarker",
    "FileBatch",
    "Header",
    "LegacyBatch",
    "Record",
    "RecordBatch",
    "TimestampType",
    "build_batch",
    "build_empty_batch",
    "build_end_txn_marker_batch",
    "build_legacy_batch",
    "compress",
    "control_key",
    "control_record_type",
    "decompress",
    "encode_legacy_message",
    "encode_v2_batch",
    "increment_sequence",
    "iter_batches",
    "read_batch_at",
    "set_base_offset",
    "set_last_offset",
    "set_max_timestamp",
    "set_partition_leader_epoch",
    "write_crc",
]
