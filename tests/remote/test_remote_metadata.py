"""Kafka's remote segment metadata: states and their transitions, the values' rules, object names."""

from __future__ import annotations

import pytest

from tidelog.errors import InvalidUuidError
from tidelog.remote.metadata import (
    RemoteFileKind,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    TopicIdPartition,
    is_valid_transition,
    metadata_prefix,
    object_key,
    object_keys,
    partition_prefix,
)
from tidelog.storage.metadata import topic_id_to_uuid
from tidelog.topic_partition import TopicPartition
from remote_helpers import TOPIC_ID, TOPIC_ID_PARTITION, segment_meta

S = RemoteLogSegmentState
VALID = {  # Kafka's RemoteLogSegmentState.isValidTransition, written out
    (None, S.COPY_SEGMENT_STARTED),
    (S.COPY_SEGMENT_STARTED, S.COPY_SEGMENT_FINISHED), (S.COPY_SEGMENT_STARTED, S.DELETE_SEGMENT_STARTED),
    (S.COPY_SEGMENT_FINISHED, S.DELETE_SEGMENT_STARTED), (S.DELETE_SEGMENT_STARTED, S.DELETE_SEGMENT_FINISHED),
    *((s, s) for s in S),
}


@pytest.mark.parametrize("source", [None, *S])
@pytest.mark.parametrize("target", list(S))
def test_transitions_are_kafkas(source: RemoteLogSegmentState | None, target: RemoteLogSegmentState) -> None:
    assert is_valid_transition(source, target) == ((source, target) in VALID)


def test_states_carry_kafkas_ids() -> None:
    assert [(s.name, int(s)) for s in S] == [("COPY_SEGMENT_STARTED", 0), ("COPY_SEGMENT_FINISHED", 1),
                                             ("DELETE_SEGMENT_STARTED", 2), ("DELETE_SEGMENT_FINISHED", 3)]


def test_generated_segment_ids_are_fresh_22_char_kafka_uuids() -> None:
    ids = {RemoteLogSegmentId.generate(TOPIC_ID_PARTITION).id for _ in range(200)}
    assert len(ids) == 200
    for text in ids:
        assert len(text) == 22 and not text.startswith("-")
        topic_id_to_uuid(text)


def test_a_malformed_uuid_is_refused() -> None:
    with pytest.raises(InvalidUuidError):
        RemoteLogSegmentId(TOPIC_ID_PARTITION, "not a uuid")
    with pytest.raises(InvalidUuidError):
        TopicIdPartition("short", TopicPartition("t", 0))


def test_metadata_keeps_its_epochs_sorted_and_offers_them_as_a_dict() -> None:
    meta = segment_meta(100, 199, epochs={3: 150, 2: 100})
    assert meta.segment_leader_epochs == ((2, 100), (3, 150))
    assert meta.leader_epochs == {2: 100, 3: 150}
    assert meta.state is S.COPY_SEGMENT_STARTED and meta.txn_idx_empty


@pytest.mark.parametrize(("start", "end", "epochs", "size"), [
    (10, 9, {0: 10}, 1),          # end before start
    (-1, 9, {0: 0}, 1),           # negative start
    (0, 9, {}, 1),                # no epochs
    (0, 9, {0: 0, 1: 10}, 1),     # an epoch starting after the end
    (5, 9, {0: 5, 1: 5}, 1),      # two epochs at one offset
    (5, 9, {0: 7, 1: 6}, 1),      # first offsets not ascending with the epochs
    (0, 9, {0: 0}, -1),           # negative size
])
def test_metadata_refuses_values_that_break_its_rules(start: int, end: int, epochs: dict[int, int], size: int) -> None:
    sid = RemoteLogSegmentId.generate(TOPIC_ID_PARTITION)
    with pytest.raises(ValueError):
        RemoteLogSegmentMetadata(sid, start, end, 0, 1, 0, size, tuple(epochs.items()))


def test_with_update_changes_state_and_event_only() -> None:
    meta = segment_meta(0, 9)
    later = meta.with_update(S.COPY_SEGMENT_FINISHED, 123, 7)
    assert (later.state, later.event_timestamp_ms, later.broker_id) == (S.COPY_SEGMENT_FINISHED, 123, 7)
    assert (later.segment_id, later.start_offset, later.end_offset) == (meta.segment_id, 0, 9)


def test_object_keys_follow_kafkas_reference_naming() -> None:
    meta = segment_meta(4200, 4299, segment_id="AAAAAAAAAAAAAAAAAAAAAQ")
    stem = f"orders-{TOPIC_ID}/2/00000000000000004200-AAAAAAAAAAAAAAAAAAAAAQ"
    assert object_keys(meta) == {
        RemoteFileKind.SEGMENT: stem + ".log", RemoteFileKind.OFFSET_INDEX: stem + ".index",
        RemoteFileKind.TIME_INDEX: stem + ".timeindex", RemoteFileKind.TRANSACTION_INDEX: stem + ".txnindex",
        RemoteFileKind.PRODUCER_SNAPSHOT: stem + ".snapshot",
        RemoteFileKind.LEADER_EPOCH: stem + ".leader_epoch_checkpoint"}
    assert object_key(meta, RemoteFileKind.SEGMENT) == stem + ".log"
    assert partition_prefix(TOPIC_ID_PARTITION) == f"orders-{TOPIC_ID}/2/"
    assert metadata_prefix(TOPIC_ID_PARTITION) == f"orders-{TOPIC_ID}/2/metadata/"
