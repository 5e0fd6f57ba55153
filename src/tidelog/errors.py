"""Typed errors for every layer, one hierarchy.

Each error carries the context a caller or operator needs (file path, byte position, offset,
partition, config key) as attributes, and renders them into its message. Errors that have a
Kafka protocol equivalent carry Kafka's error code in ``error_code`` so the server maps them
one-to-one (codes from Kafka's ``org.apache.kafka.common.protocol.Errors``).
"""

from __future__ import annotations

from os import PathLike
from typing import Any


class TidelogError(Exception):
    """Base of every tidelog error. ``error_code`` is Kafka's code (-1 = UNKNOWN_SERVER_ERROR)."""

    error_code: int = -1

    def __init__(self, message: str, **context: Any) -> None:
        self.message = message
        self.context = {k: v for k, v in context.items() if v is not None}
        for key, value in context.items():
            setattr(self, key, value)
        super().__init__(self._render())

    def _render(self) -> str:
        if not self.context:
            return self.message
        where = ", ".join(f"{k}={_show(v)}" for k, v in self.context.items())
        return f"{self.message} ({where})"


def _show(value: Any) -> str:
    if isinstance(value, PathLike):
        return str(value)
    return repr(value) if isinstance(value, str) else str(value)


# --- records -------------------------------------------------------------------------------

class CorruptRecordError(TidelogError):
    """A batch fails its size or CRC check, or its bytes do not parse (Kafka CORRUPT_MESSAGE).

    Context: ``path`` (file, when read from one), ``position`` (byte position of the batch),
    ``offset`` (base offset, when known).
    """

    error_code = 2


class InvalidRecordError(TidelogError):
    """A well-formed batch whose content breaks a rule (Kafka INVALID_RECORD).

    ``record_errors`` lists ``(record_index, reason)`` pairs when individual records failed.
    """

    error_code = 87


class UnsupportedCompressionError(TidelogError):
    """Codec id not in 0..4, or not allowed for the magic (Kafka UNSUPPORTED_COMPRESSION_TYPE)."""

    error_code = 76


class RecordTooLargeError(TidelogError):
    """A batch is larger than ``max.message.bytes`` (Kafka MESSAGE_TOO_LARGE)."""

    error_code = 10


class RecordBatchTooLargeError(TidelogError):
    """A whole append is larger than ``segment.bytes`` (Kafka RECORD_LIST_TOO_LARGE)."""

    error_code = 18


class InvalidTimestampError(InvalidRecordError):
    """A record timestamp is outside ``message.timestamp.before/after.max.ms`` (Kafka INVALID_TIMESTAMP)."""

    error_code = 32


# --- storage -------------------------------------------------------------------------------

class StorageError(TidelogError):
    """An I/O failure in a log dir (Kafka KAFKA_STORAGE_ERROR); the log dir goes offline."""

    error_code = 56


class OffsetOutOfRangeError(TidelogError):
    """A read or log-start-offset move outside [log start offset, bound] (Kafka OFFSET_OUT_OF_RANGE)."""

    error_code = 1


class OffsetMovedToTieredStorageError(OffsetOutOfRangeError):
    """A read of an offset the log still holds, but only in the remote tier: at or above the log
    start offset and below the local log start offset (Kafka OFFSET_MOVED_TO_TIERED_STORAGE)."""

    error_code = 109


class CorruptIndexError(TidelogError):
    """An index file fails its sanity check (wrong length, entries out of order)."""


class InvalidOffsetError(TidelogError):
    """An index append that is not strictly after the last entry."""


class IndexFullError(TidelogError):
    """An append to an index that has no free slot."""


class IndexOffsetOverflowError(TidelogError):
    """An offset whose distance from the index base offset does not fit in an int32."""


class IndexStateError(TidelogError):
    """An index call its state does not allow: an entry number outside [0, entries), a resize
    below the entries held, a write to a read-only index, or any use after close."""


class LogSegmentOffsetOverflowError(TidelogError):
    """An append whose offsets do not fit in the segment's relative-offset range."""


class UnexpectedAppendOffsetError(TidelogError):
    """An append that keeps offsets (follower/tool) starts below the log end offset."""


class OffsetsOutOfOrderError(TidelogError):
    """Batches of one append that keeps offsets are not in increasing offset order."""


class PolicyViolationError(TidelogError):
    """An operation the topic's ``cleanup.policy`` forbids (Kafka POLICY_VIOLATION)."""

    error_code = 44


class OutOfOrderSequenceError(TidelogError):
    """An idempotent batch whose first sequence does not follow the producer's last one, or a new
    epoch not starting at sequence 0 (Kafka OUT_OF_ORDER_SEQUENCE_NUMBER). Context:
    ``topic_partition``, ``producer_id``, ``offset``."""

    error_code = 45


