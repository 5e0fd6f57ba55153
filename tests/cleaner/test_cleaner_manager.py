"""The cleaner manager: choosing, states, checkpoints, quarantine, metrics and explain
(cleaner/manager.py; Kafka's LogCleanerManagerTest and the uncleanable-metrics scenario of
LogCleanerIntegrationTest, kafka-storage.md §4.2-4.3)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cleaner_helpers import T0, MakeLog, append_records, write_batches

from tidelog.cleaner.cleaning_state import ABORTED, IN_PROGRESS, paused
from tidelog.cleaner.manager import CleanerManager
from tidelog.cleaner.quarantine import PHASE_CLEANING, PHASE_RETENTION, PHASE_STATS, describe_error
from tidelog.cleaner.plan import log_to_clean
from tidelog.errors import (
    CleanerStateError,
    CorruptRecordError,
    LogCleaningAbortedError,
    LogCleaningError,
    UnknownTopicOrPartitionError,
)
from tidelog.storage.checkpoints import CLEANER_OFFSET_CHECKPOINT_FILE, OffsetCheckpointFile
from tidelog.storage.log import Log
from tidelog.testing import FakeClock
from tidelog.topic_partition import TopicPartition

WELL = [TopicPartition("wishing-well", p) for p in range(3)]
TP = TopicPartition("log", 0)
MINUTE = 60_000


class Logs:
    """The ``logs`` source a LogManager would give: a dict of live logs."""

    def __init__(self) -> None:
        self.by_tp: dict[TopicPartition, Log] = {}

    def __call__(self) -> list[tuple[TopicPartition, Log]]:
        return list(self.by_tp.items())

    def add(self, log: Log) -> Log:
        self.by_tp[log.topic_partition] = log
        return log


class _Broken:
    """A log whose stats fail while ``broken`` (Kafka's LogMock throwing from
    getFirstBatchTimestampForSegments)."""

    def __init__(self, log: Log) -> None:
        self._log, self.broken = log, True

    @property
    def segments(self) -> list[Any]:
        if self.broken:
            raise RuntimeError("Error!")
        return self._log.segments

    def __getattr__(self, name: str) -> Any:
        return getattr(self._log, name)


@pytest.fixture
def logs() -> Logs:
    return Logs()


@pytest.fixture
def manager_for(tmp_path: Path, logs: Logs, clock: FakeClock) -> Callable[..., CleanerManager]:
    def make(*dirs: Path, **kwargs: Any) -> CleanerManager:
        return CleanerManager(list(dirs) or [tmp_path], logs, clock, **kwargs)
    return make


def filthy_logs(make_log: MakeLog, tmp_path: Path, logs: Logs, tps: list[TopicPartition], start: int = 20,
                step: int = 5) -> list[Log]:
    """Kafka's setupIncreasinglyFilthyLogs: ``start`` one-record batches in the first log, ``step``
    more in each next one, five batches a segment, ``min.cleanable.dirty.ratio`` 0.05."""
    made = []
    for i, tp in enumerate(tps):
        log = logs.add(make_log(dir=tmp_path / str(tp), segment_bytes=2048, min_cleanable_dirty_ratio=0.05,
                                retention_ms=1))
        write_batches(log, start + i * step, 1, 5)
        made.append(log)
    return made


def small_log(make_log: MakeLog, tmp_path: Path, logs: Logs, policy: str = "compact", tp: TopicPartition = TP) -> Log:
    return logs.add(make_log(dir=tmp_path / str(tp), segment_bytes=2048, cleanup_policy=policy, retention_ms=1,
                             min_cleanable_dirty_ratio=0.05))


def on_disk(path: Path) -> dict[TopicPartition, int]:
    return OffsetCheckpointFile(path / CLEANER_OFFSET_CHECKPOINT_FILE).read()


def abort_in_thread(manager: CleanerManager, tp: TopicPartition,
                    call: Callable[[TopicPartition], None] | None = None) -> threading.Thread:
    """``call(tp)`` (default: abort_and_pause_cleaning) on another thread; returns once the state
    reads ABORTED (at most 5 s)."""
    thread = threading.Thread(target=call or manager.abort_and_pause_cleaning, args=(tp,), daemon=True)
    thread.start()
    tick = threading.Event()
    for _ in range(5000):
        if manager.is_cleaning_aborted(tp):
            return thread
        tick.wait(0.001)
    raise AssertionError("the partition was never marked aborted")


# --- grabbing the filthiest log ----------------------------------------------------------------------

def test_grab_returns_the_log_with_the_dirtiest_ratio(make_log: MakeLog, tmp_path: Path, logs: Logs,
                                                      manager_for: Callable[..., CleanerManager]) -> None:
    filthy_logs(make_log, tmp_path, logs, WELL)
    manager = manager_for()
    for tp in WELL:
        manager.update_checkpoints(tmp_path, tp, 20)
    chosen = manager.grab_filthiest_compacted_log()
    assert chosen is not None and chosen.topic_partition == WELL[2] and chosen.log.topic_partition == WELL[2]
    assert manager.state_of(WELL[2]) == IN_PROGRESS
    assert manager.state_of(WELL[0]) is None and manager.state_of(WELL[1]) is None


def test_grab_ignores_quarantined_partitions(make_log: MakeLog, tmp_path: Path, logs: Logs,
                                             manager_for: Callable[..., CleanerManager]) -> None:
    filthy_logs(make_log, tmp_path, logs, WELL)
    manager = manager_for()
    for tp in WELL:
        manager.update_checkpoints(tmp_path, tp, 20)
    manager.mark_uncleanable(WELL[2], tmp_path, "boom")
    chosen = manager.grab_filthiest_compacted_log()
    assert chosen is not None and chosen.topic_partition == WELL[1]


def test_grab_ignores_partitions_in_progress(make_log: MakeLog, tmp_path: Path, logs: Logs,
                                             manager_for: Callable[..., CleanerManager]) -> None:
    filthy_logs(make_log, tmp_path, logs, WELL)
    manager = manager_for()
    for tp in WELL:
        manager.update_checkpoints(tmp_path, tp, 20)
    first, second = manager.grab_filthiest_compacted_log(), manager.grab_filthiest_compacted_log()
    assert first is not None and second is not None
    assert (first.topic_partition, second.topic_partition) == (WELL[2], WELL[1])


def test_grab_ignores_both_in_progress_and_quarantined(make_log: MakeLog, tmp_path: Path, logs: Logs,
                                                       manager_for: Callable[..., CleanerManager]) -> None:
    filthy_logs(make_log, tmp_path, logs, WELL)
    manager = manager_for()
    for tp in WELL:
        manager.update_checkpoints(tmp_path, tp, 20)
    assert manager.grab_filthiest_compacted_log().topic_partition == WELL[2]  # type: ignore[union-attr]
    manager.mark_uncleanable(WELL[1], tmp_path, "boom")
    assert manager.grab_filthiest_compacted_log() is None  # WELL[0] has nothing dirty


def test_grab_quarantines_a_log_whose_stats_fail_and_goes_on(make_log: MakeLog, tmp_path: Path, logs: Logs,
                                                             manager_for: Callable[..., CleanerManager],
                                                             clock: FakeClock) -> None:
    """Kafka's testGrabFilthiestCompactedLogThrowsException, our way: the error is wrapped in a
    LogCleaningError naming the partition, the partition is quarantined, the others are chosen."""
    good, bad = filthy_logs(make_log, tmp_path, logs, WELL[:2])
    broken = _Broken(bad)
    logs.by_tp[WELL[1]] = broken  # type: ignore[assignment]
    manager = manager_for()
    chosen = manager.grab_filthiest_compacted_log()
    assert chosen is not None and chosen.topic_partition == WELL[0]
    [record] = manager.quarantined()
    assert (record.topic_partition, record.phase, record.attempts) == (WELL[1], PHASE_STATS, 1)
    assert record.error == ("LogCleaningError: failed to calculate log cleaning stats "
                            "(topic_partition='wishing-well-1'); caused by RuntimeError: Error!")
    assert (record.since_ms, record.retry_at_ms, record.log_dir) == (T0, T0 + MINUTE, str(tmp_path))
    manager.done_cleaning(WELL[0], tmp_path, chosen.first_uncleanable_offset)

    clock.advance(MINUTE)  # retry due, still broken: the backoff doubles
    manager.grab_filthiest_compacted_log()
    [record] = manager.quarantined()
    assert (record.attempts, record.since_ms, record.retry_at_ms) == (2, T0, T0 + 3 * MINUTE)

    broken.broken = False
    clock.advance(MINUTE)
    assert manager.grab_filthiest_compacted_log() is None  # still waiting: skipped
    assert manager.is_uncleanable(WELL[1])
    clock.advance(MINUTE)
    chosen = manager.grab_filthiest_compacted_log()
    assert chosen is not None and chosen.topic_partition == WELL[1]
    assert manager.quarantined() == []


def test_grab_for_cleaning_one_partition(make_log: MakeLog, tmp_path: Path, logs: Logs,
                                         manager_for: Callable[..., CleanerManager]) -> None:
    filthy_logs(make_log, tmp_path, logs, WELL[:2])
    manager = manager_for()
    manager.update_checkpoints(tmp_path, WELL[1], 20)
    logs.by_tp[WELL[1]].update_config(logs.by_tp[WELL[1]].config.with_overrides(min_cleanable_dirty_ratio=0.99))
    assert manager.grab_for_cleaning(WELL[1]) is None  # below the ratio
    forced = manager.grab_for_cleaning(WELL[1], force=True)
    assert forced is not None and forced.first_dirty_offset == 20 and manager.state_of(WELL[1]) == IN_PROGRESS
    assert manager.grab_for_cleaning(WELL[1], force=True) is None  # busy
    manager.mark_uncleanable(WELL[0], tmp_path, "boom")
    assert manager.grab_for_cleaning(WELL[0]) is None
    assert manager.grab_for_cleaning(WELL[0], force=True) is not None
    with pytest.raises(UnknownTopicOrPartitionError):
        manager.grab_for_cleaning(TopicPartition("nope", 0))


def test_grab_for_cleaning_raises_when_stats_fail(make_log: MakeLog, tmp_path: Path, logs: Logs,
                                                  manager_for: Callable[..., CleanerManager]) -> None:
    [log] = filthy_logs(make_log, tmp_path, logs, WELL[:1])
    logs.by_tp[WELL[0]] = _Broken(log)  # type: ignore[assignment]
    manager = manager_for()
    with pytest.raises(LogCleaningError, match="RuntimeError: Error!"):
        manager.grab_for_cleaning(WELL[0], force=True)
    assert manager.is_uncleanable(WELL[0]) and manager.state_of(WELL[0]) is None


# --- the first dirty offset and stale checkpoints --------------------------------------------------------

def test_dirty_offset_reset_if_larger_than_end_offset(make_log: MakeLog, tmp_path: Path, logs: Logs,
                                                      manager_for: Callable[..., CleanerManager]) -> None:
    tp = TopicPartition("foo", 0)
    filthy_logs(make_log, tmp_path, logs, [tp])
    manager = manager_for()
    manager.update_checkpoints(tmp_path, tp, 200)
    chosen = manager.grab_filthiest_compacted_log()
    assert chosen is not None and chosen.first_dirty_offset == 0
    assert on_disk(tmp_path) == {tp: 0}


def test_dirty_offset_reset_if_smaller_than_start_offset(make_log: MakeLog, tmp_path: Path, logs: Logs,
                                                         manager_for: Callable[..., CleanerManager]) -> None:
    tp = TopicPartition("foo", 0)
    [log] = filthy_logs(make_log, tmp_path, logs, [tp])
    log.maybe_increment_log_start_offset(10)
    manager = manager_for()
    manager.update_checkpoints(tmp_path, tp, 0)
    chosen = manager.grab_filthiest_compacted_log()
    assert chosen is not None and chosen.first_dirty_offset == 10


def test_log_start_offset_larger_than_active_segment_base(make_log: MakeLog, tmp_path: Path, logs: Logs,
                                                          manager_for: Callable[..., CleanerManager]) -> None:
    log = small_log(make_log, tmp_path, logs, tp=TopicPartition("foo", 0))
    for _ in range(3):
        append_records(log, 3)
    assert log.num_segments == 1
    log.maybe_increment_log_start_offset(2)
    manager = manager_for()
    manager.update_checkpoints(tmp_path, log.topic_partition, 0)
    assert manager.grab_filthiest_compacted_log() is None  # the active segment is never cleanable


def test_dirty_offset_larger_than_active_segment_base(make_log: MakeLog, tmp_path: Path, logs: Logs,
                                                      manager_for: Callable[..., CleanerManager]) -> None:
    log = small_log(make_log, tmp_path, logs, tp=TopicPartition("foo", 0))
    append_records(log, 3)
    append_records(log, 3)
    assert log.num_segments == 1 and log.active_segment.base_offset == 0
    manager = manager_for()
    manager.update_checkpoints(tmp_path, log.topic_partition, 3)
    assert manager.grab_filthiest_compacted_log() is None


def test_checkpoint_rewritten_for_invalid_offset_without_cleaning(make_log: MakeLog, tmp_path: Path, logs: Logs,
                                                                  manager_for: Callable[..., CleanerManager]) -> None:
    tp = TopicPartition("foo", 0)
    [log] = filthy_logs(make_log, tmp_path, logs, [tp])
    log.maybe_increment_log_start_offset(20)
    manager = manager_for()
    manager.update_checkpoints(tmp_path, tp, 15)
    assert manager.grab_filthiest_compacted_log() is None
    assert manager.all_cleaner_checkpoints()[tp] == 20 and on_disk(tmp_path)[tp] == 20


def test_checkpoint_rewritten_for_invalid_offset_not_selected(make_log: MakeLog, tmp_path: Path, logs: Logs,
                                                              manager_for: Callable[..., CleanerManager]) -> None:
    tp0, tp1 = TopicPartition("foo", 0), TopicPartition("foo", 1)
    log0, _ = filthy_logs(make_log, tmp_path, logs, [tp0, tp1])
    log0.maybe_increment_log_start_offset(15)
    manager = manager_for()
    manager.update_checkpoints(tmp_path, tp0, 10)
    manager.update_checkpoints(tmp_path, tp1, 5)
    chosen = manager.grab_filthiest_compacted_log()
    assert chosen is not None and chosen.topic_partition == tp1
    assert on_disk(tmp_path) == {tp0: 15, tp1: 5}


# --- the cleaner's retention pass ------------------------------------------------------------------------

@pytest.mark.parametrize("policy, count", [("delete", 0), ("compact,delete", 1), ("compact", 1)])
def test_deletable_logs_are_the_compacted_ones(make_log: MakeLog, tmp_path: Path, logs: Logs,
                                               manager_for: Callable[..., CleanerManager], policy: str,
                                               count: int) -> None:
    small_log(make_log, tmp_path, logs, policy)
    manager = manager_for()
    deletable = manager.deletable_logs()
    assert len(deletable) == count
    assert manager.state_of(TP) == (IN_PROGRESS if count else None)
    assert manager.deletable_logs() == []  # busy now
    manager.done_deleting(tp for tp, _ in deletable)
    assert manager.state_of(TP) is None


def test_deletable_logs_skip_quarantined_partitions_until_their_retry(make_log: MakeLog, tmp_path: Path, logs: Logs,
                                                                      manager_for: Callable[..., CleanerManager],
                                                                      clock: FakeClock) -> None:
    small_log(make_log, tmp_path, logs)
    manager = manager_for()
    manager.mark_uncleanable(TP, tmp_path, "boom", phase=PHASE_RETENTION)
    assert manager.deletable_logs() == []
    clock.advance(MINUTE)
    assert [tp for tp, _ in manager.deletable_logs()] == [TP]
    manager.done_deleting([TP])
    assert manager.is_uncleanable(TP)  # a retention success is the cleaner's to report
    assert manager.clear_uncleanable(TP, PHASE_CLEANING) is False
    assert manager.clear_uncleanable(TP, PHASE_RETENTION) is True and not manager.is_uncleanable(TP)


def test_logs_under_cleanup_are_ineligible_for_compaction(make_log: MakeLog, tmp_path: Path, logs: Logs,
                                                          manager_for: Callable[..., CleanerManager]) -> None:
    """Kafka's testLogsUnderCleanupIneligibleForCompaction: the policy flips while the log is
    held by retention, then by the cleaner."""
    log = small_log(make_log, tmp_path, logs, "delete")
    manager = manager_for()
    append_records(log, 1)
    log.roll()
    append_records(log, 1)
    held = manager.pause_cleaning_for_non_compacted_partitions()
    assert [tp for tp, _ in held] == [TP] and manager.state_of(TP) == paused(1)
    log.update_config(log.config.with_overrides(cleanup_policy="compact", min_cleanable_dirty_ratio=0))
    assert manager.grab_filthiest_compacted_log() is None  # retention holds it
    manager.resume_cleaning(*(tp for tp, _ in held))
    chosen = manager.grab_filthiest_compacted_log()
    assert chosen is not None and chosen.topic_partition == TP
    log.update_config(log.config.with_overrides(cleanup_policy="delete"))
    assert manager.pause_cleaning_for_non_compacted_partitions() == []  # being cleaned
    manager.done_deleting([chosen.topic_partition])
    assert [tp for tp, _ in manager.pause_cleaning_for_non_compacted_partitions()] == [TP]


def test_paused_non_compacted_resumes_on_exit(make_log: MakeLog, tmp_path: Path, logs: Logs,
                                              manager_for: Callable[..., CleanerManager]) -> None:
    small_log(make_log, tmp_path, logs, "delete")
    manager = manager_for()
    with pytest.raises(RuntimeError):
        with manager.paused_non_compacted() as held:
            assert [tp for tp, _ in held] == [TP] and manager.state_of(TP) == paused(1)
            raise RuntimeError("retention failed")
    assert manager.state_of(TP) is None


# --- states -------------------------------------------------------------------------------------------

def test_concurrent_retention_and_truncation(make_log: MakeLog, tmp_path: Path, logs: Logs,
                                             manager_for: Callable[..., CleanerManager]) -> None:
    small_log(make_log, tmp_path, logs, "delete")
    manager = manager_for()
    held = manager.pause_cleaning_for_non_compacted_partitions()
    manager.abort_and_pause_cleaning(TP)  # truncation
    assert manager.state_of(TP) == paused(2)
    manager.resume_cleaning(TP)
    manager.resume_cleaning(*(tp for tp, _ in held))
    assert manager.state_of(TP) is None


def test_concurrent_retention_and_topic_deletion(make_log: MakeLog, tmp_path: Path, logs: Logs,
                                                 manager_for: Callable[..., CleanerManager]) -> None:
    small_log(make_log, tmp_path, logs, "delete")
    manager = manager_for()
    held = manager.pause_cleaning_for_non_compacted_partitions()
    manager.abort_cleaning(TP)
    assert manager.state_of(TP) == paused(1)
    manager.resume_cleaning(*(tp for tp, _ in held))
    assert manager.state_of(TP) is None


def test_state_transitions_that_are_refused(make_log: MakeLog, tmp_path: Path, logs: Logs,
                                            manager_for: Callable[..., CleanerManager]) -> None:
    small_log(make_log, tmp_path, logs)
    manager = manager_for()
    with pytest.raises(CleanerStateError, match="not paused"):
        manager.resume_cleaning(TP)
    manager.deletable_logs()
    with pytest.raises(CleanerStateError, match="in progress"):
        manager.resume_cleaning(TP)
    thread = abort_in_thread(manager, TP)
    with pytest.raises(CleanerStateError, match="cannot abort and pause cleaning: it is aborted"):
        manager.abort_and_pause_cleaning(TP)
    manager.done_deleting([TP])
    thread.join(5)
    assert not thread.is_alive()


def test_abort_and_pause_waits_for_the_cleaner(make_log: MakeLog, tmp_path: Path, logs: Logs,
                                               manager_for: Callable[..., CleanerManager]) -> None:
    [log] = filthy_logs(make_log, tmp_path, logs, WELL[:1])
    manager = manager_for()
    chosen = manager.grab_filthiest_compacted_log()
    assert chosen is not None
    manager.check_cleaning_aborted(WELL[0])  # not aborted: no error
    thread = abort_in_thread(manager, WELL[0])
    assert thread.is_alive()  # blocked until the cleaner acknowledges
    assert manager.state_of(WELL[0]) == ABORTED
    with pytest.raises(LogCleaningAbortedError):
        manager.check_cleaning_aborted(WELL[0])
    manager.done_cleaning(WELL[0], log.dir.parent, chosen.first_uncleanable_offset)
    thread.join(5)
    assert not thread.is_alive()
    assert manager.state_of(WELL[0]) == paused(1)
    assert WELL[0] not in manager.all_cleaner_checkpoints()  # an aborted clean writes no checkpoint
    assert manager.last_clean_time(WELL[0]) is None


def test_pause_counts_stack(make_log: MakeLog, tmp_path: Path, logs: Logs,
                            manager_for: Callable[..., CleanerManager]) -> None:
    small_log(make_log, tmp_path, logs)
    manager = manager_for()
    manager.abort_and_pause_cleaning(TP)
    manager.abort_and_pause_cleaning(TP)
    assert manager.state_of(TP) == paused(2) and str(paused(2)) == "paused (2)"
    assert manager.deletable_logs() == [] and manager.grab_filthiest_compacted_log() is None
    manager.resume_cleaning(TP)
    assert manager.state_of(TP) == paused(1)
    manager.resume_cleaning(TP)
    assert manager.state_of(TP) is None


def test_done_cleaning(make_log: MakeLog, tmp_path: Path, logs: Logs, manager_for: Callable[..., CleanerManager],
                       clock: FakeClock) -> None:
    """Kafka's testDoneCleaning."""
    [log] = filthy_logs(make_log, tmp_path, logs, WELL[:1])
    tp = WELL[0]
    manager = manager_for()
    with pytest.raises(CleanerStateError, match="not being cleaned"):
        manager.done_cleaning(tp, tmp_path, 1)
    manager.abort_and_pause_cleaning(tp)
    with pytest.raises(CleanerStateError, match="paused"):
        manager.done_cleaning(tp, tmp_path, 1)
    manager.resume_cleaning(tp)

    chosen = manager.grab_filthiest_compacted_log()
    assert chosen is not None and chosen.first_dirty_offset == 0
    clock.advance(5)
    manager.done_cleaning(tp, log.dir.parent, 1)
    assert manager.state_of(tp) is None
    assert manager.all_cleaner_checkpoints() == {tp: 1} and on_disk(tmp_path) == {tp: 1}
    assert manager.last_clean_time(tp) == T0 + 5

    chosen = manager.grab_filthiest_compacted_log()
    assert chosen is not None
    abort_in_thread(manager, tp)
    manager.done_cleaning(tp, log.dir.parent, 7)
    assert manager.state_of(tp) == paused(1) and manager.all_cleaner_checkpoints() == {tp: 1}


