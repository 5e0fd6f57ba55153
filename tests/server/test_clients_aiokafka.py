"""aiokafka (an asyncio client nobody here wrote) against the server: produce with every acks
setting and every codec aiokafka has, consume by assignment and in a group (a second member
makes the group rebalance; committed offsets survive a broker restart), and the admin client's
topic, partition and config calls. What the client reads equals what tidelog reads from the
log itself.

Each test runs its client coroutine with :func:`asyncio.run` on the test's thread; the broker
runs on its own loop thread. Real clients use real time: short session timeouts and
``group.initial.rebalance.delay.ms=0``; waits return as soon as their condition holds."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRecord, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewPartitions, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import InvalidPartitionsError, TopicAlreadyExistsError
from test_clients import log_records

from server_helpers import TIMEOUT_S, Broker, start_broker, wait_until
from tidelog.manager import LogManager
from tidelog.server import ServerThread

CODECS = [None, "gzip", "snappy", "lz4", "zstd"]
GROUP_PROPS = {"group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "3"}
T = TypeVar("T")


def run(coroutine: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(asyncio.wait_for(coroutine, 6 * TIMEOUT_S))


async def _produce(bootstrap: str, topic: str, values: list[bytes], partitions: int, **config: Any) -> list[int]:
    """Send ``values`` round-robin over ``partitions``; the offsets the broker gave them (-1 with acks=0)."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, **config)
    await producer.start()
    try:
        sent = [await producer.send(topic, value, key=b"key-%d" % i, partition=i % partitions)
                for i, value in enumerate(values)]
        return [-1 if (metadata := await future) is None else metadata.offset for future in sent]
    finally:
        await producer.stop()


def _consumer(bootstrap: str, group: str | None, **config: Any) -> AIOKafkaConsumer:
    return AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                            enable_auto_commit=False, session_timeout_ms=6000, heartbeat_interval_ms=500,
                            **config)


async def _consume(consumer: AIOKafkaConsumer, count: int) -> list[ConsumerRecord[bytes, bytes]]:
    got: list[ConsumerRecord[bytes, bytes]] = []
    deadline = time.monotonic() + 3 * TIMEOUT_S
    while len(got) < count and time.monotonic() < deadline:
        for records in (await consumer.getmany(timeout_ms=500)).values():
            got += records
    assert len(got) == count, f"{len(got)} of {count} records within {3 * TIMEOUT_S}s"
    return got


def _as_log(records: list[ConsumerRecord[bytes, bytes]], partition: int) -> list[tuple[int, int, Any, Any]]:
    return [(r.offset, r.timestamp, r.key, r.value) for r in records if r.partition == partition]


async def _read_assigned(bootstrap: str, topic: str, partitions: int, count: int) -> list[ConsumerRecord[bytes, bytes]]:
    consumer = _consumer(bootstrap, None)
    await consumer.start()
    try:
        consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
        return await _consume(consumer, count)
    finally:
        await consumer.stop()


@pytest.mark.parametrize("acks", [0, 1, "all"])
def test_producer_acks_records_are_read_back_as_tidelog_reads_them(broker: Broker, acks: object) -> None:
    broker.manager.create_topic("t", 2)
    values = [b"value-%d" % i for i in range(40)]
    offsets = run(_produce(broker.bootstrap, "t", values, 2, acks=acks))
    if acks != 0:
        assert sorted(offsets) == sorted([*range(20), *range(20)])
    wait_until(lambda: sum(lg.high_watermark for _, lg in broker.manager.logs("t")) == 40)
    got = run(_read_assigned(broker.bootstrap, "t", 2, 40))
    for partition in (0, 1):
        assert _as_log(got, partition) == log_records(broker.manager, "t", partition)
        assert [r.value for r in got if r.partition == partition] == values[partition::2]


@pytest.mark.parametrize("codec", CODECS)
def test_every_codec_is_stored_and_read_back(broker: Broker, codec: str | None) -> None:
    broker.manager.create_topic("c", 1)
    values = [b"%s-%d " % (str(codec).encode(), i) * 8 for i in range(100)]
    run(_produce(broker.bootstrap, "c", values, 1, compression_type=codec, linger_ms=5))
    got = run(_read_assigned(broker.bootstrap, "c", 1, 100))
    assert _as_log(got, 0) == log_records(broker.manager, "c", 0)
    assert [r.value for r in got] == values


