"""A real Prometheus scrapes ``tidelog serve``'s ``/metrics`` and its HTTP API gives back what the
clients did: bytes and records produced (against the bytes the log grew by on disk and the sizes the
producer's records were built to), log end offsets and sizes, bytes fetched by a consumer, a
compaction's effect on the cleaner's max dirty percent, and an offline log dir.

Each test starts ``tidelog serve`` as a user does (a subprocess; ``metrics.listener`` on a free
port, read from the address file ``tidelog-serve.json``) and one Prometheus over it (its first scrape
comes ~5 s after it starts). Every figure is read through Prometheus's query API, from the first
scrape that began after the clients finished (``wait_for_scrape_after``), never from the endpoint.
"""

from __future__ import annotations

import errno
import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import ConfigResource, KafkaAdminClient, NewTopic
from kafka.errors import KafkaStorageError
from server_helpers import TIMEOUT_S, Served, serve

from prometheus_oracle import PrometheusServer
from tidelog.manager import LogManager
from tidelog.manager.log_dir_failure import PROBE_FILE
from tidelog.storage import fileops
from tidelog.storage.config import BrokerConfig
from tidelog.storage.fileops import FaultRule, FileOp

METRICS_LISTENER = "metrics.listener=http://127.0.0.1:0"
# each Prometheus scrape gets a new rendering, so a scrape that began after the clients finished shows them
# exactly (the default shares one rendering per second between scrapes: tests/server/test_metrics_render_interval.py)
EVERY_SCRAPE_RENDERS = "tidelog.metrics.min.render.interval.ms=0"
BATCH_HEADER = 61  # a v2 record batch's header (baseOffset .. recordCount), before its records


def _metrics_url(log_dir: Path) -> str:
    """The endpoint's URL as ``tidelog serve`` left it in ``log_dir``'s address file."""
    address = json.loads((log_dir / "tidelog-serve.json").read_text())
    assert "metrics" in address, f"no \"metrics\" in {log_dir / 'tidelog-serve.json'}: {address}"
    return address["metrics"]


def _varint_size(value: int) -> int:
    zigzag = (value << 1) ^ (value >> 63)
    size = 1
    while zigzag >= 0x80:
        zigzag >>= 7
        size += 1
    return size


def _one_record_batch_size(value_size: int) -> int:
    """Bytes of an uncompressed v2 batch of one keyless, headerless record (offset and timestamp
    deltas 0): what a producer sending records one at a time puts on the wire and in the log."""
    body = 1 + 1 + 1 + _varint_size(-1) + _varint_size(value_size) + value_size + _varint_size(0)
    return BATCH_HEADER + _varint_size(body) + body


def _log_bytes(log_dir: Path, topic: str) -> dict[str, int]:
    """partition -> bytes of its segment files (``*.log``) on disk."""
    return {path.name.rsplit("-", 1)[1]: sum(f.stat().st_size for f in path.glob("*.log"))
            for path in log_dir.glob(f"{topic}-*")}


def _create_topics(bootstrap: str, *topics: NewTopic) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics(list(topics))
    finally:
        admin.close()


