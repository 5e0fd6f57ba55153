"""One client connection: size-prefixed frames in, responses out in request order.

Framing: ``int32 size`` then ``size`` bytes. A size below 0 or above ``socket.request.max.bytes``
closes the connection before anything is read or allocated for it (Kafka's
InvalidReceiveException). A frame then reserves its size from the server's
:class:`~tidelog.server.memory_pool.RequestMemoryPool` (``queued.max.request.bytes``) before its
body is read, and keeps it until the request has been handled. Requests are handled one after
the other, as Kafka's broker mutes a connection until its response is sent: a client may pipeline
requests (they wait, buffered, in the socket), and gets the responses in the order it sent them;
appends from one producer connection land in its order.

Pipelined Produce requests are handled together: when a Produce frame has been read and the
stream already holds further whole Produce frames (up to :data:`PIPELINED_PRODUCES` in all, each
small enough that the memory pool does not count it), their appends run in one thread-pool call
(:func:`~tidelog.server.produce.handle_produces`), in request order, and their responses go out
in order in one write, each request counted as if alone. A failed acks=0 request or a frame that
does not decode ends the group: nothing after it is appended, and the connection closes after the
answers before it. The frames ahead are found by looking at the stream's buffer
(:func:`_produces_ahead`) rather than by a read-ahead task feeding a queue: nothing is read
beyond what the connection holds anyway, a non-Produce request still waits for the answers
before it, and the common path pays no task switch or queue per request.

Closed instead of answered, as Kafka does: a frame that does not parse, an unknown API key, an
unsupported version (but ApiVersions), an acks=0 Produce that failed. Responses already sent
stay sent. Nothing a client sends escapes this module as an exception; nor does a bug in serving
a connection, which closes that connection, logged with its peer and traceback.

On a SASL listener, frames go to the connection's
:class:`~tidelog.server.security.sasl.SaslAuthenticator` until it completes (its own size limit,
``sasl.server.max.receive.size``, applies until then: a larger size prefix closes the connection,
logged with that key's name); only then to KafkaApis. TLS is below this
module: asyncio hands over a connection once its handshake succeeded.

Idle connections (Kafka's Selector idle expiry, ``connections.max.idle.ms``): an
:class:`IdleExpiry` timer closes a connection that has received no request and sent no response
for that long. A request being handled (a long-poll Fetch, a delayed Produce, a JoinGroup waiting
for the rebalance) is not idleness; a request arriving slower than the limit is, and so is a
response the client does not read: the time counts from the last chunk the socket took, as
Kafka's Selector counts any socket activity, so a client that never reads cannot hold the
records of its response in memory for longer than the limit. The hot path
pays one clock read per request; the timer fires once per idle period, however many requests came.

Responses are written in chunks of at most :data:`WRITE_CHUNK` bytes, waiting for the transport to
drain before it holds more: a response is never copied whole into the transport's buffer (which,
before Python 3.12, copies what the socket did not take at once), and a client that reads slowly
holds only what it has not been sent yet. A Fetch's records read as file slices (plaintext
listeners) are handed to the kernel with sendfile instead (:mod:`.file_send`).
"""

from __future__ import annotations

import asyncio
import logging
import struct

from tidelog.server import kafka_apis
from tidelog.server.codec import PRODUCE, Request, decode_request
from tidelog.server.context import ApiContext, ConnectionInfo
from tidelog.server.errors import ErrorCode, MalformedRequestError, UnsupportedRequestError
from tidelog.server.fetch_response import ResponseParts
from tidelog.server.file_send import send_slice
from tidelog.server.memory_pool import RequestMemoryPool
from tidelog.server.metrics.request_names import api_name, metric_names
from tidelog.server.produce import AcksZeroFailure, handle_produces
from tidelog.server.security.sasl import SaslAuthenticator
from tidelog.storage.file_slice import FileSlice

log = logging.getLogger(__name__)
_SIZE = struct.Struct(">i")
_CLOSE = b"<close>"  # what _handle_frame returns to close the connection
_AHEAD = struct.Struct(">ih")  # a buffered frame's size prefix and API key
_PRODUCE_KEY = PRODUCE.to_bytes(2, "big")
PIPELINED_PRODUCES = 16  # most Produce frames of one connection handled together (one thread-pool call)
WRITE_CHUNK = 1 << 20
Response = bytes | ResponseParts


