"""Offset ranges: what one Spark task reads, how ranges are split, and start/end resolution.

**Splitting** follows Spark's ``KafkaOffsetRangeCalculator``: one Spark partition per
topic-partition range by default; with ``minPartitions`` above the number of non-empty ranges,
ranges are split in proportion to their size (a range whose share rounds to one part stays whole,
and the parts left over go to the big ones); ``maxRecordsPerPartition`` then splits any range still
holding more offsets than that (SPARK-49259: the result is about the larger of both counts). Sizes
are offset counts (compaction gaps included), as in Kafka.

As in Kafka, a cut falls at the offset the arithmetic gives, inside a producer batch if that is
where it lands: both tasks next to a cut read the batch holding it and keep only their own
offsets (the executor filters records by offset, :func:`tidelog.spark.arrow_rows.selected_rows`),
so splits are even (1000 offsets in batches of 100 with ``minPartitions=5``: 200 each, and with
batches of 1000 still 200 each) and every offset is read by exactly one task. The cost is one
batch decoded twice per cut.

**Resolution** turns an :class:`OffsetSpec` into per-partition offsets against a
:class:`LogView`: earliest = log start offset, latest = readable end, -2/-1 in JSON likewise,
timestamps through ListOffsets-by-time semantics.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pyspark.sql.datasource import InputPartition

from tidelog.spark.offsets import EARLIEST, LATEST, PartitionOffsets
from tidelog.spark.options import OffsetSpec, SourceOptionError
from tidelog.storage.log_view import PartitionBounds, PartitionView
from tidelog.topic_partition import TopicPartition


@dataclass(frozen=True, slots=True)
class OffsetRange(InputPartition):
    """Offsets ``[start, end)`` of one topic-partition: one Spark task (a few dozen bytes pickled)."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)

    @property
    def size(self) -> int:
        return self.end - self.start


def split_ranges(ranges: Sequence[OffsetRange], min_partitions: int | None = None,
                 max_records: int | None = None) -> list[OffsetRange]:
    """Kafka's split of ``ranges`` (empty ones dropped), cut at the offsets the sizes give.
    Order: input order, then by start."""
    ranges = [r for r in ranges if r.size > 0]
    parts = _part_counts(ranges, min_partitions)
    out: list[OffsetRange] = []
    for r, n in zip(ranges, parts):
        if max_records is not None:
            n = max(n, math.ceil(r.size / max_records))
        out.extend(_cut(r, n))
    return out


def _part_counts(ranges: Sequence[OffsetRange], min_partitions: int | None) -> list[int]:
    """How many parts each range becomes under ``minPartitions`` (KafkaOffsetRangeCalculator)."""
    if min_partitions is None or len(ranges) >= min_partitions:
        return [1] * len(ranges)
    total = sum(r.size for r in ranges)
    whole = [_share(r.size, total, min_partitions) == 1 for r in ranges]
    split_total = total - sum(r.size for r, w in zip(ranges, whole) if w)
    split_min = max(min_partitions - sum(whole), 1)
    return [1 if w else _share(r.size, split_total, split_min) for r, w in zip(ranges, whole)]


def _share(size: int, total: int, parts: int) -> int:
    """Kafka's ``max(round(size / total * parts), 1)`` (Java's round: half up)."""
    return max(int(math.floor(size / total * parts + 0.5)), 1)


def _cut(r: OffsetRange, parts: int) -> list[OffsetRange]:
    """``r`` in ``parts`` near-equal pieces (sizes differ by at most one offset)."""
    cuts, remaining, at = [], r.size, r.start
    for part in range(parts - 1):
        this = remaining // (parts - part)
        remaining -= this
        at += this
        if (cuts[-1] if cuts else r.start) < at < r.end:
            cuts.append(at)
    bounds = [r.start, *cuts, r.end]
    return [OffsetRange(r.topic, r.partition, a, b) for a, b in zip(bounds, bounds[1:])]


# --- resolution -----------------------------------------------------------------------------

