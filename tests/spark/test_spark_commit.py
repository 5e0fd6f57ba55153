"""The sink's commit protocol without Spark: staged batches published exactly once, whatever crashes.

Each crash-phase test builds the on-disk state a crash leaves (an intent, some partitions or some
batches appended, the committed mark without the staging cleanup) with the protocol's own steps
(:class:`Committer`), releases the data dir, then lets a retry or ``abort()`` finish the job (the
open of the dir they make completes it: they then find it committed); the log must then hold
every staged record exactly once, in Spark-partition order.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql.types import BinaryType, IntegerType, StructField, StructType, TimestampType

from tidelog.errors import LogDirLockedError, StorageError
from tidelog.manager import LogManager
from tidelog.manager.staged_commit import Committer, Job, StagedReader
from tidelog.records import iter_batches
from tidelog.spark.commit import abort_job, check_not_owned, commit_job, commit_order, open_owner
from tidelog.spark.options import parse_source_options
from tidelog.spark.reader import TidelogBatchReader
from tidelog.spark.sink_options import SinkPlan, parse_plan
from tidelog.spark.staging import TaskIdentity, TaskManifest, batch_job_key, stage_task, stream_job_key
from tidelog.storage.commit_log import COMMIT_LOG_FILE, MAX_BATCH_JOBS, CommitLog, StagedBatch
from tidelog.storage.config import BrokerConfig
from tidelog.storage.fetch_info import FetchIsolation
from tidelog.storage.log_view import PartitionBounds, PartitionView
from tidelog.storage.staging_dirs import job_dir
from tidelog.testing import FakeClock
from tidelog.topic_partition import TopicPartition

T0 = 1_700_000_000_000
SCHEMA = StructType([StructField("key", BinaryType()), StructField("value", BinaryType()),
                     StructField("partition", IntegerType()), StructField("timestamp", TimestampType())])
Row = tuple[bytes | None, bytes, int | None, int | None]  # key, value, partition, timestamp ms


# --- helpers ---------------------------------------------------------------------------------

def make_data_dir(root: Path, topics: dict[str, int], configs: dict[str, str] | None = None) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    with LogManager.open(BrokerConfig.from_properties({}), [root]) as manager:
        for name, partitions in topics.items():
            manager.create_topic(name, partitions, configs)
    return root


def make_plan(root: Path, topic: str = "t") -> SinkPlan:
    return parse_plan({"path": str(root), "topic": topic}, SCHEMA, False)


def arrow(rows: list[Row]) -> pa.RecordBatch:
    keys, values, partitions, stamps = zip(*rows) if rows else ((), (), (), ())
    return pa.record_batch([
        pa.array(keys, pa.binary()), pa.array(values, pa.binary()), pa.array(partitions, pa.int32()),
        pa.array([None if t is None else t * 1000 for t in stamps], pa.timestamp("us", tz="UTC"))],
        names=["key", "value", "partition", "timestamp"])


def stage(plan: SinkPlan, job_key: str, rows: list[Row], spark_partition: int, attempt: int = 0,
          query: str | None = None, batch: int | None = None) -> TaskManifest:
    task = TaskIdentity(spark_partition, attempt, spark_partition * 10 + attempt)
    chunks = [arrow(rows[i:i + 3]) for i in range(0, len(rows), 3)]  # several Arrow batches per task
    return stage_task(plan, job_key, chunks, task, query, batch, clock=FakeClock(T0))


def rows_for(partition: int, count: int, tag: str) -> list[Row]:
    return [(f"{tag}-k{i}".encode(), f"{tag}-v{i}".encode(), partition, T0 + i) for i in range(count)]


def log_records(root: Path, topic: str = "t") -> dict[int, list[tuple[int, bytes | None, bytes | None, int]]]:
    """Every record of every partition: (offset, key, value, timestamp)."""
    out: dict[int, list[tuple[int, bytes | None, bytes | None, int]]] = {}
    with LogManager.open(BrokerConfig.from_properties({}), [root]) as manager:
        for tp, lg in manager.logs(topic):
            found, offset = [], lg.log_start_offset
            while offset < lg.log_end_offset:
                batches = [b for _, b in iter_batches(lg.read(offset, 1 << 22, FetchIsolation.LOG_END).records)]
                found += [(r.offset, r.key, r.value, r.timestamp) for b in batches for r in b.records()]
                offset = batches[-1].next_offset
            out[tp.partition] = found
    return out


def values(records: dict[int, list[tuple[int, bytes | None, bytes | None, int]]], partition: int) -> list[bytes | None]:
    return [r[2] for r in records[partition]]


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return make_data_dir(tmp_path / "data", {"t": 3})


def staged_job(root: Path) -> tuple[Job, list[TaskManifest], dict[int, list[bytes]]]:
    """A job of two Spark partitions writing to partitions 0 and 2 (and 1 from partition 1 only),
    with enough records for several batches; the expected values per log partition."""
    plan = make_plan(root)
    job = Job(batch_job_key("j1"), plan.staging_root)
    first = rows_for(0, 5, "a") + rows_for(2, 4, "a")
    second = rows_for(0, 3, "b") + rows_for(1, 2, "b")
    manifests = [stage(plan, job.key, second, spark_partition=1), stage(plan, job.key, first, spark_partition=0)]
    expected = {p: [r[1] for r in first + second if r[2] == p] for p in range(3)}  # Spark partition 0 first
    return job, manifests, expected


def owned(root: Path) -> Committer:
    return Committer(open_owner([str(root)], 0), [str(root)], FakeClock(T0))


# --- the happy path and retries ----------------------------------------------------------------

def test_commit_publishes_in_spark_partition_order_and_removes_the_job_staging_dir(root: Path) -> None:
    job, manifests, expected = staged_job(root)
    orphan = stage(make_plan(root), job.key, rows_for(0, 2, "orphan"), spark_partition=1, attempt=7)
    assert Path(job_dir(job.staging_root, job.key), str(orphan.file)).exists()

    outcome = commit_job([str(root)], job, manifests, clock=FakeClock(T0))

    records = log_records(root)
    assert {p: values(records, p) for p in range(3)} == expected
    assert [r[0] for r in records[0]] == list(range(8))  # offsets assigned at commit, from 0
    assert outcome.state == "published" and outcome.records == 14
    assert outcome.ranges == {"t-0": (0, 8), "t-1": (0, 2), "t-2": (0, 4)}
    assert not job_dir(job.staging_root, job.key).exists()  # the failed attempt's orphan went with it


def test_a_repeated_commit_is_a_no_op(root: Path) -> None:
    job, manifests, expected = staged_job(root)
    commit_job([str(root)], job, manifests)
    again = commit_job([str(root)], job, manifests)
    assert again.state == "already committed" and again.ranges["t-0"] == (0, 8)
    assert {p: values(log_records(root), p) for p in range(3)} == expected


def test_abort_without_an_intent_deletes_the_staging_dir_even_when_messages_are_none(root: Path) -> None:
    job, manifests, _ = staged_job(root)
    assert abort_job([str(root)], job).state == "aborted"
    assert not job_dir(job.staging_root, job.key).exists()
    assert log_records(root) == {0: [], 1: [], 2: []}
    assert not (root / COMMIT_LOG_FILE).exists()


def test_abort_after_a_commit_never_undoes_it(root: Path) -> None:
    job, manifests, expected = staged_job(root)
    commit_job([str(root)], job, manifests)
    assert abort_job([str(root)], job).state == "committed"
    assert {p: values(log_records(root), p) for p in range(3)} == expected


def test_an_empty_job_publishes_nothing_and_does_not_need_the_lock(root: Path) -> None:
    plan = make_plan(root)
    job = Job(batch_job_key("empty"), plan.staging_root)
    manifest = stage(plan, job.key, [], spark_partition=0)
    assert manifest.file is None
    with open_owner([str(root)], 0):  # the dir is owned meanwhile
        assert commit_job([str(root)], job, [manifest, None], lock_timeout_s=0).state == "empty"


def test_a_data_dir_of_several_log_dirs_is_written_and_the_commit_log_kept_in_the_first(tmp_path: Path) -> None:
    dirs = [tmp_path / "d1", tmp_path / "d2"]
    for d in dirs:
        d.mkdir()
    with LogManager.open(BrokerConfig.from_properties({}), dirs) as manager:
        manager.create_topic("t", 4)
    plan = parse_plan({"path": ",".join(map(str, dirs)), "topic": "t"}, SCHEMA, False)
    job = Job(batch_job_key("multi"), plan.staging_root)
    rows = [row for p in range(4) for row in rows_for(p, 3, f"p{p}")]
    commit_job(plan.log_dirs, job, [stage(plan, job.key, rows, 0)])
    assert (dirs[0] / COMMIT_LOG_FILE).is_file() and not (dirs[1] / COMMIT_LOG_FILE).exists()
    assert {p.name for d in dirs for p in d.iterdir() if p.is_dir()} == {"t-0", "t-1", "t-2", "t-3"}
    with LogManager.open(BrokerConfig.from_properties({}), dirs) as manager:
        assert [lg.log_end_offset for _, lg in manager.logs("t")] == [3, 3, 3, 3]


def test_batches_spanning_several_input_chunks_keep_every_row_in_order(tmp_path: Path) -> None:
    from tidelog.spark.staging import CHUNK_ROWS

    root = make_data_dir(tmp_path / "data", {"t": 1})
    plan = make_plan(root)
    job = Job(batch_job_key("big"), plan.staging_root)
    n = CHUNK_ROWS + CHUNK_ROWS // 2
    batches = [pa.record_batch([pa.array([b"k%d" % i for i in range(start, start + 10_000)]),
                                pa.array([b"%d" % i for i in range(start, start + 10_000)])], names=["key", "value"])
               for start in range(0, n, 10_000)]
    kv = parse_plan({"path": str(root), "topic": "t"}, StructType(SCHEMA.fields[:2]), False)
    manifest = stage_task(kv, job.key, batches, TaskIdentity(0, 0, 0), clock=FakeClock(T0))
    commit_job(plan.log_dirs, job, [manifest], clock=FakeClock(T0))
    got = log_records(root)[0]
    assert [int(r[2]) for r in got] == list(range(batches[-1].num_rows + (len(batches) - 1) * 10_000))  # type: ignore[arg-type]
    assert {r[3] for r in got} == {T0}  # no timestamp column: the commit time


# --- crash phases ------------------------------------------------------------------------------

def test_crash_after_the_intent_rolls_forward_on_abort(root: Path) -> None:
    job, manifests, expected = staged_job(root)
    committer = owned(root)
    committer.write_intent(job, commit_order(manifests))
    committer.manager.shutdown()  # the driver dies here

    # opening the dir (for abort's roll forward) completes the job: abort then finds it committed
    assert abort_job([str(root)], job).state == "already committed"
    assert {p: values(log_records(root), p) for p in range(3)} == expected
    assert CommitLog.read([str(root)]).find(job.key)["state"] == "committed"  # type: ignore[index]
    assert not job_dir(job.staging_root, job.key).exists()


def test_abort_of_a_job_whose_staging_is_gone_rolls_it_back_whole(root: Path) -> None:
    job, manifests, _ = staged_job(root)
    committer = owned(root)
    entry = committer.write_intent(job, commit_order(manifests))
    with StagedReader(job_dir(entry["staging"], entry["id"])) as staged:
        committer.publish_partition(entry, entry["partitions"][0], staged)
    committer.manager.shutdown()  # the driver dies here, and its staging is lost
    for file in job_dir(job.staging_root, job.key).iterdir():
        file.write_bytes(b"")

    assert abort_job([str(root)], job).state == "rolled back"
    assert {p: values(log_records(root), p) for p in range(3)} == {0: [], 1: [], 2: []}
    with pytest.raises(StorageError, match="rolled back"):
        commit_job([str(root)], job, manifests)  # a late retry of the driver's commit says so


def test_a_read_planned_while_the_job_is_marked_committed_sees_all_of_it_or_none(
        root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The committed mark lands after the plan refreshed partition 0 and before the others: the plan
    looks again, so every partition ends after the job (never partition 0 before it, 1 and 2 after)."""
    job, manifests, expected = staged_job(root)
    committer = owned(root)
    entry = committer.write_intent(job, commit_order(manifests))
    with StagedReader(job_dir(entry["staging"], entry["id"])) as staged:
        ranges = {f"t-{part['partition']}": committer.publish_partition(entry, part, staged)
                  for part in entry["partitions"]}
    refresh = PartitionView.refresh

    def refresh_then_commit(view: PartitionView, pending: dict[TopicPartition, int] | None = None) -> PartitionBounds:
        found = refresh(view, pending)
        if view.topic_partition.partition == 0 and CommitLog.read([str(root)]).find(job.key)["state"] == "intent":  # type: ignore[index]
            committer.mark_committed(entry, ranges)
        return found

    monkeypatch.setattr(PartitionView, "refresh", refresh_then_commit)
    reader = TidelogBatchReader(parse_source_options({"path": str(root), "subscribe": "t"}, streaming=False))
    committer.manager.shutdown()
    assert {r.partition: r.end for r in reader.partitions()} == {p: len(expected[p]) for p in range(3)}


