# mypy: disable-error-code="no-untyped-def"
"""Offset map kernels: murmur3 x64_128 of record keys, and an open-addressing table of slots.

Private to :mod:`tidelog.cleaner.offset_map`, the only caller. As ``records/_scan_kernels.py``:
every function is written in the subset of Python that numba compiles, so ONE source serves both
twins: ``offset_map.py`` compiles them with ``numba.njit(cache=True, ...)`` using the NUMBA_*
options below, or runs them as they are, interpreted. Interpreted, buffers are memoryviews of
bytes, the table a memoryview of int64 and the row columns Python lists; compiled, numpy arrays.

64-bit arithmetic the same way in both twins. murmur3 needs multiplication modulo 2**64 and
logical right shifts. Compiled, numba types the mix of int64 values and the large (uint64)
constants as int64, whose multiplication wraps modulo 2**64 like C's; interpreted, Python ints
never wrap, so every product and left shift is masked with MASK64 (a no-op compiled). Right
shifts are masked to their width (``(x >> 33) & LOW31``) so that an arithmetic shift of a
negative int64 gives the logical shift's bits. Results leave :func:`murmur3_128` through
:func:`to_int64`, so both twins return the same signed int64 pair (the table's dtype).

The table (``table``: a flat int64 array of ``3 * slots`` words; slot ``s`` is words
``3s .. 3s+2``)::

    word  field
    0     hash1       int64, low 64 bits of murmur3 x64_128 (seed 0) of the key, as signed
    1     hash2       int64, high 64 bits
    2     offset + 1  int64, the latest offset of the key plus one; 0 = empty slot (offsets are
                      >= 0, so 0 never stores one; and a zero-filled table is an empty one)

Probing: a key's home slot is ``(hash1 >>> 32) * slots >> 32`` (Lemire's multiply-shift range
reduction: no division; needs ``slots <= 2**31``), then the next slots, wrapping at the end, in
Robin Hood order (Celis 1986): an insert takes the slot of the first entry that sits nearer its
own home than the new key would, and shifts that entry on the same way. Probe runs then stay
sorted by home, so a miss stops at the first entry nearer its home than the probe is to the
key's, not at the next empty slot: at Kafka's load factor 0.9, where a linear-probing miss reads
~50 slots, this keeps lookups of absent keys (most keys of the clean part of a log, on every pass
of a map that fills) short, at a small cost on hits and inserts. Nothing is ever deleted. Keys whose 128-bit hashes are equal are the same key (as in Kafka's
map: a collision needs ~2**64 keys).

Memory-level parallelism: the row kernels hash a chunk of CHUNK keys first and read each one's
home slot in a tight loop (:func:`touch_homes`), so the cache misses of a chunk overlap instead
of stalling each probe in turn, which is what bounds the probes once the table outgrows the CPU
caches.
"""

from __future__ import annotations

# --- layout ---------------------------------------------------------------------------------

SLOT_WORDS = 3  # int64 words per slot: hash1, hash2, offset + 1
EMPTY = 0  # word 2 of an empty slot

# Results of put_key / put_rows (besides sizes and row numbers)
OK = 0
FULL = -1  # every slot is taken and the key is new
NEGATIVE_OFFSET = -2  # an offset below 0 (Kafka's offsets are >= 0; 0 in word 2 means empty)

CHUNK = 1024  # rows hashed (and their home slots touched) ahead of probing: see touch_homes

# --- murmur3 x64_128 constants (Austin Appleby's MurmurHash3_x64_128) -------------------------

MASK64 = 0xFFFFFFFFFFFFFFFF
SIGN64 = 0x8000000000000000
LOW31 = 0x7FFFFFFF
LOW32 = 0xFFFFFFFF
INDEX_MASK = (1 << 62) - 1  # see read_le
C1 = 0x87C37B91114253D5
C2 = 0x4CF5AD432745937F
FMIX1 = 0xFF51AFD7ED558CCD
FMIX2 = 0xC4CEB9FE1A85EC53
N1 = 0x52DCE729
N2 = 0x38495AB5

# --- how offset_map.py compiles these functions with numba ----------------------------------
# Kept here because numba's on-disk cache is invalidated by a change to THIS file's content only.
# No reference counting (``_nrt``): nothing here allocates (the driver passes scratch arrays of
# CHUNK rows). The hash and the probe are inlined into the per-row loops at numba-IR level; the
# entry points stay separate functions.
NUMBA_OPTIONS = {"nogil": True, "_nrt": False}
NUMBA_INLINED = ("to_int64", "rotl64", "fmix64", "read_le", "mix_k1", "mix_k2", "murmur3_128",
                 "home_slot", "distance", "find_slot", "insert", "offset_at", "hash_rows",
                 "touch_homes")
NUMBA_COMPILED = ("hash_key", "put_key", "get_key", "put_rows", "get_rows")


# --- murmur3 x64_128 ------------------------------------------------------------------------

def to_int64(x):
    """``x`` (any integer whose low 64 bits matter) as a signed int64 value; identity compiled."""
    return (x ^ SIGN64) - SIGN64


