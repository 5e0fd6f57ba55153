"""``tidelog produce``: stdin to batches in the log, end to end through ``main`` on a temp data dir.

What is checked in the log itself: which partition each record landed in (Kafka's default
partitioner), batch boundaries and codecs, and, for every kind of bad input, the contract that
the records of the lines before the bad one are written and nothing from it on.
Helpers here (``run``, ``create_topic``, ``read_records``) are shared with the consume and offsets tests.
"""

from __future__ import annotations

import base64
import os
import random
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import orjson
import pytest

from tests.cli_helpers import run_cli
from tidelog.cli.produce import IDLE, ConsoleProducer, ProduceOptions, iter_line_chunks, run_producer
from tidelog.manager import LogManager
from tidelog.partitioner import partition_for_key
from tidelog.records import CompressionType, FileBatch, Record, iter_batches
from tidelog.storage.config import BrokerConfig
from tidelog.storage.fetch_info import FetchIsolation
from tidelog.testing import FakeClock
from tidelog.topic_partition import TopicPartition


# --- helpers (shared with test_consume and test_offsets) ----------------------------------------

def run(data_dir: Path, *args: str, stdin: bytes = b"") -> tuple[int, bytes, str]:
    """``tidelog --data-dir DATA_DIR ARGS`` with ``stdin``: (exit code, stdout bytes, stderr)."""
    return run_cli(data_dir, *args, stdin=stdin)


@contextmanager
def open_manager(data_dir: Path) -> Iterator[LogManager]:
    manager = LogManager.open(BrokerConfig.from_properties({}), [data_dir])
    try:
        yield manager
    finally:
        manager.shutdown()


def create_topic(data_dir: Path, name: str, partitions: int = 1, **configs: str) -> None:
    with open_manager(data_dir) as manager:
        manager.create_topic(name, partitions, {k.replace("_", "."): v for k, v in configs.items()})


def read_batches(data_dir: Path, topic: str) -> dict[int, list[FileBatch]]:
    """partition -> its batches (copied out of the log, so they outlive the manager)."""
    out: dict[int, list[FileBatch]] = {}
    with open_manager(data_dir) as manager:
        for p in manager.partitions(topic):
            log = manager.log(TopicPartition(topic, p))
            data = log.read(log.log_start_offset, 1 << 30, FetchIsolation.LOG_END).records if log.log_end_offset else b""
            out[p] = [batch for _, batch in iter_batches(bytes(data))]
    return out


def read_records(data_dir: Path, topic: str) -> dict[int, list[Record]]:
    return {p: [r for b in batches for r in b.records()] for p, batches in read_batches(data_dir, topic).items()}


def values(records: dict[int, list[Record]]) -> list[bytes | None]:
    """Every value, partition by partition."""
    return [r.value for p in sorted(records) for r in records[p]]


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


def jsonl(*objects: object) -> bytes:
    return b"".join(orjson.dumps(o) + b"\n" for o in objects)


# --- text --------------------------------------------------------------------------------------

def test_text_lines_become_values_in_one_batch(data_dir: Path) -> None:
    create_topic(data_dir, "t")
    code, out, err = run(data_dir, "produce", "t", stdin=b"a\nb\r\n\nlast without newline")
    assert code == 0, err
    assert out.decode().splitlines() == ["t-0 0..3 (4 records)", "4 records written in 1 batch"]
    (batch,) = read_batches(data_dir, "t")[0]
    assert [r.value for r in batch.records()] == [b"a", b"b", b"", b"last without newline"]
    assert all(r.key is None and r.headers == () for r in batch.records())


def test_text_with_key_separator_is_partitioned_by_key(data_dir: Path) -> None:
    create_topic(data_dir, "t", 4)
    keys = [f"key-{i}" for i in range(40)]
    stdin = "".join(f"{k}:value {k}:x\n" for k in keys).encode()
    code, _, err = run(data_dir, "produce", "t", "--key-separator", ":", stdin=stdin)
    assert code == 0, err
    records = read_records(data_dir, "t")
    placed = {r.key.decode(): p for p, rs in records.items() for r in rs}
    assert placed == {k: partition_for_key(k.encode(), 4) for k in keys}
    assert all(r.value == b"value " + r.key + b":x" for rs in records.values() for r in rs)


def test_default_timestamps_are_the_time_of_reading(data_dir: Path) -> None:
    create_topic(data_dir, "t")
    before = time.time_ns() // 1_000_000
    run(data_dir, "produce", "t", stdin=b"x\n")
    after = time.time_ns() // 1_000_000
    (record,) = read_records(data_dir, "t")[0]
    assert before <= record.timestamp <= after


