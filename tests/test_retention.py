"""Retention (delete policy): UnifiedLogTest / LogManagerTest retention scenarios (kafka-storage.md
§3.5, §3.6, §4.6, §4.8), the explanation lines, dry runs, and a model-based property against a
straight statement of Kafka's three sequential passes (``retention_helpers.kafka_model``)."""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from retention_helpers import DAY_MS, T0, FakeSegment, kafka_model, single

from tidelog.errors import OffsetOutOfRangeError
from tidelog.records import NO_TIMESTAMP
from tidelog.retention import (
    LOG_START_OFFSET,
    RETENTION_BYTES,
    RETENTION_MS,
    RETENTION_REASONS,
    RetentionPlan,
    delete_old_segments,
    deletable_segments,
    format_bytes,
    format_duration,
    held_plan,
    plan_retention,
    plan_segments,
)
from tidelog.storage import files
from tidelog.storage.checkpoints import EpochEntry
from tidelog.storage.config import LogConfig
from tidelog.storage.fetch_info import FetchIsolation
from tidelog.storage.log import Log
from tidelog.testing import FakeClock, FakeScheduler
from tidelog.topic_partition import TopicPartition

SIZE = len(single())  # one "test" record, Kafka's singletonRecords
HOUR_MS = 3_600_000

MakeLog = Callable[..., Log]


def log_config(**overrides: Any) -> LogConfig:
    """A LogConfig from snake_case topic-config keywords (``retention_ms=999``)."""
    return LogConfig.from_props(overrides={name.replace("_", "."): str(value) for name, value in overrides.items()})


@pytest.fixture
def make_log(tmp_path: Path, clock: FakeClock, scheduler: FakeScheduler) -> Iterator[MakeLog]:
    """``make_log(**topic_config)`` opens a fresh log ``topic-<n>`` (high watermark 0, as Kafka's
    tests start); every log is closed at teardown."""
    opened: list[Log] = []

    def make(**overrides: Any) -> Log:
        log = Log.open(tmp_path / f"topic-{len(opened)}", log_config(**overrides), clock=clock, scheduler=scheduler)
        opened.append(log)
        return log

    yield make
    for log in opened:
        log.close()


def append(log: Log, count: int, ts: int = T0, **kw: Any) -> None:
    for _ in range(count):
        log.append_as_leader(single(ts, **kw))


def bases(log: Log) -> list[int]:
    return [s.base_offset for s in log.segments]


def delete_now(log: Log, clock: FakeClock) -> RetentionPlan:
    return delete_old_segments(log, clock.milliseconds())


def set_mtime(path: Path, ms: int) -> None:
    os.utime(path, ns=(ms * 1_000_000, ms * 1_000_000))


def name(offset: int) -> str:
    return files.filename_prefix_from_offset(offset)


# --- UnifiedLogTest ---------------------------------------------------------------------------

def test_delete_old_segments_never_past_high_watermark(make_log: MakeLog, clock: FakeClock) -> None:
    """testDeleteOldSegments."""
    log = make_log(segment_bytes=SIZE * 5, segment_index_bytes=1000, retention_ms=999)
    append(log, 100, clock.milliseconds() - 1000)
    log.leader_epoch_cache.assign(0, 40)
    log.leader_epoch_cache.assign(1, 90)
    count = log.num_segments

    plan = delete_now(log, clock)
    assert plan.segments == () and log.num_segments == count, "no high watermark: nothing is deletable"
    assert log.log_start_offset == 0

    for hw in range(25, 31):
        log.update_high_watermark(hw)
        delete_now(log, clock)
        assert log.log_start_offset <= hw
        ends = bases(log)[1:] + [log.log_end_offset]
        assert all(end - 1 >= hw for end in ends), "every remaining segment holds an offset at or past the HW"
    assert log.log_start_offset == 30, "segments of 5: [25, 30) went once the HW reached 30"

    log.update_high_watermark(log.log_end_offset)
    delete_now(log, clock)
    assert log.num_segments == 1, "the deleted segments should be gone"
    assert log.leader_epoch_cache.entries == [EpochEntry(1, 100)]


def test_log_deletion_after_delete_records(make_log: MakeLog, clock: FakeClock) -> None:
    """testLogDeletionAfterDeleteRecords."""
    log = make_log(segment_bytes=SIZE * 5)
    append(log, 15)
    assert log.num_segments == 3
    log.update_high_watermark(log.log_end_offset)
    for start, segments in ((1, 3), (6, 2), (15, 1)):
        log.maybe_increment_log_start_offset(start)
        delete_now(log, clock)
        assert (log.num_segments, log.log_start_offset) == (segments, start)


def test_size_based_segments_deleted(make_log: MakeLog, clock: FakeClock) -> None:
    """shouldDeleteSizeBasedSegments."""
    log = make_log(segment_bytes=SIZE * 5, retention_bytes=SIZE * 10)
    append(log, 15)
    log.update_high_watermark(log.log_end_offset)
    plan = delete_now(log, clock)
    assert log.num_segments == 2
    assert [(d.base_offset, d.next_offset, d.size, d.cause) for d in plan.segments] == [(0, 5, SIZE * 5, RETENTION_BYTES)]
    assert plan.total_bytes == SIZE * 5 and log.size == SIZE * 10


