"""Sample requests of every API and version the server advertises, built with kafka-python."""

from __future__ import annotations

import time
from typing import Any

from kafka.protocol.admin import (
    AlterConfigsRequest,
    CreatePartitionsRequest,
    CreateTopicsRequest,
    DeleteRecordsRequest,
    DeleteTopicsRequest,
    DescribeClusterRequest,
    DescribeConfigsRequest,
    DescribeLogDirsRequest,
    IncrementalAlterConfigsRequest,
)
from kafka.protocol.consumer import FetchRequest, ListOffsetsRequest
from kafka.protocol.metadata import ApiVersionsRequest, MetadataRequest
from kafka.protocol.producer import ProduceRequest
from kafka.record.memory_records import MemoryRecordsBuilder

from tidelog.server import codec


def record_batch(*values: bytes, codec_id: int = 0, timestamps: list[int] | None = None,
                 keys: list[bytes | None] | None = None) -> bytes:
    """One RecordBatch v2 as kafka-python's producer builds it (timestamps: now, and keys
    ``k0, k1...``, unless given)."""
    builder = MemoryRecordsBuilder(magic=2, compression_type=codec_id, batch_size=1 << 20)
    now = int(time.time() * 1000)
    for i, value in enumerate(values):
        key = keys[i] if keys is not None else b"k%d" % i
        builder.append(timestamps[i] if timestamps else now, key, value, [])
    builder.close()
    return bytes(builder.buffer())


def produce(topic: str, partition: int = 0, records: bytes | None = None, acks: int = 1) -> Any:
    P = ProduceRequest.TopicProduceData
    return ProduceRequest(transactional_id=None, acks=acks, timeout_ms=1000, topic_data=[
        P(name=topic, partition_data=[P.PartitionProduceData(index=partition, records=records)])])


def fetch(topic: str, offset: int = 0, *, partition: int = 0, max_wait_ms: int = 0, min_bytes: int = 0,
          max_bytes: int = 1 << 20, partition_max_bytes: int = 1 << 20, session_id: int = 0,
          session_epoch: int = -1, isolation_level: int = 0) -> Any:
    F = FetchRequest.FetchTopic
    return FetchRequest(replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=min_bytes, max_bytes=max_bytes,
                        isolation_level=isolation_level, session_id=session_id, session_epoch=session_epoch,
                        topics=[F(topic=topic, partitions=[F.FetchPartition(
                            partition=partition, current_leader_epoch=-1, fetch_offset=offset, last_fetched_epoch=-1,
                            log_start_offset=-1, partition_max_bytes=partition_max_bytes)])],
                        forgotten_topics_data=[], rack_id="")


def list_offsets(topic: str, timestamp: int, partition: int = 0) -> Any:
    T = ListOffsetsRequest.ListOffsetsTopic
    return ListOffsetsRequest(replica_id=-1, isolation_level=0, timeout_ms=1000, topics=[
        T(name=topic, partitions=[T.ListOffsetsPartition(partition_index=partition, current_leader_epoch=-1,
                                                         timestamp=timestamp, max_num_offsets=1)])])


def metadata(*topics: str, version: int = 12, auto_create: bool = False) -> Any:
    T = MetadataRequest.MetadataRequestTopic
    return MetadataRequest(topics=[T(name=t, topic_id=None) for t in topics], allow_auto_topic_creation=auto_create,
                           include_cluster_authorized_operations=False, include_topic_authorized_operations=False)


def create_topics(name: str, partitions: int = 1, replication: int = 1, configs: dict[str, str] | None = None,
                  validate_only: bool = False) -> Any:
    T = CreateTopicsRequest.CreatableTopic
    return CreateTopicsRequest(timeout_ms=1000, validate_only=validate_only, topics=[T(
        name=name, num_partitions=partitions, replication_factor=replication, assignments=[],
        configs=[T.CreatableTopicConfig(name=k, value=v) for k, v in (configs or {}).items()])])


def delete_topics(name: str, version: int) -> Any:
    if version >= 6:
        return DeleteTopicsRequest(timeout_ms=1000, topics=[DeleteTopicsRequest.DeleteTopicState(name=name, topic_id=None)])
    return DeleteTopicsRequest(timeout_ms=1000, topic_names=[name])


def _alter(request_class: Any, topic: str) -> Any:
    resource = request_class.AlterConfigsResource
    config = resource.AlterableConfig
    op = {"config_operation": 0} if request_class is IncrementalAlterConfigsRequest else {}
    return request_class(validate_only=False, resources=[resource(resource_type=2, resource_name=topic, configs=[
        config(name="retention.ms", value="60000", **op)])])


ADMIN_SAMPLES: dict[int, Any] = {
    codec.DELETE_RECORDS: lambda topic: DeleteRecordsRequest(timeout_ms=1000, topics=[
        DeleteRecordsRequest.DeleteRecordsTopic(name=topic, partitions=[
            DeleteRecordsRequest.DeleteRecordsTopic.DeleteRecordsPartition(partition_index=0, offset=0)])]),
    codec.DESCRIBE_CONFIGS: lambda topic: DescribeConfigsRequest(include_synonyms=True, include_documentation=True,
        resources=[DescribeConfigsRequest.DescribeConfigsResource(resource_type=2, resource_name=topic,
                                                                  configuration_keys=None)]),
    codec.ALTER_CONFIGS: lambda topic: _alter(AlterConfigsRequest, topic),
    codec.INCREMENTAL_ALTER_CONFIGS: lambda topic: _alter(IncrementalAlterConfigsRequest, topic),
    codec.DESCRIBE_LOG_DIRS: lambda topic: DescribeLogDirsRequest(topics=None),
    codec.CREATE_PARTITIONS: lambda topic: CreatePartitionsRequest(timeout_ms=1000, validate_only=False, topics=[
        CreatePartitionsRequest.CreatePartitionsTopic(name=topic, count=2, assignments=None)]),
    codec.DESCRIBE_CLUSTER: lambda topic: DescribeClusterRequest(include_cluster_authorized_operations=True,
                                                                 endpoint_type=1, include_fenced_brokers=False),
}


def sample(api_key: int, version: int, topic: str = "t") -> Any:
    """A request of ``api_key`` valid at ``version``."""
    if api_key == codec.API_VERSIONS:
        return ApiVersionsRequest(client_software_name="tidelog-tests", client_software_version="1.0")
    if api_key == codec.METADATA:
        return metadata(topic)
    if api_key == codec.PRODUCE:
        return produce(topic, records=record_batch(b"v"))
    if api_key == codec.FETCH:
        return fetch(topic)
    if api_key == codec.LIST_OFFSETS:
        return list_offsets(topic, -2)
    if api_key == codec.CREATE_TOPICS:
        return create_topics(topic)
    if api_key == codec.DELETE_TOPICS:
        return delete_topics(topic, version)
    if api_key in ADMIN_SAMPLES:
        return ADMIN_SAMPLES[api_key](topic)
    raise ValueError(f"no sample for API key {api_key}")


def all_versions() -> list[tuple[int, int]]:
    return [(spec.api_key, v) for spec in codec.SUPPORTED_APIS.values()
            for v in range(spec.min_version, spec.max_version + 1)]
