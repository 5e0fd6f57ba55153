"""Segment roll: UnifiedLogTest / LocalLogTest roll scenarios (kafka-storage.md §3.2, §1.12, §3.9)."""

from __future__ import annotations

import pytest
from storage_helpers import T0, MakeLog, batch, read_all, records, segment_names, single

from tidelog.errors import TidelogError
from tidelog.records import NO_TIMESTAMP
from tidelog.storage import files
from tidelog.testing import FakeClock, FakeScheduler

INT_MAX = 2**31 - 1


def test_time_based_roll_during_append(make_log: MakeLog, clock: FakeClock) -> None:
    log = make_log(segment_ms=3600)
    assert log.num_segments == 1
    # records without timestamps: wall-clock age of the segment
    clock.advance(3601)
    log.append_as_leader(single(NO_TIMESTAMP))
    assert log.num_segments == 1, "no roll into an empty segment"
    log.append_as_leader(single(NO_TIMESTAMP))
    assert log.num_segments == 2, "time expired since the segment was created"
    for expected in (3, 4):
        clock.advance(3601)
        log.append_as_leader(single(NO_TIMESTAMP))
        assert log.num_segments == expected
    # a timestamped record in a segment whose first record had none: still wall clock
    stamped = single(clock.milliseconds() + 3601)
    log.append_as_leader(stamped)
    assert log.num_segments == 4
    # records with timestamps: the first batch's timestamp decides
    clock.advance(3601)
    log.append_as_leader(stamped)
    assert log.num_segments == 5
    clock.advance(3601)
    log.append_as_leader(stamped)
    assert log.num_segments == 5, "wall clock does not matter once the first batch has a timestamp"
    log.append_as_leader(single(clock.milliseconds()))
    assert log.num_segments == 6, "a record far enough after the first batch's timestamp rolls"
    clock.advance(3601)
    assert not log.append_as_leader(b"").appended
    assert log.num_segments == 6, "an empty append never rolls"


def test_time_based_roll_with_jitter(make_log: MakeLog, clock: FakeClock) -> None:
    max_jitter = 20 * 60
    log = make_log(segment_ms=3600, segment_jitter_ms=max_jitter)
    log.append_as_leader(single(clock.milliseconds()))
    clock.advance(3600 - max_jitter)
    log.append_as_leader(single(clock.milliseconds()))
    assert log.num_segments == 1, "earlier than segment.ms - max jitter"
    clock.advance(max_jitter - log.active_segment.rolling_jitter_ms + 1)
    log.append_as_leader(single(clock.milliseconds()))
    assert log.num_segments == 2


def test_segment_jitter_is_below_segment_ms(make_log: MakeLog, clock: FakeClock) -> None:
    # Kafka draws abs(random) % min(segment.jitter.ms, segment.ms): with a jitter larger than
    # segment.ms the threshold stays positive and a fresh segment never rolls on every append.
    log = make_log(segment_ms=100, segment_jitter_ms=100_000)
    for _ in range(40):
        log.roll()
        assert 0 <= log.active_segment.rolling_jitter_ms < 100
    log.append_as_leader(single(clock.milliseconds()))
    log.append_as_leader(single(clock.milliseconds()))
    assert log.num_segments == 1


def test_size_based_roll(make_log: MakeLog) -> None:
    set_size = len(single(T0))
    log = make_log(segment_bytes=10 * (set_size - 1))
    for _ in range(11):
        log.append_as_leader(single(T0))
    assert log.num_segments == 2
    assert [s.base_offset for s in log.segments] == [0, 9]


def test_roll_when_the_time_index_is_full(make_log: MakeLog, clock: FakeClock) -> None:
    # 64-byte indexes: 8 offset entries, 5 time-index slots of which one is kept for the roll
    log = make_log(segment_index_bytes=64, index_interval_bytes=1)
    for i in range(12):
        log.append_as_leader(single(T0 + i))
    first = log.segments[0]
    # full at 4 entries: the roll's final entry (T0+4, 4) equals the last one, so none is added
    assert first.time_index.entries == 4
    assert [s.base_offset for s in log.segments] == [0, 5, 10]
    assert [r.offset for r in read_all(log)] == list(range(12))


def test_roll_when_offsets_would_overflow_the_segment(make_log: MakeLog) -> None:
    log = make_log(segment_bytes=1000, index_interval_bytes=1)
    log.append_as_follower(batch(b"v1", keys=[b"k1"]))
    assert log.active_segment.base_offset == 0
    far = INT_MAX + 2
    log.append_as_follower(batch(b"v3", b"v4", keys=[b"k3", b"k4"], base_offset=far))
    assert log.active_segment.base_offset == far, "new base = first offset of the append"
    log.append_as_follower(batch(b"v5", keys=[b"k5"], base_offset=far + 2))
    assert log.active_segment.base_offset == far
    assert [r.offset for r in read_all(log)] == [0, far, far + 1, far + 2]
    log.close()
    assert sorted(p.name for p in log.dir.glob("*.index")) == [
        files.offset_index_file(log.dir, 0).name, files.offset_index_file(log.dir, far).name,
    ]


