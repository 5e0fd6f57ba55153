"""The classic group coordinator's state machine, driven by a FakeClock and FakeScheduler over an
in-memory store: joins, the initial rebalance delay, protocol selection, SyncGroup, heartbeats,
session and rebalance timeouts, leaving, static members, offsets and group deletion."""

from __future__ import annotations

from typing import Any

import pytest

from tidelog.server.errors import ErrorCode as E
from tidelog.server.groups.coordinator import GroupCoordinator
from tidelog.server.groups.messages import (
    CommitRequest,
    GroupConfig,
    JoinRequest,
    JoinResult,
    StoreRecord,
    SyncRequest,
    SyncResult,
)
from tidelog.server.groups.group import GroupState
from tidelog.server.groups.records import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
    decode_group_metadata_value,
    decode_key,
)
from tidelog.testing import FakeClock, FakeScheduler

SESSION, REBALANCE = 10_000, 30_000


class MemoryStore:
    """Records kept in a list; ``fail`` makes writes fail, ``hold`` keeps them unanswered."""

    def __init__(self) -> None:
        self.written: list[tuple[str, list[StoreRecord]]] = []
        self.fail: BaseException | None = None
        self.hold = False
        self.held: list[Any] = []

    def write(self, group_id: str, records: list[StoreRecord], done: Any) -> None:
        if self.fail is None:
            self.written.append((group_id, records))
        if self.hold:
            self.held.append(done)
        else:
            done(self.fail)

    def group_values(self) -> list[GroupMetadataValue]:
        return [decode_group_metadata_value(v) for _, records in self.written for k, v in records
                if isinstance(decode_key(k), GroupMetadataKey) and v is not None]


class Harness:
    def __init__(self, delay_ms: int = 0) -> None:
        self.clock = FakeClock()
        self.scheduler = FakeScheduler(self.clock)
        self.store = MemoryStore()
        self.coordinator = GroupCoordinator(GroupConfig(initial_rebalance_delay_ms=delay_ms), self.store,
                                            self.clock, self.scheduler)

    def join(self, member_id: str = "", group: str = "g", protocols: tuple[tuple[str, bytes], ...] = (("range", b"s"),),
             instance_id: str | None = None, session: int = SESSION, client: str = "c", rebalance: int = REBALANCE,
             v9: bool = True) -> list[JoinResult]:
        """Send a JoinGroup (``v9``: the client can skip the assignment); the list fills when it is answered."""
        answers: list[JoinResult] = []
        self.coordinator.join(JoinRequest(group, member_id, instance_id, client, "/127.0.0.1", session, rebalance,
                                          "consumer", protocols, supports_skip_assignment=v9), answers.append)
        return answers

    def member(self, group: str = "g", **kwargs: Any) -> str:
        """A new member id (through MEMBER_ID_REQUIRED); its join is sent and left parked."""
        first = self.join(group=group, **kwargs)
        assert first[0].error == E.MEMBER_ID_REQUIRED and first[0].member_id
        return first[0].member_id

    def sync(self, member_id: str, generation: int, assignments: dict[str, bytes] | None = None,
             group: str = "g", instance_id: str | None = None) -> list[SyncResult]:
        answers: list[SyncResult] = []
        self.coordinator.sync(SyncRequest(group, generation, member_id, instance_id, "consumer", "range",
                                          assignments or {}), answers.append)
        return answers

    def heartbeat(self, member_id: str, generation: int, group: str = "g", instance_id: str | None = None) -> E:
        return self.coordinator.heartbeat(group, member_id, instance_id, generation)

    def state(self, group: str = "g") -> GroupState:
        found = self.coordinator.group(group)
        assert found is not None
        return found.state

    def stable_pair(self) -> tuple[str, str, int]:
        """Two members through a full rebalance: (leader, follower, generation)."""
        a = self.member()
        joined_a = self.join(a)
        assert joined_a[0].generation_id == 1
        b = self.member()
        joined_b = self.join(b)
        assert self.heartbeat(a, 1) == E.REBALANCE_IN_PROGRESS
        joined_a = self.join(a)
        assert joined_a[0].error == joined_b[0].error == E.NONE and joined_a[0].generation_id == 2
        synced_b = self.sync(b, 2)
        synced_a = self.sync(a, 2, {a: b"A", b: b"B"})
        assert synced_a[0].assignment == b"A" and synced_b[0].assignment == b"B"
        return a, b, 2


