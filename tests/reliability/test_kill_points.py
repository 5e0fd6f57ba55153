"""Crash consistency at kill points (issue 8, item 1): a workload SIGKILLed at its Nth disk-changing
file operation loses no acknowledged record, brings back no deleted or cleaned-away record,
swaps each cleaned group all-or-nothing, passes ``verify``, and retention and the cleaner resume.

``make test`` runs a seeded sample of the kill points of each workload (plus every kill point of
the steps that once failed); ``make soak`` runs all of them (``test_kill_points_soak.py``). A
failure names the kill point and the command that reruns exactly it. Method: ``kill_harness.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from kill_harness import (
    RERUN_ENV,
    SEED_ENV,
    KillPoint,
    Outcome,
    Plan,
    Summary,
    compare_partition,
    all_points,
    chosen_points,
    counting_run,
    run_points,
    run_workload,
    sample_points,
    seed,
)
from kill_workloads import WORKLOADS

from tidelog.storage import fileops

SAMPLE_PER_WORKLOAD = 60
# Steps whose every kill point runs in make test: where a bug was found (docs/crash-consistency.md).
FOCUS = {
    "retention": {"delete records", "checkpoints"},
}


def focus_points(plan: Plan) -> list[KillPoint]:
    steps = FOCUS.get(plan.workload, set())
    return [p for p in all_points(plan) if plan.step_names[plan.step_of_op[p.op]] in steps]


@pytest.mark.parametrize("workload", sorted(WORKLOADS))
def test_kill_points_sample_lose_and_resurrect_nothing(
    workload: str, tmp_path: Path, kill_root: Callable[[], Path], kill_summary: Summary
) -> None:
    plan = counting_run(workload, tmp_path / "counting")
    points = chosen_points(plan)
    if points is None:
        points = sorted(set(sample_points(plan, SAMPLE_PER_WORKLOAD, seed())) | set(focus_points(plan)),
                        key=lambda p: (p.op, p.when))
    if not points:
        pytest.skip(f"{RERUN_ENV} names no kill point of workload {workload}")
    run_points(plan, points, kill_root, kill_summary, __file__)


def test_counting_run_is_deterministic(tmp_path: Path) -> None:
    """Kill points are addressed by op index: two runs must make the same ops in the same steps."""
    first = counting_run("clean", tmp_path / "a")
    second = counting_run("clean", tmp_path / "b")
    assert first.ops > 100 and first.step_of_op == second.step_of_op and first.states == second.states


def test_every_workload_reaches_the_operations_it_is_meant_to_kill(tmp_path: Path) -> None:
    """The workloads cover rolls, checkpoints, .deleted unlinks, the cleaner's swap renames and
    the removal of a deleted topic's dirs: each kind of op the issue names occurs."""
    kinds = {name: counting_run(name, tmp_path / name).op_kinds for name in ("clean", "delete_topic")}
    assert kinds["clean"]["rename"] >= 50 and kinds["clean"]["unlink"] >= 20
    assert kinds["delete_topic"]["rmtree"] >= 2


def test_checker_counts_a_lost_and_a_resurrected_record(tmp_path: Path, kill_root: Callable[[], Path]) -> None:
    """The checks can fail: remove an acknowledged segment and plant a record below the log start
    offset between the kill and the reopen, and the outcome says so."""
    before = {"lso": 5, "leo": 9, "recs": {5: "a", 6: "b", 7: "c", 8: "d"}, "bases": [0]}
    after = {"lso": 5, "leo": 10, "recs": {5: "a", 6: "b", 7: "c", 8: "d", 9: "e"}, "bases": [0]}
    got = {"lso": 4, "leo": 9, "recs": {4: "z", 5: "a", 7: "c", 8: "d"}, "bases": [0]}
    outcome = Outcome(KillPoint("append", 0, "before"), 0, 0.0)
    compare_partition(outcome, "t-0", before, after, got, grouped=True)
    assert outcome.lost == 1 and outcome.resurrected == 1
    assert any("log start offset 4 outside [5, 5]" in p for p in outcome.problems)
    assert any("neither the group before nor after" in p for p in outcome.problems)


def test_rerun_variable_names_points() -> None:
    assert KillPoint.parse("clean:57:after") == KillPoint("clean", 57, "after")
    assert str(KillPoint("retention", 3, "before")) == "retention:3:before"
    with pytest.raises(ValueError, match="before|after"):
        KillPoint.parse("clean:57:during")
    assert SEED_ENV == "TIDELOG_KILL_SEED"


def test_durable_appends_fsync_their_segment_and_a_new_one_its_dir_before_returning(tmp_path: Path) -> None:
    """What a kill point cannot see (a killed process keeps the page cache) but power loss would:
    with ``flush.messages=1`` every append fsyncs the ``.log`` it wrote before it returns, and a
    roll fsyncs the partition dir that got the new files; a page-cache topic fsyncs nothing."""
    steps = trace_steps("append", tmp_path)
    durable = [ops for name, ops in steps if name == "append dur"]
    cached = [ops for name, ops in steps if name == "append pc"]
    assert durable and cached
    for ops in durable:
        for i, (op, path) in enumerate(ops):
            if op == "write" and path.endswith(".log"):
                assert ("fsync", path) in ops[i + 1:], f"durable append wrote {path} and returned without fsync"
            if op == "open" and path.endswith(".log"):  # a roll created the segment
                assert ("fsync", str(Path(path).parent)) in ops[i + 1:], f"new segment {path}: dir not fsynced"
    assert not [1 for ops in cached for op, path in ops if op == "fsync" and path.endswith(".log")]


def trace_steps(workload: str, root: Path) -> list[tuple[str, list[tuple[str, str]]]]:
    """(step name, [(op, path)] of its disk-changing ops) for each step of one run of ``workload``."""
    names = [name for name, _ in WORKLOADS[workload]()]
    starts: list[int] = []
    with fileops.inject(trace=True) as stats:
        trace = stats.trace
        assert trace is not None
        run_workload(workload, root, lambda line: starts.append(len(trace)) if "begin" in line else None)
    starts.append(len(trace))
    return [(names[i], [(op.value, path) for op, path in trace[b:e] if op in fileops.WRITE_OPS])
            for i, (b, e) in enumerate(zip(starts, starts[1:]))]