def test_done_cleaning_without_an_end_offset_keeps_the_checkpoint(make_log: MakeLog, tmp_path: Path, logs: Logs,
                                                                  manager_for: Callable[..., CleanerManager]) -> None:
    [log] = filthy_logs(make_log, tmp_path, logs, WELL[:1])
    manager = manager_for()
    manager.update_checkpoints(tmp_path, WELL[0], 3)
    assert manager.grab_for_cleaning(WELL[0], force=True) is not None  # a dry run
    manager.done_cleaning(WELL[0], log.dir.parent, None)
    assert manager.state_of(WELL[0]) is None and on_disk(tmp_path) == {WELL[0]: 3}
    assert manager.last_clean_time(WELL[0]) is None


def test_done_deleting(make_log: MakeLog, tmp_path: Path, logs: Logs,
                       manager_for: Callable[..., CleanerManager]) -> None:
    """Kafka's testDoneDeleting."""
    small_log(make_log, tmp_path, logs, "compact,delete")
    manager = manager_for()
    with pytest.raises(CleanerStateError):
        manager.done_deleting([TP])
    manager.abort_and_pause_cleaning(TP)
    with pytest.raises(CleanerStateError):
        manager.done_deleting([TP])
    manager.resume_cleaning(TP)
    manager.deletable_logs()
    manager.done_deleting([TP])
    assert manager.state_of(TP) is None
    manager.deletable_logs()
    thread = abort_in_thread(manager, TP)
    manager.done_deleting([TP])
    thread.join(5)
    assert not thread.is_alive() and manager.state_of(TP) == paused(1)


