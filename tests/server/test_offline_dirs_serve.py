"""A disk fault under ``tidelog serve`` takes one log dir offline: its partitions answer
KAFKA_STORAGE_ERROR (produce) and LEADER_NOT_AVAILABLE (metadata), DescribeLogDirs reports the dir
with KAFKA_STORAGE_ERROR, the other dir keeps accepting; when the fault clears the dir's probe
passes, it reopens and every acknowledged record is there.

The in-process test injects faults with ``fileops.inject``; the subprocess test starts a real
``tidelog serve`` with ``TIDELOG_FAULTS`` (the seam installs it at import) and two log dirs.
"""

from __future__ import annotations

import errno
import json
import os
import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.errors import KafkaStorageError
from kafka.protocol.admin import DescribeLogDirsRequest, DescribeLogDirsResponse
from kafka.protocol.consumer import FetchResponse
from kafka.protocol.metadata import MetadataResponse
from kafka.protocol.producer import ProduceResponse
from server_helpers import TIMEOUT_S, Broker, RawClient, serve, start_broker

import server_samples as samples

from tests.cli_helpers import run_cli
from tidelog.manager import LogManager
from tidelog.manager.log_dir_failure import PROBE_FILE
from tidelog.server.errors import ErrorCode
from tidelog.storage import fileops
from tidelog.storage.config import BrokerConfig
from tidelog.storage.fileops import FaultRule, FileOp
from tidelog.topic_partition import TopicPartition as TidelogTp

FIRED: dict[str, int] = {}


@pytest.fixture(scope="module", autouse=True)
def _fault_figures() -> Iterator[None]:
    yield
    target = os.environ.get("TIDELOG_FAULT_FIGURES")
    if target:
        with open(target, "a") as out:
            out.write(json.dumps({"module": __name__, "faults_fired": sum(FIRED.values()), "tests": FIRED}) + "\n")


def _create_topic(dirs: list[Path], name: str = "t") -> None:
    """Topic ``name`` with partition 0 in ``dirs[0]`` and 1 in ``dirs[1]``, then a clean shutdown."""
    broker = BrokerConfig.from_properties({"log.dirs": ",".join(map(str, dirs))})
    with LogManager.open(broker, dirs) as manager:
        manager.create_topic(name, 2)
        assert manager.log(TidelogTp(name, 0)).dir.parent == dirs[0]


def _produce(client: RawClient, partition: int, value: bytes, topic: str = "t") -> tuple[int, int]:
    """(error code, base offset) of a one-record acks=-1 Produce v9."""
    request = samples.produce(topic, partition, samples.record_batch(value), acks=-1)
    part = client.call(request, ProduceResponse, 9).responses[0].partition_responses[0]
    return part.error_code, part.base_offset


def _metadata(client: RawClient, topic: str = "t") -> dict[int, tuple[int, int, list[int]]]:
    """partition -> (error code, leader, offline replicas), Metadata v12."""
    [found] = client.call(samples.metadata(topic), MetadataResponse, 12).topics
    return {p.partition_index: (p.error_code, p.leader_id, list(p.offline_replicas)) for p in found.partitions}


def _log_dirs(client: RawClient) -> dict[str, tuple[int, list[str]]]:
    """log dir -> (error code, topics), DescribeLogDirs v4."""
    response = client.call(DescribeLogDirsRequest(topics=None), DescribeLogDirsResponse, 4)
    return {d.log_dir: (d.error_code, [t.name for t in d.topics]) for d in response.results}


def _fetch_errors(client: RawClient) -> dict[int, int]:
    """partition -> error code of a Fetch v12 of both partitions of ``t``."""
    codes = {}
    for partition in (0, 1):
        [topic] = client.call(samples.fetch("t", partition=partition), FetchResponse, 12).responses
        codes[partition] = topic.partitions[0].error_code
    return codes


def test_offline_dir_answers_storage_errors_while_the_other_dir_serves(tmp_path: Path) -> None:
    dirs = [tmp_path / "a", tmp_path / "b"]
    _create_topic(dirs)
    manager, thread = start_broker(dirs[0], **{"log.dirs": ",".join(map(str, dirs))})
    broker = Broker(manager, thread.server, thread.server.bound[0].port)
    client = broker.connect()
    try:
        assert _produce(client, 0, b"before") == (0, 0)
        with fileops.inject(FaultRule(frozenset({FileOp.WRITE}), f"{dirs[0]}/*", error=errno.EIO)) as stats:
            assert _produce(client, 0, b"refused")[0] == ErrorCode.KAFKA_STORAGE_ERROR
            assert _produce(client, 1, b"other dir") == (0, 0)
            assert _metadata(client) == {0: (ErrorCode.LEADER_NOT_AVAILABLE, -1, [1]), 1: (0, 1, [])}
            assert _log_dirs(client) == {str(dirs[0]): (ErrorCode.KAFKA_STORAGE_ERROR, []), str(dirs[1]): (0, ["t"])}
            FIRED["in_process"] = stats.fired
        [offline] = manager.offline_log_dirs()
        assert offline.errno == errno.EIO and offline.path == dirs[0]
        assert _fetch_errors(client) == {0: ErrorCode.KAFKA_STORAGE_ERROR, 1: 0}
    finally:
        client.close()
        thread.stop()
        manager.shutdown()


