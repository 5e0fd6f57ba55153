"""LogManager scenarios ported from Kafka's LogManagerTest (kafka-storage.md §4.8, §3.6, §3.9, §1.13):
creation and placement, dir locks, checkpoints, retention and flush driven by the background
tasks, clean shutdown, topic deletion, parallel loading.

Topic lifecycle and the registry's crash completion are in ``test_topics.py``; partitions that
fail to load in ``test_set_aside.py``.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from manager_helpers import (
    Opener,
    T0,
    batch,
    crash,
    high_watermarks,
    log_start_offsets,
    names,
    read_offsets,
    recovery_points,
    sub_dirs,
    tp,
)

from tidelog import retention
from tidelog.errors import (
    InvalidTopicError,
    LogDirLockedError,
    OffsetOutOfRangeError,
    StorageError,
    TidelogError,
    UnknownTopicOrPartitionError,
)
from tidelog.manager import LogManager
from tidelog.storage.config import BrokerConfig
from tidelog.storage.lock import is_locked_by_this_process
from tidelog.storage.metadata import PartitionMetadataFile, has_clean_shutdown, read_clean_shutdown, read_meta_properties
from tidelog.testing import FakeClock, FakeScheduler

DELETE_DIR = re.compile(r"^(?P<topic>.+)-(?P<partition>\d+)\.[0-9a-f]{32}-delete$")


def fill(manager: LogManager, topic: str, partition: int, batches: int, per_batch: int = 1,
         timestamp: int = T0) -> None:
    for _ in range(batches):
        manager.append(tp(topic, partition), batch(per_batch, timestamp=timestamp))


# --- creation and placement -----------------------------------------------------------------

def test_create_log_makes_partition_dir_with_topic_id(broker: Opener, one_dir: list[Path]) -> None:
    manager = broker.open(one_dir)
    described = manager.create_topic("kafka", 1)
    created = manager.get_log(tp("kafka"))
    assert created is not None
    assert created.dir == one_dir[0] / "kafka-0" and created.dir.is_dir()
    assert PartitionMetadataFile(created.dir).read().topic_id == described.topic_id
    assert [(p.topic_partition, p.log_end_offset, p.segments) for p in described.partitions] == [(tp("kafka"), 0, 1)]


def test_get_non_existent_log(broker: Opener, one_dir: list[Path]) -> None:
    manager = broker.open(one_dir)
    assert manager.get_log(tp("kafka")) is None
    assert not (one_dir[0] / "kafka-0").exists()
    with pytest.raises(UnknownTopicOrPartitionError):
        manager.log(tp("kafka"))
    manager.create_topic("kafka", 1)
    assert manager.get_log(tp("kafka", 1)) is None
    with pytest.raises(UnknownTopicOrPartitionError, match="has no partition 1"):
        manager.log(tp("kafka", 1))


def test_create_topic_with_many_partitions_shares_one_topic_id(broker: Opener, one_dir: list[Path]) -> None:
    manager = broker.open(one_dir)
    described = manager.create_topic("orders", 5)
    assert manager.partitions("orders") == [0, 1, 2, 3, 4]
    assert sub_dirs(one_dir[0]) == [f"orders-{p}" for p in range(5)]
    ids = {PartitionMetadataFile(one_dir[0] / f"orders-{p}").read().topic_id for p in range(5)}
    assert ids == {described.topic_id}


def test_least_loaded_assignment(broker: Opener, log_dirs: list[Path]) -> None:
    manager = broker.open(log_dirs)
    manager.create_topic("spread", 20)
    counts = [len(info.partitions) for info in manager.log_dirs()]
    on_disk = [len(sub_dirs(d)) for d in log_dirs]
    assert counts == on_disk and sum(counts) == 20
    assert max(counts) - min(counts) <= 1


def test_new_partition_goes_to_the_dir_with_fewest_partitions(broker: Opener, log_dirs: list[Path]) -> None:
    manager = broker.open(log_dirs)
    manager.create_topic("spread", 7)  # 3, 2, 2 over the three dirs
    manager.create_topic("next", 1)
    assert manager.log(tp("next")).dir.parent in (log_dirs[1], log_dirs[2])
    assert [len(i.partitions) for i in manager.log_dirs()] in ([3, 3, 2], [3, 2, 3])


# --- dir locks ------------------------------------------------------------------------------

def test_two_log_managers_using_same_dir_fails(broker: Opener, log_dirs: list[Path]) -> None:
    first = broker.open(log_dirs[1:2])
    with pytest.raises(LogDirLockedError):
        broker.open(log_dirs[:2])  # locks logs0, then fails on logs1
    assert not is_locked_by_this_process(log_dirs[0]), "a failed open left a dir locked"
    broker.open(log_dirs[:1]).shutdown()
    first.shutdown()
    broker.open(log_dirs[1:2])  # released by shutdown


def test_same_dir_twice_in_one_open_fails_and_leaves_nothing_locked(broker: Opener, one_dir: list[Path]) -> None:
    config = broker.config(one_dir)
    with pytest.raises(LogDirLockedError):
        LogManager.open(config, [one_dir[0], one_dir[0]], clock=broker.clock, scheduler=broker.scheduler)
    assert not is_locked_by_this_process(one_dir[0])


def test_open_defaults_to_the_broker_log_dirs(broker: Opener, log_dirs: list[Path]) -> None:
    manager = LogManager.open(broker.config(log_dirs[1:]), clock=broker.clock, scheduler=broker.scheduler)
    try:
        assert [info.path for info in manager.log_dirs()] == log_dirs[1:]
    finally:
        manager.shutdown()


# --- checkpoints ----------------------------------------------------------------------------

def test_checkpoint_recovery_points(broker: Opener, log_dirs: list[Path]) -> None:
    manager = broker.open(log_dirs[:2])
    manager.create_topic("a", 2)
    manager.create_topic("b", 2)
    for i, (p, lg) in enumerate(manager.logs()):
        fill(manager, p.topic, p.partition, 5 + 10 * i)
        lg.flush()
    manager.checkpoint_recovery_points()
    for log_dir in log_dirs[:2]:
        expected = {p: lg.recovery_point for p, lg in manager.logs() if lg.dir.parent == log_dir}
        assert recovery_points(log_dir) == expected
        assert all(v > 0 for v in expected.values())
    assert sum(len(recovery_points(d)) for d in log_dirs[:2]) == 4


def test_checkpoint_for_only_affected_logs(broker: Opener, log_dirs: list[Path]) -> None:
    """Only the flushed logs' recovery points move; each dir's file lists its own partitions only."""
    manager = broker.open(log_dirs[:2])
    manager.create_topic("a", 4)
    for p, lg in manager.logs():
        fill(manager, p.topic, p.partition, 12)
    flushed = [lg for _, lg in manager.logs()][:2]
    for lg in flushed:
        lg.flush()
    manager.checkpoint_recovery_points()
    written = {**recovery_points(log_dirs[0]), **recovery_points(log_dirs[1])}
    assert written == {p: (12 if lg in flushed else 0) for p, lg in manager.logs()}
    assert set(recovery_points(log_dirs[0])).isdisjoint(recovery_points(log_dirs[1]))


def test_checkpoint_log_start_offset_for_normal_topic(broker: Opener, one_dir: list[Path]) -> None:
    manager = broker.open(one_dir)
    manager.create_topic("normal", 1)
    fill(manager, "normal", 0, 31)
    manager.log(tp("normal")).roll()  # the next segment starts at 31
    fill(manager, "normal", 0, 20)
    assert manager.delete_records(tp("normal"), 31) == 31
    manager.checkpoint_log_start_offsets()
    assert log_start_offsets(one_dir[0]) == {tp("normal"): 31}

    [plan] = manager.run_retention()
    assert plan.segments[0].base_offset == 0 and plan.segments[-1].next_offset == 31
    assert {s.cause for s in plan.segments} == {retention.LOG_START_OFFSET}
    lg = manager.log(tp("normal"))
    assert lg.segments[0].base_offset == lg.log_start_offset == 31
    manager.checkpoint_log_start_offsets()
    assert log_start_offsets(one_dir[0]) == {}, "a log start at the first segment's base is not listed"


def test_high_watermark_checkpoint_follows_appends(broker: Opener, one_dir: list[Path]) -> None:
    manager = broker.open(one_dir)
    manager.create_topic("hw", 2)
    fill(manager, "hw", 1, 3, per_batch=4)
    manager.checkpoint_high_watermarks()
    assert high_watermarks(one_dir[0]) == {tp("hw", 0): 0, tp("hw", 1): 12}


def test_checkpoint_tasks_run_after_initial_delay(broker: Opener, one_dir: list[Path]) -> None:
    manager = broker.open(one_dir, {"log.initial.task.delay.ms": "500",
                                    "log.flush.offset.checkpoint.interval.ms": "2000"})
    manager.create_topic("cp", 1)
    fill(manager, "cp", 0, 5)
    manager.log(tp("cp")).flush()
    manager.startup()
    broker.clock.advance(499)
    assert recovery_points(one_dir[0]) == {}
    broker.clock.advance(1)
    assert recovery_points(one_dir[0]) == {tp("cp"): 5}
    fill(manager, "cp", 0, 5)
    manager.log(tp("cp")).flush()
    broker.clock.advance(1999)
    assert recovery_points(one_dir[0]) == {tp("cp"): 5}
    broker.clock.advance(1)
    assert recovery_points(one_dir[0]) == {tp("cp"): 10}


# --- retention through the background task ----------------------------------------------------

def test_cleanup_expired_segments(broker: Opener, one_dir: list[Path]) -> None:
    manager = broker.open(one_dir, {"log.segment.delete.delay.ms": "5000"})
    manager.create_topic("expire", 1, {"retention.ms": "1000"})
    fill(manager, "expire", 0, 200)
    lg = manager.log(tp("expire"))
    before = lg.num_segments
    assert before > 1
    manager.startup()
    broker.clock.advance(1001)  # every segment's newest record is now older than retention.ms

    assert lg.num_segments == 1 and lg.size == 0
    assert lg.log_start_offset == lg.log_end_offset == 200
    with pytest.raises(OffsetOutOfRangeError):
        lg.read(0, 1024)
    deleted = [n for n in names(lg.dir) if n.endswith(".deleted")]
    assert len([n for n in deleted if n.endswith(".log.deleted")]) == before

    broker.clock.advance(5000)  # file.delete.delay.ms (the broker's log.segment.delete.delay.ms)
    assert [n for n in names(lg.dir) if n.endswith(".deleted")] == []
    assert [n for n in names(lg.dir) if n.endswith(".log")] == ["00000000000000000200.log"]
    fill(manager, "expire", 0, 1)
    assert read_offsets(lg) == [200]


def test_cleanup_segments_to_maintain_size(broker: Opener, one_dir: list[Path]) -> None:
    set_size = len(batch())
    manager = broker.open(one_dir)
    manager.create_topic("sized", 1, {"segment.bytes": str(10 * set_size),
                                      "retention.bytes": str(5 * 10 * set_size + 10)})
    fill(manager, "sized", 0, 200)
    lg = manager.log(tp("sized"))
    assert lg.num_segments == 20
    manager.startup()
    broker.clock.advance(1)
    assert lg.num_segments == 6
    assert lg.log_start_offset == 140
    assert read_offsets(lg) == list(range(140, 200))


def test_retention_task_repeats_every_check_interval(broker: Opener, one_dir: list[Path]) -> None:
    manager = broker.open(one_dir, {"log.retention.check.interval.ms": "1000"})
    manager.create_topic("again", 1, {"retention.ms": "10000"})
    manager.startup()
    broker.clock.advance(1)  # first run: nothing is old yet
    fill(manager, "again", 0, 100, timestamp=T0 + 1)
    lg = manager.log(tp("again"))
    assert lg.num_segments > 1
    broker.clock.advance(9999)  # runs at +1001 ... +10001: age 10000 at most, not > retention.ms
    assert lg.log_start_offset == 0
    broker.clock.advance(999)
    assert lg.log_start_offset == 0
    broker.clock.advance(1)  # the run at +11001 sees age 11000 > 10000
    assert lg.log_start_offset == 100


def test_compacted_topic_is_not_time_or_size_retained(broker: Opener, one_dir: list[Path]) -> None:
    manager = broker.open(one_dir)
    manager.create_topic("compacted", 1, {"cleanup.policy": "compact", "retention.ms": "1000",
                                          "retention.bytes": "100"})
    fill(manager, "compacted", 0, 100)
    lg = manager.log(tp("compacted"))
    segments = lg.num_segments
    manager.startup()
    broker.clock.advance(5000)
    assert lg.num_segments == segments and lg.log_start_offset == 0


def test_explain_retention_deletes_nothing(broker: Opener, one_dir: list[Path]) -> None:
    manager = broker.open(one_dir)
    manager.create_topic("dry", 1, {"retention.ms": "1000"})
    fill(manager, "dry", 0, 100)
    lg = manager.log(tp("dry"))
    segments = lg.num_segments
    broker.clock.advance(2000)
    plans = manager.explain_retention("dry")
    assert len(plans) == 1 and plans[0].dry_run and len(plans[0].segments) == segments
    assert lg.num_segments == segments and lg.log_start_offset == 0


def test_deleted_segment_files_left_by_shutdown_are_removed_at_restart(broker: Opener, one_dir: list[Path]) -> None:
    manager = broker.open(one_dir, {"log.segment.delete.delay.ms": "60000"})
    manager.create_topic("left", 1, {"retention.ms": "1000"})
    fill(manager, "left", 0, 100)
    broker.clock.advance(2000)
    manager.run_retention()
    assert any(n.endswith(".log.deleted") for n in names(one_dir[0] / "left-0"))
    manager.shutdown()  # before file.delete.delay.ms
    reopened = broker.open(one_dir)
    assert [n for n in names(one_dir[0] / "left-0") if n.endswith(".deleted")] == []
    assert reopened.log(tp("left")).log_start_offset == 100


def test_startup_twice_schedules_the_tasks_once(broker: Opener, one_dir: list[Path]) -> None:
    manager = broker.open(one_dir)
    manager.startup()
    queued = broker.scheduler.pending()
    manager.startup()
    assert queued == 6 and broker.scheduler.pending() == queued  # 5 tasks + the offline log dir probe
    manager.shutdown()
    with pytest.raises(StorageError):
        manager.startup()


# --- flush ----------------------------------------------------------------------------------

def test_time_based_flush(broker: Opener, one_dir: list[Path]) -> None:
    manager = broker.open(one_dir, {"log.flush.scheduler.interval.ms": "1000"})
    manager.create_topic("flushed", 1, {"flush.ms": "1000"})
    manager.create_topic("lazy", 1, {"flush.ms": "100000"})  # (the scheduler interval is flush.ms's default)
    fill(manager, "flushed", 0, 10)
    fill(manager, "lazy", 0, 10)
    flushed, lazy = manager.log(tp("flushed")), manager.log(tp("lazy"))
    assert flushed.last_flush_time == T0 and flushed.recovery_point == 0
    manager.startup()
    broker.clock.advance(2000)
    assert flushed.last_flush_time == T0 + 2000
    assert flushed.recovery_point == 10
    assert lazy.recovery_point == 0 and lazy.last_flush_time == T0


# --- clean shutdown -------------------------------------------------------------------------

def test_clean_shutdown_file_with_broker_epoch(broker: Opener, log_dirs: list[Path]) -> None:
    manager = broker.open(log_dirs[:2])
    manager.create_topic("epoch", 2)
    manager.shutdown(3)
    assert [read_clean_shutdown(d) for d in log_dirs[:2]] == [3, 3]
    assert not any(is_locked_by_this_process(d) for d in log_dirs[:2])


def test_clean_shutdown_keeps_the_broker_epoch_the_marker_held(broker: Opener, log_dirs: list[Path]) -> None:
    manager = broker.open(log_dirs[:1])
    manager.create_topic("epoch", 1)
    manager.shutdown(7)  # as a Kafka broker of epoch 7 leaves it
    reopened = broker.open(log_dirs[:1])
    fill(reopened, "epoch", 0, 3)
    reopened.shutdown()
    assert read_clean_shutdown(log_dirs[0]) == 7, "a -1 makes Kafka's controller elect uncleanly"


def test_a_read_only_open_leaves_the_marker_byte_for_byte(broker: Opener, log_dirs: list[Path]) -> None:
    manager = broker.open(log_dirs[:1])
    manager.create_topic("kept", 1)
    fill(manager, "kept", 0, 5)
    manager.shutdown(12)
    marker = log_dirs[0] / ".kafka_cleanshutdown"
    before = (marker.read_bytes(), marker.stat().st_ino, marker.stat().st_mtime_ns)
    reader = LogManager.open(BrokerConfig.from_properties({}), log_dirs[:1], clock=broker.clock,
                             scheduler=FakeScheduler(broker.clock), read_only=True)
    assert marker.exists(), "not deleted while the read-only session runs"
    assert read_offsets(reader.log(tp("kept"))) == list(range(5))
    reader.shutdown()
    assert (marker.read_bytes(), marker.stat().st_ino, marker.stat().st_mtime_ns) == before


def test_a_read_only_open_writes_no_marker_after_an_unclean_stop(broker: Opener, log_dirs: list[Path]) -> None:
    manager = broker.open(log_dirs[:1])
    manager.create_topic("unclean", 1)
    fill(manager, "unclean", 0, 2)
    manager.shutdown()
    (log_dirs[0] / ".kafka_cleanshutdown").unlink()
    reader = LogManager.open(BrokerConfig.from_properties({}), log_dirs[:1], read_only=True)
    reader.shutdown()
    assert not has_clean_shutdown(log_dirs[0])


def test_clean_reopen_skips_recovery_and_removes_marker_at_open(broker: Opener, log_dirs: list[Path]) -> None:
    manager = broker.open(log_dirs[:2])
    manager.create_topic("clean", 2)
    fill(manager, "clean", 0, 30)
    manager.shutdown()
    reopened = broker.open(log_dirs[:2])
    assert not any(has_clean_shutdown(d) for d in log_dirs[:2]), "marker must go before logs are used"
    assert [lg.had_clean_shutdown for _, lg in reopened.logs()] == [True, True]
    assert recovery_points(log_dirs[0]) | recovery_points(log_dirs[1]) == {tp("clean", 0): 30, tp("clean", 1): 0}
    assert read_offsets(reopened.log(tp("clean"))) == list(range(30))


def test_reopen_after_crash_is_unclean_and_recovers(broker: Opener, one_dir: list[Path]) -> None:
    manager = broker.open(one_dir)
    manager.create_topic("crashy", 1)
    fill(manager, "crashy", 0, 5)
    valid = manager.log(tp("crashy")).size
    crash(manager)
    assert not is_locked_by_this_process(one_dir[0])
    with (one_dir[0] / "crashy-0" / "00000000000000000000.log").open("ab") as f:
        f.write(batch(3)[:30])  # a torn write

    reopened = broker.open(one_dir)
    lg = reopened.log(tp("crashy"))
    assert lg.had_clean_shutdown is False
    assert lg.size == valid and lg.log_end_offset == 5
    assert read_offsets(lg) == [0, 1, 2, 3, 4]


def test_shutdown_is_idempotent_and_refuses_later_changes(broker: Opener, one_dir: list[Path]) -> None:
    manager = broker.open(one_dir)
    manager.create_topic("done", 1)
    manager.shutdown(5)
    manager.shutdown(6)
    assert read_clean_shutdown(one_dir[0]) == 5
    with pytest.raises(StorageError, match="shut down"):
        manager.create_topic("late", 1)


def test_tasks_of_a_shut_down_manager_never_run_again(tmp_path: Path) -> None:
    log_dir = tmp_path / "logs"
    clock = FakeClock(T0)
    scheduler = FakeScheduler(clock)  # one scheduler shared by both managers, as an application's would be
    props = {"log.dirs": str(log_dir), "log.initial.task.delay.ms": "0",
             "log.flush.start.offset.checkpoint.interval.ms": "1000"}
    config = BrokerConfig.from_properties(props)
    first = LogManager.open(config, [log_dir], clock=clock, scheduler=scheduler)
    first.create_topic("shared", 1)
    fill(first, "shared", 0, 10)
    first.startup()
    clock.advance(1)
    first.shutdown()

    second = LogManager.open(config, [log_dir], clock=clock, scheduler=scheduler)
    try:
        assert second.delete_records(tp("shared"), 6) == 6
        second.checkpoint_log_start_offsets()
        assert log_start_offsets(log_dir) == {tp("shared"): 6}
        clock.advance(1000)  # only the first manager has a log-start-offset checkpoint task
        assert log_start_offsets(log_dir) == {tp("shared"): 6}
    finally:
        second.shutdown()


# --- topic deletion -------------------------------------------------------------------------

def test_file_references_after_async_delete(broker: Opener, one_dir: list[Path]) -> None:
    manager = broker.open(one_dir, {"log.segment.delete.delay.ms": "5000"})
    manager.create_topic("kafka", 1, {"file.delete.delay.ms": "100"})  # not used for whole-log deletion
    fill(manager, "kafka", 0, 60)
    segment_files = names(one_dir[0] / "kafka-0")
    manager.delete_topic("kafka")

    assert not (one_dir[0] / "kafka-0").exists()
    [renamed] = sub_dirs(one_dir[0])
    match = DELETE_DIR.match(renamed)
    assert match is not None and (match["topic"], match["partition"]) == ("kafka", "0")
    assert names(one_dir[0] / renamed) == segment_files
    assert manager.topics() == [] and manager.get_log(tp("kafka")) is None
    with pytest.raises(UnknownTopicOrPartitionError):
        manager.log(tp("kafka"))

    broker.clock.advance(4999)
    assert (one_dir[0] / renamed).exists()
    broker.clock.advance(1)
    assert sub_dirs(one_dir[0]) == []


def test_create_and_delete_overly_long_topic(broker: Opener, one_dir: list[Path]) -> None:
    name = "t" * 249
    manager = broker.open(one_dir, {"log.segment.delete.delay.ms": "1000"})
    manager.create_topic(name, 1)
    fill(manager, name, 0, 3)
    manager.delete_topic(name)
    [renamed] = sub_dirs(one_dir[0])
    assert len(renamed) <= 255 and renamed.endswith("-delete")
    assert DELETE_DIR.match(renamed) is not None
    broker.clock.advance(1000)
    assert sub_dirs(one_dir[0]) == []


def test_delete_dir_left_by_shutdown_is_removed_after_restart(broker: Opener, one_dir: list[Path]) -> None:
    manager = broker.open(one_dir, {"log.segment.delete.delay.ms": "1000"})
    manager.create_topic("gone", 2)
    fill(manager, "gone", 0, 3)
    manager.delete_topic("gone")
    manager.shutdown()  # before the delay: the -delete dirs stay on disk
    assert len(sub_dirs(one_dir[0])) == 2

    reopened = broker.open(one_dir, {"log.segment.delete.delay.ms": "1000"})
    assert reopened.topics() == [] and reopened.set_aside() == []
    broker.clock.advance(1000)
    assert sub_dirs(one_dir[0]) == []


def test_deleted_topic_can_be_recreated_empty(broker: Opener, one_dir: list[Path]) -> None:
    manager = broker.open(one_dir)
    old = manager.create_topic("again", 1)
    fill(manager, "again", 0, 7)
    manager.delete_topic("again")
    new = manager.create_topic("again", 1)
    assert new.topic_id != old.topic_id
    assert manager.log(tp("again")).log_end_offset == 0
    manager.shutdown()
    reopened = broker.open(one_dir)
    assert reopened.describe_topic("again").topic_id == new.topic_id
    assert reopened.log(tp("again")).log_end_offset == 0


# --- loading --------------------------------------------------------------------------------

SMALL_INDEXES = {"log.index.size.max.bytes": "4096"}  # a crash leaves active indexes unshrunk: keep copies cheap


def build_data(broker: Opener, dirs: list[Path]) -> None:
    """20 partitions over two dirs, some multi-segment, left by a crash (so loading recovers)."""
    manager = broker.open(dirs, SMALL_INDEXES)
    manager.create_topic("a", 12)
    manager.create_topic("b", 8, {"segment.bytes": "2048"})
    for i, (p, _) in enumerate(manager.logs()):
        fill(manager, p.topic, p.partition, i + i % 3 * 10, per_batch=1 + i % 3)
    manager.delete_records(tp("a", 5), 4)
    manager.checkpoint_log_start_offsets()
    for _, lg in manager.logs()[::2]:
        lg.flush()
    manager.checkpoint_recovery_points()
    crash(manager)


def state(manager: LogManager) -> list[tuple[object, ...]]:
    return [(p.topic_partition, p.log_dir.name, p.log_start_offset, p.high_watermark, p.log_end_offset,
             p.recovery_point, p.size, p.segments) for info in manager.log_dirs() for p in info.partitions]


def test_parallel_loading_gives_the_same_state_as_one_thread(broker: Opener, tmp_path: Path) -> None:
    source = [tmp_path / "src" / "x", tmp_path / "src" / "y"]
    build_data(broker, source)
    states, progress = [], []
    for threads in ("1", "4"):
        copy = tmp_path / f"copy{threads}"
        shutil.copytree(tmp_path / "src", copy)
        calls: list[tuple[int, int]] = []
        manager = broker.open([copy / "x", copy / "y"], {**SMALL_INDEXES, "num.recovery.threads.per.data.dir": threads},
                              on_progress=lambda done, total, calls=calls: calls.append((done, total)))
        states.append(state(manager))
        progress.append(calls)
        assert all(not lg.had_clean_shutdown for _, lg in manager.logs())
    assert len(states[0]) == 20 and states[0] == states[1]
    for calls in progress:
        assert calls == [(i, 20) for i in range(1, 21)]


def test_loading_uses_checkpointed_log_start_offset_and_recovery_point(broker: Opener, one_dir: list[Path]) -> None:
    manager = broker.open(one_dir)
    manager.create_topic("kept", 2)
    fill(manager, "kept", 0, 10)
    fill(manager, "kept", 1, 10)
    manager.delete_records(tp("kept"), 4)
    manager.log(tp("kept", 1)).flush()
    manager.checkpoint_log_start_offsets()
    manager.checkpoint_recovery_points()
    crash(manager)
    reopened = broker.open(one_dir)
    assert reopened.log(tp("kept")).log_start_offset == 4
    assert read_offsets(reopened.log(tp("kept")))[0] == 4
    assert [lg.recovery_point for _, lg in reopened.logs()] == [0, 10]


def test_progress_callback_counts_every_partition_once(broker: Opener, log_dirs: list[Path]) -> None:
    manager = broker.open(log_dirs)
    manager.create_topic("p", 9)
    manager.shutdown()
    calls: list[tuple[int, int]] = []
    broker.open(log_dirs, {"num.recovery.threads.per.data.dir": "3"},
                on_progress=lambda done, total: calls.append((done, total)))
    assert calls == [(i, 9) for i in range(1, 10)]


def test_progress_reaches_total_when_a_deleted_topic_dir_is_finished(broker: Opener, one_dir: list[Path]) -> None:
    manager = broker.open(one_dir)
    manager.create_topic("kept", 1)
    manager.create_topic("doomed", 1)
    manager.shutdown()
    shutil.copytree(one_dir[0] / "doomed-0", one_dir[0].parent / "doomed-0.copy")
    broker.open(one_dir).delete_topic("doomed")
    broker.close_all()
    shutil.copytree(one_dir[0].parent / "doomed-0.copy", one_dir[0] / "doomed-0")  # as if the rename never happened

    calls: list[tuple[int, int]] = []
    broker.open(one_dir, on_progress=lambda done, total: calls.append((done, total)))
    assert calls and calls[-1][0] == calls[-1][1]


def test_new_dirs_share_one_cluster_id(broker: Opener, log_dirs: list[Path]) -> None:
    broker.open(log_dirs).shutdown()
    metas = [read_meta_properties(d) for d in log_dirs]
    assert all(m is not None for m in metas)
    assert len({m.cluster_id for m in metas if m}) == 1
    assert len({m.directory_id for m in metas if m}) == 3


def test_new_dir_listed_first_joins_the_cluster_of_an_existing_dir(broker: Opener, log_dirs: list[Path]) -> None:
    broker.open(log_dirs[1:2]).shutdown()
    broker.open(log_dirs[:2]).shutdown()
    metas = [read_meta_properties(d) for d in log_dirs[:2]]
    assert metas[0] is not None and metas[1] is not None
    assert metas[0].cluster_id == metas[1].cluster_id


def test_dirs_of_different_clusters_are_refused(broker: Opener, log_dirs: list[Path]) -> None:
    broker.open(log_dirs[:1]).shutdown()
    broker.open(log_dirs[1:2]).shutdown()
    with pytest.raises(TidelogError, match="cluster"):
        broker.open(log_dirs[:2])


def test_an_internal_topic_is_refused_by_the_manager_itself_and_keeps_its_data(tmp_path: Path) -> None:
    with LogManager.open(BrokerConfig.from_properties({}), [tmp_path]) as manager:
        manager.create_topic("__consumer_offsets", 1)
        with pytest.raises(InvalidTopicError, match="Cannot delete internal topic __consumer_offsets"):
            manager.delete_topic("__consumer_offsets")
        assert manager.partitions("__consumer_offsets") == [0]
    assert (tmp_path / "__consumer_offsets-0").is_dir()
