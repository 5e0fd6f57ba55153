# mypy: disable-error-code="no-untyped-def"
"""Kernel of ``tidelog produce``: JSON lines scanned into record columns.

Private to :mod:`tidelog.cli.record_io`, the only caller. As in :mod:`tidelog.records._scan_kernels`,
every function is written in the subset of Python numba compiles (ints, indexing, loops; no
objects, no exceptions), so one source serves both twins: compiled with numba, or interpreted on
memoryviews and lists. Failures are return values, never exceptions.

**JSON fast path** (:func:`scan_json_lines`). Lines of the common shape are decoded here; the
first line that is not is left to orjson (the caller parses it and every later line of the chunk
the slow way), so the kernel only has to be right about what it accepts. It accepts one object
per line with JSON whitespace other than newlines anywhere between tokens and these fields, each at most once, in
any order::

    "key", "value"            string or null        decoded to UTF-8 bytes
    "timestamp", "partition"  integer or null       0 <= n < 10**18; partition < num_partitions
    "topic", "timestampType"  string or null        ignored (tidelog consume's output)
    "offset"                  integer or null       ignored
    "headers"                 null, {} or []        no headers

Field names must be plain (no escapes). Strings: raw bytes must be valid UTF-8 (no overlongs,
no surrogates, at most U+10FFFF) and not control characters; escapes ``\\" \\\\ \\/ \\b \\f \\n
\\r \\t \\uXXXX`` (a high surrogate escape must be followed by a low one) are decoded. Anything
else (floats, negative numbers, true/false, non-empty headers, blank lines, other fields,
invalid JSON) stops the kernel at that line.

Records are encoded by :mod:`tidelog.records.encode` (kernels in
:mod:`tidelog.records._encode_kernels`), which the Spark sink shares.
"""

from __future__ import annotations

NUMBA_OPTIONS = {"nogil": True}
# Inlined into their callers by numba (the JSON grammar's small steps, whose calls would dominate
# a scan; inlining lengthens the one-time compilation); the other helpers are compiled as separate
# functions.
NUMBA_INLINED = ("skip_ws", "line_end", "parse_null", "parse_uint", "parse_uint_or_null", "parse_field_name",
                 "field_id", "parse_string_or_null")
NUMBA_HELPERS = ("hex_value", "parse_hex4", "put_code_point", "utf8_sequence_length", "parse_escape", "parse_string",
                 "parse_empty_container", "scan_line")
NUMBA_KERNELS = ("scan_json_lines",)

FAIL = -1
MAX_DIGITS = 18  # 10**18 - 1 < 2**63: no overflow in either twin
NO_VALUE = -1

# field ids of the JSON fast path
F_KEY, F_VALUE, F_TIMESTAMP, F_PARTITION, F_TOPIC, F_TIMESTAMP_TYPE, F_OFFSET, F_HEADERS = range(8)


# --- JSON fast path ------------------------------------------------------------------------

def skip_ws(buf, pos, end):
    """Skip JSON whitespace other than ``\\n``, which ends a line here."""
    while pos < end:
        c = buf[pos]
        if c != 0x20 and c != 0x09 and c != 0x0D:
            break
        pos += 1
    return pos


def hex_value(c):
    if 0x30 <= c <= 0x39:
        return c - 0x30
    if 0x61 <= c <= 0x66:
        return c - 0x61 + 10
    if 0x41 <= c <= 0x46:
        return c - 0x41 + 10
    return -1


def parse_hex4(buf, pos, end):
    """The 4 hex digits at ``pos`` as an int, or -1."""
    if pos + 4 > end:
        return -1
    value = 0
    for k in range(4):
        digit = hex_value(buf[pos + k])
        if digit < 0:
            return -1
        value = value * 16 + digit
    return value


