"""Log compaction as Spark jobs: :class:`SparkCleaningEngine`, the cleaner's engine seam on Spark.

The owner (:class:`tidelog.cleaner.clean.Cleaner`) still plans the round, decides the groups and
swaps each ``.cleaned`` segment in (``.cleaned`` → ``.swap`` → live, recoverable at every step);
this engine only produces the ``.cleaned`` segments, byte for byte those of the in-process engine
for the same input (same copy loop, same retention rules, same sealing).

**One pass, one Spark job** (a :class:`~tidelog.cleaner.clean.BatchCleaningEngine`: every group
of the pass at once)::

    driver     header walk of every segment below the map's end (mmap, batch headers only):
               batch positions, and the transactional and control batches in order
               replay the markers: aborted data batches of the dirty range (for the map), and
               the transaction state before each group (for the rewrite)
    stage 1    mapInArrow over batch-aligned byte ranges of the segments: (key, offset,
               eligible, group) per keyed record, no values
    stage 2    max(offset) over the eligible rows of each key: a window partitioned by key,
               i.e. groupBy(key).agg(max(offset)) joined back to every row in one shuffle
               (exact keys: no hash collisions, no memory bound, so the map is never partial)
    stage 3    groupBy(group).applyInArrow: each group rewritten on an executor with its own
               rows as the offset lookup (:class:`~tidelog.spark.compaction_tasks.GroupOffsets`),
               ``.cleaned`` files written into the partition dir; a manifest row per group back
    driver     the cleaned segments opened, handed to the owner, which swaps them in

:meth:`SparkCleaningEngine.build_offset_map` only walks and replays (cheap); the shuffle runs in
the rewrite job, so the key rows are never collected and never persisted. The one-group seam
(:meth:`~SparkCleaningEngine.clean_group`) works too, one job per group.

Why the driver walks headers: the transaction state of a pass is sequential (Kafka's
``CleanedTransactionMetadata`` walks batches in offset order), but only transactional and control
batches change it; the walk touches header pages only, and the owner's process holds the log (and
its ``.txnindex`` files) anyway. Executors get the state each group starts with.

A tiered log's pass (:meth:`SparkCleaningEngine.for_tiered_pass`) is
:mod:`tidelog.spark.remote_compaction`'s: its executors read the remote tier from the store with
ranged GETs and upload the cleaned remote segments themselves, so they need to reach the store
but never the log dir; the local tier of such a log is mapped by the same job and rewritten in
the owner's process.

Limits: no I/O throttling (``log.cleaner.io.max.bytes.per.second`` is not applied); an abort
(``check_done``) is seen before and after the job, not during it; for a log that is not tiered
the executors must see the log dir at the driver's path (the remote tier of a tiered one is read
from the store); ``spark.speculation`` must stay off (two attempts would write the same
``.cleaned`` files). Needs pyspark and pyarrow (the ``spark`` extra); imported only when chosen.
"""

from __future__ import annotations

import mmap
import pickle
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from tidelog.cleaner.clean import MIN_COPY_READ, MIN_MAP_READ, CheckDone, CleanerBuffers
from tidelog.cleaner.retain import CleaningRound
from tidelog.cleaner.stats import CleanerStats
from tidelog.cleaner.transactions import CleanedTransactionMetadata
from tidelog.errors import CorruptRecordError, LogCleaningError
from tidelog.records import read_batch_at
from tidelog.records.batch import CONTROL_FLAG_MASK, HEADER_SIZE_UP_TO_MAGIC, TRANSACTIONAL_FLAG_MASK
from tidelog.records.control import ControlRecordType, control_record_type
from tidelog.records.scan import scan_batches, walk_batch_headers
from tidelog.spark.compaction_tasks import (
    KEYS_DDL,
    MANIFEST_DDL,
    ROWS_DDL,
    GroupPlan,
    KeyScan,
    RewriteJob,
    ScanRange,
    SourceSegment,
    group_rewriter,
    ignore_aborted,
    key_scanner,
)
from tidelog.storage import fileops, files
from tidelog.storage.log import Log
from tidelog.storage.log_config import segment_config
from tidelog.storage.segment import LogSegment

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

