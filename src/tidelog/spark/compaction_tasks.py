"""The executor side of the Spark cleaning engine (:mod:`tidelog.spark.compaction`).

Two functions run in Spark's Python workers, each over segment files it opens read-only by path
(the driver and the executors must see the log dir at the same path: local disk or a shared mount),
or over remote segments' ``.log`` objects (:class:`RemoteFile`), read with ranged GETs from the
job's store (:mod:`tidelog.spark.remote_compaction`: executors that cannot see the log dir):

* :func:`scan_keys` (``mapInArrow``): one task per byte range of a segment (ranges start and end on
  batch boundaries, planned by the driver's header walk). Emits one row per keyed record that the
  rewrite may look up (control batches' records are never looked up: their batches are kept or
  dropped whole), with ``eligible`` = may enter the offset map: offset >= the first dirty offset
  and not in an aborted transactional batch (the driver replayed the transaction markers and
  passes the aborted batches' last offsets). Keys and offsets only, never values.
* :func:`rewrite_group` (``applyInArrow`` grouped by segment group): one call per group, with the
  group's rows ``(offset, latest offset of its key)`` and one sentinel row carrying the group's
  plan (pickled :class:`GroupPlan`). It runs the in-process engine's own copy loop
  (:func:`tidelog.cleaner.clean.copy_segment`) with a :class:`GroupOffsets` lookup and the
  transaction state the group starts with, and seals the ``.cleaned`` segment as the in-process
  engine does (:func:`tidelog.cleaner.clean.seal_cleaned_segment`): same retain code, same bytes.

Nothing here imports pyspark (only pyarrow). Typed tidelog errors raised while rewriting come back
to the driver pickled in the manifest row, so the owner sees the same error class as in-process.
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from tidelog.clock import SYSTEM_CLOCK
from tidelog.cleaner.clean import copy_segment, create_cleaned_segment, seal_cleaned_segment
from tidelog.cleaner.producers import ProducerLastBatch
from tidelog.cleaner.retain import CleaningRound
from tidelog.cleaner.stats import CleanerStats
from tidelog.cleaner.transactions import CleanedTransactionMetadata
from tidelog.errors import CorruptRecordError, InvalidRecordError, TidelogError, UnsupportedCompressionError
from tidelog.records import read_batch_at
from tidelog.records.layout import CONTROL_FLAG_MASK, LOG_OVERHEAD, declared_size
from tidelog.records.scan import ScanResult, scan_batches
from tidelog.remote.errors import RemoteStorageError, with_context
from tidelog.remote.store import RemoteStore
from tidelog.storage.log_config import SegmentConfig
from tidelog.storage.txn_index import AbortedTxn

KEYS_DDL = "key binary, offset long, eligible boolean, grp int, legacy boolean"
ROWS_DDL = "grp int, offset long, latest long, legacy_key binary, plan binary"
MANIFEST_DDL = ("grp int, base_offset long, messages_read long, bytes_read long, messages_written long, "
                "bytes_written long, invalid_messages long, error binary")

_KEYS_SCHEMA = pa.schema([("key", pa.binary()), ("offset", pa.int64()), ("eligible", pa.bool_()),
                          ("grp", pa.int32()), ("legacy", pa.bool_())])
_GATHER_ROWS = 1 << 16  # keys gathered per numpy step (bounds the index array to 8 bytes per key byte)


# --- the key scan -----------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class RemoteFile:
    """A remote segment's ``.log`` object (offsets ``start_offset..end_offset`` of ``partition``),
    read with ranged GETs from the job's store; errors name the partition and the offsets."""

    key: str
    partition: str
    start_offset: int
    end_offset: int

    def __str__(self) -> str:
        return self.key


Source = str | RemoteFile  # a segment file by path, or a remote segment's .log object


@contextmanager
def opened(source: Source, store: RemoteStore | None) -> Iterator[Callable[[int, int], bytes]]:
    """``read(position, n)`` over ``source``: ``pread`` of a local file, or ranged GETs of a
    remote object from ``store``, whose errors are re-raised (same class) naming the partition,
    the offset range and the object."""
    if isinstance(source, str):
        with open(source, "rb") as f:
            fd = f.fileno()
            yield lambda position, n: os.pread(fd, n, position)
        return
    if store is None:
        raise ValueError(f"a remote segment ({source.key}) needs the job's store")

    def read(position: int, n: int) -> bytes:
        try:
            return store.get_range(source.key, position, n)
        except RemoteStorageError as e:
            raise with_context(e, f"reading remote segment {source.start_offset}..{source.end_offset} of "
                                  f"{source.partition} failed: {e.message}", partition=source.partition,
                               offsets=f"{source.start_offset}..{source.end_offset}", key=source.key) from e
    yield read


