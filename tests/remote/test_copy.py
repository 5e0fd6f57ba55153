"""Copying sealed segments to the remote tier: the candidates rule, a real log's segments copied
to file:// byte for byte, the epoch checkpoint, the transaction index, a missing producer
snapshot, a failed upload cleaned up, a segment replaced mid-copy, resume after a restart."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidelog.remote.copy import (
    MissingSegmentFileError,
    SegmentSourceGoneError,
    clean_unreferenced,
    copy_candidates,
    copy_log,
    copy_segment,
    segment_leader_epochs,
)
from tidelog.remote.errors import RemoteStorageError, RemoteStoreUnreachableError
from tidelog.remote.metadata import (
    RemoteFileKind,
    RemoteLogSegmentId,
    RemoteLogSegmentState,
    object_key,
    partition_prefix,
)
from tidelog.remote.metadata_log import RemotePartitionMetadata
from tidelog.remote.store import ArrowRemoteStore
from tidelog.storage import files
from tidelog.storage.checkpoints import EpochEntry, format_epoch_checkpoint
from tidelog.testing import FakeClock
from copy_helpers import assert_matches_local, expected_epochs_text, make_log
from remote_helpers import FlakyStore


@dataclass(frozen=True)
class Seg:
    base_offset: int


def _kafka_candidates(bases: list[int], highest: int, log_start: int, lso: int) -> list[tuple[int, int]]:
    """Kafka's candidateLogSegments over logSegments(from, Long.MAX), straight."""
    start = max(highest + 1, log_start)
    floor = max((b for b in bases if b <= start), default=None)
    chosen = [b for b in bases if b >= start or b == floor]
    return [(a, b) for a, b in zip(chosen, chosen[1:]) if b <= lso]


@given(st.lists(st.integers(0, 200), min_size=0, max_size=12, unique=True), st.integers(-1, 220),
       st.integers(0, 220), st.integers(0, 220))
def test_candidates_follow_kafka(bases: list[int], highest: int, log_start: int, lso: int) -> None:
    bases.sort()
    got = copy_candidates([Seg(b) for b in bases], highest_remote_offset=highest, log_start_offset=log_start,
                          last_stable_offset=lso)
    assert [(s.base_offset, n) for s, n in got] == _kafka_candidates(bases, highest, log_start, lso)
    if bases:
        assert all(s.base_offset != bases[-1] for s, _ in got)  # the active segment never


def test_candidates_examples() -> None:
    segs = [Seg(0), Seg(10), Seg(20), Seg(30)]
    pick = lambda **kw: [(s.base_offset, n) for s, n in copy_candidates(segs, **kw)]  # noqa: E731
    assert pick(highest_remote_offset=-1, log_start_offset=0, last_stable_offset=30) == [(0, 10), (10, 20), (20, 30)]
    assert pick(highest_remote_offset=-1, log_start_offset=0, last_stable_offset=29) == [(0, 10), (10, 20)]
    assert pick(highest_remote_offset=9, log_start_offset=0, last_stable_offset=30) == [(10, 20), (20, 30)]
    assert pick(highest_remote_offset=-1, log_start_offset=15, last_stable_offset=30) == [(10, 20), (20, 30)]


def test_segment_leader_epochs_clamp_to_the_segment() -> None:
    epochs = [EpochEntry(0, 0), EpochEntry(2, 12), EpochEntry(5, 25)]
    assert segment_leader_epochs(epochs, 10, 20) == ((0, 10), (2, 12))
    assert segment_leader_epochs(epochs, 12, 25) == ((2, 12),)
    assert segment_leader_epochs(epochs, 20, 30) == ((2, 20), (5, 25))


def _meta(store: ArrowRemoteStore, tip, clock: FakeClock | None = None) -> RemotePartitionMetadata:
    return RemotePartitionMetadata.load(store, tip, clock=clock or FakeClock(), broker_id=1)


