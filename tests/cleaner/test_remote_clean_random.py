"""Random histories of a tiered compacted log against the same history on a plain compacted log:
appends of keyed records and tombstones, rolls, clock moves, copy passes, local retention and
cleaning passes in any order. After every cleaning pass the records a reader sees across both
tiers are the plain log's, record by record, and where a segment is both local and remote, both
copies hold the same records (so local retention may free either at any time)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from remote_clean_helpers import (
    TP,
    Tier,
    append,
    both_tiers,
    cleaner,
    local_records,
    local_retention,
    open_log,
    remote_records,
    roll,
)

from tidelog.cleaner.plan import log_to_clean
from tidelog.remote.store import ArrowRemoteStore
from tidelog.storage.log import Log
from tidelog.testing import FakeClock


def _clean(log: Log, clock: FakeClock, tier: Tier | None, checkpoint: int | None) -> int | None:
    """A pass from the checkpoint when there is something dirty; the new checkpoint."""
    spans = []
    c, remote = cleaner(clock, tier)
    if remote is not None:
        remote.load([(TP, log)])
        spans = remote.spans(TP, log)
    stats = log_to_clean(TP, log, checkpoint, clock.milliseconds(), remote_spans=spans)
    if stats.cleanable_bytes <= 0 or stats.first_uncleanable_offset <= stats.first_dirty_offset:
        return checkpoint
    end, _ = c.clean_pass(log, TP, stats.first_dirty_offset, stats.first_uncleanable_offset)
    return end


@pytest.mark.parametrize("seed", range(12))
def test_random_histories_clean_alike_with_and_without_the_remote_tier(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    store = ArrowRemoteStore((tmp_path / "store").as_uri())
    clock, plain_clock = FakeClock(), FakeClock()
    tier = Tier(store, clock)
    local_ms = rng.choice(["0", "50", "100000"])
    tiered = open_log(tmp_path / "tiered" / "events-0", clock, tiered=True, local_retention_ms=local_ms,
                      delete_retention_ms="200", segment_bytes="600")
    plain = open_log(tmp_path / "plain" / "events-0", plain_clock, tiered=False, delete_retention_ms="200",
                     segment_bytes="600")
    checkpoints: dict[str, int | None] = {"tiered": None, "plain": None}
    for _ in range(40):
        op = rng.choices(["append", "roll", "time", "copy", "retention", "clean"], [6, 2, 2, 3, 3, 1])[0]
        if op == "append":
            pairs = [(rng.randrange(12), None if rng.random() < 0.15 else f"v{rng.randrange(1000)}")
                     for _ in range(rng.randint(1, 4))]
            append(tiered, pairs)
            append(plain, pairs)
        elif op == "roll":
            roll(tiered)
            roll(plain)
        elif op == "time":
            ms = rng.choice([10, 100, 300])
            clock.advance(ms)
            plain_clock.advance(ms)
        elif op == "copy":
            tier.copy(tiered)
        elif op == "retention":
            local_retention(tiered, clock)
        else:
            _clean_and_check(store, (tiered, clock, tier), (plain, plain_clock), checkpoints, seed)
    _clean_and_check(store, (tiered, clock, tier), (plain, plain_clock), checkpoints, seed)  # every history ends cleaned
    tiered.close()
    plain.close()


def _clean_and_check(store: ArrowRemoteStore, tiered_side: tuple[Log, FakeClock, Tier],
                     plain_side: tuple[Log, FakeClock], checkpoints: dict[str, int | None], seed: int) -> None:
    """A cleaning pass on both logs, then the checks of the module docstring."""
    tiered, clock, tier = tiered_side
    plain, plain_clock = plain_side
    checkpoints["tiered"] = _clean(tiered, clock, tier, checkpoints["tiered"])
    checkpoints["plain"] = _clean(plain, plain_clock, None, checkpoints["plain"])
    assert checkpoints["tiered"] == checkpoints["plain"]
    assert both_tiers(store, tiered) == local_records(plain), f"seed {seed}"
    start = tiered.local_log_start_offset
    highest = tiered.highest_offset_in_remote_storage
    both = [r for r in remote_records(store) if start <= r[0] <= highest]
    assert both == [r for r in local_records(tiered) if r[0] <= highest], "the tiers disagree"
