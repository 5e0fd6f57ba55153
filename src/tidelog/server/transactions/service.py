"""The transaction coordinator as the server runs it: loaded from ``__transaction_state`` at
start, its two timers on the event loop, file work in the thread pool.

:class:`TransactionsContext` is the server's context with the group coordinator and the
transaction coordinator; handlers find the latter through :func:`transaction_coordinator`.
After a marker lands on a partition, delayed fetches waiting on it are woken (its last stable
offset moved), and on a ``__consumer_offsets`` partition the group coordinator completes the
producer's pending transactional offsets (``GroupService.complete_transaction``).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from tidelog.clock import SYSTEM_CLOCK, Clock
from tidelog.manager.internal_topics import CONSUMER_OFFSETS
from tidelog.server.context import ApiContext
from tidelog.server.groups.service import GroupsContext, GroupService, LoopScheduler
from tidelog.server.init_producer_id import producer_ids
from tidelog.server.transactions.coordinator import TransactionCoordinator, TxnConfig, transaction_coordinator
from tidelog.topic_partition import TopicPartition


def marker_written(ctx: ApiContext, groups: GroupService | None, tp: TopicPartition, producer_id: int,
                   producer_epoch: int, commit: bool) -> None:
    """After a COMMIT or ABORT marker landed on ``tp`` (the coordinator's, or WriteTxnMarkers'):
    wake the delayed fetches of ``tp``, and on ``__consumer_offsets`` complete the producer's
    pending offsets. Event loop; memory only."""
    ctx.arrivals.notify([tp])
    if tp.topic == CONSUMER_OFFSETS and groups is not None:
        groups.complete_transaction(producer_id, producer_epoch, tp.partition, commit)


@dataclass(frozen=True, slots=True)
class TransactionService:
    """The transaction coordinator of one server and its timers."""

    coordinator: TransactionCoordinator
    scheduler: LoopScheduler

    @classmethod
    async def start(cls, ctx: ApiContext, groups: GroupService | None, clock: Clock = SYSTEM_CLOCK) -> TransactionService:
        """Load ``__transaction_state`` and start the timers. Call on the server's event loop."""
        manager = ctx.manager
        config = TxnConfig.from_broker(manager.broker)

        async def on_marker(tp: TopicPartition, producer_id: int, producer_epoch: int, commit: bool) -> None:
            marker_written(ctx, groups, tp, producer_id, producer_epoch, commit)

        coordinator = TransactionCoordinator(manager, config, clock, ctx.run,
                                             lambda: producer_ids(manager).generate_producer_id(), on_marker,
                                             groups.topic.ensure if groups is not None else None)
        await coordinator.load()
        scheduler = LoopScheduler(asyncio.get_running_loop())
        scheduler.schedule_periodic("transaction-abort", coordinator.abort_timed_out, config.abort_interval_ms,
                                    config.abort_interval_ms)
        scheduler.schedule_periodic("transactional-id-expiration", coordinator.expire_ids,
                                    config.remove_expired_interval_ms, config.remove_expired_interval_ms)
        return cls(coordinator, scheduler)

    async def stop(self) -> None:
        """Stop the timers; let completions in flight finish (briefly)."""
        self.scheduler.shutdown()
        await self.coordinator.stop()


@dataclass(frozen=True, slots=True)
class TransactionsContext(GroupsContext):
    """The server's context with its group and transaction coordinators."""

    transactions: TransactionCoordinator


__all__ = ["TransactionService", "TransactionsContext", "marker_written", "transaction_coordinator"]
