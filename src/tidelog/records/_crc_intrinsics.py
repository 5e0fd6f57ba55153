"""SSE4.2's ``crc32`` instructions as numba intrinsics, for the compiled CRC kernel only.

Private to :mod:`tidelog.records.scan`. ``_crc_kernels.batch_crcs`` is written against
``crc32c_u8(crc, byte)`` and ``crc32c_u64(crc, word)``, whose interpreted definitions there are
the specification (table-driven CRC-32C steps, no pre/post inversion); compiled, they become the
``crc32b`` / ``crc32q`` instructions, which compute exactly that. Imported only once numba is.
"""

from __future__ import annotations

import platform
from typing import Any


def sse42_crc32c() -> dict[str, Any] | None:
    """``{"crc32c_u8": ..., "crc32c_u64": ...}`` as numba intrinsics (int64 in, int64 out, the
    CRC in the low 32 bits); None unless this is an x86-64 CPU with SSE4.2."""
    from llvmlite import binding

    if platform.machine().lower() not in ("x86_64", "amd64") or not binding.get_host_cpu_features().get("sse4.2"):
        return None
    return {"crc32c_u8": _crc32_intrinsic(8), "crc32c_u64": _crc32_intrinsic(64)}


def _crc32_intrinsic(bits: int) -> Any:
    """The intrinsic for LLVM's ``llvm.x86.sse42.crc32.{32.8,64.64}``: ``f(crc, data)`` with
    ``data``'s low ``bits`` bits."""
    from llvmlite import ir
    from numba.core import cgutils, types
    from numba.extending import intrinsic

    i32, i64 = ir.IntType(32), ir.IntType(64)
    name, width = ("llvm.x86.sse42.crc32.32.8", i32) if bits == 8 else ("llvm.x86.sse42.crc32.64.64", i64)

    def crc32(typingctx: Any, crc: Any, data: Any) -> Any:
        def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
            crc_arg = builder.trunc(args[0], width) if width is i32 else args[0]
            data_arg = builder.trunc(args[1], ir.IntType(bits)) if bits < 64 else args[1]
            fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(width, [width, ir.IntType(bits)]),
                                                name)
            result = builder.call(fn, [crc_arg, data_arg])
            return builder.zext(result, i64) if width is i32 else result
        if not (isinstance(crc, types.Integer) and isinstance(data, types.Integer)):
            return None
        return types.int64(crc, data), codegen

    crc32.__name__ = f"crc32c_u{bits}"
    return intrinsic(crc32)
