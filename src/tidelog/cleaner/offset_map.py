"""The cleaner's offset map: the latest offset of every key of the dirty range, in bounded memory.

Kafka's ``SkimpyOffsetMap`` (kafka-storage.md §3.7.4), re-done for speed and size:

* **Fixed-size slots, no per-key objects.** A slot is 24 bytes: the key's 128-bit hash and the
  offset (layout in ``_map_kernels.py``). ``slots = memory // 24``, so the map never holds more
  than its budget (the cleaner gives it ``log.cleaner.dedupe.buffer.size / log.cleaner.threads``).
  The cleaner stops putting at ``max_entries = int(slots * load_factor)`` keys, so a key costs
  ``24 / load_factor`` bytes: 26.7 at Kafka's default load factor 0.9, 32 at 0.75 (a Python dict
  of ``bytes`` keys costs several times that).
* **murmur3 x64_128, not MD5.** Kafka hashes each key with MD5 through a ``MessageDigest``; here a
  numba kernel hashes and probes a whole scan's keys in one call (no Python per key). Two keys
  with the same 128-bit hash count as one key, as in Kafka (a collision needs ~2**64 keys).
* **Robin Hood probing from a multiply-shift home slot** rather than Kafka's MD5-window probe
  sequence, and keys hashed a chunk ahead of probing so that cache misses overlap (see
  ``_map_kernels.py``). Which keys fit in one round depends on the number of distinct keys,
  ``slots`` and the load factor only, and Kafka's slots are ``memory / 24`` too: a partial
  cleaning stops where Kafka's does for the same buffer size and load factor.

The table is allocated at construction with ``np.zeros`` (a zero-filled table is empty: the
operating system commits its pages as probes touch them); :meth:`OffsetMap.clear` zeroes a densely
used table in place (its pages stay committed, as Kafka's map is allocated once per cleaner thread)
and swaps a sparsely used one for a fresh one. Both twins (numba compiled, or interpreted when
``TIDELOG_PURE_PYTHON=1`` or numba does not import) run the same kernels on the same numpy table,
behind :class:`MapKernels`, chosen once at import.

Not thread-safe: one map per cleaner thread. The compiled kernels release the GIL.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any, Protocol

import numpy as np

from tidelog import twins
from tidelog.cleaner import _map_kernels as k
from tidelog.errors import CorruptRecordError, OffsetMapFullError
from tidelog.records.scan import ScanResult

SLOT_BYTES = 8 * k.SLOT_WORDS  # 24: hash1, hash2, offset + 1
SLOTS_PER_PAGE = 4096 // SLOT_BYTES  # 170 slots in a 4 KiB page
MAX_SLOTS = 1 << 31  # the home-slot reduction multiplies 32 hash bits by slots within int64


# --- the twins ------------------------------------------------------------------------------

class MapKernels(Protocol):
    """The contract both twins implement: the kernels of _map_kernels.py, plus how the twin
    wants its table, buffers and columns (numpy compiled; memoryviews and lists interpreted)."""

    name: str  # "numba" or "python"

    def view(self, data: np.ndarray) -> Any:
        """A 1-D numpy array (the table, or a read-only uint8 buffer) as the kernels index it."""

    def column(self, array: np.ndarray, dtype: Any) -> Any:
        """A per-row numpy column as the kernels take it."""

    def hash_key(self, buf: Any, pos: int, length: int) -> tuple[int, int]:
        """See _map_kernels.hash_key."""

    def put_key(self, table: Any, slots: int, buf: Any, pos: int, length: int, offset: int,
                size: int) -> int:
        """See _map_kernels.put_key."""

    def get_key(self, table: Any, slots: int, buf: Any, pos: int, length: int) -> int:
        """See _map_kernels.get_key."""

    def put_rows(self, *args: Any) -> tuple[int, int, int, int]:
        """See _map_kernels.put_rows."""

    def get_rows(self, *args: Any) -> None:
        """See _map_kernels.get_rows."""


@dataclass(frozen=True, slots=True)
class _Twin:
    hash_key: Callable[..., tuple[int, int]]
    put_key: Callable[..., int]
    get_key: Callable[..., int]
    put_rows: Callable[..., tuple[int, int, int, int]]
    get_rows: Callable[..., None]
    name: str

    def view(self, data: np.ndarray) -> Any:
        return data if self.name == "numba" else memoryview(data)

    def column(self, array: np.ndarray, dtype: Any) -> Any:
        column = np.ascontiguousarray(array, dtype)  # one numba specialisation per kernel
        return column if self.name == "numba" else column.tolist()


def _compile() -> _Twin:
    """numba versions of _map_kernels' functions (compiled lazily, cached on disk)."""
    ns = twins.compile_functions(vars(k), k.NUMBA_INLINED, k.NUMBA_COMPILED, k.NUMBA_OPTIONS)
    return _Twin(ns["hash_key"], ns["put_key"], ns["get_key"], ns["put_rows"], ns["get_rows"], "numba")


