"""Recovery after an unclean stop in worker processes (:mod:`tidelog.manager.recovery`): the same
outcome as recovering in process — torn tails cut, every acknowledged record kept, broken
partitions set aside — and the recovered partitions open as cleanly shut down afterwards."""

from __future__ import annotations

import errno
import logging
from pathlib import Path

import pytest
from manager_helpers import Opener, batch, break_partition, crash, read_offsets, tp

from tidelog.manager import recovery
from tidelog.storage import fileops
from tidelog.storage.fileops import WRITE_OPS, FaultRule

PARTITIONS = 6


@pytest.fixture
def few_partitions_use_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(recovery, "MIN_BYTES_FOR_PROCESSES", 1)  # test seam: small dirs use the pool too
    monkeypatch.setattr(recovery, "MIN_AVERAGE_BYTES_FOR_PROCESSES", 1)


def crashed_dir(broker: Opener, one_dir: list[Path]) -> None:
    """``PARTITIONS`` partitions of 5 appends each, left as a killed process leaves them, with
    garbage after the last batch of partition 0 (a torn write)."""
    manager = broker.open(one_dir, {"num.recovery.threads.per.data.dir": "2"})
    manager.create_topic("foo", PARTITIONS)
    for partition in range(PARTITIONS):
        for _ in range(5):
            manager.append(tp("foo", partition), batch(2))
    crash(manager)
    with open(one_dir[0] / "foo-0" / "00000000000000000000.log", "ab") as f:
        f.write(b"\x00\x00\x00\x00\x00\x00\x00\x07torn")


@pytest.mark.usefixtures("few_partitions_use_processes")
@pytest.mark.parametrize("threads", ["2", "1"])
def test_recovery_keeps_every_record_and_cuts_the_torn_tail(broker: Opener, one_dir: list[Path], threads: str,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    crashed_dir(broker, one_dir)
    with caplog.at_level(logging.INFO, logger="tidelog.manager"):
        manager = broker.open(one_dir, {"num.recovery.threads.per.data.dir": threads})
    assert (f"recovering {PARTITIONS} partitions" in caplog.text) == (threads == "2")
    assert manager.set_aside() == []
    for partition in range(PARTITIONS):
        log = manager.log(tp("foo", partition))
        assert read_offsets(log) == list(range(10)) and log.log_end_offset == 10
    assert not (one_dir[0] / "foo-0" / "00000000000000000000.log").read_bytes().endswith(b"torn")


@pytest.mark.usefixtures("few_partitions_use_processes")
def test_partition_that_fails_in_a_worker_is_set_aside(broker: Opener, one_dir: list[Path]) -> None:
    crashed_dir(broker, one_dir)
    break_partition(one_dir[0] / "foo-3")
    manager = broker.open(one_dir, {"num.recovery.threads.per.data.dir": "2"})
    [aside] = manager.set_aside()
    assert aside.topic_partition == tp("foo", 3) and aside.path == one_dir[0] / "foo-3"
    assert "Is a directory" in aside.reason, aside.reason
    assert [len(read_offsets(manager.log(tp("foo", p)))) for p in (0, 1, 2, 4, 5)] == [10] * 5


@pytest.mark.usefixtures("few_partitions_use_processes")
def test_processes_and_one_thread_leave_the_same_state(broker: Opener, tmp_path: Path) -> None:
    """Recovery point included: recovering elsewhere claims nothing more durable than recovering here."""
    states = []
    for threads in ("2", "1"):
        dirs = [tmp_path / f"t{threads}"]
        crashed_dir(broker, dirs)
        manager = broker.open(dirs, {"num.recovery.threads.per.data.dir": threads})
        states.append([(p.topic_partition, p.log_start_offset, p.log_end_offset, p.recovery_point, p.size, p.segments)
                       for info in manager.log_dirs() for p in info.partitions])
        assert not any(lg.had_clean_shutdown for _, lg in manager.logs())
    assert states[0] == states[1] and {s[3] for s in states[0]} == {0}


def test_bytes_to_recover_counts_from_the_segment_holding_the_recovery_point(tmp_path: Path) -> None:
    for base, size in ((0, 100), (50, 30), (90, 7)):
        (tmp_path / f"{base:020d}.log").write_bytes(b"x" * size)
    (tmp_path / f"{0:020d}.index").write_bytes(b"y" * 1000)
    assert recovery.bytes_to_recover(tmp_path, 0) == 137
    assert recovery.bytes_to_recover(tmp_path, 60) == 37
    assert recovery.bytes_to_recover(tmp_path, 90) == 7
    assert recovery.bytes_to_recover(tmp_path / "missing", 0) == 0


def test_processes_only_for_heavy_recovery() -> None:
    mib = 1 << 20
    assert recovery.worth_processes(64 * mib, 16) and not recovery.worth_processes(64 * mib, 1)
    assert not recovery.worth_processes(100 * mib, 10_000), "many tiny partitions: the reopen costs more"
    assert not recovery.worth_processes(8 * mib, 2)


@pytest.mark.usefixtures("few_partitions_use_processes")
def test_a_disk_fault_in_a_worker_takes_the_dir_offline_until_its_probe_loads_it(
        broker: Opener, one_dir: list[Path]) -> None:
    crashed_dir(broker, one_dir)
    full = FaultRule(WRITE_OPS, f"{one_dir[0]}/foo-3/*", error=errno.ENOSPC)  # inherited by the forked workers
    with fileops.inject(full) as stats:
        manager = broker.open(one_dir, {"num.recovery.threads.per.data.dir": "2"})
    assert stats.fired == 0  # it fired in a worker, which reported the errno
    [offline] = manager.offline_log_dirs()
    assert (offline.operation, offline.errno) == ("loading of foo-3", errno.ENOSPC)
    assert manager.logs() == [] and not [s for s in manager.set_aside() if s.path.parent == one_dir[0]]
    broker.clock.advance(1_000)
    assert manager.probe_offline_dirs() == one_dir
    assert [len(read_offsets(manager.log(tp("foo", p)))) for p in range(PARTITIONS)] == [10] * PARTITIONS
