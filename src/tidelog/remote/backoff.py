"""Retry with exponential backoff for each partition's remote copy (Kafka's
``remote.log.manager.task.retry.backoff.ms`` / ``.backoff.max.ms`` / ``.jitter``).

A copy that fails with a *retriable* error (:attr:`RemoteStorageError.retriable`: the store
unreachable, answering 5xx or throttling, a local segment replaced mid-copy) is retried after
``initial * 2^(failures - 1)`` ms, capped at ``max`` ms, the term multiplied by a random factor
in ``[1 - jitter, 1 + jitter)`` so that partitions failing together do not retry together
(Kafka's ``ExponentialBackoff``). Until then the partition's regular copy passes leave it alone.
A success forgets the partition's failures. A non-retriable error (403, a missing bucket, remote
metadata that is corrupt or written by a newer tidelog) schedules nothing: the next regular
pass (``remote.log.manager.task.interval.ms``) tries again, so it is never hammered.

:class:`CopyRetries` keeps that state per partition and schedules, on the broker's scheduler,
one retry task at the earliest due time; the task runs the due partitions (through the caller's
``run``) and schedules the next one. Nothing here sleeps: a partition waiting for its retry
blocks neither the other partitions nor a shutdown. Times come from the injected clock.

Thread-safe: every public method takes the instance's lock (never while calling ``run``).
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

from tidelog.clock import Clock
from tidelog.remote.errors import RemoteStorageError
from tidelog.scheduler import Scheduler

logger = logging.getLogger(__name__)

K = TypeVar("K", bound=Hashable)

RETRY_TASK_NAME = "tidelog-remote-log-copy-retry"


@dataclass(frozen=True, slots=True)
class Backoff:
    """Kafka's ``ExponentialBackoff`` with multiplier 2: ``initial_ms`` > 0, ``max_ms`` >= 1,
    ``jitter`` in [0, 0.5]. Immutable, thread-safe."""

    initial_ms: int = 500
    max_ms: int = 30_000
    jitter: float = 0.2

    def __post_init__(self) -> None:
        if self.initial_ms < 1 or self.max_ms < 1 or not 0 <= self.jitter <= 0.5:
            raise ValueError(f"a retry backoff needs initial >= 1 ms, max >= 1 ms and jitter in [0, 0.5], got "
                             f"{self.initial_ms}, {self.max_ms}, {self.jitter}")

    def delay_ms(self, failures: int, rng: random.Random | None = None) -> int:
        """The wait after the ``failures``-th failure in a row (>= 1): the exponential term with
        its jitter, at most ``max_ms``."""
        term = self.initial_ms * 2.0 ** min(max(failures - 1, 0), 62)
        factor = 1.0 if self.jitter == 0 else (rng or random).uniform(1 - self.jitter, 1 + self.jitter)
        return max(1, min(self.max_ms, int(term * factor)))


@dataclass(slots=True)
class _Waiting:
    failures: int
    due_ms: int


def is_retriable(error: BaseException) -> bool:
    """Whether retrying the same copy soon may succeed (a ``RemoteStorageError`` saying so)."""
    return isinstance(error, RemoteStorageError) and bool(error.retriable)


class CopyRetries(Generic[K]):
    """Each partition's retry state (module docstring). ``run(keys)`` copies the given
    partitions now (the caller's copy of a partition reports back through :meth:`failed` and
    :meth:`succeeded`); ``is_closed()`` true stops retrying (the manager shut down)."""

    def __init__(self, backoff: Backoff, clock: Clock, scheduler: Scheduler, run: Callable[[list[K]], object], *,
                 is_closed: Callable[[], bool] = lambda: False, rng: random.Random | None = None) -> None:
        self.backoff = backoff
        self._clock = clock
        self._scheduler = scheduler
        self._run = run
        self._is_closed = is_closed
        self._rng = rng or random.Random()
        self._lock = threading.Lock()
        self._waiting: dict[K, _Waiting] = {}
        self._failures: dict[K, int] = {}  # failures in a row, retriable or not
        self._task_due: set[int] = set()  # due times of the retry tasks scheduled and not run yet

    def failed(self, key: K, error: BaseException) -> int | None:
        """Record a failed copy of ``key``: a retriable ``error`` schedules its retry and returns
        the delay in ms; any other returns ``None`` (the next regular pass tries again)."""
        with self._lock:
            failures = self._failures[key] = self._failures.get(key, 0) + 1
            if not is_retriable(error) or self._is_closed():
                self._waiting.pop(key, None)
                return None
            delay = self.backoff.delay_ms(failures, self._rng)
            due = self._clock.milliseconds() + delay
            self._waiting[key] = _Waiting(failures, due)
            schedule = not any(t <= due for t in self._task_due)
            if schedule:
                self._task_due.add(due)
        if schedule:
            self._schedule(due, delay)
        return delay

    def succeeded(self, key: K) -> None:
        """Forget ``key``'s failures (its copy went through)."""
        with self._lock:
            self._waiting.pop(key, None)
            self._failures.pop(key, None)

    def failures(self, key: K) -> int:
        """Failed copies of ``key`` in a row (0 after a success)."""
        with self._lock:
            return self._failures.get(key, 0)

    def retry_due_ms(self, key: K) -> int | None:
        """When ``key``'s retry is due (clock ms), ``None`` when none is waiting."""
        with self._lock:
            waiting = self._waiting.get(key)
            return None if waiting is None else waiting.due_ms

    def waiting(self, key: K) -> bool:
        """Whether ``key`` waits for a retry not due yet (a regular pass then leaves it alone)."""
        with self._lock:
            waiting = self._waiting.get(key)
            return waiting is not None and waiting.due_ms > self._clock.milliseconds()

    def _schedule(self, due_ms: int, delay_ms: int) -> None:
        try:
            self._scheduler.schedule_once(RETRY_TASK_NAME, lambda: self._retry(due_ms), delay_ms)
        except RuntimeError:  # the scheduler is shut down: so is the manager
            with self._lock:
                self._task_due.discard(due_ms)

    def _retry(self, task_due_ms: int) -> None:
        """The retry task: run every partition whose retry is due, then schedule the next task."""
        now = self._clock.milliseconds()
        with self._lock:
            self._task_due.discard(task_due_ms)
            due = [k for k, w in self._waiting.items() if w.due_ms <= now]
        if due and not self._is_closed():
            logger.info("remote tier: retrying the copy of %d partition(s) after backoff", len(due))
            self._run(due)
        with self._lock:
            for key in due:  # not retried by ``run`` (the partition went away): forgotten
                waiting = self._waiting.get(key)
                if waiting is not None and waiting.due_ms <= now:
                    del self._waiting[key]
                    self._failures.pop(key, None)
            pending = [w.due_ms for w in self._waiting.values()]
            next_due = min(pending) if pending and not self._is_closed() else None
            schedule = next_due is not None and not any(t <= next_due for t in self._task_due)
            if schedule:
                assert next_due is not None
                self._task_due.add(next_due)
        if schedule:
            assert next_due is not None
            self._schedule(next_due, max(0, next_due - self._clock.milliseconds()))