@cache
def get_kernels(pure: bool) -> MapKernels:
    """The interpreted twin (``pure=True``) or the numba one; ImportError if numba is missing.

    For tests and benchmarks that compare the twins in one process; everything else uses the
    twin chosen at import (``OffsetMap(..., kernels=None)``).
    """
    if pure:
        return _Twin(k.hash_key, k.put_key, k.get_key, k.put_rows, k.get_rows, "python")
    return _compile()


_ACTIVE: MapKernels = twins.choose(get_kernels)
ACTIVE_IMPLEMENTATION: str = _ACTIVE.name


def _key_buffer(key: bytes | bytearray | memoryview) -> np.ndarray:
    """``key`` as a read-only uint8 array (the arenas' type: one numba specialisation)."""
    data = np.frombuffer(key, np.uint8)
    data.flags.writeable = False
    return data


def key_hash(key: bytes | bytearray | memoryview, kernels: MapKernels | None = None) -> tuple[int, int]:
    """murmur3 x64_128 (seed 0) of ``key`` as the map computes it: ``(low, high)`` unsigned 64-bit
    halves, i.e. ``mmh3.hash128(key, 0, True, signed=False)`` is ``low | high << 64``."""
    twin = kernels or _ACTIVE
    h1, h2 = twin.hash_key(twin.view(_key_buffer(key)), 0, len(key))
    return int(h1) & k.MASK64, int(h2) & k.MASK64


# --- the map --------------------------------------------------------------------------------

