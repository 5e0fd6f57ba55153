"""A data dir written by a real Kafka broker, killed with ``kill -9``, opened by tidelog.

Through kafka-python, on the session broker (topics ``kdir-*``):

* ``kdir-codecs``: five producers, one per codec (none, gzip, snappy, lz4, zstd), the gzip and lz4
  ones idempotent; null keys, null values, headers (repeated keys, empty values; kafka-python
  refuses null ones), explicit old timestamps;
* ``kdir-txn``: a transactional producer: committed, aborted, committed (markers, ``.txnindex``);
* ``kdir-compacted``: keys overwritten over several 1 KiB segments (``internal.segment.bytes``:
  Kafka 4 refuses ``segment.bytes`` below 1 MiB), a tombstone overwritten and one kept; cleaning
  is held back by ``min.compaction.lag.ms`` until everything is written, then released, and we
  wait for Kafka's ``cleaner-offset-checkpoint`` to reach the active segment (one clean, so one
  delete horizon is stamped);
* ``kdir-retained``: 1 KiB segments and ``retention.bytes``; we wait until Kafka deleted what
  its size rule allows and moved the log start offset.

What a read_uncommitted consumer gets (plus a read_committed one for ``kdir-txn``) and the log
start/end offsets Kafka answers are the expected values. The broker is then killed (no flush,
no checkpoint, indexes left preallocated) and its log dir copied with ``cp -a`` (partition dirs
of other tests' topics are removed from the copy; Kafka's internal ones stay); the session broker
recovers its own dir at the next test that needs it.

On the copy, tidelog: ``verify`` passes on the unclean dir; the library (one unclean open, so one
recovery) and ``tidelog consume`` give every record as Kafka served it (offset, timestamp and
its type, key, value, headers, the batch's leader epoch), the same log start offset, high
watermark and last stable offset, and the same answers to ListOffsets by time; the aborted
transaction comes from Kafka's ``.txnindex``; every ``.snapshot`` Kafka wrote (at its rolls) decodes
to the entries Kafka's DumpLogSegments prints, and the producer state tidelog loads (those
snapshots plus the batches after them) has, per producer id, the epoch, last sequence, last data
offset and coordinator epoch that Kafka's dump of the batches implies. Then retention and cleaning continue, each on its
own copy: ``retention.bytes`` lowered through ``tidelog configs`` deletes exactly the next
segment, ``retention.ms=1`` empties a log (rolling Kafka's active segment), ``tidelog clean run
--force`` over new records leaves one record per key below the active segment and keeps Kafka's
tombstone (its horizon is a day away), and a clean with the clock at Kafka's stamped horizon
drops it while one a millisecond earlier keeps it; ``verify`` passes after each.

Kafka's topic configs live in its metadata log: tidelog adopts the partitions with the overrides
it finds there (``cleanup.policy=compact`` included; tests/interop/test_kafka_topic_configs_adopted.py
checks every one), except Kafka 4's test-only ``internal.segment.bytes``, so the cleaning step sets
``segment.bytes`` through ``tidelog configs``.
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KafkaTopicPartition
from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient, NewTopic

from kafka_oracle import KAFKA_4, KafkaBroker
from kafka_oracle.dump import DumpedBatch, dump_log_segments
from reliability.broker import ServeProcess
from tests.cli_helpers import run_cli
from tidelog.manager import LogManager
from tidelog.records import BatchBuilder, iter_batches
from tidelog.storage import files
from tidelog.storage.checkpoints import OffsetCheckpointFile
from tidelog.storage.config import BrokerConfig
from tidelog.storage.fetch_info import TimestampAndOffset
from tidelog.storage.log import Log
from tidelog.storage.producer_snapshot import SnapshotEntry, read_snapshot
from tidelog.storage.txn_index import AbortedTxn
from tidelog.testing import FakeClock, FakeScheduler
from tidelog.topic_partition import TopicPartition

pytestmark = pytest.mark.xdist_group("kafka_broker")

CODECS = "kdir-codecs"
TXN = "kdir-txn"
COMPACTED = "kdir-compacted"
RETAINED = "kdir-retained"
TOPICS = (CODECS, TXN, COMPACTED, RETAINED)
SEGMENT_BYTES = 1024
RETENTION_BYTES = 2048
DAY_MS = 86_400_000
HOUR_MS = 3_600_000
WAIT_S = 120.0
CLEANER_CHECKPOINT = "cleaner-offset-checkpoint"

Headers = tuple[tuple[str, bytes | None], ...]
Rec = tuple[int, int, int, bytes | None, bytes | None, Headers]  # offset, timestamp, type, key, value, headers


# --- producing through Kafka ----------------------------------------------------------------------

def producer(broker: KafkaBroker, **config: object) -> KafkaProducer:
    return KafkaProducer(bootstrap_servers=broker.bootstrap_servers, linger_ms=20, **config)


def produce_codecs(broker: KafkaBroker, old_ms: int) -> None:
    """12 records per codec in two batches; keyless, null values, headers, old timestamps."""
    for n, codec in enumerate((None, "gzip", "snappy", "lz4", "zstd")):
        out = producer(broker, compression_type=codec, enable_idempotence=n % 2 == 1)
        name = codec or "none"
        for j in range(12):
            key = None if j % 4 == 0 else f"{name}-{j % 5}".encode()
            val = None if j == 7 else bytes([j, 255 - j]) + f"{name} value {j}".encode() * (1 + j % 3)
            headers = ([("h", b"one"), ("h", b"two")] if j % 3 == 0
                       else [("codec", name.encode()), ("empty", b"")] if j % 3 == 1 else [])
            out.send(CODECS, key=key, value=val, headers=headers, partition=0,
                     timestamp_ms=old_ms + j if j % 2 else None)
            if j == 5:
                out.flush()
        out.flush()
        out.close()


def produce_transactions(broker: KafkaBroker) -> None:
    """Committed (3 records), aborted (3), committed (2), lz4, one producer."""
    out = producer(broker, transactional_id="kdir-txn-producer", compression_type="lz4")
    out.init_transactions()
    for outcome, count in (("commit", 3), ("abort", 3), ("commit", 2)):
        out.begin_transaction()
        for i in range(count):
            out.send(TXN, key=f"{outcome}-{i}".encode(), value=f"{outcome} value {i}".encode(), partition=0)
        out.flush()
        if outcome == "commit":
            out.commit_transaction()
        else:
            out.abort_transaction()
    out.close()


def compacted_rounds() -> Iterator[tuple[bytes, bytes | None]]:
    """Five rounds over k0..k11; k3: tombstone in round 3, not written after (kept); k4:
    tombstone in round 1, written again later (goes)."""
    for round_ in range(5):
        for k in range(12):
            if round_ == 4 and k == 3:
                continue
            tombstone = (round_, k) in ((3, 3), (1, 4))
            yield f"k{k}".encode(), None if tombstone else f"r{round_}-k{k}-".encode() + b"v" * (k * 3)


def produce_compacted(broker: KafkaBroker) -> None:
    out = producer(broker, compression_type="lz4")
    for i, (key, val) in enumerate(compacted_rounds()):
        out.send(COMPACTED, key=key, value=val, partition=0)
        if i % 3 == 2:
            out.flush()
    out.flush()
    out.close()


def produce_retained(broker: KafkaBroker) -> None:
    out = producer(broker)
    for i in range(48):
        out.send(RETAINED, key=f"r{i}".encode(), value=f"retained {i} ".encode() * 4, partition=0)
        if i % 4 == 3:
            out.flush()
    out.flush()
    out.close()


# --- watching Kafka's files -------------------------------------------------------------------------

def pdir(data_dir: Path, topic: str) -> Path:
    """The dir of the topic's partition 0."""
    return files.partition_dir(data_dir, TopicPartition(topic, 0))


