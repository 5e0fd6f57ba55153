"""Executor side of the sink: rows to Kafka RecordBatch v2 bytes, staged in one file per task attempt.

A task attempt (``write()`` on an executor) turns its Arrow batches into producer batches
(base offset 0: offsets are assigned at commit) and appends them to one file,
``<job dir>/part-<spark partition>-attempt-<attempt>-task-<task attempt id>.batches``, then
fsyncs it and returns a :class:`TaskManifest` naming every batch: topic-partition, position and
size in the file, record count, a fingerprint and whether its timestamps await the commit time.
Nothing is visible to readers until the driver commits (:mod:`tidelog.spark.commit`); files of
failed attempts are orphans the commit (or abort) removes with the job's directory. The job dir is
born holding the driver's lease (:func:`driver_lease`, :mod:`tidelog.storage.staging_dirs`): a
driver killed before its commit leaves a dir that the next opener of the data dir deletes.

With ``kafka.bootstrap.servers`` (or a data dir a running ``tidelog serve`` owns) the same bytes
go to the broker instead, in chunks, into its own staging dir for the job
(:class:`~tidelog.spark.broker_commit.BrokerStagedFile`); the manifest is the same.

Job dirs under the staging root: ``job-<uuid>`` for a batch write, ``query-<queryId>/batch-<batchId>``
for a micro-batch of a streaming query.

**How rows become batches** (what a Kafka producer does, per topic): Kafka's default partitioner
(:class:`tidelog.partitioner.DefaultPartitioner`) gives each row without a ``partition`` its
partition: ``murmur2(key) & 0x7fffffff % partitions`` for keyed rows, and, for keyless rows, the
*sticky* partition (KIP-480), which moves to another partition each time a batch of it is sealed;
its random choice is seeded by the Spark partition id, so a retried task places rows as the first
attempt did. Batches are sealed at ``TopicSpec.max_batch_bytes`` (upper bounds of the records'
sizes). Rows keep their order within each topic-partition. Spark's Arrow batches are coalesced
into chunks of ~64k rows, and each chunk's records are encoded by one kernel call
(:mod:`tidelog.records.encode`); a batch is compressed whole with the topic's codec.

**Timestamps**: a row's ``timestamp`` (microseconds) becomes milliseconds, floored as Spark's
Kafka sink does. A null or absent timestamp means "the commit time": such rows are kept out of
batches holding timed rows (they get a sentinel timestamp more than 2**62 ms away, which the
partitioner never puts in one batch with a real one), their batches are staged with timestamps
-1 and the commit writes its time into the header (``baseTimestamp`` = ``maxTimestamp``, deltas
are 0). The **fingerprint** is the CRC-32C of a batch's records area (the bytes after the 61-byte
header) with its record count: unlike the batch CRC it survives what the log patches (offsets,
leader epoch, LogAppendTime, the commit time), so a commit can recognise its batches in the log.

Checks done here, failing the task with the row's problem (the log would refuse the batch at
commit otherwise): partition out of range, null topic, unknown topic, null key on a compacted
topic, negative timestamps, timestamps outside ``message.timestamp.{before,after}.max.ms``, a
null header or header key, a batch larger than ``max.message.bytes`` (one huge record).
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from crc32c import crc32c
from pyspark.sql.datasource import WriterCommitMessage

from tidelog.clock import SYSTEM_CLOCK, Clock
from tidelog.errors import InvalidRecordError, RecordTooLargeError, UnknownTopicOrPartitionError
from tidelog.partitioner import DefaultPartitioner, murmur2_keys
from tidelog.records.batch import RECORD_BATCH_OVERHEAD
from tidelog.records.builder import batch_attributes, encode_v2_batch
from tidelog.records.compression import CompressionType, compress
from tidelog.records.encode import encode_header_sections, encode_records, record_size_bounds
from tidelog.records.record import TimestampType
from tidelog.spark.sink_options import SinkPlan, TopicSpec
from tidelog.storage.commit_log import StagedBatch
from tidelog.storage.staging_dirs import Lease, StagedFile, ensure_job_dir, process_lease, process_stat

if TYPE_CHECKING:
    from tidelog.spark.broker_commit import BrokerStagedFile

STAGED_SUFFIX = ".batches"
COMMIT_TIME = -(1 << 62)  # the timestamp of rows that take the commit time (see the module doc)
BATCH_RECORDS = 1 << 20  # batches are cut by bytes; this only bounds the count
CHUNK_ROWS = 1 << 16  # Spark's Arrow batches (10k rows by default) are encoded this many rows at a time...
CHUNK_BYTES = 16 << 20  # ... or this many bytes (fewer kernel calls; offsets stay far from 2**31)
_NO_TIMESTAMP = -1


# --- names --------------------------------------------------------------------------------

def batch_job_key(job_id: str) -> str:
    """The staging dir name (and commit-log id) of a batch write."""
    return f"job-{job_id}"


def stream_job_key(query_id: str, batch_id: int) -> str:
    """The staging dir (and commit-log id) of micro-batch ``batch_id`` of streaming query ``query_id``."""
    return f"query-{query_id}/batch-{batch_id}"


def staged_file_name(spark_partition: int, attempt: int, task_attempt_id: int) -> str:
    return f"part-{spark_partition:05d}-attempt-{attempt}-task-{task_attempt_id}{STAGED_SUFFIX}"


def driver_lease() -> Lease | None:
    """The lease of the job's staging dir: the driver's JVM (the nearest ``java`` ancestor of this
    process, which Spark runs ``writer()`` under); None when there is none (``writer()`` called
    outside Spark), and the staging dir is then never reclaimed automatically."""
    pid = os.getpid()
    for _ in range(8):
        stat = process_stat(pid)
        if stat is None:
            return None
        if stat.name == b"java":
            return process_lease(pid)
        if stat.parent <= 1:
            return None
        pid = stat.parent
    return None


# --- the manifest -------------------------------------------------------------------------

@dataclass(frozen=True)
class TaskManifest(WriterCommitMessage):
    """What a successful task attempt staged (``file`` is None when it had no rows)."""

    job_key: str
    spark_partition: int
    attempt: int
    task_attempt_id: int
    file: str | None
    batches: tuple[StagedBatch, ...] = ()
    query: str | None = None  # streaming: the query and micro-batch (the driver's commit cannot ask Spark)
    batch: int | None = None

    @property
    def records(self) -> int:
        return sum(b.records for b in self.batches)


@dataclass(frozen=True, slots=True)
class TaskIdentity:
    """Which task attempt is staging (from ``pyspark.TaskContext``)."""

    spark_partition: int
    attempt: int
    task_attempt_id: int


# --- rows to columns ---------------------------------------------------------------------

@dataclass(slots=True)
class _Columns:
    """One topic's rows of one Arrow batch as the encoder takes them (see records.encode)."""

    key_data: Any
    key_len: np.ndarray
    value_data: Any
    value_len: np.ndarray
    header_data: Any
    header_len: np.ndarray
    timestamps: np.ndarray  # ms, COMMIT_TIME for rows without one
    explicit: np.ndarray  # partition, -1 for rows without one

    def __len__(self) -> int:
        return len(self.key_len)


