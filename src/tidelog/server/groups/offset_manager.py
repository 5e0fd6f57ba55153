"""Committed offsets of the classic groups (Kafka's ``OffsetMetadataManager``): OffsetCommit,
OffsetFetch, DeleteGroups and the expiration of an empty group's offsets.

Committed offsets are written as OffsetCommit records and applied in memory once stored;
OffsetFetch answers from memory. The offsets of an empty group expire ``offsets.retention.minutes``
after it emptied, and the group goes with its last offset (:meth:`OffsetMetadataManager.expire_offsets`).
Writes go through a :class:`~.messages.GroupStore` and complete through a callback; nothing here blocks.

Threading: not thread-safe and takes no lock; every method runs on the coordinator's thread (the
server's event loop), like the :class:`~.coordinator.GroupCoordinator` that shares its groups.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import replace

from tidelog.clock import Clock
from tidelog.server.errors import ErrorCode
from tidelog.server.groups.group import ClassicGroup, GroupState, Member
from tidelog.server.groups.messages import CommitRequest, Done, GroupConfig, GroupStore, StoreRecord, log_failure
from tidelog.server.groups.records import (
    OffsetCommitValue,
    encode_group_metadata_key,
    encode_offset_commit_key,
    encode_offset_commit_value,
)

log = logging.getLogger("tidelog.server.groups.coordinator")
E = ErrorCode
OFFSET_METADATA_MAX_BYTES = 4096  # Kafka's offset.metadata.max.bytes default
TopicPartition = tuple[str, int]
CommitResults = dict[TopicPartition, ErrorCode]


class OffsetMetadataManager:
    """The committed offsets of the groups in ``groups`` (a dict shared with the coordinator).

    ``keep_alive(group, member)`` is called when a member's commit counts as a heartbeat.
    Single-threaded: not thread-safe, takes no lock.
    """

    def __init__(self, groups: dict[str, ClassicGroup], config: GroupConfig, store: GroupStore, clock: Clock,
                 keep_alive: Callable[[ClassicGroup, Member], None]) -> None:
        self._groups = groups
        self._config = config
        self._store = store
        self._clock = clock
        self._keep_alive = keep_alive

    def _wall(self) -> int:
        return self._clock.milliseconds()

    def _new_group(self, group_id: str) -> ClassicGroup:
        group = self._groups[group_id] = ClassicGroup(group_id, current_state_timestamp=self._wall())
        return group

    # --- OffsetCommit ----------------------------------------------------------------------------

    def commit_offsets(self, request: CommitRequest, respond: Callable[[CommitResults], None]) -> None:
        """Store ``request.offsets``; ``respond`` gets one error per partition once written."""
        group = self._groups.get(request.group_id)
        error = self._check_commit(group, request)
        if error is not E.NONE:
            respond({tp: error for tp in request.offsets})
            return
        results, accepted = self._accepted(request)
        if group is None:
            self._new_group(request.group_id)
        if not accepted:
            respond(results)
            return
        records: list[StoreRecord] = [(encode_offset_commit_key(request.group_id, topic, partition),
                                       encode_offset_commit_value(value)) for (topic, partition), value in accepted.items()]
        self._store.write(request.group_id, records, self._committed(request.group_id, results, accepted, respond))

    def _accepted(self, request: CommitRequest) -> tuple[CommitResults, dict[TopicPartition, OffsetCommitValue]]:
        """One error per partition, and the offsets that may be written (metadata not too large)."""
        results: CommitResults = {}
        accepted: dict[TopicPartition, OffsetCommitValue] = {}
        for tp, value in request.offsets.items():
            if value.commit_timestamp < 0:
                value = replace(value, commit_timestamp=self._wall())
            too_large = len(value.metadata.encode()) > OFFSET_METADATA_MAX_BYTES
            results[tp] = E.OFFSET_METADATA_TOO_LARGE if too_large else E.NONE
            if not too_large:
                accepted[tp] = value
        return results, accepted

    def _committed(self, group_id: str, results: CommitResults, accepted: dict[TopicPartition, OffsetCommitValue],
                   respond: Callable[[CommitResults], None]) -> Done:
        def stored(failure: BaseException | None) -> None:
            if failure is not None:
                log.warning("group %s: storing committed offsets failed: %s", group_id, failure)
                results.update({tp: E.COORDINATOR_NOT_AVAILABLE for tp in accepted})
            else:
                target = self._groups.get(group_id)
                if target is None or target.state is GroupState.DEAD:
                    target = self._new_group(group_id)
                target.offsets.update(accepted)
            respond(results)
        return stored

    def _check_commit(self, group: ClassicGroup | None, request: CommitRequest) -> ErrorCode:
        if not request.group_id:
            return E.INVALID_GROUP_ID
        simple = request.generation_id < 0 and not request.member_id and request.group_instance_id is None
        if group is None:
            return E.NONE if request.generation_id < 0 else E.ILLEGAL_GENERATION
        if group.state is GroupState.DEAD:
            return E.COORDINATOR_NOT_AVAILABLE
        if group.state is GroupState.EMPTY and request.generation_id < 0:
            return E.NONE
        if simple:
            return E.UNKNOWN_MEMBER_ID
        error = group.member_error(request.member_id, request.group_instance_id)
        if error is not E.NONE:
            return error
        if request.generation_id != group.generation_id:
            return E.ILLEGAL_GENERATION
        if group.state is GroupState.COMPLETING_REBALANCE:
            return E.REBALANCE_IN_PROGRESS
        self._keep_alive(group, group.members[request.member_id])
        return E.NONE

    # --- OffsetFetch -----------------------------------------------------------------------------

    def fetch_offsets(self, group_id: str, partitions: Iterable[TopicPartition] | None
                      ) -> dict[TopicPartition, OffsetCommitValue | None]:
        """Committed offsets of ``partitions`` (None: every partition with one); None where none is."""
        group = self._groups.get(group_id)
        committed = group.offsets if group is not None and group.state is not GroupState.DEAD else {}
        if partitions is None:
            return dict(sorted(committed.items()))
        return {tp: committed.get(tp) for tp in partitions}

    # --- DeleteGroups ----------------------------------------------------------------------------

    def delete_groups(self, group_ids: list[str], respond: Callable[[dict[str, ErrorCode]], None]) -> None:
        """Delete empty groups (tombstones for the group and its offsets); one error per id."""
        results: dict[str, ErrorCode] = {}
        writing: list[tuple[str, list[StoreRecord]]] = []
        for group_id in dict.fromkeys(group_ids):
            group = self._groups.get(group_id)
            if group is None or group.state is GroupState.DEAD:
                results[group_id] = E.GROUP_ID_NOT_FOUND
            elif group.state is not GroupState.EMPTY:
                results[group_id] = E.NON_EMPTY_GROUP
            else:
                group.transition(GroupState.DEAD, self._wall())
                writing.append((group_id, _tombstones(group)))
        if not writing:
            respond(results)
            return
        remaining = [len(writing)]
        for group_id, records in writing:
            self._store.write(group_id, records, self._deleted(group_id, results, remaining, respond))

    def _deleted(self, group_id: str, results: dict[str, ErrorCode], remaining: list[int],
                 respond: Callable[[dict[str, ErrorCode]], None]) -> Done:
        def done(failure: BaseException | None) -> None:
            group = self._groups.get(group_id)
            if failure is not None:
                log.warning("group %s: writing its tombstones failed: %s", group_id, failure)
                results[group_id] = E.COORDINATOR_NOT_AVAILABLE
                if group is not None and group.state is GroupState.DEAD:
                    group.transition(GroupState.EMPTY, self._wall())
            else:
                results[group_id] = E.NONE
                if group is not None and group.state is GroupState.DEAD:
                    del self._groups[group_id]
            remaining[0] -= 1
            if remaining[0] == 0:
                respond(results)
        return done

    # --- expiration ------------------------------------------------------------------------------

    def expire_offsets(self) -> int:
        """Kafka's offsets expiration (KIP-211), for empty groups: an offset goes once
        ``offsets.retention.minutes`` have passed since the group emptied (for a group that never
        had members, since the commit); a group left empty with no offsets is deleted. Tombstones
        are written for both. Returns the number of offsets expired. Run it periodically."""
        expired = 0
        for group in [g for g in self._groups.values() if g.state is GroupState.EMPTY]:
            expired += self._expire_group(group)
        return expired

    def _expire_group(self, group: ClassicGroup) -> int:
        gone = self._expired(group)
        records: list[StoreRecord] = [(encode_offset_commit_key(group.group_id, *tp), None) for tp in gone]
        for tp in gone:
            del group.offsets[tp]
        if not group.offsets:
            records.append((encode_group_metadata_key(group.group_id), None))
            group.transition(GroupState.DEAD, self._wall())
            del self._groups[group.group_id]
        if records:
            self._store.write(group.group_id, records, log_failure(group.group_id))
        return len(gone)

    def _expired(self, group: ClassicGroup) -> list[TopicPartition]:
        now, retention = self._wall(), self._config.offsets_retention_ms
        emptied = group.current_state_timestamp if group.protocol_type is not None else -1
        return sorted(tp for tp, value in group.offsets.items()
                      if now - (emptied if emptied >= 0 else value.commit_timestamp) >= retention)


def _tombstones(group: ClassicGroup) -> list[StoreRecord]:
    records: list[StoreRecord] = [(encode_offset_commit_key(group.group_id, topic, partition), None)
                                  for topic, partition in sorted(group.offsets)]
    records.append((encode_group_metadata_key(group.group_id), None))
    return records
