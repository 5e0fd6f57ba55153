"""The broker-side commit (:mod:`tidelog.manager.live_commit`) on a live LogManager: the race
between an append already past the manager's checks and the fence, the high watermark held until
the committed entry is durable, a failed commit rolled back, idempotence by job key."""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path

import pytest
from crc32c import crc32c
from manager_helpers import batch

from tidelog.errors import LogDirOfflineError, StorageError
from tidelog.manager import LogManager
from tidelog.manager.live_commit import LiveCommits, LiveCommitter
from tidelog.manager.staged_commit import Job
from tidelog.records.layout import RECORD_BATCH_OVERHEAD
from tidelog.storage.commit_log import COMMITTED, INTENT, ROLLED_BACK, CommitLog, StagedBatch
from tidelog.storage.config import BrokerConfig
from tidelog.topic_partition import TopicPartition

TP = TopicPartition("t", 0)


def now_batch(count: int) -> bytes:
    return batch(count, timestamp=int(time.time() * 1000))


def stage(live: LiveCommits, key: str, batches: list[tuple[int, bytes]]) -> list[tuple[str, StagedBatch]]:
    name, position, refs = "part-00000-attempt-0-task-1.batches", 0, []
    for i, (partition, data) in enumerate(batches):
        live.stage(key, name, position, data, last=i == len(batches) - 1)
        refs.append((name, StagedBatch("t", partition, position, len(data), int.from_bytes(data[57:61], "big"),
                                       crc32c(data[RECORD_BATCH_OVERHEAD:]), False)))
        position += len(data)
    return refs


@pytest.fixture
def manager(tmp_path: Path) -> LogManager:
    opened = LogManager.open(BrokerConfig.from_properties({}), [tmp_path / "data"])
    opened.create_topic("t", 2)
    yield opened
    opened.shutdown()


def test_an_append_past_the_checks_before_the_fence_cannot_land_inside_the_job(manager: LogManager) -> None:
    """An append that passed the manager's lookup, then waits for the log's lock while the
    commit fences the log and reads its start, fails at the lock: nothing lands after start but
    the job."""
    live = LiveCommits(manager)
    key = f"job-{uuid.uuid4().hex}"
    refs = stage(live, key, [(0, now_batch(3)), (0, now_batch(2))])
    target = manager.log(TP)
    outcome: list[object] = []
    target.lock.acquire()  # the racing append blocks at the lock, past every check of the manager
    racer = threading.Thread(target=lambda: outcome.append(_try_append(manager)))
    racer.start()
    time.sleep(0.1)  # time to reach the lock (an RLock shows no waiters); wherever it is, the lock decides
    committer = LiveCommitter(manager, live.log_dirs)
    committer._key = key
    start = committer.start_offset(TP)  # fence set and start read, the lock held by this thread meanwhile
    target.lock.release()
    racer.join(5)
    assert isinstance(outcome[0], LogDirOfflineError) and "staged commit" in str(outcome[0])
    committer.release()
    assert start == 0 and target.log_end_offset == 0
    assert live.commit(key, refs).ranges == {"t-0": (0, 5)}
    manager.append(TP, now_batch(1))  # the fence is gone
    assert target.log_end_offset == 6


def _try_append(manager: LogManager) -> object:
    try:
        return manager.append(TP, now_batch(1))
    except LogDirOfflineError as e:
        return e


def test_the_high_watermark_stays_at_start_until_the_job_is_committed(manager: LogManager) -> None:
    live = LiveCommits(manager)
    key = f"job-{uuid.uuid4().hex}"
    refs = stage(live, key, [(0, now_batch(3)), (1, now_batch(2)), (0, now_batch(1))])
    seen: list[tuple[int, int, str | None]] = []
    committer = LiveCommitter(manager, live.log_dirs)
    original = committer.append

    def watching(tp: TopicPartition, data: bytearray) -> None:
        original(tp, data)
        entry = CommitLog.read(live.log_dirs).find(key)
        seen.append((manager.offsets(tp).high_watermark, manager.offsets(tp).log_end_offset,
                     entry["state"] if entry else None))

    committer.append = watching  # type: ignore[method-assign]
    assert committer.commit(Job(key, live.staging_root), refs).state == "published"
    assert all(hw == 0 and state == INTENT for hw, _, state in seen)  # appended, not visible
    assert [manager.offsets(TopicPartition("t", p)).high_watermark for p in (0, 1)] == [4, 2]


def test_a_commit_that_fails_halfway_is_rolled_back_and_says_so(manager: LogManager) -> None:
    live = LiveCommits(manager)
    key = f"job-{uuid.uuid4().hex}"
    good = now_batch(2)
    refs = stage(live, key, [(0, good), (1, good)])
    bad = [refs[0], (refs[1][0], StagedBatch("t", 1, refs[1][1].position, refs[1][1].size, 2, 12345, False))]
    with pytest.raises(StorageError, match="damaged"):  # the second partition's batch fails its fingerprint
        live.commit(key, bad)
    entry = CommitLog.read(live.log_dirs).find(key)
    assert entry is not None and entry["state"] == ROLLED_BACK
    assert [manager.offsets(TopicPartition("t", p)).log_end_offset for p in (0, 1)] == [0, 0]
    manager.append(TP, now_batch(1))  # fences lifted
    with pytest.raises(StorageError, match="rolled back"):
        live.commit(key, refs)


def test_a_commit_repeated_is_already_committed(manager: LogManager) -> None:
    live = LiveCommits(manager)
    key = f"job-{uuid.uuid4().hex}"
    refs = stage(live, key, [(0, now_batch(2))])
    assert live.commit(key, refs).state == "published"
    assert live.commit(key, refs).state == "already committed"
    assert CommitLog.read(live.log_dirs).find(key)["state"] == COMMITTED


def test_a_new_writer_of_a_staged_file_replaces_what_an_earlier_one_left(manager: LogManager) -> None:
    """A restarted streaming query stages its batch under the same job key, and its task may
    reuse a file name its killed predecessor wrote: the first chunk starts the file over, and a
    retried chunk replaces itself."""
    live = LiveCommits(manager)
    key = f"query-{uuid.uuid4()}/batch-3"
    stage(live, key, [(0, now_batch(5)), (0, now_batch(5))])  # the killed predecessor's, longer
    refs = stage(live, key, [(0, now_batch(2))])
    live.stage(key, refs[0][0], 0, now_batch(2), True)  # the same chunk again (a lost response)
    assert live.commit(key, refs, key.split("/")[0].removeprefix("query-"), 3).ranges == {"t-0": (0, 2)}
    with pytest.raises(Exception, match="chunks must come in order"):
        live.stage(key, refs[0][0], 10_000, b"x", False)


def test_an_append_moves_the_high_watermark_to_its_own_end_not_past_a_commit_that_followed_it(
        manager: LogManager, monkeypatch: pytest.MonkeyPatch) -> None:
    """A produce appended just before the fence moves the high watermark after its lock hold; by
    then the commit may have appended the job's batches (without moving it). The produce must move
    it to its own end only, or readers would see part of the job before it is committed."""
    target = manager.log(TP)
    real = target.append_as_leader

    def commit_slips_in(records, **kwargs):  # type: ignore[no-untyped-def]
        info = real(records, **kwargs)  # the produce's append is done, its lock released
        with target.lock:  # what LiveCommitter.append does: the job's batch, high watermark untouched
            real(now_batch(5))
        return info

    monkeypatch.setattr(target, "append_as_leader", commit_slips_in)
    info = manager.append(TP, now_batch(3))
    assert target.log_end_offset == 8
    assert target.high_watermark == info.next_offset == 3
