"""scan_batches: v2 batches scanned into columns, both twins, against kafka-python's reader.

Every behaviour test runs once per twin (``python`` = the kernels interpreted, ``numba`` = the
same kernels compiled). Reference data comes from kafka-python's builder and reader (code nobody
here wrote) and, for what kafka-python cannot build (LogAppendTime, control and delete-horizon
batches, corrupt records), from the tiny encoder at the top of this file.
"""

from __future__ import annotations

import mmap
import os
import struct
import subprocess
import sys
import types
import zlib
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import crc32c
import cramjam
import lz4.frame
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from tidelog.errors import CorruptRecordError, UnsupportedCompressionError
from tidelog.records import RecordBatch
from tidelog.records.varint import zigzag_bytes
from tidelog.records import _crc_kernels
from tidelog.records.scan import (
    ACTIVE_IMPLEMENTATION,
    RecordsSummary,
    ScanKernels,
    ScanResult,
    batch_crcs,
    gather_array,
    gather_keys,
    gather_values,
    get_kernels,
    record_headers,
    summarize_batch_records,
    scan_batches,
)

NONE, GZIP, SNAPPY, LZ4, ZSTD = range(5)
LOG_APPEND_TIME = 0x08
TRANSACTIONAL = 0x10
CONTROL = 0x20
DELETE_HORIZON = 0x40
INT64_MAX = (1 << 63) - 1
TS = 1_700_000_000_000

Row = tuple[int, int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]


# --- a tiny v2 encoder (test-only) ----------------------------------------------------------

varint = zigzag_bytes  # any signed 64-bit value, without the encoders' range checks


def nullable(data: bytes | None) -> bytes:
    return varint(-1) if data is None else varint(len(data)) + data


def record(offset_delta: int = 0, ts_delta: int = 0, key: bytes | None = b"k",
           value: bytes | None = b"v", headers: Sequence[tuple[str | bytes, bytes | None]] = ()) -> bytes:
    body = b"\x00" + varint(ts_delta) + varint(offset_delta) + nullable(key) + nullable(value)
    body += varint(len(headers))
    for name, data in headers:
        body += nullable(name.encode() if isinstance(name, str) else name) + nullable(data)
    return varint(len(body)) + body


def batch(records: Sequence[bytes] = (), *, base_offset: int = 0, attributes: int = 0,
          base_timestamp: int = TS, max_timestamp: int | None = None, count: int | None = None,
          last_offset_delta: int | None = None, producer_id: int = -1, producer_epoch: int = -1,
          base_sequence: int = -1, magic: int = 2, area: bytes | None = None) -> bytes:
    """A v2 batch with a correct CRC; ``area`` replaces the (uncompressed) records area."""
    area = b"".join(records) if area is None else area
    count = len(records) if count is None else count
    last = max(count - 1, 0) if last_offset_delta is None else last_offset_delta
    after_crc = struct.pack(">hiqqqhii", attributes, last, base_timestamp,
                            base_timestamp if max_timestamp is None else max_timestamp,
                            producer_id, producer_epoch, base_sequence, count) + area
    crc = crc32c.crc32c(after_crc)
    return struct.pack(">qiibI", base_offset, 49 + len(area), 0, magic, crc) + after_crc


def xerial_snappy(data: bytes) -> bytes:
    blocks = [bytes(cramjam.snappy.compress_raw(data[i:i + 32768])) for i in range(0, len(data), 32768)]
    return b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1) + b"".join(
        struct.pack(">i", len(b)) + b for b in blocks)


COMPRESSORS = {
    GZIP: lambda d: zlib.compress(d, wbits=31),
    SNAPPY: xerial_snappy,
    LZ4: lambda d: lz4.frame.compress(d),
    ZSTD: lambda d: bytes(cramjam.zstd.compress(d)),
}


# --- kafka-python: builder and reader -------------------------------------------------------

@pytest.fixture
def kafka_python_snappy(monkeypatch: pytest.MonkeyPatch) -> None:
    """kafka-python's xerial framing needs python-snappy for raw blocks; lend it cramjam's."""
    import kafka.codec

    raw = types.SimpleNamespace(compress=lambda d: bytes(cramjam.snappy.compress_raw(d)),
                                decompress=lambda d: bytes(cramjam.snappy.decompress_raw(bytes(d))))
    monkeypatch.setattr(kafka.codec, "snappy", raw)