def packed(column: pa.Array) -> tuple[Any, np.ndarray]:
    """A binary/string column as (non-null entries back to back, lengths with -1 for null)."""
    width = np.int64 if (pa.types.is_large_binary(column.type) or pa.types.is_large_string(column.type)) else np.int32
    n = len(column)
    if n == 0:
        return b"", np.zeros(0, np.int64)
    buffers = column.buffers()
    offsets = np.frombuffer(buffers[1], width, n + 1, column.offset * np.dtype(width).itemsize).astype(np.int64)
    lengths = np.diff(offsets)
    if column.null_count:
        valid = column.is_valid().to_numpy(zero_copy_only=False)
        if lengths[~valid].any():  # null slots spanning bytes: pack the valid entries again
            return packed(column.filter(column.is_valid()))[0], np.where(valid, lengths, -1)
        lengths = np.where(valid, lengths, -1)
    data = buffers[2]
    if data is None:
        return b"", lengths
    return memoryview(data)[int(offsets[0]):int(offsets[-1])], lengths


def _header_columns(column: pa.Array, topic: str) -> tuple[Any, np.ndarray]:
    n = len(column)
    counts = column.value_lengths().fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
    if not counts.any():
        return b"", np.zeros(n, np.int64)
    headers = column.flatten()
    if headers.null_count:
        raise InvalidRecordError("a header is null: each header needs a key", topic=topic)
    keys, values = headers.flatten()
    if keys.null_count:
        raise InvalidRecordError("a header key is null: Kafka does not permit null header keys", topic=topic)
    key_data, key_len = packed(keys)
    value_data, value_len = packed(values)
    return encode_header_sections(counts, key_data, key_len, value_data, value_len)


