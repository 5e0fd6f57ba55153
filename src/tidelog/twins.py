"""Choosing between a numba-compiled kernel and its interpreted twin (STYLE.md convention 4).

Each hot-path module exposes ``get_kernels(pure: bool)`` returning one implementation of its
kernel Protocol; :func:`choose` picks one once, at import: the interpreted twin when
``TIDELOG_PURE_PYTHON=1`` or when numba (or its llvmlite library) cannot load, else the compiled one.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TypeVar

PURE_PYTHON_ENV = "TIDELOG_PURE_PYTHON"

K = TypeVar("K")


def choose(get_kernels: Callable[[bool], K]) -> K:
    """``get_kernels(pure=True)`` if forced or if compiling fails to import, else ``get_kernels(False)``."""
    if os.environ.get(PURE_PYTHON_ENV, "") == "1":
        return get_kernels(True)
    try:
        return get_kernels(False)
    except (ImportError, OSError):  # numba or its llvmlite shared library is unavailable
        return get_kernels(True)
