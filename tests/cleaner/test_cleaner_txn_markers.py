"""The cleaner on transactions tidelog wrote itself: data produced in transactions and markers
appended through ``LogManager.write_txn_marker`` (its ``.txnindex`` entries written by the append
path) are cleaned exactly as the same transactions written as a Kafka broker's log holds them
(batches copied in, Kafka's entries written by hand): the same records go, the same ABORT is
re-indexed, the open transaction past the last stable offset is left alone."""

from __future__ import annotations

from pathlib import Path

from cleaner_helpers import T0, all_records, keyed_batch

from tidelog.cleaner.log_cleaner import LogCleaner
from tidelog.manager import LogManager
from tidelog.records import build_end_txn_marker_batch
from tidelog.storage.config import BrokerConfig, LogConfig
from tidelog.storage.log import Log
from tidelog.storage.txn_index import AbortedTxn
from tidelog.testing import FakeClock, FakeScheduler
from tidelog.topic_partition import TopicPartition
from tests.txn_helpers import write_segments

TP = TopicPartition("txn", 0)
TOPIC = {"cleanup.policy": "compact", "segment.bytes": str(1 << 20), "min.cleanable.dirty.ratio": "0.01",
         "min.compaction.lag.ms": "0"}
# (kind, producer id, key, value): the transactions of both logs, one segment per list
SEGMENTS = [
    [("txn", 1, b"a", b"v1"), ("commit", 1), ("txn", 2, b"b", b"aborted"), ("txn", 1, b"a", b"v2"), ("abort", 2),
     ("commit", 1)],
    [("plain", -1, b"c", b"c1"), ("txn", 3, b"a", b"open"), ("plain", -1, b"d", b"d1")],
]
KAFKA_ENTRIES = [[AbortedTxn(2, 2, 4, 3)], []]  # producer 1's transaction (from 3) was open at the abort


def broker(root: Path) -> BrokerConfig:
    return BrokerConfig.from_properties({"log.dirs": str(root), "log.cleaner.dedupe.buffer.size": str(1 << 20)})


def through_the_manager(root: Path, clock: FakeClock) -> LogManager:
    manager = LogManager.open(broker(root), [root], clock=clock, scheduler=FakeScheduler(clock))
    manager.create_topic(TP.topic, 1, TOPIC)
    seqs: dict[int, int] = {}
    for n, segment in enumerate(SEGMENTS):
        if n:
            manager.log(TP).roll()
        for kind, pid, *pair in segment:
            if kind in ("commit", "abort"):
                manager.write_txn_marker(TP, pid, 0, 0, commit=kind == "commit")
                continue
            producer = {} if pid < 0 else {"producer_id": pid, "producer_epoch": 0,
                                           "base_sequence": seqs.get(pid, 0), "is_transactional": True}
            seqs[pid] = seqs.get(pid, 0) + 1
            manager.append(TP, keyed_batch([tuple(pair)], timestamp=T0, **producer))  # type: ignore[list-item]
    manager.log(TP).roll()
    return manager


def kafka_written(dir: Path, clock: FakeClock, config: LogConfig) -> Log:
    """The same batches copied in with their offsets, each ABORT's entry as Kafka's producer state writes it."""
    log = Log.open(dir, config, clock=clock, scheduler=FakeScheduler(clock))
    offset, seqs, batches = 0, {}, []
    for segment in SEGMENTS:
        built = []
        for kind, pid, *pair in segment:
            if kind in ("commit", "abort"):
                built.append(build_end_txn_marker_batch(commit=kind == "commit", producer_id=pid, producer_epoch=0,
                                                        coordinator_epoch=0, base_offset=offset, timestamp=T0))
            else:
                producer = {} if pid < 0 else {"producer_id": pid, "producer_epoch": 0,
                                               "base_sequence": seqs.get(pid, 0), "is_transactional": True}
                seqs[pid] = seqs.get(pid, 0) + 1
                built.append(keyed_batch([tuple(pair)], timestamp=T0, base_offset=offset, **producer))  # type: ignore[list-item]
            offset += 1
        batches.append(built)
    write_segments(log, list(zip(batches, KAFKA_ENTRIES)))
    log.roll()
    log.update_high_watermark(log.log_end_offset)
    return log


def clean(log: Log, root: Path, clock: FakeClock) -> None:
    cleaner = LogCleaner(broker(root), [root], lambda: [(TP, log)], clock)
    result = cleaner.clean_now(TP, force=True)
    assert result is not None and result.error is None


def aborted(log: Log) -> list[AbortedTxn]:
    return log.collect_aborted_transactions(0, log.log_end_offset)


def test_tidelog_written_transactions_clean_as_kafka_written_ones(tmp_path: Path) -> None:
    clock = FakeClock(T0 + 1000)
    manager = through_the_manager(tmp_path / "ours", clock)
    try:
        ours = manager.log(TP)
        theirs = kafka_written(tmp_path / "kafka" / "txn-0", clock, ours.config)
        assert aborted(ours) == aborted(theirs) == [AbortedTxn(2, 2, 4, 3)]
        assert ours.last_stable_offset == theirs.last_stable_offset == 7, "producer 3's transaction is open"
        assert all_records(ours) == all_records(theirs)
        clean(ours, tmp_path / "ours", clock)
        clean(theirs, tmp_path / "kafka", clock)
        kept = all_records(ours)
        assert kept == [(3, b"a", b"v2"), (6, b"c", b"c1"), (7, b"a", b"open"), (8, b"d", b"d1")]
        assert all_records(theirs) == kept
        assert aborted(ours) == aborted(theirs) == [AbortedTxn(2, 2, 4, 3)], "the kept ABORT is re-indexed"
        assert [s.base_offset for s in ours.segments] == [s.base_offset for s in theirs.segments]
        theirs.close()
    finally:
        manager.shutdown()
