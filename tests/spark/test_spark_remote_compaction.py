"""Compaction of a tiered compacted log on Spark (``tidelog.spark.remote_compaction``): the same
input cleaned by the in-process cleaner and by the Spark engine leaves the same bytes in every
remote object and every local segment file; executors read and write the store (file:// here, the
SeaweedFS S3 server in one case); faults fail the pass naming the partition and the offsets, and
lose nothing."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.append(str(Path(__file__).parent.parent / "cleaner"))  # the remote-compaction helpers
from remote_clean_helpers import (  # noqa: E402 - needs the path above
    BUFFERS,
    TP,
    Tier,
    append,
    both_tiers,
    fresh,
    local_records,
    local_retention,
    open_log,
    roll,
    segment_objects,
    stored_segment_objects,
)

from tidelog.cleaner.clean import Cleaner, InProcessEngine  # noqa: E402
from tidelog.cleaner.remote_clean import RemoteCleaning  # noqa: E402
from tidelog.remote.metadata import RemoteFileKind, object_key  # noqa: E402
from tidelog.remote.store import ArrowRemoteStore, RemoteStore  # noqa: E402
from tidelog.storage.log import Log  # noqa: E402
from tidelog.testing import FakeClock  # noqa: E402

SEGMENT_BYTES = "1400"  # ~20 one-record batches: several remote segments, most groups one segment


def scenario(root: Path, store: RemoteStore) -> tuple[Log, FakeClock, Tier]:
    """Keys 0..59 written, tiered and freed locally; then updates and tombstones of some keys
    (remote and local), a few of them tiered too; keys 40..59 never change (their segments
    clean to the same bytes)."""
    clock = FakeClock()
    tier = Tier(store, clock)
    log = open_log(root / "logs" / "events-0", clock, tiered=True, segment_bytes=SEGMENT_BYTES,
                   delete_retention_ms="600000")
    append(log, [(k, f"a{k}") for k in range(60)])
    roll(log)
    clock.advance(10)
    tier.copy(log)
    local_retention(log, clock)
    append(log, [(k, f"b{k}") for k in range(0, 40, 3)])
    append(log, [(k, None) for k in range(1, 40, 7)])
    roll(log)
    clock.advance(10)
    tier.copy(log)
    append(log, [(k, f"c{k}") for k in range(0, 20, 5)])
    roll(log)
    return log, clock, tier


def spark_cleaner(spark: Any, clock: FakeClock, tier: Tier) -> tuple[Cleaner, RemoteCleaning]:
    from tidelog.spark.compaction import SparkCleaningEngine

    remote = RemoteCleaning(tier.source)
    return Cleaner(SparkCleaningEngine(BUFFERS, spark=spark, split_bytes=600), clock, remote=remote), remote


def in_process_cleaner(clock: FakeClock, tier: Tier) -> tuple[Cleaner, RemoteCleaning]:
    remote = RemoteCleaning(tier.source)
    return Cleaner(InProcessEngine(BUFFERS), clock, remote=remote), remote


def stored_bytes(store: RemoteStore, log: Log) -> dict[str, Any]:
    """Every finished remote segment (offsets, metadata fields, each object's bytes; ids aside),
    the unreferenced ones' offsets and states, and every local segment's files."""
    reader = fresh(store)
    remote = []
    for s in reader.finished_segments():
        objects = {k.name: store.get(object_key(s, k)) for k in RemoteFileKind
                   if not (k is RemoteFileKind.TRANSACTION_INDEX and s.txn_idx_empty)}
        remote.append((s.start_offset, s.end_offset, s.segment_size_in_bytes, s.max_timestamp_ms, s.txn_idx_empty,
                       s.segment_leader_epochs, objects))
    waiting = sorted((s.start_offset, s.end_offset, s.state.name) for s in reader.unreferenced())
    local = [(s.base_offset, s.log.path.read_bytes(), s.offset_index.path.read_bytes(),
              s.time_index.path.read_bytes()) for s in log.segments]
    return {"remote": remote, "waiting": waiting, "local": local}


def _file_store(root: Path) -> ArrowRemoteStore:
    return ArrowRemoteStore((root / "store").as_uri())


def _same_as_in_process(spark: Any, tmp_path: Path, store_of: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from tidelog.spark.remote_compaction import SparkTieredEngine

    jobs = []
    real = SparkTieredEngine.clean_remote_groups

    def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        jobs.append(len(args[2]))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(SparkTieredEngine, "clean_remote_groups", counted)
    results = []
    for name, make in (("in-process", lambda clock, tier: in_process_cleaner(clock, tier)),
                       ("spark", lambda clock, tier: spark_cleaner(spark, clock, tier))):
        store = store_of(tmp_path / name)
        log, clock, tier = scenario(tmp_path / name, store)
        assert log.local_log_start_offset >= 60 and len(fresh(store).finished_segments()) >= 4
        cleaner, _ = make(clock, tier)
        end, stats = cleaner.clean_pass(log, TP, 0, log.active_segment.base_offset)
        results.append((end, stored_bytes(store, log), both_tiers(store, log), stats.messages_written))
        log.close()
    assert len(jobs) == 1 and jobs[0] >= 4, "the Spark pass cleaned the remote groups in one job"
    (end_a, bytes_a, records_a, kept_a), (end_b, bytes_b, records_b, kept_b) = results
    assert end_a == end_b and records_a == records_b and kept_a == kept_b
    assert bytes_a["remote"] == bytes_b["remote"], "the remote segments' objects are byte for byte the same"
    assert bytes_a["waiting"] == bytes_b["waiting"], "the same segments wait for their deletion"
    assert bytes_a["local"] == bytes_b["local"], "the local tier is byte for byte the same"
    assert len({k for _, k, _ in records_b}) == len(records_b) == 60, "one record per key across both tiers"


def test_the_spark_engine_cleans_both_tiers_byte_for_byte_as_in_process(spark: Any, tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    _same_as_in_process(spark, tmp_path, _file_store, monkeypatch)


def test_the_spark_engine_on_the_s3_server(spark: Any, tmp_path: Path, object_store: Any, bucket: str,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    credentials = object_store.credentials

    def s3(root: Path) -> ArrowRemoteStore:
        return ArrowRemoteStore(f"s3://{bucket}/{root.name}", {
            "endpoint.url": credentials.endpoint_url, "access.key": credentials.access_key,
            "secret.key": credentials.secret_key, "region": credentials.region, "retry.max.attempts": "1"})
    _same_as_in_process(spark, tmp_path, s3, monkeypatch)


def test_a_second_pass_from_a_dirty_offset_matches_in_process(spark: Any, tmp_path: Path) -> None:
    """After a first clean, more updates (some tiered): the map starts past the local log start
    offset or below it, and both engines still agree."""
    results = []
    for name in ("in-process", "spark"):
        store = _file_store(tmp_path / name)
        log, clock, tier = scenario(tmp_path / name, store)
        make = (lambda: in_process_cleaner(clock, tier)) if name == "in-process" else (
            lambda: spark_cleaner(spark, clock, tier))
        first, _ = make()[0].clean_pass(log, TP, 0, log.active_segment.base_offset)
        append(log, [(k, f"d{k}") for k in range(0, 60, 4)])
        roll(log)
        clock.advance(10)
        tier.copy(log)
        local_retention(log, clock)
        append(log, [(k, f"e{k}") for k in range(2, 60, 9)])
        roll(log)
        end, _ = make()[0].clean_pass(log, TP, first, log.active_segment.base_offset)
        results.append((first, end, stored_bytes(store, log), both_tiers(store, log)))
        log.close()
    assert results[0] == results[1]


def test_a_vanished_remote_object_fails_the_pass_naming_partition_and_offsets(spark: Any, tmp_path: Path) -> None:
    """Retention (or anything) removed an object under the clean: the pass fails with an error
    naming the partition and the offset range, the finished set stays as it was, and what the
    pass reserved or uploaded is deleted."""
    from tidelog.errors import TidelogError

    store = _file_store(tmp_path)
    log, clock, tier = scenario(tmp_path, store)
    finished = fresh(store).finished_segments()
    gone = finished[1]
    (tmp_path / "store" / object_key(gone, RemoteFileKind.SEGMENT)).unlink()
    before = local_records(log)
    cleaner, _ = spark_cleaner(spark, clock, tier)
    with pytest.raises(TidelogError) as failed:
        cleaner.clean_pass(log, TP, 0, log.active_segment.base_offset)
    text = str(failed.value)
    assert str(TP) in text and f"{gone.start_offset}..{gone.end_offset}" in text, text
    assert [s.id for s in fresh(store).finished_segments()] == [s.id for s in finished]
    assert fresh(store).unreferenced() == [], "what was reserved is deleted"
    assert local_records(log) == before
    log.close()


class _Unreachable:
    """The store as an executor sees it when it cannot reach it: every read of a segment's
    ``.log`` object fails (the owner's own reads work)."""

    def __init__(self, inner: RemoteStore, owner_pid: int) -> None:
        self.inner, self.uri, self.owner_pid = inner, inner.uri, owner_pid

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name == "inner":  # unpickling: no inner yet
            raise AttributeError(name)
        return getattr(self.inner, name)

    def get_range(self, key: str, start: int, length: int) -> bytes:
        import os

        from tidelog.remote.errors import RemoteStoreUnreachableError

        if os.getpid() != self.owner_pid and key.endswith(".log"):
            raise RemoteStoreUnreachableError("connection refused (injected)", operation="get_range", key=key,
                                              uri=self.uri)
        return self.inner.get_range(key, start, length)


def test_a_store_unreachable_from_the_executors_fails_the_pass_and_loses_nothing(spark: Any, tmp_path: Path) -> None:
    import os

    from tidelog.errors import TidelogError
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    inner = _file_store(tmp_path)
    log, clock, _ = scenario(tmp_path, inner)
    before_remote, before_local = fresh(inner).finished_segments(), local_records(log)
    tier = Tier(_Unreachable(inner, os.getpid()), clock)  # type: ignore[arg-type]
    cleaner, _ = spark_cleaner(spark, clock, tier)
    with pytest.raises(TidelogError) as failed:
        cleaner.clean_pass(log, TP, 0, log.active_segment.base_offset)
    text = str(failed.value)
    assert str(TP) in text and "connection refused" in text and ".." in text, text
    assert [s.id for s in fresh(inner).finished_segments()] == [s.id for s in before_remote]
    assert fresh(inner).unreferenced() == [] and stored_segment_objects(inner) == segment_objects(inner)
    assert local_records(log) == before_local
    log.close()


def test_a_change_by_another_writer_during_the_job_makes_the_clean_give_up(spark: Any, tmp_path: Path) -> None:
    """Another process's retention deletes a segment while the job runs: the owner's fence (the
    metadata read again before it writes) gives up, deleting every reserved segment's uploads."""
    from remote_clean_helpers import TIP

    from tidelog.errors import LogCleaningAbortedError
    from tidelog.remote.copy import delete_remote_segment
    from tidelog.remote.metadata import RemoteLogSegmentState
    from tidelog.remote.metadata_log import RemotePartitionMetadata
    from tidelog.spark.compaction import SparkCleaningEngine

    store = _file_store(tmp_path)
    log, clock, tier = scenario(tmp_path, store)
    finished = fresh(store).finished_segments()
    before_local = local_records(log)
    changed = []

    def retention_meanwhile(tp: Any) -> None:
        other = RemotePartitionMetadata.load(store, TIP, clock=clock, broker_id=2)
        if not changed and any(s.state == RemoteLogSegmentState.COPY_SEGMENT_STARTED for s in other.unreferenced()):
            delete_remote_segment(store, other, finished[0])
            changed.append(finished[0].id)

    cleaner = Cleaner(SparkCleaningEngine(BUFFERS, spark=spark, split_bytes=600), clock,
                      check_done=retention_meanwhile, remote=RemoteCleaning(tier.source))
    with pytest.raises(LogCleaningAbortedError, match="gives up"):
        cleaner.clean_pass(log, TP, 0, log.active_segment.base_offset)
    assert changed
    reader = fresh(store)
    assert [s.id for s in reader.finished_segments()] == [s.id for s in finished[1:]]
    assert reader.unreferenced() == [] and stored_segment_objects(store) == segment_objects(store), "no orphan"
    assert local_records(log) == before_local
    log.close()


def test_a_tiered_log_with_nothing_remote_yet_cleans_as_in_process(spark: Any, tmp_path: Path) -> None:
    """No remote segment below the map's end (nothing copied yet): the job maps the local rows
    alone and the local tier is rewritten from it, as in process."""
    results = []
    for name in ("in-process", "spark"):
        store = _file_store(tmp_path / name)
        clock = FakeClock()
        tier = Tier(store, clock)
        log = open_log(tmp_path / name / "logs" / "events-0", clock, tiered=True, segment_bytes=SEGMENT_BYTES)
        append(log, [(k % 25, f"a{k}") for k in range(80)] + [(3, None)])
        roll(log)
        cleaner, _ = in_process_cleaner(clock, tier) if name == "in-process" else spark_cleaner(spark, clock, tier)
        end, _ = cleaner.clean_pass(log, TP, 0, log.active_segment.base_offset)
        assert fresh(store).finished_segments() == []
        results.append((end, stored_bytes(store, log), local_records(log)))
        log.close()
    assert results[0] == results[1]
    assert len(results[1][2]) == 25


def _transactional(root: Path, store: RemoteStore) -> tuple[Log, FakeClock, Tier]:
    """Aborted data in one remote segment, its ABORT marker and .txnindex entry in the next, a
    committed record before them: the map's replay reads the walked markers and the remote
    .txnindex objects."""
    from cleaner_helpers import keyed_batch

    from tidelog.records.control import build_end_txn_marker_batch
    from tidelog.storage.txn_index import AbortedTxn

    clock = FakeClock()
    tier = Tier(store, clock)
    log = open_log(root / "logs" / "events-0", clock, tiered=True)
    log.append_as_follower(keyed_batch([(b"k", b"committed")], base_offset=0, partition_leader_epoch=0))
    log.append_as_follower(keyed_batch([(b"k", b"aborted"), (b"j", b"aborted")], base_offset=1, producer_id=1,
                                       producer_epoch=0, base_sequence=0, is_transactional=True))
    log.roll()
    log.append_as_follower(build_end_txn_marker_batch(commit=False, producer_id=1, producer_epoch=0,
                                                      coordinator_epoch=0, base_offset=3, timestamp=clock.milliseconds()))
    log.active_segment.txn_index.append(AbortedTxn(1, 1, 3, 1))
    log.append_as_follower(keyed_batch([(b"other", b"x")], base_offset=4))
    log.roll()
    log.append_as_follower(keyed_batch([(b"other", b"y")], base_offset=5))
    log.update_high_watermark(log.log_end_offset)
    log.roll()
    clock.advance(10)
    tier.copy(log)
    local_retention(log, clock)
    return log, clock, tier


def test_aborted_transactions_in_remote_segments_clean_as_in_process(spark: Any, tmp_path: Path) -> None:
    results = []
    for name in ("in-process", "spark"):
        store = _file_store(tmp_path / name)
        log, clock, tier = _transactional(tmp_path / name, store)
        assert any(not s.txn_idx_empty for s in fresh(store).finished_segments())
        cleaner, _ = in_process_cleaner(clock, tier) if name == "in-process" else spark_cleaner(spark, clock, tier)
        end, _ = cleaner.clean_pass(log, TP, 0, log.active_segment.base_offset)
        results.append((end, stored_bytes(store, log), both_tiers(store, log)))
        log.close()
    assert results[0] == results[1]
    kept = results[1][2]
    assert (0, b"k", b"committed") in kept and not any(v == b"aborted" for _, _, v in kept)
