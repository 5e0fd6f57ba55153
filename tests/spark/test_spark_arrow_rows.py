"""Scanned batches to Arrow rows of Kafka's schema (no Spark): every column, nulls, headers,
codecs, control batches, LogAppendTime, slicing, CRC checks."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from spark_read_data import batch

from tidelog.errors import CorruptRecordError, InvalidRecordError
from tidelog.records import CompressionType
from tidelog.records.control import build_end_txn_marker_batch
from tidelog.records.record import TimestampType
from tidelog.spark.arrow_rows import get_row_kernels_for_tests, record_batches
from tidelog.spark.schema import arrow_read_schema

T = 1_700_000_000_000


def rows(buf: bytes, start: int = 0, end: int = 2**62, headers: bool = True, **kw: int) -> list[dict]:
    out = []
    for rb in record_batches(buf, "topic-é", 3, start, end, include_headers=headers, **kw):
        assert rb.schema == arrow_read_schema(headers)
        rb.validate(full=True)
        out.extend(rb.to_pylist())
    return out


def test_every_column_with_nulls_and_headers() -> None:
    buf = batch([(0, T, b"k0", b"v0", [("a", b"1"), ("b", None)]), (1, T + 5, None, None, []),
                 (2, T + 9, b"", b"", [("", b"")])])
    got = rows(buf)
    assert [(r["key"], r["value"], r["offset"], r["headers"]) for r in got] == [
        (b"k0", b"v0", 0, [{"key": "a", "value": b"1"}, {"key": "b", "value": None}]),
        (None, None, 1, None),
        (b"", b"", 2, [{"key": "", "value": b""}])]
    assert {r["topic"] for r in got} == {"topic-é"} and {r["partition"] for r in got} == {3}
    assert [int(r["timestamp"].timestamp() * 1000) for r in got] == [T, T + 5, T + 9]
    assert {r["timestampType"] for r in got} == {0}
    assert "headers" not in rows(buf, headers=False)[0]


@pytest.mark.parametrize("codec", [CompressionType.GZIP, CompressionType.SNAPPY, CompressionType.LZ4,
                                   CompressionType.ZSTD])
def test_compressed_batches_next_to_uncompressed_ones(codec: CompressionType) -> None:
    plain = batch([(i, T + i, b"k%d" % i, b"v%d" % i * 50, []) for i in range(5)])
    packed = batch([(i, T + i, b"k%d" % i, b"v%d" % i * 50, [("h", b"%d" % i)]) for i in range(5, 12)],
                   base_offset=5, compression=codec)
    got = rows(plain + packed)
    assert [r["offset"] for r in got] == list(range(12))
    assert [r["value"] for r in got] == [b"v%d" % i * 50 for i in range(12)]
    assert got[7]["headers"] == [{"key": "h", "value": b"7"}]


def test_offsets_outside_the_range_and_control_batches_are_skipped() -> None:
    data = batch([(i, T, b"k", b"v", []) for i in range(4)], producer_id=1, producer_epoch=0, base_sequence=0,
                 is_transactional=True)
    marker = build_end_txn_marker_batch(commit=False, producer_id=1, producer_epoch=0, coordinator_epoch=0,
                                        base_offset=4, timestamp=T)
    after = batch([(5, T, b"k", b"v", [])], base_offset=5)
    assert [r["offset"] for r in rows(data + marker + after)] == [0, 1, 2, 3, 5]  # read_uncommitted, no marker
    assert [r["offset"] for r in rows(data + marker + after, start=2, end=5)] == [2, 3]


def test_log_append_time_batches() -> None:
    buf = batch([(0, T, b"k", b"v", [])], timestamp_type=TimestampType.LOG_APPEND_TIME, log_append_time=T + 77)
    got = rows(buf)
    assert got[0]["timestampType"] == 1 and int(got[0]["timestamp"].timestamp() * 1000) == T + 77


def test_batches_are_sliced_to_max_rows() -> None:
    buf = b"".join(batch([(i, T, b"k", b"v%d" % i, []) for i in range(b, b + 10)], base_offset=b)
                   for b in range(0, 100, 10))
    sizes = [rb.num_rows for rb in record_batches(buf, "t", 0, 0, 100, max_rows=30)]
    assert sizes == [30, 30, 30, 10]


def test_a_header_key_that_is_not_utf8_is_refused_naming_its_offset() -> None:
    buf = batch([(0, T, b"k", b"v", [("ok", b"1")]), (1, T, b"k", b"v", [("\udcff", b"2")])])
    with pytest.raises(InvalidRecordError, match="not valid UTF-8.*offset=1"):
        rows(buf)
    assert len(rows(buf, headers=False)) == 2


def test_a_crc_mismatch_raises() -> None:
    buf = bytearray(batch([(0, T, b"k", b"value", [])]))
    buf[-2] ^= 0x01
    with pytest.raises(CorruptRecordError):
        rows(bytes(buf))


def test_the_gather_kernels_agree_with_their_interpreted_twin() -> None:
    compiled, interpreted = get_row_kernels_for_tests(False), get_row_kernels_for_tests(True)
    arena0 = np.frombuffer(b"abcdefghij", np.uint8)
    arena1 = np.frombuffer(b"KLMNOP", np.uint8)
    arena = np.array([0, 1, 0], np.int16)
    pos = np.array([2, 1, 7], np.int64)
    length = np.array([3, 4, -1], np.int32)
    rows_ = np.array([0, 1, 2], np.int64)
    offsets = np.array([0, 3, 7, 7], np.int32)
    for kernels in (compiled, interpreted):
        out = np.zeros(7, np.uint8)
        kernels.gather_bytes(arena0, arena1, arena, pos, length, rows_, offsets, out)
        assert out.tobytes() == b"cdeLMNO"


def test_schema_types_are_what_spark_declares() -> None:
    rb = next(record_batches(batch([(0, T, b"k", b"v", [])]), "t", 0, 0, 1, include_headers=True))
    assert [f.type for f in rb.schema] == [pa.binary(), pa.binary(), pa.string(), pa.int32(), pa.int64(),
                                           pa.timestamp("us", tz="UTC"), pa.int32(),
                                           arrow_read_schema(True).field("headers").type]


def test_the_aborted_filter_sees_only_the_batches_it_may_skip() -> None:
    """read_committed in a task (aborted_batches): producer 1's transaction aborted, producer 2's
    committed, plain records between; the answer is that of the storage filter fed every batch."""
    from tidelog.records import iter_batches
    from tidelog.storage.read_committed import AbortedBatchFilter
    from tidelog.storage.txn_index import AbortedTxn

    def txn(offset: int, pid: int) -> bytes:
        return batch([(offset, T, b"k", b"v", [])], base_offset=offset, producer_id=pid, producer_epoch=0,
                     base_sequence=offset, is_transactional=True)

    def end(offset: int, pid: int, commit: bool) -> bytes:
        return build_end_txn_marker_batch(commit=commit, producer_id=pid, producer_epoch=0, coordinator_epoch=0,
                                          base_offset=offset, timestamp=T)

    buf = (txn(0, 1) + txn(1, 2) + batch([(2, T, b"k", b"v", [])], base_offset=2) + txn(3, 1)
           + end(4, 1, False) + txn(5, 1) + end(6, 2, True) + end(7, 1, True))
    aborted = [AbortedTxn(1, 0, 4, 1)]
    every = AbortedBatchFilter(aborted)
    kept = [b.base_offset for _, b in iter_batches(buf) if not every.skips(b) and not b.is_control]  # fed every batch
    assert kept == [1, 2, 5]
    assert [r["offset"] for r in rows(buf, aborted=AbortedBatchFilter(aborted))] == kept
    assert [r["offset"] for r in rows(buf)] == [0, 1, 2, 3, 5]
