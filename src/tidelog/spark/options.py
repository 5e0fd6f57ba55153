"""The ``tidelog`` source's options: parsed and checked with the rules of Spark's Kafka source.

Spark hands a Python source its options as a dict of strings with lower-cased keys. Everything is
checked here, in ``reader()``/``streamReader()`` on the driver, so a bad option fails at
``load()`` (Spark shows it as ``AnalysisException [PYTHON_DATA_SOURCE_ERROR]``) before any job
runs. Messages follow Kafka's connector (``KafkaSourceProvider``) where it has one, and always
name the option and its value.

=================================== ===========================================================
option                              meaning (Kafka's unless said)
=================================== ===========================================================
path                                the data dir: one log dir, or comma-separated log dirs (ours;
                                    stands for ``kafka.bootstrap.servers``); or a remote-tier store
                                    URI with ``rsm.config.*`` options: the remote tier
                                    (:mod:`tidelog.spark.remote_source`)
kafka.bootstrap.servers             with a store ``path`` only: the broker whose tail not yet
                                    tiered is read through Fetch, up to its high watermark;
kafkaConsumer.pollTimeoutMs         then how long a task asks a broker that does not answer
                                    (default 120000)
subscribe / subscribePattern /      exactly one: topics, a Java regex found anywhere in the topic
assign                              name (as Spark's source: ``findFirstIn``; anchor it with ^...$
                                    for a whole-name match), or ``{"t":[0,1]}``
startingOffsets                     earliest | latest (streams only) | ``{"t":{"0":n}}`` with
                                    -2 = earliest, -1 = latest; default earliest (batch),
                                    latest (stream)
startingTimestamp /                 the first offset whose timestamp is >= the value, for every
startingOffsetsByTimestamp          partition / per partition; precedence: startingTimestamp >
                                    startingOffsetsByTimestamp > startingOffsets
startingOffsetsByTimestampStrategy  error (default) | latest: when no offset matches
endingOffsets (batch only)          latest (default) | JSON, -1 = latest, -2 refused
endingTimestamp /                   like the starting ones (batch only); no match = latest
endingOffsetsByTimestamp
failOnDataLoss                      true (default): fail when offsets are gone, else skip them
minPartitions, maxRecordsPerPartition  how ranges are split (see :mod:`tidelog.spark.ranges`)
maxOffsetsPerTrigger,               streams: rate limit, minimum batch, and the longest wait for
minOffsetsPerTrigger,               it (Spark time string, default 15m)
maxTriggerDelay
includeHeaders                      false (default): adds the ``headers`` column
kafka.isolation.level               read_uncommitted (default) | read_committed: the consumer's
                                    isolation level; read_committed ends every read (latest) at
                                    the last stable offset and leaves out the records of aborted
                                    transactions (:mod:`tidelog.storage.view_txns`; for a store
                                    path :mod:`tidelog.spark.remote_source`)
=================================== ===========================================================

Other ``kafka.*`` options are refused (there is no broker or consumer to configure; with a store
path ``kafka.bootstrap.servers`` alone is taken, by :mod:`tidelog.spark.remote_source`), and so is
every other unknown option, rather than silently ignored.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tidelog.spark.java_regex import JavaRegexError, compile_java
from tidelog.spark.offsets import (
    EARLIEST,
    LATEST,
    TIMESTAMPS_EXAMPLE,
    OffsetsJsonError,
    PartitionOffsets,
    parse_assign,
    parse_partition_offsets,
)
from tidelog.topic_partition import TopicPartition

PATH = "path"
SUBSCRIBE = "subscribe"
SUBSCRIBE_PATTERN = "subscribepattern"
ASSIGN = "assign"
STRATEGY_KEYS = (SUBSCRIBE, SUBSCRIBE_PATTERN, ASSIGN)
STARTING_OFFSETS = "startingoffsets"
ENDING_OFFSETS = "endingoffsets"
STARTING_TIMESTAMP = "startingtimestamp"
ENDING_TIMESTAMP = "endingtimestamp"
STARTING_BY_TIMESTAMP = "startingoffsetsbytimestamp"
ENDING_BY_TIMESTAMP = "endingoffsetsbytimestamp"
STARTING_STRATEGY = "startingoffsetsbytimestampstrategy"
FAIL_ON_DATA_LOSS = "failondataloss"
MIN_PARTITIONS = "minpartitions"
MAX_RECORDS_PER_PARTITION = "maxrecordsperpartition"
MAX_OFFSETS_PER_TRIGGER = "maxoffsetspertrigger"
MIN_OFFSETS_PER_TRIGGER = "minoffsetspertrigger"
MAX_TRIGGER_DELAY = "maxtriggerdelay"
INCLUDE_HEADERS = "includeheaders"
ISOLATION_LEVEL = "kafka.isolation.level"
READ_COMMITTED, READ_UNCOMMITTED = "read_committed", "read_uncommitted"
DEFAULT_MAX_TRIGGER_DELAY = "15m"

KNOWN = frozenset({PATH, *STRATEGY_KEYS, STARTING_OFFSETS, ENDING_OFFSETS, STARTING_TIMESTAMP, ENDING_TIMESTAMP,
                   STARTING_BY_TIMESTAMP, ENDING_BY_TIMESTAMP, STARTING_STRATEGY, FAIL_ON_DATA_LOSS,
                   MIN_PARTITIONS, MAX_RECORDS_PER_PARTITION, MAX_OFFSETS_PER_TRIGGER,
                   MIN_OFFSETS_PER_TRIGGER, MAX_TRIGGER_DELAY, INCLUDE_HEADERS, ISOLATION_LEVEL})
# How the user spelled each option in the docs (Spark lower-cases keys before we see them).
SPELLING = {key.lower(): key for key in (
    "path", "subscribe", "subscribePattern", "assign", "startingOffsets", "endingOffsets", "startingTimestamp",
    "endingTimestamp", "startingOffsetsByTimestamp", "endingOffsetsByTimestamp",
    "startingOffsetsByTimestampStrategy", "failOnDataLoss", "minPartitions", "maxRecordsPerPartition",
    "maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay", "includeHeaders", "kafka.isolation.level")}
_KAFKA_CLIENT_ONLY = ("groupidprefix", "fetchoffset.numretries", "fetchoffset.retryintervalms",
                      "kafkaconsumer.polltimeoutms")

_TIME_UNITS_MS = {"us": 0.001, "ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}
_TIME_STRING = re.compile(r"^(-?[0-9]+)([a-z]+)?$")


class SourceOptionError(ValueError):
    """A source option that is missing, malformed or not allowed here (message names it)."""


# --- parsed values --------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Subscription:
    """Which partitions a query reads: ``kind`` is subscribe, subscribepattern or assign."""

    kind: str
    topics: tuple[str, ...] = ()
    pattern: str = ""
    assigned: tuple[TopicPartition, ...] = ()

    def select(self, existing: list[TopicPartition]) -> list[TopicPartition]:
        """The subscribed partitions among ``existing`` (assign: as assigned, existing or not)."""
        if self.kind == ASSIGN:
            return sorted(set(self.assigned))
        if self.kind == SUBSCRIBE:
            wanted = set(self.topics)
            return [tp for tp in existing if tp.topic in wanted]
        # Spark's SubscribePatternStrategy keeps the topics where ``topicRegex.findFirstIn(name)``
        # is defined (Scala's Regex over java.util.regex: a match anywhere in the name, not
        # ``matches()``), so this searches; the pattern is Java syntax (tidelog.spark.java_regex).
        regex = compile_java(self.pattern)
        return [tp for tp in existing if regex.search(tp.topic)]


@dataclass(frozen=True, slots=True)
class OffsetSpec:
    """Where a read starts or ends, before it is resolved against the data.

    ``kind``: earliest, latest, offsets (``offsets`` per partition, -2/-1 allowed), timestamp
    (``timestamp`` for every partition) or timestamps (``offsets`` holds per-partition times).
    """

    kind: str
    offsets: PartitionOffsets = field(default_factory=dict)
    timestamp: int | None = None


@dataclass(frozen=True, slots=True)
class SourceOptions:
    """Everything a read needs from its options (small: pickled into the reader)."""

    log_dirs: tuple[str, ...]
    subscription: Subscription
    starting: OffsetSpec
    ending: OffsetSpec
    no_match_strategy: str  # "error" | "latest", for starting timestamps
    fail_on_data_loss: bool
    include_headers: bool
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    max_offsets_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = 15 * 60_000
    read_committed: bool = False
    """``kafka.isolation.level=read_committed``: reads end at the last stable offset, aborted
    transactions left out."""


# --- parsing --------------------------------------------------------------------------------

def parse_source_options(options: Mapping[str, str], *, streaming: bool) -> SourceOptions:
    """Check and parse the options of a batch (``streaming=False``) or streaming read.

    Checks only the options themselves; :func:`check_data_dirs` checks the path on disk and the
    reader checks named partitions against the data. Raises :class:`SourceOptionError`.
    """
    opts = {k.lower(): str(v) for k, v in options.items()}
    _check_known(opts)
    if streaming:
        _check_stream_only(opts)
    subscription = _subscription(opts)
    starting = _offset_spec(opts, STARTING_TIMESTAMP, STARTING_BY_TIMESTAMP, STARTING_OFFSETS,
                            "latest" if streaming else "earliest")
    ending = _offset_spec(opts, ENDING_TIMESTAMP, ENDING_BY_TIMESTAMP, ENDING_OFFSETS, "latest")
    if not streaming:
        _check_batch_bounds(starting, ending)
    parsed = SourceOptions(
        log_dirs=_log_dirs(opts), subscription=subscription, starting=starting, ending=ending,
        no_match_strategy=_strategy(opts), fail_on_data_loss=_flag(opts, FAIL_ON_DATA_LOSS, True),
        include_headers=_flag(opts, INCLUDE_HEADERS, False),
        min_partitions=_positive(opts, MIN_PARTITIONS, 2**31 - 1),
        max_records_per_partition=_positive(opts, MAX_RECORDS_PER_PARTITION),
        max_offsets_per_trigger=_positive(opts, MAX_OFFSETS_PER_TRIGGER),
        min_offsets_per_trigger=_positive(opts, MIN_OFFSETS_PER_TRIGGER),
        max_trigger_delay_ms=parse_time_ms(opts.get(MAX_TRIGGER_DELAY, DEFAULT_MAX_TRIGGER_DELAY),
                                           SPELLING[MAX_TRIGGER_DELAY]),
        read_committed=_isolation_level(opts) == READ_COMMITTED,
    )
    _check_trigger_limits(parsed)
    return parsed


def _check_known(opts: Mapping[str, str]) -> None:
    for key in sorted(opts):
        if key.startswith("kafka.") and key != ISOLATION_LEVEL:
            raise SourceOptionError(
                f"Kafka option '{key}' is not supported: the tidelog source reads the log dir given by "
                f"'path' directly, there is no broker or consumer to configure. Remove the 'kafka.*' options.")
        if key in _KAFKA_CLIENT_ONLY:
            raise SourceOptionError(
                f"Option '{key}' tunes Kafka's consumer and has no meaning for the tidelog source "
                f"(it reads segment files directly); remove it.")
        if key not in KNOWN:
            raise SourceOptionError(
                f"Unknown option '{key}' for the tidelog source. Supported options: "
                f"{', '.join(SPELLING[k] for k in sorted(KNOWN))}.")


def _check_stream_only(opts: Mapping[str, str]) -> None:
    if ENDING_OFFSETS in opts:
        raise SourceOptionError("ending offset not valid in streaming queries (option 'endingOffsets')")
    if ENDING_BY_TIMESTAMP in opts:
        raise SourceOptionError("ending timestamp not valid in streaming queries (option 'endingOffsetsByTimestamp')")
    if ENDING_TIMESTAMP in opts:
        raise SourceOptionError("ending timestamp not valid in streaming queries (option 'endingTimestamp')")


def _log_dirs(opts: Mapping[str, str]) -> tuple[str, ...]:
    raw = opts.get(PATH, "")
    dirs = tuple(d.strip() for d in raw.split(",") if d.strip())
    if not dirs:
        raise SourceOptionError(
            "Option 'path' must be specified for the tidelog source: the data dir to read "
            "(a log dir, or comma-separated log dirs), e.g. .load('/var/lib/kafka/data')")
    return dirs


def check_data_dirs(log_dirs: tuple[str, ...]) -> None:
    """Every path must be an existing log dir (``meta.properties`` or partition dirs inside)."""
    from tidelog.storage.log_view import is_data_dir

    for d in log_dirs:
        path = Path(d)
        if not path.exists():
            raise SourceOptionError(f"Option 'path': '{d}' does not exist; expected a tidelog/Kafka data dir")
        if not is_data_dir(path):
            raise SourceOptionError(
                f"Option 'path': '{d}' is not a tidelog/Kafka data dir (no meta.properties and no "
                f"<topic>-<partition> directories in it)")


def _subscription(opts: Mapping[str, str]) -> Subscription:
    given = [k for k in STRATEGY_KEYS if k in opts]
    names = ", ".join(SPELLING[k] for k in STRATEGY_KEYS)
    if not given:
        raise SourceOptionError(
            f"One of the following options must be specified for the tidelog source: {names}. See the docs for more details.")
    if len(given) > 1:
        raise SourceOptionError(
            f"Only one of the following options can be specified for the tidelog source: {names}. "
            f"Got: {', '.join(SPELLING[k] for k in given)}.")
    key = given[0]
    value = opts[key]
    if key == ASSIGN:
        if not value.strip().startswith("{"):
            raise SourceOptionError(f"No topicpartitions to assign as specified value for option 'assign' is '{value}'")
        return Subscription(ASSIGN, assigned=tuple(_json(parse_assign, value, "assign")))
    if key == SUBSCRIBE:
        topics = tuple(t.strip() for t in value.split(",") if t.strip())
        if not topics:
            raise SourceOptionError(f"No topics to subscribe to as specified value for option 'subscribe' is '{value}'")
        return Subscription(SUBSCRIBE, topics=topics)
    pattern = value.strip()
    if not pattern:
        raise SourceOptionError(
            f"Pattern to subscribe is empty as specified value for option 'subscribePattern' is '{value}'")
    try:
        compile_java(pattern)
    except JavaRegexError as e:
        raise SourceOptionError(
            f"Option 'subscribePattern': '{value}' is not a valid Java regular expression: {e}") from None
    return Subscription(SUBSCRIBE_PATTERN, pattern=pattern)


def _json(parse, value: str, key: str):  # type: ignore[no-untyped-def]
    try:
        return parse(value)
    except OffsetsJsonError as e:
        raise SourceOptionError(f"Option '{SPELLING[key]}': {e}") from None


def _offset_spec(opts: Mapping[str, str], timestamp_key: str, by_timestamp_key: str, offsets_key: str,
                 default: str) -> OffsetSpec:
    """Kafka's precedence: global timestamp > per-partition timestamps > offsets > default."""
    if timestamp_key in opts:
        text = opts[timestamp_key].strip()
        try:
            return OffsetSpec("timestamp", timestamp=_long_value(text))
        except ValueError:
            raise SourceOptionError(
                f"Option '{SPELLING[timestamp_key]}': Expected a single long value, got {text}") from None
    if by_timestamp_key in opts:
        times = _json(lambda t: parse_partition_offsets(t, TIMESTAMPS_EXAMPLE), opts[by_timestamp_key].strip(),
                      by_timestamp_key)
        return OffsetSpec("timestamps", offsets=times)
    text = opts.get(offsets_key, default).strip()
    if text.lower() in ("earliest", "latest"):
        return OffsetSpec(text.lower())
    return OffsetSpec("offsets", offsets=_json(parse_partition_offsets, text, offsets_key))


