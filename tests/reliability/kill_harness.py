"""Kill points: a library-level workload killed with SIGKILL at its Nth file operation, reopened,
and checked against what it had reached (issue 8, item 1; ``docs/crash-consistency.md``).

Method
------
1. A *workload* (:mod:`kill_workloads`) is a list of steps (appends, flushes, checkpoints,
   retention, DeleteRecords, a clean, a topic deletion, clock advances that run the delayed
   unlinks) on a :class:`LogManager` driven by a :class:`FakeClock`. After each step it reads every partition back and emits the
   *state* (log start, log end, offset -> record hash, segment bases). Everything is
   deterministic, so every run makes the same file operations in the same order.
2. A *counting run* (in this process, under a counting plan of :mod:`tidelog.storage.fileops`)
   gives the number of disk-changing ops (:data:`fileops.WRITE_OPS`), the step each falls in,
   and the state after every step.
3. A *kill point* ``(workload, n, before|after)``: a forked child runs the workload under a rule
   that ``SIGKILL``s it at op ``n``, writing one line per step begun and state reached to a pipe.
   Killing a process (not the machine) keeps the page cache, so every op that returned is on
   "disk" for the reopen.
4. The parent reopens the dir with :meth:`LogManager.open` (timed: the recovery time), reads it
   back and checks it against the states before and after the step in flight: nothing both agree
   on is missing (*lost*), nothing neither holds is present (*resurrected*: below a reached log
   start offset, removed by a completed clean, of a deleted topic, or invented), a swap of a
   cleaned group is all-or-nothing, the log start offset lies between the two states', every
   partition passes :func:`verify_paths`; then a retention pass and a forced clean run and must
   succeed without bringing anything back.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from kill_workloads import DELETE_DELAY_MS, JOB_TOPIC, T0, TXN_LOG_TOPICS, TXN_TOPIC, WORKLOADS, Env, open_manager

from tidelog.manager import LogManager
from tidelog.records import iter_batches
from tidelog.storage import fileops, files
from tidelog.storage.commit_log import default_staging_root
from tidelog.storage.fetch_info import FetchIsolation
from tidelog.storage.fileops import FaultRule
from tidelog.storage.staging_dirs import candidates
from tidelog.storage.verify import verify_paths
from tidelog.testing import FakeClock

DEFAULT_SEED = 20261122
RERUN_ENV = "TIDELOG_KILL_POINTS"  # "workload:n:before,workload:n:after": exactly these points
SEED_ENV = "TIDELOG_KILL_SEED"

When = Literal["before", "after"]
State = dict[str, Any]  # {"topics": [...], "parts": {"t-0": {"lso", "leo", "recs": {off: hash}, "bases"}}}

CHILD_TIMEOUT_S = 120


# --- running a workload ----------------------------------------------------------------------------

def read_state(manager: LogManager) -> State:
    """Every live partition read back through ``Log.read`` (reads only; lazily opened indexes may
    be created, which the counting run sees too)."""
    parts = {}
    for tp, lg in manager.logs():
        recs: dict[int, str] = {}
        offset = lg.log_start_offset
        while offset < lg.log_end_offset:
            info = lg.read(offset, 1 << 20, FetchIsolation.LOG_END)
            found = [b for _, b in iter_batches(info.records)]
            if not found:
                break
            for b in found:
                for r in b.records():
                    if r.offset >= offset:
                        recs[r.offset] = _digest(r.key, r.value)
            offset = found[-1].next_offset
        parts[str(tp)] = {"lso": lg.log_start_offset, "leo": lg.log_end_offset, "recs": recs,
                          "bases": [s.base_offset for s in lg.segments]}
        if tp.topic == TXN_TOPIC or tp.topic in TXN_LOG_TOPICS:
            parts[str(tp)]["aborted"] = [[t.producer_id, t.first_offset, t.last_offset, t.last_stable_offset]
                                         for t in lg.collect_aborted_transactions(lg.log_start_offset, lg.log_end_offset)]
        if tp.topic in TXN_LOG_TOPICS:
            parts[str(tp)]["stable"] = lg.last_stable_offset
            parts[str(tp)]["open"] = [[t.producer_id, t.first_offset] for t in lg.ongoing_transactions()]
    return {"topics": manager.topics(), "parts": parts,
            "configs": {t: manager.topic_overrides(t) for t in manager.topics()}}


def _digest(key: bytes | None, value: bytes | None) -> str:
    h = hashlib.blake2b(digest_size=6)
    for part in (key, value):
        h.update(b"\x00" if part is None else b"\x01" + len(part).to_bytes(4, "big") + part)
    return h.hexdigest()


def run_workload(name: str, root: Path, emit: Callable[[dict[str, Any]], None]) -> None:
    """Run workload ``name`` in ``root``: emits ``{"begin": i}`` before step i and
    ``{"state": i, ...}`` after it (state -1: the empty start)."""
    clock = FakeClock(T0)
    manager = open_manager(root, clock)
    env = Env(manager, clock, root)
    state = read_state(manager)
    emit({"state": -1, **state})
    for i, (_, step) in enumerate(WORKLOADS[name]()):
        emit({"begin": i})
        step(env)
        if not env.manager._closed:  # after a shutdown step the files hold the last state read
            state = read_state(env.manager)
        emit({"state": i, **state})
    if not env.manager._closed:
        env.manager.shutdown()


# --- the counting run and kill points --------------------------------------------------------------

@dataclass
class Plan:
    """What the counting run of one workload found."""

    workload: str
    ops: int  # disk-changing file operations
    step_of_op: list[int]  # step in flight at each op (-1: opening)
    states: dict[int, State]
    step_names: list[str]
    op_kinds: dict[str, int]


def counting_run(name: str, root: Path) -> Plan:
    rule = FaultRule(ops=fileops.WRITE_OPS)  # counts only
    step_of_op: list[int] = []
    states: dict[int, State] = {}
    current = [-1]

    with fileops.inject(rule) as stats:
        def emit(line: dict[str, Any]) -> None:
            step_of_op.extend([current[0]] * (stats.matched[0] - len(step_of_op)))
            if "begin" in line:
                current[0] = line["begin"]
            else:
                current[0] = line["state"]
                states[line["state"]] = _normalise(line)
        run_workload(name, root, emit)
        step_of_op.extend([current[0]] * (stats.matched[0] - len(step_of_op)))
    names = [n for n, _ in WORKLOADS[name]()]
    kinds = {op.value: count for op, count in stats.ops.items() if op in fileops.WRITE_OPS}
    return Plan(name, stats.matched[0], step_of_op, states, names, kinds)


def _normalise(line: dict[str, Any]) -> State:
    """JSON round trip turns offsets into strings; make them ints again."""
    state = json.loads(json.dumps(line))
    for part in state.get("parts", {}).values():
        part["recs"] = {int(k): v for k, v in part["recs"].items()}
    return state


@dataclass(frozen=True)
class KillPoint:
    workload: str
    op: int
    when: When

    def __str__(self) -> str:
        return f"{self.workload}:{self.op}:{self.when}"

    @classmethod
    def parse(cls, text: str) -> KillPoint:
        workload, op, when = text.strip().split(":")
        if when not in ("before", "after"):
            raise ValueError(f"kill point {text!r}: expected workload:op:before|after")
        return cls(workload, int(op), when)  # type: ignore[arg-type]


@dataclass
class Outcome:
    point: KillPoint
    killed_in_step: int  # the step in flight at the kill (or the last state reached)
    recovery_s: float
    lost: int = 0
    resurrected: int = 0
    problems: list[str] = field(default_factory=list)


def run_in_killed_child(point: KillPoint, root: Path) -> list[dict[str, Any]]:
    """Fork; the child runs the workload until the rule kills it; returns the lines it wrote.

    Raises AssertionError if the child was not killed by SIGKILL (it failed, or ran past op n)."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child; it never returns
        os.close(read_end)
        code = 3
        try:
            signal.alarm(CHILD_TIMEOUT_S)  # a hung child dies of SIGALRM, which the parent reports
            fileops.clear()
            fileops.install([FaultRule(ops=fileops.WRITE_OPS, kill=point.when, skip=point.op, times=1)])
            run_workload(point.workload, root, lambda line: _send(write_end, line))
            code = 0
        except BaseException:  # noqa: BLE001 - reported to the parent through the pipe
            _send(write_end, {"error": traceback.format_exc()})
        finally:
            os._exit(code)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        data = pipe.read()
    _, status = os.waitpid(pid, 0)
    lines = [json.loads(line) for line in data.splitlines()]
    errors = [line["error"] for line in lines if "error" in line]
    if errors or not (os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL):
        raise AssertionError(f"kill point {point}: child was not killed at the op (status {status}): {errors}")
    return lines


