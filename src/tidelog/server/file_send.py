"""Sending a response's :class:`~tidelog.storage.file_slice.FileSlice` parts: the kernel copies
the file to the socket (``sendfile``) where the transport allows it, as Kafka's
``FileRecords.writeTo`` does; elsewhere the bytes pass through one reused buffer per connection.

sendfile, in two steps. When the transport buffers nothing (what came before, the frame's header,
is on the wire), ``os.sendfile`` on the socket at once sends what the socket takes without
waiting: most responses, whole, for one system call and no event-loop round. What is left then
goes by ``loop.sendfile`` (asyncio's: it waits until the transport's buffer is written, pauses
reading, calls ``os.sendfile`` whenever the socket takes more) in pieces of at most ``chunk``
bytes, each piece counting as activity for the connection's idle expiry
(``connections.max.idle.ms``): a piece the client has not taken within that limit closes the
connection, as a response it does not read would. A file cut short underneath (fewer bytes sent
than the slice holds), or failing to read, aborts the connection: the frame's size is already on
the wire, so nothing else can follow it; a warning names the file.

The fallback, for what sendfile cannot send (TLS: the bytes must be encrypted; an event loop
such as uvloop that has no ``loop.sendfile``, for what the first step left; a kernel or file
system refusing sendfile), ``pread``\\ s at most ``chunk`` bytes into the connection's buffer,
writes them, and waits until the transport has handed them to the socket before the buffer is
read into again (a transport may keep a reference to what it was given rather than a copy). A
connection learns once which steps its transport refuses (the first refusal, before anything of
a slice was sent) and skips them from then on.

Event loop only. Costs per slice: its ``dup``-ed descriptor (the slice's own, closed by the
caller); for the second step an unbuffered file object over it; for the fallback one buffer of
``chunk`` bytes per connection, kept while the connection lives.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import weakref
from typing import NoReturn, Protocol

from tidelog.errors import StorageError
from tidelog.storage.file_slice import FileSlice

log = logging.getLogger(__name__)

# errno of a sendfile the kernel refuses for this file or socket (rather than a socket gone)
_REFUSED = frozenset({errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSOCK})


class _Connection:
    """What one connection learned of sendfile, and its fallback buffer once it needs one."""

    __slots__ = ("buffer", "direct", "waiting", "__weakref__")

    def __init__(self) -> None:
        self.direct = True  # os.sendfile on the socket works (refused: never again on this connection)
        self.waiting = True  # loop.sendfile works (a loop without it, a TLS transport: not)
        self.buffer: bytearray | None = None


_connections: weakref.WeakKeyDictionary[asyncio.StreamWriter, _Connection] = weakref.WeakKeyDictionary()


class Activity(Protocol):
    """What the connection's idle expiry needs to know of a send."""

    def busy(self) -> None: ...

    def done(self) -> None: ...


class ResponseCutShort(ConnectionError):
    """A file slice ended before its size, or failed to read: the connection was aborted mid-frame."""


async def send_slice(writer: asyncio.StreamWriter, part: FileSlice, idle: Activity, chunk: int,
                     idle_s: float) -> None:
    """Write ``part``'s bytes to ``writer`` (after what it was given before): sendfile where the
    transport takes it, else through the connection's buffer; ``idle_s`` the connection's idle
    limit (negative: none). ConnectionError when the connection is lost or aborted meanwhile."""
    state = _connections.get(writer)
    if state is None:
        state = _connections[writer] = _Connection()
        if writer.get_extra_info("sslcontext") is not None or writer.get_extra_info("ssl_object") is not None:
            state.direct = state.waiting = False  # the bytes must go through the TLS layer
    sent = 0
    if state.direct and not writer.transport.get_write_buffer_size():
        sent = _sendfile_now(writer, part, state, idle)
    if sent < part.size and state.waiting:
        sent = await _sendfile(writer, part, sent, state, idle, chunk, idle_s)
    if sent < part.size:
        if state.buffer is None:
            state.buffer = bytearray(chunk)
        await _copy(writer, part, sent, idle, memoryview(state.buffer))


def uses_fallback(writer: asyncio.StreamWriter) -> bool:
    """Whether ``writer``'s connection sends slices through its buffer (sendfile refused)."""
    state = _connections.get(writer)
    return state is not None and not (state.direct or state.waiting)


