"""Pipelined Produce requests of one connection: handled together (their appends in one thread-pool
call) with each answered, counted and ordered as if handled alone, on asyncio's loop and uvloop
(``tidelog.server.event.loop``)."""

from __future__ import annotations

import socket
import struct
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import server_samples as samples
from kafka.protocol.metadata import MetadataResponse
from kafka.protocol.producer import ProduceResponse
from server_helpers import TIMEOUT_S, Broker, RawClient, wait_until

from tidelog.server import produce
from tidelog.server.connection import PIPELINED_PRODUCES
from tidelog.topic_partition import TopicPartition

LOOPS = ("asyncio", "uvloop")


@pytest.fixture(params=LOOPS)
def loop_kind(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def pool_calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """How many requests each thread-pool call of Produce appended (one entry per call)."""
    calls: list[int] = []
    real = produce.append_requests

    def counting(manager: Any, works: list[Any]) -> Any:
        calls.append(len(works))
        return real(manager, works)

    monkeypatch.setattr(produce, "append_requests", counting)
    yield calls


def frame(request: Any, correlation_id: int, version: int = 9) -> bytes:
    request.API_VERSION = version
    request.with_header(correlation_id=correlation_id, client_id="pipeline")
    return bytes(request.encode(header=True, framed=True))


def produce_frame(correlation_id: int, topic: str = "t", value: bytes = b"v", acks: int = 1) -> bytes:
    return frame(samples.produce(topic, 0, samples.record_batch(value), acks=acks), correlation_id)


def connect(broker: Broker) -> RawClient:
    return RawClient(socket.create_connection(("127.0.0.1", broker.port), timeout=TIMEOUT_S))


def log_end(broker: Broker, topic: str = "t") -> int:
    return broker.manager.partition_info(TopicPartition(topic, 0)).log_end_offset


def produce_requests(broker: Broker) -> int:
    snapshot = broker.server.metrics.requests.snapshot().get("Produce")
    return sum(snapshot.requests.values()) if snapshot is not None else 0


def test_pipelined_produces_share_one_pool_call_and_are_answered_in_order(
        make_broker: Callable[..., Broker], loop_kind: str, pool_calls: list[int]) -> None:
    broker = make_broker(**{"tidelog.server.event.loop": loop_kind})
    broker.manager.create_topic("t", 1)
    client = connect(broker)
    count = 40
    client.send_bytes(b"".join(produce_frame(i, value=b"%d" % i) for i in range(count)))  # one write: all buffered
    answers = [client.receive(ProduceResponse, 9) for _ in range(count)]
    assert [a.header.correlation_id for a in answers] == list(range(count))
    parts = [a.responses[0].partition_responses[0] for a in answers]
    assert [(p.error_code, p.base_offset) for p in parts] == [(0, i) for i in range(count)]
    assert sum(pool_calls) == count and max(pool_calls) > 1  # handled together...
    assert max(pool_calls) <= PIPELINED_PRODUCES  # ...at most this many at once
    wait_until(lambda: produce_requests(broker) == count)  # counted once written, just after the client read it
    assert broker.server.metrics.requests.snapshot()["Produce"].errors == {0: count}  # each counted as alone
    _, per_topic = broker.server.metrics.topics.snapshot()
    assert per_topic["t"].messages_in == count


def test_a_request_between_produces_is_answered_in_its_place(make_broker: Callable[..., Broker],
                                                              pool_calls: list[int]) -> None:
    broker = make_broker()
    broker.manager.create_topic("t", 1)
    client = connect(broker)
    client.send_bytes(produce_frame(1) + produce_frame(2) + frame(samples.metadata("t"), 3, 12) + produce_frame(4))
    assert [client.receive(ProduceResponse, 9).header.correlation_id for _ in range(2)] == [1, 2]
    assert client.receive(MetadataResponse, 12).header.correlation_id == 3
    last = client.receive(ProduceResponse, 9)
    assert (last.header.correlation_id, last.responses[0].partition_responses[0].base_offset) == (4, 2)
    assert sum(pool_calls) == 3


def test_a_failed_acks_zero_produce_closes_after_the_answers_before_it_and_appends_nothing_after(
        make_broker: Callable[..., Broker], loop_kind: str) -> None:
    broker = make_broker(**{"tidelog.server.event.loop": loop_kind})
    broker.manager.create_topic("t", 1)
    client = connect(broker)
    client.send_bytes(produce_frame(1) + produce_frame(2, topic="missing", acks=0) + produce_frame(3)
                      + produce_frame(4, acks=0))
    first = client.receive(ProduceResponse, 9)
    assert (first.header.correlation_id, first.responses[0].partition_responses[0].error_code) == (1, 0)
    assert client.closed_by_server()
    assert log_end(broker) == 1  # the requests after the failed one were not appended
    wait_until(lambda: produce_requests(broker) == 2)  # the answered one and the one closed on, as Kafka counts


def test_a_malformed_frame_closes_after_the_produces_before_it(make_broker: Callable[..., Broker],
                                                              pool_calls: list[int]) -> None:
    broker = make_broker()
    broker.manager.create_topic("t", 1)
    client = connect(broker)
    damaged = struct.pack(">ihhi", 8, 0, 9, 3) + b"\xff\xff\xff\xff"  # Produce v9 header, nothing after it
    client.send_bytes(produce_frame(1) + produce_frame(2) + damaged + produce_frame(4))
    assert [client.receive(ProduceResponse, 9).header.correlation_id for _ in range(2)] == [1, 2]
    assert client.closed_by_server()
    assert log_end(broker) == 2 and sum(pool_calls) == 2


def test_produce_frames_the_request_memory_pool_counts_are_handled_one_at_a_time(
        make_broker: Callable[..., Broker], pool_calls: list[int]) -> None:
    broker = make_broker(**{"queued.max.request.bytes": str(200 << 20)})
    broker.manager.create_topic("t", 1)
    client = connect(broker)
    big = [produce_frame(i, value=bytes([i]) * (100 << 10)) for i in range(4)]  # > 64 KiB: each reserves
    client.send_bytes(b"".join(big))
    parts = [client.receive(ProduceResponse, 9).responses[0].partition_responses[0] for _ in big]
    assert [(p.error_code, p.base_offset) for p in parts] == [(0, i) for i in range(4)]
    assert pool_calls == [1, 1, 1, 1]
    assert broker.server.request_memory.used == 0


def test_acks_all_checks_min_insync_replicas_with_the_append(make_broker: Callable[..., Broker]) -> None:
    broker = make_broker()
    broker.manager.create_topic("strict", 1, {"min.insync.replicas": "2"})
    broker.manager.create_topic("t", 1)
    client = connect(broker)
    client.send_bytes(produce_frame(1, topic="strict", acks=-1) + produce_frame(2, acks=-1))
    refused, taken = (client.receive(ProduceResponse, 9).responses[0].partition_responses[0] for _ in range(2))
    assert refused.error_code == 19 and "min.isr requirement of 2" in refused.error_message  # NOT_ENOUGH_REPLICAS
    assert (taken.error_code, taken.base_offset) == (0, 0)
    assert log_end(broker, "strict") == 0


def test_acks_zero_produces_in_a_group_are_appended_and_not_answered(make_broker: Callable[..., Broker],
                                                                      pool_calls: list[int]) -> None:
    broker = make_broker()
    broker.manager.create_topic("t", 1)
    client = connect(broker)
    client.send_bytes(produce_frame(1, acks=0) + produce_frame(2, acks=0) + produce_frame(3))
    answer = client.receive(ProduceResponse, 9)  # the only response: acks=0 gets none
    assert (answer.header.correlation_id, answer.responses[0].partition_responses[0].base_offset) == (3, 2)
    wait_until(lambda: produce_requests(broker) == 3)
    assert sum(pool_calls) == 3 and log_end(broker) == 3
