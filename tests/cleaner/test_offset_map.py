"""OffsetMap: Kafka's OffsetMapTest, the buildOffsetMap stop rule, scans, both twins, memory.

Every behaviour test runs once per twin (``python`` = the kernels interpreted, ``numba`` = the same
kernels compiled), on small inputs. The key hash is checked against mmh3 (a C murmur3 nobody here
wrote); the twins are checked against each other down to the table's bytes.
"""

from __future__ import annotations

import tracemalloc
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import mmh3
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidelog.cleaner.offset_map import SLOT_BYTES, MapKernels, OffsetMap, get_kernels, key_hash
from tidelog.errors import CorruptRecordError, OffsetMapFullError
from tidelog.records import BatchBuilder, CompressionType
from tidelog.records.scan import ScanResult, scan_batches

TWINS = [pytest.param(True, id="python"), pytest.param(False, id="numba")]
MASK64 = (1 << 64) - 1
TS = 1_700_000_000_000

Rows = Sequence[tuple[bytes | None, int]]  # (key, offset) per record


def twin_kernels(pure: bool) -> MapKernels:
    try:
        return get_kernels(pure)
    except ImportError:
        pytest.skip("numba is not installed")


@pytest.fixture(params=TWINS)
def twin(request: pytest.FixtureRequest) -> MapKernels:
    return twin_kernels(request.param)


def key(i: int) -> bytes:
    """Kafka's OffsetMapTest key: the decimal string."""
    return str(i).encode()


def scan_of(rows: Rows, batch_size: int = 4, gzip_every: int = 0) -> ScanResult:
    """A scan of batches of ``batch_size`` records; every ``gzip_every``-th batch gzip-compressed."""
    out = []
    for b, first in enumerate(range(0, len(rows), batch_size)):
        gzip = gzip_every and b % gzip_every == gzip_every - 1
        builder = BatchBuilder(base_offset=rows[first][1],
                               compression=CompressionType.GZIP if gzip else CompressionType.NONE)
        for k, offset in rows[first:first + batch_size]:
            builder.append(offset, TS, k, b"v")
        out.append(builder.build())
    return scan_batches(b"".join(out))


# --- the key hash -----------------------------------------------------------------------------

def mmh3_halves(data: bytes) -> tuple[int, int]:
    h = mmh3.hash128(data, 0, True, signed=False)
    return h & MASK64, h >> 64


@pytest.mark.parametrize("pure", TWINS)
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.binary(max_size=100))
def test_key_hash_is_murmur3_x64_128_seed_0(pure: bool, data: bytes) -> None:
    assert key_hash(data, twin_kernels(pure)) == mmh3_halves(data)


@pytest.mark.parametrize("pure", TWINS)
def test_key_hash_matches_mmh3_for_every_tail_length(pure: bool) -> None:
    data = bytes((i * 37 + 7) % 256 for i in range(48))
    for length in range(49):  # 0..3 blocks and every tail of 0..15 bytes
        for chunk in (data[:length], bytes(b ^ 0xFF for b in data[:length])):
            assert key_hash(chunk, twin_kernels(pure)) == mmh3_halves(chunk), length


def test_key_hash_accepts_bytearray_and_memoryview() -> None:
    assert key_hash(bytearray(b"abc")) == key_hash(memoryview(b"xabc")[1:]) == mmh3_halves(b"abc")


# --- Kafka's OffsetMapTest --------------------------------------------------------------------

@pytest.mark.parametrize("items", [10, 100, 1000, 5000])
def test_basic_validation_every_key_maps_to_its_offset(items: int, twin: MapKernels) -> None:
    offset_map = OffsetMap(items * 48, kernels=twin)  # Kafka: (items / 0.5 * 24) bytes
    for i in range(items):
        offset_map.put(key(i), i)
    assert offset_map.size == items
    assert [offset_map.get(key(i)) for i in range(items)] == list(range(items))


def test_clear_forgets_every_key(twin: MapKernels) -> None:
    offset_map = OffsetMap(4000, kernels=twin)
    for i in range(10):
        offset_map.put(key(i), i)
    assert [offset_map.get(key(i)) for i in range(10)] == list(range(10))
    offset_map.clear()
    assert [offset_map.get(key(i)) for i in range(10)] == [-1] * 10
    assert (offset_map.size, offset_map.latest_offset, offset_map.utilization) == (0, -1, 0.0)
    offset_map.put(key(3), 30)
    assert (offset_map.get(key(3)), offset_map.size) == (30, 1)


