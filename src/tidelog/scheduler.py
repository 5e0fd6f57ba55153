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
    """After :meth:`shutdown` both schedule calls raise RuntimeError naming the task."""

    def schedule_once(self, name: str, task: Task, delay_ms: int = 0) -> None:
        """Run ``task`` once, ``delay_ms`` from now (a negative delay means now)."""
        ...

    def schedule_periodic(self, name: str, task: Task, delay_ms: int, period_ms: int) -> None:
        """Run ``task`` after ``delay_ms`` and then every ``period_ms``; ValueError unless ``period_ms`` > 0."""
        ...

    def shutdown(self) -> None:
        """Drop the tasks not yet run and refuse new ones."""
        ...


class _TaskQueue:
    """A heap of (due ms, sequence, name, task, period; 0 = once) and the scheduling rules shared by
    both schedulers. Not thread-safe: :class:`ThreadScheduler` holds its condition around every call."""

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, str, Task, int]] = []
        self._sequence = itertools.count()
        self._closed = False

    def schedule(self, now_ms: int, name: str, task: Task, delay_ms: int, period_ms: int | None = None) -> None:
        """Queue ``task`` due ``delay_ms`` after ``now_ms`` (a negative delay means now), to run once,
        or every ``period_ms`` when given. ValueError for a period <= 0; RuntimeError once closed."""
        if self._closed:
            raise RuntimeError(f"scheduler is shut down; cannot schedule {name!r}")
        if period_ms is not None and period_ms <= 0:
            raise ValueError(f"period of task {name!r} must be > 0 ms, got {period_ms}")
        self._push(now_ms + max(0, delay_ms), name, task, period_ms or 0)

    def _push(self, due_ms: int, name: str, task: Task, period_ms: int) -> None:
        heapq.heappush(self._heap, (due_ms, next(self._sequence), name, task, period_ms))

    def pop_due(self, now_ms: int) -> tuple[str, Task] | None:
        """The earliest task due at ``now_ms`` (a periodic one is queued again), or None."""
        if not self._heap or self._heap[0][0] > now_ms:
            return None
        due, _, name, task, period = heapq.heappop(self._heap)
        if period > 0:
            self._push(due + period, name, task, period)
        return name, task

    def next_due(self) -> int | None:
        return self._heap[0][0] if self._heap else None

    def close(self) -> None:
        """Drop every queued task and refuse new ones."""
        self._closed = True
        self._heap.clear()

    def __len__(self) -> int:
        return len(self._heap)


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
        self._schedule(name, task, delay_ms, None)

    def schedule_periodic(self, name: str, task: Task, delay_ms: int, period_ms: int) -> None:
        self._schedule(name, task, delay_ms, period_ms)

    def _schedule(self, name: str, task: Task, delay_ms: int, period_ms: int | None) -> None:
        with self._wakeup:
            before = self._queue.next_due()
            self._queue.schedule(self._clock.milliseconds(), name, task, delay_ms, period_ms)
            # Wake the thread only when the new task is due before the one it waits for: opening
            # 10,000 logs schedules 10,000 later tasks, each wake-up a thread switch for nothing.
            if before is None or self._queue.next_due() != before:
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
                return popped
            next_due = self._queue.next_due()
            timeout = None if next_due is None else max(0.0, (next_due - self._clock.milliseconds()) / 1000)
            if timeout is not None:
                timeout = min(timeout, threading.TIMEOUT_MAX)  # a Long.MAX period would overflow the wait
            self._wakeup.wait(timeout)
        return None

    def shutdown(self) -> None:
        """Stop the thread; tasks not yet due are dropped (as Kafka's scheduler does)."""
        with self._wakeup:
            self._running = False
            self._queue.close()
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
