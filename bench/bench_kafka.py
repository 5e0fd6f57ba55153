"""Side-by-side benchmarks against Apache Kafka itself (issue 7): its log cleaner and its recovery.

Kafka 4.3.1 (``kafka_oracle.KAFKA_4``, from Maven Central) runs as a real single-node KRaft broker
of the benchmark's own, in its scratch dir. Both engines get the same segment files, copied and
fsynced before each run (so their pages are clean in the page cache), and the same settings; the
figure is tidelog's rate, the baseline Kafka's, measured in the same run, alternating, medians of
3 runs (``--quick``: 1; produce and fetch: 5 rounds, ``--quick`` 2); the ratio ``tidelog / Kafka``
reads as "times Kafka's speed".

| name | figure (tidelog) | baseline (Kafka 4.3.1, same run) |
|------|------------------|----------------------------------|
| ``kafka_cleaner`` | MB/s of ``Cleaner.clean`` of a dirty log (1 GB, 8 M records, 1 M keys, 16-byte keys, 110-byte values, 128 MiB segments, all sealed), one thread | MB/s of Kafka's cleaner (one thread) on the same segments, over its ``CleanerStats`` interval |
| ``kafka_cleaner_records`` | records/s of the same clean | records/s of Kafka's |
| ``kafka_recovery`` | GB/s of ``Log.open`` after an unclean stop, recovery point 0, one 1 GiB active segment | GB/s of the broker's own time for loading the same log after an unclean stop |
| ``kafka_produce`` | records/s of kafka-python's ``KafkaProducer`` (acks=1) sending 100-byte values to one partition of ``tidelog serve`` | the same producer against the Kafka broker |
| ``kafka_fetch`` | records/s of kafka-python's ``KafkaConsumer`` reading them back (no group, from the start) | the same consumer against the Kafka broker |
| ``kafka_produce_lean`` | records/s of a lean client (pre-encoded 500-record batches, 8 Produce requests in flight) | the same client against the Kafka broker |
| ``kafka_fetch_lean`` | records/s of the lean client's 1 MiB Fetch requests reading them back | the same client against the Kafka broker |
| ``kafka_produce_librdkafka`` | records/s of a ``confluent_kafka.Producer`` at its defaults (acks=all) sending 1 KB values, then ``flush()`` | the same producer against the Kafka broker |
| ``kafka_fetch_librdkafka`` | records/s of a ``confluent_kafka.Consumer`` at its defaults (partition assigned, from the start) reading them back | the same consumer against the Kafka broker |

What Kafka's times cover (its 4.x source, ``org.apache.kafka.storage.internals.log``; the order
of the calls checked in the 4.3.1 jar):

* Cleaner: ``Cleaner.doClean`` logs "Beginning cleaning of log X", creates ``CleanerStats`` (its
  start), builds the offset map (clearing it first), cleans every segment group (read, filter,
  write the ``.cleaned`` segment, fsync it, swap it in through ``.swap`` renames; the old files go
  ``.deleted``, removed a minute later) and calls ``allDone()``; the cleaner thread then logs the
  stats block ("N MB of log processed in S seconds"). Choosing the log before and writing
  ``cleaner-offset-checkpoint`` after are outside. S is printed rounded to 0.1 s, so the figure
  takes the same interval from the millisecond timestamps of those two log lines (S is in the
  details). Ours is timed around ``Cleaner.clean``: the same steps (map, rewrite, fsync, swap).
* Recovery: ``LogManager`` logs "Completed load of Log(...) ... in N ms" for each log: the whole
  load (segment files, recovery of every segment from the recovery point, producer state), not
  the broker's start-up around it. Ours is timed around ``Log.open(had_clean_shutdown=False,
  recovery_point=0)``: the same steps, from the same files (the ``.log`` and the trimmed index
  files our warm-up open left, which Kafka accepts).

Both sides are warm. Cleaner: ours first cleans a small log (loading the numba kernels) with the
engine it then reuses, as a cleaner thread reuses its offset map; Kafka's broker first cleans a
copy of the same small log in the same JVM, while the timed log is held back by
``min.compaction.lag.ms`` = :data:`HOLD_MS`, set to 0 (IncrementalAlterConfigs) once the warm-up
is logged. Recovery: Kafka's one recovery thread loads two copies of the segment, one after the
other; the second is timed, the first's (cold JIT) time is in the details; ours times opens after
an untimed warm-up open.

Both sides must have done the same work, or the benchmark fails (``NotTheSameWork``): the cleaners
must have read every record and kept the same records at the same offsets (read back from both
partition dirs with tidelog's scanner); the recoveries must reach the same log end offset, and
Kafka must have logged "Recovering unflushed segment".

Produce and fetch (target >= 1.0x Kafka for the lean and librdkafka rows): ``tidelog serve`` runs
as its own process and the Kafka broker beside it, both on loopback, both warmed by a first round
of the same transfers; each round then runs the six transfers on fresh one-partition topics, Kafka
and tidelog alternating. kafka-python is the slower party of its rows (~20-30 k records/s whatever
the broker), so the lean client, built on kafka-python's message classes and tidelog's batch
builder, shows the brokers' own speed; librdkafka (bench/bench_kafka_rdkafka.py) is what a stock
client gets. Every round checks that both logs end at the offset of the
records produced and that each fetch read back exactly those records (and bytes).

Where ``java`` or ``mvn`` is missing, or Maven cannot resolve Kafka, each row says "skipped:
<why>". ``--quick``: 100 k records (14 MB, 4 MiB segments) for the cleaner, a 32 MiB segment for
recovery, 5 k, 50 k and 10 k records (kafka-python, lean, librdkafka) for produce/fetch: a smoke
run, where fixed costs dominate.
:func:`write_chart` draws the side-by-side rows of a run into a PNG.
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
import re
import shutil
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from bench.bench_cleaner import RECORDS_PER_BATCH, generate_log
from bench.bench_storage import (
    MIB, SEGMENT_BYTES, PristineCopy, Row, Settings, build_batches, copy_synced, log_config, median, now_ms,
    scratch_dir, seconds_of, warm_segment,
)
from kafka_oracle import KAFKA_4, KafkaBroker, KafkaUnavailable
from tidelog.cleaner.clean import Cleaner, CleanerBuffers, InProcessEngine
from tidelog.cleaner.plan import log_to_clean
from tidelog.records.scan import scan_batches
from tidelog.scheduler import ThreadScheduler
from tidelog.storage import files
from tidelog.storage.checkpoints import (
    CLEANER_OFFSET_CHECKPOINT_FILE, RECOVERY_POINT_CHECKPOINT_FILE, OffsetCheckpointFile,
)
from tidelog.storage.config import BrokerConfig, LogConfig
from tidelog.storage.log import Log
from tidelog.storage.metadata import CLEAN_SHUTDOWN_FILE
from tidelog.topic_partition import TopicPartition

KAFKA = KAFKA_4
PRODUCE_FETCH_ROWS = ("kafka_produce", "kafka_fetch", "kafka_produce_lean", "kafka_fetch_lean",
                      "kafka_produce_librdkafka", "kafka_fetch_librdkafka")  # bench_kafka_wire's rows
MB = 1_000_000
CHART_NAME = "kafka_side_by_side.png"
CHART_COLUMNS = 4  # panels per line of the chart
CLEAN_TOPIC = TopicPartition("bench-clean", 0)
WARMUP_TOPIC = TopicPartition("bench-clean-warmup", 0)
RECOVERY_TOPICS = (TopicPartition("bench-recovery-a", 0), TopicPartition("bench-recovery-b", 0))
WARMUP_LOG = (50_000, 5_000, 1 * MIB)  # records, keys, segment bytes of the cleaners' warm-up log
HOLD_MS = 100 * 365 * 86_400_000  # a min.compaction.lag.ms that holds a log back from Kafka's cleaner
# The cleaner's memory, given alike to Kafka's broker and to tidelog's BrokerConfig (Kafka's
# defaults, written out): one thread, a 128 MiB offset map filled to 0.9, 256 KiB read and write buffers.
CLEANER_SETTINGS = {
    "log.cleaner.threads": "1",
    "log.cleaner.dedupe.buffer.size": str(128 * MIB),
    "log.cleaner.io.buffer.load.factor": "0.9",
    "log.cleaner.io.buffer.size": str(512 * 1024),
    "message.max.bytes": "1048588",
}
BROKER_OVERRIDES = {
    **CLEANER_SETTINGS,
    "log.cleaner.backoff.ms": "200",           # default 15 s between looks for a dirty log
    "num.recovery.threads.per.data.dir": "1",  # one recovery thread, as Log.open
    "auto.create.topics.enable": "false",
}
BROKER_HEAP = "1g"  # kafka-server-start.sh's default
VALUE_SIZE = 110
SEGMENT_FILE_SUFFIXES = (*files.SEGMENT_FILE_SUFFIXES, files.PRODUCER_SNAPSHOT_SUFFIX)
SIDE_BY_SIDE_ROWS = ("kafka_cleaner", "kafka_cleaner_records", "kafka_recovery", *PRODUCE_FETCH_ROWS)


class NotTheSameWork(RuntimeError):
    """Kafka and tidelog did not do the same work (different records kept, another log end):
    their times cannot be compared."""


# --- Kafka's logs ----------------------------------------------------------------------------

_STAMP = r"^\[(?P<stamp>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\]"
_NUMBER = r"[\d,]+(?:\.\d+)?"


def _stamp_seconds(stamp: str) -> float:
    """A log4j ``%d`` timestamp (``2026-01-02 03:04:05,678``) as seconds since the epoch (local time)."""
    return datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp()


def _number(text: str) -> float:
    return float(text.replace(",", ""))


def _size(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0


def _text_since(path: Path, mark: int) -> str:
    """What ``path`` (a broker log) gained after byte ``mark``."""
    if not path.exists():
        return ""
    with open(path, "rb") as log:
        log.seek(mark)
        return log.read().decode(errors="replace")


def log_marks(broker: KafkaBroker) -> dict[Path, int]:
    """Where the broker's logs end now. Both are read: the harness sends the logger named
    ``LogCleaner`` to log-cleaner.log, but Kafka 4.3.1 logs the stats block as
    ``LogCleaner$CleanerThread`` (not a child logger in log4j2), which lands in server.log."""
    return {path: _size(path) for path in (broker.server_log, broker.cleaner_log)}


def text_since(marks: dict[Path, int]) -> str:
    """What the broker logged after ``marks`` (from :func:`log_marks`), log by log."""
    return "\n".join(_text_since(path, mark) for path, mark in marks.items())


@dataclass(frozen=True, slots=True)
class CleanerStatsBlock:
    """One stats block Kafka's cleaner thread logged (``LogCleaner.CleanerThread.recordStats``)."""

    stamp: float  # when it was logged: just after CleanerStats.allDone()
    first_dirty: int
    end: int  # the first offset not cleaned
    seconds: float  # CleanerStats.elapsedSecs(), as printed (0.1 s)
    messages_read: int
    messages_written: int
    mb_written: float  # MiB, as Kafka counts


