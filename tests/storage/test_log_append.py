"""Appending to a partition log: UnifiedLogTest's append scenarios (kafka-storage.md §3.1, §4.6)."""

from __future__ import annotations

import pytest
from storage_helpers import T0, MakeLog, batch, batches_of, file_batches, read_all, records

from tidelog.errors import (
    CorruptRecordError,
    OffsetsOutOfOrderError,
    RecordBatchTooLargeError,
    RecordTooLargeError,
    StorageError,
    UnexpectedAppendOffsetError,
)
from tidelog.records import CompressionType, LegacyBatch, build_legacy_batch
from tidelog.storage import files
from tidelog.storage.checkpoints import LEADER_EPOCH_CHECKPOINT_FILE, LeaderEpochCheckpointFile
from tidelog.storage.fetch_info import FetchIsolation
from tidelog.testing import FakeClock

INT_MAX = 2**31 - 1


def test_append_info_first_offset_follows_log_end(make_log: MakeLog) -> None:
    log = make_log()
    three = batch(b"a", b"b", b"c")
    assert log.append_as_leader(three).first_offset == 0
    assert log.append_as_leader(three).first_offset == 3
    log.roll()
    info = log.append_as_leader(three)
    assert (info.first_offset, info.last_offset, info.record_count) == (6, 8, 3)
    assert log.log_end_offset == 9


def test_leader_append_assigns_offsets_and_leader_epoch_on_disk(make_log: MakeLog) -> None:
    log = make_log()
    log.append_as_leader(records(2), leader_epoch=3)
    log.append_as_leader(records(3), leader_epoch=5)
    on_disk = batches_of(files.log_file(log.dir, 0).read_bytes())
    assert [(b.base_offset, b.last_offset, b.partition_leader_epoch) for b in on_disk] == [(0, 1, 3), (2, 4, 5)]
    assert all(b.is_valid() for b in on_disk)
    assert [(e.epoch, e.start_offset) for e in log.leader_epoch_cache.entries] == [(3, 0), (5, 2)]
    checkpoint = LeaderEpochCheckpointFile(log.dir / LEADER_EPOCH_CHECKPOINT_FILE).read()
    assert [(e.epoch, e.start_offset) for e in checkpoint] == [(3, 0), (5, 2)]


def test_append_info_reports_sizes_timestamps_and_codec(make_log: MakeLog) -> None:
    log = make_log()
    data = batch(b"x", b"y", timestamps=[T0 + 5, T0 + 9], compression=CompressionType.LZ4)
    info = log.append_as_leader(data)
    assert info.appended and info.valid_bytes == len(data)
    assert (info.max_timestamp, info.shallow_offset_of_max_timestamp) == (T0 + 9, 1)
    assert info.source_compression == info.target_compression == CompressionType.LZ4
    assert info.log_append_time == -1 and info.log_start_offset == 0 and info.next_offset == 2


def test_message_set_larger_than_segment_bytes_is_rejected(make_log: MakeLog) -> None:
    log = make_log(segment_bytes=100)
    data = records(5, value_size=40)
    assert len(data) > 100
    with pytest.raises(RecordBatchTooLargeError):
        log.append_as_leader(data)
    assert log.log_end_offset == 0 and log.size == 0


def test_batch_larger_than_max_message_bytes_is_rejected_for_leader_but_not_follower(make_log: MakeLog) -> None:
    data = records(1, value_size=200)
    log = make_log(max_message_bytes=len(data) - 1)
    with pytest.raises(RecordTooLargeError):
        log.append_as_leader(data)
    assert log.log_end_offset == 0
    info = log.append_as_follower(data)
    assert info.appended and log.log_end_offset == 1


def test_batch_of_exactly_max_message_bytes_is_accepted(make_log: MakeLog) -> None:
    data = records(1, value_size=200)
    log = make_log(max_message_bytes=len(data))
    assert log.append_as_leader(data).appended


def test_append_message_with_null_payload_reads_back_null(make_log: MakeLog) -> None:
    log = make_log()
    log.append_as_leader(batch(None, keys=[b"key"]))
    [rec] = read_all(log)
    assert (rec.offset, rec.key, rec.value) == (0, b"key", None)