def test_a_log_is_copied_byte_for_byte(tmp_path: Path, store: ArrowRemoteStore, tip) -> None:
    log = make_log(tmp_path / "orders-2", 3, epochs=(0, 0, 3), aborted_in=(1,))
    metadata = _meta(store, tip)
    copied = copy_log(log, store, metadata, epochs=log.leader_epoch_cache.entries)
    bases = [s.base_offset for s in log.segments]
    assert [(c.start_offset, c.end_offset + 1) for c in copied] == list(zip(bases, bases[1:]))
    for segment, next_base in zip(copied, bases[1:]):
        assert segment.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED
        assert_matches_local(store, segment, log.dir, next_base, expected_epochs_text(log, next_base))
    assert [c.txn_idx_empty for c in copied] == [True, False, True]
    assert copied[2].segment_leader_epochs == ((3, bases[2]),)
    assert copied[1].max_timestamp_ms == max(s.max_timestamp_so_far for s in log.segments[1:2])
    # another process listing the bucket sees the same finished segments
    assert _meta(store, tip).finished_segments() == metadata.finished_segments()
    # nothing more to copy until the next roll
    assert copy_log(log, store, metadata, epochs=log.leader_epoch_cache.entries) == []
    log.close()


def test_epoch_checkpoint_holds_every_epoch_up_to_the_segment(tmp_path: Path, store: ArrowRemoteStore, tip) -> None:
    log = make_log(tmp_path / "orders-2", 3, epochs=(1, 4, 6))
    entries = log.leader_epoch_cache.entries
    copied = copy_log(log, store, _meta(store, tip), epochs=entries)
    text = store.get(object_key(copied[1], RemoteFileKind.LEADER_EPOCH)).decode()
    assert text == format_epoch_checkpoint(entries[:2]) == f"0\n2\n1 0\n4 {log.segments[1].base_offset}\n"
    log.close()


def test_a_missing_producer_snapshot_is_refused(tmp_path: Path, store: ArrowRemoteStore, tip) -> None:
    log = make_log(tmp_path / "orders-2", 2)
    segment, next_base = log.segments[0], log.segments[1].base_offset
    files.producer_snapshot_file(log.dir, next_base).unlink()
    metadata = _meta(store, tip)
    with pytest.raises(MissingSegmentFileError) as raised:
        copy_segment(store, metadata, segment, next_base, dir=log.dir, epochs=log.leader_epoch_cache.entries)
    assert raised.value.partition == "orders-2" and raised.value.path.name.endswith(".snapshot")
    assert "producer snapshot" in str(raised.value)
    assert metadata.segments() == [] and store.list() == []
    log.close()


@pytest.mark.parametrize("nth", range(5))  # .log .index .timeindex .snapshot epochs
def test_a_failed_upload_is_cleaned_up(tmp_path: Path, store: ArrowRemoteStore, tip, nth: int) -> None:
    log = make_log(tmp_path / "orders-2", 2)
    puts = []

    def fail(operation: str, key: str) -> str | None:
        if operation in ("put", "put_file") and "/metadata/" not in key:
            puts.append(key)
            return "after" if len(puts) == nth + 1 else None
        return None

    flaky = FlakyStore(store, fail)
    metadata = _meta(flaky, tip)
    segment, next_base = log.segments[0], log.segments[1].base_offset
    with pytest.raises(RemoteStoreUnreachableError) as raised:
        copy_segment(flaky, metadata, segment, next_base, dir=log.dir, epochs=log.leader_epoch_cache.entries)
    error = raised.value
    assert error.partition == "orders-2" and error.object == puts[nth] and error.retriable
    assert error.segment_id in puts[nth] and "injected lost answer" in error.cause
    assert metadata.segments() == [] and _meta(store, tip).segments() == []
    assert [i.key for i in store.list() if "/metadata/" not in i.key] == []
    # the retry copies it under a new id
    again = copy_segment(flaky, metadata, segment, next_base, dir=log.dir, epochs=log.leader_epoch_cache.entries)
    assert again.id != error.segment_id
    assert_matches_local(store, again, log.dir, next_base)
    log.close()


