"""``__consumer_offsets`` through the LogManager: created on first use, appended to by the
coordinator, read back whole when the broker starts.

The topic is created as Kafka's group coordinator creates it: ``offsets.topic.num.partitions``
partitions (50), ``cleanup.policy=compact`` and ``segment.bytes`` from
``offsets.topic.segment.bytes`` (the configs :data:`~tidelog.manager.kraft_metadata.INTERNAL_TOPIC_CONFIGS`
adopts a Kafka data dir's copy with). A topic already there (ours, or Kafka's adopted) keeps its
partition count, and groups are placed by it.

Each write is one uncompressed RecordBatch v2 (Kafka's default ``offsets.topic.compression.codec``
is none), CreateTime now, appended with ``AppendOrigin.COORDINATOR``. Records are Kafka's (see
:mod:`.records`), so the cleaner compacts the topic down to the last commit per partition and the
last metadata per group, and a Kafka broker reads it.

A TxnOffsetCommit's offsets are one transactional batch of the producer (its producer id and
epoch, base sequence 0, as Kafka's coordinator runtime writes them); the transaction coordinator
later appends the COMMIT or ABORT marker to the partition.

Loading replays every partition from its log start to its high watermark, as Kafka's coordinator
loader does: the last record of a key wins, a tombstone deletes it (and drops pending transactional
offsets of that partition); offsets of a transactional batch are held pending for its producer
until a COMMIT marker of that producer makes them committed (unless a later commit of the same
partition came first, see :mod:`.txn_offsets`) or an ABORT drops them; offsets whose marker is not
in the log yet stay pending (the transaction coordinator completes them). A record whose key or
value does not decode is skipped with a warning (the broker still starts); record types a classic
coordinator does not know (KIP-848 consumer groups, share groups) are skipped too.

:class:`OffsetsTopic` methods do file work: call them in the thread pool. :class:`OffsetsTopicStore`
is the coordinator's :class:`~tidelog.server.groups.coordinator.GroupStore` on the event loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TypeVar

from tidelog.clock import Clock
from tidelog.errors import CorruptRecordError
from tidelog.manager import LogManager
from tidelog.manager.kraft_metadata import INTERNAL_TOPIC_CONFIGS
from tidelog.records import RecordBatch
from tidelog.records.builder import BatchBuilder
from tidelog.records.control import ControlRecordType, control_batch_type
from tidelog.server.groups.messages import Done, StoreRecord
from tidelog.server.groups.records import (
    OFFSETS_TOPIC,
    GroupMetadataKey,
    GroupMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
    decode_group_metadata_value,
    decode_key,
    decode_offset_commit_value,
    offsets_partition_for,
)
from tidelog.server.groups.txn_offsets import PendingTxnOffsets
from tidelog.server.log_load import ensure_internal_topic, partition_batches
from tidelog.storage.append_info import AppendOrigin
from tidelog.storage.config import BrokerConfig
from tidelog.topic_partition import TopicPartition

log = logging.getLogger(__name__)
T = TypeVar("T")
LOAD_BUFFER_BYTES = 5 * 1024 * 1024  # Kafka's offsets.load.buffer.size


@dataclass(slots=True)
class LoadedGroups:
    """What ``__consumer_offsets`` holds: each group's last metadata, its committed offsets, the
    offsets of transactions still open (stamped with their record offsets) and the highest offset
    replayed (a record or a marker)."""

    groups: dict[str, GroupMetadataValue] = field(default_factory=dict)
    offsets: dict[str, dict[tuple[str, int], OffsetCommitValue]] = field(default_factory=dict)
    pending: PendingTxnOffsets = field(default_factory=PendingTxnOffsets)
    last_offset: int = -1
    records: int = 0
    skipped: int = 0

    def apply(self, key: bytes, value: bytes | None, producer_id: int = -1, offset: int = -1) -> None:
        """Replay one record at ``offset`` (the latest of a key wins; a None value deletes it); an
        offset commit of a transactional batch (``producer_id`` >= 0) is held pending."""
        decoded = decode_key(key)
        self.last_offset = max(self.last_offset, offset)
        if isinstance(decoded, OffsetCommitKey):
            group, tp = decoded.group, (decoded.topic, decoded.partition)
            if value is None:
                self.offsets.get(group, {}).pop(tp, None)
                self.pending.drop(group, tp)
            elif producer_id >= 0:
                self.pending.add(producer_id, group, {tp: decode_offset_commit_value(value)}, offset)
            else:
                self.offsets.setdefault(group, {})[tp] = decode_offset_commit_value(value)
                self.pending.supersede(group, tp, offset)
        elif isinstance(decoded, GroupMetadataKey):
            if value is None:
                self.groups.pop(decoded.group, None)
            else:
                self.groups[decoded.group] = decode_group_metadata_value(value)
        self.records += 1

    def end_transaction(self, producer_id: int, in_partition: Callable[[str], bool], commit: bool) -> None:
        """Replay a COMMIT or ABORT marker of ``producer_id`` for the groups ``in_partition`` selects."""
        for group, tp, value in self.pending.end(producer_id, in_partition, commit):
            self.offsets.setdefault(group, {})[tp] = value

    def done(self) -> LoadedGroups:
        """Drop groups left with no offsets after tombstones."""
        self.offsets = {g: o for g, o in self.offsets.items() if o}
        return self


class OffsetsTopic:
    """``__consumer_offsets`` of one LogManager. Methods do file work: call them in the thread pool.
    Thread-safe: it keeps only fixed settings, and each call takes the LogManager's locks through
    the manager's own methods."""

    def __init__(self, manager: LogManager, clock: Clock, *, partitions: int, segment_bytes: int) -> None:
        self._manager = manager
        self._clock = clock
        self._partitions = partitions
        self._segment_bytes = segment_bytes

    @classmethod
    def from_broker(cls, manager: LogManager, clock: Clock, broker: BrokerConfig) -> OffsetsTopic:
        return cls(manager, clock, partitions=broker.get("offsets.topic.num.partitions"),
                   segment_bytes=broker.get("offsets.topic.segment.bytes"))

    def ensure(self) -> int:
        """Create the topic if missing; its partition count."""
        configs = {**INTERNAL_TOPIC_CONFIGS[OFFSETS_TOPIC], "segment.bytes": str(self._segment_bytes)}
        return ensure_internal_topic(self._manager, OFFSETS_TOPIC, self._partitions, configs)

    def groups_of(self, partition: int) -> Callable[[str], bool]:
        """Whether a group's records go to ``partition`` (the topic must exist). No I/O: reads
        the partition count from the manager's registry (thread-safe, no lock)."""
        count = len(self._manager.partitions(OFFSETS_TOPIC))
        return lambda group_id: offsets_partition_for(group_id, count) == partition

    def partition_for(self, group_id: str) -> int:
        """The partition holding ``group_id``'s records (creates the topic if missing)."""
        return offsets_partition_for(group_id, self.ensure())

    def append(self, group_id: str, records: list[StoreRecord], producer_id: int = -1, producer_epoch: int = -1) -> None:
        """Append ``records`` as one batch to the group's partition; with a ``producer_id``, a
        transactional batch of that producer (a TxnOffsetCommit): the log's producer state then
        refuses a stale ``producer_epoch`` (:class:`~tidelog.errors.InvalidProducerEpochError`)."""
        tp = TopicPartition(OFFSETS_TOPIC, self.partition_for(group_id))
        now = self._clock.milliseconds()
        transactional = producer_id >= 0
        builder = BatchBuilder(producer_id=producer_id, producer_epoch=producer_epoch,
                               base_sequence=0 if transactional else -1, is_transactional=transactional)
        for offset, (key, value) in enumerate(records):
            builder.append(offset, now, key, value)
        self._manager.append(tp, builder.build(), origin=AppendOrigin.COORDINATOR)

    def load(self) -> LoadedGroups:
        """Replay every partition (nothing when the topic does not exist yet)."""
        loaded = LoadedGroups()
        if not self._manager.has_topic(OFFSETS_TOPIC):
            return loaded
        count = len(self._manager.partitions(OFFSETS_TOPIC))
        for tp in self._manager.live_partitions(OFFSETS_TOPIC):
            _replay(self._manager, tp, loaded, count)
        log.info("loaded %d groups and the offsets of %d groups from %s (%d records)", len(loaded.groups),
                 len(loaded.offsets), OFFSETS_TOPIC, loaded.records)
        return loaded.done()


