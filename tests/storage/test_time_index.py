"""TimeIndex: Kafka's TimeIndexTest scenarios (reference §4.5), append rules, lifecycle, model-based checks."""

from __future__ import annotations

import bisect
import random
import struct
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from tidelog.errors import (
    CorruptIndexError,
    IndexFullError,
    IndexOffsetOverflowError,
    IndexStateError,
    InvalidOffsetError,
)
from tidelog.storage.files import time_index_file
from tidelog.storage.index import TimeIndex, TimestampOffset

ENTRY = 12
BASE = 45
MAX_ENTRIES = 30


def new_index(tmp_path: Path, base_offset: int = BASE, slots: int = MAX_ENTRIES) -> TimeIndex:
    return TimeIndex(time_index_file(tmp_path, base_offset), base_offset, max_index_size=slots * ENTRY)


def append_entries(index: TimeIndex, count: int) -> None:
    """Kafka's fixture: entries (10·i, base + 10·i) for i = 1..count."""
    for i in range(1, count + 1):
        index.maybe_append(i * 10, i * 10 + index.base_offset)


def expected_lookup(entries: list[tuple[int, int]], base_offset: int, target: int) -> TimestampOffset:
    slot = bisect.bisect_right([ts for ts, _ in entries], target) - 1
    return TimestampOffset(-1, base_offset) if slot < 0 else TimestampOffset(*entries[slot])


# --- preallocation, layout --------------------------------------------------------------------


def test_new_time_index_file_is_preallocated_to_whole_entries(tmp_path: Path) -> None:
    index = TimeIndex(time_index_file(tmp_path, 0), 0)
    assert index.path.stat().st_size == 10485756
    assert (index.max_entries, index.entries) == (873813, 0)
    index.close()


def test_entry_size_is_twelve_bytes_and_matches_kafka_layout(tmp_path: Path) -> None:
    assert TimeIndex.ENTRY_SIZE == 12
    index = new_index(tmp_path, base_offset=100)
    index.maybe_append(0x0102030405060708, 150)
    index.close()
    assert index.path.read_bytes() == bytes.fromhex("0102030405060708 00000032")


# --- lookups and entries ----------------------------------------------------------------------


def test_lookup_returns_largest_timestamp_at_or_below_target(tmp_path: Path) -> None:
    index = new_index(tmp_path)
    assert index.lookup(100) == TimestampOffset(-1, BASE)
    append_entries(index, MAX_ENTRIES - 1)
    assert index.lookup(9) == TimestampOffset(-1, 45)
    assert index.lookup(25) == TimestampOffset(20, 65)
    assert index.lookup(30) == TimestampOffset(30, 75)
    assert index.lookup(10**12) == TimestampOffset(290, 335)


def test_lookup_beyond_warm_section_matches_bisect(tmp_path: Path) -> None:
    rng = random.Random(3)
    index = TimeIndex(time_index_file(tmp_path, 0), 0, max_index_size=3000 * ENTRY)
    entries, ts, offset = [], 1_700_000_000_000, 0
    for _ in range(2500):  # more than the 682-entry warm section
        ts += rng.randint(1, 1000)
        offset += rng.randint(0, 40)
        entries.append((ts, offset))
        index.maybe_append(ts, offset)
    for target in [rng.randint(entries[0][0] - 10, ts + 10) for _ in range(4000)] + [t for t, _ in entries[::5]]:
        assert index.lookup(target) == expected_lookup(entries, 0, target)


def test_entry_returns_nth_entry(tmp_path: Path) -> None:
    index = new_index(tmp_path)
    append_entries(index, 10)
    assert index.entry(0) == TimestampOffset(10, 55)
    assert index.entry(9) == TimestampOffset(100, 145)


@pytest.mark.parametrize("n", [10, 29, -1])
def test_entry_outside_entries_raises_index_state_error(tmp_path: Path, n: int) -> None:
    index = new_index(tmp_path)
    append_entries(index, 10)
    with pytest.raises(IndexStateError):
        index.entry(n)


def test_last_entry_of_empty_index_is_no_timestamp_and_base_offset(tmp_path: Path) -> None:
    index = new_index(tmp_path)
    assert index.last_entry == TimestampOffset(-1, BASE)
    append_entries(index, 3)
    assert index.last_entry == TimestampOffset(30, 75)


# --- append rules -----------------------------------------------------------------------------


