"""Rebuilding the v2 batches that keep some of their records: Kafka's ``buildRetainedRecordsInto``
(same magic, codec at its default level, timestamp type, producer fields, flags, leader epoch and
baseOffset; lastOffsetDelta forced to the original; CreateTime baseTimestamp = first kept record's
and maxTimestamp = max kept, LogAppendTime both = the original maxTimestamp; the delete horizon in
baseTimestamp when set).

Cost: the records areas of every rebuilt batch of a run are written by one kernel call
(:mod:`.retain_twins`) that copies keys, values and headers and re-encodes only the varints;
uncompressed batches stay in the kernel's buffer, their headers filled by column and their CRCs
computed by one kernel call. Compressed batches cost their recompression; a batch whose deltas
the kernel cannot encode is rebuilt record by record with :class:`~tidelog.records.builder.BatchBuilder`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from tidelog.cleaner import _retain_kernels as rk
from tidelog.cleaner.retain_twins import RetainKernels
from tidelog.errors import InvalidRecordError
from tidelog.records.builder import BatchBuilder, encode_v2_batch
from tidelog.records.compression import compress
from tidelog.records.layout import (
    BASE_SEQUENCE_OFFSET,
    COMPRESSION_CODEC_MASK,
    CONTROL_FLAG_MASK,
    CRC_OFFSET,
    CRC_SIZE,
    DELETE_HORIZON_FLAG_MASK,
    HEADER,
    HEADER_DTYPE,
    LOG_OVERHEAD,
    PARTITION_LEADER_EPOCH_OFFSET,
    RECORD_BATCH_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_FLAG_MASK,
)
from tidelog.records.record import TimestampType
from tidelog.records.scan import ScanResult, batch_crcs, record_headers

NO_TIMESTAMP = -1
FLAG_BITS = 0x3F  # codec, timestamp type, transactional, control: what a rebuilt batch keeps
NO_ARENA = np.frombuffer(b"", np.uint8)


@dataclass(slots=True)
class Kept:
    """Kept rows of one run grouped by batch: ``rows[begin[b]:begin[b] + count[b]]`` are batch b's."""

    rows: np.ndarray
    begin: np.ndarray
    count: np.ndarray
    max_offset: np.ndarray
    max_timestamp: np.ndarray
    first_timestamp: np.ndarray
    tombstone: np.ndarray


def kept_by_batch(scan: ScanResult, keep: np.ndarray) -> Kept:
    n = scan.batch_count
    rows = np.flatnonzero(keep)
    batch = scan.batch[rows]
    ids = np.arange(n)
    begin = np.searchsorted(batch, ids, "left")
    count = np.searchsorted(batch, ids, "right") - begin
    max_offset = np.full(n, -1, np.int64)
    max_timestamp = np.full(n, NO_TIMESTAMP, np.int64)
    first_timestamp = np.full(n, NO_TIMESTAMP, np.int64)
    some = np.flatnonzero(count)
    if len(some):
        max_offset[some] = np.maximum.reduceat(scan.offset[rows], begin[some])
        max_timestamp[some] = np.maximum(np.maximum.reduceat(scan.timestamp[rows], begin[some]), NO_TIMESTAMP)
        first_timestamp[some] = scan.timestamp[rows[begin[some]]]
    tombstone = np.bincount(batch[scan.value_len[rows] < 0], minlength=n) > 0
    return Kept(rows, begin, count, max_offset, max_timestamp, first_timestamp, tombstone)


@dataclass(frozen=True, slots=True)
class BatchHeader:
    """The v2 header fields a rebuilt or empty batch copies."""

    base_offset: int
    partition_leader_epoch: int
    attributes: int
    last_offset_delta: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int

    @classmethod
    def read(cls, source: memoryview, pos: int) -> BatchHeader:
        (base, _, epoch, _, _, attributes, delta, _, max_ts, pid, pepoch, sequence,
         _) = HEADER.unpack_from(source, pos)
        return cls(base, epoch, attributes, delta, max_ts, pid, pepoch, sequence)


