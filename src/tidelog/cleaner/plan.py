"""What the cleaner may clean, which log it cleans first, and why a log is not cleaned now.

Kafka's ``LogCleanerManager.cleanableOffsets``, ``maxCompactionDelay``, ``calculateCleanableBytes``
and ``LogToClean`` (kafka-storage.md §3.7.3), as pure functions over a log's segments and ``now``.
They read only segment metadata (sizes, base offsets, a segment's largest timestamp and its first
batch's timestamp), never records. The picture, for one partition::

    log start        first dirty           first uncleanable            log end
       |---- clean ----|------ cleanable ------|------ not yet ------------|
                       (cleaner checkpoint)    min(last stable offset, active segment base,
                                                   first segment inside min.compaction.lag.ms)

* **First dirty offset**: the partition's entry in ``cleaner-offset-checkpoint``, or the log start
  offset when there is none. A checkpoint below the log start (records deleted) or past the log
  end (truncation, a lost tail) is reset to the log start offset and the checkpoint is rewritten
  (``checkpoint_reset``).
* **First uncleanable offset**: the cleaner never cleans the active segment, past the last stable
  offset (the high watermark, or the first offset of the oldest open transaction), nor a segment
  holding a record younger than ``min.compaction.lag.ms``. The cleaner works on whole segments,
  so the range it cleans ends at the base offset of the segment holding that offset.
* **Dirty ratio**: cleanable bytes / (clean bytes + cleanable bytes), where a segment straddling
  the first dirty offset counts in both. A log is a candidate when the ratio is *strictly above*
  ``min.cleanable.dirty.ratio``, or when it is overdue by ``max.compaction.lag.ms`` (KIP-354: its
  oldest dirty segment's first batch is older than ``now - max.compaction.lag.ms``) and has
  cleanable bytes. The candidate with the highest ratio is cleaned first; an overdue log does not
  jump the queue by itself.

Decide and explain with one code path: :func:`log_to_clean` is what the cleaner manager chooses
with, and :func:`explain_log` (``tidelog explain``) renders the same values with the reasons, plus
:func:`eligible_at`, which replays the decision at the future times when the time bounds move.

Thread-safety: the functions take no lock. They read a log's offsets and one snapshot of its
segment list; appends and rolls may run meanwhile (the range only gets more conservative), and
truncation and deletion pause cleaning before they start (see :mod:`.manager`).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from tidelog.retention import format_bytes, format_duration
from tidelog.storage.log import Log
from tidelog.storage.segment import LogSegment
from tidelog.topic_partition import TopicPartition

LONG_MAX = 2**63 - 1

# What bounds the cleanable range (CleanableRange.bound).
ACTIVE_SEGMENT = "active segment"
MIN_COMPACTION_LAG = "min.compaction.lag.ms"
LAST_STABLE_OFFSET = "last stable offset"
HIGH_WATERMARK = "high watermark"
NO_SEGMENT = "no segment"


# Why a partition is cleaned or not (CleaningExplanation.reason, ``tidelog explain --json``'s
# "reason" and the ``reason`` label of ``tidelog_log_cleaner_reason``): :func:`cleaning_reason`.
CLEANING_REASONS = (CLEANABLE, NOT_COMPACTED, IN_PROGRESS, PAUSED, ABORTED_CLEAN, QUARANTINED, EMPTY, NOTHING_DIRTY,
                    MIN_COMPACTION_LAG_REASON, OPEN_TRANSACTION, BELOW_MIN_CLEANABLE_RATIO, STATS_FAILED) = (
    "cleanable", "not_compacted", "in_progress", "paused", "aborted", "quarantined", "empty", "nothing_dirty",
    "min_compaction_lag", "open_transaction", "below_min_cleanable_ratio", "stats_failed")


# --- values ---------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class CleanableRange:
    """Kafka's ``OffsetsToClean``: offsets [``first_dirty_offset``, ``first_uncleanable_offset``)
    may be cleaned (not segment aligned). ``checkpoint_reset``: the checkpoint was invalid (below
    the log start or past the log end) and must be rewritten as the log start offset. ``bound`` names what bounds the range (one of :data:`ACTIVE_SEGMENT`,
    :data:`MIN_COMPACTION_LAG`, :data:`LAST_STABLE_OFFSET`, :data:`HIGH_WATERMARK`) and
    ``uncleanable_reason`` says it in words; ``bound_eligible_at`` is, for the compaction lag, when
    the bounding segment becomes old enough (else None)."""

    first_dirty_offset: int
    first_uncleanable_offset: int
    uncleanable_reason: str
    checkpoint_reset: bool
    bound: str = ACTIVE_SEGMENT
    bound_eligible_at: int | None = None


@dataclass(frozen=True, slots=True, eq=False)
class LogToClean:
    """One log's cleaning stats at ``now_ms`` (Kafka's ``LogToClean``).

    ``first_uncleanable_offset`` is segment aligned: the base offset of the segment holding the
    range's end (the active segment's when the end is in it or past it); the cleaner cleans
    [``first_dirty_offset``, ``first_uncleanable_offset``). ``clean_bytes``: segments wholly below
    the first dirty offset; ``cleanable_bytes``: segments from the one holding the first dirty
    offset up to the first uncleanable one. ``max_compaction_delay_ms`` > 0 means the log is
    overdue by ``max.compaction.lag.ms`` (``needs_compaction_now``); ``earliest_dirty_timestamp``
    is the oldest first-batch timestamp of the dirty non-active segments (:data:`LONG_MAX` when
    none is known)."""

    topic_partition: TopicPartition
    log: Log
    offsets: CleanableRange
    first_uncleanable_offset: int
    clean_bytes: int
    cleanable_bytes: int
    max_compaction_delay_ms: int
    earliest_dirty_timestamp: int
    min_cleanable_ratio: float
    now_ms: int

    @property
    def first_dirty_offset(self) -> int:
        return self.offsets.first_dirty_offset

    @property
    def total_bytes(self) -> int:
        return self.clean_bytes + self.cleanable_bytes

    @property
    def cleanable_ratio(self) -> float:
        """cleanable / total bytes; 0.0 for an empty log (Kafka: NaN, which is never chosen)."""
        total = self.total_bytes
        return self.cleanable_bytes / total if total else 0.0

    @property
    def needs_compaction_now(self) -> bool:
        return self.max_compaction_delay_ms > 0

    @property
    def uncleanable_reason(self) -> str:
        """Why the cleanable range ends where it does, segment alignment included."""
        reason = self.offsets.uncleanable_reason
        if self.first_uncleanable_offset < self.offsets.first_uncleanable_offset:
            reason += (f" (inside segment {self.first_uncleanable_offset}: a segment is cleaned only as a "
                       f"whole, once the bound passes its end)")
        return reason

    @property
    def is_candidate(self) -> bool:
        """Kafka's filter: non-empty, and overdue with cleanable bytes or a ratio strictly above
        ``min.cleanable.dirty.ratio``."""
        if self.total_bytes <= 0:
            return False
        return (self.needs_compaction_now and self.cleanable_bytes > 0) or self.cleanable_ratio > self.min_cleanable_ratio


@dataclass(frozen=True, slots=True)
class QuarantineRecord:
    """A partition the cleaner set aside after a failure (Kafka's "uncleanable partition"), as the
    cleaner manager records it: the error text, the phase that failed (``stats``, ``cleaning`` or
    ``retention``), when it first and last failed, how many attempts failed in a row, and when it
    is retried."""

    topic_partition: TopicPartition
    log_dir: str
    error: str
    phase: str
    since_ms: int
    last_failure_ms: int
    attempts: int
    retry_at_ms: int

    def to_json(self) -> dict[str, Any]:
        return {"topic": self.topic_partition.topic, "partition": self.topic_partition.partition,
                "log_dir": self.log_dir, "error": self.error, "phase": self.phase, "since_ms": self.since_ms,
                "last_failure_ms": self.last_failure_ms, "attempts": self.attempts, "retry_at_ms": self.retry_at_ms}


# --- a consistent view of one log -------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class _View:
    """The offsets and the segment list of a log, read once (no lock: see the module docstring)."""

    log_start_offset: int
    log_end_offset: int
    high_watermark: int
    last_stable_offset: int
    segments: tuple[LogSegment, ...]
    bases: tuple[int, ...]

    @classmethod
    def of(cls, log: Log) -> _View:
        start, hw, lso = log.log_start_offset, log.high_watermark, log.last_stable_offset
        segments = tuple(log.segments)
        end = log.log_end_offset
        return cls(start, end, hw, lso, segments, tuple(s.base_offset for s in segments))

    @property
    def active(self) -> LogSegment | None:
        return self.segments[-1] if self.segments else None

    def between(self, from_offset: int, to_offset: int) -> Sequence[LogSegment]:
        """Kafka's ``logSegments(from, to)``: from the segment holding ``from_offset`` (or the first
        one) up to, excluding, the first with base >= ``to_offset``; empty when from >= to."""
        if from_offset >= to_offset:
            return ()
        start = max(bisect.bisect_right(self.bases, from_offset) - 1, 0)
        stop = bisect.bisect_left(self.bases, to_offset)
        return self.segments[start:stop]

    def non_active_from(self, from_offset: int) -> Sequence[LogSegment]:
        """Kafka's ``nonActiveLogSegmentsFrom``: segments holding offsets >= ``from_offset``, the
        active one excluded."""
        active = self.active
        if active is None or from_offset > active.base_offset:
            return ()
        return self.between(from_offset, active.base_offset)


# --- the cleanable range (§3.7.3 steps 1-2) ---------------------------------------------------------

def is_compacted(log: Log) -> bool:
    """``compact`` is in the log's ``cleanup.policy`` (``compact`` or ``compact,delete``)."""
    return log.config.compact


