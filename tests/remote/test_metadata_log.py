"""A partition's remote metadata kept in a real ``file://`` store: the writer's changes and
their rules, restart, snapshots and pruning, replay, crashes and outages between events, and
what a reader refuses (corrupt objects, newer versions, gaps)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidelog.remote.errors import (
    RemoteMetadataError,
    RemoteMetadataVersionError,
    RemoteSegmentStateError,
    RemoteStoreUnreachableError,
)
from tidelog.remote.metadata import RemoteLogSegmentState, TopicIdPartition, metadata_prefix
from tidelog.remote.metadata_codec import event_name, snapshot_name
from tidelog.remote.metadata_log import RemotePartitionMetadata
from tidelog.remote.store import ArrowRemoteStore, RemoteStore
from tidelog.testing import FakeClock
from tidelog.topic_partition import TopicPartition
from remote_helpers import T0, TOPIC_ID_PARTITION, FlakyStore, segment_meta

S = RemoteLogSegmentState
PREFIX = metadata_prefix(TOPIC_ID_PARTITION)


def _open(store: RemoteStore, clock: FakeClock | None = None, interval: int = 100) -> RemotePartitionMetadata:
    return RemotePartitionMetadata.load(store, TOPIC_ID_PARTITION, clock=clock or FakeClock(), broker_id=1,
                                        snapshot_interval=interval)


def _names(store: RemoteStore) -> list[str]:
    return [info.key[len(PREFIX):] for info in store.list(PREFIX)]


def _copied(meta: RemotePartitionMetadata, start: int, end: int, size: int = 1000) -> str:
    segment = meta.begin_copy(segment_meta(start, end, size=size))
    meta.finish_copy(segment.segment_id)
    return segment.id


# --- the writer's changes --------------------------------------------------------------------


def test_an_empty_store_loads_as_no_segments(store: ArrowRemoteStore) -> None:
    meta = _open(store)
    assert meta.segments() == [] and meta.finished_segments() == [] and meta.unreferenced() == []
    assert (meta.highest_offset(), meta.total_size(), meta.next_sequence) == (-1, 0, 0)
    assert meta.segment_for_offset(0) is None


def test_a_copy_is_readable_only_once_finished(store: ArrowRemoteStore, clock: FakeClock) -> None:
    meta = _open(store, clock)
    started = meta.begin_copy(segment_meta(0, 99))
    assert started.state is S.COPY_SEGMENT_STARTED and started.event_timestamp_ms == T0
    assert meta.finished_segments() == [] and meta.unreferenced() == [started]
    assert _open(store).finished_segments() == []  # a reader does not see it either
    clock.advance(5)
    finished = meta.finish_copy(started.segment_id)
    assert finished.state is S.COPY_SEGMENT_FINISHED and finished.event_timestamp_ms == T0 + 5
    assert meta.finished_segments() == [finished] and meta.unreferenced() == []
    assert _open(store).finished_segments() == [finished]
    assert _names(store) == [event_name(0), event_name(1)]


def test_queries_over_finished_segments(store: ArrowRemoteStore) -> None:
    meta = _open(store)
    second = _copied(meta, 100, 199, size=10)
    first = _copied(meta, 0, 99, size=20)
    meta.begin_copy(segment_meta(200, 299, size=1000))  # started only: counts nowhere
    assert [s.id for s in meta.finished_segments()] == [first, second]
    assert (meta.highest_offset(), meta.total_size()) == (199, 30)
    assert meta.segment_for_offset(0).id == first and meta.segment_for_offset(150).id == second
    assert meta.segment_for_offset(250) is None and meta.segment_for_offset(-1) is None


def test_a_delete_goes_unreferenced_then_is_forgotten(store: ArrowRemoteStore) -> None:
    meta = _open(store)
    segment_id = _copied(meta, 0, 99)
    deleting = meta.begin_delete(segment_id)
    assert deleting.state is S.DELETE_SEGMENT_STARTED
    assert meta.finished_segments() == [] and meta.unreferenced() == [deleting] and meta.highest_offset() == -1
    meta.finish_delete(segment_id)
    assert meta.segments() == [] and meta.segment(segment_id) is None
    assert _open(store).segments() == []


def test_a_started_copy_may_be_deleted_straight_away(store: ArrowRemoteStore) -> None:
    meta = _open(store)
    started = meta.begin_copy(segment_meta(0, 9))
    meta.begin_delete(started)
    meta.finish_delete(started)
    assert meta.segments() == []


def test_repeating_a_change_writes_nothing(store: ArrowRemoteStore) -> None:
    meta = _open(store)
    segment = meta.begin_copy(segment_meta(0, 9))
    meta.begin_copy(segment)
    meta.finish_copy(segment)
    meta.finish_copy(segment)
    assert meta.next_sequence == 2 and len(_names(store)) == 2


@pytest.mark.parametrize("steps", [
    ["finish_copy"],                                   # unknown segment
    ["begin", "finish_delete"],                        # STARTED -> DELETE_FINISHED
    ["begin", "finish_copy", "finish_delete"],         # FINISHED -> DELETE_FINISHED
    ["begin", "finish_copy", "begin_delete", "finish_copy"],  # DELETE_STARTED -> FINISHED
    ["begin", "finish_copy", "begin"],                 # FINISHED -> STARTED
])
def test_an_invalid_transition_is_refused_naming_the_segment(store: ArrowRemoteStore, steps: list[str]) -> None:
    meta = _open(store)
    segment = segment_meta(0, 9)
    *valid, invalid = [lambda s=s: meta.begin_copy(segment) if s == "begin" else getattr(meta, s)(segment)
                       for s in steps]
    for step in valid:
        step()
    before = (meta.segments(), meta.next_sequence, _names(store))
    with pytest.raises(RemoteSegmentStateError) as raised:
        invalid()
    assert raised.value.segment_id == segment.id and segment.id in str(raised.value)
    assert (meta.segments(), meta.next_sequence, _names(store)) == before


def test_begin_copy_refuses_an_id_already_recorded_with_other_metadata(store: ArrowRemoteStore) -> None:
    meta = _open(store)
    segment = meta.begin_copy(segment_meta(0, 9))
    with pytest.raises(RemoteSegmentStateError, match="other metadata") as raised:
        meta.begin_copy(segment_meta(0, 19, segment_id=segment.id))
    assert raised.value.segment_id == segment.id


def test_begin_copy_refuses_a_segment_not_in_started_or_of_another_partition(store: ArrowRemoteStore) -> None:
    meta = _open(store)
    with pytest.raises(RemoteSegmentStateError, match="added in COPY_SEGMENT_STARTED"):
        meta.begin_copy(segment_meta(0, 9, state=S.COPY_SEGMENT_FINISHED))
    other = TopicIdPartition(TOPIC_ID_PARTITION.topic_id, TopicPartition("orders", 3))
    with pytest.raises(RemoteSegmentStateError, match="another partition"):
        meta.begin_copy(segment_meta(0, 9, tip=other))


# --- swap ------------------------------------------------------------------------------------


def test_swap_replaces_finished_segments_in_one_event(store: ArrowRemoteStore) -> None:
    meta = _open(store)
    old = [_copied(meta, 0, 99), _copied(meta, 100, 199)]
    prepared = meta.begin_copy(segment_meta(0, 199, size=500))  # uploaded under a STARTED record
    fresh = segment_meta(200, 200, size=1, epochs={0: 200})  # never recorded before
    _copied(meta, 201, 299)
    written = meta.next_sequence
    new = meta.swap(old, [prepared, fresh])
    assert meta.next_sequence == written + 1
    assert [s.state for s in new] == [S.COPY_SEGMENT_FINISHED] * 2
    assert [(s.start_offset, s.end_offset) for s in meta.finished_segments()] == [(0, 199), (200, 200), (201, 299)]
    assert sorted(s.id for s in meta.unreferenced()) == sorted(old)
    assert all(s.state is S.DELETE_SEGMENT_STARTED for s in meta.unreferenced())
    reader = _open(store)
    assert reader.segments() == meta.segments()


@pytest.mark.parametrize("case", ["old_not_finished", "old_unknown", "new_already_finished", "both", "empty"])
def test_swap_refuses_what_is_not_a_switch_of_finished_segments(store: ArrowRemoteStore, case: str) -> None:
    meta = _open(store)
    finished = _copied(meta, 0, 99)
    started = meta.begin_copy(segment_meta(100, 199))
    old, new = {
        "old_not_finished": ([started.id], [segment_meta(0, 199)]),
        "old_unknown": (["AAAAAAAAAAAAAAAAAAAAAQ"], [segment_meta(0, 199)]),
        "new_already_finished": ([], [meta.segment(finished)]),
        "both": ([finished], [meta.segment(finished)]),
        "empty": ([], []),
    }[case]
    before = meta.segments()
    with pytest.raises(RemoteSegmentStateError):
        meta.swap(old, new)
    assert meta.segments() == before and _open(store).segments() == before


# --- restart, snapshots, pruning -------------------------------------------------------------


def test_a_new_instance_loads_what_the_old_one_wrote(store: ArrowRemoteStore) -> None:
    meta = _open(store, interval=4)
    ids = [_copied(meta, n * 10, n * 10 + 9) for n in range(5)]
    meta.begin_delete(ids[0])
    again = _open(store, interval=4)
    assert again.segments() == meta.segments() and again.next_sequence == meta.next_sequence == 11
    again.finish_delete(ids[0])
    assert [s.id for s in _open(store).finished_segments()] == ids[1:]


def test_snapshots_every_n_events_and_pruning_keeps_the_previous_snapshot(store: ArrowRemoteStore) -> None:
    meta = _open(store, interval=3)
    for n in range(4):
        _copied(meta, n * 10, n * 10 + 9)  # events 0..7
    # snapshots after events 2 and 5; the second pruned the events the first covers (0..2)
    assert sorted(_names(store)) == sorted([event_name(3), event_name(4), event_name(5), event_name(6),
                                            event_name(7), snapshot_name(2), snapshot_name(5)])
    _copied(meta, 40, 49)  # events 8, 9: snapshot at 8 drops snapshot 2 and events 3..5
    assert sorted(_names(store)) == sorted([event_name(6), event_name(7), event_name(8), event_name(9),
                                            snapshot_name(5), snapshot_name(8)])
    assert _open(store).segments() == meta.segments()


def test_a_failed_snapshot_is_retried_after_the_next_event(store: ArrowRemoteStore) -> None:
    failing = {"on": True}
    flaky = FlakyStore(store, lambda op, key: "before" if failing["on"] and key.endswith(".snapshot.json") else None)
    meta = _open(flaky, interval=2)
    _copied(meta, 0, 9)
    assert _names(store) == [event_name(0), event_name(1)]
    failing["on"] = False
    meta.begin_copy(segment_meta(10, 19))
    assert snapshot_name(2) in _names(store)
    assert _open(store).segments() == meta.segments()


def test_a_failed_prune_leaves_objects_that_loading_ignores(store: ArrowRemoteStore) -> None:
    flaky = FlakyStore(store, lambda op, key: "before" if op == "delete" else None)
    meta = _open(flaky, interval=2)
    for n in range(4):
        _copied(meta, n * 10, n * 10 + 9)
    assert event_name(0) in _names(store)
    assert _open(store).segments() == meta.segments()


# --- replay == state -------------------------------------------------------------------------

OPS = st.lists(st.tuples(st.sampled_from(["begin", "finish", "delete", "forget", "swap"]), st.integers(0, 50)),
               max_size=40)


@settings(max_examples=25, deadline=None)
@given(OPS, st.integers(1, 6))
def test_replay_equals_the_writers_state(ops: list[tuple[str, int]], interval: int) -> None:
    with tempfile.TemporaryDirectory() as top:
        store = ArrowRemoteStore(Path(top).as_uri())
        meta = _open(store, interval=interval)
        for op, pick in ops:
            _apply_valid(meta, op, pick)
            if pick % 7 == 0:
                assert _open(store, interval=interval).segments() == meta.segments()
        reader = _open(store, interval=interval)
        assert reader.segments() == meta.segments() and reader.next_sequence == meta.next_sequence
        assert reader.finished_segments() == meta.finished_segments()


def _apply_valid(meta: RemotePartitionMetadata, op: str, pick: int) -> None:
    """One valid change chosen by ``op`` and ``pick`` from the current state (none if there is none)."""
    by_state = {s: [x for x in meta.segments() if x.state is s] for s in S}
    candidates = {"finish": by_state[S.COPY_SEGMENT_STARTED], "swap": by_state[S.COPY_SEGMENT_FINISHED],
                  "delete": by_state[S.COPY_SEGMENT_FINISHED] + by_state[S.COPY_SEGMENT_STARTED],
                  "forget": by_state[S.DELETE_SEGMENT_STARTED]}.get(op)
    if op == "begin":
        meta.begin_copy(segment_meta(pick * 100, pick * 100 + 99))
    elif candidates:
        chosen = candidates[pick % len(candidates)]
        {"finish": meta.finish_copy, "delete": meta.begin_delete, "forget": meta.finish_delete,
         "swap": lambda s: meta.swap([s], [segment_meta(s.start_offset, s.end_offset)])}[op](chosen)


# --- crashes and outages between events ------------------------------------------------------


def test_an_event_put_that_fails_leaves_the_previous_state(store: ArrowRemoteStore) -> None:
    failing = {"on": False}
    flaky = FlakyStore(store, lambda op, key: "before" if failing["on"] and op == "put" else None)
    meta = _open(flaky)
    segment = meta.begin_copy(segment_meta(0, 9))
    before = meta.segments()
    failing["on"] = True
    with pytest.raises(RemoteStoreUnreachableError):
        meta.finish_copy(segment)
    assert meta.segments() == before and _open(store).segments() == before
    failing["on"] = False
    assert meta.finish_copy(segment).state is S.COPY_SEGMENT_FINISHED
    assert meta.next_sequence == 2 and _open(store).segments() == meta.segments()


def test_an_event_whose_answer_was_lost_is_found_by_the_next_change(store: ArrowRemoteStore) -> None:
    """The PUT landed but the writer saw an error: its next change reloads, so the landed event
    counts and its sequence is never written again."""
    lost = {"key": event_name(1)}
    flaky = FlakyStore(store, lambda op, key: "after" if op == "put" and key.endswith(lost["key"]) else None)
    meta = _open(flaky)
    segment = meta.begin_copy(segment_meta(0, 9))
    with pytest.raises(RemoteStoreUnreachableError):
        meta.finish_copy(segment)
    lost["key"] = "none"
    assert meta.finish_copy(segment).state is S.COPY_SEGMENT_FINISHED  # already so: nothing written
    meta.begin_copy(segment_meta(10, 19))
    assert _names(store) == [event_name(0), event_name(1), event_name(2)]
    assert _open(store).segments() == meta.segments()


# --- what a reader refuses -------------------------------------------------------------------


def _three_events(store: ArrowRemoteStore) -> RemotePartitionMetadata:
    meta = _open(store)
    _copied(meta, 0, 9)
    meta.begin_copy(segment_meta(10, 19))
    return meta


def test_a_corrupt_event_is_an_error_naming_it(store: ArrowRemoteStore) -> None:
    _three_events(store)
    store.put(PREFIX + event_name(1), b'{"version": 1, "sequence": 1, "type": "upd')
    with pytest.raises(RemoteMetadataError, match="corrupt") as raised:
        _open(store)
    assert raised.value.key == PREFIX + event_name(1)


def test_an_event_that_does_not_apply_is_an_error_naming_it(store: ArrowRemoteStore) -> None:
    _three_events(store)
    store.put(PREFIX + event_name(2), store.get(PREFIX + event_name(1)).replace(b'"sequence":1', b'"sequence":2')
              .replace(b'"state":1', b'"state":3'))
    with pytest.raises(RemoteMetadataError, match="cannot be applied") as raised:
        _open(store)
    assert raised.value.key == PREFIX + event_name(2)


def test_a_newer_version_is_refused(store: ArrowRemoteStore) -> None:
    _three_events(store)
    body = orjson.loads(store.get(PREFIX + event_name(2)))
    store.put(PREFIX + event_name(2), orjson.dumps({**body, "version": 2}))
    with pytest.raises(RemoteMetadataVersionError, match="newer tidelog"):
        _open(store)


def test_a_newer_snapshot_is_refused_not_skipped(store: ArrowRemoteStore) -> None:
    meta = _open(store, interval=2)
    _copied(meta, 0, 9)
    key = PREFIX + snapshot_name(1)
    store.put(key, orjson.dumps({**orjson.loads(store.get(key)), "version": 99}))
    with pytest.raises(RemoteMetadataVersionError) as raised:
        _open(store)
    assert raised.value.key == key


def test_a_gap_is_an_error_naming_the_missing_sequence(store: ArrowRemoteStore) -> None:
    _three_events(store)
    store.delete(PREFIX + event_name(1))
    with pytest.raises(RemoteMetadataError, match="event 1 is missing") as raised:
        _open(store)
    assert raised.value.sequence == 1 and raised.value.key == PREFIX + event_name(1)


def test_a_corrupt_latest_snapshot_falls_back_to_the_previous_one(store: ArrowRemoteStore) -> None:
    meta = _open(store, interval=2)
    for n in range(3):
        _copied(meta, n * 10, n * 10 + 9)  # events 0..5, snapshots 1, 3, 5; kept: 3, 5 and events 4, 5
    store.put(PREFIX + snapshot_name(5), b"\x00garbage")
    assert _open(store).segments() == meta.segments()


def test_a_corrupt_only_snapshot_whose_events_are_pruned_is_an_error_naming_it(store: ArrowRemoteStore) -> None:
    meta = _open(store, interval=2)
    for n in range(3):
        _copied(meta, n * 10, n * 10 + 9)
    store.delete(PREFIX + snapshot_name(3))
    store.put(PREFIX + snapshot_name(5), b"{}")
    with pytest.raises(RemoteMetadataError) as raised:
        _open(store)
    assert raised.value.key == PREFIX + snapshot_name(5)


def test_a_reader_racing_the_writers_pruning_reads_again(store: ArrowRemoteStore) -> None:
    meta = _three_events(store)
    gone = {"times": 2}

    def vanish(op: str, key: str) -> str | None:
        if op == "get" and key.endswith(event_name(1)) and gone["times"]:
            gone["times"] -= 1
            return "missing"
        return None

    flaky = FlakyStore(store, vanish)
    assert _open(flaky).segments() == meta.segments()
    assert [call for call in flaky.calls if call[0] == "list"] == [("list", PREFIX)] * 3


def test_foreign_objects_under_metadata_are_ignored(store: ArrowRemoteStore) -> None:
    meta = _three_events(store)
    store.put(PREFIX + "README.txt", b"hello")
    store.put(PREFIX + "42.json", b"{}")
    assert _open(store).segments() == meta.segments()
