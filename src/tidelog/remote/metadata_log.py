"""A partition's remote metadata, kept in the remote store itself as an append-only log.

Kafka writes remote segment metadata to the ``__remote_log_metadata`` topic and every broker
consumes it; tidelog writes the same events as small objects under the partition's
``<topic>-<topicId>/<partition>/metadata/`` (format: :mod:`tidelog.remote.metadata_codec`), so
anything that can list the bucket (a Spark executor, ``tidelog verify``) finds every finished
segment without a broker:

- an *event* object ``<20-digit sequence>.json`` per change, sequences 0, 1, 2, ... without gaps;
- every ``snapshot_interval`` events, a *snapshot* ``<sequence>.snapshot.json`` of the whole
  state after that event; then the snapshots before the previous one, and the events that the
  previous snapshot covers, are deleted (best effort). Keeping the previous snapshot and the
  events after it lets a reader fall back when the newest snapshot is unreadable.

Loading is one LIST of ``metadata/``, a GET of the newest readable snapshot and GETs of the
events after it, replayed in order; a missing sequence, a corrupt object or one written by a
newer tidelog is an error naming the object. The cost grows with the events since the
previous snapshot (at most twice ``snapshot_interval``), not with the partition's history.

Publishing rule. A segment is readable only once its COPY_SEGMENT_FINISHED event is written,
and the caller writes it (:meth:`RemotePartitionMetadata.finish_copy`) only after every object
of the segment was uploaded; a crash or an outage before that leaves a STARTED segment, listed
by :meth:`~RemotePartitionMetadata.unreferenced` for cleanup and never read. A state change
is applied in memory only after its event object was written, so a failed PUT leaves the
previous state both in memory and in the store. After a failed PUT the writer cannot know
whether the object landed, so its next change first loads the log again (and so never writes a
sequence twice with different content).

One writer per partition (the broker leading it); readers use the same :meth:`load` and
queries and never change anything.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from tidelog.clock import SYSTEM_CLOCK, Clock
from tidelog.errors import TidelogError
from tidelog.remote.errors import (
    RemoteBucketNotFoundError,
    RemoteMetadataError,
    RemoteMetadataVersionError,
    RemoteResourceNotFoundError,
    RemoteSegmentStateError,
    RemoteStorageError,
    with_context,
)
from tidelog.remote.metadata import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    TopicIdPartition,
    metadata_prefix,
)
from tidelog.remote.metadata_codec import (
    Event,
    SegmentAdded,
    SegmentsSwapped,
    SegmentUpdated,
    Snapshot,
    decode_event,
    decode_snapshot,
    encode_event,
    encode_snapshot,
    event_name,
    parse_name,
    snapshot_name,
)
from tidelog.remote.metadata_state import DELETE_FINISHED, DELETE_STARTED, FINISHED, RemoteSegmentsState
from tidelog.remote.store import RemoteStore

logger = logging.getLogger(__name__)

DEFAULT_SNAPSHOT_INTERVAL = 100
_READ_ATTEMPTS = 3

SegmentRef = RemoteLogSegmentId | RemoteLogSegmentMetadata | str


@dataclass(slots=True)
class _Loaded:
    """What a load found: the state, its sequence, and the metadata objects present."""

    state: RemoteSegmentsState
    last_sequence: int  # the last event applied, -1 for none
    snapshot_sequence: int  # the snapshot loaded, -1 for none
    events: dict[int, str] = field(default_factory=dict)
    snapshots: dict[int, str] = field(default_factory=dict)


def _read_log(store: RemoteStore, tip: TopicIdPartition) -> _Loaded:
    """Read the partition's metadata log: one LIST, the newest readable snapshot, the events
    after it. An object listed but gone when read (the writer pruned it meanwhile: a reader that
    raced two snapshots) starts the read again, up to :data:`_READ_ATTEMPTS` times. Every error
    names the partition (``partition``) besides the object."""
    try:
        for _ in range(_READ_ATTEMPTS - 1):
            try:
                return _read_once(store, tip)
            except RemoteBucketNotFoundError:
                raise
            except RemoteResourceNotFoundError:
                continue
        return _read_once(store, tip)
    except RemoteStorageError as e:
        raise with_context(e, f"loading the remote metadata of {tip.topic_partition} failed: {e.message}",
                           partition=str(tip.topic_partition)) from e


def _read_once(store: RemoteStore, tip: TopicIdPartition) -> _Loaded:
    prefix = metadata_prefix(tip)
    found = _Loaded(RemoteSegmentsState(tip), -1, -1)
    for info in store.list(prefix):
        parsed = parse_name(info.key[len(prefix):])
        if parsed is not None:
            (found.snapshots if parsed[0] == "snapshot" else found.events)[parsed[1]] = info.key
    skipped = _load_snapshot(store, tip, found)
    _replay(store, tip, found, skipped)
    return found


def _load_snapshot(store: RemoteStore, tip: TopicIdPartition, found: _Loaded) -> RemoteMetadataError | None:
    """Install the newest readable snapshot in ``found``; returns the error of the newest one
    skipped as unreadable (a newer version is never skipped: it raises)."""
    skipped: RemoteMetadataError | None = None
    for sequence in sorted(found.snapshots, reverse=True):
        key = found.snapshots[sequence]
        try:
            snapshot = decode_snapshot(store.get(key), key=key, uri=store.uri, sequence=sequence, tip=tip)
        except RemoteMetadataVersionError:
            raise
        except RemoteMetadataError as e:
            logger.warning("skipping unreadable remote metadata snapshot: %s", e)
            skipped = skipped or e
            continue
        found.state = RemoteSegmentsState(tip, snapshot.segments)
        found.last_sequence = found.snapshot_sequence = sequence
        return skipped
    return skipped


def _replay(store: RemoteStore, tip: TopicIdPartition, found: _Loaded, skipped: RemoteMetadataError | None) -> None:
    for sequence in sorted(s for s in found.events if s > found.snapshot_sequence):
        expected = found.last_sequence + 1
        if sequence != expected:
            if skipped is not None:
                raise skipped
            raise RemoteMetadataError(
                f"remote metadata log has a gap: event {expected} is missing", sequence=expected,
                key=f"{metadata_prefix(tip)}{event_name(expected)}", uri=store.uri)
        key = found.events[sequence]
        event = decode_event(store.get(key), key=key, uri=store.uri, sequence=sequence, tip=tip)
        try:
            found.state.apply(event)
        except TidelogError as e:
            raise RemoteMetadataError(f"remote metadata event cannot be applied: {e.message}", key=key,
                                      uri=store.uri) from e
        found.last_sequence = sequence


class RemotePartitionMetadata:
    """One partition's remote segments, loaded from the store and, for the partition's single
    writer, changed by appending events.

    Every public method is thread-safe: it takes the instance's lock, and a change holds it
    across its PUT (changes of one partition are serial, as Kafka's per-partition tasks are).
    A change raises :class:`~tidelog.remote.errors.RemoteSegmentStateError` (naming the segment)
    for a transition Kafka's ``isValidTransition`` forbids and a ``RemoteStorageError`` when the
    event cannot be written; in both cases nothing changed. Repeating a change already made (a
    same-state transition) writes nothing and returns the segment as it is.
    """

    def __init__(self, store: RemoteStore, tip: TopicIdPartition, loaded: _Loaded, *, clock: Clock,
                 broker_id: int, snapshot_interval: int) -> None:
        """Use :meth:`load`."""
        if snapshot_interval < 1:
            raise ValueError(f"snapshot_interval must be >= 1, got {snapshot_interval}")
        self.store = store
        self.topic_id_partition = tip
        self._clock = clock
        self._broker_id = broker_id
        self._interval = snapshot_interval
        self._lock = threading.RLock()
        #: Held by whoever changes the partition's remote segments over several steps (a copy
        #: pass, a remote expiration, a compaction's staging and swap), so such changes run one
        #: at a time, as Kafka's per-partition tasks do: a cleanup of STARTED segments must never
        #: run while another task has one in flight. Taken before ``_lock``, never inside it.
        self.task_lock = threading.RLock()
        self._loaded = loaded
        self._uncertain = False

    @classmethod
    def load(cls, store: RemoteStore, tip: TopicIdPartition, *, clock: Clock = SYSTEM_CLOCK, broker_id: int = -1,
             snapshot_interval: int = DEFAULT_SNAPSHOT_INTERVAL) -> RemotePartitionMetadata:
        """The partition's metadata as the store holds it now (module docstring: one LIST, one
        snapshot GET, a GET per event after it). ``broker_id`` and ``clock`` stamp the events
        this instance writes."""
        return cls(store, tip, _read_log(store, tip), clock=clock, broker_id=broker_id, snapshot_interval=snapshot_interval)

    def reload(self) -> None:
        """Read the log from the store again (a reader catching up). Takes the lock."""
        with self._lock:
            self._loaded = _read_log(self.store, self.topic_id_partition)
            self._uncertain = False

    def settle(self) -> None:
        """Read the log from the store again when the outcome of a write is unknown (its PUT
        failed, and may have landed), so the state is the store's; no I/O otherwise. Call it
        before acting on a segment's state after such a failure. Raises a ``RemoteStorageError``
        when the read fails. Takes the lock."""
        with self._lock:
            if self._uncertain:
                self.reload()

    @property
    def next_sequence(self) -> int:
        """The sequence the next event gets. Takes the lock."""
        with self._lock:
            return self._loaded.last_sequence + 1

    # --- changes (the writer) ---------------------------------------------------------------

    def begin_copy(self, metadata: RemoteLogSegmentMetadata) -> RemoteLogSegmentMetadata:
        """Record a new segment in COPY_SEGMENT_STARTED (before uploading any of its objects),
        stamped with the clock's time and this writer's broker id; returns it as recorded."""
        stamped = replace(metadata, event_timestamp_ms=self._clock.milliseconds(), broker_id=self._broker_id)
        with self._lock:
            self._append(SegmentAdded(stamped))
            return self._current(stamped.id)

    def finish_copy(self, segment: SegmentRef) -> RemoteLogSegmentMetadata:
        """COPY_SEGMENT_FINISHED: the segment becomes readable. Call only after every object of
        it was uploaded. Returns it as recorded."""
        with self._lock:
            return self._current(self._transition(segment, FINISHED))

    def begin_delete(self, segment: SegmentRef) -> RemoteLogSegmentMetadata:
        """DELETE_SEGMENT_STARTED (before deleting any object): readers stop seeing it. Returns
        it as recorded."""
        with self._lock:
            return self._current(self._transition(segment, DELETE_STARTED))

    def finish_delete(self, segment: SegmentRef) -> None:
        """DELETE_SEGMENT_FINISHED (after every object is deleted): the segment is forgotten."""
        with self._lock:
            self._transition(segment, DELETE_FINISHED)

    def swap(self, old: Iterable[SegmentRef],
             new: Iterable[RemoteLogSegmentMetadata]) -> list[RemoteLogSegmentMetadata]:
        """In one event: the FINISHED segments ``old`` go to DELETE_SEGMENT_STARTED and ``new``
        (uploaded; unknown or recorded by :meth:`begin_copy`, which lets cleanup find the objects
        of a swap that never happened) become FINISHED. Readers see either the old set or the
        new one. Returns the new segments as recorded."""
        stamp = self._clock.milliseconds()
        added = tuple(replace(m, state=FINISHED, event_timestamp_ms=stamp) for m in new)
        with self._lock:
            self._append(SegmentsSwapped(tuple(_uuid(s) for s in old), added, stamp, self._broker_id))
            return [self._current(m.id) for m in added]

    def _transition(self, segment: SegmentRef, state: RemoteLogSegmentState) -> str:
        """Append the update of ``segment`` to ``state``; the caller holds the lock. Returns its id."""
        segment_id = _uuid(segment)
        self._append(SegmentUpdated(segment_id, state, self._clock.milliseconds(), self._broker_id))
        return segment_id

    def _current(self, segment_id: str) -> RemoteLogSegmentMetadata:
        segment = self._loaded.state.segment(segment_id)
        if segment is None:  # cannot happen: the segment was just written in a state that keeps it
            raise RemoteSegmentStateError("no such remote segment", segment_id=segment_id)
        return segment

    def _append(self, event: Event) -> None:
        """Write ``event`` as the next sequence, then apply it; the caller holds the lock."""
        if self._uncertain:
            self.reload()
        state = self._loaded.state
        state.check(event)
        if state.is_noop(event):
            return
        sequence = self._loaded.last_sequence + 1
        key = metadata_prefix(self.topic_id_partition) + event_name(sequence)
        try:
            self.store.put(key, encode_event(sequence, event))
        except RemoteStorageError:
            self._uncertain = True
            raise
        state.apply_checked(event)
        self._loaded.last_sequence = sequence
        self._loaded.events[sequence] = key
        if sequence - self._loaded.snapshot_sequence >= self._interval:
            self._snapshot(sequence)

    def _snapshot(self, sequence: int) -> None:
        """Write the snapshot at ``sequence``, then prune; a failure is logged and retried after the next event."""
        tip = self.topic_id_partition
        key = metadata_prefix(tip) + snapshot_name(sequence)
        try:
            self.store.put(key, encode_snapshot(Snapshot(sequence, tip, tuple(self._loaded.state.segments()))))
        except RemoteStorageError as e:
            logger.warning("remote metadata snapshot not written (retried after the next event): %s", e)
            return
        previous = self._loaded.snapshot_sequence
        self._loaded.snapshot_sequence = sequence
        self._loaded.snapshots[sequence] = key
        self._prune(previous)

    def _prune(self, previous: int) -> None:
        """Delete the snapshots before ``previous`` and the events it covers; best effort."""
        loaded = self._loaded
        doomed = [(loaded.snapshots, s) for s in loaded.snapshots if s < previous]
        doomed += [(loaded.events, s) for s in loaded.events if s <= previous]
        for objects, sequence in doomed:
            try:
                self.store.delete(objects[sequence])
            except RemoteStorageError as e:
                logger.info("remote metadata object not pruned (retried after the next snapshot): %s", e)
                continue
            del objects[sequence]

    # --- queries (writer and readers) -------------------------------------------------------

    def segment(self, segment: SegmentRef) -> RemoteLogSegmentMetadata | None:
        """The segment in any state but DELETE_SEGMENT_FINISHED, else ``None``. Takes the lock."""
        with self._lock:
            return self._loaded.state.segment(_uuid(segment))

    def segments(self) -> list[RemoteLogSegmentMetadata]:
        """Every segment known, by start offset. Takes the lock; sorts."""
        with self._lock:
            return self._loaded.state.segments()

    def finished_segments(self) -> list[RemoteLogSegmentMetadata]:
        """The readable segments by start offset. Takes the lock; sorted once per change."""
        with self._lock:
            return self._loaded.state.finished_segments()

    def unreferenced(self) -> list[RemoteLogSegmentMetadata]:
        """STARTED and DELETE_STARTED segments, whose objects cleanup deletes. Takes the lock."""
        with self._lock:
            return self._loaded.state.unreferenced()

    def highest_offset(self) -> int:
        """The highest end offset of a FINISHED segment, -1 if none. Takes the lock."""
        with self._lock:
            return self._loaded.state.highest_offset()

    def segment_for_offset(self, offset: int) -> RemoteLogSegmentMetadata | None:
        """The FINISHED segment holding ``offset``, else ``None``. Takes the lock; a binary search."""
        with self._lock:
            return self._loaded.state.segment_for_offset(offset)

    def total_size(self) -> int:
        """The bytes of the FINISHED segments. Takes the lock."""
        with self._lock:
            return self._loaded.state.total_size()


def _uuid(segment: SegmentRef) -> str:
    return segment if isinstance(segment, str) else segment.id