DEFAULT_MASTER = "local[2]"
SPLIT_BYTES = 64 << 20  # key-scan task size: Spark costs ~0.15 s per Python task, so ranges are large

_DATA, _CONTROL = 0, 1  # the transaction events of a walk


# --- the driver's header walk -------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class TxnEvent:
    """A batch that moves the transaction state: transactional data or a control batch."""

    position: int
    last_offset: int
    producer_id: int
    kind: int  # _DATA or _CONTROL
    control_type: ControlRecordType | None  # control batches: the marker type, None if it has no record


@dataclass(frozen=True, slots=True)
class SegmentWalk:
    """What the driver keeps of one segment's header walk (v0/v1 entries included): batch-aligned
    cut positions about ``split_bytes`` apart (first 0, last the end of the complete batches), its
    transaction events in order, the last batch's last offset (-1 when empty), and the records and
    bytes from ``count_from`` on (the offset map's share, for the stats)."""

    cuts: np.ndarray
    events: tuple[TxnEvent, ...]
    last_offset: int
    records_counted: int
    bytes_counted: int

    def apply(self, txn: CleanedTransactionMetadata, from_position: int = 0) -> list[int]:
        """Drive ``txn`` over the batches from ``from_position`` as the cleaner's scans do (plain
        data only advances it, which the next event or the end of the segment does at once);
        returns the last offsets of the data batches found aborted."""
        aborted = []
        for event in self.events:
            if event.position < from_position:
                continue
            if event.kind == _DATA:
                if txn.on_data(event.last_offset, event.producer_id, True):
                    aborted.append(event.last_offset)
            else:
                txn.on_control(event.last_offset, event.producer_id, event.control_type)
        return aborted


def walk_segment(path: Path, size: int, split_bytes: int = SPLIT_BYTES, count_from: int = 0) -> SegmentWalk:
    """Walk the batch headers of the first ``size`` bytes of ``path`` (memory-mapped: record
    pages are touched only for control batches). CorruptRecordError for a header that cannot be
    a batch."""
    if size <= 0:
        return SegmentWalk(np.zeros(1, np.int64), (), -1, 0, 0)
    with open(path, "rb") as f, fileops.mapped(f.fileno(), size, writable=False, path=path) as mapped:
        data = np.frombuffer(mapped, np.uint8, size)
        try:
            positions, sizes, records, events, last = _walk(data, mapped, path)
        finally:
            del data  # the map cannot close while a view of it is exported
    end = int(positions[-1] + sizes[-1]) if len(positions) else 0
    at = np.searchsorted(positions, np.arange(split_bytes, end, split_bytes)).clip(0, max(len(positions) - 1, 0))
    cuts = np.unique(np.concatenate(([0], positions[at] if len(positions) else [], [end]))).astype(np.int64)
    counted = positions >= count_from
    return SegmentWalk(cuts, events, last, int(records[counted].sum()), int(sizes[counted].sum()))


def _walk(data: np.ndarray, mapped: mmap.mmap,
          path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, tuple[TxnEvent, ...], int]:
    positions, sizes, records, lasts, events = [], [], [], [], []
    pos = 0
    while pos < len(data):
        walk = walk_batch_headers(data, pos)
        b = walk.batches
        positions.append(b["position"])
        sizes.append(b["size"])
        records.append(b["records_count"].astype(np.int64))
        lasts.append(b["last_offset"])
        events.extend(_events(b, mapped, path))
        pos = walk.end_position
        if walk.stop_position is None or pos + HEADER_SIZE_UP_TO_MAGIC > len(data):
            break
        if int(data[pos + HEADER_SIZE_UP_TO_MAGIC - 1]) not in (0, 1):
            raise CorruptRecordError("invalid batch header", path=path, position=pos)
        legacy = read_batch_at(mapped, pos)
        if legacy is None:
            break
        positions.append(np.array([pos]))
        sizes.append(np.array([legacy.size_in_bytes]))
        records.append(np.array([1]))
        lasts.append(np.array([legacy.last_offset]))
        pos += legacy.size_in_bytes
    last = np.concatenate(lasts) if lasts else np.zeros(0, np.int64)
    return (np.concatenate(positions).astype(np.int64), np.concatenate(sizes).astype(np.int64),
            np.concatenate(records).astype(np.int64), tuple(events), int(last[-1]) if len(last) else -1)


