"""Staged commits below Spark: a multi-partition job interrupted by a crash is invisible to
readers while in flight, completed (or rolled back) by whoever opens the dir next, and its
abandoned staging is reclaimed.

The crash states are built with the protocol's own steps (:class:`Committer`) and
``manager_helpers.crash`` (a killed process's stop); the Spark-level end-to-end test is
``tests/spark/test_spark_killed_driver.py``, the kill points ``tests/reliability``.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from manager_helpers import Opener, batch, crash, read_offsets

from tidelog.errors import LogDirOfflineError, StorageError
from tidelog.manager import LogManager
from tidelog.manager.staged_commit import Committer, Job, StagedReader
from tidelog.storage.commit_log import CommitLog, default_staging_root
from tidelog.storage import fileops
from tidelog.storage.config import BrokerConfig
from tidelog.storage.fileops import FaultRule, FileOp
from tidelog.storage.log_view import LogView
from tidelog.storage.staging_dirs import Lease, job_dir, parse_stat, process_lease, read_lease, stage_batches
from tidelog.topic_partition import TopicPartition

PARTITIONS = 3


def open_dir(data: Path) -> LogManager:
    return LogManager.open(BrokerConfig.from_properties({}), [data])


@pytest.fixture
def data(tmp_path: Path) -> Path:
    path = tmp_path / "data"
    with open_dir(path) as manager:
        manager.create_topic("t", PARTITIONS)
        for p in range(PARTITIONS):
            manager.append(TopicPartition("t", p), batch(2))  # records before the job: offsets 0-1
    return path


def staged_job(data: Path, key: str = "job-1", lease: Lease | None = None) -> tuple[Job, list]:
    """A job of 2 batches of 3 records per partition, staged under the default staging root
    (its owner: this process, unless ``lease`` says otherwise)."""
    root = default_staging_root(data)
    job = Job(key, str(root))
    lease = lease or process_lease(os.getpid())
    refs = stage_batches(root, key, "part-0.batches",
                         [("t", p, batch(3, value_size=5 + i)) for p in range(PARTITIONS) for i in range(2)], lease)
    return job, refs


def interrupted_commit(data: Path, job: Job, refs: list, partitions_done: int,
                       topic_configs: dict[str, str] | None = None) -> None:
    """The driver wrote the intent, published ``partitions_done`` partitions, and was killed
    (after someone set ``topic_configs``, when given)."""
    manager = open_dir(data)
    committer = Committer(manager, [str(data)])
    entry = committer.write_intent(job, refs)
    with StagedReader(job_dir(job.staging_root, job.key)) as staged:
        for part in entry["partitions"][:partitions_done]:
            committer.publish_partition(entry, part, staged)
    if topic_configs:
        manager.alter_topic_config("t", topic_configs)
    crash(manager)


def ends(data: Path) -> list[int]:
    view = LogView([data])
    return [view.partition(TopicPartition("t", p)).refresh().end_offset for p in range(PARTITIONS)]


def test_a_job_in_flight_is_invisible_to_lockless_readers(data: Path) -> None:
    job, refs = staged_job(data)
    interrupted_commit(data, job, refs, partitions_done=2)
    assert ends(data) == [2, 2, 2]  # two partitions hold the job's records already; none is shown


def test_opening_the_dir_completes_an_interrupted_job_before_anything_else(data: Path) -> None:
    """What ``tidelog serve`` does at start-up: the job is whole before a produce can land."""
    job, refs = staged_job(data)
    interrupted_commit(data, job, refs, partitions_done=1)
    with open_dir(data) as manager:
        manager.append(TopicPartition("t", 0), batch(1))  # a produce after the start-up
        counts = [len(read_offsets(manager.log(TopicPartition("t", p)))) for p in range(PARTITIONS)]
    assert counts == [2 + 6 + 1, 2 + 6, 2 + 6]
    assert ends(data) == [9, 8, 8]
    assert CommitLog.read([data]).find(job.key)["state"] == "committed"  # type: ignore[index]
    assert not job_dir(job.staging_root, job.key).exists()


def test_a_job_whose_staging_is_gone_is_rolled_back_and_its_retry_says_so(data: Path) -> None:
    job, refs = staged_job(data)
    interrupted_commit(data, job, refs, partitions_done=2)
    for file in job_dir(job.staging_root, job.key).iterdir():
        file.write_bytes(b"")  # the staged data is lost
    with open_dir(data) as manager:
        assert [manager.log(TopicPartition("t", p)).log_end_offset for p in range(PARTITIONS)] == [2, 2, 2]
        with pytest.raises(StorageError, match="rolled back"):
            Committer(manager, [str(data)]).commit(job, refs)
    assert CommitLog.read([data]).find(job.key)["state"] == "rolled back"  # type: ignore[index]


def test_staging_of_a_dead_driver_is_reclaimed_at_open_and_a_live_ones_kept(data: Path, caplog) -> None:
    driver = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    lease = process_lease(driver.pid)
    driver.kill()
    driver.wait()
    dead_job, _ = staged_job(data, "job-dead", lease)
    live_job, _ = staged_job(data, "job-live")
    open_dir(data).shutdown()
    assert not job_dir(dead_job.staging_root, dead_job.key).exists()
    assert job_dir(live_job.staging_root, live_job.key).exists()
    assert "deleted the staging dir" in caplog.text and "job-dead" in caplog.text


def test_a_job_the_log_now_refuses_is_rolled_back_whole(data: Path) -> None:
    """Found by the end-to-end test: a broker whose configs refuse the staged batches (there, a
    smaller segment.bytes) must not serve the part that reached the logs."""
    job, refs = staged_job(data)
    interrupted_commit(data, job, refs, partitions_done=2, topic_configs={"max.message.bytes": "80"})
    with open_dir(data) as manager:
        assert [manager.log(TopicPartition("t", p)).log_end_offset for p in range(PARTITIONS)] == [2, 2, 2]
    assert CommitLog.read([data]).find(job.key)["state"] == "rolled back"  # type: ignore[index]
    assert not job_dir(job.staging_root, job.key).exists()


def test_verify_names_an_interrupted_job_and_what_the_broker_will_do(data: Path) -> None:
    job, refs = staged_job(data)
    interrupted_commit(data, job, refs, partitions_done=1)
    verify = subprocess.run([sys.executable, "-m", "tidelog.cli.main", "verify", str(data)],
                            capture_output=True, text=True)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert f"job {job.key} was interrupted mid-commit (t-0, t-1, t-2)" in verify.stdout
    assert "completed before the broker listens" in verify.stdout


def test_a_roll_back_never_truncates_records_appended_after_the_whole_job(data: Path) -> None:
    """A partition holding all of the job and then someone else's acknowledged records: the
    job cannot be completed (another partition's staging is gone) and must not be rolled back
    by truncating those records; it stays pending, the records stay."""
    job, refs = staged_job(data)
    manager = open_dir(data)
    committer = Committer(manager, [str(data)])
    entry = committer.write_intent(job, refs)
    with StagedReader(job_dir(job.staging_root, job.key)) as staged:
        committer.publish_partition(entry, entry["partitions"][0], staged)
    manager.append(TopicPartition("t", 0), batch(1))  # a produce after the whole job, acknowledged
    manager.log(TopicPartition("t", 0)).flush()
    crash(manager)
    for file in job_dir(job.staging_root, job.key).iterdir():
        file.write_bytes(b"")  # the other partitions cannot be completed
    manager = open_dir(data)
    try:
        assert manager.get_log(TopicPartition("t", 0)).log_end_offset == 2 + 6 + 1  # type: ignore[union-attr]
    finally:
        manager.shutdown()
    assert CommitLog.read([data]).find(job.key)["state"] == "intent"  # type: ignore[index]


def test_a_job_with_a_partition_in_an_offline_dir_is_not_served_until_it_completes(
        broker: Opener, log_dirs: list[Path]) -> None:
    """A job over two dirs, the second offline at start-up: the job cannot be completed then, so
    none of its partitions is served nor appended to (else its first partition shows the job in
    part, and a produce after it makes it impossible to complete); when the dir comes back the
    job is completed and the partitions are served again, the job whole."""
    dirs = log_dirs[:2]
    manager = broker.open(dirs)
    manager.create_topic("t", 2)  # partition 0 in the first dir, 1 in the second
    assert manager.log(TopicPartition("t", 1)).dir.parent == dirs[1]
    manager.shutdown()
    job = Job("job-1", str(default_staging_root(dirs[0])))
    refs = stage_batches(job.staging_root, job.key, "part-0.batches",
                         [("t", p, batch(3)) for p in range(2)], process_lease(os.getpid()))
    manager = broker.open(dirs)
    committer = Committer(manager, [str(d) for d in dirs])
    entry = committer.write_intent(job, refs)
    with StagedReader(job_dir(job.staging_root, job.key)) as staged:
        committer.publish_partition(entry, entry["partitions"][0], staged)  # partition 0 holds the job
    crash(manager)

    with fileops.inject(FaultRule(frozenset({FileOp.WRITE}), f"{dirs[1]}/.lock", error=errno.EIO, times=1)):
        manager = broker.open(dirs)
    assert [d.path for d in manager.offline_log_dirs()] == [dirs[1]]
    with pytest.raises(LogDirOfflineError, match="job-1"):
        manager.log(TopicPartition("t", 0))  # what fetch, list offsets and produce ask
    with pytest.raises(LogDirOfflineError, match="job-1"):
        manager.append(TopicPartition("t", 0), batch(1))
    assert CommitLog.read(dirs).find(job.key)["state"] == "intent"  # type: ignore[index]

    broker.clock.advance(1_000)
    assert manager.probe_offline_dirs() == [dirs[1]]
    assert CommitLog.read(dirs).find(job.key)["state"] == "committed"  # type: ignore[index]
    assert manager.append(TopicPartition("t", 0), batch(1)).first_offset == 3  # after the whole job
    assert [len(read_offsets(manager.log(TopicPartition("t", p)))) for p in range(2)] == [4, 3]


def dead_lease() -> Lease:
    driver = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    lease = process_lease(driver.pid)
    driver.kill()
    driver.wait()
    return lease


def test_a_restarted_streaming_driver_keeps_the_staging_it_reuses_from_its_killed_predecessor(data: Path) -> None:
    """A streaming job's key (``query-<id>/batch-<n>``) is the same after a restart from the
    checkpoint: the killed driver's dir, with its dead lease, is reused by the new driver's tasks,
    which take it over; the next open must not delete their fresh files."""
    key = "query-q1/batch-3"
    staged_job(data, key, dead_lease())  # the killed driver staged batch 3
    job, refs = staged_job(data, key)  # the restarted driver (this process) stages it again
    assert read_lease(job_dir(job.staging_root, key)) == process_lease(os.getpid())
    open_dir(data).shutdown()  # e.g. another job's commit, or the broker starting
    assert (job_dir(job.staging_root, key) / "part-0.batches").exists()
    with open_dir(data) as manager:
        assert Committer(manager, [str(data)]).commit(job, refs).state == "published"


def test_a_lease_of_another_pid_namespace_or_boot_on_this_host_is_kept(data: Path) -> None:
    """Containers sharing a hostname number their processes apart: a driver alive in another pid
    namespace (or a lease of another kernel boot) looks dead here by its pid, and its staging
    must be kept."""
    lease = dead_lease()
    other_ns = os.stat("/proc/self/ns/pid").st_ino + 1
    for key, change in (("job-other-ns", {"pidns": other_ns}), ("job-other-boot", {"boot": "0" * 32})):
        job, _ = staged_job(data, key, lease)
        (job_dir(job.staging_root, key) / "owner.lease").write_bytes(
            json.dumps({**json.loads(lease.to_json()), **change}).encode())
    dead, _ = staged_job(data, "job-dead", lease)  # same namespace and boot: reclaimed
    open_dir(data).shutdown()
    assert job_dir(dead.staging_root, "job-other-ns").exists() and job_dir(dead.staging_root, "job-other-boot").exists()
    assert not job_dir(dead.staging_root, "job-dead").exists()


@pytest.mark.parametrize("stat", [b"", b"12 (x)", b"12 (x) R 1 2", b"12 (x) " + b"z " * 30, b"no parenthesis"])
def test_a_process_stat_that_cannot_be_parsed_gives_no_start_time(stat: bytes) -> None:
    assert parse_stat(stat) is None
