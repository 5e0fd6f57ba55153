"""ProducerStateManager and the .snapshot format, as Kafka's ProducerStateManagerTest specifies them
(scenario names in the docstrings), plus a Hypothesis model of the duplicate/sequence rules."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from storage_helpers import batch, batches_of

from tidelog.errors import CorruptSnapshotError, InvalidProducerEpochError, OutOfOrderSequenceError
from tidelog.records import FileBatch
from tidelog.records.batch import INT32_MAX
from tidelog.storage.append_info import AppendOrigin
from tidelog.storage.producer_snapshot import SnapshotEntry, decode_snapshot, encode_snapshot, read_snapshot
from tidelog.storage.producer_state import BatchMetadata, ProducerBatch, ProducerStateManager, producer_batch

PID = 1


def idempotent(seq: int, epoch: int = 0, count: int = 1, pid: int = PID, ts: int = 0) -> FileBatch:
    values = [b"v%d" % i for i in range(count)]
    return batches_of(batch(*values, producer_id=pid, producer_epoch=epoch, base_sequence=seq, timestamp=ts))[0]


def append(state: ProducerStateManager, b: FileBatch, offset: int, origin: AppendOrigin = AppendOrigin.CLIENT,
           ) -> BatchMetadata | None:
    """Kafka's appendClientEntry: check (client origin), update, move the map end offset."""
    checked = state.check_leader_append([(0, b)], offset, origin)
    if isinstance(checked, BatchMetadata):
        return checked
    state.update(producer_batch(b, offset), origin)
    state.update_map_end_offset(offset + b.last_offset_delta + 1)
    return None


def replicate(state: ProducerStateManager, pid: int, epoch: int, seq: int, offset: int, ts: int = 0) -> None:
    state.update(ProducerBatch(pid, epoch, seq, seq, offset, offset, ts))
    state.update_map_end_offset(offset + 1)


def marker(state: ProducerStateManager, epoch: int, offset: int, coordinator_epoch: int = 0) -> None:
    state.update(ProducerBatch(PID, epoch, -1, -1, offset, offset, 0, True, True, coordinator_epoch))
    state.update_map_end_offset(offset + 1)


@pytest.fixture
def state(tmp_path: Path) -> ProducerStateManager:
    return ProducerStateManager(tmp_path, "t-0", producer_id_expiration_ms=60_000)


def snapshot_files(dir: Path) -> list[str]:
    return sorted(p.name for p in dir.iterdir())


# --- the rules -------------------------------------------------------------------------------

def test_basic_id_mapping_checks_sequence_and_epoch(state: ProducerStateManager) -> None:
    """testBasicIdMapping (the exact retry is a duplicate here: the log asks one method)."""
    append(state, idempotent(0), 0)
    append(state, idempotent(1), 1)
    assert append(state, idempotent(1), 2) == BatchMetadata(1, 1, 0, 0)
    with pytest.raises(OutOfOrderSequenceError):
        append(state, idempotent(5), 2)
    append(state, idempotent(0, epoch=1), 3)
    with pytest.raises(InvalidProducerEpochError):
        append(state, idempotent(0, epoch=0), 4)


def test_duplicate_found_among_the_last_five_batches_only(state: ProducerStateManager) -> None:
    for i in range(6):
        append(state, idempotent(2 * i, count=2), 2 * i)
    assert append(state, idempotent(2, count=2), 12) == BatchMetadata(3, 3, 1, 0)  # second batch: still cached
    with pytest.raises(OutOfOrderSequenceError):  # first batch: out of the window
        append(state, idempotent(0, count=2), 12)
    with pytest.raises(OutOfOrderSequenceError):  # an overlapping but different range is no duplicate
        append(state, idempotent(2, count=1), 12)


def test_unknown_producer_accepted_at_any_sequence(state: ProducerStateManager) -> None:
    """Current Kafka (KIP-360): no UNKNOWN_PRODUCER_ID; the first batch seen may start anywhere."""
    append(state, idempotent(42, epoch=3), 0)
    assert state.last_entry(PID).last_seq == 42  # type: ignore[union-attr]
    append(state, idempotent(43, epoch=3), 1)


def test_new_epoch_must_start_at_zero(state: ProducerStateManager) -> None:
    append(state, idempotent(0), 0)
    with pytest.raises(OutOfOrderSequenceError, match="new epoch"):
        append(state, idempotent(1, epoch=1), 1)
    append(state, idempotent(0, epoch=1), 1)


