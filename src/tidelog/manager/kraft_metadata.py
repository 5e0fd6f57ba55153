"""Kafka's KRaft metadata log, read for the topics it ends up with (ids, partition counts, overrides).

A KRaft broker keeps its topics and their configs in the metadata log ``__cluster_metadata-0``
(in ``metadata.log.dir``, by default the first of ``log.dirs``), not in its partition dirs. When
tidelog opens a data dir Kafka wrote, partition dirs its registry does not know are adopted
(:mod:`.topics`); this module tells the LogManager what Kafka knew of them, so a compacted topic
stays compacted. It reads, never writes: the files are Kafka's, a damaged tail is not repaired.

What is read, in order (Kafka's ``MetadataLoader`` replays the same way):

1. the newest snapshot ``<end offset: 20 digits>-<epoch: 10 digits>.checkpoint`` (``.part`` and
   ``.deleted`` ones are ignored): record batches, a ``SnapshotHeader`` control batch first and a
   ``SnapshotFooter`` one last, holding the state of the log below its end offset (KIP-630);
2. the log's ``.log`` segments from that end offset on (older segments may have been deleted).

Control batches (leader changes, snapshot header/footer, KRaft voters) are skipped. In the log,
a batch that does not frame (bad length or magic), fails its CRC, or runs past the end of its
file ends the reading with a warning (Kafka's recovery would truncate there); a snapshot must be
whole. A record value that does not decode raises :class:`CorruptRecordError` naming the file and
the offset. Records between a ``BeginTransactionRecord`` and its ``EndTransactionRecord`` (KIP-868)
apply at the end, are dropped at an ``AbortTransactionRecord``, and are not applied at all while
the transaction is open. Records past the quorum's high watermark (not yet committed, on a
follower of a larger quorum) are not told apart: what is on disk is what is read.

Record value of a metadata record (Kafka's ``AbstractApiMessageSerde``; the record key is null):

| field        | type    | notes                                                           |
|--------------|---------|-----------------------------------------------------------------|
| frameVersion | uvarint | 1 (0 was the KRaft preview of 2.8, refused as Kafka does)        |
| apiKey       | uvarint | the record type, Kafka's ``MetadataRecordType``                  |
| version      | uvarint | the record's schema version                                      |
| message      | ...     | the record in the flexible-versions encoding (below)             |

Flexible-versions encoding of the fields read: ``int8``/``int32`` big-endian; ``uuid`` 16 bytes
(shown as Kafka's 22-character base64 ``Uuid``); ``string`` uvarint N+1 then N UTF-8 bytes, 0 =
null (nullable strings only). Tagged fields come last in every version, and the fields read here
lead their record in every version, so each record is read as far as needed and the rest ignored:

| apiKey | record            | fields read, in order                                                   |
|--------|-------------------|-------------------------------------------------------------------------|
| 2      | TopicRecord       | Name string, TopicId uuid                                               |
| 3      | PartitionRecord   | PartitionId int32, TopicId uuid                                         |
| 4      | ConfigRecord      | ResourceType int8 (2 = TOPIC), ResourceName string, Name string, Value nullable string (null: the override is deleted) |
| 9      | RemoveTopicRecord | TopicId uuid (its topic-level configs go with it)                       |
| 23/24/25 | Begin/End/AbortTransactionRecord | none                                               |

Any other apiKey is skipped. Cost: each file is read whole, once (metadata segments are small:
Kafka snapshots every ``metadata.log.max.record.bytes.between.snapshots``, 20 MiB by default).
"""

from __future__ import annotations

import logging
import re
import struct
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from pathlib import Path
from types import MappingProxyType

from tidelog.errors import CorruptRecordError, InvalidLogFileNameError, InvalidRecordError, StorageError
from tidelog.manager.internal_topics import CONSUMER_OFFSETS, SHARE_GROUP_STATE, TRANSACTION_STATE
from tidelog.records import RECORD_ERRORS, RecordBatch, iter_batches
from tidelog.records.fields import FieldReader
from tidelog.storage import files
from tidelog.storage.metadata import uuid_to_topic_id

log = logging.getLogger(__name__)

METADATA_PARTITION_DIR = "__cluster_metadata-0"
SNAPSHOT_SUFFIX = ".checkpoint"
_SNAPSHOT_NAME = re.compile(r"^(?P<offset>\d{20})-(?P<epoch>\d{10})" + re.escape(SNAPSHOT_SUFFIX) + "$")
FRAME_VERSION = 1
TOPIC_RESOURCE_TYPE = 2  # Kafka's ConfigResource.Type.TOPIC

