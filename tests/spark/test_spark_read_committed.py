"""``kafka.isolation.level`` on the tidelog source: read_committed stops at the last stable offset
and leaves out aborted transactions (batch and stream reads), read_uncommitted (the default)
returns every data record; what Spark's own Kafka connector reads through ``tidelog serve`` with
the same option is the same.

The partition holds three transactional producers interleaved with plain writes over several
segments (aborts indexed in a later segment than their data), as a broker writes them (markers,
``.txnindex`` entries), and ends with a transaction still open followed by plain records: the
last stable offset is that transaction's first offset. Values say who wrote each record: ``p``
plain, ``t`` a transaction of producers 1-3, ``o`` the transaction left open.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from spark_read_data import T0, open_manager

from tidelog.manager import LogManager
from tidelog.records import BatchBuilder, build_end_txn_marker_batch
from tidelog.server import Endpoint, ServerConfig, ServerThread
from tidelog.spark import options as o
from tidelog.spark.broker_tail import parse_broker_options
from tidelog.storage.config import BrokerConfig
from tidelog.storage.txn_index import AbortedTxn
from tidelog.topic_partition import TopicPartition

TP = TopicPartition("txn", 0)
OPEN_PID = 9
COLUMNS = ["partition", "offset", "value"]


@dataclass
class Written:
    """What was written: every data record ``(offset, value)``, the transactions still open."""

    records: list[tuple[int, str]] = field(default_factory=list)
    open: dict[int, int] = field(default_factory=dict)  # producer id -> first offset
    pending: dict[int, list[int]] = field(default_factory=dict)  # producer id -> its record offsets
    aborted: set[int] = field(default_factory=set)  # offsets of aborted records
    end: int = 0

    @property
    def last_stable_offset(self) -> int:
        return min(self.open.values(), default=self.end)

    def committed(self) -> list[tuple[int, str]]:
        return [(off, v) for off, v in self.records if off < self.last_stable_offset and off not in self.aborted]

    def data(self) -> list[tuple[int, str]]:
        return list(self.records)


def append_data(manager: LogManager, w: Written, pid: int, count: int) -> None:
    kind = "p" if pid < 0 else ("o" if pid == OPEN_PID else "t")
    txn = {"producer_id": pid, "producer_epoch": 0, "base_sequence": w.end, "is_transactional": True}
    builder = BatchBuilder(base_offset=w.end, **(txn if pid >= 0 else {}))
    offsets = list(range(w.end, w.end + count))
    for offset in offsets:
        builder.append(offset, T0 + offset, None, f"{kind}{offset}".encode())
    manager.log(TP).append_as_follower(builder.build())
    w.records += [(off, f"{kind}{off}") for off in offsets]
    if pid >= 0:
        w.open.setdefault(pid, w.end)
        w.pending.setdefault(pid, []).extend(offsets)
    w.end += count


def append_marker(manager: LogManager, w: Written, pid: int, commit: bool) -> None:
    """The marker and, for an ABORT, the ``.txnindex`` entry a broker writes (a follower append
    leaves it to its caller)."""
    log = manager.log(TP)
    log.append_as_follower(build_end_txn_marker_batch(commit=commit, producer_id=pid, producer_epoch=0,
                                                      coordinator_epoch=0, base_offset=w.end, timestamp=T0 + w.end))
    first = w.open.pop(pid)
    offsets = set(w.pending.pop(pid))
    if not commit:
        w.aborted |= offsets
        entry = AbortedTxn(pid, first, w.end, min(w.open.values(), default=w.end + 1))
        log.active_segment.txn_index.append(entry)
    w.end += 1


def write(manager: LogManager) -> Written:
    """Producers 1-3 and plain writes at random (seeded), then producer 9's transaction left
    open with plain records after it."""
    manager.create_topic(TP.topic, 1)
    w, rng = Written(), random.Random(2023)
    for _ in range(160):
        pid = rng.choice([-1, 1, 2, 3])
        if pid >= 0 and pid in w.open and rng.random() < 0.25:
            append_marker(manager, w, pid, commit=rng.random() < 0.5)
        else:
            append_data(manager, w, pid, rng.randint(1, 3))
    for pid in sorted(w.open):
        append_marker(manager, w, pid, commit=False)
    append_data(manager, w, OPEN_PID, 2)
    append_data(manager, w, -1, 3)
    manager.log(TP).update_high_watermark(w.end)  # a follower append leaves it behind
    return w


@pytest.fixture
def written(tmp_path: Path) -> Iterator[tuple[Path, LogManager, Written]]:
    log_dir = tmp_path / "logs"
    manager = open_manager(log_dir)
    w = write(manager)
    assert len(list(manager.log(TP).dir.glob("*.log"))) >= 3 and w.aborted and w.last_stable_offset < w.end
    yield log_dir, manager, w
    manager.shutdown()


def rows(df: Any) -> list[tuple[int, str]]:
    return sorted((r.offset, bytes(r.value).decode()) for r in df.select(*COLUMNS).collect())


def read(spark: Any, log_dir: Path, **options: str) -> Any:
    reader = spark.read.format("tidelog").option("subscribe", TP.topic)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load(str(log_dir))


def test_batch_read_committed_stops_at_the_lso_and_skips_aborted_records(spark: Any, written: Any) -> None:
    log_dir, _, w = written
    assert rows(read(spark, log_dir, **{"kafka.isolation.level": "read_committed"})) == w.committed()
    assert rows(read(spark, log_dir, **{"kafka.isolation.level": "read_committed", "minPartitions": "7"})) \
        == w.committed()  # ranges split mid-transaction: each task finds its own aborted transactions
    everything = w.data()
    assert rows(read(spark, log_dir)) == everything
    assert rows(read(spark, log_dir, **{"kafka.isolation.level": "read_uncommitted"})) == everything
    assert {v[0] for _, v in everything} == {"p", "t", "o"}


def test_stream_read_committed_waits_for_the_open_transaction(spark: Any, written: Any, tmp_path: Path) -> None:
    log_dir, manager, w = written
    got: list[tuple[int, str]] = []

    def collect(df: Any, batch_id: int) -> None:
        got.extend(rows(df))

    def drain() -> None:
        query = (spark.readStream.format("tidelog").option("subscribe", TP.topic)
                 .option("startingOffsets", "earliest").option("kafka.isolation.level", "read_committed")
                 .option("maxOffsetsPerTrigger", "50").load(str(log_dir))
                 .writeStream.foreachBatch(collect).option("checkpointLocation", str(tmp_path / "ckpt"))
                 .trigger(availableNow=True).start())
        assert query.awaitTermination(300), "the streaming query did not finish"
        assert query.exception() is None

    drain()
    assert sorted(got) == w.committed()
    append_marker(manager, w, OPEN_PID, commit=True)
    manager.log(TP).update_high_watermark(w.end)
    before = len(got)
    drain()
    assert sorted(got) == w.committed() == [r for r in w.data() if r[0] not in w.aborted]
    assert [v[0] for _, v in sorted(got[before:])] == ["o", "o", "p", "p", "p"]


def test_sparks_kafka_connector_reads_the_same_through_tidelog_serve(spark: Any, written: Any) -> None:
    connector = spark.sparkContext.getConf().get("spark.tidelog.test.connector", "")
    if not connector:
        pytest.skip("Spark's Kafka connector (spark-sql-kafka-0-10) could not be resolved from Maven Central here")
    log_dir, manager, w = written
    config = ServerConfig.from_broker(BrokerConfig.from_properties({"log.dirs": str(log_dir)}))
    thread = ServerThread(manager, ServerConfig((Endpoint("PLAINTEXT", "127.0.0.1", 0),), config.advertised,
                                                config.socket_request_max_bytes))
    thread.start()
    try:
        bootstrap = f"127.0.0.1:{thread.server.bound[0].port}"
        for level in ("read_committed", "read_uncommitted"):
            through_broker = (spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap)
                              .option("subscribe", TP.topic).option("startingOffsets", "earliest")
                              .option("kafka.isolation.level", level).load())
            direct = read(spark, log_dir, **{"kafka.isolation.level": level})
            assert rows(through_broker) == rows(direct), level
    finally:
        thread.stop()
    assert rows(direct) == w.data()


def test_the_isolation_level_option_is_checked() -> None:
    base = {"path": "/x", "subscribe": "t"}
    assert not o.parse_source_options(base, streaming=False).read_committed
    assert o.parse_source_options({**base, "kafka.isolation.level": "read_committed"}, streaming=True).read_committed
    with pytest.raises(o.SourceOptionError, match="Option 'kafka.isolation.level': Invalid value READ_COMMITTED for "
                                                  "configuration isolation.level: String must be one of: "
                                                  "read_committed, read_uncommitted"):
        o.parse_source_options({**base, "kafka.isolation.level": "READ_COMMITTED"}, streaming=False)
    with pytest.raises(o.SourceOptionError, match="Kafka option 'kafka.group.id' is not supported"):
        o.parse_source_options({**base, "kafka.group.id": "g"}, streaming=False)
    # a store path (the remote tier, the broker's tail) takes either level: the broker options
    # leave it to the source's options (test_spark_remote_read_committed reads with it)
    for level in (o.READ_COMMITTED, o.READ_UNCOMMITTED):
        lowered = {"kafka.isolation.level": level}
        assert parse_broker_options(lowered)[0] == "" and lowered == {"kafka.isolation.level": level}


def test_transactions_of_a_kafka_python_producer_read_alike_directly_and_through_the_broker(
        spark: Any, tmp_path: Path) -> None:
    """Written through ``tidelog serve`` by kafka-python's transactional producer (committed,
    aborted, one transaction left open with plain records after it): the tidelog source with
    read_committed gives exactly the committed records below the open transaction, and Spark's
    own Kafka connector, reading through the broker, gives the same rows."""
    from kafka import KafkaProducer

    log_dir = tmp_path / "logs"
    manager = LogManager.open(BrokerConfig.from_properties({"log.dirs": str(log_dir)}))
    config = ServerConfig.from_broker(BrokerConfig.from_properties({"log.dirs": str(log_dir)}))
    thread = ServerThread(manager, ServerConfig((Endpoint("PLAINTEXT", "127.0.0.1", 0),), config.advertised,
                                                config.socket_request_max_bytes))
    thread.start()
    hanging = None
    try:
        bootstrap = f"127.0.0.1:{thread.server.bound[0].port}"
        manager.create_topic("kp", 1)
        producer = KafkaProducer(bootstrap_servers=bootstrap, transactional_id="spark-kp", linger_ms=5)
        producer.init_transactions()
        for outcome in ("commit", "abort", "commit"):
            producer.begin_transaction()
            for i in range(5):
                producer.send("kp", value=f"{outcome}".encode())
            producer.flush()
            producer.commit_transaction() if outcome == "commit" else producer.abort_transaction()
        producer.close()
        hanging = KafkaProducer(bootstrap_servers=bootstrap, transactional_id="spark-kp-open", linger_ms=5)
        hanging.init_transactions()
        hanging.begin_transaction()
        hanging.send("kp", value=b"open")
        hanging.flush()
        plain = KafkaProducer(bootstrap_servers=bootstrap)
        plain.send("kp", value=b"plain").get(timeout=30)
        plain.close()

        def values(df: Any) -> list[str]:
            return [v for _, v in rows(df)]

        direct = spark.read.format("tidelog").option("subscribe", "kp").option(
            "kafka.isolation.level", "read_committed").load(str(log_dir))
        assert values(direct) == ["commit"] * 10
        assert sorted(values(spark.read.format("tidelog").option("subscribe", "kp").load(str(log_dir)))) == sorted(
            ["commit"] * 10 + ["abort"] * 5 + ["open", "plain"])
        if spark.sparkContext.getConf().get("spark.tidelog.test.connector", ""):
            through_broker = (spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap)
                              .option("subscribe", "kp").option("startingOffsets", "earliest")
                              .option("kafka.isolation.level", "read_committed").load())
            assert rows(through_broker) == rows(direct)
    finally:
        thread.stop()
        manager.shutdown()
        if hanging is not None:
            hanging.close(timeout=1)