def test_pause_without_waiting_stacks_on_an_abort_in_progress(make_log: MakeLog, tmp_path: Path, logs: Logs,
                                                               manager_for: Callable[..., CleanerManager]) -> None:
    """A log dir going offline pauses its partitions from any thread (the cleaner's own, or under
    the log manager's lock): never waiting, and stacking on another holder's abort."""
    [log] = filthy_logs(make_log, tmp_path, logs, WELL[:1])
    manager = manager_for()
    assert manager.grab_filthiest_compacted_log() is not None
    manager.pause_cleaning(WELL[0])  # returns at once: the clean stops at its next chunk
    assert manager.state_of(WELL[0]) == ABORTED
    thread = abort_in_thread(manager, WELL[0], manager.pause_cleaning)  # another pause while ABORTED
    thread.join(5)
    assert not thread.is_alive() and manager.state_of(WELL[0]) == ABORTED
    manager.done_cleaning(WELL[0], log.dir.parent, 0)
    manager.await_stopped(WELL[0])
    assert manager.state_of(WELL[0]) == paused(2)
    manager.resume_cleaning(WELL[0], WELL[0])
    assert manager.state_of(WELL[0]) is None


def test_a_failed_log_dir_is_checkpointed_again_once_back(make_log: MakeLog, tmp_path: Path, logs: Logs,
                                                          manager_for: Callable[..., CleanerManager]) -> None:
    small_log(make_log, tmp_path, logs)
    manager = manager_for()
    manager.update_checkpoints(tmp_path, TP, 5)
    manager.handle_log_dir_failure(tmp_path)
    manager.update_checkpoints(tmp_path, TP, 9)  # nothing written into a failed dir
    assert manager.log_dirs == [] and on_disk(tmp_path) == {TP: 5}
    manager.handle_log_dir_online(tmp_path)
    assert manager.all_cleaner_checkpoints() == {TP: 5}
    manager.update_checkpoints(tmp_path, TP, 9)
    assert on_disk(tmp_path) == {TP: 9}


