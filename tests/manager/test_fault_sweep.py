"""A fault at every file operation of a workload: whichever op fails, its log dir goes offline, the
other dir never notices, the dir comes back when its probe passes, and every acknowledged record
is there with its value (none lost, none changed, none resurrected below the log start offset).

The workload (appends with rolls, flushes, the three checkpoints, retention, DeleteRecords) runs
once under a counting plan to learn how many file ops it makes in the first dir; then once per
chosen op N with a rule failing exactly the Nth (errno drawn from ENOSPC, EIO, EROFS). A seeded
sample of points runs in ``make test``; every point under ``make soak``.
"""

from __future__ import annotations

import errno
import json
import os
import random
from collections.abc import Iterator
from pathlib import Path

import pytest
from manager_helpers import Opener, T0, read_offsets, tp

from tidelog.errors import LogDirOfflineError
from tidelog.manager import LogManager
from tidelog.records import BatchBuilder, iter_batches
from tidelog.storage import fileops
from tidelog.storage.fetch_info import FetchIsolation
from tidelog.storage.fileops import WRITE_OPS, FaultRule
from tidelog.storage.verify import verify_paths

SEED = 20261122
SAMPLE = 24
ERRNOS = (errno.ENOSPC, errno.EIO, errno.EROFS)
PROPS = {"log.segment.bytes": "400", "log.retention.bytes": "800", "log.flush.interval.ms": "0"}
FIRED = {"points": 0, "faults_fired": 0}


@pytest.fixture(scope="module", autouse=True)
def _fault_figures() -> Iterator[None]:
    yield
    target = os.environ.get("TIDELOG_FAULT_FIGURES")
    if target:
        with open(target, "a") as out:
            out.write(json.dumps({"module": __name__, **FIRED}) + "\n")


def _batch(step: int, partition: int) -> bytes:
    builder = BatchBuilder(base_offset=0)
    for i in range(3):
        builder.append(i, T0, b"k%d" % (step % 5), b"p%d-s%d-r%d" % (partition, step, i))
    return builder.build()


class Workload:
    """Runs the steps; records what was acknowledged and what the healthy dir did."""

    def __init__(self, manager: LogManager) -> None:
        self.manager = manager
        self.acked: dict[int, dict[int, bytes]] = {0: {}, 1: {}}  # partition -> offset -> value
        self.low_watermark = {0: 0, 1: 0}
        self.refused = {0: 0, 1: 0}

    def run(self) -> None:
        for step in range(14):
            for partition in (0, 1):
                self._append(step, partition)
            if step % 3 == 2:
                self.manager.flush_dirty_logs()
                self.manager.checkpoint_recovery_points()
                self.manager.checkpoint_high_watermarks()
            if step == 7:
                self.manager.retention_task()
                self.manager.checkpoint_log_start_offsets()
            if step == 10:
                for partition in (0, 1):
                    self._delete_records(partition)

    def _append(self, step: int, partition: int) -> None:
        data = _batch(step, partition)
        try:
            first = self.manager.append(tp("t", partition), data).first_offset
        except LogDirOfflineError:
            self.refused[partition] += 1
            return
        for _, batch in iter_batches(data):
            for record in batch.records():
                self.acked[partition][first + record.offset] = record.value

    def _delete_records(self, partition: int) -> None:
        try:
            self.low_watermark[partition] = self.manager.delete_records(tp("t", partition), -1)
        except LogDirOfflineError:
            self.refused[partition] += 1


def _values(manager: LogManager, partition: int) -> dict[int, bytes]:
    """Every record from the log start offset to the log end (a read returns one segment)."""
    lg = manager.log(tp("t", partition))
    found: dict[int, bytes] = {}
    offset = lg.log_start_offset
    while offset < lg.log_end_offset:
        batches = [b for _, b in iter_batches(lg.read(offset, 1 << 20, FetchIsolation.LOG_END).records)]
        assert batches, f"no batch at offset {offset} of t-{partition}"
        found.update((r.offset, r.value) for b in batches for r in b.records() if r.offset >= offset)
        offset = batches[-1].next_offset
    return found


def _run(tmp: Path, rule: FaultRule | None) -> tuple[Workload, LogManager, fileops.FaultStats, list[Path]]:
    dirs = [tmp / "a", tmp / "b"]
    opener = Opener(dirs)
    manager = opener.open(dirs, PROPS)
    manager.create_topic("t", 2)
    workload = Workload(manager)
    with fileops.inject(*([rule] if rule else [FaultRule(WRITE_OPS, f"{dirs[0]}/*")])) as stats:
        workload.run()
    opener.clock.advance(1_000)
    manager.probe_offline_dirs()
    return workload, manager, stats, dirs


def _ops_in_first_dir(tmp: Path) -> int:
    _, manager, stats, _ = _run(tmp / "count", None)
    manager.shutdown()
    return stats.matched[0]


def _points(tmp_path_factory: pytest.TempPathFactory, sample: int | None) -> list[tuple[int, int]]:
    total = _ops_in_first_dir(tmp_path_factory.mktemp("count"))
    assert total > 50  # the workload does reach the disk of the faulted dir
    rng = random.Random(SEED)
    chosen = range(total) if sample is None else sorted(rng.sample(range(total), min(sample, total)))
    return [(n, ERRNOS[rng.randrange(len(ERRNOS))]) for n in chosen]


def check_point(tmp: Path, n: int, error: int) -> None:
    workload, manager, stats, dirs = _run(tmp, None if n < 0 else
                                          FaultRule(WRITE_OPS, f"{tmp / 'a'}/*", error=error, skip=n, times=1))
    try:
        FIRED["points"] += 1
        FIRED["faults_fired"] += stats.fired
        assert stats.fired == 1
        assert manager.offline_log_dirs() == [], "the probe passes once the fault is spent"
        assert workload.refused[1] == 0 and len(workload.acked[1]) == 42, "the healthy dir never noticed"
        for partition in (0, 1):
            lg = manager.log(tp("t", partition))
            found = _values(manager, partition)
            assert lg.log_start_offset >= workload.low_watermark[partition]
            expected = {o: v for o, v in workload.acked[partition].items() if o >= lg.log_start_offset}
            assert {o: found.get(o) for o in expected} == expected, f"acknowledged records of t-{partition}"
            assert read_offsets(lg) == sorted(found)
        assert verify_paths([manager.log(tp("t", 0)).dir]).ok
    finally:
        manager.shutdown()


@pytest.fixture(scope="module")
def sampled_points(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[int, int]]:
    return _points(tmp_path_factory, SAMPLE)


def test_a_fault_at_any_sampled_file_op_loses_nothing_and_the_dir_comes_back(
        tmp_path: Path, sampled_points: list[tuple[int, int]]) -> None:
    for n, error in sampled_points:
        check_point(tmp_path / f"p{n}", n, error)


@pytest.mark.soak
def test_a_fault_at_every_file_op_loses_nothing_and_the_dir_comes_back(
        tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    for n, error in _points(tmp_path_factory, None):
        check_point(tmp_path / f"p{n}", n, error)
