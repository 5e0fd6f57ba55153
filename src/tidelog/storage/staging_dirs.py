"""Staging dirs of multi-partition jobs: their files, who owns one, and reclaiming those whose owner is dead.

A job stages its batches under ``<staging root>/<job key>/`` (``job-<id>`` or
``query-<id>/batch-<n>``) before a commit (:mod:`tidelog.manager.staged_commit`) publishes them. Every job dir
is born holding ``owner.lease``: the host, pid and start time (in clock ticks since boot, from
``/proc/<pid>/stat``) of the process whose life is the job's, for the Spark sink the driver's JVM,
with the kernel's boot id and the inode of the pid namespace that pid lives in.
It is created whole: built as ``.creating-<uuid>-<owner>`` and renamed into place, so no job dir
is ever seen without its lease (and a scratch dir names its owner in its name).

**Reclaiming** (:func:`reclaim_staging`, run by whoever opens the data dir: the broker at
start-up, the next job, any tidelog command): a job dir, or a ``.creating-*`` left by a crash,
whose lease names a process of this host, boot and pid namespace that no longer runs (no such
pid, or a pid reused by a process that started at another time) is deleted, with a log line,
unless an intent of the commit log still needs it. A lease of another host, boot or pid
namespace (containers sharing a hostname number their processes apart: a live driver's pid
may be unused, or another process's, here), a lease without them, or a dir without one, is
kept: this process cannot tell whether its owner lives.

A job staged *through a broker* (:mod:`tidelog.manager.live_commit`) has no local owner process:
its lease is a time lease instead (``expires``, in ms of the broker's clock, pid 0), moved forward
by every chunk the job stages, and the dir is reclaimed once that time has passed (by the broker's
periodic reclaim, and at open), unless an intent needs it.

A job dir is taken over by a driver that stages into it under another lease (a streaming query
restarted from its checkpoint reuses its batch's key): :func:`ensure_job_dir` replaces the lease
atomically. So a reclaim never deletes files a live driver wrote: it renames the dir to
``.reclaiming-<uuid>`` first (tasks arriving then make a fresh dir), reads the lease again there
and deletes only if it is still the dead owner's; a ``.reclaiming-*`` left by a crash is deleted
unless its lease names a live owner.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import socket
import uuid
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

from crc32c import crc32c

from tidelog.errors import StorageError
from tidelog.records.layout import RECORD_BATCH_OVERHEAD, RECORDS_COUNT_OFFSET
from tidelog.storage import fileops
from tidelog.storage.atomic import fsync_dir, read_file, write_file
from tidelog.storage.commit_log import StagedBatch

log = logging.getLogger(__name__)

LEASE_FILE = "owner.lease"
CREATING_PREFIX = ".creating-"
RECLAIMING_PREFIX = ".reclaiming-"


@dataclass(frozen=True, slots=True)
class Lease:
    """A process by host, pid and start time, and the kernel boot and pid namespace its pid means
    something in (None: not known, never reclaimed)."""

    host: str
    pid: int
    start: int | None
    boot: str | None = None
    pidns: int | None = None
    expires: int | None = None  # a time lease (a job staged through a broker): dead from this ms on

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, data: bytes) -> Lease:
        content = json.loads(data)
        return cls(str(content["host"]), int(content["pid"]),
                   None if content.get("start") is None else int(content["start"]),
                   None if content.get("boot") is None else str(content["boot"]),
                   None if content.get("pidns") is None else int(content["pidns"]),
                   None if content.get("expires") is None else int(content["expires"]))

    def owner_is_dead(self, now_ms: int | None = None) -> bool:
        """True only when the owner certainly no longer runs: same host, same kernel boot and pid
        namespace (containers sharing a hostname each number their processes apart), and its
        pid gone or reused. A lease naming no boot or namespace is of an unknown owner. A time
        lease is dead once ``now_ms`` (None: not known, never dead) reaches its ``expires``."""
        if self.expires is not None:
            return now_ms is not None and now_ms >= self.expires
        if self.host != socket.gethostname() or self.start is None or self.boot is None or self.pidns is None:
            return False
        if self.boot != boot_id() or self.pidns != pid_namespace():
            return False
        started = process_start(self.pid)
        if started is None:
            return not os.path.exists(f"/proc/{self.pid}")  # there but unreadable: not known dead
        return started != self.start


@dataclass(frozen=True, slots=True)
class ProcessStat:
    """What a lease needs of ``/proc/<pid>/stat``: the command name, the parent's pid and the
    start time in ticks since boot (fields 2, 4 and 22)."""

    name: bytes
    parent: int
    start: int


def process_stat(pid: int) -> ProcessStat | None:
    """None when there is no such process (or no ``/proc``), or its stat cannot be parsed."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    return parse_stat(stat)