class IdleExpiry:
    """Aborts ``writer``'s connection once it was idle ``idle_ms`` (negative: never). Event-loop only.

    Call :meth:`busy` when a request has been read and :meth:`done` once it is answered; the
    timer re-arms itself from the last :meth:`done` rather than being reset per request.
    """

    def __init__(self, writer: asyncio.StreamWriter, idle_ms: int, peer: str) -> None:
        self._writer = writer
        self._idle_s = idle_ms / 1000
        self._peer = peer
        self._loop = asyncio.get_running_loop()
        self._busy = False
        self._last = self._loop.time()
        self._timer: asyncio.TimerHandle | None = None
        if idle_ms >= 0:
            self._timer = self._loop.call_at(self._last + self._idle_s, self._expire)

    def busy(self) -> None:
        self._busy = True

    def done(self) -> None:
        self._busy = False
        self._last = self._loop.time()

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _expire(self) -> None:
        now = self._loop.time()
        if self._busy or now < self._last + self._idle_s:
            self._timer = self._loop.call_at((now if self._busy else self._last) + self._idle_s, self._expire)
            return
        self._timer = None
        log.debug("%s: closing connection idle for %.0f ms (connections.max.idle.ms)", self._peer,
                  (now - self._last) * 1000)
        self._writer.transport.abort()  # nothing to flush; no TLS close_notify exchange to wait for


async def serve_connection(ctx: ApiContext, conn: ConnectionInfo, reader: asyncio.StreamReader,
                           writer: asyncio.StreamWriter, authenticator: SaslAuthenticator | None = None,
                           pool: RequestMemoryPool | None = None) -> None:
    """Serve requests until the client leaves, sends something that closes the connection, stays
    idle ``connections.max.idle.ms``, or the task is cancelled (server shutdown); then close the
    socket. With an ``authenticator``, the client must authenticate first. Request bytes are
    reserved from ``pool`` (unbounded without one)."""
    idle = IdleExpiry(writer, ctx.config.connections_max_idle_ms, conn.peer)
    pool = pool if pool is not None else RequestMemoryPool(0)
    try:
        if authenticator is not None and not await _authenticate(ctx, conn, reader, writer, authenticator, idle,
                                                                  pool):
            return
        limit = ctx.config.socket_request_max_bytes
        clock = ctx.manager.clock
        while (size := await _read_size(reader, limit, "socket.request.max.bytes", conn)) is not None:
            async with pool.reserve(size):
                frame = await reader.readexactly(size)
                started = clock.nanoseconds()  # TotalTimeMs runs from here to the response written
                idle.busy()
                ahead = _produces_ahead(reader, limit, pool) if frame[:2] == _PRODUCE_KEY else None
                if ahead:
                    answers = await _handle_produces(ctx, conn, [(frame, started)] + [
                        (await _read_buffered(reader, n), clock.nanoseconds()) for n in ahead])
                else:
                    answers = [(*await _handle_frame(ctx, conn, frame), started)]
                del frame  # its bytes go back to the pool now, not at the next request
            idle.done()  # handled; from here a response the client does not take is idleness
            if not await _answer(ctx, writer, answers, idle):
                return
            answers = None  # sent: the records they held are not kept while the next request is awaited
    except (ConnectionError, asyncio.IncompleteReadError):
        pass  # the client went away, or the connection expired mid-frame
    except Exception:  # a bug here, not the client's input: the connection closes, the server goes on
        log.exception("%s: closing connection: unexpected error", conn.peer)
    finally:
        idle.cancel()
        if writer.transport.get_write_buffer_size():
            writer.transport.abort()  # cut off mid-response: a client not reading would hold a close forever
        else:
            writer.close()
        try:
            await writer.wait_closed()
        except (ConnectionError, OSError, asyncio.CancelledError):
            pass


