"""Retention over both tiers: which remote segments go, and why (Kafka's ``RLMExpirationTask``).

:func:`plan_expiration` is the pure decision. It walks the partition's remote segments oldest
first (by start offset) and takes each one that is deletable, stopping at the first that is not:

- a segment being copied (COPY_SEGMENT_STARTED) stops the walk;
- a DELETE_SEGMENT_STARTED segment is passed over: one whose delete is due (below the log start
  offset, or ``file.delete.delay.ms`` from its event over: a delete a crash or an outage
  interrupted) is counted as a leftover, deleted again first
  (:func:`~tidelog.remote.copy.clean_unreferenced`, Kafka's KAFKA-17428 retry); the others (a
  compaction replaced them, or a copy failed, within the delay) are counted as waiting;
- a FINISHED segment ending at or past the high watermark stops the walk (the log start offset
  never passes the high watermark);
- a FINISHED segment is deletable, in this order of causes, when
  1. ``end_offset < log start offset`` (a log-start breach: after DeleteRecords, or local
     retention of a log whose copy is off);
  2. its ``max_timestamp_ms`` is older than ``now - retention.ms`` (``retention.ms=-1``: no limit);
  3. the size still over ``retention.bytes`` covers the whole segment (``retention.bytes=-1``: no
     limit), the size being the FINISHED remote bytes plus the local segments not yet in the
     remote tier (base offset above the highest remote offset, the active segment included).
  Every deletion, whatever its cause, takes its bytes off the size still over the limit (Kafka
  takes them off for the time cause only, so its size rule may delete one segment more).
  Without ``delete`` in ``cleanup.policy`` (a compacted tiered topic) only cause 1 applies, as
  in local retention.

Kafka also skips segments outside the leader-epoch lineage (unclean leader election); tidelog
is a single replica whose lineage is the log's own, so it has no such segments.

:func:`prepare_expiration` (steps 1 to 3 but the checkpoint) and :func:`carry_out` (step 4)
each run under the partition's ``task_lock``; the manager's pass calls them apart, with one
checkpoint for every partition between them and the lock released meanwhile: a compaction may then replace a planned segment, which
:func:`carry_out` still deletes at once (it ends below the raised log start offset, where nothing
waits ``file.delete.delay.ms``); the replacement is judged by a later pass.

1. :func:`~tidelog.remote.copy.clean_unreferenced`: leftovers of earlier runs are deleted;
2. the plan is made on the metadata cached in memory (no LIST, no GET);
3. the log start offset is raised to the largest deleted ``end_offset + 1`` (never past the high
   watermark) and checkpointed through the caller's callback, BEFORE anything is deleted
   (Kafka's KAFKA-15352): after a crash the log never starts below what the remote tier still
   holds;
4. each deleted segment is recorded DELETE_SEGMENT_STARTED (readers stop seeing it), then its
   objects are deleted and it is recorded DELETE_SEGMENT_FINISHED
   (:func:`~tidelog.remote.copy.clean_unreferenced` again).

A crash anywhere leaves either nothing changed in the store (the log start offset, if raised and
checkpointed, still covers the segments: they go at the next pass by cause 1) or
DELETE_SEGMENT_STARTED segments, which the next pass (or a restart's cleanup) deletes.

Costs. A pass with nothing to delete makes no request. Each deleted segment costs two metadata
event PUTs (DELETE_SEGMENT_STARTED and DELETE_SEGMENT_FINISHED), one DELETE per object kind
(six), and the metadata log's periodic snapshot PUT and pruning DELETEs.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from tidelog.remote.copy import clean_unreferenced, delete_is_due, delete_remote_segment
from tidelog.remote.metadata import RemoteLogSegmentMetadata, RemoteLogSegmentState
from tidelog.remote.metadata_log import RemotePartitionMetadata
from tidelog.remote.store import RemoteStore
from tidelog.retention import format_bytes, format_duration
from tidelog.storage.config import LogConfig
from tidelog.topic_partition import TopicPartition

__all__ = ["CAUSES", "ExpirationPlan", "RemoteDeletion", "carry_out",
           "plan_expiration", "plan_for_log", "prepare_expiration"]

logger = logging.getLogger(__name__)

LOG_START_OFFSET = "log start offset"
RETENTION_MS = "retention.ms"
RETENTION_BYTES = "retention.bytes"
CAUSES = (LOG_START_OFFSET, RETENTION_MS, RETENTION_BYTES)
REMOTE_SUMMARY = "remote retention: "  # how ExpirationPlan.summary() starts
REMOTE_NOTHING = "remote retention: nothing: "  # ... when it deletes nothing

_STARTED = RemoteLogSegmentState.COPY_SEGMENT_STARTED
_DELETE_STARTED = RemoteLogSegmentState.DELETE_SEGMENT_STARTED


@dataclass(frozen=True, slots=True)
class RemoteDeletion:
    """One remote segment the walk deletes, the rule that takes it (``cause``, one of
    :data:`CAUSES`) and why (``detail``)."""

    segment: RemoteLogSegmentMetadata
    cause: str
    detail: str

    def to_json(self) -> dict[str, Any]:
        s = self.segment
        return {"segment_id": s.id, "start_offset": s.start_offset, "end_offset": s.end_offset,
                "size": s.segment_size_in_bytes, "max_timestamp_ms": s.max_timestamp_ms, "cause": self.cause,
                "detail": self.detail}


@dataclass(frozen=True, slots=True)
class ExpirationPlan:
    """What remote retention deletes (or would) from one partition, and why it stops where it does.

    ``log_start_offset`` and ``high_watermark`` are the values the plan was made on;
    ``leftovers`` counts the DELETE_SEGMENT_STARTED segments whose delete is due (deleted again
    before the plan is carried out), ``waiting`` those still within ``delete_delay_ms`` (the
    ``file.delete.delay.ms`` the plan was made with). Immutable."""

    topic_partition: TopicPartition
    now_ms: int
    log_start_offset: int
    high_watermark: int
    deletions: tuple[RemoteDeletion, ...]
    stop: str
    leftovers: int = 0
    waiting: int = 0
    delete_delay_ms: int = 0

    @property
    def log_start_offset_after(self) -> int:
        """The log start offset once the plan is carried out: the largest deleted ``end_offset + 1``,
        never below the current one nor past the high watermark."""
        ends = [d.segment.end_offset + 1 for d in self.deletions]
        return min(max([self.log_start_offset, *ends]), max(self.high_watermark, self.log_start_offset))

    @property
    def total_bytes(self) -> int:
        return sum(d.segment.segment_size_in_bytes for d in self.deletions)

    def summary(self) -> str:
        """One line for ``tidelog explain``: what goes next and why, or why nothing does."""
        retry = (f"; {self.leftovers} segment(s) left DELETE_SEGMENT_STARTED by an interrupted delete are "
                 f"deleted again first" if self.leftovers else "")
        if self.waiting:
            retry += (f"; {self.waiting} segment(s) DELETE_SEGMENT_STARTED wait file.delete.delay.ms="
                      f"{self.delete_delay_ms} ({format_duration(self.delete_delay_ms)}) before their objects go")
        if not self.deletions:
            return f"{REMOTE_NOTHING}{self.stop}{retry}"
        first, last = self.deletions[0].segment, self.deletions[-1].segment
        causes = ", ".join(dict.fromkeys(d.cause for d in self.deletions))
        return (f"{REMOTE_SUMMARY}{len(self.deletions)} segment(s) [{first.start_offset}, {last.end_offset}] "
                f"({format_bytes(self.total_bytes)}) past {causes}: {self.deletions[0].detail}; log start offset "
                f"{self.log_start_offset} -> {self.log_start_offset_after}; then stops: {self.stop}{retry}")

    def to_json(self) -> dict[str, Any]:
        """Plain types only (``--json`` output)."""
        return {"now_ms": self.now_ms, "log_start_offset": self.log_start_offset,
                "high_watermark": self.high_watermark, "log_start_offset_after": self.log_start_offset_after,
                "deletions": [d.to_json() for d in self.deletions], "total_bytes": self.total_bytes,
                "stop": self.stop, "leftovers": self.leftovers, "waiting": self.waiting, "summary": self.summary()}


def plan_expiration(segments: Sequence[RemoteLogSegmentMetadata], *, topic_partition: TopicPartition,
                    log_start_offset: int, high_watermark: int, retention_ms: int, retention_bytes: int,
                    local_untiered_bytes: int, now_ms: int, delete_policy: bool = True,
                    delete_delay_ms: int = 0) -> ExpirationPlan:
    """The pure decision (module docstring): the remote segments to delete at ``now_ms``, oldest
    first, each with its cause, and why the walk stops. ``segments``: the partition's remote
    segments in any state; ``local_untiered_bytes``: the bytes of the local segments not yet in
    the remote tier; ``delete_policy``: ``delete`` is in ``cleanup.policy``;
    ``delete_delay_ms``: ``file.delete.delay.ms`` (which DELETE_SEGMENT_STARTED segments are
    leftovers, which wait). O(segments)."""
    ordered = sorted(segments, key=lambda s: (s.start_offset, s.id))
    remote_bytes = sum(s.segment_size_in_bytes for s in ordered if s.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED)
    total = remote_bytes + local_untiered_bytes
    sized = delete_policy and retention_bytes >= 0
    over = total - retention_bytes if sized else 0
    deletions: list[RemoteDeletion] = []
    unreferenced = [s for s in ordered if s.state == _DELETE_STARTED]
    leftovers = sum(1 for s in unreferenced if delete_is_due(s, now_ms=now_ms, delete_delay_ms=delete_delay_ms,
                                                             log_start_offset=log_start_offset))
    stop = "no remote segment left to judge"
    for segment in ordered:
        if segment.state == _DELETE_STARTED:
            continue
        if segment.state == _STARTED:
            stop = f"segment {_span(segment)} is being copied"
            break
        if segment.end_offset + 1 > high_watermark:
            stop = f"segment {_span(segment)} ends at or past the high watermark {high_watermark}"
            break
        start_after = max([log_start_offset, *(d.segment.end_offset + 1 for d in deletions)])
        judged = _judge(segment, log_start_offset, now_ms, retention_ms if delete_policy else -1,
                        retention_bytes if sized else -1, over, total, (not deletions, start_after))
        if judged[0] is None:
            stop = judged[1]
            break
        deletions.append(RemoteDeletion(segment, judged[0], judged[1]))
        over = over - segment.segment_size_in_bytes if sized else over
    else:
        if deletions:
            stop = "every remote segment goes"
    if not delete_policy and not deletions and ordered:
        stop += " (cleanup.policy has no 'delete': only the log start offset deletes remote segments)"
    return ExpirationPlan(topic_partition, now_ms, log_start_offset, high_watermark, tuple(deletions), stop, leftovers,
                          len(unreferenced) - leftovers, delete_delay_ms)


def _judge(segment: RemoteLogSegmentMetadata, log_start_offset: int, now_ms: int, retention_ms: int,
           retention_bytes: int, over: int, total: int, place: tuple[bool, int]) -> tuple[str | None, str]:
    """(cause, detail) when ``segment`` is deletable, else (None, why not: each rule's reason).
    ``place``: whether it is the oldest segment, and the log start offset once the segments
    before it are deleted (what the explanation names)."""
    if segment.end_offset < log_start_offset:
        return LOG_START_OFFSET, f"segment {_span(segment)} ends below the log start offset {log_start_offset}"
    age = now_ms - segment.max_timestamp_ms
    if retention_ms >= 0 and age > retention_ms:
        return RETENTION_MS, (f"segment {_span(segment)}: newest record {format_duration(age)} old, over "
                              f"retention.ms={retention_ms} ({format_duration(retention_ms)})")
    size = segment.segment_size_in_bytes
    if retention_bytes >= 0 and over - size >= 0:
        return RETENTION_BYTES, (f"log {format_bytes(over)} over retention.bytes={retention_bytes} (both tiers: "
                                 f"{format_bytes(total)}) covers segment {_span(segment)} ({format_bytes(size)})")
    oldest, start_after = place
    which = "oldest remote segment" if oldest else "next remote segment"
    why = [f"{which} {_span(segment)} ends at or after the log start offset {start_after}"]
    if retention_ms < 0:
        why.append("retention.ms=-1 (or not 'delete'): no time limit")
    elif age < 0:
        why.append(f"its max timestamp is {format_duration(-age)} in the future")
    else:
        why.append(f"its max timestamp {segment.max_timestamp_ms} is {format_duration(age)} old, within "
                   f"retention.ms={retention_ms} (deletable in {format_duration(retention_ms - age + 1)})")
    if retention_bytes < 0:
        why.append("retention.bytes=-1 (or not 'delete'): no size limit")
    elif over <= 0:
        why.append(f"both tiers hold {format_bytes(total)}, within retention.bytes={retention_bytes}")
    else:
        why.append(f"both tiers are {format_bytes(over)} over retention.bytes={retention_bytes}, less than the "
                   f"segment's {format_bytes(size)}")
    return None, "; ".join(why)


def _span(segment: RemoteLogSegmentMetadata) -> str:
    return f"[{segment.start_offset}, {segment.end_offset}]"


# --- carrying a plan out ------------------------------------------------------------------------

class _Segment(Protocol):
    @property
    def base_offset(self) -> int: ...

    @property
    def size(self) -> int: ...


class _Log(Protocol):
    topic_partition: TopicPartition

    @property
    def config(self) -> LogConfig: ...

    @property
    def log_start_offset(self) -> int: ...

    @property
    def high_watermark(self) -> int: ...

    @property
    def segments(self) -> Sequence[_Segment]: ...

    def maybe_increment_log_start_offset(self, new_offset: int, reason: str = "") -> bool: ...


def plan_for_log(log: _Log, metadata: RemotePartitionMetadata, now_ms: int) -> ExpirationPlan:
    """:func:`plan_expiration` for ``log`` with its remote ``metadata`` (as cached: no request), under
    the log's ``retention.ms``, ``retention.bytes``, ``cleanup.policy`` and ``file.delete.delay.ms``. Reads the log's offsets
    and a snapshot of its segment list without its lock. Thread-safe."""
    config = log.config
    highest = metadata.highest_offset()
    untiered = sum(s.size for s in log.segments if s.base_offset > highest)
    return plan_expiration(metadata.segments(), topic_partition=log.topic_partition,
                           log_start_offset=log.log_start_offset, high_watermark=log.high_watermark,
                           retention_ms=config.retention_ms, retention_bytes=config.retention_bytes,
                           local_untiered_bytes=untiered, now_ms=now_ms, delete_policy=config.delete,
                           delete_delay_ms=config.file_delete_delay_ms)


def prepare_expiration(store: RemoteStore, metadata: RemotePartitionMetadata, log: _Log, *,
                       now_ms: int) -> ExpirationPlan:
    """Steps 1 to 3 of an expiration but the checkpoint (module docstring): leftovers deleted, the
    plan made, the log start offset raised in memory to :attr:`ExpirationPlan.log_start_offset_after`.
    The caller makes the log start offset durable before :func:`carry_out`. Raises a
    ``RemoteStorageError`` of the cleanup (nothing raised then). Thread-safe: holds
    ``metadata.task_lock``; the log takes its own lock to move its start offset."""
    with metadata.task_lock:
        clean_unreferenced(store, metadata, now_ms=now_ms, delete_delay_ms=log.config.file_delete_delay_ms,
                           log_start_offset=log.log_start_offset)
        plan = plan_for_log(log, metadata, now_ms)
        if plan.deletions and plan.log_start_offset_after > log.log_start_offset:
            log.maybe_increment_log_start_offset(plan.log_start_offset_after, "remote retention")
        return plan


def carry_out(store: RemoteStore, metadata: RemotePartitionMetadata, plan: ExpirationPlan) -> None:
    """Step 4, once the log start offset :func:`prepare_expiration` raised is durable: each planned
    segment still FINISHED (a compaction may have replaced it meanwhile) is recorded
    DELETE_SEGMENT_STARTED, then its objects go and it is recorded DELETE_SEGMENT_FINISHED. Raises
    the first ``RemoteStorageError``; what it left is DELETE_SEGMENT_STARTED, deleted by the next
    expiration. Thread-safe: holds ``metadata.task_lock``."""
    with metadata.task_lock:
        for deletion in plan.deletions:
            current = metadata.segment(deletion.segment)
            if current is not None and current.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED:
                metadata.begin_delete(deletion.segment)
        for deletion in plan.deletions:  # all below the raised log start: deleted with no delay, as Kafka
            current = metadata.segment(deletion.segment)
            if current is not None:
                delete_remote_segment(store, metadata, current)
    for d in plan.deletions:
        logger.info("%s: deleted remote segment %s [%d, %d] (%s: %s)", plan.topic_partition, d.segment.id,
                    d.segment.start_offset, d.segment.end_offset, d.cause, d.detail)

