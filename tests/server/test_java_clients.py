"""Kafka's own Java client (4.3.1, from Maven Central) against the server: kafka-topics creates,
kafka-console-producer writes, kafka-console-consumer and kafka-get-offsets read. Skipped, saying
why, where Java or Maven is missing (as tests/interop)."""

from __future__ import annotations

import subprocess

import pytest

from kafka_oracle import KAFKA_4, KafkaToolMissing
from server_helpers import Broker
from tidelog.topic_partition import TopicPartition


def _run(main_class: str, *args: str, stdin: str | None = None) -> str:
    result = subprocess.run(KAFKA_4.java_command(main_class, *args), input=stdin, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def test_kafka_console_tools_produce_and_consume(broker: Broker) -> None:
    try:
        KAFKA_4.classpath()
    except KafkaToolMissing as missing:
        pytest.skip(f"Kafka's Java client needs Java and Maven: {missing}")
    bootstrap = ["--bootstrap-server", broker.bootstrap]
    assert "Created topic jt." in _run("org.apache.kafka.tools.TopicCommand", *bootstrap, "--create", "--topic", "jt",
                                       "--partitions", "1")
    _run("org.apache.kafka.tools.ConsoleProducer", *bootstrap, "--topic", "jt",
         "--command-property", "enable.idempotence=false", "--command-property", "compression.type=zstd",
         "--reader-property", "parse.key=true", stdin="a\t1\nb\t2\nc\t3\n")
    assert broker.manager.log(TopicPartition("jt", 0)).high_watermark == 3
    out = _run("org.apache.kafka.tools.consumer.ConsoleConsumer", *bootstrap, "--topic", "jt", "--partition", "0",
               "--offset", "earliest", "--max-messages", "3", "--formatter-property", "print.key=true")
    assert out.splitlines() == ["a\t1", "b\t2", "c\t3"]
    assert _run("org.apache.kafka.tools.GetOffsetShell", *bootstrap, "--topic", "jt", "--time", "-1").split() == ["jt:0:3"]
