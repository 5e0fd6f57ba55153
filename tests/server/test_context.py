"""DataArrival: delayed fetches wake on appends to their own partitions only."""

from __future__ import annotations

import asyncio

from tidelog.server.context import DataArrival
from tidelog.topic_partition import TopicPartition

A0, A1, B0 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)


def test_a_ticket_resolves_on_an_append_to_one_of_its_partitions_only() -> None:
    async def scenario() -> None:
        arrivals = DataArrival()
        ticket = arrivals.ticket([A0, A1])
        other = arrivals.ticket([B0])
        assert arrivals.waiting == 2
        arrivals.notify([B0])
        assert not ticket.future.done() and other.future.done()
        assert arrivals.waiting == 1
        arrivals.notify([A1])
        assert await arrivals.wait(ticket, 5.0)
        assert arrivals.waiting == 0

    asyncio.run(scenario())


def test_an_append_between_ticket_and_wait_is_not_missed_and_timeouts_clean_up() -> None:
    async def scenario() -> None:
        arrivals = DataArrival()
        early = arrivals.ticket([A0])
        arrivals.notify([A0])  # before the fetch starts waiting
        assert await arrivals.wait(early, 0.0)
        idle = arrivals.ticket([A0])
        assert not await arrivals.wait(idle, 0.0)
        assert arrivals.waiting == 0
        arrivals.notify([A0])  # nothing left to wake; no error

    asyncio.run(scenario())
