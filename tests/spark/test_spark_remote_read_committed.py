"""``kafka.isolation.level=read_committed`` on a store path (tidelog.spark.remote_source with
tidelog.spark.broker_tail), with and without ``kafka.bootstrap.servers``.

A real ``tidelog serve`` (in process, real clock) takes transactions from kafka-python's
transactional producers and tiers the partition to the real S3 server (SeaweedFS), so that
(i) aborted transactions lie wholly in the remote tier, (ii) one straddles the tier boundary B:
its data is tiered, its ABORT marker (and so its ``.txnindex`` entry) is in the local active
segment, (iii) one is still open in the local tail (the last stable offset is its first offset).
The oracles: the data-dir reader's read_committed rows of the same partition (read before the
tiered segments are deleted locally) and what kafka-python's read_committed consumer reads
through the broker.
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tidelog.manager import LogManager
from tidelog.server import Endpoint, ServerConfig, ServerThread
from tidelog.spark import options as o
from tidelog.spark import remote_source as rs
from tidelog.spark.broker_tail import parse_broker_options
from tidelog.spark.ranges import OffsetRange
from tidelog.spark.reader import _Subscribed, read_range
from tidelog.storage.config import BrokerConfig
from tidelog.topic_partition import TopicPartition

TP = TopicPartition("rc", 0)
COMMITTED = {"kafka.isolation.level": "read_committed"}

Row = tuple[int, bytes | None, bytes | None]  # offset, key, value


@dataclasses.dataclass
class Tiered:
    manager: LogManager
    thread: ServerThread
    data: Path
    uri: str
    store_options: dict[str, str]
    boundary: int  # B: the highest tiered offset + 1
    straddling_first: int  # (ii)'s first offset (< B; its marker >= B)
    open_first: int  # (iii)'s first offset: the last stable offset
    high_watermark: int
    local_committed: list[Row]  # the data-dir reader, read_committed, before local deletion
    local_uncommitted: list[Row]
    consumer_committed: list[Row]  # kafka-python, isolation_level='read_committed'

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.thread.server.bound[0].port}"

    def options(self, broker: bool = True, **extra: str) -> dict[str, str]:
        return {"path": self.uri, "subscribe": TP.topic, **({"kafka.bootstrap.servers": self.bootstrap} if broker else {}),
                **{f"rsm.config.{k}": v for k, v in self.store_options.items()}, **extra}


def rows_of(batches: Iterator[Any]) -> list[Row]:
    out = []
    for b in batches:
        keys, values, offsets = b.column(0).to_pylist(), b.column(1).to_pylist(), b.column(4).to_pylist()
        out += list(zip(offsets, keys, values))
    return out


def remote_rows(options: dict[str, str]) -> tuple[list[Row], list[rs.RemoteOffsetRange]]:
    ropts = rs.parse_remote_options(options, streaming=False)
    ranges = rs.plan(ropts)
    got = [row for r in ranges for row in rows_of(rs.read_remote_range(ropts, r))]  # type: ignore[arg-type]
    return sorted(got), ranges  # type: ignore[return-value]


def local_rows(data: Path, **extra: str) -> list[Row]:
    parsed = o.parse_source_options({"path": str(data), "subscribe": TP.topic, **extra}, streaming=False)
    bounds = _Subscribed(parsed).bounds[TP]
    return sorted(rows_of(read_range(parsed, OffsetRange(TP.topic, TP.partition, bounds.log_start_offset,
                                                         bounds.end_offset))))


def consumer_rows(bootstrap: str, end: int) -> list[Row]:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KafkaTopicPartition

    ktp = KafkaTopicPartition(TP.topic, TP.partition)
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed",
                             enable_auto_commit=False, auto_offset_reset="earliest", fetch_max_wait_ms=100)
    try:
        consumer.assign([ktp])
        consumer.seek_to_beginning(ktp)
        got: list[Row] = []
        deadline = time.monotonic() + 60
        while consumer.position(ktp) < end:
            assert time.monotonic() < deadline, f"the consumer stopped at {consumer.position(ktp)}, not {end}"
            for records in consumer.poll(timeout_ms=200).values():
                got += [(r.offset, r.key, r.value) for r in records]
        return sorted(got)
    finally:
        consumer.close()


class Writer:
    """kafka-python's transactional producers (and a plain one) writing to ``TP``; each
    transaction's end waits for its marker in the log (the coordinator writes markers after it
    answers EndTxn), so the test decides which segment holds it."""

    def __init__(self, manager: LogManager, bootstrap: str) -> None:
        from kafka import KafkaProducer

        self.manager, self.bootstrap, self.count = manager, bootstrap, 0
        self.plain_producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=1)
        self.txn: dict[str, Any] = {}

    @property
    def log(self) -> Any:
        return self.manager.log(TP)

    def producer(self, name: str) -> Any:
        from kafka import KafkaProducer

        if name not in self.txn:
            p = self.txn[name] = KafkaProducer(bootstrap_servers=self.bootstrap, transactional_id=f"rc-{name}",
                                               linger_ms=1)
            p.init_transactions()
        return self.txn[name]

    def send(self, name: str, n: int) -> int:
        """``n`` records of transactional producer ``name`` (beginning its transaction if none is
        open); the first one's offset."""
        p = self.producer(name)
        if not getattr(p, "_in_txn", False):
            p.begin_transaction()
            p._in_txn = True
        first = None
        for _ in range(n):
            md = p.send(TP.topic, key=name.encode(), value=b"%s%d" % (name.encode(), self.count),
                        partition=TP.partition).get(timeout=30)
            first = md.offset if first is None else first
            self.count += 1
        assert first is not None
        return first

    def end(self, name: str, commit: bool) -> None:
        p = self.txn[name]
        before = self.log.log_end_offset
        p.commit_transaction() if commit else p.abort_transaction()
        p._in_txn = False
        deadline = time.monotonic() + 30
        while self.log.log_end_offset < before + 1:
            assert time.monotonic() < deadline, "the transaction's marker was not written"
            time.sleep(0.01)

    def plain(self, n: int) -> None:
        for _ in range(n):
            self.plain_producer.send(TP.topic, value=b"p%d" % self.count, partition=TP.partition).get(timeout=30)
            self.count += 1

    def roll(self) -> None:
        self.log.roll()

    def close(self) -> None:
        self.plain_producer.close()
        for p in self.txn.values():
            p.close(timeout=1)