def test_append_to_full_index_needs_skip_full_check(tmp_path: Path) -> None:
    index = new_index(tmp_path)
    append_entries(index, MAX_ENTRIES - 1)
    assert index.is_full()
    with pytest.raises(IndexFullError):
        index.maybe_append(10000, 1000)
    with pytest.raises(InvalidOffsetError):
        index.maybe_append(10000, (MAX_ENTRIES - 2) * 10, skip_full_check=True)
    index.maybe_append(10000, 1000, skip_full_check=True)
    assert index.last_entry == TimestampOffset(10000, 1000)
    assert index.entries == MAX_ENTRIES


def test_append_with_skip_full_check_and_no_slot_raises_index_full(tmp_path: Path) -> None:
    index = new_index(tmp_path, slots=2)
    index.maybe_append(10, 50)
    index.maybe_append(20, 60, skip_full_check=True)
    with pytest.raises(IndexFullError):
        index.maybe_append(30, 70, skip_full_check=True)
    assert index.entries == 2


def test_is_full_keeps_one_slot_for_the_final_entry(tmp_path: Path) -> None:
    index = new_index(tmp_path)
    append_entries(index, MAX_ENTRIES - 2)
    assert not index.is_full()
    index.maybe_append(1000, 1000)
    assert index.is_full()


def test_append_no_timestamp_never_creates_an_entry(tmp_path: Path) -> None:
    index = new_index(tmp_path)
    index.maybe_append(-1, 50)
    index.maybe_append(-1, 60)
    assert index.entries == 0


def test_append_same_timestamp_is_ignored(tmp_path: Path) -> None:
    index = new_index(tmp_path)
    index.maybe_append(100, 50)
    index.maybe_append(100, 60)
    index.maybe_append(100, 50, skip_full_check=True)
    assert (index.entries, index.last_entry) == (1, TimestampOffset(100, 50))


def test_append_same_offset_with_larger_timestamp_is_kept(tmp_path: Path) -> None:
    index = new_index(tmp_path)
    index.maybe_append(100, 50)
    index.maybe_append(200, 50)
    assert [index.entry(n) for n in range(2)] == [TimestampOffset(100, 50), TimestampOffset(200, 50)]


def test_append_timestamp_going_back_raises_invalid_offset(tmp_path: Path) -> None:
    index = new_index(tmp_path)
    index.maybe_append(100, 50)
    with pytest.raises(InvalidOffsetError) as raised:
        index.maybe_append(99, 60)
    assert (raised.value.timestamp, raised.value.last_timestamp) == (99, 100)
    assert index.entries == 1


def test_append_offset_going_back_raises_invalid_offset(tmp_path: Path) -> None:
    index = new_index(tmp_path)
    index.maybe_append(100, 50)
    with pytest.raises(InvalidOffsetError) as raised:
        index.maybe_append(200, 49)
    assert (raised.value.offset, raised.value.last_offset) == (49, 50)


@pytest.mark.parametrize("offset", [BASE - 1, BASE + 2**31])
def test_append_offset_outside_relative_range_raises_overflow(tmp_path: Path, offset: int) -> None:
    index = new_index(tmp_path)
    with pytest.raises(IndexOffsetOverflowError):
        index.maybe_append(100, offset)
    assert index.entries == 0


def test_append_timestamp_outside_int64_raises_invalid_offset(tmp_path: Path) -> None:
    index = new_index(tmp_path)
    with pytest.raises(InvalidOffsetError):
        index.maybe_append(2**63, 50)


# --- truncation -------------------------------------------------------------------------------


def test_truncate_drops_every_entry(tmp_path: Path) -> None:
    index = new_index(tmp_path)
    append_entries(index, MAX_ENTRIES - 1)
    index.truncate()
    assert (index.entries, index.last_entry) == (0, TimestampOffset(-1, BASE))
    append_entries(index, MAX_ENTRIES - 1)
    index.truncate_to(BASE + 10)
    assert index.entries == 0


def test_truncate_to_compares_offsets_not_timestamps(tmp_path: Path) -> None:
    index = new_index(tmp_path, base_offset=40)
    for ts, offset in ((100, 50), (200, 60), (300, 70)):
        index.maybe_append(ts, offset)
    index.truncate_to(61)
    assert (index.entries, index.last_entry) == (2, TimestampOffset(200, 60))
    index.truncate_to(60)
    assert (index.entries, index.last_entry) == (1, TimestampOffset(100, 50))
    index.maybe_append(150, 55)
    assert index.lookup(160) == TimestampOffset(150, 55)


