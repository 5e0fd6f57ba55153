"""A classic consumer group (Kafka's ``ClassicGroup``): its members, generation, chosen protocol,
committed offsets and state.

States and the moves between them (Kafka's ``ClassicGroupState``)::

    Empty --join--> PreparingRebalance --all joined / rebalance timeout--> CompletingRebalance
    CompletingRebalance --leader's SyncGroup stored--> Stable
    Stable / CompletingRebalance --join with new metadata, leave, expiry--> PreparingRebalance
    PreparingRebalance --nobody rejoined--> Empty
    Empty --DeleteGroups--> Dead

This module holds data and pure decisions only (protocol selection, who may join); the
:class:`~tidelog.server.groups.coordinator.GroupCoordinator` drives the transitions and the timers.
Event-loop only, like the coordinator.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from tidelog.server.errors import ErrorCode
from tidelog.server.groups.records import OffsetCommitValue


class GroupState(Enum):
    """Kafka's classic group states; the value is the name DescribeGroups and ListGroups report."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(eq=False, slots=True)
class Member:
    """One member of a classic group. ``protocols`` is its (name, metadata) list in preference order.

    ``awaiting_join`` / ``awaiting_sync`` are the callbacks of its parked JoinGroup / SyncGroup, if
    any. ``heartbeat_deadline`` is monotonic ms; ``heartbeat_token`` tells the latest expiry timer
    from stale ones. ``is_new``: joined but not yet through a completed rebalance."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    assignment: bytes = b""
    awaiting_join: Callable[[Any], None] | None = None
    awaiting_sync: Callable[[Any], None] | None = None
    heartbeat_deadline: int = 0
    heartbeat_token: int = 0
    is_new: bool = False

    def metadata(self, protocol: str) -> bytes:
        """Its subscription for ``protocol`` (empty when it does not offer it)."""
        return next((data for name, data in self.protocols if name == protocol), b"")

    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def same_protocols(self, protocols: tuple[tuple[str, bytes], ...]) -> bool:
        return self.protocols == protocols

    def vote(self, candidates: set[str]) -> str:
        """Its most preferred protocol among ``candidates`` (Kafka's ``ClassicGroupMember.vote``)."""
        return next(name for name in self.protocol_names() if name in candidates)


@dataclass(eq=False, slots=True)
class ClassicGroup:
    """A classic group. ``offsets`` are its committed offsets by (topic, partition);
    ``pending_members`` are member ids handed out with MEMBER_ID_REQUIRED, not yet joined
    (value: their expiry deadline, monotonic ms)."""

    group_id: str
    state: GroupState = GroupState.EMPTY
    generation_id: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    current_state_timestamp: int = -1
    members: dict[str, Member] = field(default_factory=dict)
    pending_members: dict[str, int] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)
    pending_sync: set[str] = field(default_factory=set)
    offsets: dict[tuple[str, int], OffsetCommitValue] = field(default_factory=dict)
    rebalance_token: int = 0
    new_member_added: bool = False
    initial_delay: bool = False

    def is_in(self, *states: GroupState) -> bool:
        return self.state in states

    def transition(self, state: GroupState, now_wall_ms: int) -> None:
        self.state = state
        self.current_state_timestamp = now_wall_ms

    def add(self, member: Member) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.pending_members.pop(member.member_id, None)

    def remove(self, member_id: str) -> Member | None:
        member = self.members.pop(member_id, None)
        self.pending_sync.discard(member_id)
        if member is None:
            return None
        if member.group_instance_id is not None and self.static_members.get(member.group_instance_id) == member_id:
            del self.static_members[member.group_instance_id]
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        return member

    def replace_member(self, old_id: str, new_id: str) -> Member:
        """Give member ``old_id`` the id ``new_id`` (a static member rejoining: Kafka's
        ``replaceStaticMember``); it keeps its place as leader and its assignment."""
        member = self.members.pop(old_id)
        member.member_id = new_id
        self.members[new_id] = member
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = new_id
        if self.leader_id == old_id:
            self.leader_id = new_id
        if old_id in self.pending_sync:
            self.pending_sync.discard(old_id)
            self.pending_sync.add(new_id)
        return member

    def rebalance_timeout_ms(self) -> int:
        """The longest rebalance timeout of its members (Kafka's rule for the join wait)."""
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def all_joined(self) -> bool:
        """Every member has a JoinGroup parked and no MEMBER_ID_REQUIRED member is still to come."""
        return all(m.awaiting_join is not None for m in self.members.values()) and not self.pending_members

    def supports(self, protocol_type: str, names: list[str]) -> bool:
        """Whether a member offering ``names`` of ``protocol_type`` may join (Kafka's
        ``supportsProtocols``): an empty group takes any non-empty offer, else the type must match
        and one name must be offered by every member."""
        if not self.members:
            return bool(protocol_type) and bool(names)
        return protocol_type == self.protocol_type and bool(self.candidates() & set(names))

    def candidates(self) -> set[str]:
        """Protocols every member offers."""
        sets = [set(m.protocol_names()) for m in self.members.values()]
        return set.intersection(*sets) if sets else set()

    def select_protocol(self) -> str:
        """The common protocol with most first-choice votes (ties: the leader's preference order)."""
        candidates = self.candidates()
        votes: dict[str, int] = {}
        for member in self.members.values():
            choice = member.vote(candidates)
            votes[choice] = votes.get(choice, 0) + 1
        best = max(votes.values())
        leader = self.members.get(self.leader_id or "") or next(iter(self.members.values()))
        return next(name for name in leader.protocol_names() if votes.get(name) == best)

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    def member_error(self, member_id: str, group_instance_id: str | None) -> ErrorCode:
        """UNKNOWN_MEMBER_ID / FENCED_INSTANCE_ID unless ``member_id`` (with its instance id) is a member."""
        if group_instance_id is not None:
            known = self.static_members.get(group_instance_id)
            if known is None:
                return ErrorCode.UNKNOWN_MEMBER_ID
            if known != member_id:
                return ErrorCode.FENCED_INSTANCE_ID
        return ErrorCode.NONE if member_id in self.members else ErrorCode.UNKNOWN_MEMBER_ID
