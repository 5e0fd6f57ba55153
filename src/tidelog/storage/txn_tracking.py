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

The other rules that more than one reader of the files needs live here once too:
:func:`open_txns_at_snapshot` (the transactions open where a replay starts: the newest readable
producer snapshot, else the log start), :func:`replay_txn_batch` (Kafka's ``ProducerAppendInfo``
step over one transactional batch) and :func:`stable_offset` (``UnifiedLog.lastStableOffset``
from the first unstable offset). The live log (:mod:`.log_txn`), the rebuild of a lost index
(:mod:`.txn_rebuild`) and the read-only view (:mod:`.view_txns`) call them.

Costs: beginning and completing a transaction is O(1) (dicts, insertion-ordered by first offset:
transactions begin in offset order); the first unstable offset is O(1) plus the unreplicated
transactions (one or two: tidelog's high watermark follows each append). Not thread-safe: the
log's lock guards it, as it guards producer state.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from tidelog.errors import CorruptSnapshotError
from tidelog.storage import files
from tidelog.storage.producer_snapshot import read_snapshot
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


def stable_offset(first_unstable: int | None, log_start_offset: int, high_watermark: int) -> int:
    """Kafka's ``UnifiedLog.lastStableOffset``: the first unstable offset (``None``: no
    transaction holds the partition back), raised to the log start offset, when it is below the
    high watermark; else the high watermark."""
    if first_unstable is None:
        return high_watermark
    first = max(first_unstable, log_start_offset)
    return first if first < high_watermark else high_watermark


def replay_txn_batch(open_txns: dict[int, int], producer_id: int, base_offset: int, control: bool,
                     marker: bool) -> int | None:
    """Replay one transactional batch over ``open_txns`` (producer id -> first offset of its open
    transaction), as Kafka's ``ProducerAppendInfo`` rebuilds producer state: a data batch opens its
    producer's transaction at its base offset (unless one is open), a control batch holding a
    COMMIT or ABORT marker (``marker``) closes it, a control batch the cleaner emptied closes
    nothing. Returns the first offset of the transaction the marker closed, else None. O(1)."""
    if not control:
        open_txns.setdefault(producer_id, base_offset)
        return None
    if not marker:
        return None
    return open_txns.pop(producer_id, None)


def open_txns_at_snapshot(dir: Path, snapshot_offsets: Iterable[int], log_start_offset: int,
                          offset: int, skipped: Callable[[int, Exception], None] | None = None,
                          ) -> tuple[int, dict[int, int]]:
    """Where a replay of producer state up to ``offset`` starts, and the transactions open there
    (producer id -> first offset): the newest readable producer snapshot of ``dir`` among
    ``snapshot_offsets`` in [log start offset, ``offset``] (each producer's
    ``currentTxnFirstOffset``), else the log start offset with none open. A torn or vanished
    snapshot is passed over (``skipped`` is told its offset and why) for an older one. Reads one
    snapshot file, or a few when newer ones are unreadable."""
    for snapshot in sorted((o for o in snapshot_offsets if log_start_offset <= o <= offset), reverse=True):
        try:
            entries = read_snapshot(files.producer_snapshot_file(dir, snapshot))
        except (CorruptSnapshotError, OSError) as e:
            if skipped is not None:
                skipped(snapshot, e)
            continue
        return snapshot, {e.producer_id: e.current_txn_first_offset for e in entries
                          if e.current_txn_first_offset >= 0}
    return log_start_offset, {}


class OngoingTxns:
    """The ongoing and the unreplicated transactions of one partition (see the module doc)."""

    __slots__ = ("ongoing", "unreplicated")

    def __init__(self) -> None:
        self.ongoing: dict[int, int] = {}  # first offset -> producer id, in first-offset order
        self.unreplicated: dict[int, tuple[int, int]] = {}  # first offset -> (producer id, marker offset)

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
