# mypy: disable-error-code="no-untyped-def"
"""Scan kernels: RecordBatch v2 headers and records decoded into flat columns, and the leader's
one-pass check of a produced batch (``check_produced_batch``, with a CRC-32C of its own for small
batches, whose crc32c library call costs more than computing it here). Bytes only: the append
that writes a checked batch into a segment is storage's (``storage/_append_kernel.py``).

Private to :mod:`tidelog.records.scan`, and to the storage append kernel that compiles
``check_produced_batch`` and the CRC steps with the file side of an append. Every function here is written
in the subset of Python that numba compiles (ints, tuples, indexing, loops; no objects, no
exceptions) so that ONE source serves both twins: ``scan.py`` compiles these functions with
``numba.njit(cache=True, ...)`` using the NUMBA_* options below, or runs them as they are,
interpreted, when numba is absent or ``TIDELOG_PURE_PYTHON=1``. Interpreted, ``buf`` is a ``memoryview`` of bytes and the output
columns are Python lists; compiled, they are numpy arrays. Both index to plain ints.

Rules the code keeps so that both twins give identical, crash-free results on any bytes:
every read is bounds-checked against an explicit ``end`` before it happens; no arithmetic
overflows int64 (sums that could are checked first and reported as errors); no value written to a
column exceeds that column's dtype; failures are returned as ``(error code, byte position)``, never
raised. Nothing here checks CRCs (callers run crc32c over whole batches, far faster).

The RecordBatch v2 header (kafka-storage.md §1.3) is :mod:`tidelog.records.layout`'s: every field
offset here is one of its module-level ints, which numba freezes into the compiled code as constants.
Only magic 2 is scanned (0 and 1 are legacy formats).

Record v2 (kafka-storage.md §1.4; varints are zig-zag LEB128, at most 5 bytes, varlongs 10)::

    length          varint   bytes that follow this field
    attributes      int8     unused
    timestampDelta  varlong  timestamp - baseTimestamp
    offsetDelta     varint   offset - baseOffset
    keyLength       varint   negative = null key
    key             bytes
    valueLength     varint   negative = null value (a tombstone)
    value           bytes
    headersCount    varint   >= 0
    headers         headersCount x (keyLength varint >= 0, key, valueLength varint, value)

Column tuples, in order (``scan.py`` names and allocates them):

    batch columns   position i8, size i4, base_offset i8, last_offset i8, attributes i2,
                    base_timestamp i8, max_timestamp i8, producer_id i8, producer_epoch i2,
                    records_count i4
    record columns  offset i8, timestamp i8, key_pos i8, key_len i4, value_pos i8, value_len i4,
                    headers_pos i8, headers_count i4, arena i2, batch i4
"""

from __future__ import annotations

from tidelog.records._crc_kernels import INDEX_MASK, crc32c_of
from tidelog.records.layout import (
    ATTRIBUTES_OFFSET,
    BASE_TIMESTAMP_OFFSET,
    COMPRESSION_CODEC_MASK,
    CONTROL_FLAG_MASK,
    CRC_OFFSET,
    CRC_SIZE,
    CRC_START,
    HEADER_SIZE_UP_TO_MAGIC,
    LAST_OFFSET_DELTA_OFFSET,
    LENGTH_OFFSET,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    MAX_TIMESTAMP_OFFSET,
    MIN_BATCH_LENGTH,
    PRODUCER_EPOCH_OFFSET,
    PRODUCER_ID_OFFSET,
    RECORD_BATCH_OVERHEAD,
    RECORDS_COUNT_OFFSET,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_FLAG_MASK,
)
from tidelog.records.layout import CURRENT_MAGIC as MAGIC_V2
from tidelog.records.layout import MIN_ENTRY_LENGTH as LEGACY_MIN_LENGTH  # shorter: corrupt whatever the magic

# --- layout ---------------------------------------------------------------------------------

MIN_RECORD_SIZE = 7  # length, attributes, timestampDelta, offsetDelta, keyLength, valueLength, headers
# attributes a produced batch takes the general path for: LogAppendTime, transactional, control
_NOT_CREATE_TIME_DATA = TIMESTAMP_TYPE_MASK | TRANSACTIONAL_FLAG_MASK | CONTROL_FLAG_MASK

