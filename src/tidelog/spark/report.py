"""``tidelog spark report``: every partition of a data dir as a DataFrame row, computed on Spark.

One row per partition (:data:`REPORT_SCHEMA`): where it lives, its size and segments, its offsets,
how many records it holds, its oldest and newest timestamps, its cleanup policy, and what the two
cleanup policies would do now:

* ``dirty_ratio`` and ``cleanable``: the cleaner's view (the cleaner offset checkpoint's first
  dirty offset, bytes below it clean, bytes from it up to the active segment dirty; cleanable when
  the topic compacts and the ratio reaches ``min.cleanable.dirty.ratio``); null for topics that
  do not compact;
* ``deletable_segments``/``deletable_bytes`` and ``retention_reason``: retention's dry run
  (:func:`tidelog.retention.plan_segments`, the same decision ``tidelog retention --dry-run``
  makes), bounded by the readable end as the high watermark;
* the remote tier, for a tiered topic (``remote.storage.enable``) on a broker config with
  ``remote.log.storage.system.enable``: ``remote_segments``, ``remote_bytes`` and the offsets
  ``remote_start_offset``..``remote_end_offset`` of its COPY_SEGMENT_FINISHED segments, read by
  the executor from the partition's metadata in the store itself (one LIST and a few GETs; no
  broker needed), or ``remote_error`` saying why they could not be; null for other topics. The
  other columns (``segments``, ``size_bytes``, ``log_start_offset`` ...) are the local tier's:
  the files read here begin at the first local segment.

Reading is read-only (:class:`~tidelog.storage.log_view.LogView`): no lock is taken, so the report
runs while ``tidelog serve`` owns the dir. The heavy part, walking every batch header of every
segment to count records and find timestamps, runs on the executors, one task per group of
partitions; the driver only lists partition dirs and reads the small files (the topic registry,
checkpoints). Topic configs come from the topic registry (``tidelog-topics.json``) over the broker
defaults given (Kafka data dirs without a registry: the defaults, as the row's ``config_source``
says).

Where it differs from ``tidelog explain``: explain opens the logs (it needs the lock) and also
knows the cleaner's live state (in progress, quarantined); the report is a snapshot of the files.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from tidelog import retention
from tidelog.errors import CheckpointError, StorageError, TidelogError
from tidelog.manager.registry_sync import read_topic_id
from tidelog.manager.topics import read_newest_registry
from tidelog.remote.metadata import TopicIdPartition
from tidelog.remote.metadata_log import RemotePartitionMetadata
from tidelog.remote.store import RemoteStore, open_store
from tidelog.storage.checkpoints import CLEANER_OFFSET_CHECKPOINT_FILE, OFFSET_ENTRY_FORMAT, parse_checkpoint
from tidelog.storage.config import BROKER_CONFIGS, BrokerConfig
from tidelog.storage.log_view import LogView, SegmentInfo
from tidelog.storage.segment_reader import open_segment
from tidelog.topic_partition import TopicPartition

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

REPORT_COLUMNS: tuple[tuple[str, str], ...] = (
    ("topic", "string"), ("partition", "int"), ("log_dir", "string"), ("segments", "int"),
    ("size_bytes", "long"), ("log_start_offset", "long"), ("end_offset", "long"), ("records", "long"),
    ("oldest_timestamp", "timestamp"), ("newest_timestamp", "timestamp"), ("cleanup_policy", "string"),
    ("config_source", "string"), ("active_segment_bytes", "long"), ("first_dirty_offset", "long"), ("clean_bytes", "long"),
    ("dirty_bytes", "long"), ("dirty_ratio", "double"), ("cleanable", "boolean"),
    ("deletable_segments", "int"), ("deletable_bytes", "long"), ("retention_reason", "string"),
    ("tiered", "boolean"), ("remote_segments", "int"), ("remote_bytes", "long"), ("remote_start_offset", "long"),
    ("remote_end_offset", "long"), ("remote_error", "string"),
)
REPORT_SCHEMA = ", ".join(f"{name} {kind}" for name, kind in REPORT_COLUMNS)
READ_CHUNK = 8 << 20


@dataclass(frozen=True, slots=True)
class PartitionTask:
    """What an executor needs to report one partition (small: it is pickled into the task)."""

    log_dir: str
    topic: str
    partition: int
    dir: str
    config_overrides: Mapping[str, str]
    config_source: str
    first_dirty_checkpoint: int | None
    topic_id: str | None = None  # names the partition's objects in the remote store


@dataclass(frozen=True, slots=True)
class _SegmentStats:
    """One segment as retention reads it (:class:`tidelog.retention.SegmentInfo`)."""

    base_offset: int
    size: int
    largest_timestamp: int
    max_timestamp_so_far: int
    records: int
    oldest_timestamp: int  # -1: no record carries a timestamp
    next_offset: int  # the offset after its last batch (its base offset when empty)


# --- the driver: list partitions, read small files ------------------------------------------

def plan_tasks(log_dirs: Sequence[Path | str]) -> list[PartitionTask]:
    """One task per live partition of ``log_dirs``, with its topic's overrides and cleaner checkpoint."""
    dirs = [Path(d) for d in log_dirs]
    registry = read_newest_registry(dirs).state.topics
    checkpoints: dict[TopicPartition, int] = {}
    for log_dir in dirs:
        checkpoints.update(_read_checkpoint(log_dir / CLEANER_OFFSET_CHECKPOINT_FILE))
    tasks = []
    for tp, partition_dir in LogView(dirs).partitions().items():
        record = registry.get(tp.topic)
        tasks.append(PartitionTask(
            str(partition_dir.parent), tp.topic, tp.partition, str(partition_dir),
            dict(record.configs) if record is not None else {},
            "topic registry" if record is not None else "broker defaults (no registry entry)",
            checkpoints.get(tp), record.topic_id if record is not None else read_topic_id(partition_dir)))
    return tasks