def kp_batch(rows: Sequence[tuple[int, bytes | None, bytes | None, list[Any]]], *, codec: int = NONE,
             base_offset: int = 0, producer: tuple[int, int, int] = (-1, -1, -1),
             transactional: bool = False) -> bytes:
    """kafka-python's batch of ``(timestamp, key, value, headers)`` rows at offsets base_offset+i."""
    builder = DefaultRecordBatchBuilder(2, codec, transactional, *producer, batch_size=1 << 30)
    for i, (timestamp, key, value, headers) in enumerate(rows):
        builder.append(i, timestamp=timestamp, key=key, value=value, headers=headers)
    out = bytearray(builder.build())
    struct.pack_into(">q", out, 0, base_offset)  # baseOffset is outside the CRC
    return bytes(out)


def kafka_python_rows(buf: bytes) -> list[Row]:
    records = MemoryRecords(bytes(buf))
    out = []
    while (kp := records.next_batch()) is not None:
        out.extend((r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in kp)
    return out


def sample_rows(n: int, seed: int = 0) -> list[tuple[int, bytes | None, bytes | None, list[Any]]]:
    """Rows with null keys and values, headers (one with a null value) and compressible values."""
    rows = []
    for i in range(n):
        key = None if i % 7 == 3 else b"key-%d" % (i * 31 + seed)
        value = None if i % 5 == 4 else b"value %d " % i * (1 + i % 4)
        headers = [("trace", b"t%d" % i), ("\u00e9", None)] if i % 3 == 0 else []
        rows.append((TS + 3 * i - 5 * (i % 2), key, value, headers))
    return rows


# --- the twins ------------------------------------------------------------------------------

TWINS = [pytest.param(True, id="python"), pytest.param(False, id="numba")]


def twin_kernels(pure: bool) -> ScanKernels:
    try:
        return get_kernels(pure)
    except ImportError:
        pytest.skip("numba is not installed")


@pytest.fixture(params=TWINS)
def twin(request: pytest.FixtureRequest) -> ScanKernels:
    return twin_kernels(request.param)


def rows_of(result: ScanResult) -> list[Row]:
    keys, values = gather_keys(result), gather_values(result)
    return [(int(result.offset[i]), int(result.timestamp[i]), keys[i], values[i], record_headers(result, i))
            for i in range(result.record_count)]


def columns(result: ScanResult) -> dict[str, Any]:
    """Every field of a result as (dtype, bytes) or value: equal iff byte-identical."""
    out: dict[str, Any] = {}
    for name in ScanResult.__slots__:
        value = getattr(result, name)
        if isinstance(value, np.ndarray):
            out[name] = (value.dtype.str, value.tobytes())
        elif name == "arenas":
            out[name] = tuple(a.tobytes() for a in value)
        else:
            out[name] = value
    return out


def outcome(buf: bytes, kernels: ScanKernels) -> Any:
    """The columns, or the error's type and message: what both twins must agree on."""
    try:
        return columns(scan_batches(buf, kernels=kernels))
    except CorruptRecordError as err:  # the only error a scan of any bytes may raise
        return type(err).__name__, str(err)


# --- decoding -------------------------------------------------------------------------------

def test_uncompressed_batches_match_kafka_python_reader(twin: ScanKernels) -> None:
    buf = (kp_batch(sample_rows(10)) + kp_batch(sample_rows(1, seed=5), base_offset=10)
           + kp_batch(sample_rows(25, seed=9), base_offset=1000))

    result = scan_batches(buf, kernels=twin)

    assert rows_of(result) == kafka_python_rows(buf)
    assert result.record_count == 36
    assert result.end_position == len(buf)
    assert result.arena.tolist() == [0] * 36


@pytest.mark.parametrize("codec", [GZIP, SNAPPY, LZ4, ZSTD], ids=["gzip", "snappy", "lz4", "zstd"])
def test_compressed_batches_match_kafka_python_reader(twin: ScanKernels, codec: int,
                                                      kafka_python_snappy: None) -> None:
    buf = kp_batch(sample_rows(40), codec=codec, base_offset=7) + kp_batch(sample_rows(3), base_offset=47)

    result = scan_batches(buf, kernels=twin)

    assert result.batch_attributes.tolist()[0] & 0x07 == codec  # kafka-python did compress it
    assert rows_of(result) == kafka_python_rows(buf)
    assert result.arena.tolist() == [1] * 40 + [0] * 3
    assert len(result.arenas) == 2


def test_compressed_and_plain_batches_keep_buffer_order(twin: ScanKernels) -> None:
    plain = [record(i, i, b"p%d" % i) for i in range(3)]
    packed = b"".join(record(i, i, b"c%d" % i) for i in range(4))
    buf = (batch(plain) + batch(base_offset=3, attributes=GZIP, count=4, area=COMPRESSORS[GZIP](packed))
           + batch(plain, base_offset=7) + batch(base_offset=10, attributes=ZSTD, count=4,
                                                 area=COMPRESSORS[ZSTD](packed)))

    result = scan_batches(buf, kernels=twin)

    assert result.offset.tolist() == list(range(14))
    assert gather_keys(result) == [b"p0", b"p1", b"p2", b"c0", b"c1", b"c2", b"c3"] * 2
    assert result.batch.tolist() == [0] * 3 + [1] * 4 + [2] * 3 + [3] * 4


def test_null_key_and_value_have_length_minus_one(twin: ScanKernels) -> None:
    buf = batch([record(0, key=None, value=b""), record(1, key=b"", value=None)])

    result = scan_batches(buf, kernels=twin)

    assert result.key_len.tolist() == [-1, 0]
    assert result.value_len.tolist() == [0, -1]
    assert gather_keys(result) == [None, b""]
    assert gather_values(result) == [b"", None]
    assert list(gather_array(result, "value")) == [b"", None]


def test_headers_decode_in_order_with_null_values(twin: ScanKernels) -> None:
    headers = [("a", b"1"), ("", b""), ("\u00e9t\u00e9", None), ("z", b"\x00" * 300)]
    buf = batch([record(0, headers=headers), record(1)])

    result = scan_batches(buf, kernels=twin)

    assert result.headers_count.tolist() == [4, 0]
    assert record_headers(result, 0) == headers
    assert record_headers(result, 1) == []


def test_header_key_that_is_not_utf8_decodes_as_the_batch_reader_does(twin: ScanKernels) -> None:
    """The cleaner rebuilds compressed batches from these headers: a non-UTF-8 key used to fail
    the clean (and quarantine the partition) on data every other reader takes."""
    buf = batch([record(0), record(1, headers=[(b"\xff\xfe", b"v")])], base_offset=40)
    result = scan_batches(buf, kernels=twin)  # framing is fine: the scan itself succeeds

    (_, second) = list(RecordBatch(buf).records())
    assert record_headers(result, 1) == list(second.headers) == [("\udcff\udcfe", b"v")]


def test_timestamps_are_base_plus_delta_for_create_time(twin: ScanKernels) -> None:
    buf = batch([record(0, 0), record(1, -5), record(2, 1 << 40)], base_timestamp=TS)

    assert scan_batches(buf, kernels=twin).timestamp.tolist() == [TS, TS - 5, TS + (1 << 40)]


def test_log_append_time_batch_reports_max_timestamp(twin: ScanKernels) -> None:
    buf = batch([record(0, 0), record(1, 9)], attributes=LOG_APPEND_TIME, base_timestamp=TS,
                max_timestamp=TS + 12345)

    result = scan_batches(buf, kernels=twin)

    assert result.timestamp.tolist() == [TS + 12345] * 2
    assert rows_of(result) == kafka_python_rows(buf)


def test_delete_horizon_batch_timestamps_are_base_plus_delta(twin: ScanKernels) -> None:
    horizon = TS + 86_400_000
    buf = batch([record(0, -86_400_000), record(1, -86_399_000)], attributes=DELETE_HORIZON,
                base_timestamp=horizon, max_timestamp=TS + 1000)

    result = scan_batches(buf, kernels=twin)

    assert result.timestamp.tolist() == [TS, TS + 1000]
    assert result.batch_base_timestamp.tolist() == [horizon]


def test_control_batch_records_are_scanned(twin: ScanKernels) -> None:
    commit = record(0, key=struct.pack(">hh", 0, 1), value=struct.pack(">hi", 0, 5))
    buf = kp_batch(sample_rows(2), producer=(42, 3, 0), transactional=True) + batch(
        [commit], base_offset=2, attributes=TRANSACTIONAL | CONTROL, producer_id=42, producer_epoch=3)

    result = scan_batches(buf, kernels=twin)

    assert rows_of(result) == kafka_python_rows(buf)
    assert result.batch_attributes.tolist() == [TRANSACTIONAL, TRANSACTIONAL | CONTROL]
    control_rows = (result.batch_attributes[result.batch] & CONTROL) != 0
    assert control_rows.tolist() == [False, False, True]


def test_batch_columns_describe_each_batch(twin: ScanKernels) -> None:
    first = batch([record(0), record(4)], base_offset=100, last_offset_delta=4, max_timestamp=TS + 9,
                  producer_id=77, producer_epoch=2, base_sequence=5, attributes=TRANSACTIONAL)
    second = batch([record(0)], base_offset=105, base_timestamp=TS + 50)
    result = scan_batches(first + second, kernels=twin)

    assert result.batch_count == 2
    assert result.batch_position.tolist() == [0, len(first)]
    assert result.batch_size.tolist() == [len(first), len(second)]
    assert result.batch_base_offset.tolist() == [100, 105]
    assert result.batch_last_offset.tolist() == [104, 105]
    assert result.batch_max_timestamp.tolist() == [TS + 9, TS + 50]
    assert result.batch_producer_id.tolist() == [77, -1]
    assert result.batch_producer_epoch.tolist() == [2, -1]
    assert result.batch_records_count.tolist() == [2, 1]
    assert result.offset.tolist() == [100, 104, 105]
    assert result.batch.tolist() == [0, 0, 1]
    dtypes = {name: getattr(result, name).dtype for name in ScanResult.__slots__ if name.startswith("batch_")}
    assert dtypes == {"batch_position": np.int64, "batch_size": np.int64, "batch_base_offset": np.int64,
                      "batch_last_offset": np.int64, "batch_attributes": np.int16,
                      "batch_base_timestamp": np.int64, "batch_max_timestamp": np.int64,
                      "batch_producer_id": np.int64, "batch_producer_epoch": np.int16,
                      "batch_records_count": np.int32}


def test_record_column_dtypes_and_positions(twin: ScanKernels) -> None:
    buf = batch([record(0, key=b"abc", value=b"hello")])
    result = scan_batches(buf, kernels=twin)

    assert {name: getattr(result, name).dtype.str for name in (
        "offset", "timestamp", "key_pos", "key_len", "value_pos", "value_len", "headers_pos",
        "headers_count", "arena", "batch")} == {
        "offset": "<i8", "timestamp": "<i8", "key_pos": "<i8", "key_len": "<i4", "value_pos": "<i8",
        "value_len": "<i4", "headers_pos": "<i8", "headers_count": "<i4", "arena": "<i2", "batch": "<i4"}
    key_pos, value_pos = int(result.key_pos[0]), int(result.value_pos[0])
    assert buf[key_pos:key_pos + 3] == b"abc" and buf[value_pos:value_pos + 5] == b"hello"
    assert int(result.headers_pos[0]) == len(buf)  # no headers: they start (and end) at the record end


def test_empty_batches_are_listed_without_rows(twin: ScanKernels) -> None:
    empty = batch([], base_offset=5, base_timestamp=-1, max_timestamp=TS, last_offset_delta=3)
    compressed_empty = batch([], base_offset=9, attributes=ZSTD, count=0)
    buf = batch([record(0)]) + empty + compressed_empty + batch([record(0)], base_offset=13)

    result = scan_batches(buf, kernels=twin)

    assert len(empty) == 61
    assert result.batch_count == 4
    assert result.batch_records_count.tolist() == [1, 0, 0, 1]
    assert result.batch_last_offset.tolist() == [0, 8, 9, 13]
    assert result.offset.tolist() == [0, 13]
    assert result.batch.tolist() == [0, 3]


def test_partial_tail_stops_at_last_complete_batch(twin: ScanKernels) -> None:
    head = kp_batch(sample_rows(3)) + kp_batch(sample_rows(2), base_offset=3)
    tail = kp_batch(sample_rows(4), base_offset=5)
    for cut in (1, 11, 12, 16, 17, 60, 61, len(tail) - 1):
        result = scan_batches(head + tail[:cut], kernels=twin)

        assert result.end_position == len(head)
        assert result.offset.tolist() == [0, 1, 2, 3, 4]


def test_empty_range_gives_empty_result(twin: ScanKernels) -> None:
    for buf in (b"", batch([record(0)])[:40]):
        result = scan_batches(buf, kernels=twin)

        assert (result.record_count, result.batch_count, result.end_position) == (0, 0, 0)
        assert result.offset.dtype == np.int64


def test_start_and_end_select_whole_batches(twin: ScanKernels) -> None:
    batches = [batch([record(0), record(1)], base_offset=2 * i) for i in range(4)]
    buf = b"".join(batches)
    start, end = len(batches[0]), 3 * len(batches[0]) + 5

    result = scan_batches(buf, start, end, kernels=twin)

    assert result.offset.tolist() == [2, 3, 4, 5]
    assert result.batch_position.tolist() == [start, 2 * start]
    assert result.end_position == 3 * start


def test_range_outside_buffer_is_rejected() -> None:
    with pytest.raises(ValueError, match="outside the buffer"):
        scan_batches(b"abc", 2, 5)
    with pytest.raises(ValueError, match="outside the buffer"):
        scan_batches(b"abc", -1)


def test_every_buffer_type_gives_the_same_result(twin: ScanKernels, tmp_path: Any) -> None:
    buf = kp_batch(sample_rows(6)) + batch([record(0, 0, b"x")], base_offset=6)
    path = tmp_path / "segment.log"
    path.write_bytes(buf)
    expected = columns(scan_batches(buf, kernels=twin))
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
        inputs = [bytearray(buf), memoryview(buf), np.frombuffer(buf, np.uint8).copy(), mapped]
        results = [columns(scan_batches(b, kernels=twin)) for b in inputs]
        del inputs
    assert all(r == expected for r in results)


def test_numpy_input_is_not_copied(twin: ScanKernels) -> None:
    array = np.frombuffer(batch([record(0)]), np.uint8).copy()

    result = scan_batches(array, kernels=twin)

    assert np.shares_memory(result.arenas[0], array)
    assert array.flags.writeable  # the caller's array is untouched


def test_non_byte_array_is_rejected() -> None:
    with pytest.raises(TypeError, match="uint8"):
        scan_batches(np.zeros(8, np.int64))


def test_twins_give_byte_identical_results() -> None:
    buf = (kp_batch(sample_rows(30)) + batch([record(0, 3)], base_offset=30, attributes=LOG_APPEND_TIME)
           + batch(base_offset=31, attributes=LZ4, count=2,
                   area=COMPRESSORS[LZ4](record(0, headers=[("h", None)]) + record(1, key=None)))
           + batch([], base_offset=33, base_timestamp=-1)
           + kp_batch(sample_rows(2), base_offset=34)[:30])

    python, compiled = (columns(scan_batches(buf, kernels=twin_kernels(p))) for p in (True, False))

    assert python == compiled
    assert python["record_count"] == 33


def test_concurrent_scans_in_threads_agree(twin: ScanKernels) -> None:
    buf = b"".join(kp_batch(sample_rows(50, seed=i), base_offset=50 * i) for i in range(20))
    expected = columns(scan_batches(buf, kernels=twin))

    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda _: columns(scan_batches(buf, kernels=twin)), range(8)))

    assert all(r == expected for r in results)


