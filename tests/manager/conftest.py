"""Shared fixtures for the LogManager tests.

* ``log_dirs``: three log dirs under ``tmp_path`` (not created: the manager creates them).
* ``broker``: an :class:`Opener` (``manager_helpers``) that builds a :class:`BrokerConfig` from
  its defaults plus overrides (a mapping of Kafka names), and opens a :class:`LogManager` on a fake
  clock and scheduler with ``broker.open(...)``. Each open gets a fresh :class:`FakeClock` (starting where the last one
  stopped) and :class:`FakeScheduler`, so tasks still queued by a manager that was shut down or
  crashed never run against the next one. ``broker.clock`` / ``broker.scheduler`` are those of
  the last open. Managers still open at teardown are shut down.

Plain helpers (``batch``, ``crash``, checkpoint readers ...) are in ``manager_helpers.py``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from manager_helpers import Opener


@pytest.fixture
def log_dirs(tmp_path: Path) -> list[Path]:
    return [tmp_path / f"logs{i}" for i in range(3)]


@pytest.fixture
def broker(log_dirs: list[Path]) -> Iterator[Opener]:
    opener = Opener(log_dirs)
    yield opener
    opener.close_all()


@pytest.fixture
def one_dir(log_dirs: list[Path]) -> list[Path]:
    """Just the first log dir (most scenarios need only one)."""
    return log_dirs[:1]
