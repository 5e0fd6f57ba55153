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
against; ``records`` is ``bytes`` (copied once out of the frame: the handler's batch outlives
the frame only by what it keeps) or None.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from tidelog.server.wire.reader import WireError, compact_length, count, nullable_string, short, skip_tags, string

FLEXIBLE_VERSION = 9
_ACKS_TIMEOUT = struct.Struct(">hi")
_new = tuple.__new__  # a NamedTuple from a tuple in its field order, without its Python-level __new__
_I32_I32, _I32_U8 = struct.Struct(">ii"), struct.Struct(">iB")  # a partition's index and its records' length


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
    after it are ignored. Raises :class:`WireError` when the body does not parse. Cost: one pass,
    one copy of each partition's records, one small object per topic and partition."""
    try:
        if version >= FLEXIBLE_VERSION:
            return _decode_compact(frame, pos)
        return _decode_classic(frame, pos)
    except (IndexError, struct.error) as e:
        raise WireError(f"the frame ({len(frame)} bytes) ends inside a field: {type(e).__name__}: {e}") from None


def _decode_classic(frame: bytes, pos: int) -> ProduceRequestData:
    """v3-v8 (one function per encoding, the per-partition path inline: it runs per request)."""
    transactional_id, pos = nullable_string(frame, pos, False, "transactional_id")
    acks, timeout_ms = _ACKS_TIMEOUT.unpack_from(frame, pos)
    n, pos = count(frame, pos + 6, False, "topic_data")
    topics = []
    for _ in range(n):
        name, pos = string(frame, pos, False, "topic_data[].name")
        m, pos = count(frame, pos, False, "topic_data[].partition_data")
        partitions = []
        for _ in range(m):
            index, size = _I32_I32.unpack_from(frame, pos)
            pos += 8
            records = None
            if size >= 0:
                end = pos + size
                if end > len(frame):
                    raise short("partition_data[].records", size, pos, frame)
                records, pos = bytes(frame[pos:end]), end
            partitions.append(_new(PartitionProduceData, (index, records)))
        topics.append(_new(TopicProduceData, (name, partitions)))
    return _new(ProduceRequestData, (transactional_id, acks, timeout_ms, topics))


def _decode_compact(frame: bytes, pos: int) -> ProduceRequestData:
    """v9-v12: compact strings and arrays, tagged fields (skipped: none is known)."""
    transactional_id, pos = nullable_string(frame, pos, True, "transactional_id")
    acks, timeout_ms = _ACKS_TIMEOUT.unpack_from(frame, pos)
    n, pos = count(frame, pos + 6, True, "topic_data")
    topics = []
    for _ in range(n):
        name, pos = string(frame, pos, True, "topic_data[].name")
        m, pos = count(frame, pos, True, "topic_data[].partition_data")
        partitions = []
        for _ in range(m):
            index, size = _I32_U8.unpack_from(frame, pos)  # the records' length, when it is one byte
            if size < 0x80:
                size, pos = size - 1, pos + 5
            else:
                size, pos = compact_length(frame, pos + 4, "partition_data[].records")
            records = None
            if size >= 0:
                end = pos + size
                if end > len(frame):
                    raise short("partition_data[].records", size, pos, frame)
                records, pos = bytes(frame[pos:end]), end
            partitions.append(_new(PartitionProduceData, (index, records)))
            pos = pos + 1 if frame[pos] == 0 else skip_tags(frame, pos, "partition_data[]")
        topics.append(_new(TopicProduceData, (name, partitions)))
        pos = pos + 1 if frame[pos] == 0 else skip_tags(frame, pos, "topic_data[]")
    skip_tags(frame, pos, "ProduceRequest")
    return _new(ProduceRequestData, (transactional_id, acks, timeout_ms, topics))
