"""libc ``pwrite``, ``pwritev`` and ``clock_gettime``, and big-endian stores at an address, as numba intrinsics, for the compiled leader append kernel only.

Private to :mod:`tidelog.storage.append_state`. ``_append_kernel.append_to_tail`` is written against
``pwrite_patched(fd, buf, size, position, base_offset, batch_length, leader_epoch)``, whose
interpreted definition there is the specification (the batch written with its 16-byte head
replaced; ``-errno`` on failure). Compiled, it becomes that very call into libc, made by the
kernel without the GIL and without a Python object on the way: a batch of at most
WRITE_BUFFER_BYTES is copied into the kernel's stack frame and its head patched there (one
``pwrite``); a larger one is written by ``pwritev`` of a patched head in the frame and the rest
in place. Likewise ``wall_clock_ms()``, the system clock in milliseconds, without a Python call,
and ``store_be32``/``store_be64(address, value)`` and ``release_fence()``, which write an index
entry into its file's mapping before its count (``_append_kernel.append_index_entries``).

Why not a ctypes function pointer: numba cannot cache a function that holds one (its address
changes from process to process); the symbols named here are resolved when the cached code is
loaded. Linux only (``__errno_location`` is how glibc and musl expose ``errno``; 64-bit ``timespec``);
imported only once numba is.
"""

from __future__ import annotations

import sys
from typing import Any

from tidelog.storage._append_kernel import PATCHED_PREFIX, WRITE_BUFFER_BYTES


def libc_calls() -> dict[str, Any] | None:
    """``{"pwrite_patched": ..., "wall_clock_ms": ...}`` as numba intrinsics; None off Linux, or
    when this process has no ``pwrite``, ``pwritev``, ``__errno_location`` and ``clock_gettime``
    to link to."""
    from llvmlite import binding

    if not sys.platform.startswith("linux") or sys.maxsize < 2**63 - 1:  # the struct layouts below are 64-bit
        return None
    if not all(binding.address_of_symbol(name) for name in ("pwrite", "pwritev", "__errno_location", "clock_gettime")):
        return None
    return {"pwrite_patched": _pwrite_patched_intrinsic(), "wall_clock_ms": _wall_clock_ms_intrinsic(),
            "store_be32": _store_big_endian_intrinsic(32), "store_be64": _store_big_endian_intrinsic(64),
            "release_fence": _release_fence_intrinsic()}


def _release_fence_intrinsic() -> Any:
    """``release_fence()``: LLVM's ``fence release``."""
    from numba.core import types
    from numba.extending import intrinsic

    def release_fence(typingctx: Any) -> Any:
        def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
            builder.fence("release")
            return context.get_dummy_value()
        return types.none(), codegen

    return intrinsic(release_fence)


def _store_big_endian_intrinsic(bits: int) -> Any:
    """``store_be32``/``store_be64(address, value)``: one byte-swapped store at an integer address
    (an index file's mapping; its owner keeps the address valid, see storage.index)."""
    from llvmlite import ir
    from numba.core import types
    from numba.extending import intrinsic

    word = ir.IntType(bits)

    def store(typingctx: Any, address: Any, value: Any) -> Any:
        def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
            address_arg, value_arg = (context.cast(builder, arg, kind, types.int64)
                                      for arg, kind in zip(args, signature.args))
            bswap = builder.module.declare_intrinsic("llvm.bswap", [word])
            swapped = builder.call(bswap, [builder.trunc(value_arg, word) if bits < 64 else value_arg])
            # align 1: a time index entry's fields sit at 12-byte steps
            builder.store(swapped, builder.inttoptr(address_arg, word.as_pointer()), align=1)
            return context.get_dummy_value()
        if not (isinstance(address, types.Integer) and isinstance(value, types.Integer)):
            return None
        return types.none(address, value), codegen

    return intrinsic(store)


_CLOCK_REALTIME = 0  # <time.h> on Linux


def _wall_clock_ms_intrinsic() -> Any:
    from llvmlite import ir
    from numba.core import cgutils, types
    from numba.extending import intrinsic

    i32, i64 = ir.IntType(32), ir.IntType(64)
    timespec = ir.LiteralStructType([i64, i64])  # struct timespec {time_t tv_sec; long tv_nsec;} (64-bit)

    def wall_clock_ms(typingctx: Any) -> Any:
        def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
            now = cgutils.alloca_once(builder, timespec)
            clock_gettime = cgutils.get_or_insert_function(
                builder.module, ir.FunctionType(i32, [i32, timespec.as_pointer()]), "clock_gettime")
            builder.call(clock_gettime, [ir.Constant(i32, _CLOCK_REALTIME), now])  # cannot fail for this clock
            zero, one = ir.Constant(i32, 0), ir.Constant(i32, 1)
            seconds = builder.load(builder.gep(now, [zero, zero]))
            nanoseconds = builder.load(builder.gep(now, [zero, one]))  # in [0, 1e9): a signed division is exact
            return builder.add(builder.mul(seconds, ir.Constant(i64, 1000)),
                               builder.sdiv(nanoseconds, ir.Constant(i64, 1_000_000)))
        return types.int64(), codegen

    return intrinsic(wall_clock_ms)


