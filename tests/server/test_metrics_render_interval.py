"""``tidelog.metrics.min.render.interval.ms``: within the interval every scraper gets the last
rendering (so the broker builds at most one exposition per interval however many scrapers come),
after it a new one; 0 renders every scrape. Driven by a fake clock on a counting collector."""

from __future__ import annotations

import gzip
import threading
import urllib.request
from collections.abc import Iterator

import pytest
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import CollectorRegistry

from server_helpers import TIMEOUT_S
from tidelog.errors import ConfigError
from tidelog.server.metrics import MetricsEndpoint
from tidelog.server.metrics.endpoint import RENDER_CPU_BUDGET
from tidelog.storage.config import BrokerConfig
from tidelog.testing import FakeClock


class CountingCollector:
    """A family whose value is how many times it was collected."""

    def __init__(self) -> None:
        self.renderings = 0

    def collect(self) -> Iterator[CounterMetricFamily]:
        self.renderings += 1
        yield CounterMetricFamily("probe_renderings", "collections so far", value=self.renderings)


def _scrape(url: str, gzipped: bool = False) -> str:
    request = urllib.request.Request(url, headers={"Accept-Encoding": "gzip"} if gzipped else {})
    with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
        body = response.read()
    return (gzip.decompress(body) if gzipped else body).decode()


def _served(interval_s: float, clock: FakeClock) -> tuple[MetricsEndpoint, CountingCollector]:
    collector = CountingCollector()
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)  # type: ignore[arg-type]
    endpoint = MetricsEndpoint(registry, "127.0.0.1", 0, render_interval_s=interval_s, clock=clock)
    endpoint.start()
    return endpoint, collector


def test_scrapes_within_the_interval_share_one_rendering() -> None:
    clock = FakeClock()
    endpoint, collector = _served(1.0, clock)
    try:
        first = _scrape(endpoint.url)
        assert "probe_renderings_total 1.0" in first
        clock.advance(999)
        assert _scrape(endpoint.url) == first and _scrape(endpoint.url, gzipped=True) == first
        assert collector.renderings == 1
        clock.advance(1)  # the interval is over
        assert "probe_renderings_total 2.0" in _scrape(endpoint.url, gzipped=True)
        assert _scrape(endpoint.url) == _scrape(endpoint.url, gzipped=True) and collector.renderings == 2
    finally:
        endpoint.stop()


def test_many_concurrent_scrapers_cost_one_rendering() -> None:
    clock = FakeClock()
    endpoint, collector = _served(60.0, clock)
    try:
        texts: list[str] = []
        threads = [threading.Thread(target=lambda: texts.append(_scrape(endpoint.url))) for _ in range(12)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert len(texts) == 12 and len(set(texts)) == 1 and collector.renderings == 1
    finally:
        endpoint.stop()


def test_zero_renders_every_scrape_and_a_clock_going_back_renders_again() -> None:
    clock = FakeClock()
    endpoint, collector = _served(0.0, clock)
    try:
        for expected in (1, 2, 3):
            assert f"probe_renderings_total {expected}.0" in _scrape(endpoint.url)
    finally:
        endpoint.stop()
    clock = FakeClock(start_ms=10_000)
    endpoint, collector = _served(5.0, clock)
    try:
        _scrape(endpoint.url)
        clock._ns -= 1_000_000_000  # a monotonic clock never does this; the cache must not stick forever
        _scrape(endpoint.url)
        assert collector.renderings == 2
    finally:
        endpoint.stop()


def test_the_broker_key_defaults_to_one_second_and_refuses_negatives() -> None:
    assert BrokerConfig.from_properties({}).get("tidelog.metrics.min.render.interval.ms") == 1000
    with pytest.raises(ConfigError, match="tidelog.metrics.min.render.interval.ms"):
        BrokerConfig.from_properties({"tidelog.metrics.min.render.interval.ms": "-1"})


def test_a_costly_rendering_is_served_until_the_cpu_budget_covers_it() -> None:
    """A rendering that took 100 ms of CPU serves 100 ms / RENDER_CPU_BUDGET (5 s), beyond the 1 s
    interval: rendering never takes more than that share of a core, however many partitions."""
    clock, cpu = FakeClock(), iter(range(0, 10**12, 100_000_000))  # each reading 100 ms after the last
    collector = CountingCollector()
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)  # type: ignore[arg-type]
    endpoint = MetricsEndpoint(registry, "127.0.0.1", 0, render_interval_s=1.0, clock=clock,
                               cpu_time_ns=lambda: next(cpu))
    endpoint.start()
    try:
        _scrape(endpoint.url)
        held_ms = int(0.1 / RENDER_CPU_BUDGET * 1000)
        clock.advance(held_ms - 1)
        _scrape(endpoint.url)
        assert collector.renderings == 1
        clock.advance(1)
        _scrape(endpoint.url)
        assert collector.renderings == 2
    finally:
        endpoint.stop()


def test_a_served_rendering_is_answered_without_a_worker() -> None:
    """While the last rendering is served, a scrape is answered on the endpoint's loop thread: it
    answers even with both render workers held."""
    clock = FakeClock()
    endpoint, collector = _served(60.0, clock)
    held = threading.Event()
    try:
        _scrape(endpoint.url)
        _scrape(endpoint.url, gzipped=True)  # the gzip form is made once, by a worker
        blockers = [endpoint._workers.submit(held.wait, TIMEOUT_S) for _ in range(2)]
        assert "probe_renderings_total 1.0" in _scrape(endpoint.url)
        assert "probe_renderings_total 1.0" in _scrape(endpoint.url, gzipped=True)
        held.set()
        for blocker in blockers:
            blocker.result(TIMEOUT_S)
        assert collector.renderings == 1
    finally:
        held.set()
        endpoint.stop()
