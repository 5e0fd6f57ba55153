"""OffsetIndex: Kafka's OffsetIndexTest scenarios (reference §4.5), layout, lifecycle, model-based checks."""

from __future__ import annotations

import bisect
import os
import random
import struct
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from tidelog.errors import (
    ConfigError,
    CorruptIndexError,
    IndexFullError,
    IndexOffsetOverflowError,
    IndexStateError,
    InvalidOffsetError,
    StorageError,
)
from tidelog.storage.files import offset_index_file
from tidelog.storage.index import OffsetIndex, OffsetPosition

ENTRY = 8


def new_index(tmp_path: Path, base_offset: int = 45, slots: int = 30) -> OffsetIndex:
    return OffsetIndex(offset_index_file(tmp_path, base_offset), base_offset, max_index_size=slots * ENTRY)


def expected_lookup(entries: list[tuple[int, int]], base_offset: int, target: int) -> OffsetPosition:
    slot = bisect.bisect_right([offset for offset, _ in entries], target) - 1
    return OffsetPosition(base_offset, 0) if slot < 0 else OffsetPosition(*entries[slot])


# --- preallocation, layout --------------------------------------------------------------------


def test_new_index_file_is_preallocated_to_max_size(tmp_path: Path) -> None:
    index = OffsetIndex(offset_index_file(tmp_path, 0), 0)
    assert index.path.stat().st_size == 10485760
    assert (index.entries, index.max_entries, index.length) == (0, 1310720, 10485760)
    index.close()


def test_new_index_file_size_rounds_down_to_whole_entries(tmp_path: Path) -> None:
    index = OffsetIndex(offset_index_file(tmp_path, 0), 0, max_index_size=100)
    assert index.path.stat().st_size == 96
    assert index.max_entries == 12


def test_new_index_smaller_than_one_entry_is_refused_and_leaves_no_file(tmp_path: Path) -> None:
    path = offset_index_file(tmp_path, 0)
    with pytest.raises(ConfigError):
        OffsetIndex(path, 0, max_index_size=7)
    assert not path.exists()


def test_entry_bytes_match_kafka_layout(tmp_path: Path) -> None:
    index = OffsetIndex(offset_index_file(tmp_path, 100), 100, max_index_size=64)
    index.append(150, 4096)
    index.close()
    assert index.path.read_bytes() == bytes.fromhex("00000032 00001000")


def test_existing_file_is_loaded_with_entries_from_its_length(tmp_path: Path) -> None:
    path = offset_index_file(tmp_path, 10)
    path.write_bytes(struct.pack(">iiii", 1, 0, 5, 900))
    index = OffsetIndex(path, 10)
    assert (index.entries, index.last_offset, index.max_entries, index.length) == (2, 15, 2, 16)
    assert index.is_full()
    assert index.lookup(14) == OffsetPosition(11, 0)


def test_existing_file_is_not_resized_on_open(tmp_path: Path) -> None:
    path = offset_index_file(tmp_path, 10)
    path.write_bytes(struct.pack(">ii", 1, 0))
    OffsetIndex(path, 10).close_handler()
    assert path.stat().st_size == 8


# --- lookups ----------------------------------------------------------------------------------


def test_lookup_random_offsets_finds_exact_hits_and_floor_entries(tmp_path: Path) -> None:
    rng = random.Random(45)
    index = new_index(tmp_path, base_offset=45, slots=30)
    offsets = sorted(rng.sample(range(46, 45 + 1000), 30))
    entries = [(offset, position) for position, offset in enumerate(offsets)]
    for offset, position in entries:
        index.append(offset, position)
    for offset, position in entries:
        assert index.lookup(offset) == OffsetPosition(offset, position)
    for target in range(0, 45 + 1100):
        assert index.lookup(target) == expected_lookup(entries, 45, target)


def test_lookup_empty_index_returns_base_offset_and_zero(tmp_path: Path) -> None:
    index = new_index(tmp_path)
    for target in (0, 44, 45, 46, 10**12):
        assert index.lookup(target) == OffsetPosition(45, 0)


def test_lookup_full_index_finds_last_entry(tmp_path: Path) -> None:
    index = new_index(tmp_path, slots=30)
    for i in range(30):
        index.append(46 + i, i * 10)
    assert index.is_full()
    assert index.lookup(46 + 29) == OffsetPosition(75, 290)
    assert index.lookup(10**15) == OffsetPosition(75, 290)
    assert index.lookup(45) == OffsetPosition(45, 0)


