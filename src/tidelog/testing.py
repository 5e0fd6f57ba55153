"""Test doubles shared by the test suite and by users testing code built on tidelog: a clock and
a scheduler that move only when told.

Nothing here is used by production code paths. Helpers only the suite needs live under ``tests/``.
"""

from __future__ import annotations

from tidelog.scheduler import Task, _TaskQueue, run_task


class FakeClock:
    """A clock that moves only when told. ``sleep`` advances it instead of blocking.

    Schedulers attached with :meth:`attach` (every :class:`FakeScheduler` attaches itself) run
    their due tasks on every ``advance``.
    """

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self._ns = start_ms * 1_000_000
        self._schedulers: list[FakeScheduler] = []

    def milliseconds(self) -> int:
        return self._ns // 1_000_000

    def nanoseconds(self) -> int:
        return self._ns

    def sleep(self, ms: int) -> None:
        self.advance(ms)

    def advance(self, ms: int) -> None:
        if ms < 0:
            raise ValueError(f"cannot move a clock backwards by {ms} ms")
        self._ns += ms * 1_000_000
        for scheduler in self._schedulers:
            scheduler.run_due()

    def attach(self, scheduler: FakeScheduler) -> None:
        """Run ``scheduler``'s due tasks on every :meth:`advance` from now on."""
        self._schedulers.append(scheduler)


class FakeScheduler:
    """Runs tasks synchronously, in due order, whenever its :class:`FakeClock` advances.

    Same rules as :class:`tidelog.scheduler.ThreadScheduler`: a period must be > 0, and after
    :meth:`shutdown` scheduling raises RuntimeError.
    """

    def __init__(self, clock: FakeClock) -> None:
        self._clock = clock
        self._queue = _TaskQueue()
        self.ran: list[str] = []
        clock.attach(self)

    def schedule_once(self, name: str, task: Task, delay_ms: int = 0) -> None:
        self._queue.schedule(self._clock.milliseconds(), name, task, delay_ms)

    def schedule_periodic(self, name: str, task: Task, delay_ms: int, period_ms: int) -> None:
        self._queue.schedule(self._clock.milliseconds(), name, task, delay_ms, period_ms)

    def run_due(self) -> None:
        """Run every task due at the clock's current time (tasks scheduled meanwhile included)."""
        while (due := self._queue.pop_due(self._clock.milliseconds())) is not None:
            self.ran.append(due[0])
            run_task(*due)

    def pending(self) -> int:
        return len(self._queue)

    def shutdown(self) -> None:
        """Drop the tasks not yet run and refuse new ones."""
        self._queue.close()

