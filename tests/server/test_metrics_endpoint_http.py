"""The Prometheus endpoint as an HTTP server: only GET /metrics, clear refusals, gzip, bounded
threads and connections (idle and slow scrapers never hold the broker or a normal scrape), and a
scrape that never waits for a log's lock."""

from __future__ import annotations

import gzip
import socket
import threading
import time
import urllib.request
from collections.abc import Iterator

import pytest
from kafka.protocol.consumer import FetchResponse
from kafka.protocol.producer import ProduceResponse
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.registry import CollectorRegistry

from metrics_helpers import endpoint_for, fetch_text, http_status, scrape, value
from server_helpers import TIMEOUT_S, Broker, wait_until
from server_samples import fetch, produce, record_batch
from tidelog.server.metrics import MetricsEndpoint
from tidelog.topic_partition import TopicPartition


def _raw(port: int, payload: bytes) -> bytes:
    """What the endpoint answers to ``payload`` sent as is, until it closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT_S) as sock:
        sock.sendall(payload)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


@pytest.fixture
def served(broker: Broker) -> Iterator[MetricsEndpoint]:
    with endpoint_for(broker) as endpoint:
        yield endpoint


def test_only_get_on_metrics_is_served(served: MetricsEndpoint) -> None:
    base = served.url.removesuffix("/metrics")
    status, headers = http_status(served.url + "?name[]=x")  # a query string is ignored
    assert status == 200 and headers["Content-Type"] == CONTENT_TYPE_LATEST
    assert http_status(base + "/")[0] == 404
    assert http_status(base + "/metrics/more")[0] == 404
    for method in ("POST", "PUT", "DELETE", "HEAD"):
        status, headers = http_status(served.url, method)
        assert status == 405 and headers["Allow"] == "GET", method


def test_malformed_or_oversized_requests_get_400_without_details(served: MetricsEndpoint) -> None:
    for payload in (b"GARBAGE\r\n\r\n", b"GET /metrics\r\n\r\n", b"\xff\xfe /metrics HTTP/1.1\r\n\r\n",
                    b"GET /metrics HTTP/1.1\r\nX: " + b"a" * 10000 + b"\r\n\r\n"):
        answer = _raw(served.port, payload)
        assert answer.startswith(b"HTTP/1.1 400 "), answer[:80]
        assert b"Traceback" not in answer


def test_gzip_when_the_scraper_accepts_it(served: MetricsEndpoint) -> None:
    request = urllib.request.Request(served.url, headers={"Accept-Encoding": "gzip"})
    with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
        assert response.headers["Content-Encoding"] == "gzip"
        text = gzip.decompress(response.read()).decode()
    assert "kafka_server_brokertopicmetrics_bytesin_total" in text
    assert "python_info" in text and "process_cpu_seconds_total" in text


def test_a_failing_collector_answers_500_and_nothing_of_the_error() -> None:
    class Broken:
        def collect(self) -> Iterator[GaugeMetricFamily]:
            raise RuntimeError("secret detail")

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Broken())  # type: ignore[arg-type]
    endpoint = MetricsEndpoint(registry, "127.0.0.1", 0)
    endpoint.start()
    try:
        answer = _raw(endpoint.port, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
    finally:
        endpoint.stop()
    assert answer.startswith(b"HTTP/1.1 500 ")
    assert b"secret detail" not in answer and b"Traceback" not in answer


def test_an_address_in_use_fails_start_and_stop_closes_the_port() -> None:
    registry = CollectorRegistry(auto_describe=False)
    first = MetricsEndpoint(registry, "127.0.0.1", 0)
    port = first.start()
    try:
        with pytest.raises(OSError):
            MetricsEndpoint(registry, "127.0.0.1", port).start()
    finally:
        first.stop()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT_S).close()


def test_a_silent_scraper_is_cut_off_after_the_timeout() -> None:
    endpoint = MetricsEndpoint(CollectorRegistry(auto_describe=False), "127.0.0.1", 0, timeout_s=0.3)
    endpoint.start()
    try:
        with socket.create_connection(("127.0.0.1", endpoint.port), timeout=TIMEOUT_S) as sock:
            started = time.monotonic()
            assert sock.recv(1) == b""  # closed by the endpoint, without an answer
            assert time.monotonic() - started < TIMEOUT_S
    finally:
        endpoint.stop()


def test_many_idle_and_slow_scrapers_hold_neither_the_broker_nor_a_normal_scrape(broker: Broker) -> None:
    broker.manager.create_topic("busy", 1)
    with endpoint_for(broker, max_connections=4) as endpoint:
        idle = [socket.create_connection(("127.0.0.1", endpoint.port), timeout=TIMEOUT_S) for _ in range(50)]
        partial = [socket.create_connection(("127.0.0.1", endpoint.port), timeout=TIMEOUT_S) for _ in range(10)]
        for sock in partial:
            sock.sendall(b"GET /metrics HTTP/1.1\r\n")  # a head that never ends
        threads_before = threading.active_count()
        try:
            client = broker.connect()
            started = time.monotonic()
            batch = record_batch(b"still served")
            assert client.call(produce("busy", records=batch), ProduceResponse, 9) \
                .responses[0].partition_responses[0].error_code == 0
            got = client.call(fetch("busy"), FetchResponse, 12)
            assert got.responses[0].partitions[0].records == batch
            assert time.monotonic() - started < 2.0
            client.close()
            samples = scrape(endpoint.url)  # a normal scrape, after 60 silent connections
            assert value(samples, "kafka_server_brokertopicmetrics_messagesin_total", topic="busy") == 1
            assert threading.active_count() <= threads_before + 2  # at most its two workers, however many came
        finally:
            for sock in idle + partial:
                sock.close()


def test_beyond_the_limit_of_requesting_scrapers_a_503_comes_at_once() -> None:
    release = threading.Event()
    entered: list[int] = []

    class Slow:
        def collect(self) -> Iterator[GaugeMetricFamily]:
            entered.append(1)
            release.wait(TIMEOUT_S)
            yield GaugeMetricFamily("slow", "waits", value=1)

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Slow())  # type: ignore[arg-type]
    endpoint = MetricsEndpoint(registry, "127.0.0.1", 0, max_connections=2)
    endpoint.start()
    waiting = [socket.create_connection(("127.0.0.1", endpoint.port), timeout=TIMEOUT_S) for _ in range(2)]
    try:
        for sock in waiting:
            sock.sendall(b"GET /metrics HTTP/1.1\r\n\r\n")
        # both heads read: one worker renders, the other waits for that rendering (one at a time)
        wait_until(lambda: len(entered) == 1 and endpoint.answering == 2)
        started = time.monotonic()
        assert _raw(endpoint.port, b"GET /metrics HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 503 ")
        assert time.monotonic() - started < 1.0
        release.set()
        for sock in waiting:
            assert sock.recv(64).startswith(b"HTTP/1.1 200 ")
    finally:
        release.set()
        for sock in waiting:
            sock.close()
        endpoint.stop()


def test_a_scrape_answers_while_a_log_lock_is_held(broker: Broker) -> None:
    """A long clean holds its log's lock; the scrape reads the log's figures without it."""
    broker.manager.create_topic("locked", 1)
    client = broker.connect()
    client.call(produce("locked", records=record_batch(b"a", b"b")), ProduceResponse, 9)
    client.close()
    log = broker.manager.log(TopicPartition("locked", 0))
    held, done = threading.Event(), threading.Event()

    def hold() -> None:
        with log.lock:
            held.set()
            done.wait(3 * TIMEOUT_S)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert held.wait(TIMEOUT_S)
        with endpoint_for(broker) as endpoint:
            text = fetch_text(endpoint.url, timeout_s=TIMEOUT_S)
        assert 'kafka_log_log_logendoffset{partition="0",topic="locked"} 2.0' in text
    finally:
        done.set()
        holder.join()
