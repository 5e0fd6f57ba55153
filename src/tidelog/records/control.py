"""Control records: the key every control record carries, and transaction markers.

A control batch (attribute bit 5; transaction markers also set bit 4) holds one record, compression
none, the producer id/epoch of the transaction and baseSequence -1.

Control record key, 4 bytes:

| bytes | field         | notes                                                             |
|-------|---------------|-------------------------------------------------------------------|
| 0-1   | int16 version | 0; a negative version means corruption; newer versions still parse |
| 2-3   | int16 type    | 0 ABORT, 1 COMMIT, 2-6 KRaft-only, anything else UNKNOWN (ignored) |

End-transaction marker value (ABORT / COMMIT), 6 bytes:

| bytes | field                  | notes                           |
|-------|------------------------|---------------------------------|
| 0-1   | int16 version          | 0; negative means corruption    |
| 2-5   | int32 coordinatorEpoch | epoch of the transaction coordinator that wrote the marker |

Readers accept longer keys and values than these (newer versions may append fields).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass
from enum import IntEnum
from typing import Protocol

from tidelog.errors import CorruptRecordError
from tidelog.records.builder import BatchBuilder

_KEY = struct.Struct(">hh")
_MARKER = struct.Struct(">hi")
CONTROL_KEY_VERSION = 0
END_TXN_MARKER_VERSION = 0


class ControlRecordType(IntEnum):
    """Type id in a control record's key (Kafka ``ControlRecordType``)."""

    UNKNOWN = -1
    ABORT = 0
    COMMIT = 1
    LEADER_CHANGE = 2
    SNAPSHOT_HEADER = 3
    SNAPSHOT_FOOTER = 4
    KRAFT_VERSION = 5
    KRAFT_VOTERS = 6


def control_key(control_type: ControlRecordType, version: int = CONTROL_KEY_VERSION) -> bytes:
    """The 4-byte key of a control record."""
    return _KEY.pack(version, control_type)


def control_record_type(key: bytes | bytearray | memoryview | None) -> ControlRecordType:
    """The type named by a control record's key; UNKNOWN for ids this version does not know.

    CorruptRecordError when the key is null, shorter than 4 bytes, or has a negative version.
    """
    if key is None or len(key) < _KEY.size:
        raise CorruptRecordError(
            f"control record key needs at least {_KEY.size} bytes, found "
            f"{'null' if key is None else len(key)}")
    version, type_id = _KEY.unpack_from(key)
    if version < 0:
        raise CorruptRecordError(f"Invalid version found for control record: {version}")
    try:
        return ControlRecordType(type_id)
    except ValueError:
        return ControlRecordType.UNKNOWN


class _Record(Protocol):
    @property
    def key(self) -> bytes | bytearray | memoryview | None: ...


class _Batch(Protocol):
    def records(self) -> Iterable[_Record]: ...


def control_batch_type(batch: _Batch) -> ControlRecordType:
    """The type of a control batch: its first record's, the only one Kafka reads (its
    ``CompletedFetch`` and producer state do likewise); UNKNOWN for a batch left empty by the
    cleaner. Decodes the first record only; CorruptRecordError as :func:`control_record_type`."""
    first = next(iter(batch.records()), None)
    return ControlRecordType.UNKNOWN if first is None else control_record_type(first.key)


@dataclass(frozen=True, slots=True)
class EndTransactionMarker:
    """The value of an ABORT or COMMIT control record (the type itself lives in the key)."""

    version: int
    coordinator_epoch: int

    def encode(self) -> bytes:
        return _MARKER.pack(self.version, self.coordinator_epoch)

    @classmethod
    def decode(cls, value: bytes | bytearray | memoryview | None) -> EndTransactionMarker:
        """CorruptRecordError for a null or short value or a negative version."""
        if value is None or len(value) < _MARKER.size:
            raise CorruptRecordError(
                f"end transaction marker needs at least {_MARKER.size} bytes, found "
                f"{'null' if value is None else len(value)}")
        version, coordinator_epoch = _MARKER.unpack_from(value)
        if version < 0:
            raise CorruptRecordError(f"Invalid version found for end transaction marker: {version}")
        return cls(version, coordinator_epoch)


def build_end_txn_marker_batch(
    *,
    commit: bool,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    base_offset: int = 0,
    timestamp: int,
    partition_leader_epoch: int = -1,
) -> bytes:
    """A transactional control batch holding one COMMIT or ABORT marker (CreateTime ``timestamp``)."""
    builder = BatchBuilder(
        base_offset=base_offset,
        partition_leader_epoch=partition_leader_epoch,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        is_transactional=True,
        is_control=True,
    )
    control_type = ControlRecordType.COMMIT if commit else ControlRecordType.ABORT
    marker = EndTransactionMarker(END_TXN_MARKER_VERSION, coordinator_epoch)
    builder.append(base_offset, timestamp, control_key(control_type), marker.encode())
    return builder.build()
