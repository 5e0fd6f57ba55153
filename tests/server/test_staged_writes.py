"""Jobs staged through a live broker (StageBatches, CommitStagedJob, AbortStagedJob) against a real
server: exactly once, atomic for consumers while producers keep producing, bad input answered
with what was wrong, never advertised in ApiVersions."""

from __future__ import annotations

import dataclasses
import os
import socket
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from crc32c import crc32c
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KafkaTP
from server_helpers import Broker, api_versions

TESTS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS / "manager"))  # manager_helpers: batch

from manager_helpers import batch  # noqa: E402

from tidelog.errors import LogDirOfflineError  # noqa: E402
from tidelog.manager.live_commit import LiveCommits  # noqa: E402
from tidelog.records.layout import RECORD_BATCH_OVERHEAD  # noqa: E402
from tidelog.server.staged_api import MESSAGES, SERVE_ADDRESS_FILE  # noqa: E402
from tidelog.spark.broker_commit import (  # noqa: E402
    BrokerRefusedError,
    BrokerStagedFile,
    BrokerUnreachableError,
    NotTidelogError,
    abort_through_broker,
    call_with_retry,
    commit_through_broker,
    serve_address,
)
from tidelog.storage.commit_log import COMMITTED, CommitLog, StagedBatch, default_staging_root  # noqa: E402
from tidelog.testing import FakeClock  # noqa: E402
from tidelog.topic_partition import TopicPartition  # noqa: E402

PARTITIONS = 3


def job_key() -> str:
    return f"job-{uuid.uuid4().hex}"


def stage(bootstrap: str, key: str, name: str, batches: list[tuple[str, int, bytes]],
          chunk_bytes: int = 300) -> list[tuple[str, StagedBatch]]:
    """Send ``batches`` as one task's staged file, in small chunks; their refs in order."""
    out = BrokerStagedFile(bootstrap, key, name, chunk_bytes)
    refs = []
    for topic, partition, data in batches:
        position = out.write(data)
        records = int.from_bytes(data[57:61], "big")
        refs.append((name, StagedBatch(topic, partition, position, len(data), records,
                                       crc32c(data[RECORD_BATCH_OVERHEAD:]), False)))
    assert out.close()
    return refs


def now_batch(count: int) -> bytes:
    return batch(count, timestamp=int(time.time() * 1000))


def read_all(bootstrap: str, topic: str, partitions: int, expected: int) -> dict[int, list[bytes]]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, consumer_timeout_ms=3000)
    tps = [KafkaTP(topic, p) for p in range(partitions)]
    consumer.assign(tps)
    consumer.seek_to_beginning(*tps)
    found: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
    deadline = time.monotonic() + 30
    while sum(len(v) for v in found.values()) < expected and time.monotonic() < deadline:
        for tp, records in consumer.poll(timeout_ms=500).items():
            found[tp.partition].extend(r.value for r in records)
    consumer.close()
    return found


def test_a_job_staged_through_the_broker_is_published_once(broker: Broker) -> None:
    broker.manager.create_topic("t", PARTITIONS)
    key = job_key()
    refs = stage(broker.bootstrap, key, "part-00000-attempt-0-task-1.batches",
                 [("t", p, now_batch(4)) for p in range(PARTITIONS) for _ in range(2)])
    staged_dir = default_staging_root(broker.manager.log_dirs()[0].path) / key
    assert staged_dir.is_dir()
    outcome = commit_through_broker(broker.bootstrap, key, refs)
    assert outcome.state == "published"
    assert outcome.ranges == {f"t-{p}": (0, 8) for p in range(PARTITIONS)}
    assert not staged_dir.exists()  # staging reclaimed at once
    again = commit_through_broker(broker.bootstrap, key, refs)
    assert again.state == "already committed" and again.ranges == outcome.ranges
    found = read_all(broker.bootstrap, "t", PARTITIONS, 24)
    assert {p: len(v) for p, v in found.items()} == {p: 8 for p in range(PARTITIONS)}
    entry = CommitLog.read([broker.manager.log_dirs()[0].path]).find(key)
    assert entry is not None and entry["state"] == COMMITTED