def _check_batch_bounds(starting: OffsetSpec, ending: OffsetSpec) -> None:
    """Kafka's batch rules: no latest start, no earliest end, matching partitions, start <= end."""
    if starting.kind == "latest":
        raise SourceOptionError("starting offset can't be latest for batch queries on tidelog "
                                "(option 'startingOffsets'='latest')")
    if ending.kind == "earliest":
        raise SourceOptionError("ending offset can't be earliest for batch queries on tidelog "
                                "(option 'endingOffsets'='earliest')")
    if starting.kind == "offsets":
        for tp, offset in sorted(starting.offsets.items()):
            if offset == LATEST:
                raise SourceOptionError(f"startingOffsets for {tp} can't be latest for batch queries on tidelog")
    if ending.kind == "offsets":
        for tp, offset in sorted(ending.offsets.items()):
            if offset == EARLIEST:
                raise SourceOptionError(f"ending offset for {tp} can't be earliest for batch queries on tidelog "
                                        f"(option 'endingOffsets' uses -2)")
    if starting.kind == ending.kind and starting.kind in ("offsets", "timestamps"):
        _check_matching(starting.offsets, ending.offsets, "timestamp" if starting.kind == "timestamps" else "offset")


def _check_matching(start: PartitionOffsets, end: PartitionOffsets, what: str) -> None:
    if set(start) != set(end):
        raise SourceOptionError(
            f"The starting and ending {what}s name different topic-partitions: start {_tps(start)}, end {_tps(end)}")
    for tp in sorted(start):
        if start[tp] >= 0 and end[tp] >= 0 and start[tp] > end[tp]:
            raise SourceOptionError(
                f"The starting {what} ({start[tp]}) is greater than the ending {what} ({end[tp]}) for {tp}")


