"""Kafka's log cleaner and ours, on the same input, keep the same records.

tidelog writes the input of every scenario once: keys overwritten across several 1 KiB segments,
tombstones (one overwritten, some kept, one in a batch with live records), headers, a keyless
record, and a last segment left active holding the latest record of a few keys; one scenario per
codec, plus ``xclean-horizon`` (below). One copy goes into the partition dir of a topic created
through the session broker (created, broker stopped, segment files replaced, broker started: a
KRaft broker learns topics from its metadata log, not from dirs); Kafka's cleaner cleans it
(``min.cleanable.dirty.ratio`` 0.01) and we wait until its ``cleaner-offset-checkpoint`` for the
partition reaches the active segment's base offset. The other copy is cleaned by tidelog's
``LogCleaner`` with the same configs. Compared, per scenario: the (offset, key, value) records
Kafka serves, those in its files and those tidelog kept; the cleaned segments' base offsets; each
batch's shape (offsets, codec, record count, delete-horizon flag), its records, and whether it was
copied byte for byte or rebuilt; uncompressed and gzip, the whole ``.log`` files, byte for byte.
(Rebuilt snappy, lz4 and zstd batches hold the same record bytes, but Java's codec libraries and
ours compress them differently.)

Time: Kafka's cleaner reads the wall clock, ours an injected clock. Only tombstones depend on it:
a v2 tombstone first met by a clean is kept and its batch stamped with a delete horizon (the
cleaning time + ``delete.retention.ms``, one day here), and a later clean drops it once
``now >= horizon``. So:

* tidelog cleans at Kafka's own cleaning time, read back from the horizon Kafka stamped (checked
  to fall between the broker's start and the end of the wait, plus one day): with the same
  "now", even the stamped batches come out byte-identical;
* tombstones past their horizon (``xclean-horizon``): the input's clean part is itself a tidelog
  clean from 2023 (``delete.retention.ms=1000``: its tombstones carry 2023 horizons), its end
  written to both cleaner checkpoints; the dirty part after it is new. Any clean after 2023 drops
  the old tombstones and keeps the new ones, whenever either cleaner runs.

The other way to reach a passed horizon, a tombstone first stamped by Kafka and dropped by its
next clean, needs a second Kafka clean, which only new dirty data produced at a wall-clock moment
triggers; ``xclean-horizon`` checks the same rule with the horizon already in the input.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaConsumer
from kafka import TopicPartition as KafkaTopicPartition
from kafka.admin import KafkaAdminClient, NewTopic

from kafka_oracle import KafkaBroker
from tidelog.cleaner.log_cleaner import LogCleaner
from tidelog.records import BatchBuilder, CompressionType, iter_batches
from tidelog.storage import files
from tidelog.storage.checkpoints import OffsetCheckpointFile
from tidelog.storage.config import BrokerConfig, LogConfig
from tidelog.storage.log import Log
from tidelog.testing import FakeClock, FakeScheduler
from tidelog.topic_partition import TopicPartition

pytestmark = pytest.mark.xdist_group("kafka_broker")

SEGMENT_BYTES = 1024
DAY_MS = 86_400_000
INPUT_TIME = 1_690_000_000_000  # 2023-07: the records' timestamps
FIRST_CLEAN_TIME = INPUT_TIME + 60_000  # the horizon scenario's earlier clean (2023)
DEDUPE_BUFFER = str(16 * 1024 * 1024)  # the session broker's log.cleaner.dedupe.buffer.size
CLEANER_CHECKPOINT = "cleaner-offset-checkpoint"
WAIT_S = 120.0
KEYS = [f"k{i:02d}" for i in range(24)]
BATCH_SIZES = (1, 3, 2, 5, 4)  # records per batch, cycled

Pair = tuple[str | None, bytes | None]
Row = tuple[int, bytes | None, bytes | None]  # offset, key, value


# Kafka's topic configs: the segment size through the test-only ``internal.segment.bytes`` (Kafka 4
# refuses ``segment.bytes`` below 1 MiB).
KAFKA_CONFIGS = {"cleanup.policy": "compact", "internal.segment.bytes": str(SEGMENT_BYTES),
                 "min.cleanable.dirty.ratio": "0.01", "delete.retention.ms": str(DAY_MS)}


def our_config(delete_retention_ms: int, policy: str = "compact") -> LogConfig:
    return LogConfig.from_props(overrides={
        "cleanup.policy": policy, "segment.bytes": str(SEGMENT_BYTES), "min.cleanable.dirty.ratio": "0.01",
        "delete.retention.ms": str(delete_retention_ms)})


# --- the input, written by tidelog --------------------------------------------------------------

def value(round_: int, key: str) -> bytes:
    return f"r{round_}-{key}-".encode() + b"x" * ((int(key[1:]) * 7 + round_ * 3) % 23)


def round_pairs(round_: int, keys: Sequence[str], tombstones: Sequence[str] = ()) -> list[Pair]:
    return [(key, None if key in tombstones else value(round_, key)) for key in keys]


def append_pairs(log: Log, pairs: Sequence[Pair], codec: CompressionType, round_: int) -> None:
    """Append ``pairs`` in batches of the cycled sizes; every third record carries headers."""
    start = 0
    for size in BATCH_SIZES * 100:
        chunk = pairs[start:start + size]
        if not chunk:
            return
        builder = BatchBuilder(compression=codec)
        for i, (key, val) in enumerate(chunk):
            headers = [("round", str(round_).encode()), ("empty", None)] if (start + i) % 3 == 0 else []
            builder.append(i, INPUT_TIME + round_ * 1000 + start + i, key.encode() if key is not None else None,
                           val, headers)
        log.append_as_leader(builder.build())
        log.update_high_watermark(log.log_end_offset)
        start += size


def write_overwrites(log: Log, codec: CompressionType) -> None:
    """Four rounds over the keys across several segments, then an active segment:

    * k03: tombstone in round 1, written again in round 2 (the tombstone goes);
    * k05, k06: tombstones as their last write (round 3; kept, horizon stamped), k05's in a batch
      with live records (the batch is rebuilt);
    * k07: tombstone in round 2 and never written again; k10-k13 not written after round 1;
      k20-k23 written once, in round 0;
    * a keyless record in round 0 (Kafka's cleaner drops it as invalid);
    * k00, k01 (tombstone), k08: last written in the active segment, which no cleaner touches.
    """
    append_pairs(log, [(None, b"no key"), *round_pairs(0, KEYS)], codec, 0)
    append_pairs(log, round_pairs(1, KEYS[:20], tombstones=["k03"]), codec, 1)
    append_pairs(log, round_pairs(2, KEYS[:10] + KEYS[14:20], tombstones=["k07"]), codec, 2)
    append_pairs(log, round_pairs(3, [k for k in KEYS[:20] if k not in ("k07", "k10", "k11", "k12", "k13")],
                                  tombstones=["k05", "k06"]), codec, 3)
    log.roll()
    append_pairs(log, [("k00", b"active"), ("k01", None), ("k08", b"active too")], codec, 4)


def write_past_horizon(log: Log, root: Path, codec: CompressionType) -> int:
    """A log whose first part was cleaned in 2023 (tombstones k03, k04 with 2023 horizons) and
    whose new part overwrites some keys and adds tombstones k09, k15; returns the checkpoint."""
    append_pairs(log, round_pairs(0, KEYS), codec, 0)
    append_pairs(log, round_pairs(1, KEYS[:20], tombstones=["k03", "k04", "k05"]), codec, 1)
    log.roll()
    clock = log.clock
    assert isinstance(clock, FakeClock) and clock.milliseconds() == FIRST_CLEAN_TIME
    result = our_cleaner(root, log, clock).clean_now(log.topic_partition, force=True)
    assert result is not None and result.error is None
    checkpoint = result.end_offset
    assert checkpoint == log.active_segment.base_offset
    append_pairs(log, round_pairs(2, [k for k in KEYS[:20] if k not in ("k03", "k04")], tombstones=["k09"]), codec, 2)
    append_pairs(log, round_pairs(3, KEYS[10:16], tombstones=["k15"]), codec, 3)
    log.roll()
    append_pairs(log, [("k00", b"active"), ("k04", b"back again")], codec, 4)
    return checkpoint


def our_cleaner(root: Path, log: Log, clock: FakeClock) -> LogCleaner:
    broker = BrokerConfig.from_properties({"log.dirs": str(root), "log.cleaner.dedupe.buffer.size": DEDUPE_BUFFER})
    return LogCleaner(broker, [root], lambda: [(log.topic_partition, log)], clock)


@dataclass(frozen=True)
class Scenario:
    topic: str
    codec: CompressionType
    past_horizon: bool = False


SCENARIOS = [Scenario(f"xclean-{codec.name.lower()}", codec) for codec in CompressionType] + [
    Scenario("xclean-horizon", CompressionType.NONE, past_horizon=True)]


@dataclass
class Input:
    """One scenario's input: the partition dir tidelog wrote, and the cleaner checkpoint (if any)."""

    scenario: Scenario
    dir: Path
    checkpoint: int | None
    active_base: int


def write_input(root: Path, scenario: Scenario) -> Input:
    clock = FakeClock(FIRST_CLEAN_TIME if scenario.past_horizon else INPUT_TIME)
    path = files.partition_dir(root, TopicPartition(scenario.topic, 0))
    # written under the delete policy so that the keyless record is accepted
    log = Log.open(path, our_config(1000 if scenario.past_horizon else DAY_MS, "delete"), clock=clock,
                   scheduler=FakeScheduler(clock))
    try:
        checkpoint = None
        if scenario.past_horizon:
            log.update_config(our_config(1000))
            checkpoint = write_past_horizon(log, root, scenario.codec)
        else:
            write_overwrites(log, scenario.codec)
        active = log.active_segment.base_offset
    finally:
        log.close()
    return Input(scenario, path, checkpoint, active)


# --- Kafka's side -------------------------------------------------------------------------------

def segment_files(path: Path) -> list[Path]:
    """A partition dir's segment files and producer snapshots."""
    return sorted(p for p in path.iterdir()
                  if p.suffix in (*files.SEGMENT_FILE_SUFFIXES, files.PRODUCER_SNAPSHOT_SUFFIX))


def install(broker: KafkaBroker, given: Input) -> None:
    """Replace the (stopped) broker's segment files of the topic by tidelog's."""
    target = broker.partition_dir(given.scenario.topic)
    for old in segment_files(target):
        old.unlink()
    for new in segment_files(given.dir):
        shutil.copy2(new, target / new.name)
    if given.checkpoint is not None:
        checkpoint = OffsetCheckpointFile(broker.log_dir / CLEANER_CHECKPOINT)
        entries = checkpoint.read()
        entries[TopicPartition(given.scenario.topic, 0)] = given.checkpoint
        checkpoint.write(entries)


def kafka_checkpoint(broker: KafkaBroker, topic: str) -> int | None:
    path = broker.log_dir / CLEANER_CHECKPOINT
    return OffsetCheckpointFile(path).read().get(TopicPartition(topic, 0)) if path.exists() else None


def settled(path: Path) -> bool:
    """No file of a clean or a deletion in flight."""
    return not any(p.suffix in files.TEMPORARY_SUFFIXES for p in path.iterdir())


def consume_all(broker: KafkaBroker, topic: str) -> list[Row]:
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap_servers, group_id=None, enable_auto_commit=False)
    try:
        tp = KafkaTopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        end = consumer.end_offsets([tp])[tp]
        rows: list[Row] = []
        deadline = time.monotonic() + WAIT_S
        while consumer.position(tp) < end and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=1000).values():
                rows += [(r.offset, r.key, r.value) for r in records]
        return rows
    finally:
        consumer.close()