async def _poll_until(consumers: list[AIOKafkaConsumer], done: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 3 * TIMEOUT_S
    while not done():
        assert time.monotonic() < deadline, "condition not reached in time"
        for consumer in consumers:
            await consumer.getmany(timeout_ms=100)


def test_second_consumer_joining_makes_the_group_rebalance(make_broker: Callable[..., Broker]) -> None:
    broker = make_broker(**GROUP_PROPS)
    broker.manager.create_topic("t4", 4)

    async def scenario() -> None:
        await _produce(broker.bootstrap, "t4", [b"v%d" % i for i in range(40)], 4)
        first = _consumer(broker.bootstrap, "g")
        second = _consumer(broker.bootstrap, "g")
        first.subscribe(["t4"])
        second.subscribe(["t4"])
        await first.start()
        try:
            assert len(await _consume(first, 40)) == 40
            assert len(first.assignment()) == 4
            await second.start()
            await _poll_until([first, second], lambda: len(first.assignment()) == len(second.assignment()) == 2)
            assert first.assignment() | second.assignment() == {TopicPartition("t4", p) for p in range(4)}
            await second.stop()
            await _poll_until([first], lambda: len(first.assignment()) == 4)  # first takes everything back
        finally:
            await second.stop()
            await first.stop()

    run(scenario())


async def _consume_and_commit(bootstrap: str, topic: str, group: str, count: int) -> list[bytes]:
    consumer = _consumer(bootstrap, group)
    consumer.subscribe([topic])
    await consumer.start()
    try:
        values = [r.value for r in await _consume(consumer, count)]
        await consumer.commit()
        return values
    finally:
        await consumer.stop()


async def _committed(bootstrap: str, topic: str, group: str, partitions: int) -> list[int | None]:
    consumer = _consumer(bootstrap, group)
    await consumer.start()
    try:
        return [await consumer.committed(TopicPartition(topic, p)) for p in range(partitions)]
    finally:
        await consumer.stop()


def test_committed_offsets_survive_a_broker_restart(tmp_path: Path,
                                                    restartable: list[tuple[LogManager, ServerThread]]) -> None:
    manager, thread = start_broker(tmp_path / "data", **GROUP_PROPS)
    restartable.append((manager, thread))
    bootstrap = f"127.0.0.1:{thread.server.bound[0].port}"
    manager.create_topic("r", 2)
    run(_produce(bootstrap, "r", [b"v%d" % i for i in range(10)], 2))
    assert len(run(_consume_and_commit(bootstrap, "r", "keep", 10))) == 10
    thread.stop()
    manager.shutdown()
    restartable.clear()

    manager, thread = start_broker(tmp_path / "data", **GROUP_PROPS)
    restartable.append((manager, thread))
    bootstrap = f"127.0.0.1:{thread.server.bound[0].port}"
    assert run(_committed(bootstrap, "r", "keep", 2)) == [5, 5]
    run(_produce(bootstrap, "r", [b"v%d" % i for i in range(10, 14)], 2))
    assert sorted(run(_consume_and_commit(bootstrap, "r", "keep", 4))) == [b"v10", b"v11", b"v12", b"v13"]
    assert run(_committed(bootstrap, "r", "keep", 2)) == [7, 7]


async def _admin(bootstrap: str, work: Callable[[AIOKafkaAdminClient], Coroutine[Any, Any, T]]) -> T:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        return await work(admin)
    finally:
        await admin.close()


def test_admin_creates_grows_and_deletes_topics(broker: Broker) -> None:
    async def create(admin: AIOKafkaAdminClient) -> None:
        await admin.create_topics([NewTopic("orders", 2, 1, topic_configs={"retention.ms": "60000"})])

    run(_admin(broker.bootstrap, create))
    assert broker.manager.partitions("orders") == [0, 1]
    assert broker.manager.topic_overrides("orders") == {"retention.ms": "60000"}

    async def refused(admin: AIOKafkaAdminClient) -> None:
        existing = await admin.create_topics([NewTopic("orders", 1, 1)])
        assert [(e[0], e[1]) for e in existing.topic_errors] == [("orders", TopicAlreadyExistsError.errno)]
        grown = await admin.create_partitions({"orders": NewPartitions(5)})
        assert [(e[0], e[1]) for e in grown.topic_errors] == [("orders", 0)]
        assert broker.manager.partitions("orders") == [0, 1, 2, 3, 4]
        with pytest.raises(InvalidPartitionsError, match="higher than the requested 3"):
            await admin.create_partitions({"orders": NewPartitions(3)})
        assert "orders" in await admin.list_topics()
        await admin.delete_topics(["orders"])

    run(_admin(broker.bootstrap, refused))
    assert not broker.manager.has_topic("orders")


def test_admin_describes_and_alters_topic_configs(broker: Broker) -> None:
    broker.manager.create_topic("cfg", 1, {"retention.ms": "60000"})

    async def describe(admin: AIOKafkaAdminClient) -> dict[str, tuple[str, bool]]:
        [response] = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "cfg")])
        [resource] = response.resources
        assert resource[0] == 0, resource  # error code
        return {entry[0]: (entry[1], entry[3]) for entry in resource[4]}  # name: (value, read_only/default)

    before = run(_admin(broker.bootstrap, describe))
    assert before["retention.ms"][0] == "60000"
    assert before["cleanup.policy"][0] == "delete"

    async def alter(admin: AIOKafkaAdminClient) -> None:
        [response] = await admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, "cfg",
                                                               {"cleanup.policy": "compact"})])
        assert [r[0] for r in response.resources] == [0]

    run(_admin(broker.bootstrap, alter))
    assert broker.manager.topic_overrides("cfg") == {"cleanup.policy": "compact"}  # AlterConfigs replaces the set
    after = run(_admin(broker.bootstrap, describe))
    assert (after["cleanup.policy"][0], after["retention.ms"][0]) == ("compact", "604800000")

