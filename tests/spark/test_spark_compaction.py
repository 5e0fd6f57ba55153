"""The Spark cleaning engine writes what the in-process engine writes, byte for byte.

One input data dir (built once per module, with a fake clock): a compacted topic of three
partitions with keyed, keyless and tombstone records in batches of every codec, cleaned once
in-process (so later tombstones carry a delete horizon, some past by the time of the compared
round, some not), then appended to again; a partition of transactions (committed, aborted, markers
and aborted data in other segment groups than their markers); a partition of v0, v1 and v2
batches. Two copies are cleaned, one per engine, by the broker's own cleaner
(:meth:`LogCleaner.clean_now`), and every file of the data dir is compared after shutdown
(segments, ``.index``/``.timeindex``/``.txnindex``, the cleaner checkpoint, the rest).
"""

from __future__ import annotations

import itertools
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tidelog.cleaner.log_cleaner import LogCleaner
from tidelog.manager import LogManager
from tidelog.records import BatchBuilder, CompressionType, build_end_txn_marker_batch
from tidelog.spark.engine import CLEANER_ENGINES, ENGINE_SPARK
from tidelog.storage.config import BrokerConfig
from tidelog.storage.file_records import FileRecords
from tidelog.storage.log import Log
from tidelog.storage.txn_index import AbortedTxn
from tidelog.testing import FakeClock, FakeScheduler
from tidelog.topic_partition import TopicPartition

T0 = 1_700_000_000_000
CODECS = (CompressionType.NONE, CompressionType.GZIP, CompressionType.SNAPPY, CompressionType.LZ4,
          CompressionType.ZSTD)
COMPACT = {"cleanup.policy": "compact", "segment.bytes": "3000", "delete.retention.ms": "1000"}


def broker(data: Path, **extra: str) -> BrokerConfig:
    return BrokerConfig.from_properties({"log.dirs": str(data), "log.cleaner.dedupe.buffer.size": str(1 << 22),
                                         **extra})


def opened(data: Path, clock: FakeClock, **extra: str) -> LogManager:
    return LogManager.open(broker(data, **extra), [data], clock=clock, scheduler=FakeScheduler(clock),
                           cleaner_engines=CLEANER_ENGINES)


def batch(log: Log, pairs: list[tuple[bytes | None, bytes | None]], codec: int, ts: int) -> None:
    """As a follower: a leader rejects keyless records on a compacted topic, older logs have them."""
    base = log.log_end_offset
    builder = BatchBuilder(compression=codec, base_offset=base)
    for i, (key, value) in enumerate(pairs):
        builder.append(base + i, ts + i, key, value)
    follower(log, builder.build())


def follower(log: Log, data: bytes) -> None:
    log.append_as_follower(data)
    log.update_high_watermark(log.log_end_offset)


def table_rounds(log: Log, rounds: int, salt: int, ts: int, keys: int = 40) -> None:
    """Batches of 5 records over ``keys`` keys: every 7th a tombstone, every 11th keyless."""
    n = itertools.count()
    for r in range(rounds):
        pairs = []
        for _ in range(5):
            i = next(n)
            key = None if i % 11 == 3 else b"key-%d" % ((i * 7 + salt) % keys)
            value = None if i % 7 == 2 and key is not None else b"value-%d-%d-%d" % (salt, r, i)
            pairs.append((key, value))
        batch(log, pairs, CODECS[r % len(CODECS)], ts)


def txn_batch(log: Log, pid: int, seq: int, keys: list[bytes], ts: int) -> None:
    base = log.log_end_offset
    builder = BatchBuilder(base_offset=base, producer_id=pid, producer_epoch=0, base_sequence=seq,
                           is_transactional=True, compression=CODECS[pid % len(CODECS)])
    for i, key in enumerate(keys):
        builder.append(base + i, ts, key, b"txn-%d-%d" % (pid, seq + i))
    follower(log, builder.build())


def marker(log: Log, pid: int, commit: bool, first: int, ts: int) -> None:
    offset = log.log_end_offset
    follower(log, build_end_txn_marker_batch(commit=commit, producer_id=pid, producer_epoch=0, coordinator_epoch=0,
                                             base_offset=offset, timestamp=ts))
    if not commit:  # as Kafka's producer state indexes it
        log.active_segment.txn_index.append(AbortedTxn(pid, first, offset, first))


def plain(log: Log, keys: list[bytes], ts: int) -> None:
    base = log.log_end_offset
    builder = BatchBuilder(base_offset=base)
    for i, key in enumerate(keys):
        builder.append(base + i, ts, key, b"plain-%d" % (base + i))
    follower(log, builder.build())


