"""The executor side of compacting a tiered log's remote tier on Spark
(:mod:`tidelog.spark.remote_compaction`).

Everything here reads the remote segments straight from the store with ranged GETs and writes
only to the executor's own temporary directory, so it runs on executors that cannot see the log
dir:

* :func:`walk_remote` (one task per remote segment): the ``.log`` object streamed to a temporary
  file, its batch headers walked (:func:`tidelog.spark.compaction.walk_segment`: cut positions and
  transaction events for the driver's replay); for the segment the offset map starts in, the byte
  position its ``.index`` object gives for the first dirty offset, as the in-process map starts.
* :func:`rewrite_remote_group` (``applyInArrow`` grouped by segment group): the in-process
  engine's copy loop over the group's objects (:func:`~tidelog.spark.compaction_tasks.rewrite_plan`)
  into a temporary directory, then, unless the group is one segment left byte for byte as it was,
  the cleaned segment uploaded by :func:`tidelog.cleaner.remote_clean.stage_cleaned` (the one
  implementation of that step) under the id the owner reserved. The group of the local tier's
  rows (group -1, no plan) only returns its rows' ``(offset, latest)`` pairs, as Arrow IPC, for
  the owner's in-process rewrite of the local tier.

Nothing here imports pyspark. Typed tidelog errors come back pickled in the manifest row.
"""

from __future__ import annotations

import pickle
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tidelog.clock import SYSTEM_CLOCK
from tidelog.cleaner.remote_clean import stage_cleaned
from tidelog.cleaner.remote_view import DOWNLOAD_CHUNK, download
from tidelog.cleaner.stats import CleanerStats
from tidelog.errors import TidelogError
from tidelog.remote.errors import RemoteStorageError, with_context
from tidelog.remote.metadata import RemoteFileKind, RemoteLogSegmentMetadata, object_key
from tidelog.remote.store import RemoteStore
from tidelog.spark.compaction import SegmentWalk, walk_segment
from tidelog.spark.compaction_tasks import GroupPlan, RemoteFile, RewriteJob, SourceSegment, group_offsets, rewrite_plan
from tidelog.storage import files
from tidelog.storage.segment import LogSegment

REMOTE_MANIFEST_DDL = ("grp int, base_offset long, messages_read long, bytes_read long, messages_written long, "
                       "bytes_written long, invalid_messages long, error binary, segment binary, local binary, "
                       "rewrite_seconds double, upload_seconds double")
_MANIFEST_SCHEMA = pa.schema([("grp", pa.int32()), ("base_offset", pa.int64()), ("messages_read", pa.int64()),
                              ("bytes_read", pa.int64()), ("messages_written", pa.int64()),
                              ("bytes_written", pa.int64()), ("invalid_messages", pa.int64()),
                              ("error", pa.binary()), ("segment", pa.binary()), ("local", pa.binary()),
                              ("rewrite_seconds", pa.float64()), ("upload_seconds", pa.float64())])
LOCAL_GROUP = -1  # the group of the local tier's key rows: mapped, not rewritten here


def remote_file(segment: RemoteLogSegmentMetadata) -> RemoteFile:
    """The ``.log`` object of ``segment`` as a scan or rewrite source."""
    return RemoteFile(object_key(segment, RemoteFileKind.SEGMENT), str(segment.topic_id_partition.topic_partition),
                      segment.start_offset, segment.end_offset)


def _named(error: RemoteStorageError, segment: RemoteLogSegmentMetadata, doing: str) -> RemoteStorageError:
    partition = str(segment.topic_id_partition.topic_partition)
    return with_context(error, f"{doing} remote segment {segment.start_offset}..{segment.end_offset} of {partition} "
                               f"failed: {error.message}", partition=partition,
                        offsets=f"{segment.start_offset}..{segment.end_offset}")


# --- the header walk ----------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class RemoteWalk:
    """One walk job: task ``i`` walks ``segments[i]``; ``first_dirty``: the id of the segment
    the offset map starts in (at offset ``start``), None when that one is local."""

    store: RemoteStore
    segments: tuple[RemoteLogSegmentMetadata, ...]
    first_dirty: str | None
    start: int
    split_bytes: int


def walk_remote(job: RemoteWalk, i: int) -> tuple[str, SegmentWalk, int]:
    """(segment id, its walk, the position the map starts reading it at) for ``segments[i]``.
    Disk: the segment's ``.log`` in a temporary file while it is walked."""
    segment = job.segments[i]
    size = segment.segment_size_in_bytes
    with tempfile.TemporaryDirectory(prefix="tidelog-remote-walk-") as work:
        path = files.log_file(Path(work), segment.start_offset)
        try:
            download(job.store, object_key(segment, RemoteFileKind.SEGMENT), path, size)
            count_from = index_position(job.store, segment, job.start) if segment.id == job.first_dirty else 0
        except RemoteStorageError as e:
            raise _named(e, segment, "walking") from e
        return segment.id, walk_segment(path, size, job.split_bytes, count_from), count_from


