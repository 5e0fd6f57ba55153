"""The cleanable range, the cleaning stats, the choice of the filthiest log and the explanations
(cleaner/plan.py; Kafka's LogCleanerManagerTest cleanableOffsets scenarios, kafka-storage.md §3.7.3)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from cleaner_helpers import T0, MakeLog, append_records, fill_segments, write_batches

from tidelog.cleaner.plan import (
    ACTIVE_SEGMENT,
    HIGH_WATERMARK,
    LAST_STABLE_OFFSET,
    LONG_MAX,
    MIN_COMPACTION_LAG,
    QuarantineRecord,
    cleanable_offsets,
    cleaning_reason,
    choose_filthiest,
    eligible_at,
    explain_log,
    failed_explanation,
    format_time,
    is_compacted,
    log_to_clean,
    max_compaction_delay,
)
from tidelog.storage.log import Log
from tidelog.testing import FakeClock
from tidelog.topic_partition import TopicPartition

LAG = 60 * 60 * 1000
TP = TopicPartition("log", 0)


class _Lso:
    """A log whose last stable offset is held below its high watermark (an open transaction);
    tidelog's storage does not track transactions yet."""

    def __init__(self, log: Log, lso: int) -> None:
        self._log, self.last_stable_offset = log, lso

    def __getattr__(self, name: str) -> Any:
        return getattr(self._log, name)


def _sizes(log: Log, predicate: Any) -> int:
    return sum(s.size for s in log.segments if predicate(s.base_offset))


# --- cleanable offsets (Kafka's testCleanableOffsets*) ---------------------------------------------

def test_cleanable_offsets_bounded_by_high_watermark(make_log: MakeLog) -> None:
    log = make_log()
    fill_segments(log, 8)
    log.update_high_watermark(50)
    found = cleanable_offsets(log, 0, T0)
    assert (found.first_dirty_offset, found.first_uncleanable_offset) == (0, 50)
    assert log.last_stable_offset == log.high_watermark
    assert found.bound == HIGH_WATERMARK and found.uncleanable_reason == "high watermark 50"
    assert not found.checkpoint_reset


def test_cleanable_offsets_bounded_by_active_segment(make_log: MakeLog) -> None:
    log = make_log()
    fill_segments(log, 8)
    log.update_high_watermark(log.log_end_offset)
    found = cleanable_offsets(log, 0, T0)
    active = log.active_segment.base_offset
    assert (found.first_dirty_offset, found.first_uncleanable_offset) == (0, active)
    assert found.bound == ACTIVE_SEGMENT
    assert found.uncleanable_reason == f"active segment {active} (not rolled yet)"


def test_cleanable_offsets_bounded_by_min_compaction_lag(make_log: MakeLog, clock: FakeClock) -> None:
    log = make_log(min_compaction_lag_ms=LAG)
    fill_segments(log, 4, timestamp=T0)
    active_at_t0 = log.active_segment.base_offset
    clock.advance(LAG + 1)
    t1 = clock.milliseconds()
    fill_segments(log, 8, timestamp=t1)
    log.update_high_watermark(log.log_end_offset)
    found = cleanable_offsets(log, 0, t1)
    assert (found.first_dirty_offset, found.first_uncleanable_offset) == (0, active_at_t0)
    assert found.bound == MIN_COMPACTION_LAG and found.bound_eligible_at == t1 + LAG
    assert found.uncleanable_reason == (
        f"min.compaction.lag.ms={LAG}: segment {active_at_t0} has records from {format_time(t1)} "
        f"(eligible at {format_time(t1 + LAG)})")


def test_cleanable_offsets_when_every_record_is_older_than_the_lag(make_log: MakeLog, clock: FakeClock) -> None:
    log = make_log(min_compaction_lag_ms=LAG)
    fill_segments(log, 8, timestamp=T0)
    log.update_high_watermark(log.log_end_offset)
    clock.advance(LAG + 1)
    found = cleanable_offsets(log, 0, clock.milliseconds())
    assert (found.first_dirty_offset, found.first_uncleanable_offset) == (0, log.active_segment.base_offset)
    assert found.bound == ACTIVE_SEGMENT


