"""CleanerManager: the cleaner's per-partition states, checkpoints and quarantine.

Kafka's ``LogCleanerManager`` (kafka-storage.md §3.7.2, §3.7.3, §3.7.8). The cleaner threads ask
it which log to clean (:meth:`CleanerManager.grab_filthiest_compacted_log`) and which compacted
logs get a retention pass (:meth:`CleanerManager.deletable_logs`); truncation, partition deletion
and the retention task use it to keep the cleaner off a partition while they change it.

**States.** A partition with no state is idle. ::

    idle --grab / deletable_logs--> IN_PROGRESS --done_cleaning / done_deleting--> idle
    idle --abort_and_pause--> PAUSED(1);  PAUSED(n) --abort_and_pause--> PAUSED(n+1)
    IN_PROGRESS --abort_and_pause--> ABORTED --done_*--> PAUSED(1)   (abort_and_pause waits for it)
    IN_PROGRESS --pause--> ABORTED (no wait);  ABORTED --pause--> ABORTED, done_* → PAUSED(1 + such pauses)
    PAUSED(1) --resume--> idle;  PAUSED(n) --resume--> PAUSED(n-1)

Any other change raises :class:`CleanerStateError`. ``abort_and_pause_cleaning`` of a partition
being cleaned blocks until the cleaner thread notices (it calls :meth:`check_cleaning_aborted`
before every chunk and then ``done_cleaning``), so that when it returns nothing touches the log.

**Checkpoints** are :class:`~.cleaner_checkpoints.CleanerCheckpoints`' (one
``cleaner-offset-checkpoint`` per log dir), **quarantine** (uncleanable partitions, retried with a
backoff, and what ends a quarantine) :class:`~.quarantine.Quarantine`'s; both are held under the
manager lock. A log whose stats fail during a grab is quarantined and the choice goes on with the
others: one bad partition never stops the cleaner.

**Locks.** One re-entrant lock and a Condition on it guard everything here. ``logs`` is always
called *without* that lock, so it may take the log manager's lock, and the log manager may call
in here while holding its own. Stats read segment metadata under the manager lock but never take
a log's lock. Never call :meth:`abort_and_pause_cleaning` (or anything that aborts) from a
cleaner thread, or while holding a log's lock the cleaner thread may need: it waits for that
thread.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from tidelog.cleaner.plan import (
    CleaningExplanation,
    LogToClean,
    QuarantineRecord,
    choose_filthiest,
    cleaning_reason,
    explain_log,
    failed_explanation,
    is_compacted,
    log_to_clean,
)
from tidelog.cleaner.cleaner_checkpoints import CleanerCheckpoints, dir_key
from tidelog.cleaner.cleaning_state import ABORTED, CleaningState, CleaningStates
from tidelog.cleaner.quarantine import (
    DEFAULT_QUARANTINE_INITIAL_BACKOFF_MS,
    DEFAULT_QUARANTINE_MAX_BACKOFF_MS,
    PHASE_CLEANING,
    PHASE_STATS,
    Quarantine,
    describe_error,
)
from tidelog.clock import SYSTEM_CLOCK, Clock
from tidelog.errors import CleanerStateError, LogCleaningAbortedError, LogCleaningError, UnknownTopicOrPartitionError
from tidelog.storage.log import Log
from tidelog.topic_partition import TopicPartition

log = logging.getLogger(__name__)

LogsSource = Callable[[], Iterable[tuple[TopicPartition, Log]]]
RemoteSpans = Callable[[TopicPartition, Log], Sequence[tuple[int, int, int]]]
"""A tiered log's remote-only segments as (start, end, bytes), from cached metadata (no I/O)."""

@dataclass(frozen=True, slots=True)
class SelectionStats:
    """What the last :meth:`CleanerManager.grab_filthiest_compacted_log` saw: when it ran, the
    non-empty compacted logs it weighed, how many were candidates, the highest dirty ratio among
    them (``max-dirty-percent``) and the largest ``max.compaction.lag.ms`` delay
    (``max-compaction-delay-secs``)."""

    at_ms: int
    logs: int = 0
    cleanable_partitions: int = 0
    max_dirty_ratio: float = 0.0
    max_compaction_delay_ms: int = 0


