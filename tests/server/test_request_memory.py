"""The global budget of request bytes (Kafka's ``queued.max.request.bytes``):
frames larger than 64 KiB reserve their declared size before their body is read, beyond the budget
a connection's body is left in its socket (backpressure), small requests keep flowing, and a
connection that goes away returns what it held. Before authentication on a SASL listener a frame
above ``sasl.server.max.receive.size`` closes the connection, logged under that key's name.
Peak-RSS figures: bench/bench_memory.py and test_memory_soak.py."""

from __future__ import annotations

import asyncio
import logging
import struct
from collections.abc import Callable
from pathlib import Path

import pytest
from kafka.protocol.producer import ProduceResponse

import server_samples as samples
from security_helpers import start_secure_broker
from server_helpers import Broker, RawClient, api_versions, wait_until
from tidelog.errors import ConfigError
from tidelog.server import ServerConfig
from tidelog.server.memory_pool import SMALL_FRAME_BYTES, RequestMemoryPool
from tidelog.storage.config import BrokerConfig

MIB = 1 << 20
LIMITS = {"socket.request.max.bytes": str(MIB), "queued.max.request.bytes": str(MIB)}


def _big_produce(client: RawClient) -> None:
    """Send (not wait for) a Produce of ~200 KB, a frame the budget counts."""
    batch = samples.record_batch(*([b"x" * 10_000] * 20))
    client.send(samples.produce("t", 0, batch), 9)


def _nothing_answered(client: RawClient) -> bool:
    client.sock.setblocking(False)
    try:
        return client.sock.recv(1) == b"never"  # EOF would be b""
    except BlockingIOError:
        return True
    finally:
        client.sock.setblocking(True)


def test_beyond_the_budget_bodies_wait_unread_while_small_requests_flow(make_broker: Callable[..., Broker]) -> None:
    broker = make_broker(**LIMITS)
    broker.manager.create_topic("t", 1)
    pool = broker.server.request_memory
    hog = broker.connect()
    hog.send_bytes(struct.pack(">i", MIB) + bytes(1000))  # a whole budget declared, never finished
    wait_until(lambda: pool.used == MIB)
    producer = broker.connect()
    _big_produce(producer)
    wait_until(lambda: pool.waiting == 1)
    assert _nothing_answered(producer)  # its body stays in the socket
    assert api_versions(broker.connect()).error_code == 0  # small frames do not wait for the budget
    hog.close()  # going away returns what it held: the waiting produce is read and answered
    response = producer.receive(ProduceResponse, 9)
    assert response.responses[0].partition_responses[0].error_code == 0
    wait_until(lambda: (pool.used, pool.waiting) == (0, 0))
    assert api_versions(producer).error_code == 0


def test_a_connection_leaving_while_it_waits_gives_nothing_back_twice(make_broker: Callable[..., Broker]) -> None:
    broker = make_broker(**LIMITS)
    broker.manager.create_topic("t", 1)
    pool = broker.server.request_memory
    hog = broker.connect()
    hog.send_bytes(struct.pack(">i", MIB))
    wait_until(lambda: pool.used == MIB)
    waiter = broker.connect()
    waiter.send_bytes(struct.pack(">i", MIB))
    wait_until(lambda: pool.waiting == 1)
    waiter.close()
    hog.close()
    wait_until(lambda: (pool.used, pool.waiting) == (0, 0))
    producer = broker.connect()
    _big_produce(producer)
    assert producer.receive(ProduceResponse, 9).responses[0].partition_responses[0].error_code == 0