def _tps(offsets: PartitionOffsets) -> str:
    return "[" + ", ".join(str(tp) for tp in sorted(offsets)) + "]"


def _strategy(opts: Mapping[str, str]) -> str:
    value = opts.get(STARTING_STRATEGY, "error").strip().lower()
    if value not in ("error", "latest"):
        raise SourceOptionError(
            f"Option 'startingOffsetsByTimestampStrategy' must be 'error' or 'latest', got '{opts[STARTING_STRATEGY]}'")
    return value


def _isolation_level(opts: Mapping[str, str]) -> str:
    """``kafka.isolation.level``, checked as Kafka's consumer checks ``isolation.level``."""
    value = opts.get(ISOLATION_LEVEL, READ_UNCOMMITTED)
    if value not in (READ_COMMITTED, READ_UNCOMMITTED):
        raise SourceOptionError(
            f"Option 'kafka.isolation.level': Invalid value {value} for configuration isolation.level: "
            f"String must be one of: {READ_COMMITTED}, {READ_UNCOMMITTED}")
    return value


def _flag(opts: Mapping[str, str], key: str, default: bool) -> bool:
    if key not in opts:
        return default
    value = opts[key].strip().lower()
    if value not in ("true", "false"):
        raise SourceOptionError(f"Option '{SPELLING[key]}' must be true or false, got '{opts[key]}'")
    return value == "true"