def test_active_implementation_follows_environment() -> None:
    code = "from tidelog.records import scan; print(scan.ACTIVE_IMPLEMENTATION)"
    env = dict(os.environ, TIDELOG_PURE_PYTHON="1")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)

    assert out.stdout.strip() == "python"
    if os.environ.get("TIDELOG_PURE_PYTHON") != "1":  # numba is installed here (see pyproject)
        assert ACTIVE_IMPLEMENTATION == "numba"


def test_missing_numba_falls_back_to_the_interpreted_twin() -> None:
    code = ("import sys; sys.modules['numba'] = None\n"  # makes `import numba` raise ImportError
            "from tidelog.records import scan\n"
            f"r = scan.scan_batches(bytes.fromhex('{batch([record(0, 0, b'k')]).hex()}'))\n"
            "print(scan.ACTIVE_IMPLEMENTATION, scan.gather_keys(r))")
    env = {key: value for key, value in os.environ.items() if key != "TIDELOG_PURE_PYTHON"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)

    assert out.stdout.strip() == "python [b'k']"


# --- CRC ------------------------------------------------------------------------------------

def test_verify_crc_accepts_valid_batches(twin: ScanKernels) -> None:
    buf = kp_batch(sample_rows(5)) + batch([record(0)], base_offset=5)

    assert scan_batches(buf, verify_crc=True, kernels=twin).record_count == 6


