"""``spark.read.format("tidelog").option("path", "s3://bucket/prefix")``: the remote tier, read
straight from the object store, with no broker and no data dir.

``path`` is the store URI a broker has as ``remote.log.storage.uri`` (``s3://``, ``gs://``,
``abfs://``, ``abfss://``, ``hdfs://`` or ``file://``); the store's options are Spark options
with the broker's ``rsm.config.`` keys, e.g. ``rsm.config.endpoint.url``,
``rsm.config.access.key``, ``rsm.config.secret.key``, ``rsm.config.region`` (the names the broker
reads, :data:`tidelog.remote.store.S3_OPTIONS`). ``kafka.bootstrap.servers`` (and with it
``kafkaConsumer.pollTimeoutMs``) adds the broker's tail, see below. Every other option is the local
source's (:mod:`tidelog.spark.options`).

**Without** ``kafka.bootstrap.servers`` only the remote tier is read: the FINISHED remote
segments of each partition, i.e. offsets up to the highest tiered offset. **With** it, the read
covers every record up to the broker's high watermark: the offsets the remote tier holds from the
store, the rest (the tail not yet tiered, or a whole partition with no remote data) through the
broker's Fetch API (:mod:`tidelog.spark.broker_tail`); the partitions, earliest (the broker's log
start offset) and latest (its high watermark) and timestamps come from the broker, the boundary
between the tiers from the remote metadata. Streaming reads: :mod:`tidelog.spark.remote_stream`.

* **driver** (:class:`RemoteBatchReader`): one LIST of the store finds the partitions
  (``<topic>-<topicId>/<partition>/`` prefixes), then one LIST (plus snapshot and event GETs) per
  subscribed partition loads its remote metadata
  (:meth:`~tidelog.remote.metadata_log.RemotePartitionMetadata.load`). Earliest is the first
  finished segment's start, latest the highest tiered offset plus one. Timestamps are resolved
  as Kafka's ListOffsets does: segments whose ``max_timestamp_ms`` is below the timestamp are
  skipped unread, the first other one is searched through its time and offset indexes. Ranges
  are split as for local reads (:func:`~tidelog.spark.ranges.split_ranges`) and each task carries
  only the metadata of the segments its range overlaps (segments outside every range are
  never read).
* **executors** (:func:`read_remote_range`): per segment, ranged GETs of the ``.log`` from the
  offset index's position (:func:`~tidelog.remote.remote_read.read_segment`, 8 MiB at a time,
  framing and CRCs checked), turned into rows by the local reader's
  :func:`~tidelog.spark.arrow_rows.record_batches`, so rows equal a local read of the same records
  (compaction gaps and control records as there). Index objects are cached per worker process
  (:class:`~tidelog.remote.index_cache.RemoteIndexCache` in a temporary dir, 64 MiB; dirs of
  dead workers are removed by the next worker, :func:`index_dir`).

**read_committed** (``kafka.isolation.level``, :mod:`tidelog.spark.remote_committed`), as a
read_committed Kafka consumer sees the partition: with a broker, latest is its last stable offset;
each task's store part drops the aborted batches found in the remote ``.txnindex`` objects and,
for aborts whose marker is not tiered yet, in one read_committed Fetch at the boundary; the
broker part reads with read_committed Fetch requests. Without a broker the end stops before the
transactions open where the tier ends (their outcome is not in the store). Under
read_uncommitted none of this runs.

**Faults.** A segment object gone since planning (remote retention, a compaction's swap) is data
loss: the task fails naming the partition, the offsets and the object (``failOnDataLoss=true``)
or skips the segment with a warning. Any other store error (unreachable, access denied, corrupt
bytes) fails the task with a message naming the partition, the offset range and the store.
"""

from __future__ import annotations

import logging
import tempfile
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from pyspark.sql.datasource import DataSourceReader, InputPartition

