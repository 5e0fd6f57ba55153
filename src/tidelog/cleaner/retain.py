"""What survives a cleaning pass, batch by batch: Kafka's ``MemoryRecords.filterTo`` driven by
``LogCleaner.cleanInto`` (kafka-storage.md §3.7.6 and the first rules of §3.7.7).

:func:`filter_chunk` takes a chunk of a source segment's bytes and returns what to append to the
``.cleaned`` segment. For each batch, in order:

1. **Can the batch go?** Data batch: it belongs to an aborted transaction. Control batch: its
   marker is discardable (:mod:`tidelog.cleaner.transactions`); its records go only once the
   delete horizon stamped into it has passed (``discard records``).
2. **Batch retention.** RETAIN_EMPTY for the last batch of an active producer
   (:mod:`tidelog.cleaner.producers`) and for the batch ending just before the round's
   ``upper_bound_offset`` (so the last offset survives); otherwise DELETE when its records go,
   else DELETE_EMPTY (dropped only if no record survives).
3. **Records** (unless discarded; control records always stay): an offset past the map's
   ``latest_offset`` stays; a keyless record goes (an "invalid message"); otherwise a record stays
   iff its offset is >= the map's offset for its key and it has a value or is a tombstone still
   retained (v2: no delete horizon yet, or ``current_time`` < horizon; v0/v1: the caller's
   ``retain_legacy_tombstones``).
4. **Output.** All records kept and no horizon to set: the original bytes, as a memoryview of the
   input (adjacent ones coalesced into one slice). Some records kept: the batch rebuilt as
   Kafka's ``buildRetainedRecordsInto`` does (same magic, codec at its default level, timestamp
   type, producer fields, flags, leader epoch and baseOffset; lastOffsetDelta forced to the
   original; CreateTime baseTimestamp = first kept record's and maxTimestamp = max kept,
   LogAppendTime both = the original maxTimestamp); the delete horizon (attribute bit 6,
   baseTimestamp = ``current_time + delete_retention_ms``) is set when the v2 batch keeps a
   tombstone or is a discardable marker and has none yet, and an existing one is kept. No record
   kept and RETAIN_EMPTY: the 61-byte empty batch. v0/v1 entries go through
   :mod:`tidelog.cleaner.retain_legacy` (rewritten in their own format).

**Parts.** This module decides (steps 1-3); :mod:`.retain_output` assembles the output (step 4),
:mod:`.rebuild` rebuilds the batches that keep some records, :mod:`.retain_twins` holds the two
twins of the records-area kernel.

**Cost.** Per-record work never loops in Python: v2 batches are decoded by the scan kernel
(:func:`tidelog.records.scan.scan_batches`), keys looked up with one ``get_records`` call per
chunk, the keep decision is numpy over the scan's columns, and the records areas of every rebuilt
batch are written by one kernel call. Python loops run per batch only for transaction markers and
compression. A chunk has a fixed cost of about 60 numpy calls, which dominates with small chunks
(figures: docs/architecture.md, "Design notes and measurements").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from tidelog.cleaner.producers import ProducerLastBatch
from tidelog.cleaner.rebuild import NO_TIMESTAMP
from tidelog.cleaner.retain_legacy import filter_legacy, offset_at
from tidelog.cleaner.retain_output import emit
from tidelog.cleaner.retain_twins import ACTIVE, RetainKernels, get_kernels
from tidelog.cleaner.transactions import CleanedTransactionMetadata
from tidelog.errors import CorruptRecordError
from tidelog.records.control import control_record_type
from tidelog.records.layout import CONTROL_FLAG_MASK, DELETE_HORIZON_FLAG_MASK, TRANSACTIONAL_FLAG_MASK
from tidelog.records.scan import ScanResult, scan_batches

# How a batch's records are judged: the rules, all kept (control), none kept, not even read.
NORMAL, CONTROL, NONE, SKIP = 0, 1, 2, 3


class OffsetLookup(Protocol):
    """What the retention rules need of the offset map (``cleaner.offset_map.OffsetMap``)."""

    latest_offset: int  # the last offset the map covers; records past it are outside this round

    def get(self, key: bytes) -> int:
        """The latest offset of ``key`` in the map, -1 when absent."""

    def get_records(self, scan: ScanResult) -> np.ndarray:
        """Per scan row (int64): the latest offset of the row's key, -1 when absent or keyless."""


