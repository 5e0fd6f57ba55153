"""``is_full`` of both indexes stays right as entries and file length change (it is kept as a flag
that the roll check reads on every append, not recomputed)."""

from __future__ import annotations

from pathlib import Path

from tidelog.storage.index import OffsetIndex, TimeIndex


def _recomputed(index: OffsetIndex | TimeIndex) -> bool:
    kept = 1 if isinstance(index, TimeIndex) else 0
    return index.entries >= index.max_entries - kept


def test_offset_index_full_follows_appends_truncation_and_resize(tmp_path: Path) -> None:
    index = OffsetIndex(tmp_path / "0.index", 0, max_index_size=4 * 8)
    states = [index.is_full()]
    for offset in range(1, 5):
        index.append(offset, offset * 10)
        states.append(index.is_full())
        assert index.is_full() == _recomputed(index)
    assert states == [False, False, False, False, True]
    index.truncate_to(3)
    assert not index.is_full() and index.is_full() == _recomputed(index)
    index.trim_to_valid_size()  # the file now holds exactly its entries
    assert index.is_full() and index.is_full() == _recomputed(index)
    index.resize(64)
    assert not index.is_full()
    index.truncate()
    assert not index.is_full()
    index.close()


def test_time_index_keeps_one_slot_and_tracks_it(tmp_path: Path) -> None:
    index = TimeIndex(tmp_path / "0.timeindex", 0, max_index_size=3 * 12)
    index.maybe_append(100, 1)
    assert not index.is_full()
    index.maybe_append(200, 2)
    assert index.is_full() and index.is_full() == _recomputed(index)  # the last slot is the roll's
    index.maybe_append(300, 3, skip_full_check=True)
    assert index.is_full()
    index.truncate_to(2)
    assert not index.is_full() and index.is_full() == _recomputed(index)
    index.close()


def test_a_reopened_trimmed_index_is_full_until_resized(tmp_path: Path) -> None:
    path = tmp_path / "0.index"
    index = OffsetIndex(path, 0, max_index_size=1024)
    index.append(1, 0)
    index.close()  # trims to one entry
    reopened = OffsetIndex(path, 0, max_index_size=1024)
    assert reopened.is_full()
    reopened.resize(1024)
    assert not reopened.is_full()
    reopened.close()
