"""FileRecords: the ``.log`` file of a segment (Kafka's FileRecordsTest facts, kafka-storage.md §1.2)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidelog.errors import CorruptRecordError, StorageError
from tidelog.records import CompressionType, build_legacy_batch
from tidelog.storage import file_records, segment_reader
from tidelog.storage.file_records import FileRecords, _remaining
from tidelog.storage.segment_reader import SegmentReader

from storage_helpers import batch, records


def new_file(tmp_path: Path, *chunks: bytes, name: str = "00000000000000000000.log") -> FileRecords:
    fr = FileRecords.open(tmp_path / name, file_already_exists=False)
    for chunk in chunks:
        fr.append(chunk)
    return fr


def reader_of(fr: FileRecords, base_offset: int = 0) -> SegmentReader:
    """The shared segment reader over ``fr``'s data (what LogSegment.reader gives)."""
    return SegmentReader(fr.descriptor(), fr.size_in_bytes, base_offset, fr.path)


def three_batches() -> list[bytes]:
    return [records(3, base_offset=0), records(1, base_offset=3, value_size=200), records(5, base_offset=4)]


# --- size, append, read ---------------------------------------------------------------------

def test_new_file_is_empty_and_append_grows_size(tmp_path: Path) -> None:
    parts = three_batches()
    fr = new_file(tmp_path)
    assert fr.size_in_bytes == 0
    written = [fr.append(p) for p in parts]
    assert written == [len(p) for p in parts]
    assert fr.size_in_bytes == sum(map(len, parts)) == (tmp_path / "00000000000000000000.log").stat().st_size
    fr.close()


def test_read_never_goes_past_the_logical_end(tmp_path: Path) -> None:
    parts = three_batches()
    fr = new_file(tmp_path, *parts)
    whole = b"".join(parts)
    assert fr.read(0, 10**9) == whole
    assert fr.read(len(parts[0]), len(parts[1])) == parts[1]
    assert fr.read(fr.size_in_bytes, 10) == b""
    assert fr.read(fr.size_in_bytes + 5, 10) == b""
    fr.close()


def test_existing_file_size_is_its_length(tmp_path: Path) -> None:
    parts = three_batches()
    new_file(tmp_path, *parts).close()
    fr = FileRecords.open(tmp_path / "00000000000000000000.log", file_already_exists=True)
    assert fr.size_in_bytes == sum(map(len, parts))
    assert [b.base_offset for _, b in fr.batches()] == [0, 3, 4]
    fr.close()


def test_preallocated_file_is_long_on_disk_but_empty_until_trimmed(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.log"
    fr = FileRecords.open(path, file_already_exists=False, init_file_size=4096, preallocate=True)
    assert path.stat().st_size == 4096 and fr.size_in_bytes == 0
    data = records(2)
    fr.append(data)
    assert path.stat().st_size == 4096 and fr.size_in_bytes == len(data)
    assert fr.read(0, 4096) == data
    fr.trim()
    assert path.stat().st_size == len(data)
    fr.close()


def test_truncate_to_cuts_file_and_reports_bytes_removed(tmp_path: Path) -> None:
    parts = three_batches()
    fr = new_file(tmp_path, *parts)
    removed = fr.truncate_to(len(parts[0]))
    assert removed == len(parts[1]) + len(parts[2])
    assert fr.size_in_bytes == len(parts[0]) == fr.path.stat().st_size
    assert [b.base_offset for _, b in fr.batches()] == [0]
    fr.close()


@pytest.mark.parametrize("target", [-1, 10**6])
def test_truncate_to_outside_the_data_is_a_storage_error_naming_the_file(tmp_path: Path, target: int) -> None:
    fr = new_file(tmp_path, records(2))
    with pytest.raises(StorageError) as e:
        fr.truncate_to(target)
    assert e.value.path == fr.path
    fr.close()


def test_rename_keeps_data_and_delete_if_exists(tmp_path: Path) -> None:
    data = records(4)
    fr = new_file(tmp_path, data)
    target = tmp_path / "00000000000000000000.log.deleted"
    fr.rename_to(target)
    assert fr.path == target and target.exists() and not (tmp_path / "00000000000000000000.log").exists()
    assert fr.read(0, 1000) == data
    assert fr.delete_if_exists() is True
    assert not target.exists()
    assert fr.delete_if_exists() is False


def test_last_modified_round_trips_in_ms(tmp_path: Path) -> None:
    fr = new_file(tmp_path, records(1))
    fr.set_last_modified_ms(1_600_000_000_123)
    assert fr.last_modified_ms() == 1_600_000_000_123
    fr.close()


def test_open_missing_existing_file_is_a_storage_error(tmp_path: Path) -> None:
    with pytest.raises(StorageError):
        FileRecords.open(tmp_path / "00000000000000000007.log", file_already_exists=True)


# --- scanning -------------------------------------------------------------------------------

def test_batches_yield_position_and_batch_in_order(tmp_path: Path) -> None:
    parts = three_batches()
    fr = new_file(tmp_path, *parts)
    found = [(pos, b.base_offset, b.last_offset) for pos, b in fr.batches()]
    assert found == [(0, 0, 2), (len(parts[0]), 3, 3), (len(parts[0]) + len(parts[1]), 4, 8)]
    start = len(parts[0])
    assert [b.base_offset for _, b in fr.batches(start)] == [3, 4]
    assert [b.base_offset for _, b in fr.batches(0, start + len(parts[1]))] == [0, 3]
    fr.close()


@pytest.mark.parametrize("cut", [1, 11, 16, 17, 30, 60])
def test_batches_stop_quietly_at_a_partial_tail(tmp_path: Path, cut: int) -> None:
    parts = three_batches()
    fr = new_file(tmp_path, parts[0], parts[1], parts[2][:cut])
    assert [b.base_offset for _, b in fr.batches()] == [0, 3]
    assert [loc.base_offset for loc in reader_of(fr).batch_locations()] == [0, 3]
    fr.close()


def test_batches_raise_corrupt_record_with_path_and_position_for_a_short_length(tmp_path: Path) -> None:
    parts = three_batches()
    bad = bytearray(parts[1])
    bad[8:12] = (13).to_bytes(4, "big")  # below Kafka's RECORD_OVERHEAD_V0 (14)
    fr = new_file(tmp_path, parts[0], bytes(bad), parts[2])
    with pytest.raises(CorruptRecordError) as e:
        list(fr.batches())
    assert e.value.path == fr.path and e.value.position == len(parts[0])
    fr.close()


def test_zero_filled_tail_reads_as_corrupt_at_its_first_byte(tmp_path: Path) -> None:
    data = records(3)
    fr = new_file(tmp_path, data, bytes(100))
    seen = []
    with pytest.raises(CorruptRecordError) as e:
        for pos, _ in fr.batches():
            seen.append(pos)
    assert seen == [0] and e.value.position == len(data)
    fr.close()


@pytest.mark.parametrize("chunk", [61, 100, 4096])
def test_batches_larger_than_the_scan_chunk_are_read_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int
) -> None:
    monkeypatch.setattr(file_records, "SCAN_CHUNK_BYTES", chunk)
    parts = [records(2, value_size=5000), records(1, base_offset=2), records(3, base_offset=3, value_size=9000)]
    fr = new_file(tmp_path, *parts)
    assert [(b.base_offset, b.size_in_bytes) for _, b in fr.batches()] == [
        (0, len(parts[0])), (2, len(parts[1])), (3, len(parts[2]))
    ]
    fr.close()


