"""Huge, negative and lying sizes and counts, against a real ``tidelog serve``: frame lengths of
2 GiB and below zero, array counts and string lengths past the frame, partition counts of 2^31-1,
byte limits and timeouts at both ends of int32. Each is refused (connection closed, or Kafka's error
code) or served within bounds; the server keeps serving, and its memory stays where it was."""

from __future__ import annotations

import struct
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kafka.protocol.admin import CreatePartitionsRequest, CreatePartitionsResponse, CreateTopicsResponse
from kafka.protocol.admin import DeleteRecordsResponse
from kafka.protocol.consumer import FetchResponse, JoinGroupResponse
from kafka.protocol.metadata import MetadataResponse
from kafka.protocol.producer import ProduceResponse

import server_samples as samples
from abuse_helpers import Served, tree
from server_helpers import RawClient
from tidelog.records.varint import encode_unsigned_varint
from tidelog.server import codec

INT32_MAX, INT32_MIN = 2**31 - 1, -(2**31)
POLICY_VIOLATION, INVALID_PARTITIONS, INVALID_REPLICATION_FACTOR, INVALID_SESSION_TIMEOUT = 44, 37, 38, 26
RSS_GROWTH_KIB = 64 << 10  # what an abuse may add to the server's resident memory


def _header(api_key: int, version: int, flexible: bool) -> bytes:
    return struct.pack(">hhih", api_key, version, 1, 4) + b"fuzz" + (b"\x00" if flexible else b"")


LYING_FRAMES: dict[str, bytes] = {  # size prefix included
    "size 2^31-1": struct.pack(">i", INT32_MAX) + b"\x00" * 64,
    "size 2 GiB (negative)": struct.pack(">I", 2**31) + b"\x00" * 64,
    "size -1": struct.pack(">i", -1),
    "metadata v4 topics count 2^31-1": _header(codec.METADATA, 4, False) + struct.pack(">i", INT32_MAX),
    "metadata v12 compact topics count 2^31": _header(codec.METADATA, 12, True) + encode_unsigned_varint(2**31),
    "produce v3 topic_data count 2^31-1": _header(codec.PRODUCE, 3, False) + struct.pack(">hhii", -1, 1, 1000,
                                                                                         INT32_MAX),
    "create_topics v2 topics count -2": _header(codec.CREATE_TOPICS, 2, False) + struct.pack(">i", -2),
    "client_id length 32767, no bytes": struct.pack(">hhih", codec.METADATA, 4, 1, 32767),
    "produce v9 records length 2^31": _header(codec.PRODUCE, 9, True) + b"\x00" + struct.pack(">hi", 1, 1000)
    + encode_unsigned_varint(2) + encode_unsigned_varint(2) + b"t" + encode_unsigned_varint(2)
    + struct.pack(">i", 0) + encode_unsigned_varint(2**31),
}


def _framed(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def _still_serving(served: Served) -> None:
    client = served.raw()
    assert client.call(samples.metadata(), MetadataResponse, 12).brokers[0].port == served.port
    client.close()


def test_lying_sizes_and_counts_close_the_connection_and_allocate_nothing(serve: Callable[..., Served]) -> None:
    served = serve()
    _still_serving(served)
    rss = served.rss_kib()
    for name, payload in LYING_FRAMES.items():
        client = served.raw()
        started = time.monotonic()
        client.send_bytes(payload if name.startswith("size") else _framed(payload))
        assert client.closed_by_server(), name
        assert time.monotonic() - started < 5, name  # refused at once, not after reading 2 GiB
        client.close()
    _still_serving(served)
    assert served.rss_kib() - rss < RSS_GROWTH_KIB


def _create(client: RawClient, name: str, partitions: int, replication: int = 1) -> Any:
    return client.call(samples.create_topics(name, partitions, replication), CreateTopicsResponse, 7).topics[0]


def _grow(client: RawClient, name: str, count: int) -> Any:
    request = CreatePartitionsRequest(timeout_ms=1000, validate_only=False, topics=[
        CreatePartitionsRequest.CreatePartitionsTopic(name=name, count=count, assignments=None)])
    return client.call(request, CreatePartitionsResponse, 3).results[0]


def test_huge_and_negative_partition_counts_are_refused_at_once(serve: Callable[..., Served],
                                                               tmp_path: Path) -> None:
    """Found here: CreateTopics with num_partitions 2^31-1 created partition dirs one after the
    other (until the disk or the inodes ran out); now POLICY_VIOLATION, as Kafka's controller."""
    served = serve()
    client = served.raw()
    before = tree(tmp_path)
    huge = _create(client, "huge", INT32_MAX)
    assert (huge.error_code, huge.error_message) == (POLICY_VIOLATION, huge.error_message)
    assert "excessively large" in huge.error_message
    assert _create(client, "negative", -5).error_code == INVALID_PARTITIONS
    assert _create(client, "replicas", 1, 32767).error_code == INVALID_REPLICATION_FACTOR
    assert _create(client, "no-replicas", 1, -3).error_code == INVALID_REPLICATION_FACTOR
    assert tree(tmp_path) == before
    assert _create(client, "t", 1).error_code == 0
    assert _grow(client, "t", INT32_MAX).error_code == POLICY_VIOLATION
    assert _grow(client, "t", -1).error_code == INVALID_PARTITIONS
    assert _grow(client, "t", 10_002).error_code == POLICY_VIOLATION  # 10,000 new partitions at most
    assert sorted(p.name for p in served.data.iterdir() if p.name.startswith("t-")) == ["t-0"]


def test_byte_limits_and_timeouts_at_the_ends_of_int32_are_served(serve: Callable[..., Served]) -> None:
    served = serve(**{"group.initial.rebalance.delay.ms": "0"})
    client = served.raw()
    assert _create(client, "t", 1).error_code == 0
    for timeout_ms in (-1, 0, INT32_MAX):
        request = samples.produce("t", records=samples.record_batch(b"v"))
        request.timeout_ms = timeout_ms
        answer = client.call(request, ProduceResponse, 9).responses[0].partition_responses[0]
        assert answer.error_code == 0, timeout_ms
    rss = served.rss_kib()
    for max_bytes, partition_max_bytes in ((INT32_MAX, INT32_MAX), (-1, -1), (0, 0), (INT32_MIN, INT32_MAX)):
        fetch = samples.fetch("t", max_wait_ms=-1, max_bytes=max_bytes, partition_max_bytes=partition_max_bytes)
        answer = client.call(fetch, FetchResponse, 12).responses[0].partitions[0]
        assert answer.error_code == 0 and answer.high_watermark == 3, (max_bytes, partition_max_bytes)
    assert served.rss_kib() - rss < RSS_GROWTH_KIB
    joined = client.call(samples.join_group("g", session_timeout_ms=INT32_MAX), JoinGroupResponse, 9)
    assert joined.error_code == INVALID_SESSION_TIMEOUT
    joined = client.call(samples.join_group("g", session_timeout_ms=INT32_MIN), JoinGroupResponse, 9)
    assert joined.error_code == INVALID_SESSION_TIMEOUT
    delete = samples.ADMIN_SAMPLES[codec.DELETE_RECORDS]("t")
    delete.topics[0].partitions[0].offset = 2**63 - 1
    assert client.call(delete, DeleteRecordsResponse, 2).topics[0].partitions[0].error_code == 1  # OFFSET_OUT_OF_RANGE
    _still_serving(served)
