"""Segments tidelog's cleaner rewrote, read by kafka-python's MemoryRecords (code nobody here wrote).

The cleaner copies some batches byte for byte and rebuilds others: with records dropped, with
a delete horizon stamped (attribute bit 6, base timestamp = cleaning time + delete.retention.ms,
timestamp deltas relative to it), or as an empty 61-byte batch keeping an idempotent producer's
last sequence. Every one of them must be a valid batch to a consumer, in every codec, and read
back the same records (offsets, original timestamps, keys, values, headers) as tidelog reads.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka.record.memory_records import MemoryRecords

from tidelog.cleaner.log_cleaner import LogCleaner
from tidelog.records import BatchBuilder, CompressionType
from tidelog.storage.config import BrokerConfig, LogConfig
from tidelog.storage.log import Log
from tidelog.testing import FakeClock, FakeScheduler

NOW = 1_700_000_000_000
DELETE_RETENTION_MS = 3_600_000
HORIZON_BIT = 0x40
PRODUCER_ID = 7

Row = tuple[int, int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]


def kafka_python_read(data: bytes) -> tuple[list[Any], list[Row]]:
    """(batches, records) kafka-python finds in ``data``; every batch's CRC must check and the
    batches must cover every byte (its reader stops quietly at a torn tail)."""
    records, batches, rows = MemoryRecords(data), [], []
    while records.has_next():
        batch = records.next_batch()
        assert batch.validate_crc(), f"bad CRC in the batch at offset {batch.base_offset}"
        batches.append(batch)
        rows.extend((r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in batch)
    assert records.valid_bytes() == len(data), "bytes after the last whole batch"
    return batches, rows


def our_read(log: Log) -> list[Row]:
    return [(r.offset, r.timestamp, r.key, r.value, list(r.headers))
            for segment in log.segments for _, batch in segment.log.batches() for r in batch.records()]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(NOW)


@pytest.fixture
def log(tmp_path: Path, clock: FakeClock) -> Iterator[Log]:
    config = LogConfig.from_props(overrides={"cleanup.policy": "compact", "segment.bytes": "1500",
                                             "delete.retention.ms": str(DELETE_RETENTION_MS),
                                             "min.cleanable.dirty.ratio": "0.0"})
    opened = Log.open(tmp_path / "interop-0", config, clock=clock, scheduler=FakeScheduler(clock))
    yield opened
    opened.close()


def cleaner_for(log: Log, clock: FakeClock) -> LogCleaner:
    broker = BrokerConfig.from_properties({"log.dirs": str(log.dir.parent), "log.cleaner.dedupe.buffer.size": "24000"})
    return LogCleaner(broker, [log.dir.parent], lambda: [(log.topic_partition, log)], clock)


def append(log: Log, codec: int, rows: list[tuple[str | None, str | None]], *, start_ts: int, **producer: int) -> None:
    builder = BatchBuilder(compression=codec, **producer)
    for i, (key, value) in enumerate(rows):
        headers = [("n", str(i).encode()), ("none", None)] if i % 2 == 0 else []
        builder.append(i, start_ts + i, key.encode() if key else None, value.encode() if value is not None else None,
                       headers)
    log.append_as_leader(builder.build())
    log.update_high_watermark(log.log_end_offset)


def write_workload(log: Log, codec: int) -> int:
    """Overwrites, tombstones (some in batches with live values), an idempotent producer whose
    last batch is wholly overwritten later; returns the offset the clean will reach."""
    for round_ in range(3):
        for batch_no in range(4):
            append(log, codec, [(f"k{batch_no * 5 + i}", f"r{round_}-{i}" * 3) for i in range(5)],
                   start_ts=NOW - 1000 + round_ * 10)
    append(log, codec, [("k0", None), ("k1", "alive"), ("k2", None)], start_ts=NOW - 500)
    append(log, codec, [("k3", None)], start_ts=NOW - 400)
    append(log, codec, [("k4", "p0"), ("k5", "p1")], start_ts=NOW - 300,
           producer_id=PRODUCER_ID, producer_epoch=0, base_sequence=0)
    append(log, codec, [("k4", "over"), ("k5", "over")], start_ts=NOW - 200)
    log.roll()
    append(log, codec, [("k19", "active")], start_ts=NOW)  # in the active segment: never cleaned
    return log.active_segment.base_offset


def expected_latest(log: Log) -> dict[bytes, tuple[int, bytes | None]]:
    return {key: (offset, value) for offset, _, key, value, _ in our_read(log) if key is not None}


@pytest.mark.parametrize("codec", list(CompressionType), ids=lambda c: c.name.lower())
def test_kafka_python_reads_what_the_cleaner_wrote(log: Log, clock: FakeClock, codec: CompressionType) -> None:
    end = write_workload(log, codec)
    latest = expected_latest(log)
    timestamps = {offset: ts for offset, ts, _, _, _ in our_read(log)}
    cleaner = cleaner_for(log, clock)
    result = cleaner.run_once()
    assert result is not None and result.error is None and result.end_offset == end

    batches, rows = [], []
    for segment in log.segments:
        found, read = kafka_python_read(segment.log.path.read_bytes())
        batches += found
        rows += read
    assert rows == our_read(log)
    assert {key: (offset, value) for offset, _, key, value, _ in rows} == latest
    below = [key for offset, _, key, _, _ in rows if offset < end]
    assert len(below) == len(set(below)), "one record per key in the cleaned part"
    assert all(ts == timestamps[offset] for offset, ts, _, _, _ in rows), "original timestamps survive"
    assert [offset for offset, _, _, value, _ in rows if value is None] == [latest[b"k0"][0], latest[b"k2"][0],
                                                                         latest[b"k3"][0]]

    horizon = [b for b in batches if b.attributes & HORIZON_BIT]
    assert horizon and all(b.first_timestamp == NOW + DELETE_RETENTION_MS for b in horizon)
    assert {b.compression_type for b in horizon} == {int(codec)}
    [empty] = [b for b in batches if b.records_count == 0]
    assert (empty.producer_id, empty.base_sequence, empty.last_offset_delta) == (PRODUCER_ID, 0, 1)
    assert empty.size_in_bytes == 61 and empty.compression_type == 0


@pytest.mark.parametrize("codec", [CompressionType.NONE, CompressionType.LZ4], ids=["none", "lz4"])
def test_kafka_python_reads_the_log_after_the_tombstones_are_gone(log: Log, clock: FakeClock,
                                                                   codec: CompressionType) -> None:
    """A second clean past the delete horizon drops the tombstones (and their horizon batches)."""
    end = write_workload(log, codec)
    cleaner = cleaner_for(log, clock)
    assert cleaner.run_once() is not None
    clock.advance(DELETE_RETENTION_MS + 1)
    cleaner.manager.update_checkpoints(log.dir.parent, log.topic_partition, 0)  # force a full recopy
    assert cleaner.clean_now(log.topic_partition, force=True) is not None
    rows = []
    for segment in log.segments:
        _, read = kafka_python_read(segment.log.path.read_bytes())
        rows += read
    assert rows == our_read(log)
    assert [value for *_, value, _ in rows if value is None] == []
    assert {key for _, _, key, _, _ in rows} == {f"k{i}".encode() for i in range(20)} - {b"k0", b"k2", b"k3"}
    assert max(offset for offset, *_ in rows) == end
