"""Append validation and offset assignment (Kafka's ``LogValidator``), on batches as bytes.

An append arrives as a buffer of record batches. Two steps, as in Kafka (kafka-storage.md §3.1):

1. :func:`analyze_batches` — a shallow pass over batch headers: sizes against
   ``max.message.bytes``, CRCs, offset order; a trailing partial batch is trimmed.
2. :func:`assign_offsets` (appends as leader) — per-record rules (keys on compacted topics,
   timestamp bounds, batch shape for producer batches) checked on one summary per batch that the
   scan kernel computes (:func:`tidelog.records.scan.summarize_batch_records`), never record by
   record in Python; then offsets, leader epoch and
   timestamps are patched into the bytes in place. Only a codec change (``compression.type`` not
   ``producer`` and not the batch's codec) or a legacy v0/v1 batch rebuilds batches.

Any record error fails the whole append, naming the batch position and record indexes.

**Compressed batches** are decompressed for step 2 into at most what ``max.message.bytes`` allows
the batch uncompressed (:func:`decompressed_records_limit`), in pieces the codec library bounds
(``records.compression``): one byte more and the append is refused with RecordTooLargeError, so
a few hundred KB that inflate to gigabytes cost a leader append no more memory than one
uncompressed batch of the topic's largest size. Kafka has no such limit (it streams the records
and stores such a batch); see docs/architecture.md.

**The common case in one pass.** Nearly every leader append is one v2 batch from a producer that
can be written as it came, with only baseOffset and partitionLeaderEpoch replaced (both outside
the CRC). :func:`validate_produced_batch` checks exactly what the two steps check for such a
batch (an uncompressed ``bytes`` batch in one kernel call: header, CRC, every record; see
``records/_scan_kernels.check_produced_batch``) and returns what the append needs, or None.
None means "not the common case, or something is wrong": the caller then runs the two steps
above, which raise the precise error (so errors are the general path's by construction, and the
one-pass check never needs to describe one). Both paths' equivalence (bytes written, append
info, errors) is checked by ``tests/storage/test_leader_fast_path.py`` on random valid and
invalid batches.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from tidelog.errors import (
    CorruptRecordError,
    InvalidRecordError,
    InvalidTimestampError,
    OffsetsOutOfOrderError,
    RecordTooLargeError,
)
from tidelog.records import (
    BatchBuilder,
    CompressionType,
    FileBatch,
    RecordBatch,
    TimestampType,
    iter_batches,
    set_base_offset,
    set_max_timestamp,
    set_partition_leader_epoch,
)
from tidelog.records.batch import HEADER, RECORD_BATCH_OVERHEAD, stored_crc_matches
from tidelog.records.layout import COMPRESSION_CODEC_MASK, CONTROL_FLAG_MASK, TIMESTAMP_TYPE_MASK
from tidelog.records.layout import PRODUCER_FIELDS, PRODUCER_ID_OFFSET
from tidelog.records.scan import (
    CRC_IN_KERNEL_BELOW,
    PRODUCED_COMPRESSED,
    PRODUCED_IDEMPOTENT,
    PRODUCED_OK,
    RecordsSummary,
    produced_batch_checker,
    summarize_batch_records,
)
from tidelog.storage.append_info import NO_TIMESTAMP, AppendOrigin
from tidelog.storage.config import LogConfig
from tidelog.storage.file_records import chunks_size

_LONG_MAX = 2**63 - 1


@dataclass(frozen=True, slots=True)
class AnalyzedBatches:
    """Step 1's result: the valid batches (positions into ``buffer``) and their shallow facts."""

    buffer: bytes | bytearray | memoryview
    batches: tuple[tuple[int, FileBatch], ...]
    valid_bytes: int
    first_offset: int
    last_offset: int
    offsets_monotonic: bool
    source_compression: CompressionType
    max_timestamp: int
    shallow_offset_of_max_timestamp: int

    @property
    def records(self) -> memoryview:
        return memoryview(self.buffer)[: self.valid_bytes]