INT64_MAX = 9223372036854775807
INT64_MIN = -INT64_MAX - 1
INT32_MAX = 2147483647
INT32_MIN = -INT32_MAX - 1

# --- error codes (scan.py turns them into CorruptRecordError messages) -----------------------

OK = 0
ERR_VARINT_TOO_LONG = 1  # a varint's 5th (varlong's 10th) byte still has its continuation bit
ERR_RECORD_TRUNCATED = 2  # the records area ends inside a record
ERR_RECORDS_MISSING = 3  # the records area ends before recordsCount records were read
ERR_TRAILING_BYTES = 4  # bytes left in the records area after recordsCount records
ERR_RECORD_LENGTH = 5  # a record's fields do not end exactly at its declared length
ERR_KEY_OVERRUN = 6  # keyLength runs past the end of the record
ERR_VALUE_OVERRUN = 7  # valueLength runs past the end of the record
ERR_HEADER_COUNT = 8  # negative headersCount
ERR_HEADER_OVERRUN = 9  # a header key or value runs past the record, or a header key is null
ERR_BATCH_LENGTH = 10  # batchLength below 49 (v2) or 14 (any magic)
ERR_MAGIC = 11  # magic other than 2
ERR_OFFSET_OVERFLOW = 12  # baseOffset + a delta does not fit in int64
ERR_TIMESTAMP_OVERFLOW = 13  # baseTimestamp + timestampDelta does not fit in int64

_TRUNCATED = -1  # read_varint position results that mean "failed"
_TOO_LONG = -2
VARINT = 5  # max_size argument of read_varint: an int32 varint takes at most 5 bytes
VARLONG = 10  # an int64 varlong at most 10


# --- how scan.py compiles these functions with numba ----------------------------------------
# Kept here because numba's on-disk cache is keyed by THIS file's content (and by the content of
# the modules scan_twins names as its dependencies: _crc_kernels.py, layout.py).
# No reference counting (``_nrt``): nothing here allocates, and the incref/decref numba otherwise
# wraps around every helper call taking an array cost 3x in the per-record loop. The per-record
# helpers are inlined at numba-IR level (a call between compiled functions costs as much again);
# the rest stay separate functions, which keeps the cold compile to a few seconds.
NUMBA_OPTIONS = {"nogil": True, "_nrt": False}
NUMBA_INLINED = ("read_int", "read_varint", "add_overflows", "varint_error", "check_batch",
                 "decode_record", "record_failure", "decode_records", "crc32c_of", "difference_exceeds",
                 "read_le16", "short_varint", "plain_fields")
NUMBA_COMPILED = ("read_varint_slow", "skip_headers", "walk_batches", "decode_batches", "summarize_records",
                  "walk_records", "check_produced_batch")
# The CRC-32C kernels are records/_crc_kernels.py's. The leader's append kernel
# (storage/_append_kernel.py) compiles check_produced_batch with the file side of an append.


# --- primitives -----------------------------------------------------------------------------

def read_int(buf, pos, size):
    """Big-endian two's-complement integer of ``size`` bytes at ``pos`` (caller checked bounds)."""
    first = buf[pos]
    value = first - ((first & 0x80) << 1)  # sign-extend the first byte
    for i in range(1, size):
        value = (value << 8) | buf[pos + i]
    return value


def read_varint(buf, pos, end, max_size):
    """Zig-zag varint (``max_size`` VARINT) or varlong (VARLONG) at ``pos``: ``(value, next pos)``.

    The next position is negative on failure (_TRUNCATED, _TOO_LONG). This is the inlined fast
    path for the 1- and 2-byte values that make up nearly every record; longer ones, and reads
    near ``end``, take read_varint_slow.
    """
    if pos < end:
        b = buf[pos]
        if b < 0x80:
            return (b >> 1) ^ -(b & 1), pos + 1
        if pos + 1 < end:
            raw = (b & 0x7F) | (buf[pos + 1] << 7)
            if raw < 0x4000:
                return (raw >> 1) ^ -(raw & 1), pos + 2
    return read_varint_slow(buf, pos, end, max_size)


