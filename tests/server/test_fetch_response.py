"""The Fetch response framing of tidelog.server.fetch_response: byte-identical to kafka-python's
encoding of the same response at every served version, with the records passed through uncopied."""

from __future__ import annotations

import pytest
from kafka.protocol.consumer import FetchResponse

from tidelog.server.fetch_response import PartitionResponse, encode_fetch_response

TopicData = FetchResponse.FetchableTopicResponse
PartitionData = TopicData.PartitionData
RECORDS = b"\x07" * 300  # a stand-in: the framing never looks inside

TOPICS = [
    ("orders", [PartitionResponse(0, 0, 120, 120, 3, None, RECORDS),
                PartitionResponse(1, 1, -1, -1, -1, None, b"")]),
    ("p" * 200, [PartitionResponse(7, 0, 5, 4, 0, ((1000, 2), (1001, 3)), RECORDS[:10]),
                 PartitionResponse(8, 0, 5, 4, 0, (), b"")]),
    ("empty", []),
]


def _kafka_python(version: int, correlation_id: int, error_code: int, session_id: int,
                  topics: list[tuple[str, list[PartitionResponse]]]) -> bytes:
    body = FetchResponse(throttle_time_ms=0, error_code=error_code, session_id=session_id, responses=[
        TopicData(topic=name, partitions=[PartitionData(
            partition_index=p.partition, error_code=p.error_code, high_watermark=p.high_watermark,
            last_stable_offset=p.last_stable_offset, log_start_offset=p.log_start_offset,
            aborted_transactions=None if p.aborted is None else [
                PartitionData.AbortedTransaction(producer_id=pid, first_offset=first) for pid, first in p.aborted],
            preferred_read_replica=-1, records=p.records) for p in parts]) for name, parts in topics])
    body.API_VERSION = version
    body.with_header(correlation_id=correlation_id)
    return bytes(body.encode(header=True, framed=True))


@pytest.mark.parametrize("version", range(4, 13))
def test_framing_is_byte_identical_to_kafka_python(version: int) -> None:
    ours = encode_fetch_response(version, 42, 0, 0, TOPICS)
    assert b"".join(ours.parts) == _kafka_python(version, 42, 0, 0, TOPICS)
    assert ours.size == len(b"".join(ours.parts))


@pytest.mark.parametrize("version", [4, 7, 12])
def test_an_error_response_without_partitions_is_byte_identical(version: int) -> None:
    ours = encode_fetch_response(version, 9, 70, 0, [])
    assert b"".join(ours.parts) == _kafka_python(version, 9, 70, 0, [])


def test_records_are_passed_through_not_copied() -> None:
    records = bytes(1 << 20)
    parts = encode_fetch_response(12, 1, 0, 0, [("t", [PartitionResponse(0, 0, 1, 1, 0, None, records)])]).parts
    assert any(part is records for part in parts)


@pytest.mark.parametrize("version", [4, 12])
def test_the_size_prefix_goes_out_with_the_first_header_and_records_stay_apart(version: int) -> None:
    records = bytes(1 << 20)
    parts = encode_fetch_response(version, 1, 0, 0, [("t", [PartitionResponse(0, 0, 1, 1, 0, None, records)])]).parts
    head, *rest = parts
    assert int.from_bytes(head[:4], "big") == sum(len(p) for p in parts) - 4 and len(head) > 4  # one write
    assert rest[0] is records and len(rest) == (2 if version >= 12 else 1)  # v12: the tagged fields after
