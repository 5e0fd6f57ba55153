"""A transactional id's state, as Kafka's ``TransactionState`` and ``TransactionMetadata`` keep it.

States (their ids are the ``transactionStatus`` byte of ``__transaction_state``; the names are
what DescribeTransactions and ListTransactions show)::

    id  state               entered from
    0   Empty               Empty, CompleteCommit, CompleteAbort        (InitProducerId)
    1   Ongoing             Ongoing, Empty, CompleteCommit, CompleteAbort  (AddPartitions/AddOffsets)
    2   PrepareCommit       Ongoing                                     (EndTxn commit)
    3   PrepareAbort        Ongoing, PrepareEpochFence                  (EndTxn abort, fencing, timeout)
    4   CompleteCommit      PrepareCommit                               (every marker written)
    5   CompleteAbort       PrepareAbort
    6   Dead                Empty, CompleteCommit, CompleteAbort        (expiration: a tombstone)
    7   PrepareEpochFence   Ongoing                                     (never logged)

A transition is first *pending* (:attr:`TxnMetadata.pending`): it holds until its record is
appended to ``__transaction_state``, and any request meanwhile gets CONCURRENT_TRANSACTIONS.
:meth:`TxnMetadata.prepare` checks the transition against the table and returns the new state
as a value (:class:`~.records.TxnLogValue`); :meth:`TxnMetadata.complete` applies it once stored.

Not thread-safe: the coordinator's event loop is the one thread that touches it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from tidelog.server.transactions.records import NO_PRODUCER_EPOCH, NO_PRODUCER_ID, TxnLogValue
from tidelog.topic_partition import TopicPartition

EPOCH_EXHAUSTED = 32767 - 1  # Kafka's isEpochExhausted: Short.MAX_VALUE - 1 and above


class TxnState(Enum):
    """Kafka's TransactionState: value = (id, name)."""

    EMPTY = (0, "Empty")
    ONGOING = (1, "Ongoing")
    PREPARE_COMMIT = (2, "PrepareCommit")
    PREPARE_ABORT = (3, "PrepareAbort")
    COMPLETE_COMMIT = (4, "CompleteCommit")
    COMPLETE_ABORT = (5, "CompleteAbort")
    DEAD = (6, "Dead")
    PREPARE_EPOCH_FENCE = (7, "PrepareEpochFence")

    @property
    def id(self) -> int:
        return int(self.value[0])

    @property
    def state_name(self) -> str:
        return str(self.value[1])

    @classmethod
    def from_id(cls, state_id: int) -> TxnState:
        for state in cls:
            if state.id == state_id:
                return state
        raise ValueError(f"unknown transaction state id {state_id}")


S = TxnState
COMPLETE = frozenset({S.COMPLETE_COMMIT, S.COMPLETE_ABORT})
PREPARE = frozenset({S.PREPARE_COMMIT, S.PREPARE_ABORT})
_PREVIOUS: dict[TxnState, frozenset[TxnState]] = {
    S.EMPTY: frozenset({S.EMPTY, *COMPLETE}),
    S.ONGOING: frozenset({S.ONGOING, S.EMPTY, *COMPLETE}),
    S.PREPARE_COMMIT: frozenset({S.ONGOING}),
    S.PREPARE_ABORT: frozenset({S.ONGOING, S.PREPARE_EPOCH_FENCE}),
    S.COMPLETE_COMMIT: frozenset({S.PREPARE_COMMIT}),
    S.COMPLETE_ABORT: frozenset({S.PREPARE_ABORT}),
    S.DEAD: frozenset({S.EMPTY, *COMPLETE}),
    S.PREPARE_EPOCH_FENCE: frozenset({S.ONGOING}),
}
EXPIRABLE = frozenset({S.EMPTY, *COMPLETE})


def can_transition(source: TxnState, target: TxnState) -> bool:
    """Whether Kafka's state machine allows ``source`` -> ``target``."""
    return source in _PREVIOUS[target]


class IllegalTransitionError(RuntimeError):
    """A transition the state machine forbids (a coordinator bug: requests are checked first)."""


@dataclass(slots=True)
class TxnMetadata:
    """One transactional id. ``last_epoch`` is Kafka's lastProducerEpoch (retries of
    InitProducerId); it is not stored, as Kafka does not store it."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: frozenset[TopicPartition] = frozenset()
    start_timestamp: int = -1
    last_update_timestamp: int = -1
    previous_producer_id: int = NO_PRODUCER_ID
    last_epoch: int = NO_PRODUCER_EPOCH
    pending: TxnState | None = None
    pending_value: TxnLogValue | None = field(default=None, repr=False)

    # --- the stored form ---------------------------------------------------------------------

    def value(self) -> TxnLogValue:
        """The record of the current state."""
        return TxnLogValue(self.producer_id, self.producer_epoch, self.timeout_ms, self.state.id,
                           None if self.state is S.EMPTY else self.partitions, self.last_update_timestamp,
                           self.start_timestamp, self.previous_producer_id)

    @classmethod
    def from_value(cls, transactional_id: str, value: TxnLogValue) -> TxnMetadata:
        state = TxnState.from_id(value.state_id)
        return cls(transactional_id, value.producer_id, value.producer_epoch, value.timeout_ms, state,
                   value.partitions or frozenset(), value.start_timestamp, value.last_update_timestamp,
                   value.previous_producer_id)

    # --- transitions -------------------------------------------------------------------------

    def prepare(self, target: TxnState, *, producer_id: int | None = None, epoch: int | None = None,
                timeout_ms: int | None = None,
                partitions: frozenset[TopicPartition] | None = None, start: int | None = None,
                now: int) -> TxnLogValue:
        """Mark ``target`` pending and return its record; :class:`IllegalTransitionError` when
        a transition is already pending or the table forbids it."""
        if self.pending is not None:
            raise IllegalTransitionError(f"{self.transactional_id}: {self.pending.state_name} already pending")
        if not can_transition(self.state, target):
            raise IllegalTransitionError(f"{self.transactional_id}: {self.state.state_name} -> {target.state_name}")
        value = TxnLogValue(
            self.producer_id if producer_id is None else producer_id,
            self.producer_epoch if epoch is None else epoch,
            self.timeout_ms if timeout_ms is None else timeout_ms, target.id,
            None if target is S.EMPTY else (self.partitions if partitions is None else partitions), now,
            self.start_timestamp if start is None else start, previous_producer_id=self.producer_id)
        self.pending = target
        self.pending_value = value
        return value

    def complete(self, last_epoch: int | None = None) -> None:
        """The pending record is stored: it becomes the state."""
        value, target = self.pending_value, self.pending
        if value is None or target is None:
            raise IllegalTransitionError(f"{self.transactional_id}: no pending transition to complete")
        self.producer_id, self.producer_epoch, self.timeout_ms = value.producer_id, value.producer_epoch, value.timeout_ms
        self.partitions = value.partitions or frozenset()
        self.start_timestamp, self.last_update_timestamp = value.start_timestamp, value.last_update_timestamp
        self.previous_producer_id = value.previous_producer_id
        if last_epoch is not None:
            self.last_epoch = last_epoch
        self.state, self.pending, self.pending_value = target, None, None

    def abandon(self) -> None:
        """The pending record was not stored: the state stays as it was."""
        self.pending, self.pending_value = None, None

    @property
    def epoch_exhausted(self) -> bool:
        return self.producer_epoch >= EPOCH_EXHAUSTED
