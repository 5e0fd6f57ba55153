"""read_committed on a store path (:mod:`tidelog.spark.remote_source`): the aborted
transactions of a task's store part, and the transactions open where the remote tier ends.

* **the store part's filter** (:func:`store_aborted`): the remote ``.txnindex`` search
  (:func:`~tidelog.remote.aborted_txns.remote_aborted_transactions`) from the segment holding
  the part's start, over the segments with a non-empty index the plan carried, then, when that
  search is not complete and a broker is read, the aborts whose marker is not tiered yet, from
  one read_committed Fetch at the boundary (:func:`~tidelog.spark.broker_tail.aborted_past_boundary`).
* **the store-only end** (:func:`open_txns_at_end`): the producer snapshot uploaded with the
  last FINISHED segment says which transactions are open there; a read without a broker stops
  before them.

Functions of one task or one planning; nothing shared between threads.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tidelog.spark import remote_source as rs
from tidelog.storage.read_committed import AbortedBatchFilter
from tidelog.topic_partition import TopicPartition

if TYPE_CHECKING:
    from tidelog.remote.index_cache import RemoteIndexCache
    from tidelog.remote.metadata import RemoteLogSegmentMetadata, TopicIdPartition
    from tidelog.remote.store import RemoteStore
    from tidelog.spark.broker_client import BrokerClient
    from tidelog.storage.txn_index import AbortedTxn


def store_aborted(ropts: rs.RemoteSourceOptions, store: RemoteStore, cache: RemoteIndexCache, tp: TopicPartition,
                  txn_segments: tuple[RemoteLogSegmentMetadata, ...], lo: int, end: int,
                  broker: tuple[BrokerClient, int] | None = None) -> AbortedBatchFilter | None:
    """Under read_committed, the filter of the store part ``[lo, end)`` of ``tp`` (None under
    read_uncommitted: no request). Its aborted transactions are (a) the remote ``.txnindex``
    search from the segment holding ``lo`` with upper bound ``end`` over ``txn_segments``
    (:func:`~tidelog.remote.aborted_txns.remote_aborted_transactions`) and, when that search is
    not complete and a broker is given (``(client, boundary)``), (b) the aborts whose marker lies
    past the boundary, from one read_committed Fetch there
    (:func:`~tidelog.spark.broker_tail.aborted_past_boundary`). When the broker says the boundary
    was tiered since, the segments tiered from it are searched and the next boundary asked.
    Without a broker the plan ended the read before every transaction whose outcome the store
    does not hold, so (a) finds them all."""
    if not ropts.parsed.read_committed:
        return None
    found, complete = _search(ropts, store, cache, tp, txn_segments, lo, end)
    while not complete and broker is not None:
        from tidelog.spark.broker_tail import aborted_past_boundary

        client, boundary = broker
        past = aborted_past_boundary(ropts.parsed, client, tp, boundary, ropts.poll_timeout_ms)
        if past is not None:
            found.extend(past)
            break
        newer = [s for s in _finished_now(ropts, store, txn_segments, tp, lo, end) if s.start_offset >= boundary]
        if not newer:
            raise rs.RemoteReadError(f"Cannot find the aborted transactions of offsets [{lo}, {end}) of {tp}: the "
                                     f"broker answered OFFSET_MOVED_TO_TIERED_STORAGE at offset {boundary} and the "
                                     f"remote tier at {store.uri} holds nothing from there")
        more, complete = _search(ropts, store, cache, tp, tuple(s for s in newer if not s.txn_idx_empty), lo, end)
        found.extend(more)
        broker = (client, max(s.end_offset for s in newer) + 1)
    return AbortedBatchFilter(found)


def _search(ropts: rs.RemoteSourceOptions, store: RemoteStore, cache: RemoteIndexCache, tp: TopicPartition,
            txn_segments: tuple[RemoteLogSegmentMetadata, ...], lo: int, end: int) -> tuple[list[AbortedTxn], bool]:
    """The remote ``.txnindex`` search; a segment gone since planning (a compaction swapped it)
    makes it search the partition's current FINISHED segments; other store errors are
    :class:`~tidelog.spark.remote_source.RemoteReadError` naming the partition, the range and the store."""
    from tidelog.remote.aborted_txns import remote_aborted_transactions
    from tidelog.remote.errors import RemoteResourceNotFoundError, RemoteStorageError
    from tidelog.remote.index_cache import RemoteIndexCacheError

    for attempt in (0, 1):
        try:
            return remote_aborted_transactions(cache, txn_segments, lo, end)
        except RemoteResourceNotFoundError as e:
            if attempt == 1 or not txn_segments:
                raise rs.RemoteReadError(f"Cannot read the aborted transactions of offsets [{lo}, {end}) of {tp} from "
                                         f"the remote tier at {store.uri}: {e}") from e
            txn_segments = tuple(s for s in _finished_now(ropts, store, txn_segments, tp, lo, end)
                                 if not s.txn_idx_empty and s.end_offset >= lo)
        except (RemoteStorageError, RemoteIndexCacheError) as e:
            raise rs.RemoteReadError(f"Cannot read the aborted transactions of offsets [{lo}, {end}) of {tp} from the "
                                     f"remote tier at {store.uri}: {e}") from e
    raise AssertionError("unreachable")


def _finished_now(ropts: rs.RemoteSourceOptions, store: RemoteStore, known: tuple[RemoteLogSegmentMetadata, ...],
                  tp: TopicPartition, lo: int, end: int) -> list[RemoteLogSegmentMetadata]:
    """The partition's FINISHED segments now (one metadata load), found through a segment of
    ``known`` or else the store's listing."""
    from tidelog.remote.errors import RemoteStorageError
    from tidelog.remote.metadata_log import RemotePartitionMetadata
    from tidelog.remote.verify import list_partitions

    try:
        if known:
            tip: TopicIdPartition | None = known[0].topic_id_partition
        else:
            found, strays = list_partitions(store, tp.topic)
            tip = rs._one_topic_id_each(rs._not_being_deleted(found, strays)).get(tp)
        return [] if tip is None else RemotePartitionMetadata.load(store, tip).finished_segments()
    except RemoteStorageError as e:
        raise rs.RemoteReadError(f"Cannot read the aborted transactions of offsets [{lo}, {end}) of {tp} from the "
                                 f"remote tier at {store.uri}: loading the partition's remote metadata failed: {e}") from e


def open_txns_at_end(store: RemoteStore, last: RemoteLogSegmentMetadata) -> dict[int, int]:
    """The transactions open where the remote tier ends (producer id -> first offset): those of
    the producer snapshot uploaded with the last FINISHED segment (Kafka's, at the next
    segment's base offset). One GET. :class:`~tidelog.spark.remote_source.RemoteReadError` naming the object when it cannot
    be read or decoded."""
    from tidelog.errors import CorruptSnapshotError
    from tidelog.remote.errors import RemoteStorageError
    from tidelog.remote.metadata import RemoteFileKind, object_key
    from tidelog.storage.producer_snapshot import decode_snapshot

    key = object_key(last, RemoteFileKind.PRODUCER_SNAPSHOT)
    try:
        entries = decode_snapshot(store.get(key))
    except (RemoteStorageError, CorruptSnapshotError) as e:
        raise rs.RemoteReadError(f"Cannot plan the read_committed read of {last.topic_id_partition.topic_partition} "
                                 f"from the remote tier at {store.uri}: the producer snapshot {key} of its last "
                                 f"segment (the transactions open where the tier ends) cannot be read: {e}") from e
    return {e.producer_id: e.current_txn_first_offset for e in entries if e.current_txn_first_offset >= 0}
