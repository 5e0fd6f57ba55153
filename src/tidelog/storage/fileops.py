"""The file-operation seam: every file operation of storage, cleaner and manager goes through here.

Why a seam
----------
A log store is trusted only when it survives a failing disk and a killed process at *any* file
operation. Storage therefore never calls ``os.write``, ``os.replace``, ``os.fsync``,
``Path.unlink``, ``shutil.rmtree`` ... itself: it calls the same-named function of this module,
which does the operation and, only while a fault plan is installed, first asks the plan whether
to fail it (``OSError`` with a chosen errno) or to ``SIGKILL`` the process before or after it.
``tests/storage/test_fileops_seam.py`` (``storage/``, ``cleaner/``) and
``tests/manager/test_manager_fileops_seam.py`` fail when a module calls one of those directly,
so the seam stays complete.

Cost: with no plan installed every function is one module-global truth test plus the ``os``
call. Installing a plan (even one with no rule: a *counting* plan) turns on matching and counting
under a lock; that is for tests only.

Operations (:class:`FileOp`)
----------------------------
====== ==================================================================================
open   opening a file for writing or creating it (``os.open`` with a write flag, touch)
read   opening read-only, ``pread``, mapping read-only — the only *read* op (:data:`READ_OPS`)
write  ``write``/``pwrite``/``pwritev`` of file data
fsync  ``fsync``/``fdatasync`` of a file or a directory, ``msync`` of a writable mapping
rename ``rename``/``replace`` of a file or directory (a rule's glob matches source or target)
unlink removing one file
trunc  ``truncate``/``ftruncate`` (growing for preallocation, cutting in recovery), and
       ``fallocate`` reserving blocks past the end (:func:`reserve_blocks`)
mkdir  creating a directory
rmtree removing a directory and its content (also an empty ``rmdir``)
mmap   mapping a file writable (index files)
====== ==================================================================================

Plans
-----
A :class:`FaultRule` matches ops by kind and by an ``fnmatch`` glob on the absolute path (and,
with ``min_size``, only ops that write or reserve at least that many bytes: a nearly full disk,
which takes a small write and refuses a large one); it lets
the first ``skip`` matches through, then fires ``times`` times (``None``: until removed). Firing
means raising ``OSError(error, strerror, path)``, or ``SIGKILL`` of this very process before or
after the op (a *kill point*; the page cache keeps what was written, as when a process, not the
machine, dies). :func:`inject` installs rules for a ``with`` body and yields the plan's
:class:`FaultStats`; :func:`install`/:func:`clear` do the same without a ``with``. Plans nest and
are thread-safe. ``TIDELOG_FAULTS`` (a JSON list of rule objects, see :func:`rules_from_json`) is
installed at import, so a ``tidelog serve`` subprocess runs under the faults its test chose.
"""

from __future__ import annotations

import ctypes
import errno as errno_module
import gc
import json
import mmap as mmap_module
import os
import shutil
import signal
import threading
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import StrEnum
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any, Literal

ENV_VAR = "TIDELOG_FAULTS"

PathLike = str | os.PathLike[str]
Buffer = bytes | bytearray | memoryview


class FileOp(StrEnum):
    OPEN = "open"
    READ = "read"
    WRITE = "write"
    FSYNC = "fsync"
    RENAME = "rename"
    UNLINK = "unlink"
    TRUNCATE = "truncate"
    MKDIR = "mkdir"
    RMTREE = "rmtree"
    MMAP = "mmap"


ALL_OPS: frozenset[FileOp] = frozenset(FileOp)
READ_OPS: frozenset[FileOp] = frozenset({FileOp.READ})
WRITE_OPS: frozenset[FileOp] = ALL_OPS - READ_OPS  # everything that changes the disk

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