from tidelog.errors import ConfigError
from tidelog.spark import options as o
from tidelog.spark.arrow_rows import record_batches
from tidelog.spark.broker_tail import POLL_TIMEOUT_MS, parse_broker_options
from tidelog.spark.ranges import OffsetRange, check_range_bounds, resolve, split_ranges
from tidelog.spark.worker_dirs import index_dir
from tidelog.storage.config_keys import REMOTE_STORE_SCHEMES
from tidelog.storage.log_view import PartitionBounds
from tidelog.storage.read_committed import AbortedBatchFilter
from tidelog.topic_partition import TopicPartition

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import StructType

    from tidelog.remote.index_cache import RemoteIndexCache
    from tidelog.remote.metadata import RemoteLogSegmentMetadata, TopicIdPartition
    from tidelog.remote.store import RemoteStore
    from tidelog.spark.broker_client import BrokerClient

log = logging.getLogger(__name__)

STORE_SCHEMES = frozenset(REMOTE_STORE_SCHEMES)
"""The schemes ``remote.log.storage.uri`` accepts: a ``path`` with one of them is a store."""
RSM_PREFIX = "rsm.config."
READ_BYTES = 8 << 20
"""Bytes of whole batches asked for per ranged read of a segment."""
INDEX_CACHE_BYTES = 64 << 20
"""Per executor process: the remote index cache's bound."""
_TOPIC_ID_CHARS = 22

_PLANNED: dict[str, list[OffsetRange]] = {}  # batch plans waiting for partitions(), by reader token
_EXECUTOR: dict[tuple[str, tuple[tuple[str, str], ...]], tuple[RemoteStore, RemoteIndexCache]] = {}


class RemoteReadError(RuntimeError):
    """A remote-tier read failed for a reason other than data loss (store unreachable, access
    denied, corrupt bytes); the message names the partition, the offset range and the store."""


def is_store_path(options: Mapping[str, str]) -> bool:
    """Whether ``path`` is an object-store URI (``scheme://...`` of :data:`STORE_SCHEMES`)."""
    path = str({k.lower(): v for k, v in options.items()}.get(o.PATH, "")).strip()
    return "://" in path and urlsplit(path).scheme.lower() in STORE_SCHEMES


@dataclass(frozen=True, slots=True)
class RemoteSourceOptions:
    """A remote read's options: the local source's (``parsed``, whose ``log_dirs`` is the store
    URI without credentials, for messages), the store URI and the ``rsm.config.`` options
    (prefix stripped). Small: pickled into the reader."""

    parsed: o.SourceOptions
    uri: str
    store_options: tuple[tuple[str, str], ...]
    bootstrap: str = ""
    """``kafka.bootstrap.servers``: empty for a read of the remote tier only."""
    poll_timeout_ms: int = POLL_TIMEOUT_MS
    """``kafkaConsumer.pollTimeoutMs``: how long a task asks a broker that does not answer."""

    def open_store(self) -> RemoteStore:
        from tidelog.remote.store import open_store

        return open_store(self.uri, dict(self.store_options))


def parse_remote_options(options: Mapping[str, str], *, streaming: bool) -> RemoteSourceOptions:
    """Check and parse the options of a read of a store path; :class:`SourceOptionError` on bad
    input (a malformed ``kafka.bootstrap.servers``, another ``kafka.`` option, an unknown
    ``rsm.config.`` option, any error of the local source's options). Makes no request to the
    store or the broker."""
    from tidelog.remote.store import redact_uri

    lowered = {k.lower(): str(v) for k, v in options.items()}
    uri = lowered[o.PATH].strip()
    shown = redact_uri(uri)
    bootstrap, poll_timeout_ms = parse_broker_options(lowered)
    store_options = tuple(sorted((k[len(RSM_PREFIX):], v) for k, v in lowered.items() if k.startswith(RSM_PREFIX)))
    rest = {k: v for k, v in lowered.items() if not k.startswith(RSM_PREFIX)}
    parsed = replace(o.parse_source_options(rest, streaming=streaming), log_dirs=(shown,))
    ropts = RemoteSourceOptions(parsed, uri, store_options, bootstrap, poll_timeout_ms)
    try:
        ropts.open_store()
    except ConfigError as e:
        raise o.SourceOptionError(f"Option 'path' ('{shown}') or its '{RSM_PREFIX}*' options: {e}") from None
    return ropts


