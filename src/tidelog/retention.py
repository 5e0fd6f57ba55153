"""Retention with the ``delete`` cleanup policy: which oldest segments go, and why.

Kafka's ``UnifiedLog.deleteOldSegments`` (kafka-storage.md §3.5, §3.6), decided by pure functions
and applied by one. Kafka runs up to three passes, in this order, each on what the previous one
left::

    log start offset   delete a segment when the NEXT segment's base offset <= log start offset
    retention.bytes    diff = log size - retention.bytes; delete while diff - segment.size >= 0
    retention.ms       delete when now - segment.largest_timestamp > retention.ms

With ``delete`` in ``cleanup.policy`` all three run; otherwise (``compact`` only, or an empty policy)
only the log-start-offset pass does: records removed by DeleteRecords still free their segments.

Every pass walks the segments from the oldest and stops at the first one it keeps, so what goes
is always a prefix. A segment may go only if the high watermark is at or past its end (the next
segment's base offset, or the log end for the active segment) and it is not the empty active
segment. Consequences worth knowing: a segment with a timestamp in the future keeps itself *and
every newer segment* from time retention; ``retention.ms`` counts from a segment's newest record
(or from the ``.log`` mtime when no record has a timestamp), not its oldest; and when every segment
goes, the log rolls first so an empty active segment remains at the log end.

Decide, do, explain — one code path. :func:`plan_retention` walks the passes over a snapshot of
the log's state, simulating each pass's deletion for the next one (a dry run); and
:func:`delete_old_segments` walks the same passes over the live log, applying each pass (through
:meth:`Log.delete_oldest_segments`) before the next is decided, exactly as Kafka does. Both return
a :class:`RetentionPlan` whose ``reasons`` say, for each pass, why it stops where it stops
(``tidelog explain``). A walk stops early: when nothing is deletable it looks at one segment per
pass, and reads a segment's time index only when the time pass reaches it.

A tiered log (``remote.storage.enable`` with copying on: :attr:`LogConfig.remote_copy_enabled`) keeps its
records in the remote tier, so here, as in Kafka, retention deletes only local copies: the size and
time passes use ``local.retention.bytes`` / ``local.retention.ms`` (-2: ``retention.*``), a segment
goes only once the remote tier holds it (its last offset at or below
:attr:`Log.highest_offset_in_remote_storage`) or the log start offset has passed it, and the
deletion moves the local log start offset, not the log start offset. ``retention.*`` over both
tiers is the remote tier's pass. Kafka's count of deleted segments is the number of entries in
the plan.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Protocol

from tidelog.storage.config import LogConfig
from tidelog.storage.files import filename_prefix_from_offset
from tidelog.storage.log import Log
from tidelog.topic_partition import TopicPartition

LOG_START_OFFSET = "log start offset"
RETENTION_BYTES = "retention.bytes"
RETENTION_MS = "retention.ms"
LOCAL_RETENTION_BYTES = "local.retention.bytes"
LOCAL_RETENTION_MS = "local.retention.ms"
CAUSES = (LOG_START_OFFSET, RETENTION_BYTES, RETENTION_MS, LOCAL_RETENTION_BYTES, LOCAL_RETENTION_MS)

# Why retention deletes from a partition or not (RetentionPlan.reason, ``tidelog explain --json``'s
# "reason" and the ``reason`` label of ``tidelog_log_retention_reason``): :func:`retention_reason`.
RETENTION_REASONS = (DELETING, HELD, COMPACTED, NO_LIMIT, ACTIVE_SEGMENT_ONLY, AWAITING_REMOTE_COPY,
                     BELOW_HIGH_WATERMARK, WITHIN_RETENTION) = (
    "deleting", "held", "compacted", "no_limit", "active_segment_only", "awaiting_remote_copy",
    "below_high_watermark", "within_retention")


class SegmentInfo(Protocol):
    """What retention reads of a segment (:class:`~tidelog.storage.segment.LogSegment` has it).

    ``largest_timestamp`` may read the segment's time index or stat its ``.log``: it is read only
    for segments the time pass reaches.
    """

    @property
    def base_offset(self) -> int: ...

    @property
    def size(self) -> int: ...

    @property
    def largest_timestamp(self) -> int: ...

    @property
    def max_timestamp_so_far(self) -> int: ...


# --- results ------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class SegmentDeletion:
    """One segment retention deletes: offsets [``base_offset``, ``next_offset``), ``size`` bytes,
    the pass that takes it (``cause``: one of :data:`CAUSES`) and why (``detail``)."""

    base_offset: int
    next_offset: int
    size: int
    cause: str
    detail: str

    @property
    def name(self) -> str:
        return filename_prefix_from_offset(self.base_offset)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "base_offset": self.base_offset, "next_offset": self.next_offset,
                "size": self.size, "cause": self.cause, "detail": self.detail}


@dataclass(frozen=True, slots=True)
class PassResult:
    """One pass: the segments it deletes, whether it rolls first (it deletes every segment), and
    ``stop`` — why it stops where it does, or why it does not run (``skipped``)."""

    cause: str
    deleted: tuple[SegmentDeletion, ...]
    stop: str
    skipped: bool = False
    rolls: bool = False
    awaiting_copy: bool = False  # stopped at a segment the remote tier does not hold yet
    high_watermark_bound: bool = False  # stopped at a segment ending past the high watermark

    def to_json(self) -> dict[str, Any]:
        return {"cause": self.cause, "skipped": self.skipped, "rolls": self.rolls, "stop": self.stop,
                "deleted": [d.base_offset for d in self.deleted]}


@dataclass(frozen=True, slots=True)
class RetentionPlan:
    """What one retention run deletes (``dry_run``: would delete) from one partition, and why.

    ``log_start_offset``, ``high_watermark`` and ``log_end_offset`` are the values before the run;
    ``log_start_offset_after`` the value after it. ``notes`` are lines about the policy (e.g. only
    the log-start-offset pass applies); ``reason`` is the one code (:func:`retention_reason`) for
    why it deletes or not.
    """

    topic_partition: TopicPartition
    now_ms: int
    dry_run: bool
    cleanup_policy: tuple[str, ...]
    log_start_offset: int
    high_watermark: int
    log_end_offset: int
    log_start_offset_after: int
    passes: tuple[PassResult, ...]
    notes: tuple[str, ...] = ()
    reason: str = WITHIN_RETENTION

    @property
    def segments(self) -> tuple[SegmentDeletion, ...]:
        """Every segment deleted, oldest first (a prefix of the log)."""
        return tuple(d for p in self.passes for d in p.deleted)

    @property
    def total_bytes(self) -> int:
        return sum(d.size for d in self.segments)

    @property
    def roll_needed(self) -> bool:
        """True when a pass deletes every segment, so the log rolls an empty active segment first."""
        return any(p.rolls for p in self.passes)

    @property
    def reasons(self) -> tuple[str, ...]:
        """Human lines: for each pass that applies, why it stops where it stops; then the notes.
        A line shared by several passes (e.g. the high watermark) appears once."""
        return tuple(dict.fromkeys([p.stop for p in self.passes] + list(self.notes)))

    def summary(self) -> list[str]:
        """A human rendering: one headline, one line per deleted segment, then the reasons."""
        verb = "would delete" if self.dry_run else "deleted"
        count = len(self.segments)
        plural = "" if count == 1 else "s"
        head = f"{self.topic_partition}: {verb} {count} segment{plural} ({format_bytes(self.total_bytes)})"
        if self.log_start_offset_after != self.log_start_offset:
            head += f"; log start offset {self.log_start_offset} -> {self.log_start_offset_after}"
        lines = [head]
        lines += [f"  {d.name} [{d.base_offset}, {d.next_offset}) {format_bytes(d.size)}: {d.cause}: {d.detail}"
                  for d in self.segments]
        if self.roll_needed:
            lines.append(f"  rolls first: an empty active segment remains at {self.log_end_offset}")
        lines += [f"  {reason}" for reason in self.reasons]
        return lines

    def to_json(self) -> dict[str, Any]:
        """Plain types only (``--json`` output)."""
        return {
            "topic": self.topic_partition.topic, "partition": self.topic_partition.partition,
            "now_ms": self.now_ms, "dry_run": self.dry_run, "cleanup_policy": list(self.cleanup_policy),
            "log_start_offset": self.log_start_offset, "high_watermark": self.high_watermark,
            "log_end_offset": self.log_end_offset, "log_start_offset_after": self.log_start_offset_after,
            "segments": [d.to_json() for d in self.segments], "total_bytes": self.total_bytes,
            "roll_needed": self.roll_needed, "reason": self.reason, "reasons": list(self.reasons),
            "passes": [p.to_json() for p in self.passes],
        }


# --- the walk (Kafka's LocalLog.deletableSegments) ------------------------------------------------

# A pass's judgement of one segment given the next one (None: it is the last): (delete it?, why).
Judge = Callable[[SegmentInfo, "SegmentInfo | None"], tuple[bool, str]]


@dataclass(frozen=True, slots=True)
class Walk:
    """The deletable prefix of a walk, each with its upper offset and detail; why the walk stopped;
    and whether it took every segment (the log must roll first)."""

    deletable: tuple[tuple[SegmentInfo, int, str], ...]
    stop: str
    every_segment: bool
    high_watermark_bound: bool = False


def walk(segments: Sequence[SegmentInfo], *, log_end_offset: int, high_watermark: int, judge: Judge) -> Walk:
    """Kafka's ``deletableSegments``: from the oldest segment, take each one whose end (the next
    segment's base offset, or ``log_end_offset`` for the last) is at or below ``high_watermark``,
    that ``judge`` accepts, and that is not the empty last segment; stop at the first one that
    fails. ``judge`` is called only for segments that pass the other two checks, in order (the
    size pass counts on it). Kafka also calls its predicate for the empty last segment, with no
    effect on the outcome; skipping it spares a fresh segment's time index.

    Explanations name the first check that fails in Kafka's order: the empty last segment, then
    the high watermark, then ``judge``'s reason."""
    taken: list[tuple[SegmentInfo, int, str]] = []
    count = len(segments)
    if count == 0:
        return Walk((), "the log has no segment", False)
    for i, segment in enumerate(segments):
        following = segments[i + 1] if i + 1 < count else None
        upper = log_end_offset if following is None else following.base_offset
        if following is None and segment.size == 0:
            return Walk(tuple(taken), f"active segment {_name(segment)} is empty", False)
        if high_watermark < upper:
            return Walk(tuple(taken), f"high watermark {high_watermark} below segment end {upper} "
                                      f"(segment {_name(segment)})", False, True)
        deletable, why = judge(segment, following)
        if not deletable:
            return Walk(tuple(taken), why, False)
        taken.append((segment, upper, why))
    return Walk(tuple(taken), f"every segment is deletable: the log rolls first, keeping an empty "
                              f"active segment at {log_end_offset}", True)