def test_an_aborted_job_publishes_nothing_and_its_staging_is_deleted(broker: Broker) -> None:
    broker.manager.create_topic("t", 1)
    key = job_key()
    stage(broker.bootstrap, key, "part-00000-attempt-0-task-1.batches", [("t", 0, now_batch(3))])
    assert abort_through_broker(broker.bootstrap, key).state == "aborted"
    assert not (default_staging_root(broker.manager.log_dirs()[0].path) / key).exists()
    assert broker.manager.offsets(TopicPartition("t", 0)).log_end_offset == 0


def test_the_staged_write_apis_are_never_advertised(broker: Broker) -> None:
    client = broker.connect()
    advertised = {k.api_key for k in api_versions(client).api_keys}
    client.close()
    assert not advertised & set(MESSAGES)


def test_bad_input_is_answered_with_what_is_wrong_and_where(broker: Broker) -> None:
    broker.manager.create_topic("t", 1)
    key = job_key()
    refs = stage(broker.bootstrap, key, "part-00000-attempt-0-task-1.batches", [("t", 0, now_batch(2))])
    with pytest.raises(BrokerRefusedError, match="nope"):  # an unknown topic: nothing recorded, nothing appended
        commit_through_broker(broker.bootstrap, key, [(refs[0][0], dataclasses.replace(refs[0][1], topic="nope"))])
    assert CommitLog.read([broker.manager.log_dirs()[0].path]).find(key) is None
    with pytest.raises(BrokerRefusedError, match="job key '../../etc'"):  # never a path outside the staging root
        stage(broker.bootstrap, "../../etc", "part-00000-attempt-0-task-1.batches", [("t", 0, now_batch(1))])
    with pytest.raises(BrokerRefusedError, match="staged file name"):
        stage(broker.bootstrap, key, "../x.batches", [("t", 0, now_batch(1))])
    with pytest.raises(BrokerRefusedError, match="Cannot append to internal topic __consumer_offsets"):  # as Produce
        commit_through_broker(broker.bootstrap, key, [(refs[0][0], dataclasses.replace(refs[0][1],
                                                                                     topic="__consumer_offsets"))])
    assert CommitLog.read([broker.manager.log_dirs()[0].path]).find(key) is None
    with pytest.raises(BrokerRefusedError, match="missing or cut short"):  # refs past the staged bytes
        commit_through_broker(broker.bootstrap, key, [(refs[0][0], dataclasses.replace(refs[0][1], position=10_000))])
    assert commit_through_broker(broker.bootstrap, key, refs).state == "published"  # nothing was damaged
    with pytest.raises(BrokerUnreachableError, match="127.0.0.1:1"):
        call_with_retry("127.0.0.1:1", MESSAGES[32002][0](job_key=key, query_id=None, batch_id=-1), "an abort", 0.5)


def test_a_streaming_micro_batch_replayed_is_skipped(broker: Broker) -> None:
    broker.manager.create_topic("t", 1)
    query = str(uuid.uuid4())
    for batch_id, state in ((0, "published"), (1, "published"), (1, "already committed")):
        key = f"query-{query}/batch-{batch_id}"
        refs = stage(broker.bootstrap, key, "part-00000-attempt-0-task-1.batches", [("t", 0, now_batch(2))])
        assert commit_through_broker(broker.bootstrap, key, refs, query, batch_id).state == state
    assert broker.manager.offsets(TopicPartition("t", 0)).log_end_offset == 4


def test_the_broker_leaves_its_address_for_the_sink_while_it_listens(broker: Broker) -> None:
    data = broker.manager.log_dirs()[0].path
    assert (data / SERVE_ADDRESS_FILE).exists()
    assert serve_address([str(data)]) == broker.bootstrap


def test_a_fenced_log_refuses_every_append_but_the_commits(broker: Broker) -> None:
    broker.manager.create_topic("t", 1)
    tp = TopicPartition("t", 0)
    target = broker.manager.log(tp)
    with target.lock:
        target.append_fence = LogDirOfflineError("fenced", topic_partition=str(tp))
    try:
        with pytest.raises(LogDirOfflineError, match="fenced"):
            broker.manager.append(tp, now_batch(1))  # the compiled path, the checked path and the general one
        with pytest.raises(LogDirOfflineError, match="fenced"):
            target.append_as_follower(batch(1))
        assert target.log_end_offset == 0
    finally:
        with target.lock:
            target.append_fence = None
    broker.manager.append(tp, now_batch(1))
    assert target.log_end_offset == 1