def parse_cleaner_stats(text: str, log_name: str) -> list[CleanerStatsBlock]:
    """The stats blocks of ``log_name`` in ``text`` (the broker's logs), in order."""
    pattern = re.compile(
        _STAMP + r"[^\n]*\n\s*Log cleaner thread \d+ cleaned log " + re.escape(log_name)
        + r" \(dirty section = \[(?P<first>\d+), (?P<end>\d+)\]\)\s*\n"
        r"\s*" + _NUMBER + r" MB of log processed in (?P<seconds>" + _NUMBER + r") seconds[^\n]*\n"
        r"(?:[^\n]*\n)*?\s*Start size: " + _NUMBER + r" MB \((?P<read>[\d,]+) messages\)\s*\n"
        r"\s*End size: (?P<written_mb>" + _NUMBER + r") MB \((?P<written>[\d,]+) messages\)",
        re.MULTILINE)
    return [CleanerStatsBlock(_stamp_seconds(m["stamp"]), int(m["first"]), int(m["end"]), _number(m["seconds"]),
                              int(_number(m["read"])), int(_number(m["written"])), _number(m["written_mb"]))
            for m in pattern.finditer(text)]


def parse_cleaning_starts(text: str, log_name: str) -> list[float]:
    """When Kafka's ``Cleaner`` began each cleaning of ``log_name``, in order."""
    pattern = re.compile(_STAMP + r"[^\n]*Beginning cleaning of log " + re.escape(log_name) + r"\s", re.MULTILINE)
    return [_stamp_seconds(m["stamp"]) for m in pattern.finditer(text)]


