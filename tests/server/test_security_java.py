"""Kafka's own Java client (kafka-console-producer/consumer, from Maven Central) authenticating
with SASL/SCRAM and SASL/PLAIN (Java's ScramSaslClient and PlainSaslClient, not ours) over TLS
with our PEM keys. Skipped, saying why, where Java or Maven is missing."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from kafka_oracle import KAFKA_4, KafkaToolMissing
from security_helpers import SecureBroker, add_user, make_pki, start_secure_broker
from tidelog.topic_partition import TopicPartition


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[SecureBroker]:
    try:
        KAFKA_4.classpath()
    except KafkaToolMissing as missing:
        pytest.skip(f"Kafka's Java client needs Java and Maven: {missing}")
    add_user(tmp_path / "data", "alice", "alice-secret", "SCRAM-SHA-256", "PLAIN")
    pki = make_pki(tmp_path / "pki")
    started = start_secure_broker(tmp_path / "data", listeners="SASL_SSL://127.0.0.1:0", **{
        "sasl.enabled.mechanisms": "SCRAM-SHA-256,PLAIN", "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(pki.server_keystore)})
    (tmp_path / "ca.pem").write_bytes(pki.ca.read_bytes())
    yield started
    started.stop()


def _client_config(tmp_path: Path, mechanism: str, module: str, password: str) -> str:
    path = tmp_path / f"client-{mechanism}-{password}.properties"
    path.write_text("security.protocol=SASL_SSL\n"
                    f"sasl.mechanism={mechanism}\n"
                    f'sasl.jaas.config={module} required username="alice" password="{password}";\n'
                    "ssl.truststore.type=PEM\n"
                    f"ssl.truststore.location={tmp_path / 'ca.pem'}\n")
    return str(path)


def _run(main_class: str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(KAFKA_4.java_command(main_class, *args), input=stdin, capture_output=True, text=True,
                          timeout=120)


def test_console_producer_with_scram_and_consumer_with_plain_over_tls(broker: SecureBroker, tmp_path: Path) -> None:
    broker.manager.create_topic("jt", 1)
    scram = _client_config(tmp_path, "SCRAM-SHA-256", "org.apache.kafka.common.security.scram.ScramLoginModule",
                           "alice-secret")
    produced = _run("org.apache.kafka.tools.ConsoleProducer", "--bootstrap-server", broker.bootstrap, "--topic", "jt",
                    "--command-config", scram, stdin="a\nb\n")
    assert produced.returncode == 0, produced.stderr[-3000:]
    assert broker.manager.log(TopicPartition("jt", 0)).high_watermark == 2
    plain = _client_config(tmp_path, "PLAIN", "org.apache.kafka.common.security.plain.PlainLoginModule",
                           "alice-secret")
    consumed = _run("org.apache.kafka.tools.consumer.ConsoleConsumer", "--bootstrap-server", broker.bootstrap,
                    "--topic", "jt", "--partition", "0", "--offset", "earliest", "--max-messages", "2",
                    "--command-config", plain)
    assert consumed.returncode == 0, consumed.stderr[-3000:]
    assert consumed.stdout.splitlines() == ["a", "b"]


def test_java_client_with_a_wrong_scram_password_is_told_why(broker: SecureBroker, tmp_path: Path) -> None:
    wrong = _client_config(tmp_path, "SCRAM-SHA-256", "org.apache.kafka.common.security.scram.ScramLoginModule",
                           "wrong")
    listed = _run("org.apache.kafka.tools.TopicCommand", "--bootstrap-server", broker.bootstrap, "--list",
                  "--command-config", wrong)
    assert listed.returncode != 0
    assert ("Authentication failed during authentication due to invalid credentials with SASL mechanism "
            "SCRAM-SHA-256") in listed.stdout + listed.stderr
