"""The Produce request body (v3-v12) read in place from its frame: the only decoder of Produce.

Layout (Kafka's ProduceRequest.json; compact strings and arrays and tagged fields from v9, the
flexible versions; see :mod:`.reader` for the two encodings)::

    string?  transactional_id
    int16    acks
    int32    timeout_ms
    array    topic_data
      string   name
      array    partition_data
        int32    index
        bytes?   records           one RecordBatch v2 (the handler checks it), or null
        tagged fields            v9+ (none known: skipped)
      tagged fields              v9+
    tagged fields                v9+

The attribute names are kafka-python's (``ProduceRequest``), which the handlers were written
against; ``records`` is ``bytes`` (copied once out of the frame) or None.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from tidelog.server.wire.reader import I32, count, nullable_bytes, nullable_string, skip_tags, string

FLEXIBLE_VERSION = 9
_ACKS_TIMEOUT = struct.Struct(">hi")


class PartitionProduceData(NamedTuple):
    """One partition's records (None: null, which the handler refuses)."""

    index: int
    records: bytes | None


class TopicProduceData(NamedTuple):
    name: str
    partition_data: list[PartitionProduceData]


class ProduceRequestData(NamedTuple):
    """A Produce request body."""

    transactional_id: str | None
    acks: int
    timeout_ms: int
    topic_data: list[TopicProduceData]


def decode_produce(frame: bytes, pos: int, version: int) -> ProduceRequestData:
    """The body of a Produce ``version`` (3-12) request starting at ``pos`` of ``frame``; bytes
    after it are ignored. Raises :class:`WireError` (or ``struct.error`` for a fixed-size field cut
    short) when the body does not parse. Cost: one pass, one copy of each partition's records."""
    compact = version >= FLEXIBLE_VERSION
    transactional_id, pos = nullable_string(frame, pos, compact, "transactional_id")
    acks, timeout_ms = _ACKS_TIMEOUT.unpack_from(frame, pos)
    n, pos = count(frame, pos + 6, compact, "topic_data")
    topics = []
    for _ in range(n):
        name, pos = string(frame, pos, compact, "topic_data[].name")
        partitions, pos = _partitions(frame, pos, compact)
        topics.append(TopicProduceData(name, partitions))
        if compact:
            pos = skip_tags(frame, pos, "topic_data[]")
    if compact:
        skip_tags(frame, pos, "ProduceRequest")
    return ProduceRequestData(transactional_id, acks, timeout_ms, topics)


def _partitions(frame: bytes, pos: int, compact: bool) -> tuple[list[PartitionProduceData], int]:
    n, pos = count(frame, pos, compact, "partition_data")
    partitions = []
    for _ in range(n):
        index = I32.unpack_from(frame, pos)[0]
        records, pos = nullable_bytes(frame, pos + 4, compact, "partition_data[].records")
        partitions.append(PartitionProduceData(index, records))
        if compact:
            pos = skip_tags(frame, pos, "partition_data[]")
    return partitions, pos

