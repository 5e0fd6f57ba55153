"""Test doubles shared by the test suite and by users testing code built on tidelog.

Nothing here is used by production code paths.
"""

from __future__ import annotations


class FakeClock:
    """A clock that moves only when told. ``sleep`` advances it instead of blocking."""

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self._ns = start_ms * 1_000_000

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