@dataclass
class CleaningRound:
    """What stays fixed for one cleaning round (all segment groups of one log).

    ``upper_bound_offset``: the round's segment-aligned first uncleanable offset (not the map's
    end). ``producers``: :func:`~tidelog.cleaner.producers.producer_last_batches`; read once, when
    the round is created.
    """

    offset_map: OffsetLookup
    current_time: int
    delete_retention_ms: int
    upper_bound_offset: int
    producers: Mapping[int, ProducerLastBatch] = field(default_factory=dict)
    _table: _ProducerTable = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._table = _ProducerTable.of(self.producers)

    @property
    def delete_horizon_ms(self) -> int:
        """The horizon stamped into batches that keep a tombstone or a discardable marker."""
        return self.current_time + self.delete_retention_ms


@dataclass(slots=True)
class FilteredChunk:
    """What :func:`filter_chunk` made of a chunk.

    ``output``: bytes to append in order; each item holds one or more whole batches (runs of
    batches copied verbatim are one memoryview of the input, so the input must stay alive until
    they are written). ``bytes_read``: bytes of the complete batches consumed (0: the chunk holds
    no complete batch; read a bigger one). ``largest_offset``, ``max_timestamp``,
    ``offset_of_max_timestamp``: the arguments of ``LogSegment.append`` for ``output`` (§3.7.7),
    -1 when nothing is output. Counts as Kafka's ``CleanerStats``: records read (not those of
    deleted batches), records and bytes retained (61 per empty batch), keyless records dropped.
    """

    output: list[bytes | memoryview] = field(default_factory=list)
    bytes_read: int = 0
    largest_offset: int = -1
    max_timestamp: int = NO_TIMESTAMP
    offset_of_max_timestamp: int = -1
    messages_read: int = 0
    messages_retained: int = 0
    bytes_retained: int = 0
    invalid_messages: int = 0

    def _retained(self, data: bytes | memoryview, records: int, max_timestamp: int,
                  shallow_offset: int, max_offset: int) -> None:
        """Kafka's ``FilterResult.updateRetainedBatchMetadata`` (the first max timestamp wins)."""
        self.output.append(data)
        self.messages_retained += records
        self.bytes_retained += len(data)
        self.update_metadata(max_timestamp, shallow_offset, max_offset)

    def update_metadata(self, max_timestamp: int, shallow_offset: int, max_offset: int) -> None:
        """Take an output's max timestamp (the first max wins, with its shallow offset) and largest offset."""
        if max_timestamp > self.max_timestamp:
            self.max_timestamp = max_timestamp
            self.offset_of_max_timestamp = shallow_offset
        if max_offset > self.largest_offset:
            self.largest_offset = max_offset