def check_load_options(options: Mapping[str, str]) -> None:
    """What ``DataSource.schema()`` checks for a store path, so a bad option or an unknown topic
    fails at ``load()``: the options, then the store's partitions (one LIST of the store).
    Option sets without a subscription are writes, or reads that fail in ``reader()``."""
    lowered = {k.lower(): str(v) for k, v in options.items()}
    if not any(k in lowered for k in o.STRATEGY_KEYS):
        return
    for key in (o.ENDING_OFFSETS, o.ENDING_TIMESTAMP, o.ENDING_BY_TIMESTAMP, o.MIN_OFFSETS_PER_TRIGGER):
        lowered.pop(key, None)  # batch- or stream-only: decided when the reader is built
    if lowered.get(o.STARTING_OFFSETS, "").strip().lower() == "latest":
        lowered.pop(o.STARTING_OFFSETS)
    RemotePlan(parse_remote_options(lowered, streaming=True), load_metadata=False)


def batch_reader(options: Mapping[str, str], schema: StructType) -> RemoteBatchReader:
    """The batch reader of a store path; raises SourceOptionError on bad input."""
    from tidelog.spark.reader import check_schema

    ropts = parse_remote_options(options, streaming=False)
    check_schema(schema, ropts.parsed.include_headers)
    return RemoteBatchReader(ropts)


# --- planning on the driver -----------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class RemoteOffsetRange(OffsetRange):
    """Offsets ``[start, end)`` of one partition read from the remote tier: one Spark task, with
    the metadata of the FINISHED segments the range overlaps (by start offset; under
    read_committed also :attr:`txn_segments`). With a broker,
    ``boundary`` is where the broker's part starts (the highest tiered offset + 1 at planning)
    and ``topic_id`` the partition's topic id in the store ("" when it had no remote data)."""

    segments: tuple[RemoteLogSegmentMetadata, ...] = ()
    boundary: int | None = None
    topic_id: str = ""
    txn_segments: tuple[RemoteLogSegmentMetadata, ...] = ()
    """Under read_committed: the FINISHED segments ending at or past ``start`` with a non-empty
    ``.txnindex`` (an abort is indexed with its marker, maybe in a later segment), carried from
    the plan so a task loads no metadata and searches what the plan's end was decided on."""


class _RemoteView:
    """Timestamp search over one partition's finished segments (for :func:`resolve`)."""

    def __init__(self, store: RemoteStore, segments: list[RemoteLogSegmentMetadata], index_dir: Path) -> None:
        self.store, self.segments, self.index_dir = store, segments, index_dir

    def offset_for_timestamp(self, timestamp: int) -> int | None:
        """Kafka's ListOffsets by time over the remote segments: segments whose max timestamp is
        below ``timestamp`` are skipped without a request; the first other one is searched."""
        from tidelog.remote.index_cache import RemoteIndexCache
        from tidelog.remote.remote_read import offset_for_timestamp_in

        cache = RemoteIndexCache(self.store, self.index_dir, INDEX_CACHE_BYTES)
        try:
            found = offset_for_timestamp_in(self.store, cache, self.segments, timestamp)
            return None if found is None else found.offset
        finally:
            cache.close()


