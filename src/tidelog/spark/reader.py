"""``spark.read.format("tidelog")`` and ``spark.readStream.format("tidelog")``: segment files to rows.

Both readers work like Spark's Kafka source, with the data dir in place of a broker:

* **driver** (``reader()``/``streamReader()``, :meth:`partitions`, the stream's offset calls):
  options are parsed and checked against the data dir (:mod:`tidelog.spark.options`), offsets
  resolved through a read-only :class:`~tidelog.storage.log_view.LogView` (the readable end plays
  the high watermark), ranges split (:mod:`tidelog.spark.ranges`);
* **executors** (:meth:`read`): one :class:`OffsetRange` per task, read from the segment files
  with ``pread`` and turned into Arrow record batches (:mod:`tidelog.spark.arrow_rows`). A read is
  bounded by its planned end, so a replayed micro-batch returns the same records.

**Isolation** (``kafka.isolation.level``): under read_committed the end a read resolves to
(``latest``, the stream's ends) is each partition's last stable offset instead of the readable
end, and each task leaves out the records of aborted transactions with the storage's filter
(:class:`~tidelog.storage.read_committed.AbortedBatchFilter`) over the ``.txnindex`` entries of
its range (:mod:`tidelog.storage.view_txns`), as a read_committed Kafka consumer does.

**Data loss.** Offsets below the log start offset (retention, DeleteRecords) or a deleted partition
fail the task or the planning with Kafka's message (``failOnDataLoss=true``, the default), or are
skipped with a warning. Offset gaps left by compaction are normal and never reported.

**Streams** (Spark >= 4.2 admission control): ``maxOffsetsPerTrigger`` is ``ReadMaxRows``, split
across partitions in proportion to their backlog (:func:`~tidelog.spark.ranges.rate_limit`);
``minOffsetsPerTrigger`` holds a batch back until that many offsets are waiting or
``maxTriggerDelay`` passed since the last batch (tracked here, on the driver). With both, Spark is
given ``ReadMaxRows`` and the minimum is applied from the options. ``Trigger.AvailableNow`` fixes
the target at the ends seen by :meth:`prepareForTriggerAvailableNow` and drains to it in
rate-limited batches (the minimum is ignored then, or the query could stop short); ``Trigger.Once``
is handed ``ReadAllAvailable`` by Spark and reads everything. Partitions that appear later
(``subscribePattern``, new partitions) start at their log start offset. The offsets Spark
checkpoints are Kafka's ``{"topic":{"partition":next offset}}`` in canonical order.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)

from tidelog.clock import SYSTEM_CLOCK, Clock
from tidelog.spark import options as o
from tidelog.spark.arrow_rows import record_batches
from tidelog.spark.offsets import PartitionOffsets, canonical, from_dict
from tidelog.spark.ranges import (
    OffsetRange,
    check_range_bounds,
    rate_limit,
    resolve,
    split_ranges,
)
from tidelog.storage.log_view import DataLossError, LogView, PartitionBounds, PartitionView
from tidelog.storage.read_committed import AbortedBatchFilter
from tidelog.storage.view_txns import aborted_transactions, last_stable_offset
from tidelog.topic_partition import TopicPartition

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import StructType

log = logging.getLogger(__name__)

FAIL_ON_DATA_LOSS_TRUE = (
    "Some data may have been lost because they are not available in the log any more; either the data was "
    "aged out by retention or the topic may have been deleted before all the data in the topic was processed. "
    "If you don't want your query to fail on such cases, set the source option \"failOnDataLoss\" to \"false\".")
FAIL_ON_DATA_LOSS_FALSE = (
    "Some data may have been lost because they are not available in the log any more; either the data was "
    "aged out by retention or the topic may have been deleted before all the data in the topic was processed. "
    "If you want your query to fail on such cases, set the source option \"failOnDataLoss\" to \"true\".")

_FIXED_SCHEMA = [("key", "binary"), ("value", "binary"), ("topic", "string"), ("partition", "int"),
                 ("offset", "bigint"), ("timestamp", "timestamp"), ("timestampType", "int")]
_HEADERS_FIELD = ("headers", "array<struct<key:string,value:binary>>")

_VIEWS: dict[tuple[str, ...], LogView] = {}  # per process: reused Python workers keep index caches
_PLANNED: dict[str, list[OffsetRange]] = {}  # batch plans waiting for partitions(), by reader token


class DataLossReported(RuntimeError):
    """Offsets a query needs are gone and ``failOnDataLoss`` is true (message says how to skip)."""


def batch_reader(options: Mapping[str, str], schema: StructType) -> TidelogBatchReader:
    """The batch reader for ``options`` (lower-cased keys); raises SourceOptionError on bad input."""
    parsed = o.parse_source_options(options, streaming=False)
    check_schema(schema, parsed.include_headers)
    return TidelogBatchReader(parsed)


def stream_reader(options: Mapping[str, str], schema: StructType) -> TidelogStreamReader:
    """The micro-batch stream reader for ``options``; raises SourceOptionError on bad input."""
    parsed = o.parse_source_options(options, streaming=True)
    check_schema(schema, parsed.include_headers)
    return TidelogStreamReader(parsed)


def check_schema(schema: StructType, include_headers: bool) -> None:
    """Refuse a user-given schema other than the source's fixed one (with ``headers`` when
    ``includeHeaders``): SourceOptionError listing both."""
    expected = _FIXED_SCHEMA + ([_HEADERS_FIELD] if include_headers else [])
    found = [(f.name, f.dataType.simpleString()) for f in schema.fields]
    if found != expected:
        raise o.SourceOptionError(
            "tidelog source has a fixed schema and cannot be set with a custom one "
            f"(expected {', '.join(f'{n} {t}' for n, t in expected)}; got {', '.join(f'{n} {t}' for n, t in found)})")


def view_of(log_dirs: Sequence[str]) -> LogView:
    """This process's :class:`LogView` of ``log_dirs`` (kept across tasks of a reused worker)."""
    key = tuple(log_dirs)
    view = _VIEWS.get(key)
    if view is None:
        view = _VIEWS[key] = LogView(key)
    return view


