"""Idempotent appends through Log: duplicates, fencing, sequence gaps, and producer state across
close/open, a crash, roll, truncation, retention and expiration (Kafka's UnifiedLogTest /
LogLoaderTest producer-state scenarios)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from storage_helpers import MakeLog, crash, log_batches, read_all, records

from tidelog.errors import InvalidProducerEpochError, OutOfOrderSequenceError
from tidelog.records import CompressionType
from tidelog.storage.log import Log
from tidelog.storage.producer_snapshot import read_snapshot
from tidelog.testing import FakeClock, FakeScheduler


def idem(seq: int, count: int = 1, epoch: int = 0, pid: int = 5, **kw: object) -> bytes:
    return records(count, producer_id=pid, producer_epoch=epoch, base_sequence=seq, **kw)


def snapshots(dir: Path) -> list[int]:
    return sorted(int(n.split(".")[0]) for n in os.listdir(dir) if n.endswith(".snapshot"))


@pytest.mark.parametrize("codec", [CompressionType.NONE, CompressionType.ZSTD])
def test_retried_batch_is_not_written_and_gets_its_original_offsets(make_log: MakeLog, codec: int) -> None:
    log = make_log()
    log.append_as_leader(records(2))  # a plain producer first: offsets 0-1
    first = log.append_as_leader(idem(0, 3, compression=codec))
    log.append_as_leader(idem(3, 2, compression=codec))
    size = log.size
    retry = log.append_as_leader(idem(0, 3, compression=codec))
    assert (retry.first_offset, retry.last_offset) == (first.first_offset, first.last_offset) == (2, 4)
    assert retry.log_append_time == first.max_timestamp  # Kafka answers the cached batch's timestamp
    assert (log.log_end_offset, log.size, len(log_batches(log))) == (7, size, 3)


def test_gap_and_fenced_epoch_are_refused_and_write_nothing(make_log: MakeLog) -> None:
    log = make_log()
    log.append_as_leader(idem(0, 2, epoch=1))
    with pytest.raises(OutOfOrderSequenceError) as gap:
        log.append_as_leader(idem(3, epoch=1))
    assert (gap.value.producer_id, gap.value.offset) == (5, 2)
    with pytest.raises(InvalidProducerEpochError):
        log.append_as_leader(idem(2, epoch=0))
    with pytest.raises(OutOfOrderSequenceError, match="new epoch"):
        log.append_as_leader(idem(5, epoch=2))
    assert log.log_end_offset == 2
    log.append_as_leader(idem(0, epoch=2))  # a bumped epoch restarts at sequence 0
    assert log.producer_state.last_entry(5).producer_epoch == 2  # type: ignore[union-attr]


def test_plain_batches_leave_producer_state_empty(make_log: MakeLog, tp_dir: Path) -> None:
    log = make_log()
    log.append_as_leader(records(3))
    log.close()
    assert log.producer_state.active_producers == {}
    assert read_snapshot(tp_dir / "00000000000000000003.snapshot") == []


def test_snapshot_written_at_each_roll_and_at_close(make_log: MakeLog, tp_dir: Path) -> None:
    """testTakeSnapshotOnRollAndDeleteSnapshotOnRecoveryPointCheckpoint (the roll part)."""
    log = make_log()
    for seq in range(3):
        log.append_as_leader(idem(seq))
        log.roll()
    assert snapshots(tp_dir) == [1, 2, 3]
    assert [e.last_sequence for e in read_snapshot(tp_dir / "00000000000000000002.snapshot")] == [1]
    log.append_as_leader(idem(3))
    log.close()
    assert snapshots(tp_dir) == [1, 2, 3, 4]


def test_state_survives_clean_close_and_open(make_log: MakeLog) -> None:
    log = make_log()
    log.append_as_leader(idem(0, 2))
    log.append_as_leader(idem(2, 2, pid=9))
    log.close()
    reopened = make_log(had_clean_shutdown=True)
    assert {pid: e.last_seq for pid, e in reopened.producer_state.active_producers.items()} == {5: 1, 9: 3}
    assert reopened.append_as_leader(idem(2, 2, pid=9)).first_offset == 2  # duplicate of the last batch
    with pytest.raises(OutOfOrderSequenceError):
        reopened.append_as_leader(idem(7))
    assert reopened.log_end_offset == 4


def test_state_rebuilt_after_crash_from_roll_snapshot_and_log(make_log: MakeLog, tp_dir: Path) -> None:
    """An unclean stop: the last snapshot is the roll's; the batches after it are replayed, and
    the full five-batch window after it is known again."""
    log = make_log()
    log.append_as_leader(idem(0))
    log.roll()
    for seq in range(1, 4):
        log.append_as_leader(idem(seq))
    crash(log)
    assert snapshots(tp_dir) == [1]
    recovered = make_log(recovery_point=1)
    entry = recovered.producer_state.last_entry(5)
    assert entry is not None and [b.last_seq for b in entry.batches] == [0, 1, 2, 3]
    assert recovered.append_as_leader(idem(1)).first_offset == 1  # a retry from before the crash
    assert recovered.append_as_leader(idem(4)).first_offset == 4


def test_state_rebuilt_from_scratch_without_snapshots(make_log: MakeLog, tp_dir: Path) -> None:
    log = make_log(segment_bytes=300)
    for seq in range(0, 12, 2):
        log.append_as_leader(idem(seq, 2))
    assert log.num_segments > 1
    log.close()
    for offset in snapshots(tp_dir):
        (tp_dir / f"{offset:020d}.snapshot").unlink()
    reopened = make_log(had_clean_shutdown=True)
    assert reopened.producer_state.last_entry(5).last_seq == 11  # type: ignore[union-attr]
    assert reopened.append_as_leader(idem(10, 2)).first_offset == 10
    assert snapshots(tp_dir)[-1] == 12  # the rebuild ends with a snapshot at the log end


def test_corrupt_snapshot_falls_back_to_replay(make_log: MakeLog, tp_dir: Path) -> None:
    log = make_log()
    log.append_as_leader(idem(0))
    log.append_as_leader(idem(1))
    log.close()
    (tp_dir / "00000000000000000002.snapshot").write_bytes(b"\x00\x01\x00\x00\x00\x00\x00\x00\x00\x07")
    reopened = make_log(had_clean_shutdown=True)
    assert reopened.producer_state.last_entry(5).last_seq == 1  # type: ignore[union-attr]


def test_truncation_reloads_state_below_the_new_end(make_log: MakeLog, tp_dir: Path) -> None:
    log = make_log()
    log.append_as_leader(idem(0))
    log.roll()
    log.append_as_leader(idem(1))
    log.append_as_leader(idem(2))
    log.close()
    log = make_log(had_clean_shutdown=True)
    assert snapshots(tp_dir) == [1, 3]
    log.truncate_to(2)
    assert snapshots(tp_dir) == [1, 2]
    assert log.producer_state.last_entry(5).last_seq == 1  # type: ignore[union-attr]
    assert log.append_as_leader(idem(2)).first_offset == 2  # sequence 2 is new again
    log.truncate_fully_and_start_at(10)
    assert snapshots(tp_dir) == [] and log.producer_state.active_producers == {}


def test_retention_deletes_snapshots_with_their_segments(make_log: MakeLog, tp_dir: Path, clock: FakeClock) -> None:
    """testRetentionDeletesProducerStateSnapshots: a deleted segment's snapshot goes with it,
    renamed .deleted first and unlinked after file.delete.delay.ms."""
    log = make_log(file_delete_delay_ms=1000)
    for seq in range(3):
        log.append_as_leader(idem(seq))
        log.roll()
    log.update_high_watermark(3)
    assert snapshots(tp_dir) == [1, 2, 3]
    log.delete_oldest_segments(log.segments[:2], "retention")
    assert log.log_start_offset == 2
    assert snapshots(tp_dir) == [2, 3]
    assert [n for n in os.listdir(tp_dir) if n.endswith(".snapshot.deleted")] == ["00000000000000000001.snapshot.deleted"]
    clock.advance(1000)
    assert not [n for n in os.listdir(tp_dir) if n.endswith(".deleted")]


def test_idle_producers_expire_on_the_scheduler(tp_dir: Path, clock: FakeClock, scheduler: FakeScheduler) -> None:
    log = Log.open(tp_dir, clock=clock, scheduler=scheduler, producer_id_expiration_ms=5000,
                   producer_id_expiration_check_interval_ms=1000)
    log.append_as_leader(idem(0, timestamp=clock.milliseconds()))
    clock.advance(4000)
    assert list(log.producer_state.active_producers) == [5]
    clock.advance(1000)
    assert log.producer_state.active_producers == {}
    log.append_as_leader(idem(17, timestamp=clock.milliseconds()))  # forgotten: any sequence again
    assert [r.offset for r in read_all(log)] == [0, 1]
    log.close()
