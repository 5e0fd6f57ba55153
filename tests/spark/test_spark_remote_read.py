"""``spark.read.format("tidelog").option("path", <store URI>)``: the remote tier read straight
from the store (tidelog.spark.remote_source), on a file:// store and on the real S3 server.

A tiered topic is written through a LogManager, its sealed segments copied; the data dir is read
by Spark before the local copies are deleted, then the store alone is read and must give the same
rows for the tiered offsets (compaction gaps and headers included). Pruning by offset and by time,
unknown topics, an unreachable store and a vanished object are checked on the functions the driver
and the executors run (in process, with a store that counts requests)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from spark_read_data import T0, append_simple, batch, open_manager

from tidelog.errors import UnknownTopicOrPartitionError
from tidelog.remote.index_cache import RemoteIndexCache
from tidelog.remote.metadata import RemoteFileKind, RemoteLogSegmentId, RemoteLogSegmentState, object_key
from tidelog.remote.metadata_log import RemotePartitionMetadata
from tidelog.remote.store import open_store
from tidelog.spark import remote_source as rs
from tidelog.spark.options import SourceOptionError
from tidelog.spark.reader import DataLossReported
from tidelog.topic_partition import TopicPartition

COLUMNS = ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers"]
TIERED = {"remote.storage.enable": "true", "local.retention.bytes": "1"}


def build(root: Path, uri: str, store_options: dict[str, str]):  # type: ignore[no-untyped-def]
    """A data dir with tiered topics ``events`` (2 partitions, headers, null keys and values) and
    ``gaps`` (compacted by the cleaner: offset gaps); every sealed segment copied to ``uri``.
    Returns (manager, data dir, remote end offset per partition)."""
    data = root / "data"
    props = {"remote.log.storage.system.enable": "true", "remote.log.storage.uri": uri,
             **{f"rsm.config.{k}": v for k, v in store_options.items()}}
    manager = open_manager(data, **props)
    manager.create_topic("events", 2, TIERED)
    manager.create_topic("gaps", 1, {**TIERED, "cleanup.policy": "compact"})
    for p in (0, 1):
        append_simple(manager, TopicPartition("events", p), 900 + 100 * p, per_batch=10)
    for first in range(0, 1500, 10):  # 25 keys over and over: compaction leaves gaps
        manager.append(TopicPartition("gaps", 0),
                       batch([(j, T0 + first + j, b"k%d" % ((first + j) % 25), b"v%d" % (first + j), [])
                              for j in range(10)]))
    assert manager.cleaner.clean_now(TopicPartition("gaps", 0), force=True) is not None
    manager.remote_tier.copy_pass()
    ends = {s.topic_partition: s.highest_remote_offset + 1 for s in manager.remote_tier.status()}
    assert all(end > 100 for end in ends.values()), ends
    return manager, data, ends


def spark_rows(spark, path: str, **options: object) -> list[tuple]:  # type: ignore[no-untyped-def]
    reader = spark.read.format("tidelog").option("includeHeaders", "true")
    for key, value in options.items():
        reader = reader.option(key, value)
    out = []
    for row in reader.load(path).selectExpr(*COLUMNS).collect():
        values = list(row)
        if values[-1] is not None:
            values[-1] = [(h["key"], h["value"]) for h in values[-1]]
        out.append(tuple(values))
    return sorted(out, key=lambda r: (r[2], r[3], r[4]))


def check_equal_to_local_read(spark, manager, data: Path, ends, uri: str,  # type: ignore[no-untyped-def]
                              store_options: dict[str, str]) -> None:
    local = [r for r in spark_rows(spark, str(data), subscribe="events,gaps")
             if r[4] < ends[TopicPartition(r[2], r[3])]]
    manager.run_retention()
    for tp in ends:
        assert manager.get_log(tp).local_log_start_offset >= ends[tp], "the tiered segments are gone locally"
    remote = spark_rows(spark, uri, subscribe="events,gaps", **{f"rsm.config.{k}": v for k, v in store_options.items()})
    assert len(remote) == len(local) > 1000
    assert remote == local
    gaps = [r[4] for r in remote if r[2] == "gaps"]
    assert 0 < len(gaps) < gaps[-1] + 1, "compaction gaps, as stored"
    assert any(r[0] is None for r in remote) and any(r[-1] for r in remote)


def test_a_file_store_reads_row_for_row_as_the_local_dir(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    uri = (tmp_path / "store").as_uri()
    manager, data, ends = build(tmp_path, uri, {})
    try:
        check_equal_to_local_read(spark, manager, data, ends, uri, {})
    finally:
        manager.shutdown()


def s3_options(object_store) -> dict[str, str]:  # type: ignore[no-untyped-def]
    c = object_store.credentials
    return {"endpoint.url": c.endpoint_url, "access.key": c.access_key, "secret.key": c.secret_key,
            "region": c.region}


def test_an_s3_store_reads_row_for_row_as_the_local_dir(spark, tmp_path: Path, object_store,  # type: ignore[no-untyped-def]
                                                        bucket: str) -> None:
    uri, options = f"s3://{bucket}/tiered", s3_options(object_store)
    manager, data, ends = build(tmp_path, uri, options)
    try:
        check_equal_to_local_read(spark, manager, data, ends, uri, options)
    finally:
        manager.shutdown()


# --- driver and executor functions in process ------------------------------------------------

class CountingStore:
    """A store passing every call through, counting the ranged GETs and GETs per key suffix."""

    def __init__(self, store) -> None:  # type: ignore[no-untyped-def]
        self.store, self.uri, self.gets = store, store.uri, []

    def get(self, key: str) -> bytes:
        self.gets.append(key)
        return self.store.get(key)

    def get_range(self, key: str, start: int, length: int) -> bytes:
        self.gets.append(key)
        return self.store.get_range(key, start, length)

    def __getattr__(self, name: str):  # type: ignore[no-untyped-def]
        return getattr(self.store, name)

    def logs_read(self) -> set[str]:
        return {k for k in self.gets if k.endswith(".log")}


@pytest.fixture(scope="module")
def tiered(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    root = tmp_path_factory.mktemp("remote-read")
    uri = (root / "store").as_uri()
    manager, data, ends = build(root, uri, {})
    manager.run_retention()
    manager.shutdown()
    return uri, ends


def options(uri: str, **extra: str) -> dict[str, str]:
    strategy = {} if "assign" in extra else {"subscribe": "events"}
    return {"path": uri, **strategy, **{k.lower(): v for k, v in extra.items()}}


def counting(uri: str, monkeypatch) -> CountingStore:  # type: ignore[no-untyped-def]
    store = CountingStore(open_store(uri))
    monkeypatch.setattr(rs.RemoteSourceOptions, "open_store", lambda self: store)
    return store


def read(ropts, ranges, store, tmp_path: Path) -> list[int]:  # type: ignore[no-untyped-def]
    cache = RemoteIndexCache(store, tmp_path / "index", 1 << 20)
    offsets = []
    for r in ranges:
        for b in rs.read_remote_range(ropts, r, store, cache):
            offsets += b.column(4).to_pylist()
    return offsets


def test_an_offset_range_reads_only_the_segments_it_overlaps(tiered, tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    uri, ends = tiered
    store = counting(uri, monkeypatch)
    ropts = rs.parse_remote_options(options(uri, startingOffsets='{"events":{"0":500,"1":-2}}',
                                            endingOffsets='{"events":{"0":600,"1":40}}'), streaming=False)
    ranges = rs.plan(ropts)
    assert [(r.partition, r.start, r.end) for r in ranges] == [(0, 500, 600), (1, 0, 40)]
    assert not store.logs_read(), "planning reads metadata only"
    planned = {object_key(s, RemoteFileKind.SEGMENT) for r in ranges for s in r.segments}
    assert all(s.start_offset < r.end and s.end_offset >= r.start for r in ranges for s in r.segments)
    assert read(ropts, ranges, store, tmp_path) == list(range(500, 600)) + list(range(0, 40))
    assert store.logs_read() == planned and len(planned) < 6, "segments outside the ranges are never read"


def test_a_starting_timestamp_skips_segments_by_their_max_timestamp(tiered, tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    uri, ends = tiered
    store = counting(uri, monkeypatch)
    # record i of events-p has timestamp T0 + (its offset): the first offset at or after T0 + 700 is 700
    ropts = rs.parse_remote_options(options(uri, startingTimestamp=str(T0 + 700)), streaming=False)
    ranges = rs.plan(ropts)
    assert [(r.partition, r.start) for r in ranges] == [(0, 700), (1, 700)]
    assert {r.end for r in ranges} == {ends[TopicPartition("events", 0)], ends[TopicPartition("events", 1)]}
    time_indexes = [k for k in store.gets if k.endswith(".timeindex")]
    assert len(time_indexes) == 2, "one segment searched per partition; the older ones skipped unread"
    assert read(ropts, ranges, store, tmp_path)[:3] == [700, 701, 702]


def test_an_ending_timestamp_with_no_match_is_the_remote_end(tiered, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    uri, ends = tiered
    counting(uri, monkeypatch)
    ropts = rs.parse_remote_options(options(uri, endingTimestamp=str(T0 + 10**9)), streaming=False)
    assert [r.end for r in rs.plan(ropts) if r.partition == 0][-1] == ends[TopicPartition("events", 0)]


def test_an_unknown_topic_fails_as_sparks_kafka_source(tiered) -> None:  # type: ignore[no-untyped-def]
    uri, _ = tiered
    with pytest.raises(UnknownTopicOrPartitionError, match="UnknownTopicOrPartitionException.*nope"):
        rs.check_load_options({"path": uri, "subscribe": "nope"})
    rs.check_load_options({"path": uri, "subscribePattern": "^nope"})  # a pattern matching nothing reads nothing


def test_store_options_are_checked_and_a_bootstrap_is_kept(tiered) -> None:  # type: ignore[no-untyped-def]
    uri, _ = tiered
    ropts = rs.parse_remote_options({**options(uri), "kafka.bootstrap.servers": "h:9092"}, streaming=False)
    assert ropts.bootstrap == "h:9092"  # the tail through the broker: tests in test_spark_remote_tail.py
    assert rs.parse_remote_options(options(uri, minOffsetsPerTrigger="5"), streaming=True).parsed.min_offsets_per_trigger == 5
    with pytest.raises(SourceOptionError, match="rsm.config"):
        rs.parse_remote_options({**options(uri), "rsm.config.endpoint.url": "http://x"}, streaming=False)


def test_a_vanished_segment_object_honours_fail_on_data_loss(tiered, tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    uri, _ = tiered
    store = counting(uri, monkeypatch)
    ropts = rs.parse_remote_options(options(uri, assign='{"events":[0]}'), streaming=False)
    [r] = rs.plan(ropts)
    second = r.segments[1]
    data = store.get(object_key(second, RemoteFileKind.SEGMENT))
    store.delete(object_key(second, RemoteFileKind.SEGMENT))  # as remote retention would, after planning
    try:
        with pytest.raises(DataLossReported, match=rf"offsets \[{second.start_offset}, {second.end_offset + 1}\) "
                                                   r"of events-0 .*failOnDataLoss"):
            read(ropts, [r], store, tmp_path)
        lenient = rs.parse_remote_options(options(uri, assign='{"events":[0]}', failOnDataLoss="false"),
                                          streaming=False)
        got = read(lenient, [r], store, tmp_path / "2")
        assert got == [o for o in range(r.start, r.end) if not second.start_offset <= o <= second.end_offset]
    finally:
        store.put(object_key(second, RemoteFileKind.SEGMENT), data)


def test_an_unreachable_store_names_the_partition_and_range(object_store, bucket: str, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    uri, good = f"s3://{bucket}/tiered", s3_options(object_store)
    manager, _, ends = build(tmp_path, uri, good)
    manager.shutdown()
    as_spark = {f"rsm.config.{k}": v for k, v in good.items()}
    ropts = rs.parse_remote_options({**options(uri, assign='{"events":[1]}'), **as_spark}, streaming=False)
    [r] = rs.plan(ropts)
    dead = {**as_spark, "rsm.config.endpoint.url": "http://127.0.0.1:9", "rsm.config.retry.max.attempts": "1",
            "rsm.config.connect.timeout.ms": "500"}
    gone = rs.parse_remote_options({**options(uri, assign='{"events":[1]}'), **dead}, streaming=False)
    with pytest.raises(rs.RemoteReadError, match=r"offsets \[0, \d+\) of events-1 from the remote tier at s3://"):
        list(rs.read_remote_range(gone, r))
    with pytest.raises(rs.RemoteReadError, match="Cannot list the remote tier at s3://"):
        rs.plan(gone)


def test_a_segment_swapped_after_planning_is_read_from_its_replacement(tiered, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                                      monkeypatch) -> None:
    """A compaction's swap between planning and the read: the planned segment's objects are gone,
    the partition's metadata names the segment that replaced it, and the rows are the same."""
    uri, _ = tiered
    store = counting(uri, monkeypatch)
    ropts = rs.parse_remote_options(options(uri, assign='{"events":[1]}'), streaming=False)
    [r] = rs.plan(ropts)
    before = read(ropts, [r], store, tmp_path / "before")
    old = r.segments[2]
    writer = RemotePartitionMetadata.load(store.store, old.topic_id_partition)
    new = dataclasses.replace(old, segment_id=RemoteLogSegmentId.generate(old.topic_id_partition),
                              state=RemoteLogSegmentState.COPY_SEGMENT_STARTED)
    writer.begin_copy(new)
    kinds = [k for k in RemoteFileKind if k != RemoteFileKind.TRANSACTION_INDEX]  # txn_idx_empty
    for kind in kinds:
        store.put(object_key(new, kind), store.get(object_key(old, kind)))
    writer.swap([old], [new])
    for kind in kinds:  # as the cleaner does file.delete.delay.ms after its swap
        store.delete(object_key(old, kind))
    assert read(ropts, [r], store, tmp_path / "after") == before == list(range(r.start, r.end))
    assert object_key(new, RemoteFileKind.SEGMENT) in store.logs_read()