@dataclass(frozen=True, slots=True)
class LogLoad:
    """LogManager's "Completed load of Log(...) ... log-end-offset N in M ms" line for one log."""

    name: str
    milliseconds: int
    log_end_offset: int


def parse_log_loads(text: str, log_names: Sequence[str]) -> list[LogLoad]:
    """The load lines of ``log_names`` in ``text``, in the order Kafka logged them."""
    names = "|".join(re.escape(name) for name in log_names)
    pattern = re.compile(r"Completed load of Log\(dir=[^\n,]*/(?P<name>" + names + r"),[^\n]*?"
                         r" log-end-offset (?P<end>\d+) in (?P<ms>\d+) ?ms", re.MULTILINE)
    return [LogLoad(m["name"], int(m["ms"]), int(m["end"])) for m in pattern.finditer(text)]


def recovered_segments(text: str, log_name: str) -> int:
    """How many "Recovering unflushed segment" lines ``text`` has for ``log_name``."""
    return len(re.findall(r"Recovering unflushed segment \d+\.[^\n]*recovered for " + re.escape(log_name), text))


# --- a broker of the benchmark's own ---------------------------------------------------------

def kafka_missing() -> str | None:
    """Why Kafka cannot run here (no java, no mvn, Maven failed), or None when it can."""
    try:
        KAFKA.classpath()
    except KafkaUnavailable as unavailable:
        return str(unavailable).splitlines()[0]
    return None


