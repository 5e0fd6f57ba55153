"""The leader's one-pass kernel check of a produced batch (``_scan_kernels.check_produced_batch``)
and its helpers, in both twins: compiled and interpreted give the same answer on any bytes."""

from __future__ import annotations

import pytest
from crc32c import crc32c
from hypothesis import given, settings
from hypothesis import strategies as st

from tidelog.records import BatchBuilder, CompressionType, write_crc
from tidelog.records import _scan_kernels as k
from tidelog.records.scan import get_kernels

INT64_MAX, INT64_MIN = 2**63 - 1, -(2**63)
NOW = 1_700_000_000_000
RULES = (1048588, False, INT64_MAX, 3600000)  # max.message.bytes, compact, before, after


def _twins() -> list[object]:
    twins = [get_kernels(True)]
    try:
        twins.append(get_kernels(False))
    except ImportError:  # numba absent: the interpreted twin only
        pass
    return twins


def _batch(*values: bytes | None, key: bytes | None = b"k", ts: int = NOW, **builder: object) -> bytes:
    b = BatchBuilder(**builder)  # type: ignore[arg-type]
    for i, value in enumerate(values):
        b.append(i, ts, key, value)
    return b.build()


def _check(twin: object, data: bytes, *, crc_checked: bool = False, rules: tuple = RULES, now: int = NOW) -> tuple:
    max_bytes, compact, before, after = rules
    return twin.check_produced_batch(data, len(data), crc_checked, max_bytes, compact, before, after, now)  # type: ignore[attr-defined]


@given(st.binary(max_size=300), st.integers(0, 40))
def test_crc32c_of_matches_the_crc32c_library(data: bytes, start: int) -> None:
    start = min(start, len(data))
    assert k.crc32c_of(data, start, len(data)) == crc32c(data[start:])


@given(st.integers(INT64_MIN, INT64_MAX), st.integers(INT64_MIN, INT64_MAX), st.integers(0, INT64_MAX))
def test_difference_exceeds_is_exact_without_overflow(a: int, b: int, limit: int) -> None:
    assert k.difference_exceeds(a, b, limit) == (a - b > limit)


@pytest.mark.parametrize("twin", _twins(), ids=lambda t: t.name)  # type: ignore[attr-defined]
def test_a_common_batch_passes_with_its_offsets_and_timestamp(twin: object) -> None:
    data = _batch(b"a", b"b", b"c", ts=NOW - 5)
    assert _check(twin, data) == (k.PRODUCED_OK, 2, NOW - 5, 3)


@pytest.mark.parametrize("twin", _twins(), ids=lambda t: t.name)  # type: ignore[attr-defined]
@pytest.mark.parametrize("spoil", [
    lambda d: d[:8] + b"\x00\x00\x00\x01" + d[12:],  # batch length differs from the buffer
    lambda d: b"\x00" * 7 + b"\x01" + d[8:],  # base offset 1
    lambda d: d[:21] + bytes([d[21] ^ 0x01]) + d[22:],  # CRC mismatch
    lambda d: d + b"\x00",  # trailing byte
])
def test_spoiled_batches_are_left_to_the_general_path(twin: object, spoil) -> None:  # type: ignore[no-untyped-def]
    assert _check(twin, spoil(_batch(b"v")))[0] == k.PRODUCED_OTHER


@pytest.mark.parametrize("twin", _twins(), ids=lambda t: t.name)  # type: ignore[attr-defined]
def test_rules_of_the_topic_are_applied(twin: object) -> None:
    keyless = _batch(b"v", key=None)
    assert _check(twin, keyless)[0] == k.PRODUCED_OK
    assert _check(twin, keyless, rules=(1048588, True, INT64_MAX, 3600000))[0] == k.PRODUCED_OTHER
    assert _check(twin, _batch(b"v", ts=NOW + 3600001))[0] == k.PRODUCED_OTHER
    assert _check(twin, _batch(b"v", ts=NOW - 1001), rules=(1048588, False, 1000, 3600000))[0] == k.PRODUCED_OTHER
    assert _check(twin, _batch(b"v", ts=INT64_MIN + 5), rules=(1048588, False, 1000, 3600000))[0] == k.PRODUCED_OTHER
    big = _batch(b"x" * 200)
    assert _check(twin, big, rules=(len(big) - 1, False, INT64_MAX, 3600000))[0] == k.PRODUCED_OTHER
    assert _check(twin, _batch(b"v", producer_id=5, producer_epoch=0, base_sequence=0))[0] == k.PRODUCED_IDEMPOTENT
    assert _check(twin, _batch(b"v", producer_id=5, producer_epoch=0, base_sequence=0,
                               is_transactional=True))[0] == k.PRODUCED_OTHER
    assert _check(twin, _batch(b"v", compression=CompressionType.LZ4))[0] == k.PRODUCED_COMPRESSED


@pytest.mark.parametrize("twin", _twins(), ids=lambda t: t.name)  # type: ignore[attr-defined]
def test_a_caller_checked_crc_is_not_checked_again(twin: object) -> None:
    data = bytearray(_batch(b"v"))
    data[17] ^= 0xFF  # stored CRC wrong: only the caller's own check would see it
    assert _check(twin, bytes(data), crc_checked=True)[0] == k.PRODUCED_OK
    assert _check(twin, bytes(data))[0] == k.PRODUCED_OTHER


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(max_size=30), min_size=1, max_size=5), st.integers(0, 10_000), st.integers(0, 255),
       st.booleans())
def test_twins_agree_on_any_damage(values: list[bytes], where: int, xor: int, fix_crc: bool) -> None:
    data = bytearray(_batch(*values))
    at = where % len(data)
    data[at] ^= xor
    if fix_crc and at >= 21:  # the CRC covers bytes 21..end: a good CRC sends the kernel on to the records
        write_crc(data)
    answers = {_check(twin, bytes(data)) for twin in _twins()}
    assert len(answers) == 1