def test_batch_size_is_records_per_batch(data_dir: Path) -> None:
    create_topic(data_dir, "t")
    code, out, _ = run(data_dir, "produce", "t", "--batch-size", "3", stdin=b"1\n2\n3\n4\n5\n6\n7\n")
    assert code == 0 and out.decode().endswith("7 records written in 3 batches\n")
    assert [b.records_count for b in read_batches(data_dir, "t")[0]] == [3, 3, 1]


def test_keyless_records_are_sticky_per_batch_and_spread(data_dir: Path) -> None:
    create_topic(data_dir, "t", 3)
    code, _, _ = run(data_dir, "produce", "t", "--batch-size", "10", stdin=b"".join(b"%d\n" % i for i in range(300)))
    assert code == 0
    batches = read_batches(data_dir, "t")
    assert all(b.records_count == 10 for bs in batches.values() for b in bs)
    assert sum(len(bs) for bs in batches.values()) == 30 and all(batches.values())


def test_partition_option_sends_everything_there(data_dir: Path) -> None:
    create_topic(data_dir, "t", 3)
    code, out, _ = run(data_dir, "produce", "t", "--partition", "2", "--key-separator", "=", stdin=b"a=1\nb=2\n")
    assert code == 0 and out.decode().startswith("t-2 0..1 (2 records)")
    assert [len(v) for v in read_records(data_dir, "t").values()] == [0, 0, 2]


# --- JSON --------------------------------------------------------------------------------------

def test_json_records_keep_every_field(data_dir: Path) -> None:
    create_topic(data_dir, "t", 2)
    stdin = jsonl({"key": "k", "value": "v", "timestamp": 1234, "headers": {"h": "x", "n": None}, "partition": 1},
                  {"key": "k", "value": None, "timestamp": 1235},
                  {"value": "no key", "partition": 0})
    code, out, err = run(data_dir, "produce", "t", "--format", "json", "--json", stdin=stdin)
    assert code == 0, err
    summary = orjson.loads(out)
    assert summary["records"] == 3 and summary["topic"] == "t"
    records = read_records(data_dir, "t")
    tomb_partition = partition_for_key(b"k", 2)
    by_value = {r.value: (p, r) for p, rs in records.items() for r in rs}
    p, r = by_value[b"v"]
    assert (p, r.key, r.timestamp, r.headers) == (1, b"k", 1234, (("h", b"x"), ("n", None)))
    p, r = by_value[None]
    assert (p, r.key, r.timestamp) == (tomb_partition, b"k", 1235)
    assert by_value[b"no key"][0] == 0


def test_json_keys_are_partitioned_like_kafka(data_dir: Path) -> None:
    create_topic(data_dir, "t", 5)
    rng = random.Random(3)
    keys = [f"user-{rng.randrange(10**6)}" for _ in range(500)]
    code, _, _ = run(data_dir, "produce", "t", "--format", "json", stdin=jsonl(*({"key": k, "value": k} for k in keys)))
    assert code == 0
    for p, rs in read_records(data_dir, "t").items():
        assert all(partition_for_key(r.key, 5) == p and r.value == r.key for r in rs)


def test_json_base64_values(data_dir: Path) -> None:
    create_topic(data_dir, "t")
    stdin = jsonl({"key": base64.b64encode(b"\xff").decode(), "value": base64.b64encode(b"\x00\x01").decode()})
    code, _, _ = run(data_dir, "produce", "t", "--format", "json", "--encoding", "base64", stdin=stdin)
    assert code == 0
    (record,) = read_records(data_dir, "t")[0]
    assert (record.key, record.value) == (b"\xff", b"\x00\x01")


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compressed_batches_read_back_equal(data_dir: Path, codec: str) -> None:
    create_topic(data_dir, "t")
    lines = [f"value {i} " * 5 for i in range(50)]
    code, _, err = run(data_dir, "produce", "t", "--compression", codec, "--batch-size", "20",
                       stdin="\n".join(lines).encode())
    assert code == 0, err
    batches = read_batches(data_dir, "t")[0]
    assert [b.compression for b in batches] == [CompressionType.from_name(codec)] * 3
    assert [r.value for b in batches for r in b.records()] == [line.encode() for line in lines]