def rotl64(x, r):
    """Rotate the 64 bits of ``x`` left by ``r`` (0 < r < 64); the result's bits, unsigned interpreted."""
    return ((x << r) & MASK64) | ((x >> (64 - r)) & ((1 << r) - 1))


def fmix64(k):
    """murmur3's 64-bit finalizer."""
    k ^= (k >> 33) & LOW31
    k = (k * FMIX1) & MASK64
    k ^= (k >> 33) & LOW31
    k = (k * FMIX2) & MASK64
    k ^= (k >> 33) & LOW31
    return k


def read_le(buf, pos, size):
    """Little-endian unsigned integer of ``size`` (1..8) bytes at ``pos`` (caller checked bounds).

    ``pos`` is masked to 62 bits, a no-op on real positions, so that the compiler knows every
    index is non-negative: numba then emits no negative-index wraparound and LLVM merges the
    eight byte loads of a block into one (about half the cost of murmur3 on a short key). Slot
    indexes are masked the same way.
    """
    at = pos & INDEX_MASK
    value = 0
    for i in range(size - 1, -1, -1):
        value = (value << 8) | buf[at + i]
    return value


def mix_k1(k1):
    k1 = (k1 * C1) & MASK64
    k1 = rotl64(k1, 31)
    return (k1 * C2) & MASK64


def mix_k2(k2):
    k2 = (k2 * C2) & MASK64
    k2 = rotl64(k2, 33)
    return (k2 * C1) & MASK64


def murmur3_128(buf, pos, length):
    """MurmurHash3_x64_128 (seed 0) of ``buf[pos:pos + length]``: ``(h1, h2)`` as signed int64.

    ``h1`` is the low 64 bits of the 128-bit hash as mmh3 returns it (``hash128(key, 0, True)``),
    ``h2`` the high ones.
    """
    h1 = 0
    h2 = 0
    blocks = length // 16
    for i in range(blocks):
        p = pos + 16 * i
        h1 ^= mix_k1(read_le(buf, p, 8))
        h1 = rotl64(h1, 27)
        h1 = (h1 + h2) & MASK64
        h1 = (h1 * 5 + N1) & MASK64
        h2 ^= mix_k2(read_le(buf, p + 8, 8))
        h2 = rotl64(h2, 31)
        h2 = (h2 + h1) & MASK64
        h2 = (h2 * 5 + N2) & MASK64
    tail = pos + 16 * blocks
    rest = length & 15
    if rest > 8:
        h2 ^= mix_k2(read_le(buf, tail + 8, rest - 8))
    if rest > 0:
        h1 ^= mix_k1(read_le(buf, tail, rest if rest < 8 else 8))
    h1 ^= length
    h2 ^= length
    h1 = (h1 + h2) & MASK64
    h2 = (h2 + h1) & MASK64
    h1 = fmix64(h1)
    h2 = fmix64(h2)
    h1 = (h1 + h2) & MASK64
    h2 = (h2 + h1) & MASK64
    return to_int64(h1), to_int64(h2)


# --- the table ------------------------------------------------------------------------------

def home_slot(h1, slots):
    """First slot probed for a key whose hash starts with ``h1`` (``slots <= 2**31``)."""
    return (((h1 >> 32) & LOW32) * slots) >> 32


def distance(s, home, slots):
    """How far slot ``s`` is from ``home`` along the (wrapping) probe sequence."""
    d = s - home
    return d + slots if d < 0 else d


def find_slot(table, slots, h1, h2):
    """The slot holding hash ``(h1, h2)``; -1 when absent.

    Robin Hood order lets a miss stop early: at the first empty slot, or at the first entry
    nearer its own home than the probe is to the key's (the key would have displaced it).
    """
    home = home_slot(h1, slots)
    s = home
    for d in range(slots):
        at = (SLOT_WORDS * s) & INDEX_MASK
        if table[at + 2] == EMPTY:
            return -1
        stored = table[at]
        if stored == h1 and table[at + 1] == h2:
            return s
        if distance(s, home_slot(stored, slots), slots) < d:
            return -1
        s = s + 1 if s + 1 < slots else 0
    return -1


def insert(table, slots, h1, h2, offset):
    """Map hash ``(h1, h2)`` to ``offset``: 1 if the key was new, 0 if its offset was replaced.

    Needs an empty slot (size < slots; the callers check). Robin Hood insertion: along the probe
    sequence, the key takes the slot of the first entry nearer its own home than the key is to
    its own, and that entry moves on the same way, until an empty slot ends the shifting.
    """
    home = home_slot(h1, slots)
    value = offset + 1
    s = home
    d = 0
    placed = 0
    for _ in range(slots):
        at = (SLOT_WORDS * s) & INDEX_MASK
        current = table[at + 2]
        if current == EMPTY:
            table[at] = h1
            table[at + 1] = h2
            table[at + 2] = value
            return 1
        stored = table[at]
        if placed == 0 and stored == h1 and table[at + 1] == h2:
            table[at + 2] = value
            return 0
        stored_distance = distance(s, home_slot(stored, slots), slots)
        if stored_distance < d:
            stored2 = table[at + 1]
            table[at] = h1
            table[at + 1] = h2
            table[at + 2] = value
            h1, h2, value, d = stored, stored2, current, stored_distance
            placed = 1
        d += 1
        s = s + 1 if s + 1 < slots else 0
    return 1