def rebuild(source: memoryview, scan: ScanResult, kept: Kept, attributes: np.ndarray,
            set_horizon: np.ndarray, has_horizon: np.ndarray, delete_horizon_ms: int,
            batches: np.ndarray, twin: RetainKernels) -> tuple[RebuiltRun | None, dict[int, bytes]]:
    """The rebuilt bytes of ``batches``: records areas from one kernel call, then headers. The
    uncompressed ones stay in the kernel's buffer (the run); the others come back as bytes."""
    if len(batches) == 0:
        return None, {}
    base_timestamp = np.where(set_horizon, delete_horizon_ms,
                              np.where(has_horizon, scan.batch_base_timestamp, kept.first_timestamp))[batches]
    areas, begin, end = _write_areas(twin, scan, kept, batches, base_timestamp)
    out: dict[int, Any] = {}
    ends = np.asarray(end)
    fast = (ends >= 0) & ((scan.batch_attributes[batches] & COMPRESSION_CODEC_MASK) == 0)
    run = None
    if fast.any():
        run = _uncompressed_batches(source, scan, kept, batches, fast, base_timestamp, set_horizon,
                                    has_horizon, areas, np.asarray(begin), ends)
    for j in np.flatnonzero(~fast).tolist():
        b = int(batches[j])
        h = BatchHeader.read(source, int(scan.batch_position[b]))
        horizon = bool(set_horizon[b] or has_horizon[b])
        if end[j] < 0:
            out[b] = _rebuild_with_builder(scan, kept, b, h, int(base_timestamp[j]) if horizon else None)
            continue
        area: bytes | memoryview = areas[begin[j]:end[j]]
        codec = h.attributes & COMPRESSION_CODEC_MASK
        if codec:
            area = compress(codec, area)
        log_append = h.attributes & TIMESTAMP_TYPE_MASK
        out[b] = encode_v2_batch(
            base_offset=h.base_offset, partition_leader_epoch=h.partition_leader_epoch,
            attributes=(h.attributes & FLAG_BITS) | (DELETE_HORIZON_FLAG_MASK if horizon else 0),
            last_offset_delta=h.last_offset_delta, base_timestamp=int(base_timestamp[j]),
            max_timestamp=h.max_timestamp if log_append else int(kept.max_timestamp[b]),
            producer_id=h.producer_id, producer_epoch=h.producer_epoch, base_sequence=h.base_sequence,
            records_count=int(kept.count[b]), records_area=area)
    return run, out


def _uncompressed_batches(source: memoryview, scan: ScanResult, kept: Kept, batches: np.ndarray,
                          fast: np.ndarray, base_timestamp: np.ndarray, set_horizon: np.ndarray,
                          has_horizon: np.ndarray, areas: memoryview, begin: np.ndarray,
                          end: np.ndarray) -> RebuiltRun:
    """The rebuilt uncompressed batches, in place in the kernel's output: headers filled by column
    (the same fields ``encode_v2_batch`` writes) into the room before each records area, then one
    CRC kernel call for all of them (:func:`~tidelog.records.scan.batch_crcs`), the CRCs written by column
    too."""
    ids = batches[fast]
    data = np.frombuffer(source, np.uint8)
    position = scan.batch_position[ids]
    attributes = scan.batch_attributes[ids].astype(np.int64)
    horizon = set_horizon[ids] | has_horizon[ids]
    headers = np.zeros(len(ids), HEADER_DTYPE)
    headers["base_offset"] = scan.batch_base_offset[ids]
    headers["batch_length"] = RECORD_BATCH_OVERHEAD - LOG_OVERHEAD + (end[fast] - begin[fast])
    headers["partition_leader_epoch"] = _gather_int32(data, position + PARTITION_LEADER_EPOCH_OFFSET)
    headers["magic"] = 2
    headers["attributes"] = (attributes & FLAG_BITS) | np.where(horizon, DELETE_HORIZON_FLAG_MASK, 0)
    headers["last_offset_delta"] = scan.batch_last_offset[ids] - scan.batch_base_offset[ids]
    headers["base_timestamp"] = base_timestamp[fast]
    log_append = (attributes & TIMESTAMP_TYPE_MASK) != 0
    headers["max_timestamp"] = np.where(log_append, scan.batch_max_timestamp[ids], kept.max_timestamp[ids])
    headers["producer_id"] = scan.batch_producer_id[ids]
    headers["producer_epoch"] = scan.batch_producer_epoch[ids]
    headers["base_sequence"] = _gather_int32(data, position + BASE_SEQUENCE_OFFSET)
    headers["records_count"] = kept.count[ids]
    starts = begin[fast] - RECORD_BATCH_OVERHEAD  # the kernel left room for each header
    buffer = areas.obj
    target = np.frombuffer(buffer, np.uint8)
    target[starts[:, None] + np.arange(RECORD_BATCH_OVERHEAD)] = headers.view(np.uint8).reshape(-1, RECORD_BATCH_OVERHEAD)
    stops = end[fast]
    crcs = batch_crcs(buffer, starts, stops - starts)
    target[(starts + CRC_OFFSET)[:, None] + np.arange(CRC_SIZE)] = crcs.astype(">u4").view(np.uint8).reshape(-1, 4)
    return RebuiltRun(buffer, ids, starts, stops)