class InvalidProducerEpochError(TidelogError):
    """A batch whose producer epoch is older than the producer's last one: a fenced zombie
    (Kafka INVALID_PRODUCER_EPOCH). Context: ``topic_partition``, ``producer_id``, ``offset``."""

    error_code = 47


class InvalidTxnStateError(TidelogError):
    """A batch that does not fit the producer's transaction state: a non-transactional batch from a
    producer with an open transaction (Kafka INVALID_TXN_STATE). Context: ``topic_partition``,
    ``producer_id``, ``offset``."""

    error_code = 48


class TransactionCoordinatorFencedError(TidelogError):
    """A transaction marker from a coordinator epoch older than the one the partition last saw
    from that producer's coordinator (Kafka TRANSACTION_COORDINATOR_FENCED). Context:
    ``topic_partition``, ``producer_id``, ``offset``."""

    error_code = 52


class CorruptSnapshotError(TidelogError):
    """A producer-state ``.snapshot`` file with a wrong version, length or CRC (Kafka's
    ``CorruptSnapshotException``): it is deleted and an older snapshot or the log is used."""


class CheckpointError(TidelogError):
    """A checkpoint or metadata file that does not parse (malformed line, wrong version or count)."""


class LogDirLockedError(TidelogError):
    """Another process holds the log dir's ``.lock``."""


class InvalidLogDirNameError(TidelogError):
    """A directory name inside a log dir that is not ``<topic>-<partition>[.<id><suffix>]``."""


class InvalidLogFileNameError(TidelogError):
    """A file name inside a partition dir that does not start with a base offset (``<20 digits>.log`` ...)."""


class InvalidUuidError(TidelogError, ValueError):
    """A string that is not a Kafka ``Uuid`` (URL-safe base64 of exactly 16 bytes); also a ValueError,
    as for any malformed string argument."""


# --- configuration -------------------------------------------------------------------------

class ConfigError(TidelogError):
    """An unknown config key or a value outside its type or range (Kafka INVALID_CONFIG)."""

    error_code = 40


# --- topics and the log manager ------------------------------------------------------------

class UnknownTopicOrPartitionError(TidelogError):
    """No such topic, or no such partition of it (Kafka UNKNOWN_TOPIC_OR_PARTITION)."""

    error_code = 3


class InvalidTopicError(TidelogError):
    """A topic name Kafka would refuse: empty, ``.``/``..``, over 249 characters, a character
    outside ``[a-zA-Z0-9._-]``, or colliding with an existing topic on ``.`` vs ``_`` (Kafka INVALID_TOPIC_EXCEPTION)."""

    error_code = 17


class TopicExistsError(TidelogError):
    """Creating a topic that already exists (Kafka TOPIC_ALREADY_EXISTS)."""

    error_code = 36


class InvalidPartitionsError(TidelogError):
    """A partition count below 1, or not above the current count when adding (Kafka INVALID_PARTITIONS)."""

    error_code = 37


class LogDirOfflineError(StorageError):
    """A log dir or partition that failed (I/O error, corrupt beyond recovery) and was set aside;
    the others keep serving (Kafka KAFKA_STORAGE_ERROR)."""


class InvalidRequestError(TidelogError):
    """A request tidelog refuses as Kafka does, e.g. creating the internal ``__cluster_metadata``
    topic (Kafka INVALID_REQUEST)."""

    error_code = 42


# --- command line records --------------------------------------------------------------------

class RecordInputError(TidelogError):
    """A line of ``tidelog produce`` input that is not a valid record (the message names the line)."""


class RecordOutputError(TidelogError):
    """A record that the chosen output format cannot show (context: ``topic_partition``, ``offset``)."""


# --- log cleaner ------------------------------------------------------------------------------

class LogCleaningAbortedError(TidelogError):
    """Cleaning of a partition stopped because it was aborted (truncation, deletion, a pause);
    nothing of that round is installed (Kafka's LogCleaningAbortedException). Context:
    ``topic_partition``."""


class OffsetMapFullError(TidelogError):
    """A put of a new key into an offset map whose every slot is taken (the cleaner stops at the
    load factor, long before this)."""


class CleanerStateError(TidelogError):
    """A cleaner state change that the partition's current state does not allow (Kafka's
    IllegalStateException in LogCleanerManager), e.g. resuming a partition that is not paused."""


class LogCleaningError(TidelogError):
    """Cleaning (or the cleaner's retention pass) of one partition failed; the partition is
    quarantined and retried later, the others go on. Context: ``topic_partition``; ``__cause__``
    is the underlying error."""