def test_lookup_beyond_warm_section_matches_bisect(tmp_path: Path) -> None:
    rng = random.Random(7)
    index = OffsetIndex(offset_index_file(tmp_path, 1000), 1000, max_index_size=4000 * ENTRY)
    offset, entries = 1000, []
    for i in range(3500):  # more than the 1024-entry warm section
        offset += rng.randint(1, 50)
        entries.append((offset, i * 4096))
        index.append(offset, i * 4096)
    targets = [rng.randint(900, offset + 100) for _ in range(5000)] + [o for o, _ in entries[::7]]
    for target in targets:
        assert index.lookup(target) == expected_lookup(entries, 1000, target)


def test_entry_returns_nth_entry(tmp_path: Path) -> None:
    index = new_index(tmp_path)
    for i in range(10):
        index.append(46 + 2 * i, 100 * i)
    assert [index.entry(n) for n in (0, 4, 9)] == [
        OffsetPosition(46, 0), OffsetPosition(54, 400), OffsetPosition(64, 900)
    ]


@pytest.mark.parametrize("n", [2, 3, 29, -1])
def test_entry_outside_entries_raises_index_state_error(tmp_path: Path, n: int) -> None:
    index = new_index(tmp_path)
    index.append(50, 0)
    index.append(51, 10)
    with pytest.raises(IndexStateError) as raised:
        index.entry(n)
    assert raised.value.context["n"] == n


def test_fetch_upper_bound_offset_returns_first_entry_at_or_past_fetch_end(tmp_path: Path) -> None:
    index = new_index(tmp_path)
    first, second, third, fourth = (OffsetPosition(45 + i, p) for i, p in enumerate((0, 10, 23, 37)))
    assert index.fetch_upper_bound_offset(first.position, 5) is None
    for entry in (first, second, third, fourth):
        index.append(entry.offset, entry.position)
    cases = [
        (first, 5, second), (first, 10, second), (first, 22, third), (first, 23, third),
        (second, 24, fourth), (fourth, 1, None), (first, 200, None), (second, 200, None),
    ]
    for start, size, expected in cases:
        assert index.fetch_upper_bound_offset(start.position, size) == expected, (start, size)


# --- appends ----------------------------------------------------------------------------------


def test_append_to_full_index_raises_index_full(tmp_path: Path) -> None:
    index = new_index(tmp_path, slots=30)
    for i in range(30):
        index.append(46 + i, i)
    with pytest.raises(IndexFullError):
        index.append(100, 100)
    assert index.entries == 30


@pytest.mark.parametrize("second", [50, 51])
def test_append_offset_not_above_last_raises_invalid_offset(tmp_path: Path, second: int) -> None:
    index = new_index(tmp_path)
    index.append(51, 0)
    with pytest.raises(InvalidOffsetError) as raised:
        index.append(second, 1)
    assert (raised.value.offset, raised.value.last_offset) == (second, 51)
    assert index.entries == 1


@pytest.mark.parametrize("offset", [44, 45 + 2**31])
def test_append_offset_outside_relative_range_raises_overflow(tmp_path: Path, offset: int) -> None:
    index = new_index(tmp_path)
    with pytest.raises(IndexOffsetOverflowError):
        index.append(offset, 0)
    assert not index.can_append_offset(offset)
    assert index.entries == 0


def test_append_at_extremes_of_relative_range_is_accepted(tmp_path: Path) -> None:
    index = new_index(tmp_path)
    index.append(45, 0)
    index.append(45 + 2**31 - 1, 2**31 - 1)
    assert index.lookup(10**12) == OffsetPosition(45 + 2**31 - 1, 2**31 - 1)
    index.sanity_check()


@pytest.mark.parametrize("position", [-1, 2**31])
def test_append_position_outside_int32_raises_invalid_offset(tmp_path: Path, position: int) -> None:
    index = new_index(tmp_path)
    with pytest.raises(InvalidOffsetError):
        index.append(50, position)


# --- truncation -------------------------------------------------------------------------------