class RemotePlan:
    """The store's partitions and, with ``load_metadata``, the subscribed ones' finished
    segments and bounds (driver side; one per planning, not shared between threads). With a
    broker (``ropts.bootstrap``) the partitions and bounds are the broker's and ``boundary`` says
    where each partition's broker part starts. Raises :class:`RemoteReadError` naming the store
    (and the partition) when the store cannot be read or its metadata not decoded,
    :class:`~tidelog.spark.broker_tail.BrokerReadError` naming the broker when it does not
    answer, the source's option errors for partitions or topics that do not exist."""

    def __init__(self, ropts: RemoteSourceOptions, load_metadata: bool = True) -> None:
        from tidelog.remote.errors import RemoteStorageError
        from tidelog.remote.verify import list_partitions

        self.ropts = ropts
        parsed = ropts.parsed
        self.store = ropts.open_store()
        try:
            found, strays = list_partitions(self.store)
        except RemoteStorageError as e:
            raise RemoteReadError(f"Cannot list the remote tier at {self.store.uri}: {e}") from e
        if not found:
            _check_not_a_data_dir(ropts.uri)
        self.tips = _one_topic_id_each(_not_being_deleted(found, strays))
        self.broker = None
        if ropts.bootstrap:
            from tidelog.spark.broker_tail import BrokerPartitions

            self.broker = BrokerPartitions(ropts.bootstrap, parsed)
        existing = set(self.tips) if self.broker is None else self.broker.existing
        o.check_named_partitions(parsed, existing)
        self.partitions = parsed.subscription.select(sorted(existing))
        self.segments: dict[TopicPartition, list[RemoteLogSegmentMetadata]] = {}
        self.bounds: dict[TopicPartition, PartitionBounds] = {}
        self.boundary: dict[TopicPartition, int] = {}
        if load_metadata:
            for tp in self.partitions:
                self._load(tp)
            if self.broker is not None:
                self.bounds = self.broker.bounds([tp for tp in self.partitions if tp in existing])
                self.boundary = {tp: min(self.boundary[tp], b.end_offset) for tp, b in self.bounds.items()}

    def _load(self, tp: TopicPartition) -> None:
        from tidelog.remote.errors import RemoteStorageError
        from tidelog.remote.metadata_log import RemotePartitionMetadata

        if tp not in self.tips or not self._same_topic(tp):  # on the broker only: no remote data
            self.segments[tp], self.boundary[tp] = [], 0
            return
        try:
            metadata = RemotePartitionMetadata.load(self.store, self.tips[tp])
        except RemoteStorageError as e:  # a metadata version this reader does not know too
            raise RemoteReadError(f"Cannot plan the read of {tp} from the remote tier at {self.store.uri}: "
                                  f"{e}") from e
        finished = self.segments[tp] = metadata.finished_segments()
        start = finished[0].start_offset if finished else 0
        self.boundary[tp] = end = metadata.highest_offset() + 1
        if self.ropts.parsed.read_committed and self.broker is None and finished:
            from tidelog.spark.remote_committed import open_txns_at_end

            end = min([end, *open_txns_at_end(self.store, finished[-1]).values()])
        self.bounds[tp] = PartitionBounds(tp, min(start, end), end)

    def _same_topic(self, tp: TopicPartition) -> bool:
        """Whether the store's data of ``tp`` is of the broker's topic (not of an earlier topic
        of the same name, deleted and created again): the topic ids match, or the broker does not
        say (no broker, or a Metadata answer without ids)."""
        if self.broker is None or tp.topic not in self.broker.topic_ids:
            return True
        same = self.broker.topic_ids[tp.topic] == self.tips[tp].topic_id
        if not same:
            log.warning("The remote tier at %s holds %s under topic id %s, the broker's topic has id %s: "
                        "that is an earlier topic of the same name, not read", self.store.uri, tp,
                        self.tips[tp].topic_id, self.broker.topic_ids[tp.topic])
        return same

    def resolve(self, spec: o.OffsetSpec, *, starting: bool) -> dict[TopicPartition, int]:
        """``spec`` as offsets of the subscribed partitions (timestamps searched in the store, or
        by the broker's ListOffsets with a broker)."""
        if self.broker is not None:
            from tidelog.spark.broker_tail import BrokerView

            views = {tp: BrokerView(self.broker, tp) for tp in self.bounds}
            return resolve(spec, self.bounds, views, starting=starting,  # type: ignore[arg-type]
                           no_match_strategy=self.ropts.parsed.no_match_strategy)
        with tempfile.TemporaryDirectory(prefix="tidelog-remote-plan-") as tmp:
            views = {tp: _RemoteView(self.store, self.segments[tp], Path(tmp) / str(tp)) for tp in self.partitions}
            return resolve(spec, self.bounds, views, starting=starting,
                           no_match_strategy=self.ropts.parsed.no_match_strategy)

    def ranges(self) -> list[OffsetRange]:
        parsed = self.ropts.parsed
        o.check_covers(parsed.starting, self.partitions, o.STARTING_OFFSETS)
        o.check_covers(parsed.ending, self.partitions, o.ENDING_OFFSETS)
        start = self.resolve(parsed.starting, starting=True)
        end = self.resolve(parsed.ending, starting=False)
        check_range_bounds(start, end, self.bounds)
        return self.split([OffsetRange(tp.topic, tp.partition, start[tp], end[tp]) for tp in sorted(end)])

    def split(self, ranges: list[OffsetRange]) -> list[OffsetRange]:
        """``ranges`` split as Kafka splits them, each piece with the segments it overlaps."""
        parsed = self.ropts.parsed
        split = split_ranges(ranges, parsed.min_partitions, parsed.max_records_per_partition)
        out = []
        for r in split:
            tp = r.topic_partition
            tip = self.tips.get(tp)
            txn_segments = (tuple(s for s in self.segments.get(tp, []) if not s.txn_idx_empty and s.end_offset >= r.start)
                            if parsed.read_committed else ())
            if self.broker is None:
                out.append(RemoteOffsetRange(r.topic, r.partition, r.start, r.end,
                                             _overlapping(self.segments.get(tp, []), r.start, r.end),
                                             txn_segments=txn_segments))
                continue
            boundary = self.boundary.get(tp, 0)
            topic_id = self.broker.topic_ids.get(tp.topic, tip.topic_id if tip is not None else "")
            out.append(RemoteOffsetRange(r.topic, r.partition, r.start, r.end,
                                         _overlapping(self.segments.get(tp, []), r.start, min(r.end, boundary)),
                                         boundary, topic_id, txn_segments))
        return out