_TO_MS = {"s": (1000, 1), "ms": (1, 1), "us": (1, 1000), "ns": (1, 1_000_000)}  # unit -> (multiply, floor-divide)


def _timestamps(column: pa.Array | None, n: int, topic: str) -> np.ndarray:
    """Milliseconds (floored), COMMIT_TIME for null or absent timestamps."""
    ms = np.full(n, COMMIT_TIME, np.int64)
    if column is None:
        return ms
    valid = column.is_valid().to_numpy(zero_copy_only=False)
    raw = column.cast(pa.int64()).fill_null(0).to_numpy(zero_copy_only=False)[valid]
    multiply, divide = _TO_MS[column.type.unit]
    ms[valid] = raw * multiply // divide
    if (ms[valid] < 0).any():
        bad = int(ms[valid][ms[valid] < 0][0])
        raise InvalidRecordError(f"invalid timestamp {bad} (ms): Kafka timestamps cannot be negative (before 1970)",
                                 topic=topic)
    return ms


def _partitions(column: pa.Array | None, n: int, spec: TopicSpec) -> np.ndarray:
    if column is None:
        return np.full(n, -1, np.int64)
    explicit = column.cast(pa.int64()).fill_null(-1).to_numpy(zero_copy_only=False)
    bad = (explicit >= spec.partitions) | ((explicit < 0) & column.is_valid().to_numpy(zero_copy_only=False))
    if bad.any():
        partition = int(explicit[bad][0])
        raise UnknownTopicOrPartitionError(
            f"partition {partition} is out of range: topic {spec.name!r} has {spec.partitions} partition(s)",
            topic_partition=f"{spec.name}-{partition}")
    return explicit


def columns_of(batch: pa.RecordBatch, spec: TopicSpec, now: int) -> _Columns:
    """The rows of ``batch`` (all of topic ``spec``) as encoder columns; checks the rows."""
    n = batch.num_rows
    names = batch.schema.names

    def get(name: str) -> pa.Array | None:
        return batch.column(names.index(name)) if name in names else None

    value_data, value_len = packed(get("value"))  # type: ignore[arg-type]
    key = get("key")
    key_data, key_len = packed(key) if key is not None else (b"", np.full(n, -1, np.int64))
    headers = get("headers")
    header_data, header_len = _header_columns(headers, spec.name) if headers is not None else (b"", np.zeros(n, np.int64))
    cols = _Columns(key_data, key_len, value_data, value_len, header_data, header_len,
                    _timestamps(get("timestamp"), n, spec.name), _partitions(get("partition"), n, spec))
    check_rows(cols, spec, now)
    return cols


def check_rows(cols: _Columns, spec: TopicSpec, now: int) -> None:
    """What the log would refuse at commit: keyless records on a compacted topic, timestamps out of bounds."""
    if spec.compact and (cols.key_len < 0).any():
        raise InvalidRecordError(f"compacted topic {spec.name!r} cannot accept a record without key "
                                 f"(cleanup.policy=compact)", topic=spec.name)
    if spec.log_append_time:
        return
    timed = cols.timestamps[cols.timestamps != COMMIT_TIME]
    if not len(timed):
        return
    low, high = int(timed.min()), int(timed.max())
    if now - low > spec.timestamp_before_max_ms or high - now > spec.timestamp_after_max_ms:
        bad = low if now - low > spec.timestamp_before_max_ms else high
        raise InvalidRecordError(
            f"timestamp {bad} of a record is out of range: must be within message.timestamp.before.max.ms="
            f"{spec.timestamp_before_max_ms} and message.timestamp.after.max.ms={spec.timestamp_after_max_ms} "
            f"of now ({now})", topic=spec.name)


