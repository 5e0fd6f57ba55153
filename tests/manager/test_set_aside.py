"""Partitions and dirs that do not load are set aside, the rest loads (Kafka would take the whole log
dir offline). A set-aside partition is reported, offline to reads and appends, and keeps its
checkpoint entries so nothing resurfaces once it is repaired.

The tests run as root, so ``chmod 000`` cannot make a partition unreadable: ``break_partition``
puts a directory where its first ``.log`` is, which makes ``Log.open`` fail.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from manager_helpers import (
    Opener,
    batch,
    break_partition,
    crash,
    high_watermarks,
    log_start_offsets,
    read_offsets,
    recovery_points,
    repair_partition,
    tp,
)

from tidelog.errors import LogDirOfflineError
from tidelog.manager import LogManager
from tidelog.storage.checkpoints import LOG_START_OFFSET_CHECKPOINT_FILE, OffsetCheckpointFile
from tidelog.storage.log import Log
from tidelog.storage.metadata import PartitionMetadataFile, new_topic_id


def two_partitions_with_checkpoints(broker: Opener, dirs: list[Path]) -> None:
    """``foo-0`` and ``foo-1`` (10 records each); foo-1 flushed, its log start at 4, all three
    checkpoints written by a clean shutdown."""
    manager = broker.open(dirs)
    manager.create_topic("foo", 2)
    for partition in (0, 1):
        for _ in range(10):
            manager.append(tp("foo", partition), batch(1))
    manager.delete_records(tp("foo", 1), 4)
    manager.shutdown()


def test_other_partitions_load_and_the_bad_one_is_reported(broker: Opener, one_dir: list[Path]) -> None:
    two_partitions_with_checkpoints(broker, one_dir)
    break_partition(one_dir[0] / "foo-1")
    manager = broker.open(one_dir)

    [aside] = manager.set_aside()
    assert aside.path == one_dir[0] / "foo-1" and aside.topic_partition == tp("foo", 1)
    assert "Is a directory" in aside.reason and "00000000000000000000.log" in aside.reason
    assert read_offsets(manager.log(tp("foo", 0))) == list(range(10))

    described = manager.describe_topic("foo")
    assert described.partition_count == 2
    assert [p.topic_partition for p in described.partitions] == [tp("foo", 0)]
    assert described.offline == (aside,)
    assert manager.get_log(tp("foo", 1)) is None
    with pytest.raises(LogDirOfflineError, match="foo-1 is offline") as raised:
        manager.log(tp("foo", 1))
    assert raised.value.error_code == 56
    with pytest.raises(LogDirOfflineError):
        manager.append(tp("foo", 1), batch(1))
    [info] = manager.log_dirs()
    assert info.set_aside == (aside,) and [p.topic_partition for p in info.partitions] == [tp("foo", 0)]


def test_checkpoint_rewrites_keep_the_set_aside_partition_entries(broker: Opener, one_dir: list[Path]) -> None:
    two_partitions_with_checkpoints(broker, one_dir)
    before = (recovery_points(one_dir[0]), log_start_offsets(one_dir[0]), high_watermarks(one_dir[0]))
    assert before[0][tp("foo", 1)] == 10 and before[1] == {tp("foo", 1): 4} and before[2][tp("foo", 1)] == 10
    aside = break_partition(one_dir[0] / "foo-1")

    manager = broker.open(one_dir)
    manager.append(tp("foo", 0), batch(1))
    manager.log(tp("foo", 0)).flush()
    manager.checkpoint_recovery_points()
    manager.checkpoint_log_start_offsets()
    manager.checkpoint_high_watermarks()
    manager.shutdown()
    assert recovery_points(one_dir[0]) == {tp("foo", 0): 11, tp("foo", 1): 10}
    assert log_start_offsets(one_dir[0]) == {tp("foo", 1): 4}
    assert high_watermarks(one_dir[0]) == {tp("foo", 0): 11, tp("foo", 1): 10}

    repair_partition(aside)
    repaired = broker.open(one_dir)
    assert repaired.set_aside() == []
    assert read_offsets(repaired.log(tp("foo", 1))) == list(range(4, 10)), "deleted records resurfaced"


def test_unparseable_and_renamed_dirs_are_set_aside_without_a_partition(broker: Opener, one_dir: list[Path]) -> None:
    log_dir = one_dir[0]
    two_partitions_with_checkpoints(broker, one_dir)
    (log_dir / "notapartition").mkdir()
    (log_dir / "foo-x").mkdir()
    (log_dir / f"foo-0.{'a' * 32}-future").mkdir()
    (log_dir / f"foo-3.{'b' * 32}-stray").mkdir()
    (log_dir / "__cluster_metadata-0").mkdir()  # KRaft's metadata log: skipped, as Kafka does
    (log_dir / "stray-file").write_text("not a dir")

    manager = broker.open(one_dir)
    found = {s.path.name: s for s in manager.set_aside()}
    assert sorted(found) == sorted(["notapartition", "foo-x", f"foo-0.{'a' * 32}-future", f"foo-3.{'b' * 32}-stray"])
    assert all(s.topic_partition is None for s in found.values())
    assert "numeric partition" in found["notapartition"].reason
    assert "future or stray" in found[f"foo-3.{'b' * 32}-stray"].reason
    assert [p for p, _ in manager.logs()] == [tp("foo", 0), tp("foo", 1)]
    assert manager.topics() == ["foo"]
    assert (log_dir / "notapartition").is_dir() and (log_dir / "__cluster_metadata-0").is_dir()


def test_adding_partitions_keeps_a_set_aside_partition_offline(broker: Opener, one_dir: list[Path]) -> None:
    two_partitions_with_checkpoints(broker, one_dir)
    break_partition(one_dir[0] / "foo-0")
    manager = broker.open(one_dir)
    assert manager.describe_topic("foo").partition_count == 2
    grown = manager.create_partitions("foo", 3)
    assert [p.topic_partition for p in grown.partitions] == [tp("foo", 1), tp("foo", 2)]
    assert [s.topic_partition for s in grown.offline] == [tp("foo", 0)]


def test_set_aside_partition_of_an_adopted_topic_counts(broker: Opener, one_dir: list[Path]) -> None:
    one_dir[0].mkdir()
    topic_id = new_topic_id()
    for partition in (0, 1):
        lg = Log.open(one_dir[0] / f"foo-{partition}")
        lg.append_as_leader(batch(2))
        lg.close()
        PartitionMetadataFile(lg.dir).write(topic_id)
    break_partition(one_dir[0] / "foo-1")

    manager = broker.open(one_dir)
    described = manager.describe_topic("foo")
    assert described.partition_count == 2
    assert [s.topic_partition for s in described.offline] == [tp("foo", 1)]


def test_deleting_a_topic_also_removes_its_set_aside_partition(broker: Opener, one_dir: list[Path]) -> None:
    two_partitions_with_checkpoints(broker, one_dir)
    break_partition(one_dir[0] / "foo-1")
    manager = broker.open(one_dir)
    manager.delete_topic("foo")
    assert manager.set_aside() == []
    assert not (one_dir[0] / "foo-1").exists()
    recreated = manager.create_topic("foo", 2)
    assert [p.log_end_offset for p in recreated.partitions] == [0, 0]


def test_set_aside_partition_is_recovered_once_repaired_after_a_crash(broker: Opener, one_dir: list[Path]) -> None:
    manager = broker.open(one_dir)
    manager.create_topic("foo", 2)
    for _ in range(3):
        manager.append(tp("foo", 1), batch(2))
    valid = manager.log(tp("foo", 1)).size
    crash(manager)
    with (one_dir[0] / "foo-1" / "00000000000000000000.log").open("ab") as f:
        f.write(batch(2)[:30])  # a torn write the crash left
    aside = break_partition(one_dir[0] / "foo-1")
    broker.open(one_dir).shutdown()  # unclean start, foo-1 set aside, clean shutdown

    repair_partition(aside)
    repaired = broker.open(one_dir)
    lg = repaired.log(tp("foo", 1))
    assert lg.had_clean_shutdown is False
    assert lg.size == valid


def test_duplicate_partition_dirs_in_two_log_dirs_are_both_set_aside(broker: Opener, log_dirs: list[Path]) -> None:
    """Kafka refuses to start; tidelog sets every copy aside (which one is right is the operator's
    call) and serves the rest."""
    two_partitions_with_checkpoints(broker, log_dirs[:2])
    [(source, other)] = [(d, o) for d, o in (log_dirs[:2], log_dirs[1::-1]) if (d / "foo-0").exists()]
    shutil.copytree(source / "foo-0", other / "foo-0")
    manager = broker.open(log_dirs[:2])
    aside = manager.set_aside()
    assert sorted(a.path for a in aside) == sorted([source / "foo-0", other / "foo-0"])
    assert all(a.topic_partition == tp("foo", 0) and "found in several log dirs" in a.reason for a in aside)
    with pytest.raises(LogDirOfflineError):
        manager.log(tp("foo", 0))
    assert read_offsets(manager.log(tp("foo", 1))) == list(range(4, 10))


def test_duplicate_partition_dir_keeps_its_checkpoint_entries(broker: Opener, log_dirs: list[Path]) -> None:
    manager = broker.open(log_dirs[:2])
    manager.create_topic("foo", 2)
    for _ in range(10):
        manager.append(tp("foo", 1), batch(1))
    manager.delete_records(tp("foo", 1), 4)
    home = manager.log(tp("foo", 1)).dir.parent
    manager.shutdown()
    other = log_dirs[1] if home == log_dirs[0] else log_dirs[0]
    shutil.copytree(home / "foo-1", other / "foo-1")  # copied by hand with its checkpoint entry
    OffsetCheckpointFile(other / LOG_START_OFFSET_CHECKPOINT_FILE).write({**log_start_offsets(other), tp("foo", 1): 4})

    broker.open(log_dirs[:2]).shutdown()
    assert [log_start_offsets(d).get(tp("foo", 1)) for d in log_dirs[:2]] == [4, 4]


def test_open_with_no_loadable_partition_still_serves_new_topics(broker: Opener, one_dir: list[Path]) -> None:
    two_partitions_with_checkpoints(broker, one_dir)
    for partition in (0, 1):
        break_partition(one_dir[0] / f"foo-{partition}")
    manager: LogManager = broker.open(one_dir)
    assert len(manager.set_aside()) == 2 and manager.logs() == []
    manager.create_topic("fresh", 1)
    manager.append(tp("fresh"), batch(2))
    assert read_offsets(manager.log(tp("fresh"))) == [0, 1]


def test_partition_that_cannot_be_created_at_open_is_set_aside(broker: Opener, one_dir: list[Path]) -> None:
    two_partitions_with_checkpoints(broker, one_dir)
    shutil.rmtree(one_dir[0] / "foo-1")
    (one_dir[0] / "foo-1").write_text("a file where the partition dir should be")
    manager = broker.open(one_dir)
    assert [s.topic_partition for s in manager.set_aside()] == [tp("foo", 1)]
    assert read_offsets(manager.log(tp("foo", 0))) == list(range(10))


def test_partition_dir_with_another_topic_id_is_set_aside(broker: Opener, one_dir: list[Path]) -> None:
    two_partitions_with_checkpoints(broker, one_dir)
    PartitionMetadataFile(one_dir[0] / "foo-0").write(new_topic_id())  # e.g. copied in from another cluster
    manager = broker.open(one_dir)
    assert [s.topic_partition for s in manager.set_aside()] == [tp("foo", 0)]
    assert manager.get_log(tp("foo", 0)) is None


@pytest.mark.parametrize("altered", [False, True], ids=["created", "config-altered"])
def test_partition_of_a_log_dir_left_out_is_offline_not_recreated(broker: Opener, log_dirs: list[Path],
                                                                   altered: bool) -> None:
    """The registry records each partition's log dir: a dir missing from log.dirs for one start
    leaves its partitions offline instead of recreating them empty elsewhere (which would give
    two copies once the dir comes back). Altering the topic's config keeps that record (it once
    dropped it)."""
    manager = broker.open(log_dirs[:2])
    manager.create_topic("foo", 2)
    if altered:
        manager.alter_topic_config("foo", {"retention.ms": "5000"})
    homes = {p: manager.log(tp("foo", p)).dir.parent for p in (0, 1)}
    manager.shutdown()
    missing = next(p for p, home in homes.items() if home == log_dirs[1])

    manager = broker.open(log_dirs[:1])
    assert [a.topic_partition for a in manager.set_aside()] == [tp("foo", missing)]
    assert "not among the log dirs opened" in manager.set_aside()[0].reason
    with pytest.raises(LogDirOfflineError):
        manager.log(tp("foo", missing))
    assert not (log_dirs[0] / f"foo-{missing}").exists()
    manager.shutdown()

    manager = broker.open(log_dirs[:2])
    assert manager.set_aside() == [] and len(manager.logs("foo")) == 2


def test_stray_partition_dir_of_a_registered_topic_is_set_aside(broker: Opener, one_dir: list[Path]) -> None:
    manager = broker.open(one_dir)
    manager.create_topic("foo", 2)
    manager.shutdown()
    Log.open(one_dir[0] / "foo-7").close()

    manager = broker.open(one_dir)
    assert manager.partitions("foo") == [0, 1]
    [aside] = manager.set_aside()
    assert aside.path == one_dir[0] / "foo-7" and "stray partition dir" in aside.reason