def test_abort_all_for_shutdown_does_not_wait(make_log: MakeLog, tmp_path: Path, logs: Logs,
                                              manager_for: Callable[..., CleanerManager]) -> None:
    filthy_logs(make_log, tmp_path, logs, WELL[:2])
    manager = manager_for()
    manager.deletable_logs()
    assert sorted(manager.abort_all()) == WELL[:2]
    assert manager.is_cleaning_aborted(WELL[0]) and manager.is_cleaning_aborted(WELL[1])
    manager.done_deleting(WELL[:2])
    assert manager.state_of(WELL[0]) == paused(1)


# --- checkpoints --------------------------------------------------------------------------------------

def test_update_checkpoints_adds_and_removes_a_partition(make_log: MakeLog, tmp_path: Path, logs: Logs,
                                                         manager_for: Callable[..., CleanerManager]) -> None:
    small_log(make_log, tmp_path, logs)
    manager = manager_for()
    assert TP not in manager.all_cleaner_checkpoints()
    manager.update_checkpoints(tmp_path, TP, 999)
    assert manager.all_cleaner_checkpoints()[TP] == 999 and on_disk(tmp_path) == {TP: 999}
    assert manager_for().all_cleaner_checkpoints() == {TP: 999}  # read back at start-up
    manager.update_checkpoints(tmp_path, TP, None)
    assert TP not in manager.all_cleaner_checkpoints() and on_disk(tmp_path) == {}