def test_verify_crc_names_the_corrupt_batch(twin: ScanKernels) -> None:
    first = kp_batch(sample_rows(5))
    second = bytearray(kp_batch(sample_rows(5), base_offset=5))
    second[-2] ^= 0x01  # inside a value: parses fine, CRC does not match
    buf = first + bytes(second)

    assert scan_batches(buf, kernels=twin).record_count == 10  # no CRC check by default
    with pytest.raises(CorruptRecordError, match="stored crc") as err:
        scan_batches(buf, verify_crc=True, kernels=twin)
    assert (err.value.position, err.value.offset) == (len(first), 5)


def crc_ranges() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A random buffer and batch ranges of every size 21..120 (every tail length of the 8-byte
    steps), at odd positions."""
    data = np.random.default_rng(11).integers(0, 256, 10_000, dtype=np.uint8)
    data.flags.writeable = False
    size = np.arange(21, 121, dtype=np.int64)
    position = (np.arange(len(size), dtype=np.int64) * 97 + 3) % (len(data) - 120)
    return data, position, size


def test_batch_crcs_match_the_crc32c_library(twin: ScanKernels) -> None:
    data, position, size = crc_ranges()
    expected = [crc32c.crc32c(data[p + 21:p + n].tobytes()) for p, n in zip(position, size)]

    assert batch_crcs(data, position, size, kernels=twin).tolist() == expected


def test_batch_crcs_kernel_source_interpreted_matches_the_library() -> None:
    """The compiled twin runs _crc_kernels.batch_crcs with SSE4.2's crc32 in place of
    crc32c_u8/u64; their interpreted definitions (the specification) give the library's CRCs."""
    data, position, size = crc_ranges()
    out = [0] * len(position)
    _crc_kernels.batch_crcs(memoryview(data), position.tolist(), size.tolist(), out)

    assert out == [crc32c.crc32c(data[p + 21:p + n].tobytes()) for p, n in zip(position, size)]