def cleanable_offsets(log: Log, checkpoint: int | None, now: int) -> CleanableRange:
    """Kafka's ``cleanableOffsets``: the first dirty offset (``checkpoint`` reset to the log start
    when missing, below the log start or past the log end) and the first uncleanable offset at
    ``now``, never below the first dirty one. Reads the largest timestamp of dirty non-active
    segments only when ``min.compaction.lag.ms`` > 0, and only up to the first young one."""
    return _cleanable(_View.of(log), log, checkpoint, now)


def _cleanable(view: _View, log: Log, checkpoint: int | None, now: int) -> CleanableRange:
    first_dirty, reset = _first_dirty(view, checkpoint)
    bound, offset, reason, eligible = _first_bound(view, log, first_dirty, now)
    return CleanableRange(first_dirty, max(offset, first_dirty), reason, reset, bound, eligible)


def _first_dirty(view: _View, checkpoint: int | None) -> tuple[int, bool]:
    start = view.log_start_offset
    if checkpoint is None:
        return start, False
    if checkpoint < start or checkpoint > view.log_end_offset:
        return start, True
    return checkpoint, False


def _first_bound(view: _View, log: Log, first_dirty: int, now: int) -> tuple[str, int, str, int | None]:
    """(bound, offset, reason, eligible_at) of the smallest bound. Ties go to the active segment,
    then the compaction lag, then the last stable offset: the most lasting explanation."""
    active = view.active
    if active is None:
        return NO_SEGMENT, view.log_start_offset, "the log has no segment", None
    bounds = [(ACTIVE_SEGMENT, active.base_offset, f"active segment {active.base_offset} (not rolled yet)", None)]
    lag = max(log.config.min_compaction_lag_ms, 0)
    if lag > 0:
        young = _first_young_segment(view, first_dirty, now, lag)
        if young is not None:
            largest = young.largest_timestamp
            bounds.append((MIN_COMPACTION_LAG, young.base_offset,
                           f"min.compaction.lag.ms={lag}: segment {young.base_offset} has records from "
                           f"{format_time(largest)} (eligible at {format_time(largest + lag)})", largest + lag))
    bounds.append(_stable_bound(view))
    return min(bounds, key=lambda b: b[1])  # min keeps the first of equals: the order above