def test_checkpoint_rewrite_drops_partitions_that_no_longer_exist(make_log: MakeLog, tmp_path: Path, logs: Logs,
                                                                  manager_for: Callable[..., CleanerManager]) -> None:
    gone = TopicPartition("gone", 0)
    OffsetCheckpointFile(tmp_path / CLEANER_OFFSET_CHECKPOINT_FILE).write({gone: 5})
    small_log(make_log, tmp_path, logs)
    manager = manager_for()
    assert manager.all_cleaner_checkpoints() == {gone: 5}
    manager.deletable_logs()  # sees the live logs
    manager.done_deleting([TP])
    manager.update_checkpoints(tmp_path, TP, 3)
    assert on_disk(tmp_path) == {TP: 3}


def test_handle_log_dir_failure_forgets_that_dir(make_log: MakeLog, tmp_path: Path, logs: Logs,
                                                 manager_for: Callable[..., CleanerManager]) -> None:
    dir1, dir2 = tmp_path / "d1", tmp_path / "d2"
    dir1.mkdir(), dir2.mkdir()
    tp2 = TopicPartition("log2", 0)
    manager = manager_for(dir1, dir2)
    manager.update_checkpoints(dir1, TP, 999)
    manager.update_checkpoints(dir2, tp2, 999)
    manager.mark_uncleanable(TP, dir1, "boom")
    assert manager.all_cleaner_checkpoints() == {TP: 999, tp2: 999}
    manager.handle_log_dir_failure(dir1)
    assert manager.all_cleaner_checkpoints() == {tp2: 999}
    assert manager.log_dirs == [dir2] and manager.quarantined() == []
    manager.update_checkpoints(dir1, TP, 5)  # an offline dir is never written again
    assert on_disk(dir1) == {TP: 999}


