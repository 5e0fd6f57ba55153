"""Verification of a remote tier (:mod:`tidelog.remote.verify`): a clean tier passes, and each
corruption of the store is found under its own name, naming the partition, the segment and the
object. Most tests on a file:// store (its objects are plain files to damage); one on the real
S3 server (SeaweedFS)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tidelog.records.layout import CRC_OFFSET
from tidelog.remote.copy import copy_log
from tidelog.remote.metadata import RemoteFileKind, TopicIdPartition, metadata_prefix, object_key
from tidelog.remote.metadata_codec import event_name
from tidelog.remote.metadata_log import RemotePartitionMetadata
from tidelog.remote.partition_delete import TOPIC_DELETED, PendingDeletion, record_pending
from tidelog.remote.store import ArrowRemoteStore
from tidelog.remote.verify import list_partitions, verify_store
from tidelog.records.batch import iter_batches
from tidelog.testing import FakeClock
from tidelog.topic_partition import TopicPartition
from copy_helpers import make_log
from remote_helpers import TOPIC_ID, segment_meta
from test_copy_s3 import s3_store


def tier(tmp_path: Path, store: ArrowRemoteStore, tip: TopicIdPartition, segments: int = 3, **kw: object) -> list:
    log = make_log(tmp_path / f"{tip.topic_partition}", segments, **kw)
    metadata = RemotePartitionMetadata.load(store, tip, clock=FakeClock(), broker_id=1)
    copied = copy_log(log, store, metadata, epochs=log.leader_epoch_cache.entries)
    log.close()
    return copied


def by_key(report) -> dict:
    return {f.key: f for f in report.findings}


def kinds(report) -> list[tuple[str, str]]:
    return sorted((f.severity, f.kind) for f in report.findings)


def test_a_clean_tier_passes(tmp_path: Path, store: ArrowRemoteStore, tip: TopicIdPartition) -> None:
    copied = tier(tmp_path, store, tip, epochs=(0, 2), aborted_in=(2,))
    other = TopicIdPartition(TOPIC_ID, TopicPartition(tip.topic, 0))
    copied += tier(tmp_path, store, other, 2)
    report = verify_store(store)
    assert report.ok and report.findings == [], [str(f) for f in report.findings]
    assert (report.partitions, report.segments) == (2, 5)
    assert report.batches == 5 * 4 and report.bytes == sum(s.segment_size_in_bytes for s in copied)
    assert "OK: " in report.summary() and "0 warning(s)" in report.summary()


def test_batches_are_streamed_in_ranges_smaller_than_a_batch(tmp_path: Path, store: ArrowRemoteStore, tip) -> None:
    copied = tier(tmp_path, store, tip, 2, batches=6, records=20)
    for chunk in (37, 1000, 1 << 20):  # shorter than one batch, a few batches, the whole object
        report = verify_store(store, chunk_bytes=chunk)
        assert report.ok and report.batches == 12, (chunk, [str(f) for f in report.findings])
        assert report.bytes == sum(s.segment_size_in_bytes for s in copied)


def test_a_flipped_byte_in_a_log_is_a_crc_error_naming_object_and_batch(tmp_path: Path, store, store_root, tip) -> None:
    copied = tier(tmp_path, store, tip)
    key = object_key(copied[1], RemoteFileKind.SEGMENT)
    path = store_root / key
    data = bytearray(path.read_bytes())
    second = [position for position, _ in iter_batches(bytes(data))][1]
    data[second + CRC_OFFSET + 30] ^= 0xFF  # inside the records area the CRC covers
    path.write_bytes(bytes(data))
    report = verify_store(store, chunk_bytes=100)
    assert [(f.kind, f.key, f.position, f.segment_id) for f in report.errors] == [("crc", key, second, copied[1].id)]
    line = str(report.errors[0])
    assert "orders-2" in line and key in line and f"at byte {second}" in line and "batch 1" in line and "crc" in line


def test_a_missing_index_object_is_named(tmp_path: Path, store, store_root, tip) -> None:
    copied = tier(tmp_path, store, tip)
    key = object_key(copied[0], RemoteFileKind.OFFSET_INDEX)
    (store_root / key).unlink()
    report = verify_store(store)
    assert [(f.kind, f.key, f.segment_id) for f in report.errors] == [("missing_object", key, copied[0].id)]
    assert ".index object" in report.errors[0].message


def test_a_truncated_log_is_a_size_mismatch_and_a_partial_batch(tmp_path: Path, store, store_root, tip) -> None:
    copied = tier(tmp_path, store, tip)
    key = object_key(copied[2], RemoteFileKind.SEGMENT)
    path = store_root / key
    data = path.read_bytes()
    path.write_bytes(data[:-10])
    report = verify_store(store, chunk_bytes=64)
    assert {(f.kind, f.key) for f in report.errors} >= {("size_mismatch", key), ("partial_batch", key)}
    partial = next(f for f in report.errors if f.kind == "partial_batch")
    assert partial.position == max(p for p, _ in iter_batches(data))
    assert len(report.errors) == 2  # nothing else follows from the cut (max timestamp, index targets past it)


def test_a_corrupt_metadata_event_is_named(tmp_path: Path, store, store_root, tip) -> None:
    tier(tmp_path, store, tip)
    key = metadata_prefix(tip) + event_name(2)
    (store_root / key).write_bytes(b'{"version": 1, "sequence": 2, "type": "upd')
    report = verify_store(store)
    assert [(f.kind, f.key) for f in report.errors] == [("metadata_corrupt", key)]
    assert "orders-2" in str(report.errors[0])


def test_metadata_written_by_a_newer_tidelog_is_named(tmp_path: Path, store, store_root, tip) -> None:
    tier(tmp_path, store, tip)
    key = metadata_prefix(tip) + event_name(1)
    path = store_root / key
    path.write_bytes(path.read_bytes().replace(b'"version":1', b'"version":99'))
    report = verify_store(store)
    assert [(f.kind, f.key) for f in report.errors] == [("metadata_version", key)]


def test_a_corrupt_snapshot_that_readers_skip_is_still_reported(tmp_path: Path, store, store_root, tip) -> None:
    log = make_log(tmp_path / "orders-2", 3)
    metadata = RemotePartitionMetadata.load(store, tip, clock=FakeClock(), snapshot_interval=2)
    copy_log(log, store, metadata, epochs=log.leader_epoch_cache.entries)
    log.close()
    snapshots = sorted(p for p in (store_root / metadata_prefix(tip)).iterdir() if p.name.endswith(".snapshot.json"))
    assert len(snapshots) == 2
    snapshots[-1].write_bytes(b"not json")
    report = verify_store(store)
    assert [(f.kind, f.key) for f in report.errors] == [("metadata_corrupt", metadata_prefix(tip) + snapshots[-1].name)]
    assert report.segments == 3  # the log still loads from the previous snapshot


def test_orphans_and_unreferenced_objects_are_warnings(tmp_path: Path, store, store_root, tip) -> None:
    tier(tmp_path, store, tip, 1)
    orphan = f"orders-{TOPIC_ID}/2/00000000000000000000-AAAAAAAAAAAAAAAAAAAAAA.log"
    store.put(orphan, b"x")
    store.put("README.txt", b"hello")
    pending = PendingDeletion("gone", TOPIC_ID, 1, TOPIC_DELETED)
    record_pending(store, pending)
    metadata = RemotePartitionMetadata.load(store, tip)
    started = metadata.begin_copy(segment_meta(100, 199))
    store.put(object_key(started, RemoteFileKind.SEGMENT), b"half")
    report = verify_store(store)
    assert report.ok, [str(f) for f in report.errors]
    assert kinds(report) == [("warning", "orphan"), ("warning", "orphan"), ("warning", "pending_deletion"),
                             ("warning", "unreferenced")]
    assert by_key(report)[pending.key].partition == ""
    by_kind = {f.key: f for f in report.warnings}
    assert by_kind[orphan].partition == "orders-2" and "referenced by no segment" in by_kind[orphan].message
    assert by_kind["README.txt"].partition == ""
    unreferenced = by_kind[object_key(started, RemoteFileKind.SEGMENT)]
    assert unreferenced.segment_id == started.id and "next copy pass" in unreferenced.message


def test_overlapping_finished_segments_are_an_error(tmp_path: Path, store, tip) -> None:
    copied = tier(tmp_path, store, tip, 2)
    metadata = RemotePartitionMetadata.load(store, tip)
    extra = metadata.begin_copy(segment_meta(copied[0].end_offset, copied[0].end_offset + 5))
    metadata.finish_copy(extra)
    report = verify_store(store)
    overlap = [(f.segment_id, f.message) for f in report.errors if f.kind == "overlap"]
    assert overlap == [(extra.id, f"segment 19..24 overlaps segment {copied[0].id} (0..19)"),
                       (copied[1].id, f"segment 20..39 overlaps segment {extra.id} (19..24)")]
    assert {f.kind for f in report.errors} == {"overlap", "missing_object"}  # the fake segment has no objects


def test_a_topic_filter_and_the_partition_listing(tmp_path: Path, store, tip) -> None:
    tier(tmp_path, store, tip, 1)
    other = TopicIdPartition("AAAAAAAAAAAAAAAAAAAAAQ", TopicPartition("my-events", 0))
    tier(tmp_path, store, other, 1)
    partitions, strays = list_partitions(store)
    assert set(partitions) == {tip, other} and strays == []
    assert verify_store(store, topic="my-events").partitions == 1


def test_an_unreachable_store_is_an_error_not_a_crash(tmp_path: Path) -> None:
    store = ArrowRemoteStore("s3://nobucket/x", {"endpoint.url": "http://127.0.0.1:9", "access.key": "a",
                                                 "secret.key": "b", "region": "us-east-1",
                                                 "retry.max.attempts": "1", "connect.timeout.ms": "500"})
    report = verify_store(store)
    assert not report.ok and report.errors[0].kind == "store_error"


@pytest.fixture
def s3_remote(object_store: object, bucket: str) -> ArrowRemoteStore:
    return s3_store(object_store, bucket)


def test_verify_on_the_s3_server_passes_then_finds_a_flipped_byte(tmp_path: Path, s3_remote, tip) -> None:
    copied = tier(tmp_path, s3_remote, tip, 2, batches=10, records=20)
    clean = verify_store(s3_remote, chunk_bytes=1000)
    assert clean.ok and clean.findings == [] and clean.batches == 20, [str(f) for f in clean.findings]
    key = object_key(copied[1], RemoteFileKind.SEGMENT)
    data = bytearray(s3_remote.get(key))
    position = [p for p, _ in iter_batches(bytes(data))][4]
    data[position + CRC_OFFSET + 30] ^= 0x01
    s3_remote.put(key, bytes(data))
    report = verify_store(s3_remote, chunk_bytes=1000)
    assert [(f.kind, f.key, f.position) for f in report.errors] == [("crc", key, position)]