def filter_chunk(buf: Any, start: int, end: int, round: CleaningRound, txn: CleanedTransactionMetadata,
                 retain_legacy_tombstones: bool, *, at_end_of_file: bool = False,
                 kernels: RetainKernels | None = None) -> FilteredChunk:
    """Apply the retention rules to the complete batches of ``buf[start:end]``.

    ``buf``: bytes, bytearray, memoryview, mmap or a uint8 numpy array; verbatim output items are
    memoryviews of it. Stops at a partial batch (``bytes_read`` says where); with
    ``at_end_of_file`` (``end`` is the end of the segment) a partial batch is corruption instead.
    ``txn`` is advanced over every batch read. Raises CorruptRecordError, ``position`` relative to
    ``buf`` and ``offset`` when known, for a header that cannot be a batch, a CRC mismatch,
    records that do not decode, or a batch running past the end of the file. ``kernels``: a twin
    from :func:`get_kernels` (tests); by default the one chosen at import.
    """
    data = (buf if isinstance(buf, np.ndarray) else np.frombuffer(buf, np.uint8)).view()
    data.flags.writeable = False  # one numba specialisation, shared with the scan
    if not 0 <= start <= end <= len(data):
        raise ValueError(f"chunk [{start}, {end}) outside the buffer of {len(data)} bytes")
    source = memoryview(buf).cast("B")
    result = FilteredChunk()
    pos = start
    while pos < end:
        scan = scan_batches(data, pos, end, verify_crc=True, stop_at_legacy=True)
        if scan.batch_count:
            _filter_v2(source, scan, round, txn, result, kernels or ACTIVE)
        pos = scan.end_position
        if not scan.stopped_at_legacy:
            break  # the end, or a partial batch
        pos += filter_legacy(data, source, pos, round, txn, retain_legacy_tombstones, result)
    if at_end_of_file and pos < end:
        raise CorruptRecordError(
            f"batch at the end of the segment runs past it ({end - pos} bytes left)",
            position=pos, offset=offset_at(data, pos))
    result.bytes_read = pos - start
    return result


# --- producers ------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class _ProducerTable:
    """``CleaningRound.producers`` as sorted numpy columns, to test every batch at once."""

    producer_id: np.ndarray
    last_offset: np.ndarray
    epoch: np.ndarray
    is_control: np.ndarray

    @classmethod
    def of(cls, producers: Mapping[int, ProducerLastBatch]) -> _ProducerTable:
        pids = np.array(sorted(producers), np.int64)
        entries = [producers[int(p)] for p in pids]
        return cls(pids, np.array([e.last_offset for e in entries], np.int64),
                   np.array([e.producer_epoch for e in entries], np.int64),
                   np.array([e.is_control for e in entries], bool))

    def last_batches(self, pid: np.ndarray, epoch: np.ndarray, last_offset: np.ndarray,
                     control: np.ndarray) -> np.ndarray:
        """Which batches hold their producer's last data offset, or are a control batch of the
        current epoch of a producer whose last entry is a marker (Kafka's
        ``isBatchLastRecordOfProducer``)."""
        if len(self.producer_id) == 0:
            return np.zeros(len(pid), bool)
        i = np.minimum(np.searchsorted(self.producer_id, pid), len(self.producer_id) - 1)
        found = (self.producer_id[i] == pid) & (pid >= 0)
        by_data = ~self.is_control[i] & (last_offset == self.last_offset[i])
        by_marker = self.is_control[i] & control & (epoch == self.epoch[i])
        return found & (by_data | by_marker)


# --- v2 batches -----------------------------------------------------------------------------

@dataclass(slots=True)
class BatchPlan:
    """Per batch of one scanned run: how it is judged (steps 1 and 2) and what comes out."""

    scan: ScanResult
    mode: np.ndarray
    retain_empty: np.ndarray
    discardable_marker: np.ndarray

    @property
    def skipped(self) -> np.ndarray:
        """Per batch: it goes whole, its records not even read."""
        return self.mode == SKIP


def _filter_v2(source: memoryview, scan: ScanResult, round: CleaningRound,
               txn: CleanedTransactionMetadata, result: FilteredChunk, twin: RetainKernels) -> None:
    """Filter the scanned v2 batches into ``result``."""
    plan = _plan_batches(scan, round, txn)
    keep, read, invalid = _keep_records(plan, round)
    result.messages_read += read
    result.invalid_messages += invalid
    emit(source, plan, keep, round, result, twin)