def test_a_read_fault_in_a_fetch_fails_only_that_partition_and_the_dir_keeps_serving(tmp_path: Path) -> None:
    dirs = [tmp_path / "a", tmp_path / "b"]
    _create_topic(dirs)
    _create_topic(dirs, "u")  # u-0 shares dir a with t-0
    manager, thread = start_broker(dirs[0], **{"log.dirs": ",".join(map(str, dirs))})
    client = Broker(manager, thread.server, thread.server.bound[0].port).connect()
    try:
        assert _produce(client, 0, b"x") == (0, 0) and _produce(client, 1, b"y") == (0, 0)
        with fileops.inject(FaultRule(frozenset({FileOp.READ}), f"{dirs[0]}/t-0/*.log", error=errno.EIO)) as stats:
            for i in range(5):  # a consumer that keeps retrying
                assert _fetch_errors(client) == {0: ErrorCode.KAFKA_STORAGE_ERROR, 1: 0}
                assert _produce(client, 0, b"u-%d" % i, topic="u") == (0, i)  # same dir: unaffected
                assert _produce(client, 0, b"t-%d" % i) == (0, i + 1)  # the partition's appends too
            FIRED["read_fault"] = stats.fired
        assert manager.offline_log_dirs() == [] and _log_dirs(client)[str(dirs[0])][0] == 0
        assert _fetch_errors(client) == {0: 0, 1: 0}  # readable again: served at once
    finally:
        client.close()
        thread.stop()
        manager.shutdown()


def test_a_read_committed_fetch_meeting_an_unreadable_later_segment_fails_that_partition_only(
        tmp_path: Path) -> None:
    manager, thread = start_broker(tmp_path / "data")
    client = Broker(manager, thread.server, thread.server.bound[0].port).connect()
    try:
        manager.create_topic("t", 1, {"segment.bytes": "100"})  # a batch per segment
        for value in (b"a", b"b", b"c"):
            manager.append(TidelogTp("t", 0), samples.record_batch(value))
        last = sorted((tmp_path / "data" / "t-0").glob("*.log"))[-1]
        # the records come from the first segment; the search for aborted transactions walks on
        with fileops.inject(FaultRule(frozenset({FileOp.READ}), str(last), error=errno.EIO)) as stats:
            [topic] = client.call(samples.fetch("t", isolation_level=1), FetchResponse, 12).responses
            assert topic.partitions[0].error_code == ErrorCode.KAFKA_STORAGE_ERROR
            FIRED["txn_walk_read_fault"] = stats.fired
        [topic] = client.call(samples.fetch("t", isolation_level=1), FetchResponse, 12).responses  # same connection
        assert (topic.partitions[0].error_code, topic.partitions[0].high_watermark) == (0, 3)
        assert manager.offline_log_dirs() == []
    finally:
        client.close()
        thread.stop()
        manager.shutdown()


