"""Range splitting (Kafka's KafkaOffsetRangeCalculator, cuts at offsets), the rate limit and
offset resolution, without Spark."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
from spark_read_data import T0, append_simple, append_with_gaps, open_manager

from tidelog.spark.offsets import canonical, format_offsets, from_dict
from tidelog.spark.options import OffsetSpec
from tidelog.spark.ranges import OffsetRange, rate_limit, resolve, split_ranges
from tidelog.storage.log_view import LogView
from tidelog.topic_partition import TopicPartition


def r(p: int, start: int, end: int, topic: str = "t") -> OffsetRange:
    return OffsetRange(topic, p, start, end)


def sizes(ranges: list[OffsetRange]) -> list[tuple[int, int, int]]:
    return [(x.partition, x.start, x.end) for x in ranges]


def test_one_range_per_partition_by_default_and_empty_ones_dropped() -> None:
    assert sizes(split_ranges([r(0, 1, 2), r(1, 5, 5), r(2, 0, 10)])) == [(0, 1, 2), (2, 0, 10)]
    assert sizes(split_ranges([r(0, 1, 2), r(1, 3, 4)], min_partitions=2)) == [(0, 1, 2), (1, 3, 4)]


def test_min_partitions_splits_big_ranges_in_proportion() -> None:
    # Kafka's own examples (KafkaOffsetRangeCalculatorSuite).
    assert sizes(split_ranges([r(1, 1, 5)], min_partitions=3)) == [(1, 1, 2), (1, 2, 3), (1, 3, 5)]
    assert sizes(split_ranges([r(1, 1, 4), r(2, 1, 2)], min_partitions=3)) == [
        (1, 1, 2), (1, 2, 4), (2, 1, 2)]
    assert sizes(split_ranges([r(1, 1, 10000), r(2, 1, 1000)], min_partitions=3)) == [
        (1, 1, 5000), (1, 5000, 10000), (2, 1, 1000)]
    got = split_ranges([r(1, 1, 10001), r(2, 1, 2)], min_partitions=4)
    assert [x.partition for x in got] == [1, 1, 1, 2] and got[0].start == 1 and got[2].end == 10001


def test_max_records_per_partition_caps_every_range() -> None:
    assert sizes(split_ranges([r(0, 0, 10), r(1, 0, 3)], max_records=4)) == [
        (0, 0, 3), (0, 3, 6), (0, 6, 10), (1, 0, 3)]
    assert len(split_ranges([r(0, 0, 100)], min_partitions=2, max_records=10)) == 10
    assert len(split_ranges([r(0, 0, 100)], min_partitions=20, max_records=50)) == 20


def test_cuts_fall_where_the_sizes_put_them_even_inside_batches() -> None:
    """Kafka's KafkaOffsetRangeCalculator cuts at offsets, whatever the batches: so do we."""
    got = split_ranges([r(0, 5, 1000)], min_partitions=7)
    assert len(got) == 7 and got[0].start == 5 and got[-1].end == 1000
    assert all(a.end == b.start for a, b in zip(got, got[1:]))
    assert max(x.size for x in got) - min(x.size for x in got) <= 1
    assert sizes(split_ranges([r(0, 0, 1000)], min_partitions=5)) == [
        (0, 0, 200), (0, 200, 400), (0, 400, 600), (0, 600, 800), (0, 800, 1000)]


def test_input_partitions_pickle_small() -> None:
    assert len(pickle.dumps(r(3, 10, 2**40, topic="orders"))) < 200


def test_rate_limit_is_proportional_and_small_shares_round_up() -> None:
    a, b, c = (TopicPartition("t", p) for p in range(3))
    latest = {a: 100, b: 10, c: 1}
    assert rate_limit(11, {a: 0, b: 0, c: 0}, latest, {}) == {a: 9, b: 1, c: 1}
    assert rate_limit(1000, {a: 0, b: 0, c: 0}, latest, {}) == latest
    assert rate_limit(5, {a: 100, b: 10}, latest, {c: 0}) == {a: 100, b: 10, c: 1}  # new partition from earliest
    assert rate_limit(5, {a: 100, b: 10, c: 1}, latest, {}) == latest


def test_offsets_json_is_canonical() -> None:
    offsets = {TopicPartition("b", 10): 1, TopicPartition("b", 2): 2, TopicPartition("a", 0): 3}
    assert list(canonical(offsets)) == ["a", "b"] and list(canonical(offsets)["b"]) == ["2", "10"]
    assert format_offsets(offsets) == '{"a":{"0":3},"b":{"2":2,"10":1}}'
    assert from_dict(canonical(offsets)) == offsets


def test_resolve_earliest_latest_special_offsets_and_timestamps(tmp_path: Path) -> None:
    m = open_manager(tmp_path / "logs")
    m.create_topic("t", 2)
    t0, t1 = TopicPartition("t", 0), TopicPartition("t", 1)
    append_simple(m, t0, 50)
    append_with_gaps(m, t1, [0, 3, 4, 9, 20, 21])
    m.delete_records(t0, 10)
    m.checkpoint_log_start_offsets()
    view = LogView([tmp_path / "logs"])
    views = {tp: view.partition(tp) for tp in (t0, t1)}
    bounds = {tp: v.refresh() for tp, v in views.items()}
    assert resolve(OffsetSpec("earliest"), bounds, views, starting=True) == {t0: 10, t1: 0}
    assert resolve(OffsetSpec("latest"), bounds, views, starting=False) == {t0: 50, t1: 22}
    assert resolve(OffsetSpec("offsets", {t0: -2, t1: -1}), bounds, views, starting=True) == {t0: 10, t1: 22}
    assert resolve(OffsetSpec("timestamp", timestamp=T0 + 5), bounds, views, starting=True) == {t0: 10, t1: 9}
    assert resolve(OffsetSpec("timestamps", {t0: T0 + 30, t1: T0 + 99}), bounds, views, starting=False) == {
        t0: 30, t1: 22}
    assert resolve(OffsetSpec("timestamp", timestamp=T0 + 99), bounds, views, starting=True,
                   no_match_strategy="latest") == {t0: 50, t1: 22}
    with pytest.raises(ValueError, match="No offset matched"):
        resolve(OffsetSpec("timestamp", timestamp=T0 + 99), bounds, views, starting=True)
    m.shutdown()