@dataclass(frozen=True, slots=True)
class ValidatedRecords:
    """Step 2's result: bytes ready to write, with the offsets and timestamps they now carry.

    ``records`` is a tuple of buffers written with one gathered write: usually a patched copy of a
    batch's 61-byte header followed by the producer's own bytes, so a 128 KB batch is never copied.
    """

    records: tuple[bytes | bytearray | memoryview, ...]
    first_offset: int
    last_offset: int
    max_timestamp: int
    shallow_offset_of_max_timestamp: int
    log_append_time: int
    record_count: int
    target_compression: CompressionType

    @property
    def size(self) -> int:
        return chunks_size(self.records)

    def to_bytes(self) -> bytes:
        """The records as one buffer (a copy: for tools and tests, not the append path)."""
        return b"".join(self.records)


def analyze_batches(
    buffer: bytes | bytearray | memoryview, *, origin: AppendOrigin, max_message_bytes: int
) -> AnalyzedBatches:
    """Shallow checks of every batch (§3.1 step 2). Trailing partial bytes are left out.

    Raises :class:`InvalidRecordError` (producer batch with a non-zero base offset),
    :class:`RecordTooLargeError` (batch over ``max.message.bytes``, leader appends only),
    :class:`CorruptRecordError` (CRC or size), each naming the batch's byte position.
    """
    found: list[tuple[int, FileBatch]] = []
    monotonic, last_offset, valid_bytes = True, -1, 0
    max_ts, offset_of_max = NO_TIMESTAMP, -1
    codec = CompressionType.NONE
    for position, batch in iter_batches(buffer):
        _check_shallow(batch, position, origin, max_message_bytes)
        if last_offset >= batch.last_offset:
            monotonic = False
        last_offset = batch.last_offset
        if batch.max_timestamp > max_ts:
            max_ts, offset_of_max = batch.max_timestamp, batch.last_offset
        if batch.compression != CompressionType.NONE:
            codec = batch.compression
        valid_bytes = position + batch.size_in_bytes
        found.append((position, batch))
    first = found[0][1].base_offset if found else -1
    return AnalyzedBatches(buffer, tuple(found), valid_bytes, first, last_offset, monotonic, codec, max_ts, offset_of_max)


def _check_shallow(batch: FileBatch, position: int, origin: AppendOrigin, max_message_bytes: int) -> None:
    if origin is AppendOrigin.CLIENT and batch.magic >= 2 and batch.base_offset != 0:
        raise InvalidRecordError(
            "producer batches must have base offset 0", position=position, base_offset=batch.base_offset
        )
    if origin is not AppendOrigin.REPLICATION and batch.size_in_bytes > max_message_bytes:
        raise RecordTooLargeError(
            f"batch of {batch.size_in_bytes} bytes is larger than max.message.bytes {max_message_bytes}",
            position=position, offset=batch.base_offset,
        )
    batch.ensure_valid(position=position)


def check_offsets_in_order(analyzed: AnalyzedBatches) -> None:
    """Appends that keep offsets must be strictly increasing (Kafka's ``OffsetsOutOfOrderException``)."""
    if not analyzed.offsets_monotonic:
        offsets = [batch.last_offset for _, batch in analyzed.batches]
        raise OffsetsOutOfOrderError("batches of the append are not in increasing offset order", last_offsets=offsets)