def test_cleanable_offsets_bounded_by_an_open_transaction(make_log: MakeLog) -> None:
    """Kafka's testUndecidedTransactionalDataNotCleanable, shape only: the last stable offset
    below the high watermark bounds the range."""
    log = make_log()
    fill_segments(log, 4)
    log.update_high_watermark(log.log_end_offset)
    found = cleanable_offsets(_Lso(log, 3), 0, T0)  # type: ignore[arg-type]
    assert found.first_uncleanable_offset == 3
    assert found.bound == LAST_STABLE_OFFSET and found.uncleanable_reason == "last stable offset 3 (open transaction)"
    stats = log_to_clean(TP, _Lso(log, 0), 0, T0)  # type: ignore[arg-type]
    assert cleaning_reason(stats, compacted=True) == "open_transaction"


def test_cleanable_offsets_with_nothing_readable_is_empty(make_log: MakeLog) -> None:
    log = make_log()
    fill_segments(log, 3)  # the high watermark stays 0: nothing is cleanable
    found = cleanable_offsets(log, None, T0)
    assert (found.first_dirty_offset, found.first_uncleanable_offset) == (0, 0)
    assert found.bound == HIGH_WATERMARK
    assert explain_log(TP, log, None, T0).reason == "nothing_dirty"


def test_checkpoint_is_reset_below_log_start_and_past_log_end(make_log: MakeLog, tmp_path: Path) -> None:
    """Kafka's testCleanableOffsetsNeedsCheckpointReset."""
    log = make_log(dir=tmp_path / "foo-0", segment_bytes=2048)
    write_batches(log, 20, 1, 5)
    log.maybe_increment_log_start_offset(10)
    assert not cleanable_offsets(log, 15, T0).checkpoint_reset
    assert cleanable_offsets(log, None, T0).first_dirty_offset == 10
    log.maybe_increment_log_start_offset(20)
    below = cleanable_offsets(log, 15, T0)
    assert below.checkpoint_reset and below.first_dirty_offset == 20
    past = cleanable_offsets(log, 25, T0)
    assert past.checkpoint_reset and past.first_dirty_offset == 20


def test_first_uncleanable_is_never_below_first_dirty(make_log: MakeLog) -> None:
    """Kafka's testDirtyOffsetLargerThanActiveSegmentBaseOffset: a checkpoint inside the active segment."""
    log = make_log(segment_bytes=2048)
    append_records(log, 3)
    append_records(log, 3)
    assert log.num_segments == 1
    found = cleanable_offsets(log, 3, T0)
    assert (found.first_dirty_offset, found.first_uncleanable_offset) == (3, 3)
    assert log_to_clean(TP, log, 3, T0).cleanable_bytes == 0


# --- stats -----------------------------------------------------------------------------------------

def test_log_to_clean_counts_a_straddling_segment_as_clean_and_cleanable(make_log: MakeLog) -> None:
    log = make_log()
    fill_segments(log, 6)
    log.update_high_watermark(log.log_end_offset)
    bases = [s.base_offset for s in log.segments]
    dirty = bases[2] + 1  # inside the third segment
    stats = log_to_clean(TP, log, dirty, T0)
    active = bases[-1]
    assert stats.first_dirty_offset == dirty and stats.first_uncleanable_offset == active
    assert stats.clean_bytes == _sizes(log, lambda b: b < dirty)
    assert stats.cleanable_bytes == _sizes(log, lambda b: bases[2] <= b < active)
    assert stats.total_bytes == stats.clean_bytes + stats.cleanable_bytes
    assert stats.cleanable_ratio == pytest.approx(stats.cleanable_bytes / stats.total_bytes)
    assert not stats.needs_compaction_now and stats.max_compaction_delay_ms == 0


def test_log_to_clean_aligns_the_end_to_the_segment_holding_it(make_log: MakeLog) -> None:
    log = make_log()
    fill_segments(log, 6)
    bases = [s.base_offset for s in log.segments]
    log.update_high_watermark(bases[3] + 2)
    stats = log_to_clean(TP, log, 0, T0)
    assert stats.offsets.first_uncleanable_offset == bases[3] + 2
    assert stats.first_uncleanable_offset == bases[3]
    assert stats.cleanable_bytes == _sizes(log, lambda b: b < bases[3])
    assert stats.uncleanable_reason.startswith(f"high watermark {bases[3] + 2} (inside segment {bases[3]}")