@dataclass(frozen=True, slots=True)
class ScanRange:
    """Bytes [start, end) of one segment (batch aligned) and the group the segment is in;
    ``dirty``: its records may enter the offset map (a segment rewritten but outside the map's
    range gives its keys as not eligible)."""

    path: Source
    start: int
    end: int
    group: int
    dirty: bool = True


@dataclass(frozen=True, slots=True)
class KeyScan:
    """What every key-scan task gets (pickled once per task: paths and offsets only); task ``i``
    scans ``tasks[i]``."""

    tasks: tuple[tuple[ScanRange, ...], ...]
    first_dirty_offset: int
    aborted_batches: np.ndarray  # sorted last offsets of aborted transactional data batches
    read_size: int
    store: RemoteStore | None = None  # for RemoteFile ranges


def key_scanner(spec: KeyScan) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` function of a key scan (typed: Spark infers its kind from the hints)."""
    def scan(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        return scan_keys(spec, batches)
    return scan


def scan_keys(spec: KeyScan, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` body: the input rows are task numbers (``spark.range``)."""
    for batch in batches:
        for task in batch.column(0).to_pylist():
            for r in spec.tasks[task]:
                yield from scan_range(spec, r)


def scan_range(spec: KeyScan, r: ScanRange) -> Iterator[pa.RecordBatch]:
    """The key rows of one range (``KEYS_DDL``), in chunks of ``spec.read_size`` bytes or more."""
    read_size = spec.read_size
    with opened(r.path, spec.store) as read:
        position = r.start
        while position < r.end:
            data = read(position, min(read_size, r.end - position))
            try:
                rows, consumed = _keys_of_chunk(data, spec, r.group)
            except CorruptRecordError as e:
                raise CorruptRecordError(e.message, path=str(r.path),
                                         position=position + (getattr(e, "position", 0) or 0)) from e
            if rows.num_rows and not r.dirty:
                rows = rows.set_column(2, "eligible", pa.array(np.zeros(rows.num_rows, bool)))
            if rows.num_rows:
                yield rows
            if consumed == 0:
                if len(data) >= r.end - position or len(data) < LOG_OVERHEAD:
                    raise CorruptRecordError("batch runs past the planned range", path=str(r.path), position=position)
                read_size = max(read_size * 2, declared_size(data))
            position += consumed


def _keys_of_chunk(data: bytes, spec: KeyScan, group: int) -> tuple[pa.RecordBatch, int]:
    """Key rows of the complete batches of ``data`` (v2 runs scanned, v0/v1 entries read one by
    one, as the in-process map does) and the bytes they take."""
    parts = []
    pos = 0
    while pos < len(data):
        scan = scan_batches(data, pos, stop_at_legacy=True)
        if scan.record_count:
            parts.append(_v2_keys(scan, spec, group))
        pos = scan.end_position
        if not scan.stopped_at_legacy:
            break
        legacy = read_batch_at(data, pos)
        if legacy is None:
            break
        try:
            records = [(bytes(r.key), r.offset) for r in legacy.records() if r.key is not None]
        except (InvalidRecordError, UnsupportedCompressionError) as e:
            raise CorruptRecordError(e.message, position=pos, offset=legacy.last_offset) from e
        if records:
            parts.append(_legacy_keys(records, spec, group))
        pos += legacy.size_in_bytes
    if not parts:
        return pa.RecordBatch.from_pylist([], schema=_KEYS_SCHEMA), pos
    return pa.concat_batches(parts), pos


def _v2_keys(scan: ScanResult, spec: KeyScan, group: int) -> pa.RecordBatch:
    control = (scan.batch_attributes & CONTROL_FLAG_MASK) != 0
    rows = np.flatnonzero((scan.key_len >= 0) & ~control[scan.batch])
    offsets = scan.offset[rows]
    eligible = offsets >= spec.first_dirty_offset
    if len(spec.aborted_batches):
        eligible &= ~np.isin(scan.batch_last_offset[scan.batch[rows]], spec.aborted_batches)
    return pa.RecordBatch.from_arrays(
        [_gather_keys(scan, rows), pa.array(offsets, pa.int64()), pa.array(eligible, pa.bool_()),
         pa.array(np.full(len(rows), group, np.int32)), pa.array(np.zeros(len(rows), bool))],
        schema=_KEYS_SCHEMA)


def _legacy_keys(records: list[tuple[bytes, int]], spec: KeyScan, group: int) -> pa.RecordBatch:
    offsets = np.array([o for _, o in records], np.int64)
    return pa.RecordBatch.from_arrays(
        [pa.array([k for k, _ in records], pa.binary()), pa.array(offsets, pa.int64()),
         pa.array(offsets >= spec.first_dirty_offset, pa.bool_()), pa.array(np.full(len(records), group, np.int32)),
         pa.array(np.ones(len(records), bool))], schema=_KEYS_SCHEMA)


def _gather_keys(scan: ScanResult, rows: np.ndarray) -> pa.Array:
    """The keys of ``rows`` as an Arrow binary array, gathered by numpy (no Python step per key)."""
    base = scan.arenas[0]
    positions = scan.key_pos[rows]
    if len(scan.arenas) > 1:
        base = np.concatenate(scan.arenas)
        positions = positions + np.where(scan.arena[rows] == 1, len(scan.arenas[0]), 0)
    lengths = scan.key_len[rows].astype(np.int64)
    pieces = []
    for at in range(0, len(rows), _GATHER_ROWS):
        n = lengths[at:at + _GATHER_ROWS]
        ends = np.cumsum(n)
        index = np.repeat(positions[at:at + _GATHER_ROWS] - (ends - n), n) + np.arange(int(ends[-1]) if len(n) else 0)
        pieces.append(base[index])
    data = np.concatenate(pieces) if pieces else np.zeros(0, np.uint8)
    offsets = np.zeros(len(rows) + 1, np.int32)
    np.cumsum(lengths, out=offsets[1:])
    return pa.Array.from_buffers(pa.binary(), len(rows), [None, pa.py_buffer(offsets), pa.py_buffer(data)])


# --- the rewrite ------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class SourceSegment:
    """One segment of a group: its file, its size when planned, whether its legacy (v0/v1)
    tombstones are still retained, and the aborted transactions the owner collected for it."""

    path: Source
    size: int
    retain_legacy_tombstones: bool
    aborted: tuple[AbortedTxn, ...]


@dataclass(frozen=True, slots=True)
class GroupPlan:
    """One segment group to rewrite into ``<base_offset>.cleaned`` files; ``txn`` is the pickled
    transaction state before its first segment (the driver's replay of the groups before it)."""

    group: int
    base_offset: int
    last_modified_ms: int
    segments: tuple[SourceSegment, ...]
    txn: bytes


@dataclass(frozen=True, slots=True)
class RewriteJob:
    """What stays fixed for every group of one pass (the :class:`CleaningRound`'s values)."""

    dir: str
    segment_config: SegmentConfig
    current_time: int
    delete_retention_ms: int
    upper_bound_offset: int
    producers: Mapping[int, ProducerLastBatch]
    latest_offset: int
    read_size: int
    max_read_size: int
    dry_run: bool
    store: RemoteStore | None = None  # for RemoteFile sources


class GroupOffsets:
    """The offset map as one group sees it (:class:`tidelog.cleaner.retain.OffsetLookup`):
    for every keyed record of the group, the latest offset of its key in the dirty range (-1
    when the key is not there), indexed by the record's offset (offsets are unique in a log);
    v0/v1 records, looked up by key, from a dict."""

    def __init__(self, offsets: np.ndarray, latest: np.ndarray, legacy: dict[bytes, int], latest_offset: int) -> None:
        order = np.argsort(offsets, kind="stable")
        self._offsets = offsets[order]
        self._latest = latest[order]
        self._legacy = legacy
        self.latest_offset = latest_offset

    def get(self, key: bytes) -> int:
        return self._legacy.get(bytes(key), -1)

    def get_records(self, scan: ScanResult) -> np.ndarray:
        if len(self._offsets) == 0:
            return np.full(scan.record_count, -1, np.int64)
        at = np.minimum(np.searchsorted(self._offsets, scan.offset), len(self._offsets) - 1)
        found = (self._offsets[at] == scan.offset) & (scan.key_len >= 0)
        return np.where(found, self._latest[at], -1).astype(np.int64)


def group_offsets(table: pa.Table, latest_offset: int) -> GroupOffsets:
    """A :class:`GroupOffsets` from a group's rows (``offset``, ``latest``, ``legacy_key``; the
    sentinel row, offset -1, is skipped)."""
    offsets = table.column("offset").to_numpy()
    latest = table.column("latest").fill_null(-1).to_numpy()
    is_legacy = table.column("legacy_key").is_valid().to_numpy(zero_copy_only=False)
    v2 = (offsets >= 0) & ~is_legacy
    legacy = {}
    if is_legacy.any():
        keys = table.column("legacy_key").filter(pa.array(is_legacy)).to_pylist()
        legacy = dict(zip(keys, latest[is_legacy].tolist()))
    return GroupOffsets(offsets[v2], latest[v2], legacy, latest_offset)


def group_rewriter(job: RewriteJob) -> Callable[[pa.Table], pa.Table]:
    """The ``applyInArrow`` function of a pass (typed: Spark infers its kind from the hints)."""
    def rewrite(table: pa.Table) -> pa.Table:
        return rewrite_group(job, table)
    return rewrite


def rewrite_group(job: RewriteJob, table: pa.Table) -> pa.Table:
    """``applyInArrow`` body: clean one group, return its manifest row."""
    plans = [p for p in table.column("plan").to_pylist() if p is not None]
    plan: GroupPlan = pickle.loads(plans[0])
    stats = CleanerStats(SYSTEM_CLOCK)
    error = None
    try:
        rewrite_plan(job, plan, group_offsets(table, job.latest_offset), stats)
    except TidelogError as e:  # back to the owner as the same error
        error = pickle.dumps(e)
    return pa.Table.from_pylist([{
        "grp": plan.group, "base_offset": plan.base_offset, "messages_read": stats.messages_read,
        "bytes_read": stats.bytes_read, "messages_written": stats.messages_written,
        "bytes_written": stats.bytes_written, "invalid_messages": stats.invalid_messages_read, "error": error,
    }], schema=_MANIFEST_SCHEMA)


_MANIFEST_SCHEMA = pa.schema([("grp", pa.int32()), ("base_offset", pa.int64()), ("messages_read", pa.int64()),
                              ("bytes_read", pa.int64()), ("messages_written", pa.int64()),
                              ("bytes_written", pa.int64()), ("invalid_messages", pa.int64()),
                              ("error", pa.binary())])


def rewrite_plan(job: RewriteJob, plan: GroupPlan, lookup: GroupOffsets, stats: CleanerStats) -> None:
    """The in-process engine's ``clean_group`` on files: copy every source segment through the
    retention rules into a new ``.cleaned`` segment, then seal it (or only count, dry run)."""
    round = CleaningRound(offset_map=lookup, current_time=job.current_time,
                          delete_retention_ms=job.delete_retention_ms, upper_bound_offset=job.upper_bound_offset,
                          producers=job.producers)
    txn: CleanedTransactionMetadata = pickle.loads(plan.txn)
    dest = None
    if not job.dry_run:
        dest = create_cleaned_segment(Path(job.dir), plan.base_offset, job.segment_config, SYSTEM_CLOCK)
    try:
        txn.on_aborted_kept = dest.txn_index.append if dest is not None else ignore_aborted
        for source in plan.segments:
            txn.add_aborted(source.aborted)
            _copy(job, source, dest, round, txn, stats)
        if dest is not None:
            seal_cleaned_segment(dest, plan.last_modified_ms)
            dest.close_handlers()
    except BaseException:
        if dest is not None:
            dest.delete_files()
        raise


def _copy(job: RewriteJob, source: SourceSegment, dest: object, round: CleaningRound,
          txn: CleanedTransactionMetadata, stats: CleanerStats) -> None:
    with opened(source.path, job.store) as read:
        copy_segment(read, source.size, Path(str(source.path)), dest, round, txn,  # type: ignore[arg-type]
                     source.retain_legacy_tombstones, stats, read_size=job.read_size, max_read_size=job.max_read_size)


def ignore_aborted(_: AbortedTxn) -> None:
    """The aborted-kept callback of a pass that writes no transaction index (dry runs, replays)."""
    return None
