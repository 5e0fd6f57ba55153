"""The log dir ``.lock``: real second processes hold it (flock as tidelog does, POSIX as Java does)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tidelog.errors import LogDirLockedError, StorageError
from tidelog.storage.lock import LOCK_FILE, LogDirLock, is_locked_by_this_process, read_lock_holder

_TIDELOG_HOLDER = """
    import sys
    from pathlib import Path
    from tidelog.storage.lock import LogDirLock
    lock = LogDirLock.acquire(Path(sys.argv[1]))
    print("locked", flush=True)
    sys.stdin.read()
"""

# What a Kafka broker does: Java's FileChannel.tryLock is a POSIX record lock; the file stays empty.
_POSIX_HOLDER = """
    import fcntl, os, sys
    fd = os.open(os.path.join(sys.argv[1], ".lock"), os.O_RDWR | os.O_CREAT)
    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    print("locked", flush=True)
    sys.stdin.read()
"""


@contextmanager
def _holder(script: str, log_dir: Path) -> Iterator[subprocess.Popen[str]]:
    process = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(script), str(log_dir)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    try:
        assert process.stdout is not None
        assert process.stdout.readline().strip() == "locked"
        yield process
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=10)


def test_acquire_creates_lock_file_naming_the_holder(tmp_path: Path) -> None:
    with LogDirLock.acquire(tmp_path) as lock:
        assert lock.held
        assert lock.path == tmp_path / LOCK_FILE
        assert (tmp_path / LOCK_FILE).read_text() == f"pid={os.getpid()}\nhost={socket.gethostname()}\n"
        assert is_locked_by_this_process(tmp_path)
    assert not lock.held
    assert (tmp_path / LOCK_FILE).exists()
    assert (tmp_path / LOCK_FILE).read_text() == ""
    assert not is_locked_by_this_process(tmp_path)


def test_second_acquire_in_same_process_fails(tmp_path: Path) -> None:
    with LogDirLock.acquire(tmp_path):
        with pytest.raises(LogDirLockedError, match=f"held by pid {os.getpid()} on host") as raised:
            LogDirLock.acquire(tmp_path)
        assert raised.value.log_dir == tmp_path
    LogDirLock.acquire(tmp_path).release()


def test_second_acquire_through_another_path_to_same_dir_fails(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "alias").symlink_to(tmp_path / "sub")
    with LogDirLock.acquire(tmp_path / "sub"):
        with pytest.raises(LogDirLockedError):
            LogDirLock.acquire(tmp_path / "alias")
        with pytest.raises(LogDirLockedError):
            LogDirLock.acquire(tmp_path / "sub" / ".." / "sub")


def test_release_is_idempotent(tmp_path: Path) -> None:
    lock = LogDirLock.acquire(tmp_path)
    lock.release()
    lock.release()
    assert not lock.held


def test_lock_held_by_other_tidelog_process_names_its_pid(tmp_path: Path) -> None:
    with _holder(_TIDELOG_HOLDER, tmp_path) as holder:
        with pytest.raises(LogDirLockedError) as raised:
            LogDirLock.acquire(tmp_path)
        assert f"held by pid {holder.pid} on host {socket.gethostname()}" in str(raised.value)
        assert str(tmp_path) in str(raised.value)
        assert read_lock_holder(tmp_path) == f"pid {holder.pid} on host {socket.gethostname()}"
        assert not is_locked_by_this_process(tmp_path)
    LogDirLock.acquire(tmp_path).release()


def test_lock_of_killed_process_is_free(tmp_path: Path) -> None:
    with _holder(_TIDELOG_HOLDER, tmp_path) as holder:
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(timeout=10)
        with LogDirLock.acquire(tmp_path) as lock:
            assert lock.held
            assert read_lock_holder(tmp_path) == f"pid {os.getpid()} on host {socket.gethostname()}"


def test_posix_lock_as_kafka_takes_it_excludes_us_and_names_its_pid(tmp_path: Path) -> None:
    with _holder(_POSIX_HOLDER, tmp_path) as holder:
        with pytest.raises(LogDirLockedError, match="POSIX record lock") as raised:
            LogDirLock.acquire(tmp_path)
        assert f"held by pid {holder.pid}" in str(raised.value)
    LogDirLock.acquire(tmp_path).release()


def test_failed_acquire_leaves_no_registry_entry(tmp_path: Path) -> None:
    with _holder(_TIDELOG_HOLDER, tmp_path):
        with pytest.raises(LogDirLockedError):
            LogDirLock.acquire(tmp_path)
        assert not is_locked_by_this_process(tmp_path)


def _posix_probe(log_dir: Path) -> str:
    """Try, from another process, the classic POSIX lock a Kafka broker takes: "busy" or "free"."""
    script = """
        import fcntl, os, sys
        fd = os.open(os.path.join(sys.argv[1], ".lock"), os.O_RDWR)
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            print("busy")
        else:
            print("free")
    """
    probe = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script), str(log_dir)], capture_output=True, text=True, timeout=30
    )
    return probe.stdout.strip()


def test_our_lock_excludes_a_posix_locker(tmp_path: Path) -> None:
    with LogDirLock.acquire(tmp_path):
        assert _posix_probe(tmp_path) == "busy"
    assert _posix_probe(tmp_path) == "free"


def test_reading_lock_file_while_held_does_not_drop_the_lock(tmp_path: Path) -> None:
    with LogDirLock.acquire(tmp_path):
        (tmp_path / LOCK_FILE).read_text()  # opens and closes another descriptor of .lock
        assert read_lock_holder(tmp_path) is not None
        assert _posix_probe(tmp_path) == "busy"


def test_acquire_missing_dir_raises_storage_error(tmp_path: Path) -> None:
    with pytest.raises(StorageError):
        LogDirLock.acquire(tmp_path / "missing")
