# mypy: disable-error-code="no-untyped-def"
"""The leader's append kernel: check a produced batch, write it at the end of the active segment's
``.log`` and keep the segment's append bookkeeping, in one call (``append_produced_batch``; for a
batch whose CRC the caller checked, ``append_crc_checked_batch``).

Storage's, not records': this is where bytes become a file. The check itself is records' (bytes
only: :func:`tidelog.records._scan_kernels.check_produced_batch`, the same function the Python
path runs through ``storage.validator``); what this module adds is the file side: the roll rules
an append can decide from integers, ONE ``pwrite`` of the batch with its offsets and leader epoch
patched in (``pwrite_patched``), the segment's size, max timestamp and index-entry spacing, and
the sparse index entries a batch is due, stored into the index files' mappings
(``append_index_entries``).

Every function is in the subset of Python numba compiles (ints, tuples, indexing; no objects, no
exceptions), so that ONE source serves both twins: :mod:`tidelog.storage.append_state` compiles
them with numba, ``pwrite_patched``, ``wall_clock_ms``, ``store_be32``/``store_be64`` and
``release_fence`` replaced by libc calls and plain stores (:mod:`tidelog.storage._write_intrinsics`);
interpreted, the definitions here are their specification and the tests run both.

The segment's append state is ``TAIL_SLOTS`` int64 slots of one array (the layout below;
:class:`tidelog.storage.append_state.AppendState` is its typed owner), read and updated by the
kernel in the call that writes, so that a 1-record append costs one compiled call and almost no
Python bookkeeping. The two index files' state sits in it too (``TAIL_OFFSET_INDEX`` /
``TAIL_TIME_INDEX`` + ``INDEX_*``), kept by :mod:`tidelog.storage.index` as its own attributes.
"""

from __future__ import annotations

import ctypes
import time

from tidelog.records._scan_kernels import (
    CRC_IN_KERNEL_BELOW,
    INT32_MAX,
    INT32_MIN,
    INT64_MIN,
    check_produced_batch,
    read_int,
)
from tidelog.records._crc_kernels import crc_finish
from tidelog.records.layout import (
    CRC_OFFSET,
    CRC_SIZE,
    CRC_START,
    LOG_OVERHEAD,
    OFFSET_INDEX_ENTRY_SIZE,
    OFFSET_INDEX_POSITION_AT,
    PATCHED_PREFIX_SIZE,
    RECORD_BATCH_OVERHEAD,
    TIME_INDEX_ENTRY_SIZE,
    TIME_INDEX_OFFSET_AT,
)
from tidelog.records.layout import PATCHED_PREFIX as _PATCHED_FIELDS
from tidelog.records import _scan_kernels as _check
from tidelog.storage import fileops

# The kernel's answers: the check's four, then its own (below).
PRODUCED_OTHER, PRODUCED_OK = _check.PRODUCED_OTHER, _check.PRODUCED_OK
PRODUCED_COMPRESSED, PRODUCED_IDEMPOTENT = _check.PRODUCED_COMPRESSED, _check.PRODUCED_IDEMPOTENT

# --- how append_state.py compiles these functions with numba ------------------------------------
# check_produced_batch is the active scan twin's compiled function (nothing is compiled twice); the
# batch's CRC uses SSE4.2's crc32 where the CPU has it, else crc32c_u8/u64 compiled as they are.
# numba's on-disk cache of these functions is keyed by this file AND by the content of
# records/_scan_kernels.py, whose check they run, and of the modules they take code and constants from
# (see append_state._compile_appenders).
NUMBA_APPEND_COMPILED = ("append_index_entries", "append_to_tail", "append_produced_batch",
                         "append_crc_checked_batch")
NUMBA_APPEND_INLINED = ("read_int", "read_le64", "crc_finish", "roll_due")  # + crc32c_u8/u64 where SSE4.2 does not replace them


