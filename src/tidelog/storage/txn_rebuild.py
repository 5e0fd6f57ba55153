"""Rebuilding a segment's ``.txnindex`` from the ABORT markers in its ``.log``.

Kafka rebuilds the transaction index whenever it recovers a segment (``LogSegment.recover`` with
the producer state at the segment's base offset): each transaction marker completes the
producer's open transaction, and an ABORT marker of a transaction that holds data (Kafka's
``ProducerAppendInfo.appendEndTxnMarker`` completes only those) adds the entry
``(producer id, first offset, marker offset, last stable offset)``, where the last stable offset is
the first offset of the earliest transaction still open for *another* producer, or the marker
offset + 1 when there is none: :func:`~.txn_tracking.aborted_txn_entry`, the rule the append path
writes entries with. Only the transactional batches matter, so this walks batch headers
(the numba header walk) and decodes only the control batches' marker records.

The open transactions at the segment's base offset come from the newest readable producer
snapshot at or below it (a snapshot keeps each producer's ``currentTxnFirstOffset``) and the
transactional batches between that snapshot and the segment; without one, from the log start.
That start and the replay step are :mod:`.txn_tracking`'s (:func:`~.txn_tracking.open_txns_at_snapshot`,
:func:`~.txn_tracking.replay_txn_batch`), the ones the read-only view's last stable offset
(:mod:`.view_txns`) uses: this module decodes each control batch's marker record, the view
counts a control batch's records (it needs no marker type, only whether one is there).

:func:`abort_markers` is the cheap half (one segment's headers): a segment without ABORT markers
needs no index, and the caller only replays when the markers and the index's entries disagree.
:class:`TxnIndexCheck` is that caller: it checks each segment of one log once per process, before
any entry of it is served, on its own lock so that the log's appends never wait for a check.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

from tidelog.errors import CorruptIndexError, CorruptRecordError
from tidelog.records import read_batch_at
from tidelog.records.batch import CONTROL_FLAG_MASK, TRANSACTIONAL_FLAG_MASK
from tidelog.records.control import ControlRecordType, control_batch_type
from tidelog.storage import fileops
from tidelog.storage.file_records import FileRecords
from tidelog.storage.segment import LogSegment
from tidelog.storage.txn_index import AbortedTxn, TransactionIndex
from tidelog.storage.txn_tracking import aborted_txn_entry, open_txns_at_snapshot, replay_txn_batch

log = logging.getLogger(__name__)


class SegmentFiles(Protocol):
    """What a rebuild reads of a segment: a live :class:`LogSegment`, or a read-only view's
    stand-in (:mod:`.view_txns`)."""

    @property
    def base_offset(self) -> int: ...
    @property
    def log(self) -> FileRecords: ...
    @property
    def size(self) -> int: ...


@dataclass(frozen=True, slots=True)
class TxnBatch:
    """A transactional batch, from its header (and, for a control batch, its marker record)."""

    producer_id: int
    base_offset: int
    control: ControlRecordType | None  # None: a data batch; UNKNOWN also for an empty control batch


def transactional_batches(segment: SegmentFiles, start: int = 0, end: int = 2**63 - 1) -> Iterator[TxnBatch]:
    """The transactional batches of ``segment`` with offsets in [start, end), in order. Reads the
    header columns (one walk of the mapped ``.log``), then each control batch whole (~78 bytes)."""
    headers = segment.log.batch_headers(segment.size)
    attributes = headers["attributes"]
    # selected in numpy: a segment of 1-record batches has millions of rows, few of them transactional
    rows = np.flatnonzero(((attributes & TRANSACTIONAL_FLAG_MASK) != 0) & (headers["producer_id"] >= 0)
                          & (headers["last_offset"] >= start) & (headers["base_offset"] < end))
    if len(rows) == 0:
        return
    path = segment.log.path
    fd = fileops.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        for i in rows.tolist():
            pid, base = int(headers["producer_id"][i]), int(headers["base_offset"][i])
            if not int(attributes[i]) & CONTROL_FLAG_MASK:
                yield TxnBatch(pid, base, None)
                continue
            batch = read_batch_at(fileops.pread(fd, int(headers["size"][i]), int(headers["position"][i]), path), 0)
            yield TxnBatch(pid, base, ControlRecordType.UNKNOWN if batch is None else control_batch_type(batch))
    finally:
        os.close(fd)


def abort_markers(segment: SegmentFiles, end: int = 2**63 - 1) -> list[tuple[int, int]]:
    """``(producer id, marker offset)`` of every ABORT marker below ``end`` in ``segment``, in offset order."""
    return [(b.producer_id, b.base_offset) for b in transactional_batches(segment, 0, end)
            if b.control is ControlRecordType.ABORT]


def _replay(open_txns: dict[int, int], batch: TxnBatch) -> AbortedTxn | None:
    """Replay one batch over ``open_txns`` (producer id -> first offset of its open transaction:
    :func:`~.txn_tracking.replay_txn_batch`); the ``.txnindex`` entry an ABORT adds."""
    control = batch.control
    first = replay_txn_batch(open_txns, batch.producer_id, batch.base_offset, control is not None,
                             control in (ControlRecordType.ABORT, ControlRecordType.COMMIT))
    if first is None or control is not ControlRecordType.ABORT:
        return None
    return aborted_txn_entry(batch.producer_id, first, batch.base_offset, open_txns.items())


def rebuild_aborted_txns(segments: Sequence[SegmentFiles], target: SegmentFiles, log_start_offset: int,
                         snapshot_offsets: Sequence[int], dir: Path, open_at: dict[int, dict[int, int]],
                         end: int = 2**63 - 1) -> list[AbortedTxn]:
    """The entries Kafka's recovery would give ``target``'s ``.txnindex`` for its markers below
    ``end`` (see the module docstring); ``segments`` are the log's, in order, ``snapshot_offsets``
    its producer snapshots.
    ``open_at`` caches the open transactions at segment base offsets (filled here, read by the
    next call): rebuilding every segment of a log walks each one once. Walks the headers of the
    segments between the replay's start and ``target``."""
    cached = max((base for base in open_at if base <= target.base_offset), default=None)
    start, open_txns = _open_txns_at(target.base_offset, log_start_offset, snapshot_offsets, dir)
    if cached is not None and cached >= start:
        start, open_txns = cached, dict(open_at[cached])
    for i, segment in enumerate(segments):
        if segment.base_offset >= target.base_offset:
            break
        following = segments[i + 1].base_offset if i + 1 < len(segments) else target.base_offset
        if following <= start:
            continue
        for batch in transactional_batches(segment, start, target.base_offset):
            _replay(open_txns, batch)
        if following <= target.base_offset:
            open_at[following] = dict(open_txns)
    open_at[target.base_offset] = dict(open_txns)
    return [entry for batch in transactional_batches(target, max(start, target.base_offset), end)
            if (entry := _replay(open_txns, batch)) is not None]