def test_first_join_is_asked_to_come_back_with_a_member_id_then_leads_generation_1() -> None:
    h = Harness()
    first = h.join(client="app")
    assert first[0].error == E.MEMBER_ID_REQUIRED and first[0].member_id.startswith("app-")
    joined = h.join(first[0].member_id)
    result = joined[0]
    assert (result.error, result.generation_id, result.leader_id, result.protocol_name) == (
        E.NONE, 1, first[0].member_id, "range")
    assert [(m.member_id, m.metadata) for m in result.members] == [(first[0].member_id, b"s")]
    assert h.state() is GroupState.COMPLETING_REBALANCE


def test_initial_rebalance_delay_waits_and_extends_while_members_keep_joining() -> None:
    h = Harness(delay_ms=3000)
    a = h.member()
    joined_a = h.join(a)
    h.clock.advance(2000)
    b = h.member()
    joined_b = h.join(b)
    h.clock.advance(1000)  # the first delay is over, but b joined during it: wait another delay
    assert joined_a == [] and joined_b == [] and h.state() is GroupState.PREPARING_REBALANCE
    h.clock.advance(3000)
    assert joined_a[0].generation_id == joined_b[0].generation_id == 1
    assert {m.member_id for m in joined_a[0].members} == {a, b} and joined_b[0].members == ()


def test_initial_rebalance_delay_completes_after_one_delay_when_nobody_else_joins() -> None:
    h = Harness(delay_ms=3000)
    joined = h.join(h.member())
    h.clock.advance(2999)
    assert joined == []
    h.clock.advance(1)
    assert joined[0].error == E.NONE


def test_sync_group_stores_the_assignment_then_answers_every_member_and_the_group_is_stable() -> None:
    h = Harness()
    a, b, generation = h.stable_pair()
    assert h.state() is GroupState.STABLE
    stored = h.store.group_values()[-1]
    assert (stored.generation, stored.protocol, stored.leader, stored.protocol_type) == (2, "range", a, "consumer")
    assert [(m.member_id, m.assignment, m.session_timeout, m.rebalance_timeout, m.subscription)
            for m in stored.members] == [(a, b"A", SESSION, REBALANCE, b"s"), (b, b"B", SESSION, REBALANCE, b"s")]
    assert h.sync(b, generation)[0].assignment == b"B"  # a late SyncGroup in Stable: answered at once


def test_follower_sync_waits_for_the_leader_and_the_assignment_to_be_stored() -> None:
    h = Harness()
    a = h.member()
    h.join(a)
    b = h.member()
    h.join(b)
    h.join(a)
    follower = h.sync(b, 2)
    assert follower == []
    h.store.hold = True
    leader = h.sync(a, 2, {a: b"A"})
    assert leader == [] and follower == [] and h.state() is GroupState.COMPLETING_REBALANCE
    h.store.held.pop()(None)
    assert (leader[0].assignment, follower[0].assignment) == (b"A", b"")  # no assignment given: empty
    assert h.state() is GroupState.STABLE


def test_heartbeat_errors_unknown_member_wrong_generation_and_rebalance_in_progress() -> None:
    h = Harness()
    a, b, generation = h.stable_pair()
    assert h.heartbeat(a, generation) == E.NONE
    assert h.heartbeat("nobody", generation) == E.UNKNOWN_MEMBER_ID
    assert h.heartbeat(a, generation - 1) == E.ILLEGAL_GENERATION
    assert h.heartbeat(a, generation, group="other") == E.UNKNOWN_MEMBER_ID
    h.join(h.member())  # a third member: rebalance
    assert h.state() is GroupState.PREPARING_REBALANCE
    assert h.heartbeat(a, generation) == E.REBALANCE_IN_PROGRESS