def offset_at(table, s):
    """The offset slot ``s`` maps to; -1 for ``s`` -1 (absent)."""
    return table[((SLOT_WORDS * s) & INDEX_MASK) + 2] - 1 if s >= 0 else -1


def hash_key(buf, pos, length):
    """``(h1, h2)`` of one key: see :func:`murmur3_128`."""
    return murmur3_128(buf, pos, length)


def put_key(table, slots, buf, pos, length, offset, size):
    """Map the key ``buf[pos:pos + length]`` to ``offset``: the new size, or FULL / NEGATIVE_OFFSET."""
    if offset < 0:
        return NEGATIVE_OFFSET
    h1, h2 = murmur3_128(buf, pos, length)
    if size < slots:
        return size + insert(table, slots, h1, h2, offset)
    s = find_slot(table, slots, h1, h2)
    if s < 0:
        return FULL
    table[SLOT_WORDS * s + 2] = offset + 1
    return size


def get_key(table, slots, buf, pos, length):
    """The offset the key ``buf[pos:pos + length]`` maps to, -1 when absent."""
    h1, h2 = murmur3_128(buf, pos, length)
    return offset_at(table, find_slot(table, slots, h1, h2))


def hash_rows(arena0, arena1, arena, key_pos, key_len, wanted, first, stop, h1s, h2s, row_ids):
    """Hash the key of each row of ``[first, stop)`` with ``wanted[r]`` and a key (``key_len`` -1
    = null) into ``h1s``/``h2s``, its row into ``row_ids``; returns how many."""
    m = 0
    for r in range(first, stop):
        n = key_len[r]
        if n < 0 or not wanted[r]:
            continue
        buf = arena1 if arena[r] else arena0
        h1, h2 = murmur3_128(buf, key_pos[r], n)
        h1s[m] = h1
        h2s[m] = h2
        row_ids[m] = r
        m += 1
    return m


def touch_homes(table, slots, h1s, count, sink):
    """Read the home slot of ``count`` hashes, one load after another with nothing waiting on
    them, so that their cache misses overlap (the probes that follow then find their lines in
    cache). The loads' sum goes to ``sink[0]`` so that the compiler keeps them."""
    total = 0
    for i in range(count):
        total += table[((SLOT_WORDS * home_slot(h1s[i], slots)) & INDEX_MASK) + 2]
    sink[0] = total


def put_rows(table, slots, max_entries, size, arena0, arena1, arena, key_pos, key_len, offsets,
             eligible, rows, h1s, h2s, row_ids, sink):
    """Put the key of each row ``r < rows`` with ``eligible[r]`` and a key, in order, as Kafka's
    buildOffsetMap: before each such row, stop if ``size >= max_entries``.

    Keys live in ``arena0`` or ``arena1`` (``arena[r]`` 0 or 1) at ``key_pos``/``key_len`` (-1 =
    null key: never put). Rows go by chunks of ``len(h1s)``: hashed, their home slots touched,
    then put (``h1s``, ``h2s``, ``row_ids``, ``sink``: scratch). Returns ``(stop row, size, last
    offset put or -1, status)``: the stop row is ``rows`` when every row was done; status OK, FULL
    (no slot left: only if ``max_entries > slots``) or NEGATIVE_OFFSET (at the stop row).
    """
    last = -1
    chunk = len(h1s)
    for first in range(0, rows, chunk):
        count = hash_rows(arena0, arena1, arena, key_pos, key_len, eligible, first,
                          min(rows, first + chunk), h1s, h2s, row_ids)
        touch_homes(table, slots, h1s, count, sink)
        for i in range(count):
            r = row_ids[i]
            if size >= max_entries:
                return r, size, last, OK
            offset = offsets[r]
            if offset < 0:
                return r, size, last, NEGATIVE_OFFSET
            if size >= slots:
                return r, size, last, FULL
            size += insert(table, slots, h1s[i], h2s[i], offset)
            last = offset
    return rows, size, last, OK


def get_rows(table, slots, arena0, arena1, arena, key_pos, key_len, wanted, rows, out, h1s, h2s,
             row_ids, sink):
    """``out[r]`` = the offset the key of row ``r`` maps to; -1 when absent, a null key or not
    ``wanted[r]``. By chunks, as put_rows."""
    chunk = len(h1s)
    for first in range(0, rows, chunk):
        stop = min(rows, first + chunk)
        for r in range(first, stop):
            out[r] = -1
        count = hash_rows(arena0, arena1, arena, key_pos, key_len, wanted, first, stop, h1s, h2s,
                          row_ids)
        touch_homes(table, slots, h1s, count, sink)
        for i in range(count):
            out[row_ids[i]] = offset_at(table, find_slot(table, slots, h1s[i], h2s[i]))
