"""Records in and out of the CLI: input lines to record columns, columns to v2 record bytes, and
records to output lines.

**Input** (``tidelog produce``), one record per line (``\\n``; a ``\\r`` before it is dropped, as
Java's ``readLine`` does for ``\\r\\n``):

* ``text``: the line is the value (an empty line is an empty value, as kafka-console-producer);
  with a key separator, ``key SEP value`` split at the first separator, and a line without one is
  an error (kafka-console-producer's ``parse.key``). Bytes are taken as they are, not decoded.
* ``json``: one object per line, every field optional::

      {"key": str|null, "value": str|null, "timestamp": ms, "headers": {str: str|null}, "partition": int}

  A null or missing value is a tombstone; a missing timestamp is the time of reading; headers may
  also be a list of ``[key, value]`` pairs (repeated keys). The fields ``topic``, ``offset`` and
  ``timestampType`` that ``tidelog consume --format json`` prints are accepted and ignored, so its
  output can be produced again; any other field is an error. Blank lines are skipped.

With ``base64`` encoding, keys, values and header values (JSON) or keys and values (text) are
base64 and decoded before writing; otherwise JSON strings are written as UTF-8.
Parsing stops at the first bad line: the records before it are returned with an
:class:`InputProblem` naming the line (1-based, counting every line read).

JSON takes one of two paths, with the same results (a property test holds them equal): a
kernel (:func:`scan_json`) decodes lines of the common shape straight into the columns, and the
first line it does not take, with the rest of its chunk, goes through orjson, column by column
(:func:`parse_json_lines`: C-level ``map``/``join`` over the parsed objects, a per-record scan
only to find a bad record). The kernel costs about a third as much per line.

**Encoding**: :func:`encode_records` writes the records of many batches in one kernel call,
in the v2 record layout of :mod:`tidelog.records.record`, through :mod:`tidelog.records.encode`
(shared with the Spark sink). The JSON kernel is in :mod:`tidelog.cli._record_kernels`; both
have a numba and an interpreted twin from one source (as :mod:`tidelog.records.scan`), chosen at
import (``TIDELOG_PURE_PYTHON=1`` forces the interpreted one).

**Output** (``tidelog consume``): ``text`` writes each value's raw bytes and a newline (``null``
for a null value), as kafka-console-consumer's ``DefaultMessageFormatter``: nothing is decoded.
``json`` writes one object per record with keys, values and header values as UTF-8 strings (or
base64 with ``--encoding base64``); a key or value that is not valid UTF-8 is an error naming
the partition and offset (a JSON consumer must not receive silently altered data).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import cache
from itertools import repeat
from typing import IO, Any, Protocol

import numpy as np
import orjson

from tidelog import twins
from tidelog.cli import _record_kernels as _k
from tidelog.errors import RecordOutputError
from tidelog.records import encode
from tidelog.records.encode import record_size_bounds
from tidelog.records.varint import INT64_MAX, zigzag_bytes

JSON_FIELDS = frozenset({"key", "value", "timestamp", "headers", "partition", "topic", "offset", "timestampType"})
UTF8 = "utf8"
BASE64 = "base64"


@dataclass(frozen=True, slots=True)
class InputProblem:
    """Why parsing stopped: the 1-based line number and what is wrong with it."""

    line: int
    message: str


@dataclass(slots=True)
class ParsedRecords:
    """Columns of the records parsed from a run of lines, in input order (int64 numpy columns).

    ``key_data``/``value_data``/``header_data`` hold the non-null entries back to back; the
    ``*_len`` columns say how many bytes each record's entry takes (-1: null key or value; 0: no
    headers). A header entry is an encoded headers section (count varint, then the entries).
    ``partitions`` is -1 where the record names none. ``problem`` is set when parsing stopped at a
    bad line; the columns then hold the records of the lines before it.
    """

    lines: np.ndarray
    key_data: bytes
    key_len: np.ndarray
    value_data: bytes
    value_len: np.ndarray
    header_data: bytes
    header_len: np.ndarray
    timestamps: np.ndarray
    partitions: np.ndarray
    problem: InputProblem | None = None

    def __len__(self) -> int:
        return len(self.lines)

    def sizes(self) -> np.ndarray:
        """Upper bounds of each record's encoded size."""
        return record_size_bounds(self.key_len, self.value_len, self.header_len)


