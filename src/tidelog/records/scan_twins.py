"""The two twins of the record-scan kernels (``_scan_kernels.py``): the numba one and the
interpreted one, behind one :class:`ScanKernels` contract (how each wants its buffers and
columns). :mod:`tidelog.records.scan` chooses one at import (:func:`tidelog.twins.choose`: the
environment can force the interpreted twin); tests and benchmarks take both from
:func:`get_kernels`. Thread-safe: the twins hold no state.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any, Protocol

import numpy as np
from crc32c import crc32c

from tidelog import twins
from tidelog.records import _crc_kernels as c
from tidelog.records import _scan_kernels as k
from tidelog.records import layout

Buffer = Any  # what a twin's kernels read: a numpy uint8 array (numba) or a memoryview (python)
Column = Any  # what they read and write per row/batch: a numpy array (numba) or a list (python)
ColumnSpec = tuple[tuple[str, type[np.integer[Any]]], ...]


class ScanKernels(Protocol):
    """The contract both twins implement: the two kernels of _scan_kernels.py, plus how the twin
    wants its buffers and columns (numpy compiled; memoryview and lists interpreted)."""

    name: str  # "numba" or "python"

    def view(self, data: np.ndarray) -> Buffer:
        """The read-only uint8 array ``data`` as the kernels read it (no copy)."""

    def columns(self, size: int, spec: ColumnSpec) -> tuple[Column, ...]:
        """Fresh output columns of ``size`` rows, one per ``(name, dtype)`` of ``spec``."""

    def adopt(self, array: np.ndarray) -> Column:
        """A numpy array as a kernel input column."""

    def to_numpy(self, column: Column, dtype: type[np.integer[Any]]) -> np.ndarray:
        """A kernel column as a numpy array of ``dtype``."""

    def walk_batches(self, buf: Buffer, start: int, end: int, limit: int,
                     batches: tuple[Column, ...]) -> tuple[int, int, int, int]:
        """``(batch count, end position, error, error position)``; see _scan_kernels.walk_batches."""

    def decode_batches(self, buf: Buffer, arena: int, batch_ids: Column, area_begin: Column,
                       area_end: Column, first_row: Column, batches: tuple[Column, ...],
                       records: tuple[Column, ...]) -> tuple[int, int, int]:
        """``(error, error position, failing entry)``; see _scan_kernels.decode_batches."""

    def summarize_records(self, buf: Buffer, pos: int, end: int, count: int, base_timestamp: int,
                          log_append_time: bool) -> tuple[int, int, int, int, int, int, int]:
        """See _scan_kernels.summarize_records."""

    def check_produced_batch(self, buf: bytes, size: int, crc_checked: bool, max_message_bytes: int,
                             compact: bool, before_max_ms: int, after_max_ms: int,
                             now: int) -> tuple[int, int, int, int]:
        """See _scan_kernels.check_produced_batch."""

    def batch_crcs(self, data: np.ndarray, position: np.ndarray, size: np.ndarray) -> np.ndarray:
        """int64 CRC-32C of each batch's CRC range ``[position + 21, position + size)`` of the
        read-only uint8 array ``data`` (bounds checked by the caller)."""


def _library_crcs(data: np.ndarray, position: np.ndarray, size: np.ndarray) -> np.ndarray:
    """:meth:`ScanKernels.batch_crcs` with one call of the ``crc32c`` library per batch."""
    view = memoryview(data)
    return np.fromiter((crc32c(view[p + k.CRC_START:p + n]) for p, n in zip(position.tolist(), size.tolist())),
                       np.int64, count=len(position))


@dataclass(frozen=True, slots=True)
class _CompiledKernels:
    """The numba twin: kernels compiled from _scan_kernels, numpy buffers and columns."""

    walk_batches: Callable[..., tuple[int, int, int, int]]
    decode_batches: Callable[..., tuple[int, int, int]]
    summarize_records: Callable[..., tuple[int, int, int, int, int, int, int]]
    check_produced_batch: Callable[..., tuple[int, int, int, int]]
    crc_kernel: Callable[..., None] | None  # _crc_kernels.batch_crcs on SSE4.2, else None
    name: str = "numba"

    def view(self, data: np.ndarray) -> Buffer:
        return data

    def batch_crcs(self, data: np.ndarray, position: np.ndarray, size: np.ndarray) -> np.ndarray:
        if self.crc_kernel is None:
            return _library_crcs(data, position, size)
        out = np.empty(len(position), np.int64)
        self.crc_kernel(data, np.ascontiguousarray(position, np.int64), np.ascontiguousarray(size, np.int64), out)
        return out

    def columns(self, size: int, spec: ColumnSpec) -> tuple[Column, ...]:
        return tuple(np.empty(size, dtype) for _, dtype in spec)

    def adopt(self, array: np.ndarray) -> Column:
        return np.ascontiguousarray(array)  # one numba specialisation: C-contiguous

    def to_numpy(self, column: Column, dtype: type[np.integer[Any]]) -> np.ndarray:
        return np.asarray(column, dtype)


@dataclass(frozen=True, slots=True)
class _InterpretedKernels:
    """The pure-Python twin: the same functions, on a memoryview and Python lists (3x faster
    interpreted than numpy element access, and exact ints with no numpy scalar semantics)."""

    walk_batches: Callable[..., tuple[int, int, int, int]] = k.walk_batches
    decode_batches: Callable[..., tuple[int, int, int]] = k.decode_batches
    summarize_records: Callable[..., tuple[int, int, int, int, int, int, int]] = k.summarize_records
    check_produced_batch: Callable[..., tuple[int, int, int, int]] = k.check_produced_batch
    name: str = "python"

    def view(self, data: np.ndarray) -> Buffer:
        return memoryview(data)

    def batch_crcs(self, data: np.ndarray, position: np.ndarray, size: np.ndarray) -> np.ndarray:
        return _library_crcs(data, position, size)  # k.batch_crcs interpreted is ~1 MB/s

    def columns(self, size: int, spec: ColumnSpec) -> tuple[Column, ...]:
        return tuple([0] * size for _ in spec)

    def adopt(self, array: np.ndarray) -> Column:
        return array.tolist()

    def to_numpy(self, column: Column, dtype: type[np.integer[Any]]) -> np.ndarray:
        return np.array(column, dtype)


def _compile_kernels() -> _CompiledKernels:
    """numba versions of _scan_kernels' functions (compiled lazily, cached on disk)."""
    namespace = twins.compile_functions({**vars(c), **vars(k)}, k.NUMBA_INLINED, k.NUMBA_COMPILED, k.NUMBA_OPTIONS,
                                        (k, c, layout))
    return _CompiledKernels(namespace["walk_batches"], namespace["decode_batches"], namespace["summarize_records"],
                            namespace["check_produced_batch"], _compile_crc_kernel())


def _compile_crc_kernel() -> Callable[..., None] | None:
    """_crc_kernels.batch_crcs compiled with SSE4.2's crc32 instructions in place of
    crc32c_u8/crc32c_u64 (one kernel call per scan instead of one library call per batch:
    the per-call cost is most of the time for 4 KB batches); None where the CPU lacks them."""
    from tidelog.records import _crc_intrinsics

    intrinsics = _crc_intrinsics.sse42_crc32c()
    if intrinsics is None:
        return None
    namespace = twins.compile_functions({**vars(c), **intrinsics}, c.NUMBA_CRC_INLINED, c.NUMBA_CRC_COMPILED,
                                        k.NUMBA_OPTIONS, (c, layout, _crc_intrinsics))
    return namespace["batch_crcs"]


@cache
def get_kernels(pure: bool) -> ScanKernels:
    """The interpreted twin (``pure=True``) or the numba one; ImportError if numba is missing.

    For tests and benchmarks that compare the twins in one process; everything else calls
    :func:`scan_batches`, which uses the twin chosen at import.
    """
    if pure:
        return _InterpretedKernels()
    return _compile_kernels()
