"""Peak RSS of a ``tidelog serve`` process under hostile requests, with
generous margins: what bench/bench_memory.py measures at full size, here at a smaller one with the
caps lowered so that the uncapped broker would overshoot them many times over.

* One Fetch naming 4 partitions of 4 MiB 8 times each, every limit at 2^31-1, with
  ``fetch.max.bytes`` at 8 MiB: at most 8 MiB of records come back, and the broker grows by at most
  twice that plus :data:`CONSTANT` (it grew by ~5x a 128 MiB response before the cap).
* 10 connections sending 16 MiB frames they never finish, with ``queued.max.request.bytes`` at
  32 MiB: the broker grows by at most that plus :data:`CONSTANT` (160 MiB before), and a fresh client
  is answered meanwhile.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.bench_memory import fetch_attack, partial_attack

pytestmark = pytest.mark.soak
MIB = 1 << 20
CONSTANT = 48 * MIB  # interpreter, allocator slack, kernel-side buffers charged to the process


def test_a_hostile_fetch_costs_at_most_fetch_max_bytes_and_a_constant(tmp_path: Path) -> None:
    cap = 8 * MIB
    _, growth, details = fetch_attack(tmp_path, {"fetch.max.bytes": str(cap)}, mib_each=4)
    assert cap - MIB < details["response_bytes"] <= cap + 4096
    assert growth < 2 * cap + CONSTANT, details


def test_unfinished_frames_cost_at_most_queued_max_request_bytes_and_a_constant(tmp_path: Path) -> None:
    budget, frame = 32 * MIB, 16 * MIB
    overrides = {"socket.request.max.bytes": str(frame), "queued.max.request.bytes": str(budget)}
    _, growth, details = partial_attack(tmp_path, overrides, connections=10, request_size=frame)
    assert details["fresh_client_answered"], details
    assert growth < budget + CONSTANT, details
