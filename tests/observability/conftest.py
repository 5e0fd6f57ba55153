"""Fixtures of the observability tests: a real Prometheus (``prometheus_oracle``) scraping a
``tidelog serve``; the tests read every figure through Prometheus's HTTP API.

* ``prometheus_binaries``: ``prometheus`` and ``promtool``, from PATH or installed once per machine
  from Debian's package (``make prometheus``, run by ``make test``). Skipped, with the reason, only
  where they cannot be installed here (no apt-get, not root and no passwordless sudo, no package);
  a failing install fails the tests.
* ``prometheus``: ``prometheus(*urls)`` starts a Prometheus (data in the test's tmp dir, 127.0.0.1,
  a free port, scraping every second) over those ``/metrics`` URLs and returns it once ready; each
  one is stopped after the test.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from prometheus_oracle import PrometheusBinaries, PrometheusMissing, PrometheusServer, prometheus_binaries as _binaries

sys.path.append(str(Path(__file__).parent.parent / "server"))  # server_helpers: serve(), TIMEOUT_S


@pytest.fixture(scope="session")
def prometheus_binaries() -> PrometheusBinaries:
    try:
        return _binaries()
    except PrometheusMissing as missing:
        pytest.skip(f"the observability tests need Prometheus: {missing}")


@pytest.fixture
def prometheus(tmp_path: Path, prometheus_binaries: PrometheusBinaries) -> Iterator[Callable[..., PrometheusServer]]:
    """``prometheus(*urls, scrape_interval_s=1.0)``: a started Prometheus scraping ``urls``."""
    started: list[PrometheusServer] = []

    def start(*urls: str, scrape_interval_s: float = 1.0) -> PrometheusServer:
        server = PrometheusServer(tmp_path / f"prometheus-{len(started)}", urls, scrape_interval_s=scrape_interval_s,
                                  binaries=prometheus_binaries)
        started.append(server)
        server.start()
        return server

    yield start
    for server in started:
        server.stop()