def _pwrite_patched_intrinsic() -> Any:
    from llvmlite import ir
    from numba.core import cgutils, types
    from numba.extending import intrinsic

    i1, i8, i32, i64 = ir.IntType(1), ir.IntType(8), ir.IntType(32), ir.IntType(64)
    bytes_ptr = i8.as_pointer()

    def pwrite_patched(typingctx: Any, fd: Any, buf: Any, size: Any, position: Any, base_offset: Any,
                       batch_length: Any, leader_epoch: Any) -> Any:
        def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
            fd_arg, buf_arg, size_arg, position_arg, base_arg, length_arg, epoch_arg = args
            module = builder.module
            data = builder.bitcast(context.make_array(signature.args[1])(context, builder, buf_arg).data, bytes_ptr)
            fields = (base_arg, length_arg, epoch_arg)
            fd32 = builder.trunc(fd_arg, i32)
            # Frame memory (alloca_once: in the entry block, so once per call); the caller bounds size.
            copy = builder.bitcast(cgutils.alloca_once(builder, ir.ArrayType(i8, WRITE_BUFFER_BYTES)), bytes_ptr)
            head = builder.bitcast(cgutils.alloca_once(builder, ir.ArrayType(i8, PATCHED_PREFIX)), bytes_ptr)
            result = cgutils.alloca_once(builder, i64)
            small = builder.icmp_signed("<=", size_arg, ir.Constant(i64, WRITE_BUFFER_BYTES))
            with builder.if_else(small) as (copied, gathered):
                with copied:  # the batch copied into this frame, its head overwritten, one pwrite
                    builder.call(module.declare_intrinsic("llvm.memcpy", [bytes_ptr, bytes_ptr, i64]),
                                 [copy, data, size_arg, ir.Constant(i1, 0)])
                    _patch_head(builder, copy, fields)
                    pwrite = cgutils.get_or_insert_function(
                        module, ir.FunctionType(i64, [i32, bytes_ptr, i64, i64]), "pwrite")
                    builder.store(builder.call(pwrite, [fd32, copy, size_arg, position_arg]), result)
                with gathered:  # the patched head from this frame, the rest in place: one pwritev
                    _patch_head(builder, head, fields)
                    builder.store(_pwritev_head_and_rest(builder, fd32, head, data, size_arg, position_arg), result)
            return _result_or_minus_errno(builder, builder.load(result))

        integers = (fd, size, position, base_offset, batch_length, leader_epoch)
        if not (isinstance(buf, types.Bytes) and all(isinstance(a, types.Integer) for a in integers)):
            return None
        return types.int64(fd, buf, size, position, base_offset, batch_length, leader_epoch), codegen

    assert PATCHED_PREFIX == 16  # the three fields stored by _patch_head
    return intrinsic(pwrite_patched)


def _patch_head(builder: Any, head: Any, fields: tuple[Any, Any, Any]) -> None:
    """Store baseOffset (int64), batchLength and partitionLeaderEpoch (int32), big-endian, at ``head``."""
    from llvmlite import ir

    i32, i64 = ir.IntType(32), ir.IntType(64)
    bswap64 = builder.module.declare_intrinsic("llvm.bswap", [i64])
    bswap32 = builder.module.declare_intrinsic("llvm.bswap", [i32])
    base, length, epoch = fields

    def field(byte: int, kind: Any) -> Any:
        return builder.bitcast(builder.gep(head, [ir.Constant(i64, byte)]), kind.as_pointer())
    builder.store(builder.call(bswap64, [base]), field(0, i64))
    builder.store(builder.call(bswap32, [builder.trunc(length, i32)]), field(8, i32))
    builder.store(builder.call(bswap32, [builder.trunc(epoch, i32)]), field(12, i32))


def _pwritev_head_and_rest(builder: Any, fd32: Any, head: Any, data: Any, size: Any, position: Any) -> Any:
    """One ``pwritev`` of the patched ``head`` (PATCHED_PREFIX bytes) and ``data`` past its own head."""
    from llvmlite import ir
    from numba.core import cgutils

    i8, i32, i64 = ir.IntType(8), ir.IntType(32), ir.IntType(64)
    iovec = ir.LiteralStructType([i8.as_pointer(), i64])  # struct iovec {void *iov_base; size_t iov_len;} (64-bit)
    iovecs = cgutils.alloca_once(builder, ir.ArrayType(iovec, 2))
    prefix = ir.Constant(i64, PATCHED_PREFIX)

    def set_iovec(i: int, base: Any, length: Any) -> None:
        slot = builder.gep(iovecs, [ir.Constant(i32, 0), ir.Constant(i32, i)])
        builder.store(base, builder.gep(slot, [ir.Constant(i32, 0), ir.Constant(i32, 0)]))
        builder.store(length, builder.gep(slot, [ir.Constant(i32, 0), ir.Constant(i32, 1)]))
    set_iovec(0, head, prefix)
    set_iovec(1, builder.gep(data, [prefix]), builder.sub(size, prefix))
    pwritev = cgutils.get_or_insert_function(
        builder.module, ir.FunctionType(i64, [i32, iovec.as_pointer(), i32, i64]), "pwritev")
    first = builder.gep(iovecs, [ir.Constant(i32, 0), ir.Constant(i32, 0)])
    return builder.call(pwritev, [fd32, first, ir.Constant(i32, 2), position])


def _result_or_minus_errno(builder: Any, written: Any) -> Any:
    """``written`` when not negative, else ``-errno``. errno is read unconditionally (a thread-local
    load) and used only when the call failed."""
    from llvmlite import ir
    from numba.core import cgutils

    i32, i64 = ir.IntType(32), ir.IntType(64)
    errno_location = cgutils.get_or_insert_function(builder.module, ir.FunctionType(i32.as_pointer(), []),
                                                    "__errno_location")
    errno = builder.sext(builder.load(builder.call(errno_location, [])), i64)
    return builder.select(builder.icmp_signed("<", written, ir.Constant(i64, 0)), builder.neg(errno), written)
