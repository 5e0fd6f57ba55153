"""The log cleaner inside a LogManager, end to end (Kafka's cleaner integration tests, §4.3).

Kafka runs these with real cleaner threads on a MockTime and waits for them; here the cleaner's
loop is driven one iteration at a time with :meth:`LogCleaner.run_once` on a :class:`FakeClock`
(same decisions, no waiting), and one test runs the real threads of ``LogManager.startup()``.
Kafka's integration defaults: ``segment.bytes`` 2048, ``min.cleanable.dirty.ratio`` 0.0, records
written one per batch by ``writeDups`` (no timestamp unless a test gives one).
"""

from __future__ import annotations

import itertools
import random
import threading
import time
from collections.abc import Iterator, Mapping
from functools import partial
from pathlib import Path

import pytest
from cleaner_helpers import (
    all_records,
    dir_snapshot,
    keyed_batch,
    latest_of,
    leftovers,
    read_latest,
    record,
    wait_until,
    write_dups,
)

from tidelog.cleaner.log_cleaner import LogCleaner
from tidelog.errors import ConfigError, InvalidRecordError
from tidelog.manager import LogManager
from tidelog.records import CompressionType
from tidelog.storage.checkpoints import CLEANER_OFFSET_CHECKPOINT_FILE, OffsetCheckpointFile
from tidelog.storage.config import BrokerConfig
from tidelog.storage.log import Log
from tidelog.testing import FakeClock, FakeScheduler
from tidelog.topic_partition import TopicPartition

HOUR = 3_600_000
TP = TopicPartition("log", 0)
BROKER = {
    "log.cleaner.dedupe.buffer.size": str(24 * 10_000),  # 10,000 slots: small and quick to allocate
    "log.initial.task.delay.ms": "0",
}
COMPACTED = {"cleanup.policy": "compact", "segment.bytes": "2048", "min.cleanable.dirty.ratio": "0.0",
             "segment.index.bytes": "4096"}  # small index files: quicker to create and map


class Broker:
    """Opens LogManagers on one log dir with a FakeClock; each open gets a fresh FakeScheduler
    (tasks of a manager shut down never run against the next one)."""

    def __init__(self, log_dir: Path, clock: FakeClock) -> None:
        self.log_dir = log_dir
        self.clock = clock
        self.opened: list[tuple[LogManager, FakeScheduler]] = []

    def open(self, **props: str) -> LogManager:
        broker = BrokerConfig.from_properties({"log.dirs": str(self.log_dir), **BROKER, **props})
        scheduler = FakeScheduler(self.clock)
        manager = LogManager.open(broker, [self.log_dir], clock=self.clock, scheduler=scheduler)
        self.opened.append((manager, scheduler))
        return manager

    def close_all(self) -> None:
        for manager, scheduler in self.opened:
            manager.shutdown()
            scheduler.shutdown()


@pytest.fixture
def broker(tmp_path: Path, clock: FakeClock) -> Iterator[Broker]:
    opener = Broker(tmp_path / "logs", clock)
    yield opener
    opener.close_all()


def cleaner_of(manager: LogManager) -> LogCleaner:
    assert manager.cleaner is not None, "log.cleaner.enable is true by default"
    return manager.cleaner


def compacted_topic(manager: LogManager, name: str = "log", **configs: str) -> Log:
    manager.create_topic(name, 1, {**COMPACTED, **{k.replace("_", "."): v for k, v in configs.items()}})
    return manager.log(TopicPartition(name, 0))


def checkpoint_file(log_dir: Path) -> dict[TopicPartition, int]:
    return OffsetCheckpointFile(log_dir / CLEANER_OFFSET_CHECKPOINT_FILE).read()


def check_last_cleaned(manager: LogManager, tp: TopicPartition, first_dirty: int, log_dir: Path) -> int:
    """Kafka's ``checkLastCleaned``: the checkpoint, in memory and on disk, reached ``first_dirty``."""
    in_memory = cleaner_of(manager).manager.all_cleaner_checkpoints()[tp]
    assert in_memory >= first_dirty
    assert checkpoint_file(log_dir)[tp] == in_memory
    return in_memory


def run_until_idle(cleaner: LogCleaner, limit: int = 10) -> list:
    """Cleaner loop iterations until one cleans nothing (each cleans at most one log)."""
    results = []
    for _ in range(limit):
        result = cleaner.run_once()
        if result is None:
            return results
        results.append(result)
    raise AssertionError(f"the cleaner still found work after {limit} iterations: {results[-3:]}")


