"""The transaction coordinator: Kafka's ``TransactionCoordinator`` for one node (transaction
protocol V1, KIP-98), over the state of :mod:`.state` kept in ``__transaction_state``.

What each request does (Kafka's rules and error codes; PRODUCER_FENCED is sent as
INVALID_PRODUCER_EPOCH to old request versions by the handlers):

* **InitProducerId** with a transactional id: a new id gets a fresh producer id at epoch 0
  (Empty); an id in Empty/Complete* gets its epoch bumped (or, once the epoch is exhausted, a new
  producer id at epoch 0), which fences the producer that held it; an id in Ongoing is fenced:
  its transaction is aborted at epoch + 1 and the answer is CONCURRENT_TRANSACTIONS, so the new
  producer retries and gets a further bump; Prepare* answers CONCURRENT_TRANSACTIONS. The
  timeout must be in (0, ``transaction.max.timeout.ms``] (INVALID_TRANSACTION_TIMEOUT).
* **AddPartitionsToTxn / AddOffsetsToTxn**: Ongoing with the union of partitions (the start time
  is set when a transaction begins); nothing is written when every partition is already in.
* **EndTxn**: PrepareCommit/PrepareAbort is stored, then a COMMIT/ABORT marker is appended to
  every partition of the transaction (``LogManager.write_txn_marker``; on a ``__consumer_offsets``
  partition the group coordinator is told too), then CompleteCommit/CompleteAbort is stored. The
  answer comes once the markers are written (at most :data:`END_TXN_REPLY_WAIT_S` after the
  Prepare record: a marker that keeps failing is retried in the background; the transaction is
  durable from its Prepare record on). A retried EndTxn of a completed transaction answers NONE.
* **Timeouts**: every ``transaction.abort.timed.out.transaction.cleanup.interval.ms`` an Ongoing
  transaction older than its timeout is fenced (epoch + 1) and aborted.
* **Expiration**: every ``transaction.remove.expired.transaction.cleanup.interval.ms`` an id in
  Empty/Complete* idle for ``transactional.id.expiration.ms`` is removed (a tombstone).
* **Loading**: at start the last record of every id is read back; a transaction found in
  Prepare* has its markers written again and is completed; one found Ongoing stays until its
  timeout (Kafka's rule). Requests during the load get COORDINATOR_LOAD_IN_PROGRESS.
* **Produce verification** (:meth:`TransactionCoordinator.verify_partition`): a transactional
  batch must come from the id's current producer id and epoch, for a partition of its Ongoing
  transaction.

One node: this broker coordinates every ``__transaction_state`` partition, at coordinator epoch
:data:`COORDINATOR_EPOCH`. A marker goes out at the epoch the partition last stored for the
producer when that is higher: in a dir adopted from a Kafka broker, Kafka's coordinator may have
written at a later leader epoch of ``__transaction_state``, and a lower epoch would be refused as a
zombie's (TRANSACTION_COORDINATOR_FENCED), leaving the transaction open on that partition.

Threading: the coordinator runs on the server's event loop; no method is thread-safe and none
takes a lock (``describe`` and ``list_transactions`` only read, as gauges do). File work
(appends, marker writes, producer id blocks) goes through ``run`` (the server's thread pool).
Concurrent requests for one id are ordered by its pending state, as Kafka's are.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

from tidelog.clock import Clock
from tidelog.errors import (
    InvalidProducerEpochError,
    StorageError,
    TidelogError,
    TransactionCoordinatorFencedError,
    UnknownTopicOrPartitionError,
)
from tidelog.manager import LogManager
from tidelog.manager.internal_topics import CONSUMER_OFFSETS
from tidelog.server.context import ApiContext
from tidelog.server.errors import CoordinatorNotAvailableError, ErrorCode
from tidelog.server.groups.records import offsets_partition_for
from tidelog.server.transactions.records import NO_PRODUCER_EPOCH, TxnLogValue
from tidelog.server.transactions.state import COMPLETE, EXPIRABLE, PREPARE, TxnMetadata, TxnState
from tidelog.server.transactions.topic import TransactionStateTopic
from tidelog.storage.config import BrokerConfig
from tidelog.topic_partition import TopicPartition

log = logging.getLogger(__name__)
E = ErrorCode
S = TxnState
T = TypeVar("T")
COORDINATOR_EPOCH = 0
END_TXN_REPLY_WAIT_S = 5.0
RETRY_BACKOFF_S = 0.1  # first wait before retrying a marker or a Complete record that failed
MAX_RETRY_BACKOFF_S = 5.0  # the wait doubles up to this
MAX_EPOCH = 32767

Run = Callable[..., Awaitable[Any]]
MarkerHook = Callable[[TopicPartition, int, int, bool], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class TxnConfig:
    """The broker keys of the coordinator (Kafka's names and defaults)."""

    max_timeout_ms: int = 900000
    abort_interval_ms: int = 10000
    id_expiration_ms: int = 604800000
    remove_expired_interval_ms: int = 3600000
    num_partitions: int = 50
    segment_bytes: int = 104857600
    load_buffer_bytes: int = 5242880
    verification: bool = True

    @classmethod
    def from_broker(cls, broker: BrokerConfig) -> TxnConfig:
        return cls(broker.get("transaction.max.timeout.ms"),
                   broker.get("transaction.abort.timed.out.transaction.cleanup.interval.ms"),
                   broker.get("transactional.id.expiration.ms"),
                   broker.get("transaction.remove.expired.transaction.cleanup.interval.ms"),
                   broker.get("transaction.state.log.num.partitions"),
                   broker.get("transaction.state.log.segment.bytes"),
                   broker.get("transaction.state.log.load.buffer.size"),
                   broker.get("transaction.partition.verification.enable"))


@dataclass(frozen=True, slots=True)
class InitResult:
    error: ErrorCode
    producer_id: int = -1
    producer_epoch: int = -1


@dataclass(frozen=True, slots=True)
class TransactionListing:
    """One id as ListTransactions shows it (``state``: Kafka's state name)."""

    transactional_id: str
    producer_id: int
    state: str
    start_timestamp: int


@dataclass(frozen=True, slots=True)
class TransactionDescription:
    """One id as DescribeTransactions shows it (``start_timestamp`` -1: no transaction)."""

    transactional_id: str
    state: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    start_timestamp: int
    partitions: tuple[TopicPartition, ...]


def storage_error_code(error: BaseException) -> ErrorCode:
    """Kafka's answer when a ``__transaction_state`` append fails: NOT_COORDINATOR for a storage
    failure of the partition, COORDINATOR_NOT_AVAILABLE otherwise."""
    if isinstance(error, (StorageError, OSError)):
        return E.NOT_COORDINATOR
    return E.COORDINATOR_NOT_AVAILABLE


class TransactionCoordinator:
    """Transactional ids and their transactions (see the module doc). Event-loop only."""

    def __init__(self, manager: LogManager, config: TxnConfig, clock: Clock, run: Run,
                 new_producer_id: Callable[[], int], on_marker: MarkerHook | None = None,
                 offsets_partitions: Callable[[], int] | None = None) -> None:
        self._manager = manager
        self._offsets_partitions = offsets_partitions
        self._config = config
        self._clock = clock
        self._run = run
        self._new_producer_id = new_producer_id
        self._on_marker = on_marker
        self.topic = TransactionStateTopic(manager, clock, partitions=config.num_partitions,
                                           segment_bytes=config.segment_bytes,
                                           load_buffer_bytes=config.load_buffer_bytes)
        self._txns: dict[str, TxnMetadata] = {}
        self._by_pid: dict[int, str] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._loading = True
        self._stopped = False

    @property
    def config(self) -> TxnConfig:
        return self._config

    # --- loading and lifetime ------------------------------------------------------------------

    async def load(self) -> None:
        """Read ``__transaction_state`` back (file work in the pool), then finish every
        transaction found in Prepare* in the background."""
        loaded = await self._run(self.topic.load)
        for transactional_id, value in loaded.values.items():
            try:
                meta = TxnMetadata.from_value(transactional_id, value)
            except ValueError as e:
                log.warning("transactional id %s: skipped, %s", transactional_id, e)
                continue
            if meta.state in (S.DEAD, S.PREPARE_EPOCH_FENCE):
                continue
            self._txns[transactional_id] = meta
            self._by_pid[meta.producer_id] = transactional_id
        self._loading = False
        for meta in list(self._txns.values()):
            if meta.state in PREPARE:
                log.info("transactional id %s: completing its %s found at load", meta.transactional_id,
                         meta.state.state_name)
                self._spawn(self._finish(meta))

    async def stop(self, grace_s: float = END_TXN_REPLY_WAIT_S) -> None:
        """Let the completions in flight finish for up to ``grace_s``, then cancel them (a
        transaction left in Prepare* is finished at the next load)."""
        self._stopped = True
        if self._tasks:
            _, pending = await asyncio.wait(set(self._tasks), timeout=grace_s)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.gather(*pending, return_exceptions=True)

    def _spawn(self, work: Awaitable[None]) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(work)  # type: ignore[arg-type]
        self._tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None and not self._stopped:
            log.error("transaction coordinator task failed", exc_info=task.exception())

    def _now(self) -> int:
        return self._clock.milliseconds()

    # --- storing a transition -------------------------------------------------------------------

    async def _store(self, meta: TxnMetadata, value: TxnLogValue, last_epoch: int | None = None) -> ErrorCode:
        """Append the pending transition's record; on success it becomes the state."""
        try:
            await self._run(self.topic.append, meta.transactional_id, value)
        except Exception as e:  # noqa: BLE001 - every failure becomes Kafka's coordinator error
            meta.abandon()
            log.warning("transactional id %s: storing %s failed: %s", meta.transactional_id,
                        S.from_id(value.state_id).state_name, e)
            return storage_error_code(e)
        old_pid = meta.producer_id
        meta.complete(last_epoch)
        if old_pid != meta.producer_id:
            self._by_pid.pop(old_pid, None)
        self._by_pid[meta.producer_id] = meta.transactional_id
        return E.NONE

    async def _producer_id(self) -> int:
        return int(await self._run(self._new_producer_id))

    # --- InitProducerId --------------------------------------------------------------------------

    async def init_producer_id(self, transactional_id: str, timeout_ms: int, expected_producer_id: int = -1,
                               expected_epoch: int = -1) -> InitResult:
        """InitProducerId with a transactional id (see the module doc)."""
        if not transactional_id:
            return InitResult(E.INVALID_REQUEST)
        if timeout_ms <= 0 or timeout_ms > self._config.max_timeout_ms:
            return InitResult(E.INVALID_TRANSACTION_TIMEOUT)
        if self._loading:
            return InitResult(E.COORDINATOR_LOAD_IN_PROGRESS)
        try:
            await self._run(self.topic.ensure)
        except TidelogError as e:
            log.warning("cannot create the transaction state topic: %s", e)
            return InitResult(E.COORDINATOR_NOT_AVAILABLE)
        meta = self._txns.get(transactional_id)
        if meta is None:
            producer_id = await self._producer_id()
            meta = self._txns.get(transactional_id)  # another request may have created it meanwhile
            if meta is None:
                meta = TxnMetadata(transactional_id, producer_id, NO_PRODUCER_EPOCH, timeout_ms, S.EMPTY,
                                   last_update_timestamp=self._now())
                self._txns[transactional_id] = meta
        expected = (expected_producer_id, expected_epoch) if expected_producer_id != -1 else None
        if meta.pending is not None:
            return InitResult(E.CONCURRENT_TRANSACTIONS)
        if expected is not None and not _valid_expected(meta, *expected):
            return InitResult(E.PRODUCER_FENCED)
        if meta.state in PREPARE or meta.state in (S.DEAD, S.PREPARE_EPOCH_FENCE):
            return InitResult(E.CONCURRENT_TRANSACTIONS)
        if meta.state is S.ONGOING:
            error = await self._fence_and_abort(meta, "a new producer with the same transactional id")
            return InitResult(E.CONCURRENT_TRANSACTIONS if error is E.NONE else error)
        return await self._bump(meta, timeout_ms, expected)

    async def _bump(self, meta: TxnMetadata, timeout_ms: int, expected: tuple[int, int] | None) -> InitResult:
        """Empty/Complete* -> Empty at the next epoch (or a new producer id once exhausted)."""
        if meta.epoch_exhausted and (expected is None or expected[1] == meta.producer_epoch):
            producer_id = await self._producer_id()
            if meta.pending is not None or meta.state not in (S.EMPTY, *COMPLETE):
                return InitResult(E.CONCURRENT_TRANSACTIONS)
            last_epoch = meta.producer_epoch if expected is not None else NO_PRODUCER_EPOCH
            value = meta.prepare(S.EMPTY, producer_id=producer_id, epoch=0, timeout_ms=timeout_ms,
                                 partitions=frozenset(), start=-1, now=self._now())
        else:
            epoch, last_epoch = meta.producer_epoch + 1, NO_PRODUCER_EPOCH
            if expected is not None:
                if meta.producer_epoch == NO_PRODUCER_EPOCH or expected[1] == meta.producer_epoch:
                    last_epoch = meta.producer_epoch
                elif expected[1] == meta.last_epoch:  # a retry of a bump that succeeded
                    epoch, last_epoch = meta.producer_epoch, meta.last_epoch
                else:
                    return InitResult(E.PRODUCER_FENCED)
            value = meta.prepare(S.EMPTY, epoch=epoch, timeout_ms=timeout_ms, partitions=frozenset(), start=-1,
                                 now=self._now())
        error = await self._store(meta, value, last_epoch)
        if error is not E.NONE:
            return InitResult(error)
        return InitResult(E.NONE, meta.producer_id, meta.producer_epoch)

    # --- AddPartitionsToTxn / AddOffsetsToTxn ------------------------------------------------------

    def _check_client(self, transactional_id: str, producer_id: int, epoch: int) -> tuple[ErrorCode, TxnMetadata | None]:
        """The checks every request of a producer passes first (Kafka's order)."""
        if not transactional_id:
            return E.INVALID_REQUEST, None
        if self._loading:
            return E.COORDINATOR_LOAD_IN_PROGRESS, None
        meta = self._txns.get(transactional_id)
        if meta is None or meta.state is S.DEAD or meta.producer_id != producer_id:
            return E.INVALID_PRODUCER_ID_MAPPING, None
        if meta.producer_epoch != epoch:
            return E.PRODUCER_FENCED, None
        return E.NONE, meta

    async def add_partitions(self, transactional_id: str, producer_id: int, epoch: int,
                             partitions: Iterable[TopicPartition]) -> ErrorCode:
        """Add ``partitions`` to the producer's transaction (beginning it when none is open)."""
        error, meta = self._check_client(transactional_id, producer_id, epoch)
        if meta is None:
            return error
        wanted = frozenset(partitions)
        if meta.pending is not None or meta.state in PREPARE:
            return E.CONCURRENT_TRANSACTIONS
        if meta.state is S.ONGOING and wanted <= meta.partitions:
            return E.NONE
        if meta.state not in (S.ONGOING, S.EMPTY, *COMPLETE):
            return E.INVALID_TXN_STATE
        now = self._now()
        start = meta.start_timestamp if meta.state is S.ONGOING else now
        value = meta.prepare(S.ONGOING, partitions=meta.partitions | wanted, start=start, now=now)
        return await self._store(meta, value)

    async def add_offsets(self, transactional_id: str, producer_id: int, epoch: int, group_id: str) -> ErrorCode:
        """Add the group's ``__consumer_offsets`` partition to the producer's transaction."""
        error, meta = self._check_client(transactional_id, producer_id, epoch)
        if meta is None:
            return error
        if not group_id:
            return E.INVALID_REQUEST
        partition = await self.offsets_partition(group_id)
        if partition is None:
            return E.COORDINATOR_NOT_AVAILABLE
        return await self.add_partitions(transactional_id, producer_id, epoch, [partition])

    async def offsets_partition(self, group_id: str) -> TopicPartition | None:
        """The ``__consumer_offsets`` partition of ``group_id`` (the topic is created as the group
        coordinator creates it when missing); None when there is no such topic and none can be made."""
        def count() -> int:
            if self._offsets_partitions is not None:
                return self._offsets_partitions()
            return len(self._manager.partitions(CONSUMER_OFFSETS)) if self._manager.has_topic(CONSUMER_OFFSETS) else 0
        try:
            partitions = await self._run(count)
        except TidelogError as e:
            log.warning("cannot create %s: %s", CONSUMER_OFFSETS, e)
            return None
        if partitions <= 0:
            return None
        return TopicPartition(CONSUMER_OFFSETS, offsets_partition_for(group_id, partitions))

    # --- EndTxn ----------------------------------------------------------------------------------

    async def end_txn(self, transactional_id: str, producer_id: int, epoch: int, commit: bool) -> ErrorCode:
        """Commit or abort the producer's transaction (see the module doc)."""
        error, meta = self._check_client(transactional_id, producer_id, epoch)
        if meta is None:
            return error
        if meta.pending is not None:
            return E.CONCURRENT_TRANSACTIONS
        state = meta.state
        if state is S.ONGOING:
            value = meta.prepare(S.PREPARE_COMMIT if commit else S.PREPARE_ABORT, now=self._now())
            error = await self._store(meta, value)
            if error is E.NONE:
                await self._await_finish(self._spawn(self._finish(meta)))
            return error
        if state is (S.COMPLETE_COMMIT if commit else S.COMPLETE_ABORT):
            return E.NONE  # a retry of what is done
        if state is (S.PREPARE_COMMIT if commit else S.PREPARE_ABORT):
            return E.CONCURRENT_TRANSACTIONS
        return E.INVALID_TXN_STATE

    @staticmethod
    async def _await_finish(task: asyncio.Task[None]) -> None:
        """Wait for the markers at most END_TXN_REPLY_WAIT_S (the task goes on without us)."""
        await asyncio.wait({task}, timeout=END_TXN_REPLY_WAIT_S)

    async def _fence_and_abort(self, meta: TxnMetadata, why: str) -> ErrorCode:
        """Fence the producer of an Ongoing transaction (epoch + 1, never logged by itself) and
        abort the transaction at that epoch. NONE once PrepareAbort is stored."""
        epoch = meta.producer_epoch + 1 if meta.producer_epoch < MAX_EPOCH else meta.producer_epoch
        value = meta.prepare(S.PREPARE_ABORT, epoch=epoch, now=self._now())
        error = await self._store(meta, value, NO_PRODUCER_EPOCH)
        if error is E.NONE:
            log.info("transactional id %s: aborting its ongoing transaction at epoch %d (%s)",
                     meta.transactional_id, epoch, why)
            await self._await_finish(self._spawn(self._finish(meta)))
        return error

    async def _finish(self, meta: TxnMetadata) -> None:
        """Markers to every partition, then the Complete record (each retried until it lands or
        the coordinator stops; then the transaction stays in Prepare* and the next load finishes it)."""
        commit = meta.state is S.PREPARE_COMMIT
        for tp in sorted(meta.partitions):
            await self._write_marker(meta, tp, commit)
        target = S.COMPLETE_COMMIT if commit else S.COMPLETE_ABORT
        backoff = RETRY_BACKOFF_S
        while True:
            value = meta.prepare(target, partitions=frozenset(), now=self._now())
            if await self._store(meta, value) is E.NONE or self._stopped:
                return  # stopped: the next load completes it
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, MAX_RETRY_BACKOFF_S)

    def _append_marker(self, tp: TopicPartition, producer_id: int, producer_epoch: int, commit: bool) -> None:
        """Append the marker at the coordinator epoch the partition last saw from the producer's
        coordinator, at least :data:`COORDINATOR_EPOCH` (see the module doc). File work: the pool."""
        epoch = max([COORDINATOR_EPOCH, *(p.coordinator_epoch for p in self._manager.producer_states(tp)
                                          if p.producer_id == producer_id)])
        self._manager.write_txn_marker(tp, producer_id, producer_epoch, epoch, commit)

    async def _write_marker(self, meta: TxnMetadata, tp: TopicPartition, commit: bool) -> None:
        pid, epoch = meta.producer_id, meta.producer_epoch
        backoff = RETRY_BACKOFF_S
        while True:
            try:
                await self._run(self._append_marker, tp, pid, epoch, commit)
            except (UnknownTopicOrPartitionError, InvalidProducerEpochError, TransactionCoordinatorFencedError) as e:
                # the partition is gone, or a newer producer epoch or coordinator wrote there: Kafka
                # drops the marker too
                log.warning("transactional id %s: no %s marker on %s: %s", meta.transactional_id,
                            "COMMIT" if commit else "ABORT", tp, e)
                return
            except Exception as e:  # noqa: BLE001 - retried: the transaction is durable in Prepare*
                if self._stopped:
                    raise  # the next load writes the markers again
                log.warning("transactional id %s: writing its marker on %s failed, retrying in %.1f s: %s",
                            meta.transactional_id, tp, backoff, e)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, MAX_RETRY_BACKOFF_S)
                continue
            if self._on_marker is not None:
                try:
                    await self._on_marker(tp, pid, epoch, commit)
                except Exception:  # noqa: BLE001 - the marker is written; a failing listener is logged
                    log.exception("after the marker of %s on %s", meta.transactional_id, tp)
            return

    # --- timers ----------------------------------------------------------------------------------

    def abort_timed_out(self) -> int:
        """Fence and abort every Ongoing transaction past its timeout; how many were started."""
        now, started = self._now(), 0
        for meta in list(self._txns.values()):
            if (meta.state is S.ONGOING and meta.pending is None
                    and meta.start_timestamp + meta.timeout_ms < now):
                self._spawn(self._timeout_abort(meta))
                started += 1
        return started

    async def _timeout_abort(self, meta: TxnMetadata) -> None:
        if meta.state is S.ONGOING and meta.pending is None:
            await self._fence_and_abort(meta, f"timed out after {meta.timeout_ms} ms")

    def expire_ids(self) -> int:
        """Remove every id idle in Empty/Complete* past ``transactional.id.expiration.ms``
        (a tombstone each); how many were started."""
        horizon, started = self._now() - self._config.id_expiration_ms, 0
        for meta in list(self._txns.values()):
            if meta.state in EXPIRABLE and meta.pending is None and meta.last_update_timestamp <= horizon:
                self._spawn(self._expire(meta))
                started += 1
        return started

    async def _expire(self, meta: TxnMetadata) -> None:
        meta.pending = S.DEAD
        try:
            await self._run(self.topic.append, meta.transactional_id, None)
        except Exception as e:  # noqa: BLE001 - tried again at the next run
            meta.abandon()
            log.warning("transactional id %s: expiring it failed: %s", meta.transactional_id, e)
            return
        log.info("transactional id %s expired (idle since %d)", meta.transactional_id, meta.last_update_timestamp)
        if self._txns.get(meta.transactional_id) is meta:
            del self._txns[meta.transactional_id]
            if self._by_pid.get(meta.producer_id) == meta.transactional_id:
                del self._by_pid[meta.producer_id]

    # --- Produce verification and admin reads -----------------------------------------------------

    def verify_partition(self, producer_id: int, producer_epoch: int, tp: TopicPartition) -> ErrorCode:
        """Whether a transactional batch of ``producer_id``/``producer_epoch`` may go to ``tp``:
        NONE when ``tp`` is in the producer's Ongoing transaction; PRODUCER_FENCED for another
        epoch; INVALID_PRODUCER_ID_MAPPING for a producer id no transactional id holds;
        CONCURRENT_TRANSACTIONS while the transaction completes; INVALID_TXN_STATE otherwise.
        O(1), no file work."""
        if self._loading:
            return E.COORDINATOR_LOAD_IN_PROGRESS
        transactional_id = self._by_pid.get(producer_id)
        meta = self._txns.get(transactional_id) if transactional_id is not None else None
        if meta is None or meta.producer_id != producer_id:
            return E.INVALID_PRODUCER_ID_MAPPING
        if meta.producer_epoch != producer_epoch:
            return E.PRODUCER_FENCED
        if meta.state is S.ONGOING and tp in meta.partitions and meta.pending in (None, S.ONGOING):
            return E.NONE
        if meta.state in PREPARE or meta.pending is not None:
            return E.CONCURRENT_TRANSACTIONS
        return E.INVALID_TXN_STATE

    def list_transactions(self, states: Iterable[str] = (), producer_ids: Iterable[int] = ()) -> list[TransactionListing]:
        """Every id (Dead ones excluded), filtered by Kafka state names (any case) and producer
        ids when given. Event loop; no lock (from another thread it reads a snapshot of the id map,
        as gauges do)."""
        wanted_states = {s.lower() for s in states}
        wanted_pids = set(producer_ids)
        return [TransactionListing(m.transactional_id, m.producer_id, m.state.state_name, m.start_timestamp)
                for m in self._txns.values()
                if m.state is not S.DEAD and (not wanted_states or m.state.state_name.lower() in wanted_states)
                and (not wanted_pids or m.producer_id in wanted_pids)]

    def describe(self, transactional_id: str) -> TransactionDescription | None:
        """The id's transaction, or None when the id is unknown (or Dead). Event loop; no lock
        (reads one id's fields: another thread may see them mid-transition)."""
        m = self._txns.get(transactional_id)
        if m is None or m.state is S.DEAD:
            return None
        return TransactionDescription(m.transactional_id, m.state.state_name, m.producer_id, m.producer_epoch,
                                      m.timeout_ms, m.start_timestamp, tuple(sorted(m.partitions)))

    @property
    def loading(self) -> bool:
        return self._loading


def _valid_expected(meta: TxnMetadata, producer_id: int, epoch: int) -> bool:
    """Kafka's isValidProducerId for an InitProducerId v3+ that names the producer it was."""
    return (meta.producer_epoch == NO_PRODUCER_EPOCH or producer_id == meta.producer_id
            or (producer_id == meta.previous_producer_id and epoch >= MAX_EPOCH - 1))


def transaction_coordinator(ctx: ApiContext) -> TransactionCoordinator:
    """The transaction coordinator of the server ``ctx`` belongs to; :class:`CoordinatorNotAvailableError` if none."""
    coordinator = getattr(ctx, "transactions", None)
    if coordinator is None:
        raise CoordinatorNotAvailableError("this server runs no transaction coordinator")
    return coordinator  # type: ignore[no-any-return]
