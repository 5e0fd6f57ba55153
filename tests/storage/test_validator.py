"""Append validation and offset assignment (Kafka's LogValidator rules, kafka-storage.md §3.1)."""

from __future__ import annotations

import pytest
from storage_helpers import T0, MakeLog, batch, batches_of, log_config, read_all

from tidelog.errors import (
    CorruptRecordError,
    InvalidRecordError,
    InvalidTimestampError,
    OffsetsOutOfOrderError,
    RecordTooLargeError,
)
from tidelog.records import (
    CompressionType,
    RecordBatch,
    TimestampType,
    build_end_txn_marker_batch,
    build_legacy_batch,
    set_max_timestamp,
)
from tidelog.storage.append_info import AppendOrigin
from tidelog.storage.config import LogConfig
from tidelog.storage.validator import ValidatedRecords, analyze_batches, assign_offsets, check_offsets_in_order

CLIENT, COORDINATOR, REPLICATION = AppendOrigin.CLIENT, AppendOrigin.COORDINATOR, AppendOrigin.REPLICATION
ALL_CODECS = [CompressionType.NONE, CompressionType.GZIP, CompressionType.SNAPPY, CompressionType.LZ4,
              CompressionType.ZSTD]
HOUR = 3_600_000


def validate(
    data: bytes, config: LogConfig | None = None, *, now: int = T0, next_offset: int = 0,
    origin: AppendOrigin = CLIENT, leader_epoch: int = 0,
) -> ValidatedRecords:
    config = config or LogConfig.defaults()
    analyzed = analyze_batches(data, origin=origin, max_message_bytes=config.max_message_bytes)
    return assign_offsets(analyzed, next_offset=next_offset, config=config, now=now, origin=origin,
                          leader_epoch=leader_epoch, topic_partition="topic-0")


def only_batch(validated: ValidatedRecords) -> RecordBatch:
    [b] = batches_of(validated.to_bytes())
    assert isinstance(b, RecordBatch)
    return b


# --- shallow checks -------------------------------------------------------------------------

def test_analyze_reports_offsets_sizes_and_trims_a_partial_tail() -> None:
    first, second = batch(b"a", b"b", base_offset=5), batch(b"c", base_offset=7, timestamp=T0 + 9)
    analyzed = analyze_batches(first + second + second[:20], origin=REPLICATION, max_message_bytes=10**9)
    assert analyzed.valid_bytes == len(first) + len(second)
    assert (analyzed.first_offset, analyzed.last_offset) == (5, 7)
    assert (analyzed.max_timestamp, analyzed.shallow_offset_of_max_timestamp) == (T0 + 9, 7)
    assert analyzed.offsets_monotonic and len(analyzed.batches) == 2


def test_offsets_not_increasing_are_flagged_for_appends_that_keep_offsets() -> None:
    data = batch(b"a", base_offset=3) + batch(b"b", base_offset=3)
    analyzed = analyze_batches(data, origin=REPLICATION, max_message_bytes=10**9)
    assert not analyzed.offsets_monotonic
    with pytest.raises(OffsetsOutOfOrderError):
        check_offsets_in_order(analyzed)


def test_producer_batch_with_non_zero_base_offset_is_invalid() -> None:
    with pytest.raises(InvalidRecordError) as e:
        validate(batch(b"a", base_offset=1))
    assert e.value.position == 0
    # replicas and the coordinator keep their offsets
    assert analyze_batches(batch(b"a", base_offset=1), origin=REPLICATION, max_message_bytes=10**9).first_offset == 1


def test_crc_mismatch_is_corrupt_record_naming_the_batch_position() -> None:
    good = batch(b"a")
    bad = bytearray(batch(b"b", base_offset=1))
    bad[-2] ^= 1
    with pytest.raises(CorruptRecordError) as e:
        analyze_batches(good + bytes(bad), origin=REPLICATION, max_message_bytes=10**9)
    assert e.value.position == len(good)


def test_max_message_bytes_counts_the_whole_batch_with_log_overhead() -> None:
    data = batch(b"x" * 100)
    analyze_batches(data, origin=CLIENT, max_message_bytes=len(data))
    with pytest.raises(RecordTooLargeError):
        analyze_batches(data, origin=CLIENT, max_message_bytes=len(data) - 1)
    analyze_batches(data, origin=REPLICATION, max_message_bytes=len(data) - 1)