_Column = Sequence[Any]


class _Cut:
    """The earliest bad record found so far: columns are cut before it."""

    def __init__(self, count: int) -> None:
        self.index = count
        self.message = ""

    def at(self, index: int | None, message: str) -> None:
        if index is not None and index < self.index:
            self.index, self.message = index, message


def _first(column: _Column, bad: Callable[[Any], bool]) -> int | None:
    return next((i for i, item in enumerate(column) if bad(item)), None)


@dataclass(frozen=True, slots=True)
class _BytesColumn:
    """Non-null items back to back, and each item's length (-1 for None)."""

    data: bytes
    lengths: np.ndarray

    @classmethod
    def of(cls, items: _Column) -> _BytesColumn:
        if None not in items:
            return cls(b"".join(items), np.fromiter(map(len, items), np.int64, len(items)))
        lengths = np.fromiter((-1 if item is None else len(item) for item in items), np.int64, len(items))
        return cls(b"".join(item for item in items if item is not None), lengths)

    def head(self, count: int) -> _BytesColumn:
        """The first ``count`` items."""
        if count >= len(self.lengths):
            return self
        lengths = self.lengths[:count]
        return _BytesColumn(self.data[:int(np.maximum(lengths, 0).sum())], lengths)


def _records(numbers: _Column, keys: _BytesColumn | None, values: _BytesColumn, headers: _BytesColumn | None,
             timestamps: _Column | int, partitions: _Column | int, problem: InputProblem | None) -> ParsedRecords:
    n = len(numbers)
    keys = keys or _BytesColumn(b"", np.full(n, -1, np.int64))
    headers = headers or _BytesColumn(b"", np.zeros(n, np.int64))
    header_len = np.maximum(headers.lengths, 0)
    stamps, parts = (np.full(n, column, np.int64) if isinstance(column, int) else np.asarray(column, np.int64)
                     for column in (timestamps, partitions))
    return ParsedRecords(np.asarray(numbers, np.int64), keys.data, keys.lengths, values.data, values.lengths,
                         headers.data, header_len, stamps, parts, problem)


# --- input: text ---------------------------------------------------------------------------------

def split_lines(data: bytes) -> list[bytes]:
    """Lines of ``data`` (no trailing terminator expected), each without its ``\\n``/``\\r\\n``."""
    lines = data.split(b"\n")
    if b"\r" in data:
        lines = [line[:-1] if line.endswith(b"\r") else line for line in lines]
    return lines


def parse_text_lines(lines: Sequence[bytes], first_line: int, now: int, key_separator: bytes | None,
                     encoding: str = UTF8) -> ParsedRecords:
    """Records from text lines: values, or ``key SEP value`` when ``key_separator`` is given."""
    numbers = range(first_line, first_line + len(lines))
    if key_separator is None:
        keys, values, cut = None, list(lines), _Cut(len(lines))
    else:
        keys, values, cut = _split_keys(lines, key_separator)
    if encoding == BASE64:
        keys, values = _decode_base64_columns(keys, values, cut)
    problem = None if cut.index == len(lines) else InputProblem(numbers[cut.index], cut.message)
    i = cut.index
    return _records(numbers[:i], None if keys is None else _BytesColumn.of(keys[:i]), _BytesColumn.of(values[:i]),
                    None, now, -1, problem)


def _split_keys(lines: Sequence[bytes], separator: bytes) -> tuple[list[bytes], list[bytes], _Cut]:
    parts = [line.partition(separator) for line in lines]
    cut = _Cut(len(lines))
    missing = _first(parts, lambda part: not part[1])
    if missing is not None:
        shown = lines[missing].decode("utf-8", "replace")
        cut.at(missing, f"no key separator {separator.decode('utf-8', 'replace')!r} found on the line: {shown!r}")
    return [part[0] for part in parts], [part[2] for part in parts], cut