@dataclass
class Cleaned:
    """One cleaner's result for one scenario: its segments' (base offset, .log bytes)."""

    segments: list[tuple[int, bytes]]

    def batches(self) -> Iterator[Any]:
        for _, data in self.segments:
            for _, batch in iter_batches(data):
                yield batch

    def rows(self) -> list[Row]:
        return [(r.offset, r.key, r.value) for b in self.batches() for r in b.records()]

    def batch_shapes(self) -> list[tuple[int, int, int, int, bool]]:
        return [(b.base_offset, b.last_offset, int(b.compression), b.records_count, b.has_delete_horizon)
                for b in self.batches()]


def read_segments(path: Path) -> Cleaned:
    logs = sorted(path.glob(f"*{files.LOG_SUFFIX}"))
    return Cleaned([(files.offset_from_file_name(p.name), p.read_bytes()) for p in logs])


@dataclass
class Outcome:
    given: Input
    before: Cleaned  # the input's segments
    kafka_served: list[Row]
    kafka: Cleaned
    ours: Cleaned
    kafka_clean_window: tuple[int, int]  # wall-clock ms: before Kafka could clean, after it had


@pytest.fixture(scope="module")
def outcomes(kafka_broker_session: KafkaBroker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Outcome]]:
    """Both cleaners' results for every scenario; the topics are deleted from the broker afterwards."""
    kafka_broker = kafka_broker_session  # module-scoped work on the session's broker (as ``kafka_broker``)
    if not kafka_broker.running:
        kafka_broker.start()
    try:
        yield clean_both_ways(kafka_broker, tmp_path_factory)
    finally:
        if kafka_broker.running:
            admin = KafkaAdminClient(bootstrap_servers=kafka_broker.bootstrap_servers)
            try:
                admin.delete_topics([s.topic for s in SCENARIOS])
            finally:
                admin.close()