@pytest.mark.parametrize("codec", ALL_CODECS[1:])
def test_a_compressed_batch_must_fit_max_message_bytes_as_it_would_uncompressed(make_log: MakeLog,
                                                                                codec: CompressionType) -> None:
    plain = batch(b"tidelog " * 20_000)  # ~160 KB of records that compress to a few KB
    packed = batch(b"tidelog " * 20_000, compression=codec)
    assert len(packed) < len(plain) // 10
    validate(packed, log_config(max_message_bytes=len(plain)))
    with pytest.raises(RecordTooLargeError, match="decompresses to more than"):
        validate(packed, log_config(max_message_bytes=len(plain) - 1))
    log = make_log(max_message_bytes=len(plain) - 1)  # the one-pass check of a produced batch too
    with pytest.raises(RecordTooLargeError):
        log.append_as_leader(packed)
    assert log.log_end_offset == 0
    log.update_config(log_config(max_message_bytes=len(plain)))
    log.append_as_leader(packed)
    assert log.log_end_offset == 1


# --- producer batch rules -------------------------------------------------------------------

def test_producer_may_send_only_one_batch() -> None:
    with pytest.raises(InvalidRecordError):
        validate(batch(b"a") + batch(b"b"))


def test_producer_batch_count_must_match_offset_delta() -> None:
    from tidelog.records import BatchBuilder

    b = BatchBuilder()
    b.append(0, T0, b"k", b"v")
    b.append(1, T0, b"k", b"v")
    with pytest.raises(InvalidRecordError):
        validate(b.build(last_offset_delta=5))


def test_producer_may_not_write_control_batches() -> None:
    marker = build_end_txn_marker_batch(
        commit=True, base_offset=0, producer_id=7, producer_epoch=0, coordinator_epoch=1, timestamp=T0,
    )
    with pytest.raises(InvalidRecordError):
        validate(marker)


def test_idempotent_batch_needs_a_base_sequence() -> None:
    with pytest.raises(InvalidRecordError):
        validate(batch(b"a", producer_id=9, producer_epoch=0, base_sequence=-1))
    validated = validate(batch(b"a", producer_id=9, producer_epoch=0, base_sequence=0))
    b = only_batch(validated)
    assert (b.producer_id, b.producer_epoch, b.base_sequence) == (9, 0, 0)


def test_coordinator_may_write_control_batches() -> None:
    marker = build_end_txn_marker_batch(
        commit=False, base_offset=0, producer_id=7, producer_epoch=0, coordinator_epoch=1, timestamp=T0,
    )
    validated = validate(marker, origin=COORDINATOR, next_offset=40)
    assert only_batch(validated).is_control and validated.first_offset == 40


# --- compacted topics -----------------------------------------------------------------------

def test_compacted_topic_rejects_keyless_records_with_their_index() -> None:
    config = log_config(cleanup_policy="compact")
    with pytest.raises(InvalidRecordError) as e:
        validate(batch(b"v", keys=[None]), config)
    assert [i for i, _ in e.value.record_errors] == [0]
    with pytest.raises(InvalidRecordError) as e:
        validate(batch(b"v", b"w", b"x", keys=[b"k", None, None], compression=CompressionType.GZIP), config)
    assert [i for i, _ in e.value.record_errors] == [1, 2]
    validate(batch(b"v", keys=[b"k"], compression=CompressionType.GZIP), config)


def test_compacted_topic_rejects_keyless_records_when_recompressing() -> None:
    config = log_config(cleanup_policy="compact", compression_type="zstd")
    with pytest.raises(InvalidRecordError) as e:
        validate(batch(b"v", b"w", keys=[b"k", None]), config)
    assert [i for i, _ in e.value.record_errors] == [1]


def test_compacted_topic_constraints_through_the_log(make_log: MakeLog) -> None:
    log = make_log(cleanup_policy="compact")
    with pytest.raises(InvalidRecordError):
        log.append_as_leader(batch(b"hello", keys=[None]))
    with pytest.raises(InvalidRecordError):
        log.append_as_leader(batch(b"a", b"b", keys=[b"k", None], compression=CompressionType.GZIP))
    assert log.log_end_offset == 0
    log.append_as_leader(batch(b"hello", keys=[b"key"]))
    assert log.log_end_offset == 1


def test_keyless_records_are_fine_for_delete_topics() -> None:
    validated = validate(batch(b"v", keys=[None]))
    assert next(only_batch(validated).records()).key is None


# --- timestamps -----------------------------------------------------------------------------

def test_timestamp_before_max_ms_bounds_old_records() -> None:
    config = log_config(message_timestamp_before_max_ms=1000)
    validate(batch(b"a", timestamp=T0 - 1000), config)
    with pytest.raises(InvalidTimestampError):
        validate(batch(b"a", timestamp=T0 - 1001), config)


