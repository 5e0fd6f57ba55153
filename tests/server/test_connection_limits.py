"""Connection limits and idle expiry (Kafka's ``connections.max.idle.ms``, ``max.connections``,
``listener.name.<name>.max.connections``, ``max.connections.per.ip`` and its overrides): the
N+1th connection is closed at accept while the first N keep working, a freed slot is taken
again, and a connection with no request for the idle time is closed while a busy one is not.

The broker is built here from every server key (server_helpers.start_broker keeps only the
listener and request-size keys). Waits are socket timeouts or polls of a server gauge, never sleeps."""

from __future__ import annotations

import dataclasses
import socket
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import server_samples as samples
from kafka.protocol.consumer import FetchResponse
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse

from security_helpers import client_context, make_pki, start_secure_broker
from server_helpers import TIMEOUT_S, RawClient, api_versions, wait_until
from tidelog.errors import ConfigError
from tidelog.manager import LogManager
from tidelog.server import Endpoint, ServerConfig, ServerThread
from tidelog.server.server import KafkaServer
from tidelog.storage.config import BrokerConfig
from tidelog.testing import FakeClock, FakeScheduler


@dataclasses.dataclass
class Limited:
    manager: LogManager
    server: KafkaServer
    port: int

    def connect(self, source: str = "127.0.0.1") -> RawClient:
        """A connection from the loopback address ``source`` (any 127.x.y.z on Linux)."""
        return RawClient(socket.create_connection(("127.0.0.1", self.port), timeout=TIMEOUT_S,
                                                  source_address=(source, 0)))


@pytest.fixture
def make_server(tmp_path: Path) -> Iterator[Callable[..., Limited]]:
    started: list[tuple[LogManager, ServerThread]] = []

    def make(**props: str) -> Limited:
        broker = BrokerConfig.from_properties({"log.dirs": str(tmp_path / "data"), **props})
        manager = LogManager.open(broker, scheduler=FakeScheduler(FakeClock()))
        config = dataclasses.replace(ServerConfig.from_broker(broker),
                                     listeners=(Endpoint("PLAINTEXT", "127.0.0.1", 0),))
        thread = ServerThread(manager, config, io_threads=2)
        started.append((manager, thread))
        thread.start()
        return Limited(manager, thread.server, thread.server.bound[0].port)

    yield make
    for manager, thread in started:
        thread.stop()
        manager.shutdown()


def _works(client: RawClient) -> bool:
    """True when ``client`` gets an ApiVersions answer."""
    return client.call(_api_versions(), ApiVersionsResponse, 3).error_code == 0


def _api_versions() -> object:
    return ApiVersionsRequest(client_software_name="tests", client_software_version="1")


def _refused(client: RawClient) -> bool:
    """True when the server closed ``client`` without answering what it sent."""
    try:
        client.send(_api_versions(), 3)
    except (BrokenPipeError, ConnectionResetError):
        return True
    try:
        return client.sock.recv(4) == b""
    except ConnectionResetError:
        return True


def test_connection_beyond_max_connections_is_closed_and_a_freed_slot_is_taken(make_server) -> None:  # type: ignore[no-untyped-def]
    server = make_server(**{"max.connections": "3"})
    clients = [server.connect() for _ in range(3)]
    assert all(_works(c) for c in clients)
    extra = server.connect()
    assert _refused(extra)
    assert server.server.refused_connections == 1
    assert all(_works(c) for c in clients)  # the first N keep working
    clients.pop().close()
    wait_until(lambda: server.server.connection_count == 2)
    again = server.connect()
    assert _works(again)
    assert _refused(server.connect())
    assert server.server.refused_connections == 2
    for c in [*clients, again, extra]:
        c.close()


def test_max_connections_per_ip_counts_each_address_with_its_override(make_server) -> None:  # type: ignore[no-untyped-def]
    server = make_server(**{"max.connections.per.ip": "2", "max.connections.per.ip.overrides": "127.0.0.2:1"})
    local = [server.connect("127.0.0.1") for _ in range(2)]
    assert all(_works(c) for c in local)
    assert _refused(server.connect("127.0.0.1"))
    other = server.connect("127.0.0.2")  # its own count, and its override
    assert _works(other)
    assert _refused(server.connect("127.0.0.2"))
    third = server.connect("127.0.0.3")  # the default limit, counted apart
    assert _works(third)
    assert all(_works(c) for c in local)
    assert server.server.refused_connections == 2
    for c in [*local, other, third]:
        c.close()


