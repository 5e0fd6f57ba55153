"""RecordBatch v2 (magic 2) as a read-only view over bytes, the batch reader of a ``.log``, and
in-place patchers for the fields the broker rewrites.

The header layout (field offsets, sizes, formats) is declared in :mod:`tidelog.records.layout`;
this module re-exports its names.

Because baseOffset and partitionLeaderEpoch lie outside the CRC, :func:`set_base_offset`,
:func:`set_last_offset` and :func:`set_partition_leader_epoch` patch them without touching the CRC;
:func:`set_max_timestamp` changes covered bytes and rewrites the CRC.

Reading a ``.log`` (:func:`read_batch_at`, :func:`iter_batches`) follows Kafka's
``FileLogInputStream``: fewer than 17 bytes left, or a batch that runs past the end, is the end of
the data (a partial tail, not an error); a length field below 14 or a magic outside 0..2 is a
CorruptRecordError. A zero-filled tail (a preallocated file) therefore reads as "length 0 < 14",
a CorruptRecordError at the first zero byte: recovery truncates there. A v2 batch shorter than 61
bytes and a v1 message shorter than its overhead are also reported as corrupt at read time.

A :class:`RecordBatch` holds a memoryview of its bytes (no copy) and the header parsed by one
``struct.unpack_from``; every property reads that tuple. Views into an ``mmap`` keep the map
exported: drop batches before closing it.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Any

from crc32c import crc32c

from tidelog.errors import CorruptRecordError, InvalidRecordError
from tidelog.records.compression import CompressionType, decompress
from tidelog.records.layout import (
    ATTRIBUTES_OFFSET,
    BASE_OFFSET_OFFSET,
    COMPRESSION_CODEC_MASK,
    CONTROL_FLAG_MASK,
    CRC_OFFSET,
    CURRENT_MAGIC,
    DELETE_HORIZON_FLAG_MASK,
    HEADER,
    HEADER_SIZE_UP_TO_MAGIC,
    LAST_OFFSET_DELTA_OFFSET,
    LENGTH_OFFSET,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    MAX_TIMESTAMP_OFFSET,
    MIN_ENTRY_LENGTH,
    PARTITION_LEADER_EPOCH_OFFSET,
    PREFIX,
    RECORD_BATCH_OVERHEAD,
    RECORDS_OFFSET,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_FLAG_MASK,
)
from tidelog.records.legacy import RECORD_OVERHEAD_V1, LegacyBatch
from tidelog.records.varint import INT32_MAX
from tidelog.records.record import (
    Record,
    TimestampType,
    decode_records,
    make_record,
    record_tuple,
)

NO_TIMESTAMP = -1
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1

_INT64 = struct.Struct(">q")  # field codecs; where each field sits comes from the layout
_INT32 = struct.Struct(">i")
_UINT32 = struct.Struct(">I")
_INT16 = struct.Struct(">h")
_INT8 = struct.Struct(">b")

Buffer = bytes | bytearray | memoryview

RECORD_ERRORS = (CorruptRecordError, InvalidRecordError)
"""What decoding records can raise: catch both to mean "this batch does not decode"."""


def increment_sequence(sequence: int, increment: int) -> int:
    """Kafka's sequence arithmetic: ``sequence + increment`` wrapping from Int.MAX to 0."""
    if sequence > INT32_MAX - increment:
        return increment - (INT32_MAX - sequence) - 1
    return sequence + increment


