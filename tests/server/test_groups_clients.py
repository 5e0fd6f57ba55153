"""kafka-python's group consumer and admin client (nobody here wrote them) against the group
coordinator: a second consumer makes the group rebalance, committed offsets survive a broker
restart, and the admin calls list, describe, read the offsets of and delete groups.

Real clients use real time: short session timeouts, ``group.initial.rebalance.delay.ms=0``,
and waits that return as soon as the condition holds."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KafkaTp

from server_helpers import TIMEOUT_S, Broker, start_broker
from tidelog.manager import LogManager
from tidelog.server import ServerThread
from tidelog.server.groups.records import OFFSETS_TOPIC

GROUP_PROPS = {"group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "3"}


def _consumer(bootstrap: str, group: str, topic: str, **config: object) -> KafkaConsumer:
    """A group consumer subscribed to ``topic`` once it knows the topic's partitions (else its first
    assignment may be empty and it rebalances again: a window in which kafka-python 3.0 can lose
    the assignment of a join that outlived a short poll)."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                             enable_auto_commit=False, session_timeout_ms=6000, heartbeat_interval_ms=500,
                             request_timeout_ms=8000, **config)
    assert consumer.partitions_for_topic(topic)
    consumer.subscribe([topic])
    return consumer


def _produce(bootstrap: str, topic: str, count: int, partitions: int, start: int = 0) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=0)
    for i in range(start, start + count):
        producer.send(topic, b"v%d" % i, partition=i % partitions)
    producer.flush()
    producer.close()


def _poll_until(consumers: list[KafkaConsumer], done: Callable[[], bool], timeout_s: float = 3 * TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        for c in consumers:
            c.poll(200)


def _read(consumer: KafkaConsumer, count: int) -> list[bytes]:
    values: list[bytes] = []
    deadline = time.monotonic() + 3 * TIMEOUT_S
    while len(values) < count and time.monotonic() < deadline:
        for records in consumer.poll(1000).values():
            values += [r.value for r in records]
    return values


@pytest.fixture
def group_broker(make_broker: Callable[..., Broker]) -> Broker:
    return make_broker(**GROUP_PROPS)


def test_second_consumer_joining_makes_the_group_rebalance_two_partitions_each(group_broker: Broker) -> None:
    group_broker.manager.create_topic("t4", 4)
    _produce(group_broker.bootstrap, "t4", 40, 4)
    first = _consumer(group_broker.bootstrap, "g", "t4")
    try:
        assert len(_read(first, 40)) == 40
        assert len(first.assignment()) == 4
        second = _consumer(group_broker.bootstrap, "g", "t4")
        try:
            _poll_until([first, second], lambda: len(first.assignment()) == len(second.assignment()) == 2)
            assert first.assignment() | second.assignment() == {KafkaTp("t4", p) for p in range(4)}
        finally:
            second.close()
        _poll_until([first], lambda: len(first.assignment()) == 4)  # second left: first takes everything back
    finally:
        first.close()


def test_committed_offsets_survive_a_broker_restart(tmp_path: Path,
                                                    restartable: list[tuple[LogManager, ServerThread]]) -> None:
    manager, thread = start_broker(tmp_path / "data", **GROUP_PROPS)
    restartable.append((manager, thread))
    bootstrap = f"127.0.0.1:{thread.server.bound[0].port}"
    manager.create_topic("r", 2)
    _produce(bootstrap, "r", 10, 2)
    consumer = _consumer(bootstrap, "keep", "r")
    assert sorted(_read(consumer, 10)) == sorted(b"v%d" % i for i in range(10))
    consumer.commit()
    consumer.close()
    thread.stop()
    manager.shutdown()
    restartable.clear()

    manager, thread = start_broker(tmp_path / "data", **GROUP_PROPS)
    restartable.append((manager, thread))
    bootstrap = f"127.0.0.1:{thread.server.bound[0].port}"
    _produce(bootstrap, "r", 4, 2, start=10)
    resumed = _consumer(bootstrap, "keep", "r")
    try:
        assert sorted(_read(resumed, 4)) == [b"v10", b"v11", b"v12", b"v13"]
        assert resumed.poll(300) == {}  # nothing before the committed offsets came again
    finally:
        resumed.close()
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        offsets = admin.list_group_offsets("keep")["keep"]
        assert {tp.partition: o.offset for tp, o in offsets.items()} == {0: 5, 1: 5}
    finally:
        admin.close()


def test_admin_lists_describes_reads_offsets_of_and_deletes_groups(group_broker: Broker) -> None:
    group_broker.manager.create_topic("a", 2)
    _produce(group_broker.bootstrap, "a", 6, 2)
    consumer = _consumer(group_broker.bootstrap, "watched", "a", client_id="watcher")
    admin = KafkaAdminClient(bootstrap_servers=group_broker.bootstrap)
    try:
        assert len(_read(consumer, 6)) == 6
        consumer.commit({KafkaTp("a", 0): _offset(4, "note"), KafkaTp("a", 1): _offset(2, "")})
        listed = admin.list_groups()
        assert [(g["group_id"], g["protocol_type"], g["group_state"]) for g in listed] == [
            ("watched", "consumer", "Stable")]
        described = admin.describe_groups(["watched", "missing"])
        watched = described["watched"]
        assert (watched["group_state"], watched["protocol_data"]) == ("Stable", "range")
        [member] = watched["members"]
        assert (member["client_id"], member["client_host"]) == ("watcher", "/127.0.0.1")
        assert member["member_assignment"]["assigned_partitions"] == [{"topic": "a", "partitions": [0, 1]}]
        offsets = admin.list_group_offsets("watched")["watched"]
        assert {tp.partition: (o.offset, o.metadata) for tp, o in offsets.items()} == {0: (4, "note"), 1: (2, "")}
        with pytest.raises(Exception, match="NonEmptyGroup|NON_EMPTY_GROUP"):
            _deleted(admin, "watched")
        consumer.close()
        assert _deleted(admin, "watched") == "OK"
        assert admin.list_groups() == []
        assert group_broker.manager.has_topic(OFFSETS_TOPIC)
    finally:
        consumer.close()
        admin.close()


def _offset(offset: int, metadata: str) -> object:
    from kafka.structs import OffsetAndMetadata

    return OffsetAndMetadata(offset, metadata, -1)


def _deleted(admin: KafkaAdminClient, group: str) -> object:
    result = admin.delete_groups([group])[group]
    if isinstance(result, BaseException):
        raise result
    if result != "OK":
        raise AssertionError(str(result))
    return result