def test_size_based_segments_kept_when_under_retention_size(make_log: MakeLog, clock: FakeClock) -> None:
    """shouldNotDeleteSizeBasedSegmentsWhenUnderRetentionSize: size == retention.bytes deletes nothing."""
    log = make_log(segment_bytes=SIZE * 5, retention_bytes=SIZE * 15)
    append(log, 15)
    log.update_high_watermark(log.log_end_offset)
    plan = delete_now(log, clock)
    assert log.num_segments == 3 and plan.segments == ()
    assert (f"deleting segment {name(0)} ({format_bytes(SIZE * 5)}) would take the log below retention.bytes "
            f"{format_bytes(SIZE * 15)} (it is 0 B over)") in plan.reasons


def test_time_based_segments_deleted_when_ready(make_log: MakeLog, clock: FakeClock) -> None:
    """shouldDeleteTimeBasedSegmentsReadyToBeDeleted: every segment goes, so the log rolls first."""
    log = make_log(segment_bytes=SIZE * 5, retention_ms=10000)
    append(log, 15, ts=10)
    log.update_high_watermark(log.log_end_offset)
    plan = delete_now(log, clock)
    assert log.num_segments == 1 and log.active_segment.size == 0
    assert bases(log) == [15] and log.log_start_offset == 15 and log.log_end_offset == 15
    assert plan.roll_needed and [d.base_offset for d in plan.segments] == [0, 5, 10]
    assert {d.cause for d in plan.segments} == {RETENTION_MS}


def test_time_based_segments_kept_when_none_ready(make_log: MakeLog, clock: FakeClock) -> None:
    """shouldNotDeleteTimeBasedSegmentsWhenNoneReadyToBeDeleted."""
    log = make_log(segment_bytes=SIZE * 5, retention_ms=10_000_000)
    append(log, 15, ts=clock.milliseconds())
    log.update_high_watermark(log.log_end_offset)
    assert delete_now(log, clock).segments == () and log.num_segments == 3


def test_compact_policy_deletes_nothing_by_time(make_log: MakeLog, clock: FakeClock) -> None:
    """shouldNotDeleteSegmentsWhenPolicyDoesNotIncludeDelete."""
    log = make_log(segment_bytes=SIZE * 5, retention_ms=10000, cleanup_policy="compact")
    append(log, 15, ts=10)
    set_mtime(log.segments[0].log.path, clock.milliseconds() - 20000)
    log.update_high_watermark(log.log_end_offset)
    plan = delete_now(log, clock)
    assert log.num_segments == 3 and plan.segments == ()
    assert [p.cause for p in plan.passes] == [LOG_START_OFFSET]
    assert "cleanup.policy=compact: only the log start offset pass applies" in plan.reasons


def test_compact_delete_policy_deletes_ready_segments(make_log: MakeLog, clock: FakeClock) -> None:
    """shouldDeleteSegmentsReadyToBeDeletedWhenCleanupPolicyIsCompactAndDelete."""
    log = make_log(segment_bytes=SIZE * 5, retention_ms=10000, cleanup_policy="compact,delete")
    append(log, 15, ts=10)
    log.update_high_watermark(log.log_end_offset)
    delete_now(log, clock)
    assert log.num_segments == 1


def test_log_start_offset_breach_deletes_under_compact_policy(make_log: MakeLog, clock: FakeClock) -> None:
    """shouldDeleteStartOffsetBreachedSegmentsWhenPolicyDoesNotIncludeDelete."""
    log = make_log(segment_bytes=SIZE * 5, retention_ms=10000, cleanup_policy="compact")
    append(log, 15, ts=10)
    log.update_high_watermark(log.log_end_offset)
    log.maybe_increment_log_start_offset(5)
    plan = delete_now(log, clock)
    assert log.num_segments == 2
    assert log.segments[0].base_offset <= log.log_start_offset
    assert all(s.base_offset > log.log_start_offset for s in log.segments[1:])
    assert [(d.base_offset, d.cause) for d in plan.segments] == [(0, LOG_START_OFFSET)]
    assert plan.segments[0].detail == "next segment starts at 5, at or below the log start offset 5"


def test_empty_cleanup_policy_runs_only_the_log_start_offset_pass(make_log: MakeLog, clock: FakeClock) -> None:
    log = make_log(segment_bytes=SIZE * 5, retention_ms=0, retention_bytes=0, cleanup_policy="")
    append(log, 15, ts=10)
    log.update_high_watermark(log.log_end_offset)
    log.maybe_increment_log_start_offset(10)
    plan = delete_now(log, clock)
    assert bases(log) == [10] and [d.base_offset for d in plan.segments] == [0, 5]
    assert plan.reasons[-1] == "cleanup.policy is empty: only the log start offset pass applies"


@pytest.mark.parametrize(("second_epoch_start", "expected"), [
    (5, [EpochEntry(1, 5), EpochEntry(2, 10)]),
    (7, [EpochEntry(0, 5), EpochEntry(1, 7), EpochEntry(2, 10)]),
])
def test_leader_epochs_truncated_when_deleting_segments(
    make_log: MakeLog, clock: FakeClock, second_epoch_start: int, expected: list[EpochEntry]
) -> None:
    """shouldTruncateLeaderEpochsWhenDeletingSegments / shouldUpdateOffsetForLeaderEpochsWhenDeletingSegments."""
    log = make_log(segment_bytes=SIZE * 5, retention_bytes=SIZE * 10)
    append(log, 15)
    cache = log.leader_epoch_cache
    cache.assign(0, 0)
    cache.assign(1, second_epoch_start)
    cache.assign(2, 10)
    log.update_high_watermark(log.log_end_offset)
    delete_now(log, clock)
    assert cache.entries == expected