def transactions(log: Log, epoch: int, ts: int) -> None:
    """Committed and aborted transactions of three producers, markers past rolls."""
    pid = 10 * epoch
    for round_ in range(3):
        first_commit, first_abort = log.log_end_offset, None
        txn_batch(log, pid + 1, 4 * round_, [b"a", b"b"], ts)
        first_abort = log.log_end_offset
        txn_batch(log, pid + 2, 4 * round_, [b"a", b"c"], ts)
        plain(log, [b"b", b"d"], ts)
        log.roll()
        txn_batch(log, pid + 2, 4 * round_ + 2, [b"d", b"e"], ts)
        marker(log, pid + 1, True, first_commit, ts)
        plain(log, [b"a", b"e", b"f"], ts)
        log.roll()
        marker(log, pid + 2, False, first_abort, ts)
        txn_batch(log, pid + 3, 2 * round_, [b"f"], ts)
        marker(log, pid + 3, round_ % 2 == 0, log.log_end_offset - 1, ts)


def legacy(log: Log, rounds: range, ts: int) -> None:
    for magic, round_, codec in itertools.product((0, 1, 2), rounds, (CompressionType.NONE, CompressionType.GZIP)):
        base = log.log_end_offset
        builder = BatchBuilder(magic=magic, compression=codec, base_offset=base)
        for k in range(5):
            value = None if (k + round_) % 4 == 0 else b"m%d-r%d-%d" % (magic, round_, k)
            builder.append(base + k, ts, b"%d" % k, value)
        follower(log, builder.build())
        if round_ % 2:
            log.roll()


PARTITIONS = [TopicPartition("table", p) for p in range(2)] + [TopicPartition("keep", 0),
                                                                 TopicPartition("txn", 0), TopicPartition("legacy", 0)]


def build_input(data: Path, clock: FakeClock) -> None:
    manager = opened(data, clock)
    manager.create_topic("table", 2, COMPACT)
    manager.create_topic("keep", 1, {**COMPACT, "delete.retention.ms": str(10**9)})
    for name in ("txn", "legacy"):
        manager.create_topic(name, 1, COMPACT)
    for salt, tp in enumerate(PARTITIONS[:3]):
        table_rounds(manager.log(tp), 40, salt, clock.milliseconds())
    transactions(manager.log(TopicPartition("txn", 0)), 1, clock.milliseconds())
    legacy(manager.log(TopicPartition("legacy", 0)), range(3), clock.milliseconds())
    for tp in PARTITIONS:
        assert manager.cleaner is not None and manager.cleaner.clean_now(tp, force=True) is not None
    clock.advance(500)  # round 1 stamped horizons at +1000: not passed yet at the second round ...
    for salt, tp in enumerate(PARTITIONS[:3]):  # keys 25-39 keep their tombstones of round 1
        table_rounds(manager.log(tp), 30, salt + 5, clock.milliseconds(), keys=25)
    transactions(manager.log(TopicPartition("txn", 0)), 2, clock.milliseconds())
    legacy(manager.log(TopicPartition("legacy", 0)), range(3, 5), clock.milliseconds())
    for tp in PARTITIONS:
        manager.log(tp).roll()
    manager.shutdown()
    clock.advance(1000)  # ... but passed for table-*, not for keep (10**9 ms)


def clean_round(data: Path, clock: FakeClock, engine: str | None, partitions: list[TopicPartition] = PARTITIONS,
                **extra: str) -> dict[TopicPartition, Any]:
    """One forced clean of each partition by the broker's cleaner (``engine`` None: the default)."""
    manager = opened(data, clock, **extra)
    cleaner = manager.cleaner
    assert isinstance(cleaner, LogCleaner)
    if engine is not None:
        cleaner.use_engine(engine)
    results = {}
    for tp in partitions:
        results[tp] = cleaner.clean_now(tp, force=True)
    manager.shutdown()
    return results


def tree(data: Path) -> dict[str, bytes]:
    return {str(p.relative_to(data)): p.read_bytes() for p in sorted(data.rglob("*"))
            if p.is_file() and p.name != ".lock"}


@pytest.fixture(scope="module")
def input_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, int]]:
    root = tmp_path_factory.mktemp("spark-compaction")
    clock = FakeClock(T0)
    build_input(root / "input", clock)
    yield root / "input", clock.milliseconds()


