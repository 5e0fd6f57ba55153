"""The purpose-built Produce and Fetch codecs (tidelog.server.wire) against kafka-python, the oracle:
at every advertised version, a random valid request encoded by kafka-python decodes to the same
field values as kafka-python's own decoder gives, and a random Produce response encodes to the
same bytes; truncated or damaged frames are refused with MalformedRequestError, never another
exception."""

from __future__ import annotations

import struct
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.protocol.consumer import FetchRequest
from kafka.protocol.producer import ProduceRequest, ProduceResponse

from tidelog.server import codec
from tidelog.server.codec import decode_request
from tidelog.server.errors import MalformedRequestError, UnsupportedRequestError
from tidelog.server.wire.produce_response import PartitionProduceResponse, encode_produce_response

PRODUCE_VERSIONS = range(codec.SUPPORTED_APIS[codec.PRODUCE].min_version, codec.SUPPORTED_APIS[codec.PRODUCE].max_version + 1)
FETCH_VERSIONS = range(codec.SUPPORTED_APIS[codec.FETCH].min_version, codec.SUPPORTED_APIS[codec.FETCH].max_version + 1)
HOT = [(codec.PRODUCE, v) for v in PRODUCE_VERSIONS] + [(codec.FETCH, v) for v in FETCH_VERSIONS]

i8, i16 = st.integers(-(1 << 7), (1 << 7) - 1), st.integers(-(1 << 15), (1 << 15) - 1)
i32, i64 = st.integers(-(1 << 31), (1 << 31) - 1), st.integers(-(1 << 63), (1 << 63) - 1)
names = st.text(max_size=12)
Topic, Partition = ProduceRequest.TopicProduceData, ProduceRequest.TopicProduceData.PartitionProduceData
FTopic, FPartition, Forgotten = FetchRequest.FetchTopic, FetchRequest.FetchTopic.FetchPartition, FetchRequest.ForgottenTopic


def produce_requests() -> st.SearchStrategy[Any]:
    partition = st.builds(Partition, index=i32, records=st.none() | st.binary(max_size=200))
    topic = st.builds(Topic, name=names, partition_data=st.lists(partition, max_size=3))
    return st.builds(ProduceRequest, transactional_id=st.none() | names, acks=i16, timeout_ms=i32,
                     topic_data=st.lists(topic, max_size=3))


def fetch_requests() -> st.SearchStrategy[Any]:
    partition = st.builds(FPartition, partition=i32, current_leader_epoch=i32, fetch_offset=i64,
                          last_fetched_epoch=i32, log_start_offset=i64, partition_max_bytes=i32)
    topic = st.builds(FTopic, topic=names, partitions=st.lists(partition, max_size=3))
    forgotten = st.builds(Forgotten, topic=names, partitions=st.lists(i32, max_size=4))
    return st.builds(FetchRequest, cluster_id=st.none() | names, replica_id=i32, max_wait_ms=i32, min_bytes=i32,
                     max_bytes=i32, isolation_level=i8, session_id=i32, session_epoch=i32,
                     topics=st.lists(topic, max_size=3), forgotten_topics_data=st.lists(forgotten, max_size=2),
                     rack_id=names)


def frame(request: Any, version: int, correlation_id: int = 7, client_id: str | None = "me") -> bytes:
    request.with_header(correlation_id=correlation_id, client_id=client_id)
    request.API_VERSION = version
    return bytes(request.encode(header=True))


def kafka_python_body(api_key: int, version: int, data: bytes) -> Any:
    """kafka-python's decoding of the body of ``data`` (a frame): the oracle."""
    spec = codec.SUPPORTED_APIS[api_key]
    pos = 8 + 2 + len("me".encode()) + (1 if spec.request.flexible_version_q(version) else 0)
    decoder = spec.request._struct.compiled_decode_from(version, compact=version >= (9 if api_key == 0 else 12),
                                                        tagged=version >= (9 if api_key == 0 else 12),
                                                        data_class=spec.request)
    body, end = decoder(memoryview(data), pos)
    assert end == len(data)
    return body


def assert_same_fields(ours: Any, theirs: Any, path: str = "body") -> None:
    """Every field of ``ours`` (NamedTuples, lists of them, values) equals kafka-python's
    attribute of the same name, recursively, with the same type for values."""
    if hasattr(ours, "_fields"):
        for name in ours._fields:
            assert_same_fields(getattr(ours, name), getattr(theirs, name), f"{path}.{name}")
    elif isinstance(ours, list):
        assert isinstance(theirs, list) and len(ours) == len(theirs), path
        for i, (a, b) in enumerate(zip(ours, theirs)):
            assert_same_fields(a, b, f"{path}[{i}]")
    else:
        assert (type(ours), ours) == (type(theirs), theirs), path


# --- decoders: same fields as kafka-python at every version ----------------------------------------