def test_a_compressed_batch_over_max_message_bytes_is_split_in_halves(data_dir: Path) -> None:
    # Two random 100 KB values fit max.message.bytes by their uncompressed bound, but gzip adds
    # more than that bound's slack: the log refuses the batch, and the producer splits it in two
    # (as Kafka's producer splits a batch the broker found too large).
    value_size = 100_000
    create_topic(data_dir, "t", max_message_bytes=str(2 * (value_size + 31) + 61))
    rng = random.Random(1)
    raw = [rng.randbytes(value_size) for _ in range(2)]
    stdin = jsonl(*({"value": base64.b64encode(v).decode()} for v in raw))
    code, out, err = run(data_dir, "produce", "t", "--format", "json", "--encoding", "base64", "--compression", "gzip",
                         stdin=stdin)
    assert code == 0, err
    batches = read_batches(data_dir, "t")[0]
    assert [b.records_count for b in batches] == [1, 1]
    assert [r.value for b in batches for r in b.records()] == raw


# --- bad input: the records before the bad line are written, nothing from it on ----------------

def test_bad_json_names_the_line_and_keeps_the_records_before_it(data_dir: Path) -> None:
    create_topic(data_dir, "t", 3)
    stdin = jsonl({"key": "a", "value": "1"}, {"key": "b", "value": "2"}) + b'{"key": "c", "value": \n' + \
        jsonl({"key": "d", "value": "4"})
    code, out, err = run(data_dir, "produce", "t", "--format", "json", stdin=stdin)
    assert code == 1
    assert err.count("\n") == 1 and err.startswith("error: line 3: invalid JSON")
    assert "2 record(s) from the lines before line 3 were written, none from line 3 on" in err
    assert sorted(values(read_records(data_dir, "t"))) == [b"1", b"2"]
    assert out.decode().endswith("2 records written in 2 batches\n") or "2 records written" in out.decode()


@pytest.mark.parametrize(("stdin", "message"), [
    (b'{"value": "ok"}\n{"value": 5}\n{"value": "after"}\n', 'line 2: "value" must be a string or null, got 5'),
    (b'{"value": "ok"}\n{"partition": 7}\n', "line 2: \"partition\" must be an integer in [0, 2)"),
    (b'{"value": "ok"}\n{"colour": "red"}\n', "line 2: unknown field 'colour'"),
    (b'{"value": "ok"}\n{"timestamp": -3}\n', 'line 2: "timestamp" must be a non-negative int64'),
])
def test_bad_json_fields_are_one_line_errors(data_dir: Path, stdin: bytes, message: str) -> None:
    create_topic(data_dir, "t", 2)
    code, _, err = run(data_dir, "produce", "t", "--format", "json", stdin=stdin)
    assert code == 1 and err.startswith(f"error: {message}") and err.count("\n") == 1, err
    assert values(read_records(data_dir, "t")) == [b"ok"]


def test_missing_key_separator_names_the_line(data_dir: Path) -> None:
    create_topic(data_dir, "t")
    code, _, err = run(data_dir, "produce", "t", "--key-separator", "\t", stdin=b"k\tv\nno tab here\nk2\tv2\n")
    assert code == 1
    assert err.startswith("error: line 2: no key separator '\\t' found on the line: 'no tab here'")
    assert values(read_records(data_dir, "t")) == [b"v"]


def test_a_value_over_max_message_bytes_is_refused_naming_its_line(data_dir: Path) -> None:
    create_topic(data_dir, "t", 2, max_message_bytes="1000")
    lines = [b"k0:small", b"k1:small", b"k2:" + b"x" * 2000, b"k3:after", b"k4:after"]
    code, out, err = run(data_dir, "produce", "t", "--key-separator", ":", stdin=b"\n".join(lines))
    assert code == 1 and err.count("\n") == 1
    assert err.startswith("error: line 3: the record was refused: batch of ") and "max.message.bytes 1000" in err
    assert "2 record(s) from the lines before line 3 were written, none from line 3 on" in err
    assert sorted(values(read_records(data_dir, "t"))) == [b"small", b"small"]


def test_a_refused_batch_cuts_every_partition_at_its_first_line(data_dir: Path) -> None:
    # Partition 0 is compacted in spirit: a keyless record there is refused. Records for
    # partition 1 read after the refused batch's first line must not be written either.
    create_topic(data_dir, "t", 2, cleanup_policy="compact")
    stdin = jsonl({"key": "a", "value": "1", "partition": 1},
                  {"key": "b", "value": "2", "partition": 0},
                  {"value": "keyless", "partition": 0},
                  {"key": "c", "value": "3", "partition": 1})
    code, _, err = run(data_dir, "produce", "t", "--format", "json", stdin=stdin)
    assert code == 1
    assert err.startswith("error: line 3: the batch of lines 2..3 for partition 0 was refused: compacted topic")
    assert "1 record(s) from the lines before line 2 were written, none from line 2 on" in err
    assert read_records(data_dir, "t")[0] == [] and [r.value for r in read_records(data_dir, "t")[1]] == [b"1"]