def test_bytes_records_and_offsets_produced_then_fetched_match_through_prometheus(
        tmp_path: Path, prometheus: Callable[..., PrometheusServer]) -> None:
    data = tmp_path / "data"
    sizes = {0: [10, 200, 1000, 33, 4000, 7], 1: [64, 128, 256]}  # value bytes per record, per partition
    with serve(METRICS_LISTENER, EVERY_SCRAPE_RENDERS, "auto.create.topics.enable=false", data=data) as served:
        _create_topics(served.bootstrap, NewTopic("orders", 2, 1))
        prom = prometheus(_metrics_url(data))
        prom.wait_for_scrape_after(time.time())
        assert prom.values('kafka_log_log_logendoffset{topic="orders"}', "partition") == {"0": 0.0, "1": 0.0}
        assert prom.value('kafka_server_brokertopicmetrics_bytesin_total{topic="orders"}') in (None, 0.0)

        producer = KafkaProducer(bootstrap_servers=served.bootstrap, acks="all", linger_ms=0,
                                 compression_type=None, enable_idempotence=False)
        for partition, values in sizes.items():
            for size in values:  # one record per request: each is one batch
                producer.send("orders", b"v" * size, partition=partition).get(TIMEOUT_S)
        producer.close()
        prom.wait_for_scrape_after(time.time())

        on_disk = _log_bytes(data, "orders")
        built = {str(p): sum(map(_one_record_batch_size, values)) for p, values in sizes.items()}
        assert on_disk == built  # the log grew by exactly the batches the producer sent
        grown, records = sum(on_disk.values()), sum(map(len, sizes.values()))
        assert prom.value('kafka_server_brokertopicmetrics_bytesin_total{topic="orders"}') == grown
        assert prom.value('kafka_server_brokertopicmetrics_bytesin_total{topic=""}') == grown  # all topics
        assert prom.value('kafka_server_brokertopicmetrics_messagesin_total{topic="orders"}') == records
        assert prom.value('kafka_server_brokertopicmetrics_totalproducerequests_total{topic="orders"}') == records
        assert prom.value('sum(kafka_network_requestmetrics_requests_total{request="Produce"})') == records
        assert prom.value('kafka_network_requestmetrics_errors_total{request="Produce",error="NONE"}') == records
        assert prom.values('kafka_log_log_logendoffset{topic="orders"}', "partition") == {"0": 6.0, "1": 3.0}
        assert prom.values('kafka_log_log_logstartoffset{topic="orders"}', "partition") == {"0": 0.0, "1": 0.0}
        assert prom.values('kafka_log_log_size{topic="orders"}', "partition") == on_disk
        assert prom.values('kafka_log_log_numlogsegments{topic="orders"}', "partition") == {"0": 1.0, "1": 1.0}
        assert prom.value('kafka_server_brokertopicmetrics_bytesout_total{topic="orders"}') in (None, 0.0)

        _consume_all(served, "orders", records)
        prom.wait_for_scrape_after(time.time())
        assert prom.value('kafka_server_brokertopicmetrics_bytesout_total{topic="orders"}') == grown
        assert prom.value('kafka_server_brokertopicmetrics_bytesout_total{topic=""}') == grown
        assert prom.value('kafka_server_brokertopicmetrics_totalfetchrequests_total{topic="orders"}') >= 1
        assert prom.value('sum(kafka_network_requestmetrics_requests_total{request="FetchConsumer"})') >= 1
        assert prom.value('kafka_server_brokertopicmetrics_failedfetchrequests_total{topic=""}') == 0
        assert prom.value('kafka_server_brokertopicmetrics_bytesin_total{topic="orders"}') == grown  # unchanged


def _consume_all(served: Served, topic: str, records: int) -> None:
    consumer = KafkaConsumer(bootstrap_servers=served.bootstrap, group_id=None, auto_offset_reset="earliest",
                             consumer_timeout_ms=int(TIMEOUT_S * 1000))
    consumer.assign([TopicPartition(topic, 0), TopicPartition(topic, 1)])
    read = [next(consumer) for _ in range(records)]
    consumer.close()
    assert len(read) == records


def test_a_compaction_lowers_the_max_dirty_percent_prometheus_recorded(
        tmp_path: Path, prometheus: Callable[..., PrometheusServer]) -> None:
    data = tmp_path / "data"
    # the cleaner weighs the log every 100 ms but waits while min.cleanable.dirty.ratio is above its
    # dirty ratio, so Prometheus sees that ratio; lowering the config (as an operator would) cleans it
    configs = {"cleanup.policy": "compact", "segment.bytes": "2048", "min.cleanable.dirty.ratio": "0.99"}
    with serve(METRICS_LISTENER, EVERY_SCRAPE_RENDERS, "log.cleaner.backoff.ms=100", data=data) as served:
        _create_topics(served.bootstrap, NewTopic("users", 1, 1, topic_configs=configs))
        prom = prometheus(_metrics_url(data))
        producer = KafkaProducer(bootstrap_servers=served.bootstrap, acks="all", linger_ms=0, enable_idempotence=False)
        for i in range(200):  # 10 keys, 20 versions each: ~8 segments, all but the active one dirty
            producer.send("users", key=b"user-%d" % (i % 10), value=b"%03d" % i + b"x" * 40).get(TIMEOUT_S)
        producer.close()
        selector = '{topic="users",partition="0"}'
        prom.wait_for_scrape_after(time.time() + 0.5)  # the cleaner has weighed the whole log by then
        before = prom.value("kafka_log_logcleanermanager_max_dirty_percent")
        assert before is not None and before >= 50
        prom.wait_for_scrape_after(time.time())
        assert prom.value("kafka_log_logcleanermanager_max_dirty_percent") == before  # it waits: a steady figure
        assert prom.value(f"tidelog_log_cleaner_dirty_ratio{selector}") == pytest.approx(before / 100, abs=0.01)
        assert prom.value('tidelog_log_cleaner_reason{topic="users",reason="below_min_cleanable_ratio"}') == 1
        size_before = prom.value(f"kafka_log_log_size{selector}")
        segments_before = prom.value(f"kafka_log_log_numlogsegments{selector}")
        assert segments_before is not None and segments_before >= 5

        admin = KafkaAdminClient(bootstrap_servers=served.bootstrap)
        try:
            admin.alter_configs([ConfigResource("TOPIC", "users", configs={"min.cleanable.dirty.ratio": "0.01"})])
        finally:
            admin.close()
        after = prom.wait_for("kafka_log_logcleanermanager_max_dirty_percent", lambda v: v is not None and v < before,
                              "the cleaner cleans once the ratio is lowered")
        prom.wait_for_scrape_after(time.time())
        assert prom.value("kafka_log_logcleanermanager_max_dirty_percent") == after <= 10
        assert prom.value(f"tidelog_log_cleaner_dirty_ratio{selector}") == pytest.approx(after / 100, abs=0.01)
        assert prom.value('tidelog_log_cleaner_reason{topic="users",reason="below_min_cleanable_ratio"}') is None
        size_after = prom.value(f"kafka_log_log_size{selector}")
        assert size_after is not None and size_before is not None and size_after < size_before / 2
        # Not always fewer: a pass groups segments by their sizes before cleaning (Kafka's rule), so full
        # 2 KiB segments stay one each; only those an early pass (at ratio 0.99, while the log was
        # short) had already shrunk merge. What holds is the figure matching the dir.
        segments_after = prom.value(f"kafka_log_log_numlogsegments{selector}")
        assert segments_after == len(list((data / "users-0").glob("*.log"))) and segments_after <= segments_before
        assert prom.value(f"kafka_log_log_logendoffset{selector}") == 200  # cleaning keeps the offsets
        assert prom.value("kafka_log_logcleaner_cleaner_recopy_percent") > 0
        assert prom.value("kafka_log_logcleaner_deadthreadcount") == 0
        assert size_after == sum(_log_bytes(data, "users").values())


