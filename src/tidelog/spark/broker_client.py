"""The one small blocking Kafka-protocol client of the Spark side: connections over plain
sockets, requests and responses encoded by kafka-python's protocol classes (no consumer, no
per-record Python objects: Fetch gives the log's raw batch bytes).

* **reads** (:mod:`tidelog.spark.broker_tail`): Metadata, ListOffsets and Fetch, on the driver
  (partitions, earliest/latest/by-time offsets) and on the executors (Fetch of the tail not yet
  tiered), each routed to the partition's leader. Versions are fixed at ones both tidelog and
  Kafka 3.x/4.x brokers serve: Metadata v12, ListOffsets v7, Fetch v12 (topic names, raw records).
* **staged writes** (:mod:`tidelog.spark.broker_commit`): tidelog's own APIs through
  :meth:`BrokerClient.call`, sent to the first address of ``kafka.bootstrap.servers`` that
  accepts a connection.

One connection per broker, opened on first use; PLAINTEXT only. Request timeout and client id
are the caller's (constructor arguments).

Errors: a broker that cannot be reached raises :class:`BrokerUnreachableError` (``.address``
names it); a connection that breaks mid-request (closed, reset, timed out, an answer out of
order) raises its subclass :class:`ConnectionBrokenError`, so a caller can tell a broker that is
down from one that closes the connection on a request (as Kafka does on an API key it does not
know). Per-partition Kafka error codes are returned (Fetch) or raised as
:class:`BrokerReplyError` with Kafka's error name (Metadata, ListOffsets). A malformed
``kafka.bootstrap.servers`` raises InvalidRequestError naming the option and the bad entry
(:func:`parse_bootstrap`). Not thread-safe: one client per planning, per task or per driver call.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from tidelog.errors import InvalidRequestError, TidelogError
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
READ_UNCOMMITTED, READ_COMMITTED = 0, 1
"""Kafka's isolation levels (the ``isolation_level`` byte of Fetch and ListOffsets)."""

NONE = 0
OFFSET_OUT_OF_RANGE = 1
UNKNOWN_TOPIC_OR_PARTITION = 3
LEADER_NOT_AVAILABLE = 5
NOT_LEADER_OR_FOLLOWER = 6
OFFSET_MOVED_TO_TIERED_STORAGE = 109
RETRIABLE = frozenset({LEADER_NOT_AVAILABLE, NOT_LEADER_OR_FOLLOWER, 7, 13, 56, 74, 75})
"""Codes a read answers by refreshing metadata and asking again (leader moves, timeouts, a
storage error on one replica, fenced or unknown leader epochs)."""


class BrokerUnreachableError(TidelogError, ConnectionError):
    """No answer from the broker at ``address`` (``host:port``, or the comma-separated addresses
    tried): none of them accepts a connection, or (:class:`ConnectionBrokenError`) the connection
    broke before the answer."""

    def __init__(self, message: str, address: str = "") -> None:
        super().__init__(message)
        self.address = address


