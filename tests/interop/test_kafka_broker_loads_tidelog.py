"""A real Kafka broker loads partitions tidelog wrote and serves every record unchanged.

tidelog writes one data dir with its own code (LogManager, BatchBuilder, its cleaner): a topic per
codec (headers, null keys and values, out-of-order timestamps, idempotent-producer batches, several
rolled segments with their indexes), a LogAppendTime topic, a topic whose log start offset
DeleteRecords and retention moved past its first segment's base, and a compacted topic that tidelog's
cleaner rewrote (tombstones under a stamped delete horizon, removed records, offset gaps, the empty
batch kept for an idempotent producer).

A KRaft broker learns its topics from its metadata log: the test creates the same topics through the
broker, stops it and puts tidelog's files in the partition dirs it made:

| file                                   | whose                    | why                                              |
|----------------------------------------|--------------------------|--------------------------------------------------|
| ``.log`` ``.index`` ``.timeindex``     | tidelog's                | what is under test (Kafka's empty ones go)       |
| ``.snapshot``                          | none                     | Kafka's described its empty log; tidelog keeps   |
|                                        |                          | no producer state: Kafka rebuilds it             |
| ``leader-epoch-checkpoint``            | tidelog's                | the epochs of the batches we wrote               |
| ``tidelog-topic.json``                 | tidelog's                | Kafka must ignore it (no warning, nothing lost)  |
| ``partition.metadata``                 | Kafka's                  | the topic id must be the metadata log's          |
| recovery-point, log-start-offset,      | Kafka's files, our       | written by tidelog's checkpoint writer; for the  |
| replication-offset, cleaner-offset     | partitions' entries      | unclean start the recovery point is 0, as if we  |
| checkpoints                            | replaced with tidelog's  | had crashed before any flush                     |

Kafka's own cleaner and retention must leave these topics alone while the test runs: every topic
gets ``retention.ms=-1`` and a ``min.compaction.lag.ms`` of ten years (our timestamps are from 2023).

Two starts, all topics of a start in one stop/replace/start cycle:

* **clean** (``.kafka_cleanshutdown`` present): LogLoader recovers nothing and trusts our indexes, so
  every fetch goes through our ``.index`` and every ListOffsets by timestamp through our
  ``.timeindex``. The consumer fetches at most 512 bytes per partition (reads start mid-segment
  again and again), then seeks to the last offset of every batch, where each index entry points,
  and compares the first record it gets with what tidelog's own read at that offset returns;
* **unclean** (marker removed, recovery point 0): LogLoader recovers every segment, checking each
  batch (size, CRC, offsets) and rebuilding indexes, epoch cache and producer state; it truncates at
  the first invalid batch. Nothing of ours may be truncated, its server.log must hold no warning about
  our partitions, and the indexes it rebuilds must be byte-identical to ours. One extra partition,
  a copy with one corrupted byte, shows that the check bites: Kafka truncates it at that batch.
"""

from __future__ import annotations

import re
import shutil
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from kafka import KafkaConsumer
from kafka import TopicPartition as KafkaTopicPartition
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.consumer.fetcher import ConsumerRecord

from kafka_oracle import KafkaBroker
from tidelog.manager import LogManager
from tidelog.manager.topic_copies import TOPIC_COPY_FILE
from tidelog.records import BatchBuilder, CompressionType, RecordBatch, iter_batches
from tidelog.storage import files
from tidelog.storage.checkpoints import (
    CLEANER_OFFSET_CHECKPOINT_FILE,
    LEADER_EPOCH_CHECKPOINT_FILE,
    LOG_START_OFFSET_CHECKPOINT_FILE,
    RECOVERY_POINT_CHECKPOINT_FILE,
    REPLICATION_OFFSET_CHECKPOINT_FILE,
    OffsetCheckpointFile,
)
from tidelog.storage.config import BrokerConfig
from tidelog.storage.log import Log
from tidelog.testing import FakeClock, FakeScheduler
from tidelog.topic_partition import TopicPartition

pytestmark = pytest.mark.xdist_group("kafka_broker")

NOW = 1_700_000_000_000
PRODUCER_ID = 4242
DELETE_RETENTION_MS = 3_600_000
TEN_YEARS_MS = 10 * 365 * 24 * 3_600_000
FETCH_BYTES = 512  # per partition and fetch: more than any batch here, under half a segment
TIMEOUT_S = 60.0