def parse_stat(stat: bytes) -> ProcessStat | None:
    """The fields of a ``/proc/<pid>/stat`` content (the name may hold spaces and parentheses:
    it ends at the last one); None when they are not all there."""
    try:
        name_end = stat.rindex(b")")
        fields = stat[name_end + 2:].split()
        return ProcessStat(stat[stat.index(b"(") + 1:name_end], int(fields[1]), int(fields[19]))
    except (ValueError, IndexError):
        return None


def process_start(pid: int) -> int | None:
    """A process's start time (:func:`process_stat`)."""
    stat = process_stat(pid)
    return None if stat is None else stat.start


def boot_id() -> str | None:
    """This kernel boot's id (dashes dropped), None without ``/proc``."""
    try:
        with open("/proc/sys/kernel/random/boot_id", "rb") as f:
            found = f.read().decode("ascii", "replace").strip().replace("-", "")
    except OSError:
        return None
    return found or None


def pid_namespace(pid: int | str = "self") -> int | None:
    """The inode of ``pid``'s pid namespace (None when unreadable)."""
    try:
        return os.stat(f"/proc/{pid}/ns/pid").st_ino
    except OSError:
        return None


def process_lease(pid: int) -> Lease:
    return Lease(socket.gethostname(), pid, process_start(pid), boot_id(), pid_namespace(pid) or pid_namespace())


def job_dir(staging_root: str | Path, job_key: str) -> Path:
    return Path(staging_root) / job_key


def ensure_job_dir(staging_root: str | Path, job_key: str, lease: Lease | None) -> Path:
    """The job's staging dir, created with its lease when missing (several tasks may race: the
    first rename wins, the others find it made). An existing dir whose lease is not ``lease`` is
    taken over: a streaming job's key is the same after a restart from the checkpoint, so a
    restarted driver reuses the dir its killed predecessor left, and must own it, or the next
    open would reclaim it (a dead owner) under the new driver's tasks."""
    path = job_dir(staging_root, job_key)
    for _ in range(3):  # a dir being reclaimed right now vanishes under us: create it anew
        if not path.is_dir():
            break
        if lease is None or read_lease(path) == lease:
            return path
        try:
            replace_lease(path, lease)
            return path
        except FileNotFoundError:
            continue
    try:
        fileops.mkdir(path.parent, parents=True, exist_ok=True)
        scratch = path.parent / scratch_name(lease)
        fileops.mkdir(scratch)
        if lease is not None:
            write_file(scratch / LEASE_FILE, lease.to_json(), sync=True, what="staging lease")
        try:
            fileops.rename(scratch, path)
        except OSError as e:
            if e.errno not in (errno.EEXIST, errno.ENOTEMPTY) or not path.is_dir():
                raise
            fileops.rmtree(scratch, ignore_errors=True)  # another task made it first
        fsync_dir(path.parent)
    except OSError as e:
        raise StorageError("cannot create the staging dir", path=path, operation="mkdir") from e
    return path


def replace_lease(directory: Path, lease: Lease) -> None:
    """Make ``lease`` the owner of ``directory`` atomically (a scratch file of its own, fsynced,
    renamed over the old lease, the dir fsynced): a reader sees the old owner or the new one.
    FileNotFoundError when the dir is gone (reclaimed meanwhile)."""
    tmp = directory / f"{LEASE_FILE}.{uuid.uuid4().hex}.tmp"
    try:
        write_file(tmp, lease.to_json(), sync=True, what="staging lease")
        fileops.rename(tmp, directory / LEASE_FILE)
        fsync_dir(directory)
    except StorageError as e:
        if isinstance(e.__cause__, FileNotFoundError):
            raise e.__cause__ from None
        raise
    except FileNotFoundError:
        raise
    except OSError as e:
        raise StorageError("cannot replace the staging lease", path=directory / LEASE_FILE, operation="rename") from e


