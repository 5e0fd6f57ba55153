"""The manager's copy to the remote tier against a faulty store: the real SeaweedFS S3 server
behind the fault proxy (``fault_proxy`` fixture). For every fault: the partition's status names
the partition, the object and the cause; retriable faults are retried with backoff (the fake
clock drives it) and the copy then completes with each segment once and no orphan object;
non-retriable ones are not retried before the next pass; local retention (local.retention.ms=0)
deletes nothing whose remote copy is not FINISHED, and nothing acknowledged is lost."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
from manager_helpers import T0, Opener, tp
from manager_helpers import batch as new_batch

from tidelog.manager import LogManager
from tidelog.remote.backoff import RETRY_TASK_NAME
from tidelog.remote.metadata import RemoteFileKind, TopicIdPartition, metadata_prefix, object_key
from tidelog.remote.metadata_log import RemotePartitionMetadata
from tidelog.remote.store import ArrowRemoteStore
from tidelog.storage import files
from tidelog.topic_partition import TopicPartition

TOPIC = "orders"
# file.delete.delay.ms 0: what a failed attempt leaves DELETE_SEGMENT_STARTED is deleted by the
# next pass's cleanup only once that delay from its last event is over (clean_unreferenced)
TIERED = {"remote.storage.enable": "true", "segment.bytes": "400", "local.retention.ms": "0",
          "file.delete.delay.ms": "0"}
INTERVAL_MS = 3_600_000  # the regular pass never runs by itself: each test calls copy_pass


def batch() -> bytes:
    """A record a minute old: with local.retention.ms=0 local retention deletes it at once once copied."""
    return new_batch(timestamp=T0 - 60_000)


def props(object_store, proxy, uri: str, **options: str) -> dict[str, str]:
    rsm = {f"rsm.config.{k}": v for k, v in proxy.store_options(object_store.credentials, **options).items()}
    return {"remote.log.storage.system.enable": "true", "remote.log.storage.uri": uri,
            "remote.log.manager.task.interval.ms": str(INTERVAL_MS), **rsm}


def open_tiered(broker: Opener, dirs: list[Path], object_store, proxy, uri: str, *, partitions: int = 1,
                records: int = 12, create: bool = True, **options: str) -> LogManager:
    manager = broker.open(dirs, props(object_store, proxy, uri, **options))
    if create:
        manager.create_topic(TOPIC, partitions, TIERED)
        for p in range(partitions):
            for _ in range(records):
                manager.append(TopicPartition(TOPIC, p), batch())
    return manager


def direct_store(object_store, uri: str) -> ArrowRemoteStore:
    """The same bucket without the proxy: what any other reader sees."""
    credentials = object_store.credentials
    return ArrowRemoteStore(uri, {"endpoint.url": credentials.endpoint_url, "access.key": credentials.access_key,
                                  "secret.key": credentials.secret_key, "region": credentials.region})


def local_state(manager: LogManager, partition: int = 0) -> tuple[list[int], int, int, dict[int, bytes]]:
    """Base offsets, log start, local log start, and each sealed segment's bytes."""
    log = manager.get_log(tp(TOPIC, partition))
    assert log is not None
    sealed = {s.base_offset: files.log_file(log.dir, s.base_offset).read_bytes() for s in log.segments[:-1]}
    return [s.base_offset for s in log.segments], log.log_start_offset, log.local_log_start_offset, sealed


def assert_retention_keeps_everything(manager: LogManager, partition: int = 0) -> None:
    """Local retention with local.retention.ms=0 during the fault deletes nothing not FINISHED remotely."""
    before = local_state(manager, partition)[:3]
    manager.run_retention()
    assert local_state(manager, partition)[:3] == before
    assert before[1] == 0