@dataclass(frozen=True, slots=True)
class FaultRule:
    """Fail or kill at matching file operations (see the module docstring).

    ``error`` and ``kill`` are exclusive; a rule with neither only counts its matches
    (:attr:`FaultStats.matched`), which is how a test finds how many ops of a kind a run makes.
    """

    ops: frozenset[FileOp]
    path_glob: str = "*"
    error: int | None = None
    kill: Literal["before", "after"] | None = None
    skip: int = 0
    times: int | None = None
    min_size: int = 0  # > 0: only writes and reservations of at least this many bytes match

    def __post_init__(self) -> None:
        object.__setattr__(self, "ops", frozenset(FileOp(op) for op in self.ops))
        if self.error is not None and self.kill is not None:
            raise ValueError(f"a fault rule either raises or kills, not both: {self}")
        if self.kill not in (None, "before", "after"):
            raise ValueError(f"kill must be 'before' or 'after', not {self.kill!r}")
        if self.skip < 0 or (self.times is not None and self.times < 0) or self.min_size < 0:
            raise ValueError(f"skip, times and min_size must be >= 0: {self}")

    def matches(self, op: FileOp, paths: Sequence[str], size: int | None = None) -> bool:
        if self.min_size and (size is None or size < self.min_size):
            return False
        return op in self.ops and any(fnmatchcase(p, self.path_glob) for p in paths)


@dataclass(slots=True)
class FaultStats:
    """What one plan saw: ops per kind, faults fired, matches per rule, and (if asked) the trace."""

    ops: Counter[FileOp] = field(default_factory=Counter)
    fired: int = 0
    matched: list[int] = field(default_factory=list)  # per rule, in the plan's order
    trace: list[tuple[FileOp, str]] | None = None  # (op, path) in order, when traced

    @property
    def total(self) -> int:
        return sum(self.ops.values())


@dataclass(slots=True)
class _Plan:
    rules: tuple[FaultRule, ...]
    stats: FaultStats
    installed: bool  # by install() (removed by clear()), not by inject()


_lock = threading.RLock()
_plans: list[_Plan] = []  # the one global every operation tests; empty = no seam cost


# --- installing plans ------------------------------------------------------------------------


@contextmanager
def inject(*rules: FaultRule, trace: bool = False) -> Iterator[FaultStats]:
    """Install ``rules`` for the ``with`` body; yields the plan's live :class:`FaultStats`.

    With no rule it is a counting plan. ``trace=True`` records every op as ``(op, path)``.
    """
    plan = _add(rules, trace=trace, installed=False)
    try:
        yield plan.stats
    finally:
        with _lock:
            if plan in _plans:
                _plans.remove(plan)


def install(rules: Iterable[FaultRule], *, trace: bool = False) -> FaultStats:
    """Install ``rules`` until :func:`clear`; returns the plan's live :class:`FaultStats`."""
    return _add(tuple(rules), trace=trace, installed=True).stats


def clear() -> None:
    """Remove every plan put in place by :func:`install` (``inject`` plans end with their body)."""
    with _lock:
        _plans[:] = [plan for plan in _plans if not plan.installed]


def active() -> bool:
    """Whether any plan is installed."""
    return bool(_plans)


# The plans themselves, for a hot path that tests ``if fileops.PLANS`` instead of calling
# :func:`active` (a call costs ~2% of a 1-record append). The same list, changed in place only.
PLANS: Sequence[object] = _plans


def _add(rules: Sequence[FaultRule], *, trace: bool, installed: bool) -> _Plan:
    stats = FaultStats(matched=[0] * len(rules), trace=[] if trace else None)
    plan = _Plan(tuple(rules), stats, installed)
    with _lock:
        _plans.append(plan)
    return plan


def rules_from_json(text: str) -> list[FaultRule]:
    """Rules from a JSON list of objects such as
    ``{"ops": ["write", "fsync"], "path_glob": "*/t-0/*", "error": "ENOSPC", "skip": 3, "times": 1}``;
    ``error`` is an errno name or number. ValueError naming the entry when one is malformed."""
    try:
        entries = json.loads(text)
        if not isinstance(entries, list):
            raise ValueError("expected a JSON list of rule objects")
        return [_rule_from_dict(entry) for entry in entries]
    except (ValueError, TypeError, KeyError, AttributeError) as e:
        raise ValueError(f"bad {ENV_VAR} fault rules: {e}: {text[:200]!r}") from e