PRODUCED_ROLL = 3  # append_produced_batch: every check passed, but a roll rule fires; nothing written
PRODUCED_UNARMED = 5  # append_produced_batch: the segment's tail is not armed (see TAIL_ARMED); nothing checked
PRODUCED_INDEX_DUE = 6  # append_produced_batch: written, and a sparse index entry is due for the batch (caller's)
PRODUCED_SHORT_WRITE = 7  # append_produced_batch: the write stopped at TAIL_WRITTEN bytes; the rest is the caller's
PATCHED_PREFIX = PATCHED_PREFIX_SIZE  # bytes: baseOffset, batchLength, partitionLeaderEpoch (outside the CRC)
WRITE_BUFFER_BYTES = CRC_IN_KERNEL_BELOW  # pwrite_patched copies batches up to this size
NOW_FROM_CLOCK = INT64_MIN  # append_produced_batch's ``now`` that means: read the wall clock here
_KERNEL_WRITE = "(the append kernel's descriptor)"  # the path fileops is told for the spec's writes

# The tail of a segment: int64 slots of one array (its AppendState's) that the storage layer's
# Python reads and writes as its own attributes (the file's size, the segment's max timestamp...),
# and that append_produced_batch reads and updates in the same call that writes, so that a
# 1-record append costs one compiled call and almost no Python bookkeeping.
TAIL_ARMED = 0  # 1 while the slots below hold what an append needs, and no roll rule they do not say fires
TAIL_FD = 1  # the .log's descriptor
TAIL_SIZE = 2  # bytes in the .log (FileRecords' size)
TAIL_BASE_OFFSET = 3  # the segment's base offset
TAIL_SEGMENT_BYTES = 4  # segment.bytes
TAIL_MAX_TIMESTAMP_LIMIT = 5  # segment.ms: a batch whose maxTimestamp is above this rolls the segment
TAIL_MAX_TIMESTAMP = 6  # the segment's max timestamp so far (TAIL_UNKNOWN: not loaded)
TAIL_OFFSET_OF_MAX_TIMESTAMP = 7  # its offset
TAIL_MAX_TIMESTAMP_IN_INDEX = 8  # 1 when it was read from the time index
TAIL_BYTES_SINCE_LAST_INDEX_ENTRY = 9
TAIL_INDEX_INTERVAL_BYTES = 10  # index.interval.bytes
TAIL_MAX_MESSAGE_BYTES = 11  # the topic's rules (see check_produced_batch) ...
TAIL_COMPACT = 12
TAIL_BEFORE_MAX_MS = 13
TAIL_AFTER_MAX_MS = 14  # ... up to here
TAIL_WRITTEN = 15  # after PRODUCED_SHORT_WRITE: the bytes the write wrote, -errno when it failed
TAIL_PRODUCER_CHECKED = 16  # 1: producer state let this call's idempotent batch through (the caller resets it)
# The segment's two index files' state (storage.index keeps it here, see INDEX_*): the sparse
# index entry a batch is due is written by the append itself.
TAIL_OFFSET_INDEX = 17  # slots TAIL_OFFSET_INDEX + INDEX_*: the .index's
TAIL_TIME_INDEX = 22  # slots TAIL_TIME_INDEX + INDEX_*: the .timeindex's
TAIL_SLOTS = 27
TAIL_UNKNOWN = INT64_MIN  # a slot's "None"

# An index file's state: int64 slots that storage.index keeps as its own attributes (in the
# segment's tail for the segment's two indexes), so that the append kernel can add an entry.
INDEX_MAP = 0  # the address of the file's writable mapping; 0 while there is none
INDEX_ENTRIES = 1  # entries in the file
INDEX_CAPACITY = 2  # the index is full at this many entries
INDEX_LAST_KEY = 3  # the last entry's offset (.index) or timestamp (.timeindex; -1 when empty)
INDEX_LAST_OFFSET = 4  # the .timeindex's last entry's offset (its base offset when empty)
INDEX_STATE_SLOTS = 5


