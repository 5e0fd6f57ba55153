"""The leader's check-and-write kernels (``storage/_append_kernel.append_produced_batch``, and
``append_crc_checked_batch`` for the large batches whose CRC the caller checks): compiled (libc
``pwrite``, ``pwritev`` and ``clock_gettime`` as intrinsics, see storage/_write_intrinsics.py) and
interpreted (their specification: ``os.pwrite``, ``os.pwritev``, ``time.time_ns``) answer the same,
write the same bytes and leave the same segment tail (the int64 slots of the segment's bookkeeping
they keep), and add the sparse index entries a batch is due into the index files' mappings."""

from __future__ import annotations

import errno
import os
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidelog.records import BatchBuilder, CompressionType, write_crc
from tidelog.records.scan import ACTIVE_IMPLEMENTATION
from tidelog.storage import _append_kernel as k
from tidelog.storage.append_state import crc_checked_batch_appender, produced_batch_appender

INT64_MAX = 2**63 - 1
NOW = 1_700_000_000_000
RULES = (1048588, False, INT64_MAX, 3600000)  # max.message.bytes, compact, before, after

Append = Callable[..., tuple[int, int, int]]


def _twins(interpreted: Append, compiled: Append | None) -> list[Any]:
    kernels: list[Any] = [pytest.param(interpreted, id="python")]
    if compiled is not None:
        kernels.append(pytest.param(compiled, id="numba"))
    return kernels


def _appenders() -> list[Any]:
    return _twins(k.append_produced_batch, produced_batch_appender())


def _checked_appenders() -> list[Any]:
    return _twins(k.append_crc_checked_batch, crc_checked_batch_appender())


def _batch(*values: bytes | None, ts: int = NOW, **builder: Any) -> bytes:
    b = BatchBuilder(**builder)
    for i, value in enumerate(values):
        b.append(i, ts, b"k", value)
    return b.build()


def _large_batch(records: int = 40, ts: int = NOW, value_size: int = 300) -> bytes:
    return _batch(*(bytes([i]) * value_size for i in range(records)), ts=ts)


def _tail(fd: int, *, position: int = 10, relative_offset: int = 0, base_offset: int = 7,
          max_timestamp_limit: int = INT64_MAX, rules: tuple[int, bool, int, int] = RULES, armed: int = 1,
          segment_bytes: int = 1 << 30, max_timestamp: int = NOW - 100, bytes_since: int = 0,
          index_interval: int = 4096) -> np.ndarray:
    """A segment tail as LogSegment.arm_fast_append leaves it, for a segment based at
    ``base_offset - relative_offset`` holding ``position`` bytes."""
    tail = np.zeros(k.TAIL_SLOTS, dtype=np.int64)
    tail[k.TAIL_ARMED], tail[k.TAIL_FD], tail[k.TAIL_SIZE] = armed, fd, position
    tail[k.TAIL_BASE_OFFSET], tail[k.TAIL_SEGMENT_BYTES] = base_offset - relative_offset, segment_bytes
    tail[k.TAIL_MAX_TIMESTAMP_LIMIT], tail[k.TAIL_MAX_TIMESTAMP] = max_timestamp_limit, max_timestamp
    tail[k.TAIL_OFFSET_OF_MAX_TIMESTAMP], tail[k.TAIL_MAX_TIMESTAMP_IN_INDEX] = base_offset - 1, 1
    tail[k.TAIL_BYTES_SINCE_LAST_INDEX_ENTRY], tail[k.TAIL_INDEX_INTERVAL_BYTES] = bytes_since, index_interval
    tail[k.TAIL_MAX_MESSAGE_BYTES], tail[k.TAIL_COMPACT], tail[k.TAIL_BEFORE_MAX_MS], tail[k.TAIL_AFTER_MAX_MS] = rules
    return tail