def test_append_with_no_timestamp_is_accepted(make_log: MakeLog) -> None:
    log = make_log()
    info = log.append_as_leader(batch(b"v", timestamp=-1))
    assert info.appended and info.max_timestamp == -1
    assert read_all(log)[0].timestamp == -1


def test_empty_and_partial_appends_write_nothing(make_log: MakeLog) -> None:
    log = make_log()
    for data in (b"", records(2)[:30]):
        info = log.append_as_leader(data)
        assert not info.appended and (info.first_offset, info.last_offset) == (-1, -1)
        assert log.append_as_follower(data).appended is False
    assert log.log_end_offset == 0 and log.size == 0


def test_trailing_partial_batch_is_trimmed(make_log: MakeLog) -> None:
    log = make_log()
    whole = records(2)
    info = log.append_as_follower(whole + records(3, base_offset=2)[:40])
    assert info.valid_bytes == len(whole) and log.log_end_offset == 2 and log.size == len(whole)


def test_corrupt_batch_is_rejected_and_nothing_is_written(make_log: MakeLog) -> None:
    log = make_log()
    data = bytearray(records(3))
    data[-1] ^= 0xFF  # a records byte: the CRC no longer matches
    with pytest.raises(CorruptRecordError, match="computed crc"):
        log.append_as_leader(bytes(data))
    with pytest.raises(CorruptRecordError, match="computed crc"):
        log.append_as_follower(bytes(data))
    assert log.log_end_offset == 0 and log.size == 0


def test_append_to_closed_log_is_a_storage_error(make_log: MakeLog) -> None:
    log = make_log()
    log.close()
    with pytest.raises(StorageError):
        log.append_as_leader(records(1))


def test_flush_messages_flushes_and_moves_recovery_point(make_log: MakeLog) -> None:
    log = make_log(flush_messages=3)
    log.append_as_leader(records(2))
    assert log.recovery_point == 0
    log.append_as_leader(records(1))
    assert log.recovery_point == 3
    log.append_as_leader(records(1))
    assert log.recovery_point == 3


# --- follower appends -------------------------------------------------------------------------

