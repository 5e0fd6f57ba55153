"""Kafka's ``LogCleaningState``: what the cleaner may do with a partition that has a state.

A partition with no state is idle. :data:`IN_PROGRESS`: a cleaner thread (or the cleaner's
retention pass) works on it. :data:`ABORTED`: someone asked it to stop; the thread stops at its
next chunk. ``paused(n)``: ``n`` holders must resume before the cleaner may touch it.
:class:`CleaningState` values are immutable (thread-safe); :class:`CleaningStates` holds each
partition's state and makes the transitions, under the cleaner manager's lock.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass

from tidelog.errors import CleanerStateError
from tidelog.topic_partition import TopicPartition


@dataclass(frozen=True, slots=True)
class CleaningState:
    """Kafka's ``LogCleaningState``: :data:`IN_PROGRESS`, :data:`ABORTED` or ``paused(n)``."""

    name: str
    pause_count: int = 0

    @property
    def is_paused(self) -> bool:
        return self.name == "paused"

    def __str__(self) -> str:
        return f"paused ({self.pause_count})" if self.is_paused else self.name


IN_PROGRESS = CleaningState("in progress")
ABORTED = CleaningState("aborted")


def paused(count: int) -> CleaningState:
    """``Paused(count)``: ``count`` holders must resume before the cleaner may touch the partition."""
    return CleaningState("paused", count)


class CleaningStates:
    """The state of every partition that has one (Kafka's ``inProgress`` map) and its transitions
    (the diagram in :mod:`.manager`).

    Not thread-safe: its one owner, the :class:`~.manager.CleanerManager`, calls it under the
    manager lock; ``changed``, a Condition on that lock, is notified when an aborted clean ends.
    """

    def __init__(self, changed: threading.Condition) -> None:
        self._changed = changed
        self._states: dict[TopicPartition, CleaningState] = {}
        self._pending_pauses: dict[TopicPartition, int] = {}  # pauses asked while ABORTED, taken when done
        self._removed: set[TopicPartition] = set()  # removed while paused: a late resume does nothing

    def __contains__(self, tp: TopicPartition) -> bool:
        return tp in self._states

    def get(self, tp: TopicPartition) -> CleaningState | None:
        """``tp``'s state; None when idle."""
        return self._states.get(tp)

    def start(self, tp: TopicPartition) -> None:
        """idle → IN_PROGRESS (the caller checked that ``tp`` is idle)."""
        self._set(tp, IN_PROGRESS)

    def _set(self, tp: TopicPartition, state: CleaningState) -> None:
        self._states[tp] = state
        self._removed.discard(tp)

    def done(self, tp: TopicPartition, doing: str, idle: str) -> bool:
        """The cleaner thread is done with ``tp``: IN_PROGRESS → idle (True); ABORTED → PAUSED by
        the abort and every pause asked while it was stopping, the waiters woken (False); any other
        state raises :class:`CleanerStateError` ("done ``doing`` a partition that is ``idle``")."""
        state = self._states.get(tp)
        if state == IN_PROGRESS:
            del self._states[tp]
            return True
        if state == ABORTED:
            self._set(tp, paused(1 + self._pending_pauses.pop(tp, 0)))
            self._changed.notify_all()
            return False
        raise CleanerStateError(f"done {doing} a partition that is {state or idle}", topic_partition=str(tp))

    def pause(self, tp: TopicPartition) -> None:
        """One more pause of ``tp``; a clean in progress is aborted (the pause taken when its
        thread is done: :meth:`done`)."""
        state = self._states.get(tp)
        if state is None:
            self._set(tp, paused(1))
        elif state == IN_PROGRESS:
            self._states[tp] = ABORTED
        elif state == ABORTED:
            self._pending_pauses[tp] = self._pending_pauses.get(tp, 0) + 1
        else:
            self._states[tp] = paused(state.pause_count + 1)

    def stopped(self, tp: TopicPartition) -> bool:
        """No clean of ``tp`` is running or aborting."""
        return self._states.get(tp) not in (IN_PROGRESS, ABORTED)

    def resume(self, tp: TopicPartition) -> None:
        """PAUSED(1) → idle, PAUSED(n) → PAUSED(n-1); nothing for a partition removed since it was
        paused; any other state raises :class:`CleanerStateError`."""
        state = self._states.get(tp)
        if state is None and tp in self._removed:
            return
        if state is None or not state.is_paused:
            raise CleanerStateError(f"cannot resume cleaning: it is {state or 'not paused'}", topic_partition=str(tp))
        if state.pause_count == 1:
            del self._states[tp]
        else:
            self._states[tp] = paused(state.pause_count - 1)

    def abort_running(self, tps: Iterable[TopicPartition] | None = None) -> list[TopicPartition]:
        """IN_PROGRESS → ABORTED for ``tps`` (None: every partition); the ones aborted."""
        candidates = list(self._states) if tps is None else list(tps)
        running = [tp for tp in candidates if self._states.get(tp) == IN_PROGRESS]
        for tp in running:
            self._states[tp] = ABORTED
        return running

    def remove(self, tp: TopicPartition) -> None:
        """Forget ``tp`` (deleted, its clean stopped): its state and pauses; a late resume does nothing."""
        self._pending_pauses.pop(tp, None)
        if self._states.pop(tp, None) is not None:
            self._removed.add(tp)
