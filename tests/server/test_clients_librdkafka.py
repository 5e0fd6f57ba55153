"""confluent-kafka (librdkafka, a C client nobody here wrote) against the server: produce with
every acks setting and every codec librdkafka has, consume by assignment and in a group (a
second member makes the group rebalance; committed offsets survive a broker restart), and the
admin client's topic, partition and config calls. What the client reads equals what tidelog
reads from the log itself.

librdkafka's ``enable.idempotence`` is false by default, so these producers run without
producer ids (test_idempotent_producers covers librdkafka with idempotence). Real clients use real time: short
session timeouts and ``group.initial.rebalance.delay.ms=0``; waits return as soon as their
condition holds."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
)
from test_clients import log_records

from server_helpers import TIMEOUT_S, Broker, start_broker, wait_until
from tidelog.manager import LogManager
from tidelog.server import ServerThread

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
GROUP_PROPS = {"group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "3"}


def _producer(bootstrap: str, **config: object) -> Producer:
    return Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, **config})


def _produce(bootstrap: str, topic: str, values: list[bytes], partitions: int, **config: object) -> list[Message]:
    """Send ``values`` round-robin over ``partitions``; the delivery reports, every one checked."""
    reports: list[Message] = []

    def delivered(error: KafkaError | None, message: Message) -> None:
        assert error is None, error
        reports.append(message)

    producer = _producer(bootstrap, **config)
    for i, value in enumerate(values):
        producer.produce(topic, key=b"key-%d" % i, value=value, partition=i % partitions, on_delivery=delivered)
    assert producer.flush(TIMEOUT_S) == 0, "messages still in the producer queue"
    return reports


def _consumer(bootstrap: str, group: str, **config: object) -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                     "enable.auto.commit": False, "session.timeout.ms": 6000, "heartbeat.interval.ms": 500,
                     **config})


def _consume(consumer: Consumer, count: int) -> list[Message]:
    got: list[Message] = []
    deadline = time.monotonic() + 3 * TIMEOUT_S
    while len(got) < count and time.monotonic() < deadline:
        for message in consumer.consume(count - len(got), 0.5):
            assert message.error() is None, message.error()
            got.append(message)
    assert len(got) == count, f"{len(got)} of {count} records within {3 * TIMEOUT_S}s"
    return got


def _as_log(messages: list[Message], partition: int) -> list[tuple[int, int, bytes | None, bytes | None]]:
    return [(m.offset(), m.timestamp()[1], m.key(), m.value()) for m in messages if m.partition() == partition]


@pytest.mark.parametrize("acks", ["0", "1", "all"])
def test_producer_acks_records_are_read_back_as_tidelog_reads_them(broker: Broker, acks: str) -> None:
    broker.manager.create_topic("t", 2)
    values = [b"value-%d" % i for i in range(40)]
    reports = _produce(broker.bootstrap, "t", values, 2, acks=acks)
    if acks != "0":  # acks=0 reports carry no offset
        assert sorted(m.offset() for m in reports) == sorted([*range(20), *range(20)])
    wait_until(lambda: sum(lg.high_watermark for _, lg in broker.manager.logs("t")) == 40)
    consumer = _consumer(broker.bootstrap, "unused")
    consumer.assign([TopicPartition("t", 0, 0), TopicPartition("t", 1, 0)])
    got = _consume(consumer, 40)
    consumer.close()
    for partition in (0, 1):
        assert _as_log(got, partition) == log_records(broker.manager, "t", partition)
        assert [m.value() for m in got if m.partition() == partition] == values[partition::2]


@pytest.mark.parametrize("codec", CODECS)
def test_every_codec_is_stored_and_read_back(broker: Broker, codec: str) -> None:
    broker.manager.create_topic("c", 1)
    values = [b"%s-%d " % (codec.encode(), i) * 8 for i in range(100)]
    _produce(broker.bootstrap, "c", values, 1, **{"compression.type": codec, "linger.ms": 5})
    consumer = _consumer(broker.bootstrap, "unused")
    consumer.assign([TopicPartition("c", 0, 0)])
    got = _consume(consumer, 100)
    consumer.close()
    assert _as_log(got, 0) == log_records(broker.manager, "c", 0)
    assert [m.value() for m in got] == values


def _poll_until(consumers: list[Consumer], done: Callable[[], bool], timeout_s: float = 3 * TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, "condition not reached in time"
        for consumer in consumers:
            message = consumer.poll(0.1)
            assert message is None or message.error() is None, message.error()


def _partitions(consumer: Consumer) -> set[tuple[str, int]]:
    return {(tp.topic, tp.partition) for tp in consumer.assignment()}


def test_second_consumer_joining_makes_the_group_rebalance(make_broker: Callable[..., Broker]) -> None:
    broker = make_broker(**GROUP_PROPS)
    broker.manager.create_topic("t4", 4)
    _produce(broker.bootstrap, "t4", [b"v%d" % i for i in range(40)], 4)
    first = _consumer(broker.bootstrap, "g")
    first.subscribe(["t4"])
    second: Consumer | None = None
    try:
        assert sorted(m.value() for m in _consume(first, 40)) == sorted(b"v%d" % i for i in range(40))
        assert len(_partitions(first)) == 4
        second = _consumer(broker.bootstrap, "g")
        second.subscribe(["t4"])
        _poll_until([first, second], lambda: len(_partitions(first)) == len(_partitions(second)) == 2)
        assert _partitions(first) | _partitions(second) == {("t4", p) for p in range(4)}
        second.close()
        _poll_until([first], lambda: len(_partitions(first)) == 4)  # second left: first takes everything back
    finally:
        first.close()
        if second is not None:
            second.close()


def test_committed_offsets_survive_a_broker_restart(tmp_path: Path,
                                                    restartable: list[tuple[LogManager, ServerThread]]) -> None:
    manager, thread = start_broker(tmp_path / "data", **GROUP_PROPS)
    restartable.append((manager, thread))
    bootstrap = f"127.0.0.1:{thread.server.bound[0].port}"
    manager.create_topic("r", 2)
    _produce(bootstrap, "r", [b"v%d" % i for i in range(10)], 2)
    consumer = _consumer(bootstrap, "keep")
    consumer.subscribe(["r"])
    assert len(_consume(consumer, 10)) == 10
    consumer.commit(asynchronous=False)
    consumer.close()
    thread.stop()
    manager.shutdown()
    restartable.clear()

    manager, thread = start_broker(tmp_path / "data", **GROUP_PROPS)
    restartable.append((manager, thread))
    bootstrap = f"127.0.0.1:{thread.server.bound[0].port}"
    _produce(bootstrap, "r", [b"v%d" % i for i in range(10, 14)], 2)
    resumed = _consumer(bootstrap, "keep")
    try:
        committed = resumed.committed([TopicPartition("r", 0), TopicPartition("r", 1)], timeout=TIMEOUT_S)
        assert [(tp.partition, tp.offset) for tp in committed] == [(0, 5), (1, 5)]
        resumed.subscribe(["r"])
        assert sorted(m.value() for m in _consume(resumed, 4)) == [b"v10", b"v11", b"v12", b"v13"]
        assert resumed.consume(10, 0.3) == []  # nothing before the committed offsets came again
    finally:
        resumed.close()


@pytest.fixture
def admin(broker: Broker) -> Iterator[AdminClient]:
    """Dropped (librdkafka destroys its handle) before the broker stops."""
    yield AdminClient({"bootstrap.servers": broker.bootstrap})


def _done(futures: dict[object, object]) -> dict[object, object]:
    return {key: future.result(TIMEOUT_S) for key, future in futures.items()}  # type: ignore[attr-defined]


def test_admin_creates_grows_and_deletes_topics(broker: Broker, admin: AdminClient) -> None:
    _done(admin.create_topics([NewTopic("orders", 2, 1, config={"retention.ms": "60000"})]))
    assert broker.manager.partitions("orders") == [0, 1]
    assert broker.manager.topic_overrides("orders") == {"retention.ms": "60000"}
    with pytest.raises(KafkaException) as existing:
        _done(admin.create_topics([NewTopic("orders", 1, 1)]))
    assert existing.value.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS
    _done(admin.create_partitions([NewPartitions("orders", 5)]))
    assert broker.manager.partitions("orders") == [0, 1, 2, 3, 4]
    with pytest.raises(KafkaException) as shrink:
        _done(admin.create_partitions([NewPartitions("orders", 3)]))
    assert shrink.value.args[0].code() == KafkaError.INVALID_PARTITIONS
    assert "orders" in admin.list_topics(timeout=TIMEOUT_S).topics
    _done(admin.delete_topics(["orders"]))
    assert not broker.manager.has_topic("orders")


def test_admin_describes_and_alters_topic_configs(broker: Broker, admin: AdminClient) -> None:
    broker.manager.create_topic("cfg", 1, {"retention.ms": "60000"})
    resource = ConfigResource(ConfigResource.Type.TOPIC, "cfg")
    [described] = _done(admin.describe_configs([resource])).values()
    assert described["retention.ms"].value == "60000"
    assert described["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert described["cleanup.policy"].value == "delete"
    assert described["cleanup.policy"].is_default
    altered = ConfigResource(ConfigResource.Type.TOPIC, "cfg", incremental_configs=[
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE)])
    _done(admin.incremental_alter_configs([altered]))
    assert broker.manager.topic_overrides("cfg") == {"cleanup.policy": "compact"}
    [after] = _done(admin.describe_configs([resource])).values()
    assert (after["cleanup.policy"].value, after["retention.ms"].is_default) == ("compact", True)
