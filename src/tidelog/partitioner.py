"""Kafka's default partitioner: murmur2 of the key, and sticky partitions for keyless records.

What a Kafka producer does with a record that names no partition (``BuiltInPartitioner``,
KIP-480's sticky partitioner):

* a record **with a key** goes to ``toPositive(murmur2(key)) % numPartitions``, where
  ``murmur2`` is ``org.apache.kafka.common.utils.Utils.murmur2`` (MurmurHash2, seed
  ``0x9747b28c``, little-endian 4-byte blocks, signed int32 result) and ``toPositive(n)`` is
  ``n & 0x7fffffff`` (not ``abs``: ``abs(Integer.MIN_VALUE)`` is negative). The key bytes are the
  serialized key: for the CLI, the UTF-8 bytes of the key string;
* a record **without a key** goes to the topic's *sticky* partition, which changes each time a
  batch of that partition is sealed (full by record count or by size), to another partition
  picked at random (Kafka's ``StickyPartitionCache.nextPartition`` avoids the previous one);
  so consecutive keyless records fill one batch at a time and spread over all partitions.

The sticky rule depends on when batches are sealed, so this module also decides the batch
boundaries (Kafka's ``RecordAccumulator``): :class:`DefaultPartitioner` takes records in arrival
order and gives each its partition, its batch, its offset delta and its timestamp delta within
that batch. A batch is sealed when it holds ``batch_size`` records, or before a record that would
take it past ``max_batch_bytes``; a record larger than that on its own gets a batch of its own
(the log then refuses it as too large, unless compression shrinks it enough).

Both loops (bulk murmur2 over a buffer of keys, and the assignment) are kernels written in the
subset of Python that numba compiles; as in :mod:`tidelog.records.scan`, the same source runs
compiled (numba, cached on disk) or interpreted when ``TIDELOG_PURE_PYTHON=1`` or numba is
missing, behind the :class:`PartitionerKernels` protocol; tests run both and compare. Integer
arithmetic stays below 2**63 in both twins (murmur2 masks to 32 bits after every product of two
values below 2**32 and 2**31).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any, Protocol

import numpy as np

from tidelog import twins

MURMUR2_SEED = 0x9747B28C
_M = 0x5BD1E995
_MASK32 = 0xFFFFFFFF
MAX_TIMESTAMP_DELTA = 1 << 62  # batches are split so |timestamp - baseTimestamp| stays below this
NO_PARTITION = -1


# --- the scalar reference (Kafka's Utils) -----------------------------------------------------

def murmur2(data: bytes | bytearray | memoryview) -> int:
    """Kafka's ``Utils.murmur2``: the signed 32-bit MurmurHash2 of ``data``."""
    h = _murmur2_range(data, 0, len(data))
    return h - (1 << 32) if h >= 1 << 31 else h


def to_positive(number: int) -> int:
    """Kafka's ``Utils.toPositive``: ``number & 0x7fffffff`` (0 for Integer.MIN_VALUE, not abs)."""
    return number & 0x7FFFFFFF


def partition_for_key(key: bytes | bytearray | memoryview, num_partitions: int) -> int:
    """The partition Kafka's producer picks for a record with ``key`` (``BuiltInPartitioner.partitionForKey``)."""
    return to_positive(murmur2(key)) % num_partitions


# --- kernels: one source, compiled or interpreted -----------------------------------------------

def _murmur2_range(data: Any, start: int, length: int) -> int:
    """Unsigned 32-bit murmur2 of ``data[start:start + length]`` (a numba-compilable helper)."""
    h = (MURMUR2_SEED ^ length) & _MASK32
    blocks = length // 4
    for i in range(blocks):
        j = start + 4 * i
        k = data[j] | (data[j + 1] << 8) | (data[j + 2] << 16) | (data[j + 3] << 24)
        k = (k * _M) & _MASK32
        k ^= k >> 24
        k = (k * _M) & _MASK32
        h = (h * _M) & _MASK32
        h ^= k
    tail = start + 4 * blocks
    extra = length & 3
    if extra >= 3:
        h ^= data[tail + 2] << 16
    if extra >= 2:
        h ^= data[tail + 1] << 8
    if extra >= 1:
        h ^= data[tail]
        h = (h * _M) & _MASK32
    h ^= h >> 13
    h = (h * _M) & _MASK32
    h ^= h >> 15
    return h


def murmur2_keys_kernel(buf: Any, lengths: Any, count: int, out: Any) -> None:
    """``out[i]`` = unsigned murmur2 of the i-th key, keys packed back to back in ``buf``;
    a negative length is a null key (it takes no bytes; ``out[i]`` = 0)."""
    pos = 0
    for i in range(count):
        n = lengths[i]
        if n < 0:
            out[i] = 0
        else:
            out[i] = _murmur2_range(buf, pos, n)
            pos += n