def assign_offsets(
    analyzed: AnalyzedBatches,
    *,
    next_offset: int,
    config: LogConfig,
    now: int,
    origin: AppendOrigin,
    leader_epoch: int,
    topic_partition: object = None,
) -> ValidatedRecords:
    """Validate every record and give the batches offsets from ``next_offset`` (§3.1 step 3)."""
    batches = analyzed.batches
    if origin is AppendOrigin.CLIENT:
        _check_single_batch(batches)
        for position, batch in batches:
            if batch.magic >= 2:
                _check_producer_batch(batch, position)
    target = _target_compression(config, analyzed.source_compression)
    log_append = config.message_timestamp_type == "LogAppendTime"
    # Every v2 batch's records are checked on its summary, whichever path writes it (so a legacy
    # entry in the same append cannot send the v2 batches past these checks).
    summaries = [_summarize(batch, position, config.max_message_bytes)  # type: ignore[arg-type]  # v2 here
                 for position, batch in batches if batch.magic >= 2]
    for (position, batch), summary in zip([b for b in batches if b[1].magic >= 2], summaries):
        _check_records(summary, batch, position, config, now, log_append, topic_partition)
    if (len(summaries) == len(batches) and target == analyzed.source_compression
            and _codecs_uniform(batches, target)):
        return _assign_in_place(analyzed, summaries, next_offset, leader_epoch, now, log_append, target)
    return _rebuild(analyzed, next_offset, config, leader_epoch, now, log_append, target, topic_partition)


def decompressed_records_limit(max_message_bytes: int) -> int:
    """Most bytes a leader append's compressed records area may decompress to: what the batch
    would weigh uncompressed must fit ``max.message.bytes``, as an uncompressed batch must."""
    return max(0, max_message_bytes - RECORD_BATCH_OVERHEAD)


def _summarize(batch: RecordBatch, position: int, max_message_bytes: int) -> RecordsSummary:
    """The batch's records summary; a compressed batch that decompresses past what
    ``max.message.bytes`` allows is refused at that byte with :class:`RecordTooLargeError`
    (Kafka's MESSAGE_TOO_LARGE, on which a Java producer splits the batch and retries)."""
    limit = decompressed_records_limit(max_message_bytes)
    try:
        return summarize_batch_records(batch, position, max_decompressed=limit)
    except CorruptRecordError as err:
        if err.context.get("max_size") != limit:
            raise
        raise RecordTooLargeError(
            f"compressed batch decompresses to more than {limit} bytes of records: uncompressed it would "
            f"exceed max.message.bytes {max_message_bytes}", position=position, offset=batch.base_offset,
        ) from err


def _check_single_batch(batches: Sequence[tuple[int, FileBatch]]) -> None:
    first = batches[0][1]
    if len(batches) > 1 and (first.magic >= 2 or first.compression != CompressionType.NONE):
        raise InvalidRecordError(
            "a producer append holds more than one batch (Kafka: 'Compressed outer record has more than one batch')",
            batches=len(batches),
        )


def _check_producer_batch(batch: FileBatch, position: int) -> None:
    count = batch.records_count
    if count <= 0 or batch.last_offset_delta + 1 != count:
        raise InvalidRecordError(
            f"producer batch declares {count} records but last offset delta {batch.last_offset_delta}",
            position=position,
        )
    if batch.is_control:
        raise InvalidRecordError("producers may not write control batches", position=position)
    if batch.producer_id >= 0 and batch.base_sequence < 0:
        raise InvalidRecordError(
            f"idempotent batch of producer {batch.producer_id} has base sequence {batch.base_sequence}",
            position=position,
        )


def _target_compression(config: LogConfig, source: CompressionType) -> CompressionType:
    name = config.compression_type
    if name == "producer":
        return source
    return CompressionType.from_name(name)


def _codecs_uniform(batches: Sequence[tuple[int, FileBatch]], target: CompressionType) -> bool:
    return all(batch.compression == target for _, batch in batches)


def _check_records(
    summary: RecordsSummary, batch: FileBatch, position: int, config: LogConfig, now: int,
    log_append: bool, topic_partition: object,
) -> None:
    """Kafka's per-record rules, on the batch's records summary."""
    if config.compact and summary.keyless:
        raise InvalidRecordError(
            f"compacted topic cannot accept message without key ({summary.keyless} keyless record(s), "
            f"the first at index {summary.first_keyless_index})",
            topic_partition=topic_partition, position=position,
            record_errors=_keyless_record_errors(batch),
        )
    if batch.compression != CompressionType.NONE and not summary.sequential_offsets:
        raise InvalidRecordError("inner record offsets of a compressed batch are not 0, 1, 2, ...", position=position)
    low, high = summary.min_timestamp, _records_max_timestamp(summary, batch)
    if batch.timestamp_type == TimestampType.LOG_APPEND_TIME:  # one timestamp for all its records
        low = high if high != NO_TIMESTAMP else _LONG_MAX
    _check_timestamps(low, high, batch, position, config, now, log_append)