def _positive(opts: Mapping[str, str], key: str, maximum: int = 2**63 - 1) -> int | None:
    if key not in opts:
        return None
    try:
        value = _long_value(opts[key].strip())
    except ValueError:
        raise SourceOptionError(f"Option '{SPELLING[key]}' must be a number, got '{opts[key]}'") from None
    if value <= 0:
        raise SourceOptionError(f"{SPELLING[key]} must be positive (got {value})")
    if value > maximum:
        raise SourceOptionError(f"{SPELLING[key]} must be at most {maximum} (got {value})")
    return value


def _long_value(text: str) -> int:
    if not re.fullmatch(r"[+-]?[0-9]+", text):
        raise ValueError(text)
    value = int(text)
    if not -(2**63) <= value < 2**63:
        raise ValueError(text)
    return value


def parse_time_ms(text: str, key: str) -> int:
    """A Spark time string ("15m", "30s", "100ms", "2h", "1d"; a bare number is ms) in ms."""
    match = _TIME_STRING.match(text.strip().lower())
    if match is None or (match[2] is not None and match[2] not in _TIME_UNITS_MS):
        raise SourceOptionError(
            f"Option '{key}': invalid time string '{text}' (expected e.g. 15m, 30s, 100ms, 2h, 1d)")
    value = int(match[1]) * _TIME_UNITS_MS[match[2] or "ms"]
    if value < 0:
        raise SourceOptionError(f"Option '{key}' must not be negative, got '{text}'")
    return int(value)


