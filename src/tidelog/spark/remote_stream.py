"""``spark.readStream.format("tidelog").option("path", <store URI>)``: a micro-batch stream over
the remote tier, straight from the store (see :mod:`tidelog.spark.remote_source` for the options,
the planning and the executors' reads).

Without a broker, the latest offsets are the ends of the FINISHED remote segments (under
read_committed capped before the transactions open there, as :class:`RemotePlan` plans them): a
batch appears as segments are tiered. The driver reloads the store's partitions and remote metadata (one LIST of
the store, then one LIST plus the new metadata objects per partition) at most once per
:data:`REFRESH_MS`, however often Spark polls.

With ``kafka.bootstrap.servers``, offsets are the broker's: latest is its high watermark, or its
last stable offset under read_committed (one
Metadata and one ListOffsets request at most once per :data:`REFRESH_MS`, the answer reused
between), and each micro-batch's ranges are split at plan time into a store part (up to the
highest tiered offset then) and a broker part (:mod:`tidelog.spark.broker_tail`), so the query
moves across the tier boundary as segments are tiered and deleted locally, each offset read once.

Offsets are Kafka's ``{"topic":{"partition":next offset}}`` in canonical order, so a checkpoint
restarts where it stopped; a replayed batch reads the same offsets (the remote tier is immutable
but for compaction, whose swaps keep every surviving record at its offset). Admission
(``maxOffsetsPerTrigger``, ``minOffsetsPerTrigger``/``maxTriggerDelay``, ``Trigger.AvailableNow``)
is the local stream reader's (:class:`~tidelog.spark.reader.StreamReaderBase`). Partitions that
appear later start at their earliest offset; offsets gone (remote retention, the broker's log
start) are data loss under ``failOnDataLoss``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

from pyspark.sql.datasource import InputPartition

from tidelog.clock import SYSTEM_CLOCK, Clock
from tidelog.spark import options as o
from tidelog.spark.offsets import PartitionOffsets, canonical
from tidelog.spark.ranges import OffsetRange
from tidelog.spark.reader import StreamReaderBase, check_schema, loss
from tidelog.spark.remote_source import (
    RemoteOffsetRange,
    RemoteSourceOptions,
    RemotePlan,
    parse_remote_options,
    read_remote_range,
)

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import StructType

REFRESH_MS = 1000
"""The longest the driver reuses the store's listing and metadata between Spark's polls."""


def stream_reader(options: Mapping[str, str], schema: StructType) -> RemoteStreamReader:
    """The micro-batch stream reader of a store path; raises SourceOptionError on bad input."""
    ropts = parse_remote_options(options, streaming=True)
    check_schema(schema, ropts.parsed.include_headers)
    return RemoteStreamReader(ropts)


class RemoteStreamReader(StreamReaderBase):
    """The driver-side instance lives as long as the query (the last plan and when it was made,
    the AvailableNow target); executors get a pickled copy holding the options only."""

    _GONE_FROM = " from the remote tier"

    def __init__(self, ropts: RemoteSourceOptions, clock: Clock = SYSTEM_CLOCK) -> None:
        self.ropts = ropts
        self._clock = clock
        self._plan: RemotePlan | None = None
        self._planned_ms = 0
        self._latest: PartitionOffsets | None = None
        self._target: PartitionOffsets | None = None
        self._last_trigger_ms: int | None = None
        self._broker_ends: tuple[int, PartitionOffsets, PartitionOffsets] | None = None
        o.check_covers(ropts.parsed.starting, self._current().partitions, o.STARTING_OFFSETS)

    def __getstate__(self) -> dict[str, object]:
        return {"ropts": self.ropts}

    def __setstate__(self, state: dict[str, object]) -> None:
        self.ropts = state["ropts"]  # type: ignore[assignment]
        self._clock, self._plan, self._planned_ms, self._latest, self._target = SYSTEM_CLOCK, None, 0, None, None
        self._last_trigger_ms, self._broker_ends = None, None

    def _options(self) -> o.SourceOptions:
        return self.ropts.parsed

    def _current(self, fresh: bool = False) -> RemotePlan:
        now = self._clock.milliseconds()
        if fresh or self._plan is None or now - self._planned_ms >= REFRESH_MS:
            self._plan, self._planned_ms = RemotePlan(self.ropts), now
        return self._plan

    def initialOffset(self) -> dict:
        plan = self._current(fresh=True)
        o.check_covers(self.ropts.parsed.starting, plan.partitions, o.STARTING_OFFSETS)
        start = plan.resolve(self.ropts.parsed.starting, starting=True)
        for tp, offset in start.items():
            if offset > plan.bounds[tp].end_offset:
                end = "high watermark" if self.ropts.bootstrap else "highest remote offset + 1"
                raise o.SourceOptionError(f"The starting offset {offset} of {tp} is beyond its {end} "
                                          f"({plan.bounds[tp].end_offset})")
        return canonical(start)

    def _ends(self) -> tuple[PartitionOffsets, PartitionOffsets]:
        if self.ropts.bootstrap:
            return self._ends_from_broker()
        plan = self._current()
        return ({tp: b.end_offset for tp, b in plan.bounds.items()},
                {tp: b.log_start_offset for tp, b in plan.bounds.items()})

    def _ends_from_broker(self) -> tuple[PartitionOffsets, PartitionOffsets]:
        """High watermarks (read_committed: last stable offsets) from the broker, asked at most
        once per REFRESH_MS (one Metadata and
        one ListOffsets), with the log start offsets of partitions first seen then (one more
        ListOffsets; they are the start of partitions a batch has no offset for yet)."""
        from tidelog.spark.broker_client import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
        from tidelog.spark.broker_tail import BrokerPartitions

        now = self._clock.milliseconds()
        if self._broker_ends is None or now - self._broker_ends[0] >= REFRESH_MS:
            broker = BrokerPartitions(self.ropts.bootstrap, self.ropts.parsed)
            partitions = self.ropts.parsed.subscription.select(sorted(broker.existing))
            known = {} if self._broker_ends is None else self._broker_ends[2]
            new = broker.offsets([tp for tp in partitions if tp not in known], EARLIEST_TIMESTAMP)
            self._broker_ends = (now, broker.offsets(partitions, LATEST_TIMESTAMP),
                                 {tp: new[tp] if tp in new else known[tp] for tp in partitions})
        return self._broker_ends[1], self._broker_ends[2]

    def _ranges(self, begin: PartitionOffsets, stop: PartitionOffsets) -> Sequence[InputPartition]:
        plan = self._current()
        if any(tp not in plan.bounds or stop[tp] > plan.bounds[tp].end_offset for tp in stop):
            plan = self._current(fresh=True)  # a restart's replay, or ends seen after this plan
        ranges = []
        for tp in sorted(stop):
            bounds = plan.bounds.get(tp)
            first = begin.get(tp, bounds.log_start_offset if bounds else 0)
            if bounds is not None and first < bounds.log_start_offset < stop[tp]:
                where = "log" if self.ropts.bootstrap else "remote tier"
                loss(self.ropts.parsed, f"Cannot fetch offsets [{first}, {bounds.log_start_offset}) of {tp}: the "
                                        f"{where} now starts at {bounds.log_start_offset}.")
                first = bounds.log_start_offset
            if stop[tp] < first:
                loss(self.ropts.parsed, f"Partition {tp}'s offset was changed from {first} to {stop[tp]}.")
                continue
            ranges.append(OffsetRange(tp.topic, tp.partition, first, stop[tp]))
        return plan.split(ranges)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, RemoteOffsetRange):
            return iter(())
        return read_remote_range(self.ropts, partition)

