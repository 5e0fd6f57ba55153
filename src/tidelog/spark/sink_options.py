"""What ``df.write.format("tidelog")`` accepts: options, columns, and the target topics' settings.

Everything here runs on the driver inside ``writer()``/``streamWriter()``, so a bad option, a
bad column or a missing topic fails at ``save()``/``start()`` before any job runs (Spark wraps
the error into ``AnalysisException [PYTHON_DATA_SOURCE_ERROR]`` with our message).

**Options** (keys arrive lower-cased; any other key is refused, ``kafka.*`` with a hint):

| option        | meaning                                                                  |
|---------------|--------------------------------------------------------------------------|
| ``path``      | the data dir: one log dir, or comma-separated log dirs (all of one node); when a running ``tidelog serve`` owns it, the job is written through that broker |
| ``kafka.bootstrap.servers`` | ``host:port[,...]`` of a running ``tidelog serve`` (PLAINTEXT listener): executors stage through it and it commits the job (:mod:`tidelog.spark.broker_commit`); ``path`` is then optional |
| ``topic``     | the topic of every row; overrides the ``topic`` column (Kafka's rule)    |
| ``stagingPath`` | where executors stage batches; default ``<first log dir>.tidelog-staging``, a sibling (never inside a log dir: Kafka refuses to start on a directory that is not topic-partition) |
| ``compression`` | codec of staged batches for topics whose ``compression.type`` is ``producer`` (default ``none``, as Kafka's producer); other topics get their own codec, since the log would recompress anything else |

Spark adds ``checkpointLocation`` to streaming writes; it is accepted and not used.

**Columns** (Kafka's sink, plus ``timestamp``): ``value`` (required; binary or string),
``key`` (binary or string), ``topic`` (string), ``partition`` (int; null: Kafka's default
partitioner), ``headers`` (``array<struct<key string, value binary>>``), ``timestamp``
(timestamp; null or absent: the commit time). Any other column, or a wrong type, is refused.

**Topics** must exist: their partition counts and configs are read from the data dir's topic
registry (no lock: a running ``tidelog serve`` may own the dir meanwhile), or, with
``kafka.bootstrap.servers`` and no ``path``, asked of the broker (Metadata, DescribeConfigs).
Broker-level settings are Kafka's defaults (the data dir does not record a ``server.properties``);
topic-level overrides apply.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tidelog.errors import ConfigError, InvalidRequestError, UnknownTopicOrPartitionError, UnsupportedCompressionError
from tidelog.records.batch import RECORD_BATCH_OVERHEAD
from tidelog.records.compression import CompressionType

if TYPE_CHECKING:
    from pyspark.sql.types import DataType, StructType

    from tidelog.storage.config import LogConfig

STAGING_SUFFIX = ".tidelog-staging"
OPTIONS = ("path", "topic", "stagingpath", "compression", "kafka.bootstrap.servers")
BOOTSTRAP = "kafka.bootstrap.servers"
SPARK_OPTIONS = ("checkpointlocation",)  # set by Spark itself on streaming writes
COLUMNS = ("key", "value", "topic", "partition", "headers", "timestamp")
MAX_BATCH_BYTES = 1 << 20  # a staged batch stays below this (and below the topic's max.message.bytes)


@dataclass(frozen=True, slots=True)
class TopicSpec:
    """What executors need of one topic to stage valid batches (small: pickled into every task)."""

    name: str
    partitions: int
    codec: int  # CompressionType id of staged batches
    level: int | None  # the topic's level for that codec (None: the codec's default)
    compact: bool  # records need keys
    timestamp_before_max_ms: int
    timestamp_after_max_ms: int
    log_append_time: bool  # message.timestamp.type=LogAppendTime: the log stamps records itself
    max_batch_bytes: int  # a batch's records area is cut before this
    max_message_bytes: int


@dataclass(frozen=True, slots=True)
class SinkPlan:
    """The validated write: where, which columns, which topics (see the module doc)."""

    log_dirs: tuple[str, ...]
    staging_root: str
    columns: tuple[str, ...]  # the DataFrame's columns, in its order
    topic: str | None  # the ``topic`` option
    topics: dict[str, TopicSpec]  # the option's topic, or every topic of the data dir (a dict: picklable)
    bootstrap: str | None = None  # a tidelog serve: executors stage through it, it commits (broker_commit)

    def column_index(self, name: str) -> int | None:
        return self.columns.index(name) if name in self.columns else None

    def spec(self, topic: str) -> TopicSpec:
        """The topic's spec; :class:`UnknownTopicOrPartitionError` naming how to create it."""
        found = self.topics.get(topic)
        if found is None:
            raise missing_topic(topic, self.log_dirs, self.bootstrap)
        return found


