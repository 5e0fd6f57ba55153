"""Finding batches in a ``.log`` buffer: read_batch_at / iter_batches (Kafka FileLogInputStream rules)."""

from __future__ import annotations

import struct

import pytest

from tidelog.errors import CorruptRecordError
from tidelog.records import (
    CompressionType,
    LegacyBatch,
    RecordBatch,
    TimestampType,
    build_batch,
    build_empty_batch,
    iter_batches,
    read_batch_at,
)


def _log() -> tuple[bytes, list[int]]:
    """A v2 batch, a gzip v2 batch, a v1 wrapper, a v0 message, an empty batch; and their positions."""
    parts = [
        build_batch([(b"a", b"1"), (b"b", b"2")], base_offset=0),
        build_batch([(b"c", b"3")] * 3, base_offset=2, compression=CompressionType.GZIP),
        build_batch([(b"d", b"4"), (b"e", b"5")], base_offset=5, magic=1, compression=CompressionType.SNAPPY),
        build_batch([(b"f", b"6")], base_offset=7, magic=0),
        build_empty_batch(base_offset=8, last_offset_delta=1, max_timestamp=5, timestamp_type=TimestampType.CREATE_TIME,
                          producer_id=3, producer_epoch=0, base_sequence=4, is_transactional=False, is_control=False),
    ]
    positions = [sum(len(p) for p in parts[:i]) for i in range(len(parts))]
    return b"".join(parts), positions


def test_iter_batches_yields_every_batch_with_its_position() -> None:
    log, positions = _log()
    found = list(iter_batches(log))
    assert [pos for pos, _ in found] == positions
    assert [type(b) for _, b in found] == [RecordBatch, RecordBatch, LegacyBatch, LegacyBatch, RecordBatch]
    assert [(b.base_offset, b.last_offset) for _, b in found] == [(0, 1), (2, 4), (5, 6), (7, 7), (8, 9)]
    assert all(b.is_valid() for _, b in found)


def test_iter_batches_from_position_and_up_to_end() -> None:
    log, positions = _log()
    found = list(iter_batches(log, positions[1], end=positions[3]))
    assert [pos for pos, _ in found] == positions[1:3]


@pytest.mark.parametrize("cut", [1, 16, 17, 30, 69])
def test_partial_tail_ends_iteration_without_error(cut: int) -> None:
    log, positions = _log()
    truncated = log[:positions[1] + cut]
    assert [pos for pos, _ in iter_batches(truncated)] == [0]
    assert read_batch_at(truncated, positions[1]) is None


def test_end_of_buffer_returns_none() -> None:
    log, _ = _log()
    assert read_batch_at(log, len(log)) is None
    assert list(iter_batches(b"")) == []


def test_zero_filled_tail_is_corrupt_at_its_first_byte() -> None:
    log, _ = _log()
    with pytest.raises(CorruptRecordError, match="Record size 0 is smaller than the minimum") as err:
        list(iter_batches(log + bytes(4096)))
    assert err.value.position == len(log)


def test_length_below_fourteen_is_corrupt_even_when_batch_would_run_past_end() -> None:
    buf = struct.pack(">qiib", 0, 13, 0, 2)
    with pytest.raises(CorruptRecordError, match="Record size 13") as err:
        read_batch_at(b"x" * 5 + buf, 5)
    assert err.value.position == 5


def test_unknown_magic_is_corrupt() -> None:
    log = bytearray(_log()[0])
    log[16] = 3
    with pytest.raises(CorruptRecordError, match="invalid magic 3") as err:
        read_batch_at(log, 0)
    assert err.value.position == 0


def test_v2_batch_shorter_than_header_is_corrupt() -> None:
    buf = struct.pack(">qiib", 0, 30, 0, 2) + bytes(26)
    with pytest.raises(CorruptRecordError, match="smaller than the minimum allowed overhead 61"):
        read_batch_at(buf, 0)


def test_v1_message_shorter_than_overhead_is_corrupt() -> None:
    buf = struct.pack(">qiIbb", 0, 16, 0, 1, 0) + bytes(10)
    with pytest.raises(CorruptRecordError, match="v1 message"):
        read_batch_at(buf, 0)


def test_legacy_message_with_inconsistent_lengths_is_corrupt_with_position() -> None:
    message = bytearray(build_batch([(b"k", b"v")], magic=0))
    struct.pack_into(">i", message, 18, 100)  # key length past the message
    with pytest.raises(CorruptRecordError) as err:
        read_batch_at(bytes(message), 0)
    assert err.value.position == 0


def test_read_batch_does_not_check_crc() -> None:
    log = bytearray(_log()[0])
    log[-1] ^= 0xFF
    batch = read_batch_at(log, _log()[1][4])
    assert batch is not None and not batch.is_valid()


def test_batches_read_from_a_memoryview_do_not_copy() -> None:
    log = bytearray(_log()[0])
    _, batch = next(iter_batches(memoryview(log)))
    assert batch.buffer.obj is log