def large_batch(key: int, codec: int) -> tuple[bytes, bytes]:
    """Kafka's ``createLargeSingleMessageSet``: one record with a large value (value, batch).
    Kafka's value has 128 bytes and its cleaner's read buffer half the batch; ours is larger, so
    the read buffer can hold several ordinary batches (fewer chunks, a quicker test) and still
    has to grow for this one."""
    value = random.Random(key).randbytes(1024)  # incompressible: no codec shrinks it
    return value, record(key, value, compression=codec, timestamp=-1)


# --- LogCleanerParameterizedIntegrationTest ----------------------------------------------------

@pytest.mark.parametrize("codec", list(CompressionType), ids=lambda c: c.name.lower())
def test_cleaner_keeps_the_latest_value_and_offset_of_every_key(broker: Broker, codec: CompressionType) -> None:
    """cleanerTest: 100 keys x 3 dups, cleaned; then a large message (bigger than the cleaner's
    read buffer, which must grow) and 100 new keys x 3, cleaned again; deleting the topic drops
    its checkpoint entry."""
    large_value, large = large_batch(20, codec)
    assert len(large) > 1024
    manager = broker.open(**{"log.cleaner.io.buffer.size": "1024"})  # 512-byte read buffer: grows for the large batch
    log = compacted_topic(manager)
    counter = itertools.count()
    append = partial(manager.append, TP)

    appends = write_dups(append, 100, 3, counter, compression=codec)
    start_size = log.size
    result = cleaner_of(manager).run_once()
    assert result is not None and result.error is None and result.first_dirty_offset == 0
    first_dirty = log.active_segment.base_offset
    check_last_cleaned(manager, TP, first_dirty, broker.log_dir)
    assert log.size < start_size, "log should have been compacted"
    assert read_latest(log) == latest_of(appends)

    large_offset = manager.append(TP, large).first_offset
    dups = write_dups(append, 100, 3, counter, start_key=21, compression=codec)
    appends2 = appends + [(20, large_value, large_offset)] + dups
    first_dirty2 = log.active_segment.base_offset
    assert cleaner_of(manager).run_once() is not None
    check_last_cleaned(manager, TP, first_dirty2, broker.log_dir)
    assert read_latest(log) == latest_of(appends2)
    cleaned_keys = [k for o, k, _ in all_records(log) if o < first_dirty2]
    assert len(cleaned_keys) == len(set(cleaned_keys)), "one record per key in the cleaned part"
    assert leftovers(log.dir) == []

    manager.delete_topic("log")
    assert TP not in cleaner_of(manager).manager.all_cleaner_checkpoints()
    assert TP not in checkpoint_file(broker.log_dir)


def test_compact_delete_topic_is_compacted_then_deleted_by_the_cleaners_retention(broker: Broker,
                                                                                  clock: FakeClock) -> None:
    """testCleansCombinedCompactAndDeleteTopic: ``compact,delete`` with retention.ms 100 s; after
    compaction, segments whose mtime is 200 s old go in the cleaner's retention pass (records
    carry no timestamp, so the mtime decides), all but a new empty active segment; a restarted
    broker then compacts new data of the same partition."""
    manager = broker.open()
    log = compacted_topic(manager, cleanup_policy="compact,delete", retention_ms="100000")
    counter = itertools.count()
    write_dups(partial(manager.append, TP), 100, 3, counter)
    start_size = log.size
    first_dirty = log.active_segment.base_offset
    assert cleaner_of(manager).run_once() is not None
    check_last_cleaned(manager, TP, first_dirty, broker.log_dir)
    assert log.size < start_size

    end = log.log_end_offset
    for segment in log.segments:
        segment.set_last_modified_ms(clock.milliseconds() - 200_000)
    assert manager.retention_task() == [], "the log manager's task leaves compacted logs alone"
    assert log.log_start_offset == 0
    assert cleaner_of(manager).run_once() is None  # nothing dirty; the retention pass runs anyway
    assert log.log_start_offset == end
    assert log.num_segments == 1 and log.size == 0

    manager.shutdown()
    manager = broker.open()
    log = manager.log(TP)
    assert log.log_start_offset == end
    messages = write_dups(partial(manager.append, TP), 20, 3, counter)
    first_dirty = log.active_segment.base_offset
    result = cleaner_of(manager).run_once()
    assert result is not None and result.first_dirty_offset == end, "the stale checkpoint is reset to the log start"
    check_last_cleaned(manager, TP, first_dirty, broker.log_dir)
    assert read_latest(log) == latest_of(messages)