def producing(bootstrap: str, topic: str, partitions: int, stop: threading.Event, sent: list[int]) -> Callable[[], None]:
    def run() -> None:
        producer = KafkaProducer(bootstrap_servers=bootstrap, acks=1, retries=1000, retry_backoff_ms=5, linger_ms=0,
                                 max_in_flight_requests_per_connection=1)
        n = 0
        while not stop.is_set():
            producer.send(topic, b"p%d" % n, partition=n % partitions)
            n += 1
            if n % 50 == 0:
                producer.flush()
        producer.flush()
        producer.close()
        sent.append(n)
    return run


def sampling_ends(bootstrap: str, topic: str, partitions: int, stop: threading.Event,
                  ends: list[dict[int, int]]) -> Callable[[], None]:
    """Ask the broker for every partition's end offset (ListOffsets latest: the high watermark,
    what consumers read up to) until stopped."""
    def run() -> None:
        consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
        tps = [KafkaTP(topic, p) for p in range(partitions)]
        while not stop.is_set():
            ends.append({tp.partition: offset for tp, offset in consumer.end_offsets(tps).items()})
        consumer.close()
    return run


def test_jobs_commit_whole_while_a_producer_keeps_producing(broker: Broker) -> None:
    """A kafka-python producer sends to every partition while jobs are committed: every record
    of both is there once, each job's records are contiguous in each partition, and the end a
    consumer is offered (the high watermark, sampled all along) never falls inside a job."""
    broker.manager.create_topic("t", PARTITIONS)
    stop, sent, ends = threading.Event(), [], []
    threads = [threading.Thread(target=producing(broker.bootstrap, "t", PARTITIONS, stop, sent)),
               threading.Thread(target=sampling_ends(broker.bootstrap, "t", PARTITIONS, stop, ends))]
    for thread in threads:
        thread.start()
    jobs, ranges = 6, []
    try:
        for j in range(jobs):
            deadline = time.monotonic() + 60  # the sampler keeps pace whatever the machine's load
            while len(ends) < 2 * (j + 1) and time.monotonic() < deadline:
                time.sleep(0.01)
            key = job_key()
            values = [("t", p, batch(5, timestamp=int(time.time() * 1000), value_size=20)) for p in range(PARTITIONS)
                      for _ in range(4)]
            refs = stage(broker.bootstrap, key, "part-00000-attempt-0-task-1.batches", values, chunk_bytes=1 << 20)
            outcome = commit_through_broker(broker.bootstrap, key, refs)
            assert outcome.state == "published"
            ranges += [(int(tp.rpartition("-")[2]), start, end) for tp, (start, end) in outcome.ranges.items()]
    finally:
        stop.set()
        for thread in threads:
            thread.join(60)
    assert len(ends) > 10
    inside = [(p, end) for sample in ends for p, end in sample.items()
              for q, start, stop_at in ranges if p == q and start < end < stop_at]
    assert not inside, inside  # a consumer was never offered part of a job
    produced = sent[0]
    found = read_all(broker.bootstrap, "t", PARTITIONS, produced + jobs * PARTITIONS * 20)
    assert sum(len(v) for v in found.values()) == produced + jobs * PARTITIONS * 20
    for values in found.values():
        job_runs = "".join("j" if v.startswith(b"v") else "p" for v in values)
        assert job_runs.count("j") == jobs * 20
        runs = [len(r) for r in job_runs.replace("p", " ").split()]
        assert all(r % 20 == 0 for r in runs), runs  # a job's 20 records never split by a produce


def test_an_expired_staging_dir_is_reclaimed_unless_an_intent_needs_it(broker: Broker) -> None:
    broker.manager.create_topic("t", 1)
    clock = FakeClock(int(time.time() * 1000))
    live = LiveCommits(broker.manager, clock, lease_ms=10_000)
    kept, dropped = job_key(), job_key()
    for key in (kept, dropped):
        live.stage(key, "part-00000-attempt-0-task-1.batches", 0, now_batch(1), True)
    clock.advance(9_000)
    live.stage(kept, "part-00001-attempt-0-task-2.batches", 0, now_batch(1), True)  # refreshes its lease
    assert live.reclaim() == []
    clock.advance(2_000)
    removed = live.reclaim()
    assert [p.name for p in removed] == [dropped]
    assert (Path(live.staging_root) / kept).is_dir()
    clock.advance(20_000)
    assert [p.name for p in live.reclaim()] == [kept]