def test_retention_idempotency(make_log: MakeLog, clock: FakeClock) -> None:
    """testRetentionIdempotency: the log start offset pass unblocks the time pass; a rerun deletes nothing."""
    log = make_log(segment_bytes=2048 * 5, retention_bytes=-1, retention_ms=900, file_delete_delay_ms=0)
    now = clock.milliseconds()
    append(log, 1, now + 100)
    log.roll()
    append(log, 1, now)
    log.roll()
    append(log, 1, now + 100)
    log.update_high_watermark(log.log_end_offset)
    log.maybe_increment_log_start_offset(1)
    clock.advance(901)
    plan = delete_now(log, clock)
    assert [(d.base_offset, d.cause) for d in plan.segments] == [(0, LOG_START_OFFSET), (1, RETENTION_MS)]
    assert delete_now(log, clock).segments == ()


def _expired_log(make_log: MakeLog, clock: FakeClock) -> Log:
    log = make_log(segment_bytes=512, segment_index_bytes=1000, retention_ms=999)
    expired = clock.milliseconds() - 1000
    for i in range(100):
        log.append_as_leader(single(expired, value=b"test%d" % i))
    return log


def test_segment_deletion_with_high_watermark_initialization(make_log: MakeLog, clock: FakeClock) -> None:
    """testSegmentDeletionWithHighWatermarkInitialization."""
    log = _expired_log(make_log, clock)
    assert log.update_high_watermark(25) == 25
    count = log.num_segments
    delete_now(log, clock)
    assert log.num_segments < count
    assert log.log_start_offset <= 25


def test_cannot_delete_segments_at_or_above_high_watermark(make_log: MakeLog, clock: FakeClock) -> None:
    """testCannotDeleteSegmentsAtOrAboveHighWatermark."""
    log = _expired_log(make_log, clock)
    assert log.num_segments > 5
    assert (log.high_watermark, log.log_start_offset, log.log_end_offset) == (0, 0, 100)
    for hw in range(101):
        log.update_high_watermark(hw)
        assert log.high_watermark == hw
        delete_now(log, clock)
        assert log.log_start_offset <= hw
        first, *rest = log.segments
        assert log.log_start_offset <= first.base_offset <= hw
        assert all(s.base_offset > hw for s in rest)
    assert log.log_start_offset == 100 and log.num_segments == 1 and log.active_segment.size == 0


def test_deletable_segments_filter(make_log: MakeLog) -> None:
    """testDeletableSegmentsFilter: the active segment counts only when the HW is at the log end
    and it holds data."""
    log = make_log(segment_bytes=1024 * 1024)
    for _ in range(9):
        append(log, 1)
        log.roll()
    log.update_high_watermark(log.log_end_offset)
    assert log.num_segments == 10

    def deletable(predicate: Callable[[Any, Any], bool] = lambda s, n: True) -> list[int]:
        found = deletable_segments(log.segments, log_end_offset=log.log_end_offset,
                                   high_watermark=log.high_watermark, predicate=predicate)
        return [s.base_offset for s in found]

    assert deletable() == bases(log)[:-1], "the empty active segment is never deletable"
    append(log, 1)
    assert deletable() == bases(log)[:-1], "the active segment ends past the high watermark"
    log.update_high_watermark(log.log_end_offset)
    assert deletable() == bases(log), "HW at the log end and data in the active segment: all of them"
    assert deletable(lambda s, n: s.base_offset <= 5) == [0, 1, 2, 3, 4, 5]


def test_deletable_segments_iteration(make_log: MakeLog) -> None:
    """testDeletableSegmentsIteration: the predicate sees (segment, next segment) pairs in order."""
    log = make_log(segment_bytes=1024 * 1024)
    for _ in range(9):
        append(log, 1)
        log.roll()
    append(log, 1)
    log.update_high_watermark(log.log_end_offset)
    seen: list[tuple[int, int | None]] = []

    def predicate(segment: Any, following: Any) -> bool:
        seen.append((segment.base_offset, None if following is None else following.base_offset))
        return True

    deletable_segments(log.segments, log_end_offset=log.log_end_offset, high_watermark=log.high_watermark,
                       predicate=predicate)
    assert seen == [(i, i + 1) for i in range(9)] + [(9, None)]


@pytest.mark.parametrize("count", [0, 1, 25])
def test_garbage_collecting_segments_keeps_offsets(make_log: MakeLog, clock: FakeClock, count: int) -> None:
    """testThatGarbageCollectingSegmentsDoesntChangeOffset."""
    log = make_log(segment_bytes=100, retention_ms=0)
    for i in range(count):
        log.append_as_leader(single(clock.milliseconds() - 10, value=str(i).encode()))
    assert log.log_end_offset == count
    log.update_high_watermark(count)
    delete_now(log, clock)
    assert log.log_end_offset == count, "deleting segments must not change the log end offset"
    assert log.num_segments == 1
    assert delete_now(log, clock).segments == (), "a second run deletes nothing"
    assert log.log_end_offset == count
    assert log.append_as_leader(single(clock.milliseconds(), value=b"hello")).first_offset == count