@pytest.mark.parametrize("partitions_done", [1, 2, 3])
def test_crash_after_each_partition_append_rolls_forward_on_retry(root: Path, partitions_done: int) -> None:
    job, manifests, expected = staged_job(root)
    committer = owned(root)
    entry = committer.write_intent(job, commit_order(manifests))
    with StagedReader(job_dir(entry["staging"], entry["id"])) as staged:
        for part in entry["partitions"][:partitions_done]:
            committer.publish_partition(entry, part, staged)
    committer.manager.shutdown()

    assert commit_job([str(root)], job, manifests).state == "already committed"  # completed by the open
    assert {p: values(log_records(root), p) for p in range(3)} == expected


def test_crash_inside_a_partition_appends_only_the_missing_batches(tmp_path: Path) -> None:
    root = make_data_dir(tmp_path / "data", {"t": 1}, {"max.message.bytes": "200"})  # ~2 records a batch
    plan = make_plan(root)
    job = Job(batch_job_key("j"), plan.staging_root)
    manifests = [stage(plan, job.key, rows_for(0, 9, "x"), spark_partition=0)]
    assert len(manifests[0].batches) >= 3
    committer = owned(root)
    entry = committer.write_intent(job, commit_order(manifests))
    with StagedReader(job_dir(entry["staging"], entry["id"])) as staged:  # the first staged batch reached the log, the rest did not
        first = entry["partitions"][0]["batches"][0]
        committer.manager.append(TopicPartition("t", 0), staged.read(first[0], StagedBatch("t", 0, *first[1:6])))
    committer.manager.shutdown()

    commit_job([str(root)], job, manifests)
    records = log_records(root)[0]
    assert [r[2] for r in records] == [f"x-v{i}".encode() for i in range(9)]
    assert [r[0] for r in records] == list(range(9))


