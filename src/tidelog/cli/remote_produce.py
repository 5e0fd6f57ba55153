"""``tidelog produce --bootstrap-server``: the console producer's batches, sent to a broker.

:class:`BrokerTarget` is the :class:`~tidelog.cli.produce.ProduceTarget` of a running broker:
the topic's partition count from Metadata, its ``max.message.bytes`` from DescribeConfigs, and
each sealed batch appended by one Produce request (acks=-1, v3-v9: record batches v2, by topic
name) to the partition's leader. The batches are the very bytes the local mode appends (no
producer id: kafka-python's idempotent producer needs InitProducerId), sent one at a time, so the
broker assigns the same offsets and the producer's error contract (every record before the bad
line written, none from it on) holds unchanged. A refusal comes back as the typed error of its
Kafka code, with the records at fault (``record_errors``, Produce v8+) when the broker names them.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from kafka.admin import ConfigResource
from kafka.protocol.producer import ProduceRequest

from tidelog.cli.produce import Appended
from tidelog.cli.remote import REQUEST_TIMEOUT_MS, RemoteClient, broker_error, connect, kafka_errors_mapped
from tidelog.records import LAST_OFFSET_DELTA_OFFSET
from tidelog.storage.config import TOPIC_CONFIGS
from tidelog.topic_partition import TopicPartition

ACKS_ALL = -1
MIN_VERSION, MAX_VERSION = 3, 9  # v3: record batch v2; v10+ is not needed, v13 names topics by id
MAX_MESSAGE_BYTES = "max.message.bytes"

_Topic = ProduceRequest.TopicProduceData
_Partition = _Topic.PartitionProduceData


class BrokerTarget:
    """Appends to a broker's partitions through ``client``. Partition leaders are looked up once."""

    def __init__(self, client: RemoteClient) -> None:
        self._client = client
        self._leaders: dict[str, dict[int, int]] = {}

    def partition_count(self, topic: str) -> int:
        self._leaders[topic] = self._client.leaders(topic)
        return len(self._leaders[topic])

    def max_message_bytes(self, topic: str) -> int:
        resource = ConfigResource("TOPIC", topic, [MAX_MESSAGE_BYTES])
        with kafka_errors_mapped(topic=topic):
            described = self._client.admin.describe_configs([resource], config_filter="all")
        entry = described.get("topic", {}).get(topic, {}).get(MAX_MESSAGE_BYTES)
        if entry is None or entry.get("value") is None:
            return int(TOPIC_CONFIGS[MAX_MESSAGE_BYTES].default)
        return int(entry["value"])

    def append(self, tp: TopicPartition, batch: bytes) -> Appended:
        leaders = self._leaders.get(tp.topic) or self._client.leaders(tp.topic)
        request = ProduceRequest(transactional_id=None, acks=ACKS_ALL, timeout_ms=REQUEST_TIMEOUT_MS,
                                 topic_data=[_Topic(name=tp.topic, partition_data=[_Partition(index=tp.partition,
                                                                                               records=batch)])],
                                 min_version=MIN_VERSION, max_version=MAX_VERSION)
        response = self._client.send(request, leaders.get(tp.partition), topic_partition=str(tp))
        answer = _partition_answer(response, tp)
        if answer.error_code:
            error = broker_error(answer.error_code, answer.error_message, topic_partition=str(tp))
            found = [(e.batch_index, e.batch_index_error_message) for e in (answer.record_errors or ())]
            if found:
                error.record_errors = found  # type: ignore[attr-defined]
            raise error
        count = _record_count(batch)
        return Appended(answer.base_offset, answer.base_offset + count - 1, count)


def _partition_answer(response: Any, tp: TopicPartition) -> Any:
    for topic in response.responses:
        for answer in topic.partition_responses:
            if answer.index == tp.partition:
                return answer
    raise broker_error(-1, "the broker's Produce response does not mention the partition", topic_partition=str(tp))


def _record_count(batch: bytes) -> int:
    """Records in a v2 batch: its lastOffsetDelta + 1."""
    return int.from_bytes(batch[LAST_OFFSET_DELTA_OFFSET:LAST_OFFSET_DELTA_OFFSET + 4], "big", signed=True) + 1


@contextmanager
def remote_target(bootstrap: str) -> Iterator[BrokerTarget]:
    """A :class:`BrokerTarget` over a fresh connection to ``bootstrap``, closed on exit."""
    with connect(bootstrap) as client:
        yield BrokerTarget(client)
