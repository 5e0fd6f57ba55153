"""What a client was answered holds after a SIGKILL that follows the answer at once, before any
periodic task (checkpoints every 60 s by default) could have written it down: DeleteRecords' new
log start offset, a deleted topic, an altered topic config, acknowledged records."""

from __future__ import annotations

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient, NewTopic

from reliability.broker import ServeProcess

TIMEOUT_S = 10


def produce(broker: ServeProcess, topic: str, count: int) -> list[int]:
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all", enable_idempotence=False)
    offsets = [producer.send(topic, b"r%d" % i, partition=0).get(TIMEOUT_S).offset for i in range(count)]
    producer.close()
    return offsets


def restart_after_sigkill(broker: ServeProcess) -> KafkaAdminClient:
    broker.kill()
    broker.start()
    return KafkaAdminClient(bootstrap_servers=broker.bootstrap)


def test_delete_records_answered_holds_after_an_immediate_sigkill(broker: ServeProcess) -> None:
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    admin.create_topics([NewTopic("t", 1, 1)])
    assert produce(broker, "t", 10) == list(range(10))
    admin.delete_records({TopicPartition("t", 0): 6})
    admin.close()
    restart_after_sigkill(broker).close()
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=None, auto_offset_reset="earliest",
                             consumer_timeout_ms=TIMEOUT_S * 1000)
    tp = TopicPartition("t", 0)
    assert consumer.beginning_offsets([tp]) == {tp: 6}
    consumer.assign([tp])
    assert [next(consumer).offset for _ in range(4)] == [6, 7, 8, 9]
    consumer.close()


def test_topic_deletion_answered_holds_after_an_immediate_sigkill(broker: ServeProcess) -> None:
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    admin.create_topics([NewTopic("gone", 2, 1), NewTopic("kept", 1, 1)])
    produce(broker, "gone", 3)
    admin.delete_topics(["gone"])
    admin.close()
    admin = restart_after_sigkill(broker)
    assert set(admin.list_topics()) == {"kept"}
    admin.close()
    assert not [p.name for p in broker.data_dir.iterdir() if p.name in ("gone-0", "gone-1")]


def test_altered_topic_config_answered_holds_after_an_immediate_sigkill(broker: ServeProcess) -> None:
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    admin.create_topics([NewTopic("t", 1, 1)])
    admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, "t", configs={"retention.ms": "123456"})])
    admin.close()
    admin = restart_after_sigkill(broker)
    described = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "t", configs=None)])
    admin.close()
    assert "123456" in str(described)