def test_serve_with_a_faulty_dir_keeps_serving_the_other_and_resumes(tmp_path: Path) -> None:
    dirs = [tmp_path / "a", tmp_path / "b"]
    _create_topic(dirs)
    # the first append to dir a fails (a full disk), and so does the first probe; the second passes
    rules = [FaultRule(frozenset({FileOp.WRITE}), f"{dirs[0]}/t-0/*", error=errno.ENOSPC, times=1),
             FaultRule(frozenset({FileOp.WRITE}), f"{dirs[0]}/{PROBE_FILE}", error=errno.ENOSPC, times=1)]
    env = {fileops.ENV_VAR: fileops.rules_to_json(rules)}
    with serve(f"log.dirs={dirs[0]},{dirs[1]}", "log.initial.task.delay.ms=600000", env=env) as served:
        bootstrap = served.bootstrap
        producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", retries=0, enable_idempotence=False)
        acked = {0: [], 1: []}
        for i in range(3):
            acked[1].append(producer.send("t", b"b-%d" % i, partition=1).get(TIMEOUT_S).offset)
        with pytest.raises(KafkaStorageError):
            producer.send("t", b"a-refused", partition=0).get(TIMEOUT_S)
        offline = served.wait_for_line(r"log dir (\S+) is offline: append of t-0 failed \[ENOSPC\]")
        assert offline.group(1) == str(dirs[0])
        client = served.connect()
        assert _log_dirs(client)[str(dirs[0])][0] == ErrorCode.KAFKA_STORAGE_ERROR
        assert _metadata(client)[0] == (ErrorCode.LEADER_NOT_AVAILABLE, -1, [1])
        code, out, err = run_cli(tmp_path / "unused", "log-dirs", "--json", "--bootstrap-server", bootstrap)
        assert code == 0, err
        shown = {d["logDir"]: d for d in json.loads(out)}
        assert shown[str(dirs[0])]["offline"] == "KAFKA_STORAGE_ERROR" and shown[str(dirs[1])]["offline"] is None
        assert [p["partition"] for p in shown[str(dirs[1])]["partitions"]] == ["t-1"]
        code, out, err = run_cli(tmp_path / "unused", "topics", "describe", "t", "--json", "--bootstrap-server",
                                 bootstrap)
        assert code == 0, err
        [described] = json.loads(out)
        assert [p["partition"] for p in described["partitions"]] == [1]
        assert [p["partition"] for p in described["offline"]] == [0]
        for i in range(3, 6):  # the healthy dir keeps accepting meanwhile
            acked[1].append(producer.send("t", b"b-%d" % i, partition=1).get(TIMEOUT_S).offset)
        served.wait_for_line(r"still offline, probe failed")
        served.wait_for_line(rf"{re.escape(str(dirs[0]))}: back online, 1 partition\(s\) reopened")
        assert _log_dirs(client)[str(dirs[0])][0] == 0 and _metadata(client)[0] == (0, 1, [])
        client.close()
        producer.close()
        producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=False)
        for i in range(4):
            acked[0].append(producer.send("t", b"a-%d" % i, partition=0).get(TIMEOUT_S).offset)
        producer.close()
        assert acked == {0: [0, 1, 2, 3], 1: [0, 1, 2, 3, 4, 5]}
        consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, auto_offset_reset="earliest",
                                 consumer_timeout_ms=int(TIMEOUT_S * 1000))
        consumer.assign([TopicPartition("t", 0), TopicPartition("t", 1)])
        got: dict[int, list[bytes]] = {0: [], 1: []}
        for _ in range(10):
            record = next(consumer)
            got[record.partition].append(record.value)
        consumer.close()
        assert got == {0: [b"a-%d" % i for i in range(4)], 1: [b"b-%d" % i for i in range(6)]}
        FIRED["serve_subprocess"] = 2  # the rules' times: one append, one probe
    with LogManager.open(BrokerConfig.from_properties({}), dirs) as manager:
        assert manager.log(TidelogTp("t", 0)).log_end_offset == 4
        assert manager.log(TidelogTp("t", 1)).log_end_offset == 6


def test_serve_starts_with_a_dir_that_fails_to_open_and_loads_it_when_its_probe_passes(tmp_path: Path) -> None:
    dirs = [tmp_path / "a", tmp_path / "b"]
    _create_topic(dirs)
    rules = [FaultRule(frozenset({FileOp.WRITE}), f"{dirs[1]}/.lock", error=errno.EIO, times=1)]
    env = {fileops.ENV_VAR: fileops.rules_to_json(rules)}
    with serve(f"log.dirs={dirs[0]},{dirs[1]}", env=env) as served:
        assert re.search(r"tidelog serving .* listening on", served.banner.string)
        assert f"{dirs[1]} (OFFLINE: log dir {dirs[1]} is offline: opening the log dir failed [EIO]" in served.banner.string
        served.wait_for_line(rf"{re.escape(str(dirs[1]))}: back online, loaded with 1 partition\(s\)")
        producer = KafkaProducer(bootstrap_servers=served.bootstrap, acks="all", enable_idempotence=False)
        assert producer.send("t", b"b", partition=1).get(TIMEOUT_S).offset == 0
        producer.close()
        FIRED["serve_start_up"] = 1


