"""The codec, per API and version advertised: requests decode to what kafka-python encoded, and
every version is served end to end (request decoded, handled, response read back by kafka-python)."""

from __future__ import annotations

import io
import struct

import pytest
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse

import server_samples as samples
from server_helpers import Broker
from tidelog.server import codec
from tidelog.server.codec import decode_request, encode_response
from tidelog.server.errors import MalformedRequestError, UnsupportedRequestError

VERSIONS = samples.all_versions()


def _frame(request: object, version: int, correlation_id: int = 7) -> bytes:
    request.with_header(correlation_id=correlation_id, client_id="me")  # type: ignore[attr-defined]
    request.API_VERSION = version  # type: ignore[attr-defined]
    return bytes(request.encode(header=True))  # type: ignore[attr-defined]


def test_advertised_apis_are_exactly_the_ones_served() -> None:
    assert {k: (s.min_version, s.max_version) for k, s in codec.SUPPORTED_APIS.items()} == {
        0: (3, 12), 1: (4, 12), 2: (1, 10), 3: (0, 13), 18: (0, 4), 19: (2, 7), 20: (1, 6), 21: (0, 2), 32: (1, 4),
        33: (0, 2), 35: (1, 4), 37: (0, 3), 44: (0, 1), 60: (0, 2)}


@pytest.mark.parametrize(("api_key", "version"), VERSIONS)
def test_request_decodes_to_what_kafka_python_encoded(api_key: int, version: int) -> None:
    request = samples.sample(api_key, version)
    decoded = decode_request(_frame(request, version))
    assert (decoded.api_key, decoded.api_version, decoded.correlation_id, decoded.client_id) == (api_key, version, 7, "me")
    reencoded = _frame(decoded.body, version)
    assert reencoded == _frame(request, version)


@pytest.mark.parametrize(("api_key", "version"), VERSIONS)
def test_every_version_is_served_and_its_response_decodes(broker: Broker, api_key: int, version: int) -> None:
    broker.manager.create_topic("t", 1)
    if api_key == codec.CREATE_TOPICS:
        broker.manager.delete_topic("t")
    spec = codec.SUPPORTED_APIS[api_key]
    client = broker.connect()
    response = client.call(samples.sample(api_key, version), spec.response, version)
    assert _error_codes(response) == {0}, response
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
