"""Kafka's own DumpLogSegments ``--transaction-log-decoder`` (4.3.1, from Maven Central) reads the
``__transaction_state`` segment the coordinator wrote for a kafka-python transaction: every state
of the id in order, with its producer id, epoch and partitions, as Kafka's records. Skipped, saying
why, where Java or Maven is missing."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable

import pytest
from kafka import KafkaProducer

from kafka_oracle import KAFKA_4, KafkaToolMissing
from server_helpers import TIMEOUT_S, Broker
from tidelog.manager.internal_topics import TRANSACTION_STATE
from tidelog.server.transactions.records import txn_partition_for
from tidelog.topic_partition import TopicPartition

FAST_START = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")


def test_dump_log_segments_decodes_the_transaction_state_tidelog_wrote(make_broker: Callable[..., Broker]) -> None:
    try:
        KAFKA_4.classpath()
    except KafkaToolMissing as missing:
        pytest.skip(f"Kafka's Java tools need Java and Maven: {missing}")
    broker = make_broker(**{"transaction.state.log.num.partitions": "3"})
    broker.manager.create_topic("dumped", 2)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id="dump-tx",
                             max_block_ms=int(TIMEOUT_S * 1000))
    producer.init_transactions()
    producer.begin_transaction()
    producer.send("dumped", b"x", partition=0)
    producer.send("dumped", b"y", partition=1)
    producer.commit_transaction()
    producer.close()
    pid = broker.server.transactions.describe("dump-tx").producer_id

    tp = TopicPartition(TRANSACTION_STATE, txn_partition_for("dump-tx", 3))
    segment = next(broker.manager.log(tp).dir.glob("*.log"))
    command = KAFKA_4.java_command("org.apache.kafka.tools.DumpLogSegments", "--transaction-log-decoder",
                                   "--files", str(segment), jvm_options=FAST_START)
    result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    decoded = [(json.loads(m.group(1)), json.loads(m.group(2)))
               for m in re.finditer(r"key: (\{.*?\}\}) payload: (\{.*\})\s*$", result.stdout, re.M)]
    assert decoded, result.stdout[-3000:]
    assert {k["data"]["transactionalId"] for k, _ in decoded} == {"dump-tx"}
    values = [p["data"] for _, p in decoded]
    statuses = [v["transactionStatus"] for v in values]
    # Empty, Ongoing (once per AddPartitionsToTxn the client sent), PrepareCommit, CompleteCommit
    assert [s for i, s in enumerate(statuses) if i == 0 or s != statuses[i - 1]] == [0, 1, 2, 4]
    values = [values[0], values[statuses.index(2) - 1], values[statuses.index(2)], values[-1]]
    assert {v["producerId"] for v in values} == {pid} and {v["producerEpoch"] for v in values} == {0}
    assert values[0]["transactionPartitions"] is None
    assert values[2]["transactionPartitions"] == [{"topic": "dumped", "partitionIds": [0, 1]}]
    assert values[3]["transactionPartitions"] == []
    assert values[1]["transactionStartTimestampMs"] == values[2]["transactionStartTimestampMs"] > 0
    assert {p["version"] for _, p in decoded} == {"1"}