def test_unknown_topic_is_an_error(data_dir: Path) -> None:
    create_topic(data_dir, "t")
    code, _, err = run(data_dir, "produce", "nope", stdin=b"x\n")
    assert code == 1 and err == "error: unknown topic 'nope' (topic='nope')\n"


def test_partition_out_of_range_is_an_error(data_dir: Path) -> None:
    create_topic(data_dir, "t", 2)
    code, _, err = run(data_dir, "produce", "t", "--partition", "2", stdin=b"x\n")
    assert code == 1 and err.startswith("error: topic 't' has no partition 2 (it has 2)")
    assert values(read_records(data_dir, "t")) == []


def test_key_separator_needs_text_format(data_dir: Path) -> None:
    create_topic(data_dir, "t")
    code, _, err = run(data_dir, "produce", "t", "--format", "json", "--key-separator", ":", stdin=b"{}\n")
    assert code == 2 and "--key-separator" in err


# --- the producer and its input, in process ------------------------------------------------------

def test_explicit_clock_stamps_records_without_timestamp(data_dir: Path) -> None:
    create_topic(data_dir, "t")
    clock = FakeClock(5_000)
    with open_manager(data_dir) as manager:
        producer = ConsoleProducer(manager, "t", ProduceOptions(format="json"), clock=clock)
        producer.send_lines(b'{"value": "a"}\n{"value": "b", "timestamp": 7}')
        clock.advance(10)
        producer.send_lines(b'{"value": "c"}')
        producer.close()
    assert [r.timestamp for r in read_records(data_dir, "t")[0]] == [5_000, 7, 5_010]


def test_flush_writes_open_batches_and_the_next_records_start_a_new_one(data_dir: Path) -> None:
    create_topic(data_dir, "t")
    with open_manager(data_dir) as manager:
        producer = ConsoleProducer(manager, "t", ProduceOptions())
        producer.send_lines(b"a\nb")
        assert producer.records_written == 0
        producer.flush()
        assert producer.records_written == 2
        producer.send_lines(b"c")
        producer.close()
    assert [b.records_count for b in read_batches(data_dir, "t")[0]] == [2, 1]


def test_run_producer_reads_a_file_in_chunks(tmp_path: Path, data_dir: Path) -> None:
    create_topic(data_dir, "t")
    source = tmp_path / "in.txt"
    source.write_bytes(b"".join(b"line %d\n" % i for i in range(1000)))
    with open_manager(data_dir) as manager, source.open("rb") as stream:
        producer = ConsoleProducer(manager, "t", ProduceOptions())
        run_producer(producer, stream, chunk_bytes=100)
    assert values(read_records(data_dir, "t")) == [b"line %d" % i for i in range(1000)]


def test_line_chunks_end_at_newlines_and_keep_a_last_partial_line(tmp_path: Path) -> None:
    source = tmp_path / "in.txt"
    source.write_bytes(b"aa\nbb\ncc\nd")
    with source.open("rb") as stream:
        chunks = list(iter_line_chunks(stream, chunk_bytes=4))
    assert b"\n".join(c for c in chunks if c is not IDLE) == b"aa\nbb\ncc\nd"
    assert all(c is IDLE or not c.endswith(b"\n") for c in chunks)


def test_a_line_longer_than_many_chunks_stays_whole(tmp_path: Path) -> None:
    source = tmp_path / "in.txt"
    source.write_bytes(b"x" * 1000 + b"\nshort\n")
    with source.open("rb") as stream:
        chunks = [c for c in iter_line_chunks(stream, chunk_bytes=7) if c is not IDLE]
    assert b"\n".join(chunks).split(b"\n") == [b"x" * 1000, b"short"]


def test_line_chunks_report_idle_input_from_a_pipe() -> None:
    read_end, write_end = os.pipe()
    with os.fdopen(read_end, "rb") as stream:
        os.write(write_end, b"first\n")
        chunks = iter_line_chunks(stream, linger_seconds=0)
        assert next(chunks) == b"first"
        assert next(chunks) is IDLE  # nothing written yet: the producer flushes
        os.write(write_end, b"second")
        os.close(write_end)
        assert list(chunks) == [b"second"]