def deletable_segments(
    segments: Sequence[SegmentInfo], *, log_end_offset: int, high_watermark: int,
    predicate: Callable[[SegmentInfo, SegmentInfo | None], bool],
) -> list[SegmentInfo]:
    """:func:`walk` with a plain predicate over (segment, next segment or None): the deletable
    prefix (Kafka's ``deletableSegments`` as its tests call it)."""
    judged = walk(segments, log_end_offset=log_end_offset, high_watermark=high_watermark,
                  judge=lambda s, n: (predicate(s, n), "predicate is false"))
    return [segment for segment, _, _ in judged.deletable]


# --- the passes ---------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class _State:
    """The log as a pass sees it: segments oldest first (the last one active) and its offsets."""

    segments: tuple[SegmentInfo, ...]
    log_start_offset: int
    high_watermark: int
    log_end_offset: int
    tiered: bool = False  # the log's remote copy is on: only copied segments go, locally
    highest_remote_offset: int = -1

    @classmethod
    def of(cls, log: Log) -> _State:
        """Needs ``log.lock``."""
        return cls(tuple(log.segments), log.log_start_offset, log.high_watermark, log.log_end_offset,
                   log.config.remote_copy_enabled, log.highest_offset_in_remote_storage)

    def after_deleting(self, count: int) -> _State:
        """The state once the ``count`` oldest segments are gone: what ``Log.delete_oldest_segments``
        leaves (an empty active segment at the log end when it took all of them)."""
        if count == 0:
            return self
        remaining = self.segments[count:] or (_EmptyActiveSegment(self.log_end_offset),)
        start = self.log_start_offset if self.tiered else max(self.log_start_offset, remaining[0].base_offset)
        return _State(remaining, start, self.high_watermark, self.log_end_offset, self.tiered,
                      self.highest_remote_offset)