#: The configs Kafka 4.x gives its internal topics when it creates them (GroupCoordinator,
#: TransactionStateManager, ShareCoordinatorService, with the default segment sizes): what tidelog
#: adopts them with when Kafka's metadata log is not there to say.
INTERNAL_TOPIC_CONFIGS: Mapping[str, Mapping[str, str]] = MappingProxyType({
    CONSUMER_OFFSETS: MappingProxyType({"cleanup.policy": "compact", "segment.bytes": "104857600"}),
    TRANSACTION_STATE: MappingProxyType({"cleanup.policy": "compact", "segment.bytes": "104857600"}),
    SHARE_GROUP_STATE: MappingProxyType({"cleanup.policy": "delete", "retention.ms": "-1",
                                         "segment.bytes": "104857600"}),
})

_UUID_SIZE = 16


class MetadataRecordType(IntEnum):
    """The apiKeys read (Kafka's ``MetadataRecordType``); others are skipped."""

    TOPIC_RECORD = 2
    PARTITION_RECORD = 3
    CONFIG_RECORD = 4
    REMOVE_TOPIC_RECORD = 9
    BEGIN_TRANSACTION_RECORD = 23
    END_TRANSACTION_RECORD = 24
    ABORT_TRANSACTION_RECORD = 25


# --- what comes out --------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class KraftTopic:
    """One topic as the metadata log leaves it: ``partitions`` is one past the highest
    PartitionRecord id (0 when none was read), ``configs`` its topic-level overrides."""

    name: str
    topic_id: str
    partitions: int
    configs: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))


@dataclass(frozen=True, slots=True)
class TornTail:
    """Where reading the log stopped early, and why (the rest of the log is ignored)."""

    path: Path
    position: int
    reason: str


@dataclass(frozen=True, slots=True)
class MetadataImage:
    """The topics of a metadata log. ``end_offset``: the offset after the last record read (the
    snapshot's end offset when the log added nothing); ``snapshot``: the snapshot it started from;
    ``removed_topic_ids``: topics deleted in the records read (a snapshot forgets earlier ones)."""

    topics: Mapping[str, KraftTopic]
    end_offset: int
    snapshot: Path | None = None
    torn_tail: TornTail | None = None
    removed_topic_ids: frozenset[str] = frozenset()


# --- where it is -----------------------------------------------------------------------------

def find_metadata_log(log_dirs: Sequence[Path], metadata_log_dir: Path | None = None) -> Path | None:
    """The ``__cluster_metadata-0`` dir Kafka would use: in ``metadata_log_dir`` when given (Kafka's
    ``metadata.log.dir``), else in the first of ``log_dirs`` that has one; None when there is none."""
    candidates = [metadata_log_dir] if metadata_log_dir is not None else list(log_dirs)
    for parent in candidates:
        path = Path(parent) / METADATA_PARTITION_DIR
        if path.is_dir():
            return path
    return None


def newest_snapshot(metadata_dir: Path) -> tuple[Path, int] | None:
    """The snapshot with the highest (end offset, epoch), and its end offset; None when none."""
    found = []
    for path in _listing(metadata_dir):
        match = _SNAPSHOT_NAME.match(path.name)
        if match:
            found.append((int(match["offset"]), int(match["epoch"]), path))
    if not found:
        return None
    offset, _, path = max(found)
    return path, offset


# --- reading ---------------------------------------------------------------------------------

def read_metadata_log(metadata_dir: Path) -> MetadataImage:
    """Replay the newest snapshot, then the log segments after it (see the module doc).

    Raises :class:`CorruptRecordError` for a record value that does not decode, a damaged
    snapshot, or a log that starts past the snapshot (records missing); :class:`StorageError`
    when a file cannot be read. Reads every file once; writes nothing."""
    replay = _Replay()
    snapshot = newest_snapshot(metadata_dir)
    start = 0
    if snapshot is not None:
        path, start = snapshot
        _replay_snapshot(path, replay)
    torn, end = _replay_segments(metadata_dir, start, replay)
    return MetadataImage(replay.topics(), end, snapshot[0] if snapshot else None, torn, frozenset(replay.removed))


def _replay_snapshot(path: Path, replay: _Replay) -> None:
    try:
        for position, batch in _batches(_read(path)):
            if not batch.is_control:
                for offset, value in _values(batch, path, position):
                    replay.apply(decode_metadata_record(value, path, offset))
    except _TornTail as torn:
        raise CorruptRecordError(f"snapshot is damaged: {torn.reason}", path=path, position=torn.position) from torn


