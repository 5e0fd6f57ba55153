"""Kafka's ``ConfigDef`` for tidelog: config types, value parsing, validators and :class:`ConfigKey`.

Values are parsed the Kafka way (``ConfigDef.parseType``): strings are trimmed; INT/LONG are
Java decimal integers (optional sign, ASCII digits) that must fit int32/int64; DOUBLE is a Java
decimal float; BOOLEAN is ``true``/``false`` in any case; LIST is comma separated with the
whitespace around commas dropped (an empty string is the empty list). Already-typed Python
values are accepted too (``segment_bytes=1024``). Errors are :class:`~tidelog.errors.ConfigError`
with Kafka's wording: ``Invalid value -5 for configuration segment.bytes: Value must be at least 14``.

String validators (:class:`OneOf`, :class:`EachOneOf`) accept any letter case and return Kafka's
spelling (Kafka's validators are case-sensitive).
"""

from __future__ import annotations

import enum
import math
import re
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit
from decimal import Decimal
from typing import Any, Protocol

from tidelog.errors import ConfigError
from tidelog.records.varint import INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN

DOUBLE_MAX = 1.7976931348623157e308

MS_PER_MINUTE = 60_000
MS_PER_HOUR = 3_600_000


class ConfigType(enum.Enum):
    INT = "INT"
    LONG = "LONG"
    DOUBLE = "DOUBLE"
    BOOLEAN = "BOOLEAN"
    STRING = "STRING"
    LIST = "LIST"


def invalid_value(name: str, raw: object, reason: str, *, shown_name: str | None = None) -> ConfigError:
    """Kafka's ``ConfigException(name, value, reason)`` text as a :class:`ConfigError`; ``reason``
    is also kept as an attribute (not in the rendered context: the message already says it).
    ``shown_name``: the name the message gives, when it is not the key reported as ``config``
    (a topic config's rule broken by its broker synonym)."""
    error = ConfigError(f"Invalid value {_show(raw)} for configuration {shown_name or name}: {reason}",
                        config=name, value=raw)
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


@dataclass(frozen=True, slots=True)
class NonEmptyString:
    """A string with at least one non-blank character (Kafka's ``ConfigDef.NonEmptyString``)."""

    def validate(self, name: str, value: Any, raw: object) -> Any:
        if not value.strip():
            raise invalid_value(name, raw, "String may not be empty")
        return value

    def describe(self) -> str:
        return "non-empty string"


@dataclass(frozen=True, slots=True)
class UriScheme:
    """Empty (unset) or a URI whose scheme is one of ``schemes`` (any case). The error shows the
    value without its user info (``user:secret@``), which may hold credentials."""

    schemes: tuple[str, ...]

    def validate(self, name: str, value: Any, raw: object) -> Any:
        if value and urlsplit(value).scheme.lower() not in self.schemes:
            raise invalid_value(name, without_user_info(value),
                                f"the URI's scheme must be one of {', '.join(self.schemes)}")
        return value

    def describe(self) -> str:
        return f"empty or a URI of scheme {', '.join(self.schemes)}"


def without_user_info(uri: str) -> str:
    """``uri`` with any ``user:password@`` dropped from its authority, for messages."""
    parts = urlsplit(uri)
    if "@" not in parts.netloc:
        return uri
    return urlunsplit(parts._replace(netloc="***@" + parts.netloc.rpartition("@")[2]))


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
    field_name: str | None = None  # the LogConfig field when not the snake_case name
    sensitive: bool = False  # may carry a secret: DescribeConfigs hides its value (Kafka's PASSWORD type)

    @property
    def attribute(self) -> str:
        """The attribute holding the configured value: ``field_name`` if given, else the
        snake_case name (``segment.bytes`` → ``segment_bytes``)."""
        return self.field_name or self.name.replace(".", "_")

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

