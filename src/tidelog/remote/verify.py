"""Offline verification of a remote tier: what ``tidelog verify --remote`` reports.

Given only the store (no broker), every partition prefix ``<topic>-<topicId>/<partition>/`` found
by one LIST of the whole store is checked:

- **metadata**: every event and snapshot object under ``metadata/`` decodes (a corrupt object, or
  one written by a newer tidelog, is an error naming its key), and the log loads as any reader
  loads it (:meth:`RemotePartitionMetadata.load`: a gap in the sequence, an event that cannot
  be applied);
- **objects** of each COPY_SEGMENT_FINISHED segment: the ``.log``, ``.index``, ``.timeindex``,
  ``.snapshot`` and ``.leader_epoch_checkpoint`` are present, the ``.txnindex`` too unless the
  metadata says ``txn_idx_empty``; the ``.log``'s size is ``segment_size_in_bytes``;
- **batches** of each finished ``.log``, streamed by ranged reads of :data:`CHUNK_BYTES` (memory
  bounded by a chunk plus the largest batch, never the object): each batch parses and passes
  its CRC-32C (the records layer's own reader and check, :func:`~tidelog.records.batch.read_batch_at`
  and ``ensure_valid``), offsets ascend within ``[start_offset, end_offset]``, nothing follows the
  last complete batch, the largest batch timestamp equals ``max_timestamp_ms`` (when any batch
  has a timestamp); a last batch ending below ``end_offset`` is a *warning* (a segment compacted
  before its copy legitimately ends early; the metadata cannot tell the cases apart);
- **indexes**: ``.index`` entries ascend within the segment's offsets and each points at the start
  of a batch that does not begin after the entry's offset; ``.timeindex`` entries do not go
  backwards, their offsets lie in the segment and their timestamps do not pass the maximum;
- **overlap**: the finished segments of a partition do not share an offset (an error naming both);
- **unowned objects** (warnings, never errors): objects of a COPY_SEGMENT_STARTED or
  DELETE_SEGMENT_STARTED segment are *unreferenced* (the next copy pass's cleanup deletes them);
  a pending deletion of a topic's remote data (:mod:`tidelog.remote.partition_delete`) is
  reported as such; any other object under a partition prefix, or outside every partition
  prefix, is an *orphan*.

Each finding names the partition, the segment id, the object key and, where one is known, the
byte position. Nothing is written. Costs: one LIST of the store, then per partition one LIST and
a GET per metadata object (twice: decoded alone, then loaded), and per finished segment the
``.log``'s bytes once plus its two indexes whole (they are small: ``segment.index.bytes``).
:func:`verify_partition` checks one partition alone, so a caller may spread partitions over
workers (Spark). Thread-safe: no shared state.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from tidelog.errors import CorruptRecordError, TidelogError
from tidelog.records.layout import OFFSET_INDEX_ENTRY, TIME_INDEX_ENTRY
from tidelog.remote.errors import RemoteMetadataError, RemoteMetadataVersionError, RemoteStorageError
from tidelog.remote.metadata import (
    METADATA_DIR,
    RemoteFileKind,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    TopicIdPartition,
    metadata_prefix,
    object_key,
)
from tidelog.remote.metadata_codec import decode_event, decode_snapshot, parse_name
from tidelog.remote.metadata_log import RemotePartitionMetadata
from tidelog.remote.partition_delete import PENDING_PREFIX
from tidelog.remote.store import CHUNK_BYTES, ObjectInfo, RemoteStore
from tidelog.storage.metadata import topic_id_to_uuid
from tidelog.storage.file_records import chunked_batches
from tidelog.topic_partition import TopicPartition

ERROR = "error"
WARNING = "warning"
_TOPIC_ID_CHARS = 22
_FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED


@dataclass(frozen=True, slots=True)
class RemoteFinding:
    """One problem (``severity`` ``error``) or note (``warning``) of a remote tier. ``kind`` names
    the check (``crc``, ``missing_object``, ``metadata_corrupt`` ...); ``partition`` is
    ``topic-partition`` ('' for an object outside every partition)."""

    severity: str
    kind: str
    partition: str
    segment_id: str | None
    key: str | None
    position: int | None
    message: str

    def __str__(self) -> str:
        where = [self.partition or "store"]
        if self.segment_id:
            where.append(f"segment {self.segment_id}")
        if self.key:
            where.append(self.key + (f" at byte {self.position}" if self.position is not None else ""))
        return f"{self.severity.upper()} [{self.kind}] {' '.join(where)}: {self.message}"

    def to_json(self) -> dict[str, object]:
        return {"severity": self.severity, "kind": self.kind, "partition": self.partition,
                "segment_id": self.segment_id, "key": self.key, "position": self.position, "message": self.message}


@dataclass(slots=True)
class RemoteVerifyReport:
    """What a verification found and how much it read."""

    uri: str
    partitions: int = 0
    segments: int = 0
    batches: int = 0
    bytes: int = 0
    findings: list[RemoteFinding] = field(default_factory=list)

    @property
    def errors(self) -> list[RemoteFinding]:
        return [f for f in self.findings if f.severity == ERROR]

    @property
    def warnings(self) -> list[RemoteFinding]:
        return [f for f in self.findings if f.severity == WARNING]

    @property
    def ok(self) -> bool:
        """No error (warnings allowed)."""
        return not self.errors

    def add(self, other: RemoteVerifyReport) -> None:
        """Fold ``other`` (one partition's report) into this one."""
        self.partitions += other.partitions
        self.segments += other.segments
        self.batches += other.batches
        self.bytes += other.bytes
        self.findings.extend(other.findings)

    def summary(self) -> str:
        """The verdict line: ``OK: ...`` or ``N problem(s): ...``, then the warnings count."""
        errors, warnings = len(self.errors), len(self.warnings)
        status = "OK" if not errors else f"{errors} problem(s)"
        return (f"{status}: {self.uri}: {self.partitions} partition(s), {self.segments} finished segment(s), "
                f"{self.batches} batch(es), {self.bytes} byte(s) checked; {warnings} warning(s)")

    def to_json(self) -> dict[str, object]:
        return {"ok": self.ok, "uri": self.uri, "partitions": self.partitions, "segments": self.segments,
                "batches": self.batches, "bytes": self.bytes,
                "problems": [f.to_json() for f in self.errors], "warnings": [f.to_json() for f in self.warnings]}


# --- the store ---------------------------------------------------------------------------------

def list_partitions(store: RemoteStore, topic: str | None = None
                    ) -> tuple[dict[TopicIdPartition, list[ObjectInfo]], list[RemoteFinding]]:
    """One LIST of the whole store, grouped by partition prefix (of ``topic`` only, when given);
    also the findings for objects outside every partition prefix (orphans). Raises the store's
    ``RemoteStorageError`` when the LIST fails."""
    partitions: dict[TopicIdPartition, list[ObjectInfo]] = {}
    strays: list[RemoteFinding] = []
    for info in store.list(""):
        tip = _partition_of(info.key)
        if info.key.startswith(PENDING_PREFIX):
            strays.append(RemoteFinding(WARNING, "pending_deletion", "", None, info.key, None,
                                        "a deletion of a topic's remote data is pending (a crash or an outage "
                                        "interrupted it): the next broker start with the remote tier finishes it"))
        elif tip is None:
            strays.append(RemoteFinding(WARNING, "orphan", "", None, info.key, None,
                                        "object outside every <topic>-<topicId>/<partition>/ prefix"))
        elif topic is None or tip.topic == topic:
            partitions.setdefault(tip, []).append(info)
    return partitions, strays


def _partition_of(key: str) -> TopicIdPartition | None:
    parts = key.split("/")
    if len(parts) < 3 or not parts[1].isdigit() or len(parts[0]) < _TOPIC_ID_CHARS + 2:
        return None
    topic_dir, partition = parts[0], int(parts[1])
    topic, dash, topic_id = topic_dir[:-_TOPIC_ID_CHARS - 1], topic_dir[-_TOPIC_ID_CHARS - 1], topic_dir[-_TOPIC_ID_CHARS:]
    try:
        topic_id_to_uuid(topic_id)
        return TopicIdPartition(topic_id, TopicPartition(topic, partition)) if dash == "-" and topic else None
    except (TidelogError, ValueError):
        return None


def verify_store(store: RemoteStore, *, topic: str | None = None, chunk_bytes: int = CHUNK_BYTES,
                 on_partition: Callable[[int, int], None] | None = None) -> RemoteVerifyReport:
    """Verify every partition of the store (of ``topic``); see the module doc. ``on_partition(done,
    total)`` is called after each partition. A failed store LIST is an error finding, not raised."""
    report = RemoteVerifyReport(store.uri)
    try:
        partitions, strays = list_partitions(store, topic)
    except RemoteStorageError as e:
        report.findings.append(RemoteFinding(ERROR, "store_error", "", None, "", None, str(e)))
        return report
    report.findings.extend(strays)
    for done, tip in enumerate(sorted(partitions), 1):
        report.add(verify_partition(store, tip, partitions[tip], chunk_bytes=chunk_bytes))
        if on_partition is not None:
            on_partition(done, len(partitions))
    return report


# --- one partition -----------------------------------------------------------------------------

class _Partition:
    """The findings of one partition and the helpers that name it in each."""

    def __init__(self, store: RemoteStore, tip: TopicIdPartition) -> None:
        self.store = store
        self.tip = tip
        self.report = RemoteVerifyReport(store.uri, partitions=1)

    def add(self, severity: str, kind: str, message: str, *, segment: RemoteLogSegmentMetadata | None = None,
            key: str | None = None, position: int | None = None) -> None:
        self.report.findings.append(RemoteFinding(severity, kind, str(self.tip.topic_partition),
                                                  segment.id if segment is not None else None, key, position, message))


def verify_partition(store: RemoteStore, tip: TopicIdPartition, objects: Iterable[ObjectInfo], *,
                     chunk_bytes: int = CHUNK_BYTES) -> RemoteVerifyReport:
    """Verify one partition whose objects (from a listing) are ``objects``; see the module doc.
    Store failures become ``store_error`` findings naming the object; nothing is raised for what
    the store holds."""
    check = _Partition(store, tip)
    sizes = {info.key: info.size for info in objects}
    _check_metadata_objects(check, sizes)
    try:
        metadata = RemotePartitionMetadata.load(store, tip)
    except RemoteMetadataVersionError as e:
        key = e.context.get("key")
        if not any(f.key == key for f in check.report.findings):
            check.add(ERROR, "metadata_version", f"written by a newer tidelog: {e}", key=key)
        return check.report
    except RemoteMetadataError as e:
        key = e.context.get("key")
        if not any(f.key == key for f in check.report.findings):  # not already reported as a corrupt object
            check.add(ERROR, "metadata_corrupt", f"the metadata log does not load: {e}", key=key)
        return check.report
    except RemoteStorageError as e:
        check.add(ERROR, "store_error", f"the metadata log cannot be read: {e}", key=metadata_prefix(tip))
        return check.report
    finished = metadata.finished_segments()
    for segment in finished:
        _check_segment(check, segment, sizes, chunk_bytes)
    _check_overlaps(check, finished)
    _check_unowned(check, metadata.segments(), sizes)
    return check.report


def _check_metadata_objects(check: _Partition, sizes: dict[str, int]) -> None:
    """Decode every event and snapshot object alone (a corrupt one the load skips or never
    replays is still reported)."""
    prefix = metadata_prefix(check.tip)
    for key in sorted(k for k in sizes if k.startswith(prefix)):
        parsed = parse_name(key[len(prefix):])
        if parsed is None:
            continue  # reported as an orphan
        kind, sequence = parsed
        decode = decode_snapshot if kind == "snapshot" else decode_event
        try:
            decode(check.store.get(key), key=key, uri=check.store.uri, sequence=sequence, tip=check.tip)
        except RemoteMetadataVersionError as e:
            check.add(ERROR, "metadata_version", f"metadata {kind} written by a newer tidelog: {e.message}", key=key)
        except RemoteMetadataError as e:
            check.add(ERROR, "metadata_corrupt", f"corrupt metadata {kind}: {e.message}", key=key)
        except RemoteStorageError as e:
            check.add(ERROR, "store_error", f"metadata {kind} cannot be read: {e}", key=key)


def _required_kinds(segment: RemoteLogSegmentMetadata) -> list[RemoteFileKind]:
    return [k for k in RemoteFileKind if k is not RemoteFileKind.TRANSACTION_INDEX or not segment.txn_idx_empty]


def _check_segment(check: _Partition, segment: RemoteLogSegmentMetadata, sizes: dict[str, int], chunk: int) -> None:
    check.report.segments += 1
    for kind in _required_kinds(segment):
        key = object_key(segment, kind)
        if key not in sizes:
            check.add(ERROR, "missing_object", f"the {kind.value} object of segment "
                      f"{segment.start_offset}..{segment.end_offset} is missing", segment=segment, key=key)
    log_key = object_key(segment, RemoteFileKind.SEGMENT)
    if log_key not in sizes:
        return
    size = sizes[log_key]
    if size != segment.segment_size_in_bytes:
        check.add(ERROR, "size_mismatch", f"the .log holds {size} bytes, the metadata says "
                  f"segment_size_in_bytes={segment.segment_size_in_bytes}", segment=segment, key=log_key)
    try:
        index = _read_offset_index(check, segment, sizes, size)
        scan = _scan_log(check, segment, log_key, size, index, chunk)
        _check_time_index(check, segment, sizes, scan.last_offset if scan.complete else -1)
    except RemoteStorageError as e:
        check.add(ERROR, "store_error", f"cannot be read: {e}", segment=segment, key=e.context.get("key"))
        return
    _check_scan(check, segment, log_key, scan, index)


# --- the .log ----------------------------------------------------------------------------------

@dataclass(slots=True)
class _Scan:
    """What streaming a ``.log`` found."""

    batches: int = 0
    end: int = 0  # the bytes read as complete batches
    complete: bool = True  # False after a corrupt or partial batch: the whole-log checks are skipped
    last_offset: int = -1
    max_timestamp: int = -1
    batch_starts: dict[int, int] = field(default_factory=dict)  # the index's positions found -> batch base offset


def _scan_log(check: _Partition, segment: RemoteLogSegmentMetadata, key: str, size: int,
              index: dict[int, int], chunk: int) -> _Scan:
    """Stream the ``.log`` by ranged reads and check each batch; ``index`` maps each offset-index
    position to its entry's offset (the positions whose batch is recorded)."""
    scan, position = _Scan(), 0
    try:
        for position, batch in chunked_batches(lambda at, n: check.store.get_range(key, at, n), key, 0, size, chunk):
            _check_batch(check, segment, key, position, batch, scan)
            if position in index:
                scan.batch_starts[position] = batch.base_offset
            scan.batches += 1
            position += batch.size_in_bytes
    except CorruptRecordError as e:
        check.add(ERROR, "corrupt_batch", f"{e.message}; the rest of the object is not checked",
                  segment=segment, key=key, position=position)
        scan.complete = False
    check.report.batches += scan.batches
    check.report.bytes += position
    scan.end = position
    if position < size and scan.complete:
        scan.complete = False
        check.add(ERROR, "partial_batch", f"{size - position} byte(s) after the last complete batch (a truncated "
                  "or partial batch)", segment=segment, key=key, position=position)
    return scan


def _check_batch(check: _Partition, segment: RemoteLogSegmentMetadata, key: str, position: int, batch, scan: _Scan) -> None:
    try:
        batch.ensure_valid(position=position)
    except CorruptRecordError as e:
        check.add(ERROR, "crc", f"batch at offset {batch.base_offset} (batch {scan.batches}): {e.message}",
                  segment=segment, key=key, position=position)
    if batch.base_offset < segment.start_offset or batch.last_offset > segment.end_offset:
        check.add(ERROR, "offset_range", f"batch {batch.base_offset}..{batch.last_offset} is outside the segment's "
                  f"offsets {segment.start_offset}..{segment.end_offset}", segment=segment, key=key, position=position)
    elif batch.base_offset <= scan.last_offset:
        check.add(ERROR, "offset_order", f"offsets go backwards: batch base offset {batch.base_offset} after last "
                  f"offset {scan.last_offset}", segment=segment, key=key, position=position)
    scan.last_offset = max(scan.last_offset, batch.last_offset)
    scan.max_timestamp = max(scan.max_timestamp, batch.max_timestamp)


def _check_scan(check: _Partition, segment: RemoteLogSegmentMetadata, key: str, scan: _Scan,
                index: dict[int, int]) -> None:
    """The checks on the whole ``.log``: its last offset, max timestamp, and the index's targets
    (when the ``.log`` was not read to its end, only the targets within what was read)."""
    index_key = object_key(segment, RemoteFileKind.OFFSET_INDEX)
    for position, offset in sorted(index.items()):
        base = scan.batch_starts.get(position)
        if base is None and position < scan.end:
            check.add(ERROR, "offset_index", f"entry for offset {offset} points to byte {position}, not the start of a "
                      "batch of the .log", segment=segment, key=index_key)
        elif base is not None and base > offset:
            check.add(ERROR, "offset_index", f"entry for offset {offset} points to a batch starting at offset {base}",
                      segment=segment, key=index_key)
    if not scan.complete:
        return
    if scan.batches and scan.last_offset < segment.end_offset:
        check.add(WARNING, "end_offset", f"the last batch ends at offset {scan.last_offset}, below the segment's "
                  f"end_offset {segment.end_offset} (normal only for a segment compacted before its copy)",
                  segment=segment, key=key)
    if scan.max_timestamp >= 0 and scan.max_timestamp != segment.max_timestamp_ms:
        check.add(ERROR, "max_timestamp", f"the largest batch timestamp is {scan.max_timestamp}, the metadata says "
                  f"max_timestamp_ms={segment.max_timestamp_ms}", segment=segment, key=key)


# --- the indexes -------------------------------------------------------------------------------

def _read_offset_index(check: _Partition, segment: RemoteLogSegmentMetadata, sizes: dict[str, int],
                       log_size: int) -> dict[int, int]:
    """The ``.index``'s entries as position -> offset, after checking their order and range."""
    key = object_key(segment, RemoteFileKind.OFFSET_INDEX)
    if key not in sizes:
        return {}
    data = check.store.get(key)
    entries: dict[int, int] = {}
    previous = -1
    for i, (relative, position) in enumerate(_entries(check, segment, key, data, OFFSET_INDEX_ENTRY)):
        offset = segment.start_offset + relative
        if relative < 0 or offset <= previous or offset > segment.end_offset or not 0 <= position < log_size:
            check.add(ERROR, "offset_index", f"entry {i} (offset {offset}, byte {position}) is out of order or outside "
                      f"the segment (offsets {segment.start_offset}..{segment.end_offset}, {log_size} bytes)",
                      segment=segment, key=key, position=i * OFFSET_INDEX_ENTRY.size)
        else:
            entries[position] = offset
        previous = max(previous, offset)
    return entries


def _check_time_index(check: _Partition, segment: RemoteLogSegmentMetadata, sizes: dict[str, int],
                      last_offset: int) -> None:
    key = object_key(segment, RemoteFileKind.TIME_INDEX)
    if key not in sizes:
        return
    data = check.store.get(key)
    previous_ts, previous_offset = -1, segment.start_offset
    highest = last_offset if last_offset >= 0 else segment.end_offset
    for i, (timestamp, relative) in enumerate(_entries(check, segment, key, data, TIME_INDEX_ENTRY)):
        offset = segment.start_offset + relative
        if timestamp < previous_ts or offset < previous_offset or offset > highest or (
                timestamp > segment.max_timestamp_ms):
            check.add(ERROR, "time_index", f"entry {i} ({timestamp}, offset {offset}) goes backwards or points past "
                      f"the segment (last offset {highest}, max timestamp {segment.max_timestamp_ms})",
                      segment=segment, key=key, position=i * TIME_INDEX_ENTRY.size)
        previous_ts, previous_offset = max(previous_ts, timestamp), max(previous_offset, offset)


def _entries(check: _Partition, segment: RemoteLogSegmentMetadata, key: str, data: bytes, entry) -> list[tuple[int, int]]:
    """The index's entries, without a zero-filled tail; a length that is no multiple of the entry size is an error."""
    kind = "offset_index" if entry is OFFSET_INDEX_ENTRY else "time_index"
    if len(data) % entry.size:
        check.add(ERROR, kind, f"length {len(data)} is not a multiple of the {entry.size}-byte entry size",
                  segment=segment, key=key)
    found = list(entry.iter_unpack(data[: len(data) // entry.size * entry.size]))
    for i, values in enumerate(found):
        if i > 0 and values == (0, 0):
            return found[:i]  # preallocated zeros
    return found


# --- the partition as a whole ------------------------------------------------------------------

def _check_overlaps(check: _Partition, finished: list[RemoteLogSegmentMetadata]) -> None:
    """Finished segments, by start offset, must not share an offset: each one starting at or below
    the highest end offset before it is reported with the segment that reaches there."""
    reaching: RemoteLogSegmentMetadata | None = None
    for segment in finished:
        if reaching is not None and segment.start_offset <= reaching.end_offset:
            check.add(ERROR, "overlap", f"segment {segment.start_offset}..{segment.end_offset} overlaps segment "
                      f"{reaching.id} ({reaching.start_offset}..{reaching.end_offset})", segment=segment,
                      key=object_key(segment, RemoteFileKind.SEGMENT))
        if reaching is None or segment.end_offset > reaching.end_offset:
            reaching = segment


def _check_unowned(check: _Partition, known: list[RemoteLogSegmentMetadata], sizes: dict[str, int]) -> None:
    """Warnings for objects of STARTED/DELETE_STARTED segments and objects nothing references."""
    owned: set[str] = set()
    for segment in known:
        keys = {object_key(segment, kind) for kind in RemoteFileKind}
        owned |= keys
        if segment.state != _FINISHED:
            for key in sorted(keys & sizes.keys()):
                check.add(WARNING, "unreferenced", f"object of a {RemoteLogSegmentState(segment.state).name} segment: "
                          "unreferenced, deleted by the next copy pass's cleanup", segment=segment, key=key)
    prefix = metadata_prefix(check.tip)
    for key in sorted(sizes):
        if key in owned or (key.startswith(prefix) and parse_name(key[len(prefix):]) is not None):
            continue
        where = f"under {METADATA_DIR}/ but not a metadata event or snapshot" if key.startswith(prefix) else \
            "referenced by no segment of the metadata"
        check.add(WARNING, "orphan", f"orphan object: {where}", key=key)