def _replay(manager: LogManager, tp: TopicPartition, loaded: LoadedGroups, count: int) -> None:
    """Apply every record and marker of one partition (of ``count``), from its log start to its
    high watermark. A read that fails is reported as any other read
    (:meth:`LogManager.report_read_error`) and raised."""
    for offset, batch in partition_batches(manager, tp, "group load", LOAD_BUFFER_BYTES):
        transactional = isinstance(batch, RecordBatch) and batch.is_transactional
        if isinstance(batch, RecordBatch) and batch.is_control:
            if transactional and batch.next_offset > offset:
                _end_transaction(loaded, batch, tp, count)
            continue
        producer_id = batch.producer_id if transactional else -1
        for record in batch.records():
            if record.offset >= offset and record.key is not None:
                _apply(loaded, record.key, record.value, tp, record.offset, producer_id)


def _end_transaction(loaded: LoadedGroups, batch: RecordBatch, tp: TopicPartition, count: int) -> None:
    """Replay the COMMIT or ABORT marker ``batch`` for the groups of partition ``tp``."""
    try:
        kind = control_batch_type(batch)
    except CorruptRecordError as e:
        loaded.skipped += 1
        log.warning("%s offset %d: skipped, a control batch that does not decode: %s", tp, batch.base_offset, e)
        return
    loaded.last_offset = max(loaded.last_offset, batch.base_offset)
    if kind in (ControlRecordType.COMMIT, ControlRecordType.ABORT):
        loaded.end_transaction(batch.producer_id, lambda group: offsets_partition_for(group, count) == tp.partition,
                               kind is ControlRecordType.COMMIT)