def test_max_compaction_lag_forces_a_log_below_the_dirty_ratio(make_log: MakeLog, clock: FakeClock) -> None:
    """Kafka's testMaxLogCompactionLag: dirty ratio 1.0 is never exceeded, the max lag forces it."""
    log = make_log(max_compaction_lag_ms=LAG, min_cleanable_dirty_ratio=1.0)
    fill_segments(log, 4, timestamp=T0)
    log.update_high_watermark(log.log_end_offset)
    assert not log_to_clean(TP, log, None, T0 + LAG).is_candidate
    now = T0 + 2 * LAG
    stats = log_to_clean(TP, log, None, now)
    assert stats.max_compaction_delay_ms == LAG
    assert stats.earliest_dirty_timestamp == T0
    assert stats.needs_compaction_now and stats.is_candidate
    assert max_compaction_delay(log, 0, now) == LAG


def test_segments_without_timestamps_are_never_overdue(make_log: MakeLog) -> None:
    log = make_log(max_compaction_lag_ms=1, min_cleanable_dirty_ratio=1.0)
    fill_segments(log, 3, timestamp=-1)
    log.update_high_watermark(log.log_end_offset)
    stats = log_to_clean(TP, log, None, T0 * 2)
    assert stats.earliest_dirty_timestamp == LONG_MAX and not stats.needs_compaction_now


def test_an_empty_log_is_never_a_candidate(make_log: MakeLog) -> None:
    stats = log_to_clean(TP, make_log(min_cleanable_dirty_ratio=0.0), None, T0)
    assert stats.total_bytes == 0 and stats.cleanable_ratio == 0.0 and not stats.is_candidate


@pytest.mark.parametrize("policy, compacted", [("compact", True), ("compact,delete", True), ("delete", False)])
def test_is_compacted(make_log: MakeLog, policy: str, compacted: bool) -> None:
    assert is_compacted(make_log(cleanup_policy=policy)) is compacted


# --- choosing ---------------------------------------------------------------------------------------

def _filthy_logs(make_log: MakeLog, tmp_path: Path, counts: list[int], **config: Any) -> list[Log]:
    logs = []
    for i, count in enumerate(counts):
        log = make_log(dir=tmp_path / f"wishing-well-{i}", segment_bytes=2048, min_cleanable_dirty_ratio=0.05, **config)
        write_batches(log, count, 1, 5)
        logs.append(log)
    return logs


def test_choose_filthiest_takes_the_highest_ratio(make_log: MakeLog, tmp_path: Path) -> None:
    logs = _filthy_logs(make_log, tmp_path, [20, 25, 30])
    stats = [log_to_clean(log.topic_partition, log, 20, T0) for log in logs]
    assert stats[0].cleanable_bytes == 0 and not stats[0].is_candidate
    assert stats[1].cleanable_ratio < stats[2].cleanable_ratio
    chosen = choose_filthiest(stats)
    assert chosen is stats[2] and chosen.topic_partition == TopicPartition("wishing-well", 2)
    assert choose_filthiest(stats[:1]) is None and choose_filthiest([]) is None


def test_choose_filthiest_keeps_the_first_of_equals(make_log: MakeLog, tmp_path: Path) -> None:
    logs = _filthy_logs(make_log, tmp_path, [25, 25])
    stats = [log_to_clean(log.topic_partition, log, 20, T0) for log in logs]
    assert stats[0].cleanable_ratio == stats[1].cleanable_ratio
    assert choose_filthiest(stats) is stats[0]


def test_ratio_must_be_strictly_above_the_minimum(make_log: MakeLog, tmp_path: Path) -> None:
    log = _filthy_logs(make_log, tmp_path, [30])[0]
    ratio = log_to_clean(TP, log, 20, T0).cleanable_ratio
    log.update_config(log.config.with_overrides(min_cleanable_dirty_ratio=ratio))
    assert not log_to_clean(TP, log, 20, T0).is_candidate
    log.update_config(log.config.with_overrides(min_cleanable_dirty_ratio=ratio - 0.001))
    assert log_to_clean(TP, log, 20, T0).is_candidate