def _events(batches: dict[str, np.ndarray], mapped: mmap.mmap, path: Path) -> list[TxnEvent]:
    attributes = batches["attributes"].astype(np.int64)
    moving = np.flatnonzero(attributes & (TRANSACTIONAL_FLAG_MASK | CONTROL_FLAG_MASK))
    out = []
    for i in moving.tolist():
        position, last = int(batches["position"][i]), int(batches["last_offset"][i])
        pid = int(batches["producer_id"][i])
        if attributes[i] & CONTROL_FLAG_MASK:
            kind = _control_type(mapped, position, int(batches["size"][i]), path) if batches["records_count"][i] else None
            out.append(TxnEvent(position, last, pid, _CONTROL, kind))
        else:
            out.append(TxnEvent(position, last, pid, _DATA, None))
    return out


def _control_type(mapped: mmap.mmap, position: int, size: int, path: Path) -> ControlRecordType:
    scan = scan_batches(mapped[position:position + size])
    length = int(scan.key_len[0]) if scan.record_count else -1
    at = int(scan.key_pos[0]) if length >= 0 else 0
    key = None if length < 0 else scan.arenas[int(scan.arena[0])][at:at + length].tobytes()
    try:
        return control_record_type(key)
    except CorruptRecordError as e:
        raise CorruptRecordError(e.message, path=path, position=position) from e


# --- the offset map -----------------------------------------------------------------------------

class SparkOffsetLookup:
    """The dirty range's key map, as planned by :meth:`SparkCleaningEngine.build_offset_map`.

    Never partial: ``latest_offset`` is the end of the dirty range minus one. The map itself is
    computed inside the rewrite job; :meth:`get` and :meth:`get_records` answer on the driver with
    a Spark query each (tests, diagnostics), never on the cleaning path.
    """

    utilization = 0.0  # no fixed buffer to fill

    def __init__(self, engine: SparkCleaningEngine, log: Log, start: int, end: int, latest_offset: int,
                 aborted_batches: np.ndarray, walks: dict[int, SegmentWalk]) -> None:
        self._engine = engine
        self.log = log
        self.first_dirty_offset = start
        self.end_offset = end
        self.latest_offset = latest_offset
        self.aborted_batches = aborted_batches
        self.walks = walks

    def get(self, key: bytes) -> int:
        """The latest offset of ``key`` in the dirty range, -1 when absent (one Spark query)."""
        return self._latest_of([bytes(key)]).get(bytes(key), -1)

    def get_records(self, scan: Any) -> np.ndarray:
        """Per row of ``scan``: its key's latest offset, -1 when absent or keyless (one query)."""
        from tidelog.records.scan import gather_keys

        keys = gather_keys(scan)
        found = self._latest_of(sorted({k for k in keys if k is not None}))
        return np.array([-1 if k is None else found.get(k, -1) for k in keys], np.int64)

    def _latest_of(self, keys: list[bytes]) -> dict[bytes, int]:
        from pyspark.sql import functions as F

        segments = self.log.segments_between(self.first_dirty_offset, self.end_offset)
        rows = self._engine._keys(self, [segments])
        wanted = self._engine.spark.createDataFrame([(k,) for k in keys], "key binary")
        found = (rows.filter("eligible").join(F.broadcast(wanted), "key").groupBy("key")
                 .agg(F.max("offset").alias("latest")).collect())
        return {bytes(r["key"]): int(r["latest"]) for r in found}


# --- the engine ---------------------------------------------------------------------------------