def test_crash_after_the_committed_mark_leaves_only_staging_for_the_retry_to_remove(root: Path) -> None:
    job, manifests, expected = staged_job(root)
    committer = owned(root)
    entry = committer.write_intent(job, commit_order(manifests))
    committer.mark_committed(entry, committer.publish(entry))
    committer.manager.shutdown()
    assert job_dir(job.staging_root, job.key).exists()

    assert commit_job([str(root)], job, manifests).state == "already committed"
    assert not job_dir(job.staging_root, job.key).exists()
    assert {p: values(log_records(root), p) for p in range(3)} == expected


def test_an_intent_left_behind_is_completed_by_the_next_job(root: Path) -> None:
    job, manifests, expected = staged_job(root)
    committer = owned(root)
    committer.write_intent(job, commit_order(manifests))
    committer.manager.shutdown()  # the commit died, and abort() never ran

    plan = make_plan(root)
    other = Job(batch_job_key("j2"), plan.staging_root)
    commit_job([str(root)], other, [stage(plan, other.key, [(b"k", b"late", 1, T0)], spark_partition=0)])

    assert values(log_records(root), 1) == expected[1] + [b"late"]
    assert not job_dir(job.staging_root, job.key).exists()


def test_roll_forward_refuses_a_log_that_holds_other_records_after_the_intent(root: Path) -> None:
    job, manifests, _ = staged_job(root)
    committer = owned(root)
    committer.write_intent(job, commit_order(manifests))
    foreign = stage(make_plan(root), "foreign", [(b"f", b"foreign", 0, T0)], spark_partition=0)
    with StagedReader(job_dir(job.staging_root, "foreign")) as staged:
        committer.manager.append(TopicPartition("t", 0), staged.read(str(foreign.file), foreign.batches[0]))
    committer.manager.shutdown()

    with pytest.raises(StorageError, match="other records at offset 0"):
        commit_job([str(root)], job, manifests)
    assert job_dir(job.staging_root, job.key).exists()  # the staged data is kept