def _check_trigger_limits(parsed: SourceOptions) -> None:
    low, high = parsed.min_offsets_per_trigger, parsed.max_offsets_per_trigger
    if low is not None and high is not None and low > high:
        raise SourceOptionError(
            f"The value of minOffsetPerTrigger({low}) is higher than the maxOffsetsPerTrigger({high}).")


# --- checks against the data ----------------------------------------------------------------

def check_topics_exist(parsed: SourceOptions, existing: set[TopicPartition]) -> None:
    """Every topic named by ``subscribe`` or ``assign`` must exist, as in Spark's Kafka source.

    Spark's SubscribeStrategy and AssignStrategy resolve their partitions with the admin client's
    ``describeTopics(topics).allTopicNames().get()``, which fails for a topic the cluster does not
    have with Kafka's ``UnknownTopicOrPartitionException`` ("This server does not host this
    topic-partition."); batch queries fail planning with it and streaming queries fail their first
    batch. ``subscribePattern`` only lists existing topics, so it never fails this way (a pattern
    that matches nothing reads nothing). Raises :class:`UnknownTopicOrPartitionError` naming the
    topics and the option."""
    from tidelog.errors import UnknownTopicOrPartitionError

    sub = parsed.subscription
    named = sub.topics if sub.kind == SUBSCRIBE else tuple(tp.topic for tp in sub.assigned)
    missing = sorted(set(named) - {tp.topic for tp in existing})
    if missing and sub.kind != SUBSCRIBE_PATTERN:
        topics = ", ".join(missing)
        raise UnknownTopicOrPartitionError(
            f"UnknownTopicOrPartitionException: This server does not host this topic-partition. Topic(s) {topics} "
            f"named by option '{SPELLING[sub.kind]}' do not exist in {', '.join(parsed.log_dirs)}", topics=missing)


