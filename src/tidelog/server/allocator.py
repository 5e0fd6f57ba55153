"""How the broker process's C allocator treats freed memory (glibc's ``mallopt``), set once by
``tidelog serve`` from ``tidelog.server.allocator.retain.bytes``.

Why: a large request passes through buffers of its size (the socket reads, the stream's buffer,
the frame). glibc gives a block above its mmap threshold (128 KiB at first, raised as such blocks
are freed) a mapping of its own, and returns the free memory at its heap's top to the kernel
beyond its trim threshold (twice that), so each large request touched fresh pages again: with
librdkafka at its defaults (1 MB Produce requests) the broker took ~2.5 minor page faults per KiB
produced, and faulting was most of its CPU in that run. Blocks up to :data:`MMAP_THRESHOLD_BYTES`
served from the heap, and up to ``retain`` bytes of free memory kept at its top, bring that to
none (``docs/architecture.md`` has the figures). The JVM keeps its whole heap; this keeps at most
``retain`` bytes beyond what is in use. With another C library (musl), or ``retain`` 0, nothing changes.
"""

from __future__ import annotations

import ctypes
import logging

log = logging.getLogger(__name__)

M_TRIM_THRESHOLD = -1  # glibc's malloc.h
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_BYTES = 4 << 20  # above Kafka clients' default request size (1 MiB); glibc's ceiling is 32 MiB


def retain_freed_memory(retain_bytes: int) -> bool:
    """Serve blocks up to :data:`MMAP_THRESHOLD_BYTES` from the heap and keep up to
    ``retain_bytes`` of freed memory at its top for reuse (module doc); False when nothing was
    changed (``retain_bytes`` <= 0, or a C library other than glibc). Process-wide and for the
    rest of the process's life: only the process's owner calls it (``tidelog serve``)."""
    if retain_bytes <= 0:
        return False
    libc = _glibc()
    if libc is None:
        log.debug("not glibc: the C allocator keeps its own handling of freed memory")
        return False
    took = libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES) == 1
    took = took and libc.mallopt(M_TRIM_THRESHOLD, retain_bytes) == 1
    if not took:
        log.warning("glibc refused mallopt(M_MMAP_THRESHOLD=%d, M_TRIM_THRESHOLD=%d): large requests will "
                    "fault in fresh pages", MMAP_THRESHOLD_BYTES, retain_bytes)
    return took


def _glibc() -> ctypes.CDLL | None:
    """The process's C library when it is glibc (it exports ``gnu_get_libc_version``)."""
    try:
        libc = ctypes.CDLL(None)
    except OSError:
        return None
    if not hasattr(libc, "gnu_get_libc_version") or not hasattr(libc, "mallopt"):
        return None
    libc.mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    libc.mallopt.restype = ctypes.c_int
    return libc
