"""Helpers of the server tests: a tidelog broker in-process on a free loopback port, and a raw
Kafka-protocol client.

The log manager uses the system clock (kafka-python stamps records with real time, and the
timestamp bounds are checked against the log's clock) and a FakeScheduler, so no background task
runs. Tests never sleep: they wait on sockets with timeouts, or poll a server gauge.
"""

from __future__ import annotations

import dataclasses
import socket
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tidelog.manager import LogManager
from tidelog.server import Endpoint, ServerConfig, ServerThread
from tidelog.server.server import KafkaServer
from tidelog.storage.config import BrokerConfig
from tidelog.testing import FakeClock, FakeScheduler

TIMEOUT_S = 10.0


@dataclass
class Broker:
    manager: LogManager
    server: KafkaServer
    port: int

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def connect(self) -> RawClient:
        return RawClient(socket.create_connection(("127.0.0.1", self.port), timeout=TIMEOUT_S))


def start_broker(data: Path, **props: object) -> tuple[LogManager, ServerThread]:
    broker = BrokerConfig.from_properties({"log.dirs": str(data), **props})
    manager = LogManager.open(broker, scheduler=FakeScheduler(FakeClock()))
    # every broker prop applies (limits, idle expiry), on one plaintext listener on a free port
    config = dataclasses.replace(ServerConfig.from_broker(broker), listeners=(Endpoint("PLAINTEXT", "127.0.0.1", 0),),
                                 security=())
    thread = ServerThread(manager, config, io_threads=4)
    thread.start()
    return manager, thread


class RawClient:
    """Requests as kafka-python's classes encode them, over a plain socket."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._correlation = 0

    def send(self, request: Any, version: int, client_id: str = "raw") -> int:
        self._correlation += 1
        request.API_VERSION = version
        request.with_header(correlation_id=self._correlation, client_id=client_id)
        self.sock.sendall(bytes(request.encode(header=True, framed=True)))
        return self._correlation

    def send_bytes(self, payload: bytes) -> None:
        self.sock.sendall(payload)

    def receive(self, response_class: Any, version: int) -> Any:
        size = struct.unpack(">i", self._exactly(4))[0]
        return response_class[version].decode(self._exactly(size), header=True)

    def call(self, request: Any, response_class: Any, version: int) -> Any:
        """Send ``request`` at ``version`` and read its response."""
        correlation = self.send(request, version)
        response = self.receive(response_class, version)
        assert response.header.correlation_id == correlation
        return response

    def closed_by_server(self) -> bool:
        """True when the server closes the connection (reads EOF) within the timeout."""
        try:
            while self.sock.recv(65536):
                pass  # drain what was answered before the close
            return True
        except ConnectionResetError:
            return True
        except TimeoutError:
            return False

    def _exactly(self, n: int) -> bytes:
        chunks = []
        while n:
            chunk = self.sock.recv(n)
            if not chunk:
                raise ConnectionError("server closed the connection")
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)

    def close(self) -> None:
        self.sock.close()


def wait_until(condition: Callable[[], bool], timeout_s: float = TIMEOUT_S) -> None:
    """Poll ``condition`` (no fixed sleep: it returns as soon as the condition holds)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.001)
