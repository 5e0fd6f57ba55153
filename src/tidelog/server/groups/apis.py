"""The consumer-group APIs: requests in, :class:`~.coordinator.GroupCoordinator` calls, responses out.

FindCoordinator (v0-v6; batched keys from v4): this broker coordinates every group (creating
``__consumer_offsets`` on the first ask, as Kafka does) and every transactional id (creating
``__transaction_state``, server.transactions); SHARE keys get INVALID_REQUEST.
JoinGroup (v2-v9) and SyncGroup (v0-v5) wait on the event loop for the rebalance (a future
resolved by the coordinator's callback). Heartbeat (v0-v4), LeaveGroup (v0-v5; batched members
from v3). OffsetCommit (v2-v9): topics this broker does not have get UNKNOWN_TOPIC_OR_PARTITION,
as Kafka's KafkaApis answers. OffsetFetch (v1-v9; several groups from v8; all committed offsets
for null topics from v2) answers from memory: -1 and empty metadata where nothing is committed;
with require_stable (v7+), UNSTABLE_OFFSET_COMMIT where an open transaction holds an offset.
DescribeGroups (v0-v6; v6 answers GROUP_ID_NOT_FOUND for unknown groups, older versions state
Dead), ListGroups (v0-v5; state filter v4, type filter v5: every group here is ``classic``),
DeleteGroups (v0-v2).
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable
from typing import Any, TypeVar

from kafka.protocol.admin import DeleteGroupsResponse, DescribeGroupsResponse, ListGroupsResponse
from kafka.protocol.consumer import (
    HeartbeatResponse,
    JoinGroupResponse,
    LeaveGroupResponse,
    OffsetCommitResponse,
    OffsetFetchResponse,
    SyncGroupResponse,
)
from kafka.protocol.metadata import FindCoordinatorResponse

from tidelog.manager import LogManager
from tidelog.manager.internal_topics import TRANSACTION_STATE
from tidelog.server.codec import Request
from tidelog.server.context import ApiContext, ConnectionInfo
from tidelog.server.errors import ErrorCode
from tidelog.server.groups.messages import CommitRequest, JoinRequest, SyncRequest
from tidelog.server.groups.records import OFFSETS_TOPIC, OffsetCommitValue
from tidelog.server.groups.service import group_service
from tidelog.server.transactions.coordinator import transaction_coordinator

log = logging.getLogger(__name__)
T = TypeVar("T")
E = ErrorCode
GROUP_KEY_TYPE, TRANSACTION_KEY_TYPE = 0, 1
NOT_REQUESTED = None  # encoded as INT32_MIN, Kafka's "authorized operations were not requested"
# Kafka's AclOperation ids of a group (no authorizer: all allowed): READ, DELETE, DESCRIBE
_GROUP_OPERATIONS = (3, 6, 8)
CLASSIC = "classic"
_PEER_HOST = re.compile(r"\('([^']*)'")


async def _parked(start: Callable[[Callable[[T], None]], None]) -> T:
    """Run ``start(respond)`` and wait until the coordinator calls ``respond`` (a late answer to a
    request whose connection has gone is dropped)."""
    future: asyncio.Future[T] = asyncio.get_running_loop().create_future()

    def respond(result: T) -> None:
        if not future.done():
            future.set_result(result)

    start(respond)
    return await future


def client_host(conn: ConnectionInfo) -> str:
    """Kafka's client host: ``/`` and the peer's address."""
    found = _PEER_HOST.search(conn.peer)
    return "/" + (found.group(1) if found else conn.peer)


# --- FindCoordinator ---------------------------------------------------------------------------

async def handle_find_coordinator(ctx: ApiContext, conn: ConnectionInfo, request: Request) -> Any:
    body, version = request.body, request.api_version
    keys = list(body.coordinator_keys) if version >= 4 else [body.key]
    key_type = body.key_type if version >= 1 else GROUP_KEY_TYPE
    error, message = E.NONE, None
    if key_type == GROUP_KEY_TYPE:
        try:
            await ctx.run(group_service(ctx).topic.ensure)
        except Exception as e:  # noqa: BLE001 - no offsets topic: no coordinator yet (Kafka's answer)
            log.warning("cannot create %s: %s", OFFSETS_TOPIC, e)
            error, message = E.COORDINATOR_NOT_AVAILABLE, f"cannot create {OFFSETS_TOPIC}: {e}"
    elif key_type == TRANSACTION_KEY_TYPE:
        try:
            await ctx.run(transaction_coordinator(ctx).topic.ensure)
        except Exception as e:  # noqa: BLE001 - no transaction state topic: no coordinator yet (Kafka's answer)
            log.warning("cannot create %s: %s", TRANSACTION_STATE, e)
            error, message = E.COORDINATOR_NOT_AVAILABLE, f"cannot create {TRANSACTION_STATE}: {e}"
    else:
        error, message = E.INVALID_REQUEST, f"Unsupported key type {key_type}"
    found = error is E.NONE
    node_id, host, port = (ctx.node_id, conn.advertised.host, conn.advertised.port) if found else (-1, "", -1)
    if version >= 4:
        C = FindCoordinatorResponse.Coordinator
        return FindCoordinatorResponse(throttle_time_ms=0, coordinators=[
            C(key=key, node_id=node_id, host=host, port=port, error_code=error, error_message=message) for key in keys])
    return FindCoordinatorResponse(throttle_time_ms=0, error_code=error, error_message=message, node_id=node_id,
                                   host=host, port=port)


# --- the rebalance protocol --------------------------------------------------------------------

async def handle_join_group(ctx: ApiContext, conn: ConnectionInfo, request: Request) -> Any:
    body, version = request.body, request.api_version
    rebalance_timeout = body.rebalance_timeout_ms if body.rebalance_timeout_ms >= 0 else body.session_timeout_ms
    join = JoinRequest(body.group_id, body.member_id, body.group_instance_id if version >= 5 else None,
                       request.client_id or "", client_host(conn), body.session_timeout_ms, rebalance_timeout,
                       body.protocol_type, tuple((p.name, bytes(p.metadata)) for p in body.protocols),
                       require_known_member_id=version >= 4, supports_skip_assignment=version >= 9)
    coordinator = group_service(ctx).coordinator
    result = await _parked(lambda respond: coordinator.join(join, respond))
    M = JoinGroupResponse.JoinGroupResponseMember
    protocol_name = result.protocol_name if result.protocol_name is not None or version >= 7 else ""
    return JoinGroupResponse(
        throttle_time_ms=0, error_code=result.error, generation_id=result.generation_id,
        protocol_type=result.protocol_type, protocol_name=protocol_name, leader=result.leader_id,
        skip_assignment=result.skip_assignment, member_id=result.member_id,
        members=[M(member_id=m.member_id, group_instance_id=m.group_instance_id, metadata=m.metadata)
                 for m in result.members])


async def handle_sync_group(ctx: ApiContext, conn: ConnectionInfo, request: Request) -> Any:
    body, version = request.body, request.api_version
    sync = SyncRequest(body.group_id, body.generation_id, body.member_id,
                       body.group_instance_id if version >= 3 else None,
                       body.protocol_type if version >= 5 else None, body.protocol_name if version >= 5 else None,
                       {a.member_id: bytes(a.assignment) for a in body.assignments})
    coordinator = group_service(ctx).coordinator
    result = await _parked(lambda respond: coordinator.sync(sync, respond))
    return SyncGroupResponse(throttle_time_ms=0, error_code=result.error, protocol_type=result.protocol_type,
                             protocol_name=result.protocol_name, assignment=result.assignment)


async def handle_heartbeat(ctx: ApiContext, conn: ConnectionInfo, request: Request) -> Any:
    body = request.body
    instance_id = body.group_instance_id if request.api_version >= 3 else None
    error = group_service(ctx).coordinator.heartbeat(body.group_id, body.member_id, instance_id, body.generation_id)
    return HeartbeatResponse(throttle_time_ms=0, error_code=error)


async def handle_leave_group(ctx: ApiContext, conn: ConnectionInfo, request: Request) -> Any:
    body, version = request.body, request.api_version
    wanted = [(m.member_id, m.group_instance_id) for m in body.members] if version >= 3 else [(body.member_id, None)]
    top, errors = group_service(ctx).coordinator.leave(body.group_id, wanted)
    if version < 3:
        return LeaveGroupResponse(throttle_time_ms=0, error_code=top if top is not E.NONE else errors[0])
    R = LeaveGroupResponse.MemberResponse
    return LeaveGroupResponse(throttle_time_ms=0, error_code=top, members=[
        R(member_id=member_id, group_instance_id=instance_id, error_code=error)
        for (member_id, instance_id), error in zip(wanted, errors, strict=True)])


# --- offsets -----------------------------------------------------------------------------------

async def handle_offset_commit(ctx: ApiContext, conn: ConnectionInfo, request: Request) -> Any:
    body, version = request.body, request.api_version
    known = await ctx.run(_known_topics, ctx.manager, [t.name for t in body.topics])
    offsets: dict[tuple[str, int], OffsetCommitValue] = {}
    results: dict[tuple[str, int], ErrorCode] = {}
    for topic in body.topics:
        for p in topic.partitions:
            tp = (topic.name, p.partition_index)
            if topic.name not in known:
                results[tp] = E.UNKNOWN_TOPIC_OR_PARTITION
            else:
                epoch = p.committed_leader_epoch if version >= 6 else -1
                offsets[tp] = OffsetCommitValue(p.committed_offset, p.committed_metadata or "", -1, epoch)
    if offsets:
        commit = CommitRequest(body.group_id, body.generation_id_or_member_epoch, body.member_id,
                               body.group_instance_id if version >= 7 else None, offsets)
        coordinator = group_service(ctx).coordinator
        results.update(await _parked(lambda respond: coordinator.commit_offsets(commit, respond)))
    T_ = OffsetCommitResponse.OffsetCommitResponseTopic
    P = T_.OffsetCommitResponsePartition
    return OffsetCommitResponse(throttle_time_ms=0, topics=[
        T_(name=t.name, partitions=[P(partition_index=p.partition_index, error_code=results[(t.name, p.partition_index)])
                                    for p in t.partitions]) for t in body.topics])


def _known_topics(manager: LogManager, names: list[str]) -> set[str]:
    return {name for name in set(names) if manager.has_topic(name)}


async def handle_offset_fetch(ctx: ApiContext, conn: ConnectionInfo, request: Request) -> Any:
    body, version = request.body, request.api_version
    coordinator = group_service(ctx).coordinator
    require_stable = version >= 7 and body.require_stable

    def unstable(group_id: str) -> set[tuple[str, int]]:
        return coordinator.unstable_partitions(group_id) if require_stable else set()

    if version >= 8:
        G = OffsetFetchResponse.OffsetFetchResponseGroup
        groups = []
        for group in body.groups:
            wanted = None if group.topics is None else [(t.name, p) for t in group.topics for p in t.partition_indexes]
            found = coordinator.fetch_offsets(group.group_id, wanted)
            topics = G.OffsetFetchResponseTopics
            groups.append(G(group_id=group.group_id, error_code=0,
                            topics=_fetched(found, topics, topics.OffsetFetchResponsePartitions, unstable(group.group_id))))
        return OffsetFetchResponse(throttle_time_ms=0, groups=groups)
    wanted = None if body.topics is None else [(t.name, p) for t in body.topics for p in t.partition_indexes]
    found = coordinator.fetch_offsets(body.group_id, wanted)
    topic_class = OffsetFetchResponse.OffsetFetchResponseTopic
    return OffsetFetchResponse(throttle_time_ms=0, error_code=0, topics=_fetched(
        found, topic_class, topic_class.OffsetFetchResponsePartition, unstable(body.group_id)))


def _fetched(found: dict[tuple[str, int], OffsetCommitValue | None], topic_class: Any, partition_class: Any,
             unstable: set[tuple[str, int]]) -> list[Any]:
    """Response topics of ``found`` (-1 and empty metadata where nothing is committed); partitions
    in ``unstable`` (an open transaction holds an offset, asked with require_stable) answer
    UNSTABLE_OFFSET_COMMIT and -1, as Kafka's."""
    by_topic: dict[str, list[Any]] = {}
    for tp, value in found.items():
        if tp in unstable:
            value, error = None, E.UNSTABLE_OFFSET_COMMIT
        else:
            error = E.NONE
        by_topic.setdefault(tp[0], []).append(partition_class(
            partition_index=tp[1], committed_offset=value.offset if value else -1,
            committed_leader_epoch=value.leader_epoch if value else -1, metadata=value.metadata if value else "",
            error_code=error))
    return [topic_class(name=name, partitions=partitions) for name, partitions in by_topic.items()]


