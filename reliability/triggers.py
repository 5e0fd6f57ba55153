"""When to SIGKILL the broker: a seeded :class:`KillPlan` per kill, carried out by :class:`Killer`.

Kinds of kill:

* ``random``: after a random delay under load;
* ``roll``: as soon as a partition dir gains a new ``.log`` (a roll is under way: the old segment's
  indexes trimmed, the new one's files created, the background flush scheduled);
* ``clean``: as soon as a ``.cleaned`` or ``.swap`` file exists (the cleaner's swap protocol), or
  right after the cleaner logs a finished clean (checkpoint write, next pass);
* ``segment-delete``: at a ``.deleted`` file or a ``deleting segments`` / ``log start offset`` log
  line (retention, DeleteRecords, a cleaner swap's leftovers);
* ``topic-delete``: at a ``-delete`` dir or a ``deleted topic`` log line;
* ``after-delete-records``, ``after-topic-deleted``, ``after-config-altered``: within 0.6 s after
  a client got the answer to DeleteRecords, DeleteTopics or AlterConfigs (what was promised must
  hold before any periodic checkpoint runs);
* ``fault``: an exact kill point inside the broker, armed through ``TIDELOG_FAULTS`` (only where
  ``tidelog.storage.fileops`` exists): the broker kills itself at the n-th matching file operation.

An event kind that sees nothing within its window falls back to a kill at the window's end, and
says so (``fired_by``). The disk is polled every millisecond: a scan of a few dozen small dirs.
"""

from __future__ import annotations

import json
import os
import random
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from reliability.broker import ServeProcess

KINDS = ("random", "roll", "clean", "segment-delete", "topic-delete", "after-delete-records", "after-topic-deleted",
         "after-config-altered")
FAULT_OPS = (  # (ops, path glob) of exact kill points: the broker's own writes, renames, fsyncs, unlinks
    (["rename"], "*.swap"), (["rename"], "*.cleaned"), (["rename"], "*.deleted"), (["rename"], "*-delete"),
    (["write"], "*.log"), (["fsync"], "*.log"), (["truncate"], "*.index"), (["rename"], "*checkpoint*"),
    (["unlink"], "*.deleted"), (["write"], "*tidelog-topics.json*"), (["rename"], "*tidelog-topic.json*"),
)
_LOG_EVENTS = {
    "clean": ("cleaner ",),
    "segment-delete": ("deleting segments", "log start offset"),
    "topic-delete": ("deleted topic", "finishing the deletion"),
}


@dataclass(frozen=True, slots=True)
class KillPlan:
    index: int
    kind: str
    delay_s: float  # random: when to kill; events: when to start watching
    window_s: float  # events: watch this long, then kill anyway
    jitter_s: float  # events: wait this long after the event is seen
    fault: dict[str, object] | None = None

    @classmethod
    def draw(cls, rng: random.Random, index: int, faults: bool, only: tuple[str, ...] = ()) -> KillPlan:
        """Kill ``index``'s plan; ``only`` restricts the kinds (a targeted run)."""
        weights = dict(zip(KINDS, (3, 2, 2, 1.5, 1.5, 1, 1, 1)), **({"fault": 3} if faults else {}))
        kinds = [k for k in weights if not only or k in only] or ["random"]
        kind = rng.choices(kinds, [weights[k] for k in kinds])[0]
        fault = None
        if kind == "fault":
            ops, glob = rng.choice(FAULT_OPS)
            frequent = glob == "*.log"  # one write (and with flush.messages=1 one fsync) per produce
            fault = {"ops": ops, "path_glob": glob, "kill": rng.choice(["before", "after"]),
                     "skip": rng.randrange(40 if frequent else 4), "times": 1}
        jitter = rng.uniform(0, 0.6) if kind.startswith("after-") else rng.choice([0.0, 0.0, rng.uniform(0, 0.005)])
        return cls(index, kind, delay_s=rng.uniform(0.05, 1.5) if kind == "random" else rng.uniform(0.0, 0.4),
                   window_s=rng.uniform(2.0, 4.0), jitter_s=jitter, fault=fault)

    def fault_env(self) -> dict[str, str]:
        return {"TIDELOG_FAULTS": json.dumps([self.fault])} if self.fault else {}


@dataclass
class Killer:
    """Carries out one plan in a thread; :attr:`killed_at` is set when the broker is down."""

    plan: KillPlan
    broker: ServeProcess
    data_dir: Path
    client_events: list[str] = field(default_factory=list)  # the workload's answered operations
    fired_by: str = ""
    killed_at: float | None = None
    done: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"killer-{self.plan.index}")
        self._thread.start()

    def _run(self) -> None:
        try:
            self.fired_by = self._wait_for_moment()
            if self.broker.running:
                self.killed_at = self.broker.kill()
            else:  # a fault rule killed it already (or it died on its own: the run reports the exit code)
                self.killed_at = time.monotonic()
                self.broker.kill()
        finally:
            self.done.set()

    def _wait_for_moment(self) -> str:
        plan = self.plan
        time.sleep(plan.delay_s)
        if plan.kind == "random":
            return "random"
        deadline = time.monotonic() + (plan.window_s if plan.kind != "fault" else plan.window_s * 3)
        baseline = _segment_names(self.data_dir)
        first_line = len(self.broker.lines)
        first_event = len(self.client_events)
        while time.monotonic() < deadline:
            if not self.broker.running:
                return "fault" if plan.kind == "fault" else "died"
            if plan.kind != "fault" and self._event_seen(baseline, first_line, first_event):
                time.sleep(plan.jitter_s)
                return plan.kind
            time.sleep(0.001)
        return f"{plan.kind} (window passed)"

    def _event_seen(self, baseline: dict[str, set[str]], first_line: int, first_event: int) -> bool:
        kind = self.plan.kind
        if kind.startswith("after-"):
            return kind.removeprefix("after-") in self.client_events[first_event:]
        words = _LOG_EVENTS.get(kind, ())
        if words and any(w in line for _, line in self.broker.lines[first_line:] for w in words):
            return True
        for dir_name, names in _scan(self.data_dir):
            if kind == "topic-delete" and dir_name.endswith("-delete"):
                return True
            if kind == "clean" and any(n.endswith((".cleaned", ".swap")) for n in names):
                return True
            if kind == "segment-delete" and any(n.endswith(".deleted") for n in names):
                return True
            if kind == "roll" and dir_name in baseline and any(
                    n.endswith(".log") and n not in baseline[dir_name] for n in names):
                return True
        return False

    def wait(self, timeout_s: float) -> bool:
        return self.done.wait(timeout_s)


def _scan(data_dir: Path) -> list[tuple[str, list[str]]]:
    found = []
    try:
        with os.scandir(data_dir) as entries:
            dirs = [e.name for e in entries if e.is_dir()]
        for name in dirs:
            try:
                found.append((name, os.listdir(data_dir / name)))
            except FileNotFoundError:
                continue  # removed between the two calls
    except FileNotFoundError:
        pass
    return found


def _segment_names(data_dir: Path) -> dict[str, set[str]]:
    return {name: {n for n in names if n.endswith(".log")} for name, names in _scan(data_dir)}