def assert_copied_once_and_kept(manager: LogManager, store: ArrowRemoteStore, sealed: dict[int, bytes],
                                partition: int = 0) -> None:
    """Every sealed segment is FINISHED exactly once with the local bytes, no object is an orphan,
    and after local retention the two tiers together still hold every offset."""
    tip = TopicIdPartition(manager.describe_topic(TOPIC).topic_id, tp(TOPIC, partition))
    loaded = RemotePartitionMetadata.load(store, tip)
    finished = loaded.finished_segments()
    assert [m.start_offset for m in finished] == sorted(sealed), "each sealed segment once"
    assert loaded.unreferenced() == []
    for segment in finished:
        assert store.get(object_key(segment, RemoteFileKind.SEGMENT)) == sealed[segment.start_offset]
    owned = {object_key(m, kind) for m in finished for kind in RemoteFileKind}
    partition_prefix = metadata_prefix(tip).removesuffix("metadata/")
    orphans = [i.key for i in store.list(partition_prefix) if "/metadata/" not in i.key and i.key not in owned]
    assert orphans == []
    manager.run_retention()
    log = manager.get_log(tp(TOPIC, partition))
    assert log is not None and log.log_start_offset == 0
    assert log.local_log_start_offset == finished[-1].end_offset + 1, "contiguous: remote then local"
    assert all(a.end_offset + 1 == b.start_offset for a, b in zip(finished, finished[1:]))


def status_of(manager: LogManager, partition: int = 0):
    rows = {r.topic_partition: r for r in manager.remote_tier.status()}  # type: ignore[union-attr]
    return rows[tp(TOPIC, partition)]


def advance_until(broker: Opener, done, limit_ms: int, step_ms: int = 50) -> int:
    waited = 0
    while not done() and waited < limit_ms:
        broker.clock.advance(step_ms)
        waited += step_ms
    return waited


def test_connection_refused_is_retried_with_backoff_until_the_store_is_back(
        broker: Opener, one_dir: list[Path], object_store, fault_proxy, bucket: str) -> None:
    uri = f"s3://{bucket}/tier"
    manager = open_tiered(broker, one_dir, object_store, fault_proxy, uri)
    _, _, _, sealed = local_state(manager)
    fault_proxy.refuse()
    assert manager.remote_tier.copy_pass() == {tp(TOPIC): 0}  # type: ignore[union-attr]
    row = status_of(manager)
    assert row.last_error is not None
    for part in ("store unreachable", "orders-0", "metadata/", "Could not connect", "retried in"):
        assert part in row.last_error, part
    assert_retention_keeps_everything(manager)
    broker.clock.advance(300)  # inside the first backoff (500 ms -20 %): no attempt yet
    assert manager.remote_tier.retries.failures(tp(TOPIC)) == 1  # type: ignore[union-attr]
    advance_until(broker, lambda: manager.remote_tier.retries.failures(tp(TOPIC)) >= 3, 10_000)  # type: ignore[union-attr]
    assert_retention_keeps_everything(manager)
    fault_proxy.resume()
    waited = advance_until(broker, lambda: status_of(manager).last_error is None, 10_000)
    assert waited < 10_000 and status_of(manager).remote_segments == len(sealed)
    assert_copied_once_and_kept(manager, direct_store(object_store, uri), sealed)


def test_503_for_n_requests_then_the_copy_completes_after_backoff(
        broker: Opener, one_dir: list[Path], object_store, fault_proxy, bucket: str, caplog) -> None:
    uri = f"s3://{bucket}/tier"
    manager = open_tiered(broker, one_dir, object_store, fault_proxy, uri)
    manager.remote_tier.refresh()  # type: ignore[union-attr]  # metadata loaded: the faults hit the copy itself
    _, _, _, sealed = local_state(manager)
    fault_proxy.fail(503, count=4, key=r"\.(log|index|snapshot)$")
    manager.remote_tier.copy_pass()  # type: ignore[union-attr]
    row = status_of(manager)
    assert row.last_error is not None and "store failed or overloaded" in row.last_error
    assert "orders-0" in row.last_error and "SLOW_DOWN" in row.last_error and "object=" in row.last_error
    [logged] = [r.getMessage() for r in caplog.records if r.name == "tidelog.manager.remote_tier"]
    assert logged.startswith("orders-0: remote copy failed, retried in ") and row.last_error.split(";")[0] in logged
    assert_retention_keeps_everything(manager)
    waited = advance_until(broker, lambda: status_of(manager).last_error is None, 30_000)
    assert waited < 30_000, status_of(manager).last_error
    assert len(fault_proxy.outcomes("injected")) == 4
    assert status_of(manager).remote_segments == len(sealed) and status_of(manager).copy_lag_segments == 0
    assert_copied_once_and_kept(manager, direct_store(object_store, uri), sealed)


