"""``--bootstrap-server``: produce, consume, topics, configs and delete-records through a running
tidelog broker while it holds the log dir's lock, with the local mode's output and errors."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest

from tests.cli_helpers import run_cli
from tidelog.cli.remote_produce import BrokerTarget
from tidelog.manager import LogManager
from tidelog.records import build_end_txn_marker_batch
from tidelog.server import Endpoint, ServerConfig, ServerThread
from tidelog.storage.append_info import AppendOrigin
from tidelog.storage.config import BrokerConfig
from tidelog.testing import FakeClock, FakeScheduler
from tidelog.topic_partition import TopicPartition


@dataclass
class Broker:
    """A tidelog broker in this process over ``data`` (a FakeScheduler: no background task runs)."""

    data: Path
    manager: LogManager
    thread: ServerThread
    stopped: bool = False

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.thread.server.bound[0].port}"

    def stop(self) -> None:
        if not self.stopped:
            self.stopped = True
            self.thread.stop()
            self.manager.shutdown()


def start_broker(data: Path) -> Broker:
    """As tests/server/server_helpers.start_broker: system clock for the log (kafka-python-like
    timestamps are checked against it), a fake scheduler, an ephemeral loopback port."""
    broker = BrokerConfig.from_properties({"log.dirs": str(data)})
    manager = LogManager.open(broker, scheduler=FakeScheduler(FakeClock()))
    config = ServerConfig.from_broker(broker)
    config = ServerConfig((Endpoint("PLAINTEXT", "127.0.0.1", 0),), config.advertised, config.socket_request_max_bytes)
    thread = ServerThread(manager, config, io_threads=2)
    thread.start()
    return Broker(data, manager, thread)


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    started = start_broker(tmp_path / "data")
    yield started
    started.stop()


def remote(broker: Broker, *args: str, stdin: bytes = b"") -> tuple[int, bytes, str]:
    """``tidelog --data-dir <the broker's locked dir> ARGS --bootstrap-server <it>``."""
    return run_cli(broker.data, *args, "--bootstrap-server", broker.bootstrap, stdin=stdin)


NOW = int(time.time() * 1000)


def jsonl(*records: dict[str, object]) -> bytes:
    return b"\n".join(orjson.dumps(r) for r in records) + b"\n"


KEYED = jsonl(*({"key": f"k{i % 7}", "value": f"v{i}", "timestamp": NOW + i,
                 "headers": {"n": str(i)} if i % 3 else {}} for i in range(300)))


def consume_all(run: tuple[int, bytes, str]) -> list[dict[str, object]]:
    code, out, err = run
    assert code == 0, err
    return [orjson.loads(line) for line in out.splitlines()]


# --- works while the server holds the lock ----------------------------------------------------------

def test_local_mode_is_locked_out_while_remote_mode_works(broker: Broker) -> None:
    code, _, err = run_cli(broker.data, "topics", "list")
    assert code == 1 and "locked" in err
    assert remote(broker, "topics", "create", "t", "--partitions", "2") == (0, b"Created topic t.\n", "")
    assert remote(broker, "topics", "list") == (0, b"t\n", "")
    assert broker.manager.partitions("t") == [0, 1]