def append_produced_batch(buf, tail, now, base_offset, leader_epoch):
    """The leader's common append in one call: :func:`check_produced_batch` of the whole ``buf``
    (its CRC included) against the topic's rules in ``tail``, then, when it passes and no roll
    rule fires, ONE write of the batch at the end of the segment's ``.log`` (``tail``'s fd and
    size) with its first 16 bytes (baseOffset, batchLength, partitionLeaderEpoch, all outside the
    CRC) replaced by ``base_offset``, its size - 12 and ``leader_epoch``, and the segment's
    bookkeeping in ``tail`` (size, max timestamp, bytes since the last index entry) as
    LogSegment.append does it. Batches below CRC_IN_KERNEL_BELOW bytes only (larger:
    PRODUCED_OTHER; their CRC is the caller's, then :func:`append_crc_checked_batch`).

    Only while ``tail`` is armed (TAIL_ARMED: the segment holds data, its indexes have room, its
    state is loaded; else PRODUCED_UNARMED); the roll rules left are checked here: the batch fits
    in segment.bytes, its offsets relative to the segment's base in an int32, its maxTimestamp at
    most TAIL_MAX_TIMESTAMP_LIMIT (segment.ms). Returns ``(status, lastOffsetDelta, maxTimestamp)``:
    PRODUCED_OK, the batch written and the tail updated, with the sparse index entries it was due
    (:func:`append_index_entries`); PRODUCED_INDEX_DUE, the same but those entries, which the
    kernel could not add (at the batch's position: the new size less its own; the caller adds
    them); PRODUCED_SHORT_WRITE, the write stopped at TAIL_WRITTEN bytes (``-errno``
    when it failed), the tail otherwise unchanged: the caller finishes the write and the
    bookkeeping. (A status and these two values, not more: each boxed value costs the common
    case; and not fewer: the two read back from tail slots cost as much as they are to box.)
    PRODUCED_IDEMPOTENT: every check passed but the batch has a producer id, and nothing is written
    unless TAIL_PRODUCER_CHECKED is 1 (the caller asked producer state with the lastOffsetDelta
    returned, then calls again with that slot set; it resets it). PRODUCED_ROLL, PRODUCED_OTHER,
    PRODUCED_COMPRESSED, PRODUCED_UNARMED: nothing written. ``now`` NOW_FROM_CLOCK: the broker time
    is the system clock's, read here (a Python clock call costs a tenth of an append). (Each
    argument costs ~25 ns to pass: the kernel takes none it can find in ``tail``.)
    """
    if tail[TAIL_ARMED] != 1:
        return PRODUCED_UNARMED, 0, 0
    size = len(buf)
    # The CRC here, 8 bytes a step (compiled: SSE4.2's crc32 where the CPU has it, ~20 ns for a
    # 1-record batch against ~100 for check_produced_batch's table lookups). A mismatch on a
    # compressed batch is then PRODUCED_OTHER, not COMPRESSED: the general path reports it.
    if (size < RECORD_BATCH_OVERHEAD or size >= CRC_IN_KERNEL_BELOW
            or crc_finish(buf, 0xFFFFFFFF, CRC_START, size) != (read_int(buf, CRC_OFFSET, CRC_SIZE) & 0xFFFFFFFF)):
        return PRODUCED_OTHER, 0, 0
    return append_to_tail(buf, size, tail, now, base_offset, leader_epoch)


def append_crc_checked_batch(buf, tail, now, base_offset, leader_epoch):
    """:func:`append_produced_batch` for a batch of any size whose CRC the caller has checked
    (the large ones: the crc32c library reads ~20 GB/s, the crc32 steps here ~12): the same
    checks but the CRC, the same write (above WRITE_BUFFER_BYTES, one ``pwritev`` of the patched
    head and the rest of ``buf`` in place), the same answers."""
    if tail[TAIL_ARMED] != 1:
        return PRODUCED_UNARMED, 0, 0
    return append_to_tail(buf, len(buf), tail, now, base_offset, leader_epoch)


