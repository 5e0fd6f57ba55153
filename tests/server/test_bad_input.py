"""Bad input gets Kafka's error code or a closed connection, never a crash: after each case the
server still answers other connections, and nothing refused was stored."""

from __future__ import annotations

import asyncio
import select
import struct
from collections.abc import Callable
from typing import Any

import pytest
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse
from kafka.protocol.producer import ProduceRequest, ProduceResponse

import server_samples as samples
from server_helpers import Broker, RawClient
from tidelog.server import codec
from tidelog.server.produce import decompression_reservation
from tidelog.topic_partition import TopicPartition


def _framed(request: object, version: int) -> bytes:
    request.with_header(correlation_id=1, client_id="bad")  # type: ignore[attr-defined]
    request.API_VERSION = version  # type: ignore[attr-defined]
    return bytes(request.encode(header=True, framed=True))  # type: ignore[attr-defined]


def assert_still_serving(broker: Broker) -> None:
    client = broker.connect()
    response = client.call(ApiVersionsRequest(client_software_name="x", client_software_version="1"), ApiVersionsResponse, 3)
    assert response.error_code == 0
    client.close()


def _two_gigabytes(client: RawClient) -> None:
    client.send_bytes(struct.pack(">i", 2**31 - 1) + b"\0" * 16)


def _negative_size(client: RawClient) -> None:
    client.send_bytes(struct.pack(">i", -5))


def _truncated_request(client: RawClient) -> None:
    frame = _framed(samples.fetch("t"), 12)
    cut = frame[4:-12]
    client.send_bytes(struct.pack(">i", len(cut)) + cut)


def _header_only(client: RawClient) -> None:
    client.send_bytes(struct.pack(">ih", 2, 1))


def _unknown_api_key(client: RawClient) -> None:
    frame = _framed(samples.metadata("t"), 12)
    client.send_bytes(frame[:4] + struct.pack(">h", 9999) + frame[6:])


def _unsupported_version(client: RawClient) -> None:
    frame = _framed(samples.fetch("t"), 12)
    client.send_bytes(frame[:6] + struct.pack(">h", 13) + frame[8:])


def _produce_v2(client: RawClient) -> None:
    frame = _framed(samples.produce("t", records=samples.record_batch(b"x")), 3)
    client.send_bytes(frame[:6] + struct.pack(">h", 2) + frame[8:])


def _failed_acks_zero(client: RawClient) -> None:
    client.send(samples.produce("nope", records=samples.record_batch(b"x"), acks=0), 9)


@pytest.mark.parametrize("send", [_two_gigabytes, _negative_size, _truncated_request, _header_only, _unknown_api_key,
                                  _unsupported_version, _produce_v2, _failed_acks_zero])
def test_connection_is_closed_and_server_keeps_serving(broker: Broker, send: Callable[[RawClient], None]) -> None:
    broker.manager.create_topic("t", 1)
    bystander = broker.connect()
    client = broker.connect()
    send(client)
    assert client.closed_by_server()
    assert_still_serving(broker)
    response = bystander.call(ApiVersionsRequest(client_software_name="x", client_software_version="1"), ApiVersionsResponse, 3)
    assert response.error_code == 0, "an open connection is not disturbed"
    assert broker.manager.log(TopicPartition("t", 0)).log_end_offset == 0


def test_request_larger_than_socket_request_max_bytes_closes_the_connection(make_broker: Callable[..., Broker]) -> None:
    broker = make_broker(**{"socket.request.max.bytes": "2000"})
    broker.manager.create_topic("t", 1)
    client = broker.connect()
    client.send(samples.produce("t", records=samples.record_batch(b"x" * 3000)), 9)
    assert client.closed_by_server()
    small = broker.connect().call(samples.produce("t", records=samples.record_batch(b"x" * 100)), ProduceResponse, 9)
    assert small.responses[0].partition_responses[0].error_code == 0


def test_api_versions_of_an_unsupported_version_gets_unsupported_version_and_the_list(broker: Broker) -> None:
    client = broker.connect()
    frame = _framed(ApiVersionsRequest(client_software_name="x", client_software_version="1"), 3)
    client.send_bytes(frame[:6] + struct.pack(">h", 77) + frame[8:])
    response = client.receive(ApiVersionsResponse, 0)
    assert response.error_code == 35
    assert {k.api_key for k in response.api_keys} == set(codec.SUPPORTED_APIS)
    assert_still_serving(broker)


def _corrupt_crc() -> bytes:
    batch = bytearray(samples.record_batch(b"hello"))
    batch[-1] ^= 0xFF  # last byte of the last record: covered by the CRC
    return bytes(batch)


def _too_large() -> bytes:
    return samples.record_batch(b"x" * 5000)


@pytest.mark.parametrize(("topic", "records", "code"), [
    ("missing", samples.record_batch(b"x"), 3),             # UNKNOWN_TOPIC_OR_PARTITION
    ("t", _corrupt_crc(), 2),                               # CORRUPT_MESSAGE
    ("t", samples.record_batch(b"a") * 2, 87),              # INVALID_RECORD: two batches
    ("t", None, 87),                                        # INVALID_RECORD: no batch
    ("t", b"\0" * 16 + b"\x01" + b"\0" * 60, 87),           # INVALID_RECORD: magic 1
    ("t", samples.record_batch(b"x")[:-5], 87),             # INVALID_RECORD: batch cut short (no whole batch)
    ("t", _too_large(), 10),                                # MESSAGE_TOO_LARGE
    ("t", samples.record_batch(b"x" * 5000, codec_id=1), 10),  # MESSAGE_TOO_LARGE: 5 KB once decompressed
    ("t", samples.record_batch(b"x", timestamps=[1]), 32),  # INVALID_TIMESTAMP: 1970, far before the bound
], ids=["unknown-topic", "corrupt-crc", "two-batches", "no-batch", "magic-1", "cut-short", "too-large",
        "too-large-decompressed", "bad-timestamp"])
