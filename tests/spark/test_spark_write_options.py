"""Bad input to the tidelog sink: refused with a message naming the option, column or row problem.

Options, columns and topics are checked on the driver (``writer()``), so most tests call the
validation directly; row checks run where executors stage (``stage_task``). The last tests go
through real Spark to show the errors surface at ``save()``, before any job runs.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from tidelog.errors import ConfigError, InvalidRecordError, InvalidRequestError, UnknownTopicOrPartitionError
from tidelog.manager import LogManager
from tidelog.records.compression import CompressionType
from tidelog.spark.sink_options import SinkPlan, parse_plan
from tidelog.spark.staging import TaskIdentity, stage_task
from tidelog.storage.config import BrokerConfig
from tidelog.testing import FakeClock

T0 = 1_700_000_000_000
KV = StructType([StructField("key", BinaryType()), StructField("value", BinaryType())])
HEADERS = ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())]))


@pytest.fixture
def root(tmp_path: Path) -> Path:
    path = tmp_path / "data"
    path.mkdir()
    with LogManager.open(BrokerConfig.from_properties({}), [path]) as manager:
        manager.create_topic("t", 2)
        manager.create_topic("zipped", 1, {"compression.type": "gzip"})
        manager.create_topic("compacted", 1, {"cleanup.policy": "compact"})
    return path


def plan(root: Path, schema: StructType = KV, **options: str) -> SinkPlan:
    return parse_plan({"path": str(root), **{k.lower(): v for k, v in options.items()}}, schema, False)


def schema_of(*fields: tuple[str, object]) -> StructType:
    return StructType([StructField(name, data_type) for name, data_type in fields])  # type: ignore[arg-type]


# --- options ---------------------------------------------------------------------------------

def test_a_valid_plan_names_the_dirs_the_staging_sibling_and_the_topic(root: Path) -> None:
    got = plan(root, topic="t")
    assert got.log_dirs == (str(root.resolve()),)
    assert got.staging_root == str(root.resolve()) + ".tidelog-staging"
    assert got.topic == "t" and set(got.topics) == {"t"} and got.topics["t"].partitions == 2


@pytest.mark.parametrize(("options", "message"), [
    ({"topic": "t", "kafka.acks": "all"}, "option kafka.acks is not supported: .* kafka.bootstrap.servers .* only"),
    ({"topic": "t", "subscribe": "t"}, "unknown option subscribe; the tidelog sink takes path, kafka.bootstrap.servers"),
    ({"topic": "t", "compression": "brotli"}, "option compression='brotli': expected none, gzip"),
    ({"topic": ""}, "option topic is empty"),
    ({"topic": "nope"}, "topic 'nope' does not exist .* tidelog --data-dir .* topics create nope --partitions N"),
])
def test_bad_options_are_refused(root: Path, options: dict[str, str], message: str) -> None:
    with pytest.raises((ConfigError, UnknownTopicOrPartitionError), match=message):
        plan(root, **options)


@pytest.mark.parametrize("with_path", [False, True])
def test_a_malformed_bootstrap_is_refused_naming_the_option_and_the_entry(root: Path, with_path: bool) -> None:
    from tidelog.errors import InvalidRequestError

    options = {"topic": "t", "kafka.bootstrap.servers": "127.0.0.1:1,nohost"}
    with pytest.raises(InvalidRequestError, match="kafka.bootstrap.servers entry 'nohost' is not HOST:PORT"):
        parse_plan({**options, "path": str(root)} if with_path else options, KV, False)
    with pytest.raises(InvalidRequestError, match="kafka.bootstrap.servers is empty"):
        parse_plan({**options, "kafka.bootstrap.servers": " "}, KV, False)


def test_path_must_be_an_existing_dir(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="option path is required"):
        parse_plan({"topic": "t"}, KV, False)
    with pytest.raises(ConfigError, match="is not a directory"):
        parse_plan({"path": str(tmp_path / "missing"), "topic": "t"}, KV, False)


def test_a_dir_without_topics_says_the_topic_does_not_exist(tmp_path: Path) -> None:
    with pytest.raises(UnknownTopicOrPartitionError, match="topic 't' does not exist"):
        parse_plan({"path": str(tmp_path), "topic": "t"}, KV, False)


def test_staging_inside_a_log_dir_is_refused(root: Path) -> None:
    with pytest.raises(ConfigError, match="is inside the log dir .* Kafka refuses to start"):
        plan(root, topic="t", stagingPath=str(root / "staging"))
    assert plan(root, topic="t", stagingPath=str(root.parent / "elsewhere")).staging_root == str(
        (root.parent / "elsewhere").resolve())


def test_overwrite_and_complete_mode_are_refused(root: Path) -> None:
    with pytest.raises(InvalidRequestError, match=r"Save mode Overwrite not allowed for tidelog\. Allowed save mode is Append: use \.mode\(\"append\"\)"):
        parse_plan({"path": str(root), "topic": "t"}, KV, True)
    with pytest.raises(InvalidRequestError, match="output mode complete is not supported"):
        parse_plan({"path": str(root), "topic": "t"}, KV, True, streaming=True)


def test_compression_follows_the_topic_unless_it_leaves_it_to_the_producer(root: Path) -> None:
    assert plan(root, topic="t").topics["t"].codec == CompressionType.NONE
    assert plan(root, topic="t", compression="lz4").topics["t"].codec == CompressionType.LZ4
    assert plan(root, topic="zipped", compression="lz4").topics["zipped"].codec == CompressionType.GZIP


def test_checkpoint_location_from_spark_is_accepted(root: Path) -> None:
    assert plan(root, topic="t", checkpointLocation="/tmp/cp").topic == "t"


# --- columns ---------------------------------------------------------------------------------

@pytest.mark.parametrize(("fields", "message"), [
    ((("key", BinaryType()),), "required attribute 'value' not found"),
    ((("value", LongType()),), "value attribute type must be a string or binary, not bigint"),
    ((("value", BinaryType()), ("key", IntegerType())), "key attribute type must be a string or binary"),
    ((("value", BinaryType()), ("partition", LongType())), "partition attribute type must be an int, not bigint"),
    ((("value", BinaryType()), ("timestamp", LongType())), "timestamp attribute type must be a timestamp"),
    ((("value", BinaryType()), ("headers", ArrayType(StringType()))), "headers attribute type must be array<struct"),
    ((("value", BinaryType()), ("offset", LongType())), "column 'offset' is not written by the tidelog sink"),
])
def test_bad_columns_are_refused(root: Path, fields: tuple[tuple[str, object], ...], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        plan(root, schema_of(*fields), topic="t")


def test_a_topic_is_needed_from_the_option_or_a_column(root: Path) -> None:
    with pytest.raises(ConfigError, match="topic option required when no 'topic' attribute is present"):
        plan(root, schema_of(("value", StringType())))
    with_column = plan(root, schema_of(("value", StringType()), ("topic", StringType())))
    assert with_column.topic is None and {"t", "zipped", "compacted"} <= set(with_column.topics)


def test_every_column_of_the_sink_is_accepted(root: Path) -> None:
    schema = schema_of(("key", StringType()), ("value", BinaryType()), ("topic", StringType()),
                       ("partition", IntegerType()), ("headers", HEADERS), ("timestamp", TimestampType()))
    assert plan(root, schema).columns == ("key", "value", "topic", "partition", "headers", "timestamp")


# --- rows (checked where executors stage) ----------------------------------------------------

def stage_rows(sink: SinkPlan, batch: pa.RecordBatch) -> None:
    stage_task(sink, "job-x", [batch], TaskIdentity(0, 0, 0), clock=FakeClock(T0))


@pytest.mark.parametrize(("columns", "topic", "error", "message"), [
    ({"value": pa.array([b"v"]), "partition": pa.array([2], pa.int32())}, "t", UnknownTopicOrPartitionError,
     "partition 2 is out of range: topic 't' has 2 partition"),
    ({"value": pa.array([b"v"]), "partition": pa.array([-1], pa.int32())}, "t", UnknownTopicOrPartitionError,
     "partition -1 is out of range"),
    ({"value": pa.array([b"v"]), "key": pa.array([None], pa.binary())}, "compacted", InvalidRecordError,
     "compacted topic 'compacted' cannot accept a record without key"),
    ({"value": pa.array([b"v"]), "timestamp": pa.array([-1000], pa.timestamp("us", tz="UTC"))}, "t",
     InvalidRecordError, "Kafka timestamps cannot be negative"),
    ({"value": pa.array([b"v"]), "timestamp": pa.array([(T0 + 7_200_000) * 1000], pa.timestamp("us", tz="UTC"))},
     "t", InvalidRecordError, "out of range: must be within message.timestamp.before.max.ms"),
    ({"value": pa.array([b"v"]), "headers": pa.array([[{"key": None, "value": b"x"}]],
                                                      pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())])))},
     "t", InvalidRecordError, "a header key is null"),
])
def test_bad_rows_fail_the_task_with_the_rows_problem(root: Path, columns: dict[str, pa.Array], topic: str,
                                                      error: type[Exception], message: str) -> None:
    batch = pa.record_batch(list(columns.values()), names=list(columns))
    fields = {"value": BinaryType(), "key": BinaryType(), "partition": IntegerType(), "timestamp": TimestampType(),
              "headers": HEADERS}
    sink = plan(root, schema_of(*[(name, fields[name]) for name in columns]), topic=topic)
    with pytest.raises(error, match=message):
        stage_rows(sink, batch)
    assert not any(Path(sink.staging_root).rglob("*.batches"))  # the failed attempt's file is gone


def test_rows_naming_an_unknown_or_null_topic_fail(root: Path) -> None:
    sink = plan(root, schema_of(("value", BinaryType()), ("topic", StringType())))
    with pytest.raises(UnknownTopicOrPartitionError, match="topic 'nope' does not exist"):
        stage_rows(sink, pa.record_batch([pa.array([b"v", b"w"]), pa.array(["t", "nope"])], names=["value", "topic"]))
    with pytest.raises(InvalidRecordError, match="null topic present in the data"):
        stage_rows(sink, pa.record_batch([pa.array([b"v"]), pa.array([None], pa.string())], names=["value", "topic"]))


# --- through Spark: refused at save(), before any job ------------------------------------------

def test_spark_refuses_bad_options_at_save_before_any_job(spark, root: Path) -> None:  # type: ignore[no-untyped-def]
    from pyspark.errors import AnalysisException

    df = spark.createDataFrame([(b"k", b"v")], "key binary, value binary")
    jobs_before = len(spark.sparkContext.statusTracker().getJobIdsForGroup())
    with pytest.raises(AnalysisException, match="unknown option subscribe"):
        df.write.format("tidelog").mode("append").option("path", str(root)).option("subscribe", "t").save()
    with pytest.raises(AnalysisException, match="Save mode Overwrite not allowed for tidelog"):
        df.write.format("tidelog").mode("overwrite").option("path", str(root)).option("topic", "t").save()
    # Spark, not tidelog, refuses the default mode (ErrorIfExists) and Ignore for any Python data
    # source, before the source is called (Spark's Kafka sink writes ErrorIfExists as Append)
    for mode in (None, "ignore"):
        writer = df.write.format("tidelog").option("path", str(root)).option("topic", "t")
        with pytest.raises(AnalysisException, match="UNSUPPORTED_DATA_SOURCE_SAVE_MODE"):
            (writer if mode is None else writer.mode(mode)).save()
    with pytest.raises(AnalysisException, match="column 'extra' is not written"):
        df.selectExpr("value", "1 as extra").write.format("tidelog").mode("append") \
            .option("path", str(root)).option("topic", "t").save()
    assert len(spark.sparkContext.statusTracker().getJobIdsForGroup()) == jobs_before
    assert not Path(str(root.resolve()) + ".tidelog-staging").exists()


# --- header encoding (records.encode, both twins) ----------------------------------------------

@pytest.mark.parametrize("pure", [True, False])
def test_header_sections_equal_the_record_encoder(pure: bool) -> None:
    import numpy as np

    from tidelog.records.encode import encode_header_sections, encode_records, get_kernels
    from tidelog.records.record import encode_record

    headers = [[("a", b"1"), ("b", None)], [], [("é", b"x" * 200)]]
    flat = [h for record in headers for h in record]
    key_data = b"".join(k.encode() for k, _ in flat)
    key_len = np.array([len(k.encode()) for k, _ in flat], np.int64)
    value_data = b"".join(v for _, v in flat if v is not None)
    value_len = np.array([-1 if v is None else len(v) for _, v in flat], np.int64)
    kernels = get_kernels(pure)
    sections, lengths = encode_header_sections(np.array([2, 0, 1]), key_data, key_len, value_data, value_len, kernels)
    assert lengths[1] == 0
    n = len(headers)
    data, _ = encode_records(b"", np.full(n, -1, np.int64), b"v" * n, np.ones(n, np.int64), sections, lengths,
                             np.arange(n), np.zeros(n, np.int64), np.arange(n), kernels)
    assert data == b"".join(encode_record(i, 0, None, b"v", headers[i]) for i in range(n))
