"""The server's Kafka metrics, as a scraper sees them over HTTP, against what real clients did:
BrokerTopicMetrics per topic and for all topics, RequestMetrics (requests, errors, TotalTimeMs
percentiles), the connection count, the fetch purgatory and the group coordinator gauges."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.protocol.producer import ProduceResponse

from metrics_helpers import endpoint_for, scrape, value
from server_helpers import TIMEOUT_S, Broker, wait_until
from server_samples import fetch, produce, record_batch
from tidelog.topic_partition import TopicPartition as TidelogTp

BT = "kafka_server_brokertopicmetrics_"
RM = "kafka_network_requestmetrics_"


def _log_bytes(broker: Broker, topic: str, partitions: int) -> int:
    return sum(broker.manager.log(TidelogTp(topic, p)).size for p in range(partitions))


def test_produced_and_fetched_bytes_and_records_match_what_clients_did(broker: Broker) -> None:
    broker.manager.create_topic("orders", 2)
    broker.manager.create_topic("quiet", 1)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=0)
    for i in range(20):  # one record per request: 20 produce requests, each of one partition
        producer.send("orders", value=b"v" * (10 + i), key=b"k%d" % i, partition=i % 2).get(timeout=TIMEOUT_S)
    producer.close()
    produced = _log_bytes(broker, "orders", 2)

    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=None, enable_auto_commit=False,
                             auto_offset_reset="earliest", consumer_timeout_ms=int(TIMEOUT_S * 1000))
    consumer.assign([TopicPartition("orders", 0), TopicPartition("orders", 1)])
    got = []
    for record in consumer:
        got.append(record)
        if len(got) == 20:
            break
    with endpoint_for(broker) as endpoint:
        samples = scrape(endpoint.url)
    consumer.close()

    assert value(samples, BT + "bytesin_total", topic="orders") == produced
    assert value(samples, BT + "bytesin_total") == produced  # all topics: the series without labels
    assert value(samples, BT + "messagesin_total", topic="orders") == 20
    assert value(samples, BT + "messagesin_total") == 20
    assert value(samples, BT + "totalproducerequests_total", topic="orders") == 20
    assert value(samples, BT + "failedproducerequests_total", topic="orders") == 0
    assert value(samples, BT + "bytesout_total", topic="orders") == produced  # every record fetched once
    assert value(samples, BT + "bytesout_total") == produced
    assert value(samples, BT + "totalfetchrequests_total", topic="orders") >= 2  # both partitions read
    assert (BT + "bytesin_total", frozenset({("topic", "quiet")})) not in samples  # lazy, as Kafka's meters

    produce_versions = {dict(labels)["version"]: v for (name, labels), v in samples.items()
                        if name == RM + "requests_total" and dict(labels)["request"] == "Produce"}
    assert sum(produce_versions.values()) == 20
    assert value(samples, RM + "errors_total", request="Produce", error="NONE") == 20
    fetches = sum(v for (name, labels), v in samples.items()
                  if name == RM + "requests_total" and dict(labels)["request"] == "FetchConsumer")
    assert fetches >= 1
    assert fetches == sum(v for (name, labels), v in samples.items()
                          if name == RM + "requests_total" and dict(labels)["request"] == "Fetch")
    for quantile in ("0.50", "0.75", "0.95", "0.98", "0.99", "0.999"):
        assert value(samples, RM + "totaltimems", request="Produce", quantile=quantile) >= 0
    assert value(samples, RM + "totaltimems_count_total", request="Produce") == 20
    assert value(samples, RM + "requests_total", request="ApiVersions", version="4") >= 1  # kafka-python 3's
    assert value(samples, RM + "errors_total", request="Metadata", error="NONE") >= 1


def test_unknown_topic_and_too_large_counted_in_all_topics_and_errors(make_broker: Callable[..., Broker]) -> None:
    broker = make_broker(**{"auto.create.topics.enable": "false", "message.max.bytes": "200"})
    broker.manager.create_topic("small", 1)
    client = broker.connect()
    big = record_batch(b"x" * 400)
    for request in (produce("nowhere", records=record_batch(b"a")), produce("small", records=big)):
        response = client.call(request, ProduceResponse, 9)
        assert response.responses[0].partition_responses[0].error_code in (3, 10)
    client.call(produce("small", records=record_batch(b"ok")), ProduceResponse, 9)
    with endpoint_for(broker) as endpoint:
        samples = scrape(endpoint.url)
    client.close()

    assert value(samples, RM + "errors_total", request="Produce", error="UNKNOWN_TOPIC_OR_PARTITION") == 1
    assert value(samples, RM + "errors_total", request="Produce", error="MESSAGE_TOO_LARGE") == 1
    assert value(samples, RM + "errors_total", request="Produce", error="NONE") == 1
    assert value(samples, BT + "totalproducerequests_total") == 3
    assert value(samples, BT + "totalproducerequests_total", topic="small") == 2
    assert not any(dict(labels).get("topic") == "nowhere" for _, labels in samples)  # no series per unknown name
    assert value(samples, BT + "bytesrejected_total", topic="small") == len(big)
    assert value(samples, BT + "failedproducerequests_total") == 0  # Kafka answers these without "failing"
    assert value(samples, BT + "messagesin_total", topic="small") == 1


def test_a_request_that_closes_the_connection_is_still_counted(broker: Broker) -> None:
    """An acks=0 produce that fails closes the connection (Kafka's rule) and counts as a Produce
    with its error; a frame that does not decode is no request and counts nothing."""
    client = broker.connect()
    client.send(produce("absent", records=record_batch(b"a"), acks=0), 9)
    assert client.closed_by_server()
    client.close()
    garbage = broker.connect()
    garbage.send_bytes(b"\x00\x00\x00\x04\x00\x63\x00\x00")  # API key 99, cut short
    assert garbage.closed_by_server()
    garbage.close()
    with endpoint_for(broker) as endpoint:
        samples = scrape(endpoint.url)
    assert value(samples, RM + "requests_total", request="Produce", version="9") == 1
    assert value(samples, RM + "errors_total", request="Produce", error="UNKNOWN_TOPIC_OR_PARTITION") == 1
    assert value(samples, RM + "totaltimems_count_total", request="Produce") == 1
    assert not any(dict(labels).get("request") == "99" for _, labels in samples)


def test_long_poll_shows_in_purgatory_and_counts_its_bytes_out(broker: Broker) -> None:
    broker.manager.create_topic("waits", 1)
    client = broker.connect()
    from kafka.protocol.consumer import FetchResponse

    answered: list[object] = []
    correlation = client.send(fetch("waits", max_wait_ms=int(TIMEOUT_S * 1000), min_bytes=1), 12)
    reader = threading.Thread(target=lambda: answered.append(client.receive(FetchResponse, 12)))
    reader.start()
    with endpoint_for(broker) as endpoint:
        wait_until(lambda: broker.server.delayed_fetches == 1)
        assert value(scrape(endpoint.url), "kafka_server_delayedoperationpurgatory_purgatorysize",
                     delayedOperation="Fetch") == 1
        batch = record_batch(b"wake")
        producer = broker.connect()
        producer.call(produce("waits", records=batch), ProduceResponse, 9)
        reader.join(TIMEOUT_S)
        assert answered and answered[0].header.correlation_id == correlation  # type: ignore[attr-defined]
        samples = scrape(endpoint.url)
        producer.close()
    client.close()
    assert value(samples, "kafka_server_delayedoperationpurgatory_purgatorysize", delayedOperation="Fetch") == 0
    assert value(samples, BT + "bytesout_total", topic="waits") == len(batch)
    assert value(samples, BT + "totalfetchrequests_total", topic="waits") == 2  # first read and final read


def test_connection_count_and_group_gauges(make_broker: Callable[..., Broker]) -> None:
    broker = make_broker(**{"group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "1"})
    broker.manager.create_topic("grouped", 1)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=0)
    producer.send("grouped", b"one").get(timeout=TIMEOUT_S)
    producer.close()
    consumer = KafkaConsumer("grouped", bootstrap_servers=broker.bootstrap, group_id="g1", enable_auto_commit=False,
                             auto_offset_reset="earliest", session_timeout_ms=6000, heartbeat_interval_ms=500)
    deadline = time.monotonic() + 3 * TIMEOUT_S
    while not consumer.poll(timeout_ms=500) and time.monotonic() < deadline:
        pass
    consumer.commit()
    held = [broker.connect() for _ in range(3)]
    with endpoint_for(broker) as endpoint:
        samples = scrape(endpoint.url)
        open_now = broker.server.connection_count
        consumer.close()
        for client in held:
            client.close()
        wait_until(lambda: broker.server.connection_count == 0)
        after = scrape(endpoint.url)

    prefix = "kafka_coordinator_group_groupmetadatamanager_"
    assert value(samples, "kafka_server_socket_server_metrics_connection_count", listener="PLAINTEXT",
                 networkProcessor="0") == open_now >= 4
    assert value(after, "kafka_server_socket_server_metrics_connection_count", listener="PLAINTEXT",
                 networkProcessor="0") == 0
    assert value(samples, prefix + "numgroups") == 1
    assert value(samples, prefix + "numgroupsstable") == 1
    assert value(samples, prefix + "numoffsets") == 1
    assert value(samples, RM + "errors_total", request="OffsetCommit", error="NONE") >= 1
    assert value(samples, RM + "requests_total", request="JoinGroup", version=next(
        dict(labels)["version"] for name, labels in samples if name == RM + "requests_total"
        and dict(labels)["request"] == "JoinGroup")) >= 1
    assert value(after, prefix + "numgroupsempty") + value(after, prefix + "numgroupspreparingrebalance") == 1


def test_connections_refused_by_a_limit_are_counted(make_broker: Callable[..., Broker]) -> None:
    broker = make_broker(**{"max.connections": "1"})
    first = broker.connect()
    wait_until(lambda: broker.server.connection_count == 1)
    second = broker.connect()
    assert second.closed_by_server()
    with endpoint_for(broker) as endpoint:
        samples = scrape(endpoint.url)
    first.close()
    second.close()
    assert value(samples, "tidelog_server_refused_connections_total") == 1
    assert value(samples, "kafka_server_socket_server_metrics_connection_count", listener="PLAINTEXT",
                 networkProcessor="0") == 1


def test_a_deleted_topics_series_go_and_the_all_topics_counts_stay(broker: Broker) -> None:
    broker.manager.create_topic("gone", 1)
    client = broker.connect()
    client.call(produce("gone", records=record_batch(b"a", b"b")), ProduceResponse, 9)
    client.close()
    with endpoint_for(broker) as endpoint:
        assert value(scrape(endpoint.url), BT + "messagesin_total", topic="gone") == 2
        broker.manager.delete_topic("gone")
        samples = scrape(endpoint.url)
    assert not any(dict(labels).get("topic") == "gone" for _, labels in samples)
    assert value(samples, BT + "messagesin_total") == 2
