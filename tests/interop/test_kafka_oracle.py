"""The harness itself: Kafka resolves from Maven Central, its broker starts, stops cleanly and dies
uncleanly as a real install does. Everything else in tests/interop that needs Kafka relies on this."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kafka_oracle import KafkaBroker, KafkaDistribution
from kafka_oracle.dump import dump_log_segments

pytestmark = pytest.mark.xdist_group("kafka_broker")


def test_the_classpath_holds_the_broker_and_its_tools(kafka4: KafkaDistribution, kafka3: KafkaDistribution) -> None:
    for distribution, tools_jar in ((kafka4, f"kafka-tools-{kafka4.version}.jar"),
                                    (kafka3, f"kafka_2.13-{kafka3.version}.jar")):
        jars = {Path(jar).name for jar in distribution.classpath().split(os.pathsep)}
        assert f"kafka_2.13-{distribution.version}.jar" in jars
        assert tools_jar in jars
        assert distribution.classpath() == distribution.classpath()  # cached, same answer


def test_a_clean_stop_writes_kafkas_shutdown_marker_and_a_kill_does_not(kafka_broker: KafkaBroker) -> None:
    assert (kafka_broker.log_dir / "meta.properties").read_text().count("cluster.id=") == 1
    assert (kafka_broker.log_dir / "__cluster_metadata-0").is_dir()
    kafka_broker.stop()
    assert not kafka_broker.running
    assert (kafka_broker.log_dir / ".kafka_cleanshutdown").exists()
    kafka_broker.start()
    assert not (kafka_broker.log_dir / ".kafka_cleanshutdown").exists()  # a running broker removes it
    kafka_broker.kill()
    assert not (kafka_broker.log_dir / ".kafka_cleanshutdown").exists()
    kafka_broker.start()  # recovers after kill -9 and serves again
    assert kafka_broker.running


def test_dump_log_segments_reports_a_missing_file(kafka4: KafkaDistribution, tmp_path: Path) -> None:
    missing = tmp_path / "00000000000000000000.log"
    with pytest.raises(AssertionError, match="DumpLogSegments exited"):
        dump_log_segments(kafka4, [missing], "--deep-iteration").check()
