"""Read-only views of classic groups for the admin APIs (DescribeGroups, ListGroups): what a
group shows of itself, computed from a :class:`~.group.ClassicGroup` without changing it.

Kafka's rules: a Dead group is unknown; members' metadata and assignments, and the protocol
name, are shown only while the group is Stable (mid-rebalance they are not yet agreed).

Not thread-safe: called on the event loop, like the coordinator that owns the groups. O(members).
"""

from __future__ import annotations

from collections.abc import Iterable

from tidelog.server.groups.group import ClassicGroup, GroupState
from tidelog.server.groups.messages import DescribedMember, GroupDescription, GroupListing


def describe_group(group: ClassicGroup | None) -> GroupDescription | None:
    """``group`` as DescribeGroups shows it; None for an unknown (None) or Dead group."""
    if group is None or group.state is GroupState.DEAD:
        return None
    stable = group.state is GroupState.STABLE
    protocol = group.protocol_name or ""
    members = tuple(DescribedMember(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                                    m.metadata(protocol) if stable else b"", m.assignment if stable else b"")
                    for m in group.members.values())
    return GroupDescription(group.group_id, group.state, group.protocol_type or "", protocol if stable else "",
                            members)


def group_listings(groups: Iterable[ClassicGroup]) -> list[GroupListing]:
    """The ListGroups entries of ``groups`` (Dead ones left out), in their order."""
    return [GroupListing(g.group_id, g.protocol_type or "", g.state) for g in groups if g.state is not GroupState.DEAD]
