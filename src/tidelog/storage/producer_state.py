"""Producer state: per producer id, its epoch and its last batches (Kafka's ``ProducerStateManager``,
``ProducerStateEntry``, ``ProducerAppendInfo``; KIP-98, KIP-360).

An idempotent producer numbers its batches per partition: batch ``n`` carries sequences
``[first, last]`` and the next one must start at ``last + 1`` (wrapping from Int.MAX to 0). The
leader keeps, per producer id, the producer's epoch and the metadata of its last **five**
batches (a producer has at most five requests in flight), so that:

* a retried batch whose epoch and exact sequence range match a cached batch is a **duplicate**:
  nothing is written and the producer gets the original offsets back;
* an older epoch is a fenced zombie (INVALID_PRODUCER_EPOCH);
* a sequence that does not follow the last one, or a new epoch that does not start at 0, is
  OUT_OF_ORDER_SEQUENCE_NUMBER. A producer id this partition does not know (never seen, expired,
  or its data deleted) is accepted at any sequence: that is current Kafka's rule, since KIP-360
  retired UNKNOWN_PRODUCER_ID.

Only client appends are checked. Appends that keep offsets (followers, tools, replaying the log
at load) update the state without checks; an older epoch there is logged, as Kafka does.

**Snapshots** (:mod:`.producer_snapshot`) make the state survive restarts: one is written at each
roll (named after the new segment's base offset) and at close (at the log end); at load the
latest readable snapshot is read and the batches after it are replayed from the log (every
batch from the log start when there is none). Snapshots of deleted segments are deleted with
them; a truncation reloads from the latest snapshot at or below the new end. Producers idle for
``producer.id.expiration.ms`` (by the timestamp of their last batch) with no open transaction
are forgotten, at load and every ``producer.id.expiration.check.interval.ms``.

**Transactions** (KIP-98): a producer's first transactional batch opens its transaction (its
first offset is kept, and the transaction joins :attr:`ProducerStateManager.txns`, which gives the
last stable offset); its COMMIT or ABORT marker (a control batch, appended by the coordinator)
completes it: :meth:`ProducerStateManager.update` returns the :class:`CompletedTxn`, the log writes
an ABORT's ``.txnindex`` entry, then :meth:`ProducerStateManager.complete_txn`. A client's
non-transactional batch while its producer's transaction is open is INVALID_TXN_STATE; a marker
with an older producer epoch is INVALID_PRODUCER_EPOCH, one from an older coordinator epoch
TRANSACTION_COORDINATOR_FENCED. A marker for a producer with no open transaction completes
nothing. Snapshots keep each open transaction's first offset, so open transactions survive
restarts; producers with one never expire.

Thread-safety: none here. :class:`~tidelog.storage.log.Log` calls every method under its lock.
"""

from __future__ import annotations

import logging
import os
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tidelog.errors import (
    CorruptSnapshotError,
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    TransactionCoordinatorFencedError,
)
from tidelog.records import FileBatch
from tidelog.records.batch import INT32_MAX, NO_PRODUCER_EPOCH, NO_SEQUENCE, increment_sequence, read_batch_at
from tidelog.records.control import ControlRecordType, EndTransactionMarker, control_record_type
from tidelog.records.layout import HEADER
from tidelog.storage import fileops, files
from tidelog.storage.append_info import AppendOrigin
from tidelog.storage.producer_snapshot import SnapshotEntry, read_snapshot, write_snapshot
from tidelog.storage.segment import LogSegment
from tidelog.storage.txn_tracking import CompletedTxn, OngoingTxns
from tidelog.storage.txn_verification import check_verified

log = logging.getLogger(__name__)

NUM_BATCHES_TO_RETAIN = 5  # Kafka's ProducerStateEntry.NUM_BATCHES_TO_RETAIN
DEFAULT_PRODUCER_ID_EXPIRATION_MS = 86_400_000  # producer.id.expiration.ms
DEFAULT_PRODUCER_ID_EXPIRATION_CHECK_INTERVAL_MS = 600_000  # producer.id.expiration.check.interval.ms

_BATCH_HEAD = HEADER  # the v2 header, to read base sequences
_BASE_SEQUENCE_INDEX = 11
_CONTROL_FLAG = 0x20


