"""``_scan_kernels.walk_records``, the produced batch's fast record walk, against the general
decoder (``summarize_records``, the specification), in both twins, on any bytes: records of the
common shape, of every other shape (long and non-minimal varints, headers, null fields, huge
timestamp deltas, wrong lengths) and damaged ones. Then ``check_produced_batch``, which uses it,
against the same check forced onto the general decoder."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidelog import twins
from tidelog.records import BatchBuilder, write_crc
from tidelog.records import _crc_kernels
from tidelog.records import _scan_kernels as k
from tidelog.records.scan import get_kernels

INT64_MAX, INT64_MIN = 2**63 - 1, -(2**63)
NOW = 1_700_000_000_000
NO_LIMIT = (1 << 30, False, INT64_MAX, INT64_MAX)  # max.message.bytes, compact, before, after


def _compiled() -> dict[str, Any] | None:
    try:
        get_kernels(False)  # ImportError when numba is absent
    except ImportError:
        return None
    return twins.compile_functions({**vars(_crc_kernels), **vars(k)}, k.NUMBA_INLINED, k.NUMBA_COMPILED, k.NUMBA_OPTIONS)


COMPILED = _compiled()
WALKERS = [k.walk_records] + ([COMPILED["walk_records"]] if COMPILED else [])


def varint(n: int, pad: int = 0, *, bits: int = 64) -> bytes:
    """Zig-zag LEB128 of ``n`` with ``pad`` extra (non-minimal) continuation bytes."""
    raw = ((n << 1) ^ (n >> (bits - 1))) & ((1 << bits) - 1)
    out = bytearray()
    while True:
        out.append(raw & 0x7F)
        raw >>= 7
        if not raw:
            break
        out[-1] |= 0x80
    for _ in range(pad):
        out[-1] |= 0x80
        out.append(0)
    return bytes(out)


small = st.integers(-300, 10_000)
pads = st.sampled_from([0, 0, 0, 0, 1, 2, 5])  # 5: a varint one byte too long


@st.composite
def records(draw: st.DrawFn) -> tuple[bytes, bool]:
    """One record, often of the common shape, else anything the encoding allows (and some it does
    not); and whether it has the common shape (walk_records must take it)."""
    padded = draw(st.integers(0, 3)) == 0  # else every varint minimal: the common shape, most of the time

    def field(n: int, bits: int = 32) -> bytes:
        return varint(n, draw(pads) if padded else 0, bits=bits)

    key = draw(st.none() | st.binary(max_size=20))
    value = draw(st.none() | st.binary(max_size=150))
    ts = draw(st.sampled_from([0, 0, 1, 5000, -1]) | st.integers(-9000, 9000) | st.integers(INT64_MIN, INT64_MAX))
    headers = draw(st.lists(st.tuples(st.binary(max_size=4), st.none() | st.binary(max_size=4)), max_size=2))
    offset_delta = draw(small)
    body = bytearray([draw(st.integers(0, 255))])
    body += field(ts, 64) + field(offset_delta)
    body += field(-1 if key is None else len(key)) + (key or b"")
    body += field(-1 if value is None else len(value)) + (value or b"")
    body += field(len(headers))
    for hk, hv in headers:
        body += field(len(hk)) + hk + field(-1 if hv is None else len(hv)) + (hv or b"")
    junk = draw(st.sampled_from([b""] * 10 + [b"\x00", b"\x00\x01\x02"]))  # bytes the fields leave over
    body += junk
    wrong = draw(st.sampled_from([0] * 12 + [-2, -1, 1, 3]))
    common = (not padded and not junk and not wrong and -8192 <= ts < 8192 and -8192 <= offset_delta < 8192
              and len(body) >= k.MIN_PLAIN_LENGTH)
    return field(len(body) + wrong) + bytes(body), common


@st.composite
def areas(draw: st.DrawFn) -> tuple[bytes, int, bool]:
    """A records area, a records count (sometimes damaged or miscounted), and whether both are
    intact with every record of the common shape."""
    rows = draw(st.lists(records(), min_size=1, max_size=12))
    if draw(st.booleans()):  # runs of same-length records: the walk's known-size shortcut
        rows = rows[:1] * draw(st.integers(1, 6)) + rows[1:]
    area = bytearray(b"".join(row for row, _ in rows))
    damaged = draw(st.integers(0, 3)) == 0
    if damaged:
        at = draw(st.integers(0, len(area) - 1))
        area[at] ^= draw(st.integers(1, 255))
    cut = draw(st.sampled_from([0] * 6 + [1, 2, 7]))
    area = area[:len(area) - cut] if cut < len(area) else area
    count = len(rows) + draw(st.sampled_from([0] * 8 + [-1, 1]))
    common = all(c for _, c in rows) and not damaged and not cut and count == len(rows)
    return bytes(area), max(count, 1), common


@pytest.mark.parametrize("walk", WALKERS, ids=["python", "numba"][:len(WALKERS)])
@settings(max_examples=400, deadline=None)
@given(areas())
def test_walk_records_agrees_with_the_general_decoder(walk: Any, case: tuple[bytes, int, bool]) -> None:
    area, count, common = case
    ok, low, high, keyless = walk(area, 0, len(area), count)
    error, _, low_ts, high_ts, general_keyless, _, _ = k.summarize_records(memoryview(area), 0, len(area), count, 0,
                                                                          False)
    if common:  # the walk takes every record of the common shape
        assert ok
    if ok:  # and what it takes decodes; base timestamp 0: timestamps are the deltas (the general
        assert error == k.OK  # decoder leaves -1 out of the smallest)
        assert keyless == general_keyless
        assert high_ts == max(high, -1)
        if low != -1:
            assert low_ts == low


@pytest.mark.skipif(COMPILED is None, reason="numba absent")
@settings(max_examples=200, deadline=None)
@given(areas())
def test_walk_records_twins_agree(case: tuple[bytes, int, bool]) -> None:
    area, count, _ = case
    assert COMPILED is not None
    assert tuple(COMPILED["walk_records"](area, 0, len(area), count)) == k.walk_records(area, 0, len(area), count)


def _record(ts_delta: int, offset_delta: int, key: bytes | None, value: bytes | None) -> bytes:
    body = bytes(1) + varint(ts_delta) + varint(offset_delta)
    body += varint(-1 if key is None else len(key)) + (key or b"") + varint(-1 if value is None else len(value))
    body += (value or b"") + varint(0)
    return varint(len(body)) + body


def test_a_common_run_is_walked_and_counted() -> None:
    rows = [_record(0, i, bytes(16), bytes(100)) for i in range(70)]  # offsetDelta takes 2 bytes from 64 on
    rows[5] = _record(-3, 5, None, bytes(100))
    rows[6] = _record(69, 6, b"k", None)
    area = b"".join(rows)
    for walk in WALKERS:
        assert tuple(walk(area, 0, len(area), 70)) == (True, -3, 69, 1)
        assert tuple(walk(area, 0, len(area), 69))[0] is False  # a record left over
        assert tuple(walk(area, 0, len(area) - 1, 70))[0] is False  # the last record cut


# --- check_produced_batch: the fast walk changes no answer ------------------------------------------

def _general_check(data: bytes, rules: tuple[int, bool, int, int], now: int) -> tuple[int, ...]:
    """The interpreted check with walk_records always declining: summarize_records decides."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(k, "walk_records", lambda buf, pos, end, count: (False, 0, 0, 0))
        return tuple(k.check_produced_batch(data, len(data), False, *rules, now))