def put_code_point(out, o, cp):
    if cp < 0x80:
        out[o] = cp
        return o + 1
    if cp < 0x800:
        out[o] = 0xC0 | (cp >> 6)
        out[o + 1] = 0x80 | (cp & 0x3F)
        return o + 2
    if cp < 0x10000:
        out[o] = 0xE0 | (cp >> 12)
        out[o + 1] = 0x80 | ((cp >> 6) & 0x3F)
        out[o + 2] = 0x80 | (cp & 0x3F)
        return o + 3
    out[o] = 0xF0 | (cp >> 18)
    out[o + 1] = 0x80 | ((cp >> 12) & 0x3F)
    out[o + 2] = 0x80 | ((cp >> 6) & 0x3F)
    out[o + 3] = 0x80 | (cp & 0x3F)
    return o + 4


def utf8_sequence_length(buf, pos, end):
    """Bytes of the valid UTF-8 sequence starting with the non-ASCII byte at ``pos``, or -1."""
    c = buf[pos]
    if 0xC2 <= c <= 0xDF:
        length, low, high = 2, 0x80, 0xBF
    elif c == 0xE0:
        length, low, high = 3, 0xA0, 0xBF
    elif c == 0xED:
        length, low, high = 3, 0x80, 0x9F
    elif 0xE1 <= c <= 0xEF:
        length, low, high = 3, 0x80, 0xBF
    elif c == 0xF0:
        length, low, high = 4, 0x90, 0xBF
    elif 0xF1 <= c <= 0xF3:
        length, low, high = 4, 0x80, 0xBF
    elif c == 0xF4:
        length, low, high = 4, 0x80, 0x8F
    else:
        return -1
    if pos + length > end or not low <= buf[pos + 1] <= high:
        return -1
    for k in range(2, length):
        if not 0x80 <= buf[pos + k] <= 0xBF:
            return -1
    return length


def parse_escape(buf, pos, end, out, o):
    """The escape whose backslash is at ``pos``: ``(position after it, output position)``; pos -1 on failure."""
    if pos + 1 >= end:
        return -1, o
    c = buf[pos + 1]
    simple = -1
    if c == 0x22 or c == 0x5C or c == 0x2F:
        simple = c
    elif c == 0x62:
        simple = 0x08
    elif c == 0x66:
        simple = 0x0C
    elif c == 0x6E:
        simple = 0x0A
    elif c == 0x72:
        simple = 0x0D
    elif c == 0x74:
        simple = 0x09
    if simple >= 0:
        out[o] = simple
        return pos + 2, o + 1
    if c != 0x75:
        return -1, o
    cp = parse_hex4(buf, pos + 2, end)
    pos += 6
    if cp < 0 or 0xDC00 <= cp <= 0xDFFF:
        return -1, o
    if 0xD800 <= cp <= 0xDBFF:
        if pos + 1 >= end or buf[pos] != 0x5C or buf[pos + 1] != 0x75:
            return -1, o
        low = parse_hex4(buf, pos + 2, end)
        if not 0xDC00 <= low <= 0xDFFF:
            return -1, o
        cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00)
        pos += 6
    return pos, put_code_point(out, o, cp)


def parse_string(buf, pos, end, out, o):
    """The string whose opening quote is at ``pos``, decoded into ``out`` at ``o``:
    ``(position after the closing quote, output end)``; position -1 on failure."""
    pos += 1
    while pos < end:
        c = buf[pos]
        if 0x20 <= c < 0x80 and c != 0x22 and c != 0x5C:  # the common case first
            out[o] = c
            pos += 1
            o += 1
        elif c == 0x22:
            return pos + 1, o
        elif c == 0x5C:
            pos, o = parse_escape(buf, pos, end, out, o)
            if pos < 0:
                return -1, o
        elif c < 0x20:
            return -1, o
        else:
            length = utf8_sequence_length(buf, pos, end)
            if length < 0:
                return -1, o
            for k in range(length):
                out[o + k] = buf[pos + k]
            pos += length
            o += length
    return -1, o


def parse_uint(buf, pos, end):
    """A non-negative JSON integer below 10**18 at ``pos``: ``(position after it, value)``; -1 on failure."""
    start = pos
    value = 0
    while pos < end and 0x30 <= buf[pos] <= 0x39:
        value = value * 10 + (buf[pos] - 0x30)
        pos += 1
    digits = pos - start
    if digits == 0 or digits > MAX_DIGITS or (digits > 1 and buf[start] == 0x30):
        return -1, 0
    if pos < end and (buf[pos] == 0x2E or buf[pos] == 0x65 or buf[pos] == 0x45):
        return -1, 0  # a fraction or exponent: a float
    return pos, value


