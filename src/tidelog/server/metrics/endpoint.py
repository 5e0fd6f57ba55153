"""The Prometheus endpoint: ``GET /metrics`` on ``metrics.listener``, in its own threads.

**Bounded.** One thread runs a small asyncio loop that accepts and reads requests and writes
responses; the exposition (``prometheus_client.exposition.generate_latest``) runs on
:data:`WORKERS` worker threads. Nothing runs on the broker's event loop or thread pool. At most
:data:`MAX_CONNECTIONS` scrape connections are open at once. A new one beyond that closes the
oldest connection still sending its request head (a silent client makes room for one that
speaks); when every open one has sent its request, the new one is answered 503 and closed at
once. A connection gets :data:`TIMEOUT_S` to send its request head and, separately, to take its
response: a scraper that sends nothing, or never reads, is cut off then, holding only its socket
meanwhile (never a worker thread, which only builds the bytes). So however many idle or slow
scrapers connect, the broker's threads are untouched and a normal scrape still gets its answer.

**HTTP.** One request per connection (``Connection: close``). ``GET /metrics`` (any query string)
→ 200 with ``CONTENT_TYPE_LATEST``, gzip-encoded when the request's ``Accept-Encoding`` lists gzip
(as prometheus_client's own server does). Another path → 404; another method on ``/metrics`` →
405 with ``Allow: GET``; a request head that does not parse or exceeds 8 KiB → 400. A collector
that raises answers 500 (logged here, never sent to the client).

**One rendering serves every scraper of an interval.** Rendering costs CPU in the broker's
process (under the GIL: ~40 ms per 1,000 partitions here), so what bounds a scraper's cost is how
often the exposition is built, not how many threads may build it. A rendering is served to every
scrape until it is ``render_interval_s`` old (``tidelog.metrics.min.render.interval.ms``, default
1 s) **and** :data:`RENDER_CPU_BUDGET` of the time since it was built covers the CPU time it took
(so a 40 ms rendering serves 2 s, a 600 ms one for 10,000 partitions 30 s); scrapes arriving while
one renders wait for it and share it. However many scrapers come, however often, and however many
partitions there are, rendering takes at most that share of one core; the figures served are at
most that old (Prometheus scrapes every 15 s to 1 min). An interval of 0 renders every scrape (no
budget either: for tests that need each scrape exact).

**Locks.** The collectors read lock-free state (see :mod:`.broker_metrics` and the manager's
collector); a scrape takes the registry's own lock, briefly, to list its collectors, and the
endpoint's rendering lock (its own threads only, never the broker's).
"""

from __future__ import annotations

import asyncio
import gzip
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import CollectorRegistry

from tidelog.clock import SYSTEM_CLOCK, Clock

log = logging.getLogger(__name__)
WORKERS = 2
MAX_CONNECTIONS = 16
TIMEOUT_S = 5.0
HEAD_LIMIT = 8192
REFUSAL_LINGER_S = 0.5
BACKLOG = 128  # connections the kernel queues before the loop accepts them (not a limit on scrapes)
PATH = "/metrics"
RENDER_CPU_BUDGET = 0.02  # the most of one core rendering may take, however often scrapers come


@dataclass(slots=True)
class _Rendering:
    """One exposition: when it was built (the clock's monotonic ns), how long it is served, its text,
    and its gzip form once a scraper asked for it."""

    at_ns: int
    served_ns: int
    text: bytes
    gzipped: bytes | None = None