def scratch_name(lease: Lease | None) -> str:
    """``.creating-<uuid>-<pid>-<start>-<pidns>-<boot>@<host>`` (a time lease:
    ``.creating-<uuid>-expires-<ms>``): a scratch dir names its owner itself, so one left by a
    crash before its lease file was written is reclaimed all the same."""
    if lease is not None and lease.expires is not None:
        return f"{CREATING_PREFIX}{uuid.uuid4().hex}-expires-{lease.expires}"
    owner = ("unknown" if lease is None
             else f"{lease.pid}-{lease.start}-{lease.pidns}-{lease.boot}@{lease.host}")
    return f"{CREATING_PREFIX}{uuid.uuid4().hex}-{owner}"


def scratch_lease(name: str) -> Lease | None:
    """The owner a scratch dir's name gives (None: none, or not a scratch dir)."""
    if not name.startswith(CREATING_PREFIX):
        return None
    _, expiring, expires = name.removeprefix(CREATING_PREFIX).partition("-expires-")
    if expiring:
        return Lease("", 0, None, expires=int(expires)) if expires.isdigit() else None
    owner, _, host = name.removeprefix(CREATING_PREFIX).partition("@")
    try:
        _, pid, start, pidns, boot = owner.split("-")
        return Lease(host, int(pid), None if start == "None" else int(start), None if boot == "None" else boot,
                     None if pidns == "None" else int(pidns))
    except ValueError:
        return None


def remove_job_dir(staging_root: str | Path, job_key: str) -> None:
    """Delete a job's staging dir with every file in it (missing: nothing to do); for a
    streaming query, its query dir too once empty."""
    path = job_dir(staging_root, job_key)
    try:
        fileops.rmtree(path)
    except FileNotFoundError:
        pass
    except OSError as e:
        raise StorageError("cannot delete the staging dir", path=path, operation="delete") from e
    if path.parent != Path(staging_root):
        try:
            fileops.rmdir(path.parent)
        except OSError:
            pass  # other batches of the query are staged there, or it is gone


def read_lease(directory: Path) -> Lease | None:
    try:
        return Lease.from_json(read_file(directory / LEASE_FILE, "staging lease"))
    except (StorageError, ValueError, KeyError, TypeError):
        return None


def candidates(root: Path) -> Iterable[tuple[str, Path]]:
    """``(job key, dir)`` of every job dir and scratch dir under a staging root."""
    try:
        entries = sorted(root.iterdir())
    except OSError:
        return
    for entry in entries:
        if not entry.is_dir():
            continue
        if entry.name.startswith("query-"):
            try:
                inner = sorted(entry.iterdir())
            except OSError:
                continue
            for sub in inner:
                if sub.is_dir():
                    yield f"{entry.name}/{sub.name}", sub
        else:
            yield entry.name, entry


def reclaim_staging(roots: Iterable[str | Path], keep: set[str], now_ms: int | None = None) -> list[Path]:
    """Delete the staging dirs under ``roots`` whose owner is dead (see the module doc), except
    those of the job keys in ``keep``; the dirs deleted. ``now_ms``: the clock time time leases
    are checked against (None: none expires)."""
    removed: list[Path] = []
    for root in {Path(r) for r in roots}:
        for key, path in candidates(root):
            if key in keep:
                continue
            lease = read_lease(path)
            if lease is None and path.name.startswith(CREATING_PREFIX):
                lease = scratch_lease(path.name)
            if lease is None and path.name.startswith(RECLAIMING_PREFIX):  # a reclaim cut short after its lease
                if _delete(path, path):
                    removed.append(path)
                continue
            if lease is None:
                log.info("staging dir %s has no owner lease (an older tidelog, or not a staging dir): kept", path)
                continue
            if not lease.owner_is_dead(now_ms):
                continue
            # a job dir may be taken over by a live driver (ensure_job_dir); scratch dirs never are
            if not (_delete(path, path) if path.name.startswith((CREATING_PREFIX, RECLAIMING_PREFIX))
                    else _reclaim(path, lease)):
                continue
            removed.append(path)
            if lease.expires is not None:
                log.warning("deleted the staging dir %s: its job staged nothing through the broker since its lease "
                            "expired (at %d ms) and no pending commit needs it", path, lease.expires)
            else:
                log.warning("deleted the staging dir %s: its job's owner (pid %d on %s) is dead and no pending "
                            "commit needs it", path, lease.pid, lease.host)
            if path.parent != root:
                try:
                    fileops.rmdir(path.parent)
                except OSError:
                    pass
    return removed


