"""The leader's check-and-write kernel (``_scan_kernels.append_produced_batch``): compiled (libc
``pwrite`` and ``clock_gettime`` as intrinsics, see records/_write_intrinsics.py) and interpreted
(its specification: ``os.pwrite``, ``time.time_ns``) answer the same and write the same bytes."""

from __future__ import annotations

import errno
import os
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidelog.records import BatchBuilder, CompressionType, write_crc
from tidelog.records import _scan_kernels as k
from tidelog.records.scan import ACTIVE_IMPLEMENTATION, produced_batch_appender

INT64_MAX = 2**63 - 1
NOW = 1_700_000_000_000
RULES = (1048588, False, INT64_MAX, 3600000)  # max.message.bytes, compact, before, after

Append = Callable[..., tuple[int, int, int, int]]


def _appenders() -> list[Any]:
    kernels: list[Any] = [pytest.param(k.append_produced_batch, id="python")]
    compiled = produced_batch_appender()
    if compiled is not None:
        kernels.append(pytest.param(compiled, id="numba"))
    return kernels


def _batch(*values: bytes | None, ts: int = NOW, **builder: Any) -> bytes:
    b = BatchBuilder(**builder)
    for i, value in enumerate(values):
        b.append(i, ts, b"k", value)
    return b.build()


def _append(kernel: Append, path: Path, data: bytes, *, now: int = NOW, relative_offset: int = 0,
            max_timestamp_limit: int = INT64_MAX, position: int = 0, base_offset: int = 7,
            leader_epoch: int = 3, rules: tuple[int, bool, int, int] = RULES) -> tuple[tuple[int, ...], bytes]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        result = kernel(*rules, data, now, relative_offset, max_timestamp_limit, fd, position, base_offset, leader_epoch)
        return tuple(result), os.pread(fd, 1 << 16, 0)
    finally:
        os.close(fd)


def test_the_compiled_kernel_exists_where_numba_does() -> None:
    assert (produced_batch_appender() is None) == (ACTIVE_IMPLEMENTATION == "python")


@pytest.mark.parametrize("kernel", _appenders())
def test_a_common_batch_is_written_with_offset_length_and_epoch_patched(kernel: Append, tmp_path: Path) -> None:
    data = _batch(b"a", b"bb", ts=NOW - 5)
    result, written = _append(kernel, tmp_path / "f", data, position=10, base_offset=1 << 40, leader_epoch=-1,
                              relative_offset=2**31 - 2)  # the last offset's is 2**31 - 1: still an int32
    assert result == (k.PRODUCED_OK, 1, NOW - 5, len(data))
    assert written[:10] == bytes(10)  # a hole: the write went to position 10
    assert written[10:] == struct.pack(">qii", 1 << 40, len(data) - 12, -1) + data[16:]


@pytest.mark.parametrize("kernel", _appenders())
@pytest.mark.parametrize("case,expected_status", [
    ({"data": _batch(b"v", compression=CompressionType.GZIP)}, k.PRODUCED_COMPRESSED),
    ({"data": _batch(b"v", producer_id=5, producer_epoch=0, base_sequence=0)}, k.PRODUCED_IDEMPOTENT),
    ({"data": _batch(b"v", producer_id=5, producer_epoch=0, base_sequence=0, is_transactional=True)},
     k.PRODUCED_OTHER),
    ({"data": _batch(b"v" * 5000)}, k.PRODUCED_OTHER),  # above WRITE_BUFFER_BYTES
    ({"leader_epoch": 2**31}, k.PRODUCED_OTHER),  # no int32
    ({"relative_offset": 2**31 - 2}, k.PRODUCED_ROLL),  # three records: the last at 2**31 + 0
    ({"max_timestamp_limit": NOW - 1}, k.PRODUCED_ROLL),
    ({"now": NOW - 3600001}, k.PRODUCED_OTHER),  # a timestamp too far ahead of the broker time
    ({"now": k.NOW_FROM_CLOCK}, k.PRODUCED_OTHER),  # the real clock is years after NOW: too far behind
])
def test_nothing_is_written_unless_the_batch_passes(kernel: Append, tmp_path: Path, case: dict[str, Any],
                                                    expected_status: int) -> None:
    arguments = {"data": _batch(b"a", b"b", b"c"), "rules": (1048588, False, 1000, 3600000)} | case
    result, written = _append(kernel, tmp_path / "f", **arguments)
    assert result[0] == expected_status
    assert result[3] == 0 and written == b""


@pytest.mark.parametrize("kernel", _appenders())
def test_the_system_clock_is_read_when_asked(kernel: Append, tmp_path: Path) -> None:
    import time

    data = _batch(b"v", ts=time.time_ns() // 1_000_000)  # within a second of the kernel's clock
    result, _ = _append(kernel, tmp_path / "f", data, now=k.NOW_FROM_CLOCK, rules=(1048588, False, 60_000, 60_000))
    assert result[0] == k.PRODUCED_OK


@pytest.mark.parametrize("kernel", _appenders())
def test_a_failed_write_returns_minus_errno(kernel: Append, tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"")
    fd = os.open(path, os.O_RDONLY)
    try:
        result = kernel(*RULES, _batch(b"v"), NOW, 0, INT64_MAX, fd, 0, 0, 0)
    finally:
        os.close(fd)
    assert result[0] == k.PRODUCED_OK and result[3] == -errno.EBADF


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.binary(max_size=40), min_size=1, max_size=6), st.integers(0, 10_000), st.integers(0, 255),
       st.booleans(), st.integers(-5, 2**40), st.sampled_from([0, 5, -1, 2**31 - 1]))
def test_twins_agree_on_any_damage(tmp_path_factory: pytest.TempPathFactory, values: list[bytes], where: int,
                                   xor: int, fix_crc: bool, base_offset: int, leader_epoch: int) -> None:
    data = bytearray(_batch(*values))
    at = where % len(data)
    data[at] ^= xor
    if fix_crc and at >= 21:  # past the CRC: the records are what the kernel then finds wrong
        write_crc(data)
    root = tmp_path_factory.mktemp("twins")
    outcomes = {_append(kernel.values[0], root / kernel.id, bytes(data), base_offset=base_offset,
                        leader_epoch=leader_epoch) for kernel in _appenders()}
    assert len(outcomes) == 1