def _checks(data: bytes, rules: tuple[int, bool, int, int], now: int) -> set[tuple[int, ...]]:
    answers = {tuple(k.check_produced_batch(data, len(data), False, *rules, now))}
    if COMPILED is not None:
        answers.add(tuple(COMPILED["check_produced_batch"](data, len(data), False, *rules, now)))
    return answers


@st.composite
def produced_batches(draw: st.DrawFn) -> bytes:
    builder = BatchBuilder()
    first = draw(st.integers(-5, 1 << 45))
    rows = draw(st.lists(st.tuples(st.integers(-3, 9000), st.none() | st.binary(max_size=8),
                                   st.none() | st.binary(max_size=40),
                                   st.lists(st.tuples(st.text(max_size=3), st.none() | st.binary(max_size=3)),
                                            max_size=2)), min_size=1, max_size=20))
    for i, (delta, key, value, headers) in enumerate(rows):
        builder.append(i, max(first + delta, -1), key, value, tuple(headers))
    data = bytearray(builder.build())
    if draw(st.booleans()):  # another base timestamp (CRC fixed): overflows, a smallest timestamp of -1
        base = draw(st.integers(INT64_MIN, INT64_MAX) | st.integers(-3, 3) | st.integers(INT64_MAX - 9000, INT64_MAX))
        data[27:35] = base.to_bytes(8, "big", signed=True)
        write_crc(data)
    if draw(st.integers(0, 3)) == 0:  # damage past the CRC's start, CRC fixed: the records are walked
        at = draw(st.integers(21, len(data) - 1))
        data[at] ^= draw(st.integers(1, 255))
        write_crc(data)
    return bytes(data)


@settings(max_examples=300, deadline=None)
@given(produced_batches(), st.booleans(), st.sampled_from([INT64_MAX, 1000, 1 << 40]))
def test_check_produced_batch_answers_as_the_general_decoder(data: bytes, compact: bool, bound: int) -> None:
    rules = (1 << 30, compact, bound, bound)
    assert _checks(data, rules, NOW) == {_general_check(data, rules, NOW)}


def test_a_smallest_timestamp_of_minus_one_is_left_out() -> None:
    builder = BatchBuilder()
    builder.append(0, 10, b"k", b"v")
    builder.append(1, 15, b"k", b"v")
    data = bytearray(builder.build())
    data[27:35] = (-1).to_bytes(8, "big", signed=True)  # deltas 0 and 5: timestamps -1 and 4
    data[35:43] = (4).to_bytes(8, "big", signed=True)
    write_crc(data)
    rules = (1 << 30, False, 1000, INT64_MAX)  # before.max.ms 1000: the -1 must not count
    assert _checks(bytes(data), rules, 1000) == {_general_check(bytes(data), rules, 1000)} == {(k.PRODUCED_OK, 1, 4, 2)}