@pytest.mark.parametrize("keys, in_place", [(5, False), (30, True)])
def test_clear_zeroes_a_dense_table_in_place_and_replaces_a_sparse_one(twin: MapKernels, keys: int,
                                                                       in_place: bool) -> None:
    # 3400 slots = 20 pages of 170: 30 keys (>= one per page) count as dense, 5 as sparse
    offset_map = OffsetMap.with_slots(3400, kernels=twin)
    for i in range(keys):
        offset_map.put(key(i), i)
    table = offset_map._table
    offset_map.clear()
    assert (offset_map._table is table) is in_place
    assert not offset_map._table.any()
    assert [offset_map.get(key(i)) for i in range(keys)] == [-1] * keys
    offset_map.put(key(1), 10)
    assert (offset_map.get(key(1)), offset_map.get(key(2)), offset_map.size) == (10, -1, 1)


def test_get_when_full_gives_minus_one_for_an_absent_key(twin: MapKernels) -> None:
    offset_map = OffsetMap(4096, kernels=twin)
    i = 37
    while offset_map.size < offset_map.slots:
        offset_map.put(key(i), i)
        i += 1
    assert offset_map.slots == 4096 // 24 == offset_map.size
    assert offset_map.get(key(i)) == -1
    assert offset_map.get(key(i - 1)) == i - 1


def test_full_map_raises_on_a_new_key_and_still_updates_a_present_one(twin: MapKernels) -> None:
    offset_map = OffsetMap.with_slots(8, kernels=twin)
    for i in range(8):
        offset_map.put(key(i), i)
    with pytest.raises(OffsetMapFullError):
        offset_map.put(key(8), 8)
    offset_map.put(key(2), 100)
    assert [offset_map.get(key(i)) for i in range(9)] == [0, 1, 100, 3, 4, 5, 6, 7, -1]
    assert offset_map.size == 8


def test_later_put_overwrites_without_growing(twin: MapKernels) -> None:
    offset_map = OffsetMap(4096, kernels=twin)
    offset_map.put(b"k", 5)
    offset_map.put(b"k", 9)
    assert (offset_map.get(b"k"), offset_map.size) == (9, 1)


def test_latest_offset_is_the_last_offset_put() -> None:
    offset_map = OffsetMap(4096)
    assert offset_map.latest_offset == -1
    for i in range(10):
        offset_map.put(key(i), i)
    offset_map.put(key(3), 42)
    assert offset_map.latest_offset == 42


def test_utilization_is_size_over_slots(twin: MapKernels) -> None:
    offset_map = OffsetMap(4096, kernels=twin)
    i = 37
    while offset_map.size < offset_map.slots:
        assert offset_map.utilization == offset_map.size / offset_map.slots
        offset_map.put(key(i), i)
        i += 1
    assert offset_map.utilization == 1.0


def test_empty_key_is_a_key(twin: MapKernels) -> None:
    offset_map = OffsetMap(4096, kernels=twin)
    offset_map.put(b"", 7)
    assert (offset_map.get(b""), offset_map.get(b"\x00")) == (7, -1)


def test_sizes_follow_memory_and_load_factor() -> None:
    offset_map = OffsetMap(1000, 0.9)
    assert (offset_map.slots, offset_map.max_entries, offset_map.memory_bytes) == (41, 36, 41 * SLOT_BYTES)
    fake = OffsetMap.with_slots(10)  # Kafka's FakeOffsetMap(capacity), load factor 0.75
    assert (fake.slots, fake.max_entries) == (10, 7)


# --- put_records: Kafka's buildOffsetMap stop rule ----------------------------------------------

def test_put_records_maps_every_key_to_its_latest_offset(twin: MapKernels) -> None:
    rows = [(key(i % 5), 100 + i) for i in range(20)]
    offset_map = OffsetMap.with_slots(16, kernels=twin)
    scan = scan_of(rows)
    assert offset_map.put_records(scan, np.ones(20, bool)) == 20
    assert [offset_map.get(key(i)) for i in range(5)] == [115, 116, 117, 118, 119]
    assert (offset_map.size, offset_map.latest_offset) == (5, 119)


def test_put_records_stops_before_the_row_that_finds_the_map_full(twin: MapKernels) -> None:
    offset_map = OffsetMap.with_slots(10, 0.5, kernels=twin)  # max_entries 5
    scan = scan_of([(key(i), i) for i in range(10)])
    assert offset_map.put_records(scan, np.ones(10, bool)) == 5
    assert offset_map.size == 5 and offset_map.latest_offset == 4
    assert [offset_map.get(key(i)) for i in range(7)] == [0, 1, 2, 3, 4, -1, -1]