def test_follower_appends_keep_offsets_and_epochs_with_gaps(make_log: MakeLog) -> None:
    log = make_log(segment_bytes=200)
    ids = [*range(50), *range(50, 200, 7)]
    for i in ids:
        log.append_as_follower(batch(str(i).encode(), base_offset=i, partition_leader_epoch=i // 100))
    assert log.log_end_offset == ids[-1] + 1
    got = read_all(log)
    assert [r.offset for r in got] == ids and [r.value for r in got] == [str(i).encode() for i in ids]
    assert [(e.epoch, e.start_offset) for e in log.leader_epoch_cache.entries] == [(0, 0), (1, 106)]
    for i in range(ids[-1] + 1):  # any offset reads the first record at or after it
        first = read_all(log, i)[0].offset
        assert first == min(o for o in ids if o >= i)


def test_follower_append_with_out_of_order_offsets_is_rejected(make_log: MakeLog) -> None:
    log = make_log()
    data = b"".join(batch(b"value", keys=[b"key"], base_offset=o) for o in (0, 1, 3, 2, 4))
    with pytest.raises(OffsetsOutOfOrderError):
        log.append_as_follower(data)
    assert log.log_end_offset == 0


LEGACY_AND_V2 = [(m, c) for m in (0, 1, 2) for c in (CompressionType.NONE, CompressionType.LZ4)]


def three_records_at(offset: int, magic: int, codec: CompressionType) -> bytes:
    if magic == 2:
        return batch(b"v1", b"v2", b"v3", keys=[b"k1", b"k2", b"k3"], base_offset=offset, compression=codec)
    messages = [(offset + i, T0, b"k%d" % i, b"v%d" % i) for i in range(3)]
    return build_legacy_batch(messages, magic=magic, compression=codec)


@pytest.mark.parametrize(("magic", "codec"), LEGACY_AND_V2)
def test_follower_append_below_log_end_is_rejected(make_log: MakeLog, magic: int, codec: CompressionType) -> None:
    log = make_log()
    log.append_as_leader(batch(b"0"))
    log.append_as_leader(batch(b"1"))
    with pytest.raises(UnexpectedAppendOffsetError):
        log.append_as_follower(three_records_at(1, magic, codec))
    assert log.log_end_offset == 2


@pytest.mark.parametrize(("magic", "codec"), LEGACY_AND_V2)
def test_follower_append_to_empty_log_below_log_start_reports_first_and_last_offset(
    make_log: MakeLog, magic: int, codec: CompressionType
) -> None:
    log = make_log()
    log.truncate_fully_and_start_at(7)
    assert (log.log_start_offset, log.log_end_offset) == (7, 7)
    with pytest.raises(UnexpectedAppendOffsetError) as e:
        log.append_as_follower(three_records_at(4, magic, codec))
    assert (e.value.first_offset, e.value.last_offset) == (4, 6)


def test_follower_append_of_legacy_batches_keeps_their_bytes(make_log: MakeLog) -> None:
    log = make_log()
    data = build_legacy_batch([(0, T0, b"a", b"1"), (1, T0 + 1, b"b", b"2")], magic=1, compression=CompressionType.GZIP)
    log.append_as_follower(data)
    assert files.log_file(log.dir, 0).read_bytes() == data
    assert [(r.offset, r.value) for r in read_all(log)] == [(0, b"1"), (1, b"2")]
    [found] = batches_of(data)
    assert isinstance(found, LegacyBatch)


def test_time_index_built_for_follower_appends(make_log: MakeLog, clock: FakeClock) -> None:
    log = make_log(segment_bytes=10_000, index_interval_bytes=1)
    now = clock.milliseconds()
    for i in range(100):
        log.append_as_follower(batch(str(i).encode(), base_offset=100 + i, timestamp=now + i))
    assert sum(s.time_index.entries for s in log.segments) == 99
    assert log.active_segment.time_index.last_entry.timestamp == now + 99


def test_a_multi_batch_append_gets_one_index_entry_for_the_whole_chunk(make_log: MakeLog) -> None:
    log = make_log(index_interval_bytes=0)
    first = records(1)
    log.append_as_follower(first)
    log.append_as_follower(b"".join(batch(b"v", base_offset=o, timestamp=T0 + o) for o in range(1, 7)))
    # one append = one entry: the chunk's last offset at the chunk's first position (§1.12)
    index = log.active_segment.offset_index
    assert index.entries == 1
    assert (index.entry(0).offset, index.entry(0).position) == (6, len(first))
    assert log.active_segment.time_index.last_entry.offset == 6


def test_appends_across_segments_are_all_readable_in_order(make_log: MakeLog) -> None:
    log = make_log(segment_bytes=300, index_interval_bytes=50)
    expected = []
    for i in range(60):
        values = [b"r%d-%d" % (i, j) for j in range(1 + i % 3)]
        log.append_as_leader(batch(*values, timestamp=T0 + i))
        expected.extend(values)
    assert log.num_segments > 5
    assert [r.value for r in read_all(log)] == expected
    assert [r.offset for r in read_all(log)] == list(range(len(expected)))
    # every sealed segment holds whole batches only, contiguous in offsets
    next_offset = 0
    for segment in log.segments:
        on_disk = file_batches(segment.log.path)
        if on_disk:
            assert on_disk[0].base_offset == segment.base_offset == next_offset
            next_offset = on_disk[-1].last_offset + 1
    assert next_offset == log.log_end_offset


def test_high_watermark_is_not_moved_by_appends(make_log: MakeLog) -> None:
    log = make_log()
    log.append_as_leader(records(3))
    log.append_as_leader(records(2))
    assert log.high_watermark == 0
    assert read_all(log, 0, FetchIsolation.HIGH_WATERMARK) == []
    assert log.maybe_increment_high_watermark(3) == 3
    assert [r.offset for r in read_all(log, 0, FetchIsolation.HIGH_WATERMARK)] == [0, 1, 2]
    assert [r.offset for r in read_all(log, 0, FetchIsolation.LOG_END)] == [0, 1, 2, 3, 4]
