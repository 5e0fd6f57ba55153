"""Kafka's DumpLogSegments reads the ``.snapshot`` files tidelog writes (one JVM run): the entries
it prints are the producers tidelog wrote, for idempotent producers across an epoch bump and a
roll, a producer whose last entry is a transaction marker, and one with a transaction still open;
a snapshot with a flipped byte is refused by Kafka as corrupt, as by tidelog."""

from __future__ import annotations

from pathlib import Path

from kafka_oracle import KafkaDistribution
from kafka_oracle.dump import DumpedProducerEntry, dump_log_segments
from tidelog.records import BatchBuilder
from tidelog.records.control import build_end_txn_marker_batch
from tidelog.storage.log import Log
from tidelog.storage.producer_snapshot import SnapshotEntry, read_snapshot
from tidelog.testing import FakeClock, FakeScheduler

T0 = 1_700_000_000_000


def _batch(offset: int, pid: int, epoch: int, seq: int, count: int, transactional: bool = False) -> bytes:
    b = BatchBuilder(base_offset=offset, producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                     is_transactional=transactional)
    for i in range(count):
        b.append(offset + i, T0 + offset, b"k", b"v%d" % i)
    return b.build()


def _as_dumped(e: SnapshotEntry) -> DumpedProducerEntry:
    has_batch = e.last_offset >= 0
    return DumpedProducerEntry(
        e.producer_id, e.producer_epoch, e.coordinator_epoch, e.timestamp,
        e.current_txn_first_offset if e.current_txn_first_offset >= 0 else None,
        e.last_sequence - e.offset_delta if has_batch else None, e.last_sequence if has_batch else None,
        e.last_offset if has_batch else None, e.offset_delta if has_batch else None, e.timestamp if has_batch else None)


def test_kafka_dumps_the_entries_tidelog_wrote(kafka4: KafkaDistribution, tmp_path: Path) -> None:
    clock = FakeClock(T0)
    log = Log.open(tmp_path / "t-0", clock=clock, scheduler=FakeScheduler(clock), had_clean_shutdown=True)
    log.append_as_leader(_batch(0, 1000, 0, 0, 3))
    log.append_as_leader(_batch(0, 1000, 0, 3, 2))
    log.append_as_follower(_batch(5, 2000, 4, 0, 2, transactional=True))
    log.append_as_follower(build_end_txn_marker_batch(commit=True, producer_id=2000, producer_epoch=4,
                                                      coordinator_epoch=7, base_offset=7, timestamp=T0 + 7))
    log.roll()
    log.append_as_leader(_batch(0, 1000, 1, 0, 4))  # a bumped epoch
    log.append_as_follower(_batch(12, 3000, 0, 0, 1, transactional=True))  # left open
    log.close()
    snapshots = sorted((tmp_path / "t-0").glob("*.snapshot"))
    assert [p.name for p in snapshots] == ["00000000000000000008.snapshot", "00000000000000000013.snapshot"]
    corrupt = tmp_path / "t-0" / "00000000000000000099.snapshot"
    data = bytearray(snapshots[-1].read_bytes())
    data[12] ^= 0xFF
    corrupt.write_bytes(data)

    dumped = dump_log_segments(kafka4, [*snapshots, corrupt]).check().parsed()
    for path in snapshots:
        ours = sorted((_as_dumped(e) for e in read_snapshot(path)), key=lambda e: e.producer_id)
        assert sorted(dumped.file(path).producer_entries, key=lambda e: e.producer_id) == ours
    last = {e.producer_id: e for e in dumped.file(snapshots[-1]).producer_entries}
    assert (last[1000].producer_epoch, last[1000].first_sequence, last[1000].last_sequence) == (1, 0, 3)
    assert (last[2000].coordinator_epoch, last[2000].last_sequence, last[2000].current_txn_first_offset) == (7, 1, None)
    assert last[3000].current_txn_first_offset == 12
    assert dumped.file(corrupt).producer_entries == ()
    assert any("CRC" in line for line in dumped.problems.other), dumped.problems
