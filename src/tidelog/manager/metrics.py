"""Kafka's log-layer metrics of a LogManager as Prometheus families, read at scrape time.

:class:`LogManagerCollector` is a ``prometheus_client`` collector: each ``collect()`` reads the
manager's state once and yields Kafka's ``Log``, ``LogManager``, ``LogCleaner``,
``LogCleanerManager``, ``ReplicaManager``, ``KafkaController`` and remote ``BrokerTopicMetrics``
gauges under the names the Prometheus JMX exporter's standard Kafka rules give them
(``kafka_log_log_size{topic,partition}`` ...), plus tidelog's own families where Kafka has none:
per partition the cleaner's dirty ratio and reason code, the retention reason code, and the
quarantined partitions. :class:`RecoveryProgress` counts the partitions loaded while
:meth:`LogManager.open` runs (its ``on_progress`` callback), :class:`RecoveryProgressCollector`
yields it. docs/metrics.md lists every family with its Kafka MBean.

Cost and locks: a scrape never takes a log's lock (a log's offsets, size and segment count are
lock-free reads) and takes the manager's lock only to copy the partition map
(:meth:`LogManager.live_logs`); the cleaner manager's lock only to read the checkpoint of each
quarantined partition (``uncleanable-bytes``; never held through a clean, and a selection pass
holds it only while it weighs the logs). The per-partition reason codes are what the cleaner's last selection pass
and the last retention passes recorded (read-only mappings replaced whole, read without a lock),
never recomputed per scrape: before the first pass a partition has no reason series. For a
stopped dir (``tidelog metrics``) those come from a :class:`StoppedDirFigures` computed once by
the same reason-code functions (``tidelog explain``'s).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample

from tidelog.cleaner.manager import PartitionSelection
from tidelog.storage.log import Log
from tidelog.topic_partition import TopicPartition

if TYPE_CHECKING:
    from tidelog.manager.manager import LogManager

Labelled = tuple[TopicPartition, Log, dict[str, str]]
"""A live log with its partition's label dict (topic, partition), shared by its samples."""

PARTITION_LABELS = ("topic", "partition")
LOG_DIRECTORY = "logDirectory"

# (name, help, how a log gives it): Kafka's kafka.log:type=Log gauges
_LOG_GAUGES = (
    ("kafka_log_log_size", "kafka.log:type=Log,name=Size: bytes in every segment of the partition's log",
     lambda lg: lg.size),
    ("kafka_log_log_numlogsegments", "kafka.log:type=Log,name=NumLogSegments: segments of the partition's log",
     lambda lg: lg.num_segments),
    ("kafka_log_log_logendoffset", "kafka.log:type=Log,name=LogEndOffset: the offset of the next record appended",
     lambda lg: lg.log_end_offset),
    ("kafka_log_log_logstartoffset", "kafka.log:type=Log,name=LogStartOffset: the first offset readable",
     lambda lg: lg.log_start_offset),
)

# Kafka's LogCleaner gauges, as LogCleaner.metrics() names them
_CLEANER_GAUGES = (
    ("kafka_log_logcleaner_cleaner_recopy_percent", "cleaner-recopy-percent"),
    ("kafka_log_logcleaner_max_clean_time_secs", "max-clean-time-secs"),
    ("kafka_log_logcleaner_max_buffer_utilization_percent", "max-buffer-utilization-percent"),
    ("kafka_log_logcleaner_max_compaction_delay_secs", "max-compaction-delay-secs"),
    ("kafka_log_logcleaner_deadthreadcount", "DeadThreadCount"),
    ("kafka_log_logcleanermanager_max_dirty_percent", "max-dirty-percent"),
    ("kafka_log_logcleanermanager_time_since_last_run_ms", "time-since-last-run-ms"),
)
_CLEANER_DIR_GAUGES = (
    ("kafka_log_logcleanermanager_uncleanable_partitions_count", "uncleanable-partitions-count"),
    ("kafka_log_logcleanermanager_uncleanable_bytes", "uncleanable-bytes"),
)


