"""The cleaner's quarantine: partitions set aside after a failure, retried with a backoff.

Kafka sets a partition whose cleaning failed aside as "uncleanable" until the broker restarts
(``LogCleanerManager.markPartitionUncleanable``). Here it is *quarantined*: the error, the phase
that failed (``stats``, ``cleaning``, ``retention``), the time and the attempt count are recorded,
and the partition is skipped by both the cleaning choice and the cleaner's retention pass until
its retry time, when it is offered again. The backoff starts at 60 s and doubles up to 1 h: the
cleaner loop runs every ``log.cleaner.backoff.ms`` (15 s) when idle, and re-reading a corrupt
segment on every loop would waste I/O and flood the log, while a transient failure (a full disk,
a race with a deletion) clears within a minute and a permanent one costs one attempt an hour
while ``tidelog explain`` and the metrics show it.

A success ends a quarantine: ``done_cleaning`` after a round that advanced the first dirty offset
and had no failure marked clears ``stats`` and ``cleaning`` records; a grab clears a ``stats``
record when the stats compute again; the cleaner clears a ``retention`` record after a retention
pass that worked. A failed round should be marked before its ``done_cleaning`` (then even a round
that finished some passes before failing keeps the record and its backoff); marked after it, as
Kafka orders the calls, only a round that made progress loses the attempt count. A log whose stats
fail is quarantined on the spot where Kafka throws ``LogCleaningException`` and loses the whole
pass until the thread's next loop.

Threading: :class:`Quarantine` is not thread-safe and takes no lock; its one owner, the
:class:`~.manager.CleanerManager`, calls it under the manager lock.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType

from tidelog.cleaner.plan import QuarantineRecord, format_time
from tidelog.errors import LogCleaningError
from tidelog.topic_partition import TopicPartition

log = logging.getLogger("tidelog.cleaner.manager")

PHASE_STATS = "stats"
PHASE_CLEANING = "cleaning"
PHASE_RETENTION = "retention"

DEFAULT_QUARANTINE_INITIAL_BACKOFF_MS = 60_000
DEFAULT_QUARANTINE_MAX_BACKOFF_MS = 3_600_000


class Quarantine:
    """The quarantine records by partition. ``initial_backoff_ms`` doubles after each failure in a
    row up to ``max_backoff_ms``. Not thread-safe: the caller holds the cleaner manager's lock;
    :attr:`snapshot` excepted."""

    def __init__(self, initial_backoff_ms: int = DEFAULT_QUARANTINE_INITIAL_BACKOFF_MS,
                 max_backoff_ms: int = DEFAULT_QUARANTINE_MAX_BACKOFF_MS) -> None:
        if initial_backoff_ms < 0 or max_backoff_ms < initial_backoff_ms:
            raise ValueError("quarantine backoffs must satisfy 0 <= initial <= max")
        self._initial_backoff_ms = initial_backoff_ms
        self._max_backoff_ms = max_backoff_ms
        self._records: dict[TopicPartition, QuarantineRecord] = {}
        # a read-only copy replaced whole after every change: what readers without the lock see
        self.snapshot: Mapping[TopicPartition, QuarantineRecord] = MappingProxyType({})

    def _changed(self) -> None:
        self.snapshot = MappingProxyType(dict(self._records))

    def __contains__(self, tp: TopicPartition) -> bool:
        return tp in self._records

    def get(self, tp: TopicPartition) -> QuarantineRecord | None:
        return self._records.get(tp)

    def waiting(self, tp: TopicPartition, now: int) -> bool:
        """``tp`` is quarantined and its retry time has not come."""
        record = self._records.get(tp)
        return record is not None and now < record.retry_at_ms

    def mark(self, tp: TopicPartition, key: Path, error: BaseException | str, phase: str, now: int) -> QuarantineRecord:
        """Quarantine ``tp`` (of log dir ``key``) after ``error`` in ``phase`` at ``now``; one more attempt."""
        previous = self._records.get(tp)
        attempts = previous.attempts + 1 if previous is not None else 1
        record = QuarantineRecord(
            topic_partition=tp, log_dir=str(key), error=describe_error(error), phase=phase,
            since_ms=previous.since_ms if previous is not None else now, last_failure_ms=now,
            attempts=attempts, retry_at_ms=now + self._backoff_ms(attempts),
        )
        self._records[tp] = record
        self._changed()
        log.warning("%s: quarantined (%s failed, attempt %d), retry at %s: %s",
                    tp, phase, attempts, format_time(record.retry_at_ms), record.error)
        return record

    def _backoff_ms(self, attempts: int) -> int:
        return min(self._initial_backoff_ms << min(attempts - 1, 62), self._max_backoff_ms)

    def clear(self, tp: TopicPartition, phases: tuple[str, ...] | None) -> bool:
        """End ``tp``'s quarantine if its phase is one of ``phases`` (None: any); True if it was."""
        record = self._records.get(tp)
        if record is None or (phases is not None and record.phase not in phases):
            return False
        del self._records[tp]
        self._changed()
        log.info("%s: out of quarantine after %d failed attempt(s)", tp, record.attempts)
        return True

    def forget(self, tp: TopicPartition) -> None:
        """Drop ``tp``'s record silently (the partition is gone)."""
        if self._records.pop(tp, None) is not None:
            self._changed()

    def records(self, log_dir: str | None = None) -> list[QuarantineRecord]:
        """The records (of log dir ``log_dir``, as keyed), by partition. Any thread, no lock (reads :attr:`snapshot`)."""
        return sorted((r for r in self.snapshot.values() if log_dir is None or r.log_dir == log_dir),
                      key=lambda r: r.topic_partition)

    def keep_only(self, where: dict[TopicPartition, str]) -> None:
        """Drop the records of partitions not in ``where`` or living in another log dir than recorded."""
        gone = [tp for tp, r in self._records.items() if where.get(tp) != r.log_dir]
        for tp in gone:
            del self._records[tp]
        if gone:
            self._changed()

    def error(self, tp: TopicPartition) -> LogCleaningError:
        """The error a caller gets for quarantined ``tp``."""
        return LogCleaningError(f"cannot clean: {self._records[tp].error}", topic_partition=str(tp))


def describe_error(error: BaseException | str) -> str:
    """``Type: message``, followed by each cause: what a quarantine record and explain show."""
    if isinstance(error, str):
        return error
    parts = []
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        parts.append(f"{type(current).__name__}: {current}")
        current = current.__cause__ or current.__context__
    return "; caused by ".join(parts)
