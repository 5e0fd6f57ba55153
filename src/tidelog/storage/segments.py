"""LogSegments: a partition's segments ordered by base offset, with floor/higher lookups."""

from __future__ import annotations

import bisect
from collections.abc import Iterator

from tidelog.storage.segment import LogSegment


class LogSegments:
    """Sorted map base offset → segment. The last segment is the active one.

    Mutations happen under the owning log's lock; readers take :meth:`snapshot` lists.
    """

    def __init__(self) -> None:
        self._bases: list[int] = []
        self._by_base: dict[int, LogSegment] = {}
        # The active segment (None when empty): a plain attribute, kept by every mutation below,
        # because the leader's append path reads it on every append.
        self.last: LogSegment | None = None

    def _update_last(self) -> None:
        self.last = self._by_base[self._bases[-1]] if self._bases else None

    def add(self, segment: LogSegment) -> LogSegment | None:
        """Insert or replace the segment at its base offset; returns the replaced one."""
        base = segment.base_offset
        previous = self._by_base.get(base)
        if previous is None:
            bisect.insort(self._bases, base)
        self._by_base[base] = segment
        self._update_last()
        return previous

    def remove(self, base_offset: int) -> None:
        if self._by_base.pop(base_offset, None) is not None:
            del self._bases[bisect.bisect_left(self._bases, base_offset)]
            self._update_last()

    def clear(self) -> None:
        self._bases.clear()
        self._by_base.clear()
        self.last = None

    def get(self, base_offset: int) -> LogSegment | None:
        return self._by_base.get(base_offset)

    def contains(self, base_offset: int) -> bool:
        return base_offset in self._by_base

    def __len__(self) -> int:
        return len(self._bases)

    def __iter__(self) -> Iterator[LogSegment]:
        return iter(self.snapshot())

    def snapshot(self) -> list[LogSegment]:
        """A list copy; safe without the log lock against a concurrent add or remove (readers such
        as the cleaner's planner take it unlocked)."""
        by_base = self._by_base
        return [s for b in list(self._bases) if (s := by_base.get(b)) is not None]

    @property
    def first(self) -> LogSegment | None:
        return self._by_base[self._bases[0]] if self._bases else None

    def floor(self, offset: int) -> LogSegment | None:
        """The segment with the largest base offset <= ``offset``."""
        i = bisect.bisect_right(self._bases, offset)
        return self._by_base[self._bases[i - 1]] if i else None

    def higher(self, offset: int) -> LogSegment | None:
        """The segment with the smallest base offset > ``offset``."""
        i = bisect.bisect_right(self._bases, offset)
        return self._by_base[self._bases[i]] if i < len(self._bases) else None

    def values_between(self, from_offset: int, to_offset: int) -> list[LogSegment]:
        """Segments that may hold offsets in [from, to): from the floor segment of ``from_offset``
        up to, not including, the first segment whose base is >= ``to_offset`` (Kafka's rules:
        from == to is empty, from > to is an error)."""
        if from_offset > to_offset:
            raise ValueError(f"invalid segment range: from {from_offset} > to {to_offset}")
        if from_offset == to_offset:
            return []
        floor = self.floor(from_offset)
        start = bisect.bisect_left(self._bases, floor.base_offset) if floor else 0
        end = bisect.bisect_left(self._bases, to_offset)
        return [self._by_base[b] for b in self._bases[start:end]]

    def size_in_bytes(self) -> int:
        """Bytes in every segment; safe without the log lock, as :meth:`snapshot`."""
        return sum(segment.size for segment in self.snapshot())
