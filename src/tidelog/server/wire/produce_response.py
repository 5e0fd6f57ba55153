"""A Produce response (v3-v12) framed in one pass: the only encoder of Produce responses.

Byte-identical to kafka-python's ``ProduceResponse`` encoding of the same content
(tests/server/test_hot_codecs.py). Layout (Kafka's ProduceResponse.json; compact strings and
arrays and the tagged fields from v9, the flexible versions)::

    int32   size                        of everything after it
    int32   correlation_id
    uvarint tagged fields               v9+: response header v1; always 0 (none)
    array   responses                   int32 count, or uvarint count+1 (compact)
      string  name                      int16 length, or uvarint length+1 (compact)
      array   partition_responses
        int32   index
        int16   error_code
        int64   base_offset
        int64   log_append_time_ms
        int64   log_start_offset        v5+
        array   record_errors           v8+
          int32   batch_index
          string? batch_index_error_message   null: int16 -1, or uvarint 0 (compact)
          uvarint tagged fields         v9+
        string? error_message           v8+
        uvarint tagged fields           v9+ (current_leader, v10+: never set)
      uvarint tagged fields             v9+
    int32   throttle_time_ms            after the responses, unlike most APIs
    uvarint tagged fields               v9+ (node_endpoints, v10+: never set)
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from typing import NamedTuple

from tidelog.records.varint import encode_unsigned_varint

FLEXIBLE_VERSION = 9
_I16, _I32 = struct.Struct(">h"), struct.Struct(">i")
_HEAD_V3 = struct.Struct(">ihqq")  # index, error_code, base_offset, log_append_time_ms
_HEAD_V5 = struct.Struct(">ihqqq")  # ... and log_start_offset
_FLEX_NONE = b"\1\0\0"  # empty record_errors (count 0 + 1), null error_message, no tagged fields


class PartitionProduceResponse(NamedTuple):
    """One partition's answer; ``error_message`` None is sent as null (v8+)."""

    index: int
    error_code: int
    base_offset: int
    log_append_time_ms: int
    log_start_offset: int
    record_errors: tuple[tuple[int, str | None], ...] = ()
    error_message: str | None = None


def encode_produce_response(version: int, correlation_id: int,
                            topics: Iterable[tuple[str, Sequence[PartitionProduceResponse]]],
                            throttle_time_ms: int = 0) -> bytes:
    """The framed Produce response of ``version`` (3-12) to ``topics`` (in order). Cost: one
    ``bytearray`` grown field by field, O(partitions)."""
    flexible = version >= FLEXIBLE_VERSION
    out = bytearray(_I32.pack(correlation_id) + (b"\0" if flexible else b""))
    topics = topics if isinstance(topics, Sequence) else list(topics)
    out += _count(len(topics), flexible)
    for name, partitions in topics:
        out += _string(name, flexible)
        out += _count(len(partitions), flexible)
        for p in partitions:
            _partition(out, version, flexible, p)
        if flexible:
            out += b"\0"
    out += _I32.pack(throttle_time_ms)
    if flexible:
        out += b"\0"
    return _I32.pack(len(out)) + out


def _partition(out: bytearray, version: int, flexible: bool, p: PartitionProduceResponse) -> None:
    if version >= 5:
        out += _HEAD_V5.pack(p.index, p.error_code, p.base_offset, p.log_append_time_ms, p.log_start_offset)
    else:
        out += _HEAD_V3.pack(p.index, p.error_code, p.base_offset, p.log_append_time_ms)
    if version < 8:
        return
    if flexible and not p.record_errors and p.error_message is None:
        out += _FLEX_NONE  # the common answer: no record errors, no message, no tags
        return
    out += _count(len(p.record_errors), flexible)
    for batch_index, message in p.record_errors:
        out += _I32.pack(batch_index) + _nullable_string(message, flexible)
        if flexible:
            out += b"\0"
    out += _nullable_string(p.error_message, flexible)
    if flexible:
        out += b"\0"


def _count(n: int, flexible: bool) -> bytes:
    return encode_unsigned_varint(n + 1) if flexible else _I32.pack(n)


def _string(text: str, flexible: bool) -> bytes:
    data = text.encode()
    return (encode_unsigned_varint(len(data) + 1) if flexible else _I16.pack(len(data))) + data


def _nullable_string(text: str | None, flexible: bool) -> bytes:
    if text is None:
        return b"\0" if flexible else b"\xff\xff"
    return _string(text, flexible)