def _send(fd: int, line: dict[str, Any]) -> None:
    data = memoryview(json.dumps(line, separators=(",", ":")).encode() + b"\n")
    while data:
        data = data[os.write(fd, data):]


def check_kill_point(point: KillPoint, plan: Plan, root: Path) -> Outcome:
    """Run ``point`` in ``root`` (an empty dir), reopen, check; the outcome lists every problem."""
    lines = run_in_killed_child(point, root)
    step, after_state = _position(lines)
    expected_step = plan.step_of_op[point.op] if point.op < len(plan.step_of_op) else None
    before = plan.states[step - 1] if not after_state else plan.states[step]
    after = plan.states[step]
    clock = FakeClock(T0 + 10**9)
    started = time.perf_counter()
    manager = open_manager(root, clock)
    outcome = Outcome(point, step, time.perf_counter() - started)
    if expected_step is not None and expected_step != step:
        outcome.problems.append(f"not deterministic: op {point.op} is in step {expected_step} of the counting run, "
                                f"the child was in step {step}")
    try:
        got = read_state(manager)
        _compare(outcome, before, after, got, grouped=plan.step_names[step].startswith("clean"))
        if plan.step_names[step].startswith("commit"):
            check_job_atomic(outcome, before, after, got)
        _resume(outcome, manager, clock, got)
    finally:
        manager.shutdown()
    outcome.problems += [str(p) for p in verify_paths([root / "logs"]).problems]
    outcome.problems += [f"left behind after the restart and one pass: {p.relative_to(root)}"
                         for p in leftovers(root / "logs")]
    outcome.problems += [f"staging left behind after the restart: {key}"
                         for key, _ in candidates(default_staging_root(root / "logs"))]
    return outcome


