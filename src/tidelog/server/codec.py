"""Kafka's wire format, through kafka-python's message classes (built from Kafka's own JSON schemas),
except the bodies of the two hot requests, Produce and Fetch, which purpose-built decoders read in
place (:mod:`tidelog.server.wire`, the only decoders of those APIs; their types keep kafka-python's
attribute names). The request header of every API is read by :func:`.wire.reader.request_header`.

A request frame (after its 4-byte size prefix)::

    int16  request_api_key
    int16  request_api_version
    int32  correlation_id
    string client_id        nullable, never compact, even in header v2
    tagged fields           header v2 only (the API version is flexible)
    body                    the request schema of (api_key, version)

A response frame: ``int32 size``, ``int32 correlation_id``, tagged fields (header v1, when the
response version is flexible; never for ApiVersions, so a client can read the error of any
version), then the body.

:data:`SUPPORTED_APIS` is what ApiVersions advertises and, with tidelog's own unadvertised APIs
(:data:`TIDELOG_APIS`, :mod:`.staged_writes`), nothing else is decoded: an unknown
key or a version outside its range raises :class:`UnsupportedRequestError` (Kafka closes the
connection then), except ApiVersions, whose unsupported versions are answered (KIP-511). Bytes
that do not parse raise :class:`MalformedRequestError`.

Decoding is strict about lengths: a string, bytes, array or tagged field whose declared length runs
past the end of the frame makes the request malformed (Kafka's readers throw a buffer underflow
there, and the broker closes the connection). The purpose-built decoders check each length against
the frame (:mod:`.wire.reader`). kafka-python's compiled decoders slice such a field
short without a word (``data[pos:pos + n]``) and carry on, so :func:`_decode_body` checks where
the decoder stopped, and :func:`body_decoder` gives the decoders' tagged-field reader a stream that
refuses a short read.
Bytes left after a complete body are ignored, as Kafka 4.3 ignores them (checked on a real broker:
a Metadata request with five trailing bytes is answered).
"""

from __future__ import annotations

import io
import struct
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

from kafka.protocol.admin import (
    AlterConfigsRequest,
    AlterConfigsResponse,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DescribeClusterRequest,
    DescribeClusterResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    DescribeLogDirsRequest,
    DescribeLogDirsResponse,
    DescribeProducersRequest,
    DescribeProducersResponse,
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
    ListGroupsRequest,
    ListGroupsResponse,
    ListTransactionsRequest,
    ListTransactionsResponse,
)
from kafka.protocol.consumer import (
    FetchRequest,
    FetchResponse,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from kafka.protocol.metadata import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    MetadataRequest,
    MetadataResponse,
)
from kafka.protocol.producer import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    EndTxnRequest,
    EndTxnResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    ProduceRequest,
    ProduceResponse,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
    WriteTxnMarkersRequest,
    WriteTxnMarkersResponse,
)
from kafka.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

from tidelog.server.errors import MalformedRequestError, UnsupportedRequestError
from tidelog.server.staged_api import MESSAGES as STAGED_MESSAGES
from tidelog.server.wire.fetch_request import decode_fetch
from tidelog.server.wire.produce_request import decode_produce
from tidelog.server.wire.reader import request_header

PRODUCE, FETCH, LIST_OFFSETS, METADATA, API_VERSIONS, CREATE_TOPICS, DELETE_TOPICS = 0, 1, 2, 3, 18, 19, 20
DELETE_RECORDS, DESCRIBE_CONFIGS, ALTER_CONFIGS, DESCRIBE_LOG_DIRS, CREATE_PARTITIONS = 21, 32, 33, 35, 37
INCREMENTAL_ALTER_CONFIGS, DESCRIBE_CLUSTER = 44, 60
OFFSET_COMMIT, OFFSET_FETCH, FIND_COORDINATOR, JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP = 8, 9, 10, 11, 12, 13, 14
DESCRIBE_GROUPS, LIST_GROUPS, DELETE_GROUPS = 15, 16, 42
SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36
INIT_PRODUCER_ID = 22
ADD_PARTITIONS_TO_TXN, ADD_OFFSETS_TO_TXN, END_TXN = 24, 25, 26
WRITE_TXN_MARKERS, TXN_OFFSET_COMMIT, DESCRIBE_PRODUCERS, DESCRIBE_TRANSACTIONS, LIST_TRANSACTIONS = 27, 28, 61, 65, 66


