"""A fault-injecting HTTP proxy on loopback in front of a real S3 server, for the remote tier's fault tests.

``FaultProxy(upstream_url)`` listens on a free 127.0.0.1 port; a client pointed at
:attr:`FaultProxy.endpoint_url` reaches the upstream server (SeaweedFS's S3) through it. Every
request passes through unchanged until a fault is switched on, at runtime, from the test:

- :meth:`~FaultProxy.fail`: answer ``status`` (503 ``SlowDown``, 500 ``InternalError``, 403
  ``AccessDenied`` ...) with S3's XML error body instead of forwarding, for the next ``count``
  matching requests or until cleared;
- :meth:`~FaultProxy.delay`: forward, but hold each matching response ``seconds`` first (a slow store);
- :meth:`~FaultProxy.drop`: close the client's connection without an answer (reset);
- :meth:`~FaultProxy.refuse` / :meth:`~FaultProxy.resume`: stop listening, closing every open
  connection (the client then gets *connection refused*), and listen again on the same port;
- :meth:`~FaultProxy.pass_through`: clear every fault.

A fault matches by HTTP method (``GET``, ``PUT``, ``HEAD``, ``DELETE``, ``POST``) and by a regular
expression searched in the request's URL path (path-style S3: ``/<bucket>/<key>``), both optional.
The first matching fault with requests left applies. :attr:`FaultProxy.requests` records what
each request was and what the proxy did with it.

The proxy speaks HTTP/1.1 with keep-alive (one upstream connection per client connection),
bodies sized by ``Content-Length`` or chunked, and answers ``Expect: 100-continue`` itself.
``stop()`` closes the listener and every connection and joins its threads: nothing it started is
left. Thread-safe: faults may be switched from any thread while requests flow.

Not part of the installed package: tests import it from the repository root.
"""

from __future__ import annotations

import re
import socket
import threading
import time
import uuid
from dataclasses import dataclass
from types import TracebackType
from typing import BinaryIO
from urllib.parse import unquote, urlsplit

from object_store_oracle.server import S3Credentials

_CODES = {400: ("Bad Request", "InvalidRequest"), 403: ("Forbidden", "AccessDenied"),
          404: ("Not Found", "NoSuchKey"), 429: ("Too Many Requests", "SlowDown"),
          500: ("Internal Server Error", "InternalError"), 503: ("Service Unavailable", "SlowDown")}
_MAX_HEAD = 64 << 10
_READ = 1 << 20


@dataclass(slots=True)
class _Fault:
    action: str  # "fail", "delay", "drop"
    method: str | None
    key: re.Pattern[str] | None
    remaining: int | None  # None: until cleared
    status: int = 0
    code: str = ""
    seconds: float = 0.0

    def matches(self, method: str, path: str) -> bool:
        if self.remaining is not None and self.remaining <= 0:
            return False
        if self.method is not None and self.method != method:
            return False
        return self.key is None or self.key.search(path) is not None


@dataclass(frozen=True, slots=True)
class ProxiedRequest:
    """One request the proxy saw: method, URL path (unquoted, no query), and what it did
    (``forwarded <status>``, ``injected <status>``, ``delayed <s> then forwarded <status>``, ``dropped``)."""

    method: str
    path: str
    outcome: str