def leftovers(log_dir: Path) -> list[Path]:
    """Segment scratch files and ``-delete`` dirs an interrupted operation leaves, still there once
    a restart, a retention pass, a clean and ``file.delete.delay.ms`` have gone by (none may be).
    Not the ``<file>.tmp`` of an atomic write killed before its rename: harmless by design (never
    read; the next write of that file truncates it), as in Kafka."""
    scratch = (files.CLEANED_SUFFIX, files.SWAP_SUFFIX, files.DELETED_SUFFIX)
    return sorted(p for p in log_dir.rglob("*") if p.name.endswith(scratch) or
                  (p.is_dir() and p.name.endswith(files.DELETE_DIR_SUFFIX)))


def _position(lines: list[dict[str, Any]]) -> tuple[int, bool]:
    """(step, whether its state was reached) of the last line the child wrote."""
    last = lines[-1] if lines else {"state": -1}
    return (last["state"], True) if "state" in last else (last["begin"], False)


# --- checks ----------------------------------------------------------------------------------------

def _compare(outcome: Outcome, before: State, after: State, got: State, *, grouped: bool) -> None:
    for tp in sorted(set(before.get("parts", {})) | set(after.get("parts", {})) | set(got["parts"])):
        b, a, g = (s.get("parts", {}).get(tp) for s in (before, after, got))
        compare_partition(outcome, tp, b, a, g, grouped=grouped)
    for topic in sorted(set(got["topics"]) - set(before.get("topics", [])) - set(after.get("topics", []))):
        outcome.problems.append(f"topic {topic} exists in neither state")
    for topic, configs in got.get("configs", {}).items():  # never the defaults instead of what was set
        known = [s["configs"][topic] for s in (before, after) if topic in s.get("configs", {})]
        if known and configs not in known:
            outcome.problems.append(f"topic {topic}: configs {configs} are those of neither state {known}")


