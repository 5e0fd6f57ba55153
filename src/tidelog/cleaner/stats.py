"""What one cleaning of one log read, wrote and how long each phase took (Kafka's CleanerStats).

Filled by :class:`tidelog.cleaner.clean.Cleaner`; the log cleaner keeps each thread's last stats
for its metrics (recopy percent, buffer utilization, clean time) and logs :meth:`summary`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tidelog.clock import Clock


@dataclass(slots=True)
class CleanerStats:
    clock: Clock = field(repr=False)
    map_bytes_read: int = 0
    map_messages_read: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    messages_read: int = 0
    messages_written: int = 0
    invalid_messages_read: int = 0  # keyless records dropped
    buffer_utilization: float = 0.0
    passes: int = 0  # offset-map passes (more than one when the dirty range had more keys than fit)
    start_ns: int = 0
    map_complete_ns: int = 0
    end_ns: int = 0

    def __post_init__(self) -> None:
        self.start_ns = self.map_complete_ns = self.end_ns = self.clock.nanoseconds()

    def index_messages_read(self, count: int) -> None:
        self.map_messages_read += count

    def index_bytes_read(self, size: int) -> None:
        self.map_bytes_read += size

    def read_messages(self, messages: int, size: int) -> None:
        self.messages_read += messages
        self.bytes_read += size

    def recopy_messages(self, messages: int, size: int) -> None:
        self.messages_written += messages
        self.bytes_written += size

    def index_done(self) -> None:
        self.map_complete_ns = self.clock.nanoseconds()

    def all_done(self) -> None:
        self.end_ns = self.clock.nanoseconds()

    @property
    def elapsed_secs(self) -> float:
        return (self.end_ns - self.start_ns) / 1e9

    @property
    def elapsed_index_secs(self) -> float:
        return (self.map_complete_ns - self.start_ns) / 1e9

    def add(self, other: CleanerStats) -> None:
        """Accumulate another pass's counters (multi-pass cleaning reports one total)."""
        for name in ("map_bytes_read", "map_messages_read", "bytes_read", "bytes_written", "messages_read",
                     "messages_written", "invalid_messages_read", "passes"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.buffer_utilization = max(self.buffer_utilization, other.buffer_utilization)
        self.map_complete_ns = max(self.map_complete_ns, other.map_complete_ns)
        self.end_ns = max(self.end_ns, other.end_ns)

    def summary(self, name: str) -> str:
        mb = 1024 * 1024
        elapsed = max(self.elapsed_secs, 1e-9)
        reduction = 100.0 * (1.0 - self.bytes_written / self.bytes_read) if self.bytes_read else 0.0
        return (
            f"cleaner {name}: {self.bytes_read / mb:.1f} MB of log processed in {elapsed:.1f} s "
            f"({self.bytes_read / mb / elapsed:.1f} MB/s, {self.passes} pass(es)); "
            f"offset map: {self.map_messages_read} messages, {self.map_bytes_read / mb:.1f} MB in "
            f"{self.elapsed_index_secs:.1f} s, {100 * self.buffer_utilization:.1f}% full; "
            f"copied {self.messages_written} of {self.messages_read} messages, "
            f"{self.bytes_written / mb:.1f} MB written ({reduction:.1f}% size reduction), "
            f"{self.invalid_messages_read} keyless dropped"
        )
