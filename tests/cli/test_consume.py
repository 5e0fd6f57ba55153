"""``tidelog consume``: records printed back up to the high watermark, kafka-console-consumer's
start rules (latest by default; out-of-range offsets reset to latest), both formats, base64."""

from __future__ import annotations

import base64
from pathlib import Path

import orjson
import pytest
from test_produce import create_topic, jsonl, open_manager, run

from tidelog.records import build_end_txn_marker_batch
from tidelog.storage.append_info import AppendOrigin
from tidelog.topic_partition import TopicPartition


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    """Topic ``t`` with 2 partitions: p0 holds a, b, c (timestamps 100, 200, 300) and p1 holds d (400)."""
    path = tmp_path / "data"
    create_topic(path, "t", 2)
    stdin = jsonl(*({"value": v, "timestamp": ts, "partition": p}
                    for v, ts, p in (("a", 100, 0), ("b", 200, 0), ("c", 300, 0), ("d", 400, 1))))
    assert run(path, "produce", "t", "--format", "json", "--batch-size", "2", stdin=stdin)[0] == 0
    return path


def consume(data_dir: Path, *args: str) -> tuple[int, list[str], str]:
    code, out, err = run(data_dir, "consume", "t", *args)
    return code, out.decode().splitlines(), err


def test_default_start_is_latest_so_existing_records_are_not_printed(data_dir: Path) -> None:
    assert consume(data_dir) == (0, [], "Processed a total of 0 messages\n")


def test_from_beginning_prints_every_partition_in_order(data_dir: Path) -> None:
    code, lines, err = consume(data_dir, "--from-beginning")
    assert (code, lines, err) == (0, ["a", "b", "c", "d"], "Processed a total of 4 messages\n")


def test_one_partition_from_an_offset_inside_a_batch(data_dir: Path) -> None:
    assert consume(data_dir, "--partition", "0", "--offset", "1")[1] == ["b", "c"]
    assert consume(data_dir, "--partition", "0", "--offset", "earliest")[1] == ["a", "b", "c"]
    assert consume(data_dir, "--partition", "0", "--offset", "latest")[1] == []


def test_offset_out_of_range_resets_to_latest_like_the_console_consumer(data_dir: Path) -> None:
    code, lines, err = consume(data_dir, "--partition", "0", "--offset", "99")
    assert code == 0 and lines == []
    assert "offset 99 is out of range [0, 3] for t-0: starting at the latest offset 3" in err


def test_offset_below_the_log_start_resets_to_latest(data_dir: Path) -> None:
    with open_manager(data_dir) as manager:
        manager.delete_records(TopicPartition("t", 0), 2)
    code, lines, err = consume(data_dir, "--partition", "0", "--offset", "0")
    assert lines == [] and "offset 0 is out of range [2, 3]" in err
    assert consume(data_dir, "--partition", "0", "--from-beginning")[1] == ["c"]


def test_offset_needs_a_partition_and_excludes_other_starts(data_dir: Path) -> None:
    code, _, err = consume(data_dir, "--offset", "1")
    assert code == 2 and "The partition is required when offset is specified." in err
    code, _, err = consume(data_dir, "--partition", "0", "--offset", "1", "--from-beginning")
    assert code == 2 and "cannot be specified together" in err
    code, _, err = consume(data_dir, "--partition", "0", "--offset", "-1")
    assert code == 2 and "expected a non-negative offset" in err


def test_timestamp_starts_at_the_first_record_at_or_after_it(data_dir: Path) -> None:
    assert consume(data_dir, "--timestamp", "150")[1] == ["b", "c", "d"]
    assert consume(data_dir, "--timestamp", "301")[1] == ["d"]
    assert consume(data_dir, "--timestamp", "401")[1] == []


def test_max_messages_stops_across_partitions(data_dir: Path) -> None:
    code, lines, err = consume(data_dir, "--from-beginning", "--max-messages", "2")
    assert lines == ["a", "b"] and err == "Processed a total of 2 messages\n"
    assert consume(data_dir, "--from-beginning", "--max-messages", "3")[1] == ["a", "b", "c"]


def test_unknown_topic_or_partition_is_an_error(data_dir: Path) -> None:
    code, _, err = run(data_dir, "consume", "nope", "--from-beginning")
    assert code == 1 and err.startswith("error: unknown topic 'nope'")
    code, _, err = consume(data_dir, "--partition", "5")
    assert code == 1 and err.startswith("error: topic 't' has no partition 5")


