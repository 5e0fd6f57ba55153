"""Reads from one remote segment (remote/remote_read.py): the batches a local read would give,
whole, within the byte limit; ranged GETs only (a small fetch never downloads the whole
segment); framing and CRC checked with errors naming the object and the position; and the
search by timestamp agreeing with the local log's."""

from __future__ import annotations

from pathlib import Path

import pytest
from read_helpers import T0, CountingStore, local_batches, tiered_log

from tidelog.records import iter_batches
from tidelog.remote.index_cache import RemoteIndexCache
from tidelog.remote.metadata import RemoteFileKind, object_key
from tidelog.remote.remote_read import (
    INDEX_SLACK_BYTES,
    RemoteSegmentCorruptError,
    offset_for_timestamp,
    read_segment,
)
from tidelog.remote.store import ArrowRemoteStore


@pytest.fixture
def tiered(tmp_path: Path, store: ArrowRemoteStore, tip):
    log, copied = tiered_log(tmp_path / "orders-2", store, tip)
    cache = RemoteIndexCache(store, tmp_path / "cache", 1 << 30)
    yield log, copied, cache
    cache.close()
    log.close()


def _expected(log, segment, offset: int, max_bytes: int, min_one: bool) -> bytes:
    data = (log.dir / f"{segment.start_offset:020d}.log").read_bytes()
    batches = [b for b in local_batches(log, segment.start_offset) if b[3] >= offset]
    taken, total = [], 0
    for position, size, _, _ in batches:
        if total + size > max_bytes and not (min_one and not taken):
            break
        taken.append((position, size))
        total += size
    return b"".join(data[p:p + s] for p, s in taken)


@pytest.mark.parametrize("max_bytes", [1, 5000, 40_000, 1 << 20])
def test_reads_the_batches_a_local_read_holds(tiered, store, max_bytes: int) -> None:
    log, copied, cache = tiered
    for segment in copied:
        for offset in (segment.start_offset, segment.start_offset + 37, segment.end_offset - 3, segment.end_offset):
            with cache.indexes(segment) as idx:
                got = read_segment(store, segment, idx.offset, offset, max_bytes, True, partition="orders-2")
            expected = _expected(log, segment, offset, max_bytes, True)
            assert got.found and got.records == expected, (segment.start_offset, offset)
            assert len(got.records) <= max(max_bytes, len(expected))
            assert got.next_offset > offset


def test_min_one_message_gives_the_first_batch_whole_or_nothing(tiered, store) -> None:
    log, copied, cache = tiered
    segment = copied[1]
    with cache.indexes(segment) as idx:
        one = read_segment(store, segment, idx.offset, segment.start_offset + 15, 10, True, partition="p")
        none = read_segment(store, segment, idx.offset, segment.start_offset + 15, 10, False, partition="p")
        zero = read_segment(store, segment, idx.offset, segment.start_offset + 15, 0, False, partition="p")
    first = [b for b in local_batches(log, segment.start_offset) if b[3] >= segment.start_offset + 15][0]
    assert len(one.records) == first[1] > 10 and one.next_offset == first[3] + 1
    assert none.records == b"" and none.next_offset == -1
    assert zero.records == b"" and zero.gets == 0, "no byte asked for: no GET"


def test_a_small_fetch_does_not_download_the_segment(tiered, store, tmp_path: Path) -> None:
    _, copied, _ = tiered
    counting = CountingStore(store)
    cache = RemoteIndexCache(counting, tmp_path / "cache2", 1 << 30)
    segment = copied[2]
    assert segment.segment_size_in_bytes > 350_000
    with cache.indexes(segment) as idx:
        got = read_segment(counting, segment, idx.offset, segment.start_offset + 200, 20_000, True, partition="p")
    assert 0 < len(got.records) <= 20_000
    assert counting.range_calls == 1 and counting.range_bytes <= 20_000 + INDEX_SLACK_BYTES
    assert counting.get_calls == 2, "the offset and time indexes, once each; the .log never whole"
    cache.close()


def test_large_reads_go_in_bounded_chunks(tiered, store) -> None:
    log, copied, cache = tiered
    counting = CountingStore(store)
    segment = copied[0]
    with cache.indexes(segment) as idx:
        got = read_segment(counting, segment, idx.offset, segment.start_offset, 1 << 30, True, partition="p",
                           chunk_bytes=64 << 10)
    assert got.records == (log.dir / f"{segment.start_offset:020d}.log").read_bytes()
    assert counting.range_calls >= segment.segment_size_in_bytes // (64 << 10)
    # each piece but the last ends at a whole batch: what a cut batch re-fetches is below a batch per GET
    biggest = max(size for _, size, _, _ in local_batches(log, segment.start_offset))
    assert counting.range_bytes <= segment.segment_size_in_bytes + counting.range_calls * biggest


def test_an_offset_past_the_last_batch_is_not_found(tiered, store) -> None:
    _, copied, cache = tiered
    segment = copied[0]
    with cache.indexes(segment) as idx:
        got = read_segment(store, segment, idx.offset, segment.end_offset + 1, 1 << 20, True, partition="p")
    assert not got.found and got.records == b""


def _corrupt(store: ArrowRemoteStore, segment, position: int, length: int | None = None) -> None:
    key = object_key(segment, RemoteFileKind.SEGMENT)
    data = bytearray(store.get(key))
    if length is not None:
        data = data[:length]
    else:
        data[position] ^= 0xFF
    store.put(key, bytes(data))


