"""Committed offsets of the classic groups (Kafka's ``OffsetMetadataManager``): OffsetCommit,
TxnOffsetCommit, OffsetFetch, DeleteGroups and the expiration of an empty group's offsets.

Committed offsets are written as OffsetCommit records and applied in memory once stored;
OffsetFetch answers from memory. The offsets of an empty group expire ``offsets.retention.minutes``
after it emptied, and the group goes with its last offset (:meth:`OffsetMetadataManager.expire_offsets`).
Writes go through a :class:`~.messages.GroupStore` and complete through a callback; nothing here blocks.

Transactional offsets (TxnOffsetCommit) are written in a transactional batch of the producer and
held in :class:`~.txn_offsets.PendingTxnOffsets` until the transaction's marker reaches the group's
partition (:meth:`OffsetMetadataManager.complete_transaction`). An offset with a pending
transactional commit does not expire, and a group with an open transaction is not expired away;
DeleteGroups writes tombstones for pending partitions too (Kafka's rules).

Threading: not thread-safe and takes no lock; every method runs on the coordinator's thread (the
server's event loop), like the :class:`~.coordinator.GroupCoordinator` that shares its groups.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace

from tidelog.clock import Clock
from tidelog.server.errors import ErrorCode, error_code
from tidelog.server.groups.group import ClassicGroup, GroupState, Member
from tidelog.server.groups.messages import (
    CommitRequest,
    Done,
    GroupConfig,
    GroupStore,
    StoreRecord,
    TxnCommitRequest,
    log_failure,
)
from tidelog.server.groups.records import (
    OffsetCommitValue,
    encode_group_metadata_key,
    encode_offset_commit_key,
    encode_offset_commit_value,
)
from tidelog.server.groups.txn_offsets import PendingTxnOffsets

log = logging.getLogger("tidelog.server.groups.coordinator")
E = ErrorCode
OFFSET_METADATA_MAX_BYTES = 4096  # Kafka's offset.metadata.max.bytes default
TopicPartition = tuple[str, int]
CommitResults = dict[TopicPartition, ErrorCode]
# Kafka's CoordinatorOperationExceptionHelper: what a failed write of the coordinator answers.
_WRITE_ERRORS = {E.UNKNOWN_TOPIC_OR_PARTITION: E.COORDINATOR_NOT_AVAILABLE,
                 E.NOT_ENOUGH_REPLICAS: E.COORDINATOR_NOT_AVAILABLE, 7: E.COORDINATOR_NOT_AVAILABLE,
                 6: E.NOT_COORDINATOR, E.KAFKA_STORAGE_ERROR: E.NOT_COORDINATOR,
                 E.MESSAGE_TOO_LARGE: E.UNKNOWN_SERVER_ERROR, E.RECORD_LIST_TOO_LARGE: E.UNKNOWN_SERVER_ERROR}


def _write_error(code: int) -> ErrorCode:
    """What a coordinator write that failed with Kafka error ``code`` answers."""
    mapped = _WRITE_ERRORS.get(code, code)
    return ErrorCode(mapped) if mapped in ErrorCode._value2member_map_ else E.UNKNOWN_SERVER_ERROR


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
        self._pending = PendingTxnOffsets()
        self._stamp = 0

    def _wall(self) -> int:
        return self._clock.milliseconds()

    def _new_group(self, group_id: str) -> ClassicGroup:
        group = self._groups[group_id] = ClassicGroup(group_id, current_state_timestamp=self._wall())
        return group

    def _live_group(self, group_id: str) -> ClassicGroup:
        """The group, created anew when missing or Dead (a write landed after it went)."""
        group = self._groups.get(group_id)
        return self._new_group(group_id) if group is None or group.state is GroupState.DEAD else group

    def _next_stamp(self) -> int:
        self._stamp += 1
        return self._stamp

    @property
    def pending(self) -> PendingTxnOffsets:
        """The transactional offsets of open transactions, for inspection; never modify it."""
        return self._pending

    def load_pending(self, pending: PendingTxnOffsets, last_stamp: int) -> None:
        """Take the open transactions' offsets found by loading ``__consumer_offsets`` (stamped
        with their record offsets, ``last_stamp`` the highest record offset read): their groups
        exist from now on, as Kafka replays them (a group with none is created Empty)."""
        self._pending = pending
        self._stamp = max(self._stamp, last_stamp)
        for group_id in pending.groups():
            if group_id not in self._groups:
                self._new_group(group_id)

    # --- OffsetCommit ----------------------------------------------------------------------------

    def commit_offsets(self, request: CommitRequest, respond: Callable[[CommitResults], None]) -> None:
        """Store ``request.offsets``; ``respond`` gets one error per partition once written."""
        group = self._groups.get(request.group_id)
        prepared = self._prepare(group, self._check_commit(group, request), request, respond)
        if prepared is not None:
            results, accepted, records = prepared
            self._store.write(request.group_id, records, self._committed(request.group_id, results, accepted, respond))

    def _prepare(self, group: ClassicGroup | None, error: ErrorCode, request: CommitRequest,
                 respond: Callable[[CommitResults], None],
                 ) -> tuple[CommitResults, dict[TopicPartition, OffsetCommitValue], list[StoreRecord]] | None:
        """The steps OffsetCommit and TxnOffsetCommit share once ``request`` is checked: answer
        ``error`` (or nothing accepted) at once and return None; else create the group if new and
        return the results so far, the accepted offsets and their records to write."""
        if error is not E.NONE:
            respond({tp: error for tp in request.offsets})
            return None
        results, accepted = self._accepted(request)
        if group is None:
            self._new_group(request.group_id)
        if not accepted:
            respond(results)
            return None
        records: list[StoreRecord] = [(encode_offset_commit_key(request.group_id, topic, partition),
                                       encode_offset_commit_value(value)) for (topic, partition), value in accepted.items()]
        return results, accepted, records

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
                self._materialize(group_id, accepted, self._next_stamp())
            respond(results)
        return stored

    def _materialize(self, group_id: str, offsets: Mapping[TopicPartition, OffsetCommitValue],
                     stamp: int | None) -> None:
        """Make ``offsets`` the group's committed offsets; with a ``stamp`` (a regular commit),
        pending ones written before it are superseded."""
        self._live_group(group_id).offsets.update(offsets)
        if stamp is not None:
            for tp in offsets:
                self._pending.supersede(group_id, tp, stamp)

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

    # --- TxnOffsetCommit -------------------------------------------------------------------------

    def commit_transactional_offsets(self, request: TxnCommitRequest, respond: Callable[[CommitResults], None]) -> None:
        """Write ``request.offsets`` in a transactional batch of the producer and hold them until
        the transaction's marker; ``respond`` gets one error per partition once written. Checks
        as Kafka's ``validateTransactionalOffsetCommit`` (no REBALANCE_IN_PROGRESS: the group's
        state is not enforced for transactional commits)."""
        group = self._groups.get(request.group_id)
        prepared = self._prepare(group, self._check_txn_commit(group, request),
                                 CommitRequest(request.group_id, request.generation_id, request.member_id,
                                               request.group_instance_id, request.offsets), respond)
        if prepared is None:
            return
        results, accepted, records = prepared
        self._store.write_transactional(request.group_id, request.producer_id, request.producer_epoch, records,
                                        self._held(request, results, accepted, respond))

    def _check_txn_commit(self, group: ClassicGroup | None, request: TxnCommitRequest) -> ErrorCode:
        if not request.group_id:
            return E.INVALID_GROUP_ID
        if group is None:
            return E.NONE if request.generation_id < 0 else E.ILLEGAL_GENERATION
        if group.state is GroupState.DEAD:
            return E.COORDINATOR_NOT_AVAILABLE
        if request.generation_id < 0 and group.state is GroupState.EMPTY:
            return E.NONE
        if request.generation_id >= 0 or request.member_id or request.group_instance_id is not None:
            error = group.member_error(request.member_id, request.group_instance_id)
            if error is not E.NONE:
                return error
            if request.generation_id != group.generation_id:
                return E.ILLEGAL_GENERATION
        return E.NONE

    def _held(self, request: TxnCommitRequest, results: CommitResults,
              accepted: dict[TopicPartition, OffsetCommitValue], respond: Callable[[CommitResults], None]) -> Done:
        def stored(failure: BaseException | None) -> None:
            if failure is not None:
                code = error_code(failure)
                log.warning("group %s: storing transactional offsets of producer %d failed: %s", request.group_id,
                            request.producer_id, failure)
                results.update({tp: _write_error(code) for tp in accepted})
            else:
                self._live_group(request.group_id)
                self._pending.add(request.producer_id, request.group_id, accepted, self._next_stamp())
            respond(results)
        return stored

    def complete_transaction(self, producer_id: int, in_partition: Callable[[str], bool], commit: bool) -> int:
        """The marker of ``producer_id``'s transaction reached a ``__consumer_offsets`` partition
        (its groups: those ``in_partition`` selects): on COMMIT its offsets there become the
        groups' committed offsets (but not one superseded by a later commit), on ABORT they are
        dropped. Returns the number of offsets made visible."""
        visible = self._pending.end(producer_id, in_partition, commit)
        for group_id, tp, value in visible:
            self._materialize(group_id, {tp: value}, None)
        return len(visible)

    def unstable_partitions(self, group_id: str) -> set[TopicPartition]:
        """Partitions of ``group_id`` with an offset held by an open transaction (OffsetFetch with
        ``require_stable`` answers UNSTABLE_OFFSET_COMMIT for them)."""
        return self._pending.pending_partitions(group_id)

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
                writing.append((group_id, _tombstones(group, self._pending.pending_partitions(group_id))))
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
                self._pending.drop_group(group_id)
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
        if not group.offsets and not self._pending.has_open_transactions(group.group_id):
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
                      if now - (emptied if emptied >= 0 else value.commit_timestamp) >= retention
                      and not self._pending.has_pending(group.group_id, tp))


def _tombstones(group: ClassicGroup, pending: set[TopicPartition]) -> list[StoreRecord]:
    """Tombstones of the group's committed offsets, of partitions only open transactions hold, and
    of the group."""
    records: list[StoreRecord] = [(encode_offset_commit_key(group.group_id, topic, partition), None)
                                  for topic, partition in sorted(set(group.offsets) | pending)]
    records.append((encode_group_metadata_key(group.group_id), None))
    return records