# --- eligibility --------------------------------------------------------------------------------------

def test_eligible_at_is_now_for_a_candidate(make_log: MakeLog, tmp_path: Path) -> None:
    log = _filthy_logs(make_log, tmp_path, [30])[0]
    assert eligible_at(TP, log, 20, T0) == T0


def test_eligible_at_waits_for_the_min_compaction_lag(make_log: MakeLog) -> None:
    log = make_log(min_compaction_lag_ms=LAG)
    fill_segments(log, 5, timestamp=T0)
    log.update_high_watermark(log.log_end_offset)
    assert log_to_clean(TP, log, None, T0).cleanable_bytes == 0
    assert eligible_at(TP, log, None, T0) == T0 + LAG
    assert log_to_clean(TP, log, None, T0 + LAG).is_candidate
    assert not log_to_clean(TP, log, None, T0 + LAG - 1).is_candidate


def test_eligible_at_waits_for_the_max_compaction_lag(make_log: MakeLog) -> None:
    log = make_log(max_compaction_lag_ms=LAG, min_cleanable_dirty_ratio=1.0)
    fill_segments(log, 4, timestamp=T0)
    log.update_high_watermark(log.log_end_offset)
    assert eligible_at(TP, log, None, T0) == T0 + LAG + 1


def test_eligible_at_is_none_when_only_new_data_helps(make_log: MakeLog) -> None:
    log = make_log(min_cleanable_dirty_ratio=1.0)
    fill_segments(log, 4)
    log.update_high_watermark(log.log_end_offset)
    assert eligible_at(TP, log, None, T0) is None


# --- explanations -------------------------------------------------------------------------------------

def test_explain_a_cleanable_log(make_log: MakeLog, tmp_path: Path) -> None:
    log = _filthy_logs(make_log, tmp_path, [30])[0]
    tp = log.topic_partition
    explained = explain_log(tp, log, 20, T0, last_clean_ms=T0 - 1000)
    stats = log_to_clean(tp, log, 20, T0)
    assert explained.cleanable_now and explained.eligible_at_ms == T0
    assert (explained.first_dirty_offset, explained.dirty_bytes, explained.total_bytes) == (
        20, stats.cleanable_bytes, stats.total_bytes)
    assert explained.headline.startswith(f"cleanable now: dirty ratio {stats.cleanable_ratio:.3f} above")
    lines = explained.summary()
    assert lines[0] == f"{tp}: cleanable now"
    assert f"first uncleanable offset {stats.first_uncleanable_offset}: active segment" in lines[2]
    assert lines[3] == f"  state: idle; last clean: {format_time(T0 - 1000)}"
    data = explained.to_json()
    assert data["first_dirty_offset"] == 20 and data["dirty_bytes"] == stats.cleanable_bytes
    assert data["state"] is None and data["last_error"] is None and data["eligible_at_ms"] == T0
    assert explained.reason == data["reason"] == "cleanable"


def test_explain_below_the_ratio_with_numbers(make_log: MakeLog, tmp_path: Path) -> None:
    log = _filthy_logs(make_log, tmp_path, [30], )[0]
    log.update_config(log.config.with_overrides(min_cleanable_dirty_ratio=0.9))
    explained = explain_log(log.topic_partition, log, 20, T0)
    assert not explained.cleanable_now and explained.eligible_at_ms is None
    assert explained.reasons[0].startswith(f"dirty ratio {explained.dirty_ratio:.3f} is not above "
                                           f"min.cleanable.dirty.ratio 0.9 (")
    assert explained.headline == f"not cleanable now: {explained.reasons[0]}"
    assert explained.reason == "below_min_cleanable_ratio"


def test_explain_a_time_bound_log_says_when(make_log: MakeLog) -> None:
    log = make_log(min_compaction_lag_ms=LAG)
    fill_segments(log, 5, timestamp=T0)
    log.update_high_watermark(log.log_end_offset)
    explained = explain_log(TP, log, None, T0)
    assert not explained.cleanable_now and explained.eligible_at_ms == T0 + LAG
    assert explained.uncleanable_bound == MIN_COMPACTION_LAG
    assert explained.reasons[0] == f"nothing dirty below the first uncleanable offset {explained.first_uncleanable_offset}"
    assert f"time-bound: becomes a candidate at {format_time(T0 + LAG)}" in explained.reasons[1]
    assert f"eligible at {format_time(T0 + LAG)} (in 1 hour)" in explained.summary()[0]
    assert explained.reason == "min_compaction_lag"