def check_job_atomic(outcome: Outcome, before: State, after: State, got: State) -> None:
    """A job's partitions show all of it or none of it, the same choice for every partition."""
    parts = sorted(tp for tp in after.get("parts", {}) if tp.startswith(f"{JOB_TOPIC}-"))
    picks = set()
    for tp in parts:
        g = got["parts"].get(tp, {"recs": {}})["recs"]
        b = before.get("parts", {}).get(tp, {"recs": {}})["recs"]
        a = after["parts"][tp]["recs"]
        picks.add("none" if g == b else "all" if g == a else "part")
    if picks - {"none", "all"} or len(picks) > 1:
        outcome.problems.append(f"a job is partly visible after the restart: {sorted(picks)} over {parts}")


def compare_partition(outcome: Outcome, tp: str, b: dict | None, a: dict | None, g: dict | None, *,
                       grouped: bool) -> None:
    if g is None:
        if b is not None and a is not None:
            outcome.lost += len(set(b["recs"]) & set(a["recs"]))
            outcome.problems.append(f"{tp}: partition is gone, but it exists before and after the step")
        return
    if b is None and a is None:
        outcome.resurrected += len(g["recs"])
        outcome.problems.append(f"{tp}: partition exists in neither state (a deleted topic came back?)")
        return
    b_recs, a_recs = (b or {"recs": {}})["recs"], (a or {"recs": {}})["recs"]
    lost = [o for o, h in b_recs.items() if a_recs.get(o) == h and g["recs"].get(o) != h] if b and a else []
    back = [o for o, h in g["recs"].items() if b_recs.get(o) != h and a_recs.get(o) != h]
    outcome.lost += len(lost)
    outcome.resurrected += len(back)
    if lost:
        outcome.problems.append(f"{tp}: {len(lost)} records lost, offsets {lost[:10]}")
    if back:
        outcome.problems.append(f"{tp}: {len(back)} records present in neither state, offsets {back[:10]}")
    low = min(s["lso"] for s in (b, a) if s)
    high = max(s["lso"] for s in (b, a) if s)
    if not low <= g["lso"] <= high:
        outcome.problems.append(f"{tp}: log start offset {g['lso']} outside [{low}, {high}]")
    if grouped and b and a:
        _check_groups(outcome, tp, b, a, g)
    for key, what in (("aborted", "aborted transactions"), ("stable", "last stable offset"),
                      ("open", "open transactions")):
        if key == "aborted" and grouped:
            continue  # not compared: a half-done clean shows some groups cleaned, some not (records: _check_groups)
        if key in g and g[key] not in [s.get(key) for s in (b, a) if s]:
            outcome.problems.append(f"{tp}: {what} {g[key]} are those of neither state")


def _check_groups(outcome: Outcome, tp: str, b: dict, a: dict, g: dict) -> None:
    """A clean swaps each group all-or-nothing: within each segment of the cleaned log, the
    records are those before the clean or those after it, not a mix."""
    bounds = a["bases"] + [a["leo"]]
    for low, high in zip(bounds, bounds[1:]):
        pick = {o: h for o, h in g["recs"].items() if low <= o < high}
        old = {o: h for o, h in b["recs"].items() if low <= o < high}
        new = {o: h for o, h in a["recs"].items() if low <= o < high}
        if pick != old and pick != new:
            outcome.problems.append(f"{tp}: offsets [{low}, {high}) are neither the group before nor after the swap")


