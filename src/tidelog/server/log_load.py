"""Reading an internal topic's partition whole, as the coordinators load ``__consumer_offsets``
and ``__transaction_state`` at start-up (Kafka's ``GroupMetadataManager.doLoadGroupsAndOffsets``
and ``TransactionStateManager.loadTransactionMetadata`` read the same way).

:func:`partition_batches` yields every batch from the log start offset to the high watermark,
each with the offset its read started at: a read starts inside a batch when the log start offset
lies inside one (or a compacted batch straddles it), so a loader skips the records below that
offset. A batch larger than the read buffer doubles the buffer. A read that fails is reported to the manager as any other read
(:meth:`LogManager.report_read_error`) and raised.

Blocking file reads: run it off the event loop (``ctx.run``). Thread-safe as the manager's reads
are; it holds no state between calls.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

from tidelog.errors import TopicExistsError
from tidelog.manager import LogManager
from tidelog.records import iter_batches
from tidelog.records.batch import FileBatch
from tidelog.topic_partition import TopicPartition

log = logging.getLogger(__name__)


def ensure_internal_topic(manager: LogManager, name: str, partitions: int, configs: dict[str, str]) -> int:
    """Create internal topic ``name`` with ``partitions`` and ``configs`` if missing (a topic already
    there keeps its partition count); its partition count. File work: call it in the thread pool."""
    if not manager.has_topic(name):
        try:
            manager.create_topic(name, partitions, configs)
            log.info("created %s with %d partitions", name, partitions)
        except TopicExistsError:
            pass  # created meanwhile by another request
    return len(manager.partitions(name))


def partition_batches(manager: LogManager, tp: TopicPartition, what: str,
                      buffer: int) -> Iterator[tuple[int, FileBatch]]:
    """``(read offset, batch)`` for every batch of ``tp`` from its log start offset to its high
    watermark (the module doc); ``what`` names the load in a read error's report. The high
    watermark is taken again after each read, so batches appended during the load are read too.
    Each read is at most ``buffer`` bytes (doubled while one batch does not fit)."""
    offsets = manager.offsets(tp)
    offset, high_watermark = offsets.log_start_offset, offsets.high_watermark
    while offset < high_watermark:
        try:
            data = manager.read(tp, offset, buffer).records
        except Exception as e:
            manager.report_read_error(tp, what, e)
            raise
        if not data:
            return
        advanced = offset
        for _, batch in iter_batches(data):
            advanced = max(advanced, batch.next_offset)
            yield offset, batch
        if advanced == offset:  # one batch larger than the buffer
            buffer *= 2
        offset = advanced
        high_watermark = manager.offsets(tp).high_watermark