BOTH_SIDES = {"index.interval.bytes": "256"}  # Kafka's recovery must place index entries as we did
TIDELOG_ONLY = {"segment.bytes": "1200"}  # Kafka 4 refuses segments under 1 MiB; it only reads ours
KAFKA_ONLY = {"retention.ms": "-1", "retention.bytes": "-1", "min.compaction.lag.ms": str(TEN_YEARS_MS)}

# Kafka's words for "something was wrong with these files" at load (LogLoader, LogSegment.recover),
# and any warning or error (server.log lines read "[date] LEVEL message (logger)")
TROUBLE = re.compile(r"truncat|corrupt|invalid|orphan|could not find|^\[[^]]*\] (WARN|ERROR) ", re.IGNORECASE)

Row = tuple[int, int, int, bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...], int]
Writer = Callable[[LogManager, TopicPartition, FakeClock], None]


# --- what tidelog writes -------------------------------------------------------------------------

def plain_batches(manager: LogManager, tp: TopicPartition, codec: CompressionType, clock: FakeClock) -> None:
    """40 batches of 1-6 records: null keys and values, headers (one with a null value), a record
    with the batch's max timestamp in the middle, every fourth batch older than the one before,
    batches 8-11 from an idempotent producer."""
    n, sequence = 0, 0
    for b in range(40):
        producer = {}
        if 8 <= b < 12:
            producer = {"producer_id": PRODUCER_ID, "producer_epoch": 0, "base_sequence": sequence}
        builder = BatchBuilder(compression=codec, **producer)
        size = 1 + (b * 5) % 6
        for i in range(size):
            key = None if n % 5 == 0 else f"key-{n % 13}".encode()
            value = None if n % 7 == 3 else f"value-{n}-".encode() * (1 + n % 3)
            headers = [("seq", str(n).encode()), ("null", None)] if n % 3 == 0 else []
            timestamp = NOW + 10 * n + (50 if i == size // 2 else 0) - (3_000 if b % 4 == 3 else 0)
            builder.append(i, timestamp, key, value, headers)
            n += 1
        sequence += size if producer else 0
        manager.append(tp, builder.build())
        clock.advance(1_000)  # distinct LogAppendTime stamps


def codec_writer(codec: CompressionType) -> Writer:
    return lambda manager, tp, clock: plain_batches(manager, tp, codec, clock)


def trimmed(manager: LogManager, tp: TopicPartition, clock: FakeClock) -> None:
    """zstd batches, then DeleteRecords to one record into the third segment and the retention pass
    that drops the two segments below: the log start offset is past the first segment's base."""
    plain_batches(manager, tp, CompressionType.ZSTD, clock)
    log = manager.log(tp)
    target = log.segments[2].base_offset + 1
    assert manager.delete_records(tp, target) == target
    manager.run_retention(tp.topic)
    assert log.segments[0].base_offset < log.log_start_offset == target


def compacted(manager: LogManager, tp: TopicPartition, clock: FakeClock) -> None:
    """Overwrites in every codec, tombstones, an idempotent producer whose last batch is wholly
    overwritten (its empty batch stays), then one pass of tidelog's cleaner below the active segment."""
    codecs = list(CompressionType)

    def append(rows: list[tuple[str, str | None]], **producer: int) -> None:
        builder = BatchBuilder(compression=codecs[manager.log(tp).log_end_offset % len(codecs)], **producer)
        for i, (key, value) in enumerate(rows):
            headers = [("round", value.encode() if value else None)] if i % 2 == 0 else []
            builder.append(i, clock.milliseconds() + i, key.encode(), value.encode() if value else None, headers)
        manager.append(tp, builder.build())
        clock.advance(100)

    for round_ in range(3):
        for batch_no in range(4):
            append([(f"k{batch_no * 5 + i}", f"r{round_}-{i}" * 3) for i in range(5)])
    append([("k0", None), ("k1", "alive"), ("k2", None)])
    append([("k3", None)])
    append([("k4", "p0"), ("k5", "p1")], producer_id=PRODUCER_ID, producer_epoch=0, base_sequence=0)
    append([("k4", "over"), ("k5", "over")])
    manager.log(tp).roll()
    append([("k19", "active")])
    assert manager.cleaner is not None
    result = manager.cleaner.clean_now(tp, force=True)
    assert result is not None and result.error is None
    batches = [batch for segment in manager.log(tp).segments for _, batch in segment.log.batches()]
    assert any(batch.has_delete_horizon for batch in batches), "tombstones under a delete horizon"
    assert any(batch.records_count == 0 and batch.producer_id == PRODUCER_ID for batch in batches), "an empty batch"


@dataclass(frozen=True)
class TopicSpec:
    suffix: str
    write: Writer
    configs: Mapping[str, str] = field(default_factory=dict)
    corrupt: bool = False  # Kafka gets our files with one byte flipped (see corrupt_copy)


TOPICS = [
    *(TopicSpec(codec.name.lower(), codec_writer(codec)) for codec in CompressionType if codec != CompressionType.ZSTD),
    TopicSpec("zstd-trimmed", trimmed),
    TopicSpec("gzip-append-time", codec_writer(CompressionType.GZIP), {"message.timestamp.type": "LogAppendTime"}),
    TopicSpec("compacted", compacted, {"cleanup.policy": "compact", "delete.retention.ms": str(DELETE_RETENTION_MS)}),
]
CORRUPT = TopicSpec("one-byte-flipped", codec_writer(CompressionType.NONE), corrupt=True)
TIDELOG_COMPACTION = {"min.cleanable.dirty.ratio": "0.0"}


def topic_name(variant: str, spec: TopicSpec) -> str:
    return f"loaded-{variant}-{spec.suffix}"


@dataclass(frozen=True)
class Expected:
    """What tidelog reads back from its own files for one partition."""

    rows: list[Row]
    log_start_offset: int
    log_end_offset: int
    by_timestamp: dict[int, tuple[int, int] | None]  # ListOffsets probe -> (offset, timestamp)
    at_offset: dict[int, Row]  # fetch offset (each batch's last offset) -> first record read from there
    segments: list[int]  # base offsets
    largest_batch: int  # bytes


@dataclass(frozen=True)
class TidelogData:
    log_dir: Path
    specs: dict[str, TopicSpec]  # topic -> spec
    expected: dict[str, Expected]  # topic -> its partition 0

    def partition_dir(self, topic: str) -> Path:
        return self.log_dir / files.partition_dir_name(TopicPartition(topic, 0))


def batch_rows(batch: RecordBatch, from_offset: int) -> list[Row]:
    """The batch's records at or after ``from_offset``, as a consumer sees them."""
    epoch, kind = batch.partition_leader_epoch, int(batch.timestamp_type)
    return [(r.offset, r.timestamp, kind, r.key, r.value, tuple(map(tuple, r.headers)), epoch)
            for r in batch.records() if r.offset >= from_offset]


def tidelog_rows(log: Log) -> tuple[list[Row], list[RecordBatch]]:
    """Every record a consumer from the log start gets through ``Log.read`` (records of the first
    batch below the fetch offset skipped), and every batch read."""
    rows: list[Row] = []
    batches: list[RecordBatch] = []
    position = log.log_start_offset
    while position < log.high_watermark:
        for _, batch in iter_batches(log.read(position, FETCH_BYTES).records):
            rows += batch_rows(batch, position)
            batches.append(batch)
            position = max(position, batch.next_offset)
    return rows, batches


def timestamp_probes(max_timestamps: list[int]) -> list[int]:
    """Each batch's max timestamp, one past it, and one before and after everything."""
    probes = {t + d for t in max_timestamps for d in (0, 1)} | {min(max_timestamps) - 1, max(max_timestamps) + 1}
    return sorted(probes)


def first_row_at(log: Log, offset: int) -> Row:
    """The first record a fetch at ``offset`` returns (the log's index finds where to start)."""
    for _, batch in iter_batches(log.read(offset, FETCH_BYTES).records):
        if found := batch_rows(batch, offset):
            return found[0]
    raise AssertionError(f"no record at or after {offset} in one read")


def expected_of(log: Log) -> Expected:
    rows, batches = tidelog_rows(log)
    last_record = rows[-1][0]
    at_offset = {b.last_offset: first_row_at(log, b.last_offset) for b in batches if b.last_offset <= last_record}
    by_timestamp = {}
    for probe in timestamp_probes([batch.max_timestamp for batch in batches]):
        found = log.fetch_offset_by_timestamp(probe)
        by_timestamp[probe] = None if found is None else (found.offset, found.timestamp)
    assert log.high_watermark == log.log_end_offset
    return Expected(rows, log.log_start_offset, log.log_end_offset, by_timestamp, at_offset,
                    [s.base_offset for s in log.segments], max(batch.size_in_bytes for batch in batches))


def open_manager(log_dir: Path, clock: FakeClock) -> LogManager:
    broker = BrokerConfig.from_properties({"log.dirs": str(log_dir), "log.cleaner.dedupe.buffer.size": "100000"})
    return LogManager.open(broker, clock=clock, scheduler=FakeScheduler(clock))


def write_topics(log_dir: Path, specs: Mapping[str, TopicSpec], clock: FakeClock) -> None:
    with open_manager(log_dir, clock) as manager:
        for topic, spec in specs.items():
            configs = {**BOTH_SIDES, **TIDELOG_ONLY, **spec.configs}
            if spec.configs.get("cleanup.policy") == "compact":
                configs.update(TIDELOG_COMPACTION)
            manager.create_topic(topic, 1, configs)
            spec.write(manager, TopicPartition(topic, 0), clock)


@pytest.fixture(scope="module")
def tidelog_data(tmp_path_factory: pytest.TempPathFactory) -> TidelogData:
    """One tidelog data dir holding the topics of both starts, written, shut down cleanly, and
    read back by a fresh LogManager."""
    log_dir = tmp_path_factory.mktemp("tidelog") / "data"
    specs = {topic_name(v, s): s for v in ("clean", "unclean") for s in TOPICS}
    specs[topic_name("unclean", CORRUPT)] = CORRUPT
    clock = FakeClock(NOW)
    write_topics(log_dir, specs, clock)
    with open_manager(log_dir, clock) as manager:
        expected = {topic: expected_of(manager.log(TopicPartition(topic, 0))) for topic in specs}
    for topic, partition in expected.items():  # what makes Kafka's reads start mid-segment
        assert len(partition.segments) >= 4 and partition.largest_batch < FETCH_BYTES, topic
    return TidelogData(log_dir, specs, expected)


# --- moving it into Kafka's data dir ---------------------------------------------------------------

def create_topics(broker: KafkaBroker, data: TidelogData, topics: list[str]) -> None:
    """The same topics through the broker; returns once their partition dirs have a topic id."""
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap_servers, client_id="tidelog-loads")
    try:
        admin.create_topics([NewTopic(t, 1, 1, topic_configs={**BOTH_SIDES, **KAFKA_ONLY, **data.specs[t].configs})
                             for t in topics])
    finally:
        admin.close()
    broker.wait_for(lambda: all((broker.partition_dir(t) / "partition.metadata").exists() for t in topics),
                    "the new partitions' dirs", TIMEOUT_S)


