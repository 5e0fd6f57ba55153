"""A damaged or missing topic registry never resets a topic's configs (and so never lets retention
delete what a topic keeps): each partition dir holds a copy of its topic's entry
(``tidelog-topic.json``), the newer of the two wins, a damaged registry is kept aside and the
registry is rewritten with a higher epoch. Where nothing recorded a topic's configs, retention and
cleaning hold until an operator confirms them.

The data: a compacted topic and a ``retention.ms=-1`` topic whose records are 30 days old, so the
default configs (delete, 7 days) would delete every one of them.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from types import MappingProxyType

import pytest
from manager_helpers import T0, Opener, batch, registry, tp

from tidelog.manager.topic_copies import TOPIC_COPY_FILE, read_topic_copy
from tidelog.manager.topics import REGISTRY_FILE, RegistryState, TopicRecord, read_newest_registry, write_registry
from tidelog.storage.metadata import new_topic_id

DAY_MS = 86_400_000
OLD = T0 - 30 * DAY_MS
TOPICS = {"compacted": {"cleanup.policy": "compact"}, "forever": {"retention.ms": "-1"}}
RECORDS = 5


def fill(broker: Opener, dirs: list[Path]) -> int:
    """Both topics, two partitions each, 30-day-old records; returns the registry's epoch."""
    manager = broker.open(dirs)
    for name, configs in TOPICS.items():
        manager.create_topic(name, 2, configs)
        for partition in range(2):
            manager.append(tp(name, partition), batch(RECORDS, timestamp=OLD))
    manager.shutdown()
    return registry(dirs[0])["epoch"]