def test_timestamp_after_max_ms_bounds_future_records() -> None:
    validate(batch(b"a", timestamp=T0 + HOUR))  # default after.max.ms: 1 hour (Kafka 4.0)
    with pytest.raises(InvalidTimestampError):
        validate(batch(b"a", timestamp=T0 + HOUR + 1))
    config = log_config(message_timestamp_after_max_ms=10)
    with pytest.raises(InvalidTimestampError):
        validate(batch(b"a", b"b", timestamps=[T0, T0 + 11]), config)


def test_records_without_timestamp_skip_the_bounds() -> None:
    config = log_config(message_timestamp_before_max_ms=0, message_timestamp_after_max_ms=0)
    assert validate(batch(b"a", timestamp=-1), config).max_timestamp == -1


def test_default_bounds_accept_ancient_timestamps() -> None:
    validate(batch(b"a", timestamp=0))


def test_one_bad_record_fails_the_whole_batch(make_log: MakeLog) -> None:
    log = make_log(message_timestamp_before_max_ms=10)
    with pytest.raises(InvalidTimestampError):
        log.append_as_leader(batch(b"a", b"b", b"c", timestamps=[T0, T0 - 11, T0]))
    assert log.log_end_offset == 0


def test_create_time_topic_takes_max_timestamp_from_the_records() -> None:
    data = bytearray(batch(b"a", b"b", timestamps=[T0 + 3, T0 + 8]))
    set_max_timestamp(data, TimestampType.CREATE_TIME, T0 + 1)  # a producer that lied in the header
    validated = validate(bytes(data), next_offset=10)
    b = only_batch(validated)
    assert b.max_timestamp == T0 + 8 and b.is_valid()
    assert (validated.max_timestamp, validated.shallow_offset_of_max_timestamp) == (T0 + 8, 11)


@pytest.mark.parametrize("codec", ALL_CODECS)
def test_log_append_time_stamps_broker_time(codec: CompressionType) -> None:
    config = log_config(message_timestamp_type="LogAppendTime")
    validated = validate(batch(b"a", b"b", timestamps=[5, 6], compression=codec), config, now=T0 + 42)
    b = only_batch(validated)
    assert b.timestamp_type == TimestampType.LOG_APPEND_TIME and b.max_timestamp == T0 + 42
    assert b.is_valid() and b.compression == codec
    assert [r.timestamp for r in b.records()] == [T0 + 42, T0 + 42]
    assert validated.log_append_time == T0 + 42 and validated.max_timestamp == T0 + 42


def test_log_append_time_ignores_timestamp_bounds() -> None:
    config = log_config(message_timestamp_type="LogAppendTime", message_timestamp_before_max_ms=0)
    validate(batch(b"a", timestamp=0), config)


def test_producer_batch_flagged_log_append_time_is_rejected_on_log_append_time_topic() -> None:
    data = batch(b"a", timestamp_type=TimestampType.LOG_APPEND_TIME, log_append_time=T0)
    with pytest.raises(InvalidTimestampError):
        validate(data, log_config(message_timestamp_type="LogAppendTime"))


def test_producer_batch_flagged_log_append_time_without_timestamp_is_rejected() -> None:
    data = batch(b"a", timestamp_type=TimestampType.LOG_APPEND_TIME, log_append_time=-1)
    with pytest.raises(InvalidTimestampError):
        validate(data)


def test_producer_batch_flagged_log_append_time_on_create_time_topic_is_bounds_checked() -> None:
    # Kafka (LogValidator.validateTimestamp): on a CreateTime topic a record with a timestamp is
    # only checked against the bounds; the LogAppendTime flag is rejected only without one.
    ok = batch(b"a", timestamp_type=TimestampType.LOG_APPEND_TIME, log_append_time=T0 - 5)
    b = only_batch(validate(ok))
    assert b.timestamp_type == TimestampType.CREATE_TIME and b.max_timestamp == T0 - 5 and b.is_valid()
    late = batch(b"a", timestamp_type=TimestampType.LOG_APPEND_TIME, log_append_time=T0 + HOUR + 1)
    with pytest.raises(InvalidTimestampError):
        validate(late)


# --- in-place assignment vs rebuild ---------------------------------------------------------

@pytest.mark.parametrize("codec", ALL_CODECS)
def test_same_codec_is_assigned_in_place(codec: CompressionType) -> None:
    data = batch(b"a", b"b", b"c", compression=codec, partition_leader_epoch=-1)
    validated = validate(data, next_offset=100, leader_epoch=6)
    out = validated.to_bytes()
    # only baseOffset and partitionLeaderEpoch change; everything the CRC covers is untouched
    assert out[17:] == data[17:] and len(out) == len(data)
    b = only_batch(validated)
    assert (b.base_offset, b.last_offset, b.partition_leader_epoch) == (100, 102, 6)
    assert [r.offset for r in b.records()] == [100, 101, 102]
    assert (validated.first_offset, validated.last_offset, validated.record_count) == (100, 102, 3)


