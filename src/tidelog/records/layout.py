"""The byte layouts of a log dir, declared once: the v2 batch header, the v0/v1 message header,
and the entries of the offset and time indexes. Every module reads field offsets, sizes, struct
formats and numpy dtypes from here (compiled kernels too: module-level ints are frozen into them
at compile time). All integers are big-endian.

v2 batch header, 61 bytes (``RECORD_BATCH_OVERHEAD``):

| offset | size | field                | notes                                                          |
|--------|------|----------------------|----------------------------------------------------------------|
| 0      | 8    | baseOffset           | offset of the first record (kept by compaction)                |
| 8      | 4    | batchLength          | batch size - 12 (``LOG_OVERHEAD``)                             |
| 12     | 4    | partitionLeaderEpoch | -1 = unknown; **not covered by the CRC**                       |
| 16     | 1    | magic                | 2 (bytes 0-16 are common to every magic: ``HEADER_SIZE_UP_TO_MAGIC``) |
| 17     | 4    | crc                  | uint32 CRC-32C of bytes [21, end of batch)                     |
| 21     | 2    | attributes           | bits 0-2 codec, 3 LogAppendTime, 4 transactional, 5 control, 6 delete horizon |
| 23     | 4    | lastOffsetDelta      | lastOffset - baseOffset                                        |
| 27     | 8    | baseTimestamp        | first record's timestamp, the delete horizon (bit 6), or -1 (empty batch) |
| 35     | 8    | maxTimestamp         | max record timestamp (CreateTime) or the broker time (LogAppendTime) |
| 43     | 8    | producerId           | -1 = none                                                      |
| 51     | 2    | producerEpoch        | -1 = none                                                      |
| 53     | 4    | baseSequence         | -1 = none                                                      |
| 57     | 4    | recordsCount         | records in the batch (0 for an empty batch)                   |
| 61     | ...  | records              | v2 records (:mod:`tidelog.records.record`), or one compressed stream of them |

v0/v1 message (log entry) header: offset int64, size int32 (``LOG_OVERHEAD`` = 12 bytes), then
crc uint32, magic int8 (at byte 16, as in v2), attributes int8, [v1: timestamp int64], key and
value (int32 length + bytes each).

Offset index (``.index``) entry, 8 bytes: relativeOffset int32, position int32.
Time index (``.timeindex``) entry, 12 bytes: timestamp int64, relativeOffset int32.
"""

from __future__ import annotations

import struct

import numpy as np

Buffer = bytes | bytearray | memoryview

# --- v2 batch header ---------------------------------------------------------------------------

BASE_OFFSET_OFFSET = 0
LENGTH_OFFSET = 8
PARTITION_LEADER_EPOCH_OFFSET = 12
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
LAST_OFFSET_DELTA_OFFSET = 23
BASE_TIMESTAMP_OFFSET = 27
MAX_TIMESTAMP_OFFSET = 35
PRODUCER_ID_OFFSET = 43
PRODUCER_EPOCH_OFFSET = 51
BASE_SEQUENCE_OFFSET = 53
RECORDS_COUNT_OFFSET = 57
RECORDS_OFFSET = 61

LOG_OVERHEAD = 12  # baseOffset + batchLength: a batch's size is LOG_OVERHEAD + batchLength
HEADER_SIZE_UP_TO_MAGIC = 17
RECORD_BATCH_OVERHEAD = 61  # the v2 header; also the size of an empty batch
MIN_BATCH_LENGTH = RECORD_BATCH_OVERHEAD - LOG_OVERHEAD  # the smallest v2 batchLength (49)
MIN_ENTRY_LENGTH = 14  # Kafka RECORD_OVERHEAD_V0: the smallest legal length field of any magic
CRC_START = ATTRIBUTES_OFFSET  # the CRC covers [CRC_START, end of batch)
CRC_SIZE = 4

CURRENT_MAGIC = 2
COMPRESSION_CODEC_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_FLAG_MASK = 0x10
CONTROL_FLAG_MASK = 0x20
DELETE_HORIZON_FLAG_MASK = 0x40

