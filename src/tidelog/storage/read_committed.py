"""What a ``read_committed`` consumer skips: the batches of aborted transactions.

A read_committed fetch stops at the last stable offset and comes with the aborted transactions
that overlap it (:meth:`Log.collect_aborted_transactions`: producer id and first offset of each).
The consumer then drops batches itself, as Kafka's ``CompletedFetch`` does:

* before each batch of a producer, every aborted transaction whose first offset is at or below
  the batch's last offset makes its producer id *aborted*;
* an ABORT marker (a control batch whose first record is of type ABORT) ends that: its producer
  id is no longer aborted;
* a transactional data batch of an aborted producer id is skipped.

Control batches are never data; callers skip them whatever the isolation level.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from typing import Protocol

from tidelog.records.batch import NO_PRODUCER_ID
from tidelog.records.control import ControlRecordType, control_batch_type
from tidelog.records.record import Record
from tidelog.storage.txn_index import AbortedTxn


class _Batch(Protocol):
    @property
    def producer_id(self) -> int: ...
    @property
    def last_offset(self) -> int: ...
    @property
    def is_transactional(self) -> bool: ...
    @property
    def is_control(self) -> bool: ...
    def records(self) -> Iterable[Record]: ...


class AbortedBatchFilter:
    """Feed it the batches of one partition in offset order (:meth:`skips`). Not thread-safe."""

    def __init__(self, aborted: Iterable[AbortedTxn]) -> None:
        self._pending = deque(sorted(aborted, key=lambda txn: txn.first_offset))
        self._aborted_producers: set[int] = set()

    def producer_ids(self) -> set[int]:
        """The producers whose batches :meth:`skips` may still drop or whose markers change its
        state: those of the aborted transactions not yet reached and those aborted now. Feeding
        only their batches (in offset order) gives the same answers as feeding every batch."""
        return {txn.producer_id for txn in self._pending} | self._aborted_producers

    def skips(self, batch: _Batch) -> bool:
        """Whether a read_committed consumer drops ``batch``'s records (module doc)."""
        if batch.producer_id == NO_PRODUCER_ID:
            return False
        while self._pending and self._pending[0].first_offset <= batch.last_offset:
            self._aborted_producers.add(self._pending.popleft().producer_id)
        if batch.is_control:
            if control_batch_type(batch) is ControlRecordType.ABORT:
                self._aborted_producers.discard(batch.producer_id)
            return False
        return batch.is_transactional and batch.producer_id in self._aborted_producers

