"""Scanned batches → ``pyarrow.RecordBatch`` rows of Kafka's schema, without per-row Python objects.

:func:`record_batches` scans a buffer of whole v2 batches (CRCs checked, compressed batches
decompressed by :func:`tidelog.records.scan.scan_batches`), keeps the records of data batches whose
offset is in ``[start, end)`` (control batches, i.e. transaction markers, are skipped, as Kafka
consumers skip them; aborted transactional records are returned, as ``read_uncommitted`` does,
unless an :class:`~tidelog.storage.read_committed.AbortedBatchFilter` is given: read_committed)
and yields record batches of at most :data:`MAX_ROWS` rows in exactly
:func:`tidelog.spark.schema.arrow_read_schema` order and types:

* ``key``/``value``: binary built from the scan's positions by one copy kernel per column (null for
  a null key or a tombstone);
* ``topic``/``partition``: constant columns; ``offset``; ``timestamp``: ms → µs, UTC;
  ``timestampType``: the batch's attribute bit 3 (0 CreateTime, 1 LogAppendTime);
* ``headers`` (with ``include_headers``): ``list<struct<key string, value binary>>``, null for a
  record without headers; header keys are taken as UTF-8 as written (Kafka's are Java strings).

The kernels (:func:`gather_bytes`, :func:`locate_headers`) are numba-compiled when numba loads,
else run interpreted (same source, slow, same results; ``TIDELOG_PURE_PYTHON=1`` forces it).
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import cache
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa

from tidelog import twins
from tidelog.errors import InvalidRecordError
from tidelog.records.scan import ScanResult, scan_batches
from tidelog.records.record import Record
from tidelog.spark.schema import HEADER_TYPE, arrow_read_schema
from tidelog.storage.read_committed import AbortedBatchFilter

MAX_ROWS = 65536
MAX_BYTES = 1 << 30  # per binary column of one record batch (int32 Arrow offsets)
_CONTROL = 0x20
_TRANSACTIONAL = 0x10
_LOG_APPEND_TIME = 0x08


# --- kernels (numba subset: ints, arrays, loops) --------------------------------------------

def gather_bytes(arena0, arena1, arena, pos, length, rows, offsets, out):  # type: ignore[no-untyped-def]
    """Copy ``length[r]`` bytes at ``pos[r]`` of arena ``arena[r]`` for each ``r`` in ``rows`` to
    ``out[offsets[i]:]`` (negative lengths copy nothing)."""
    for i in range(len(rows)):
        r = rows[i]
        n = length[r]
        if n > 0:
            p = pos[r]
            o = offsets[i]
            if arena[r] == 0:
                out[o:o + n] = arena0[p:p + n]
            else:
                out[o:o + n] = arena1[p:p + n]
    return 0


def read_varint(buf, pos):  # type: ignore[no-untyped-def]
    """Zig-zag varint at ``pos`` (already validated by the scan): ``(value, next position)``."""
    raw = 0
    shift = 0
    while True:
        b = int(buf[pos])  # a numpy uint8 interpreted would wrap when shifted
        pos += 1
        raw |= (b & 0x7F) << shift
        shift += 7
        if b < 0x80:
            break
    return (raw >> 1) ^ -(raw & 1), pos


def locate_headers(arena0, arena1, arena, headers_pos, headers_count, rows, first, key_pos, key_len,  # type: ignore[no-untyped-def]
                   value_pos, value_len, header_arena):
    """Fill per-header key/value positions and lengths for the headers of ``rows`` (header ``j``
    of row ``rows[i]`` goes to slot ``first[i] + j``)."""
    for i in range(len(rows)):
        r = rows[i]
        count = headers_count[r]
        if count <= 0:
            continue
        buf = arena0 if arena[r] == 0 else arena1
        p = headers_pos[r]
        for j in range(count):
            slot = first[i] + j
            n, p = read_varint(buf, p)
            key_pos[slot] = p
            key_len[slot] = n
            p += n
            n, p = read_varint(buf, p)
            value_pos[slot] = p
            value_len[slot] = n
            if n > 0:
                p += n
            header_arena[slot] = arena[r]
    return 0


class _Kernels(NamedTuple):
    gather_bytes: Any
    locate_headers: Any


@cache
def _get_kernels(pure: bool) -> _Kernels:
    if pure:
        return _Kernels(gather_bytes, locate_headers)
    namespace = twins.compile_functions(globals(), ["read_varint"], ["gather_bytes", "locate_headers"],
                                        {"nogil": True})
    return _Kernels(namespace["gather_bytes"], namespace["locate_headers"])


_KERNELS: _Kernels = twins.choose(_get_kernels)


# --- record batches -------------------------------------------------------------------------

def record_batches(buf: Any, topic: str, partition: int, start: int, end: int, *,
                   include_headers: bool = False, max_rows: int = MAX_ROWS,
                   aborted: AbortedBatchFilter | None = None) -> Iterator[pa.RecordBatch]:
    """Record batches of the data records in ``buf`` (whole v2 batches) with offsets in
    ``[start, end)``; with ``aborted`` (fed every buffer of the partition in offset order), not
    those of aborted transactions. Raises CorruptRecordError (CRC mismatch, bytes that do not parse)."""
    result = scan_batches(buf, verify_crc=True)
    rows = selected_rows(result, start, end, None if aborted is None else aborted_batches(result, aborted))
    for piece in _slices(result, rows, max_rows):
        yield to_record_batch(result, piece, topic, partition, include_headers)


def selected_rows(result: ScanResult, start: int, end: int, skipped: np.ndarray | None = None) -> np.ndarray:
    """Indices of the data records (not control) with offsets in ``[start, end)``, less those of
    the batches ``skipped`` marks (one bool per batch)."""
    data_batch = (result.batch_attributes & _CONTROL) == 0
    if skipped is not None:
        data_batch &= ~skipped
    mask = (result.offset >= start) & (result.offset < end) & data_batch[result.batch]
    return np.flatnonzero(mask)


def aborted_batches(result: ScanResult, aborted: AbortedBatchFilter) -> np.ndarray:
    """One bool per batch of ``result``: whether ``aborted`` skips it. Only the transactional
    batches of the producers it may still skip are shown to the filter (it skips nothing else,
    and its state moves only by them): a read with no aborted transaction costs one mask."""
    skipped = np.zeros(len(result.batch_attributes), np.bool_)
    producers = aborted.producer_ids()
    if not producers:
        return skipped
    transactional = np.flatnonzero(((result.batch_attributes & _TRANSACTIONAL) != 0)
                                   & np.isin(result.batch_producer_id, np.fromiter(producers, np.int64)))
    for i in transactional.tolist():
        skipped[i] = aborted.skips(_ScannedBatch(result, i))
    return skipped


class _ScannedBatch:
    """Batch ``i`` of a scan, as :class:`AbortedBatchFilter` reads a batch."""

    __slots__ = ("_result", "_i")

    def __init__(self, result: ScanResult, i: int) -> None:
        self._result, self._i = result, i

    @property
    def producer_id(self) -> int:
        return int(self._result.batch_producer_id[self._i])

    @property
    def last_offset(self) -> int:
        return int(self._result.batch_last_offset[self._i])

    @property
    def is_transactional(self) -> bool:
        return bool(int(self._result.batch_attributes[self._i]) & _TRANSACTIONAL)

    @property
    def is_control(self) -> bool:
        return bool(int(self._result.batch_attributes[self._i]) & _CONTROL)

    def records(self) -> Iterator[Record]:
        """The batch's first record, keyed (all a control batch's type needs); none if emptied."""
        r = self._result
        row = int(np.searchsorted(r.batch, self._i))
        if row < len(r.batch) and int(r.batch[row]) == self._i:
            n, pos = int(r.key_len[row]), int(r.key_pos[row])
            key = None if n < 0 else bytes(r.arenas[int(r.arena[row])][pos:pos + n])
            yield Record(offset=int(r.offset[row]), timestamp=int(r.timestamp[row]), key=key, value=None)


def _slices(result: ScanResult, rows: np.ndarray, max_rows: int) -> Iterator[np.ndarray]:
    """``rows`` cut into pieces of at most ``max_rows`` rows and MAX_BYTES per binary column."""
    sizes = np.maximum(result.key_len[rows], 0).astype(np.int64) + np.maximum(result.value_len[rows], 0)
    at = 0
    while at < len(rows):
        stop = min(at + max_rows, len(rows))
        total = np.cumsum(sizes[at:stop])
        if len(total) and total[-1] > MAX_BYTES:
            stop = at + max(1, int(np.searchsorted(total, MAX_BYTES, side="right")))
        yield rows[at:stop]
        at = stop


def to_record_batch(result: ScanResult, rows: np.ndarray, topic: str, partition: int,
                    include_headers: bool) -> pa.RecordBatch:
    """One record batch of ``rows`` of ``result``, in the read schema's column order."""
    n = len(rows)
    arenas = _arenas(result)
    batch_of = result.batch[rows]
    columns = [
        binary_column(arenas, result.arena, result.key_pos, result.key_len, rows),
        binary_column(arenas, result.arena, result.value_pos, result.value_len, rows),
        _constant_string(topic, n),
        pa.array(np.full(n, partition, np.int32)),
        pa.array(result.offset[rows]),
        pa.array(result.timestamp[rows] * 1000, pa.timestamp("us", tz="UTC")),
        pa.array(((result.batch_attributes[batch_of] & _LOG_APPEND_TIME) >> 3).astype(np.int32)),
    ]
    if include_headers:
        columns.append(headers_column(result, arenas, rows))
    return pa.RecordBatch.from_arrays(columns, schema=arrow_read_schema(include_headers))


