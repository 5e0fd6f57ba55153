"""Block reservation: an append of RESERVE_FROM bytes or more reserves the ``.log``'s disk blocks
ahead of it (``fallocate`` keeping the size), and roll, close and truncation free what is left.

What must hold on every file system: the file's size is the data's at every moment (what a
reader or Kafka sees never changes), and a reservation that cannot be made loses nothing. Where
the file system reserves (ext4, xfs, tmpfs), the blocks are there while appends come, and gone
after a roll or a close.
"""

from __future__ import annotations

import errno
import logging
import os
from pathlib import Path
from typing import Any

import pytest
from storage_helpers import MakeLog, log_config, read_all, records

from tidelog.storage import fileops
from tidelog.storage.file_records import _TRIM_SLACK, RESERVE_AHEAD, RESERVE_FROM, FileRecords
from tidelog.storage.log import Log
from tidelog.testing import FakeClock, FakeScheduler

LOG_NAME = "00000000000000000000.log"


def allocated(path: Path) -> int:
    """Bytes of disk blocks the file holds."""
    return os.stat(path).st_blocks * 512


@pytest.fixture
def reserving(tmp_path: Path) -> None:
    """Skip where this file system cannot reserve blocks past a file's end."""
    probe = tmp_path / "probe"
    fd = os.open(probe, os.O_RDWR | os.O_CREAT)
    try:
        if not fileops.reserve_blocks(fd, 0, 1 << 16, probe):
            pytest.skip("this file system cannot reserve blocks past a file's end")
    finally:
        os.close(fd)
        probe.unlink()


def large_batch(base_offset: int = 0) -> bytes:
    data = records(40, base_offset=base_offset, value_size=200)
    assert len(data) >= RESERVE_FROM
    return data


# --- fileops ------------------------------------------------------------------------------------

def test_reserve_blocks_allocates_past_the_end_and_keeps_the_size(tmp_path: Path, reserving: None) -> None:
    path = tmp_path / "f"
    fd = os.open(path, os.O_RDWR | os.O_CREAT)
    try:
        os.write(fd, b"x" * 100)
        assert fileops.reserve_blocks(fd, 100, 4 << 20, path)
        assert os.fstat(fd).st_size == 100
        assert allocated(path) >= 4 << 20
    finally:
        os.close(fd)


def test_reserve_blocks_is_a_truncate_op_that_a_plan_can_fail(tmp_path: Path) -> None:
    path = tmp_path / "f"
    fd = os.open(path, os.O_RDWR | os.O_CREAT)
    try:
        rule = fileops.FaultRule(frozenset({fileops.FileOp.TRUNCATE}), error=errno.ENOSPC)
        with fileops.inject(rule), pytest.raises(OSError) as raised:
            fileops.reserve_blocks(fd, 0, 1 << 20, path)
        assert raised.value.errno == errno.ENOSPC and raised.value.filename == str(path)
    finally:
        os.close(fd)


# --- FileRecords --------------------------------------------------------------------------------

def test_a_large_append_reserves_ahead_and_the_size_stays_the_data(tmp_path: Path, reserving: None) -> None:
    fr = FileRecords.open(tmp_path / LOG_NAME, file_already_exists=False)
    data = large_batch()
    fr.append(data)
    path = tmp_path / LOG_NAME
    assert os.stat(path).st_size == fr.size_in_bytes == len(data)
    assert allocated(path) >= len(data) + RESERVE_AHEAD
    assert fr.read(0, 10**6) == data
    fr.close()


def test_small_appends_reserve_nothing(tmp_path: Path) -> None:
    fr = FileRecords.open(tmp_path / LOG_NAME, file_already_exists=False)
    with fileops.inject() as stats:  # counting: no TRUNCATE op may happen
        for i in range(50):
            fr.append(records(1, base_offset=i))
    assert stats.ops[fileops.FileOp.TRUNCATE] == 0
    assert allocated(tmp_path / LOG_NAME) < fr.size_in_bytes + _TRIM_SLACK
    fr.close()