def log_directory_label(path: Path | str) -> str:
    """A ``logDirectory`` label value as the JMX exporter renders Kafka's quoted tag: the path in
    double quotes (``"/var/kafka"``)."""
    return f'"{path}"'


def _partition(tp: TopicPartition) -> list[str]:
    return [tp.topic, str(tp.partition)]


@dataclass(frozen=True)
class StoppedDirFigures:
    """The per-partition figures a stopped dir's metrics show where a running broker reports its
    passes' records: each compacted partition's dirty ratio and cleaner reason, each partition's
    retention reason and the cleaner's max dirty percent, all computed once (``tidelog metrics``)
    by ``tidelog explain``'s functions."""

    cleaning: Mapping[TopicPartition, PartitionSelection] = field(default_factory=dict)
    retention: Mapping[TopicPartition, str] = field(default_factory=dict)
    max_dirty_percent: float | None = None


class LogManagerCollector(Collector):
    """The manager collector (see the module doc). ``figures``: for a stopped dir, the per-partition
    figures computed once (None: a running manager's passes' records). Thread-safe: ``collect()``
    may run in several scraper threads at once; it takes the locks the module doc names."""

    def __init__(self, manager: LogManager, figures: StoppedDirFigures | None = None) -> None:
        self._manager = manager
        self._figures = figures

    def collect(self) -> Iterator[Metric]:
        """Every family, read now. Cost: O(partitions + segments) attribute reads, one copy of the
        partition map under the manager's lock."""
        pairs = [(tp, lg, {"topic": tp.topic, "partition": str(tp.partition)})
                 for tp, lg in self._manager.live_logs().items()]  # one label dict per partition, shared
        yield from _log_families(pairs)
        yield from self._log_manager_families()
        yield from self._replica_families(pairs)
        if self._manager.cleaner is not None:
            yield from self._cleaner_families()
        yield from self._reason_families(pairs)
        if self._manager.remote_tier is not None:
            yield from self._remote_families(pairs)

    def _log_manager_families(self) -> Iterator[Metric]:
        offline = {o.path for o in self._manager.offline_log_dirs()}
        yield GaugeMetricFamily("kafka_log_logmanager_offlinelogdirectorycount",
                                "kafka.log:type=LogManager,name=OfflineLogDirectoryCount: log dirs offline",
                                value=len(offline))
        per_dir = GaugeMetricFamily("kafka_log_logmanager_logdirectoryoffline",
                                    "kafka.log:type=LogManager,name=LogDirectoryOffline: 1 while the log dir is "
                                    "offline", labels=[LOG_DIRECTORY])
        for path in self._manager.log_dir_paths():
            per_dir.add_metric([log_directory_label(path)], 1 if path in offline else 0)
        yield per_dir

    def _replica_families(self, pairs: list[Labelled]) -> Iterator[Metric]:
        live = {tp for tp, _, _ in pairs}
        offline = set(self._manager.offline_partitions())
        offline |= {s.topic_partition for s in self._manager.set_aside()
                    if s.topic_partition is not None and s.topic_partition not in live}
        values = (
            ("kafka_server_replicamanager_partitioncount", "PartitionCount: partitions on this broker",
             len(live) + len(offline)),
            ("kafka_server_replicamanager_leadercount", "LeaderCount: partitions led (every live one)", len(live)),
            ("kafka_server_replicamanager_underreplicatedpartitions",
             "UnderReplicatedPartitions: always 0 (one replica per partition)", 0),
            ("kafka_server_replicamanager_offlinereplicacount",
             "OfflineReplicaCount: partitions in offline log dirs or set aside", len(offline)),
            ("kafka_controller_kafkacontroller_activecontrollercount",
             "ActiveControllerCount: always 1 (tidelog is its own controller)", 1),
            ("kafka_controller_kafkacontroller_offlinepartitionscount",
             "OfflinePartitionsCount: partitions with no live log", len(offline)),
        )
        for name, text, value in values:
            yield GaugeMetricFamily(name, text, value=value)

    def _cleaner_families(self) -> Iterator[Metric]:
        cleaner = self._manager.cleaner
        assert cleaner is not None
        figures = cleaner.metrics()
        if self._figures is not None and self._figures.max_dirty_percent is not None:
            figures["max-dirty-percent"] = self._figures.max_dirty_percent
        for name, key in _CLEANER_GAUGES:
            kind = "LogCleanerManager" if name.startswith("kafka_log_logcleanermanager_") else "LogCleaner"
            yield GaugeMetricFamily(name, f"kafka.log:type={kind},name={key}", value=figures[key])
        for name, key in _CLEANER_DIR_GAUGES:
            family = GaugeMetricFamily(name, f"kafka.log:type=LogCleanerManager,name={key},logDirectory",
                                       labels=[LOG_DIRECTORY])
            prefix = f"{key}["
            for full, value in figures.items():
                if full.startswith(prefix):
                    family.add_metric([log_directory_label(full[len(prefix):-1])], value)
            yield family
        quarantined = GaugeMetricFamily("tidelog_log_cleaner_quarantined",
                                        "partitions the cleaner set aside after a failure: failed attempts in a row",
                                        labels=[*PARTITION_LABELS, "phase"])
        for record in cleaner.manager.quarantined():
            quarantined.add_metric([*_partition(record.topic_partition), record.phase], record.attempts)
        yield quarantined

    def _reason_families(self, pairs: list[Labelled]) -> Iterator[Metric]:
        selected, retained = self._reasons()
        ratio = GaugeMetricFamily("tidelog_log_cleaner_dirty_ratio",
                                  "compacted partitions: dirty bytes / total bytes at the cleaner's last selection",
                                  labels=PARTITION_LABELS)
        cleaning = GaugeMetricFamily("tidelog_log_cleaner_reason",
                                     "compacted partitions: why the cleaner cleans it or not (tidelog explain's reason)",
                                     labels=[*PARTITION_LABELS, "reason"])
        retention = GaugeMetricFamily("tidelog_log_retention_reason",
                                      "why retention deletes from the partition or not (tidelog explain's reason)",
                                      labels=[*PARTITION_LABELS, "reason"])
        for tp, lg, labels in pairs:
            compacted = lg.config.compact
            seen = selected.get(tp) if compacted else None
            if seen is not None:
                if seen.dirty_ratio is not None:
                    ratio.samples.append(Sample(ratio.name, labels, seen.dirty_ratio))
                cleaning.samples.append(Sample(cleaning.name, {**labels, "reason": seen.reason}, 1))
            reason = retained[1 if compacted else 0].get(tp)
            if reason is not None:
                retention.samples.append(Sample(retention.name, {**labels, "reason": reason}, 1))
        yield ratio
        yield cleaning
        yield retention

    def _reasons(self) -> tuple[Mapping[TopicPartition, PartitionSelection],
                                tuple[Mapping[TopicPartition, str], Mapping[TopicPartition, str]]]:
        """(cleaner selection, (retention reasons of non-compacted logs, of compacted logs))."""
        if self._figures is not None:
            return self._figures.cleaning, (self._figures.retention, self._figures.retention)
        cleaner = self._manager.cleaner
        background = self._manager.background.retention_reasons
        if cleaner is None:  # no cleaner: the manager's retention task and run_retention alone
            return {}, (background, background)
        # compacted logs get their retention from the cleaner threads; run_retention covers both
        return cleaner.manager.selected_partitions, (background, {**background, **cleaner.retention_reasons})

    def _remote_families(self, pairs: list[Labelled]) -> Iterator[Metric]:
        tier = self._manager.remote_tier
        assert tier is not None
        lag_bytes: dict[str, int] = {}
        lag_segments: dict[str, int] = {}
        remote_size: dict[str, int] = {}
        for tp, lg, _ in pairs:
            if not lg.config.remote_storage_enable:
                continue
            highest = lg.highest_offset_in_remote_storage
            sealed = lg.segments[:-1]
            lagging = [s for s in sealed if s.base_offset > highest]
            lag_bytes[tp.topic] = lag_bytes.get(tp.topic, 0) + sum(s.size for s in lagging)
            lag_segments[tp.topic] = lag_segments.get(tp.topic, 0) + len(lagging)
            cached = tier.cleaner_source(tp, lg, False)  # cached metadata only: no I/O
            if cached is not None:
                size = sum(m.segment_size_in_bytes for m in cached[1].finished_segments())
                remote_size[tp.topic] = remote_size.get(tp.topic, 0) + size
        for name, text, values in (
            ("kafka_server_brokertopicmetrics_remotecopylagbytes", "RemoteCopyLagBytes: bytes of sealed segments "
             "not yet in the remote tier", lag_bytes),
            ("kafka_server_brokertopicmetrics_remotecopylagsegments", "RemoteCopyLagSegments: sealed segments not "
             "yet in the remote tier", lag_segments),
            ("kafka_server_brokertopicmetrics_remotelogsizebytes", "RemoteLogSizeBytes: bytes the remote tier holds "
             "(as this process's cached metadata knows)", remote_size),
        ):
            family = GaugeMetricFamily(name, f"kafka.server:type=BrokerTopicMetrics,name={text}", labels=["topic"])
            for topic, value in sorted(values.items()):
                family.add_metric([topic], value)
            yield family