def replace_segments(kafka_dir: Path, tidelog_dir: Path) -> None:
    """Kafka's segment files and producer snapshots out, tidelog's segment files, epoch checkpoint
    and topic copy (``tidelog-topic.json``, which Kafka must ignore) in; ``partition.metadata``
    (the topic id) stays Kafka's."""
    for path in kafka_dir.iterdir():
        if path.suffix in (*files.SEGMENT_FILE_SUFFIXES, files.PRODUCER_SNAPSHOT_SUFFIX):
            path.unlink()
    for path in tidelog_dir.iterdir():
        if path.suffix in files.SEGMENT_FILE_SUFFIXES or path.name in (LEADER_EPOCH_CHECKPOINT_FILE, TOPIC_COPY_FILE):
            shutil.copy2(path, kafka_dir / path.name)


def corrupt_batch(partition_dir: Path, segment_base: int) -> tuple[int, int]:
    """(byte position, base offset) of the middle batch of a segment: its last byte is the one
    :func:`corrupt_copy` flips, so its CRC no longer matches."""
    batches = list(iter_batches(files.log_file(partition_dir, segment_base).read_bytes()))
    position, batch = batches[len(batches) // 2]
    return position + batch.size_in_bytes - 1, batch.base_offset


def corrupt_copy(kafka_dir: Path, tidelog_dir: Path, segment_base: int) -> None:
    position, _ = corrupt_batch(tidelog_dir, segment_base)
    with open(files.log_file(kafka_dir, segment_base), "r+b") as log:
        log.seek(position)
        byte = log.read(1)[0]
        log.seek(position)
        log.write(bytes([byte ^ 0xFF]))


def merge_checkpoint(name: str, kafka_log_dir: Path, entries: Mapping[TopicPartition, int],
                     ours: list[TopicPartition]) -> None:
    """Kafka's checkpoint ``name`` with our partitions' entries replaced by ``entries`` (an absent
    entry drops Kafka's), read and written by tidelog's checkpoint code."""
    checkpoint = OffsetCheckpointFile(kafka_log_dir / name)
    merged = {tp: offset for tp, offset in checkpoint.read().items() if tp not in ours}
    merged.update({tp: offset for tp, offset in entries.items() if tp in ours})
    checkpoint.write(merged)


def merge_checkpoints(kafka_log_dir: Path, data: TidelogData, topics: list[str], *, clean: bool) -> None:
    ours = [TopicPartition(t, 0) for t in topics]
    for name in (LOG_START_OFFSET_CHECKPOINT_FILE, REPLICATION_OFFSET_CHECKPOINT_FILE,
                 CLEANER_OFFSET_CHECKPOINT_FILE, RECOVERY_POINT_CHECKPOINT_FILE):
        entries = OffsetCheckpointFile(data.log_dir / name).read()
        if name == RECOVERY_POINT_CHECKPOINT_FILE and not clean:
            entries = dict.fromkeys(ours, 0)  # crashed before any flush: Kafka recovers every segment
        merge_checkpoint(name, kafka_log_dir, entries, ours)


def restart_with_our_files(broker: KafkaBroker, data: TidelogData, topics: list[str], *, clean: bool) -> int:
    """Stop, put tidelog's files in place, start (cleanly or not); returns where this start's
    lines begin in server.log."""
    broker.stop()
    marker = broker.log_dir / ".kafka_cleanshutdown"
    assert marker.exists(), "Kafka's clean stop writes its marker"
    for topic in topics:
        replace_segments(broker.partition_dir(topic), data.partition_dir(topic))
        if data.specs[topic].corrupt:
            corrupt_copy(broker.partition_dir(topic), data.partition_dir(topic), data.expected[topic].segments[1])
    merge_checkpoints(broker.log_dir, data, topics, clean=clean)
    if not clean:
        marker.unlink()
    log_start = broker.server_log.stat().st_size
    broker.start()
    return log_start


# --- what Kafka serves -----------------------------------------------------------------------------

@dataclass
class Served:
    """What the broker serves for each topic's partition 0, and its server.log since the start."""

    rows: dict[str, list[Row]]
    at_offset: dict[str, dict[int, Row]]
    earliest: dict[str, int]
    latest: dict[str, int]
    by_timestamp: dict[str, dict[int, tuple[int, int] | None]]
    server_log: str

    def lines_about(self, topic: str) -> list[str]:
        name = re.compile(rf"(?<![\w.-]){re.escape(topic)}-0(?![\w.-])")
        return [line for line in self.server_log.splitlines() if name.search(line)]

    def trouble_with(self, topic: str) -> list[str]:
        return [line for line in self.lines_about(topic) if TROUBLE.search(line)]

    def checkpoint_trouble(self) -> list[str]:
        """Warnings about any checkpoint file (Kafka names the file, not the partition)."""
        return [line for line in self.server_log.splitlines()
                if "checkpoint" in line.lower() and re.match(r"\[[^]]*\] (WARN|ERROR) ", line)]


def consumer_for(broker: KafkaBroker) -> KafkaConsumer:
    return KafkaConsumer(bootstrap_servers=broker.bootstrap_servers, group_id=None, enable_auto_commit=False,
                         auto_offset_reset="earliest", max_partition_fetch_bytes=FETCH_BYTES,
                         fetch_max_wait_ms=100, request_timeout_ms=int(TIMEOUT_S * 1000))


def consume_all(consumer: KafkaConsumer, tps: dict[str, KafkaTopicPartition],
                latest: dict[str, int]) -> dict[str, list[Row]]:
    consumer.assign(list(tps.values()))
    consumer.seek_to_beginning()
    rows: dict[str, list[Row]] = {topic: [] for topic in tps}
    deadline = time.monotonic() + TIMEOUT_S
    while any(consumer.position(tp) < latest[topic] for topic, tp in tps.items()):
        assert time.monotonic() < deadline, f"consumed only {({t: len(r) for t, r in rows.items()})}"
        for tp, records in consumer.poll(timeout_ms=500).items():
            rows[tp.topic] += [consumer_row(r) for r in records]
    return rows


def consumer_row(record: ConsumerRecord) -> Row:
    return (record.offset, record.timestamp, record.timestamp_type, record.key, record.value,
            tuple(map(tuple, record.headers)), record.leader_epoch)


def first_rows_at(consumer: KafkaConsumer, tps: dict[str, KafkaTopicPartition],
                  probes: dict[str, list[int]]) -> dict[str, dict[int, Row]]:
    """Seek every partition to its next probe offset and take the first record fetched from there:
    Kafka's offset index decides where in the segment each of these reads starts."""
    found: dict[str, dict[int, Row]] = {topic: {} for topic in tps}
    deadline = time.monotonic() + TIMEOUT_S
    for i in range(max(len(p) for p in probes.values())):
        pending = {topic: p[i] for topic, p in probes.items() if i < len(p)}
        for topic, offset in pending.items():
            consumer.seek(tps[topic], offset)
        asked = dict(pending)
        while pending:
            assert time.monotonic() < deadline, f"no records at {pending}"
            for tp, records in consumer.poll(timeout_ms=500).items():
                if tp.topic in pending and records:
                    found[tp.topic][asked[tp.topic]] = consumer_row(records[0])
                    del pending[tp.topic]
    return found


def lookups_by_timestamp(consumer: KafkaConsumer, tps: dict[str, KafkaTopicPartition],
                         probes: dict[str, list[int]]) -> dict[str, dict[int, tuple[int, int] | None]]:
    """ListOffsets for every probe, all partitions in each request."""
    found: dict[str, dict[int, tuple[int, int] | None]] = {topic: {} for topic in tps}
    for i in range(max(len(p) for p in probes.values())):
        asked = {tps[topic]: p[i] for topic, p in probes.items() if i < len(p)}
        for tp, answer in consumer.offsets_for_times(asked).items():
            found[tp.topic][asked[tp]] = None if answer is None else (answer.offset, answer.timestamp)
    return found


def serve(broker: KafkaBroker, data: TidelogData, topics: list[str], log_start: int) -> Served:
    tps = {topic: KafkaTopicPartition(topic, 0) for topic in topics}
    consumer = consumer_for(broker)
    try:
        earliest = {tp.topic: o for tp, o in consumer.beginning_offsets(list(tps.values())).items()}
        latest = {tp.topic: o for tp, o in consumer.end_offsets(list(tps.values())).items()}
        rows = consume_all(consumer, tps, latest)
        probes = {topic: sorted(data.expected[topic].by_timestamp) for topic in topics}
        by_timestamp = lookups_by_timestamp(consumer, tps, probes)
        fetches = {topic: [o for o in sorted(data.expected[topic].at_offset) if o < latest[topic]] for topic in topics}
        at_offset = first_rows_at(consumer, tps, fetches)
    finally:
        consumer.close()
    with open(broker.server_log, "rb") as log:
        log.seek(log_start)
        server_log = log.read().decode(errors="replace")
    return Served(rows, at_offset, earliest, latest, by_timestamp, server_log)


def delete_topics(broker: KafkaBroker, topics: list[str]) -> None:
    """Leave the session's broker as we found it (deletion runs in the background)."""
    if not broker.running:
        return
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap_servers, client_id="tidelog-loads")
    try:
        admin.delete_topics(topics)
    finally:
        admin.close()


