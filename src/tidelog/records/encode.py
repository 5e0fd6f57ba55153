"""Records encoded in bulk: columns of keys, values and headers to v2 record bytes, one kernel call.

The producer-side twin of :mod:`tidelog.records.scan`: ``tidelog produce`` and the Spark sink
hand whole columns (numpy lengths and packed byte buffers) to kernels that write every record of
many batches at once (:func:`encode_records`), and build header sections the same way
(:func:`encode_header_sections`). The kernels (``_encode_kernels.py``, byte layout there) exist as
twins behind :class:`EncodeKernels`: compiled with numba (cached on disk, GIL released) or the
very same functions interpreted; chosen once at import (``TIDELOG_PURE_PYTHON=1`` forces the
interpreted one). :data:`ACTIVE_IMPLEMENTATION` says which; both give byte-identical output.

Column conventions: ``*_len`` columns are int64, one entry per record; a negative key or value
length is null (it takes no bytes in its buffer); a header length of 0 means no headers. Buffers
hold the non-null entries back to back, in record order.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any, Protocol

import numpy as np

from tidelog import twins
from tidelog.records import _encode_kernels as _k

# What a record adds to key + value + max(headers, 1): length varint 5, attributes 1, timestamp
# delta 9 (|delta| < 2**62), offset delta 5, key and value length varints 5 + 5.
RECORD_OVERHEAD_BOUND = 30
# What a header adds to its key and value: two length varints of 5 bytes.
HEADER_OVERHEAD_BOUND = 10


class EncodeKernels(Protocol):
    """The contract of both twins of :mod:`tidelog.records._encode_kernels` and how each takes its
    buffers and columns: numpy arrays (numba) or memoryviews, bytearrays and lists (interpreted)."""

    name: str  # "numba" or "python"

    def buffer(self, data: Any) -> Any:
        """``data`` (bytes-like) as the kernels read it (no copy)."""

    def output(self, size: int) -> Any:
        """A fresh writable byte buffer of ``size`` bytes."""

    def column(self, values: np.ndarray) -> Any:
        """A numpy int64 column as the kernels take it."""

    def encode_records(self, *args: Any) -> int:
        """See :func:`tidelog.records._encode_kernels.encode_records`."""

    def encode_header_sections(self, *args: Any) -> int:
        """See :func:`tidelog.records._encode_kernels.encode_header_sections`."""


@dataclass(frozen=True, slots=True)
class _Twin:
    encode_records: Callable[..., int]
    encode_header_sections: Callable[..., int]
    name: str

    def buffer(self, data: Any) -> Any:
        return np.frombuffer(data, np.uint8) if self.name == "numba" else memoryview(data).cast("B")

    def output(self, size: int) -> Any:
        return np.empty(size, np.uint8) if self.name == "numba" else bytearray(size)

    def column(self, values: np.ndarray) -> Any:
        values = np.asarray(values, np.int64)
        return np.ascontiguousarray(values) if self.name == "numba" else values.tolist()


def _compile() -> _Twin:
    namespace = twins.compile_functions(vars(_k), (), _k.NUMBA_HELPERS + _k.NUMBA_KERNELS, _k.NUMBA_OPTIONS)
    return _Twin(namespace["encode_records"], namespace["encode_header_sections"], "numba")


@cache
def get_kernels(pure: bool) -> EncodeKernels:
    """The interpreted twin (``pure=True``) or the numba one (ImportError without numba)."""
    return _Twin(_k.encode_records, _k.encode_header_sections, "python") if pure else _compile()


_ACTIVE: EncodeKernels = twins.choose(get_kernels)
ACTIVE_IMPLEMENTATION: str = _ACTIVE.name


def record_size_bounds(key_len: np.ndarray, value_len: np.ndarray, header_len: np.ndarray) -> np.ndarray:
    """Upper bounds of each record's encoded size (int64)."""
    return np.maximum(key_len, 0) + np.maximum(value_len, 0) + np.maximum(header_len, 1) + RECORD_OVERHEAD_BOUND


def encode_records(key_data: Any, key_len: np.ndarray, value_data: Any, value_len: np.ndarray,
                   header_data: Any, header_len: np.ndarray, offset_delta: np.ndarray, ts_delta: np.ndarray,
                   order: np.ndarray, kernels: EncodeKernels | None = None) -> tuple[bytes, np.ndarray]:
    """Every record, in the order ``order`` (a permutation of ``range(len(key_len))``), each with
    its offset and timestamp delta (|delta| < 2**62), back to back: ``(bytes, ends)`` where
    ``ends[j]`` is the byte after the j-th written record."""
    k = kernels or _ACTIVE
    n = len(key_len)
    capacity = int(record_size_bounds(key_len, value_len, header_len).sum()) + 1
    out = k.output(capacity)
    scratch = [k.column(np.zeros(n, np.int64)) for _ in range(4)]
    size = k.encode_records(
        k.buffer(key_data), k.column(key_len), k.buffer(value_data), k.column(value_len), k.buffer(header_data),
        k.column(header_len), k.column(offset_delta), k.column(ts_delta), k.column(order), n, *scratch[:3], out,
        scratch[3])
    return bytes(out[:size]), np.asarray(scratch[3], np.int64)


def encode_header_sections(counts: np.ndarray, key_data: Any, key_len: np.ndarray, value_data: Any,
                           value_len: np.ndarray, kernels: EncodeKernels | None = None) -> tuple[bytes, np.ndarray]:
    """Header sections of records having ``counts[i]`` headers each (0: none), their header keys
    and values packed in record order (``key_len`` >= 0: null header keys are the caller's to
    reject; a negative ``value_len`` is a null value): ``(sections back to back, lengths)``, a
    record without headers taking 0 bytes. Pass the result to :func:`encode_records`."""
    k = kernels or _ACTIVE
    counts = np.asarray(counts, np.int64)
    n = len(counts)
    capacity = (int(np.maximum(key_len, 0).sum() + np.maximum(value_len, 0).sum())
                + HEADER_OVERHEAD_BOUND * len(key_len) + 5 * n + 1)
    out = k.output(capacity)
    lengths = k.column(np.zeros(n, np.int64))
    size = k.encode_header_sections(k.column(counts), n, k.buffer(key_data), k.column(key_len),
                                    k.buffer(value_data), k.column(value_len), out, lengths)
    return bytes(out[:size]), np.asarray(lengths, np.int64)
