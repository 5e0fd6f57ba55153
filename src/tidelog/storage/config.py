"""Every Kafka config the storage layer reads: names, types, defaults, synonyms, validation.

Two declarative tables drive everything: :data:`TOPIC_CONFIGS` (per-topic configs, Kafka's
``LogConfig``) and :data:`BROKER_CONFIGS` (``server.properties`` keys: the broker-level synonyms
of topic configs plus broker-only settings such as ``log.dirs`` and the cleaner's). Each
:class:`ConfigKey` holds the type, default, validator, broker synonyms and a short doc.

Precedence of a topic config (Kafka's ``LogConfig.fromProps`` over ``extractLogConfigMap``)::

    topic-level override                      e.g. retention.ms=86400000 on the topic
      > broker synonyms, in order, first SET  log.retention.ms > log.retention.minutes > log.retention.hours
      > built-in default                      604800000

Synonyms in another unit are converted (``log.roll.hours`` × 3 600 000 → ``segment.ms``). A
broker-derived ``retention.ms`` that comes out negative becomes -1 (unlimited), as in Kafka's
``logRetentionTimeMillis``; at topic level anything below -1 is rejected. ``flush.ms`` falls
back to ``log.flush.interval.ms`` then ``log.flush.scheduler.interval.ms``. Dynamic broker
configs (cluster-wide defaults changed at runtime) do not exist here; the LogManager passes a
new :class:`BrokerConfig` instead.

Values are parsed the Kafka way (``ConfigDef.parseType``): strings are trimmed; INT/LONG are
Java decimal integers (optional sign, ASCII digits) that must fit int32/int64; DOUBLE is a Java
decimal float; BOOLEAN is ``true``/``false`` in any case; LIST is comma separated with the
whitespace around commas dropped (an empty string is the empty list). Already-typed Python
values are accepted too (``segment_bytes=1024``). Errors are :class:`~tidelog.errors.ConfigError`
with Kafka's wording: ``Invalid value -5 for configuration segment.bytes: Value must be at least 14``.

Defaults are Kafka 4.x's (``message.timestamp.after.max.ms`` = 3600000,
``num.recovery.threads.per.data.dir`` = 2), with these deliberate deviations:

* ``segment.bytes`` / ``log.segment.bytes`` minimum is **14** (Kafka 3.x), not 4.0's 1 MiB
  (KIP-1030): tests and users rely on tiny segments, and 4.0 itself needs the test-only
  ``internal.segment.bytes`` for that, which we do not offer.
* ``segment.index.bytes`` / ``log.index.size.max.bytes`` minimum is **12**, not Kafka's 4: the
  size of one time-index entry, the larger of the two entries. Below it a segment's time index
  holds no entry, so a partition cannot be created, or every roll fails (Kafka's 5.0 raises the
  minimum to 1 KiB).
* ``cleanup.policy``, ``message.timestamp.type`` and ``compression.type`` accept any letter case
  and are normalized to Kafka's spelling (Kafka's validators are case-sensitive).
* ``cleanup.policy`` may be empty (neither delete nor compact), as Kafka 4.2 allows (KAFKA-19112).
* ``log.dirs`` items: empty items are dropped, duplicates rejected.

Stored overrides that no longer validate are made loadable by :mod:`.stored_overrides`.

Keys removed in Kafka 4.0 (``message.timestamp.difference.max.ms``, ``message.format.version``,
``message.downconversion.enable`` and their ``log.`` broker forms) are rejected with a message
naming the replacement, at topic and broker level alike. Unknown topic keys are rejected
("Unknown topic config name: x"); unknown broker keys (``listeners``, ``node.id`` ...) are kept,
untyped, in :attr:`BrokerConfig.unknown`.

tidelog-only broker keys (all named ``tidelog.*``; a Kafka broker only warns about them):
``tidelog.cleaner.engine`` (``in-process`` or ``spark``: where the log cleaner dedupes and rewrites)
and ``tidelog.cleaner.spark.master`` (the Spark master URL of the ``spark`` engine).

``server.properties`` is read with Java ``Properties.load`` syntax (:func:`parse_properties`):
``#``/``!`` comment lines, ``key=value``, ``key:value`` or ``key value``, trailing-backslash
continuation lines, and the escapes ``\\t \\n \\r \\f \\\\ \\uXXXX``.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import random as _random
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from types import MappingProxyType
from typing import Any, Generic, Protocol, TypeVar, overload

from tidelog.errors import ConfigError
from tidelog.records.varint import INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN
from tidelog.storage.properties import read_properties_file

DOUBLE_MAX = 1.7976931348623157e308

MS_PER_MINUTE = 60_000
MS_PER_HOUR = 3_600_000

T = TypeVar("T")


class ConfigType(enum.Enum):
    INT = "INT"
    LONG = "LONG"
    DOUBLE = "DOUBLE"
    BOOLEAN = "BOOLEAN"
    STRING = "STRING"
    LIST = "LIST"


class ConfigSource(enum.StrEnum):
    """Where a described value comes from (Kafka's ``DescribeConfigs`` source names)."""

    TOPIC_CONFIG = "TOPIC_CONFIG"
    STATIC_BROKER_CONFIG = "STATIC_BROKER_CONFIG"
    DEFAULT_CONFIG = "DEFAULT_CONFIG"


def invalid_value(name: str, raw: object, reason: str) -> ConfigError:
    """Kafka's ``ConfigException(name, value, reason)`` text as a :class:`ConfigError`; ``reason``
    is also kept as an attribute (not in the rendered context: the message already says it)."""
    error = ConfigError(f"Invalid value {_show(raw)} for configuration {name}: {reason}", config=name, value=raw)
    error.reason = reason
    return error


def _show(raw: object) -> str:
    if isinstance(raw, bool):
        return "true" if raw else "false"
    if isinstance(raw, (list, tuple, set, frozenset)):
        return ",".join(str(item) for item in raw)
    return str(raw)


# --- validators ----------------------------------------------------------------------------

class Validator(Protocol):
    def validate(self, name: str, value: Any, raw: object) -> Any:
        """The (possibly normalized) value, or raise :class:`ConfigError`."""
        ...

    def describe(self) -> str:
        """Valid values in Kafka's documentation notation, e.g. ``[14,...]``."""
        ...


@dataclass(frozen=True, slots=True)
class Range:
    """Numeric bounds, inclusive; NaN is rejected."""

    min: int | float | None = None
    max: int | float | None = None

    def validate(self, name: str, value: Any, raw: object) -> Any:
        if isinstance(value, float) and math.isnan(value):
            raise invalid_value(name, raw, "Value must be a number")
        if self.min is not None and value < self.min:
            raise invalid_value(name, raw, f"Value must be at least {self.min}")
        if self.max is not None and value > self.max:
            raise invalid_value(name, raw, f"Value must be no more than {self.max}")
        return value

    def describe(self) -> str:
        if self.max is None:
            return f"[{self.min},...]"
        if self.min is None:
            return f"[...,{self.max}]"
        return f"[{self.min},...,{self.max}]"


def at_least(minimum: int | float) -> Range:
    return Range(minimum, None)


def between(minimum: int | float, maximum: int | float) -> Range:
    return Range(minimum, maximum)


@dataclass(frozen=True, slots=True)
class RangeOrSentinel:
    """A range plus one extra allowed value (gzip level: 1..9 or -1 for the codec default)."""

    min: int
    max: int
    sentinel: int

    def validate(self, name: str, value: Any, raw: object) -> Any:
        if value != self.sentinel and not self.min <= value <= self.max:
            raise invalid_value(name, raw, f"Value must be between {self.min} and {self.max}, or {self.sentinel}")
        return value

    def describe(self) -> str:
        return f"[{self.min},...,{self.max}] or {self.sentinel}"


@dataclass(frozen=True, slots=True)
class OneOf:
    """A string from a fixed set, matched in any case and returned in its canonical spelling."""

    allowed: tuple[str, ...]

    def validate(self, name: str, value: Any, raw: object) -> Any:
        canonical = _canonical(self.allowed, value)
        if canonical is None:
            raise invalid_value(name, raw, f"String must be one of: {', '.join(self.allowed)}")
        return canonical

    def describe(self) -> str:
        return f"[{', '.join(self.allowed)}]"


@dataclass(frozen=True, slots=True)
class EachOneOf:
    """A list whose every item is one of a fixed set (any case, canonicalized)."""

    allowed: tuple[str, ...]

    def validate(self, name: str, value: Any, raw: object) -> Any:
        items = [_canonical(self.allowed, item) for item in value]
        if None in items:
            raise invalid_value(name, raw, f"String must be one of: {', '.join(self.allowed)}")
        return items

    def describe(self) -> str:
        return f"[{', '.join(self.allowed)}]"


def _canonical(allowed: tuple[str, ...], value: str) -> str | None:
    lowered = value.lower()
    return next((candidate for candidate in allowed if candidate.lower() == lowered), None)


@dataclass(frozen=True, slots=True)
class ThrottledReplicas:
    """``*`` or ``partition:broker`` pairs (Kafka's ``ThrottledReplicaListValidator``)."""

    def validate(self, name: str, value: Any, raw: object) -> Any:
        if value == ["*"] or all(re.fullmatch(r"[0-9]+:[0-9]+", item) for item in value):
            return value
        raise invalid_value(
            name, raw, "must be the literal '*' or a list of replicas '[partitionId]:[brokerId],...'"
        )

    def describe(self) -> str:
        return "[partitionId]:[brokerId],[partitionId]:[brokerId],..."


@dataclass(frozen=True, slots=True)
class DirList:
    """Paths of ``log.dirs``: empty items dropped, duplicates rejected."""

    def validate(self, name: str, value: Any, raw: object) -> Any:
        items = [item for item in value if item]
        duplicates = sorted({item for item in items if items.count(item) > 1})
        if duplicates:
            raise invalid_value(name, raw, f"duplicate log directories: {', '.join(duplicates)}")
        return items

    def describe(self) -> str:
        return "comma-separated distinct paths"


# --- keys ----------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Synonym:
    """A broker key that supplies a topic config's default; ``ms_per_unit`` converts hours/minutes."""

    name: str
    ms_per_unit: int = 1


@dataclass(frozen=True, slots=True)
class ConfigKey:
    """One config: Kafka name, type, default (None = unset), validator, broker synonyms, doc."""

    name: str
    type: ConfigType
    default: Any
    validator: Validator | None
    doc: str
    synonyms: tuple[Synonym, ...] = ()
    negative_means_unlimited: bool = False  # broker-derived negative value → -1 (retention.ms)
    as_set: bool = False  # LIST kept as a frozenset (cleanup.policy)

    @property
    def attribute(self) -> str:
        """The snake_case attribute name: ``segment.bytes`` → ``segment_bytes``."""
        return self.name.replace(".", "_")

    def parse(self, raw: object) -> Any:
        """Convert ``raw`` (string or typed value) to this key's type and validate it."""
        value = _PARSERS[self.type](self.name, raw)
        if self.validator is not None:
            value = self.validator.validate(self.name, value, raw)
        if self.type is ConfigType.LIST:
            value = frozenset(value) if self.as_set else tuple(value)
        return value

    def format(self, value: Any) -> str:
        """The value as Kafka prints it in properties and DescribeConfigs."""
        return format_value(self.type, value)

    def nearest_bound(self, raw: object) -> int | float | None:
        """The bound of this key's range nearest to ``raw``, when ``raw`` is a number of the key's
        type outside it; else None (in range, not a number, NaN, or a key with no range)."""
        if not isinstance(self.validator, (Range, RangeOrSentinel)):
            return None
        try:
            value = _PARSERS[self.type](self.name, raw)
        except ConfigError:
            return None
        if isinstance(value, float) and math.isnan(value):
            return None
        low, high = self.validator.min, self.validator.max
        if low is not None and value < low:
            return low
        if high is not None and value > high:
            return high
        return None


def _parse_integer(name: str, raw: object, lo: int, hi: int, type_name: str) -> int:
    if isinstance(raw, bool):
        raise invalid_value(name, raw, f"Expected value of type {type_name}, got a boolean")
    if isinstance(raw, int):
        value = raw
    elif isinstance(raw, str) and re.fullmatch(r"[+-]?[0-9]+", raw.strip()):
        value = int(raw.strip())
    else:
        raise invalid_value(name, raw, f"Not a number of type {type_name}")
    if not lo <= value <= hi:
        raise invalid_value(name, raw, f"Not a number of type {type_name} (must be within {lo}..{hi})")
    return value


_JAVA_DOUBLE = re.compile(r"[+-]?(NaN|Infinity|([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?)[fFdD]?")


def _parse_double(name: str, raw: object) -> float:
    if isinstance(raw, (int, float)) and not isinstance(raw, bool):
        return float(raw)
    if isinstance(raw, str) and _JAVA_DOUBLE.fullmatch(raw.strip()):
        return float(raw.strip().rstrip("fFdD"))
    raise invalid_value(name, raw, "Not a number of type DOUBLE")


def _parse_boolean(name: str, raw: object) -> bool:
    if isinstance(raw, bool):
        return raw
    if isinstance(raw, str) and raw.strip().lower() in ("true", "false"):
        return raw.strip().lower() == "true"
    raise invalid_value(name, raw, "Expected value to be either true or false")


def _parse_string(name: str, raw: object) -> str:
    if isinstance(raw, str):
        return raw.strip()
    raise invalid_value(name, raw, "Expected value to be a string")


def _parse_list(name: str, raw: object) -> list[str]:
    if isinstance(raw, str):
        text = raw.strip()
        return re.split(r"\s*,\s*", text) if text else []
    if isinstance(raw, (list, tuple)) and all(isinstance(item, str) for item in raw):
        return [item.strip() for item in raw]
    if isinstance(raw, (set, frozenset)) and all(isinstance(item, str) for item in raw):
        return sorted(item.strip() for item in raw)
    raise invalid_value(name, raw, "Expected a comma-separated list")


_PARSERS: dict[ConfigType, Any] = {
    ConfigType.INT: lambda name, raw: _parse_integer(name, raw, INT32_MIN, INT32_MAX, "INT"),
    ConfigType.LONG: lambda name, raw: _parse_integer(name, raw, INT64_MIN, INT64_MAX, "LONG"),
    ConfigType.DOUBLE: _parse_double,
    ConfigType.BOOLEAN: _parse_boolean,
    ConfigType.STRING: _parse_string,
    ConfigType.LIST: _parse_list,
}


def format_value(type: ConfigType, value: Any) -> str:
    """Kafka's string form of a typed value (``true``, ``0.5``, ``compact,delete``)."""
    if value is None:
        return ""
    if type is ConfigType.BOOLEAN:
        return "true" if value else "false"
    if type is ConfigType.DOUBLE:
        return java_double_string(float(value))
    if type is ConfigType.LIST:
        return ",".join(sorted(value) if isinstance(value, (set, frozenset)) else value)
    return str(value)


def java_double_string(value: float) -> str:
    """``Double.toString``: plain in [1e-3, 1e7), else ``d.dddE±n``; ``NaN``/``Infinity``."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0 or 1e-3 <= abs(value) < 1e7:
        return repr(value)
    sign, digits, exponent = Decimal(repr(value)).normalize().as_tuple()
    mantissa = "".join(map(str, digits))
    power = int(exponent) + len(digits) - 1
    return f"{'-' if sign else ''}{mantissa[0]}.{mantissa[1:] or '0'}E{power}"


# --- the tables ----------------------------------------------------------------------------

def _key(name: str, type: ConfigType, default: Any, validator: Validator | None, doc: str, *synonyms: Synonym,
         **flags: bool) -> ConfigKey:
    return ConfigKey(name, type, default, validator, doc, tuple(synonyms), **flags)


_INT, _LONG, _DOUBLE, _BOOL, _STR, _LIST = (
    ConfigType.INT, ConfigType.LONG, ConfigType.DOUBLE, ConfigType.BOOLEAN, ConfigType.STRING, ConfigType.LIST,
)
_S = Synonym
_CLEANUP_POLICIES = ("compact", "delete")
_TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")
_COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")
_GZIP_LEVEL = RangeOrSentinel(1, 9, -1)
_LZ4_LEVEL = between(1, 17)
_ZSTD_LEVEL = between(-131072, 22)
SEGMENT_BYTES_MIN = 14  # Kafka 3.x's RECORD_OVERHEAD_V0; see the module docstring
SEGMENT_INDEX_BYTES_MIN = 12  # one time-index entry; see the module docstring
CLEANER_ENGINES = ("in-process", "spark")  # tidelog.cleaner.engine

_TOPIC_KEYS = (
    _key("segment.bytes", _INT, 1073741824, at_least(SEGMENT_BYTES_MIN),
         "Maximum size of one segment file; a single append larger than this is rejected.",
         _S("log.segment.bytes")),
    _key("segment.ms", _LONG, 604800000, at_least(1),
         "Roll a non-empty segment this long after its first record (or its creation).",
         _S("log.roll.ms"), _S("log.roll.hours", MS_PER_HOUR)),
    _key("segment.jitter.ms", _LONG, 0, at_least(0),
         "Random amount subtracted from segment.ms per segment, to spread rolls out.",
         _S("log.roll.jitter.ms"), _S("log.roll.jitter.hours", MS_PER_HOUR)),
    _key("segment.index.bytes", _INT, 10485760, at_least(SEGMENT_INDEX_BYTES_MIN),
         "Maximum size of each offset and time index file.", _S("log.index.size.max.bytes")),
    _key("index.interval.bytes", _INT, 4096, at_least(0),
         "Bytes appended between two offset-index entries.", _S("log.index.interval.bytes")),
    _key("retention.bytes", _LONG, -1, None,
         "Maximum size of the whole partition log before old segments go; negative = unlimited.",
         _S("log.retention.bytes")),
    _key("retention.ms", _LONG, 604800000, at_least(-1),
         "Age after which a segment's records may be deleted; -1 = unlimited.",
         _S("log.retention.ms"), _S("log.retention.minutes", MS_PER_MINUTE), _S("log.retention.hours", MS_PER_HOUR),
         negative_means_unlimited=True),
    _key("cleanup.policy", _LIST, ("delete",), EachOneOf(_CLEANUP_POLICIES),
         "delete (retention), compact (keep the latest record per key), both, or neither.",
         _S("log.cleanup.policy"), as_set=True),
    _key("min.cleanable.dirty.ratio", _DOUBLE, 0.5, between(0, 1),
         "Dirty/total ratio above which a compacted log is cleaned.", _S("log.cleaner.min.cleanable.ratio")),
    _key("min.compaction.lag.ms", _LONG, 0, at_least(0),
         "Minimum age of a record before it may be compacted.", _S("log.cleaner.min.compaction.lag.ms")),
    _key("max.compaction.lag.ms", _LONG, INT64_MAX, at_least(1),
         "Maximum age of an uncompacted record before the log is cleaned regardless of ratio.",
         _S("log.cleaner.max.compaction.lag.ms")),
    _key("delete.retention.ms", _LONG, 86400000, at_least(0),
         "How long tombstones and transaction markers survive after the delete horizon is set.",
         _S("log.cleaner.delete.retention.ms")),
    _key("file.delete.delay.ms", _LONG, 60000, at_least(0),
         "Delay between renaming a segment to .deleted and unlinking it.", _S("log.segment.delete.delay.ms")),
    _key("flush.messages", _LONG, INT64_MAX, at_least(1),
         "Force an fsync after this many appended messages.", _S("log.flush.interval.messages")),
    _key("flush.ms", _LONG, INT64_MAX, at_least(0),
         "Force an fsync when the last one is older than this.",
         _S("log.flush.interval.ms"), _S("log.flush.scheduler.interval.ms")),
    _key("message.timestamp.type", _STR, "CreateTime", OneOf(_TIMESTAMP_TYPES),
         "CreateTime keeps the producer's timestamps; LogAppendTime stamps the broker's clock.",
         _S("log.message.timestamp.type")),
    _key("message.timestamp.before.max.ms", _LONG, INT64_MAX, at_least(0),
         "How far in the past a CreateTime timestamp may lie.", _S("log.message.timestamp.before.max.ms")),
    _key("message.timestamp.after.max.ms", _LONG, 3600000, at_least(0),
         "How far in the future a CreateTime timestamp may lie.", _S("log.message.timestamp.after.max.ms")),
    _key("max.message.bytes", _INT, 1048588, at_least(0),
         "Largest record batch accepted, including the 12-byte log overhead.", _S("message.max.bytes")),
    _key("preallocate", _BOOL, False, None,
         "Create new .log files at full segment.bytes length.", _S("log.preallocate")),
    _key("compression.type", _STR, "producer", OneOf(_COMPRESSION_TYPES),
         "Codec of stored batches; producer keeps the producer's.", _S("compression.type")),
    _key("compression.gzip.level", _INT, -1, _GZIP_LEVEL,
         "gzip level when compression.type=gzip.", _S("compression.gzip.level")),
    _key("compression.lz4.level", _INT, 9, _LZ4_LEVEL,
         "lz4 level when compression.type=lz4.", _S("compression.lz4.level")),
    _key("compression.zstd.level", _INT, 3, _ZSTD_LEVEL,
         "zstd level when compression.type=zstd.", _S("compression.zstd.level")),
    _key("unclean.leader.election.enable", _BOOL, False, None,
         "Replication setting; accepted for compatibility, unused by storage.",
         _S("unclean.leader.election.enable")),
    _key("min.insync.replicas", _INT, 1, at_least(1),
         "Replication setting; accepted for compatibility, unused by storage.", _S("min.insync.replicas")),
    _key("leader.replication.throttled.replicas", _LIST, (), ThrottledReplicas(),
         "Replication throttle; accepted for compatibility, unused by storage."),
    _key("follower.replication.throttled.replicas", _LIST, (), ThrottledReplicas(),
         "Replication throttle; accepted for compatibility, unused by storage."),
    _key("remote.storage.enable", _BOOL, False, None,
         "Tiered storage; accepted for compatibility, unused (no tiered storage here)."),
    _key("local.retention.ms", _LONG, -2, at_least(-2),
         "Tiered storage local retention; -2 = retention.ms. Unused here.", _S("log.local.retention.ms")),
    _key("local.retention.bytes", _LONG, -2, at_least(-2),
         "Tiered storage local retention; -2 = retention.bytes. Unused here.", _S("log.local.retention.bytes")),
    _key("remote.log.copy.disable", _BOOL, False, None, "Tiered storage; accepted for compatibility, unused."),
    _key("remote.log.delete.on.disable", _BOOL, False, None, "Tiered storage; accepted for compatibility, unused."),
)

TOPIC_CONFIGS: Mapping[str, ConfigKey] = MappingProxyType({key.name: key for key in _TOPIC_KEYS})

_BROKER_KEYS = (
    # broker synonyms of topic configs (same types; validators as Kafka's broker definitions)
    _key("log.segment.bytes", _INT, 1073741824, at_least(SEGMENT_BYTES_MIN), "Default of segment.bytes."),
    _key("log.roll.ms", _LONG, None, None, "Default of segment.ms; wins over log.roll.hours."),
    _key("log.roll.hours", _INT, 168, at_least(1), "Default of segment.ms, in hours."),
    _key("log.roll.jitter.ms", _LONG, None, None, "Default of segment.jitter.ms; wins over log.roll.jitter.hours."),
    _key("log.roll.jitter.hours", _INT, 0, at_least(0), "Default of segment.jitter.ms, in hours."),
    _key("log.index.size.max.bytes", _INT, 10485760, at_least(SEGMENT_INDEX_BYTES_MIN),
         "Default of segment.index.bytes."),
    _key("log.index.interval.bytes", _INT, 4096, at_least(0), "Default of index.interval.bytes."),
    _key("log.retention.bytes", _LONG, -1, None, "Default of retention.bytes."),
    _key("log.retention.ms", _LONG, None, None, "Default of retention.ms; wins over minutes and hours."),
    _key("log.retention.minutes", _INT, None, None, "Default of retention.ms, in minutes; wins over hours."),
    _key("log.retention.hours", _INT, 168, None, "Default of retention.ms, in hours."),
    _key("log.cleanup.policy", _LIST, ("delete",), EachOneOf(_CLEANUP_POLICIES), "Default of cleanup.policy."),
    _key("log.cleaner.min.cleanable.ratio", _DOUBLE, 0.5, between(0, 1), "Default of min.cleanable.dirty.ratio."),
    _key("log.cleaner.min.compaction.lag.ms", _LONG, 0, at_least(0), "Default of min.compaction.lag.ms."),
    _key("log.cleaner.max.compaction.lag.ms", _LONG, INT64_MAX, at_least(1), "Default of max.compaction.lag.ms."),
    _key("log.cleaner.delete.retention.ms", _LONG, 86400000, at_least(0), "Default of delete.retention.ms."),
    _key("log.segment.delete.delay.ms", _LONG, 60000, at_least(0), "Default of file.delete.delay.ms."),
    _key("log.flush.interval.messages", _LONG, INT64_MAX, at_least(1), "Default of flush.messages."),
    _key("log.flush.interval.ms", _LONG, None, None, "Default of flush.ms; wins over the scheduler interval."),
    _key("log.flush.scheduler.interval.ms", _LONG, INT64_MAX, None,
         "Period of the time-based flush task; also the last fallback of flush.ms."),
    _key("log.message.timestamp.type", _STR, "CreateTime", OneOf(_TIMESTAMP_TYPES),
         "Default of message.timestamp.type."),
    _key("log.message.timestamp.before.max.ms", _LONG, INT64_MAX, at_least(0),
         "Default of message.timestamp.before.max.ms."),
    _key("log.message.timestamp.after.max.ms", _LONG, 3600000, at_least(0),
         "Default of message.timestamp.after.max.ms."),
    _key("message.max.bytes", _INT, 1048588, at_least(0),
         "Default of max.message.bytes; also the cleaner's largest I/O buffer."),
    _key("log.preallocate", _BOOL, False, None, "Default of preallocate."),
    _key("compression.type", _STR, "producer", OneOf(_COMPRESSION_TYPES), "Default of compression.type."),
    _key("compression.gzip.level", _INT, -1, _GZIP_LEVEL, "Default of compression.gzip.level."),
    _key("compression.lz4.level", _INT, 9, _LZ4_LEVEL, "Default of compression.lz4.level."),
    _key("compression.zstd.level", _INT, 3, _ZSTD_LEVEL, "Default of compression.zstd.level."),
    _key("unclean.leader.election.enable", _BOOL, False, None, "Default of unclean.leader.election.enable."),
    _key("min.insync.replicas", _INT, 1, at_least(1), "Default of min.insync.replicas."),
    _key("log.local.retention.ms", _LONG, -2, at_least(-2), "Default of local.retention.ms."),
    _key("log.local.retention.bytes", _LONG, -2, at_least(-2), "Default of local.retention.bytes."),
    # broker-only
    _key("log.dirs", _LIST, None, DirList(), "Log directories; wins over log.dir."),
    _key("log.dir", _LIST, ("/tmp/kafka-logs",), DirList(), "Log directory used when log.dirs is unset."),
    _key("log.retention.check.interval.ms", _LONG, 300000, at_least(1), "Period of the retention task."),
    _key("log.flush.offset.checkpoint.interval.ms", _INT, 60000, at_least(0),
         "Period of the recovery-point checkpoint."),
    _key("log.flush.start.offset.checkpoint.interval.ms", _INT, 60000, at_least(0),
         "Period of the log-start-offset checkpoint."),
    _key("replica.high.watermark.checkpoint.interval.ms", _LONG, 5000, None,
         "Period of the high-watermark (replication-offset) checkpoint."),
    _key("num.recovery.threads.per.data.dir", _INT, 2, at_least(1),
         "Threads per log dir for loading and closing logs."),
    _key("log.initial.task.delay.ms", _LONG, 30000, at_least(0),
         "Delay before the first run of retention, flush and checkpoint tasks."),
    _key("log.dir.failure.timeout.ms", _LONG, 30000, at_least(1),
         "How long a failed log dir may go unreported before the broker stops."),
    _key("num.partitions", _INT, 1, at_least(1), "Partitions of an automatically created topic."),
    _key("auto.create.topics.enable", _BOOL, True, None, "Create topics on first use."),
    _key("log.cleaner.enable", _BOOL, True, None,
         "Run the cleaner; if false compacted logs are neither compacted nor deleted (deprecated in 4.1)."),
    _key("log.cleaner.threads", _INT, 1, at_least(0), "Cleaner threads."),
    _key("log.cleaner.dedupe.buffer.size", _LONG, 134217728, None,
         "Offset-map memory, in bytes, summed over all cleaner threads."),
    _key("log.cleaner.io.buffer.load.factor", _DOUBLE, 0.9, None, "Maximum fill ratio of the offset map."),
    _key("log.cleaner.io.buffer.size", _INT, 524288, at_least(0),
         "Read plus write buffer memory, summed over all cleaner threads."),
    _key("log.cleaner.io.max.bytes.per.second", _DOUBLE, DOUBLE_MAX, None,
         "Throttle of the cleaner's read plus write I/O."),
    _key("log.cleaner.backoff.ms", _LONG, 15000, at_least(0), "Cleaner sleep when nothing was cleanable."),
    # the Kafka-protocol server's keys (tidelog.server.config parses the listener syntax)
    _key("listeners", _STR, "PLAINTEXT://127.0.0.1:9092", None,
         "Comma-separated NAME://host:port the server listens on (loopback only by default)."),
    _key("advertised.listeners", _STR, "", None, "NAME://host:port told to clients, per listener name."),
    _key("listener.security.protocol.map", _STR, "", None, "NAME:PROTOCOL pairs (a name is its protocol by default)."),
    _key("socket.request.max.bytes", _INT, 104857600, at_least(1),
         "Largest request size prefix accepted; a larger one closes the connection."),
    _key("queued.max.request.bytes", _LONG, 209715200, None,
         "Bytes of requests being received or handled at once, over every connection; beyond it the broker "
         "stops reading request bodies until some are done (<= 0: unbounded, Kafka's default -1). At least "
         "socket.request.max.bytes when set; frames up to 64 KiB do not count."),
    _key("fetch.max.bytes", _INT, 57671680, at_least(1024),  # Kafka's minimum
         "Most bytes of records one Fetch response holds (min with the request's max_bytes); the first "
         "batch is returned whole even when larger."),
    _key("producer.id.expiration.ms", _INT, 86400000, at_least(1),
         "Inactivity after which a producer id expires; until then the cleaner keeps its last batch."),
    _key("producer.id.expiration.check.interval.ms", _INT, 600000, at_least(1),
         "Period of each log's check for expired producer ids."),
    # tidelog-only keys (Kafka has none of these; a Kafka broker ignores them with a warning)
    _key("tidelog.cleaner.engine", _STR, "in-process", OneOf(CLEANER_ENGINES),
         "tidelog only: where the log cleaner dedupes and rewrites: in-process (this process's cleaner "
         "threads) or spark (a Spark job per pass; needs pyspark, the 'spark' extra). Same bytes either way."),
    _key("tidelog.cleaner.spark.master", _STR, "local[2]", None,
         "tidelog only: the Spark master URL of the spark cleaner engine (executors must see the log dirs)."),
    _key("tidelog.produce.decompression.memory.bytes", _LONG, 67108864, at_least(1 << 20),
         "tidelog only: decompressed records Produce validation may hold at once, over every connection. "
         "A compressed batch reserves what max.message.bytes allows it uncompressed (at most all of this) "
         "before it is decompressed; beyond it, produces of compressed batches wait their turn. At least 1 MiB."),
    # the group coordinator's keys (tidelog.server.groups)
    _key("group.initial.rebalance.delay.ms", _INT, 3000, at_least(0),
         "How long the first rebalance of an empty group waits for more members to join."),
    _key("group.min.session.timeout.ms", _INT, 6000, at_least(0), "Smallest session timeout a member may ask for."),
    _key("group.max.session.timeout.ms", _INT, 1800000, at_least(0), "Largest session timeout a member may ask for."),
    _key("group.max.size", _INT, 2147483647, at_least(1), "Most members one classic group may hold."),
    _key("offsets.topic.num.partitions", _INT, 50, at_least(1),
         "Partitions of __consumer_offsets when it is created (a group's partition is hash(group) mod this)."),
    _key("offsets.topic.segment.bytes", _INT, 104857600, at_least(1), "segment.bytes of __consumer_offsets."),
    _key("offsets.retention.minutes", _INT, 10080, at_least(1),
         "How long the committed offsets of an empty group are kept after it emptied (or after the commit)."),
    _key("offsets.retention.check.interval.ms", _LONG, 600000, at_least(1), "Period of the offsets expiration task."),
    # security of the server's listeners (tidelog.server.security); secrets (ssl.key.password,
    # ssl.keystore.key, ssl.keystore.certificate.chain, ssl.truststore.certificates) stay untyped so
    # DescribeConfigs never shows them
    _key("ssl.keystore.type", _STR, "JKS", OneOf(("JKS", "PKCS12", "PEM")),
         "Format of the TLS listeners' keystore; tidelog serves PEM only."),
    _key("ssl.keystore.location", _STR, None, None,
         "PEM file holding the TLS listeners' private key and certificate chain."),
    _key("ssl.truststore.type", _STR, "JKS", OneOf(("JKS", "PKCS12", "PEM")),
         "Format of the truststore that verifies client certificates; tidelog reads PEM only."),
    _key("ssl.truststore.location", _STR, None, None,
         "PEM file of the CA certificates trusted for client certificates."),
    _key("ssl.client.auth", _STR, "none", OneOf(("required", "requested", "none")),
         "Whether TLS listeners ask clients for a certificate: required, requested or none."),
    _key("ssl.enabled.protocols", _LIST, ("TLSv1.2", "TLSv1.3"), EachOneOf(("TLSv1.2", "TLSv1.3")),
         "TLS versions the TLS listeners accept."),
    _key("sasl.enabled.mechanisms", _LIST, ("GSSAPI",), None,
         "SASL mechanisms of SASL listeners; tidelog serves PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512."),
    _key("sasl.server.max.receive.size", _INT, 524288, at_least(1),
         "Largest request accepted before a SASL client has authenticated; a larger one closes the connection."),
    # connection limits of the server (tidelog.server.server, tidelog.server.connection)
    _key("connections.max.idle.ms", _LONG, 600000, None,
         "A connection with no request for this long is closed (negative: never)."),
    _key("max.connections", _INT, 2147483647, at_least(0),
         "Most client connections open at once, over every listener (listener.name.<name>.max.connections: "
         "per listener); beyond it a new connection is closed as soon as it is accepted."),
    _key("max.connections.per.ip", _INT, 2147483647, at_least(0),
         "Most connections open at once from one IP address; beyond it a new one from there is closed."),
    _key("max.connections.per.ip.overrides", _STR, "", None,
         "Comma-separated host:count (IP or host name) overriding max.connections.per.ip for those hosts."),
)

BROKER_CONFIGS: Mapping[str, ConfigKey] = MappingProxyType({key.name: key for key in _BROKER_KEYS})

_TIMESTAMP_REPLACEMENT = "use {0}message.timestamp.before.max.ms and {0}message.timestamp.after.max.ms instead"
_FORMAT_GONE = "the v2 record format is always used (KIP-724)"
_DOWNCONVERSION_GONE = "brokers no longer down-convert records (KIP-724)"
REMOVED_CONFIGS: Mapping[str, str] = MappingProxyType({
    "message.timestamp.difference.max.ms": _TIMESTAMP_REPLACEMENT.format(""),
    "log.message.timestamp.difference.max.ms": _TIMESTAMP_REPLACEMENT.format("log."),
    "message.format.version": _FORMAT_GONE,
    "log.message.format.version": _FORMAT_GONE,
    "message.downconversion.enable": _DOWNCONVERSION_GONE,
    "log.message.downconversion.enable": _DOWNCONVERSION_GONE,
})


def check_not_removed(name: str) -> None:
    """Raise :class:`ConfigError` if ``name`` is a key Kafka 4.0 removed, naming the replacement."""
    if name in REMOVED_CONFIGS:
        raise ConfigError(f"Config {name} was removed in Kafka 4.0: {REMOVED_CONFIGS[name]}", config=name)


def check_topic_config_names(names: Iterable[str]) -> None:
    """Raise :class:`ConfigError` for the first removed or unknown topic config name."""
    for name in names:
        check_not_removed(name)
        if name not in TOPIC_CONFIGS:
            raise ConfigError(f"Unknown topic config name: {name}", config=name)


# --- broker config -------------------------------------------------------------------------

class _Setting(Generic[T]):
    """Typed read-only attribute of :class:`BrokerConfig` backed by one broker key."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, obj: None, owner: type) -> _Setting[T]: ...

    @overload
    def __get__(self, obj: BrokerConfig, owner: type) -> T: ...

    def __get__(self, obj: BrokerConfig | None, owner: type) -> T | _Setting[T]:
        return self if obj is None else obj.get(self.name)


@dataclass(frozen=True, slots=True)
class BrokerConfig:
    """A broker's static configuration: known keys typed and validated, unknown keys kept as text.

    ``explicit`` holds the known keys that were set; :meth:`get` falls back to the default.
    Topic-level defaults are resolved by :meth:`topic_default` / :meth:`log_config`.
    """

    explicit: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    unknown: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    log_retention_check_interval_ms = _Setting[int]("log.retention.check.interval.ms")
    log_flush_scheduler_interval_ms = _Setting[int]("log.flush.scheduler.interval.ms")
    log_flush_offset_checkpoint_interval_ms = _Setting[int]("log.flush.offset.checkpoint.interval.ms")
    log_flush_start_offset_checkpoint_interval_ms = _Setting[int]("log.flush.start.offset.checkpoint.interval.ms")
    replica_high_watermark_checkpoint_interval_ms = _Setting[int]("replica.high.watermark.checkpoint.interval.ms")
    num_recovery_threads_per_data_dir = _Setting[int]("num.recovery.threads.per.data.dir")
    log_initial_task_delay_ms = _Setting[int]("log.initial.task.delay.ms")
    log_dir_failure_timeout_ms = _Setting[int]("log.dir.failure.timeout.ms")
    num_partitions = _Setting[int]("num.partitions")
    auto_create_topics_enable = _Setting[bool]("auto.create.topics.enable")
    message_max_bytes = _Setting[int]("message.max.bytes")
    listeners = _Setting[str]("listeners")
    advertised_listeners = _Setting[str]("advertised.listeners")
    listener_security_protocol_map = _Setting[str]("listener.security.protocol.map")
    socket_request_max_bytes = _Setting[int]("socket.request.max.bytes")
    log_cleaner_enable = _Setting[bool]("log.cleaner.enable")
    log_cleaner_threads = _Setting[int]("log.cleaner.threads")
    log_cleaner_dedupe_buffer_size = _Setting[int]("log.cleaner.dedupe.buffer.size")
    log_cleaner_io_buffer_load_factor = _Setting[float]("log.cleaner.io.buffer.load.factor")
    log_cleaner_io_buffer_size = _Setting[int]("log.cleaner.io.buffer.size")
    log_cleaner_io_max_bytes_per_second = _Setting[float]("log.cleaner.io.max.bytes.per.second")
    log_cleaner_backoff_ms = _Setting[int]("log.cleaner.backoff.ms")
    producer_id_expiration_ms = _Setting[int]("producer.id.expiration.ms")
    producer_id_expiration_check_interval_ms = _Setting[int]("producer.id.expiration.check.interval.ms")
    tidelog_cleaner_engine = _Setting[str]("tidelog.cleaner.engine")
    tidelog_cleaner_spark_master = _Setting[str]("tidelog.cleaner.spark.master")

    @classmethod
    def from_properties(cls, props: Mapping[str, object]) -> BrokerConfig:
        """Parse and validate; raises :class:`ConfigError` naming the key and value."""
        explicit: dict[str, Any] = {}
        unknown: dict[str, str] = {}
        for name, raw in props.items():
            check_not_removed(name)
            key = BROKER_CONFIGS.get(name)
            if key is None:
                unknown[name] = raw if isinstance(raw, str) else str(raw)
            else:
                explicit[name] = key.parse(raw)
        config = cls(MappingProxyType(explicit), MappingProxyType(unknown))
        config._validate()
        return config

    def _validate(self) -> None:
        """What only the whole config can break, found at load time: no log dir, a synonym that
        breaks its topic config's rule, or derived compaction lags in conflict."""
        _ = self.log_dirs
        defaults = {key.name: self.topic_default(key)[0] for key in TOPIC_CONFIGS.values()}
        _check_compaction_lags(defaults["min.compaction.lag.ms"], defaults["max.compaction.lag.ms"])

    @classmethod
    def load(cls, path: Path, overrides: Mapping[str, object] | None = None) -> BrokerConfig:
        """Read a ``server.properties`` file; ``overrides`` (e.g. ``--override k=v``) win over it."""
        props: dict[str, object] = dict(read_properties_file(path))
        props.update(overrides or {})
        try:
            return cls.from_properties(props)
        except ConfigError as e:
            raise ConfigError(e.message, path=path, **e.context) from e

    def get(self, name: str) -> Any:
        """Typed value of a known key (explicit or default), or the text of an unknown key present."""
        if name in self.explicit:
            return self.explicit[name]
        if name in BROKER_CONFIGS:
            return BROKER_CONFIGS[name].default
        if name in self.unknown:
            return self.unknown[name]
        raise ConfigError(f"Unknown broker config name: {name}", config=name)

    def is_set(self, name: str) -> bool:
        return name in self.explicit or name in self.unknown

    @property
    def log_dirs(self) -> list[str]:
        """``log.dirs`` if set (even to nothing), else ``log.dir``; never empty."""
        dirs = self.get("log.dirs") if self.is_set("log.dirs") else self.get("log.dir")
        if not dirs:
            raise ConfigError("At least one log directory must be defined via log.dirs or log.dir", config="log.dirs")
        return list(dirs)

    def topic_default(self, key: ConfigKey) -> tuple[Any, str | None]:
        """The broker-level value of topic config ``key`` and the broker key that supplied it
        (None when it is the built-in default). First synonym that is set wins."""
        for synonym in key.synonyms:
            if synonym.name in self.explicit:
                return self._converted(key, synonym), synonym.name
        return key.default, None

    def _converted(self, key: ConfigKey, synonym: Synonym) -> Any:
        raw = self.explicit[synonym.name]
        value = raw * synonym.ms_per_unit if synonym.ms_per_unit != 1 else raw
        if key.negative_means_unlimited and value < 0:
            value = -1
        try:
            return key.parse(value)
        except ConfigError as e:
            raise invalid_value(synonym.name, raw, f"{getattr(e, 'reason', e.message)} (as {key.name})") from e

    def log_config(self, overrides: Mapping[str, object] | None = None) -> LogConfig:
        """This broker's defaults for a topic, with ``overrides`` applied."""
        return LogConfig.from_props(self, overrides)


# --- topic config --------------------------------------------------------------------------

def _default(name: str) -> Any:
    return TOPIC_CONFIGS[name].default


@dataclass(frozen=True, slots=True)
class LogConfig:
    """Effective configuration of one topic's logs; every value validated at construction.

    Build with :meth:`from_props` (broker defaults + topic overrides), :meth:`defaults`, or
    :meth:`with_overrides`. Direct construction also validates and normalizes (a
    ``cleanup_policy`` string becomes a frozenset). ``overridden`` names the topic-level keys
    that were set explicitly (what gets persisted and what ``describe`` reports as TOPIC_CONFIG);
    it does not take part in equality.
    """

    segment_bytes: int = _default("segment.bytes")
    segment_ms: int = _default("segment.ms")
    segment_jitter_ms: int = _default("segment.jitter.ms")
    segment_index_bytes: int = _default("segment.index.bytes")
    index_interval_bytes: int = _default("index.interval.bytes")
    retention_bytes: int = _default("retention.bytes")
    retention_ms: int = _default("retention.ms")
    cleanup_policy: frozenset[str] = _default("cleanup.policy")
    min_cleanable_dirty_ratio: float = _default("min.cleanable.dirty.ratio")
    min_compaction_lag_ms: int = _default("min.compaction.lag.ms")
    max_compaction_lag_ms: int = _default("max.compaction.lag.ms")
    delete_retention_ms: int = _default("delete.retention.ms")
    file_delete_delay_ms: int = _default("file.delete.delay.ms")
    flush_messages: int = _default("flush.messages")
    flush_ms: int = _default("flush.ms")
    message_timestamp_type: str = _default("message.timestamp.type")
    message_timestamp_before_max_ms: int = _default("message.timestamp.before.max.ms")
    message_timestamp_after_max_ms: int = _default("message.timestamp.after.max.ms")
    max_message_bytes: int = _default("max.message.bytes")
    preallocate: bool = _default("preallocate")
    compression_type: str = _default("compression.type")
    compression_gzip_level: int = _default("compression.gzip.level")
    compression_lz4_level: int = _default("compression.lz4.level")
    compression_zstd_level: int = _default("compression.zstd.level")
    unclean_leader_election_enable: bool = _default("unclean.leader.election.enable")
    min_insync_replicas: int = _default("min.insync.replicas")
    leader_replication_throttled_replicas: tuple[str, ...] = _default("leader.replication.throttled.replicas")
    follower_replication_throttled_replicas: tuple[str, ...] = _default("follower.replication.throttled.replicas")
    remote_storage_enable: bool = _default("remote.storage.enable")
    local_retention_ms: int = _default("local.retention.ms")
    local_retention_bytes: int = _default("local.retention.bytes")
    remote_log_copy_disable: bool = _default("remote.log.copy.disable")
    remote_log_delete_on_disable: bool = _default("remote.log.delete.on.disable")
    overridden: frozenset[str] = field(default=frozenset(), compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "overridden", frozenset(self.overridden))
        check_topic_config_names(self.overridden)
        for key in TOPIC_CONFIGS.values():
            object.__setattr__(self, key.attribute, key.parse(getattr(self, key.attribute)))
        _check_compaction_lags(self.min_compaction_lag_ms, self.max_compaction_lag_ms)

    @classmethod
    def defaults(cls) -> LogConfig:
        """Built-in defaults, no broker, no overrides."""
        return cls()

    @classmethod
    def from_props(
        cls, broker: BrokerConfig | Mapping[str, str] | None = None, overrides: Mapping[str, object] | None = None
    ) -> LogConfig:
        """Topic override > broker synonyms (first set wins) > default, for every topic config.

        ``broker`` may be raw ``server.properties`` keys. ``overrides`` are topic-level keys
        (strings or typed values); unknown or removed ones raise :class:`ConfigError`.
        """
        broker_config = broker if isinstance(broker, BrokerConfig) else _broker_from_mapping(broker or {})
        overrides = overrides or {}
        values = {
            key.attribute: overrides[key.name] if key.name in overrides else broker_config.topic_default(key)[0]
            for key in TOPIC_CONFIGS.values()
        }
        return cls(**values, overridden=frozenset(overrides))

    def with_overrides(self, overrides: Mapping[str, object] | None = None, /, **attributes: object) -> LogConfig:
        """A copy with topic-level overrides, given by Kafka name and/or as snake_case keywords:
        ``config.with_overrides({"segment.bytes": "1024"}, retention_ms=-1)``."""
        changes = dict(overrides or {})
        for attribute, value in attributes.items():
            changes[attribute.replace("_", ".")] = value
        check_topic_config_names(changes)
        fields = {TOPIC_CONFIGS[name].attribute: value for name, value in changes.items()}
        overridden = self.overridden | changes.keys()
        return dataclasses.replace(self, **fields, overridden=overridden)  # type: ignore[arg-type]

    def to_properties(self) -> dict[str, str]:
        """Every topic config as Kafka strings, keyed by Kafka name."""
        return {key.name: key.format(getattr(self, key.attribute)) for key in TOPIC_CONFIGS.values()}

    def overrides_as_properties(self) -> dict[str, str]:
        """Only the topic-level overrides, as Kafka strings: what a topic's config file persists."""
        return {name: value for name, value in self.to_properties().items() if name in self.overridden}

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def delete(self) -> bool:
        return "delete" in self.cleanup_policy

    @property
    def max_segment_ms(self) -> int:
        """Roll age: ``min(segment.ms, max.compaction.lag.ms)`` for compacted topics, else ``segment.ms``."""
        if self.compact and self.max_compaction_lag_ms > 0:
            return min(self.segment_ms, self.max_compaction_lag_ms)
        return self.segment_ms

    @property
    def init_file_size(self) -> int:
        """Initial length of a new ``.log`` file: ``segment.bytes`` when preallocating, else 0."""
        return self.segment_bytes if self.preallocate else 0

    def random_segment_jitter(self, rng: _random.Random | None = None) -> int:
        """Kafka's per-segment jitter: ``abs(random int32) % min(segment.jitter.ms, segment.ms)``, or 0."""
        if self.segment_jitter_ms == 0:
            return 0
        draw = (rng or _random).randint(INT32_MIN, INT32_MAX)
        magnitude = 0 if draw == INT32_MIN else abs(draw)  # Kafka's Utils.abs maps MIN_VALUE to 0
        return magnitude % min(self.segment_jitter_ms, self.segment_ms)


def _check_compaction_lags(min_lag_ms: int, max_lag_ms: int) -> None:
    """Raise :class:`ConfigError` if ``min.compaction.lag.ms`` > ``max.compaction.lag.ms``."""
    if min_lag_ms > max_lag_ms:
        raise ConfigError(
            f"conflict topic config setting min.compaction.lag.ms ({min_lag_ms}) > "
            f"max.compaction.lag.ms ({max_lag_ms})",
            config="min.compaction.lag.ms",
        )


def _broker_from_mapping(props: Mapping[str, object]) -> BrokerConfig:
    """Raw broker properties; a topic-only key here is a caller mix-up, not a broker setting."""
    for name in props:
        if name in TOPIC_CONFIGS and name not in BROKER_CONFIGS:
            raise ConfigError(f"{name} is a topic config, not a broker config: pass it in overrides", config=name)
    return BrokerConfig.from_properties(props)


# --- describe ------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class ConfigSynonym:
    name: str
    value: str
    source: ConfigSource


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    """One row of ``configs describe``: effective value, where it came from, and all synonyms
    in precedence order (Kafka's DescribeConfigs with ``include_synonyms``)."""

    name: str
    value: str
    source: ConfigSource
    synonyms: tuple[ConfigSynonym, ...]
    doc: str


def describe(config: LogConfig, broker: BrokerConfig | None = None) -> list[ConfigEntry]:
    """Every topic config of ``config``, sorted by name, with its source and synonyms."""
    return [_describe_key(config, key, broker) for key in sorted(TOPIC_CONFIGS.values(), key=lambda k: k.name)]


def _describe_key(config: LogConfig, key: ConfigKey, broker: BrokerConfig | None) -> ConfigEntry:
    value = key.format(getattr(config, key.attribute))
    synonyms = [ConfigSynonym(key.name, value, ConfigSource.TOPIC_CONFIG)] if key.name in config.overridden else []
    synonyms += _broker_synonyms(key, broker)
    if not key.synonyms:
        synonyms.append(ConfigSynonym(key.name, key.format(key.default), ConfigSource.DEFAULT_CONFIG))
    return ConfigEntry(key.name, value, synonyms[0].source, tuple(synonyms), key.doc)


def _broker_synonyms(key: ConfigKey, broker: BrokerConfig | None) -> list[ConfigSynonym]:
    found: list[ConfigSynonym] = []
    for synonym in key.synonyms:
        broker_key = BROKER_CONFIGS[synonym.name]
        if broker is not None and synonym.name in broker.explicit:
            found.append(ConfigSynonym(synonym.name, broker_key.format(broker.explicit[synonym.name]),
                                       ConfigSource.STATIC_BROKER_CONFIG))
        if broker_key.default is not None:
            found.append(ConfigSynonym(synonym.name, broker_key.format(broker_key.default),
                                       ConfigSource.DEFAULT_CONFIG))
    return found