def skipped_rows(names: Sequence[str], unit: str, reason: str) -> list[Row]:
    return [Row(name, f"skipped: {reason}", math.nan, unit, None, f"Kafka {KAFKA.version}", None, {"skipped": reason})
            for name in names]


def new_broker(root: Path) -> KafkaBroker:
    return KafkaBroker(KAFKA, root / "kafka-data", root / "kafka-work", overrides=BROKER_OVERRIDES, heap=BROKER_HEAP)


def create_topic(broker: KafkaBroker, tp: TopicPartition, configs: dict[str, str]) -> Path:
    """Create ``tp``'s topic (one partition) through the running broker; its partition dir."""
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap_servers, client_id="tidelog-bench")
    try:
        admin.create_topics([NewTopic(tp.topic, 1, 1, topic_configs=configs)])
    finally:
        admin.close()
    dir = broker.partition_dir(tp.topic, tp.partition)
    broker.wait_for(dir.is_dir, f"the partition dir of {tp}", 60)
    return dir


def place_segments(sources: Iterable[Path], partition_dir: Path) -> None:
    """Replace the segment files of a stopped broker's partition dir (its ``partition.metadata``
    and ``leader-epoch-checkpoint`` stay) with copies of ``sources``, fsynced."""
    for path in partition_dir.iterdir():
        if files.strip_temporary_suffix(path.name).endswith(SEGMENT_FILE_SUFFIXES):
            path.unlink()
    for source in sources:
        copy_synced(source, partition_dir / source.name)


def segment_files(dir: Path) -> list[Path]:
    """The ``.log`` and index files of a partition dir (no checkpoints, no snapshots)."""
    return sorted(path for path in dir.iterdir() if path.name.endswith(files.SEGMENT_FILE_SUFFIXES))


def set_checkpoint(log_dir: Path, name: str, tp: TopicPartition, offset: int | None) -> None:
    """Set (or with None, drop) ``tp``'s entry of the offset checkpoint ``name`` of ``log_dir``."""
    checkpoint = OffsetCheckpointFile(log_dir / name)
    entries = checkpoint.read() if checkpoint.path.exists() else {}
    entries.pop(tp, None)
    if offset is not None:
        entries[tp] = offset
    checkpoint.write(entries)


@dataclass(frozen=True, slots=True)
class Kept:
    """What a cleaned partition dir holds: records, bytes of ``.log`` files, and a digest of the
    offsets of the records (in order), the same for two logs that kept the same records."""

    records: int
    bytes: int
    offsets_digest: str


def kept_records(dir: Path) -> Kept:
    """Read every ``.log`` of ``dir`` (tidelog's scanner) into a :class:`Kept`."""
    digest, records, size = hashlib.blake2b(digest_size=12), 0, 0
    for path in sorted(dir.glob("*" + files.LOG_SUFFIX)):
        data = path.read_bytes()
        offsets = scan_batches(data).offset
        digest.update(np.ascontiguousarray(offsets, dtype="<i8").tobytes())
        records, size = records + len(offsets), size + len(data)
    return Kept(records, size, digest.hexdigest())


def load_average() -> float | None:
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


# --- 1. the log cleaner ------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Cleaning:
    """One timed clean by either engine."""

    seconds: float
    end_offset: int
    messages_read: int
    messages_written: int
    kept: Kept
    details: dict[str, Any]


@dataclass(frozen=True, slots=True)
class DirtyLog:
    """A generated dirty log (every segment sealed): its partition dir and its files for Kafka."""

    dir: Path
    records: int
    segment_bytes: int
    log_bytes: int
    sources: list[Path]

    @classmethod
    def generate(cls, dir: Path, records: int, keys: int, segment_bytes: int) -> DirtyLog:
        generate_log(dir, records, keys, VALUE_SIZE, segment_bytes)
        sources = segment_files(dir)
        size = sum(path.stat().st_size for path in sources if path.name.endswith(files.LOG_SUFFIX))
        return cls(dir, records - records % RECORDS_PER_BATCH, segment_bytes, size, sources)  # whole batches