@dataclass(frozen=True, slots=True)
class _EmptyActiveSegment:
    """The segment a roll would open at the log end (dry runs only; never judged: it is empty)."""

    base_offset: int
    size: int = 0
    largest_timestamp: int = -1
    max_timestamp_so_far: int = -1


@dataclass(frozen=True, slots=True)
class _Outcome:
    result: PassResult
    segments: tuple[SegmentInfo, ...]


def _run(cause: str, state: _State, judge: Judge) -> _Outcome:
    awaiting: list[bool] = []  # _copied_first notes a stop at a segment not copied yet
    found = walk(state.segments, log_end_offset=state.log_end_offset, high_watermark=state.high_watermark,
                 judge=_copied_first(judge, state, awaiting) if state.tiered else judge)
    deleted = tuple(SegmentDeletion(s.base_offset, upper, s.size, cause, detail)
                    for s, upper, detail in found.deletable)
    return _Outcome(PassResult(cause, deleted, found.stop, rolls=found.every_segment, awaiting_copy=bool(awaiting),
                               high_watermark_bound=found.high_watermark_bound),
                    tuple(s for s, _, _ in found.deletable))


def _copied_first(judge: Judge, state: _State, awaiting: list[bool]) -> Judge:
    """Kafka's ``isSegmentEligibleForDeletion`` after the pass's own judgement, for a tiered log: a
    segment goes only when the remote tier holds its last offset, or the log start offset has
    passed it (the active segment is never copied, so never goes this way)."""
    highest, start = state.highest_remote_offset, state.log_start_offset

    def judged(segment: SegmentInfo, following: SegmentInfo | None) -> tuple[bool, str]:
        deletable, why = judge(segment, following)
        if not deletable or (following is not None and following.base_offset <= start):
            return deletable, why
        if following is None:
            return False, f"active segment {_name(segment)} is never copied to the remote tier: it stays local"
        last = following.base_offset - 1
        if last > highest:
            awaiting.append(True)
            held = f"up to offset {highest}" if highest >= 0 else "nothing yet"
            return False, (f"segment {_name(segment)} (up to offset {last}) is not in the remote tier yet "
                           f"(it holds {held}): local copies go only once copied")
        return True, f"{why}; in the remote tier"

    return judged


