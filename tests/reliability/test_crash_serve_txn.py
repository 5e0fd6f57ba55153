"""``tidelog serve`` SIGKILLed with a transaction open: after the restart the partition's last
stable offset and open transaction are what they were (producer snapshot + replay), so a
read_committed consumer (kafka-python) still stops before the open transaction and sees exactly
the committed records, while read_uncommitted sees everything."""

from __future__ import annotations

from pathlib import Path

from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KafkaTopicPartition
from kafka.admin import KafkaAdminClient, NewTopic

from reliability.broker import ServeProcess
from tidelog.manager import LogManager
from tidelog.storage.config import BrokerConfig
from tidelog.topic_partition import TopicPartition

TOPIC = "eos-out"
TIMEOUT_S = 30.0
OVERRIDES = {"transaction.state.log.num.partitions": "2", "offsets.topic.num.partitions": "1"}


def ends(bootstrap: str) -> tuple[int, int]:
    """(read_committed end, read_uncommitted end) of partition 0, as ListOffsets latest answers."""
    tp = KafkaTopicPartition(TOPIC, 0)
    found = []
    for isolation in ("read_committed", "read_uncommitted"):
        consumer = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level=isolation,
                                 request_timeout_ms=int(TIMEOUT_S * 1000))
        try:
            found.append(consumer.end_offsets([tp])[tp])
        finally:
            consumer.close()
    return found[0], found[1]


def committed_values(bootstrap: str) -> list[bytes]:
    consumer = KafkaConsumer(TOPIC, bootstrap_servers=bootstrap, isolation_level="read_committed",
                             auto_offset_reset="earliest", enable_auto_commit=False, consumer_timeout_ms=1500)
    try:
        return [m.value for m in consumer]
    finally:
        consumer.close()


def test_a_sigkill_with_a_transaction_open_keeps_its_lso_and_open_transaction(tmp_path: Path) -> None:
    serve = ServeProcess(tmp_path / "data", overrides=OVERRIDES)
    serve.start()
    try:
        admin = KafkaAdminClient(bootstrap_servers=serve.bootstrap)
        admin.create_topics([NewTopic(TOPIC, 1, 1)])
        admin.close()
        producer = KafkaProducer(bootstrap_servers=serve.bootstrap, transactional_id="crash-tx",
                                 max_block_ms=int(TIMEOUT_S * 1000))
        producer.init_transactions()
        producer.begin_transaction()
        for v in (b"c1", b"c2"):
            producer.send(TOPIC, v, partition=0)
        producer.commit_transaction()  # 0-1, COMMIT at 2
        producer.begin_transaction()
        for v in (b"o1", b"o2", b"o3"):
            producer.send(TOPIC, v, partition=0)
        producer.flush()  # 3-5, open
        before = ends(serve.bootstrap)
        assert before == (3, 6)
        serve.kill()
        producer.close(timeout=0)
        serve.start()
        assert ends(serve.bootstrap) == before
        assert committed_values(serve.bootstrap) == [b"c1", b"c2"]
    finally:
        if serve.running:
            assert serve.stop() == 0
    with LogManager.open(BrokerConfig.from_properties({}), [tmp_path / "data"]) as manager:
        [(_, epoch, first, _)] = manager.ongoing_transactions(TopicPartition(TOPIC, 0))
        assert first == 3 and epoch >= 0
        assert manager.offsets(TopicPartition(TOPIC, 0)).last_stable_offset == 3
