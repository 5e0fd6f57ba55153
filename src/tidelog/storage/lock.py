"""The log dir's ``.lock``: one owner per log dir, across processes and within one.

``<log dir>/.lock`` is created if missing and locked exclusively, without blocking, with two
locks on one open file description:

* ``flock(LOCK_EX | LOCK_NB)``: excludes every other tidelog process;
* a POSIX-family record lock on the whole file: Java's ``FileChannel.tryLock`` takes a classic
  POSIX lock on Linux, so a running Kafka broker and tidelog exclude each other too (on local
  file systems flock and POSIX locks are independent, hence both). We take it as a Linux
  *open file description* lock (``F_OFD_SETLK``): it conflicts with classic POSIX locks, but,
  unlike them, is not dropped when some other descriptor of the file is closed, and conflicts
  with a second open of the file in the same process. Where OFD locks do not exist we fall back
  to ``lockf`` (classic; then nothing in the process may open and close ``.lock`` while held).

After locking, the holder writes ``pid=<pid>`` and ``host=<hostname>`` lines into the file so a
process that fails to lock can name the holder ("held by pid 1234 on host x"). A Kafka broker
leaves the file empty; its pid is then taken from the kernel (``F_OFD_GETLK``) when possible.
A holder that has locked but not yet written its line is reported as unknown. On release the
file is emptied, then closed (which drops both locks); the file itself stays, as in Kafka.

Neither lock stops a second acquisition through the *same* open file, and flock does not stop a
second open in the same process on every platform, so a process-wide registry of held dirs,
keyed by the resolved path, makes a second :meth:`LogDirLock.acquire` in one process fail too.
"""

from __future__ import annotations

import errno
import fcntl
import os
import socket
import struct
import threading
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

from tidelog.errors import LogDirLockedError, StorageError
from tidelog.storage import fileops

LOCK_FILE = ".lock"

_registry_guard = threading.Lock()
_held: dict[Path, LogDirLock] = {}
_BUSY = (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK)
# struct flock on Linux (x86-64, arm64): short l_type, short l_whence, off_t l_start, off_t l_len, pid_t l_pid
_FLOCK = struct.Struct("hhqqi4x")
_WHOLE_FILE_WRITE_LOCK = _FLOCK.pack(fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0)  # l_len 0 = to the end, however long
_OFD_SETLK = getattr(fcntl, "F_OFD_SETLK", None)
_OFD_GETLK = getattr(fcntl, "F_OFD_GETLK", None)


def lock_file(log_dir: Path) -> Path:
    return log_dir / LOCK_FILE


class LogDirLock:
    """An exclusive lock on one log dir; use :meth:`acquire`, then :meth:`release` or ``with``."""

    __slots__ = ("log_dir", "path", "_fd", "_key", "_owner_pid")

    def __init__(self, log_dir: Path, key: Path, fd: int) -> None:
        self.log_dir = log_dir
        self.path = lock_file(log_dir)
        self._key = key
        self._fd: int | None = fd
        self._owner_pid = os.getpid()

    @classmethod
    def acquire(cls, log_dir: Path) -> LogDirLock:
        """Lock ``log_dir`` or raise :class:`LogDirLockedError` naming the dir and the holder.

        Raises :class:`StorageError` when the dir does not exist or ``.lock`` cannot be opened.
        """
        key = _resolve(log_dir)
        with _registry_guard:
            if key in _held:
                holder = _describe(os.getpid(), socket.gethostname())
                raise LogDirLockedError(f"log dir is already locked by this process: held by {holder}", log_dir=log_dir)
            lock = cls(log_dir, key, _lock_fd(log_dir))
            _held[key] = lock
        return lock

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        """Empty the file and close it, dropping both locks. Idempotent."""
        with _registry_guard:
            fd, self._fd = self._fd, None
            if fd is None:
                return
            if _held.get(self._key) is self:
                del _held[self._key]
        if os.getpid() == self._owner_pid:  # a forked child only closes its inherited copy
            _forget_holder(fd, self.path)
        os.close(fd)

    def __enter__(self) -> LogDirLock:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()

    def __repr__(self) -> str:
        return f"LogDirLock({str(self.log_dir)!r}, held={self.held})"