@pytest.mark.parametrize(("source", "target"), [
    (CompressionType.NONE, "gzip"), (CompressionType.GZIP, "uncompressed"), (CompressionType.LZ4, "zstd"),
    (CompressionType.SNAPPY, "lz4"), (CompressionType.ZSTD, "snappy"),
])
def test_topic_compression_type_reencodes_batches(source: CompressionType, target: str) -> None:
    config = log_config(compression_type=target)
    data = batch(b"alpha", b"beta", None, keys=[b"a", b"b", b"c"], timestamps=[T0, T0 + 1, T0 + 2],
                 compression=source, producer_id=3, producer_epoch=1, base_sequence=10)
    validated = validate(data, config, next_offset=50, leader_epoch=2)
    b = only_batch(validated)
    expected_codec = CompressionType.NONE if target == "uncompressed" else CompressionType.from_name(target)
    assert b.compression == expected_codec == validated.target_compression
    assert b.is_valid() and (b.base_offset, b.last_offset, b.partition_leader_epoch) == (50, 52, 2)
    assert (b.producer_id, b.producer_epoch, b.base_sequence) == (3, 1, 10)
    assert [(r.offset, r.timestamp, r.key, r.value) for r in b.records()] == [
        (50, T0, b"a", b"alpha"), (51, T0 + 1, b"b", b"beta"), (52, T0 + 2, b"c", None),
    ]


def test_reencoded_batch_is_checked_against_max_message_bytes() -> None:
    value = __import__("random").Random(0).randbytes(2000)  # incompressible: gzip adds its framing
    data = batch(value, compression=CompressionType.NONE)
    config = log_config(compression_type="gzip", max_message_bytes=len(data))
    with pytest.raises(RecordTooLargeError):
        validate(data, config)


def test_codec_change_through_the_log_is_read_back(make_log: MakeLog) -> None:
    log = make_log(compression_type="zstd", message_timestamp_type="LogAppendTime")
    log.append_as_leader(batch(b"x" * 300, b"y" * 300, keys=[b"1", b"2"]))
    [on_disk] = batches_of(log.dir.joinpath("00000000000000000000.log").read_bytes())
    assert on_disk.compression == CompressionType.ZSTD and on_disk.is_valid()
    assert on_disk.timestamp_type == TimestampType.LOG_APPEND_TIME
    assert [(r.key, r.value, r.timestamp) for r in read_all(log)] == [(b"1", b"x" * 300, T0), (b"2", b"y" * 300, T0)]


@pytest.mark.parametrize("codec", [CompressionType.NONE, CompressionType.GZIP])
def test_legacy_producer_batch_is_converted_to_v2(codec: CompressionType) -> None:
    data = build_legacy_batch([(0, T0, b"a", b"1"), (1, T0 + 1, b"b", b"2")], magic=1, compression=codec)
    validated = validate(data, next_offset=7, leader_epoch=1)
    found = batches_of(validated.to_bytes())
    assert all(isinstance(b, RecordBatch) and b.is_valid() for b in found)
    assert [(r.offset, r.timestamp, r.key, r.value) for b in found for r in b.records()] == [
        (7, T0, b"a", b"1"), (8, T0 + 1, b"b", b"2"),
    ]
    assert (validated.first_offset, validated.last_offset) == (7, 8)


def test_a_wrapper_with_inner_messages_of_another_magic_is_refused_on_append() -> None:
    """KAFKA-4298 data is read (old brokers wrote it; the cleaner rewrites it) but not accepted."""
    from tidelog.records import encode_legacy_message
    from tidelog.records.compression import compress

    inner = encode_legacy_message(0, 0, 0, -1, b"k", b"v")
    wrapper = encode_legacy_message(0, 1, int(CompressionType.GZIP), T0, None, compress(CompressionType.GZIP, inner))
    with pytest.raises(InvalidRecordError, match="inner message magic"):
        validate(wrapper)


def test_v2_batches_appended_after_a_legacy_entry_get_the_record_checks_too() -> None:
    """A legacy entry in an append used to send the v2 batches through the rebuild, which checked
    timestamps of legacy records only."""
    legacy = build_legacy_batch([(0, T0, b"k", b"v")], magic=1)
    future = batch(b"v", timestamp=T0 + 10 * 24 * HOUR)
    with pytest.raises(InvalidTimestampError):
        validate(future)
    config = LogConfig.from_props(overrides={"message.timestamp.after.max.ms": str(HOUR)})
    with pytest.raises(InvalidTimestampError):
        validate(legacy + future, config, origin=REPLICATION)
