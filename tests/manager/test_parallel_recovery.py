"""Recovery after an unclean stop in worker processes (:mod:`tidelog.manager.recovery`): the same
outcome as recovering in process — torn tails cut, every acknowledged record kept, broken
partitions set aside — and the recovered partitions open as cleanly shut down afterwards."""

from __future__ import annotations

from pathlib import Path

import pytest
from manager_helpers import Opener, batch, break_partition, crash, read_offsets, tp

from tidelog.manager import recovery

PARTITIONS = 6


@pytest.fixture(autouse=True)
def few_partitions_use_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(recovery, "MIN_PARTITIONS_FOR_PROCESSES", 2)  # test seam: small dirs use the pool too


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


@pytest.mark.parametrize("threads", ["2", "1"])
def test_recovery_keeps_every_record_and_cuts_the_torn_tail(broker: Opener, one_dir: list[Path], threads: str) -> None:
    crashed_dir(broker, one_dir)
    manager = broker.open(one_dir, {"num.recovery.threads.per.data.dir": threads})
    assert manager.set_aside() == []
    for partition in range(PARTITIONS):
        log = manager.log(tp("foo", partition))
        assert read_offsets(log) == list(range(10)) and log.log_end_offset == 10
    assert not (one_dir[0] / "foo-0" / "00000000000000000000.log").read_bytes().endswith(b"torn")


def test_partition_that_fails_in_a_worker_is_set_aside(broker: Opener, one_dir: list[Path]) -> None:
    crashed_dir(broker, one_dir)
    break_partition(one_dir[0] / "foo-3")
    manager = broker.open(one_dir, {"num.recovery.threads.per.data.dir": "2"})
    [aside] = manager.set_aside()
    assert aside.topic_partition == tp("foo", 3) and aside.path == one_dir[0] / "foo-3"
    assert "Is a directory" in aside.reason, aside.reason
    assert [len(read_offsets(manager.log(tp("foo", p)))) for p in (0, 1, 2, 4, 5)] == [10] * 5


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