def read_varint_slow(buf, pos, end, max_size):
    """As Kafka's ByteUtils.readVarint/readVarlong: at most 5 (10) bytes, bits past 32 (64) dropped.

    The last byte contributes only the bits that fit (4 of a varint's, 1 of a varlong's), so the raw
    value has the same bits compiled (int64, wrapping) and interpreted (unbounded int), and the
    logical shift below keeps the results equal.
    """
    raw = 0
    last = max_size - 1
    for i in range(max_size):
        if pos >= end:
            return 0, _TRUNCATED
        b = buf[pos]
        pos += 1
        if i == last:
            if b & 0x80:
                return 0, _TOO_LONG
            raw |= (b & (0x0F if max_size == VARINT else 0x01)) << (7 * last)
        else:
            raw |= (b & 0x7F) << (7 * i)
            if b < 0x80:
                break
    return ((raw >> 1) & INT64_MAX) ^ -(raw & 1), pos


def add_overflows(a, b):
    """True when ``a + b`` does not fit in int64 (checked without computing it)."""
    if b > 0:
        return a > INT64_MAX - b
    return a < INT64_MIN - b


def varint_error(pos, truncated_code):
    """Error code for a failed varint read: too long, or ``truncated_code``."""
    if pos == _TOO_LONG:
        return ERR_VARINT_TOO_LONG
    return truncated_code


# --- batch headers --------------------------------------------------------------------------

def check_batch(buf, pos, end):
    """Classify the batch at ``pos``: ``(error code, batch size)``; size 0 = stop (partial tail).

    As Kafka's FileLogInputStream: fewer than 17 bytes left, or a batch running past ``end``, is
    the end of the data (not an error); a length below 14 is corrupt whatever the magic.
    """
    if end - pos < HEADER_SIZE_UP_TO_MAGIC:
        return OK, 0
    length = read_int(buf, pos + LENGTH_OFFSET, 4)
    if length < LEGACY_MIN_LENGTH:
        return ERR_BATCH_LENGTH, 0
    if length > end - pos - LOG_OVERHEAD:
        return OK, 0
    if buf[pos + MAGIC_OFFSET] != MAGIC_V2:
        return ERR_MAGIC, 0
    if length < MIN_BATCH_LENGTH:
        return ERR_BATCH_LENGTH, 0
    return OK, LOG_OVERHEAD + length


def walk_batches(buf, start, end, limit, batches):
    """Walk every complete v2 batch in ``buf[start:end]``; fill batch columns for the first ``limit``.

    Returns ``(batch count, end position, error code, error position)``. With ``limit`` 0 it only
    counts (the driver sizes the columns from that count, then walks again to fill them). The end
    position is the byte after the last complete batch; the error position is the bad batch's.
    """
    (position, size, base_offset, last_offset, attributes, base_timestamp, max_timestamp,
     producer_id, producer_epoch, records_count) = batches
    pos = start
    n = 0
    while True:
        error, batch_size = check_batch(buf, pos, end)
        if error != OK:
            return n, pos, error, pos
        if batch_size == 0:
            return n, pos, OK, pos
        base = read_int(buf, pos, 8)
        delta = read_int(buf, pos + LAST_OFFSET_DELTA_OFFSET, 4)
        if add_overflows(base, delta):
            return n, pos, ERR_OFFSET_OVERFLOW, pos
        if n < limit:
            position[n] = pos
            size[n] = batch_size
            base_offset[n] = base
            last_offset[n] = base + delta
            attributes[n] = read_int(buf, pos + ATTRIBUTES_OFFSET, 2)
            base_timestamp[n] = read_int(buf, pos + BASE_TIMESTAMP_OFFSET, 8)
            max_timestamp[n] = read_int(buf, pos + MAX_TIMESTAMP_OFFSET, 8)
            producer_id[n] = read_int(buf, pos + PRODUCER_ID_OFFSET, 8)
            producer_epoch[n] = read_int(buf, pos + PRODUCER_EPOCH_OFFSET, 2)
            records_count[n] = read_int(buf, pos + RECORDS_COUNT_OFFSET, 4)
        n += 1
        pos += batch_size


# --- records --------------------------------------------------------------------------------

