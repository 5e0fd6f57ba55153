"""Helpers for the retention tests: record builders, a fake segment, and a reference model.

The reference model is written straight from Kafka's ``UnifiedLog.deleteOldSegments`` /
``LocalLog.deletableSegments`` (kafka-storage.md §3.6), on plain values, in Kafka's order of
evaluation (high watermark, then predicate with its side effects, then "last and empty"), so the
property tests compare tidelog's planner with an independent statement of the rules.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tidelog.records import BatchBuilder

T0 = 1_700_000_000_000  # FakeClock's default start, ms
DAY_MS = 86_400_000


def single(ts: int = T0, value: bytes = b"test", key: bytes | None = b"test") -> bytes:
    """Kafka's ``TestUtils.singletonRecords``: one uncompressed v2 record at offset 0 (a leader
    append assigns its offset). ``ts`` -1 means no timestamp."""
    builder = BatchBuilder(base_offset=0)
    builder.append(0, ts, key, value)
    return builder.build()


@dataclass(frozen=True, slots=True)
class FakeSegment:
    """The metadata retention reads of a segment, without files."""

    base_offset: int
    size: int
    max_timestamp_so_far: int
    mtime: int = 0

    @property
    def largest_timestamp(self) -> int:
        return self.max_timestamp_so_far if self.max_timestamp_so_far >= 0 else self.mtime


@dataclass(frozen=True, slots=True)
class ModelOutcome:
    """What the model deletes: (base offset, cause) pairs in order, the log start offset after,
    and whether some pass rolled."""

    deleted: list[tuple[int, str]]
    log_start_offset: int
    rolled: bool


def kafka_model(
    segments: Sequence[FakeSegment], *, log_start_offset: int, high_watermark: int, log_end_offset: int,
    retention_ms: int, retention_bytes: int, delete_policy: bool, now_ms: int,
) -> ModelOutcome:
    """Kafka's three sequential passes, straight from its source."""
    segs = list(segments)
    lso = log_start_offset
    deleted: list[tuple[int, str]] = []
    rolled = False

    def run(cause: str, predicate: Callable[[FakeSegment, FakeSegment | None], bool]) -> None:
        nonlocal segs, lso, rolled
        deletable: list[FakeSegment] = []
        for i, seg in enumerate(segs):
            nxt = segs[i + 1] if i + 1 < len(segs) else None
            upper = nxt.base_offset if nxt is not None else log_end_offset
            last_and_empty = nxt is None and seg.size == 0
            if high_watermark >= upper and predicate(seg, nxt) and not last_and_empty:
                deletable.append(seg)
            else:
                break
        if not deletable:
            return
        deleted.extend((s.base_offset, cause) for s in deletable)
        segs = segs[len(deletable):]
        if not segs:  # roll first: a new empty active segment at the log end
            rolled = True
            segs = [FakeSegment(log_end_offset, 0, -1)]
        lso = max(lso, segs[0].base_offset)

    run("log start offset", lambda s, n: n is not None and n.base_offset <= lso)
    if delete_policy:
        size = sum(s.size for s in segs)
        if not (retention_bytes < 0 or size < retention_bytes):
            diff = size - retention_bytes

            def size_predicate(s: FakeSegment, n: FakeSegment | None) -> bool:
                nonlocal diff
                if diff - s.size >= 0:
                    diff -= s.size
                    return True
                return False

            run("retention.bytes", size_predicate)
        if retention_ms >= 0:
            run("retention.ms", lambda s, n: now_ms - s.largest_timestamp > retention_ms)
    return ModelOutcome(deleted, lso, rolled)