def segments(path: Path) -> list[tuple[int, int]]:
    """(base offset, size) of each live ``.log`` of a partition dir, in offset order."""
    return sorted((files.offset_from_file_name(p.name), p.stat().st_size) for p in path.iterdir()
                  if p.name.endswith(files.LOG_SUFFIX))


def settled(path: Path) -> bool:
    return not any(p.suffix in files.TEMPORARY_SUFFIXES for p in path.iterdir())


def cleaner_checkpoint(log_dir: Path, topic: str) -> int | None:
    path = log_dir / CLEANER_CHECKPOINT
    return OffsetCheckpointFile(path).read().get(TopicPartition(topic, 0)) if path.exists() else None


def compacted_cleaned(broker: KafkaBroker) -> bool:
    path = broker.partition_dir(COMPACTED)
    return settled(path) and cleaner_checkpoint(broker.log_dir, COMPACTED) == segments(path)[-1][0]


def size_retention_done(broker: KafkaBroker) -> bool:
    """Kafka's size rule deletes the oldest segment while total - retention.bytes >= its size."""
    path = broker.partition_dir(RETAINED)
    found = segments(path)
    total = sum(size for _, size in found)
    return settled(path) and found[0][0] > 0 and total - RETENTION_BYTES < found[0][1]


# --- what Kafka serves --------------------------------------------------------------------------------

def kafka_rec(r: Any) -> Rec:
    headers = tuple((k, v) for k, v in r.headers)
    return (r.offset, r.timestamp, r.timestamp_type, r.key, r.value, headers)


@dataclass
class Consumed:
    """One partition as a consumer sees it."""

    records: list[Rec]
    leader_epochs: list[tuple[int, int]]  # (offset, leader epoch of its batch)
    log_start: int
    end: int  # the high watermark, or the last stable offset for read_committed
    by_time: list[tuple[int, tuple[int, int, int | None] | None]]  # ListOffsets by time: ts -> (offset, ts, epoch)


