"""Stored topic overrides made loadable (storage/stored_overrides.py): written under older rules or
by a Kafka broker, they never keep a partition from loading."""

from __future__ import annotations

from tidelog.storage.config import BrokerConfig
from tidelog.storage.stored_overrides import loadable_overrides


def test_a_stored_override_out_of_range_loads_as_the_nearest_bound() -> None:
    usable, notes = loadable_overrides(BrokerConfig(), {"segment.index.bytes": "8", "retention.ms": "-9",
                                                        "cleanup.policy": "compact"})
    assert usable == {"segment.index.bytes": "12", "retention.ms": "-1", "cleanup.policy": "compact"}
    assert notes == [
        "retention.ms=-9 loaded as -1: Invalid value -9 for configuration retention.ms: Value must be at least -1",
        "segment.index.bytes=8 loaded as 12: Invalid value 8 for configuration segment.index.bytes: "
        "Value must be at least 12"]
    assert BrokerConfig().log_config(usable).segment_index_bytes == 12


def test_a_stored_override_that_cannot_be_used_is_left_out() -> None:
    usable, notes = loadable_overrides(BrokerConfig(), {"segment.bytes": "big", "no.such.key": "1",
                                                        "min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"})
    assert usable == {"max.compaction.lag.ms": "5"}
    assert [note.split(" left out")[0] for note in notes] == ["no.such.key=1", "segment.bytes=big",
                                                             "min.compaction.lag.ms=10"]