class ConnectionBrokenError(BrokerUnreachableError):
    """The connection to the broker at ``address`` was made, then broke before the answer
    (closed, reset, timed out, an answer out of order); the client has dropped it."""


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
    partial batch); offsets are -1 with an error. ``last_stable_offset`` is the broker's (-1 when
    it does not say); ``aborted`` the ``(producer id, first offset)`` of the aborted transactions
    overlapping the records of a read_committed Fetch (empty for read_uncommitted)."""

    error: int
    high_watermark: int
    log_start_offset: int
    records: bytes
    last_stable_offset: int = -1
    aborted: tuple[tuple[int, int], ...] = ()


def parse_bootstrap(text: str) -> list[tuple[str, int]]:
    """``host:port[,host:port...]`` (IPv6 hosts in brackets) as addresses; InvalidRequestError
    naming ``kafka.bootstrap.servers`` and the bad entry."""
    out = []
    for entry in (e.strip() for e in text.split(",")):
        if not entry:
            continue
        host, sep, port = entry.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise InvalidRequestError(f"kafka.bootstrap.servers entry '{entry}' is not HOST:PORT; expected "
                                      f"HOST:PORT[,HOST:PORT...] (IPv6 hosts in brackets)")
        out.append((host.strip("[]"), int(port)))
    if not out:
        raise InvalidRequestError("kafka.bootstrap.servers is empty: give HOST:PORT[,HOST:PORT...] of a broker")
    return out


def show(address: tuple[str, int]) -> str:
    """``host:port`` of ``address``, as messages and :attr:`BrokerUnreachableError.address` give it."""
    return f"{address[0]}:{address[1]}"


class BrokerClient:
    """Connections to the brokers of one cluster, found from ``bootstrap`` (see module doc):
    ``timeout_s`` bounds each request's answer, ``client_id`` goes in each request header.
    Not thread-safe."""

    def __init__(self, bootstrap: str, *, timeout_s: float = REQUEST_TIMEOUT_S, client_id: str = CLIENT_ID) -> None:
        self.bootstrap = bootstrap
        self._seeds = parse_bootstrap(bootstrap)
        self._timeout = timeout_s
        self.client_id = client_id
        self.last_address = ""
        """``host:port`` the last request went to ('' before any)."""
        self._socks: dict[tuple[str, int], socket.socket] = {}
        self._nodes: dict[int, tuple[str, int]] = {}
        self._leaders: dict[TopicPartition, int] = {}
        self.topic_ids: dict[str, str] = {}
        self._correlation = 0

    def close(self) -> None:
        """Close every connection (the next request opens a new one)."""
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
        response = self.call(request, MetadataResponse, METADATA_VERSION)
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

    def list_offsets(self, timestamps: dict[TopicPartition, int],
                     isolation_level: int = READ_UNCOMMITTED) -> dict[TopicPartition, int]:
        """ListOffsets: per partition the offset for its timestamp (-2 earliest = the log start,
        -1 latest = the high watermark, or the last stable offset under ``READ_COMMITTED``, else
        the first offset whose timestamp is at least it, -1 when none is). BrokerReplyError on a
        partition's error."""
        from kafka.protocol.consumer import ListOffsetsRequest, ListOffsetsResponse

        out: dict[TopicPartition, int] = {}
        for node, tps in self._by_leader(timestamps).items():
            by_topic: dict[str, list] = {}
            for tp in tps:
                by_topic.setdefault(tp.topic, []).append(ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition(
                    partition_index=tp.partition, current_leader_epoch=-1, timestamp=timestamps[tp]))
            request = ListOffsetsRequest(replica_id=-1, isolation_level=isolation_level, topics=[
                ListOffsetsRequest.ListOffsetsTopic(name=t, partitions=ps) for t, ps in by_topic.items()])
            response = self.call(request, ListOffsetsResponse, LIST_OFFSETS_VERSION, node)
            for topic in response.topics:
                for p in topic.partitions:
                    tp = TopicPartition(topic.name, p.partition_index)
                    if p.error_code:
                        raise BrokerReplyError(f"ListOffsets of {tp} from the broker at {self.bootstrap}: "
                                               f"{error_name(p.error_code)}", p.error_code)
                    out[tp] = p.offset
        return out

    def fetch(self, tp: TopicPartition, offset: int, max_bytes: int, max_wait_ms: int = 0,
              isolation_level: int = READ_UNCOMMITTED) -> PartitionFetched:
        """One Fetch of ``tp`` from ``offset`` (at most ``max_bytes``, the first batch whole
        however large) from its leader; under ``READ_COMMITTED`` the records end at the last
        stable offset and the answer lists the aborted transactions overlapping them."""
        from kafka.protocol.consumer import FetchRequest, FetchResponse

        F = FetchRequest.FetchTopic
        part = F.FetchPartition(partition=tp.partition, current_leader_epoch=-1, fetch_offset=offset,
                                last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=max_bytes)
        request = FetchRequest(replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=1 if max_wait_ms else 0,
                               max_bytes=max_bytes, isolation_level=isolation_level, session_id=0,
                               session_epoch=-1,
                               topics=[F(topic=tp.topic, partitions=[part])], forgotten_topics_data=[], rack_id="")
        response = self.call(request, FetchResponse, FETCH_VERSION, self._leader(tp))
        for topic in response.responses:
            for p in topic.partitions:
                if p.partition_index == tp.partition and topic.topic == tp.topic:
                    aborted = tuple((a.producer_id, a.first_offset) for a in p.aborted_transactions or ())
                    return PartitionFetched(p.error_code, p.high_watermark, p.log_start_offset, p.records or b"",
                                            p.last_stable_offset, aborted)
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

    def connect(self, node: int | None = None) -> str:
        """``host:port`` of the connection to broker ``node`` (the leader's id from Metadata), or
        with None to the first address of ``bootstrap`` that accepts one; opened unless already
        open. BrokerUnreachableError naming every address tried when none accepts."""
        return show(self._connection(node)[0])

    def call(self, request, response_class, version: int, node: int | None = None):  # type: ignore[no-untyped-def]
        """Send ``request`` at ``version`` to broker ``node`` (None: the bootstrap connection) and
        return its decoded ``response_class``. BrokerUnreachableError when no connection is made,
        ConnectionBrokenError when it breaks before the answer (then dropped: the next call
        connects again); the caller decides whether to retry."""
        address, sock = self._connection(node)
        self.last_address = show(address)
        self._correlation += 1
        request.API_VERSION = version
        request.with_header(correlation_id=self._correlation, client_id=self.client_id)
        try:
            sock.sendall(bytes(request.encode(header=True, framed=True)))
            (size,) = struct.unpack(">i", self._exactly(sock, 4))
            payload = self._exactly(sock, size)
        except OSError as e:
            self._drop(address)
            raise ConnectionBrokenError(f"the connection to the broker at {show(address)} broke before its "
                                        f"answer: {e}", show(address)) from e
        response = response_class.decode(payload, version=version, header=True)
        if response.header.correlation_id != self._correlation:
            self._drop(address)
            raise ConnectionBrokenError(f"the broker at {show(address)} answered out of order", show(address))
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
                errors.append(f"{show(address)}: {e}")
                continue
            sock.settimeout(self._timeout)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._socks[address] = sock
            return address, sock
        shown = ",".join(show(a) for a in candidates)
        raise BrokerUnreachableError(f"cannot connect to the broker at {shown}: {'; '.join(errors)}", shown)

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
