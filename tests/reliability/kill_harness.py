"""Kill points: a library-level workload killed with SIGKILL at its Nth file operation, reopened,
and checked against what it had reached (issue 8, item 1; ``docs/crash-consistency.md``).

Method
------
1. A *workload* is a list of steps (appends, flushes, checkpoints, retention, DeleteRecords, a
   clean, a topic deletion, clock advances that run the delayed unlinks) on a :class:`LogManager`
   driven by a :class:`FakeClock`. After each step it reads every partition back and emits the
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

import dataclasses
import errno
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

from manager_helpers import crash  # a killed process's stop, shared with the manager tests

from tidelog.manager import LogManager
from tidelog.manager.staged_commit import Committer, Job, StagedReader
from tidelog.records import BatchBuilder, iter_batches
from tidelog.records.control import build_end_txn_marker_batch
from tidelog.storage import fileops, files
from tidelog.storage.commit_log import default_staging_root
from tidelog.storage.config import BrokerConfig
from tidelog.storage.fetch_info import FetchIsolation
from tidelog.storage.fileops import FaultRule
from tidelog.storage.staging_dirs import candidates, job_dir, process_lease, remove_job_dir, stage_batches
from tidelog.storage.txn_index import AbortedTxn
from tidelog.storage.verify import verify_paths
from tidelog.testing import FakeClock, FakeScheduler
from tidelog.topic_partition import TopicPartition

T0 = 1_700_000_000_000
DEFAULT_SEED = 20261122
RERUN_ENV = "TIDELOG_KILL_POINTS"  # "workload:n:before,workload:n:after": exactly these points
SEED_ENV = "TIDELOG_KILL_SEED"

When = Literal["before", "after"]
State = dict[str, Any]  # {"topics": [...], "parts": {"t-0": {"lso", "leo", "recs": {off: hash}, "bases"}}}

BROKER = {
    "log.segment.bytes": "700",
    "log.cleaner.dedupe.buffer.size": str(1 << 20),
    "log.initial.task.delay.ms": "0",
    "log.segment.delete.delay.ms": "1000",
    "log.cleaner.min.compaction.lag.ms": "0",
}
DELETE_DELAY_MS = 1000
CHILD_TIMEOUT_S = 120


# --- workloads -----------------------------------------------------------------------------------

@dataclass
class Env:
    """What a workload step may use: the manager, the clock, and deterministic record builders."""

    manager: LogManager
    clock: FakeClock
    root: Path
    counter: int = 0  # distinct values across the run
    staged: dict[str, list[Any]] = field(default_factory=dict)  # job key -> its staged batches

    def append(self, topic: str, count: int, *, partition: int = 0, keys: int | None = None,
               tombstone_every: int = 0) -> None:
        """Append one batch of ``count`` records; keys cycle over ``keys`` distinct ones when given."""
        builder = BatchBuilder(base_offset=0)
        for i in range(count):
            self.counter += 1
            n = self.counter
            key = b"k%d" % (n % keys if keys else n)
            value = None if tombstone_every and n % tombstone_every == 0 else b"v%d-" % n + b"x" * 40
            builder.append(i, self.clock.milliseconds(), key, value)
        self.manager.append(TopicPartition(topic, partition), builder.build())


Step = tuple[str, Callable[[Env], object]]


def _appends(topic: str, batches: int, size: int, **kw: Any) -> list[Step]:
    return [(f"append {topic}", lambda env, t=topic: env.append(t, size, **kw)) for _ in range(batches)]


def _create(topic: str, partitions: int = 1, **configs: str) -> Step:
    return (f"create {topic}", lambda env: env.manager.create_topic(topic, partitions, configs))


def _advance(ms: int) -> Step:
    return (f"advance {ms} ms", lambda env: env.clock.advance(ms))


def _checkpoints(env: Env) -> None:
    env.manager.checkpoint_recovery_points()
    env.manager.checkpoint_log_start_offsets()
    env.manager.checkpoint_high_watermarks()


def _clean(topic: str) -> Step:
    def run(env: Env) -> None:
        cleaner = env.manager.cleaner
        assert cleaner is not None
        cleaner.clean_now(TopicPartition(topic, 0), force=True)
    return (f"clean {topic}", run)


def append_workload() -> list[Step]:
    """Appends with rolls to a ``flush.messages=1`` topic and a page-cache topic, and of batches
    large enough to reserve blocks ahead (``FileRecords.reserve_for``; freed by the roll's trim)
    to a third, flushes, checkpoints, the async flush after a roll, and a clean shutdown."""
    steps = [_create("dur", **{"flush.messages": "1", "segment.bytes": "600"}), _create("pc", **{"segment.bytes": "600"}),
             _create("big", **{"segment.bytes": "12000"})]
    for _ in range(3):
        steps += _appends("dur", 3, 3) + _appends("pc", 3, 4) + _appends("big", 2, 80)  # ~4.6 KB each
        steps += [("flush dirty logs", lambda env: env.manager.flush_dirty_logs()), ("checkpoints", _checkpoints)]
        steps += [_advance(100)]
    steps += [("shutdown", lambda env: env.manager.shutdown())]
    return steps


def retention_workload() -> list[Step]:
    """Time and size retention, DeleteRecords, the log-start-offset pass, and the unlink of
    ``.deleted`` files after ``file.delete.delay.ms``."""
    steps = [_create("ret", **{"segment.bytes": "500", "retention.ms": "5000"})]
    for _ in range(4):
        steps += _appends("ret", 3, 3) + [_advance(2000)]
    steps += [("time retention", lambda env: env.manager.run_retention("ret")), _advance(DELETE_DELAY_MS + 1)]
    steps += _appends("ret", 4, 3)
    steps += [("retention.bytes=1200", lambda env: env.manager.alter_topic_config("ret", {"retention.bytes": "1200"})),
              ("size retention", lambda env: env.manager.run_retention("ret"))]
    steps += [("delete records", lambda env: env.manager.delete_records(
        TopicPartition("ret", 0), env.manager.log(TopicPartition("ret", 0)).log_end_offset - 4))]
    steps += [("checkpoints", _checkpoints), ("log start retention", lambda env: env.manager.run_retention("ret"))]
    steps += [_advance(DELETE_DELAY_MS + 1)] + _appends("ret", 2, 2)
    return steps


def clean_workload() -> list[Step]:
    """Compaction: several passes over a compacted log with tombstones (``.cleaned`` → ``.swap``
    → swap-in → ``.deleted``), each followed by the unlink of the replaced files."""
    topic = {"cleanup.policy": "compact", "segment.bytes": "600", "min.cleanable.dirty.ratio": "0.01",
             "delete.retention.ms": "3000", "segment.index.bytes": "4096"}
    steps = [_create("cmp", **topic)]
    steps += _appends("cmp", 8, 4, keys=7, tombstone_every=9) + [_clean("cmp"), _advance(DELETE_DELAY_MS + 1)]
    steps += _appends("cmp", 6, 4, keys=7, tombstone_every=9) + [_clean("cmp"), _advance(4000)]
    steps += _appends("cmp", 2, 3, keys=7) + [_clean("cmp"), _advance(DELETE_DELAY_MS + 1)]
    return steps


def delete_topic_workload() -> list[Step]:
    """Topic deletion: registry change, ``-delete`` renames, the delayed removal of the dirs."""
    steps = [_create("gone", 2, **{"segment.bytes": "500"}), _create("kept", **{"segment.bytes": "500"})]
    for p in (0, 1):
        steps += [(f"append gone-{p}", lambda env, p=p: env.append("gone", 4, partition=p)) for _ in range(4)]
    steps += _appends("kept", 3, 3)
    steps += [("delete topic gone", lambda env: env.manager.delete_topic("gone")), _advance(DELETE_DELAY_MS + 1)]
    steps += _appends("kept", 2, 3)
    return steps


def restart_workload() -> list[Step]:
    """Kill points inside recovery: unflushed appends, then a crash and a reopen (segment recovery,
    index rebuilds); a clean whose swap fails at a ``.swap`` rename, then a crash and a reopen
    that completes or rolls back the half-done swap."""
    topic = {"cleanup.policy": "compact", "segment.bytes": "600", "min.cleanable.dirty.ratio": "0.01",
             "segment.index.bytes": "4096"}
    steps = [_create("rc", **topic), _create("plain", **{"segment.bytes": "600"})]
    steps += _appends("rc", 6, 4, keys=5) + _appends("plain", 3, 4)
    steps += [("crash and reopen", _crash_and_reopen)]
    steps += _appends("rc", 3, 4, keys=5) + _appends("plain", 1, 4)
    steps += [("clean failing at a swap rename, crash, reopen", _failed_swap_then_restart)]
    steps += [_clean("rc"), _advance(DELETE_DELAY_MS + 1)] + _appends("plain", 2, 4)
    return steps


def _crash_and_reopen(env: Env) -> None:
    crash(env.manager)
    env.manager = open_manager(env.root, env.clock)


def _failed_swap_then_restart(env: Env) -> None:
    """The fifth ``.cleaned`` -> ``.swap`` rename (the second group's) fails (EIO), the process
    dies, the loader finishes the job. What the live manager showed in between is never a state."""
    fail = FaultRule(ops=frozenset({fileops.FileOp.RENAME}), path_glob="*.swap", error=errno.EIO, skip=4, times=1)
    cleaner = env.manager.cleaner
    assert cleaner is not None
    with fileops.inject(fail):
        try:
            cleaner.clean_now(TopicPartition("rc", 0), force=True)
        except Exception:  # noqa: BLE001 - the cleaner may quarantine or raise; either way we crash
            pass
    _crash_and_reopen(env)


JOB_TOPIC = "sj"


def _staging_root(env: Env) -> Path:
    return default_staging_root(env.root / "logs")


def _stage_job(key: str, dead_owner: bool = False) -> Step:
    """Stage a job of two batches per partition of ``sj`` (its owner: this process, or with
    ``dead_owner`` a process that no longer runs: this pid with another start time)."""
    def run(env: Env) -> None:
        lease = process_lease(os.getpid())
        if dead_owner:
            lease = dataclasses.replace(lease, start=(lease.start or 0) - 1)
        batches = []
        for p in range(3):
            for _ in range(2):
                builder = BatchBuilder(base_offset=0)
                for i in range(3):
                    env.counter += 1
                    builder.append(i, env.clock.milliseconds(), b"k%d" % env.counter, b"job-%d" % env.counter)
                batches.append((JOB_TOPIC, p, bytes(builder.build())))
        env.staged[key] = stage_batches(_staging_root(env), key, "part-0.batches", batches, lease)
    return (f"stage {key}{' (owner dead)' if dead_owner else ''}", run)


def _commit_job(key: str) -> Step:
    """Every step of a commit: intent, publish, committed mark, staging removal."""
    def run(env: Env) -> None:
        job = Job(key, str(_staging_root(env)))
        Committer(env.manager, [str(env.root / "logs")], env.clock).commit(job, env.staged[key])
        remove_job_dir(job.staging_root, key)
    return (f"commit {key}", run)


def _commit_dies_then_reopen(key: str) -> Step:
    """A commit killed after its intent and one partition; the reopen completes it (kill points
    inside that roll forward)."""
    def run(env: Env) -> None:
        job = Job(key, str(_staging_root(env)))
        committer = Committer(env.manager, [str(env.root / "logs")], env.clock)
        entry = committer.write_intent(job, env.staged[key])
        with StagedReader(job_dir(job.staging_root, key)) as staged:
            committer.publish_partition(entry, entry["partitions"][0], staged)
        _crash_and_reopen(env)
    return (f"commit {key} dies, reopen", run)


def staged_commit_workload() -> list[Step]:
    """A multi-partition job (the Spark sink's commit): staging, intent, appends to three
    partitions, the committed mark, the staging removal; a commit that dies half-way and the
    reopen that completes it; appends around both. Each ``commit`` step is checked all-or-nothing
    across the job's partitions, and no staging may be left after the reopen."""
    steps = [_create(JOB_TOPIC, 3, **{"segment.bytes": "700"})]
    steps += [(f"append {JOB_TOPIC}-{p}", lambda env, p=p: env.append(JOB_TOPIC, 3, partition=p)) for p in range(3)]
    steps += [_stage_job("job-a"), _commit_job("job-a")]
    steps += [(f"append {JOB_TOPIC}-1", lambda env: env.append(JOB_TOPIC, 2, partition=1))]
    steps += [_stage_job("job-b"), _commit_dies_then_reopen("job-b")]
    steps += [(f"append {JOB_TOPIC}-2", lambda env: env.append(JOB_TOPIC, 2, partition=2))]
    # a restarted streaming driver takes over its killed predecessor's batch dir (lease replaced),
    # then a dead driver's staging is reclaimed by a reopen (renamed away, re-checked, deleted)
    steps += [_stage_job("query-q/batch-1", dead_owner=True), _stage_job("query-q/batch-1"),
              _commit_job("query-q/batch-1")]
    steps += [_stage_job("job-c", dead_owner=True), ("reopen (reclaims job-c)", _crash_and_reopen)]
    return steps


TXN_TOPIC = "tx"  # read_state adds its aborted transactions: what read_committed consumers skip
TAIL_TOPIC = "dt"


def _append_transactions(env: Env) -> None:
    """Two producers' transactional batches, an ABORT and a COMMIT marker, appended as a Kafka
    broker's log holds them, with the ABORT's ``.txnindex`` entry Kafka's producer state writes."""
    lg = env.manager.log(TopicPartition(TXN_TOPIC, 0))
    start, now = lg.log_end_offset, env.clock.milliseconds()
    for offset, pid, kind in ((0, 1, "data"), (1, 2, "data"), (2, 1, "abort"), (3, 2, "data"), (4, 2, "commit")):
        if kind == "data":
            builder = BatchBuilder(base_offset=start + offset, producer_id=pid, producer_epoch=0,
                                   base_sequence=start + offset, is_transactional=True)
            builder.append(start + offset, now, b"t%d" % (start + offset), b"txn-%d" % (start + offset))
            lg.append_as_follower(builder.build())
        else:
            lg.append_as_follower(build_end_txn_marker_batch(
                commit=kind == "commit", producer_id=pid, producer_epoch=0, coordinator_epoch=0,
                base_offset=start + offset, timestamp=now))
        if kind == "abort":  # into the segment holding the marker (a roll may come with the next batch)
            lg.active_segment.txn_index.append(AbortedTxn(1, start, start + 2, start + 1))


def _damage_while_stopped(env: Env) -> None:
    """A clean stop; the active segment of TAIL_TOPIC gets zeros and garbage appended and every
    ``.txnindex`` of TXN_TOPIC is deleted (no file operation of tidelog's: no kill point); the
    reopen after a clean stop recovers the tail and the first read rebuilds the indexes."""
    env.manager.shutdown()
    logs = env.root / "logs"
    active = max((logs / f"{TAIL_TOPIC}-0").glob(f"*{files.LOG_SUFFIX}"))
    with open(active, "ab") as f:
        f.write(bytes(300) + b"\xfe\x01garbage" * 20)
    for path in (logs / f"{TXN_TOPIC}-0").glob(f"*{files.TXN_INDEX_SUFFIX}"):
        path.unlink()
    env.manager = open_manager(env.root, env.clock)


def damaged_files_workload() -> list[Step]:
    """Files damaged while the broker was stopped cleanly: the clean reopen's tail check
    and its recovery of the active segment, the ``.txnindex`` rebuilt from the ABORT markers at the
    first read (``read_state`` asks for the aborted transactions), appends after both."""
    steps = [_create(TAIL_TOPIC, **{"segment.bytes": "600"}), _create(TXN_TOPIC, **{"segment.bytes": "600"})]
    steps += _appends(TAIL_TOPIC, 3, 4) + [("transactions", _append_transactions)] * 3
    steps += [("clean stop, damage, reopen", _damage_while_stopped)]
    steps += _appends(TAIL_TOPIC, 2, 4) + [("transactions", _append_transactions)]
    return steps


WORKLOADS: dict[str, Callable[[], list[Step]]] = {
    "append": append_workload,
    "damaged_files": damaged_files_workload,
    "staged_commit": staged_commit_workload,
    "restart": restart_workload,
    "retention": retention_workload,
    "clean": clean_workload,
    "delete_topic": delete_topic_workload,
}


# --- running a workload ----------------------------------------------------------------------------

def broker_config(root: Path) -> BrokerConfig:
    return BrokerConfig.from_properties({"log.dirs": str(root / "logs"), **BROKER})


def open_manager(root: Path, clock: FakeClock) -> LogManager:
    return LogManager.open(broker_config(root), [root / "logs"], clock=clock, scheduler=FakeScheduler(clock))


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
        if tp.topic == TXN_TOPIC:
            parts[str(tp)]["aborted"] = [[t.producer_id, t.first_offset, t.last_offset, t.last_stable_offset]
                                         for t in lg.collect_aborted_transactions(lg.log_start_offset, lg.log_end_offset)]
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
    if "aborted" in g and g["aborted"] not in [s.get("aborted") for s in (b, a) if s]:
        outcome.problems.append(f"{tp}: aborted transactions {g['aborted']} are those of neither state")


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