def _arenas(result: ScanResult) -> tuple[np.ndarray, np.ndarray]:
    first = result.arenas[0]
    second = result.arenas[1] if len(result.arenas) > 1 else np.zeros(0, np.uint8)
    return first, second


def binary_column(arenas: tuple[np.ndarray, np.ndarray], arena: np.ndarray, pos: np.ndarray,
                  length: np.ndarray, rows: np.ndarray, type: pa.DataType | None = None) -> pa.Array:
    """A binary (or string, with ``type``) column of the byte ranges of ``rows``; null where the
    length is negative."""
    lengths = length[rows]
    valid = lengths >= 0
    offsets = np.zeros(len(rows) + 1, np.int32)
    np.cumsum(np.maximum(lengths, 0), out=offsets[1:])
    data = np.empty(int(offsets[-1]), np.uint8)
    _KERNELS.gather_bytes(arenas[0], arenas[1], arena, pos, length, rows, offsets, data)
    null_count = len(rows) - int(np.count_nonzero(valid))
    validity = pa.py_buffer(np.packbits(valid, bitorder="little")) if null_count else None
    return pa.Array.from_buffers(type or pa.binary(), len(rows),
                                 [validity, pa.py_buffer(offsets), pa.py_buffer(data)], null_count)


def _constant_string(text: str, n: int) -> pa.Array:
    raw = text.encode("utf-8")
    offsets = np.arange(n + 1, dtype=np.int32) * len(raw)
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(raw * n)])