def _check_not_a_data_dir(uri: str) -> None:
    """A ``file://`` URI naming a broker's data dir, not a store: say to give it as a plain path."""
    from tidelog.storage.log_view import is_data_dir

    parts = urlsplit(uri)
    if parts.scheme.lower() == "file" and Path(parts.path).is_dir() and is_data_dir(Path(parts.path)):
        raise o.SourceOptionError(
            f"Option 'path': '{uri}' is a data dir, not a remote-tier store; give a data dir as a plain "
            f"path ('{parts.path}'), a store as the broker's remote.log.storage.uri")


def _not_being_deleted(found: Mapping, strays: list) -> dict:
    """``found`` without the partitions of topic ids whose remote data a pending deletion is
    removing (``tidelog-remote-deletions/<topic>-<topicId>.json``: a deleted topic, or one whose
    remote storage was turned off with ``remote.log.delete.on.disable``)."""
    doomed = {f.key.removesuffix(".json")[-_TOPIC_ID_CHARS:] for f in strays
              if f.kind == "pending_deletion" and f.key}
    return {tip: objects for tip, objects in found.items() if tip.topic_id not in doomed}


def _one_topic_id_each(found: Mapping[TopicIdPartition, object]) -> dict[TopicPartition, TopicIdPartition]:
    """``{partition: TopicIdPartition}``; a topic name under two topic ids with no pending
    deletion of either (objects left by hand, or a store shared by two clusters) is an error
    naming both."""
    ids: dict[str, set[str]] = {}
    for tip in found:
        ids.setdefault(tip.topic, set()).add(tip.topic_id)
    for topic, seen in sorted(ids.items()):
        if len(seen) > 1:
            raise RemoteReadError(f"The remote tier holds topic '{topic}' under several topic ids "
                                  f"({', '.join(sorted(seen))}) and no pending deletion of any: cannot tell "
                                  f"which one is the topic's; remove the stale <topic>-<topicId>/ prefix")
    return {tip.topic_partition: tip for tip in found}