# --- planning on the driver -----------------------------------------------------------------

class _Subscribed:
    """The subscribed partitions of a view and their refreshed bounds (driver side)."""

    def __init__(self, parsed: o.SourceOptions, check_dirs: bool = True) -> None:
        if check_dirs:
            o.check_data_dirs(parsed.log_dirs)
        self.view = view_of(parsed.log_dirs)
        self.dirs = self.view.partitions()
        self.partitions = parsed.subscription.select(list(self.dirs))
        live = {tp: self.dirs[tp] for tp in self.partitions if tp in self.dirs}
        self.views: dict[TopicPartition, PartitionView] = {tp: self.view.partition(tp, d) for tp, d in live.items()}
        self.bounds: dict[TopicPartition, PartitionBounds] = self.view.bounds(live)
        if parsed.read_committed:
            self.bounds = {tp: stable_bounds(self.views[tp], b) for tp, b in self.bounds.items()}


def stable_bounds(view: PartitionView, bounds: PartitionBounds) -> PartitionBounds:
    """``bounds`` ending at the partition's last stable offset (read_committed)."""
    end = last_stable_offset(view)
    return PartitionBounds(bounds.topic_partition, min(bounds.log_start_offset, end), end)


def loss(parsed: o.SourceOptions, message: str) -> None:
    """Fail with ``message`` (failOnDataLoss) or log it and go on."""
    if parsed.fail_on_data_loss:
        raise DataLossReported(f"{message} {FAIL_ON_DATA_LOSS_TRUE}")
    log.warning("%s %s", message, FAIL_ON_DATA_LOSS_FALSE)


# --- reading on executors -------------------------------------------------------------------