# --- reopen, resize ---------------------------------------------------------------------------


def test_resize_reports_whether_length_changed(tmp_path: Path) -> None:
    index = new_index(tmp_path)
    append_entries(index, 5)
    assert index.resize(MAX_ENTRIES * ENTRY) is False
    assert index.resize((MAX_ENTRIES - 10) * ENTRY) is True
    assert index.resize((MAX_ENTRIES + 10) * ENTRY + 11) is True
    assert (index.length, index.max_entries, index.entries) == (480, 40, 5)
    assert index.lookup(35) == TimestampOffset(30, 75)


def test_close_then_reopen_keeps_entries_and_trims_file(tmp_path: Path) -> None:
    index = new_index(tmp_path)
    append_entries(index, 7)
    before = [index.lookup(target) for target in range(0, 100, 3)]
    index.close()
    assert index.path.stat().st_size == 7 * ENTRY
    reopened = TimeIndex(index.path, BASE, max_index_size=MAX_ENTRIES * ENTRY)
    assert (reopened.entries, reopened.last_entry) == (7, TimestampOffset(70, 115))
    assert [reopened.lookup(target) for target in range(0, 100, 3)] == before
    reopened.sanity_check()
    with pytest.raises(IndexFullError):
        reopened.maybe_append(80, 125)
    reopened.resize(reopened.max_index_size)
    reopened.maybe_append(80, 125)
    assert reopened.entries == 8


# --- sanity check -----------------------------------------------------------------------------


def write_entries(path: Path, entries: list[tuple[int, int]], tail: bytes = b"") -> None:
    path.write_bytes(b"".join(struct.pack(">qi", ts, rel) for ts, rel in entries) + tail)


def test_sanity_check_passes_on_valid_index(tmp_path: Path) -> None:
    index = new_index(tmp_path)
    append_entries(index, 5)
    index.sanity_check()


def test_sanity_check_raises_when_last_offset_below_base_offset(tmp_path: Path) -> None:
    path = time_index_file(tmp_path, BASE)
    write_entries(path, [(10, 1), (20, -1)])
    with pytest.raises(CorruptIndexError) as raised:
        TimeIndex(path, BASE).sanity_check()
    assert (raised.value.path, raised.value.last_offset, raised.value.base_offset) == (path, 44, 45)


def test_sanity_check_raises_when_last_timestamp_below_first(tmp_path: Path) -> None:
    path = time_index_file(tmp_path, BASE)
    write_entries(path, [(10, 1), (20, 2), (5, 3)])
    with pytest.raises(CorruptIndexError) as raised:
        TimeIndex(path, BASE).sanity_check()
    assert (raised.value.last_timestamp, raised.value.first_timestamp) == (5, 10)


def test_sanity_check_raises_when_length_is_not_whole_entries(tmp_path: Path) -> None:
    path = time_index_file(tmp_path, BASE)
    write_entries(path, [(10, 1), (20, 2)], tail=b"\x00" * 5)
    index = TimeIndex(path, BASE)
    assert (index.entries, index.length) == (2, 29)
    with pytest.raises(CorruptIndexError) as raised:
        index.sanity_check()
    assert (raised.value.path, raised.value.length) == (path, 29)


def test_use_after_close_raises_index_state_error(tmp_path: Path) -> None:
    index = new_index(tmp_path)
    append_entries(index, 2)
    index.close()
    with pytest.raises(IndexStateError):
        index.lookup(10)
    with pytest.raises(IndexStateError):
        index.maybe_append(100, 100)
    with pytest.raises(IndexStateError):
        index.sanity_check()


# --- model-based ------------------------------------------------------------------------------


@settings(max_examples=50, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    count=st.integers(0, 1500),
    targets=st.lists(st.integers(-5, 10**6), max_size=30),
)
def test_lookup_matches_bisect_for_any_index_size(tmp_path_factory, seed: int, count: int, targets: list[int]) -> None:
    rng = random.Random(seed)
    base = rng.randint(0, 1000)
    index = TimeIndex(time_index_file(tmp_path_factory.mktemp("tidx"), base), base, max_index_size=1501 * ENTRY)
    entries, ts, offset = [], rng.randint(0, 100), base
    for _ in range(count):
        entries.append((ts, offset))
        index.maybe_append(ts, offset)
        ts += rng.randint(1, 600)
        offset += rng.randint(0, 30)
    for target in targets + [t + d for t, _ in rng.sample(entries, min(20, count)) for d in (-1, 0, 1)]:
        assert index.lookup(target) == expected_lookup(entries, base, target)
    index.delete_if_exists()


