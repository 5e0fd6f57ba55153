"""The manager's remote retention (Kafka's RLMExpirationTask), on a file:// store and the fake clock:
retention.ms / retention.bytes over both tiers and DeleteRecords delete remote segments (the log
start offset raised and checkpointed first, a fresh reader of the store sees none of them), also
with copying off; remote.log.delete.on.disable and topic deletion delete the remote data, and a
deletion cut short finishes in the next process; explain says what goes next and why."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from manager_helpers import T0, Opener, batch, tp

from tidelog.manager import LogManager
from tidelog.remote.errors import RemoteStorageError
from tidelog.remote.metadata import TopicIdPartition, partition_prefix
from tidelog.remote.metadata_log import RemotePartitionMetadata
from tidelog.remote.partition_delete import (
    PENDING_PREFIX,
    REMOTE_DISABLED,
    TOPIC_DELETED,
    PendingDeletion,
    record_pending,
)
from tidelog.remote.store import open_store
from tidelog.storage.checkpoints import LOG_START_OFFSET_CHECKPOINT_FILE, OffsetCheckpointFile

sys.path.append(str(Path(__file__).parent.parent / "remote"))  # the remote tests' failing store
from remote_helpers import FlakyStore  # noqa: E402 - needs the path above

TOPIC = "orders"
TIERED = {"remote.storage.enable": "true", "segment.bytes": "400", "local.retention.bytes": "1"}
HOUR = 3_600_000


def tiered_props(uri: str, **extra: str) -> dict[str, str]:
    return {"remote.log.storage.system.enable": "true", "remote.log.storage.uri": uri, **extra}


def fresh_segments(uri: str, topic_id: str, partition: int = 0) -> list[tuple[int, int]]:
    """What any reader of the store sees (a fresh load, not the broker's cache)."""
    loaded = RemotePartitionMetadata.load(open_store(uri), TopicIdPartition(topic_id, tp(TOPIC, partition)))
    return [(m.start_offset, m.end_offset) for m in loaded.finished_segments()]


def objects(uri: str, prefix: str = "") -> set[str]:
    return {i.key for i in open_store(uri).list(prefix)}


def tiered_manager(broker: Opener, dirs: list[Path], uri: str, configs: dict[str, str] | None = None,
                   records: int = 20, timestamp: int = T0) -> tuple[LogManager, str]:
    manager = broker.open(dirs, tiered_props(uri))
    manager.create_topic(TOPIC, 1, {**TIERED, **(configs or {})})
    for _ in range(records):
        manager.append(tp(TOPIC), batch(timestamp=timestamp))
    manager.remote_tier.copy_pass()  # type: ignore[union-attr]
    return manager, manager.describe_topic(TOPIC).topic_id


def checkpointed_start(dirs: list[Path]) -> int | None:
    return OffsetCheckpointFile(dirs[0] / LOG_START_OFFSET_CHECKPOINT_FILE).read().get(tp(TOPIC))


def test_retention_ms_deletes_old_remote_segments_and_raises_the_log_start(broker: Opener, one_dir: list[Path],
                                                                        tmp_path: Path) -> None:
    uri = (tmp_path / "store").as_uri()
    manager, topic_id = tiered_manager(broker, one_dir, uri, {"retention.ms": str(HOUR), "local.retention.ms": "-2"})
    copied = fresh_segments(uri, topic_id)
    assert len(copied) >= 3
    tier = manager.remote_tier
    assert tier is not None
    assert tier.retention.expiration_pass() == {tp(TOPIC): tier.retention.last_plan(tp(TOPIC))}
    assert fresh_segments(uri, topic_id) == copied, "nothing is an hour old yet"

    broker.clock.advance(HOUR + 1)
    plans = tier.retention.expiration_pass()
    assert [(d.segment.start_offset, d.segment.end_offset) for d in plans[tp(TOPIC)].deletions] == copied
    log = manager.get_log(tp(TOPIC))
    assert log is not None and log.log_start_offset == copied[-1][1] + 1
    assert checkpointed_start(one_dir) == copied[-1][1] + 1, "the raised log start offset is checkpointed"
    assert fresh_segments(uri, topic_id) == []
    assert objects(uri, partition_prefix(TopicIdPartition(topic_id, tp(TOPIC)))) <= {
        k for k in objects(uri) if "/metadata/" in k}, "no segment object left"
    manager.run_retention()  # local copies below the new log start go too
    assert log.segments[0].base_offset >= log.log_start_offset


def test_retention_bytes_counts_both_tiers(broker: Opener, one_dir: list[Path], tmp_path: Path) -> None:
    uri = (tmp_path / "store").as_uri()
    manager, topic_id = tiered_manager(broker, one_dir, uri, {"local.retention.bytes": "-2"})
    copied = fresh_segments(uri, topic_id)
    log = manager.get_log(tp(TOPIC))
    assert log is not None
    seg_size = log.segments[0].size
    total = log.size  # every local segment still here: remote bytes + untiered (active) bytes
    manager.alter_topic_config(TOPIC, {"retention.bytes": str(total - seg_size)})
    plans = manager.remote_tier.retention.expiration_pass()  # type: ignore[union-attr]
    assert [(d.segment.start_offset, d.cause) for d in plans[tp(TOPIC)].deletions] == [(copied[0][0], "retention.bytes")]
    assert fresh_segments(uri, topic_id) == copied[1:]


def test_delete_records_then_retention_run_deletes_remote_segments_below(broker: Opener, one_dir: list[Path],
                                                                          tmp_path: Path) -> None:
    uri = (tmp_path / "store").as_uri()
    manager, topic_id = tiered_manager(broker, one_dir, uri)
    copied = fresh_segments(uri, topic_id)
    target = copied[1][0] + 1  # inside the second segment
    manager.delete_records(tp(TOPIC), target)
    plans = manager.run_retention()
    assert any(n.startswith("remote retention: 1 segment(s)") for n in plans[0].notes)
    assert fresh_segments(uri, topic_id) == copied[1:]
    assert manager.list_offsets(tp(TOPIC), -2).offset == target


def test_copy_disabled_is_read_only_but_total_retention_still_deletes(broker: Opener, one_dir: list[Path],
                                                                      tmp_path: Path) -> None:
    uri = (tmp_path / "store").as_uri()
    manager, topic_id = tiered_manager(broker, one_dir, uri, {"retention.ms": str(HOUR), "local.retention.ms": "-2",
                                                               "local.retention.bytes": "-2"})
    manager.alter_topic_config(TOPIC, {"remote.log.copy.disable": "true"})
    broker.clock.advance(HOUR + 1)
    manager.remote_tier._periodic_pass()  # type: ignore[union-attr]  # the scheduled task: copy, then expiration
    assert fresh_segments(uri, topic_id) == []


def test_explain_says_what_remote_retention_deletes_next(broker: Opener, one_dir: list[Path], tmp_path: Path) -> None:
    uri = (tmp_path / "store").as_uri()
    manager, topic_id = tiered_manager(broker, one_dir, uri, {"retention.ms": str(HOUR), "local.retention.ms": "-2"})
    [row] = manager.remote_tier.status()  # type: ignore[union-attr]
    assert row.remote_retention is not None and "within retention.ms=3600000" in row.summary(30000)
    assert "remote retention: nothing: oldest remote segment [0, " in row.summary(30000)
    broker.clock.advance(HOUR + 1)
    [row] = manager.remote_tier.status()  # type: ignore[union-attr]
    line = row.summary(30000)
    assert "remote retention: 3 segment(s) [0, " in line or "remote retention:" in line and "past retention.ms" in line
    assert row.remote_retention["deletions"][0]["cause"] == "retention.ms"  # type: ignore[index]
    json.dumps(row.remote_retention)  # plain types
    assert fresh_segments(uri, topic_id), "explaining deletes nothing"


def test_delete_on_disable_deletes_the_remote_data(broker: Opener, one_dir: list[Path], tmp_path: Path) -> None:
    uri = (tmp_path / "store").as_uri()
    manager, topic_id = tiered_manager(broker, one_dir, uri)
    manager.run_retention()  # local copies of copied segments go: only the remote tier has [0, local start)
    log = manager.get_log(tp(TOPIC))
    assert log is not None and log.log_start_offset == 0 < log.local_log_start_offset
    local_start = log.local_log_start_offset
    manager.alter_topic_config(TOPIC, {"remote.storage.enable": "false", "remote.log.delete.on.disable": "true"})
    assert log.log_start_offset == local_start, "Kafka's ConfigHandler: log start = local log start"
    tip = TopicIdPartition(topic_id, tp(TOPIC))
    assert objects(uri, partition_prefix(tip)) == set() and objects(uri, PENDING_PREFIX) == set()
    manager.shutdown()
    manager = broker.open(one_dir, tiered_props(uri))
    assert manager.get_log(tp(TOPIC)).log_start_offset == local_start  # type: ignore[union-attr]


def test_a_refused_disable_deletes_nothing(broker: Opener, one_dir: list[Path], tmp_path: Path) -> None:
    uri = (tmp_path / "store").as_uri()
    manager, topic_id = tiered_manager(broker, one_dir, uri)
    copied = fresh_segments(uri, topic_id)
    with pytest.raises(Exception, match="invalid to disable remote storage"):
        manager.alter_topic_config(TOPIC, {"remote.storage.enable": "false"})
    assert fresh_segments(uri, topic_id) == copied and objects(uri, PENDING_PREFIX) == set()


def test_topic_deletion_deletes_the_remote_data(broker: Opener, one_dir: list[Path], tmp_path: Path) -> None:
    uri = (tmp_path / "store").as_uri()
    manager, topic_id = tiered_manager(broker, one_dir, uri)
    assert objects(uri)
    manager.delete_topic(TOPIC)
    assert objects(uri) == set(), "every segment, the metadata log and the pending object are gone"


def test_a_topic_deletion_cut_short_is_finished_by_the_next_process(broker: Opener, one_dir: list[Path],
                                                                     tmp_path: Path) -> None:
    uri = (tmp_path / "store").as_uri()
    manager, topic_id = tiered_manager(broker, one_dir, uri)
    tier = manager.remote_tier
    assert tier is not None
    real = tier.store

    # the store goes down after the pending object is written
    tier.retention.store = FlakyStore(real, lambda op, _: None if op == "put" else "before")
    manager.delete_topic(TOPIC)  # the topic goes; its remote data waits
    assert objects(uri, PENDING_PREFIX) and objects(uri, partition_prefix(TopicIdPartition(topic_id, tp(TOPIC))))
    assert fresh_segments(uri, topic_id) == [], "readers already see no segment (one event, before the outage)"
    manager.shutdown()
    manager = broker.open(one_dir, tiered_props(uri))
    manager.remote_tier.retention.resume_pending()  # type: ignore[union-attr]  # the first pass does this
    assert objects(uri) == set()


def test_a_pending_deletion_whose_change_did_not_commit_is_dropped(broker: Opener, one_dir: list[Path],
                                                                    tmp_path: Path) -> None:
    uri = (tmp_path / "store").as_uri()
    manager, topic_id = tiered_manager(broker, one_dir, uri)
    copied = fresh_segments(uri, topic_id)
    record_pending(open_store(uri), PendingDeletion(TOPIC, topic_id, 1, TOPIC_DELETED))  # died before the commit
    manager.shutdown()
    manager = broker.open(one_dir, tiered_props(uri))
    manager.remote_tier.retention.resume_pending()  # type: ignore[union-attr]
    assert objects(uri, PENDING_PREFIX) == set() and fresh_segments(uri, topic_id) == copied


def test_remote_retention_and_topic_deletion_on_s3(broker: Opener, one_dir: list[Path], object_store: object,
                                                   bucket: str) -> None:
    credentials = object_store.credentials  # type: ignore[attr-defined]
    options = {"endpoint.url": credentials.endpoint_url, "access.key": credentials.access_key,
               "secret.key": credentials.secret_key, "region": credentials.region}
    uri = f"s3://{bucket}/tier"
    manager = broker.open(one_dir, tiered_props(uri, **{f"rsm.config.{k}": v for k, v in options.items()}))
    manager.create_topic(TOPIC, 1, {**TIERED, "retention.ms": str(HOUR), "local.retention.ms": "-2"})
    for _ in range(12):
        manager.append(tp(TOPIC), batch())
    tier = manager.remote_tier
    assert tier is not None
    tier.copy_pass()
    tip = TopicIdPartition(manager.describe_topic(TOPIC).topic_id, tp(TOPIC))
    copied = RemotePartitionMetadata.load(open_store(uri, options), tip).finished_segments()
    assert len(copied) >= 2
    broker.clock.advance(HOUR + 1)
    plans = tier.retention.expiration_pass()
    assert [d.segment.id for d in plans[tp(TOPIC)].deletions] == [s.id for s in copied]
    assert RemotePartitionMetadata.load(open_store(uri, options), tip).segments() == []
    assert not [i for i in open_store(uri, options).list("") if "/metadata/" not in i.key]
    manager.delete_topic(TOPIC)
    assert open_store(uri, options).list("") == []


def test_a_pass_checkpoints_once_before_deleting_from_every_partition(broker: Opener, one_dir: list[Path],
                                                                       tmp_path: Path) -> None:
    uri = (tmp_path / "store").as_uri()
    manager = broker.open(one_dir, tiered_props(uri))
    manager.create_topic(TOPIC, 3, {**TIERED, "retention.ms": str(HOUR), "local.retention.ms": "-2"})
    for p in range(3):
        for _ in range(12):
            manager.append(tp(TOPIC, p), batch())
    tier = manager.remote_tier
    assert tier is not None
    tier.copy_pass()
    topic_id = manager.describe_topic(TOPIC).topic_id
    assert all(fresh_segments(uri, topic_id, p) for p in range(3))
    real, seen = tier.retention.checkpoint_log_start_offsets, []

    def checkpoint() -> None:
        seen.append([len(fresh_segments(uri, topic_id, p)) for p in range(3)])
        real()

    tier.retention.checkpoint_log_start_offsets = checkpoint
    broker.clock.advance(HOUR + 1)
    plans = tier.retention.expiration_pass()
    assert len(seen) == 1 and all(seen[0]), "one checkpoint, before any remote segment went"
    assert sorted(plans) == [tp(TOPIC, p) for p in range(3)]
    assert [fresh_segments(uri, topic_id, p) for p in range(3)] == [[], [], []]

    def failing() -> None:
        raise OSError("disk gone")

    tier.retention.checkpoint_log_start_offsets = failing
    for _ in range(12):
        manager.append(tp(TOPIC, 1), batch())
    tier.copy_pass()
    broker.clock.advance(HOUR + 1)
    before = fresh_segments(uri, topic_id, 1)
    assert before
    with pytest.raises(OSError):
        tier.retention.expiration_pass()
    assert fresh_segments(uri, topic_id, 1) == before, "no checkpoint, no delete"


def test_a_pending_deletion_never_touches_a_topic_recreated_under_the_same_name(broker: Opener, one_dir: list[Path],
                                                                                tmp_path: Path) -> None:
    uri = (tmp_path / "store").as_uri()
    manager, old_id = tiered_manager(broker, one_dir, uri)
    tier = manager.remote_tier
    assert tier is not None
    real = tier.store

    # the outage hits the deletion of objects only
    tier.retention.store = FlakyStore(real, lambda op, _: "before" if op in ("delete", "delete_prefix") else None)
    manager.delete_topic(TOPIC)
    assert objects(uri, PENDING_PREFIX), "the old topic's deletion is pending"
    tier.retention.store = real
    manager.create_topic(TOPIC, 1, TIERED)  # same name, new topic id, tiered: its metadata gets cached
    for _ in range(20):
        manager.append(tp(TOPIC), batch())
    tier.copy_pass()
    new_id = manager.describe_topic(TOPIC).topic_id
    assert new_id != old_id
    copied = fresh_segments(uri, new_id)
    assert copied
    tier.retention.resume_pending()  # what the next pass does: finishes the OLD topic's deletion
    assert objects(uri, PENDING_PREFIX) == set()
    assert objects(uri, partition_prefix(TopicIdPartition(old_id, tp(TOPIC)))) == set()
    assert fresh_segments(uri, new_id) == copied, "the re-created topic keeps every remote segment"
    assert tier.copy_pass() is not None and tier.retention.last_error(tp(TOPIC)) is None
    log = manager.get_log(tp(TOPIC))
    assert log is not None and log.log_start_offset == 0


def test_a_pending_disable_never_moves_the_log_start_of_a_topic_recreated_under_the_same_name(
        broker: Opener, one_dir: list[Path], tmp_path: Path) -> None:
    uri = (tmp_path / "store").as_uri()
    manager, old_id = tiered_manager(broker, one_dir, uri)
    manager.delete_topic(TOPIC)
    manager.create_topic(TOPIC, 1, TIERED)  # same name, new topic id, tiered
    for _ in range(20):
        manager.append(tp(TOPIC), batch())
    manager.remote_tier.copy_pass()  # type: ignore[union-attr]
    manager.run_retention()  # the new topic's copied local segments go: [0, local start) is remote only
    new_id = manager.describe_topic(TOPIC).topic_id
    copied = fresh_segments(uri, new_id)
    # a disable with delete of the OLD topic whose deletion a crash cut short
    record_pending(open_store(uri), PendingDeletion(TOPIC, old_id, 1, REMOTE_DISABLED))
    manager.shutdown()
    manager = broker.open(one_dir, tiered_props(uri))
    log = manager.get_log(tp(TOPIC))
    assert log is not None and log.log_start_offset == 0 < log.local_log_start_offset
    manager.remote_tier.retention.resume_pending()  # type: ignore[union-attr]
    assert objects(uri, PENDING_PREFIX) == set()
    assert log.log_start_offset == 0, "the re-created topic's log start offset stays"
    assert fresh_segments(uri, new_id) == copied


def test_a_pass_racing_a_topic_deletion_keeps_its_pending_object(broker: Opener, one_dir: list[Path],
                                                                 tmp_path: Path) -> None:
    uri = (tmp_path / "store").as_uri()
    manager, topic_id = tiered_manager(broker, one_dir, uri)
    tier = manager.remote_tier
    assert tier is not None
    real_delete, seen = manager.topic_changes.delete_topic, []

    def delete_topic(name: str) -> None:  # the periodic pass's resume runs between the PUT and the commit
        tier.retention.resume_pending()
        seen.append(objects(uri, PENDING_PREFIX))
        real_delete(name)

    manager.topic_changes.delete_topic = delete_topic  # type: ignore[method-assign]
    manager.delete_topic(TOPIC)
    assert seen == [{PendingDeletion(TOPIC, topic_id, 1, TOPIC_DELETED).key}], \
        "a deletion in flight is not judged uncommitted and dropped"
    assert objects(uri) == set()


def test_a_deletion_failed_after_the_start_up_resume_is_retried_at_the_next_pass(broker: Opener, one_dir: list[Path],
                                                                                 tmp_path: Path) -> None:
    uri = (tmp_path / "store").as_uri()
    manager, topic_id = tiered_manager(broker, one_dir, uri)
    tier = manager.remote_tier
    assert tier is not None
    tier.retention.resume_pending()  # the first pass: nothing pending
    real = tier.store

    # the outage hits the deletion of objects only
    tier.retention.store = FlakyStore(real, lambda op, _: "before" if op in ("delete", "delete_prefix") else None)
    manager.delete_topic(TOPIC)
    assert objects(uri, PENDING_PREFIX)
    tier.retention.store = real
    tier._periodic_pass()  # the scheduled task, same process
    assert objects(uri) == set()


def test_a_deletion_refused_by_a_store_outage_says_which_topic_and_why(broker: Opener, one_dir: list[Path],
                                                                       tmp_path: Path) -> None:
    uri = (tmp_path / "store").as_uri()
    manager, topic_id = tiered_manager(broker, one_dir, uri)
    tier = manager.remote_tier
    assert tier is not None
    real = tier.store

    tier.retention.store = FlakyStore(real, lambda *_: "before")  # every call fails
    with pytest.raises(RemoteStorageError) as raised:
        manager.delete_topic(TOPIC)
    message = str(raised.value)
    assert f"topic {TOPIC}" in message and "not deleted" in message and "injected outage" in message
    assert manager.describe_topic(TOPIC).topic_id == topic_id, "the topic stays"
    with pytest.raises(RemoteStorageError, match=f"topic {TOPIC}.*remote.storage.enable is not turned off"):
        manager.alter_topic_config(TOPIC, {"remote.storage.enable": "false", "remote.log.delete.on.disable": "true"})
    assert manager.get_log(tp(TOPIC)).config.remote_storage_enable  # type: ignore[union-attr]


def test_metadata_forgotten_while_it_loads_is_not_cached(broker: Opener, one_dir: list[Path], tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A deletion's forget() racing a pass's first load: the pass fails for that partition with an
    error naming it (it raised a bare KeyError that ended the whole pass), and caches nothing."""
    from tidelog.manager import remote_tier

    uri = (tmp_path / "store").as_uri()
    manager = broker.open(one_dir, tiered_props(uri))
    manager.create_topic(TOPIC, 2, TIERED)
    for p in range(2):
        for _ in range(12):
            manager.append(tp(TOPIC, p), batch())
    tier = manager.remote_tier
    assert tier is not None
    real_load = RemotePartitionMetadata.load

    def load(store, tip, **kw):  # type: ignore[no-untyped-def]
        loaded = real_load(store, tip, **kw)
        if tip.partition == 0:
            tier.forget(tip.topic_partition)
        return loaded

    monkeypatch.setattr(remote_tier.RemotePartitionMetadata, "load", load)
    copied = tier.copy_pass()
    assert copied[tp(TOPIC, 0)] == 0 and copied[tp(TOPIC, 1)] > 0, "the other partition is copied"
    [row] = [r for r in tier.status(TOPIC) if r.topic_partition == tp(TOPIC, 0)]
    assert row.last_error is not None and f"{TOPIC}-0" in row.last_error and "deleted" in row.last_error
    assert tier._cached(tp(TOPIC, 0)) is None


def test_a_pending_disable_of_a_topic_with_no_live_log_waits(broker: Opener, one_dir: list[Path],
                                                             tmp_path: Path) -> None:
    """Whether a disable committed is read from the topic's live logs: with none live (their log
    dirs offline) it is not known, so the pending object stays for a later pass (it was dropped,
    orphaning the remote data of a committed disable)."""
    uri = (tmp_path / "store").as_uri()
    manager, topic_id = tiered_manager(broker, one_dir, uri)
    tier = manager.remote_tier
    assert tier is not None
    real = tier.store

    # the outage hits the deletion of objects only
    tier.retention.store = FlakyStore(real, lambda op, _: "before" if op in ("delete", "delete_prefix") else None)
    manager.alter_topic_config(TOPIC, {"remote.storage.enable": "false", "remote.log.delete.on.disable": "true"})
    tier.retention.store = real
    prefix = partition_prefix(TopicIdPartition(topic_id, tp(TOPIC)))
    assert objects(uri, PENDING_PREFIX) and objects(uri, prefix)
    live_logs = tier.retention._logs
    tier.retention._logs = lambda topic=None: [] if topic == TOPIC else live_logs(topic)  # type: ignore[method-assign]
    tier.retention.resume_pending()
    assert objects(uri, PENDING_PREFIX), "not known to have committed: the pending object stays"
    tier.retention._logs = live_logs  # type: ignore[method-assign]
    tier.retention.resume_pending()
    assert objects(uri, PENDING_PREFIX) == set() and objects(uri, prefix) == set()
