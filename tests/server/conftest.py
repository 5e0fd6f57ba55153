"""Fixtures of the server tests: ``make_broker(**broker props)``, ``broker`` and ``restartable`` (see server_helpers)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from server_helpers import Broker, start_broker

from tidelog.manager import LogManager
from tidelog.server import ServerThread


@pytest.fixture
def make_broker(tmp_path: Path) -> Iterator[Callable[..., Broker]]:
    """``make_broker(**broker props)``: start one broker over ``tmp_path/data``."""
    started: list[tuple[LogManager, ServerThread]] = []

    def make(**props: object) -> Broker:
        manager, thread = start_broker(tmp_path / "data", **props)
        started.append((manager, thread))
        return Broker(manager, thread.server, thread.server.bound[0].port, thread.loop)

    yield make
    for manager, thread in started:
        thread.stop()
        manager.shutdown()


@pytest.fixture
def broker(make_broker: Callable[..., Broker]) -> Broker:
    return make_broker()


@pytest.fixture
def restartable() -> Iterator[list[tuple[LogManager, ServerThread]]]:
    """Brokers a test starts, stops and starts again (``start_broker``); whatever is left in the
    list is stopped and shut down after the test."""
    started: list[tuple[LogManager, ServerThread]] = []
    yield started
    for manager, thread in started:
        thread.stop()
        manager.shutdown()