class FaultProxy:
    """The proxy (module docstring); a context manager. ``upstream_url``: ``http://host:port``."""

    def __init__(self, upstream_url: str, *, host: str = "127.0.0.1", port: int = 0) -> None:
        parts = urlsplit(upstream_url)
        if parts.scheme != "http" or not parts.hostname or not parts.port:
            raise ValueError(f"the fault proxy forwards to http://host:port, got {upstream_url!r}")
        self.upstream = (parts.hostname, parts.port)
        self.host = host
        self.port = port
        self._lock = threading.Lock()
        self._faults: list[_Fault] = []
        self._listener: socket.socket | None = None
        self._acceptor: threading.Thread | None = None
        self._connections: set[socket.socket] = set()
        self._threads: set[threading.Thread] = set()
        self.requests: list[ProxiedRequest] = []

    @property
    def endpoint_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def store_options(self, credentials: S3Credentials, **changes: str) -> dict[str, str]:
        """The ``rsm.config.*`` options (prefix stripped) of an ``s3://`` store reached through this
        proxy with ``credentials``: one attempt per request (the SDK's own retries would hide the
        faults), short timeouts; ``changes`` override any (``**{"secret.key": "wrong"}``)."""
        options = {"endpoint.url": self.endpoint_url, "access.key": credentials.access_key,
                   "secret.key": credentials.secret_key, "region": credentials.region,
                   "retry.max.attempts": "1", "connect.timeout.ms": "2000", "request.timeout.ms": "5000"}
        return {**options, **changes}

    # --- lifecycle -------------------------------------------------------------------------
    def start(self) -> str:
        """Listen (a free port the first time, the same port after :meth:`refuse`); returns the endpoint URL."""
        with self._lock:
            if self._listener is not None:
                return self.endpoint_url
            listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind((self.host, self.port))
            listener.listen(64)
            self.port = listener.getsockname()[1]
            self._listener = listener
            self._acceptor = threading.Thread(target=self._accept, args=(listener,), name="fault-proxy-accept",
                                              daemon=True)
            self._acceptor.start()
        return self.endpoint_url

    def refuse(self) -> None:
        """Stop listening and close every open connection: clients now get *connection refused*."""
        with self._lock:
            listener, self._listener = self._listener, None
            acceptor, self._acceptor = self._acceptor, None
            connections, self._connections = self._connections, set()
        if listener is not None:
            _close_listener(listener)
        for conn in connections:
            _abort(conn)
        if acceptor is not None:
            acceptor.join(5.0)

    def resume(self) -> str:
        """Listen again on the same port after :meth:`refuse`."""
        return self.start()

    def stop(self) -> None:
        """Stop listening, close every connection and join every thread the proxy started; idempotent."""
        self.refuse()
        with self._lock:
            threads, self._threads = self._threads, set()
        for thread in threads:
            thread.join(5.0)

    def __enter__(self) -> FaultProxy:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    # --- faults ----------------------------------------------------------------------------
    def fail(self, status: int = 503, *, count: int | None = None, method: str | None = None,
             key: str | None = None, code: str | None = None) -> None:
        """Answer ``status`` with S3's XML error (``code``: S3's error code, by default the usual
        one for the status) to the next ``count`` matching requests (all, until cleared, when ``None``)."""
        default = _CODES.get(status, ("Error", "InternalError"))[1]
        self._add(_Fault("fail", method, _pattern(key), count, status=status, code=code or default))

    def delay(self, seconds: float, *, count: int | None = None, method: str | None = None,
              key: str | None = None) -> None:
        """Hold each matching response ``seconds`` before relaying it (a slow store)."""
        self._add(_Fault("delay", method, _pattern(key), count, seconds=seconds))

    def drop(self, *, count: int | None = None, method: str | None = None, key: str | None = None) -> None:
        """Close the client's connection (with a reset) instead of answering matching requests."""
        self._add(_Fault("drop", method, _pattern(key), count))

    def pass_through(self) -> None:
        """Clear every fault: requests are forwarded unchanged."""
        with self._lock:
            self._faults.clear()

    def outcomes(self, action: str = "") -> list[ProxiedRequest]:
        """The requests so far whose outcome starts with ``action`` ('' = all). Thread-safe."""
        with self._lock:
            return [r for r in self.requests if r.outcome.startswith(action)]

    def _add(self, fault: _Fault) -> None:
        if fault.method is not None:
            fault.method = fault.method.upper()
        with self._lock:
            self._faults.append(fault)

    def _take(self, method: str, path: str) -> _Fault | None:
        with self._lock:
            for fault in self._faults:
                if fault.matches(method, path):
                    if fault.remaining is not None:
                        fault.remaining -= 1
                    return fault
        return None

    def _record(self, method: str, path: str, outcome: str) -> None:
        with self._lock:
            self.requests.append(ProxiedRequest(method, path, outcome))

    # --- serving ---------------------------------------------------------------------------
    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return  # closed by refuse/stop
            thread = threading.Thread(target=self._serve, args=(conn,), name="fault-proxy-conn", daemon=True)
            with self._lock:
                if self._listener is not listener:
                    _abort(conn)
                    return
                self._connections.add(conn)
                self._threads = {t for t in self._threads if t.is_alive()}
                self._threads.add(thread)
            thread.start()

    def _serve(self, client: socket.socket) -> None:
        upstream: socket.socket | None = None
        try:
            reader = client.makefile("rb")
            upstream_reader: BinaryIO | None = None
            while True:
                request = _read_request(reader, client)
                if request is None:
                    return
                method, path, head, body = request
                fault = self._take(method, path)
                if fault is not None and fault.action == "drop":
                    self._record(method, path, "dropped")
                    return
                if fault is not None and fault.action == "fail":
                    self._record(method, path, f"injected {fault.status}")  # before the client can see it
                    client.sendall(_error_response(method, path, fault.status, fault.code))
                    continue
                if upstream is None:
                    upstream = socket.create_connection(self.upstream, timeout=120)
                    upstream_reader = upstream.makefile("rb")
                    with self._lock:
                        self._connections.add(upstream)
                assert upstream_reader is not None
                upstream.sendall(head + body)
                status, response, closes = _read_response(upstream_reader, method)
                outcome = f"forwarded {status}"
                if fault is not None and fault.action == "delay":
                    time.sleep(fault.seconds)
                    outcome = f"delayed {fault.seconds:g} then {outcome}"
                self._record(method, path, outcome)
                client.sendall(response)
                if closes:
                    return
        except (OSError, ValueError):
            return  # a closed or reset connection (refuse, drop, the client going away)
        finally:
            for conn in (client, upstream):
                if conn is not None:
                    with self._lock:
                        self._connections.discard(conn)
                    _abort(conn)