def _keyless_record_errors(batch: FileBatch) -> list[tuple[int, str]]:
    """Every keyless record's index, as Kafka's RecordValidationException lists them (error path
    only: decodes the batch in Python)."""
    return [(i, "record has no key") for i, record in enumerate(batch.records()) if record.key is None]


def _records_max_timestamp(summary: RecordsSummary, batch: FileBatch) -> int:
    """The largest record timestamp as Kafka reads records: in a batch flagged LogAppendTime every
    record reports the batch's maxTimestamp (the summary leaves such timestamps out)."""
    if batch.timestamp_type == TimestampType.LOG_APPEND_TIME:
        return batch.max_timestamp
    return summary.max_timestamp


def _check_timestamps(
    low: int, high: int, batch: FileBatch, position: int, config: LogConfig, now: int, log_append: bool
) -> None:
    """``low``/``high``: the smallest and largest record timestamps other than -1."""
    batch_is_log_append = batch.timestamp_type == TimestampType.LOG_APPEND_TIME
    # Kafka's validateTimestamp: on a CreateTime topic a record with a timestamp is only
    # bounds-checked, whatever the batch's flag; a producer batch flagged LogAppendTime is
    # rejected on a LogAppendTime topic or when its records carry no timestamp (-1).
    if batch_is_log_append and (log_append or high == NO_TIMESTAMP):
        raise InvalidTimestampError("producer should not set timestamp type to LogAppendTime", position=position)
    if log_append:
        return
    before, after = config.message_timestamp_before_max_ms, config.message_timestamp_after_max_ms
    bad = timestamp_out_of_bounds(low, high, now, before, after)
    if bad is not None:
        raise InvalidTimestampError(
            f"timestamp {bad} of a record is out of range: must be within "
            f"message.timestamp.before.max.ms={before} and message.timestamp.after.max.ms={after} "
            f"of broker time {now}",
            position=position,
        )


def timestamp_out_of_bounds(low: int, high: int, now: int, before_max_ms: int, after_max_ms: int) -> int | None:
    """The timestamp rule (message.timestamp.before/after.max.ms), once for the Python checks: the
    first of ``low`` (the smallest record timestamp other than -1; INT64_MAX when none) and ``high``
    (the largest; -1 when none) that lies too far before or after broker time ``now``, else None.
    ``INT64_MAX`` bounds are unbounded. (The compiled check, records' check_produced_batch, states
    it in numba's subset.)"""
    if low != _LONG_MAX and before_max_ms < _LONG_MAX and now - low > before_max_ms:
        return low
    if high >= 0 and after_max_ms < _LONG_MAX and high - now > after_max_ms:
        return high
    return None


def _assign_in_place(
    analyzed: AnalyzedBatches,
    summaries: list[RecordsSummary],
    next_offset: int,
    leader_epoch: int,
    now: int,
    log_append: bool,
    codec: CompressionType,
) -> ValidatedRecords:
    """Patch offsets, leader epoch and (when wrong) max timestamp into the batches.

    Base offset and leader epoch lie outside the CRC, so a single batch whose timestamps need no
    fix is written as a patched header plus the original bytes (no copy); otherwise the batches
    are copied and patched, CRCs rewritten where the max timestamp changed.
    """
    stamp_type = TimestampType.LOG_APPEND_TIME if log_append else TimestampType.CREATE_TIME
    plan: list[tuple[int, int, int, bool]] = []  # (position, base offset, batch max ts, retimestamp)
    offset, count = next_offset, 0
    max_ts, offset_of_max = NO_TIMESTAMP, -1
    for summary, (position, batch) in zip(summaries, analyzed.batches):
        batch_max = now if log_append else _records_max_timestamp(summary, batch)
        retimestamp = batch.max_timestamp != batch_max or batch.timestamp_type != stamp_type
        plan.append((position, offset, batch_max, retimestamp))
        last = offset + batch.last_offset_delta
        if batch_max > max_ts:
            max_ts, offset_of_max = batch_max, last
        offset, count = last + 1, count + summary.count
    chunks = _patched(analyzed.records, plan, leader_epoch, stamp_type)
    return ValidatedRecords(
        chunks, next_offset, offset - 1, max_ts, offset_of_max, now if log_append else NO_TIMESTAMP, count, codec,
    )