def test_append_txn_marker_with_no_producer_state(state: ProducerStateManager) -> None:
    """testAppendTxnMarkerWithNoProducerState."""
    marker(state, epoch=2, offset=27)
    entry = state.last_entry(PID)
    assert entry is not None and (entry.producer_epoch, entry.last_seq) == (2, -1)
    with pytest.raises(InvalidProducerEpochError):
        append(state, idempotent(0, epoch=0), 28)
    with pytest.raises(OutOfOrderSequenceError):
        append(state, idempotent(17, epoch=2), 28)
    append(state, idempotent(0, epoch=2), 28)
    assert state.last_entry(PID).last_seq == 0  # type: ignore[union-attr]


def test_producer_sequence_wrap_around(state: ProducerStateManager) -> None:
    """testProducerSequenceWrapAround and testProducerSequenceInvalidWrapAround."""
    replicate(state, PID, 15, INT32_MAX, 735)
    with pytest.raises(OutOfOrderSequenceError):
        append(state, idempotent(1, epoch=15), 1235)
    append(state, idempotent(0, epoch=15), 1235)
    entry = state.last_entry(PID)
    assert entry is not None and (entry.first_seq, entry.last_seq) == (INT32_MAX, 0)


def test_batch_sequence_wrapping_inside_one_batch(state: ProducerStateManager) -> None:
    """testProducerSequenceWithWrapAroundBatchRecord: the batch's first sequence is recovered
    from its last sequence and offset delta across Int.MAX."""
    state.update(ProducerBatch(PID, 15, INT32_MAX - 10, 9, 2000, 2020, 0))
    entry = state.last_entry(PID)
    assert entry is not None
    assert (entry.first_seq, entry.last_seq, entry.batches[0].first_offset, entry.last_data_offset) == (
        INT32_MAX - 10, 9, 2000, 2020)


def test_replication_appends_are_not_validated(state: ProducerStateManager) -> None:
    """testNoValidationOnFirstEntryWhenLoadingLog and testAcceptAppendWithSequenceGapsOnReplica."""
    append(state, idempotent(0, epoch=5), 0)
    with pytest.raises(OutOfOrderSequenceError):
        append(state, idempotent(3, epoch=5), 1)
    append(state, idempotent(3, epoch=5), 1, AppendOrigin.REPLICATION)
    assert state.last_entry(PID).last_seq == 3  # type: ignore[union-attr]


def test_control_marker_of_new_epoch_forgets_batches(state: ProducerStateManager) -> None:
    """testOutOfSequenceAfterControlRecordEpochBump."""
    append(state, idempotent(0), 0)
    append(state, idempotent(1), 1)
    marker(state, epoch=1, offset=2)
    with pytest.raises(OutOfOrderSequenceError):
        append(state, idempotent(2, epoch=1), 3)
    with pytest.raises(InvalidProducerEpochError):
        append(state, idempotent(2, epoch=0), 3)


def test_empty_control_batch_changes_nothing(state: ProducerStateManager) -> None:
    """testAppendEmptyControlBatch."""
    state.update(ProducerBatch(PID, 3, -1, -1, 0, 0, 0, True, True, None))
    entry = state.last_entry(PID)
    assert entry is not None and entry.producer_epoch == -1 and entry.is_empty


def test_producer_id_expiration(state: ProducerStateManager) -> None:
    """testPidExpirationTimeout and testProducersWithOngoingTransactionsDontExpire."""
    append(state, idempotent(0, epoch=5, ts=1000), 1)
    state.update(ProducerBatch(2, 0, 0, 0, 2, 2, 1000, is_transactional=True))
    assert state.remove_expired_producers(1000 + 60_000 - 1) == 0
    assert state.remove_expired_producers(1000 + 60_000) == 1
    assert list(state.active_producers) == [2]  # an open transaction never expires
    append(state, idempotent(1, epoch=5), 3)  # forgotten: any sequence is accepted again
    assert state.last_entry(PID).last_seq == 1  # type: ignore[union-attr]


# --- snapshots -------------------------------------------------------------------------------

