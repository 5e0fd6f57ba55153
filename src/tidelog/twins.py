"""Choosing between a numba-compiled kernel and its interpreted twin (STYLE.md convention 4).

Each hot-path module exposes ``get_kernels(pure: bool)`` returning one implementation of its
kernel Protocol (the compiled one built by :func:`compile_functions`); :func:`choose` picks one
once, at import: the interpreted twin when
``TIDELOG_PURE_PYTHON=1`` or when numba (or its llvmlite library) cannot load, else the compiled one.
"""

from __future__ import annotations

import hashlib
import inspect
import os
import types
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

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


def compile_functions(source: Mapping[str, Any], inlined: Sequence[str], compiled: Sequence[str],
                      options: Mapping[str, Any], dependencies: Sequence[types.ModuleType] = ()) -> dict[str, Any]:
    """numba versions of the functions named ``inlined`` and ``compiled`` in ``source`` (a
    module's globals), in a copy of those globals in which every name refers to the compiled
    callee; the module keeps the plain functions the interpreted twin runs. ``inlined`` ones are
    inlined into their callers. Compiled functions are cached on disk when a cache dir is writable,
    keyed by the content of the modules ``dependencies`` too (:func:`key_cache_by`).
    ImportError when numba is missing."""
    import numba  # deferred: ~0.5 s, and absent in pure-Python installs

    namespace = dict(source)
    for name in (*inlined, *compiled):
        plain = source[name]
        clone = types.FunctionType(plain.__code__, namespace, plain.__name__, plain.__defaults__)
        clone.__qualname__ = plain.__qualname__
        settings = {**options, "inline": "always" if name in inlined else "never"}
        try:
            namespace[name] = numba.njit(cache=True, **settings)(clone)
        except RuntimeError:  # no writable cache location: compile in every process instead
            namespace[name] = numba.njit(**settings)(clone)
    if dependencies:
        key_cache_by(namespace, compiled, dependencies)
    return namespace


def key_cache_by(namespace: dict[str, Any], names: Sequence[str], dependencies: Sequence[types.ModuleType]) -> None:
    """Key the on-disk numba cache of the functions ``names`` by the content of the modules
    ``dependencies`` too: numba keys it by the function's own file and bytecode only, while a
    compiled function embeds the code of the callees it inlines or links (other modules') and the
    values of the module-level constants it reads (records/layout.py's).
    Without numba's cache internals, nothing changes (the cache then goes stale with an edit of
    one of those files alone)."""
    try:
        from numba.core.caching import FunctionCache

        digest = hashlib.sha256("".join(inspect.getsource(module) for module in dependencies).encode()).hexdigest()

        class _KeyedCache(FunctionCache):  # type: ignore[misc]
            def _index_key(self, sig: Any, codegen: Any) -> Any:
                return (*super()._index_key(sig, codegen), digest)

        for name in names:
            dispatcher = namespace[name]
            if getattr(dispatcher, "_cache", None) is not None and dispatcher._cache.__class__ is FunctionCache:
                dispatcher._cache = _KeyedCache(dispatcher.py_func)
    except (ImportError, AttributeError, OSError, TypeError):
        return
