"""A segment's append state (storage/append_state.py): armed only by the log's append, and
invalidated by every LogSegment method that changes what it describes, so that the compiled
append can never write with a stale arming."""

from __future__ import annotations

from typing import Any

from storage_helpers import T0

from tidelog.records import BatchBuilder
from tidelog.storage.append_state import AppendState, invalidates_append_state
from tidelog.storage.roll import RollLimits
from tidelog.storage.segment import LogSegment

RULES = (1048588, False, 2**63 - 1, 3600000)


def _batch() -> bytes:
    b = BatchBuilder()
    b.append(0, T0, b"key", b"value")
    return b.build()


def test_invalidate_disarms_and_counts_generations() -> None:
    state = AppendState()
    assert not state.armed and state.generation == 0
    state.arm(fd=3, base_offset=0, segment_bytes=1 << 30, max_timestamp_limit=2**62, index_interval_bytes=4096,
              rules=RULES)
    assert state.armed
    state.invalidate()
    assert not state.armed and state.generation == 1


def _armed_segment(make_log: Any) -> LogSegment:
    log = make_log()
    for _ in range(2):
        log.append_as_leader(_batch())  # the first loads the segment's state; it can then be armed
    segment = log.active_segment
    assert segment.arm_fast_append(RollLimits(1 << 30, 604800000), RULES)
    return segment


def test_every_change_the_state_does_not_follow_invalidates_it(make_log: Any, tmp_path: Any) -> None:
    changes = {
        "truncate_to": lambda s: s.truncate_to(s.base_offset + 1),
        "resize_indexes": lambda s: s.resize_indexes(1 << 20),
        "rebuild_indexes": lambda s: s.rebuild_indexes(),
        "recover": lambda s: s.recover(),
        "on_become_inactive_segment": lambda s: s.on_become_inactive_segment(),
        "append": lambda s: s.append(s.base_offset + 5, T0, s.base_offset + 5, _batch()),
    }
    for i, (name, change) in enumerate(changes.items()):
        segment = _armed_segment(lambda: make_log(dir=tmp_path / f"t{i}-0"))
        before = segment.append_state.generation
        change(segment)
        assert not segment.append_state.armed, name
        assert segment.append_state.generation > before, name


def test_the_invalidating_methods_are_declared() -> None:
    marker = invalidates_append_state(lambda self: None).__code__
    declared = {name for name, method in vars(LogSegment).items()
                if callable(method) and getattr(method, "__code__", None) is marker}
    assert {"truncate_to", "recover", "rebuild_indexes", "resize_indexes", "defer_index_resize", "close",
            "close_handlers", "change_file_suffixes", "release_indexes", "delete_files",
            "on_become_inactive_segment", "append", "sanity_check", "set_max_timestamp", "set_first_batch_timestamp",
            "set_rebuilt_index_state"} <= declared
