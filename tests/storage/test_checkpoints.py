"""Checkpoint files (Kafka's CheckpointFile and its tests), the atomic write helper, the epoch cache."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidelog.errors import CheckpointError, StorageError
from tidelog.storage.atomic import fsync_dir, write_atomically
from tidelog.storage.checkpoints import (
    CLEANER_OFFSET_CHECKPOINT_FILE,
    EPOCH_ENTRY_FORMAT,
    LEADER_EPOCH_CHECKPOINT_FILE,
    LOG_START_OFFSET_CHECKPOINT_FILE,
    OFFSET_ENTRY_FORMAT,
    RECOVERY_POINT_CHECKPOINT_FILE,
    REPLICATION_OFFSET_CHECKPOINT_FILE,
    EpochEntry,
    LeaderEpochCache,
    LeaderEpochCheckpointFile,
    OffsetCheckpointFile,
    format_checkpoint,
    parse_checkpoint,
)
from tidelog.storage.files import temporary_write_path
from tidelog.topic_partition import TopicPartition

KAFKA_CLEANER_EXAMPLE = "0\n2\norders 3 1520\norders 0 977\n"


def test_file_names_are_kafkas() -> None:
    assert RECOVERY_POINT_CHECKPOINT_FILE == "recovery-point-offset-checkpoint"
    assert LOG_START_OFFSET_CHECKPOINT_FILE == "log-start-offset-checkpoint"
    assert REPLICATION_OFFSET_CHECKPOINT_FILE == "replication-offset-checkpoint"
    assert CLEANER_OFFSET_CHECKPOINT_FILE == "cleaner-offset-checkpoint"
    assert LEADER_EPOCH_CHECKPOINT_FILE == "leader-epoch-checkpoint"


# --- offset checkpoints ----------------------------------------------------------------------

def test_read_kafka_cleaner_offset_checkpoint_example(tmp_path: Path) -> None:
    path = tmp_path / CLEANER_OFFSET_CHECKPOINT_FILE
    path.write_text(KAFKA_CLEANER_EXAMPLE)
    assert OffsetCheckpointFile(path).read() == {TopicPartition("orders", 3): 1520, TopicPartition("orders", 0): 977}


def test_write_offset_checkpoint_exact_bytes_sorted_by_topic_then_partition(tmp_path: Path) -> None:
    checkpoint = OffsetCheckpointFile(tmp_path / RECOVERY_POINT_CHECKPOINT_FILE)
    checkpoint.write({TopicPartition("orders", 3): 1520, TopicPartition("orders", 0): 977, TopicPartition("a-b.c_d", 10): 0})
    assert checkpoint.path.read_bytes() == b"0\n3\na-b.c_d 10 0\norders 0 977\norders 3 1520\n"


def test_write_empty_offset_checkpoint_is_version_and_zero_count(tmp_path: Path) -> None:
    checkpoint = OffsetCheckpointFile(tmp_path / "cp")
    checkpoint.write({})
    assert checkpoint.path.read_bytes() == b"0\n0\n"
    assert checkpoint.read() == {}


def test_construction_creates_missing_file_empty(tmp_path: Path) -> None:
    path = tmp_path / LOG_START_OFFSET_CHECKPOINT_FILE
    checkpoint = OffsetCheckpointFile(path)
    assert path.exists() and path.read_bytes() == b""
    assert checkpoint.read() == {}


def test_construction_keeps_existing_file(tmp_path: Path) -> None:
    path = tmp_path / "cp"
    path.write_text(KAFKA_CLEANER_EXAMPLE)
    OffsetCheckpointFile(path)
    assert path.read_text() == KAFKA_CLEANER_EXAMPLE


def test_read_version_line_only_is_empty(tmp_path: Path) -> None:
    path = tmp_path / "cp"
    path.write_text("0\n")
    assert OffsetCheckpointFile(path).read() == {}


def test_read_accepts_runs_of_whitespace_and_crlf(tmp_path: Path) -> None:
    path = tmp_path / "cp"
    path.write_bytes(b"0\r\n2\r\norders\t3   1520\r\norders 0 977")
    assert OffsetCheckpointFile(path).read() == {TopicPartition("orders", 3): 1520, TopicPartition("orders", 0): 977}


def test_read_duplicate_partition_keeps_last_value(tmp_path: Path) -> None:
    path = tmp_path / "cp"
    path.write_text("0\n2\nt 0 5\nt 0 7\n")
    assert OffsetCheckpointFile(path).read() == {TopicPartition("t", 0): 7}


def test_read_negative_and_int64_extreme_offsets(tmp_path: Path) -> None:
    path = tmp_path / "cp"
    path.write_text(f"0\n2\nt 0 -1\nt 1 {2**63 - 1}\n")
    assert OffsetCheckpointFile(path).read() == {TopicPartition("t", 0): -1, TopicPartition("t", 1): 2**63 - 1}


@pytest.mark.parametrize(
    ("text", "line_number", "line", "expected"),
    [
        ("1\n0\n", 1, "1", "unrecognised checkpoint version 1, expected 0"),
        ("x\n0\n", 1, "x", "malformed version line"),
        (" 0\n0\n", 1, " 0", "malformed version line"),
        ("0\nz\n", 2, "z", "malformed entry-count line"),
        ("0\n-1\n", 2, "-1", "malformed entry-count line"),
        ("0\n3\nt 0 1\nt 1 2\n", 2, "3", "expected 3 entries (line 2) but found 2"),
        ("0\n1\nt 0 1\nt 1 2\n", 2, "1", "expected 1 entries (line 2) but found 2"),
        ("0\n1\norders 3\n", 3, "orders 3", "expected '<topic> <partition> <offset>'"),
        ("0\n1\norders 3 1 9\n", 3, "orders 3 1 9", "expected '<topic> <partition> <offset>'"),
        ("0\n1\norders x 1\n", 3, "orders x 1", "malformed checkpoint line"),
        ("0\n1\norders 2147483648 1\n", 3, "orders 2147483648 1", "malformed checkpoint line"),
        ("0\n1\norders 1 9223372036854775808\n", 3, "orders 1 9223372036854775808", "malformed"),
        ("0\n1\n orders 1 1\n", 3, " orders 1 1", "malformed checkpoint line"),
        ("0\n2\nt 0 1\n\nt 1 2\n", 4, "", "malformed checkpoint line"),
        ("0\n1\nt 0 1_000\n", 3, "t 0 1_000", "malformed checkpoint line"),
    ],
)
def test_read_malformed_raises_with_path_line_number_and_text(
    tmp_path: Path, text: str, line_number: int, line: str, expected: str
) -> None:
    path = tmp_path / "cp"
    path.write_text(text)
    with pytest.raises(CheckpointError) as raised:
        OffsetCheckpointFile(path).read()
    error = raised.value
    assert expected in error.message
    assert error.line_number == line_number
    assert error.line == line
    assert error.path == path
    assert str(path) in str(error)


def test_read_non_utf8_raises_checkpoint_error(tmp_path: Path) -> None:
    path = tmp_path / "cp"
    path.write_bytes(b"0\n1\n\xff 0 1\n")
    with pytest.raises(CheckpointError, match="UTF-8"):
        OffsetCheckpointFile(path).read()


@pytest.mark.parametrize("topic", ["has space", "", "tab\there"])
def test_write_topic_that_cannot_round_trip_is_rejected(tmp_path: Path, topic: str) -> None:
    checkpoint = OffsetCheckpointFile(tmp_path / "cp")
    with pytest.raises(CheckpointError):
        checkpoint.write({TopicPartition(topic, 0): 1})
    assert checkpoint.read() == {}


def test_write_offset_outside_int64_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError):
        OffsetCheckpointFile(tmp_path / "cp").write({TopicPartition("t", 0): 2**63})


def test_write_replaces_previous_content(tmp_path: Path) -> None:
    checkpoint = OffsetCheckpointFile(tmp_path / "cp")
    checkpoint.write({TopicPartition("a", 0): 1, TopicPartition("b", 0): 2})
    checkpoint.write({TopicPartition("c", 1): 3})
    assert checkpoint.read() == {TopicPartition("c", 1): 3}


_topics = st.text(alphabet="abcXYZ019._-", min_size=1, max_size=20)
_offset_entries = st.dictionaries(
    st.builds(TopicPartition, _topics, st.integers(0, 2**31 - 1)), st.integers(-(2**63), 2**63 - 1), max_size=20
)


@settings(max_examples=150, deadline=None)
@given(_offset_entries)
def test_offset_checkpoint_text_round_trips(entries: dict[TopicPartition, int]) -> None:
    text = format_checkpoint(sorted(entries.items()), OFFSET_ENTRY_FORMAT)
    assert dict(parse_checkpoint(text, OFFSET_ENTRY_FORMAT)) == entries


@settings(max_examples=40, deadline=None)
@given(_offset_entries)
def test_offset_checkpoint_file_round_trips(entries: dict[TopicPartition, int]) -> None:
    with tempfile.TemporaryDirectory() as dir:
        checkpoint = OffsetCheckpointFile(Path(dir) / REPLICATION_OFFSET_CHECKPOINT_FILE)
        checkpoint.write(entries)
        assert OffsetCheckpointFile(checkpoint.path).read() == entries


@settings(max_examples=150, deadline=None)
@given(st.lists(st.builds(EpochEntry, st.integers(0, 2**31 - 1), st.integers(0, 2**63 - 1)), max_size=20))
def test_epoch_checkpoint_text_round_trips_in_order(entries: list[EpochEntry]) -> None:
    assert parse_checkpoint(format_checkpoint(entries, EPOCH_ENTRY_FORMAT), EPOCH_ENTRY_FORMAT) == entries


# --- leader-epoch-checkpoint ----------------------------------------------------------------

def test_leader_epoch_checkpoint_exact_bytes_and_round_trip(tmp_path: Path) -> None:
    checkpoint = LeaderEpochCheckpointFile(tmp_path / LEADER_EPOCH_CHECKPOINT_FILE)
    checkpoint.write([EpochEntry(0, 0), EpochEntry(1, 5), EpochEntry(2, 10)])
    assert checkpoint.path.read_bytes() == b"0\n3\n0 0\n1 5\n2 10\n"
    assert LeaderEpochCheckpointFile(checkpoint.path).read() == [EpochEntry(0, 0), EpochEntry(1, 5), EpochEntry(2, 10)]


@pytest.mark.parametrize(
    ("line", "number"), [("1", 3), ("1 2 3", 3), ("x 2", 3), ("2147483648 0", 3), ("-1 0", 3), ("0 -1", 3)]
)
def test_leader_epoch_checkpoint_malformed_line(tmp_path: Path, line: str, number: int) -> None:
    path = tmp_path / LEADER_EPOCH_CHECKPOINT_FILE
    path.write_text(f"0\n1\n{line}\n")
    with pytest.raises(CheckpointError, match="expected '<epoch> <start offset>'") as raised:
        LeaderEpochCheckpointFile(path).read()
    assert (raised.value.line_number, raised.value.line) == (number, line)


def test_leader_epoch_cache_loading_a_negative_epoch_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / LEADER_EPOCH_CHECKPOINT_FILE
    path.write_text("0\n2\n0 0\n-3 5\n")
    with pytest.raises(CheckpointError, match="both >= 0") as raised:
        LeaderEpochCache(LeaderEpochCheckpointFile(path))
    assert (raised.value.path, raised.value.line_number, raised.value.line) == (path, 4, "-3 5")


@pytest.mark.parametrize("entry", [EpochEntry(-1, 0), EpochEntry(0, -1)])
def test_leader_epoch_write_of_a_negative_entry_is_rejected(tmp_path: Path, entry: EpochEntry) -> None:
    checkpoint = LeaderEpochCheckpointFile(tmp_path / LEADER_EPOCH_CHECKPOINT_FILE)
    with pytest.raises(CheckpointError):
        checkpoint.write([entry])
    assert checkpoint.read() == []


def test_leader_epoch_write_if_dir_exists_skips_a_deleted_dir(tmp_path: Path) -> None:
    dir = tmp_path / "t-0"
    dir.mkdir()
    checkpoint = LeaderEpochCheckpointFile(dir / LEADER_EPOCH_CHECKPOINT_FILE)
    checkpoint.path.unlink()
    dir.rmdir()
    assert checkpoint.write_if_dir_exists([EpochEntry(0, 0)]) is False
    assert not dir.exists()


# --- atomic writes --------------------------------------------------------------------------

def test_write_atomically_leaves_no_tmp(tmp_path: Path) -> None:
    target = tmp_path / "f"
    write_atomically(target, b"new")
    assert target.read_bytes() == b"new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f"]


def test_leftover_tmp_from_crash_is_ignored_then_overwritten(tmp_path: Path) -> None:
    checkpoint = OffsetCheckpointFile(tmp_path / "cp")
    checkpoint.write({TopicPartition("t", 0): 1})
    # A crash after the .tmp was (partly) written and before the rename:
    temporary_write_path(checkpoint.path).write_bytes(b"0\n5\ngarbage")
    assert OffsetCheckpointFile(checkpoint.path).read() == {TopicPartition("t", 0): 1}
    checkpoint.write({TopicPartition("t", 0): 2})
    assert checkpoint.read() == {TopicPartition("t", 0): 2}
    assert not temporary_write_path(checkpoint.path).exists()


def test_failed_rename_keeps_old_content_and_removes_tmp(tmp_path: Path) -> None:
    target = tmp_path / "target"
    target.mkdir()  # a real rename failure: a file cannot replace a directory
    with pytest.raises(StorageError) as raised:
        write_atomically(target, b"data")
    assert raised.value.operation == "rename"
    assert raised.value.path == target
    assert isinstance(raised.value.__cause__, OSError)
    assert target.is_dir()
    assert not temporary_write_path(target).exists()


def test_failed_tmp_write_raises_storage_error_naming_tmp(tmp_path: Path) -> None:
    target = tmp_path / "f"
    target.write_bytes(b"old")
    temporary_write_path(target).mkdir()  # the scratch file cannot be opened for writing
    with pytest.raises(StorageError) as raised:
        write_atomically(target, b"new")
    assert raised.value.operation == "write"
    assert raised.value.path == temporary_write_path(target)
    assert target.read_bytes() == b"old"


def test_unreadable_checkpoint_raises_storage_error_naming_it(tmp_path: Path) -> None:
    checkpoint = OffsetCheckpointFile(tmp_path / "cp")
    checkpoint.path.unlink()
    checkpoint.path.mkdir()  # a real read failure: a directory cannot be read as a file
    with pytest.raises(StorageError, match="cannot read checkpoint file") as raised:
        checkpoint.read()
    assert (raised.value.path, raised.value.operation) == (checkpoint.path, "read")
    assert isinstance(raised.value.__cause__, OSError)


def test_fsync_dir_of_missing_dir_raises_storage_error(tmp_path: Path) -> None:
    with pytest.raises(StorageError, match="cannot open directory"):
        fsync_dir(tmp_path / "missing")


def test_checkpoint_in_missing_dir_raises_storage_error(tmp_path: Path) -> None:
    with pytest.raises(StorageError) as raised:
        OffsetCheckpointFile(tmp_path / "missing" / "cp")
    assert raised.value.operation == "create"


# --- leader epoch cache ---------------------------------------------------------------------

def _cache(tmp_path: Path, *entries: tuple[int, int]) -> LeaderEpochCache:
    cache = LeaderEpochCache(LeaderEpochCheckpointFile(tmp_path / LEADER_EPOCH_CHECKPOINT_FILE))
    for epoch, start in entries:
        cache.assign(epoch, start)
    return cache


def _pairs(cache: LeaderEpochCache) -> list[tuple[int, int]]:
    return [(e.epoch, e.start_offset) for e in cache.entries]


def test_empty_cache_has_no_epochs(tmp_path: Path) -> None:
    cache = _cache(tmp_path)
    assert (cache.latest_epoch, cache.latest_entry, cache.earliest_entry, cache.entries) == (None, None, None, [])


def test_assign_new_epochs_appends_and_persists_synchronously(tmp_path: Path) -> None:
    cache = _cache(tmp_path, (0, 0), (1, 5), (2, 10))
    assert _pairs(cache) == [(0, 0), (1, 5), (2, 10)]
    assert cache.latest_epoch == 2
    assert cache.earliest_entry == EpochEntry(0, 0)
    reloaded = LeaderEpochCache(LeaderEpochCheckpointFile(tmp_path / LEADER_EPOCH_CHECKPOINT_FILE))
    assert _pairs(reloaded) == [(0, 0), (1, 5), (2, 10)]


def test_assign_latest_epoch_again_at_higher_offset_changes_nothing(tmp_path: Path) -> None:
    cache = _cache(tmp_path, (1, 5))
    assert cache.assign(1, 9) is False
    assert cache.assign(1, 5) is False
    assert _pairs(cache) == [(1, 5)]


def test_assign_latest_epoch_at_lower_offset_replaces_it(tmp_path: Path) -> None:
    cache = _cache(tmp_path, (0, 0), (1, 5))
    assert cache.assign(1, 3) is True
    assert _pairs(cache) == [(0, 0), (1, 3)]


def test_assign_lower_epoch_truncates_conflicting_entries(tmp_path: Path) -> None:
    cache = _cache(tmp_path, (0, 0), (2, 5), (3, 10))
    assert cache.assign(1, 7) is True
    assert _pairs(cache) == [(0, 0), (1, 7)]


def test_assign_negative_epoch_or_offset_is_rejected(tmp_path: Path) -> None:
    cache = _cache(tmp_path)
    with pytest.raises(ValueError):
        cache.assign(-1, 0)
    with pytest.raises(ValueError):
        cache.assign(0, -1)


def test_truncate_from_start_with_epoch_starting_exactly_there(tmp_path: Path) -> None:
    # UnifiedLogTest.shouldTruncateLeaderEpochsWhenDeletingSegments
    cache = _cache(tmp_path, (0, 0), (1, 5), (2, 10))
    removed = cache.truncate_from_start(5)
    assert _pairs(cache) == [(1, 5), (2, 10)]
    assert removed == [EpochEntry(0, 0), EpochEntry(1, 5)]


def test_truncate_from_start_moves_first_entry_up(tmp_path: Path) -> None:
    # UnifiedLogTest.shouldUpdateOffsetForLeaderEpochsWhenDeletingSegments
    cache = _cache(tmp_path, (0, 0), (1, 7), (2, 10))
    cache.truncate_from_start(5)
    assert _pairs(cache) == [(0, 5), (1, 7), (2, 10)]


def test_truncate_from_start_past_every_entry_keeps_the_last_epoch(tmp_path: Path) -> None:
    cache = _cache(tmp_path, (0, 0), (1, 7))
    cache.truncate_from_start(100)
    assert _pairs(cache) == [(1, 100)]


def test_truncate_from_start_below_first_entry_is_noop(tmp_path: Path) -> None:
    cache = _cache(tmp_path, (3, 10))
    assert cache.truncate_from_start(9) == []
    assert _pairs(cache) == [(3, 10)]


def test_truncate_from_end_step_by_step(tmp_path: Path) -> None:
    # shouldTruncateLeaderEpochCheckpointFileWhenTruncatingLog: 20 → 11 → 10 → 0 leaves 3, 2, 1, 0
    cache = _cache(tmp_path, (0, 0), (1, 10), (2, 11))
    counts = []
    for end in (20, 11, 10, 0):
        cache.truncate_from_end(end)
        counts.append(len(cache.entries))
    assert counts == [3, 2, 1, 0]


def test_truncate_from_end_with_negative_offset_is_noop(tmp_path: Path) -> None:
    cache = _cache(tmp_path, (0, 0))
    assert cache.truncate_from_end(-1) == []
    assert _pairs(cache) == [(0, 0)]


def test_truncations_persist_only_on_flush(tmp_path: Path) -> None:
    cache = _cache(tmp_path, (0, 0), (1, 5), (2, 10))
    cache.truncate_from_end(10)
    checkpoint = LeaderEpochCheckpointFile(tmp_path / LEADER_EPOCH_CHECKPOINT_FILE)
    assert len(checkpoint.read()) == 3
    cache.flush()
    assert checkpoint.read() == [EpochEntry(0, 0), EpochEntry(1, 5)]


def test_flush_without_a_change_does_not_rewrite_the_checkpoint(tmp_path: Path) -> None:
    _cache(tmp_path, (0, 0), (1, 5))
    path = tmp_path / LEADER_EPOCH_CHECKPOINT_FILE
    reloaded = LeaderEpochCache(LeaderEpochCheckpointFile(path))
    inode = path.stat().st_ino
    reloaded.flush()
    assert path.stat().st_ino == inode  # an atomic rewrite would replace the file
    reloaded.truncate_from_end(5)
    reloaded.flush()
    assert path.stat().st_ino != inode
    assert LeaderEpochCheckpointFile(path).read() == [EpochEntry(0, 0)]


def test_clear_then_flush_empties_checkpoint(tmp_path: Path) -> None:
    cache = _cache(tmp_path, (0, 0))
    cache.clear()
    cache.flush()
    assert LeaderEpochCheckpointFile(tmp_path / LEADER_EPOCH_CHECKPOINT_FILE).read() == []


def test_epoch_for_offset(tmp_path: Path) -> None:
    cache = _cache(tmp_path, (1, 5), (3, 10))
    assert [cache.epoch_for_offset(o) for o in (0, 5, 9, 10, 99)] == [None, 1, 1, 3, 3]


def test_loading_non_monotonic_checkpoint_applies_assign_rules(tmp_path: Path) -> None:
    path = tmp_path / LEADER_EPOCH_CHECKPOINT_FILE
    path.write_text("0\n3\n0 0\n2 10\n1 5\n")
    cache = LeaderEpochCache(LeaderEpochCheckpointFile(path))
    assert _pairs(cache) == [(0, 0), (1, 5)]
    assert path.read_text() == "0\n3\n0 0\n2 10\n1 5\n"  # loading never writes


def test_in_memory_cache_without_checkpoint() -> None:
    cache = LeaderEpochCache()
    cache.assign(0, 0)
    cache.flush()
    assert _pairs(cache) == [(0, 0)]
