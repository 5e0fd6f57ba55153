"""The manager is the only door to a Log: the server, the CLI and Spark call its record methods
(read, fetch, list offsets, offsets, configs, producer ids) and never hold a ``Log``."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from manager_helpers import T0, Opener, batch, tp

from tidelog.errors import LogDirOfflineError, OffsetOutOfRangeError, UnknownTopicOrPartitionError
from tidelog.records import iter_batches
from tidelog.storage.fetch_info import FetchIsolation

SRC = Path(__file__).resolve().parents[2] / "src" / "tidelog"
FRONT_DOORS = ("server", "cli", "spark")
# a Log taken from the manager: manager.log(tp), manager.logs(), manager.get_log(tp)
HOLDS_A_LOG = re.compile(r"manager\.(log|logs|get_log)\(")


def _front_door_sources() -> list[Path]:
    return sorted(p for door in FRONT_DOORS for p in (SRC / door).rglob("*.py"))


@pytest.mark.parametrize("path", _front_door_sources(), ids=lambda p: str(p.relative_to(SRC)))
def test_no_front_door_takes_a_log_from_the_manager(path: Path) -> None:
    found = [f"{n}: {line.strip()}" for n, line in enumerate(path.read_text().splitlines(), 1)
             if HOLDS_A_LOG.search(line)]
    assert found == []


def test_fetch_returns_the_records_and_the_offsets_after_the_read(broker: Opener, one_dir: list[Path]) -> None:
    manager = broker.open(one_dir)
    manager.create_topic("t", 1)
    for _ in range(3):
        manager.append(tp("t"), batch(2))
    got = manager.fetch(tp("t"), 2, 1 << 20, FetchIsolation.HIGH_WATERMARK)
    assert [b.base_offset for _, b in iter_batches(got.records)] == [2, 4]
    assert (got.high_watermark, got.last_stable_offset, got.log_start_offset, got.aborted) == (6, 6, 0, None)
    committed = manager.fetch(tp("t"), 0, 1 << 20, FetchIsolation.TXN_COMMITTED)
    assert committed.aborted == ()  # read_committed: the aborted transactions are listed (none here)
    assert manager.fetch(tp("t"), 6, 1 << 20, FetchIsolation.HIGH_WATERMARK).records == b""
    with pytest.raises(OffsetOutOfRangeError):
        manager.fetch(tp("t"), 7, 1 << 20, FetchIsolation.HIGH_WATERMARK)


def test_read_offsets_and_list_offsets_answer_as_the_log(broker: Opener, one_dir: list[Path]) -> None:
    manager = broker.open(one_dir)
    manager.create_topic("t", 2, {"min.insync.replicas": "2"})
    for i in range(3):
        manager.append(tp("t"), batch(1, timestamp=T0 + 10 * i))
    assert [b.base_offset for _, b in iter_batches(manager.read(tp("t"), 1, 1 << 20).records)] == [1, 2]
    assert manager.offsets(tp("t")) == (0, 3, 3, 3)
    assert manager.list_offsets(tp("t"), -2).offset == 0
    assert manager.list_offsets(tp("t"), -1).offset == 3
    assert manager.list_offsets(tp("t"), T0 + 15).offset == 2
    assert manager.list_offsets(tp("t"), T0 + 100) is None
    assert manager.aborted_transactions(tp("t"), 0, 3) == []
    assert manager.partition_config(tp("t")).min_insync_replicas == 2
    info = manager.partition_info(tp("t"))
    assert (info.log_dir, info.log_end_offset, info.high_watermark) == (one_dir[0], 3, 3)
    assert manager.live_partitions() == [tp("t", 0), tp("t", 1)]
    assert manager.live_partitions("t") == [tp("t", 0), tp("t", 1)]
    assert manager.highest_producer_id() == -1  # no idempotent producer wrote here


def test_the_record_methods_refuse_a_partition_without_a_live_log(broker: Opener, one_dir: list[Path]) -> None:
    manager = broker.open(one_dir)
    manager.create_topic("t", 1)
    for call in (lambda t: manager.read(t, 0, 100), lambda t: manager.offsets(t), lambda t: manager.list_offsets(t, -1),
                 lambda t: manager.partition_config(t), lambda t: manager.partition_info(t),
                 lambda t: manager.fetch(t, 0, 100, FetchIsolation.HIGH_WATERMARK)):
        with pytest.raises(UnknownTopicOrPartitionError):
            call(tp("t", 1))
        with pytest.raises(UnknownTopicOrPartitionError):
            call(tp("nope"))
    manager.staged_holds.hold({tp("t"): "job-1"})
    with pytest.raises(LogDirOfflineError):
        manager.fetch(tp("t"), 0, 100, FetchIsolation.HIGH_WATERMARK)
    with pytest.raises(UnknownTopicOrPartitionError):
        manager.live_partitions("nope")
