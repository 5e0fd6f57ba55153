"""The manager's Prometheus families (:mod:`tidelog.manager.metrics`) over real logs: each gauge
equals what the manager reports (partition_info, explain, the cleaner's metrics), a compaction
moves max_dirty_percent and the per-partition dirty ratio as explain says, an offline dir and a
quarantined partition show, tiered topics get their copy lag, and a scrape returns while a log's
lock is held or a clean is in progress."""

from __future__ import annotations

import errno
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from manager_helpers import Opener, batch, tp
from prometheus_client import CollectorRegistry

from tidelog.cleaner.clean import CleanerBuffers, InProcessEngine
from tidelog.cleaner.throttler import Throttler
from tidelog.errors import LogDirOfflineError
from tidelog.manager import LogManager
from tidelog.manager.metrics import LogManagerCollector, RecoveryProgress, RecoveryProgressCollector, log_directory_label
from tidelog.storage import fileops
from tidelog.storage.fileops import FaultRule, FileOp
from tidelog.testing import FakeClock, FakeScheduler

COMPACT = {"cleanup.policy": "compact"}


def registry(manager: LogManager) -> CollectorRegistry:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(LogManagerCollector(manager))
    return reg


def value(reg: CollectorRegistry, name: str, **labels: object) -> float | None:
    return reg.get_sample_value(name, {k: str(v) for k, v in labels.items()})


