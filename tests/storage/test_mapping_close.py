"""A read-only mapping of a segment closes once its reader is done, even when a view of it is
still held by garbage in a reference cycle (numba, compiling a kernel on its first call, keeps
the typing errors it recovered from, whose tracebacks hold the caller's frames)."""

from __future__ import annotations

import gc
from pathlib import Path

import numpy as np
import pytest

from tidelog.storage import fileops


def test_a_view_held_by_a_reference_cycle_does_not_keep_the_mapping_open(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"x" * 4096)
    gc.disable()  # the cycle stays until close_mapping collects it
    try:
        with open(path, "rb") as f, fileops.mapped(f.fileno(), 4096, writable=False, path=path) as mapping:
            cycle: list[object] = [np.frombuffer(mapping, np.uint8)]
            cycle.append(cycle)
            del cycle
        assert mapping.closed
    finally:
        gc.enable()


def test_a_live_view_still_refuses_the_close(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"x" * 4096)
    with open(path, "rb") as f, pytest.raises(BufferError):
        with fileops.mapped(f.fileno(), 4096, writable=False, path=path) as mapping:
            view = np.frombuffer(mapping, np.uint8)
    del view