def clean_both_ways(kafka_broker: KafkaBroker, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Outcome]:
    """Write the inputs, have Kafka clean one copy (one stop/replace/start cycle for all), then
    clean another copy ourselves at Kafka's cleaning time."""
    root = tmp_path_factory.mktemp("xclean-input")
    inputs = {s.topic: write_input(root, s) for s in SCENARIOS}
    pristine = tmp_path_factory.mktemp("xclean-pristine")
    for given in inputs.values():
        shutil.copytree(given.dir, pristine / given.dir.name)  # our copy, before anything else reads it

    admin = KafkaAdminClient(bootstrap_servers=kafka_broker.bootstrap_servers)
    try:
        admin.create_topics([NewTopic(s.topic, 1, 1, topic_configs=KAFKA_CONFIGS) for s in SCENARIOS])
    finally:
        admin.close()
    kafka_broker.wait_for(lambda: all(kafka_broker.partition_dir(t).is_dir() for t in inputs), "the topics' dirs", WAIT_S)
    kafka_broker.stop()
    for given in inputs.values():
        install(kafka_broker, given)
    started = int(time.time() * 1000)
    kafka_broker.start()
    kafka_broker.wait_for(
        lambda: all(kafka_checkpoint(kafka_broker, t) == given.active_base and settled(kafka_broker.partition_dir(t))
                    for t, given in inputs.items()),
        "Kafka's cleaner to clean every scenario up to its active segment", WAIT_S)
    done = int(time.time() * 1000)

    results = {}
    for topic, given in inputs.items():
        served = consume_all(kafka_broker, topic)
        kafka = read_segments(kafka_broker.partition_dir(topic))
        ours = clean_ours(pristine, given, kafka_cleaning_time(kafka))
        results[topic] = Outcome(given, read_segments(pristine / given.dir.name), served, kafka, ours, (started, done))
    return results