def check_named_partitions(parsed: SourceOptions, existing: set[TopicPartition]) -> None:
    """Partitions named by ``assign`` or an offsets/timestamps JSON must exist in the data dir."""
    check_topics_exist(parsed, existing)
    if parsed.subscription.kind == ASSIGN:
        missing = sorted(set(parsed.subscription.assigned) - existing)
        if missing:
            raise SourceOptionError(
                f"Option 'assign' names partitions that do not exist in {', '.join(parsed.log_dirs)}: {_names(missing)}")
    for key, spec in ((STARTING_OFFSETS, parsed.starting), (ENDING_OFFSETS, parsed.ending)):
        if spec.kind in ("offsets", "timestamps"):
            missing = sorted(set(spec.offsets) - existing)
            if missing:
                option = key if spec.kind == "offsets" else key.replace("offsets", "offsetsbytimestamp")
                raise SourceOptionError(
                    f"Option '{SPELLING[option]}' names partitions that do not exist in "
                    f"{', '.join(parsed.log_dirs)}: {_names(missing)}")


def check_covers(spec: OffsetSpec, subscribed: list[TopicPartition], option: str) -> None:
    """Kafka's rule: a specific offsets/timestamps JSON must name every subscribed partition."""
    if spec.kind not in ("offsets", "timestamps"):
        return
    if set(spec.offsets) != set(subscribed):
        name = SPELLING[option] if spec.kind == "offsets" else SPELLING[option.replace("offsets", "offsetsbytimestamp")]
        raise SourceOptionError(
            f"If {name} contains specific offsets, you must specify all TopicPartitions.\n"
            f"Use -1 for latest, -2 for earliest.\nSpecified: {_names(sorted(spec.offsets))} "
            f"Assigned: {_names(sorted(subscribed))}")


def _names(tps: list[TopicPartition]) -> str:
    return "[" + ", ".join(str(tp) for tp in tps) + "]"
