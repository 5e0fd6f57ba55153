"""``metrics.listener``: its parsing (a ConfigError naming the key for anything but
http://host:port), and ``tidelog serve`` serving /metrics end to end (URL printed and in the
address file, figures of a real client's produce, endpoint gone once it stops)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import urllib.parse
from pathlib import Path

import pytest
from kafka import KafkaProducer

from metrics_helpers import scrape, value
from server_helpers import TIMEOUT_S, serve
from tidelog.errors import ConfigError
from tidelog.server.metrics import MetricsListener, parse_metrics_listener
from tidelog.server.staged_api import SERVE_ADDRESS_FILE


@pytest.mark.parametrize(("text", "expected"), [
    ("", None),
    ("http://127.0.0.1:0", MetricsListener("127.0.0.1", 0)),
    ("http://0.0.0.0:9644", MetricsListener("0.0.0.0", 9644)),
    ("HTTP://localhost:9644", MetricsListener("localhost", 9644)),
    ("http://[::1]:9644", MetricsListener("::1", 9644)),
])
def test_listener_values_accepted(text: str, expected: MetricsListener | None) -> None:
    assert parse_metrics_listener(text) == expected


@pytest.mark.parametrize(("text", "why"), [
    ("https://127.0.0.1:9644", "plain HTTP"),
    ("127.0.0.1:9644", "http://host:port"),
    ("http://127.0.0.1", "host and port"),
    ("http://:9644", "host and port"),
    ("http://127.0.0.1:9644/metrics", "path"),
    ("http://127.0.0.1:9644/", "path"),
    ("http://127.0.0.1:99999", "0 to 65535"),
    ("http://127.0.0.1:-1", "0 to 65535"),
    ("http://127.0.0.1:port", "0 to 65535"),
    ("http://::1:9644", "brackets"),
])
def test_listener_values_refused_name_the_key(text: str, why: str) -> None:
    with pytest.raises(ConfigError) as raised:
        parse_metrics_listener(text)
    assert raised.value.context["config"] == "metrics.listener"
    assert why in str(raised.value) and text in str(raised.value)


def test_serve_refuses_a_bad_listener_before_opening_anything(tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "tidelog.cli.main", "--data-dir", str(tmp_path / "data"),
                             "--override", "listeners=PLAINTEXT://127.0.0.1:0",
                             "--override", "metrics.listener=http://127.0.0.1:9644/metrics", "serve"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert "metrics.listener" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "data").exists()  # refused before the log dirs were opened


def test_serve_exits_with_an_error_when_the_metrics_port_is_taken(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run([sys.executable, "-m", "tidelog.cli.main", "--data-dir", str(tmp_path / "data"),
                                 "--override", "listeners=PLAINTEXT://127.0.0.1:0",
                                 "--override", f"metrics.listener=http://127.0.0.1:{port}", "serve"],
                                capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert f"cannot listen on metrics.listener=http://127.0.0.1:{port}" in result.stderr


def test_serve_serves_metrics_end_to_end(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with serve("metrics.listener=http://127.0.0.1:0", "auto.create.topics.enable=true", data=data) as served:
        address = json.loads((data / SERVE_ADDRESS_FILE).read_text())
        url = address["metrics"]
        assert any(f"metrics on {url}" in line for line in served.before_banner)  # printed before the load
        parsed = urllib.parse.urlsplit(url)
        assert parsed.hostname == "127.0.0.1" and parsed.port and parsed.path == "/metrics"

        producer = KafkaProducer(bootstrap_servers=served.bootstrap, linger_ms=0)
        for i in range(5):
            producer.send("served", value=b"%d" % i, partition=0).get(timeout=TIMEOUT_S)
        producer.close()
        samples = scrape(url)
        assert value(samples, "kafka_server_brokertopicmetrics_messagesin_total", topic="served") == 5
        assert value(samples, "kafka_log_log_logendoffset", topic="served", partition="0") == 5
        assert value(samples, "tidelog_log_recovery_complete") == 1
        assert value(samples, "kafka_server_socket_server_metrics_connection_count", listener="PLAINTEXT",
                     networkProcessor="0") >= 0
    with pytest.raises(OSError):  # stopped with the server
        socket.create_connection((parsed.hostname, parsed.port), timeout=TIMEOUT_S).close()


def test_serve_without_the_key_serves_no_endpoint(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with serve(data=data) as served:
        assert "metrics" not in json.loads((data / SERVE_ADDRESS_FILE).read_text())
        assert not any("metrics on" in line for line in served.before_banner)