def test_an_offline_log_dir_counts_in_prometheus(tmp_path: Path, prometheus: Callable[..., PrometheusServer]) -> None:
    dirs = [tmp_path / "a", tmp_path / "b"]
    broker = BrokerConfig.from_properties({"log.dirs": ",".join(map(str, dirs))})
    with LogManager.open(broker, dirs) as manager:
        manager.create_topic("t", 2)  # t-0 in a, t-1 in b
    # every append to t-0 meets a full disk, and so does every probe of dir a: it stays offline
    rules = [FaultRule(frozenset({FileOp.WRITE}), f"{dirs[0]}/t-0/*", error=errno.ENOSPC),
             FaultRule(frozenset({FileOp.WRITE}), f"{dirs[0]}/{PROBE_FILE}", error=errno.ENOSPC)]
    env = {fileops.ENV_VAR: fileops.rules_to_json(rules)}
    with serve(METRICS_LISTENER, EVERY_SCRAPE_RENDERS, f"log.dirs={dirs[0]},{dirs[1]}", env=env) as served:
        prom = prometheus(_metrics_url(dirs[1]))
        quoted = {f'"{d}"': d for d in dirs}  # the exporter keeps the quotes of a quoted MBean tag
        prom.wait_for_scrape_after(time.time())
        assert prom.value("kafka_log_logmanager_offlinelogdirectorycount") == 0
        assert prom.values("kafka_log_logmanager_logdirectoryoffline", "logDirectory") == {q: 0.0 for q in quoted}

        producer = KafkaProducer(bootstrap_servers=served.bootstrap, acks="all", retries=0, enable_idempotence=False)
        assert producer.send("t", b"b", partition=1).get(TIMEOUT_S).offset == 0
        with pytest.raises(KafkaStorageError):
            producer.send("t", b"a", partition=0).get(TIMEOUT_S)
        producer.close()
        served.wait_for_line(rf"log dir {dirs[0]} is offline: append of t-0 failed \[ENOSPC\]")
        prom.wait_for_scrape_after(time.time())
        assert prom.value("kafka_log_logmanager_offlinelogdirectorycount") == 1
        assert prom.values("kafka_log_logmanager_logdirectoryoffline", "logDirectory") == {
            f'"{dirs[0]}"': 1.0, f'"{dirs[1]}"': 0.0}
        assert prom.value("kafka_server_replicamanager_offlinereplicacount") == 1
        assert prom.value('kafka_log_log_logendoffset{topic="t",partition="1"}') == 1  # the other dir serves
        assert prom.value('kafka_network_requestmetrics_errors_total{request="Produce",error="KAFKA_STORAGE_ERROR"}') == 1
        # as Kafka's ReplicaManager: a storage error is an expected outcome, not a failed produce request
        assert prom.value('kafka_server_brokertopicmetrics_failedproducerequests_total{topic=""}') == 0
