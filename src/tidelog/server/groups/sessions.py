"""Member sessions of the classic groups: the heartbeat deadline of each member and the
deadline of each pending member (one that was answered MEMBER_ID_REQUIRED and has not joined yet).

A member is kept for its ``session.timeout.ms`` after its last heartbeat (or a JoinGroup,
SyncGroup or OffsetCommit that counts as one); a member with a parked JoinGroup or SyncGroup is
kept alive (Kafka's ``shouldKeepAlive``), except a new member whose JoinGroup has waited its whole
new-member join timeout. Timers come from the injected :class:`~tidelog.scheduler.Scheduler` and
deadlines are monotonic ms from the :class:`~tidelog.clock.Clock`; a timer that fires early is re-armed.

Threading: not thread-safe and takes no lock; every method runs on the coordinator's thread.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from tidelog.clock import Clock
from tidelog.scheduler import Scheduler
from tidelog.server.errors import ErrorCode
from tidelog.server.groups.group import ClassicGroup, GroupState, Member
from tidelog.server.groups.messages import JoinResult, SyncResult

log = logging.getLogger("tidelog.server.groups.coordinator")
GroupCallback = Callable[[ClassicGroup], None]


class MemberSessions:
    """Session and pending-member timers over ``groups`` (a dict shared with the coordinator).

    ``expired(group)`` is called after a member was removed for a missed session;
    ``pending_gone(group)`` after a pending member of a rebalancing group timed out.
    Single-threaded: not thread-safe, takes no lock.
    """

    def __init__(self, groups: dict[str, ClassicGroup], clock: Clock, scheduler: Scheduler,
                 expired: GroupCallback, pending_gone: GroupCallback) -> None:
        self._groups = groups
        self._clock = clock
        self._scheduler = scheduler
        self._expired = expired
        self._pending_gone = pending_gone

    def _now(self) -> int:
        """Monotonic ms: deadlines."""
        return self._clock.nanoseconds() // 1_000_000

    def _schedule(self, name: str, delay_ms: int, task: Callable[[], object]) -> None:
        self._scheduler.schedule_once(name, task, delay_ms)

    # --- members ---------------------------------------------------------------------------------

    def arm(self, group: ClassicGroup, member: Member, timeout_ms: int | None = None) -> None:
        """The member is alive now and until ``timeout_ms`` (its session timeout by default) passes."""
        timeout = member.session_timeout_ms if timeout_ms is None else timeout_ms
        member.heartbeat_deadline = self._now() + timeout
        member.heartbeat_token += 1
        self._schedule_expiry(group.group_id, member.member_id, member.heartbeat_token, timeout)

    def _schedule_expiry(self, group_id: str, member_id: str, token: int, delay_ms: int) -> None:
        self._schedule(f"heartbeat-{member_id}", delay_ms, lambda: self._heartbeat_due(group_id, member_id, token))

    def _heartbeat_due(self, group_id: str, member_id: str, token: int) -> None:
        group = self._groups.get(group_id)
        member = group.members.get(member_id) if group is not None else None
        if group is None or member is None or member.heartbeat_token != token:
            return
        remaining = member.heartbeat_deadline - self._now()
        if remaining > 0:  # a timer that fired early (another clock than ours)
            self._schedule_expiry(group_id, member_id, token, remaining)
        elif (member.awaiting_join is not None and not member.is_new) or member.awaiting_sync is not None:
            self.arm(group, member)  # parked requests keep a member alive (Kafka's shouldKeepAlive)
        else:  # its session ran out, or (a new member) its JoinGroup waited its new-member join timeout
            log.info("group %s: member %s removed, its session timed out", group_id, member_id)
            self.drop(group, member_id)
            self._expired(group)

    def drop(self, group: ClassicGroup, member_id: str) -> None:
        """Remove a member, answering its parked requests with UNKNOWN_MEMBER_ID."""
        member = group.remove(member_id)
        if member is None:
            return
        member.heartbeat_token += 1
        if member.awaiting_join is not None:
            member.awaiting_join, answer = None, member.awaiting_join
            answer(JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, member_id))
        if member.awaiting_sync is not None:
            member.awaiting_sync, answer_sync = None, member.awaiting_sync
            answer_sync(SyncResult(ErrorCode.UNKNOWN_MEMBER_ID))

    # --- pending members -------------------------------------------------------------------------

    def add_pending(self, group: ClassicGroup, member_id: str, session_timeout_ms: int) -> None:
        """``member_id`` was handed out (MEMBER_ID_REQUIRED); it may join within ``session_timeout_ms``."""
        group.pending_members[member_id] = self._now() + session_timeout_ms
        self._schedule(f"pending-member-{member_id}", session_timeout_ms,
                       lambda: self._pending_expired(group.group_id, member_id))

    def _pending_expired(self, group_id: str, member_id: str) -> None:
        group = self._groups.get(group_id)
        if group is None or member_id not in group.pending_members:
            return
        remaining = group.pending_members[member_id] - self._now()
        if remaining > 0:
            self._schedule(f"pending-member-{member_id}", remaining, lambda: self._pending_expired(group_id, member_id))
            return
        del group.pending_members[member_id]
        if group.state is GroupState.PREPARING_REBALANCE:
            self._pending_gone(group)