class TimeIndexMachine(RuleBasedStateMachine):
    """maybe_append, truncate_to, reopen and lookups against a sorted Python list."""

    BASE = 500
    SLOTS = 25

    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="time-index-"))
        self.index = TimeIndex(time_index_file(self.dir, self.BASE), self.BASE, self.SLOTS * ENTRY)
        self.model: list[tuple[int, int]] = []

    def last(self) -> tuple[int, int]:
        return self.model[-1] if self.model else (-1, self.BASE)

    @rule(ts_step=st.integers(0, 500), offset_step=st.integers(0, 100), skip=st.booleans())
    def maybe_append(self, ts_step: int, offset_step: int, skip: bool) -> None:
        last_ts, last_offset = self.last()
        ts, offset = last_ts + ts_step, last_offset + offset_step
        entries = len(self.model)
        full = entries >= self.SLOTS and ts > last_ts if skip else entries >= self.SLOTS - 1
        try:
            self.index.maybe_append(ts, offset, skip_full_check=skip)
        except IndexFullError:
            assert full
            return
        assert not full
        if ts > last_ts:
            self.model.append((ts, offset))

    @rule(ts_back=st.integers(0, 50), offset_back=st.integers(0, 50))
    def maybe_append_going_back_is_refused(self, ts_back: int, offset_back: int) -> None:
        last_ts, last_offset = self.last()
        if not self.model or (ts_back == 0 and offset_back == 0):
            return
        with pytest.raises(InvalidOffsetError):
            self.index.maybe_append(last_ts - ts_back, last_offset - offset_back, skip_full_check=True)

    @rule(ts=st.integers(-5, 15_000))
    def lookup(self, ts: int) -> None:
        assert self.index.lookup(ts) == expected_lookup(self.model, self.BASE, ts)

    @rule(offset=st.integers(BASE - 5, BASE + 3_000))
    def truncate_to(self, offset: int) -> None:
        self.index.truncate_to(offset)
        self.model = [e for e in self.model if e[1] < offset]

    @rule()
    def reopen(self) -> None:
        self.index.close()
        assert self.index.path.stat().st_size == len(self.model) * ENTRY
        self.index = TimeIndex(self.index.path, self.BASE, self.SLOTS * ENTRY)
        self.index.sanity_check()
        self.index.resize(self.SLOTS * ENTRY)

    @invariant()
    def state_matches_model(self) -> None:
        assert self.index.entries == len(self.model)
        assert self.index.last_entry == TimestampOffset(*self.last())

    def teardown(self) -> None:
        self.index.delete_if_exists()
        self.dir.rmdir()


TimeIndexMachine.TestCase.settings = settings(max_examples=80, stateful_step_count=40, deadline=None)
test_time_index_matches_sorted_list_model = TimeIndexMachine.TestCase


def test_read_last_entry_reads_the_file_without_mapping_it(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000100.timeindex"
    index = TimeIndex(path, 100, 120)
    index.maybe_append(5_000, 103)
    index.maybe_append(7_000, 109)
    index.trim_to_valid_size()
    index.close()
    assert TimeIndex.read_last_entry(path, 100) == TimestampOffset(7_000, 109)
    assert TimeIndex.read_last_entry(tmp_path / "missing.timeindex", 100) == TimestampOffset(-1, 100)
    path.write_bytes(b"")
    assert TimeIndex.read_last_entry(path, 100) == TimestampOffset(-1, 100)


@settings(max_examples=80, deadline=None)
@given(raw=st.binary(max_size=40))
def test_check_file_agrees_with_sanity_check_of_the_mapped_index(raw: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "00000000000000000045.timeindex"
        path.write_bytes(raw)
        outcomes = []
        for check in (lambda: TimeIndex.check_file(path, 45), lambda: _mapped_check(path)):
            try:
                check()
                outcomes.append(None)
            except CorruptIndexError as e:
                outcomes.append(e.message)
        assert outcomes[0] == outcomes[1]


def _mapped_check(path: Path) -> None:
    index = TimeIndex(path, 45)
    try:
        index.sanity_check()
    finally:
        index.close_handler()
