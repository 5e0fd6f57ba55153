"""The staged-commit log: a data dir's record of multi-partition jobs, and what readers may see.

A *job* appends staged record batches to several partitions at once (today the Spark sink; any
later write path that promises "all of it or none of it" uses the same file). Its protocol lives
in :mod:`tidelog.manager.staged_commit`; this module owns the file and the read-side rule.

**The file** is ``tidelog-spark-commits.json`` at the root of one log dir (the first one of the
writer's list; readers look in every log dir of theirs). Kafka ignores files there, a directory
would stop it from starting. Replaced whole and atomically (tmp + fsync + rename + dir fsync),
only by the owner of the data dir (its ``.lock``)::

    {"version": 1, "generation": n,
     "jobs": [{"id": job key, "state": "intent" | "committed" | "rolled back", "commit_time": ms,
               "staging": staging root, "query": queryId | null, "batch": batchId | null,
               "partitions": [{"topic", "partition", "start": log end offset before the job,
                               "batches": [[file, position, size, records, fingerprint, stamp], ...]}]}],
     "queries": {queryId: {"last_batch": batchId}},
     "staging_roots": [every staging root a job used]}

``generation`` grows by one on every write: readers that do not own the dir use it as a
sequence lock (below). A stat identity would not do: a replaced file may get the inode number
its predecessor freed, within one tick of the coarse mtime clock, at the same size.

**The read-side rule** (what makes a job atomic for readers that never take the lock): while a
job's entry is an ``intent``, each of its partitions is readable only up to the intent's
``start``. A reader takes the file's generation and pending starts, then the partition's end,
then the generation again; if it changed, it reads again (:meth:`PendingJobs.consistent`, a
bounded number of times). An intent is
durable before the first byte of its job reaches a log and is replaced by the committed entry
only after every byte is flushed, so a reader whose two identities agree saw either no job in
flight (the end it read holds no part of one) or the intent (and caps the end at its start).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from tidelog.errors import CheckpointError, StorageError
from tidelog.storage.atomic import read_file, write_atomically
from tidelog.topic_partition import TopicPartition

COMMIT_LOG_FILE = "tidelog-spark-commits.json"
COMMIT_LOG_VERSION = 1
MAX_BATCH_JOBS = 100
INTENT = "intent"
COMMITTED = "committed"
ROLLED_BACK = "rolled back"
STAGING_SUFFIX = ".tidelog-staging"  # the default staging root: a sibling of the first log dir

MAX_CONSISTENT_READS = 100  # a reader overtaken by this many writes in a row gives up (PendingJobs.consistent)

Generations = tuple[int | None, ...]  # per log dir; None: no readable file
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class StagedBatch:
    """One staged producer batch: where it is, what it holds, how to recognise it in the log."""

    topic: str
    partition: int
    position: int
    size: int
    records: int
    fingerprint: int  # CRC-32C of the records area (survives what the log patches)
    stamp_at_commit: bool  # timestamps -1 in the file: the commit writes its time

    def to_json(self) -> list[Any]:
        return [self.topic, self.partition, self.position, self.size, self.records, self.fingerprint,
                self.stamp_at_commit]

    @classmethod
    def from_json(cls, item: list[Any]) -> StagedBatch:
        topic, partition, position, size, records, fingerprint, stamp = item
        return cls(str(topic), int(partition), int(position), int(size), int(records), int(fingerprint), bool(stamp))


def default_staging_root(log_dir: str | Path) -> Path:
    return Path(str(log_dir).rstrip("/") + STAGING_SUFFIX)


def find_commit_log(log_dirs: Sequence[str | Path]) -> Path:
    """The file in the first log dir holding one, else where the first log dir would hold it."""
    for log_dir in log_dirs:
        path = Path(log_dir) / COMMIT_LOG_FILE
        if path.exists():
            return path
    return Path(log_dirs[0]) / COMMIT_LOG_FILE


class CommitLog:
    """The file's content (see the module doc); read and written whole, under the dir lock."""

    def __init__(self, path: Path, jobs: list[dict[str, Any]], queries: dict[str, dict[str, Any]],
                 generation: int = 0, staging_roots: list[str] | None = None) -> None:
        self.path, self.jobs, self.queries, self.generation = path, jobs, queries, generation
        self.staging_roots = staging_roots or []

    @classmethod
    def read(cls, log_dirs: Sequence[str | Path]) -> CommitLog:
        path = find_commit_log(log_dirs)
        try:
            data = read_file(path, "staged-commit log")
        except Exception:
            if not path.exists():
                return cls(path, [], {})
            raise
        return cls.parse(path, data)

    @classmethod
    def parse(cls, path: Path, data: bytes) -> CommitLog:
        try:
            content = json.loads(data)
            if content.get("version") != COMMIT_LOG_VERSION:
                raise ValueError(f"unknown version {content.get('version')!r}")
            return cls(path, list(content["jobs"]), dict(content["queries"]), int(content.get("generation", 0)),
                       [str(r) for r in content.get("staging_roots", [])])
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise CheckpointError(f"staged-commit log is not readable: {e}", path=path) from e

    def write(self) -> None:
        self.generation += 1
        content = {"version": COMMIT_LOG_VERSION, "generation": self.generation, "jobs": self.jobs,
                   "queries": self.queries, "staging_roots": self.staging_roots}
        write_atomically(self.path, json.dumps(content, separators=(",", ":")).encode())

    def find(self, job_key: str) -> dict[str, Any] | None:
        return next((job for job in self.jobs if job["id"] == job_key), None)

    def last_batch(self, query: str) -> int | None:
        entry = self.queries.get(query)
        return None if entry is None else int(entry["last_batch"])

    def pending(self) -> list[dict[str, Any]]:
        return [job for job in self.jobs if job["state"] == INTENT]

    def add(self, entry: dict[str, Any]) -> None:
        self.jobs.append(entry)
        if entry.get("staging") is not None and entry["staging"] not in self.staging_roots:
            self.staging_roots.append(entry["staging"])

    def mark_committed(self, entry: dict[str, Any], ranges: dict[str, tuple[int, int]]) -> None:
        entry["state"] = COMMITTED
        entry["partitions"] = [{"topic": p["topic"], "partition": p["partition"], "start": ranges[tp_key(p)][0],
                                "end": ranges[tp_key(p)][1]} for p in entry["partitions"]]
        if entry.get("query") is not None:
            last = self.last_batch(entry["query"])
            self.queries[entry["query"]] = {"last_batch": max(entry["batch"], -1 if last is None else last)}
        self._trim()

    def mark_rolled_back(self, entry: dict[str, Any], reason: str) -> None:
        entry["state"] = ROLLED_BACK
        entry["reason"] = reason
        entry["partitions"] = [{"topic": p["topic"], "partition": p["partition"], "start": p["start"],
                                "end": p["start"]} for p in entry["partitions"]]
        self._trim()

    def _trim(self) -> None:
        """Keep intents, the newest finished entry of each query, the newest MAX_BATCH_JOBS batch jobs."""
        kept: list[dict[str, Any]] = []
        queries_seen: set[str] = set()
        batch_jobs = 0
        for job in reversed(self.jobs):
            if job["state"] == INTENT:
                kept.append(job)
            elif job.get("query") is not None:
                if job["query"] not in queries_seen:
                    queries_seen.add(job["query"])
                    kept.append(job)
            elif batch_jobs < MAX_BATCH_JOBS:
                batch_jobs += 1
                kept.append(job)
        self.jobs = kept[::-1]


