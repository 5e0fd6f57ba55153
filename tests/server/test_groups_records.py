"""``__consumer_offsets`` keys and values in Kafka's format: golden bytes worked out by hand from
Kafka's JSON schemas (and decoded by Kafka's own DumpLogSegments in test_groups_java), round
trips, older and flexible versions, corrupt input, and the group-to-partition hash."""

from __future__ import annotations

import struct

import pytest

from tidelog.errors import CorruptRecordError
from tidelog.server.groups.records import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
    decode_group_metadata_value,
    decode_key,
    decode_offset_commit_value,
    encode_group_metadata_key,
    encode_group_metadata_value,
    encode_offset_commit_key,
    encode_offset_commit_value,
    java_string_hash,
    offsets_partition_for,
)


def test_offset_commit_key_golden_bytes() -> None:
    assert encode_offset_commit_key("g", "t", 3) == bytes.fromhex("0001" "000167" "000174" "00000003")
    assert decode_key(bytes.fromhex("0001000167000174" "00000003")) == OffsetCommitKey("g", "t", 3)
    assert decode_key(bytes.fromhex("0000000167000174" "00000003")) == OffsetCommitKey("g", "t", 3)  # key v0


def test_group_metadata_key_golden_bytes() -> None:
    assert encode_group_metadata_key("grp") == bytes.fromhex("0002" "0003") + b"grp"
    assert decode_key(bytes.fromhex("00020003") + b"grp") == GroupMetadataKey("grp")


def test_keys_of_other_record_types_are_skipped() -> None:
    assert decode_key(bytes.fromhex("0003") + b"whatever") is None  # a KIP-848 consumer group record


def test_offset_commit_value_v3_golden_bytes() -> None:
    value = OffsetCommitValue(offset=5, metadata="m", commit_timestamp=1_700_000_000_000, leader_epoch=-1)
    expected = (bytes.fromhex("0003") + struct.pack(">q", 5) + bytes.fromhex("ffffffff") + bytes.fromhex("0001") + b"m"
                + struct.pack(">q", 1_700_000_000_000))
    assert encode_offset_commit_value(value) == expected
    assert decode_offset_commit_value(expected) == value


def test_group_metadata_value_v3_golden_bytes() -> None:
    member = MemberMetadata("m", None, "c", "/h", 300000, 10000, b"S", b"A")
    value = GroupMetadataValue("consumer", 2, "range", "m", 1_700_000_000_000, (member,))
    expected = (bytes.fromhex("0003") + b"\x00\x08consumer" + struct.pack(">i", 2) + b"\x00\x05range" + b"\x00\x01m"
                + struct.pack(">q", 1_700_000_000_000) + struct.pack(">i", 1)
                + b"\x00\x01m" + b"\xff\xff" + b"\x00\x01c" + b"\x00\x02/h" + struct.pack(">ii", 300000, 10000)
                + struct.pack(">i", 1) + b"S" + struct.pack(">i", 1) + b"A")
    assert encode_group_metadata_value(value) == expected
    assert decode_group_metadata_value(expected) == value


def test_empty_group_value_has_null_protocol_and_leader() -> None:
    value = GroupMetadataValue("consumer", 4, None, None, 12, ())
    encoded = encode_group_metadata_value(value)
    assert encoded[:2] == b"\x00\x03" and b"\xff\xff\xff\xff" in encoded  # two null strings in a row
    assert decode_group_metadata_value(encoded) == value


def test_older_value_versions_decode() -> None:
    v1 = bytes.fromhex("0001") + struct.pack(">q", 9) + b"\x00\x00" + struct.pack(">qq", 100, 200)
    assert decode_offset_commit_value(v1) == OffsetCommitValue(9, "", 100, -1, 200)
    v0_group = (bytes.fromhex("0000") + b"\x00\x08consumer" + struct.pack(">i", 1) + b"\x00\x05range" + b"\x00\x01m"
                + struct.pack(">i", 1) + b"\x00\x01m" + b"\x00\x01c" + b"\x00\x02/h" + struct.pack(">i", 6000)
                + struct.pack(">i", 0) + struct.pack(">i", 0))
    decoded = decode_group_metadata_value(v0_group)
    assert (decoded.current_state_timestamp, decoded.members[0].session_timeout,
            decoded.members[0].rebalance_timeout, decoded.members[0].group_instance_id) == (-1, 6000, 6000, None)


def test_flexible_value_versions_decode() -> None:
    offset_v4 = bytes.fromhex("0004") + struct.pack(">qi", 11, 3) + b"\x02m" + struct.pack(">q", 7) + b"\x00"
    assert decode_offset_commit_value(offset_v4) == OffsetCommitValue(11, "m", 7, 3)
    group_v4 = (bytes.fromhex("0004") + b"\x09consumer" + struct.pack(">i", 5) + b"\x00" + b"\x00"
                + struct.pack(">q", 1) + b"\x01" + b"\x01\x01\x00")  # no members; one tagged field (tag 1, 0 bytes)
    assert decode_group_metadata_value(group_v4) == GroupMetadataValue("consumer", 5, None, None, 1, ())


@pytest.mark.parametrize("data", [b"", b"\x00", bytes.fromhex("0003") + b"\x00", bytes.fromhex("0009") + bytes(30),
                                  bytes.fromhex("0003") + struct.pack(">q", 1) + b"\xff\xff\xff\xff" + b"\x00\x09ab"])
def test_corrupt_values_raise_corrupt_record_error(data: bytes) -> None:
    with pytest.raises(CorruptRecordError):
        decode_offset_commit_value(data)
    with pytest.raises(CorruptRecordError):
        decode_group_metadata_value(data)


@pytest.mark.parametrize("data", [b"", b"\x00\x01\x00\x05ab", b"\x00\x02\xff\xff"])
def test_corrupt_keys_raise_corrupt_record_error(data: bytes) -> None:
    with pytest.raises(CorruptRecordError):
        decode_key(data)


@pytest.mark.parametrize(("text", "java_hash"), [
    ("", 0), ("hello", 99162322), ("Aa", 2112), ("BB", 2112),
    ("polygenelubricants", -(1 << 31)),  # Integer.MIN_VALUE: Utils.abs makes it 0
    ("\U0001F600", 0xD83D * 31 + 0xDE00),  # a surrogate pair: two UTF-16 units
    ("console-consumer-1", 35782224)  # Java 17 jshell: "console-consumer-1".hashCode(),
])
def test_java_string_hash(text: str, java_hash: int) -> None:
    assert java_string_hash(text) == java_hash


def test_group_partition_is_kafkas_abs_hash_mod_partitions() -> None:
    assert offsets_partition_for("polygenelubricants", 50) == 0
    assert offsets_partition_for("hello", 50) == 99162322 % 50
    assert offsets_partition_for("console-consumer-1", 50) == 35782224 % 50
    assert java_string_hash("spark-kafka-source-0a1b") == -1258001507  # Java 17 jshell
    assert offsets_partition_for("spark-kafka-source-0a1b", 50) == 1258001507 % 50
