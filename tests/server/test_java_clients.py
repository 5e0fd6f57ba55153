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
    # the console producer's defaults: an idempotent producer (acks=all, InitProducerId first)
    _run("org.apache.kafka.tools.ConsoleProducer", *bootstrap, "--topic", "jt", "--command-property", "compression.type=zstd",
         "--reader-property", "parse.key=true", stdin="a\t1\nb\t2\nc\t3\n")
    log = broker.manager.log(TopicPartition("jt", 0))
    assert log.high_watermark == 3
    assert [e.last_seq for e in log.producer_state.active_producers.values()] == [2]
    out = _run("org.apache.kafka.tools.consumer.ConsoleConsumer", *bootstrap, "--topic", "jt", "--partition", "0",
               "--offset", "earliest", "--max-messages", "3", "--formatter-property", "print.key=true")
    assert out.splitlines() == ["a\t1", "b\t2", "c\t3"]
    assert _run("org.apache.kafka.tools.GetOffsetShell", *bootstrap, "--topic", "jt", "--time", "-1").split() == ["jt:0:3"]


def test_kafka_admin_tools_alter_partitions_configs_and_records(broker: Broker) -> None:
    """kafka-topics --alter, kafka-configs, kafka-delete-records, kafka-log-dirs and kafka-cluster,
    Kafka's own admin tools, against tidelog."""
    try:
        KAFKA_4.classpath()
    except KafkaToolMissing as missing:
        pytest.skip(f"Kafka's Java client needs Java and Maven: {missing}")
    import json
    import tempfile

    from tidelog.records.builder import build_batch

    bootstrap = ["--bootstrap-server", broker.bootstrap]
    broker.manager.create_topic("admin", 1)
    broker.manager.append(TopicPartition("admin", 0), build_batch([(None, b"v%d" % i) for i in range(8)]))
    _run("org.apache.kafka.tools.TopicCommand", *bootstrap, "--alter", "--topic", "admin", "--partitions", "3")
    assert broker.manager.partitions("admin") == [0, 1, 2]

    _run("kafka.admin.ConfigCommand", *bootstrap, "--alter", "--entity-type", "topics", "--entity-name", "admin",
         "--add-config", "retention.ms=86400000,segment.bytes=1048576")
    assert broker.manager.topic_overrides("admin") == {"retention.ms": "86400000", "segment.bytes": "1048576"}
    _run("kafka.admin.ConfigCommand", *bootstrap, "--alter", "--entity-type", "topics", "--entity-name", "admin",
         "--delete-config", "segment.bytes")
    described = _run("kafka.admin.ConfigCommand", *bootstrap, "--describe", "--entity-type", "topics",
                     "--entity-name", "admin")
    assert "retention.ms=86400000" in described and "segment.bytes" not in described

    with tempfile.NamedTemporaryFile("w", suffix=".json") as spec:
        json.dump({"version": 1, "partitions": [{"topic": "admin", "partition": 0, "offset": 5}]}, spec)
        spec.flush()
        out = _run("org.apache.kafka.tools.DeleteRecordsCommand", *bootstrap, "--offset-json-file", spec.name)
    assert "low_watermark: 5" in out
    assert broker.manager.log(TopicPartition("admin", 0)).log_start_offset == 5

    dirs = _run("org.apache.kafka.tools.LogDirsCommand", *bootstrap, "--describe", "--topic-list", "admin")
    assert str(broker.manager.log_dirs()[0].path) in dirs and '"partition":"admin-0"' in dirs
    cluster_id = _run("org.apache.kafka.tools.ClusterTool", "cluster-id", *bootstrap)
    assert "Cluster ID:" in cluster_id
