"""``append_entries`` of both indexes (used by index rebuilds): the same file bytes, state and
errors as appending the entries one by one, with nothing written when a check fails."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidelog.errors import IndexFullError, IndexOffsetOverflowError, InvalidOffsetError
from tidelog.storage.files import offset_index_file, time_index_file
from tidelog.storage.index import OffsetIndex, TimeIndex

BASE = 100
SLOTS = 40


def offset_index(dir: Path, name: str = "a", slots: int = SLOTS) -> OffsetIndex:
    (dir / name).mkdir(exist_ok=True)
    return OffsetIndex(offset_index_file(dir / name, BASE), BASE, max_index_size=slots * 8)


def time_index(dir: Path, name: str = "a", slots: int = SLOTS) -> TimeIndex:
    (dir / name).mkdir(exist_ok=True)
    return TimeIndex(time_index_file(dir / name, BASE), BASE, max_index_size=slots * 12)


def file_bytes(index: OffsetIndex | TimeIndex) -> bytes:
    index.flush()
    return index.path.read_bytes()[: index.size_in_bytes]


increasing_offsets = st.lists(st.integers(1, 1000), min_size=0, max_size=30).map(
    lambda steps: (BASE + np.cumsum(steps, dtype=np.int64)).tolist())


@settings(max_examples=60, deadline=None)
@given(prefix=st.integers(0, 5), offsets=increasing_offsets, seed=st.integers(0, 2**32 - 1))
def test_offset_index_bulk_append_equals_appends_one_by_one(prefix: int, offsets: list[int], seed: int) -> None:
    positions = sorted(np.random.default_rng(seed).integers(0, 2**31 - 1, len(offsets)).tolist())
    with tempfile.TemporaryDirectory() as tmp:
        one, bulk = offset_index(Path(tmp), "one"), offset_index(Path(tmp), "bulk")
        for index in (one, bulk):
            for i in range(prefix):  # entries already there, below the new ones
                index.append(BASE + i, i)
        head = offsets if not prefix else [o + prefix for o in offsets]
        for offset, position in zip(head, positions):
            one.append(offset, position)
        bulk.append_entries(np.asarray(head, np.int64), np.asarray(positions, np.int64))
        assert file_bytes(bulk) == file_bytes(one)
        assert (bulk.entries, bulk.last_offset) == (one.entries, one.last_offset)
        one.close()
        bulk.close()


@settings(max_examples=60, deadline=None)
@given(steps=st.lists(st.tuples(st.integers(0, 50), st.integers(-5, 30)), max_size=30),
       start=st.integers(-1, 5))
def test_time_index_bulk_append_equals_maybe_append_one_by_one(steps: list[tuple[int, int]], start: int) -> None:
    # non-decreasing offsets and timestamps (with repeats, and -1 at the start), as rebuilds pass them
    offsets = (BASE + np.cumsum([s for s, _ in steps], dtype=np.int64)).tolist()
    timestamps = np.maximum.accumulate(start + np.cumsum([max(t, 0) for _, t in steps], dtype=np.int64)).tolist()
    with tempfile.TemporaryDirectory() as tmp:
        one, bulk = time_index(Path(tmp), "one"), time_index(Path(tmp), "bulk")
        if start >= 0:  # an entry already there, not above the new ones; -1 starts an empty index
            for index in (one, bulk):
                index.maybe_append(0, BASE)
        for timestamp, offset in zip(timestamps, offsets):
            one.maybe_append(timestamp, offset)
        bulk.append_entries(np.asarray(timestamps, np.int64), np.asarray(offsets, np.int64))
        assert file_bytes(bulk) == file_bytes(one)
        assert (bulk.entries, bulk.last_entry) == (one.entries, one.last_entry)
        one.close()
        bulk.close()


def test_offset_index_bulk_append_refuses_a_batch_that_goes_back_and_writes_nothing(tmp_path: Path) -> None:
    index = offset_index(tmp_path)
    index.append(BASE + 10, 0)
    with pytest.raises(InvalidOffsetError, match="not above the last offset") as error:
        index.append_entries(np.array([BASE + 20, BASE + 20]), np.array([10, 20]))
    assert error.value.context["offset"] == BASE + 20
    with pytest.raises(InvalidOffsetError, match="not above the last offset"):
        index.append_entries(np.array([BASE + 10]), np.array([10]))  # equal to the existing last entry
    assert (index.entries, index.last_offset) == (1, BASE + 10)
    index.close()


def test_offset_index_bulk_append_refuses_overflow_bad_positions_and_a_full_index(tmp_path: Path) -> None:
    index = offset_index(tmp_path, slots=3)
    with pytest.raises(IndexOffsetOverflowError):
        index.append_entries(np.array([BASE + 1, BASE + 2**31]), np.array([0, 1]))
    with pytest.raises(InvalidOffsetError, match="position outside"):
        index.append_entries(np.array([BASE + 1, BASE + 2]), np.array([0, -1]))
    with pytest.raises(IndexFullError):
        index.append_entries(np.arange(BASE + 1, BASE + 5), np.arange(4))
    assert index.entries == 0
    index.append_entries(np.arange(BASE + 1, BASE + 4), np.arange(3))
    assert index.is_full() and index.last_offset == BASE + 3
    index.close()


def test_time_index_bulk_append_refuses_going_back_and_keeps_the_slot_for_the_roll(tmp_path: Path) -> None:
    index = time_index(tmp_path, slots=4)
    index.maybe_append(50, BASE + 5)
    with pytest.raises(InvalidOffsetError, match="back in time"):
        index.append_entries(np.array([60, 55]), np.array([BASE + 6, BASE + 7]))
    with pytest.raises(InvalidOffsetError, match="back in offset"):
        index.append_entries(np.array([60, 70]), np.array([BASE + 6, BASE + 5]))
    with pytest.raises(InvalidOffsetError, match="back in offset"):
        index.append_entries(np.array([60]), np.array([BASE + 4]))  # below the existing last entry
    with pytest.raises(IndexFullError):  # 1 + 3 entries would leave no slot for a roll's final entry
        index.append_entries(np.array([60, 70, 80]), np.array([BASE + 6, BASE + 7, BASE + 8]))
    assert index.entries == 1
    index.append_entries(np.array([50, 60, 60, 70]), np.array([BASE + 5, BASE + 6, BASE + 7, BASE + 8]))
    assert index.entries == 3 and index.last_entry.timestamp == 70
    index.close()