def headers_column(result: ScanResult, arenas: tuple[np.ndarray, np.ndarray], rows: np.ndarray) -> pa.Array:
    """``list<struct<key string, value binary>>`` of ``rows``' headers; null for none."""
    counts = np.maximum(result.headers_count[rows], 0).astype(np.int32)
    list_offsets = np.zeros(len(rows) + 1, np.int32)
    np.cumsum(counts, out=list_offsets[1:])
    total = int(list_offsets[-1])
    key_pos, value_pos = np.zeros(total, np.int64), np.zeros(total, np.int64)
    key_len, value_len = np.zeros(total, np.int32), np.zeros(total, np.int32)
    header_arena = np.zeros(total, np.int16)
    _KERNELS.locate_headers(arenas[0], arenas[1], result.arena, result.headers_pos, result.headers_count, rows,
                            list_offsets[:-1].astype(np.int64), key_pos, key_len, value_pos, value_len, header_arena)
    every = np.arange(total, dtype=np.int64)
    keys = binary_column(arenas, header_arena, key_pos, key_len, every, pa.string())
    try:
        keys.validate(full=True)  # Spark's string column needs UTF-8 (Java producers always write it)
    except pa.ArrowInvalid as e:
        raise InvalidRecordError(f"a record header key is not valid UTF-8, so it cannot be a Spark string ({e})",
                                 offset=_first_bad_key_offset(result, rows, keys)) from None
    values = binary_column(arenas, header_arena, value_pos, value_len, every)
    structs = pa.StructArray.from_arrays([keys, values], fields=list(HEADER_TYPE.value_type))
    has = counts > 0
    null_count = len(rows) - int(np.count_nonzero(has))
    validity = pa.py_buffer(np.packbits(has, bitorder="little")) if null_count else None
    return pa.Array.from_buffers(HEADER_TYPE, len(rows), [validity, pa.py_buffer(list_offsets)], null_count,
                                 children=[structs])


def _first_bad_key_offset(result: ScanResult, rows: np.ndarray, keys: pa.Array) -> int | None:
    """The offset of the first row whose header keys do not decode (for the error message)."""
    counts = np.maximum(result.headers_count[rows], 0)
    owner = np.repeat(np.arange(len(rows)), counts)
    for slot, key in enumerate(keys.cast(pa.binary()).to_pylist()):
        try:
            key.decode("utf-8")
        except UnicodeDecodeError:
            return int(result.offset[rows[owner[slot]]])
    return None


def get_row_kernels_for_tests(pure: bool) -> _Kernels:
    """The compiled (``pure=False``) or interpreted kernels, to compare the twins (test seam)."""
    return _get_kernels(pure)