def start_broker(data: Path, uri: str, store_options: dict[str, str]) -> tuple[LogManager, ServerThread, str]:
    """A broker over ``data`` tiering to ``uri`` (copies and retention run when the test asks),
    with topic ``TP.topic`` tiered, its tiered segments deleted locally by retention."""
    props = {"log.dirs": str(data), "remote.log.storage.system.enable": "true", "remote.log.storage.uri": uri,
             "remote.log.manager.task.interval.ms": "3600000", "log.retention.check.interval.ms": "3600000",
             **{f"rsm.config.{k}": v for k, v in store_options.items()}}
    manager = LogManager.open(BrokerConfig.from_properties(props))
    config = ServerConfig.from_broker(BrokerConfig.from_properties({"log.dirs": str(data)}))
    thread = ServerThread(manager, ServerConfig((Endpoint("PLAINTEXT", "127.0.0.1", 0),), config.advertised,
                                                config.socket_request_max_bytes))
    thread.start()
    manager.create_topic(TP.topic, 1, {"remote.storage.enable": "true", "local.retention.bytes": "1"})
    return manager, thread, f"127.0.0.1:{thread.server.bound[0].port}"


def build(root: Path, uri: str, store_options: dict[str, str]) -> Tiered:
    data = root / "data"
    manager, thread, bootstrap = start_broker(data, uri, store_options)
    w = Writer(manager, bootstrap)
    try:
        w.plain(4)
        w.send("c", 3)
        w.end("c", commit=True)
        w.send("a", 4)  # (i): aborted, wholly in the remote tier
        w.plain(2)
        w.end("a", commit=False)
        w.roll()
        w.send("c", 2)
        w.send("a", 3)  # (i) again, interleaved with a committed one, marker in a later segment
        w.roll()
        w.send("c", 1)
        w.end("a", commit=False)
        w.end("c", commit=True)
        w.plain(3)
        w.roll()
        straddling_first = w.send("s", 3)  # (ii): data tiered, marker in the local active segment
        w.plain(2)
        w.roll()
        w.send("s", 2)
        w.send("c", 2)
        w.end("c", commit=True)
        w.plain(1)
        w.roll()
        boundary = w.log.active_segment.base_offset
        w.end("s", commit=False)
        w.send("c", 2)  # the tail: committed, aborted, then (iii) open, then plain records
        w.end("c", commit=True)
        w.send("a", 2)
        w.end("a", commit=False)
        open_first = w.send("o", 2)
        w.plain(3)
    finally:
        w.close()
    log = manager.log(TP)
    assert log.last_stable_offset == open_first < log.high_watermark
    manager.remote_tier.copy_pass()
    [status] = manager.remote_tier.status()
    assert status.highest_remote_offset + 1 == boundary, "every sealed segment is tiered, the active one is not"
    assert straddling_first < boundary
    local_committed = local_rows(data, **COMMITTED)
    local_uncommitted = local_rows(data)
    consumer_committed = consumer_rows(bootstrap, open_first)
    manager.run_retention()
    assert log.local_log_start_offset == boundary, "only the remote tier holds the tiered segments"
    return Tiered(manager, thread, data, uri, store_options, boundary, straddling_first, open_first,
                  log.high_watermark, local_committed, local_uncommitted, consumer_committed)


