"""``tidelog serve`` SIGKILLed at each step of a commit of a job staged through it (a kill point
armed with ``TIDELOG_FAULTS``): staging, the intent, the roll-forward, the committed mark, the
staging removal. The driver's commit keeps retrying on a new connection (the sink's
``call_with_retry``); the broker, restarted on the same port, completes the job before it
listens; the retry gets it published or already committed; a consumer reads the job whole,
exactly once; no staging is left. Every step but one is ``soak`` (a broker start costs ~2 s)."""

from __future__ import annotations

import socket
import threading
import time
import uuid
from pathlib import Path

import pytest
from crc32c import crc32c
from kafka import KafkaConsumer
from kafka import TopicPartition as KafkaTP

from reliability.broker import ServeProcess
from tidelog.manager import LogManager
from tidelog.records import BatchBuilder
from tidelog.records.layout import RECORD_BATCH_OVERHEAD
from tidelog.spark.broker_commit import BrokerStagedFile, commit_through_broker
from tidelog.storage import fileops
from tidelog.storage.commit_log import COMMIT_LOG_FILE, StagedBatch, default_staging_root
from tidelog.storage.config import BrokerConfig
from tidelog.storage.fileops import FaultRule

PARTITIONS = 3
BATCHES = 4  # per partition, 5 records each
# (name, op, path glob, skip, before|after): where the broker dies
STEPS = [
    ("after the intent", "rename", f"*{COMMIT_LOG_FILE}", 0, "after"),
    ("mid roll-forward", "write", "*/t-1/*.log", 1, "after"),
    ("at the committed mark", "rename", f"*{COMMIT_LOG_FILE}", 1, "before"),
    ("after the committed mark", "rename", f"*{COMMIT_LOG_FILE}", 1, "after"),
    ("at the staging removal", "rmtree", "*tidelog-staging*", 0, "before"),
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def job_batches() -> list[tuple[int, bytes]]:
    now, out, n = int(time.time() * 1000), [], 0
    for p in range(PARTITIONS):
        for _ in range(BATCHES):
            builder = BatchBuilder(base_offset=0)
            for i in range(5):
                n += 1
                builder.append(i, now, b"k%d" % n, b"job-%d" % n)
            out.append((p, bytes(builder.build())))
    return out


def stage(bootstrap: str, key: str) -> list[tuple[str, StagedBatch]]:
    name = "part-00000-attempt-0-task-1.batches"
    out, refs = BrokerStagedFile(bootstrap, key, name, chunk_bytes=200), []
    for p, data in job_batches():
        position = out.write(data)
        refs.append((name, StagedBatch("t", p, position, len(data), 5, crc32c(data[RECORD_BATCH_OVERHEAD:]), False)))
    assert out.close()
    return refs


def read_values(bootstrap: str, expected: int) -> list[bytes]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    tps = [KafkaTP("t", p) for p in range(PARTITIONS)]
    consumer.assign(tps)
    consumer.seek_to_beginning(*tps)
    values: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(values) < expected and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=300).values():
            values += [r.value for r in records]
    time.sleep(0.5)
    for records in consumer.poll(timeout_ms=300).values():  # nothing more than the job
        values += [r.value for r in records]
    consumer.close()
    return values


def run_step(tmp_path: Path, op: str, glob: str, skip: int, when: str) -> None:
    data = tmp_path / "data"
    data.mkdir()
    with LogManager.open(BrokerConfig.from_properties({}), [data]) as manager:
        manager.create_topic("t", PARTITIONS)
    port = free_port()
    broker = ServeProcess(data, {"listeners": f"PLAINTEXT://127.0.0.1:{port}"})
    rule = FaultRule(ops=frozenset({fileops.FileOp(op)}), path_glob=glob, kill=when, skip=skip, times=1)  # type: ignore[arg-type]
    broker.start({fileops.ENV_VAR: fileops.rules_to_json([rule])})
    try:
        key = f"job-{uuid.uuid4().hex}"
        refs = stage(broker.bootstrap, key)
        outcome: list[object] = []
        committing = threading.Thread(target=lambda: outcome.append(commit_through_broker(broker.bootstrap, key, refs)))
        committing.start()
        deadline = time.monotonic() + 30
        while broker.exit_code() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert broker.exit_code() == -9, "the kill point was never reached"
        broker.start()  # same port, no faults: completes the intent before it listens
        committing.join(120)
        assert outcome and getattr(outcome[0], "state", None) in ("published", "already committed"), outcome
        values = read_values(broker.bootstrap, PARTITIONS * BATCHES * 5)
        assert sorted(values) == sorted(b"job-%d" % n for n in range(1, PARTITIONS * BATCHES * 5 + 1))
        assert not [p for p in default_staging_root(data).glob("*") if p.is_dir()]
    finally:
        broker.stop()


@pytest.mark.parametrize(("name", "op", "glob", "skip", "when"), [STEPS[0]], ids=[STEPS[0][0]])
def test_serve_killed_after_the_intent_completes_the_job_for_the_retried_commit(
        tmp_path: Path, name: str, op: str, glob: str, skip: int, when: str) -> None:
    run_step(tmp_path, op, glob, skip, when)


@pytest.mark.soak
@pytest.mark.parametrize(("name", "op", "glob", "skip", "when"), STEPS[1:], ids=[s[0] for s in STEPS[1:]])
def test_serve_killed_at_every_commit_step_completes_the_job_once(
        tmp_path: Path, name: str, op: str, glob: str, skip: int, when: str) -> None:
    run_step(tmp_path, op, glob, skip, when)


@pytest.mark.soak
def test_serve_killed_mid_staging_reclaims_the_staged_part_once_its_lease_expires(tmp_path: Path) -> None:
    """The broker dies while a task stages (a chunk half done); the task fails. Restarted with a
    short ``tidelog.spark.staging.lease.ms``, it deletes the abandoned staging dir; the job
    staged again (Spark's retry) is committed whole."""
    data = tmp_path / "data"
    data.mkdir()
    with LogManager.open(BrokerConfig.from_properties({}), [data]) as manager:
        manager.create_topic("t", PARTITIONS)
    port = free_port()
    broker = ServeProcess(data, {"listeners": f"PLAINTEXT://127.0.0.1:{port}", "tidelog.spark.staging.lease.ms": "1000"})
    rule = FaultRule(ops=frozenset({fileops.FileOp.WRITE}), path_glob="*.batches", kill="after", skip=2, times=1)
    broker.start({fileops.ENV_VAR: fileops.rules_to_json([rule])})
    try:
        key = f"job-{uuid.uuid4().hex}"
        with pytest.raises(ConnectionError):
            stage(broker.bootstrap, key)
        broker.start()
        deadline = time.monotonic() + 10
        while any(default_staging_root(data).glob("job-*")) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(default_staging_root(data).glob("job-*")), "the abandoned staging dir was not reclaimed"
        refs = stage(broker.bootstrap, key)
        assert commit_through_broker(broker.bootstrap, key, refs).state == "published"
        values = read_values(broker.bootstrap, PARTITIONS * BATCHES * 5)
        assert sorted(values) == sorted(b"job-%d" % n for n in range(1, PARTITIONS * BATCHES * 5 + 1))
    finally:
        broker.stop()
