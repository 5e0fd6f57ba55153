"""Kafka's default partitioner: murmur2 and toPositive exactly as Kafka's Utils, keyed records by
hash, keyless records sticky per batch, and the batch boundaries the sticky rule depends on.

Oracles: the vectors of Kafka's ``UtilsTest.testMurmur2``, and kafka-python's pure-Python
``murmur2`` (``kafka.partitioner.default``, a port of the Java client's, returning the unsigned
value). Both twins of the kernels run and must agree exactly.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from tidelog.partitioner import (
    MAX_TIMESTAMP_DELTA,
    DefaultPartitioner,
    get_kernels,
    murmur2,
    murmur2_keys,
    partition_for_key,
    to_positive,
)

TWINS = [pytest.param(True, id="python"), pytest.param(False, id="numba")]

# org.apache.kafka.common.utils.UtilsTest#testMurmur2
KAFKA_MURMUR2_VECTORS = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


def random_keys(count: int, seed: int, max_length: int = 40) -> list[bytes]:
    rng = random.Random(seed)
    return [rng.randbytes(rng.randrange(max_length + 1)) for _ in range(count)]


def packed(keys: list[bytes | None]) -> tuple[bytes, np.ndarray]:
    return b"".join(k for k in keys if k is not None), np.array([-1 if k is None else len(k) for k in keys])


# --- murmur2 and toPositive --------------------------------------------------------------------

@pytest.mark.parametrize(("key", "expected"), KAFKA_MURMUR2_VECTORS.items())
def test_murmur2_matches_kafka_utils_test_vectors(key: bytes, expected: int) -> None:
    assert murmur2(key) == expected


def test_murmur2_matches_kafka_python_on_every_tail_length() -> None:
    for key in random_keys(500, seed=1):
        assert murmur2(key) & 0xFFFFFFFF == kafka_python_murmur2(key), key


def test_murmur2_of_empty_key_is_kafkas() -> None:
    assert murmur2(b"") & 0xFFFFFFFF == kafka_python_murmur2(b"")


@pytest.mark.parametrize(("number", "expected"), [
    (0, 0), (1, 1), (-1, 0x7FFFFFFF), (-(2**31), 0), (2**31 - 1, 2**31 - 1), (-973932308, 1173551340)])
def test_to_positive_masks_the_sign_bit_not_abs(number: int, expected: int) -> None:
    assert to_positive(number) == expected


def test_partition_for_key_is_to_positive_murmur2_mod_partitions() -> None:
    for key in random_keys(200, seed=2):
        for partitions in (1, 3, 7, 100):
            assert partition_for_key(key, partitions) == (kafka_python_murmur2(key) & 0x7FFFFFFF) % partitions


def test_partition_for_key_of_kafka_vector_keys() -> None:
    # toPositive(-973932308) = 1173551340; % 3 = 0, % 7 = 3
    assert partition_for_key(b"21", 3) == 0 and partition_for_key(b"21", 7) == 3


@pytest.mark.parametrize("pure", TWINS)
def test_bulk_murmur2_equals_the_scalar_one_with_null_keys_hashing_to_zero(pure: bool) -> None:
    keys: list[bytes | None] = [*random_keys(300, seed=3), None, b"", None, *KAFKA_MURMUR2_VECTORS]
    buf, lengths = packed(keys)
    hashes = murmur2_keys(buf, lengths, get_kernels(pure))
    expected = [0 if key is None else murmur2(key) & 0xFFFFFFFF for key in keys]
    assert hashes.tolist() == expected


# --- DefaultPartitioner ------------------------------------------------------------------------

def assign(partitioner: DefaultPartitioner, keys: list[bytes | None], *, explicit: list[int] | None = None,
           timestamps: list[int] | None = None, sizes: list[int] | None = None):
    n = len(keys)
    buf, lengths = packed(keys)
    return partitioner.assign(
        np.array(explicit if explicit is not None else [-1] * n, np.int64), lengths,
        murmur2_keys(buf, lengths), np.array(timestamps if timestamps is not None else [1000] * n, np.int64),
        np.array(sizes if sizes is not None else [40] * n, np.int64))


def batches_of(assignment) -> dict[int, list[int]]:
    """batch id -> the record indices in it, in order."""
    out: dict[int, list[int]] = {}
    for index, batch in enumerate(assignment.batch.tolist()):
        out.setdefault(batch, []).append(index)
    return out


@pytest.mark.parametrize("pure", TWINS)
def test_keyed_records_go_to_to_positive_murmur2_partition(pure: bool) -> None:
    keys = random_keys(400, seed=4, max_length=20)
    partitioner = DefaultPartitioner(5, 1000, 1 << 20, rng=random.Random(0), kernels=get_kernels(pure))
    result = assign(partitioner, keys)
    assert result.partition.tolist() == [partition_for_key(key, 5) for key in keys]


@pytest.mark.parametrize("pure", TWINS)
def test_explicit_partition_wins_over_key_and_stickiness(pure: bool) -> None:
    partitioner = DefaultPartitioner(4, 10, 1 << 20, rng=random.Random(0), kernels=get_kernels(pure))
    result = assign(partitioner, [b"k", None, b"k"], explicit=[3, 2, -1])
    assert result.partition.tolist() == [3, 2, partition_for_key(b"k", 4)]


@pytest.mark.parametrize("pure", TWINS)
def test_keyless_records_stick_to_one_partition_per_batch_then_switch(pure: bool) -> None:
    partitioner = DefaultPartitioner(4, 5, 1 << 20, rng=random.Random(7), kernels=get_kernels(pure))
    result = assign(partitioner, [None] * 40)
    groups = batches_of(result)
    assert [len(records) for records in groups.values()] == [5] * 8
    partitions = [result.partition[records[0]] for records in groups.values()]
    for records, partition in zip(groups.values(), partitions):
        assert set(result.partition[records].tolist()) == {partition}
    assert all(a != b for a, b in zip(partitions, partitions[1:])), partitions  # a new partition each batch
    assert result.sealed.tolist() == list(groups)


@pytest.mark.parametrize("pure", TWINS)
def test_keyless_records_spread_over_every_partition(pure: bool) -> None:
    partitioner = DefaultPartitioner(3, 10, 1 << 20, rng=random.Random(11), kernels=get_kernels(pure))
    result = assign(partitioner, [None] * 3000)
    counts = np.bincount(result.partition, minlength=3)
    assert all(700 <= c <= 1300 for c in counts), counts


@pytest.mark.parametrize("pure", TWINS)
def test_a_keyed_record_that_fills_the_sticky_batch_moves_the_sticky_partition(pure: bool) -> None:
    key = b"21"
    target = partition_for_key(key, 2)
    partitioner = DefaultPartitioner(2, 2, 1 << 20, rng=random.Random(1), kernels=get_kernels(pure))
    while partitioner.sticky_partition != target:  # the rng decides the first sticky partition
        partitioner = DefaultPartitioner(2, 2, 1 << 20, rng=random.Random(), kernels=get_kernels(pure))
    result = assign(partitioner, [None, key, None])
    assert result.partition.tolist() == [target, target, 1 - target]
    assert result.sealed.tolist() == [result.batch[0]]


@pytest.mark.parametrize("pure", TWINS)
def test_one_partition_topic_puts_everything_in_partition_zero(pure: bool) -> None:
    partitioner = DefaultPartitioner(1, 3, 1 << 20, rng=random.Random(0), kernels=get_kernels(pure))
    result = assign(partitioner, [None, b"a", None, b"b", None, None, None])
    assert set(result.partition.tolist()) == {0}
    assert result.offset_delta.tolist() == [0, 1, 2, 0, 1, 2, 0]
    assert len(result.sealed) == 2 and partitioner.seal_all() == [int(result.batch[-1])]


@pytest.mark.parametrize("pure", TWINS)
def test_offset_and_timestamp_deltas_are_relative_to_the_batch(pure: bool) -> None:
    partitioner = DefaultPartitioner(2, 3, 1 << 20, rng=random.Random(0), kernels=get_kernels(pure))
    result = assign(partitioner, [None] * 4, explicit=[0, 1, 0, 0], timestamps=[100, 50, 90, 130])
    assert result.offset_delta.tolist() == [0, 0, 1, 2]
    assert result.timestamp_delta.tolist() == [0, 0, -10, 30]
    assert result.batch.tolist() == [0, 1, 0, 0] and result.sealed.tolist() == [0]


@pytest.mark.parametrize("pure", TWINS)
def test_a_batch_is_sealed_before_it_would_pass_max_batch_bytes(pure: bool) -> None:
    partitioner = DefaultPartitioner(1, 100, 100, rng=random.Random(0), kernels=get_kernels(pure))
    result = assign(partitioner, [None] * 5, sizes=[40, 40, 40, 100, 10])
    # [40 40] then 40 would make 120; [40] then 100 would make 140; [100] fills it; [10] stays open
    assert result.batch.tolist() == [0, 0, 1, 2, 3]
    assert result.sealed.tolist() == [0, 1, 2]


@pytest.mark.parametrize("pure", TWINS)
def test_a_record_larger_than_max_batch_bytes_gets_a_batch_of_its_own(pure: bool) -> None:
    partitioner = DefaultPartitioner(1, 100, 100, rng=random.Random(0), kernels=get_kernels(pure))
    result = assign(partitioner, [None] * 3, sizes=[10, 500, 10])
    assert result.batch.tolist() == [0, 1, 2] and result.sealed.tolist() == [0, 1]


@pytest.mark.parametrize("pure", TWINS)
def test_timestamps_too_far_from_the_base_start_a_new_batch(pure: bool) -> None:
    partitioner = DefaultPartitioner(1, 100, 1 << 20, rng=random.Random(0), kernels=get_kernels(pure))
    result = assign(partitioner, [None] * 3, timestamps=[0, MAX_TIMESTAMP_DELTA, MAX_TIMESTAMP_DELTA - 1])
    assert result.batch.tolist() == [0, 1, 1]
    assert result.timestamp_delta.tolist() == [0, 0, -1]


@pytest.mark.parametrize("pure", TWINS)
def test_open_batches_continue_across_calls(pure: bool) -> None:
    partitioner = DefaultPartitioner(1, 4, 1 << 20, rng=random.Random(0), kernels=get_kernels(pure))
    first = assign(partitioner, [None] * 3)
    second = assign(partitioner, [None] * 3)
    assert first.sealed.tolist() == [] and second.sealed.tolist() == [0]
    assert second.batch.tolist() == [0, 1, 1] and second.offset_delta.tolist() == [3, 0, 1]
    assert partitioner.seal_all() == [1] and partitioner.seal_all() == []


def test_the_twins_assign_identically() -> None:
    rng = random.Random(5)
    keys = [None if rng.random() < 0.4 else rng.randbytes(rng.randrange(12)) for _ in range(3000)]
    explicit = [rng.choice([-1, -1, -1, 2]) for _ in keys]
    stamps = [rng.randrange(10**12) for _ in keys]
    sizes = [rng.randrange(10, 400) for _ in keys]
    results = []
    for pure in (True, False):
        partitioner = DefaultPartitioner(6, 17, 2000, rng=random.Random(9), kernels=get_kernels(pure))
        results.append(assign(partitioner, keys, explicit=explicit, timestamps=stamps, sizes=sizes))
    python, numba = results
    for name in ("partition", "batch", "offset_delta", "timestamp_delta", "sealed"):
        assert getattr(python, name).tolist() == getattr(numba, name).tolist(), name


def test_bad_settings_are_rejected() -> None:
    with pytest.raises(ValueError):
        DefaultPartitioner(0, 10, 100)
    with pytest.raises(ValueError):
        DefaultPartitioner(2, 0, 100)
