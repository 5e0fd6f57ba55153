"""The upload quota of the remote tier (Kafka's ``remote.log.manager.copy.max.bytes.per.second``).

One :class:`CopyQuota` per broker, shared by every copy: each chunk a copy uploads first asks
:meth:`CopyQuota.acquire` for its bytes. The limiter paces continuously (a virtual schedule, as
a generic cell rate algorithm does): a chunk may start once the bytes reserved before it have
had their time at the quota, and then reserves ``n / quota`` seconds of its own. So the bytes
started by time ``t`` never exceed ``quota * (t - t0)`` plus the chunk in flight, and N bytes
uploaded as fast as the store takes them need ``(N - last chunk) / quota`` seconds of waiting.

Kafka measures the rate over 11 windows of 1 s (``RLMQuotaManager``) and throttles once the
measured rate is above the quota, which lets a burst of up to the windows' worth through after
an idle spell; this limiter keeps no idle credit, so the rate over any span from the first
chunk stays at or under the quota (up to the chunk in flight), and a measured figure matches
Kafka's over a span of its windows within one window.

``Long.MAX`` (Kafka's default) means unlimited: :attr:`CopyQuota.unlimited` is true and
:meth:`~CopyQuota.acquire` returns at once, taking no lock.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable

from tidelog.clock import SYSTEM_CLOCK, Clock
from tidelog.records.varint import INT64_MAX

UNLIMITED = INT64_MAX
"""Kafka's default quota, ``Long.MAX_VALUE``: no throttling."""
WINDOW_SECONDS = 1.0
"""Kafka's quota window (``remote.log.manager.copy.quota.window.size.seconds``, 1 s)."""


class CopyQuota:
    """A thread-safe byte-rate limiter for uploads, with an injected clock and sleep.

    ``bytes_per_second`` must be > 0; :data:`UNLIMITED` disables it. ``sleep(seconds)`` waits
    (the clock's time must move meanwhile); by default the clock's own ``sleep``, in whole ms
    rounded up, so a fake clock moves instead of the thread sleeping.
    """

    def __init__(self, bytes_per_second: int = UNLIMITED, *, clock: Clock = SYSTEM_CLOCK,
                 sleep: Callable[[float], None] | None = None) -> None:
        if bytes_per_second <= 0:
            raise ValueError(f"remote.log.manager.copy.max.bytes.per.second must be > 0, got {bytes_per_second}")
        self.bytes_per_second = bytes_per_second
        self.unlimited = bytes_per_second >= UNLIMITED
        self._clock = clock
        self._sleep = sleep or (lambda seconds: clock.sleep(math.ceil(seconds * 1000)))
        self._lock = threading.Lock()
        self._next_ns: int | None = None  # when the bytes reserved so far have had their time (clock ns)
        self.throttled_seconds = 0.0  # total waited, for metrics and tests

    def acquire(self, n: int) -> float:
        """Wait until ``n`` bytes may be uploaded, then reserve their time; returns the seconds
        waited. Thread-safe: takes the quota's lock to reserve (not while sleeping); several
        copies sharing the quota queue behind each other's reservations. Unlimited: returns 0
        at once without the lock."""
        if self.unlimited or n <= 0:
            return 0.0
        with self._lock:
            now = self._clock.nanoseconds()
            start = now if self._next_ns is None else max(self._next_ns, now)
            self._next_ns = start - (-n * 1_000_000_000 // self.bytes_per_second)  # ceil: never ahead
            wait = (start - now) / 1e9
        if wait > 0:
            self._sleep(wait)
            with self._lock:
                self.throttled_seconds += wait
        return wait