def _read_checkpoint(path: Path) -> dict[TopicPartition, int]:
    try:
        return dict(parse_checkpoint(path.read_text("utf-8"), OFFSET_ENTRY_FORMAT, path))
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError, CheckpointError) as e:
        raise StorageError(f"cannot read the cleaner offset checkpoint: {e}", path=path) from e


# --- an executor: one partition -------------------------------------------------------------

def partition_row(task: PartitionTask, broker: BrokerConfig | None, now_ms: int) -> dict[str, Any]:
    """The report row of one partition (plain Python values, timestamps in ms or None)."""
    config = (broker or _broker({}, task.log_dir)).log_config(task.config_overrides)
    tp = TopicPartition(task.topic, task.partition)
    view = LogView([task.log_dir]).partition(tp, Path(task.dir))
    bounds = view.refresh()
    segments = [_segment_stats(s, bounds.end_offset) for s in view.segments]
    live = [s for s in segments if s.next_offset > bounds.log_start_offset or s is segments[-1]]
    first_dirty = max(task.first_dirty_checkpoint or 0, bounds.log_start_offset)
    clean_bytes, dirty_bytes = _clean_and_dirty(segments, first_dirty)
    dirty_ratio = dirty_bytes / (clean_bytes + dirty_bytes) if clean_bytes + dirty_bytes else 0.0
    compacted = config.compact
    plan = retention.plan_segments(segments, config=config, log_start_offset=bounds.log_start_offset,
                                   high_watermark=bounds.end_offset, log_end_offset=bounds.end_offset,
                                   now_ms=now_ms, topic_partition=tp)
    oldest = [s.oldest_timestamp for s in live if s.oldest_timestamp >= 0]
    newest = [s.largest_timestamp for s in live if s.records]
    return {
        "topic": task.topic, "partition": task.partition, "log_dir": task.log_dir, "segments": len(segments),
        "size_bytes": sum(s.size for s in segments), "log_start_offset": bounds.log_start_offset,
        "end_offset": bounds.end_offset, "records": sum(s.records for s in live),
        "oldest_timestamp": min(oldest) if oldest else None, "newest_timestamp": max(newest) if newest else None,
        "cleanup_policy": ",".join(sorted(config.cleanup_policy)), "config_source": task.config_source,
        "active_segment_bytes": segments[-1].size if segments else 0,
        "first_dirty_offset": first_dirty if compacted else None,
        "clean_bytes": clean_bytes if compacted else None, "dirty_bytes": dirty_bytes if compacted else None,
        "dirty_ratio": dirty_ratio if compacted else None,
        "cleanable": bool(compacted and dirty_bytes and dirty_ratio >= config.min_cleanable_dirty_ratio),
        "deletable_segments": len(plan.segments), "deletable_bytes": plan.total_bytes,
        "retention_reason": "; ".join(plan.reasons),
        **remote_columns(task, broker, config.remote_storage_enable),
    }