def _first_young_segment(view: _View, first_dirty: int, now: int, lag: int) -> LogSegment | None:
    for segment in view.non_active_from(first_dirty):
        if segment.largest_timestamp > now - lag:
            return segment
    return None


def _stable_bound(view: _View) -> tuple[str, int, str, int | None]:
    lso, hw = view.last_stable_offset, view.high_watermark
    if lso < hw:
        return LAST_STABLE_OFFSET, lso, f"last stable offset {lso} (open transaction)", None
    return HIGH_WATERMARK, hw, f"high watermark {hw}", None


# --- the stats (§3.7.3 steps 3-4) ------------------------------------------------------------------

def log_to_clean(tp: TopicPartition, log: Log, checkpoint: int | None, now: int, *,
                 remote_spans: Sequence[tuple[int, int, int]] = ()) -> LogToClean:
    """The cleaning stats of ``log`` at ``now`` with the cleaner ``checkpoint`` (None: no entry).
    Reads segment metadata only: sizes, and the timestamps of dirty non-active segments.
    ``remote_spans``: a tiered log's segments held only remotely, as (start, end inclusive,
    bytes); each counts as clean below the first dirty offset, else as cleanable."""
    view = _View.of(log)
    cleanable = _cleanable(view, log, checkpoint, now)
    aligned, cleanable_bytes = _cleanable_bytes(view, cleanable)
    clean_bytes = sum(s.size for s in view.between(-1, cleanable.first_dirty_offset))
    remote_clean = sum(size for _, end, size in remote_spans if end < cleanable.first_dirty_offset)
    clean_bytes += remote_clean
    cleanable_bytes += sum(size for _, _, size in remote_spans) - remote_clean
    earliest = _earliest_dirty_timestamp(view, cleanable.first_dirty_offset)
    return LogToClean(
        topic_partition=tp, log=log, offsets=cleanable, first_uncleanable_offset=aligned,
        clean_bytes=clean_bytes, cleanable_bytes=cleanable_bytes,
        max_compaction_delay_ms=_compaction_delay(log, earliest, now), earliest_dirty_timestamp=earliest,
        min_cleanable_ratio=log.config.min_cleanable_dirty_ratio, now_ms=now,
    )