@pytest.mark.parametrize("version", PRODUCE_VERSIONS)
@settings(max_examples=60, deadline=None)
@given(request=produce_requests())
def test_produce_decodes_as_kafka_python_does(version: int, request: Any) -> None:
    data = frame(request, version)
    decoded = decode_request(data)
    assert (decoded.api_key, decoded.api_version, decoded.correlation_id, decoded.client_id) == (0, version, 7, "me")
    assert_same_fields(decoded.body, kafka_python_body(codec.PRODUCE, version, data))


@pytest.mark.parametrize("version", FETCH_VERSIONS)
@settings(max_examples=60, deadline=None)
@given(request=fetch_requests())
def test_fetch_decodes_as_kafka_python_does(version: int, request: Any) -> None:
    data = frame(request, version)
    decoded = decode_request(data)
    assert (decoded.api_key, decoded.api_version, decoded.client_id) == (1, version, "me")
    assert_same_fields(decoded.body, kafka_python_body(codec.FETCH, version, data))


def test_fields_absent_at_a_version_get_kafka_pythons_defaults() -> None:
    request = FetchRequest(max_wait_ms=5, min_bytes=1, topics=[FTopic(topic="t", partitions=[FPartition(
        partition=0, fetch_offset=9, partition_max_bytes=100)])])
    body = decode_request(frame(request, 4)).body
    assert (body.session_id, body.session_epoch, body.forgotten_topics_data, body.rack_id, body.cluster_id) == (
        0, -1, [], "", None)
    p = body.topics[0].partitions[0]
    assert (p.current_leader_epoch, p.last_fetched_epoch, p.log_start_offset) == (-1, -1, -1)


def test_a_null_client_id_decodes_as_none() -> None:
    request = FetchRequest(max_wait_ms=5, min_bytes=1, topics=[])
    assert decode_request(frame(request, 12, client_id=None)).client_id is None


# --- strictness ------------------------------------------------------------------------------------

@settings(max_examples=300, deadline=None)
@given(api=st.sampled_from(HOT), data=st.data())
def test_every_truncation_of_a_valid_frame_is_malformed(api: tuple[int, int], data: st.DataObject) -> None:
    api_key, version = api
    request = data.draw(produce_requests() if api_key == codec.PRODUCE else fetch_requests(), label="request")
    whole = frame(request, version)
    cut = data.draw(st.integers(0, len(whole) - 1), label="cut")
    with pytest.raises(MalformedRequestError, match="no header" if cut < 8 else f"Request v{version}: "):
        decode_request(whole[:cut])


@settings(max_examples=400, deadline=None)
@given(api=st.sampled_from(HOT), data=st.data())
def test_damaged_bodies_decode_or_are_malformed_never_another_error(api: tuple[int, int], data: st.DataObject) -> None:
    api_key, version = api
    request = data.draw(produce_requests() if api_key == codec.PRODUCE else fetch_requests(), label="request")
    damaged = bytearray(frame(request, version))
    for _ in range(data.draw(st.integers(1, 4), label="flips")):
        at = data.draw(st.integers(12, len(damaged) - 1), label="at")  # the body (past header and client id)
        damaged[at] = data.draw(st.integers(0, 255), label="byte")
    try:
        decode_request(bytes(damaged))
    except MalformedRequestError:
        pass


def _produce_v9(records: bytes = b"x" * 70) -> bytes:
    request = ProduceRequest(transactional_id=None, acks=1, timeout_ms=100, topic_data=[
        Topic(name="t", partition_data=[Partition(index=0, records=records)])])
    return frame(request, 9)


def test_unknown_tagged_fields_are_skipped_at_every_level() -> None:
    data = _produce_v9()
    tag = bytes([1, 42, 3]) + b"abc"  # one field: tag 42, 3 bytes
    end_partition = data.index(b"x" * 70) + 70  # then: partition tags, topic tags, request tags
    for at in (end_partition, end_partition + 1, end_partition + 2):
        patched = data[:at] + tag + data[at + 1:]
        body = decode_request(patched).body
        assert (body.topic_data[0].name, body.topic_data[0].partition_data[0].records) == ("t", b"x" * 70)


def test_fetch_skips_unknown_tags_and_reads_the_cluster_id_among_them() -> None:
    request = FetchRequest(max_wait_ms=5, min_bytes=1, rack_id="", topics=[FTopic(topic="t", partitions=[FPartition(
        partition=3, fetch_offset=9, partition_max_bytes=100)])])
    data = frame(request, 12)
    partition_end = data.index(struct.pack(">i", 100)) + 4  # then: partition tags, topic tags
    cluster = bytes([2, 1, 2]) + b"xy" + bytes([0, 4, 4]) + b"abc"  # tag 1 (unknown at v12), tag 0: "abc"
    patched = data[:partition_end] + bytes([1, 9, 1, 0]) + data[partition_end + 1:-1] + cluster
    body = decode_request(patched).body
    assert (body.topics[0].partitions[0].partition, body.topics[0].partitions[0].fetch_offset) == (3, 9)
    assert body.cluster_id == "abc"


