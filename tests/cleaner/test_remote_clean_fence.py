"""The fence of a remote clean at swap time: another writer of the partition's remote metadata
(retention, a copy or a clean of another process: anything the owner's ``task_lock`` does not
hold back) changed the segments the pass is replacing; the pass gives up (aborted, not failed),
deletes what it staged, and leaves both tiers readable and whole."""

from __future__ import annotations

from pathlib import Path

import pytest
from remote_clean_helpers import (
    BUFFERS,
    TIP,
    TP,
    Tier,
    append,
    fresh,
    local_records,
    local_retention,
    open_log,
    remote_records,
    roll,
    segment_objects,
    stored_segment_objects,
)

from tidelog.cleaner.clean import Cleaner, InProcessEngine
from tidelog.cleaner.remote_clean import RemoteCleaning, TieredPass
from tidelog.errors import LogCleaningAbortedError
from tidelog.remote.copy import delete_remote_segment
from tidelog.remote.metadata import RemoteLogSegmentState
from tidelog.remote.metadata_log import RemotePartitionMetadata
from tidelog.remote.store import ArrowRemoteStore
from tidelog.testing import FakeClock


def test_a_segment_deleted_by_another_writer_during_the_clean_makes_it_give_up(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = ArrowRemoteStore((tmp_path / "store").as_uri())
    clock = FakeClock()
    tier = Tier(store, clock)
    log = open_log(tmp_path / "logs" / "events-0", clock, tiered=True, segment_bytes="1400")
    append(log, [(k, f"a{k}") for k in range(60)])
    roll(log)
    clock.advance(10)
    tier.copy(log)
    local_retention(log, clock)
    append(log, [(k, f"b{k}") for k in range(0, 60, 3)])
    roll(log)
    finished = fresh(store).finished_segments()
    assert len(finished) >= 3
    before_local = local_records(log)
    victim = finished[0]
    changed = []
    switch = TieredPass._switch

    def concurrent_retention_then_switch(self: TieredPass) -> int:
        """Another process's remote retention deletes the oldest segment just before the swap."""
        other = RemotePartitionMetadata.load(store, TIP, clock=clock, broker_id=2)
        assert any(s.state == RemoteLogSegmentState.COPY_SEGMENT_STARTED for s in other.unreferenced())
        delete_remote_segment(store, other, victim)
        changed.append(victim.id)
        return switch(self)

    monkeypatch.setattr(TieredPass, "_switch", concurrent_retention_then_switch)
    cleaner = Cleaner(InProcessEngine(BUFFERS), clock, remote=RemoteCleaning(tier.source))
    with pytest.raises(LogCleaningAbortedError) as gave_up:
        cleaner.clean_pass(log, TP, 0, log.active_segment.base_offset)
    text = str(gave_up.value)
    assert changed and victim.id in text and "gives up" in text and str(TP) in text, text
    reader = fresh(store)
    assert [s.id for s in reader.finished_segments()] == [s.id for s in finished[1:]], "the others as they were"
    assert reader.unreferenced() == [], "what the pass staged is deleted"
    assert stored_segment_objects(store) == segment_objects(store), "no orphan object"
    assert any(int(r[1]) % 3 == 0 for r in remote_records(store)), "the remote tier is not cleaned"
    assert local_records(log) == before_local, "the local tier is not cleaned alone"

    monkeypatch.setattr(TieredPass, "_switch", switch)
    tier.metadata = None  # the next pass starts from the store's state and cleans
    cleaner = Cleaner(InProcessEngine(BUFFERS), clock, remote=RemoteCleaning(tier.source))
    cleaner.clean_pass(log, TP, finished[1].start_offset, log.active_segment.base_offset)
    superseded = [r for r in remote_records(store) if int(r[1]) % 3 == 0]
    assert superseded == [], f"the next pass cleans: {superseded[:3]}"
    log.close()
