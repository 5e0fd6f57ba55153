"""The group APIs over the wire, field by field, with a raw client: FindCoordinator key types and
batched keys, JoinGroup's MEMBER_ID_REQUIRED round, LeaveGroup's batched members, OffsetCommit to
unknown topics, OffsetFetch of several groups and of everything, DescribeGroups of unknown groups
per version, ListGroups filters."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from kafka.protocol.admin import DescribeGroupsRequest, DescribeGroupsResponse, ListGroupsRequest, ListGroupsResponse
from kafka.protocol.consumer import (
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    SyncGroupResponse,
)
from kafka.protocol.metadata import FindCoordinatorResponse

import server_samples as samples
from server_helpers import Broker, RawClient
from tidelog.server.groups.records import OFFSETS_TOPIC


@pytest.fixture
def broker(make_broker: Callable[..., Broker]) -> Broker:
    made = make_broker(**{"group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "2"})
    made.manager.create_topic("t", 2)
    return made


def _stable_member(client: RawClient, group: str) -> samples.GroupMember:
    first = client.call(samples.join_group(group), JoinGroupResponse, 9)
    joined = client.call(samples.join_group(group, first.member_id), JoinGroupResponse, 9)
    member = samples.GroupMember(group, joined.member_id, joined.generation_id)
    client.call(samples.sync_group(member, {member.member_id: b"x"}), SyncGroupResponse, 5)
    return member


def test_find_coordinator_names_this_broker_for_groups_and_creates_the_offsets_topic(broker: Broker) -> None:
    client = broker.connect()
    batched = client.call(samples.find_coordinator("a", 6), FindCoordinatorResponse, 6)
    assert [(c.key, c.node_id, c.port, c.error_code) for c in batched.coordinators] == [("a", 1, broker.port, 0)]
    assert broker.manager.partitions(OFFSETS_TOPIC) == [0, 1]
    transaction = client.call(samples.find_coordinator("tx", 3, key_type=1), FindCoordinatorResponse, 3)
    assert (transaction.error_code, transaction.node_id, transaction.port) == (0, 1, broker.port)  # the txn coordinator
    share = client.call(samples.find_coordinator("s:x:0", 6, key_type=2), FindCoordinatorResponse, 6)
    assert share.coordinators[0].error_code == 42  # INVALID_REQUEST


def test_join_v4_needs_a_member_id_first_but_v3_joins_at_once(broker: Broker) -> None:
    client = broker.connect()
    first = client.call(samples.join_group("g"), JoinGroupResponse, 4)
    assert (first.error_code, first.generation_id) == (79, -1) and first.member_id.startswith("raw-")
    old = client.call(samples.join_group("old"), JoinGroupResponse, 3)
    assert (old.error_code, old.generation_id, old.leader) == (0, 1, old.member_id)
    assert [(m.member_id, m.metadata) for m in old.members] == [(old.member_id, b"sub")]


def test_leave_group_v3_answers_per_member(broker: Broker) -> None:
    client = broker.connect()
    member = _stable_member(client, "g")
    M = LeaveGroupRequest.MemberIdentity
    response = client.call(LeaveGroupRequest(group_id="g", members=[
        M(member_id=member.member_id, group_instance_id=None, reason=None),
        M(member_id="ghost", group_instance_id=None, reason=None),
        M(member_id="", group_instance_id="nobody", reason=None)]), LeaveGroupResponse, 5)
    assert response.error_code == 0
    assert [(m.member_id, m.error_code) for m in response.members] == [(member.member_id, 0), ("ghost", 25), ("", 25)]
    unknown = client.call(samples.leave_group(samples.GroupMember("nope", "x", 1), 1), LeaveGroupResponse, 1)
    assert unknown.error_code == 25  # UNKNOWN_MEMBER_ID


def test_offset_commit_to_an_unknown_topic_and_fetch_of_several_groups(broker: Broker) -> None:
    client = broker.connect()
    outsider = samples.GroupMember("a", "", -1)
    committed = client.call(samples.offset_commit(outsider, "t", {0: 7, 1: 8}, "m"), OffsetCommitResponse, 9)
    assert [(p.partition_index, p.error_code) for p in committed.topics[0].partitions] == [(0, 0), (1, 0)]
    unknown = client.call(samples.offset_commit(outsider, "missing", {0: 1}), OffsetCommitResponse, 9)
    assert unknown.topics[0].partitions[0].error_code == 3  # UNKNOWN_TOPIC_OR_PARTITION
    G = OffsetFetchRequest.OffsetFetchRequestGroup
    fetched = client.call(OffsetFetchRequest(groups=[
        G(group_id="a", member_id=None, member_epoch=-1, topics=None),
        G(group_id="b", member_id=None, member_epoch=-1, topics=[G.OffsetFetchRequestTopics(name="t",
                                                                                               partition_indexes=[0])])],
        require_stable=True), OffsetFetchResponse, 9)
    assert [(g.group_id, [(t.name, [(p.partition_index, p.committed_offset, p.metadata) for p in t.partitions])
                          for t in g.topics]) for g in fetched.groups] == [
        ("a", [("t", [(0, 7, "m"), (1, 8, "m")])]), ("b", [("t", [(0, -1, "")])])]
    everything = client.call(samples.offset_fetch("a", None, [], 2), OffsetFetchResponse, 2)
    assert [(p.partition_index, p.committed_offset) for p in everything.topics[0].partitions] == [(0, 7), (1, 8)]


@pytest.mark.parametrize(("version", "error"), [(5, 0), (6, 69)])
def test_describe_unknown_group_is_dead_and_from_v6_not_found(broker: Broker, version: int, error: int) -> None:
    client = broker.connect()
    response = client.call(DescribeGroupsRequest(groups=["nope"], include_authorized_operations=False),
                           DescribeGroupsResponse, version)
    described = response.groups[0]
    assert (described.error_code, described.group_state, described.members) == (error, "Dead", [])


def test_list_groups_filters_by_state_and_type(broker: Broker) -> None:
    client = broker.connect()
    _stable_member(client, "live")
    client.call(samples.offset_commit(samples.GroupMember("idle", "", -1), "t", {0: 1}), OffsetCommitResponse, 9)

    def listed(states: list[str], types: list[str]) -> list[tuple[str, str, str]]:
        response = client.call(ListGroupsRequest(states_filter=states, types_filter=types), ListGroupsResponse, 5)
        return sorted((g.group_id, g.group_state, g.group_type) for g in response.groups)

    assert listed([], []) == [("idle", "Empty", "classic"), ("live", "Stable", "classic")]
    assert listed(["stable"], []) == [("live", "Stable", "classic")]
    assert listed([], ["consumer"]) == []
    assert listed(["Empty"], ["Classic"]) == [("idle", "Empty", "classic")]


def test_static_member_restart_over_the_wire_keeps_the_generation_and_skips_the_assignment(broker: Broker) -> None:
    client = broker.connect()
    first = client.call(samples.join_group("s", instance_id="pod-0"), JoinGroupResponse, 9)
    assert (first.error_code, first.generation_id) == (0, 1)  # a static member needs no MEMBER_ID_REQUIRED round
    member = samples.GroupMember("s", first.member_id, 1)
    client.call(samples.sync_group(member, {member.member_id: b"mine"}), SyncGroupResponse, 5)
    again = client.call(samples.join_group("s", instance_id="pod-0"), JoinGroupResponse, 9)
    assert (again.error_code, again.generation_id, again.skip_assignment, again.leader) == (0, 1, True, again.member_id)
    assert [(m.member_id, m.group_instance_id) for m in again.members] == [(again.member_id, "pod-0")]
    synced = client.call(samples.sync_group(samples.GroupMember("s", again.member_id, 1)), SyncGroupResponse, 5)
    assert synced.assignment == b"mine"
    old = client.call(samples.sync_group(member), SyncGroupResponse, 5)
    assert old.error_code == 25  # the old member id is gone (no instance id sent: UNKNOWN_MEMBER_ID)
