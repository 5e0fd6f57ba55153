"""Input lines to record columns, columns to v2 record bytes, records to output lines.

The JSON fast path (the kernel) must give exactly what the orjson path gives for every line it
takes, and hand every other line to orjson: Hypothesis generates lines of both kinds, and both
twins of the kernels run.
"""

from __future__ import annotations

import base64
import json

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidelog.cli import record_io
from tidelog.cli.record_io import (
    InputProblem,
    ParsedRecords,
    encode_headers,
    encode_records,
    format_json,
    format_text,
    get_kernels,
    parse_json_chunk,
    parse_json_lines,
    parse_text_lines,
    split_lines,
)
from tidelog.errors import RecordOutputError
from tidelog.records.record import encode_record

NOW = 1_700_000_000_000
TWINS = [pytest.param(True, id="python"), pytest.param(False, id="numba")]


def records_of(parsed: ParsedRecords) -> list[tuple]:
    """(line, key, value, headers bytes, timestamp, partition) per record, from the columns."""
    out = []
    positions = {"key": 0, "value": 0, "headers": 0}

    def take(name: str, data: bytes, length: int) -> bytes | None:
        if length < 0:
            return None
        start = positions[name]
        positions[name] += length
        return data[start:start + length]

    for i in range(len(parsed)):
        out.append((int(parsed.lines[i]), take("key", parsed.key_data, int(parsed.key_len[i])),
                    take("value", parsed.value_data, int(parsed.value_len[i])),
                    take("headers", parsed.header_data, int(parsed.header_len[i]) or -1),
                    int(parsed.timestamps[i]), int(parsed.partitions[i])))
    return out


def json_lines(*objects: object) -> list[bytes]:
    return [obj if isinstance(obj, bytes) else orjson.dumps(obj) for obj in objects]


# --- JSON input ------------------------------------------------------------------------------

def test_json_every_field() -> None:
    line = {"key": "k", "value": "v", "timestamp": 42, "headers": {"h1": "a", "h2": None}, "partition": 1}
    (record,) = records_of(parse_json_lines(json_lines(line), 1, NOW, 3))
    assert record == (1, b"k", b"v", encode_headers({"h1": "a", "h2": None}), 42, 1)
    assert record[3] == b"\x04\x04h1\x02a\x04h2\x01"  # count 2, "h1"="a", "h2"=null


def test_json_missing_and_null_fields() -> None:
    parsed = parse_json_lines(json_lines({}, {"key": None, "value": None, "timestamp": None, "partition": None,
                                              "headers": None}), 7, NOW, 2)
    assert records_of(parsed) == [(7, None, None, None, NOW, -1), (8, None, None, None, NOW, -1)]


def test_json_headers_as_pairs_keep_repeated_keys_and_empty_headers_are_none() -> None:
    parsed = parse_json_lines(json_lines({"headers": [["a", "1"], ["a", None]]}, {"headers": {}},
                                         {"headers": []}), 1, NOW, 1)
    assert [r[3] for r in records_of(parsed)] == [b"\x04\x02a\x021\x02a\x01", None, None]


def test_json_utf8_strings_and_escapes() -> None:
    line = b'{"key": "\\u00e9\xc3\xa9", "value": "tab\\there \\"q\\" \\ud83d\\ude00"}'
    (record,) = records_of(parse_json_lines([line], 1, NOW, 1))
    assert record[1] == "éé".encode() and record[2] == 'tab\there "q" 😀'.encode()


def test_json_fields_of_consume_output_are_ignored() -> None:
    line = {"topic": "other", "partition": 0, "offset": 99, "timestamp": 5, "timestampType": "CreateTime",
            "key": "k", "value": "v", "headers": {}}
    assert records_of(parse_json_lines(json_lines(line), 1, NOW, 1)) == [(1, b"k", b"v", None, 5, 0)]


def test_json_blank_lines_are_skipped_but_counted() -> None:
    parsed = parse_json_lines([b"", b'{"value":"a"}', b"   ", b'{"value":"b"}'], 1, NOW, 1)
    assert [(r[0], r[2]) for r in records_of(parsed)] == [(2, b"a"), (4, b"b")] and parsed.problem is None


