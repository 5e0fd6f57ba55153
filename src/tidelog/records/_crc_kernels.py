# mypy: disable-error-code="no-untyped-def"
"""CRC-32C kernels: the table-driven CRC of a byte range (``crc32c_of``, for the small produced
batches whose crc32c library call costs more than computing it here) and the CRC of many whole
batches at once (``batch_crcs``), written against ``crc32c_u8``/``crc32c_u64``, the steps of
SSE4.2's crc32 instruction. Bytes only.

Like :mod:`tidelog.records._scan_kernels` (whose rules it keeps: numba's subset, no exceptions,
no allocation), ONE source for both twins: :mod:`tidelog.records.scan_twins` compiles
``batch_crcs`` with the crc32 instruction in place of ``crc32c_u8``/``crc32c_u64`` where the CPU
has it (:mod:`tidelog.records._crc_intrinsics`); the scan kernels' ``check_produced_batch`` and the
storage append kernel inline ``crc32c_of`` / ``crc_finish``. Their numba caches are keyed by this
file's content too (``twins.compile_functions``' ``dependencies``).
"""

from __future__ import annotations

import numpy as np

from tidelog.records.layout import CRC_START

# The CRC kernel is compiled separately, and only where the CPU has SSE4.2's crc32 instruction:
# scan_twins then replaces crc32c_u8 / crc32c_u64 by that instruction (numba intrinsics) and compiles
# these two functions against them; elsewhere the interpreted functions below are the spec.
NUMBA_CRC_INLINED = ("read_le64", "crc_finish")
NUMBA_CRC_COMPILED = ("batch_crcs",)

_CASTAGNOLI = 0x82F63B78  # CRC-32C polynomial, reflected


def _crc32c_tables():
    """Slicing-by-8 tables of CRC-32C (8 x 256 ints; interpreted once, at import)."""
    first = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ (_CASTAGNOLI if c & 1 else 0)
        first.append(c)
    tables = [first]
    for _ in range(7):
        tables.append([(prev >> 8) ^ first[prev & 0xFF] for prev in tables[-1]])
    return np.array(tables, dtype=np.int64)


CRC32C_TABLES = _crc32c_tables()


def crc32c_of(buf, pos, end):
    """CRC-32C of ``buf[pos:end]`` (slicing-by-8: ~0.6 ns a byte compiled; for the small batches
    whose crc32c call would cost more than computing it here)."""
    t = CRC32C_TABLES
    crc = 0xFFFFFFFF
    while pos + 8 <= end:
        low = crc ^ (buf[pos] | (buf[pos + 1] << 8) | (buf[pos + 2] << 16) | (buf[pos + 3] << 24))
        crc = (t[7, low & 0xFF] ^ t[6, (low >> 8) & 0xFF] ^ t[5, (low >> 16) & 0xFF] ^ t[4, low >> 24]
               ^ t[3, buf[pos + 4]] ^ t[2, buf[pos + 5]] ^ t[1, buf[pos + 6]] ^ t[0, buf[pos + 7]])
        pos += 8
    while pos < end:
        crc = t[0, (crc ^ buf[pos]) & 0xFF] ^ (crc >> 8)
        pos += 1
    return crc ^ 0xFFFFFFFF


# --- CRC-32C of whole batches -----------------------------------------------------------------

INDEX_MASK = (1 << 62) - 1  # see read_le64


CRC32C_TABLE = tuple(int(c) for c in CRC32C_TABLES[0])  # the byte-at-a-time table (a tuple: numba global)


def crc32c_u8(crc, byte):
    """One byte into a running CRC-32C (no pre/post inversion): what SSE4.2's ``crc32b`` does."""
    return CRC32C_TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)


def crc32c_u64(crc, word):
    """Eight bytes (``word``'s, least significant first) into a running CRC-32C: ``crc32q``."""
    for i in range(8):
        crc = crc32c_u8(crc, (word >> (8 * i)) & 0xFF)
    return crc


def read_le64(buf, pos):
    """The 8 bytes at ``pos`` as a little-endian integer (int64 bits compiled).

    ``pos`` is masked to 62 bits (a no-op on real positions) so that the compiler knows every
    index is non-negative: numba then drops its negative-index wraparound and LLVM merges the
    eight byte loads into one.
    """
    at = pos & INDEX_MASK
    value = 0
    for i in range(7, -1, -1):
        value = (value << 8) | buf[at + i]
    return value


def crc_finish(buf, crc, pos, end):
    """CRC-32C of ``buf[pos:end]`` continued from ``crc`` (already inverted), 8 bytes at a time,
    then inverted: the stored value."""
    while pos + 8 <= end:
        crc = crc32c_u64(crc, read_le64(buf, pos))
        pos += 8
    while pos < end:
        crc = crc32c_u8(crc, buf[pos & INDEX_MASK])
        pos += 1
    return crc ^ 0xFFFFFFFF


def batch_crcs(buf, position, size, out):
    """``out[j]`` = CRC-32C of ``buf[position[j] + 21:position[j] + size[j]]`` (each batch's
    stored-CRC range; the caller checked the bounds).

    Three batches at a time, interleaved over the words all three have: each crc32 step waits
    on the previous one of its batch (3 cycles), so three independent chains run 3x faster than
    one; the rest of each batch, and the last one or two batches, go alone.
    """
    n = len(position)
    j = 0
    while j + 3 <= n:
        p0 = position[j] + CRC_START
        p1 = position[j + 1] + CRC_START
        p2 = position[j + 2] + CRC_START
        e0 = position[j] + size[j]
        e1 = position[j + 1] + size[j + 1]
        e2 = position[j + 2] + size[j + 2]
        c0 = 0xFFFFFFFF
        c1 = 0xFFFFFFFF
        c2 = 0xFFFFFFFF
        for _ in range(min(e0 - p0, e1 - p1, e2 - p2) // 8):
            c0 = crc32c_u64(c0, read_le64(buf, p0))
            c1 = crc32c_u64(c1, read_le64(buf, p1))
            c2 = crc32c_u64(c2, read_le64(buf, p2))
            p0 += 8
            p1 += 8
            p2 += 8
        out[j] = crc_finish(buf, c0, p0, e0)
        out[j + 1] = crc_finish(buf, c1, p1, e1)
        out[j + 2] = crc_finish(buf, c2, p2, e2)
        j += 3
    while j < n:
        out[j] = crc_finish(buf, 0xFFFFFFFF, position[j] + CRC_START, position[j] + size[j])
        j += 1