def series(reg: CollectorRegistry, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    """Every sample of family ``name``: labels (sorted) → value."""
    return {tuple(sorted(s.labels.items())): s.value for m in reg.collect() if m.name == name for s in m.samples}


def keyed(count: int, round: int) -> bytes:
    """One batch of ``count`` records with the same keys every round (compaction keeps the last)."""
    return batch(count, value_size=40 + round % 3)


def test_log_gauges_equal_partition_info(broker: Opener) -> None:
    manager = broker.open()
    manager.create_topic("orders", 3)
    for i in range(30):
        manager.append(tp("orders", i % 2), batch(3))
    manager.delete_records(tp("orders", 1), 6)
    reg = registry(manager)
    for partition in range(3):
        info = manager.partition_info(tp("orders", partition))
        labels = {"topic": "orders", "partition": partition}
        assert value(reg, "kafka_log_log_size", **labels) == info.size
        assert value(reg, "kafka_log_log_numlogsegments", **labels) == info.segments
        assert value(reg, "kafka_log_log_logendoffset", **labels) == info.log_end_offset
        assert value(reg, "kafka_log_log_logstartoffset", **labels) == info.log_start_offset
    assert value(reg, "kafka_log_log_logendoffset", topic="orders", partition=0) == 45
    assert value(reg, "kafka_log_log_logstartoffset", topic="orders", partition=1) == 6
    assert value(reg, "kafka_log_log_numlogsegments", topic="orders", partition=0) > 1  # segment.bytes 1024
    assert value(reg, "kafka_server_replicamanager_partitioncount") == 3
    assert value(reg, "kafka_server_replicamanager_leadercount") == 3
    assert value(reg, "kafka_server_replicamanager_underreplicatedpartitions") == 0
    assert value(reg, "kafka_controller_kafkacontroller_activecontrollercount") == 1
    assert value(reg, "kafka_log_logmanager_offlinelogdirectorycount") == 0
    for path in broker.log_dirs:
        assert value(reg, "kafka_log_logmanager_logdirectoryoffline", logDirectory=f'"{path}"') == 0
    assert not series(reg, "kafka_server_brokertopicmetrics_remotecopylagbytes"), "no remote tier: no copy lag"


def test_a_compaction_moves_max_dirty_percent_and_the_dirty_ratio_as_explain_says(broker: Opener) -> None:
    manager = broker.open()
    manager.create_topic("c", 1, COMPACT)
    for i in range(40):
        manager.append(tp("c"), keyed(3, i))
    cleaner = manager.cleaner
    assert cleaner is not None
    reg = registry(manager)
    assert not series(reg, "tidelog_log_cleaner_reason"), "no series before the first selection pass"

    before = cleaner.manager.explain(tp("c"))
    assert before.cleanable_now and before.reason == "cleanable" and before.dirty_ratio > 0.5
    result = cleaner.run_once()  # selection (records the figures), then the clean
    assert result is not None and result.stats is not None
    assert value(reg, "tidelog_log_cleaner_dirty_ratio", topic="c", partition=0) == before.dirty_ratio
    assert value(reg, "tidelog_log_cleaner_reason", topic="c", partition=0, reason="cleanable") == 1
    assert value(reg, "kafka_log_logcleanermanager_max_dirty_percent") == int(100 * before.dirty_ratio)
    metrics = cleaner.metrics()
    assert value(reg, "kafka_log_logcleaner_cleaner_recopy_percent") == metrics["cleaner-recopy-percent"] < 100
    assert value(reg, "kafka_log_logcleaner_max_buffer_utilization_percent") == metrics["max-buffer-utilization-percent"]

    after = cleaner.manager.explain(tp("c"))
    assert after.dirty_ratio < before.dirty_ratio and after.reason != "cleanable"
    assert cleaner.run_once() is None  # nothing to clean: only the selection moves
    assert value(reg, "tidelog_log_cleaner_dirty_ratio", topic="c", partition=0) == after.dirty_ratio
    assert series(reg, "tidelog_log_cleaner_reason") == {
        (("partition", "0"), ("reason", after.reason), ("topic", "c")): 1.0}
    assert value(reg, "kafka_log_logcleanermanager_max_dirty_percent") == int(100 * after.dirty_ratio)
    assert value(reg, "tidelog_log_retention_reason", topic="c", partition=0, reason="compacted") == 1


def test_retention_reasons_are_the_last_pass_s(broker: Opener) -> None:
    manager = broker.open()
    manager.create_topic("small", 1, {"retention.bytes": "1500"})
    manager.create_topic("forever", 1, {"retention.ms": "-1", "retention.bytes": "-1"})
    manager.create_topic("idle", 1)
    for _ in range(40):
        manager.append(tp("small"), batch(3))
        manager.append(tp("forever"), batch(3))
    reg = registry(manager)
    assert not series(reg, "tidelog_log_retention_reason"), "no series before the first retention pass"
    planned = {p.topic_partition.topic: p.reason for p in manager.explain_retention()}
    assert planned == {"small": "deleting", "forever": "no_limit", "idle": "active_segment_only"}
    plans = manager.retention_task()
    assert {p.topic_partition.topic: p.to_json()["reason"] for p in plans} == planned
    assert {dict(k)["topic"]: dict(k)["reason"] for k in series(reg, "tidelog_log_retention_reason")} == planned
    manager.retention_task()  # the next pass: nothing more to delete
    assert value(reg, "tidelog_log_retention_reason", topic="small", partition=0, reason="within_retention") == 1


def test_an_offline_dir_shows(broker: Opener, log_dirs: list[Path]) -> None:
    manager = broker.open(log_dirs[:2])
    manager.create_topic("t", 2)
    bad = manager.log(tp("t", 0)).dir.parent
    with fileops.inject(FaultRule(frozenset({FileOp.WRITE}), f"{bad}/*", error=errno.ENOSPC)):
        with pytest.raises(LogDirOfflineError):
            manager.append(tp("t", 0), batch())
    reg = registry(manager)
    assert value(reg, "kafka_log_logmanager_offlinelogdirectorycount") == 1
    assert series(reg, "kafka_log_logmanager_logdirectoryoffline") == {
        (("logDirectory", log_directory_label(path)),): float(path == bad) for path in log_dirs[:2]}
    assert value(reg, "kafka_server_replicamanager_offlinereplicacount") == 1
    assert value(reg, "kafka_controller_kafkacontroller_offlinepartitionscount") == 1
    assert value(reg, "kafka_server_replicamanager_leadercount") == 1
    assert value(reg, "kafka_server_replicamanager_partitioncount") == 2
    assert value(reg, "kafka_log_log_size", topic="t", partition=0) is None  # no live log: no series
    broker.clock.advance(1_000)
    assert manager.probe_offline_dirs() == [bad]
    assert value(reg, "kafka_log_logmanager_offlinelogdirectorycount") == 0
    assert value(reg, "kafka_log_log_size", topic="t", partition=0) == manager.partition_info(tp("t", 0)).size


def test_a_quarantined_partition_shows(broker: Opener) -> None:
    manager = broker.open()
    manager.create_topic("c", 1, COMPACT)
    for i in range(20):
        manager.append(tp("c"), keyed(2, i))
    cleaner = manager.cleaner
    assert cleaner is not None
    log_dir = manager.log(tp("c")).dir.parent
    cleaner.manager.mark_uncleanable(tp("c"), log_dir, "injected failure")
    cleaner.manager.mark_uncleanable(tp("c"), log_dir, "injected failure")
    assert cleaner.run_once() is None  # waits in quarantine
    reg = registry(manager)
    assert series(reg, "tidelog_log_cleaner_quarantined") == {
        (("partition", "0"), ("phase", "cleaning"), ("topic", "c")): 2.0}
    assert value(reg, "kafka_log_logcleanermanager_uncleanable_partitions_count",
                 logDirectory=log_directory_label(log_dir)) == 1
    assert value(reg, "kafka_log_logcleanermanager_uncleanable_bytes",
                 logDirectory=log_directory_label(log_dir)) == cleaner.manager.uncleanable_bytes(log_dir) > 0
    assert value(reg, "tidelog_log_cleaner_reason", topic="c", partition=0, reason="quarantined") == 1
    assert cleaner.manager.explain(tp("c")).to_json()["reason"] == "quarantined"
    assert value(reg, "tidelog_log_cleaner_dirty_ratio", topic="c", partition=0) is None  # no stats weighed


def test_recovery_progress_counts_the_partitions_loaded(broker: Opener) -> None:
    manager = broker.open()
    manager.create_topic("t", 7)
    manager.shutdown()
    progress = RecoveryProgress()
    reg = CollectorRegistry(auto_describe=False)
    reg.register(RecoveryProgressCollector(progress))
    assert [value(reg, f"tidelog_log_recovery_{n}") for n in ("partitions_total", "partitions_loaded", "complete")] \
        == [0, 0, 0]
    seen: list[tuple[int, int]] = []

    def on_progress(done: int, total: int) -> None:
        progress.on_progress(done, total)
        seen.append((value(reg, "tidelog_log_recovery_partitions_loaded"), value(reg, "tidelog_log_recovery_complete")))

    broker.open(on_progress=on_progress)
    assert seen == [(float(i), 0.0) for i in range(1, 8)]
    progress.complete()
    assert [value(reg, f"tidelog_log_recovery_{n}") for n in ("partitions_total", "partitions_loaded", "complete")] \
        == [7, 7, 1]


def test_recovery_progress_is_thread_safe() -> None:
    progress = RecoveryProgress()
    threads = [threading.Thread(target=lambda: [progress.on_progress(i, 4000) for i in range(1, 4001)])
               for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert progress.snapshot() == (4000, 4000, False)


def test_copy_lag_of_a_tiered_topic(broker: Opener, one_dir: list[Path], tmp_path: Path) -> None:
    uri = (tmp_path / "store").as_uri()
    manager = broker.open(one_dir, {"remote.log.storage.system.enable": "true", "remote.log.storage.uri": uri})
    manager.create_topic("orders", 1, {"remote.storage.enable": "true", "segment.bytes": "400",
                                       "local.retention.bytes": "1"})
    for _ in range(20):
        manager.append(tp("orders"), batch())
    manager.run_retention()
    reg = registry(manager)
    [status] = manager.remote_tier.status()  # type: ignore[union-attr]
    assert status.copy_lag_segments > 1
    assert value(reg, "kafka_server_brokertopicmetrics_remotecopylagsegments", topic="orders") == status.copy_lag_segments
    assert value(reg, "kafka_server_brokertopicmetrics_remotecopylagbytes", topic="orders") == status.copy_lag_bytes
    assert value(reg, "tidelog_log_retention_reason", topic="orders", partition=0, reason="awaiting_remote_copy") == 1
    manager.remote_tier.copy_pass()  # type: ignore[union-attr]
    [status] = manager.remote_tier.status()  # type: ignore[union-attr]
    assert value(reg, "kafka_server_brokertopicmetrics_remotecopylagsegments", topic="orders") == 0
    assert value(reg, "kafka_server_brokertopicmetrics_remotelogsizebytes", topic="orders") == status.remote_bytes > 0


def collect_in_thread(reg: CollectorRegistry, timeout: float = 20.0) -> bool:
    """Whether a scrape (every family) returns within ``timeout`` seconds."""
    done = threading.Event()

    def scrape() -> None:
        list(reg.collect())
        done.set()

    threading.Thread(target=scrape, daemon=True).start()
    return done.wait(timeout)


def test_a_scrape_returns_while_a_log_lock_is_held(broker: Opener) -> None:
    manager = broker.open()
    manager.create_topic("c", 2, COMPACT)
    for i in range(20):
        manager.append(tp("c", 0), keyed(2, i))
    assert manager.cleaner is not None
    manager.cleaner.run_once()
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with manager.log(tp("c", 0)).lock:
            held.set()
            release.wait(30)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert held.wait(10)
        assert collect_in_thread(registry(manager)), "a scrape waited for a log's lock"
    finally:
        release.set()
        holder.join()


def test_a_scrape_returns_while_a_selection_pass_holds_the_cleaner_lock(broker: Opener) -> None:
    """A selection pass holds the cleaner manager's lock while it weighs every compacted log (a
    fraction of a second per 10,000): a scrape reads the cleaner's snapshots without it."""
    manager = broker.open()
    manager.create_topic("c", 1, COMPACT)
    for i in range(20):
        manager.append(tp("c"), keyed(2, i))
    cleaner = manager.cleaner
    assert cleaner is not None
    cleaner.run_once()
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with cleaner.manager._lock:  # white box: what a long selection pass holds
            held.set()
            release.wait(30)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert held.wait(10)
        reg = registry(manager)
        assert collect_in_thread(reg), "a scrape waited for the cleaner manager's lock"
    finally:
        release.set()
        holder.join()


class _PausingEngine(InProcessEngine):
    """The in-process engine, stopping inside its first clean_group until released."""

    def __init__(self, buffers: CleanerBuffers, throttler: Throttler | None, entered: threading.Event,
                 release: threading.Event) -> None:
        super().__init__(buffers, throttler)
        self._entered, self._release = entered, release

    def clean_group(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        self._entered.set()
        assert self._release.wait(30)
        return super().clean_group(*args, **kwargs)


def test_a_scrape_returns_while_a_clean_is_in_progress(log_dirs: list[Path]) -> None:
    entered, release = threading.Event(), threading.Event()
    engines: dict[str, Callable[..., InProcessEngine]] = {
        "spark": lambda buffers, throttler, master: _PausingEngine(buffers, throttler, entered, release)}
    opener = Opener(log_dirs)  # the engine seam: an injected engine runs under one of the config's names
    config = opener.config(log_dirs[:1], {"tidelog.cleaner.engine": "spark"})
    clock = FakeClock(1_700_000_000_000)
    manager = LogManager.open(config, log_dirs[:1], clock=clock, scheduler=FakeScheduler(clock), cleaner_engines=engines)
    try:
        manager.create_topic("c", 1, COMPACT)
        for i in range(40):
            manager.append(tp("c"), keyed(3, i))
        assert manager.cleaner is not None
        cleaning = threading.Thread(target=manager.cleaner.run_once)
        cleaning.start()
        try:
            assert entered.wait(30), "the clean never reached its engine"
            assert str(manager.cleaner.manager.state_of(tp("c"))) == "in progress"
            reg = registry(manager)
            assert collect_in_thread(reg), "a scrape waited for a clean"
            assert value(reg, "tidelog_log_cleaner_reason", topic="c", partition=0, reason="cleanable") == 1
        finally:
            release.set()
            cleaning.join()
    finally:
        manager.shutdown()


def _names(reg: CollectorRegistry) -> Sequence[str]:
    return sorted({m.name for m in reg.collect()})


def test_every_family_of_the_spec_is_served(broker: Opener) -> None:
    manager = broker.open()
    manager.create_topic("t", 1)
    names = set(_names(registry(manager)))
    expected = {
        "kafka_log_log_size", "kafka_log_log_numlogsegments", "kafka_log_log_logendoffset",
        "kafka_log_log_logstartoffset", "kafka_log_logmanager_offlinelogdirectorycount",
        "kafka_log_logmanager_logdirectoryoffline", "kafka_log_logcleaner_cleaner_recopy_percent",
        "kafka_log_logcleaner_max_clean_time_secs", "kafka_log_logcleaner_max_buffer_utilization_percent",
        "kafka_log_logcleaner_max_compaction_delay_secs", "kafka_log_logcleaner_deadthreadcount",
        "kafka_log_logcleanermanager_max_dirty_percent", "kafka_log_logcleanermanager_time_since_last_run_ms",
        "kafka_log_logcleanermanager_uncleanable_partitions_count", "kafka_log_logcleanermanager_uncleanable_bytes",
        "kafka_server_replicamanager_partitioncount", "kafka_server_replicamanager_leadercount",
        "kafka_server_replicamanager_underreplicatedpartitions", "kafka_server_replicamanager_offlinereplicacount",
        "kafka_controller_kafkacontroller_activecontrollercount",
        "kafka_controller_kafkacontroller_offlinepartitionscount", "tidelog_log_cleaner_dirty_ratio",
        "tidelog_log_cleaner_reason", "tidelog_log_retention_reason", "tidelog_log_cleaner_quarantined",
    }
    assert names == expected
