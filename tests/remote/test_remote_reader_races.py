"""A remote segment that changes while a remote read is in flight (manager/remote_reads.py):
deleted by retention, the read is OFFSET_OUT_OF_RANGE; replaced by a compaction's swap, the
read goes on in the segment that replaced it; an object gone behind tidelog's back stays an
error naming the partition and the object. Never bytes of the wrong segment."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from read_helpers import T0, tiered_log

from tidelog.errors import OffsetOutOfRangeError
from tidelog.manager.remote_reads import RemoteReader
from tidelog.remote.errors import RemoteResourceNotFoundError
from tidelog.remote.metadata import RemoteFileKind, RemoteLogSegmentId, object_key, object_keys
from tidelog.remote.metadata_log import RemotePartitionMetadata
from tidelog.remote.store import ArrowRemoteStore
from tidelog.storage.config import BrokerConfig
from tidelog.storage.fetch_info import FetchIsolation
from tidelog.topic_partition import TopicPartition

TP = TopicPartition("orders", 2)


class HookStore:
    """Delegates to ``inner``; runs ``hook`` once, before the first ranged GET of a ``.log``."""

    def __init__(self, inner: ArrowRemoteStore) -> None:
        self.inner, self.uri, self.hook = inner, inner.uri, None

    def get_range(self, key: str, start: int, length: int) -> bytes:
        hook, self.hook = self.hook, None
        if hook is not None and key.endswith(RemoteFileKind.SEGMENT.value):
            hook()
        return self.inner.get_range(key, start, length)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


@pytest.fixture
def tiered(tmp_path: Path, store: ArrowRemoteStore, tip):
    log, copied = tiered_log(tmp_path / "orders-2", store, tip)
    expected = (log.dir / f"{copied[0].start_offset:020d}.log").read_bytes()
    log.delete_oldest_segments(log.segments[:3], "test: only the remote tier holds them", move_log_start=False)
    metadata = RemotePartitionMetadata.load(store, tip, broker_id=1)
    hooked = HookStore(store)
    broker = BrokerConfig.from_properties({"log.dirs": str(tmp_path / "logs")})
    reader = RemoteReader(broker, hooked, tmp_path / "logs", lambda tp, lg: metadata)  # type: ignore[arg-type]
    yield log, metadata, hooked, reader, expected
    reader.close()
    log.close()


def _delete_objects(store: ArrowRemoteStore, segment) -> None:
    for key in object_keys(segment).values():
        store.delete(key)


def test_a_segment_deleted_by_retention_mid_read_is_out_of_range(tiered, store) -> None:
    log, metadata, hooked, reader, _ = tiered
    first = metadata.finished_segments()[0]

    def retention() -> None:
        log.maybe_increment_log_start_offset(first.end_offset + 1, "test: remote retention")
        with metadata.task_lock:
            metadata.begin_delete(first)
            _delete_objects(store, first)
            metadata.finish_delete(first)

    hooked.hook = retention
    with pytest.raises(OffsetOutOfRangeError, match="does not exist in the remote tier") as caught:
        reader.read(TP, log, 5, 1 << 20, FetchIsolation.HIGH_WATERMARK)
    assert caught.value.error_code == 1


def test_a_segment_replaced_by_compaction_mid_read_is_read_from_its_replacement(tiered, store) -> None:
    log, metadata, hooked, reader, expected = tiered
    first = metadata.finished_segments()[0]
    twin = replace(first, segment_id=RemoteLogSegmentId.generate(first.topic_id_partition))

    def compaction() -> None:  # the same batches under a new id; the old objects deleted at once
        for kind in (RemoteFileKind.SEGMENT, RemoteFileKind.OFFSET_INDEX, RemoteFileKind.TIME_INDEX):
            store.put(object_key(twin, kind), store.get(object_key(first, kind)))
        with metadata.task_lock:
            metadata.swap([first], [twin])
            _delete_objects(store, first)

    hooked.hook = compaction
    got = reader.read(TP, log, first.start_offset, 1 << 30, FetchIsolation.HIGH_WATERMARK)
    assert got.records == expected


def test_an_object_deleted_behind_tidelog_s_back_names_the_partition_and_the_object(tiered, store) -> None:
    log, metadata, hooked, reader, _ = tiered
    first = metadata.finished_segments()[0]
    hooked.hook = lambda: store.delete(object_key(first, RemoteFileKind.SEGMENT))
    with pytest.raises(RemoteResourceNotFoundError) as caught:
        reader.read(TP, log, 5, 1 << 20, FetchIsolation.HIGH_WATERMARK)
    assert caught.value.context["key"] == object_key(first, RemoteFileKind.SEGMENT)
    assert caught.value.context["partition"] == str(TP)


def test_a_failed_remote_fetch_is_logged_naming_the_partition_and_the_object(tiered, store, caplog) -> None:
    """The fetch's answer carries only an error code: the broker's log must say what failed."""
    log, metadata, hooked, reader, _ = tiered
    first = metadata.finished_segments()[0]
    key = object_key(first, RemoteFileKind.SEGMENT)
    hooked.hook = lambda: store.delete(key)
    with caplog.at_level("ERROR", logger="tidelog.manager.remote_reads"):
        with pytest.raises(RemoteResourceNotFoundError):
            reader.fetch(TP, log, 5, 1 << 20, FetchIsolation.HIGH_WATERMARK).result(10)
        with pytest.raises(OffsetOutOfRangeError):  # the consumer's own mistake: not logged as an error
            reader.fetch(TP, log, 10 ** 6, 1 << 20, FetchIsolation.HIGH_WATERMARK).result(10)
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1 and str(TP) in errors[0] and "offset 5" in errors[0] and key in errors[0]


def test_a_segment_deleted_by_retention_mid_lookup_by_timestamp_is_searched_again(tiered, store) -> None:
    """ListOffsets by a timestamp inside segment 0 while retention deletes it: the answer is the
    lookup's after the deletion (segment 1's first record), not an error."""
    log, metadata, hooked, reader, _ = tiered
    first, second = metadata.finished_segments()[:2]

    def retention() -> None:
        log.maybe_increment_log_start_offset(second.start_offset, "test: remote retention")
        with metadata.task_lock:
            metadata.begin_delete(first)
            _delete_objects(store, first)
            metadata.finish_delete(first)

    hooked.hook = retention
    found = reader.offset_for_timestamp_async(TP, log, T0 + 10 * 5).result(10)
    assert found is not None and (found.offset, found.timestamp) == (second.start_offset,
                                                                     T0 + 10 * second.start_offset)
