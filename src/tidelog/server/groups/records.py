"""The key/value records of ``__consumer_offsets``, in Kafka's own format (Kafka's
``group-coordinator/src/main/resources/common/message/*Key.json`` / ``*Value.json``).

Every key and value starts with an int16 version. The key's version says which record it is
(Kafka's ``CoordinatorRecordType``: 0 and 1 an offset commit, 2 a group's metadata; higher ones are
KIP-848/share/streams records, which a classic coordinator skips). Strings are an int16 length and
UTF-8 bytes (-1: null), bytes an int32 length; arrays an int32 count. A tombstone (value null)
deletes its key: the cleaner drops it after ``delete.retention.ms``.

OffsetCommitKey (versions 0 and 1; Kafka writes 1)::

    int16  version          1
    string group
    string topic
    int32  partition

GroupMetadataKey (version 2)::

    int16  version          2
    string group

OffsetCommitValue (Kafka 4.x writes version 3; versions 0-4 are read, 4 being flexible)::

    int16  version
    int64  offset
    int32  leaderEpoch      v3+ (-1: none)
    string metadata
    int64  commitTimestamp
    int64  expireTimestamp  v1 only

GroupMetadataValue (Kafka 4.x writes version 3; versions 0-4 are read)::

    int16  version
    string protocolType
    int32  generation
    string protocol                 nullable
    string leader                   nullable
    int64  currentStateTimestamp    v2+ (-1: none)
    int32  member count, then per member:
        string memberId
        string groupInstanceId      v3+, nullable
        string clientId
        string clientHost
        int32  rebalanceTimeout     v1+
        int32  sessionTimeout
        bytes  subscription
        bytes  assignment

In flexible versions (4+) strings are compact (unsigned varint length + 1), arrays compact, and
every struct ends with tagged fields (skipped when read).

A group's records all go to one partition of ``__consumer_offsets``: ``abs(groupId.hashCode()) %
partitions``, Java's String hash (:func:`offsets_partition_for`).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from tidelog.errors import CorruptRecordError, InvalidRecordError
from tidelog.manager.internal_topics import CONSUMER_OFFSETS
from tidelog.records.fields import FieldReader

OFFSETS_TOPIC = CONSUMER_OFFSETS  # the name from the one list of internal topics
OFFSET_COMMIT_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2
OFFSET_COMMIT_VALUE_VERSION = 3
GROUP_METADATA_VALUE_VERSION = 3
_FLEXIBLE = 4

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_DECODE_ERRORS = (struct.error, UnicodeDecodeError, IndexError, InvalidRecordError)


# --- values ------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class OffsetCommitValue:
    """A committed offset (``leader_epoch`` -1: none; ``expire_timestamp`` -1 unless a v1 record set it)."""

    offset: int
    metadata: str
    commit_timestamp: int
    leader_epoch: int = -1
    expire_timestamp: int = -1


@dataclass(frozen=True, slots=True)
class MemberMetadata:
    """One member as GroupMetadataValue stores it (its subscription for the group's protocol)."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout: int
    session_timeout: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupMetadataValue:
    """A classic group at the end of a rebalance (or emptied: generation kept, no members)."""

    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int
    members: tuple[MemberMetadata, ...] = ()


@dataclass(frozen=True, slots=True)
class OffsetCommitKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupMetadataKey:
    group: str


RecordKey = OffsetCommitKey | GroupMetadataKey


# --- partitioning ------------------------------------------------------------------------------

def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode``: ``s[0]*31^(n-1) + ... + s[n-1]`` over UTF-16 code units, in int32."""
    h = 0
    units = text.encode("utf-16-be")
    for i in range(0, len(units), 2):
        h = (31 * h + ((units[i] << 8) | units[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def offsets_partition_for(group_id: str, partitions: int) -> int:
    """Kafka's ``Utils.abs(groupId.hashCode()) % partitions`` (``Utils.abs(MIN_VALUE)`` is 0)."""
    h = java_string_hash(group_id)
    return (0 if h == -(1 << 31) else abs(h)) % partitions


# --- encoding (the versions Kafka 4.x writes) --------------------------------------------------

def _string(text: str | None) -> bytes:
    if text is None:
        return _I16.pack(-1)
    raw = text.encode()
    return _I16.pack(len(raw)) + raw


def _bytes(data: bytes) -> bytes:
    return _I32.pack(len(data)) + data


def encode_offset_commit_key(group: str, topic: str, partition: int) -> bytes:
    return _I16.pack(OFFSET_COMMIT_KEY_VERSION) + _string(group) + _string(topic) + _I32.pack(partition)


def encode_group_metadata_key(group: str) -> bytes:
    return _I16.pack(GROUP_METADATA_KEY_VERSION) + _string(group)


def encode_offset_commit_value(value: OffsetCommitValue) -> bytes:
    """Version 3 (Kafka writes version 1 only for a commit with an explicit expire timestamp,
    which no request version tidelog serves can ask for)."""
    return (_I16.pack(OFFSET_COMMIT_VALUE_VERSION) + _I64.pack(value.offset) + _I32.pack(value.leader_epoch)
            + _string(value.metadata) + _I64.pack(value.commit_timestamp))


def encode_group_metadata_value(value: GroupMetadataValue) -> bytes:
    parts = [_I16.pack(GROUP_METADATA_VALUE_VERSION), _string(value.protocol_type), _I32.pack(value.generation),
             _string(value.protocol), _string(value.leader), _I64.pack(value.current_state_timestamp),
             _I32.pack(len(value.members))]
    for m in value.members:
        parts += [_string(m.member_id), _string(m.group_instance_id), _string(m.client_id), _string(m.client_host),
                  _I32.pack(m.rebalance_timeout), _I32.pack(m.session_timeout), _bytes(m.subscription),
                  _bytes(m.assignment)]
    return b"".join(parts)


# --- decoding ----------------------------------------------------------------------------------

def decode_key(data: bytes) -> RecordKey | None:
    """The key of a ``__consumer_offsets`` record, or None for a record type a classic coordinator
    does not read. :class:`CorruptRecordError` when the bytes do not parse."""
    try:
        reader = FieldReader(data)
        version = reader.int16()
        if version in (0, 1):
            return OffsetCommitKey(reader.required_string(), reader.required_string(), reader.int32())
        if version == GROUP_METADATA_KEY_VERSION:
            return GroupMetadataKey(reader.required_string())
        return None
    except _DECODE_ERRORS as e:
        raise CorruptRecordError(f"cannot decode a __consumer_offsets key: {e}") from e


def decode_offset_commit_value(data: bytes) -> OffsetCommitValue:
    """OffsetCommitValue v0-v4; :class:`CorruptRecordError` for another version or bad bytes."""
    try:
        reader = FieldReader(data)
        version = reader.int16()
        if not 0 <= version <= _FLEXIBLE:
            raise CorruptRecordError(f"unknown OffsetCommitValue version {version}")
        reader.flexible = version >= _FLEXIBLE
        offset = reader.int64()
        epoch = reader.int32() if version >= 3 else -1
        metadata = reader.string() or ""
        commit_timestamp = reader.int64()
        expire = reader.int64() if version == 1 else -1
        reader.tagged_fields()
        return OffsetCommitValue(offset, metadata, commit_timestamp, epoch, expire)
    except _DECODE_ERRORS as e:
        raise CorruptRecordError(f"cannot decode an OffsetCommitValue: {e}") from e


def decode_group_metadata_value(data: bytes) -> GroupMetadataValue:
    """GroupMetadataValue v0-v4; :class:`CorruptRecordError` for another version or bad bytes."""
    try:
        reader = FieldReader(data)
        version = reader.int16()
        if not 0 <= version <= _FLEXIBLE:
            raise CorruptRecordError(f"unknown GroupMetadataValue version {version}")
        reader.flexible = version >= _FLEXIBLE
        protocol_type = reader.string() or ""
        generation = reader.int32()
        protocol, leader = reader.string(), reader.string()
        timestamp = reader.int64() if version >= 2 else -1
        members = tuple(_member(reader, version) for _ in range(max(0, reader.count())))
        reader.tagged_fields()
        return GroupMetadataValue(protocol_type, generation, protocol, leader, timestamp, members)
    except _DECODE_ERRORS as e:
        raise CorruptRecordError(f"cannot decode a GroupMetadataValue: {e}") from e


def _member(reader: FieldReader, version: int) -> MemberMetadata:
    member_id = reader.required_string()
    instance_id = reader.string() if version >= 3 else None
    client_id, client_host = reader.required_string(), reader.required_string()
    session_first = version < 1
    rebalance_timeout = -1 if session_first else reader.int32()
    session_timeout = reader.int32()
    if session_first:
        rebalance_timeout = session_timeout
    member = MemberMetadata(member_id, instance_id, client_id, client_host, rebalance_timeout, session_timeout,
                            reader.bytes_(), reader.bytes_())
    reader.tagged_fields()
    return member
