"""One partition's remote segments as of some point of its metadata log, and the rules of how
events change them (Kafka's ``RemoteLogMetadataCache``, for one partition, without epochs).

Only COPY_SEGMENT_FINISHED segments are readable and count for offsets and sizes; STARTED and
DELETE_SEGMENT_STARTED ones are *unreferenced*: listed so that cleanup can delete their objects;
DELETE_SEGMENT_FINISHED drops the segment. Pure, no I/O; not thread-safe by itself (its owner,
:class:`~tidelog.remote.metadata_log.RemotePartitionMetadata`, holds a lock around it).
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import replace

from tidelog.remote.errors import RemoteSegmentStateError
from tidelog.remote.metadata import (
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    TopicIdPartition,
    is_valid_transition,
)
from tidelog.remote.metadata_codec import Event, SegmentAdded, SegmentsSwapped, SegmentUpdated

STARTED = RemoteLogSegmentState.COPY_SEGMENT_STARTED
FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED
DELETE_STARTED = RemoteLogSegmentState.DELETE_SEGMENT_STARTED
DELETE_FINISHED = RemoteLogSegmentState.DELETE_SEGMENT_FINISHED


class RemoteSegmentsState:
    """The segments of one partition by id, with the queries of the remote tier."""

    def __init__(self, tip: TopicIdPartition, segments: tuple[RemoteLogSegmentMetadata, ...] = ()) -> None:
        self.topic_id_partition = tip
        self._segments = {s.id: s for s in segments}
        self._finished: list[RemoteLogSegmentMetadata] | None = None
        self._starts: list[int] = []

    # --- events ------------------------------------------------------------------------------

    def is_noop(self, event: Event) -> bool:
        """Whether ``event`` (already checked) changes nothing: a repeated add or a same-state update."""
        if isinstance(event, SegmentAdded):
            return event.segment.id in self._segments
        if isinstance(event, SegmentUpdated):
            return self._segments[event.segment_id].state == event.state
        return False

    def check(self, event: Event) -> None:
        """Raise :class:`RemoteSegmentStateError` unless ``event`` is valid on this state."""
        if isinstance(event, SegmentAdded):
            self._check_added(event.segment, STARTED)
            self._check_transition(event.segment.id, STARTED)
            self._check_same(event.segment)
        elif isinstance(event, SegmentUpdated):
            self._check_transition(event.segment_id, event.state, must_exist=True)
        else:
            self._check_swap(event)

    def apply(self, event: Event) -> None:
        """Check ``event``, then change the state by it."""
        self.check(event)
        self.apply_checked(event)

    def apply_checked(self, event: Event) -> None:
        """Change the state by ``event``, which :meth:`check` accepted on this very state."""
        self._finished = None
        if isinstance(event, SegmentAdded):
            self._segments.setdefault(event.segment.id, event.segment)
        elif isinstance(event, SegmentUpdated):
            self._update(event.segment_id, event.state, event.event_timestamp_ms, event.broker_id)
        else:
            for segment_id in event.removed:
                self._update(segment_id, DELETE_STARTED, event.event_timestamp_ms, event.broker_id)
            self._segments.update((s.id, s) for s in event.added)

    def _update(self, segment_id: str, state: RemoteLogSegmentState, stamp: int, broker_id: int) -> None:
        if state == DELETE_FINISHED:
            del self._segments[segment_id]
        else:
            self._segments[segment_id] = self._segments[segment_id].with_update(state, stamp, broker_id)

    def _check_swap(self, event: SegmentsSwapped) -> None:
        if not event.removed and not event.added:
            raise RemoteSegmentStateError("a swap needs segments to remove or to add", segment_id=None)
        added = {s.id for s in event.added}
        for segment_id in event.removed:
            if segment_id in added:
                raise RemoteSegmentStateError("a swap cannot remove and add one segment", segment_id=segment_id)
            self._check_current(segment_id, FINISHED, DELETE_STARTED)
        for segment in event.added:
            self._check_added(segment, FINISHED)
            if segment.id in self._segments:
                self._check_current(segment.id, STARTED, FINISHED)

    def _check_added(self, segment: RemoteLogSegmentMetadata, state: RemoteLogSegmentState) -> None:
        if segment.topic_id_partition != self.topic_id_partition:
            raise RemoteSegmentStateError(f"segment of another partition (this is {self.topic_id_partition})",
                                          segment_id=str(segment.segment_id))
        if segment.state != state:
            raise RemoteSegmentStateError(f"a segment is added in {state.name}", segment_id=segment.id,
                                          from_state=None, to_state=segment.state.name)

    def _check_same(self, segment: RemoteLogSegmentMetadata) -> None:
        """A segment added again must be the one recorded (its event time aside)."""
        current = self._segments.get(segment.id)
        if current is not None and replace(current, event_timestamp_ms=0) != replace(segment, event_timestamp_ms=0):
            raise RemoteSegmentStateError("a segment id added again with other metadata", segment_id=segment.id)

    def _check_transition(self, segment_id: str, target: RemoteLogSegmentState, *, must_exist: bool = False) -> None:
        current = self._segments.get(segment_id)
        if current is None and must_exist:
            raise RemoteSegmentStateError("no such remote segment", segment_id=segment_id, to_state=target.name)
        source = current.state if current is not None else None
        if not is_valid_transition(source, target):
            raise RemoteSegmentStateError("invalid remote segment state transition", segment_id=segment_id,
                                          from_state=source.name if source is not None else None, to_state=target.name)

    def _check_current(self, segment_id: str, expected: RemoteLogSegmentState, target: RemoteLogSegmentState) -> None:
        current = self._segments.get(segment_id)
        if current is None or current.state != expected:
            raise RemoteSegmentStateError(
                f"a swap moves {expected.name} segments to {target.name}", segment_id=segment_id,
                from_state=current.state.name if current is not None else None, to_state=target.name)

    # --- queries -----------------------------------------------------------------------------

    def segment(self, segment_id: str) -> RemoteLogSegmentMetadata | None:
        """The segment with this ``Uuid``, in any state but DELETE_SEGMENT_FINISHED; else ``None``."""
        return self._segments.get(segment_id)

    def segments(self) -> list[RemoteLogSegmentMetadata]:
        """Every segment known (all states but DELETE_SEGMENT_FINISHED), by start offset then id."""
        return sorted(self._segments.values(), key=_order)

    def finished_segments(self) -> list[RemoteLogSegmentMetadata]:
        """The readable (COPY_SEGMENT_FINISHED) segments by start offset (a new list per call)."""
        return list(self._finished_sorted())

    def unreferenced(self) -> list[RemoteLogSegmentMetadata]:
        """COPY_SEGMENT_STARTED and DELETE_SEGMENT_STARTED segments (for cleanup), by start offset."""
        return [s for s in self.segments() if s.state in (STARTED, DELETE_STARTED)]

    def highest_offset(self) -> int:
        """The highest end offset of a FINISHED segment, -1 when there is none."""
        return max((s.end_offset for s in self._finished_sorted()), default=-1)

    def total_size(self) -> int:
        """The bytes of the FINISHED segments."""
        return sum(s.segment_size_in_bytes for s in self._finished_sorted())

    def segment_for_offset(self, offset: int) -> RemoteLogSegmentMetadata | None:
        """The FINISHED segment starting last at or before ``offset``, if its ``[start, end]``
        holds ``offset``; else ``None``. A binary search."""
        finished = self._finished_sorted()
        index = bisect_right(self._starts, offset) - 1
        if index >= 0 and finished[index].end_offset >= offset:
            return finished[index]
        return None

    def _finished_sorted(self) -> list[RemoteLogSegmentMetadata]:
        if self._finished is None:
            self._finished = sorted((s for s in self._segments.values() if s.state == FINISHED), key=_order)
            self._starts = [s.start_offset for s in self._finished]
        return self._finished


def _order(segment: RemoteLogSegmentMetadata) -> tuple[int, str]:
    return segment.start_offset, segment.id