def test_truncate_to_drops_entries_at_or_above_offset(tmp_path: Path) -> None:
    index = OffsetIndex(offset_index_file(tmp_path, 0), 0, max_index_size=10 * ENTRY)
    for i in range(1, 10):
        index.append(i, i)

    index.truncate_to(12)
    assert (index.lookup(10), index.last_offset, index.entries) == (OffsetPosition(9, 9), 9, 9)
    index.append(10, 10)
    index.truncate_to(10)
    assert (index.lookup(10), index.last_offset) == (OffsetPosition(9, 9), 9)
    index.append(10, 10)
    index.truncate_to(9)
    assert (index.lookup(10), index.last_offset) == (OffsetPosition(8, 8), 8)
    index.append(9, 9)
    index.truncate_to(5)
    assert (index.lookup(10), index.last_offset, index.entries) == (OffsetPosition(4, 4), 4, 4)
    index.append(5, 5)
    index.truncate()
    assert (index.entries, index.last_offset, index.lookup(3)) == (0, 0, OffsetPosition(0, 0))
    index.append(0, 0)
    assert index.entries == 1


def test_truncate_to_between_entries_keeps_lower_entry(tmp_path: Path) -> None:
    index = new_index(tmp_path)
    for offset in (50, 60, 70):
        index.append(offset, offset)
    index.truncate_to(65)
    assert (index.entries, index.last_offset) == (2, 60)
    index.truncate_to(45)
    assert (index.entries, index.last_offset) == (0, 45)


def test_reset_drops_entries_and_grows_file_to_max(tmp_path: Path) -> None:
    index = new_index(tmp_path, slots=30)
    index.append(50, 0)
    index.trim_to_valid_size()
    index.reset()
    assert (index.entries, index.length, index.max_entries) == (0, 240, 30)


# --- reopen, resize, trim ---------------------------------------------------------------------


def test_close_trims_file_to_entries(tmp_path: Path) -> None:
    index = new_index(tmp_path, slots=30)
    index.append(50, 0)
    index.append(60, 4096)
    index.close()
    assert index.path.stat().st_size == 2 * ENTRY


def test_reopen_read_only_keeps_lookups_and_refuses_append(tmp_path: Path) -> None:
    index = new_index(tmp_path)
    index.append(45 + 3, 30)
    index.append(45 + 4, 40)
    before = [index.lookup(target) for target in range(40, 55)]
    index.close()
    reopened = OffsetIndex(index.path, 45, max_index_size=30 * ENTRY, writable=False)
    assert reopened.entries == 2
    assert [reopened.lookup(target) for target in range(40, 55)] == before
    with pytest.raises(IndexFullError):
        reopened.append(53, 50)
    with pytest.raises(IndexStateError):
        reopened.resize(30 * ENTRY)
    reopened.close()
    assert index.path.stat().st_size == 2 * ENTRY


def test_reopen_writable_then_resize_allows_appends(tmp_path: Path) -> None:
    index = new_index(tmp_path)
    index.append(50, 0)
    index.close()
    reopened = OffsetIndex(index.path, 45, max_index_size=30 * ENTRY)
    assert reopened.is_full()
    assert reopened.resize(reopened.max_index_size)
    reopened.append(51, 10)
    assert (reopened.entries, reopened.max_entries, reopened.lookup(52)) == (2, 30, OffsetPosition(51, 10))


def test_resize_reports_whether_length_changed(tmp_path: Path) -> None:
    index = new_index(tmp_path, slots=30)
    index.append(50, 0)
    assert index.resize(30 * ENTRY) is False
    assert index.resize(30 * ENTRY + 7) is False  # rounds down to the same length
    assert index.resize(10 * ENTRY) is True
    assert index.path.stat().st_size == 80
    assert index.resize(40 * ENTRY + 3) is True
    assert (index.length, index.max_entries, index.entries) == (320, 40, 1)
    assert index.lookup(55) == OffsetPosition(50, 0)


def test_resize_below_entries_raises_and_keeps_file(tmp_path: Path) -> None:
    index = new_index(tmp_path, slots=30)
    for offset in (50, 51, 52):
        index.append(offset, offset)
    with pytest.raises(IndexStateError):
        index.resize(2 * ENTRY)
    assert (index.length, index.entries, index.lookup(60)) == (240, 3, OffsetPosition(52, 52))


def test_empty_index_trims_to_zero_bytes_and_reopens(tmp_path: Path) -> None:
    index = new_index(tmp_path)
    index.close()
    assert index.path.stat().st_size == 0
    reopened = OffsetIndex(index.path, 45)
    assert (reopened.entries, reopened.max_entries, reopened.lookup(50)) == (0, 0, OffsetPosition(45, 0))
    with pytest.raises(IndexFullError):
        reopened.append(50, 0)
    assert reopened.resize(reopened.max_index_size)
    reopened.append(50, 0)


