"""The remote reader's read_committed side (manager/remote_reads.py): aborted transactions come
from the remote ``.txnindex`` objects of segments only the remote tier holds, then the local
ones; and a remote read returns them with its records."""

from __future__ import annotations

from pathlib import Path

from copy_helpers import T0, make_log

from tidelog.manager.remote_reads import RemoteReader
from tidelog.records import BatchBuilder, iter_batches
from tidelog.records.control import build_end_txn_marker_batch
from tidelog.remote.copy import copy_log
from tidelog.remote.metadata_log import RemotePartitionMetadata
from tidelog.remote.store import ArrowRemoteStore
from tidelog.storage.config import BrokerConfig
from tidelog.storage.fetch_info import FetchIsolation
from tidelog.storage.log import Log
from tidelog.testing import FakeClock
from tidelog.topic_partition import TopicPartition


def test_aborted_transactions_come_from_the_remote_txn_index(tmp_path: Path, store: ArrowRemoteStore, tip) -> None:
    log = make_log(tmp_path / "orders-2", 3, aborted_in=(1,))  # an index entry in segment 1 (no marker)
    expected = log.segments[1].txn_index.all_aborted_txns()
    assert [t.producer_id for t in expected] == [7]
    metadata = RemotePartitionMetadata.load(store, tip)
    copied = copy_log(log, store, metadata, epochs=log.leader_epoch_cache.entries)
    assert [c.txn_idx_empty for c in copied] == [True, False, True]
    log.delete_oldest_segments(log.segments[:2], "test: only the remote tier holds them", move_log_start=False)
    assert log.local_log_start_offset == copied[2].start_offset

    broker = BrokerConfig.from_properties({"log.dirs": str(tmp_path / "logs")})
    reader = RemoteReader(broker, store, tmp_path / "logs", lambda tp, lg: metadata)
    try:
        tp = TopicPartition("orders", 2)
        assert reader.aborted_transactions(tp, log, 0, log.log_end_offset) == expected
        got = reader.read(tp, log, copied[1].start_offset, 1 << 20, FetchIsolation.TXN_COMMITTED)
        first = copied[1].start_offset
        assert got.records and got.aborted == ((7, first),)
        assert reader.read(tp, log, 0, 1 << 20, FetchIsolation.HIGH_WATERMARK).aborted is None
        cached = sorted(p.suffix for p in (tmp_path / "logs" / "remote-log-index-cache").iterdir())
        assert cached.count(".txnindex") == 1, "only the remote-only segment with aborts: its .txnindex"
    finally:
        reader.close()
        log.close()


def test_a_read_that_goes_on_in_the_local_log_gets_the_local_aborted_transactions(tmp_path: Path,
                                                                                   store: ArrowRemoteStore,
                                                                                   tip) -> None:
    """Remote segment 0..9 holds batches up to offset 4 only (the rest compacted away); a
    read_committed fetch from 7 goes on in the local log, whose batch 10..14 is a transaction of
    producer 7 that its marker at 15 aborts: the answer must list it, or the consumer delivers
    aborted records."""
    log = Log.open(tmp_path / "orders-2", clock=FakeClock())
    log.append_as_follower(_batch(0, 5))
    log.roll(10)
    log.append_as_follower(_batch(10, 5, producer_id=7, producer_epoch=0, base_sequence=0, is_transactional=True))
    log.append_as_follower(build_end_txn_marker_batch(commit=False, producer_id=7, producer_epoch=0,
                                                      coordinator_epoch=0, base_offset=15, timestamp=T0,
                                                      partition_leader_epoch=0))
    log.roll()
    log.update_high_watermark(log.log_end_offset)
    metadata = RemotePartitionMetadata.load(store, tip)
    copied = copy_log(log, store, metadata, epochs=log.leader_epoch_cache.entries)
    assert [(c.start_offset, c.end_offset) for c in copied] == [(0, 9), (10, 15)]
    log.delete_oldest_segments(log.segments[:1], "test: only the remote tier holds it", move_log_start=False)

    broker = BrokerConfig.from_properties({"log.dirs": str(tmp_path / "logs")})
    reader = RemoteReader(broker, store, tmp_path / "logs", lambda tp, lg: metadata)
    try:
        got = reader.read(TopicPartition("orders", 2), log, 7, 1 << 20, FetchIsolation.TXN_COMMITTED)
        assert [b.base_offset for _, b in iter_batches(got.records)] == [10, 15]
        assert got.aborted == ((7, 10),)
    finally:
        reader.close()
        log.close()


def _batch(base: int, count: int, **producer) -> bytes:
    builder = BatchBuilder(base_offset=base, partition_leader_epoch=0, **producer)
    for i in range(count):
        builder.append(base + i, T0 + base + i, b"k", b"v")
    return builder.build()