def _resume(outcome: Outcome, manager: LogManager, clock: FakeClock, got: State) -> None:
    """A retention pass and a forced clean of every compacted partition run and lose nothing that
    should stay, nor bring anything back."""
    try:
        manager.run_retention()
        if manager.cleaner is not None:
            for tp, lg in manager.logs():
                if lg.config.compact:
                    manager.cleaner.clean_now(tp, force=True)
        clock.advance(DELETE_DELAY_MS + 1)
        manager.checkpoint_recovery_points()
        manager.checkpoint_log_start_offsets()
    except Exception as e:  # noqa: BLE001 - recorded as a problem of this kill point
        outcome.problems.append(f"retention or cleaning after the restart failed: {e!r}")
        return
    again = read_state(manager)
    for tp, part in again["parts"].items():
        old = got["parts"].get(tp, {"recs": {}})["recs"]
        back = [o for o, h in part["recs"].items() if old.get(o) != h]
        if back:
            outcome.resurrected += len(back)
            outcome.problems.append(f"{tp}: the pass after the restart brought back offsets {back[:10]}")


# --- choosing kill points --------------------------------------------------------------------------

def all_points(plan: Plan) -> Iterator[KillPoint]:
    for op in range(plan.ops):
        for when in ("before", "after"):
            yield KillPoint(plan.workload, op, when)  # type: ignore[arg-type]


def sample_points(plan: Plan, count: int, seed: int) -> list[KillPoint]:
    import random
    points = list(all_points(plan))
    rng = random.Random(f"{seed}:{plan.workload}")
    return sorted(rng.sample(points, min(count, len(points))), key=lambda p: (p.op, p.when))


def chosen_points(plan: Plan) -> list[KillPoint] | None:
    """The points named in :data:`RERUN_ENV` for this workload, or None when it is unset."""
    text = os.environ.get(RERUN_ENV, "").strip()
    if not text:
        return None
    return [p for p in map(KillPoint.parse, text.split(",")) if p.workload == plan.workload]


def seed() -> int:
    return int(os.environ.get(SEED_ENV, DEFAULT_SEED))


# --- running many points and reporting -------------------------------------------------------------

class Summary:
    """Outcomes of a test's kill points; :meth:`line` is the figure the issue asks for."""

    def __init__(self) -> None:
        self.outcomes: list[Outcome] = []

    def line(self, label: str) -> str:
        survived = sum(1 for o in self.outcomes if not o.problems)
        lost = sum(o.lost for o in self.outcomes)
        back = sum(o.resurrected for o in self.outcomes)
        worst = max((o.recovery_s for o in self.outcomes), default=0.0)
        return (f"{label}: survived {survived}/{len(self.outcomes)}, records lost {lost}, "
                f"resurrected records {back}, max recovery time {worst * 1000:.0f} ms")


def run_points(plan: Plan, points: list[KillPoint], new_root: Callable[[], Path], summary: Summary,
               test_file: str) -> None:
    """Check every point (each in a fresh dir); AssertionError naming the failures and the rerun command."""
    failed: list[Outcome] = []
    for point in points:
        outcome = check_kill_point(point, plan, new_root())
        summary.outcomes.append(outcome)
        if outcome.problems:
            failed.append(outcome)
    assert not failed, _report(plan, failed, len(points), test_file)


def _report(plan: Plan, failed: list[Outcome], total: int, test_file: str) -> str:
    lines = [f"{len(failed)} of {total} kill points of workload {plan.workload!r} failed (seed {seed()}):"]
    for outcome in failed[:8]:
        step = plan.step_names[outcome.killed_in_step] if outcome.killed_in_step >= 0 else "opening"
        lines.append(f"  {outcome.point} killed in step {outcome.killed_in_step} ({step}):")
        lines += [f"    {problem}" for problem in outcome.problems[:6]]
    points = ",".join(str(o.point) for o in failed[:8])
    rel = Path(test_file).name
    lines.append(f"rerun: {RERUN_ENV}={points} PYTHONPATH=src .venv/bin/python -m pytest -q -p no:cacheprovider "
                 f"tests/reliability/{rel} -m 'soak or not soak' -k {plan.workload}")
    return "\n".join(lines)