def test_async_delete(make_log: MakeLog, clock: FakeClock) -> None:
    """testAsyncDelete: files renamed .deleted, still there until file.delete.delay.ms has passed."""
    log = make_log(segment_bytes=SIZE * 5, segment_index_bytes=1000, index_interval_bytes=10000,
                   retention_ms=999, file_delete_delay_ms=1000)
    append(log, 100, clock.milliseconds() - 1000)
    segments = log.segments
    old_files = [s.log.path for s in segments] + [files.offset_index_file(log.dir, s.base_offset) for s in segments]
    log.update_high_watermark(log.log_end_offset)
    delete_now(log, clock)
    assert log.num_segments == 1
    renamed = [s.log.path for s in segments] + [files.offset_index_file(log.dir, s.base_offset, files.DELETED_SUFFIX)
                                                for s in segments]
    assert all(p.name.endswith(".deleted") and p.exists() for p in renamed), "the .deleted files are still there"
    assert not any(p.exists() for p in old_files), "the original files are gone"
    clock.advance(999)
    assert all(p.exists() for p in renamed)
    clock.advance(2)
    assert not any(p.exists() for p in renamed), "gone after the delay"


# --- LogManagerTest (retention rows), driven directly --------------------------------------------

def test_cleanup_expired_segments_by_mtime(make_log: MakeLog, clock: FakeClock) -> None:
    """LogManagerTest.testCleanupExpiredSegments: records without timestamps age by .log mtime."""
    retention = 10 * 60 * 1000
    log = make_log(segment_bytes=1024, retention_ms=retention)
    append(log, 200, NO_TIMESTAMP)
    assert log.num_segments > 1
    log.update_high_watermark(log.log_end_offset)
    for segment in log.segments:
        set_mtime(segment.log.path, clock.milliseconds())
    clock.advance(retention + 1)
    delete_now(log, clock)
    assert log.num_segments == 1
    clock.advance(log.config.file_delete_delay_ms + 1)
    assert not [p for p in log.dir.iterdir() if p.name.endswith(".deleted")]
    assert log.read(200, 1024, FetchIsolation.LOG_END).records == b""
    with pytest.raises(OffsetOutOfRangeError):
        log.read(0, 1024)
    assert log.append_as_leader(single(NO_TIMESTAMP)).first_offset == 200


def test_cleanup_segments_to_maintain_size(make_log: MakeLog, clock: FakeClock) -> None:
    """LogManagerTest.testCleanupSegmentsToMaintainSize."""
    log = make_log(segment_bytes=10 * SIZE, retention_bytes=5 * 10 * SIZE + 10)
    append(log, 200)
    assert log.num_segments == 20
    log.update_high_watermark(log.log_end_offset)
    delete_now(log, clock)
    assert log.num_segments == 6


# --- timestamps -------------------------------------------------------------------------------

def test_future_timestamp_blocks_newer_segments(make_log: MakeLog, clock: FakeClock) -> None:
    log = make_log(segment_bytes=SIZE, retention_ms=DAY_MS, message_timestamp_after_max_ms=10 * DAY_MS)
    now = clock.milliseconds()
    for ts in (now - 5 * DAY_MS, now + 3 * DAY_MS, now - 5 * DAY_MS, now - 5 * DAY_MS):
        append(log, 1, ts)
    log.update_high_watermark(log.log_end_offset)
    plan = delete_now(log, clock)
    assert [d.base_offset for d in plan.segments] == [0]
    assert bases(log) == [1, 2, 3]
    assert f"segment {name(1)} has a timestamp 3 days in the future: it and every newer segment are kept" in plan.reasons
    clock.advance(4 * DAY_MS + 1)
    assert [d.base_offset for d in delete_now(log, clock).segments] == [1, 2, 3], "once it is old, all go"


def test_mtime_fallback_for_segments_without_timestamps(make_log: MakeLog, clock: FakeClock) -> None:
    log = make_log(segment_bytes=SIZE * 2, retention_ms=DAY_MS)
    append(log, 6, NO_TIMESTAMP)
    log.update_high_watermark(log.log_end_offset)
    now = clock.milliseconds()
    for segment, mtime in zip(log.segments, (now - 2 * DAY_MS, now - 10 * 60_000, now - 3 * DAY_MS)):
        set_mtime(segment.log.path, mtime)
    plan = delete_now(log, clock)
    assert [d.base_offset for d in plan.segments] == [0]
    assert plan.segments[0].detail == "no record timestamps, .log last modified 2 days ago, over retention.ms 1 day"
    assert (f"segment {name(2)}: no record timestamps, .log last modified 10 minutes ago, within retention.ms "
            f"1 day (deletable in 23.8 hours)") in plan.reasons


def test_time_retention_boundary(make_log: MakeLog, clock: FakeClock) -> None:
    """A segment goes once now - largest timestamp is MORE than retention.ms."""
    log = make_log(retention_ms=HOUR_MS)
    append(log, 1, clock.milliseconds() - HOUR_MS)
    log.update_high_watermark(1)
    plan = delete_now(log, clock)
    assert plan.segments == ()
    assert plan.reasons[-1] == f"segment {name(0)}: newest record 1 hour old, within retention.ms 1 hour (deletable in 1 ms)"
    clock.advance(1)
    assert [d.base_offset for d in delete_now(log, clock).segments] == [0]