class SparkCleaningEngine:
    """The cleaner's dedupe and rewrite as Spark jobs (module docstring). Safe to share between
    cleaner threads (each call plans its own job); the session is taken on first use with
    ``SparkSession.builder.getOrCreate`` (an active session, e.g. a notebook's, is reused)."""

    def __init__(self, buffers: CleanerBuffers, *, master: str = DEFAULT_MASTER,
                 spark: SparkSession | None = None, split_bytes: int = SPLIT_BYTES) -> None:
        self.buffers = buffers
        self.master = master
        self._spark = spark
        self.split_bytes = split_bytes
        self._read_size = buffers.io_buffer_size

    @property
    def spark(self) -> SparkSession:
        if self._spark is None:
            from tidelog.spark.session import local_session

            self._spark = local_session(self.master, app_name="tidelog-cleaner")
        return self._spark

    # --- the seam ---------------------------------------------------------------------------

    def for_tiered_pass(self, tier: Any) -> Any:
        """The engine of one pass over a tiered log (``tier``: its
        :class:`~tidelog.cleaner.remote_clean.TieredPass`): a
        :class:`~tidelog.spark.remote_compaction.SparkTieredEngine`, whose executors read and
        write the remote tier in the store and never the log dir."""
        from tidelog.spark.remote_compaction import SparkTieredEngine

        return SparkTieredEngine(self, tier)

    def build_offset_map(self, log: Log, start: int, end: int, stats: CleanerStats,
                         check_done: CheckDone) -> SparkOffsetLookup:
        """Plan the map of [start, end): the header walk of the dirty segments and the replay that
        finds their aborted batches (the in-process map's rules: from the batch the offset index
        gives for ``start``, every aborted transaction of the range known up front)."""
        check_done(log.topic_partition)
        dirty = log.segments_between(start, end)
        txn = CleanedTransactionMetadata(log.collect_aborted_transactions(start, end), ignore_aborted)
        aborted: list[int] = []
        walks = {}
        for i, segment in enumerate(dirty):
            from_position = segment.offset_index.lookup(start).position if i == 0 else 0
            walk = walks[segment.base_offset] = walk_segment(segment.log.path, segment.size, self.split_bytes,
                                                             from_position)
            aborted += walk.apply(txn, from_position)
            stats.index_messages_read(walk.records_counted)
            stats.index_bytes_read(walk.bytes_counted)
        latest = end - 1 if dirty else -1
        return SparkOffsetLookup(self, log, start, end, latest, np.array(sorted(aborted), np.int64), walks)

    def clean_groups(self, log: Log, groups: Sequence[Sequence[LogSegment]], round: CleaningRound,
                     txn: CleanedTransactionMetadata, legacy_delete_horizon_ms: int, stats: CleanerStats,
                     check_done: CheckDone, *, dry_run: bool = False) -> list[LogSegment]:
        """Every group of the pass in one Spark job (see the module docstring)."""
        lookup = _spark_lookup(round)
        check_done(log.topic_partition)
        plans = self._plan_groups(log, groups, lookup, txn, legacy_delete_horizon_ms)
        if not plans:
            return []
        manifest = self._run(log, lookup, groups, plans, round, dry_run)
        try:
            check_done(log.topic_partition)
        except BaseException:
            _remove_cleaned(log, plans)
            raise
        for row in manifest:
            stats.read_messages(row["messages_read"], row["bytes_read"])
            stats.recopy_messages(row["messages_written"], row["bytes_written"])
            stats.invalid_messages_read += row["invalid_messages"]
        if dry_run:
            return []
        config = segment_config(log.config)
        return [LogSegment.open(log.dir, p.base_offset, config, log.clock, file_already_exists=True,
                                file_suffix=files.CLEANED_SUFFIX) for p in plans]

    def clean_group(self, log: Log, group: Sequence[LogSegment], round: CleaningRound,
                    txn: CleanedTransactionMetadata, legacy_delete_horizon_ms: int, stats: CleanerStats,
                    check_done: CheckDone) -> LogSegment:
        """One group, one job (the batch path, :meth:`clean_groups`, is the one to use)."""
        return self.clean_groups(log, [group], round, txn, legacy_delete_horizon_ms, stats, check_done)[0]

    def measure_group(self, log: Log, group: Sequence[LogSegment], round: CleaningRound,
                      txn: CleanedTransactionMetadata, legacy_delete_horizon_ms: int, stats: CleanerStats,
                      check_done: CheckDone) -> None:
        self.clean_groups(log, [group], round, txn, legacy_delete_horizon_ms, stats, check_done, dry_run=True)

    # --- planning (driver) --------------------------------------------------------------------

    def _plan_groups(self, log: Log, groups: Sequence[Sequence[LogSegment]], lookup: SparkOffsetLookup,
                     txn: CleanedTransactionMetadata, legacy_horizon: int) -> list[GroupPlan]:
        """Each group's plan, and ``txn`` driven over all of them (:func:`plan_groups`)."""
        return plan_groups(log, groups, txn, legacy_horizon, lambda segment: _walk_of(lookup, segment, self.split_bytes),
                           lambda segment: str(segment.log.path))

    def _ranges(self, lookup: SparkOffsetLookup, groups: Sequence[Sequence[LogSegment]]) -> list[ScanRange]:
        """Batch-aligned byte ranges of about ``split_bytes`` over every segment of ``groups``."""
        out = []
        for g, group in enumerate(groups):
            for segment in group:
                cuts = _walk_of(lookup, segment, self.split_bytes).cuts.tolist()
                out += [ScanRange(str(segment.log.path), a, b, g) for a, b in zip(cuts[:-1], cuts[1:])]
        return out

    # --- the job ------------------------------------------------------------------------------

    def _keys(self, lookup: SparkOffsetLookup, groups: Sequence[Sequence[LogSegment]]) -> DataFrame:
        """Stage 1: the key rows of ``groups`` (``KEYS_DDL``)."""
        tasks = self.pack_tasks(self._ranges(lookup, groups))
        spark = self.spark
        if not tasks:
            return spark.createDataFrame([], KEYS_DDL)
        spec = KeyScan(tuple(tasks), lookup.first_dirty_offset, lookup.aborted_batches,
                       max(self._read_size, MIN_MAP_READ))
        return spark.range(0, len(tasks), 1, len(tasks)).mapInArrow(key_scanner(spec), KEYS_DDL)

    def pack_tasks(self, ranges: list[ScanRange]) -> list[tuple[ScanRange, ...]]:
        """Consecutive ranges packed into tasks of about ``split_bytes`` (small segments share one)."""
        tasks: list[tuple[ScanRange, ...]] = []
        current: list[ScanRange] = []
        size = 0
        for r in ranges:
            if current and size + (r.end - r.start) > self.split_bytes:
                tasks.append(tuple(current))
                current, size = [], 0
            current.append(r)
            size += r.end - r.start
        return tasks + [tuple(current)] if current else tasks

    def _run(self, log: Log, lookup: SparkOffsetLookup, groups: Sequence[Sequence[LogSegment]],
             plans: list[GroupPlan], round: CleaningRound, dry_run: bool) -> list[Any]:
        """Stages 1-3 as one job; the manifest rows in group order. Raises the first group's
        error (typed, as in-process) after removing every ``.cleaned`` file of the job."""
        from pyspark.sql import Window
        from pyspark.sql import functions as F

        spark = self.spark
        keys = self._keys(lookup, groups)
        latest = F.max(F.when(F.col("eligible"), F.col("offset"))).over(Window.partitionBy("key"))
        rows = keys.select("grp", "offset", latest.alias("latest"),
                           F.when(F.col("legacy"), F.col("key")).alias("legacy_key"),
                           F.lit(None).cast("binary").alias("plan"))
        sentinels = spark.createDataFrame([(p.group, -1, None, None, pickle.dumps(p)) for p in plans], ROWS_DDL)
        job = RewriteJob(str(log.dir), segment_config(log.config), round.current_time, round.delete_retention_ms,
                         round.upper_bound_offset, dict(round.producers), lookup.latest_offset,
                         max(self._read_size, MIN_COPY_READ), max(self.buffers.max_io_buffer_size,
                                                                  log.config.max_message_bytes), dry_run)
        try:
            manifest = (rows.unionByName(sentinels).groupBy("grp")
                        .applyInArrow(group_rewriter(job), MANIFEST_DDL).collect())
        except Exception as e:  # noqa: BLE001 - a failed job: Py4J/PySpark errors, whatever their class
            _remove_cleaned(log, plans)
            raise LogCleaningError(f"the Spark cleaning job failed: {first_line(e)}",
                                   topic_partition=str(log.topic_partition)) from e
        manifest = sorted(manifest, key=lambda r: r["grp"])
        errors = [pickle.loads(r["error"]) for r in manifest if r["error"] is not None]
        if errors or len(manifest) != len(plans):
            _remove_cleaned(log, plans)
            if errors:
                raise errors[0]
            raise LogCleaningError(f"the Spark cleaning job returned {len(manifest)} of {len(plans)} groups",
                                   topic_partition=str(log.topic_partition))
        return manifest


