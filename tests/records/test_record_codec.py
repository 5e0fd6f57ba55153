"""One v2 record: exact bytes, reader checks, and round trips."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from records_strategies import headers, keys, values

from tidelog.errors import CorruptRecordError, InvalidRecordError
from tidelog.records import Record
from tidelog.records.record import (
    decode_record,
    decode_records,
    encode_record,
    make_record,
    record_tuple,
)
from tidelog.records.varint import encode_varint


def test_encode_record_matches_worked_example() -> None:
    assert encode_record(0, 0, b"k", b"v").hex() == "10000000026b027600"


def test_encode_record_writes_tombstone_with_value_length_minus_one() -> None:
    assert encode_record(0, 0, b"k", None).hex() == "0e000000026b0100"


def test_decode_record_reads_worked_example() -> None:
    record, end = decode_record(bytes.fromhex("10000000026b027600ff"), 0, base_offset=7, base_timestamp=100)
    assert record == Record(7, 100, b"k", b"v", ())
    assert end == 9


def test_decode_record_applies_negative_timestamp_delta() -> None:
    record, _ = decode_record(encode_record(3, -40, None, b"x"), 0, base_offset=10, base_timestamp=100)
    assert (record.offset, record.timestamp, record.key) == (13, 60, None)


def test_record_headers_round_trip_with_null_value() -> None:
    wire = encode_record(0, 0, b"k", b"v", [("trace", b"\x01"), ("empty", None), ("", b"")])
    record, _ = decode_record(wire, 0)
    assert record.headers == (("trace", b"\x01"), ("empty", None), ("", b""))


def test_header_key_that_is_not_utf8_round_trips_byte_for_byte() -> None:
    body = bytes.fromhex("00 00 00 01 01") + encode_varint(1) + encode_varint(2) + b"\xff\xfe" + encode_varint(-1)
    wire = encode_varint(len(body)) + body
    record, _ = decode_record(wire, 0)
    assert encode_record(0, 0, None, None, record.headers) == wire


def test_encode_record_rejects_null_header_key() -> None:
    with pytest.raises(InvalidRecordError, match="header key must be a str"):
        encode_record(0, 0, b"k", b"v", [(None, b"v")])  # type: ignore[list-item]


def _record_with_tail(tail: bytes) -> bytes:
    body = bytes.fromhex("00 00 00 02 6b 02 76") + tail
    return encode_varint(len(body)) + body


def test_decode_rejects_negative_header_key_length() -> None:
    wire = _record_with_tail(encode_varint(1) + encode_varint(-1) + encode_varint(-1))
    with pytest.raises(InvalidRecordError, match="negative header key size"):
        decode_record(wire, 0)


def test_decode_rejects_negative_header_count() -> None:
    with pytest.raises(InvalidRecordError, match="invalid number of record headers -1"):
        decode_record(_record_with_tail(encode_varint(-1)), 0)


def test_decode_rejects_header_count_above_remaining_bytes() -> None:
    with pytest.raises(InvalidRecordError, match="invalid number of record headers 50"):
        decode_record(_record_with_tail(encode_varint(50) + b"\x00\x00"), 0)


def test_decode_rejects_length_shorter_than_content() -> None:
    wire = bytearray(encode_record(0, 0, b"k", b"v"))
    wire[0] = 7 << 1  # declares 7 bytes, the body has 8
    with pytest.raises(InvalidRecordError, match="expected to read 7 bytes"):
        list(decode_records(bytes(wire), 1, 0, 0, None))
    with pytest.raises(InvalidRecordError):
        decode_record(bytes(wire), 0)


def test_decode_rejects_length_past_end() -> None:
    with pytest.raises(InvalidRecordError, match="Invalid record size"):
        decode_record(encode_record(0, 0, b"k", b"v")[:-1], 0)


def test_decode_rejects_overlong_varint_inside_record() -> None:
    body = b"\x00" + b"\xff" * 11 + b"\x00" * 6
    with pytest.raises(CorruptRecordError, match="longer than 10 bytes"):
        decode_record(encode_varint(len(body)) + body, 0)


def test_decode_records_rejects_bytes_left_after_count() -> None:
    data = encode_record(0, 0, b"a", b"1") + encode_record(1, 0, b"b", b"2")
    with pytest.raises(InvalidRecordError, match="bytes remain after 1 records"):
        list(decode_records(data, 1, 0, 0, None))


def test_decode_records_rejects_premature_end() -> None:
    data = encode_record(0, 0, b"a", b"1")
    with pytest.raises(InvalidRecordError, match="premature EOF"):
        list(decode_records(data, 2, 0, 0, None))


def test_decode_records_reports_log_append_time_for_every_record() -> None:
    data = encode_record(0, 5, b"a", b"1") + encode_record(1, 9, b"b", b"2")
    assert [r.timestamp for r in decode_records(data, 2, 0, 100, 777)] == [777, 777]


def test_make_record_equals_dataclass_constructor() -> None:
    fast = make_record(1, 2, b"k", None, (("h", b"v"),))
    slow = Record(1, 2, b"k", None, (("h", b"v"),))
    assert fast == slow and hash(fast) == hash(slow) and repr(fast) == repr(slow)
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.offset = 3  # type: ignore[misc]
    assert not hasattr(fast, "__dict__")


def test_record_tuple_factory_yields_plain_tuples() -> None:
    data = encode_record(0, 0, b"a", b"1")
    assert list(decode_records(data, 1, 5, 6, None, record_tuple)) == [(5, 6, b"a", b"1", ())]


@settings(max_examples=150)
@given(
    st.integers(0, (1 << 31) - 1), st.integers(-(1 << 62), 1 << 62), keys, values, headers,
)
def test_record_round_trips(offset_delta: int, ts_delta: int, key, value, hdrs) -> None:  # type: ignore[no-untyped-def]
    wire = encode_record(offset_delta, ts_delta, key, value, hdrs)
    record, end = decode_record(wire, 0, base_offset=1000, base_timestamp=0)
    assert end == len(wire)
    assert record == Record(1000 + offset_delta, ts_delta, key, value, hdrs)
