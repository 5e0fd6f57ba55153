"""The file-operation seam (``tidelog.storage.fileops``): rules match, skip, fire, nest and clear;
errors surface as typed storage errors; kill points kill the process before or after the op."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from storage_helpers import MakeLog, read_all, records

from tidelog.errors import StorageError
from tidelog.storage import fileops
from tidelog.storage.atomic import write_atomically
from tidelog.storage.fileops import FaultRule, FileOp


def rule(*ops: FileOp, **kw: object) -> FaultRule:
    return FaultRule(ops=frozenset(ops), **kw)  # type: ignore[arg-type]


def test_no_plan_means_no_counting_and_plain_operations(tmp_path: Path) -> None:
    assert not fileops.active()
    path = tmp_path / "f"
    fd = fileops.open(path, os.O_WRONLY | os.O_CREAT)
    fileops.write_fully(fd, b"abc", path)
    fileops.fsync(fd, path)
    os.close(fd)
    assert path.read_bytes() == b"abc"


def test_counting_plan_counts_each_kind_and_traces_in_order(tmp_path: Path) -> None:
    path = tmp_path / "f"
    with fileops.inject(trace=True) as stats:
        fd = fileops.open(path, os.O_WRONLY | os.O_CREAT)
        fileops.write(fd, b"a", path)
        fileops.fsync(fd, path)
        os.close(fd)
        fileops.rename(path, tmp_path / "g")
        fileops.unlink(tmp_path / "g")
    assert [op for op, _ in stats.trace or []] == [FileOp.OPEN, FileOp.WRITE, FileOp.FSYNC, FileOp.RENAME, FileOp.UNLINK]
    assert stats.total == 5 and stats.fired == 0
    assert not fileops.active()


def test_error_rule_skips_then_fires_times_then_lets_through(tmp_path: Path) -> None:
    path = tmp_path / "f"
    fd = fileops.open(path, os.O_WRONLY | os.O_CREAT)
    outcomes = []
    with fileops.inject(rule(FileOp.WRITE, error=errno.ENOSPC, skip=1, times=2)) as stats:
        for _ in range(4):
            try:
                fileops.write(fd, b"x", path)
                outcomes.append("ok")
            except OSError as e:
                outcomes.append(errno.errorcode[e.errno])
                assert e.filename == str(path)
    os.close(fd)
    assert outcomes == ["ok", "ENOSPC", "ENOSPC", "ok"]
    assert stats.fired == 2 and stats.matched == [4]
    assert path.read_bytes() == b"xx"


def test_min_size_rule_is_a_nearly_full_disk_small_writes_pass_large_ones_and_reservations_fail(
        tmp_path: Path) -> None:
    path = tmp_path / "f"
    fd = fileops.open(path, os.O_RDWR | os.O_CREAT)
    full = rule(FileOp.WRITE, FileOp.TRUNCATE, error=errno.ENOSPC, min_size=4096)
    with fileops.inject(full) as stats:
        fileops.write(fd, b"x" * 4095, path)
        fileops.pwritev(fd, [b"y" * 100, b"z" * 100], 4095, path)
        for attempt in (lambda: fileops.pwrite(fd, b"w" * 4096, 0, path),
                        lambda: fileops.pwritev(fd, [b"v" * 2048, b"u" * 2048], 0, path),
                        lambda: fileops.reserve_blocks(fd, 0, 1 << 20, path)):
            with pytest.raises(OSError) as failed:
                attempt()
            assert failed.value.errno == errno.ENOSPC
        fileops.fsync(fd, path)  # no size: never matched by a min_size rule
    os.close(fd)
    assert stats.fired == 3 and path.stat().st_size == 4295
    assert fileops.rules_from_json(fileops.rules_to_json([full])) == [full]


def test_glob_matches_absolute_path_and_either_side_of_a_rename(tmp_path: Path) -> None:
    (tmp_path / "a.log").write_bytes(b"")
    (tmp_path / "b.txt").write_bytes(b"")
    with fileops.inject(rule(FileOp.RENAME, path_glob="*.swap", error=errno.EIO)):
        fileops.rename(tmp_path / "b.txt", tmp_path / "c.txt")
        with pytest.raises(OSError) as raised:
            fileops.rename(tmp_path / "a.log", tmp_path / "a.log.swap")
    assert raised.value.errno == errno.EIO and raised.value.filename2 == str(tmp_path / "a.log.swap")
    assert (tmp_path / "a.log").exists()  # the failed op was not made


def test_plans_nest_and_install_clear_leaves_with_plans(tmp_path: Path) -> None:
    path = tmp_path / "d"
    installed = fileops.install([rule(FileOp.MKDIR, error=errno.EROFS)])
    try:
        with fileops.inject() as inner:
            with pytest.raises(OSError):
                fileops.mkdir(path)
            fileops.clear()
            fileops.mkdir(path)
            assert fileops.active()  # the with-plan is still there
        assert inner.ops[FileOp.MKDIR] == 2 and installed.fired == 1
    finally:
        fileops.clear()
    assert not fileops.active() and path.is_dir()


def test_rules_are_thread_safe_and_fire_exactly_times(tmp_path: Path) -> None:
    path = tmp_path / "f"
    fd = fileops.open(path, os.O_WRONLY | os.O_CREAT)
    failures: list[int] = []

    def writer() -> None:
        for _ in range(200):
            try:
                fileops.write(fd, b"x", path)
            except OSError:
                failures.append(1)

    with fileops.inject(rule(FileOp.WRITE, error=errno.EIO, skip=100, times=50)) as stats:
        threads = [threading.Thread(target=writer) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    os.close(fd)
    assert len(failures) == 50 == stats.fired and stats.ops[FileOp.WRITE] == 800


def test_json_rules_round_trip_and_name_errnos() -> None:
    rules = fileops.rules_from_json('[{"ops": ["write", "fsync"], "error": "ENOSPC", "skip": 2, "times": 1}]')
    assert rules == [rule(FileOp.WRITE, FileOp.FSYNC, error=errno.ENOSPC, skip=2, times=1)]
    assert fileops.rules_from_json(fileops.rules_to_json(rules)) == rules
    with pytest.raises(ValueError, match="TIDELOG_FAULTS"):
        fileops.rules_from_json('[{"ops": ["scribble"]}]')


def test_rule_rejects_both_error_and_kill() -> None:
    with pytest.raises(ValueError, match="either raises or kills"):
        rule(FileOp.WRITE, error=errno.EIO, kill="before")


def test_environment_variable_installs_rules_in_a_subprocess(tmp_path: Path) -> None:
    env = dict(os.environ, TIDELOG_FAULTS=fileops.rules_to_json([rule(FileOp.RENAME, error=errno.EROFS)]))
    code = ("import sys; from pathlib import Path; from tidelog.storage.atomic import write_atomically\n"
            "try:\n    write_atomically(Path(sys.argv[1]), b'x')\nexcept Exception as e:\n    print(e)")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "cp")], env=env, capture_output=True,
                         text=True, check=True).stdout
    assert "cannot rename temporary file into place" in out and not (tmp_path / "cp").exists()


@pytest.mark.parametrize("when, survives", [("before", b"old"), ("after", b"new")])
def test_kill_point_kills_the_process_before_or_after_the_op(tmp_path: Path, when: str, survives: bytes) -> None:
    path = tmp_path / "checkpoint"
    write_atomically(path, b"old")
    pid = os.fork()
    if pid == 0:  # child: dies at the rename of the atomic write
        fileops.install([rule(FileOp.RENAME, kill=when)])
        write_atomically(path, b"new")
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == 9
    assert path.read_bytes() == survives


def test_injected_enospc_on_append_is_a_storage_error_and_the_log_keeps_acknowledged_data(make_log: MakeLog) -> None:
    log = make_log()
    log.append_as_leader(records(3))
    with fileops.inject(rule(FileOp.WRITE, path_glob="*.log", error=errno.ENOSPC)):
        with pytest.raises(StorageError, match="No space left"):
            log.append_as_leader(records(2))
    assert len(read_all(log)) == 3


def test_injected_eio_on_fsync_is_a_storage_error(make_log: MakeLog) -> None:
    log = make_log()
    log.append_as_leader(records(3))
    with fileops.inject(rule(FileOp.FSYNC, error=errno.EIO)), pytest.raises(StorageError, match="fsync failed"):
        log.flush()


def test_close_handlers_of_a_log_whose_dir_failed_writes_nothing(make_log: MakeLog) -> None:
    log = make_log()
    log.append_as_leader(records(3))
    # a full disk: a write would fail (trimming the indexes, a shrink, is all that happens)
    with fileops.inject(rule(FileOp.WRITE, FileOp.FSYNC, FileOp.RENAME, FileOp.MKDIR, error=errno.ENOSPC)) as stats:
        log.close_handlers()
        log.close_handlers()  # idempotent
    assert stats.fired == 0 and stats.ops[FileOp.WRITE] == 0  # no final time-index entry (a SIGBUS on tmpfs)
    with pytest.raises(StorageError):
        log.append_as_leader(records(1))
