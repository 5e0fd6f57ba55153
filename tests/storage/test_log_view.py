"""LogView: a read-only view of log dirs that a LogManager (or Kafka) owns meanwhile.

Checked against brute force (every batch header / record of every segment, scanned whole) and
against what the owning LogManager reports.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tidelog.manager import LogManager
from tidelog.records import BatchBuilder
from tidelog.records.scan import scan_batches, walk_batch_headers
from tidelog.storage.config import BrokerConfig
from tidelog.storage.log_view import DataLossError, LogView, is_data_dir
from tidelog.testing import FakeClock, FakeScheduler
from tidelog.topic_partition import TopicPartition

T0 = 1_700_000_000_000
TP = TopicPartition("t", 0)


def open_manager(log_dir: Path, **props: str) -> LogManager:
    clock = FakeClock(T0)
    config = {"log.dirs": str(log_dir), "log.segment.bytes": "2048", "log.index.interval.bytes": "128",
              "log.retention.check.interval.ms": "1000000", **props}
    return LogManager.open(BrokerConfig.from_properties(config), [log_dir], clock=clock, scheduler=FakeScheduler(clock))


def append(manager: LogManager, tp: TopicPartition, count: int, ts: list[int] | None = None) -> None:
    b = BatchBuilder(base_offset=0)
    for i in range(count):
        b.append(i, T0 + i if ts is None else ts[i], b"k%d" % i, b"value-%d" % i)
    manager.append(tp, b.build())


def append_at(manager: LogManager, tp: TopicPartition, offsets: list[int], timestamps: list[int]) -> None:
    """One batch holding exactly ``offsets`` (gaps allowed), as a follower (or the cleaner) writes."""
    b = BatchBuilder(base_offset=offsets[0])
    for o, t in zip(offsets, timestamps):
        b.append(o, t, b"k", b"v%d" % o)
    manager.log(tp).append_as_follower(b.build())


def all_batches(dir: Path) -> list[tuple[int, int, int, int]]:
    """Brute force: ``(segment base, position, base offset, last offset)`` of every batch."""
    out = []
    for log_file in sorted(dir.glob("*.log")):
        walked = walk_batch_headers(log_file.read_bytes())
        base = int(log_file.name.split(".")[0])
        for p, b, last in zip(walked.batches["position"], walked.batches["base_offset"],
                              walked.batches["last_offset"]):
            out.append((base, int(p), int(b), int(last)))
    return out


def all_records(dir: Path) -> list[tuple[int, int]]:
    """Brute force: ``(offset, timestamp)`` of every record, in offset order."""
    out = []
    for log_file in sorted(dir.glob("*.log")):
        result = scan_batches(log_file.read_bytes())
        out.extend(zip(result.offset.tolist(), result.timestamp.tolist()))
    return out


@pytest.fixture
def manager(tmp_path: Path):  # type: ignore[no-untyped-def]
    m = open_manager(tmp_path / "logs")
    yield m
    m.shutdown()


# --- listing --------------------------------------------------------------------------------

def test_partitions_skip_renamed_and_unparsable_dirs(tmp_path: Path, manager: LogManager) -> None:
    manager.create_topic("t", 2)
    log_dir = tmp_path / "logs"
    for name in ("t-5.0123456789abcdef0123456789abcdef-delete", "t-6.0123456789abcdef0123456789abcdef-stray",
                 "t-7.0123456789abcdef0123456789abcdef-future", "not_a_partition", ".hidden-0"):
        (log_dir / name).mkdir()
    view = LogView([log_dir])
    assert list(view.partitions()) == [TopicPartition("t", 0), TopicPartition("t", 1)]
    assert view.topics() == ["t"]
    assert is_data_dir(log_dir)
    assert not is_data_dir(tmp_path)  # holds only "logs", which is no partition dir
    assert not is_data_dir(tmp_path / "missing")


def test_partitions_span_several_log_dirs(tmp_path: Path) -> None:
    dirs = [tmp_path / "a", tmp_path / "b"]
    clock = FakeClock(T0)
    config = BrokerConfig.from_properties({"log.dirs": ",".join(map(str, dirs))})
    m = LogManager.open(config, dirs, clock=clock, scheduler=FakeScheduler(clock))
    try:
        m.create_topic("x", 4)
        found = LogView(dirs).partitions()
        assert sorted(found) == [TopicPartition("x", p) for p in range(4)]
        assert {d.parent for d in found.values()} == set(dirs)
    finally:
        m.shutdown()


# --- bounds ---------------------------------------------------------------------------------

def test_bounds_match_the_owner_across_segments(manager: LogManager) -> None:
    manager.create_topic("t", 1)
    for _ in range(30):
        append(manager, TP, 7)
    log = manager.log(TP)
    assert log.num_segments >= 3
    view = LogView([log.dir.parent]).partition(TP)
    bounds = view.refresh()
    assert (bounds.log_start_offset, bounds.end_offset) == (0, log.log_end_offset) == (0, 210)
    assert [s.base_offset for s in view.segments] == [s.base_offset for s in log.segments]


def test_end_follows_appends_rolls_and_retention_while_the_owner_writes(manager: LogManager) -> None:
    manager.create_topic("t", 1)
    log = manager.log(TP)
    view = LogView([log.dir.parent]).partition(TP)
    assert view.refresh().end_offset == 0
    seen = []
    for round in range(25):
        append(manager, TP, 5)
        seen.append(view.refresh().end_offset)
    assert seen == [5 * (i + 1) for i in range(25)]
    assert log.num_segments >= 2  # rolled under the view
    manager.delete_records(TP, 60)
    manager.checkpoint_log_start_offsets()
    assert view.refresh().log_start_offset == 60
    with pytest.raises(DataLossError):
        view.locate(10)
    manager.run_retention()  # segments wholly below 60 are renamed .deleted, then deleted
    bounds = view.refresh()
    assert bounds.log_start_offset == 60 and bounds.end_offset == 125
    assert view.segments[0].base_offset <= 60


def test_end_stops_before_a_partial_or_corrupt_tail(tmp_path: Path, manager: LogManager) -> None:
    manager.create_topic("t", 1)
    append(manager, TP, 10)
    log = manager.log(TP)
    view = LogView([log.dir.parent]).partition(TP)
    assert view.refresh().end_offset == 10
    b = BatchBuilder(base_offset=10)
    b.append(10, T0, b"k", b"v")
    raw = b.build()
    active = log.segments[-1].log.path if hasattr(log.segments[-1].log, "path") else sorted(log.dir.glob("*.log"))[-1]
    with open(active, "ab") as f:  # half a batch: the owner is still writing it
        f.write(raw[: len(raw) // 2])
    assert view.refresh().end_offset == 10
    with open(active, "ab") as f:  # the rest, with a CRC byte flipped
        rest = bytearray(raw[len(raw) // 2:])
        rest[-1] ^= 0xFF
        f.write(rest)
    assert view.refresh().end_offset == 10


def test_a_deleted_partition_is_data_loss(tmp_path: Path, manager: LogManager) -> None:
    manager.create_topic("t", 1)
    append(manager, TP, 3)
    view = LogView([tmp_path / "logs"])
    pview = view.partition(TP)
    pview.refresh()
    manager.delete_topic("t")
    with pytest.raises(DataLossError):
        pview.refresh()
    with pytest.raises(DataLossError):
        view.partition(TopicPartition("gone", 0))


# --- lookups --------------------------------------------------------------------------------

layouts = st.lists(  # batches: (records, gap before the batch)
    st.tuples(st.integers(1, 12), st.integers(0, 5)), min_size=1, max_size=60)


def build_gapped_log(tmp_path: Path, layout: list[tuple[int, int]], seed: int, interval: str) -> tuple[LogManager, int]:
    """A partition whose batches hold ``count`` records after ``gap`` missing offsets (random
    timestamps, not monotonic); returns the manager and the log end offset."""
    rng = np.random.default_rng(seed)
    m = open_manager(tmp_path / "logs", **{"log.index.interval.bytes": interval})
    m.create_topic("t", 1)
    offset = 0
    for count, gap in layout:
        offset += gap
        offsets = list(range(offset, offset + count))
        append_at(m, TP, offsets, [int(T0 + t) for t in rng.integers(0, 1000, count)])
        offset += count
    return m, offset


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(layout=layouts, seed=st.integers(0, 1000), interval=st.sampled_from(["1", "128", "4096"]),
       probes=st.lists(st.integers(0, 400), min_size=1, max_size=20))
def test_locate_matches_a_brute_force_scan(tmp_path_factory: pytest.TempPathFactory, layout: list[tuple[int, int]],
                                           seed: int, interval: str, probes: list[int]) -> None:
    tmp_path = tmp_path_factory.mktemp("locate")
    m, end = build_gapped_log(tmp_path, layout, seed, interval)
    try:
        view = LogView([tmp_path / "logs"]).partition(TP)
        assert view.refresh().end_offset == m.log(TP).log_end_offset
        batches = all_batches(m.log(TP).dir)
        for probe in probes:
            found = view.locate(probe)
            expected = next((b for b in batches if b[3] >= probe), None)
            if expected is None:
                assert found is None
            else:
                assert found is not None
                assert (found.segment.base_offset, found.position, found.base_offset, found.last_offset) == expected
    finally:
        m.shutdown()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(layout=layouts, seed=st.integers(0, 1000), interval=st.sampled_from(["1", "128", "4096"]),
       probes=st.lists(st.integers(-5, 1005), min_size=1, max_size=20))
# Found by this test (stop 18): the time index's floor entry (954, 19) names the batch 8..19, and
# the record of timestamp 954 is offset 18; the view scanned from offset 19 and answered None.
@example(layout=[(8, 0), (12, 0)], seed=128, interval="1", probes=[954])
def test_offset_for_timestamp_matches_a_brute_force_scan(tmp_path_factory: pytest.TempPathFactory,
                                                         layout: list[tuple[int, int]], seed: int, interval: str,
                                                         probes: list[int]) -> None:
    tmp_path = tmp_path_factory.mktemp("times")
    m, _ = build_gapped_log(tmp_path, layout, seed, interval)
    try:
        view = LogView([tmp_path / "logs"]).partition(TP)
        view.refresh()
        records = all_records(m.log(TP).dir)
        for probe in probes:
            target = T0 + probe
            expected = next((o for o, t in records if t >= target), None)
            assert view.offset_for_timestamp(target) == expected
            owner = m.log(TP).fetch_offset_by_timestamp(target)
            assert (owner.offset if owner is not None else None) == expected
    finally:
        m.shutdown()


def test_read_batches_covers_the_range_and_survives_a_deleted_segment(manager: LogManager) -> None:
    manager.create_topic("t", 1)
    for _ in range(30):
        append(manager, TP, 7)
    log = manager.log(TP)
    view = LogView([log.dir.parent]).partition(TP)
    view.refresh()
    offsets = [o for buf in view.read_batches(15, 150) for o in scan_batches(buf).offset.tolist()]
    assert offsets[0] <= 15 and offsets[-1] >= 149
    assert set(range(15, 150)) <= set(offsets)
    assert offsets == sorted(offsets)
    manager.delete_records(TP, 100)
    manager.checkpoint_log_start_offsets()
    manager.run_retention()
    with pytest.raises(DataLossError):
        list(view.read_batches(15, 150))  # the listing of the last refresh points at deleted files


def test_the_view_never_writes(tmp_path: Path, manager: LogManager) -> None:
    manager.create_topic("t", 2)
    append(manager, TP, 50)
    manager.shutdown()
    before = {p: (p.stat().st_size, p.stat().st_mtime_ns) for p in (tmp_path / "logs").rglob("*")}
    view = LogView([tmp_path / "logs"])
    for tp in view.partitions():
        pv = view.partition(tp)
        pv.refresh()
        pv.locate(3)
        pv.offset_for_timestamp(T0 + 10)
        list(pv.read_batches(0, 50))
    after = {p: (p.stat().st_size, p.stat().st_mtime_ns) for p in (tmp_path / "logs").rglob("*")}
    assert before == after
    assert not any(name.endswith(".lock") for name in os.listdir(tmp_path / "logs")) or \
        (tmp_path / "logs" / ".lock").stat().st_mtime_ns == before[tmp_path / "logs" / ".lock"][1]


def test_reads_survive_a_cleaner_swap_under_the_view(tmp_path: Path) -> None:
    m = open_manager(tmp_path / "logs", **{"log.cleaner.enable": "true"})
    try:
        m.create_topic("c", 1, {"cleanup.policy": "compact", "segment.bytes": "1024"})
        tp = TopicPartition("c", 0)
        for round in range(20):
            b = BatchBuilder(base_offset=0)
            for i in range(5):
                b.append(i, T0 + round, b"key%d" % i, b"round-%d" % round)
            m.append(tp, b.build())
        log = m.log(tp)
        view = LogView([log.dir.parent]).partition(tp)
        end = view.refresh().end_offset
        before = [int(o) for buf in view.read_batches(0, end) for o in scan_batches(buf).offset]
        assert before == list(range(100))
        assert m.cleaner is not None and m.cleaner.clean_now(tp, force=True) is not None
        after = [int(o) for buf in view.read_batches(0, end) for o in scan_batches(buf).offset]  # stale listing
        assert after == [o for o, _ in all_records(log.dir)]
        assert len(after) < 100 and after[-5:] == list(range(95, 100))
        assert view.locate(0) is not None and view.locate(0).base_offset <= after[0]
    finally:
        m.shutdown()


def test_a_partition_deleted_and_created_again_is_walked_afresh(tmp_path: Path, manager: LogManager) -> None:
    manager.create_topic("t", 1)
    for _ in range(10):
        append(manager, TP, 9)
    view = LogView([tmp_path / "logs"]).partition(TP)
    assert view.refresh().end_offset == 90
    manager.delete_topic("t")
    manager.create_topic("t", 1)
    append(manager, TP, 4)
    assert view.refresh().end_offset == 4
    assert view.locate(0) is not None and view.locate(0).last_offset == 3
