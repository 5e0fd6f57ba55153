"""RecordReads: the LogManager's read doors (read, fetch, ListOffsets, offsets), a base class.

Each looks the live log up once (``self.log``, the manager's) and calls it, taking no manager
lock. A base class rather than a component: the fetch path is hot, and a method found on the
manager's own class costs no extra hop per call.
"""

from __future__ import annotations

from tidelog.manager.reports import PartitionFetch, PartitionOffsets
from tidelog.storage.fetch_info import FetchDataInfo, FetchIsolation, TimestampAndOffset
from tidelog.storage.log import Log
from tidelog.storage.txn_index import AbortedTxn
from tidelog.topic_partition import TopicPartition

_new_tuple = tuple.__new__


class RecordReads:
    """The read doors of :class:`~tidelog.manager.manager.LogManager` (see the module doc)."""

    def log(self, tp: TopicPartition) -> Log:
        """The live log of ``tp`` (:meth:`LogManager.log`, which overrides this)."""
        raise NotImplementedError

    def read(self, tp: TopicPartition, offset: int, max_bytes: int,
             isolation: FetchIsolation = FetchIsolation.HIGH_WATERMARK, *, min_one_message: bool = True
             ) -> FetchDataInfo:
        """Raw batches of ``tp`` from ``offset``, at most ``max_bytes`` (at least one batch with
        ``min_one_message``), never past the bound of ``isolation``; :class:`OffsetOutOfRangeError`
        outside [log start, log end]. Thread-safe: the log takes its own lock to find the segment
        and reads outside it."""
        return self.log(tp).read(offset, max_bytes, isolation, min_one_message)

    def fetch(self, tp: TopicPartition, offset: int, max_bytes: int, isolation: FetchIsolation, *,
              min_one_message: bool = True) -> PartitionFetch:
        """A consumer's fetch of ``tp``: :meth:`read` (``max_bytes`` 0: the range check only), then
        the offsets, taken after the read as Kafka does, so the records never pass the high
        watermark reported, and for ``TXN_COMMITTED`` the aborted transactions up to the last
        stable offset. Thread-safe as :meth:`read`; the aborted-transaction walk reads the
        ``.txnindex`` and ``.log`` files of later segments. A failure is raised as it is: the
        caller reports it (:meth:`report_read_error`)."""
        lg = self.log(tp)
        info = lg.read(offset, max_bytes, isolation, min_one_message)
        stable = lg.last_stable_offset
        aborted = None
        if isolation is FetchIsolation.TXN_COMMITTED:
            # Bounded by the last stable offset rather than the read's end: an extra entry past the
            # records returned is ignored by consumers.
            found = lg.collect_aborted_transactions(offset, stable) if info.records else []
            aborted = tuple((t.producer_id, t.first_offset) for t in found)
        # built as a bare tuple: a NamedTuple's own __new__ costs 3x as much, once per partition fetched
        return _new_tuple(PartitionFetch, (info.records, lg.high_watermark, stable, lg.log_start_offset, aborted))

    def aborted_transactions(self, tp: TopicPartition, start: int, end: int) -> list[AbortedTxn]:
        """The aborted transactions of ``tp`` overlapping [``start``, ``end``) (read from the
        segments' ``.txnindex`` files). Thread-safe as :meth:`read`."""
        return self.log(tp).collect_aborted_transactions(start, end)

    def list_offsets(self, tp: TopicPartition, timestamp: int,
                     isolation: FetchIsolation = FetchIsolation.HIGH_WATERMARK) -> TimestampAndOffset | None:
        """Kafka's ListOffsets for ``tp``: -2 earliest, -1 latest (the bound of ``isolation``), -3
        the record with the largest timestamp, -4 earliest local, -5 latest tiered, else the first
        record whose timestamp is >= ``timestamp``; None when nothing matches. By timestamp it
        reads the time indexes and, for the last step, segment bytes. Thread-safe: the log
        takes its own lock."""
        return self.log(tp).fetch_offset_by_timestamp(timestamp, isolation)

    def offsets(self, tp: TopicPartition) -> PartitionOffsets:
        """``tp``'s log start offset, high watermark, last stable offset and log end, read one after
        another without a lock (an append in between may move the later ones). Thread-safe."""
        lg = self.log(tp)
        return PartitionOffsets(lg.log_start_offset, lg.high_watermark, lg.last_stable_offset, lg.log_end_offset)

