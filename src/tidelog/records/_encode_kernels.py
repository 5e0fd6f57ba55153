# mypy: disable-error-code="no-untyped-def"
"""Encoding kernels: records written back to back in the v2 layout, and header sections.

Private to :mod:`tidelog.records.encode`, the only module that compiles or runs them. As in
:mod:`tidelog.records._scan_kernels`, every function is written in the subset of Python numba
compiles (ints, indexing, loops; no objects, no exceptions), so one source serves both twins:
compiled with numba, or interpreted on memoryviews, a bytearray and lists.

**Records** (:func:`encode_records`): the v2 record layout of :mod:`tidelog.records.record`,
``attributes`` 0. Keys, values and header sections come packed back to back in three buffers,
each record's entry taking ``max(length, 0)`` bytes (a negative length is a null key or value;
a header length of 0 means no headers and is written as the count byte 0). Zig-zag values stay
below 2**63 because callers keep timestamp deltas below 2**62.

**Header sections** (:func:`encode_header_sections`): for each record with ``count > 0``
headers, the section Kafka writes after the value::

    headersCount      varint   count
    headerKeyLength   varint   >= 0 (callers reject null header keys before)
    headerKey         bytes
    headerValueLength varint   -1 for a null value
    headerValue       bytes

Header keys and values come packed back to back like record keys and values, in record order.
"""

from __future__ import annotations

NUMBA_OPTIONS = {"nogil": True}
NUMBA_HELPERS = ("zigzag", "varint_size", "put_varint", "put_bytes")
NUMBA_KERNELS = ("encode_records", "encode_header_sections")


def zigzag(n):
    """Zig-zag of ``n`` with |n| < 2**62 (no 64-bit wrap needed)."""
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


def put_bytes(out, pos, src, start, length):
    """``length`` bytes of ``src`` at ``start`` (null when negative) after their length varint."""
    pos = put_varint(out, pos, zigzag(length))
    if length > 0:
        out[pos:pos + length] = src[start:start + length]
        pos += length
    return pos


def encode_records(key_buf, key_len, val_buf, val_len, hdr_buf, hdr_len, offset_delta, ts_delta, order, n,
                   key_pos, val_pos, hdr_pos, out, ends):
    """Write records ``order[0], order[1], ...`` back to back into ``out``; ``ends[j]`` = the
    byte after the j-th written record. ``*_pos`` are scratch columns (where each record's key,
    value and headers start in their buffers). Returns the bytes written."""
    kp = 0
    vp = 0
    hp = 0
    for i in range(n):
        key_pos[i] = kp
        val_pos[i] = vp
        hdr_pos[i] = hp
        kp += max(key_len[i], 0)
        vp += max(val_len[i], 0)
        hp += hdr_len[i]
    pos = 0
    for j in range(n):
        i = order[j]
        kl = key_len[i]
        vl = val_len[i]
        hl = hdr_len[i]
        tsd = zigzag(ts_delta[i])
        od = zigzag(offset_delta[i])
        body = (1 + varint_size(tsd) + varint_size(od) + varint_size(zigzag(kl)) + max(kl, 0)
                + varint_size(zigzag(vl)) + max(vl, 0) + max(hl, 1))
        pos = put_varint(out, pos, body * 2)
        out[pos] = 0
        pos = put_varint(out, pos + 1, tsd)
        pos = put_varint(out, pos, od)
        pos = put_bytes(out, pos, key_buf, key_pos[i], kl)
        pos = put_bytes(out, pos, val_buf, val_pos[i], vl)
        if hl == 0:
            out[pos] = 0
            pos += 1
        else:
            out[pos:pos + hl] = hdr_buf[hdr_pos[i]:hdr_pos[i] + hl]
            pos += hl
        ends[j] = pos
    return pos


def encode_header_sections(counts, n, key_buf, key_len, val_buf, val_len, out, lengths):
    """The header section of each of ``n`` records back to back into ``out``: record ``i`` has
    ``counts[i]`` headers (the next ones in ``key_len``/``val_len``); ``lengths[i]`` = its
    section's size (0 when it has no headers: nothing is written). Returns the bytes written."""
    pos = 0
    h = 0
    kp = 0
    vp = 0
    for i in range(n):
        c = counts[i]
        if c <= 0:
            lengths[i] = 0
            continue
        start = pos
        pos = put_varint(out, pos, zigzag(c))
        for _ in range(c):
            kl = key_len[h]
            vl = val_len[h]
            pos = put_bytes(out, pos, key_buf, kp, kl)
            pos = put_bytes(out, pos, val_buf, vp, vl)
            kp += max(kl, 0)
            vp += max(vl, 0)
            h += 1
        lengths[i] = pos - start
    return pos
