"""TxnLog: the transaction half of :class:`~tidelog.storage.log.Log` — its last stable offset, what
an ABORT adds to the ``.txnindex``, and the views DescribeProducers and the coordinator read.

The last stable offset (LSO) is Kafka's ``UnifiedLog.lastStableOffset``: the first offset of the
earliest transaction that is ongoing, or completed by a marker the high watermark has not passed
(:class:`~tidelog.storage.txn_tracking.OngoingTxns`), raised to the log start offset; the LSO is
that offset when it is below the high watermark, else the high watermark. read_committed reads
stop there, ListOffsets latest under read_committed answers it, and the cleaner and the remote
tier never go past it.

A base class of ``Log`` with no state of its own (the fields below are ``Log``'s), like
:class:`~tidelog.storage.log_append.AppendPath`: the LSO is read once per fetch, and without
transactions it costs two dict truth tests on top of reading the high watermark.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from tidelog.storage.fetch_info import FetchIsolation
from tidelog.storage.producer_state import ProducerStateManager
from tidelog.storage.segments import LogSegments
from tidelog.storage.txn_tracking import CompletedTxn, aborted_txn_entry, stable_offset


@dataclass(frozen=True, slots=True)
class ProducerSnapshotView:
    """One producer as DescribeProducers shows it: id, epoch, last sequence (-1: none), timestamp
    of its last batch or marker, coordinator epoch of its last marker (-1: none), first offset of
    its open transaction (-1: none)."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int
    current_txn_start_offset: int


@dataclass(frozen=True, slots=True)
class OngoingTxn:
    """An open transaction of one partition: its producer, epoch, first offset, and the timestamp
    of the producer's last batch."""

    producer_id: int
    producer_epoch: int
    first_offset: int
    last_timestamp: int


class TxnLog:
    """The transaction side of a log (see the module doc)."""

    # Log's fields (set by Log.__init__, changed under the lock):
    _lock: threading.RLock
    _segments: LogSegments
    _high_watermark: int
    _log_end_offset: int
    _log_start_offset: int
    producer_state: ProducerStateManager

    def _isolation_bound(self, isolation: FetchIsolation) -> int:
        """The offset a read under ``isolation`` stops at: the log end, the high watermark, or the
        last stable offset (``TXN_COMMITTED``)."""
        if isolation is FetchIsolation.HIGH_WATERMARK:
            return self._high_watermark
        return self._log_end_offset if isolation is FetchIsolation.LOG_END else self.last_stable_offset

    @property
    def last_stable_offset(self) -> int:
        """Kafka's last stable offset (module doc). Thread-safe: without open or unreplicated
        transactions, no lock (the high watermark); with some, takes the log's lock."""
        txns = self.producer_state.txns
        if not txns.ongoing and not txns.unreplicated:  # two dict tests: once per fetch
            return self._high_watermark
        with self._lock:
            high_watermark = self._high_watermark
            return stable_offset(txns.first_unstable_offset(high_watermark), self._log_start_offset, high_watermark)

    def _index_completed(self, txn: CompletedTxn, write_index: bool) -> None:
        """A marker just appended ended ``txn`` (under the lock): an ABORT adds its entry to the
        ``.txnindex`` of the segment holding the marker (with ``write_index``) before the
        transaction is marked complete, as Kafka's ``UnifiedLog.append`` does."""
        state = self.producer_state
        if txn.is_aborted and write_index:
            entry = aborted_txn_entry(txn.producer_id, txn.first_offset, txn.last_offset, state.txns.open_txns())
            self._segments.last.txn_index.append(entry)  # type: ignore[union-attr]  # the marker's segment
        state.complete_txn(txn, self._high_watermark)

    def ongoing_transactions(self) -> list[OngoingTxn]:
        """The open transactions, by first offset. Thread-safe: takes the log's lock."""
        with self._lock:
            producers = self.producer_state.active_producers
            found = [OngoingTxn(pid, producers[pid].producer_epoch, first, producers[pid].last_timestamp)
                     for pid, first in self.producer_state.txns.open_txns() if pid in producers]
        return found

    def producer_views(self) -> list[ProducerSnapshotView]:
        """Every producer this partition knows, by producer id. Thread-safe: takes the log's lock."""
        with self._lock:
            entries = list(self.producer_state.active_producers.values())
            views = [ProducerSnapshotView(
                e.producer_id, e.producer_epoch, e.last_seq, e.last_timestamp, e.coordinator_epoch,
                -1 if e.current_txn_first_offset is None else e.current_txn_first_offset) for e in entries]
        return sorted(views, key=lambda v: v.producer_id)
