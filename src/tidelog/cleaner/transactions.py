"""What a cleaning pass knows about transactions: Kafka's ``CleanedTransactionMetadata``.

The cleaner walks a log's batches in offset order and must decide, without reading ahead, which
transactional data is aborted (it goes) and which transaction markers may go (kafka-storage.md
§3.7.6, KIP-98 and KAFKA-5537 / KAFKA-6150 for the marker rules):

* The aborted transactions of the segments being cleaned come from their ``.txnindex`` files
  (:meth:`CleanedTransactionMetadata.add_aborted`, once per source segment as Kafka does; an entry
  may come twice when a transaction spans segments, which is harmless). One becomes *ongoing*
  when the cleaner passes its first offset; a transactional data batch of a producer with an
  ongoing aborted transaction is aborted data, and may be discarded.
* ABORT marker: if a batch of its transaction was seen in this pass, the marker stays (the data
  is still in the log, possibly kept as an empty batch) and its :class:`AbortedTxn` is handed to
  ``on_aborted_kept`` to be re-appended to the cleaned segment's ``.txnindex``; otherwise the
  marker is discardable.
* COMMIT marker: discardable when no transactional data batch of that producer was seen since
  the previous marker in this pass (the committed data is gone, or lies in a clean part read
  earlier).
* An already empty control batch is discardable; markers of other control types are kept.

"Discardable" is not "discarded": the retention rules (:mod:`tidelog.cleaner.retain`) first stamp
a delete horizon into the marker batch and remove it in a later pass, once the horizon is past.

One instance serves a whole cleaning round (all segment groups, in order); the caller points
``on_aborted_kept`` at the current group's cleaned ``.txnindex``. Not thread-safe.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable

from tidelog.records.control import ControlRecordType
from tidelog.storage.txn_index import AbortedTxn

OnAbortedKept = Callable[[AbortedTxn], None]


class _Ongoing:
    """An aborted transaction the cleaner has entered, and whether it saw one of its batches."""

    __slots__ = ("txn", "seen_batch")

    def __init__(self, txn: AbortedTxn) -> None:
        self.txn = txn
        self.seen_batch = False


class CleanedTransactionMetadata:
    """Transaction state of one cleaning pass (Kafka's class of that name).

    ``aborted``: aborted transactions known so far (any order; kept in a min-heap by first
    offset). ``on_aborted_kept``: called with each aborted transaction whose ABORT marker is kept,
    in marker order; the caller may reassign it between segment groups.
    """

    def __init__(self, aborted: Iterable[AbortedTxn], on_aborted_kept: OnAbortedKept) -> None:
        self.on_aborted_kept = on_aborted_kept
        self._pending: list[tuple[int, int, AbortedTxn]] = []  # (first offset, arrival, txn)
        self._arrivals = 0
        self._ongoing_aborted: dict[int, _Ongoing] = {}
        self._ongoing_committed: set[int] = set()
        self.add_aborted(aborted)

    def add_aborted(self, aborted: Iterable[AbortedTxn]) -> None:
        """Queue more aborted transactions (Kafka's ``addAbortedTransactions``)."""
        for txn in aborted:
            heapq.heappush(self._pending, (txn.first_offset, self._arrivals, txn))
            self._arrivals += 1

    def advance_to(self, offset: int) -> None:
        """Enter every queued aborted transaction whose first offset is <= ``offset``.

        A producer already in an ongoing aborted transaction keeps that one (Kafka's
        ``getOrElseUpdate``). Callers may use this instead of the per-batch methods for a run of
        non-transactional data batches, whose only effect on the state is this one.
        """
        pending = self._pending
        while pending and pending[0][0] <= offset:
            txn = heapq.heappop(pending)[2]
            self._ongoing_aborted.setdefault(txn.producer_id, _Ongoing(txn))

    # --- per batch, with header values ---------------------------------------------------------

    def on_data(self, last_offset: int, producer_id: int, is_transactional: bool) -> bool:
        """A data batch was read: True when it belongs to an aborted transaction (discardable)."""
        self.advance_to(last_offset)
        if not is_transactional:
            return False
        ongoing = self._ongoing_aborted.get(producer_id)
        if ongoing is None:
            self._ongoing_committed.add(producer_id)
            return False
        ongoing.seen_batch = True
        return True

    def on_control(self, last_offset: int, producer_id: int, control_type: ControlRecordType | None) -> bool:
        """A control batch was read (``control_type`` None: it has no record): True when its
        marker may be discarded once its delete horizon has passed."""
        self.advance_to(last_offset)
        if control_type is None:
            return True  # an already cleaned, empty control batch
        if control_type is ControlRecordType.ABORT:
            ongoing = self._ongoing_aborted.pop(producer_id, None)
            if ongoing is not None and ongoing.seen_batch:
                self.on_aborted_kept(ongoing.txn)
                return False
            return True
        if control_type is ControlRecordType.COMMIT:
            if producer_id in self._ongoing_committed:
                self._ongoing_committed.discard(producer_id)
                return False
            return True
        return False