@pytest.fixture(scope="module")
def tiered(tmp_path_factory: pytest.TempPathFactory, object_store, s3_filesystem) -> Iterator[Tiered]:  # type: ignore[no-untyped-def]
    c = object_store.credentials
    s3 = s3_filesystem(c)
    bucket = f"t-{uuid.uuid4().hex[:16]}"
    s3.create_dir(bucket)
    options = {"endpoint.url": c.endpoint_url, "access.key": c.access_key, "secret.key": c.secret_key,
               "region": c.region}
    built = build(tmp_path_factory.mktemp("remote-rc"), f"s3://{bucket}/tiered", options)
    try:
        yield built
    finally:
        built.thread.stop()
        built.manager.shutdown()
        s3.delete_dir(bucket)


def test_the_oracles_agree_and_the_data_has_each_case(tiered: Tiered) -> None:
    t = tiered
    assert t.local_committed == t.consumer_committed
    committed_offsets = {off for off, _, _ in t.local_committed}
    assert max(committed_offsets) < t.open_first
    values = {v[:1] for _, _, v in t.local_uncommitted if v}
    assert values == {b"p", b"c", b"a", b"s", b"o"}
    assert {v[:1] for _, _, v in t.local_committed if v} == {b"p", b"c"}, "no aborted nor open record"
    assert any(off >= t.boundary for off in committed_offsets), "committed records in the broker's tail too"


def test_store_and_broker_read_committed_equals_the_data_dir_and_a_kafka_consumer(tiered: Tiered) -> None:
    t = tiered
    got, ranges = remote_rows(t.options(**COMMITTED))
    assert [(r.start, r.end, r.boundary) for r in ranges] == [(0, t.open_first, t.boundary)]
    assert ranges[0].txn_segments, "the remote .txnindex of the tiered aborts is searched"
    assert got == t.local_committed == t.consumer_committed
    split, ranges = remote_rows(t.options(**COMMITTED, minPartitions="9"))  # tasks start mid-transaction
    assert len(ranges) == 9 and split == t.local_committed


def test_store_only_read_committed_stops_before_the_transactions_the_store_cannot_decide(tiered: Tiered) -> None:
    t = tiered
    got, ranges = remote_rows(t.options(broker=False, **COMMITTED))
    assert [(r.start, r.end, r.boundary) for r in ranges] == [(0, t.straddling_first, None)]
    assert got == [r for r in t.local_committed if r[0] < t.straddling_first]
    assert any(v.startswith(b"a") for off, _, v in t.local_uncommitted if v and off < t.straddling_first)