def _overlapping(segments: list[RemoteLogSegmentMetadata], start: int, end: int) -> tuple[RemoteLogSegmentMetadata, ...]:
    return tuple(s for s in segments if s.start_offset < end and s.end_offset >= start)


def plan(ropts: RemoteSourceOptions) -> list[OffsetRange]:
    """The batch plan of a remote read (driver side; see the module doc for its requests)."""
    return RemotePlan(ropts).ranges()


class RemoteBatchReader(DataSourceReader):
    """``spark.read.format("tidelog")`` of a store path: planned when created, on the driver (see
    the module doc); the plan waits in :data:`_PLANNED` as the local reader's does."""

    def __init__(self, ropts: RemoteSourceOptions) -> None:
        self.ropts = ropts
        self._token = uuid.uuid4().hex
        _PLANNED[self._token] = plan(ropts)

    def partitions(self) -> list[InputPartition]:
        ranges = _PLANNED.pop(self._token, None)
        return list(plan(self.ropts) if ranges is None else ranges)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, RemoteOffsetRange):
            return iter(())
        return read_remote_range(self.ropts, partition)


# --- reading on executors -------------------------------------------------------------------

def _executor_store(ropts: RemoteSourceOptions) -> tuple[RemoteStore, RemoteIndexCache]:
    """This process's store and index cache for ``ropts`` (kept across tasks of a reused worker),
    the cache in :func:`index_dir`."""
    from tidelog.remote.index_cache import RemoteIndexCache

    key = (ropts.uri, ropts.store_options)
    found = _EXECUTOR.get(key)
    if found is None:
        store = ropts.open_store()
        directory = index_dir() / str(len(_EXECUTOR))
        found = _EXECUTOR[key] = (store, RemoteIndexCache(store, directory, INDEX_CACHE_BYTES))
    return found


def read_remote_range(ropts: RemoteSourceOptions, r: RemoteOffsetRange, store: RemoteStore | None = None,
                      cache: RemoteIndexCache | None = None) -> Iterator[pa.RecordBatch]:
    """Arrow batches of ``r``'s records (executor side): from the store, segment by segment, and
    with a broker (``r.boundary`` set) the offsets from the boundary on through Fetch
    (:func:`tidelog.spark.broker_tail.read_tail`). ``store``/``cache`` replace this process's own
    (tests count requests this way)."""
    from tidelog.spark.remote_committed import store_aborted

    if store is None or cache is None:
        store, cache = _executor_store(ropts)
    tp = r.topic_partition
    if r.boundary is None:
        aborted = store_aborted(ropts, store, cache, tp, r.txn_segments, r.start, r.end)
        yield from _store_rows(ropts, store, cache, r.segments, r.start, r.end, aborted)
        return
    from tidelog.spark.broker_tail import executor_client, read_tail

    client = executor_client(ropts.bootstrap)

    def store_read(lo: int, hi: int) -> tuple[int, Iterator[pa.RecordBatch]] | None:
        return _store_now(ropts, store, cache, tp, r.topic_id, lo, hi, client)

    split = min(r.end, r.boundary)
    first = r.segments[0].start_offset if r.segments else split
    wait = ropts.poll_timeout_ms
    if r.start < min(first, split):  # below the first tiered segment: the broker's to serve or refuse
        yield from read_tail(ropts.parsed, client, tp, r.start, min(first, split), store_read, wait)
    if max(r.start, first) < split:
        lo = max(r.start, first)
        aborted = store_aborted(ropts, store, cache, tp, r.txn_segments, lo, split, (client, r.boundary))
        yield from _store_rows(ropts, store, cache, r.segments, lo, split, aborted)
    if max(r.start, r.boundary) < r.end:
        yield from read_tail(ropts.parsed, client, tp, max(r.start, r.boundary), r.end, store_read, wait)