def _next_random(state: Any) -> int:
    """Advance the xorshift32 generator in ``state[2]`` (never 0) and return it; every
    intermediate stays below 2**45, so both twins compute the same ints."""
    x = state[2]
    x ^= (x << 13) & _MASK32
    x ^= x >> 17
    x ^= (x << 5) & _MASK32
    state[2] = x
    return x


def _seal(p: int, count: Any, nbytes: Any, open_id: Any, state: Any, num_partitions: int,
          sealed: Any, sealed_count: int) -> int:
    """Seal partition ``p``'s open batch; move the sticky partition on if it was ``p``."""
    sealed[sealed_count] = open_id[p]
    count[p] = 0
    nbytes[p] = 0
    if p == state[0] and num_partitions > 1:
        state[0] = (p + 1 + _next_random(state) % (num_partitions - 1)) % num_partitions
    return sealed_count + 1


def _fits(p: int, size: int, ts: int, count: Any, nbytes: Any, base_ts: Any, max_bytes: int) -> bool:
    if count[p] == 0:
        return True
    delta = ts - base_ts[p]
    return nbytes[p] + size <= max_bytes and -MAX_TIMESTAMP_DELTA < delta < MAX_TIMESTAMP_DELTA


def assign_kernel(explicit: Any, key_len: Any, key_hash: Any, timestamps: Any, sizes: Any, n: int,
                  num_partitions: int, batch_size: int, max_bytes: int,
                  count: Any, nbytes: Any, base_ts: Any, open_id: Any, state: Any,
                  part_out: Any, batch_out: Any, offset_delta_out: Any, ts_delta_out: Any,
                  sealed: Any) -> int:
    """Give each of ``n`` records its partition, batch, offset delta and timestamp delta.

    Per partition: ``count``/``nbytes`` of its open batch, that batch's ``base_ts`` and id
    (``open_id``). ``state`` = [sticky partition, next batch id, random state]. Sealed batch ids
    are written to ``sealed`` in sealing order (room for 2n); returns how many.
    """
    # Long on purpose: the per-record loop of the accumulator, kept in one kernel.
    sealed_count = 0
    for i in range(n):
        ts = timestamps[i]
        size = sizes[i]
        p = explicit[i]
        keyless_sticky = False
        if p < 0:
            if key_len[i] >= 0:
                p = (key_hash[i] & 0x7FFFFFFF) % num_partitions
            else:
                p = state[0]
                keyless_sticky = True
        if not _fits(p, size, ts, count, nbytes, base_ts, max_bytes):
            sealed_count = _seal(p, count, nbytes, open_id, state, num_partitions, sealed, sealed_count)
            if keyless_sticky:
                p = state[0]
                if not _fits(p, size, ts, count, nbytes, base_ts, max_bytes):
                    sealed_count = _seal(p, count, nbytes, open_id, state, num_partitions, sealed, sealed_count)
        if count[p] == 0:
            open_id[p] = state[1]
            state[1] += 1
            base_ts[p] = ts
        part_out[i] = p
        batch_out[i] = open_id[p]
        offset_delta_out[i] = count[p]
        ts_delta_out[i] = ts - base_ts[p]
        count[p] += 1
        nbytes[p] += size
        if count[p] >= batch_size or nbytes[p] >= max_bytes:
            sealed_count = _seal(p, count, nbytes, open_id, state, num_partitions, sealed, sealed_count)
    return sealed_count


_HELPERS = ("_murmur2_range", "_next_random", "_seal", "_fits")
_KERNELS = ("murmur2_keys_kernel", "assign_kernel")


class PartitionerKernels(Protocol):
    """The contract both twins implement (numba on numpy arrays, interpreted on lists)."""

    name: str  # "numba" or "python"

    def array(self, values: np.ndarray) -> Any:
        """A numpy array as the kernels take it (kept as is, or a list)."""

    def to_numpy(self, column: Any, dtype: Any) -> np.ndarray:
        """A kernel column as a numpy array."""

    def murmur2_keys(self, buf: Any, lengths: Any, count: int, out: Any) -> None:
        """See :func:`murmur2_keys_kernel`."""

    def assign(self, *args: Any) -> int:
        """See :func:`assign_kernel`."""


@dataclass(frozen=True, slots=True)
class _Twin:
    murmur2_keys: Callable[..., None]
    assign: Callable[..., int]
    name: str

    def array(self, values: np.ndarray) -> Any:
        return np.ascontiguousarray(values) if self.name == "numba" else values.tolist()

    def to_numpy(self, column: Any, dtype: Any) -> np.ndarray:
        return np.asarray(column, dtype)


def _compile() -> _Twin:
    namespace = twins.compile_functions(globals(), _HELPERS, _KERNELS, {"nogil": True})
    return _Twin(namespace["murmur2_keys_kernel"], namespace["assign_kernel"], "numba")