@pytest.mark.parametrize("when", ["before", "after"])
def test_a_lost_finish_event_is_cleaned_up(tmp_path: Path, store: ArrowRemoteStore, tip, when: str) -> None:
    log = make_log(tmp_path / "orders-2", 2)
    events = []

    def fail(operation: str, key: str) -> str | None:
        if operation == "put" and "/metadata/" in key:
            events.append(key)
            return when if len(events) == 2 else None  # the FINISHED event
        return None

    flaky = FlakyStore(store, fail)
    metadata = _meta(flaky, tip)
    with pytest.raises(RemoteStoreUnreachableError) as raised:
        copy_segment(flaky, metadata, log.segments[0], log.segments[1].base_offset, dir=log.dir,
                     epochs=log.leader_epoch_cache.entries)
    assert raised.value.object == "metadata"
    assert metadata.segments() == [] and _meta(store, tip).segments() == []
    assert [i.key for i in store.list() if "/metadata/" not in i.key] == []
    log.close()


def test_a_failed_cleanup_is_left_for_clean_unreferenced(tmp_path: Path, store: ArrowRemoteStore, tip) -> None:
    log = make_log(tmp_path / "orders-2", 2)
    down = {"on": False}

    def fail(operation: str, key: str) -> str | None:
        if key.endswith(".timeindex"):
            down["on"] = True
        return "before" if down["on"] else None

    flaky = FlakyStore(store, fail)
    metadata = _meta(flaky, tip)
    with pytest.raises(RemoteStorageError):
        copy_segment(flaky, metadata, log.segments[0], log.segments[1].base_offset, dir=log.dir,
                     epochs=log.leader_epoch_cache.entries)
    restarted = _meta(store, tip)  # the store is back; a new process
    [left] = restarted.unreferenced()
    assert left.state == RemoteLogSegmentState.COPY_SEGMENT_STARTED
    assert clean_unreferenced(store, restarted) == [left]
    assert restarted.segments() == [] and [i.key for i in store.list() if "/metadata/" not in i.key] == []
    assert _meta(store, tip).segments() == []
    log.close()


def test_a_segment_deleted_mid_copy_is_a_retriable_error(tmp_path: Path, store: ArrowRemoteStore, tip) -> None:
    log = make_log(tmp_path / "orders-2", 2)
    segment, next_base = log.segments[0], log.segments[1].base_offset

    def fail(operation: str, key: str) -> str | None:
        if key.endswith(".timeindex") and operation == "put_file":  # retention renames the segment meanwhile
            segment.change_file_suffixes("", files.DELETED_SUFFIX)
        return None

    flaky = FlakyStore(store, fail)
    metadata = _meta(flaky, tip)
    with pytest.raises(SegmentSourceGoneError) as raised:
        copy_segment(flaky, metadata, segment, next_base, dir=log.dir, epochs=log.leader_epoch_cache.entries)
    assert raised.value.retriable and raised.value.partition == "orders-2"
    assert metadata.segments() == [] and [i.key for i in store.list() if "/metadata/" not in i.key] == []
    log.close()