@dataclass(frozen=True, slots=True)
class RebuiltRun:
    """Rebuilt batches ``ids`` (ascending) at ``[starts, ends)`` of one buffer, in batch order:
    back-to-back ones go out as one slice."""

    buffer: Any  # the kernel's output: a numpy array or a bytearray
    ids: np.ndarray
    starts: np.ndarray
    ends: np.ndarray


def _gather_int32(data: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """The big-endian int32 at each position of ``data``."""
    raw = data[positions[:, None] + np.arange(4)].astype(np.uint32)
    return ((raw[:, 0] << 24) | (raw[:, 1] << 16) | (raw[:, 2] << 8) | raw[:, 3]).view(np.int32)


def _write_areas(twin: RetainKernels, scan: ScanResult, kept: Kept, batches: np.ndarray,
                 base_timestamp: np.ndarray) -> tuple[memoryview, list[int], list[int]]:
    """One kernel call: ``(buffer, begin, end)`` with batch j's records area at
    ``buffer[begin[j]:end[j]]`` and 61 free bytes before it for its header (``end[j]`` -1:
    rebuild it with the builder)."""
    counts = kept.count[batches]
    uncompressed = (scan.batch_attributes[batches] & COMPRESSION_CODEC_MASK) == 0
    decompressed = scan.arenas[1] if len(scan.arenas) > 1 else NO_ARENA
    capacity = (int(np.sum(scan.batch_size[batches][uncompressed])) + len(decompressed)
                + rk.MAX_RECORD_GROWTH * int(np.sum(counts)) + RECORD_BATCH_OVERHEAD * len(batches))
    out = twin.output(capacity)
    begin, end = twin.output_column(len(batches)), twin.output_column(len(batches))
    c = twin.column
    error, _ = twin.write_records(
        twin.buffer(scan.arenas[0]), twin.buffer(decompressed), c(kept.rows), c(kept.begin[batches]),
        c(kept.begin[batches] + counts), c(scan.batch_base_offset[batches]), c(base_timestamp),
        c(scan.offset), c(scan.timestamp), c(scan.key_pos), c(scan.key_len), c(scan.value_pos),
        c(scan.value_len), c(scan.headers_pos), c(scan.headers_count), c(scan.arena), out, begin, end,
        RECORD_BATCH_OVERHEAD)  # each area after room for its header
    if error != rk.OK:  # the capacity bound above is wrong: a bug, not bad input
        raise InvalidRecordError("rebuilt records exceed their size bound", capacity=capacity)
    return memoryview(out), np.asarray(begin).tolist(), np.asarray(end).tolist()


def _rebuild_with_builder(scan: ScanResult, kept: Kept, b: int, h: BatchHeader, horizon: int | None) -> bytes:
    """Batch ``b`` rebuilt record by record with BatchBuilder (deltas the kernel cannot encode)."""
    log_append = bool(h.attributes & TIMESTAMP_TYPE_MASK)
    builder = BatchBuilder(
        compression=h.attributes & COMPRESSION_CODEC_MASK,
        timestamp_type=TimestampType.LOG_APPEND_TIME if log_append else TimestampType.CREATE_TIME,
        base_offset=h.base_offset, partition_leader_epoch=h.partition_leader_epoch,
        producer_id=h.producer_id, producer_epoch=h.producer_epoch, base_sequence=h.base_sequence,
        is_transactional=bool(h.attributes & TRANSACTIONAL_FLAG_MASK),
        is_control=bool(h.attributes & CONTROL_FLAG_MASK), delete_horizon_ms=horizon,
        log_append_time=h.max_timestamp if log_append else None)
    start = int(kept.begin[b])
    for row in kept.rows[start:start + int(kept.count[b])].tolist():
        builder.append(int(scan.offset[row]), int(scan.timestamp[row]), _field(scan, row, "key"),
                       _field(scan, row, "value"), record_headers(scan, row))
    return builder.build(last_offset_delta=h.last_offset_delta)


def _field(scan: ScanResult, row: int, name: str) -> bytes | None:
    length = int(getattr(scan, f"{name}_len")[row])
    if length < 0:
        return None
    pos = int(getattr(scan, f"{name}_pos")[row])
    return scan.arenas[int(scan.arena[row])][pos:pos + length].tobytes()