def _reclaim(path: Path, lease: Lease) -> bool:
    """Delete the staging dir ``path`` of the dead owner ``lease``; whether it was. A live driver
    may take the dir over at any moment (:func:`ensure_job_dir`), so it is first renamed away
    (``.reclaiming-*``: new tasks then make a fresh dir) and its lease read again there: a
    lease changed meanwhile puts the dir back, untouched."""
    aside = path.parent / f"{RECLAIMING_PREFIX}{uuid.uuid4().hex}"
    try:
        fileops.rename(path, aside)
    except OSError as e:
        if not isinstance(e, FileNotFoundError):
            log.warning("cannot delete the abandoned staging dir %s: %s", path, e)
        return False
    if read_lease(aside) != lease:
        try:
            fileops.rename(aside, path)
        except OSError as e:  # a task made a fresh dir there meanwhile: the taken-over one is kept aside
            log.warning("staging dir %s was taken over by a live driver while being reclaimed, and cannot be "
                        "put back (kept as %s): %s", path, aside, e)
        return False
    return _delete(aside, path)


def _delete(directory: Path, named: Path) -> bool:
    try:
        fileops.rmtree(directory)
    except OSError as e:
        log.warning("cannot delete the abandoned staging dir %s (as %s): %s", named, directory, e)
        return False
    return True


class StagedFile:
    """A task attempt's staged-batch file, opened at its first batch; fsynced (with its dir) at close."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None
        self.position = 0

    def write(self, data: bytes) -> int:
        """Append ``data``; its position."""
        try:
            if self._fd is None:
                self._fd = fileops.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC)
            fileops.write_fully(self._fd, data, self.path)
        except OSError as e:
            raise StorageError("cannot write the staged batch file", path=self.path, operation="write") from e
        position = self.position
        self.position += len(data)
        return position

    def close(self) -> bool:
        """fsync and close; whether anything was written."""
        if self._fd is None:
            return False
        try:
            fileops.fsync(self._fd, self.path)
            os.close(self._fd)
            self._fd = None
            fileops.fsync_dir(self.path.parent)
        except OSError as e:
            raise StorageError("cannot sync the staged batch file", path=self.path, operation="fsync") from e
        return True

    def discard(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
            try:
                fileops.unlink(self.path, missing_ok=True)
            except OSError:
                pass


def stage_batches(staging_root: str | Path, job_key: str, file_name: str,
                  batches: Iterable[tuple[str, int, bytes]], lease: Lease | None) -> list[tuple[str, StagedBatch]]:
    """Stage ready producer batches ``(topic, partition, bytes)`` in one file of the job's dir
    (created with ``lease``), fsynced; their references in the order given, for a commit. The
    generic way in for a write path that has its batches already (the Spark sink encodes its own)."""
    out = StagedFile(ensure_job_dir(staging_root, job_key, lease) / file_name)
    refs = []
    try:
        for topic, partition, data in batches:
            position = out.write(data)
            records = int.from_bytes(data[RECORDS_COUNT_OFFSET:RECORDS_COUNT_OFFSET + 4], "big")
            refs.append((file_name, StagedBatch(topic, partition, position, len(data), records,
                                                crc32c(data[RECORD_BATCH_OVERHEAD:]), False)))
        out.close()
    except BaseException:
        out.discard()
        raise
    return refs
