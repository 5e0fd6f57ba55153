"""Step 4 of :mod:`.retain` for a scanned run of v2 batches: each batch's outcome (dropped, copied
verbatim, rebuilt, or the 61-byte empty batch), and the output in batch order with the metadata
``LogSegment.append`` needs (§3.7.7).

Cost: numpy over the run's columns, no Python step per batch except for empty batches; outputs
that lie back to back (a run of verbatim batches in the source, rebuilt uncompressed batches in the
kernel's buffer) go out as one slice.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from tidelog.cleaner.rebuild import NO_TIMESTAMP, BatchHeader, Kept, RebuiltRun, kept_by_batch, rebuild
from tidelog.cleaner.retain_twins import RetainKernels
from tidelog.records.builder import build_empty_batch
from tidelog.records.layout import (
    CONTROL_FLAG_MASK,
    DELETE_HORIZON_FLAG_MASK,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_FLAG_MASK,
)
from tidelog.records.record import TimestampType
from tidelog.records.scan import ScanResult

if TYPE_CHECKING:
    from tidelog.cleaner.retain import BatchPlan, CleaningRound, FilteredChunk

# Batch outcomes.
DROP, VERBATIM, EMPTY, REBUILD = 0, 1, 2, 3


def emit(source: memoryview, plan: BatchPlan, keep: np.ndarray, round: CleaningRound,
         result: FilteredChunk, twin: RetainKernels) -> None:
    """Step 4: outcome per batch, rebuilt bytes, and the output in batch order."""
    scan = plan.scan
    kept = kept_by_batch(scan, keep)
    attributes = scan.batch_attributes.astype(np.int64)
    has_horizon = (attributes & DELETE_HORIZON_FLAG_MASK) != 0
    set_horizon = (kept.tombstone | plan.discardable_marker) & ~has_horizon
    outcome = np.where(
        plan.skipped, DROP,
        np.where(kept.count > 0,
                 np.where((kept.count == scan.batch_records_count) & ~set_horizon, VERBATIM, REBUILD),
                 np.where(plan.retain_empty, EMPTY, DROP)))
    run, built = rebuild(source, scan, kept, attributes, set_horizon, has_horizon, round.delete_horizon_ms,
                         np.flatnonzero(outcome == REBUILD), twin)
    built.update(_empty_batches(source, scan, np.flatnonzero(outcome == EMPTY)))
    _collect(source, scan, kept, outcome, attributes, run, built, result)


def _collect(source: memoryview, scan: ScanResult, kept: Kept, outcome: np.ndarray, attributes: np.ndarray,
             run: RebuiltRun | None, built: dict[int, Any], result: FilteredChunk) -> None:
    """Append the outputs in batch order, one slice per group of consecutive outputs that lie
    back to back (a run of verbatim batches in the source; rebuilt uncompressed batches in the
    kernel's buffer), then the metadata. Groups are found with numpy: no Python step per batch."""
    position, size = scan.batch_position, scan.batch_size
    verbatim = outcome == VERBATIM
    run_starts = np.flatnonzero(verbatim & ~np.append(False, verbatim[:-1]))
    run_ends = np.flatnonzero(verbatim & ~np.append(verbatim[1:], False))
    fast_ids = run.ids if run is not None else np.empty(0, np.int64)
    other_ids = np.fromiter(built, np.int64, count=len(built))
    ids = np.concatenate((run_starts, fast_ids, other_ids))
    kinds = np.repeat(np.array([_VERBATIM_RUN, _FAST, _BUILT], np.int8),
                      [len(run_starts), len(fast_ids), len(other_ids)])
    index = np.concatenate((np.arange(len(run_starts)), np.arange(len(fast_ids)), np.arange(len(other_ids))))
    order = np.argsort(ids, kind="stable")
    kinds, index, ids = kinds[order], index[order], ids[order]
    # a rebuilt batch continues the previous group when that one is rebuilt too and ends where it starts
    joins = np.zeros(len(ids), bool)
    if run is not None and len(ids) > 1:
        both_fast = (kinds[1:] == _FAST) & (kinds[:-1] == _FAST)
        prev_end = run.ends[np.where(both_fast, index[:-1], 0)]
        this_start = run.starts[np.where(both_fast, index[1:], 0)]
        joins[1:] = both_fast & (prev_end == this_start)
    group_starts = np.flatnonzero(~joins)
    group_ends = np.append(group_starts[1:], len(ids)) - 1
    for first, last in zip(group_starts.tolist(), group_ends.tolist()):
        kind = kinds[first]
        if kind == _FAST:
            assert run is not None
            begin, stop = int(run.starts[index[first]]), int(run.ends[index[last]])
            piece: Any = memoryview(run.buffer)[begin:stop]
        elif kind == _VERBATIM_RUN:
            b = int(ids[first])
            end_batch = int(run_ends[index[first]])
            begin, stop = int(position[b]), int(position[end_batch] + size[end_batch])
            piece = source[begin:stop]
        else:
            piece = built[int(ids[first])]
        result.output.append(piece)
        result.bytes_retained += len(piece) if kind == _BUILT else stop - begin
    result.messages_retained += int(np.sum(kept.count[outcome != DROP]))
    _chunk_metadata(scan, kept, outcome, attributes, result)


_VERBATIM_RUN, _FAST, _BUILT = 0, 1, 2  # the kinds of output _collect orders


def _chunk_metadata(scan: ScanResult, kept: Kept, outcome: np.ndarray, attributes: np.ndarray,
                    result: FilteredChunk) -> None:
    """Max timestamp, its shallow offset and the largest offset over this run's outputs (§3.7.7):
    verbatim and empty batches report their header; rebuilt ones their kept records, with the
    original lastOffset as the offset of the max timestamp."""
    out = np.flatnonzero(outcome != DROP)
    if len(out) == 0:
        return
    rebuilt = outcome[out] == REBUILD
    log_append = (attributes[out] & TIMESTAMP_TYPE_MASK) != 0
    header_ts = scan.batch_max_timestamp[out]
    max_ts = np.where(rebuilt & ~log_append, kept.max_timestamp[out], header_ts)
    last_offset = scan.batch_last_offset[out]
    shallow = np.where(max_ts == NO_TIMESTAMP, -1, last_offset)
    max_offset = np.where(rebuilt, kept.max_offset[out], last_offset)
    first = int(np.argmax(max_ts))
    result.update_metadata(int(max_ts[first]), int(shallow[first]), int(max_offset.max()))


def _empty_batches(source: memoryview, scan: ScanResult, batches: np.ndarray) -> dict[int, bytes]:
    """The 61-byte empty batch of each RETAIN_EMPTY batch that keeps no record."""
    out = {}
    for b in batches.tolist():
        h = BatchHeader.read(source, int(scan.batch_position[b]))
        out[b] = build_empty_batch(
            base_offset=h.base_offset, last_offset_delta=h.last_offset_delta, max_timestamp=h.max_timestamp,
            timestamp_type=TimestampType(1 if h.attributes & TIMESTAMP_TYPE_MASK else 0),
            producer_id=h.producer_id, producer_epoch=h.producer_epoch, base_sequence=h.base_sequence,
            is_transactional=bool(h.attributes & TRANSACTIONAL_FLAG_MASK),
            is_control=bool(h.attributes & CONTROL_FLAG_MASK), partition_leader_epoch=h.partition_leader_epoch)
    return out
