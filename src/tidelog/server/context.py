"""What every API handler gets: the log manager, the broker's identity, the thread pool for file
work, and the signal that wakes delayed fetches when data arrives.

File work (appends, reads, fsync, topic changes) never runs on the event loop:
:meth:`ApiContext.run` hands it to the server's thread pool, so one slow disk call stalls no
other connection. Handlers do their per-request work in one such call where they can, to pay the
hop once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TypeVar

from tidelog.manager import LogManager
from tidelog.server.config import Endpoint, ServerConfig
from tidelog.server.memory_pool import RequestMemoryPool
from tidelog.server.metrics.broker_metrics import ServerMetrics
from tidelog.topic_partition import TopicPartition

T = TypeVar("T")


@dataclass(eq=False, slots=True)
class Ticket:
    """A delayed fetch's claim on the next append to any of its partitions."""

    partitions: frozenset[TopicPartition]
    future: asyncio.Future[None]


class DataArrival:
    """Wakes delayed fetches (Kafka's fetch purgatory, keyed by partition as Kafka's): an append to
    a partition wakes the fetches waiting on it, which then read again. Event-loop only.

    A fetch takes a :meth:`ticket` *before* it reads, so an append that lands between its read and
    its wait still wakes it.
    """

    def __init__(self) -> None:
        self._waiters: dict[TopicPartition, set[Ticket]] = {}
        self._tickets: set[Ticket] = set()

    def ticket(self, partitions: Iterable[TopicPartition]) -> Ticket:
        """A ticket resolved by the next :meth:`notify` of one of ``partitions``; pass it to :meth:`wait`."""
        ticket = Ticket(frozenset(partitions), asyncio.get_running_loop().create_future())
        self._tickets.add(ticket)
        for tp in ticket.partitions:
            self._waiters.setdefault(tp, set()).add(ticket)
        return ticket

    @property
    def waiting(self) -> int:
        """Fetches parked until data arrives (Kafka's fetch purgatory size)."""
        return len(self._tickets)

    def cancel(self, ticket: Ticket) -> None:
        """Forget ``ticket`` (resolved, timed out, or not to be waited on)."""
        self._tickets.discard(ticket)
        for tp in ticket.partitions:
            waiting = self._waiters.get(tp)
            if waiting is not None:
                waiting.discard(ticket)
                if not waiting:
                    del self._waiters[tp]

    def notify(self, partitions: Iterable[TopicPartition]) -> None:
        """Data was appended to ``partitions``: wake the fetches waiting on any of them."""
        for tp in partitions:
            for ticket in list(self._waiters.get(tp, ())):
                if not ticket.future.done():
                    ticket.future.set_result(None)
                self.cancel(ticket)

    async def wait(self, ticket: Ticket, timeout_s: float) -> bool:
        """Wait until ``ticket`` resolves or ``timeout_s`` passes; True when data arrived."""
        try:
            await asyncio.wait_for(ticket.future, max(0.0, timeout_s))
            return True
        except TimeoutError:
            return False
        finally:
            self.cancel(ticket)


@dataclass(frozen=True, slots=True)
class ConnectionInfo:
    """Where a request came in: its listener, and the endpoint clients are told to use for it."""

    listener_name: str
    advertised: Endpoint
    peer: str


@dataclass(frozen=True, slots=True)
class ApiContext:
    """Shared by every connection of one server."""

    manager: LogManager
    config: ServerConfig
    node_id: int
    cluster_id: str | None
    executor: ThreadPoolExecutor
    arrivals: DataArrival
    decompression: RequestMemoryPool  # tidelog.produce.decompression.memory.bytes (server.produce)
    metrics: ServerMetrics  # the counters of the Prometheus endpoint (server.metrics): event loop only

    async def run(self, fn: Callable[..., T], *args: object) -> T:
        """Run ``fn(*args)`` in the thread pool (never blocks the event loop) and return what it
        returns (or raise what it raises). Cancelled before the pool starts it, it does not run.

        One hop costs a pool submit, one wake-up of the loop (``call_soon_threadsafe``) and one
        future: ``loop.run_in_executor`` adds a second future chained to the pool's, whose
        copying cost a third more CPU per hop (measured on asyncio's loop and uvloop alike)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()

        def work() -> None:
            if future.cancelled():  # read from the pool thread: at worst it runs, as when cancelled late
                return
            try:
                result, error = fn(*args), None
            except BaseException as e:  # noqa: BLE001 - handed to the awaiting task
                result, error = None, e
            if not loop.is_closed():
                loop.call_soon_threadsafe(_settle, future, result, error)

        self.executor.submit(work)
        return await future


def _settle(future: asyncio.Future[T], result: T | None, error: BaseException | None) -> None:
    """Hand a pool call's outcome to ``future`` (on its loop); nothing when it was cancelled."""
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)  # type: ignore[arg-type]