def tp_key(part: dict[str, Any]) -> str:
    return f"{part['topic']}-{part['partition']}"


# --- the read side ---------------------------------------------------------------------------

def _read_pending(log_dir: str | Path) -> tuple[int | None, list[dict[str, Any]]]:
    """The generation and the intents of ``log_dir``'s file; (None, []) when it is absent or
    unreadable: it hides nothing (and is the owner's to report: it cannot commit past it)."""
    path = Path(log_dir) / COMMIT_LOG_FILE
    try:
        commits = CommitLog.parse(path, path.read_bytes())
    except (OSError, CheckpointError):
        return None, []
    return commits.generation, commits.pending()


def _pending_starts(intents: Sequence[dict[str, Any]]) -> dict[TopicPartition, int]:
    """Per partition of a job in flight (an intent), the offset its readers must stop at."""
    starts: dict[TopicPartition, int] = {}
    for job in intents:
        for part in job["partitions"]:
            tp = TopicPartition(part["topic"], int(part["partition"]))
            starts[tp] = min(int(part["start"]), starts.get(tp, int(part["start"])))
    return starts


class PendingJobs:
    """A reader's view of the jobs in flight in a set of log dirs (see the module doc): reads
    the small file of each on every call. Not thread-safe (one per reader, as the views)."""

    def __init__(self, log_dirs: Sequence[str | Path]) -> None:
        self.log_dirs = list(log_dirs)

    def snapshot(self) -> tuple[Generations, dict[TopicPartition, int]]:
        """The generation of each log dir's file and the pending starts they name."""
        read = [_read_pending(log_dir) for log_dir in self.log_dirs]
        return tuple(generation for generation, _ in read), _pending_starts([job for _, jobs in read for job in jobs])

    def unchanged(self, generations: Generations) -> bool:
        return tuple(_read_pending(log_dir)[0] for log_dir in self.log_dirs) == generations

    def consistent(self, read: Callable[[dict[TopicPartition, int]], T]) -> T:
        """``read(pending starts)``, done again until no write of the files came in between (the
        sequence lock of the module doc). StorageError when writes overtook it
        :data:`MAX_CONSISTENT_READS` times in a row."""
        for _ in range(MAX_CONSISTENT_READS):
            generations, starts = self.snapshot()
            found = read(starts)
            if self.unchanged(generations):
                return found
        raise StorageError(f"the staged-commit log changed during each of {MAX_CONSISTENT_READS} reads",
                           path=find_commit_log(self.log_dirs))