def consume(broker: KafkaBroker, topic: str, isolation: str = "read_uncommitted") -> Consumed:
    """Every record of partition 0, the offsets Kafka answers, and ListOffsets for every record
    timestamp (and one past the last)."""
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap_servers, group_id=None, enable_auto_commit=False,
                             isolation_level=isolation)
    try:
        tp = KafkaTopicPartition(topic, 0)
        consumer.assign([tp])
        start, end = consumer.beginning_offsets([tp])[tp], consumer.end_offsets([tp])[tp]
        consumer.seek(tp, start)
        found = []
        deadline = time.monotonic() + WAIT_S
        while consumer.position(tp) < end:
            assert time.monotonic() < deadline, f"consuming {topic} took over {WAIT_S} s"
            for records in consumer.poll(timeout_ms=1000).values():
                found += records
        by_time = []
        for ts in sorted({r.timestamp for r in found} | {max(r.timestamp for r in found) + 1}):
            answer = consumer.offsets_for_times({tp: ts})[tp]
            by_time.append((ts, None if answer is None else (answer.offset, answer.timestamp, answer.leader_epoch)))
        return Consumed([kafka_rec(r) for r in found], [(r.offset, r.leader_epoch) for r in found], start, end, by_time)
    finally:
        consumer.close()


@dataclass
class Served:
    """What Kafka served before it was killed, and the state it left its files in."""

    topics: dict[str, Consumed]
    committed: Consumed  # kdir-txn, read_committed
    compaction_window: tuple[int, int]  # wall-clock ms: cleaning released, cleaning seen done
    clean_shutdown_marker: bool
    recovery_points: dict[str, int]  # Kafka's checkpoint (0 when it has none)
    active_index_bytes: dict[str, int]  # size of each active segment's offset index

    @property
    def records(self) -> dict[str, list[Rec]]:
        return {topic: consumed.records for topic, consumed in self.topics.items()}

    @property
    def log_start(self) -> dict[str, int]:
        return {topic: consumed.log_start for topic, consumed in self.topics.items()}

    @property
    def log_end(self) -> dict[str, int]:
        return {topic: consumed.end for topic, consumed in self.topics.items()}


# --- the module's one Kafka run -------------------------------------------------------------------------

def create_topics(broker: KafkaBroker) -> None:
    small = {"internal.segment.bytes": str(SEGMENT_BYTES)}
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap_servers)
    try:
        admin.create_topics([
            NewTopic(CODECS, 1, 1),
            NewTopic(TXN, 1, 1),
            NewTopic(COMPACTED, 1, 1, topic_configs={
                **small, "cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01",
                "delete.retention.ms": str(DAY_MS), "min.compaction.lag.ms": str(HOUR_MS)}),
            NewTopic(RETAINED, 1, 1, topic_configs={**small, "retention.bytes": str(RETENTION_BYTES)}),
        ])
    finally:
        admin.close()


def release_compaction(broker: KafkaBroker) -> None:
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap_servers)
    try:
        admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, COMPACTED, configs={"min.compaction.lag.ms": "0"})])
    finally:
        admin.close()


def copy_killed_dir(broker: KafkaBroker, copy: Path) -> None:
    """``cp -a`` of the killed broker's log dir, then other tests' partition dirs removed."""
    subprocess.run(["cp", "-a", str(broker.log_dir), str(copy)], check=True)
    for path in copy.iterdir():
        if path.is_dir() and not path.name.startswith(("kdir-", "__")):
            shutil.rmtree(path)


@pytest.fixture(scope="module")
def served(kafka_broker_session: KafkaBroker, tmp_path_factory: pytest.TempPathFactory) -> tuple[Served, Path]:
    """Kafka writes and serves the topics, is killed, and its dir copied: (what it served, the copy)."""
    broker = kafka_broker_session  # module-scoped work on the session's broker (as ``kafka_broker``)
    if not broker.running:
        broker.start()
    create_topics(broker)
    broker.wait_for(lambda: all(broker.partition_dir(t).is_dir() for t in TOPICS), "the topics' dirs", WAIT_S)
    produce_codecs(broker, old_ms=int(time.time() * 1000) - 2 * HOUR_MS)
    produce_transactions(broker)
    produce_compacted(broker)
    produce_retained(broker)
    assert len(segments(broker.partition_dir(COMPACTED))) >= 3 and cleaner_checkpoint(broker.log_dir, COMPACTED) is None
    released = int(time.time() * 1000)
    release_compaction(broker)
    broker.wait_for(lambda: compacted_cleaned(broker), "Kafka's cleaner to clean kdir-compacted", WAIT_S)
    cleaned = int(time.time() * 1000)
    broker.wait_for(lambda: size_retention_done(broker), "Kafka's size retention on kdir-retained", WAIT_S)

    topics = {topic: consume(broker, topic) for topic in TOPICS}
    committed = consume(broker, TXN, "read_committed")
    broker.kill()
    copy = tmp_path_factory.mktemp("kafka-dir") / "copy"
    copy_killed_dir(broker, copy)
    points = OffsetCheckpointFile(copy / "recovery-point-offset-checkpoint").read()
    return Served(
        topics, committed, (released, cleaned), (copy / ".kafka_cleanshutdown").exists(),
        {topic: points.get(TopicPartition(topic, 0), 0) for topic in TOPICS},
        {topic: active_index_bytes(pdir(copy, topic)) for topic in TOPICS}), copy


