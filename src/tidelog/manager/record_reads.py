"""RecordReads: the LogManager's read doors (read, fetch, ListOffsets, offsets), a base class.

Each looks the live log up once (``self.log``, the manager's) and calls it, taking no manager
lock. A base class rather than a component: the fetch path is hot, and a method found on the
manager's own class costs no extra hop per call.

Reads from the remote tier (tiered storage) go through :meth:`RecordReads.fetch_remote`, called
only after a local read raised ``OffsetMovedToTieredStorageError`` (the local fetch path pays
nothing for it), and through :meth:`list_offsets` / :meth:`aborted_transactions` on a tiered log
whose log start lies below its local start. They run on the
:class:`~tidelog.manager.remote_reads.RemoteReader` built on first use.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager

from tidelog.errors import OffsetMovedToTieredStorageError, StorageError, TidelogError
from tidelog.manager.log_dir import LogDir
from tidelog.manager.remote_reads import RemoteReader
from tidelog.manager.remote_tier import RemoteTier
from tidelog.manager.reports import PartitionFetch, PartitionOffsets
from tidelog.storage.config import BrokerConfig
from tidelog.storage.fetch_info import FetchDataInfo, FetchIsolation, TimestampAndOffset
from tidelog.storage.file_slice import close_records
from tidelog.storage.log import Log
from tidelog.storage.txn_index import AbortedTxn
from tidelog.topic_partition import TopicPartition

_new_tuple = tuple.__new__


class RecordReads:
    """The read doors of :class:`~tidelog.manager.manager.LogManager` (see the module doc)."""

    broker: BrokerConfig  # the manager's
    remote_tier: RemoteTier | None  # the manager's
    _dirs: list[LogDir]  # the manager's
    _closed: bool  # the manager's: shut down
    _remote_reader: RemoteReader | None = None
    _remote_reader_lock = threading.Lock()  # shared by every manager of the process: taken once per reader built

    def log(self, tp: TopicPartition) -> Log:
        """The live log of ``tp`` (:meth:`LogManager.log`, which overrides this)."""
        raise NotImplementedError

    @contextmanager
    def held_if_free(self, tps: Iterable[TopicPartition]) -> Iterator[bool]:
        """Hold the locks of the live logs of ``tps`` for the ``with`` body if every one is free
        now; yields whether they are held. Inside, the read doors of those partitions never wait
        on a lock (a log's lock is re-entrant), so a caller that must not wait (the server's event
        loop, which would stall every connection behind one append) can read them itself and go
        to a thread only when a writer is busy. A partition without a live log yields False (its
        read fails: a thread reports it). Holding, the body must not wait on anything either.
        Thread-safe: takes the logs' locks without waiting, never the manager's."""
        held: list[threading.RLock] = []
        try:
            free = self._take_if_free(tps, held)
            if not free:
                _release(held)  # at once: the caller goes elsewhere
            yield free
        finally:
            _release(held)

    def _take_if_free(self, tps: Iterable[TopicPartition], held: list[threading.RLock]) -> bool:
        for tp in tps:
            try:
                lock = self.log(tp).lock
            except TidelogError:
                return False
            if not lock.acquire(blocking=False):
                return False
            held.append(lock)
        return True

    def read(self, tp: TopicPartition, offset: int, max_bytes: int,
             isolation: FetchIsolation = FetchIsolation.HIGH_WATERMARK, *, min_one_message: bool = True,
             as_slice: bool = False) -> FetchDataInfo:
        """Raw batches of ``tp`` from ``offset``, at most ``max_bytes`` (at least one batch with
        ``min_one_message``), never past the bound of ``isolation``; :class:`OffsetOutOfRangeError`
        outside [log start, log end]. ``as_slice``: the records as a
        :class:`~tidelog.storage.file_slice.FileSlice` (the caller closes it), not bytes.
        Thread-safe: the log takes its own lock to find the segment and reads outside it."""
        return self.log(tp).read(offset, max_bytes, isolation, min_one_message, as_slice)

    def fetch(self, tp: TopicPartition, offset: int, max_bytes: int, isolation: FetchIsolation, *,
              min_one_message: bool = True, as_slice: bool = False) -> PartitionFetch:
        """A consumer's fetch of ``tp``: :meth:`read` (``max_bytes`` 0: the range check only), then
        the offsets, taken after the read as Kafka does, so the records never pass the high
        watermark reported, and for ``TXN_COMMITTED`` the aborted transactions up to the last
        stable offset. ``as_slice``: the records as a :class:`~tidelog.storage.file_slice.FileSlice`
        where there are any (the caller closes it; closed here when a later step fails).
        Thread-safe as :meth:`read`; the aborted-transaction walk reads the ``.txnindex`` and
        ``.log`` files of later segments. A failure is raised as it is: the caller reports it
        (:meth:`report_read_error`)."""
        lg = self.log(tp)
        info = lg.read(offset, max_bytes, isolation, min_one_message, as_slice)
        stable = lg.last_stable_offset
        aborted = None
        if isolation is FetchIsolation.TXN_COMMITTED:
            # Bounded by the last stable offset rather than the read's end: an extra entry past the
            # records returned is ignored by consumers.
            try:
                found = lg.collect_aborted_transactions(offset, stable) if info.records else []
            except BaseException:
                close_records(info.records)
                raise
            aborted = tuple((t.producer_id, t.first_offset) for t in found)
        # built as a bare tuple: a NamedTuple's own __new__ costs 3x as much, once per partition fetched
        return _new_tuple(PartitionFetch, (info.records, lg.high_watermark, stable, lg.log_start_offset, aborted))

    def aborted_transactions(self, tp: TopicPartition, start: int, end: int) -> list[AbortedTxn]:
        """The aborted transactions of ``tp`` overlapping [``start``, ``end``) (read from the
        segments' ``.txnindex`` files). Thread-safe as :meth:`read`."""
        lg = self.log(tp)
        if self.remote_tier is not None and start < lg.local_log_start_offset and lg.config.remote_storage_enable:
            return self.remote_reader().aborted_transactions(tp, lg, start, end)
        return lg.collect_aborted_transactions(start, end)

    def list_offsets(self, tp: TopicPartition, timestamp: int,
                     isolation: FetchIsolation = FetchIsolation.HIGH_WATERMARK, *,
                     remote: bool = True) -> TimestampAndOffset | None:
        """Kafka's ListOffsets for ``tp``: -2 earliest, -1 latest (the bound of ``isolation``), -3
        the record with the largest timestamp, -4 earliest local, -5 latest tiered, else the first
        record whose timestamp is >= ``timestamp``; None when nothing matches. By timestamp it
        reads the time indexes and, for the last step, segment bytes; on a tiered log whose log
        start is below its local start (and ``remote``), the remote segments there first
        (:meth:`list_offsets_remote`, waited for within ``remote.list.offsets.request.timeout.ms``),
        as Kafka. Thread-safe: the log takes its own lock."""
        if remote:
            future = self.list_offsets_remote(tp, timestamp)
            if future is not None:
                found = self.remote_reader().wait_for_list_offsets(tp, timestamp, future)
                if found is not None:
                    return found
        return self.log(tp).fetch_offset_by_timestamp(timestamp, isolation)

    def list_offsets_remote(self, tp: TopicPartition, timestamp: int) -> Future[TimestampAndOffset | None] | None:
        """The remote part of a ListOffsets by ``timestamp``, started on a remote reader thread: a
        future of the first record at or after it in the remote segments below the local log start
        (None in it: search the local log, :meth:`list_offsets` with ``remote=False``); None at
        once when the remote tier has nothing to search (a special timestamp, a log not tiered or
        all local). Raises :class:`~tidelog.manager.remote_reads.RemoteReadQueueFullError` when
        the reader queue is full. Thread-safe."""
        lg = self.log(tp)
        if (timestamp < 0 or self.remote_tier is None or lg.local_log_start_offset <= lg.log_start_offset
                or not lg.config.remote_storage_enable):
            return None
        return self.remote_reader().offset_for_timestamp_async(tp, lg, timestamp)

    def fetch_remote(self, tp: TopicPartition, offset: int, max_bytes: int, isolation: FetchIsolation, *,
                     min_one_message: bool = True) -> Future[PartitionFetch]:
        """A consumer's fetch of ``tp`` from the remote tier, for an offset whose local read raised
        ``OffsetMovedToTieredStorageError``: the read runs on a remote reader thread (never the
        caller's); the future's result is as :meth:`fetch`'s, or its error. Raises at once
        ``OffsetMovedToTieredStorageError`` when the broker has no remote tier and
        :class:`~tidelog.manager.remote_reads.RemoteReadQueueFullError` when
        ``remote.log.reader.max.pending.tasks`` reads already wait. Thread-safe."""
        lg = self.log(tp)
        if self.remote_tier is None:
            raise OffsetMovedToTieredStorageError(
                f"offset {offset} is held only by the remote tier and remote.log.storage.system.enable is off",
                topic_partition=str(tp))
        return self.remote_reader().fetch(tp, lg, offset, max_bytes, isolation, min_one_message)

    def remote_reader(self) -> RemoteReader:
        """The remote tier's reader (thread pool and index cache under the first log dir), built on
        first use, never after the manager's shutdown (``StorageError``). Raises ``StorageError``
        when the cache dir cannot be made and ``RuntimeError`` without a remote tier. Thread-safe:
        the reader lock when building (shutdown closes the reader under it)."""
        reader = self._remote_reader
        if reader is not None:
            return reader
        tier = self.remote_tier
        if tier is None:
            raise RuntimeError("no remote tier: remote.log.storage.system.enable is off")
        with self._remote_reader_lock:
            if self._closed:
                raise StorageError("log manager is shut down: no remote reads")
            if self._remote_reader is None:
                self._remote_reader = RemoteReader(self.broker, tier.store, self._dirs[0].path, tier.metadata_of)
            return self._remote_reader

    def close_remote_reader(self) -> None:
        """Stop the remote reader if one was built (its pool, its index cache). Idempotent. Thread-safe."""
        with self._remote_reader_lock:
            reader, self._remote_reader = self._remote_reader, None
        if reader is not None:
            reader.close()

    def offsets(self, tp: TopicPartition) -> PartitionOffsets:
        """``tp``'s log start offset, high watermark, last stable offset and log end, read one after
        another without a lock (an append in between may move the later ones). Thread-safe."""
        lg = self.log(tp)
        return PartitionOffsets(lg.log_start_offset, lg.high_watermark, lg.last_stable_offset, lg.log_end_offset)


def _release(held: list[threading.RLock]) -> None:
    while held:
        held.pop().release()