def _cleanable_bytes(view: _View, cleanable: CleanableRange) -> tuple[int, int]:
    """Kafka's ``calculateCleanableBytes``: (segment-aligned first uncleanable offset, bytes of the
    segments from the one holding the first dirty offset up to it)."""
    holding = view.non_active_from(cleanable.first_uncleanable_offset)
    first_uncleanable = holding[0] if holding else view.active
    aligned = first_uncleanable.base_offset if first_uncleanable is not None else cleanable.first_uncleanable_offset
    segments = view.between(min(cleanable.first_dirty_offset, aligned), aligned)
    return aligned, sum(s.size for s in segments)


def _earliest_dirty_timestamp(view: _View, first_dirty: int) -> int:
    """The smallest positive first-batch timestamp of the dirty non-active segments, or LONG_MAX."""
    stamps = [s.first_batch_timestamp() for s in view.non_active_from(first_dirty)]
    return min((t for t in stamps if t > 0), default=LONG_MAX)


def _compaction_delay(log: Log, earliest: int, now: int) -> int:
    """Kafka's ``maxCompactionDelay``: how far past ``max.compaction.lag.ms`` the oldest dirty
    record is (0 when it is not)."""
    clean_until = now - max(log.config.max_compaction_lag_ms, 0)
    return clean_until - earliest if earliest < clean_until else 0