async def _authenticate(ctx: ApiContext, conn: ConnectionInfo, reader: asyncio.StreamReader,
                        writer: asyncio.StreamWriter, authenticator: SaslAuthenticator, idle: IdleExpiry,
                        pool: RequestMemoryPool) -> bool:
    """Run the SASL exchange; True once the client is authenticated, False to close."""
    limit, key = ctx.config.socket_request_max_bytes, "socket.request.max.bytes"
    if authenticator.max_receive_size < limit:
        limit, key = authenticator.max_receive_size, "sasl.server.max.receive.size (before authentication)"
    while not authenticator.complete:
        size = await _read_size(reader, limit, key, conn)
        if size is None:
            return False
        async with pool.reserve(size):
            frame = await reader.readexactly(size)
            idle.busy()
            step = await authenticator.receive(frame)
            del frame
        if step.response:
            writer.write(step.response)
            await writer.drain()
        if step.close:
            return False
        idle.done()
    return True


async def _read_size(reader: asyncio.StreamReader, max_bytes: int, key: str, conn: ConnectionInfo) -> int | None:
    """The size prefix of the next request frame; None at a clean end of stream or when it is
    outside ``[0, max_bytes]`` (``key`` names the limit in the log line)."""
    head = await reader.read(_SIZE.size)
    if not head:
        return None
    if len(head) < _SIZE.size:
        head += await reader.readexactly(_SIZE.size - len(head))
    (size,) = _SIZE.unpack(head)
    if size < 0 or size > max_bytes:
        log.warning("%s: closing connection: request size %d is outside [0, %s=%d]", conn.peer, size, key, max_bytes)
        return None
    return size


async def _answer(ctx: ApiContext, writer: asyncio.StreamWriter,
                  answers: list[tuple[Response | None, Request | None, int]], idle: IdleExpiry) -> bool:
    """Write the responses of ``answers`` in order and count each request once its response is
    written; False when the connection is to close (the last answer, after those before it). The
    answers of a group of pipelined Produce requests (small bytes) go out in one write."""
    if len(answers) == 1:
        response, request, started = answers[0]
        if response and response is not _CLOSE:
            await _send(writer, response, idle)
        _count(ctx, request, started)
        return response is not _CLOSE
    closing = answers[-1][0] is _CLOSE
    joined = b"".join(response for response, _, _ in (answers[:-1] if closing else answers) if response)
    if joined:
        await _send(writer, joined, idle)
    for _, request, started in answers:
        _count(ctx, request, started)
    return not closing


def _produces_ahead(reader: asyncio.StreamReader, max_bytes: int, pool: RequestMemoryPool) -> list[int]:
    """The sizes of the Produce frames that ``reader`` already holds whole, right after the frame
    just read (at most :data:`PIPELINED_PRODUCES` - 1 of them; empty when the next frame is not a
    Produce, is not whole yet, or would count against ``pool``). Reads nothing: it looks at the
    stream's buffer (asyncio's ``StreamReader._buffer``, the same class under uvloop, which keeps
    asyncio's streams), bytes the connection holds anyway. O(frames ahead)."""
    buffered = reader._buffer
    end = len(buffered)
    sizes: list[int] = []
    pos = 0
    while len(sizes) < PIPELINED_PRODUCES - 1 and pos + _AHEAD.size <= end:
        size, api_key = _AHEAD.unpack_from(buffered, pos)
        if api_key != PRODUCE or not _AHEAD.size - _SIZE.size <= size <= max_bytes or pool.counted(size) \
                or pos + _SIZE.size + size > end:
            break
        sizes.append(size)
        pos += _SIZE.size + size
    return sizes


async def _read_buffered(reader: asyncio.StreamReader, size: int) -> bytes:
    """The next frame, of ``size`` bytes, which ``reader`` already holds whole (no wait)."""
    await reader.readexactly(_SIZE.size)
    return await reader.readexactly(size)