def _decode_base64_columns(keys: list[Any] | None, values: list[Any], cut: _Cut) -> tuple[list[Any] | None, list[Any]]:
    """Base64-decode both columns up to the cut, moving the cut to the first undecodable item."""
    decoded = []
    for name, column in (("key", keys), ("value", values)):
        if column is None:
            decoded.append(None)
            continue
        out: list[bytes | None] = []
        for index, item in enumerate(column[:cut.index]):
            try:
                out.append(None if item is None else _unbase64(item, name))
            except _BadField as bad:
                cut.at(index, str(bad))
                break
        decoded.append(out)
    return decoded[0], decoded[1]  # type: ignore[return-value]


class _BadField(Exception):
    """A field of one input line is invalid (turned into an InputProblem)."""


def _unbase64(data: str | bytes, name: str) -> bytes:
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError) as e:
        raise _BadField(f"{name} is not valid base64: {e}") from None


# --- input: JSON ---------------------------------------------------------------------------------

def parse_json_lines(lines: Sequence[bytes], first_line: int, now: int, num_partitions: int,
                     encoding: str = UTF8) -> ParsedRecords:
    """Records from JSON lines (see the module doc); stops at the first bad line.

    Column-wise: the lines are parsed by orjson, then each field is extracted, checked and
    encoded for all records at once (C-level ``map``/``join``); a per-record scan runs only to
    find the first bad record once a column-wide check has failed.
    """
    objects, numbers, problem = _load_objects(lines, first_line)
    cut = _Cut(len(objects))
    if set(map(type, objects)) - {dict}:
        cut.at(_first(objects, lambda o: type(o) is not dict), "expected a JSON object")
        objects = objects[:cut.index]
    present = set().union(*objects)
    if not present <= JSON_FIELDS:
        index = _first(objects, lambda o: not o.keys() <= JSON_FIELDS)
        if index is not None:
            unknown = sorted(objects[index].keys() - JSON_FIELDS)
            cut.at(index, f"unknown field {unknown[0]!r}; the fields are {', '.join(sorted(JSON_FIELDS))}")
    columns = {name: list(map(dict.get, objects, repeat(name))) if name in present else None
               for name in ("key", "value", "timestamp", "partition", "headers")}
    _check_columns(columns, num_partitions, cut)
    b64 = encoding == BASE64
    keys, values = (_strings_to_bytes(columns[name], name, b64, cut) for name in ("key", "value"))
    headers = _header_column(columns["headers"], b64, cut)
    if cut.index < len(numbers) and (problem is None or numbers[cut.index] < problem.line):
        problem = InputProblem(numbers[cut.index], cut.message)
    i = cut.index
    return _records(numbers[:i], keys and keys.head(i), values.head(i) if values else _null_column(i),
                    headers and headers.head(i), _fill(columns["timestamp"], i, now),
                    _fill(columns["partition"], i, -1), problem)


def _null_column(count: int) -> _BytesColumn:
    return _BytesColumn(b"", np.full(count, -1, np.int64))


def _fill(column: list[Any] | None, count: int, default: int) -> list[int] | int:
    """The first ``count`` items with None replaced by ``default`` (just ``default`` when absent)."""
    if column is None:
        return default
    return [default if item is None else item for item in column[:count]]


def _check_columns(columns: dict[str, list[Any] | None], num_partitions: int, cut: _Cut) -> None:
    for name in ("key", "value"):
        _check_types(columns[name], (str,), f'"{name}" must be a string or null', cut)
    _check_ints(columns["timestamp"], 0, INT64_MAX, '"timestamp" must be a non-negative int64 (ms) or null', cut)
    _check_ints(columns["partition"], 0, num_partitions - 1,
                f'"partition" must be an integer in [0, {num_partitions}) (the topic\'s partitions) or null', cut)


