"""``format("tidelog")`` of a store path with ``kafka.bootstrap.servers``: the remote tier from the
store plus the tail not yet tiered through the broker's Fetch API (tidelog.spark.broker_tail).

A real tidelog broker (the server ``tidelog serve`` runs, in process, so the test drives its copy
passes and retention) owns a data dir whose topics are tiered to a store; the reads are checked
row for row against a local read of the same data dir taken before the tiered segments were
deleted locally. Faults (broker down, store unreachable, unknown metadata version) and the
boundary moving between planning and reading are checked on the functions the driver and the
executors run."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from spark_read_data import T0, append_simple, batch, open_manager
from test_spark_remote_read import s3_options, spark_rows

import orjson
from tidelog.remote.store import open_store
from tidelog.server import Endpoint, ServerConfig, ServerThread
from tidelog.spark import remote_source as rs
from tidelog.spark.broker_tail import BrokerReadError
from tidelog.spark.options import SourceOptionError
from tidelog.spark.reader import DataLossReported
from tidelog.storage.config import BrokerConfig
from tidelog.topic_partition import TopicPartition

TIERED = {"remote.storage.enable": "true", "local.retention.bytes": "1"}
TOPICS = "events,gaps,plain"


@dataclasses.dataclass
class Served:
    """A broker over ``data`` tiering to ``uri``."""

    manager: Any
    thread: ServerThread | None
    data: Path
    uri: str
    store_options: dict[str, str]

    @property
    def bootstrap(self) -> str:
        assert self.thread is not None
        return f"127.0.0.1:{self.thread.server.bound[0].port}"

    def options(self, **extra: str) -> dict[str, str]:
        return {"path": self.uri, "kafka.bootstrap.servers": self.bootstrap,
                **{f"rsm.config.{k}": v for k, v in self.store_options.items()}, **extra}

    def stop(self) -> None:
        """Stop the broker (once: later calls do nothing)."""
        if self.thread is not None:
            self.thread.stop()
            self.manager.shutdown()
            self.thread = None


def serve(data: Path, uri: str, store_options: dict[str, str], remote: bool = True, **props: str) -> Served:
    tier = {"remote.log.storage.system.enable": "true", "remote.log.storage.uri": uri,
            **{f"rsm.config.{k}": v for k, v in store_options.items()}} if remote else {}
    manager = open_manager(data, **tier, **props)
    config = ServerConfig.from_broker(BrokerConfig.from_properties({"log.dirs": str(data)}))
    thread = ServerThread(manager, ServerConfig((Endpoint("PLAINTEXT", "127.0.0.1", 0),), config.advertised,
                                                config.socket_request_max_bytes))
    thread.start()
    return Served(manager, thread, data, uri, store_options)


def fill(served: Served) -> dict[TopicPartition, int]:
    """Topics ``events`` (2 partitions, tiered, headers, null keys and values), ``gaps`` (tiered,
    compacted: offset gaps) and ``plain`` (not tiered): a tiered part copied to the store, then a
    tail of several sealed segments appended after the copy. Returns the boundary (highest
    tiered offset + 1) per tiered partition."""
    m = served.manager
    m.create_topic("events", 2, TIERED)
    m.create_topic("gaps", 1, {**TIERED, "cleanup.policy": "compact"})
    m.create_topic("plain", 1)
    for p in (0, 1):
        append_simple(m, TopicPartition("events", p), 700 + 100 * p, per_batch=10)
    for first in range(0, 1500, 10):
        m.append(TopicPartition("gaps", 0), batch([(j, T0 + first + j, b"k%d" % ((first + j) % 25),
                                                    b"v%d" % (first + j), []) for j in range(10)]))
    assert m.cleaner.clean_now(TopicPartition("gaps", 0), force=True) is not None
    m.remote_tier.copy_pass()
    ends = {s.topic_partition: s.highest_remote_offset + 1 for s in m.remote_tier.status()}
    for p in (0, 1):  # the tail: several segments not tiered
        append_simple(m, TopicPartition("events", p), 300, per_batch=10)
    m.append(TopicPartition("gaps", 0), batch([(j, T0 + 2000 + j, b"new%d" % j, b"n", []) for j in range(40)]))
    append_simple(m, TopicPartition("plain", 0), 250, per_batch=25)
    return ends


def delete_tiered_locally(served: Served, ends: dict[TopicPartition, int]) -> None:
    served.manager.run_retention()
    for tp, end in ends.items():
        assert served.manager.get_log(tp).local_log_start_offset >= end, "the tiered segments are gone locally"


@pytest.fixture
def file_served(tmp_path: Path) -> Iterator[tuple[Served, dict[TopicPartition, int]]]:
    served = serve(tmp_path / "data", (tmp_path / "store").as_uri(), {})
    try:
        yield served, fill(served)
    finally:
        served.stop()


def check_equal(spark, served: Served, ends: dict[TopicPartition, int], **extra: str) -> list[tuple]:  # type: ignore[no-untyped-def]
    local = spark_rows(spark, str(served.data), subscribe=TOPICS, **extra)
    delete_tiered_locally(served, ends)
    both = spark_rows(spark, served.uri, subscribe=TOPICS, **{k: v for k, v in served.options(**extra).items()
                                                                if k != "path"})
    assert len(both) == len(local) > 2500
    assert both == local
    for tp, end in ends.items():  # both tiers took part, in every tiered partition
        offsets = [r[4] for r in both if (r[2], r[3]) == (tp.topic, tp.partition)]
        assert offsets[0] < end <= offsets[-1], tp
    gaps = [r[4] for r in both if r[2] == "gaps"]
    assert len(gaps) < gaps[-1] + 1, "compaction gaps, as stored"
    return both


def test_store_plus_tail_reads_row_for_row_as_the_local_dir(spark, file_served) -> None:  # type: ignore[no-untyped-def]
    served, ends = file_served
    rows = check_equal(spark, served, ends, minPartitions="7")
    assert any(r[0] is None for r in rows) and any(r[-1] for r in rows)
    assert {r[2] for r in rows} == {"events", "gaps", "plain"}


def test_store_plus_tail_on_the_s3_server(spark, tmp_path: Path, object_store, bucket: str) -> None:  # type: ignore[no-untyped-def]
    served = serve(tmp_path / "data", f"s3://{bucket}/tiered", s3_options(object_store))
    try:
        check_equal(spark, served, fill(served))
    finally:
        served.stop()


def test_earliest_is_the_brokers_log_start_moved_by_delete_records(file_served) -> None:  # type: ignore[no-untyped-def]
    served, ends = file_served
    tp = TopicPartition("events", 0)
    served.manager.delete_records(tp, 123)
    delete_tiered_locally(served, ends)
    ropts = rs.parse_remote_options(served.options(assign='{"events":[0]}'), streaming=False)
    [r] = rs.plan(ropts)
    assert (r.start, r.end, r.boundary) == (123, served.manager.get_log(tp).high_watermark, ends[tp])
    offsets = [o for b in rs.read_remote_range(ropts, r) for o in b.column(4).to_pylist()]
    assert offsets == list(range(123, r.end))


def read_offsets(ropts: rs.RemoteSourceOptions, ranges: list) -> list[tuple[str, int, int]]:  # type: ignore[type-arg]
    return [(r.topic, r.partition, o) for r in ranges for b in rs.read_remote_range(ropts, r)
            for o in b.column(4).to_pylist()]


def test_a_range_tiered_and_deleted_locally_after_planning_is_read_once(file_served) -> None:  # type: ignore[no-untyped-def]
    """Planned with the tail on the broker; then tiered and deleted locally: the broker serves it
    from the remote tier (or answers empty when that takes long, and the task reads the store)."""
    served, ends = file_served
    ropts = rs.parse_remote_options(served.options(subscribe=TOPICS), streaming=False)
    ranges = rs.plan(ropts)
    before = read_offsets(ropts, ranges)
    served.manager.remote_tier.copy_pass()
    delete_tiered_locally(served, {s.topic_partition: s.highest_remote_offset + 1
                                   for s in served.manager.remote_tier.status()})
    assert any(s.highest_remote_offset + 1 > ends[s.topic_partition] for s in served.manager.remote_tier.status())
    assert read_offsets(ropts, ranges) == before


def test_a_remote_read_the_broker_does_not_finish_in_time_is_read_from_the_store(tmp_path: Path,  # type: ignore[no-untyped-def]
                                                                               monkeypatch) -> None:
    """Offsets planned for the broker that are now only in the remote tier: with
    ``remote.fetch.max.wait.ms=1`` the broker's remote reads come back empty, and the task reads
    those offsets from the store instead (each once), then goes on with the broker."""
    served = serve(tmp_path / "data", (tmp_path / "store").as_uri(), {}, **{"remote.fetch.max.wait.ms": "1"})
    try:
        ends = fill(served)
        ropts = rs.parse_remote_options(served.options(assign='{"events":[1]}'), streaming=False)
        [r] = rs.plan(ropts)
        tail = dataclasses.replace(r, segments=(), boundary=r.start)  # as if nothing had been tiered at planning
        delete_tiered_locally(served, ends)
        from_store = []
        store_now = rs._store_now

        def spy(*args):  # type: ignore[no-untyped-def]
            found = store_now(*args)
            from_store.append((args[-2], None if found is None else found[0]))
            return found

        monkeypatch.setattr(rs, "_store_now", spy)
        assert [o for b in rs.read_remote_range(ropts, tail) for o in b.column(4).to_pylist()] == \
            list(range(r.start, r.end))
        assert from_store and from_store[-1][1] == ends[TopicPartition("events", 1)], from_store
    finally:
        served.stop()


def test_a_broker_down_names_the_partition_and_range(file_served) -> None:  # type: ignore[no-untyped-def]
    served, ends = file_served
    ropts = rs.parse_remote_options(served.options(assign='{"plain":[0]}', **{"kafkaConsumer.pollTimeoutMs": "300"}),
                                    streaming=False)
    assert ropts.poll_timeout_ms == 300
    [r] = rs.plan(ropts)
    down = dataclasses.replace(ropts, bootstrap="127.0.0.1:9")
    with pytest.raises(BrokerReadError, match=r"offsets \[0, 250\) of plain-0 from the broker at 127\.0\.0\.1:9.*"
                                              r"asked again for 300 ms, option 'kafkaConsumer.pollTimeoutMs'"):
        list(rs.read_remote_range(down, r))
    with pytest.raises(BrokerReadError, match="broker at 127.0.0.1:9 .*kafka.bootstrap.servers"):
        rs.plan(down)


def test_unknown_remote_metadata_version_names_the_partition(file_served) -> None:  # type: ignore[no-untyped-def]
    served, ends = file_served
    store = open_store(served.uri)
    keys = [o.key for o in store.list("") if "/metadata/" in o.key and o.key.startswith("events-")
            and o.key.split("/")[1] == "1"]
    assert keys
    for key in keys:  # as a newer tidelog would write them
        store.put(key, orjson.dumps({**orjson.loads(store.get(key)), "version": 99}))
    ropts = rs.parse_remote_options(served.options(subscribe="events"), streaming=False)
    with pytest.raises(rs.RemoteReadError, match=r"events-1 from the remote tier at file://.*version"):
        rs.plan(ropts)


def test_loss_below_the_log_start_honours_fail_on_data_loss(file_served) -> None:  # type: ignore[no-untyped-def]
    served, _ = file_served
    ropts = rs.parse_remote_options(served.options(assign='{"plain":[0]}'), streaming=False)
    [r] = rs.plan(ropts)
    served.manager.delete_records(TopicPartition("plain", 0), 100)  # after planning
    with pytest.raises(DataLossReported, match=r"offsets \[0, 100\) of plain-0: the log start offset is now 100"):
        list(rs.read_remote_range(ropts, r))
    lenient = dataclasses.replace(ropts, parsed=dataclasses.replace(ropts.parsed, fail_on_data_loss=False))
    assert [o for b in rs.read_remote_range(lenient, r) for o in b.column(4).to_pylist()] == list(range(100, 250))


def test_bad_bootstrap_and_other_kafka_options_are_refused(file_served) -> None:  # type: ignore[no-untyped-def]
    served, _ = file_served
    with pytest.raises(SourceOptionError, match="kafka.bootstrap.servers.*not HOST:PORT"):
        rs.parse_remote_options({**served.options(subscribe="events"), "kafka.bootstrap.servers": "nohost"},
                                streaming=False)
    with pytest.raises(SourceOptionError, match="kafka.security.protocol.*only 'kafka.bootstrap.servers'"):
        rs.parse_remote_options({**served.options(subscribe="events"), "kafka.security.protocol": "SSL"},
                                streaming=False)
    from tidelog.errors import UnknownTopicOrPartitionError

    with pytest.raises(UnknownTopicOrPartitionError):
        rs.check_load_options(served.options(subscribe="nope"))


def test_spark_reads_a_timestamp_range_across_the_tiers(spark, file_served) -> None:  # type: ignore[no-untyped-def]
    served, ends = file_served
    delete_tiered_locally(served, ends)
    start, end = T0 + ends[TopicPartition("events", 0)] - 50, T0 + ends[TopicPartition("events", 0)] + 50
    rows = spark_rows(spark, served.uri, **{k: v for k, v in served.options(
        assign='{"events":[0]}', startingTimestamp=str(start), endingTimestamp=str(end)).items() if k != "path"})
    assert [r[4] for r in rows] == list(range(start - T0, end - T0))


class MovedToTiered:
    """The real client, except that a Fetch below ``local_start`` is answered
    OFFSET_MOVED_TO_TIERED_STORAGE, as by a broker that does not serve its remote tier to
    consumers (Kafka answers a follower so; tidelog's broker reads the remote tier itself)."""

    def __init__(self, client, local_start: int) -> None:  # type: ignore[no-untyped-def]
        self.client, self.local_start, self.moved = client, local_start, []

    def fetch(self, tp, offset: int, max_bytes: int, max_wait_ms: int = 0):  # type: ignore[no-untyped-def]
        from tidelog.spark.broker_client import OFFSET_MOVED_TO_TIERED_STORAGE, PartitionFetched

        if offset < self.local_start:
            self.moved.append(offset)
            return PartitionFetched(OFFSET_MOVED_TO_TIERED_STORAGE, -1, -1, b"")
        return self.client.fetch(tp, offset, max_bytes, max_wait_ms)

    def __getattr__(self, name: str):  # type: ignore[no-untyped-def]
        return getattr(self.client, name)


def test_offset_moved_to_tiered_storage_is_read_from_the_store(file_served, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from tidelog.spark import broker_tail
    from tidelog.spark.broker_client import BrokerClient

    served, ends = file_served
    tp = TopicPartition("events", 0)
    ropts = rs.parse_remote_options(served.options(assign='{"events":[0]}'), streaming=False)
    [r] = rs.plan(ropts)
    tail = dataclasses.replace(r, segments=(), boundary=r.start)  # as if nothing had been tiered at planning
    delete_tiered_locally(served, ends)
    client = MovedToTiered(BrokerClient(served.bootstrap), served.manager.get_log(tp).local_log_start_offset)
    monkeypatch.setattr(broker_tail, "executor_client", lambda bootstrap: client)
    assert [o for b in rs.read_remote_range(ropts, tail) for o in b.column(4).to_pylist()] == list(range(r.start, r.end))
    assert client.moved == [r.start], "asked once, then the store read up to the boundary, then the broker"
    client.client.close()


def test_remote_data_of_an_earlier_topic_of_the_same_name_is_not_read(file_served) -> None:  # type: ignore[no-untyped-def]
    """The store holds ``plain-0`` under another topic id than the broker's ``plain`` (a topic of
    that name deleted and created again, its remote data not yet removed): the broker's topic is
    read from the broker alone."""
    from tidelog.storage.metadata import uuid_to_topic_id

    served, _ = file_served
    store = open_store(served.uri)
    stale = uuid_to_topic_id(__import__("uuid").uuid4())
    for info in list(store.list("")):
        topic_dir, _, rest = info.key.partition("/")
        if topic_dir.startswith("events-") and rest.startswith("0/"):
            store.put(f"plain-{stale}/{rest}", store.get(info.key))
    ropts = rs.parse_remote_options(served.options(assign='{"plain":[0]}'), streaming=False)
    [r] = rs.plan(ropts)
    assert (r.start, r.end, r.boundary, r.segments) == (0, 250, 0, ())
    rows = [b for b in rs.read_remote_range(ropts, r)]
    assert [o for b in rows for o in b.column(4).to_pylist()] == list(range(250))
    assert {v for b in rows for v in b.column(1).to_pylist() if v is not None} <= {b"v%d" % i * 3 for i in range(250)}


def test_a_stream_over_a_broker_reports_offsets_gone_below_the_log_start(file_served) -> None:  # type: ignore[no-untyped-def]
    """delete-records between two micro-batches: the next batch's missing offsets are data loss
    (failOnDataLoss=true fails naming them; false skips to the new log start)."""
    from tidelog.spark.remote_stream import RemoteStreamReader
    from tidelog.testing import FakeClock

    served, ends = file_served
    tp = TopicPartition("plain", 0)
    clock = FakeClock()
    strict = RemoteStreamReader(rs.parse_remote_options(served.options(assign='{"plain":[0]}',
                                                                       startingOffsets="earliest"), streaming=True),
                                clock)
    begin = strict.initialOffset()
    assert begin == {"plain": {"0": 0}}
    served.manager.delete_records(tp, 100)
    end = {"plain": {"0": 250}}
    clock.advance(1000)  # the reader re-plans at most once a second
    with pytest.raises(DataLossReported, match=r"offsets \[0, 100\) of plain-0: the log now starts at 100"):
        strict.partitions(begin, end)
    lenient = RemoteStreamReader(rs.parse_remote_options(served.options(
        assign='{"plain":[0]}', startingOffsets="earliest", failOnDataLoss="false"), streaming=True))
    [r] = lenient.partitions(begin, end)
    assert (r.start, r.end, r.boundary) == (100, 250, 0)
    assert [o for b in lenient.read(r) for o in b.column(4).to_pylist()] == list(range(100, 250))