def test_appends_inside_the_reservation_make_no_new_one(tmp_path: Path, reserving: None) -> None:
    fr = FileRecords.open(tmp_path / LOG_NAME, file_already_exists=False)
    data = large_batch()
    with fileops.inject() as stats:
        for _ in range(RESERVE_AHEAD // len(data)):
            fr.append(data)  # the first reserves len(data) + RESERVE_AHEAD
    assert stats.ops[fileops.FileOp.TRUNCATE] == 1
    with fileops.inject() as stats:
        fr.append(data)
        fr.append(data)  # past it: one more
    assert stats.ops[fileops.FileOp.TRUNCATE] == 1
    fr.close()


def test_trim_and_truncate_free_the_reserved_blocks(tmp_path: Path, reserving: None) -> None:
    path = tmp_path / LOG_NAME
    fr = FileRecords.open(path, file_already_exists=False)
    data = large_batch()
    fr.append(data)
    fr.trim()
    assert allocated(path) < len(data) + _TRIM_SLACK
    assert fr.read(0, 10**6) == data
    fr.append(data)
    assert allocated(path) >= 2 * len(data) + RESERVE_AHEAD, "after a trim the next large append reserves again"
    fr.truncate_to(len(data))
    assert allocated(path) < len(data) + _TRIM_SLACK
    assert os.stat(path).st_size == len(data)
    fr.close()


def test_trim_frees_what_a_process_that_died_reserved(tmp_path: Path, reserving: None) -> None:
    path = tmp_path / LOG_NAME
    data = large_batch()
    path.write_bytes(data)
    fd = os.open(path, os.O_RDWR)
    fileops.reserve_blocks(fd, len(data), 4 << 20, path)  # then the process died
    os.close(fd)
    fr = FileRecords.open(path, file_already_exists=True)
    assert allocated(path) >= 4 << 20
    fr.trim()
    assert allocated(path) < len(data) + _TRIM_SLACK
    assert path.read_bytes() == data


def test_a_reservation_that_fails_is_warned_once_and_the_appends_go_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / LOG_NAME
    fr = FileRecords.open(path, file_already_exists=False)
    data = large_batch()
    rule = fileops.FaultRule(frozenset({fileops.FileOp.TRUNCATE}), error=errno.ENOSPC)
    with caplog.at_level(logging.WARNING), fileops.inject(rule) as stats:
        for _ in range(3):
            fr.append(data)
    assert stats.ops[fileops.FileOp.TRUNCATE] == 1, "no second try for this file"
    assert fr.read(0, 10**7) == data * 3
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and str(path) in warnings[0] and "byte 0" in warnings[0]
    fr.close()


def test_where_there_is_no_fallocate_nothing_is_reserved_nor_warned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(fileops, "_fallocate", None)  # as off Linux
    fr = FileRecords.open(tmp_path / LOG_NAME, file_already_exists=False)
    data = large_batch()
    with caplog.at_level(logging.WARNING), fileops.inject() as stats:
        fr.append(data)
        fr.append(data)
    assert stats.ops[fileops.FileOp.TRUNCATE] == 1 and not caplog.records  # one try, then none
    assert fr.read(0, 10**6) == data * 2
    fr.close()


# --- Log ----------------------------------------------------------------------------------------

def _log_files(dir: Path) -> list[Path]:
    return sorted(dir.glob("*.log"))


def test_large_leader_appends_reserve_and_roll_and_close_free(make_log: MakeLog, tp_dir: Path, reserving: None) -> None:
    log = make_log(segment_bytes=64 << 10)
    data = large_batch()
    per_segment = (64 << 10) // len(data)
    for _ in range(per_segment):
        log.append_as_leader(data)
    (active,) = _log_files(tp_dir)
    assert allocated(active) >= RESERVE_AHEAD, "appends of large batches reserve (the compiled path too)"
    assert os.stat(active).st_size == log.active_segment.size
    log.append_as_leader(data)  # rolls
    first, second = _log_files(tp_dir)
    assert first == active and allocated(first) < os.stat(first).st_size + _TRIM_SLACK
    assert allocated(second) >= RESERVE_AHEAD
    log.close()
    assert allocated(second) < os.stat(second).st_size + _TRIM_SLACK
    assert [os.stat(p).st_size for p in (first, second)] == [len(data) * per_segment, len(data)]


def test_the_compiled_large_path_reserves_before_it_writes(make_log: MakeLog, tp_dir: Path, reserving: None) -> None:
    log = make_log()
    kernel = log._append_crc_checked
    if kernel is None:
        pytest.skip("the interpreted twin: no compiled path")
    seen: list[int] = []

    def spy(*args: Any) -> tuple[int, int, int]:
        seen.append(allocated(_log_files(tp_dir)[0]))  # what the kernel will write into
        return kernel(*args)

    log._append_crc_checked = spy
    log.append_as_leader(records(1))  # a small first batch: the tail has data to arm on
    data = large_batch()
    log.append_as_leader(data)
    log.append_as_leader(data)
    assert seen and seen[-1] >= RESERVE_AHEAD
    assert [r.offset for r in read_all(log)] == list(range(81))


def test_a_process_killed_after_a_reservation_loses_nothing_and_the_blocks_are_freed(
    tp_dir: Path, reserving: None
) -> None:
    """SIGKILL right after the reservation of a new segment's blocks, before its first write: the
    reopened log holds every acknowledged batch, and its close frees what the dead process
    reserved."""
    config = log_config(segment_bytes=10_000)  # one ~8.5 KB batch a segment
    data = large_batch()
    pid = os.fork()
    if pid == 0:  # child
        try:
            log = Log.open(tp_dir, config, clock=FakeClock(), scheduler=FakeScheduler(FakeClock()))
            log.append_as_leader(data)
            fileops.install([fileops.FaultRule(frozenset({fileops.FileOp.TRUNCATE}), path_glob="*.log", skip=1,
                                               times=1, kill="after")])
            log.append_as_leader(data)  # rolls: trim (skipped by the rule), reserve (killed after)
        finally:
            os._exit(3)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == 9
    first, second = _log_files(tp_dir)
    assert os.stat(second).st_size == 0 and allocated(second) >= RESERVE_AHEAD  # reserved, nothing written
    clock = FakeClock()
    log = Log.open(tp_dir, config, clock=clock, scheduler=FakeScheduler(clock))
    assert log.log_end_offset == 40 and [r.offset for r in read_all(log)] == list(range(40))
    log.close()
    assert allocated(second) < _TRIM_SLACK and os.stat(first).st_size == len(data)
