"""The codec, per API and version advertised: requests decode to what kafka-python encoded, and
every version is served end to end (request decoded, handled, response read back by kafka-python)."""

from __future__ import annotations

import io
import struct

from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.protocol.consumer import JoinGroupResponse, OffsetCommitResponse, SyncGroupResponse
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse
from kafka.protocol.producer import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
)

import server_samples as samples
from server_helpers import Broker, RawClient
from test_hot_codecs import assert_same_fields, kafka_python_body
from tidelog.server import codec
from tidelog.server.codec import decode_request, encode_response
from tidelog.server.errors import MalformedRequestError, UnsupportedRequestError
from tidelog.topic_partition import TopicPartition

VERSIONS = samples.all_versions()


def _frame(request: object, version: int, correlation_id: int = 7) -> bytes:
    request.with_header(correlation_id=correlation_id, client_id="me")  # type: ignore[attr-defined]
    request.API_VERSION = version  # type: ignore[attr-defined]
    return bytes(request.encode(header=True))  # type: ignore[attr-defined]


def test_advertised_apis_are_exactly_the_ones_served() -> None:
    assert {k: (s.min_version, s.max_version) for k, s in codec.SUPPORTED_APIS.items()} == {
        0: (3, 12), 1: (4, 12), 2: (1, 10), 3: (0, 13), 18: (0, 4), 19: (2, 7), 20: (1, 6), 21: (0, 2), 32: (1, 4),
        33: (0, 2), 35: (1, 4), 37: (0, 3), 44: (0, 1), 60: (0, 2),
        8: (2, 9), 9: (1, 9), 10: (0, 6), 11: (2, 9), 12: (0, 4), 13: (0, 5), 14: (0, 5), 15: (0, 6), 16: (0, 5),
        42: (0, 2),
        17: (0, 1), 36: (0, 2), 22: (0, 5), 24: (0, 3), 25: (0, 3), 26: (0, 4),
        28: (0, 4), 27: (1, 1), 61: (0, 0), 65: (0, 0), 66: (0, 2)}


@pytest.mark.parametrize(("api_key", "version"), VERSIONS)
def test_request_decodes_to_what_kafka_python_encoded(api_key: int, version: int) -> None:
    request = samples.sample(api_key, version)
    decoded = decode_request(_frame(request, version))
    assert (decoded.api_key, decoded.api_version, decoded.correlation_id, decoded.client_id) == (api_key, version, 7, "me")
    if api_key in (codec.PRODUCE, codec.FETCH):  # purpose-built types (tidelog.server.wire): compared field by field
        assert_same_fields(decoded.body, kafka_python_body(api_key, version, _frame(request, version)))
        return
    reencoded = _frame(decoded.body, version)
    assert reencoded == _frame(request, version)


def _group_member(client: RawClient, api_key: int) -> samples.GroupMember:
    """The group the sample of ``api_key`` needs: for DeleteGroups an empty group with a
    committed offset, else a Stable group whose only member (the leader) is returned."""
    if api_key == codec.DELETE_GROUPS:
        outsider = samples.GroupMember("g", "", -1)
        client.call(samples.offset_commit(outsider, "t", {0: 1}), OffsetCommitResponse, 9)
        return outsider
    first = client.call(samples.join_group("g"), JoinGroupResponse, 9)
    assert first.error_code == 79  # MEMBER_ID_REQUIRED
    joined = client.call(samples.join_group("g", first.member_id), JoinGroupResponse, 9)
    member = samples.GroupMember("g", joined.member_id, joined.generation_id)
    assert client.call(samples.sync_group(member, {member.member_id: b"a"}), SyncGroupResponse, 5).error_code == 0
    return member


def _txn_producer(client: RawClient, api_key: int) -> tuple[int, int]:
    """The producer id and epoch of samples.TXN_ID, its transaction begun for EndTxn."""
    init = client.call(InitProducerIdRequest(transactional_id=samples.TXN_ID, transaction_timeout_ms=60000),
                       InitProducerIdResponse, 4)
    assert init.error_code == 0
    producer = (init.producer_id, init.producer_epoch)
    if api_key == codec.END_TXN:
        added = client.call(samples.add_partitions_to_txn("t", producer), AddPartitionsToTxnResponse, 3)
        assert added.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == 0
    if api_key == codec.TXN_OFFSET_COMMIT:
        added = client.call(AddOffsetsToTxnRequest(transactional_id=samples.TXN_ID, producer_id=producer[0],
                                                   producer_epoch=producer[1], group_id="g"), AddOffsetsToTxnResponse, 1)
        assert added.error_code == 0
    return producer