_NOT_TIERED = {"tiered": False, "remote_segments": None, "remote_bytes": None, "remote_start_offset": None,
               "remote_end_offset": None, "remote_error": None}


def remote_columns(task: PartitionTask, broker: BrokerConfig | None, tiered: bool) -> dict[str, Any]:
    """The remote tier's columns of one partition (module doc): from the store's metadata when the
    topic is tiered and ``broker`` has the remote tier on, else nulls. A store or metadata failure
    is the ``remote_error`` column, never an exception."""
    if not tiered or broker is None or not broker.remote_log_storage_system_enable:
        return _NOT_TIERED
    empty = {**_NOT_TIERED, "tiered": True}
    if task.topic_id is None:
        return {**empty, "remote_error": "the partition's topic id is unknown (no registry entry, no partition.metadata)"}
    tip = TopicIdPartition(task.topic_id, TopicPartition(task.topic, task.partition))
    try:
        store = _store(broker.remote_log_storage_uri, tuple(sorted(broker.rsm_config.items())))
        metadata = RemotePartitionMetadata.load(store, tip)
    except TidelogError as e:
        return {**empty, "remote_error": str(e)}
    finished = metadata.finished_segments()  # by start offset
    return {**empty, "remote_segments": len(finished), "remote_bytes": metadata.total_size(),
            "remote_start_offset": finished[0].start_offset if finished else None,
            "remote_end_offset": metadata.highest_offset() if finished else None}


@functools.lru_cache(maxsize=4)
def _store(uri: str, options: tuple[tuple[str, str], ...]) -> RemoteStore:
    """One store per location and options per process (an executor reports many partitions)."""
    return open_store(uri, dict(options))


def _segment_stats(segment: SegmentInfo, end_offset: int) -> _SegmentStats:
    """Walk every batch header of ``segment`` (up to the readable end)."""
    records = 0
    oldest, largest, next_offset = -1, -1, segment.base_offset
    with open_segment(segment.log_path, segment.base_offset) as reader:
        size = reader.limit
        for _, walked in reader.whole_batches(0, READ_CHUNK):
            batches = walked.batches
            keep = batches["base_offset"] < end_offset
            if not keep.any():
                break
            records += int(batches["records_count"][keep].sum())
            next_offset = int(batches["last_offset"][keep][-1]) + 1
            stamps = batches["base_timestamp"][keep]
            stamps = stamps[stamps >= 0]
            if len(stamps):
                oldest = int(stamps.min()) if oldest < 0 else min(oldest, int(stamps.min()))
            largest = max(largest, int(batches["max_timestamp"][keep].max()))
            if not keep.all():
                break
    if largest < 0:  # no record carries a timestamp: retention falls back to the file's mtime (Kafka)
        largest = int(os.stat(segment.log_path).st_mtime * 1000)
    return _SegmentStats(segment.base_offset, size, largest, largest, records, oldest, next_offset)


def _clean_and_dirty(segments: Sequence[_SegmentStats], first_dirty: int) -> tuple[int, int]:
    """Bytes wholly below ``first_dirty`` (clean) and from its segment up to, not including, the
    active segment (dirty), as the cleaner's ratio counts them."""
    clean = dirty = 0
    for segment in segments[:-1]:
        if segment.next_offset <= first_dirty:
            clean += segment.size
        else:
            dirty += segment.size
    return clean, dirty


def broker_properties(broker: BrokerConfig | None) -> dict[str, str]:
    """``broker`` as the properties text that makes it again (BrokerConfig itself does not pickle)."""
    if broker is None:
        return {}
    props = {name: BROKER_CONFIGS[name].format(value) for name, value in broker.explicit.items()}
    props.update(broker.unknown)
    return props