def test_roll_forward_accepts_records_appended_after_the_whole_job(root: Path) -> None:
    job, manifests, expected = staged_job(root)
    committer = owned(root)
    entry = committer.write_intent(job, commit_order(manifests))
    committer.publish(entry)  # every batch is in; the mark is not
    foreign = stage(make_plan(root), "foreign", [(b"f", b"later", 0, T0)], spark_partition=0)
    with StagedReader(job_dir(job.staging_root, "foreign")) as staged:
        committer.manager.append(TopicPartition("t", 0), staged.read(str(foreign.file), foreign.batches[0]))
    committer.manager.shutdown()

    outcome = commit_job([str(root)], job, manifests)
    assert outcome.state == "already committed" and outcome.ranges["t-0"] == (0, 8)
    assert values(log_records(root), 0) == expected[0] + [b"later"]


# --- commit time, streaming, the commit log, the lock -----------------------------------------

def test_rows_without_timestamp_get_the_commit_time(root: Path) -> None:
    plan = make_plan(root)
    job = Job(batch_job_key("ts"), plan.staging_root)
    rows: list[Row] = [(b"a", b"timed", 0, T0 - 5), (b"b", b"untimed", 0, None), (b"c", b"untimed2", 0, None),
                       (b"d", b"timed2", 0, T0 + 7)]
    commit_job([str(root)], job, [stage(plan, job.key, rows, 0)], clock=FakeClock(T0 + 1000))
    assert [(r[2], r[3]) for r in log_records(root)[0]] == [
        (b"timed", T0 - 5), (b"untimed", T0 + 1000), (b"untimed2", T0 + 1000), (b"timed2", T0 + 7)]