def test_maybe_truncate_checkpoint(make_log: MakeLog, tmp_path: Path, logs: Logs,
                                   manager_for: Callable[..., CleanerManager]) -> None:
    small_log(make_log, tmp_path, logs)
    manager = manager_for()
    manager.update_checkpoints(tmp_path, TP, 999)
    manager.maybe_truncate_checkpoint(tmp_path, TP, 1000)
    assert manager.all_cleaner_checkpoints()[TP] == 999
    manager.maybe_truncate_checkpoint(tmp_path, TP, 1)
    assert manager.all_cleaner_checkpoints()[TP] == 1 and on_disk(tmp_path) == {TP: 1}


def test_alter_checkpoint_dir_moves_the_entry(make_log: MakeLog, tmp_path: Path, logs: Logs,
                                              manager_for: Callable[..., CleanerManager]) -> None:
    dir1, dir2 = tmp_path / "d1", tmp_path / "d2"
    dir1.mkdir(), dir2.mkdir()
    manager = manager_for(dir1, dir2)
    manager.update_checkpoints(dir1, TP, 999)
    manager.alter_checkpoint_dir(TP, dir1, dir2)
    assert manager.all_cleaner_checkpoints()[TP] == 999
    assert on_disk(dir1) == {} and on_disk(dir2) == {TP: 999}
    manager.handle_log_dir_failure(dir2)
    assert TP not in manager.all_cleaner_checkpoints()


