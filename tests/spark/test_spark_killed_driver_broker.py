"""A Spark driver writing through a running ``tidelog serve`` (its data dir owned by the broker,
so ``format("tidelog")`` stages through it), SIGKILLed with every process of its session at
each stage of the job: while its tasks stage, and once the broker holds the job's intent.
Consumers never see part of the job; a job killed while staging leaves nothing and its staging
is deleted when its lease expires (``tidelog.spark.staging.lease.ms`` made short here), and the
driver run again writes it whole; a job killed once its commit is in the broker's hands is
completed by the broker, whole, exactly once.

Minutes of CPU (two Spark drivers per case): ``make soak``.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_spark_killed_driver import DRIVER, PARTITIONS, kill_session, serve_count

from reliability.broker import ServeProcess
from tidelog.manager import LogManager
from tidelog.storage.commit_log import COMMIT_LOG_FILE, default_staging_root
from tidelog.storage.config import BrokerConfig

ROWS = 100_000
DRIVER_TIMEOUT_S = 240
# a lease must outlast the longest pause of a job between chunks (and before its commit): 20 s here
OVERRIDES = {"log.segment.bytes": str(1 << 30), "tidelog.spark.staging.lease.ms": "20000"}


def staged_files(data: Path) -> list[Path]:
    return list(default_staging_root(data).glob("job-*/*.batches"))


def reached(data: Path, when: str) -> bool:
    if when == "staging":
        return any(f.stat().st_size > 0 for f in staged_files(data))
    commits = data / COMMIT_LOG_FILE
    return commits.exists() and b'"job-' in commits.read_bytes()  # the broker has the job's intent (or more)


def kill_driver_at(data: Path, when: str) -> None:
    driver = subprocess.Popen([sys.executable, str(DRIVER), str(data), str(ROWS)], start_new_session=True,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    deadline = time.monotonic() + DRIVER_TIMEOUT_S
    try:
        while not reached(data, when):
            assert time.monotonic() < deadline, f"the driver never reached {when}"
            assert driver.poll() is None, f"the driver finished before it could be killed at {when}"
            time.sleep(0.001)
    finally:
        kill_session(driver.pid)
        driver.wait()


def run_driver(data: Path) -> None:
    done = subprocess.run([sys.executable, str(DRIVER), str(data), str(ROWS)], capture_output=True, text=True,
                          timeout=DRIVER_TIMEOUT_S)
    assert "done" in done.stdout, done.stderr[-3000:]


@pytest.mark.soak
@pytest.mark.parametrize("when", ["staging", "committing"])
def test_a_driver_killed_while_writing_through_serve_leaves_none_or_all_of_its_job(tmp_path: Path, when: str) -> None:
    data = tmp_path / "data"
    with LogManager.open(BrokerConfig.from_properties({}), [data]) as manager:
        manager.create_topic("t", PARTITIONS)
    broker = ServeProcess(data, OVERRIDES)
    broker.start()
    try:
        kill_driver_at(data, when)
        if when == "staging":
            assert serve_count(broker.bootstrap) == 0  # nothing of a job that never reached its commit
            deadline = time.monotonic() + 60
            while staged_files(data) and time.monotonic() < deadline:
                time.sleep(0.2)
            assert not staged_files(data), "the dead driver's staging was not reclaimed after its lease"
            run_driver(data)  # the job again, whole
        else:
            deadline = time.monotonic() + 60
            while b'"committed"' not in (data / COMMIT_LOG_FILE).read_bytes() and time.monotonic() < deadline:
                time.sleep(0.1)
        assert serve_count(broker.bootstrap) == ROWS
        assert not staged_files(data)
    finally:
        assert broker.stop() == 0


STREAM_DRIVER = Path(__file__).with_name("spark_stream_write_driver.py")
FILES, FILE_ROWS = 4, 20_000


@pytest.mark.soak
def test_a_streaming_driver_killed_mid_query_is_completed_by_its_rerun_exactly_once(tmp_path: Path) -> None:
    """Killed once the broker has committed a micro-batch and the next is staging or committing;
    the same query run again on its checkpoint writes the rest: every row once."""
    data, source, checkpoint = tmp_path / "data", tmp_path / "in", tmp_path / "checkpoint"
    source.mkdir()
    for f in range(FILES):
        (source / f"{f}.json").write_text("".join(f'{{"key": "k{i}", "value": "v{i}"}}\n'
                                                  for i in range(f * FILE_ROWS, (f + 1) * FILE_ROWS)))
    with LogManager.open(BrokerConfig.from_properties({}), [data]) as manager:
        manager.create_topic("t", PARTITIONS)
    broker = ServeProcess(data, OVERRIDES)
    broker.start()
    args = [sys.executable, str(STREAM_DRIVER), broker.bootstrap, str(source), str(checkpoint)]
    try:
        driver = subprocess.Popen(args, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                  text=True)
        deadline = time.monotonic() + DRIVER_TIMEOUT_S
        try:
            while not (data / COMMIT_LOG_FILE).exists() or b'"last_batch"' not in (data / COMMIT_LOG_FILE).read_bytes():
                assert time.monotonic() < deadline and driver.poll() is None, "no micro-batch was committed"
                time.sleep(0.001)
            while not staged_files(data) and b'"intent"' not in (data / COMMIT_LOG_FILE).read_bytes():
                assert time.monotonic() < deadline and driver.poll() is None, "the next micro-batch never began"
                time.sleep(0.001)
        finally:
            kill_session(driver.pid)
            driver.wait()
        visible = serve_count(broker.bootstrap)
        assert visible % FILE_ROWS == 0 and visible < FILES * FILE_ROWS  # whole micro-batches only
        done = subprocess.run(args, capture_output=True, text=True, timeout=DRIVER_TIMEOUT_S)
        assert "done" in done.stdout, done.stderr[-3000:]
        assert serve_count(broker.bootstrap) == FILES * FILE_ROWS
    finally:
        assert broker.stop() == 0