def _replay_segments(metadata_dir: Path, start: int, replay: _Replay) -> tuple[TornTail | None, int]:
    """Apply the log's records from offset ``start``; returns where it stopped early (if it did)
    and the offset after the last record read."""
    expected = start
    for path in _segments(metadata_dir):
        try:
            for position, batch in _batches(_read(path)):
                expected = _replay_batch(batch, path, position, expected, replay)
        except _TornTail as torn:
            log.warning("%s: Kafka's metadata log is read up to byte %d only: %s", path, torn.position, torn.reason)
            return TornTail(path, torn.position, torn.reason), expected
    replay.end_of_log()
    return None, expected


def _replay_batch(batch: RecordBatch, path: Path, position: int, expected: int, replay: _Replay) -> int:
    if batch.last_offset < expected:
        return expected
    if batch.base_offset > expected:
        raise CorruptRecordError(f"the metadata log has no record at offset {expected} (the next batch starts at "
                                 f"{batch.base_offset}), and no snapshot covers it", path=path, offset=expected)
    if not batch.is_control:
        for offset, value in _values(batch, path, position):
            if offset >= expected:
                replay.apply(decode_metadata_record(value, path, offset))
    return batch.last_offset + 1


class _TornTail(Exception):
    """The bytes from ``position`` on are not whole, valid batches."""

    def __init__(self, position: int, reason: str) -> None:
        super().__init__(reason)
        self.position = position
        self.reason = reason


def _batches(data: bytes) -> Iterator[tuple[int, RecordBatch]]:
    """The v2 batches of a file, CRC-checked; :class:`_TornTail` where they stop being that."""
    position = 0
    try:
        for position, batch in iter_batches(data):
            if not isinstance(batch, RecordBatch):
                raise _TornTail(position, "a batch older than the v2 format, which KRaft never writes")
            if not batch.is_valid():
                raise _TornTail(position, f"the batch at offset {batch.base_offset} fails its size or CRC check")
            yield position, batch
            position += batch.size_in_bytes
    except CorruptRecordError as e:
        raise _TornTail(e.context.get("position", position), e.message) from e
    if position != len(data):
        raise _TornTail(position, "the last batch runs past the end of the file")


def _values(batch: RecordBatch, path: Path, position: int) -> Iterator[tuple[int, bytes]]:
    """``(offset, value)`` of each record of a CRC-checked batch; a records area that does not
    decode is a damaged batch, a null value a record that does not decode."""
    try:
        rows = list(batch.record_tuples())
    except RECORD_ERRORS as e:
        raise _TornTail(position, f"the batch at offset {batch.base_offset} does not decode: {e}") from e
    for offset, _, _, value, _ in rows:
        if value is None:
            raise CorruptRecordError("metadata record has a null value", path=path, position=position, offset=offset)
        yield offset, value


def _segments(metadata_dir: Path) -> list[Path]:
    logs = [p for p in _listing(metadata_dir) if p.name.endswith(files.LOG_SUFFIX)]
    try:
        return sorted(logs, key=lambda p: files.offset_from_file_name(p.name))
    except InvalidLogFileNameError as e:
        raise CorruptRecordError(f"not a segment file name: {e}", path=metadata_dir) from e


def _listing(metadata_dir: Path) -> list[Path]:
    try:
        return sorted(p for p in metadata_dir.iterdir() if p.is_file())
    except OSError as e:
        raise StorageError(f"cannot list Kafka's metadata log dir: {e.strerror}", path=metadata_dir) from e


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as e:
        raise StorageError(f"cannot read Kafka's metadata log: {e.strerror}", path=path) from e


# --- records ---------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class TopicRecord:
    name: str
    topic_id: str


@dataclass(frozen=True, slots=True)
class PartitionRecord:
    partition_id: int
    topic_id: str


@dataclass(frozen=True, slots=True)
class ConfigRecord:
    resource_type: int
    resource_name: str
    name: str
    value: str | None


@dataclass(frozen=True, slots=True)
class RemoveTopicRecord:
    topic_id: str


@dataclass(frozen=True, slots=True)
class TransactionRecord:
    """Begin, End or Abort (KIP-868 metadata transactions)."""

    kind: MetadataRecordType


MetadataRecord = TopicRecord | PartitionRecord | ConfigRecord | RemoveTopicRecord | TransactionRecord