def active_index_bytes(path: Path) -> int:
    base = segments(path)[-1][0]
    return files.offset_index_file(path, base).stat().st_size


# --- tidelog on the copy ----------------------------------------------------------------------------------

def run_tidelog(data_dir: Path, *args: str, stdin: bytes = b"") -> tuple[int, str, str]:
    """``tidelog --data-dir DATA_DIR ARGS`` in this process: (exit code, stdout, stderr)."""
    code, out, err = run_cli(data_dir, *args, stdin=stdin)
    return code, out.decode(), err


def tidelog(data_dir: Path, *args: str, stdin: bytes = b"") -> str:
    """The stdout of a ``tidelog`` command that must succeed."""
    code, out, err = run_tidelog(data_dir, *args, stdin=stdin)
    assert code == 0, f"tidelog {' '.join(args)} exited {code}: {err}{out}"
    return out


TIMESTAMP_TYPES = {"CreateTime": 0, "LogAppendTime": 1}


def json_rec(line: str) -> Rec:
    item = json.loads(line)
    decode = lambda s: None if s is None else base64.b64decode(s)  # noqa: E731
    pairs = item["headers"].items() if isinstance(item["headers"], dict) else item["headers"]
    return (item["offset"], item["timestamp"], TIMESTAMP_TYPES[item["timestampType"]], decode(item["key"]),
            decode(item["value"]), tuple((k, decode(v)) for k, v in pairs))


def tidelog_consume(copy: Path, topic: str, *args: str) -> list[Rec]:
    out = tidelog(copy, "consume", topic, "--from-beginning", "--format", "json", "--encoding", "base64", *args)
    return [json_rec(line) for line in out.splitlines()]


def library_rec(offset: int, timestamp: int, ts_type: int, key: bytes | None, value: bytes | None,
                headers: Sequence[tuple[str, bytes | None]]) -> Rec:
    return (offset, timestamp, ts_type, None if key is None else bytes(key), None if value is None else bytes(value),
            tuple((k, None if v is None else bytes(v)) for k, v in headers))


@contextmanager
def opened(copy: Path, clock: FakeClock | None = None) -> Iterator[LogManager]:
    broker = BrokerConfig.from_properties({})
    if clock is None:
        manager = LogManager.open(broker, [copy])
    else:
        manager = LogManager.open(broker, [copy], clock=clock, scheduler=FakeScheduler(clock))
    try:
        yield manager
    finally:
        manager.shutdown()


def data_batches(log: Log) -> Iterator[Any]:
    """Every data batch of the log's segment files (control batches skipped)."""
    for segment in log.segments:
        for _, batch in segment.log.batches():
            if not batch.is_control:
                yield batch


def data_records(log: Log) -> list[Rec]:
    rows = []
    for batch in data_batches(log):
        kind = int(batch.timestamp_type)
        rows += [library_rec(o, ts, kind, k, v, h) for o, ts, k, v, h in batch.record_tuples()]
    return rows


def leader_epochs(log: Log) -> list[tuple[int, int]]:
    return [(o, batch.partition_leader_epoch) for batch in data_batches(log) for o, *_ in batch.record_tuples()]


def horizons(partition_dir: Path) -> set[int]:
    stamped = set()
    for path in sorted(partition_dir.glob(f"*{files.LOG_SUFFIX}")):
        stamped |= {b.delete_horizon_ms for _, b in iter_batches(path.read_bytes()) if b.has_delete_horizon}
    return stamped


@dataclass
class Opened:
    """What tidelog made of the copy: ``verify`` first, then one open by the library (the
    recovery after Kafka's unclean stop)."""

    copy: Path
    verify: tuple[int, str, str]  # exit code, stdout, stderr
    horizon: int  # the delete horizon Kafka stamped in kdir-compacted
    records: dict[str, list[Rec]]
    leader_epochs: dict[str, list[tuple[int, int]]]
    offsets: dict[str, tuple[int, int, int]]  # log start, high watermark, last stable offset
    by_time: dict[str, list[tuple[int, tuple[int, int, int | None] | None]]]
    aborted: list[AbortedTxn]
    kafka_snapshots: dict[str, list[SnapshotEntry]]  # Kafka-written .snapshot files, as tidelog reads them
    producers: dict[str, dict[int, ProducerView]]  # the producer state tidelog loaded


ProducerView = tuple[int, int, int, int]  # epoch, last sequence, last data offset, coordinator epoch


def kafka_snapshot_files(copy: Path) -> list[Path]:
    return sorted(p for topic in TOPICS for p in pdir(copy, topic).glob(f"*{files.PRODUCER_SNAPSHOT_SUFFIX}"))