def test_a_copy_resumes_after_a_restart(tmp_path: Path, store: ArrowRemoteStore, tip) -> None:
    log = make_log(tmp_path / "orders-2", 4)

    def fail(operation: str, key: str) -> str | None:
        return "before" if key.endswith(".index") and f"{log.segments[2].base_offset:020d}-" in key else None

    first = _meta(store, tip)
    with pytest.raises(RemoteStorageError):
        copy_log(log, FlakyStore(store, fail), first, epochs=log.leader_epoch_cache.entries)
    assert [s.start_offset for s in first.finished_segments()] == [0, log.segments[1].base_offset]
    restarted = _meta(store, tip)
    assert restarted.highest_offset() == log.segments[2].base_offset - 1
    copied = copy_log(log, store, restarted, epochs=log.leader_epoch_cache.entries)
    assert [c.start_offset for c in copied] == [s.base_offset for s in log.segments[2:4]]
    finished = restarted.finished_segments()
    assert [s.start_offset for s in finished] == [s.base_offset for s in log.segments[:4]]
    keys = {i.key for i in store.list(partition_prefix(tip)) if "/metadata/" not in i.key}
    assert keys == {object_key(s, k) for s in finished for k in RemoteFileKind if k is not RemoteFileKind.TRANSACTION_INDEX}
    log.close()


def test_a_segment_swapped_by_the_cleaner_mid_copy_is_a_retriable_error(tmp_path: Path, store: ArrowRemoteStore,
                                                                        tip) -> None:
    log = make_log(tmp_path / "orders-2", 2)
    segment, next_base = log.segments[0], log.segments[1].base_offset
    log_path = files.log_file(log.dir, segment.base_offset)

    def fail(operation: str, key: str) -> str | None:
        if key.endswith(".index") and operation == "put_file":  # a cleaned .log renamed over the name
            cleaned = log_path.with_name(log_path.name + files.CLEANED_SUFFIX)
            cleaned.write_bytes(log_path.read_bytes()[: log_path.stat().st_size // 2])
            cleaned.replace(log_path)
        return None

    metadata = _meta(FlakyStore(store, fail), tip)
    with pytest.raises(SegmentSourceGoneError) as raised:
        copy_segment(metadata.store, metadata, segment, next_base, dir=log.dir, epochs=log.leader_epoch_cache.entries)
    assert raised.value.path == log_path and raised.value.object is None
    assert metadata.segments() == [] and [i.key for i in store.list() if "/metadata/" not in i.key] == []
    log.close()


def test_cleanup_waits_file_delete_delay_for_replaced_segments(tmp_path: Path, store: ArrowRemoteStore, tip) -> None:
    """A segment a swap replaced stays (objects and all) until ``file.delete.delay.ms`` from the
    swap is over, so a reader mid-read finishes; below the log start, or without ``now_ms``, it
    goes at once. STARTED segments never wait."""
    clock = FakeClock()
    log = make_log(tmp_path / "orders-2", 3, clock=clock)
    metadata = _meta(store, tip, clock)
    first, second, _ = copy_log(log, store, metadata, epochs=log.leader_epoch_cache.entries)
    swapped_at = clock.milliseconds()
    [replacement] = metadata.swap([first, second], [replace(first, segment_id=RemoteLogSegmentId.generate(tip),
                                                              end_offset=second.end_offset)])
    stored = lambda: {i.key for i in store.list()}  # noqa: E731
    uploaded = stored()
    keys = lambda m: {object_key(m, k) for k in RemoteFileKind} & uploaded  # noqa: E731 - no empty .txnindex
    for kind in RemoteFileKind:  # the replacement's objects, as a compaction uploads them
        store.put(object_key(replacement, kind), b"x")
    assert clean_unreferenced(store, metadata, now_ms=swapped_at + 59_999, delete_delay_ms=60_000) == []
    assert keys(first) | keys(second) <= stored()
    gone = clean_unreferenced(store, metadata, now_ms=swapped_at + 59_999, delete_delay_ms=60_000,
                              log_start_offset=first.end_offset + 1)
    assert [m.id for m in gone] == [first.id] and not keys(first) & stored() and keys(second) <= stored()
    gone = clean_unreferenced(store, metadata, now_ms=swapped_at + 60_000, delete_delay_ms=60_000)
    assert [m.id for m in gone] == [second.id] and not keys(second) & stored()
    assert metadata.unreferenced() == [] and _meta(store, tip).unreferenced() == []
    log.close()
