"""ApiContext.run: the thread-pool hop of every file operation, on asyncio's loop and uvloop."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from tidelog.server.context import ApiContext
from tidelog.server.server import new_event_loop


def context(executor: ThreadPoolExecutor) -> ApiContext:
    # run() only needs the executor; the other fields are not touched
    return ApiContext(None, None, 0, None, executor, None, None, None)  # type: ignore[arg-type]


@pytest.mark.parametrize("kind", ["asyncio", "uvloop"])
def test_run_returns_raises_and_skips_what_was_cancelled_before_it_started(kind: str) -> None:
    ran: list[str] = []
    gate = threading.Event()

    def blocker() -> str:
        gate.wait(10)
        return "blocker"

    def record(name: str) -> str:
        ran.append(name)
        return name

    def fail() -> None:
        raise ValueError("the pool call failed")

    async def scenario(ctx: ApiContext) -> None:
        assert await ctx.run(record, "first") == "first"
        with pytest.raises(ValueError, match="the pool call failed"):
            await ctx.run(fail)
        blocked = asyncio.ensure_future(ctx.run(blocker))
        queued = asyncio.ensure_future(ctx.run(record, "cancelled"))  # behind the blocker: one worker
        await asyncio.sleep(0)
        queued.cancel()
        with pytest.raises(asyncio.CancelledError):
            await queued
        gate.set()
        assert await blocked == "blocker"
        assert await ctx.run(record, "last") == "last"  # runs after the cancelled one was skipped

    loop: Any = new_event_loop(kind)
    with ThreadPoolExecutor(1) as executor:
        try:
            loop.run_until_complete(scenario(context(executor)))
        finally:
            loop.close()
    assert ran == ["first", "last"]
