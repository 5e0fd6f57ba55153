"""Hypothesis strategies of the fuzz tests: byte-level mutations of valid samples.

A mutated sample keeps most of its structure, so it gets past the first length and magic checks
into the code that trusts the fields a random byte string never reaches. The mutations are the
ones that break decoders: a byte changed, bytes inserted or deleted, the input cut short, two
samples spliced, and an "interesting" integer (-1, 0, int32 max, int32 min, a varint of 2^63...)
written over a field at any position, big-endian as Kafka's fixed-size fields are.
"""

from __future__ import annotations

import struct
import tracemalloc
from collections.abc import Callable, Sequence

from hypothesis import strategies as st

from tidelog.records.varint import encode_unsigned_varint

INTERESTING = (
    *[struct.pack(">i", v) for v in (-1, 0, 1, 0x7FFFFFFF, -0x80000000, 0x10000, 61, 49)],
    *[struct.pack(">h", v) for v in (-1, 0, 0x7FFF, -0x8000)],
    *[struct.pack(">q", v) for v in (-1, 0x7FFFFFFFFFFFFFFF, -0x8000000000000000)],
    b"\xff", b"\x00", b"\x7f", b"\x80",
    encode_unsigned_varint(0xFFFFFFFF), encode_unsigned_varint(0x7FFFFFFF), b"\xff" * 10, b"\x80" * 5,
)


@st.composite
def _mutation(draw: st.DrawFn, data: bytes, corpus: Sequence[bytes]) -> bytes:
    at = draw(st.integers(0, len(data)))
    kind = draw(st.sampled_from(("byte", "interesting", "insert", "delete", "truncate", "splice")))
    if kind == "byte":
        return data[:at] + bytes([draw(st.integers(0, 255))]) + data[at + 1:]
    if kind == "interesting":
        value = draw(st.sampled_from(INTERESTING))
        return data[:at] + value + data[at + len(value):]
    if kind == "insert":
        return data[:at] + draw(st.binary(min_size=1, max_size=16)) + data[at:]
    if kind == "delete":
        return data[:at] + data[at + draw(st.integers(1, 16)):]
    if kind == "truncate":
        return data[:at]
    return data[:at] + draw(st.sampled_from(corpus))[draw(st.integers(0, 64)):]


@st.composite
def mutated(draw: st.DrawFn, corpus: Sequence[bytes], max_mutations: int = 4) -> bytes:
    """A corpus sample with 1..``max_mutations`` mutations applied."""
    data = draw(st.sampled_from(corpus))
    for _ in range(draw(st.integers(1, max_mutations))):
        data = draw(_mutation(data, corpus))
    return data


def fuzz_inputs(corpus: Sequence[bytes]) -> st.SearchStrategy[bytes]:
    """Mostly mutated samples, some random bytes, some samples unchanged."""
    return st.one_of(mutated(corpus), st.binary(max_size=512), st.sampled_from(corpus))


def peak_allocation(run: Callable[[], None]) -> int:
    """Bytes of the peak Python (and numpy) heap while ``run()`` runs, above where it started.
    Whatever ``run`` raises propagates."""
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        start, _ = tracemalloc.get_traced_memory()
        run()
        return tracemalloc.get_traced_memory()[1] - start
    finally:
        tracemalloc.stop()