def decrement_sequence(sequence: int, decrement: int) -> int:
    """Kafka's ``DefaultRecordBatch.decrementSequence``: ``sequence - decrement`` wrapping below 0
    to Int.MAX."""
    if sequence < decrement:
        return INT32_MAX - (decrement - sequence) + 1
    return sequence - decrement


def in_sequence(last_seq: int, next_seq: int) -> bool:
    """True when ``next_seq`` directly follows ``last_seq`` (0 follows Int.MAX)."""
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT32_MAX)


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    """One cached batch of a producer (Kafka's ``BatchMetadata``)."""

    last_seq: int
    last_offset: int
    offset_delta: int  # last offset - first offset
    timestamp: int  # the batch's max timestamp

    @property
    def first_seq(self) -> int:
        return decrement_sequence(self.last_seq, self.offset_delta)

    @property
    def first_offset(self) -> int:
        return self.last_offset - self.offset_delta


class ProducerStateEntry:
    """One producer's state: epoch, last (up to five) batches at that epoch, coordinator epoch of
    its last transaction marker, last batch timestamp, first offset of its open transaction."""

    __slots__ = ("producer_id", "producer_epoch", "coordinator_epoch", "last_timestamp",
                 "current_txn_first_offset", "batches", "markers")

    def __init__(self, producer_id: int, producer_epoch: int = NO_PRODUCER_EPOCH, coordinator_epoch: int = -1,
                 last_timestamp: int = -1, current_txn_first_offset: int | None = None,
                 batches: Iterable[BatchMetadata] = ()) -> None:
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.coordinator_epoch = coordinator_epoch
        self.last_timestamp = last_timestamp
        self.current_txn_first_offset = current_txn_first_offset
        self.batches: deque[BatchMetadata] = deque(batches, NUM_BATCHES_TO_RETAIN)
        self.markers = 0  # markers applied in this process (:mod:`.txn_verification`), never persisted

    @property
    def is_empty(self) -> bool:
        return not self.batches

    @property
    def first_seq(self) -> int:
        return self.batches[0].first_seq if self.batches else NO_SEQUENCE

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    @property
    def last_data_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    @property
    def last_offset_delta(self) -> int:
        return self.batches[-1].offset_delta if self.batches else 0

    def maybe_update_epoch(self, epoch: int) -> None:
        """A new epoch forgets the batches of the old one."""
        if epoch != self.producer_epoch:
            self.batches.clear()
            self.producer_epoch = epoch

    def add_batch(self, epoch: int, last_seq: int, last_offset: int, offset_delta: int, timestamp: int) -> None:
        self.maybe_update_epoch(epoch)
        self.batches.append(BatchMetadata(last_seq, last_offset, offset_delta, timestamp))
        self.last_timestamp = timestamp

    def find_duplicate(self, epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        """The cached batch with exactly this epoch and sequence range, if any."""
        if epoch != self.producer_epoch:
            return None
        for batch in self.batches:
            if batch.last_seq == last_seq and batch.first_seq == first_seq:
                return batch
        return None

    def to_snapshot_entry(self) -> SnapshotEntry:
        """What a snapshot keeps of this producer: its last batch only."""
        txn = -1 if self.current_txn_first_offset is None else self.current_txn_first_offset
        return SnapshotEntry(self.producer_id, self.producer_epoch, self.last_seq, self.last_data_offset,
                             self.last_offset_delta, self.last_timestamp, self.coordinator_epoch, txn)

    @classmethod
    def from_snapshot_entry(cls, e: SnapshotEntry) -> ProducerStateEntry:
        batches = [BatchMetadata(e.last_sequence, e.last_offset, e.offset_delta, e.timestamp)] if e.last_offset >= 0 else []
        txn = e.current_txn_first_offset if e.current_txn_first_offset >= 0 else None
        return cls(e.producer_id, e.producer_epoch, e.coordinator_epoch, e.timestamp, txn, batches)

    def __repr__(self) -> str:
        return (f"ProducerStateEntry(producer_id={self.producer_id}, epoch={self.producer_epoch}, "
                f"batches={list(self.batches)}, coordinator_epoch={self.coordinator_epoch}, "
                f"last_timestamp={self.last_timestamp}, current_txn_first_offset={self.current_txn_first_offset})")


@dataclass(frozen=True, slots=True)
class ProducerBatch:
    """What producer state takes from one batch with a producer id, at its final offsets.
    ``coordinator_epoch`` is that of an end-transaction marker (-1 for data batches);
    ``is_control`` with ``coordinator_epoch`` None: an empty control batch (no effect);
    ``is_abort``: the marker is an ABORT."""

    producer_id: int
    producer_epoch: int
    base_sequence: int
    last_sequence: int
    first_offset: int
    last_offset: int
    max_timestamp: int
    is_transactional: bool = False
    is_control: bool = False
    coordinator_epoch: int | None = -1
    is_abort: bool = False


def producer_batch(batch: FileBatch, first_offset: int | None = None, max_timestamp: int | None = None) -> ProducerBatch:
    """The :class:`ProducerBatch` of a v2 ``batch`` with a producer id, optionally moved to
    ``first_offset`` (offsets assigned by the leader) and stamped ``max_timestamp``. A control
    batch's marker is decoded from its first record."""
    first = batch.base_offset if first_offset is None else first_offset
    coordinator_epoch: int | None = -1
    is_abort = False
    if batch.is_control:
        record = next(iter(batch.records()), None)
        coordinator_epoch = None if record is None else EndTransactionMarker.decode(record.value).coordinator_epoch
        is_abort = record is not None and control_record_type(record.key) is ControlRecordType.ABORT
    return ProducerBatch(
        batch.producer_id, batch.producer_epoch, batch.base_sequence, batch.last_sequence, first,
        first + batch.last_offset_delta, batch.max_timestamp if max_timestamp is None else max_timestamp,
        batch.is_transactional, batch.is_control, coordinator_epoch, is_abort,
    )


class ProducerStateManager:
    """Every producer of one partition, the snapshot files of its dir, and the map end offset
    (the offset up to which the state is complete). Kafka's ``ProducerStateManager``."""

    def __init__(self, dir: Path, topic_partition: object, *,
                 producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
                 dir_names: Iterable[str] | None = None) -> None:
        """``dir_names``: the dir's file names when the caller has just listed it (the loader;
        nothing it does creates or removes snapshots), else the dir is listed here."""
        self._dir = dir
        self._tp = str(topic_partition)
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self._producers: dict[int, ProducerStateEntry] = {}
        self.txns = OngoingTxns()  # the open and the not yet stable transactions: the LSO's
        self._snapshots: dict[int, Path] = self._list_snapshots(dir_names)
        self._last_map_offset = 0
        self._last_snap_offset = 0

    @classmethod
    def recovered(
        cls, dir: Path, topic_partition: object, segments: Sequence[LogSegment], log_start_offset: int, next_offset: int,
        now: int, *, producer_id_expiration_ms: int, dir_names: Iterable[str],
    ) -> ProducerStateManager:
        """The producer state of a just-loaded log: snapshots matching no segment removed (see
        :meth:`remove_stray_snapshots`), then :func:`rebuild_producer_state` from the latest one."""
        state = cls(dir, topic_partition, producer_id_expiration_ms=producer_id_expiration_ms, dir_names=dir_names)
        state.remove_stray_snapshots(s.base_offset for s in segments)
        rebuild_producer_state(state, segments, log_start_offset, next_offset, now)
        return state

    # --- queries --------------------------------------------------------------------------------

    @property
    def active_producers(self) -> dict[int, ProducerStateEntry]:
        """Producer id -> entry (the live mapping: do not mutate)."""
        return self._producers

    @property
    def map_end_offset(self) -> int:
        return self._last_map_offset

    @property
    def snapshot_offsets(self) -> list[int]:
        """Offsets of the snapshot files this manager knows, ascending."""
        return sorted(self._snapshots)

    def last_entry(self, producer_id: int) -> ProducerStateEntry | None:
        return self._producers.get(producer_id)

    def is_empty(self) -> bool:
        return not self._producers

    # --- the append path ----------------------------------------------------------------------

    def check_leader_append(self, batches: Sequence[tuple[int, FileBatch]], first_offset: int,
                            origin: AppendOrigin, verified: Mapping[int, int] | None = None,
                            ) -> list[FileBatch] | BatchMetadata:
        """Check a leader append before offsets are assigned (``first_offset``: the log end).
        Returns the batches with a producer id (empty: nothing to check or update, the common
        case, one attribute read per batch), or the cached :class:`BatchMetadata` of the batch
        this one duplicates (client appends only). Raises :class:`InvalidProducerEpochError`,
        :class:`OutOfOrderSequenceError`, :class:`InvalidTxnStateError` (a client's plain batch
        while its producer's transaction is open), :class:`TransactionCoordinatorFencedError` (a
        marker from an older coordinator epoch). With ``verified`` (tokens of the producers the
        coordinator verified, :mod:`.txn_verification`), a batch opening a transaction a marker
        ended since is refused too. Changes nothing: :meth:`update` does, after the write."""
        if len(batches) == 1 and batches[0][1].producer_id < 0:
            return []  # the common case: one batch without a producer id
        found = [batch for _, batch in batches if batch.producer_id >= 0]
        if not found or origin is AppendOrigin.REPLICATION:
            return found
        for batch in found:
            entry = self._producers.get(batch.producer_id)
            if verified is not None:
                check_verified(entry, batch, verified, self._tp, first_offset)
            if entry is None:
                continue  # an unknown producer: any epoch, any sequence
            if origin is AppendOrigin.CLIENT:
                duplicate = entry.find_duplicate(batch.producer_epoch, batch.base_sequence, batch.last_sequence)
                if duplicate is not None:
                    return duplicate
            self._check_epoch(entry, batch.producer_epoch, first_offset)
            if batch.is_control:
                self._check_coordinator_epoch(entry, batch, first_offset)
            elif origin is AppendOrigin.CLIENT:
                self._check_sequence(entry, batch.producer_epoch, batch.base_sequence, first_offset)
                if not batch.is_transactional and entry.current_txn_first_offset is not None:
                    raise InvalidTxnStateError(
                        f"Expected a transactional write from producer {entry.producer_id} at offset {first_offset} "
                        f"in {self._tp}: its transaction from offset {entry.current_txn_first_offset} is open",
                        topic_partition=self._tp, producer_id=entry.producer_id, offset=first_offset)
        return found

    def _check_coordinator_epoch(self, entry: ProducerStateEntry, batch: FileBatch, offset: int) -> None:
        marker = producer_batch(batch)
        if marker.coordinator_epoch is not None and marker.coordinator_epoch < entry.coordinator_epoch:
            raise TransactionCoordinatorFencedError(
                f"Invalid coordinator epoch for producer {entry.producer_id} at offset {offset} in {self._tp}: "
                f"{marker.coordinator_epoch} (zombie), {entry.coordinator_epoch} (current)",
                topic_partition=self._tp, producer_id=entry.producer_id, offset=offset)

    def continues_in_sequence(self, producer_id: int, epoch: int, base_sequence: int, offset_delta: int) -> bool:
        """True when :meth:`check_leader_append` would let this client data batch through with
        nothing to say: its producer is unknown (any sequence), or it has the producer's current
        epoch and the next sequence and duplicates none of its cached batches. Anything else
        (False) is for check_leader_append to answer: a duplicate, an epoch or sequence error, a
        new epoch, a producer whose transaction is open. The leader's common append path asks this
        before writing an idempotent (never transactional) batch."""
        if base_sequence < 0:
            return False
        entry = self._producers.get(producer_id)
        if entry is None:
            return True
        return (epoch == entry.producer_epoch != NO_PRODUCER_EPOCH and in_sequence(entry.last_seq, base_sequence)
                and entry.current_txn_first_offset is None
                and entry.find_duplicate(epoch, base_sequence, increment_sequence(base_sequence, offset_delta)) is None)

    def _check_epoch(self, entry: ProducerStateEntry, epoch: int, offset: int) -> None:
        if epoch < entry.producer_epoch:
            raise InvalidProducerEpochError(
                f"Epoch of producer {entry.producer_id} at offset {offset} in {self._tp} is {epoch}, "
                f"which is smaller than the last seen epoch {entry.producer_epoch}",
                topic_partition=self._tp, producer_id=entry.producer_id, offset=offset)

    def _check_sequence(self, entry: ProducerStateEntry, epoch: int, first_seq: int, offset: int) -> None:
        if epoch != entry.producer_epoch:
            if first_seq != 0 and entry.producer_epoch != NO_PRODUCER_EPOCH:
                raise OutOfOrderSequenceError(
                    f"Invalid sequence number for new epoch of producer {entry.producer_id} at offset {offset} in "
                    f"partition {self._tp}: {epoch} (request epoch), {first_seq} (seq. number), "
                    f"{entry.producer_epoch} (current producer epoch)",
                    topic_partition=self._tp, producer_id=entry.producer_id, offset=offset)
        elif entry.producer_epoch != NO_PRODUCER_EPOCH and not in_sequence(entry.last_seq, first_seq):
            raise OutOfOrderSequenceError(
                f"Out of order sequence number for producer {entry.producer_id} at offset {offset} in partition "
                f"{self._tp}: {first_seq} (incoming seq. number), {entry.last_seq} (current end sequence number)",
                topic_partition=self._tp, producer_id=entry.producer_id, offset=offset)

    def update(self, batch: ProducerBatch, origin: AppendOrigin = AppendOrigin.REPLICATION) -> CompletedTxn | None:
        """Apply one written batch (Kafka's ``ProducerAppendInfo.append`` then ``update``). A first
        transactional batch opens its producer's transaction; a marker ends it and returns the
        :class:`CompletedTxn` (None for a marker with no open transaction, and for data), which
        stays among :attr:`txns` until the caller has indexed it and calls :meth:`complete_txn`."""
        entry = self._producers.get(batch.producer_id)
        if entry is None:
            entry = self._producers[batch.producer_id] = ProducerStateEntry(batch.producer_id)
        elif batch.producer_epoch < entry.producer_epoch and origin is AppendOrigin.REPLICATION:
            log.warning("%s: epoch %d of producer %d at offset %d is older than its last epoch %d",
                        self._tp, batch.producer_epoch, batch.producer_id, batch.first_offset, entry.producer_epoch)
        if batch.is_control:
            if batch.coordinator_epoch is None:  # an empty control batch: its transaction is cleaned away
                return None
            first = entry.current_txn_first_offset
            entry.markers += 1
            entry.maybe_update_epoch(batch.producer_epoch)
            entry.coordinator_epoch = batch.coordinator_epoch
            entry.current_txn_first_offset = None
            entry.last_timestamp = batch.max_timestamp
            return None if first is None else CompletedTxn(batch.producer_id, first, batch.first_offset, batch.is_abort)
        entry.add_batch(batch.producer_epoch, batch.last_sequence, batch.last_offset,
                        batch.last_offset - batch.first_offset, batch.max_timestamp)
        if batch.is_transactional and entry.current_txn_first_offset is None:
            entry.current_txn_first_offset = batch.first_offset
            self.txns.begin(batch.producer_id, batch.first_offset)
        return None

    def complete_txn(self, txn: CompletedTxn, high_watermark: int) -> None:
        """``txn`` (returned by :meth:`update`) is indexed: it is no longer ongoing; it holds the
        last stable offset back until ``high_watermark`` passes its marker."""
        self.txns.complete(txn, high_watermark)

    def update_in_sequence(self, producer_id: int, epoch: int, last_sequence: int, first_offset: int,
                           last_offset: int, max_timestamp: int) -> None:
        """:meth:`update` of one written client data batch (neither transactional nor control)
        that :meth:`continues_in_sequence` let through, then :meth:`update_map_end_offset` past it:
        the leader's common append path, without building a :class:`ProducerBatch` (a frozen
        dataclass: ~1.5 us of a ~10 us idempotent append)."""
        entry = self._producers.get(producer_id)
        if entry is None:
            entry = self._producers[producer_id] = ProducerStateEntry(producer_id)
        entry.add_batch(epoch, last_sequence, last_offset, last_offset - first_offset, max_timestamp)
        self._last_map_offset = last_offset + 1

    def update_map_end_offset(self, offset: int) -> None:
        self._last_map_offset = offset

    def _track_open_txns(self) -> None:
        """Rebuild :attr:`txns` from the producers' open transactions (after a load)."""
        self.txns.load((pid, e.current_txn_first_offset) for pid, e in self._producers.items()
                       if e.current_txn_first_offset is not None)

    # --- expiration -----------------------------------------------------------------------------

    def _is_expired(self, now: int, entry: ProducerStateEntry) -> bool:
        return entry.current_txn_first_offset is None and now - entry.last_timestamp >= self.producer_id_expiration_ms

    def remove_expired_producers(self, now: int) -> int:
        """Forget producers idle for ``producer.id.expiration.ms``; returns how many went."""
        expired = [pid for pid, entry in self._producers.items() if self._is_expired(now, entry)]
        for pid in expired:
            del self._producers[pid]
        return len(expired)

    # --- snapshots ------------------------------------------------------------------------------

    def _list_snapshots(self, names: Iterable[str] | None = None) -> dict[int, Path]:
        if names is None:
            try:
                names = os.listdir(self._dir)
            except FileNotFoundError:
                return {}
        return {files.offset_from_file_name(n): self._dir / n for n in names
                if n.endswith(files.PRODUCER_SNAPSHOT_SUFFIX) and n[:1].isdigit()}

    def take_snapshot(self, sync: bool = True) -> Path | None:
        """Write a snapshot at the map end offset unless one was already taken there; returns its
        path (None when nothing was written)."""
        if self._last_map_offset <= self._last_snap_offset:
            return None
        path = files.producer_snapshot_file(self._dir, self._last_map_offset)
        write_snapshot(path, [e.to_snapshot_entry() for e in self._producers.values()], sync)
        log.debug("%s: wrote producer snapshot at offset %d with %d producer ids", self._tp,
                  self._last_map_offset, len(self._producers))
        self._snapshots[self._last_map_offset] = path
        self._last_snap_offset = self._last_map_offset
        return path

    def remove_stray_snapshots(self, segment_base_offsets: Iterable[int]) -> None:
        """Delete snapshots that match no segment base offset, except the highest stray one when
        it is above every segment base (the snapshot a clean shutdown wrote at the log end).
        Acts on the snapshots this manager knows: listed when it was made, plus those it wrote
        (Kafka lists the dir again here because its loader runs after the manager is made and
        may write snapshots; :meth:`Log.open` makes the manager after loading, just before this)."""
        bases = set(segment_base_offsets)
        strays = [offset for offset in sorted(self._snapshots) if offset not in bases]
        keep = strays[-1] if strays and (not bases or strays[-1] > max(bases)) else None
        for offset in strays:
            if offset != keep:
                self._delete_snapshot(offset)

    def _delete_snapshot(self, offset: int) -> None:
        path = self._snapshots.pop(offset, None)
        if path is not None:
            fileops.unlink(path, missing_ok=True)

    def mark_snapshot_for_deletion(self, offset: int) -> Path | None:
        """Forget the snapshot at ``offset`` and rename it ``.deleted`` (unlinked later by the
        caller, or at the next load); None when there is none."""
        path = self._snapshots.pop(offset, None)
        if path is None:
            return None
        doomed = path.with_name(path.name + files.DELETED_SUFFIX)
        try:
            fileops.rename(path, doomed)
        except FileNotFoundError:
            return None
        return doomed

    def delete_snapshots_before(self, offset: int) -> None:
        for snapshot_offset in [o for o in self._snapshots if o < offset]:
            self._delete_snapshot(snapshot_offset)

    # --- load, truncation -----------------------------------------------------------------------

    def truncate_and_reload(self, log_start_offset: int, log_end_offset: int, now: int) -> None:
        """Drop snapshots outside (log start, log end]; unless the state already ends at the log
        end, clear it and load the latest readable snapshot (the map end offset then being that
        snapshot's offset, or the log start when there is none)."""
        for offset in list(self._snapshots):
            if offset > log_end_offset or offset <= log_start_offset:
                self._delete_snapshot(offset)
        if log_end_offset != self._last_map_offset:
            self._producers.clear()
            self._load_from_snapshot(log_start_offset, now)
            self._track_open_txns()
        else:
            self.on_log_start_offset_incremented(log_start_offset)

    def _load_from_snapshot(self, log_start_offset: int, now: int) -> None:
        while self._snapshots:
            offset = max(self._snapshots)
            try:
                entries = read_snapshot(self._snapshots[offset])
            except CorruptSnapshotError as e:
                log.warning("%s: discarding producer snapshot: %s", self._tp, e)
                self._delete_snapshot(offset)
                continue
            for e in entries:
                entry = ProducerStateEntry.from_snapshot_entry(e)
                if not self._is_expired(now, entry):
                    self._producers[entry.producer_id] = entry
            self._last_snap_offset = self._last_map_offset = offset
            return
        self._last_snap_offset = self._last_map_offset = log_start_offset

    def on_log_start_offset_incremented(self, log_start_offset: int) -> None:
        self.txns.remove_unreplicated_below(log_start_offset)
        if self._last_map_offset < log_start_offset:
            self._last_map_offset = log_start_offset
        self._last_snap_offset = max(self._snapshots, default=log_start_offset)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Forget every producer and delete every snapshot; the state starts empty at ``offset``."""
        self._producers.clear()
        self.txns.clear()
        for snapshot_offset in list(self._snapshots):
            self._delete_snapshot(snapshot_offset)
        self._last_snap_offset = 0
        self._last_map_offset = offset


# --- rebuilding from the log --------------------------------------------------------------------

def rebuild_producer_state(state: ProducerStateManager, segments: Sequence[LogSegment], log_start_offset: int,
                           last_offset: int, now: int) -> None:
    """Kafka's ``rebuildProducerState``: load the latest snapshot at or below ``last_offset``
    (the log end), replay the batches from there (from the log start without one; batch headers
    only, plus the marker record of a control batch), and take snapshots at the base offsets of
    the last two segments and at ``last_offset``. Unlike Kafka, a dir with no snapshot after a
    clean shutdown is replayed too (Kafka takes empty snapshots there, for brokers upgraded from
    before producer ids existed; tidelog dirs written before this feature have none either)."""
    snapshot_at = {s.base_offset for s in segments[-2:]}
    state.truncate_and_reload(log_start_offset, last_offset, now)
    if last_offset > state.map_end_offset:
        for segment in _segments_between(segments, state.map_end_offset, last_offset):
            start = max(segment.base_offset, state.map_end_offset, log_start_offset)
            state.update_map_end_offset(start)
            if segment.base_offset in snapshot_at:
                state.take_snapshot()
            replay_segment(state, segment, start, last_offset)
    state.update_map_end_offset(last_offset)
    state.take_snapshot()


def _segments_between(segments: Sequence[LogSegment], start: int, end: int) -> list[LogSegment]:
    """The segments (in base-offset order) that may hold offsets in [start, end)."""
    chosen = []
    for i, segment in enumerate(segments):
        next_base = segments[i + 1].base_offset if i + 1 < len(segments) else None
        if segment.base_offset < end and (next_base is None or next_base > start):
            chosen.append(segment)
    return chosen


def replay_segment(state: ProducerStateManager, segment: LogSegment, start: int, end: int) -> None:
    """Apply every batch of ``segment`` with a producer id and offsets in [start, end) to
    ``state``, without checks (Kafka's ``loadProducersFromRecords``). Reads the header columns
    of the whole segment, then the 61-byte header of each producer batch."""
    headers = segment.log.batch_headers(segment.size)
    rows = [i for i, (pid, last, base) in enumerate(zip(
        headers["producer_id"].tolist(), headers["last_offset"].tolist(), headers["base_offset"].tolist()))
        if pid >= 0 and last >= start and base < end]
    if not rows:
        return
    path = segment.log.path
    fd = fileops.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        for i in rows:
            position, size = int(headers["position"][i]), int(headers["size"][i])
            if int(headers["attributes"][i]) & _CONTROL_FLAG:
                batch = read_batch_at(fileops.pread(fd, size, position, path), 0)
                completed = None if batch is None else state.update(producer_batch(batch))
                if completed is not None:  # its .txnindex entry is the segment's own (recovery checks it)
                    state.complete_txn(completed, end)
                continue
            base_seq = _BATCH_HEAD.unpack(fileops.pread(fd, _BATCH_HEAD.size, position, path))[_BASE_SEQUENCE_INDEX]
            base, last = int(headers["base_offset"][i]), int(headers["last_offset"][i])
            attributes = int(headers["attributes"][i])
            last_seq = NO_SEQUENCE if base_seq == NO_SEQUENCE else increment_sequence(base_seq, last - base)
            state.update(ProducerBatch(
                int(headers["producer_id"][i]), int(headers["producer_epoch"][i]), base_seq, last_seq,
                base, last, int(headers["max_timestamp"][i]), bool(attributes & 0x10), False, -1))
    finally:
        os.close(fd)