def test_a_slow_store_completes_and_status_shows_progress(
        broker: Opener, one_dir: list[Path], object_store, fault_proxy, bucket: str) -> None:
    uri = f"s3://{bucket}/tier"
    manager = open_tiered(broker, one_dir, object_store, fault_proxy, uri, records=16)
    manager.remote_tier.refresh()  # type: ignore[union-attr]
    _, _, _, sealed = local_state(manager)
    assert len(sealed) >= 3
    fault_proxy.delay(0.05)
    seen: list[tuple[int, str | None]] = []
    copier = threading.Thread(target=manager.remote_tier.copy_pass)  # type: ignore[union-attr]
    copier.start()
    while copier.is_alive():
        row = status_of(manager)
        seen.append((row.remote_segments, row.last_error))
        time.sleep(0.05)
    copier.join()
    assert any(0 < n < len(sealed) for n, _ in seen), "status shows the segments finished so far mid-pass"
    assert all(error is None for _, error in seen) and status_of(manager).last_error is None
    assert fault_proxy.outcomes("delayed")
    fault_proxy.pass_through()
    assert_copied_once_and_kept(manager, direct_store(object_store, uri), sealed)


def test_a_wrong_secret_is_access_denied_and_not_retried_before_the_next_pass(
        broker: Opener, one_dir: list[Path], object_store, fault_proxy, bucket: str) -> None:
    uri = f"s3://{bucket}/tier"
    manager = open_tiered(broker, one_dir, object_store, fault_proxy, uri, **{"secret.key": "not-the-secret"})
    manager.remote_tier.copy_pass()  # type: ignore[union-attr]
    row = status_of(manager)
    assert row.last_error is not None
    for part in ("access denied", "orders-0", "metadata/", "SIGNATURE_DOES_NOT_MATCH", "retried at the next pass"):
        assert part in row.last_error, part
    assert "not-the-secret" not in row.last_error
    broker.clock.advance(INTERVAL_MS - 1000)  # backoff would have retried many times by now
    assert RETRY_TASK_NAME not in broker.scheduler.ran, "no retry storm: nothing until the next pass"
    assert manager.remote_tier.retries.failures(tp(TOPIC)) == 1  # type: ignore[union-attr]
    assert_retention_keeps_everything(manager)
    asked = len(fault_proxy.requests)
    manager.remote_tier.copy_pass()  # type: ignore[union-attr]
    assert len(fault_proxy.requests) == asked + 1, "the next pass: one LIST, refused"
    assert manager.remote_tier.retries.failures(tp(TOPIC)) == 2  # type: ignore[union-attr]


def test_a_bucket_that_does_not_exist_stops_the_copy_naming_it(
        broker: Opener, one_dir: list[Path], object_store, fault_proxy) -> None:
    manager = open_tiered(broker, one_dir, object_store, fault_proxy, "s3://no-such-bucket-tidelog/tier")
    manager.remote_tier.copy_pass()  # type: ignore[union-attr]
    row = status_of(manager)
    assert row.last_error is not None
    for part in ("bucket does not exist", "orders-0", "s3://no-such-bucket-tidelog/tier", "retried at the next pass"):
        assert part in row.last_error, part
    assert not manager.remote_tier.retries.waiting(tp(TOPIC))  # type: ignore[union-attr]
    assert_retention_keeps_everything(manager)


def _copy_then_restart(broker: Opener, dirs: list[Path], object_store, proxy, uri: str) -> tuple[LogManager, TopicIdPartition]:
    """Two partitions copied; more records; the broker restarted (metadata to be loaded again)."""
    manager = open_tiered(broker, dirs, object_store, proxy, uri, partitions=2)
    manager.remote_tier.copy_pass()  # type: ignore[union-attr]
    tip = TopicIdPartition(manager.describe_topic(TOPIC).topic_id, tp(TOPIC, 0))
    for p in range(2):
        for _ in range(8):
            manager.append(TopicPartition(TOPIC, p), batch())
    manager.shutdown()
    return open_tiered(broker, dirs, object_store, proxy, uri, create=False), tip