def test_json_output_round_trips_what_was_produced(tmp_path: Path) -> None:
    path = tmp_path / "data"
    create_topic(path, "t", 3)
    produced = [{"key": f"k{i}", "value": f"v{i}", "timestamp": 1000 + i, "headers": {"h": str(i)}} for i in range(20)]
    produced.append({"key": "tomb", "value": None, "timestamp": 5, "headers": {"a": "1", "b": None}})
    assert run(path, "produce", "t", "--format", "json", stdin=jsonl(*produced))[0] == 0
    code, out, _ = run(path, "consume", "t", "--from-beginning", "--format", "json")
    items = [orjson.loads(line) for line in out.splitlines()]
    assert code == 0 and {item["topic"] for item in items} == {"t"}
    assert all(item["timestampType"] == "CreateTime" for item in items)
    fields = ("key", "value", "timestamp", "headers")
    assert sorted((tuple(str(i[f]) for f in fields) for i in items)) == \
        sorted(tuple(str(p[f]) for f in fields) for p in produced)
    # the consumer's lines can be produced again: topic, offset and timestampType are ignored
    create_topic(path, "copy", 3)
    assert run(path, "produce", "copy", "--format", "json", stdin=out)[0] == 0
    copied = [orjson.loads(line) for line in run(path, "consume", "copy", "--from-beginning", "--format", "json")[1].splitlines()]
    assert [{k: v for k, v in i.items() if k != "topic"} for i in copied] == \
        [{k: v for k, v in i.items() if k != "topic"} for i in items]


def test_binary_data_base64_and_raw_text(tmp_path: Path) -> None:
    path = tmp_path / "data"
    create_topic(path, "t")
    raw = bytes(range(256))
    stdin = jsonl({"key": base64.b64encode(b"\xfe").decode(), "value": base64.b64encode(raw).decode()})
    assert run(path, "produce", "t", "--format", "json", "--encoding", "base64", stdin=stdin)[0] == 0
    code, out, _ = run(path, "consume", "t", "--from-beginning", "--format", "json", "--encoding", "base64")
    item = orjson.loads(out)
    assert (base64.b64decode(item["key"]), base64.b64decode(item["value"])) == (b"\xfe", raw)
    assert run(path, "consume", "t", "--from-beginning")[1] == raw + b"\n"  # text: the raw bytes
    assert run(path, "consume", "t", "--from-beginning", "--encoding", "base64")[1] == base64.b64encode(raw) + b"\n"
    code, _, err = run(path, "consume", "t", "--from-beginning", "--format", "json")
    assert code == 1 and "not valid UTF-8" in err and "--encoding base64" in err and "offset=0" in err


def test_json_output_prints_the_records_before_one_that_is_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "data"
    create_topic(path, "t")
    run(path, "produce", "t", stdin=b"fine\n")
    run(path, "produce", "t", "--encoding", "base64", stdin=base64.b64encode(b"\xff") + b"\n")
    code, out, err = run(path, "consume", "t", "--from-beginning", "--format", "json")
    assert code == 1 and err.startswith("error: a key, value or header is not valid UTF-8") and "offset=1" in err
    assert [orjson.loads(line)["value"] for line in out.splitlines()] == ["fine"]


def test_tombstones_print_null(tmp_path: Path) -> None:
    path = tmp_path / "data"
    create_topic(path, "t")
    run(path, "produce", "t", "--format", "json", stdin=jsonl({"key": "k", "value": None}, {"value": "x"}))
    assert run(path, "consume", "t", "--from-beginning")[1] == b"null\nx\n"


def test_control_batches_are_skipped(tmp_path: Path) -> None:
    path = tmp_path / "data"
    create_topic(path, "t")
    run(path, "produce", "t", stdin=b"before\n")
    with open_manager(path) as manager:
        marker = build_end_txn_marker_batch(commit=True, producer_id=7, producer_epoch=0, coordinator_epoch=0,
                                            timestamp=1)
        manager.append(TopicPartition("t", 0), marker, origin=AppendOrigin.COORDINATOR)
    run(path, "produce", "t", stdin=b"after\n")
    code, out, err = run(path, "consume", "t", "--from-beginning", "--format", "json")
    assert [orjson.loads(line)["offset"] for line in out.splitlines()] == [0, 2]
    assert err == "Processed a total of 2 messages\n"
