"""The transaction admin APIs through a running broker: ListTransactions (state, producer id,
duration and pattern filters), DescribeTransactions, DescribeProducers, and WriteTxnMarkers as
``kafka-transactions.sh abort`` sends it to end a hanging transaction (on a data partition: the
last stable offset moves; on ``__consumer_offsets``: the pending offsets are dropped or shown);
then Kafka's own TransactionsCommand (4.3.1, from Maven Central) lists, describes, finds hanging,
describes producers and aborts a hanging transaction. Java tests are skipped, saying why, where
Java or Maven is missing."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest
from kafka.protocol.admin import (
    DescribeProducersRequest,
    DescribeProducersResponse,
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    ListTransactionsRequest,
    ListTransactionsResponse,
)
from kafka.protocol.producer import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    ProduceRequest,
    ProduceResponse,
    WriteTxnMarkersRequest,
    WriteTxnMarkersResponse,
)
from server_helpers import Broker, RawClient, api_versions
from test_txn_offsets_serve import FAST, RawTxn, committed

from kafka_oracle import KAFKA_4, KafkaToolMissing
from tidelog.records.builder import BatchBuilder
from tidelog.server.errors import ErrorCode as E
from tidelog.server.groups.records import OFFSETS_TOPIC, offsets_partition_for
from tidelog.topic_partition import TopicPartition

FAST_START = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")


@pytest.fixture
def txn_broker(make_broker: Callable[..., Broker]) -> Broker:
    return make_broker(**FAST)


def hanging(client: RawClient, transactional_id: str, topic: str, values: int = 3) -> RawTxn:
    """A transaction that added ``topic``-0, wrote ``values`` records there and never ends (its
    producer at epoch 1: initialized twice)."""
    txn = RawTxn(client, transactional_id)
    txn.init()
    assert txn.epoch == 1
    T = AddPartitionsToTxnRequest.AddPartitionsToTxnTopic
    added = client.call(AddPartitionsToTxnRequest(
        v3_and_below_transactional_id=txn.id, v3_and_below_producer_id=txn.pid,
        v3_and_below_producer_epoch=txn.epoch, v3_and_below_topics=[T(name=topic, partitions=[0])]),
        AddPartitionsToTxnResponse, 3)
    assert [p.partition_error_code for t in added.results_by_topic_v3_and_below for p in t.results_by_partition] == [0]
    builder = BatchBuilder(producer_id=txn.pid, producer_epoch=txn.epoch, base_sequence=0, is_transactional=True)
    for i in range(values):
        builder.append(i, 0, None, b"txn-%d" % i)
    P = ProduceRequest.TopicProduceData
    produced = client.call(ProduceRequest(transactional_id=txn.id, acks=-1, timeout_ms=5000, topic_data=[
        P(name=topic, partition_data=[P.PartitionProduceData(index=0, records=builder.build())])]), ProduceResponse, 8)
    assert produced.responses[0].partition_responses[0].error_code == E.NONE
    return txn


def list_transactions(client: RawClient, states: list[str] = (), pids: list[int] = (), duration: int = -1,  # type: ignore[assignment]
                      pattern: str | None = None, version: int = 2) -> Any:
    return client.call(ListTransactionsRequest(state_filters=list(states), producer_id_filters=list(pids),
                                               duration_filter=duration, transactional_id_pattern=pattern),
                       ListTransactionsResponse, version)


def write_marker(client: RawClient, pid: int, epoch: int, commit: bool, partitions: list[tuple[str, int]],
                 coordinator_epoch: int = 0) -> dict[tuple[str, int], int]:
    M = WriteTxnMarkersRequest.WritableTxnMarker
    by_topic: dict[str, list[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)
    response = client.call(WriteTxnMarkersRequest(markers=[M(
        producer_id=pid, producer_epoch=epoch, transaction_result=commit, coordinator_epoch=coordinator_epoch,
        topics=[M.WritableTxnMarkerTopic(name=t, partition_indexes=p) for t, p in by_topic.items()])]),
        WriteTxnMarkersResponse, 1)
    (marker,) = response.markers
    assert marker.producer_id == pid
    return {(t.name, p.partition_index): p.error_code for t in marker.topics for p in t.partitions}


# --- raw ----------------------------------------------------------------------------------------

def test_every_admin_api_is_advertised_at_the_versions_served(txn_broker: Broker) -> None:
    advertised = {k.api_key: (k.min_version, k.max_version) for k in api_versions(txn_broker.connect()).api_keys}
    assert {key: advertised.get(key) for key in (27, 28, 61, 65, 66)} == {
        27: (1, 1), 28: (0, 4), 61: (0, 0), 65: (0, 0), 66: (0, 2)}


def test_list_and_describe_transactions_with_kafkas_filters(txn_broker: Broker) -> None:
    txn_broker.manager.create_topic("t", 1)
    client = txn_broker.connect()
    open_txn = hanging(client, "app-open", "t")
    idle = RawTxn(client, "app-idle")
    RawTxn(client, "other-idle")

    def listed(**kwargs: Any) -> list[tuple[str, int, str]]:
        response = list_transactions(client, **kwargs)
        assert response.error_code == E.NONE
        return sorted((t.transactional_id, t.producer_id, t.transaction_state) for t in response.transaction_states)

    assert [t[0] for t in listed()] == ["app-idle", "app-open", "other-idle"]
    assert listed(states=["Ongoing"]) == [("app-open", open_txn.pid, "Ongoing")]
    assert listed(pids=[idle.pid]) == [("app-idle", idle.pid, "Empty")]
    assert [t[0] for t in listed(pattern="app-.*")] == ["app-idle", "app-open"]
    assert listed(pattern="app") == []  # the whole id must match
    assert listed(states=["Ongoing"], duration=3_600_000) == []  # not open for an hour
    unknown = list_transactions(client, states=["Bogus", "Empty"])
    assert list(unknown.unknown_state_filters) == ["Bogus"]
    assert {t.transactional_id for t in unknown.transaction_states} == {"app-idle", "other-idle"}
    assert list_transactions(client, states=["Bogus"]).transaction_states == []
    assert list_transactions(client, pattern="(unclosed").error_code == E.INVALID_REQUEST

    described = client.call(DescribeTransactionsRequest(transactional_ids=["app-open", "nobody", ""]),
                            DescribeTransactionsResponse, 0).transaction_states
    assert [(d.transactional_id, d.error_code) for d in described] == [
        ("app-open", E.NONE), ("nobody", E.TRANSACTIONAL_ID_NOT_FOUND), ("", E.INVALID_REQUEST)]
    d = described[0]
    assert (d.transaction_state, d.producer_id, d.producer_epoch, d.transaction_timeout_ms) == (
        "Ongoing", open_txn.pid, 1, 60000)
    assert d.transaction_start_time_ms > 0 and [(t.topic, list(t.partitions)) for t in d.topics] == [("t", [0])]


def test_describe_producers_shows_the_open_transaction_of_each_partition(txn_broker: Broker) -> None:
    txn_broker.manager.create_topic("t", 2)
    client = txn_broker.connect()
    txn = hanging(client, "dp", "t", values=4)
    T = DescribeProducersRequest.TopicRequest
    response = client.call(DescribeProducersRequest(topics=[T(name="t", partition_indexes=[0, 1]),
                                                            T(name="nope", partition_indexes=[0])]),
                           DescribeProducersResponse, 0)
    by_partition = {(t.name, p.partition_index): p for t in response.topics for p in t.partitions}
    (state,) = by_partition[("t", 0)].active_producers
    assert (state.producer_id, state.producer_epoch, state.last_sequence, state.coordinator_epoch,
            state.current_txn_start_offset) == (txn.pid, txn.epoch, 3, -1, 0)
    assert by_partition[("t", 1)].error_code == E.NONE and by_partition[("t", 1)].active_producers == []
    assert by_partition[("nope", 0)].error_code == E.UNKNOWN_TOPIC_OR_PARTITION


def test_write_txn_markers_ends_a_hanging_transaction_and_refuses_what_kafka_refuses(txn_broker: Broker) -> None:
    txn_broker.manager.create_topic("t", 1)
    client = txn_broker.connect()
    txn = hanging(client, "hang", "t")
    tp = TopicPartition("t", 0)
    assert txn_broker.manager.offsets(tp).last_stable_offset == 0
    assert write_marker(client, txn.pid, txn.epoch - 1, False, [("t", 0)]) == {("t", 0): E.INVALID_PRODUCER_EPOCH}
    assert txn_broker.manager.offsets(tp).last_stable_offset == 0
    assert write_marker(client, txn.pid, txn.epoch, False, [("t", 0), ("t", 5), ("nope", 0)]) == {
        ("t", 0): E.NONE, ("t", 5): E.UNKNOWN_TOPIC_OR_PARTITION, ("nope", 0): E.UNKNOWN_TOPIC_OR_PARTITION}
    offsets = txn_broker.manager.offsets(tp)
    assert offsets.last_stable_offset == offsets.high_watermark == 4  # three records and the ABORT marker
    assert write_marker(client, txn.pid, txn.epoch, False, [("t", 0)], coordinator_epoch=-1) == {
        ("t", 0): E.TRANSACTION_COORDINATOR_FENCED}  # the stored coordinator epoch is now 0


def test_a_marker_on_the_offsets_partition_shows_or_drops_the_pending_offsets(txn_broker: Broker) -> None:
    txn_broker.manager.create_topic("in", 1)
    client = txn_broker.connect()
    txn = RawTxn(client, "tx-marker")
    assert txn.add_offsets("grp") == E.NONE
    assert txn.commit_offsets("grp", {("in", 0): 8}) == {("in", 0): E.NONE}
    offsets_tp = (OFFSETS_TOPIC, offsets_partition_for("grp", 3))
    assert write_marker(client, txn.pid, txn.epoch, True, [offsets_tp]) == {offsets_tp: E.NONE}
    assert committed(client, "grp", [("in", 0)], require_stable=True) == {("in", 0): (8, 0)}


# --- Kafka's kafka-transactions.sh ------------------------------------------------------------------

def _transactions(broker: Broker, *args: str) -> str:
    command = KAFKA_4.java_command("org.apache.kafka.tools.TransactionsCommand", "--bootstrap-server", broker.bootstrap,
                                   *args, jvm_options=FAST_START)
    result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    return result.stdout


def _table(out: str) -> list[list[str]]:
    """Rows of a TransactionsCommand table, the header first (columns split on runs of spaces)."""
    return [re.split(r"\s{2,}|\t", line.strip()) for line in out.splitlines() if line.strip()]


# A confluent-kafka (librdkafka) transactional producer that begins a transaction, writes three
# records, says so, and waits to be killed: its transaction hangs.
_HANGING_PRODUCER = """
import sys, time
from confluent_kafka import Producer
producer = Producer({"bootstrap.servers": sys.argv[1], "transactional.id": "stuck", "broker.address.family": "v4"})
producer.init_transactions(10)
producer.begin_transaction()
for i in range(3):
    producer.produce("t", b"txn-%d" % i, partition=0)