def test_put_records_stops_at_a_repeated_key_when_full(twin: MapKernels) -> None:
    """Kafka checks the size before every keyed record, even one whose key is already mapped."""
    offset_map = OffsetMap.with_slots(10, 0.5, kernels=twin)
    scan = scan_of([(key(i), i) for i in range(5)] + [(key(0), 5), (key(1), 6)])
    assert offset_map.put_records(scan, np.ones(7, bool)) == 5
    assert offset_map.get(key(0)) == 0


def test_put_records_skips_ineligible_and_keyless_rows(twin: MapKernels) -> None:
    rows = [(key(0), 0), (None, 1), (key(1), 2), (key(2), 3), (None, 4), (key(3), 5), (key(4), 6)]
    eligible = np.array([True, True, False, True, True, True, True])
    offset_map = OffsetMap.with_slots(6, 0.5, kernels=twin)  # max_entries 3
    stop = offset_map.put_records(scan_of(rows), eligible)
    assert stop == 6  # rows 0, 3, 5 put; the null keys and ineligible row 2 do not count
    assert [offset_map.get(key(i)) for i in range(5)] == [0, -1, 3, 5, -1]


def test_put_records_on_a_full_map_returns_the_first_eligible_keyed_row(twin: MapKernels) -> None:
    offset_map = OffsetMap.with_slots(4, 0.5, kernels=twin)
    offset_map.put(b"a", 0)
    offset_map.put(b"b", 1)
    scan = scan_of([(None, 10), (b"c", 11), (b"a", 12)])
    assert offset_map.put_records(scan, np.array([True, False, True])) == 2
    assert offset_map.get(b"a") == 0 and offset_map.latest_offset == 1


def test_put_records_of_an_empty_scan_returns_zero(twin: MapKernels) -> None:
    offset_map = OffsetMap(4096, kernels=twin)
    assert offset_map.put_records(scan_batches(b""), np.zeros(0, bool)) == 0
    assert offset_map.latest_offset == -1


def test_put_records_rejects_a_mask_of_the_wrong_length() -> None:
    with pytest.raises(ValueError, match="eligible"):
        OffsetMap(4096).put_records(scan_of([(b"a", 0)]), np.ones(2, bool))


def test_put_records_with_load_factor_one_fills_every_slot(twin: MapKernels) -> None:
    offset_map = OffsetMap.with_slots(4, 1.0, kernels=twin)
    assert offset_map.put_records(scan_of([(key(i), i) for i in range(6)]), np.ones(6, bool)) == 4
    assert offset_map.size == offset_map.slots == 4


# --- get_records ------------------------------------------------------------------------------

def test_get_records_of_a_real_scan_with_compressed_batches_and_null_keys(twin: MapKernels) -> None:
    rows = [(None if i % 7 == 3 else key(i % 11), 1000 + i) for i in range(60)]
    scan = scan_of(rows, batch_size=5, gzip_every=2)
    assert set(scan.arena.tolist()) == {0, 1}
    latest = {k: offset for k, offset in rows if k is not None}
    offset_map = OffsetMap(4096, kernels=twin)
    assert offset_map.put_records(scan, scan.key_len >= 0) == 60
    expected = [-1 if k is None else latest[k] for k, _ in rows]
    assert offset_map.get_records(scan).tolist() == expected
    assert offset_map.size == len(latest)


def test_get_records_of_keys_not_in_the_map(twin: MapKernels) -> None:
    offset_map = OffsetMap(4096, kernels=twin)
    offset_map.put(b"x", 3)
    scan = scan_of([(b"x", 10), (b"y", 11), (None, 12), (b"", 13)], gzip_every=1)
    result = offset_map.get_records(scan)
    assert result.dtype == np.int64 and result.tolist() == [3, -1, -1, -1]


# --- model and twins --------------------------------------------------------------------------

keys_strategy = st.one_of(st.none(), st.binary(max_size=3), st.binary(min_size=14, max_size=40))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=st.lists(st.tuples(keys_strategy, st.booleans()), max_size=60),
       slots=st.integers(1, 40), load_factor=st.sampled_from([0.25, 0.5, 0.75, 0.9, 1.0]))
def test_twins_agree_with_each_other_and_with_a_dict(rows: list[tuple[bytes | None, bool]], slots: int,
                                                    load_factor: float) -> None:
    records = [(k, 5 + i) for i, (k, _) in enumerate(rows)]
    eligible = np.array([e for _, e in rows], bool)
    scan = scan_of(records, batch_size=3, gzip_every=3) if records else scan_batches(b"")
    maps = [OffsetMap.with_slots(slots, load_factor, kernels=twin_kernels(pure)) for pure in (True, False)]
    results = [(m.put_records(scan, eligible), m.size, m.latest_offset, m.get_records(scan).tolist(),
                m._table.tobytes()) for m in maps]
    assert results[0] == results[1]
    stop, size, latest, got, _ = results[0]
    model: dict[bytes, int] = {}
    for row, (k, offset) in enumerate(records[:stop]):
        if k is not None and eligible[row]:
            model[k] = offset
    assert size == len(model) <= maps[0].max_entries
    assert got == [model.get(k, -1) if k is not None else -1 for k, _ in records]
    assert latest == (max(model.values()) if model else -1)
    if stop < len(records):
        assert records[stop][0] is not None and eligible[stop] and size == maps[0].max_entries