def read_range(parsed: o.SourceOptions, r: OffsetRange) -> Iterator[pa.RecordBatch]:
    """Arrow batches of ``r``'s data records (executor side); data loss per ``failOnDataLoss``."""
    tp = r.topic_partition
    try:
        pview = view_of(parsed.log_dirs).partition(tp)
        bounds = pview.refresh()
    except DataLossError:
        loss(parsed, f"Cannot fetch offsets [{r.start}, {r.end}) of {tp}: the partition does not exist any more.")
        return
    start = r.start
    if start < bounds.log_start_offset:
        loss(parsed, f"Cannot fetch offset {start} of {tp}: the log start offset is now {bounds.log_start_offset}.")
        start = bounds.log_start_offset
    end = r.end
    if end > bounds.end_offset:
        loss(parsed, f"Cannot fetch offsets up to {end} of {tp}: the log now ends at {bounds.end_offset}.")
        end = bounds.end_offset
    yield from _read_batches(parsed, pview, tp, start, end)


def _read_batches(parsed: o.SourceOptions, pview: PartitionView, tp: TopicPartition, start: int,
                  end: int) -> Iterator[pa.RecordBatch]:
    """Read ``[start, end)``; when retention removes offsets mid-read, report it and go on from the
    new log start offset (``failOnDataLoss=false``)."""
    next_offset = start
    aborted = AbortedBatchFilter(aborted_transactions(pview, start, end)) if parsed.read_committed else None
    while next_offset < end:
        try:
            for buf in pview.read_batches(next_offset, end):
                for batch in record_batches(buf, tp.topic, tp.partition, next_offset, end,
                                            include_headers=parsed.include_headers, aborted=aborted):
                    yield batch
                    next_offset = batch.column(4)[-1].as_py() + 1
            return
        except DataLossError as e:
            loss(parsed, f"Cannot fetch offset {next_offset} of {tp}: {e}.")
            try:
                log_start = pview.refresh().log_start_offset
            except DataLossError:
                return
            if log_start <= next_offset:
                return
            next_offset = log_start


# --- batch ----------------------------------------------------------------------------------

class TidelogBatchReader(DataSourceReader):
    """``spark.read.format("tidelog")``: everything is resolved and checked when it is created
    (at planning, on the driver), so bad input fails before any job. Spark pickles the reader into
    every task *before* it asks for :meth:`partitions`, so the planned ranges wait in this
    process's :data:`_PLANNED` (keyed by a token), not on the instance."""

    def __init__(self, parsed: o.SourceOptions) -> None:
        self.parsed = parsed
        self._token = uuid.uuid4().hex
        _PLANNED[self._token] = self._plan()

    def _plan(self) -> list[OffsetRange]:
        parsed = self.parsed
        sub = _Subscribed(parsed)
        o.check_named_partitions(parsed, set(sub.dirs))
        o.check_covers(parsed.starting, sub.partitions, o.STARTING_OFFSETS)
        o.check_covers(parsed.ending, sub.partitions, o.ENDING_OFFSETS)
        start = resolve(parsed.starting, sub.bounds, sub.views, starting=True,
                        no_match_strategy=parsed.no_match_strategy)
        end = resolve(parsed.ending, sub.bounds, sub.views, starting=False)
        check_range_bounds(start, end, sub.bounds)
        ranges = [OffsetRange(tp.topic, tp.partition, start[tp], end[tp]) for tp in sorted(end)]
        return split_ranges(ranges, parsed.min_partitions, parsed.max_records_per_partition)

    def partitions(self) -> list[InputPartition]:
        ranges = _PLANNED.pop(self._token, None)
        return list(self._plan() if ranges is None else ranges)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, OffsetRange):  # no ranges: Spark still runs one task, with None
            return iter(())
        return read_range(self.parsed, partition)


# --- stream ---------------------------------------------------------------------------------

