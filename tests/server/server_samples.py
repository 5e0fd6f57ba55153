"""Sample requests of every API and version the server advertises, built with kafka-python."""

from __future__ import annotations

import time
from typing import Any

from dataclasses import dataclass

from kafka.protocol.admin import (
    AlterConfigsRequest,
    CreatePartitionsRequest,
    CreateTopicsRequest,
    DeleteGroupsRequest,
    DeleteRecordsRequest,
    DeleteTopicsRequest,
    DescribeClusterRequest,
    DescribeConfigsRequest,
    DescribeGroupsRequest,
    DescribeLogDirsRequest,
    DescribeProducersRequest,
    DescribeTransactionsRequest,
    IncrementalAlterConfigsRequest,
    ListGroupsRequest,
    ListTransactionsRequest,
)
from kafka.protocol.consumer import (
    FetchRequest,
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    ListOffsetsRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
    SyncGroupRequest,
)
from kafka.protocol.metadata import ApiVersionsRequest, FindCoordinatorRequest, MetadataRequest
from kafka.protocol.producer import (
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    EndTxnRequest,
    InitProducerIdRequest,
    ProduceRequest,
    TxnOffsetCommitRequest,
    WriteTxnMarkersRequest,
)
from kafka.protocol.sasl import SaslAuthenticateRequest, SaslHandshakeRequest
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


@dataclass(frozen=True)
class GroupMember:
    """Who the group samples speak for: a member of ``group`` in ``generation`` (or, with
    generation -1 and no member id, a client outside the group)."""

    group: str = "g"
    member_id: str = "m-1"
    generation: int = 1


GROUP_APIS = frozenset({codec.FIND_COORDINATOR, codec.JOIN_GROUP, codec.SYNC_GROUP, codec.HEARTBEAT,
                        codec.LEAVE_GROUP, codec.OFFSET_COMMIT, codec.OFFSET_FETCH, codec.DESCRIBE_GROUPS,
                        codec.LIST_GROUPS, codec.DELETE_GROUPS})
PROTOCOL_TYPE, PROTOCOL = "consumer", "range"


def join_group(group: str = "g", member_id: str = "", session_timeout_ms: int = 10000,
               instance_id: str | None = None, protocols: tuple[tuple[str, bytes], ...] = ((PROTOCOL, b"sub"),)) -> Any:
    P = JoinGroupRequest.JoinGroupRequestProtocol
    return JoinGroupRequest(group_id=group, session_timeout_ms=session_timeout_ms, rebalance_timeout_ms=10000,
                            member_id=member_id, group_instance_id=instance_id, protocol_type=PROTOCOL_TYPE,
                            protocols=[P(name=n, metadata=m) for n, m in protocols], reason=None)


def sync_group(member: GroupMember, assignments: dict[str, bytes] | None = None) -> Any:
    A = SyncGroupRequest.SyncGroupRequestAssignment
    return SyncGroupRequest(group_id=member.group, generation_id=member.generation, member_id=member.member_id,
                            group_instance_id=None, protocol_type=PROTOCOL_TYPE, protocol_name=PROTOCOL,
                            assignments=[A(member_id=m, assignment=a) for m, a in (assignments or {}).items()])


def offset_commit(member: GroupMember, topic: str, offsets: dict[int, int], metadata: str | None = "") -> Any:
    T = OffsetCommitRequest.OffsetCommitRequestTopic
    return OffsetCommitRequest(group_id=member.group, generation_id_or_member_epoch=member.generation,
                               member_id=member.member_id, group_instance_id=None, retention_time_ms=-1, topics=[
        T(name=topic, partitions=[T.OffsetCommitRequestPartition(partition_index=p, committed_offset=o,
                                                                 committed_leader_epoch=-1,
                                                                 committed_metadata=metadata)
                                  for p, o in offsets.items()])])


def offset_fetch(group: str, topic: str | None, partitions: list[int], version: int) -> Any:
    """Offsets of ``topic``'s ``partitions`` (every committed one when ``topic`` is None; v2+)."""
    if version >= 8:
        G = OffsetFetchRequest.OffsetFetchRequestGroup
        topics = None if topic is None else [G.OffsetFetchRequestTopics(name=topic, partition_indexes=partitions)]
        return OffsetFetchRequest(groups=[G(group_id=group, member_id=None, member_epoch=-1, topics=topics)],
                                  require_stable=False)
    T = OffsetFetchRequest.OffsetFetchRequestTopic
    topics = None if topic is None else [T(name=topic, partition_indexes=partitions)]
    return OffsetFetchRequest(group_id=group, topics=topics, require_stable=False)


def leave_group(member: GroupMember, version: int) -> Any:
    if version >= 3:
        return LeaveGroupRequest(group_id=member.group, members=[LeaveGroupRequest.MemberIdentity(
            member_id=member.member_id, group_instance_id=None, reason="done")])
    return LeaveGroupRequest(group_id=member.group, member_id=member.member_id)


def find_coordinator(key: str, version: int, key_type: int = 0) -> Any:
    if version >= 4:
        return FindCoordinatorRequest(key_type=key_type, coordinator_keys=[key])
    return FindCoordinatorRequest(key=key, key_type=key_type)


