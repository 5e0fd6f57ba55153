"""Property-based fuzzing of every decoder and loader (the targets of fuzz/targets.py).

For each target, mutated valid samples and random bytes must give a result or a typed error
(TidelogError; for requests the server's MalformedRequestError/UnsupportedRequestError), never
another exception, and the Python heap must stay within a bound proportional to the input: no
length field, count or compression ratio makes a decoder allocate what the bytes do not hold.
(A decompressed stream is capped by MAX_DECOMPRESSED_BYTES; see test_decompression_bomb.py.)

make test runs a few hundred examples per target; ``make soak`` runs 100k per target.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import HealthCheck, given, settings

from fuzz.targets import TARGETS, Target
from fuzz_strategies import fuzz_inputs, peak_allocation

SHORT = {"batch": 300, "compression": 300, "scan": 200, "request": 600, "index": 200, "checkpoint": 300,
         "properties": 200, "kraft": 300, "groups": 300}
SOAK_EXAMPLES = 100_000
HEAP_PER_INPUT_BYTE = 4096  # a zstd RLE block turns 4 bytes into 128 KiB: the worst legal ratio here
HEAP_SLACK = 16 << 20


def _check(target: Target, data: bytes) -> None:
    peak = peak_allocation(lambda: target.check(data))
    assert peak <= HEAP_SLACK + HEAP_PER_INPUT_BYTE * len(data), f"{target.name}: {peak} bytes for {len(data)}"


def _fuzz(target: Target, examples: int) -> None:
    for sample in target.corpus():  # imports and caches warm up outside the measured heap
        target.check(sample)

    @settings(max_examples=examples, deadline=timedelta(seconds=5), database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(fuzz_inputs(target.corpus()))
    def run(data: bytes) -> None:
        _check(target, data)

    run()


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_decoder_gives_a_result_or_a_typed_error(name: str) -> None:
    _fuzz(TARGETS[name], SHORT[name])


@pytest.mark.soak
@pytest.mark.parametrize("name", sorted(TARGETS))
def test_decoder_gives_a_result_or_a_typed_error_soak(name: str) -> None:
    _fuzz(TARGETS[name], SOAK_EXAMPLES)


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_corpus_samples_decode_without_error(name: str) -> None:
    """The samples are valid: mutations start from inputs that reach the deepest code."""
    target = TARGETS[name]
    for data in target.corpus():
        target.one_input(data)