def _store_rows(ropts: RemoteSourceOptions, store: RemoteStore, cache: RemoteIndexCache,
                segments: tuple[RemoteLogSegmentMetadata, ...], start: int, end: int,
                aborted: AbortedBatchFilter | None = None) -> Iterator[pa.RecordBatch]:
    """Rows of ``[start, end)`` from ``segments`` (with ``aborted``, read_committed: fed every
    batch in offset order, it leaves out aborted transactions). A segment whose object vanished
    since planning is looked up again in the partition's metadata: when other FINISHED segments
    now hold its offsets (a compaction swapped it), they are read instead; otherwise the offsets
    are lost (``failOnDataLoss``)."""
    for segment in segments:
        lo, hi = max(start, segment.start_offset), min(end, segment.end_offset + 1)
        if lo < hi:
            yield from _segment_or_replacement(ropts, store, cache, segment, lo, hi, aborted)


def _store_now(ropts: RemoteSourceOptions, store: RemoteStore, cache: RemoteIndexCache, tp: TopicPartition,
               topic_id: str, lo: int, hi: int, client: BrokerClient) -> tuple[int, Iterator[pa.RecordBatch]] | None:
    """What the remote tier holds now from ``lo`` (a range tiered since planning): None when no
    FINISHED segment holds ``lo``, else the end of what it holds below ``hi`` and its rows
    (read_committed: without aborted transactions, searched as for the planned store part, from
    the segments and the boundary now). One metadata load (plus one LIST of the store when the
    partition had no remote data at planning)."""
    from tidelog.remote.errors import RemoteStorageError
    from tidelog.remote.metadata import TopicIdPartition
    from tidelog.remote.metadata_log import RemotePartitionMetadata
    from tidelog.remote.verify import list_partitions

    try:
        if topic_id:
            tip: TopicIdPartition | None = TopicIdPartition(topic_id, tp)
        else:
            found, strays = list_partitions(store, tp.topic)
            tip = _one_topic_id_each(_not_being_deleted(found, strays)).get(tp)
        if tip is None:
            return None
        metadata = RemotePartitionMetadata.load(store, tip)
    except RemoteStorageError as e:
        raise RemoteReadError(f"Cannot fetch offsets [{lo}, {hi}) of {tp} from the remote tier at {store.uri} "
                              f"(tiered since planning): loading the partition's remote metadata failed: {e}") from e
    segments = metadata.finished_segments()
    if not segments or segments[0].start_offset > lo or metadata.highest_offset() < lo:
        return None
    from tidelog.spark.remote_committed import store_aborted

    boundary = metadata.highest_offset() + 1
    end = min(hi, boundary)
    txn_segments = tuple(s for s in segments if not s.txn_idx_empty and s.end_offset >= lo)
    aborted = store_aborted(ropts, store, cache, tp, txn_segments, lo, end, (client, boundary))
    return end, _store_rows(ropts, store, cache, _overlapping(segments, lo, end), lo, end, aborted)


def _segment_or_replacement(ropts: RemoteSourceOptions, store: RemoteStore, cache: RemoteIndexCache,
                            segment: RemoteLogSegmentMetadata, lo: int, hi: int,
                            aborted: AbortedBatchFilter | None = None) -> Iterator[pa.RecordBatch]:
    from tidelog.remote.errors import RemoteResourceNotFoundError

    tp = segment.topic_id_partition.topic_partition
    progress = [lo]
    try:
        yield from _checked_rows(ropts, store, cache, segment, lo, hi, progress, aborted)
        return
    except RemoteResourceNotFoundError as e:
        gone = e
    resume = progress[0]
    current = [s for s in _reload(ropts, store, segment, lo, hi)
               if s.id != segment.id and s.start_offset < hi and s.end_offset >= resume]
    covered = resume
    for other in current:
        if other.start_offset > covered:
            break
        try:
            yield from _checked_rows(ropts, store, cache, other, max(covered, other.start_offset),
                                     min(hi, other.end_offset + 1), progress, aborted)
        except RemoteResourceNotFoundError as e:
            gone = e
            break
        covered = min(hi, other.end_offset + 1)
    if covered < hi:
        from tidelog.spark.reader import loss

        loss(ropts.parsed, f"Cannot fetch offsets [{max(covered, progress[0])}, {hi}) of {tp} from the remote tier "
                           f"at {store.uri} (segment {segment.id}): an object of the segment is gone ({gone}).")