def cut_in_half(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


DAMAGE: dict[str, Callable[[Path], None]] = {
    "cut-in-half": cut_in_half,
    "deleted": Path.unlink,
    "garbage": lambda path: path.write_bytes(os.urandom(300)),
}


def records_kept(manager) -> list[int]:
    return [lg.log_end_offset - lg.log_start_offset for _, lg in manager.logs()]


@pytest.mark.parametrize("damage", DAMAGE)
def test_a_damaged_or_missing_registry_loses_no_config_and_no_record(broker: Opener, one_dir: list[Path],
                                                                     damage: str) -> None:
    epoch = fill(broker, one_dir)
    DAMAGE[damage](one_dir[0] / REGISTRY_FILE)

    manager = broker.open(one_dir)
    for name, configs in TOPICS.items():
        assert manager.topic_overrides(name) == configs
        assert not manager.describe_topic(name).configs_unconfirmed
    assert manager.log(tp("compacted")).config.compact
    assert all(plan.segments == () for plan in manager.run_retention())
    assert records_kept(manager) == [RECORDS] * 4
    assert registry(one_dir[0])["epoch"] > epoch  # never rewritten with a lower epoch
    kept = list(one_dir[0].glob(REGISTRY_FILE + ".damaged-*"))
    assert len(kept) == (0 if damage == "deleted" else 1)  # what was there is never overwritten
    manager.shutdown()
    assert broker.open(one_dir).topic_overrides("compacted") == TOPICS["compacted"]


def test_with_registry_and_copies_lost_retention_and_cleaning_hold_until_confirmed(broker: Opener,
                                                                                   one_dir: list[Path]) -> None:
    fill(broker, one_dir)
    cut_in_half(one_dir[0] / REGISTRY_FILE)
    for copy in one_dir[0].glob(f"*/{TOPIC_COPY_FILE}"):
        copy.unlink()

    manager = broker.open(one_dir)
    assert manager.cleaner is not None
    for name in TOPICS:
        described = manager.describe_topic(name)
        assert described.configs_unconfirmed and dict(described.configs) == {}
    plans = manager.run_retention()
    assert [plan.segments for plan in plans] == [()] * 4
    assert all("tidelog topics confirm-configs" in plan.reasons[0] for plan in plans)
    assert {str(manager.cleaner.manager.state_of(t)) for t, _ in manager.logs()} == {"paused (1)"}
    assert records_kept(manager) == [RECORDS] * 4
    manager.shutdown()

    manager = broker.open(one_dir)  # the hold survives a restart
    assert manager.describe_topic("forever").configs_unconfirmed
    manager.alter_topic_config("forever", {"retention.ms": "-1"})
    assert manager.describe_topic("forever").configs_unconfirmed  # setting configs is not confirming them
    assert manager.confirm_topic_configs("forever")
    assert not manager.confirm_topic_configs("forever")
    assert manager.cleaner is not None and manager.cleaner.manager.state_of(tp("forever")) is None
    assert str(manager.cleaner.manager.state_of(tp("compacted"))) == "paused (1)"
    assert all(plan.segments == () for plan in manager.run_retention("forever"))
    manager.shutdown()

    manager = broker.open(one_dir)
    assert not manager.describe_topic("forever").configs_unconfirmed
    assert manager.describe_topic("compacted").configs_unconfirmed
    copy = read_topic_copy(one_dir[0] / "forever-1")
    assert copy is not None and dict(copy.configs) == {"retention.ms": "-1"} and not copy.unconfirmed


def test_a_partition_copy_newer_than_the_registry_wins(broker: Opener, one_dir: list[Path]) -> None:
    """A registry put back from a backup, or a copy that missed a change: the newer entry wins."""
    manager = broker.open(one_dir)
    manager.create_topic("t", 2, {"retention.ms": "-1"})
    manager.shutdown()
    older = (one_dir[0] / REGISTRY_FILE).read_bytes()
    manager = broker.open(one_dir)
    manager.alter_topic_config("t", {"retention.ms": "123456"})
    epoch = registry(one_dir[0])["epoch"]
    manager.shutdown()
    (one_dir[0] / REGISTRY_FILE).write_bytes(older)

    manager = broker.open(one_dir)
    assert manager.topic_overrides("t") == {"retention.ms": "123456"}
    assert manager.log(tp("t", 1)).config.retention_ms == 123456
    assert registry(one_dir[0])["epoch"] > epoch


def test_a_stale_partition_copy_is_rewritten_from_the_registry(broker: Opener, one_dir: list[Path]) -> None:
    """A crash between the registry write (the commit point) and the copies: the copy catches up."""
    manager = broker.open(one_dir)
    manager.create_topic("t", 1, {"retention.ms": "1000"})
    copy = one_dir[0] / "t-0" / TOPIC_COPY_FILE
    stale = copy.read_bytes()
    manager.alter_topic_config("t", {"retention.ms": "2000"})
    manager.shutdown()
    copy.write_bytes(stale)

    manager = broker.open(one_dir)
    assert manager.topic_overrides("t") == {"retention.ms": "2000"}
    restored = read_topic_copy(one_dir[0] / "t-0")
    assert restored is not None and dict(restored.configs) == {"retention.ms": "2000"}
    assert restored.epoch == registry(one_dir[0])["topics"]["t"]["epoch"]


def test_a_missing_partition_of_a_restored_topic_is_not_created_empty(broker: Opener, one_dir: list[Path]) -> None:
    """Without the registry, the log dir of a missing partition is unknown (it may be in a log dir
    left out for this start): it is reported offline, never recreated empty."""
    manager = broker.open(one_dir)
    manager.create_topic("t", 2, {"retention.ms": "-1"})
    manager.shutdown()
    (one_dir[0] / REGISTRY_FILE).unlink()
    (one_dir[0] / "t-1").rename(one_dir[0].parent / "t-1.elsewhere")

    manager = broker.open(one_dir)
    described = manager.describe_topic("t")
    assert described.partition_count == 2 and [p.topic_partition.partition for p in described.partitions] == [0]
    assert "not created empty" in described.offline[0].reason
    assert not (one_dir[0] / "t-1").exists()


def test_partitions_added_to_a_held_topic_are_held_too(broker: Opener, one_dir: list[Path]) -> None:
    fill(broker, one_dir)
    (one_dir[0] / REGISTRY_FILE).unlink()
    for copy in one_dir[0].glob(f"*/{TOPIC_COPY_FILE}"):
        copy.unlink()
    manager = broker.open(one_dir)
    manager.create_partitions("forever", 3)
    assert manager.cleaner is not None and str(manager.cleaner.manager.state_of(tp("forever", 2))) == "paused (1)"
    assert manager.run_retention("forever")[2].reasons[0].startswith("retention and cleaning paused")
    assert manager.confirm_topic_configs("forever")
    assert manager.cleaner.manager.state_of(tp("forever", 2)) is None


def test_a_registry_cut_short_keeps_its_epoch_for_the_next_write(tmp_path: Path) -> None:
    """The epoch is the second key: a copy cut short still tells how high the next epoch must be,
    even when no partition copy carries it (the last change was a deletion)."""
    state = RegistryState(41, MappingProxyType({"t": TopicRecord("t", new_topic_id(), 1, epoch=40)}))
    write_registry([tmp_path], state)
    path = tmp_path / REGISTRY_FILE
    path.write_bytes(path.read_bytes()[:30])
    read = read_newest_registry([tmp_path])
    assert (read.state, read.floor_epoch, dict(read.damaged)) == (RegistryState(), 41, {tmp_path: 41})
    path.write_bytes(b"\x00" * 64)
    assert dict(read_newest_registry([tmp_path]).damaged) == {tmp_path: None}


def test_a_registry_rewrite_at_start_up_checks_each_partition_copy_once(broker: Opener, one_dir: list[Path],
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Start-up checks every partition's copy: the registry rewrite (every topic restored from its
    copies) must not check them again before the final sync does."""
    import tidelog.manager.registry_sync as where

    fill(broker, one_dir)
    (one_dir[0] / REGISTRY_FILE).unlink()
    checked: list[Path] = []
    real = where.copy_matches

    def counting(partition_dir: Path, expected: bytes) -> bool:
        checked.append(partition_dir)
        return real(partition_dir, expected)

    monkeypatch.setattr(where, "copy_matches", counting)
    manager = broker.open(one_dir)
    assert manager.topic_overrides("forever") == TOPICS["forever"]
    assert sorted(checked) == sorted(lg.dir for _, lg in manager.logs())  # one check per partition
    for _, lg in manager.logs():
        copy = read_topic_copy(lg.dir)
        assert copy is not None and copy.epoch == registry(one_dir[0])["topics"][lg.topic_partition.topic]["epoch"]
