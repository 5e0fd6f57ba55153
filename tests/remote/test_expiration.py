"""Remote retention (Kafka's RLMExpirationTask): the planner's rules one by one, and the executor
on a real file:// store with a real Log: log start raised and checkpointed before any delete,
objects gone, DELETE_FINISHED, and a fresh reader of the store sees no deleted segment."""

from __future__ import annotations

from pathlib import Path

import pytest
from copy_helpers import T0, make_log
from remote_helpers import TOPIC_ID_PARTITION, FlakyStore, expire, segment_meta

from tidelog.remote.copy import copy_log
from tidelog.remote.errors import RemoteStorageError
from tidelog.remote.expiration import (
    LOG_START_OFFSET,
    RETENTION_BYTES,
    RETENTION_MS,
    plan_expiration,
    plan_for_log,
)
from tidelog.remote.metadata import RemoteFileKind, RemoteLogSegmentState, object_key
from tidelog.remote.metadata_log import RemotePartitionMetadata
from tidelog.remote.store import ArrowRemoteStore
from tidelog.storage.log import Log
from tidelog.testing import FakeClock
from tidelog.topic_partition import TopicPartition

FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED
TPN = TopicPartition("orders", 2)
NOW = T0 + 10_000_000


def seg(start: int, end: int, *, size: int = 100, ts: int | None = None,
        state: RemoteLogSegmentState = FINISHED):
    from dataclasses import replace
    made = segment_meta(start, end, size=size, state=state)
    return replace(made, max_timestamp_ms=NOW if ts is None else ts)  # young unless told


def plan(segments, *, log_start: int = 0, hw: int = 10_000, ms: int = -1, bytes_: int = -1, local: int = 0,
         now: int = NOW, delete_policy: bool = True):
    return plan_expiration(segments, topic_partition=TPN, log_start_offset=log_start, high_watermark=hw,
                           retention_ms=ms, retention_bytes=bytes_, local_untiered_bytes=local, now_ms=now,
                           delete_policy=delete_policy)


def spans(p) -> list[tuple[int, int, str]]:
    return [(d.segment.start_offset, d.segment.end_offset, d.cause) for d in p.deletions]


def test_unlimited_retention_deletes_nothing() -> None:
    p = plan([seg(0, 9, ts=0), seg(10, 19, ts=0)], ms=-1, bytes_=-1)
    assert p.deletions == () and p.log_start_offset_after == 0
    assert "retention.ms=-1" in p.stop and "retention.bytes=-1" in p.stop
    assert p.summary().startswith("remote retention: nothing: oldest remote segment [0, 9]")


def test_log_start_breach_deletes_segments_wholly_below_it() -> None:
    p = plan([seg(0, 9), seg(10, 19), seg(20, 29)], log_start=15)
    assert spans(p) == [(0, 9, LOG_START_OFFSET)]  # [10, 19] holds 15: kept
    assert p.log_start_offset_after == 15  # never lowered
    p = plan([seg(0, 9), seg(10, 19), seg(20, 29)], log_start=20)
    assert spans(p) == [(0, 9, LOG_START_OFFSET), (10, 19, LOG_START_OFFSET)]


def test_retention_ms_deletes_old_segments_and_the_walk_stops_at_the_first_young_one() -> None:
    old, young = NOW - 5000, NOW - 10
    p = plan([seg(0, 9, ts=old), seg(10, 19, ts=young), seg(20, 29, ts=old)], ms=1000)
    assert spans(p) == [(0, 9, RETENTION_MS)]  # [20, 29] is old too, but the walk stopped at [10, 19]
    assert p.log_start_offset_after == 10
    assert "within retention.ms=1000" in p.stop
    assert "next remote segment [10, 19] ends at or after the log start offset 10" in p.stop
    assert "past retention.ms" in p.summary() and "log start offset 0 -> 10" in p.summary()
    assert spans(plan([seg(0, 9, ts=NOW - 1000)], ms=1000)) == []  # exactly at the limit: kept (Kafka 4.x: <)


def test_a_future_timestamp_keeps_the_segment() -> None:
    p = plan([seg(0, 9, ts=NOW + 60_000)], ms=1000)
    assert p.deletions == () and "in the future" in p.stop


def test_retention_bytes_counts_both_tiers_and_local_untiered_segments() -> None:
    segments = [seg(0, 9, size=100), seg(10, 19, size=100), seg(20, 29, size=100)]
    assert spans(plan(segments, bytes_=300)) == []  # 300 remote bytes: within
    # 150 local bytes not tiered yet: 450 total, 150 over: one whole segment
    assert spans(plan(segments, bytes_=300, local=150)) == [(0, 9, RETENTION_BYTES)]
    assert spans(plan(segments, bytes_=100, local=0)) == [(0, 9, RETENTION_BYTES), (10, 19, RETENTION_BYTES)]
    p = plan(segments, bytes_=250)  # 50 over: less than a segment, nothing goes
    assert p.deletions == () and "less than the segment" in p.stop