def test_read_uncommitted_is_unchanged(tiered: Tiered) -> None:
    t = tiered
    got, ranges = remote_rows(t.options())
    assert [(r.start, r.end, r.boundary, r.txn_segments) for r in ranges] == [(0, t.high_watermark, t.boundary, ())]
    assert got == t.local_uncommitted
    store_only, ranges = remote_rows(t.options(broker=False))
    assert [(r.end, r.txn_segments) for r in ranges] == [(t.boundary, ())]
    assert store_only == [r for r in t.local_uncommitted if r[0] < t.boundary]


def test_the_isolation_level_is_accepted_with_a_store_path() -> None:
    lowered = {"kafka.isolation.level": "read_committed", "kafka.bootstrap.servers": "127.0.0.1:9"}
    assert parse_broker_options(lowered) == ("127.0.0.1:9", 120_000)
    assert lowered == {"kafka.isolation.level": "read_committed"}, "left for the source's options to parse"


@pytest.mark.soak  # ~20 s of Spark on a shared machine (beyond the session's start)
def test_spark_reads_a_store_path_and_a_broker_read_committed(spark, tiered: Tiered) -> None:  # type: ignore[no-untyped-def]
    t = tiered
    reader = spark.read.format("tidelog")
    for key, value in t.options(**COMMITTED, minPartitions="3").items():
        reader = reader.option(key, value)
    got = sorted((r.offset, None if r.key is None else bytes(r.key), None if r.value is None else bytes(r.value))
                 for r in reader.load().select("offset", "key", "value").collect())
    assert got == t.local_committed


def test_streams_end_where_batch_reads_do(tiered: Tiered) -> None:
    from tidelog.spark.remote_stream import RemoteStreamReader

    t = tiered
    for broker, extra, end in ((True, COMMITTED, t.open_first), (False, COMMITTED, t.straddling_first),
                               (True, {}, t.high_watermark), (False, {}, t.boundary)):
        reader = RemoteStreamReader(rs.parse_remote_options(t.options(broker=broker, **extra), streaming=True))
        assert reader._ends()[0] == {TP: end}, (broker, extra)


class MovedToTiered:
    """The real client, except that a Fetch below ``local_start`` is answered
    OFFSET_MOVED_TO_TIERED_STORAGE, as by a broker that does not serve its remote tier to
    consumers (tidelog's broker reads the remote tier itself)."""

    def __init__(self, client: Any, local_start: int) -> None:
        self.client, self.local_start, self.moved = client, local_start, []  # type: list[int]

    def fetch(self, tp: Any, offset: int, max_bytes: int, max_wait_ms: int = 0, **kw: Any) -> Any:
        from tidelog.spark.broker_client import OFFSET_MOVED_TO_TIERED_STORAGE, PartitionFetched

        if offset < self.local_start:
            self.moved.append(offset)
            return PartitionFetched(OFFSET_MOVED_TO_TIERED_STORAGE, -1, -1, b"")
        return self.client.fetch(tp, offset, max_bytes, max_wait_ms, **kw)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)


