"""Whole segment files written through tidelog's Log, read by kafka-python's MemoryRecords.

kafka-python's reader is code nobody here wrote; it walks a ``.log`` file exactly as a consumer
walks fetched bytes. Every codec, headers, null keys and tombstones, and offsets assigned by the
log (not by the producer) must read back equal.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from tidelog.records import BatchBuilder, CompressionType
from tidelog.storage.config import LogConfig
from tidelog.storage.log import Log
from tidelog.testing import FakeClock, FakeScheduler

NOW = 1_700_000_000_000


def kafka_python_records(data: bytes) -> list[tuple[int, int, bytes | None, bytes | None, list]]:
    """Every record kafka-python finds in ``data``. Its reader stops quietly at a torn tail (a
    consumer refetches), so this also checks that the batches it read cover every byte."""
    records, out = MemoryRecords(data), []
    while records.has_next():
        batch = records.next_batch()
        assert batch.validate_crc()
        for r in batch:
            out.append((r.offset, r.timestamp, r.key, r.value, [(k, v) for k, v in r.headers]))
    assert records.valid_bytes() == len(data), "bytes after the last whole batch"
    return out


@pytest.fixture
def log(tmp_path: Path) -> Log:
    clock = FakeClock(NOW)
    opened = Log.open(tmp_path / "interop-0", LogConfig.from_props(overrides={"segment.bytes": "4000"}),
                      clock=clock, scheduler=FakeScheduler(clock))
    yield opened
    opened.close()


@pytest.mark.parametrize("codec", list(CompressionType))
def test_kafka_python_reads_every_record_of_segments_we_write(log: Log, codec: CompressionType) -> None:
    expected = []
    for batch_no in range(12):
        builder = BatchBuilder(compression=codec)
        for i in range(25):
            n = batch_no * 25 + i
            key = None if n % 7 == 0 else f"key-{n % 40}".encode()
            value = None if n % 11 == 0 else f"value-{n}".encode() * 3
            headers = [("h", f"{n}".encode()), ("empty", None)] if n % 3 == 0 else []
            builder.append(i, NOW + n, key, value, headers)
            expected.append((n, NOW + n, key, value, headers))
        log.append_as_leader(builder.build())
    log.flush()
    assert log.num_segments > 1
    read = []
    for segment in log.segments:
        read += kafka_python_records(segment.log.path.read_bytes())
    assert read == expected


def test_we_append_and_read_back_batches_kafka_python_builds(log: Log) -> None:
    expected = []
    for batch_no in range(5):
        builder = DefaultRecordBatchBuilder(magic=2, compression_type=batch_no % 5, is_transactional=False,
                                            producer_id=-1, producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
        for i in range(10):
            builder.append(i, timestamp=NOW + i, key=b"k%d" % i, value=b"v%d" % (batch_no * 10 + i), headers=[])
            expected.append((batch_no * 10 + i, NOW + i, b"k%d" % i, b"v%d" % (batch_no * 10 + i), []))
        info = log.append_as_leader(bytes(builder.build()))
        assert (info.first_offset, info.last_offset) == (batch_no * 10, batch_no * 10 + 9)
    log.update_high_watermark(log.log_end_offset)
    data = log.read(0, 1 << 20).records
    assert kafka_python_records(data) == expected
