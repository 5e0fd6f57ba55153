"""The group coordinator as the server runs it: loaded from ``__consumer_offsets`` at start,
timers on the event loop, writes through the thread pool.

:class:`GroupsContext` is the server's :class:`~tidelog.server.context.ApiContext` with the
running :class:`GroupService`; the group APIs' handlers find the coordinator there.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from tidelog.clock import SYSTEM_CLOCK, Clock
from tidelog.scheduler import Task
from tidelog.server.context import ApiContext
from tidelog.server.errors import CoordinatorNotAvailableError
from tidelog.server.groups.coordinator import GroupCoordinator
from tidelog.server.groups.messages import GroupConfig
from tidelog.server.groups.offsets import OffsetsTopic, OffsetsTopicStore

log = logging.getLogger(__name__)


class LoopScheduler:
    """tidelog's :class:`~tidelog.scheduler.Scheduler` on an asyncio event loop: tasks run on
    the loop's thread. Event-loop only."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._handles: set[asyncio.TimerHandle] = set()
        self._closed = False

    def schedule_once(self, name: str, task: Task, delay_ms: int = 0) -> None:
        if self._closed:
            raise RuntimeError(f"scheduler is shut down; cannot schedule {name!r}")
        handle: asyncio.TimerHandle | None = None

        def run() -> None:
            self._handles.discard(handle)  # type: ignore[arg-type]
            try:
                task()
            except Exception:  # noqa: BLE001 - one failing timer must not stop the others
                log.exception("scheduled task %s failed", name)

        handle = self._loop.call_later(max(0, delay_ms) / 1000, run)
        self._handles.add(handle)

    def schedule_periodic(self, name: str, task: Task, delay_ms: int, period_ms: int) -> None:
        if period_ms <= 0:
            raise ValueError(f"period of task {name!r} must be > 0 ms, got {period_ms}")

        def again() -> None:
            self.schedule_once(name, again, period_ms)  # first: a failing run must not end the series
            task()

        self.schedule_once(name, again, delay_ms)

    def shutdown(self) -> None:
        self._closed = True
        for handle in self._handles:
            handle.cancel()
        self._handles.clear()


@dataclass(frozen=True, slots=True)
class GroupService:
    """The coordinator of one server and what it runs on."""

    coordinator: GroupCoordinator
    topic: OffsetsTopic
    store: OffsetsTopicStore
    scheduler: LoopScheduler

    @classmethod
    async def start(cls, ctx: ApiContext, clock: Clock = SYSTEM_CLOCK) -> GroupService:
        """Load every group and committed offset from ``__consumer_offsets`` (file work in the
        thread pool) and start the coordinator. Call on the server's event loop."""
        broker = ctx.manager.broker
        topic = OffsetsTopic.from_broker(ctx.manager, clock, broker)
        loaded = await ctx.run(topic.load)
        scheduler = LoopScheduler(asyncio.get_running_loop())
        store = OffsetsTopicStore(topic, ctx.run)
        coordinator = GroupCoordinator(GroupConfig.from_broker(broker), store, clock, scheduler)
        coordinator.load(loaded.groups, loaded.offsets)
        coordinator.load_pending(loaded.pending, loaded.last_offset)
        interval = coordinator.config.offsets_retention_check_interval_ms
        scheduler.schedule_periodic("offsets-expiration", coordinator.expire_offsets, interval, interval)
        return cls(coordinator, topic, store, scheduler)

    def complete_transaction(self, producer_id: int, producer_epoch: int, partition: int, commit: bool) -> int:
        """The transaction coordinator appended the COMMIT (``commit``) or ABORT marker of
        ``producer_id`` at ``producer_epoch`` to ``__consumer_offsets`` partition ``partition``:
        the transactional offsets it holds for the groups of that partition become committed
        offsets, or are dropped. Call after the marker is stored (the epoch was checked by the
        log's producer state then). Memory only, no I/O; returns the number of offsets made
        visible. Event-loop only (the coordinator's thread): not thread-safe, takes no lock."""
        return self.coordinator.complete_transaction(producer_id, self.topic.groups_of(partition), commit)

    async def stop(self) -> None:
        """Stop the timers and wait for the writes in flight."""
        self.scheduler.shutdown()
        await self.store.drain()


@dataclass(frozen=True, slots=True)
class GroupsContext(ApiContext):
    """The server's context with its group coordinator."""

    groups: GroupService


def group_service(ctx: ApiContext) -> GroupService:
    """The coordinator of the server ``ctx`` belongs to; :class:`CoordinatorNotAvailableError` if none."""
    service = getattr(ctx, "groups", None)
    if service is None:
        raise CoordinatorNotAvailableError("this server runs no group coordinator")
    return service  # type: ignore[no-any-return]