def _plan_batches(scan: ScanResult, round: CleaningRound, txn: CleanedTransactionMetadata) -> BatchPlan:
    """Steps 1 and 2 of the module docstring for every batch of ``scan``."""
    attributes = scan.batch_attributes.astype(np.int64)
    control = (attributes & CONTROL_FLAG_MASK) != 0
    can_discard = discardable_batches(scan, txn)
    horizon_passed = ((attributes & DELETE_HORIZON_FLAG_MASK) != 0) & (
        scan.batch_base_timestamp <= round.current_time)
    discard = can_discard & (~control | horizon_passed)
    retain_empty = round._table.last_batches(scan.batch_producer_id, scan.batch_producer_epoch,
                                             scan.batch_last_offset, control)
    retain_empty |= scan.batch_last_offset + 1 == round.upper_bound_offset
    mode = np.where(discard, np.where(retain_empty, NONE, SKIP), np.where(control, CONTROL, NORMAL))
    return BatchPlan(scan, mode, retain_empty, can_discard & control)


def discardable_batches(scan: ScanResult, txn: CleanedTransactionMetadata) -> np.ndarray:
    """Kafka's ``shouldDiscardBatch`` for every batch of ``scan``, in order, advancing ``txn``:
    a data batch of an aborted transaction, or a discardable marker. The offset map's pass uses
    it too (it skips aborted data the same way)."""
    n = scan.batch_count
    attributes = scan.batch_attributes
    control = (attributes & CONTROL_FLAG_MASK) != 0
    counts = scan.batch_records_count.astype(np.int64)
    first_row = np.cumsum(counts) - counts
    if not np.any(attributes & (TRANSACTIONAL_FLAG_MASK | CONTROL_FLAG_MASK)):
        if n:  # plain data batches only move aborted transactions from pending to ongoing
            txn.advance_to(int(scan.batch_last_offset.max()))
        return np.zeros(n, bool)
    out = np.zeros(n, bool)
    columns = zip(scan.batch_last_offset.tolist(), scan.batch_producer_id.tolist(), attributes.tolist(),
                  control.tolist(), scan.batch_records_count.tolist(), first_row.tolist())
    for b, (last, pid, attrs, is_control, count, row) in enumerate(columns):
        if is_control:
            out[b] = txn.on_control(last, pid, _control_type(scan, row) if count else None)
        else:
            out[b] = txn.on_data(last, pid, bool(attrs & TRANSACTIONAL_FLAG_MASK))
    return out


def _control_type(scan: ScanResult, row: int) -> Any:
    """The type of the control record at ``row``; CorruptRecordError if its key is not a control key."""
    length = int(scan.key_len[row])
    pos = int(scan.key_pos[row])
    key = None if length < 0 else scan.arenas[int(scan.arena[row])][pos:pos + length].tobytes()
    try:
        return control_record_type(key)
    except CorruptRecordError as err:
        b = int(scan.batch[row])
        raise CorruptRecordError(err.message, position=int(scan.batch_position[b]),
                                 offset=int(scan.offset[row])) from err


def _keep_records(plan: BatchPlan, round: CleaningRound) -> tuple[np.ndarray, int, int]:
    """Step 3 for every row: ``(keep mask, records read, keyless records dropped)``."""
    scan = plan.scan
    mode = plan.mode[scan.batch]
    offset = scan.offset
    latest = round.offset_map.latest_offset
    past = offset > latest
    has_key = scan.key_len >= 0
    if past.all():
        kept = past
    else:
        found = np.asarray(round.offset_map.get_records(scan), np.int64)
        attributes = scan.batch_attributes
        tombstones_kept = ((attributes & DELETE_HORIZON_FLAG_MASK) == 0) | (
            round.current_time < scan.batch_base_timestamp)
        value_ok = (scan.value_len >= 0) | tombstones_kept[scan.batch]
        kept = past | (has_key & (offset >= found) & value_ok)
    normal = mode == NORMAL
    keep = np.where(normal, kept, mode == CONTROL)
    invalid = int(np.count_nonzero(normal & ~past & ~has_key))
    return keep, int(np.count_nonzero(mode != SKIP)), invalid


__all__ = [
    "CleaningRound",
    "FilteredChunk",
    "OffsetLookup",
    "RetainKernels",
    "discardable_batches",
    "filter_chunk",
    "get_kernels",
]