def test_unreadable_checkpoint_counts_as_empty(make_log: MakeLog, tmp_path: Path, logs: Logs,
                                               manager_for: Callable[..., CleanerManager],
                                               caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / CLEANER_OFFSET_CHECKPOINT_FILE).write_text("0\n2\nfoo 0 12\n")
    with caplog.at_level(logging.WARNING, logger="tidelog.cleaner.manager"):
        manager = manager_for()
    assert manager.all_cleaner_checkpoints() == {}
    assert "ignoring unreadable cleaner checkpoint" in caplog.text
    manager.update_checkpoints(tmp_path, TP, 4)
    assert on_disk(tmp_path) == {TP: 4}


def test_remove_partition_forgets_everything_about_it(make_log: MakeLog, tmp_path: Path, logs: Logs,
                                                      manager_for: Callable[..., CleanerManager]) -> None:
    small_log(make_log, tmp_path, logs)
    manager = manager_for()
    manager.update_checkpoints(tmp_path, TP, 7)
    manager.mark_uncleanable(TP, tmp_path, "boom")
    manager.abort_and_pause_cleaning(TP)  # the log manager's deletion holds it
    manager.remove_partition(TP)
    assert manager.state_of(TP) is None and not manager.is_uncleanable(TP)
    assert TP not in manager.all_cleaner_checkpoints() and on_disk(tmp_path) == {}
    manager.resume_cleaning(TP)  # a late resume by a pause holder does nothing
    assert manager.state_of(TP) is None


def test_remove_partition_waits_for_a_running_clean(make_log: MakeLog, tmp_path: Path, logs: Logs,
                                                    manager_for: Callable[..., CleanerManager]) -> None:
    [log] = filthy_logs(make_log, tmp_path, logs, WELL[:1])
    manager = manager_for()
    assert manager.grab_filthiest_compacted_log() is not None
    thread = abort_in_thread(manager, WELL[0], manager.remove_partition)
    assert thread.is_alive()
    manager.done_cleaning(WELL[0], log.dir.parent, 10)
    thread.join(5)
    assert not thread.is_alive() and manager.state_of(WELL[0]) is None
    assert WELL[0] not in manager.all_cleaner_checkpoints()


# --- quarantine ---------------------------------------------------------------------------------------

def test_quarantine_backoff_doubles_up_to_the_maximum(tmp_path: Path, manager_for: Callable[..., CleanerManager],
                                                      clock: FakeClock) -> None:
    manager = manager_for(quarantine_initial_backoff_ms=1000, quarantine_max_backoff_ms=5000)
    waits = []
    for _ in range(5):
        record = manager.mark_uncleanable(TP, tmp_path, CorruptRecordError("bad crc", offset=3))
        waits.append(record.retry_at_ms - clock.milliseconds())
    assert waits == [1000, 2000, 4000, 5000, 5000]
    assert record.attempts == 5 and record.error == "CorruptRecordError: bad crc (offset=3)"
    assert record.phase == PHASE_CLEANING and manager.quarantined(tmp_path) == [record]
    with pytest.raises(ValueError):
        manager_for(quarantine_initial_backoff_ms=10, quarantine_max_backoff_ms=5)


def test_a_successful_clean_ends_the_quarantine(make_log: MakeLog, tmp_path: Path, logs: Logs,
                                                manager_for: Callable[..., CleanerManager], clock: FakeClock) -> None:
    [log] = filthy_logs(make_log, tmp_path, logs, WELL[:1])
    tp, where = WELL[0], log.dir.parent
    manager = manager_for()
    manager.mark_uncleanable(tp, where, "first failure")
    assert manager.grab_filthiest_compacted_log() is None
    clock.advance(MINUTE)

    chosen = manager.grab_filthiest_compacted_log()  # retried: fails again, marked before done (the cleaner's order)
    assert chosen is not None
    manager.mark_uncleanable(tp, where, "second failure")
    manager.done_cleaning(tp, where, chosen.first_dirty_offset + 5)  # passes done before the failure
    assert manager.quarantined()[0].attempts == 2
    clock.advance(2 * MINUTE)

    chosen = manager.grab_filthiest_compacted_log()  # failed, done first then marked (Kafka's order)
    assert chosen is not None
    manager.done_cleaning(tp, where, chosen.first_dirty_offset)
    manager.mark_uncleanable(tp, where, "third failure")
    assert manager.quarantined()[0].attempts == 3
    clock.advance(4 * MINUTE)

    chosen = manager.grab_filthiest_compacted_log()
    assert chosen is not None
    manager.done_cleaning(tp, where, chosen.first_uncleanable_offset)
    assert manager.quarantined() == [] and manager.last_clean_time(tp) == clock.milliseconds()


def test_maintain_uncleanable_drops_partitions_that_are_gone(make_log: MakeLog, tmp_path: Path, logs: Logs,
                                                             manager_for: Callable[..., CleanerManager]) -> None:
    filthy_logs(make_log, tmp_path, logs, WELL[:2])
    manager = manager_for()
    manager.mark_uncleanable(WELL[0], tmp_path, "boom")
    manager.mark_uncleanable(WELL[1], tmp_path, "boom")
    manager.mark_uncleanable(TopicPartition("elsewhere", 0), tmp_path / "other", "boom")
    del logs.by_tp[WELL[1]]
    manager.maintain_uncleanable()
    assert [r.topic_partition for r in manager.quarantined()] == [WELL[0]]


