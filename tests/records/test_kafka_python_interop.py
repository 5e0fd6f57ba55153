"""Interop with kafka-python 3 (a record codec nobody here wrote), in both directions.

kafka-python reads what we build (every codec) with equal records, and we read what its
``DefaultRecordBatchBuilder`` / ``MemoryRecordsBuilder`` / ``LegacyRecordBatchBuilder`` build.
kafka-python's snappy and legacy-LZ4 codecs use python-snappy and xxhash (test dependencies).
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch as KpDefaultBatch
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.legacy_records import LegacyRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords, MemoryRecordsBuilder
from records_strategies import ALL_CODECS, record_rows

from tidelog.records import (
    BatchBuilder,
    CompressionType,
    LegacyBatch,
    Record,
    RecordBatch,
    TimestampType,
    build_legacy_batch,
    iter_batches,
)

LEGACY_CODECS = [CompressionType.NONE, CompressionType.GZIP, CompressionType.SNAPPY, CompressionType.LZ4]


def _kp_records(data: bytes) -> list[Record]:
    """Every record kafka-python finds in ``data``, as our Record (v0 timestamps None -> -1).
    Its reader stops quietly at a torn tail, so this also checks the batches cover every byte."""
    records, out = MemoryRecords(bytes(data)), []
    for batch in records:
        assert batch.validate_crc()
        for r in batch:
            ts = -1 if r.timestamp is None else r.timestamp
            out.append(Record(r.offset, ts, r.key, r.value, tuple(tuple(h) for h in r.headers)))
    assert records.valid_bytes() == len(data), "bytes after the last whole batch"
    return out


def _our_records(data: bytes) -> list[Record]:
    out = []
    for _, batch in iter_batches(data):
        assert batch.is_valid()
        out.extend(batch.records())
    return out


def _rows(n: int = 50) -> list[tuple]:
    return [(1000 + 2 * i, 1_700_000_000_000 + i % 7, None if i % 9 == 0 else b"key-%d" % (i % 5),
             None if i % 11 == 0 else b"value %d " % i * 4, (("trace", b"%d" % i), ("n", None)) if i % 3 == 0 else ())
            for i in range(n)]


def _build(rows: list[tuple], codec: CompressionType, **kwargs: object) -> bytes:
    builder = BatchBuilder(compression=codec, base_offset=rows[0][0], **kwargs)  # type: ignore[arg-type]
    for row in rows:
        builder.append(*row)
    return builder.build()


@pytest.mark.parametrize("codec", ALL_CODECS)
def test_kafka_python_reads_our_batches(codec: CompressionType) -> None:
    rows = _rows()
    built = _build(rows, codec, producer_id=5, producer_epoch=2, base_sequence=10, partition_leader_epoch=3)
    (kp,) = list(MemoryRecords(built))
    assert isinstance(kp, KpDefaultBatch) and kp.validate_crc()
    assert (kp.base_offset, kp.last_offset, kp.compression_type, kp.records_count) == (1000, 1098, codec, 50)
    assert (kp.producer_id, kp.producer_epoch, kp.base_sequence, kp.leader_epoch) == (5, 2, 10, 3)
    assert _kp_records(built) == [Record(*row) for row in rows]


@pytest.mark.parametrize("codec", ALL_CODECS)
def test_kafka_python_reads_our_log_append_time_batches(codec: CompressionType) -> None:
    built = _build(_rows(5), codec, timestamp_type=TimestampType.LOG_APPEND_TIME, log_append_time=4242)
    assert [r.timestamp for r in _kp_records(built)] == [4242] * 5


@pytest.mark.parametrize("codec", ALL_CODECS)
def test_we_read_kafka_python_default_batches(codec: CompressionType) -> None:
    rows = _rows()
    kp = DefaultRecordBatchBuilder(magic=2, compression_type=int(codec), is_transactional=False,
                                   producer_id=-1, producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    for offset, ts, key, value, headers in rows:
        kp.append(offset - 1000, ts, key, value, list(headers))
    built = bytearray(kp.build())
    struct.pack_into(">q", built, 0, 1000)  # the broker assigns the base offset
    batch = RecordBatch(built)
    assert batch.is_valid() and batch.compression is codec
    assert list(batch.records()) == [Record(*row) for row in rows]


@pytest.mark.parametrize("codec", ALL_CODECS)
def test_we_read_kafka_python_memory_records(codec: CompressionType) -> None:
    kp = MemoryRecordsBuilder(magic=2, compression_type=int(codec), batch_size=1 << 20, offset=0,
                              transactional=True, producer_id=77, producer_epoch=1, base_sequence=5)
    for i in range(30):
        kp.append(timestamp=100 + i, key=b"k%d" % (i % 4), value=b"payload " * 10, headers=[("h", b"%d" % i)])
    kp.close()
    data = bytes(kp.buffer())
    (_, batch), = iter_batches(data)
    assert isinstance(batch, RecordBatch) and batch.is_valid()
    assert (batch.is_transactional, batch.producer_id, batch.last_sequence) == (True, 77, 34)
    assert _our_records(data) == _kp_records(data)
    assert len(_our_records(data)) == 30


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", LEGACY_CODECS)
def test_we_read_kafka_python_legacy_batches(magic: int, codec: CompressionType) -> None:
    kp = LegacyRecordBatchBuilder(magic=magic, compression_type=int(codec), batch_size=1 << 20)
    for i in range(20):
        kp.append(i, timestamp=500 + i, key=None if i == 3 else b"k%d" % i, value=b"legacy value " * 3)
    data = bytearray(kp.build())
    if codec is not CompressionType.NONE:
        struct.pack_into(">q", data, 0, 19)  # the broker stamps the wrapper with the last offset
    ours = _our_records(bytes(data))
    assert ours == _kp_records(bytes(data))
    assert [r.offset for r in ours] == list(range(20))


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", LEGACY_CODECS)
def test_kafka_python_reads_our_legacy_batches(magic: int, codec: CompressionType) -> None:
    messages = [(40 + i, 900 + i, b"k%d" % i, None if i == 2 else b"v" * i) for i in range(6)]
    built = build_legacy_batch(messages, magic=magic, compression=codec)
    assert _kp_records(built) == _our_records(built)
    assert [r.offset for r in _kp_records(built)] == list(range(40, 46))
    assert all(isinstance(b, LegacyBatch) for _, b in iter_batches(built))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=record_rows(max_size=20), codec=st.sampled_from(ALL_CODECS))
def test_random_batches_agree_both_ways(rows: list[tuple], codec: CompressionType) -> None:
    expected = [Record(*row) for row in rows]
    assert _kp_records(_build(rows, codec)) == expected
    kp = DefaultRecordBatchBuilder(magic=2, compression_type=int(codec), is_transactional=False,
                                   producer_id=-1, producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    for offset, ts, key, value, headers in rows:
        kp.append(offset - rows[0][0], ts, key, value, list(headers))
    built = bytearray(kp.build())
    struct.pack_into(">q", built, 0, rows[0][0])
    assert list(RecordBatch(built).records()) == expected