def _broker(props: Mapping[str, str], log_dir: str) -> BrokerConfig:
    return BrokerConfig.from_properties({"log.dirs": log_dir, **props})


# --- Spark ------------------------------------------------------------------------------------

def partition_report(spark: SparkSession, log_dirs: Sequence[Path | str], *, broker: BrokerConfig | None = None,
                     now_ms: int | None = None, partitions_per_task: int = 64) -> DataFrame:
    """The report of every partition of ``log_dirs`` as a DataFrame (:data:`REPORT_SCHEMA`).

    ``now_ms`` (default: now) is when retention and eligibility are judged. Partitions are
    reported in tasks of ``partitions_per_task`` (a Python task costs ~0.15 s here: a task per
    partition would cost more than the walking)."""
    import time

    tasks = plan_tasks(log_dirs)
    when = int(time.time() * 1000) if now_ms is None else now_ms
    props = broker_properties(broker)
    slices = max(1, -(-len(tasks) // partitions_per_task))
    rows = spark.sparkContext.parallelize(range(len(tasks)), slices)
    ids = spark.createDataFrame(rows.map(lambda i: (i,)), "task long")

    def report(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            found = [partition_row(tasks[i], _broker(props, tasks[i].log_dir), when)
                     for i in batch.column(0).to_pylist()]
            if found:
                yield _to_arrow(found)

    return ids.mapInArrow(report, REPORT_SCHEMA)


def _to_arrow(rows: list[dict[str, Any]]) -> pa.RecordBatch:
    import pyarrow as pa

    types = {"string": pa.string(), "int": pa.int32(), "long": pa.int64(), "double": pa.float64(),
             "boolean": pa.bool_(), "timestamp": pa.timestamp("ms", tz="UTC")}
    arrays = [pa.array([r[name] for r in rows], type=types[kind]) for name, kind in REPORT_COLUMNS]
    batch = pa.RecordBatch.from_arrays(arrays, names=[name for name, _ in REPORT_COLUMNS])
    # Spark's timestamp is microseconds
    return batch.cast(pa.schema([pa.field(n, pa.timestamp("us", tz="UTC") if k == "timestamp" else types[k])
                                 for n, k in REPORT_COLUMNS]))


def plot_report(rows: Sequence[Mapping[str, Any]], path: Path | str, title: str = "tidelog partitions") -> Path:
    """A PNG: per partition, its bytes split into clean, dirty (compacted topics) and deletable by
    retention now, with the dirty ratio marked. ``rows``: the report's rows (e.g. ``df.collect()``
    as dicts)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [f"{r['topic']}-{r['partition']}" for r in rows]
    mib = 1 << 20
    deletable = np.array([r["deletable_bytes"] / mib for r in rows])
    dirty = np.array([(r["dirty_bytes"] or 0) / mib for r in rows])
    clean = np.array([(r["clean_bytes"] or 0) / mib for r in rows])
    active = np.array([r["active_segment_bytes"] / mib for r in rows])
    sealed = np.array([max(0.0, r["size_bytes"] / mib - a) if r["dirty_ratio"] is None else 0.0
                       for r, a in zip(rows, active)])  # topics that do not compact
    fig, ax = plt.subplots(figsize=(max(6.0, 0.6 * len(rows) + 2), 4.5))
    x = np.arange(len(rows))
    ax.bar(x, sealed, label="sealed segments (delete policy)", color="#55a868")
    ax.bar(x, clean, bottom=sealed, label="clean (compacted)", color="#4c72b0")
    ax.bar(x, dirty, bottom=sealed + clean, label="dirty (to compact)", color="#dd8452")
    ax.bar(x, active, bottom=sealed + clean + dirty, label="active segment", color="#bbbbbb")
    ax.scatter(x, deletable, marker="_", s=400, color="#c44e52", label="deletable by retention now", zorder=3)
    for i, r in enumerate(rows):
        if r["dirty_ratio"] is not None:
            ax.annotate(f"dirty {r['dirty_ratio']:.0%}", (i, sealed[i] + clean[i] + dirty[i] + active[i]),
                        ha="center", va="bottom", fontsize=8)
    ax.set_xticks(x, names, rotation=45, ha="right", fontsize=8)
    ax.set_ylabel("MiB")
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
