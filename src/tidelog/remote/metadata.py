"""Kafka's remote segment metadata (KIP-405's ``RemoteLogSegmentMetadata``) and the names of a
remote segment's objects.

A remote segment is one copy attempt of one local segment: its id is the partition plus a fresh
random Kafka ``Uuid`` (:meth:`RemoteLogSegmentId.generate`), so a retried copy never reuses the
objects of a failed one. Its state moves COPY_SEGMENT_STARTED -> COPY_SEGMENT_FINISHED ->
DELETE_SEGMENT_STARTED -> DELETE_SEGMENT_FINISHED (a started copy may also go straight to
DELETE_SEGMENT_STARTED); only FINISHED segments are readable.

Object keys follow Kafka's reference naming (the Aiven plugin's layout, with Kafka's
``LocalTieredStorage`` suffixes), relative to the store's prefix::

    <topic>-<topicId>/<partition>/<20-digit start offset>-<segment uuid><suffix>
    suffix: .log .index .timeindex .txnindex .snapshot .leader_epoch_checkpoint

and the partition's metadata log lives beside them under ``<topic>-<topicId>/<partition>/metadata/``.
All values here are immutable and safe to share between threads.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum, IntEnum

from tidelog.storage.files import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    PRODUCER_SNAPSHOT_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    filename_prefix_from_offset,
)
from tidelog.storage.metadata import new_topic_id, topic_id_to_uuid
from tidelog.topic_partition import TopicPartition

LEADER_EPOCH_CHECKPOINT_SUFFIX = ".leader_epoch_checkpoint"
METADATA_DIR = "metadata"


class RemoteLogSegmentState(IntEnum):
    """Kafka's ``RemoteLogSegmentState``, with its wire ids."""

    COPY_SEGMENT_STARTED = 0
    COPY_SEGMENT_FINISHED = 1
    DELETE_SEGMENT_STARTED = 2
    DELETE_SEGMENT_FINISHED = 3


_NEXT_STATES = {
    None: {RemoteLogSegmentState.COPY_SEGMENT_STARTED},
    RemoteLogSegmentState.COPY_SEGMENT_STARTED: {RemoteLogSegmentState.COPY_SEGMENT_FINISHED,
                                                 RemoteLogSegmentState.DELETE_SEGMENT_STARTED},
    RemoteLogSegmentState.COPY_SEGMENT_FINISHED: {RemoteLogSegmentState.DELETE_SEGMENT_STARTED},
    RemoteLogSegmentState.DELETE_SEGMENT_STARTED: {RemoteLogSegmentState.DELETE_SEGMENT_FINISHED},
    RemoteLogSegmentState.DELETE_SEGMENT_FINISHED: set(),
}


def is_valid_transition(source: RemoteLogSegmentState | None, target: RemoteLogSegmentState) -> bool:
    """Kafka's ``RemoteLogSegmentState.isValidTransition``: ``None`` (a new segment) may only
    start a copy; a transition to the same state is valid (retries are idempotent)."""
    return source == target or target in _NEXT_STATES[source]


@dataclass(frozen=True, slots=True, order=True)
class TopicIdPartition:
    """Kafka's ``TopicIdPartition``: a partition and its topic's id (22-char Kafka ``Uuid``)."""

    topic_id: str
    topic_partition: TopicPartition

    def __post_init__(self) -> None:
        topic_id_to_uuid(self.topic_id)

    @property
    def topic(self) -> str:
        return self.topic_partition.topic

    @property
    def partition(self) -> int:
        return self.topic_partition.partition

    def __str__(self) -> str:
        return f"{self.topic_id}:{self.topic_partition}"


@dataclass(frozen=True, slots=True, order=True)
class RemoteLogSegmentId:
    """Kafka's ``RemoteLogSegmentId``: the partition and the copy attempt's ``Uuid`` (``id``,
    22-char URL-safe base64 as Kafka prints a ``Uuid``)."""

    topic_id_partition: TopicIdPartition
    id: str

    def __post_init__(self) -> None:
        topic_id_to_uuid(self.id)

    @classmethod
    def generate(cls, topic_id_partition: TopicIdPartition) -> RemoteLogSegmentId:
        """A new id with a random ``Uuid`` (Kafka's ``Uuid.randomUuid``): one per copy attempt."""
        return cls(topic_id_partition, new_topic_id())

    def __str__(self) -> str:
        return f"{self.topic_id_partition}:{self.id}"