@pytest.mark.parametrize("chunk", [61, 4096])
def test_a_read_shorter_than_asked_ends_the_walk(chunk: int) -> None:
    """An object listed larger than it is (a store answering short): the walk stops at the last
    whole batch instead of asking for the same bytes again and again."""
    parts = [records(2), records(1, base_offset=2), records(3, base_offset=3, value_size=500)]
    listed = b"".join(parts)
    stored = listed[:len(parts[0]) + len(parts[1]) + 80]  # the third batch cut after its header
    reads: list[tuple[int, int]] = []

    def read(position: int, size: int) -> bytes:
        reads.append((position, size))
        assert len(reads) < 50, "the walk keeps asking for bytes that are not there"
        return stored[position:position + size]

    found = list(file_records.chunked_batches(read, "store/key", 0, len(listed), chunk))
    assert [(p, b.base_offset) for p, b in found] == [(0, 0), (len(parts[0]), 2)]


@pytest.mark.parametrize("chunk", [30, 61, 130, 16 << 10])
def test_batch_locations_cross_search_chunks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int) -> None:
    monkeypatch.setattr(segment_reader, "SEARCH_CHUNK_BYTES", chunk)
    parts = [records(1, base_offset=o, value_size=7 * (o + 1)) for o in range(12)]
    fr = new_file(tmp_path, *parts)
    locations = list(reader_of(fr).batch_locations())
    positions = [sum(map(len, parts[:i])) for i in range(12)]
    assert [(loc.base_offset, loc.position, loc.size) for loc in locations] == [
        (o, positions[o], len(parts[o])) for o in range(12)
    ]
    fr.close()


def test_search_for_offset_finds_first_batch_reaching_target(tmp_path: Path) -> None:
    # batches 0-2, 3, 4-8 and, after a gap, 20-21 (a compacted or follower log)
    parts = [*three_batches(), records(2, base_offset=20)]
    fr = new_file(tmp_path, *parts)
    starts = [sum(map(len, parts[:i])) for i in range(4)]
    expect = {0: 0, 2: 0, 3: 1, 4: 2, 8: 2, 9: 3, 15: 3, 21: 3}
    for target, index in expect.items():
        loc = reader_of(fr).search_for_offset(target)
        assert loc is not None and loc.position == starts[index], target
    assert reader_of(fr).search_for_offset(22) is None
    # starting position skips earlier batches even if they hold the target
    loc = reader_of(fr).search_for_offset(0, starts[2])
    assert loc is not None and loc.base_offset == 4
    fr.close()


