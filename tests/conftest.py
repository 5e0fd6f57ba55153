"""Fixtures for every test directory.

* ``clock`` / ``scheduler``: a :class:`FakeClock` (at T0 = 1,700,000,000,000 ms) and the
  :class:`FakeScheduler` it drives; ``clock.advance(ms)`` runs due tasks, so no test sleeps.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tidelog.testing import FakeClock, FakeScheduler

T0 = 1_700_000_000_000  # FakeClock's default start, ms
SPARK_TESTS = Path(__file__).parent / "spark"


def pytest_itemcollected(item: pytest.Item) -> None:
    """Spark tests share one session, so xdist runs them all on one worker (``--dist loadgroup``).

    Marked as each is collected: xdist turns the mark into a group before other
    ``pytest_collection_modifyitems`` hooks see the items.
    """
    if SPARK_TESTS in item.path.parents:
        item.add_marker(pytest.mark.xdist_group("spark"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Soak tests run only when asked for by name (``make soak`` = ``pytest -m soak``)."""
    if "soak" in (config.getoption("markexpr") or ""):
        return
    kept = [item for item in items if item.get_closest_marker("soak") is None]
    if len(kept) != len(items):
        config.hook.pytest_deselected(items=[item for item in items if item.get_closest_marker("soak")])
        items[:] = kept


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


@pytest.fixture
def scheduler(clock: FakeClock) -> FakeScheduler:
    return FakeScheduler(clock)
