"""Fetch (v4-v12), for consumers: full fetches only.

Reads are bounded by the high watermark (``read_uncommitted``) or the last stable offset
(``read_committed``, equal to the high watermark until tidelog tracks transactions), start at or
before the fetch offset on a batch boundary, and may end mid-batch (clients drop the partial
batch), as Kafka's. Byte limits, as Kafka's ``KafkaApis.handleFetchRequest`` and
``ReplicaManager.readFromLog``: the response holds at most ``min(max_bytes, fetch.max.bytes)`` of
records (the broker key, default 55 MiB; ``min_bytes`` is lowered to it too), and each partition
reads at most ``min(partition_max_bytes, what is left of that)``, except that the first partition
returning data gets at least one whole batch, however large (KIP-74), so a consumer is never
stuck behind a batch bigger than its limits.

A partition named twice is read once, at the place of its first mention with the fetch offset and
limit of its last, as Kafka's ``FetchRequest.fetchData`` (a LinkedHashMap) collapses it. A fetch
from a replica (``replica_id >= 0``) is read as a consumer's: tidelog has no followers, and Kafka's
leader caps a follower's response by ``fetch.max.bytes`` too (``replica.fetch.response.max.bytes``
is what a follower asks for, a setting of the fetching broker).

Memory: the records read are the only large buffers a fetch holds; the response is framed around
them without copying (:mod:`.fetch_response`) and written in bounded chunks by the connection. So
one Fetch costs at most its records (``fetch.max.bytes`` plus one batch) and a small constant.

**Zero copy** (Kafka's ``FileRecords.writeTo``): on a listener without TLS (PLAINTEXT,
SASL_PLAINTEXT) the local reads return :class:`~tidelog.storage.file_slice.FileSlice` ranges of the
segment files instead of their bytes (ranges of at least ``file_slice.MIN_SLICE_BYTES``, 256 KiB;
smaller ones cost less copied), and the connection hands them to the kernel (``sendfile``): the
records never pass through Python, and the response holds one descriptor per such range rather
than its bytes. Every slice of a read that is not sent (a long poll reading again, a
failure, a cancelled fetch) is closed here; a response's are closed by the connection once sent.
Remote-tier reads stay bytes (a response may mix both).

**Where reads run**: a read that would copy little and cannot wait runs on the event loop itself,
saving the thread pool's hop (a submit and two thread wake-ups, ~60-100 us of a lean consumer's
round trip, where with slices the read itself is only an index lookup, a few batch headers and a
``dup``): a ``read_uncommitted`` fetch whose records go out as slices (so at most
``MIN_SLICE_BYTES`` per partition is copied), of at most :data:`LOOP_READ_MAX_PARTITIONS`
partitions, when every log's lock is free at that moment (:meth:`LogManager.held_if_free`: an
append, roll or swap under way sends it to the pool rather than stall every connection behind
it). A failure or remote read met there goes to the pool with the read, which reports it or
starts the remote read (that partition is not read again: a fault is never masked by a retry); a
``read_committed`` fetch (it walks ``.txnindex`` files, and may rebuild them) always uses the pool.
The batch headers read may come from disk when a consumer reads cold data, as the ``sendfile``
of the same pages does on the loop (Kafka's network threads share that exposure).

**Long poll** (Kafka's delayed fetch): when fewer than ``min_bytes`` are read and ``max_wait_ms``
allows, the fetch waits for an append to one of its partitions and reads them all again,
answering as soon as ``min_bytes`` are there, or at ``max_wait_ms`` with what there is. An error in
any partition answers at once. Only appends through this server wake a fetch (they are the only
appends while it owns the log dirs).

**Remote tier** (tiered storage, Kafka 4.2's ``DelayedRemoteFetch``): a partition whose local read
raises OffsetMovedToTieredStorageError (its offset is below the local log start) is read from the
remote tier on the manager's remote reader threads (:meth:`LogManager.fetch_remote`), never on the
event loop or the thread pool of local reads; it takes its place in the byte limits with its own
limit reserved (so the response stays within ``fetch.max.bytes`` plus one batch). The response
then waits for every remote read up to ``remote.fetch.max.wait.ms``; a read not done by then comes
back empty without an error (the consumer asks again), and the fetch answers without a long poll.
Local partitions' results are delayed by that wait at most.

**Fetch sessions** (KIP-227) are refused the way Kafka's broker does when it keeps no session
cache: a full fetch (epoch 0 or -1) is answered sessionless (session id 0, so the client keeps
sending full fetches); an incremental one (epoch > 0) gets FETCH_SESSION_ID_NOT_FOUND.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import Future
from dataclasses import dataclass, replace
from typing import Any

from tidelog.errors import OffsetMovedToTieredStorageError
from tidelog.manager import LogManager
from tidelog.manager.reports import PartitionFetch
from tidelog.server.codec import Request
from tidelog.server.context import ApiContext, ConnectionInfo
from tidelog.server.errors import ErrorCode, error_code
from tidelog.server.fetch_response import PartitionResponse, ResponseParts, encode_fetch_response
from tidelog.server.metrics.broker_metrics import BrokerTopicMetrics, ServerMetrics
from tidelog.storage.fetch_info import FetchIsolation
from tidelog.storage.file_slice import FileSlice, close_records
from tidelog.topic_partition import TopicPartition

READ_COMMITTED = 1
LOOP_READ_MAX_PARTITIONS = 4  # reads of more partitions go to the pool (module doc)


@dataclass(frozen=True, slots=True)
class FetchSpec:
    """One partition to read: where from and how much."""

    topic: str
    partition: int
    fetch_offset: int
    max_bytes: int


@dataclass(frozen=True, slots=True)
class PartitionRead:
    """What one partition returned (offsets -1 on error, as Kafka's)."""

    spec: FetchSpec
    error: ErrorCode
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    records: bytes | FileSlice = b""  # a FileSlice where the fetch read as_slice
    aborted: tuple[tuple[int, int], ...] | None = None
    remote: Future[PartitionFetch] | None = None  # a read from the remote tier under way


async def handle_fetch(ctx: ApiContext, conn: ConnectionInfo, request: Request) -> ResponseParts:
    body = request.body
    if body.session_epoch > 0:
        ctx.metrics.requests.on_error_counts("Fetch", {ErrorCode.FETCH_SESSION_ID_NOT_FOUND: 1})
        return encode_fetch_response(request.api_version, request.correlation_id,
                                     ErrorCode.FETCH_SESSION_ID_NOT_FOUND, 0, [])
    committed = body.isolation_level == READ_COMMITTED
    isolation = FetchIsolation.TXN_COMMITTED if committed else FetchIsolation.HIGH_WATERMARK
    max_bytes = max(0, min(body.max_bytes, ctx.config.fetch_max_bytes))
    reads = await _read_until(ctx, fetch_specs(body), isolation, max_bytes, min(body.min_bytes, max_bytes),
                              body.max_wait_ms, zero_copy(ctx, conn))
    try:
        _count_response(ctx.metrics, reads)
        return encode_fetch_response(request.api_version, request.correlation_id, 0, 0, _responses(reads, committed))
    except BaseException:
        close_reads(reads)
        raise


def zero_copy(ctx: ApiContext, conn: ConnectionInfo) -> bool:
    """Whether fetches on ``conn`` read file slices for ``sendfile``: its listener has no TLS
    (a TLS connection encrypts every byte in user space anyway)."""
    return ctx.config.security_for(conn.listener_name).tls is None


def close_reads(reads: list[PartitionRead]) -> None:
    """Close the file slices of ``reads`` (reads not sent). Idempotent."""
    for read in reads:
        close_records(read.records)


def fetch_specs(body: Any) -> list[FetchSpec]:
    """The partitions of a Fetch request body, each once: a partition named again replaces the
    offset and limit of its first mention, keeping its place (Kafka's LinkedHashMap)."""
    specs: dict[tuple[str, int], FetchSpec] = {}
    for topic in body.topics:
        for p in topic.partitions:
            specs[topic.topic, p.partition] = FetchSpec(topic.topic, p.partition, p.fetch_offset, p.partition_max_bytes)
    return list(specs.values())


async def _read_until(ctx: ApiContext, specs: list[FetchSpec], isolation: FetchIsolation, max_bytes: int,
                      min_bytes: int, max_wait_ms: int, as_slice: bool = False) -> list[PartitionRead]:
    """Read; while fewer than ``min_bytes`` came back and no partition failed, wait for an append to
    one of ``specs`` (or the deadline, on the event loop's clock) and read again. ``as_slice``:
    local records as file slices; those of a read not returned are closed here (a read dropped
    by a cancellation while its thread ran: when it is freed)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max(0, max_wait_ms) / 1000
    first = True
    tps = [TopicPartition(s.topic, s.partition) for s in specs]  # once: every read again uses them
    while True:
        ticket = ctx.arrivals.ticket(tps)
        reads = _read_on_loop(ctx, specs, tps, isolation, max_bytes, as_slice)
        if not isinstance(reads, list):
            reads = await ctx.run(read_partitions, ctx.manager, specs, isolation, max_bytes, as_slice, False, reads)
        try:
            if reads.__class__ is _RemoteReads:  # (one check: no per-partition work for local-only fetches)
                ctx.arrivals.cancel(ticket)
                return await _finish_remote(ctx, reads)
            remaining = deadline - loop.time()
            if _satisfied(reads, min_bytes) or remaining <= 0:
                ctx.arrivals.cancel(ticket)
                return reads
            if first:  # delayed: this first read counts, as the final one will (Kafka reads twice too)
                first = False
                _count_reads(ctx.metrics.topics, reads)
            if not await ctx.arrivals.wait(ticket, remaining):
                ctx.arrivals.cancel(ticket)
                return reads
        except BaseException:
            close_reads(reads)
            raise
        close_reads(reads)  # read again below


def _count_reads(topics: BrokerTopicMetrics, reads: list[PartitionRead]) -> None:
    """TotalFetchRequests (and FailedFetchRequests) of one read of every partition. Event loop."""
    for read in reads:
        topics.on_fetch_read(read.spec.topic, read.error)


def _count_response(metrics: ServerMetrics, reads: list[PartitionRead]) -> None:
    """The final read's TotalFetchRequests, the response's BytesOut and its ErrorsPerSec (the
    top-level NONE and each partition's code). Event loop; O(partitions), no lock."""
    topics = metrics.topics
    counts = {ErrorCode.NONE.value: 1}
    for read in reads:
        topic, error = read.spec.topic, read.error
        topics.on_fetch_read(topic, error, len(read.records))
        counts[error] = counts.get(error, 0) + 1
    metrics.requests.on_error_counts("Fetch", counts)


def _satisfied(reads: list[PartitionRead], min_bytes: int) -> bool:
    """Kafka's DelayedFetch completion: enough bytes, an error, or nothing to fetch."""
    return not reads or any(r.error != ErrorCode.NONE for r in reads) or sum(len(r.records) for r in reads) >= min_bytes


def _read_on_loop(ctx: ApiContext, specs: list[FetchSpec], tps: list[TopicPartition], isolation: FetchIsolation,
                  max_bytes: int, as_slice: bool) -> list[PartitionRead] | _ReadOnPool | None:
    """:func:`read_partitions` on the event loop, where it cannot wait (module doc, *where reads
    run*). None when it may not run there, a :class:`_ReadOnPool` when it met a partition's failure
    or remote read: either way the pool reads."""
    if not as_slice or isolation is not FetchIsolation.HIGH_WATERMARK or len(specs) > LOOP_READ_MAX_PARTITIONS:
        return None
    with ctx.manager.held_if_free(tps) as free:
        if free:
            try:
                return read_partitions(ctx.manager, specs, isolation, max_bytes, as_slice, on_loop=True)
            except _ReadOnPool as met:
                return met
    return None


class _ReadOnPool(Exception):
    """What a read on the event loop met that the pool must handle: ``spec``'s read raised
    ``error`` (reporting a disk fault takes the manager's lock; a remote read is started there).
    The pool's read takes that failure as its own for ``spec`` rather than read it again, so a
    fault is reported once and never masked by a second read that succeeds."""

    def __init__(self, spec: FetchSpec, error: Exception) -> None:
        super().__init__(spec, error)
        self.spec, self.error = spec, error


def read_partitions(manager: LogManager, specs: list[FetchSpec], isolation: FetchIsolation,
                    max_bytes: int, as_slice: bool = False, on_loop: bool = False,
                    met: _ReadOnPool | None = None) -> list[PartitionRead]:
    """Read every partition in order within the byte limits (see module doc); ``as_slice``: local
    records as file slices (the caller closes them). Runs in the thread pool, taking what a read
    on the loop ``met`` as that partition's outcome; or on the event loop with ``on_loop`` (the
    logs' locks held), where a failure or remote read raises :class:`_ReadOnPool` instead."""
    left = max_bytes
    min_one = True
    reads: list[PartitionRead] = []
    try:
        for spec in specs:
            limit = max(0, min(spec.max_bytes, left))
            failed = met.error if met is not None and met.spec is spec else None
            read = _read_one(manager, spec, isolation, limit, min_one, as_slice, on_loop, failed)
            if read.records:
                min_one = False
                left -= len(read.records)
            elif read.remote is not None:  # its bytes are not known yet: its limit is reserved
                min_one = False
                left -= limit
                if reads.__class__ is not _RemoteReads:  # copied once, at the first remote read
                    reads = _RemoteReads(reads)
            reads.append(read)
    except BaseException:
        close_reads(reads)
        raise
    return reads


class _RemoteReads(list[PartitionRead]):
    """The reads of a fetch of which at least one is a remote read under way."""


def _read_one(manager: LogManager, spec: FetchSpec, isolation: FetchIsolation, limit: int,
              min_one: bool, as_slice: bool, on_loop: bool, failed: Exception | None) -> PartitionRead:
    tp = TopicPartition(spec.topic, spec.partition)
    try:  # limit 0: the range check only
        if failed is not None:
            raise failed
        got = manager.fetch(tp, spec.fetch_offset, limit, isolation, min_one_message=min_one, as_slice=as_slice)
    except Exception as e:  # noqa: BLE001 - every failure becomes this partition's error code
        if on_loop:
            raise _ReadOnPool(spec, e) from e
        if isinstance(e, OffsetMovedToTieredStorageError):
            return _read_remote(manager, tp, spec, isolation, limit, min_one)
        manager.report_read_error(tp, "fetch", e)  # a disk fault fails this partition's read
        return PartitionRead(spec, error_code(e))
    return PartitionRead(spec, ErrorCode.NONE, got.high_watermark, got.last_stable_offset, got.log_start_offset,
                         got.records, got.aborted)


def _read_remote(manager: LogManager, tp: TopicPartition, spec: FetchSpec, isolation: FetchIsolation, limit: int,
                 min_one: bool) -> PartitionRead:
    """Start the remote read of a partition whose local read raised OffsetMovedToTieredStorageError
    (without a remote tier :meth:`LogManager.fetch_remote` raises it again: that error's code)."""
    try:
        future = manager.fetch_remote(tp, spec.fetch_offset, limit, isolation, min_one_message=min_one)
    except Exception as e:  # noqa: BLE001 - no remote tier, a full reader queue, a partition gone
        return PartitionRead(spec, error_code(e))
    return PartitionRead(spec, ErrorCode.NONE, remote=future)


async def _finish_remote(ctx: ApiContext, reads: list[PartitionRead]) -> list[PartitionRead]:
    """Wait for the remote reads of ``reads`` up to ``remote.fetch.max.wait.ms``; each done one
    gives its records or its error, each other one is cancelled and comes back empty without an
    error (Kafka's expired DelayedRemoteFetch)."""
    waiting = {id(r): asyncio.wrap_future(r.remote) for r in reads if r.remote is not None}
    await asyncio.wait(waiting.values(), timeout=ctx.manager.broker.remote_fetch_max_wait_ms / 1000)
    return [r if r.remote is None else _remote_result(ctx.manager, r, waiting[id(r)]) for r in reads]


def _remote_result(manager: LogManager, read: PartitionRead, waited: asyncio.Future[PartitionFetch]) -> PartitionRead:
    spec = read.spec
    if not waited.done() or waited.cancelled():
        waited.cancel()  # cancels the read if it has not started
        try:
            now = manager.offsets(TopicPartition(spec.topic, spec.partition))
        except Exception as e:  # noqa: BLE001 - the partition went away meanwhile
            return PartitionRead(spec, error_code(e))
        return PartitionRead(spec, ErrorCode.NONE, now.high_watermark, now.last_stable_offset, now.log_start_offset)
    error = waited.exception()
    if error is not None:
        return PartitionRead(spec, error_code(error))
    got = waited.result()
    return replace(read, high_watermark=got.high_watermark, last_stable_offset=got.last_stable_offset,
                   log_start_offset=got.log_start_offset, records=got.records, aborted=got.aborted, remote=None)


def _responses(reads: list[PartitionRead], committed: bool) -> list[tuple[str, list[PartitionResponse]]]:
    """Grouped by topic, in order of first mention. Aborted transactions are listed for
    ``read_committed`` fetches only (null otherwise, as Kafka)."""
    topics: dict[str, list[PartitionResponse]] = {}
    for read in reads:
        aborted = (read.aborted or ()) if committed else None
        topics.setdefault(read.spec.topic, []).append(PartitionResponse(
            read.spec.partition, read.error, read.high_watermark, read.last_stable_offset, read.log_start_offset,
            aborted, read.records))
    return list(topics.items())