def test_entries_are_in_the_file_as_relative_offset_and_position_and_reopen_equal(tmp_path: Path) -> None:
    # flush is an fsync: what it guarantees (surviving a power cut) cannot be observed here
    index = new_index(tmp_path)
    index.append(47, 512)
    index.append(50, 700)
    index.flush()
    assert index.path.read_bytes()[:16] == struct.pack(">iiii", 2, 512, 5, 700)
    index.close()
    reopened = OffsetIndex(index.path, 45)
    assert reopened.entries == 2 and [reopened.lookup(o) for o in (47, 49, 50)] == [
        OffsetPosition(47, 512), OffsetPosition(47, 512), OffsetPosition(50, 700)
    ]
    reopened.close()


# --- sanity check -----------------------------------------------------------------------------


def test_sanity_check_passes_when_last_offset_equals_base_offset(tmp_path: Path) -> None:
    index = new_index(tmp_path)
    index.append(45, 0)
    index.sanity_check()
    index.close()
    OffsetIndex(index.path, 45).sanity_check()


def test_sanity_check_raises_when_last_offset_below_base_offset(tmp_path: Path) -> None:
    path = offset_index_file(tmp_path, 45)
    path.write_bytes(struct.pack(">iiii", 1, 0, -3, 80))
    index = OffsetIndex(path, 45)
    with pytest.raises(CorruptIndexError) as raised:
        index.sanity_check()
    error = raised.value
    assert (error.path, error.entries, error.last_offset, error.base_offset, error.length) == (path, 2, 42, 45, 16)


def test_sanity_check_raises_when_length_is_not_whole_entries(tmp_path: Path) -> None:
    path = offset_index_file(tmp_path, 45)
    path.write_bytes(struct.pack(">ii", 1, 0) + b"\x00\x00\x00\x07\x00")
    index = OffsetIndex(path, 45)
    assert index.entries == 1
    with pytest.raises(CorruptIndexError) as raised:
        index.sanity_check()
    assert (raised.value.path, raised.value.length) == (path, 13)


# --- file operations and closed state ---------------------------------------------------------


def test_access_after_close_handler_raises_index_state_error(tmp_path: Path) -> None:
    index = new_index(tmp_path)
    index.append(50, 0)
    index.close_handler()
    for access in (lambda: index.lookup(50), lambda: index.entry(0), lambda: index.append(51, 1), index.flush):
        with pytest.raises(IndexStateError):
            access()
    assert index.path.stat().st_size == 240  # close_handler does not trim


def test_rename_to_while_mapped_keeps_working(tmp_path: Path) -> None:
    index = new_index(tmp_path)
    index.append(50, 0)
    target = tmp_path / (index.path.name + ".deleted")
    old = index.path
    index.rename_to(target)
    index.append(51, 10)
    assert (index.path, old.exists(), target.exists()) == (target, False, True)
    assert index.lookup(60) == OffsetPosition(51, 10)
    index.close()
    assert target.stat().st_size == 16


def test_rename_to_without_file_only_changes_path(tmp_path: Path) -> None:
    index = new_index(tmp_path)
    index.delete_if_exists()
    index.rename_to(tmp_path / "other.index")
    assert index.path == tmp_path / "other.index"
    assert not index.path.exists()


def test_update_parent_dir_keeps_file_name(tmp_path: Path) -> None:
    index = new_index(tmp_path)
    moved = tmp_path / "moved"
    moved.mkdir()
    os.replace(index.path, moved / index.path.name)
    index.update_parent_dir(moved)
    assert index.path == moved / offset_index_file(tmp_path, 45).name
    index.close()
    assert index.path.stat().st_size == 0


def test_delete_if_exists_reports_whether_file_was_deleted(tmp_path: Path) -> None:
    index = new_index(tmp_path)
    assert index.delete_if_exists() is True
    assert not index.path.exists()
    assert index.delete_if_exists() is False


def test_read_only_open_of_missing_file_raises_storage_error_naming_it(tmp_path: Path) -> None:
    path = offset_index_file(tmp_path, 0)
    with pytest.raises(StorageError, match="cannot open offset index file") as raised:
        OffsetIndex(path, 0, writable=False)
    assert raised.value.path == path and isinstance(raised.value.__cause__, FileNotFoundError)