def test_an_oversized_unauthenticated_sasl_frame_closes_with_the_key_named(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    broker = start_secure_broker(tmp_path / "data", **{
        "listeners": "SASL_PLAINTEXT://127.0.0.1:0", "sasl.enabled.mechanisms": "PLAIN",
        "sasl.server.max.receive.size": "4096"})
    try:
        client = broker.raw()
        with caplog.at_level(logging.WARNING, logger="tidelog.server.connection"):
            client.send_bytes(struct.pack(">i", 4097))
            assert client.closed_by_server()
        assert "sasl.server.max.receive.size" in caplog.text and "4097" in caplog.text
        assert broker.thread.server.request_memory.used == 0
    finally:
        broker.stop()


def test_queued_max_request_bytes_is_read_and_checked_as_kafka_does() -> None:
    def parse(**props: str) -> ServerConfig:
        return ServerConfig.from_broker(BrokerConfig.from_properties(props))

    assert (parse().queued_max_request_bytes, parse().fetch_max_bytes) == (209715200, 57671680)
    # not set: raised to socket.request.max.bytes so that every accepted frame can fit
    assert parse(**{"socket.request.max.bytes": "300000000"}).queued_max_request_bytes == 300000000
    assert parse(**{"queued.max.request.bytes": "-1"}).queued_max_request_bytes == -1  # Kafka's unbounded
    assert parse(**{"fetch.max.bytes": "1024"}).fetch_max_bytes == 1024  # Kafka's minimum
    with pytest.raises(ConfigError, match="queued.max.request.bytes must be larger or equal to socket.request"):
        parse(**{"queued.max.request.bytes": "1000", "socket.request.max.bytes": "2000"})
    with pytest.raises(ConfigError, match="fetch.max.bytes"):
        parse(**{"fetch.max.bytes": "-1"})
    with pytest.raises(ConfigError, match="fetch.max.bytes"):
        parse(**{"fetch.max.bytes": "1023"})


# --- the pool itself ------------------------------------------------------------------------------

def test_pool_serves_waiters_first_come_first_served_and_never_overshoots() -> None:
    async def scenario() -> list[str]:
        pool, order = RequestMemoryPool(100 * 1024), []
        release_first = asyncio.Event()

        async def hold(name: str, size: int, until: asyncio.Event | None = None) -> None:
            async with pool.reserve(size):
                order.append(name)
                assert pool.used <= pool.capacity
                if until is not None:
                    await until.wait()

        first = asyncio.create_task(hold("first", 90 * 1024, release_first))
        await asyncio.sleep(0)
        big = asyncio.create_task(hold("big", 100 * 1024))
        small = asyncio.create_task(hold("small-counted", 70 * 1024))
        free = asyncio.create_task(hold("free", SMALL_FRAME_BYTES))  # not counted: never waits
        await asyncio.sleep(0)
        assert (order, pool.waiting) == (["first", "free"], 2)
        release_first.set()
        await asyncio.gather(first, big, small, free)
        assert (pool.used, pool.waiting) == (0, 0)
        return order

    assert asyncio.run(scenario()) == ["first", "free", "big", "small-counted"]


def test_the_decompression_budget_counts_small_reservations_that_request_frames_get_free(
        make_broker: Callable[..., Broker]) -> None:
    broker = make_broker()
    assert not broker.server.request_memory.counted(SMALL_FRAME_BYTES)
    assert broker.server.decompression_memory.counted(1) and not broker.server.decompression_memory.counted(0)

    async def scenario() -> int:
        pool, gate = RequestMemoryPool(100 * 1024, free_up_to=0), asyncio.Event()

        async def hold(size: int) -> None:
            async with pool.reserve(size):
                await gate.wait()

        holder = asyncio.create_task(hold(100 * 1024))
        await asyncio.sleep(0)
        small = asyncio.create_task(hold(1000))  # a topic with a small max.message.bytes
        empty = asyncio.create_task(hold(0))  # nothing compressed: never waits
        await asyncio.sleep(0)
        waiting = pool.waiting
        gate.set()
        await asyncio.gather(holder, small, empty)
        return waiting

    assert asyncio.run(scenario()) == 1


def test_pool_forgets_a_cancelled_waiter() -> None:
    async def scenario() -> tuple[int, int]:
        pool = RequestMemoryPool(100 * 1024)
        gate = asyncio.Event()

        async def hold(size: int) -> None:
            async with pool.reserve(size):
                await gate.wait()

        holder = asyncio.create_task(hold(100 * 1024))
        await asyncio.sleep(0)
        waiter = asyncio.create_task(hold(100 * 1024))
        await asyncio.sleep(0)
        waiter.cancel()
        gate.set()
        await asyncio.gather(holder, waiter, return_exceptions=True)
        return pool.used, pool.waiting

    assert asyncio.run(scenario()) == (0, 0)