@pytest.mark.parametrize(("bad", "message"), [
    (b'{"value": "x"', "invalid JSON"),
    (b"[1, 2]", "expected a JSON object"),
    (b'"just a string"', "expected a JSON object"),
    (b'{"valeu": "x"}', "unknown field 'valeu'"),
    (b'{"key": 5}', '"key" must be a string or null, got 5'),
    (b'{"value": {"a": 1}}', '"value" must be a string or null'),
    (b'{"timestamp": -1}', '"timestamp" must be a non-negative int64'),
    (b'{"timestamp": 1.5}', '"timestamp" must be a non-negative int64'),
    (b'{"timestamp": true}', '"timestamp" must be a non-negative int64'),
    (b'{"timestamp": 9223372036854775808}', '"timestamp" must be a non-negative int64'),
    (b'{"partition": 3}', '"partition" must be an integer in [0, 3)'),
    (b'{"partition": "1"}', '"partition" must be an integer'),
    (b'{"headers": "h"}', '"headers" must be an object or a list'),
    (b'{"headers": {"h": 1}}', "a header must be a [string, string|null] pair"),
    (b'{"headers": [["h"]]}', "a header must be a [string, string|null] pair"),
    (b'{"key": "\\ud800"}', "invalid JSON"),
])
def test_json_bad_line_stops_parsing_and_names_the_line(bad: bytes, message: str) -> None:
    lines = [b'{"value": "first"}', b"", bad, b'{"value": "after"}']
    parsed = parse_json_lines(lines, 10, NOW, 3)
    assert parsed.problem is not None and parsed.problem.line == 12
    assert message in parsed.problem.message
    assert [r[2] for r in records_of(parsed)] == [b"first"]


def test_json_the_earliest_of_several_bad_lines_wins() -> None:
    lines = json_lines({"value": "ok"}, {"partition": 9}, {"key": 1}, b"{")
    parsed = parse_json_lines(lines, 1, NOW, 2)
    assert parsed.problem == InputProblem(2, parsed.problem.message) and len(parsed) == 1


def test_json_base64_encoding_decodes_keys_values_and_header_values() -> None:
    line = {"key": base64.b64encode(b"\x00\xff").decode(), "value": base64.b64encode(b"\x80").decode(),
            "headers": {"h": base64.b64encode(b"\x01").decode()}}
    (record,) = records_of(parse_json_lines(json_lines(line), 1, NOW, 1, "base64"))
    assert record[1:4] == (b"\x00\xff", b"\x80", b"\x02\x02h\x02\x01")
    bad = parse_json_lines(json_lines({"value": "not base64!"}), 1, NOW, 1, "base64")
    assert bad.problem is not None and "value is not valid base64" in bad.problem.message


# --- the JSON fast path ------------------------------------------------------------------------

@pytest.mark.parametrize("pure", TWINS)
def test_fast_path_takes_common_lines_and_leaves_the_rest_to_orjson(pure: bool) -> None:
    data = b"\n".join(json_lines(
        {"key": "k", "value": "v", "timestamp": 3, "partition": 1},
        b' { "value" : null ,"key":null } \r',
        {"headers": {"h": "x"}},  # not taken: non-empty headers
        {"value": "after"}))
    fast, stop = record_io.scan_json(data, 1, NOW, 2, get_kernels(pure))
    assert len(fast) == 2 and data[stop:].startswith(b'{"headers"')
    assert records_of(parse_json_chunk(data, 1, NOW, 2, kernels=get_kernels(pure))) == \
        records_of(parse_json_lines(split_lines(data), 1, NOW, 2))


json_text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)
field_values = {
    "key": st.one_of(st.none(), json_text), "value": st.one_of(st.none(), json_text),
    "timestamp": st.one_of(st.none(), st.integers(0, 2**63 - 1), st.integers(-5, -1), st.floats(0, 10)),
    "partition": st.one_of(st.none(), st.integers(-1, 4)), "topic": st.one_of(st.none(), json_text),
    "offset": st.one_of(st.none(), st.integers(0, 10**20)),
    "timestampType": st.sampled_from(["CreateTime", None]),
    "headers": st.one_of(st.none(), st.just({}), st.just([]), st.dictionaries(json_text, json_text, max_size=2)),
    "other": st.integers(),
}
json_objects = st.fixed_dictionaries({}, optional=field_values)


def render(obj: dict, style: int) -> bytes:
    """The object as JSON in one of several spellings (compact, spaced, ASCII-escaped)."""
    if style == 0:
        return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()
    if style == 1:
        return json.dumps(obj, separators=(" , ", " :  ")).encode()
    return (" " + json.dumps(obj, ensure_ascii=True) + "\t").encode()


lines_strategy = st.lists(st.one_of(
    st.tuples(json_objects, st.integers(0, 2)).map(lambda t: render(*t)),
    st.sampled_from([b"", b"   ", b"{", b"{}", b'{"key": tru}', b'{"key":"a",}', b'{"key":"a"}x', b"null",
                     b'{"key": "\\ud800"}', b'{"key": "\xff"}', b'{"key": "\xed\xa0\x80"}', b'{"value": "\x01"}',
                     b'{"key": "a", "key": "b"}', b'{"k\\u0065y": "a"}', b'{"timestamp": 01}'])),
    min_size=1, max_size=8)


@settings(max_examples=300, deadline=None)
@given(lines=lines_strategy)
def test_fast_path_equals_the_orjson_path_on_any_lines(lines: list[bytes]) -> None:
    data = b"\n".join(lines)
    expected = parse_json_lines(split_lines(data), 1, NOW, 3)
    for pure in (True, False):
        got = parse_json_chunk(data, 1, NOW, 3, kernels=get_kernels(pure))
        assert records_of(got) == records_of(expected)
        assert got.problem == expected.problem


