"""Fixtures of the abuse and security tests: ``serve(**broker props)`` starts a real ``tidelog serve``
subprocess over ``tmp_path/data`` and stops it (SIGTERM) after the test. tests/server's helpers
(raw Kafka client, sample requests, PKI) are imported from there."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

sys.path.append(str(Path(__file__).parent.parent / "server"))

from abuse_helpers import Served, start_serve  # noqa: E402


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[..., Served]]:
    """``serve(data=None, umask=None, **broker props)``: a started ``tidelog serve``."""
    started: list[Served] = []

    def start(data: Path | None = None, umask: int | None = None, **props: object) -> Served:
        served = start_serve(data or tmp_path / "data", umask=umask, **props)
        started.append(served)
        return served

    yield start
    for served in started:
        served.stop()
