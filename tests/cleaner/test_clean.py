"""Cleaning one log (Kafka's LogCleanerTest scenarios, §4.1, as our own tests).

The cleaner here is Kafka's test cleaner: an exact-capacity offset map at load factor 0.75
(capacity 4 holds 3 keys), 64 KiB I/O buffers, one pass per clean unless a test asks for all.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path

import pytest
from cleaner_helpers import (
    T0,
    MakeLog,
    all_records,
    crash,
    keyed_batch,
    keys_in_log,
    offsets_in_log,
    record,
)

from tests.fd_helpers import descriptors_under
from tidelog.cleaner.clean import Cleaner, CleanerBuffers, InProcessEngine, group_segments_by_size
from tidelog.cleaner.offset_map import OffsetMap
from tidelog.errors import CorruptRecordError, LogCleaningAbortedError
from tidelog.records import CompressionType
from tidelog.storage import files
from tidelog.storage.log import Log
from tidelog.storage.segment import LogSegment
from tidelog.testing import FakeClock

DAY = 86_400_000


def make_cleaner(clock: FakeClock, capacity: int = 1024, *, all_passes: bool = False, max_io: int = 65536,
                 io: int = 65536, check_done=lambda tp: None) -> Cleaner:
    buffers = CleanerBuffers(dedupe_buffer_size=capacity * 24, load_factor=0.75, io_buffer_size=io,
                             max_io_buffer_size=max_io)
    engine = InProcessEngine(buffers, offset_map=OffsetMap.with_slots(capacity, 0.75))
    return Cleaner(engine, clock, check_done=check_done, all_passes=all_passes)


def clean(cleaner: Cleaner, log: Log, start: int = 0, end: int | None = None, now: int | None = None):
    """One pass over [start, end) (end defaults to the active segment's base offset)."""
    bound = log.active_segment.base_offset if end is None else end
    return cleaner.clean_pass(log, log.topic_partition, start, bound, current_time=now)


@dataclass(frozen=True)
class _ToClean:
    log: Log
    first_dirty_offset: int
    first_uncleanable_offset: int

    @property
    def topic_partition(self):
        return self.log.topic_partition


def fill(log: Log, pairs, **kw) -> None:
    for key, value in pairs:
        log.append_as_leader(record(key, value, **kw))


def until_segments(log: Log, count: int, keys=range(10**6), value=b"x") -> None:
    """Append keyed records until the log has ``count`` segments."""
    it = iter(keys)
    while log.num_segments < count:
        log.append_as_leader(record(next(it), value))


# --- dedupe ------------------------------------------------------------------------------------

def test_latest_value_per_key_survives_and_offsets_are_kept(make_log: MakeLog, clock) -> None:
    log = make_log()
    fill(log, [(k % 5, i) for i, k in enumerate(range(60))])
    log.roll()
    latest = {}
    for offset, key, value in all_records(log):
        latest[key] = (offset, value)
    end, stats = clean(make_cleaner(clock), log)
    assert end == log.active_segment.base_offset
    assert sorted((o, k, v) for o, k, v in all_records(log)) == sorted((o, k, v) for k, (o, v) in latest.items())
    assert stats.messages_read == 60 and stats.messages_written == 5


def test_clean_segments_with_a_map_claiming_later_offsets(make_log: MakeLog, clock) -> None:
    """testCleanSegments: keys the map says are overwritten later disappear, the rest stay."""
    log = make_log()
    until_segments(log, 4)
    segments = log.segments[:3]
    keys_before = keys_in_log(log)
    stats = _clean_group_with_map(make_cleaner(clock), log, segments, superseded=(1, 3, 5, 7, 9),
                                  upper=log.active_segment.base_offset)
    assert keys_in_log(log) == [k for k in keys_before if k not in (1, 3, 5, 7, 9)]
    assert stats.bytes_read == sum(s.size for s in segments)


def test_stats_of_a_partial_dirty_range(make_log: MakeLog, clock) -> None:
    """testLogCleanerStats: keys 0,1,0,1,0 with first dirty offset 2."""
    log = make_log()
    fill(log, [(0, 0), (1, 1), (0, 0), (1, 1), (0, 0)])
    log.roll()
    size = log.size
    end, stats = clean(make_cleaner(clock, 4), log, start=2)
    assert end == 5
    assert stats.messages_read == 5 and stats.bytes_read == size
    assert stats.messages_written == 2 and stats.bytes_written == log.size
    assert stats.invalid_messages_read == 0


def test_partial_clean_advances_one_key_per_round(make_log: MakeLog, clock) -> None:
    """testPartialSegmentClean: a map that holds one key cleans one offset per round."""
    log = make_log()
    fill(log, [(0, 0), (1, 1), (0, 0), (1, 1), (0, 0)])
    log.roll()
    cleaner = make_cleaner(clock, 2)
    end, _ = clean(cleaner, log, start=2)
    assert end == 3
    assert offsets_in_log(log) == [1, 2, 3, 4]
    end, _ = clean(cleaner, log, start=end)
    assert offsets_in_log(log) == [2, 3, 4]
    end, _ = clean(cleaner, log, start=end)
    assert offsets_in_log(log) == [3, 4]


def test_all_passes_finish_a_range_with_more_keys_than_the_map(make_log: MakeLog, clock) -> None:
    """Beyond Kafka: one clean() goes on pass after pass until the whole range is clean."""
    log = make_log(segment_bytes=4096)
    pairs = [(k, i) for i, k in enumerate(list(range(40)) * 3)]
    fill(log, pairs)
    log.roll()
    cleaner = make_cleaner(clock, 8, all_passes=True)  # 6 keys per pass
    progress = []
    cleaner._on_pass_done = lambda tp, end: progress.append(end)
    end, stats = cleaner.clean(_ToClean(log, 0, log.active_segment.base_offset))
    assert end == log.active_segment.base_offset
    assert stats.passes == len(progress) + 1 > 5
    assert sorted(keys_in_log(log)) == list(range(40))
    assert offsets_in_log(log) == list(range(80, 120))


def test_a_batch_with_more_keys_than_the_map_is_cleaned_in_passes(make_log: MakeLog, clock) -> None:
    """The map fills inside a batch: the pass ends after the last key put (Kafka's partial
    cleaning), and the next passes go on from there."""
    log = make_log()
    log.append_as_leader(keyed_batch([(k, k) for k in range(5)]))
    log.append_as_leader(keyed_batch([(k, 10 + k) for k in range(5)]))
    log.roll()
    end, _ = clean(make_cleaner(clock, 4), log)  # 3 keys fit
    assert end == 3
    cleaner = make_cleaner(clock, 4, all_passes=True)
    end, stats = cleaner.clean(_ToClean(log, 0, log.active_segment.base_offset))
    assert end == log.active_segment.base_offset and stats.passes >= 3
    assert offsets_in_log(log) == [5, 6, 7, 8, 9]


def test_keyless_records_are_dropped_and_counted(make_log: MakeLog, clock) -> None:
    """testCleaningWithUnkeyedMessages: unkeyed records written under cleanup.policy=delete."""
    log = make_log(cleanup_policy="delete")
    for i in range(20):
        log.append_as_leader(record(None, i))
    keyed_start = log.log_end_offset
    fill(log, [(k, k) for k in range(10)])
    log.roll()
    end, stats = clean(make_cleaner(clock), log)
    assert stats.invalid_messages_read == 20
    assert [o for o, _, _ in all_records(log)] == list(range(keyed_start, keyed_start + 10))


def test_tombstones_remove_their_keys(make_log: MakeLog, clock) -> None:
    """testCleaningWithDeletes."""
    log = make_log()
    fill(log, [(k, k) for k in range(30)])
    fill(log, [(k, None) for k in range(0, 30, 2)])
    fill(log, [(100 + k, k) for k in range(20)])
    log.roll()
    clean(make_cleaner(clock), log)
    assert not any(k % 2 == 0 and k < 30 for k in keys_in_log(log))
    assert sorted(k for k in keys_in_log(log) if k < 30) == list(range(1, 30, 2))


def test_tombstone_gets_a_horizon_then_goes_in_a_later_pass(make_log: MakeLog, clock) -> None:
    """Two-pass clean: the first pass stamps the delete horizon, one after it removes the record."""
    log = make_log()
    fill(log, [(1, 1), (2, 2), (1, None)])
    log.roll()
    cleaner = make_cleaner(clock)
    now = clock.milliseconds()
    clean(cleaner, log, now=now)
    tombstones = [(o, k) for o, k, v in all_records(log) if v is None]
    assert tombstones == [(2, b"1")]
    horizons = [b.delete_horizon_ms for s in log.segments for _, b in s.log.batches() if b.has_delete_horizon]
    assert horizons == [now + DAY]
    clean(cleaner, log, now=now + DAY - 1)  # before the horizon: kept
    assert [(o, k) for o, k, v in all_records(log) if v is None] == [(2, b"1")]
    clean(cleaner, log, now=now + DAY + 1)
    assert [(o, k) for o, k, v in all_records(log) if v is None] == []
    assert keys_in_log(log) == [2]


def test_tombstone_horizon_uses_cleaning_time_not_record_time(make_log: MakeLog, clock) -> None:
    """testCleanTombstone: a tombstone with an old timestamp after a value with a future one."""
    log = make_log(message_timestamp_after_max_ms=2**62)
    log.append_as_leader(record(0, 1, timestamp=T0 + 10 * DAY))
    log.append_as_leader(record(0, None, timestamp=T0 - 10 * DAY))
    log.roll()
    cleaner = make_cleaner(clock)
    clean(cleaner, log, now=T0)
    clean(cleaner, log, now=T0 + DAY // 2)
    assert [(o, v) for o, _, v in all_records(log)] == [(1, None)]


def test_last_batch_before_the_uncleanable_offset_is_kept_empty(make_log: MakeLog, clock) -> None:
    """testCleanSegmentsRetainingLastEmptyBatch: every key superseded; the batch ending just
    below the round's upper bound stays, empty, so the segment keeps its last offset."""
    log = make_log()
    fill(log, [(0, 0), (1, 1), (2, 2)])
    log.roll()
    fill(log, [(0, 3), (1, 4), (2, 5)])
    log.roll()
    first = log.segments[:1]
    cleaner = make_cleaner(clock)
    stats = _clean_group_with_map(cleaner, log, first, superseded=[0, 1, 2], upper=first[0].base_offset + 3)
    batches = [b for _, b in log.segments[0].log.batches()]
    assert [(b.records_count, b.last_offset) for b in batches] == [(0, 2)]
    assert offsets_in_log(log) == [3, 4, 5]
    assert stats.messages_written == 0


def _clean_group_with_map(cleaner: Cleaner, log: Log, segments, superseded, upper: int):
    """Kafka's cleanSegments with a hand-made map claiming ``superseded`` keys at Long.MAX."""
    from tidelog.cleaner.retain import CleaningRound
    from tidelog.cleaner.stats import CleanerStats
    from tidelog.cleaner.transactions import CleanedTransactionMetadata
    offset_map = cleaner.engine.offset_map
    offset_map.clear()
    for key in superseded:
        offset_map.put(str(key).encode(), 2**63 - 1)
    offset_map.latest_offset = 2**63 - 2
    stats = CleanerStats(clock_of(log))
    round = CleaningRound(offset_map=offset_map, current_time=clock_of(log).milliseconds(), delete_retention_ms=DAY,
                          upper_bound_offset=upper, producers={})
    cleaned = cleaner.engine.clean_group(log, segments, round, CleanedTransactionMetadata([], lambda _: None), 0,
                                         stats, lambda tp: None)
    log.replace_segments([cleaned], segments)
    return stats


def clock_of(log: Log):
    return log.clock


def test_uncleanable_section_is_not_touched(make_log: MakeLog, clock) -> None:
    """testCleaningWithUncleanableSection: only segments below the bound change."""
    log = make_log()
    for _ in range(3):
        until_segments(log, log.num_segments + 2, keys=iter(list(range(5)) * 100))
    bound = log.segments[2].base_offset
    untouched = {s.base_offset: s.log.read(0, s.size) for s in log.segments[2:]}
    clean(make_cleaner(clock), log, start=0, end=bound)
    assert {s.base_offset: s.log.read(0, s.size) for s in log.segments if s.base_offset >= bound} == untouched


def test_offset_gaps_after_cleaning_move_the_next_dirty_offset_to_the_bound(make_log: MakeLog, clock) -> None:
    """testCleaningBeyondMissingOffsets: segments ending before the next one's base."""
    log = make_log()
    until_segments(log, 4, keys=iter([1, 2] * 1000))
    cleaner = make_cleaner(clock)
    end, _ = clean(cleaner, log)
    assert end == log.active_segment.base_offset
    end2, _ = clean(cleaner, log)
    assert end2 == log.active_segment.base_offset


# --- compression and formats ----------------------------------------------------------------------

@pytest.mark.parametrize("codec", [CompressionType.NONE, CompressionType.GZIP, CompressionType.SNAPPY,
                                   CompressionType.LZ4, CompressionType.ZSTD])
def test_every_codec_keeps_the_latest_values(make_log: MakeLog, clock, codec) -> None:
    log = make_log(segment_bytes=2048)
    expected = {}
    for round_ in range(3):
        pairs = [(k, round_ * 100 + k) for k in range(10)]
        log.append_as_leader(keyed_batch(pairs, compression=codec))
    for o, k, v in all_records(log):
        expected[k] = (o, v)
    log.roll()
    clean(make_cleaner(clock), log)
    assert sorted((o, k, v) for o, k, v in all_records(log)) == sorted((o, k, v) for k, (o, v) in expected.items())
    codecs = {b.compression for s in log.segments for _, b in s.log.batches() if b.records_count}
    assert codecs == {codec}


# --- buffers and corruption -----------------------------------------------------------------------

def test_buffers_grow_for_batches_larger_than_them(make_log: MakeLog, clock) -> None:
    """testLargeMessage: 20 KiB records through 1 KiB buffers."""
    log = make_log(segment_bytes=1024 * 1024, max_message_bytes=100_000)
    big = b"x" * 20_000
    fill(log, [(k % 3, big) for k in range(9)])
    log.roll()
    cleaner = make_cleaner(clock, io=1024, max_io=100_000)
    clean(cleaner, log)
    assert offsets_in_log(log) == [6, 7, 8]


def test_a_batch_claiming_more_bytes_than_the_segment_has_is_corrupt(make_log: MakeLog, clock, tmp_path: Path) -> None:
    """testCorruptMessageSizeLargerThanBytesAvailable: the .log cut inside a batch."""
    log = make_log(segment_bytes=1024 * 1024, max_message_bytes=100_000)
    fill(log, [(k, b"y" * 5000) for k in range(4)])
    log.roll()
    segment = log.segments[0]
    cut = segment.size - 100
    os.truncate(segment.log.path, cut)
    segment.log.truncate_to(cut) if hasattr(segment.log, "truncate_to") else None
    with pytest.raises(CorruptRecordError) as caught:
        clean(make_cleaner(clock, io=1024, max_io=8192), log)
    assert caught.value.path == segment.log.path
    assert not list(log.dir.glob("*.cleaned")) and not list(log.dir.glob("*.swap"))


def test_corrupt_magic_is_an_error_and_nothing_changes(make_log: MakeLog, clock) -> None:
    """testMessageLargerThanMaxMessageSizeWithCorruptHeader: a magic byte of 0xff."""
    log = make_log()
    fill(log, [(k % 2, k) for k in range(6)])
    log.roll()
    segment = log.segments[0]
    with open(segment.log.path, "r+b") as f:
        f.seek(16)
        f.write(b"\xff")
    before = segment.log.path.read_bytes()
    with pytest.raises(CorruptRecordError):
        clean(make_cleaner(clock), log)
    assert segment.log.path.read_bytes() == before
    assert log.segments[0] is segment


# --- abort, grouping, files -------------------------------------------------------------------------

def test_abort_stops_cleaning_and_leaves_no_cleaned_files(make_log: MakeLog, clock) -> None:
    """testCleanSegmentsWithAbort."""
    log = make_log()
    until_segments(log, 3, keys=iter([1, 2] * 1000))

    def abort(tp) -> None:
        raise LogCleaningAbortedError("aborted", topic_partition=str(tp))

    with pytest.raises(LogCleaningAbortedError):
        clean(make_cleaner(clock, check_done=abort), log)
    assert not list(log.dir.glob("*.cleaned")) and not list(log.dir.glob("*.swap"))


def test_segment_grouping_by_size_and_index_size(make_log: MakeLog, clock) -> None:
    """testSegmentGrouping."""
    log = make_log(segment_bytes=300, index_interval_bytes=1)
    until_segments(log, 11)
    segments = log.segments[:-1]
    bound = log.active_segment.base_offset
    assert len(group_segments_by_size(segments, 2**31 - 1, 2**31 - 1, bound)) == 1
    assert [len(g) for g in group_segments_by_size(segments, 1, 2**31 - 1, bound)] == [1] * 10
    three = sum(s.size for s in segments[:3]) + 1
    assert all(len(g) <= 3 for g in group_segments_by_size(segments, three, 2**31 - 1, bound))
    assert len(group_segments_by_size(segments, three, 2**31 - 1, bound)[0]) == 3
    index_three = sum(s.offset_index.entries * 8 for s in segments[:3]) + 1
    assert len(group_segments_by_size(segments, 2**31 - 1, index_three, bound)[0]) == 3
    flat = [s for g in group_segments_by_size(segments, three, 2**31 - 1, bound) for s in g]
    assert flat == segments


def test_cleaned_segment_keeps_the_last_source_modification_time(make_log: MakeLog, clock) -> None:
    log = make_log()
    for start in (0, 3, 6):
        fill(log, [(k % 2, start + k) for k in range(3)])
        log.roll()
    sources = log.segments[:-1]
    for i, s in enumerate(sources):
        s.set_last_modified_ms(T0 - (10 - i) * 1000)
    clean(make_cleaner(clock), log)
    cleaned = log.segments[0]
    assert len(log.segments) == 2  # one group
    assert cleaned.last_modified_ms == T0 - 8000
    for name in (files.offset_index_file, files.time_index_file):
        assert name(log.dir, cleaned.base_offset).stat().st_mtime_ns // 1_000_000 == T0 - 8000


def test_preallocated_cleaned_segment_is_trimmed(make_log: MakeLog, clock) -> None:
    """testSizeTrimmedForPreallocatedAndCompactedTopic."""
    log = make_log(preallocate="true")
    until_segments(log, 3, keys=iter([1, 2] * 1000))
    clean(make_cleaner(clock), log)
    assert log.segments[0].log.path.stat().st_size < 1024


# --- crash safety -------------------------------------------------------------------------------------

class _Crash(Exception):
    pass


@pytest.mark.parametrize("crash_at", range(1, 8))
def test_recovery_after_a_crash_at_each_rename(make_log: MakeLog, clock, monkeypatch, crash_at: int) -> None:
    """testRecoveryAfterCrash: kill the swap after ``crash_at`` suffix changes; reopening gives
    either the original log (not every .swap existed) or the cleaned one, never a mix."""
    log = make_log(segment_bytes=600)
    fill(log, [(k % 7, k) for k in range(60)])
    log.roll()
    original = sorted(all_records(log))
    expected_clean = {}
    for o, k, v in original:
        expected_clean[k] = (o, k, v)
    cleaned_records = sorted(expected_clean.values())
    calls = {"n": 0}
    real = LogSegment.change_file_suffixes

    def crashing(self, old, new):
        calls["n"] += 1
        if calls["n"] == crash_at:
            raise _Crash()
        return real(self, old, new)

    monkeypatch.setattr(LogSegment, "change_file_suffixes", crashing)
    try:
        clean(make_cleaner(clock), log)
        crashed = False
    except _Crash:
        crashed = True
    monkeypatch.setattr(LogSegment, "change_file_suffixes", real)
    crash(log)
    assert descriptors_under(log.dir) == []  # a failed swap leaves no handle unreachable from the log
    reopened = make_log(segment_bytes=600)
    records = sorted(all_records(reopened))
    # Each group swaps atomically: what is back is the original log with some groups cleaned.
    assert set(cleaned_records) <= set(records) <= set(original)
    if crash_at == 1:
        assert records == original  # not even the first .swap existed
    if not crashed:
        assert records == cleaned_records
    offsets = [o for o, _, _ in records]
    assert offsets == sorted(set(offsets))
    assert not [p for p in reopened.dir.iterdir() if p.suffix in (".cleaned", ".swap")]


@pytest.mark.parametrize("crash_at", range(1, 7))
def test_one_group_swap_is_all_or_nothing(make_log: MakeLog, clock, monkeypatch, crash_at: int) -> None:
    """One group of three segments: a crash before the cleaned segment is a complete ``.swap``
    rolls back to the original; any crash after it completes the clean."""
    log = make_log()
    for start in (0, 3, 6):
        fill(log, [(k % 3, start + k) for k in range(3)])
        log.roll()
    original = sorted(all_records(log))
    cleaned_records = sorted(original[-3:])
    real = LogSegment.change_file_suffixes
    calls = {"n": 0}

    def crashing(self, old, new):
        calls["n"] += 1
        if calls["n"] == crash_at:
            raise _Crash()
        return real(self, old, new)

    monkeypatch.setattr(LogSegment, "change_file_suffixes", crashing)
    with pytest.raises(_Crash) if crash_at <= 5 else contextlib.nullcontext():
        clean(make_cleaner(clock), log)
    monkeypatch.setattr(LogSegment, "change_file_suffixes", real)
    crash(log)
    assert descriptors_under(log.dir) == []
    reopened = make_log()
    assert sorted(all_records(reopened)) == (original if crash_at == 1 else cleaned_records)


def test_cleaned_segment_indexes_are_those_appends_of_single_batches_build(make_log: MakeLog, clock,
                                                                            tmp_path: Path) -> None:
    """The copy appends multi-megabyte chunks; the cleaned segment's indexes are rebuilt with one
    entry per index.interval.bytes: the ones a segment gets when its batches are appended one by
    one (LogSegment.append, the independent oracle), and that recovery also rebuilds."""
    size = len(record(b"00", b"late"))  # every surviving batch: an interval of exactly 3 batches
    log = make_log(segment_bytes=1024 * 1024, segment_index_bytes=1024 * 1024, index_interval_bytes=3 * size,
                   message_timestamp_after_max_ms=2**62)
    fill(log, [(b"%02d" % (k % 40), b"v%d" % k) for k in range(1500)])
    for k in range(40):  # rising timestamps in ties, so the time index has entries and ties
        log.append_as_leader(record(b"%02d" % k, b"late", timestamp=T0 + k // 2))
    log.roll()
    clean(make_cleaner(clock), log)
    segment = log.segments[0]
    assert segment.size > 0 and len(log.segments) == 2
    index, time_index = (name(log.dir, segment.base_offset) for name in (files.offset_index_file, files.time_index_file))
    segment.flush()
    built = (index.read_bytes(), time_index.read_bytes())
    assert len(built[0]) >= 5 * 8 and len(built[1]) >= 2 * 12  # dense, not one entry per chunk

    (tmp_path / "oracle-0").mkdir()
    oracle = LogSegment.open(tmp_path / "oracle-0", segment.base_offset, segment.config, clock)
    for _, b in segment.log.batches():
        oracle.append(b.last_offset, b.max_timestamp, b.last_offset, bytes(b.buffer))
    oracle.on_become_inactive_segment()
    oracle.flush()
    assert (files.offset_index_file(tmp_path / "oracle-0", segment.base_offset).read_bytes(),
            files.time_index_file(tmp_path / "oracle-0", segment.base_offset).read_bytes()) == built
    oracle.close()
    segment.recover()
    segment.flush()
    assert (index.read_bytes(), time_index.read_bytes()) == built


@pytest.mark.parametrize("codec", [CompressionType.NONE, CompressionType.GZIP])
def test_mixed_v0_v1_v2_data_keeps_the_latest_value_per_key(make_log: MakeLog, clock, codec) -> None:
    """LogCleanerParameterizedIntegrationTest.testCleanerWithMessageFormatV0: legacy entries
    (mapped one record at a time) and v2 batches in one dirty range."""
    from tidelog.records import BatchBuilder

    log = make_log(segment_bytes=4096)
    offset = 0
    for magic in (0, 1, 2):
        for round_ in range(2):
            builder = BatchBuilder(magic=magic, compression=codec, base_offset=offset)
            for k in range(5):
                builder.append(offset, T0, b"%d" % k, b"m%d-r%d" % (magic, round_))
                offset += 1
            log.append_as_follower(builder.build())
    log.update_high_watermark(log.log_end_offset)
    log.roll()
    clean(make_cleaner(clock), log)
    assert sorted((k, v) for _, k, v in all_records(log)) == [(b"%d" % k, b"m2-r1") for k in range(5)]
    assert offsets_in_log(log) == list(range(25, 30))


def test_kafka_4298_wrapper_in_a_segment_is_cleaned_and_repaired(make_log: MakeLog, clock, tmp_path: Path) -> None:
    """LogCleanerTest.testCleanCorruptMessageSet through a whole clean: a v1 gzip wrapper of v0
    messages written by an old broker is mapped and rewritten as a proper v1 wrapper."""
    from tidelog.records import LegacyBatch, encode_legacy_message
    from tidelog.records.compression import compress

    inner = b"".join(encode_legacy_message(i, 0, 0, -1, b"%d" % (i % 2), b"%d" % (i + 20)) for i in range(4))
    wrapper = encode_legacy_message(23, 1, CompressionType.GZIP, T0, None, compress(CompressionType.GZIP, inner))
    dir = tmp_path / "old-0"
    dir.mkdir()
    files.log_file(dir, 20).write_bytes(wrapper)
    log = make_log(dir=dir)
    log.append_as_leader(record(9, 9))
    log.roll()
    clean(make_cleaner(clock), log)
    (repaired,) = [b for _, b in log.segments[0].log.batches()][:1]
    assert isinstance(repaired, LegacyBatch) and repaired.magic == 1
    assert [(r.offset, r.key, r.value) for r in repaired.records()] == [(22, b"0", b"22"), (23, b"1", b"23")]


def test_an_abort_whose_marker_is_in_a_later_segment_still_drops_the_aborted_data(make_log: MakeLog, clock) -> None:
    """Kafka's testAbortedTransactionSpanningSegments: the .txnindex entry lives in the segment of
    the ABORT marker, past the cleaned range; the search goes on into later segments."""
    from tidelog.records.control import build_end_txn_marker_batch
    from tidelog.storage.txn_index import AbortedTxn

    log = make_log(segment_bytes=1 << 20)
    log.append_as_follower(keyed_batch([(b"k", b"committed")], base_offset=0))
    log.append_as_follower(keyed_batch([(b"k", b"aborted")], base_offset=1, producer_id=1, producer_epoch=0,
                                       base_sequence=0, is_transactional=True))
    log.roll()
    log.append_as_follower(build_end_txn_marker_batch(commit=False, producer_id=1, producer_epoch=0,
                                                      coordinator_epoch=0, base_offset=2, timestamp=T0))
    log.active_segment.txn_index.append(AbortedTxn(1, 1, 2, 1))  # as Kafka's producer state writes it
    log.append_as_follower(keyed_batch([(b"other", b"x")], base_offset=3, producer_id=1, producer_epoch=0,
                                       base_sequence=1))
    log.update_high_watermark(log.log_end_offset)
    assert log.collect_aborted_transactions(0, 2) == [AbortedTxn(1, 1, 2, 1)]
    clean(make_cleaner(clock), log, start=0, end=2)
    assert [(o, k, v) for o, k, v in all_records(log) if o < 2] == [(0, b"k", b"committed")]