def _sendfile_now(writer: asyncio.StreamWriter, part: FileSlice, state: _Connection, idle: Activity) -> int:
    """``os.sendfile`` on the socket, at once, as much as it takes without waiting (the transport
    buffers nothing, so these bytes come next on the wire); returns what was sent."""
    if writer.transport.is_closing():
        raise ConnectionResetError("connection closed while sending a response")
    sock = writer.get_extra_info("socket")
    if sock is None:
        state.direct = False
        return 0
    out, fd, size = sock.fileno(), part.fileno(), part.size
    done = 0
    while done < size:
        try:
            n = os.sendfile(out, fd, part.position + done, size - done)
        except (BlockingIOError, InterruptedError):
            break
        except ConnectionError:
            raise
        except OSError as e:
            if e.errno in _REFUSED and not done:
                state.direct = state.waiting = False  # loop.sendfile makes the same call
                return 0
            _failed(writer.transport, part, done, e.strerror or str(e))
        if not n:
            _cut_short(writer.transport, part, done)
        done += n
    if done:
        idle.done()
    return done


async def _sendfile(writer: asyncio.StreamWriter, part: FileSlice, start: int, state: _Connection, idle: Activity,
                    chunk: int, idle_s: float) -> int:
    """Send ``part`` from byte ``start`` by ``loop.sendfile`` (which waits for the socket); returns
    how far it got: the end, or less where the loop or transport refused (then the connection
    uses the fallback)."""
    loop = asyncio.get_running_loop()
    transport = writer.transport
    size = part.size
    done = start
    with os.fdopen(part.fileno(), "rb", buffering=0, closefd=False) as file:
        while done < size:
            count = min(chunk, size - done)
            if transport.is_closing():
                raise ConnectionResetError("connection closed while sending a response")
            idle.busy()  # this piece's own time limit stands for the idle expiry
            try:
                async with asyncio.timeout(idle_s if idle_s >= 0 else None):
                    sent = await loop.sendfile(transport, file, part.position + done, count, fallback=False)
            except (asyncio.SendfileNotAvailableError, NotImplementedError, RuntimeError) as e:
                idle.done()
                if transport.is_closing():
                    raise ConnectionResetError("connection closed while sending a response") from e
                state.waiting = False
                return done
            except TimeoutError:
                transport.abort()
                raise ConnectionResetError(f"client took no bytes for {idle_s:.0f} s (connections.max.idle.ms)") \
                    from None
            except ConnectionError:
                raise
            except OSError as e:  # the file, not the socket (an I/O error reading it)
                _failed(transport, part, done, e.strerror or str(e))
            idle.done()
            if sent < count:
                _cut_short(transport, part, done + sent)
            done += sent
    return done


async def _copy(writer: asyncio.StreamWriter, part: FileSlice, start: int, idle: Activity,
                buffer: memoryview) -> None:
    """Send ``part`` from byte ``start`` through ``buffer``, waiting before each refill until the
    transport no longer holds what it was given."""
    done = start
    while done < part.size:
        if writer.transport.is_closing():  # (a write to it would be dropped: stop reading the file)
            raise ConnectionResetError("connection closed while sending a response")
        try:
            n = part.read_into(buffer, done)
        except StorageError as e:
            _failed(writer.transport, part, done, str(e))
        if n == 0:
            _cut_short(writer.transport, part, done)
        writer.write(buffer[:n])
        await _written(writer)
        idle.done()
        done += n


async def _written(writer: asyncio.StreamWriter) -> None:
    """Wait until ``writer``'s transport buffers nothing: drain with a high-water mark of 0 for the
    time of the wait (the transport's own limits restored after)."""
    transport = writer.transport
    if not transport.get_write_buffer_size():
        return
    low, high = transport.get_write_buffer_limits()  # type: ignore[attr-defined]  # asyncio and uvloop give (low, high)
    transport.set_write_buffer_limits(high=0, low=0)
    try:
        await writer.drain()
    finally:
        if not transport.is_closing():
            transport.set_write_buffer_limits(high=high, low=low)


def _cut_short(transport: asyncio.BaseTransport, part: FileSlice, at: int) -> NoReturn:
    _failed(transport, part, at, f"the file ends {part.size - at} bytes before the fetched range does")


def _failed(transport: asyncio.BaseTransport, part: FileSlice, at: int, why: str) -> NoReturn:
    """Abort the connection mid-frame (nothing else can follow the size already sent) and raise."""
    log.warning("aborting connection mid-response: %s: %s (fetched range: position %d, size %d; %d bytes sent)",
                part.path, why, part.position, part.size, at)
    transport.abort()
    raise ResponseCutShort(f"{part.path}: {why}")
