"""``tidelog serve`` on a data dir whose topic registry was cut in half or deleted while it was
stopped: a compacted topic and a ``retention.ms=-1`` topic, their records 30 days old, so the
default configs (delete, 7 days) would have retention delete every acknowledged record.

The broker runs its retention task every 100 ms from the start; after a few seconds a consumer
must still read every record, and the configs must be the ones the topics were created with
(restored from the partitions' copies), or, when those copies are gone too, the topics are held
(retention and cleaning paused, said on stderr and by ``topics describe``) until
``tidelog topics confirm-configs``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from kafka import KafkaConsumer, TopicPartition

from server_helpers import TIMEOUT_S, serve
from tests.cli_helpers import run_cli
from tidelog.manager import LogManager
from tidelog.manager.topic_copies import TOPIC_COPY_FILE
from tidelog.manager.topics import REGISTRY_FILE
from tidelog.records import BatchBuilder
from tidelog.storage.config import BrokerConfig
from tidelog.topic_partition import TopicPartition as TidelogTp

DAY_MS = 86_400_000
TOPICS = {"compacted": {"cleanup.policy": "compact"}, "forever": {"retention.ms": "-1"}}
RECORDS = 20
WATCH_S = 2.0  # ~20 retention passes
FAST_TASKS = ("log.retention.check.interval.ms=100", "log.initial.task.delay.ms=0", "log.cleaner.backoff.ms=100")


def build(data: Path) -> None:
    """Both topics, records stamped 30 days ago, unique keys (compaction removes none of them)."""
    old = int(time.time() * 1000) - 30 * DAY_MS
    with LogManager.open(BrokerConfig.from_properties({}), [data]) as manager:
        for name, configs in TOPICS.items():
            manager.create_topic(name, 1, configs)
            builder = BatchBuilder()
            for i in range(RECORDS):
                builder.append(i, old + i, b"key-%d" % i, b"value-%d" % i)
            manager.append(TidelogTp(name, 0), builder.build())


def tidelog(data: Path, *args: str) -> str:
    """A local CLI command (in this process: the broker is stopped); its stdout."""
    code, out, err = run_cli(data, *args)
    assert code == 0, err
    return out.decode()


@contextmanager
def serving(data: Path) -> Iterator[tuple[str, list[str]]]:
    """``tidelog serve`` with fast background tasks: (bootstrap, stderr lines before its banner)."""
    with serve(*FAST_TASKS, data=data) as served:
        yield served.bootstrap, served.before_banner


def consume_all(bootstrap: str, topic: str) -> list[bytes]:
    """The values from offset 0 (the log start must still be 0) up to the ``RECORDS`` written."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, auto_offset_reset="none",
                             consumer_timeout_ms=int(TIMEOUT_S * 1000), request_timeout_ms=int(TIMEOUT_S * 1000))
    try:
        partition = TopicPartition(topic, 0)
        consumer.assign([partition])
        consumer.seek(partition, 0)
        values = []
        for record in consumer:
            values.append(record.value)
            if len(values) == RECORDS:
                break
        return values
    finally:
        consumer.close()


def damage(data: Path, *, copies_too: bool) -> None:
    registry = data / REGISTRY_FILE
    registry.write_bytes(registry.read_bytes()[: registry.stat().st_size // 2])
    if copies_too:
        for copy in data.glob(f"*/{TOPIC_COPY_FILE}"):
            copy.unlink()


@pytest.mark.parametrize("cut", ["cut-in-half", "deleted"])
def test_serve_keeps_every_record_and_config_after_the_registry_is_damaged(tmp_path: Path, cut: str) -> None:
    data = tmp_path / "data"
    build(data)
    if cut == "deleted":
        (data / REGISTRY_FILE).unlink()
    else:
        damage(data, copies_too=False)

    with serving(data) as (bootstrap, _):
        time.sleep(WATCH_S)
        for name in TOPICS:
            assert consume_all(bootstrap, name) == [b"value-%d" % i for i in range(RECORDS)], name

    with LogManager.open(BrokerConfig.from_properties({}), [data]) as manager:
        assert {name: manager.topic_overrides(name) for name in TOPICS} == TOPICS


def test_serve_holds_topics_whose_configs_nothing_recorded_until_an_operator_confirms(tmp_path: Path) -> None:
    data = tmp_path / "data"
    build(data)
    damage(data, copies_too=True)

    with serving(data) as (bootstrap, before_banner):
        time.sleep(WATCH_S)
        for name in TOPICS:
            assert len(consume_all(bootstrap, name)) == RECORDS, name
    warned = "".join(before_banner)
    assert all(f"tidelog topics confirm-configs {name}" in warned for name in TOPICS), warned

    assert "WARNING: retention and cleaning paused" in tidelog(data, "topics", "describe", "forever")
    explained = tidelog(data, "explain", "forever")
    assert "unconfirmed" in explained and "would delete 0 segments" in explained
    tidelog(data, "configs", "alter", "forever", "--set", "retention.ms=-1")
    assert "Confirmed the configs of topic forever (retention.ms=-1)" in tidelog(data, "topics", "confirm-configs",
                                                                               "forever")

    with serving(data) as (bootstrap, before_banner):
        time.sleep(1.0)
        assert len(consume_all(bootstrap, "forever")) == RECORDS
    assert "confirm-configs forever" not in "".join(before_banner)
    assert "confirm-configs compacted" in "".join(before_banner)  # still held: nobody confirmed it