@pytest.fixture(scope="module")
def kafka_dir(served: tuple[Served, Path]) -> tuple[Served, Opened]:
    kafka, copy = served
    verify = run_tidelog(copy, "verify", str(copy))
    [horizon] = horizons(pdir(copy, COMPACTED))
    kafka_snapshots = {}  # kept aside before tidelog loads the dir (its load may delete stray ones)
    for path in kafka_snapshot_files(copy):
        aside = copy.parent / "kafka-snapshots" / path.parent.name / path.name
        aside.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, aside)
        kafka_snapshots[str(aside)] = read_snapshot(aside)
    with opened(copy) as manager:
        logs = {topic: manager.log(TopicPartition(topic, 0)) for topic in TOPICS}
        records = {topic: data_records(log) for topic, log in logs.items()}
        epochs = {topic: leader_epochs(log) for topic, log in logs.items()}
        offsets = {topic: (log.log_start_offset, log.high_watermark, log.last_stable_offset) for topic, log in logs.items()}
        by_time = {topic: [(ts, by_time_answer(log.fetch_offset_by_timestamp(ts))) for ts, _ in kafka.topics[topic].by_time]
                   for topic, log in logs.items()}
        aborted = logs[TXN].collect_aborted_transactions(0, logs[TXN].log_end_offset)
        producers = {topic: {pid: (e.producer_epoch, e.last_seq, e.last_data_offset, e.coordinator_epoch)
                             for pid, e in log.producer_state.active_producers.items()} for topic, log in logs.items()}
    return kafka, Opened(copy, verify, horizon, records, epochs, offsets, by_time, aborted, kafka_snapshots, producers)


def by_time_answer(found: TimestampAndOffset | None) -> tuple[int, int, int | None] | None:
    return None if found is None else (found.offset, found.timestamp, found.leader_epoch)


# --- the checks ----------------------------------------------------------------------------------------

KafkaDir = tuple[Served, Opened]


def test_kafka_wrote_what_the_scenarios_need(served: tuple[Served, Path]) -> None:
    kafka, copy = served
    codecs = {b.compression.name for p in sorted(pdir(copy, CODECS).glob("*.log"))
              for _, b in iter_batches(p.read_bytes())}
    assert codecs == {"NONE", "GZIP", "SNAPPY", "LZ4", "ZSTD"}
    compacted = kafka.records[COMPACTED]
    assert len(compacted) < len(list(compacted_rounds())), "Kafka's cleaner removed records"
    [tombstone] = [r for r in compacted if r[3] == b"k3"]
    assert tombstone[4] is None and tombstone[0] < segments(pdir(copy, COMPACTED))[-1][0], "a kept, cleaned tombstone"
    assert kafka.log_start[RETAINED] > 0 and kafka.log_start[RETAINED] == kafka.records[RETAINED][0][0]
    assert len(kafka.committed.records) == 5 and len(kafka.records[TXN]) == 8
    idempotent = {b.compression.name: b.has_producer_id for p in sorted(pdir(copy, CODECS).glob("*.log"))
                  for _, b in iter_batches(p.read_bytes())}
    assert idempotent == {"NONE": False, "GZIP": True, "SNAPPY": False, "LZ4": True, "ZSTD": False}


def test_the_copy_is_of_an_unclean_stop(served: tuple[Served, Path]) -> None:
    """No clean-shutdown marker, recovery points short of the log ends (tidelog must recover the
    tails), active segments' indexes still preallocated to ``segment.index.bytes``."""
    kafka, _ = served
    assert not kafka.clean_shutdown_marker
    assert all(kafka.recovery_points[t] < kafka.log_end[t] for t in TOPICS), kafka.recovery_points
    assert set(kafka.active_index_bytes.values()) == {10 * 1024 * 1024}


def test_verify_passes_on_the_killed_brokers_dir(kafka_dir: KafkaDir) -> None:
    code, out, err = kafka_dir[1].verify
    assert (code, out.startswith("OK:")) == (0, True), out + err


@pytest.mark.parametrize("topic", TOPICS)
def test_every_record_reads_back_as_kafka_served_it(kafka_dir: KafkaDir, topic: str) -> None:
    kafka, tidelog_view = kafka_dir
    assert tidelog_view.records[topic] == kafka.records[topic]
    assert tidelog_view.leader_epochs[topic] == kafka.topics[topic].leader_epochs
    assert tidelog_consume(tidelog_view.copy, topic) == kafka.records[topic]


@pytest.mark.parametrize("topic", TOPICS)
def test_log_start_high_watermark_and_offsets_for_times_are_kafkas(kafka_dir: KafkaDir, topic: str) -> None:
    kafka, tidelog_view = kafka_dir
    log_start, high_watermark, last_stable = tidelog_view.offsets[topic]
    assert (log_start, high_watermark) == (kafka.log_start[topic], kafka.log_end[topic])
    if topic == TXN:
        assert last_stable == kafka.committed.end
    assert tidelog_view.by_time[topic] == kafka.topics[topic].by_time


def test_consume_read_committed_prints_what_kafkas_read_committed_consumer_got(kafka_dir: KafkaDir) -> None:
    kafka, tidelog_view = kafka_dir
    committed = tidelog_consume(tidelog_view.copy, TXN, "--isolation-level", "read_committed")
    assert committed == kafka.committed.records
    assert len(committed) < len(kafka.records[TXN]), "the aborted records are skipped"


