"""Every kill point of every workload, killed before and after each disk-changing file operation
(``make soak``; ~3000 points, ~10 minutes of one core). See ``test_kill_points.py``."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from kill_harness import Summary, all_points, chosen_points, counting_run, run_points
from kill_workloads import WORKLOADS


@pytest.mark.soak
@pytest.mark.parametrize("workload", sorted(WORKLOADS))
def test_all_kill_points_lose_and_resurrect_nothing(
    workload: str, tmp_path: Path, kill_root: Callable[[], Path], kill_summary: Summary
) -> None:
    plan = counting_run(workload, tmp_path / "counting")
    points = chosen_points(plan)
    if points is None:
        points = list(all_points(plan))
    if not points:
        pytest.skip(f"no kill point of workload {workload} named")
    run_points(plan, points, kill_root, kill_summary, __file__)
