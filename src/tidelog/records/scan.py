"""Scan a buffer of RecordBatch v2 batches into flat numpy columns, one row per record.

The one fast path for per-record work: compaction builds its key map from these columns and the
Spark data source turns them into rows. Batches are walked and decoded by kernels (see
``_scan_kernels.py``) that exist as twins behind the :class:`ScanKernels` protocol
(:mod:`tidelog.records.scan_twins`): compiled with numba (cached on disk, GIL released; about
two orders of magnitude faster than interpreted) or the very same functions run
interpreted. Chosen once, at import: the interpreted one when ``TIDELOG_PURE_PYTHON=1`` or numba does not import.
:data:`ACTIVE_IMPLEMENTATION` says which; both give byte-identical results.

How a scan goes (:func:`scan_batches`), each step one call over all batches, never per record:

1. walk the batch headers (once to count, once to fill the per-batch columns); a batch running
   past ``end`` stops the walk: that partial tail is not an error, ``end_position`` says where the
   complete batches end;
2. optionally check every batch's CRC-32C (``verify_crc``; off by default, callers often check
   CRCs in a separate cheap pass);
3. decompress compressed batches (Python, one ``decompress()`` per batch) into one extra arena;
4. size the record columns from the headers' recordsCount (bounded by the bytes each records area
   holds, so garbage counts cannot allocate unbounded memory);
5. decode the records of all uncompressed batches in one kernel call, then those of all
   compressed batches in another, each batch into its own rows.

Positions in the record columns point into ``arenas[arena]``: arena 0 is the input, arena 1 (only
when the buffer held compressed batches) the concatenated decompressed records. Control batches are
decoded like any other (filter on ``batch_attributes & 0x20``). A batch declaring zero records is
listed but not decoded, as Kafka does. Legacy (magic 0/1) batches are not scanned: they raise.

Cost: reads every byte of every batch once (twice for headers); holds the input's buffer (an
``mmap`` cannot be closed while the result lives). Thread-safe: no shared state; the compiled
kernels release the GIL.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

import numpy as np

from tidelog.errors import CorruptRecordError, UnsupportedCompressionError
from tidelog.records import _scan_kernels as k
from tidelog.records.batch import COMPRESSION_CODEC_MASK, RecordBatch
from tidelog.records.compression import MAX_DECOMPRESSED_BYTES, decompress
from tidelog.records.layout import CRC_OFFSET, CRC_SIZE, RECORD_BATCH_OVERHEAD
from tidelog.records.scan_twins import ColumnSpec, ScanKernels, get_kernels
from tidelog import twins

# The kernel columns, in the order of the tuples the kernels unpack (see _scan_kernels.py).
BATCH_COLUMNS: ColumnSpec = (
    ("position", np.int64), ("size", np.int64), ("base_offset", np.int64),
    ("last_offset", np.int64), ("attributes", np.int16), ("base_timestamp", np.int64),
    ("max_timestamp", np.int64), ("producer_id", np.int64), ("producer_epoch", np.int16),
    ("records_count", np.int32),
)
RECORD_COLUMNS: ColumnSpec = (
    ("offset", np.int64), ("timestamp", np.int64), ("key_pos", np.int64), ("key_len", np.int32),
    ("value_pos", np.int64), ("value_len", np.int32), ("headers_pos", np.int64),
    ("headers_count", np.int32), ("arena", np.int16), ("batch", np.int32),
)

_ERRORS = {
    k.ERR_VARINT_TOO_LONG: "varint longer than 5 bytes (varlong: 10 bytes)",
    k.ERR_RECORD_TRUNCATED: "records area ends inside a record",
    k.ERR_RECORDS_MISSING: "records area ends before the batch's recordsCount records",
    k.ERR_TRAILING_BYTES: "bytes left after the batch's recordsCount records (incorrect declared size)",
    k.ERR_RECORD_LENGTH: "record length does not match the bytes its fields take",
    k.ERR_KEY_OVERRUN: "key length runs past the end of the record",
    k.ERR_VALUE_OVERRUN: "value length runs past the end of the record",
    k.ERR_HEADER_COUNT: "negative record header count",
    k.ERR_HEADER_OVERRUN: "record header runs past the end of the record, or has a null key",
    k.ERR_BATCH_LENGTH: "batch length below the minimum (14 for any magic, 49 for magic 2)",
    k.ERR_MAGIC: "batch magic is not 2 (legacy v0/v1 batches are not scanned)",
    k.ERR_OFFSET_OVERFLOW: "baseOffset plus an offset delta overflows int64",
    k.ERR_TIMESTAMP_OVERFLOW: "baseTimestamp plus a timestamp delta overflows int64",
}


@dataclass(frozen=True, slots=True, eq=False)
class ScanResult:
    """Columns of one scan. Record rows are in buffer order; ``batch`` indexes the ``batch_*`` columns.

    Lengths are -1 for a null key or value (a tombstone). ``headers_pos`` is where the first header
    starts (after the header-count varint); the headers end where the record ends. ``timestamp`` is
    Kafka's record timestamp (the batch maxTimestamp for LogAppendTime batches).
    ``end_position`` is the byte after the last complete batch (``start`` when there was none).
    Compared by identity (the columns are numpy arrays).
    """

    offset: np.ndarray
    timestamp: np.ndarray
    key_pos: np.ndarray
    key_len: np.ndarray
    value_pos: np.ndarray
    value_len: np.ndarray
    headers_pos: np.ndarray
    headers_count: np.ndarray
    arena: np.ndarray
    batch: np.ndarray
    batch_position: np.ndarray
    batch_size: np.ndarray
    batch_base_offset: np.ndarray
    batch_last_offset: np.ndarray
    batch_attributes: np.ndarray
    batch_base_timestamp: np.ndarray
    batch_max_timestamp: np.ndarray
    batch_producer_id: np.ndarray
    batch_producer_epoch: np.ndarray
    batch_records_count: np.ndarray
    arenas: tuple[np.ndarray, ...]
    end_position: int
    record_count: int
    stopped_at_legacy: bool = False  # with ``stop_at_legacy``: a v0/v1 entry starts at end_position

    @property
    def batch_count(self) -> int:
        """Number of complete batches scanned."""
        return len(self.batch_position)


# --- the twin chosen at import (tidelog.records.scan_twins) --------------------------------

_ACTIVE: ScanKernels = twins.choose(get_kernels)
ACTIVE_IMPLEMENTATION: str = _ACTIVE.name


# --- the driver -----------------------------------------------------------------------------

def scan_batches(buf: Any, start: int = 0, end: int | None = None, *, verify_crc: bool = False,
                 stop_at_legacy: bool = False, kernels: ScanKernels | None = None) -> ScanResult:
    """Scan the complete v2 batches of ``buf[start:end]`` into a :class:`ScanResult`.

    ``buf``: bytes, bytearray, memoryview, mmap or a 1-D uint8 numpy array (never copied).
    A partial batch at the end stops the scan (see ``end_position``); an empty range gives an
    empty result. Raises CorruptRecordError (``position`` = the bad batch's, ``offset`` = its
    baseOffset, ``record_position`` = the bad record's within the batch's records when a record is
    at fault) for anything that does not parse, including an unknown codec id or a compressed
    stream that does not decompress, and for a CRC mismatch with ``verify_crc``. With
    ``stop_at_legacy`` a complete v0/v1 entry stops the scan like a partial tail does
    (``stopped_at_legacy``; the caller reads that entry itself) instead of raising. ``kernels``: a
    twin from :func:`get_kernels`; by default the one chosen at import. Scans every byte: O(len).
    """
    twin = _ACTIVE if kernels is None else kernels
    data = _as_uint8(buf)
    stop = _check_range(len(data), start, end)
    batches, end_position, at_legacy = _walk(twin, data, start, stop, stop_at_legacy)
    if verify_crc:
        _verify_crcs(twin, data, batches)
    arena, area_begin, area_end = _decompress(data, batches)
    first_row, total = _plan_rows(batches, area_begin, area_end)
    records = _decode(twin, data, arena, batches, area_begin, area_end, first_row, total)
    arenas = (data,) if arena is None else (data, arena)
    return _result(records, batches, arenas, end_position, at_legacy)


class HeaderWalk(NamedTuple):
    """The v2 batch headers found by :func:`walk_batch_headers`."""

    batches: dict[str, np.ndarray]  # BATCH_COLUMNS by name, one entry per complete v2 batch
    end_position: int  # the byte after the last batch walked
    stop_position: int | None  # where a header that is not a complete v2 batch stopped the walk
    # (a legacy v0/v1 entry, or garbage: the caller looks), None at a partial tail or the end


def walk_batch_headers(buf: Any, start: int = 0, end: int | None = None, *,
                       kernels: ScanKernels | None = None) -> HeaderWalk:
    """Walk the v2 batch headers of ``buf[start:end]`` without decoding records (producer state,
    the cleaner's runs between legacy entries). Never raises on content: it stops instead."""
    twin = _ACTIVE if kernels is None else kernels
    data = _as_uint8(buf)
    batches, end_position, error, where = _walk_columns(twin, data, start, _check_range(len(data), start, end))
    return HeaderWalk(batches, end_position, None if error == k.OK else where)


def _as_uint8(buf: Any) -> np.ndarray:
    """A read-only uint8 view of ``buf`` (one numba specialisation for every input type)."""
    if isinstance(buf, np.ndarray):
        if buf.dtype != np.uint8 or buf.ndim != 1 or not buf.flags.c_contiguous:
            raise TypeError(f"expected a contiguous 1-D uint8 array, got {buf.dtype} {buf.shape}")
        data = buf.view()
    else:
        data = np.frombuffer(buf, dtype=np.uint8)
    if data.flags.writeable:  # np.frombuffer of bytes is already read-only (the append path's case)
        data.flags.writeable = False
    return data


def _check_range(size: int, start: int, end: int | None) -> int:
    stop = size if end is None else end
    if not 0 <= start <= stop <= size:
        raise ValueError(f"scan range [{start}, {end}) outside the buffer of {size} bytes")
    return stop


def _walk(twin: ScanKernels, data: np.ndarray, start: int, end: int,
          stop_at_legacy: bool = False) -> tuple[dict[str, np.ndarray], int, bool]:
    """Per-batch columns (numpy, keyed by BATCH_COLUMNS names), the end position, and whether a
    v0/v1 entry stopped the walk there (only with ``stop_at_legacy``; otherwise it raises)."""
    batches, end_position, error, where = _walk_columns(twin, data, start, end)
    at_legacy = stop_at_legacy and error == k.ERR_MAGIC and int(data[where + k.HEADER_SIZE_UP_TO_MAGIC - 1]) in (0, 1)
    if error != k.OK and not at_legacy:
        raise _corrupt(data, error, where)
    return batches, end_position, at_legacy


def _walk_columns(twin: ScanKernels, data: np.ndarray, start: int,
                  end: int) -> tuple[dict[str, np.ndarray], int, int, int]:
    """The header walk both scans and header walks make: count the complete v2 batches, then fill
    their columns; ``(columns by name, end position, error code, error position)``."""
    view = twin.view(data)
    count, end_position, error, where = twin.walk_batches(view, start, end, 0, twin.columns(0, BATCH_COLUMNS))
    columns = twin.columns(count, BATCH_COLUMNS)
    again = twin.walk_batches(view, start, end_position, count, columns)
    if again != (count, end_position, k.OK, end_position):  # only if the bytes changed under us
        raise CorruptRecordError("batches changed while being walked", position=start)
    batches = {name: twin.to_numpy(col, dtype) for (name, dtype), col in zip(BATCH_COLUMNS, columns)}
    return batches, end_position, error, where


def _verify_crcs(twin: ScanKernels, data: np.ndarray, batches: dict[str, np.ndarray]) -> None:
    """Every batch's CRC-32C (one twin call) against the stored CRCs (gathered in one numpy step);
    a batch that differs is checked again by the batch view (the ``crc32c`` library), which
    raises with its full error message."""
    positions = batches["position"]
    if len(positions) == 0:
        return
    offsets = positions[:, None] + np.arange(CRC_OFFSET, CRC_OFFSET + CRC_SIZE)
    stored = data[offsets].astype(np.int64) @ np.array([1 << 24, 1 << 16, 1 << 8, 1], np.int64)
    bad = np.flatnonzero(twin.batch_crcs(data, positions, batches["size"]) != stored)
    for b in bad.tolist():
        pos, size = int(positions[b]), int(batches["size"][b])
        RecordBatch(memoryview(data)[pos:pos + size]).ensure_valid(position=pos)


def batch_crcs(buf: Any, position: np.ndarray, size: np.ndarray, *, kernels: ScanKernels | None = None) -> np.ndarray:
    """int64 CRC-32C of ``buf[position[j] + 21:position[j] + size[j]]`` for every j: the value a
    v2 batch of ``size[j]`` bytes at ``position[j]`` stores at bytes 17-20. One kernel call for
    all batches where the CPU has SSE4.2 (the cleaner's rebuilt batches, the scan's checks).
    ValueError when a range lies outside ``buf``."""
    data = _as_uint8(buf)
    position = np.asarray(position, np.int64)
    size = np.asarray(size, np.int64)
    if len(position) and (position.min() < 0 or size.min() < k.CRC_START or (position + size).max() > len(data)):
        raise ValueError(f"batch ranges outside the buffer of {len(data)} bytes")
    return (_ACTIVE if kernels is None else kernels).batch_crcs(data, position, size)


def _decompress(data: np.ndarray,
                batches: dict[str, np.ndarray]) -> tuple[np.ndarray | None, np.ndarray, np.ndarray]:
    """Decompress every compressed batch with records into one arena.

    Returns the arena (None when nothing was compressed) and each batch's records area
    ``[begin, end)``: in the input for uncompressed batches, in the arena for compressed ones.
    """
    begin = batches["position"] + RECORD_BATCH_OVERHEAD
    end = batches["position"] + batches["size"]
    codecs = batches["attributes"] & COMPRESSION_CODEC_MASK
    compressed = np.flatnonzero((codecs != 0) & (batches["records_count"] != 0))
    if len(compressed) == 0:
        return None, begin, end
    view = memoryview(data)
    parts = [_decompress_batch(view, batches, int(b), int(codecs[b])) for b in compressed]
    sizes = np.fromiter((len(p) for p in parts), np.int64, len(parts))
    begin[compressed] = np.cumsum(sizes) - sizes
    end[compressed] = begin[compressed] + sizes
    return np.frombuffer(b"".join(parts), dtype=np.uint8), begin, end


def _decompress_batch(view: memoryview, batches: dict[str, np.ndarray], b: int, codec: int) -> bytes:
    pos = int(batches["position"][b])
    payload = view[pos + RECORD_BATCH_OVERHEAD:pos + int(batches["size"][b])]
    return _decompress_payload(codec, payload, pos, int(batches["base_offset"][b]))


def _decompress_payload(codec: int, payload: memoryview, position: int, offset: int,
                        max_size: int = MAX_DECOMPRESSED_BYTES) -> bytes:
    try:
        return decompress(codec, payload, max_size=max_size)
    except (CorruptRecordError, UnsupportedCompressionError) as err:
        # An unknown codec id in bytes read back is corruption too: one error for callers to catch.
        # ``max_size`` stays in the context: a caller tells "too large" from "does not decode" by it.
        raise CorruptRecordError(err.message, position=position, offset=offset,
                                 max_size=err.context.get("max_size")) from err


def _plan_rows(batches: dict[str, np.ndarray], area_begin: np.ndarray,
               area_end: np.ndarray) -> tuple[np.ndarray, int]:
    """Each batch's first row and the total rows, after checking every recordsCount is possible."""
    counts = batches["records_count"].astype(np.int64)
    capacity = (area_end - area_begin) // k.MIN_RECORD_SIZE
    bad = np.flatnonzero((counts < 0) | (counts > capacity))
    if len(bad):
        b = int(bad[0])
        raise CorruptRecordError(
            f"batch declares {int(counts[b])} records but its records area holds "
            f"{int(area_end[b] - area_begin[b])} bytes", position=int(batches["position"][b]),
            offset=int(batches["base_offset"][b]))
    ends = np.cumsum(counts)
    return ends - counts, int(ends[-1]) if len(ends) else 0


def _decode(twin: ScanKernels, data: np.ndarray, arena: np.ndarray | None,
            batches: dict[str, np.ndarray], area_begin: np.ndarray, area_end: np.ndarray,
            first_row: np.ndarray, total: int) -> dict[str, np.ndarray]:
    """Record columns (numpy, keyed by RECORD_COLUMNS names) of every batch with records."""
    records = twin.columns(total, RECORD_COLUMNS)
    kernel_batches = tuple(twin.adopt(batches[name]) for name, _ in BATCH_COLUMNS)
    rows = twin.adopt(first_row)
    codecs = batches["attributes"] & COMPRESSION_CODEC_MASK
    has_records = batches["records_count"] != 0
    for arena_id, buf, selected in ((0, data, (codecs == 0) & has_records),
                                    (1, arena, (codecs != 0) & has_records)):
        ids = np.flatnonzero(selected)
        if buf is None or len(ids) == 0:
            continue
        error, where, j = twin.decode_batches(
            twin.view(buf), arena_id, twin.adopt(ids), twin.adopt(area_begin[ids]),
            twin.adopt(area_end[ids]), rows, kernel_batches, records)
        if error != k.OK:
            raise _corrupt_record(batches, int(ids[j]), error, where - int(area_begin[ids[j]]))
    return {name: twin.to_numpy(col, dtype) for (name, dtype), col in zip(RECORD_COLUMNS, records)}


def _result(records: dict[str, np.ndarray], batches: dict[str, np.ndarray],
            arenas: tuple[np.ndarray, ...], end_position: int, stopped_at_legacy: bool) -> ScanResult:
    per_batch = {f"batch_{name}": column for name, column in batches.items()}
    return ScanResult(**records, **per_batch, arenas=arenas, end_position=int(end_position),
                      record_count=len(records["offset"]), stopped_at_legacy=stopped_at_legacy)


def _corrupt(data: np.ndarray, error: int, position: int) -> CorruptRecordError:
    """The error for a bad batch header at ``position`` (its base offset when readable)."""
    offset = None
    if position + 8 <= len(data):
        offset = int.from_bytes(data[position:position + 8].tobytes(), "big", signed=True)
    return CorruptRecordError(_ERRORS.get(error, f"scan error {error}"), position=position,
                              offset=offset)


def _corrupt_record(batches: dict[str, np.ndarray], b: int, error: int,
                    record_position: int) -> CorruptRecordError:
    """The error for a bad record of batch ``b``; ``record_position`` is relative to its records."""
    return CorruptRecordError(_ERRORS.get(error, f"scan error {error}"),
                              position=int(batches["position"][b]),
                              offset=int(batches["base_offset"][b]),
                              record_position=record_position)


# --- validation summary of one batch ----------------------------------------------------------

class RecordsSummary(NamedTuple):
    """What append validation needs of a batch's records (see :func:`summarize_batch_records`)."""

    count: int
    min_timestamp: int  # smallest timestamp other than -1; INT64_MAX when none
    max_timestamp: int  # -1 when no record has a timestamp (or LogAppendTime)
    keyless: int
    first_keyless_index: int
    sequential_offsets: bool


def summarize_batch_records(batch: RecordBatch, position: int = 0, *, kernels: ScanKernels | None = None,
                            max_decompressed: int = MAX_DECOMPRESSED_BYTES) -> RecordsSummary:
    """Walk the records of ``batch`` (decompressing if needed) without building per-record
    columns: one kernel call of a few microseconds per produced batch.

    The batch's size and CRC must already have been checked. ``position`` is where the batch sits
    in the caller's buffer, for errors: :class:`CorruptRecordError` names it and the failing
    record's position within the records area. A compressed records area decompressing to more
    than ``max_decompressed`` bytes is refused at that byte (CorruptRecordError with ``max_size``
    in its context), having held at most that much.
    """
    twin = kernels or _ACTIVE
    attributes, base_offset = batch.attributes, batch.base_offset
    codec = attributes & COMPRESSION_CODEC_MASK
    area = batch.buffer[RECORD_BATCH_OVERHEAD:batch.size_in_bytes]
    if codec != 0:
        area = memoryview(_decompress_payload(codec, area, position, base_offset, max_decompressed))
    error, at, low, high, keyless, first_keyless, sequential = twin.summarize_records(
        twin.view(_as_uint8(area)), 0, len(area), batch.records_count, batch.base_timestamp,
        bool(attributes & k.TIMESTAMP_TYPE_MASK))
    if error != k.OK:
        raise CorruptRecordError(_ERRORS.get(error, f"scan error {error}"), position=position,
                                 offset=base_offset, record_position=at)
    return RecordsSummary(batch.records_count, low, high, keyless, first_keyless, bool(sequential))


ProducedBatchCheck = Callable[[bytes, int, bool, int, bool, int, int, int], tuple[int, int, int, int]]

PRODUCED_OK, PRODUCED_OTHER, PRODUCED_COMPRESSED = k.PRODUCED_OK, k.PRODUCED_OTHER, k.PRODUCED_COMPRESSED
PRODUCED_IDEMPOTENT = k.PRODUCED_IDEMPOTENT
CRC_IN_KERNEL_BELOW = k.CRC_IN_KERNEL_BELOW


def produced_batch_checker() -> ProducedBatchCheck:
    """The active twin's :func:`_scan_kernels.check_produced_batch`, as the leader's one-pass
    check of a produced batch (``storage.validator``) calls it, on ``bytes`` only:
    ``check(buf, size, crc_checked, max_message_bytes, compact, before_max_ms, after_max_ms,
    now)`` returns ``(status, lastOffsetDelta, maxTimestamp, recordsCount)`` (PRODUCED_OK /
    PRODUCED_IDEMPOTENT / PRODUCED_OTHER / PRODUCED_COMPRESSED); nothing raises, a failed check is just not OK.

    The compiled twin is entered through the entry point of its one specialisation (numba's
    ``overloads[signature].entry_point``: it unboxes the arguments as that signature says and
    skips the per-call type dispatch, about 0.6 us of the few microseconds a 1-record append may
    take); a numba without those internals gets the dispatcher. Resolved once, then cached.
    """
    global _PRODUCED_BATCH_CHECK
    if _PRODUCED_BATCH_CHECK is None:
        kernel = _ACTIVE.check_produced_batch  # type: ignore[attr-defined]
        if _ACTIVE.name == "numba":
            kernel = entry_point(kernel, ("bytes", "int64", "boolean", "int64", "boolean", "int64", "int64", "int64"))
        _PRODUCED_BATCH_CHECK = kernel
    return _PRODUCED_BATCH_CHECK


_PRODUCED_BATCH_CHECK: ProducedBatchCheck | None = None

def entry_point(dispatcher: Any, type_names: tuple[str, ...]) -> Any:
    """The compiled entry point of ``dispatcher`` for arguments of ``type_names`` ("bytes",
    "int64[]" for a C-contiguous int64 array, or a numba scalar type name), compiled (or loaded
    from the cache) now; the dispatcher itself when this numba does not expose it. Thread-safe."""
    import numba

    special = {"bytes": numba.typeof(b""), "int64[]": numba.types.Array(numba.int64, 1, "C")}
    signature = tuple(special[name] if name in special else getattr(numba, name) for name in type_names)
    try:
        dispatcher.compile(signature)
        return dispatcher.overloads[signature].entry_point
    except (AttributeError, KeyError, TypeError):
        return dispatcher


# --- reading bytes back ---------------------------------------------------------------------

def gather(result: ScanResult, field: Literal["key", "value"]) -> list[bytes | None]:
    """Every record's key or value as ``bytes`` (None when null), in row order. One slice per row."""
    positions = getattr(result, f"{field}_pos").tolist()
    lengths = getattr(result, f"{field}_len").tolist()
    views = [memoryview(a) for a in result.arenas]
    arenas = result.arena.tolist()
    return [None if n < 0 else bytes(views[a][p:p + n])
            for a, p, n in zip(arenas, positions, lengths)]


def gather_keys(result: ScanResult) -> list[bytes | None]:
    """Every record's key (None for a null key), in row order."""
    return gather(result, "key")


def gather_values(result: ScanResult) -> list[bytes | None]:
    """Every record's value (None for a tombstone), in row order."""
    return gather(result, "value")


def gather_array(result: ScanResult, field: Literal["key", "value"]) -> np.ndarray:
    """Keys or values as a numpy object array of ``bytes``/None (for pandas/Spark rows and tests)."""
    values = gather(result, field)
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


def record_headers(result: ScanResult, row: int) -> list[tuple[str, bytes | None]]:
    """The headers of record ``row`` as ``(key, value)`` pairs, in order (decoded on demand).

    The scan checked their framing. Keys decode as :meth:`RecordBatch.records` decodes them
    (UTF-8 with ``surrogateescape``, so any bytes round-trip through the builder).
    """
    view = memoryview(result.arenas[int(result.arena[row])])
    pos = int(result.headers_pos[row])
    headers = []
    for _ in range(int(result.headers_count[row])):
        key_len, pos = k.read_varint(view, pos, len(view), k.VARINT)
        key = bytes(view[pos:pos + key_len]).decode("utf-8", "surrogateescape")
        value_len, pos = k.read_varint(view, pos + key_len, len(view), k.VARINT)
        headers.append((key, None if value_len < 0 else bytes(view[pos:pos + value_len])))
        pos += max(value_len, 0)
    return headers


