"""Helpers of the server tests: a tidelog broker in-process on a free loopback port, a raw
Kafka-protocol client, and ``tidelog serve`` as a user starts it (:func:`serve`).

The log manager uses the system clock (kafka-python stamps records with real time, and the
timestamp bounds are checked against the log's clock) and a FakeScheduler, so no background task
runs. Tests never sleep: they wait on sockets with timeouts, or poll a server gauge.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import queue
import re
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse

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
    loop: asyncio.AbstractEventLoop | None = None  # the server's event loop, where the fixture knows it

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def connect(self) -> RawClient:
        return RawClient(socket.create_connection(("127.0.0.1", self.port), timeout=TIMEOUT_S))


def event_loop_props() -> dict[str, str]:
    """``tidelog.server.event.loop`` from ``TIDELOG_TEST_EVENT_LOOP`` when set: the server tests run
    on that loop (``TIDELOG_TEST_EVENT_LOOP=asyncio``; uvloop is the default); a test's own props still win."""
    loop = os.environ.get("TIDELOG_TEST_EVENT_LOOP")
    return {"tidelog.server.event.loop": loop} if loop else {}


def start_broker(data: Path, **props: object) -> tuple[LogManager, ServerThread]:
    broker = BrokerConfig.from_properties({"log.dirs": str(data), **event_loop_props(), **props})
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


def api_versions(client: RawClient) -> Any:
    """An ApiVersions v3 round trip (the cheapest request: the connection is still served)."""
    request = ApiVersionsRequest(client_software_name="tests", client_software_version="1")
    return client.call(request, ApiVersionsResponse, 3)


def wait_until(condition: Callable[[], bool], timeout_s: float = TIMEOUT_S) -> None:
    """Poll ``condition`` (no fixed sleep: it returns as soon as the condition holds)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.001)


LISTENING = r"listening on PLAINTEXT://127\.0\.0\.1:(\d+)"  # the banner of tidelog serve


class Served:
    """A ``tidelog serve`` subprocess (:func:`serve`). A thread reads its stderr line by line, so
    the server never blocks on a full pipe and no line waits unseen in a reader's buffer."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.process = process
        self.seen: list[str] = []  # the stderr lines waited through so far
        self._lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()
        self.banner = self.wait_for_line(LISTENING, timeout_s=60.0)
        self.before_banner = self.seen[:-1]

    @property
    def port(self) -> int:
        return int(self.banner.group(1))

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def connect(self) -> RawClient:
        return RawClient(socket.create_connection(("127.0.0.1", self.port), timeout=TIMEOUT_S))

    def wait_for_line(self, pattern: str, timeout_s: float = 30.0) -> re.Match[str]:
        """The next stderr line matching ``pattern`` (waits on the pipe, never sleeps)."""
        deadline = time.monotonic() + timeout_s
        start = len(self.seen)
        while (left := deadline - time.monotonic()) > 0:
            line = self._next(left)
            if line is None:
                break
            self.seen.append(line)
            if found := re.search(pattern, line):
                return found
        raise AssertionError(f"no line matching {pattern!r} in:\n{''.join(self.seen[start:])}")

    def rest(self) -> str:
        """Once the process has exited: its stderr after the lines waited through."""
        self.process.wait(timeout=60)
        lines = []
        while (line := self._next(TIMEOUT_S)) is not None:
            lines.append(line)
        return "".join(lines)

    def _next(self, timeout_s: float) -> str | None:
        """The next line; None at the end of the stream (which stays ended) or at the timeout."""
        try:
            line = self._lines.get(timeout=timeout_s)
        except queue.Empty:
            return None
        if line is None:
            self._lines.put(None)
        return line

    def _pump(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self._lines.put(line)
        self._lines.put(None)


@contextmanager
def serve(*overrides: str, data: Path | None = None, env: Mapping[str, str] | None = None) -> Iterator[Served]:
    """``tidelog serve`` in a subprocess, as a user starts it (``overrides``: ``key=value``, on a
    free loopback port unless they name the listeners; ``env`` added to this process's), yielded
    once it listens. Afterwards it gets SIGTERM and must exit 0; a test that failed first kills it."""
    args = [sys.executable, "-m", "tidelog.cli.main", *(["--data-dir", str(data)] if data is not None else [])]
    for override in ("listeners=PLAINTEXT://127.0.0.1:0", *overrides):
        args += ["--override", override]
    process = subprocess.Popen([*args, "serve"], stderr=subprocess.PIPE, text=True,
                               env=None if env is None else {**os.environ, **env})
    try:
        yield Served(process)
        process.send_signal(signal.SIGTERM)  # nothing when the test already stopped it
        assert process.wait(timeout=60) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