def test_snapshot_layout_is_kafkas(tmp_path: Path) -> None:
    """Version 1, CRC-32C of bytes [6, end), count, 46-byte entries (kafka-storage.md §1.11)."""
    entry = SnapshotEntry(7, 2, 41, 100, 4, 1_700_000_000_000, -1, -1)
    data = encode_snapshot([entry])
    assert len(data) == 10 + 46
    assert struct.unpack_from(">hIi", data)[0::2] == (1, 1)
    assert struct.unpack_from(">qhiqiqiq", data, 10) == (7, 2, 41, 100, 4, 1_700_000_000_000, -1, -1)
    assert decode_snapshot(data) == [entry]
    assert decode_snapshot(encode_snapshot([])) == []


@given(st.lists(st.builds(SnapshotEntry, st.integers(0, 2**63 - 1), st.integers(-1, 2**15 - 1),
                          st.integers(-1, INT32_MAX), st.integers(-1, 2**62), st.integers(0, INT32_MAX),
                          st.integers(-1, 2**62), st.integers(-1, INT32_MAX), st.integers(-1, 2**62)), max_size=20))
@settings(max_examples=50, deadline=None)
def test_snapshot_round_trip(entries: list[SnapshotEntry]) -> None:
    assert decode_snapshot(encode_snapshot(entries)) == entries


@pytest.mark.parametrize("damage", ["empty", "truncated", "flipped", "version"])
def test_corrupt_snapshot_is_refused(damage: str) -> None:
    """testLoadFromEmptySnapshotFile / TruncatedSnapshotFile / CorruptSnapshotFile."""
    data = bytearray(encode_snapshot([SnapshotEntry(1, 0, 0, 0, 0, 0, -1, -1)]))
    bad = {"empty": b"", "truncated": data[:-3], "version": b"\x00\x02" + data[2:],
           "flipped": data[:20] + bytes([data[20] ^ 1]) + data[21:]}[damage]
    with pytest.raises(CorruptSnapshotError):
        decode_snapshot(bytes(bad))


def test_take_snapshot_only_when_offset_moved(state: ProducerStateManager, tmp_path: Path) -> None:
    """testTakeSnapshot and testSkipSnapshotIfOffsetUnchanged."""
    append(state, idempotent(0), 0)
    append(state, idempotent(1), 1)
    assert state.take_snapshot() == tmp_path / "00000000000000000002.snapshot"
    assert state.take_snapshot() is None
    assert snapshot_files(tmp_path) == ["00000000000000000002.snapshot"]
    assert read_snapshot(tmp_path / "00000000000000000002.snapshot") == [SnapshotEntry(PID, 0, 1, 1, 0, 0, -1, -1)]


def test_reload_keeps_last_batch_per_producer(state: ProducerStateManager, tmp_path: Path) -> None:
    """testLoadFromSnapshotRetainsNonExpiredProducers, and what the format keeps: the retry of the
    last batch is still a duplicate after a reload, an earlier one is not."""
    append(state, idempotent(0), 0)
    append(state, idempotent(1), 1)
    append(state, idempotent(0, pid=2), 2)
    state.take_snapshot()
    reloaded = ProducerStateManager(tmp_path, "t-0", producer_id_expiration_ms=60_000)
    reloaded.truncate_and_reload(0, 3, now=0)
    assert sorted(reloaded.active_producers) == [1, 2] and reloaded.map_end_offset == 3
    assert append(reloaded, idempotent(1), 3) == BatchMetadata(1, 1, 0, 0)
    with pytest.raises(OutOfOrderSequenceError):
        append(reloaded, idempotent(0), 3)


def test_reload_drops_expired_producers(state: ProducerStateManager, tmp_path: Path) -> None:
    """testRemoveExpiredPidsOnReload."""
    append(state, idempotent(0), 0)
    append(state, idempotent(1), 1)
    state.take_snapshot()
    reloaded = ProducerStateManager(tmp_path, "t-0", producer_id_expiration_ms=60_000)
    reloaded.truncate_and_reload(0, 2, now=70_000)
    assert reloaded.active_producers == {}
    append(reloaded, idempotent(2), 2)
    assert reloaded.last_entry(PID).last_seq == 2 and reloaded.map_end_offset == 3  # type: ignore[union-attr]


def test_truncate_and_reload_removes_out_of_range_snapshots(state: ProducerStateManager, tmp_path: Path) -> None:
    """testTruncateAndReloadRemovesOutOfRangeSnapshots."""
    for offset in range(5):
        append(state, idempotent(offset), offset)
        state.take_snapshot()
    assert state.snapshot_offsets == [1, 2, 3, 4, 5]
    state.truncate_and_reload(1, 3, now=0)
    assert state.snapshot_offsets == [2, 3] and state.map_end_offset == 3
    assert state.last_entry(PID).last_seq == 2  # type: ignore[union-attr]
    assert snapshot_files(tmp_path) == ["00000000000000000002.snapshot", "00000000000000000003.snapshot"]


