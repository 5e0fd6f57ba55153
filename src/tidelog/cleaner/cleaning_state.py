"""Kafka's ``LogCleaningState``: what the cleaner may do with a partition that has a state.

A partition with no state is idle. :data:`IN_PROGRESS`: a cleaner thread (or the cleaner's
retention pass) works on it. :data:`ABORTED`: someone asked it to stop; the thread stops at its
next chunk. ``paused(n)``: ``n`` holders must resume before the cleaner may touch it. The
transitions are :class:`~.manager.CleanerManager`'s. Immutable values: thread-safe.
"""

from __future__ import annotations

from dataclasses import dataclass


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
