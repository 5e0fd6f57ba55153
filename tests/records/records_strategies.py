"""Hypothesis strategies shared by the records tests (imported by name: tests/records is on sys.path)."""

from __future__ import annotations

from hypothesis import strategies as st

from tidelog.records import CompressionType

ALL_CODECS = list(CompressionType)

keys = st.none() | st.binary(max_size=24)
values = st.none() | st.binary(max_size=64)
headers = st.lists(
    st.tuples(st.text(max_size=6), st.none() | st.binary(max_size=8)), max_size=3
).map(tuple)
timestamps = st.integers(min_value=0, max_value=1 << 45)


@st.composite
def record_rows(draw: st.DrawFn, min_size: int = 1, max_size: int = 30) -> list[tuple]:
    """``(offset, timestamp, key, value, headers)`` rows with strictly increasing offsets (gaps allowed)."""
    n = draw(st.integers(min_size, max_size))
    gaps = draw(st.lists(st.integers(1, 5), min_size=n, max_size=n))
    base = draw(st.integers(0, 1 << 40))
    offsets = [base + sum(gaps[:i]) for i in range(n)]
    return [(o, draw(timestamps), draw(keys), draw(values), draw(headers)) for o in offsets]
