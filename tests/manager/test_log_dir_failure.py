"""An offline log dir does not flap: its probe tests what failed (the size of a failed write, the
region of a failed read), backs off per cause, and a dir that comes back re-recovers only the
partitions the fault touched; a read fault in one partition fails only that partition's reads
(:mod:`tidelog.manager.log_dir_failure`).

Faults come through the file-operation seam (``min_size`` makes a nearly full disk: small writes
pass, large ones get ENOSPC); time is a FakeClock that runs the probe task. Offline and online
transitions are counted from the manager's log lines, as an operator would see them.
"""

from __future__ import annotations

import errno
import logging
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from manager_helpers import Opener, batch, read_offsets, tp

from tidelog.errors import LogDirOfflineError, StorageError
from tidelog.manager import LogManager
from tidelog.manager.log_dir_failure import PROBE_FILE
from tidelog.storage import fileops
from tidelog.storage.fetch_info import FetchIsolation
from tidelog.storage.fileops import WRITE_OPS, FaultRule, FileOp

BIG = 8 << 10  # a produced batch of ~8 KiB: more than the nearly full disk below takes


@pytest.fixture
def shared(broker: Opener, log_dirs: list[Path]) -> LogManager:
    """Topics ``t`` and ``u`` of two partitions each: ``t-0`` and ``u-0`` in the first dir, the
    ``-1`` partitions in the second; the periodic tasks (the probe among them) scheduled."""
    manager = broker.open(log_dirs[:2], {"log.segment.bytes": str(1 << 20)})
    manager.create_topic("t", 2)
    manager.create_topic("u", 2)
    assert {manager.log(tp(n, p)).dir.parent for n in "tu" for p in (0,)} == {log_dirs[0]}
    assert {manager.log(tp(n, p)).dir.parent for n in "tu" for p in (1,)} == {log_dirs[1]}
    manager.startup()
    return manager


def transitions(caplog: pytest.LogCaptureFixture, log_dir: Path) -> tuple[int, int]:
    """(times ``log_dir`` went offline, times it came back), from the manager's log lines."""
    lines = [r.getMessage() for r in caplog.records if r.name == "tidelog.manager.offline_dirs"]
    offline = sum(1 for line in lines if line.startswith(f"log dir {log_dir} is offline"))
    back = sum(1 for line in lines if line.startswith(f"{log_dir}: back online"))
    return offline, back


def big_batch() -> bytes:
    return batch(value_size=BIG)


def nearly_full(log_dir: Path) -> FaultRule:
    """The disk of ``log_dir`` has less than 4 KiB left: any write or reservation of 4 KiB or
    more gets ENOSPC, smaller ones pass."""
    return FaultRule(frozenset({FileOp.WRITE, FileOp.TRUNCATE}), f"{log_dir}/*", error=errno.ENOSPC, min_size=4096)


def test_a_nearly_full_disk_keeps_its_dir_offline_until_space_is_freed_without_flapping(
        caplog: pytest.LogCaptureFixture, broker: Opener, shared: LogManager, log_dirs: list[Path]) -> None:
    caplog.set_level(logging.INFO, "tidelog.manager.offline_dirs")
    full, healthy = log_dirs[0], log_dirs[1]
    for name in "tu":
        shared.append(tp(name, 0), batch())
    kept = shared.log(tp("u", 0))
    acked_elsewhere = 0
    with fileops.inject(nearly_full(full)) as stats:
        for _ in range(300):  # five minutes of a producer retrying the big batch every second
            try:
                shared.append(tp("t", 0), big_batch())
            except LogDirOfflineError:
                pass
            acked_elsewhere += shared.append(tp("u", 1), batch()).first_offset >= 0  # the other dir serves
            broker.clock.advance(1_000)
        assert transitions(caplog, full) == (1, 0)  # offline once, never back while the disk is full
        [offline] = shared.offline_log_dirs()
        assert offline.errno == errno.ENOSPC and offline.backoff_ms == 60_000  # backed off to the cap
        assert 6 <= offline.probes <= 12  # 1, 2, 4 ... 32 s, then once a minute
        assert [c.size for c in offline.causes] == [len(big_batch())]
        assert stats.fired == 2 + offline.probes  # the append (its advisory reservation, its write), each probe
    assert acked_elsewhere == 300
    broker.clock.advance(60_000)  # space freed: the next probe passes
    assert transitions(caplog, full) == (1, 1) and shared.offline_log_dirs() == []
    assert shared.log(tp("u", 0)) is kept  # not touched by the fault: not reopened, not recovered
    assert read_offsets(shared.log(tp("t", 0))) == [0]  # the failed append was never acknowledged
    assert shared.append(tp("t", 0), big_batch()).first_offset == 1
    assert not (full / PROBE_FILE).exists() and not (healthy / PROBE_FILE).exists()