def _skip(cause: str, why: str) -> _Outcome:
    return _Outcome(PassResult(cause, (), why, skipped=True), ())


def _log_start_offset_pass(state: _State) -> _Outcome:
    """Kafka's ``deleteLogStartOffsetBreachedSegments``."""
    start = state.log_start_offset

    def judge(segment: SegmentInfo, following: SegmentInfo | None) -> tuple[bool, str]:
        if following is None:
            return False, (f"log start offset {start} lies in the active segment {_name(segment)}: "
                           f"active segment not rolled yet")
        if following.base_offset <= start:
            return True, f"next segment starts at {following.base_offset}, at or below the log start offset {start}"
        return False, (f"segment {_name(segment)} holds offsets up to {following.base_offset - 1}, "
                       f"at or after the log start offset {start}")

    return _run(LOG_START_OFFSET, state, judge)


def _size_pass(retention_bytes: int, key: str = RETENTION_BYTES) -> Callable[[_State], _Outcome]:
    """Kafka's ``deleteRetentionSizeBreachedSegments``: the log's size counts the active segment.
    ``key``: the config the limit came from (``local.retention.bytes`` on a tiered log)."""

    def run(state: _State) -> _Outcome:
        if retention_bytes < 0:
            return _skip(key, f"{key}={retention_bytes}: no size limit")
        total = sum(s.size for s in state.segments)
        if total < retention_bytes:
            size, limit = _two_sizes(total, retention_bytes)
            return _skip(key, f"size {size} below {key} {limit}")
        over = total - retention_bytes

        def judge(segment: SegmentInfo, following: SegmentInfo | None) -> tuple[bool, str]:
            nonlocal over
            if over - segment.size >= 0:
                detail = f"log {format_bytes(over)} over {key} {format_bytes(retention_bytes)}"
                over -= segment.size
                return True, detail
            return False, (f"deleting segment {_name(segment)} ({format_bytes(segment.size)}) would take the log "
                           f"below {key} {format_bytes(retention_bytes)} (it is {format_bytes(over)} over)")

        return _run(key, state, judge)

    return run