def load_into_kafka(broker: KafkaBroker, data: TidelogData, variant: str, *, clean: bool) -> Iterator[Served]:
    """One stop/replace/start cycle for every topic of ``variant``, then everything it serves;
    the topics are deleted afterwards."""
    topics = sorted(t for t in data.specs if t.startswith(f"loaded-{variant}-"))
    if not broker.running:
        broker.start()
    create_topics(broker, data, topics)
    try:
        log_start = restart_with_our_files(broker, data, topics, clean=clean)
        yield serve(broker, data, topics, log_start)
    finally:
        delete_topics(broker, topics)


@pytest.fixture(scope="module")
def after_clean_start(kafka_broker_session: KafkaBroker, tidelog_data: TidelogData) -> Iterator[Served]:
    yield from load_into_kafka(kafka_broker_session, tidelog_data, "clean", clean=True)


@pytest.fixture(scope="module")
def after_unclean_start(kafka_broker_session: KafkaBroker, tidelog_data: TidelogData) -> Iterator[Served]:
    yield from load_into_kafka(kafka_broker_session, tidelog_data, "unclean", clean=False)


# --- the checks --------------------------------------------------------------------------------------

def assert_served_as_tidelog_reads(served: Served, data: TidelogData, topic: str) -> None:
    expected = data.expected[topic]
    assert served.rows[topic] == expected.rows
    assert served.at_offset[topic] == expected.at_offset
    assert (served.earliest[topic], served.latest[topic]) == (expected.log_start_offset, expected.log_end_offset)
    assert served.by_timestamp[topic] == expected.by_timestamp


