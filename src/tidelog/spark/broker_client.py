"""A small blocking Kafka-protocol client for the Spark source's broker reads: Metadata,
ListOffsets and Fetch over plain sockets, requests and responses encoded by kafka-python's
protocol classes (no consumer, no per-record Python objects: Fetch gives the log's raw batch bytes).

Used on the driver (partitions, earliest/latest/by-time offsets) and on the executors (Fetch of
the tail not yet tiered). Versions are fixed at ones both tidelog and Kafka 3.x/4.x brokers
serve: Metadata v12, ListOffsets v7, Fetch v12 (topic names, raw records). One connection per
broker node, opened on first use; PLAINTEXT only.

Errors: a broker that does not answer (connect refused, timeout, closed connection) raises
:class:`BrokerUnreachable` naming the address; per-partition Kafka error codes are returned
(Fetch) or raised as :class:`BrokerReplyError` with Kafka's error name (Metadata, ListOffsets).
Not thread-safe: one client per planning or per task.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from tidelog.storage.metadata import uuid_to_topic_id
from tidelog.topic_partition import TopicPartition

METADATA_VERSION = 12
LIST_OFFSETS_VERSION = 7
FETCH_VERSION = 12
CONNECT_TIMEOUT_S = 10.0
REQUEST_TIMEOUT_S = 30.0
CLIENT_ID = "tidelog-spark"
EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1

NONE = 0
OFFSET_OUT_OF_RANGE = 1
UNKNOWN_TOPIC_OR_PARTITION = 3
LEADER_NOT_AVAILABLE = 5
NOT_LEADER_OR_FOLLOWER = 6
OFFSET_MOVED_TO_TIERED_STORAGE = 109
RETRIABLE = frozenset({LEADER_NOT_AVAILABLE, NOT_LEADER_OR_FOLLOWER, 7, 13, 56, 74, 75})
"""Codes a read answers by refreshing metadata and asking again (leader moves, timeouts, a
storage error on one replica, fenced or unknown leader epochs)."""


class BrokerUnreachable(RuntimeError):
    """No answer from the broker at ``address`` (refused, timed out, connection closed)."""

    def __init__(self, message: str, address: str) -> None:
        super().__init__(message)
        self.address = address


class BrokerReplyError(RuntimeError):
    """The broker answered with a Kafka error code (``code``, Kafka's name in the message)."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def error_name(code: int) -> str:
    """Kafka's name of error ``code`` (``OFFSET_MOVED_TO_TIERED_STORAGE``)."""
    import kafka.errors as kafka_errors

    return str(getattr(kafka_errors.for_code(code), "message", f"ERROR_{code}"))


@dataclass(frozen=True, slots=True)
class PartitionFetched:
    """One partition of a Fetch response: ``records`` are raw v2 batches (possibly ending in a
    partial batch); offsets are -1 with an error."""

    error: int
    high_watermark: int
    log_start_offset: int
    records: bytes


def parse_bootstrap(text: str) -> list[tuple[str, int]]:
    """``host:port[,host:port...]`` as addresses; ValueError naming the bad entry."""
    out = []
    for entry in (e.strip() for e in text.split(",")):
        if not entry:
            continue
        host, sep, port = entry.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"'{entry}' is not HOST:PORT")
        out.append((host.strip("[]"), int(port)))
    if not out:
        raise ValueError("no HOST:PORT given")
    return out