def append_to_tail(buf, size, tail, now, base_offset, leader_epoch):
    """The two appends' common part (the CRC checked or not asked for; ``tail`` armed): the
    rules, the roll rules, the write, the bookkeeping (see :func:`append_produced_batch`)."""
    if now == NOW_FROM_CLOCK:
        now = wall_clock_ms()
    if leader_epoch < INT32_MIN or leader_epoch > INT32_MAX:
        return PRODUCED_OTHER, 0, 0  # (an epoch that is no int32: the general path says so)
    status, delta, max_timestamp, _ = check_produced_batch(
        buf, size, True, tail[TAIL_MAX_MESSAGE_BYTES], tail[TAIL_COMPACT] != 0, tail[TAIL_BEFORE_MAX_MS],
        tail[TAIL_AFTER_MAX_MS], now)
    if status != PRODUCED_OK:
        if status != PRODUCED_IDEMPOTENT:
            return status, 0, 0
        if tail[TAIL_PRODUCER_CHECKED] != 1:  # producer state has not seen it: the caller asks it
            return PRODUCED_IDEMPOTENT, delta, max_timestamp
    position = tail[TAIL_SIZE]
    if position <= 0 or roll_due(position, size, tail[TAIL_SEGMENT_BYTES], base_offset - tail[TAIL_BASE_OFFSET], delta,
                                 max_timestamp, tail[TAIL_MAX_TIMESTAMP_LIMIT]):
        return PRODUCED_ROLL, delta, max_timestamp
    written = pwrite_patched(tail[TAIL_FD], buf, size, position, base_offset, size - LOG_OVERHEAD, leader_epoch)
    if written != size:
        tail[TAIL_WRITTEN] = written
        return PRODUCED_SHORT_WRITE, delta, max_timestamp
    tail[TAIL_SIZE] = position + size
    if max_timestamp > tail[TAIL_MAX_TIMESTAMP]:
        tail[TAIL_MAX_TIMESTAMP] = max_timestamp
        tail[TAIL_OFFSET_OF_MAX_TIMESTAMP] = base_offset + delta if max_timestamp > -1 else -1
        tail[TAIL_MAX_TIMESTAMP_IN_INDEX] = 0
    since = tail[TAIL_BYTES_SINCE_LAST_INDEX_ENTRY]
    if since > tail[TAIL_INDEX_INTERVAL_BYTES]:
        tail[TAIL_BYTES_SINCE_LAST_INDEX_ENTRY] = size
        if not append_index_entries(tail, base_offset + delta, position):
            return PRODUCED_INDEX_DUE, delta, max_timestamp
        return PRODUCED_OK, delta, max_timestamp
    tail[TAIL_BYTES_SINCE_LAST_INDEX_ENTRY] = since + size
    return PRODUCED_OK, delta, max_timestamp


def roll_due(position, size, segment_bytes, relative_offset, last_offset_delta, max_timestamp, max_timestamp_limit):
    """The roll rules an append decides from integers, for both of its twins (the kernel here,
    and ``LogSegment.append_if_no_roll`` interpreted): a batch of ``size`` bytes written at
    ``position`` does not fit in ``segment_bytes``; its offsets (the first ``relative_offset``
    above the segment's base, the last ``last_offset_delta`` above that) do not fit in an int32;
    or its ``max_timestamp`` is above ``max_timestamp_limit`` (segment.ms with jitter, from the
    segment's first batch timestamp). The full-index rule is the caller's (arming checks it)."""
    return (position > segment_bytes - size or relative_offset < 0 or relative_offset > INT32_MAX - last_offset_delta
            or max_timestamp > max_timestamp_limit)