def test_spark_errors_name_the_topic_the_option_and_the_lost_range(spark, tiered) -> None:  # type: ignore[no-untyped-def]
    """Through Spark: an unknown topic fails at load(), so does a broker that does not answer, and an object
    gone between planning and the read fails the job naming the partition and offsets (or, with
    failOnDataLoss=false, reads the rest)."""
    uri, ends = tiered
    with pytest.raises(Exception, match="UnknownTopicOrPartitionException"):
        spark.read.format("tidelog").option("subscribe", "nope").load(uri)
    with pytest.raises(Exception, match="from the broker at 127.0.0.1:9 .option 'kafka.bootstrap.servers'"):
        spark.read.format("tidelog").option("subscribe", "events").option("kafka.bootstrap.servers",
                                                                          "127.0.0.1:9").load(uri)
    store = open_store(uri)
    ropts = rs.parse_remote_options(options(uri, assign='{"events":[0]}'), streaming=False)
    victim = rs.plan(ropts)[0].segments[0]
    key = object_key(victim, RemoteFileKind.SEGMENT)
    data = store.get(key)
    store.delete(key)  # listed as FINISHED, its .log gone: what retention racing a read leaves
    try:
        df = spark.read.format("tidelog").option("assign", '{"events":[0]}').load(uri)
        with pytest.raises(Exception, match=rf"offsets \[0, {victim.end_offset + 1}\) of events-0.*failOnDataLoss"):
            df.count()
        lenient = spark.read.format("tidelog").option("assign", '{"events":[0]}').option("failOnDataLoss", "false")
        assert lenient.load(uri).count() == ends[TopicPartition("events", 0)] - victim.end_offset - 1
    finally:
        store.put(key, data)