@dataclass(frozen=True, slots=True)
class RemoteLogSegmentMetadata:
    """Kafka's ``RemoteLogSegmentMetadata`` (without custom metadata).

    ``end_offset`` is inclusive. ``segment_leader_epochs`` holds ``(epoch, first offset)`` pairs,
    epochs ascending, non-empty, each first offset within ``[start_offset, end_offset]`` and
    ascending. Raises ``ValueError`` for values that break those rules.
    """

    segment_id: RemoteLogSegmentId
    start_offset: int
    end_offset: int
    max_timestamp_ms: int
    broker_id: int
    event_timestamp_ms: int
    segment_size_in_bytes: int
    segment_leader_epochs: tuple[tuple[int, int], ...]
    txn_idx_empty: bool = True
    state: RemoteLogSegmentState = RemoteLogSegmentState.COPY_SEGMENT_STARTED

    def __post_init__(self) -> None:
        epochs = tuple((int(e), int(o)) for e, o in _pairs(self.segment_leader_epochs))
        object.__setattr__(self, "segment_leader_epochs", epochs)
        object.__setattr__(self, "state", RemoteLogSegmentState(self.state))
        if not 0 <= self.start_offset <= self.end_offset:
            raise ValueError(f"need 0 <= start_offset <= end_offset, got {self.start_offset}..{self.end_offset}")
        if self.segment_size_in_bytes < 0:
            raise ValueError(f"segment size must be >= 0, got {self.segment_size_in_bytes}")
        _check_epochs(epochs, self.start_offset, self.end_offset)

    @property
    def id(self) -> str:
        """The segment's ``Uuid`` string."""
        return self.segment_id.id

    @property
    def topic_id_partition(self) -> TopicIdPartition:
        return self.segment_id.topic_id_partition

    @property
    def leader_epochs(self) -> dict[int, int]:
        """``segment_leader_epochs`` as a dict epoch -> first offset (a new dict per call)."""
        return dict(self.segment_leader_epochs)

    def with_update(self, state: RemoteLogSegmentState, event_timestamp_ms: int, broker_id: int) -> RemoteLogSegmentMetadata:
        """Kafka's ``createWithUpdates``: the same segment in ``state``, as of the update's event.
        Does not check the transition (:func:`is_valid_transition` does)."""
        return dataclasses.replace(self, state=state, event_timestamp_ms=event_timestamp_ms, broker_id=broker_id)


def _pairs(epochs: Mapping[int, int] | tuple[tuple[int, int], ...]) -> list[tuple[int, int]]:
    items = list(epochs.items()) if isinstance(epochs, Mapping) else list(epochs)
    return sorted(items)


def _check_epochs(epochs: tuple[tuple[int, int], ...], start: int, end: int) -> None:
    if not epochs:
        raise ValueError("segment leader epochs must not be empty")
    offsets = [offset for _, offset in epochs]
    ascending = all(a[0] < b[0] and a[1] < b[1] for a, b in zip(epochs, epochs[1:]))
    if not ascending or epochs[0][0] < 0:
        raise ValueError(f"leader epochs must be distinct, >= 0, with ascending first offsets, got {epochs}")
    if offsets[0] < 0 or offsets[-1] > end or (len(offsets) > 1 and offsets[1] <= start):
        raise ValueError(f"leader epochs {epochs} do not fit the segment's offsets {start}..{end}")


# --- object names ----------------------------------------------------------------------------

class RemoteFileKind(Enum):
    """The objects of one remote segment (Kafka's ``IndexType`` plus the log), by suffix."""

    SEGMENT = LOG_SUFFIX
    OFFSET_INDEX = INDEX_SUFFIX
    TIME_INDEX = TIME_INDEX_SUFFIX
    TRANSACTION_INDEX = TXN_INDEX_SUFFIX
    PRODUCER_SNAPSHOT = PRODUCER_SNAPSHOT_SUFFIX
    LEADER_EPOCH = LEADER_EPOCH_CHECKPOINT_SUFFIX


def partition_prefix(tip: TopicIdPartition) -> str:
    """``<topic>-<topicId>/<partition>/``: the key prefix of everything of one partition."""
    return f"{tip.topic}-{tip.topic_id}/{tip.partition}/"


def metadata_prefix(tip: TopicIdPartition) -> str:
    """``<topic>-<topicId>/<partition>/metadata/``: the partition's metadata log."""
    return f"{partition_prefix(tip)}{METADATA_DIR}/"


def object_key(metadata: RemoteLogSegmentMetadata, kind: RemoteFileKind) -> str:
    """The key of one object of a remote segment:
    ``<topic>-<topicId>/<partition>/<20-digit start offset>-<uuid><suffix>``."""
    name = f"{filename_prefix_from_offset(metadata.start_offset)}-{metadata.id}{kind.value}"
    return partition_prefix(metadata.topic_id_partition) + name


def object_keys(metadata: RemoteLogSegmentMetadata) -> dict[RemoteFileKind, str]:
    """The key of every object kind of a remote segment (the transaction index is optional)."""
    return {kind: object_key(metadata, kind) for kind in RemoteFileKind}
