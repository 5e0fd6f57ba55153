"""The broker epoch in a Kafka-written ``.kafka_cleanshutdown`` survives tidelog.

A Kafka 4 broker registers with the broker epoch its marker holds; a marker rewritten with
``"brokerEpoch":-1`` makes its controller treat the stop as unclean (an unclean leader election on
every partition of the dir). The session broker writes a topic and stops cleanly; its dir is copied
(``cp -a``) and the broker started again for the other tests. On the copy:

* the read-only commands (``explain``, ``consume``, ``configs describe``, ``topics describe``,
  ``log-dirs``, ``offsets``) leave the marker's bytes, inode and mtime as Kafka wrote them;
* ``tidelog serve`` (kafka-python produces through it, SIGTERM stops it) writes the marker back
  with Kafka's broker epoch;
* a Kafka broker then started on the copy sees a clean stop: no ``handleBrokerUncleanShutdown``,
  no unclean leader election (with the -1 tidelog used to write, it elected every partition
  uncleanly).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KafkaTopicPartition
from kafka.admin import KafkaAdminClient, NewTopic

from kafka_oracle import KafkaBroker, KafkaDistribution
from tests.cli_helpers import run_cli
from tidelog.storage.metadata import read_clean_shutdown

pytestmark = pytest.mark.xdist_group("kafka_broker")

TOPIC = "marker-kept"
RECORDS = 5
TIMEOUT_S = 60.0
MARKER = ".kafka_cleanshutdown"


def write_topic(broker: KafkaBroker) -> None:
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap_servers)
    try:
        admin.create_topics([NewTopic(TOPIC, 1, 1)])
    finally:
        admin.close()
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap_servers, linger_ms=0)
    for i in range(RECORDS):
        producer.send(TOPIC, value=b"kafka-%d" % i, partition=0).get(TIMEOUT_S)
    producer.close()


@pytest.fixture(scope="module")
def copy(kafka_broker_session: KafkaBroker, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the session broker's dir after a clean stop, with the topic and Kafka's marker."""
    broker = kafka_broker_session
    if not broker.running:
        broker.start()
    write_topic(broker)
    broker.stop()
    try:
        target = tmp_path_factory.mktemp("kafka-marker") / "copy"
        subprocess.run(["cp", "-a", str(broker.log_dir), str(target)], check=True)
    finally:
        broker.start()
    for path in target.iterdir():
        if path.is_dir() and not path.name.startswith((TOPIC, "__")):
            subprocess.run(["rm", "-rf", str(path)], check=True)
    return target


@pytest.fixture(scope="module")
def kafka_epoch(copy: Path) -> int:
    """The broker epoch Kafka's clean stop wrote, read before any tidelog command ran."""
    epoch = read_clean_shutdown(copy)
    assert epoch is not None
    return epoch


def marker_state(data: Path) -> tuple[bytes, int, int]:
    stat = (data / MARKER).stat()
    return (data / MARKER).read_bytes(), stat.st_ino, stat.st_mtime_ns


def test_kafka_left_a_marker_with_its_broker_epoch(kafka_epoch: int) -> None:
    assert kafka_epoch >= 0


@pytest.mark.parametrize("args", [
    ("explain", TOPIC),
    ("consume", TOPIC, "--from-beginning"),
    ("configs", "describe", TOPIC, "--all"),
    ("topics", "describe", TOPIC),
    ("log-dirs",),
    ("offsets", TOPIC),
    ("metrics",),
], ids=lambda a: " ".join(a[:2]))
def test_a_read_only_command_leaves_kafkas_marker_untouched(copy: Path, kafka_epoch: int,
                                                            args: tuple[str, ...]) -> None:
    before = marker_state(copy)
    code, out, err = run_cli(copy, *args)
    assert code == 0, err
    assert marker_state(copy) == before
    if args[0] == "consume":
        assert out.decode().splitlines() == [f"kafka-{i}" for i in range(RECORDS)]


def listening_on(process: subprocess.Popen[str]) -> str:
    """The bootstrap address ``tidelog serve`` announces on stderr (warnings may come first)."""
    assert process.stderr is not None
    lines = []
    for line in process.stderr:
        lines.append(line)
        match = re.search(r"listening on PLAINTEXT://127\.0\.0\.1:(\d+)", line)
        if match:
            return f"127.0.0.1:{match.group(1)}"
    raise AssertionError(f"tidelog serve exited: {''.join(lines)}")


def test_serve_writes_kafkas_broker_epoch_back(copy: Path, kafka_epoch: int) -> None:
    process = subprocess.Popen([sys.executable, "-m", "tidelog.cli.main", "--data-dir", str(copy),
                                "--override", "listeners=PLAINTEXT://127.0.0.1:0", "serve"],
                               stderr=subprocess.PIPE, text=True)
    try:
        bootstrap = listening_on(process)
        assert not (copy / MARKER).exists(), "serve deletes the marker before it loads (KAFKA-10471)"
        producer = KafkaProducer(bootstrap_servers=bootstrap)
        assert producer.send(TOPIC, b"tidelog", partition=0).get(TIMEOUT_S).offset == RECORDS
        producer.close()
        consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, auto_offset_reset="earliest",
                                 consumer_timeout_ms=int(TIMEOUT_S * 1000))
        consumer.assign([KafkaTopicPartition(TOPIC, 0)])
        assert [next(consumer).value for _ in range(RECORDS + 1)][-1] == b"tidelog"
        consumer.close()
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=TIMEOUT_S) == 0
    finally:
        if process.poll() is None:
            os.kill(process.pid, signal.SIGKILL)
    assert read_clean_shutdown(copy) == kafka_epoch


def test_kafka_starts_on_the_dir_tidelog_served_without_an_unclean_election(
        copy: Path, kafka_epoch: int, kafka4: KafkaDistribution, tmp_path: Path) -> None:
    """Runs after the serve test: a Kafka broker started on the copy sees its own clean stop (a
    marker with -1 makes its controller log ``handleBrokerUncleanShutdown`` and elect every
    partition's leader uncleanly; with the epoch kept it elects from the ELR)."""
    assert read_clean_shutdown(copy) == kafka_epoch
    broker = KafkaBroker(kafka4, copy, tmp_path / "work", overrides={"transaction.state.log.num.partitions": "1"})
    broker.start()
    try:
        broker.wait_for(lambda: f"{TOPIC}-0" in _leader_lines(broker), "a leader for the topic", TIMEOUT_S)
    finally:
        broker.stop()
    log = broker.server_log.read_text()
    assert "handleBrokerUncleanShutdown" not in log
    assert [line for line in _leader_lines(broker).splitlines() if "unclean election" in line] == []


def _leader_lines(broker: KafkaBroker) -> str:
    """server.log's "Setting new leader ..." and "Leader <tp> ... starts" lines."""
    text = broker.server_log.read_text() if broker.server_log.exists() else ""
    return "\n".join(line for line in text.splitlines() if "new leader" in line or " starts at leader epoch" in line)
