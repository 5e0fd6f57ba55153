"""TxnOffsetCommit through a running broker: kafka-python's transactional producer and a
confluent-kafka (librdkafka) consume-transform-produce loop with ``send_offsets_to_transaction``
(group offsets visible only after the commit, unchanged after an abort), and raw requests for
what clients never send on purpose: a group another member generation owns, a group partition
not added to the transaction, OffsetFetch ``require_stable`` while offsets are pending, a broker
restart (and a SIGKILL of ``tidelog serve``) between the TxnOffsetCommit and the EndTxn; and
Kafka's DumpLogSegments reading the transactional commits and markers tidelog wrote (skipped,
saying why, where Java or Maven is missing)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaAdminClient, KafkaProducer
from kafka.admin import NewTopic
from kafka.protocol.consumer import (
    JoinGroupRequest,
    JoinGroupResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from kafka.protocol.metadata import FindCoordinatorRequest, FindCoordinatorResponse
from kafka.protocol.producer import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    EndTxnRequest,
    EndTxnResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
)
from kafka.structs import OffsetAndMetadata
from kafka.structs import TopicPartition as KafkaTopicPartition
from server_helpers import Broker, RawClient, Served, serve, start_broker, wait_until

from kafka_oracle import KAFKA_4, KafkaToolMissing
from tidelog.manager import LogManager
from tidelog.records.builder import build_batch
from tidelog.server import ServerThread
from tidelog.server.errors import ErrorCode as E
from tidelog.server.groups.records import OFFSETS_TOPIC, offsets_partition_for
from tidelog.topic_partition import TopicPartition

FAST = {"group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "3",
        "transaction.state.log.num.partitions": "3"}


@pytest.fixture
def txn_broker(make_broker: Callable[..., Broker]) -> Broker:
    return make_broker(**FAST)


# --- raw requests --------------------------------------------------------------------------------

class RawTxn:
    """One transactional id driven request by request (transaction protocol V1 versions)."""

    def __init__(self, client: RawClient, transactional_id: str, timeout_ms: int = 60000) -> None:
        self.client, self.id = client, transactional_id
        self.timeout_ms = timeout_ms
        found = client.call(FindCoordinatorRequest(key=transactional_id, key_type=1), FindCoordinatorResponse, 1)
        assert found.error_code == E.NONE, found
        self.init()

    def init(self) -> None:
        """InitProducerId (again: the epoch is bumped; an open transaction is aborted first, the
        coordinator answering CONCURRENT_TRANSACTIONS meanwhile, as clients do it is asked again)."""
        request = InitProducerIdRequest(transactional_id=self.id, transaction_timeout_ms=self.timeout_ms)
        answers: list[Any] = []

        def initialized() -> bool:
            answers.append(self.client.call(request, InitProducerIdResponse, 1))
            return answers[-1].error_code != E.CONCURRENT_TRANSACTIONS

        wait_until(initialized)
        assert answers[-1].error_code == E.NONE, answers[-1]
        self.pid, self.epoch = answers[-1].producer_id, answers[-1].producer_epoch

    def add_offsets(self, group: str) -> int:
        found = self.client.call(FindCoordinatorRequest(key=group, key_type=0), FindCoordinatorResponse, 1)
        assert found.error_code == E.NONE
        return int(self.client.call(AddOffsetsToTxnRequest(transactional_id=self.id, producer_id=self.pid,
                                                           producer_epoch=self.epoch, group_id=group),
                                    AddOffsetsToTxnResponse, 1).error_code)

    def commit_offsets(self, group: str, offsets: dict[tuple[str, int], int], version: int = 3, generation: int = -1,
                       member: str = "") -> dict[tuple[str, int], int]:
        T = TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic
        by_topic: dict[str, list[Any]] = {}
        for (topic, partition), offset in offsets.items():
            by_topic.setdefault(topic, []).append(T.TxnOffsetCommitRequestPartition(
                partition_index=partition, committed_offset=offset, committed_leader_epoch=-1, committed_metadata="m"))
        request = TxnOffsetCommitRequest(transactional_id=self.id, group_id=group, producer_id=self.pid,
                                         producer_epoch=self.epoch, generation_id=generation, member_id=member,
                                         group_instance_id=None,
                                         topics=[T(name=t, partitions=p) for t, p in by_topic.items()])
        response = self.client.call(request, TxnOffsetCommitResponse, version)
        return {(t.name, p.partition_index): p.error_code for t in response.topics for p in t.partitions}

    def end(self, commit: bool) -> int:
        return int(self.client.call(EndTxnRequest(transactional_id=self.id, producer_id=self.pid,
                                                  producer_epoch=self.epoch, committed=commit),
                                    EndTxnResponse, 1).error_code)


def committed(client: RawClient, group: str, partitions: list[tuple[str, int]], require_stable: bool = False,
              version: int = 7) -> dict[tuple[str, int], tuple[int, int]]:
    """OffsetFetch: (offset, error code) per partition."""
    T = OffsetFetchRequest.OffsetFetchRequestTopic
    by_topic: dict[str, list[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)
    response = client.call(OffsetFetchRequest(group_id=group, require_stable=require_stable, topics=[
        T(name=t, partition_indexes=p) for t, p in by_topic.items()]), OffsetFetchResponse, version)
    return {(t.name, p.partition_index): (p.committed_offset, p.error_code) for t in response.topics for p in t.partitions}


def offsets_log_end(broker: Broker, group: str) -> int:
    tp = TopicPartition(OFFSETS_TOPIC, offsets_partition_for(group, 3))
    return broker.manager.offsets(tp).log_end_offset


def join_and_sync(client: RawClient, group: str) -> tuple[str, int]:
    """One member through JoinGroup v5 (MEMBER_ID_REQUIRED first) and SyncGroup: (member id, generation)."""
    def join(member_id: str) -> Any:
        P = JoinGroupRequest.JoinGroupRequestProtocol
        return client.call(JoinGroupRequest(group_id=group, session_timeout_ms=30000, rebalance_timeout_ms=30000,
                                            member_id=member_id, group_instance_id=None, protocol_type="consumer",
                                            protocols=[P(name="range", metadata=b"")]), JoinGroupResponse, 5)
    first = join("")
    assert first.error_code == E.MEMBER_ID_REQUIRED
    joined = join(first.member_id)
    assert joined.error_code == E.NONE, joined
    A = SyncGroupRequest.SyncGroupRequestAssignment
    synced = client.call(SyncGroupRequest(group_id=group, generation_id=joined.generation_id, member_id=first.member_id,
                                          group_instance_id=None, assignments=[
                                              A(member_id=first.member_id, assignment=b"")]), SyncGroupResponse, 3)
    assert synced.error_code == E.NONE
    return first.member_id, joined.generation_id


# --- raw ----------------------------------------------------------------------------------------

def test_offsets_of_a_committed_transaction_show_an_aborted_ones_do_not(txn_broker: Broker) -> None:
    txn_broker.manager.create_topic("in", 2)
    client = txn_broker.connect()
    txn = RawTxn(client, "tx-raw")
    assert txn.add_offsets("grp") == E.NONE
    assert txn.commit_offsets("grp", {("in", 0): 5, ("in", 1): 7}) == {("in", 0): E.NONE, ("in", 1): E.NONE}
    assert committed(client, "grp", [("in", 0), ("in", 1)]) == {("in", 0): (-1, 0), ("in", 1): (-1, 0)}
    assert committed(client, "grp", [("in", 0)], require_stable=True) == {("in", 0): (-1, E.UNSTABLE_OFFSET_COMMIT)}
    assert txn.end(commit=True) == E.NONE
    assert committed(client, "grp", [("in", 0), ("in", 1)], require_stable=True) == {("in", 0): (5, 0), ("in", 1): (7, 0)}

    assert txn.add_offsets("grp") == E.NONE
    assert txn.commit_offsets("grp", {("in", 0): 50}) == {("in", 0): E.NONE}
    assert txn.end(commit=False) == E.NONE
    assert committed(client, "grp", [("in", 0), ("in", 1)], require_stable=True) == {("in", 0): (5, 0), ("in", 1): (7, 0)}


def test_a_group_partition_not_added_to_the_transaction_is_refused_and_nothing_is_written(txn_broker: Broker) -> None:
    txn_broker.manager.create_topic("in", 1)
    client = txn_broker.connect()
    txn = RawTxn(client, "tx-noadd")
    client.call(FindCoordinatorRequest(key="grp", key_type=0), FindCoordinatorResponse, 1)
    before = offsets_log_end(txn_broker, "grp")
    assert txn.commit_offsets("grp", {("in", 0): 5}, version=3) == {("in", 0): E.INVALID_TXN_STATE}
    assert txn.commit_offsets("grp", {("in", 0): 5}, version=4) == {("in", 0): E.TRANSACTION_ABORTABLE}
    assert txn.commit_offsets("grp", {("nope", 0): 5, ("in", 9): 1}) == {
        ("nope", 0): E.UNKNOWN_TOPIC_OR_PARTITION, ("in", 9): E.UNKNOWN_TOPIC_OR_PARTITION}
    assert offsets_log_end(txn_broker, "grp") == before
    assert committed(client, "grp", [("in", 0)], require_stable=True) == {("in", 0): (-1, 0)}


def test_a_fenced_producer_epoch_is_refused_and_nothing_is_written(txn_broker: Broker) -> None:
    txn_broker.manager.create_topic("in", 1)
    client = txn_broker.connect()
    txn = RawTxn(client, "tx-fenced")
    assert txn.add_offsets("grp") == E.NONE
    old_epoch = txn.epoch
    txn.init()  # a new producer with the same id: the open transaction is aborted, the epoch bumped
    assert txn.epoch > old_epoch
    before = offsets_log_end(txn_broker, "grp")
    txn.epoch = old_epoch
    assert txn.commit_offsets("grp", {("in", 0): 5}) == {("in", 0): E.INVALID_PRODUCER_EPOCH}
    assert offsets_log_end(txn_broker, "grp") == before
    assert committed(client, "grp", [("in", 0)], require_stable=True) == {("in", 0): (-1, 0)}


def test_a_group_another_member_generation_owns_gets_kafkas_error_and_nothing_changes(txn_broker: Broker) -> None:
    txn_broker.manager.create_topic("in", 1)
    client = txn_broker.connect()
    member, generation = join_and_sync(client, "owned")
    txn = RawTxn(client, "tx-owned")
    assert txn.add_offsets("owned") == E.NONE
    before = offsets_log_end(txn_broker, "owned")
    assert txn.commit_offsets("owned", {("in", 0): 3}, generation=generation + 1, member=member) == {
        ("in", 0): E.ILLEGAL_GENERATION}
    assert txn.commit_offsets("owned", {("in", 0): 3}, generation=generation, member="someone-else") == {
        ("in", 0): E.UNKNOWN_MEMBER_ID}
    assert offsets_log_end(txn_broker, "owned") == before
    assert txn.commit_offsets("owned", {("in", 0): 3}, generation=generation, member=member) == {("in", 0): E.NONE}
    assert txn.end(commit=True) == E.NONE
    assert committed(client, "owned", [("in", 0)]) == {("in", 0): (3, 0)}


def test_pending_offsets_survive_a_broker_restart_and_the_commit_after_it_shows_them(
        tmp_path: Path, restartable: list[tuple[LogManager, ServerThread]]) -> None:
    data = tmp_path / "data"
    manager, thread = start_broker(data, **FAST)
    restartable.append((manager, thread))
    manager.create_topic("in", 1)
    client = Broker(manager, thread.server, thread.server.bound[0].port).connect()
    txn = RawTxn(client, "tx-restart")
    assert txn.add_offsets("grp") == E.NONE
    assert txn.commit_offsets("grp", {("in", 0): 11}) == {("in", 0): E.NONE}
    client.close()
    thread.stop()
    manager.shutdown()
    restartable.clear()

    manager, thread = start_broker(data, **FAST)
    restartable.append((manager, thread))
    client = Broker(manager, thread.server, thread.server.bound[0].port).connect()
    assert committed(client, "grp", [("in", 0)], require_stable=True) == {("in", 0): (-1, E.UNSTABLE_OFFSET_COMMIT)}
    txn.client = client
    assert txn.end(commit=True) == E.NONE
    assert committed(client, "grp", [("in", 0)], require_stable=True) == {("in", 0): (11, 0)}


def test_pending_offsets_survive_a_sigkill_of_tidelog_serve(tmp_path: Path) -> None:
    data = tmp_path / "data"
    overrides = [f"{key}={value}" for key, value in FAST.items()]
    args = [sys.executable, "-m", "tidelog.cli.main", "--data-dir", str(data)]
    for override in ("listeners=PLAINTEXT://127.0.0.1:0", *overrides):
        args += ["--override", override]
    first = Served(subprocess.Popen([*args, "serve"], stderr=subprocess.PIPE, text=True))
    try:
        admin = KafkaAdminClient(bootstrap_servers=first.bootstrap, request_timeout_ms=10000)
        admin.create_topics([NewTopic("in", 1, 1)])
        admin.close()
        txn = RawTxn(first.connect(), "tx-kill")
        assert txn.add_offsets("grp") == E.NONE
        assert txn.commit_offsets("grp", {("in", 0): 11}) == {("in", 0): E.NONE}
    finally:
        first.process.kill()
        first.process.wait()
    with serve(*overrides, data=data) as second:
        client = second.connect()
        assert committed(client, "grp", [("in", 0)], require_stable=True) == {
            ("in", 0): (-1, E.UNSTABLE_OFFSET_COMMIT)}
        txn.client = client
        assert txn.end(commit=True) == E.NONE
        assert committed(client, "grp", [("in", 0)], require_stable=True) == {("in", 0): (11, 0)}


def test_kafkas_dump_log_segments_decodes_the_transactional_commits_and_their_markers(txn_broker: Broker) -> None:
    """Kafka's DumpLogSegments ``--offsets-decoder`` reads the ``__consumer_offsets`` segment: the
    offsets as transactional batches of the producer, followed by its COMMIT and ABORT markers."""
    try:
        KAFKA_4.classpath()
    except KafkaToolMissing as missing:
        pytest.skip(f"Kafka's Java tools need Java and Maven: {missing}")
    txn_broker.manager.create_topic("in", 1)
    client = txn_broker.connect()
    txn = RawTxn(client, "tx-dump")
    for offset, commit in ((5, True), (6, False)):
        assert txn.add_offsets("grp") == E.NONE
        assert txn.commit_offsets("grp", {("in", 0): offset}) == {("in", 0): E.NONE}
        assert txn.end(commit=commit) == E.NONE
    tp = TopicPartition(OFFSETS_TOPIC, offsets_partition_for("grp", 3))
    segment = next(txn_broker.manager.log(tp).dir.glob("*.log"))
    command = KAFKA_4.java_command("org.apache.kafka.tools.DumpLogSegments", "--offsets-decoder", "--files",
                                   str(segment), jvm_options=("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC"))
    result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    batches = [line for line in result.stdout.splitlines() if line.startswith("baseOffset:")]
    assert [("isTransactional: true" in b, "isControl: true" in b, f"producerId: {txn.pid}" in b) for b in batches] == [
        (True, False, True), (True, True, True), (True, False, True), (True, True, True)]
    markers = re.findall(r"endTxnMarker: (\w+)", result.stdout)
    offsets = [json.loads(m)["data"]["offset"] for m in re.findall(r"payload: (\{.*\})$", result.stdout, re.M)]
    assert (markers, offsets) == (["COMMIT", "ABORT"], [5, 6])


# --- clients ------------------------------------------------------------------------------------

def _group_offsets(bootstrap: str, group: str) -> dict[tuple[str, int], int]:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10000)
    try:
        return {(tp.topic, tp.partition): o.offset for tp, o in admin.list_group_offsets(group)[group].items()}
    finally:
        admin.close()


def test_kafka_python_send_offsets_to_transaction(txn_broker: Broker) -> None:
    txn_broker.manager.create_topic("in", 1)
    txn_broker.manager.create_topic("out", 1)
    producer = KafkaProducer(bootstrap_servers=txn_broker.bootstrap, transactional_id="kp-tx", request_timeout_ms=10000)
    try:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send("out", b"first")
        producer.send_offsets_to_transaction({KafkaTopicPartition("in", 0): OffsetAndMetadata(4, "", -1)}, "kp-group")
        assert _group_offsets(txn_broker.bootstrap, "kp-group") == {}
        producer.commit_transaction()
        assert _group_offsets(txn_broker.bootstrap, "kp-group") == {("in", 0): 4}

        producer.begin_transaction()
        producer.send("out", b"second")
        producer.send_offsets_to_transaction({KafkaTopicPartition("in", 0): OffsetAndMetadata(9, "", -1)}, "kp-group")
        producer.abort_transaction()
        assert _group_offsets(txn_broker.bootstrap, "kp-group") == {("in", 0): 4}
    finally:
        producer.close()


def test_confluent_consume_transform_produce_commits_offsets_with_the_output(txn_broker: Broker) -> None:
    confluent_kafka = pytest.importorskip("confluent_kafka")
    txn_broker.manager.create_topic("src", 1)
    txn_broker.manager.create_topic("dst", 1)
    txn_broker.manager.append(TopicPartition("src", 0), build_batch([(None, b"v%d" % i) for i in range(10)]))
    common = {"bootstrap.servers": txn_broker.bootstrap, "broker.address.family": "v4"}
    consumer = confluent_kafka.Consumer({**common, "group.id": "ctp", "enable.auto.commit": False,
                                         "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
    producer = confluent_kafka.Producer({**common, "transactional.id": "ctp-tx"})
    try:
        producer.init_transactions(10)
        consumer.subscribe(["src"])
        taken: list[bytes] = []
        aborted_once = False
        while len(taken) < 10:
            messages = consumer.consume(num_messages=2, timeout=10)  # 10 records: every call fills
            assert messages, "nothing consumed"
            producer.begin_transaction()
            for message in messages:
                producer.produce("dst", message.value().upper())
            producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                                 consumer.consumer_group_metadata(), 10)
            if not aborted_once:  # the first batch is aborted: its offsets must not show, then it is redone
                aborted_once = True
                producer.abort_transaction(10)
                assert [tp.offset for tp in consumer.committed([confluent_kafka.TopicPartition("src", 0)], 10)] == [
                    confluent_kafka.OFFSET_INVALID]
                consumer.seek(confluent_kafka.TopicPartition("src", 0, messages[0].offset()))
                continue
            producer.commit_transaction(10)
            taken += [m.value() for m in messages]
        assert [tp.offset for tp in consumer.committed([confluent_kafka.TopicPartition("src", 0)], 10)] == [10]
    finally:
        consumer.close()
        producer.flush(10)
    reader = confluent_kafka.Consumer({**common, "group.id": "reader", "auto.offset.reset": "earliest",
                                       "isolation.level": "read_committed", "enable.auto.commit": False})
    try:
        reader.assign([confluent_kafka.TopicPartition("dst", 0, 0)])
        seen: list[bytes] = []
        while len(seen) < 10:
            messages = reader.consume(num_messages=10, timeout=10)
            assert messages, f"read_committed reader stuck after {seen}"
            seen += [m.value() for m in messages if m.error() is None]
    finally:
        reader.close()
    assert seen == [b"V%d" % i for i in range(10)]
