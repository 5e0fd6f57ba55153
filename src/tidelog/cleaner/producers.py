"""The last batch of every active producer: what the cleaner must keep for producer state.

Kafka's cleaner asks the log's producer state (``UnifiedLog.lastRecordsOfActiveProducers``) for
each active producer's ``lastDataOffset`` and epoch, and keeps the batch holding that offset —
empty if all its records go — so that a producer's last sequence number survives compaction
(KAFKA-5793, kafka-storage.md §3.7.6). When the producer has no data batch at its current epoch
(its last entry is a transaction marker written with a bumped epoch), its control batches of that
epoch are kept instead, for fencing.

The cleaner does not read it from the log's producer state (:mod:`tidelog.storage.producer_state`)
yet: :func:`producer_last_batches` rebuilds exactly the part of that state the cleaner needs by
walking the **headers** of every batch in every segment of the log, in order, with the scan walker
(numba; records are never decoded), applying Kafka's ``ProducerStateEntry`` rules:

* a batch whose epoch differs from the producer's current one starts a new epoch and forgets the
  producer's data batches (``maybeUpdateProducerEpoch`` clears ``batchMetadata``); data batches
  and markers both do this;
* ``lastDataOffset`` = last offset of the producer's last data batch at the current epoch;
* a transactional data batch opens a transaction, a marker closes it;
* ``lastTimestamp`` = max timestamp of the producer's last batch (data or marker).

Approximations, documented because Kafka's state can differ from a walk of the segments:
producers are *expired* here only if ``now`` and ``expiration_ms`` are given (Kafka's
``producer.id.expiration.ms``, default 86400000): a producer without an open transaction whose
``now - lastTimestamp >= expiration_ms`` is dropped, as Kafka's periodic expiry task would have
(it runs every ``producer.id.expiration.check.interval.ms``, so Kafka may still hold a producer
for up to that long after it expired). Producers whose data lie below the log start offset are
not evicted, and a segment file deleted while the walk runs is skipped.

Cost: one pass over the batch headers of the whole log, one compiled header walk per segment
(only header bytes are read; no batch object is built), so it grows with the number of batches,
not with their size.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from tidelog.records.batch import CONTROL_FLAG_MASK, TRANSACTIONAL_FLAG_MASK

if TYPE_CHECKING:
    from tidelog.storage.log import Log

DEFAULT_PRODUCER_ID_EXPIRATION_MS = 86_400_000  # Kafka's producer.id.expiration.ms

Headers = dict[str, np.ndarray]  # BATCH_COLUMNS of the v2 batches of one segment


@dataclass(frozen=True, slots=True)
class ProducerLastBatch:
    """What the cleaner keeps for one active producer.

    ``is_control`` False: ``last_offset`` is the producer's ``lastDataOffset``; the batch whose
    last offset equals it is kept. ``is_control`` True: the producer has no data batch at
    ``producer_epoch`` (its last entry is a marker, whose last offset is ``last_offset``); every
    control batch of that producer and epoch is kept. ``last_timestamp``: max timestamp of the
    producer's last batch (what expiration compares with).
    """

    last_offset: int
    producer_epoch: int
    is_control: bool
    last_timestamp: int = -1


@dataclass(slots=True)
class _State:
    epoch: int
    last_data_offset: int  # -1: no data batch at the current epoch
    last_offset: int
    last_timestamp: int
    in_transaction: bool


def producer_last_batches(log: Log, now: int | None = None,
                          expiration_ms: int | None = None) -> dict[int, ProducerLastBatch]:
    """Every active producer id (>= 0) of ``log`` with the batch the cleaner must keep for it.

    Reads every segment's batch headers (not the records); takes the log lock only to list the
    segments and their sizes. With ``now`` given, producers expired after ``expiration_ms``
    (default Kafka's 86400000) are left out. CorruptRecordError (path, position) when a header
    cannot be a batch.
    """
    with log.lock:
        files = [(segment.log, segment.size) for segment in log.segments]
    states: dict[int, _State] = {}
    for records, size in files:
        try:
            headers = records.batch_headers(size)
        except FileNotFoundError:
            continue  # deleted (retention, a finished clean) since the segments were listed
        _merge(states, headers)  # legacy entries have producer id -1: skipped
    if now is not None:
        limit = DEFAULT_PRODUCER_ID_EXPIRATION_MS if expiration_ms is None else expiration_ms
        states = {pid: s for pid, s in states.items()
                  if s.in_transaction or now - s.last_timestamp < limit}
    return {pid: _last_batch(s) for pid, s in states.items()}


def _last_batch(state: _State) -> ProducerLastBatch:
    if state.last_data_offset >= 0:
        return ProducerLastBatch(state.last_data_offset, state.epoch, False, state.last_timestamp)
    return ProducerLastBatch(state.last_offset, state.epoch, True, state.last_timestamp)


# --- Kafka's ProducerStateEntry rules, vectorised per segment -------------------------------

def _merge(states: dict[int, _State], headers: Headers) -> None:
    """Apply one run of headers (in log order) to ``states``: one Python step per producer."""
    pids = headers["producer_id"]
    rows = np.flatnonzero(pids >= 0)
    if len(rows) == 0:
        return
    order = rows[np.argsort(pids[rows], kind="stable")]  # grouped by producer, log order inside
    summary = _summarize(headers, order)
    for values in zip(*(column.tolist() for column in summary)):
        _apply(states, *values)


def _summarize(headers: Headers, order: np.ndarray) -> tuple[np.ndarray, ...]:
    """Per producer of the run: (pid, first epoch, last epoch, epoch changed inside, last data
    offset at the last epoch or -1, transaction state 0 unchanged / 1 open / 2 closed, last
    offset, last timestamp)."""
    pid = headers["producer_id"][order]
    epoch = headers["producer_epoch"][order]
    attributes = headers["attributes"][order]
    n = len(order)
    index = np.arange(n)
    group_start = np.ones(n, bool)
    group_start[1:] = pid[1:] != pid[:-1]
    run_start = group_start.copy()
    run_start[1:] |= epoch[1:] != epoch[:-1]
    last = np.flatnonzero(np.append(group_start[1:], True))
    first = np.flatnonzero(group_start)
    run_begin = np.maximum.accumulate(np.where(run_start, index, 0))[last]
    is_data = (attributes & CONTROL_FLAG_MASK) == 0
    last_data = np.maximum.accumulate(np.where(is_data, index, -1))[last]
    last_offset = headers["last_offset"][order]
    data_offset = np.where(last_data >= run_begin, last_offset[np.maximum(last_data, 0)], -1)
    last_txn = np.maximum.accumulate(np.where(attributes & TRANSACTIONAL_FLAG_MASK, index, -1))[last]
    txn_state = np.where(last_txn < first, 0, np.where(is_data[np.maximum(last_txn, 0)], 1, 2))
    return (pid[last], epoch[first], epoch[last], run_begin > first, data_offset, txn_state,
            last_offset[last], headers["max_timestamp"][order][last])


def _apply(states: dict[int, _State], pid: int, first_epoch: int, epoch: int, epoch_changed: bool,
           data_offset: int, txn_state: int, last_offset: int, last_timestamp: int) -> None:
    state = states.get(pid)
    if state is None:
        state = states[pid] = _State(epoch, data_offset, last_offset, last_timestamp, txn_state == 1)
        return
    if epoch_changed or first_epoch != state.epoch or data_offset >= 0:
        state.last_data_offset = data_offset
    state.epoch = epoch
    state.last_offset = last_offset
    state.last_timestamp = last_timestamp
    if txn_state:
        state.in_transaction = txn_state == 1