def max_compaction_delay(log: Log, first_dirty_offset: int, now: int) -> int:
    """Kafka's ``maxCompactionDelay`` for a log and a first dirty offset."""
    return _compaction_delay(log, _earliest_dirty_timestamp(_View.of(log), first_dirty_offset), now)


def choose_filthiest(candidates: Iterable[LogToClean]) -> LogToClean | None:
    """The candidate (:attr:`LogToClean.is_candidate`) with the highest dirty ratio; on a tie the
    first one given; None when no log qualifies."""
    return max((c for c in candidates if c.is_candidate), key=lambda c: c.cleanable_ratio, default=None)


# --- when a log becomes eligible --------------------------------------------------------------------

def eligible_at(tp: TopicPartition, log: Log, checkpoint: int | None, now: int, *, max_steps: int = 64) -> int | None:
    """The first time >= ``now`` at which the log, with its current records, is a cleaning
    candidate: ``now`` if it is one already; else the first moment a time bound moves far enough
    (a segment outgrows ``min.compaction.lag.ms``, the oldest dirty record becomes overdue by
    ``max.compaction.lag.ms``); None when only new data (a roll, more dirty bytes, a higher high
    watermark) can make it one. Replays :func:`log_to_clean` at up to ``max_steps`` future times."""
    at = now
    for _ in range(max_steps):
        stats = log_to_clean(tp, log, checkpoint, at)
        if stats.is_candidate:
            return at
        later = _next_change(stats, at)
        if later is None:
            return None
        at = later
    return None


def _next_change(stats: LogToClean, at: int) -> int | None:
    times = []
    if stats.offsets.bound == MIN_COMPACTION_LAG and stats.offsets.bound_eligible_at is not None:
        times.append(stats.offsets.bound_eligible_at)
    if stats.earliest_dirty_timestamp < LONG_MAX:
        due = stats.earliest_dirty_timestamp + max(stats.log.config.max_compaction_lag_ms, 0) + 1
        if due <= LONG_MAX:
            times.append(due)
    later = [t for t in times if t > at]
    return min(later) if later else None


# --- the reason code ------------------------------------------------------------------------------

def cleaning_reason(stats: LogToClean | None, *, compacted: bool, state: str | None = None,
                    quarantine: QuarantineRecord | None = None, now: int = 0) -> str:
    """The one code (of :data:`CLEANING_REASONS`) saying why the cleaner cleans a partition at its
    next pass, or the main reason it does not: what keeps the cleaner off it whatever its bytes
    first (not compacted, its state, a waiting quarantine), then its stats (None: not computable).
    ``tidelog explain`` and the cleaner's selection pass (the metrics) both call it. Pure, no lock."""
    if not compacted:
        return NOT_COMPACTED
    if state is not None:
        return next((code for prefix, code in _STATE_CODES if state.startswith(prefix)), PAUSED)
    if quarantine is not None and now < quarantine.retry_at_ms:
        return QUARANTINED
    if stats is None:
        return STATS_FAILED
    if stats.total_bytes <= 0 and stats.log.size == 0:  # (remote-only segments count in total_bytes)
        return EMPTY
    if stats.is_candidate:
        return CLEANABLE
    if stats.cleanable_bytes <= 0:
        if stats.offsets.bound == MIN_COMPACTION_LAG:
            return MIN_COMPACTION_LAG_REASON
        if stats.offsets.bound == LAST_STABLE_OFFSET:
            return OPEN_TRANSACTION
        return NOTHING_DIRTY
    return BELOW_MIN_CLEANABLE_RATIO


_STATE_CODES = (("in progress", IN_PROGRESS), ("aborted", ABORTED_CLEAN), ("paused", PAUSED))


