"""Value types of the append path."""

from __future__ import annotations

from enum import Enum
from typing import NamedTuple

from tidelog.records import CompressionType

NO_TIMESTAMP = -1


class AppendOrigin(Enum):
    """Who appends: a producer (full validation, offsets assigned), the group/transaction
    coordinator (validated like a client, but may write several batches), or a replica/tool
    copying batches that already carry their offsets (appends that keep offsets)."""

    CLIENT = "client"
    COORDINATOR = "coordinator"
    REPLICATION = "replication"


class LogAppendInfo(NamedTuple):
    """What an append wrote: offsets, timestamps, sizes (Kafka's ``LogAppendInfo``).

    ``first_offset``/``last_offset`` are -1 when nothing was appended. ``log_append_time`` is the
    broker time stamped into LogAppendTime batches, else -1.

    A named tuple rather than a frozen dataclass because one is built per append: constructing a
    10-field frozen dataclass costs about 1 us (one ``object.__setattr__`` per field), a sixth of
    what a whole 1-record append may take; a tuple is built in one step (the leader's common path
    uses ``_make``). Immutable and compared by value all the same.
    """

    first_offset: int
    last_offset: int
    max_timestamp: int
    shallow_offset_of_max_timestamp: int
    log_append_time: int
    log_start_offset: int
    record_count: int
    valid_bytes: int
    source_compression: CompressionType
    target_compression: CompressionType

    @property
    def appended(self) -> bool:
        return self.valid_bytes > 0

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1