def test_a_dir_that_fails_again_soon_after_it_came_back_starts_from_the_doubled_backoff(
        caplog: pytest.LogCaptureFixture, broker: Opener, shared: LogManager, log_dirs: list[Path]) -> None:
    caplog.set_level(logging.INFO, "tidelog.manager.offline_dirs")
    full = log_dirs[0]
    rule = FaultRule(frozenset({FileOp.WRITE}), f"{full}/t-0/*", error=errno.ENOSPC, times=1)
    backoffs = []
    for _ in range(5):  # a disk that fills again as soon as the dir is back
        with fileops.inject(rule):
            with pytest.raises(LogDirOfflineError):
                shared.append(tp("t", 0), batch())
        backoffs.append(shared.offline_log_dirs()[0].backoff_ms)
        broker.clock.advance(backoffs[-1])
        assert shared.offline_log_dirs() == []
    assert backoffs == [1_000, 2_000, 4_000, 8_000, 16_000]
    assert transitions(caplog, full) == (5, 5)
    broker.clock.advance(61_000)  # healthy for longer than the cap: the cause is forgotten
    with fileops.inject(rule):
        with pytest.raises(LogDirOfflineError):
            shared.append(tp("t", 0), batch())
    assert shared.offline_log_dirs()[0].backoff_ms == 1_000


def test_a_read_fault_in_one_partition_fails_only_its_reads_and_the_dir_stays_online(
        caplog: pytest.LogCaptureFixture, broker: Opener, shared: LogManager, log_dirs: list[Path]) -> None:
    caplog.set_level(logging.INFO, "tidelog.manager.offline_dirs")
    for name in "tu":
        shared.append(tp(name, 0), batch())
    unreadable = FaultRule(frozenset({FileOp.READ}), f"{log_dirs[0]}/t-0/*.log", error=errno.EIO)
    with fileops.inject(unreadable):
        for _ in range(30):  # a consumer retrying for half a minute
            with pytest.raises(StorageError) as failed:
                shared.log(tp("t", 0)).read(0, 1 << 20, FetchIsolation.HIGH_WATERMARK)
            assert failed.value.error_code == 56  # KAFKA_STORAGE_ERROR for this partition
            assert shared.report_read_error(tp("t", 0), "fetch", failed.value) is False
            assert shared.append(tp("u", 0), batch()).first_offset >= 1  # same dir: keeps working
            assert shared.append(tp("t", 0), batch()).first_offset >= 1  # its own appends too
            broker.clock.advance(1_000)
    assert transitions(caplog, log_dirs[0]) == (0, 0) and shared.offline_log_dirs() == []
    assert read_offsets(shared.log(tp("t", 0))) == list(range(31))


def test_read_faults_that_spread_take_the_dir_offline_and_its_probe_rereads_them(
        caplog: pytest.LogCaptureFixture, broker: Opener, shared: LogManager, log_dirs: list[Path]) -> None:
    caplog.set_level(logging.INFO, "tidelog.manager.offline_dirs")
    for name in "tu":
        shared.append(tp(name, 0), batch())
    kept = {name: shared.log(tp(name, 0)) for name in "tu"}
    failing = FaultRule(frozenset({FileOp.READ}), f"{log_dirs[0]}/*/*.log", error=errno.EIO)
    with fileops.inject(failing):
        for name, offline_now in (("t", False), ("u", True)):
            with pytest.raises(StorageError) as failed:
                kept[name].read(0, 1 << 20, FetchIsolation.HIGH_WATERMARK)
            assert shared.report_read_error(tp(name, 0), "fetch", failed.value) is offline_now
        [offline] = shared.offline_log_dirs()
        assert {(c.kind, Path(c.path).parent.name, c.position) for c in offline.causes} == {
            ("read", "t-0", 0), ("read", "u-0", 0)}
        with pytest.raises(LogDirOfflineError):
            shared.append(tp("u", 0), batch())
        broker.clock.advance(3_000)  # probes re-read both regions: still failing
        assert shared.offline_log_dirs()[0].probes >= 1 and transitions(caplog, log_dirs[0]) == (1, 0)
    broker.clock.advance(4_000)
    assert transitions(caplog, log_dirs[0]) == (1, 1)
    assert all(shared.log(tp(name, 0)) is kept[name] for name in "tu")  # a read changes nothing: no recovery
    assert shared.append(tp("u", 0), batch()).first_offset == 1