def test_batch_crcs_of_a_real_batch_is_its_stored_crc() -> None:
    buf = kp_batch(sample_rows(5))

    assert batch_crcs(buf, np.array([0]), np.array([len(buf)])).tolist() == [RecordBatch(buf).crc]


@pytest.mark.parametrize("position, size", [(-1, 30), (0, 20), (9_990, 30)])
def test_batch_crcs_reject_ranges_outside_the_buffer(position: int, size: int) -> None:
    data, _, _ = crc_ranges()
    with pytest.raises(ValueError, match="outside the buffer"):
        batch_crcs(data, np.array([position]), np.array([size]))


# --- corruption -----------------------------------------------------------------------------

def bad_area(area: bytes, count: int) -> bytes:
    return batch(area=area, count=count, base_offset=50)


CORRUPT_BATCHES = {
    "records missing": (bad_area(record(0, value=b"v" * 20) + record(1, value=b"v" * 20), 3),
                        "ends before"),
    "trailing bytes": (bad_area(record(0) + record(1), 1), "bytes left"),
    "record past area": (bad_area(record(0) + varint(40) + b"\x00" * 10, 2), "ends inside a record"),
    "zero record length": (bad_area(varint(0) + b"\x00" * 6, 1), "record length"),
    "negative record length": (bad_area(varint(-3) + b"\x00" * 6, 1), "record length"),
    "fields shorter than length": (bad_area(varint(9) + record(0)[1:] + b"\x00", 1), "record length"),
    "fields longer than length": (bad_area(varint(5) + record(0)[1:], 1), "record length"),
    "key past record": (bad_area(varint(8) + b"\x00\x00\x00" + varint(50) + b"kkkk", 1), "key length"),
    "value past record": (bad_area(varint(8) + b"\x00\x00\x00" + varint(-1) + varint(20) + b"vvv", 1),
                          "value length"),
    "negative header count": (bad_area(varint(6) + b"\x00\x00\x00\x01\x01" + varint(-2), 1),
                              "negative record header count"),
    "null header key": (bad_area(varint(8) + b"\x00\x00\x00\x01\x01" + varint(1) + varint(-1) + b"\x01", 1),
                        "record header"),
    "header past record": (bad_area(varint(8) + b"\x00\x00\x00\x01\x01" + varint(1) + varint(9) + b"h", 1),
                           "record header"),
    "varint too long": (bad_area(b"\xff" * 5 + b"\x00" * 10, 1), "varint longer"),
    "varlong too long": (bad_area(varint(16) + b"\x00" + b"\xff" * 10 + b"\x00" * 5, 1), "varint longer"),
    "count beyond area": (bad_area(record(0), 1000), "declares 1000 records"),
    "negative count": (bad_area(record(0), -1), "declares -1 records"),
    "offset overflow": (batch([record(1)], base_offset=INT64_MAX, last_offset_delta=0),
                        "offset delta overflows"),
    "last offset overflow": (batch([record(0)], base_offset=INT64_MAX, last_offset_delta=1),
                             "offset delta overflows"),
    "timestamp overflow": (batch([record(0, 1)], base_timestamp=INT64_MAX), "timestamp delta overflows"),
    "legacy magic": (batch([record(0)], magic=1), "magic is not 2"),
    "batch shorter than v2 header": (batch([record(0)])[:8] + struct.pack(">i", 30) + b"\x00\x00\x00\x00\x02"
                                     + b"\x00" * 30, "batch length"),
    "batch length below 14": (struct.pack(">qi", 50, 13) + b"\x00" * 40, "batch length"),
    "garbage compressed data": (batch(attributes=GZIP, count=1, area=b"not gzip", base_offset=50),
                                "gzip"),
    "garbage inside compressed records": (batch(attributes=ZSTD, count=2, base_offset=50,
                                                area=COMPRESSORS[ZSTD](record(0) + varint(40) + b"\x00" * 6)),
                                          "ends inside a record"),
}