def _spark_lookup(round: CleaningRound) -> SparkOffsetLookup:
    lookup = round.offset_map
    if not isinstance(lookup, SparkOffsetLookup):
        raise TypeError(f"the Spark engine cleans with its own offset map, got {type(lookup).__name__}")
    return lookup


def plan_groups(view: Any, groups: Sequence[Sequence[Any]], txn: CleanedTransactionMetadata, legacy_horizon: int,
                walk_of: Callable[[Any], SegmentWalk], file_of: Callable[[Any], Any]) -> list[GroupPlan]:
    """Each group's plan, and ``txn`` driven over all of them (as the in-process engine's copy
    would leave it): per segment the owner's aborted transactions, then its events. ``view`` is
    the log or a tier view (``segment_after``, ``collect_aborted_transactions``); ``walk_of`` a
    segment's header walk; ``file_of`` what an executor opens for it (a path, a remote file)."""
    plans = []
    for g, group in enumerate(groups):
        start_state = pickled_txn(txn)
        sources = []
        for segment in group:
            following = view.segment_after(segment)
            upper = following.base_offset if following is not None else segment.read_next_offset()
            aborted = tuple(view.collect_aborted_transactions(segment.base_offset, upper))
            walk = walk_of(segment)
            txn.add_aborted(aborted)
            walk.apply(txn)
            if walk.last_offset >= 0:
                txn.advance_to(walk.last_offset)
            sources.append(SourceSegment(file_of(segment), segment.size, segment.last_modified_ms > legacy_horizon,
                                         aborted))
        plans.append(GroupPlan(g, group[0].base_offset, group[-1].last_modified_ms, tuple(sources), start_state))
    return plans