def _patched(
    source: memoryview, plan: list[tuple[int, int, int, bool]], leader_epoch: int, stamp_type: TimestampType,
) -> tuple[bytes | bytearray | memoryview, ...]:
    if len(plan) == 1 and not plan[0][3]:
        head = bytearray(source[:RECORD_BATCH_OVERHEAD])
        set_base_offset(head, plan[0][1])
        set_partition_leader_epoch(head, leader_epoch)
        return head, source[RECORD_BATCH_OVERHEAD:]
    buffer = bytearray(source)
    for position, base_offset, batch_max, retimestamp in plan:
        set_base_offset(buffer, base_offset, position)
        set_partition_leader_epoch(buffer, leader_epoch, position)
        if retimestamp:
            set_max_timestamp(buffer, stamp_type, batch_max, position)
    return (buffer,)


def _rebuild(
    analyzed: AnalyzedBatches,
    next_offset: int,
    config: LogConfig,
    leader_epoch: int,
    now: int,
    log_append: bool,
    target: CompressionType,
    topic_partition: object,
) -> ValidatedRecords:
    """Re-encode into one v2 batch per source batch (codec change or legacy up-conversion)."""
    out = bytearray()
    offset, count = next_offset, 0
    max_ts, offset_of_max = NO_TIMESTAMP, -1
    for position, batch in analyzed.batches:
        built, last, batch_max, n = _rebuild_one(batch, position, offset, config, leader_epoch, now, log_append, target, topic_partition)
        if len(built) > config.max_message_bytes:
            raise RecordTooLargeError(
                f"batch re-encoded as {target.name} is {len(built)} bytes, over max.message.bytes {config.max_message_bytes}",
                position=position,
            )
        out += built
        if batch_max > max_ts:
            max_ts, offset_of_max = batch_max, last
        offset, count = last + 1, count + n
    return ValidatedRecords((out,), next_offset, offset - 1, max_ts, offset_of_max, now if log_append else NO_TIMESTAMP, count, target)


def _rebuild_one(
    batch: FileBatch, position: int, base: int, config: LogConfig, leader_epoch: int, now: int,
    log_append: bool, target: CompressionType, topic_partition: object,
) -> tuple[bytes, int, int, int]:
    """One pass over the records, re-encoding each as it is decoded (no list of them is held);
    the legacy checks (keys of a compacted topic, timestamps) are raised after it."""
    legacy = batch.magic < 2
    if legacy and not batch.inner_magics_match:  # type: ignore[union-attr]  # legacy here
        raise InvalidRecordError(
            f"inner message magic differs from wrapper magic {batch.magic} (KAFKA-4298 data is read, not accepted)",
            topic_partition=topic_partition, position=position)
    builder = BatchBuilder(
        compression=target,
        compression_level=_level(config, target),
        base_offset=base,
        partition_leader_epoch=leader_epoch,
        producer_id=batch.producer_id,
        producer_epoch=batch.producer_epoch,
        base_sequence=batch.base_sequence,
        is_transactional=batch.is_transactional,
        is_control=batch.is_control,  # a coordinator's marker stays a marker on a topic with a codec
        timestamp_type=TimestampType.LOG_APPEND_TIME if log_append else TimestampType.CREATE_TIME,
        log_append_time=now if log_append else None,
    )
    count, keyless = 0, []
    low, high, latest = _LONG_MAX, NO_TIMESTAMP, None  # latest: the max over every record, stamped or not
    for delta, record in enumerate(batch.records()):
        builder.append(base + delta, record.timestamp, record.key, record.value, record.headers)
        count += 1
        timestamp = record.timestamp
        latest = timestamp if latest is None else max(latest, timestamp)
        if timestamp != NO_TIMESTAMP:
            low, high = min(low, timestamp), max(high, timestamp)
        if record.key is None:
            keyless.append((delta, "record has no key"))
    if legacy and config.compact and keyless:  # v2: checked on its summary
        raise InvalidRecordError("compacted topic cannot accept message without key",
                                 topic_partition=topic_partition, record_errors=keyless)
    if legacy:
        _check_timestamps(low, high, batch, position, config, now, log_append)
    last = base + max(count - 1, 0)
    batch_max = now if log_append else (NO_TIMESTAMP if latest is None else latest)
    return builder.build(), last, batch_max, count


