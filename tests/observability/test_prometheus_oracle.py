"""The oracle itself (``prometheus_oracle``): a real Prometheus scrapes a prometheus_client endpoint
in this process, and what the test set there comes back through the HTTP API; a target that does not
answer is reported down with its error (both in one Prometheus: its first scrape comes ~5 s after
start, when its target discovery first updates); Prometheus listens on loopback only and stop() leaves
nothing running."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

from kafka_oracle.broker import free_port
from prometheus_oracle import PrometheusBinaries, PrometheusError, PrometheusServer


@pytest.fixture
def exporter() -> Iterator[tuple[str, Gauge, Counter]]:
    """A prometheus_client HTTP endpoint on a free loopback port: (URL, gauge, counter)."""
    registry = CollectorRegistry(auto_describe=True)
    gauge = Gauge("oracle_probe_level", "a level the test sets", ["kind"], registry=registry)
    counter = Counter("oracle_probe_events", "events the test counts", registry=registry)
    server, thread = start_http_server(0, addr="127.0.0.1", registry=registry)
    yield f"http://127.0.0.1:{server.server_port}/metrics", gauge, counter
    server.shutdown()
    server.server_close()
    thread.join()


def _listening_addresses(port: int) -> set[str]:
    """Local addresses (hex, as /proc/net/tcp writes them) with a socket LISTENing on ``port``."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        if not os.path.exists(table):
            continue
        for line in open(table).read().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, _, hex_port = local.partition(":")
            if state == "0A" and int(hex_port, 16) == port:
                found.add(address)
    return found


def test_the_api_returns_what_the_endpoint_served_at_the_first_scrape_after_a_change(
        prometheus: Callable[..., PrometheusServer], exporter: tuple[str, Gauge, Counter]) -> None:
    url, gauge, counter = exporter
    gauge.labels("a").set(7)
    gauge.labels("b").set(-2.5)
    counter.inc(3)
    nowhere = f"http://127.0.0.1:{free_port()}/metrics"  # nothing listens there
    prom = prometheus(url, nowhere)  # one Prometheus: its first scrape comes ~5 s after start
    _check_the_target_that_does_not_answer(prom, nowhere)
    changed = time.time()
    scraped_at = prom.wait_for_scrape_after(changed)  # each target has its own offset in the interval
    assert scraped_at > changed
    target = {t.scrape_url: t for t in prom.targets()}[url]
    assert (target.health, target.last_error) == ("up", "")
    assert target.last_scrape > 0 and target.labels["instance"] == prom.instance(0)
    assert prom.values("oracle_probe_level", "kind") == {"a": 7.0, "b": -2.5}
    assert prom.value("oracle_probe_events_total") == 3.0
    assert prom.value('oracle_probe_level{kind="missing"}') is None
    gauge.labels("a").set(8.5)
    counter.inc()
    prom.wait_for_scrape_after(time.time())
    assert prom.value('oracle_probe_level{kind="a"}') == 8.5
    assert prom.value("oracle_probe_events_total") == 4.0
    assert prom.value("sum(oracle_probe_level)") == 6.0
    history = prom.raw_samples('oracle_probe_level{kind="a"}', 60)
    assert [v for _, v in history][-1] == 8.5 and 7.0 in [v for _, v in history]
    assert [t for t, _ in history] == sorted(t for t, _ in history) and history[-1][0] > changed
    assert prom.raw_samples('oracle_probe_level{kind="missing"}', 60) == []
    assert prom.label_values("kind", "oracle_probe_level") == ["a", "b"]
    assert prom.label_values("kind", "oracle_probe_events_total") == []
    with pytest.raises(PrometheusError, match="2 series, expected one"):
        prom.raw_samples("oracle_probe_level", 60)
    assert prom.value("scalar(oracle_probe_events_total) * 2") == 8.0  # a scalar result
    with pytest.raises(PrometheusError, match="2 samples, expected one"):
        prom.value("oracle_probe_level")
    with pytest.raises(PrometheusError, match="bad_data"):
        prom.query("sum(oracle_probe_level")
    assert prom.wait_for("oracle_probe_events_total", lambda v: v == 4.0, "the counter") == 4.0
    with pytest.raises(PrometheusError, match=r"the gauge: 'oracle_probe_level\{kind=\"a\"\}' is still 8.5"):
        prom.wait_for('oracle_probe_level{kind="a"}', lambda v: v == 9.0, "the gauge", timeout_s=1.5)


def _check_the_target_that_does_not_answer(prom: PrometheusServer, url: str) -> None:
    with pytest.raises(PrometheusError, match="failed") as failed:
        prom.wait_for_scrape_after(time.time(), target_index=1)
    assert "connection refused" in str(failed.value)
    target = {t.scrape_url: t for t in prom.targets()}[url]
    assert target.health == "down" and "connection refused" in target.last_error
    with pytest.raises(PrometheusError, match="targets not all up"):
        prom.wait_until_up(timeout_s=0.5)


def test_prometheus_listens_on_loopback_only_and_stop_leaves_nothing(
        tmp_path: Path, prometheus_binaries: PrometheusBinaries, exporter: tuple[str, Gauge, Counter]) -> None:
    with PrometheusServer(tmp_path / "prom", [exporter[0]], binaries=prometheus_binaries) as prom:
        pid, port = prom.pid, prom.port
        assert pid is not None and prom.running
        assert _listening_addresses(port) == {"0100007F"}  # 127.0.0.1, not 0.0.0.0
        assert (tmp_path / "prom" / "data").is_dir()  # its own TSDB, not ./data
        assert '"scrape_interval": "1000ms"' in prom.config_file.read_text()
    assert not prom.running and prom.pid is None
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    with pytest.raises(ConnectionRefusedError), socket.create_connection(("127.0.0.1", port), timeout=2):
        pass
    with pytest.raises(PrometheusError, match="not running"):
        prom.query("up")
    prom.stop()  # idempotent


class _TimeoutPastInterval(PrometheusServer):
    """A config Prometheus refuses: a scrape timeout longer than the scrape interval."""

    def _config(self) -> dict[str, object]:
        config = super()._config()
        config["global"] = {**config["global"], "scrape_timeout": "5s"}  # type: ignore[dict-item]
        return config


def test_a_config_promtool_refuses_is_reported_before_prometheus_starts(
        tmp_path: Path, prometheus_binaries: PrometheusBinaries) -> None:
    server = _TimeoutPastInterval(tmp_path / "prom", ["http://127.0.0.1:9/metrics"], binaries=prometheus_binaries)
    with pytest.raises(PrometheusError, match="(?s)promtool check config .* refused it.*scrape timeout greater"):
        server.start()
    assert server.pid is None and not (tmp_path / "prom" / "prometheus.log").exists()


def test_a_target_without_a_port_is_refused() -> None:
    with pytest.raises(ValueError, match="expected http://host:port"):
        PrometheusServer(Path("/nonexistent"), ["http://127.0.0.1/metrics"])
    with pytest.raises(ValueError, match="at least one"):
        PrometheusServer(Path("/nonexistent"), [])