def test_every_kernel_function_is_compiled_exactly_once() -> None:
    from tidelog.cli import _record_kernels as kernels

    functions = {name for name, value in vars(kernels).items()
                 if callable(value) and getattr(value, "__module__", None) == kernels.__name__}
    listed = [*kernels.NUMBA_INLINED, *kernels.NUMBA_HELPERS, *kernels.NUMBA_KERNELS]
    assert sorted(listed) == sorted(functions)


# --- text input -----------------------------------------------------------------------------

def test_text_lines_are_values_and_an_empty_line_an_empty_value() -> None:
    parsed = parse_text_lines(split_lines(b"a\r\n\nc\xff"), 5, NOW, None)
    assert records_of(parsed) == [(5, None, b"a", None, NOW, -1), (6, None, b"", None, NOW, -1),
                                  (7, None, b"c\xff", None, NOW, -1)]


def test_text_key_separator_splits_at_the_first_one() -> None:
    parsed = parse_text_lines([b"k1:v:1", b":empty key", b"k3:"], 1, NOW, b":")
    assert [(r[1], r[2]) for r in records_of(parsed)] == [(b"k1", b"v:1"), (b"", b"empty key"), (b"k3", b"")]


def test_text_line_without_the_separator_is_an_error_naming_it() -> None:
    parsed = parse_text_lines([b"a\tb", b"no separator", b"c\td"], 3, NOW, b"\t")
    assert parsed.problem == InputProblem(4, "no key separator '\\t' found on the line: 'no separator'")
    assert [r[2] for r in records_of(parsed)] == [b"b"]


def test_text_base64_lines() -> None:
    parsed = parse_text_lines([b"AP8=", b"a2V5:dmFs"], 1, NOW, None, "base64")
    assert parsed.problem is not None and parsed.problem.line == 2  # "a2V5:dmFs" is not base64
    keyed = parse_text_lines([b"a2V5:dmFs"], 1, NOW, b":", "base64")
    assert [r[1:3] for r in records_of(keyed)] == [(b"key", b"val")]
    assert records_of(parsed)[0][2] == b"\x00\xff"


# --- encoding records -------------------------------------------------------------------------

@pytest.mark.parametrize("pure", TWINS)
def test_encoded_records_equal_tidelogs_record_encoder(pure: bool) -> None:
    lines = json_lines({"key": "k1", "value": "v1"}, {"headers": {"a": "b", "c": None}, "timestamp": 5},
                       {"key": "é", "value": "x" * 300}, {"key": "", "value": ""})
    parsed = parse_json_lines(lines, 1, NOW, 1)
    offset_delta = np.array([0, 1, 0, 2])
    ts_delta = np.array([0, -(2**61), 3, 2**61])
    order = np.array([2, 0, 1, 3])
    data, ends = encode_records(parsed, offset_delta, ts_delta, order, get_kernels(pure))
    expected = [encode_record(0, 3, "é".encode(), b"x" * 300), encode_record(0, 0, b"k1", b"v1"),
                encode_record(1, -(2**61), None, None, [("a", b"b"), ("c", None)]),
                encode_record(2, 2**61, b"", b"")]
    assert data == b"".join(expected)
    assert ends.tolist() == np.cumsum([len(e) for e in expected]).tolist()


# --- output ---------------------------------------------------------------------------------

def test_text_output_is_the_raw_value_or_null() -> None:
    assert format_text((0, 1, b"k", b"v\xff", ())) == b"v\xff\n"
    assert format_text((0, 1, b"k", None, ())) == b"null\n"
    assert format_text((0, 1, None, b"\x00", ()), "base64") == b"AA==\n"


def test_json_output_fields_and_nulls() -> None:
    line = format_json("t", 2, "CreateTime", (7, 123, None, b"v", (("h", b"x"), ("n", None))))
    assert orjson.loads(line) == {"topic": "t", "partition": 2, "offset": 7, "timestamp": 123,
                                  "timestampType": "CreateTime", "key": None, "value": "v",
                                  "headers": {"h": "x", "n": None}}
    assert line.endswith(b"\n")


def test_json_output_repeated_header_keys_become_pairs() -> None:
    item = orjson.loads(format_json("t", 0, "CreateTime", (0, 0, b"k", b"v", (("a", b"1"), ("a", b"2")))))
    assert item["headers"] == [["a", "1"], ["a", "2"]]


def test_json_output_base64() -> None:
    item = orjson.loads(format_json("t", 0, "LogAppendTime", (0, 0, b"\xff", b"\x00", (("h", b"\x80"),)), "base64"))
    assert (item["key"], item["value"], item["headers"]) == ("/w==", "AA==", {"h": "gA=="})


def test_json_output_of_invalid_utf8_is_an_error_naming_the_offset() -> None:
    with pytest.raises(RecordOutputError, match=r"not valid UTF-8.*--encoding base64.*offset=9"):
        format_json("t", 1, "CreateTime", (9, 0, None, b"\xff", ()))
