"""Kafka's own Java tools (4.3.1, from Maven Central) against the group coordinator:
kafka-console-consumer with ``--group`` consumes and commits, kafka-consumer-groups lists and
describes the group with its offsets and lag, and Kafka's DumpLogSegments ``--offsets-decoder``
reads the ``__consumer_offsets`` segments tidelog wrote as Kafka's own records. Skipped, saying
why, where Java or Maven is missing."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable

import pytest

from kafka_oracle import KAFKA_4, KafkaToolMissing
from server_helpers import Broker
from tidelog.records.builder import build_batch
from tidelog.server.groups.records import OFFSETS_TOPIC, offsets_partition_for
from tidelog.topic_partition import TopicPartition


FAST_START = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")  # short-lived tools: about a third faster to start


def _run(main_class: str, *args: str) -> str:
    command = KAFKA_4.java_command(main_class, *args, jvm_options=FAST_START)
    result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


@pytest.fixture
def java_broker(make_broker: Callable[..., Broker]) -> Broker:
    try:
        KAFKA_4.classpath()
    except KafkaToolMissing as missing:
        pytest.skip(f"Kafka's Java tools need Java and Maven: {missing}")
    return make_broker(**{"group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "4"})


def test_console_consumer_group_then_consumer_groups_describe_and_list(java_broker: Broker) -> None:
    bootstrap = ["--bootstrap-server", java_broker.bootstrap]
    java_broker.manager.create_topic("jg", 2)
    for partition in (0, 1):
        java_broker.manager.append(TopicPartition("jg", partition),
                                   build_batch([(None, b"p%d-%d" % (partition, i)) for i in range(3)]))
    out = _run("org.apache.kafka.tools.consumer.ConsoleConsumer", *bootstrap, "--topic", "jg", "--group", "jgroup",
               "--from-beginning", "--max-messages", "6")
    assert sorted(out.split()) == sorted(f"p{p}-{i}" for p in (0, 1) for i in range(3))

    assert "jgroup" in _run("org.apache.kafka.tools.consumer.group.ConsumerGroupCommand", *bootstrap, "--list").split()
    described = _run("org.apache.kafka.tools.consumer.group.ConsumerGroupCommand", *bootstrap, "--describe",
                     "--group", "jgroup")
    rows = [line.split() for line in described.splitlines() if line.startswith("jgroup ")]
    # GROUP TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG CONSUMER-ID HOST CLIENT-ID
    assert sorted((r[1], r[2], r[3], r[4], r[5]) for r in rows) == [("jg", "0", "3", "3", "0"), ("jg", "1", "3", "3", "0")]
    assert {r[6] for r in rows} == {"-"}  # no consumer id: the console consumer left the group

    deleted = _run("org.apache.kafka.tools.consumer.group.ConsumerGroupCommand", *bootstrap, "--delete",
                   "--group", "jgroup")
    assert "Deletion of requested consumer groups ('jgroup') was successful." in deleted

    partition = offsets_partition_for("jgroup", 4)
    segment = next((java_broker.manager.log(TopicPartition(OFFSETS_TOPIC, partition)).dir).glob("*.log"))
    dump = _run("org.apache.kafka.tools.DumpLogSegments", "--offsets-decoder", "--files", str(segment))
    decoded = [(json.loads(m.group(1)), m.group(2)) for m in re.finditer(r"key: (\{.*?\}\}) payload: (.*)$", dump, re.M)]
    keys = [k for k, _ in decoded]
    assert {"type": "1", "data": {"group": "jgroup", "topic": "jg", "partition": 0}} in keys
    assert {"type": "2", "data": {"group": "jgroup"}} in keys
    commits = [json.loads(p)["data"]["offset"] for k, p in decoded if k["type"] == "1" and p != "<DELETE>"]
    assert commits and set(commits) == {3}
    groups = [json.loads(p) for k, p in decoded if k["type"] == "2" and p != "<DELETE>"]
    assert groups[0]["version"] == "3" and groups[0]["data"]["protocolType"] == "consumer"
    assert groups[0]["data"]["members"][0]["assignment"]["assignedPartitions"] == [{"topic": "jg", "partitions": [0, 1]}]
    assert [p for _, p in decoded][-3:] == ["<DELETE>"] * 3  # two offsets and the group, tombstoned
