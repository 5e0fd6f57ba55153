"""File slices: a read asked ``as_slice`` returns the very bytes a plain read returns, held by the
slice's own descriptor through deletion, renaming, compaction's swap and closing of its segment."""

from __future__ import annotations

import gc
import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from storage_helpers import T0, MakeLog, batch, log_config, records

from tests.fd_helpers import descriptors_under
from tidelog.cleaner.clean import Cleaner, CleanerBuffers, InProcessEngine
from tidelog.cleaner.offset_map import OffsetMap
from tidelog.errors import StorageError
from tidelog.storage.fetch_info import FetchDataInfo, FetchIsolation
from tidelog.storage import file_slice
from tidelog.storage.file_slice import FileSlice, close_records
from tidelog.storage.log import Log
from tidelog.testing import FakeClock, FakeScheduler

LOG_END, HW, COMMITTED = FetchIsolation.LOG_END, FetchIsolation.HIGH_WATERMARK, FetchIsolation.TXN_COMMITTED


@pytest.fixture(autouse=True)
def every_range_a_slice(monkeypatch: pytest.MonkeyPatch) -> None:
    """Slices from one byte on (the default keeps small ranges as bytes: tested on its own)."""
    monkeypatch.setattr(file_slice, "MIN_SLICE_BYTES", 1)


def sliced(info: FetchDataInfo) -> bytes:
    """The bytes of a read's records, closing a slice."""
    records = info.records
    if isinstance(records, FileSlice):
        with records:
            assert len(records) == records.size > 0
            return records.read()
    assert records == b""
    return records


# (record count, value size) per batch (at most ~750 bytes); segments of 800-3000 bytes hold one to a few.
PLAN = st.lists(st.tuples(st.integers(1, 5), st.integers(0, 120)), min_size=1, max_size=30)
READS = st.lists(st.tuples(st.integers(0, 1 << 16), st.integers(0, 3000), st.booleans(),
                           st.sampled_from([LOG_END, HW, COMMITTED])), min_size=1, max_size=30)


@settings(max_examples=60, deadline=None)
@example(plan=[(3, 100)] * 10, segment_bytes=800, hw_pick=5, reads=[(7, 0, True, HW), (7, 1, False, LOG_END)])
@given(plan=PLAN, segment_bytes=st.sampled_from([800, 1500, 3000]), hw_pick=st.integers(0, 1 << 16), reads=READS)
def test_a_slice_holds_the_bytes_a_plain_read_returns(
    plan: list[tuple[int, int]], segment_bytes: int, hw_pick: int, reads: list[tuple[int, int, bool, FetchIsolation]]
) -> None:
    """Any offset (``pick % (log end + 1)``), any limit, with or without min_one_message, bounded
    by the log end, the high watermark (anywhere, also mid-segment) or the last stable offset:
    the slice's bytes are the plain read's, with the same position and incompleteness."""
    clock = FakeClock(T0)
    scheduler = FakeScheduler(clock)
    config = log_config(segment_bytes=segment_bytes, index_interval_bytes=200, segment_index_bytes=4096)
    with tempfile.TemporaryDirectory() as tmp:
        dir = Path(tmp) / "topic-0"
        log = Log.open(dir, config, clock=clock, scheduler=scheduler)
        for count, size in plan:
            log.append_as_leader(batch(*[b"x" * size] * count, timestamp=T0), leader_epoch=0)
        end = log.log_end_offset
        log.update_high_watermark(hw_pick % (end + 1))
        for pick, max_length, min_one, isolation in reads:
            offset = pick % (end + 1)
            plain = log.read(offset, max_length, isolation, min_one)
            as_slice = log.read(offset, max_length, isolation, min_one, as_slice=True)
            assert plain.fetch_offset_metadata == as_slice.fetch_offset_metadata
            assert plain.first_entry_incomplete == as_slice.first_entry_incomplete
            assert sliced(as_slice) == plain.records, (offset, max_length, min_one, isolation)
        log.close()
        assert descriptors_under(Path(tmp)) == []


