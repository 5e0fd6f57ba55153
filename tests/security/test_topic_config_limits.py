"""A topic config the storage layer cannot use is refused when it is set, through ``tidelog serve``
(kafka-python's CreateTopics, AlterConfigs, IncrementalAlterConfigs) and through the CLI
(``topics create --config``, ``configs alter --set``), with Kafka's INVALID_CONFIG and wording;
the topic keeps serving with the configs it had, before and after a restart.

``segment.index.bytes`` 4-11 (Kafka's minimum is 4) was accepted: the partition then could not be
created, or every roll failed, and after a restart it was set aside."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from abuse_helpers import Served, tidelog
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType, NewTopic
from kafka.errors import InvalidConfigurationError
from server_helpers import TIMEOUT_S

MESSAGE = "Invalid value {} for configuration segment.index.bytes: Value must be at least 12"


def produce_and_read(bootstrap: str, topic: str, first: int, count: int) -> list[bytes]:
    """Produce records ``first..first+count-1``, then read the partition's first ``first+count``."""
    producer = KafkaProducer(bootstrap_servers=bootstrap)
    for i in range(first, first + count):
        producer.send(topic, b"r%d" % i, partition=0).get(TIMEOUT_S)
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, auto_offset_reset="earliest",
                             consumer_timeout_ms=int(TIMEOUT_S * 1000))
    consumer.assign([TopicPartition(topic, 0)])
    values = [next(consumer).value for _ in range(first + count)]
    consumer.close()
    return values


@pytest.mark.parametrize("value", ["4", "11"])
def test_segment_index_bytes_below_12_is_refused_by_every_admin_api(serve: Callable[..., Served], value: str) -> None:
    served = serve()
    bootstrap = f"127.0.0.1:{served.port}"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        with pytest.raises(InvalidConfigurationError, match=MESSAGE.format(value)):
            admin.create_topics([NewTopic("tiny-index", 1, 1, topic_configs={"segment.index.bytes": value})])
        assert "tiny-index" not in admin.list_topics()
        admin.create_topics([NewTopic("kept", 1, 1, topic_configs={"segment.index.bytes": "4096"})])
        for incremental in (False, True):
            result = admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, "kept",
                                                         configs={"segment.index.bytes": value})],
                                         incremental=incremental)
            assert "Value must be at least 12" in json.dumps(result, default=str), (incremental, result)
        described = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "kept")])
    finally:
        admin.close()
    assert "'segment.index.bytes': {'value': '4096'" in str(described)
    assert produce_and_read(bootstrap, "kept", 0, 30) == [b"r%d" % i for i in range(30)]
    assert served.stop() == 0
    restarted = serve(served.data)
    assert produce_and_read(f"127.0.0.1:{restarted.port}", "kept", 30, 1) == [b"r%d" % i for i in range(31)]


def test_the_cli_refuses_segment_index_bytes_below_12(tmp_path: Path) -> None:
    data = tmp_path / "data"
    created = tidelog("topics", "create", "tiny", "--config", "segment.index.bytes=8", data=data)
    assert created.returncode != 0 and MESSAGE.format(8) in created.stderr
    assert tidelog("topics", "create", "kept", data=data).returncode == 0
    altered = tidelog("configs", "alter", "kept", "--set", "segment.index.bytes=5", data=data)
    assert altered.returncode != 0 and MESSAGE.format(5) in altered.stderr
    listed = tidelog("topics", "list", data=data)
    assert listed.stdout.split() == ["kept"]
    described = tidelog("configs", "describe", "kept", "--json", data=data)
    assert json.loads(described.stdout)["configs"] == []
