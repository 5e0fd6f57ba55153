"""The LogManager's transaction doors: ``write_txn_marker`` (the coordinator's COMMIT/ABORT), the
last stable offset it moves as read through ``offsets``/``fetch``/``list_offsets``,
``ongoing_transactions`` and ``producer_states`` (DescribeProducers), errors, and open
transactions after a clean restart and after a crash (producer snapshots + replay)."""

from __future__ import annotations

from pathlib import Path

import pytest
from manager_helpers import T0, Opener, crash, tp

from tidelog.errors import InvalidProducerEpochError, InvalidTxnStateError, UnknownTopicOrPartitionError
from tidelog.manager import LogManager
from tidelog.records import BatchBuilder, iter_batches
from tidelog.storage.fetch_info import FetchIsolation

TP = tp("out")


def txn(pid: int, seq: int, count: int = 1, epoch: int = 0, transactional: bool = True) -> bytes:
    builder = BatchBuilder(producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=transactional)
    for i in range(count):
        builder.append(i, T0, b"k%d" % i, b"p%d-%d" % (pid, seq + i))
    return builder.build()


def plain(count: int) -> bytes:
    builder = BatchBuilder()
    for i in range(count):
        builder.append(i, T0, b"k%d" % i, b"plain")
    return builder.build()


def state(manager: LogManager) -> tuple[int, int, list[tuple[int, int, int, int]]]:
    offsets = manager.offsets(TP)
    return offsets.high_watermark, offsets.last_stable_offset, manager.ongoing_transactions(TP)


def opened(broker: Opener, dirs: list[Path]) -> LogManager:
    manager = broker.open(dirs)
    if not manager.has_topic(TP.topic):
        manager.create_topic(TP.topic, 1, {"segment.bytes": "400"})
    return manager


def test_a_commit_and_an_abort_through_the_manager(broker: Opener, one_dir: list[Path]) -> None:
    manager = opened(broker, one_dir)
    manager.append(TP, txn(1, 0, 2))  # 0-1
    manager.append(TP, txn(2, 0, 1))  # 2
    assert state(manager) == (3, 0, [(1, 0, 0, T0), (2, 0, 2, T0)])
    info = manager.write_txn_marker(TP, 2, 0, 0, commit=False)
    assert (info.first_offset, info.record_count) == (3, 1)
    assert state(manager) == (4, 0, [(1, 0, 0, T0)])
    manager.write_txn_marker(TP, 1, 0, 0, commit=True)
    assert state(manager) == (5, 5, [])
    fetched = manager.fetch(TP, 0, 1 << 20, FetchIsolation.TXN_COMMITTED)
    assert (fetched.last_stable_offset, fetched.aborted) == (5, ((2, 2),))
    assert [b.is_control for _, b in iter_batches(fetched.records)] == [False, False, True, True]
    assert manager.list_offsets(TP, -1, FetchIsolation.TXN_COMMITTED).offset == 5


def test_read_committed_stops_at_the_open_transaction(broker: Opener, one_dir: list[Path]) -> None:
    manager = opened(broker, one_dir)
    manager.append(TP, plain(2))  # plain: 0-1
    manager.append(TP, txn(1, 0))  # open at 2
    manager.append(TP, plain(1))
    fetched = manager.fetch(TP, 0, 1 << 20, FetchIsolation.TXN_COMMITTED)
    assert [b.last_offset for _, b in iter_batches(fetched.records)] == [1]
    assert (fetched.high_watermark, fetched.last_stable_offset, fetched.aborted) == (4, 2, ())
    assert manager.list_offsets(TP, -1, FetchIsolation.TXN_COMMITTED).offset == 2
    assert manager.list_offsets(TP, -1).offset == 4
    assert manager.fetch(TP, 2, 1 << 20, FetchIsolation.TXN_COMMITTED).records == b""


def test_errors_name_the_partition_and_write_nothing(broker: Opener, one_dir: list[Path]) -> None:
    manager = opened(broker, one_dir)
    manager.append(TP, txn(1, 0, epoch=4))
    with pytest.raises(InvalidProducerEpochError, match="out-0"):
        manager.write_txn_marker(TP, 1, 3, 0, commit=True)
    with pytest.raises(InvalidTxnStateError, match="out-0"):
        manager.append(TP, txn(1, 1, epoch=4, transactional=False))
    with pytest.raises(UnknownTopicOrPartitionError):
        manager.write_txn_marker(tp("nope"), 1, 4, 0, commit=True)
    assert manager.offsets(TP).log_end_offset == 1


def test_producer_states_for_describe_producers(broker: Opener, one_dir: list[Path]) -> None:
    manager = opened(broker, one_dir)
    manager.append(TP, txn(11, 0, 3, epoch=2))
    manager.append(TP, txn(12, 0))
    manager.write_txn_marker(TP, 12, 0, 7, commit=True)
    views = manager.producer_states(TP)
    assert [(v.producer_id, v.producer_epoch, v.last_sequence, v.coordinator_epoch, v.current_txn_start_offset)
            for v in views] == [(11, 2, 2, -1, 0), (12, 0, 0, 7, -1)]


@pytest.mark.parametrize("stop", ["clean", "crash"])
def test_open_transactions_and_the_lso_come_back_after_a_restart(broker: Opener, one_dir: list[Path],
                                                                 stop: str) -> None:
    manager = opened(broker, one_dir)
    manager.append(TP, txn(1, 0, 3))
    for seq in range(6):  # rolls (segment.bytes 400): producer snapshots hold the open transaction
        manager.append(TP, txn(2, seq * 2, 2))
        manager.write_txn_marker(TP, 2, 0, 0, commit=seq % 2 == 0)
    manager.append(TP, txn(3, 0))  # after the last snapshot: found by replay
    before = state(manager)
    aborted = manager.fetch(TP, 0, 1 << 20, FetchIsolation.TXN_COMMITTED).aborted
    assert before[1] == 0 and len(before[2]) == 2 and manager.log(TP).num_segments > 2
    if stop == "clean":
        manager.shutdown()
    else:
        crash(manager)
    again = opened(broker, one_dir)
    assert state(again) == before
    assert again.fetch(TP, 0, 1 << 20, FetchIsolation.TXN_COMMITTED).aborted == aborted
    again.write_txn_marker(TP, 1, 0, 0, commit=False)
    again.write_txn_marker(TP, 3, 0, 0, commit=True)
    hw, lso, ongoing = state(again)
    assert hw == lso == again.offsets(TP).log_end_offset and ongoing == []
