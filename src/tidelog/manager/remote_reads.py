"""RemoteReader: the broker's reads from the remote tier (Kafka's ``RemoteLogReader`` pool and
``RemoteLogManager.read`` / ``findOffsetByTimestamp``).

A consumer's fetch below the local log start offset raises ``OffsetMovedToTieredStorageError``
from the local read; the fetch is then read here instead, on a pool of
``remote.log.reader.threads`` threads, so a slow store never holds a thread that serves local
data. At most ``remote.log.reader.max.pending.tasks`` reads wait for a thread (Kafka's queue
bound); past that :meth:`RemoteReader.submit` raises :class:`RemoteReadQueueFullError` (Kafka
answers UNKNOWN_SERVER_ERROR there too).

A remote fetch (:meth:`RemoteReader.read`, Kafka's ``RLM.read``):

1. the FINISHED remote segment holding the offset, from the partition's remote metadata
   (:meth:`RemoteTier.metadata_of`); none: ``OffsetOutOfRangeError`` "... does not exist in the
   remote tier";
2. its offset index from the :class:`~tidelog.remote.index_cache.RemoteIndexCache`;
3. ranged reads from the index's position (:func:`~tidelog.remote.remote_read.read_segment`): whole
   batches from the first whose last offset is >= the offset, up to ``max_bytes``, one segment;
   the bytes come through the :class:`~tidelog.remote.chunk_cache.ChunkCache` (aligned 8 MiB
   ranged GETs, 64 MiB in memory at most, the next three chunks read ahead: a consumer catching
   up finds its next fetch in memory);
4. a segment without such a batch (offsets compacted away) moves to the next remote segment, and
   past the last one to the local log; a segment whose object is gone because retention deleted
   it or a compaction replaced it meanwhile (it is no longer FINISHED) is looked up again (step
   1: its replacement, or ``OffsetOutOfRangeError``); an object gone while its segment is still
   FINISHED is the store's not-found error, naming the partition, the segment and the object;
5. for ``read_committed``, the aborted transactions of the remote ``.txnindex`` files from that
   segment on, then the local ones (:meth:`aborted_transactions`), up to the end of the records
   (of a read that went on in the local log: up to the last stable offset, as a local fetch).

ListOffsets by timestamp on a tiered log searches the FINISHED remote segments below the local log
start first (:meth:`offset_for_timestamp_async`), as Kafka's ``findOffsetByTimestamp``, again from
the start when a segment it reads was deleted or replaced meanwhile; the caller then searches the
local segments.

Thread-safety: every public method is thread-safe. ``_lock`` guards the in-flight count and the
closed flag; the index cache and the partition metadata take their own locks; logs are read
through their own.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from itertools import takewhile
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path
from typing import TypeVar

from tidelog.errors import OffsetOutOfRangeError, TidelogError
from tidelog.manager.reports import PartitionFetch
from tidelog.remote.aborted_txns import remote_aborted_transactions
from tidelog.remote.chunk_cache import ChunkCache
from tidelog.remote.index_cache import CACHE_DIR_NAME, RemoteIndexCache
from tidelog.remote.errors import RemoteResourceNotFoundError, with_context
from tidelog.remote.metadata import RemoteLogSegmentMetadata, RemoteLogSegmentState
from tidelog.remote.metadata_log import RemotePartitionMetadata, SegmentRef
from tidelog.remote.remote_read import SegmentRead, offset_for_timestamp_in, read_segment
from tidelog.remote.store import RemoteStore
from tidelog.storage.config import BrokerConfig
from tidelog.storage.fetch_info import FetchIsolation, TimestampAndOffset
from tidelog.storage.log import Log
from tidelog.storage.txn_index import AbortedTxn
from tidelog.topic_partition import TopicPartition

log = logging.getLogger(__name__)

T = TypeVar("T")
MetadataOf = Callable[[TopicPartition, Log], RemotePartitionMetadata]


class RemoteReadQueueFullError(TidelogError):
    """More remote reads are waiting than ``remote.log.reader.max.pending.tasks`` allows
    (UNKNOWN_SERVER_ERROR, as Kafka's rejected task). Context: ``pending``, ``threads``."""


class RemoteListOffsetsTimeoutError(TidelogError):
    """A ListOffsets lookup in the remote tier took longer than
    ``remote.list.offsets.request.timeout.ms`` (REQUEST_TIMED_OUT). Context: ``topic_partition``."""

    error_code = 7


class RemoteReader:
    """The remote tier's reads for one broker (see the module doc). ``log_dir``: the first log
    dir, whose ``remote-log-index-cache/`` holds the index cache; ``metadata_of(tp, log)``: the
    partition's remote metadata (loaded once, kept by the RemoteTier)."""

    def __init__(self, broker: BrokerConfig, store: RemoteStore, log_dir: Path, metadata_of: MetadataOf) -> None:
        self.store = store
        self._metadata_of = metadata_of
        self._threads = broker.remote_log_reader_threads
        self._max_pending = broker.remote_log_reader_max_pending_tasks
        self.list_offsets_timeout_s = broker.remote_list_offsets_request_timeout_ms / 1000
        self.index_cache = RemoteIndexCache(store, Path(log_dir) / CACHE_DIR_NAME,
                                            broker.remote_log_index_file_cache_total_size_bytes)
        self.chunks = ChunkCache(store)
        self._pool = ThreadPoolExecutor(self._threads, thread_name_prefix="tidelog-remote-reader")
        self._lock = threading.Lock()
        self._in_flight = 0
        self._closed = False

    # --- the pool --------------------------------------------------------------------------------

    def submit(self, fn: Callable[..., T], *args: object) -> Future[T]:
        """Run ``fn(*args)`` on a reader thread. :class:`RemoteReadQueueFullError` when
        ``remote.log.reader.max.pending.tasks`` reads already wait for a thread. Thread-safe: ``_lock``."""
        with self._lock:
            if self._closed:
                raise TidelogError("the remote reader is shut down")
            if self._in_flight >= self._threads + self._max_pending:
                raise RemoteReadQueueFullError(
                    "remote read queue is full (remote.log.reader.max.pending.tasks reads wait for a "
                    "remote.log.reader.threads thread)", pending=self._max_pending, threads=self._threads)
            self._in_flight += 1
        try:
            future = self._pool.submit(fn, *args)
        except BaseException:
            self._done(None)
            raise
        future.add_done_callback(self._done)
        return future

    def _done(self, _future: object) -> None:
        with self._lock:
            self._in_flight -= 1

    @property
    def in_flight(self) -> int:
        """Reads queued or running now. Thread-safe: ``_lock``."""
        with self._lock:
            return self._in_flight

    def close(self) -> None:
        """Stop the pool (queued reads are cancelled, running ones finish) and close the index
        cache. Idempotent. Thread-safe: ``_lock``."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._pool.shutdown(wait=True, cancel_futures=True)
        self.chunks.close()
        self.index_cache.close()

    # --- fetch -----------------------------------------------------------------------------------

    def fetch(self, tp: TopicPartition, lg: Log, offset: int, max_bytes: int, isolation: FetchIsolation,
              min_one_message: bool = True) -> Future[PartitionFetch]:
        """:meth:`read` on a reader thread (see :meth:`submit` for the bound); a failure other than
        ``OffsetOutOfRangeError`` is also logged (the answer carries only its code), as Kafka's
        ``RemoteLogReader``. Thread-safe."""
        return self.submit(self._read_logged, tp, lg, offset, max_bytes, isolation, min_one_message)

    def _read_logged(self, tp: TopicPartition, lg: Log, offset: int, max_bytes: int, isolation: FetchIsolation,
                     min_one_message: bool) -> PartitionFetch:
        try:
            return self.read(tp, lg, offset, max_bytes, isolation, min_one_message)
        except OffsetOutOfRangeError:
            raise
        except Exception as e:
            log.error("remote read of %s at offset %d failed: %s", tp, offset, e)
            raise

    def read(self, tp: TopicPartition, lg: Log, offset: int, max_bytes: int, isolation: FetchIsolation,
             min_one_message: bool = True) -> PartitionFetch:
        """A consumer's fetch of ``tp`` from the remote tier (module doc, steps 1-5), on the calling
        thread; the offsets are the log's, taken after the read. Raises ``OffsetOutOfRangeError``
        when no FINISHED remote segment holds ``offset`` (also when retention deleted it during
        the read), the store's and the read's errors otherwise. Thread-safe."""
        metadata = self._metadata_of(tp, lg)
        segment = _segment_holding(metadata, tp, lg, offset)
        records, next_offset = b"", -1
        while segment is not None:
            try:
                got = self._read_segment(tp, segment, offset, max_bytes, min_one_message)
            except RemoteResourceNotFoundError as e:
                _raise_unless_changed(metadata, tp, segment, e)
                segment = _segment_holding(metadata, tp, lg, offset)  # deleted or replaced meanwhile: again
                continue
            if got.found:
                records, next_offset = got.records, got.next_offset
                break
            segment = _next_segment(metadata, segment, lg.local_log_start_offset)
        else:  # no remote batch at or past the offset: the local log holds the next one (as a local fetch)
            offset = max(offset, lg.local_log_start_offset)
            records = lg.read(offset, max_bytes, isolation, min_one_message).records
            next_offset = lg.last_stable_offset
        aborted = None
        if isolation is FetchIsolation.TXN_COMMITTED:
            found = self.aborted_transactions(tp, lg, offset, next_offset) if records else []
            aborted = tuple((t.producer_id, t.first_offset) for t in found)
        return PartitionFetch(records, lg.high_watermark, lg.last_stable_offset, lg.log_start_offset, aborted)

    def _read_segment(self, tp: TopicPartition, segment: RemoteLogSegmentMetadata, offset: int, max_bytes: int,
                      min_one_message: bool) -> SegmentRead:
        size = segment.segment_size_in_bytes
        with self.index_cache.indexes(segment) as indexes:
            return read_segment(self.store, segment, indexes.offset, max(offset, segment.start_offset), max_bytes,
                                min_one_message, partition=str(tp),
                                get_range=lambda k, s, n: self.chunks.get_range(k, s, n, object_size=size))

    def aborted_transactions(self, tp: TopicPartition, lg: Log, start: int, end: int) -> list[AbortedTxn]:
        """The aborted transactions overlapping [``start``, ``end``) (Kafka's
        ``collectAbortedTransactions`` on a tiered log): the non-empty remote ``.txnindex`` files of
        the remote segments from the one holding ``start`` (below the local log start), then the
        local ones, until an index says the search is complete. Thread-safe; on the calling thread."""
        if end <= start:
            return []
        found, complete = remote_aborted_transactions(self.index_cache, self._metadata_of(tp, lg).finished_segments(),
                                                      start, end, below=lg.local_log_start_offset)
        if not complete:
            found.extend(lg.collect_aborted_transactions(start, end))
        return found

    # --- ListOffsets -----------------------------------------------------------------------------

    def offset_for_timestamp_async(self, tp: TopicPartition, lg: Log,
                                   timestamp: int) -> Future[TimestampAndOffset | None]:
        """The first record with a timestamp >= ``timestamp`` in the remote segments below the
        local log start and at or past the log start offset, searched on a reader thread (see
        :meth:`submit` for the bound); None in the future when none has one (the caller searches
        the local log then). Thread-safe."""
        return self.submit(self._offset_for_timestamp, tp, lg, timestamp)

    def wait_for_list_offsets(self, tp: TopicPartition, timestamp: int,
                              future: Future[TimestampAndOffset | None]) -> TimestampAndOffset | None:
        """``future``'s answer, waited for at most ``remote.list.offsets.request.timeout.ms``
        (then cancelled: :class:`RemoteListOffsetsTimeoutError`). Thread-safe; blocks the caller."""
        try:
            return future.result(self.list_offsets_timeout_s)
        except FutureTimeout:
            future.cancel()
            raise self.list_offsets_timeout(tp, timestamp) from None

    def list_offsets_timeout(self, tp: TopicPartition, timestamp: int) -> RemoteListOffsetsTimeoutError:
        """The error of a remote ListOffsets lookup that took too long."""
        return RemoteListOffsetsTimeoutError(
            f"the remote tier lookup by timestamp {timestamp} took longer than "
            f"remote.list.offsets.request.timeout.ms", topic_partition=str(tp))

    def _offset_for_timestamp(self, tp: TopicPartition, lg: Log, timestamp: int) -> TimestampAndOffset | None:
        metadata = self._metadata_of(tp, lg)
        while True:  # searched again from the start when a segment was deleted or replaced meanwhile
            log_start, local_start = lg.log_start_offset, lg.local_log_start_offset
            below_local = takewhile(lambda s: s.start_offset < local_start, metadata.finished_segments())
            try:
                return offset_for_timestamp_in(self.store, self.index_cache, below_local, timestamp, log_start)
            except RemoteResourceNotFoundError as e:
                _raise_unless_changed(metadata, tp, e.context["segment"], e)


def _raise_unless_changed(metadata: RemotePartitionMetadata, tp: TopicPartition, segment: SegmentRef,
                          error: RemoteResourceNotFoundError) -> None:
    """Return when ``segment`` is no longer FINISHED (retention deleted it or a compaction replaced
    it while it was read: the caller looks again); else raise ``error`` (an object gone behind
    tidelog's back) with the partition and the segment added."""
    current = metadata.segment(segment)
    if current is not None and current.state is RemoteLogSegmentState.COPY_SEGMENT_FINISHED:
        raise with_context(error, partition=str(tp), segment=current.id) from error


def _segment_holding(metadata: RemotePartitionMetadata, tp: TopicPartition, lg: Log,
                     offset: int) -> RemoteLogSegmentMetadata:
    """The FINISHED segment holding ``offset``; ``OffsetOutOfRangeError`` when none does."""
    segment = metadata.segment_for_offset(offset)
    if segment is None:
        raise OffsetOutOfRangeError(
            f"offset {offset} does not exist in the remote tier (remote offsets up to {metadata.highest_offset()}, "
            f"log start {lg.log_start_offset}, local log from {lg.local_log_start_offset})", topic_partition=str(tp))
    return segment


def _next_segment(metadata: RemotePartitionMetadata, segment: RemoteLogSegmentMetadata,
                  local_start: int) -> RemoteLogSegmentMetadata | None:
    """The FINISHED segment after ``segment`` that starts below the local log start, else None."""
    for later in metadata.finished_segments():
        if later.start_offset > segment.end_offset:
            return later if later.start_offset < local_start else None
    return None