def test_corrupt_latest_snapshot_falls_back_to_older(state: ProducerStateManager, tmp_path: Path) -> None:
    append(state, idempotent(0), 0)
    state.take_snapshot()
    append(state, idempotent(1), 1)
    state.take_snapshot()
    (tmp_path / "00000000000000000002.snapshot").write_bytes(b"\x00\x01garbage")
    reloaded = ProducerStateManager(tmp_path, "t-0")
    reloaded.truncate_and_reload(0, 2, now=0)
    assert reloaded.map_end_offset == 1 and reloaded.snapshot_offsets == [1]


def test_delete_snapshots_before_and_truncate_fully(state: ProducerStateManager, tmp_path: Path) -> None:
    """testDeleteSnapshotsBefore and testTruncateFullyAndStartAt."""
    append(state, idempotent(0), 0)
    append(state, idempotent(1), 1)
    state.take_snapshot()
    append(state, idempotent(2), 2)
    state.take_snapshot()
    state.delete_snapshots_before(3)
    assert state.snapshot_offsets == [3] and snapshot_files(tmp_path) == ["00000000000000000003.snapshot"]
    state.truncate_fully_and_start_at(0)
    assert state.snapshot_offsets == [] and snapshot_files(tmp_path) == [] and state.active_producers == {}
    append(state, idempotent(0), 0)
    state.take_snapshot()
    assert state.snapshot_offsets == [1]


def test_remove_stray_snapshots(tmp_path: Path) -> None:
    """testRemoveStraySnapshotsKeepCleanShutdownSnapshot and testRemoveAllStraySnapshots."""
    for offset in (1, 2, 5, 7):
        (tmp_path / f"{offset:020d}.snapshot").write_bytes(encode_snapshot([]))
    state = ProducerStateManager(tmp_path, "t-0")
    state.remove_stray_snapshots([1, 5])
    assert state.snapshot_offsets == [1, 5, 7]  # 7: above every segment, the clean-shutdown snapshot
    state.remove_stray_snapshots([1, 9])
    assert state.snapshot_offsets == [1]


def test_mark_snapshot_for_deletion(state: ProducerStateManager, tmp_path: Path) -> None:
    """testRemoveAndMarkSnapshotForDeletion(AlreadyDeleted)."""
    append(state, idempotent(0), 0)
    state.take_snapshot()
    assert state.mark_snapshot_for_deletion(1) == tmp_path / "00000000000000000001.snapshot.deleted"
    assert snapshot_files(tmp_path) == ["00000000000000000001.snapshot.deleted"]
    assert state.mark_snapshot_for_deletion(1) is None


# --- a model of the client rules -------------------------------------------------------------

@given(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 12), st.integers(1, 3)), min_size=1, max_size=40))
@settings(max_examples=60, deadline=None)
def test_client_appends_follow_the_model(tmp_path_factory: pytest.TempPathFactory,
                                         steps: list[tuple[int, int, int]]) -> None:
    """Random (epoch, first sequence, count) appends of one producer against a plain model of
    Kafka's rules: fenced, duplicate, in sequence, new epoch at 0, or out of order."""
    state = ProducerStateManager(tmp_path_factory.mktemp("ps"), "t-0")
    epoch, written, offset = None, [], 0  # written: (epoch, first, last, first offset) at the current epoch
    for e, first, count in steps:
        last = first + count - 1
        b = idempotent(first, epoch=e, count=count)
        dup = next((w for w in written[-5:] if (w[0], w[1], w[2]) == (e, first, last)), None)
        if epoch is not None and e < epoch:
            expected: object = InvalidProducerEpochError
        elif dup is not None:
            expected = BatchMetadata(last, dup[3] + count - 1, count - 1, 0)
        elif epoch is None:
            expected = None  # an unknown producer starts anywhere
        elif e != epoch:
            expected = None if first == 0 else OutOfOrderSequenceError
        else:
            expected = None if first == written[-1][2] + 1 else OutOfOrderSequenceError
        if isinstance(expected, type):
            with pytest.raises(expected):
                append(state, b, offset)
            continue
        assert append(state, b, offset) == expected
        if expected is None:
            if e != epoch:
                written = []
            epoch = e
            written.append((e, first, last, offset))
            offset += count