class RecordBatch:
    """Read-only view over the bytes of exactly one v2 batch (no copy; header unpacked once).

    The constructor needs at least 61 bytes with magic 2 (else CorruptRecordError) and trims a
    longer buffer to the declared size. It does not check the CRC: call :meth:`is_valid` or
    :meth:`ensure_valid`. Not thread-safe to mutate the underlying buffer while reading.
    """

    __slots__ = ("_buffer", "_h")

    def __init__(self, buffer: Buffer) -> None:
        view = buffer if isinstance(buffer, memoryview) else memoryview(buffer)
        if len(view) < RECORD_BATCH_OVERHEAD:
            raise CorruptRecordError(
                f"v2 batch needs {RECORD_BATCH_OVERHEAD} header bytes, buffer holds {len(view)}")
        header = HEADER.unpack_from(view)
        if header[3] != CURRENT_MAGIC:
            raise CorruptRecordError(f"not a v2 batch: magic {header[3]}", offset=header[0])
        size = LOG_OVERHEAD + header[1]
        if RECORD_BATCH_OVERHEAD <= size < len(view):
            view = view[:size]
        self._buffer = view
        self._h = header

    def __repr__(self) -> str:
        return (f"RecordBatch(base_offset={self.base_offset}, last_offset={self.last_offset}, "
                f"count={self.records_count}, size={self.size_in_bytes}, "
                f"attributes={self.attributes:#x})")

    # --- header fields -----------------------------------------------------------------------

    @property
    def buffer(self) -> memoryview:
        """The batch bytes (a memoryview of the caller's buffer)."""
        return self._buffer

    @property
    def base_offset(self) -> int:
        return self._h[0]

    @property
    def batch_length(self) -> int:
        return self._h[1]

    @property
    def size_in_bytes(self) -> int:
        """Declared batch size: 12 + batchLength."""
        return LOG_OVERHEAD + self._h[1]

    @property
    def partition_leader_epoch(self) -> int:
        return self._h[2]

    @property
    def magic(self) -> int:
        return self._h[3]

    @property
    def crc(self) -> int:
        """The stored CRC (unsigned)."""
        return self._h[4]

    @property
    def attributes(self) -> int:
        return self._h[5]

    @property
    def compression(self) -> CompressionType:
        """The codec; UnsupportedCompressionError for ids 5-7."""
        return CompressionType.from_id(self._h[5] & COMPRESSION_CODEC_MASK)

    @property
    def timestamp_type(self) -> TimestampType:
        if self._h[5] & TIMESTAMP_TYPE_MASK:
            return TimestampType.LOG_APPEND_TIME
        return TimestampType.CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        return bool(self._h[5] & TRANSACTIONAL_FLAG_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self._h[5] & CONTROL_FLAG_MASK)

    @property
    def has_delete_horizon(self) -> bool:
        return bool(self._h[5] & DELETE_HORIZON_FLAG_MASK)

    @property
    def delete_horizon_ms(self) -> int | None:
        """baseTimestamp when attribute bit 6 is set (KIP-534), else None."""
        return self._h[7] if self._h[5] & DELETE_HORIZON_FLAG_MASK else None

    @property
    def last_offset_delta(self) -> int:
        return self._h[6]

    @property
    def base_timestamp(self) -> int:
        return self._h[7]

    @property
    def max_timestamp(self) -> int:
        return self._h[8]

    @property
    def producer_id(self) -> int:
        return self._h[9]

    @property
    def has_producer_id(self) -> bool:
        return self._h[9] > NO_PRODUCER_ID

    @property
    def producer_epoch(self) -> int:
        return self._h[10]

    @property
    def base_sequence(self) -> int:
        return self._h[11]

    @property
    def last_sequence(self) -> int:
        """baseSequence + lastOffsetDelta, wrapping at Int.MAX; -1 without a sequence."""
        if self._h[11] == NO_SEQUENCE:
            return NO_SEQUENCE
        return increment_sequence(self._h[11], self._h[6])

    @property
    def records_count(self) -> int:
        return self._h[12]

    @property
    def last_offset(self) -> int:
        return self._h[0] + self._h[6]

    @property
    def next_offset(self) -> int:
        return self._h[0] + self._h[6] + 1

    # --- validation --------------------------------------------------------------------------

    def compute_crc(self) -> int:
        """CRC-32C of bytes [21, end) of the batch, computed on a memoryview slice (no copy)."""
        return crc32c(self._buffer[ATTRIBUTES_OFFSET:LOG_OVERHEAD + self._h[1]])

    def is_valid(self) -> bool:
        """Size at least 61, all declared bytes present, and stored CRC == computed CRC."""
        return self._size_problem() is None and self.compute_crc() == self._h[4]

    def ensure_valid(self, path: Any = None, position: int | None = None) -> None:
        """Raise CorruptRecordError (path, position, offset, expected vs found) unless valid."""
        problem = self._size_problem()
        if problem is not None:
            raise CorruptRecordError(problem, path=path, position=position, offset=self._h[0])
        computed = self.compute_crc()
        if computed != self._h[4]:
            raise CorruptRecordError(
                f"Record is corrupt (stored crc = {self._h[4]}, computed crc = {computed})",
                path=path, position=position, offset=self._h[0],
                stored_crc=self._h[4], computed_crc=computed)

    def _size_problem(self) -> str | None:
        size = LOG_OVERHEAD + self._h[1]
        if size < RECORD_BATCH_OVERHEAD:
            return (f"Record batch is corrupt (the size {size} is smaller than the minimum "
                    f"allowed overhead {RECORD_BATCH_OVERHEAD})")
        if size > len(self._buffer):
            return f"Record batch is corrupt (declared size {size}, only {len(self._buffer)} bytes present)"
        return None

    # --- records -----------------------------------------------------------------------------

    def records(self) -> Iterator[Record]:
        """The records with absolute offsets and effective timestamps (decompresses first).

        Raises CorruptRecordError or InvalidRecordError (see :data:`RECORD_ERRORS`), partly when
        called (size, count, decompression) and partly while iterating (record structure).
        """
        return self._iter(make_record)  # type: ignore[arg-type]

    def record_tuples(self) -> Iterator[tuple[int, int, bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...]]]:
        """Like :meth:`records`, as ``(offset, timestamp, key, value, headers)`` tuples (faster)."""
        return self._iter(record_tuple)  # type: ignore[arg-type]

    def records_data(self) -> bytes:
        """The uncompressed records area (decompressing if needed); no count checks."""
        problem = self._size_problem()
        if problem is not None:
            raise CorruptRecordError(problem, offset=self._h[0])
        area = self._buffer[RECORDS_OFFSET:LOG_OVERHEAD + self._h[1]]
        codec = self.compression
        if codec is CompressionType.NONE:
            return bytes(area)
        return decompress(codec, area, magic=CURRENT_MAGIC)

    def _iter(self, make: Any) -> Iterator[Any]:
        h = self._h
        if h[12] < 0:
            raise InvalidRecordError(f"Found invalid record count {h[12]} in magic v2 batch", offset=h[0])
        if h[12] == 0:
            return iter(())
        log_append_time = h[8] if h[5] & TIMESTAMP_TYPE_MASK else None
        return decode_records(self.records_data(), h[12], h[0], h[7], log_append_time, make)


