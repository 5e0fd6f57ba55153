"""The broker's cleaner on a tiered compacted topic (beyond Kafka): the manager hands the cleaner
its remote tier, the filthiest-log choice counts the remote-only bytes, a cleaner iteration
cleans both tiers, and a later one deletes the replaced objects after file.delete.delay.ms."""

from __future__ import annotations

from pathlib import Path

from manager_helpers import Opener, tp

from tidelog.manager import LogManager
from tidelog.records import BatchBuilder, iter_batches
from tidelog.remote.metadata import RemoteFileKind, TopicIdPartition, object_key
from tidelog.remote.metadata_log import RemotePartitionMetadata
from tidelog.remote.store import open_store
from tidelog.testing import FakeClock

TOPIC = "events"
CONFIG = {"cleanup.policy": "compact", "remote.storage.enable": "true", "segment.bytes": "1024",
          "local.retention.ms": "0", "file.delete.delay.ms": "1000"}


def _record(key: int, value: str, ts: int) -> bytes:
    builder = BatchBuilder(base_offset=0)
    builder.append(0, ts, str(key).encode(), value.encode())
    return builder.build()


def _reader(uri: str, manager: LogManager) -> RemotePartitionMetadata:
    tip = TopicIdPartition(manager.describe_topic(TOPIC).topic_id, tp(TOPIC))
    return RemotePartitionMetadata.load(open_store(uri), tip)


def _records(uri: str, manager: LogManager) -> dict[int, tuple[int, bytes]]:
    """Latest (offset, value) per key over both tiers, as a fresh reader of the store and the log show."""
    store, log = open_store(uri), manager.get_log(tp(TOPIC))
    assert log is not None
    seen: list[tuple[int, bytes, bytes]] = []
    for segment in _reader(uri, manager).finished_segments():
        for _, batch in iter_batches(store.get(object_key(segment, RemoteFileKind.SEGMENT))):
            seen += [(r.offset, r.key, r.value) for r in batch.records() if r.offset < log.local_log_start_offset]
    for segment in log.segments:
        for _, batch in segment.log.batches():
            seen += [(r.offset, r.key, r.value) for r in batch.records() if r.offset >= log.local_log_start_offset]
    return {int(k): (o, v) for o, k, v in seen}


def _tiered_first_keys(broker: Opener, one_dir: list[Path], tmp_path: Path) -> tuple[str, LogManager, FakeClock]:
    """A compacted tiered topic whose 30 first records (keys 0..29) were copied and freed locally."""
    uri = (tmp_path / "store").as_uri()
    manager = broker.open(one_dir, {"remote.log.storage.system.enable": "true", "remote.log.storage.uri": uri})
    manager.create_topic(TOPIC, 1, CONFIG)
    clock = broker.clock
    for k in range(30):
        manager.append(tp(TOPIC), _record(k, f"a{k}", clock.milliseconds()))
    clock.advance(10)
    manager.remote_tier.copy_pass()  # type: ignore[union-attr]
    manager.run_retention()
    return uri, manager, clock


def test_the_cleaner_compacts_a_tiered_topic_across_both_tiers(broker: Opener, one_dir: list[Path],
                                                                tmp_path: Path) -> None:
    uri, manager, clock = _tiered_first_keys(broker, one_dir, tmp_path)
    log = manager.get_log(tp(TOPIC))
    assert log is not None and log.local_log_start_offset > 0 and log.log_start_offset == 0
    for k in range(0, 30, 2):
        manager.append(tp(TOPIC), _record(k, f"b{k}", clock.milliseconds()))
    before = {s.id for s in _reader(uri, manager).finished_segments()}
    cleaner = manager.cleaner
    assert cleaner is not None

    result = cleaner.run_once()
    assert result is not None and result.topic_partition == tp(TOPIC) and result.error is None, result
    assert cleaner.manager.last_selection.max_dirty_ratio == 1.0
    latest = _records(uri, manager)
    expected_even = {k: (30 + k // 2, f"b{k}".encode()) for k in range(0, 30, 2)
                     if 30 + k // 2 < log.active_segment.base_offset}
    for k, want in expected_even.items():
        assert latest[k] == want
    for k in range(1, 30, 2):
        assert latest[k] == (k, f"a{k}".encode())
    reader = _reader(uri, manager)
    after = {s.id for s in reader.finished_segments()}
    assert after != before and {s.id for s in reader.unreferenced()} == before - after

    store = open_store(uri)
    old_keys = {object_key(s, RemoteFileKind.SEGMENT) for s in reader.unreferenced()}
    assert old_keys <= {i.key for i in store.list()}
    manager.remote_tier.copy_pass()  # type: ignore[union-attr]
    assert old_keys <= {i.key for i in store.list()}, "kept until file.delete.delay.ms from the swap is over"
    clock.advance(1_000)
    manager.remote_tier.copy_pass()  # type: ignore[union-attr]  # its cleanup: the delay is over
    assert not old_keys & {i.key for i in store.list()}, "replaced objects deleted after file.delete.delay.ms"
    assert _reader(uri, manager).unreferenced() == []


def test_replaced_segments_of_a_deleted_topic_are_dropped_not_retried_forever(
        broker: Opener, one_dir: list[Path], tmp_path: Path, caplog: object) -> None:
    """The topic is deleted while its replaced remote segments wait for file.delete.delay.ms: the
    topic's remote data goes with it, replaced segments included, and nothing waits or is retried
    (no cleaner iteration warns about them)."""
    import logging

    uri, manager, clock = _tiered_first_keys(broker, one_dir, tmp_path)
    for k in range(0, 30, 2):
        manager.append(tp(TOPIC), _record(k, f"b{k}", clock.milliseconds()))
    cleaner = manager.cleaner
    assert cleaner is not None and cleaner.remote is not None
    result = cleaner.run_once()
    assert result is not None and result.error is None and _reader(uri, manager).unreferenced()

    manager.delete_topic(TOPIC)
    clock.advance(1_000)
    caplog.set_level(logging.WARNING)  # type: ignore[attr-defined]
    for _ in range(2):
        cleaner.run_once()
    assert not [r for r in caplog.records if "not deleted yet" in r.getMessage()], caplog.text  # type: ignore[attr-defined]
    assert not [i for i in open_store(uri).list() if i.key.startswith(f"{TOPIC}-")], "the topic's remote data is gone"