def test_retention_counts_from_the_newest_record(make_log: MakeLog, clock: FakeClock) -> None:
    log = make_log(segment_bytes=SIZE * 2, retention_ms=DAY_MS)
    now = clock.milliseconds()
    append(log, 1, now - 3 * DAY_MS)
    append(log, 1, now - 2 * HOUR_MS)  # same segment: its newest record is 2 hours old
    append(log, 1, now)
    log.update_high_watermark(log.log_end_offset)
    plan = plan_retention(log, now)
    assert plan.segments == ()
    assert (f"segment {name(0)}: newest record 2 hours old, within retention.ms 1 day (deletable in 22 hours)"
            in plan.reasons)


# --- explanations -----------------------------------------------------------------------------

def test_reasons_high_watermark(make_log: MakeLog, clock: FakeClock) -> None:
    log = make_log(segment_bytes=SIZE * 5, retention_ms=0)
    append(log, 15, ts=10)
    plan = plan_retention(log, clock.milliseconds())
    assert plan.reasons == (f"high watermark 0 below segment end 5 (segment {name(0)})",
                            "retention.bytes=-1: no size limit"), "a line shared by two passes appears once"
    assert [p.stop for p in plan.passes][0] == [p.stop for p in plan.passes][2]
    log.update_high_watermark(12)
    plan = plan_retention(log, clock.milliseconds())
    assert [d.base_offset for d in plan.segments] == [0, 5]
    assert plan.passes[-1].stop == f"high watermark 12 below segment end 15 (segment {name(10)})"


def test_reasons_log_start_offset(make_log: MakeLog, clock: FakeClock) -> None:
    log = make_log(segment_bytes=SIZE * 5, retention_ms=-1)
    append(log, 3)
    log.update_high_watermark(log.log_end_offset)
    log.maybe_increment_log_start_offset(2)
    plan = plan_retention(log, clock.milliseconds())
    assert plan.reasons == (
        f"log start offset 2 lies in the active segment {name(0)}: active segment not rolled yet",
        "retention.bytes=-1: no size limit",
        "retention.ms=-1: no time limit",
    )
    append(log, 5)
    log.update_high_watermark(log.log_end_offset)
    log.maybe_increment_log_start_offset(4)
    plan = plan_retention(log, clock.milliseconds())
    assert plan.passes[0].stop == f"segment {name(0)} holds offsets up to 4, at or after the log start offset 4"


def test_reasons_size(make_log: MakeLog, clock: FakeClock) -> None:
    log = make_log(segment_bytes=SIZE * 5, retention_bytes=4096, retention_ms=-1)
    append(log, 6)
    log.update_high_watermark(log.log_end_offset)
    plan = plan_retention(log, clock.milliseconds())
    assert plan.passes[1].skipped
    assert plan.passes[1].stop == f"size {format_bytes(SIZE * 6)} below retention.bytes 4 KiB"
    assert plan.summary()[0] == "topic-0: would delete 0 segments (0 B)"


def test_reasons_empty_log_and_every_segment(make_log: MakeLog, clock: FakeClock) -> None:
    log = make_log(retention_ms=0)
    assert plan_retention(log, clock.milliseconds()).passes[0].stop == f"active segment {name(0)} is empty"
    append(log, 3, ts=10)
    log.update_high_watermark(3)
    plan = plan_retention(log, clock.milliseconds())
    assert plan.roll_needed and plan.log_start_offset_after == 3
    assert plan.reasons[-1] == "every segment is deletable: the log rolls first, keeping an empty active segment at 3"


def test_reasons_size_against_exact_bytes() -> None:
    """Rounded sizes that would read equal are shown in bytes."""
    segs = [FakeSegment(0, 2**30 - 1, T0)]
    plan = plan_segments(segs, config=log_config(retention_bytes=2**30), log_start_offset=0, high_watermark=1,
                         log_end_offset=1, now_ms=T0, topic_partition=TopicPartition("t", 0))
    assert plan.passes[1].stop == f"size {2**30 - 1} B below retention.bytes {2**30} B"


# --- dry run ----------------------------------------------------------------------------------

def _mixed_log(make_log: MakeLog, clock: FakeClock) -> Log:
    """Segments that three passes each take a part of: start offset, size, then time."""
    log = make_log(segment_bytes=SIZE * 2, retention_bytes=SIZE * 6, retention_ms=DAY_MS)
    now = clock.milliseconds()
    for ts in [now - 3 * DAY_MS] * 8 + [now] * 4:
        append(log, 1, ts)
    log.update_high_watermark(log.log_end_offset)
    log.maybe_increment_log_start_offset(3)
    return log


def test_dry_run_changes_nothing_and_matches_the_run(make_log: MakeLog, clock: FakeClock, scheduler: FakeScheduler) -> None:
    log = _mixed_log(make_log, clock)
    before = (bases(log), log.log_start_offset, sorted(p.name for p in log.dir.iterdir()), scheduler.pending())
    plan = plan_retention(log, clock.milliseconds())
    assert (bases(log), log.log_start_offset, sorted(p.name for p in log.dir.iterdir()), scheduler.pending()) == before
    assert [(d.base_offset, d.cause) for d in plan.segments] == [
        (0, LOG_START_OFFSET), (2, RETENTION_BYTES), (4, RETENTION_BYTES), (6, RETENTION_MS)]
    assert plan.dry_run and plan.log_start_offset_after == 8
    done = delete_now(log, clock)
    assert not done.dry_run
    assert dataclasses.replace(plan, dry_run=False) == done
    assert bases(log) == [8, 10] and log.log_start_offset == 8


