"""The cleaner service, :class:`LogCleaner`, over plain logs: one loop iteration at a time
(:meth:`LogCleaner.run_once` on a FakeClock), its metrics, the I/O throttle, an abort from another
thread, pauses, the retention pass over compacted logs, on-demand and dry-run cleaning, and a
thread that survives errors (kafka-storage.md §3.7.1, §3.7.2, §3.7.8).

Logs live in ``<tmp>/<topic>-<partition>``; ``<tmp>`` is the log dir whose
``cleaner-offset-checkpoint`` the cleaner keeps.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cleaner_helpers import (
    T0,
    MakeLog,
    all_records,
    dir_snapshot,
    latest_of,
    leader_appender,
    leftovers,
    read_latest,
    record,
    wait_until,
    write_dups,
)

from tidelog.cleaner import log_cleaner as log_cleaner_module
from tidelog.cleaner.clean import CleanerBuffers, InProcessEngine
from tidelog.cleaner.log_cleaner import LogCleaner
from tidelog.cleaner.cleaning_state import ABORTED, paused
from tidelog.cleaner.manager import CleanerManager
from tidelog.cleaner.throttler import Throttler
from tidelog.clock import SYSTEM_CLOCK
from tidelog.errors import CleanerStateError, ConfigError
from tidelog.storage.config import BrokerConfig
from tidelog.storage.log import Log
from tidelog.testing import FakeClock
from tidelog.topic_partition import TopicPartition

DAY = 86_400_000
SLOTS = 10_000
BROKER = {"log.cleaner.dedupe.buffer.size": str(24 * SLOTS)}
TP = TopicPartition("log", 0)

MakeCleaner = Callable[..., LogCleaner]


@pytest.fixture
def make_cleaner(tmp_path: Path, clock: FakeClock) -> MakeCleaner:
    """``make_cleaner(logs, manager=None, clock=None, **broker_props)``: a LogCleaner over
    ``logs`` (a list, read at each call, so tests may add and remove logs) in log dir ``tmp_path``."""
    def make(logs: list[Log], *, manager: CleanerManager | None = None, clock_: Any = None, **props: str) -> LogCleaner:
        broker = BrokerConfig.from_properties({"log.dirs": str(tmp_path), **BROKER, **props})
        return LogCleaner(broker, [tmp_path], source(logs), clock_ or clock, manager=manager)
    return make


def source(logs: list[Log]) -> Callable[[], list[tuple[TopicPartition, Log]]]:
    return lambda: [(lg.topic_partition, lg) for lg in logs]


def dirty_log(make_log: MakeLog, tmp_path: Path, name: str = "log-0", keys: int = 100, dups: int = 3,
              **config: Any) -> tuple[Log, list[tuple[int, bytes, int]]]:
    """A compacted log of ``keys`` keys x ``dups`` (LogCleanerTest's 1 KiB segments)."""
    log = make_log(dir=tmp_path / name, **config)
    return log, write_dups(leader_appender(log), keys, dups, itertools.count(), timestamp=T0)


# --- one iteration -----------------------------------------------------------------------------

def test_run_once_cleans_the_filthiest_log_first(make_log: MakeLog, tmp_path: Path, make_cleaner: MakeCleaner) -> None:
    calm, calm_appends = dirty_log(make_log, tmp_path, "calm-0", min_cleanable_dirty_ratio="0.0")
    cleaner = make_cleaner([calm])
    assert cleaner.run_once() is not None  # calm is now clean up to its active segment
    calm_appends += write_dups(leader_appender(calm), 5, 1, itertools.count(1000), timestamp=T0)
    calm.roll()
    filthy, filthy_appends = dirty_log(make_log, tmp_path, "filthy-0", min_cleanable_dirty_ratio="0.0")
    cleaner = make_cleaner([calm, filthy])  # a new cleaner reads the checkpoint calm's clean wrote
    first = cleaner.run_once()
    second = cleaner.run_once()
    assert first is not None and first.topic_partition == filthy.topic_partition
    assert second is not None and second.topic_partition == calm.topic_partition
    assert cleaner.run_once() is None
    assert read_latest(calm) == latest_of(calm_appends)
    assert read_latest(filthy) == latest_of(filthy_appends)


def test_run_once_with_nothing_to_clean_changes_nothing(make_log: MakeLog, tmp_path: Path,
                                                        make_cleaner: MakeCleaner) -> None:
    log = make_log(dir=tmp_path / "log-0")
    log.append_as_leader(record(1, 1))
    before = dir_snapshot(log.dir)
    cleaner = make_cleaner([log])
    assert cleaner.run_once() is None
    assert dir_snapshot(log.dir) == before
    assert cleaner.manager.all_cleaner_checkpoints() == {}


def test_metrics_after_a_clean(make_log: MakeLog, tmp_path: Path, make_cleaner: MakeCleaner, clock: FakeClock) -> None:
    """Kafka's LogCleaner gauges from the last clean: buffer utilization = keys mapped / slots,
    recopy = bytes written / bytes read, clean time from the injected clock (which did not move),
    max dirty percent of the selection, time since the last run."""
    log, _ = dirty_log(make_log, tmp_path)
    cleaner = make_cleaner([log])
    idle = cleaner.metrics()
    assert idle["cleaner-recopy-percent"] == 0 and idle["max-buffer-utilization-percent"] == 0
    end = log.active_segment.base_offset
    keys = {k for o, k, _ in all_records(log) if o < end}
    size_before = sum(s.size for s in log.segments_between(0, end))

    result = cleaner.run_once()
    assert result is not None and result.end_offset == end and result.stats is not None
    size_after = sum(s.size for s in log.segments_between(0, end))
    clock.advance(5_000)
    metrics = cleaner.metrics()
    assert metrics["max-buffer-utilization-percent"] == pytest.approx(100 * len(keys) / SLOTS)
    assert (result.stats.bytes_read, result.stats.bytes_written) == (size_before, size_after)
    assert metrics["cleaner-recopy-percent"] == pytest.approx(100 * size_after / size_before)
    assert 0 < metrics["cleaner-recopy-percent"] < 100
    assert metrics["max-clean-time-secs"] == 0.0
    assert metrics["max-dirty-percent"] == 100, "a never-cleaned log is all dirty"
    assert metrics["max-compaction-delay-secs"] == 0
    assert metrics["time-since-last-run-ms"] == 5_000
    assert metrics["DeadThreadCount"] == 0
    assert metrics[f"uncleanable-partitions-count[{tmp_path}]"] == 0
    assert metrics[f"uncleanable-bytes[{tmp_path}]"] == 0


def test_throttle_sleeps_on_the_clock_and_the_clean_is_still_right(make_log: MakeLog, tmp_path: Path,
                                                                   make_cleaner: MakeCleaner, clock: FakeClock) -> None:
    """``log.cleaner.io.max.bytes.per.second`` 100: once a throttle period (300 ms) has passed, the
    first read, far over the rate, sleeps ``round(bytes / (rate / 1000) - elapsed)`` ms on the
    clock (Kafka's Throttler); the FakeClock moves only by that sleep, so the clean time is it."""
    log, appends = dirty_log(make_log, tmp_path)
    cleaner = make_cleaner([log], **{"log.cleaner.io.max.bytes.per.second": "100"})
    clock.advance(1_000)
    start = clock.milliseconds()
    first_read = log.segments[0].size  # the offset map reads the first dirty segment whole
    result = cleaner.run_once()
    slept = cleaner.throttler.slept_ms
    assert slept == round(first_read * 1000 / 100 - 1_000) > 0
    assert clock.milliseconds() - start == slept
    assert result is not None and result.end_offset == log.active_segment.base_offset
    assert cleaner.metrics()["max-clean-time-secs"] == pytest.approx(slept / 1000)
    assert read_latest(log) == latest_of(appends)


def test_retention_pass_after_the_clean_covers_compacted_logs_only(make_log: MakeLog, tmp_path: Path,
                                                                    make_cleaner: MakeCleaner, clock: FakeClock) -> None:
    """Kafka's order: clean, then ``deleteOldSegments`` over compacted logs; a ``delete``-only log
    is the log manager's business and is left alone."""
    old = T0 - 10 * DAY
    both = make_log(dir=tmp_path / "both-0", cleanup_policy="compact,delete", retention_ms=str(DAY))
    deleting = make_log(dir=tmp_path / "deleting-0", cleanup_policy="delete", retention_ms=str(DAY))
    for lg in (both, deleting):
        write_dups(leader_appender(lg), 30, 2, itertools.count(), timestamp=old)
    for segment in both.segments:  # written 10 days ago (the clean gives an emptied segment its source's mtime)
        segment.set_last_modified_ms(old)
    deleting_before = dir_snapshot(deleting.dir)
    cleaner = make_cleaner([both, deleting])
    result = cleaner.run_once()
    assert result is not None and result.topic_partition == both.topic_partition
    assert both.log_start_offset == both.log_end_offset == 60 and both.num_segments == 1
    assert (deleting.log_start_offset, dir_snapshot(deleting.dir)) == (0, deleting_before)


def test_a_paused_partition_is_neither_cleaned_nor_retained(make_log: MakeLog, tmp_path: Path,
                                                            make_cleaner: MakeCleaner) -> None:
    log, appends = dirty_log(make_log, tmp_path, cleanup_policy="compact,delete", retention_ms=str(DAY))
    log.segments[0].set_last_modified_ms(T0 - 2 * DAY)
    cleaner = make_cleaner([log])
    before = dir_snapshot(log.dir)
    cleaner.manager.abort_and_pause_cleaning(TP)
    assert cleaner.run_once() is None
    assert cleaner.clean_now(TP, force=True) is None and cleaner.dry_run(TP) is None
    assert dir_snapshot(log.dir) == before and cleaner.manager.state_of(TP) == paused(1)
    cleaner.manager.resume_cleaning(TP)
    assert cleaner.run_once() is not None
    assert cleaner.manager.state_of(TP) is None
    assert read_latest(log) == latest_of(appends)


# --- abort from another thread -------------------------------------------------------------------

class HoldingManager(CleanerManager):
    """Test seam: holds the cleaner thread at its first abort check made while a ``.cleaned``
    segment exists in ``watch`` (the clean is half done), until ``proceed`` is set."""

    def __init__(self, *args: Any, watch: Path, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.watch = watch
        self.reached = threading.Event()
        self.proceed = threading.Event()

    def check_cleaning_aborted(self, tp: TopicPartition) -> None:
        if not self.reached.is_set() and leftovers(self.watch):
            self.reached.set()
            if not self.proceed.wait(10):
                raise TimeoutError("the test never let the cleaner go on")
        super().check_cleaning_aborted(tp)


def test_abort_from_another_thread_installs_nothing_and_resume_works(make_log: MakeLog, tmp_path: Path,
                                                                     make_cleaner: MakeCleaner, clock: FakeClock) -> None:
    log, appends = dirty_log(make_log, tmp_path)
    logs = [log]
    manager = HoldingManager([tmp_path], source(logs), clock, watch=log.dir)
    cleaner = make_cleaner(logs, manager=manager)
    before = dir_snapshot(log.dir)
    results: list[Any] = []
    worker = threading.Thread(target=lambda: results.append(cleaner.run_once()), name="test-cleaner")
    worker.start()
    try:
        assert manager.reached.wait(10), "the clean never wrote a .cleaned segment"
        aborter = threading.Thread(target=manager.abort_and_pause_cleaning, args=(TP,), name="test-aborter")
        aborter.start()
        wait_until(lambda: manager.state_of(TP) == ABORTED, "the abort to be requested")
        assert aborter.is_alive(), "abort_and_pause_cleaning waits for the cleaner thread"
    finally:
        manager.proceed.set()
    worker.join(10)
    aborter.join(10)
    assert not worker.is_alive() and not aborter.is_alive()

    [result] = results
    assert result is not None and result.aborted and result.stats is None and result.error is None
    assert manager.state_of(TP) == paused(1)
    assert leftovers(log.dir) == [] and dir_snapshot(log.dir) == before, "nothing half done installed"
    assert TP not in manager.all_cleaner_checkpoints()
    assert manager.quarantined() == [], "an abort is not a failure"
    with pytest.raises(CleanerStateError):
        manager.done_cleaning(TP, tmp_path, 5)

    manager.resume_cleaning(TP)
    assert manager.state_of(TP) is None
    done = cleaner.run_once()
    assert done is not None and done.end_offset == log.active_segment.base_offset
    assert manager.all_cleaner_checkpoints()[TP] == done.end_offset
    assert read_latest(log) == latest_of(appends)


# --- on demand -------------------------------------------------------------------------------------

def test_clean_now_needs_force_below_the_ratio(make_log: MakeLog, tmp_path: Path, make_cleaner: MakeCleaner) -> None:
    log, appends = dirty_log(make_log, tmp_path, min_cleanable_dirty_ratio="1.0")
    cleaner = make_cleaner([log])
    assert cleaner.run_once() is None and cleaner.clean_now(TP) is None, "ratio 1.0 is never exceeded"
    result = cleaner.clean_now(TP, force=True)
    assert result is not None and result.end_offset == log.active_segment.base_offset
    assert cleaner.manager.state_of(TP) is None
    assert read_latest(log) == latest_of(appends)


def test_dry_run_changes_nothing_and_counts_what_a_clean_removes(make_log: MakeLog, tmp_path: Path,
                                                                 make_cleaner: MakeCleaner) -> None:
    log, _ = dirty_log(make_log, tmp_path)
    cleaner = make_cleaner([log])
    before = dir_snapshot(log.dir)
    report = cleaner.dry_run(TP)
    assert report is not None
    assert dir_snapshot(log.dir) == before and leftovers(log.dir) == []
    assert cleaner.manager.all_cleaner_checkpoints() == {} and cleaner.manager.state_of(TP) is None
    result = cleaner.clean_now(TP)
    assert result is not None and result.stats is not None
    assert (report.first_dirty_offset, report.first_uncleanable_offset) == (0, result.end_offset)
    counted = ("messages_read", "messages_written", "bytes_read", "bytes_written", "invalid_messages_read")
    assert {n: getattr(report.stats, n) for n in counted} == {n: getattr(result.stats, n) for n in counted}
    assert report.stats.messages_written == 100 < report.stats.messages_read


# --- failures --------------------------------------------------------------------------------------

def test_a_failing_retention_pass_quarantines_only_that_partition(make_log: MakeLog, tmp_path: Path,
                                                                   make_cleaner: MakeCleaner, clock: FakeClock,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Beyond Kafka: the retention pass of one compacted log fails; it is quarantined (phase
    ``retention``), the other log's retention still runs; once the retry is due and the pass
    works, the quarantine ends."""
    old = T0 - 10 * DAY
    sick = make_log(dir=tmp_path / "sick-0", cleanup_policy="compact,delete", retention_ms=str(DAY))
    well = make_log(dir=tmp_path / "well-0", cleanup_policy="compact,delete", retention_ms=str(DAY))
    for lg in (sick, well):
        write_dups(leader_appender(lg), 30, 1, itertools.count(), timestamp=old)
    real = log_cleaner_module.retention.delete_old_segments

    def failing(lg: Log, now: int) -> Any:
        if lg is sick:
            raise OSError("disk says no")
        return real(lg, now)

    monkeypatch.setattr(log_cleaner_module.retention, "delete_old_segments", failing)
    cleaner = make_cleaner([sick, well])
    plans = cleaner.delete_old_segments_of_compacted_logs()
    assert [p.topic_partition for p in plans] == [well.topic_partition]
    assert well.log_start_offset == 30 and sick.log_start_offset == 0
    [quarantined] = cleaner.manager.quarantined()
    assert (quarantined.topic_partition, quarantined.phase) == (sick.topic_partition, "retention")
    assert "disk says no" in quarantined.error
    assert cleaner.manager.state_of(sick.topic_partition) is None and cleaner.manager.state_of(well.topic_partition) is None

    monkeypatch.setattr(log_cleaner_module.retention, "delete_old_segments", real)
    assert cleaner.delete_old_segments_of_compacted_logs() != [] and sick.log_start_offset == 0, "waits for its retry"
    clock.advance(60_000)
    cleaner.delete_old_segments_of_compacted_logs()
    assert sick.log_start_offset == 30
    assert cleaner.manager.quarantined() == []


def test_a_cleaner_thread_survives_errors_and_shutdown_joins_it(make_log: MakeLog, tmp_path: Path,
                                                                make_cleaner: MakeCleaner) -> None:
    """Beyond Kafka (whose thread dies and counts in DeadThreadCount): the loop outlives an
    unexpected error and goes on cleaning; ``shutdown`` stops and joins the thread."""
    log, appends = dirty_log(make_log, tmp_path)
    calls = itertools.count()

    def flaky() -> list[tuple[TopicPartition, Log]]:
        if next(calls) < 3:
            raise RuntimeError("listing the logs failed")
        return [(TP, log)]

    broker = BrokerConfig.from_properties({"log.dirs": str(tmp_path), **BROKER, "log.cleaner.backoff.ms": "5"})
    cleaner = LogCleaner(broker, [tmp_path], flaky, SYSTEM_CLOCK)
    cleaner.startup()
    try:
        wait_until(lambda: cleaner.manager.all_cleaner_checkpoints().get(TP, -1) == log.active_segment.base_offset,
                   "the thread to clean after its errors")
        assert cleaner.metrics()["DeadThreadCount"] == 0
    finally:
        cleaner.shutdown()
    assert [t for t in threading.enumerate() if t.name.startswith("tidelog-log-cleaner-thread")] == []
    assert read_latest(log) == latest_of(appends)


def test_no_threads_with_zero_cleaner_threads(make_log: MakeLog, tmp_path: Path, make_cleaner: MakeCleaner) -> None:
    log, appends = dirty_log(make_log, tmp_path)
    cleaner = make_cleaner([log], **{"log.cleaner.threads": "0"})
    cleaner.startup()
    assert [t for t in threading.enumerate() if t.name.startswith("tidelog-log-cleaner-thread")] == []
    assert cleaner.run_once() is not None, "on-demand cleaning still works"
    cleaner.shutdown()
    assert read_latest(log) == latest_of(appends)


def test_a_corrupt_batch_in_the_dirty_range_is_reported_with_its_file_and_position(
        make_log: MakeLog, tmp_path: Path, make_cleaner: MakeCleaner) -> None:
    """A corrupt batch met while building the offset map quarantines the partition with an error
    that says where it is: the segment file and the batch's byte position in it (the map reads a
    segment from the index position of the first dirty offset, not from 0)."""
    log, _ = dirty_log(make_log, tmp_path, keys=30, dups=2, index_interval_bytes="100")
    segment = log.segments[1]
    batches = [(position, batch.base_offset) for position, batch in segment.log.batches()]
    first_dirty = batches[5][1]
    assert segment.offset_index.lookup(first_dirty).position > 0, "the map starts reading inside the segment"
    bad_position, bad_offset = batches[8]
    with open(segment.log.path, "r+b") as f:
        f.seek(bad_position + 16)  # the magic byte
        f.write(bytes([7]))
    before = dir_snapshot(log.dir)
    cleaner = make_cleaner([log])
    cleaner.manager.update_checkpoints(tmp_path, TP, first_dirty)
    result = cleaner.run_once()
    assert result is not None and result.error is not None and result.end_offset == first_dirty
    [quarantined] = cleaner.manager.quarantined()
    assert "CorruptRecordError" in quarantined.error
    assert dir_snapshot(log.dir) == before, "never truncated, never rewritten"
    assert f"offset={bad_offset}" in quarantined.error
    assert f"position={bad_position}" in quarantined.error, quarantined.error
    assert str(segment.log.path) in quarantined.error, quarantined.error


def test_explain_of_a_quarantined_partition_gives_its_retry_not_record_age(
        make_log: MakeLog, tmp_path: Path, make_cleaner: MakeCleaner, clock: FakeClock) -> None:
    """A partition that is a candidate by its ratio but waits in quarantine: explain says when it
    is retried, and does not claim it waits for its records to age."""
    log, _ = dirty_log(make_log, tmp_path, keys=30, dups=2)
    cleaner = make_cleaner([log])
    cleaner.manager.mark_uncleanable(TP, tmp_path, "disk says no")
    explained = cleaner.manager.explain(TP)
    assert not explained.cleanable_now
    assert explained.eligible_at_ms == clock.milliseconds() + 60_000
    assert any("quarantined since" in reason and "retried at" in reason for reason in explained.reasons)
    assert not any("as its records age" in reason for reason in explained.reasons), explained.reasons


# --- engines injected by whoever starts the cleaner ----------------------------------------------

def test_an_injected_engine_is_built_per_thread_on_its_master_and_cleans(make_log: MakeLog, tmp_path: Path,
                                                                         clock: FakeClock) -> None:
    built: list[str] = []

    def factory(buffers: CleanerBuffers, throttler: Throttler | None, master: str) -> InProcessEngine:
        built.append(master)
        return InProcessEngine(buffers, throttler)

    log, appends = dirty_log(make_log, tmp_path)
    broker = BrokerConfig.from_properties({"log.dirs": str(tmp_path), **BROKER, "log.cleaner.threads": "2",
                                           "tidelog.cleaner.engine": "spark",
                                           "tidelog.cleaner.spark.master": "spark://m:7077"})
    cleaner = LogCleaner(broker, [tmp_path], source([log]), clock, engines={"spark": factory})
    assert built == ["spark://m:7077"] * 2
    cleaner.use_engine("spark", master="local[3]")
    assert built[2:] == ["local[3]"] * 2
    assert cleaner.clean_now(TP, force=True) is not None
    assert read_latest(log) == latest_of(appends)


def test_an_engine_nobody_injected_is_a_config_error_naming_the_key(tmp_path: Path, clock: FakeClock) -> None:
    broker = BrokerConfig.from_properties({"log.dirs": str(tmp_path), **BROKER, "tidelog.cleaner.engine": "spark"})
    with pytest.raises(ConfigError, match=r"unknown cleaner engine 'spark' \(in-process\)") as e:
        LogCleaner(broker, [tmp_path], source([]), clock)
    assert e.value.config == "tidelog.cleaner.engine"
    in_process = LogCleaner(BrokerConfig.from_properties({"log.dirs": str(tmp_path), **BROKER}), [tmp_path],
                            source([]), clock)
    with pytest.raises(ConfigError, match="'spark'"):
        in_process.use_engine("spark")