# --- explanation (tidelog explain) ------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class CleaningExplanation:
    """Why the cleaner cleans a partition now, or why not and when it will (``tidelog explain``).

    Offsets and bytes are :func:`log_to_clean`'s at ``now_ms``; ``state`` is the cleaner state
    (None: idle), ``quarantine`` the failure record if the partition is set aside,
    ``last_clean_ms`` when a clean of it last finished in this process (None: not since start).
    ``cleanable_now``: the cleaner would consider it at its next pass; ``eligible_at_ms``: when
    it will (``now_ms`` if now; None if only new data or an operator can make it so).
    ``reasons``: human lines, most important first; ``reason``: the code of the main one
    (:func:`cleaning_reason`), the label of the ``tidelog_log_cleaner_reason`` metric."""

    topic_partition: TopicPartition
    now_ms: int
    compacted: bool
    cleanup_policy: tuple[str, ...]
    checkpoint: int | None
    checkpoint_reset: bool
    log_start_offset: int
    log_end_offset: int
    first_dirty_offset: int
    first_uncleanable_offset: int
    uncleanable_bound: str
    uncleanable_reason: str
    clean_bytes: int
    dirty_bytes: int
    dirty_ratio: float
    min_cleanable_ratio: float
    max_compaction_delay_ms: int
    state: str | None
    quarantine: QuarantineRecord | None
    last_clean_ms: int | None
    cleanable_now: bool
    eligible_at_ms: int | None
    reasons: tuple[str, ...]
    reason: str = CLEANABLE

    @property
    def total_bytes(self) -> int:
        return self.clean_bytes + self.dirty_bytes

    @property
    def headline(self) -> str:
        """One line: cleanable now and why, or the main reason it is not and when it will be."""
        if self.cleanable_now:
            return f"cleanable now: {self.reasons[0]}" if self.reasons else "cleanable now"
        line = f"not cleanable now: {self.reasons[0]}" if self.reasons else "not cleanable now"
        if self.eligible_at_ms is not None:
            line += f"; eligible at {format_time(self.eligible_at_ms)}"
        return line

    @property
    def last_error(self) -> str | None:
        return self.quarantine.error if self.quarantine is not None else None

    def summary(self) -> list[str]:
        """A human rendering: a headline, the range, then the reasons."""
        head = "cleanable now" if self.cleanable_now else "not cleanable now"
        if not self.cleanable_now and self.eligible_at_ms is not None:
            head += f"; eligible at {format_time(self.eligible_at_ms)} (in {format_duration(self.eligible_at_ms - self.now_ms)})"
        source = "cleaner checkpoint" if self.checkpoint is not None and not self.checkpoint_reset else "log start offset"
        lines = [
            f"{self.topic_partition}: {head}",
            f"  first dirty offset {self.first_dirty_offset} ({source}); dirty {format_bytes(self.dirty_bytes)} "
            f"of {format_bytes(self.total_bytes)} (ratio {self.dirty_ratio:.3f}, min.cleanable.dirty.ratio "
            f"{self.min_cleanable_ratio:g})",
            f"  first uncleanable offset {self.first_uncleanable_offset}: {self.uncleanable_reason}",
            f"  state: {self.state or 'idle'}; last clean: "
            f"{format_time(self.last_clean_ms) if self.last_clean_ms is not None else 'not since start-up'}",
        ]
        if self.last_error is not None:
            lines.append(f"  last error: {self.last_error}")
        return lines + [f"  {reason}" for reason in self.reasons]

    def to_json(self) -> dict[str, Any]:
        """Plain types only (``--json`` output)."""
        return {
            "topic": self.topic_partition.topic, "partition": self.topic_partition.partition, "now_ms": self.now_ms,
            "compacted": self.compacted, "cleanup_policy": list(self.cleanup_policy), "checkpoint": self.checkpoint,
            "checkpoint_reset": self.checkpoint_reset, "log_start_offset": self.log_start_offset,
            "log_end_offset": self.log_end_offset, "first_dirty_offset": self.first_dirty_offset,
            "first_uncleanable_offset": self.first_uncleanable_offset, "uncleanable_bound": self.uncleanable_bound,
            "uncleanable_reason": self.uncleanable_reason, "clean_bytes": self.clean_bytes,
            "dirty_bytes": self.dirty_bytes, "total_bytes": self.total_bytes, "dirty_ratio": self.dirty_ratio,
            "min_cleanable_ratio": self.min_cleanable_ratio, "max_compaction_delay_ms": self.max_compaction_delay_ms,
            "state": self.state, "quarantine": self.quarantine.to_json() if self.quarantine is not None else None,
            "last_error": self.last_error, "last_clean_ms": self.last_clean_ms, "cleanable_now": self.cleanable_now,
            "eligible_at_ms": self.eligible_at_ms, "reason": self.reason, "reasons": list(self.reasons),
        }