@pytest.mark.parametrize("spec", TOPICS, ids=lambda s: s.suffix)
def test_kafka_serves_our_segments_unchanged_after_a_clean_start(after_clean_start: Served, tidelog_data: TidelogData,
                                                                 spec: TopicSpec) -> None:
    topic = topic_name("clean", spec)
    assert_served_as_tidelog_reads(after_clean_start, tidelog_data, topic)
    lines = after_clean_start.lines_about(topic)
    assert any("Completed load of Log" in line for line in lines), "Kafka loaded it (and this test sees its log)"
    assert [line for line in lines if "Recovering" in line] == [], "a clean start recovers nothing"
    assert after_clean_start.trouble_with(topic) == []


@pytest.mark.parametrize("spec", TOPICS, ids=lambda s: s.suffix)
def test_kafka_recovers_our_segments_without_truncating_anything(after_unclean_start: Served,
                                                                 tidelog_data: TidelogData, spec: TopicSpec) -> None:
    topic = topic_name("unclean", spec)
    assert_served_as_tidelog_reads(after_unclean_start, tidelog_data, topic)
    lines = after_unclean_start.lines_about(topic)
    recovered = [int(m[1]) for line in lines if (m := re.search(r"Recovering unflushed segment (\d+)\.", line))]
    assert recovered == tidelog_data.expected[topic].segments
    assert after_unclean_start.trouble_with(topic) == []


