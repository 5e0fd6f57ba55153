"""``tidelog consume --isolation-level``: read_committed stops at the last stable offset and skips
aborted transactions, locally and through ``--bootstrap-server`` (kafka-python's read_committed
consumer against tidelog's broker); read_uncommitted, the default, prints them.

The partition holds what a transactional producer leaves (as a Kafka broker writes it: markers,
and a ``.txnindex`` entry for the aborted transaction)::

    0 plain p0   1 pid1 c1   2 pid2 a1   3 pid1 COMMIT   4 plain p1   5 pid2 a2   6 pid2 ABORT
    7 pid1 c2    8 pid1 COMMIT   9 plain p2
"""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from test_remote_cli import start_broker

from tests.cli_helpers import run_cli
from tidelog.manager import LogManager
from tidelog.records import BatchBuilder, build_end_txn_marker_batch
from tidelog.storage.config import BrokerConfig
from tidelog.storage.txn_index import AbortedTxn
from tidelog.topic_partition import TopicPartition

TP = TopicPartition("txn", 0)
T0 = 1_700_000_000_000
COMMITTED = [(0, "p0"), (1, "c1"), (4, "p1"), (7, "c2"), (9, "p2")]
EVERYTHING = [(0, "p0"), (1, "c1"), (2, "a1"), (4, "p1"), (5, "a2"), (7, "c2"), (9, "p2")]


def data(offset: int, value: str, producer_id: int = -1) -> bytes:
    txn = {"producer_id": producer_id, "producer_epoch": 0, "base_sequence": offset, "is_transactional": True}
    builder = BatchBuilder(base_offset=offset, **(txn if producer_id >= 0 else {}))
    builder.append(offset, T0 + offset, None, value.encode())
    return builder.build()


def marker(offset: int, producer_id: int, commit: bool) -> bytes:
    return build_end_txn_marker_batch(commit=commit, producer_id=producer_id, producer_epoch=0, coordinator_epoch=0,
                                      base_offset=offset, timestamp=T0 + offset)


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    path = tmp_path / "data"
    with LogManager.open(BrokerConfig.from_properties({}), [path]) as manager:
        manager.create_topic(TP.topic, 1)
        log = manager.log(TP)
        for batch in (data(0, "p0"), data(1, "c1", 1), data(2, "a1", 2), marker(3, 1, True), data(4, "p1"),
                      data(5, "a2", 2), marker(6, 2, False), data(7, "c2", 1), marker(8, 1, True), data(9, "p2")):
            log.append_as_follower(batch)
        log.active_segment.txn_index.append(AbortedTxn(producer_id=2, first_offset=2, last_offset=6,
                                                       last_stable_offset=7))
        log.update_high_watermark(log.log_end_offset)
    return path


def printed(out: bytes) -> list[tuple[int, str]]:
    return [(r["offset"], r["value"]) for r in map(orjson.loads, out.splitlines())]


@pytest.mark.parametrize(("args", "expected"), [
    ((), EVERYTHING),
    (("--isolation-level", "read_uncommitted"), EVERYTHING),
    (("--isolation-level", "read_committed"), COMMITTED),
], ids=["default", "read_uncommitted", "read_committed"])
def test_local_isolation_levels(data_dir: Path, args: tuple[str, ...], expected: list[tuple[int, str]]) -> None:
    code, out, err = run_cli(data_dir, "consume", TP.topic, "--from-beginning", "--format", "json", *args)
    assert code == 0, err
    assert printed(out) == expected
    assert err == f"Processed a total of {len(expected)} messages\n"


def test_read_committed_through_the_broker_matches_the_local_mode(data_dir: Path) -> None:
    broker = start_broker(data_dir)
    try:
        results = {level: run_cli(data_dir, "consume", TP.topic, "--from-beginning", "--format", "json",
                                  "--isolation-level", level, "--bootstrap-server", broker.bootstrap)
                   for level in ("read_committed", "read_uncommitted")}
    finally:
        broker.stop()
    assert printed(results["read_committed"][1]) == COMMITTED, results["read_committed"][2]
    assert printed(results["read_uncommitted"][1]) == EVERYTHING, results["read_uncommitted"][2]


def test_an_unknown_isolation_level_is_a_usage_error(data_dir: Path) -> None:
    code, _, err = run_cli(data_dir, "consume", TP.topic, "--isolation-level", "serializable")
    assert code == 2 and "read_committed" in err