def test_a_transaction_open_right_at_the_boundary(tmp_path: Path, object_store, s3_filesystem,  # type: ignore[no-untyped-def]
                                                  monkeypatch) -> None:
    """A transaction begins at the boundary B and stays open (the last stable offset is B) while
    one whose data is tiered aborts after it: a read_committed Fetch at B answers no records and
    no aborted list, so the straddling abort comes from the batch before B (the last tiered
    one), without waiting for the open transaction to end. Then the open one commits and a read
    planned before the rest is tiered (and deleted locally) finds the abort in the store, whether
    the broker serves the tiered offsets itself or answers OFFSET_MOVED_TO_TIERED_STORAGE."""
    c = object_store.credentials
    s3 = s3_filesystem(c)
    bucket = f"t-{uuid.uuid4().hex[:16]}"
    s3.create_dir(bucket)
    store_options = {"endpoint.url": c.endpoint_url, "access.key": c.access_key, "secret.key": c.secret_key,
                     "region": c.region}
    uri = f"s3://{bucket}/tiered"
    manager, thread, bootstrap = start_broker(tmp_path / "data", uri, store_options)
    w = Writer(manager, bootstrap)
    try:
        w.plain(2)
        straddling_first = w.send("s", 3)
        w.roll()
        w.plain(2)
        w.roll()
        boundary = w.send("n", 2)  # open from the boundary on
        assert boundary == w.log.active_segment.base_offset
        w.end("s", commit=False)
        w.plain(1)
        log = manager.log(TP)
        assert log.last_stable_offset == boundary
        manager.remote_tier.copy_pass()
        assert manager.remote_tier.status()[0].highest_remote_offset + 1 == boundary
        expected = local_rows(tmp_path / "data", **COMMITTED)
        assert expected == consumer_rows(bootstrap, boundary)
        assert [v for _, _, v in expected] == [b"p0", b"p1", b"p5", b"p6"] and straddling_first == 2
        manager.run_retention()
        options = {"path": uri, "subscribe": TP.topic, "kafka.bootstrap.servers": bootstrap,
                   "kafkaConsumer.pollTimeoutMs": "3000", **COMMITTED,
                   **{f"rsm.config.{k}": v for k, v in store_options.items()}}
        got, ranges = remote_rows(options)
        assert [(r.start, r.end, r.boundary) for r in ranges] == [(0, boundary, boundary)]
        assert got == expected

        w.end("n", commit=True)
        w.send("a", 2)  # aborted in the tail, which is tiered after planning
        w.end("a", commit=False)
        w.plain(2)
        w.roll()
        w.plain(1)
        end = log.high_watermark
        assert log.last_stable_offset == end
        everything = consumer_rows(bootstrap, end)
        assert [v[:1] for _, _, v in everything] == [b"p"] * 4 + [b"n"] * 2 + [b"p"] * 4
        ropts = rs.parse_remote_options(options, streaming=False)
        planned = rs.plan(ropts)
        assert [(r.start, r.end, r.boundary) for r in planned] == [(0, end, boundary)]
        manager.remote_tier.copy_pass()  # the marker's segment is tiered and deleted locally after planning
        manager.run_retention(TP.topic)
        assert log.local_log_start_offset == end - 1
        assert sorted(row for r in planned for row in rows_of(rs.read_remote_range(ropts, r))) == everything
        from tidelog.spark import broker_tail
        from tidelog.spark.broker_client import BrokerClient

        client = MovedToTiered(BrokerClient(bootstrap), end - 1)
        monkeypatch.setattr(broker_tail, "executor_client", lambda bootstrap: client)
        try:
            assert sorted(row for r in planned for row in rows_of(rs.read_remote_range(ropts, r))) == everything
            assert client.moved == [boundary, boundary], "the boundary's aborts, then the tail: both from the store"
        finally:
            client.client.close()
    finally:
        w.close()
        thread.stop()
        manager.shutdown()
        s3.delete_dir(bucket)


def test_an_unreadable_producer_snapshot_fails_the_store_only_plan_naming_it(tiered: Tiered) -> None:
    from tidelog.remote.metadata import RemoteFileKind, object_key
    from tidelog.remote.metadata_log import RemotePartitionMetadata
    from tidelog.remote.verify import list_partitions

    t = tiered
    ropts = rs.parse_remote_options(t.options(broker=False, **COMMITTED), streaming=False)
    store = ropts.open_store()
    [tip] = list_partitions(store, TP.topic)[0]
    last = RemotePartitionMetadata.load(store, tip).finished_segments()[-1]
    key = object_key(last, RemoteFileKind.PRODUCER_SNAPSHOT)
    good = store.get(key)
    try:
        store.put(key, good[:-3])  # torn
        with pytest.raises(rs.RemoteReadError, match=f"producer snapshot {key} .* cannot be read"):
            rs.plan(ropts)
        store.delete(key)
        with pytest.raises(rs.RemoteReadError, match=f"producer snapshot {key} .* cannot be read"):
            rs.plan(ropts)
        assert remote_rows(t.options(broker=False))[1][0].end == t.boundary, "read_uncommitted does not read it"
    finally:
        store.put(key, good)
    assert remote_rows(t.options(broker=False, **COMMITTED))[1][0].end == t.straddling_first
