"""The manager's remote tier (tiered storage, copy side): copy passes over tiered topics to a real
store (file://, and the SeaweedFS S3 server), local retention that waits for the copy, status,
and a restart that must ask the remote tier again before deleting anything local."""

from __future__ import annotations

from pathlib import Path

import pytest
from manager_helpers import Opener, batch, tp

from tidelog.errors import OffsetMovedToTieredStorageError
from tidelog.manager import LogManager
from tidelog.remote.metadata import TopicIdPartition
from tidelog.remote.metadata_log import RemotePartitionMetadata
from tidelog.remote.store import open_store
from tidelog.storage.log import LATEST_TIERED_TIMESTAMP

TOPIC = "orders"
TIERED = {"remote.storage.enable": "true", "segment.bytes": "400", "local.retention.bytes": "1"}
SIZE = len(batch())


def tiered_props(uri: str, **extra: str) -> dict[str, str]:
    return {"remote.log.storage.system.enable": "true", "remote.log.storage.uri": uri, **extra}


def produce(manager: LogManager, count: int) -> None:
    for _ in range(count):
        manager.append(tp(TOPIC), batch())


def remote_segments(uri: str, manager: LogManager, options: dict[str, str] | None = None) -> list[tuple[int, int]]:
    """The finished segments as any reader of the store sees them (a fresh load, not the broker's cache)."""
    tip = TopicIdPartition(manager.describe_topic(TOPIC).topic_id, tp(TOPIC))
    loaded = RemotePartitionMetadata.load(open_store(uri, options), tip)
    return [(m.start_offset, m.end_offset) for m in loaded.finished_segments()]


def test_copy_pass_then_local_retention(broker: Opener, one_dir: list[Path], tmp_path: Path) -> None:
    uri = (tmp_path / "store").as_uri()
    manager = broker.open(one_dir, tiered_props(uri))
    manager.create_topic(TOPIC, 1, TIERED)
    produce(manager, 20)
    log = manager.get_log(tp(TOPIC))
    assert log is not None and log.num_segments > 2
    sealed = [(s.base_offset, n.base_offset - 1) for s, n in zip(log.segments, log.segments[1:])]

    manager.run_retention()
    assert log.num_segments == len(sealed) + 1, "nothing local goes before the remote tier holds it"

    copied = manager.remote_tier.copy_pass()  # type: ignore[union-attr]
    assert copied == {tp(TOPIC): len(sealed)}
    assert remote_segments(uri, manager) == sealed
    assert log.highest_offset_in_remote_storage == sealed[-1][1]
    assert manager.list_offsets(tp(TOPIC), LATEST_TIERED_TIMESTAMP).offset == sealed[-1][1]
    status = manager.remote_tier.status()  # type: ignore[union-attr]
    assert [(s.remote_segments, s.copy_lag_segments, s.last_error) for s in status] == [(len(sealed), 0, None)]

    manager.run_retention()
    assert log.num_segments == 1 and log.log_start_offset == 0
    assert log.local_log_start_offset == sealed[-1][1] + 1
    with pytest.raises(OffsetMovedToTieredStorageError):
        manager.read(tp(TOPIC), 0, 1 << 20)
    assert manager.remote_tier.copy_pass() == {tp(TOPIC): 0}, "a second pass copies nothing again"  # type: ignore[union-attr]


def test_a_restart_asks_the_remote_tier_before_deleting_local_segments(broker: Opener, one_dir: list[Path],
                                                                      tmp_path: Path) -> None:
    uri = (tmp_path / "store").as_uri()
    manager = broker.open(one_dir, tiered_props(uri))
    manager.create_topic(TOPIC, 1, {**TIERED, "local.retention.bytes": "-2"})
    produce(manager, 20)
    manager.remote_tier.copy_pass()  # type: ignore[union-attr]
    copied = remote_segments(uri, manager)
    manager.shutdown()

    manager = broker.open(one_dir, tiered_props(uri))
    manager.alter_topic_config(TOPIC, {"local.retention.bytes": "1"})
    log = manager.get_log(tp(TOPIC))
    assert log is not None and log.highest_offset_in_remote_storage == -1
    count = log.num_segments
    manager.retention_task()
    assert log.num_segments == count, "highestOffsetInRemoteStorage is in memory only: -1 after a restart"
    manager.remote_tier.copy_pass()  # type: ignore[union-attr]
    assert log.highest_offset_in_remote_storage == copied[-1][1]
    assert remote_segments(uri, manager) == copied, "the new process copied nothing twice"
    manager.retention_task()
    assert log.num_segments == 1


def test_on_demand_retention_asks_the_remote_tier_first(broker: Opener, one_dir: list[Path], tmp_path: Path) -> None:
    """``run_retention`` (``tidelog retention run``) in a process that ran no copy pass: it loads what the
    remote tier holds first, so the copied local segments go; the log start offset, checkpointed for
    a tiered log, stays at 0 across the restart."""
    uri = (tmp_path / "store").as_uri()
    manager = broker.open(one_dir, tiered_props(uri))
    manager.create_topic(TOPIC, 1, TIERED)
    produce(manager, 20)
    manager.remote_tier.copy_pass()  # type: ignore[union-attr]
    manager.shutdown()
    manager = broker.open(one_dir, tiered_props(uri))
    manager.run_retention()
    log = manager.get_log(tp(TOPIC))
    assert log is not None and log.num_segments == 1
    manager.shutdown()
    manager = broker.open(one_dir, tiered_props(uri))
    log = manager.get_log(tp(TOPIC))
    assert log is not None and (log.log_start_offset, log.num_segments) == (0, 1)
    assert log.local_log_start_offset == log.segments[0].base_offset > 0


def test_a_failing_store_is_reported_and_deletes_nothing(broker: Opener, one_dir: list[Path], tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the store's directory should be")
    manager = broker.open(one_dir, tiered_props((blocker / "store").as_uri()))
    manager.create_topic(TOPIC, 1, TIERED)
    produce(manager, 20)
    log = manager.get_log(tp(TOPIC))
    assert log is not None
    count = log.num_segments
    assert manager.remote_tier.copy_pass() == {tp(TOPIC): 0}  # type: ignore[union-attr]
    [status] = manager.remote_tier.status()  # type: ignore[union-attr]
    assert status.last_error and "store" in status.last_error and status.copy_lag_segments == count - 1
    manager.run_retention()
    assert log.num_segments == count


def test_no_remote_tier_without_the_system_switch(broker: Opener, one_dir: list[Path]) -> None:
    manager = broker.open(one_dir)
    assert manager.remote_tier is None


def test_copy_pass_to_s3(broker: Opener, one_dir: list[Path], object_store: object, bucket: str) -> None:
    credentials = object_store.credentials  # type: ignore[attr-defined]
    options = {"endpoint.url": credentials.endpoint_url, "access.key": credentials.access_key,
               "secret.key": credentials.secret_key, "region": credentials.region}
    uri = f"s3://{bucket}/tier"
    props = tiered_props(uri, **{f"rsm.config.{k}": v for k, v in options.items()})
    manager = broker.open(one_dir, props)
    manager.create_topic(TOPIC, 1, TIERED)
    produce(manager, 12)
    log = manager.get_log(tp(TOPIC))
    assert log is not None
    sealed = [(s.base_offset, n.base_offset - 1) for s, n in zip(log.segments, log.segments[1:])]
    assert manager.remote_tier.copy_pass() == {tp(TOPIC): len(sealed)}  # type: ignore[union-attr]
    assert remote_segments(uri, manager, options) == sealed