FileBatch = RecordBatch | LegacyBatch
"""Any batch found in a ``.log``: v2, or a v0/v1 message / compressed wrapper."""


# --- reading a log ---------------------------------------------------------------------------

def read_batch_at(buf: Buffer, position: int, end: int | None = None) -> FileBatch | None:
    """The batch starting at ``position`` of ``buf`` (bytes up to ``end`` only), or None at the end.

    None: fewer than 17 bytes remain, or the batch runs past the end (a partial tail).
    CorruptRecordError (with ``position``): length field < 14, magic not in 0..2, a v2 batch of
    fewer than 61 bytes or a v1 message shorter than its overhead. The CRC is not checked.
    """
    view = buf if isinstance(buf, memoryview) else memoryview(buf)
    limit = len(view) if end is None else min(end, len(view))
    if limit - position < HEADER_SIZE_UP_TO_MAGIC:
        return None
    _, length, _, magic = PREFIX.unpack_from(view, position)
    if length < MIN_ENTRY_LENGTH:
        raise CorruptRecordError(
            f"Record size {length} is smaller than the minimum record overhead ({MIN_ENTRY_LENGTH})",
            position=position)
    size = LOG_OVERHEAD + length
    if size > limit - position:
        return None
    return _batch_of(view[position:position + size], magic, position)


def _batch_of(view: memoryview, magic: int, position: int) -> FileBatch:
    if magic == CURRENT_MAGIC:
        if len(view) < RECORD_BATCH_OVERHEAD:
            raise CorruptRecordError(
                f"Record batch is corrupt (the size {len(view)} is smaller than the minimum "
                f"allowed overhead {RECORD_BATCH_OVERHEAD})", position=position)
        return RecordBatch(view)
    if magic not in (0, 1):
        raise CorruptRecordError(f"invalid magic {magic} (expected 0, 1 or 2)", position=position)
    if magic == 1 and len(view) < LOG_OVERHEAD + RECORD_OVERHEAD_V1:
        raise CorruptRecordError(
            f"v1 message of {len(view)} bytes is shorter than its overhead", position=position)
    try:
        return LegacyBatch(view)
    except CorruptRecordError as err:
        raise CorruptRecordError(err.message, position=position) from err


def iter_batches(buf: Buffer, position: int = 0, end: int | None = None) -> Iterator[tuple[int, FileBatch]]:
    """``(byte position, batch)`` for each complete batch from ``position``; stops at a partial tail.

    Raises like :func:`read_batch_at` when it meets a corrupt prefix. Does not check CRCs.
    """
    view = buf if isinstance(buf, memoryview) else memoryview(buf)
    while True:
        batch = read_batch_at(view, position, end)
        if batch is None:
            return
        yield position, batch
        position += batch.size_in_bytes


# --- in-place patchers -----------------------------------------------------------------------

