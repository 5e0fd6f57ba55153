"""The transactions of one partition that decide its last stable offset (KIP-98).

A transaction is *ongoing* from its producer's first transactional batch (its first offset) until
its COMMIT or ABORT marker; it is then *completed* but stays *unreplicated* until the high
watermark passes its marker (a read_committed consumer may not see past a decision that could
still be lost). Kafka's ``ProducerStateManager`` keeps the two as ``ongoingTxns`` and
``unreplicatedTxns``; :class:`OngoingTxns` is that pair. The first unstable offset is the
smallest first offset over both, and the log's last stable offset is that offset when it is
below the high watermark, else the high watermark (``UnifiedLog.lastStableOffset``).

One rule decides the ``.txnindex`` entry of an ABORT (:func:`aborted_txn_entry`): the append path
(:meth:`~tidelog.storage.log_txn.TxnLog._index_completed`) and the rebuild of a lost index
(:mod:`.txn_rebuild`) both call it, so an index written live and one rebuilt later are the same
bytes.

Costs: beginning and completing a transaction is O(1) (dicts, insertion-ordered by first offset:
transactions begin in offset order); the first unstable offset is O(1) plus the unreplicated
transactions (one or two: tidelog's high watermark follows each append). Not thread-safe: the
log's lock guards it, as it guards producer state.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from tidelog.storage.txn_index import AbortedTxn


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    """A transaction a marker just ended (Kafka's ``CompletedTxn``): its producer, its first offset,
    the marker's offset, and whether the marker was an ABORT."""

    producer_id: int
    first_offset: int
    last_offset: int
    is_aborted: bool


def aborted_txn_entry(producer_id: int, first_offset: int, marker_offset: int,
                      open_txns: Iterable[tuple[int, int]]) -> AbortedTxn:
    """The ``.txnindex`` entry of an ABORT at ``marker_offset`` ending ``producer_id``'s transaction
    that began at ``first_offset``; ``open_txns`` are ``(producer id, first offset)`` of every
    transaction open when the marker is applied (this producer's may be among them). Its last
    stable offset is the first offset of the earliest open transaction of another producer, or
    the marker offset + 1 when there is none (Kafka's ``ProducerStateManager.lastStableOffset``)."""
    others = [first for pid, first in open_txns if pid != producer_id]
    return AbortedTxn(producer_id, first_offset, marker_offset, min(others, default=marker_offset + 1))


class OngoingTxns:
    """The ongoing and the unreplicated transactions of one partition (see the module doc)."""

    __slots__ = ("ongoing", "unreplicated")

    def __init__(self) -> None:
        self.ongoing: dict[int, int] = {}  # first offset -> producer id, in first-offset order
        self.unreplicated: dict[int, tuple[int, int]] = {}  # first offset -> (producer id, marker offset)

    def __bool__(self) -> bool:
        """True while some transaction holds the last stable offset back (or may, until the high
        watermark is compared with its marker)."""
        return bool(self.ongoing) or bool(self.unreplicated)

    def begin(self, producer_id: int, first_offset: int) -> None:
        """A transaction began at ``first_offset`` (above every ongoing one's: appends come in
        offset order)."""
        self.ongoing[first_offset] = producer_id

    def open_txns(self) -> Iterator[tuple[int, int]]:
        """``(producer id, first offset)`` of every ongoing transaction, by first offset."""
        return ((pid, first) for first, pid in self.ongoing.items())

    def complete(self, txn: CompletedTxn, high_watermark: int) -> None:
        """``txn`` is decided: it leaves the ongoing transactions and waits, unreplicated, for the
        high watermark to pass its marker; the ones already passed are dropped."""
        if self.ongoing.pop(txn.first_offset, None) is not None:
            self.unreplicated[txn.first_offset] = (txn.producer_id, txn.last_offset)
        self.remove_unreplicated_below(high_watermark)

    def remove_unreplicated_below(self, offset: int) -> None:
        """Forget the completed transactions whose marker lies below ``offset`` (Kafka's
        ``removeUnreplicatedTransactions``: the high watermark or the log start offset passed it)."""
        if self.unreplicated:
            for first in [f for f, (_, last) in self.unreplicated.items() if last < offset]:
                del self.unreplicated[first]

    def first_unstable_offset(self, high_watermark: int) -> int | None:
        """The first offset of the earliest transaction not yet stable at ``high_watermark`` (ongoing,
        or completed by a marker at or above it); None when there is none."""
        self.remove_unreplicated_below(high_watermark)
        first = next(iter(self.ongoing), None)
        if self.unreplicated:
            earliest = min(self.unreplicated)
            first = earliest if first is None else min(first, earliest)
        return first

    def clear(self) -> None:
        self.ongoing.clear()
        self.unreplicated.clear()

    def load(self, open_txns: Iterable[tuple[int, int]]) -> None:
        """Start from ``(producer id, first offset)`` pairs (a snapshot's), in any order."""
        self.clear()
        for pid, first in sorted(open_txns, key=lambda t: t[1]):
            self.ongoing[first] = pid
