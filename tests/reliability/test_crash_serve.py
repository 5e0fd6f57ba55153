"""``tidelog serve`` killed with SIGKILL under kafka-python load (acks=-1), restarted, checked.

The harness is :mod:`reliability.crash` (see its docstring for every check). The short run here is
part of ``make test``; the long one runs with ``make soak``. A failure prints the seed and the
kill index, and ``python -m reliability.crash --seed S --kills N`` replays the schedule.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from reliability.crash import CrashFailure, CrashRun, run

SHORT_KILLS = 10
SOAK_KILLS = int(os.environ.get("TIDELOG_CRASH_KILLS", "300"))


def test_sigkill_under_load_loses_nothing_acknowledged_and_resurrects_nothing(tmp_path: Path) -> None:
    summary = run(seed=14, kills=SHORT_KILLS, work_dir=tmp_path, resume_every=5)
    print(summary.line())
    assert summary.ok, summary.violations
    assert summary.kills == SHORT_KILLS
    assert summary.count("lost") == summary.count("resurrected") == 0
    assert summary.acknowledged > 200, "the workload barely ran: the kills proved little"
    assert summary.resume_checks == 3  # after kills 5 and 10, and at the end


def test_the_harness_reports_acknowledged_records_removed_behind_the_brokers_back(tmp_path: Path) -> None:
    """The checks can fail: a durable partition's files emptied between a kill and the restart
    is reported as lost acknowledged records, with the seed and kill index to replay it."""

    def empty_durable_partition(data_dir: Path, index: int) -> None:
        if index == 0:
            for segment in (data_dir / "durable-0").glob("*.log"):
                segment.write_bytes(b"")

    crash_run = CrashRun(seed=3, kills=2, work_dir=tmp_path, _after_kill=empty_durable_partition)
    with pytest.raises(CrashFailure) as failure:
        crash_run.run()
    assert failure.value.kill_index == 0
    assert crash_run.summary.count("lost") > 0
    assert all(v.tp == ("durable", 0) for v in crash_run.summary.violations if v.kind == "lost")
    assert "--seed 3 --kills 1" in str(failure.value)


@pytest.mark.soak
def test_hundreds_of_sigkills_lose_and_resurrect_nothing(tmp_path: Path) -> None:
    seed = int(os.environ.get("TIDELOG_CRASH_SEED", "1"))
    summary = run(seed=seed, kills=SOAK_KILLS, work_dir=tmp_path, resume_every=10)
    print(summary.line())
    assert summary.ok, summary.violations
    assert summary.kills == SOAK_KILLS
    shutil.rmtree(tmp_path / "data", ignore_errors=True)