def resolve(spec: OffsetSpec, bounds: Mapping[TopicPartition, PartitionBounds],
            views: Mapping[TopicPartition, PartitionView], *, starting: bool,
            no_match_strategy: str = "error") -> PartitionOffsets:
    """Per-partition offsets of ``spec`` for the partitions in ``bounds`` (JSON partitions
    missing from ``bounds`` are ignored here: the caller checked them).

    Timestamps with no matching record: the readable end for ends; for starts, an error naming the
    partition (``no_match_strategy='error'``) or the readable end (``'latest'``)."""
    out: PartitionOffsets = {}
    for tp, b in bounds.items():
        if spec.kind == "earliest":
            out[tp] = b.log_start_offset
        elif spec.kind == "latest":
            out[tp] = b.end_offset
        elif spec.kind == "offsets":
            out[tp] = _special(spec.offsets.get(tp, EARLIEST if starting else LATEST), b)
        else:
            ts = spec.timestamp if spec.kind == "timestamp" else spec.offsets.get(tp)
            out[tp] = _by_timestamp(ts, b, views[tp], starting, no_match_strategy)
    return out


def _special(offset: int, b: PartitionBounds) -> int:
    if offset == EARLIEST:
        return b.log_start_offset
    if offset == LATEST:
        return b.end_offset
    if offset < 0:
        raise SourceOptionError(f"Invalid offset {offset} for {b.topic_partition}: use -2 (earliest), "
                                f"-1 (latest) or an offset >= 0")
    return offset


def _by_timestamp(ts: int | None, b: PartitionBounds, view: PartitionView, starting: bool, strategy: str) -> int:
    if ts is None:
        return b.log_start_offset if starting else b.end_offset
    if ts in (EARLIEST, LATEST):
        return _special(ts, b)
    if ts < 0:
        raise SourceOptionError(f"Invalid timestamp {ts} for {b.topic_partition}: timestamps are epoch "
                                f"milliseconds >= 0")
    found = view.offset_for_timestamp(ts)
    if found is not None:
        return found
    if starting and strategy == "error":
        raise SourceOptionError(
            f"No offset matched from request of topic-partition {b.topic_partition} and timestamp {ts}. "
            f"(Set the option 'startingOffsetsByTimestampStrategy' to 'latest' to start at the latest offset.)")
    return b.end_offset


def check_range_bounds(start: PartitionOffsets, end: PartitionOffsets,
                       bounds: Mapping[TopicPartition, PartitionBounds]) -> None:
    """Batch plans: start <= end and end <= the readable end, per partition."""
    for tp in sorted(end):
        b = bounds[tp]
        if end[tp] > b.end_offset:
            raise SourceOptionError(
                f"The ending offset {end[tp]} of {tp} is beyond its readable end {b.end_offset} "
                f"(option 'endingOffsets'); use -1 for latest")
        if start[tp] > end[tp]:
            raise SourceOptionError(
                f"The starting offset {start[tp]} of {tp} is greater than its ending offset {end[tp]}")


# --- admission control ----------------------------------------------------------------------

def rate_limit(limit: int, start: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int],
               earliest: Mapping[TopicPartition, int]) -> PartitionOffsets:
    """Kafka's ``maxOffsetsPerTrigger`` split: each partition with a backlog gets
    ``limit * backlog / total`` more offsets, floored, except that a share below 1 rounds up (small
    partitions are never starved), and never beyond its latest offset. Partitions missing from
    ``start`` (discovered later) start at ``earliest``. Returns an end offset per ``latest`` key."""
    begin = {tp: start.get(tp, earliest.get(tp, 0)) for tp in latest}
    sizes = {tp: latest[tp] - begin[tp] for tp in latest if latest[tp] - begin[tp] > 0}
    total = sum(sizes.values())
    if total < 1:
        return dict(latest)
    out = {}
    for tp, end in latest.items():
        if tp not in sizes:
            out[tp] = end
            continue
        share = limit * (sizes[tp] / total)
        more = math.ceil(share) if share < 1 else math.floor(share)
        out[tp] = min(end, begin[tp] + more)
    return out
