"""The crash run: epochs of client load on ``tidelog serve``, each ended by a SIGKILL, checked after
every restart. ``python -m reliability.crash --seed S --kills N [--minutes M]``.

One epoch: connect clients, start the kill plan's :class:`~reliability.triggers.Killer`, run the
workload until the broker is down; then, with the broker down, ``tidelog verify`` over the data dir
(every segment but each partition's last, which a kill may leave with a partial batch that
recovery cuts); restart (the next plan's fault rule armed, if any), time restart → Metadata
answered, read every partition back and check it against the ledger, and check that no deleted
topic came back (in Metadata or as a partition dir). Every ``resume_every`` kills, and at the end,
the cleaner and retention must make progress within :data:`RESUME_BOUND_S`. At the end the broker
stops cleanly and the whole data dir must pass ``verify``.

Reproducible: kill ``i``'s plan and workload come from ``Random(f"{seed}/{i}")``, so the same
seed replays the same schedule (the exact moment a kill lands still depends on timing). A failure
names the seed and kill index and the command that replays up to it.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import random
import shutil
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from kafka import TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType

from reliability.broker import BrokerDied, ServeProcess
from reliability.ledger import Ledger, Violation
from reliability.triggers import KINDS, Killer, KillPlan
from reliability.workload import PARTITIONS, BrokerGone, Clients, ReadIncomplete, Workload, read_partition
from tidelog.storage import files
from tidelog.storage.checkpoints import CLEANER_OFFSET_CHECKPOINT_FILE, OffsetCheckpointFile
from tidelog.storage.verify import verify_paths

RESUME_BOUND_S = 20.0
EPOCH_LIMIT_S = 30.0  # a killer always fires well within this; past it the run is stuck


@dataclass
class Summary:
    seed: int
    kills_planned: int
    kills: int = 0
    planned_kinds: Counter[str] = field(default_factory=Counter)
    fired_by: Counter[str] = field(default_factory=Counter)
    acknowledged: int = 0
    violations: list[Violation] = field(default_factory=list)
    recovery_s: list[float] = field(default_factory=list)  # restart -> Metadata answered, wall clock
    recovery_cpu_s: list[float] = field(default_factory=list)  # the broker's CPU until then (load-independent)
    killed_early: int = 0  # fault rules that fired during recovery or the checks after it
    resume_checks: int = 0
    client_errors: int = 0
    steps: int = 0
    verified_files: int = 0
    last_client_errors: list[str] = field(default_factory=list)
    kinds_option: str = ""  # " --kinds a,b" when the run drew from some kinds only
    elapsed_s: float = 0.0

    def count(self, kind: str) -> int:
        return sum(1 for v in self.violations if v.kind == kind)

    @property
    def ok(self) -> bool:
        return not self.violations

    def line(self) -> str:
        return (f"crash seed={self.seed}: {self.kills + self.killed_early} kill points survived"
                f" ({', '.join(f'{k} {n}' for k, n in sorted(self.fired_by.items()))},"
                f" fault rules during recovery or the checks {self.killed_early}); {self.acknowledged} records acknowledged,"
                f" {self.count('lost')} lost, {self.count('resurrected')} resurrected,"
                f" {len(self.violations)} violation(s); max recovery {max(self.recovery_s, default=0):.2f} s"
                f" (median {_median(self.recovery_s):.2f} s; CPU max {max(self.recovery_cpu_s, default=0):.2f} s,"
                f" median {_median(self.recovery_cpu_s):.2f} s);"
                f" {self.resume_checks} resume checks; {self.steps} client steps, {self.client_errors} client errors;"
                f" {self.verified_files} files verified; {self.elapsed_s:.0f} s")


class CrashFailure(AssertionError):
    def __init__(self, summary: Summary, kill_index: int, violations: list[Violation]) -> None:
        shown = "\n  ".join(str(v) for v in violations[:20])
        more = f"\n  ... and {len(violations) - 20} more" if len(violations) > 20 else ""
        super().__init__(
            f"seed {summary.seed}, kill {kill_index}: {len(violations)} violation(s)\n  {shown}{more}\n"
            f"reproduce: python -m reliability.crash --seed {summary.seed} --kills {kill_index + 1}{summary.kinds_option}\n"
            f"{summary.line()}")
        self.summary = summary
        self.kill_index = kill_index


def faults_available() -> bool:
    """True once ``tidelog.storage.fileops`` (TIDELOG_FAULTS kill points) exists."""
    return importlib.util.find_spec("tidelog.storage.fileops") is not None


class CrashRun:
    """One seeded run over ``work_dir/data`` (see the module docstring); :meth:`run` returns the
    :class:`Summary` or raises :class:`CrashFailure` at the first kill with a violation."""

    def __init__(self, seed: int, kills: int, work_dir: Path, minutes: float | None = None,
                 resume_every: int = 0, fail_fast: bool = True, progress: bool = False,
                 kinds: tuple[str, ...] = (), _after_kill: Callable[[Path, int], None] | None = None) -> None:
        self.kinds = kinds
        self.progress = progress
        self._after_kill = _after_kill  # test seam: damage the data dir between kill and restart
        self.seed = seed
        self.kills = kills
        self.deadline = None if minutes is None else time.monotonic() + minutes * 60
        self.resume_every = resume_every
        self.fail_fast = fail_fast
        self.data_dir = work_dir / "data"
        self.broker = ServeProcess(self.data_dir)
        self.ledger = Ledger()
        self.workload = Workload(self.ledger, lambda: self.broker.running)
        self.summary = Summary(seed, kills, kinds_option=f" --kinds {','.join(kinds)}" if kinds else "")
        self.faults = faults_available()
        self.began = time.monotonic()
        self._fault_spent = False

    def run(self) -> Summary:
        self.began = time.monotonic()
        self.broker.start()
        try:
            clients = Clients.connect(self.broker.bootstrap)
            self.workload.create_topics(clients)
            clients.close()  # a producer made before the topics existed waits out its metadata backoff
            clients = Clients.connect(self.broker.bootstrap)
            for index in range(self.kills):
                if self.deadline is not None and time.monotonic() > self.deadline:
                    break
                clients = self._epoch(index, clients)
            self._finish(clients)
        finally:
            if self.broker.running:
                self.broker.kill()
            self._tally()
        return self.summary

    def _tally(self) -> None:
        self.summary.elapsed_s = time.monotonic() - self.began
        self.summary.acknowledged = self.ledger.acknowledged_count
        self.summary.client_errors = self.workload.client_errors
        self.summary.steps = self.workload.steps
        self.summary.last_client_errors = self.workload.last_errors

    # --- one kill ----------------------------------------------------------------------------------

    def _plan(self, index: int) -> KillPlan:
        return KillPlan.draw(random.Random(f"{self.seed}/{index}/plan"), index, self.faults and index > 0, self.kinds)

    def _epoch(self, index: int, clients: Clients) -> Clients:
        plan = self._plan(index)
        if plan.kind == "fault" and self._fault_spent:  # it fired before the epoch: kill at random instead
            plan = dataclasses.replace(plan, kind="random", fault=None)
        self._fault_spent = False
        self.summary.planned_kinds[plan.kind] += 1
        killer = Killer(plan, self.broker, self.data_dir, self.workload.events)
        killer.start()
        rng = random.Random(f"{self.seed}/{index}/workload")
        limit = time.monotonic() + EPOCH_LIMIT_S
        self.workload.run(clients, rng, plan.kind, until=lambda: killer.done.is_set() or time.monotonic() > limit,
                          epoch=index)
        if not killer.wait(EPOCH_LIMIT_S):
            self.broker.kill()
            raise CrashFailure(self.summary, index, [Violation("stuck", None, None, "the killer never fired")])
        clients.close()
        self.ledger.sends_unknown()
        self.summary.kills += 1
        self.summary.fired_by[killer.fired_by] += 1
        found = self._exit_violations() + self._verify_sealed()
        if self._after_kill is not None:
            self._after_kill(self.data_dir, index)
        clients, checked = self._restart_and_check(index)
        found += self.workload.violations + checked
        self.workload.violations.clear()
        self._record(index, found)
        if self.progress:
            print(f"kill {index}: {plan.kind} fired by {killer.fired_by!r}; {self.workload.steps} steps,"
                  f" {self.ledger.acknowledged_count} acknowledged, recovery {self.summary.recovery_s[-1]:.2f} s"
                  f" ({self.summary.recovery_cpu_s[-1]:.2f} s CPU)",
                  file=sys.stderr)
        return clients

    def _exit_violations(self) -> list[Violation]:
        code = self.broker.exit_code()
        if code in (-9, None):
            return []
        return [Violation("broker-died", None, None, f"exit code {code} before the kill:\n{self.broker.tail()}")]

    def _restart_and_check(self, index: int) -> tuple[Clients, list[Violation]]:
        """Restart with the next plan's fault rule armed, then read everything back. A rule that
        fires before that is done is one more kill point (during recovery or the checks): the data
        dir is verified and the broker restarted without the rule."""
        plan = self._plan(index + 1) if index + 1 < self.kills else None
        env = plan.fault_env() if plan else {}
        while True:
            clients = None
            try:
                self._start_and_time(env)
                clients = Clients.connect(self.broker.bootstrap)
                found = self._check_all(clients)
                if self.resume_every and (index + 1) % self.resume_every == 0:
                    found += self._check_resume(clients)
                return clients, found
            except Exception:
                if clients is not None:
                    clients.close()
                if not env or self.broker.running:
                    raise
                self.broker.kill()  # reap it
                self.ledger.sends_unknown()
                self.summary.killed_early += 1
                self._fault_spent = True
                self._record(index, self._exit_violations() + self._verify_sealed())
                env = {}

    def _start_and_time(self, env: dict[str, str]) -> None:
        """Start the broker; record the time (and its CPU) from the start to Metadata answered."""
        began = time.monotonic()
        self.broker.start(env)
        while not self.broker.answers_metadata():
            if not self.broker.running:
                raise BrokerDied(f"tidelog serve exited after start:\n{self.broker.tail()}")
            time.sleep(0.01)
        self.summary.recovery_s.append(time.monotonic() - began)
        self.summary.recovery_cpu_s.append(self.broker.cpu_seconds())

    def _record(self, index: int, found: list[Violation]) -> None:
        self.summary.violations += found
        if found and self.fail_fast:
            self._tally()
            raise CrashFailure(self.summary, index, found)

    # --- checks ------------------------------------------------------------------------------------

    def _verify_sealed(self) -> list[Violation]:
        """``verify`` with the broker down: only each partition's last segment may have a torn tail."""
        report = verify_paths([self.data_dir])
        self.summary.verified_files += report.files_checked
        last = _last_segments(self.data_dir)
        return [Violation("verify", None, p.position, str(p)) for p in report.problems
                if (p.path.parent.name, files.offset_from_file_name(p.path.name)) not in last]

    def _check_all(self, clients: Clients) -> list[Violation]:
        found = self._check_topics(clients)
        for tp in sorted(self.ledger.partitions):
            read = self._read(clients, tp)
            found += self.ledger.check(read)
            self.ledger.observe(read)
        return found

    def _read(self, clients: Clients, tp: tuple[str, int]):  # noqa: ANN202 - a Read
        for attempt in range(3):
            try:
                return read_partition(clients, tp, lambda: self.broker.running)
            except ReadIncomplete:
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def _check_topics(self, clients: Clients) -> list[Violation]:
        topics = set(clients.admin.list_topics())
        for name in list(self.ledger.deleting):
            if name not in topics:
                self.ledger.topic_deleted(name)  # the unanswered delete had happened
            else:
                self.ledger.deleting.discard(name)  # it had not: the topic lives on, as any other
        found = [Violation("topic-resurrected", None, None, f"deleted topic {name} is in Metadata")
                 for name in sorted(topics & self.ledger.deleted_topics)]
        for path in self.data_dir.iterdir():
            if not path.is_dir() or files.is_renamed_partition_dir(path.name):
                continue
            topic, _, partition = path.name.rpartition("-")
            if partition.isdigit() and topic in self.ledger.deleted_topics:
                found.append(Violation("topic-resurrected", None, None, f"partition dir {path.name} of a deleted topic"))
        return found

    def _check_resume(self, clients: Clients) -> list[Violation]:
        """The cleaner and retention make progress after a restart: fresh overwrites get cleaned
        (cleaner checkpoint advances) and retention moves the log start of a partition over its
        ``retention.bytes``, both within :data:`RESUME_BOUND_S`."""
        self.summary.resume_checks += 1
        resource = ConfigResource(ConfigResourceType.TOPIC, "retained",
                                  configs={"retention.bytes": "4096", "retention.ms": "-1"})
        clients.admin.alter_configs([resource])
        before_clean = self._cleaner_checkpoint()
        before_start = self._log_starts(clients)
        rng = random.Random(f"{self.seed}/resume/{self.summary.kills}")
        try:
            for _ in range(6):
                self.workload.overwrite(clients, rng, "resume")
            for p in range(PARTITIONS):
                for _ in range(4):
                    self.workload._send(clients, [(("retained", p), None, self.workload._value(("retained", p), 400))
                                                  for _ in range(10)])
        except BrokerGone:
            if self.broker.exit_code() == -9:
                raise  # a fault rule's kill point: the caller restarts
            return [Violation("resume", None, None, f"broker died:\n{self.broker.tail()}")]
        deadline = time.monotonic() + RESUME_BOUND_S
        cleaned = retained = False
        while time.monotonic() < deadline and not (cleaned and retained):
            now_clean = self._cleaner_checkpoint()
            cleaned = all(now_clean.get(("compacted", p), -1) > before_clean.get(("compacted", p), -1)
                          for p in range(PARTITIONS))
            now_start = self._log_starts(clients)
            retained = all(now_start[p] > before_start[p] for p in range(PARTITIONS))
            time.sleep(0.1)
        found = []
        if not cleaned:
            found.append(Violation("resume", None, None, f"cleaner checkpoint did not advance in {RESUME_BOUND_S} s "
                                                         f"(before {before_clean}, now {self._cleaner_checkpoint()})"))
        if not retained:
            found.append(Violation("resume", None, None, f"retention did not move the log start of 'retained' in "
                                                         f"{RESUME_BOUND_S} s (before {before_start})"))
        return found

    def _cleaner_checkpoint(self) -> dict[tuple[str, int], int]:
        path = self.data_dir / CLEANER_OFFSET_CHECKPOINT_FILE
        if not path.exists():
            return {}
        return {(tp.topic, tp.partition): offset for tp, offset in OffsetCheckpointFile(path).read().items()}

    def _log_starts(self, clients: Clients) -> list[int]:
        tps = [TopicPartition("retained", p) for p in range(PARTITIONS)]
        found = clients.consumer.beginning_offsets(tps)
        for tp in tps:
            self.ledger.start_at_least((tp.topic, tp.partition), found[tp])
        return [found[tp] for tp in tps]

    # --- the end -----------------------------------------------------------------------------------

    def _finish(self, clients: Clients) -> None:
        found = self._check_resume(clients)
        clients.close()
        code = self.broker.stop()
        if code != 0:
            found.append(Violation("broker-died", None, None, f"clean stop exited {code}:\n{self.broker.tail()}"))
        report = verify_paths([self.data_dir])
        self.summary.verified_files += report.files_checked
        found += [Violation("verify", None, p.position, str(p)) for p in report.problems]
        self._record(self.summary.kills, found)