def parse_null(buf, pos, end):
    if pos + 4 <= end and buf[pos] == 0x6E and buf[pos + 1] == 0x75 and buf[pos + 2] == 0x6C and buf[pos + 3] == 0x6C:
        return pos + 4
    return -1


def parse_empty_container(buf, pos, end):
    """``null``, ``{}`` or ``[]`` (whitespace inside allowed): the position after it, or -1."""
    c = buf[pos]
    if c == 0x6E:
        return parse_null(buf, pos, end)
    if c != 0x7B and c != 0x5B:
        return -1
    close = c + 2  # '{' + 2 = '}', '[' + 2 = ']'
    pos = skip_ws(buf, pos + 1, end)
    if pos < end and buf[pos] == close:
        return pos + 1
    return -1


def field_id(buf, start, length):
    """The id of the plain field name ``buf[start:start + length]``, or -1."""
    c = buf[start]
    if length == 3 and c == 0x6B and buf[start + 1] == 0x65 and buf[start + 2] == 0x79:
        return F_KEY
    names_match = True
    if length == 5 and c == 0x76:
        expected = (0x76, 0x61, 0x6C, 0x75, 0x65)  # value
        for k in range(5):
            names_match = names_match and buf[start + k] == expected[k]
        return F_VALUE if names_match else -1
    if length == 5 and c == 0x74:
        expected = (0x74, 0x6F, 0x70, 0x69, 0x63)  # topic
        for k in range(5):
            names_match = names_match and buf[start + k] == expected[k]
        return F_TOPIC if names_match else -1
    if length == 6 and c == 0x6F:
        expected6 = (0x6F, 0x66, 0x66, 0x73, 0x65, 0x74)  # offset
        for k in range(6):
            names_match = names_match and buf[start + k] == expected6[k]
        return F_OFFSET if names_match else -1
    if length == 7 and c == 0x68:
        expected7 = (0x68, 0x65, 0x61, 0x64, 0x65, 0x72, 0x73)  # headers
        for k in range(7):
            names_match = names_match and buf[start + k] == expected7[k]
        return F_HEADERS if names_match else -1
    if length == 9 and c == 0x74:
        expected9 = (0x74, 0x69, 0x6D, 0x65, 0x73, 0x74, 0x61, 0x6D, 0x70)  # timestamp
        for k in range(9):
            names_match = names_match and buf[start + k] == expected9[k]
        return F_TIMESTAMP if names_match else -1
    if length == 9 and c == 0x70:
        expected9 = (0x70, 0x61, 0x72, 0x74, 0x69, 0x74, 0x69, 0x6F, 0x6E)  # partition
        for k in range(9):
            names_match = names_match and buf[start + k] == expected9[k]
        return F_PARTITION if names_match else -1
    if length == 13 and c == 0x74:
        expected13 = (0x74, 0x69, 0x6D, 0x65, 0x73, 0x74, 0x61, 0x6D, 0x70, 0x54, 0x79, 0x70, 0x65)  # timestampType
        for k in range(13):
            names_match = names_match and buf[start + k] == expected13[k]
        return F_TIMESTAMP_TYPE if names_match else -1
    return -1


def parse_field_name(buf, pos, end):
    """A plain field name (no escapes) at ``pos`` (a quote): ``(position after it, field id)``; -1 on failure."""
    start = pos + 1
    pos = start
    while pos < end and buf[pos] != 0x22:
        if buf[pos] == 0x5C or buf[pos] < 0x20:
            return -1, -1
        pos += 1
    if pos >= end or pos == start:
        return -1, -1
    return pos + 1, field_id(buf, start, pos - start)


def parse_string_or_null(buf, pos, end, out, o):
    """``(position after, output end, length or -1 for null)``; position -1 on failure."""
    if buf[pos] == 0x22:
        after, o_end = parse_string(buf, pos, end, out, o)
        return after, o_end, o_end - o
    return parse_null(buf, pos, end), o, NO_VALUE


