"""ListOffsets / offset for timestamp (kafka-storage.md §3.4; UnifiedLogTest fetchOffsetByTimestamp)."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from storage_helpers import T0, MakeLog, batch, crash, log_config

from tidelog.errors import OffsetOutOfRangeError
from tidelog.records import CompressionType
from tidelog.storage.fetch_info import FetchIsolation, TimestampAndOffset
from tidelog.storage.log import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIERED_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    Log,
)
from tidelog.testing import FakeClock, FakeScheduler

LOG_END = FetchIsolation.LOG_END


def test_special_timestamp_values_are_kafkas() -> None:
    assert (LATEST_TIMESTAMP, EARLIEST_TIMESTAMP, MAX_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP, LATEST_TIERED_TIMESTAMP) == (
        -1, -2, -3, -4, -5,
    )


def test_fetch_offset_by_timestamp_includes_leader_epoch(make_log: MakeLog, clock: FakeClock) -> None:
    log = make_log(segment_bytes=200, index_interval_bytes=1)
    assert log.fetch_offset_by_timestamp(0) is None
    first_ts, second_ts = clock.milliseconds(), clock.milliseconds() + 1
    log.append_as_leader(batch(b"x" * 10, timestamp=first_ts), leader_epoch=0)
    log.append_as_leader(batch(b"y" * 10, timestamp=second_ts), leader_epoch=1)
    assert log.fetch_offset_by_timestamp(first_ts) == TimestampAndOffset(first_ts, 0, 0)
    assert log.fetch_offset_by_timestamp(second_ts) == TimestampAndOffset(second_ts, 1, 1)
    assert log.fetch_offset_by_timestamp(EARLIEST_TIMESTAMP) == TimestampAndOffset(-1, 0, 0)
    assert log.fetch_offset_by_timestamp(EARLIEST_LOCAL_TIMESTAMP) == TimestampAndOffset(-1, 0, 0)
    assert log.fetch_offset_by_timestamp(LATEST_TIMESTAMP, LOG_END) == TimestampAndOffset(-1, 2, 1)
    # the epoch cache can move on a leader change before anything is appended
    log.leader_epoch_cache.assign(2, 2)
    assert log.fetch_offset_by_timestamp(LATEST_TIMESTAMP, LOG_END) == TimestampAndOffset(-1, 2, 2)


def test_latest_for_consumers_is_the_high_watermark(make_log: MakeLog) -> None:
    log = make_log()
    for _ in range(4):
        log.append_as_leader(batch(b"v"))
    assert log.fetch_offset_by_timestamp(LATEST_TIMESTAMP).offset == 0  # type: ignore[union-attr]
    log.update_high_watermark(3)
    assert log.fetch_offset_by_timestamp(LATEST_TIMESTAMP).offset == 3  # type: ignore[union-attr]
    assert log.fetch_offset_by_timestamp(LATEST_TIMESTAMP, LOG_END).offset == 4  # type: ignore[union-attr]


def test_max_timestamp_returns_the_record_with_it(make_log: MakeLog) -> None:
    log = make_log(segment_bytes=200, index_interval_bytes=1)
    t = T0
    for ts in (t, t + 1, t):
        log.append_as_leader(batch(b"x" * 10, timestamp=ts))
    assert log.fetch_offset_by_timestamp(MAX_TIMESTAMP) == TimestampAndOffset(t + 1, 1, 0)


def test_max_timestamp_inside_a_batch_is_the_first_record_reaching_it(make_log: MakeLog) -> None:
    log = make_log()
    log.append_as_leader(batch(b"a", b"b", b"c", b"d", timestamps=[T0, T0 + 9, T0 + 3, T0 + 9]), leader_epoch=7)
    log.append_as_leader(batch(b"e", timestamp=T0 + 2), leader_epoch=7)
    assert log.fetch_offset_by_timestamp(MAX_TIMESTAMP) == TimestampAndOffset(T0 + 9, 1, 7)


def test_max_timestamp_across_segments_prefers_the_first_on_ties(make_log: MakeLog) -> None:
    log = make_log()
    for ts in (T0 + 5, T0 + 50, T0 + 7):
        log.append_as_leader(batch(b"v", timestamp=ts))
        log.roll()
    log.append_as_leader(batch(b"v", timestamp=T0 + 50))
    assert log.fetch_offset_by_timestamp(MAX_TIMESTAMP) == TimestampAndOffset(T0 + 50, 1, 0)


def test_max_timestamp_survives_clean_and_unclean_reopen(make_log: MakeLog) -> None:
    log = make_log(segment_bytes=300, index_interval_bytes=1)
    stamps = [T0 + (i * 37) % 101 for i in range(30)]
    for ts in stamps:
        log.append_as_leader(batch(b"v" * 20, timestamp=ts))
    best = max(stamps)
    expected = TimestampAndOffset(best, stamps.index(best), 0)
    assert log.fetch_offset_by_timestamp(MAX_TIMESTAMP) == expected
    log.close()
    clean = make_log(config=log.config, had_clean_shutdown=True, recovery_point=30)
    assert clean.fetch_offset_by_timestamp(MAX_TIMESTAMP) == expected
    crash(clean)
    unclean = make_log(config=log.config)
    assert unclean.fetch_offset_by_timestamp(MAX_TIMESTAMP) == expected


def test_max_timestamp_of_a_log_without_timestamps_is_none(make_log: MakeLog) -> None:
    log = make_log()
    assert log.fetch_offset_by_timestamp(MAX_TIMESTAMP) is None
    log.append_as_leader(batch(b"v", timestamp=-1))
    assert log.fetch_offset_by_timestamp(MAX_TIMESTAMP) is None


def test_latest_tiered_without_tiering(make_log: MakeLog) -> None:
    log = make_log()
    log.append_as_leader(batch(b"v"))
    assert log.fetch_offset_by_timestamp(LATEST_TIERED_TIMESTAMP) == TimestampAndOffset(-1, -1, None)


def test_unknown_negative_timestamp_is_rejected(make_log: MakeLog) -> None:
    log = make_log()
    with pytest.raises(OffsetOutOfRangeError):
        log.fetch_offset_by_timestamp(-6)


def test_earliest_follows_the_log_start_offset_and_its_epoch(make_log: MakeLog) -> None:
    log = make_log()
    for epoch in (0, 0, 1, 1, 2):
        log.append_as_leader(batch(b"v"), leader_epoch=epoch)
    log.update_high_watermark(5)
    log.delete_records(3)
    assert log.fetch_offset_by_timestamp(EARLIEST_TIMESTAMP) == TimestampAndOffset(-1, 3, 1)


def test_timestamp_lookup_never_answers_below_the_log_start_offset(make_log: MakeLog) -> None:
    log = make_log()
    log.append_as_leader(batch(b"a", b"b", b"c", b"d", timestamps=[T0, T0 + 1, T0 + 2, T0 + 3]))
    log.update_high_watermark(4)
    log.delete_records(2)
    assert log.fetch_offset_by_timestamp(T0) == TimestampAndOffset(T0 + 2, 2, 0)
    assert log.fetch_offset_by_timestamp(T0 + 3) == TimestampAndOffset(T0 + 3, 3, 0)
    assert log.fetch_offset_by_timestamp(T0 + 4) is None


def test_log_append_time_topic_answers_with_broker_time(make_log: MakeLog, clock: FakeClock) -> None:
    log = make_log(message_timestamp_type="LogAppendTime")
    log.append_as_leader(batch(b"a", b"b", timestamp=5))
    clock.advance(10)
    log.append_as_leader(batch(b"c", timestamp=5, compression=CompressionType.GZIP))
    assert log.fetch_offset_by_timestamp(T0) == TimestampAndOffset(T0, 0, 0)
    assert log.fetch_offset_by_timestamp(T0 + 1) == TimestampAndOffset(T0 + 10, 2, 0)
    assert log.fetch_offset_by_timestamp(MAX_TIMESTAMP) == TimestampAndOffset(T0 + 10, 2, 0)


def test_timestamp_lookup_after_index_rebuild(make_log: MakeLog, clock: FakeClock) -> None:
    log = make_log(segment_bytes=200, index_interval_bytes=1)
    for i in range(60):
        log.append_as_leader(batch(b"x" * 10, timestamp=clock.milliseconds() + i * 10))
    log.close()
    for path in list(log.dir.glob("*.timeindex")) + list(log.dir.glob("*.index")):
        path.unlink()
    reopened = make_log(config=log.config)
    for i in range(60):
        found = reopened.fetch_offset_by_timestamp(clock.milliseconds() + i * 10)
        assert found is not None and found.offset == i


GROUP_STEP = 20  # batch g's timestamps are T0 + GROUP_STEP * g + (0..50): rising, yet out of order nearby


@settings(max_examples=40, deadline=None)
@example(stamps=[[0, 1, 2, 3]] * 16, interval=100, target=GROUP_STEP * 15)  # 3+ segments, only the last reaches it
@example(stamps=[[0, 30]] * 16, interval=0, target=GROUP_STEP * 15 + 25)  # the hit is a batch's second record
@given(stamps=st.lists(st.lists(st.integers(0, 50), min_size=1, max_size=4), min_size=1, max_size=30),
       interval=st.sampled_from([0, 100, 4096]), target=st.integers(-5, GROUP_STEP * 30 + 60))
def test_offset_for_timestamp_matches_a_scan(stamps: list[list[int]], interval: int, target: int) -> None:
    """Kafka's rule: the first segment whose largest timestamp reaches the target, then the first
    record there with timestamp >= target (segments are scanned oldest first, not globally).
    Timestamps rise from batch to batch, so the answer lies in any segment, often a later one."""
    import tempfile
    from pathlib import Path

    clock = FakeClock(T0)
    with tempfile.TemporaryDirectory() as tmp:
        log = Log.open(Path(tmp) / "t-0", log_config(segment_bytes=500, index_interval_bytes=interval),
                       clock=clock, scheduler=FakeScheduler(clock))
        rows: list[tuple[int, int, int]] = []  # (segment base, offset, ts)
        for number, group in enumerate(stamps):
            timestamps = [T0 + GROUP_STEP * number + s for s in group]
            info = log.append_as_leader(batch(*[b"v"] * len(group), timestamps=timestamps))
            base = log.active_segment.base_offset
            rows.extend((base, info.first_offset + i, ts) for i, ts in enumerate(timestamps))
        ts = T0 + target
        expected = None
        for base in sorted({r[0] for r in rows}):
            in_segment = [r for r in rows if r[0] == base]
            if max(r[2] for r in in_segment) >= ts:
                hit = next(r for r in in_segment if r[2] >= ts)
                expected = TimestampAndOffset(hit[2], hit[1], 0)
                break
        assert log.fetch_offset_by_timestamp(ts) == expected
        log.close()