def _time_pass(retention_ms: int, now_ms: int, key: str = RETENTION_MS) -> Callable[[_State], _Outcome]:
    """Kafka's ``deleteRetentionMsBreachedSegments``; ``key`` as for :func:`_size_pass`."""

    def judge(segment: SegmentInfo, following: SegmentInfo | None) -> tuple[bool, str]:
        largest = segment.largest_timestamp
        age = now_ms - largest
        if age > retention_ms:
            return True, f"{_newest(segment, age)}, over {key} {format_duration(retention_ms)}"
        if age < 0:
            return False, (f"segment {_name(segment)} has a timestamp {format_duration(-age)} in the future: "
                           f"it and every newer segment are kept")
        return False, (f"segment {_name(segment)}: {_newest(segment, age)}, within {key} "
                       f"{format_duration(retention_ms)} (deletable in {format_duration(retention_ms - age + 1)})")

    def run(state: _State) -> _Outcome:
        if retention_ms < 0:
            return _skip(key, f"{key}={retention_ms}: no time limit")
        return _run(key, state, judge)

    return run


def _newest(segment: SegmentInfo, age: int) -> str:
    if segment.max_timestamp_so_far < 0:
        return f"no record timestamps, .log last modified {format_duration(age)} ago"
    return f"newest record {format_duration(age)} old"


def _passes(config: LogConfig, now_ms: int, tiered: bool = False) -> tuple[list[Callable[[_State], _Outcome]], tuple[str, ...]]:
    """Kafka's ``deleteOldSegments``: the passes that apply under ``cleanup.policy``, and notes.
    ``tiered``: the log's remote copy is on, so the local limits apply (Kafka's ``localRetentionMs``),
    whatever the policy: a compacted tiered log (beyond Kafka) frees its copied segments locally
    too, as the remote tier holds them and the cleaner cleans them there."""
    if tiered:
        return [_log_start_offset_pass, _size_pass(config.local_retention_bytes, LOCAL_RETENTION_BYTES),
                _time_pass(config.local_retention_ms, now_ms, LOCAL_RETENTION_MS)], ()
    if config.delete:
        return [_log_start_offset_pass, _size_pass(config.retention_bytes), _time_pass(config.retention_ms, now_ms)], ()
    policy = ",".join(sorted(config.cleanup_policy))
    shown = f"cleanup.policy={policy}" if policy else "cleanup.policy is empty"
    return [_log_start_offset_pass], (f"{shown}: only the log start offset pass applies",)


# --- entry points -------------------------------------------------------------------------------