def _walk_of(lookup: SparkOffsetLookup, segment: LogSegment, split_bytes: int) -> SegmentWalk:
    """The segment's walk, from the map's plan when it walked it already (dirty segments)."""
    walk = lookup.walks.get(segment.base_offset)
    if walk is None:
        walk = walk_segment(segment.log.path, segment.size, split_bytes)
        lookup.walks[segment.base_offset] = walk
    return walk


def pickled_txn(txn: CleanedTransactionMetadata) -> bytes:
    """``txn`` as bytes for an executor (its callback is the executor's to set)."""
    callback, txn.on_aborted_kept = txn.on_aborted_kept, ignore_aborted
    try:
        return pickle.dumps(txn)
    finally:
        txn.on_aborted_kept = callback


def _remove_cleaned(log: Log, plans: list[GroupPlan]) -> None:
    for plan in plans:
        for name in (files.log_file, files.offset_index_file, files.time_index_file, files.transaction_index_file):
            name(log.dir, plan.base_offset, files.CLEANED_SUFFIX).unlink(missing_ok=True)


def first_line(error: BaseException) -> str:
    text = str(error).strip()
    lines = [line for line in text.splitlines() if "Error" in line or "error" in line]
    return (lines[-1] if lines else text.splitlines()[0] if text else type(error).__name__)[:500]