@pytest.mark.parametrize("case", list(CORRUPT_BATCHES))
def test_corrupt_batch_raises_naming_its_position(twin: ScanKernels, case: str) -> None:
    good = batch([record(0)], base_offset=0)
    bad, message = CORRUPT_BATCHES[case]

    with pytest.raises(CorruptRecordError, match=message) as err:
        scan_batches(good + bad, kernels=twin)

    assert err.value.position == len(good)
    assert err.value.offset == struct.unpack_from(">q", bad)[0]


def test_corrupt_record_error_gives_record_position(twin: ScanKernels) -> None:
    area = record(0) + record(1) + varint(8) + b"\x00\x00\x00" + varint(50) + b"kkkk"
    with pytest.raises(CorruptRecordError) as err:
        scan_batches(batch(area=area, count=3), kernels=twin)

    assert err.value.record_position == 2 * len(record(0))  # relative to the records area


def test_unknown_codec_is_a_corrupt_batch(twin: ScanKernels) -> None:
    good = batch([record(0)])
    with pytest.raises(CorruptRecordError, match="codec id 6") as err:
        scan_batches(good + batch([record(0)], attributes=6, base_offset=1), kernels=twin)

    assert (err.value.position, err.value.offset) == (len(good), 1)
    assert isinstance(err.value.__cause__, UnsupportedCompressionError)


