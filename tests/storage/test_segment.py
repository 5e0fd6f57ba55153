"""LogSegment: the scenarios of Kafka's LogSegmentTest (kafka-storage.md §4.4, §1.12, §3.8, §3.9).

Kafka's tests use a segment at base offset 40 with ``index.interval.bytes`` 10 and v1 records whose
timestamp is ``offset * 10``; here the batches are v2 (one record per batch unless stated), same
offsets and timestamps.
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from storage_helpers import batch, batches_of

from tidelog.errors import LogSegmentOffsetOverflowError
from tidelog.records import NO_TIMESTAMP
from tidelog.storage import files
from tidelog.storage.fetch_info import LogOffsetMetadata
from tidelog.storage.log_config import SegmentConfig
from tidelog.storage.roll import RollParams, should_roll
from tidelog.storage.segment import LogSegment
from tidelog.testing import FakeClock

LONG_MAX = 2**63 - 1
INT_MAX = 2**31 - 1


def open_segment(
    dir: Path, base: int = 40, *, clock: FakeClock | None = None, interval: int = 10, max_index: int = 1000,
    exists: bool = False, preallocate: bool = False, init_file_size: int = 0, suffix: str = "",
) -> LogSegment:
    dir.mkdir(parents=True, exist_ok=True)
    config = SegmentConfig(index_interval_bytes=interval, max_index_size=max_index,
                           init_file_size=init_file_size, preallocate=preallocate)
    return LogSegment.open(dir, base, config, clock or FakeClock(), file_already_exists=exists, file_suffix=suffix)


def msgs(offset: int, *values: bytes) -> bytes:
    """One single-record batch per value, at consecutive offsets, timestamp offset*10 (v1Records)."""
    return b"".join(batch(v, base_offset=offset + i, timestamp=(offset + i) * 10) for i, v in enumerate(values))


def append(seg: LogSegment, offset: int, *values: bytes, ts: int | None = None) -> bytes:
    data = msgs(offset, *values)
    last = offset + len(values) - 1
    seg.append(last, last * 10 if ts is None else ts, last, data)
    return data


def offsets_read(seg: LogSegment, offset: int, max_size: int = 10_000) -> list[int]:
    info = seg.read(offset, max_size, seg.size)
    assert info is not None
    return [r.offset for b in batches_of(info.records) for r in b.records()]


def write_nonsense(path: Path, position: int, size: int, rng: random.Random) -> None:
    with open(path, "r+b") as f:
        f.seek(position)
        f.write(rng.randbytes(size))


# --- append ---------------------------------------------------------------------------------

@pytest.mark.parametrize(("base", "largest"), [
    (0, -(2**31)), (0, 2**31), (1, 0), (100, 10), (2**31, 0), (2**31, 2**32),
])
def test_append_outside_relative_offset_range_raises_overflow(tmp_path: Path, base: int, largest: int) -> None:
    seg = open_segment(tmp_path, base)
    with pytest.raises(LogSegmentOffsetOverflowError):
        seg.append(largest, NO_TIMESTAMP, -1, batch(b"hello", base_offset=max(0, largest)))
    assert seg.size == 0
    seg.close()


def test_append_at_relative_offset_int_max_is_accepted(tmp_path: Path) -> None:
    seg = open_segment(tmp_path, 0)
    seg.append(INT_MAX, NO_TIMESTAMP, -1, batch(b"x", base_offset=INT_MAX))
    assert seg.read_next_offset() == INT_MAX + 1
    seg.close()


def test_first_append_of_a_segment_gets_no_index_entry(tmp_path: Path) -> None:
    seg = open_segment(tmp_path, 0, interval=0)
    append(seg, 0, b"a")
    assert seg.offset_index.entries == 0
    append(seg, 1, b"b")  # more than 0 bytes since the last entry: (1, position of this append)
    assert seg.offset_index.entries == 1
    assert seg.offset_index.entry(0).offset == 1 and seg.offset_index.entry(0).position == len(msgs(0, b"a"))
    seg.close()


# --- read -----------------------------------------------------------------------------------

@pytest.fixture
def seg(tmp_path: Path) -> Iterator[LogSegment]:
    """A segment at base offset 40 (interval 10), closed at teardown."""
    segment = open_segment(tmp_path)
    yield segment
    segment.close()


def test_read_on_empty_segment_returns_none(seg: LogSegment) -> None:
    assert seg.read(40, 300, seg.size) is None


def test_read_before_first_offset_returns_the_whole_first_batch(seg: LogSegment) -> None:
    data = batch(b"hello", b"there", b"little", b"bee", base_offset=50)
    seg.append(53, NO_TIMESTAMP, -1, data)
    info = seg.read(41, 300, seg.size)
    assert info is not None and info.records == data


def test_read_after_last_offset_returns_none(seg: LogSegment) -> None:
    append(seg, 50, b"hello", b"there")
    assert seg.read(52, 200, seg.size) is None


def test_read_from_gap_returns_next_batch(seg: LogSegment) -> None:
    append(seg, 50, b"hello", b"there")
    second = append(seg, 60, b"alpha", b"beta")
    info = seg.read(55, 200, seg.size)
    assert info is not None and info.records == second


@pytest.mark.parametrize("min_one_message", [True, False])
def test_read_without_max_position_returns_metadata_only(seg: LogSegment, min_one_message: bool) -> None:
    append(seg, 50, b"hello", b"there")
    second_position = len(msgs(50, b"hello"))
    assert [loc.position for loc in seg.reader().batch_locations()] == [0, second_position]
    expected = {48: (48, 40, 0), 50: (50, 40, 0), 51: (51, 40, second_position)}
    for offset, (message, base, position) in expected.items():
        info = seg.read(offset, 1, None, min_one_message)
        assert info is not None
        assert info.fetch_offset_metadata == LogOffsetMetadata(message, base, position)
        assert info.records == b""
    assert seg.read(52, 1, None, min_one_message) is None
    assert seg.read(53, 1, None, min_one_message) is None


def test_read_min_one_message_returns_first_batch_past_max_size(seg: LogSegment) -> None:
    data = append(seg, 40, b"x" * 100)
    info = seg.read(40, 1, seg.size, min_one_message=True)
    assert info is not None and info.records == data and not info.first_entry_incomplete
    info = seg.read(40, 1, seg.size, min_one_message=False)
    assert info is not None and info.records == data[:1] and info.first_entry_incomplete
    info = seg.read(40, 0, seg.size, min_one_message=False)
    assert info is not None and info.records == b""


def test_read_is_bounded_by_max_position(seg: LogSegment) -> None:
    first = append(seg, 40, b"a")
    append(seg, 41, b"b")
    info = seg.read(40, 10_000, len(first))
    assert info is not None and info.records == first
    info = seg.read(41, 10_000, len(first))  # bound before the batch: nothing
    assert info is not None and info.records == b""


def test_negative_max_size_is_rejected(seg: LogSegment) -> None:
    append(seg, 40, b"a")
    with pytest.raises(ValueError):
        seg.read(40, -1, seg.size)


def test_read_next_offset(tmp_path: Path) -> None:
    seg = open_segment(tmp_path)
    assert seg.read_next_offset() == 40
    append(seg, 50, b"hello", b"there", b"you")
    assert seg.read_next_offset() == 53
    seg.close()


# --- truncation -----------------------------------------------------------------------------

def test_truncate_removes_last_batch_thirty_times(tmp_path: Path) -> None:
    seg = open_segment(tmp_path)
    offset = 40
    for _ in range(30):
        append(seg, offset, b"hello")
        append(seg, offset + 1, b"hello")
        assert offsets_read(seg, offset) == [offset, offset + 1]
        seg.truncate_to(offset + 1)
        assert offsets_read(seg, offset) == [offset]
        offset += 1
    seg.close()


def test_truncate_empty_reopened_segment_resizes_indexes_and_never_rolls_by_time(tmp_path: Path) -> None:
    clock = FakeClock()
    max_segment_ms = 300_000
    seg = open_segment(tmp_path, 0, clock=clock)
    seg.time_index, seg.offset_index  # noqa: B018 - load the lazy indexes so close trims them
    seg.close()
    reopened = open_segment(tmp_path, 0, clock=clock, exists=True)
    assert reopened.time_index.size_in_bytes == 0 and reopened.offset_index.size_in_bytes == 0
    clock.advance(500)
    reopened.truncate_to(57)
    assert reopened.time_waited_for_roll(clock.milliseconds(), NO_TIMESTAMP) == 0
    assert not reopened.time_index.is_full() and not reopened.offset_index.is_full()
    params = RollParams(max_segment_ms, INT_MAX, NO_TIMESTAMP, 100, 1024, clock.milliseconds())
    assert not should_roll(reopened, params)
    clock.advance(max_segment_ms + 1)
    assert reopened.time_waited_for_roll(clock.milliseconds(), NO_TIMESTAMP) == max_segment_ms + 1
    params = RollParams(max_segment_ms, INT_MAX, NO_TIMESTAMP, 100, 1024, clock.milliseconds())
    assert not should_roll(reopened, params)  # an empty segment never rolls by time
    params = RollParams(max_segment_ms, INT_MAX, NO_TIMESTAMP, INT_MAX + 200, 1024, clock.milliseconds())
    assert should_roll(reopened, params)  # but does when the next offset cannot be relative
    reopened.close()


def test_truncation_reloads_largest_timestamp_and_next_offset(tmp_path: Path) -> None:
    size = len(msgs(0, b"hello"))
    seg = open_segment(tmp_path, interval=2 * size - 1)
    for offset in range(40, 70):
        # Kafka's test passes largestTimestamp = offset (the records carry offset * 10)
        seg.append(offset, offset, offset, msgs(offset, b"hello"))
    assert seg.read_next_offset() == 70
    assert seg.time_index.entries == 30 // 2 - 1
    seg.truncate_to(41)
    assert seg.time_index.entries == 0
    assert seg.largest_timestamp == 400
    assert seg.read_next_offset() == 41
    seg.close()


def test_truncate_to_base_resets_created_time_and_indexes(tmp_path: Path) -> None:
    clock = FakeClock()
    seg = open_segment(tmp_path, clock=clock)
    seg.append(41, NO_TIMESTAMP, -1, msgs(40, b"hello", b"there"))
    clock.advance(500)
    assert seg.time_waited_for_roll(clock.milliseconds(), NO_TIMESTAMP) == 500
    seg.truncate_to(0)
    assert seg.time_waited_for_roll(clock.milliseconds(), NO_TIMESTAMP) == 0
    assert not seg.time_index.is_full() and not seg.offset_index.is_full()
    assert seg.read(0, 1024, seg.size) is None
    seg.append(41, NO_TIMESTAMP, -1, msgs(40, b"hello", b"there"))
    assert offsets_read(seg, 40) == [40, 41]
    seg.close()


def test_truncate_to_an_offset_in_a_gap_removes_the_batch_after_it(tmp_path: Path) -> None:
    seg = open_segment(tmp_path)
    append(seg, 40, b"first message")
    append(seg, 43, b"message after gap")
    seg.truncate_to(41)
    info = seg.read(40, 10_000, seg.size)
    assert info is not None and [b.base_offset for b in batches_of(info.records)] == [40]
    assert seg.read_next_offset() == 41
    seg.close()


def test_truncate_inside_a_batch_removes_the_whole_batch(tmp_path: Path) -> None:
    seg = open_segment(tmp_path)
    first = batch(b"a", b"b", base_offset=40)
    seg.append(41, NO_TIMESTAMP, -1, first)
    seg.append(44, NO_TIMESTAMP, -1, batch(b"c", b"d", b"e", base_offset=42))
    removed = seg.truncate_to(43)
    assert seg.size == len(first) and removed > 0
    assert seg.read_next_offset() == 42
    seg.close()


# --- time -----------------------------------------------------------------------------------

def test_find_offset_by_timestamp(tmp_path: Path) -> None:
    size = len(msgs(0, b"msg00"))
    seg = open_segment(tmp_path, interval=2 * size - 1)
    for offset in range(40, 50):
        seg.append(offset, offset * 10, offset, msgs(offset, b"msg%d" % offset))
    assert seg.largest_timestamp == 490
    expected = {420: 42, 421: 43, 430: 43, 431: 44, 401: 41, 399: 40}
    for ts, offset in expected.items():
        found = seg.find_offset_by_timestamp(ts, 0)
        assert found is not None and found.offset == offset, ts
        assert found.timestamp == offset * 10
    assert seg.find_offset_by_timestamp(491, 0) is None
    # the starting offset (log start offset) bounds the answer from below
    found = seg.find_offset_by_timestamp(0, 45)
    assert found is not None and found.offset == 45
    seg.close()


def test_first_batch_timestamp_is_long_max_until_a_batch_has_one(tmp_path: Path) -> None:
    seg = open_segment(tmp_path, 1)
    assert seg.first_batch_timestamp() == LONG_MAX
    seg.append(1, 1000, 1, batch(b"one", base_offset=1, timestamp=1000))
    assert seg.first_batch_timestamp() == 1000
    seg.close()


def test_first_batch_timestamp_is_long_max_when_the_first_batch_has_none(tmp_path: Path) -> None:
    seg = open_segment(tmp_path, 1)
    seg.append(1, NO_TIMESTAMP, 1, batch(b"one", base_offset=1, timestamp=NO_TIMESTAMP))
    assert seg.first_batch_timestamp() == LONG_MAX
    seg.close()


def test_rolling_timestamp_is_reloaded_from_first_batch_after_reopen(tmp_path: Path) -> None:
    clock = FakeClock()
    seg = open_segment(tmp_path, 0, clock=clock)
    seg.append(0, 5000, 0, batch(b"a", timestamp=5000))
    seg.append(1, 9000, 1, batch(b"b", base_offset=1, timestamp=9000))
    seg.close()
    reopened = open_segment(tmp_path, 0, clock=clock, exists=True)
    assert reopened.time_waited_for_roll(clock.milliseconds(), 12_000) == 7000
    reopened.close()


# --- file suffixes ----------------------------------------------------------------------------

def test_change_file_suffixes_does_not_create_lazy_index_files(tmp_path: Path) -> None:
    seg = open_segment(tmp_path)
    log_path = seg.log.path
    index_path = files.offset_index_file(tmp_path, 40)
    time_path = files.time_index_file(tmp_path, 40)
    assert not index_path.exists() and not time_path.exists()
    seg.change_file_suffixes("", files.DELETED_SUFFIX)
    assert not index_path.exists() and not time_path.exists()
    assert not files.offset_index_file(tmp_path, 40, files.DELETED_SUFFIX).exists()
    assert seg.log.path == Path(str(log_path) + ".deleted") and seg.log.path.exists()
    # created lazily later, under the new name
    assert seg.offset_index.path == Path(str(index_path) + ".deleted")
    assert seg.time_index.path == Path(str(time_path) + ".deleted")
    assert seg.offset_index.path.exists()
    seg.close()


def test_change_file_suffixes_renames_loaded_indexes(tmp_path: Path) -> None:
    seg = open_segment(tmp_path, interval=0)
    for offset in range(40, 45):
        append(seg, offset, b"v")
    seg.txn_index  # noqa: B018 - loaded, but its file does not exist (no aborted transaction)
    seg.change_file_suffixes("", files.DELETED_SUFFIX)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == [
        "00000000000000000040.index.deleted", "00000000000000000040.log.deleted",
        "00000000000000000040.timeindex.deleted",
    ]
    assert seg.offset_index.path.name.endswith(".index.deleted")
    assert seg.txn_index.path.name == "00000000000000000040.txnindex.deleted"
    assert offsets_read(seg, 42) == [42, 43, 44]
    seg.delete_files()
    assert list(tmp_path.iterdir()) == []


def test_change_file_suffixes_checks_the_current_suffix(tmp_path: Path) -> None:
    seg = open_segment(tmp_path)
    with pytest.raises(ValueError):
        seg.change_file_suffixes(files.SWAP_SUFFIX, "")
    seg.close()


# --- recovery ------------------------------------------------------------------------------

def test_recovery_fixes_corrupt_offset_index(tmp_path: Path) -> None:
    seg = open_segment(tmp_path, 0, max_index=4096)
    for offset in range(100):
        seg.append(offset, NO_TIMESTAMP, -1, batch(str(offset).encode(), base_offset=offset, timestamp=NO_TIMESTAMP))
    index_path = seg.offset_index.path
    write_nonsense(index_path, 5, index_path.stat().st_size - 5, random.Random(1))
    seg.recover()
    for offset in range(100):
        info = seg.read(offset, 1, seg.size, min_one_message=True)
        assert info is not None and next(batches_of(info.records)[0].records()).offset == offset
    seg.close()


def test_recovery_fixes_corrupt_time_index(tmp_path: Path) -> None:
    seg = open_segment(tmp_path, 0, max_index=4096)
    for offset in range(100):
        seg.append(offset, offset * 10, offset, batch(str(offset).encode(), base_offset=offset, timestamp=offset * 10))
    time_path = seg.time_index.path
    write_nonsense(time_path, 5, time_path.stat().st_size - 5, random.Random(2))
    seg.recover()
    for offset in range(100):
        found = seg.find_offset_by_timestamp(offset * 10, 0)
        assert found is not None and found.offset == offset
        if offset < 99:
            found = seg.find_offset_by_timestamp(offset * 10 + 1, 0)
            assert found is not None and found.offset == offset + 1
    seg.close()


def test_recovery_rebuilds_indexes_per_batch(tmp_path: Path) -> None:
    seg = open_segment(tmp_path, 0, interval=0)
    data = b"".join(batch(b"v", base_offset=o, timestamp=1000 + o) for o in range(10))
    seg.append(9, 1009, 9, data)  # one append of ten batches: no index entry on the append path
    assert seg.offset_index.entries == 0
    seg.recover()
    # recovery adds an entry before every batch but the first (interval 0)
    assert seg.offset_index.entries == 9
    assert [seg.offset_index.entry(i).offset for i in range(9)] == list(range(1, 10))
    assert seg.time_index.last_entry.timestamp == 1009 and seg.time_index.last_entry.offset == 9
    seg.close()


@settings(max_examples=25, deadline=None)
@given(corrupt_at=st.integers(0, 19), skew=st.integers(0, 14), seed=st.integers(0, 2**32))
def test_recovery_with_corrupt_message_keeps_batches_before_it(
    tmp_path_factory: pytest.TempPathFactory, corrupt_at: int, skew: int, seed: int
) -> None:
    dir = tmp_path_factory.mktemp("seg")
    seg = open_segment(dir, 0)
    for offset in range(20):
        seg.append(offset, NO_TIMESTAMP, -1, batch(str(offset).encode(), base_offset=offset, timestamp=NO_TIMESTAMP))
    location = seg.reader().search_for_offset(corrupt_at)
    assert location is not None
    position = location.position + skew
    seg.log.flush()
    write_nonsense(seg.log.path, position, seg.size - position, random.Random(seed))
    result = seg.recover()
    assert [loc.last_offset for loc in seg.reader().batch_locations()] == list(range(corrupt_at))
    assert result.truncated_bytes > 0 and seg.size == location.position
    assert seg.read_next_offset() == corrupt_at
    seg.delete_files()


def test_recovery_truncates_zero_filled_preallocated_tail(tmp_path: Path) -> None:
    seg = open_segment(tmp_path, 40, preallocate=True, init_file_size=64 << 10)
    data = append(seg, 50, b"hello", b"there")
    seg.close_handlers()  # crash: nothing trimmed
    assert os.path.getsize(files.log_file(tmp_path, 40)) == 64 << 10
    reopened = open_segment(tmp_path, 40, exists=True, preallocate=True, init_file_size=64 << 10)
    assert reopened.size == 64 << 10
    result = reopened.recover()
    assert result.truncated_bytes == (64 << 10) - len(data)
    assert reopened.size == len(data) == os.path.getsize(files.log_file(tmp_path, 40))
    assert reopened.read_next_offset() == 52
    reopened.close()


# --- preallocation ----------------------------------------------------------------------------

def test_preallocated_segment_reads_appended_batches(tmp_path: Path) -> None:
    seg = open_segment(tmp_path, 40, preallocate=True, init_file_size=1 << 20)
    append(seg, 50, b"hello", b"there")
    second = append(seg, 60, b"alpha", b"beta")
    info = seg.read(55, 200, seg.size)
    assert info is not None and info.records == second
    seg.close()


def test_preallocated_segment_is_trimmed_on_close_and_reopens_equal(tmp_path: Path) -> None:
    seg = open_segment(tmp_path, 40, preallocate=True, init_file_size=1 << 20)
    append(seg, 50, b"hello", b"there")
    second = append(seg, 60, b"alpha", b"beta")
    old_size = seg.size
    assert seg.log.path.stat().st_size == 1 << 20
    seg.close()
    assert seg.log.path.stat().st_size == old_size
    reopened = open_segment(tmp_path, 40, exists=True, preallocate=True, init_file_size=1 << 20)
    info = reopened.read(55, 200, reopened.size)
    assert info is not None and info.records == second
    assert reopened.size == old_size == reopened.log.path.stat().st_size
    reopened.close()


def test_roll_trims_indexes_and_preallocated_log(tmp_path: Path) -> None:
    seg = open_segment(tmp_path, 0, interval=0, preallocate=True, init_file_size=1 << 16)
    for offset in range(5):
        append(seg, offset, b"v", ts=100 + offset)
    seg.on_become_inactive_segment()
    assert seg.log.path.stat().st_size == seg.size
    assert seg.offset_index.path.stat().st_size == seg.offset_index.entries * 8 == 4 * 8
    assert seg.time_index.path.stat().st_size == seg.time_index.entries * 12
    assert seg.time_index.last_entry.timestamp == 104 and seg.time_index.last_entry.offset == 4
    seg.close()


def test_delete_files_removes_every_file(tmp_path: Path) -> None:
    seg = open_segment(tmp_path, 0, interval=0)
    for offset in range(3):
        append(seg, offset, b"v")
    seg.flush()
    assert len(list(tmp_path.iterdir())) == 3
    seg.delete_files()
    assert list(tmp_path.iterdir()) == []


def test_recovery_keeps_the_transaction_index_up_to_the_recovered_end(tmp_path: Path) -> None:
    """Kafka rebuilds the .txnindex from producer state; tidelog has none, so recovery keeps the
    entries of transactions that ended inside the valid data (it used to empty the file, and the
    cleaner then kept aborted data)."""
    from tidelog.storage.txn_index import AbortedTxn

    seg = open_segment(tmp_path)
    append(seg, 40, b"a", b"b", b"c", b"d")
    seg.txn_index.append(AbortedTxn(1, 40, 41, 40))
    seg.txn_index.append(AbortedTxn(2, 42, 43, 42))
    seg.flush()
    os.truncate(seg.log.path, seg.size - 5)  # the last batch (offset 43) is torn
    seg.close()
    reopened = open_segment(tmp_path, exists=True)
    assert reopened.recover().truncated_bytes > 0
    assert reopened.txn_index.all_aborted_txns() == [AbortedTxn(1, 40, 41, 40)]
    reopened.close()
