"""CreatePartitions, DeleteRecords, DescribeConfigs, AlterConfigs, IncrementalAlterConfigs,
DescribeLogDirs and DescribeCluster: through kafka-python's admin client (a client nobody here
wrote) and, for fields the client hides, over a raw connection."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kafka import KafkaAdminClient
from kafka import TopicPartition as KafkaTopicPartition
from kafka.admin import ConfigResource, ConfigResourceType, NewPartitions
from kafka.errors import InvalidPartitionsError, PolicyViolationError, UnknownTopicOrPartitionError
from kafka.protocol.admin import (
    AlterConfigsRequest,
    AlterConfigsResponse,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    DescribeClusterRequest,
    DescribeClusterResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)

from server_helpers import Broker
from tidelog.manager.log_dir import DEFAULT_NODE_ID as NODE
from tidelog.records.builder import build_batch
from tidelog.topic_partition import TopicPartition


@pytest.fixture
def admin(broker: Broker) -> Iterator[KafkaAdminClient]:
    """kafka-python's admin client; tests create their topics through it, or before asking for it
    (it routes partition requests by the metadata it fetched)."""
    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    yield client
    client.close()


def _fill(broker: Broker, topic: str, count: int, partition: int = 0) -> None:
    broker.manager.append(TopicPartition(topic, partition), build_batch([(None, b"v%d" % i) for i in range(count)]))


# --- CreatePartitions -----------------------------------------------------------------------------

def test_create_partitions_grows_a_topic_and_refuses_to_shrink(broker: Broker, admin: KafkaAdminClient) -> None:
    broker.manager.create_topic("grow", 2)
    admin.create_partitions({"grow": NewPartitions(5)})
    assert broker.manager.partitions("grow") == [0, 1, 2, 3, 4]
    with pytest.raises(InvalidPartitionsError, match="higher than the requested 3"):
        admin.create_partitions({"grow": NewPartitions(3)})
    with pytest.raises(InvalidPartitionsError, match="already has 5 partitions"):
        admin.create_partitions({"grow": NewPartitions(5)})
    with pytest.raises(UnknownTopicOrPartitionError):
        admin.create_partitions({"nope": NewPartitions(2)})
    assert broker.manager.partitions("grow") == [0, 1, 2, 3, 4]


def test_create_partitions_validate_only_assignments_and_duplicates(broker: Broker) -> None:
    broker.manager.create_topic("t", 1)
    client = broker.connect()
    Topic = CreatePartitionsRequest.CreatePartitionsTopic
    Assignment = Topic.CreatePartitionsAssignment

    def call(*topics: object, validate_only: bool = False) -> list[tuple[str, int]]:
        request = CreatePartitionsRequest(topics=list(topics), timeout_ms=1000, validate_only=validate_only)
        return [(r.name, r.error_code) for r in client.call(request, CreatePartitionsResponse, 3).results]

    assert call(Topic(name="t", count=3, assignments=None), validate_only=True) == [("t", 0)]
    assert broker.manager.partitions("t") == [0]
    assert call(Topic(name="t", count=3, assignments=[Assignment(broker_ids=[NODE])])) == [("t", 39)]  # one short
    assert call(Topic(name="t", count=2, assignments=[Assignment(broker_ids=[7])])) == [("t", 39)]  # not this broker
    assert call(Topic(name="t", count=2, assignments=None), Topic(name="t", count=3, assignments=None)) == \
        [("t", 42), ("t", 42)]
    assert call(Topic(name="t", count=2, assignments=[Assignment(broker_ids=[NODE])])) == [("t", 0)]
    assert broker.manager.partitions("t") == [0, 1]


# --- DeleteRecords --------------------------------------------------------------------------------

def test_delete_records_moves_the_low_watermark(broker: Broker, request: pytest.FixtureRequest) -> None:
    broker.manager.create_topic("d", 2)
    _fill(broker, "d", 10)
    admin = request.getfixturevalue("admin")
    answer = admin.delete_records({KafkaTopicPartition("d", 0): 4})
    assert [(tp.partition, low) for tp, low in _low_watermarks(answer)] == [(0, 4)]
    assert broker.manager.log(TopicPartition("d", 0)).log_start_offset == 4


def _low_watermarks(answer: object) -> list[tuple[object, int]]:
    # kafka-python answers {TopicPartition: {"low_watermark": n, ...}}
    return [(tp, info["low_watermark"]) for tp, info in sorted(answer.items())]  # type: ignore[attr-defined]


def test_delete_records_errors_per_partition(broker: Broker) -> None:
    broker.manager.create_topic("d", 2)
    broker.manager.create_topic("compacted", 1, {"cleanup.policy": "compact"})
    _fill(broker, "d", 10)
    client = broker.connect()
    Topic = DeleteRecordsRequest.DeleteRecordsTopic
    Part = Topic.DeleteRecordsPartition
    request = DeleteRecordsRequest(topics=[
        Topic(name="d", partitions=[Part(partition_index=0, offset=-1), Part(partition_index=1, offset=5),
                                    Part(partition_index=9, offset=0)]),
        Topic(name="compacted", partitions=[Part(partition_index=0, offset=0)]),
        Topic(name="missing", partitions=[Part(partition_index=0, offset=0)]),
    ], timeout_ms=1000)
    response = client.call(request, DeleteRecordsResponse, 2)
    got = {(t.name, p.partition_index): (p.error_code, p.low_watermark) for t in response.topics for p in t.partitions}
    assert got == {
        ("d", 0): (0, 10),            # -1 = the high watermark
        ("d", 1): (1, -1),            # past the high watermark (0): OFFSET_OUT_OF_RANGE
        ("d", 9): (3, -1),            # no such partition
        ("compacted", 0): (44, -1),   # cleanup.policy without delete: POLICY_VIOLATION
        ("missing", 0): (3, -1),
    }


def test_delete_records_on_a_compacted_topic_is_a_policy_violation(broker: Broker, request: pytest.FixtureRequest) -> None:
    broker.manager.create_topic("c", 1, {"cleanup.policy": "compact"})
    admin = request.getfixturevalue("admin")
    with pytest.raises(PolicyViolationError):
        admin.delete_records({KafkaTopicPartition("c", 0): 0})


# --- configs --------------------------------------------------------------------------------------

def test_describe_topic_configs_with_sources_and_synonyms(make_broker: object) -> None:
    broker = make_broker(**{"log.retention.hours": "48"})  # type: ignore[operator]
    broker.manager.create_topic("cfg", 1, {"segment.bytes": "1048576"})
    client = broker.connect()
    resource = DescribeConfigsRequest.DescribeConfigsResource
    request = DescribeConfigsRequest(resources=[resource(resource_type=2, resource_name="cfg",
                                                         configuration_keys=None)],
                                     include_synonyms=True, include_documentation=True)
    result = client.call(request, DescribeConfigsResponse, 4).results[0]
    assert result.error_code == 0
    configs = {c.name: c for c in result.configs}
    segment = configs["segment.bytes"]
    assert (segment.value, segment.config_source, segment.config_type) == ("1048576", 1, 3)  # TOPIC_CONFIG, INT
    assert [(s.name, s.source) for s in segment.synonyms] == [("segment.bytes", 1), ("log.segment.bytes", 5)]
    retention = configs["retention.ms"]
    assert (retention.value, retention.config_source) == (str(48 * 3_600_000), 4)  # STATIC_BROKER_CONFIG
    assert [s.name for s in retention.synonyms][0] == "log.retention.hours"
    assert configs["cleanup.policy"].config_source == 5 and configs["cleanup.policy"].config_type == 7
    assert configs["cleanup.policy"].documentation


def test_describe_configs_filters_keys_and_reports_unknown_topics_and_other_brokers(broker: Broker) -> None:
    broker.manager.create_topic("cfg", 1)
    client = broker.connect()
    resource = DescribeConfigsRequest.DescribeConfigsResource
    request = DescribeConfigsRequest(resources=[
        resource(resource_type=2, resource_name="cfg", configuration_keys=["retention.ms", "no.such.key"]),
        resource(resource_type=2, resource_name="missing", configuration_keys=None),
        resource(resource_type=4, resource_name=str(NODE), configuration_keys=["num.partitions"]),
        resource(resource_type=4, resource_name="7", configuration_keys=None),
        resource(resource_type=8, resource_name=str(NODE), configuration_keys=None),
    ], include_synonyms=False)
    results = client.call(request, DescribeConfigsResponse, 1).results
    assert [c.name for c in results[0].configs] == ["retention.ms"]
    assert results[1].error_code == 3
    assert [(c.name, c.value, c.read_only, c.config_source) for c in results[2].configs] == \
        [("num.partitions", "1", True, 5)]
    assert results[3].error_code == 42 and f"expected {NODE}" in results[3].error_message
    assert results[4].error_code == 42


def test_kafka_python_describes_and_alters_topic_configs(broker: Broker, admin: KafkaAdminClient) -> None:
    broker.manager.create_topic("cfg", 1, {"retention.ms": "60000"})
    described = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "cfg")], config_filter="modified")
    assert repr(described).count("retention.ms") == 1 and "60000" in repr(described)
    admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, "cfg", configs={"segment.ms": "3600000"})],
                        incremental=False)
    # AlterConfigs replaces the whole set; kafka-python re-sends the other overrides it described first
    assert broker.manager.topic_overrides("cfg") == {"retention.ms": "60000", "segment.ms": "3600000"}
    admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, "cfg", configs={"retention.ms": "1000"})],
                        incremental=True)
    assert broker.manager.topic_overrides("cfg") == {"segment.ms": "3600000", "retention.ms": "1000"}
    assert broker.manager.topic_config("cfg").retention_ms == 1000


def test_incremental_alter_configs_operations_and_validation(broker: Broker) -> None:
    broker.manager.create_topic("cfg", 1, {"retention.ms": "60000"})
    client = broker.connect()
    Resource = IncrementalAlterConfigsRequest.AlterConfigsResource
    Op = Resource.AlterableConfig

    def alter(*ops: tuple[str, int, str | None], name: str = "cfg", kind: int = 2,
              validate_only: bool = False) -> tuple[int, str | None]:
        request = IncrementalAlterConfigsRequest(resources=[Resource(
            resource_type=kind, resource_name=name,
            configs=[Op(name=n, config_operation=o, value=v) for n, o, v in ops])], validate_only=validate_only)
        answer = client.call(request, IncrementalAlterConfigsResponse, 1).responses[0]
        return answer.error_code, answer.error_message

    assert alter(("cleanup.policy", 2, "compact"))[0] == 0                 # APPEND to the default "delete"
    assert broker.manager.topic_overrides("cfg")["cleanup.policy"] == "delete,compact"
    assert alter(("cleanup.policy", 3, "delete"))[0] == 0                  # SUBTRACT
    assert broker.manager.topic_overrides("cfg")["cleanup.policy"] == "compact"
    assert alter(("retention.ms", 1, None))[0] == 0                        # DELETE
    assert "retention.ms" not in broker.manager.topic_overrides("cfg")
    assert alter(("retention.ms", 2, "5"))[0] == 40                        # APPEND to a non-list
    assert alter(("retention.ms", 0, "soon"))[0] == 40                     # bad value: INVALID_CONFIG
    assert alter(("no.such.config", 0, "1"))[0] == 40
    assert alter(("segment.ms", 0, "1"), ("segment.ms", 0, "2"))[0] == 42  # duplicate keys
    assert alter(("segment.ms", 0, "7200000"), validate_only=True) == (0, None)
    assert "segment.ms" not in broker.manager.topic_overrides("cfg")
    assert alter(("segment.ms", 0, "1"), name="missing")[0] == 3
    code, message = alter(("num.partitions", 0, "3"), name=str(NODE), kind=4)    # broker configs are static
    assert code == 42 and "dynamically" in (message or "")
    assert broker.manager.topic_overrides("cfg") == {"cleanup.policy": "compact"}


def test_alter_configs_validates_the_whole_set_then_replaces_the_overrides(broker: Broker) -> None:
    broker.manager.create_topic("cfg", 1, {"retention.ms": "60000"})
    client = broker.connect()
    Resource = AlterConfigsRequest.AlterConfigsResource
    Config = Resource.AlterableConfig
    request = AlterConfigsRequest(resources=[Resource(resource_type=2, resource_name="cfg", configs=[
        Config(name="segment.ms", value="3600000"), Config(name="min.compaction.lag.ms", value="-5")])],
        validate_only=False)
    answer = client.call(request, AlterConfigsResponse, 2).responses[0]
    assert answer.error_code == 40 and "min.compaction.lag.ms" in answer.error_message
    assert broker.manager.topic_overrides("cfg") == {"retention.ms": "60000"}
    request = AlterConfigsRequest(resources=[Resource(resource_type=2, resource_name="cfg", configs=[
        Config(name="segment.ms", value="3600000")])], validate_only=False)
    assert client.call(request, AlterConfigsResponse, 2).responses[0].error_code == 0
    assert broker.manager.topic_overrides("cfg") == {"segment.ms": "3600000"}  # what is not named goes


# --- DescribeLogDirs and DescribeCluster ----------------------------------------------------------

def test_describe_log_dirs_lists_every_partition_with_its_size(broker: Broker, admin: KafkaAdminClient) -> None:
    broker.manager.create_topic("a", 2)
    _fill(broker, "a", 5, partition=1)
    answer = admin.describe_log_dirs()
    text = repr(answer)
    size = broker.manager.log(TopicPartition("a", 1)).size
    assert size > 0 and str(size) in text
    assert str(broker.manager.log_dirs()[0].path) in text


def test_describe_cluster_names_this_broker_as_the_only_one_and_the_controller(broker: Broker) -> None:
    client = broker.connect()
    response = client.call(DescribeClusterRequest(include_cluster_authorized_operations=False, endpoint_type=1,
                                                  include_fenced_brokers=False), DescribeClusterResponse, 2)
    assert response.error_code == 0 and response.controller_id == NODE
    assert [(b.broker_id, b.host, b.port) for b in response.brokers] == [(NODE, "127.0.0.1", broker.port)]
    controllers = client.call(DescribeClusterRequest(include_cluster_authorized_operations=False, endpoint_type=2,
                                                     include_fenced_brokers=False), DescribeClusterResponse, 2)
    assert controllers.error_code == 114


def test_kafka_python_describe_cluster(broker: Broker, admin: KafkaAdminClient) -> None:
    cluster = admin.describe_cluster()
    assert cluster["controller_id"] == NODE
    assert [(b["node_id"] if "node_id" in b else b["broker_id"], b["port"]) for b in cluster["brokers"]] == \
        [(NODE, broker.port)]
