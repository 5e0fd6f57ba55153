"""The workloads of the kill points (:mod:`kill_harness`): lists of steps on a :class:`LogManager`
driven by a :class:`FakeClock` (appends, flushes, checkpoints, retention, DeleteRecords, cleans, a
topic deletion, restarts, a multi-partition staged commit, one staged and committed through a
live broker, files damaged while stopped, clock
advances that run the delayed unlinks). Everything is deterministic, so every run makes the same
file operations in the same order.
"""

from __future__ import annotations

import dataclasses
import errno
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from crc32c import crc32c
from manager_helpers import crash  # a killed process's stop, shared with the manager tests

from tidelog.manager import LogManager
from tidelog.manager.live_commit import LiveCommits
from tidelog.manager.staged_commit import Committer, Job, StagedReader
from tidelog.records import BatchBuilder
from tidelog.records.layout import RECORD_BATCH_OVERHEAD
from tidelog.records.control import build_end_txn_marker_batch
from tidelog.storage import fileops, files
from tidelog.storage.commit_log import StagedBatch, default_staging_root
from tidelog.storage.config import BrokerConfig
from tidelog.storage.fileops import FaultRule
from tidelog.storage.staging_dirs import job_dir, process_lease, remove_job_dir, stage_batches
from tidelog.storage.txn_index import AbortedTxn
from tidelog.testing import FakeClock, FakeScheduler
from tidelog.topic_partition import TopicPartition

T0 = 1_700_000_000_000

BROKER = {
    "log.segment.bytes": "700",
    "log.cleaner.dedupe.buffer.size": str(1 << 20),
    "log.initial.task.delay.ms": "0",
    "log.segment.delete.delay.ms": "1000",
    "log.cleaner.min.compaction.lag.ms": "0",
}
DELETE_DELAY_MS = 1000


def broker_config(root: Path) -> BrokerConfig:
    return BrokerConfig.from_properties({"log.dirs": str(root / "logs"), **BROKER})


def open_manager(root: Path, clock: FakeClock) -> LogManager:
    return LogManager.open(broker_config(root), [root / "logs"], clock=clock, scheduler=FakeScheduler(clock))


# --- workloads -----------------------------------------------------------------------------------

@dataclass
class Env:
    """What a workload step may use: the manager, the clock, and deterministic record builders."""

    manager: LogManager
    clock: FakeClock
    root: Path
    counter: int = 0  # distinct values across the run
    staged: dict[str, list[Any]] = field(default_factory=dict)  # job key -> its staged batches
    sequences: dict[int, int] = field(default_factory=dict)  # producer id -> its next sequence

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


LIVE_JOBS = {name: f"job-{n:032x}" for n, name in enumerate(("x", "y", "z"), start=1)}


def _stage_through_broker(name: str) -> Step:
    """Stage a job of two task files (two chunks each) as a live broker does for StageBatches
    (:class:`~tidelog.manager.live_commit.LiveCommits`); its time lease expires long before
    the harness's reopen, which must reclaim it unless an intent needs it."""
    def run(env: Env) -> None:
        live, key = LiveCommits(env.manager, env.clock), LIVE_JOBS[name]
        refs = []
        for task in range(2):
            file = f"part-{task:05d}-attempt-0-task-{task}.batches"
            position = 0
            for p in range(3):
                builder = BatchBuilder(base_offset=0)
                for i in range(3):
                    env.counter += 1
                    builder.append(i, env.clock.milliseconds(), b"k%d" % env.counter, b"live-%d" % env.counter)
                data = bytes(builder.build())
                live.stage(key, file, position, data, last=p == 2)
                refs.append((file, StagedBatch(JOB_TOPIC, p, position, len(data), 3,
                                               crc32c(data[RECORD_BATCH_OVERHEAD:]), False)))
                position += len(data)
        env.staged[key] = refs
    return (f"stage {name} through the broker", run)


def _live_commit(name: str) -> Step:
    """The broker's commit of a job staged through it: fence, intent, publish, committed mark,
    staging removal, all on the live manager."""
    def run(env: Env) -> None:
        key = LIVE_JOBS[name]
        LiveCommits(env.manager, env.clock).commit(key, sorted(env.staged[key], key=lambda r: r[0]))
    return (f"commit {name} on the broker", run)


