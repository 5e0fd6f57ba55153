"""Topics of a real Kafka broker's data dir keep Kafka's configs when tidelog opens it.

On the session broker, through kafka-python (topics ``kcfg-*``):

* ``kcfg-compacted``: ``compact`` with compaction and segment settings, records 30 days old;
* ``kcfg-both``: ``compact,delete`` with time and size retention, two partitions;
* ``kcfg-retained``: time and size retention, and ``internal.segment.bytes`` (a Kafka 4 topic
  config tidelog does not know: the one override left out, with a warning naming it);
* ``kcfg-altered``: created compacted, then IncrementalAlterConfigs sets one override, changes
  another and deletes a third;
* ``kcfg-plain``: no override;
* ``kcfg-deleted``: compacted, then deleted (Kafka renames its dir ``-delete``);
* a consumer group commits an offset, so ``__consumer_offsets`` exists.

What Kafka's DescribeConfigs reports with source TOPIC_CONFIG is the expected value. The broker's
data dir is copied while it runs (other tests' partition dirs removed from the copy) and the copy
opened by tidelog once through the library (the adoption, with its log), then through the CLI,
which reads back what the first open put in the registry: ``topics describe`` and ``configs
describe`` show Kafka's overrides and topic ids, the deleted topic is not there, and ``retention
run --dry-run`` deletes nothing from compacted topics; 60 days on, a dry run deletes every segment
of the topics whose policy has ``delete`` and none of the others.

Kafka's own DumpLogSegments also decodes the synthetic metadata log of
``tests/manager/test_kraft_metadata.py`` (no broker needed), so that the unit tests' byte layout
is Kafka's.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KafkaTopicPartition
from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient, NewTopic

from kafka_oracle import KafkaBroker, KafkaDistribution
from kafka_oracle.dump import dump_log_segments
from tests.cli_helpers import run_cli
from tidelog.manager import LogManager
from tidelog.manager.kraft_metadata import newest_snapshot, read_metadata_log
from tidelog.storage.config import BrokerConfig
from tidelog.storage.metadata import PartitionMetadataFile
from tidelog.testing import FakeClock, FakeScheduler

pytestmark = pytest.mark.xdist_group("kafka_broker")

MANAGER_TESTS = Path(__file__).resolve().parents[1] / "manager"
if str(MANAGER_TESTS) not in sys.path:  # the synthetic metadata builders live with the unit tests
    sys.path.insert(0, str(MANAGER_TESTS))
import test_kraft_metadata as synthetic  # noqa: E402

PREFIX = "kcfg-"
COMPACTED, BOTH, RETAINED, ALTERED, PLAIN, DELETED = (
    f"{PREFIX}{name}" for name in ("compacted", "both", "retained", "altered", "plain", "deleted"))
CREATED = {
    COMPACTED: (1, {"cleanup.policy": "compact", "min.compaction.lag.ms": "1000", "segment.bytes": "1048576",
                    "delete.retention.ms": "3600000", "min.cleanable.dirty.ratio": "0.2"}),
    BOTH: (2, {"cleanup.policy": "compact,delete", "retention.ms": "3600000", "retention.bytes": "1048576"}),
    RETAINED: (1, {"retention.ms": "86400000", "retention.bytes": "65536", "internal.segment.bytes": "1024",
                   "message.timestamp.type": "LogAppendTime"}),
    ALTERED: (1, {"cleanup.policy": "compact", "retention.ms": "1000000", "min.compaction.lag.ms": "5000"}),
    PLAIN: (1, {}),
    DELETED: (1, {"cleanup.policy": "compact"}),
}
ALTERATION = {"retention.ms": "2000000", "min.compaction.lag.ms": ("DELETE", None), "max.message.bytes": "2000000"}
UNKNOWN_TO_TIDELOG = "internal.segment.bytes"
GROUP = "kcfg-group"
DAY_MS = 86_400_000
WAIT_S = 60.0


@dataclass(frozen=True)
class KafkaSide:
    """What Kafka says, and the copy of its data dir (opened once by tidelog: ``adoption_log``)."""

    overrides: dict[str, dict[str, str]]  # every topic in the copy: Kafka's TOPIC_CONFIG entries
    topic_ids: dict[str, str]
    copy: Path
    adoption_log: str


# --- Kafka's side --------------------------------------------------------------------------------

def admin_for(broker: KafkaBroker) -> KafkaAdminClient:
    return KafkaAdminClient(bootstrap_servers=broker.bootstrap_servers, client_id="tidelog-kcfg")


def create_and_alter(broker: KafkaBroker) -> None:
    admin = admin_for(broker)
    try:
        admin.create_topics([NewTopic(t, n, 1, topic_configs=c) for t, (n, c) in CREATED.items()])
        broker.wait_for(lambda: all(broker.partition_dir(t).is_dir() for t in CREATED), "the topics' dirs", WAIT_S)
        admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, ALTERED, configs=ALTERATION)], incremental=True)
        admin.delete_topics([DELETED])
    finally:
        admin.close()
    broker.wait_for(lambda: not broker.partition_dir(DELETED).exists(), "Kafka to rename the deleted topic's dir", WAIT_S)


def produce(broker: KafkaBroker) -> None:
    """Keyed records everywhere; those of ``kcfg-compacted`` 30 days old (retention under the
    default policy would take them)."""
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap_servers, linger_ms=0)
    old = int(time.time() * 1000) - 30 * DAY_MS
    try:
        for i in range(6):
            sent = [producer.send(COMPACTED, b"v%d" % i, key=b"k%d" % (i % 3), timestamp_ms=old + i)]
            sent += [producer.send(topic, (b"v%d" % i) * 100, key=b"k%d" % i) for topic in (BOTH, RETAINED, ALTERED, PLAIN)]
            for future in sent:
                future.get(timeout=WAIT_S)
    finally:
        producer.close()


def commit_group_offset(broker: KafkaBroker) -> None:
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap_servers, group_id=GROUP, enable_auto_commit=False)
    try:
        tp = KafkaTopicPartition(PLAIN, 0)
        consumer.assign([tp])
        consumer.seek(tp, 3)
        consumer.commit()
    finally:
        consumer.close()


def topic_overrides(broker: KafkaBroker, topics: list[str]) -> dict[str, dict[str, str]]:
    """DescribeConfigs of ``topics``: the entries whose source is TOPIC_CONFIG (kafka-python's
    DYNAMIC_TOPIC_CONFIG)."""
    admin = admin_for(broker)
    try:
        described = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, t) for t in topics])
    finally:
        admin.close()
    return {topic: {name: entry["value"] for name, entry in entries.items()
                    if entry["config_source"] == "DYNAMIC_TOPIC_CONFIG"}
            for topic, entries in described["topic"].items()}


def copy_running_dir(broker: KafkaBroker, copy: Path) -> list[str]:
    """``cp -a`` of the running broker's log dir, without other tests' partition dirs; returns
    the topics whose partition dirs are in the copy."""
    subprocess.run(["cp", "-a", str(broker.log_dir), str(copy)], check=True)
    kept = set()
    for path in copy.iterdir():
        if not path.is_dir() or path.name == "__cluster_metadata-0":
            continue
        if not path.name.startswith((PREFIX, "__")):
            shutil.rmtree(path)
        elif not path.name.endswith("-delete"):
            kept.add(path.name.rsplit("-", 1)[0])
    return sorted(kept)


def delete_topics(broker: KafkaBroker) -> None:
    if broker.running:
        admin = admin_for(broker)
        try:
            admin.delete_topics([t for t in CREATED if t != DELETED])
        finally:
            admin.close()


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def open_once(copy: Path) -> str:
    """The first open of the copy (the adoption), shut down cleanly; what the manager logged."""
    handler = _Lines()
    logger = logging.getLogger("tidelog.manager")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        LogManager.open(BrokerConfig.from_properties({"log.dirs": str(copy)}), [copy]).shutdown()
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    return "\n".join(handler.lines)


@pytest.fixture(scope="module")
def kafka_side(kafka_broker_session: KafkaBroker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaSide]:
    broker = kafka_broker_session
    if not broker.running:
        broker.start()
    try:
        create_and_alter(broker)
        produce(broker)
        commit_group_offset(broker)
        copy = tmp_path_factory.mktemp("kcfg") / "copy"
        in_copy = copy_running_dir(broker, copy)
        overrides = topic_overrides(broker, in_copy)
        ids = {t: PartitionMetadataFile(copy / f"{t}-0").read().topic_id for t in in_copy}
        yield KafkaSide(overrides, ids, copy, open_once(copy))
    finally:
        delete_topics(broker)


# --- tidelog's side ---------------------------------------------------------------------------------

def tidelog(data_dir: Path, *args: str) -> str:
    """The stdout of ``tidelog --data-dir DATA_DIR ARGS`` run in this process; it must succeed."""
    code, out, err = run_cli(data_dir, *args)
    assert code == 0, f"tidelog {' '.join(args)} exited {code}: {err}{out.decode()}"
    return out.decode()


def test_the_copy_holds_what_the_test_made(kafka_side: KafkaSide) -> None:
    assert {COMPACTED, BOTH, RETAINED, ALTERED, PLAIN, "__consumer_offsets"} <= set(kafka_side.overrides)
    assert DELETED not in kafka_side.overrides
    assert kafka_side.overrides[ALTERED] == {"cleanup.policy": "compact", "retention.ms": "2000000",
                                             "max.message.bytes": "2000000"}, "Kafka applied the alteration"
    assert kafka_side.overrides[RETAINED][UNKNOWN_TO_TIDELOG] == "1024"


def test_topics_describe_shows_kafkas_overrides_and_ids(kafka_side: KafkaSide) -> None:
    described = {d["topic"]: d for d in json.loads(tidelog(kafka_side.copy, "topics", "describe", "--json"))}
    assert sorted(described) == sorted(kafka_side.overrides), "every topic of the copy, the deleted one not back"
    for topic, kafka in kafka_side.overrides.items():
        expected = {k: v for k, v in kafka.items() if k != UNKNOWN_TO_TIDELOG}
        assert (described[topic]["configs"], described[topic]["topic_id"]) == (expected, kafka_side.topic_ids[topic]), topic
    assert described[BOTH]["partition_count"] == 2
    assert described["__consumer_offsets"]["configs"]["cleanup.policy"] == "compact"


def test_configs_describe_matches_describe_configs(kafka_side: KafkaSide) -> None:
    for topic in (COMPACTED, ALTERED, PLAIN, "__consumer_offsets"):
        rows = json.loads(tidelog(kafka_side.copy, "configs", "describe", topic, "--json"))["configs"]
        assert {r["Name"]: r["Value"] for r in rows} == kafka_side.overrides[topic], topic


def test_the_adoption_says_what_it_left_out(kafka_side: KafkaSide) -> None:
    log = kafka_side.adoption_log
    assert f"topic {RETAINED}: Kafka's override {UNKNOWN_TO_TIDELOG}=1024 is left out: Unknown topic config name" in log
    adopted = set(re.findall(r"adopting topic (\S+) \(\d+ partition dirs found\) with Kafka's topic id", log))
    assert adopted == set(kafka_side.overrides)


def test_the_deleted_topic_does_not_come_back(kafka_side: KafkaSide) -> None:
    assert DELETED not in json.loads(tidelog(kafka_side.copy, "topics", "list", "--json"))
    assert not (kafka_side.copy / f"{DELETED}-0").exists()


def test_a_retention_dry_run_deletes_nothing_from_compacted_topics(kafka_side: KafkaSide) -> None:
    plans = json.loads(tidelog(kafka_side.copy, "retention", "run", "--dry-run", "--json"))
    by_topic = {(p["topic"], p["partition"]): p for p in plans}
    compacted = [key for key in by_topic if kafka_side.overrides[key[0]].get("cleanup.policy") == "compact"]
    assert (COMPACTED, 0) in compacted and ("__consumer_offsets", 0) in compacted
    assert {key: by_topic[key]["segments"] for key in compacted} == {key: [] for key in compacted}
    assert by_topic[(COMPACTED, 0)]["log_end_offset"] == 6


def deletes_by_time(overrides: dict[str, str]) -> bool:
    """Whether retention by time applies (Kafka's policy has ``delete``, ``retention.ms`` is not -1)."""
    return "delete" in overrides.get("cleanup.policy", "delete") and overrides.get("retention.ms") != "-1"


def test_sixty_days_on_only_delete_policies_delete(kafka_side: KafkaSide) -> None:
    """A dry run 60 days on: every segment of a partition with records goes when its Kafka policy
    deletes by time (its records are past ``retention.ms``), none of a ``compact`` one."""
    clock = FakeClock(int(time.time() * 1000) + 60 * DAY_MS)
    manager = LogManager.open(BrokerConfig.from_properties({"log.dirs": str(kafka_side.copy)}), [kafka_side.copy],
                              clock=clock, scheduler=FakeScheduler(clock))
    try:
        deleted = {(p.topic_partition.topic, p.topic_partition.partition): len(p.segments)
                   for p in manager.run_retention(dry_run=True)}
        expected = {(tp.topic, tp.partition): lg.num_segments if deletes_by_time(kafka_side.overrides[tp.topic]) else 0
                    for tp, lg in manager.logs() if lg.log_end_offset > lg.log_start_offset}
    finally:
        manager.shutdown()
    assert {key: deleted[key] for key in expected} == expected
    assert expected[(RETAINED, 0)] > 1 and expected[(COMPACTED, 0)] == 0 and expected[("__consumer_offsets", 0)] == 0


def test_kafkas_metadata_log_read_directly(kafka_side: KafkaSide) -> None:
    """Every topic with Kafka's overrides, unfiltered; from Kafka's newest snapshot when it wrote
    one (the session broker rarely does: every 20 MiB of metadata or hour)."""
    metadata = kafka_side.copy / "__cluster_metadata-0"
    image = read_metadata_log(metadata)
    snapshot = newest_snapshot(metadata)
    assert image.snapshot == (snapshot[0] if snapshot else None)
    assert {t: dict(image.topics[t].configs) for t in kafka_side.overrides} == kafka_side.overrides
    assert {t: image.topics[t].topic_id for t in kafka_side.overrides} == kafka_side.topic_ids
    assert DELETED not in image.topics


# --- the unit tests' synthetic metadata, decoded by Kafka ---------------------------------------------

PAYLOAD = re.compile(r"^\| offset: (\d+) .* payload: (\{.*\})$")
CONTROL = re.compile(r"^\| offset: (\d+) .* (SnapshotHeader|SnapshotFooter) (\{.*\})$")


def test_kafka_decodes_the_synthetic_metadata_as_intended(kafka4: KafkaDistribution, tmp_path: Path) -> None:
    metadata = synthetic.MetadataLog(tmp_path / "__cluster_metadata-0")
    snapshot = metadata.snapshot(4, synthetic.new_topic("orders", synthetic.ORDERS_ID, 2, cleanup_policy="compact"))
    segment = metadata.segment(
        [synthetic.feature_level_record("metadata.version", 30)],
        [synthetic.config_record("orders", "retention.ms", None), synthetic.config_record("1", "x", "y", 4)],
        [synthetic.begin_transaction(), synthetic.config_record("orders", "segment.ms", "5"),
         synthetic.abort_transaction()],
        [synthetic.begin_transaction(), synthetic.remove_topic_record(synthetic.ORDERS_ID),
         synthetic.end_transaction()],
        base_offset=4,
    )
    out = dump_log_segments(kafka4, [snapshot, segment], "--cluster-metadata-decoder").check()
    lines = out.stdout.splitlines()
    records = [(int(m[1]), json.loads(m[2])) for m in map(PAYLOAD.match, lines) if m]
    controls = [(m[2], json.loads(m[3])) for m in map(CONTROL.match, lines) if m]
    orders = synthetic.ORDERS_ID
    partition = {"topicId": orders, "replicas": [1], "isr": [1], "removingReplicas": [], "addingReplicas": [],
                 "leader": 1, "leaderEpoch": 0, "partitionEpoch": 0, "directories": [synthetic.DIRECTORY_ID]}
    assert controls == [("SnapshotHeader", {"version": 0, "lastContainedLogTimestamp": synthetic.T0}),
                        ("SnapshotFooter", {"version": 0})]
    assert [(o, r["type"], r["version"], r["data"]) for o, r in records] == [
        (1, "TOPIC_RECORD", 0, {"name": "orders", "topicId": orders}),
        (2, "CONFIG_RECORD", 0, {"resourceType": 2, "resourceName": "orders", "name": "cleanup.policy",
                                 "value": "compact"}),
        (3, "PARTITION_RECORD", 2, {"partitionId": 0, **partition}),
        (4, "PARTITION_RECORD", 2, {"partitionId": 1, **partition}),
        (4, "FEATURE_LEVEL_RECORD", 0, {"name": "metadata.version", "featureLevel": 30}),
        (5, "CONFIG_RECORD", 0, {"resourceType": 2, "resourceName": "orders", "name": "retention.ms", "value": None}),
        (6, "CONFIG_RECORD", 0, {"resourceType": 4, "resourceName": "1", "name": "x", "value": "y"}),
        (7, "BEGIN_TRANSACTION_RECORD", 0, {}),
        (8, "CONFIG_RECORD", 0, {"resourceType": 2, "resourceName": "orders", "name": "segment.ms", "value": "5"}),
        (9, "ABORT_TRANSACTION_RECORD", 0, {}),
        (10, "BEGIN_TRANSACTION_RECORD", 0, {}),
        (11, "REMOVE_TOPIC_RECORD", 0, {"topicId": orders}),
        (12, "END_TRANSACTION_RECORD", 0, {}),
    ]
    image = read_metadata_log(metadata.dir)
    assert (dict(image.topics), image.removed_topic_ids, image.end_offset) == ({}, frozenset({orders}), 13)