def test_bytes_freed_by_another_cause_count_against_the_size_limit() -> None:
    segments = [seg(0, 9, size=100, ts=0), seg(10, 19, size=100), seg(20, 29, size=100)]
    # 300 bytes, limit 200: 100 over; the time rule takes [0, 9], which brings it within
    p = plan(segments, ms=1000, bytes_=200)
    assert spans(p) == [(0, 9, RETENTION_MS)]


def test_only_finished_segments_count_in_the_size() -> None:
    segments = [seg(0, 9, size=100), seg(10, 19, size=5000, state=RemoteLogSegmentState.DELETE_SEGMENT_STARTED)]
    p = plan(segments, bytes_=100)
    assert p.deletions == () and p.leftovers == 1
    assert "deleted again first" in p.summary()


def test_a_replaced_segment_within_its_delete_delay_is_not_called_a_leftover() -> None:
    from dataclasses import replace
    replaced = replace(seg(10, 19, state=RemoteLogSegmentState.DELETE_SEGMENT_STARTED), event_timestamp_ms=NOW - 1)
    p = plan_expiration([seg(0, 9), replaced], topic_partition=TPN, log_start_offset=0, high_watermark=10_000,
                        retention_ms=-1, retention_bytes=-1, local_untiered_bytes=0, now_ms=NOW,
                        delete_delay_ms=60_000)
    assert p.leftovers == 0 and p.waiting == 1
    assert "deleted again first" not in p.summary()
    assert "1 segment(s) DELETE_SEGMENT_STARTED wait file.delete.delay.ms=60000 (1 minute) before" in p.summary()
    below = plan_expiration([replaced], topic_partition=TPN, log_start_offset=20, high_watermark=10_000,
                            retention_ms=-1, retention_bytes=-1, local_untiered_bytes=0, now_ms=NOW,
                            delete_delay_ms=60_000)
    assert below.leftovers == 1 and below.waiting == 0, "below the log start offset nothing waits"


def test_a_segment_being_copied_stops_the_walk() -> None:
    segments = [seg(0, 9, ts=0), seg(10, 19, ts=0, state=RemoteLogSegmentState.COPY_SEGMENT_STARTED),
                seg(20, 29, ts=0)]
    p = plan(segments, ms=1)
    assert spans(p) == [(0, 9, RETENTION_MS)] and "being copied" in p.stop


def test_the_log_start_offset_never_passes_the_high_watermark() -> None:
    p = plan([seg(0, 9, ts=0), seg(10, 19, ts=0)], ms=1, hw=15)
    assert spans(p) == [(0, 9, RETENTION_MS)] and p.log_start_offset_after == 10
    assert "high watermark 15" in p.stop


def test_without_delete_in_the_policy_only_the_log_start_offset_deletes() -> None:
    segments = [seg(0, 9, ts=0), seg(10, 19, ts=0)]
    assert spans(plan(segments, ms=1, bytes_=0, delete_policy=False)) == []
    assert spans(plan(segments, log_start=10, ms=1, delete_policy=False)) == [(0, 9, LOG_START_OFFSET)]
    assert "cleanup.policy" in plan(segments, ms=1, delete_policy=False).stop


def test_the_plan_renders_as_json() -> None:
    p = plan([seg(0, 9, ts=0)], ms=1)
    out = p.to_json()
    assert out["deletions"][0]["cause"] == RETENTION_MS and out["log_start_offset_after"] == 10
    assert out["summary"] == p.summary()


# --- the executor, on a real Log and a file:// store -------------------------------------------

@pytest.fixture
def tiered(tmp_path: Path):
    clock = FakeClock(T0 + 100_000)
    log = make_log(tmp_path / "orders-2", 3, clock=clock)  # 3 sealed segments of 20 records
    store = ArrowRemoteStore((tmp_path / "remote").as_uri())
    metadata = RemotePartitionMetadata.load(store, TOPIC_ID_PARTITION, clock=clock, snapshot_interval=3)
    copy_log(log, store, metadata, epochs=log.leader_epoch_cache.entries, clock=clock)
    assert len(metadata.finished_segments()) == 3
    yield log, store, metadata, clock
    log.close()


def _keys(store: ArrowRemoteStore) -> set[str]:
    return {i.key for i in store.list() if "/metadata/" not in i.key}


def _with(log: Log, **overrides: int) -> None:
    log.update_config(log.config.with_overrides({}, **overrides))


