"""Bad read options fail with a clear message naming the option (Kafka's wording where it has one).

Most rules are checked on :mod:`tidelog.spark.options` directly (no Spark: fast); a few go
through Spark to show the message arrives as an AnalysisException before any job runs.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from spark_read_data import append_simple, open_manager

from tidelog.spark import options as o
from tidelog.spark.reader import TidelogBatchReader, TidelogStreamReader, check_load_options
from tidelog.topic_partition import TopicPartition


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    log_dir = tmp_path_factory.mktemp("options") / "logs"
    m = open_manager(log_dir)
    m.create_topic("t", 2)
    m.create_topic("u", 1)
    append_simple(m, TopicPartition("t", 0), 20)
    m.shutdown()
    return log_dir


def parse(streaming: bool = False, **opts: str) -> o.SourceOptions:
    return o.parse_source_options({k.lower(): v for k, v in opts.items()}, streaming=streaming)


def fails(match: str, streaming: bool = False, **opts: str) -> None:
    with pytest.raises(o.SourceOptionError, match=match):
        parse(streaming, **opts)


BASE = {"path": "/x", "subscribe": "t"}


def test_defaults() -> None:
    batch = parse(**BASE)
    assert batch.starting.kind == "earliest" and batch.ending.kind == "latest"
    assert batch.fail_on_data_loss and not batch.include_headers
    assert batch.max_trigger_delay_ms == 15 * 60_000
    assert parse(True, **BASE).starting.kind == "latest"
    assert parse(path=" /a , /b ,", subscribe="t").log_dirs == ("/a", "/b")


def test_unknown_and_kafka_options_are_refused() -> None:
    fails("Unknown option 'colour'", **BASE, colour="red")
    fails("Kafka option 'kafka.bootstrap.servers' is not supported", **BASE, **{"kafka.bootstrap.servers": "h:9092"})
    fails("groupidprefix' tunes Kafka's consumer", **BASE, groupIdPrefix="g")


def test_exactly_one_subscription_strategy() -> None:
    fails("One of the following options must be specified", path="/x")
    fails("Only one of the following options can be specified.*subscribe, subscribePattern",
          path="/x", subscribe="t", subscribePattern="t.*")
    fails("No topics to subscribe to as specified value for option 'subscribe' is ' , '", path="/x", subscribe=" , ")
    fails("Pattern to subscribe is empty", path="/x", subscribePattern=" ")
    fails("Option 'subscribePattern': 't\\(' is not a valid Java regular expression: Unclosed group", path="/x", subscribePattern="t(")
    fails("No topicpartitions to assign as specified value for option 'assign' is 't'", path="/x", assign="t")
    fails(r"Expected e.g. \{\"topicA\":\[0,1\]", path="/x", assign='{"t": 0}')


def test_subscription_selection() -> None:
    existing = [TopicPartition(t, p) for t in ("t", "tt", "u") for p in (0, 1)]
    assert parse(path="/x", subscribe="t, u").subscription.select(existing) == [
        TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("u", 0), TopicPartition("u", 1)]
    # Spark's findFirstIn: the pattern matches anywhere in the name; ^...$ for the whole name
    assert [tp.topic for tp in parse(path="/x", subscribePattern="t").subscription.select(existing)] == [
        "t", "t", "tt", "tt"]
    assert [tp.topic for tp in parse(path="/x", subscribePattern="^t$").subscription.select(existing)] == ["t", "t"]
    assert parse(path="/x", assign='{"u":[1],"t":[0]}').subscription.select(existing) == [
        TopicPartition("t", 0), TopicPartition("u", 1)]


def test_path_is_required_and_must_be_a_data_dir(tmp_path: Path) -> None:
    fails("Option 'path' must be specified", subscribe="t")
    with pytest.raises(o.SourceOptionError, match="does not exist"):
        o.check_data_dirs((str(tmp_path / "nope"),))
    with pytest.raises(o.SourceOptionError, match="is not a tidelog/Kafka data dir"):
        o.check_data_dirs((str(tmp_path),))


def test_batch_start_cannot_be_latest_and_end_cannot_be_earliest() -> None:
    fails("starting offset can't be latest for batch queries", **BASE, startingOffsets="latest")
    fails("startingOffsets for t-0 can't be latest for batch queries", **BASE, startingOffsets='{"t":{"0":-1}}')
    fails("ending offset can't be earliest for batch queries", **BASE, endingOffsets="earliest")
    fails("ending offset for t-0 can't be earliest", **BASE, endingOffsets='{"t":{"0":-2}}')
    assert parse(True, **BASE, startingOffsets="latest").starting.kind == "latest"


def test_ending_options_are_refused_on_streams() -> None:
    fails("ending offset not valid in streaming queries", True, **BASE, endingOffsets="latest")
    fails("ending timestamp not valid in streaming queries", True, **BASE, endingOffsetsByTimestamp='{"t":{"0":1}}')
    fails("ending timestamp not valid in streaming queries", True, **BASE, endingTimestamp="5")


def test_offsets_json_is_kafkas() -> None:
    parsed = parse(**BASE, startingOffsets='{"t":{"0":23,"1":-2}}', endingOffsets='{"t":{"0":30,"1":-1}}')
    assert parsed.starting.offsets == {TopicPartition("t", 0): 23, TopicPartition("t", 1): -2}
    fails(r"Option 'startingOffsets': Expected e.g. \{\"topicA\":\{\"0\":23", **BASE, startingOffsets="{bad")
    fails("Expected e.g.", **BASE, startingOffsets='{"t":{"x":1}}')
    fails("Expected e.g.", **BASE, startingOffsets='{"t":{"0":1.5}}')
    fails("name different topic-partitions", **BASE, startingOffsets='{"t":{"0":1}}', endingOffsets='{"t":{"1":5}}')
    fails(r"starting offset \(9\) is greater than the ending offset \(5\) for t-0", **BASE,
          startingOffsets='{"t":{"0":9}}', endingOffsets='{"t":{"0":5}}')


def test_timestamp_options_and_their_precedence() -> None:
    parsed = parse(**BASE, startingTimestamp="100", startingOffsetsByTimestamp='{"t":{"0":5}}', startingOffsets="earliest")
    assert (parsed.starting.kind, parsed.starting.timestamp) == ("timestamp", 100)
    parsed = parse(**BASE, startingOffsetsByTimestamp='{"t":{"0":5}}', startingOffsets="earliest")
    assert parsed.starting.kind == "timestamps" and parsed.starting.offsets == {TopicPartition("t", 0): 5}
    fails("Option 'startingTimestamp': Expected a single long value, got 1h", **BASE, startingTimestamp="1h")
    fails("Option 'endingOffsetsByTimestamp': Expected e.g.", **BASE, endingOffsetsByTimestamp="[]")
    fails("must be 'error' or 'latest', got 'nearest'", **BASE, startingOffsetsByTimestampStrategy="nearest")
    assert parse(**BASE, startingOffsetsByTimestampStrategy="LATEST").no_match_strategy == "latest"


def test_numbers_flags_and_time_strings() -> None:
    fails("minPartitions must be positive", **BASE, minPartitions="0")
    fails("Option 'minPartitions' must be a number, got 'many'", **BASE, minPartitions="many")
    fails("maxRecordsPerPartition must be positive", **BASE, maxRecordsPerPartition="-3")
    fails("maxOffsetsPerTrigger must be positive", True, **BASE, maxOffsetsPerTrigger="0")
    fails(r"The value of minOffsetPerTrigger\(10\) is higher than the maxOffsetsPerTrigger\(5\)", True, **BASE,
          minOffsetsPerTrigger="10", maxOffsetsPerTrigger="5")
    fails("Option 'failOnDataLoss' must be true or false, got 'yes'", **BASE, failOnDataLoss="yes")
    fails("Option 'includeHeaders' must be true or false", **BASE, includeHeaders="1")
    fails("invalid time string '5 parsecs'", True, **BASE, maxTriggerDelay="5 parsecs")
    assert [o.parse_time_ms(t, "k") for t in ("15m", "30s", "100ms", "2h", "1d", "250", "1min")] == [
        900_000, 30_000, 100, 7_200_000, 86_400_000, 250, 60_000]
    parsed = parse(True, **BASE, minPartitions="3", maxRecordsPerPartition="100", maxOffsetsPerTrigger="7",
                   minOffsetsPerTrigger="2", maxTriggerDelay="30s", failOnDataLoss="FALSE", includeHeaders="true")
    assert (parsed.min_partitions, parsed.max_records_per_partition, parsed.max_offsets_per_trigger,
            parsed.min_offsets_per_trigger, parsed.max_trigger_delay_ms, parsed.fail_on_data_loss,
            parsed.include_headers) == (3, 100, 7, 2, 30_000, False, True)


def test_named_partitions_must_exist(data_dir: Path) -> None:
    path = str(data_dir)
    with pytest.raises(o.SourceOptionError, match=r"Option 'assign' names partitions that do not exist.*\[t-5\]"):
        TidelogBatchReader(parse(path=path, assign='{"t":[0,5]}'))
    with pytest.raises(o.SourceOptionError, match=r"Option 'startingOffsets' names partitions that do not exist.*nope-0"):
        TidelogBatchReader(parse(path=path, subscribe="t", startingOffsets='{"t":{"0":0,"1":0},"nope":{"0":1}}'))
    with pytest.raises(o.SourceOptionError, match="you must specify all TopicPartitions"):
        TidelogBatchReader(parse(path=path, subscribe="t", startingOffsets='{"t":{"0":0}}'))
    with pytest.raises(o.SourceOptionError, match="Option 'endingOffsetsByTimestamp' names partitions"):
        TidelogBatchReader(parse(path=path, subscribe="t", endingOffsetsByTimestamp='{"t":{"9":0}}'))
    with pytest.raises(o.SourceOptionError, match="is not a tidelog/Kafka data dir"):
        TidelogStreamReader(parse(True, path=str(data_dir.parent), subscribe="t"))


def test_resolved_bounds_are_checked(data_dir: Path) -> None:
    path = str(data_dir)
    with pytest.raises(o.SourceOptionError, match="ending offset 99 of t-0 is beyond its readable end 20"):
        TidelogBatchReader(parse(path=path, subscribe="t", endingOffsets='{"t":{"0":99,"1":-1}}'))
    with pytest.raises(o.SourceOptionError, match="starting offset 25 of t-0 is greater than its ending offset 20"):
        TidelogBatchReader(parse(path=path, subscribe="t", startingOffsets='{"t":{"0":25,"1":-2}}'))
    with pytest.raises(o.SourceOptionError, match="No offset matched from request of topic-partition t-0"):
        TidelogBatchReader(parse(path=path, subscribe="t", startingOffsetsByTimestamp='{"t":{"0":9999999999999,"1":0}}'))


def test_load_time_checks_skip_mode_specific_rules_and_writes(data_dir: Path) -> None:
    check_load_options({"path": str(data_dir), "subscribe": "t", "startingoffsets": "latest", "endingoffsets": "latest"})
    check_load_options({"path": "/nowhere", "topic": "t"})  # a write's options: not ours to judge
    with pytest.raises(o.SourceOptionError, match="Unknown option 'colour'"):
        check_load_options({"path": str(data_dir), "subscribe": "t", "colour": "red"})
    with pytest.raises(o.SourceOptionError, match="does not exist"):
        check_load_options({"path": "/nowhere", "subscribe": "t"})


# --- through Spark --------------------------------------------------------------------------

def test_bad_options_reach_the_user_as_analysis_exceptions_before_any_job(spark, data_dir: Path) -> None:  # type: ignore[no-untyped-def]
    from pyspark.errors import AnalysisException

    jobs_before = spark.sparkContext.statusTracker().getJobIdsForGroup()
    df = spark.read.format("tidelog").option("subscribe", "t").option("startingOffsets", "latest").load(str(data_dir))
    with pytest.raises(AnalysisException, match="starting offset can't be latest for batch queries"):
        df.collect()
    with pytest.raises(AnalysisException, match="Kafka option 'kafka.bootstrap.servers' is not supported"):
        spark.read.format("tidelog").option("subscribe", "t").option("kafka.bootstrap.servers", "h:1").load(str(data_dir))
    with pytest.raises(AnalysisException, match="no-such-topic"):  # at load(): the schema call checks options
        spark.read.format("tidelog").option("assign", '{"no-such-topic":[0]}').load(str(data_dir))
    with pytest.raises(AnalysisException, match="fixed schema and cannot be set with a custom one"):
        spark.read.format("tidelog").schema("value string").option("subscribe", "t").load(str(data_dir)).collect()
    stream = (spark.readStream.format("tidelog").option("subscribe", "t").option("endingOffsets", "latest")
              .load(str(data_dir)))
    with pytest.raises(Exception, match="ending offset not valid in streaming queries"):
        stream.writeStream.format("noop").start().awaitTermination(60)
    assert spark.sparkContext.statusTracker().getJobIdsForGroup() == jobs_before