@dataclass(frozen=True, slots=True)
class ApiSpec:
    """One advertised API: its version range and kafka-python's request and response classes."""

    api_key: int
    min_version: int
    max_version: int
    request: Any
    response: Any


# Version ranges: Kafka 4.0's, capped where a later version needs what this server lacks
# (Produce v13 and Fetch v13+ name topics by id only; ListOffsets v11 adds -6, earliest pending
# upload, of tiered storage; DescribeLogDirs v5 reports cordoned dirs, KIP-1066; OffsetCommit v10
# and OffsetFetch v10 name topics by id only, KIP-848, Kafka 4.1; InitProducerId v6 is KIP-939's
# two-phase commit, Kafka 4.1). SaslHandshake and SaslAuthenticate
# are advertised on every listener, as Kafka does; outside a SASL exchange they answer
# ILLEGAL_SASL_STATE (tidelog.server.security.sasl).
SUPPORTED_APIS: dict[int, ApiSpec] = {spec.api_key: spec for spec in (
    ApiSpec(PRODUCE, 3, 12, ProduceRequest, ProduceResponse),
    ApiSpec(FETCH, 4, 12, FetchRequest, FetchResponse),
    ApiSpec(LIST_OFFSETS, 1, 10, ListOffsetsRequest, ListOffsetsResponse),
    ApiSpec(METADATA, 0, 13, MetadataRequest, MetadataResponse),
    ApiSpec(API_VERSIONS, 0, 4, ApiVersionsRequest, ApiVersionsResponse),
    ApiSpec(CREATE_TOPICS, 2, 7, CreateTopicsRequest, CreateTopicsResponse),
    ApiSpec(DELETE_TOPICS, 1, 6, DeleteTopicsRequest, DeleteTopicsResponse),
    ApiSpec(DELETE_RECORDS, 0, 2, DeleteRecordsRequest, DeleteRecordsResponse),
    ApiSpec(DESCRIBE_CONFIGS, 1, 4, DescribeConfigsRequest, DescribeConfigsResponse),
    ApiSpec(ALTER_CONFIGS, 0, 2, AlterConfigsRequest, AlterConfigsResponse),
    ApiSpec(DESCRIBE_LOG_DIRS, 1, 4, DescribeLogDirsRequest, DescribeLogDirsResponse),
    ApiSpec(CREATE_PARTITIONS, 0, 3, CreatePartitionsRequest, CreatePartitionsResponse),
    ApiSpec(INCREMENTAL_ALTER_CONFIGS, 0, 1, IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse),
    ApiSpec(DESCRIBE_CLUSTER, 0, 2, DescribeClusterRequest, DescribeClusterResponse),
    ApiSpec(OFFSET_COMMIT, 2, 9, OffsetCommitRequest, OffsetCommitResponse),
    ApiSpec(OFFSET_FETCH, 1, 9, OffsetFetchRequest, OffsetFetchResponse),
    ApiSpec(FIND_COORDINATOR, 0, 6, FindCoordinatorRequest, FindCoordinatorResponse),
    ApiSpec(JOIN_GROUP, 2, 9, JoinGroupRequest, JoinGroupResponse),
    ApiSpec(HEARTBEAT, 0, 4, HeartbeatRequest, HeartbeatResponse),
    ApiSpec(LEAVE_GROUP, 0, 5, LeaveGroupRequest, LeaveGroupResponse),
    ApiSpec(SYNC_GROUP, 0, 5, SyncGroupRequest, SyncGroupResponse),
    ApiSpec(DESCRIBE_GROUPS, 0, 6, DescribeGroupsRequest, DescribeGroupsResponse),
    ApiSpec(LIST_GROUPS, 0, 5, ListGroupsRequest, ListGroupsResponse),
    ApiSpec(DELETE_GROUPS, 0, 2, DeleteGroupsRequest, DeleteGroupsResponse),
    ApiSpec(SASL_HANDSHAKE, 0, 1, SaslHandshakeRequest, SaslHandshakeResponse),
    ApiSpec(SASL_AUTHENTICATE, 0, 2, SaslAuthenticateRequest, SaslAuthenticateResponse),
    ApiSpec(INIT_PRODUCER_ID, 0, 5, InitProducerIdRequest, InitProducerIdResponse),
    # transaction protocol V1 only (server.transactions): AddPartitionsToTxn v4+, AddOffsetsToTxn
    # v4 and EndTxn v5 are V2's (KIP-890), not advertised
    ApiSpec(ADD_PARTITIONS_TO_TXN, 0, 3, AddPartitionsToTxnRequest, AddPartitionsToTxnResponse),
    ApiSpec(ADD_OFFSETS_TO_TXN, 0, 3, AddOffsetsToTxnRequest, AddOffsetsToTxnResponse),
    ApiSpec(END_TXN, 0, 4, EndTxnRequest, EndTxnResponse),
    # TxnOffsetCommit v5 is V2's; WriteTxnMarkers v0 left Kafka in 4.0, v2 carries V2's
    # transaction version (server.groups.txn_apis, server.txn_admin)
    ApiSpec(TXN_OFFSET_COMMIT, 0, 4, TxnOffsetCommitRequest, TxnOffsetCommitResponse),
    ApiSpec(WRITE_TXN_MARKERS, 1, 1, WriteTxnMarkersRequest, WriteTxnMarkersResponse),
    ApiSpec(DESCRIBE_PRODUCERS, 0, 0, DescribeProducersRequest, DescribeProducersResponse),
    ApiSpec(DESCRIBE_TRANSACTIONS, 0, 0, DescribeTransactionsRequest, DescribeTransactionsResponse),
    ApiSpec(LIST_TRANSACTIONS, 0, 2, ListTransactionsRequest, ListTransactionsResponse),
)}