def test_a_topic_under_two_topic_ids_is_ambiguous_unless_one_is_being_deleted(tiered) -> None:  # type: ignore[no-untyped-def]
    from tidelog.remote.partition_delete import PENDING_PREFIX
    from tidelog.storage.metadata import new_topic_id

    uri, _ = tiered
    store, other = open_store(uri), new_topic_id()
    stray, pending = f"events-{other}/0/00000000000000000000-x.log", f"{PENDING_PREFIX}events-{other}.json"
    store.put(stray, b"")
    try:
        with pytest.raises(rs.RemoteReadError, match=f"topic 'events' under several topic ids .*{other}"):
            rs.plan(rs.parse_remote_options(options(uri), streaming=False))
        store.put(pending, b"{}")  # a deletion of the old topic id's data is under way: not read
        ranges = rs.plan(rs.parse_remote_options(options(uri), streaming=False))
        assert {r.partition for r in ranges} == {0, 1} and all(other not in str(r.segments) for r in ranges)
    finally:
        store.delete(stray)
        store.delete(pending)


def test_a_stream_reads_each_tiered_offset_once_across_restarts(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """readStream of a store: AvailableNow with maxOffsetsPerTrigger drains what is tiered; after
    more segments are tiered, a restart on the same checkpoint reads only those, none twice."""
    uri = (tmp_path / "store").as_uri()
    manager, data, ends = build(tmp_path, uri, {})
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"

    def drain() -> list[tuple]:  # type: ignore[type-arg]
        stream = (spark.readStream.format("tidelog").option("subscribe", "events").option("startingOffsets", "earliest")
                  .option("maxOffsetsPerTrigger", "700").load(uri))
        query = (stream.selectExpr("topic", "partition", "offset", "key", "value").writeStream.format("parquet")
                 .option("path", str(out)).option("checkpointLocation", str(checkpoint))
                 .trigger(availableNow=True).start())
        query.awaitTermination(120)
        assert query.exception() is None
        return sorted(tuple(r) for r in spark.read.parquet(str(out)).collect())

    def expected(upto) -> list[tuple]:  # type: ignore[no-untyped-def,type-arg]
        rows = spark_rows(spark, str(data), subscribe="events")
        return sorted((r[2], r[3], r[4], r[0], r[1]) for r in rows if r[4] < upto[TopicPartition(r[2], r[3])])

    try:
        first = drain()
        assert first == expected(ends) and len(first) > 1500
        for p in (0, 1):
            append_simple(manager, TopicPartition("events", p), 600, per_batch=10)
        manager.remote_tier.copy_pass()
        later = {s.topic_partition: s.highest_remote_offset + 1 for s in manager.remote_tier.status()}
        assert all(later[tp] > ends[tp] for tp in ends if tp.topic == "events")
        assert drain() == expected(later), "the new offsets once, the old ones not again"
    finally:
        manager.shutdown()


def test_index_dirs_of_dead_workers_are_removed(tmp_path: Path) -> None:
    import subprocess
    import sys

    code = "from tidelog.spark.remote_source import index_dir; d = index_dir(); d.mkdir(); print(d)"
    made = Path(subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout.strip())
    assert made.is_dir(), "the worker exited without removing it (as Spark's os._exit does)"
    mine = rs.index_dir()
    assert not made.exists() and mine.parent == made.parent


def test_a_data_dir_given_as_a_file_uri_says_to_give_a_plain_path(tmp_path: Path) -> None:
    manager = open_manager(tmp_path / "data")
    manager.create_topic("events", 1)
    append_simple(manager, TopicPartition("events", 0), 10)
    manager.shutdown()
    with pytest.raises(SourceOptionError, match="is a data dir, not a remote-tier store; give a data dir as a plain"):
        rs.check_load_options({"path": (tmp_path / "data").as_uri(), "subscribe": "events"})
