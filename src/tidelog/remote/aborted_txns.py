"""The aborted transactions the remote tier's ``.txnindex`` objects hold for a range: the remote
half of Kafka's ``collectAbortedTransactions``, shared by the broker's remote reads
(:mod:`tidelog.manager.remote_reads`) and the Spark source's reads of a store path
(:mod:`tidelog.spark.remote_source`).

An ABORT is indexed in the segment holding its marker, which may lie after the range, so the
search runs over the FINISHED segments from the one holding ``start`` on, skipping those whose
transaction index is empty (``txn_idx_empty``: no object was uploaded), until one index says the
search is complete (an entry whose last stable offset reaches the upper bound:
:meth:`~tidelog.storage.txn_index.TransactionIndex.collect_aborted_txns`). When no index says so,
later aborts may sit past the segments searched (the local log, for a broker); the caller
decides where to look next.

Cost: one cached ``.txnindex`` per non-empty segment searched (a GET the first time, through the
:class:`~tidelog.remote.index_cache.RemoteIndexCache`). Thread-safe as the index cache is.
"""

from __future__ import annotations

from collections.abc import Iterable

from tidelog.remote.index_cache import RemoteIndexCache
from tidelog.remote.metadata import RemoteLogSegmentMetadata
from tidelog.storage.txn_index import AbortedTxn


def remote_aborted_transactions(cache: RemoteIndexCache, segments: Iterable[RemoteLogSegmentMetadata], start: int,
                                upper_bound: int, below: int | None = None) -> tuple[list[AbortedTxn], bool]:
    """``(found, complete)``: the aborted transactions overlapping ``[start, upper_bound)`` (an
    entry's marker at or past ``start``, its first offset below ``upper_bound``) in the
    ``.txnindex`` of ``segments`` (FINISHED, by start offset) from the one holding ``start`` on,
    stopping before the first segment starting at or past ``below`` (a broker's local log start)
    or at the first index that says the search is ``complete``. Raises the index cache's and the
    store's errors (a segment's object gone: ``RemoteResourceNotFoundError``)."""
    found: list[AbortedTxn] = []
    if upper_bound <= start:
        return found, True
    for segment in segments:
        if below is not None and segment.start_offset >= below:
            break
        if segment.end_offset < start or segment.txn_idx_empty:
            continue
        with cache.indexes(segment) as indexes:
            if indexes.txn is None:
                continue
            result = indexes.txn.collect_aborted_txns(start, upper_bound)
        found.extend(result.aborted_transactions)
        if result.is_complete:
            return found, True
    return found, False