def plan_segments(
    segments: Sequence[SegmentInfo], *, config: LogConfig, log_start_offset: int, high_watermark: int,
    log_end_offset: int, now_ms: int, topic_partition: TopicPartition, tiered: bool = False,
    highest_remote_offset: int = -1,
) -> RetentionPlan:
    """The pure decision: which prefix of ``segments`` (oldest first, the last one active) retention
    deletes at ``now_ms`` and why, each pass decided on what the previous one would leave. Reads
    only sizes, and timestamps of segments the time pass reaches. ``tiered``: the log's remote
    copy is on, and the remote tier holds offsets up to ``highest_remote_offset``."""
    state = before = _State(tuple(segments), log_start_offset, high_watermark, log_end_offset, tiered,
                            highest_remote_offset)
    passes, notes = _passes(config, now_ms, tiered)
    results = []
    for run in passes:
        outcome = run(state)
        results.append(outcome.result)
        state = state.after_deleting(len(outcome.segments))
    return _plan(topic_partition, config, before, now_ms, True, results, notes, state.log_start_offset)


def plan_retention(log: Log, now_ms: int) -> RetentionPlan:
    """What :func:`delete_old_segments` would delete at ``now_ms``, and why; changes nothing (a
    dry run, and ``tidelog explain``).

    Holds ``log.lock`` while it reads. Cheap when nothing is deletable: each pass looks at the
    oldest segment only, and the time pass reads a timestamp (time index or ``.log`` mtime) only
    of segments it reaches.
    """
    with log.lock:
        return plan_segments(
            log.segments, config=log.config, log_start_offset=log.log_start_offset,
            high_watermark=log.high_watermark, log_end_offset=log.log_end_offset, now_ms=now_ms,
            topic_partition=log.topic_partition, tiered=log.config.remote_copy_enabled,
            highest_remote_offset=log.highest_offset_in_remote_storage,
        )


def delete_old_segments(log: Log, now_ms: int) -> RetentionPlan:
    """Kafka's ``deleteOldSegments`` at ``now_ms``: run the passes under ``log.lock``, each decided
    on the live log (by the code :func:`plan_segments` runs) and applied before the next is
    decided. Returns what was deleted and why.

    Deleted segments' files are renamed ``.deleted`` and unlinked after ``file.delete.delay.ms``
    by the log's scheduler; the log start offset (of a tiered log: the local log start offset) moves
    to the first remaining segment's base.
    """
    with log.lock:
        before = _State.of(log)
        passes, notes = _passes(log.config, now_ms, before.tiered)
        results = []
        for run in passes:
            outcome = run(_State.of(log))
            results.append(outcome.result)
            if outcome.segments:
                reason = _deletion_reason(log, outcome.result.cause)
                log.delete_oldest_segments(outcome.segments, reason,  # type: ignore[arg-type]
                                           move_log_start=not before.tiered)
        return _plan(log.topic_partition, log.config, before, now_ms, False, results, notes, log.log_start_offset)


def held_plan(log: Log, now_ms: int, *, dry_run: bool, reason: str) -> RetentionPlan:
    """No pass runs on ``log``: its retention is held (``reason`` says why and what ends it)."""
    with log.lock:
        before = _State.of(log)
    return _plan(log.topic_partition, log.config, before, now_ms, dry_run, [], (reason,), before.log_start_offset)


def _deletion_reason(log: Log, cause: str) -> str:
    """Kafka's SegmentDeletionReason, as the log's message."""
    if cause == RETENTION_MS:
        return f"retention time {log.config.retention_ms} ms breach"
    if cause == RETENTION_BYTES:
        return f"retention size {log.config.retention_bytes} bytes breach"
    if cause == LOCAL_RETENTION_MS:
        return f"local retention time {log.config.local_retention_ms} ms breach"
    if cause == LOCAL_RETENTION_BYTES:
        return f"local retention size {log.config.local_retention_bytes} bytes breach"
    return f"log start offset {log.log_start_offset} breach"


