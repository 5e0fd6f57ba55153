"""When a segment rolls: Kafka's roll rules (``LogSegment.shouldRoll``, kafka-storage.md §3.2).

A segment rolls before an append when the batch would not fit in ``segment.bytes``, when it has
waited ``segment.ms`` minus its jitter (by its first batch's timestamp, or by the wall clock since
it was created when that batch had none), when an index is full, or when the batch's last offset
does not fit the segment's 32-bit relative offsets. :func:`should_roll` applies them to a segment;
the common append paths apply the same rules to integers (``_append_kernel.roll_due``), with the
time rule as a limit on max timestamps (:func:`max_timestamp_limit`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from tidelog.records.varint import INT64_MAX

if TYPE_CHECKING:
    from tidelog.storage.segment import LogSegment


@dataclass(frozen=True, slots=True)
class RollParams:
    """Inputs of the roll decision for one append (Kafka's ``RollParams``)."""

    max_segment_ms: int
    max_segment_bytes: int
    max_timestamp_in_messages: int
    max_offset_in_messages: int
    messages_size: int
    now: int


@dataclass(frozen=True, slots=True)
class RollLimits:
    """The roll rules' config values (``segment.bytes``, ``segment.ms``), taken once per config."""

    segment_bytes: int
    max_segment_ms: int


def should_roll(segment: LogSegment, params: RollParams) -> bool:
    """Kafka's roll rules for an append of ``params`` to ``segment``: size, time (with the
    segment's jitter; a segment without data never rolls by time), full index, offset overflow.
    Reads the first batch's timestamp and maps the indexes if they are not yet."""
    if segment.size > params.max_segment_bytes - params.messages_size:
        return True
    reached_roll_ms = (
        segment.time_waited_for_roll(params.now, params.max_timestamp_in_messages)
        > params.max_segment_ms - segment.rolling_jitter_ms
    )
    return (
        (segment.size > 0 and reached_roll_ms)
        or segment.offset_index.is_full()
        or segment.time_index.is_full()
        or not segment.can_convert_to_relative_offset(params.max_offset_in_messages)
    )


def max_timestamp_limit(first_batch_timestamp: int, max_segment_ms: int, jitter_ms: int) -> int:
    """The time rule as a limit on max timestamps, for a segment whose first batch has a
    timestamp (>= 0): a batch whose max timestamp is above it rolls the segment. Capped at
    int64's max, so the compiled append can hold it (a comparison, not ``min``: the Python append
    calls this per batch)."""
    limit = first_batch_timestamp + max_segment_ms - jitter_ms
    return limit if limit < INT64_MAX else INT64_MAX