def _load_objects(lines: Sequence[bytes], first_line: int) -> tuple[list[Any], Sequence[int], InputProblem | None]:
    """Every line parsed; on a blank or bad line, the slow path: blank lines are skipped and
    parsing stops at the first invalid one."""
    try:
        return list(map(orjson.loads, lines)), range(first_line, first_line + len(lines)), None
    except orjson.JSONDecodeError:
        pass
    objects, numbers = [], []
    for number, line in enumerate(lines, first_line):
        try:
            objects.append(orjson.loads(line))
            numbers.append(number)
        except orjson.JSONDecodeError as e:
            if line.strip():
                return objects, numbers, InputProblem(number, f"invalid JSON: {e}")
    return objects, numbers, None


def _check_types(column: list[Any] | None, types_: tuple[type, ...], message: str, cut: _Cut) -> None:
    allowed = {*types_, type(None)}
    if column is not None and not set(map(type, column)) <= allowed:
        index = _first(column, lambda item: type(item) not in allowed)
        cut.at(index, f"{message}, got {column[index]!r}" if index is not None else message)


def _check_ints(column: list[Any] | None, low: int, high: int, message: str, cut: _Cut) -> None:
    if column is None:
        return
    _check_types(column, (int,), message, cut)
    ints = [item for item in column[:cut.index] if item is not None]
    if ints and (min(ints) < low or max(ints) > high):
        index = _first(column, lambda item: item is not None and not low <= item <= high)
        cut.at(index, f"{message}, got {column[index]!r}" if index is not None else message)


def _header_column(column: list[Any] | None, b64: bool, cut: _Cut) -> _BytesColumn | None:
    """Encoded header sections up to the cut (None when no record has headers)."""
    if column is None or not any(column):
        return None
    headers: list[bytes | None] = []
    for index, item in enumerate(column[:cut.index]):
        try:
            headers.append(encode_headers(item, b64) if item else None)
        except _BadField as bad:
            cut.at(index, str(bad))
            break
    return _BytesColumn.of(headers)


def _strings_to_bytes(column: list[str | None] | None, name: str, b64: bool, cut: _Cut) -> _BytesColumn | None:
    """UTF-8 (or base64-decoded) bytes of each string up to the cut; one encode for an all-ASCII
    column. None for an absent column."""
    if column is None:
        return None
    column = column[:cut.index]
    if not b64:
        has_null = None in column
        strings = [item for item in column if item is not None] if has_null else column
        joined = "".join(strings)  # type: ignore[arg-type]
        if joined.isascii():
            lengths = (np.fromiter((-1 if item is None else len(item) for item in column), np.int64, len(column))
                       if has_null else np.fromiter(map(len, column), np.int64, len(column)))  # type: ignore[arg-type]
            return _BytesColumn(joined.encode("ascii"), lengths)
    out: list[bytes | None] = []
    for index, item in enumerate(column):
        try:
            out.append(None if item is None else _string_bytes(item, name, b64))
        except _BadField as bad:
            cut.at(index, str(bad))
            break
    return _BytesColumn.of(out)


def _string_bytes(item: str, name: str, b64: bool) -> bytes:
    if b64:
        return _unbase64(item, name)
    try:
        return item.encode()
    except UnicodeEncodeError as e:  # a lone surrogate escape such as "\ud800"
        raise _BadField(f'"{name}" is not valid Unicode: {e.reason}') from None


def _json_type(obj: object) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(obj), "a number")


def encode_headers(headers: object, b64: bool = False) -> bytes:
    """The headers section of a v2 record (count varint, then key/value entries) from a JSON
    ``{key: value}`` object or a list of ``[key, value]`` pairs; values may be null."""
    if isinstance(headers, dict):
        pairs: Iterable[Any] = headers.items()
    elif isinstance(headers, list):
        pairs = headers
    else:
        raise _BadField(f'"headers" must be an object or a list of [key, value] pairs, got {_json_type(headers)}')
    parts = []
    count = 0
    for pair in pairs:
        if not (isinstance(pair, (list, tuple)) and len(pair) == 2 and type(pair[0]) is str
                and (pair[1] is None or type(pair[1]) is str)):
            raise _BadField(f"a header must be a [string, string|null] pair, got {pair!r}")
        key = _string_bytes(pair[0], "header key", False)
        value = None if pair[1] is None else _string_bytes(pair[1], "header value", b64)
        parts += [zigzag_bytes(len(key)), key]
        parts += [b"\x01"] if value is None else [zigzag_bytes(len(value)), value]
        count += 1
    return zigzag_bytes(count) + b"".join(parts)