def test_spark_engine_writes_the_in_process_engines_bytes(spark, input_dir, tmp_path: Path) -> None:
    source, now = input_dir
    local, on_spark = tmp_path / "in-process", tmp_path / "spark"
    shutil.copytree(source, local)
    shutil.copytree(source, on_spark)
    expected = clean_round(local, FakeClock(now), None)
    got = clean_round(on_spark, FakeClock(now), ENGINE_SPARK)

    before, after_local, after_spark = tree(source), tree(local), tree(on_spark)
    assert after_local != before, "the round changed something"
    assert sorted(after_spark) == sorted(after_local)
    different = [name for name in after_local if after_local[name] != after_spark[name]]
    assert different == []
    assert any(name.endswith(".txnindex") for name in after_local)
    kept = {tp.topic: r.stats.messages_written for tp, r in expected.items()}
    assert kept["keep"] > kept["table"], "tombstones past their horizon went from table, not from keep"
    for tp in PARTITIONS:
        mine, theirs = got[tp], expected[tp]
        assert mine.error is None and theirs.error is None, (mine, theirs)
        assert (mine.end_offset, mine.stats.messages_read, mine.stats.messages_written, mine.stats.bytes_read,
                mine.stats.bytes_written, mine.stats.invalid_messages_read, mine.stats.passes) == (
            theirs.end_offset, theirs.stats.messages_read, theirs.stats.messages_written, theirs.stats.bytes_read,
            theirs.stats.bytes_written, theirs.stats.invalid_messages_read, theirs.stats.passes)


def records(data: Path, tp: TopicPartition) -> list[tuple[int, bytes | None, bytes | None]]:
    out = []
    for path in sorted((data / f"{tp.topic}-{tp.partition}").glob("*.log")):
        log_records = FileRecords.open(path, file_already_exists=True)
        out += [(r.offset, r.key, r.value) for _, b in log_records.batches() for r in b.records()]
    return out


def test_more_distinct_keys_than_the_in_process_map_holds_take_one_pass_on_spark(spark, tmp_path: Path) -> None:
    """64 slots of offset map (57 keys at load factor 0.9) against 400 distinct keys: in-process
    needs several passes; Spark's map is a shuffle, never partial: one pass, the same records."""
    clock = FakeClock(T0)
    small = {"log.cleaner.dedupe.buffer.size": str(24 * 64)}
    manager = opened(tmp_path / "input", clock, **small)
    manager.create_topic("wide", 1, {"cleanup.policy": "compact", "segment.bytes": "16000"})
    tp = TopicPartition("wide", 0)
    log = manager.log(tp)
    for round_ in range(2):
        for first in range(0, 400, 40):
            batch(log, [(b"k%d" % k, b"r%d" % round_) for k in range(first, first + 40)], CompressionType.LZ4, T0)
    log.roll()
    end = log.active_segment.base_offset
    manager.shutdown()
    for name in ("in-process", "spark"):
        shutil.copytree(tmp_path / "input", tmp_path / name)
    local = clean_round(tmp_path / "in-process", FakeClock(T0), None, [tp], **small)[tp]
    on_spark = clean_round(tmp_path / "spark", FakeClock(T0), ENGINE_SPARK, [tp], **small)[tp]

    assert local.stats.passes > 5 and on_spark.stats.passes == 1
    assert local.end_offset == on_spark.end_offset == end
    assert on_spark.stats.messages_written == 400
    assert records(tmp_path / "spark", tp) == records(tmp_path / "in-process", tp)
    assert {k: v for _, k, v in records(tmp_path / "spark", tp)} == {b"k%d" % k: b"r1" for k in range(400)}


def test_the_spark_map_answers_latest_offsets_of_the_dirty_range(spark, tmp_path: Path) -> None:
    """The lookup build_offset_map returns: never partial, exact keys, aborted data left out."""
    from tidelog.cleaner.clean import CleanerBuffers
    from tidelog.cleaner.stats import CleanerStats
    from tidelog.spark.compaction import SparkCleaningEngine

    clock = FakeClock(T0)
    manager = opened(tmp_path / "data", clock)
    manager.create_topic("map", 1, COMPACT)
    log = manager.log(TopicPartition("map", 0))
    plain(log, [b"a", b"b", b"a"], T0)                  # 0-2
    txn_batch(log, 7, 0, [b"b", b"c"], T0)              # 3-4, aborted below
    marker(log, 7, False, 3, T0)                        # 5
    plain(log, [b"d"], T0)                              # 6
    log.roll()
    try:
        engine = SparkCleaningEngine(CleanerBuffers.for_thread(manager.broker), spark=spark)
        stats = CleanerStats(clock)
        lookup = engine.build_offset_map(log, 1, 7, stats, lambda tp: None)
        assert lookup.latest_offset == 6 and lookup.aborted_batches.tolist() == [4]
        assert stats.map_messages_read == 7  # from the first batch on: the index gives position 0
        assert [lookup.get(k) for k in (b"a", b"b", b"c", b"d", b"x")] == [2, 1, -1, 6, -1]
    finally:
        manager.shutdown()
