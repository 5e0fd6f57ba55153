"""Fixtures of the server tests: ``make_broker(**broker props)`` and ``broker`` (see server_helpers)."""

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
        return Broker(manager, thread.server, thread.server.bound[0].port)

    yield make
    for manager, thread in started:
        thread.stop()
        manager.shutdown()


@pytest.fixture
def broker(make_broker: Callable[..., Broker]) -> Broker:
    return make_broker()