def rules_to_json(rules: Iterable[FaultRule]) -> str:
    """The JSON :func:`rules_from_json` reads (for a subprocess's ``TIDELOG_FAULTS``)."""
    return json.dumps([_rule_to_dict(rule) for rule in rules])


def _rule_from_dict(entry: dict[str, Any]) -> FaultRule:
    error = entry.get("error")
    if isinstance(error, str):
        error = getattr(errno_module, error)
    return FaultRule(
        ops=frozenset(FileOp(op) for op in entry["ops"]), path_glob=entry.get("path_glob", "*"),
        error=error, kill=entry.get("kill"), skip=int(entry.get("skip", 0)), times=entry.get("times"),
        min_size=int(entry.get("min_size", 0)),
    )


def _rule_to_dict(rule: FaultRule) -> dict[str, Any]:
    return {"ops": sorted(op.value for op in rule.ops), "path_glob": rule.path_glob, "error": rule.error,
            "kill": rule.kill, "skip": rule.skip, "times": rule.times, "min_size": rule.min_size}


# --- the check every operation makes while a plan is installed ----------------------------------


def _before(op: FileOp, *paths: PathLike, size: int | None = None) -> bool:
    """Count the op in every plan; raise or kill if a rule fires now (``size``: the bytes a write
    or reservation moves). Returns whether to kill after."""
    names = [os.fspath(p) for p in paths]
    fired: list[FaultRule] = []
    with _lock:
        for plan in _plans:
            _visit(plan, op, names, fired, size)
    if any(rule.kill == "before" for rule in fired):
        _kill_self()
    kill_after = any(rule.kill == "after" for rule in fired)
    error = next((rule.error for rule in fired if rule.error is not None), None)
    if error is not None:
        _after(kill_after)
        raise OSError(error, os.strerror(error), *_error_paths(names))
    return kill_after


def _visit(plan: _Plan, op: FileOp, names: list[str], fired: list[FaultRule], size: int | None) -> None:
    """Count the op in ``plan`` and add the rules that fire now to ``fired``."""
    stats = plan.stats
    stats.ops[op] += 1
    if stats.trace is not None:
        stats.trace.append((op, names[0]))
    for i, rule in enumerate(plan.rules):
        if not rule.matches(op, names, size):
            continue
        stats.matched[i] += 1
        due = stats.matched[i] - rule.skip
        if due <= 0 or (rule.times is not None and due > rule.times) or (rule.error is None and rule.kill is None):
            continue
        stats.fired += 1
        fired.append(rule)


def _error_paths(names: list[str]) -> tuple[Any, ...]:
    return (names[0],) if len(names) == 1 else (names[0], None, names[1])


def _kill_self() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _after(kill: bool) -> None:
    if kill:
        _kill_self()


# --- the operations ------------------------------------------------------------------------------
# Each: one global test, then either the bare os call or the checked one.


def open(path: PathLike, flags: int, mode: int = 0o644) -> int:  # noqa: A001 - mirrors os.open
    """``os.open``: an OPEN op when ``flags`` can change the file, else a READ op."""
    if not _plans:
        return os.open(path, flags, mode)
    kill = _before(FileOp.OPEN if flags & _WRITE_FLAGS else FileOp.READ, path)
    try:
        return os.open(path, flags, mode)
    finally:
        _after(kill)


def open_dir(path: PathLike) -> int:
    """A read-only descriptor of a directory (to fsync it)."""
    return open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | os.O_CLOEXEC)


def touch(path: PathLike, mode: int = 0o644) -> None:
    """Create ``path`` empty if missing (an OPEN op, also when it exists). An existing file costs
    one ``stat``, not an open and a close: every partition's load touches its epoch checkpoint."""
    kill = _before(FileOp.OPEN, path) if _plans else False
    try:
        if not os.path.isfile(path):
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, mode))
    finally:
        _after(kill)


def write(fd: int, data: Buffer, path: PathLike) -> int:
    """``os.write``; returns the bytes written."""
    if not _plans:
        return os.write(fd, data)
    kill = _before(FileOp.WRITE, path, size=len(data))
    try:
        return os.write(fd, data)
    finally:
        _after(kill)


