"""Which files this test process holds open."""

from __future__ import annotations

import os
from pathlib import Path


def descriptors_under(root: Path) -> list[str]:
    """The targets of this process's open descriptors on files below ``root``, sorted ("...
    (deleted)" for an unlinked file still open). Linux only (``/proc/self/fd``).

    Only those below ``root``: a process-wide count also moves with other tests' leftover
    threads, or numba loading its cache."""
    held = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # closed between listdir and readlink
            continue
        if target.startswith(str(root)):
            held.append(target)
    return sorted(held)