def test_an_empty_read_stays_bytes(make_log: MakeLog) -> None:
    log = make_log()
    log.append_as_leader(records(3), leader_epoch=0)
    assert log.read(3, 1000, LOG_END, as_slice=True).records == b""  # at the log end
    assert log.read(0, 1000, HW, as_slice=True).records == b""  # the high watermark is still 0
    assert log.read(0, 0, LOG_END, False, as_slice=True).records == b""  # no room


def test_a_slice_outlives_retention_deleting_its_segment(make_log: MakeLog, clock: FakeClock, tp_dir: Path) -> None:
    log = make_log(segment_bytes=400, file_delete_delay_ms=1000)
    for i in range(6):
        log.append_as_leader(records(5, value_size=40), leader_epoch=0)
    log.update_high_watermark(log.log_end_offset)
    first = log._segments.snapshot()[0]  # test seam: the segment retention is about to delete
    expected = log.read(0, 1 << 20, HW).records
    held = log.read(0, 1 << 20, HW, as_slice=True).records
    assert isinstance(held, FileSlice) and held.path == first.log.path
    assert log.delete_oldest_segments([first], "retention") == 1
    clock.advance(1000)  # the delayed unlink of the .deleted files
    assert not any(tp_dir.glob("*.deleted"))
    assert held.read() == expected
    assert [t for t in descriptors_under(tp_dir) if t.endswith("(deleted)")] == [f"{held.path}.deleted (deleted)"]
    held.close()
    assert not any(t.endswith("(deleted)") for t in descriptors_under(tp_dir))


def test_a_slice_outlives_a_clean_swapping_its_segment(make_log: MakeLog, clock: FakeClock, tp_dir: Path) -> None:
    log = make_log(segment_bytes=400, cleanup_policy="compact", file_delete_delay_ms=1000)
    for i in range(12):  # two keys, overwritten: the clean removes most of the records
        log.append_as_leader(batch(b"v%d" % i + b"." * 60, keys=[b"k%d" % (i % 2)], timestamp=T0 + i), leader_epoch=0)
    log.update_high_watermark(log.log_end_offset)
    expected = log.read(0, 1 << 20, HW).records
    held = log.read(0, 1 << 20, HW, as_slice=True).records
    assert isinstance(held, FileSlice)
    buffers = CleanerBuffers(dedupe_buffer_size=1024 * 24, load_factor=0.75, io_buffer_size=65536,
                             max_io_buffer_size=65536)
    cleaner = Cleaner(InProcessEngine(buffers, offset_map=OffsetMap.with_slots(1024, 0.75)), clock,
                      check_done=lambda tp: None)
    cleaner.clean_pass(log, log.topic_partition, 0, log.active_segment.base_offset, current_time=clock.milliseconds())
    clock.advance(1000)
    assert log.read(0, 1 << 20, HW).records != expected  # swapped: the log now reads the cleaned bytes
    assert held.read() == expected
    held.close()
    assert not any(t.endswith("(deleted)") for t in descriptors_under(tp_dir))


def test_a_slice_outlives_its_log_closing_and_its_files_renamed(make_log: MakeLog, tp_dir: Path) -> None:
    log = make_log()
    log.append_as_leader(records(10, value_size=50), leader_epoch=0)
    expected = log.read(0, 1 << 20, LOG_END).records
    held = log.read(0, 1 << 20, LOG_END, as_slice=True).records
    assert isinstance(held, FileSlice)
    log.close()
    renamed = tp_dir.parent / "topic-0.moved"
    tp_dir.rename(renamed)
    assert held.read() == expected
    assert descriptors_under(renamed) == [str(held.path).replace(str(tp_dir), str(renamed))]
    held.close()
    assert descriptors_under(renamed) == []


