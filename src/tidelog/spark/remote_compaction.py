"""A tiered compacted log's cleaning pass on Spark: executors read the remote tier straight from
the store and upload its cleaned segments; the owner keeps planning, fencing and the swap.

:meth:`SparkCleaningEngine.for_tiered_pass <tidelog.spark.compaction.SparkCleaningEngine.for_tiered_pass>`
gives the cleaner (:class:`~tidelog.cleaner.clean.Cleaner`) a :class:`SparkTieredEngine` for a
pass over a tiered log. :class:`~tidelog.cleaner.remote_clean.TieredPass` still chooses the
remote segments and their groups, reserves each group's replacement (COPY_SEGMENT_STARTED under a
fresh id), checks at swap time that nothing changed, and switches with its one swap event; this
engine takes over "clean the groups into remote segments" (:meth:`SparkTieredEngine.clean_remote_groups`)::

    walk job   one task per remote segment below the map's end: its .log streamed from the
               store to the executor's temp dir, batch headers walked (cuts, transaction events)
    driver     the local segments walked from the log dir; the markers replayed over the dirty
               range in offset order (aborted batches; each group's starting transaction state);
               the local tier's key rows scanned (the owner's disk; the local tier only)
    stage 1    mapInArrow over batch-aligned byte ranges of the remote objects (ranged GETs):
               (key, offset, eligible, group) per keyed record, no values
    stage 2    max(offset) over the eligible rows of each key, remote and local rows together: a
               window partitioned by key (exact keys, no offset-map limit, one shuffle)
    stage 3    groupBy(group).applyInArrow: each remote group rewritten on an executor by the
               in-process copy loop, reading its objects with ranged GETs, into the executor's
               temp dir, then uploaded under its reserved id (``remote_clean.stage_cleaned``);
               the local rows' group returns their (offset, latest) pairs
    owner      swap (TieredPass), then the local tier rewritten in process with those pairs as
               the offset map (:meth:`SparkTieredEngine.clean_group`)

Same map, same copy loop, same sealing and the same upload step as the in-process remote clean,
so the remote segments are byte for byte the same. A failure or an abort before the swap: the
TieredPass deletes every reserved segment's objects (what an executor uploaded included); a
crash: they stay COPY_SEGMENT_STARTED and the next clean or copy pass's cleanup deletes them.
A task retried by Spark uploads again under the same id (PUTs replace), so ``spark.speculation``
must stay off as for the local engine.

Costs: each remote segment is read three times from the store (walk, key scan, rewrite), plus
its ``.index`` for the first dirty one; the driver holds the walks (cut positions and
transactional batches only), the plans, and the local tier's key rows while they are handed to
Spark, then 16 bytes per local keyed record for the local rewrite; executors hold one segment's
range at a time and one cleaned group on their temp disk. The store object itself (with its
credentials) is pickled into the tasks, as the Spark remote source sends its ``rsm.config.``
options: executors must reach the store, never the log dir.
"""

from __future__ import annotations

import pickle
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from tidelog.cleaner.clean import MIN_COPY_READ, MIN_MAP_READ, CheckDone, InProcessEngine
from tidelog.cleaner.remote_view import RemoteSegment, TierView
from tidelog.cleaner.retain import CleaningRound
from tidelog.cleaner.stats import CleanerStats
from tidelog.cleaner.transactions import CleanedTransactionMetadata
from tidelog.errors import LogCleaningError
from tidelog.remote.metadata import RemoteLogSegmentMetadata
from tidelog.remote.store import RemoteStore
from tidelog.spark.compaction import SegmentWalk, first_line, plan_groups, walk_segment
from tidelog.spark.compaction_tasks import (
    KEYS_DDL,
    ROWS_DDL,
    GroupOffsets,
    KeyScan,
    RewriteJob,
    ScanRange,
    group_offsets,
    ignore_aborted,
    key_scanner,
    scan_range,
)
from tidelog.spark.remote_compaction_tasks import (
    LOCAL_GROUP,
    REMOTE_MANIFEST_DDL,
    RemoteGroupPlan,
    RemoteWalk,
    remote_file,
    remote_group_rewriter,
    walk_remote,
)
from tidelog.storage.log import Log
from tidelog.storage.log_config import segment_config
from tidelog.storage.segment import LogSegment

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from tidelog.cleaner.remote_clean import TieredPass
    from tidelog.spark.compaction import SparkCleaningEngine