def write_fully(fd: int, data: Buffer, path: PathLike) -> None:
    """Write all of ``data`` at the descriptor's position (loops over short writes)."""
    view = memoryview(data).cast("B")
    while view:
        view = view[write(fd, view, path):]


def pwrite(fd: int, data: Buffer, offset: int, path: PathLike) -> int:
    """``os.pwrite``; returns the bytes written."""
    if not _plans:
        return os.pwrite(fd, data, offset)
    kill = _before(FileOp.WRITE, path, size=len(data))
    try:
        return os.pwrite(fd, data, offset)
    finally:
        _after(kill)


def pwritev(fd: int, buffers: Sequence[Buffer], offset: int, path: PathLike) -> int:
    """``os.pwritev`` (one gathered write); returns the bytes written."""
    if not _plans:
        return os.pwritev(fd, buffers, offset)
    kill = _before(FileOp.WRITE, path, size=sum(memoryview(b).nbytes for b in buffers))
    try:
        return os.pwritev(fd, buffers, offset)
    finally:
        _after(kill)


def pread(fd: int, size: int, offset: int, path: PathLike) -> bytes:
    """``os.pread`` (a READ op)."""
    if not _plans:
        return os.pread(fd, size, offset)
    kill = _before(FileOp.READ, path)
    try:
        return os.pread(fd, size, offset)
    finally:
        _after(kill)


def fsync(fd: int, path: PathLike) -> None:
    """``os.fsync`` of a file or directory descriptor."""
    if not _plans:
        return os.fsync(fd)
    kill = _before(FileOp.FSYNC, path)
    try:
        os.fsync(fd)
    finally:
        _after(kill)


def fdatasync(fd: int, path: PathLike) -> None:
    """``os.fdatasync`` (an FSYNC op)."""
    if not _plans:
        return os.fdatasync(fd)
    kill = _before(FileOp.FSYNC, path)
    try:
        os.fdatasync(fd)
    finally:
        _after(kill)


def fsync_dir(path: PathLike) -> None:
    """``fsync`` the directory ``path`` so its entries (creations, renames, deletions) are durable."""
    fd = open_dir(path)
    try:
        fsync(fd, path)
    finally:
        os.close(fd)


def msync(mapping: mmap_module.mmap, path: PathLike) -> None:
    """``mapping.flush()`` (an FSYNC op)."""
    if not _plans:
        return mapping.flush()
    kill = _before(FileOp.FSYNC, path)
    try:
        mapping.flush()
    finally:
        _after(kill)


def mmap(fd: int, length: int, *, writable: bool, path: PathLike) -> mmap_module.mmap:
    """Map ``length`` bytes of ``fd``: an MMAP op when ``writable``, else a READ op."""
    access = mmap_module.ACCESS_WRITE if writable else mmap_module.ACCESS_READ
    if not _plans:
        return mmap_module.mmap(fd, length, access=access)
    kill = _before(FileOp.MMAP if writable else FileOp.READ, path)
    try:
        return mmap_module.mmap(fd, length, access=access)
    finally:
        _after(kill)


@contextmanager
def mapped(fd: int, length: int, *, writable: bool, path: PathLike) -> Iterator[mmap_module.mmap]:
    """:func:`mmap` for the body of a ``with``, closed by :func:`close_mapping` at its end."""
    mapping = mmap(fd, length, writable=writable, path=path)
    try:
        yield mapping
    finally:
        close_mapping(mapping)


def close_mapping(mapping: mmap_module.mmap) -> None:
    """Close ``mapping`` once the caller has dropped its views of it. A view may still be held by
    garbage in a reference cycle: numba, compiling a kernel on its first call, keeps the typing
    errors it tried and recovered from, whose tracebacks hold the frames that passed the view in.
    Such cycles are collected and the close tried again (BufferError if a live view remains)."""
    try:
        mapping.close()
    except BufferError:
        gc.collect()
        mapping.close()