# --- admin -------------------------------------------------------------------------------------

async def handle_describe_groups(ctx: ApiContext, conn: ConnectionInfo, request: Request) -> Any:
    coordinator = group_service(ctx).coordinator
    requested = request.api_version >= 3 and request.body.include_authorized_operations
    operations = set(_GROUP_OPERATIONS) if requested else NOT_REQUESTED
    D = DescribeGroupsResponse.DescribedGroup
    M = D.DescribedGroupMember
    described = []
    for group_id in request.body.groups:
        description = coordinator.describe(group_id)
        if description is None:
            error = E.GROUP_ID_NOT_FOUND if request.api_version >= 6 else E.NONE
            message = f"Group {group_id} not found." if error else None
            described.append(D(error_code=error, error_message=message, group_id=group_id, group_state="Dead",
                               protocol_type="", protocol_data="", members=[],
                               authorized_operations=NOT_REQUESTED))
            continue
        described.append(D(
            error_code=0, error_message=None, group_id=group_id, group_state=description.state.value,
            protocol_type=description.protocol_type, protocol_data=description.protocol,
            authorized_operations=operations, members=[
                M(member_id=m.member_id, group_instance_id=m.group_instance_id, client_id=m.client_id,
                  client_host=m.client_host, member_metadata=m.metadata, member_assignment=m.assignment)
                for m in description.members]))
    return DescribeGroupsResponse(throttle_time_ms=0, groups=described)


async def handle_list_groups(ctx: ApiContext, conn: ConnectionInfo, request: Request) -> Any:
    body, version = request.body, request.api_version
    states = {s.lower() for s in body.states_filter} if version >= 4 else set()
    types = {t.lower() for t in body.types_filter} if version >= 5 else set()
    L = ListGroupsResponse.ListedGroup
    listed = [L(group_id=g.group_id, protocol_type=g.protocol_type, group_state=g.state.value, group_type=CLASSIC)
              for g in group_service(ctx).coordinator.list_groups()
              if (not states or g.state.value.lower() in states) and (not types or CLASSIC in types)]
    return ListGroupsResponse(throttle_time_ms=0, error_code=0, groups=listed)


async def handle_delete_groups(ctx: ApiContext, conn: ConnectionInfo, request: Request) -> Any:
    names = list(request.body.groups_names)
    coordinator = group_service(ctx).coordinator
    results = await _parked(lambda respond: coordinator.delete_groups(names, respond))
    R = DeleteGroupsResponse.DeletableGroupResult
    return DeleteGroupsResponse(throttle_time_ms=0, results=[R(group_id=g, error_code=results[g])
                                                             for g in dict.fromkeys(names)])