def test_roll_segment_that_already_exists_recreates_the_empty_active_segment(make_log: MakeLog) -> None:
    log = make_log(segment_ms=3600)
    log.roll(0)
    assert log.num_segments == 1 and log.active_segment.base_offset == 0
    log.append_as_follower(batch(b"a", base_offset=0))
    log.append_as_follower(batch(b"b", base_offset=1))
    assert log.num_segments == 1 and log.log_end_offset == 2
    assert [r.offset for r in read_all(log)] == [0, 1]
    log.roll()
    assert log.active_segment.base_offset == 2 and log.num_segments == 2
    # an active segment whose index holds no entry at all must roll: it is recreated in place
    log.active_segment.offset_index.resize(0)
    log.append_as_follower(batch(b"c", base_offset=2))
    assert log.active_segment.offset_index.max_entries > 1
    assert log.num_segments == 2 and [r.offset for r in read_all(log, 2)] == [2]
    assert segment_names(log.dir) == [files.log_file(log.dir, 0).name, files.log_file(log.dir, 2).name]


def test_rolling_an_empty_active_segment_again_recreates_it(make_log: MakeLog) -> None:
    log = make_log()
    log.append_as_leader(records(2))
    log.roll()
    log.flush()  # the empty active segment now has index files too
    log.roll()
    assert [s.base_offset for s in log.segments] == [0, 2]
    assert segment_names(log.dir) == [files.log_file(log.dir, 0).name, files.log_file(log.dir, 2).name]
    log.append_as_leader(records(1))
    assert [r.offset for r in read_all(log)] == [0, 1, 2]


def test_roll_below_the_active_segment_is_an_error(make_log: MakeLog) -> None:
    log = make_log()
    log.truncate_fully_and_start_at(10)
    log._log_end_offset = 5  # test seam: a log end below the active base cannot be reached otherwise
    with pytest.raises(TidelogError):
        log.roll()
    log._log_end_offset = 10


def test_roll_creates_segment_at_log_end_and_deletes_stale_files(make_log: MakeLog) -> None:
    log = make_log()
    log.append_as_leader(records(3))
    stale = files.log_file(log.dir, 3)
    stale.write_bytes(b"left over from a crash")
    files.offset_index_file(log.dir, 3).write_bytes(b"x" * 16)
    segment = log.roll()
    assert segment.base_offset == 3 and segment.size == 0
    assert stale.stat().st_size == 0
    log.append_as_leader(records(1))
    assert [r.offset for r in read_all(log)] == [0, 1, 2, 3]


def test_roll_schedules_a_flush_that_moves_the_recovery_point(
    make_log: MakeLog, clock: FakeClock, scheduler: FakeScheduler
) -> None:
    log = make_log(segment_bytes=100)
    for i in range(100):
        log.append_as_leader(batch(str(i).encode(), timestamp=T0))
    assert log.num_segments > 10
    assert log.recovery_point == 0
    clock.advance(0)  # the async flush after each roll
    assert log.recovery_point == log.active_segment.base_offset
    got = read_all(log)
    assert [r.offset for r in got] == list(range(100)) and [r.value for r in got] == [b"%d" % i for i in range(100)]
    assert any(name.startswith("flush-") for name in scheduler.ran)


def test_sealed_segment_is_trimmed_and_has_final_time_index_entry(make_log: MakeLog) -> None:
    log = make_log(segment_index_bytes=4096, index_interval_bytes=10_000, preallocate=True, segment_bytes=2000)
    log.append_as_leader(single(T0 + 7))
    log.append_as_leader(single(T0 + 3))
    first = log.active_segment
    assert first.log.path.stat().st_size == 2000
    log.roll()
    assert first.log.path.stat().st_size == first.size
    assert first.offset_index.path.stat().st_size == 0
    assert first.time_index.entries == 1
    assert (first.time_index.last_entry.timestamp, first.time_index.last_entry.offset) == (T0 + 7, 0)
    assert log.active_segment.log.path.stat().st_size == 2000


def test_flushing_empty_active_segment_creates_its_index_files(make_log: MakeLog) -> None:
    log = make_log()
    log.append_as_leader(single(T0))
    log.roll()
    assert len(segment_names(log.dir, ".log")) == 2
    assert len(segment_names(log.dir, ".index")) == 1, "index files are lazy"
    assert log.active_segment.size == 0
    log.flush()
    assert len(segment_names(log.dir, ".log")) == 2
    assert len(segment_names(log.dir, ".index")) == 2
    assert log.recovery_point == log.log_end_offset == 1


def test_empty_active_segment_never_rolls_by_time(make_log: MakeLog, clock: FakeClock) -> None:
    log = make_log(segment_ms=10)
    log.append_as_leader(single(NO_TIMESTAMP))
    log.roll()
    clock.advance(10_000)
    log.append_as_leader(single(NO_TIMESTAMP))
    assert log.num_segments == 2 and log.active_segment.base_offset == 1


def test_size_and_segment_after_are_safe_during_rolls(make_log: MakeLog) -> None:
    """``Log.size`` (metrics, retention planning) and ``segment_after`` (the cleaner) run on other
    threads than the appends and rolls that change the segment list; neither may fail for it."""
    import threading

    log = make_log()
    log.append_as_leader(single(T0))  # no roll below recreates an empty active segment (the one moment with none)
    failures: list[BaseException] = []
    done = threading.Event()

    def watch() -> None:
        try:
            while not done.is_set():
                assert log.size >= 0
                first = log.segments[0]
                log.segment_after(first)
        except BaseException as e:  # noqa: BLE001 - reported below
            failures.append(e)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        for _ in range(1000):
            log.roll()
            log.append_as_leader(single(T0))
            if log.num_segments > 20:
                log.delete_segments(log.segments[:10], "test")
    finally:
        done.set()
        watcher.join()
    assert failures == []