# --- the kernels: one source (_record_kernels), compiled or interpreted --------------------------

class RecordKernels(Protocol):
    """The contract of both twins of :mod:`tidelog.cli._record_kernels` and how each takes its
    buffers and columns: numpy arrays (numba) or memoryviews and lists (interpreted). Records are
    encoded by the twin of :mod:`tidelog.records.encode` of the same name."""

    name: str  # "numba" or "python"

    def buffer(self, data: bytes) -> Any:
        """``data`` as the kernels read it (no copy)."""

    def output(self, size: int) -> Any:
        """A fresh writable byte buffer of ``size`` bytes."""

    def column(self, values: np.ndarray) -> Any:
        """A numpy int64 column as the kernels take it."""

    def scan_json_lines(self, *args: Any) -> int:
        """See :func:`tidelog.cli._record_kernels.scan_json_lines`."""


@dataclass(frozen=True, slots=True)
class _Twin:
    scan_json_lines: Callable[..., int]
    name: str

    def buffer(self, data: bytes) -> Any:
        return np.frombuffer(data, np.uint8) if self.name == "numba" else memoryview(data)

    def output(self, size: int) -> Any:
        return np.empty(size, np.uint8) if self.name == "numba" else bytearray(size)

    def column(self, values: np.ndarray) -> Any:
        values = np.asarray(values, np.int64)
        return np.ascontiguousarray(values) if self.name == "numba" else values.tolist()


def _compile() -> _Twin:
    namespace = twins.compile_functions(vars(_k), _k.NUMBA_INLINED, _k.NUMBA_HELPERS + _k.NUMBA_KERNELS,
                                        _k.NUMBA_OPTIONS)
    return _Twin(namespace["scan_json_lines"], "numba")


@cache
def get_kernels(pure: bool) -> RecordKernels:
    """The interpreted twin (``pure=True``) or the numba one (ImportError without numba)."""
    return _Twin(_k.scan_json_lines, "python") if pure else _compile()


_ACTIVE: RecordKernels = twins.choose(get_kernels)
ACTIVE_IMPLEMENTATION: str = _ACTIVE.name


def encode_records(parsed: ParsedRecords, offset_delta: np.ndarray, ts_delta: np.ndarray, order: np.ndarray,
                   kernels: RecordKernels | None = None) -> tuple[bytes, np.ndarray]:
    """The records of ``parsed`` in the order ``order``, each with its offset and timestamp delta
    (|delta| < 2**62), back to back: ``(bytes, ends)`` where ``ends[j]`` is the byte after the
    j-th written record."""
    twin = None if kernels is None else encode.get_kernels(kernels.name == "python")
    return encode.encode_records(parsed.key_data, parsed.key_len, parsed.value_data, parsed.value_len,
                                 parsed.header_data, parsed.header_len, offset_delta, ts_delta, order, twin)


def scan_json(data: bytes, first_line: int, now: int, num_partitions: int,
              kernels: RecordKernels | None = None, line_count: int | None = None) -> tuple[ParsedRecords, int]:
    """The fast path over the lines of ``data`` (``line_count`` of them, when the caller counted):
    the records of the lines it takes, and the byte position of the first line it does not take
    (``len(data)`` when it took every line)."""
    k = kernels or _ACTIVE
    lines = data.count(b"\n") + 1 if line_count is None else line_count
    key_out, val_out = k.output(len(data)), k.output(len(data))
    columns = [k.column(np.zeros(lines, np.int64)) for _ in range(4)]
    state = k.column(np.zeros(4, np.int64))
    taken = k.scan_json_lines(k.buffer(data), len(data), num_partitions, key_out, columns[0], val_out, columns[1],
                              columns[2], columns[3], k.column(np.zeros(4, np.int64)), state)
    key_len, val_len, stamps, partitions = (np.asarray(column, np.int64)[:taken] for column in columns)
    records = ParsedRecords(
        np.arange(first_line, first_line + taken, dtype=np.int64), bytes(key_out[:state[2]]), key_len,
        bytes(val_out[:state[3]]), val_len, b"", np.zeros(taken, np.int64), np.where(stamps < 0, now, stamps),
        partitions)
    return records, int(state[1])


