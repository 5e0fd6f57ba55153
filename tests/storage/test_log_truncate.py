"""Truncation: UnifiedLogTest / LocalLogTest truncation scenarios (kafka-storage.md §3.8, §3.5)."""

from __future__ import annotations

from pathlib import Path

import pytest
from storage_helpers import T0, MakeLog, batch, read_all, segment_names, single

from tests.fd_helpers import descriptors_under
from tidelog.errors import OffsetOutOfRangeError
from tidelog.storage.checkpoints import LEADER_EPOCH_CHECKPOINT_FILE, LeaderEpochCheckpointFile
from tidelog.testing import FakeClock


def test_truncate_to(make_log: MakeLog) -> None:
    per_segment = 10
    log = make_log(segment_bytes=per_segment * len(single()))
    for _ in range(per_segment):
        log.append_as_leader(single())
    assert log.num_segments == 1 and log.log_end_offset == per_segment
    end, size = log.log_end_offset, log.size
    assert log.truncate_to(end) is False
    assert (log.log_end_offset, log.size) == (end, size)
    assert log.truncate_to(end + 1) is False
    assert (log.log_end_offset, log.size) == (end, size)
    assert log.truncate_to(per_segment // 2) is True
    assert log.log_end_offset == per_segment // 2 and log.size < size
    log.truncate_to(0)
    assert (log.log_end_offset, log.size) == (0, 0)
    for _ in range(per_segment):
        log.append_as_leader(single())
    assert (log.log_end_offset, log.size) == (end, size)
    log.truncate_fully_and_start_at(end - (per_segment - 1))
    assert (log.log_end_offset, log.size, log.log_start_offset) == (1, 0, 1)
    for _ in range(per_segment):
        log.append_as_leader(single())
    assert log.log_end_offset > per_segment and log.size == size
    log.truncate_to(0)  # below the first segment: full truncation
    assert (log.log_end_offset, log.size, log.log_start_offset) == (0, 0, 0)


def test_truncate_to_negative_offset_is_rejected(make_log: MakeLog) -> None:
    log = make_log()
    with pytest.raises(OffsetOutOfRangeError):
        log.truncate_to(-1)


def test_truncation_deletes_later_segments_after_the_delay(make_log: MakeLog, clock: FakeClock) -> None:
    log = make_log(file_delete_delay_ms=1000)
    for offset in range(12):
        log.append_as_leader(batch(b"a"))
        if offset % 3 == 2:
            log.roll()
    assert [s.base_offset for s in log.segments] == [0, 3, 6, 9, 12]
    log.truncate_to(5)
    assert [s.base_offset for s in log.segments] == [0, 3]
    assert log.log_end_offset == 5 and log.active_segment.read_next_offset() == 5
    deleted = sorted(p.name for p in log.dir.glob("*.deleted"))
    assert [n for n in deleted if n.endswith(".log.deleted")] == [
        "00000000000000000006.log.deleted", "00000000000000000009.log.deleted", "00000000000000000012.log.deleted",
    ]
    clock.advance(999)
    assert list(log.dir.glob("*.deleted"))
    clock.advance(1)
    assert not list(log.dir.glob("*.deleted"))
    assert segment_names(log.dir) == ["00000000000000000000.log", "00000000000000000003.log"]
    assert [r.offset for r in read_all(log)] == [0, 1, 2, 3, 4]
    log.append_as_leader(batch(b"b"))
    assert [r.offset for r in read_all(log)] == [0, 1, 2, 3, 4, 5]


def test_closing_a_log_releases_segments_awaiting_their_delayed_unlink(
    make_log: MakeLog, clock: FakeClock, tp_dir: Path
) -> None:
    """A log closed before ``file.delete.delay.ms`` passed (a shutdown, a failed dir reopened)
    keeps no descriptor on its ``.deleted`` files; the next open removes them, and a delayed
    unlink that still runs later does no harm."""
    log = make_log(file_delete_delay_ms=1000)
    for offset in range(9):
        log.append_as_leader(batch(b"a"))
        if offset % 3 == 2:
            log.roll()
    log.read(0, 1 << 20)  # reads open every segment's files
    log.truncate_to(3)
    open_before_close = descriptors_under(tp_dir)
    assert any(path.endswith(".log.deleted") for path in open_before_close)  # a fetch may still read them
    log.close()
    assert descriptors_under(tp_dir) == []
    reopened = make_log(file_delete_delay_ms=1000)
    assert not list(tp_dir.glob("*.deleted"))
    clock.advance(1000)  # the first log's delayed unlink: its files are gone already
    assert [r.offset for r in read_all(reopened)] == [0, 1, 2]
    assert all("(deleted)" not in path for path in descriptors_under(tp_dir))


def test_truncation_clamps_recovery_point_and_high_watermark(make_log: MakeLog) -> None:
    log = make_log()
    for _ in range(10):
        log.append_as_leader(single())
    log.flush()
    log.update_high_watermark(10)
    log.truncate_to(4)
    assert (log.recovery_point, log.high_watermark, log.log_end_offset) == (4, 4, 4)


def test_index_resizing_at_truncation(make_log: MakeLog, clock: FakeClock) -> None:
    set_size = len(single())
    per_segment = 10
    log = make_log(segment_bytes=per_segment * set_size, index_interval_bytes=set_size - 1, segment_index_bytes=4096)
    for i in range(1, per_segment + 1):
        log.append_as_leader(single(clock.milliseconds() + i))
    assert log.num_segments == 1
    clock.advance(per_segment)
    for i in range(1, per_segment + 1):
        log.append_as_leader(single(clock.milliseconds() + i))
    assert log.num_segments == 2
    first = log.segments[0]
    assert first.offset_index.max_entries == per_segment - 1
    assert first.time_index.max_entries == per_segment - 1
    log.truncate_to(0)
    assert log.num_segments == 1
    first = log.segments[0]
    assert first.offset_index.max_entries == 4096 // 8
    assert first.time_index.max_entries == 4096 // 12
    clock.advance(per_segment)
    for i in range(1, per_segment + 1):
        log.append_as_leader(single(clock.milliseconds() + i))
    assert log.num_segments == 1


def test_truncate_fully_and_start_at(make_log: MakeLog, clock: FakeClock) -> None:
    log = make_log(file_delete_delay_ms=0)
    for _ in range(3):
        log.append_as_leader(single())
        log.roll()
    log.update_high_watermark(3)
    log.truncate_fully_and_start_at(100)
    assert [s.base_offset for s in log.segments] == [100]
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark, log.recovery_point) == (100, 100, 100, 100)
    assert log.leader_epoch_cache.entries == []
    clock.advance(0)
    assert segment_names(log.dir) == ["00000000000000000100.log"]
    log.append_as_leader(single(), leader_epoch=4)
    assert [r.offset for r in read_all(log)] == [100]