def coalesced(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``batches`` concatenated into chunks of about CHUNK_ROWS rows or CHUNK_BYTES bytes, in order."""
    pending: list[pa.RecordBatch] = []
    rows = size = 0
    for batch in batches:
        if batch.num_rows == 0:
            continue
        pending.append(batch)
        rows += batch.num_rows
        size += batch.nbytes
        if rows >= CHUNK_ROWS or size >= CHUNK_BYTES:
            yield pending[0] if len(pending) == 1 else pa.concat_batches(pending)
            pending, rows, size = [], 0, 0
    if pending:
        yield pending[0] if len(pending) == 1 else pa.concat_batches(pending)


def split_by_topic(batch: pa.RecordBatch, plan: SinkPlan) -> Iterator[tuple[TopicSpec, pa.RecordBatch]]:
    """``batch``'s rows per topic (the ``topic`` option wins over the column), in first-seen order."""
    if batch.num_rows == 0:
        return
    if plan.topic is not None:
        yield plan.spec(plan.topic), batch
        return
    topics = batch.column(batch.schema.names.index("topic"))
    if topics.null_count:
        raise InvalidRecordError("null topic present in the data: use the topic option to set a default topic")
    names = pc.unique(topics).to_pylist()
    if len(names) == 1:
        yield plan.spec(names[0]), batch
        return
    for name in names:
        yield plan.spec(name), batch.filter(pc.equal(topics, name))


# --- batches in the making -----------------------------------------------------------------

@dataclass(slots=True)
class _OpenBatch:
    """Encoded records of one producer batch, piece by piece (one piece per Arrow batch)."""

    partition: int
    pieces: list[bytes] = field(default_factory=list)
    count: int = 0
    base_timestamp: int = _NO_TIMESTAMP
    max_timestamp: int = _NO_TIMESTAMP

    def add(self, data: bytes, timestamps: np.ndarray) -> None:
        if not self.pieces:
            self.base_timestamp = int(timestamps[0])
        self.pieces.append(data)
        self.count += len(timestamps)
        self.max_timestamp = max(self.max_timestamp, int(timestamps.max()))

    def encode(self, codec: CompressionType, level: int | None) -> tuple[bytes, int, bool]:
        """(v2 producer batch, fingerprint, stamp_at_commit)."""
        area = b"".join(self.pieces)
        if codec is not CompressionType.NONE:
            area = compress(codec, area, level)
        stamp = self.base_timestamp == COMMIT_TIME
        base, high = (_NO_TIMESTAMP, _NO_TIMESTAMP) if stamp else (self.base_timestamp, self.max_timestamp)
        data = encode_v2_batch(
            base_offset=0, partition_leader_epoch=-1,
            attributes=batch_attributes(codec, TimestampType.CREATE_TIME, False, False, False),
            last_offset_delta=self.count - 1, base_timestamp=base, max_timestamp=high, producer_id=-1,
            producer_epoch=-1, base_sequence=-1, records_count=self.count, records_area=area)
        return data, crc32c(area), stamp


class _TopicStager:
    """One topic's partitioner and open batches within one task attempt."""

    def __init__(self, spec: TopicSpec, seed: int, out: StagedFile | BrokerStagedFile,
                 staged: list[StagedBatch]) -> None:
        self.spec = spec
        self._codec = CompressionType(spec.codec)
        self._partitioner = DefaultPartitioner(spec.partitions, BATCH_RECORDS, spec.max_batch_bytes,
                                               rng=random.Random(seed))
        self._open: dict[int, _OpenBatch] = {}
        self._out = out
        self._staged = staged

    def add(self, cols: _Columns) -> None:
        """Partition, encode and add the rows to their batches; stage every batch they seal."""
        keyed = (cols.explicit < 0) & (cols.key_len >= 0)
        hashes = murmur2_keys(cols.key_data, cols.key_len) if keyed.any() else None
        sizes = record_size_bounds(cols.key_len, cols.value_len, cols.header_len)
        assignment = self._partitioner.assign(cols.explicit, cols.key_len, hashes, cols.timestamps, sizes)
        order = np.argsort(assignment.batch, kind="stable")
        data, ends = encode_records(cols.key_data, cols.key_len, cols.value_data, cols.value_len, cols.header_data,
                                    cols.header_len, assignment.offset_delta, assignment.timestamp_delta, order)
        batch_ids = assignment.batch[order]
        bounds = np.concatenate(([0], np.flatnonzero(np.diff(batch_ids)) + 1, [len(order)]))
        byte_bounds = np.concatenate(([0], ends[bounds[1:] - 1])).tolist()  # one entry per piece, not per row
        bounds_list = bounds.tolist()
        for piece_index, (begin, end) in enumerate(zip(bounds_list[:-1], bounds_list[1:])):
            rows = order[begin:end]
            batch_id = int(batch_ids[begin])
            piece = data[byte_bounds[piece_index]:byte_bounds[piece_index + 1]]
            self._open.setdefault(batch_id, _OpenBatch(int(assignment.partition[rows[0]]))).add(
                piece, cols.timestamps[rows])
        for batch_id in assignment.sealed.tolist():
            self._stage(self._open.pop(batch_id))

    def close(self) -> None:
        for batch_id in self._partitioner.seal_all():
            self._stage(self._open.pop(batch_id))

    def _stage(self, batch: _OpenBatch) -> None:
        data, fingerprint, stamp = batch.encode(self._codec, self.spec.level)
        if len(data) > self.spec.max_message_bytes:
            raise RecordTooLargeError(
                f"a record batch of {batch.count} record(s) takes {len(data)} bytes, more than max.message.bytes="
                f"{self.spec.max_message_bytes} of topic {self.spec.name!r} (a record is too large; the limit is "
                f"{self.spec.max_message_bytes - RECORD_BATCH_OVERHEAD} bytes of records per batch)",
                topic_partition=f"{self.spec.name}-{batch.partition}")
        position = self._out.write(data)
        self._staged.append(StagedBatch(self.spec.name, batch.partition, position, len(data), batch.count,
                                        fingerprint, stamp))


def stage_task(plan: SinkPlan, job_key: str, batches: Iterable[pa.RecordBatch], task: TaskIdentity,
               query: str | None = None, batch_id: int | None = None, *, clock: Clock = SYSTEM_CLOCK,
               lease: Lease | None = None) -> TaskManifest:
    """Stage every row of ``batches`` (see the module doc); the manifest of what was staged.

    On an error the file written so far is deleted (the job's dir is swept anyway at commit/abort).
    """
    name = staged_file_name(task.spark_partition, task.attempt, task.task_attempt_id)
    out: StagedFile | BrokerStagedFile
    if plan.bootstrap is not None:  # staged through the broker (spark.broker_commit), in chunks
        from tidelog.spark.broker_commit import BrokerStagedFile

        out = BrokerStagedFile(plan.bootstrap, job_key, name)
    else:
        out = StagedFile(ensure_job_dir(plan.staging_root, job_key, lease) / name)
    staged: list[StagedBatch] = []
    stagers: dict[str, _TopicStager] = {}
    try:
        for batch in coalesced(batches):
            for spec, rows in split_by_topic(batch, plan):
                stager = stagers.get(spec.name)
                if stager is None:
                    stager = stagers[spec.name] = _TopicStager(spec, task.spark_partition, out, staged)
                stager.add(columns_of(rows, spec, clock.milliseconds()))
        for stager in stagers.values():
            stager.close()
        written = out.close()
    except BaseException:
        out.discard()
        raise
    return TaskManifest(job_key, task.spark_partition, task.attempt, task.task_attempt_id,
                        name if written else None, tuple(staged), query, batch_id)