class MetricsEndpoint:
    """Serves ``registry`` at ``http://host:port/metrics`` until :meth:`stop`. :meth:`start` binds
    (port 0: a free one; OSError when it cannot) and returns the bound port. Thread-safe:
    :meth:`start` and :meth:`stop` may be called from any thread, once each."""

    def __init__(self, registry: CollectorRegistry, host: str, port: int, *, workers: int = WORKERS,
                 max_connections: int = MAX_CONNECTIONS, timeout_s: float = TIMEOUT_S,
                 render_interval_s: float = 0.0, clock: Clock = SYSTEM_CLOCK,
                 cpu_time_ns: Callable[[], int] = time.thread_time_ns) -> None:
        self._registry = registry
        self._render_interval_ns = int(render_interval_s * 1e9)  # 0: every scrape renders
        self._clock = clock
        self._cpu_time_ns = cpu_time_ns  # the rendering thread's CPU time: what a rendering cost
        self._render_lock = threading.Lock()  # one rendering at a time; the others wait and share it
        self._rendering: _Rendering | None = None
        self._host = host
        self._port = port
        self._max_connections = max_connections
        self._timeout_s = timeout_s
        self._workers = ThreadPoolExecutor(workers, thread_name_prefix="tidelog-metrics-worker")
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name="tidelog-metrics", daemon=True)
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._server: asyncio.Server | None = None
        self._open = 0  # connections open; event-loop thread only
        self._refusing = 0  # connections being refused (503); event-loop thread only
        self._heads: dict[int, asyncio.StreamWriter] = {}  # connections still sending their head, oldest first
        self.port = 0

    @property
    def url(self) -> str:
        """Where the endpoint serves, once started."""
        host = f"[{self._host}]" if ":" in self._host else self._host
        return f"http://{host}:{self.port}{PATH}"

    @property
    def answering(self) -> int:
        """Connections whose request head was read and that are being answered (a gauge, any thread)."""
        return self._open - len(self._heads)

    def start(self) -> int:
        """Bind and serve; the bound port (OSError if the address cannot be bound)."""
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            self._thread.join()
            self._workers.shutdown(wait=False)
            raise self._error
        return self.port

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._server = self._loop.run_until_complete(asyncio.start_server(
                self._serve, self._host, self._port, limit=HEAD_LIMIT, backlog=BACKLOG,
                reuse_address=True))
            self.port = self._server.sockets[0].getsockname()[1]
        except BaseException as e:  # noqa: BLE001 - handed to the thread that called start()
            self._error = e
            self._ready.set()
            self._loop.close()
            return
        self._ready.set()
        try:
            self._loop.run_forever()
        finally:
            self._loop.run_until_complete(self._close())
            self._loop.close()

    async def _close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        tasks = [t for t in asyncio.all_tasks(self._loop) if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def stop(self) -> None:
        """Stop listening, drop open scrapes, and end the threads. Idempotent."""
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join()
        self._workers.shutdown(wait=True, cancel_futures=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._open >= self._max_connections:
            if not self._heads:
                await self._refuse(reader, writer)
                return
            oldest = next(iter(self._heads))  # a silent connection makes room for one that may speak
            self._heads.pop(oldest).transport.abort()  # its task ends at the loop's next turn
        self._open += 1
        try:
            await self._answer(reader, writer)
        except (TimeoutError, ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, OSError):
            pass  # a slow, silent or vanished scraper: dropped
        except asyncio.CancelledError:
            pass  # the endpoint stops: the connection is dropped below
        finally:
            self._open -= 1
            self._heads.pop(id(writer), None)
            _close(writer)

    async def _refuse(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """503 at once; the request head is read (for at most :data:`REFUSAL_LINGER_S`) only so
        that closing does not reset the connection before the scraper reads the answer. At most
        ``max_connections`` refusals linger at once; beyond, the connection is just closed."""
        if self._refusing >= self._max_connections:
            writer.transport.abort()
            return
        self._refusing += 1
        try:
            writer.write(_response(503, "Service Unavailable", b"too many scrapes at once\n"))
            await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), REFUSAL_LINGER_S)
        except (TimeoutError, ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError,
                OSError, asyncio.CancelledError):
            pass
        finally:
            self._refusing -= 1
            _close(writer)

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._heads[id(writer)] = writer
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), self._timeout_s)
        except (asyncio.LimitOverrunError, ValueError):
            writer.write(_response(400, "Bad Request", b"request head too large\n"))
            await asyncio.wait_for(writer.drain(), self._timeout_s)
            return
        finally:
            self._heads.pop(id(writer), None)
        request = _parse_head(head)
        if request is None:
            response = _response(400, "Bad Request", b"malformed request\n")
        elif request[1].split("?", 1)[0] != PATH:
            response = _response(404, "Not Found", b"only /metrics is served\n")
        elif request[0] != "GET":
            response = _response(405, "Method Not Allowed", b"only GET\n", extra=(("Allow", "GET"),))
        else:
            response = self._served_rendering(request[2])
            if response is None:  # none fresh: a worker renders (or waits for the rendering under way)
                response = await asyncio.get_running_loop().run_in_executor(self._workers, self._exposition,
                                                                            request[2])
        writer.write(response)
        await asyncio.wait_for(writer.drain(), self._timeout_s)

    def _served_rendering(self, accepts_gzip: bool) -> bytes | None:
        """The framed 200 response of the last rendering while it is served, or None. Runs on the
        endpoint's loop thread without a lock (one attribute read): a scrape answered from the last
        rendering wakes no worker, so it costs the broker's process one thread's work, not three
        threads handing the GIL to each other."""
        rendering = self._rendering
        if rendering is None or not 0 <= self._clock.nanoseconds() - rendering.at_ns < rendering.served_ns:
            return None
        body = rendering.gzipped if accepts_gzip else rendering.text
        if body is None:
            return None
        extra = (("Content-Encoding", "gzip"),) if accepts_gzip else ()
        return _response(200, "OK", body, content_type=CONTENT_TYPE_LATEST, extra=extra)

    def _exposition(self, accepts_gzip: bool) -> bytes:
        """The framed 200 response (500 if a collector fails). Runs on a worker thread."""
        try:
            body = self._body(accepts_gzip)
        except Exception:  # noqa: BLE001 - logged here; the client gets a plain 500
            log.exception("metrics scrape failed")
            return _response(500, "Internal Server Error", b"scrape failed; see the broker's log\n")
        extra = (("Content-Encoding", "gzip"),) if accepts_gzip else ()
        return _response(200, "OK", body, content_type=CONTENT_TYPE_LATEST, extra=extra)

    def _body(self, gzipped: bool) -> bytes:
        """The last rendering when it is younger than the render interval, else a new one (see the
        module doc). Worker threads only; takes the rendering lock."""
        with self._render_lock:
            now = self._clock.nanoseconds()
            rendering = self._rendering
            if rendering is None or not 0 <= now - rendering.at_ns < rendering.served_ns:
                rendering = self._rendering = self._render(now)
            if not gzipped:
                return rendering.text
            if rendering.gzipped is None:
                rendering.gzipped = gzip.compress(rendering.text, compresslevel=1)
            return rendering.gzipped

    def _render(self, now_ns: int) -> _Rendering:
        """A new exposition, served for the render interval or as long as the CPU budget needs."""
        started = self._cpu_time_ns()
        text = generate_latest(self._registry)
        cost = self._cpu_time_ns() - started
        served = max(self._render_interval_ns, int(cost / RENDER_CPU_BUDGET)) if self._render_interval_ns else 0
        return _Rendering(now_ns, served, text)


def _close(writer: asyncio.StreamWriter) -> None:
    """Close at once: what the scraper did not take is dropped, never waited for."""
    if writer.transport.get_write_buffer_size():
        writer.transport.abort()
    else:
        writer.close()


def _parse_head(head: bytes) -> tuple[str, str, bool] | None:
    """``(method, target, accepts gzip)`` of an HTTP/1.x request head, or None."""
    try:
        lines = head.decode("latin-1").split("\r\n")
    except UnicodeDecodeError:
        return None
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1.") or not (parts[0].isascii() and parts[0].isalpha()):
        return None
    accepts_gzip = False
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if sep and name.strip().lower() == "accept-encoding":
            accepts_gzip = accepts_gzip or "gzip" in value.lower()
    return parts[0], parts[1], accepts_gzip


def _response(status: int, reason: str, body: bytes, *, content_type: str = "text/plain; charset=utf-8",
              extra: tuple[tuple[str, str], ...] = ()) -> bytes:
    headers = [f"HTTP/1.1 {status} {reason}", f"Content-Type: {content_type}", f"Content-Length: {len(body)}",
               "Connection: close", *(f"{name}: {value}" for name, value in extra)]
    return ("\r\n".join(headers) + "\r\n\r\n").encode("latin-1") + body