# --- properties -----------------------------------------------------------------------------

RECORD_FIELDS = st.tuples(
    st.integers(0, (1 << 31) - 1),  # offset delta
    st.integers(-1 << 50, 1 << 50),  # timestamp delta
    st.none() | st.binary(max_size=20),  # key
    st.none() | st.binary(max_size=150),  # value
    st.lists(st.tuples(st.sampled_from(["", "a", "\u00e9t\u00e9", "trace-id"]),
                       st.none() | st.binary(max_size=6)), max_size=3),  # headers
)


@st.composite
def batch_specs(draw: st.DrawFn) -> tuple[bytes, list[Row]]:
    """A valid batch (any codec, timestamp type, delete horizon) and the rows it must scan to."""
    fields = draw(st.lists(RECORD_FIELDS, max_size=8))
    base_offset = draw(st.integers(0, 1 << 62))
    base_ts, max_ts = draw(st.integers(-1 << 50, 1 << 50)), draw(st.integers(-1 << 50, 1 << 50))
    attributes = draw(st.sampled_from([NONE, GZIP, SNAPPY, LZ4, ZSTD])) | draw(
        st.sampled_from([0, LOG_APPEND_TIME, DELETE_HORIZON, TRANSACTIONAL]))
    area = b"".join(record(*f) for f in fields)
    if attributes & 0x07 and fields:
        area = COMPRESSORS[attributes & 0x07](area)
    rows = [(base_offset + delta, max_ts if attributes & LOG_APPEND_TIME else base_ts + ts_delta, key,
             value, headers) for delta, ts_delta, key, value, headers in fields]
    return batch(area=area, count=len(fields), base_offset=base_offset, attributes=attributes,
                 base_timestamp=base_ts, max_timestamp=max_ts), rows


@pytest.mark.parametrize("pure", [True, False], ids=["python", "numba"])
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(specs=st.lists(batch_specs(), max_size=4), tail=st.binary(max_size=40))
def test_random_valid_batches_round_trip(pure: bool, specs: list[tuple[bytes, list[Row]]],
                                         tail: bytes) -> None:
    buf = b"".join(b for b, _ in specs)
    tail = tail if len(tail) < 17 else struct.pack(">qi", 0, 1 << 20) + tail[12:]  # an unfinished batch

    result = scan_batches(buf + tail, verify_crc=True, kernels=twin_kernels(pure))

    assert rows_of(result) == [row for _, rows in specs for row in rows]
    assert result.end_position == len(buf)


@pytest.mark.parametrize("codec", [NONE, ZSTD], ids=["plain", "zstd"])
def test_every_single_byte_corruption_is_an_error_or_a_result_alike_in_both_twins(codec: int) -> None:
    """Corruption loop: each byte of the last batch set to boundary values. The batch (or, when
    compressed, its decompressed records) ends exactly where the buffer ends, so an interpreted
    read past the records area raises IndexError instead of passing silently."""
    area = record(0, 0, b"key", b"v" * 130, [("h", b"1"), ("x", None)]) + record(1, -70, None, None)
    area += record(2, 1 << 35, b"", b"", [("", b"")])
    last = batch(area=COMPRESSORS[codec](area) if codec else area, count=3, attributes=codec)
    head = batch([record(0)])
    for position in range(len(last)):
        for byte in (0x00, 0x01, 0x7F, 0x80, 0xFF):
            buf = head + mutated(last, [(position, byte)])
            assert outcome(buf, twin_kernels(False)) == outcome(buf, twin_kernels(True))
    for position in range(len(area)) if codec else ():  # corrupt the records inside the stream
        for byte in (0x01, 0x80, 0xFF):
            inner = mutated(area, [(position, byte)])
            buf = head + batch(area=COMPRESSORS[codec](inner), count=3, attributes=codec)
            assert outcome(buf, twin_kernels(False)) == outcome(buf, twin_kernels(True))


def mutated(data: bytes, edits: list[tuple[int, int]]) -> bytes:
    out = bytearray(data)
    for position, byte in edits:
        if out:
            out[position % len(out)] = byte
    return bytes(out)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=st.lists(batch_specs(), min_size=1, max_size=3),
       edits=st.lists(st.tuples(st.integers(0, 1 << 16), st.integers(0, 255)), min_size=1, max_size=6),
       garbage=st.binary(max_size=120), cut=st.integers(0, 1 << 16))
