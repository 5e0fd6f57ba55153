"""TxnDoors: the LogManager's transaction doors, a base class (like :class:`~.record_reads.RecordReads`).

The transaction coordinator ends a transaction on each of its partitions with
:meth:`TxnDoors.write_txn_marker` (one COMMIT or ABORT control batch, appended as the partition's
leader with ``AppendOrigin.COORDINATOR``; producer state completes the transaction, an ABORT adds
its ``.txnindex`` entry, the high watermark follows the marker and the last stable offset moves);
DescribeProducers and the coordinator read :meth:`TxnDoors.producer_states` and
:meth:`TxnDoors.ongoing_transactions`. Each looks the live log up once and calls it, taking no
manager lock.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager

from tidelog.clock import Clock
from tidelog.records.control import build_end_txn_marker_batch
from tidelog.storage.append_info import AppendOrigin, LogAppendInfo
from tidelog.storage.log import Log
from tidelog.storage.log_txn import ProducerSnapshotView
from tidelog.storage.txn_verification import verification_token
from tidelog.topic_partition import TopicPartition


class TxnDoors:
    """The transaction doors of :class:`~tidelog.manager.manager.LogManager` (see the module doc)."""

    _clock: Clock  # the manager's
    _storage_op: Callable[..., AbstractContextManager[None]]  # the manager's: a disk fault takes the dir offline

    def log(self, tp: TopicPartition) -> Log:
        """The live log of ``tp`` (:meth:`LogManager.log`, which overrides this)."""
        raise NotImplementedError

    def write_txn_marker(self, tp: TopicPartition, producer_id: int, producer_epoch: int, coordinator_epoch: int,
                         commit: bool) -> LogAppendInfo:
        """Append a COMMIT (``commit``) or ABORT marker of ``producer_id``'s transaction to ``tp``
        (a control batch: transactional and control bits, base sequence -1, the producer's id and
        epoch, CreateTime from the manager's clock), then move the high watermark past it. An ABORT
        of a transaction holding data adds its ``.txnindex`` entry before the transaction is marked
        complete; a marker for a producer with no open transaction is appended and changes no
        offset. Raises :class:`~tidelog.errors.InvalidProducerEpochError` (``producer_epoch`` below
        the producer's), :class:`~tidelog.errors.TransactionCoordinatorFencedError`
        (``coordinator_epoch`` below the one stored), and as :meth:`LogManager.append` (unknown or
        offline partition, a disk fault). Thread-safe: the log's lock around the append."""
        target = self.log(tp)
        batch = build_end_txn_marker_batch(commit=commit, producer_id=producer_id, producer_epoch=producer_epoch,
                                           coordinator_epoch=coordinator_epoch, timestamp=self._clock.milliseconds())
        with self._storage_op(tp, target, "write transaction marker", len(batch)):
            info = target.append_as_leader(batch, origin=AppendOrigin.COORDINATOR)
        if info.appended:
            target.maybe_increment_high_watermark(info.next_offset)
        return info

    def ongoing_transactions(self, tp: TopicPartition) -> list[tuple[int, int, int, int]]:
        """``(producer id, producer epoch, first offset, last timestamp)`` of every open transaction
        of ``tp``, by first offset. Raises as :meth:`LogManager.log`. Thread-safe: the log's lock."""
        return [(t.producer_id, t.producer_epoch, t.first_offset, t.last_timestamp)
                for t in self.log(tp).ongoing_transactions()]

    def producer_states(self, tp: TopicPartition) -> list[ProducerSnapshotView]:
        """Every producer ``tp`` knows (DescribeProducers' answer), by producer id. Raises as
        :meth:`LogManager.log`. Thread-safe: the log's lock."""
        return self.log(tp).producer_views()

    def verification_token(self, tp: TopicPartition, producer_id: int) -> int:
        """What a transaction verification of ``producer_id``'s batch for ``tp`` records, for the
        append to check (:mod:`tidelog.storage.txn_verification`). Thread-safe, lock-free: one
        dict read of the partition's producer state."""
        return verification_token(self.log(tp).producer_state.last_entry(producer_id))
