"""The broker's own bounds on a Fetch: ``fetch.max.bytes`` caps the records of a
response whatever the request asks (Kafka's ``min(request max_bytes, fetch.max.bytes)``), a first
batch larger than the cap still comes whole (KIP-74), ``min_bytes`` is lowered to the cap, and a
partition named many times is read once. The peak-memory figures are in bench/bench_memory.py and
the soak test test_memory_soak.py."""

from __future__ import annotations

import socket
from collections.abc import Callable

from kafka.protocol.consumer import FetchRequest, FetchResponse
from kafka.protocol.producer import ProduceResponse

import server_samples as samples
from server_helpers import TIMEOUT_S, Broker, RawClient, api_versions, wait_until
from tidelog.records import iter_batches

INT32_MAX = 2**31 - 1
VALUE = b"v" * 1000


def _produce(client: RawClient, topic: str, partition: int, count: int, values_per_batch: int = 1) -> None:
    for _ in range(count):
        batch = samples.record_batch(*([VALUE] * values_per_batch))
        response = client.call(samples.produce(topic, partition, batch), ProduceResponse, 9)
        assert response.responses[0].partition_responses[0].error_code == 0


def _fetch(partitions: list[int], *, topic: str = "t", max_bytes: int = INT32_MAX, min_bytes: int = 0,
           max_wait_ms: int = 0, offsets: dict[int, int] | None = None) -> object:
    F = FetchRequest.FetchTopic
    parts = [F.FetchPartition(partition=p, current_leader_epoch=-1, fetch_offset=(offsets or {}).get(p, 0),
                              last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=INT32_MAX)
             for p in partitions]
    return FetchRequest(replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=min_bytes, max_bytes=max_bytes,
                        isolation_level=0, session_id=0, session_epoch=-1, topics=[F(topic=topic, partitions=parts)],
                        forgotten_topics_data=[], rack_id="")


def _offsets(records: bytes | None) -> list[int]:
    return [r.offset for _, b in iter_batches(records or b"") for r in b.records()]


def test_a_partition_named_many_times_is_read_once(broker: Broker) -> None:
    broker.manager.create_topic("t", 2)
    client = broker.connect()
    _produce(client, "t", 0, 20)
    _produce(client, "t", 1, 20)
    # partition 1 first, then 0 and 1 named 15 times each, the last mention of 1 from offset 5
    response = client.call(_fetch([1] + [0, 1] * 15, offsets={1: 5}), FetchResponse, 12)
    parts = response.responses[0].partitions
    assert [p.partition_index for p in parts] == [1, 0]  # each once, at its first place
    assert _offsets(parts[0].records) == list(range(5, 20))  # with the offset of its last mention
    assert _offsets(parts[1].records) == list(range(20))
    assert api_versions(client).error_code == 0


def test_fetch_max_bytes_caps_the_response_whatever_the_request_asks(make_broker: Callable[..., Broker]) -> None:
    broker = make_broker(**{"fetch.max.bytes": "10000"})
    broker.manager.create_topic("t", 3)
    client = broker.connect()
    for partition in range(3):
        _produce(client, "t", partition, 20)  # ~21 KB each, ~1.06 KB per batch
    response = client.call(_fetch([0, 1, 2] * 10), FetchResponse, 12)
    parts = response.responses[0].partitions
    assert [p.partition_index for p in parts] == [0, 1, 2]
    total = sum(len(p.records or b"") for p in parts)
    assert 9000 < total <= 10000
    assert _offsets(parts[0].records)[0] == 0 and not parts[1].records and not parts[2].records
    smaller = client.call(_fetch([0], max_bytes=3000), FetchResponse, 12)  # the request's own limit, if lower
    assert 2000 < len(smaller.responses[0].partitions[0].records) <= 3000
    assert api_versions(client).error_code == 0


def test_a_first_batch_larger_than_fetch_max_bytes_comes_whole(make_broker: Callable[..., Broker]) -> None:
    broker = make_broker(**{"fetch.max.bytes": "1024"})  # Kafka's minimum
    broker.manager.create_topic("t", 2)
    client = broker.connect()
    _produce(client, "t", 0, 2, values_per_batch=5)  # two ~5 KB batches
    _produce(client, "t", 1, 1, values_per_batch=5)
    response = client.call(_fetch([0, 1]), FetchResponse, 12)
    first, second = response.responses[0].partitions
    assert _offsets(first.records) == [0, 1, 2, 3, 4]  # one whole batch, over the cap (KIP-74)
    assert not second.records


def test_min_bytes_above_fetch_max_bytes_is_lowered_to_it(make_broker: Callable[..., Broker]) -> None:
    broker = make_broker(**{"fetch.max.bytes": "2000"})
    broker.manager.create_topic("t", 1)
    client = broker.connect()
    _produce(client, "t", 0, 5)
    # min_bytes can never be met under the cap: answered at once with what is there, not after
    # max_wait_ms (one minute, longer than the client's socket timeout)
    response = client.call(_fetch([0], min_bytes=1 << 20, max_wait_ms=60_000), FetchResponse, 12)
    assert _offsets(response.responses[0].partitions[0].records) == [0]


def test_a_client_that_does_not_read_its_response_is_closed_when_idle(make_broker: Callable[..., Broker]) -> None:
    broker = make_broker(**{"connections.max.idle.ms": "300"})
    broker.manager.create_topic("t", 1)
    producer = broker.connect()
    _produce(producer, "t", 0, 10, values_per_batch=900)  # ~9 MB: more than the socket buffers hold
    producer.close()
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.settimeout(TIMEOUT_S)
    sock.connect(("127.0.0.1", broker.port))
    fetcher = RawClient(sock)
    fetcher.send(_fetch([0]), 12)  # never read: the response cannot drain, so the connection is idle
    wait_until(lambda: broker.server.connection_count == 0)  # closed: its records are not held any longer
    fetcher.close()
