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

Loading replays every partition from its log start: the last record of a key wins, a tombstone
deletes it; a record whose key or value does not decode is skipped with a warning (the broker
still starts). Control batches and transactional batches (transactional offset commits, which
tidelog does not serve) are skipped; record types a classic coordinator does not know (KIP-848
consumer groups, share groups) are skipped too.

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
from tidelog.errors import CorruptRecordError, TopicExistsError
from tidelog.manager import LogManager
from tidelog.manager.kraft_metadata import INTERNAL_TOPIC_CONFIGS
from tidelog.records import RecordBatch, iter_batches
from tidelog.records.builder import BatchBuilder
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
from tidelog.storage.append_info import AppendOrigin
from tidelog.storage.config import BrokerConfig
from tidelog.topic_partition import TopicPartition

log = logging.getLogger(__name__)
T = TypeVar("T")
LOAD_BUFFER_BYTES = 5 * 1024 * 1024  # Kafka's offsets.load.buffer.size


@dataclass(slots=True)
class LoadedGroups:
    """What ``__consumer_offsets`` holds: each group's last metadata and its committed offsets."""

    groups: dict[str, GroupMetadataValue] = field(default_factory=dict)
    offsets: dict[str, dict[tuple[str, int], OffsetCommitValue]] = field(default_factory=dict)
    records: int = 0
    skipped: int = 0

    def apply(self, key: bytes, value: bytes | None) -> None:
        """Replay one record (the latest of a key wins; a None value deletes it)."""
        decoded = decode_key(key)
        if isinstance(decoded, OffsetCommitKey):
            tp = (decoded.topic, decoded.partition)
            if value is None:
                self.offsets.get(decoded.group, {}).pop(tp, None)
            else:
                self.offsets.setdefault(decoded.group, {})[tp] = decode_offset_commit_value(value)
        elif isinstance(decoded, GroupMetadataKey):
            if value is None:
                self.groups.pop(decoded.group, None)
            else:
                self.groups[decoded.group] = decode_group_metadata_value(value)
        self.records += 1

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
        if not self._manager.has_topic(OFFSETS_TOPIC):
            configs = {**INTERNAL_TOPIC_CONFIGS[OFFSETS_TOPIC], "segment.bytes": str(self._segment_bytes)}
            try:
                self._manager.create_topic(OFFSETS_TOPIC, self._partitions, configs)
                log.info("created %s with %d partitions", OFFSETS_TOPIC, self._partitions)
            except TopicExistsError:
                pass  # created meanwhile by another request
        return len(self._manager.partitions(OFFSETS_TOPIC))

    def partition_for(self, group_id: str) -> int:
        """The partition holding ``group_id``'s records (creates the topic if missing)."""
        return offsets_partition_for(group_id, self.ensure())

    def append(self, group_id: str, records: list[StoreRecord]) -> None:
        """Append ``records`` as one batch to the group's partition."""
        tp = TopicPartition(OFFSETS_TOPIC, self.partition_for(group_id))
        now = self._clock.milliseconds()
        builder = BatchBuilder()
        for offset, (key, value) in enumerate(records):
            builder.append(offset, now, key, value)
        self._manager.append(tp, builder.build(), origin=AppendOrigin.COORDINATOR)

    def load(self) -> LoadedGroups:
        """Replay every partition (nothing when the topic does not exist yet)."""
        loaded = LoadedGroups()
        if not self._manager.has_topic(OFFSETS_TOPIC):
            return loaded
        for tp in self._manager.live_partitions(OFFSETS_TOPIC):
            _replay(self._manager, tp, loaded)
        log.info("loaded %d groups and the offsets of %d groups from %s (%d records)", len(loaded.groups),
                 len(loaded.offsets), OFFSETS_TOPIC, loaded.records)
        return loaded.done()


def _replay(manager: LogManager, tp: TopicPartition, loaded: LoadedGroups) -> None:
    """Apply every record of one partition, from its log start to its high watermark. A read that
    fails is reported as any other read (:meth:`LogManager.report_read_error`) and raised."""
    offsets = manager.offsets(tp)
    offset, buffer = offsets.log_start_offset, LOAD_BUFFER_BYTES
    while offset < offsets.high_watermark:
        try:
            data = manager.read(tp, offset, buffer).records
        except Exception as e:
            manager.report_read_error(tp, "group load", e)
            raise
        if not data:
            return
        advanced = offset
        for _, batch in iter_batches(data):
            advanced = max(advanced, batch.next_offset)
            if isinstance(batch, RecordBatch) and (batch.is_control or batch.is_transactional):
                continue
            for record in batch.records():
                if record.offset >= offset and record.key is not None:
                    _apply(loaded, record.key, record.value, tp, record.offset)
        if advanced == offset:  # one batch larger than the buffer
            buffer *= 2
        offset = advanced
        offsets = manager.offsets(tp)


def _apply(loaded: LoadedGroups, key: bytes, value: bytes | None, tp: TopicPartition, offset: int) -> None:
    try:
        loaded.apply(key, value)
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
        task = asyncio.get_running_loop().create_task(self._write(group_id, records, done))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _write(self, group_id: str, records: list[StoreRecord], done: Done) -> None:
        lock = self._locks.setdefault(group_id, asyncio.Lock())
        async with lock:
            try:
                await self._run(self._topic.append, group_id, records)
            except Exception as e:  # noqa: BLE001 - the coordinator turns it into an error code
                done(e)
                return
        done(None)

    async def drain(self) -> None:
        """Wait for the writes in flight (server shutdown)."""
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
