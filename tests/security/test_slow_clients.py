"""Slow-loris clients and floods of connections, against a real ``tidelog serve``.

Idle expiry (``connections.max.idle.ms``) counts from the last request answered, not from the last
byte received: a client trickling a request a byte at a time, one stopping after half a size
prefix, and one that never sends are all closed once that long has passed, while other clients
are served all along. (Kafka's Selector counts any bytes read as activity, so a trickling client
could hold its connection forever there; tidelog bounds it, and ``max.connections.per.ip`` bounds
how many one address holds.) Connections beyond ``max.connections`` / ``max.connections.per.ip``
are closed at once; the server's descriptors return to where they were."""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Callable

from kafka.protocol.metadata import MetadataResponse

import server_samples as samples
from abuse_helpers import Served
from server_helpers import RawClient, wait_until

IDLE_MS = 1500


def _served_quickly(served: Served) -> float:
    client = served.raw()
    started = time.monotonic()
    assert client.call(samples.metadata(), MetadataResponse, 12).brokers
    client.close()
    return time.monotonic() - started


def _trickle(client: RawClient, stop: threading.Event) -> None:
    """A 100-byte request announced, then one byte every 100 ms (never completed in time)."""
    try:
        client.send_bytes(struct.pack(">i", 100))
        while not stop.wait(0.1):
            client.send_bytes(b"\x00")
    except OSError:
        pass  # closed by the server


def _closed_after(client: RawClient) -> float:
    started = time.monotonic()
    assert client.closed_by_server()
    return time.monotonic() - started


def test_slow_loris_half_headers_and_silent_connections_are_closed_after_the_idle_time(
        serve: Callable[..., Served]) -> None:
    served = serve(**{"connections.max.idle.ms": IDLE_MS})
    connected = time.monotonic()
    trickler, half, silent = served.raw(), served.raw(), served.raw()
    half.send_bytes(b"\x00\x00")  # half a size prefix
    stop = threading.Event()
    thread = threading.Thread(target=_trickle, args=(trickler, stop), daemon=True)
    thread.start()
    try:
        while time.monotonic() - connected < IDLE_MS / 1000 / 2:
            assert _served_quickly(served) < 5  # others are served meanwhile
        for client in (trickler, half, silent):
            _closed_after(client)
        closed_at = time.monotonic() - connected
    finally:
        stop.set()
        thread.join()
    assert IDLE_MS / 1000 * 0.9 <= closed_at < IDLE_MS / 1000 + 8
    assert served.alive() and _served_quickly(served) < 5


def _connect_many(count: int, port: int, source: str) -> list[socket.socket]:
    return [socket.create_connection(("127.0.0.1", port), timeout=10, source_address=(source, 0))
            for _ in range(count)]


def _answered(sock: socket.socket) -> bool:
    """Send a Metadata request: True when answered, False when the server closed the connection."""
    client = RawClient(sock)
    try:
        client.call(samples.metadata(), MetadataResponse, 12)
        return True
    except (ConnectionError, OSError):
        return False


def test_a_thousand_connections_from_one_address_are_refused_beyond_its_limit(serve: Callable[..., Served]) -> None:
    served = serve(**{"max.connections.per.ip": 50, "max.connections": 400})
    baseline = served.open_fds()
    flood = _connect_many(1000, served.port, "127.0.0.1")
    try:
        answered = [_answered(sock) for sock in flood]
        assert sum(answered) == 50
        assert served.open_fds() < baseline + 50 + 20
        other = _connect_many(1, served.port, "127.0.0.2")[0]  # another address is still served
        assert _answered(other)
        other.close()
    finally:
        for sock in flood:
            sock.close()
    wait_until(lambda: served.open_fds() <= baseline + 2)
    assert _served_quickly(served) < 5