class TieredLookup:
    """The map of one tiered pass as planned by :meth:`SparkTieredEngine.build_offset_map`:
    never partial (``latest_offset`` is the end of the dirty range minus one); the map itself is
    the shuffle of the pass's job."""

    utilization = 0.0  # no fixed buffer to fill

    def __init__(self, start: int, end: int, latest_offset: int, aborted: np.ndarray,
                 remote_walks: dict[str, SegmentWalk], local_walks: dict[int, SegmentWalk],
                 dirty_remote: frozenset[str], dirty_local: frozenset[int]) -> None:
        self.first_dirty_offset = start
        self.end_offset = end
        self.latest_offset = latest_offset
        self.aborted_batches = aborted
        self.remote_walks = remote_walks
        self.local_walks = local_walks
        self.dirty_remote = dirty_remote
        self.dirty_local = dirty_local


class SparkTieredEngine:
    """The Spark engine for one pass over a tiered log (module docstring). Made per pass by
    :meth:`SparkCleaningEngine.for_tiered_pass`; not thread-safe (one cleaner thread's pass)."""

    def __init__(self, engine: SparkCleaningEngine, tier: TieredPass) -> None:
        self._engine = engine
        self._tier = tier
        self.buffers = engine.buffers
        self._in_process = InProcessEngine(engine.buffers)
        self._lookup: TieredLookup | None = None
        self._local: GroupOffsets | None = None
        #: Seconds spent per step of the pass (``walk``, ``local_scan``, ``job``, ``local_rewrite``;
        #: ``rewrite`` and ``upload``: summed over the executors' groups), for benchmarks and logs.
        self.timings: dict[str, float] = {}

    @contextmanager
    def _timed(self, step: str) -> Iterator[None]:
        began = time.perf_counter()
        try:
            yield
        finally:
            self.timings[step] = self.timings.get(step, 0.0) + time.perf_counter() - began

    @property
    def _partition(self) -> str:
        return str(self._tier.tp)

    # --- the map ----------------------------------------------------------------------------

    def build_offset_map(self, source: Log | TierView, start: int, end: int, stats: CleanerStats,
                         check_done: CheckDone) -> TieredLookup:
        """Plan the map of [start, end) over ``source`` (the tier's map source): remote segments
        walked on the executors, local ones here, the markers replayed in offset order."""
        check_done(self._tier.tp)
        dirty = source.segments_between(start, end)
        first = dirty[0].metadata.id if dirty and isinstance(dirty[0], RemoteSegment) else None
        remote = [s.metadata for s in self._tier.remote if s.base_offset < end]
        with self._timed("walk"):
            walked = self._walk_remote(remote, first, start)
        txn = CleanedTransactionMetadata(source.collect_aborted_transactions(start, end), ignore_aborted)
        aborted: list[int] = []
        local_walks: dict[int, SegmentWalk] = {}
        for i, segment in enumerate(dirty):
            if isinstance(segment, RemoteSegment):
                walk, from_position = walked[segment.metadata.id]
            else:
                from_position = segment.offset_index.lookup(start).position if i == 0 else 0
                walk = local_walks[segment.base_offset] = walk_segment(segment.log.path, segment.size,
                                                                       self._engine.split_bytes, from_position)
            aborted += walk.apply(txn, from_position)
            stats.index_messages_read(walk.records_counted)
            stats.index_bytes_read(walk.bytes_counted)
        self._lookup = TieredLookup(
            start, end, end - 1 if dirty else -1, np.array(sorted(set(aborted)), np.int64),
            {k: w for k, (w, _) in walked.items()}, local_walks,
            frozenset(s.metadata.id for s in dirty if isinstance(s, RemoteSegment)),
            frozenset(s.base_offset for s in dirty if not isinstance(s, RemoteSegment)))
        return self._lookup

    def _walk_remote(self, segments: list[RemoteLogSegmentMetadata], first: str | None,
                     start: int) -> dict[str, tuple[SegmentWalk, int]]:
        if not segments:
            return {}
        job = RemoteWalk(self._tier.store, tuple(segments), first, start, self._engine.split_bytes)
        context = self._engine.spark.sparkContext
        slices = min(len(segments), max(2, context.defaultParallelism * 2))
        try:
            found = context.parallelize(range(len(segments)), slices).map(lambda i: walk_remote(job, i)).collect()
        except Exception as e:  # noqa: BLE001 - a failed job: Py4J/PySpark errors, whatever their class
            raise LogCleaningError(f"the Spark walk of remote segments {segments[0].start_offset}.."
                                   f"{segments[-1].end_offset} failed: {first_line(e)}",
                                   topic_partition=self._partition) from e
        return {segment_id: (walk, position) for segment_id, walk, position in found}

    # --- the remote tier ----------------------------------------------------------------------

    def clean_remote_groups(self, store: RemoteStore, view: TierView, groups: Sequence[Sequence[RemoteSegment]],
                            reserved: Sequence[RemoteLogSegmentMetadata], round: CleaningRound, legacy_horizon: int,
                            stats: CleanerStats, check_done: CheckDone) -> list[RemoteLogSegmentMetadata | None]:
        """Clean and upload every group (one job; the local tier's map rows come back with it):
        per group the segment uploaded under ``reserved[i]``'s id, or None when it is one segment
        left unchanged. Raises the first group's error (typed, as in process) or
        :class:`LogCleaningError` naming the partition and offsets when the job fails."""
        check_done(self._tier.tp)
        plans = self._plan_remote(view, groups, reserved, legacy_horizon)
        manifest = self._run(round, plans)
        check_done(self._tier.tp)
        results: list[RemoteLogSegmentMetadata | None] = []
        for row in manifest:
            stats.read_messages(row["messages_read"], row["bytes_read"])
            stats.recopy_messages(row["messages_written"], row["bytes_written"])
            stats.invalid_messages_read += row["invalid_messages"]
            results.append(None if row["segment"] is None else pickle.loads(row["segment"]))
        return results

    def _plan_remote(self, view: TierView, groups: Sequence[Sequence[RemoteSegment]],
                     reserved: Sequence[RemoteLogSegmentMetadata], legacy_horizon: int) -> list[RemoteGroupPlan]:
        """Each group's plan, with the transaction state each starts with (``clean_remote``'s:
        a fresh state driven over the groups in order)."""
        walks = self._map().remote_walks
        plans = plan_groups(view, groups, CleanedTransactionMetadata([], ignore_aborted), legacy_horizon,
                            lambda segment: walks[segment.metadata.id], lambda segment: remote_file(segment.metadata))
        return [RemoteGroupPlan(plan, tuple(s.metadata for s in group), target)
                for plan, group, target in zip(plans, groups, reserved, strict=True)]

    # --- the local tier -----------------------------------------------------------------------

    def clean_group(self, log: Log, group: Sequence[LogSegment], round: CleaningRound,
                    txn: CleanedTransactionMetadata, legacy_delete_horizon_ms: int, stats: CleanerStats,
                    check_done: CheckDone) -> LogSegment:
        """A local group, in process, with the pass's map as the job gave it for the local rows."""
        local = self._local_round(round)
        with self._timed("local_rewrite"):
            return self._in_process.clean_group(log, group, local, txn, legacy_delete_horizon_ms, stats, check_done)

    def measure_group(self, log: Log, group: Sequence[LogSegment], round: CleaningRound,
                      txn: CleanedTransactionMetadata, legacy_delete_horizon_ms: int, stats: CleanerStats,
                      check_done: CheckDone) -> None:
        self._in_process.measure_group(log, group, self._local_round(round), txn, legacy_delete_horizon_ms,
                                       stats, check_done)

    def _local_round(self, round: CleaningRound) -> CleaningRound:
        if self._local is None:  # no remote group below the map's end: the job maps the local rows only
            self._run(round, [])
        assert self._local is not None
        return replace(round, offset_map=self._local)

    # --- the job --------------------------------------------------------------------------------

    def _map(self) -> TieredLookup:
        if self._lookup is None:
            raise TypeError("the tiered Spark engine cleans with the map its build_offset_map planned")
        return self._lookup

    def _run(self, round: CleaningRound, plans: list[RemoteGroupPlan]) -> list[Any]:
        """Stages 1-3 as one job; the remote groups' manifest rows in group order (the local
        rows' pairs kept for :meth:`clean_group`)."""
        from pyspark.sql import Window
        from pyspark.sql import functions as F

        lookup = self._map()
        spark = self._engine.spark
        log = self._tier.log
        with self._timed("local_scan"):
            local_keys = self._local_keys(lookup)
        keys = self._remote_keys(lookup, plans).unionByName(local_keys)
        latest = F.max(F.when(F.col("eligible"), F.col("offset"))).over(Window.partitionBy("key"))
        rows = keys.select("grp", "offset", latest.alias("latest"),
                           F.when(F.col("legacy"), F.col("key")).alias("legacy_key"),
                           F.lit(None).cast("binary").alias("plan"))
        sentinels = spark.createDataFrame([(p.plan.group, -1, None, None, pickle.dumps(p)) for p in plans]
                                          + [(LOCAL_GROUP, -1, None, None, None)], ROWS_DDL)
        job = RewriteJob("", segment_config(log.config), round.current_time, round.delete_retention_ms,
                         round.upper_bound_offset, dict(round.producers), lookup.latest_offset,
                         max(self._engine.buffers.io_buffer_size, MIN_COPY_READ),
                         max(self._engine.buffers.max_io_buffer_size, log.config.max_message_bytes), False,
                         store=self._tier.store)
        try:
            with self._timed("job"):
                manifest = (rows.unionByName(sentinels).groupBy("grp")
                            .applyInArrow(remote_group_rewriter(job), REMOTE_MANIFEST_DDL).collect())
        except Exception as e:  # noqa: BLE001 - a failed job: Py4J/PySpark errors, whatever their class
            raise LogCleaningError(f"the Spark cleaning job of the remote tier ({self._span(plans)}) failed: "
                                   f"{first_line(e)}", topic_partition=self._partition) from e
        local = [r for r in manifest if r["grp"] == LOCAL_GROUP]
        remote = sorted((r for r in manifest if r["grp"] != LOCAL_GROUP), key=lambda r: r["grp"])
        for step in ("rewrite", "upload"):
            self.timings[step] = self.timings.get(step, 0.0) + sum(r[f"{step}_seconds"] for r in remote)
        errors = [pickle.loads(r["error"]) for r in remote if r["error"] is not None]
        if errors:
            raise errors[0]
        if len(remote) != len(plans) or len(local) != 1:
            raise LogCleaningError(f"the Spark cleaning job returned {len(remote)} of {len(plans)} remote groups "
                                   f"({self._span(plans)})", topic_partition=self._partition)
        with pa.ipc.open_stream(local[0]["local"]) as reader:
            self._local = group_offsets(reader.read_all(), lookup.latest_offset)
        return remote

    @staticmethod
    def _span(plans: list[RemoteGroupPlan]) -> str:
        if not plans:
            return "no remote group"
        return f"offsets {plans[0].group[0].start_offset}..{plans[-1].group[-1].end_offset}"

    def _remote_keys(self, lookup: TieredLookup, plans: list[RemoteGroupPlan]) -> DataFrame:
        """Stage 1 over the remote groups' objects, on the executors."""
        ranges = []
        for p in plans:
            for segment, source in zip(p.group, p.plan.segments):
                cuts = lookup.remote_walks[segment.id].cuts.tolist()
                ranges += [ScanRange(source.path, a, b, p.plan.group, segment.id in lookup.dirty_remote)
                           for a, b in zip(cuts[:-1], cuts[1:])]
        tasks = self._engine.pack_tasks(ranges)
        spark = self._engine.spark
        if not tasks:
            return spark.createDataFrame([], KEYS_DDL)
        spec = KeyScan(tuple(tasks), lookup.first_dirty_offset, lookup.aborted_batches,
                       max(self._engine.buffers.io_buffer_size, MIN_MAP_READ), store=self._tier.store)
        return spark.range(0, len(tasks), 1, len(tasks)).mapInArrow(key_scanner(spec), KEYS_DDL)

    def _local_keys(self, lookup: TieredLookup) -> DataFrame:
        """The key rows of every local segment below the map's end (group -1), scanned here: the
        executors cannot see the log dir. Dirty ones are eligible for the map."""
        log = self._tier.log
        spec = KeyScan((), lookup.first_dirty_offset, lookup.aborted_batches,
                       max(self._engine.buffers.io_buffer_size, MIN_MAP_READ))
        batches = []
        for segment in log.segments_between(0, lookup.end_offset):
            walk = lookup.local_walks.get(segment.base_offset)
            if walk is None:
                walk = lookup.local_walks[segment.base_offset] = walk_segment(segment.log.path, segment.size,
                                                                              self._engine.split_bytes)
            cuts = walk.cuts.tolist()
            for a, b in zip(cuts[:-1], cuts[1:]):
                r = ScanRange(str(segment.log.path), a, b, LOCAL_GROUP, segment.base_offset in lookup.dirty_local)
                batches += list(scan_range(spec, r))
        if not batches:
            return self._engine.spark.createDataFrame([], KEYS_DDL)
        return self._engine.spark.createDataFrame(pa.Table.from_batches(batches))
