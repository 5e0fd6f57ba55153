"""A lost or corrupt ``.txnindex`` under ``tidelog serve``: read_committed consumers must still not
get aborted records. A partition holds transactions as a Kafka broker writes them (data of two
producers, COMMIT and ABORT markers, a transaction spanning segments, each ABORT indexed in the
``.txnindex`` of its marker's segment with Kafka's values); kafka-python with
``isolation_level='read_committed'`` reads it through ``tidelog serve`` with the index intact, then
deleted, then cut mid-entry (each after a clean stop), and after a SIGKILL: the same records each time.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from kafka import KafkaConsumer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic

from reliability.broker import ServeProcess
from tidelog.records import BatchBuilder
from tidelog.records.control import build_end_txn_marker_batch
from tidelog.storage.config import LogConfig
from tidelog.storage.log import Log
from tidelog.storage.txn_index import AbortedTxn
from tidelog.testing import FakeClock, FakeScheduler

from tests.txn_helpers import write_segments

T0 = int(time.time() * 1000)  # retention must not take the records
TOPIC = "txn"
TIMEOUT_S = 30.0


def _data(offset: int, producer_id: int = -1) -> bytes:
    txn = producer_id >= 0
    builder = BatchBuilder(base_offset=offset, producer_id=producer_id, producer_epoch=0 if txn else -1,
                           base_sequence=offset if txn else -1, is_transactional=txn)
    builder.append(offset, T0 + offset, b"k%d" % offset, b"%s-%d" % (b"txn" if txn else b"plain", offset))
    return builder.build()


def _marker(offset: int, producer_id: int, commit: bool) -> bytes:
    return build_end_txn_marker_batch(commit=commit, producer_id=producer_id, producer_epoch=0,
                                      coordinator_epoch=0, base_offset=offset, timestamp=T0 + offset)


# Per segment: its batches, and the .txnindex entries Kafka's producer state writes for them.
SEGMENTS = [
    ([_data(0, 1), _data(1, 1), _marker(2, 1, True), _data(3, 1)], []),
    ([_data(4, 2), _marker(5, 1, False), _data(6, 2), _data(7)], [AbortedTxn(1, 3, 5, 4)]),
    ([_marker(8, 2, False), _data(9)], [AbortedTxn(2, 4, 8, 9)]),
]
COMMITTED = [(0, b"txn-0"), (1, b"txn-1"), (7, b"plain-7"), (9, b"plain-9")]


def _write_kafka_like_partition(dir: Path) -> None:
    clock = FakeClock(T0)
    log = Log.open(dir, LogConfig.defaults(), had_clean_shutdown=True, clock=clock, scheduler=FakeScheduler(clock))
    write_segments(log, SEGMENTS)
    log.close()


def _consume(bootstrap: str, isolation: str) -> list[tuple[int, bytes]]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                             isolation_level=isolation, consumer_timeout_ms=2000)
    try:
        consumer.assign([TopicPartition(TOPIC, 0)])
        consumer.seek_to_beginning()
        got: list[tuple[int, bytes]] = []
        deadline = time.monotonic() + TIMEOUT_S
        while (not got or got[-1][0] < 9) and time.monotonic() < deadline:
            got.extend((message.offset, message.value) for message in consumer)
        return got
    finally:
        consumer.close()


def _delete(path: Path) -> None:
    path.unlink()


def _cut_mid_entry(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:-7])


DAMAGE: list[tuple[str, Callable[[Path], None]]] = [("deleted", _delete), ("cut mid-entry", _cut_mid_entry)]


def test_read_committed_reads_the_same_with_a_lost_or_corrupt_txn_index(broker: ServeProcess) -> None:
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    admin.create_topics([NewTopic(TOPIC, 1, 1)])
    admin.close()
    assert broker.stop() == 0
    partition = broker.data_dir / f"{TOPIC}-0"
    for path in partition.glob("*.log"):  # the empty segment the broker created: replaced
        path.unlink()
    _write_kafka_like_partition(partition)
    originals = {p.name: p.read_bytes() for p in partition.glob("*.txnindex")}
    assert len(originals) == 2

    broker.start()
    assert _consume(broker.bootstrap, "read_committed") == COMMITTED
    assert [o for o, _ in _consume(broker.bootstrap, "read_uncommitted")] == [0, 1, 3, 4, 6, 7, 9], "aborted ones too"
    for what, damage in DAMAGE:
        assert broker.stop() == 0
        for name in originals:
            damage(partition / name)
        broker.start()
        assert _consume(broker.bootstrap, "read_committed") == COMMITTED, what
        assert {p.name: p.read_bytes() for p in partition.glob("*.txnindex")} == originals, what
    for name in originals:
        (partition / name).unlink()
    broker.kill()
    broker.start()
    assert _consume(broker.bootstrap, "read_committed") == COMMITTED, "after a SIGKILL"