def test_the_sink_trusts_an_address_only_while_its_broker_lives(tmp_path: Path) -> None:
    """A killed broker leaves its address file: the sink ignores it once that pid is gone; a
    broker with secured listeners only is refused saying to give a PLAINTEXT listener."""
    import json
    import subprocess

    from tidelog.errors import LogDirLockedError
    from tidelog.manager import LogManager
    from tidelog.storage.config import BrokerConfig

    data = tmp_path / "data"
    dead = subprocess.Popen(["true"])
    dead.wait()
    with LogManager.open(BrokerConfig.from_properties({}), [data]):  # the dir is owned, as by a broker
        address = data / SERVE_ADDRESS_FILE
        address.write_text(json.dumps({"pid": dead.pid, "host": socket.gethostname(), "listeners": [
            {"name": "PLAINTEXT", "host": "127.0.0.1", "port": 9, "security_protocol": "PLAINTEXT"}]}))
        assert serve_address([str(data)]) is None  # left by a dead broker
        address.write_text(json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "listeners": [
            {"name": "SSL", "host": "127.0.0.1", "port": 9, "security_protocol": "SSL"}]}))
        with pytest.raises(LogDirLockedError, match="no PLAINTEXT listener"):
            serve_address([str(data)])
    assert serve_address([str(data)]) is None  # nobody owns it


def test_a_chunk_above_socket_request_max_bytes_is_named(make_broker: Callable[..., Broker]) -> None:
    broker = make_broker(**{"socket.request.max.bytes": str(1 << 20)})
    broker.manager.create_topic("t", 1)
    out = BrokerStagedFile(broker.bootstrap, job_key(), "part-00000-attempt-0-task-1.batches")
    out.write(b"x" * (2 << 20))
    with pytest.raises(NotTidelogError, match="socket.request.max.bytes is below a chunk"):
        out.close()


def closing_server() -> tuple[str, Callable[[], int]]:
    """A loopback listener that reads each request's size and closes the connection unanswered,
    as a Kafka broker does on an API key it does not know; its address and a count of the
    connections it closed so."""
    listener = socket.create_server(("127.0.0.1", 0))
    closed = [0]

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                conn.recv(4)
                closed[0] += 1

    threading.Thread(target=serve, daemon=True).start()
    return f"127.0.0.1:{listener.getsockname()[1]}", lambda: closed[0]


def test_the_one_client_tells_a_broker_down_from_a_connection_closed_on_a_request() -> None:
    from tidelog.errors import InvalidRequestError, TidelogError
    from tidelog.spark.broker_client import BrokerClient, ConnectionBrokenError, parse_bootstrap

    down = socket.create_server(("127.0.0.1", 0))
    port = down.getsockname()[1]
    down.close()  # nothing listens there now
    with pytest.raises(BrokerUnreachableError, match=f"cannot connect to the broker at 127.0.0.1:{port}") as refused:
        BrokerClient(f"127.0.0.1:{port}").metadata(None)
    assert not isinstance(refused.value, ConnectionBrokenError) and refused.value.address == f"127.0.0.1:{port}"
    assert isinstance(refused.value, TidelogError) and isinstance(refused.value, ConnectionError)

    address, closed = closing_server()
    with BrokerClient(f"127.0.0.1:{port},{address}") as client:  # the first seed that accepts
        with pytest.raises(ConnectionBrokenError, match=f"the connection to the broker at {address} broke") as broke:
            client.metadata(None)
        assert broke.value.address == address
    with pytest.raises(NotTidelogError, match=f"the broker at {address} is not tidelog serve: it closed the "
                                              "connection on an abort"):
        call_with_retry(address, MESSAGES[32002][0](job_key=job_key(), query_id=None, batch_id=-1), "an abort", 5)
    assert closed() == 3  # the read side's one, then two in a row for the write side

    for bad, named in (("nohost", "entry 'nohost' is not HOST:PORT"), ("h:0", "entry 'h:0' is not HOST:PORT"),
                       (" , ", "is empty")):
        with pytest.raises(InvalidRequestError, match=f"kafka.bootstrap.servers {named}"):
            parse_bootstrap(bad)
    assert parse_bootstrap("[::1]:9092, b:1") == [("::1", 9092), ("b", 1)]
