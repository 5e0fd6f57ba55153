"""A budget of bytes reserved at once over every connection, first come, first served. The
server holds two:

* the request bytes being received or handled (Kafka's ``queued.max.request.bytes`` and its
  ``SimpleMemoryPool``; :attr:`KafkaServer.request_memory`);
* the records Produce validation may hold decompressed
  (``tidelog.produce.decompression.memory.bytes``, :mod:`.produce`; tidelog only).

Request frames: each connection can otherwise hold a frame of up to ``socket.request.max.bytes``
(100 MiB) that it sends as slowly as it likes, so N connections pin N times that. Here a frame
reserves its declared size as soon as its size prefix is read, before its body is; when the budget
is spent the connection waits without reading, so its bytes stay in the client's socket buffers
(TCP pushes back) instead of the broker's memory. The reservation is returned once the request has
been handled (Kafka releases the buffer after KafkaApis is done with it).

Where tidelog differs from Kafka:

* Bounded by default (200 MiB, two requests of the largest size) where Kafka's -1 is unbounded.
* Strict: the bytes reserved never exceed the budget (Kafka's pool lets the last allocation
  overshoot), and waiting frames are served first come, first served, so a large request is not
  starved by a stream of small ones. Every frame fits eventually: the budget is at least
  ``socket.request.max.bytes``.
* Request frames of at most :data:`SMALL_FRAME_BYTES` (64 KiB) do not count (``free_up_to``): a
  connection's stream buffer holds that much anyway, so they cost nothing the connection does not
  already cost, and the requests clients send most (metadata, heartbeats, offset commits, fetches,
  small produces) keep flowing while hostile connections hold the whole budget.

The decompression budget counts every reservation but an empty one (``free_up_to=0``): what a
batch decompresses to is memory the broker would not hold otherwise, however small.

Event-loop only.
"""

from __future__ import annotations

import asyncio
from collections import deque

SMALL_FRAME_BYTES = 1 << 16  # asyncio's stream buffer limit: what every connection may buffer anyway


class RequestMemoryPool:
    """Reserves bytes within ``capacity`` (<= 0: unbounded), first come, first served; a
    reservation of at most ``free_up_to`` bytes is not counted (request frames: 64 KiB; 0 for
    decompression, see the module doc)."""

    def __init__(self, capacity: int, free_up_to: int = SMALL_FRAME_BYTES) -> None:
        self.capacity = capacity
        self.free_up_to = free_up_to
        self._used = 0
        self._waiters: deque[tuple[int, asyncio.Future[None]]] = deque()

    @property
    def used(self) -> int:
        """Bytes reserved now (a gauge)."""
        return self._used

    @property
    def waiting(self) -> int:
        """Reservations waiting until bytes are released (a gauge): frames whose body is not read."""
        return len(self._waiters)

    def counted(self, size: int) -> bool:
        """Whether a reservation of ``size`` bytes takes from the budget."""
        return self.capacity > 0 and size > self.free_up_to

    def reserve(self, size: int) -> _Reservation | _Free:
        """``async with pool.reserve(size):`` holds ``size`` bytes for the body of the ``with``
        (waits while they are not free). Not counted: a shared no-op, as every request enters one."""
        return _Reservation(self, size) if self.counted(size) else _FREE

    async def _acquire(self, size: int) -> None:
        if not self._waiters and self._used + size <= self.capacity:
            self._used += size
            return
        future = asyncio.get_running_loop().create_future()
        entry = (size, future)
        self._waiters.append(entry)
        try:
            await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                self._release(size)  # granted, but the connection went away before it resumed
            else:
                if entry in self._waiters:
                    self._waiters.remove(entry)
                self._grant()  # the head may have been what held the others back
            raise

    def _release(self, size: int) -> None:
        self._used -= size
        self._grant()

    def _grant(self) -> None:
        while self._waiters and self._used + self._waiters[0][0] <= self.capacity:
            size, future = self._waiters.popleft()
            if not future.cancelled():  # cancelled: its task is on its way out
                self._used += size
                future.set_result(None)


class _Reservation:
    """``size`` bytes of ``pool``, held from entering the ``async with`` to leaving it."""

    __slots__ = ("_pool", "_size")

    def __init__(self, pool: RequestMemoryPool, size: int) -> None:
        self._pool, self._size = pool, size

    async def __aenter__(self) -> None:
        await self._pool._acquire(self._size)

    async def __aexit__(self, *exc: object) -> None:
        self._pool._release(self._size)


class _Free:
    """A reservation that is not counted (plain class: cheaper than a generator-based manager)."""

    __slots__ = ()

    async def __aenter__(self) -> None:
        return None

    async def __aexit__(self, *exc: object) -> None:
        return None


_FREE = _Free()