def _level(config: LogConfig, codec: CompressionType) -> int | None:
    levels = {
        CompressionType.GZIP: config.compression_gzip_level,
        CompressionType.LZ4: config.compression_lz4_level,
        CompressionType.ZSTD: config.compression_zstd_level,
    }
    level = levels.get(codec)
    return None if level is None or level == -1 else level


# --- the common case in one pass -------------------------------------------------------------

_CODEC_MASK = COMPRESSION_CODEC_MASK
_UNCOMPRESSED = CompressionType.NONE
_new_tuple = tuple.__new__  # CheckedBatch._make without its length check (one per produced batch)


class CheckedBatch(NamedTuple):
    """A produced batch that passed the leader's check (:func:`validate_produced_batch`): what
    writing it and the bookkeeping after need, and nothing the append must look up again."""

    last_offset_delta: int
    max_timestamp: int
    record_count: int
    codec: CompressionType
    producer: tuple[int, int, int] | None  # (producer id, epoch, base sequence) of an idempotent batch
_LOG_APPEND_TIME_OR_CONTROL = TIMESTAMP_TYPE_MASK | CONTROL_FLAG_MASK  # attributes that need the general path


@dataclass(frozen=True, slots=True)
class LeaderRules:
    """The topic config as :func:`validate_produced_batch` reads it, taken once per config."""

    max_message_bytes: int
    compact: bool
    before_max_ms: int
    after_max_ms: int
    codecs: tuple[CompressionType | None, ...]  # by codec id 0-7: the codec, when its batches keep it

    @classmethod
    def of(cls, config: LogConfig) -> LeaderRules | None:
        """None when no produced batch can be written as it came: LogAppendTime topics re-stamp
        (and so copy) every batch."""
        if config.message_timestamp_type == "LogAppendTime":
            return None
        target = None if config.compression_type == "producer" else CompressionType.from_name(config.compression_type)
        codecs = tuple(codec if target is None or codec == target else None for codec in CompressionType)
        return cls(config.max_message_bytes, config.compact, config.message_timestamp_before_max_ms,
                   config.message_timestamp_after_max_ms, codecs + (None,) * (8 - len(codecs)))


