"""Internal topics through ``tidelog serve`` with kafka-python: a client may not produce to
``__consumer_offsets`` nor delete it (Kafka's INVALID_TOPIC_EXCEPTION), and the group's committed
offsets survive both attempts and a restart."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import server_samples as samples
from abuse_helpers import Served
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.errors import InvalidTopicError
from kafka.protocol.producer import ProduceResponse
from kafka.structs import OffsetAndMetadata
from server_helpers import TIMEOUT_S

OFFSETS = "__consumer_offsets"
GROUP = "keeps-its-offsets"


def commit_offset(bootstrap: str, offset: int) -> None:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=GROUP, enable_auto_commit=False)
    try:
        consumer.commit({TopicPartition("events", 0): OffsetAndMetadata(offset, "", -1)})
    finally:
        consumer.close()


def committed(bootstrap: str) -> int | None:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=GROUP, enable_auto_commit=False)
    try:
        return consumer.committed(TopicPartition("events", 0))
    finally:
        consumer.close()


@pytest.fixture
def with_offsets(serve: Callable[..., Served]) -> Served:
    """A broker whose ``__consumer_offsets`` holds one group's committed offset 2 of ``events``."""
    served = serve()
    bootstrap = f"127.0.0.1:{served.port}"
    producer = KafkaProducer(bootstrap_servers=bootstrap)
    for i in range(3):
        producer.send("events", b"e%d" % i, partition=0).get(TIMEOUT_S)
    producer.close()
    commit_offset(bootstrap, 2)
    return served


@pytest.mark.parametrize("client_id", ["kafka-python-producer", "__admin_client"])
def test_produce_to_the_offsets_topic_is_refused(with_offsets: Served, client_id: str) -> None:
    """kafka-python's producer will not even try (it hides internal topics' partitions), so the
    Produce request is sent as a client that does would; ``__admin_client`` is the id Kafka lets through."""
    client = with_offsets.raw()
    try:
        correlation = client.send(samples.produce(OFFSETS, 0, samples.record_batch(b"forged commit")), 9,
                                  client_id=client_id)
        response = client.receive(ProduceResponse, 9)
    finally:
        client.close()
    assert response.header.correlation_id == correlation
    [[partition]] = [topic.partition_responses for topic in response.responses]
    assert (partition.error_code, partition.error_message) == (
        InvalidTopicError.errno, "Cannot append to internal topic __consumer_offsets")
    assert committed(f"127.0.0.1:{with_offsets.port}") == 2


def test_delete_of_the_offsets_topic_is_refused_and_offsets_survive_a_restart(
        with_offsets: Served, serve: Callable[..., Served], tmp_path: Path) -> None:
    bootstrap = f"127.0.0.1:{with_offsets.port}"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        response = admin.delete_topics([OFFSETS], timeout_ms=int(TIMEOUT_S * 1000))
        errors = {topic["name"]: topic["error_code"] for topic in response["topics"]}
    except InvalidTopicError:  # kafka-python raises the first topic error
        errors = {OFFSETS: InvalidTopicError.errno}
    finally:
        admin.close()
    assert errors == {OFFSETS: InvalidTopicError.errno}
    assert with_offsets.stop() == 0
    restarted = serve(with_offsets.data)
    assert committed(f"127.0.0.1:{restarted.port}") == 2