def test_coming_back_reopens_with_recovery_only_the_partition_whose_write_failed(
        broker: Opener, shared: LogManager, log_dirs: list[Path]) -> None:
    for name in "tu":
        shared.append(tp(name, 0), batch(3))
    kept = shared.log(tp("u", 0))
    with fileops.inject(FaultRule(WRITE_OPS, f"{log_dirs[0]}/t-0/*", error=errno.EIO, times=1)):
        with pytest.raises(LogDirOfflineError):
            shared.append(tp("t", 0), batch())
    torn = shared.describe_topic("t").offline[0].path / "00000000000000000000.log"
    with open(torn, "ab") as out:  # what the failing write left behind
        out.write(batch(3)[:30])
    broker.clock.advance(1_000)
    assert shared.offline_log_dirs() == []
    assert shared.log(tp("u", 0)) is kept
    assert read_offsets(shared.log(tp("t", 0))) == [0, 1, 2]  # recovered: the torn bytes are cut
    assert shared.append(tp("t", 0), batch()).first_offset == 3
    shared.shutdown()  # every log, kept or reopened, closes cleanly


def test_a_kept_log_whose_own_write_fails_while_its_dir_is_offline_is_recovered_when_the_dir_is_back(
        broker: Opener, shared: LogManager, log_dirs: list[Path]) -> None:
    for name in "tu":
        shared.append(tp(name, 0), batch())
    held = {name: shared.log(tp(name, 0)) for name in "tu"}  # as a reader in flight holds them
    with fileops.inject(FaultRule(frozenset({FileOp.OPEN}), f"{log_dirs[0]}/recovery-point-offset-checkpoint*",
                                  error=errno.EIO, times=1)):
        shared.checkpoint_recovery_points()  # no partition's own operation: every log is kept open
    assert [d.path for d in shared.offline_log_dirs()] == [log_dirs[0]]
    with fileops.inject(FaultRule(frozenset({FileOp.FSYNC}), f"{log_dirs[0]}/t-0/*", error=errno.EIO, times=1)):
        with pytest.raises(StorageError) as failed:
            held["t"].flush()
    assert shared.report_storage_error(tp("t", 0), "flush", failed.value) is True
    broker.clock.advance(1_000)
    assert shared.offline_log_dirs() == []
    assert shared.log(tp("u", 0)) is held["u"]
    assert shared.log(tp("t", 0)) is not held["t"] and read_offsets(shared.log(tp("t", 0))) == [0]


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A real 4 MiB tmpfs (skipped where mounting is not allowed): a disk that really fills."""
    mount = tmp_path / "disk"
    mount.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)], capture_output=True,
                             text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(disk: Path, leave: int) -> Path:
    """Fill ``disk`` with one file, then give back ``leave`` bytes; the file, to free the rest."""
    filler = disk / "filler"
    with open(filler, "wb") as out:
        try:
            while True:
                out.write(b"\0" * 65536)
                out.flush()
        except OSError as e:
            assert e.errno == errno.ENOSPC
    os.truncate(filler, filler.stat().st_size - leave)
    return filler


def test_a_really_full_tmpfs_keeps_its_dir_offline_until_the_filler_goes(
        caplog: pytest.LogCaptureFixture, small_disk: Path, tmp_path: Path) -> None:
    caplog.set_level(logging.INFO, "tidelog.manager.offline_dirs")
    full, healthy = small_disk / "logs", tmp_path / "other"
    broker = Opener([full, healthy])
    try:
        manager = broker.open(None, {"log.segment.bytes": str(1 << 20), "log.index.size.max.bytes": "4096"})
        manager.create_topic("t", 2)
        manager.startup()
        assert manager.append(tp("t", 0), batch()).first_offset == 0
        filler = fill(small_disk, 32 << 10)  # a page or eight left: enough for a one-page probe
        big = batch(value_size=200 << 10)
        for _ in range(300):  # five minutes of a producer retrying a 200 KiB batch every second
            with pytest.raises(LogDirOfflineError):
                manager.append(tp("t", 0), big)
            manager.append(tp("t", 1), batch())  # the healthy dir serves
            broker.clock.advance(1_000)
        assert transitions(caplog, full) == (1, 0)
        filler.unlink()
        broker.clock.advance(60_000)
        assert transitions(caplog, full) == (1, 1)
        assert manager.append(tp("t", 0), big).first_offset == 1
        assert read_offsets(manager.log(tp("t", 0))) == [0, 1]
    finally:
        broker.close_all()