def validate_produced_batch(
    records: bytes | bytearray | memoryview, rules: LeaderRules, now: int
) -> CheckedBatch | None:
    """A :class:`CheckedBatch` when ``records`` is exactly one
    v2 batch, not transactional, that :func:`analyze_batches` and :func:`assign_offsets` accept
    as a leader's CLIENT append and would write as it is (offsets and leader epoch patched,
    nothing re-stamped or re-encoded); else None, and the caller runs those two, which raise or
    rebuild. ``now``: the broker time for the timestamp bounds. A batch with a producer id
    (idempotent) passes only uncompressed and as ``bytes``; its sequence is the caller's to
    check against producer state.

    An uncompressed ``bytes`` batch (the common case) is checked by one kernel call that reads
    the header, the CRC (crc32c here above a few KiB) and every record: about 1 us for one
    record. A compressed batch, or another buffer type, by :func:`_validate_in_python`.
    """
    if type(records) is bytes and rules.codecs[0] is not None:
        size = len(records)
        # A large batch's CRC is crc32c's, after the kernel: the kernel's record walk brings the
        # batch into the cache with many loads in flight, then crc32c reads it at full speed
        # (the other order costs a large append 2-4 us). The answer is the same either way.
        crc_checked = size >= CRC_IN_KERNEL_BELOW
        status, delta, max_timestamp, count = (_CHECK or _checker())(
            records, size, crc_checked, rules.max_message_bytes, rules.compact, rules.before_max_ms,
            rules.after_max_ms, now)
        if status == PRODUCED_OK or status == PRODUCED_IDEMPOTENT:
            if crc_checked and not stored_crc_matches(records):
                return None
            # An idempotent batch: a producer id, the sign bit of its first byte clear.
            producer = None if status == PRODUCED_OK else PRODUCER_FIELDS.unpack_from(records, PRODUCER_ID_OFFSET)
            return _new_tuple(CheckedBatch, (delta, max_timestamp, count, _UNCOMPRESSED, producer))
        if status != PRODUCED_COMPRESSED:
            return None
    return _validate_in_python(records, rules, now)


def _validate_in_python(
    records: bytes | bytearray | memoryview, rules: LeaderRules, now: int
) -> CheckedBatch | None:
    """:func:`validate_produced_batch` for any batch and buffer: the same rules as the kernel
    (``_scan_kernels.check_produced_batch``), plus the inner offsets of compressed batches."""
    size = len(records)
    if size < RECORD_BATCH_OVERHEAD:
        return None
    header = HEADER.unpack_from(records)
    base_offset, length, _, magic, _, attributes, delta, _, max_timestamp, producer_id, _, _, count = header
    if (magic != 2 or base_offset != 0 or length + 12 != size or size > rules.max_message_bytes
            or attributes & _LOG_APPEND_TIME_OR_CONTROL or count <= 0 or delta + 1 != count
            or producer_id >= 0):  # producer state (idempotence) is checked on the general path
        return None
    codec = rules.codecs[attributes & _CODEC_MASK]
    if codec is None or not stored_crc_matches(records):
        return None
    summary = _summary(records, decompressed_records_limit(rules.max_message_bytes))
    if summary is None:
        return None
    low, high, keyless, sequential = summary
    if high != max_timestamp or (keyless and rules.compact) or (codec and not sequential):
        return None
    if timestamp_out_of_bounds(low, high, now, rules.before_max_ms, rules.after_max_ms) is not None:
        return None
    return CheckedBatch(delta, max_timestamp, count, codec, None)


_CHECK: Callable[..., tuple[int, int, int, int]] | None = None


def _checker() -> Callable[..., tuple[int, int, int, int]]:
    global _CHECK
    _CHECK = produced_batch_checker()
    return _CHECK


def _summary(records: bytes | bytearray | memoryview, max_decompressed: int) -> tuple[int, int, int, bool] | None:
    """``(min timestamp, max timestamp, keyless, sequential)`` of the batch's records through
    :func:`summarize_batch_records` (decompressing at most ``max_decompressed`` bytes; any buffer
    type), or None when they do not decode (the general path then raises what the failure was)."""
    try:
        summary = summarize_batch_records(RecordBatch(records), max_decompressed=max_decompressed)
    except Exception:  # noqa: BLE001 - any failure is reported by the general path, which meets it too
        return None
    return summary.min_timestamp, summary.max_timestamp, summary.keyless, summary.sequential_offsets


__all__ = [
    "AnalyzedBatches",
    "ValidatedRecords",
    "analyze_batches",
    "assign_offsets",
    "check_offsets_in_order",
    "CheckedBatch",
    "LeaderRules",
    "validate_produced_batch",
    "CorruptRecordError",
    "RecordBatch",
]