def test_member_whose_session_expires_is_removed_and_the_group_rebalances() -> None:
    h = Harness()
    a, b, generation = h.stable_pair()
    h.clock.advance(SESSION // 2)
    assert h.heartbeat(a, generation) == E.NONE  # only a heartbeats
    h.clock.advance(SESSION // 2 - 1)
    group = h.coordinator.group("g")
    assert group is not None and list(group.members) == [a, b]
    h.clock.advance(1)
    assert group is not None and list(group.members) == [a]
    assert h.heartbeat(a, generation) == E.REBALANCE_IN_PROGRESS
    rejoined = h.join(a)
    assert (rejoined[0].generation_id, [m.member_id for m in rejoined[0].members]) == (3, [a])


def test_member_that_does_not_rejoin_within_the_rebalance_timeout_is_dropped() -> None:
    h = Harness()
    a, b, generation = h.stable_pair()
    rejoined_a = h.join(a, protocols=(("range", b"new"),))  # changed metadata: rebalance
    assert rejoined_a == [] and h.state() is GroupState.PREPARING_REBALANCE
    for _ in range(REBALANCE // 5000):
        h.clock.advance(5000)
        h.heartbeat(b, generation)  # b keeps its session but never rejoins
    assert rejoined_a[0].generation_id == 3 and [m.member_id for m in rejoined_a[0].members] == [a]
    assert h.heartbeat(b, generation) == E.UNKNOWN_MEMBER_ID


def test_member_that_never_syncs_is_removed_after_the_rebalance_timeout() -> None:
    h = Harness()
    a = h.member()
    h.join(a)
    b = h.member()
    joined_b = h.join(b)
    h.join(a)
    assert joined_b[0].generation_id == 2
    h.sync(a, 2, {a: b"A", b: b"B"})  # b never sends SyncGroup
    for _ in range(REBALANCE // 5000):
        h.clock.advance(5000)
        h.heartbeat(a, 2)
    group = h.coordinator.group("g")
    assert group is not None and list(group.members) == [a] and group.state is GroupState.PREPARING_REBALANCE


def test_join_with_unchanged_metadata_in_stable_returns_the_current_generation() -> None:
    h = Harness()
    a, b, generation = h.stable_pair()
    again = h.join(b)
    assert (again[0].error, again[0].generation_id, again[0].members) == (E.NONE, generation, ())
    assert h.state() is GroupState.STABLE


def test_leader_rejoining_in_stable_triggers_a_rebalance() -> None:
    h = Harness()
    a, b, generation = h.stable_pair()
    assert h.join(a) == [] and h.state() is GroupState.PREPARING_REBALANCE


def test_rebalance_while_completing_fails_parked_syncs_with_rebalance_in_progress() -> None:
    h = Harness()
    a = h.member()
    h.join(a)
    b = h.member()
    h.join(b)
    h.join(a)
    parked = h.sync(b, 2)
    assert parked == []
    h.join(h.member())  # a new member while completing
    assert parked[0].error == E.REBALANCE_IN_PROGRESS


def test_leaving_removes_the_member_and_the_last_one_leaves_the_group_empty() -> None:
    h = Harness()
    a, b, generation = h.stable_pair()
    top, errors = h.coordinator.leave("g", [(b, None), ("ghost", None)])
    assert (top, errors) == (E.NONE, [E.NONE, E.UNKNOWN_MEMBER_ID])
    assert h.state() is GroupState.PREPARING_REBALANCE
    rejoined = h.join(a)
    assert rejoined[0].generation_id == 3
    h.sync(a, 3, {a: b"all"})
    assert h.coordinator.leave("g", [(a, None)]) == (E.NONE, [E.NONE])
    assert h.state() is GroupState.EMPTY
    empty = h.store.group_values()[-1]
    assert (empty.generation, empty.members, empty.protocol, empty.leader) == (4, (), None, None)
    assert h.coordinator.leave("nope", [(a, None)])[0] == E.UNKNOWN_MEMBER_ID


def test_a_member_leaving_while_others_rejoin_completes_the_join() -> None:
    h = Harness()
    a, b, generation = h.stable_pair()
    rejoined_a = h.join(a)
    h.coordinator.leave("g", [(b, None)])
    assert rejoined_a[0].generation_id == 3


@pytest.mark.parametrize(("third", "chosen"), [("range", "range"), ("roundrobin", "roundrobin")])
def test_protocol_chosen_is_the_common_one_most_members_prefer(third: str, chosen: str) -> None:
    h = Harness(delay_ms=100)
    offers = [(("range", b"r"), ("roundrobin", b"rr")), (("roundrobin", b"rr"), ("range", b"r"), ("sticky", b"s"))]
    offers.append(tuple(sorted(offers[0], key=lambda p: p[0] != third)))
    ids = [h.member(protocols=offer) for offer in offers]
    joins = [h.join(member_id, protocols=offer) for member_id, offer in zip(ids, offers, strict=True)]
    for _ in range(3):
        h.clock.advance(100)  # the first delay saw members join: one more delay
    assert {j[0].protocol_name for j in joins} == {chosen}
    leader_view = next(j[0] for j in joins if j[0].members)
    assert {m.metadata for m in leader_view.members} == ({b"r"} if chosen == "range" else {b"rr"})


def test_join_offering_no_common_protocol_or_another_type_is_refused() -> None:
    h = Harness()
    h.join(h.member(protocols=(("range", b""),)), protocols=(("range", b""),))
    assert h.join(protocols=(("sticky", b""),))[0].error == E.INCONSISTENT_GROUP_PROTOCOL
    answers: list[JoinResult] = []
    h.coordinator.join(JoinRequest("g", "", None, "c", "h", SESSION, REBALANCE, "connect", (("range", b""),)),
                       answers.append)
    assert answers[0].error == E.INCONSISTENT_GROUP_PROTOCOL


@pytest.mark.parametrize(("session", "group", "error"), [(1000, "g", E.INVALID_SESSION_TIMEOUT),
                                                         (SESSION, "", E.INVALID_GROUP_ID)])
def test_join_with_bad_session_timeout_or_group_id_is_refused(session: int, group: str, error: E) -> None:
    assert Harness().join(group=group, session=session)[0].error == error


def test_join_with_an_unknown_member_id_is_refused() -> None:
    h = Harness()
    assert h.join("who")[0].error == E.UNKNOWN_MEMBER_ID
    h.join(h.member())
    assert h.join("who")[0].error == E.UNKNOWN_MEMBER_ID


def test_pending_member_that_never_rejoins_expires_after_its_session() -> None:
    h = Harness()
    a = h.member()
    joined_a = h.join(a)
    h.sync(a, 1, {a: b"x"})
    h.member()  # never comes back
    group = h.coordinator.group("g")
    assert group is not None and len(group.pending_members) == 1
    h.clock.advance(SESSION // 2)
    h.heartbeat(a, 1)
    h.clock.advance(SESSION // 2)
    assert not group.pending_members and joined_a[0].generation_id == 1


def _static_pair(h: Harness) -> tuple[str, str]:
    """Static members host-1 (the leader) and host-2, Stable in generation 2; their member ids."""
    one = h.join(instance_id="host-1")[0].member_id
    two_joined = h.join(instance_id="host-2")
    one_joined = h.join(one, instance_id="host-1")
    two = two_joined[0].member_id
    assert one_joined[0].generation_id == two_joined[0].generation_id == 2
    h.sync(two, 2, instance_id="host-2")
    h.sync(one, 2, {one: b"A", two: b"B"}, instance_id="host-1")
    assert h.state() is GroupState.STABLE
    return one, two


def test_static_member_restart_in_a_stable_group_keeps_the_generation_and_fences_the_old_id() -> None:
    h = Harness()
    one, two = _static_pair(h)
    restarted = h.join(instance_id="host-1")
    result = restarted[0]
    new = result.member_id
    assert (result.error, result.generation_id, result.leader_id, result.skip_assignment) == (E.NONE, 2, new, True)
    assert {m.member_id for m in result.members} == {new, two}  # the leader learns the members, skips assigning
    assert h.state() is GroupState.STABLE and new != one
    assert h.heartbeat(one, 2, instance_id="host-1") == E.FENCED_INSTANCE_ID
    assert h.heartbeat(new, 2, instance_id="host-1") == E.NONE
    assert h.sync(new, 2, instance_id="host-1")[0].assignment == b"A"
    stored = h.store.group_values()[-1]
    assert (stored.generation, stored.leader, [(m.member_id, m.assignment) for m in stored.members]) == (
        2, new, [(two, b"B"), (new, b"A")])
    assert h.coordinator.leave("g", [("", "host-1"), (two, "host-2")]) == (E.NONE, [E.NONE, E.NONE])
    assert h.state() is GroupState.EMPTY


def test_static_leader_restart_of_an_older_client_is_told_the_old_leader_so_it_does_not_assign() -> None:
    h = Harness()
    one, two = _static_pair(h)
    result = h.join(instance_id="host-1", v9=False)[0]
    assert (result.error, result.generation_id, result.leader_id, result.members) == (E.NONE, 2, one, ())


def test_static_member_restart_that_changes_the_chosen_protocol_rebalances() -> None:
    h = Harness()
    alone = h.join(instance_id="host-1", protocols=(("range", b"r"), ("roundrobin", b"rr")))[0].member_id
    h.sync(alone, 1, {alone: b"A"}, instance_id="host-1")
    restarted = h.join(instance_id="host-1", protocols=(("roundrobin", b"rr"), ("range", b"r")))
    assert (restarted[0].generation_id, restarted[0].protocol_name) == (2, "roundrobin")
    assert h.state() is GroupState.COMPLETING_REBALANCE


def test_static_member_restart_that_cannot_be_stored_keeps_the_old_member() -> None:
    h = Harness()
    one, two = _static_pair(h)
    h.store.fail = OSError("disk full")
    result = h.join(instance_id="host-2")[0]
    assert (result.error, result.member_id) == (E.COORDINATOR_NOT_AVAILABLE, "")
    assert h.heartbeat(two, 2, instance_id="host-2") == E.NONE


def test_unknown_member_id_with_a_known_instance_id_is_fenced() -> None:
    h = Harness()
    one, two = _static_pair(h)
    assert h.join("someone-else", instance_id="host-1")[0].error == E.FENCED_INSTANCE_ID
    assert h.join("x", instance_id="host-9")[0].error == E.UNKNOWN_MEMBER_ID


def test_new_member_whose_join_waits_longer_than_five_minutes_is_dropped() -> None:
    h = Harness()
    a = h.member()
    h.join(a, rebalance=600_000)
    h.sync(a, 1, {a: b"x"})
    parked = h.join(h.member(rebalance=600_000), rebalance=600_000)  # a never rejoins, but keeps heartbeating
    for _ in range(59):
        h.clock.advance(SESSION // 2)
        assert h.heartbeat(a, 1) == E.REBALANCE_IN_PROGRESS
    assert parked == []
    h.clock.advance(SESSION // 2)
    assert parked[0].error == E.UNKNOWN_MEMBER_ID
    group = h.coordinator.group("g")
    assert group is not None and list(group.members) == [a]


def test_offsets_commit_from_outside_the_group_and_fetch() -> None:
    h = Harness()
    answers: list[dict[tuple[str, int], E]] = []
    h.coordinator.commit_offsets(CommitRequest("solo", -1, "", None, {
        ("t", 0): OffsetCommitValue(5, "m", -1), ("t", 1): OffsetCommitValue(7, "x" * 5000, -1)}), answers.append)
    assert answers == [{("t", 0): E.NONE, ("t", 1): E.OFFSET_METADATA_TOO_LARGE}]
    fetched = h.coordinator.fetch_offsets("solo", [("t", 0), ("t", 1)])
    value = fetched[("t", 0)]
    assert value is not None and (value.offset, value.metadata, value.commit_timestamp) == (5, "m", h.clock.milliseconds())
    assert fetched[("t", 1)] is None
    assert list(h.coordinator.fetch_offsets("solo", None)) == [("t", 0)]
    assert h.coordinator.fetch_offsets("unknown", [("t", 0)]) == {("t", 0): None}
    key, value_bytes = h.store.written[-1][1][0]
    assert decode_key(key) == OffsetCommitKey("solo", "t", 0) and value_bytes is not None
    assert [g.group_id for g in h.coordinator.list_groups()] == ["solo"]


def test_member_commits_are_checked_against_membership_and_generation() -> None:
    h = Harness()
    a, b, generation = h.stable_pair()

    def commit(member: str, gen: int) -> E:
        answers: list[dict[tuple[str, int], E]] = []
        h.coordinator.commit_offsets(CommitRequest("g", gen, member, None, {("t", 0): OffsetCommitValue(1, "", -1)}),
                                     answers.append)
        return answers[0][("t", 0)]

    assert commit(a, generation) == E.NONE
    assert commit(a, generation - 1) == E.ILLEGAL_GENERATION
    assert commit("ghost", generation) == E.UNKNOWN_MEMBER_ID
    assert commit("", -1) == E.UNKNOWN_MEMBER_ID  # the group has members
    h.join(a, protocols=(("range", b"changed"),))  # PreparingRebalance: commits of the generation still go
    assert commit(b, generation) == E.NONE


def test_commit_that_cannot_be_stored_is_not_applied() -> None:
    h = Harness()
    h.store.fail = OSError("disk full")
    answers: list[dict[tuple[str, int], E]] = []
    h.coordinator.commit_offsets(CommitRequest("g", -1, "", None, {("t", 0): OffsetCommitValue(1, "", -1)}),
                                 answers.append)
    assert answers == [{("t", 0): E.COORDINATOR_NOT_AVAILABLE}]
    assert h.coordinator.fetch_offsets("g", [("t", 0)]) == {("t", 0): None}


def test_assignment_that_cannot_be_stored_fails_the_syncs_and_rebalances() -> None:
    h = Harness()
    a = h.member()
    h.join(a)
    h.store.fail = OSError("disk full")
    assert h.sync(a, 1, {a: b"x"})[0].error == E.COORDINATOR_NOT_AVAILABLE
    assert h.state() is GroupState.PREPARING_REBALANCE


def test_sync_errors() -> None:
    h = Harness()
    a, b, generation = h.stable_pair()
    assert h.sync("ghost", generation)[0].error == E.UNKNOWN_MEMBER_ID
    assert h.sync(a, generation + 1)[0].error == E.ILLEGAL_GENERATION
    assert h.sync(a, generation, group="nope")[0].error == E.UNKNOWN_MEMBER_ID
    answers: list[SyncResult] = []
    h.coordinator.sync(SyncRequest("g", generation, a, None, "consumer", "roundrobin", {}), answers.append)
    assert answers[0].error == E.INCONSISTENT_GROUP_PROTOCOL


def test_delete_groups_refuses_non_empty_and_unknown_groups_and_writes_tombstones() -> None:
    h = Harness()
    h.stable_pair()
    h.coordinator.commit_offsets(CommitRequest("empty", -1, "", None, {("t", 0): OffsetCommitValue(3, "", -1),
                                                                       ("u", 2): OffsetCommitValue(4, "", -1)}),
                                 lambda _: None)
    answers: list[dict[str, E]] = []
    h.coordinator.delete_groups(["g", "empty", "nope"], answers.append)
    assert answers == [{"g": E.NON_EMPTY_GROUP, "empty": E.NONE, "nope": E.GROUP_ID_NOT_FOUND}]
    group_id, tombstones = h.store.written[-1]
    assert group_id == "empty" and all(v is None for _, v in tombstones)
    assert [decode_key(k) for k, _ in tombstones] == [OffsetCommitKey("empty", "t", 0), OffsetCommitKey("empty", "u", 2),
                                                      GroupMetadataKey("empty")]
    assert h.coordinator.group("empty") is None and h.coordinator.describe("empty") is None


def test_describe_gives_members_metadata_and_assignments_when_stable() -> None:
    h = Harness()
    a, b, _ = h.stable_pair()
    described = h.coordinator.describe("g")
    assert described is not None and (described.state, described.protocol, described.protocol_type) == (
        GroupState.STABLE, "range", "consumer")
    assert [(m.member_id, m.metadata, m.assignment, m.client_host) for m in described.members] == [
        (a, b"s", b"A", "/127.0.0.1"), (b, b"s", b"B", "/127.0.0.1")]


def test_load_restores_stable_groups_that_heartbeat_on_and_expire_without_heartbeats() -> None:
    h = Harness()
    member = MemberMetadata("m-1", None, "c", "/h", REBALANCE, SESSION, b"sub", b"asg")
    h.coordinator.load({"g": GroupMetadataValue("consumer", 7, "range", "m-1", 1, (member,)),
                        "e": GroupMetadataValue("consumer", 3, None, None, 1, ())},
                       {"g": {("t", 0): OffsetCommitValue(42, "", 1)}, "only-offsets": {("t", 1): OffsetCommitValue(1, "", 1)}})
    assert h.state("g") is GroupState.STABLE and h.state("e") is GroupState.EMPTY
    assert h.state("only-offsets") is GroupState.EMPTY
    assert h.heartbeat("m-1", 7) == E.NONE
    assert h.sync("m-1", 7)[0].assignment == b"asg"
    value = h.coordinator.fetch_offsets("g", [("t", 0)])[("t", 0)]
    assert value is not None and value.offset == 42
    h.clock.advance(SESSION)
    assert h.state("g") is GroupState.EMPTY  # the member never came back: removed, group emptied


def test_offsets_of_empty_groups_expire_after_the_retention_and_the_group_goes_with_them() -> None:
    h = Harness()
    day = 24 * 3600 * 1000
    h.coordinator.commit_offsets(CommitRequest("solo", -1, "", None, {("t", 0): OffsetCommitValue(1, "", -1)}),
                                 lambda _: None)
    h.clock.advance(3 * day)
    h.coordinator.commit_offsets(CommitRequest("solo", -1, "", None, {("t", 1): OffsetCommitValue(2, "", -1)}),
                                 lambda _: None)
    a, b, generation = h.stable_pair()
    h.coordinator.commit_offsets(CommitRequest("g", generation, a, None, {("t", 0): OffsetCommitValue(3, "", -1)}),
                                 lambda _: None)
    h.coordinator.leave("g", [(a, None), (b, None)])
    assert h.state("g") is GroupState.EMPTY
    h.clock.advance(4 * day)
    assert h.coordinator.expire_offsets() == 1  # solo's first commit is 7 days old
    assert list(h.coordinator.fetch_offsets("solo", None)) == [("t", 1)]
    assert [decode_key(k) for k, _ in h.store.written[-1][1]] == [OffsetCommitKey("solo", "t", 0)]
    h.clock.advance(3 * day - 1)
    assert h.coordinator.expire_offsets() == 0  # g emptied, and solo committed, 7 days minus 1 ms ago
    h.clock.advance(1)
    assert h.coordinator.expire_offsets() == 2
    assert h.coordinator.group("solo") is None and h.coordinator.group("g") is None
    assert [decode_key(k) for _, records in h.store.written[-2:] for k, _ in records] == [
        OffsetCommitKey("solo", "t", 1), GroupMetadataKey("solo"), OffsetCommitKey("g", "t", 0), GroupMetadataKey("g")]
