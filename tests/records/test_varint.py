"""Varints: Kafka's ByteUtilsTest vectors, limits, and round trips."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidelog.errors import CorruptRecordError, InvalidRecordError
from tidelog.records.varint import (
    INT32_MAX,
    INT32_MIN,
    INT64_MAX,
    INT64_MIN,
    UINT32_MAX,
    decode_unsigned_varint,
    decode_varint,
    decode_varlong,
    encode_unsigned_varint,
    encode_varint,
    encode_varlong,
    size_of_unsigned_varint,
    size_of_varint,
    size_of_varlong,
)

# ByteUtilsTest (storage reference §1.4)
VARINT_VECTORS = [
    (0, "00"), (-1, "01"), (1, "02"), (63, "7e"), (-64, "7f"), (64, "8001"), (-65, "8101"),
    (8191, "fe7f"), (8192, "808001"), (INT32_MAX, "feffffff0f"), (INT32_MIN, "ffffffff0f"),
]
UNSIGNED_VECTORS = [
    (0, "00"), (1, "01"), (63, "3f"), (64, "40"), (8191, "ff3f"), (8192, "8040"),
    (INT32_MAX, "ffffffff07"), (-1, "ffffffff0f"), (INT32_MIN, "8080808008"),
]
VARLONG_VECTORS = VARINT_VECTORS[:-2] + [
    (-8192, "ff7f"), (-8193, "818001"),
    (INT64_MAX, "feffffffffffffffff01"), (INT64_MIN, "ffffffffffffffffff01"),
]


@pytest.mark.parametrize(("value", "wire"), VARINT_VECTORS)
def test_varint_matches_kafka_vector(value: int, wire: str) -> None:
    assert encode_varint(value).hex() == wire
    assert decode_varint(bytes.fromhex(wire), 0) == (value, len(wire) // 2)
    assert size_of_varint(value) == len(wire) // 2


@pytest.mark.parametrize(("value", "wire"), VARLONG_VECTORS)
def test_varlong_matches_kafka_vector(value: int, wire: str) -> None:
    assert encode_varlong(value).hex() == wire
    assert decode_varlong(bytes.fromhex(wire), 0) == (value, len(wire) // 2)
    assert size_of_varlong(value) == len(wire) // 2


@pytest.mark.parametrize(("value", "wire"), UNSIGNED_VECTORS)
def test_unsigned_varint_matches_kafka_vector(value: int, wire: str) -> None:
    assert encode_unsigned_varint(value).hex() == wire
    assert decode_unsigned_varint(bytes.fromhex(wire), 0) == (value & UINT32_MAX, len(wire) // 2)
    assert size_of_unsigned_varint(value) == len(wire) // 2


def test_decode_varint_at_position_returns_next_position() -> None:
    buf = b"\xaa\xbb" + encode_varint(-300) + b"\xcc"
    assert decode_varint(buf, 2) == (-300, 4)


@pytest.mark.parametrize("wire", ["ffffffff80", "ffffffffff01"])
def test_decode_varint_rejects_more_than_five_bytes(wire: str) -> None:
    with pytest.raises(CorruptRecordError, match="longer than 5 bytes"):
        decode_varint(bytes.fromhex(wire), 0)


def test_decode_varlong_rejects_more_than_ten_bytes() -> None:
    with pytest.raises(CorruptRecordError, match="longer than 10 bytes"):
        decode_varlong(bytes.fromhex("ff" * 10 + "01"), 0)


@pytest.mark.parametrize("wire", ["", "80", "ff8080"])
def test_decode_varint_rejects_truncated_input(wire: str) -> None:
    with pytest.raises(CorruptRecordError, match="truncated") as err:
        decode_varint(b"\x00" + bytes.fromhex(wire), 1)
    assert err.value.position == 1


def test_decode_varint_keeps_low_32_bits_of_an_oversized_fifth_byte() -> None:
    # Kafka's reader shifts the fifth byte into an int, dropping bits beyond 32.
    assert decode_varint(bytes.fromhex("ffffffff7f"), 0) == (INT32_MIN, 5)


@pytest.mark.parametrize(
    ("encode", "value"),
    [(encode_varint, INT32_MAX + 1), (encode_varint, INT32_MIN - 1), (encode_varlong, INT64_MAX + 1),
     (encode_unsigned_varint, UINT32_MAX + 1)],
)
def test_encode_rejects_out_of_range_value(encode, value: int) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InvalidRecordError, match="does not fit"):
        encode(value)


@settings(max_examples=200)
@given(st.integers(INT32_MIN, INT32_MAX))
def test_varint_round_trips(value: int) -> None:
    wire = encode_varint(value)
    assert decode_varint(wire, 0) == (value, len(wire))
    assert size_of_varint(value) == len(wire) <= 5


@settings(max_examples=200)
@given(st.integers(INT64_MIN, INT64_MAX))
def test_varlong_round_trips(value: int) -> None:
    wire = encode_varlong(value)
    assert decode_varlong(wire, 0) == (value, len(wire))
    assert size_of_varlong(value) == len(wire) <= 10


@settings(max_examples=200)
@given(st.integers(0, UINT32_MAX))
def test_unsigned_varint_round_trips(value: int) -> None:
    wire = encode_unsigned_varint(value)
    assert decode_unsigned_varint(wire, 0) == (value, len(wire))
