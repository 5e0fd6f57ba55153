"""Real kafka-python clients (nobody here wrote them) against the server: produce with every acks
setting and codec, consume from the beginning and by long poll, admin create/delete, ListOffsets;
what the clients read equals what tidelog reads from the log itself."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic
from kafka.errors import TopicAlreadyExistsError

from server_helpers import TIMEOUT_S, Broker, wait_until
from tidelog.manager import LogManager
from tidelog.records import iter_batches
from tidelog.storage.fetch_info import FetchIsolation
from tidelog.topic_partition import TopicPartition as TidelogTp

CODECS = [None, "gzip", "snappy", "lz4", "zstd"]


def producer(broker: Broker, **config: object) -> KafkaProducer:
    return KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=0, **config)


def consumer(broker: Broker, **config: object) -> KafkaConsumer:
    return KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=None, enable_auto_commit=False,
                         auto_offset_reset="earliest", **config)


def log_records(manager: LogManager, topic: str, partition: int) -> list[tuple[int, int, bytes | None, bytes | None]]:
    """``(offset, timestamp, key, value)`` of every record, read by tidelog from the log."""
    log = manager.log(TidelogTp(topic, partition))
    found = []
    offset = log.log_start_offset
    while offset < log.high_watermark:
        data = log.read(offset, 1 << 20, FetchIsolation.HIGH_WATERMARK).records
        for _, batch in iter_batches(data):
            found += [(r.offset, r.timestamp, r.key, r.value) for r in batch.records() if r.offset >= offset]
            offset = batch.next_offset
    return found


def consume_all(c: KafkaConsumer, count: int) -> list[object]:
    got: list[object] = []
    while len(got) < count:
        batch = c.poll(timeout_ms=int(TIMEOUT_S * 1000))
        assert batch, f"no records within {TIMEOUT_S}s after {len(got)}"
        for records in batch.values():
            got += records
    return got


@pytest.fixture
def admin(broker: Broker) -> Iterator[KafkaAdminClient]:
    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    yield client
    client.close()


@pytest.mark.parametrize("acks", [0, 1, "all"])
@pytest.mark.parametrize("compression", CODECS)
def test_producer_records_are_read_back_as_tidelog_reads_them(broker: Broker, acks: object, compression: str | None) -> None:
    broker.manager.create_topic("t", 2)
    p = producer(broker, acks=acks, compression_type=compression)
    sent = [p.send("t", key=b"key-%d" % i, value=b"value-%d" % i, partition=i % 2) for i in range(50)]
    p.flush(timeout=TIMEOUT_S)
    if acks != 0:
        assert sorted(f.get(TIMEOUT_S).offset for f in sent) == sorted([*range(25), *range(25)])
    p.close()
    wait_until(lambda: sum(lg.high_watermark for _, lg in broker.manager.logs("t")) == 50)
    c = consumer(broker)
    c.assign([TopicPartition("t", 0), TopicPartition("t", 1)])
    got = consume_all(c, 50)
    c.close()
    for partition in (0, 1):
        mine = [(r.offset, r.timestamp, r.key, r.value) for r in got if r.partition == partition]
        assert mine == log_records(broker.manager, "t", partition)
        assert [v for *_, v in mine] == [b"value-%d" % i for i in range(partition, 50, 2)]


def test_consumer_long_poll_returns_as_soon_as_data_arrives(broker: Broker) -> None:
    broker.manager.create_topic("t", 1)
    c = consumer(broker, fetch_max_wait_ms=20000)
    c.assign([TopicPartition("t", 0)])
    polled: list[object] = []
    poller = threading.Thread(target=lambda: polled.extend(consume_all(c, 1)))
    poller.start()
    wait_until(lambda: broker.server.delayed_fetches >= 1)
    p = producer(broker, acks=1)
    p.send("t", b"late").get(TIMEOUT_S)
    p.close()
    poller.join(TIMEOUT_S)
    assert not poller.is_alive(), "the fetch waited for fetch_max_wait_ms instead of returning with the data"
    c.close()
    assert [r.value for r in polled] == [b"late"]


def test_admin_creates_and_deletes_topics(broker: Broker, admin: KafkaAdminClient) -> None:
    admin.create_topics([NewTopic("orders", 3, 1, topic_configs={"retention.ms": "60000"})])
    assert broker.manager.partitions("orders") == [0, 1, 2]
    assert broker.manager.topic_overrides("orders") == {"retention.ms": "60000"}
    with pytest.raises(TopicAlreadyExistsError):
        admin.create_topics([NewTopic("orders", 1, 1)], raise_errors=True)
    assert "orders" in admin.list_topics()
    admin.delete_topics(["orders"])
    assert not broker.manager.has_topic("orders")


def test_list_offsets_earliest_latest_and_by_time(broker: Broker) -> None:
    broker.manager.create_topic("t", 1)
    p = producer(broker, acks=1)
    for i, ts in enumerate([1000, 2000, 3000]):
        p.send("t", value=b"%d" % i, timestamp_ms=ts).get(TIMEOUT_S)
    p.close()
    broker.manager.delete_records(TidelogTp("t", 0), 1)
    tp = TopicPartition("t", 0)
    c = consumer(broker)
    assert c.beginning_offsets([tp]) == {tp: 1}
    assert c.end_offsets([tp]) == {tp: 3}
    found = c.offsets_for_times({tp: 1500})[tp]
    assert (found.offset, found.timestamp) == (1, 2000)
    assert c.offsets_for_times({tp: 9999})[tp] is None
    c.close()


def test_metadata_auto_creates_topics_when_enabled(make_broker: object) -> None:
    broker = make_broker(**{"num.partitions": "3"})  # type: ignore[operator]
    p = producer(broker, acks=1)
    assert p.send("auto", b"x").get(TIMEOUT_S).offset == 0
    p.close()
    assert broker.manager.partitions("auto") == [0, 1, 2]