@pytest.mark.parametrize("spec", TOPICS, ids=lambda s: s.suffix)
def test_kafkas_recovery_rebuilds_the_indexes_we_wrote(after_unclean_start: Served, kafka_broker_session: KafkaBroker,
                                                       tidelog_data: TidelogData, spec: TopicSpec) -> None:
    """Recovered indexes equal ours byte for byte (the active segment's are preallocated: zeros follow)."""
    topic = topic_name("unclean", spec)
    ours, theirs = tidelog_data.partition_dir(topic), kafka_broker_session.partition_dir(topic)
    compared = 0
    for base in tidelog_data.expected[topic].segments:
        for index in (files.offset_index_file(ours, base), files.time_index_file(ours, base)):
            expected, rebuilt = index.read_bytes(), (theirs / index.name).read_bytes()
            assert rebuilt[:len(expected)] == expected, index.name
            assert rebuilt[len(expected):] == bytes(len(rebuilt) - len(expected)), index.name
            compared += len(expected)
    assert compared > 0, "the indexes had entries to compare"


def test_kafka_truncates_a_segment_with_a_corrupted_byte(after_unclean_start: Served,
                                                          tidelog_data: TidelogData) -> None:
    """The checks above can fail: one flipped byte in our copy, and Kafka's recovery cuts there."""
    topic = topic_name("unclean", CORRUPT)
    expected = tidelog_data.expected[topic]
    _, cut = corrupt_batch(tidelog_data.partition_dir(topic), expected.segments[1])
    assert after_unclean_start.latest[topic] == cut
    assert after_unclean_start.rows[topic] == [row for row in expected.rows if row[0] < cut]
    trouble = after_unclean_start.trouble_with(topic)
    assert any("Found invalid messages in log segment" in line for line in trouble), trouble
    assert any(f"Corruption found in segment {expected.segments[1]}, truncating to offset {cut}" in line
               for line in trouble), trouble


@pytest.mark.parametrize("start", ["after_clean_start", "after_unclean_start"])
def test_kafka_reads_the_checkpoints_we_wrote(start: str, request: pytest.FixtureRequest,
                                              tidelog_data: TidelogData) -> None:
    """No complaint about any checkpoint file, and each partition's high watermark is ours (the
    log start offsets are checked above: ListOffsets earliest of the trimmed topic)."""
    served: Served = request.getfixturevalue(start)
    assert served.checkpoint_trouble() == []
    for topic in served.rows:
        if not tidelog_data.specs[topic].corrupt:
            high_watermark = tidelog_data.expected[topic].log_end_offset
            assert any(f"with initial high watermark {high_watermark}" in line
                       for line in served.lines_about(topic)), topic