def decode_record(buf, pos, end):
    """Parse the record at ``pos`` in a records area ending at ``end``.

    Long because a record is nine fields read in sequence, each one bounds-checked.
    Returns ``(error, record end, timestampDelta, offsetDelta, key position, key length,
    value position, value length, headers position, headers count)``; lengths are -1 for null.
    """
    length, body = read_varint(buf, pos, end, VARINT)
    if body < 0:
        return record_failure(varint_error(body, ERR_RECORD_TRUNCATED))
    if length < 1 or length > end - body:
        return record_failure(ERR_RECORD_TRUNCATED if length > 0 else ERR_RECORD_LENGTH)
    stop = body + length
    ts_delta, p = read_varint(buf, body + 1, stop, VARLONG)  # body + 1: skip the attributes byte
    off_delta, p = read_varint(buf, p, stop, VARINT) if p >= 0 else (0, p)
    key_len, p = read_varint(buf, p, stop, VARINT) if p >= 0 else (0, p)
    if p < 0:
        return record_failure(varint_error(p, ERR_RECORD_LENGTH))
    key_pos = p
    key_len = key_len if key_len >= 0 else -1
    if key_len > stop - p:
        return record_failure(ERR_KEY_OVERRUN)
    value_len, p = read_varint(buf, p + key_len if key_len > 0 else p, stop, VARINT)
    if p < 0:
        return record_failure(varint_error(p, ERR_RECORD_LENGTH))
    value_pos = p
    value_len = value_len if value_len >= 0 else -1
    if value_len > stop - p:
        return record_failure(ERR_VALUE_OVERRUN)
    count, p = read_varint(buf, p + value_len if value_len > 0 else p, stop, VARINT)
    if p < 0:
        return record_failure(varint_error(p, ERR_RECORD_LENGTH))
    if count < 0:
        return record_failure(ERR_HEADER_COUNT)
    error, headers_end = skip_headers(buf, p, stop, count) if count > 0 else (OK, p)
    if error == OK and headers_end != stop:
        error = ERR_RECORD_LENGTH
    return (error, stop, ts_delta, off_delta, key_pos, key_len, value_pos, value_len, p, count)


def record_failure(error):
    """decode_record's result for a failure: the error code, then zeros."""
    return error, 0, 0, 0, 0, 0, 0, 0, 0, 0


def skip_headers(buf, pos, end, count):
    """Step over ``count`` headers from ``pos``: ``(error, position after them)``."""
    for _ in range(count):
        key_len, pos = read_varint(buf, pos, end, VARINT)
        if pos < 0:
            return varint_error(pos, ERR_HEADER_OVERRUN), 0
        if key_len < 0 or key_len > end - pos:
            return ERR_HEADER_OVERRUN, 0
        value_len, pos = read_varint(buf, pos + key_len, end, VARINT)
        if pos < 0:
            return varint_error(pos, ERR_HEADER_OVERRUN), 0
        if value_len > end - pos:
            return ERR_HEADER_OVERRUN, 0
        if value_len > 0:
            pos += value_len
    return OK, pos


def decode_records(buf, pos, end, count, batch, arena, row, batches, records):
    """Decode the ``count`` records of batch ``batch`` found in ``buf[pos:end]`` into rows from ``row``.

    Returns ``(error code, position of the failing record)``; ``(0, end)`` on success. Offsets are
    baseOffset + offsetDelta; timestamps are the batch maxTimestamp for LogAppendTime batches,
    else baseTimestamp + timestampDelta (also when baseTimestamp holds a delete horizon).
    """
    base_offset = batches[2][batch]
    offsets_may_overflow = (add_overflows(base_offset, INT32_MAX)
                            or add_overflows(base_offset, INT32_MIN))
    log_append_time = (batches[4][batch] & TIMESTAMP_TYPE_MASK) != 0
    base_timestamp = batches[5][batch]
    max_timestamp = batches[6][batch]
    (offset, timestamp, key_pos, key_len, value_pos, value_len, headers_pos, headers_count,
     arenas, batch_index) = records
    for i in range(count):
        if pos >= end:
            return ERR_RECORDS_MISSING, pos
        (error, stop, ts_delta, off_delta, k_pos, k_len, v_pos, v_len, h_pos,
         h_count) = decode_record(buf, pos, end)
        if error != OK:
            return error, pos
        if offsets_may_overflow and add_overflows(base_offset, off_delta):
            return ERR_OFFSET_OVERFLOW, pos
        if not log_append_time and add_overflows(base_timestamp, ts_delta):
            return ERR_TIMESTAMP_OVERFLOW, pos
        r = row + i
        offset[r] = base_offset + off_delta
        timestamp[r] = max_timestamp if log_append_time else base_timestamp + ts_delta
        key_pos[r] = k_pos
        key_len[r] = k_len
        value_pos[r] = v_pos
        value_len[r] = v_len
        headers_pos[r] = h_pos
        headers_count[r] = h_count
        arenas[r] = arena
        batch_index[r] = batch
        pos = stop
    if pos != end:
        return ERR_TRAILING_BYTES, pos
    return OK, pos