def rename(source: PathLike, target: PathLike) -> None:
    """``os.replace`` (atomic; replaces an existing ``target`` file or empty directory)."""
    if not _plans:
        return os.replace(source, target)
    kill = _before(FileOp.RENAME, source, target)
    try:
        os.replace(source, target)
    finally:
        _after(kill)


def unlink(path: PathLike, *, missing_ok: bool = False) -> bool:
    """Remove one file; returns whether it existed (FileNotFoundError unless ``missing_ok``)."""
    kill = _before(FileOp.UNLINK, path) if _plans else False
    try:
        os.unlink(path)
        return True
    except FileNotFoundError:
        if missing_ok:
            return False
        raise
    finally:
        _after(kill)


def ftruncate(fd: int, length: int, path: PathLike) -> None:
    """``os.ftruncate``."""
    if not _plans:
        return os.ftruncate(fd, length)
    kill = _before(FileOp.TRUNCATE, path)
    try:
        os.ftruncate(fd, length)
    finally:
        _after(kill)


_FALLOC_FL_KEEP_SIZE = 1  # <linux/falloc.h>: allocate blocks, leave the file's size alone


def _libc_fallocate() -> Any:
    """libc's ``fallocate`` (Linux), or None: ``os`` has only ``posix_fallocate``, which cannot
    keep the size."""
    if not hasattr(os, "posix_fallocate"):
        return None
    try:
        function = ctypes.CDLL(None, use_errno=True).fallocate
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
    function.restype = ctypes.c_int
    return function


_fallocate = _libc_fallocate()


def reserve_blocks(fd: int, offset: int, length: int, path: PathLike) -> bool:
    """Allocate the disk blocks of ``[offset, offset + length)`` without changing the file's size
    (``fallocate(FALLOC_FL_KEEP_SIZE)``), so writes there later find their blocks: a TRUNCATE op.
    Returns False where the system or the file system has no such call (nothing happened);
    raises OSError for any other failure (ENOSPC, EIO ...)."""
    kill = _before(FileOp.TRUNCATE, path, size=length) if _plans else False
    try:
        if _fallocate is None:
            return False
        if _fallocate(fd, _FALLOC_FL_KEEP_SIZE, offset, length) == 0:
            return True
        error = ctypes.get_errno()
        if error in (errno_module.EOPNOTSUPP, errno_module.ENOSYS):
            return False
        raise OSError(error, os.strerror(error), os.fspath(path))
    finally:
        _after(kill)


def truncate(path: PathLike, length: int) -> None:
    """``os.truncate`` by path."""
    if not _plans:
        return os.truncate(path, length)
    kill = _before(FileOp.TRUNCATE, path)
    try:
        os.truncate(path, length)
    finally:
        _after(kill)


def mkdir(path: PathLike, *, parents: bool = False, exist_ok: bool = False, mode: int = 0o755) -> None:
    """``Path.mkdir`` with the same ``parents``/``exist_ok`` meaning."""
    kill = _before(FileOp.MKDIR, path) if _plans else False
    try:
        if exist_ok and os.path.isdir(path):  # opening a partition "makes" its existing dir: one stat
            return
        try:  # Path.mkdir's rules, without a Path
            os.mkdir(path, mode)
        except FileNotFoundError:
            if not parents:
                raise
            Path(path).mkdir(mode=mode, parents=True, exist_ok=exist_ok)
        except OSError:
            if not exist_ok or not os.path.isdir(path):
                raise
    finally:
        _after(kill)


def rmdir(path: PathLike) -> None:
    """Remove an empty directory (an RMTREE op)."""
    kill = _before(FileOp.RMTREE, path) if _plans else False
    try:
        os.rmdir(path)
    finally:
        _after(kill)


def rmtree(path: PathLike, *, ignore_errors: bool = False) -> None:
    """``shutil.rmtree``: one RMTREE op for the whole tree."""
    kill = _before(FileOp.RMTREE, path) if _plans else False
    try:
        shutil.rmtree(path, ignore_errors=ignore_errors)
    finally:
        _after(kill)


def _install_from_environment() -> None:
    text = os.environ.get(ENV_VAR, "").strip()
    if text:
        install(rules_from_json(text))


_install_from_environment()