def kafka_cleaning_time(kafka: Cleaned) -> int:
    """When Kafka's cleaner ran, from the delete horizon it stamped (its time + one day)."""
    horizons = {b.delete_horizon_ms for b in kafka.batches() if b.has_delete_horizon}
    assert len(horizons) == 1, f"one cleaning stamped every horizon: {horizons}"
    return horizons.pop() - DAY_MS


def clean_ours(pristine: Path, given: Input, now: int) -> Cleaned:
    """Clean a copy of the input with tidelog's LogCleaner, its clock at ``now``."""
    root = pristine.parent / f"{pristine.name}-ours-{given.scenario.topic}"
    shutil.copytree(pristine / given.dir.name, root / given.dir.name)
    tp = TopicPartition(given.scenario.topic, 0)
    if given.checkpoint is not None:
        OffsetCheckpointFile(root / CLEANER_CHECKPOINT).write({tp: given.checkpoint})
    clock = FakeClock(now)
    log = Log.open(root / given.dir.name, our_config(DAY_MS), clock=clock, scheduler=FakeScheduler(clock))
    try:
        result = our_cleaner(root, log, clock).clean_now(tp)
        assert result is not None and result.error is None and result.end_offset == given.active_base
        log.flush()
    finally:
        log.close()
    return read_segments(root / given.dir.name)


# --- the comparisons ------------------------------------------------------------------------------

IDS = [s.topic for s in SCENARIOS]


@pytest.mark.parametrize("topic", IDS)
def test_both_cleaners_keep_the_same_records(outcomes: dict[str, Outcome], topic: str) -> None:
    outcome = outcomes[topic]
    kafka_rows = outcome.kafka.rows()
    assert outcome.kafka_served == kafka_rows, "Kafka serves what its files hold"
    assert outcome.ours.rows() == kafka_rows
    below = [key for offset, key, _ in kafka_rows if offset < outcome.given.active_base]
    assert len(below) == len(set(below)), "one record per key below the active segment"
    assert None not in below, "the keyless record is gone"


@pytest.mark.parametrize("topic", IDS)
def test_both_cleaners_write_the_same_segments_and_batches(outcomes: dict[str, Outcome], topic: str) -> None:
    outcome = outcomes[topic]
    assert [base for base, _ in outcome.ours.segments] == [base for base, _ in outcome.kafka.segments]
    assert outcome.ours.batch_shapes() == outcome.kafka.batch_shapes()
    assert [list(b.record_tuples()) for b in outcome.ours.batches()] == [
        list(b.record_tuples()) for b in outcome.kafka.batches()]