def parse_json_chunk(data: bytes, first_line: int, now: int, num_partitions: int, encoding: str = UTF8,
                     kernels: RecordKernels | None = None, line_count: int | None = None) -> ParsedRecords:
    """Records from the JSON lines of ``data``: the kernel's fast path takes the common lines, and
    :func:`parse_json_lines` (orjson) the rest of the chunk from the first line it does not take."""
    if encoding == BASE64:
        return parse_json_lines(split_lines(data), first_line, now, num_partitions, encoding)
    fast, stop = scan_json(data, first_line, now, num_partitions, kernels, line_count)
    if stop >= len(data):
        return fast
    rest = parse_json_lines(split_lines(data[stop:]), first_line + len(fast), now, num_partitions, encoding)
    return concat(fast, rest)


def concat(first: ParsedRecords, second: ParsedRecords) -> ParsedRecords:
    """The records of ``first`` then ``second``, with ``second``'s problem."""
    if not len(first):
        return second
    joined = [np.concatenate((a, b)) for a, b in (
        (first.lines, second.lines), (first.key_len, second.key_len), (first.value_len, second.value_len),
        (first.header_len, second.header_len), (first.timestamps, second.timestamps),
        (first.partitions, second.partitions))]
    lines, key_len, value_len, header_len, stamps, partitions = joined
    return ParsedRecords(lines, first.key_data + second.key_data, key_len, first.value_data + second.value_data,
                         value_len, first.header_data + second.header_data, header_len, stamps, partitions,
                         second.problem)


# --- output --------------------------------------------------------------------------------------

RecordTuple = tuple[int, int, "bytes | None", "bytes | None", "tuple[tuple[str, bytes | None], ...]"]


def format_text(record: RecordTuple, encoding: str = UTF8) -> bytes:
    """The value's raw bytes (base64 with ``base64`` encoding), ``null`` for a tombstone, and a newline."""
    value = record[3]
    if value is None:
        return b"null\n"
    return (base64.b64encode(value) if encoding == BASE64 else bytes(value)) + b"\n"


def format_json(topic: str, partition: int, timestamp_type: str, record: RecordTuple,
                encoding: str = UTF8) -> bytes:
    """One JSON line: topic, partition, offset, timestamp, timestampType, key, value, headers.

    ``headers`` is an object, or a list of ``[key, value]`` pairs when a header key repeats.
    RecordOutputError when, without base64, a key or value is not valid UTF-8.
    """
    offset, timestamp, key, value, headers = record
    show = _show_base64 if encoding == BASE64 else _show_utf8
    try:
        item = {"topic": topic, "partition": partition, "offset": offset, "timestamp": timestamp,
                "timestampType": timestamp_type, "key": show(key), "value": show(value),
                "headers": _headers_json(headers, show)}
    except UnicodeDecodeError as e:
        raise RecordOutputError(
            f"a key, value or header is not valid UTF-8 ({e.reason} at byte {e.start}); use --encoding base64",
            topic_partition=f"{topic}-{partition}", offset=offset) from None
    return orjson.dumps(item) + b"\n"


def _show_utf8(data: bytes | None) -> str | None:
    return None if data is None else bytes(data).decode("utf-8")


def _show_base64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode("ascii")


def _headers_json(headers: Sequence[tuple[str, bytes | None]], show: Callable[[bytes | None], str | None]) -> Any:
    # Header keys are decoded with surrogateescape by the record reader: re-check them as UTF-8.
    pairs = [(key.encode("utf-8", "surrogateescape").decode("utf-8"), show(value)) for key, value in headers]
    as_object = dict(pairs)
    return as_object if len(as_object) == len(pairs) else [list(pair) for pair in pairs]


def binary(stream: IO[str]) -> IO[bytes]:
    """The byte stream under a text stream such as ``sys.stdin`` (the stream itself when it has none)."""
    return getattr(stream, "buffer", stream)  # type: ignore[return-value]