def test_listener_max_connections_limits_that_listener(make_server) -> None:  # type: ignore[no-untyped-def]
    server = make_server(**{"listener.name.plaintext.max.connections": "1"})
    first = server.connect()
    assert _works(first)
    assert _refused(server.connect("127.0.0.2"))  # whatever the address
    assert _works(first)
    first.close()


def test_idle_connection_is_closed_after_connections_max_idle_ms(make_server) -> None:  # type: ignore[no-untyped-def]
    server = make_server(**{"connections.max.idle.ms": "300"})
    idle, active = server.connect(), server.connect()
    assert _works(idle)
    idle.sock.settimeout(0.05)
    requests = 0
    while not idle.closed_by_server():  # waits 50 ms on the idle socket each round
        assert _works(active)  # each request starts the active connection's idle time again
        requests += 1
        assert requests < TIMEOUT_S / 0.05, "the idle connection was never closed"
    assert requests >= 300 // 50 - 1  # not closed before about 300 ms
    assert _works(active)
    wait_until(lambda: server.server.connection_count == 1)


def test_connection_waiting_on_a_long_poll_is_busy_not_idle(make_server) -> None:  # type: ignore[no-untyped-def]
    server = make_server(**{"connections.max.idle.ms": "200"})
    client = server.connect()
    server.manager.create_topic("t", 1)
    response = client.call(samples.fetch("t", 0, max_wait_ms=800, min_bytes=1), FetchResponse, 12)
    part = response.responses[0].partitions[0]  # parked 800 ms: four idle periods
    assert (part.error_code, part.records or b"") == (0, b"")  # answered, empty
    assert client.closed_by_server()  # then idle again, and closed


def test_negative_idle_time_never_expires(make_server) -> None:  # type: ignore[no-untyped-def]
    server = make_server(**{"connections.max.idle.ms": "-1"})
    client = server.connect()
    client.sock.settimeout(0.3)
    assert not client.closed_by_server()
    client.sock.settimeout(TIMEOUT_S)
    assert _works(client)


def test_limits_are_read_from_broker_keys() -> None:
    config = ServerConfig.from_broker(BrokerConfig.from_properties({
        "connections.max.idle.ms": "1000", "max.connections": "10", "max.connections.per.ip": "4",
        "max.connections.per.ip.overrides": "localhost:7, 10.0.0.1:0", "listener.name.plaintext.max.connections": "5"}))
    assert (config.connections_max_idle_ms, config.max_connections) == (1000, 10)
    assert (config.ip_limit("127.0.0.1"), config.ip_limit("10.0.0.1"), config.ip_limit("10.0.0.2")) == (7, 0, 4)
    assert (config.listener_limit("PLAINTEXT"), config.listener_limit("OTHER")) == (5, 2147483647)
    defaults = ServerConfig.from_broker(BrokerConfig.from_properties({}))
    assert (defaults.connections_max_idle_ms, defaults.max_connections, defaults.max_connections_per_ip) == (
        600000, 2147483647, 2147483647)


@pytest.mark.parametrize("props", [
    {"max.connections.per.ip": "0"},
    {"max.connections": "-1"},
    {"max.connections.per.ip.overrides": "127.0.0.1"},
    {"max.connections.per.ip.overrides": "127.0.0.1:many"},
])
def test_bad_limits_are_refused_naming_the_key(props: dict[str, str]) -> None:
    with pytest.raises(ConfigError) as e:
        ServerConfig.from_broker(BrokerConfig.from_properties(props))
    assert next(iter(props)) in str(e.value)


def test_tls_listener_expires_idle_connections_and_keeps_its_limit(tmp_path: Path) -> None:
    pki = make_pki(tmp_path / "pki")
    broker = start_secure_broker(tmp_path / "data", **{
        "listeners": "SSL://127.0.0.1:0", "ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki.server_keystore),
        "connections.max.idle.ms": "300", "max.connections": "1"})
    try:
        context = client_context(pki.ca)
        first = broker.raw(context)
        assert api_versions(first).error_code == 0
        assert _refused(broker.raw(context))  # the handshake ran; then the connection is closed
        assert first.closed_by_server()  # idle: closed within TIMEOUT_S
        wait_until(lambda: broker.thread.server.connection_count == 0)
        assert api_versions(broker.raw(context)).error_code == 0  # the slot is free again
    finally:
        broker.stop()
