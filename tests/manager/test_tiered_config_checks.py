"""Tiered storage's topic refusals where a topic's overrides come from elsewhere than a request:
a Kafka data dir adopted at start-up keeps only the overrides topic creation would accept
(:meth:`BrokerConfig.checked_topic_config`), so a tiered Kafka topic on a broker without the
remote tier is adopted untiered, with a warning naming the override and Kafka's refusal."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from manager_helpers import Opener
from test_kraft_metadata import CLICKS_ID, MetadataLog, feature_level_record, kafka_partition, new_topic


def tiered_kafka_dir(log_dir: Path) -> None:
    MetadataLog(log_dir / "__cluster_metadata-0").segment(
        [feature_level_record("metadata.version", 30)],
        new_topic("clicks", CLICKS_ID, 1, remote_storage_enable="true", retention_ms="60000"))
    kafka_partition(log_dir, "clicks", 0, CLICKS_ID)


def test_a_tiered_kafka_topic_is_adopted_untiered_without_the_remote_tier(
        broker: Opener, one_dir: list[Path], caplog: pytest.LogCaptureFixture) -> None:
    one_dir[0].mkdir()
    tiered_kafka_dir(one_dir[0])
    with caplog.at_level(logging.WARNING, logger="tidelog.manager"):
        manager = broker.open(one_dir)
    assert dict(manager.describe_topic("clicks").configs) == {"retention.ms": "60000"}
    assert not manager.topic_config("clicks").remote_storage_enable
    assert ("Kafka's override remote.storage.enable=true is left out: Tiered Storage functionality is disabled"
            in caplog.text)


def test_a_tiered_kafka_topic_stays_tiered_with_the_remote_tier(broker: Opener, one_dir: list[Path],
                                                                tmp_path: Path) -> None:
    one_dir[0].mkdir()
    tiered_kafka_dir(one_dir[0])
    manager = broker.open(one_dir, {"remote.log.storage.system.enable": "true",
                                    "remote.log.storage.uri": (tmp_path / "store").as_uri()})
    assert dict(manager.describe_topic("clicks").configs) == {"remote.storage.enable": "true", "retention.ms": "60000"}
