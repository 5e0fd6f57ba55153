"""Columnar segment recovery against its specification, the batch-by-batch loop.

``LogSegment.recover`` (``segment_recovery.recover``) checks the leading run of v2 batches with
one header walk and one CRC pass, then hands the rest to ``_recover_batches_one_by_one``. For
random segments (v2 batches of varying sizes and epochs, legacy entries mixed in, flipped bytes,
cut tails, bad size fields, offsets outside the segment's range or past int64, or going back)
both must give the same result, the same files, the same segment state and the same warnings as
recovering with the loop alone.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from storage_helpers import batch

from tidelog.records import scan
from tidelog.records.legacy import encode_legacy_message
from tidelog.storage import files, segment_recovery
from tidelog.storage.log_config import SegmentConfig
from tidelog.storage.segment import LogSegment
from tidelog.storage.segment_recovery import _RecoveryState
from tidelog.testing import FakeClock

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1


def _loop_only(segment: LogSegment) -> tuple[_RecoveryState, None]:
    return segment_recovery._recover_batches_one_by_one(segment, _RecoveryState(segment.base_offset)), None


@contextmanager
def _warnings() -> Iterator[list[str]]:
    messages: list[str] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = lambda record: messages.append(record.getMessage())  # type: ignore[method-assign]
    logger = logging.getLogger("tidelog.storage.segment_recovery")
    logger.addHandler(handler)
    try:
        yield messages
    finally:
        logger.removeHandler(handler)


def _recover(dir: Path, base: int, data: bytes, *, loop: bool, pure: bool) -> dict[str, Any]:
    dir.mkdir(parents=True)
    files.log_file(dir, base).write_bytes(data)
    config = SegmentConfig(index_interval_bytes=100, max_index_size=4096, init_file_size=0, preallocate=False)
    seg = LogSegment.open(dir, base, config, FakeClock(), file_already_exists=True)
    patches = [mock.patch.object(segment_recovery, "_recover_batches_columnar", _loop_only)] if loop else []
    if pure:
        patches.append(mock.patch.object(scan, "_ACTIVE", scan.get_kernels(True)))
    with _warnings() as warnings:
        for p in patches:
            p.start()
        try:
            result = seg.recover()
        except Exception as e:  # noqa: BLE001 - both paths must fail alike (offsets that go backwards)
            seg.close_handlers()
            return {"error": (type(e), str(e).replace(str(dir), "<dir>")), "log": files.log_file(dir, base).read_bytes(),
                    "warnings": [w.replace(str(dir), "<dir>") for w in warnings]}
        finally:
            for p in patches:
                p.stop()
    state = {
        "result": result,
        "size": seg.size,
        "next_offset": seg.read_next_offset(),
        "max_timestamp": seg.max_timestamp_and_offset_so_far,
        "rolling": seg._rolling_based_timestamp,
        "bytes_since_index": seg._bytes_since_last_index_entry,
        "warnings": [w.replace(str(dir), "<dir>") for w in warnings],
    }
    seg.close()
    for name, path in (("log", files.log_file(dir, base)), ("index", files.offset_index_file(dir, base)),
                       ("timeindex", files.time_index_file(dir, base))):
        state[name] = path.read_bytes()
    return state


@st.composite
def segments(draw: st.DrawFn) -> tuple[int, bytes]:
    base = draw(st.sampled_from([0, 40, 2**40]))
    offset = base
    entries: list[bytes] = []
    for _ in range(draw(st.integers(0, 30))):
        if draw(st.integers(0, 9)) == 0:
            magic = draw(st.integers(0, 1))
            entries.append(encode_legacy_message(offset, magic, 0, 1000 + offset, b"k", b"v" * draw(st.integers(0, 20))))
            offset += 1
            continue
        count = draw(st.integers(1, 4))
        values = [b"x" * draw(st.sampled_from([0, 1, 10, 300])) for _ in range(count)]
        entries.append(batch(*values, base_offset=offset, timestamp=draw(st.integers(-1, 5000)),
                             partition_leader_epoch=draw(st.sampled_from([-1, 0, 0, 1, 2]))))
        offset += count + draw(st.sampled_from([0, 0, 3]))
    data = bytearray(b"".join(entries))
    starts = [sum(len(e) for e in entries[:i]) for i in range(len(entries))]
    for _ in range(draw(st.integers(0, 2))):
        kind = draw(st.sampled_from(["flip", "size", "offset", "back", "zeros", "garbage"]))
        if kind == "flip" and data:
            at = draw(st.integers(0, len(data) - 1))
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif kind == "size" and starts:
            at = draw(st.sampled_from(starts))
            length = draw(st.one_of(st.integers(-5, 70), st.integers(0, len(data) + 100)))
            data[at + 8:at + 12] = struct.pack(">i", length)
        elif kind == "offset" and starts:
            # baseOffset is outside the CRC: the batch stays valid but leaves the segment's range.
            at = draw(st.sampled_from(starts))
            value = draw(st.sampled_from([base - 3, base + INT32_MAX, base + INT32_MAX - 1, INT64_MAX - 1, -(2**63)]))
            data[at:at + 8] = struct.pack(">q", value)
        elif kind == "back" and len(starts) > 1:
            # Still in the segment's range and valid, but not above the batch before it.
            at = draw(st.sampled_from(starts[1:]))
            data[at:at + 8] = struct.pack(">q", base + draw(st.integers(0, max(offset - base - 1, 0))))
        elif kind == "zeros":
            data += bytes(draw(st.integers(1, 200)))  # a preallocated tail
        elif kind == "garbage":
            data += draw(st.binary(min_size=1, max_size=80))
    if draw(st.booleans()) and data:
        del data[draw(st.integers(0, len(data))):]  # a torn tail
    return base, bytes(data)


@settings(max_examples=300, deadline=None)
@given(segment=segments(), pure=st.booleans())
def test_columnar_recovery_equals_the_batch_by_batch_loop(
    tmp_path_factory: pytest.TempPathFactory, segment: tuple[int, bytes], pure: bool
) -> None:
    base, data = segment
    root = tmp_path_factory.mktemp("recover")
    expected = _recover(root / "loop", base, data, loop=True, pure=pure)
    actual = _recover(root / "columnar", base, data, loop=False, pure=pure)
    assert actual == expected


def test_recovery_warning_names_the_position_and_the_crc_error(tmp_path: Path) -> None:
    first, second = batch(b"a", base_offset=0), batch(b"b", base_offset=1)
    data = bytearray(first + second + batch(b"c", base_offset=2))
    data[len(first) + len(second) - 1] ^= 0xFF  # the second batch's last byte
    state = _recover(tmp_path / "seg", 0, bytes(data), loop=False, pure=False)
    assert state["result"].truncated_bytes == len(data) - len(first)
    assert state["warnings"][0].startswith(f"found invalid data in <dir>/{files.log_file(Path(), 0).name} at byte {len(first)}: ")
    assert "Record is corrupt (stored crc" in state["warnings"][0]


@pytest.mark.parametrize("loop", [False, True])
def test_a_batch_whose_offsets_go_back_ends_the_valid_data(tmp_path: Path, loop: bool) -> None:
    """A v2 batch's base offset is outside its CRC: damaged to an offset at or below the batch
    before it (but in the segment's range), the batch passes every other check. Recovery keeps
    what comes before it and truncates there, as for a CRC mismatch (Kafka's recovery keeps it,
    then the index rebuild fails and the loader empties the whole segment)."""
    batches = [batch(b"a", b"b", base_offset=0), batch(b"c", base_offset=2), batch(b"d", base_offset=3),
               batch(b"e", base_offset=4)]
    data = bytearray(b"".join(batches))
    third = len(batches[0]) + len(batches[1])
    data[third:third + 8] = struct.pack(">q", 1)  # inside the first batch's range
    state = _recover(tmp_path / "seg", 0, bytes(data), loop=loop, pure=False)
    assert state["result"].truncated_bytes == len(data) - third
    assert state["log"] == bytes(data[:third]) and state["next_offset"] == 3
    assert state["warnings"][0].startswith(f"found invalid data in <dir>/{files.log_file(Path(), 0).name} at byte {third}: "
                                           "batch offsets go back")
    assert "offset=1, expected_at_least=3" in state["warnings"][0]