def test_serve_neither_a_full_disk_nor_an_unreadable_file_flaps_and_healthy_paths_keep_producing(
        tmp_path: Path) -> None:
    dirs = [tmp_path / "a", tmp_path / "b", tmp_path / "c"]
    broker = BrokerConfig.from_properties({"log.dirs": ",".join(map(str, dirs))})
    with LogManager.open(broker, dirs) as manager:
        manager.create_topic("t", 3, {"segment.bytes": "100"})  # a batch per segment
        manager.create_topic("u", 3)
        for name in ("t", "u"):  # partition i in dirs[i]
            assert [manager.log(TidelogTp(name, p)).dir.parent for p in range(3)] == dirs
    # a: t-0's second segment, written once serving, cannot be read; b: a nearly full disk
    # (small writes pass, 4 KiB or more fail)
    rules = [FaultRule(frozenset({FileOp.READ}), f"{dirs[0]}/t-0/00000000000000000001.log", error=errno.EIO),
             FaultRule(frozenset({FileOp.WRITE, FileOp.TRUNCATE}), f"{dirs[1]}/*", error=errno.ENOSPC,
                       min_size=4096)]
    env = {fileops.ENV_VAR: fileops.rules_to_json(rules)}
    with serve("log.dirs=" + ",".join(map(str, dirs)), "log.initial.task.delay.ms=600000", env=env) as served:
        client = served.connect()
        producer = KafkaProducer(bootstrap_servers=served.bootstrap, acks="all", retries=0, enable_idempotence=False)
        assert [_produce(client, 0, b"t-%d" % i) for i in range(2)] == [(0, 0), (0, 1)]
        acked: dict[int, list[int]] = {0: [], 2: []}
        refused = 0
        deadline = time.monotonic() + 4.5  # the old one-page probe brought b back (and lost it) every ~1 s
        while time.monotonic() < deadline:
            [topic] = client.call(samples.fetch("t", 1), FetchResponse, 12).responses
            assert topic.partitions[0].error_code == ErrorCode.KAFKA_STORAGE_ERROR  # t-0 only
            refused += _produce(client, 1, b"x" * 8192, topic="u")[0] == ErrorCode.KAFKA_STORAGE_ERROR
            for partition in acked:  # u-0 shares dir a with the unreadable file; u-2 is on c
                acked[partition].append(producer.send("u", b"v", partition=partition).get(TIMEOUT_S).offset)
            time.sleep(0.1)
        producer.close()
        assert refused > 20 and all(offsets == list(range(len(offsets))) for offsets in acked.values())
        client.close()
        FIRED["serve_no_flap"] = 1 + len(acked[0])
        served.process.send_signal(signal.SIGTERM)
        assert served.process.wait(timeout=60) == 0
        err = served.rest()
    assert f"log dir {dirs[0]} is offline" not in err  # one unreadable file: only its reads failed
    assert err.count(f"log dir {dirs[1]} is offline: append of u-1 failed [ENOSPC]") == 1
    assert f"{dirs[1]}: back online" not in err and f"{dirs[1]}: still offline, probe failed" in err
    assert err.count("t-0: fetch failed, only this read fails") == 1  # logged once, not per fetch


def test_serve_with_a_full_disk_while_a_partition_loads_brings_it_back_instead_of_setting_it_aside(
        tmp_path: Path) -> None:
    dirs = [tmp_path / "a", tmp_path / "b"]
    _create_topic(dirs)
    broker = BrokerConfig.from_properties({"log.dirs": ",".join(map(str, dirs))})
    with LogManager.open(broker, dirs) as manager:
        manager.append(TidelogTp("t", 0), samples.record_batch(b"before"))
    # the first write of t-0's load (a checkpoint, a snapshot) meets a full disk; space is then freed
    rules = [FaultRule(frozenset({FileOp.WRITE, FileOp.OPEN}), f"{dirs[0]}/t-0/*", error=errno.ENOSPC, times=1)]
    env = {fileops.ENV_VAR: fileops.rules_to_json(rules)}
    with serve(f"log.dirs={dirs[0]},{dirs[1]}", env=env) as served:
        assert re.search(r"tidelog serving .* listening on", served.banner.string)
        assert f"{dirs[0]} (OFFLINE: log dir {dirs[0]} is offline: loading of t-0 failed [ENOSPC]" in served.banner.string
        served.wait_for_line(rf"{re.escape(str(dirs[0]))}: back online, loaded with 1 partition\(s\)")
        bootstrap = served.bootstrap
        producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=False)
        assert producer.send("t", b"after", partition=0).get(TIMEOUT_S).offset == 1
        producer.close()
        consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, auto_offset_reset="earliest",
                                 consumer_timeout_ms=int(TIMEOUT_S * 1000))
        consumer.assign([TopicPartition("t", 0)])
        assert [next(consumer).value for _ in range(2)] == [b"before", b"after"]
        consumer.close()
        FIRED["serve_load_fault"] = 1
    with LogManager.open(broker, dirs) as manager:
        assert manager.set_aside() == [] and manager.log(TidelogTp("t", 0)).log_end_offset == 2
