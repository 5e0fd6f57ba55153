"""Copying sealed local segments to the remote tier (Kafka's ``RLMCopyTask.copyLogSegment``).

- :func:`copy_candidates`: which segments a pass copies (Kafka's rule, pure);
- :func:`copy_segment`: one segment's file set uploaded and published (:func:`upload_objects`,
  which the cleaner's remote compaction uses for the segments it stages too);
- :func:`clean_unreferenced`: what a restart (or the next pass) does with the segments a crash
  or an outage left COPY_SEGMENT_STARTED or DELETE_SEGMENT_STARTED;
- :func:`copy_log`: a pass over one :class:`~tidelog.storage.log.Log` (the three above).

Publishing. A copy records the segment COPY_SEGMENT_STARTED before its first object, uploads
every object, then records COPY_SEGMENT_FINISHED; only FINISHED segments are readable, so a
reader (another host listing the bucket) never sees a partial one. Each attempt has a fresh
segment id, so its objects never collide with a failed attempt's.

Objects (Kafka's ``LogSegmentData`` in Kafka's formats, named by
:func:`~tidelog.remote.metadata.object_key`): the ``.log``, ``.index`` and ``.timeindex`` as the
sealed segment holds them (trimmed), the ``.txnindex`` only when non-empty (the metadata's
``txn_idx_empty`` says which), the producer snapshot at the next segment's base offset
(required), and the leader-epoch checkpoint (version-0 text) of every epoch from the log's
first up to the segment's end. Files are streamed (:meth:`RemoteStore.put_file`), never read
whole into memory, through the copy quota (:mod:`tidelog.remote.quota`).

Failures. A copy that fails marks the attempt DELETE_SEGMENT_STARTED, deletes its objects and
marks it DELETE_SEGMENT_FINISHED (Kafka's KAFKA-17062 cleanup; DELETE_STARTED first because a
failed FINISHED write may have landed, and a readable segment must never lose objects), all
best effort: what fails there stays STARTED or DELETE_STARTED for :func:`clean_unreferenced`.
It then raises a ``RemoteStorageError`` of the cause's class (``retriable`` as the cause's)
naming the partition, the segment id, the object and the cause. A segment the cleaner swapped
or retention deleted while it was read answers
:class:`~tidelog.remote.segment_files.SegmentSourceGoneError` (retriable).

Locks. Nothing here takes the log's lock: a sealed segment's files do not change, and a
replaced one is detected (:mod:`tidelog.remote.segment_files`). The partition's metadata takes
its own lock per change. One copier per partition, as in Kafka.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Protocol, TypeVar

from tidelog.clock import SYSTEM_CLOCK, Clock
from tidelog.errors import TidelogError
from tidelog.remote.errors import RemoteSegmentStateError, RemoteStorageError
from tidelog.remote.metadata import (
    RemoteFileKind,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    TopicIdPartition,
    object_key,
)
from tidelog.remote.metadata_log import RemotePartitionMetadata
from tidelog.remote.quota import CopyQuota
from tidelog.remote.segment_files import MissingSegmentFileError, SegmentFiles, SegmentSourceGoneError, pin_segment_files
from tidelog.remote.store import RemoteStore
from tidelog.storage.checkpoints import EpochEntry, format_epoch_checkpoint

__all__ = ["MissingSegmentFileError", "SegmentSourceGoneError", "clean_unreferenced", "copy_candidates",
           "copy_log", "copy_segment", "delete_is_due", "delete_remote_segment", "leader_epoch_slice", "new_segment_metadata",
           "segment_leader_epochs", "upload_objects"]

logger = logging.getLogger(__name__)

_UNLIMITED = CopyQuota()
_METADATA = "metadata"  # the object a failed metadata event names
_STAMPED = -1  # broker id and event time: begin_copy stamps the writer's


class _Segment(Protocol):
    @property
    def base_offset(self) -> int: ...


S = TypeVar("S", bound=_Segment)


def copy_candidates(segments: Sequence[S], *, highest_remote_offset: int, log_start_offset: int,
                    last_stable_offset: int) -> list[tuple[S, int]]:
    """The segments to copy, oldest first, each with the next segment's base offset (Kafka's
    ``candidateLogSegments``): from ``max(highest_remote_offset + 1, log_start_offset)``, the
    segment holding that offset and every later one whose next segment starts at or below the
    last stable offset. The last segment (the active one) never qualifies. ``segments`` are in
    base-offset order. Pure; O(number of segments)."""
    start = max(highest_remote_offset + 1, log_start_offset)
    found: list[tuple[S, int]] = []
    for current, following in zip(segments, segments[1:]):
        if following.base_offset <= start:  # wholly below the start offset
            continue
        if following.base_offset > last_stable_offset:
            break
        found.append((current, following.base_offset))
    return found


def leader_epoch_slice(epochs: Iterable[EpochEntry], end_offset_exclusive: int) -> list[EpochEntry]:
    """The epochs starting below ``end_offset_exclusive``: the leader-epoch checkpoint uploaded
    with a segment (Kafka's ``epochEntriesInRange(-1, nextSegmentBaseOffset)``). Pure."""
    return [e for e in epochs if e.start_offset < end_offset_exclusive]


def segment_leader_epochs(epochs: Iterable[EpochEntry], start_offset: int,
                          end_offset_exclusive: int) -> tuple[tuple[int, int], ...]:
    """The segment's ``(epoch, first offset)`` pairs (Kafka's ``epochEntriesInRange(start,
    end)``): the epochs of ``[start_offset, end_offset_exclusive)``, the one in force at
    ``start_offset`` starting there. Pure."""
    kept = leader_epoch_slice(epochs, end_offset_exclusive)
    before = [e for e in kept if e.start_offset <= start_offset]
    head = [(before[-1].epoch, start_offset)] if before else []
    return tuple(head + [(e.epoch, e.start_offset) for e in kept if e.start_offset > start_offset])


def copy_segment(store: RemoteStore, metadata: RemotePartitionMetadata, segment: _Segment, next_base_offset: int, *,
                 dir: Path, epochs: Sequence[EpochEntry], quota: CopyQuota = _UNLIMITED) -> RemoteLogSegmentMetadata:
    """Copy the sealed segment at ``segment.base_offset`` of the partition dir ``dir`` (module
    docstring) and return its metadata as COPY_SEGMENT_FINISHED. ``epochs``: the log's leader
    epochs (a snapshot of its cache's entries). The metadata's broker id and event time are
    ``metadata``'s writer's (:meth:`RemotePartitionMetadata.begin_copy` stamps them). Costs one metadata event before and one after,
    one PUT per object, the files' bytes read once; waits for ``quota``.

    Raises (nothing published in every case): :class:`MissingSegmentFileError` naming the file
    when the producer snapshot or an index is missing, :class:`SegmentSourceGoneError` when
    the segment went away meanwhile, a ``RemoteStorageError`` (the store's failure class) naming
    partition, segment id, object and cause. Thread-safe for different partitions; one copy at a
    time per partition."""
    tip = metadata.topic_id_partition
    partition = str(tip.topic_partition)
    with pin_segment_files(dir, segment.base_offset, next_base_offset, partition=partition) as pinned:
        epochs_text = format_epoch_checkpoint(leader_epoch_slice(epochs, next_base_offset)).encode()
        leaders = segment_leader_epochs(epochs, segment.base_offset, next_base_offset)
        if not leaders:
            raise RemoteStorageError(f"cannot copy segment {segment.base_offset}: no leader epoch covers it",
                                     partition=partition, path=dir)
        started = new_segment_metadata(tip, pinned, leaders)
        key: str | None = _METADATA

        def uploading(name: str) -> None:
            nonlocal key
            key = name

        try:
            started = metadata.begin_copy(started)
            upload_objects(store, started, pinned, epochs_text, quota=quota, before_put=uploading)
            key = None  # the local files' check: the error names the path
            pinned.check_unchanged()
            key = _METADATA
            finished = metadata.finish_copy(started)
        except Exception as e:
            error = _copy_error(_source_gone(pinned) or e, partition, started, key)
            _abandon(store, metadata, started)
            raise error from e
    logger.info("copied segment %d..%d of %s to the remote tier as %s (%d bytes)", finished.start_offset,
                finished.end_offset, partition, finished.id, finished.segment_size_in_bytes)
    return finished


def new_segment_metadata(tip: TopicIdPartition, pinned: SegmentFiles,
                         leader_epochs: tuple[tuple[int, int], ...]) -> RemoteLogSegmentMetadata:
    """A new remote segment (fresh id) of ``pinned``'s offsets, ``.log`` size, max timestamp and
    txn index, with ``leader_epochs``, for :meth:`RemotePartitionMetadata.begin_copy` (which
    stamps the broker id and event time). Pure."""
    return RemoteLogSegmentMetadata(
        RemoteLogSegmentId.generate(tip), pinned.base_offset, pinned.next_base_offset - 1, pinned.max_timestamp_ms,
        _STAMPED, _STAMPED, pinned.log_size, leader_epochs, txn_idx_empty=pinned.txn_index_empty)


def upload_objects(store: RemoteStore, segment: RemoteLogSegmentMetadata, pinned: SegmentFiles, epochs_text: bytes,
                   *, quota: CopyQuota = _UNLIMITED, before_put: Callable[[str], None] | None = None) -> None:
    """PUT the objects of ``segment`` (recorded COPY_SEGMENT_STARTED): each pinned file, read
    from its pinned descriptor, then ``epochs_text`` as the leader-epoch checkpoint, all through
    ``quota``. ``before_put(key)`` is called before each PUT (a caller names the object on
    failure). Raises the store's error. Thread-safe for different segments."""
    for file in pinned.files:
        key = object_key(segment, file.kind)
        if before_put is not None:
            before_put(key)
        logger.debug("uploading %s of %s", file.kind.name, segment.segment_id)
        store.put_file(key, file.path, length=file.size, on_chunk=quota.acquire, source=file.source)
    key = object_key(segment, RemoteFileKind.LEADER_EPOCH)
    if before_put is not None:
        before_put(key)
    quota.acquire(len(epochs_text))
    store.put(key, epochs_text)


def _source_gone(pinned: SegmentFiles) -> SegmentSourceGoneError | None:
    """The segment's replacement, when that is why an upload failed (its file vanished)."""
    try:
        pinned.check_unchanged()
    except SegmentSourceGoneError as e:
        return e
    return None


def _copy_error(cause: Exception, partition: str, segment: RemoteLogSegmentMetadata,
                key: str | None) -> RemoteStorageError:
    """The copy's error: the cause's class and context, plus partition, segment id and object."""
    kind = type(cause) if isinstance(cause, RemoteStorageError) else RemoteStorageError
    detail = cause.message if isinstance(cause, TidelogError) else f"{type(cause).__name__}: {cause}"
    context = dict(getattr(cause, "context", {}))
    context.update(partition=partition, segment_id=segment.id, object=key, cause=context.get("cause") or detail)
    return kind(f"copy of segment {segment.start_offset}..{segment.end_offset} to the remote tier failed: {detail}",
                **context)


def _abandon(store: RemoteStore, metadata: RemotePartitionMetadata, segment: RemoteLogSegmentMetadata) -> None:
    """Best effort: DELETE_STARTED, every object deleted, DELETE_FINISHED; a failure leaves the
    segment for :func:`clean_unreferenced` and is logged."""
    try:
        delete_remote_segment(store, metadata, segment)
    except RemoteSegmentStateError as e:
        if metadata.segment(segment) is not None:
            logger.warning("failed copy of %s not cleaned up yet (the next cleanup retries): %s", segment.segment_id, e)
        else:
            logger.debug("failed copy of %s was never recorded: nothing to clean", segment.segment_id)
    except Exception as e:  # the copy's own error is what the caller sees
        logger.warning("failed copy of %s not cleaned up yet (the next cleanup retries): %s", segment.segment_id, e)


def delete_remote_segment(store: RemoteStore, metadata: RemotePartitionMetadata,
                          segment: RemoteLogSegmentMetadata) -> None:
    """Delete one segment: DELETE_SEGMENT_STARTED (a no-op when it is already), a DELETE per
    object kind (absent objects are fine), DELETE_SEGMENT_FINISHED. Raises the first
    ``RemoteStorageError``; the segment then stays DELETE_SEGMENT_STARTED for
    :func:`clean_unreferenced`. Thread-safe as the metadata's changes; the caller holds
    ``metadata.task_lock``."""
    metadata.begin_delete(segment)
    for kind in RemoteFileKind:
        store.delete(object_key(segment, kind))
    metadata.finish_delete(segment)


def delete_is_due(segment: RemoteLogSegmentMetadata, *, now_ms: int, delete_delay_ms: int,
                  log_start_offset: int) -> bool:
    """Whether :func:`clean_unreferenced` deletes ``segment`` (an unreferenced one) at ``now_ms``:
    always when COPY_SEGMENT_STARTED; when DELETE_SEGMENT_STARTED, once it ends below
    ``log_start_offset`` or ``delete_delay_ms`` from its event are over. Pure."""
    return (segment.state != RemoteLogSegmentState.DELETE_SEGMENT_STARTED or segment.end_offset < log_start_offset
            or segment.event_timestamp_ms + delete_delay_ms <= now_ms)


def clean_unreferenced(store: RemoteStore, metadata: RemotePartitionMetadata, *, now_ms: int | None = None,
                       delete_delay_ms: int = 0, log_start_offset: int = 0) -> list[RemoteLogSegmentMetadata]:
    """Delete the objects of every COPY_SEGMENT_STARTED segment and of every
    DELETE_SEGMENT_STARTED one that ends below ``log_start_offset`` (retention's) or was recorded
    at least ``delete_delay_ms`` before ``now_ms`` (a segment a compaction replaced waits
    ``file.delete.delay.ms`` from its swap, so that readers mid-read finish; without ``now_ms``
    every one), and mark each DELETE_SEGMENT_FINISHED
    (:func:`delete_remote_segment`); returns them. After it, copying resumes from
    ``metadata.highest_offset() + 1``. Costs per segment two metadata events (one when already
    DELETE_STARTED) and a DELETE per object kind. Raises the first ``RemoteStorageError`` (the
    rest wait for the next call). Call it only while no copy of the partition is in flight,
    holding ``metadata.task_lock``: a copy in flight is STARTED too. The metadata is settled
    first (:meth:`RemotePartitionMetadata.settle`): a segment a lost answer left STARTED in
    memory may be FINISHED in the store."""
    metadata.settle()
    cleaned = []
    for segment in metadata.unreferenced():
        if now_ms is not None and not delete_is_due(segment, now_ms=now_ms, delete_delay_ms=delete_delay_ms,
                                                    log_start_offset=log_start_offset):
            continue
        delete_remote_segment(store, metadata, segment)
        cleaned.append(segment)
        logger.info("cleaned unreferenced remote segment %s (%s)", segment.segment_id,
                    RemoteLogSegmentState(segment.state).name)
    return cleaned


class _Log(Protocol):
    @property
    def dir(self) -> Path: ...

    @property
    def segments(self) -> Sequence[_Segment]: ...

    @property
    def log_start_offset(self) -> int: ...

    @property
    def last_stable_offset(self) -> int: ...


def copy_log(log: _Log, store: RemoteStore, metadata: RemotePartitionMetadata, *, epochs: Sequence[EpochEntry],
             clock: Clock = SYSTEM_CLOCK, delete_delay_ms: int = 0,
             quota: CopyQuota = _UNLIMITED) -> list[RemoteLogSegmentMetadata]:
    """One copy pass over a log: :func:`clean_unreferenced`, then :func:`copy_segment` of each
    :func:`copy_candidates` (from the highest remote offset), oldest first, stopping at the
    first failure (raised). ``epochs``: the log's leader epochs. Reads the log's segment list
    and offsets without its lock (each a consistent snapshot). Returns the segments copied.
    The segments carry ``metadata``'s writer's broker id; ``clock`` and ``delete_delay_ms`` (the
    log's ``file.delete.delay.ms``) say which DELETE_SEGMENT_STARTED segments the cleanup deletes
    (:func:`clean_unreferenced`)."""
    clean_unreferenced(store, metadata, now_ms=clock.milliseconds(), delete_delay_ms=delete_delay_ms,
                       log_start_offset=log.log_start_offset)
    candidates = copy_candidates(log.segments, highest_remote_offset=metadata.highest_offset(),
                                 log_start_offset=log.log_start_offset, last_stable_offset=log.last_stable_offset)
    return [copy_segment(store, metadata, segment, next_base, dir=log.dir, epochs=epochs, quota=quota)
            for segment, next_base in candidates]
