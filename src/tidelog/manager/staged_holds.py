"""The LogManager's side of staged commits (:mod:`.staged_commit`): the partitions of a job that
could be neither completed nor rolled back are *held*, and only the commit itself reaches them.

A held partition's log stays open in the live set (it is checkpointed, cleaned and closed as any
other) but the manager's record methods and ``append`` refuse it with KAFKA_STORAGE_ERROR, so no
reader sees part of the job and no produce lands after it (which would make it impossible to
complete). The commit reaches it through :meth:`StagedHolds.committing_log` and
:meth:`StagedHolds.committing_append`. Each completion (at open, and whenever an offline log dir
comes back) replaces the holds with those of the jobs still pending. The check costs the
manager's lookup one falsy test while nothing is held.

:class:`StagedHolds` is a component of :class:`~tidelog.manager.manager.LogManager`
(``manager.staged_holds``): it owns the holds and reaches the partition map only through the
callables it is given.

Thread-safety: the holds are one dict replaced whole, never changed in place, so a reader on
another thread sees the old holds or the new ones, without a lock. :attr:`StagedHolds.commit_lock`
is taken by whatever reads and rewrites the staged-commit log in this process.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping

from tidelog.errors import LogDirOfflineError, TidelogError
from tidelog.storage.append_info import LogAppendInfo
from tidelog.storage.log import Log
from tidelog.topic_partition import TopicPartition

Records = bytes | bytearray | memoryview


class StagedHolds:
    """Staged-commit holds (see the module doc). ``live_log``: the live log of a partition or
    None; ``no_log_error``: why a partition has none; ``append_to``: the manager's append to a
    given log (disk faults handled as for any append)."""

    def __init__(self, live_log: Callable[[TopicPartition], Log | None],
                 no_log_error: Callable[[TopicPartition], TidelogError],
                 append_to: Callable[[TopicPartition, Log, Records], LogAppendInfo]) -> None:
        # partitions of staged commits that could not be completed nor rolled back -> the job's
        # key: not served until it is; replaced whole, never mutated in place
        self.held: Mapping[TopicPartition, str] = {}
        # serializes every reader-writer of the staged-commit log in this process: the completion
        # at open and when an offline dir comes back, and a live broker's commits (live_commit)
        self.commit_lock = threading.RLock()
        self._live_log = live_log
        self._no_log_error = no_log_error
        self._append_to = append_to

    def hold(self, holds: Mapping[TopicPartition, str]) -> None:
        """The partitions (-> job key) of staged commits left pending: not served nor appended to
        through the manager until a later completion resolves them. Thread-safe (the holds are
        replaced whole)."""
        self.held = dict(holds)

    def error(self, tp: TopicPartition) -> LogDirOfflineError:
        """Why held ``tp`` is not served."""
        return LogDirOfflineError(
            f"partition {tp} is not available: the interrupted commit of {self.held[tp]} "
            "could not be completed nor rolled back yet (see the log); it is served once that is done",
            topic_partition=str(tp))

    def committing_log(self, tp: TopicPartition) -> Log:
        """The live log of ``tp`` for the staged commit only: also when its pending job holds it.
        Thread-safe without a lock: one lookup in the manager's partition map."""
        found = self._live_log(tp)
        if found is None:
            raise self._no_log_error(tp)
        return found

    def committing_append(self, tp: TopicPartition, records: Records) -> LogAppendInfo:
        """The manager's append, for the staged commit only: also to a partition its pending job
        holds. Thread-safe: the log serializes its appends."""
        return self._append_to(tp, self.committing_log(tp), records)
