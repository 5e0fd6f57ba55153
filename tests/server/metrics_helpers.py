"""Helpers of the metrics endpoint tests: an endpoint over an in-process broker, and a scrape over
HTTP parsed with prometheus_client's own parser (the format is the library's, not ours)."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager

from prometheus_client.parser import text_string_to_metric_families

from server_helpers import TIMEOUT_S, Broker
from tidelog.server.metrics import MetricsEndpoint, build_registry

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


@contextmanager
def endpoint_for(broker: Broker, **options: object) -> Iterator[MetricsEndpoint]:
    """The endpoint of ``broker`` (its manager and server collectors) on a free loopback port."""
    registry = build_registry(manager=broker.manager, server=broker.server)
    endpoint = MetricsEndpoint(registry.registry, "127.0.0.1", 0, **options)  # type: ignore[arg-type]
    endpoint.start()
    try:
        yield endpoint
    finally:
        endpoint.stop()


def fetch_text(url: str, timeout_s: float = TIMEOUT_S) -> str:
    with urllib.request.urlopen(url, timeout=timeout_s) as response:
        assert response.status == 200
        return response.read().decode()


def scrape(url: str) -> Samples:
    """Every sample of one scrape, by (sample name, labels)."""
    samples: Samples = {}
    for family in text_string_to_metric_families(fetch_text(url)):
        for sample in family.samples:
            samples[sample.name, frozenset(sample.labels.items())] = sample.value
    return samples


def value(samples: Samples, name: str, **labels: str) -> float:
    """The sample ``name{labels}`` (exactly those labels); AssertionError naming it when absent."""
    key = (name, frozenset(labels.items()))
    assert key in samples, f"no sample {name}{labels}; have {sorted(k for k in samples if k[0] == name)}"
    return samples[key]


def http_status(url: str, method: str = "GET") -> tuple[int, dict[str, str]]:
    """The status and headers of one request (4xx/5xx included)."""
    request = urllib.request.Request(url, method=method)
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
            return response.status, dict(response.headers)
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers)