def decode_batches(buf, arena, batch_ids, area_begin, area_end, first_row, batches, records):
    """Decode the records of every batch listed in ``batch_ids`` in one call.

    ``area_begin[j]``/``area_end[j]`` bound the records area of batch ``batch_ids[j]`` in ``buf``
    (the input for uncompressed batches, the decompressed arena for compressed ones);
    ``first_row[b]`` is batch b's first row. Returns ``(error code, error position, j)``, with
    ``j`` the failing entry of ``batch_ids`` (-1 when all decoded).
    """
    records_count = batches[9]
    for j in range(len(batch_ids)):
        b = batch_ids[j]
        error, pos = decode_records(buf, area_begin[j], area_end[j], records_count[b], b, arena,
                                    first_row[b], batches, records)
        if error != OK:
            return error, pos, j
    return OK, 0, -1


# --- validation summary -----------------------------------------------------------------------

def summarize_records(buf, pos, end, count, base_timestamp, log_append_time):
    """What append validation needs of one batch's ``count`` records in ``buf[pos:end]``, with no
    output columns (one call per produced batch must cost microseconds, not an allocation).

    Returns ``(error, error position, min timestamp other than -1 (INT64_MAX if none), max
    timestamp (-1 if none), keyless records, index of the first keyless record (-1), 1 if every
    offsetDelta equals the record's index else 0)``. Timestamps are not computed for LogAppendTime
    batches (the broker's time replaces them).
    """
    min_stamped = INT64_MAX
    max_timestamp = -1
    keyless = 0
    first_keyless = -1
    sequential = 1
    for i in range(count):
        if pos >= end:
            return ERR_RECORDS_MISSING, pos, 0, 0, 0, 0, 0
        (error, stop, ts_delta, off_delta, k_pos, k_len, v_pos, v_len, h_pos,
         h_count) = decode_record(buf, pos, end)
        if error != OK:
            return error, pos, 0, 0, 0, 0, 0
        if not log_append_time:
            if add_overflows(base_timestamp, ts_delta):
                return ERR_TIMESTAMP_OVERFLOW, pos, 0, 0, 0, 0, 0
            timestamp = base_timestamp + ts_delta
            if timestamp != -1 and timestamp < min_stamped:
                min_stamped = timestamp
            if timestamp > max_timestamp:
                max_timestamp = timestamp
        if k_len < 0:
            keyless += 1
            if first_keyless < 0:
                first_keyless = i
        if off_delta != i:
            sequential = 0
        pos = stop
    if pos != end:
        return ERR_TRAILING_BYTES, pos, 0, 0, 0, 0, 0
    return OK, pos, min_stamped, max_timestamp, keyless, first_keyless, sequential


# --- the produced batch's record walk ----------------------------------------------------------
# check_produced_batch walks every record of a 1000-record batch: that walk is a fifth of a large
# append. Produced records nearly all have one shape (varints of 1 or 2 bytes up to the value), and
# successive records often have the same length; walk_records reads that shape with few
# instructions, and for a record whose first two bytes equal the previous decoded record's it
# takes the known size instead of decoding the length again, so the next record's position does
# not wait on this record's bytes (the CPU then overlaps several records). A batch with any other
# record, and any doubt about the result, goes to summarize_records: the specification.

def read_le16(buf, pos):
    """The 2 bytes at ``pos`` as a little-endian integer (``pos`` masked as in read_le64; ``* 256``,
    not ``<< 8``: numba types a shifted byte as uint64, which would make the result a float where
    it meets an int64)."""
    at = pos & INDEX_MASK
    return buf[at] | (buf[at + 1] * 256)