@pytest.mark.parametrize("topic", IDS)
def test_both_copy_the_same_batches_verbatim_and_rebuild_the_same_ones(outcomes: dict[str, Outcome],
                                                                      topic: str) -> None:
    """A batch kept whole is the input's bytes in both; a rebuilt one holds the same record bytes
    (snappy, lz4 and zstd bytes differ between Java's and our codec libraries, so only uncompressed
    and gzip files are compared whole, below)."""
    outcome = outcomes[topic]
    original = {b.base_offset: bytes(b.buffer) for b in outcome.before.batches()}
    pairs = list(zip(outcome.kafka.batches(), outcome.ours.batches(), strict=True))
    verbatim = [bytes(k.buffer) == original.get(k.base_offset) for k, _ in pairs]
    assert [bytes(o.buffer) == original.get(o.base_offset) for _, o in pairs] == verbatim
    assert any(verbatim) and not all(verbatim)
    for (k, o), same in zip(pairs, verbatim, strict=True):
        assert same or o.records_data() == k.records_data(), f"batch at {k.base_offset}"


@pytest.mark.parametrize("topic", ["xclean-none", "xclean-horizon", "xclean-gzip"])
def test_uncompressed_and_gzip_cleaned_segments_are_byte_identical(outcomes: dict[str, Outcome], topic: str) -> None:
    """Cleaned at the same time (Kafka's, read from its horizon), the .log files are the same bytes.
    gzip too: Java's zlib deflates as Python's does, and our gzip header carries Java's XFL and OS
    bytes (records/compression.py)."""
    outcome = outcomes[topic]
    assert outcome.ours.segments == outcome.kafka.segments


@pytest.mark.parametrize("topic", [s.topic for s in SCENARIOS if not s.past_horizon])
def test_tombstones_met_first_are_kept_with_a_horizon_a_day_after_the_cleaning(outcomes: dict[str, Outcome],
                                                                                topic: str) -> None:
    outcome = outcomes[topic]
    active = outcome.given.active_base
    kept_tombstones = {key for offset, key, val in outcome.kafka.rows() if val is None and offset < active}
    assert kept_tombstones == {b"k05", b"k06", b"k07"}
    started, done = outcome.kafka_clean_window
    [kafka_horizon] = {b.delete_horizon_ms for b in outcome.kafka.batches() if b.has_delete_horizon}
    assert started + DAY_MS <= kafka_horizon <= done + DAY_MS, "Kafka stamps its cleaning time + delete.retention.ms"
    stamped_kafka = [b.base_offset for b in outcome.kafka.batches() if b.has_delete_horizon]
    stamped_ours = [b.base_offset for b in outcome.ours.batches() if b.has_delete_horizon]
    assert stamped_ours == stamped_kafka


def test_tombstones_past_their_horizon_are_dropped_by_both(outcomes: dict[str, Outcome]) -> None:
    outcome = outcomes["xclean-horizon"]
    rows = outcome.kafka.rows()
    assert outcome.ours.rows() == rows
    tombstones = {key for _, key, val in rows if val is None}
    assert tombstones == {b"k09", b"k15"}, "the 2023 tombstones went, the new ones stay"
    assert b"k03" not in {key for _, key, _ in rows}
    assert [(key, val) for _, key, val in rows if key == b"k04"] == [(b"k04", b"back again")]
    old_horizons = [b for b in outcome.before.batches() if b.has_delete_horizon]
    assert {b.delete_horizon_ms for b in old_horizons} == {FIRST_CLEAN_TIME + 1000}, "the input had 2023 horizons"


@pytest.mark.parametrize("topic", IDS)
def test_a_key_last_written_in_the_active_segment_keeps_its_latest_cleaned_record_in_both(
        outcomes: dict[str, Outcome], topic: str) -> None:
    outcome = outcomes[topic]
    active = outcome.given.active_base
    kafka_k00 = [(o, v) for o, k, v in outcome.kafka.rows() if k == b"k00"]
    ours_k00 = [(o, v) for o, k, v in outcome.ours.rows() if k == b"k00"]
    assert ours_k00 == kafka_k00
    assert len(kafka_k00) == 2 and kafka_k00[0][0] < active <= kafka_k00[1][0]
    assert kafka_k00[1][1] == b"active"