def _plan(topic_partition: TopicPartition, config: LogConfig, before: _State, now_ms: int, dry_run: bool,
          results: list[PassResult], notes: tuple[str, ...], start_after: int) -> RetentionPlan:
    return RetentionPlan(
        topic_partition=topic_partition, now_ms=now_ms, dry_run=dry_run,
        cleanup_policy=tuple(sorted(config.cleanup_policy)), log_start_offset=before.log_start_offset,
        high_watermark=before.high_watermark, log_end_offset=before.log_end_offset,
        log_start_offset_after=start_after, passes=tuple(results), notes=notes,
        reason=retention_reason(config, before.tiered, before.segments, results),
    )


def retention_reason(config: LogConfig, tiered: bool, segments: Sequence[SegmentInfo],
                     passes: Sequence[PassResult]) -> str:
    """The one code (of :data:`RETENTION_REASONS`) for why retention deletes from a log or not,
    given the passes it ran over ``segments``: it deletes; it is held (no pass ran); only the
    log-start-offset pass applies (``compact`` without ``delete``); the applicable limits are all
    unlimited; nothing but an empty active segment is left; it waits for the remote tier to copy
    (tiered); the high watermark stops it; else every segment is within the limits. Pure."""
    if any(p.deleted for p in passes):
        return DELETING
    if not passes:
        return HELD
    if not tiered and not config.delete:
        return COMPACTED
    limits = (config.local_retention_bytes, config.local_retention_ms) if tiered else (
        config.retention_bytes, config.retention_ms)
    if all(limit < 0 for limit in limits):
        return NO_LIMIT
    if len(segments) <= 1 and all(s.size == 0 for s in segments):
        return ACTIVE_SEGMENT_ONLY
    if any(p.awaiting_copy for p in passes):
        return AWAITING_REMOTE_COPY
    if any(p.high_watermark_bound for p in passes):
        return BELOW_HIGH_WATERMARK
    return WITHIN_RETENTION


# --- human formatting -----------------------------------------------------------------------------

_DURATION_UNITS = (("day", 86_400_000), ("hour", 3_600_000), ("minute", 60_000), ("second", 1_000))
_BYTE_UNITS = ("KiB", "MiB", "GiB", "TiB", "PiB", "EiB")


def merged_reasons(previous: Mapping[TopicPartition, str], plans: Iterable[RetentionPlan],
                   live: Collection[TopicPartition]) -> Mapping[TopicPartition, str]:
    """``previous`` updated with ``plans``' reason codes, keeping only ``live`` partitions: a
    read-only mapping to replace the old one whole (what a metrics scrape reads without a lock)."""
    merged = {**previous, **{p.topic_partition: p.reason for p in plans}}
    return MappingProxyType({tp: r for tp, r in merged.items() if tp in live})


def format_duration(ms: int) -> str:
    """``999 ms``, ``1 second``, ``1.5 hours``, ``7 days``: the largest unit that fits, one decimal
    at most. Negative durations keep their sign."""
    if ms < 0:
        return f"-{format_duration(-ms)}"
    for unit, size in _DURATION_UNITS:
        if ms >= size:
            value = _one_decimal(ms / size)
            return f"{value} {unit}{'' if value == '1' else 's'}"
    return f"{ms} ms"


def format_bytes(size: int) -> str:
    """``700 B``, ``1.5 KiB``, ``2 GiB``: binary units, one decimal at most."""
    if abs(size) < 1024:
        return f"{size} B"
    value = size / 1024
    for unit in _BYTE_UNITS[:-1]:
        if abs(round(value, 1)) < 1024:
            return f"{_one_decimal(value)} {unit}"
        value /= 1024
    return f"{_one_decimal(value)} {_BYTE_UNITS[-1]}"


def _one_decimal(value: float) -> str:
    text = f"{value:.1f}"
    return text[:-2] if text.endswith(".0") else text


def _two_sizes(a: int, b: int) -> tuple[str, str]:
    """Both sizes formatted, exact bytes when rounding would make them look equal."""
    shown = format_bytes(a), format_bytes(b)
    return shown if shown[0] != shown[1] else (f"{a} B", f"{b} B")


def _name(segment: SegmentInfo) -> str:
    return filename_prefix_from_offset(segment.base_offset)