def parse_plan(options: Mapping[str, str], schema: StructType, overwrite: bool, *, streaming: bool = False) -> SinkPlan:
    """Validate options, columns and topics (see the module doc); the errors name what is wrong."""
    check_mode(overwrite, streaming)
    check_option_names(options)
    bootstrap = options.get(BOOTSTRAP)
    if bootstrap is not None:
        from tidelog.spark.broker_client import parse_bootstrap

        parse_bootstrap(bootstrap)  # on the driver, before any task stages through it
    if bootstrap is not None and options.get("path") is None:
        return _broker_plan(options, schema, bootstrap)
    log_dirs = parse_log_dirs(options.get("path"))
    staging = staging_root(options.get("stagingpath"), log_dirs)
    if bootstrap is None:
        from tidelog.spark.broker_commit import serve_address

        bootstrap = serve_address(log_dirs)  # a running tidelog serve owns the dir: write through it
    return _plan_topics(options, schema, lambda c, names: read_topic_specs(log_dirs, c, names),
                        log_dirs, str(staging), bootstrap)


def _broker_plan(options: Mapping[str, str], schema: StructType, bootstrap: str) -> SinkPlan:
    """The plan of a write through the broker at ``bootstrap`` with no data dir: topics asked of it."""
    from tidelog.spark.broker_commit import broker_topic_specs

    if options.get("stagingpath") is not None:
        raise ConfigError("option stagingPath does not apply with kafka.bootstrap.servers: the broker stages the "
                          "job in its own staging dir", option="stagingPath")
    return _plan_topics(options, schema, lambda c, names: broker_topic_specs(bootstrap, c, names), (), "", bootstrap)


def _plan_topics(options: Mapping[str, str], schema: StructType,
                 specs: Callable[[CompressionType | None, list[str] | None], dict[str, TopicSpec]],
                 log_dirs: tuple[str, ...], staging: str, bootstrap: str | None) -> SinkPlan:
    """The topic option, the columns, the compression and the topics' specs (from ``specs``:
    the data dir's registry or the broker); without the option, the column may name any topic."""
    topic = options.get("topic")
    if topic is not None and not topic.strip():
        raise ConfigError("option topic is empty", option="topic")
    columns = check_columns(schema, topic)
    topics = specs(parse_compression(options.get("compression")), [topic] if topic is not None else None)
    if topic is not None and topic not in topics:
        raise missing_topic(topic, log_dirs, bootstrap)
    return SinkPlan(log_dirs, staging, columns, topic, topics, bootstrap)


