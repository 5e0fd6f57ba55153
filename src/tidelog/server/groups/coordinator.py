"""The classic group coordinator: Kafka's rebalance protocol (JoinGroup, SyncGroup, Heartbeat,
LeaveGroup) and committed offsets, over the groups of :mod:`.group`.

One rebalance, as Kafka's ``GroupMetadataManager`` runs it for classic groups:

1. A JoinGroup (v4+, no member id, no ``group.instance.id``) is answered MEMBER_ID_REQUIRED with a
   fresh id (KIP-394); the member joins again with it. Its JoinGroup is then *parked* (the answer
   waits) and the group moves to PreparingRebalance. An empty group first waits
   ``group.initial.rebalance.delay.ms`` for more members, extended while new ones keep coming,
   within the rebalance timeout (Kafka's ``InitialDelayedJoin``); otherwise the join completes as
   soon as every known member has rejoined, or when the longest rebalance timeout of the members
   passes (members that did not rejoin are removed).
2. Completing the join bumps the generation, picks the protocol most members prefer among those
   all support, and answers every parked JoinGroup; the leader's answer lists the members with
   their subscriptions. The group is then CompletingRebalance (or Empty when nobody rejoined, with
   an empty GroupMetadata record written).
3. The leader's SyncGroup carries the assignment: it is written to ``__consumer_offsets`` as a
   GroupMetadata record, and once stored every parked SyncGroup is answered with its member's
   assignment and the group is Stable. Members that never sync within the rebalance timeout are
   removed and the group rebalances again.

Heartbeats keep a member for ``session.timeout.ms``; a member that misses it is removed (members
with a parked JoinGroup or SyncGroup are kept). Heartbeats answer REBALANCE_IN_PROGRESS while the
group prepares a rebalance, which is how members learn to rejoin.

Static members (``group.instance.id``, KIP-345) skip MEMBER_ID_REQUIRED; a rejoin with the same
instance id and no member id takes over the old member's place (the old id is then fenced:
FENCED_INSTANCE_ID), without a rebalance when the group is Stable and its protocol would not change.
A new member's parked JoinGroup is dropped after five minutes (Kafka's new-member join timeout).

Committed offsets, DeleteGroups and offsets expiration are the :class:`~.offset_manager.OffsetMetadataManager`'s;
session timers are :class:`~.sessions.MemberSessions`'; what DescribeGroups and ListGroups show
of a group is :mod:`.views`'. Writes go through a :class:`GroupStore` and
complete through a callback; the coordinator itself never blocks.

Threading: not thread-safe and takes no lock; every method runs on one thread (the server's event
loop). Timers come from the injected :class:`~tidelog.scheduler.Scheduler` and time from the
:class:`~tidelog.clock.Clock` (deadlines in monotonic ms), so tests drive it with
``FakeClock``/``FakeScheduler``.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace

from tidelog.clock import Clock
from tidelog.scheduler import Scheduler
from tidelog.server.errors import ErrorCode
from tidelog.server.groups.group import ClassicGroup, GroupState, Member
from tidelog.server.groups.messages import (
    CommitRequest,
    GroupConfig,
    GroupDescription,
    GroupListing,
    GroupStore,
    JoinedMember,
    JoinRequest,
    JoinResult,
    SyncRequest,
    SyncResult,
    TxnCommitRequest,
    log_failure,
)
from tidelog.server.groups.offset_manager import OffsetMetadataManager
from tidelog.server.groups.records import (
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitValue,
    encode_group_metadata_key,
    encode_group_metadata_value,
)
from tidelog.server.groups.sessions import MemberSessions
from tidelog.server.groups.txn_offsets import PendingTxnOffsets
from tidelog.server.groups.views import describe_group, group_listings

log = logging.getLogger(__name__)
E = ErrorCode
NEW_MEMBER_JOIN_TIMEOUT_MS = 5 * 60 * 1000  # Kafka's group.classic.new.member.join.timeout.ms


class GroupCoordinator:
    """Classic groups and their offsets (see the module doc). Single-threaded: no method is
    thread-safe and none takes a lock."""

    def __init__(self, config: GroupConfig, store: GroupStore, clock: Clock, scheduler: Scheduler) -> None:
        self._config = config
        self._store = store
        self._clock = clock
        self._scheduler = scheduler
        self._groups: dict[str, ClassicGroup] = {}
        self._sessions = MemberSessions(self._groups, clock, scheduler, self._maybe_prepare_rebalance,
                                        self._try_complete_join)
        self._offsets = OffsetMetadataManager(self._groups, config, store, clock, self._sessions.arm)

    def _wall(self) -> int:
        """Wall-clock ms: commit and state timestamps."""
        return self._clock.milliseconds()

    def _schedule(self, name: str, delay_ms: int, task: Callable[[], object]) -> None:
        self._scheduler.schedule_once(name, task, delay_ms)

    @property
    def config(self) -> GroupConfig:
        return self._config

    def group(self, group_id: str) -> ClassicGroup | None:
        """The group, for inspection (tests, gauges); never modify it."""
        return self._groups.get(group_id)

    def gauges(self) -> list[tuple[str, int]]:
        """``(state name, committed offsets)`` of every group, for the metrics endpoint. The one
        method safe from another thread: it copies the group map at once (atomic under the GIL)
        and reads two fields of each group; no lock."""
        return [(group.state.value, len(group.offsets)) for group in list(self._groups.values())]

    # --- loading ---------------------------------------------------------------------------------

    def load(self, groups: Mapping[str, GroupMetadataValue],
             offsets: Mapping[str, Mapping[tuple[str, int], OffsetCommitValue]]) -> None:
        """Restore what ``__consumer_offsets`` holds: a group with members comes back Stable in its
        generation (members keep their assignments and get a fresh session timeout), one without
        members Empty; groups known only by their offsets come back Empty."""
        for group_id, value in groups.items():
            self._groups[group_id] = self._restored(group_id, value)
        for group_id, committed in offsets.items():
            group = self._groups.setdefault(group_id, ClassicGroup(group_id, current_state_timestamp=self._wall()))
            group.offsets.update(committed)

    def _restored(self, group_id: str, value: GroupMetadataValue) -> ClassicGroup:
        group = ClassicGroup(group_id, generation_id=value.generation, protocol_type=value.protocol_type or None,
                             protocol_name=value.protocol, current_state_timestamp=value.current_state_timestamp)
        for m in value.members:
            group.add(Member(m.member_id, m.group_instance_id, m.client_id, m.client_host, m.rebalance_timeout,
                             m.session_timeout, value.protocol_type, ((value.protocol or "", m.subscription),),
                             assignment=m.assignment))
        group.leader_id = value.leader if value.leader in group.members else next(iter(group.members), None)
        group.state = GroupState.STABLE if group.members else GroupState.EMPTY
        for member in group.members.values():
            self._sessions.arm(group, member)
        return group

    # --- JoinGroup -------------------------------------------------------------------------------

    def join(self, request: JoinRequest, respond: Callable[[JoinResult], None]) -> None:
        """Answer ``request`` through ``respond``, now or when the rebalance completes."""
        error = self._check_join(request)
        group = self._groups.get(request.group_id)
        if error is E.NONE and group is None and request.member_id:
            error = E.UNKNOWN_MEMBER_ID
        if error is E.NONE and group is not None and group.state is GroupState.DEAD:
            error = E.COORDINATOR_NOT_AVAILABLE
        if error is E.NONE and group is not None and not group.supports(request.protocol_type,
                                                                          [n for n, _ in request.protocols]):
            error = E.INCONSISTENT_GROUP_PROTOCOL
        if error is not E.NONE:
            respond(JoinResult(error, request.member_id))
            return
        if group is None:
            group = self._groups[request.group_id] = ClassicGroup(request.group_id,
                                                                  current_state_timestamp=self._wall())
        if request.group_instance_id is not None:
            self._join_static(group, request, respond)
        elif not request.member_id:
            self._join_new(group, request, respond)
        else:
            self._join_known(group, request, respond)

    def _check_join(self, request: JoinRequest) -> ErrorCode:
        if not request.group_id:
            return E.INVALID_GROUP_ID
        if not self._config.min_session_timeout_ms <= request.session_timeout_ms <= self._config.max_session_timeout_ms:
            return E.INVALID_SESSION_TIMEOUT
        return E.NONE

    def _join_new(self, group: ClassicGroup, request: JoinRequest, respond: Callable[[JoinResult], None]) -> None:
        if len(group.members) + len(group.pending_members) >= self._config.max_size:
            respond(JoinResult(E.GROUP_MAX_SIZE_REACHED))
            return
        member_id = f"{request.client_id}-{uuid.uuid4()}"
        if request.require_known_member_id:
            self._sessions.add_pending(group, member_id, request.session_timeout_ms)
            respond(JoinResult(E.MEMBER_ID_REQUIRED, member_id))
            return
        self._add_and_rebalance(group, member_id, request, respond)

    def _join_known(self, group: ClassicGroup, request: JoinRequest, respond: Callable[[JoinResult], None]) -> None:
        if request.member_id in group.pending_members:
            self._add_and_rebalance(group, request.member_id, request, respond)
            return
        member = group.members.get(request.member_id)
        if member is None or group.is_in(GroupState.EMPTY, GroupState.DEAD):
            respond(JoinResult(E.UNKNOWN_MEMBER_ID, request.member_id))
            return
        if member.group_instance_id is not None:
            respond(JoinResult(E.FENCED_INSTANCE_ID, request.member_id))
            return
        self._rejoin(group, member, request, respond)

    def _rejoin(self, group: ClassicGroup, member: Member, request: JoinRequest,
                respond: Callable[[JoinResult], None]) -> None:
        """A member of the group joins again: answered at once with the current generation when
        nothing changed and no rebalance runs (Kafka's rule), else (re)balance."""
        unchanged = member.same_protocols(request.protocols)
        if group.state is GroupState.COMPLETING_REBALANCE and unchanged:
            self._sessions.arm(group, member)
            respond(self._join_result(group, member))
        elif group.state is GroupState.STABLE and unchanged and not group.is_leader(member.member_id):
            self._sessions.arm(group, member)
            respond(self._join_result(group, member))
        else:
            self._update_and_rebalance(group, member, request, respond)

    def _join_static(self, group: ClassicGroup, request: JoinRequest, respond: Callable[[JoinResult], None]) -> None:
        instance_id = request.group_instance_id or ""
        known = group.static_members.get(instance_id)
        if known is None:
            if request.member_id:
                respond(JoinResult(E.UNKNOWN_MEMBER_ID, request.member_id))
            elif len(group.members) + len(group.pending_members) >= self._config.max_size:
                respond(JoinResult(E.GROUP_MAX_SIZE_REACHED))
            else:
                self._add_and_rebalance(group, f"{instance_id}-{uuid.uuid4()}", request, respond)
        elif not request.member_id:
            self._replace_static(group, known, request, respond)
        elif request.member_id != known:
            respond(JoinResult(E.FENCED_INSTANCE_ID, request.member_id))
        else:
            self._rejoin(group, group.members[known], request, respond)

    def _replace_static(self, group: ClassicGroup, old_id: str, request: JoinRequest,
                        respond: Callable[[JoinResult], None]) -> None:
        """A static member restarted (Kafka's ``updateStaticMemberThenRebalanceOrCompleteJoin``):
        its old member id is fenced and a new one takes its place. In a Stable group whose protocol
        would not change, no rebalance: the replacement is stored and the member gets the current
        generation back (its leader skips the assignment, v9+); otherwise the group rebalances."""
        old_leader = group.leader_id
        self._fence(group.members[old_id])
        member = group.replace_member(old_id, f"{request.group_instance_id}-{uuid.uuid4()}")
        before = (member.protocols, member.rebalance_timeout_ms, member.session_timeout_ms)
        self._update_member(member, request, respond)
        self._sessions.arm(group, member)
        if group.state is GroupState.STABLE and group.select_protocol() == group.protocol_name:
            self._store_static_replacement(group, member, old_id, old_leader, before, request.supports_skip_assignment)
        elif group.state is GroupState.COMPLETING_REBALANCE:
            self._prepare_rebalance(group)
        else:
            self._maybe_prepare_rebalance(group)

    def _store_static_replacement(self, group: ClassicGroup, member: Member, old_id: str, old_leader: str | None,
                                  before: tuple[tuple[tuple[str, bytes], ...], int, int], skip: bool) -> None:
        new_id, generation, group_id = member.member_id, group.generation_id, group.group_id

        def stored(failure: BaseException | None) -> None:
            answer, member.awaiting_join = member.awaiting_join, None
            if answer is None or group.members.get(new_id) is not member:
                return
            if failure is not None:  # put the old member back, as Kafka does
                log.warning("group %s: storing static member %s failed: %s", group_id, new_id, failure)
                group.replace_member(new_id, old_id)
                member.protocols, member.rebalance_timeout_ms, member.session_timeout_ms = before
                self._sessions.arm(group, member)
                answer(JoinResult(E.COORDINATOR_NOT_AVAILABLE, "", generation, group.protocol_type,
                                  group.protocol_name, old_leader or ""))
                return
            result = self._join_result(group, member)
            if skip:
                answer(replace(result, skip_assignment=group.is_leader(new_id)))
            else:  # an older client must not run the assignment: it is told the old leader id
                answer(replace(result, members=(), leader_id=old_leader or ""))

        assignments = {m.member_id: m.assignment for m in group.members.values()}
        self._store.write(group_id, [self._group_record(group, assignments)], stored)

    @staticmethod
    def _fence(member: Member) -> None:
        if member.awaiting_join is not None:
            member.awaiting_join, answer = None, member.awaiting_join
            answer(JoinResult(E.FENCED_INSTANCE_ID, member.member_id))
        if member.awaiting_sync is not None:
            member.awaiting_sync, answer = None, member.awaiting_sync
            answer(SyncResult(E.FENCED_INSTANCE_ID))

    def _add_and_rebalance(self, group: ClassicGroup, member_id: str, request: JoinRequest,
                           respond: Callable[[JoinResult], None]) -> None:
        member = Member(member_id, request.group_instance_id, request.client_id, request.client_host,
                        request.rebalance_timeout_ms, request.session_timeout_ms, request.protocol_type,
                        request.protocols, awaiting_join=respond, is_new=True)
        group.add(member)
        group.new_member_added = True
        self._sessions.arm(group, member, NEW_MEMBER_JOIN_TIMEOUT_MS)
        self._maybe_prepare_rebalance(group)

    def _update_and_rebalance(self, group: ClassicGroup, member: Member, request: JoinRequest,
                              respond: Callable[[JoinResult], None]) -> None:
        self._update_member(member, request, respond)
        self._sessions.arm(group, member)
        self._maybe_prepare_rebalance(group)

    @staticmethod
    def _update_member(member: Member, request: JoinRequest, respond: Callable[[JoinResult], None]) -> None:
        """Take the JoinGroup's protocols and timeouts; park its answer (a retried JoinGroup
        replaces the parked one, which is answered REBALANCE_IN_PROGRESS)."""
        if member.awaiting_join is not None:
            member.awaiting_join(JoinResult(E.REBALANCE_IN_PROGRESS, member.member_id))
        member.protocols = request.protocols
        member.rebalance_timeout_ms = request.rebalance_timeout_ms
        member.session_timeout_ms = request.session_timeout_ms
        member.awaiting_join = respond

    def _join_result(self, group: ClassicGroup, member: Member) -> JoinResult:
        protocol = group.protocol_name or ""
        members = tuple(JoinedMember(m.member_id, m.group_instance_id, m.metadata(protocol))
                        for m in group.members.values()) if group.is_leader(member.member_id) else ()
        return JoinResult(E.NONE, member.member_id, group.generation_id, group.protocol_type, group.protocol_name,
                          group.leader_id or "", members)

    # --- rebalancing -----------------------------------------------------------------------------

    def _maybe_prepare_rebalance(self, group: ClassicGroup) -> None:
        if group.is_in(GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY):
            self._prepare_rebalance(group)
        elif group.state is GroupState.PREPARING_REBALANCE:
            self._try_complete_join(group)

    def _prepare_rebalance(self, group: ClassicGroup) -> None:
        if group.state is GroupState.COMPLETING_REBALANCE:
            self._fail_pending_syncs(group, E.REBALANCE_IN_PROGRESS)
        was_empty = group.state is GroupState.EMPTY
        group.transition(GroupState.PREPARING_REBALANCE, self._wall())
        group.pending_sync.clear()
        group.rebalance_token += 1
        token, group_id = group.rebalance_token, group.group_id
        timeout = group.rebalance_timeout_ms()
        delay = self._config.initial_rebalance_delay_ms
        if was_empty and delay > 0:
            group.initial_delay = True
            group.new_member_added = False
            first = min(delay, timeout)
            self._schedule(f"initial-join-{group_id}", first,
                           lambda: self._initial_join_due(group_id, token, max(timeout - delay, 0)))
            return
        group.initial_delay = False
        self._schedule(f"join-{group_id}", timeout, lambda: self._join_due(group_id, token))
        self._try_complete_join(group)

    def _fail_pending_syncs(self, group: ClassicGroup, error: ErrorCode) -> None:
        for member in group.members.values():
            member.assignment = b""
            if member.awaiting_sync is not None:
                member.awaiting_sync, answer = None, member.awaiting_sync
                answer(SyncResult(error))

    def _initial_join_due(self, group_id: str, token: int, remaining_ms: int) -> None:
        """Kafka's ``InitialDelayedJoin``: wait again while new members keep joining."""
        group = self._groups.get(group_id)
        if group is None or group.rebalance_token != token or group.state is not GroupState.PREPARING_REBALANCE:
            return
        if group.new_member_added and remaining_ms > 0:
            group.new_member_added = False
            delay = min(self._config.initial_rebalance_delay_ms, remaining_ms)
            self._schedule(f"initial-join-{group_id}", delay,
                           lambda: self._initial_join_due(group_id, token, max(remaining_ms - delay, 0)))
            return
        group.initial_delay = False
        self._complete_join(group)

    def _join_due(self, group_id: str, token: int) -> None:
        group = self._groups.get(group_id)
        if group is not None and group.rebalance_token == token and group.state is GroupState.PREPARING_REBALANCE:
            self._complete_join(group)

    def _try_complete_join(self, group: ClassicGroup) -> None:
        if group.state is GroupState.PREPARING_REBALANCE and not group.initial_delay and group.all_joined():
            self._complete_join(group)

    def _complete_join(self, group: ClassicGroup) -> None:
        """End the join phase: drop members that did not rejoin, start the next generation."""
        group.rebalance_token += 1
        for member in [m for m in group.members.values() if m.awaiting_join is None]:
            group.remove(member.member_id)
            member.heartbeat_token += 1
        group.generation_id += 1
        if not group.members:
            group.protocol_name = None
            group.leader_id = None
            group.transition(GroupState.EMPTY, self._wall())
            self._store.write(group.group_id, [self._group_record(group, {})], log_failure(group.group_id))
            return
        group.protocol_name = group.select_protocol()
        group.transition(GroupState.COMPLETING_REBALANCE, self._wall())
        group.pending_sync = set(group.members)
        for member in list(group.members.values()):
            answer, member.awaiting_join = member.awaiting_join, None
            member.is_new = False
            self._sessions.arm(group, member)
            if answer is not None:
                answer(self._join_result(group, member))
        generation, group_id = group.generation_id, group.group_id
        self._schedule(f"sync-{group_id}", group.rebalance_timeout_ms(), lambda: self._sync_due(group_id, generation))

    def _sync_due(self, group_id: str, generation: int) -> None:
        """Members that did not send SyncGroup within the rebalance timeout are removed."""
        group = self._groups.get(group_id)
        if group is None or group.generation_id != generation or not group.pending_sync:
            return
        if not group.is_in(GroupState.COMPLETING_REBALANCE, GroupState.STABLE):
            return
        for member_id in list(group.pending_sync):
            self._sessions.drop(group, member_id)
        self._maybe_prepare_rebalance(group)

    # --- SyncGroup -------------------------------------------------------------------------------

    def sync(self, request: SyncRequest, respond: Callable[[SyncResult], None]) -> None:
        """Answer ``request`` now, or (CompletingRebalance) once the leader's assignment is stored."""
        group = self._groups.get(request.group_id)
        error = self._check_sync(group, request)
        if error is not E.NONE or group is None:
            respond(SyncResult(error))
            return
        member = group.members[request.member_id]
        if group.state is GroupState.PREPARING_REBALANCE:
            respond(SyncResult(E.REBALANCE_IN_PROGRESS))
        elif group.state is GroupState.STABLE:
            group.pending_sync.discard(member.member_id)
            self._sessions.arm(group, member)
            respond(SyncResult(E.NONE, group.protocol_type, group.protocol_name, member.assignment))
        elif group.state is GroupState.COMPLETING_REBALANCE:
            group.pending_sync.discard(member.member_id)
            member.awaiting_sync = respond
            self._sessions.arm(group, member)
            if group.is_leader(member.member_id):
                self._store_assignment(group, request.assignments)
        else:
            respond(SyncResult(E.UNKNOWN_MEMBER_ID))

    def _check_sync(self, group: ClassicGroup | None, request: SyncRequest) -> ErrorCode:
        if not request.group_id:
            return E.INVALID_GROUP_ID
        if group is None:
            return E.UNKNOWN_MEMBER_ID
        if group.state is GroupState.DEAD:
            return E.COORDINATOR_NOT_AVAILABLE
        error = group.member_error(request.member_id, request.group_instance_id)
        if error is not E.NONE:
            return error
        if request.generation_id != group.generation_id:
            return E.ILLEGAL_GENERATION
        if ((request.protocol_type is not None and request.protocol_type != group.protocol_type)
                or (request.protocol_name is not None and request.protocol_name != group.protocol_name)):
            return E.INCONSISTENT_GROUP_PROTOCOL
        return E.NONE

    def _store_assignment(self, group: ClassicGroup, given: Mapping[str, bytes]) -> None:
        assignments = {member_id: given.get(member_id, b"") for member_id in group.members}
        generation, group_id = group.generation_id, group.group_id
        self._store.write(group_id, [self._group_record(group, assignments)],
                          lambda error: self._assignment_stored(group_id, generation, assignments, error))

    def _assignment_stored(self, group_id: str, generation: int, assignments: Mapping[str, bytes],
                           error: BaseException | None) -> None:
        group = self._groups.get(group_id)
        if group is None or group.generation_id != generation or group.state is not GroupState.COMPLETING_REBALANCE:
            return
        if error is not None:
            log.warning("group %s: storing the assignment of generation %d failed: %s", group_id, generation, error)
            self._fail_pending_syncs(group, E.COORDINATOR_NOT_AVAILABLE)
            self._prepare_rebalance(group)
            return
        for member in group.members.values():
            member.assignment = assignments.get(member.member_id, b"")
            if member.awaiting_sync is not None:
                member.awaiting_sync, answer = None, member.awaiting_sync
                self._sessions.arm(group, member)
                answer(SyncResult(E.NONE, group.protocol_type, group.protocol_name, member.assignment))
        group.transition(GroupState.STABLE, self._wall())

    def _group_record(self, group: ClassicGroup, assignments: Mapping[str, bytes]) -> tuple[bytes, bytes]:
        protocol = group.protocol_name or ""
        members = tuple(MemberMetadata(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                                       m.rebalance_timeout_ms, m.session_timeout_ms, m.metadata(protocol),
                                       assignments.get(m.member_id, b""))
                        for m in group.members.values()) if assignments else ()
        value = GroupMetadataValue(group.protocol_type or "", group.generation_id,
                                   group.protocol_name if members else None, group.leader_id if members else None,
                                   group.current_state_timestamp, members)
        return encode_group_metadata_key(group.group_id), encode_group_metadata_value(value)

    # --- Heartbeat and sessions ------------------------------------------------------------------

    def heartbeat(self, group_id: str, member_id: str, group_instance_id: str | None, generation_id: int) -> ErrorCode:
        """Keep ``member_id`` alive; REBALANCE_IN_PROGRESS tells it to rejoin."""
        group = self._groups.get(group_id)
        if not group_id:
            return E.INVALID_GROUP_ID
        if group is None or group.state is GroupState.EMPTY:
            return E.UNKNOWN_MEMBER_ID
        if group.state is GroupState.DEAD:
            return E.COORDINATOR_NOT_AVAILABLE
        error = group.member_error(member_id, group_instance_id)
        if error is not E.NONE:
            return error
        if generation_id != group.generation_id:
            return E.ILLEGAL_GENERATION
        self._sessions.arm(group, group.members[member_id])
        return E.REBALANCE_IN_PROGRESS if group.state is GroupState.PREPARING_REBALANCE else E.NONE

    # --- LeaveGroup ------------------------------------------------------------------------------

    def leave(self, group_id: str, members: Iterable[tuple[str, str | None]]) -> tuple[ErrorCode, list[ErrorCode]]:
        """Remove each (member id, group instance id); the top-level error and one per member."""
        group = self._groups.get(group_id)
        wanted = list(members)
        if not group_id:
            return E.INVALID_GROUP_ID, [E.INVALID_GROUP_ID] * len(wanted)
        if group is None:
            return E.UNKNOWN_MEMBER_ID, [E.UNKNOWN_MEMBER_ID] * len(wanted)
        if group.state is GroupState.DEAD:
            return E.COORDINATOR_NOT_AVAILABLE, [E.COORDINATOR_NOT_AVAILABLE] * len(wanted)
        errors = [self._leave_one(group, member_id, instance_id) for member_id, instance_id in wanted]
        if E.NONE in errors and group.state is not GroupState.EMPTY:
            self._maybe_prepare_rebalance(group)
        return E.NONE, errors

    def _leave_one(self, group: ClassicGroup, member_id: str, instance_id: str | None) -> ErrorCode:
        if instance_id is not None:
            known = group.static_members.get(instance_id)
            if known is None:
                return E.UNKNOWN_MEMBER_ID
            if member_id and member_id != known:
                return E.FENCED_INSTANCE_ID
            member_id = known
        if member_id in group.pending_members:
            del group.pending_members[member_id]
            return E.NONE
        if member_id not in group.members:
            return E.UNKNOWN_MEMBER_ID
        self._sessions.drop(group, member_id)
        return E.NONE

    # --- admin -----------------------------------------------------------------------------------

    def describe(self, group_id: str) -> GroupDescription | None:
        """None for an unknown group (:func:`.views.describe_group`)."""
        return describe_group(self._groups.get(group_id))

    def list_groups(self) -> list[GroupListing]:
        return group_listings(self._groups.values())

    # --- offsets (the OffsetMetadataManager's) ---------------------------------------------------

    def commit_offsets(self, request: CommitRequest, respond: Callable[[dict[tuple[str, int], ErrorCode]], None]) -> None:
        """Store ``request.offsets``; ``respond`` gets one error per partition once written."""
        self._offsets.commit_offsets(request, respond)

    def fetch_offsets(self, group_id: str, partitions: Iterable[tuple[str, int]] | None
                      ) -> dict[tuple[str, int], OffsetCommitValue | None]:
        """Committed offsets of ``partitions`` (None: every partition with one); None where none is."""
        return self._offsets.fetch_offsets(group_id, partitions)

    def delete_groups(self, group_ids: list[str], respond: Callable[[dict[str, ErrorCode]], None]) -> None:
        """Delete empty groups (tombstones for the group and its offsets); one error per id."""
        self._offsets.delete_groups(group_ids, respond)

    def expire_offsets(self) -> int:
        """Expire the offsets of empty groups past ``offsets.retention.minutes`` (see
        :meth:`.OffsetMetadataManager.expire_offsets`); the number expired."""
        return self._offsets.expire_offsets()

    # --- transactional offsets (the OffsetMetadataManager's) ------------------------------------

    def load_pending(self, pending: PendingTxnOffsets, last_stamp: int) -> None:
        """Restore the offsets of transactions still open in ``__consumer_offsets`` (after :meth:`load`)."""
        self._offsets.load_pending(pending, last_stamp)

    def commit_transactional_offsets(self, request: TxnCommitRequest,
                                     respond: Callable[[dict[tuple[str, int], ErrorCode]], None]) -> None:
        """Hold ``request.offsets`` for the producer's transaction; one error per partition once written."""
        self._offsets.commit_transactional_offsets(request, respond)

    def complete_transaction(self, producer_id: int, in_partition: Callable[[str], bool], commit: bool) -> int:
        """A marker of ``producer_id`` for the groups ``in_partition`` selects: commit or drop
        their pending offsets (see :meth:`.OffsetMetadataManager.complete_transaction`)."""
        return self._offsets.complete_transaction(producer_id, in_partition, commit)

    def unstable_partitions(self, group_id: str) -> set[tuple[str, int]]:
        """Partitions of ``group_id`` with an offset held by an open transaction."""
        return self._offsets.unstable_partitions(group_id)

    @property
    def pending_offsets(self) -> PendingTxnOffsets:
        """The open transactions' offsets, for inspection (tests); never modify it."""
        return self._offsets.pending