def test_expiration_raises_the_log_start_before_deleting_and_deletes_every_object(tiered) -> None:
    log, store, metadata, clock = tiered
    _with(log, retention_ms=1)
    doomed = metadata.finished_segments()
    seen: list[tuple[int, set[str]]] = []
    plan_ = expire(store, metadata, log, now_ms=clock.milliseconds(),
                   checkpoint_log_start=lambda: seen.append((log.log_start_offset, _keys(store))))
    assert [d.segment.id for d in plan_.deletions] == [s.id for s in doomed]
    # the checkpoint ran with the new log start and before any object was deleted
    assert seen == [(60, {object_key(s, k) for s in doomed for k in RemoteFileKind if k is not RemoteFileKind.TRANSACTION_INDEX})]
    assert log.log_start_offset == 60 and metadata.segments() == []
    assert _keys(store) == set()
    fresh = RemotePartitionMetadata.load(store, TOPIC_ID_PARTITION)
    assert fresh.segments() == [] and fresh.highest_offset() == -1


def test_delete_records_then_a_pass_deletes_remote_segments_below_the_new_log_start(tiered) -> None:
    log, store, metadata, clock = tiered
    before = metadata.finished_segments()
    log.delete_records(45)  # inside the third segment [40, 59]
    checkpoints = []
    plan_ = expire(store, metadata, log, now_ms=clock.milliseconds(),
                   checkpoint_log_start=lambda: checkpoints.append(log.log_start_offset))
    assert spans(plan_) == [(0, 19, LOG_START_OFFSET), (20, 39, LOG_START_OFFSET)]
    assert checkpoints == [45] and log.log_start_offset == 45
    fresh = RemotePartitionMetadata.load(store, TOPIC_ID_PARTITION)
    assert [s.id for s in fresh.segments()] == [before[2].id]
    assert all(object_key(before[2], RemoteFileKind.SEGMENT) in _keys(store) for _ in (0,))
    assert not any(before[0].id in k or before[1].id in k for k in _keys(store))


def test_a_failing_checkpoint_deletes_nothing(tiered) -> None:
    log, store, metadata, clock = tiered
    _with(log, retention_ms=1)
    objects = _keys(store)

    def fail() -> None:
        raise OSError("disk full")

    with pytest.raises(OSError):
        expire(store, metadata, log, now_ms=clock.milliseconds(), checkpoint_log_start=fail)
    assert _keys(store) == objects and len(RemotePartitionMetadata.load(store, TOPIC_ID_PARTITION).finished_segments()) == 3


def test_an_outage_mid_delete_leaves_delete_started_which_the_next_pass_finishes(tiered) -> None:
    log, store, metadata, clock = tiered
    _with(log, retention_bytes=0)
    first = metadata.finished_segments()[0]
    flaky = FlakyStore(store, lambda op, key: "before" if op == "delete" and first.id in key else None)
    metadata.store = flaky  # the writer's own store fails too, as one outage would
    with pytest.raises(RemoteStorageError):
        expire(flaky, metadata, log, now_ms=clock.milliseconds(), checkpoint_log_start=lambda: None)
    fresh = RemotePartitionMetadata.load(store, TOPIC_ID_PARTITION)
    assert fresh.finished_segments() == [] or all(s.start_offset > 0 for s in fresh.finished_segments())
    assert any(s.state == RemoteLogSegmentState.DELETE_SEGMENT_STARTED for s in fresh.segments())
    metadata.store = store
    plan_ = plan_for_log(log, metadata, clock.milliseconds())
    assert plan_.leftovers >= 1
    expire(store, metadata, log, now_ms=clock.milliseconds(), checkpoint_log_start=lambda: None)
    assert RemotePartitionMetadata.load(store, TOPIC_ID_PARTITION).segments() == []
    assert _keys(store) == set()


def test_a_compaction_swap_between_plan_and_carry_out_is_honoured(tiered) -> None:
    """The manager's pass releases task_lock between its two phases (the shared checkpoint sits
    between): a compaction may replace a planned segment meanwhile. The replaced one still goes
    (it ends below the raised log start offset); its replacement stays readable."""
    from dataclasses import replace

    from tidelog.remote.expiration import carry_out, prepare_expiration
    from tidelog.remote.metadata import RemoteLogSegmentId

    log, store, metadata, clock = tiered
    log.delete_records(25)  # inside the second segment [20, 39]: the first segment goes by the log start
    plan_ = prepare_expiration(store, metadata, log, now_ms=clock.milliseconds())
    [planned] = [d.segment for d in plan_.deletions]
    second = metadata.finished_segments()[1]
    cleaned = replace(planned, segment_id=RemoteLogSegmentId.generate(TOPIC_ID_PARTITION),
                      end_offset=second.end_offset)
    metadata.swap([planned, second], [cleaned])  # what the cleaner's switch writes
    carry_out(store, metadata, plan_)
    assert not any(planned.id in k for k in _keys(store)), "the planned segment's objects are gone"
    fresh = RemotePartitionMetadata.load(store, TOPIC_ID_PARTITION)
    assert cleaned.id in {s.id for s in fresh.finished_segments()}
    assert fresh.segment(planned.id) is None and log.log_start_offset == 25
