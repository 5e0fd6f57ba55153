"""The LogManager's side of staged commits (:mod:`.staged_commit`): the partitions of a job that
could be neither completed nor rolled back are *held*, and only the commit itself reaches them.

A held partition's log stays open in the live set (it is checkpointed, cleaned and closed as any
other) but :meth:`~tidelog.manager.manager.LogManager.log` and ``append`` refuse it with
KAFKA_STORAGE_ERROR, so no reader sees part of the job and no produce lands after it (which would
make it impossible to complete). The commit reaches it through :meth:`StagedHolds.committing_log`
and :meth:`StagedHolds.committing_append`. Each completion (at open, and whenever an offline log
dir comes back: :meth:`StagedHolds._complete_staged_commits`) replaces the holds with those of
the jobs still pending. The check costs ``log`` one falsy test while nothing is held.

:class:`StagedHolds` is a mixin of :class:`~tidelog.manager.manager.LogManager`, as
:class:`~tidelog.manager.offline_dirs.OfflineDirs` is. It uses the manager's ``_no_log_error``,
``_append_to`` and ``_dirs``.

Thread-safety: the holds are one dict replaced whole, never changed in place, so a reader on
another thread sees the old holds or the new ones, without a lock.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from tidelog.clock import Clock
from tidelog.errors import LogDirOfflineError
from tidelog.manager.staged_commit import complete_pending
from tidelog.storage.append_info import LogAppendInfo
from tidelog.storage.log import Log
from tidelog.topic_partition import TopicPartition

if TYPE_CHECKING:
    from tidelog.manager.log_dir import LogDir


class StagedHolds:
    """Staged-commit holds of the LogManager (see the module doc)."""

    # the LogManager's state this mixin works on
    _dirs: list[LogDir]
    _clock: Clock
    _logs: dict[TopicPartition, Log]
    # partitions of staged commits that could not be completed nor rolled back -> the job's key:
    # not served until it is; replaced whole, never mutated in place
    _staged_holds: dict[TopicPartition, str]

    def hold_for_staged_commits(self, holds: Mapping[TopicPartition, str]) -> None:
        """The partitions (-> job key) of staged commits left pending: not served nor appended to
        through :meth:`log` / :meth:`append` until a later completion resolves them. Thread-safe
        (the holds are replaced whole)."""
        self._staged_holds = dict(holds)

    def committing_log(self, tp: TopicPartition) -> Log:
        """:meth:`log`, for the staged commit only: also the log of a partition its pending job
        holds. Thread-safe as :meth:`log` is."""
        found = self._logs.get(tp)
        if found is None:
            raise self._no_log_error(tp)
        return found

    def committing_append(self, tp: TopicPartition, records: bytes | bytearray | memoryview) -> LogAppendInfo:
        """:meth:`append`, for the staged commit only: also to a partition its pending job holds.
        Thread-safe as :meth:`append` is."""
        return self._append_to(tp, self.committing_log(tp), records)

    def _staged_hold_error(self, tp: TopicPartition) -> LogDirOfflineError:
        return LogDirOfflineError(
            f"partition {tp} is not available: the interrupted commit of {self._staged_holds[tp]} "
            "could not be completed nor rolled back yet (see the log); it is served once that is done",
            topic_partition=str(tp))

    def _complete_staged_commits(self) -> None:
        """An offline dir came back: finish (or roll back) the staged commits left pending, whose
        partitions are held meanwhile (their logs rejoined, still unserved). Outside the manager's
        lock (the commit appends through the manager)."""
        if self._staged_holds:
            complete_pending(self, [d.path for d in self._dirs], self._clock)

