"""An unknown topic in ``subscribe`` or ``assign`` fails as Spark's Kafka source fails.

What Spark does (apache/spark ``ConsumerStrategy.scala``): SubscribeStrategy and AssignStrategy
resolve their partitions with ``admin.describeTopics(topics).allTopicNames().get()``, which throws
Kafka's ``UnknownTopicOrPartitionException`` ("This server does not host this topic-partition.")
for a missing topic: a batch read fails when it is planned, a stream fails its first batch.
SubscribePatternStrategy only lists existing topics, so a pattern that matches nothing reads 0
rows. tidelog fails the same way, already at ``load()`` (where it checks the other options)."""

from __future__ import annotations

from pathlib import Path

import pytest
from spark_read_data import append_simple, open_manager

from tidelog.errors import UnknownTopicOrPartitionError
from tidelog.spark.options import check_named_partitions, parse_source_options
from tidelog.topic_partition import TopicPartition

EXISTING = {TopicPartition("orders", 0), TopicPartition("orders", 1)}
MESSAGE = "UnknownTopicOrPartitionException: This server does not host this topic-partition"


@pytest.mark.parametrize(("options", "named"), [
    ({"subscribe": "orders,nope"}, "Topic\\(s\\) nope named by option 'subscribe'"),
    ({"subscribe": "zz,nope"}, "Topic\\(s\\) nope, zz named by option 'subscribe'"),
    ({"assign": '{"nope":[0],"orders":[0]}'}, "Topic\\(s\\) nope named by option 'assign'"),
])
def test_unknown_topics_are_named(options: dict[str, str], named: str) -> None:
    parsed = parse_source_options({"path": "/data", **options}, streaming=False)
    with pytest.raises(UnknownTopicOrPartitionError, match=f"{MESSAGE}. {named} do not exist in /data"):
        check_named_partitions(parsed, EXISTING)


def test_known_topics_and_patterns_pass() -> None:
    for options in ({"subscribe": "orders"}, {"subscribepattern": "nothing-matches"}, {"assign": '{"orders":[1]}'}):
        check_named_partitions(parse_source_options({"path": "/data", **options}, streaming=False), EXISTING)


@pytest.fixture(scope="module")
def log_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    log_dir = tmp_path_factory.mktemp("unknown") / "logs"
    m = open_manager(log_dir)
    try:
        m.create_topic("orders", 1)
        append_simple(m, TopicPartition("orders", 0), 5)
    finally:
        m.shutdown()
    return log_dir


def test_spark_batch_and_stream_fail_on_an_unknown_topic(spark, log_dir: Path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(Exception, match=f"{MESSAGE}. Topic\\(s\\) nope named by option 'subscribe'"):
        spark.read.format("tidelog").option("subscribe", "orders,nope").load(str(log_dir)).collect()
    with pytest.raises(Exception, match=f"{MESSAGE}. Topic\\(s\\) nope named by option 'assign'"):
        spark.read.format("tidelog").option("assign", '{"nope":[0]}').load(str(log_dir)).collect()
    with pytest.raises(Exception, match=f"{MESSAGE}. Topic\\(s\\) nope named by option 'subscribe'"):
        spark.readStream.format("tidelog").option("subscribe", "nope").load(str(log_dir))
    # a pattern that matches nothing reads nothing, as Spark's
    empty = spark.read.format("tidelog").option("subscribePattern", "^nope$").load(str(log_dir))
    assert empty.count() == 0
    assert spark.read.format("tidelog").option("subscribe", "orders").load(str(log_dir)).count() == 5