def test_explain_an_overdue_log_puts_the_lag_first(make_log: MakeLog) -> None:
    log = make_log(max_compaction_lag_ms=LAG, min_cleanable_dirty_ratio=1.0)
    fill_segments(log, 4, timestamp=T0)
    log.update_high_watermark(log.log_end_offset)
    explained = explain_log(TP, log, None, T0 + 2 * LAG)
    assert explained.cleanable_now
    assert explained.reasons[0].startswith(f"overdue by max.compaction.lag.ms={LAG}: oldest dirty record from "
                                           f"{format_time(T0)}, 1 hour late")
    assert explained.reason == "cleanable"


def test_explain_blockers(make_log: MakeLog, tmp_path: Path) -> None:
    log = _filthy_logs(make_log, tmp_path, [30])[0]
    tp = log.topic_partition
    paused = explain_log(tp, log, 20, T0, state="paused (2)")
    assert not paused.cleanable_now and paused.eligible_at_ms is None
    assert paused.reasons[0].startswith("cleaner state: paused (2) (a truncation") and paused.reason == "paused"
    assert explain_log(tp, log, 20, T0, state="in progress").reason == "in_progress"
    assert explain_log(tp, log, 20, T0, state="aborted").reason == "aborted"
    record = QuarantineRecord(tp, str(tmp_path), "CorruptRecordError: bad crc", "cleaning", T0 - 10, T0 - 10, 2,
                              T0 + 5000)
    waiting = explain_log(tp, log, 20, T0, quarantine=record)
    assert not waiting.cleanable_now and waiting.eligible_at_ms == T0 + 5000
    assert waiting.last_error == "CorruptRecordError: bad crc"
    assert waiting.reasons[0] == (f"quarantined since {format_time(T0 - 10)} after 2 failed attempts (cleaning); "
                                  f"retried at {format_time(T0 + 5000)}")
    assert "  last error: CorruptRecordError: bad crc" in waiting.summary()
    assert waiting.to_json()["quarantine"]["attempts"] == 2 and waiting.reason == "quarantined"
    due = explain_log(tp, log, 20, T0 + 5000, quarantine=record)
    assert due.cleanable_now and due.reasons[0].endswith("retry due at the next cleaner pass")
    assert due.reason == "cleanable"


def test_explain_a_log_that_is_not_compacted(make_log: MakeLog) -> None:
    log = make_log(cleanup_policy="delete")
    fill_segments(log, 3)
    explained = explain_log(TP, log, None, T0)
    assert not explained.compacted and not explained.cleanable_now and explained.eligible_at_ms is None
    assert explained.reasons[0].startswith("not compacted") and explained.reason == "not_compacted"


def test_explain_notes_a_checkpoint_reset_and_an_empty_log(make_log: MakeLog) -> None:
    log = make_log()
    explained = explain_log(TP, log, 7, T0)
    assert explained.checkpoint_reset and explained.first_dirty_offset == 0
    assert explained.reasons == ("the log is empty",
                                 "cleaner checkpoint outside [0, 0]: reset to the log start offset 0")
    assert explained.reason == "empty"


def test_failed_explanation_carries_the_error(make_log: MakeLog) -> None:
    log = make_log()
    explained = failed_explanation(TP, log, 5, T0, "OSError: gone")
    assert not explained.cleanable_now and explained.first_dirty_offset == 5
    assert explained.reasons[0] == "cannot compute the cleaning stats: OSError: gone"
    assert explained.headline == "not cleanable now: cannot compute the cleaning stats: OSError: gone"
    assert explained.reason == explained.to_json()["reason"] == "stats_failed"


def test_format_time() -> None:
    assert format_time(0) == "1970-01-01T00:00:00.000Z"
    assert format_time(LONG_MAX) == f"{LONG_MAX} ms"