def _log_families(pairs: list[Labelled]) -> Iterable[Metric]:
    """Kafka's ``kafka.log:type=Log`` gauges of every live log (lock-free reads of each log)."""
    families = []
    for name, text, value_of in _LOG_GAUGES:
        family = GaugeMetricFamily(name, text, labels=PARTITION_LABELS)
        family.samples.extend([Sample(name, labels, value_of(lg)) for _, lg, labels in pairs])
        families.append(family)
    return families


class RecoveryProgress:
    """How far :meth:`LogManager.open` is in loading partitions: pass :meth:`on_progress` as its
    ``on_progress`` callback, call :meth:`complete` once it has returned. Thread-safe: its own
    lock (open calls back from one loading thread per log dir)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._done = 0
        self._total = 0
        self._complete = False

    def on_progress(self, done: int, total: int) -> None:
        """``done`` of ``total`` partitions loaded. Thread-safe (own lock)."""
        with self._lock:
            self._done, self._total = max(self._done, done), total

    def complete(self) -> None:
        """The manager is open: every partition it loads at start-up is loaded. Thread-safe (own lock)."""
        with self._lock:
            self._complete = True
            self._done = max(self._done, self._total)

    def snapshot(self) -> tuple[int, int, bool]:
        """(loaded, total, complete). Thread-safe (own lock)."""
        with self._lock:
            return self._done, self._total, self._complete


class RecoveryProgressCollector(Collector):
    """Yields ``tidelog_log_recovery_partitions_total``/``_loaded`` and ``tidelog_log_recovery_complete``
    from a :class:`RecoveryProgress`. Thread-safe (the progress's lock, briefly)."""

    def __init__(self, progress: RecoveryProgress) -> None:
        self._progress = progress

    def collect(self) -> Iterator[Metric]:
        done, total, complete = self._progress.snapshot()
        yield GaugeMetricFamily("tidelog_log_recovery_partitions_total",
                                "partitions the log manager loads at start-up", value=total)
        yield GaugeMetricFamily("tidelog_log_recovery_partitions_loaded",
                                "partitions loaded so far at start-up", value=done)
        yield GaugeMetricFamily("tidelog_log_recovery_complete",
                                "1 once the log manager is open (every partition loaded)", value=1 if complete else 0)