def test_garbage_never_crashes_and_twins_agree(spec: list[tuple[bytes, list[Row]]],
                                               edits: list[tuple[int, int]], garbage: bytes,
                                               cut: int) -> None:
    valid = b"".join(b for b, _ in spec)
    for buf in (mutated(valid, edits), valid[:cut % (len(valid) + 1)] + garbage, garbage):
        python = outcome(buf, twin_kernels(True))  # interpreted: an out-of-range read raises IndexError
        assert outcome(buf, twin_kernels(False)) == python


# --- summarize_batch_records: the append path's per-batch summary --------------------------------

def test_summary_reports_timestamps_keys_and_offset_order(twin: ScanKernels) -> None:
    area = b"".join([record(0, 5, key=None), record(1, -3), record(2, 9, key=None), record(3, 0)])
    summary = summarize_batch_records(RecordBatch(batch([], area=area, count=4)), kernels=twin)
    assert summary == RecordsSummary(4, TS - 3, TS + 9, 2, 0, True)


def test_summary_ignores_minus_one_timestamps_for_the_minimum(twin: ScanKernels) -> None:
    area = record(0, 0) + record(1, 0)
    summary = summarize_batch_records(RecordBatch(batch([], area=area, count=2, base_timestamp=-1)), kernels=twin)
    assert (summary.min_timestamp, summary.max_timestamp) == (2**63 - 1, -1)


def test_summary_of_log_append_time_batch_skips_timestamps(twin: ScanKernels) -> None:
    summary = summarize_batch_records(RecordBatch(batch([record(0, 7)], attributes=LOG_APPEND_TIME)), kernels=twin)
    assert (summary.count, summary.max_timestamp) == (1, -1)


def test_summary_flags_offset_deltas_out_of_sequence(twin: ScanKernels) -> None:
    summary = summarize_batch_records(RecordBatch(batch([record(0), record(2)])), kernels=twin)
    assert not summary.sequential_offsets


@pytest.mark.parametrize("codec", [GZIP, SNAPPY, LZ4, ZSTD])
def test_summary_decompresses_compressed_batches(twin: ScanKernels, codec: int) -> None:
    area = b"".join(record(i, i, key=None if i == 3 else b"k") for i in range(10))
    summary = summarize_batch_records(RecordBatch(batch([], area=COMPRESSORS[codec](area), count=10, attributes=codec)), kernels=twin)
    assert summary == RecordsSummary(10, TS, TS + 9, 1, 3, True)


def test_summary_of_a_corrupt_record_names_batch_and_record_position(twin: ScanKernels) -> None:
    good = record(0)
    data = b"\x00" * 32 + batch([], area=good + b"\x7f\x00", count=2)
    with pytest.raises(CorruptRecordError) as raised:
        summarize_batch_records(RecordBatch(memoryview(data)[32:]), 32, kernels=twin)
    assert raised.value.position == 32 and raised.value.record_position == len(good)


@settings(max_examples=100, deadline=None)
@given(st.binary(min_size=0, max_size=200), st.integers(min_value=0, max_value=40))
def test_summary_twins_agree_on_any_records_area(area: bytes, count: int) -> None:
    data = batch([], area=area, count=count)
    outcomes = []
    for pure in (True, False):
        try:
            outcomes.append(summarize_batch_records(RecordBatch(data), kernels=twin_kernels(pure)))
        except CorruptRecordError as e:
            outcomes.append(("error", e.message, e.context.get("record_position")))
    assert outcomes[0] == outcomes[1]


def test_stop_at_legacy_stops_before_a_v0_v1_entry_instead_of_raising() -> None:
    """The cleaner reads v2 runs between legacy entries with one scan each."""
    from tidelog.records import BatchBuilder

    legacy = BatchBuilder(magic=1, base_offset=1)
    legacy.append(1, TS, b"k", b"v")
    v2 = batch([record(0)])
    data = v2 + legacy.build() + batch([record(0)], base_offset=2)
    with pytest.raises(CorruptRecordError, match="magic is not 2"):
        scan_batches(data)
    first = scan_batches(data, stop_at_legacy=True)
    assert (first.batch_count, first.end_position, first.stopped_at_legacy) == (1, len(v2), True)
    rest = scan_batches(data, len(data) - len(v2), stop_at_legacy=True)
    assert (rest.batch_count, rest.stopped_at_legacy) == (1, False)
    garbage = v2 + b"\x00" * 16 + b"\x07" + b"\x00" * 60
    with pytest.raises(CorruptRecordError):
        scan_batches(garbage, stop_at_legacy=True)