def test_a_flipped_byte_is_a_crc_error_naming_the_object_and_position(tiered, store) -> None:
    log, copied, cache = tiered
    segment = copied[1]
    position, size, _, _ = local_batches(log, segment.start_offset)[3]
    _corrupt(store, segment, position + size - 5)
    with cache.indexes(segment) as idx, pytest.raises(RemoteSegmentCorruptError) as caught:
        read_segment(store, segment, idx.offset, segment.start_offset, 1 << 20, True, partition="orders-2")
    error = caught.value
    assert "CRC" in str(error) and error.position == position and error.partition == "orders-2"
    assert error.key == object_key(segment, RemoteFileKind.SEGMENT) and error.error_code == 2


def test_a_bad_length_field_is_a_framing_error(tiered, store) -> None:
    log, copied, cache = tiered
    segment = copied[1]
    position = local_batches(log, segment.start_offset)[2][0]
    _corrupt(store, segment, position + 8)  # the high byte of batchLength
    with cache.indexes(segment) as idx, pytest.raises(RemoteSegmentCorruptError) as caught:
        read_segment(store, segment, idx.offset, segment.start_offset, 1 << 20, True, partition="orders-2")
    assert caught.value.position == position and "batch" in str(caught.value)


def test_an_object_shorter_than_its_metadata_is_an_error(tiered, store) -> None:
    _, copied, cache = tiered
    segment = copied[0]
    _corrupt(store, segment, 0, length=segment.segment_size_in_bytes // 2)
    with cache.indexes(segment) as idx, pytest.raises(RemoteSegmentCorruptError, match="shorter"):
        read_segment(store, segment, idx.offset, segment.end_offset - 2, 1 << 20, True, partition="orders-2")


@pytest.mark.parametrize("step", [0, 1, 155, 399, 400, 1198])
def test_offset_for_timestamp_agrees_with_the_local_log(tiered, store, step: int) -> None:
    log, copied, cache = tiered
    timestamp = T0 + 10 * step + 3  # between records: the next record's offset
    expected = log.fetch_offset_by_timestamp(timestamp)
    found = None
    for segment in copied:
        with cache.indexes(segment) as idx:
            found = offset_for_timestamp(store, segment, idx.offset, idx.time, timestamp, 0)
        if found is not None:
            break
    assert expected is not None and found is not None
    assert (found.offset, found.timestamp) == (expected.offset, expected.timestamp) == (step + 1, T0 + 10 * (step + 1))


def test_offset_for_timestamp_past_a_segment_is_none(tiered, store) -> None:
    _, copied, cache = tiered
    with cache.indexes(copied[0]) as idx:
        assert offset_for_timestamp(store, copied[0], idx.offset, idx.time, T0 + 10 * 10_000, 0) is None


def _big_then_small(dir: Path, store: ArrowRemoteStore, tip):
    """A log whose first remote segment is one 100 kB batch (offsets 0-9) and whose second holds
    small batches (offsets 10-19), both held only by the remote tier; and its remote metadata."""
    from read_helpers import record_batch

    from tidelog.remote.copy import copy_log
    from tidelog.remote.metadata_log import RemotePartitionMetadata
    from tidelog.storage.log import Log
    from tidelog.storage.log_config import LogConfig
    from tidelog.testing import FakeClock

    log = Log.open(dir, LogConfig(segment_bytes=1 << 30, index_interval_bytes=4096), clock=FakeClock())
    log.append_as_leader(record_batch(0, 10, 10_000, T0), leader_epoch=0)
    log.roll()
    for n in range(10, 20, 2):
        log.append_as_leader(record_batch(n, 2, 10, T0 + 10 * n), leader_epoch=0)
    log.roll()
    log.update_high_watermark(log.log_end_offset)
    metadata = RemotePartitionMetadata.load(store, tip, clock=FakeClock(), broker_id=1)
    copied = copy_log(log, store, metadata, epochs=log.leader_epoch_cache.entries)
    log.delete_oldest_segments(log.segments[:2], "test: only the remote tier holds them", move_log_start=False)
    return log, metadata, copied


@pytest.mark.parametrize("max_bytes", [0, 1000])
def test_a_first_batch_that_does_not_fit_ends_the_read_in_its_segment(tmp_path: Path, store, tip,
                                                                      max_bytes: int) -> None:
    """Without min_one_message, a batch holding the offset that does not fit gives nothing: never
    the next segment's batches (a consumer would skip offsets 0-9), nor its indexes fetched."""
    from tidelog.manager.remote_reads import RemoteReader
    from tidelog.storage.config import BrokerConfig
    from tidelog.storage.fetch_info import FetchIsolation
    from tidelog.topic_partition import TopicPartition

    log, metadata, copied = _big_then_small(tmp_path / "orders-2", store, tip)
    broker = BrokerConfig.from_properties({"log.dirs": str(tmp_path / "logs")})
    reader = RemoteReader(broker, store, tmp_path / "logs", lambda tp, lg: metadata)
    try:
        tp = TopicPartition("orders", 2)
        got = reader.read(tp, log, 3, max_bytes, FetchIsolation.HIGH_WATERMARK, min_one_message=False)
        assert got.records == b""
        assert reader.index_cache.cached_segments() == [copied[0].id]
        first = reader.read(tp, log, 3, max_bytes, FetchIsolation.HIGH_WATERMARK, min_one_message=True)
        assert [b.base_offset for _, b in iter_batches(first.records)] == [0]
    finally:
        reader.close()
        log.close()