def _cleaner_config(segment_bytes: int, min_compaction_lag_ms: int = 0) -> dict[str, str]:
    """The compacted topic's configs, for Kafka's topic and tidelog's LogConfig alike."""
    return {"cleanup.policy": "compact", "segment.bytes": str(segment_bytes), "min.cleanable.dirty.ratio": "0.01",
            "retention.ms": "-1", "min.compaction.lag.ms": str(min_compaction_lag_ms)}


def our_engine() -> InProcessEngine:
    """One cleaner thread's engine, with :data:`CLEANER_SETTINGS`; reused for every clean, as a
    cleaner thread reuses its offset map (and as Kafka's thread does)."""
    broker = BrokerConfig.from_properties({**CLEANER_SETTINGS, "log.dirs": "/nonexistent"})
    return InProcessEngine(CleanerBuffers.for_thread(broker))


def our_clean(dirty: DirtyLog, work: Path, engine: InProcessEngine) -> Cleaning:
    """Copy the dirty log (fsynced, untimed), open it, time one ``Cleaner.clean`` of all of it.
    The log has a scheduler of its own, shut down with it (dropping the delayed deletion of the
    replaced segments: ``work`` is removed at the end)."""
    work.mkdir()
    for path in sorted(dirty.dir.iterdir()):
        copy_synced(path, work / path.name)
    scheduler = ThreadScheduler(name="bench-kafka-cleaner")
    log = Log.open(work, LogConfig.from_props(overrides=_cleaner_config(dirty.segment_bytes)),
                   had_clean_shutdown=True, scheduler=scheduler)
    try:
        to_clean = log_to_clean(log.topic_partition, log, None, now_ms())
        cleaner = Cleaner(engine, log.clock)
        result: list[Any] = []
        seconds = seconds_of(lambda: result.extend(cleaner.clean(to_clean)))
        end, stats = result
    finally:
        log.close()
        scheduler.shutdown()
    kept = kept_records(work)
    shutil.rmtree(work)
    return Cleaning(seconds, end, stats.messages_read, stats.messages_written, kept,
                    {"stats_seconds": stats.elapsed_secs, "map_seconds": stats.elapsed_index_secs,
                     "passes": stats.passes})


def alter_topic(broker: KafkaBroker, topic: str, configs: dict[str, str]) -> None:
    """Set topic configs through the running broker (IncrementalAlterConfigs)."""
    from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap_servers, client_id="tidelog-bench")
    try:
        admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic, configs)], incremental=True)
    finally:
        admin.close()


def kafka_clean(broker: KafkaBroker, dirty: DirtyLog, warmup: DirtyLog, timeout_s: float) -> Cleaning:
    """One timed clean by Kafka's cleaner, in a broker whose JIT has warmed up on a first clean.

    With the broker stopped: copies of both dirty logs go in their partition dirs and the cleaner
    checkpoint forgets them. The broker starts and cleans the warm-up log at once; the timed log
    waits, uncleanable (``min.compaction.lag.ms`` = :data:`HOLD_MS`, its records being far
    younger than that), until the lag is set to 0. Once Kafka logged that stats block, the hold is
    put back for the next run and the broker stops."""
    for log, tp in ((dirty, CLEAN_TOPIC), (warmup, WARMUP_TOPIC)):
        place_segments(log.sources, broker.partition_dir(tp.topic, tp.partition))
        set_checkpoint(broker.log_dir, CLEANER_OFFSET_CHECKPOINT_FILE, tp, None)
    marks = log_marks(broker)
    broker.start()
    _wait_cleaned(broker, marks, str(WARMUP_TOPIC), warmup.records, timeout_s)
    alter_topic(broker, CLEAN_TOPIC.topic, {"min.compaction.lag.ms": "0"})
    _wait_cleaned(broker, marks, str(CLEAN_TOPIC), dirty.records, timeout_s)
    alter_topic(broker, CLEAN_TOPIC.topic, {"min.compaction.lag.ms": str(HOLD_MS)})
    broker.stop()
    text, name = text_since(marks), str(CLEAN_TOPIC)
    done, starts = parse_cleaner_stats(text, name), parse_cleaning_starts(text, name)
    if len(starts) != len(done):
        raise NotTheSameWork(f"Kafka logged {len(starts)} cleaning starts for {len(done)} stats blocks of {name}")
    seconds = sum(block.stamp - start for block, start in zip(done, starts))
    return Cleaning(seconds, done[-1].end, sum(b.messages_read for b in done), sum(b.messages_written for b in done),
                    kept_records(broker.partition_dir(CLEAN_TOPIC.topic, CLEAN_TOPIC.partition)),
                    {"stats_seconds": sum(b.seconds for b in done), "rounds": len(done),
                     "mib_written": sum(b.mb_written for b in done)})