def test_plan_to_json(make_log: MakeLog, clock: FakeClock) -> None:
    log = _mixed_log(make_log, clock)
    plan = plan_retention(log, clock.milliseconds())
    data = json.loads(json.dumps(plan.to_json()))
    assert data["topic"] == "topic" and data["partition"] == 0
    assert data["segments"][0] == {"name": name(0), "base_offset": 0, "next_offset": 2, "size": SIZE * 2,
                                   "cause": LOG_START_OFFSET,
                                   "detail": "next segment starts at 2, at or below the log start offset 3"}
    assert data["total_bytes"] == SIZE * 8 and data["log_start_offset_after"] == 8 and not data["roll_needed"]
    assert [p["deleted"] for p in data["passes"]] == [[0], [2, 4], [6]]
    assert data["reasons"] == list(plan.reasons)
    assert data["cleanup_policy"] == ["delete"] and data["dry_run"] is True


# --- formatting -------------------------------------------------------------------------------

@pytest.mark.parametrize(("ms", "text"), [
    (0, "0 ms"), (999, "999 ms"), (1000, "1 second"), (1500, "1.5 seconds"), (90_000, "1.5 minutes"),
    (HOUR_MS, "1 hour"), (3 * DAY_MS, "3 days"), (604_800_000, "7 days"), (-2000, "-2 seconds"),
])
def test_format_duration(ms: int, text: str) -> None:
    assert format_duration(ms) == text


@pytest.mark.parametrize(("size", "text"), [
    (0, "0 B"), (1023, "1023 B"), (1024, "1 KiB"), (1536, "1.5 KiB"), (2 * 2**30, "2 GiB"),
    (int(1.2 * 2**30), "1.2 GiB"), (2**40, "1 TiB"),
])
def test_format_bytes(size: int, text: str) -> None:
    assert format_bytes(size) == text


# --- properties -------------------------------------------------------------------------------

POLICIES = st.sampled_from(["delete", "compact", "compact,delete", ""])


@st.composite
def fake_logs(draw: st.DrawFn) -> dict[str, Any]:
    count = draw(st.integers(1, 7))
    sizes = draw(st.lists(st.integers(0, 40), min_size=count, max_size=count))
    gaps = draw(st.lists(st.integers(1, 4), min_size=count, max_size=count))
    segments, base = [], draw(st.integers(0, 3))
    for size, gap in zip(sizes, gaps):
        ts = draw(st.one_of(st.just(-1), st.integers(T0 - 5 * DAY_MS, T0 + DAY_MS)))
        segments.append(FakeSegment(base, size, ts, mtime=draw(st.integers(T0 - 5 * DAY_MS, T0 + DAY_MS))))
        base += gap
    leo = segments[-1].base_offset + (0 if sizes[-1] == 0 else gaps[-1])
    start = draw(st.integers(segments[0].base_offset, leo))
    hw = draw(st.integers(start, leo))
    total = sum(sizes)
    ages = [T0 - s.largest_timestamp for s in segments if s.largest_timestamp <= T0]  # exact boundaries too
    return {
        "segments": segments, "log_start_offset": start, "high_watermark": hw, "log_end_offset": leo,
        "retention_ms": draw(st.one_of(st.just(-1), st.integers(0, 4 * DAY_MS), st.sampled_from(ages or [0]))),
        "retention_bytes": draw(st.one_of(st.just(-1), st.integers(0, total + 20))),
        "policy": draw(POLICIES),
    }


@settings(max_examples=300, deadline=None)
@given(fake_logs())
def test_plan_is_a_prefix_below_hw_and_equals_kafkas_passes(case: dict[str, Any]) -> None:
    config = log_config(retention_ms=case["retention_ms"], retention_bytes=case["retention_bytes"],
                        cleanup_policy=case["policy"])
    plan = plan_segments(case["segments"], config=config, log_start_offset=case["log_start_offset"],
                         high_watermark=case["high_watermark"], log_end_offset=case["log_end_offset"],
                         now_ms=T0, topic_partition=TopicPartition("t", 0))
    model = kafka_model(case["segments"], log_start_offset=case["log_start_offset"],
                        high_watermark=case["high_watermark"], log_end_offset=case["log_end_offset"],
                        retention_ms=case["retention_ms"], retention_bytes=case["retention_bytes"],
                        delete_policy=config.delete, now_ms=T0)
    got = [(d.base_offset, d.cause) for d in plan.segments]
    assert got == model.deleted
    assert [d.base_offset for d in plan.segments] == [s.base_offset for s in case["segments"][:len(got)]], "a prefix"
    assert all(d.next_offset <= case["high_watermark"] for d in plan.segments), "never past the high watermark"
    assert plan.log_start_offset_after == model.log_start_offset
    assert plan.roll_needed == model.rolled
    assert len(plan.reasons) >= 1