class BrokerClient:
    """Connections to the brokers of one cluster, found from ``bootstrap`` (see module doc)."""

    def __init__(self, bootstrap: str, *, timeout_s: float = REQUEST_TIMEOUT_S) -> None:
        self.bootstrap = bootstrap
        self._seeds = parse_bootstrap(bootstrap)
        self._timeout = timeout_s
        self._socks: dict[tuple[str, int], socket.socket] = {}
        self._nodes: dict[int, tuple[str, int]] = {}
        self._leaders: dict[TopicPartition, int] = {}
        self.topic_ids: dict[str, str] = {}
        self._correlation = 0

    def close(self) -> None:
        for sock in self._socks.values():
            sock.close()
        self._socks.clear()

    def __enter__(self) -> BrokerClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- requests -------------------------------------------------------------------------

    def metadata(self, topics: Sequence[str] | None) -> dict[str, list[int]]:
        """``{topic: sorted partition ids}`` of ``topics`` (every topic when None), never
        auto-creating; topics the broker does not have are left out. Learns the leaders and the
        topic ids (:attr:`topic_ids`, Kafka's base64 form)."""
        from kafka.protocol.metadata import MetadataRequest, MetadataResponse

        wanted = None if topics is None else [MetadataRequest.MetadataRequestTopic(name=t) for t in topics]
        request = MetadataRequest(topics=wanted, allow_auto_topic_creation=False,
                                  include_topic_authorized_operations=False)
        response = self._call(request, MetadataResponse, METADATA_VERSION, None)
        self._nodes.update({b.node_id: (b.host, b.port) for b in response.brokers})
        out: dict[str, list[int]] = {}
        for topic in response.topics:
            if topic.error_code == UNKNOWN_TOPIC_OR_PARTITION:
                continue
            if topic.error_code:
                raise BrokerReplyError(f"Metadata of topic '{topic.name}' from the broker at {self.bootstrap}: "
                                       f"{error_name(topic.error_code)}", topic.error_code)
            out[topic.name] = sorted(p.partition_index for p in topic.partitions)
            if topic.topic_id is not None and topic.topic_id.int:
                self.topic_ids[topic.name] = uuid_to_topic_id(topic.topic_id)
            for p in topic.partitions:
                self._leaders[TopicPartition(topic.name, p.partition_index)] = p.leader_id
        return out

    def list_offsets(self, timestamps: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
        """ListOffsets (read_uncommitted): per partition the offset for its timestamp (-2
        earliest = the log start, -1 latest = the high watermark, else the first offset whose
        timestamp is at least it, -1 when none is). BrokerReplyError on a partition's error."""
        from kafka.protocol.consumer import ListOffsetsRequest, ListOffsetsResponse

        out: dict[TopicPartition, int] = {}
        for node, tps in self._by_leader(timestamps).items():
            by_topic: dict[str, list] = {}
            for tp in tps:
                by_topic.setdefault(tp.topic, []).append(ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition(
                    partition_index=tp.partition, current_leader_epoch=-1, timestamp=timestamps[tp]))
            request = ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=[
                ListOffsetsRequest.ListOffsetsTopic(name=t, partitions=ps) for t, ps in by_topic.items()])
            response = self._call(request, ListOffsetsResponse, LIST_OFFSETS_VERSION, node)
            for topic in response.topics:
                for p in topic.partitions:
                    tp = TopicPartition(topic.name, p.partition_index)
                    if p.error_code:
                        raise BrokerReplyError(f"ListOffsets of {tp} from the broker at {self.bootstrap}: "
                                               f"{error_name(p.error_code)}", p.error_code)
                    out[tp] = p.offset
        return out

    def fetch(self, tp: TopicPartition, offset: int, max_bytes: int, max_wait_ms: int = 0) -> PartitionFetched:
        """One Fetch of ``tp`` from ``offset`` (read_uncommitted, at most ``max_bytes``, the first
        batch whole however large) from its leader."""
        from kafka.protocol.consumer import FetchRequest, FetchResponse

        F = FetchRequest.FetchTopic
        part = F.FetchPartition(partition=tp.partition, current_leader_epoch=-1, fetch_offset=offset,
                                last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=max_bytes)
        request = FetchRequest(replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=1 if max_wait_ms else 0,
                               max_bytes=max_bytes, isolation_level=0, session_id=0, session_epoch=-1,
                               topics=[F(topic=tp.topic, partitions=[part])], forgotten_topics_data=[], rack_id="")
        response = self._call(request, FetchResponse, FETCH_VERSION, self._leader(tp))
        for topic in response.responses:
            for p in topic.partitions:
                if p.partition_index == tp.partition and topic.topic == tp.topic:
                    return PartitionFetched(p.error_code, p.high_watermark, p.log_start_offset, p.records or b"")
        raise BrokerReplyError(f"Fetch of {tp} from the broker at {self.bootstrap}: the response does not "
                               f"name the partition", -1)

    def forget_leaders(self) -> None:
        """Drop what is known of leaders (after NOT_LEADER_OR_FOLLOWER and the like)."""
        self._leaders.clear()

    # --- plumbing -------------------------------------------------------------------------

    def _leader(self, tp: TopicPartition) -> int | None:
        if tp not in self._leaders:
            self.metadata([tp.topic])
        node = self._leaders.get(tp, -1)
        return node if node >= 0 and node in self._nodes else None

    def _by_leader(self, tps: Iterable[TopicPartition]) -> dict[int | None, list[TopicPartition]]:
        out: dict[int | None, list[TopicPartition]] = {}
        for tp in tps:
            out.setdefault(self._leader(tp), []).append(tp)
        return out

    def _call(self, request, response_class, version: int, node: int | None):  # type: ignore[no-untyped-def]
        address, sock = self._connection(node)
        self._correlation += 1
        request.API_VERSION = version
        request.with_header(correlation_id=self._correlation, client_id=CLIENT_ID)
        try:
            sock.sendall(bytes(request.encode(header=True, framed=True)))
            (size,) = struct.unpack(">i", self._exactly(sock, 4))
            payload = self._exactly(sock, size)
        except OSError as e:
            self._drop(address)
            raise BrokerUnreachable(f"no answer from the broker at {address[0]}:{address[1]}: {e}",
                                    f"{address[0]}:{address[1]}") from e
        response = response_class[version].decode(payload, header=True)
        if response.header.correlation_id != self._correlation:
            self._drop(address)
            raise BrokerUnreachable(f"the broker at {address[0]}:{address[1]} answered out of order",
                                    f"{address[0]}:{address[1]}")
        return response

    def _connection(self, node: int | None) -> tuple[tuple[str, int], socket.socket]:
        candidates = [self._nodes[node]] if node is not None and node in self._nodes else self._seeds
        for address in candidates:
            if address in self._socks:
                return address, self._socks[address]
        errors = []
        for address in candidates:
            try:
                sock = socket.create_connection(address, timeout=CONNECT_TIMEOUT_S)
            except OSError as e:
                errors.append(f"{address[0]}:{address[1]}: {e}")
                continue
            sock.settimeout(self._timeout)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._socks[address] = sock
            return address, sock
        shown = ",".join(f"{h}:{p}" for h, p in candidates)
        raise BrokerUnreachable(f"cannot connect to the broker at {shown}: {'; '.join(errors)}", shown)

    def _drop(self, address: tuple[str, int]) -> None:
        sock = self._socks.pop(address, None)
        if sock is not None:
            sock.close()

    @staticmethod
    def _exactly(sock: socket.socket, n: int) -> bytes:
        buf = bytearray(n)
        view, got = memoryview(buf), 0
        while got < n:
            read = sock.recv_into(view[got:], n - got)
            if not read:
                raise ConnectionError("the broker closed the connection")
            got += read
        return buf  # type: ignore[return-value]