# --- LogCleanerLagIntegrationTest -------------------------------------------------------------------

def test_nothing_is_cleaned_before_the_min_compaction_lag(broker: Broker, clock: FakeClock) -> None:
    """LogCleanerLagIntegrationTest.cleanerTest: min.compaction.lag.ms 1 h, segments of 512 B
    (one codec and 50 keys where Kafka has 100: the codecs are the cleaner test's business)."""
    codec = CompressionType.ZSTD
    manager = broker.open()
    log = compacted_topic(manager, min_compaction_lag_ms=str(HOUR), segment_bytes="512")
    counter = itertools.count()
    append = partial(manager.append, TP)
    t0 = clock.milliseconds()
    appends0 = write_dups(append, 50, 3, counter, compression=codec, timestamp=t0)
    start_size = log.size
    active_at_t0 = log.active_segment.base_offset
    size_below_active_at_t0 = sum(s.size for s in log.segments_between(0, active_at_t0))

    clock.advance(HOUR // 2)
    assert cleaner_of(manager).run_once() is None
    assert log.size == start_size, "no cleaning until the compaction lag has passed"
    assert TP not in cleaner_of(manager).manager.all_cleaner_checkpoints()

    clock.advance(HOUR // 2 + 1)
    t1 = clock.milliseconds()
    appends1 = appends0 + write_dups(append, 50, 3, counter, compression=codec, timestamp=t1)
    first_young = next(s.base_offset for s in log.segments if s.largest_timestamp >= t1)
    assert first_young >= active_at_t0  # == unless the T0 active segment was full before the T1 block
    result = cleaner_of(manager).run_once()
    assert result is not None and result.end_offset == first_young, "the first segment with new records bounds it"
    assert read_latest(log) == latest_of(appends1)
    check_last_cleaned(manager, TP, active_at_t0, broker.log_dir)
    assert sum(s.size for s in log.segments_between(0, active_at_t0)) < size_below_active_at_t0


# --- LogCleanerIntegrationTest -----------------------------------------------------------------------

def test_max_compaction_lag_forces_a_clean_the_ratio_never_would(broker: Broker, clock: FakeClock) -> None:
    """testMaxLogCompactionLag: max lag 6 h, min lag 1 h, min.cleanable.dirty.ratio 1.0 (no log
    is ever above it): nothing is cleaned before the max lag; then the first block is; the second
    block (every key set to 0) only once it is overdue too. 50 keys where Kafka has 100."""
    manager = broker.open()
    log = compacted_topic(manager, min_compaction_lag_ms=str(HOUR), max_compaction_lag_ms=str(6 * HOUR),
                          segment_bytes="512", min_cleanable_dirty_ratio="1.0")
    append = partial(manager.append, TP)
    t0 = clock.milliseconds()
    write_key_dups(append, 50, 3, t0, start=0, step=1)
    start_size = log.size
    active_at_t0 = log.active_segment.base_offset

    clock.advance(3 * HOUR)
    assert cleaner_of(manager).run_once() is None
    assert log.size == start_size, "no cleaning until the max compaction lag has passed"

    clock.advance(3 * HOUR + 1)
    appends1 = write_key_dups(append, 50, 1, clock.milliseconds(), start=0, step=0)
    log.roll()
    active_at_t1 = log.active_segment.base_offset
    assert cleaner_of(manager).run_once() is not None
    assert cleaner_of(manager).metrics()["max-compaction-delay-secs"] > 0
    check_last_cleaned(manager, TP, active_at_t0, broker.log_dir)
    assert read_pairs(log) != appends1, "the ratio keeps the second block from being cleaned"

    clock.advance(6 * HOUR + 1)
    assert cleaner_of(manager).run_once() is not None
    assert read_pairs(log) == appends1, "only the zero values are left"
    check_last_cleaned(manager, TP, active_at_t1, broker.log_dir)


def write_key_dups(append, num_keys: int, num_dups: int, timestamp: int, *, start: int, step: int) -> list[tuple[int, bytes]]:
    """Kafka's ``writeKeyDups``: values start at ``start`` and grow by ``step`` per record."""
    value, out = start, []
    for _ in range(num_dups):
        for key in range(num_keys):
            append(record(key, value, timestamp=timestamp))
            out.append((key, str(value).encode()))
            value += step
    return out


def read_pairs(log: Log) -> list[tuple[int, bytes]]:
    """(key, value) of every record in offset order (Kafka's ``readFromLog``)."""
    return [(int(k), v) for _, k, v in all_records(log)]


def break_segment(log: Log) -> tuple[Path, bytes]:
    """Garbage over a batch of the first sealed segment, in place (size unchanged): returns the
    file and its original bytes."""
    path = log.segments[0].log.path
    original = path.read_bytes()
    with open(path, "r+b") as f:
        f.seek(200)  # inside the third batch: the first one, which the stats read, stays valid
        f.write(b"jogeajgoea")
    return path, original


def test_corrupt_partitions_are_quarantined_counted_and_retried(broker: Broker, clock: FakeClock) -> None:
    """testMarksPartitionsAsOfflineAndPopulatesUncleanableMetrics, and beyond Kafka: two
    partitions with garbage in a sealed segment are quarantined (the other one is cleaned by the
    same loop), counted per log dir with their cleanable bytes, their files untouched; deleting
    one topic drops its count; the other is retried after its backoff and leaves quarantine once
    its data is repaired."""
    manager = broker.open()
    counter = itertools.count()
    logs = {}
    for name in ("bad-a", "bad-b", "good"):
        logs[name] = compacted_topic(manager, name)
        write_dups(partial(manager.append, TopicPartition(name, 0)), 20, 3, counter)
    broken = {name: break_segment(logs[name]) for name in ("bad-a", "bad-b")}
    before = {name: dir_snapshot(logs[name].dir) for name in broken}
    cleaner = cleaner_of(manager)

    results = run_until_idle(cleaner)
    by_tp = {r.topic_partition.topic: r for r in results}
    assert by_tp["good"].error is None and by_tp["good"].end_offset == logs["good"].active_segment.base_offset
    assert "bad-a" in by_tp and "bad-b" in by_tp and by_tp["bad-a"].error and by_tp["bad-b"].error
    assert [q.topic_partition.topic for q in cleaner.manager.quarantined()] == ["bad-a", "bad-b"]
    assert all(q.phase == "cleaning" and "CorruptRecordError" in q.error for q in cleaner.manager.quarantined())
    key = str(cleaner.manager.log_dirs[0])
    metrics = cleaner.metrics()
    assert metrics[f"uncleanable-partitions-count[{key}]"] == 2
    expected_bytes = sum(sum(s.size for s in logs[n].segments_between(0, logs[n].active_segment.base_offset))
                         for n in broken)
    assert metrics[f"uncleanable-bytes[{key}]"] == expected_bytes > 0
    for name in broken:
        assert dir_snapshot(logs[name].dir) == before[name], f"{name}: nothing changed on disk"
        assert cleaner.manager.all_cleaner_checkpoints()[TopicPartition(name, 0)] == 0, "first dirty offset kept"
    assert run_until_idle(cleaner) == [], "quarantined partitions wait for their retry"

    manager.delete_topic("bad-a")
    assert cleaner.metrics()[f"uncleanable-partitions-count[{key}]"] == 1
    assert [q.topic_partition.topic for q in cleaner.manager.quarantined()] == ["bad-b"]

    clock.advance(60_000)  # the first retry is due: still broken, so quarantined again for longer
    [retry] = run_until_idle(cleaner)
    assert retry.topic_partition.topic == "bad-b" and retry.error is not None
    [record_] = cleaner.manager.quarantined()
    assert record_.attempts == 2 and record_.retry_at_ms == clock.milliseconds() + 120_000

    path, original = broken["bad-b"]
    path.write_bytes(original)  # repaired (same size, written in place)
    clock.advance(120_000)
    [fixed] = run_until_idle(cleaner)
    assert fixed.topic_partition.topic == "bad-b" and fixed.error is None
    assert cleaner.manager.quarantined() == []
    assert cleaner.metrics()[f"uncleanable-partitions-count[{key}]"] == 0
    check_last_cleaned(manager, TopicPartition("bad-b", 0), logs["bad-b"].active_segment.base_offset, broker.log_dir)


# --- real threads ------------------------------------------------------------------------------------

def cleaner_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("tidelog-log-cleaner-thread")]


def test_cleaner_threads_clean_in_the_background_and_the_checkpoint_survives_a_restart(tmp_path: Path) -> None:
    """``LogManager.startup()`` starts the cleaner thread (system clock, its own scheduler); a
    compacted topic is cleaned within a bounded wait; ``shutdown()`` joins the thread; after a
    restart cleaning resumes from the checkpoint, not from the log start."""
    log_dir = tmp_path / "logs"
    props: Mapping[str, str] = {"log.dirs": str(log_dir), **BROKER, "log.cleaner.backoff.ms": "10"}
    now = int(time.time() * 1000)
    with LogManager.open(BrokerConfig.from_properties(props), [log_dir]) as manager:
        log = compacted_topic(manager, segment_bytes="1024")
        counter = itertools.count()
        appends = write_dups(partial(manager.append, TP), 50, 3, counter, timestamp=now)
        first_dirty = log.active_segment.base_offset
        assert cleaner_threads() == []
        manager.startup()
        assert cleaner_threads() == ["tidelog-log-cleaner-thread-0"]
        checkpoints = cleaner_of(manager).manager.all_cleaner_checkpoints
        wait_until(lambda: checkpoints().get(TP, -1) >= first_dirty, "the cleaner thread to clean the topic")
        assert read_latest(log) == latest_of(appends)
    assert cleaner_threads() == [], "shutdown joins the cleaner threads"
    saved = checkpoint_file(log_dir)[TP]
    assert saved >= first_dirty

    with LogManager.open(BrokerConfig.from_properties(props), [log_dir]) as manager:
        assert manager.set_aside() == []
        log = manager.log(TP)
        assert leftovers(log.dir) == []
        assert read_latest(log) == latest_of(appends)
        assert cleaner_of(manager).manager.explain(TP).first_dirty_offset == saved
        appends += write_dups(partial(manager.append, TP), 50, 1, counter, timestamp=now)
        log.roll()
        result = cleaner_of(manager).run_once()
        assert result is not None and result.first_dirty_offset == saved, "resumed from the checkpoint"
        assert result.end_offset == log.active_segment.base_offset
        assert read_latest(log) == latest_of(appends)


# --- bad input ---------------------------------------------------------------------------------------

def test_min_compaction_lag_above_max_is_refused_and_nothing_is_created(broker: Broker) -> None:
    manager = broker.open()
    before = dir_snapshot(broker.log_dir)
    with pytest.raises(ConfigError) as caught:
        manager.create_topic("lagged", 1, {"cleanup.policy": "compact", "min.compaction.lag.ms": str(2 * HOUR),
                                           "max.compaction.lag.ms": str(HOUR)})
    message = str(caught.value)
    assert "min.compaction.lag.ms" in message and "max.compaction.lag.ms" in message
    assert str(2 * HOUR) in message and str(HOUR) in message
    assert not manager.has_topic("lagged")
    assert not (broker.log_dir / "lagged-0").exists()
    assert dir_snapshot(broker.log_dir) == before, "the registry is not rewritten"


def test_min_compaction_lag_above_max_is_refused_when_altering_a_topic(broker: Broker) -> None:
    manager = broker.open()
    compacted_topic(manager, max_compaction_lag_ms=str(HOUR))
    with pytest.raises(ConfigError, match="max.compaction.lag.ms"):
        manager.alter_topic_config("log", {"min.compaction.lag.ms": str(2 * HOUR)})
    assert manager.topic_config("log").min_compaction_lag_ms == 0
    assert manager.log(TP).config.min_compaction_lag_ms == 0
    assert "min.compaction.lag.ms" not in manager.topic_overrides("log")


def test_broker_defaults_with_min_compaction_lag_above_max_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="min.compaction.lag.ms .*max.compaction.lag.ms"):
        BrokerConfig.from_properties({"log.dirs": str(tmp_path), "log.cleaner.min.compaction.lag.ms": "10",
                                      "log.cleaner.max.compaction.lag.ms": "5"})


@pytest.mark.parametrize("pairs", [[(None, b"v")], [(1, b"a"), (None, b"b"), (2, b"c")]], ids=["keyless", "mixed"])
def test_keyless_records_to_a_compacted_topic_are_refused_and_nothing_is_appended(broker: Broker, pairs) -> None:
    manager = broker.open()
    log = compacted_topic(manager)
    manager.append(TP, record(0, b"kept"))
    size = log.size
    with pytest.raises(InvalidRecordError, match="without key"):
        manager.append(TP, keyed_batch(pairs))
    assert log.log_end_offset == 1 and log.size == size
    assert read_latest(log) == {0: (b"kept", 0)}