def _open_txns_at(offset: int, log_start_offset: int, snapshot_offsets: Sequence[int],
                  dir: Path) -> tuple[int, dict[int, int]]:
    """:func:`~.txn_tracking.open_txns_at_snapshot`, logging a snapshot it could not read."""
    def skipped(snapshot: int, e: Exception) -> None:
        log.warning("%s: producer snapshot %d not used to rebuild a transaction index: %s", dir, snapshot, e)
    return open_txns_at_snapshot(dir, snapshot_offsets, log_start_offset, offset, skipped)


def merge_entries(existing: Sequence[AbortedTxn], rebuilt: Sequence[AbortedTxn]) -> list[AbortedTxn]:
    """``rebuilt``, except that an existing entry for the same producer and ABORT marker is kept
    as it is (the broker that wrote it knew its producer state first hand)."""
    kept = {(txn.producer_id, txn.last_offset): txn for txn in existing}
    return [kept.get((txn.producer_id, txn.last_offset), txn) for txn in rebuilt]



@dataclass(frozen=True, slots=True)
class LogState:
    """What a check needs of its log, taken under the log's lock."""

    segments: Sequence[LogSegment]
    log_start_offset: int
    snapshot_offsets: Sequence[int]
    log_end_offset: int


class TxnIndexCheck:
    """Checks each segment's ``.txnindex`` of one log against the ABORT markers in its ``.log``
    the first time it is asked, and rewrites it where they disagree (a lost, truncated or corrupt
    ``.txnindex`` would otherwise hand aborted records to read_committed consumers and to the
    cleaner as committed). A check walks the segment's batch headers; only where markers and
    entries differ does it replay the transactional batches since the newest producer snapshot
    below the segment. Checks are serialised on a lock of their own; the log's lock
    (``log_lock``, which ``state`` takes too) is held only to read the index's entries with the
    log end (markers appended later, with their entries, are left out of the comparison and kept),
    for the swap of the entries, a truncation and a few small writes, never an fsync: the check
    runs again in every process before the index is served, so a rewrite a crash loses (or
    tears, which the load's sanity check turns into a segment recovery) is done again."""

    def __init__(self, name: object, dir: Path, log_lock: threading.RLock, state: Callable[[], LogState]) -> None:
        self._name = name
        self._dir = dir
        self._log_lock = log_lock
        self._state = state
        self._lock = threading.Lock()
        self._open_at: dict[int, dict[int, int]] = {}  # open transactions at segment bases (see rebuild_aborted_txns)
        self._truncations = 0

    def checked(self, segment: LogSegment) -> TransactionIndex:
        """``segment``'s transaction index, checked (once per segment and process)."""
        if not segment.txn_index_checked:
            with self._lock:
                if not segment.txn_index_checked:
                    segment.txn_index_checked = self._check(segment)
        return segment.txn_index

    def check_recovered(self, segments: Sequence[LogSegment]) -> None:
        """Check now, as Kafka's recovery rebuilds them, the indexes of the ``segments`` that
        recovery marked (:attr:`LogSegment.txn_index_suspect`: transaction markers in the
        recovered data, or an unreadable file), so the dir is right for Kafka too."""
        for segment in segments:
            if segment.txn_index_suspect:
                segment.txn_index_suspect = False
                self.checked(segment)

    def truncated(self) -> None:
        """The log was truncated (call under the log's lock): the open transactions found so
        far no longer hold, and a check under way does not write what it found."""
        self._open_at = {}
        self._truncations += 1

    def _check(self, segment: LogSegment) -> bool:
        """Whether ``segment``'s index is checked now (not when a truncation overtook the check)."""
        try:
            return self._check_against_markers(segment)
        except FileNotFoundError:  # deleted meanwhile (retention): nothing left to serve from it
            return True
        except CorruptRecordError as e:  # reads of the bad batch fail on their own; the index stays
            log.warning("%s: transaction index of %s not checked: %s", self._name, segment.log.path, e)
            return True

    def _check_against_markers(self, segment: LogSegment) -> bool:
        """The markers and entries compared are those below the log end taken with the entries,
        under the log's lock: an append (its marker and its entry, together under that lock) may
        land meanwhile in the active segment, and its entry is kept as written."""
        index = segment.txn_index
        with self._log_lock:
            truncations, open_at, end = self._truncations, self._open_at, self._state().log_end_offset
            existing = self._entries(index)
        markers = abort_markers(segment, end)
        if existing is not None and [(t.producer_id, t.last_offset) for t in existing] == markers:
            return True
        expected: list[AbortedTxn] = []
        if markers:
            state = self._state()
            rebuilt = rebuild_aborted_txns(state.segments, segment, state.log_start_offset,
                                           state.snapshot_offsets, self._dir, open_at, end)
            expected = merge_entries(existing or [], rebuilt)
        if expected == existing:
            return True
        with self._log_lock:
            if truncations != self._truncations:
                return False  # what was found may predate the truncation: the next ask checks again
            if not any(s is segment for s in self._state().segments):
                return True  # replaced or deleted meanwhile
            later = [t for t in self._entries(index) or [] if t.last_offset >= end]  # appended meanwhile
            log.warning("%s: rebuilding %s from the ABORT markers in its segment: %s entries, %d expected",
                        self._name, index.path, "unreadable" if existing is None else len(existing),
                        len(expected))
            index.reset()
            for txn in expected + later:
                index.append(txn)
        return True

    def _entries(self, index: TransactionIndex) -> list[AbortedTxn] | None:
        """The index's entries; None when it is unreadable (logged)."""
        try:
            return index.all_aborted_txns()
        except CorruptIndexError as e:
            log.warning("%s: %s", self._name, e)
            return None