def test_a_tagged_field_running_past_the_frame_is_malformed() -> None:
    data = _produce_v9()
    with pytest.raises(MalformedRequestError, match="tag 42: 40 bytes declared"):
        decode_request(data[:-1] + bytes([1, 42, 40]) + b"abc")


def test_bytes_after_a_complete_body_are_ignored() -> None:
    assert decode_request(_produce_v9() + b"\1\2\3").body.topic_data[0].partition_data[0].records == b"x" * 70


def test_records_running_past_the_frame_are_malformed_not_cut_short() -> None:
    data = _produce_v9()
    with pytest.raises(MalformedRequestError, match=r"records: 70 bytes declared .* 10 left"):
        decode_request(data[:data.index(b"x" * 70) + 10])


def test_a_null_topic_name_or_array_is_malformed_but_null_records_decode() -> None:
    request = ProduceRequest(transactional_id=None, acks=1, timeout_ms=100, topic_data=[
        Topic(name="t", partition_data=[Partition(index=0, records=None)])])
    data = frame(request, 3)
    assert decode_request(data).body.topic_data[0].partition_data[0].records is None
    name_at = data.index(b"\x00\x01t")
    with pytest.raises(MalformedRequestError, match=r"topic_data\[\]\.name: null"):
        decode_request(data[:name_at] + b"\xff\xff" + data[name_at + 3:])
    with pytest.raises(MalformedRequestError, match="topic_data: null array"):
        decode_request(data[:name_at - 4] + struct.pack(">i", -1) + data[name_at:])


def test_an_array_longer_than_the_frame_is_refused_before_reading_it() -> None:
    request = FetchRequest(max_wait_ms=5, min_bytes=1, topics=[])
    data = frame(request, 7)
    count_at = len(data) - 8  # topics, forgotten_topics_data: two int32 counts
    with pytest.raises(MalformedRequestError, match="2000000000 elements declared"):
        decode_request(data[:count_at] + struct.pack(">i", 2_000_000_000) + data[count_at + 4:])


def test_a_varint_longer_than_five_bytes_is_malformed() -> None:
    data = frame(FetchRequest(max_wait_ms=5, min_bytes=1, topics=[]), 12)
    topics_at = 8 + 2 + 2 + 1 + 25  # header v2, then the fixed fields (v7+: 25 bytes)
    with pytest.raises(MalformedRequestError, match="longer than 5 bytes"):
        decode_request(data[:topics_at] + b"\x80" * 5 + b"\x01" + data[topics_at + 1:])


def test_a_truncated_header_is_malformed_and_a_bad_version_unsupported() -> None:
    data = _produce_v9()
    with pytest.raises(MalformedRequestError):
        decode_request(data[:9])
    with pytest.raises(UnsupportedRequestError):
        decode_request(data[:2] + struct.pack(">h", 13) + data[4:])


# --- Produce response: byte-identical to kafka-python ------------------------------------------------

def _kafka_python_response(version: int, correlation_id: int, topics: list[tuple[str, list[PartitionProduceResponse]]],
                           throttle: int) -> bytes:
    T = ProduceResponse.TopicProduceResponse
    P = T.PartitionProduceResponse
    body = ProduceResponse(throttle_time_ms=throttle, responses=[T(name=name, partition_responses=[P(
        index=p.index, error_code=p.error_code, base_offset=p.base_offset, log_append_time_ms=p.log_append_time_ms,
        log_start_offset=p.log_start_offset, error_message=p.error_message, record_errors=[
            P.BatchIndexAndErrorMessage(batch_index=i, batch_index_error_message=m) for i, m in p.record_errors])
        for p in parts]) for name, parts in topics])
    body.API_VERSION = version
    body.with_header(correlation_id=correlation_id)
    return bytes(body.encode(header=True, framed=True))


partition_responses = st.builds(
    PartitionProduceResponse, index=i32, error_code=i16, base_offset=i64, log_append_time_ms=i64,
    log_start_offset=i64, record_errors=st.lists(st.tuples(i32, st.none() | names), max_size=3).map(tuple),
    error_message=st.none() | names)


@pytest.mark.parametrize("version", PRODUCE_VERSIONS)
@settings(max_examples=60, deadline=None)
@given(topics=st.lists(st.tuples(names, st.lists(partition_responses, max_size=3)), max_size=3),
       correlation_id=i32, throttle=i32)
def test_produce_response_is_byte_identical_to_kafka_python(version: int, topics: list[Any], correlation_id: int,
                                                            throttle: int) -> None:
    ours = encode_produce_response(version, correlation_id, topics, throttle)
    assert ours == _kafka_python_response(version, correlation_id, topics, throttle)