def _wait_cleaned(broker: KafkaBroker, marks: dict[Path, int], name: str, end_offset: int, timeout_s: float) -> None:
    broker.wait_for(lambda: any(block.end >= end_offset for block in parse_cleaner_stats(text_since(marks), name)),
                    f"Kafka's cleaner to clean {name} up to offset {end_offset}", timeout_s)


def check_same_cleaning(kafka: Cleaning, ours: Cleaning, records: int) -> None:
    """Both cleaned all ``records`` and kept the same records at the same offsets."""
    problems = []
    if kafka.end_offset != ours.end_offset:
        problems.append(f"cleaned up to offset {kafka.end_offset} (Kafka) vs {ours.end_offset} (tidelog)")
    if kafka.messages_read != records or ours.messages_read != records:
        problems.append(f"read {kafka.messages_read} (Kafka) and {ours.messages_read} (tidelog) of {records} records")
    if kafka.kept.records != ours.kept.records or kafka.kept.offsets_digest != ours.kept.offsets_digest:
        problems.append(f"kept {kafka.kept.records} (Kafka) vs {ours.kept.records} (tidelog) records, "
                        f"offset digests {kafka.kept.offsets_digest} vs {ours.kept.offsets_digest}")
    if problems:
        raise NotTheSameWork("the cleaners did different work: " + "; ".join(problems))


def bench_kafka_cleaner(settings: Settings) -> list[Row]:
    missing = kafka_missing()
    if missing is not None:
        return skipped_rows(("kafka_cleaner", "kafka_cleaner_records"), "MB/s", missing)
    with scratch_dir(settings.work_dir / "kafka-cleaner") as root:
        return _cleaner_rows(settings, root)


def _cleaner_rows(settings: Settings, root: Path) -> list[Row]:
    keys = settings.pick(1_000_000, 10_000)
    dirty = DirtyLog.generate(root / "dirty-0", settings.pick(8_000_000, 100_000), keys, settings.pick(128, 4) * MIB)
    warmup = DirtyLog.generate(root / "warmup-0", *WARMUP_LOG)
    engine = our_engine()
    our_clean(warmup, root / "warmup-1", engine)  # loads the scan and offset-map kernels (numba's cache)
    broker = new_broker(root)
    try:
        broker.start()
        create_topic(broker, CLEAN_TOPIC, _cleaner_config(dirty.segment_bytes, min_compaction_lag_ms=HOLD_MS))
        create_topic(broker, WARMUP_TOPIC, _cleaner_config(warmup.segment_bytes))
        broker.stop()
        kafka_runs, our_runs, loads = [], [], []
        for repeat in range(settings.repeats):
            kafka_runs.append(kafka_clean(broker, dirty, warmup, settings.pick(900.0, 180.0)))
            our_runs.append(our_clean(dirty, root / f"tidelog-{repeat}", engine))
            loads.append(load_average())
            check_same_cleaning(kafka_runs[-1], our_runs[-1], dirty.records)
    finally:
        broker.kill()
    return _cleaner_result(kafka_runs, our_runs, dirty, keys, loads)


def _cleaner_result(kafka_runs: Sequence[Cleaning], our_runs: Sequence[Cleaning], dirty: DirtyLog, keys: int,
                    loads: Sequence[float | None]) -> list[Row]:
    kafka_s, ours_s = median([run.seconds for run in kafka_runs]), median([run.seconds for run in our_runs])
    kept, size, records = our_runs[0].kept, dirty.log_bytes, dirty.records
    details = {
        "kafka_version": KAFKA.version, "log_bytes": size, "records": records, "keys": keys,
        "segment_bytes": dirty.segment_bytes, "cleaner_settings": CLEANER_SETTINGS, "warmup_log": WARMUP_LOG,
        "kept_records": kept.records, "kept_bytes": kept.bytes, "kept_offsets_digest": kept.offsets_digest,
        "kafka_seconds": [run.seconds for run in kafka_runs], "tidelog_seconds": [run.seconds for run in our_runs],
        "kafka": [run.details for run in kafka_runs], "tidelog": [run.details for run in our_runs],
        "load_average_1m": list(loads),
    }
    label = f"tidelog Cleaner.clean vs Kafka: {size / MB:,.0f} MB, {records:,} records, {keys:,} keys, one thread"
    return [
        Row("kafka_cleaner", label, size / MB / ours_s, "MB/s", size / MB / kafka_s,
            f"Kafka {KAFKA.version} LogCleaner, same segments", None, details),
        Row("kafka_cleaner_records", "the same cleans in records/s", records / ours_s, "records/s",
            records / kafka_s, f"Kafka {KAFKA.version} LogCleaner", None, {}),
    ]


