"""Loading a partition dir: LogLoaderTest scenarios, the cleaner's crash points, and recovery properties.

kafka-storage.md §3.9 (startup recovery), §3.7.7 (``.cleaned`` → ``.swap`` → swap-in and what the
loader does at each crash point), §1.12 (index files after an unclean stop), §4.7 (LogLoaderTest).
A crash is simulated by :func:`storage_helpers.crash` (nothing trimmed, no final index entries)
followed by an open without the clean-shutdown marker.
"""

from __future__ import annotations

import os
import random
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from storage_helpers import (
    T0,
    MakeLog,
    OnDisk,
    Rec,
    batch,
    batches_of,
    crash,
    file_batches,
    log_batches,
    log_config,
    read_all,
    records,
    segment_names,
    single,
)

from tests.fd_helpers import descriptors_under
from tidelog.records import CompressionType, build_legacy_batch, iter_batches
from tidelog.storage import files
from tidelog.storage.config import LogConfig
from tidelog.storage.file_records import SCAN_CHUNK_BYTES, FileRecords
from tidelog.storage.fetch_info import FetchIsolation
from tidelog.storage.index import OffsetIndex
from tidelog.storage.log import Log
from tidelog.storage.log_config import segment_config
from tidelog.storage.segment import LogSegment
from tidelog.testing import FakeClock, FakeScheduler

LOG_END = FetchIsolation.LOG_END


def temp_files(dir: Path) -> list[str]:
    return sorted(p.name for p in dir.iterdir() if p.name.endswith(files.TEMPORARY_SUFFIXES))


# --- clean and unclean shutdown -----------------------------------------------------------------

def test_had_clean_shutdown_is_reported(make_log: MakeLog) -> None:
    log = make_log()
    log.append_as_leader(records(3))
    log.close()
    clean = make_log(had_clean_shutdown=True, recovery_point=3)
    assert clean.had_clean_shutdown and clean.recovery_point == 3
    crash(clean)
    unclean = make_log(recovery_point=3)
    assert not unclean.had_clean_shutdown and unclean.log_end_offset == 3


def test_clean_shutdown_skips_recovery_even_from_recovery_point_zero(make_log: MakeLog) -> None:
    log = make_log(segment_bytes=1000, index_interval_bytes=1)
    for _ in range(100):
        log.append_as_leader(single())
    first = log.segments[0].log.path
    log.close()
    # a flipped value byte in the first segment: only a recovery would notice (CRC)
    data = bytearray(first.read_bytes())
    data[len(single()) - 3] ^= 0xFF
    first.write_bytes(bytes(data))
    clean = make_log(config=log.config, had_clean_shutdown=True, recovery_point=0)
    assert clean.log_end_offset == 100 and clean.recovery_point == 100
    clean.close()
    unclean = make_log(config=log.config, recovery_point=0)
    assert unclean.log_end_offset == 0, "recovery truncates at the bad batch and drops later segments"
    assert unclean.num_segments == 1


# --- the active segment's tail after a clean shutdown ---------------------------------------------

