"""Fixtures for every test directory.

* ``clock`` / ``scheduler``: a :class:`FakeClock` (at T0 = 1,700,000,000,000 ms) and the
  :class:`FakeScheduler` it drives; ``clock.advance(ms)`` runs due tasks, so no test sleeps.
"""

from __future__ import annotations

import pytest

from tidelog.testing import FakeClock, FakeScheduler

T0 = 1_700_000_000_000  # FakeClock's default start, ms


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


@pytest.fixture
def scheduler(clock: FakeClock) -> FakeScheduler:
    return FakeScheduler(clock)