def _pattern(key: str | None) -> re.Pattern[str] | None:
    return None if key is None else re.compile(key)


def _abort(conn: socket.socket) -> None:
    """Close with a reset (SO_LINGER 0), as a crashed server or a dropping load balancer does."""
    try:
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    except OSError:
        pass
    try:
        conn.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    conn.close()


def _close_listener(listener: socket.socket) -> None:
    try:
        listener.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread
    except OSError:
        pass
    listener.close()


def _read_head(reader: BinaryIO) -> list[bytes] | None:
    """The header lines (request or status line first), ``None`` at a clean end of the stream."""
    lines: list[bytes] = []
    size = 0
    while True:
        line = reader.readline(_MAX_HEAD)
        if not line:
            if lines:
                raise ValueError("the stream ended inside an HTTP head")
            return None
        size += len(line)
        if size > _MAX_HEAD:
            raise ValueError("HTTP head too large")
        if line in (b"\r\n", b"\n"):
            if not lines:
                continue  # a stray CRLF between messages
            return lines
        lines.append(line)


def _headers(lines: list[bytes]) -> dict[str, str]:
    found: dict[str, str] = {}
    for line in lines[1:]:
        name, _, value = line.decode("latin-1").partition(":")
        found[name.strip().lower()] = value.strip()
    return found


def _read_body(reader: BinaryIO, headers: dict[str, str]) -> bytes | None:
    """The raw body (chunked bodies kept chunked), ``None`` when it runs to the end of the stream."""
    if "chunked" in headers.get("transfer-encoding", "").lower():
        parts: list[bytes] = []
        while True:
            size_line = reader.readline(_MAX_HEAD)
            parts.append(size_line)
            size = int(size_line.split(b";")[0].strip() or b"0", 16)
            if size == 0:
                while True:  # trailers, then the empty line
                    trailer = reader.readline(_MAX_HEAD)
                    parts.append(trailer)
                    if trailer in (b"\r\n", b"\n", b""):
                        return b"".join(parts)
            parts.append(_read_exactly(reader, size + 2))
    if "content-length" in headers:
        return _read_exactly(reader, int(headers["content-length"]))
    return None


def _read_exactly(reader: BinaryIO, count: int) -> bytes:
    data = bytearray()
    while len(data) < count:
        piece = reader.read(min(_READ, count - len(data)))
        if not piece:
            raise ValueError("the stream ended inside an HTTP body")
        data += piece
    return bytes(data)


def _read_request(reader: BinaryIO, client: socket.socket) -> tuple[str, str, bytes, bytes] | None:
    lines = _read_head(reader)
    if lines is None:
        return None
    method, target, _ = lines[0].decode("latin-1").split(" ", 2)
    headers = _headers(lines)
    if headers.get("expect", "").lower() == "100-continue":
        client.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
        lines = [line for line in lines if not line.lower().startswith(b"expect:")]
    body = _read_body(reader, headers) or b""
    path = unquote(urlsplit(target).path)
    return method.upper(), path, b"".join(lines) + b"\r\n", body


def _read_response(reader: BinaryIO, method: str) -> tuple[int, bytes, bool]:
    """Status, the raw response, and whether the connection closes after it."""
    while True:
        lines = _read_head(reader)
        if lines is None:
            raise ValueError("the upstream server closed the connection without an answer")
        status = int(lines[0].split()[1])
        if status >= 200 or status == 101:
            break  # 1xx interim answers are not relayed: the proxy answered 100-continue itself
    headers = _headers(lines)
    closes = headers.get("connection", "").lower() == "close"
    if method == "HEAD" or status in (204, 304):
        body = b""
    else:
        found = _read_body(reader, headers)
        if found is None:
            found, closes = reader.read(), True
        body = found
    return status, b"".join(lines) + b"\r\n" + body, closes


def _error_response(method: str, path: str, status: int, code: str) -> bytes:
    """S3's answer to a failed request: its XML error body (none for HEAD), keep-alive."""
    reason = _CODES.get(status, ("Error", code))[0]
    request_id = uuid.uuid4().hex[:16].upper()
    body = b"" if method == "HEAD" else (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f"<Error><Code>{code}</Code><Message>injected by the fault proxy: {reason}</Message>"
        f"<Resource>{_xml(path)}</Resource><RequestId>{request_id}</RequestId></Error>").encode()
    head = (f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/xml\r\nx-amz-request-id: {request_id}\r\n"
            f"Content-Length: {len(body)}\r\n\r\n")
    return head.encode() + body


def _xml(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
