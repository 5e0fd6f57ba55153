"""Data dirs for the read-side tests, built with the library, and the reference reads they are
checked against (``tidelog consume``'s own record iterator over ``Log``).

Plain helpers (imported as ``from spark_read_data import ...``); no Spark here, so the log-view
tests can use them too.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from tidelog.cli.consume import iter_records
from tidelog.manager import LogManager
from tidelog.records import BatchBuilder
from tidelog.records.control import build_end_txn_marker_batch
from tidelog.storage.config import BrokerConfig
from tidelog.testing import FakeClock, FakeScheduler
from tidelog.topic_partition import TopicPartition

T0 = 1_700_000_000_000

Row = tuple[Any, ...]  # (key, value, topic, partition, offset, timestamp ms, timestampType[, headers])


def open_manager(log_dir: Path, clock: FakeClock | None = None, **props: str) -> LogManager:
    """A LogManager owning ``log_dir`` (small segments and index intervals so logs have many)."""
    clock = clock or FakeClock(T0)
    config = {"log.dirs": str(log_dir), "log.segment.bytes": "4096", "log.index.interval.bytes": "256",
              "log.retention.check.interval.ms": "1000000", **props}
    return LogManager.open(BrokerConfig.from_properties(config), [log_dir], clock=clock,
                           scheduler=FakeScheduler(clock))


def batch(records: Iterable[tuple[int, int, bytes | None, bytes | None, Sequence[tuple[str, bytes | None]]]],
          base_offset: int = 0, **builder: Any) -> bytes:
    """One batch of ``(offset, timestamp, key, value, headers)`` records."""
    b = BatchBuilder(base_offset=base_offset, **builder)
    for offset, ts, key, value, headers in records:
        b.append(offset, ts, key, value, headers)
    return b.build()


def append_simple(manager: LogManager, tp: TopicPartition, count: int, per_batch: int = 10, *,
                  ts0: int = T0, **builder: Any) -> None:
    """``count`` records ``k<i>``/``v<i>`` in batches of ``per_batch``, timestamps ``ts0 + i``;
    every 3rd record has two headers, every 7th key is null, every 11th value is null."""
    log = manager.log(tp)
    start = log.log_end_offset
    for first in range(0, count, per_batch):
        rows = []
        for j in range(first, min(first + per_batch, count)):
            i = start + j
            headers = [("h", b"%d" % i), ("n", None)] if i % 3 == 0 else []
            rows.append((j - first, ts0 + i, None if i % 7 == 0 else b"k%d" % i,
                         None if i % 11 == 0 else b"v%d" % i * 3, headers))
        manager.append(tp, batch(rows, **builder))


def append_control(manager: LogManager, tp: TopicPartition, *, commit: bool = True, ts: int = T0) -> None:
    """A transactional batch of 3 records then its end marker (a control batch)."""
    log = manager.log(tp)
    base = log.log_end_offset
    rows = [(base + i, ts + i, b"tk%d" % i, b"tv%d" % i, []) for i in range(3)]
    log.append_as_follower(batch(rows, base_offset=base, producer_id=7, producer_epoch=0, base_sequence=0,
                                 is_transactional=True))
    log.append_as_follower(build_end_txn_marker_batch(commit=commit, producer_id=7, producer_epoch=0,
                                                      coordinator_epoch=0, base_offset=base + 3, timestamp=ts + 3))
    log.update_high_watermark(log.log_end_offset)  # a follower append leaves it behind


def append_with_gaps(manager: LogManager, tp: TopicPartition, offsets: Sequence[int], ts0: int = T0) -> None:
    """Records at exactly ``offsets`` (ascending, gaps allowed), as a compacted log holds them:
    one batch per 5 offsets, appended as a follower would."""
    log = manager.log(tp)
    for i in range(0, len(offsets), 5):
        chunk = offsets[i:i + 5]
        rows = [(o, ts0 + o, b"k%d" % (o % 4), b"v%d" % o, []) for o in chunk]
        log.append_as_follower(batch(rows, base_offset=chunk[0]))
    log.update_high_watermark(log.log_end_offset)  # a follower append leaves it behind


def expected_rows(manager: LogManager, tp: TopicPartition, start: int | None = None, end: int | None = None,
                  headers: bool = False) -> list[Row]:
    """What a read of ``[start, end)`` must return, from ``tidelog consume``'s record iterator."""
    log = manager.log(tp)
    first = log.log_start_offset if start is None else start
    stop = log.high_watermark if end is None else end
    rows = []
    for kind, (offset, ts, key, value, hdrs) in iter_records(manager, tp, first):
        if offset >= stop:
            break
        row: Row = (key, value, tp.topic, tp.partition, offset, ts, 1 if kind == "LogAppendTime" else 0)
        if headers:
            row += ([(k, v) for k, v in hdrs] or None,)
        rows.append(row)
    return rows
