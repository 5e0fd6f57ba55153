"""Injectable time source.

Every time-dependent decision (rolls, retention, lags, flush intervals) takes a :class:`Clock`
so tests drive time explicitly; :class:`tidelog.testing.FakeClock` is the test double.
"""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def milliseconds(self) -> int:
        """Wall-clock time in ms since the epoch (record timestamps, retention)."""
        ...

    def nanoseconds(self) -> int:
        """Monotonic time in ns (durations, throttling)."""
        ...

    def sleep(self, ms: int) -> None:
        ...


class SystemClock:
    """The real clock."""

    def milliseconds(self) -> int:
        return time.time_ns() // 1_000_000

    def nanoseconds(self) -> int:
        return time.monotonic_ns()

    def sleep(self, ms: int) -> None:
        time.sleep(ms / 1000)


SYSTEM_CLOCK: Clock = SystemClock()