def test_the_aborted_transaction_comes_from_kafkas_txn_index(kafka_dir: KafkaDir) -> None:
    kafka, tidelog_view = kafka_dir
    read = tidelog_view.records[TXN]
    committed = {r[0] for r in kafka.committed.records}
    aborted_offsets = [r[0] for r in read if r[0] not in committed]
    [txn] = tidelog_view.aborted
    assert aborted_offsets and txn.first_offset == min(aborted_offsets)
    assert txn.last_offset == max(aborted_offsets) + 1, "the ABORT marker follows the aborted records"
    assert [r for r in read if not txn.first_offset <= r[0] <= txn.last_offset] == kafka.committed.records


def producers_from_kafkas_dump(dumped: list[DumpedBatch]) -> dict[int, ProducerView]:
    """Per producer id, what its batches in Kafka's dump say the state must be: the last batch's
    epoch; last sequence and last offset of its last data batch at that epoch (-1 when none);
    the coordinator epoch of its last transaction marker (-1 when none)."""
    found: dict[int, list[int]] = {}
    for b in dumped:
        if b.producer_id is None or b.producer_id < 0:
            continue
        view = found.setdefault(b.producer_id, [-1, -1, -1, -1])
        if b.producer_epoch != view[0]:
            view[:3] = [b.producer_epoch, -1, -1]  # type: ignore[list-item]
        if b.is_control:
            view[3] = next((r.coordinator_epoch for r in b.records if r.coordinator_epoch is not None), view[3])
        else:
            view[1:3] = [b.last_sequence, b.last_offset]  # type: ignore[list-item]
    return {pid: (v[0], v[1], v[2], v[3]) for pid, v in found.items()}


def test_producer_state_is_what_kafkas_snapshots_and_batches_say(kafka_dir: KafkaDir) -> None:
    """Kafka's own DumpLogSegments decodes the ``.snapshot`` files Kafka wrote and the batches of
    every log: tidelog read the same snapshot entries and loaded the state the batches imply."""
    _, view = kafka_dir
    snapshots = [Path(p) for p in view.kafka_snapshots]
    assert snapshots, "Kafka rolled segments, so it wrote producer snapshots"
    logs = {topic: sorted(pdir(view.copy, topic).glob("*.log")) for topic in TOPICS}
    dumped = dump_log_segments(KAFKA_4, [*snapshots, *(p for ps in logs.values() for p in ps)],
                               "--deep-iteration").check().parsed()
    for path, entries in view.kafka_snapshots.items():
        expected = [(e.producer_id, e.producer_epoch, e.coordinator_epoch, e.last_timestamp, e.last_sequence,
                     e.last_offset, e.offset_delta) for e in dumped.file(path).producer_entries]
        assert sorted((e.producer_id, e.producer_epoch, e.coordinator_epoch, e.timestamp,
                       e.last_sequence if e.last_offset >= 0 else None, e.last_offset if e.last_offset >= 0 else None,
                       e.offset_delta if e.last_offset >= 0 else None) for e in entries) == sorted(expected), path
    for topic, paths in logs.items():
        batches = [b for path in paths for b in dumped.file(path).batches]
        assert view.producers[topic] == producers_from_kafkas_dump(batches), topic
    assert view.producers[CODECS] and view.producers[TXN], "idempotent and transactional producers were loaded"


def test_kafkas_delete_horizon_is_its_cleaning_time_plus_delete_retention(kafka_dir: KafkaDir) -> None:
    kafka, tidelog_view = kafka_dir
    released, cleaned = kafka.compaction_window
    assert released + DAY_MS <= tidelog_view.horizon <= cleaned + DAY_MS


# --- retention and cleaning go on, each on its own copy of the opened dir -------------------------------

@pytest.fixture
def own_copy(kafka_dir: KafkaDir, tmp_path: Path) -> Path:
    mine = tmp_path / "data"
    shutil.copytree(kafka_dir[1].copy, mine, symlinks=True)
    return mine


def verified(copy: Path) -> None:
    code, out, err = run_tidelog(copy, "verify", str(copy))
    assert (code, out.startswith("OK:")) == (0, True), out + err


def test_lowered_retention_bytes_deletes_exactly_the_next_segment(kafka_dir: KafkaDir, own_copy: Path) -> None:
    kafka = kafka_dir[0]
    before = segments(pdir(own_copy, RETAINED))
    assert before[0][0] == kafka.log_start[RETAINED] and len(before) >= 2
    total = sum(size for _, size in before)
    tidelog(own_copy, "configs", "alter", RETAINED, "--set", f"retention.bytes={total - before[0][1]}")
    [plan] = json.loads(tidelog(own_copy, "retention", "run", "--topic", RETAINED, "--json"))
    assert plan["log_start_offset_after"] == before[1][0]
    assert segments(pdir(own_copy, RETAINED)) == before[1:]
    assert tidelog_consume(own_copy, RETAINED) == [r for r in kafka.records[RETAINED] if r[0] >= before[1][0]]
    with opened(own_copy) as manager:
        log = manager.log(TopicPartition(RETAINED, 0))
        assert (log.log_start_offset, log.log_end_offset) == (before[1][0], kafka.log_end[RETAINED])
    verified(own_copy)


