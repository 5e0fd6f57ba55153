# mypy: disable-error-code="no-untyped-def"
"""Rebuild kernel: the records area of every rebuilt batch of a chunk, written in one call.

Private to :mod:`tidelog.cleaner.retain`, the only caller. As in
:mod:`tidelog.records._scan_kernels`, every function is in the subset of Python numba compiles, so
one source serves both twins: compiled with numba, or interpreted on memoryviews, a bytearray
and lists. Failures are return values, never exceptions.

A kept record is re-encoded exactly as Kafka's ``DefaultRecord.writeTo`` (and our
``encode_record``) writes it, from the columns of the scan that decoded it (v2 record layout in
:mod:`tidelog.records.record`)::

    length          varint   recomputed
    attributes      int8     0 (whatever the original held)
    timestampDelta  varlong  record timestamp - the rebuilt batch's baseTimestamp (the only
                             field whose value changes)
    offsetDelta     varint   record offset - baseOffset (baseOffset is kept: same value)
    keyLength, key, valueLength, value      copied; lengths re-encoded (-1 for null)
    headersCount, headers   copied field by field, every varint re-encoded canonically
                            (null header values as -1)

So the output is byte-identical to what ``BatchBuilder`` writes for the same records, even when
the input held non-minimal varints. Timestamp deltas are encoded here only when
``|delta| < 2**62`` (zig-zag then fits int64 in both twins); a batch with a larger delta (a delete
horizon near Long.MAX and ordinary record times) is flagged and rebuilt by the caller in Python.
Record bytes were validated by the scan: reads are not bounds-checked again, writes are.
"""

from __future__ import annotations

NUMBA_OPTIONS = {"nogil": True}
NUMBA_INLINED = ("zigzag", "varint_size", "put_varint", "read_varint", "delta_fits", "write_record")
NUMBA_COMPILED = ("headers_size", "put_headers", "write_records")

DELTA_LIMIT = 1 << 62
OK = 0
ERR_OUTPUT_FULL = 1  # the caller's capacity bound was wrong: never expected
MAX_RECORD_GROWTH = 35  # length 5 + attributes 1 + timestampDelta 9 + offsetDelta 5 + 3 lengths 5 each


def zigzag(n):
    """Zig-zag of ``n`` with |n| < 2**62 (no 64-bit wrap in either twin)."""
    return n * 2 if n >= 0 else -n * 2 - 1


def varint_size(raw):
    size = 1
    while raw >= 0x80:
        raw >>= 7
        size += 1
    return size


def put_varint(out, pos, raw):
    while raw >= 0x80:
        out[pos] = (raw & 0x7F) | 0x80
        raw >>= 7
        pos += 1
    out[pos] = raw
    return pos + 1


def read_varint(buf, pos):
    """A zig-zag varint the scan already validated: ``(value, next pos)``. As the scan's reader,
    the 5th byte contributes its low 4 bits only, so both agree on any bytes."""
    raw = 0
    for i in range(5):
        b = buf[pos]
        pos += 1
        if i == 4:
            raw |= (b & 0x0F) << 28
            break
        raw |= (b & 0x7F) << (7 * i)
        if b < 0x80:
            break
    return (raw >> 1) ^ -(raw & 1), pos


def delta_fits(ts, base):
    """True when |ts - base| < 2**62, decided without a subtraction that could overflow int64."""
    if (ts >= 0) == (base >= 0):
        d = ts - base
        return -DELTA_LIMIT < d < DELTA_LIMIT
    if ts >= 0:
        return ts < DELTA_LIMIT + base
    return ts > base - DELTA_LIMIT


def headers_size(buf, pos, count):
    """Bytes of ``count`` headers from ``pos`` once re-encoded (without their count varint)."""
    size = 0
    for _ in range(count):
        key_len, pos = read_varint(buf, pos)
        size += varint_size(zigzag(key_len)) + key_len
        pos += key_len
        value_len, pos = read_varint(buf, pos)
        if value_len < 0:
            size += 1
        else:
            size += varint_size(zigzag(value_len)) + value_len
            pos += value_len
    return size