def check_mode(overwrite: bool, streaming: bool = False) -> None:
    if overwrite and streaming:
        raise InvalidRequestError("output mode complete is not supported: a topic is an append-only log; use "
                                  "outputMode(\"append\") (or update)")
    if overwrite:
        # Spark's Kafka sink (KafkaSourceProvider.createRelation) refuses Overwrite and Ignore with
        # "Save mode <mode> not allowed for Kafka. Allowed save modes are Append and ErrorIfExists
        # (default)." and writes ErrorIfExists as Append. Spark refuses ErrorIfExists and Ignore
        # for every Python data source before the source is called (UNSUPPORTED_DATA_SOURCE_SAVE_MODE,
        # whose text suggests Overwrite), so Overwrite is the only refused mode tidelog sees and
        # Append the only mode to point to.
        raise InvalidRequestError(
            "Save mode Overwrite not allowed for tidelog. Allowed save mode is Append: use .mode(\"append\") "
            "(a topic is an append-only log; Spark's Kafka sink also writes the default ErrorIfExists as "
            "Append, but Spark refuses ErrorIfExists and Ignore for Python data sources such as tidelog). "
            "To empty a topic, delete and re-create it with tidelog topics delete / tidelog topics create")


def check_option_names(options: Mapping[str, str]) -> None:
    """Refuse ``kafka.*`` options but ``kafka.bootstrap.servers`` (there is no producer to
    configure) and any unknown option."""
    for key in sorted(options):
        name = key.lower()
        if name.startswith("kafka.") and name != BOOTSTRAP:
            raise ConfigError(
                f"option {key} is not supported: format(\"tidelog\") stages producer batches itself, with no Kafka "
                "producer to configure; it takes kafka.bootstrap.servers (a running tidelog serve) only", option=key)
        if name not in OPTIONS and name not in SPARK_OPTIONS:
            raise ConfigError(f"unknown option {key}; the tidelog sink takes path, kafka.bootstrap.servers, topic, "
                              "stagingPath and compression", option=key)


def parse_log_dirs(path: str | None) -> tuple[str, ...]:
    """The log dirs of option ``path`` (comma-separated), each an existing directory."""
    if path is None or not path.strip():
        raise ConfigError("option path is required: the data dir (a log dir, or comma-separated log dirs), or "
                          "kafka.bootstrap.servers of a running tidelog serve", option="path")
    dirs = [part.strip() for part in path.split(",") if part.strip()]
    for log_dir in dirs:
        if not Path(log_dir).is_dir():
            raise ConfigError(f"path {log_dir!r} is not a directory: option path must name an existing data dir",
                              option="path")
    resolved = [str(Path(d).resolve()) for d in dirs]
    if len(set(resolved)) != len(resolved):
        raise ConfigError(f"option path names a log dir twice: {path!r}", option="path")
    return tuple(resolved)


def staging_root(option: str | None, log_dirs: tuple[str, ...]) -> Path:
    """``stagingPath``, or the sibling ``<first log dir>.tidelog-staging``; never inside a log dir."""
    root = Path(option).resolve() if option else Path(log_dirs[0] + STAGING_SUFFIX)
    for log_dir in log_dirs:
        if root == Path(log_dir) or root.is_relative_to(log_dir):
            raise ConfigError(
                f"stagingPath {str(root)!r} is inside the log dir {log_dir!r}: Kafka refuses to start on a "
                "directory there that is not topic-partition; choose a path outside every log dir",
                option="stagingPath")
    return root


def parse_compression(value: str | None) -> CompressionType | None:
    if value is None:
        return None
    try:
        return CompressionType.from_name(value)
    except UnsupportedCompressionError:
        raise ConfigError(f"option compression={value!r}: expected none, gzip, snappy, lz4 or zstd",
                          option="compression") from None


# --- columns -----------------------------------------------------------------------------

def check_columns(schema: StructType, topic_option: str | None) -> tuple[str, ...]:
    """The column names, after checking each one's name and type (Kafka's sink wording)."""
    names = [field.name for field in schema.fields]
    for field in schema.fields:
        if field.name not in COLUMNS:
            raise ConfigError(
                f"column {field.name!r} is not written by the tidelog sink; the columns are "
                f"{', '.join(COLUMNS)} (select only those)", column=field.name)
        expected = _type_problem(field.name, field.dataType)
        if expected is not None:
            raise ConfigError(f"{field.name} attribute type must be {expected}, not {field.dataType.simpleString()}",
                              column=field.name)
    if len(set(names)) != len(names):
        raise ConfigError(f"duplicate column names: {names}")
    if "value" not in names:
        raise ConfigError("required attribute 'value' not found: the DataFrame needs a value column")
    if topic_option is None and "topic" not in names:
        raise ConfigError("topic option required when no 'topic' attribute is present: set .option(\"topic\", ...) "
                          "or add a topic column", option="topic")
    return tuple(names)