def test_retention_ms_deletes_every_segment_kafka_wrote_rolling_its_active_one(kafka_dir: KafkaDir,
                                                                                own_copy: Path) -> None:
    end = kafka_dir[0].log_end[CODECS]
    tidelog(own_copy, "configs", "alter", CODECS, "--set", "retention.ms=1")
    [plan] = json.loads(tidelog(own_copy, "retention", "run", "--topic", CODECS, "--json"))
    assert plan["log_start_offset_after"] == end
    assert segments(pdir(own_copy, CODECS)) == [(end, 0)]
    assert tidelog_consume(own_copy, CODECS) == []
    with opened(own_copy) as manager:
        log = manager.log(TopicPartition(CODECS, 0))
        assert (log.log_start_offset, log.log_end_offset) == (end, end)
    verified(own_copy)


def compaction_model(records: Sequence[Rec], active_base: int) -> list[Rec]:
    """What a clean up to ``active_base`` keeps while no tombstone's horizon has passed: below
    the active segment, the latest record of each key; from it on, everything."""
    latest = {r[3]: r[0] for r in records if r[0] < active_base}
    return [r for r in records if r[0] >= active_base or latest[r[3]] == r[0]]


def more_rounds() -> bytes:
    """Overwrites of every key but k3 (its tombstone stays latest) with a new tombstone for k5,
    then enough overwrites of k0-k2 to roll twice more (k5's tombstone gets cleaned)."""
    lines = [{"key": f"k{k}", "value": None if k == 5 else f"tidelog-{k}-" + "t" * 30} for k in range(12) if k != 3]
    lines += [{"key": f"k{i % 3}", "value": f"tidelog again {i} " * 6} for i in range(24)]
    return b"".join(json.dumps(line).encode() + b"\n" for line in lines)


def make_compacted(copy: Path) -> None:
    """kdir-compacted was adopted compacted, with Kafka's overrides; its segment size (Kafka's
    ``internal.segment.bytes``, unknown to tidelog) is told to tidelog as ``segment.bytes``."""
    adopted = json.loads(tidelog(copy, "configs", "describe", COMPACTED, "--json"))["configs"]
    assert {c["Name"]: (c["Value"], c["Source"]) for c in adopted}["cleanup.policy"] == ("compact", "TOPIC_CONFIG")
    tidelog(copy, "configs", "alter", COMPACTED, "--set", f"segment.bytes={SEGMENT_BYTES}",
            "--set", "min.cleanable.dirty.ratio=0.01")


def test_clean_run_continues_kafkas_compaction(kafka_dir: KafkaDir, own_copy: Path) -> None:
    kafka = kafka_dir[0]
    kafka_active = segments(pdir(own_copy, COMPACTED))[-1][0]
    make_compacted(own_copy)
    tidelog(own_copy, "produce", COMPACTED, "--format", "json", "--partition", "0", "--batch-size", "2",
            "--compression", "zstd", stdin=more_rounds())
    before = tidelog_consume(own_copy, COMPACTED)
    assert before[:len(kafka.records[COMPACTED])] == kafka.records[COMPACTED]
    active = segments(pdir(own_copy, COMPACTED))[-1][0]
    assert active > kafka_active, "Kafka's active segment rolled: now cleanable"

    [row] = json.loads(tidelog(own_copy, "clean", "run", "--topic", COMPACTED, "--force", "--json"))
    assert (row["outcome"], row["first_dirty_offset"], row["end_offset"]) == ("cleaned", kafka_active, active)
    after = tidelog_consume(own_copy, COMPACTED)
    assert after == compaction_model(before, active)
    assert len(after) < len(before)
    tombstones = [(r[3], r[0] < active) for r in after if r[4] is None]
    assert tombstones == [(b"k3", True), (b"k5", True)], "Kafka's tombstone and ours, both cleaned and kept"
    assert cleaner_checkpoint(own_copy, COMPACTED) == active
    verified(own_copy)


@pytest.mark.parametrize("before_horizon_ms", [1, 0], ids=["just-before-horizon", "at-horizon"])
def test_a_clean_honours_the_delete_horizon_kafka_stamped(kafka_dir: KafkaDir, own_copy: Path,
                                                          before_horizon_ms: int) -> None:
    """Kafka keeps a tombstone while ``now < horizon``: one millisecond before, it stays; at the
    horizon, it goes (the clock is ours to set, as Kafka's MockTime in its tests)."""
    kafka, tidelog_view = kafka_dir
    now = tidelog_view.horizon - before_horizon_ms
    make_compacted(own_copy)
    clock = FakeClock(now)
    tp = TopicPartition(COMPACTED, 0)
    with opened(own_copy, clock) as manager:
        late = BatchBuilder()
        late.append(0, now, b"k11", b"late")
        manager.append(tp, late.build())
        manager.log(tp).roll()
        active = manager.log(tp).active_segment.base_offset
        assert manager.cleaner is not None
        result = manager.cleaner.clean_now(tp, force=True)
        assert result is not None and result.error is None and result.end_offset == active
    after = tidelog_consume(own_copy, COMPACTED)
    late_rec = (kafka.log_end[COMPACTED], now, 0, b"k11", b"late", ())
    expected = compaction_model([*kafka.records[COMPACTED], late_rec], active)
    if before_horizon_ms == 0:
        expected = [r for r in expected if r[3] != b"k3"]
    assert after == expected
    assert (b"k3" in {r[3] for r in after}) == (before_horizon_ms > 0)
    verified(own_copy)