@settings(max_examples=50, deadline=None)
@given(ops=st.lists(st.tuples(st.integers(0, 30), st.integers(0, 2**63 - 2)), max_size=80))
def test_puts_and_gets_follow_a_dict(ops: list[tuple[int, int]]) -> None:
    offset_map = OffsetMap.with_slots(31, 1.0)
    model: dict[bytes, int] = {}
    for i, offset in ops:
        offset_map.put(key(i), offset)
        model[key(i)] = offset
    assert offset_map.size == len(model)
    assert [offset_map.get(key(i)) for i in range(32)] == [model.get(key(i), -1) for i in range(32)]


# --- memory -----------------------------------------------------------------------------------

def test_memory_per_key_at_load_factor_075_is_at_most_32_bytes() -> None:
    offset_map = OffsetMap(128 << 20, 0.75)
    assert offset_map.bytes_per_entry == 32.0
    assert offset_map.memory_bytes <= 128 << 20
    assert offset_map.memory_bytes / offset_map.max_entries <= 32 * (1 + 1 / offset_map.max_entries)
    assert OffsetMap(128 << 20).bytes_per_entry < 26.7  # Kafka's default load factor 0.9


def test_map_allocates_no_more_than_its_budget_and_nothing_per_key() -> None:
    """The compiled twin (the interpreted one takes the scan's columns as Python lists)."""
    budget = 1 << 20
    compiled = twin_kernels(False)
    scan = scan_of([(key(i), i) for i in range(2000)], batch_size=100)
    eligible = np.ones(2000, bool)
    OffsetMap(budget, kernels=compiled).put_records(scan, eligible)  # load the kernels before measuring
    tracemalloc.start()
    try:
        offset_map = OffsetMap(budget, kernels=compiled)
        built, _ = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        offset_map.put_records(scan, eligible)
        after, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert budget - SLOT_BYTES < offset_map.memory_bytes <= budget
    assert built <= budget + 64 * 1024  # the slots and O(1) scratch
    assert peak - built < 16 * 1024 and offset_map.size == 2000


# --- bad arguments ----------------------------------------------------------------------------

@pytest.mark.parametrize("memory, load_factor", [(23, 0.9), (0, 0.9), (4096, 0.0), (4096, 1.5), (24 << 32, 0.9)])
def test_bad_sizes_are_rejected(memory: int, load_factor: float) -> None:
    with pytest.raises(ValueError):
        OffsetMap(memory, load_factor)


def test_negative_offsets_are_rejected(twin: MapKernels) -> None:
    offset_map = OffsetMap(4096, kernels=twin)
    with pytest.raises(ValueError, match="-1"):
        offset_map.put(b"a", -1)
    assert offset_map.size == 0


def test_a_negative_offset_in_a_scan_is_a_corrupt_record(twin: MapKernels) -> None:
    first = BatchBuilder(base_offset=0)
    first.append(0, TS, b"a", b"v")
    bad = BatchBuilder(base_offset=-5)
    bad.append(-5, TS, b"b", b"v")
    head = first.build()
    scan = scan_batches(head + bad.build())
    offset_map = OffsetMap(4096, kernels=twin)
    with pytest.raises(CorruptRecordError) as raised:
        offset_map.put_records(scan, np.ones(2, bool))
    assert (raised.value.offset, raised.value.position) == (-5, len(head))
    assert (offset_map.get(b"a"), offset_map.get(b"b"), offset_map.size) == (0, -1, 1)


def test_maps_in_two_threads_at_once_agree() -> None:
    """One map per cleaner thread; the compiled kernels release the GIL."""
    scan = scan_of([(key(i % 300), i) for i in range(3000)], batch_size=50)
    maps = [OffsetMap(64 * 1024, kernels=twin_kernels(False)) for _ in range(2)]
    with ThreadPoolExecutor(2) as pool:
        stops = list(pool.map(lambda m: m.put_records(scan, np.ones(3000, bool)), maps))
        found = list(pool.map(lambda m: m.get_records(scan).tolist(), maps))
    assert stops == [3000, 3000] and found[0] == found[1] == [2700 + i % 300 for i in range(3000)]