def put_headers(out, o, buf, pos, count):
    """Write ``count`` headers read from ``buf[pos:]`` at ``out[o:]``; returns the next ``o``."""
    for _ in range(count):
        key_len, pos = read_varint(buf, pos)
        o = put_varint(out, o, zigzag(key_len))
        out[o:o + key_len] = buf[pos:pos + key_len]
        o += key_len
        pos += key_len
        value_len, pos = read_varint(buf, pos)
        if value_len < 0:
            out[o] = 1
            o += 1
        else:
            o = put_varint(out, o, zigzag(value_len))
            out[o:o + value_len] = buf[pos:pos + value_len]
            o += value_len
            pos += value_len
    return o


def write_record(out, o, cap, src, ts_delta, offset_delta, key_pos, key_len, value_pos, value_len,
                 headers_pos, headers_count):
    """One record at ``out[o:]``; returns the next ``o``, or -1 when it would pass ``cap``."""
    tsd = zigzag(ts_delta)
    od = zigzag(offset_delta)
    key_bytes = key_len if key_len > 0 else 0
    value_bytes = value_len if value_len > 0 else 0
    headers = 1
    if headers_count > 0:
        headers = varint_size(zigzag(headers_count)) + headers_size(src, headers_pos, headers_count)
    body = (1 + varint_size(tsd) + varint_size(od) + varint_size(zigzag(key_len)) + key_bytes
            + varint_size(zigzag(value_len)) + value_bytes + headers)
    if o + 5 + body > cap:
        return -1
    o = put_varint(out, o, body * 2)
    out[o] = 0
    o = put_varint(out, o + 1, tsd)
    o = put_varint(out, o, od)
    o = put_varint(out, o, zigzag(key_len))
    if key_bytes:
        out[o:o + key_bytes] = src[key_pos:key_pos + key_bytes]
        o += key_bytes
    o = put_varint(out, o, zigzag(value_len))
    if value_bytes:
        out[o:o + value_bytes] = src[value_pos:value_pos + value_bytes]
        o += value_bytes
    if headers_count > 0:
        o = put_varint(out, o, zigzag(headers_count))
        return put_headers(out, o, src, headers_pos, headers_count)
    out[o] = 0
    return o + 1


def write_records(arena0, arena1, rows, row_begin, row_end, base_offset, base_timestamp, offset,
                  timestamp, key_pos, key_len, value_pos, value_len, headers_pos, headers_count,
                  arena, out, area_begin, area_end, gap):
    """The records areas of the batches j = 0, 1, ..., in ``out``, each after ``gap`` free bytes
    (room for the batch header the caller writes there).

    Batch j keeps the scan rows ``rows[row_begin[j]:row_end[j]]`` (in order), re-encoded against
    ``base_offset[j]`` / ``base_timestamp[j]``; its area is ``out[area_begin[j]:area_end[j]]``,
    or ``area_end[j] == -1`` when a timestamp delta does not fit (the caller rebuilds that batch).
    Record columns are the scan's; ``arena[r]`` says whether row r lies in ``arena0`` (the
    input) or ``arena1`` (decompressed records). Returns ``(error, bytes written)``.
    """
    cap = len(out)
    o = 0
    for j in range(len(row_begin)):
        o += gap
        start = o
        area_begin[j] = start
        base_ts = base_timestamp[j]
        base = base_offset[j]
        for i in range(row_begin[j], row_end[j]):
            r = rows[i]
            ts = timestamp[r]
            if not delta_fits(ts, base_ts):
                o = -2
                break
            src = arena0 if arena[r] == 0 else arena1
            o = write_record(out, o, cap, src, ts - base_ts, offset[r] - base, key_pos[r], key_len[r],
                             value_pos[r], value_len[r], headers_pos[r], headers_count[r])
            if o == -1:
                return ERR_OUTPUT_FULL, start
        if o == -2:
            o = start
            area_end[j] = -1
        else:
            area_end[j] = o
    return OK, o