def _check_v2(buf: Buffer, position: int) -> None:
    if len(buf) - position >= HEADER_SIZE_UP_TO_MAGIC:
        (magic,) = _INT8.unpack_from(buf, position + MAGIC_OFFSET)
        if magic != CURRENT_MAGIC:
            raise InvalidRecordError(f"only v2 batches can be patched, found magic {magic}", position=position)
    if len(buf) - position < RECORD_BATCH_OVERHEAD:
        raise CorruptRecordError("no complete v2 batch header here", position=position)


def set_base_offset(buf: bytearray | memoryview, base_offset: int, position: int = 0) -> None:
    """Write baseOffset of the v2 batch at ``position`` (outside the CRC: no CRC change)."""
    _check_v2(buf, position)
    _INT64.pack_into(buf, position + BASE_OFFSET_OFFSET, base_offset)


def set_last_offset(buf: bytearray | memoryview, last_offset: int, position: int = 0) -> None:
    """Set baseOffset so that lastOffset becomes ``last_offset`` (Kafka ``setLastOffset``)."""
    _check_v2(buf, position)
    (delta,) = _INT32.unpack_from(buf, position + LAST_OFFSET_DELTA_OFFSET)
    _INT64.pack_into(buf, position + BASE_OFFSET_OFFSET, last_offset - delta)


def set_partition_leader_epoch(buf: bytearray | memoryview, epoch: int, position: int = 0) -> None:
    """Write partitionLeaderEpoch of the v2 batch at ``position`` (outside the CRC)."""
    _check_v2(buf, position)
    _INT32.pack_into(buf, position + PARTITION_LEADER_EPOCH_OFFSET, epoch)


def set_max_timestamp(
    buf: bytearray | memoryview, timestamp_type: TimestampType, max_timestamp: int, position: int = 0
) -> None:
    """Set the timestamp type (bit 3) and maxTimestamp, then rewrite the CRC (Kafka ``setMaxTimestamp``).

    Nothing is written when both already hold these values. The attributes are rebuilt from the
    known flags (codec, transactional, control, delete horizon), as Kafka does.
    InvalidRecordError for ``NO_TIMESTAMP``.
    """
    if timestamp_type is TimestampType.NO_TIMESTAMP or timestamp_type not in (0, 1):
        raise InvalidRecordError("a v2 batch needs CreateTime or LogAppendTime", timestamp_type=timestamp_type)
    _check_v2(buf, position)
    (attributes,) = _INT16.unpack_from(buf, position + ATTRIBUTES_OFFSET)
    (current,) = _INT64.unpack_from(buf, position + MAX_TIMESTAMP_OFFSET)
    current_type = 1 if attributes & TIMESTAMP_TYPE_MASK else 0
    if current_type == timestamp_type and current == max_timestamp:
        return
    kept = attributes & (COMPRESSION_CODEC_MASK | TRANSACTIONAL_FLAG_MASK
                         | CONTROL_FLAG_MASK | DELETE_HORIZON_FLAG_MASK)
    if timestamp_type == TimestampType.LOG_APPEND_TIME:
        kept |= TIMESTAMP_TYPE_MASK
    _INT16.pack_into(buf, position + ATTRIBUTES_OFFSET, kept)
    _INT64.pack_into(buf, position + MAX_TIMESTAMP_OFFSET, max_timestamp)
    _write_crc(buf, position)


def _write_crc(buf: bytearray | memoryview, position: int) -> None:
    (length,) = _INT32.unpack_from(buf, position + LENGTH_OFFSET)
    end = position + LOG_OVERHEAD + length
    if end > len(buf):
        raise CorruptRecordError(f"batch declares {LOG_OVERHEAD + length} bytes past the buffer", position=position)
    crc = crc32c(memoryview(buf)[position + ATTRIBUTES_OFFSET:end])
    _UINT32.pack_into(buf, position + CRC_OFFSET, crc)


def stored_crc_matches(batch: bytes | bytearray | memoryview) -> bool:
    """Whether the CRC stored in the v2 batch that is all of ``batch`` (at least 21 bytes; no
    other check) matches its bytes from the attributes on."""
    return crc32c(memoryview(batch)[ATTRIBUTES_OFFSET:]) == _UINT32.unpack_from(batch, CRC_OFFSET)[0]


def write_crc(buf: bytearray | memoryview, position: int = 0) -> None:
    """Recompute and store the CRC of the v2 batch at ``position`` (after editing covered bytes)."""
    _check_v2(buf, position)
    _write_crc(buf, position)