# tidelog's own APIs (jobs staged through the broker, server.staged_writes): decoded, never
# advertised in ApiVersions (SUPPORTED_APIS is what ApiVersions lists).
TIDELOG_APIS: dict[int, ApiSpec] = {key: ApiSpec(key, 0, 0, request, response)
                                    for key, (request, response) in STAGED_MESSAGES.items()}

_HEAD = struct.Struct(">hhi")


class Request(NamedTuple):
    """A decoded request (immutable; a NamedTuple, the cheapest to build once per request).
    ``body`` is None for an ApiVersions request of an unsupported version."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body: Any

    @property
    def spec(self) -> ApiSpec:
        return SUPPORTED_APIS.get(self.api_key) or TIDELOG_APIS[self.api_key]


def peek_header(frame: bytes | memoryview) -> tuple[int, int, int]:
    """``(api_key, api_version, correlation_id)`` of a frame; :class:`MalformedRequestError` if shorter than 8 bytes."""
    if len(frame) < _HEAD.size:
        raise MalformedRequestError(f"request of {len(frame)} bytes has no header", size=len(frame))
    return _HEAD.unpack_from(frame)


def decode_request(frame: bytes) -> Request:
    """Decode one request frame (without its size prefix).

    Raises :class:`UnsupportedRequestError` for an unknown API key or an unsupported version (but an
    ApiVersions request of any version decodes, its body None when unsupported), and
    :class:`MalformedRequestError` when the bytes do not parse.
    """
    api_key, version, correlation_id = peek_header(frame)
    spec = SUPPORTED_APIS.get(api_key) or TIDELOG_APIS.get(api_key)
    if spec is None:
        raise UnsupportedRequestError(f"unknown or unsupported API key {api_key}", api_key=api_key,
                                      correlation_id=correlation_id)
    supported = spec.min_version <= version <= spec.max_version
    if not supported and api_key != API_VERSIONS:
        raise UnsupportedRequestError(f"unsupported version {version} of API key {api_key} "
                                 f"(supported: {spec.min_version}-{spec.max_version})",
                                 api_key=api_key, api_version=version, correlation_id=correlation_id)
    flexible = supported and (api_key, version) in _FLEXIBLE
    try:
        client_id, pos = request_header(frame, flexible)[3:]
        if not supported:
            body = None
        elif api_key in _HOT_DECODERS:
            body = _HOT_DECODERS[api_key](frame, pos, version)
        else:
            body = _decode_body(spec.request, version, memoryview(frame)[pos:])
    except Exception as e:  # noqa: BLE001 - any parse failure of client bytes is a malformed request
        raise MalformedRequestError(f"cannot decode {spec.request.__name__} v{version}: {type(e).__name__}: {e}",
                               api_key=api_key, api_version=version, correlation_id=correlation_id) from e
    return _new(Request, (api_key, version, correlation_id, client_id, body))


_new = tuple.__new__  # a NamedTuple from a tuple in its field order, without its Python-level __new__
# the flexible versions (request header v2, compact encodings) of every API decoded, from its schema
_FLEXIBLE = frozenset((spec.api_key, version) for spec in (*SUPPORTED_APIS.values(), *TIDELOG_APIS.values())
                      for version in range(spec.min_version, spec.max_version + 1)
                      if spec.request.flexible_version_q(version))


# the purpose-built body decoders (tidelog.server.wire): f(frame, body position, version) -> body
_HOT_DECODERS: dict[int, Callable[[bytes, int, int], Any]] = {PRODUCE: decode_produce, FETCH: decode_fetch}


def _decode_body(request_class: Any, version: int, data: memoryview) -> Any:
    """The body of ``request_class`` at ``version`` decoded from ``data``; ValueError when a field
    runs past the end of ``data`` (the decoder's position ends beyond it: positions only grow, and
    a short field still advances by its declared length)."""
    body, end = body_decoder(request_class, version)(data, 0)
    if end > len(data):
        raise ValueError(f"a field runs {end - len(data)} bytes past the end of the {len(data)}-byte body")
    return body


class StrictBytesIO(io.BytesIO):
    """A stream whose ``read(n)`` refuses to return fewer than ``n`` bytes (kafka-python reads an
    unknown tagged field with ``read(size)`` and would keep a short value)."""

    def read(self, size: int | None = -1) -> bytes:
        data = super().read(size)
        if size is not None and size >= 0 and len(data) < size:
            raise ValueError(f"{size} bytes declared, {len(data)} left in the frame")
        return data


Decoder = Callable[[memoryview, int], tuple[Any, int]]
_DECODERS: dict[tuple[type, int], Decoder] = {}


def body_decoder(request_class: type, version: int) -> Decoder:
    """kafka-python's compiled decoder of ``request_class`` at ``version`` (``f(data, pos) -> (body,
    end)``; never Produce's or Fetch's, which :mod:`.wire` decodes), copied once with its
    tagged-field reader's stream, the ``_BytesIO`` global of the generated code, replaced by :class:`StrictBytesIO`. kafka-python's own decoder, which every
    client in this process shares, is left as it is."""
    decoder = _DECODERS.get((request_class, version))
    if decoder is None:
        flexible = request_class.flexible_version_q(version)  # type: ignore[attr-defined]
        shared = request_class._struct.compiled_decode_from(  # type: ignore[attr-defined]
            version, compact=flexible, tagged=flexible, data_class=request_class)
        decoder = shared
        if "_BytesIO" in shared.__globals__:  # tagged fields (every flexible version)
            decoder = types.FunctionType(shared.__code__, {**shared.__globals__, "_BytesIO": StrictBytesIO},
                                         shared.__name__, shared.__defaults__, shared.__closure__)
        _DECODERS[request_class, version] = decoder
    return decoder


def encode_response(request: Request, body: Any, version: int | None = None) -> bytes:
    """The framed response (size prefix, header, body) to ``request``, at the request's version
    unless ``version`` says otherwise (an unsupported ApiVersions request is answered in v0)."""
    body.API_VERSION = request.api_version if version is None else version
    body.with_header(correlation_id=request.correlation_id)
    return bytes(body.encode(header=True, framed=True))
