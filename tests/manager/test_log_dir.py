"""LogDir: opening (create, lock, meta.properties, the clean-shutdown marker), checkpoints that do not
parse, and the scan that sorts sub-directories (kafka-storage.md §1.1, §1.13, §3.9)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from manager_helpers import tp

from tidelog.errors import CorruptRecordError, LogDirLockedError, StorageError
from tidelog.manager.log_dir import LogDir, describe_error
from tidelog.storage.lock import is_locked_by_this_process
from tidelog.storage.metadata import (
    MetaProperties,
    has_clean_shutdown,
    read_clean_shutdown,
    read_meta_properties,
    write_clean_shutdown,
    write_meta_properties,
)


@pytest.fixture
def opened() -> Iterator[list[LogDir]]:
    """LogDirs to release at teardown."""
    dirs: list[LogDir] = []
    yield dirs
    for d in dirs:
        d.release()


def open_dir(opened: list[LogDir], path: Path, cluster_id: str = "Vc2cfpc0Qs2YQ1hYSAlTWg") -> LogDir:
    """Open and begin loading, as the LogManager does (``cluster_id`` is used only to format)."""
    log_dir = LogDir.open(path)
    opened.append(log_dir)
    log_dir.begin_loading(cluster_id)
    return log_dir


def test_open_writes_nothing_until_loading_begins(tmp_path: Path, opened: list[LogDir]) -> None:
    path = tmp_path / "logs"
    path.mkdir()
    write_clean_shutdown(path, 2)
    log_dir = LogDir.open(path)
    opened.append(log_dir)
    assert log_dir.meta is None and read_meta_properties(path) is None
    assert has_clean_shutdown(path), "a start-up refused after open must not cost the next one its clean shutdown"


def test_open_creates_locks_and_formats_a_new_dir(tmp_path: Path, opened: list[LogDir]) -> None:
    path = tmp_path / "deep" / "logs"
    log_dir = open_dir(opened, path, "Vc2cfpc0Qs2YQ1hYSAlTWg")
    assert path.is_dir() and is_locked_by_this_process(path)
    meta = read_meta_properties(path)
    assert meta is not None and (meta.version, meta.node_id, meta.cluster_id) == (1, 1, "Vc2cfpc0Qs2YQ1hYSAlTWg")
    assert log_dir.cluster_id == "Vc2cfpc0Qs2YQ1hYSAlTWg"
    assert log_dir.had_clean_shutdown is False and log_dir.loaded_completely is False


def test_open_keeps_existing_meta_properties(tmp_path: Path, opened: list[LogDir]) -> None:
    tmp_path.joinpath("logs").mkdir()
    meta = MetaProperties(1, 7, "Vc2cfpc0Qs2YQ1hYSAlTWg", "AAAAAAAAAAAAAAAAAAAAAQ")
    write_meta_properties(tmp_path / "logs", meta)
    log_dir = open_dir(opened, tmp_path / "logs", "some-other-cluster-id")
    assert read_meta_properties(tmp_path / "logs") == meta
    assert log_dir.cluster_id == meta.cluster_id


def test_second_open_of_a_locked_dir_fails_until_released(tmp_path: Path, opened: list[LogDir]) -> None:
    first = LogDir.open(tmp_path / "logs")
    with pytest.raises(LogDirLockedError):
        LogDir.open(tmp_path / "logs")
    first.release()
    open_dir(opened, tmp_path / "logs")


def test_open_notes_the_clean_shutdown_marker_and_deletes_it(tmp_path: Path, opened: list[LogDir]) -> None:
    path = tmp_path / "logs"
    path.mkdir()
    write_clean_shutdown(path, 9)
    log_dir = open_dir(opened, path)
    assert log_dir.had_clean_shutdown is True
    assert not has_clean_shutdown(path), "KAFKA-10471: the marker goes before any log loads"


def test_open_fails_as_storage_error_when_the_dir_cannot_be_created(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(StorageError) as raised:
        LogDir.open(tmp_path / "file" / "logs")
    assert "file" in str(raised.value)


def test_mark_clean_shutdown_only_after_a_complete_load(tmp_path: Path, opened: list[LogDir]) -> None:
    log_dir = open_dir(opened, tmp_path / "logs")
    log_dir.mark_clean_shutdown(4)
    assert read_clean_shutdown(log_dir.path) is None
    log_dir.loaded_completely = True
    log_dir.mark_clean_shutdown(4)
    assert read_clean_shutdown(log_dir.path) == 4


def test_unreadable_checkpoint_reads_as_empty(tmp_path: Path, opened: list[LogDir]) -> None:
    log_dir = open_dir(opened, tmp_path / "logs")
    log_dir.recovery_points.path.write_text("0\n2\nfoo 0 5\n")  # count says 2, one entry
    log_dir.log_start_offsets.path.write_text("1\n0\n")  # wrong version
    assert log_dir.read_checkpoint(log_dir.recovery_points) == {}
    assert log_dir.read_checkpoint(log_dir.log_start_offsets) == {}


def test_write_checkpoints_round_trip(tmp_path: Path, opened: list[LogDir]) -> None:
    log_dir = open_dir(opened, tmp_path / "logs")
    log_dir.recovery_points.write({tp("a"): 5})
    log_dir.log_start_offsets.write({tp("a"): 2})
    log_dir.high_watermarks.write({tp("a"): 7, tp("b", 3): 1})
    assert log_dir.read_checkpoint(log_dir.recovery_points) == {tp("a"): 5}
    assert log_dir.read_checkpoint(log_dir.log_start_offsets) == {tp("a"): 2}
    assert log_dir.read_checkpoint(log_dir.high_watermarks) == {tp("a"): 7, tp("b", 3): 1}


def test_scan_sorts_sub_directories(tmp_path: Path, opened: list[LogDir]) -> None:
    log_dir = open_dir(opened, tmp_path / "logs")
    root = log_dir.path
    for name in ("orders-0", "orders-12", "my-topic.v2-3", f"gone-1.{'c' * 32}-delete",
                 f"moving-0.{'d' * 32}-future", f"stray-0.{'e' * 32}-stray", "notapartition", "bad-x",
                 "__cluster_metadata-0", "remote-log-index-cache"):
        (root / name).mkdir()
    (root / "loose-0").write_text("a file, not a dir")

    found = log_dir.scan()
    assert found.partitions == {tp("orders"): root / "orders-0", tp("orders", 12): root / "orders-12",
                                tp("my-topic.v2", 3): root / "my-topic.v2-3"}
    assert found.to_delete == [root / f"gone-1.{'c' * 32}-delete"]
    assert sorted(p.name for p in found.set_aside) == sorted(
        ["bad-x", "notapartition", f"moving-0.{'d' * 32}-future", f"stray-0.{'e' * 32}-stray"])
    assert "future or stray" in found.set_aside[root / f"moving-0.{'d' * 32}-future"]


def test_describe_error_names_foreign_errors_by_type() -> None:
    assert describe_error(OSError(5, "Input/output error")) == "OSError: [Errno 5] Input/output error"
    assert describe_error(CorruptRecordError("bad batch", position=12)) == "bad batch (position=12)"