@st.composite
def real_logs(draw: st.DrawFn) -> dict[str, Any]:
    count = draw(st.integers(1, 4))
    timestamps = st.one_of(st.just(NO_TIMESTAMP), st.integers(T0 - 4 * DAY_MS, T0 + DAY_MS))
    segments = []
    for i in range(count):
        batches = draw(st.lists(timestamps, min_size=0 if i == count - 1 else 1, max_size=3))
        segments.append((batches, draw(st.integers(T0 - 4 * DAY_MS, T0 + DAY_MS))))
    return {
        "segments": segments, "hw_fraction": draw(st.floats(0, 1)), "start_fraction": draw(st.floats(0, 1)),
        "retention_ms": draw(st.one_of(st.just(-1), st.integers(0, 3 * DAY_MS))),
        "retention_bytes": draw(st.one_of(st.just(-1), st.integers(0, 12 * SIZE))), "policy": draw(POLICIES),
    }


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(real_logs())
def test_dry_run_equals_the_run_and_kafkas_passes_on_real_logs(case: dict[str, Any]) -> None:
    clock = FakeClock(T0)
    scheduler = FakeScheduler(clock)
    with tempfile.TemporaryDirectory() as tmp:
        log = Log.open(Path(tmp) / "t-0", log_config(message_timestamp_after_max_ms=10 * DAY_MS),
                       clock=clock, scheduler=scheduler)
        try:
            model_segments = _build(log, case["segments"])
            hw = log.update_high_watermark(round(case["hw_fraction"] * log.log_end_offset))
            log.maybe_increment_log_start_offset(round(case["start_fraction"] * hw))
            log.update_config(log.config.with_overrides(
                retention_ms=case["retention_ms"], retention_bytes=case["retention_bytes"],
                cleanup_policy=case["policy"]))
            start, leo = log.log_start_offset, log.log_end_offset
            plan = plan_retention(log, T0)
            done = delete_old_segments(log, T0)
            model = kafka_model(model_segments, log_start_offset=start, high_watermark=hw, log_end_offset=leo,
                                retention_ms=case["retention_ms"], retention_bytes=case["retention_bytes"],
                                delete_policy=log.config.delete, now_ms=T0)
            assert dataclasses.replace(plan, dry_run=False) == done
            assert [(d.base_offset, d.cause) for d in done.segments] == model.deleted
            assert log.log_start_offset == model.log_start_offset == done.log_start_offset_after
            deleted = {b for b, _ in model.deleted}
            kept = [s.base_offset for s in model_segments if s.base_offset not in deleted]
            assert bases(log) == (kept or [leo])
        finally:
            log.close()


def _build(log: Log, segments: list[tuple[list[int], int]]) -> list[FakeSegment]:
    """Append each segment's batches (one record each), roll between segments, set each ``.log``
    mtime; returns what retention should see of them."""
    built = []
    for i, (timestamps, mtime) in enumerate(segments):
        if i:
            log.roll()
        base = log.log_end_offset
        for ts in timestamps:
            log.append_as_leader(single(ts))
        built.append(FakeSegment(base, SIZE * len(timestamps), max(timestamps, default=-1), mtime))
    for segment, fake in zip(log.segments, built):
        set_mtime(segment.log.path, fake.mtime)
    return built


# --- tiered logs: local retention (UnifiedLogTest's remote-storage retention cases) ------------

def test_tiered_log_deletes_local_segments_only_once_copied(make_log: MakeLog, clock: FakeClock) -> None:
    """testRetentionOnLocalLogDeletionWhenRemoteLogCopyEnabled: a tiered log whose segments all breach
    local.retention.ms deletes none until the remote tier holds them, then exactly the copied ones;
    the log start offset stays (the records are still the remote tier's), the local one moves."""
    log = make_log(segment_bytes=SIZE * 5, remote_storage_enable="true", local_retention_ms=1000,
                   retention_ms=-1)
    append(log, 15, clock.milliseconds() - 2000)
    log.update_high_watermark(log.log_end_offset)
    assert bases(log) == [0, 5, 10] and log.config.remote_copy_enabled

    plan = delete_now(log, clock)
    assert plan.segments == () and bases(log) == [0, 5, 10]
    assert any("not in the remote tier yet (it holds nothing yet)" in r for r in plan.reasons)

    log.update_highest_offset_in_remote_storage(6)  # [0, 5) copied; [5, 10) only partly
    plan = delete_now(log, clock)
    assert [d.base_offset for d in plan.segments] == [0]
    assert plan.segments[0].cause == "local.retention.ms"
    assert bases(log) == [5, 10]
    assert (log.log_start_offset, log.local_log_start_offset) == (0, 5)

    log.update_highest_offset_in_remote_storage(14)
    delete_now(log, clock)
    assert bases(log) == [10], "the active segment is never copied, so it stays"
    assert (log.log_start_offset, log.local_log_start_offset) == (0, 10)
    log.update_highest_offset_in_remote_storage(3)
    assert log.highest_offset_in_remote_storage == 14, "it only moves forward"


def test_tiered_log_local_retention_bytes_follows_retention_bytes_at_minus_two(make_log: MakeLog, clock: FakeClock) -> None:
    """local.retention.bytes=-2 means retention.bytes; a set local limit wins over it."""
    follow = make_log(segment_bytes=SIZE * 5, remote_storage_enable="true", retention_bytes=SIZE * 10)
    own = make_log(segment_bytes=SIZE * 5, remote_storage_enable="true", retention_bytes=SIZE * 10,
                   local_retention_bytes=SIZE * 5)
    for log in (follow, own):
        append(log, 15)
        log.update_high_watermark(log.log_end_offset)
        log.update_highest_offset_in_remote_storage(14)
        delete_now(log, clock)
    assert bases(follow) == [5, 10]
    assert bases(own) == [10]
    assert own.log_start_offset == 0