# --- 2. unclean recovery -----------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Recovery:
    seconds: float
    log_end_offset: int
    details: dict[str, Any]


def our_recovery(pristine: PristineCopy, scheduler: ThreadScheduler) -> Recovery:
    """Restore the saved partition dir (untimed), time ``Log.open`` after a crash (recovery point 0)."""
    pristine.restore(indexes=True)
    log: list[Log] = []
    config = log_config()
    seconds = seconds_of(lambda: log.append(
        Log.open(pristine.dir, config, had_clean_shutdown=False, recovery_point=0, scheduler=scheduler)))
    end = log[0].log_end_offset
    log[0].close()
    return Recovery(seconds, end, {})


def kafka_recovery(broker: KafkaBroker, sources: Sequence[Path]) -> Recovery:
    """An unclean start of the stopped broker with a copy of ``sources`` in each of the two
    recovery topics: no clean-shutdown marker, recovery points 0. Its one recovery thread loads
    the two logs one after the other; the second one's load is timed (the first warmed the JIT),
    the first's is kept in the details."""
    for tp in RECOVERY_TOPICS:
        place_segments(sources, broker.partition_dir(tp.topic, tp.partition))
        set_checkpoint(broker.log_dir, RECOVERY_POINT_CHECKPOINT_FILE, tp, 0)
    (broker.log_dir / CLEAN_SHUTDOWN_FILE).unlink(missing_ok=True)
    marks = log_marks(broker)
    names = [str(tp) for tp in RECOVERY_TOPICS]
    broker.start()
    broker.wait_for(lambda: len(parse_log_loads(text_since(marks), names)) == len(names),
                    "Kafka to load the recovery topics", 300)
    broker.stop()
    text = text_since(marks)
    loads = parse_log_loads(text, names)
    if len(loads) != len(names) or any(recovered_segments(text, name) < 1 for name in names):
        raise NotTheSameWork(f"Kafka did not load and recover each of {names} once:\n{text[-2000:]}")
    first, second = loads
    if first.log_end_offset != second.log_end_offset:
        raise NotTheSameWork(f"Kafka recovered two copies to log end offsets {first.log_end_offset} and "
                             f"{second.log_end_offset}")
    return Recovery(second.milliseconds / 1000, second.log_end_offset,
                    {"timed": second.name, "first_load_seconds": first.milliseconds / 1000, "first": first.name})


def bench_kafka_recovery(settings: Settings) -> list[Row]:
    missing = kafka_missing()
    if missing is not None:
        return skipped_rows(("kafka_recovery",), "GB/s", missing)
    with scratch_dir(settings.work_dir / "kafka-recovery") as root:
        return _recovery_rows(settings, root)


def _recovery_rows(settings: Settings, root: Path) -> list[Row]:
    ours = root / "tidelog-0"
    ours.mkdir()
    (root / "aside").mkdir()
    segment = warm_segment(ours, build_batches(settings.pick(16, 4), 1000, seed=4), 1000, settings.pick(1024, 32) * MIB)
    scheduler = ThreadScheduler(name="bench-kafka-recovery")
    broker = new_broker(root)
    try:
        first = Log.open(ours, log_config(), had_clean_shutdown=False, recovery_point=0, scheduler=scheduler)
        first.close()  # the warm-up open; its close leaves trimmed index files: what both engines start from
        pristine = PristineCopy.save(ours, root / "aside" / segment.path.name)
        sources = [pristine.aside]  # for Kafka: the saved .log and index files, never touched by our opens
        for name, data in sorted(pristine.small_files.items()):
            if name.endswith((files.INDEX_SUFFIX, files.TIME_INDEX_SUFFIX)):
                sources.append(root / "aside" / name)
                sources[-1].write_bytes(data)
        broker.start()
        for tp in RECOVERY_TOPICS:
            create_topic(broker, tp, {"segment.bytes": str(SEGMENT_BYTES), "retention.ms": "-1"})
        broker.stop()
        kafka_runs, our_runs, loads = [], [], []
        for _ in range(settings.repeats):
            kafka_runs.append(kafka_recovery(broker, sources))
            our_runs.append(our_recovery(pristine, scheduler))
            loads.append(load_average())
            if kafka_runs[-1].log_end_offset != our_runs[-1].log_end_offset:
                raise NotTheSameWork(f"recovered log end offsets differ: {kafka_runs[-1].log_end_offset} (Kafka) "
                                     f"vs {our_runs[-1].log_end_offset} (tidelog)")
    finally:
        broker.kill()
        scheduler.shutdown()
    kafka_s, ours_s = median([r.seconds for r in kafka_runs]), median([r.seconds for r in our_runs])
    return [Row("kafka_recovery", f"unclean open of a {segment.size / MIB:,.0f} MiB active segment, recovery point 0",
                segment.size / ours_s / 1e9, "GB/s", segment.size / kafka_s / 1e9,
                f"Kafka {KAFKA.version} broker's load of the same log", None,
                {"kafka_version": KAFKA.version, "segment_bytes": segment.size, "batches": segment.batches,
                 "log_end_offset": our_runs[0].log_end_offset, "kafka_seconds": [r.seconds for r in kafka_runs],
                 "tidelog_seconds": [r.seconds for r in our_runs], "kafka": [r.details for r in kafka_runs],
                 "load_average_1m": loads})]