DAMAGE = {
    "cut": lambda data: data[:-30],  # a torn last batch
    "garbage": lambda data: data + random.Random(5).randbytes(200),
    "zeros": lambda data: data + bytes(5000),
    "flipped": lambda data: data[:-5] + bytes([data[-5] ^ 0xFF]) + data[-4:],  # last batch fails its CRC
    "cut-below-index-entry": lambda data: data[:len(data) // 3],  # before the last offset-index entry
}


def _written_cleanly(make_log: MakeLog) -> tuple[Log, list[Rec]]:
    log = make_log(index_interval_bytes=512)
    for _ in range(40):
        log.append_as_leader(records(3, value_size=40))
    written = read_all(log)
    log.close()
    return log, written


def _unchanged_prefix(original: bytes, damaged: bytes) -> list[tuple[int, int, int]]:
    """``(position, size, last offset)`` of the batches of ``original`` still whole and
    unchanged in ``damaged``, up to the first that is not."""
    kept = []
    for position, found in iter_batches(original):
        end = position + found.size_in_bytes
        if damaged[position:end] != original[position:end]:
            break
        kept.append((position, found.size_in_bytes, found.last_offset))
    return kept


@pytest.mark.parametrize("damage", sorted(DAMAGE))
@pytest.mark.parametrize("leader", [True, False], ids=["leader-append", "follower-append"])
def test_a_damaged_active_tail_after_a_clean_shutdown_is_recovered_before_anything_is_appended(
    make_log: MakeLog, damage: str, leader: bool, caplog: pytest.LogCaptureFixture,
) -> None:
    log, written = _written_cleanly(make_log)
    path = log.active_segment.log.path
    original = path.read_bytes()
    damaged = DAMAGE[damage](original)
    path.write_bytes(damaged)
    whole = _unchanged_prefix(original, damaged)
    kept, valid_bytes = (whole[-1][2] + 1, whole[-1][0] + whole[-1][1]) if whole else (0, 0)
    reopened = make_log(config=log.config, had_clean_shutdown=True, recovery_point=log.log_end_offset)
    assert reopened.log_end_offset == kept and path.stat().st_size == valid_bytes
    if damage == "cut-below-index-entry":
        assert f"{path}: its last offset-index entry points at byte" in caplog.text
    else:
        assert f"{path}: valid batches end at byte {valid_bytes} of {len(damaged)}" in caplog.text
    for i in range(20):
        data = records(1, value_size=40)
        appended = reopened.append_as_leader(data) if leader else reopened.append_as_follower(
            records(1, base_offset=kept + i, value_size=40))
        assert appended.first_offset == kept + i
    after = read_all(reopened)
    assert after[:kept] == written[:kept] and [r.offset for r in after] == list(range(kept + 20))
    crash(reopened)
    unclean = make_log(config=log.config, recovery_point=0)
    assert unclean.log_end_offset == kept + 20, "the acknowledged records survive the next recovery"
    assert read_all(unclean) == after


def test_a_whole_active_tail_after_a_clean_shutdown_is_left_alone(
    make_log: MakeLog, caplog: pytest.LogCaptureFixture,
) -> None:
    log = make_log(index_interval_bytes=512)
    for _ in range(40):
        log.append_as_leader(records(3, value_size=40))
    log.append_as_follower(build_legacy_batch([(120, T0, b"k", b"legacy")], magic=1))  # a legacy last entry
    log.close()
    path = log.active_segment.log.path
    before = path.read_bytes()
    reopened = make_log(config=log.config, had_clean_shutdown=True, recovery_point=121)
    assert reopened.log_end_offset == 121 and path.read_bytes() == before
    assert "valid batches end" not in caplog.text and "truncating" not in caplog.text


def test_log_recovers_to_correct_offset(make_log: MakeLog) -> None:
    count, size = 100, 100
    log = make_log(segment_bytes=7 * size, index_interval_bytes=3 * size, segment_index_bytes=4096)
    rng = random.Random(3)
    for i in range(count):
        log.append_as_leader(single(T0 + i * 10, rng.randbytes(size)))
    active = log.active_segment
    last_index_offset, index_entries = active.offset_index.last_offset, active.offset_index.entries
    last_ts = active.largest_timestamp
    time_entries = active.time_index.entries + (0 if active.time_index.last_entry.offset == count - 1 else 1)
    log.close()

    def verify(log: Log, recovery_point: int) -> None:
        active = log.active_segment
        assert log.recovery_point == recovery_point and log.log_end_offset == count
        assert (active.offset_index.last_offset, active.offset_index.entries) == (last_index_offset, index_entries)
        assert active.time_index.last_entry.timestamp == last_ts
        assert active.time_index.last_entry.offset == count - 1
        assert active.time_index.entries == time_entries

    reopened = make_log(config=log.config, recovery_point=count)
    verify(reopened, count)
    reopened.close()
    reopened = make_log(config=log.config, recovery_point=10)
    verify(reopened, 10)  # recovery does not advance the recovery point ...
    reopened.flush(include_active=False)
    verify(reopened, count)  # ... a flush does


def test_reopen_then_truncate(make_log: MakeLog) -> None:
    log = make_log(segment_bytes=5 * len(single()), segment_index_bytes=1000, index_interval_bytes=10_000)
    for _ in range(100):
        log.append_as_leader(single())
    log.close()
    reopened = make_log(config=log.config)
    reopened.truncate_to(3)
    assert reopened.num_segments == 1 and reopened.log_end_offset == 3


def test_load_empty_dir_creates_one_segment_at_the_log_start_offset(make_log: MakeLog, tp_dir: Path) -> None:
    log = make_log(log_start_offset=42, recovery_point=42)
    assert [s.base_offset for s in log.segments] == [42]
    assert (log.log_start_offset, log.log_end_offset) == (42, 42)
    assert segment_names(tp_dir) == ["00000000000000000042.log"]
    log.append_as_leader(records(1))
    assert read_all(log)[0].offset == 42


def test_load_empty_segment_files(make_log: MakeLog, tp_dir: Path) -> None:
    tp_dir.mkdir()
    for name in ("00000000000000000000.log", "00000000000000000000.index", "00000000000000000000.timeindex"):
        (tp_dir / name).touch()
    log = make_log()
    assert log.log_end_offset == 0
    for _ in range(3):
        log.append_as_leader(records(2))
    assert [r.offset for r in read_all(log)] == list(range(6))


def test_log_start_offset_checkpoint_above_first_segment(make_log: MakeLog) -> None:
    log = make_log()
    for _ in range(5):
        log.append_as_leader(records(2))
    log.close()
    reopened = make_log(log_start_offset=4, had_clean_shutdown=True, recovery_point=10)
    assert (reopened.log_start_offset, reopened.log_end_offset) == (4, 10)
    assert read_all(reopened)[0].offset == 4


def test_log_end_below_log_start_after_reopen_leaves_one_empty_segment(make_log: MakeLog, clock: FakeClock) -> None:
    log = make_log()
    for i in range(5):
        log.append_as_leader(batch(b"%d" % i, timestamp=clock.milliseconds()))
        log.roll()
    assert log.num_segments == 6
    log.update_high_watermark(log.log_end_offset)
    log.maybe_increment_log_start_offset(4)
    garbage_target = log.segments[1].log.path
    log.close()
    garbage_target.write_bytes(b"corruptRecord")  # overwritten, as Kafka's test does
    reopened = make_log(config=log.config, log_start_offset=4)
    clock.advance(log.config.file_delete_delay_ms)
    assert [s.base_offset for s in reopened.segments] == [4]
    assert (reopened.log_start_offset, reopened.log_end_offset) == (4, 4)
    for path in (files.log_file(reopened.dir, 4), files.offset_index_file(reopened.dir, 4),
                 files.time_index_file(reopened.dir, 4)):
        assert path.exists(), path
    assert segment_names(reopened.dir) == ["00000000000000000004.log"]


def test_recovery_point_bounds_what_is_revalidated(make_log: MakeLog) -> None:
    log = make_log(segment_bytes=300)
    for _ in range(20):
        log.append_as_leader(single())
    bases = [s.base_offset for s in log.segments]
    first = log.segments[0].log.path
    crash(log)
    data = bytearray(first.read_bytes())
    data[-3] ^= 0xFF  # corrupt the last batch of the first (flushed) segment
    first.write_bytes(bytes(data))
    # Kafka only re-validates from the segment holding the recovery point
    reopened = make_log(config=log.config, recovery_point=bases[2])
    assert reopened.log_end_offset == 20 and [s.base_offset for s in reopened.segments] == bases


def test_recovery_truncation_in_a_middle_segment_deletes_later_segments(make_log: MakeLog) -> None:
    log = make_log(segment_bytes=300)
    for i in range(20):
        log.append_as_leader(single(value=b"%02d" % i))
    bases = [s.base_offset for s in log.segments]
    second = log.segments[1]
    on_disk = file_batches(second.log.path)
    crash(log)
    with open(second.log.path, "r+b") as f:
        f.seek(on_disk[1].position + 30)
        f.write(b"\xff\xfe")
    reopened = make_log(config=log.config, recovery_point=0)
    assert [s.base_offset for s in reopened.segments] == bases[:2]
    assert reopened.log_end_offset == on_disk[0].last_offset + 1
    assert [r.value for r in read_all(reopened)] == [b"%02d" % i for i in range(on_disk[0].last_offset + 1)]
    assert segment_names(reopened.dir) == [files.log_file(reopened.dir, b).name for b in bases[:2]]
    assert temp_files(reopened.dir) == []


@pytest.mark.parametrize("index_interval_bytes", [1, 4096])
def test_a_batch_whose_offsets_go_back_is_where_recovery_truncates(make_log: MakeLog,
                                                                   index_interval_bytes: int) -> None:
    """A damaged base offset (outside the CRC) that goes back but stays in the segment's range:
    the batches before it are kept, whatever index.interval.bytes says. (Kafka keeps the batch
    when no index entry is due, and empties the whole segment when one is.)"""
    log = make_log(index_interval_bytes=index_interval_bytes)
    for i in range(6):
        log.append_as_leader(single(value=b"%d" % i))
    path = log.active_segment.log.path
    on_disk = file_batches(path)
    crash(log)
    with open(path, "r+b") as f:
        f.seek(on_disk[3].position)
        f.write((1).to_bytes(8, "big"))
    reopened = make_log(config=log.config, recovery_point=0)
    assert reopened.log_end_offset == 3
    assert [r.value for r in read_all(reopened)] == [b"0", b"1", b"2"]
    assert path.stat().st_size == on_disk[3].position


def test_open_deletes_obsolete_deleted_files(make_log: MakeLog) -> None:
    log = make_log(segment_bytes=5 * len(single()), segment_index_bytes=1000)
    for _ in range(100):
        log.append_as_leader(single())
    log.update_high_watermark(log.log_end_offset)
    log.delete_segments(log.segments[:-1], "test")  # renamed .deleted, unlink still pending
    assert temp_files(log.dir)
    crash(log)
    reopened = make_log(config=log.config, recovery_point=0)
    assert reopened.num_segments == 1 and temp_files(reopened.dir) == []


# --- index files ------------------------------------------------------------------------------

def check_indexes(log: Log) -> None:
    """Every index entry points at a batch of the segment's file. Offset entries: (last offset,
    start position) of one batch, both strictly increasing. Time entries: strictly increasing
    timestamps, each the segment's running max timestamp at the batch whose last offset it names."""
    for segment in log.segments:
        on_disk = file_batches(segment.log.path, segment.size)
        starts = {b.position: b for b in on_disk}
        index = segment.offset_index
        entries = [index.entry(i) for i in range(index.entries)]
        for entry in entries:
            assert entry.position in starts, (segment, entry)
            assert starts[entry.position].last_offset == entry.offset, (segment, entry)
        assert all(a.offset < b.offset and a.position < b.position for a, b in zip(entries, entries[1:])), entries
        running_max: dict[int, int] = {}
        max_so_far = -1
        for b in on_disk:
            max_so_far = max(max_so_far, b.max_timestamp)
            running_max[b.last_offset] = max_so_far
        time_index = segment.time_index
        time_entries = [time_index.entry(i) for i in range(time_index.entries)]
        for entry in time_entries:
            assert running_max.get(entry.offset) == entry.timestamp, (segment, entry)
        assert all(a.timestamp < b.timestamp for a, b in zip(time_entries, time_entries[1:])), time_entries


def test_index_rebuild_after_deleting_all_index_files(make_log: MakeLog, clock: FakeClock) -> None:
    log = make_log(segment_bytes=200, index_interval_bytes=1)
    for i in range(60):
        log.append_as_leader(single(clock.milliseconds() + i * 10, b"x" * 10))
    log.close()
    for path in [*log.dir.glob("*.index"), *log.dir.glob("*.timeindex")]:
        path.unlink()
    reopened = make_log(config=log.config)
    assert reopened.log_end_offset == 60
    first = reopened.segments[0]
    assert first.offset_index.entries > 0 and first.time_index.entries > 0
    for i in range(60):
        assert batches_of(reopened.read(i, 100, LOG_END).records)[0].last_offset == i
        found = reopened.fetch_offset_by_timestamp(clock.milliseconds() + i * 10)
        assert found is not None and found.offset == i
    check_indexes(reopened)


def test_index_rebuild_even_after_clean_shutdown(make_log: MakeLog) -> None:
    log = make_log(segment_bytes=200, index_interval_bytes=1)
    for i in range(40):
        log.append_as_leader(single(T0 + i))
    log.close()
    for path in log.dir.glob("*.index"):
        path.unlink()
    reopened = make_log(config=log.config, had_clean_shutdown=True, recovery_point=40)
    assert all(s.offset_index.entries > 0 for s in reopened.segments[:-1])
    assert [r.offset for r in read_all(reopened, 17)] == list(range(17, 40))
    check_indexes(reopened)


def test_missing_time_index_alone_is_rebuilt(make_log: MakeLog) -> None:
    log = make_log(segment_bytes=200, index_interval_bytes=1)
    for i in range(30):
        log.append_as_leader(single(T0 + i))
    log.close()
    victim = files.time_index_file(log.dir, log.segments[1].base_offset)
    victim.unlink()
    reopened = make_log(config=log.config, had_clean_shutdown=True, recovery_point=30)
    assert victim.exists() and reopened.segments[1].time_index.entries > 0
    for i in range(30):
        assert reopened.fetch_offset_by_timestamp(T0 + i).offset == i  # type: ignore[union-attr]


def test_time_index_rebuilt_for_v0_messages_is_empty(make_log: MakeLog) -> None:
    log = make_log(segment_bytes=200, index_interval_bytes=1)
    for i in range(60):
        log.append_as_follower(build_legacy_batch([(i, -1, None, b"x" * 10)], magic=0))
    log.close()
    for path in log.dir.glob("*.timeindex"):
        path.unlink()
    reopened = make_log(config=log.config, recovery_point=61)
    for segment in reopened.segments[:-1]:
        assert segment.time_index.entries == 0
        assert segment.time_index.path.stat().st_size == 0
    assert reopened.log_end_offset == 60 and [r.offset for r in read_all(reopened, 55)] == list(range(55, 60))


def test_corrupt_index_files_are_rebuilt(make_log: MakeLog) -> None:
    log = make_log(segment_bytes=200, index_interval_bytes=1)
    for i in range(60):
        log.append_as_leader(single(T0 + i * 10, b"x" * 10))
    log.close()
    for path in [*log.dir.glob("*.index"), *log.dir.glob("*.timeindex")]:
        path.write_bytes(b"  ")
    reopened = make_log(config=log.config, had_clean_shutdown=True, recovery_point=60)
    for i in range(60):
        assert batches_of(reopened.read(i, 100, LOG_END).records)[0].last_offset == i
        found = reopened.fetch_offset_by_timestamp(T0 + i * 10)
        assert found is not None and found.offset == i
    check_indexes(reopened)


def test_bogus_index_files_without_log_are_removed(make_log: MakeLog, tp_dir: Path) -> None:
    tp_dir.mkdir()
    bogus = [files.offset_index_file(tp_dir, 5), files.time_index_file(tp_dir, 5),
             files.transaction_index_file(tp_dir, 5)]
    for path in bogus:
        path.write_bytes(b"\0" * 24)
    log = make_log(segment_bytes=5 * len(single()), segment_index_bytes=1000, index_interval_bytes=1)
    first = log.segments[0]
    assert first.offset_index.path.stat().st_size == 1000
    assert first.time_index.path.stat().st_size == 996
    assert not any(path.exists() for path in bogus)
    for _ in range(10):
        log.append_as_leader(single())
    assert log.log_end_offset == 10


def test_recover_with_empty_active_segment_creates_its_index(make_log: MakeLog) -> None:
    count, size = 100, 100
    log = make_log(segment_bytes=7 * size, index_interval_bytes=3 * size, segment_index_bytes=4096)
    for i in range(count):
        log.append_as_leader(single(T0 + i * 10, os.urandom(size)))
    log.roll()
    log.flush(include_active=False)
    with pytest.raises(FileNotFoundError):
        log.active_segment.sanity_check()
    last = log.log_end_offset
    crash(log)
    reopened = make_log(config=log.config, recovery_point=last)
    assert reopened.recovery_point == last and reopened.log_end_offset == count
    assert reopened.active_segment.time_index.entries == 0
    reopened.active_segment.sanity_check()
    for i in range(count):
        reopened.append_as_leader(single(T0 + i * 10, os.urandom(size)))
    reopened.roll()
    with pytest.raises(FileNotFoundError):
        reopened.active_segment.sanity_check()
    reopened.flush()
    reopened.active_segment.sanity_check()
    last = reopened.log_end_offset
    crash(reopened)
    again = make_log(config=log.config, recovery_point=last)
    assert again.recovery_point == last and again.log_end_offset == 2 * count
    again.active_segment.sanity_check()


def test_corrupt_transaction_index_is_reset(make_log: MakeLog) -> None:
    log = make_log(segment_bytes=300)
    for i in range(20):
        log.append_as_leader(single(T0 + i))
    log.close()
    txn = files.transaction_index_file(log.dir, log.segments[1].base_offset)
    txn.write_bytes(b"garbage, not whole 34-byte entries")
    reopened = make_log(config=log.config, had_clean_shutdown=True, recovery_point=20)
    assert txn.stat().st_size == 0
    assert reopened.log_end_offset == 20 and [r.offset for r in read_all(reopened)] == list(range(20))


def test_lowering_segment_index_bytes_does_not_prevent_a_clean_load(make_log: MakeLog) -> None:
    log = make_log(segment_index_bytes=4096, index_interval_bytes=1)
    for i in range(100):
        log.append_as_leader(single(T0 + i))
    assert log.active_segment.offset_index.entries == 99
    log.close()
    smaller = log_config(segment_index_bytes=256, index_interval_bytes=1)
    reopened = make_log(config=smaller, had_clean_shutdown=True, recovery_point=100)
    assert reopened.log_end_offset == 100
    assert [r.offset for r in read_all(reopened, 90)] == list(range(90, 100))
    reopened.append_as_leader(single(T0 + 100))  # the full index rolls the segment
    assert [s.base_offset for s in reopened.segments] == [0, 100]
    reopened.truncate_to(50)  # truncation resizes the indexes again: no error either
    assert reopened.log_end_offset == 50


def test_recovery_after_lowering_segment_index_bytes_keeps_every_entry(make_log: MakeLog) -> None:
    """Kafka fails the load here (its rebuilt index is full after 32 entries); the rebuilt
    indexes grow to hold their entries instead, and the segment counts as full."""
    log = make_log(segment_index_bytes=4096, index_interval_bytes=1)
    for i in range(100):
        log.append_as_leader(single(T0 + i))
    crash(log)
    size = files.log_file(log.dir, 0).stat().st_size
    smaller = log_config(segment_index_bytes=256, index_interval_bytes=1)
    reopened = make_log(config=smaller)
    assert files.log_file(log.dir, 0).stat().st_size == size
    assert reopened.log_end_offset == 100 and reopened.active_segment.offset_index.entries == 99
    assert [r.offset for r in read_all(reopened, 40)] == list(range(40, 100))
    reopened.append_as_leader(single(T0 + 100))  # the full index rolls the segment
    assert [s.base_offset for s in reopened.segments] == [0, 100]


def test_legacy_and_v2_batches_survive_unclean_recovery(make_log: MakeLog) -> None:
    log = make_log(segment_bytes=600, index_interval_bytes=1)
    offset, expected = 0, []
    for i in range(30):
        if i % 3 == 0:
            data = build_legacy_batch([(offset, -1, b"k", b"v0-%d" % offset)], magic=0)
        elif i % 3 == 1:
            data = build_legacy_batch([(offset, T0 + offset, b"k", b"v1-%d" % offset),
                                       (offset + 1, T0 + offset, b"k", b"v1-%d" % (offset + 1))],
                                      magic=1, compression=CompressionType.GZIP)
        else:
            data = batch(b"v2-%d" % offset, base_offset=offset, timestamp=T0 + offset)
        info = log.append_as_follower(data)
        expected.extend((o, i % 3) for o in range(info.first_offset, info.last_offset + 1))
        offset = info.last_offset + 1
    before = [(r.offset, r.value) for r in read_all(log)]
    last = log.active_segment.log.path
    crash(log)
    with open(last, "ab") as f:
        f.write(b"\x00" * 8 + b"\x00\x00\x00\x20" + b"\x01" * 40)  # a legacy-looking header, bad CRC
    reopened = make_log(config=log.config)
    assert [(r.offset, r.value) for r in read_all(reopened)] == before
    assert [o for o, _ in expected] == [o for o, _ in before]
    assert reopened.log_end_offset == offset
    check_indexes(reopened)
    v1_offset = next(o for o, kind in expected if kind == 1 and o > 20)
    found = reopened.fetch_offset_by_timestamp(T0 + v1_offset)
    assert found is not None and found.offset == v1_offset


# --- leader epochs ------------------------------------------------------------------------------

def test_log_recovers_leader_epochs(make_log: MakeLog) -> None:
    log = make_log()
    for offset, epoch in ((0, 1), (1, 2), (2, 2), (3, 3)):
        log.append_as_follower(batch(b"random", base_offset=offset, partition_leader_epoch=epoch))
    entries = [(1, 0), (2, 1), (3, 3)]
    assert [(e.epoch, e.start_offset) for e in log.leader_epoch_cache.entries] == entries
    log.leader_epoch_cache.truncate_from_end(2)
    log.close()  # writes the truncated cache
    reopened = make_log(config=log.config)
    assert [(e.epoch, e.start_offset) for e in reopened.leader_epoch_cache.entries] == entries


def test_epoch_cache_is_cut_to_the_recovered_log_end(make_log: MakeLog) -> None:
    log = make_log()
    for offset, epoch in ((0, 1), (1, 2), (2, 3)):
        log.append_as_follower(batch(b"v", base_offset=offset, partition_leader_epoch=epoch))
    path = log.active_segment.log.path
    crash(log)
    os.truncate(path, len(batch(b"v")) * 2 - 1)  # only the first batch survives
    reopened = make_log(config=log.config)
    assert reopened.log_end_offset == 1
    assert [(e.epoch, e.start_offset) for e in reopened.leader_epoch_cache.entries] == [(1, 0)]


# --- offset overflow on follower appends -------------------------------------------------------

@pytest.mark.parametrize("multi", [False, True])
def test_over_compacted_log_recovers(make_log: MakeLog, multi: bool) -> None:
    log = make_log(segment_bytes=1000, index_interval_bytes=1)
    far = 2**31 - 1 + 2
    log.append_as_follower(batch(b"v1", keys=[b"k1"]))
    values = [b"v3", b"v4"] if multi else [b"v3"]
    log.append_as_follower(batch(*values, base_offset=far))
    log.append_as_follower(batch(b"v5", base_offset=far + len(values)))
    assert log.active_segment.base_offset == far
    log.close()
    for path in log.dir.glob("*.index"):
        index = OffsetIndex(path, files.offset_from_file_name(path.name))
        assert index.last_offset >= 0
        index.close()
    reopened = make_log(config=log.config)
    assert [r.offset for r in read_all(reopened)] == [0, far, *range(far + 1, far + len(values) + 1)]


# --- preallocated tails ------------------------------------------------------------------------

def test_preallocated_tail_is_truncated_on_unclean_reopen(make_log: MakeLog) -> None:
    log = make_log(preallocate=True, segment_bytes=4000, index_interval_bytes=100)
    for i in range(120):
        log.append_as_leader(single(T0 + i))
    sizes = [(s.log.path, s.size) for s in log.segments]
    crash(log)
    active_path, active_size = sizes[-1]
    assert active_path.stat().st_size == 4000 > active_size
    assert all(path.stat().st_size == size for path, size in sizes[:-1]), "rolled segments are trimmed"
    reopened = make_log(config=log.config, recovery_point=0)
    assert reopened.log_end_offset == 120 and reopened.active_segment.size == active_size
    assert active_path.stat().st_size == active_size
    reopened.append_as_leader(single())
    assert [r.offset for r in read_all(reopened)] == list(range(121))
    reopened.close()
    assert active_path.stat().st_size == reopened.active_segment.size


def test_preallocated_log_reopens_clean_after_close(make_log: MakeLog) -> None:
    log = make_log(preallocate=True, segment_bytes=4000)
    for i in range(10):
        log.append_as_leader(single(T0 + i))
    log.close()
    assert log.active_segment.log.path.stat().st_size == log.active_segment.size
    reopened = make_log(config=log.config, had_clean_shutdown=True, recovery_point=10)
    assert reopened.log_end_offset == 10
    reopened.append_as_leader(single())
    assert reopened.log_end_offset == 11


# --- the cleaner's .cleaned -> .swap -> swap-in protocol, one state per crash point ---------------

KEYS = 5


def original_log(make_log: MakeLog) -> Log:
    """Segments 0 (0-9), 10 (10-19), 20 (20-29), active 30 (30-34); key = offset % 5."""
    log = make_log(index_interval_bytes=1, segment_index_bytes=4096)
    for offset in range(35):
        log.append_as_leader(batch(b"orig-%d" % offset, keys=[b"%d" % (offset % KEYS)], timestamp=T0 + offset))
        if offset % 10 == 9:
            log.roll()
    assert [s.base_offset for s in log.segments] == [0, 10, 20, 30]
    return log


def write_segment(log: Log, base: int, offsets: list[int], suffix: str, clock: FakeClock) -> None:
    """A sealed segment at ``base`` holding single-record batches at ``offsets``, files ending ``suffix``."""
    segment = LogSegment.open(log.dir, base, segment_config(log.config), clock, file_suffix=suffix)
    for offset in offsets:
        data = batch(b"new-%d" % offset, keys=[b"%d" % (offset % KEYS)], base_offset=offset, timestamp=T0 + offset)
        segment.append(offset, T0 + offset, offset, data)
    segment.on_become_inactive_segment()
    segment.flush()
    segment.close()


def rename_suffix(dir: Path, base: int, old: str, new: str) -> None:
    for kind in files.SEGMENT_FILE_SUFFIXES:
        path = files.segment_file(dir, base, kind, old)
        if path.exists():
            path.rename(files.segment_file(dir, base, kind, new))


CLEANED_OFFSETS = list(range(15, 20))  # compacting segments 0 and 10 keeps the last value of each key
ORIGINAL = [(o, b"orig-%d" % o) for o in range(35)]
CLEANED = [(o, b"new-%d" % o) for o in CLEANED_OFFSETS] + [(o, b"orig-%d" % o) for o in range(20, 35)]


def only_cleaned(dir: Path) -> None:
    pass  # crash while writing the .cleaned segment


def swapped(dir: Path) -> None:
    rename_suffix(dir, 0, files.CLEANED_SUFFIX, files.SWAP_SUFFIX)


def swapped_first_old_deleted(dir: Path) -> None:
    swapped(dir)
    rename_suffix(dir, 0, "", files.DELETED_SUFFIX)


def swapped_all_old_deleted(dir: Path) -> None:
    swapped_first_old_deleted(dir)
    rename_suffix(dir, 10, "", files.DELETED_SUFFIX)


def swap_completed_old_still_deleted(dir: Path) -> None:
    swapped_all_old_deleted(dir)
    rename_suffix(dir, 0, files.SWAP_SUFFIX, "")


def log_swapped_indexes_still_cleaned(dir: Path) -> None:
    # crash inside the .cleaned -> .swap rename of one segment (the .log goes first): a .cleaned
    # file at that base remains, so the swap counts as incomplete and the clean is rolled back
    files.log_file(dir, 0, files.CLEANED_SUFFIX).rename(files.log_file(dir, 0, files.SWAP_SUFFIX))


def swap_log_renamed_indexes_still_swap(dir: Path) -> None:
    # crash inside the final .swap -> "" rename: no .log.swap is left, the index swaps still
    # have to be renamed into place (Kafka renames every *.swap file)
    swapped_all_old_deleted(dir)
    files.log_file(dir, 0, files.SWAP_SUFFIX).rename(files.log_file(dir, 0))


def swap_without_index_files(dir: Path) -> None:
    swapped(dir)
    files.offset_index_file(dir, 0, files.SWAP_SUFFIX).unlink()
    files.time_index_file(dir, 0, files.SWAP_SUFFIX).unlink()


@pytest.mark.parametrize(("crash_point", "expected", "bases"), [
    (only_cleaned, ORIGINAL, [0, 10, 20, 30]),
    (swapped, CLEANED, [0, 20, 30]),
    (swapped_first_old_deleted, CLEANED, [0, 20, 30]),
    (swapped_all_old_deleted, CLEANED, [0, 20, 30]),
    (swap_completed_old_still_deleted, CLEANED, [0, 20, 30]),
    (swap_without_index_files, CLEANED, [0, 20, 30]),
    (log_swapped_indexes_still_cleaned, ORIGINAL, [0, 10, 20, 30]),
    (swap_log_renamed_indexes_still_swap, CLEANED, [0, 20, 30]),
])
@pytest.mark.parametrize("clean_marker", [False, True])
def test_reload_after_crash_during_clean(
    make_log: MakeLog, clock: FakeClock, crash_point: Callable[[Path], None],
    expected: list[tuple[int, bytes]], bases: list[int], clean_marker: bool,
) -> None:
    log = original_log(make_log)
    write_segment(log, 0, CLEANED_OFFSETS, files.CLEANED_SUFFIX, clock)
    if clean_marker:
        log.close()
    else:
        crash(log)
    crash_point(log.dir)
    reopened = make_log(config=log.config, had_clean_shutdown=clean_marker, recovery_point=35 if clean_marker else 0)
    assert [(r.offset, r.value) for r in read_all(reopened)] == expected
    assert [s.base_offset for s in reopened.segments] == bases
    assert temp_files(reopened.dir) == []
    assert segment_names(reopened.dir) == [files.log_file(reopened.dir, b).name for b in bases]
    assert reopened.log_end_offset == 35
    check_indexes(reopened)
    reopened.append_as_leader(batch(b"after", keys=[b"x"]))
    assert read_all(reopened)[-1].offset == 35


def split_original(make_log: MakeLog) -> Log:
    log = make_log(index_interval_bytes=1)
    for offset in range(10):
        log.append_as_leader(batch(b"orig-%d" % offset, keys=[b"%d" % (offset % KEYS)], timestamp=T0 + offset))
    log.roll()
    log.append_as_leader(batch(b"orig-10", keys=[b"0"], timestamp=T0 + 10))
    return log


def split_half_swapped(dir: Path) -> None:
    rename_suffix(dir, 5, files.CLEANED_SUFFIX, files.SWAP_SUFFIX)  # descending: 5 first, then 0


def split_all_swapped(dir: Path) -> None:
    split_half_swapped(dir)
    rename_suffix(dir, 0, files.CLEANED_SUFFIX, files.SWAP_SUFFIX)


def split_first_swap_renamed(dir: Path) -> None:
    split_all_swapped(dir)
    rename_suffix(dir, 0, "", files.DELETED_SUFFIX)  # the old segment 0
    rename_suffix(dir, 0, files.SWAP_SUFFIX, "")  # ascending: 0 first, then 5


@pytest.mark.parametrize(("crash_point", "bases"), [
    (split_half_swapped, [0, 10]),
    (split_all_swapped, [0, 5, 10]),
    (split_first_swap_renamed, [0, 5, 10]),
])
def test_reload_after_crash_during_split(
    make_log: MakeLog, clock: FakeClock, crash_point: Callable[[Path], None], bases: list[int]
) -> None:
    log = split_original(make_log)
    write_segment(log, 0, list(range(5)), files.CLEANED_SUFFIX, clock)
    write_segment(log, 5, list(range(5, 10)), files.CLEANED_SUFFIX, clock)
    crash(log)
    crash_point(log.dir)
    reopened = make_log(config=log.config)
    assert [s.base_offset for s in reopened.segments] == bases
    expected_prefix = b"new-" if bases == [0, 5, 10] else b"orig-"
    assert [(r.offset, r.value) for r in read_all(reopened)] == [
        *((o, expected_prefix + b"%d" % o) for o in range(10)), (10, b"orig-10"),
    ]
    assert temp_files(reopened.dir) == []
    check_indexes(reopened)


def test_swap_of_an_incomplete_split_at_or_above_a_cleaned_file_is_dropped(make_log: MakeLog, clock: FakeClock) -> None:
    log = split_original(make_log)
    write_segment(log, 0, list(range(5)), files.CLEANED_SUFFIX, clock)
    write_segment(log, 5, list(range(5, 10)), files.SWAP_SUFFIX, clock)
    log.close()
    reopened = make_log(config=log.config, had_clean_shutdown=True, recovery_point=11)
    assert [s.base_offset for s in reopened.segments] == [0, 10]
    assert [r.value for r in read_all(reopened)][:2] == [b"orig-0", b"orig-1"]
    assert temp_files(reopened.dir) == []


# --- properties: recovery keeps exactly the complete valid batches ------------------------------

def append_plan(log: Log, plan: list[tuple[int, int, int, int]]) -> None:
    offset = 0
    for gap, count, size, codec in plan:
        offset += gap
        values = [bytes([65 + (offset + i) % 26]) * size for i in range(count)]
        log.append_as_follower(batch(*values, base_offset=offset, timestamp=T0 + offset, compression=codec,
                                     partition_leader_epoch=offset // 50))
        offset += count


def expected_records(kept: list[OnDisk]) -> list[tuple[int, bytes | None]]:
    return [(w.base_offset + i, v) for w in kept for i, v in enumerate(w.values)]


def check_recovered(log: Log, kept: list[OnDisk], active_base: int) -> None:
    """LEO, files, records, indexes and lookups all agree with ``kept``."""
    in_active = [w for w in kept if w.segment == active_base]
    assert log.log_end_offset == (in_active[-1].last_offset + 1 if in_active else active_base)
    assert [(r.offset, r.value) for r in read_all(log)] == expected_records(kept)
    by_segment: dict[int, list[OnDisk]] = {}
    for w in kept:
        by_segment.setdefault(w.segment, []).append(w)
    for segment in log.segments:
        ours = by_segment.get(segment.base_offset, [])
        assert segment.size == sum(w.size for w in ours)
        assert segment.log.path.stat().st_size == segment.size
    check_indexes(log)
    for w in kept:
        for target in {w.base_offset, w.last_offset}:
            first = batches_of(log.read(target, 1, LOG_END, min_one_message=True).records)[0]
            assert (first.base_offset, first.last_offset) == (w.base_offset, w.last_offset)
        found = log.fetch_offset_by_timestamp(T0 + w.base_offset)  # every record of a batch has this one
        assert found is not None and found.offset == w.base_offset


def intact_prefix(before: list[OnDisk], base: int, original: bytes, corrupted: bytes) -> list[OnDisk]:
    """The batches recovery must keep: all of earlier segments, then those of segment ``base``
    up to the first one whose bytes changed (the cut, garbage or zero padding may happen to
    rewrite a batch's tail with the bytes it already had: that batch is intact, hence kept)."""
    kept = [w for w in before if w.segment < base]
    for w in (w for w in before if w.segment == base):
        span = slice(w.position, w.position + w.size)
        if corrupted[span] != original[span]:
            break
        kept.append(w)
    return kept


PLANNED_BATCH = st.tuples(  # (gap before, records, value size, codec): at most ~550 bytes
    st.integers(0, 2), st.integers(1, 3), st.integers(0, 150),
    st.sampled_from([CompressionType.NONE, CompressionType.NONE, CompressionType.GZIP, CompressionType.LZ4]),
)
PLAN = st.lists(PLANNED_BATCH, min_size=1, max_size=30)


def open_log(dir: Path, config: LogConfig, clock: FakeClock, **kwargs: object) -> Log:
    return Log.open(dir, config, clock=clock, scheduler=FakeScheduler(clock), **kwargs)  # type: ignore[arg-type]


@settings(max_examples=100, deadline=None)
@example(plan=[(0, 1, 0, CompressionType.NONE)], interval=0, preallocate=True, cut=0.984375, garbage=b"",
         index_garbage=b"", recovery_fraction=0.0, zero_tail=False,
         index_zeros=None)  # the zero padding rewrites the batch's own zero tail
@given(plan=PLAN, interval=st.sampled_from([0, 1, 200, 4096]), preallocate=st.booleans(),
       cut=st.floats(0, 1), garbage=st.binary(max_size=200), index_garbage=st.binary(max_size=40),
       recovery_fraction=st.floats(0, 1), zero_tail=st.booleans(), index_zeros=st.none() | st.floats(0, 1))
def test_unclean_reopen_keeps_exactly_the_complete_batches_before_a_cut(
    plan: list[tuple[int, int, int, int]], interval: int, preallocate: bool, cut: float, garbage: bytes,
    index_garbage: bytes, recovery_fraction: float, zero_tail: bool, index_zeros: float | None,
) -> None:
    """Cut the active ``.log`` anywhere (and/or write garbage there, and/or garbage after its index):
    an unclean reopen keeps exactly the batches wholly before the cut, never a partial one.

    ``zero_tail``: the file keeps its size and the cut-off part reads as zeros, as a filesystem
    with delayed allocation leaves a file whose size reached the disk but whose data did not.
    ``index_zeros``: the offset and time index files are zeroed from that fraction of their
    length on (their entries never reached the disk; a preallocated index is all zeros there)."""
    clock = FakeClock(T0)
    config = log_config(segment_bytes=1500, index_interval_bytes=interval, segment_index_bytes=4096,
                        preallocate=str(preallocate).lower())
    with tempfile.TemporaryDirectory() as tmp:
        dir = Path(tmp) / "topic-0"
        log = open_log(dir, config, clock)
        append_plan(log, plan)
        before = log_batches(log)
        active = log.active_segment
        active_base, data_end, path = active.base_offset, active.size, active.log.path
        index_path = files.offset_index_file(dir, active_base)
        end = log.log_end_offset
        crash(log)
        position = int(cut * data_end)
        content = path.read_bytes()
        corrupted = content[:position] + garbage
        if len(corrupted) < len(content) and (preallocate or zero_tail):
            corrupted += bytes(len(content) - len(corrupted))  # a preallocated or delayed-allocation tail
        path.write_bytes(corrupted)
        if index_zeros is not None:
            for index in (index_path, files.time_index_file(dir, active_base)):
                if index.exists():
                    data = index.read_bytes()
                    keep = int(index_zeros * len(data))
                    index.write_bytes(data[:keep] + bytes(len(data) - keep))
        if index_garbage and index_path.exists():
            with open(index_path, "ab") as f:
                f.write(index_garbage)
        recovery_point = int(recovery_fraction * end)
        reopened = open_log(dir, config, clock, recovery_point=recovery_point)
        kept = intact_prefix(before, active_base, content, corrupted)
        check_recovered(reopened, kept, active_base)
        assert reopened.recovery_point == min(recovery_point, reopened.log_end_offset)
        reopened.append_as_leader(batch(b"after"))
        assert read_all(reopened)[-1].value == b"after"
        reopened.close()


@settings(max_examples=60, deadline=None)
@given(plan=st.lists(PLANNED_BATCH, min_size=6, max_size=30), interval=st.sampled_from([0, 300]),
       segment_bytes=st.sampled_from([600, 1000]),
       which=st.floats(0, 1), where=st.floats(0, 1), seed=st.integers(0, 2**32))
def test_corruption_loop_recovery_keeps_exactly_the_valid_prefix(
    plan: list[tuple[int, int, int, int]], interval: int, segment_bytes: int, which: float, where: float, seed: int
) -> None:
    """Garbage from a random byte of a random segment to its end (every byte changed): recovery
    from the start keeps the batches before the damaged one, truncates that segment there and
    drops every later segment. Six batches or more, one to five per segment: the damaged segment
    is usually not the last one."""
    clock = FakeClock(T0)
    config = log_config(segment_bytes=segment_bytes, index_interval_bytes=interval, segment_index_bytes=4096)
    with tempfile.TemporaryDirectory() as tmp:
        dir = Path(tmp) / "topic-0"
        log = open_log(dir, config, clock)
        append_plan(log, plan)
        before = log_batches(log)
        bases = [s.base_offset for s in log.segments]
        non_empty = [s for s in log.segments if s.size > 0]
        target = non_empty[min(int(which * len(non_empty)), len(non_empty) - 1)]
        base, size, path = target.base_offset, target.size, target.log.path
        crash(log)
        position = min(int(where * size), size - 1)
        content = bytearray(path.read_bytes())
        rng = random.Random(seed)
        for i in range(position, len(content)):
            content[i] ^= rng.randrange(1, 256)
        original = path.read_bytes()
        path.write_bytes(bytes(content))
        reopened = open_log(dir, config, clock)
        kept = intact_prefix(before, base, original, bytes(content))
        assert [s.base_offset for s in reopened.segments] == [b for b in bases if b <= base]
        assert segment_names(dir) == [files.log_file(dir, b).name for b in bases if b <= base]
        check_recovered(reopened, kept, base)
        assert temp_files(dir) == []
        reopened.close()


@pytest.mark.parametrize("clean", [True, False])
def test_opened_logs_hold_no_descriptors_until_used(tmp_path: Path, make_log: MakeLog, clean: bool) -> None:
    dirs = [tmp_path / f"many-{i}" for i in range(12)]
    for dir in dirs:
        log = make_log(dir=dir, segment_bytes=200)
        for i in range(6):
            log.append_as_leader(batch(b"v%d" % i))
        log.close()
    assert descriptors_under(tmp_path) == []
    logs = [make_log(dir=dir, segment_bytes=200, had_clean_shutdown=clean, recovery_point=0) for dir in dirs]
    assert descriptors_under(tmp_path) == []  # 10,000 partitions would otherwise need 30,000 descriptors
    info = logs[0].append_as_leader(batch(b"more"))
    logs[0].update_high_watermark(logs[0].log_end_offset)
    assert info.first_offset == 6 and read_all(logs[0])[-1].value == b"more"
    assert logs[0].active_segment.offset_index.length == logs[0].config.segment_index_bytes // 8 * 8
    held = descriptors_under(tmp_path)
    assert held and all(path.startswith(str(dirs[0])) for path in held)  # only the used log opened files


@pytest.mark.parametrize("garbage", [b"\x7f", b"\x00"], ids=["partial", "zeros"])
def test_a_clean_reopen_checks_a_large_garbage_tail_a_chunk_at_a_time(
    make_log: MakeLog, monkeypatch: pytest.MonkeyPatch, garbage: bytes,
) -> None:
    """A torn or overwritten active tail after a clean stop is cut; the check reads it a chunk at
    a time, as recovery does, however much garbage there is."""
    log = make_log()
    for i in range(10):
        log.append_as_leader(single(T0 + i))
    log.close()
    path = log.segments[-1].log.path
    whole = path.stat().st_size
    with path.open("ab") as f:
        f.write(garbage * (3 * SCAN_CHUNK_BYTES // len(garbage)))
    reads: list[int] = []
    read = FileRecords.read

    def recorded(self: FileRecords, position: int, size: int) -> bytes:
        reads.append(size)
        return read(self, position, size)

    monkeypatch.setattr(FileRecords, "read", recorded)
    reopened = make_log(config=log.config, had_clean_shutdown=True, recovery_point=10)
    assert reopened.log_end_offset == 10 and path.stat().st_size == whole
    assert max(reads) <= SCAN_CHUNK_BYTES