HEADER = struct.Struct(
    ">q"  # baseOffset
    "i"   # batchLength
    "i"   # partitionLeaderEpoch
    "b"   # magic
    "I"   # crc (unsigned)
    "h"   # attributes
    "i"   # lastOffsetDelta
    "q"   # baseTimestamp
    "q"   # maxTimestamp
    "q"   # producerId
    "h"   # producerEpoch
    "i"   # baseSequence
    "i"   # recordsCount
)
HEADER_DTYPE = np.dtype([
    ("base_offset", ">i8"), ("batch_length", ">i4"), ("partition_leader_epoch", ">i4"), ("magic", "i1"),
    ("crc", ">u4"), ("attributes", ">i2"), ("last_offset_delta", ">i4"), ("base_timestamp", ">i8"),
    ("max_timestamp", ">i8"), ("producer_id", ">i8"), ("producer_epoch", ">i2"), ("base_sequence", ">i4"),
    ("records_count", ">i4"),
])  # the same header as one packed numpy record (columnar header writes)
PREFIX = struct.Struct(">qiib")  # baseOffset, length, (epoch or legacy crc), magic: bytes 0-16 of any magic
PATCHED_PREFIX = struct.Struct(">qii")  # baseOffset, batchLength, partitionLeaderEpoch: what a leader patches
PATCHED_PREFIX_SIZE = 16  # bytes before magic: the patched fields, outside the CRC
BEFORE_CRC = struct.Struct(">qiib")  # baseOffset, batchLength, partitionLeaderEpoch, magic
AFTER_CRC = struct.Struct(">hiqqqhii")  # attributes .. recordsCount
PRODUCER_FIELDS = struct.Struct(">qhi")  # producerId, producerEpoch, baseSequence, at PRODUCER_ID_OFFSET
CRC = struct.Struct(">I")
ATTRIBUTES = struct.Struct(">h")
LAST_OFFSET_DELTA = struct.Struct(">i")
TIMESTAMP = struct.Struct(">q")
LENGTH = struct.Struct(">i")  # batchLength, at LENGTH_OFFSET

assert HEADER.size == HEADER_DTYPE.itemsize == RECORD_BATCH_OVERHEAD
assert PATCHED_PREFIX.size == PATCHED_PREFIX_SIZE == MAGIC_OFFSET
assert BEFORE_CRC.size == CRC_OFFSET and CRC_OFFSET + CRC.size + AFTER_CRC.size == RECORD_BATCH_OVERHEAD
assert HEADER_DTYPE.fields is not None and all(
    HEADER_DTYPE.fields[name][1] == at for name, at in (
        ("base_offset", BASE_OFFSET_OFFSET), ("batch_length", LENGTH_OFFSET),
        ("partition_leader_epoch", PARTITION_LEADER_EPOCH_OFFSET), ("magic", MAGIC_OFFSET), ("crc", CRC_OFFSET),
        ("attributes", ATTRIBUTES_OFFSET), ("last_offset_delta", LAST_OFFSET_DELTA_OFFSET),
        ("base_timestamp", BASE_TIMESTAMP_OFFSET), ("max_timestamp", MAX_TIMESTAMP_OFFSET),
        ("producer_id", PRODUCER_ID_OFFSET), ("producer_epoch", PRODUCER_EPOCH_OFFSET),
        ("base_sequence", BASE_SEQUENCE_OFFSET), ("records_count", RECORDS_COUNT_OFFSET)))


def declared_size(buf: Buffer, position: int = 0) -> int:
    """The size of the batch (or v0/v1 entry) at ``position`` as its length field declares it:
    ``LOG_OVERHEAD + batchLength``. The caller checks that ``LOG_OVERHEAD`` bytes are there."""
    return LOG_OVERHEAD + int(LENGTH.unpack_from(buf, position + LENGTH_OFFSET)[0])


# --- v0/v1 message header ----------------------------------------------------------------------

LEGACY_HEADER = struct.Struct(">qiIbb")  # offset, size, crc, magic, attributes
LEGACY_CRC_OFFSET = LOG_OVERHEAD  # the CRC covers [LEGACY_CRC_OFFSET + 4, end of message)
LEGACY_TIMESTAMP_OFFSET = 18  # v1 only
RECORD_OVERHEAD_V0 = 14  # crc, magic, attributes, key length, value length
RECORD_OVERHEAD_V1 = 22  # and the timestamp

# --- index entries -----------------------------------------------------------------------------

OFFSET_INDEX_ENTRY = struct.Struct(">ii")  # relativeOffset, position
OFFSET_INDEX_DTYPE = np.dtype([("relative_offset", ">i4"), ("position", ">i4")])
OFFSET_INDEX_ENTRY_SIZE = 8
OFFSET_INDEX_POSITION_AT = 4  # byte of position within an offset-index entry
TIME_INDEX_ENTRY = struct.Struct(">qi")  # timestamp, relativeOffset
TIME_INDEX_DTYPE = np.dtype([("timestamp", ">i8"), ("relative_offset", ">i4")])
TIME_INDEX_ENTRY_SIZE = 12
TIME_INDEX_OFFSET_AT = 8  # byte of relativeOffset within a time-index entry

assert OFFSET_INDEX_ENTRY.size == OFFSET_INDEX_DTYPE.itemsize == OFFSET_INDEX_ENTRY_SIZE
assert TIME_INDEX_ENTRY.size == TIME_INDEX_DTYPE.itemsize == TIME_INDEX_ENTRY_SIZE
