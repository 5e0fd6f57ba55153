"""The two twins of the cleaner's records-area kernel (``_retain_kernels.write_records``): the
numba one and the interpreted one, behind one :class:`RetainKernels` contract, chosen once at
import (:func:`tidelog.twins.choose`; the environment can force the interpreted twin). Callers
take :data:`ACTIVE`; tests take both from :func:`get_kernels`.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any, Protocol

import numpy as np

from tidelog import twins
from tidelog.cleaner import _retain_kernels as rk


class RetainKernels(Protocol):
    """Both twins of ``_retain_kernels.write_records`` and how each takes buffers and columns:
    numpy arrays (numba) or memoryviews, a bytearray and lists (interpreted)."""

    name: str  # "numba" or "python"

    def buffer(self, data: np.ndarray) -> Any:
        """A read-only uint8 array as the kernel reads it (no copy)."""

    def output(self, size: int) -> Any:
        """A writable byte buffer of ``size`` bytes."""

    def column(self, values: np.ndarray) -> Any:
        """An integer column as the kernel reads it."""

    def output_column(self, size: int) -> Any:
        """An int64 column of ``size`` rows the kernel writes."""

    def write_records(self, *args: Any) -> tuple[int, int]:
        """See ``_retain_kernels.write_records``."""


@dataclass(frozen=True, slots=True)
class _Twin:
    write_records: Any
    name: str

    def buffer(self, data: np.ndarray) -> Any:
        return data if self.name == "numba" else memoryview(data)

    def output(self, size: int) -> Any:
        return np.empty(size, np.uint8) if self.name == "numba" else bytearray(size)

    def column(self, values: np.ndarray) -> Any:
        if self.name == "numba":
            return np.ascontiguousarray(values, np.int64)
        return np.asarray(values).tolist()

    def output_column(self, size: int) -> Any:
        return np.zeros(size, np.int64) if self.name == "numba" else [0] * size


@cache
def get_kernels(pure: bool) -> RetainKernels:
    """The interpreted twin (``pure=True``) or the numba one (ImportError without numba)."""
    if pure:
        return _Twin(rk.write_records, "python")
    namespace = twins.compile_functions(vars(rk), rk.NUMBA_INLINED, rk.NUMBA_COMPILED, rk.NUMBA_OPTIONS)
    return _Twin(namespace["write_records"], "numba")


ACTIVE: RetainKernels = twins.choose(get_kernels)
ACTIVE_IMPLEMENTATION: str = ACTIVE.name