def test_truncate_fully_and_start_at_an_existing_base_offset(make_log: MakeLog, clock: FakeClock) -> None:
    log = make_log(file_delete_delay_ms=10)
    for _ in range(5):
        log.append_as_leader(single())
    log.truncate_fully_and_start_at(0)
    assert (log.log_end_offset, log.size) == (0, 0)
    log.append_as_leader(batch(b"new"))
    clock.advance(10)  # the old segment 0, renamed .deleted, goes; the new one stays
    assert segment_names(log.dir) == ["00000000000000000000.log"]
    assert [r.value for r in read_all(log)] == [b"new"]


def test_truncation_truncates_the_leader_epoch_cache(make_log: MakeLog) -> None:
    one = batch(b"value", keys=[None])
    log = make_log(segment_bytes=10 * len(one))

    def append(epoch: int, start: int, count: int) -> None:
        for i in range(count):
            log.append_as_follower(batch(b"value", keys=[None], base_offset=start + i, partition_leader_epoch=epoch))

    append(0, 0, 10)
    append(1, 10, 6)
    append(2, 16, 4)
    assert (log.num_segments, log.log_end_offset) == (2, 20)
    log.truncate_to(log.log_end_offset)
    assert len(log.leader_epoch_cache.entries) == 3
    log.truncate_to(11)
    assert len(log.leader_epoch_cache.entries) == 2
    log.truncate_to(10)
    assert len(log.leader_epoch_cache.entries) == 1
    log.truncate_to(0)
    assert log.leader_epoch_cache.entries == []


def test_epoch_cache_survives_truncate_then_reopen(make_log: MakeLog) -> None:
    log = make_log()
    for epoch, start in ((0, 0), (1, 3), (2, 6)):
        for i in range(3):
            log.append_as_follower(batch(b"v", base_offset=start + i, partition_leader_epoch=epoch))
    log.truncate_to(4)
    log.close()
    reopened = make_log(had_clean_shutdown=True, recovery_point=4)
    assert [(e.epoch, e.start_offset) for e in reopened.leader_epoch_cache.entries] == [(0, 0), (1, 3)]
    on_disk = LeaderEpochCheckpointFile(reopened.dir / LEADER_EPOCH_CHECKPOINT_FILE).read()
    assert [(e.epoch, e.start_offset) for e in on_disk] == [(0, 0), (1, 3)]


def test_truncate_fully_persists_the_empty_epoch_cache(make_log: MakeLog) -> None:
    log = make_log()
    for i in range(3):
        log.append_as_follower(batch(b"v", base_offset=i, partition_leader_epoch=1))
    log.truncate_fully_and_start_at(50)
    # Kafka clears and flushes the epoch cache: a crash now must not bring back epoch 1
    assert LeaderEpochCheckpointFile(log.dir / LEADER_EPOCH_CHECKPOINT_FILE).read() == []


def test_truncate_then_read_and_append_across_segment_boundary(make_log: MakeLog) -> None:
    log = make_log(segment_bytes=400, index_interval_bytes=1)
    for i in range(40):
        log.append_as_leader(batch(b"%d" % i, timestamp=T0 + i))
    bases = [s.base_offset for s in log.segments]
    target = bases[2]  # exactly at a segment's base: it stays, emptied; the later ones go
    log.truncate_to(target)
    assert [s.base_offset for s in log.segments] == bases[:3]
    assert log.active_segment.size == 0
    assert log.active_segment.read_next_offset() == target == log.log_end_offset
    for i in range(target, 40):
        log.append_as_leader(batch(b"%d" % i, timestamp=T0 + i))
    got = read_all(log)
    assert [r.value for r in got] == [b"%d" % i for i in range(40)]
    found = log.fetch_offset_by_timestamp(T0 + target)
    assert found is not None and found.offset == target