def _assert_partition_0_stopped_1_goes_on(manager: LogManager, store: ArrowRemoteStore, key: str, words: tuple[str, ...]) -> None:
    before = store.get(key)
    _, _, _, sealed = local_state(manager, 1)
    manager.remote_tier.copy_pass()  # type: ignore[union-attr]
    row = status_of(manager, 0)
    assert row.last_error is not None
    for part in ("orders-0", key, *words):
        assert part in row.last_error, part
    assert row.highest_remote_offset == -1, "the remote tier's content is unknown: nothing local may go"
    assert_retention_keeps_everything(manager, 0)
    assert store.get(key) == before, "the object is never overwritten"
    other = status_of(manager, 1)
    assert other.last_error is None and other.copy_lag_segments == 0 and other.remote_segments > 0
    assert_copied_once_and_kept(manager, store, sealed, 1)


def test_a_corrupt_metadata_event_stops_that_partition_only(
        broker: Opener, one_dir: list[Path], object_store, fault_proxy, bucket: str) -> None:
    uri = f"s3://{bucket}/tier"
    manager, tip = _copy_then_restart(broker, one_dir, object_store, fault_proxy, uri)
    store = direct_store(object_store, uri)
    key = store.list(metadata_prefix(tip))[-1].key
    store.put(key, b'{"version": 1, "sequence": ')
    _assert_partition_0_stopped_1_goes_on(manager, store, key, ("corrupt remote metadata object", "retried at the next pass"))


def test_metadata_written_by_a_newer_version_stops_that_partition_only(
        broker: Opener, one_dir: list[Path], object_store, fault_proxy, bucket: str) -> None:
    uri = f"s3://{bucket}/tier"
    manager, tip = _copy_then_restart(broker, one_dir, object_store, fault_proxy, uri)
    store = direct_store(object_store, uri)
    last = store.list(metadata_prefix(tip))[-1].key
    body = json.loads(store.get(last))
    sequence = body["sequence"] + 1
    key = f"{metadata_prefix(tip)}{sequence:020d}.json"
    store.put(key, json.dumps({**body, "version": 99, "sequence": sequence}).encode())
    _assert_partition_0_stopped_1_goes_on(manager, store, key, ("newer", "99"))


def test_a_metadata_event_deleted_behind_tidelogs_back_is_a_gap(
        broker: Opener, one_dir: list[Path], object_store, fault_proxy, bucket: str) -> None:
    uri = f"s3://{bucket}/tier"
    manager, tip = _copy_then_restart(broker, one_dir, object_store, fault_proxy, uri)
    store = direct_store(object_store, uri)
    events = store.list(metadata_prefix(tip))
    assert len(events) >= 3
    missing = events[1].key
    store.delete(missing)
    manager.remote_tier.copy_pass()  # type: ignore[union-attr]
    row = status_of(manager, 0)
    assert row.last_error is not None
    for part in ("orders-0", "gap", missing):
        assert part in row.last_error, part
    assert_retention_keeps_everything(manager, 0)
    assert status_of(manager, 1).last_error is None


def test_a_segment_object_deleted_behind_tidelogs_back(
        broker: Opener, one_dir: list[Path], object_store, fault_proxy, bucket: str) -> None:
    """The copy side keeps its cached metadata (no LIST per pass), so the next pass goes on
    copying new segments and status shows no error; the missing object is found by whoever reads
    it (``RemoteResourceNotFoundError`` naming it) and by ``tidelog verify``."""
    uri = f"s3://{bucket}/tier"
    manager = open_tiered(broker, one_dir, object_store, fault_proxy, uri)
    manager.remote_tier.copy_pass()  # type: ignore[union-attr]
    store = direct_store(object_store, uri)
    tip = TopicIdPartition(manager.describe_topic(TOPIC).topic_id, tp(TOPIC))
    first = RemotePartitionMetadata.load(store, tip).finished_segments()[0]
    gone = object_key(first, RemoteFileKind.SEGMENT)
    store.delete(gone)
    for _ in range(8):
        manager.append(tp(TOPIC), batch())
    before = status_of(manager).remote_segments
    manager.remote_tier.copy_pass()  # type: ignore[union-attr]
    row = status_of(manager)
    assert row.last_error is None and row.remote_segments > before and row.copy_lag_segments == 0
    from tidelog.remote.errors import RemoteResourceNotFoundError
    with pytest.raises(RemoteResourceNotFoundError) as raised:
        store.get(gone)
    assert raised.value.key == gone