def _type_problem(name: str, data_type: DataType) -> str | None:
    """What ``name`` must be, when ``data_type`` is not it."""
    from pyspark.sql.types import ArrayType, BinaryType, IntegerType, StringType, StructType, TimestampType

    simple = data_type.simpleString()
    if name in ("key", "value"):
        return None if isinstance(data_type, (BinaryType, StringType)) else "a string or binary"
    if name == "topic":
        return None if isinstance(data_type, StringType) else "a string"
    if name == "partition":
        return None if isinstance(data_type, IntegerType) else "an int"
    if name == "timestamp":
        return None if isinstance(data_type, TimestampType) else "a timestamp"
    ok = (isinstance(data_type, ArrayType) and isinstance(data_type.elementType, StructType)
          and simple == "array<struct<key:string,value:binary>>")
    return None if ok else "array<struct<key: string, value: binary>>"


# --- topics ------------------------------------------------------------------------------

def missing_topic(topic: str, log_dirs: tuple[str, ...], bootstrap: str | None = None) -> UnknownTopicOrPartitionError:
    if not log_dirs:
        return UnknownTopicOrPartitionError(
            f"topic {topic!r} does not exist on the broker at {bootstrap}; the tidelog sink does not create topics: "
            f"create it through the broker with a Kafka admin client (kafka-topics.sh --bootstrap-server {bootstrap} "
            f"--create --topic {topic} --partitions N)", topic=topic)
    return UnknownTopicOrPartitionError(
        f"topic {topic!r} does not exist in the data dir; the tidelog sink does not create topics: create it with "
        f"tidelog --data-dir {log_dirs[0]} topics create {topic} --partitions N", topic=topic)


def read_topic_specs(log_dirs: tuple[str, ...], compression: CompressionType | None,
                     names: list[str] | None) -> dict[str, TopicSpec]:
    """Specs of ``names`` (every topic when None) from the newest registry copy; unknown names are left out."""
    # Imported here: executors unpickle this module with the plan and never need the manager.
    from tidelog.manager.topics import read_newest_registry
    from tidelog.storage.config import BrokerConfig

    state = read_newest_registry([Path(d) for d in log_dirs]).state
    broker = BrokerConfig.from_properties({})
    wanted = state.topics if names is None else {n: state.topics[n] for n in names if n in state.topics}
    return {name: topic_spec(name, record.partitions, broker.log_config(dict(record.configs)), compression)
            for name, record in wanted.items()}


def topic_spec(name: str, partitions: int, config: LogConfig, compression: CompressionType | None) -> TopicSpec:
    if config.compression_type == "producer":
        codec = compression or CompressionType.NONE
    else:
        codec = CompressionType.from_name(config.compression_type)
    levels = {CompressionType.GZIP: config.compression_gzip_level, CompressionType.LZ4: config.compression_lz4_level,
              CompressionType.ZSTD: config.compression_zstd_level}
    level = levels.get(codec)
    max_message = config.max_message_bytes
    return TopicSpec(
        name=name, partitions=partitions, codec=int(codec), level=None if level in (None, -1) else level,
        compact=config.compact, timestamp_before_max_ms=config.message_timestamp_before_max_ms,
        timestamp_after_max_ms=config.message_timestamp_after_max_ms,
        log_append_time=config.message_timestamp_type == "LogAppendTime",
        max_batch_bytes=max(1, min(MAX_BATCH_BYTES, max_message - RECORD_BATCH_OVERHEAD)),
        max_message_bytes=max_message)