async def _handle_produces(ctx: ApiContext, conn: ConnectionInfo,
                           frames: list[tuple[bytes, int]]) -> list[tuple[Response | None, Request | None, int]]:
    """Pipelined Produce frames (each with the time it was read), handled together
    (:func:`~tidelog.server.produce.handle_produces`: one thread-pool call for their appends);
    each answered as :func:`_handle_frame` answers it alone, in order, up to the first that closes
    the connection (those after it are dropped, as they would be unread)."""
    answers: list[tuple[Response | None, Request | None, int]] = []
    requests: list[tuple[Request, int]] = []
    closing: tuple[Response | None, Request | None, int] | None = None
    for frame, started in frames:
        try:
            requests.append((decode_request(frame), started))
        except (MalformedRequestError, UnsupportedRequestError) as e:
            log.warning("%s: closing connection: %s", conn.peer, e)
            closing = (_CLOSE, None, started)
            break
    try:
        results = await handle_produces(ctx, [request for request, _ in requests]) if requests else []
    except Exception as e:  # noqa: BLE001 - the pool itself failed (shutting down): the first request closes
        results = [e]
    for (request, started), result in zip(requests, results):
        if isinstance(result, Exception):
            answers.append((_closing(ctx, conn, request, result), request, started))
            return answers
        try:
            answers.append((kafka_apis.respond(ctx, request, result), request, started))
        except Exception as e:  # noqa: BLE001 - a handler bug must not take the server down
            answers.append((_closing(ctx, conn, request, e), request, started))
            return answers
    if closing is not None:
        answers.append(closing)
    return answers


def _closing(ctx: ApiContext, conn: ConnectionInfo, request: Request, error: Exception) -> bytes:
    """``_CLOSE`` for a request whose handler raised ``error``, logged and counted as
    :func:`_handle_frame` does."""
    if isinstance(error, AcksZeroFailure):
        log.info("%s: closing connection: %s", conn.peer, error)
    else:
        log.error("%s: closing connection: failed to handle API key %d v%d", conn.peer, request.api_key,
                  request.api_version, exc_info=error)
        ctx.metrics.requests.on_errors(api_name(request.api_key), (ErrorCode.UNKNOWN_SERVER_ERROR,))
    return _CLOSE


async def _send(writer: asyncio.StreamWriter, response: Response, idle: IdleExpiry) -> None:
    """Write ``response`` in chunks of at most :data:`WRITE_CHUNK`, draining whenever the
    transport holds that much; each drain that completes is activity for ``idle``. File slices
    (a Fetch's records on a plaintext listener) go by sendfile (:mod:`.file_send`); they are
    closed when this returns or raises."""
    if not isinstance(response, ResponseParts):
        parts: tuple[bytes | FileSlice, ...] = (response,)
    else:
        parts = response.parts
    try:
        for part in parts:
            if part.__class__ is FileSlice:
                await send_slice(writer, part, idle, WRITE_CHUNK, idle._idle_s)  # type: ignore[arg-type]
                continue
            view = memoryview(part)  # type: ignore[arg-type]
            for start in range(0, len(view), WRITE_CHUNK):
                writer.write(view[start:start + WRITE_CHUNK])
                if writer.transport.get_write_buffer_size() >= WRITE_CHUNK:
                    await writer.drain()
                    idle.done()
        await writer.drain()
    finally:
        if isinstance(response, ResponseParts):
            response.close()


def _count(ctx: ApiContext, request: Request | None, started_ns: int) -> None:
    """RequestsPerSec and TotalTimeMs of a request answered (or closed on); a frame that did not
    decode is not a request (Kafka counts none either). O(1), event loop, no lock."""
    if request is not None:
        elapsed_ms = (ctx.manager.clock.nanoseconds() - started_ns) / 1e6
        ctx.metrics.requests.on_request(metric_names(request.api_key), request.api_version, elapsed_ms)


async def _handle_frame(ctx: ApiContext, conn: ConnectionInfo,
                        frame: bytes) -> tuple[Response | None, Request | None]:
    """The response bytes, None for no response, or ``_CLOSE``; and the decoded request (None
    when the frame did not decode)."""
    try:
        request = decode_request(frame)
    except (MalformedRequestError, UnsupportedRequestError) as e:
        log.warning("%s: closing connection: %s", conn.peer, e)
        return _CLOSE, None
    try:
        return await kafka_apis.handle(ctx, conn, request), request
    except Exception as e:  # noqa: BLE001 - AcksZeroFailure, or a handler bug: must not take the server down
        return _closing(ctx, conn, request, e), request
