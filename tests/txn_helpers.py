"""Partitions holding transactions as a Kafka broker writes them."""

from __future__ import annotations

from collections.abc import Sequence

from tidelog.storage.log import Log
from tidelog.storage.txn_index import AbortedTxn

Segment = tuple[Sequence[bytes], Sequence[AbortedTxn]]  # its batches, and its .txnindex entries


def write_segments(log: Log, segments: Sequence[Segment]) -> None:
    """Append each segment's batches (rolling before each but the first, unless the log is empty)
    and the ``.txnindex`` entries Kafka's producer state writes for its ABORT markers."""
    for batches, entries in segments:
        if log.log_end_offset:
            log.roll()
        for one in batches:
            log.append_as_follower(one)
        for entry in entries:
            log.active_segment.txn_index.append(entry)