assert producer.flush(10) == 0
print("sent", flush=True)
time.sleep(600)
"""


def test_kafka_transactions_lists_describes_and_aborts_a_hanging_transaction(txn_broker: Broker) -> None:
    pytest.importorskip("confluent_kafka")
    try:
        KAFKA_4.classpath()
    except KafkaToolMissing as missing:
        pytest.skip(f"Kafka's Java tools need Java and Maven: {missing}")
    txn_broker.manager.create_topic("t", 1)
    tp = TopicPartition("t", 0)
    killed = subprocess.Popen([sys.executable, "-c", _HANGING_PRODUCER, txn_broker.bootstrap], stdout=subprocess.PIPE,
                              text=True)
    try:
        assert killed.stdout is not None and killed.stdout.readline().strip() == "sent"
    finally:
        killed.kill()
        killed.wait()
    (state,) = txn_broker.manager.producer_states(tp)
    assert state.current_txn_start_offset == 0 and txn_broker.manager.offsets(tp).last_stable_offset == 0

    listed = _table(_transactions(txn_broker, "list"))
    assert listed[0] == ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]
    assert [(r[0], r[2], r[3]) for r in listed[1:]] == [("stuck", str(state.producer_id), "Ongoing")]

    described = _table(_transactions(txn_broker, "describe", "--transactional-id", "stuck"))
    fields = dict(zip(described[0], described[1], strict=True))
    assert (fields["TransactionalId"], fields["ProducerId"], fields["TransactionState"], fields["TopicPartitions"]) == (
        "stuck", str(state.producer_id), "Ongoing", "t-0")

    producers = _table(_transactions(txn_broker, "describe-producers", "--topic", "t", "--partition", "0"))
    fields = dict(zip(producers[0], producers[1], strict=True))
    assert (fields["ProducerId"], fields["ProducerEpoch"], fields["CurrentTransactionStartOffset"]) == (
        str(state.producer_id), str(state.producer_epoch), "0")

    _transactions(txn_broker, "abort", "--topic", "t", "--partition", "0", "--start-offset", "0")
    offsets = txn_broker.manager.offsets(tp)
    assert offsets.last_stable_offset == offsets.high_watermark == 4  # three records and the ABORT marker
    assert txn_broker.manager.producer_states(tp)[0].current_txn_start_offset == -1


def test_kafka_transactions_find_hanging_lists_only_what_no_coordinator_will_end(txn_broker: Broker) -> None:
    """``find-hanging`` (DescribeTopics, DescribeProducers, ListTransactions by producer id,
    DescribeTransactions): a partition's open transaction whose producer id no transactional id
    holds (a marker never written) is hanging; one the coordinator has Ongoing with that partition
    is not. ``abort`` at the start offset it printed ends it, and the next search finds none."""
    try:
        KAFKA_4.classpath()
    except KafkaToolMissing as missing:
        pytest.skip(f"Kafka's Java tools need Java and Maven: {missing}")
    manager = txn_broker.manager
    manager.create_topic("t", 2)
    alive = hanging(txn_broker.connect(), "alive", "t")  # t-0: the coordinator will end it
    stray_pid = alive.pid + 1000
    builder = BatchBuilder(producer_id=stray_pid, producer_epoch=0, base_sequence=0, is_transactional=True)
    for i in range(2):
        builder.append(i, 0, None, b"stray-%d" % i)
    manager.append(TopicPartition("t", 1), builder.build())  # t-1: data of a transaction no coordinator knows

    def found() -> list[list[str]]:
        rows = _table(_transactions(txn_broker, "find-hanging", "--topic", "t",
                                    "--max-transaction-timeout", "0"))
        assert rows[0] == ["Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch", "StartOffset",
                           "LastTimestamp", "Duration(min)"]
        return rows[1:]

    (row,) = found()
    assert row[:6] == ["t", "1", str(stray_pid), "0", "-1", "0"]
    _transactions(txn_broker, "abort", "--topic", "t", "--partition", "1", "--start-offset", row[5])
    assert manager.offsets(TopicPartition("t", 1)).last_stable_offset == 3  # two records and the ABORT marker
    assert found() == []
    assert manager.offsets(TopicPartition("t", 0)).last_stable_offset == 0  # the live one is left open


def test_a_batch_verified_before_its_transaction_ended_is_refused_at_the_append(txn_broker: Broker) -> None:
    """Kafka's VerificationGuard: the coordinator verifies a Produce's transactional batch on
    arrival, the append runs later on the pool; when a marker ends the transaction in between (a
    client aborting after its produce timed out), the batch is refused with INVALID_TXN_STATE
    instead of opening a transaction no coordinator knows. Verified after the marker, it goes in."""
    import asyncio

    from tidelog.server.codec import decode_request
    from tidelog.server.produce import append_requests, begin_produce

    manager = txn_broker.manager
    manager.create_topic("t", 1)
    tp = TopicPartition("t", 0)
    txn = hanging(txn_broker.connect(), "race", "t")  # Ongoing with t-0, three records appended

    def produce(sequence: int) -> Any:
        builder = BatchBuilder(producer_id=txn.pid, producer_epoch=txn.epoch, base_sequence=sequence,
                               is_transactional=True)
        builder.append(0, 0, None, b"late")
        P = ProduceRequest.TopicProduceData
        request = ProduceRequest(transactional_id=txn.id, acks=-1, timeout_ms=5000, topic_data=[
            P(name="t", partition_data=[P.PartitionProduceData(index=0, records=builder.build())])])
        request.API_VERSION = 8
        request.with_header(correlation_id=1, client_id="race")
        return decode_request(bytes(request.encode(header=True, framed=False)))

    async def verify(request: Any) -> Any:
        return begin_produce(txn_broker.server._context, request)  # the coordinator still says Ongoing

    late = asyncio.run_coroutine_threadsafe(verify(produce(3)), txn_broker.loop).result(10)
    manager.write_txn_marker(tp, txn.pid, txn.epoch, 0, commit=False)  # the client's abort lands in between
    end = manager.offsets(tp).log_end_offset
    assert append_requests(manager, [late]) == (1, None)
    (result,) = late.outcome.topics["t"]
    assert result.error == E.INVALID_TXN_STATE and manager.offsets(tp).log_end_offset == end
    fresh = asyncio.run_coroutine_threadsafe(verify(produce(3)), txn_broker.loop).result(10)
    append_requests(manager, [fresh])
    assert fresh.outcome.topics["t"][0].error == E.NONE and manager.offsets(tp).log_end_offset == end + 1