def short_varint(buf, pos):
    """A zig-zag varint (or varlong) of 1 or 2 bytes at ``pos``, both bytes known to be readable:
    ``(value, next pos)``; the position is -1 for a longer one."""
    at = pos & INDEX_MASK
    b = buf[at]
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), at + 1
    c = buf[at + 1]
    if c < 0x80:
        raw = (b & 0x7F) | (c << 7)
        return (raw >> 1) ^ -(raw & 1), at + 2
    return 0, -1


def plain_fields(buf, body, stop):
    """``(timestampDelta, keyLength or -1, True)`` of the record body ``[body, stop)``, at least
    MIN_PLAIN_LENGTH bytes long, when it has the common shape: varints of 1 or 2 bytes up to the
    value, then no headers (or headers decode_record reads alike), fields ending exactly at
    ``stop``; else ``(..., False)``. What it accepts, decode_record accepts with the same values
    (each read stays below ``stop``)."""
    ts_delta, p = short_varint(buf, body + 1)  # body + 1: the attributes byte; then at most 6 bytes
    if p < 0:
        return 0, 0, False
    _, p = short_varint(buf, p)  # offsetDelta: its value is not checked for uncompressed batches
    if p < 0:
        return 0, 0, False
    key_len, p = short_varint(buf, p)
    if p < 0:
        return 0, 0, False
    if key_len > 0:
        p += key_len
    elif key_len < 0:
        key_len = -1
    if p > stop - 2:  # room for valueLength and headersCount at least (also: the key fits)
        return 0, 0, False
    value_len, p = short_varint(buf, p)
    if p < 0:
        return 0, 0, False
    if value_len > 0:
        p += value_len
    if p == stop - 1 and buf[p & INDEX_MASK] == 0:  # headersCount 0, the record's last byte
        return ts_delta, key_len, True
    if p >= stop:
        return 0, 0, False
    count, p = read_varint(buf, p, stop, VARINT)  # headers: as decode_record reads them
    if p < 0 or count < 0:
        return 0, 0, False
    error, headers_end = skip_headers(buf, p, stop, count)
    return ts_delta, key_len, error == OK and headers_end == stop


MIN_PLAIN_LENGTH = 7  # attributes, timestampDelta and offsetDelta and keyLength of up to 2 bytes


def walk_records(buf, pos, end, count):
    """The ``count`` records in ``buf[pos:end]``, for check_produced_batch: ``(ok, smallest
    timestampDelta, largest, keyless records)``. ``ok`` is True only when every record has the
    common shape (plain_fields) and they fill the area exactly; False says nothing more (another
    shape, or an error): the caller then asks summarize_records, which decodes any record.
    """
    low = INT64_MAX
    high = INT64_MIN
    keyless = 0
    seen = -1  # the first two bytes of the last record whose length was decoded (-1: none yet)
    seen_body = 0  # that record's length-field size, and its whole size
    seen_size = 0
    for _ in range(count):
        if pos + 1 >= end:
            return False, 0, 0, 0
        head = read_le16(buf, pos)
        if head == seen:  # the same length field: its size, without waiting on this load
            if seen_size > end - pos:
                return False, 0, 0, 0
            body = pos + seen_body
            stop = pos + seen_size
        else:
            length, body = short_varint(buf, pos)
            if body < 0 or length < MIN_PLAIN_LENGTH or length > end - body:
                return False, 0, 0, 0
            stop = body + length
            seen = head
            seen_body = body - pos
            seen_size = stop - pos
        ts_delta, key_len, plain = plain_fields(buf, body, stop)
        if not plain:
            return False, 0, 0, 0
        low = min(low, ts_delta)
        high = max(high, ts_delta)
        if key_len < 0:
            keyless += 1
        pos = stop
    return pos == end, low, high, keyless


# --- the leader's one-pass check of a produced batch --------------------------------------------

PRODUCED_OTHER = 0  # not the common case, or a check failed: the caller's general path decides
PRODUCED_OK = 1  # the common case, and every check passed
PRODUCED_COMPRESSED = 2  # a compressed batch: the caller checks it (decompression is not done here)
PRODUCED_IDEMPOTENT = 4  # every check passed, and the batch has a producer id: producer state decides
CRC_IN_KERNEL_BELOW = 4096  # bytes: a larger batch's CRC is the caller's (hardware crc32c, ~20 GB/s)