def test_produce_errors_are_per_partition(broker: Broker, topic: str, records: bytes | None, code: int) -> None:
    broker.manager.create_topic("t", 1, {"max.message.bytes": "2000", "message.timestamp.before.max.ms": "3600000"})
    client = broker.connect()
    response = client.call(samples.produce(topic, records=records), ProduceResponse, 9)
    partition = response.responses[0].partition_responses[0]
    assert (partition.error_code, partition.base_offset) == (code, -1)
    assert partition.error_message
    assert broker.manager.log(TopicPartition("t", 0)).log_end_offset == 0
    ok = client.call(samples.produce("t", records=samples.record_batch(b"fine")), ProduceResponse, 9)
    assert ok.responses[0].partition_responses[0].error_code == 0, "the same connection goes on"


def test_invalid_acks_are_refused(broker: Broker) -> None:
    broker.manager.create_topic("t", 1)
    response = broker.connect().call(samples.produce("t", records=samples.record_batch(b"x"), acks=2), ProduceResponse, 9)
    assert response.responses[0].partition_responses[0].error_code == 21
    assert broker.manager.log(TopicPartition("t", 0)).log_end_offset == 0


def test_acks_all_needs_min_insync_replicas_of_one(broker: Broker) -> None:
    broker.manager.create_topic("t", 1, {"min.insync.replicas": "2"})
    client = broker.connect()
    refused = client.call(samples.produce("t", records=samples.record_batch(b"x"), acks=-1), ProduceResponse, 9)
    assert refused.responses[0].partition_responses[0].error_code == 19
    assert broker.manager.log(TopicPartition("t", 0)).log_end_offset == 0
    accepted = client.call(samples.produce("t", records=samples.record_batch(b"x"), acks=1), ProduceResponse, 9)
    assert accepted.responses[0].partition_responses[0].error_code == 0


def test_keyless_records_on_a_compacted_topic_are_listed_from_v8(broker: Broker) -> None:
    broker.manager.create_topic("c", 1, {"cleanup.policy": "compact"})
    batch = samples.record_batch(b"a", b"b", keys=[b"k", None])
    client = broker.connect()
    part = client.call(samples.produce("c", records=batch), ProduceResponse, 9).responses[0].partition_responses[0]
    assert part.error_code == 87
    assert [(e.batch_index, e.batch_index_error_message) for e in part.record_errors] == [(1, "record has no key")]
    old = client.call(samples.produce("c", records=batch), ProduceResponse, 7).responses[0].partition_responses[0]
    assert old.error_code == 87


def test_a_produce_reserves_the_largest_decompressed_allowance_of_its_compressed_batches(broker: Broker) -> None:
    broker.manager.create_topic("small", 1, {"max.message.bytes": "100061"})
    broker.manager.create_topic("large", 1, {"max.message.bytes": "300061"})
    P = ProduceRequest.TopicProduceData

    def topic_data(*parts: tuple[str, bytes]) -> list[object]:
        return [P(name=name, partition_data=[P.PartitionProduceData(index=0, records=records)]) for name, records in parts]

    plain, packed = samples.record_batch(b"x" * 100), samples.record_batch(b"x" * 100, codec_id=1)
    manager = broker.manager
    assert decompression_reservation(manager, topic_data(("small", plain), ("large", plain)), 1 << 30) == 0
    assert decompression_reservation(manager, topic_data(("small", packed), ("large", plain)), 1 << 30) == 100_000
    assert decompression_reservation(manager, topic_data(("small", packed), ("large", packed)), 1 << 30) == 300_000
    assert decompression_reservation(manager, topic_data(("small", packed), ("large", packed)), 200_000) == 200_000
    assert decompression_reservation(manager, topic_data(("missing", packed)), 1 << 30) == 0


def test_compressed_produces_beyond_the_decompression_budget_wait_their_turn(make_broker: Callable[..., Broker]) -> None:
    broker = make_broker(**{"tidelog.produce.decompression.memory.bytes": str(1 << 20)})
    for topic in ("held", "t"):  # each produce takes the whole budget
        broker.manager.create_topic(topic, 1, {"max.message.bytes": str(4 << 20)})
    pool, loop = broker.server.decompression_memory, broker.loop
    assert loop is not None

    def on_loop(coroutine: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, loop).result(timeout=10)

    async def waiting() -> int:
        return pool.waiting

    # while the budget is held, a compressed produce is not validated, appended nor answered
    held = pool.reserve(1 << 20)
    on_loop(held.__aenter__())
    first = broker.connect()
    first.send(samples.produce("held", records=samples.record_batch(b"v" * 100_000, codec_id=1)), 9)
    assert select.select([first.sock], [], [], 0.5)[0] == []
    assert on_loop(waiting()) == 1 and broker.manager.log(TopicPartition("held", 0)).log_end_offset == 0
    on_loop(held.__aexit__(None, None, None))
    answer = first.receive(ProduceResponse, 9).responses[0].partition_responses[0]
    assert (answer.error_code, answer.base_offset) == (0, 0)

    clients = [broker.connect() for _ in range(4)]
    for client in clients:
        client.send(samples.produce("t", records=samples.record_batch(b"v" * 100_000, codec_id=1)), 9)
    answers = [c.receive(ProduceResponse, 9).responses[0].partition_responses[0] for c in clients]
    assert sorted(a.base_offset for a in answers) == [0, 1, 2, 3] and {a.error_code for a in answers} == {0}