# --- model-based ------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    count=st.integers(0, 2600),
    targets=st.lists(st.integers(-10, 200_000), max_size=40),
)
def test_lookup_matches_bisect_for_any_index_size(tmp_path_factory, seed: int, count: int, targets: list[int]) -> None:
    rng = random.Random(seed)
    base = rng.randint(0, 1000)
    path = offset_index_file(tmp_path_factory.mktemp("idx"), base)
    index = OffsetIndex(path, base, max_index_size=2600 * ENTRY)
    entries, offset = [], base + rng.randint(0, 3)
    for i in range(count):
        entries.append((offset, i * 100))
        index.append(offset, i * 100)
        offset += rng.randint(1, 70)
    for target in targets + [o + d for o, _ in rng.sample(entries, min(20, count)) for d in (-1, 0, 1)]:
        assert index.lookup(target) == expected_lookup(entries, base, target)
    index.delete_if_exists()


class OffsetIndexMachine(RuleBasedStateMachine):
    """Appends, truncations, reopens and lookups against a sorted Python list."""

    BASE = 1000
    SLOTS = 40

    def __init__(self) -> None:
        super().__init__()
        import tempfile

        self.dir = Path(tempfile.mkdtemp(prefix="offset-index-"))
        self.index = OffsetIndex(offset_index_file(self.dir, self.BASE), self.BASE, self.SLOTS * ENTRY)
        self.model: list[tuple[int, int]] = []

    def next_offset(self) -> int:
        return self.model[-1][0] if self.model else self.BASE - 1

    @precondition(lambda self: len(self.model) < self.SLOTS)
    @rule(gap=st.integers(1, 300), size=st.integers(0, 5000))
    def append(self, gap: int, size: int) -> None:
        offset = self.next_offset() + gap
        position = self.model[-1][1] + size if self.model else size
        self.index.append(offset, position)
        self.model.append((offset, position))

    @precondition(lambda self: len(self.model) > 0)
    @rule(back=st.integers(0, 50))
    def append_not_increasing_is_refused(self, back: int) -> None:
        if len(self.model) >= self.SLOTS:
            return
        try:
            self.index.append(self.model[-1][0] - back, 0)
        except InvalidOffsetError:
            return
        raise AssertionError("append of a non-increasing offset was accepted")

    @rule(offset=st.integers(BASE - 20, BASE + 13_000))
    def lookup(self, offset: int) -> None:
        assert self.index.lookup(offset) == expected_lookup(self.model, self.BASE, offset)

    @rule(position=st.integers(0, 150_000), size=st.integers(0, 20_000))
    def fetch_upper_bound(self, position: int, size: int) -> None:
        later = [OffsetPosition(*e) for e in self.model if e[1] >= position + size]
        assert self.index.fetch_upper_bound_offset(position, size) == (later[0] if later else None)

    @rule(offset=st.integers(BASE - 5, BASE + 13_000))
    def truncate_to(self, offset: int) -> None:
        self.index.truncate_to(offset)
        self.model = [e for e in self.model if e[0] < offset]

    @rule()
    def reopen(self) -> None:
        self.index.close()
        assert self.index.path.stat().st_size == len(self.model) * ENTRY
        self.index = OffsetIndex(self.index.path, self.BASE, self.SLOTS * ENTRY)
        self.index.sanity_check()
        self.index.resize(self.SLOTS * ENTRY)

    @invariant()
    def state_matches_model(self) -> None:
        assert self.index.entries == len(self.model)
        assert self.index.last_offset == (self.model[-1][0] if self.model else self.BASE)
        assert self.index.is_full() == (len(self.model) >= self.SLOTS)

    def teardown(self) -> None:
        self.index.delete_if_exists()
        self.dir.rmdir()


OffsetIndexMachine.TestCase.settings = settings(max_examples=80, stateful_step_count=40, deadline=None)
test_offset_index_matches_sorted_list_model = OffsetIndexMachine.TestCase


@settings(max_examples=80, deadline=None)
@given(raw=st.binary(max_size=40))
def test_check_file_agrees_with_sanity_check_of_the_mapped_index(raw: bytes) -> None:
    """The loader checks files without mapping them; both checks must judge every file alike."""
    with tempfile.TemporaryDirectory() as tmp:
        path = offset_index_file(Path(tmp), 45)
        path.write_bytes(raw)
        outcomes = []
        for check in (lambda: OffsetIndex.check_file(path, 45), lambda: _mapped_check(path)):
            try:
                check()
                outcomes.append(None)
            except CorruptIndexError as e:
                outcomes.append(e.message)
        assert outcomes[0] == outcomes[1]


def _mapped_check(path: Path) -> None:
    index = OffsetIndex(path, 45)
    try:
        index.sanity_check()
    finally:
        index.close_handler()
