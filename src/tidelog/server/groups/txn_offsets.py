"""Transactional offsets not yet committed or aborted (Kafka's ``pendingTransactionalOffsets`` and
``openTransactionsByGroup`` of its ``OffsetMetadataManager``).

A TxnOffsetCommit writes its offsets to ``__consumer_offsets`` in a transactional batch of the
producer; they stay here, invisible to OffsetFetch, until the transaction coordinator writes the
COMMIT or ABORT marker to the group's partition. A commit moves them to the group's committed
offsets, an abort drops them.

Order between a transaction's offsets and other commits of the same partition (Kafka's rule:
"keep the most recent committed offset when there is a mix of transactional and regular offset
commits"): each pending offset carries a *stamp*, its place in the order of ``__consumer_offsets``
(the record's offset when loaded; a counter above every loaded offset for later writes). A
transactional offset is materialized at its commit only if no offset written after it was
materialized meanwhile: whenever an offset with stamp ``s`` is materialized (a regular commit, or
another transaction's commit), pending offsets of that partition with a stamp below ``s`` are marked
superseded, and a superseded offset is dropped at its commit. A tombstone of a partition drops its
pending offsets.

Threading: not thread-safe, no lock; used on the coordinator's thread only (the event loop), as
the :class:`~.offset_manager.OffsetMetadataManager` that owns it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

from tidelog.server.groups.records import OffsetCommitValue

TopicPartition = tuple[str, int]


@dataclass(slots=True)
class PendingOffset:
    """One transactional offset: its value, its stamp (see the module doc) and whether an offset
    written after it was materialized (it will then never be)."""

    value: OffsetCommitValue
    stamp: int
    superseded: bool = False


GroupOffsets = dict[TopicPartition, PendingOffset]


class PendingTxnOffsets:
    """Pending offsets by producer id, then group, then partition. Not thread-safe, no lock."""

    def __init__(self) -> None:
        self._by_producer: dict[int, dict[str, GroupOffsets]] = {}
        self._producers_of_group: dict[str, set[int]] = {}

    def add(self, producer_id: int, group_id: str, offsets: Mapping[TopicPartition, OffsetCommitValue],
            stamp: int) -> None:
        """Hold ``offsets`` of ``group_id`` for the open transaction of ``producer_id`` (a later
        offset of the same producer and partition replaces the earlier one)."""
        held = self._by_producer.setdefault(producer_id, {}).setdefault(group_id, {})
        for tp, value in offsets.items():
            held[tp] = PendingOffset(value, stamp)
        self._producers_of_group.setdefault(group_id, set()).add(producer_id)

    def has_pending(self, group_id: str, tp: TopicPartition) -> bool:
        """Whether an open transaction holds an offset of ``tp`` for ``group_id``."""
        return any(tp in groups.get(group_id, {}) for groups in self._groups_holding(group_id))

    def pending_partitions(self, group_id: str) -> set[TopicPartition]:
        """The partitions of ``group_id`` with an offset held by an open transaction."""
        return {tp for groups in self._groups_holding(group_id) for tp in groups.get(group_id, {})}

    def has_open_transactions(self, group_id: str) -> bool:
        return bool(self._producers_of_group.get(group_id))

    def groups(self) -> set[str]:
        """Groups with an offset held by an open transaction."""
        return set(self._producers_of_group)

    def producers(self) -> set[int]:
        return set(self._by_producer)

    def held(self, producer_id: int) -> dict[str, dict[TopicPartition, OffsetCommitValue]]:
        """What ``producer_id``'s open transaction holds, by group (a copy, for inspection)."""
        return {g: {tp: p.value for tp, p in offsets.items()}
                for g, offsets in self._by_producer.get(producer_id, {}).items()}

    def supersede(self, group_id: str, tp: TopicPartition, stamp: int) -> None:
        """An offset of ``tp`` with ``stamp`` was materialized: pending ones written before it
        (lower stamp) will never be."""
        for groups in self._groups_holding(group_id):
            pending = groups.get(group_id, {}).get(tp)
            if pending is not None and pending.stamp < stamp:
                pending.superseded = True

    def drop(self, group_id: str, tp: TopicPartition) -> None:
        """A tombstone of ``tp``: drop every pending offset of it (the transactions stay open)."""
        for groups in self._groups_holding(group_id):
            groups.get(group_id, {}).pop(tp, None)

    def drop_group(self, group_id: str) -> None:
        """The group is deleted: drop its pending offsets (the transactions stay open)."""
        for producer_id in self._producers_of_group.pop(group_id, set()):
            groups = self._by_producer.get(producer_id, {})
            groups.pop(group_id, None)
            if not groups:
                self._by_producer.pop(producer_id, None)

    def end(self, producer_id: int, in_partition: Callable[[str], bool], commit: bool
            ) -> list[tuple[str, TopicPartition, OffsetCommitValue]]:
        """The marker of ``producer_id``'s transaction for the groups ``in_partition`` selects
        (those of the ``__consumer_offsets`` partition that got it): their pending offsets are
        removed, and on COMMIT the ones to materialize are returned, (group, partition, value)
        in stamp order: those not superseded (pending offsets of other transactions written
        before them are superseded in turn). Nothing on ABORT."""
        groups = self._by_producer.get(producer_id)
        if groups is None:
            return []
        taken = {group_id: groups.pop(group_id) for group_id in [g for g in groups if in_partition(g)]}
        if not groups:
            del self._by_producer[producer_id]
        for group_id in taken:
            self._forget(group_id, producer_id)
        if not commit:
            return []
        visible = sorted(((p.stamp, g, tp, p.value) for g, offsets in taken.items() for tp, p in offsets.items()
                          if not p.superseded), key=lambda entry: entry[0])
        for stamp, group_id, tp, _ in visible:
            self.supersede(group_id, tp, stamp)
        return [(group_id, tp, value) for _, group_id, tp, value in visible]

    def _forget(self, group_id: str, producer_id: int) -> None:
        producers = self._producers_of_group.get(group_id)
        if producers is not None:
            producers.discard(producer_id)
            if not producers:
                del self._producers_of_group[group_id]

    def _groups_holding(self, group_id: str) -> Iterator[dict[str, GroupOffsets]]:
        for producer_id in self._producers_of_group.get(group_id, ()):
            groups = self._by_producer.get(producer_id)
            if groups is not None:
                yield groups