def append_index_entries(tail, last_offset, position):
    """The sparse index entries of a batch just written at ``position`` whose last offset is
    ``last_offset``, as LogSegment._append_index_entry adds them: ``(last_offset, position)`` to
    the offset index, the segment's max timestamp so far and its offset to the time index when
    that timestamp is above the last entry's, the state disarmed when either index is full then.
    True when written; False, nothing written, when either index is not mapped or any check of
    OffsetIndex.append or TimeIndex.maybe_append would not pass: the caller's Python then adds
    them, or raises what they raise.

    Each entry is stored before the entry count that makes it visible, with a release fence
    between (a reader in another thread reads the count, then the entry at an address computed
    from it). Compiled, the stores are plain stores into the mapping.
    """
    offsets, times = TAIL_OFFSET_INDEX, TAIL_TIME_INDEX
    offsets_map, times_map = tail[offsets + INDEX_MAP], tail[times + INDEX_MAP]
    if offsets_map == 0 or times_map == 0:
        return False
    base_offset = tail[TAIL_BASE_OFFSET]
    entries = tail[offsets + INDEX_ENTRIES]
    relative = last_offset - base_offset
    if (entries >= tail[offsets + INDEX_CAPACITY] or (entries > 0 and last_offset <= tail[offsets + INDEX_LAST_KEY])
            or relative < 0 or relative > INT32_MAX or position < 0 or position > INT32_MAX):
        return False
    timestamp, offset_of_timestamp = tail[TAIL_MAX_TIMESTAMP], tail[TAIL_OFFSET_OF_MAX_TIMESTAMP]
    time_entries = tail[times + INDEX_ENTRIES]
    last_timestamp = tail[times + INDEX_LAST_KEY]
    time_relative = offset_of_timestamp - base_offset
    if (time_entries >= tail[times + INDEX_CAPACITY] or offset_of_timestamp < tail[times + INDEX_LAST_OFFSET]
            or timestamp < last_timestamp or time_relative < 0 or time_relative > INT32_MAX):
        return False
    at = offsets_map + entries * OFFSET_INDEX_ENTRY_SIZE
    store_be32(at, relative)
    store_be32(at + OFFSET_INDEX_POSITION_AT, position)
    release_fence()
    tail[offsets + INDEX_LAST_KEY] = last_offset
    tail[offsets + INDEX_ENTRIES] = entries + 1
    if timestamp > last_timestamp:
        at = times_map + time_entries * TIME_INDEX_ENTRY_SIZE
        store_be64(at, timestamp)
        store_be32(at + TIME_INDEX_OFFSET_AT, time_relative)
        release_fence()
        tail[times + INDEX_LAST_KEY] = timestamp
        tail[times + INDEX_LAST_OFFSET] = offset_of_timestamp
        time_entries += 1
        tail[times + INDEX_ENTRIES] = time_entries
    if entries + 1 >= tail[offsets + INDEX_CAPACITY] or time_entries >= tail[times + INDEX_CAPACITY]:
        tail[TAIL_ARMED] = 0  # full: the next append rolls (the general path's roll rule)
    return True


def store_be32(address, value):
    """Store the low 32 bits of ``value`` big-endian at memory ``address``. The specification
    (through ctypes); compiled, one store (_write_intrinsics)."""
    ctypes.memmove(int(address), (int(value) & 0xFFFFFFFF).to_bytes(4, "big"), 4)


def release_fence():
    """Stores before this are visible to other threads before stores after it. Interpreted, the
    GIL orders them; compiled, a release fence (_write_intrinsics; on x86 it only stops the
    compiler from reordering)."""


def store_be64(address, value):
    """Store ``value`` (int64) big-endian at memory ``address``: :func:`store_be32` for 8 bytes."""
    ctypes.memmove(int(address), (int(value) & 0xFFFFFFFFFFFFFFFF).to_bytes(8, "big"), 8)


def wall_clock_ms():
    """Milliseconds since the epoch, as ``tidelog.clock.SystemClock.milliseconds``. The
    specification; compiled, libc ``clock_gettime(CLOCK_REALTIME)`` (_write_intrinsics)."""
    return time.time_ns() // 1_000_000


def pwrite_patched(fd, buf, size, position, base_offset, batch_length, leader_epoch):
    """Write ``buf[0:size]`` at ``position`` of ``fd`` with its first 16 bytes replaced by
    ``base_offset`` (int64), ``batch_length`` and ``leader_epoch`` (int32), big-endian: the bytes
    written, or ``-errno``. Up to WRITE_BUFFER_BYTES, one ``pwrite`` of a patched copy (on ext4
    the gathered write of a small batch costs ~0.5 us more than the copy); above, one ``pwritev``
    of the patched head and the rest in place (a copy would cost more than the gathering). The
    specification; compiled, they are the libc calls themselves (_write_intrinsics), made without
    the GIL (and never seen by a fileops fault plan: the log does not call the compiled kernel
    while one is installed)."""
    head = _PATCHED_FIELDS.pack(base_offset, batch_length, leader_epoch)
    try:
        if size <= WRITE_BUFFER_BYTES:
            return fileops.pwrite(fd, head + bytes(buf[PATCHED_PREFIX:size]), position, _KERNEL_WRITE)
        return fileops.pwritev(fd, [head, memoryview(buf)[PATCHED_PREFIX:size]], position, _KERNEL_WRITE)
    except OSError as e:
        return -e.errno