def _median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2] if values else 0.0


def _last_segments(data_dir: Path) -> set[tuple[str, int]]:
    """(partition dir name, base offset) of each partition dir's last segment."""
    last = set()
    for path in data_dir.iterdir():
        if path.is_dir():
            bases = [files.offset_from_file_name(f.name) for f in path.iterdir() if f.name.endswith(files.LOG_SUFFIX)]
            if bases:
                last.add((path.name, max(bases)))
    return last


def run(seed: int, kills: int, minutes: float | None = None, work_dir: Path | None = None, resume_every: int = 0,
        fail_fast: bool = True, progress: bool = False, kinds: tuple[str, ...] = ()) -> Summary:
    """One crash run in ``work_dir`` (a temporary dir, removed afterwards, when not given)."""
    if work_dir is not None:
        work_dir.mkdir(parents=True, exist_ok=True)
        return CrashRun(seed, kills, work_dir, minutes, resume_every, fail_fast, progress, kinds).run()
    tmp = Path(tempfile.mkdtemp(prefix="tidelog-crash-"))
    try:
        summary = CrashRun(seed, kills, tmp, minutes, resume_every, fail_fast, progress, kinds).run()
    except BaseException:
        print(f"data dir kept for inspection: {tmp}", file=sys.stderr)
        raise
    shutil.rmtree(tmp, ignore_errors=True)
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m reliability.crash", description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--minutes", type=float, default=None, help="stop after this long even if kills remain")
    parser.add_argument("--resume-every", type=int, default=5, help="check cleaner/retention progress every N kills")
    parser.add_argument("--work-dir", type=Path, default=None, help="keep the data dir and serve.log here")
    parser.add_argument("--keep-going", action="store_true", help="collect violations instead of stopping at the first kill with one")
    parser.add_argument("--progress", action="store_true", help="one line per kill on stderr")
    parser.add_argument("--kinds", default="", help=f"comma-separated kill kinds to draw from ({', '.join(KINDS)}, fault)")
    args = parser.parse_args(argv)
    try:
        summary = run(args.seed, args.kills, args.minutes, args.work_dir, args.resume_every, not args.keep_going,
                      args.progress, tuple(k for k in args.kinds.split(",") if k))
    except CrashFailure as e:
        print(e, file=sys.stderr)
        return 1
    for v in summary.violations:
        print(v, file=sys.stderr)
    for error in summary.last_client_errors:
        print(f"client error: {error}", file=sys.stderr)
    print(summary.line())
    return 0 if summary.ok else 1


if __name__ == "__main__":
    sys.exit(main())