@pytest.mark.parametrize(("api_key", "version"), VERSIONS)
def test_every_version_is_served_and_its_response_decodes(make_broker: Callable[..., Broker], api_key: int,
                                                          version: int) -> None:
    broker = make_broker(**{"group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "3"})
    broker.manager.create_topic("t", 1)
    if api_key == codec.CREATE_TOPICS:
        broker.manager.delete_topic("t")
    spec = codec.SUPPORTED_APIS[api_key]
    client = broker.connect()
    member = _group_member(client, api_key) if api_key in samples.GROUP_APIS else samples.GroupMember()
    producer = _txn_producer(client, api_key) if api_key in samples.TXN_APIS else (0, 0)
    response = client.call(samples.sample(api_key, version, member=member, producer=producer), spec.response, version)
    # SASL requests on a listener without SASL answer ILLEGAL_SASL_STATE (34), as Kafka's KafkaApis
    sasl = api_key in (codec.SASL_HANDSHAKE, codec.SASL_AUTHENTICATE)
    assert _error_codes(response) == ({34} if sasl else {0}), response
    if api_key == codec.PRODUCE:
        assert response.responses[0].partition_responses[0].base_offset == 0
    if api_key == codec.METADATA:
        assert [t.name for t in response.topics] == ["t"] and response.brokers[0].port == broker.port
    if api_key == codec.API_VERSIONS:
        assert {k.api_key for k in response.api_keys} == set(codec.SUPPORTED_APIS)
    if api_key == codec.DELETE_TOPICS:
        assert not broker.manager.has_topic("t")
    if api_key == codec.CREATE_TOPICS:
        assert broker.manager.partitions("t") == [0]
    if api_key == codec.CREATE_PARTITIONS:
        assert broker.manager.partitions("t") == [0, 1]
    if api_key in (codec.ALTER_CONFIGS, codec.INCREMENTAL_ALTER_CONFIGS):
        assert broker.manager.topic_overrides("t") == {"retention.ms": "60000"}
    if api_key == codec.DESCRIBE_CONFIGS:
        assert len(response.results[0].configs) > 20
    if api_key == codec.FIND_COORDINATOR:
        found = response.coordinators[0] if version >= 4 else response
        assert (found.node_id, found.host, found.port) == (1, "127.0.0.1", broker.port)
    if api_key == codec.JOIN_GROUP:
        assert (response.member_id, response.generation_id, response.leader) == (member.member_id, 2, member.member_id)
    if api_key == codec.SYNC_GROUP:
        assert response.assignment == b"a"
    if api_key == codec.DESCRIBE_GROUPS:
        assert (response.groups[0].group_state, [m.member_id for m in response.groups[0].members]) == (
            "Stable", [member.member_id])
    if api_key == codec.LIST_GROUPS:
        assert [g.group_id for g in response.groups] == ["g"]
    if api_key == codec.OFFSET_FETCH:
        topics = response.groups[0].topics if version >= 8 else response.topics
        assert [(t.name, [p.committed_offset for p in t.partitions]) for t in topics] == [("t", [-1])]
    client.close()


def _error_codes(message: object) -> set[int]:
    """Every error_code field anywhere in a response."""
    found: set[int] = set()
    fields = message.to_dict() if hasattr(message, "to_dict") else message  # type: ignore[attr-defined]

    def walk(value: object) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                if k == "error_code":
                    found.add(v)
                walk(v)
        elif isinstance(value, list):
            for v in value:
                walk(v)

    walk(fields)
    return found or {0}


def test_unknown_api_key_and_unsupported_version_are_refused() -> None:
    frame = _frame(samples.produce("t", records=b""), 9)
    with pytest.raises(UnsupportedRequestError):
        decode_request(struct.pack(">h", 99) + frame[2:])
    with pytest.raises(UnsupportedRequestError):
        decode_request(frame[:2] + struct.pack(">h", 2) + frame[4:])


def test_truncated_or_short_frames_are_malformed() -> None:
    frame = _frame(samples.fetch("t"), 12)
    with pytest.raises(MalformedRequestError):
        decode_request(frame[:5])
    with pytest.raises(MalformedRequestError):
        decode_request(frame[: len(frame) - 10])


def test_api_versions_of_an_unknown_version_is_answered_in_v0_with_unsupported_version() -> None:
    frame = _frame(ApiVersionsRequest(client_software_name="x", client_software_version="1"), 3)
    request = decode_request(frame[:2] + struct.pack(">h", 9) + frame[4:])
    assert request.body is None
    from tidelog.server.api_versions import api_versions_response
    body, version = api_versions_response(request)
    encoded = encode_response(request, body, version)
    response = ApiVersionsResponse[0].decode(io.BytesIO(encoded[4:]), header=True)
    assert response.error_code == 35 and version == 0
    assert {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}[0] == (3, 12)


# --- strict lengths: a field running past the frame is malformed, never cut short ---------------

@settings(max_examples=400, deadline=None)
@given(api=st.sampled_from(VERSIONS), data=st.data())
def test_every_truncation_of_a_valid_request_is_malformed(api: tuple[int, int], data: st.DataObject) -> None:
    frame = _frame(samples.sample(*api, topic="fresh-topic"), api[1])
    cut = data.draw(st.integers(0, len(frame) - 1), label="cut")
    with pytest.raises(MalformedRequestError):
        decode_request(frame[:cut])


def test_a_string_running_past_the_frame_is_malformed_not_cut_short() -> None:
    frame = _frame(samples.metadata("abcdefghijklmnop"), 1)  # v0-v3: the topics are the last field
    name_at = frame.index(b"abcdefghijklmnop")
    with pytest.raises(MalformedRequestError, match="past the end"):
        decode_request(frame[:name_at + 3])  # length 16 declared, "abc" left


def test_an_unknown_tagged_field_running_past_the_frame_is_malformed() -> None:
    frame = _frame(samples.metadata("t"), 12)
    assert frame.endswith(b"\x00")  # the body's empty tagged fields
    tagged = bytes([1, 99, 20]) + b"xyz"  # one field, tag 99, 20 bytes declared, 3 present
    with pytest.raises(MalformedRequestError, match="20 bytes declared"):
        decode_request(frame[:-1] + tagged)
    assert decode_request(frame[:-1] + bytes([1, 99, 3]) + b"xyz").body.topics[0].name == "t"
    header_tags = frame.index(b"me") + 2  # request header v2: client id, then its tagged fields
    with pytest.raises(MalformedRequestError, match="40 bytes declared"):
        decode_request(frame[:header_tags] + bytes([1, 7, 40]) + b"xyz")


def test_every_flexible_decoder_reads_tagged_fields_strictly_without_touching_kafka_pythons() -> None:
    """The strict tagged-field stream replaces the ``_BytesIO`` global of kafka-python's generated
    decoders: if a kafka-python release renames or drops it, this fails instead of strictness
    silently disappearing. kafka-python's own decoders, which clients in this process share, keep
    their plain stream."""
    flexible = [(spec.request, version) for spec in codec.SUPPORTED_APIS.values()
                if spec.api_key not in (codec.PRODUCE, codec.FETCH)  # decoded by tidelog.server.wire
                for version in range(spec.min_version, spec.max_version + 1) if spec.request.flexible_version_q(version)]
    assert len(flexible) > 50
    decode_request(_frame(samples.metadata("t"), 12))
    for request_class, version in flexible:
        shared = request_class._struct.compiled_decode_from(version, compact=True, tagged=True,
                                                            data_class=request_class)
        assert shared.__globals__.get("_BytesIO") is io.BytesIO, f"{request_class.__name__} v{version}"
        assert codec.body_decoder(request_class, version).__globals__["_BytesIO"] is codec.StrictBytesIO


def test_bytes_after_a_complete_body_are_ignored_as_kafka_does() -> None:
    for version in (4, 12):
        frame = _frame(samples.metadata("t"), version)
        assert decode_request(frame + b"\x01\x02\x03\x04\x05").body.topics[0].name == "t"


@pytest.mark.parametrize("api_key", sorted(codec.SUPPORTED_APIS))
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_a_truncated_request_closes_the_connection_and_creates_nothing(broker: Broker, api_key: int,
                                                                       data: st.DataObject) -> None:
    if "t" not in broker.manager.topics():
        broker.manager.create_topic("t", 1)
    spec = codec.SUPPORTED_APIS[api_key]
    version = data.draw(st.integers(spec.min_version, spec.max_version), label="version")
    frame = _frame(samples.sample(api_key, version, topic="fresh-topic"), version)
    cut = data.draw(st.integers(8, len(frame) - 1), label="cut")
    client = broker.connect()
    client.send_bytes(struct.pack(">i", cut) + frame[:cut])
    assert client.closed_by_server()
    assert broker.manager.topics() == ["t"]
    assert broker.manager.log(TopicPartition("t", 0)).log_end_offset == 0
