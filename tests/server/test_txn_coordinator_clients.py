"""Transactions through ``tidelog serve``'s coordinator with clients nobody here wrote:
kafka-python's and librdkafka's transactional producers commit and abort, and a read_committed
consumer sees exactly the committed records; fencing (a second producer with the same id: the old
one is fenced and nothing it writes after is visible); the timeout abort; a transaction across a
broker restart; and the wire answers of the "Bad input" list at each request version (PRODUCER_FENCED
as INVALID_PRODUCER_EPOCH to old versions, Kafka's mapping of verification errors on Produce)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import KafkaException, Producer
from kafka import KafkaConsumer, KafkaProducer
from kafka.protocol.producer import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    EndTxnRequest,
    EndTxnResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    ProduceRequest,
    ProduceResponse,
)

from server_helpers import TIMEOUT_S, Broker, RawClient, start_broker
from tidelog.manager import LogManager
from tidelog.records.builder import BatchBuilder
from tidelog.server import ServerThread
from tidelog.topic_partition import TopicPartition

TXN_CONFIG = {"transaction.state.log.num.partitions": "3", "offsets.topic.num.partitions": "2"}


def _read(broker: Broker, topic: str, isolation: str, expected: int) -> list[bytes]:
    consumer = KafkaConsumer(topic, bootstrap_servers=broker.bootstrap, isolation_level=isolation,
                             auto_offset_reset="earliest", enable_auto_commit=False, group_id=None,
                             consumer_timeout_ms=int(TIMEOUT_S * 1000) if expected else 1500)
    got: list[bytes] = []
    try:
        for message in consumer:
            got.append(message.value)
            if expected and len(got) >= expected:
                break
    finally:
        consumer.close()
    return got


def _kafka_python(broker: Broker, transactional_id: str, **config: object) -> KafkaProducer:
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id=transactional_id,
                             max_block_ms=int(TIMEOUT_S * 1000), **config)
    producer.init_transactions()
    return producer


def test_kafka_python_commits_and_aborts_and_read_committed_sees_the_commits(make_broker: Callable[..., Broker]) -> None:
    broker: Broker = make_broker(**TXN_CONFIG)
    broker.manager.create_topic("kp", 1)
    producer = _kafka_python(broker, "kp-tx")
    for values, commit in (([b"a", b"b"], True), ([b"c"], False), ([b"d"], True)):
        producer.begin_transaction()
        for v in values:
            producer.send("kp", v)
        if commit:
            producer.commit_transaction()
        else:
            producer.flush()
            producer.abort_transaction()
    producer.close()
    assert _read(broker, "kp", "read_committed", 3) == [b"a", b"b", b"d"]
    assert _read(broker, "kp", "read_uncommitted", 4) == [b"a", b"b", b"c", b"d"]
    described = broker.server.transactions.describe("kp-tx")
    assert described is not None and described.state == "CompleteCommit"


def test_librdkafka_fencing_leaves_the_old_producers_writes_invisible(make_broker: Callable[..., Broker]) -> None:
    broker: Broker = make_broker(**TXN_CONFIG)
    broker.manager.create_topic("lf", 1)
    config = {"bootstrap.servers": broker.bootstrap, "transactional.id": "lf-tx"}
    old = Producer(config)
    old.init_transactions(TIMEOUT_S)
    old.begin_transaction()
    old.produce("lf", b"old-1")
    assert old.flush(TIMEOUT_S) == 0
    new = Producer(config)
    new.init_transactions(TIMEOUT_S)  # fences "old": its open transaction is aborted
    old.produce("lf", b"old-2")
    with pytest.raises(KafkaException) as fenced:  # its Produce: INVALID_PRODUCER_EPOCH, fatal (_FENCED)
        old.flush(TIMEOUT_S)
        old.commit_transaction(TIMEOUT_S)
    assert fenced.value.args[0].fatal() and "fenced" in fenced.value.args[0].str(), fenced.value.args[0].str()
    new.begin_transaction()
    new.produce("lf", b"new-1")
    new.commit_transaction(TIMEOUT_S)
    assert _read(broker, "lf", "read_committed", 1) == [b"new-1"]
    assert b"old-2" not in _read(broker, "lf", "read_uncommitted", 0)  # refused, never appended


def test_a_transaction_past_its_timeout_is_aborted_by_the_broker(make_broker: Callable[..., Broker]) -> None:
    broker: Broker = make_broker(**TXN_CONFIG, **{
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": "100"})
    broker.manager.create_topic("to", 1)
    producer = _kafka_python(broker, "to-tx", transaction_timeout_ms=1000)
    producer.begin_transaction()
    producer.send("to", b"never")
    producer.flush()
    coordinator = broker.server.transactions
    deadline = time.monotonic() + TIMEOUT_S
    while coordinator.describe("to-tx").state != "CompleteAbort" and time.monotonic() < deadline:
        time.sleep(0.05)
    assert coordinator.describe("to-tx").state == "CompleteAbort"
    producer.close(0)
    offsets = broker.manager.offsets(TopicPartition("to", 0))
    assert offsets.last_stable_offset == offsets.high_watermark == 2  # the record and its ABORT marker
    assert _read(broker, "to", "read_committed", 0) == []


def test_transactions_go_on_after_a_restart(tmp_path: Path, restartable: list[tuple[LogManager, ServerThread]]) -> None:
    manager, thread = start_broker(tmp_path / "data", **TXN_CONFIG)
    restartable.append((manager, thread))
    manager.create_topic("rs", 1)
    broker = Broker(manager, thread.server, thread.server.bound[0].port)
    producer = _kafka_python(broker, "rs-tx")
    producer.begin_transaction()
    producer.send("rs", b"before")
    producer.commit_transaction()
    producer.close()
    epoch = thread.server.transactions.describe("rs-tx").producer_epoch
    restartable.pop()
    thread.stop()
    manager.shutdown()
    manager, thread = start_broker(tmp_path / "data", **TXN_CONFIG)
    restartable.append((manager, thread))
    broker = Broker(manager, thread.server, thread.server.bound[0].port)
    described = thread.server.transactions.describe("rs-tx")
    assert (described.state, described.producer_epoch) == ("CompleteCommit", epoch)
    producer = _kafka_python(broker, "rs-tx")
    producer.begin_transaction()
    producer.send("rs", b"after")
    producer.commit_transaction()
    producer.close()
    assert thread.server.transactions.describe("rs-tx").producer_epoch == epoch + 1
    assert _read(broker, "rs", "read_committed", 2) == [b"before", b"after"]


# --- the wire answers ------------------------------------------------------------------------------

def _init(client: RawClient, tid: str, version: int = 4, pid: int = -1, epoch: int = -1) -> tuple[int, int, int]:
    r = client.call(InitProducerIdRequest(transactional_id=tid, transaction_timeout_ms=60000, producer_id=pid,
                                          producer_epoch=epoch), InitProducerIdResponse, version)
    return r.error_code, r.producer_id, r.producer_epoch


def _add(client: RawClient, tid: str, pid: int, epoch: int, topic: str, partitions: list[int], version: int = 3) -> list[int]:
    A = AddPartitionsToTxnRequest
    r = client.call(A(v3_and_below_transactional_id=tid, v3_and_below_producer_id=pid,
                      v3_and_below_producer_epoch=epoch,
                      v3_and_below_topics=[A.AddPartitionsToTxnTopic(name=topic, partitions=partitions)]),
                    AddPartitionsToTxnResponse, version)
    return [p.partition_error_code for t in r.results_by_topic_v3_and_below for p in t.results_by_partition]


def _end(client: RawClient, tid: str, pid: int, epoch: int, commit: bool, version: int) -> int:
    return int(client.call(EndTxnRequest(transactional_id=tid, producer_id=pid, producer_epoch=epoch, committed=commit),
                           EndTxnResponse, version).error_code)


def _produce(client: RawClient, tid: str | None, topic: str, partition: int, pid: int, epoch: int, version: int) -> int:
    b = BatchBuilder(producer_id=pid, producer_epoch=epoch, base_sequence=0, is_transactional=True)
    b.append(0, int(time.time() * 1000), None, b"v")
    P = ProduceRequest
    request = P(transactional_id=tid, acks=-1, timeout_ms=5000, topic_data=[P.TopicProduceData(
        name=topic, partition_data=[P.TopicProduceData.PartitionProduceData(index=partition, records=b.build())])])
    return int(client.call(request, ProduceResponse, version).responses[0].partition_responses[0].error_code)


def test_bad_input_on_the_wire_gets_kafkas_codes_by_version(make_broker: Callable[..., Broker]) -> None:
    broker: Broker = make_broker(**TXN_CONFIG)
    broker.manager.create_topic("w", 2)
    client = broker.connect()
    tid = f"w-{uuid.uuid4()}"
    try:
        error, pid, epoch = _init(client, tid)
        assert (error, epoch) == (0, 0)
        assert _init(client, tid, 4)[0::2] == (0, 1)
        assert _init(client, tid, 3, pid, 0)[0] == 47  # a stale expected epoch, v3: INVALID_PRODUCER_EPOCH
        assert _init(client, tid, 4, pid, 0)[0] == 90  # v4: PRODUCER_FENCED
        assert client.call(InitProducerIdRequest(transactional_id=tid, transaction_timeout_ms=900001),
                           InitProducerIdResponse, 4).error_code == 50  # INVALID_TRANSACTION_TIMEOUT
        assert _end(client, tid, pid, 1, True, 3) == 48  # EndTxn without AddPartitions: INVALID_TXN_STATE
        assert _end(client, tid, pid, 0, True, 1) == 47  # a stale epoch, v1: INVALID_PRODUCER_EPOCH
        assert _end(client, tid, pid, 0, True, 3) == 90  # v3: PRODUCER_FENCED
        assert _add(client, tid, pid, 1, "nope", [0]) == [3]  # UNKNOWN_TOPIC_OR_PARTITION
        assert _add(client, tid, pid, 0, "w", [0], version=1) == [47]
        assert _add(client, tid, pid, 1, "w", [0]) == [0]
        # a transactional batch: for a partition not in the transaction, a stale epoch, no transactional id
        assert _produce(client, tid, "w", 1, pid, 1, 9) == 48  # INVALID_TXN_STATE
        assert _produce(client, tid, "w", 1, pid, 1, 11) == 120  # TRANSACTION_ABORTABLE
        assert _produce(client, tid, "w", 0, pid, 0, 9) == 47  # INVALID_PRODUCER_EPOCH
        assert _produce(client, None, "w", 0, pid, 1, 9) == 53  # TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        assert broker.manager.offsets(TopicPartition("w", 1)).log_end_offset == 0 and broker.manager.offsets(TopicPartition("w", 0)).log_end_offset == 0
        assert _produce(client, tid, "w", 0, pid, 1, 9) == 0
        assert _end(client, tid, pid, 1, True, 3) == 0
        assert _add(client, tid, pid, 1, "w", [1]) == [0]  # the next transaction
        assert _end(client, tid, pid, 1, False, 3) == 0
        assert _end(client, tid, pid, 1, True, 3) == 48  # COMMIT after CompleteAbort: INVALID_TXN_STATE
        assert _end(client, tid, pid, 1, False, 3) == 0  # a retried ABORT: NONE
    finally:
        client.close()


def test_without_verification_a_partition_outside_the_transaction_is_appended(make_broker: Callable[..., Broker]) -> None:
    broker = make_broker(**TXN_CONFIG, **{"transaction.partition.verification.enable": "false"})
    broker.manager.create_topic("nv", 2)
    client = broker.connect()
    try:
        error, pid, epoch = _init(client, "nv-tx")
        assert error == 0 and _add(client, "nv-tx", pid, epoch, "nv", [0]) == [0]
        assert _produce(client, "nv-tx", "nv", 1, pid, epoch, 9) == 0  # Kafka's answer with verification off
        assert broker.manager.offsets(TopicPartition("nv", 1)).log_end_offset == 1
    finally:
        client.close()