GROUP_SAMPLES: dict[int, Any] = {
    codec.FIND_COORDINATOR: lambda m, topic, v: find_coordinator(m.group, v),
    codec.JOIN_GROUP: lambda m, topic, v: join_group(m.group, m.member_id),
    codec.SYNC_GROUP: lambda m, topic, v: sync_group(m, {m.member_id: b"assignment"}),
    codec.HEARTBEAT: lambda m, topic, v: HeartbeatRequest(group_id=m.group, generation_id=m.generation,
                                                          member_id=m.member_id, group_instance_id=None),
    codec.LEAVE_GROUP: lambda m, topic, v: leave_group(m, v),
    codec.OFFSET_COMMIT: lambda m, topic, v: offset_commit(m, topic, {0: 5}, "meta"),
    codec.OFFSET_FETCH: lambda m, topic, v: offset_fetch(m.group, topic, [0], v),
    codec.DESCRIBE_GROUPS: lambda m, topic, v: DescribeGroupsRequest(groups=[m.group], include_authorized_operations=True),
    codec.LIST_GROUPS: lambda m, topic, v: ListGroupsRequest(states_filter=[], types_filter=[]),
    codec.DELETE_GROUPS: lambda m, topic, v: DeleteGroupsRequest(groups_names=[m.group]),
}


# the transaction coordinator's APIs: their samples speak for a producer of TXN_ID (its producer id
# and epoch from InitProducerId; EndTxn after AddPartitionsToTxn of the topic's partition 0)
TXN_ID = "sample-tx"
TXN_APIS = frozenset({codec.ADD_PARTITIONS_TO_TXN, codec.ADD_OFFSETS_TO_TXN, codec.END_TXN, codec.TXN_OFFSET_COMMIT,
                      codec.WRITE_TXN_MARKERS, codec.DESCRIBE_PRODUCERS, codec.DESCRIBE_TRANSACTIONS,
                      codec.LIST_TRANSACTIONS})


def add_partitions_to_txn(topic: str, producer: tuple[int, int]) -> Any:
    A = AddPartitionsToTxnRequest
    return A(v3_and_below_transactional_id=TXN_ID, v3_and_below_producer_id=producer[0],
             v3_and_below_producer_epoch=producer[1],
             v3_and_below_topics=[A.AddPartitionsToTxnTopic(name=topic, partitions=[0])])


def txn_sample(api_key: int, topic: str, producer: tuple[int, int]) -> Any:
    if api_key == codec.ADD_PARTITIONS_TO_TXN:
        return add_partitions_to_txn(topic, producer)
    if api_key == codec.ADD_OFFSETS_TO_TXN:
        return AddOffsetsToTxnRequest(transactional_id=TXN_ID, producer_id=producer[0], producer_epoch=producer[1],
                                      group_id="g")
    if api_key == codec.END_TXN:
        return EndTxnRequest(transactional_id=TXN_ID, producer_id=producer[0], producer_epoch=producer[1],
                             committed=True)
    return txn_admin_sample(api_key, topic, producer)


def txn_admin_sample(api_key: int, topic: str, producer: tuple[int, int]) -> Any:
    """TxnOffsetCommit (after AddOffsetsToTxn of group ``g``) and the transaction admin APIs."""
    if api_key == codec.TXN_OFFSET_COMMIT:
        T = TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic
        return TxnOffsetCommitRequest(transactional_id=TXN_ID, group_id="g", producer_id=producer[0],
                                      producer_epoch=producer[1], generation_id=-1, member_id="", group_instance_id=None,
                                      topics=[T(name=topic, partitions=[T.TxnOffsetCommitRequestPartition(
                                          partition_index=0, committed_offset=1, committed_leader_epoch=-1,
                                          committed_metadata="")])])
    if api_key == codec.WRITE_TXN_MARKERS:
        M = WriteTxnMarkersRequest.WritableTxnMarker
        return WriteTxnMarkersRequest(markers=[M(producer_id=producer[0], producer_epoch=producer[1],
                                                 transaction_result=False, coordinator_epoch=0, topics=[
                                                     M.WritableTxnMarkerTopic(name=topic, partition_indexes=[0])])])
    if api_key == codec.DESCRIBE_PRODUCERS:
        T = DescribeProducersRequest.TopicRequest
        return DescribeProducersRequest(topics=[T(name=topic, partition_indexes=[0])])
    if api_key == codec.DESCRIBE_TRANSACTIONS:
        return DescribeTransactionsRequest(transactional_ids=[TXN_ID])
    return ListTransactionsRequest(state_filters=["Empty"], producer_id_filters=[], duration_filter=-1,
                                   transactional_id_pattern="sample-.*")


def sample(api_key: int, version: int, topic: str = "t", member: GroupMember = GroupMember(),
           producer: tuple[int, int] = (0, 0)) -> Any:
    """A request of ``api_key`` valid at ``version`` (group APIs speak for ``member``, transaction
    APIs for ``producer``, the producer id and epoch of :data:`TXN_ID`)."""
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
    if api_key in GROUP_SAMPLES:
        return GROUP_SAMPLES[api_key](member, topic, version)
    if api_key == codec.SASL_HANDSHAKE:
        return SaslHandshakeRequest(mechanism="PLAIN")
    if api_key == codec.SASL_AUTHENTICATE:
        return SaslAuthenticateRequest(auth_bytes=b"\0alice\0alice-secret")
    if api_key == codec.INIT_PRODUCER_ID:
        return InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60000)
    if api_key in TXN_APIS:
        return txn_sample(api_key, topic, producer)
    raise ValueError(f"no sample for API key {api_key}")


def all_versions() -> list[tuple[int, int]]:
    return [(spec.api_key, v) for spec in codec.SUPPORTED_APIS.values()
            for v in range(spec.min_version, spec.max_version + 1)]