def test_a_file_cut_short_under_a_slice_is_an_error_naming_it(make_log: MakeLog, tp_dir: Path) -> None:
    log = make_log()
    log.append_as_leader(records(10, value_size=50), leader_epoch=0)
    held = log.read(0, 1 << 20, LOG_END, as_slice=True).records
    assert isinstance(held, FileSlice)
    os.truncate(held.path, held.size - 7)
    with held, pytest.raises(StorageError, match="ends 7 bytes before") as raised:
        held.read()
    assert str(held.path) in str(raised.value)
    buffer = memoryview(bytearray(held.size))
    with pytest.raises(ValueError, match="closed"):
        held.read_into(buffer, 0)


def test_read_into_fills_from_any_start(tmp_path: Path) -> None:
    path = tmp_path / "data.log"
    path.write_bytes(bytes(range(256)) * 4)
    with open(path, "rb") as f:
        part = FileSlice.of(f.fileno(), 100, 500, path)
    buffer = memoryview(bytearray(64))
    assert part.read_into(buffer, 0) == 64 and bytes(buffer) == (bytes(range(256)) * 4)[100:164]
    assert part.read_into(buffer, 480) == 20 and bytes(buffer[:20]) == (bytes(range(256)) * 4)[580:600]
    assert part.read() == (bytes(range(256)) * 4)[100:600]
    os.truncate(path, 590)
    assert part.read_into(buffer, 480) == 10, "short where the file ends"
    part.close()


def test_close_is_idempotent_and_a_dropped_slice_releases_its_descriptor(tmp_path: Path) -> None:
    path = tmp_path / "data.log"
    path.write_bytes(b"x" * 100)
    with open(path, "rb") as f:
        part = FileSlice.of(f.fileno(), 0, 100, path)
        dropped = FileSlice.of(f.fileno(), 10, 5, path)
    assert len(descriptors_under(tmp_path)) == 2
    del dropped
    gc.collect()
    assert len(descriptors_under(tmp_path)) == 1
    close_records(part)
    close_records(part)
    close_records(b"bytes need nothing")
    assert part.closed and descriptors_under(tmp_path) == []
    with pytest.raises(ValueError, match="closed"):
        part.fileno()
    with pytest.raises(ValueError, match="invalid file slice"):
        FileSlice(0, 0, 0, path)


def test_a_slice_of_a_closed_descriptor_is_a_storage_error(tmp_path: Path) -> None:
    path = tmp_path / "data.log"
    path.write_bytes(b"x")
    fd = os.open(path, os.O_RDONLY)
    os.close(fd)
    with pytest.raises(StorageError, match="cannot hold the read's file") as raised:
        FileSlice.of(fd, 0, 1, path)
    assert str(path) in str(raised.value)


def test_ranges_below_the_slice_minimum_stay_bytes(make_log: MakeLog, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(file_slice, "MIN_SLICE_BYTES", 256 * 1024)
    log = make_log()
    for _ in range(6):
        log.append_as_leader(batch(*[b"m" * 20_000] * 5), leader_epoch=0)  # ~100 KB each
    small = log.read(0, 200_000, LOG_END, as_slice=True)
    assert isinstance(small.records, bytes) and small.records == log.read(0, 200_000, LOG_END).records
    large = log.read(0, 400_000, LOG_END, as_slice=True)
    assert isinstance(large.records, FileSlice) and sliced(large) == log.read(0, 400_000, LOG_END).records


def test_a_process_out_of_descriptors_reads_the_bytes(make_log: MakeLog, monkeypatch: pytest.MonkeyPatch) -> None:
    """EMFILE at the duplicate: the read returns the bytes (a busy broker is no disk fault)."""
    log = make_log()
    log.append_as_leader(records(10, value_size=50), leader_epoch=0)
    expected = log.read(0, 1 << 20, LOG_END).records

    def no_descriptor_left(fd: int) -> int:
        raise OSError(24, "Too many open files")

    monkeypatch.setattr(os, "dup", no_descriptor_left)
    got = log.read(0, 1 << 20, LOG_END, as_slice=True)
    assert isinstance(got.records, bytes) and got.records == expected