def live_commit_workload() -> list[Step]:
    """Jobs staged through a live broker and committed by it (``tidelog.manager.live_commit``),
    the broker killed at every op: mid-staging, after staging, at the intent, mid roll-forward,
    at the committed mark, at the staging removal; an abort; a job whose driver never commits
    (reclaimed by its expired lease at the reopen). Commits are checked all-or-nothing."""
    steps = [_create(JOB_TOPIC, 3, **{"segment.bytes": "700"})]
    steps += [(f"append {JOB_TOPIC}-{p}", lambda env, p=p: env.append(JOB_TOPIC, 3, partition=p)) for p in range(3)]
    steps += [_stage_through_broker("x"), _live_commit("x")]
    steps += [(f"append {JOB_TOPIC}-0", lambda env: env.append(JOB_TOPIC, 2, partition=0))]
    steps += [_stage_through_broker("y"), ("abort y on the broker",
                                          lambda env: LiveCommits(env.manager, env.clock).abort(LIVE_JOBS["y"]))]
    steps += [_stage_through_broker("z")]  # its driver died: never committed
    steps += [(f"append {JOB_TOPIC}-2", lambda env: env.append(JOB_TOPIC, 2, partition=2))]
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


TXN_LOG_TOPICS = ("txl", "txd")  # read_state adds their LSO and open transactions too


def _txn(topic: str, pid: int, count: int, epoch: int = 0) -> Step:
    """One transactional batch of ``count`` keyed records from producer ``pid`` (a leader append:
    producer state opens its transaction)."""
    def run(env: Env) -> None:
        seq = env.sequences.get(pid, 0)
        builder = BatchBuilder(producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=True)
        for i in range(count):
            env.counter += 1
            builder.append(i, env.clock.milliseconds(), b"k%d" % (env.counter % 5), b"p%d-%d" % (pid, env.counter))
        env.manager.append(TopicPartition(topic, 0), builder.build())
        env.sequences[pid] = seq + count
    return (f"transactional append {topic} p{pid}", run)


def _marker(topic: str, pid: int, commit: bool, epoch: int = 0) -> Step:
    """The coordinator's COMMIT or ABORT (``write_txn_marker``: the marker, an ABORT's .txnindex entry)."""
    return (f"{'commit' if commit else 'abort'} marker {topic} p{pid}",
            lambda env: env.manager.write_txn_marker(TopicPartition(topic, 0), pid, epoch, 0, commit))


def transactions_workload() -> list[Step]:
    """Transactions written as the coordinator writes them, on a compacted page-cache topic and a
    ``flush.messages=1`` one: interleaved producers, ABORTs whose .txnindex entry points at
    another producer's open transaction, rolls, a crash with transactions open (the reopen must
    give back the same LSO and open transactions: producer snapshots + replay), a clean, and
    markers after it. Each state holds the LSO, the open transactions and the aborted ones."""
    steps = [_create("txl", **{"cleanup.policy": "compact", "segment.bytes": "500", "min.cleanable.dirty.ratio": "0.01"}),
             _create("txd", **{"flush.messages": "1", "segment.bytes": "500"})]
    for topic in TXN_LOG_TOPICS:
        p1, p2, p3 = (10, 11, 12) if topic == "txl" else (20, 21, 22)
        steps += [_txn(topic, p1, 2), _txn(topic, p2, 1), _txn(topic, p1, 2), _marker(topic, p2, False),
                  _txn(topic, p3, 3), _marker(topic, p1, True), _txn(topic, p2, 2), _marker(topic, p3, False)]
    steps += [("crash and reopen", _crash_and_reopen)]
    for topic in TXN_LOG_TOPICS:
        p1, p2 = (10, 11) if topic == "txl" else (20, 21)
        steps += [_txn(topic, p1, 2), _marker(topic, p2, False), _marker(topic, p1, False)]
    steps += [("checkpoints", _checkpoints), _clean("txl"), _advance(DELETE_DELAY_MS + 1)]
    steps += [_txn("txl", 13, 1), _marker("txl", 13, True)]
    return steps


WORKLOADS: dict[str, Callable[[], list[Step]]] = {
    "append": append_workload,
    "damaged_files": damaged_files_workload,
    "staged_commit": staged_commit_workload,
    "transactions": transactions_workload,
    "live_commit": live_commit_workload,
    "restart": restart_workload,
    "retention": retention_workload,
    "clean": clean_workload,
    "delete_topic": delete_topic_workload,
}

