"""Producer-state snapshot files, ``<20-digit offset>.snapshot`` (Kafka's ``ProducerSnapshot``
message, version 1; kafka-storage.md §1.11).

The file is named after the producer-state *map end offset*: the state it holds is the state
after every batch below that offset. Layout, big-endian, no padding::

    offset  size  field
    0       2     version                int16, 1 (the only version Kafka has)
    2       4     crc                    uint32 CRC-32C of bytes [6, end)
    6       4     entry count            int32
    10      46*n  entries, each:
                    producerId             int64
                    epoch                  int16
                    lastSequence           int32  (-1: no data batch at this epoch)
                    lastOffset             int64  (-1: no data batch at this epoch)
                    offsetDelta            int32  lastOffset - first offset of that batch
                    timestamp              int64  max timestamp of the producer's last batch
                    coordinatorEpoch       int32  (-1: no transaction marker seen)
                    currentTxnFirstOffset  int64  (-1: no open transaction)

Only each producer's *last* batch is kept in a snapshot (Kafka's rule): after a load from a
snapshot, a retry of that batch is still recognised as a duplicate; batches appended after the
snapshot are replayed from the log and fill the five-batch window again.

A file whose version is not 1, whose length is not 10 + 46 * count, or whose CRC does not
match raises :class:`CorruptSnapshotError` (Kafka's ``CorruptSnapshotException``): the caller
deletes it and falls back to an older snapshot or to replaying the log.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path

from crc32c import crc32c

from tidelog.errors import CorruptSnapshotError, StorageError
from tidelog.storage import fileops
from tidelog.storage.atomic import read_file, write_file

SNAPSHOT_VERSION = 1
_HEADER = struct.Struct(">hIi")  # version, crc, entry count
_ENTRY = struct.Struct(">qhiqiqiq")  # producerId, epoch, lastSequence, lastOffset, offsetDelta,
#                                      timestamp, coordinatorEpoch, currentTxnFirstOffset
_CRC_START = 6  # the CRC covers everything after the version and the CRC itself


@dataclass(frozen=True, slots=True)
class SnapshotEntry:
    """One producer as a snapshot stores it (the fields of the layout table, by name)."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_offset: int
    offset_delta: int
    timestamp: int
    coordinator_epoch: int
    current_txn_first_offset: int


def encode_snapshot(entries: list[SnapshotEntry]) -> bytes:
    """The bytes of a version-1 snapshot holding ``entries`` in the given order."""
    body = bytearray(_HEADER.size + _ENTRY.size * len(entries))
    for i, e in enumerate(entries):
        _ENTRY.pack_into(body, _HEADER.size + i * _ENTRY.size, e.producer_id, e.producer_epoch, e.last_sequence,
                         e.last_offset, e.offset_delta, e.timestamp, e.coordinator_epoch, e.current_txn_first_offset)
    struct.pack_into(">i", body, _CRC_START, len(entries))
    _HEADER.pack_into(body, 0, SNAPSHOT_VERSION, crc32c(memoryview(body)[_CRC_START:]), len(entries))
    return bytes(body)


def decode_snapshot(data: bytes, path: Path | None = None) -> list[SnapshotEntry]:
    """The entries of a snapshot's bytes; :class:`CorruptSnapshotError` (with ``path``) if the
    version, length or CRC is wrong."""
    if len(data) < _HEADER.size:
        raise CorruptSnapshotError(f"snapshot of {len(data)} bytes is shorter than its header", path=path)
    version, crc, count = _HEADER.unpack_from(data)
    if version != SNAPSHOT_VERSION:
        raise CorruptSnapshotError(f"snapshot contained an unknown file version {version}", path=path)
    if count < 0 or len(data) != _HEADER.size + count * _ENTRY.size:
        raise CorruptSnapshotError(f"snapshot of {len(data)} bytes cannot hold {count} entries", path=path)
    computed = crc32c(memoryview(data)[_CRC_START:])
    if computed != crc:
        raise CorruptSnapshotError(f"snapshot is corrupt: stored crc {crc}, computed crc {computed}", path=path)
    return [SnapshotEntry(*fields) for fields in _ENTRY.iter_unpack(memoryview(data)[_HEADER.size:])]


def read_snapshot(path: Path) -> list[SnapshotEntry]:
    """Read and decode the snapshot file at ``path`` (see :func:`decode_snapshot`)."""
    return decode_snapshot(read_file(path, "producer snapshot"), path)


def write_snapshot(path: Path, entries: list[SnapshotEntry], sync: bool) -> None:
    """Write ``entries`` to ``path`` (created or replaced in place, as Kafka does: a torn file
    fails its CRC at load and is discarded), fsynced when ``sync``."""
    write_file(path, encode_snapshot(entries), sync=sync, what="producer snapshot")


def fsync_snapshot(path: Path) -> None:
    """fsync a snapshot written with ``sync=False`` (after a roll); a snapshot deleted meanwhile
    is skipped."""
    try:
        fd = fileops.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return
    try:
        fileops.fsync(fd, path)
    except OSError as e:
        raise StorageError("cannot fsync producer snapshot", path=path, operation="fsync") from e
    finally:
        os.close(fd)