def index_position(store: RemoteStore, segment: RemoteLogSegmentMetadata, offset: int) -> int:
    """The ``.log`` position the segment's ``.index`` object gives for ``offset`` (the last entry
    at or below it; 0 when none), as ``OffsetIndex.lookup`` answers on the local segment."""
    entries = np.frombuffer(store.get(object_key(segment, RemoteFileKind.OFFSET_INDEX)), ">i4").reshape(-1, 2)
    at = int(np.searchsorted(entries[:, 0], offset - segment.start_offset, side="right")) - 1
    return int(entries[at, 1]) if at >= 0 else 0


# --- the rewrite ----------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class RemoteGroupPlan:
    """A remote group to rewrite: the plan of the copy loop (sources are :class:`RemoteFile`),
    the group's segments and the replacement the owner reserved (COPY_SEGMENT_STARTED)."""

    plan: GroupPlan
    group: tuple[RemoteLogSegmentMetadata, ...]
    reserved: RemoteLogSegmentMetadata


def remote_group_rewriter(job: RewriteJob) -> Callable[[pa.Table], pa.Table]:
    """The ``applyInArrow`` function of a remote pass (typed: Spark infers its kind from the hints)."""
    def rewrite(table: pa.Table) -> pa.Table:
        return rewrite_remote_group(job, table)
    return rewrite


def rewrite_remote_group(job: RewriteJob, table: pa.Table) -> pa.Table:
    """``applyInArrow`` body: one remote group cleaned and uploaded, or the local rows returned."""
    group = int(table.column("grp")[0].as_py())
    row = {"grp": group, "base_offset": -1, "messages_read": 0, "bytes_read": 0, "messages_written": 0,
           "bytes_written": 0, "invalid_messages": 0, "error": None, "segment": None, "local": None,
           "rewrite_seconds": 0.0, "upload_seconds": 0.0}
    if group == LOCAL_GROUP:
        rows = table.filter(pc.greater_equal(table.column("offset"), 0)).select(["offset", "latest", "legacy_key"])
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, rows.schema) as out:
            out.write_table(rows)
        row["local"] = sink.getvalue().to_pybytes()
        return pa.Table.from_pylist([row], schema=_MANIFEST_SCHEMA)
    plan: RemoteGroupPlan = pickle.loads(next(p for p in table.column("plan").to_pylist() if p is not None))
    stats = CleanerStats(SYSTEM_CLOCK)
    work = Path(tempfile.mkdtemp(prefix="tidelog-remote-clean-"))
    began = time.perf_counter()  # timings only (benchmarks): never a decision
    try:
        rewrite_plan(replace(job, dir=str(work)), plan.plan, group_offsets(table, job.latest_offset), stats)
        rewritten = time.perf_counter()
        row["rewrite_seconds"] = rewritten - began
        staged = _stage(job, work, plan)
        row["upload_seconds"] = time.perf_counter() - rewritten
        row["segment"] = None if staged is None else pickle.dumps(staged)
    except RemoteStorageError as e:
        row["error"] = pickle.dumps(_named(e, plan.reserved, "cleaning"))
    except TidelogError as e:  # back to the owner as the same error
        row["error"] = pickle.dumps(e)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    row.update(base_offset=plan.plan.base_offset, messages_read=stats.messages_read, bytes_read=stats.bytes_read,
               messages_written=stats.messages_written, bytes_written=stats.bytes_written,
               invalid_messages=stats.invalid_messages_read)
    return pa.Table.from_pylist([row], schema=_MANIFEST_SCHEMA)


def _stage(job: RewriteJob, work: Path, plan: RemoteGroupPlan) -> RemoteLogSegmentMetadata | None:
    """Upload the cleaned segment in ``work`` under the reserved id; None (nothing uploaded) when
    the group is one segment whose cleaned ``.log`` is byte for byte the source's."""
    assert job.store is not None
    base = plan.plan.base_offset
    cleaned = LogSegment.open(work, base, job.segment_config, SYSTEM_CLOCK, file_already_exists=True,
                              file_suffix=files.CLEANED_SUFFIX)
    try:
        if len(plan.group) == 1 and _same_bytes(job.store, plan.plan.segments[0], cleaned):
            return None
        cleaned.change_file_suffixes(files.CLEANED_SUFFIX, "")
    finally:
        cleaned.close_handlers()
    reserved = plan.reserved
    return stage_cleaned(job.store, work, base, plan.group,
                         lambda m: replace(m, segment_id=reserved.segment_id, broker_id=reserved.broker_id,
                                           event_timestamp_ms=reserved.event_timestamp_ms))


def _same_bytes(store: RemoteStore, source: SourceSegment, cleaned: LogSegment) -> bool:
    if cleaned.size != source.size:
        return False
    assert isinstance(source.path, RemoteFile)
    with open(cleaned.log.path, "rb") as local:
        for position in range(0, source.size, DOWNLOAD_CHUNK):
            n = min(DOWNLOAD_CHUNK, source.size - position)
            if store.get_range(source.path.key, position, n) != local.read(n):
                return False
    return True
