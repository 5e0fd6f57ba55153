"""Value types of the read path: where an offset sits, what a read returned, ListOffsets answers."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tidelog.storage.file_slice import FileSlice

UNKNOWN_OFFSET = -1


class FetchIsolation(Enum):
    """How far a read may go: followers to the log end, consumers to the high watermark,
    ``read_committed`` consumers to the last stable offset."""

    LOG_END = "log_end"
    HIGH_WATERMARK = "high_watermark"
    TXN_COMMITTED = "txn_committed"


@dataclass(frozen=True, slots=True)
class LogOffsetMetadata:
    """An offset plus, when known, the segment holding it and the byte position of its batch."""

    message_offset: int
    segment_base_offset: int = UNKNOWN_OFFSET
    relative_position_in_segment: int = UNKNOWN_OFFSET

    @property
    def has_position(self) -> bool:
        return self.segment_base_offset != UNKNOWN_OFFSET


@dataclass(frozen=True, slots=True)
class FetchDataInfo:
    """Raw batch bytes of a read. ``records`` may start before the requested offset (whole
    batches) and may end mid-batch; ``first_entry_incomplete`` when even the first batch was cut.
    A read asked ``as_slice`` holds a :class:`~tidelog.storage.file_slice.FileSlice` of those
    bytes instead (the receiver closes it) where it found any."""

    fetch_offset_metadata: LogOffsetMetadata
    records: bytes | FileSlice
    first_entry_incomplete: bool = False
    aborted_transactions: tuple[object, ...] | None = None


@dataclass(frozen=True, slots=True)
class TimestampAndOffset:
    """A ListOffsets answer: the record's timestamp (-1 for the special queries), its offset, and
    the leader epoch of its batch when known."""

    timestamp: int
    offset: int
    leader_epoch: int | None = None