def _append(kernel: Append, path: Path, data: bytes, *, now: int = NOW, base_offset: int = 7, leader_epoch: int = 3,
            **tail: Any) -> tuple[tuple[int, ...], bytes, tuple[int, ...]]:
    """``(result, file bytes, tail after)`` of one kernel call on a new file."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        slots = _tail(fd, base_offset=base_offset, **tail)
        result = kernel(data, slots, now, base_offset, leader_epoch)
        slots[k.TAIL_FD] = 0  # the descriptor number differs from call to call
        return tuple(int(x) for x in result), os.pread(fd, 1 << 20, 0), tuple(int(x) for x in slots)
    finally:
        os.close(fd)


def test_the_compiled_kernel_exists_where_numba_does() -> None:
    assert (produced_batch_appender() is None) == (ACTIVE_IMPLEMENTATION == "python")


@pytest.mark.parametrize("kernel", _appenders())
def test_a_common_batch_is_written_with_offset_length_and_epoch_patched(kernel: Append, tmp_path: Path) -> None:
    data = _batch(b"a", b"bb", ts=NOW - 5)
    result, written, tail = _append(kernel, tmp_path / "f", data, position=10, base_offset=1 << 40, leader_epoch=-1,
                                    relative_offset=2**31 - 2)  # the last offset's is 2**31 - 1: still an int32
    assert result == (k.PRODUCED_OK, 1, NOW - 5)
    assert written[:10] == bytes(10)  # a hole: the write went to position 10
    assert written[10:] == struct.pack(">qii", 1 << 40, len(data) - 12, -1) + data[16:]
    # The segment's bookkeeping, as LogSegment.append keeps it: size, max timestamp and its offset
    # (no longer from the index), bytes since the last index entry.
    assert tail[k.TAIL_SIZE] == 10 + len(data)
    assert (tail[k.TAIL_MAX_TIMESTAMP], tail[k.TAIL_OFFSET_OF_MAX_TIMESTAMP]) == (NOW - 5, (1 << 40) + 1)
    assert tail[k.TAIL_MAX_TIMESTAMP_IN_INDEX] == 0
    assert tail[k.TAIL_BYTES_SINCE_LAST_INDEX_ENTRY] == len(data)


@pytest.mark.parametrize("kernel", _appenders())
def test_an_older_batch_keeps_the_max_timestamp_and_a_due_index_entry_is_reported(kernel: Append,
                                                                                     tmp_path: Path) -> None:
    data = _batch(b"a", ts=NOW - 500)  # older than the segment's max (NOW - 100)
    result, _, tail = _append(kernel, tmp_path / "f", data, position=300, bytes_since=4097)
    assert result == (k.PRODUCED_INDEX_DUE, 0, NOW - 500)  # the entry: (offset 7, position 300 = the new size - its own)
    assert tail[k.TAIL_SIZE] - len(data) == 300
    assert (tail[k.TAIL_MAX_TIMESTAMP], tail[k.TAIL_OFFSET_OF_MAX_TIMESTAMP], tail[k.TAIL_MAX_TIMESTAMP_IN_INDEX]) \
        == (NOW - 100, 6, 1)
    assert tail[k.TAIL_BYTES_SINCE_LAST_INDEX_ENTRY] == len(data)  # counted again from this batch
    result, _, not_due = _append(kernel, tmp_path / "g", data, position=300, bytes_since=4096)  # not above the interval
    assert result[0] == k.PRODUCED_OK and not_due[k.TAIL_BYTES_SINCE_LAST_INDEX_ENTRY] == 4096 + len(data)


@pytest.mark.parametrize("kernel", _appenders())
@pytest.mark.parametrize("case,expected_status", [
    ({"data": _batch(b"v", compression=CompressionType.GZIP)}, k.PRODUCED_COMPRESSED),
    ({"data": _batch(b"v", producer_id=5, producer_epoch=0, base_sequence=0)}, k.PRODUCED_IDEMPOTENT),
    ({"data": _batch(b"v", producer_id=5, producer_epoch=0, base_sequence=0, is_transactional=True)},
     k.PRODUCED_OTHER),
    ({"data": _batch(b"v" * 5000)}, k.PRODUCED_OTHER),  # CRC_IN_KERNEL_BELOW or more: append_crc_checked_batch's
    ({"leader_epoch": 2**31}, k.PRODUCED_OTHER),  # no int32
    ({"relative_offset": 2**31 - 2}, k.PRODUCED_ROLL),  # three records: the last at 2**31 + 0
    ({"relative_offset": -1}, k.PRODUCED_ROLL),  # below the segment's base offset
    ({"max_timestamp_limit": NOW - 1}, k.PRODUCED_ROLL),  # segment.ms
    ({"segment_bytes": 10 + len(_batch(b"a", b"b", b"c")) - 1}, k.PRODUCED_ROLL),  # segment.bytes: one byte short
    ({"position": 0}, k.PRODUCED_ROLL),  # an empty segment: its first batch sets the time rule's base
    ({"armed": 0}, k.PRODUCED_UNARMED),
    ({"now": NOW - 3600001}, k.PRODUCED_OTHER),  # a timestamp too far ahead of the broker time
    ({"now": k.NOW_FROM_CLOCK}, k.PRODUCED_OTHER),  # the real clock is years after NOW: too far behind
])
def test_nothing_is_written_unless_the_batch_passes(kernel: Append, tmp_path: Path, case: dict[str, Any],
                                                    expected_status: int) -> None:
    arguments = {"data": _batch(b"a", b"b", b"c"), "rules": (1048588, False, 1000, 3600000)} | case
    result, written, tail = _append(kernel, tmp_path / "f", **arguments)
    assert result[0] == expected_status
    assert written == b""
    untouched = dict(arguments)
    untouched.pop("data"), untouched.pop("now", None), untouched.pop("leader_epoch", None)
    expected_tail = _tail(0, base_offset=7, **untouched)
    assert tail == tuple(int(x) for x in expected_tail)


@pytest.mark.parametrize("kernel", _appenders() + _checked_appenders())
def test_an_idempotent_batch_is_written_only_once_producer_state_let_it_through(kernel: Append,
                                                                                 tmp_path: Path) -> None:
    data = _batch(b"a", b"b", producer_id=5, producer_epoch=0, base_sequence=0)
    result, written, tail = _append(kernel, tmp_path / "f", data, position=10)
    assert result == (k.PRODUCED_IDEMPOTENT, 1, NOW) and written == b""  # its lastOffsetDelta: for producer state
    assert tail == tuple(int(x) for x in _tail(0, base_offset=7, position=10))
    fd = os.open(tmp_path / "g", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        slots = _tail(fd, position=10)
        slots[k.TAIL_PRODUCER_CHECKED] = 1
        assert tuple(kernel(data, slots, NOW, 7, 3)) == (k.PRODUCED_OK, 1, NOW)
        assert os.pread(fd, 1 << 16, 10) == struct.pack(">qii", 7, len(data) - 12, 3) + data[16:]
        transactional = _batch(b"v", producer_id=5, producer_epoch=0, base_sequence=2, is_transactional=True)
        assert kernel(transactional, slots, NOW, 9, 3)[0] == k.PRODUCED_OTHER  # the slot lets idempotent ones only
    finally:
        os.close(fd)


def test_the_segment_bytes_rule_lets_a_batch_that_fits_exactly(tmp_path: Path) -> None:
    data = _batch(b"a", b"b", b"c")
    for kernel in _appenders():
        result, _, _ = _append(kernel.values[0], tmp_path / kernel.id, data, segment_bytes=10 + len(data))
        assert result[0] == k.PRODUCED_OK


@pytest.mark.parametrize("kernel", _appenders())
def test_the_system_clock_is_read_when_asked(kernel: Append, tmp_path: Path) -> None:
    import time

    data = _batch(b"v", ts=time.time_ns() // 1_000_000)  # within a second of the kernel's clock
    result, _, _ = _append(kernel, tmp_path / "f", data, now=k.NOW_FROM_CLOCK, rules=(1048588, False, 60_000, 60_000))
    assert result[0] == k.PRODUCED_OK


@pytest.mark.parametrize("kernel,data,delta", [
    *(pytest.param(p.values[0], _batch(b"v"), 0, id=f"{p.id}-copied") for p in _appenders()),
    *(pytest.param(p.values[0], _large_batch(), 39, id=f"{p.id}-gathered") for p in _checked_appenders()),
])
def test_a_failed_write_says_minus_errno_and_leaves_the_rest_of_the_tail(kernel: Append, data: bytes, delta: int,
                                                                         tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"")
    fd = os.open(path, os.O_RDONLY)
    try:
        tail = _tail(fd)
        before = tail.copy()
        result = kernel(data, tail, NOW, 7, 0)
    finally:
        os.close(fd)
    assert result == (k.PRODUCED_SHORT_WRITE, delta, NOW) and tail[k.TAIL_WRITTEN] == -errno.EBADF
    tail[k.TAIL_WRITTEN] = 0
    assert (tail == before).all()  # the caller finishes the write and the bookkeeping


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.binary(max_size=40), min_size=1, max_size=6), st.integers(0, 10_000), st.integers(0, 255),
       st.booleans(), st.integers(-5, 2**40), st.sampled_from([0, 5, -1, 2**31 - 1]), st.integers(1, 5000),
       st.integers(0, 5000))
def test_twins_agree_on_any_damage(tmp_path_factory: pytest.TempPathFactory, values: list[bytes], where: int,
                                   xor: int, fix_crc: bool, base_offset: int, leader_epoch: int, position: int,
                                   bytes_since: int) -> None:
    data = bytearray(_batch(*values))
    at = where % len(data)
    data[at] ^= xor
    if fix_crc and at >= 21:  # past the CRC: the records are what the kernel then finds wrong
        write_crc(data)
    root = tmp_path_factory.mktemp("twins")
    outcomes = {_append(kernel.values[0], root / kernel.id, bytes(data), base_offset=base_offset,
                        leader_epoch=leader_epoch, position=position, bytes_since=bytes_since)
                for kernel in _appenders()}
    assert len(outcomes) == 1


# --- append_crc_checked_batch: the large batches (the caller checked the CRC) ---------------------

@pytest.mark.parametrize("kernel", _checked_appenders())
@pytest.mark.parametrize("records", [40, 1])
def test_a_batch_of_any_size_is_written_with_its_head_patched(kernel: Append, tmp_path: Path, records: int) -> None:
    data = _large_batch(records, ts=NOW - 5)
    assert (len(data) > k.WRITE_BUFFER_BYTES) == (records == 40)  # one gathered pwritev; one patched copy
    result, written, tail = _append(kernel, tmp_path / "f", data, position=10, base_offset=1 << 40, leader_epoch=9,
                                    bytes_since=5000)
    assert result == (k.PRODUCED_INDEX_DUE, records - 1, NOW - 5)
    assert written[10:] == struct.pack(">qii", 1 << 40, len(data) - 12, 9) + data[16:]
    assert tail[k.TAIL_SIZE] == 10 + len(data)
    assert (tail[k.TAIL_MAX_TIMESTAMP], tail[k.TAIL_OFFSET_OF_MAX_TIMESTAMP]) == (NOW - 5, (1 << 40) + records - 1)
    assert tail[k.TAIL_BYTES_SINCE_LAST_INDEX_ENTRY] == len(data)


@pytest.mark.parametrize("kernel", _checked_appenders())
def test_the_checked_kernel_leaves_the_crc_to_its_caller_and_checks_the_rest(kernel: Append, tmp_path: Path) -> None:
    data = bytearray(_large_batch())
    data[17:21] = bytes(4)  # a wrong CRC: the caller's to find (the log runs crc32c before this kernel)
    result, written, _ = _append(kernel, tmp_path / "f", bytes(data), position=10)
    assert result[0] == k.PRODUCED_OK and len(written) == 10 + len(data)
    data[35:43] = (NOW + 1).to_bytes(8, "big")  # maxTimestamp above the records': refused
    write_crc(data)
    result, written, _ = _append(kernel, tmp_path / "g", bytes(data), position=10)
    assert result[0] == k.PRODUCED_OTHER and written == b""
    result, written, _ = _append(kernel, tmp_path / "h", _large_batch(), position=10, segment_bytes=5000)
    assert result[0] == k.PRODUCED_ROLL and written == b""


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.integers(1, 60), st.integers(0, 400), st.integers(0, 100_000), st.integers(0, 255), st.booleans(),
       st.sampled_from([1 << 30, 6000, 300_000]))
def test_checked_twins_agree_on_any_damage(tmp_path_factory: pytest.TempPathFactory, records: int, value_size: int,
                                           where: int, xor: int, fix_crc: bool, segment_bytes: int) -> None:
    data = bytearray(_large_batch(records, value_size=value_size))
    at = where % len(data)
    data[at] ^= xor
    if fix_crc and at >= 21:  # past the CRC: the records are what the kernel then finds wrong
        write_crc(data)
    root = tmp_path_factory.mktemp("checked")
    outcomes = {_append(kernel.values[0], root / kernel.id, bytes(data), position=100, bytes_since=4000,
                        segment_bytes=segment_bytes)
                for kernel in _checked_appenders()}
    assert len(outcomes) == 1


# --- append_index_entries: the sparse index entries a written batch is due ----------------------

def _indexed_tail(tmp_path: Path, fd: int, *, max_index_size: int = 1024, **tail: Any) -> tuple[np.ndarray, Any, Any]:
    """``_tail`` with a segment's two index files open on its index slots, as LogSegment's are
    (the segment is based at 7 - relative_offset)."""
    from tidelog.storage.index import OffsetIndex, TimeIndex

    slots = _tail(fd, **tail)
    base = int(slots[k.TAIL_BASE_OFFSET])
    offsets = OffsetIndex(tmp_path / "i.index", base, max_index_size,
                          state=slots[k.TAIL_OFFSET_INDEX:k.TAIL_OFFSET_INDEX + k.INDEX_STATE_SLOTS])
    times = TimeIndex(tmp_path / "i.timeindex", base, max_index_size,
                      state=slots[k.TAIL_TIME_INDEX:k.TAIL_TIME_INDEX + k.INDEX_STATE_SLOTS])
    return slots, offsets, times


@pytest.mark.parametrize("kernel", _appenders() + _checked_appenders())
def test_a_due_index_entry_is_written_into_both_mapped_indexes(kernel: Append, tmp_path: Path) -> None:
    from tidelog.storage.index import OffsetPosition, TimestampOffset

    data = _batch(b"a", b"b", b"c", ts=NOW - 5)
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        slots, offsets, times = _indexed_tail(tmp_path, fd, position=300, bytes_since=4097, relative_offset=5)
        assert tuple(kernel(data, slots, NOW, 7, 0)) == (k.PRODUCED_OK, 2, NOW - 5)  # nothing left to the caller
        assert offsets.entries == 1 and offsets.entry(0) == OffsetPosition(9, 300) and offsets.last_offset == 9
        assert times.entries == 1 and times.entry(0) == times.last_entry == TimestampOffset(NOW - 5, 9)
        older = _batch(b"d", ts=NOW - 50)  # the segment's max timestamp stays NOW - 5: no time entry
        slots[k.TAIL_BYTES_SINCE_LAST_INDEX_ENTRY] = 4097
        position = int(slots[k.TAIL_SIZE])
        assert tuple(kernel(older, slots, NOW, 10, 0)) == (k.PRODUCED_OK, 0, NOW - 50)
        assert offsets.entries == 2 and offsets.entry(1) == OffsetPosition(10, position) and times.entries == 1
        offsets.close(), times.close()  # trimmed to their entries: what Kafka reads
        assert (tmp_path / "i.index").read_bytes() == struct.pack(">iiii", 7, 300, 8, position)  # based at 2
        assert (tmp_path / "i.timeindex").read_bytes() == struct.pack(">qi", NOW - 5, 7)
    finally:
        os.close(fd)


@pytest.mark.parametrize("kernel", _appenders())
@pytest.mark.parametrize("case", ["unmapped", "time goes back", "offset not above", "full"])
def test_an_index_entry_the_kernel_cannot_add_is_left_to_the_caller_untouched(kernel: Append, tmp_path: Path,
                                                                               case: str) -> None:
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        # A segment based at 300 whose index entries so far are below the batch's offset, 500.
        slots, offsets, times = _indexed_tail(tmp_path, fd, position=300, bytes_since=4097, base_offset=500,
                                              relative_offset=200)
        if case == "unmapped":
            times.close()
        elif case == "time goes back":
            times.maybe_append(NOW + 10, 300)  # above the segment's max timestamp: Python raises on it
        elif case == "offset not above":
            offsets.append(500, 100)
        else:
            offsets.append_entries(np.arange(300, 427), np.zeros(127, np.int64))  # 128 slots, 127 used
        before = (offsets.entries, times.entries)  # (the count stays readable after a close)
        result = tuple(kernel(_batch(b"a", ts=NOW - 5), slots, NOW, 500, 0))
        if case == "full":
            assert result[0] == k.PRODUCED_OK and offsets.entries == 128 and offsets.is_full()
            assert slots[k.TAIL_ARMED] == 0, "a full index disarms: the next append rolls"
            return
        assert result == (k.PRODUCED_INDEX_DUE, 0, NOW - 5)  # written, the entry the caller's
        assert (offsets.entries, times.entries) == before
        assert slots[k.TAIL_ARMED] == 1
    finally:
        os.close(fd)


def test_an_index_slot_holds_an_address_only_while_its_mapping_is_open(tmp_path: Path) -> None:
    from tidelog.storage.index import OffsetIndex

    state = np.zeros(k.INDEX_STATE_SLOTS, np.int64)
    index = OffsetIndex(tmp_path / "i.index", 0, 1024, state=state)
    assert state[k.INDEX_MAP] != 0 and state[k.INDEX_CAPACITY] == 128
    index.append(5, 10)
    assert (state[k.INDEX_ENTRIES], state[k.INDEX_LAST_KEY]) == (1, 5)
    index.resize(512)  # remapped: a new address
    assert state[k.INDEX_MAP] != 0 and state[k.INDEX_CAPACITY] == 64
    index.close()
    assert state[k.INDEX_MAP] == 0
    read_only = OffsetIndex(tmp_path / "i.index", 0, 1024, writable=False, state=state)
    assert state[k.INDEX_MAP] == 0 and read_only.entries == 1  # nothing writes through a read-only mapping
    read_only.close()