class StreamReaderBase(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """What the stream readers of a data dir and of a store share: admission of a batch up to
    the ends (``maxOffsetsPerTrigger``, ``minOffsetsPerTrigger``/``maxTriggerDelay``, the
    AvailableNow target), the latest ends reported to Spark, and the checks opening
    :meth:`partitions`. A subclass sets ``_clock``, ``_latest``, ``_target`` and
    ``_last_trigger_ms`` (None) and gives :meth:`_options`, :meth:`_ends` and :meth:`_ranges`.
    Driver side, called by Spark's micro-batch thread only: not thread-safe, takes no lock."""

    _clock: Clock
    _latest: PartitionOffsets | None
    _target: PartitionOffsets | None
    _last_trigger_ms: int | None
    _GONE_FROM = ""
    """Where vanished partitions are gone from, for the data-loss message (``" from ..."``)."""

    def _options(self) -> o.SourceOptions:
        raise NotImplementedError

    def _ends(self) -> tuple[PartitionOffsets, PartitionOffsets]:
        """``(ends, log start offsets)`` of the subscribed partitions now."""
        raise NotImplementedError

    def _ranges(self, begin: PartitionOffsets, stop: PartitionOffsets) -> Sequence[InputPartition]:
        """The tasks reading ``begin`` to ``stop`` (``stop`` non-empty and not ``begin``)."""
        raise NotImplementedError

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        latest, earliest = self._ends()
        self._latest = latest
        if self._target is not None:
            latest = {tp: min(end, latest.get(tp, end)) for tp, end in self._target.items()}
        return canonical(self._admit(from_dict(start), latest, earliest, limit))

    def _admit(self, begin: PartitionOffsets, latest: PartitionOffsets, earliest: PartitionOffsets,
               limit: ReadLimit) -> PartitionOffsets:
        """The end of the next batch: ``begin`` while ``minOffsetsPerTrigger`` holds it back,
        else ``latest``, rate-limited under ``ReadMaxRows``."""
        if not isinstance(limit, ReadAllAvailable):
            parsed = self._options()
            min_rows = limit.min_rows if isinstance(limit, ReadMinRows) else parsed.min_offsets_per_trigger
            if min_rows is not None and self._target is None and self._hold_back(min_rows, begin, latest, earliest):
                return begin
        if isinstance(limit, ReadMaxRows):
            return rate_limit(limit.max_rows, begin, latest, earliest)
        return latest

    def _hold_back(self, min_rows: int, begin: PartitionOffsets, latest: PartitionOffsets,
                   earliest: PartitionOffsets) -> bool:
        """Kafka's ``minOffsetsPerTrigger``: wait while fewer offsets are new, unless
        ``maxTriggerDelay`` passed since the last batch (the first batch never waits)."""
        now = self._clock.milliseconds()
        if self._last_trigger_ms is None or now - self._last_trigger_ms >= self._options().max_trigger_delay_ms:
            self._last_trigger_ms = now
            return False
        waiting = sum(end - begin.get(tp, earliest.get(tp, 0)) for tp, end in latest.items())
        if waiting < min_rows:
            return True
        self._last_trigger_ms = now
        return False

    def getDefaultReadLimit(self) -> ReadLimit:
        parsed = self._options()
        if parsed.max_offsets_per_trigger is not None:
            return ReadMaxRows(parsed.max_offsets_per_trigger)
        if parsed.min_offsets_per_trigger is not None:
            return ReadMinRows(parsed.min_offsets_per_trigger)
        return ReadAllAvailable()

    def reportLatestOffset(self) -> dict | None:
        return None if self._latest is None else canonical(self._latest)

    def prepareForTriggerAvailableNow(self) -> None:
        self._target, _ = self._ends()

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        begin, stop = from_dict(start), from_dict(end)
        if begin == stop:
            return []
        gone = sorted(set(begin) - set(stop))
        if gone:
            loss(self._options(), f"Partitions {', '.join(map(str, gone))} are gone{self._GONE_FROM}.")
        return self._ranges(begin, stop)

    def commit(self, end: dict) -> None:
        """Nothing to record: offsets live in Spark's checkpoint (Kafka's source commits nothing)."""


class TidelogStreamReader(StreamReaderBase):
    """``spark.readStream.format("tidelog")`` (see the module docstring). The driver-side instance
    lives as long as the query and keeps the last ends seen, the AvailableNow target and the time
    of the last batch; executors get a pickled copy and only call :meth:`read`."""

    def __init__(self, parsed: o.SourceOptions, clock: Clock = SYSTEM_CLOCK) -> None:
        self.parsed = parsed
        self._clock = clock
        self._latest: PartitionOffsets | None = None
        self._target: PartitionOffsets | None = None
        self._last_trigger_ms: int | None = None
        sub = _Subscribed(parsed)  # checks the path and named partitions now, at start()
        o.check_named_partitions(parsed, set(sub.dirs))
        o.check_covers(parsed.starting, sub.partitions, o.STARTING_OFFSETS)

    def __getstate__(self) -> dict[str, object]:
        return {"parsed": self.parsed}  # executors need the options only

    def __setstate__(self, state: dict[str, object]) -> None:
        self.parsed = state["parsed"]  # type: ignore[assignment]
        self._clock, self._latest, self._target, self._last_trigger_ms = SYSTEM_CLOCK, None, None, None

    def _options(self) -> o.SourceOptions:
        return self.parsed

    # --- offsets (driver) ----------------------------------------------------------------

    def initialOffset(self) -> dict:
        sub = _Subscribed(self.parsed)
        o.check_covers(self.parsed.starting, sub.partitions, o.STARTING_OFFSETS)
        start = resolve(self.parsed.starting, sub.bounds, sub.views, starting=True,
                        no_match_strategy=self.parsed.no_match_strategy)
        for tp, offset in start.items():
            if offset > sub.bounds[tp].end_offset:
                raise o.SourceOptionError(
                    f"The starting offset {offset} of {tp} is beyond its readable end {sub.bounds[tp].end_offset}")
        return canonical(start)

    def _ends(self) -> tuple[PartitionOffsets, PartitionOffsets]:
        """``(readable ends, log start offsets)`` of the subscribed partitions now (polled ~100
        times a second: a ``stat`` per log dir and three per partition when nothing changed)."""
        sub = _Subscribed(self.parsed, check_dirs=False)
        ends = {tp: b.end_offset for tp, b in sub.bounds.items()}
        return ends, {tp: b.log_start_offset for tp, b in sub.bounds.items()}

    # --- planning (driver) ---------------------------------------------------------------

    def _ranges(self, begin: PartitionOffsets, stop: PartitionOffsets) -> Sequence[InputPartition]:
        sub = _Subscribed(self.parsed, check_dirs=False)
        ranges = []
        for tp in sorted(stop):
            first = begin.get(tp, sub.bounds[tp].log_start_offset if tp in sub.bounds else 0)
            if stop[tp] < first:
                loss(self.parsed, f"Partition {tp}'s offset was changed from {first} to {stop[tp]}.")
                continue
            ranges.append(OffsetRange(tp.topic, tp.partition, first, stop[tp]))
        return split_ranges(ranges, self.parsed.min_partitions, self.parsed.max_records_per_partition)

    # --- executors -----------------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, OffsetRange):
            return iter(())
        return read_range(self.parsed, partition)


def check_load_options(options: Mapping[str, str]) -> None:
    """The checks that hold for batch and streaming reads alike (options, path, named partitions),
    for ``DataSource.schema()`` to call so that they fail at ``load()``; batch- or stream-only
    rules are checked when Spark builds the reader (first action, or ``start()``). Does nothing
    for option sets without a subscription (``subscribe``/``subscribePattern``/``assign``):
    those are writes, or reads that fail in ``reader()`` saying the subscription is missing."""
    lowered = {k.lower(): str(v) for k, v in options.items()}
    if not any(k in lowered for k in o.STRATEGY_KEYS):
        return
    for key in (o.ENDING_OFFSETS, o.ENDING_TIMESTAMP, o.ENDING_BY_TIMESTAMP):
        lowered.pop(key, None)  # a stream rejects them, a batch allows them: decided later
    if lowered.get(o.STARTING_OFFSETS, "").strip().lower() == "latest":
        lowered.pop(o.STARTING_OFFSETS)
    parsed = o.parse_source_options(lowered, streaming=True)
    o.check_data_dirs(parsed.log_dirs)
    o.check_named_partitions(parsed, set(view_of(parsed.log_dirs).partitions()))