def test_search_for_offset_in_legacy_wrapper_reports_first_inner_offset(tmp_path: Path) -> None:
    wrapper = build_legacy_batch(
        [(10, 1000, b"a", b"1"), (11, 1001, b"b", b"2"), (12, 1002, b"c", b"3")],
        magic=1, compression=CompressionType.GZIP,
    )
    plain = build_legacy_batch([(13, 1003, b"d", b"4")], magic=1)
    fr = new_file(tmp_path, wrapper, plain, name="00000000000000000010.log")
    loc = reader_of(fr, 10).search_for_offset(11)
    assert loc is not None and (loc.base_offset, loc.last_offset, loc.position, loc.magic) == (10, 12, 0, 1)
    loc = reader_of(fr, 10).search_for_offset(13)
    assert loc is not None and (loc.base_offset, loc.last_offset, loc.position) == (13, 13, len(wrapper))
    fr.close()


@settings(max_examples=60, deadline=None)
@given(sizes=st.lists(st.integers(1, 400), min_size=1, max_size=12), cut=st.integers(0, 10_000))
def test_batches_are_exactly_the_complete_prefix(sizes: list[int], cut: int) -> None:
    parts = [batch(b"x" * size, base_offset=offset) for offset, size in enumerate(sizes)]
    data = b"".join(parts)[:cut]
    with tempfile.TemporaryDirectory() as d:
        fr = new_file(Path(d), data)
        ends = [sum(map(len, parts[: i + 1])) for i in range(len(parts))]
        expected = [i for i, end in enumerate(ends) if end <= len(data)]
        assert [b.base_offset for _, b in fr.batches()] == expected
        assert [loc.base_offset for loc in reader_of(fr).batch_locations()] == expected
        fr.close()


def test_append_of_several_buffers_writes_them_back_to_back(tmp_path: Path) -> None:
    fr = FileRecords.open(tmp_path / "00000000000000000000.log", file_already_exists=False)
    assert fr.append((b"head", bytearray(b"-"), memoryview(b"tail"))) == 9
    assert fr.append(b"!") == 1
    assert fr.read(0, 100) == b"head-tail!" and fr.size_in_bytes == 10
    fr.close()


def test_remaining_buffers_skip_the_bytes_already_written() -> None:
    views = [memoryview(b"abc"), memoryview(b"defg"), memoryview(b"h")]
    assert [bytes(v) for v in _remaining(views, 0)] == [b"abc", b"defg", b"h"]
    assert [bytes(v) for v in _remaining(views, 4)] == [b"efg", b"h"]
    assert [bytes(v) for v in _remaining(views, 7)] == [b"h"]


def short_pwritev(monkeypatch: pytest.MonkeyPatch, *limits: int) -> list[bytes]:
    """Make ``os.pwritev``, as file_records calls it, write at most ``limits[i]`` bytes on call
    ``i`` (the last limit repeats); returns the bytes each call was asked to write."""
    real = os.pwritev
    asked: list[bytes] = []

    def pwritev(fd: int, buffers: list[memoryview], offset: int) -> int:
        data = b"".join(bytes(b) for b in buffers)
        limit = limits[min(len(asked), len(limits) - 1)]
        asked.append(data)
        if len(asked) > 100:
            raise AssertionError("append keeps calling pwritev although it writes nothing")
        return real(fd, [data[:limit]], offset) if limit else 0

    monkeypatch.setattr(file_records.os, "pwritev", pwritev)
    return asked


def test_a_short_gathered_write_resumes_mid_buffer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fr = FileRecords.open(tmp_path / "00000000000000000000.log", file_already_exists=False)
    asked = short_pwritev(monkeypatch, 3)
    assert fr.append((b"head", bytearray(b"-"), memoryview(b"tail"))) == 9
    assert asked == [b"head-tail", b"d-tail", b"ail"]  # each retry starts where the last write stopped
    assert fr.size_in_bytes == 9 and fr.path.read_bytes() == b"head-tail"
    assert fr.append(b"!") == 1
    assert fr.read(0, 100) == b"head-tail!" and fr.path.stat().st_size == fr.size_in_bytes == 10
    fr.close()


@pytest.mark.parametrize("limits", [(0,), (3, 0)], ids=["nothing", "part-then-nothing"])
def test_a_write_of_zero_bytes_is_a_storage_error_and_the_size_stays(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, limits: tuple[int, ...]
) -> None:
    fr = new_file(tmp_path, b"before")
    short_pwritev(monkeypatch, *limits)
    with pytest.raises(StorageError, match="wrote nothing") as e:
        fr.append((b"head", b"tail"))
    assert e.value.path == fr.path
    assert fr.size_in_bytes == len(b"before") and fr.read(0, 100) == b"before"
    fr.close()


def test_append_of_more_buffers_than_one_pwritev_takes(tmp_path) -> None:
    """IOV_MAX is a hard limit of the gathered write: a longer tuple goes in several calls."""
    from tidelog.storage.file_records import IOV_MAX, FileRecords

    records = FileRecords.open(tmp_path / "00000000000000000000.log", file_already_exists=False)
    parts = tuple(bytes([i % 251]) * 3 for i in range(IOV_MAX * 2 + 5))
    assert records.append(parts) == 3 * len(parts)
    assert records.read(0, 3 * len(parts)) == b"".join(parts)
    records.close()
