"""Kafka-shaped offsets JSON: ``{"topic": {"0": 23, "1": -2}}``, parsed and written canonically.

Spark's Kafka source uses this shape for ``startingOffsets``/``endingOffsets`` (-2 = earliest,
-1 = latest), for the by-timestamp options (values are epoch milliseconds) and for the streaming
offsets it checkpoints. Spark compares streaming offsets **as JSON strings**, so every offset dict
this package produces goes through :func:`canonical`: topics sorted, partitions sorted
numerically, partition keys as decimal strings, values as ints.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from tidelog.topic_partition import TopicPartition

EARLIEST = -2
LATEST = -1

PartitionOffsets = dict[TopicPartition, int]

OFFSETS_EXAMPLE = '{"topicA":{"0":23,"1":-1},"topicB":{"0":-2}}'
TIMESTAMPS_EXAMPLE = '{"topicA": {"0": 123456789, "1": 123456789}, "topicB": {"0": 123456789, "1": 123456789}}'
ASSIGN_EXAMPLE = '{"topicA":[0,1],"topicB":[0,1]}'


class OffsetsJsonError(ValueError):
    """Text that is not Kafka's offsets (or partitions) JSON; the message shows an example."""


def parse_partition_offsets(text: str, example: str = OFFSETS_EXAMPLE) -> PartitionOffsets:
    """``{"t": {"0": n}}`` as ``{TopicPartition: n}``; OffsetsJsonError (Kafka's wording:
    ``Expected e.g. <example>, got <text>``) for anything else (non-integer values or partitions,
    a partition below 0, a value outside int64)."""
    try:
        parsed = json.loads(text)
        if not isinstance(parsed, dict):
            raise TypeError
        out: PartitionOffsets = {}
        for topic, partitions in parsed.items():
            if not isinstance(partitions, dict):
                raise TypeError
            for partition, value in partitions.items():
                out[TopicPartition(topic, _partition_number(partition))] = _long(value)
        return out
    except (ValueError, TypeError):
        raise OffsetsJsonError(f"Expected e.g. {example}, got {text}") from None


def parse_assign(text: str) -> list[TopicPartition]:
    """``{"t": [0, 1]}`` (the ``assign`` option) as topic-partitions, in the order given."""
    try:
        parsed = json.loads(text)
        if not isinstance(parsed, dict):
            raise TypeError
        out = []
        for topic, partitions in parsed.items():
            if not isinstance(partitions, list):
                raise TypeError
            out.extend(TopicPartition(topic, _partition_number(p)) for p in partitions)
        return out
    except (ValueError, TypeError):
        raise OffsetsJsonError(f"Expected e.g. {ASSIGN_EXAMPLE}, got {text}") from None


def _partition_number(value: object) -> int:
    if isinstance(value, bool):
        raise TypeError
    if isinstance(value, str):
        if not (value.isascii() and value.lstrip("-").isdigit()):
            raise ValueError
        value = int(value)
    if not isinstance(value, int) or not 0 <= value < 2**31:
        raise ValueError
    return value


def _long(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not -(2**63) <= value < 2**63:
        raise ValueError
    return value


def canonical(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """The offsets dict Spark stores and compares: sorted topics, partitions sorted numerically."""
    out: dict[str, dict[str, int]] = {}
    for tp in sorted(offsets):
        out.setdefault(tp.topic, {})[str(tp.partition)] = int(offsets[tp])
    return out


def from_dict(offsets: Mapping[str, Mapping[str, int]]) -> PartitionOffsets:
    """A streaming offset dict (as :func:`canonical` wrote it, read back from a checkpoint)."""
    return {TopicPartition(topic, int(p)): int(n) for topic, parts in offsets.items() for p, n in parts.items()}


def format_offsets(offsets: Mapping[TopicPartition, int]) -> str:
    """Compact canonical JSON text, as Kafka writes it."""
    return json.dumps(canonical(offsets), separators=(",", ":"))