def bench_kafka_produce_fetch(settings: Settings) -> list[Row]:
    """Produce and fetch through the wire (bench/bench_kafka_wire.py, which imports this module)."""
    from bench import bench_kafka_wire
    return bench_kafka_wire.bench_kafka_produce_fetch(settings)


# --- the chart ---------------------------------------------------------------------------------

def write_chart(rows: Iterable[Row], path: Path, *, quick: bool = False, load: float | None = None) -> Path | None:
    """Draw the measured side-by-side rows (tidelog vs Kafka, one panel per figure, the ratio in
    its title) into the PNG ``path``; None (nothing written) when no such row was measured.
    ``quick`` and ``load`` (the load average when the run started) are said in the subtitle."""
    measured = [row for row in rows if row.benchmark in SIDE_BY_SIDE_ROWS and row.baseline
                and math.isfinite(row.figure) and math.isfinite(row.baseline)]
    if not measured:
        return None
    from matplotlib.figure import Figure  # no pyplot: no global state, no display needed
    from matplotlib.ticker import StrMethodFormatter

    columns = min(len(measured), CHART_COLUMNS)
    lines = math.ceil(len(measured) / columns)
    figure = Figure(figsize=(4.2 * columns, 0.6 + 3.8 * lines), layout="constrained")
    panels = figure.subplots(lines, columns, squeeze=False).flatten()
    for axes in panels[len(measured):]:
        axes.set_axis_off()
    for axes, row in zip(panels, measured):
        bars = axes.bar(["tidelog", f"Kafka {KAFKA.version}"], [row.figure, row.baseline], color=["#2a7ab9", "#8c8c8c"])
        axes.bar_label(bars, labels=[_short(row.figure), _short(row.baseline)])
        axes.set_title(f"{row.benchmark}: {row.ratio:.2f}x Kafka", fontsize=10)
        axes.set_ylabel(row.unit)
        if max(row.figure, row.baseline) >= 1000:
            axes.yaxis.set_major_formatter(StrMethodFormatter("{x:,.0f}"))
        axes.margins(y=0.15)
    notes = ["same run, higher is better", *(["--quick sizes: a smoke run, not a measurement"] if quick else []),
             *([f"load average {load:.1f} at the start"] if load is not None else [])]
    figure.suptitle("tidelog vs Apache Kafka\n" + "; ".join(notes), fontsize=9)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    return path


def _short(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:.1f}" if value >= 10 else f"{value:.2f}"


def run_benchmark(name: str, settings: Settings) -> list[Row]:
    logging.getLogger("tidelog").setLevel(logging.ERROR)  # recovery warnings are expected here
    return BENCHMARKS[name][1](settings)


BENCHMARKS = {
    "kafka_cleaner": (f"Cleaner.clean vs Kafka {KAFKA.version}'s LogCleaner on the same 1 GB dirty log, one thread",
                      bench_kafka_cleaner),
    "kafka_recovery": (f"unclean Log.open vs Kafka {KAFKA.version}'s recovery of the same 1 GiB segment",
                       bench_kafka_recovery),
    "kafka_produce_fetch": (f"produce and fetch records/s: tidelog serve vs a Kafka {KAFKA.version} broker, same "
                            "clients (kafka-python, a lean pipelined one, librdkafka)", bench_kafka_produce_fetch),
}
