"""Background task scheduling, injectable like the clock.

Kafka runs its log maintenance (async flush after a roll, delayed deletion of ``.deleted`` files,
retention, checkpoints) on a shared scheduler. tidelog does the same through :class:`Scheduler`;
:class:`ThreadScheduler` is the real one, :class:`tidelog.testing.FakeScheduler` runs tasks when a
:class:`tidelog.testing.FakeClock` is advanced, so tests never sleep.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
from collections.abc import Callable
from typing import Protocol

from tidelog.clock import SYSTEM_CLOCK, Clock

log = logging.getLogger(__name__)

Task = Callable[[], object]


class Scheduler(Protocol):
    def schedule_once(self, name: str, task: Task, delay_ms: int = 0) -> None:
        """Run ``task`` once, ``delay_ms`` from now."""
        ...

    def schedule_periodic(self, name: str, task: Task, delay_ms: int, period_ms: int) -> None:
        """Run ``task`` after ``delay_ms`` and then every ``period_ms``."""
        ...

    def shutdown(self) -> None:
        ...


class _TaskQueue:
    """A heap of (due ms, sequence, name, task, period) shared by both schedulers."""

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, str, Task, int]] = []
        self._sequence = itertools.count()

    def push(self, due_ms: int, name: str, task: Task, period_ms: int) -> None:
        heapq.heappush(self._heap, (due_ms, next(self._sequence), name, task, period_ms))

    def pop_due(self, now_ms: int) -> tuple[str, Task, int] | None:
        if not self._heap or self._heap[0][0] > now_ms:
            return None
        due, _, name, task, period = heapq.heappop(self._heap)
        if period > 0:
            self.push(due + period, name, task, period)
        return name, task, period

    def next_due(self) -> int | None:
        return self._heap[0][0] if self._heap else None

    def clear(self) -> None:
        self._heap.clear()


def run_task(name: str, task: Task) -> None:
    """Run one task; a failing task is logged and never stops the scheduler."""
    try:
        task()
    except Exception:  # noqa: BLE001 - a background task must not kill its thread
        log.exception("scheduled task %r failed", name)


class ThreadScheduler:
    """One daemon thread running due tasks in order (Kafka's ``KafkaScheduler`` with one thread)."""

    def __init__(self, clock: Clock = SYSTEM_CLOCK, name: str = "tidelog-scheduler") -> None:
        self._clock = clock
        self._queue = _TaskQueue()
        self._wakeup = threading.Condition()
        self._running = True
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def schedule_once(self, name: str, task: Task, delay_ms: int = 0) -> None:
        self._push(name, task, delay_ms, 0)

    def schedule_periodic(self, name: str, task: Task, delay_ms: int, period_ms: int) -> None:
        if period_ms <= 0:
            raise ValueError(f"period of task {name!r} must be > 0 ms, got {period_ms}")
        self._push(name, task, delay_ms, period_ms)

    def _push(self, name: str, task: Task, delay_ms: int, period_ms: int) -> None:
        with self._wakeup:
            if not self._running:
                raise RuntimeError(f"scheduler is shut down; cannot schedule {name!r}")
            self._queue.push(self._clock.milliseconds() + max(0, delay_ms), name, task, period_ms)
            self._wakeup.notify()

    def _run(self) -> None:
        while True:
            with self._wakeup:
                due = self._next_due_locked()
                if due is None:
                    return
            run_task(*due)

    def _next_due_locked(self) -> tuple[str, Task] | None:
        while self._running:
            popped = self._queue.pop_due(self._clock.milliseconds())
            if popped is not None:
                return popped[0], popped[1]
            next_due = self._queue.next_due()
            timeout = None if next_due is None else max(0.0, (next_due - self._clock.milliseconds()) / 1000)
            self._wakeup.wait(timeout)
        return None

    def shutdown(self) -> None:
        """Stop the thread; tasks not yet due are dropped (as Kafka's scheduler does)."""
        with self._wakeup:
            self._running = False
            self._queue.clear()
            self._wakeup.notify()
        if threading.current_thread() is not self._thread:
            self._thread.join()


_shared: ThreadScheduler | None = None
_shared_lock = threading.Lock()


def shared_scheduler() -> ThreadScheduler:
    """A process-wide scheduler for logs opened without one (library and tool use)."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = ThreadScheduler(name="tidelog-shared-scheduler")
        return _shared