@cache
def get_kernels(pure: bool) -> PartitionerKernels:
    """The interpreted twin (``pure=True``) or the numba one (ImportError without numba)."""
    if pure:
        return _Twin(murmur2_keys_kernel, assign_kernel, "python")
    return _compile()




_ACTIVE: PartitionerKernels = twins.choose(get_kernels)
ACTIVE_IMPLEMENTATION: str = _ACTIVE.name


def murmur2_keys(buf: bytes, lengths: np.ndarray, kernels: PartitionerKernels | None = None) -> np.ndarray:
    """Unsigned murmur2 (int64 values in [0, 2**32)) of keys packed back to back in ``buf``;
    ``lengths[i] < 0`` marks a null key (hash 0). ``to_positive`` of the signed hash is
    ``h & 0x7fffffff`` of these values too."""
    twin = kernels or _ACTIVE
    n = len(lengths)
    data = np.frombuffer(buf, np.uint8) if twin.name == "numba" else memoryview(buf)
    out = twin.array(np.zeros(n, np.int64))
    twin.murmur2_keys(data, twin.array(np.asarray(lengths, np.int64)), n, out)
    return twin.to_numpy(out, np.int64)


# --- the stateful driver ----------------------------------------------------------------------

@dataclass(frozen=True, slots=True, eq=False)
class Assignment:
    """Where each record of one :meth:`DefaultPartitioner.assign` call goes (numpy int64 columns).

    ``batch`` ids are global and increase in the order batches open; ``sealed`` lists the ids
    of the batches sealed during the call, in sealing order (their records may have arrived in
    earlier calls). Batches not sealed stay open for the next call or :meth:`DefaultPartitioner.seal_all`.
    """

    partition: np.ndarray
    batch: np.ndarray
    offset_delta: np.ndarray
    timestamp_delta: np.ndarray
    sealed: np.ndarray


class DefaultPartitioner:
    """Kafka's default partitioning and batch sealing for one topic, across calls (see module doc).

    Not thread-safe. ``rng`` seeds the sticky choice (tests pass ``random.Random(seed)``).
    """

    def __init__(self, num_partitions: int, batch_size: int, max_batch_bytes: int, *,
                 rng: random.Random | None = None, kernels: PartitionerKernels | None = None) -> None:
        if num_partitions < 1 or batch_size < 1 or max_batch_bytes < 1:
            raise ValueError(f"need num_partitions, batch_size and max_batch_bytes >= 1, got "
                             f"{num_partitions}, {batch_size}, {max_batch_bytes}")
        self._k = kernels or _ACTIVE
        self._partitions = num_partitions
        self._batch_size = batch_size
        self._max_bytes = max_batch_bytes
        seed = (rng or random.Random()).getrandbits(32) or 1  # xorshift never leaves 0
        self._state = self._k.array(np.array([0, 0, seed], np.int64))
        self._state[0] = _next_random(self._state) % num_partitions
        zeros = np.zeros(num_partitions, np.int64)
        self._count, self._nbytes, self._base_ts, self._open_id = (self._k.array(zeros.copy()) for _ in range(4))

    @property
    def sticky_partition(self) -> int:
        """The partition the next keyless record goes to (absent a full batch)."""
        return int(self._state[0])

    def assign(self, explicit: np.ndarray, key_len: np.ndarray, key_hash: np.ndarray | None,
               timestamps: np.ndarray, sizes: np.ndarray) -> Assignment:
        """Assign records in arrival order. ``explicit[i]`` >= 0 forces a partition (caller checks
        its range); ``key_len[i]`` < 0 means no key; ``key_hash`` (from :func:`murmur2_keys`) may be
        None when every record is explicit or keyless; ``sizes`` are upper bounds of each record's
        encoded size, counted against ``max_batch_bytes``."""
        k, n = self._k, len(explicit)
        if key_hash is None:
            key_hash = np.zeros(n, np.int64)
        outs = [k.array(np.zeros(n, np.int64)) for _ in range(4)]
        sealed = k.array(np.zeros(2 * n, np.int64))
        count = k.assign(k.array(explicit), k.array(key_len), k.array(key_hash), k.array(timestamps),
                         k.array(sizes), n, self._partitions, self._batch_size, self._max_bytes,
                         self._count, self._nbytes, self._base_ts, self._open_id, self._state, *outs, sealed)
        columns = [k.to_numpy(column, np.int64) for column in outs]
        return Assignment(*columns, sealed=k.to_numpy(sealed, np.int64)[:count])

    def seal_all(self) -> list[int]:
        """Seal every open batch (end of input); their ids, in order of partition."""
        ids = []
        for p in range(self._partitions):
            if self._count[p] > 0:
                ids.append(int(self._open_id[p]))
                self._count[p] = 0
                self._nbytes[p] = 0
        return ids