def explain_log(tp: TopicPartition, log: Log, checkpoint: int | None, now: int, *, state: str | None = None,
                quarantine: QuarantineRecord | None = None, last_clean_ms: int | None = None,
                remote_spans: Sequence[tuple[int, int, int]] = ()) -> CleaningExplanation:
    """The explanation of one partition at ``now``; ``state``, ``quarantine`` and ``last_clean_ms``
    come from the cleaner manager (:meth:`.manager.CleanerManager.explain`), ``remote_spans`` as
    for :func:`log_to_clean`."""
    stats = log_to_clean(tp, log, checkpoint, now, remote_spans=remote_spans)
    compacted = is_compacted(log)
    notes, blocked = _blockers(compacted, state, quarantine, now)
    by_records = eligible_at(tp, log, checkpoint, now) if compacted and state is None else None
    when = by_records
    if quarantine is not None and when is not None:
        when = max(when, quarantine.retry_at_ms)
    cleanable = not blocked and stats.is_candidate
    reasons = tuple(notes) + tuple(_stats_reasons(stats, log, by_records))
    return CleaningExplanation(
        topic_partition=tp, now_ms=now, compacted=compacted, cleanup_policy=tuple(sorted(log.config.cleanup_policy)),
        checkpoint=checkpoint, checkpoint_reset=stats.offsets.checkpoint_reset, log_start_offset=log.log_start_offset,
        log_end_offset=log.log_end_offset, first_dirty_offset=stats.first_dirty_offset,
        first_uncleanable_offset=stats.first_uncleanable_offset, uncleanable_bound=stats.offsets.bound,
        uncleanable_reason=stats.uncleanable_reason, clean_bytes=stats.clean_bytes, dirty_bytes=stats.cleanable_bytes,
        dirty_ratio=stats.cleanable_ratio, min_cleanable_ratio=stats.min_cleanable_ratio,
        max_compaction_delay_ms=stats.max_compaction_delay_ms, state=state, quarantine=quarantine,
        last_clean_ms=last_clean_ms, cleanable_now=cleanable, eligible_at_ms=now if cleanable else when, reasons=reasons,
        reason=cleaning_reason(stats, compacted=compacted, state=state, quarantine=quarantine, now=now),
    )


def failed_explanation(tp: TopicPartition, log: Log, checkpoint: int | None, now: int, error: str, *,
                       state: str | None = None, quarantine: QuarantineRecord | None = None,
                       last_clean_ms: int | None = None) -> CleaningExplanation:
    """The explanation of a partition whose stats cannot be computed (``error``): its offsets,
    zero bytes, not cleanable, and the error as the first reason."""
    notes, _ = _blockers(is_compacted(log), state, quarantine, now)
    start = log.log_start_offset
    return CleaningExplanation(
        topic_partition=tp, now_ms=now, compacted=is_compacted(log), cleanup_policy=tuple(sorted(log.config.cleanup_policy)),
        checkpoint=checkpoint, checkpoint_reset=False, log_start_offset=start, log_end_offset=log.log_end_offset,
        first_dirty_offset=start if checkpoint is None else checkpoint, first_uncleanable_offset=start,
        uncleanable_bound=NO_SEGMENT, uncleanable_reason="unknown: the cleaning stats cannot be computed",
        clean_bytes=0, dirty_bytes=0, dirty_ratio=0.0, min_cleanable_ratio=log.config.min_cleanable_dirty_ratio,
        max_compaction_delay_ms=0, state=state, quarantine=quarantine, last_clean_ms=last_clean_ms,
        cleanable_now=False, eligible_at_ms=None, reasons=(f"cannot compute the cleaning stats: {error}", *notes),
        reason=cleaning_reason(None, compacted=is_compacted(log), state=state, quarantine=quarantine, now=now),
    )


