"""``tidelog serve`` end to end: kafka-python produces and consumes through the listener it opens,
SIGTERM stops it cleanly, and the records are in the log dir afterwards."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from server_helpers import TIMEOUT_S, serve
from tidelog.manager import LogManager
from tidelog.storage.config import BrokerConfig
from tidelog.storage.metadata import read_clean_shutdown
from tidelog.topic_partition import TopicPartition as TidelogTp


def test_serve_listens_until_sigterm(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with serve(data=data) as served:
        producer = KafkaProducer(bootstrap_servers=served.bootstrap)
        offsets = [producer.send("events", b"event-%d" % i).get(TIMEOUT_S).offset for i in range(3)]
        producer.close()
        assert offsets == [0, 1, 2]
        consumer = KafkaConsumer(bootstrap_servers=served.bootstrap, group_id=None, auto_offset_reset="earliest",
                                 consumer_timeout_ms=int(TIMEOUT_S * 1000))
        consumer.assign([TopicPartition("events", 0)])
        values = [next(consumer).value for _ in range(3)]
        consumer.close()
        assert values == [b"event-0", b"event-1", b"event-2"]
    # serve() sent SIGTERM and checked the exit code 0
    assert read_clean_shutdown(data) == -1
    with LogManager.open(BrokerConfig.from_properties({}), [data]) as manager:
        assert manager.log(TidelogTp("events", 0)).log_end_offset == 3


def test_serve_refuses_a_tls_listener_without_a_keystore(tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "tidelog.cli.main", "--data-dir", str(tmp_path / "data"),
                             "--override", "listeners=SSL://127.0.0.1:0", "serve"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert "ssl.keystore.location" in result.stderr


def test_serve_exits_with_an_error_when_its_port_is_taken(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run([sys.executable, "-m", "tidelog.cli.main", "--data-dir", str(tmp_path / "data"),
                                 "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}", "serve"],
                                capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert "cannot listen" in result.stderr
    assert read_clean_shutdown(tmp_path / "data") == -1, "the manager still shut down cleanly"