def decode_metadata_record(value: bytes, path: Path, offset: int) -> MetadataRecord | None:
    """One framed record value (module doc); None for a record type not read here.
    :class:`CorruptRecordError` (``path``, ``offset``) when it does not decode."""
    reader = FieldReader(value, flexible=True)
    api_key = None
    try:
        frame = reader.uvarint()
        if frame != FRAME_VERSION:
            raise ValueError(f"unknown frame version {frame} (only {FRAME_VERSION} is supported)")
        api_key = reader.uvarint()
        reader.uvarint()  # the schema version: the fields read lead every version
        return _decode_message(api_key, reader)
    except (ValueError, IndexError, struct.error, CorruptRecordError, InvalidRecordError) as e:
        reason = e.message if isinstance(e, (CorruptRecordError, InvalidRecordError)) else str(e)
        raise CorruptRecordError(f"metadata record does not decode: {reason}", path=path, offset=offset,
                                 api_key=api_key) from e


def _decode_message(api_key: int, r: FieldReader) -> MetadataRecord | None:
    match api_key:
        case MetadataRecordType.TOPIC_RECORD:
            return TopicRecord(r.required_string(), _uuid(r))
        case MetadataRecordType.PARTITION_RECORD:
            return PartitionRecord(r.int32(), _uuid(r))
        case MetadataRecordType.CONFIG_RECORD:
            return ConfigRecord(r.int8(), r.required_string(), r.required_string(), r.string())
        case MetadataRecordType.REMOVE_TOPIC_RECORD:
            return RemoveTopicRecord(_uuid(r))
        case (MetadataRecordType.BEGIN_TRANSACTION_RECORD | MetadataRecordType.END_TRANSACTION_RECORD
              | MetadataRecordType.ABORT_TRANSACTION_RECORD):
            return TransactionRecord(MetadataRecordType(api_key))
    return None


def _uuid(r: FieldReader) -> str:
    return uuid_to_topic_id(uuid.UUID(bytes=bytes(r.take(_UUID_SIZE))))


# --- replay ----------------------------------------------------------------------------------

@dataclass(slots=True)
class _TopicState:
    name: str
    partitions: set[int] = field(default_factory=set)


class _Replay:
    """The topic part of Kafka's ``MetadataDelta``: topics by id, topic configs by name."""

    def __init__(self) -> None:
        self._topics: dict[str, _TopicState] = {}
        self._configs: dict[str, dict[str, str]] = {}
        self._transaction: list[MetadataRecord] | None = None
        self.removed: set[str] = set()

    def apply(self, record: MetadataRecord | None) -> None:
        if isinstance(record, TransactionRecord):
            self._transact(record.kind)
        elif record is not None and self._transaction is not None:
            self._transaction.append(record)
        elif record is not None:
            self._apply(record)

    def _transact(self, kind: MetadataRecordType) -> None:
        pending, self._transaction = self._transaction, None
        if kind is MetadataRecordType.BEGIN_TRANSACTION_RECORD:
            self._transaction = []
        elif kind is MetadataRecordType.END_TRANSACTION_RECORD:
            for record in pending or ():
                self._apply(record)

    def end_of_log(self) -> None:
        if self._transaction:
            log.warning("Kafka's metadata log ends inside a metadata transaction: its %d records are not applied",
                        len(self._transaction))

    def _apply(self, record: MetadataRecord) -> None:
        match record:
            case TopicRecord(name, topic_id):
                self._topics[topic_id] = _TopicState(name)
            case PartitionRecord(partition_id, topic_id) if topic_id in self._topics:
                self._topics[topic_id].partitions.add(partition_id)
            case ConfigRecord(resource_type, topic, name, value) if resource_type == TOPIC_RESOURCE_TYPE:
                overrides = self._configs.setdefault(topic, {})
                if value is None:
                    overrides.pop(name, None)
                else:
                    overrides[name] = value
            case RemoveTopicRecord(topic_id) if topic_id in self._topics:
                self._configs.pop(self._topics.pop(topic_id).name, None)
                self.removed.add(topic_id)

    def topics(self) -> Mapping[str, KraftTopic]:
        found = {
            state.name: KraftTopic(state.name, topic_id, max(state.partitions, default=-1) + 1,
                                   MappingProxyType(dict(self._configs.get(state.name, {}))))
            for topic_id, state in self._topics.items()
        }
        return MappingProxyType(dict(sorted(found.items())))