@dataclass(frozen=True, slots=True)
class PartitionSelection:
    """One compacted partition as the last selection pass saw it: its dirty ratio (None when the
    pass computed no stats for it: busy, quarantined) and the reason code
    (:func:`~.plan.cleaning_reason`) it is cleaned or not."""

    dirty_ratio: float | None
    reason: str


class CleanerManager:
    """Kafka's LogCleanerManager plus quarantine with retries. Thread-safe (see the module docstring).

    ``log_dirs``: the log dirs whose ``cleaner-offset-checkpoint`` this manager owns (created
    empty if missing). ``logs``: returns the current (partition, log) pairs; a log's log dir is
    its partition dir's parent. ``quarantine_initial_backoff_ms`` doubles after each failed retry
    up to ``quarantine_max_backoff_ms``. ``remote_spans``: a tiered log's remote-only segments,
    counted in its dirty ratio, as ``remote_load`` (called without the lock, before an
    explanation) last noted them.
    """

    def __init__(self, log_dirs: Iterable[Path | str], logs: LogsSource, clock: Clock = SYSTEM_CLOCK, *,
                 quarantine_initial_backoff_ms: int = DEFAULT_QUARANTINE_INITIAL_BACKOFF_MS,
                 quarantine_max_backoff_ms: int = DEFAULT_QUARANTINE_MAX_BACKOFF_MS,
                 remote_spans: RemoteSpans | None = None,
                 remote_load: Callable[[Iterable[tuple[TopicPartition, Log]]], None] | None = None) -> None:
        self._remote_spans = remote_spans
        self._remote_load = remote_load
        self._quarantine = Quarantine(quarantine_initial_backoff_ms, quarantine_max_backoff_ms)
        self._logs = logs
        self._clock = clock
        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)
        self._cleaning = CleaningStates(self._cond)
        self._round_start: dict[TopicPartition, int] = {}
        self._round_failed: set[TopicPartition] = set()
        self._last_clean: dict[TopicPartition, int] = {}
        self._time_of_last_run = clock.milliseconds()
        self._selection = SelectionStats(self._time_of_last_run)
        self._selected: Mapping[TopicPartition, PartitionSelection] = MappingProxyType({})
        self._checkpoints = CleanerCheckpoints(log_dirs)

    # --- what exists ---------------------------------------------------------------------------

    def _snapshot_logs(self) -> list[tuple[TopicPartition, Log]]:
        """The current logs; called without the lock (``logs`` may take the log manager's)."""
        pairs = list(self._logs())
        with self._lock:
            self._checkpoints.live = frozenset(tp for tp, _ in pairs)
        return pairs

    def _selectable(self, tp: TopicPartition, lg: Log, now: int) -> bool:
        return is_compacted(lg) and tp not in self._cleaning and not self._quarantine.waiting(tp, now)

    # --- choosing ------------------------------------------------------------------------------

    def grab_filthiest_compacted_log(self) -> LogToClean | None:
        """Kafka's ``grabFilthiestCompactedLog``: over compacted logs with no state and not waiting
        in quarantine, compute the stats, rewrite stale checkpoints (of every log, chosen or not),
        record the selection's metrics and return the filthiest candidate, now IN_PROGRESS (None
        when no log qualifies). A log whose stats fail is quarantined and skipped. Expensive:
        reads segment metadata of every compacted log, under the manager lock."""
        pairs = self._snapshot_logs()
        with self._lock:
            now = self._clock.milliseconds()
            self._time_of_last_run = now
            weighed = [s for s in (self._stats(tp, lg, now) for tp, lg in pairs if self._selectable(tp, lg, now))
                       if s is not None]
            nonempty = [s for s in weighed if s.total_bytes > 0]
            chosen = choose_filthiest(nonempty)
            self._selection = SelectionStats(
                now, len(nonempty), sum(1 for s in nonempty if s.is_candidate),
                max((s.cleanable_ratio for s in nonempty), default=0.0),
                max((s.max_compaction_delay_ms for s in weighed), default=0),
            )
            self._selected = self._partition_selection(pairs, {s.topic_partition: s for s in weighed}, now)
            if chosen is not None:
                self._begin(chosen)
            return chosen

    def _partition_selection(self, pairs: Sequence[tuple[TopicPartition, Log]],
                             weighed: Mapping[TopicPartition, LogToClean], now: int) -> Mapping[TopicPartition, PartitionSelection]:
        """Each compacted log's dirty ratio and reason code at this selection (under the lock)."""
        out = {}
        for tp, lg in pairs:
            if not is_compacted(lg):
                continue
            stats = weighed.get(tp)
            state = self._cleaning.get(tp)
            reason = cleaning_reason(stats, compacted=True, state=None if state is None else str(state),
                                     quarantine=self._quarantine.get(tp), now=now)
            out[tp] = PartitionSelection(None if stats is None else stats.cleanable_ratio, reason)
        return MappingProxyType(out)

    def grab_for_cleaning(self, tp: TopicPartition, *, force: bool = False) -> LogToClean | None:
        """One partition for an on-demand clean (``tidelog clean run``): its stats, now IN_PROGRESS,
        if it is compacted, idle, has cleanable bytes, and is a candidate (``force``: whatever its
        ratio, and even in quarantine). None otherwise (:meth:`explain` says why). Raises
        :class:`UnknownTopicOrPartitionError`, or :class:`LogCleaningError` (and quarantines the
        partition) when its stats fail. Thread-safe (manager lock, taken after ``logs`` has run)."""
        lg = self._find(tp)
        with self._lock:
            now = self._clock.milliseconds()
            if not is_compacted(lg) or tp in self._cleaning or (not force and self._quarantine.waiting(tp, now)):
                return None
            stats = self._stats(tp, lg, now)
            if stats is None:
                raise self._quarantine.error(tp)
            if stats.cleanable_bytes <= 0 or not (force or stats.is_candidate):
                return None
            self._begin(stats)
            return stats

    def _stats(self, tp: TopicPartition, lg: Log, now: int) -> LogToClean | None:
        """The log's stats (a stale checkpoint rewritten), or None after quarantining it."""
        try:
            spans = self._remote_spans(tp, lg) if self._remote_spans is not None else ()
            stats = log_to_clean(tp, lg, self._checkpoint_for(tp, lg), now, remote_spans=spans)
        except Exception as e:  # one bad partition never stops the cleaner
            error = LogCleaningError("failed to calculate log cleaning stats", topic_partition=str(tp))
            error.__cause__ = e
            self._mark(tp, dir_key(lg.dir.parent), error, PHASE_STATS, now)
            return None
        if stats.offsets.checkpoint_reset:
            log.warning("%s: cleaner checkpoint outside [%d, %d], reset to the log start offset",
                        tp, lg.log_start_offset, lg.log_end_offset)
            self._checkpoints.write(dir_key(lg.dir.parent), tp, stats.first_dirty_offset)
        self._quarantine.clear(tp, (PHASE_STATS,))
        return stats

    def _begin(self, stats: LogToClean) -> None:
        tp = stats.topic_partition
        self._cleaning.start(tp)
        self._round_start[tp] = stats.first_dirty_offset
        self._round_failed.discard(tp)

    def _end_round(self, tp: TopicPartition) -> None:
        self._round_start.pop(tp, None)
        self._round_failed.discard(tp)

    def _checkpoint_for(self, tp: TopicPartition, lg: Log) -> int | None:
        return self._checkpoints.offset_for(tp, dir_key(lg.dir.parent))

    def _find(self, tp: TopicPartition) -> Log:
        for found, lg in self._snapshot_logs():
            if found == tp:
                return lg
        raise UnknownTopicOrPartitionError("no such partition", topic_partition=str(tp))

    def deletable_logs(self) -> list[tuple[TopicPartition, Log]]:
        """Kafka's ``deletableLogs``: the compacted logs for the cleaner's retention pass (no state,
        not waiting in quarantine), each now IN_PROGRESS; give them back with :meth:`done_deleting`.
        Thread-safe (manager lock)."""
        pairs = self._snapshot_logs()
        with self._lock:
            now = self._clock.milliseconds()
            chosen = [(tp, lg) for tp, lg in pairs if self._selectable(tp, lg, now)]
            for tp, _ in chosen:
                self._cleaning.start(tp)
            return chosen

    # --- finishing -----------------------------------------------------------------------------

    def done_cleaning(self, tp: TopicPartition, log_dir: Path | str, end_offset: int | None) -> None:
        """Kafka's ``doneCleaning``: IN_PROGRESS → idle with the checkpoint set to ``end_offset``
        (the next first dirty offset; the old one after a failure; None: leave the checkpoint, as
        after a dry run), ABORTED → PAUSED(1) (waking :meth:`abort_and_pause_cleaning`); any
        other state raises :class:`CleanerStateError`.

        A round that moved the first dirty offset forward records its time; if no failure was
        marked for the partition during the round (call :meth:`mark_uncleanable` *before* this),
        it also ends a ``stats``/``cleaning`` quarantine. Thread-safe (manager lock; wakes its waiters)."""
        with self._lock:
            if self._cleaning.done(tp, "cleaning", "not being cleaned") and end_offset is not None:
                self._checkpoints.write(dir_key(log_dir), tp, end_offset)
                self._note_progress(tp, end_offset)
            self._end_round(tp)

    def _note_progress(self, tp: TopicPartition, end_offset: int) -> None:
        start = self._round_start.get(tp)
        if start is None or end_offset <= start:
            return
        self._last_clean[tp] = self._clock.milliseconds()
        if tp not in self._round_failed:
            self._quarantine.clear(tp, (PHASE_STATS, PHASE_CLEANING))

    def done_deleting(self, tps: Iterable[TopicPartition]) -> None:
        """Kafka's ``doneDeleting``: each partition IN_PROGRESS → idle, ABORTED → PAUSED(1); any
        other state raises :class:`CleanerStateError` (partitions before it are done).
        Thread-safe (manager lock; wakes its waiters)."""
        with self._lock:
            for tp in tps:
                self._cleaning.done(tp, "deleting", "not in progress")
                self._end_round(tp)

    # --- pausing and aborting ------------------------------------------------------------------

    def abort_and_pause_cleaning(self, tp: TopicPartition) -> None:
        """Kafka's ``abortAndPauseCleaning``: idle → PAUSED(1), PAUSED(n) → PAUSED(n+1), IN_PROGRESS →
        ABORTED and **wait** until the cleaner thread acknowledges (``done_cleaning`` or
        ``done_deleting``); ABORTED raises :class:`CleanerStateError`. Each call needs one
        :meth:`resume_cleaning`."""
        with self._cond:
            if self._cleaning.get(tp) == ABORTED:
                raise CleanerStateError(f"cannot abort and pause cleaning: it is {ABORTED}", topic_partition=str(tp))
            self._cleaning.pause(tp)
            self._cond.wait_for(lambda: self._cleaning.stopped(tp))

    def pause_cleaning(self, *tps: TopicPartition) -> None:
        """:meth:`abort_and_pause_cleaning` without the wait, for callers that may be a cleaner
        thread or hold a lock the cleaner thread needs (a log dir going offline): a clean in
        progress is aborted and stops at its next chunk; ABORTED takes the pause when its cleaner
        thread is done. Each partition needs one :meth:`resume_cleaning`; :meth:`await_stopped`
        waits for the aborted cleans."""
        with self._lock:
            for tp in tps:
                self._cleaning.pause(tp)

    def await_stopped(self, *tps: TopicPartition) -> None:
        """Wait until no clean of ``tps`` is running or aborting (never call it from a cleaner
        thread, nor holding a lock the cleaner thread needs)."""
        with self._cond:
            self._cond.wait_for(lambda: all(self._cleaning.stopped(tp) for tp in tps))

    def resume_cleaning(self, *tps: TopicPartition) -> None:
        """Kafka's ``resumeCleaning``: PAUSED(1) → idle, PAUSED(n) → PAUSED(n-1); any other state
        raises :class:`CleanerStateError` (partitions before it are resumed). Resuming a partition
        removed (:meth:`remove_partition`) since it was paused does nothing. Thread-safe (manager lock)."""
        with self._lock:
            for tp in tps:
                self._cleaning.resume(tp)

    def abort_cleaning(self, tp: TopicPartition) -> None:
        """Kafka's ``abortCleaning``: stop any running clean (waiting for it) and leave the state as
        it was before, minus that clean (idle, or the pauses others hold).
        Thread-safe (manager lock); waits like :meth:`abort_and_pause_cleaning`."""
        with self._lock:
            self.abort_and_pause_cleaning(tp)
            self.resume_cleaning(tp)

    def abort_all(self) -> list[TopicPartition]:
        """Shutdown: every IN_PROGRESS partition → ABORTED, without waiting (the cleaner threads
        stop at their next chunk and their ``done_*`` leaves them PAUSED(1)). Returns them."""
        with self._lock:
            return self._cleaning.abort_running()

    def is_cleaning_aborted(self, tp: TopicPartition) -> bool:
        """``tp``'s clean was aborted and its thread has not acknowledged yet. Thread-safe (manager lock)."""
        with self._lock:
            return self._cleaning.get(tp) == ABORTED

    def check_cleaning_aborted(self, tp: TopicPartition) -> None:
        """Raise :class:`LogCleaningAbortedError` if the clean of ``tp`` was aborted (the cleaner
        calls this before every chunk it reads). Thread-safe (manager lock)."""
        if self.is_cleaning_aborted(tp):
            raise LogCleaningAbortedError("cleaning aborted", topic_partition=str(tp))

    def pause_cleaning_for_non_compacted_partitions(self) -> list[tuple[TopicPartition, Log]]:
        """Kafka's ``pauseCleaningForNonCompactedPartitions`` (the retention task): pause every idle
        log without ``compact`` and return them; resume them with :meth:`resume_cleaning`.
        Thread-safe (manager lock); never waits."""
        pairs = self._snapshot_logs()
        with self._lock:
            chosen = [(tp, lg) for tp, lg in pairs if not is_compacted(lg) and tp not in self._cleaning]
            for tp, _ in chosen:
                self.abort_and_pause_cleaning(tp)  # idle → PAUSED(1): never waits
            return chosen

    @contextmanager
    def paused_non_compacted(self) -> Iterator[list[tuple[TopicPartition, Log]]]:
        """:meth:`pause_cleaning_for_non_compacted_partitions` for a ``with`` block, resumed on exit."""
        chosen = self.pause_cleaning_for_non_compacted_partitions()
        try:
            yield chosen
        finally:
            self.resume_cleaning(*(tp for tp, _ in chosen))

    def state_of(self, tp: TopicPartition) -> CleaningState | None:
        """The partition's state; None when idle. Thread-safe (manager lock)."""
        with self._lock:
            return self._cleaning.get(tp)

    # --- checkpoints ---------------------------------------------------------------------------

    @property
    def log_dirs(self) -> list[Path]:
        """The online log dirs (absolute) whose checkpoints this manager keeps. Thread-safe without
        the lock: one copy of a dict's keys, atomic under the GIL (a metrics scrape reads it while a
        selection pass holds the lock)."""
        return self._checkpoints.dirs

    def all_cleaner_checkpoints(self) -> dict[TopicPartition, int]:
        """Every dir's entries merged (a partition in two dirs: the later dir's value). Thread-safe
        (manager lock)."""
        with self._lock:
            return self._checkpoints.merged()

    def update_checkpoints(self, log_dir: Path | str, tp: TopicPartition, offset: int | None) -> None:
        """Set ``tp``'s first dirty offset in ``log_dir``'s checkpoint, or remove it (None); the
        file is rewritten (two fsyncs) without entries of partitions that no longer exist.
        Thread-safe (manager lock, held over the write)."""
        with self._lock:
            self._checkpoints.write(dir_key(log_dir), tp, offset)

    def maybe_truncate_checkpoint(self, log_dir: Path | str, tp: TopicPartition, offset: int) -> None:
        """After truncating ``tp`` to ``offset``: lower its checkpoint to ``offset`` if above it.
        Thread-safe (manager lock)."""
        key = dir_key(log_dir)
        with self._lock:
            if (self._checkpoints.get(key, tp) or 0) > offset:
                self._checkpoints.write(key, tp, offset)

    def alter_checkpoint_dir(self, tp: TopicPartition, source: Path | str, destination: Path | str) -> None:
        """Move ``tp``'s entry from ``source``'s checkpoint to ``destination``'s (a moved replica).
        Thread-safe (manager lock)."""
        with self._lock:
            offset = self._checkpoints.get(dir_key(source), tp)
            if offset is not None:
                self._checkpoints.write(dir_key(source), tp, None)
                self._checkpoints.write(dir_key(destination), tp, offset)

    def remove_partition(self, tp: TopicPartition) -> None:
        """A partition is deleted: stop any running clean of it (waiting for the cleaner thread),
        then forget everything about it: state (pauses included), checkpoint entries, quarantine
        and clean time. A later :meth:`resume_cleaning` of it by a pause holder does nothing.
        Thread-safe (manager lock); blocks while a clean of ``tp`` stops: never call it from a
        cleaner thread."""
        with self._cond:
            self._cleaning.abort_running((tp,))
            self._cond.wait_for(lambda: self._cleaning.stopped(tp))
            self._cleaning.remove(tp)
            self._checkpoints.remove(tp)
            self._quarantine.forget(tp)
            self._last_clean.pop(tp, None)
            self._end_round(tp)

    def handle_log_dir_failure(self, log_dir: Path | str) -> None:
        """Kafka's ``handleLogDirFailure``: forget the dir's checkpoint (never written again) and
        the quarantine records of its partitions. Thread-safe (manager lock)."""
        key = dir_key(log_dir)
        log.warning("%s: stopping cleaning of logs in this dir", key)
        with self._lock:
            self._checkpoints.close(key)
            for record in self._quarantine.records(str(key)):
                self._quarantine.forget(record.topic_partition)

    def handle_log_dir_online(self, log_dir: Path | str) -> None:
        """A log dir that failed is back: its checkpoint is read again and kept from now on
        (nothing was written to it while it was offline). Thread-safe (manager lock)."""
        key = dir_key(log_dir)
        with self._lock:
            if key not in self._checkpoints:
                self._checkpoints.open(key)

    # --- quarantine ----------------------------------------------------------------------------

    def mark_uncleanable(self, tp: TopicPartition, log_dir: Path | str, error: BaseException | str, *,
                         phase: str = PHASE_CLEANING) -> QuarantineRecord:
        """Quarantine ``tp`` after ``error`` in ``phase`` (Kafka's ``markPartitionUncleanable``):
        skipped until its retry time, ``quarantine_initial_backoff_ms`` after the first failure,
        doubling with each failure in a row up to ``quarantine_max_backoff_ms``. Thread-safe
        (manager lock)."""
        with self._lock:
            return self._mark(tp, dir_key(log_dir), error, phase, self._clock.milliseconds())

    def _mark(self, tp: TopicPartition, key: Path, error: BaseException | str, phase: str, now: int) -> QuarantineRecord:
        record = self._quarantine.mark(tp, key, error, phase, now)
        if tp in self._round_start:
            self._round_failed.add(tp)
        return record

    def clear_uncleanable(self, tp: TopicPartition, phase: str | None = None) -> bool:
        """End ``tp``'s quarantine (only if it was for ``phase``, when given); True if it was.
        Thread-safe (manager lock)."""
        with self._lock:
            return self._quarantine.clear(tp, None if phase is None else (phase,))

    def is_uncleanable(self, tp: TopicPartition) -> bool:
        """``tp`` is quarantined (waiting for its retry or due for it). Thread-safe (manager lock)."""
        with self._lock:
            return tp in self._quarantine

    def quarantined(self, log_dir: Path | str | None = None) -> list[QuarantineRecord]:
        """The quarantine records (of one log dir), by partition. Thread-safe without the lock: reads
        the quarantine's snapshot, replaced whole after each change (a metrics scrape must not wait
        for a selection pass, which holds the lock while it weighs every log)."""
        key = None if log_dir is None else str(dir_key(log_dir))
        return self._quarantine.records(key)

    def maintain_uncleanable(self) -> None:
        """Kafka's ``maintainUncleanablePartitions``: drop the records of partitions that no longer
        exist, or that now live in another log dir. Thread-safe (manager lock, taken after the
        ``logs`` callable has run)."""
        where = {tp: str(dir_key(lg.dir.parent)) for tp, lg in self._snapshot_logs()}
        with self._lock:
            self._quarantine.keep_only(where)


    # --- metrics -------------------------------------------------------------------------------

    @property
    def last_selection(self) -> SelectionStats:
        """Thread-safe without the lock: one read of a frozen value a selection pass replaces whole
        (a scrape must not wait for a selection pass, which holds the lock while it weighs every log)."""
        return self._selection

    @property
    def selected_partitions(self) -> Mapping[TopicPartition, PartitionSelection]:
        """Each compacted partition's dirty ratio and reason code as the last selection pass
        (:meth:`grab_filthiest_compacted_log`) saw it; empty before the first. A read-only mapping
        replaced whole by each pass: thread-safe without any lock (what a metrics scrape reads)."""
        return self._selected

    @property
    def max_dirty_percent(self) -> int:
        """``max-dirty-percent``: 100 × the highest dirty ratio of the last selection. Thread-safe, no lock."""
        return int(100 * self.last_selection.max_dirty_ratio)

    @property
    def max_compaction_delay_ms(self) -> int:
        """The largest ``max.compaction.lag.ms`` delay of the last selection. Thread-safe, no lock."""
        return self.last_selection.max_compaction_delay_ms

    def update_last_run(self) -> None:
        """Mark a cleaner run now (a grab does it too). Thread-safe (manager lock)."""
        with self._lock:
            self._time_of_last_run = self._clock.milliseconds()

    @property
    def time_since_last_run_ms(self) -> int:
        """``time-since-last-run-ms``. Thread-safe without the lock (one read of an int)."""
        return self._clock.milliseconds() - self._time_of_last_run

    def last_clean_time(self, tp: TopicPartition) -> int | None:
        """When a clean of ``tp`` last advanced its first dirty offset (None: not since start-up).
        Thread-safe (manager lock)."""
        with self._lock:
            return self._last_clean.get(tp)

    def uncleanable_partitions_count(self, log_dir: Path | str) -> int:
        """``uncleanable-partitions-count`` of one log dir. Thread-safe, no lock (:meth:`quarantined`)."""
        return len(self.quarantined(log_dir))

    def uncleanable_bytes(self, log_dir: Path | str) -> int:
        """``uncleanable-bytes`` of one log dir: the cleanable bytes of its quarantined partitions'
        current ranges (a partition whose stats fail, or that is gone, counts 0).
        Thread-safe: no lock when nothing is quarantined, else the manager lock per quarantined
        partition (to read its checkpoint); reads segment metadata of each quarantined log."""
        records = {r.topic_partition for r in self.quarantined(log_dir)}
        if not records:  # the common case: no snapshot of the logs
            return 0
        now = self._clock.milliseconds()
        total = 0
        for tp, lg in self._snapshot_logs():
            if tp in records:
                with self._lock:
                    checkpoint = self._checkpoint_for(tp, lg)
                try:
                    total += log_to_clean(tp, lg, checkpoint, now).cleanable_bytes
                except Exception as e:  # a metric never fails
                    log.debug("%s: no uncleanable bytes: %s", tp, e)
        return total

    # --- explain -------------------------------------------------------------------------------

    def explain(self, tp: TopicPartition) -> CleaningExplanation:
        """Why the cleaner cleans ``tp`` now, or why not and when it will: the plan's numbers with
        the state, quarantine and last clean time. Computed outside the manager lock. Raises
        :class:`UnknownTopicOrPartitionError`."""
        lg = self._find(tp)
        if self._remote_load is not None:
            self._remote_load([(tp, lg)])
        return self._explain(tp, lg)

    def explain_all(self, topic: str | None = None) -> list[CleaningExplanation]:
        """:meth:`explain` for every partition (of ``topic``), by partition. Thread-safe, like :meth:`explain`."""
        pairs = sorted(((tp, lg) for tp, lg in self._snapshot_logs() if topic is None or tp.topic == topic),
                       key=lambda pair: pair[0])
        if self._remote_load is not None:
            self._remote_load(pairs)
        return [self._explain(tp, lg) for tp, lg in pairs]

    def _explain(self, tp: TopicPartition, lg: Log) -> CleaningExplanation:
        with self._lock:
            state = self._cleaning.get(tp)
            quarantine = self._quarantine.get(tp)
            last_clean = self._last_clean.get(tp)
            checkpoint = self._checkpoint_for(tp, lg)
        now = self._clock.milliseconds()
        shown = None if state is None else str(state)
        try:
            spans = self._remote_spans(tp, lg) if self._remote_spans is not None else ()
            return explain_log(tp, lg, checkpoint, now, state=shown, quarantine=quarantine, last_clean_ms=last_clean,
                               remote_spans=spans)
        except Exception as e:  # explain every partition, even one whose stats fail
            return failed_explanation(tp, lg, checkpoint, now, describe_error(e), state=shown,
                                      quarantine=quarantine, last_clean_ms=last_clean)
