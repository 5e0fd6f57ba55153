"""Kill points of remote compaction: the process dies at every store write of a cleaning pass over
a tiered compacted log (each staged object PUT, each metadata event, snapshot or pruning write,
the swap) and of the deferred deletion of the replaced objects, before the write or just after
it, and a new process resumes.

Method: :class:`~test_kill_points_remote.KillingStore` (a ``BaseException`` at the Nth mutating
operation, so no ``except Exception`` cleanup runs, as after SIGKILL). After each kill a *new
process's view* loads the partition's metadata from the same store and checks that the finished
segments are the old set or the new set, whole: every object present, and the records they hold
equal to what the remote tier held before the pass or after an uninterrupted one. Then cleanup
(:func:`clean_unreferenced`) and a new pass must converge: both tiers hold what an uninterrupted
pass leaves, and once the replaced objects' delay is over the store holds exactly the objects of
the finished segments (no orphan). ``file://`` on tmpfs where there is one."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tidelog.remote.copy import clean_unreferenced
from tidelog.remote.store import ArrowRemoteStore, RemoteStore
from tidelog.storage.log import Log
from tidelog.testing import FakeClock

sys.path.append(str(Path(__file__).parent.parent / "cleaner"))  # the remote-compaction helpers
from remote_clean_helpers import (  # noqa: E402 - needs the path above
    TP,
    Tier,
    append,
    both_tiers,
    cleaner,
    fresh,
    local_retention,
    open_log,
    remote_records,
    roll,
    segment_objects,
    stored_segment_objects,
)
from test_kill_points_remote import Killed, KillingStore  # noqa: E402 - a sibling test module

DELAY_MS = 60_000


def _scenario(root: Path, store: RemoteStore) -> tuple[Log, FakeClock]:
    """A tiered compacted log whose first segments are only remote, then updates of half the keys."""
    clock = FakeClock()
    log = open_log(root / "logs" / "events-0", clock, tiered=True, file_delete_delay_ms=str(DELAY_MS),
                   delete_retention_ms="600000")  # tombstones outlive the test's clock moves
    append(log, [(k, f"a{k}") for k in range(30)])
    roll(log)
    clock.advance(10)
    Tier(store, clock).copy(log)
    local_retention(log, clock)
    append(log, [(k, f"b{k}") for k in range(0, 30, 4)])
    append(log, [(k, None) for k in range(1, 30, 7)])  # tombstones too
    roll(log)
    return log, clock


def _clean(log: Log, clock: FakeClock, store: RemoteStore) -> Tier:
    tier = Tier(store, clock)
    c, remote = cleaner(clock, tier)
    c.clean_pass(log, TP, 0, log.active_segment.base_offset)
    return tier


class _Expected:
    def __init__(self, root: Path) -> None:
        store = ArrowRemoteStore((root / "store").as_uri())
        log, clock = _scenario(root, store)
        self.remote_before = remote_records(store, log.local_log_start_offset)
        _clean(log, clock, store)
        self.remote_after = remote_records(store, log.local_log_start_offset)
        self.both_after = both_tiers(store, log)
        log.close()
        assert self.remote_before != self.remote_after


def _converges(log: Log, clock: FakeClock, store: RemoteStore, expected: _Expected) -> None:
    """A new process: cleanup, a new pass, the delay, the deferred deletion: nothing left over."""
    tier = Tier(store, clock)
    found = tier.source(TP, log, True)
    assert found is not None
    clean_unreferenced(store, found[1])
    c, remote = cleaner(clock, tier)
    c.clean_pass(log, TP, 0, log.active_segment.base_offset)
    assert both_tiers(store, log) == expected.both_after
    clock.advance(DELAY_MS)  # what the next copy pass's cleanup deletes once the delay is over
    clean_unreferenced(store, fresh(store), now_ms=clock.milliseconds(), delete_delay_ms=DELAY_MS)
    assert fresh(store).unreferenced() == []
    assert stored_segment_objects(store) == segment_objects(store), "orphan objects"


def _seen_whole(log: Log, store: RemoteStore, expected: _Expected) -> None:
    assert segment_objects(store) <= stored_segment_objects(store), "a finished segment misses an object"
    seen = remote_records(store, log.local_log_start_offset)
    assert seen in (expected.remote_before, expected.remote_after), "a mix of the old and the new set"


def _count(root: Path, operation: Callable[[Log, FakeClock, RemoteStore], object]) -> int:
    store = ArrowRemoteStore((root / "store").as_uri())
    log, clock = _scenario(root, store)
    counting = KillingStore(store)
    operation(log, clock, counting)
    log.close()
    return len(counting.ops)


@pytest.mark.parametrize("when", ["before", "after"])
def test_every_kill_point_of_a_remote_clean_switches_whole_and_converges(kill_root: Callable[[], Path],
                                                                           when: str) -> None:
    expected = _Expected(kill_root())
    total = _count(kill_root(), _clean)
    assert total >= 8
    for n in range(total):
        root = kill_root()
        store = ArrowRemoteStore((root / "store").as_uri())
        log, clock = _scenario(root, store)
        with pytest.raises(Killed):
            _clean(log, clock, KillingStore(store, n, when))
        _seen_whole(log, store, expected)
        _converges(log, clock, store, expected)
        log.close()


def _clean_and_delete(log: Log, clock: FakeClock, store: RemoteStore) -> None:
    """A pass on the real store, then, once the delay is over, the deferred deletion of the
    replaced segments through ``store`` (the copy pass's cleanup)."""
    inner = store.inner if isinstance(store, KillingStore) else store
    tier = _clean(log, clock, inner)
    assert tier.metadata is not None and tier.metadata.unreferenced()
    clock.advance(DELAY_MS)
    found = Tier(store, clock).source(TP, log, True)
    assert found is not None
    clean_unreferenced(store, found[1], now_ms=clock.milliseconds(), delete_delay_ms=DELAY_MS)


@pytest.mark.parametrize("when", ["before", "after"])
def test_every_kill_point_of_the_deferred_deletion_keeps_the_new_set_and_converges(
        kill_root: Callable[[], Path], when: str) -> None:
    expected = _Expected(kill_root())
    total = _count(kill_root(), _clean_and_delete)  # the deletion's writes only: the pass uses the real store
    assert total >= 6
    for n in range(total):
        root = kill_root()
        store = ArrowRemoteStore((root / "store").as_uri())
        log, clock = _scenario(root, store)
        with pytest.raises(Killed):
            _clean_and_delete(log, clock, KillingStore(store, n, when))
        _seen_whole(log, store, expected)
        assert remote_records(store, log.local_log_start_offset) == expected.remote_after
        _converges(log, clock, store, expected)
        log.close()
