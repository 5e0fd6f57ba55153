"""The read side of the staged-commit log (storage/commit_log.py): a lockless reader's sequence
lock on the file's ``generation``, and its bound. The protocol itself is tested in
``tests/manager/test_staged_commit.py``."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tidelog.errors import StorageError
from tidelog.manager import LogManager
from tidelog.records import BatchBuilder
from tidelog.storage import commit_log
from tidelog.storage.commit_log import COMMIT_LOG_FILE, CommitLog, PendingJobs
from tidelog.storage.config import BrokerConfig
from tidelog.storage.log_view import LogView, PartitionView
from tidelog.topic_partition import TopicPartition

TP = TopicPartition("t", 0)


def intent(start: int) -> dict[str, object]:
    return {"id": "job", "state": "intent", "partitions": [{"topic": TP.topic, "partition": TP.partition, "start": start}]}


def test_a_rewrite_that_keeps_inode_size_and_mtime_is_still_a_change(tmp_path: Path) -> None:
    """A replaced file may get the inode number its predecessor freed, in the same mtime tick, at
    the same size: only the generation tells the reader that a job started meanwhile."""
    commits = CommitLog(tmp_path / COMMIT_LOG_FILE, [intent(10)], {}, generation=4)
    commits.write()
    jobs = PendingJobs([tmp_path])
    generations, starts = jobs.snapshot()
    assert starts == {TP: 10}
    path, before = commits.path, commits.path.stat()
    rewritten = path.read_bytes().replace(b'"generation":5', b'"generation":6').replace(b'"start":10', b'"start":12')
    with path.open("r+b") as f:
        f.write(rewritten)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = path.stat()
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == (before.st_ino, before.st_size, before.st_mtime_ns)
    assert not jobs.unchanged(generations)
    assert jobs.snapshot()[1] == {TP: 12}


def test_an_absent_or_unreadable_file_hides_nothing(tmp_path: Path) -> None:
    jobs = PendingJobs([tmp_path])
    assert jobs.snapshot() == ((None,), {})
    (tmp_path / COMMIT_LOG_FILE).write_bytes(b"{not json")
    assert jobs.snapshot() == ((None,), {})


def test_a_reader_overtaken_by_a_write_on_every_read_gives_up_with_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    with LogManager.open(BrokerConfig.from_properties({}), [tmp_path]) as manager:
        manager.create_topic(TP.topic, 1)
        b = BatchBuilder(base_offset=0)
        b.append(0, 1_700_000_000_000, b"k", b"v")
        manager.append(TP, b.build())
    commits = CommitLog(tmp_path / COMMIT_LOG_FILE, [], {})
    walk_end = PartitionView._walk_end
    walks = []

    def walk_end_during_a_write(view: PartitionView) -> int:
        walks.append(1)
        commits.write()  # a writer always one step ahead of this reader
        return walk_end(view)

    monkeypatch.setattr(PartitionView, "_walk_end", walk_end_during_a_write)
    monkeypatch.setattr(commit_log, "MAX_CONSISTENT_READS", 5)  # test seam: fewer fsynced writes
    view = LogView([tmp_path])
    with pytest.raises(StorageError, match="changed during each of"):
        view.partition(TP).refresh()
    with pytest.raises(StorageError, match="changed during each of"):
        view.bounds()
    assert len(walks) == 2 * 5