def test_tiered_log_with_copy_disabled_follows_retention_as_before(make_log: MakeLog, clock: FakeClock) -> None:
    """remote.log.copy.disable: nothing more is copied and local data follows retention.*, moving the log
    start offset, as on a log that is not tiered."""
    log = make_log(segment_bytes=SIZE * 5, remote_storage_enable="true", remote_log_copy_disable="true",
                   retention_bytes=SIZE * 10)
    append(log, 15)
    log.update_high_watermark(log.log_end_offset)
    assert not log.config.remote_copy_enabled
    delete_now(log, clock)
    assert bases(log) == [5, 10] and log.log_start_offset == 5


def test_tiered_dry_run_matches_the_live_pass(make_log: MakeLog, clock: FakeClock) -> None:
    log = make_log(segment_bytes=SIZE * 5, remote_storage_enable="true", local_retention_bytes=SIZE * 4)
    append(log, 20)
    log.update_high_watermark(log.log_end_offset)
    log.update_highest_offset_in_remote_storage(9)
    dry = plan_retention(log, clock.milliseconds())
    live = delete_now(log, clock)
    assert dry.segments == live.segments and [d.base_offset for d in live.segments] == [0, 5]
    assert dry.log_start_offset_after == live.log_start_offset_after == 0


def test_tiered_log_reads_and_list_offsets_below_the_local_start(make_log: MakeLog, clock: FakeClock) -> None:
    """A read of an offset only the remote tier holds is Kafka's OFFSET_MOVED_TO_TIERED_STORAGE (109);
    ListOffsets -4 answers the local log start offset and -5 the highest remote offset."""
    from tidelog.errors import OffsetMovedToTieredStorageError
    from tidelog.storage.log import EARLIEST_LOCAL_TIMESTAMP, EARLIEST_TIMESTAMP, LATEST_TIERED_TIMESTAMP

    log = make_log(segment_bytes=SIZE * 5, remote_storage_enable="true", local_retention_bytes=SIZE * 4)
    append(log, 15)
    log.leader_epoch_cache.assign(3, 0)
    log.update_high_watermark(log.log_end_offset)
    assert log.fetch_offset_by_timestamp(LATEST_TIERED_TIMESTAMP).offset == -1
    log.update_highest_offset_in_remote_storage(9)
    delete_now(log, clock)
    assert log.local_log_start_offset == 10
    with pytest.raises(OffsetMovedToTieredStorageError) as raised:
        log.read(4, 1 << 20)
    assert raised.value.error_code == 109 and "local log starts at 10" in str(raised.value)
    assert log.read(10, 1 << 20).records
    assert log.fetch_offset_by_timestamp(EARLIEST_TIMESTAMP).offset == 0
    assert (log.fetch_offset_by_timestamp(EARLIEST_LOCAL_TIMESTAMP).offset,
            log.fetch_offset_by_timestamp(EARLIEST_LOCAL_TIMESTAMP).leader_epoch) == (10, 3)
    assert log.fetch_offset_by_timestamp(LATEST_TIERED_TIMESTAMP).offset == 9


def test_list_offsets_tiered_specs_on_a_log_that_is_not_tiered(make_log: MakeLog) -> None:
    from tidelog.storage.log import EARLIEST_LOCAL_TIMESTAMP, EARLIEST_TIMESTAMP, LATEST_TIERED_TIMESTAMP

    log = make_log()
    append(log, 3)
    log.update_highest_offset_in_remote_storage(2)  # ignored by ListOffsets: the log is not tiered
    assert log.fetch_offset_by_timestamp(EARLIEST_LOCAL_TIMESTAMP) == log.fetch_offset_by_timestamp(EARLIEST_TIMESTAMP)
    assert log.fetch_offset_by_timestamp(LATEST_TIERED_TIMESTAMP).offset == -1


# --- reason codes (explain --json "reason", the tidelog_log_retention_reason label) ---------------

@pytest.mark.parametrize(("configs", "high_watermark", "tiered", "count", "expected"), [
    ({"retention_ms": HOUR_MS}, 30, False, 3, "deleting"),
    ({"retention_ms": 3 * DAY_MS}, 30, False, 3, "within_retention"),
    ({"retention_ms": -1, "retention_bytes": -1}, 30, False, 3, "no_limit"),
    ({"cleanup_policy": "compact", "retention_ms": HOUR_MS}, 30, False, 3, "compacted"),
    ({"retention_ms": HOUR_MS}, 30, False, 0, "active_segment_only"),  # an empty active segment alone
    ({"retention_ms": HOUR_MS}, 0, False, 3, "below_high_watermark"),
    ({"retention_ms": HOUR_MS}, 30, True, 3, "awaiting_remote_copy"),
])
def test_retention_reason_codes(configs: dict[str, Any], high_watermark: int, tiered: bool, count: int,
                                expected: str) -> None:
    segments = [FakeSegment(10 * i, 100, T0 - DAY_MS) for i in range(count)] or [FakeSegment(0, 0, -1)]
    plan = plan_segments(segments, config=log_config(**configs), log_start_offset=0, high_watermark=high_watermark,
                         log_end_offset=10 * count, now_ms=T0, topic_partition=TopicPartition("t", 0), tiered=tiered,
                         highest_remote_offset=-1)
    assert plan.reason == expected and plan.to_json()["reason"] == expected
    assert expected in RETENTION_REASONS


def test_a_held_plan_says_held(make_log: MakeLog, clock: FakeClock) -> None:
    log = make_log(retention_ms=0)
    append(log, 3)
    assert held_plan(log, clock.milliseconds(), dry_run=True, reason="configs unconfirmed").reason == "held"
