"""The lock-free counters behind the endpoint: Yammer's percentile rule over the last 1028
samples, Kafka's request and error names, and reads from another thread while the writer runs."""

from __future__ import annotations

import threading

import pytest
from kafka.protocol.producer import ProduceResponse

from tidelog.server import codec
from tidelog.server.errors import ErrorCode
from tidelog.server.kafka_apis import HANDLERS
from tidelog.server.metrics.broker_metrics import (
    RESERVOIR_SIZE,
    BrokerTopicMetrics,
    RequestMetrics,
    ServerMetrics,
    quantile,
)
from tidelog.server.metrics.collectors import request_families
from tidelog.server.metrics.request_names import (
    api_name,
    error_name,
    metric_names,
    response_error_codes,
)


def test_quantile_follows_yammers_snapshot_rule() -> None:
    values = [float(v) for v in range(1, 11)]  # 1..10
    assert quantile(values, 0.5) == 5.5  # rank 0.5 * 11 = 5.5: halfway between the 5th and 6th
    assert quantile(values, 0.75) == pytest.approx(8.25)
    assert quantile(values, 0.95) == 10.0  # rank 10.45 >= n: the last
    assert quantile([3.0], 0.5) == 3.0
    assert quantile([1.0, 2.0], 0.01) == 1.0  # rank below 1: the first
    assert quantile([], 0.99) == 0.0


def test_the_reservoir_keeps_the_last_1028_samples_and_counts_all() -> None:
    metrics = RequestMetrics()
    for ms in range(3000):
        metrics.on_request(("Produce",), 9, float(ms))
    snapshot = metrics.snapshot()["Produce"]
    assert snapshot.count == 3000 and snapshot.requests == {9: 3000}
    assert snapshot.times == [float(ms) for ms in range(3000 - RESERVOIR_SIZE, 3000)]


def test_request_names_are_kafkas() -> None:
    assert metric_names(codec.FETCH) == ("FetchConsumer", "Fetch")
    assert metric_names(codec.PRODUCE) == ("Produce",)
    expected = {0: "Produce", 2: "ListOffsets", 3: "Metadata", 8: "OffsetCommit", 10: "FindCoordinator",
                18: "ApiVersions", 22: "InitProducerId", 32: "DescribeConfigs", 36: "SaslAuthenticate",
                44: "IncrementalAlterConfigs", 60: "DescribeCluster"}
    for key, name in expected.items():
        assert api_name(key) == name
    for key in (*HANDLERS, codec.API_VERSIONS):
        assert not api_name(key).isdigit(), f"API key {key} has no name"
    assert api_name(32000) == "StageBatches"


def test_error_names_are_kafkas() -> None:
    assert error_name(0) == "NONE"
    assert error_name(-1) == "UNKNOWN_SERVER_ERROR"
    assert error_name(10) == "MESSAGE_TOO_LARGE"  # kafka-python calls it MESSAGE_SIZE_TOO_LARGE
    assert error_name(17) == "INVALID_TOPIC_EXCEPTION"
    assert error_name(109) == "OFFSET_MOVED_TO_TIERED_STORAGE"
    assert error_name(31337) == "31337"
    for code in ErrorCode:
        assert error_name(code) == code.name


def test_response_error_codes_count_every_occurrence() -> None:
    T = ProduceResponse.TopicProduceResponse
    P = T.PartitionProduceResponse
    body = ProduceResponse(throttle_time_ms=0, responses=[
        T(name="a", partition_responses=[P(index=0, error_code=0), P(index=1, error_code=3)]),
        T(name="b", partition_responses=[P(index=0, error_code=0)])])
    assert sorted(response_error_codes(body)) == [0, 0, 3]


def test_unknown_topics_grow_no_series() -> None:
    topics = BrokerTopicMetrics()
    for i in range(1000):
        topics.on_produce(f"nowhere-{i}", 3, 100, 0)
    all_topics, per_topic = topics.snapshot()
    assert all_topics.total_produce == 1000 and per_topic == {}


def test_produce_failures_follow_kafkas_split() -> None:
    topics = BrokerTopicMetrics()
    topics.on_produce("t", 0, 100, 4)
    topics.on_produce("t", 87, 50, 0)  # INVALID_RECORD: Kafka's processFailedRecord
    topics.on_produce("t", 2, 30, 0)  # CORRUPT_MESSAGE: answered, not a failed request
    topics.on_produce("t", 10, 70, 0)  # MESSAGE_TOO_LARGE: bytes rejected
    one = topics.snapshot()[1]["t"]
    assert (one.total_produce, one.failed_produce, one.bytes_in, one.messages_in, one.bytes_rejected) == \
        (4, 1, 100, 4, 70)


def test_scrapes_from_another_thread_while_the_writer_runs_see_consistent_counts() -> None:
    """One writer thread (the event loop's role) and a scraping thread, no lock: every scrape
    parses, and the counts it sees never go backwards."""
    metrics = ServerMetrics()
    done = threading.Event()

    def write() -> None:
        for i in range(100_000):
            metrics.topics.on_produce(f"t{i % 50}", 0, 10, 1)
            metrics.requests.on_request(("Produce",), 9, float(i % 7))
            metrics.requests.on_error_counts("Produce", {0: 1})
        done.set()

    writer = threading.Thread(target=write)
    writer.start()
    last = -1.0
    while not done.is_set():
        families = {f.name: f for f in request_families(metrics)}
        counts = [s.value for s in families["kafka_network_requestmetrics_requests"].samples]
        if counts:
            assert counts[0] >= last
            last = counts[0]
    writer.join()
    all_topics, per_topic = metrics.topics.snapshot()
    assert all_topics.messages_in == 100_000 and sum(t.messages_in for t in per_topic.values()) == 100_000


def test_partitions_refused_by_transaction_verification_are_not_produce_requests() -> None:
    from tidelog.server.produce import PartitionResult, ProduceOutcome, _count_topics
    from tidelog.topic_partition import TopicPartition

    outcome = ProduceOutcome()
    outcome.topics["t"] = [PartitionResult(0, ErrorCode.INVALID_TXN_STATE, size=50),
                           PartitionResult(1, ErrorCode.NONE, size=70, appended_records=2)]
    topics = BrokerTopicMetrics()
    _count_topics(topics, outcome, {TopicPartition("t", 0): ErrorCode.INVALID_TXN_STATE})
    all_topics, _ = topics.snapshot()
    assert (all_topics.total_produce, all_topics.failed_produce, all_topics.bytes_in) == (1, 0, 70)
