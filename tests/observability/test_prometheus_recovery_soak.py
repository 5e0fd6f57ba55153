"""Soak: a real Prometheus watches ``tidelog serve`` recover a log dir after an unclean shutdown.

The endpoint serves before the partitions load, so the scrapes taken during start-up show the
recovery in progress (``tidelog_log_recovery_complete`` 0, ``…_partitions_loaded`` rising to
``…_partitions_total``), then complete. Building 2,000 partitions takes ~15 s and their recovery
~3 s on 2 shared cores; Prometheus scrapes every 0.25 s, so a dozen scrapes fall inside it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
from server_helpers import serve

import server_samples as samples

from kafka_oracle.broker import free_port
from prometheus_oracle import PrometheusServer
from tidelog.manager import LogManager
from tidelog.storage.config import BrokerConfig
from tidelog.storage.metadata import clean_shutdown_file
from tidelog.topic_partition import TopicPartition

PARTITIONS = 2000


def _unclean_dir(data: Path) -> None:
    """``PARTITIONS`` partitions of one batch each, left as after a crash (no clean-shutdown file)."""
    with LogManager.open(BrokerConfig.from_properties({"log.dirs": str(data)}), [data]) as manager:
        manager.create_topic("many", PARTITIONS)
        batch = samples.record_batch(b"x" * 100, b"y" * 100)
        for partition in range(PARTITIONS):
            manager.append(TopicPartition("many", partition), batch)
    clean_shutdown_file(data).unlink()


@pytest.mark.soak
def test_prometheus_sees_the_recovery_progress_of_an_unclean_start(
        tmp_path: Path, prometheus: Callable[..., PrometheusServer]) -> None:
    data = tmp_path / "data"
    _unclean_dir(data)
    port = free_port()
    prom = prometheus(f"http://127.0.0.1:{port}/metrics", scrape_interval_s=0.25)
    # the scrape loop runs (the target is down: nothing listens yet) before the broker starts
    prom.wait_for("count(up == 0)", lambda v: v == 1, "the first scrape of the not yet started broker")
    started = time.time()
    with serve(f"metrics.listener=http://127.0.0.1:{port}", data=data) as served:
        assert f"serving {PARTITIONS} partition(s)" in served.banner.string
        listening = time.time()
        prom.wait_for_scrape_after(listening)
        assert prom.value("tidelog_log_recovery_complete") == 1
        assert prom.value("tidelog_log_recovery_partitions_total") == PARTITIONS
        assert prom.value("tidelog_log_recovery_partitions_loaded") == PARTITIONS
        window = time.time() - started + 1
        complete = prom.raw_samples("tidelog_log_recovery_complete", window)
        loaded = [v for _, v in prom.raw_samples("tidelog_log_recovery_partitions_loaded", window)]
        during = [v for t, v in complete if t < listening]
        assert 0.0 in during, f"no scrape during the {listening - started:.1f} s start-up saw it incomplete: {complete}"
        assert [v for _, v in complete] == sorted(v for _, v in complete)  # 0 ... 0, 1 ... 1: never back
        assert loaded == sorted(loaded) and loaded[-1] == PARTITIONS  # rises, never falls
        assert any(0 < v < PARTITIONS for v in loaded), f"no scrape saw the load part done: {loaded}"
        assert prom.value('count(kafka_log_log_logendoffset{topic="many"} == 2)') == PARTITIONS