def _reload(ropts: RemoteSourceOptions, store: RemoteStore, segment: RemoteLogSegmentMetadata, lo: int,
            hi: int) -> list[RemoteLogSegmentMetadata]:
    """The partition's FINISHED segments now (one metadata load)."""
    from tidelog.remote.errors import RemoteStorageError
    from tidelog.remote.metadata_log import RemotePartitionMetadata

    try:
        return RemotePartitionMetadata.load(store, segment.topic_id_partition).finished_segments()
    except RemoteStorageError as e:
        raise RemoteReadError(f"Cannot fetch offsets [{lo}, {hi}) of {segment.topic_id_partition.topic_partition} "
                              f"from the remote tier at {store.uri}: its segment {segment.id} is gone and "
                              f"reloading the partition's remote metadata failed: {e}") from e


def _checked_rows(ropts: RemoteSourceOptions, store: RemoteStore, cache: RemoteIndexCache,
                  segment: RemoteLogSegmentMetadata, lo: int, hi: int, progress: list[int],
                  aborted: AbortedBatchFilter | None = None) -> Iterator[pa.RecordBatch]:
    """:func:`_segment_rows`, keeping ``progress[0]`` at the offset after the last row yielded;
    store errors other than a missing object become :class:`RemoteReadError` naming the
    partition, the range and the store (a missing object is the caller's to handle)."""
    from tidelog.remote.errors import RemoteResourceNotFoundError, RemoteStorageError
    from tidelog.remote.index_cache import RemoteIndexCacheError
    from tidelog.remote.remote_read import RemoteSegmentCorruptError

    try:
        for b in _segment_rows(ropts, store, cache, segment, lo, hi, aborted):
            if b.num_rows:
                progress[0] = b.column(4)[-1].as_py() + 1
            yield b
    except RemoteResourceNotFoundError:
        raise
    except (RemoteStorageError, RemoteSegmentCorruptError, RemoteIndexCacheError) as e:
        raise RemoteReadError(f"Cannot fetch offsets [{lo}, {hi}) of {segment.topic_id_partition.topic_partition} "
                              f"from the remote tier at {store.uri} (segment {segment.id}): {e}") from e


def _segment_rows(ropts: RemoteSourceOptions, store: RemoteStore, cache: RemoteIndexCache,
                  segment: RemoteLogSegmentMetadata, lo: int, hi: int,
                  aborted: AbortedBatchFilter | None = None) -> Iterator[pa.RecordBatch]:
    """Rows of offsets ``[lo, hi)`` of one segment: ranged GETs of whole batches from the offset
    index's position, :data:`READ_BYTES` at a time."""
    from tidelog.remote.remote_read import read_segment

    tp = TopicPartition(segment.topic_id_partition.topic, segment.topic_id_partition.partition)
    with cache.indexes(segment) as idx:
        offset = lo
        while offset < hi:
            got = read_segment(store, segment, idx.offset, offset, READ_BYTES, True, partition=str(tp))
            if not got.records:
                return  # the segment holds nothing at or past ``offset`` (compacted away)
            yield from record_batches(got.records, tp.topic, tp.partition, lo, hi,
                                      include_headers=ropts.parsed.include_headers, aborted=aborted)
            if got.next_offset <= offset:
                return
            offset = got.next_offset
