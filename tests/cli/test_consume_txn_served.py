"""``tidelog consume --isolation-level`` over transactions written through the broker by
kafka-python's transactional producer: committed, aborted, committed, and one left open (a
producer that began, sent and never ended), with plain records after it. read_committed shows the
committed records and, in the partition of the open transaction, nothing from its first offset on;
read_uncommitted shows every record. The same through ``--bootstrap-server`` while the broker
runs, and from the files after it stopped (the open transaction comes back from the producer
snapshot, so the last stable offset is the same)."""

from __future__ import annotations

from pathlib import Path

import orjson
from kafka import KafkaProducer
from test_remote_cli import start_broker

from tests.cli_helpers import run_cli

TOPIC = "served-txn"


def produce(bootstrap: str) -> tuple[KafkaProducer, dict[str, list[str]]]:
    """What each kind of record is, by value; returns the producer left in its transaction."""
    kinds: dict[str, list[str]] = {"committed": [], "aborted": [], "open": [], "plain": []}
    txn = KafkaProducer(bootstrap_servers=bootstrap, transactional_id="cli-txn", linger_ms=5)
    txn.init_transactions()
    for outcome, first in (("commit", 0), ("abort", 10), ("commit", 20)):
        txn.begin_transaction()
        for i in range(first, first + 6):
            value = f"{outcome}-{i}"
            txn.send(TOPIC, value=value.encode(), partition=i % 2)
            kinds["committed" if outcome == "commit" else "aborted"].append(value)
        txn.flush()
        txn.commit_transaction() if outcome == "commit" else txn.abort_transaction()
    txn.close()
    hanging = KafkaProducer(bootstrap_servers=bootstrap, transactional_id="cli-hanging", linger_ms=5)
    hanging.init_transactions()
    hanging.begin_transaction()
    for i in range(3):
        hanging.send(TOPIC, value=f"open-{i}".encode(), partition=1)
        kinds["open"].append(f"open-{i}")
    hanging.flush()
    plain = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    for i in range(4):
        plain.send(TOPIC, value=f"plain-{i}".encode(), partition=i % 2)
        kinds["plain"].append(f"plain-{i}")
    plain.flush()
    plain.close()
    return hanging, kinds


def consumed(data: Path, level: str, *bootstrap: str) -> list[tuple[int, str]]:
    code, out, err = run_cli(data, "consume", TOPIC, "--from-beginning", "--format", "json", "--isolation-level",
                             level, *bootstrap)
    assert code == 0, err
    return sorted((r["partition"], r["value"]) for r in map(orjson.loads, out.splitlines()))


def test_read_committed_over_a_kafka_python_transactional_producer(tmp_path: Path) -> None:
    data = tmp_path / "data"
    broker = start_broker(data)
    hanging = None
    try:
        broker.manager.create_topic(TOPIC, 2)
        hanging, kinds = produce(broker.bootstrap)
        live = {level: consumed(data, level, "--bootstrap-server", broker.bootstrap)
                for level in ("read_committed", "read_uncommitted")}
    finally:
        broker.stop()  # before the hanging producer closes: nothing may end its transaction
        if hanging is not None:
            hanging.close(timeout=1)
    stopped = {level: consumed(data, level) for level in ("read_committed", "read_uncommitted")}
    committed = sorted([(i % 2, v) for i, v in enumerate(kinds["committed"][:6])]
                       + [(i % 2, v) for i, v in enumerate(kinds["committed"][6:])]
                       + [(0, v) for v in kinds["plain"][0::2]])  # partition 1 stops at the open transaction
    everything = sorted(committed + [(i % 2, v) for i, v in enumerate(kinds["aborted"])]
                        + [(1, v) for v in kinds["open"]] + [(1, v) for v in kinds["plain"][1::2]])
    assert live["read_committed"] == stopped["read_committed"] == committed
    assert live["read_uncommitted"] == stopped["read_uncommitted"] == everything
