"""A Spark driver SIGKILLed once its ``format("tidelog")`` commit has begun: readers see none of
the job until the next owner of the data dir completes it, then all of it, whoever that owner is
(``tidelog serve`` at start-up, or the next job); the driver's staging is not left behind.

The driver is a subprocess (``spark_write_driver.py``) with its own local Spark session, in its
own session id; once the commit log holds the job's intent and a partition has grown, the
committing process is stopped (SIGSTOP, so the kill lands mid-commit) and every process of the
driver's session SIGKILLed: the JVM, its Python daemon and workers. Minutes of CPU, so it runs
in ``make soak``; ``make test`` covers the same protocol without Spark
(``tests/manager/test_staged_commit.py``, the ``staged_commit`` kill points).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaConsumer
from kafka import TopicPartition as KafkaTP

from reliability.broker import ServeProcess
from tidelog.manager import LogManager
from tidelog.storage.commit_log import COMMIT_LOG_FILE, default_staging_root
from tidelog.storage.config import BrokerConfig
from tidelog.storage.lock import read_lock_holder

ROWS = 300_000
PARTITIONS = 6
DRIVER = Path(__file__).with_name("spark_write_driver.py")
DRIVER_TIMEOUT_S = 240
KAFKA_DEFAULTS = {"log.segment.bytes": str(1 << 30), "log.index.interval.bytes": "4096",
                  "log.index.size.max.bytes": str(10 << 20)}  # the harness's broker uses tiny segments


def session_pids(sid: int) -> list[int]:
    """Live (not zombie) processes of session ``sid``."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.getsid(int(entry)) == sid and not _zombie(int(entry)):
                    pids.append(int(entry))
            except OSError:
                pass
    return pids


def _zombie(pid: int) -> bool:
    stat = Path(f"/proc/{pid}/stat").read_bytes()
    return stat[stat.rindex(b")") + 2:stat.rindex(b")") + 3] == b"Z"


def kill_session(sid: int) -> None:
    for _ in range(50):
        pids = session_pids(sid)
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.1)
    raise AssertionError(f"processes of session {sid} survive SIGKILL: {session_pids(sid)}")


def log_bytes(data: Path) -> int:
    return sum(f.stat().st_size for p in range(PARTITIONS) for f in (data / f"t-{p}").glob("*.log"))


def kill_driver_mid_commit(data: Path) -> None:
    """Run the driver; SIGKILL it (all of its processes) once its commit is under way."""
    driver = subprocess.Popen([sys.executable, str(DRIVER), str(data), str(ROWS)], start_new_session=True,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    commits = data / COMMIT_LOG_FILE
    deadline = time.monotonic() + DRIVER_TIMEOUT_S
    try:
        while True:
            assert time.monotonic() < deadline, "the driver never began its commit"
            assert driver.poll() is None, "the driver finished before it could be killed mid-commit"
            if commits.exists() and log_bytes(data) > 0 and b'"intent"' in commits.read_bytes():
                break
            time.sleep(0.0005)
        holder = re.search(r"pid (\d+)", read_lock_holder(data) or "")
        if holder:
            os.kill(int(holder.group(1)), signal.SIGSTOP)  # the committing process stops where it is
        assert b'"intent"' in commits.read_bytes(), "the commit completed before the kill"
    finally:
        kill_session(driver.pid)
        driver.wait()


def tidelog_count(spark: Any, data: Path) -> tuple[int, int]:
    """(rows, distinct keys) read through format("tidelog")."""
    df = spark.read.format("tidelog").option("path", str(data)).option("subscribe", "t").load()
    row = df.selectExpr("count(*) as n", "count(distinct key) as k").collect()[0]
    return int(row.n), int(row.k)


def serve_count(bootstrap: str) -> int:
    """Records of topic t consumed through the broker from the beginning to the end offsets."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, max_partition_fetch_bytes=1 << 22)
    try:
        tps = [KafkaTP("t", p) for p in range(PARTITIONS)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        ends = consumer.end_offsets(tps)
        seen = 0
        deadline = time.monotonic() + 60
        while any(consumer.position(tp) < ends[tp] for tp in tps) and time.monotonic() < deadline:
            seen += sum(len(records) for records in consumer.poll(500).values())
        return seen
    finally:
        consumer.close()


def job_dirs(data: Path) -> list[Path]:
    root = default_staging_root(data)
    return [p for p in root.iterdir() if p.is_dir()] if root.exists() else []


@pytest.mark.soak  # two Spark sessions and 300,000 rows: minutes on a 2-core machine
def test_a_driver_killed_mid_commit_leaves_none_then_all_of_its_job(spark: Any, tmp_path: Path) -> None:
    data = tmp_path / "data"
    with LogManager.open(BrokerConfig.from_properties({}), [data]) as manager:
        manager.create_topic("t", PARTITIONS)
    kill_driver_mid_commit(data)
    assert log_bytes(data) > 0 and job_dirs(data)  # part of the job reached the logs; its staging is there
    # the same crash state, for the second way of completing it (the next job)
    other = tmp_path / "other"
    shutil.copytree(data, other, ignore=shutil.ignore_patterns(".lock"))
    shutil.copytree(default_staging_root(data), default_staging_root(other))
    commits = json.loads((other / COMMIT_LOG_FILE).read_bytes())
    for job in commits["jobs"]:
        job["staging"] = str(default_staging_root(other))
    (other / COMMIT_LOG_FILE).write_text(json.dumps(commits))

    assert tidelog_count(spark, data) == (0, 0)  # nobody completed it yet: none of it is visible

    # 1. only a broker start
    broker = ServeProcess(data, KAFKA_DEFAULTS)
    broker.start()
    try:
        assert serve_count(broker.bootstrap) == ROWS
        assert tidelog_count(spark, data) == (ROWS, ROWS)
    finally:
        assert broker.stop() == 0
    assert not job_dirs(data)

    # 2. the next job (a small write) completes it first
    (spark.createDataFrame([(f"n{i}", f"next-{i}") for i in range(10)], "key string, value string")
     .write.format("tidelog").option("path", str(other)).option("topic", "t").mode("append").save())
    assert tidelog_count(spark, other) == (ROWS + 10, ROWS + 10)
    broker = ServeProcess(other, KAFKA_DEFAULTS)
    broker.start()
    try:
        assert serve_count(broker.bootstrap) == ROWS + 10
    finally:
        assert broker.stop() == 0
    assert not job_dirs(other)