def _blockers(compacted: bool, state: str | None, quarantine: QuarantineRecord | None,
              now: int) -> tuple[list[str], bool]:
    """Lines about what keeps the cleaner off the partition whatever its dirty ratio, and whether
    anything does now (a quarantine whose retry is due does not)."""
    out = []
    if not compacted:
        out.append("not compacted: cleanup.policy has no 'compact' (retention alone applies)")
    if state is not None:
        note = next((text for prefix, text in _STATE_NOTES if state.startswith(prefix)), "")
        out.append(f"cleaner state: {state}{note}")
    waiting = quarantine is not None and now < quarantine.retry_at_ms
    if quarantine is not None:
        plural = "" if quarantine.attempts == 1 else "s"
        retry = f"retried at {format_time(quarantine.retry_at_ms)}" if waiting else "retry due at the next cleaner pass"
        out.append(f"quarantined since {format_time(quarantine.since_ms)} after {quarantine.attempts} failed "
                   f"attempt{plural} ({quarantine.phase}); {retry}")
    return out, not compacted or state is not None or waiting


_STATE_NOTES = (
    ("in progress", " (being cleaned, or its retention pass is running)"),
    ("aborted", " (a truncation or deletion is stopping the running clean)"),
    ("paused", " (a truncation, deletion or retention run holds it)"),
)


def _stats_reasons(stats: LogToClean, log: Log, when: int | None) -> list[str]:
    """The ratio verdict first, then the time bounds, then notes."""
    empty = log.size == 0
    if empty:
        out = ["the log is empty"]
    elif stats.cleanable_bytes == 0:
        out = [f"nothing dirty below the first uncleanable offset {stats.first_uncleanable_offset}"]
    elif stats.cleanable_ratio > stats.min_cleanable_ratio:
        out = [f"dirty ratio {stats.cleanable_ratio:.3f} above min.cleanable.dirty.ratio {stats.min_cleanable_ratio:g}"]
    else:
        out = [f"dirty ratio {stats.cleanable_ratio:.3f} is not above min.cleanable.dirty.ratio "
               f"{stats.min_cleanable_ratio:g} ({format_bytes(stats.cleanable_bytes)} dirty of "
               f"{format_bytes(stats.total_bytes)})"]
    if not empty:
        lag = _lag_reasons(stats, log, when)
        overdue = stats.needs_compaction_now and stats.cleanable_bytes > 0
        out = lag + out if overdue else out + lag
    if stats.offsets.checkpoint_reset:
        out.append(f"cleaner checkpoint outside [{log.log_start_offset}, {log.log_end_offset}]: reset to the log "
                   f"start offset {stats.first_dirty_offset}")
    return out


def _lag_reasons(stats: LogToClean, log: Log, when: int | None) -> list[str]:
    max_lag = log.config.max_compaction_lag_ms
    if stats.needs_compaction_now:
        return [f"overdue by max.compaction.lag.ms={max_lag}: oldest dirty record from "
                f"{format_time(stats.earliest_dirty_timestamp)}, {format_duration(stats.max_compaction_delay_ms)} late"]
    if when is not None and when > stats.now_ms:
        return [f"time-bound: becomes a candidate at {format_time(when)} as its records age"]
    return []


def format_time(ms: int) -> str:
    """``2023-11-14T22:13:20.000Z`` (UTC); out-of-range values as ``<ms> ms``."""
    try:
        return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    except (OverflowError, OSError, ValueError):
        return f"{ms} ms"