def test_describe_error_follows_causes() -> None:
    try:
        try:
            raise OSError("disk")
        except OSError as e:
            raise LogCleaningError("cleaning failed", topic_partition="t-0") from e
    except LogCleaningError as e:
        assert describe_error(e) == "LogCleaningError: cleaning failed (topic_partition='t-0'); caused by OSError: disk"
    assert describe_error("plain") == "plain"


# --- metrics --------------------------------------------------------------------------------------------

def test_selection_metrics(make_log: MakeLog, tmp_path: Path, logs: Logs,
                           manager_for: Callable[..., CleanerManager], clock: FakeClock) -> None:
    made = filthy_logs(make_log, tmp_path, logs, WELL)
    manager = manager_for()
    for tp in WELL:
        manager.update_checkpoints(tmp_path, tp, 20)
    clock.advance(250)
    assert manager.time_since_last_run_ms == 250
    chosen = manager.grab_filthiest_compacted_log()
    assert chosen is not None and manager.time_since_last_run_ms == 0
    assert manager.max_dirty_percent == int(100 * chosen.cleanable_ratio) > 0
    selection = manager.last_selection
    assert (selection.logs, selection.cleanable_partitions, selection.max_compaction_delay_ms) == (3, 2, 0)
    clock.advance(40)
    manager.update_last_run()
    assert manager.time_since_last_run_ms == 0

    overdue = made[0].config.with_overrides(max_compaction_lag_ms=1000)
    made[0].update_config(overdue)
    manager.update_checkpoints(tmp_path, WELL[0], 0)
    clock.advance(5000)
    manager.grab_filthiest_compacted_log()
    assert manager.max_compaction_delay_ms == clock.milliseconds() - 1000 - T0


def test_uncleanable_partitions_count_and_bytes(make_log: MakeLog, tmp_path: Path, logs: Logs,
                                                manager_for: Callable[..., CleanerManager], clock: FakeClock) -> None:
    """LogCleanerIntegrationTest.testMarksPartitionsAsOfflineAndPopulatesUncleanableMetrics, the
    manager's part: two quarantined partitions count with their cleanable bytes; one fewer after
    one is deleted."""
    made = filthy_logs(make_log, tmp_path, logs, WELL)
    manager = manager_for()
    for log in made[1:]:
        manager.mark_uncleanable(log.topic_partition, log.dir.parent, "corrupt")
    expected = [log_to_clean(log.topic_partition, log, None, clock.milliseconds()).cleanable_bytes for log in made]
    assert manager.uncleanable_partitions_count(tmp_path) == 2
    assert manager.uncleanable_bytes(tmp_path) == expected[1] + expected[2] > 0
    assert manager.uncleanable_partitions_count(tmp_path / "other") == 0
    del logs.by_tp[WELL[2]]
    manager.remove_partition(WELL[2])
    assert manager.uncleanable_partitions_count(tmp_path) == 1
    assert manager.uncleanable_bytes(tmp_path) == expected[1]


# --- explain --------------------------------------------------------------------------------------------

def test_explain_adds_state_quarantine_and_last_clean(make_log: MakeLog, tmp_path: Path, logs: Logs,
                                                      manager_for: Callable[..., CleanerManager],
                                                      clock: FakeClock) -> None:
    [log] = filthy_logs(make_log, tmp_path, logs, WELL[:1])
    small_log(make_log, tmp_path, logs, "delete")
    tp = WELL[0]
    manager = manager_for()
    before = manager.explain(tp)
    assert before.cleanable_now and before.state is None and before.last_clean_ms is None

    chosen = manager.grab_filthiest_compacted_log()
    assert chosen is not None
    busy = manager.explain(tp)
    assert busy.state == "in progress" and not busy.cleanable_now
    manager.done_cleaning(tp, log.dir.parent, 10)
    manager.mark_uncleanable(tp, log.dir.parent, "boom")
    after = manager.explain(tp)
    assert after.checkpoint == 10 and after.first_dirty_offset == 10 and after.last_clean_ms == T0
    assert after.last_error == "boom" and after.eligible_at_ms == T0 + MINUTE

    assert [e.topic_partition for e in manager.explain_all()] == [TP, tp]
    assert [e.topic_partition for e in manager.explain_all("log")] == [TP]
    with pytest.raises(UnknownTopicOrPartitionError):
        manager.explain(TopicPartition("nope", 0))


def test_explain_a_partition_whose_stats_fail(make_log: MakeLog, tmp_path: Path, logs: Logs,
                                              manager_for: Callable[..., CleanerManager]) -> None:
    [log] = filthy_logs(make_log, tmp_path, logs, WELL[:1])
    logs.by_tp[WELL[0]] = _Broken(log)  # type: ignore[assignment]
    explained = manager_for().explain(WELL[0])
    assert not explained.cleanable_now
    assert explained.reasons[0] == "cannot compute the cleaning stats: RuntimeError: Error!"