def _apply(loaded: LoadedGroups, key: bytes, value: bytes | None, tp: TopicPartition, offset: int,
           producer_id: int) -> None:
    try:
        loaded.apply(key, value, producer_id, offset)
    except CorruptRecordError as e:
        loaded.skipped += 1
        log.warning("%s offset %d: skipped, a record that does not decode: %s", tp, offset, e)


class OffsetsTopicStore:
    """The coordinator's store on the event loop: each write runs in the thread pool, the writes
    of one group one after another (an asyncio lock per group keeps their order), and
    ``done`` is called back on the loop. Event-loop only: not thread-safe; a write takes its
    group's asyncio lock."""

    def __init__(self, topic: OffsetsTopic, run: Callable[..., Awaitable[object]]) -> None:
        self._topic = topic
        self._run = run
        self._locks: dict[str, asyncio.Lock] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    def write(self, group_id: str, records: list[StoreRecord], done: Done) -> None:
        self.write_transactional(group_id, -1, -1, records, done)

    def write_transactional(self, group_id: str, producer_id: int, producer_epoch: int,
                            records: list[StoreRecord], done: Done) -> None:
        """As :meth:`write`, in a transactional batch of ``producer_id`` (-1: a plain batch)."""
        task = asyncio.get_running_loop().create_task(self._write(group_id, records, done, producer_id,
                                                                  producer_epoch))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _write(self, group_id: str, records: list[StoreRecord], done: Done, producer_id: int,
                     producer_epoch: int) -> None:
        lock = self._locks.setdefault(group_id, asyncio.Lock())
        async with lock:
            try:
                await self._run(self._topic.append, group_id, records, producer_id, producer_epoch)
            except Exception as e:  # noqa: BLE001 - the coordinator turns it into an error code
                done(e)
                return
        done(None)

    async def drain(self) -> None:
        """Wait for the writes in flight (server shutdown)."""
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
