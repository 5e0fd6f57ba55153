"""tidelog serve takes over the transactions a Kafka 4.3 broker left in its data dir: its
coordinator loads Kafka's ``__transaction_state`` records (one id committed, one with a
transaction still open when Kafka was killed), a new producer with the open id fences it and its
data is aborted by markers Kafka's partition takes, the committed id goes on at the next epoch of
Kafka's producer id, and a read_committed consumer sees exactly the committed records."""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from kafka import KafkaConsumer, KafkaProducer
from kafka.admin import KafkaAdminClient, NewTopic

from kafka_oracle import KafkaBroker
from tidelog.manager import LogManager
from tidelog.server import Endpoint, ServerConfig, ServerThread
from tidelog.storage.config import BrokerConfig
from tidelog.testing import FakeClock, FakeScheduler
from tidelog.topic_partition import TopicPartition

pytestmark = pytest.mark.xdist_group("kafka_broker")
TOPIC = "ktx-data"
WAIT_S = 60.0


def _producer(bootstrap: str, transactional_id: str) -> KafkaProducer:
    producer = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=transactional_id, max_block_ms=30000)
    producer.init_transactions()
    return producer


def _read_committed(bootstrap: str, expected: int) -> list[bytes]:
    consumer = KafkaConsumer(TOPIC, bootstrap_servers=bootstrap, isolation_level="read_committed",
                             auto_offset_reset="earliest", enable_auto_commit=False, group_id=None,
                             consumer_timeout_ms=15000)
    got: list[bytes] = []
    try:
        for message in consumer:
            got.append(message.value)
            if len(got) >= expected:
                break
    finally:
        consumer.close()
    return got


def _kafka_writes(broker: KafkaBroker, copy: Path) -> None:
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap_servers)
    try:
        admin.create_topics([NewTopic(TOPIC, 1, 1)])
    finally:
        admin.close()
    broker.wait_for(lambda: broker.partition_dir(TOPIC).is_dir(), "the topic's dir", WAIT_S)
    done = _producer(broker.bootstrap_servers, "ktx-done")
    done.begin_transaction()
    done.send(TOPIC, b"kafka-committed")
    done.commit_transaction()
    done.close()
    left_open = _producer(broker.bootstrap_servers, "ktx-open")
    left_open.begin_transaction()
    left_open.send(TOPIC, b"kafka-open")
    left_open.flush()
    time.sleep(1.0)  # let Kafka's coordinator store Ongoing (its AddPartitionsToTxn is answered already)
    broker.kill()
    left_open.close(0)
    subprocess.run(["cp", "-a", str(broker.log_dir), str(copy)], check=True)
    for path in copy.iterdir():
        if path.is_dir() and not path.name.startswith(("ktx-", "__transaction_state", "__consumer_offsets")):
            shutil.rmtree(path)


def test_tidelog_takes_over_the_transactions_kafka_left(kafka_broker: KafkaBroker, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    _kafka_writes(kafka_broker, copy)
    config = BrokerConfig.from_properties({"log.dirs": str(copy)})
    manager = LogManager.open(config, scheduler=FakeScheduler(FakeClock()))
    server = dataclasses.replace(ServerConfig.from_broker(config), listeners=(Endpoint("PLAINTEXT", "127.0.0.1", 0),),
                                 security=())
    thread = ServerThread(manager, server, io_threads=4)
    try:
        thread.start()
        bootstrap = f"127.0.0.1:{thread.server.bound[0].port}"
        coordinator = thread.server.transactions
        assert coordinator is not None
        done, left = coordinator.describe("ktx-done"), coordinator.describe("ktx-open")
        assert done is not None and done.state == "CompleteCommit"
        assert left is not None and left.state == "Ongoing" and left.partitions == (TopicPartition(TOPIC, 0),)
        assert manager.offsets(TopicPartition(TOPIC, 0)).last_stable_offset < manager.offsets(
            TopicPartition(TOPIC, 0)).high_watermark  # Kafka's open transaction holds the LSO back

        again = _producer(bootstrap, "ktx-open")  # fences Kafka's producer: its transaction is aborted
        again.begin_transaction()
        again.send(TOPIC, b"tidelog-after-fence")
        again.commit_transaction()
        again.close()
        resumed = _producer(bootstrap, "ktx-done")
        resumed.begin_transaction()
        resumed.send(TOPIC, b"tidelog-committed")
        resumed.commit_transaction()
        resumed.close()
        after = coordinator.describe("ktx-done")
        assert after is not None and after.producer_id == done.producer_id and after.producer_epoch == done.producer_epoch + 1
        offsets = manager.offsets(TopicPartition(TOPIC, 0))
        assert offsets.last_stable_offset == offsets.high_watermark
        assert _read_committed(bootstrap, 3) == [b"kafka-committed", b"tidelog-after-fence", b"tidelog-committed"]
    finally:
        thread.stop()
        manager.shutdown()
