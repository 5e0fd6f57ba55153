"""A topic config stored under older rules (tidelog accepted ``segment.index.bytes`` 4-11 before)
never keeps a partition from loading: it loads with the nearest usable value and a warning, and
its records stay readable and writable."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from tidelog.errors import ConfigError
from tidelog.manager import LogManager
from tidelog.records import BatchBuilder
from tidelog.storage.config import BrokerConfig
from tidelog.storage.fetch_info import FetchIsolation
from tidelog.records import iter_batches
from tidelog.topic_partition import TopicPartition

TP = TopicPartition("old", 0)


def batch(i: int) -> bytes:
    builder = BatchBuilder()
    builder.append(0, 1_700_000_000_000 + i, b"k%d" % i, b"v%d" % i)
    return builder.build()


def offsets(manager: LogManager) -> list[int]:
    log = manager.log(TP)
    found, position = [], log.log_start_offset
    while position < log.high_watermark:
        for _, read in iter_batches(log.read(position, 1 << 20, FetchIsolation.HIGH_WATERMARK).records):
            found += [r.offset for r in read.records() if r.offset >= position]
            position = read.next_offset
    return found


def store_override(data: Path, name: str, old: str, new: str) -> None:
    """Rewrite an override in the registry and in the partition's copy, as an older tidelog wrote it."""
    for path in (data / "tidelog-topics.json", *data.glob("old-*/tidelog-topic.json")):
        text = path.read_text()
        for before, after in ((f'"{name}": "{old}"', f'"{name}": "{new}"'), (f'"{name}":"{old}"', f'"{name}":"{new}"')):
            text = text.replace(before, after)
        path.write_text(text)


def test_a_stored_segment_index_bytes_below_the_minimum_loads_as_12(tmp_path: Path,
                                                                    caplog: pytest.LogCaptureFixture) -> None:
    data, broker = tmp_path / "data", BrokerConfig.from_properties({})
    with LogManager.open(broker, [data]) as manager:
        manager.create_topic("old", 1, {"segment.index.bytes": "4096", "index.interval.bytes": "0"})
        for i in range(20):
            manager.append(TP, batch(i))
    store_override(data, "segment.index.bytes", "4096", "8")
    with caplog.at_level(logging.WARNING):
        manager = LogManager.open(broker, [data])
    try:
        assert manager.set_aside() == []
        assert manager.topic_config("old").segment_index_bytes == 12
        assert "segment.index.bytes=8 loaded as 12" in caplog.text
        manager.append(TP, batch(20))  # a full index rolls the segment
        assert offsets(manager) == list(range(21))
    finally:
        manager.shutdown()
    with LogManager.open(broker, [data]) as manager:  # and again after that roll
        assert manager.set_aside() == [] and offsets(manager) == list(range(21))


@pytest.mark.parametrize("value", ["4", "11"])
def test_segment_index_bytes_below_12_is_refused_when_set(tmp_path: Path, value: str) -> None:
    with LogManager.open(BrokerConfig.from_properties({}), [tmp_path / "data"]) as manager:
        with pytest.raises(ConfigError, match=f"Invalid value {value} for configuration segment.index.bytes: "
                                              "Value must be at least 12"):
            manager.create_topic("tiny", 1, {"segment.index.bytes": value})
        assert not manager.has_topic("tiny")
        manager.create_topic("t", 1)
        with pytest.raises(ConfigError, match="Value must be at least 12"):
            manager.alter_topic_config("t", {"segment.index.bytes": value}, [])
        assert manager.topic_overrides("t") == {}