# --- Kafka's .txnindex lost or cut: rebuilt from the ABORT markers ------------------------------------

def damage_txn_indexes(copy: Path, damage: str) -> dict[Path, bytes]:
    """Delete or cut mid-entry every ``.txnindex`` of kdir-txn; returns what Kafka had written."""
    originals = {p: p.read_bytes() for p in pdir(copy, TXN).glob(f"*{files.TXN_INDEX_SUFFIX}")}
    assert originals and all(originals.values()), "Kafka indexed the aborted transaction"
    for path, data in originals.items():
        if damage == "deleted":
            path.unlink()
        else:
            path.write_bytes(data[:-5])
    return originals


@pytest.mark.parametrize("damage", ["deleted", "cut-mid-entry"])
def test_read_committed_through_serve_is_kafkas_with_the_txn_index_lost(kafka_dir: KafkaDir, own_copy: Path,
                                                                        damage: str) -> None:
    kafka = kafka_dir[0]
    originals = damage_txn_indexes(own_copy, damage)
    serve = ServeProcess(own_copy)
    serve.start()
    try:
        got = consume(SimpleNamespace(bootstrap_servers=serve.bootstrap), TXN, "read_committed")  # type: ignore[arg-type]
    finally:
        assert serve.stop() == 0
    assert got.records == kafka.committed.records
    assert {p: p.read_bytes() for p in originals} == originals, "rebuilt byte for byte as Kafka wrote it"


def test_the_cleaner_drops_kafkas_aborted_data_with_the_txn_index_lost(kafka_dir: KafkaDir, own_copy: Path,
                                                                       tmp_path: Path) -> None:
    cleaned = {}
    for damaged in (False, True):
        copy = tmp_path / f"copy-{damaged}"
        shutil.copytree(own_copy, copy, symlinks=True)
        if damaged:
            damage_txn_indexes(copy, "deleted")
        tidelog(copy, "configs", "alter", TXN, "--set", "cleanup.policy=compact", "--set", "min.cleanable.dirty.ratio=0.01")
        tp = TopicPartition(TXN, 0)
        with opened(copy) as manager:
            manager.log(tp).roll()
            assert manager.cleaner is not None
            result = manager.cleaner.clean_now(tp, force=True)
            assert result is not None and result.error is None
            cleaned[damaged] = data_records(manager.log(tp))
    assert cleaned[True] == cleaned[False]
    assert cleaned[False] and not any(r[3].startswith(b"abort") for r in cleaned[False]), "Kafka's aborted records went"


def test_our_append_path_writes_the_txn_index_kafka_wrote(served: tuple[Served, Path], tmp_path: Path) -> None:
    """Kafka's kdir-txn batches appended again through tidelog's leader path (the producer's
    batches as a client's, the markers as the coordinator's): same offsets, and the ``.txnindex``
    the append path writes is Kafka's, byte for byte."""
    from tidelog.storage.append_info import AppendOrigin

    _, copy = served
    kafka_dir = pdir(copy, TXN)
    kafka_index = b"".join(files.transaction_index_file(kafka_dir, base).read_bytes() for base, _ in segments(kafka_dir)
                           if files.transaction_index_file(kafka_dir, base).exists())
    assert len(kafka_index) == 34, "Kafka indexed the one aborted transaction"
    batches = [(data[position:position + batch.size_in_bytes], batch) for base, _ in segments(kafka_dir)
               for data in [files.log_file(kafka_dir, base).read_bytes()] for position, batch in iter_batches(data)]
    clock = FakeClock(max(batch.max_timestamp for _, batch in batches))  # Kafka's time when it wrote them
    log = Log.open(tmp_path / f"{TXN}-0", clock=clock, scheduler=FakeScheduler(clock))
    try:
        for raw, batch in batches:
            patched = bytearray(raw)
            patched[:8] = bytes(8)  # a client's batch starts at offset 0 (outside the CRC)
            origin = AppendOrigin.COORDINATOR if batch.is_control else AppendOrigin.CLIENT
            info = log.append_as_leader(bytes(patched), origin=origin)
            log.maybe_increment_high_watermark(info.next_offset)
            assert info.first_offset == batch.base_offset
        ours = b"".join(s.txn_index.path.read_bytes() for s in log.segments if s.txn_index.path.exists())
        assert ours == kafka_index
        assert log.last_stable_offset == log.log_end_offset
    finally:
        log.close()
