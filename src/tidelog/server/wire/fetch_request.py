"""The Fetch request body (v4-v12) read in place from its frame: the only decoder of Fetch.

Layout (Kafka's FetchRequest.json; compact strings and arrays and tagged fields from v12, the
flexible version; see :mod:`.reader` for the two encodings)::

    int32    replica_id
    int32    max_wait_ms
    int32    min_bytes
    int32    max_bytes
    int8     isolation_level
    int32    session_id                v7+  (else 0)
    int32    session_epoch             v7+  (else -1)
    array    topics
      string   topic
      array    partitions
        int32    partition
        int32    current_leader_epoch  v9+  (else -1)
        int64    fetch_offset
        int32    last_fetched_epoch    v12+ (else -1)
        int64    log_start_offset      v5+  (else -1)
        int32    partition_max_bytes
        tagged fields                  v12+ (none known at v12: skipped)
      tagged fields                    v12+
    array    forgotten_topics_data     v7+  (else empty)
      string   topic
      array    partitions              int32 each
      tagged fields                    v12+
    string   rack_id                   v11+ (else "")
    tagged fields                      v12+: tag 0 cluster_id (nullable string); others skipped

The attribute names and the defaults of fields absent at a version are kafka-python's
(``FetchRequest``), which the handler was written against.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from tidelog.server.wire.reader import WireError, count, nullable_string, skip_tags, string, tagged_fields

FLEXIBLE_VERSION = 12
_TOP_V4, _TOP_V7 = struct.Struct(">iiiib"), struct.Struct(">iiiibii")
# a partition's fixed fields at each version (see the layout): the struct and its size
_LAYOUT_FROM = ((12, ">iiqiqi"), (9, ">iiqqi"), (5, ">iqqi"), (4, ">iqi"))
_PARTITION_LAYOUTS = {v: next((struct.Struct(f), struct.calcsize(f)) for since, f in _LAYOUT_FROM if v >= since)
                      for v in range(4, FLEXIBLE_VERSION + 1)}
_new = tuple.__new__  # a NamedTuple from a tuple in its field order, without its __new__
_REQUEST_TAGS = {0: "cluster_id"}


class FetchPartition(NamedTuple):
    partition: int
    current_leader_epoch: int
    fetch_offset: int
    last_fetched_epoch: int
    log_start_offset: int
    partition_max_bytes: int


class FetchTopic(NamedTuple):
    topic: str
    partitions: list[FetchPartition]


class ForgottenTopic(NamedTuple):
    topic: str
    partitions: list[int]


class FetchRequestData(NamedTuple):
    """A Fetch request body."""

    replica_id: int
    max_wait_ms: int
    min_bytes: int
    max_bytes: int
    isolation_level: int
    session_id: int
    session_epoch: int
    topics: list[FetchTopic]
    forgotten_topics_data: list[ForgottenTopic]
    rack_id: str
    cluster_id: str | None


def decode_fetch(frame: bytes, pos: int, version: int) -> FetchRequestData:
    """The body of a Fetch ``version`` (4-12) request starting at ``pos`` of ``frame``; bytes after
    it are ignored. Raises :class:`WireError` when the body does not parse. Cost: one pass, one
    small object per topic and partition."""
    try:
        return _decode(frame, pos, version)
    except (IndexError, struct.error) as e:
        raise WireError(f"the frame ({len(frame)} bytes) ends inside a field: {type(e).__name__}: {e}") from None


def _decode(frame: bytes, pos: int, version: int) -> FetchRequestData:
    compact = version >= FLEXIBLE_VERSION
    if version >= 7:
        replica_id, max_wait_ms, min_bytes, max_bytes, isolation, session_id, epoch = _TOP_V7.unpack_from(frame, pos)
        pos += _TOP_V7.size
    else:
        replica_id, max_wait_ms, min_bytes, max_bytes, isolation = _TOP_V4.unpack_from(frame, pos)
        session_id, epoch = 0, -1
        pos += _TOP_V4.size
    topics, pos = _topics(frame, pos, version, compact)
    forgotten: list[ForgottenTopic] = []
    if version >= 7:
        forgotten, pos = _forgotten(frame, pos, compact)
    rack_id = ""
    if version >= 11:
        rack_id, pos = string(frame, pos, compact, "rack_id")
    cluster_id = None
    if compact and frame[pos] != 0:
        known = tagged_fields(frame, pos, "FetchRequest", _REQUEST_TAGS)[0]
        if known:
            cluster_id = nullable_string(known["cluster_id"], 0, True, "cluster_id (tag 0)")[0]
    return _new(FetchRequestData, (replica_id, max_wait_ms, min_bytes, max_bytes, isolation, session_id, epoch,
                                   topics, forgotten, rack_id, cluster_id))


def _topics(frame: bytes, pos: int, version: int, compact: bool) -> tuple[list[FetchTopic], int]:
    """The topics and their partitions, with kafka-python's defaults for the partition fields
    absent at ``version``."""
    n, pos = count(frame, pos, compact, "topics")
    topics = []
    layout, size = _PARTITION_LAYOUTS[version]
    for _ in range(n):
        name, pos = string(frame, pos, compact, "topics[].topic")
        m, pos = count(frame, pos, compact, "topics[].partitions")
        partitions = []
        for _ in range(m):
            fields = layout.unpack_from(frame, pos)
            pos += size
            if version < 12:
                fields = _with_defaults(fields, version)
            partitions.append(_new(FetchPartition, fields))
            if compact:
                pos = pos + 1 if frame[pos] == 0 else skip_tags(frame, pos, "topics[].partitions[]")
        topics.append(_new(FetchTopic, (name, partitions)))
        if compact:
            pos = pos + 1 if frame[pos] == 0 else skip_tags(frame, pos, "topics[]")
    return topics, pos


def _with_defaults(fields: tuple[int, ...], version: int) -> tuple[int, ...]:
    """A partition's fields before v12 in FetchPartition's order, -1 for those absent."""
    if version >= 9:
        partition, leader_epoch, offset, log_start, max_bytes = fields
        return partition, leader_epoch, offset, -1, log_start, max_bytes
    if version >= 5:
        partition, offset, log_start, max_bytes = fields
        return partition, -1, offset, -1, log_start, max_bytes
    partition, offset, max_bytes = fields
    return partition, -1, offset, -1, -1, max_bytes


def _forgotten(frame: bytes, pos: int, compact: bool) -> tuple[list[ForgottenTopic], int]:
    n, pos = count(frame, pos, compact, "forgotten_topics_data")
    forgotten = []
    for _ in range(n):
        name, pos = string(frame, pos, compact, "forgotten_topics_data[].topic")
        m, pos = count(frame, pos, compact, "forgotten_topics_data[].partitions")
        if pos + 4 * m > len(frame):
            raise WireError(f"forgotten_topics_data[].partitions: {m} int32 declared at byte {pos}, "
                            f"{len(frame) - pos} bytes left in the frame (runs past the end)")
        forgotten.append(ForgottenTopic(name, list(struct.unpack_from(f">{m}i", frame, pos))))
        pos += 4 * m
        if compact:
            pos = pos + 1 if frame[pos] == 0 else skip_tags(frame, pos, "forgotten_topics_data[]")
    return forgotten, pos

