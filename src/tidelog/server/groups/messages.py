"""What goes in and out of the :class:`~tidelog.server.groups.coordinator.GroupCoordinator`:
its configuration, the store it writes through, and one frozen value per request and answer
(the API handlers translate them from and to Kafka's messages)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from tidelog.server.errors import ErrorCode
from tidelog.server.groups.group import GroupState
from tidelog.server.groups.records import OffsetCommitValue
from tidelog.storage.config import BrokerConfig

StoreRecord = tuple[bytes, bytes | None]  # key, value (None: tombstone)
Done = Callable[[BaseException | None], None]

log = logging.getLogger("tidelog.server.groups.coordinator")


def log_failure(group_id: str) -> Done:
    """A :data:`Done` that only logs a failed write of ``group_id``'s metadata."""
    def done(failure: BaseException | None) -> None:
        if failure is not None:
            log.warning("group %s: storing its metadata failed: %s", group_id, failure)
    return done


class GroupStore(Protocol):
    """Where the coordinator's records go: ``__consumer_offsets`` in the server."""

    def write(self, group_id: str, records: list[StoreRecord], done: Done) -> None:
        """Append ``records`` to ``group_id``'s partition, then call ``done(None)`` (or
        ``done(error)``) on the coordinator's thread. Writes of one partition land in call order."""
        ...

    def write_transactional(self, group_id: str, producer_id: int, producer_epoch: int,
                            records: list[StoreRecord], done: Done) -> None:
        """As :meth:`write`, in a transactional batch of ``producer_id`` at ``producer_epoch``
        (a TxnOffsetCommit: visible once the transaction's COMMIT marker follows)."""
        ...


@dataclass(frozen=True, slots=True)
class GroupConfig:
    """The broker keys of the coordinator (Kafka's defaults)."""

    initial_rebalance_delay_ms: int = 3000
    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1800000
    max_size: int = 2**31 - 1
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000
    offsets_retention_check_interval_ms: int = 600000

    @classmethod
    def from_broker(cls, broker: BrokerConfig) -> GroupConfig:
        return cls(broker.get("group.initial.rebalance.delay.ms"), broker.get("group.min.session.timeout.ms"),
                   broker.get("group.max.session.timeout.ms"), broker.get("group.max.size"),
                   broker.get("offsets.retention.minutes") * 60 * 1000,
                   broker.get("offsets.retention.check.interval.ms"))


# --- requests and answers ------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class JoinRequest:
    group_id: str
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    require_known_member_id: bool = True  # v4+: MEMBER_ID_REQUIRED first
    supports_skip_assignment: bool = True  # v9+: a static leader's rejoin may skip the assignment


@dataclass(frozen=True, slots=True)
class JoinedMember:
    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True, slots=True)
class JoinResult:
    error: ErrorCode
    member_id: str = ""
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str = ""
    members: tuple[JoinedMember, ...] = ()
    skip_assignment: bool = False


@dataclass(frozen=True, slots=True)
class SyncRequest:
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None
    protocol_type: str | None
    protocol_name: str | None
    assignments: Mapping[str, bytes]


@dataclass(frozen=True, slots=True)
class SyncResult:
    error: ErrorCode
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass(frozen=True, slots=True)
class CommitRequest:
    """``offsets`` by (topic, partition) (a commit timestamp of -1 is stamped now); generation -1
    and no member: a commit from outside the group."""

    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None
    offsets: Mapping[tuple[str, int], OffsetCommitValue]


@dataclass(frozen=True, slots=True)
class TxnCommitRequest:
    """A TxnOffsetCommit: ``offsets`` held for the open transaction of ``producer_id`` until its
    marker. Generation -1, no member and no instance id: a producer outside the group's
    membership (v0-v2 carry none of them)."""

    group_id: str
    producer_id: int
    producer_epoch: int
    generation_id: int
    member_id: str
    group_instance_id: str | None
    offsets: Mapping[tuple[str, int], OffsetCommitValue]


@dataclass(frozen=True, slots=True)
class DescribedMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupDescription:
    group_id: str
    state: GroupState
    protocol_type: str
    protocol: str
    members: tuple[DescribedMember, ...] = field(default=())


@dataclass(frozen=True, slots=True)
class GroupListing:
    group_id: str
    protocol_type: str
    state: GroupState
