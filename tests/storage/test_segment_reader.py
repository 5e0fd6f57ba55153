"""The one segment read path (storage.segment_reader): what the broker's LogSegment and a
lock-free reader (log_view) get from it is the same, and a vanished segment says "retry"."""

from __future__ import annotations

from pathlib import Path

import pytest
from storage_helpers import T0, MakeLog, batch

from tidelog.storage.segment_reader import SegmentReplacedError, offset_for_timestamp, open_segment


def _filled(make_log: MakeLog):  # type: ignore[no-untyped-def]
    log = make_log(segment_bytes=1 << 20, index_interval_bytes=64)
    for i in range(40):
        # timestamps go up and down, so the time index's floor is not the first record reaching T
        log.append_as_leader(batch(b"v%d" % i, b"w%d" % i, timestamps=[T0 + (i * 7) % 23, T0 + (i * 5) % 19]),
                             leader_epoch=i // 10)
    log.flush()
    return log, log.active_segment


def test_the_broker_and_a_lock_free_reader_locate_the_same_batches(make_log: MakeLog) -> None:
    _, segment = _filled(make_log)
    with open_segment(segment.log.path, segment.base_offset) as reader:
        for offset in range(0, 82):
            ours = segment.translate_offset(offset)
            theirs = reader.search_for_offset(offset, reader.checked_start(segment.offset_index.lookup(offset).position))
            assert ours == theirs


def test_offset_for_timestamp_is_kafkas_on_both_sides(make_log: MakeLog) -> None:
    log, segment = _filled(make_log)
    records = [(r.offset, r.timestamp) for _, b in segment.log.batches() for r in b.records()]
    with open_segment(segment.log.path, segment.base_offset) as reader:
        for target in range(T0 - 1, T0 + 25):
            expected = next((o for o, t in records if t >= target), None)
            ours = segment.find_offset_by_timestamp(target, 0)
            theirs = offset_for_timestamp(reader, segment.time_index.lookup(target).offset,
                                          lambda o: segment.offset_index.lookup(o).position, target, 0)
            assert (ours.offset if ours else None) == (theirs.offset if theirs else None) == expected
            assert ours == theirs


def test_a_position_that_is_not_a_batch_restarts_at_the_segment_start(make_log: MakeLog) -> None:
    _, segment = _filled(make_log)
    first = segment.translate_offset(10)
    assert first is not None
    with open_segment(segment.log.path, segment.base_offset) as reader:
        assert reader.checked_start(first.position) == first.position
        assert reader.checked_start(first.position + 3) == 0
        assert reader.checked_start(segment.size + 100) == 0


def test_a_vanished_segment_says_retry(tmp_path: Path) -> None:
    with pytest.raises(SegmentReplacedError) as raised:
        with open_segment(tmp_path / "00000000000000000000.log", 0):
            pass
    assert isinstance(raised.value, FileNotFoundError)  # callers that re-list on a vanished file keep working