def read_lock_holder(log_dir: Path) -> str | None:
    """"pid N on host H" as recorded in ``.lock``, or None if it names nobody."""
    try:
        text = lock_file(log_dir).read_text("utf-8", errors="replace")
    except OSError:
        return None
    return _holder_from_text(text)


def is_locked_by_this_process(log_dir: Path) -> bool:
    with _registry_guard:
        return _resolve(log_dir) in _held


def _resolve(log_dir: Path) -> Path:
    try:
        return log_dir.resolve(strict=True)
    except OSError as e:
        raise StorageError("log dir does not exist or cannot be resolved", path=log_dir, operation="resolve") from e


def _lock_fd(log_dir: Path) -> int:
    """Open ``.lock``, take flock then the record lock, record the holder; the fd, or raise."""
    path = lock_file(log_dir)
    try:
        fd = fileops.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as e:
        raise StorageError("cannot open log dir lock file", path=path, operation="open") from e
    try:
        _take(fd, log_dir, _flock, "")
        _take(fd, log_dir, _record_lock, " by a POSIX record lock (as a running Kafka broker holds it)")
        _record_holder(fd, path)
    except BaseException:
        os.close(fd)  # closing drops whatever was taken
        raise
    return fd


def _flock(fd: int) -> None:
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)


def _record_lock(fd: int) -> None:
    if _OFD_SETLK is not None:
        try:
            fcntl.fcntl(fd, _OFD_SETLK, _WHOLE_FILE_WRITE_LOCK)
            return
        except OSError as e:
            if e.errno != errno.EINVAL:  # EINVAL: kernel without OFD locks
                raise
    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)


def _take(fd: int, log_dir: Path, lock: Callable[[int], None], how: str) -> None:
    try:
        lock(fd)
    except OSError as e:
        if e.errno not in _BUSY:
            raise StorageError("cannot lock log dir", path=lock_file(log_dir), operation="lock") from e
        holder = _holder_from_text(_read_fd(fd)) or _record_lock_holder(fd) or "another process that recorded no pid"
        raise LogDirLockedError(f"log dir is locked{how}: held by {holder}", log_dir=log_dir) from e


def _record_lock_holder(fd: int) -> str | None:
    """Pid of a classic POSIX lock holder (a Kafka broker) as the kernel reports it."""
    if _OFD_GETLK is None:
        return None
    try:
        answer = fcntl.fcntl(fd, _OFD_GETLK, _WHOLE_FILE_WRITE_LOCK)
    except OSError:
        return None
    lock_type, _, _, _, pid = _FLOCK.unpack(answer)
    return f"pid {pid} (no holder line in .lock)" if lock_type != fcntl.F_UNLCK and pid > 0 else None


def _record_holder(fd: int, path: Path) -> None:
    text = f"pid={os.getpid()}\nhost={socket.gethostname()}\n".encode("utf-8")
    try:
        fileops.ftruncate(fd, 0, path)
        fileops.pwrite(fd, text, 0, path)
    except OSError as e:
        raise StorageError("cannot record lock holder", path=path, operation="write") from e


def _forget_holder(fd: int, path: Path) -> None:
    try:
        fileops.ftruncate(fd, 0, path)
    except OSError:
        pass  # a stale holder line is harmless: it is only read when locking fails


def _read_fd(fd: int) -> str:
    try:
        return os.pread(fd, 4096, 0).decode("utf-8", errors="replace")
    except OSError:
        return ""


def _holder_from_text(text: str) -> str | None:
    fields = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
    pid = fields.get("pid", "").strip()
    if not pid.isdigit():
        return None
    return _describe(int(pid), fields.get("host", "").strip() or "unknown")


def _describe(pid: int, host: str) -> str:
    return f"pid {pid} on host {host}"
