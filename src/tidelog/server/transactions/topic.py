"""``__transaction_state`` through the LogManager: created on first use, appended to by the
transaction coordinator, read back whole when the broker starts.

The topic is created as Kafka's transaction coordinator creates it:
``transaction.state.log.num.partitions`` partitions (50), ``cleanup.policy=compact``,
``compression.type=uncompressed``, ``unclean.leader.election.enable=false`` and ``segment.bytes`` from
``transaction.state.log.segment.bytes``. A topic already there (ours, or Kafka's adopted) keeps
its partition count, and ids are placed by it.

Each write is one uncompressed RecordBatch v2 holding one record (:mod:`.records`), CreateTime
now, appended with ``AppendOrigin.COORDINATOR``; the cleaner compacts the topic down to the last
record of each transactional id, and drops tombstones after ``delete.retention.ms``.

Loading replays every partition from its log start to its high watermark: the last record of a
key wins, a tombstone deletes it; a record whose key or value does not decode is skipped with a
warning (the broker still starts). Control and transactional batches are skipped (Kafka's
coordinator never writes them here).

Every method does file work: call it in the thread pool. Thread-safe: the object keeps only fixed
settings, and each call takes the LogManager's locks through the manager's own methods.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from tidelog.clock import Clock
from tidelog.errors import CorruptRecordError
from tidelog.manager import LogManager
from tidelog.manager.internal_topics import TRANSACTION_STATE
from tidelog.manager.kraft_metadata import INTERNAL_TOPIC_CONFIGS
from tidelog.records import RecordBatch
from tidelog.records.builder import BatchBuilder
from tidelog.server.log_load import ensure_internal_topic, partition_batches
from tidelog.server.transactions.records import decode_key, decode_value, encode_key, encode_value, TxnLogValue
from tidelog.server.transactions.records import txn_partition_for
from tidelog.storage.append_info import AppendOrigin
from tidelog.topic_partition import TopicPartition

log = logging.getLogger(__name__)


@dataclass(slots=True)
class LoadedTransactions:
    """What ``__transaction_state`` holds: the last record of every live transactional id."""

    values: dict[str, TxnLogValue] = field(default_factory=dict)
    records: int = 0
    skipped: int = 0


class TransactionStateTopic:
    """``__transaction_state`` of one LogManager (see the module doc). File work in every method."""

    def __init__(self, manager: LogManager, clock: Clock, *, partitions: int, segment_bytes: int,
                 load_buffer_bytes: int) -> None:
        self._manager = manager
        self._clock = clock
        self._partitions = partitions
        self._segment_bytes = segment_bytes
        self._load_buffer = load_buffer_bytes

    def ensure(self) -> int:
        """Create the topic if missing; its partition count."""
        configs = {**INTERNAL_TOPIC_CONFIGS[TRANSACTION_STATE], "segment.bytes": str(self._segment_bytes),
                   "compression.type": "uncompressed", "unclean.leader.election.enable": "false"}
        return ensure_internal_topic(self._manager, TRANSACTION_STATE, self._partitions, configs)

    def partition_for(self, transactional_id: str) -> TopicPartition:
        """The partition holding ``transactional_id``'s records (creates the topic if missing)."""
        return TopicPartition(TRANSACTION_STATE, txn_partition_for(transactional_id, self.ensure()))

    def append(self, transactional_id: str, value: TxnLogValue | None) -> None:
        """Append the id's record (None: its tombstone) as one batch; raises what the append raises."""
        tp = self.partition_for(transactional_id)
        builder = BatchBuilder()
        builder.append(0, self._clock.milliseconds(), encode_key(transactional_id),
                       None if value is None else encode_value(value))
        self._manager.append(tp, builder.build(), origin=AppendOrigin.COORDINATOR)

    def load(self) -> LoadedTransactions:
        """Replay every partition (nothing when the topic does not exist yet)."""
        loaded = LoadedTransactions()
        if not self._manager.has_topic(TRANSACTION_STATE):
            return loaded
        for tp in self._manager.live_partitions(TRANSACTION_STATE):
            self._replay(tp, loaded)
        log.info("loaded %d transactional ids from %s (%d records, %d skipped)", len(loaded.values),
                 TRANSACTION_STATE, loaded.records, loaded.skipped)
        return loaded

    def _replay(self, tp: TopicPartition, loaded: LoadedTransactions) -> None:
        for offset, batch in partition_batches(self._manager, tp, "transaction state load", self._load_buffer):
            if isinstance(batch, RecordBatch) and (batch.is_control or batch.is_transactional):
                continue
            for record in batch.records():
                if record.offset >= offset and record.key is not None:
                    _apply(loaded, record.key, record.value, tp, record.offset)


def _apply(loaded: LoadedTransactions, key: bytes, value: bytes | None, tp: TopicPartition, offset: int) -> None:
    try:
        transactional_id = decode_key(key)
        if transactional_id is None:
            return
        if value is None:
            loaded.values.pop(transactional_id, None)
        else:
            loaded.values[transactional_id] = decode_value(value)
        loaded.records += 1
    except (CorruptRecordError, ValueError) as e:
        loaded.skipped += 1
        log.warning("%s offset %d: skipped, a record that does not decode: %s", tp, offset, e)