def test_bootstrap_server_from_the_environment(broker: Broker, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIDELOG_BOOTSTRAP_SERVER", broker.bootstrap)
    assert run_cli(broker.data, "topics", "create", "e")[0] == 0
    assert run_cli(broker.data, "topics", "list", "--json")[1] == b'[\n  "e"\n]\n'


# --- produce and consume ------------------------------------------------------------------------------

def test_text_round_trip_with_keys(broker: Broker) -> None:
    broker.manager.create_topic("t", 1, {})
    code, out, err = remote(broker, "produce", "t", "--key-separator", ":", stdin=b"a:1\nb:2\nc:\n")
    assert (code, out, err) == (0, b"t-0 0..2 (3 records)\n3 records written in 1 batch\n", "")
    code, out, err = remote(broker, "consume", "t", "--from-beginning")
    assert (code, out, err) == (0, b"1\n2\n\n", "Processed a total of 3 messages\n")
    records = consume_all(remote(broker, "consume", "t", "--from-beginning", "--format", "json"))
    assert [(r["key"], r["value"], r["offset"]) for r in records] == [("a", "1", 0), ("b", "2", 1), ("c", "", 2)]


def test_json_round_trip_matches_local_mode_byte_for_byte(broker: Broker, tmp_path: Path) -> None:
    """The same input produced remotely and locally gives the same summary; the remote consumer,
    the local consumer of the broker's dir (after it stops) and of the local dir print the same."""
    local = tmp_path / "local"
    broker.manager.create_topic("t", 3, {})
    assert run_cli(local, "topics", "create", "t", "--partitions", "3")[0] == 0
    produced_remotely = remote(broker, "produce", "t", "--format", "json", "--batch-size", "40", stdin=KEYED)
    produced_locally = run_cli(local, "produce", "t", "--format", "json", "--batch-size", "40", stdin=KEYED)
    assert produced_remotely == produced_locally and produced_remotely[0] == 0
    assert b"300 records written in" in produced_remotely[1]
    args = ("consume", "t", "--from-beginning", "--format", "json")
    through_broker = remote(broker, *args)
    broker.stop()
    assert through_broker == run_cli(broker.data, *args) == run_cli(local, *args)
    records = consume_all(through_broker)
    numbers = [int(str(r["value"])[1:]) for r in records]
    assert sorted(numbers) == list(range(300))
    assert [r["headers"] for r in records] == [{"n": str(i)} if i % 3 else {} for i in numbers]
    assert [r["key"] for r in records] == [f"k{i % 7}" for i in numbers]


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compressed_batches_round_trip(broker: Broker, codec: str) -> None:
    broker.manager.create_topic("t", 1, {})
    values = b"".join(b"value %d\n" % i for i in range(50))
    code, out, _ = remote(broker, "produce", "t", "--compression", codec, "--batch-size", "20", stdin=values)
    assert (code, out) == (0, b"t-0 0..49 (50 records)\n50 records written in 3 batches\n")
    assert remote(broker, "consume", "t", "--from-beginning")[1] == values


def test_consume_start_rules_and_limits(broker: Broker) -> None:
    broker.manager.create_topic("t", 2, {})
    stdin = jsonl(*({"value": v, "timestamp": NOW + ts, "partition": p}
                    for v, ts, p in (("a", 100, 0), ("b", 200, 0), ("c", 300, 0), ("d", 400, 1))))
    assert remote(broker, "produce", "t", "--format", "json", stdin=stdin)[0] == 0
    assert remote(broker, "consume", "t") == (0, b"", "Processed a total of 0 messages\n")
    assert remote(broker, "consume", "t", "--from-beginning", "--max-messages", "2") == (
        0, b"a\nb\n", "Processed a total of 2 messages\n")
    assert remote(broker, "consume", "t", "--partition", "0", "--offset", "1") == (
        0, b"b\nc\n", "Processed a total of 2 messages\n")
    assert remote(broker, "consume", "t", "--timestamp", str(NOW + 250)) == (
        0, b"c\nd\n", "Processed a total of 2 messages\n")
    code, out, err = remote(broker, "consume", "t", "--partition", "1", "--offset", "9")
    assert (code, out) == (0, b"") and "offset 9 is out of range [0, 1] for t-1: starting at the latest offset 1" in err


def test_control_batches_and_log_append_time_read_as_locally(broker: Broker) -> None:
    """A trailing transaction marker is skipped without waiting; LogAppendTime stamps are the broker's."""
    broker.manager.create_topic("t", 1, {})
    broker.manager.create_topic("la", 1, {"message.timestamp.type": "LogAppendTime"})
    for topic in ("t", "la"):
        assert remote(broker, "produce", topic, stdin=b"a\nb\n")[0] == 0
    marker = build_end_txn_marker_batch(commit=True, producer_id=7, producer_epoch=0, coordinator_epoch=0,
                                        timestamp=NOW)
    broker.manager.append(TopicPartition("t", 0), marker, origin=AppendOrigin.COORDINATOR)
    args = ("--from-beginning", "--format", "json")
    remotely = [remote(broker, "consume", topic, *args) for topic in ("t", "la")]
    assert [[r["offset"] for r in consume_all(run)] for run in remotely] == [[0, 1], [0, 1]]
    assert {r["timestampType"] for r in consume_all(remotely[1])} == {"LogAppendTime"}
    broker.stop()
    assert remotely == [run_cli(broker.data, "consume", topic, *args) for topic in ("t", "la")]


def test_produce_refusal_keeps_the_lines_before_it(broker: Broker) -> None:
    broker.manager.create_topic("t", 1, {"max.message.bytes": "2000"})
    code, out, err = remote(broker, "produce", "t", stdin=b"a\nb\n" + b"x" * 5000 + b"\nz\n")
    assert code == 1 and out == b"t-0 0..1 (2 records)\n2 records written in 1 batch\n"
    assert err.startswith("error: line 3: the record was refused: ") and "none from line 3 on" in err
    assert "topic_partition='t-0'" in err
    assert remote(broker, "consume", "t", "--from-beginning")[1] == b"a\nb\n"


def test_broker_target_reads_the_topic_limits(broker: Broker) -> None:
    from tidelog.cli.remote import connect

    broker.manager.create_topic("t", 3, {"max.message.bytes": "5000"})
    with connect(broker.bootstrap) as client:
        target = BrokerTarget(client)
        assert (target.partition_count("t"), target.max_message_bytes("t")) == (3, 5000)


# --- topics, configs, delete-records --------------------------------------------------------------------

def test_topics_create_alter_describe_delete(broker: Broker) -> None:
    assert remote(broker, "topics", "create", "t", "--config", "retention.ms=1000") == (0, b"Created topic t.\n", "")
    assert broker.manager.partitions("t") == [0]  # the broker's num.partitions
    assert remote(broker, "topics", "alter", "t", "--partitions", "3")[0] == 0
    assert remote(broker, "produce", "t", "--partition", "2", stdin=b"x\ny\n")[0] == 0
    [document] = orjson.loads(remote(broker, "topics", "describe", "t", "--json")[1])
    assert document["configs"] == {"retention.ms": "1000"} and document["partition_count"] == 3
    assert [(p["partition"], p["log_start_offset"], p["high_watermark"], p["log_end_offset"], p["segments"])
            for p in document["partitions"]] == [(0, 0, 0, 0, None), (1, 0, 0, 0, None), (2, 0, 2, 2, None)]
    code, out, _ = remote(broker, "topics", "describe")
    assert code == 0 and out.startswith(f"Topic: t\tTopicId: {document['topic_id']}\tPartitionCount: 3".encode())
    broker.stop()
    [local] = orjson.loads(run_cli(broker.data, "topics", "describe", "t", "--json")[1])
    assert document == {**local, "configs_unconfirmed": None,
                        "partitions": [{**p, "segments": None} for p in local["partitions"]]}
    restarted = start_broker(broker.data)
    try:
        assert remote(restarted, "topics", "delete", "t") == (0, b"Deleted topic t.\n", "")
        assert remote(restarted, "topics", "list") == (0, b"", "")
    finally:
        restarted.stop()


def test_configs_alter_and_describe_match_local_mode(broker: Broker) -> None:
    broker.manager.create_topic("t", 1, {"retention.ms": "1000"})
    assert remote(broker, "configs", "alter", "t", "--set", "cleanup.policy=compact", "--delete", "retention.ms") == (
        0, b"Completed updating config for topic t.\n", "")
    assert broker.manager.topic_config("t").overridden == {"cleanup.policy"}
    described = [remote(broker, "configs", "describe", "t", *flags) for flags in ((), ("--all", "--json"))]
    assert described[0] == (0, b"Dynamic configs for topic t are:\nName            Value  \ncleanup.policy  compact\n", "")
    broker.stop()
    assert described == [run_cli(broker.data, "configs", "describe", "t", *flags) for flags in ((), ("--all", "--json"))]


def test_configs_alter_refused_as_a_whole(broker: Broker) -> None:
    broker.manager.create_topic("t", 1, {})
    code, _, err = remote(broker, "configs", "alter", "t", "--set", "retention.ms=soon", "--set", "segment.ms=5")
    assert code == 1 and "Invalid value soon for configuration retention.ms" in err
    assert "kafka_error='INVALID_CONFIG'" in err and broker.manager.topic_config("t").overridden == set()


def test_delete_records_moves_the_log_start_offset(broker: Broker) -> None:
    broker.manager.create_topic("t", 1, {})
    assert remote(broker, "produce", "t", stdin=b"a\nb\nc\n")[0] == 0
    assert remote(broker, "delete-records", "t", "--partition", "0", "--offset", "2") == (
        0, b"partition: t-0\tlow_watermark: 2\n", "")
    assert remote(broker, "consume", "t", "--from-beginning")[1] == b"c\n"
    assert remote(broker, "delete-records", "t", "--partition", "0", "--offset", "-1")[1].endswith(b"low_watermark: 3\n")


# --- errors ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("args", [
    ("produce", "nope"), ("consume", "nope"), ("topics", "describe", "nope"), ("topics", "delete", "nope"),
    ("configs", "describe", "nope"), ("configs", "alter", "nope", "--set", "retention.ms=1"),
    ("delete-records", "nope", "--partition", "0", "--offset", "0"),
])
def test_unknown_topic_is_a_clear_error(broker: Broker, args: tuple[str, ...]) -> None:
    code, out, err = remote(broker, *args, stdin=b"x\n")
    assert code == 1 and err.startswith("error: ") and "'nope'" in err and "Traceback" not in err
    assert "UNKNOWN_TOPIC_OR_PARTITION" in err or "no topic" in err


def test_unknown_partition_and_existing_topic(broker: Broker) -> None:
    broker.manager.create_topic("t", 2, {})
    code, _, err = remote(broker, "consume", "t", "--partition", "5")
    assert code == 1 and "topic 't' has no partition 5" in err and "t-5" in err
    code, _, err = remote(broker, "topics", "create", "t")
    assert code == 1 and "already exists" in err and "TOPIC_ALREADY_EXISTS" in err
    code, _, err = remote(broker, "topics", "alter", "t", "--partitions", "1")
    assert code == 1 and "INVALID_PARTITIONS" in err


def test_unreachable_broker_fails_fast(tmp_path: Path) -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    began = time.monotonic()
    code, out, err = run_cli(tmp_path, "topics", "list", "--bootstrap-server", f"127.0.0.1:{port}")
    assert code == 1 and out == b"" and f"cannot reach a Kafka broker at 127.0.0.1:{port}" in err
    assert err.count("\n") == 1, "kafka-python's own reconnect logs are not shown"
    assert time.monotonic() - began < 10


def test_local_only_options_are_a_usage_error(broker: Broker) -> None:
    code, _, err = remote(broker, "--override", "num.partitions=3", "topics", "list")
    assert code == 2 and "--override configures a local log dir" in err
