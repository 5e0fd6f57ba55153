"""The log's half of Kafka's transaction verification (KIP-890 part 1, its ``VerificationGuard``).

The broker verifies a transactional batch with the transaction coordinator when the Produce
request arrives (the partition must be in the producer's ongoing transaction), then appends it
on another thread. A transaction can end in between: a client whose produce timed out aborts,
and the coordinator writes its ABORT marker to the partition first. A batch that then lands
after the marker would open a transaction no coordinator knows (a hanging transaction, holding
the last stable offset back until an operator aborts it).

So the verification takes a token, the number of markers the partition has seen for the
producer in this process (:func:`verification_token`, lock-free), and the append checks it under
the log's lock (:func:`check_verified`): a batch that would open its producer's transaction is
refused with INVALID_TXN_STATE when a marker was written since. A batch that continues an open
transaction needs no check (no marker came between, or the transaction would not be open).
Counts live in memory only: a restart drops the connections whose tokens they were.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from tidelog.errors import InvalidTxnStateError

if TYPE_CHECKING:
    from tidelog.records import FileBatch
    from tidelog.storage.producer_state import ProducerStateEntry


def verification_token(entry: ProducerStateEntry | None) -> int:
    """What a verification of the producer of ``entry`` (None: unknown here) records now."""
    return 0 if entry is None else entry.markers


def check_verified(entry: ProducerStateEntry | None, batch: FileBatch, verified: Mapping[int, int],
                   topic_partition: object, offset: int) -> None:
    """Raise :class:`InvalidTxnStateError` when ``batch`` would open its producer's transaction and
    ``verified`` (producer id -> token taken at verification) does not hold the current token."""
    if batch.is_control or not batch.is_transactional:
        return
    if entry is not None and entry.current_txn_first_offset is not None:
        return  # continues the open transaction
    token = verified.get(batch.producer_id)
    if token != verification_token(entry):
        raise InvalidTxnStateError(
            f"The transaction of producer {batch.producer_id} that {topic_partition} was verified for has ended "
            f"(a transaction marker was written since); the batch at offset {offset} would open a transaction "
            f"its coordinator does not know" if token is not None else
            f"A transactional batch of producer {batch.producer_id} at offset {offset} in {topic_partition} was "
            f"not verified with its transaction coordinator",
            topic_partition=str(topic_partition), producer_id=batch.producer_id, offset=offset)