class OffsetMap:
    """Key → latest offset for one cleaning round, in ``slots`` fixed 24-byte slots (module doc).

    ``latest_offset`` is the last offset the map covers: each put sets it (as Kafka's
    ``SkimpyOffsetMap.put``), the cleaner then moves it to the end of what it read; -1 when new or
    cleared. Not thread-safe (one map per cleaner thread).
    """

    def __init__(self, memory: int, load_factor: float = 0.9, *, kernels: MapKernels | None = None) -> None:
        """A map of ``memory // 24`` slots holding at most ``memory`` bytes of slots.

        ValueError when that is no slot, more than 2**31 slots (48 GiB), or ``load_factor`` is
        outside (0, 1].
        """
        slots = memory // SLOT_BYTES
        if not 1 <= slots <= MAX_SLOTS:
            raise ValueError(f"offset map memory {memory} gives {slots} slots of {SLOT_BYTES} bytes; "
                             f"need 1 to {MAX_SLOTS}")
        if not 0.0 < load_factor <= 1.0:
            raise ValueError(f"offset map load factor {load_factor} outside (0, 1]")
        self._k = kernels or _ACTIVE
        self.slots = slots
        self.load_factor = load_factor
        self.max_entries = int(slots * load_factor)  # Kafka: (slots * dupBufferLoadFactor).toInt
        self.latest_offset = -1
        self.size = 0
        self._allocate()
        # Per-chunk hashes and rows, and a sink (see _map_kernels.put_rows): 24 KiB.
        self._scratch = tuple(self._k.column(np.zeros(n, np.int64), np.int64) for n in (k.CHUNK,) * 3 + (1,))

    @classmethod
    def with_slots(cls, slots: int, load_factor: float = 0.75, *,
                   kernels: MapKernels | None = None) -> OffsetMap:
        """A map of exactly ``slots`` slots (Kafka tests' ``FakeOffsetMap(capacity)``)."""
        return cls(slots * SLOT_BYTES, load_factor, kernels=kernels)

    # --- sizes ---

    @property
    def memory_bytes(self) -> int:
        """Bytes allocated for slots (``slots * 24``; pages are committed as they are touched)."""
        return self._table.nbytes

    @property
    def bytes_per_entry(self) -> float:
        """Memory per key when the map holds ``max_entries`` keys: ``24 / load_factor``."""
        return SLOT_BYTES / self.load_factor

    @property
    def utilization(self) -> float:
        """``size / slots`` (Kafka's map utilization; the cleaner's buffer-utilization metric)."""
        return self.size / self.slots

    # --- contents ---

    def clear(self) -> None:
        """Forget every key; ``latest_offset`` back to -1.

        A map holding at least one key per page of slots (most pages touched) is zeroed in place,
        as Kafka's ``clear`` fills its buffer: its pages stay resident, and the next round does not
        fault them in again (a first touch costs far more per page than zeroing it). A sparser map
        gets a fresh zero-filled table instead: zeroing would touch pages it never used."""
        if self.size >= self.slots // SLOTS_PER_PAGE:
            self._table.fill(0)
        elif self.size:
            self._allocate()
        self.size = 0
        self.latest_offset = -1

    def put(self, key: bytes | bytearray | memoryview, offset: int) -> None:
        """Map ``key`` to ``offset`` (replacing its previous offset); ``latest_offset = offset``.

        Does not check the load factor (the cleaner does, see :meth:`put_records`).
        OffsetMapFullError when every slot is taken and ``key`` is new; ValueError for an offset
        below 0.
        """
        if offset < 0:
            raise ValueError(f"offset map offsets are >= 0, got {offset}")
        size = self._k.put_key(self._view, self.slots, self._k.view(_key_buffer(key)), 0, len(key),
                               offset, self.size)
        if size == k.FULL:
            raise OffsetMapFullError("offset map is full", slots=self.slots, offset=offset)
        self.size = int(size)
        self.latest_offset = offset

    def get(self, key: bytes | bytearray | memoryview) -> int:
        """The offset ``key`` maps to; -1 when absent."""
        return int(self._k.get_key(self._view, self.slots, self._k.view(_key_buffer(key)), 0, len(key)))

    def put_records(self, scan: ScanResult, eligible: np.ndarray) -> int:
        """Put the key and offset of every row of ``scan`` with ``eligible[row]``, in row order.

        Kafka's buildOffsetMap rule: before each eligible row with a key, if ``size >=
        max_entries`` stop and return that row (the map is full for this round, even if the row's
        key is already in it); rows with a null key are never put. Returns ``scan.record_count``
        when every row was done. ``latest_offset`` becomes the last offset put. Callers pass
        ``eligible`` = has a key, offset >= start, not aborted, not a control batch.
        ValueError when ``eligible`` has not one bool per row; CorruptRecordError (``position`` =
        the batch's in the scanned buffer) when an eligible keyed row has a negative offset, after
        putting the rows before it.
        """
        rows = scan.record_count
        if len(eligible) != rows:
            raise ValueError(f"eligible has {len(eligible)} entries for {rows} rows")
        twin = self._k
        stop, size, last, status = twin.put_rows(
            self._view, self.slots, self.max_entries, self.size, *self._arenas(scan),
            twin.column(eligible, np.bool_), rows, *self._scratch)
        self.size = int(size)
        if last >= 0:
            self.latest_offset = int(last)
        self._check_status(int(status), scan, int(stop))
        return int(stop)

    def get_records(self, scan: ScanResult) -> np.ndarray:
        """int64 per row of ``scan``: the offset the row's key maps to, -1 when absent or null."""
        twin, rows = self._k, scan.record_count
        out = twin.column(np.empty(rows, np.int64), np.int64)
        arena0, arena1, arena, key_pos, key_len, _ = self._arenas(scan)
        wanted = twin.column(scan.key_len >= 0, np.bool_)
        twin.get_rows(self._view, self.slots, arena0, arena1, arena, key_pos, key_len, wanted, rows, out,
                      *self._scratch)
        return np.asarray(out, np.int64)

    # --- internals ---

    def _allocate(self) -> None:
        self._table = np.zeros(self.slots * k.SLOT_WORDS, np.int64)
        self._view = self._k.view(self._table)

    def _arenas(self, scan: ScanResult) -> tuple[Any, ...]:
        """The scan's arenas and key columns as the kernels take them: ``(arena0, arena1, arena,
        key_pos, key_len, offset)``."""
        twin, arenas = self._k, scan.arenas
        first = _read_only(arenas[0])
        second = _read_only(arenas[1]) if len(arenas) > 1 else first
        return (twin.view(first), twin.view(second), twin.column(scan.arena, np.int16),
                twin.column(scan.key_pos, np.int64), twin.column(scan.key_len, np.int32),
                twin.column(scan.offset, np.int64))

    def _check_status(self, status: int, scan: ScanResult, stop: int) -> None:
        if status == k.NEGATIVE_OFFSET:
            raise CorruptRecordError("record with a negative offset", offset=int(scan.offset[stop]),
                                     position=int(scan.batch_position[scan.batch[stop]]))
        if status == k.FULL:
            raise OffsetMapFullError("offset map is full", slots=self.slots,
                                     offset=int(scan.offset[stop]))


def _read_only(data: np.ndarray) -> np.ndarray:
    """A read-only view of a uint8 arena (one numba specialisation whatever the scan's input)."""
    if data.flags.writeable:
        data = data.view()
        data.flags.writeable = False
    return data