def test_a_replayed_micro_batch_is_skipped(root: Path) -> None:
    plan = make_plan(root)

    def micro_batch(batch: int, tag: str) -> tuple[Job, list[TaskManifest]]:
        job = Job(stream_job_key("q1", batch), plan.staging_root, "q1", batch)
        return job, [stage(plan, job.key, rows_for(0, 2, tag), 0, query="q1", batch=batch)]

    assert commit_job([str(root)], *micro_batch(0, "b0")).state == "published"
    assert commit_job([str(root)], *micro_batch(1, "b1")).state == "published"
    replay, manifests = micro_batch(0, "replayed")
    assert commit_job([str(root)], replay, manifests).state == "skipped"
    assert not job_dir(replay.staging_root, replay.key).exists()
    assert values(log_records(root), 0) == [b"b0-v0", b"b0-v1", b"b1-v0", b"b1-v1"]
    commits = json.loads((root / COMMIT_LOG_FILE).read_bytes())
    assert commits["queries"] == {"q1": {"last_batch": 1}}
    assert [job["id"] for job in commits["jobs"]] == [stream_job_key("q1", 1)]  # one entry per query


def test_the_commit_log_keeps_intents_each_querys_latest_entry_and_the_newest_batch_jobs(tmp_path: Path) -> None:
    commits = CommitLog(tmp_path / COMMIT_LOG_FILE, [], {})
    commits.add({"id": "pending", "state": "intent", "query": None, "batch": None, "partitions": []})
    for i in range(MAX_BATCH_JOBS + 20):
        entry = {"id": f"job-{i}", "state": "intent", "query": None, "batch": None, "partitions": []}
        commits.add(entry)
        commits.mark_committed(entry, {})
    for batch in range(3):
        entry = {"id": f"q-{batch}", "state": "intent", "query": "q", "batch": batch, "partitions": []}
        commits.add(entry)
        commits.mark_committed(entry, {})
    ids = [job["id"] for job in commits.jobs]
    assert ids[0] == "pending" and ids[-1] == "q-2" and "q-1" not in ids
    assert len(ids) == 1 + MAX_BATCH_JOBS + 1 and "job-19" not in ids and "job-20" in ids
    commits.write()
    assert CommitLog.read([str(tmp_path)]).jobs == commits.jobs


def test_a_data_dir_owned_by_another_process_fails_with_how_to_write_instead(root: Path) -> None:
    job, manifests, _ = staged_job(root)
    with LogManager.open(BrokerConfig.from_properties({}), [root]):  # e.g. a running tidelog serve
        with pytest.raises(LogDirLockedError) as failed:
            commit_job([str(root)], job, manifests, lock_timeout_s=0)
        with pytest.raises(LogDirLockedError):
            check_not_owned([str(root)], 0)
    message = str(failed.value)
    assert "owned by a running process" in message and "pid" in message
    assert 'format("kafka")' in message and "kafka.bootstrap.servers" in message
    assert job_dir(job.staging_root, job.key).exists()  # nothing was decided: the staged data stays for abort()


def test_the_staging_lease_names_the_nearest_java_ancestor_and_none_outside_one() -> None:
    """driver_lease walks up from this process to the first one named ``java`` (Spark's driver
    JVM), whose staging the next opener reclaims once it is dead; without one, no lease."""
    child = "from tidelog.spark.staging import driver_lease; lease = driver_lease(); print(lease and lease.pid)"
    as_java = ("import subprocess, sys, os; open('/proc/self/comm', 'w').write('java'); "
               f"out = subprocess.run([sys.executable, '-c', {child!r}], capture_output=True, text=True, check=True).stdout; "
               "print(os.getpid(), out.strip())")
    run = subprocess.run([sys.executable, "-c", as_java], capture_output=True, text=True, check=True)
    java_pid, found = run.stdout.split()
    assert found == java_pid
    assert subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, check=True).stdout.strip() == "None"
