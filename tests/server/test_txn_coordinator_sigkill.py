"""``tidelog serve`` SIGKILLed while a kafka-python transactional producer commits transaction
after transaction (each one: ten records over two partitions), at whatever step the kill lands
(an append to ``__transaction_state``, a marker, between them); after the restart the coordinator
finishes what was prepared and times out what was open, the last stable offset reaches the high
watermark, and a read_committed consumer sees whole transactions only: every transaction whose
commit was acknowledged, and no record twice."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KafkaTopicPartition
from kafka.admin import KafkaAdminClient, NewTopic

from server_helpers import Served, serve

OVERRIDES = ("transaction.state.log.num.partitions=3",
             "transaction.abort.timed.out.transaction.cleanup.interval.ms=200")
TOPIC, PER_TXN, TXN_TIMEOUT_MS = "killed-txn", 10, 1000
PARTITIONS = [KafkaTopicPartition(TOPIC, 0), KafkaTopicPartition(TOPIC, 1)]


def _produce(bootstrap: str, committed: list[int], stop: threading.Event) -> None:
    """Transactions until the broker dies (any error ends the loop); ``committed``: acknowledged ones."""
    producer = KafkaProducer(bootstrap_servers=bootstrap, transactional_id="killed", max_block_ms=3000,
                             transaction_timeout_ms=TXN_TIMEOUT_MS, request_timeout_ms=3000)
    try:
        producer.init_transactions()
        n = 0
        while not stop.is_set():
            producer.begin_transaction()
            for j in range(PER_TXN):
                producer.send(TOPIC, f"{n}-{j}".encode(), partition=j % 2)
            producer.commit_transaction()
            committed.append(n)
            n += 1
    except Exception:  # noqa: BLE001 - the broker was killed under it
        pass
    finally:
        producer.close(0)


def _stable(bootstrap: str) -> bool:
    """The last stable offset of both partitions at their high watermark."""
    ends = []
    for isolation in ("read_committed", "read_uncommitted"):
        consumer = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level=isolation, group_id=None)
        try:
            ends.append(consumer.end_offsets(PARTITIONS))
        finally:
            consumer.close()
    return ends[0] == ends[1]


def _read_committed(bootstrap: str) -> list[str]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed", group_id=None,
                             auto_offset_reset="earliest", enable_auto_commit=False, consumer_timeout_ms=1500)
    consumer.assign(PARTITIONS)
    try:
        return [m.value.decode() for m in consumer]
    finally:
        consumer.close()


def _killable(data: Path) -> Served:
    """``tidelog serve`` as :func:`serve` starts it, left to the test to kill."""
    args = [sys.executable, "-m", "tidelog.cli.main", "--data-dir", str(data)]
    for override in ("listeners=PLAINTEXT://127.0.0.1:0", *OVERRIDES):
        args += ["--override", override]
    return Served(subprocess.Popen([*args, "serve"], stderr=subprocess.PIPE, text=True))


def test_a_sigkilled_broker_leaves_whole_transactions_only(tmp_path: Path) -> None:
    data = tmp_path / "data"
    committed: list[int] = []
    served = _killable(data)
    try:
        admin = KafkaAdminClient(bootstrap_servers=served.bootstrap)
        try:
            admin.create_topics([NewTopic(TOPIC, 2, 1)])
        finally:
            admin.close()
        stop = threading.Event()
        producer = threading.Thread(target=_produce, args=(served.bootstrap, committed, stop), daemon=True)
        producer.start()
        deadline = time.monotonic() + 20
        while len(committed) < 5 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(committed) >= 5, "no transactions committed"
        served.process.kill()  # mid-transaction, mid-commit or between: wherever it lands
        served.process.wait()
        stop.set()
        producer.join(2)  # kafka-python may block on the dead broker: the thread is a daemon
    finally:
        if served.process.poll() is None:
            served.process.kill()
            served.process.wait()
    acknowledged = list(committed)
    with serve(*OVERRIDES, data=data) as served:
        deadline = time.monotonic() + 30
        while not _stable(served.bootstrap):
            assert time.monotonic() < deadline, "the last stable offset never reached the high watermark"
            time.sleep(0.2)
        values = _read_committed(served.bootstrap)
    counts = Counter(values)
    assert not [v for v, c in counts.items() if c > 1], "a record seen twice"
    per_txn = Counter(int(v.split("-")[0]) for v in values)
    assert all(c == PER_TXN for c in per_txn.values()), f"a partial transaction: {per_txn}"
    assert set(acknowledged) <= set(per_txn), f"acknowledged commits missing: {set(acknowledged) - set(per_txn)}"
    assert set(per_txn) <= set(range(len(acknowledged) + 1))  # at most the one whose commit was cut off