def difference_exceeds(a, b, limit):
    """``a - b > limit`` for int64 values, exactly as with unbounded ints (no wrap-around)."""
    if b < 0 and a > INT64_MAX + b:
        return True  # a - b is above INT64_MAX, so above any int64 limit
    if b > 0 and a < INT64_MIN + b:
        return False  # a - b is below INT64_MIN
    return a - b > limit


def check_produced_batch(buf, size, crc_checked, max_message_bytes, compact, before_max_ms,
                         after_max_ms, now):
    """The leader's check of ``buf[0:size]`` as an uncompressed produced batch (the rules are
    ``storage.validator.validate_produced_batch``'s, which calls this for ``bytes``): one v2
    batch, base offset 0, at most ``max_message_bytes``, CreateTime, neither control nor
    transactional, recordsCount = lastOffsetDelta + 1 > 0, CRC (unless ``crc_checked``: the caller checks it),
    records that decode, maxTimestamp = the largest record timestamp, keys on ``compact`` topics,
    timestamps within ``before_max_ms``/``after_max_ms`` of ``now`` (INT64_MAX: unbounded).

    Returns ``(status, lastOffsetDelta, maxTimestamp, recordsCount)``: PRODUCED_OK when every
    check passed, PRODUCED_IDEMPOTENT when they passed and the batch has a producer id (the
    caller checks its sequence against producer state before writing); PRODUCED_COMPRESSED as
    soon as the codec says compressed; else PRODUCED_OTHER (zeros), whatever failed: the
    caller's general path finds and reports it.
    """
    if size < RECORD_BATCH_OVERHEAD or size > max_message_bytes or buf[MAGIC_OFFSET] != MAGIC_V2:
        return PRODUCED_OTHER, 0, 0, 0
    if read_int(buf, 0, 8) != 0 or read_int(buf, LENGTH_OFFSET, 4) + LOG_OVERHEAD != size:
        return PRODUCED_OTHER, 0, 0, 0
    attributes = read_int(buf, ATTRIBUTES_OFFSET, 2)
    if attributes & COMPRESSION_CODEC_MASK:
        return PRODUCED_COMPRESSED, 0, 0, 0
    delta = read_int(buf, LAST_OFFSET_DELTA_OFFSET, 4)
    count = read_int(buf, RECORDS_COUNT_OFFSET, 4)
    if attributes & _NOT_CREATE_TIME_DATA or count <= 0 or delta + 1 != count:
        return PRODUCED_OTHER, 0, 0, 0  # LogAppendTime, transactional or control flag, bad count
    if not crc_checked and crc32c_of(buf, CRC_START, size) != (read_int(buf, CRC_OFFSET, CRC_SIZE) & 0xFFFFFFFF):
        return PRODUCED_OTHER, 0, 0, 0
    max_timestamp = read_int(buf, MAX_TIMESTAMP_OFFSET, 8)
    base_timestamp = read_int(buf, BASE_TIMESTAMP_OFFSET, 8)
    ok, low, high, keyless = walk_records(buf, RECORD_BATCH_OVERHEAD, size, count)
    # The timestamps are base + delta (summarize_records' bounds: an overflow is an error; the
    # smallest leaves out -1; the largest is at least -1). Any doubt: summarize_records decides.
    if (ok and not add_overflows(base_timestamp, low) and not add_overflows(base_timestamp, high)
            and base_timestamp + low != -1):
        low += base_timestamp
        high = max(high + base_timestamp, -1)
    else:
        error, _, low, high, keyless, _, _ = summarize_records(
            buf, RECORD_BATCH_OVERHEAD, size, count, base_timestamp, False)
        if error != OK:
            return PRODUCED_OTHER, 0, 0, 0
    if high != max_timestamp or (compact and keyless > 0):
        return PRODUCED_OTHER, 0, 0, 0
    if low != INT64_MAX and before_max_ms < INT64_MAX and difference_exceeds(now, low, before_max_ms):
        return PRODUCED_OTHER, 0, 0, 0
    if high >= 0 and after_max_ms < INT64_MAX and difference_exceeds(high, now, after_max_ms):
        return PRODUCED_OTHER, 0, 0, 0
    return PRODUCED_OK if read_int(buf, PRODUCER_ID_OFFSET, 8) < 0 else PRODUCED_IDEMPOTENT, delta, max_timestamp, count
