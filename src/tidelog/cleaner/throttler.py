"""The cleaner's I/O throttle (Kafka's ``Throttler`` as ``log.cleaner.io.max.bytes.per.second`` uses it).

Every read and write of the cleaner threads reports its bytes; once more than ``check_interval_ms``
have passed since the current period began, if the observed rate exceeds the desired rate the
caller sleeps just long enough to bring the period's average down to it, then a new period starts.
One throttler is shared by all cleaner threads (the limit is for the cleaner as a whole).
"""

from __future__ import annotations

import threading

from tidelog.clock import Clock

CHECK_INTERVAL_MS = 300


class Throttler:
    def __init__(self, desired_rate_per_sec: float, clock: Clock, check_interval_ms: int = CHECK_INTERVAL_MS) -> None:
        if desired_rate_per_sec <= 0:
            raise ValueError(f"throttle rate must be > 0 bytes/s, got {desired_rate_per_sec}")
        self._rate = float(desired_rate_per_sec)
        self._clock = clock
        self._check_interval_ns = check_interval_ms * 1_000_000
        self._lock = threading.Lock()
        self._period_start_ns = clock.nanoseconds()
        self._observed = 0.0
        self.slept_ms = 0  # total, for tests and metrics

    @property
    def desired_rate_per_sec(self) -> float:
        return self._rate

    def update_desired_rate(self, rate: float) -> None:
        """Dynamic reconfiguration (Kafka's reconfigure of ``log.cleaner.io.max.bytes.per.second``)."""
        if rate <= 0:
            raise ValueError(f"throttle rate must be > 0 bytes/s, got {rate}")
        with self._lock:
            self._rate = float(rate)

    def maybe_throttle(self, observed: float) -> None:
        """Count ``observed`` bytes; sleep (outside the lock's bookkeeping) if over the rate."""
        sleep_ms = 0
        with self._lock:
            self._observed += observed
            now = self._clock.nanoseconds()
            elapsed_ns = now - self._period_start_ns
            if elapsed_ns <= self._check_interval_ns:
                return
            rate_in_period = self._observed * 1e9 / elapsed_ns
            if rate_in_period > self._rate:
                desired_ms = self._observed / (self._rate / 1000.0)
                sleep_ms = round(desired_ms - elapsed_ns / 1e6)
            self._period_start_ns = now + max(sleep_ms, 0) * 1_000_000
            self._observed = 0.0
        if sleep_ms > 0:
            self.slept_ms += sleep_ms
            self._clock.sleep(sleep_ms)