def parse_uint_or_null(buf, pos, end):
    """``(position after, value or -1 for null)``; position -1 on failure."""
    if buf[pos] == 0x6E:
        return parse_null(buf, pos, end), NO_VALUE
    return parse_uint(buf, pos, end)


def line_end(buf, pos, end):
    """After a value: trailing whitespace, then the end of the line. The start of the next line,
    or -1 when something else follows."""
    pos = skip_ws(buf, pos, end)
    if pos == end:
        return end
    return pos + 1 if buf[pos] == 0x0A else -1


def scan_line(buf, pos, end, num_partitions, key_out, ko, val_out, vo, fields):
    """One JSON object on the line starting at ``pos``. ``fields`` gets [key length, value
    length, timestamp, partition] (-1 = null/absent). Returns ``(start of the next line or -1,
    key output end, value output end)``."""
    # Long on purpose: one object's grammar, token by token.
    for k in range(4):
        fields[k] = NO_VALUE
    seen = 0
    pos = skip_ws(buf, pos, end)
    if pos >= end or buf[pos] != 0x7B:
        return -1, ko, vo
    pos = skip_ws(buf, pos + 1, end)
    if pos < end and buf[pos] == 0x7D:
        return line_end(buf, pos + 1, end), ko, vo
    while True:
        if pos >= end or buf[pos] != 0x22:
            return -1, ko, vo
        pos, fid = parse_field_name(buf, pos, end)
        if pos < 0 or fid < 0 or (seen >> fid) & 1:
            return -1, ko, vo
        seen |= 1 << fid
        pos = skip_ws(buf, pos, end)
        if pos >= end or buf[pos] != 0x3A:
            return -1, ko, vo
        pos = skip_ws(buf, pos + 1, end)
        if pos >= end:
            return -1, ko, vo
        if fid == F_KEY:
            pos, ko, length = parse_string_or_null(buf, pos, end, key_out, ko)
            fields[0] = length
        elif fid == F_VALUE:
            pos, vo, length = parse_string_or_null(buf, pos, end, val_out, vo)
            fields[1] = length
        elif fid == F_TOPIC or fid == F_TIMESTAMP_TYPE:
            pos, _, _ = parse_string_or_null(buf, pos, end, val_out, vo)  # decoded into scratch, not kept
        elif fid == F_HEADERS:
            pos = parse_empty_container(buf, pos, end)
        else:
            pos, number = parse_uint_or_null(buf, pos, end)
            if fid == F_TIMESTAMP:
                fields[2] = number
            elif fid == F_PARTITION:
                if number >= num_partitions:
                    return -1, ko, vo
                fields[3] = number
        if pos < 0:
            return -1, ko, vo
        pos = skip_ws(buf, pos, end)
        if pos < end and buf[pos] == 0x2C:
            pos = skip_ws(buf, pos + 1, end)
        elif pos < end and buf[pos] == 0x7D:
            return line_end(buf, pos + 1, end), ko, vo
        else:
            return -1, ko, vo


def scan_json_lines(buf, end, num_partitions, key_out, key_len, val_out, val_len, timestamps, partitions,
                    fields, state):
    """Scan the ``\\n``-separated lines of ``buf[:end]`` into the record columns, stopping at the
    first line the fast path does not take. ``state`` gets [lines taken, byte position of the
    first line not taken (``end`` when all were), key bytes, value bytes]. Returns lines taken."""
    pos = 0
    ko = 0
    vo = 0
    line = 0
    while pos < end:
        next_line, new_ko, new_vo = scan_line(buf, pos, end, num_partitions, key_out, ko, val_out, vo, fields)
        if next_line < 0:
            break
        key_len[line] = fields[0]
        val_len[line] = fields[1]
        timestamps[line] = fields[2]
        partitions[line] = fields[3]
        ko = new_ko
        vo = new_vo
        line += 1
        pos = next_line
    state[0] = line
    state[1] = pos
    state[2] = ko
    state[3] = vo
    return line
