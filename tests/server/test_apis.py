"""Fetch, Metadata, ListOffsets, CreateTopics and DeleteTopics answers, checked field by field
over a raw connection."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from kafka.protocol.admin import CreateTopicsResponse, DeleteTopicsResponse
from kafka.protocol.consumer import FetchRequest, FetchResponse, ListOffsetsResponse
from kafka.protocol.metadata import MetadataRequest, MetadataResponse
from kafka.protocol.producer import ProduceResponse

import server_samples as samples
from server_helpers import TIMEOUT_S, Broker, RawClient, wait_until
from tidelog.manager import LogManager
from tidelog.records import iter_batches
from tidelog.server import ServerConfig, ServerThread
from tidelog.storage.config import BrokerConfig
from tidelog.storage.metadata import topic_id_to_uuid
from tidelog.testing import FakeClock, FakeScheduler
from tidelog.topic_partition import TopicPartition


def produce(client: RawClient, topic: str, *values: bytes, partition: int = 0) -> int:
    response = client.call(samples.produce(topic, partition, samples.record_batch(*values)), ProduceResponse, 9)
    part = response.responses[0].partition_responses[0]
    assert part.error_code == 0
    return int(part.base_offset)


def offsets_in(records: bytes) -> list[int]:
    return [r.offset for _, b in iter_batches(records) for r in b.records()]


# --- Fetch ----------------------------------------------------------------------------------------

def test_fetch_returns_the_log_bytes_up_to_the_high_watermark(broker: Broker) -> None:
    broker.manager.create_topic("t", 1)
    client = broker.connect()
    produce(client, "t", b"a", b"b")
    log = broker.manager.log(TopicPartition("t", 0))
    log.append_as_leader(samples.record_batch(b"past the high watermark"))  # the high watermark stays at 2
    part = client.call(samples.fetch("t", 0), FetchResponse, 12).responses[0].partitions[0]
    assert (part.error_code, part.high_watermark, part.last_stable_offset, part.log_start_offset) == (0, 2, 2, 0)
    assert offsets_in(part.records) == [0, 1]
    assert part.records == log.read(0, 1 << 20).records


def test_fetch_from_the_middle_of_a_batch_returns_the_whole_batch(broker: Broker) -> None:
    broker.manager.create_topic("t", 1)
    client = broker.connect()
    produce(client, "t", b"a", b"b", b"c")
    part = client.call(samples.fetch("t", 2), FetchResponse, 12).responses[0].partitions[0]
    assert offsets_in(part.records) == [0, 1, 2]


def test_fetch_out_of_range_and_unknown_partition(broker: Broker) -> None:
    broker.manager.create_topic("t", 1)
    client = broker.connect()
    produce(client, "t", b"a")
    part = client.call(samples.fetch("t", 5), FetchResponse, 12).responses[0].partitions[0]
    assert (part.error_code, part.high_watermark, part.log_start_offset, part.records or b"") == (1, -1, -1, b"")
    part = client.call(samples.fetch("t", 0, partition=3), FetchResponse, 12).responses[0].partitions[0]
    assert part.error_code == 3


def test_fetch_reports_the_log_start_offset_and_refuses_below_it(broker: Broker) -> None:
    broker.manager.create_topic("t", 1)
    client = broker.connect()
    produce(client, "t", b"a")
    produce(client, "t", b"b")
    broker.manager.delete_records(TopicPartition("t", 0), 1)
    assert client.call(samples.fetch("t", 0), FetchResponse, 12).responses[0].partitions[0].error_code == 1
    part = client.call(samples.fetch("t", 1), FetchResponse, 12).responses[0].partitions[0]
    assert (part.error_code, part.log_start_offset, offsets_in(part.records)) == (0, 1, [1])


def test_incremental_fetch_sessions_are_refused_and_full_fetches_are_sessionless(broker: Broker) -> None:
    broker.manager.create_topic("t", 1)
    client = broker.connect()
    full = client.call(samples.fetch("t", 0, session_epoch=0), FetchResponse, 12)
    assert (full.error_code, full.session_id) == (0, 0)
    incremental = client.call(samples.fetch("t", 0, session_id=5, session_epoch=1), FetchResponse, 12)
    assert (incremental.error_code, incremental.responses) == (70, [])


def _two_partition_fetch(max_bytes: int, partition_max_bytes: int) -> object:
    F = FetchRequest.FetchTopic
    parts = [F.FetchPartition(partition=p, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1,
                              log_start_offset=-1, partition_max_bytes=partition_max_bytes) for p in (0, 1)]
    return FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=max_bytes, isolation_level=0,
                        session_id=0, session_epoch=-1, topics=[F(topic="t", partitions=parts)],
                        forgotten_topics_data=[], rack_id="")


def test_fetch_limits_bytes_but_always_returns_one_batch_first(broker: Broker) -> None:
    broker.manager.create_topic("t", 2)
    client = broker.connect()
    for partition in (0, 1):
        for _ in range(3):
            produce(client, "t", b"x" * 200, partition=partition)
    batch = len(samples.record_batch(b"x" * 200))
    tiny = client.call(_two_partition_fetch(max_bytes=10, partition_max_bytes=10), FetchResponse, 12)
    first, second = tiny.responses[0].partitions
    assert (offsets_in(first.records), second.records or b"") == ([0], b"")
    limited = client.call(_two_partition_fetch(max_bytes=1 << 20, partition_max_bytes=2 * batch), FetchResponse, 12)
    assert [offsets_in(p.records) for p in limited.responses[0].partitions] == [[0, 1], [0, 1]]
    total = client.call(_two_partition_fetch(max_bytes=4 * batch, partition_max_bytes=1 << 20), FetchResponse, 12)
    assert [offsets_in(p.records) for p in total.responses[0].partitions] == [[0, 1, 2], [0]]


def test_long_poll_waits_for_min_bytes_then_answers_at_once(broker: Broker) -> None:
    broker.manager.create_topic("t", 1)
    fetcher, producer = broker.connect(), broker.connect()
    fetcher.send(samples.fetch("t", 0, max_wait_ms=20000, min_bytes=1), 12)
    wait_until(lambda: broker.server.delayed_fetches == 1)
    produce(producer, "t", b"wake up")
    part = fetcher.receive(FetchResponse, 12).responses[0].partitions[0]
    assert offsets_in(part.records) == [0]
    assert broker.server.delayed_fetches == 0


def test_long_poll_answers_empty_at_max_wait(broker: Broker) -> None:
    broker.manager.create_topic("t", 1)
    part = broker.connect().call(samples.fetch("t", 0, max_wait_ms=30, min_bytes=1), FetchResponse, 12)
    assert (part.error_code, part.responses[0].partitions[0].records or b"") == (0, b"")


def test_pipelined_requests_are_answered_in_order(broker: Broker) -> None:
    broker.manager.create_topic("t", 1)
    client = broker.connect()
    first = client.send(samples.fetch("t", 0, max_wait_ms=50, min_bytes=1), 12)  # parks, then answers empty
    second = client.send(samples.produce("t", 0, samples.record_batch(b"after")), 9)
    assert client.receive(FetchResponse, 12).header.correlation_id == first
    response = client.receive(ProduceResponse, 9)
    assert (response.header.correlation_id, response.responses[0].partition_responses[0].base_offset) == (second, 0)


# --- Metadata -------------------------------------------------------------------------------------

def test_metadata_lists_every_topic_with_this_broker_as_leader(broker: Broker) -> None:
    broker.manager.create_topic("a", 2)
    broker.manager.create_topic("b", 1)
    response = broker.connect().call(MetadataRequest(topics=None, allow_auto_topic_creation=False), MetadataResponse, 12)
    (node,) = response.brokers
    assert (node.host, node.port, response.controller_id) == ("127.0.0.1", broker.port, node.node_id)
    assert response.cluster_id
    topics = {t.name: t for t in response.topics}
    assert sorted(topics) == ["a", "b"]
    assert topics["a"].topic_id == topic_id_to_uuid(broker.manager.describe_topic("a").topic_id)
    assert [(p.partition_index, p.leader_id, p.replica_nodes, p.isr_nodes) for p in topics["a"].partitions] == \
        [(0, node.node_id, [node.node_id], [node.node_id]), (1, node.node_id, [node.node_id], [node.node_id])]


def test_metadata_v0_empty_list_means_every_topic(broker: Broker) -> None:
    broker.manager.create_topic("a", 1)
    response = broker.connect().call(MetadataRequest(topics=[]), MetadataResponse, 0)
    assert [t.name for t in response.topics] == ["a"]


def test_metadata_of_unknown_topics(make_broker: Callable[..., Broker]) -> None:
    broker = make_broker(**{"auto.create.topics.enable": "false"})
    client = broker.connect()
    response = client.call(samples.metadata("nope", auto_create=True), MetadataResponse, 12)
    assert [(t.name, t.error_code) for t in response.topics] == [("nope", 3)]
    assert not broker.manager.has_topic("nope")


def test_metadata_auto_creates_only_when_the_request_allows(broker: Broker) -> None:
    client = broker.connect()
    assert client.call(samples.metadata("x", auto_create=False), MetadataResponse, 12).topics[0].error_code == 3
    created = client.call(samples.metadata("x", auto_create=True), MetadataResponse, 12).topics[0]
    assert (created.error_code, len(created.partitions)) == (0, 1)
    invalid = client.call(samples.metadata("bad name!", auto_create=True), MetadataResponse, 12).topics[0]
    assert invalid.error_code == 17


def test_metadata_by_topic_id(broker: Broker) -> None:
    broker.manager.create_topic("a", 1)
    topic_id = topic_id_to_uuid(broker.manager.describe_topic("a").topic_id)
    T = MetadataRequest.MetadataRequestTopic
    request = MetadataRequest(topics=[T(name=None, topic_id=topic_id)], allow_auto_topic_creation=False)
    assert [t.name for t in broker.connect().call(request, MetadataResponse, 12).topics] == ["a"]


# --- ListOffsets ----------------------------------------------------------------------------------

def test_list_offsets_special_timestamps(broker: Broker) -> None:
    broker.manager.create_topic("t", 1)
    client = broker.connect()
    now = int(time.time() * 1000)
    response = client.call(samples.produce("t", 0, samples.record_batch(b"a", b"b", b"c", timestamps=[now - 9, now, now - 5])),
                           ProduceResponse, 9)
    assert response.responses[0].partition_responses[0].error_code == 0

    def ask(timestamp: int, version: int = 8) -> tuple[int, int]:
        part = client.call(samples.list_offsets("t", timestamp), ListOffsetsResponse, version).topics[0].partitions[0]
        return part.error_code, part.offset

    assert ask(-2) == (0, 0)
    assert ask(-1) == (0, 3)
    assert ask(-3) == (0, 1)
    assert ask(now - 6) == (0, 1)
    assert ask(-3, version=6) == (35, -1)
    assert ask(10**15) == (0, -1)
    assert client.call(samples.list_offsets("t", -1, partition=7), ListOffsetsResponse, 8).topics[0].partitions[0].error_code == 3
    twice = samples.list_offsets("t", -2)
    twice.topics = twice.topics + samples.list_offsets("t", -1).topics  # the topic named twice: two entries, as Kafka
    answered = client.call(twice, ListOffsetsResponse, 8).topics
    assert [(t.name, [p.offset for p in t.partitions]) for t in answered] == [("t", [0]), ("t", [3])]


# --- CreateTopics / DeleteTopics ------------------------------------------------------------------

def test_create_topics_errors(broker: Broker) -> None:
    broker.manager.create_topic("exists", 1)
    client = broker.connect()

    def create(**kwargs: object) -> tuple[int, int]:
        topic = client.call(samples.create_topics(**kwargs), CreateTopicsResponse, 7).topics[0]  # type: ignore[arg-type]
        return topic.error_code, topic.num_partitions

    assert create(name="exists") == (36, -1)
    assert create(name="r3", replication=3) == (38, -1)
    assert create(name="p0", partitions=0) == (37, -1)
    assert create(name="cfg", configs={"retention.ms": "soon"}) == (40, -1)
    assert create(name="bad/name") == (17, -1)
    assert create(name="dry", partitions=4, validate_only=True) == (0, 4)
    assert create(name="default", partitions=-1, replication=-1) == (0, 1)
    assert broker.manager.topics() == ["default", "exists"]


def test_delete_topics_by_name_and_id(broker: Broker) -> None:
    broker.manager.create_topic("a", 1)
    broker.manager.create_topic("b", 1)
    client = broker.connect()
    by_name = client.call(samples.delete_topics("a", 5), DeleteTopicsResponse, 5).responses[0]
    assert (by_name.name, by_name.error_code) == ("a", 0)
    missing = client.call(samples.delete_topics("a", 5), DeleteTopicsResponse, 5).responses[0]
    assert missing.error_code == 3
    from kafka.protocol.admin import DeleteTopicsRequest
    topic_id = topic_id_to_uuid(broker.manager.describe_topic("b").topic_id)
    request = DeleteTopicsRequest(timeout_ms=1000, topics=[DeleteTopicsRequest.DeleteTopicState(name=None, topic_id=topic_id)])
    by_id = client.call(request, DeleteTopicsResponse, 6).responses[0]
    assert (by_id.name, by_id.error_code) == ("b", 0)
    assert broker.manager.topics() == []


# --- the event loop -------------------------------------------------------------------------------

def test_a_slow_append_does_not_stall_other_connections(broker: Broker, monkeypatch: pytest.MonkeyPatch) -> None:
    broker.manager.create_topic("t", 1)
    entered, release = threading.Event(), threading.Event()
    append = broker.manager.append

    def slow_append(tp: TopicPartition, records: bytes, **options: object) -> object:
        entered.set()
        release.wait(TIMEOUT_S)
        return append(tp, records, **options)

    monkeypatch.setattr(broker.manager, "append", slow_append)
    slow = broker.connect()
    slow.send(samples.produce("t", 0, samples.record_batch(b"slow")), 9)
    assert entered.wait(TIMEOUT_S)
    other = broker.connect()
    assert other.call(samples.metadata("t"), MetadataResponse, 12).topics[0].error_code == 0
    assert other.call(samples.fetch("t", 0), FetchResponse, 12).responses[0].partitions[0].error_code == 0
    release.set()
    assert slow.receive(ProduceResponse, 9).responses[0].partition_responses[0].base_offset == 0


def test_read_committed_fetch_lists_aborted_transactions_and_read_uncommitted_does_not(broker: Broker) -> None:
    broker.manager.create_topic("t", 1)
    client = broker.connect()
    produce(client, "t", b"a")
    committed = client.call(samples.fetch("t", 0, isolation_level=1), FetchResponse, 12).responses[0].partitions[0]
    assert (committed.aborted_transactions, offsets_in(committed.records)) == ([], [0])
    uncommitted = client.call(samples.fetch("t", 0), FetchResponse, 12).responses[0].partitions[0]
    assert uncommitted.aborted_transactions is None


def test_each_listener_advertises_its_own_endpoint(tmp_path: Path) -> None:
    props = {"log.dirs": str(tmp_path), "listeners": "PLAINTEXT://127.0.0.1:0,INTERNAL://127.0.0.1:0",
             "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:PLAINTEXT",
             "advertised.listeners": "INTERNAL://internal.example:1234"}
    broker = BrokerConfig.from_properties(props)
    with LogManager.open(broker, scheduler=FakeScheduler(FakeClock())) as manager, \
            ServerThread(manager, ServerConfig.from_broker(broker)) as thread:
        seen = {}
        for bound in thread.server.bound:
            client = RawClient(socket.create_connection(("127.0.0.1", bound.port), timeout=TIMEOUT_S))
            (node,) = client.call(MetadataRequest(topics=None, allow_auto_topic_creation=False), MetadataResponse, 12).brokers
            seen[bound.listener_name] = (node.host, node.port)
            client.close()
    ports = {b.listener_name: b.port for b in thread.server.bound}
    assert seen == {"PLAINTEXT": ("127.0.0.1", ports["PLAINTEXT"]), "INTERNAL": ("internal.example", 1234)}
