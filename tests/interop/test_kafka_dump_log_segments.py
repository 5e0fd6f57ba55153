"""Kafka's DumpLogSegments reads every kind of segment tidelog writes, and sees what we see.

The segments are written by tidelog's own code (``Log`` appends as leader and follower, the
``BatchBuilder``, the cleaner), in four partition dirs:

* ``plain-0``: every codec, headers, null and empty keys and values, UTF-8 text, idempotent
  producers (one whose sequence wraps past Int.MAX), interleaved transactions ended by COMMIT and
  ABORT markers with their ``.txnindex`` entries, changing leader epochs; rolled into several
  segments with sparse indexes (small ``index.interval.bytes``).
* ``append-time-0``: a ``LogAppendTime`` topic, every codec.
* ``compacted-0``: every codec, cleaned twice by tidelog's cleaner: tombstones in batches with a
  delete horizon (attribute bit 6), empty batches keeping producers' last sequences, aborted data
  removed and its ABORT marker re-indexed, a COMMIT marker of a transaction whose data is gone
  stamped with a delete horizon.
* ``legacy-0``: message formats v0 and v1 (plain messages and gzip, snappy, lz4 wrappers, a v1
  LogAppendTime wrapper) cleaned by tidelog, which rewrites legacy wrappers in their own format.

Kafka 4.3.1's DumpLogSegments runs three times over all of it (``--deep-iteration
--print-data-log``, ``--verify-index-only``, ``--index-sanity-check``), Kafka 3.9.2's once over the
legacy dir (four JVMs, two at a time). Its output is parsed (:mod:`kafka_oracle.dump`) and compared
field by field with what tidelog reads from the same files. Kafka 4.3 still reads v0/v1 segments
(4.0 stopped writing them, not reading them) and prints them exactly as 3.9 does. Two copies of a
segment broken on purpose (a flipped bit, a moved index entry) ride along in the deep run and show
that the comparison can fail.

Reports of DumpLogSegments that are no problem, asserted exactly rather than ignored:

* *Non-consecutive offsets*: cleaning leaves gaps and empty batches hold no record. Kafka 4 starts
  each file at -1, so a segment whose first record is not offset 0 also reports "-1 is followed by
  <first offset>"; Kafka 3.9 starts at the file's first record.
* *Time-index "mismatch ... log timestamp: -1"*: Kafka's ``LogSegment.append`` indexes each batch
  by its header's maxTimestamp, and the empty batch the cleaner keeps for a producer's last
  sequence retains the maxTimestamp of the batch it replaces (``MemoryRecords.filterTo``,
  ``RETAIN_EMPTY``); DumpLogSegments recomputes the max from the batch's records, and an empty
  batch has none. Kafka's own cleaned segments get the same report.
"""

from __future__ import annotations

import shutil
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
from kafka.record.memory_records import MemoryRecords

from kafka_oracle import KafkaDistribution
from kafka_oracle.dump import (
    DumpedAbortedTxn,
    DumpedBatch,
    DumpedIndexEntry,
    DumpedRecord,
    DumpedTimeIndexEntry,
    ParsedDump,
    dump_log_segments,
    parse_dump,
)
from tests.cli_helpers import run_cli
from tidelog.cleaner.log_cleaner import LogCleaner
from tidelog.records import (
    BatchBuilder,
    CompressionType,
    EndTransactionMarker,
    Record,
    TimestampType,
    build_end_txn_marker_batch,
    build_legacy_batch,
    control_record_type,
    increment_sequence,
    iter_batches,
)
from tidelog.records.batch import FileBatch
from tidelog.storage.append_info import AppendOrigin
from tidelog.storage.config import BrokerConfig, LogConfig
from tidelog.storage.index import OffsetIndex, TimeIndex
from tidelog.storage.log import Log
from tidelog.storage.txn_index import AbortedTxn, TransactionIndex
from tidelog.testing import FakeClock, FakeScheduler

# One xdist worker runs the whole module: its segments and its four JVMs are built once, not per worker.
pytestmark = pytest.mark.xdist_group("kafka_dump_log_segments")

NOW = 1_700_000_000_000
DELETE_RETENTION_MS = 3_600_000
CODECS = list(CompressionType)
LEGACY_CODECS = [CompressionType.NONE, CompressionType.GZIP, CompressionType.SNAPPY, CompressionType.LZ4]
DIRS = ("plain-0", "append-time-0", "compacted-0", "legacy-0")
SEGMENT_SUFFIXES = (".log", ".index", ".timeindex", ".txnindex")
INDEX_SUFFIXES = (".index", ".timeindex")
TIMESTAMP_TYPE_NAMES = {TimestampType.CREATE_TIME: "CreateTime", TimestampType.LOG_APPEND_TIME: "LogAppendTime",
                        TimestampType.NO_TIMESTAMP: "NoTimestampType"}

Row = tuple[str | None, str | None, list[tuple[str, bytes | None]]]  # key, value, headers


# --- writing the segments with tidelog ------------------------------------------------------------

def open_log(root: Path, name: str, clock: FakeClock, **overrides: str) -> Log:
    props = {"segment.bytes": "1400", "index.interval.bytes": "150", "delete.retention.ms": str(DELETE_RETENTION_MS),
             "min.cleanable.dirty.ratio": "0.0"}
    props.update(overrides)
    return Log.open(root / name, LogConfig.from_props(overrides=props), clock=clock, scheduler=FakeScheduler(clock))


def batch(rows: list[Row], *, start_ts: int, codec: int = CompressionType.NONE, **producer: int | bool) -> bytes:
    builder = BatchBuilder(compression=codec, **producer)  # type: ignore[arg-type]
    for i, (key, value, headers) in enumerate(rows):
        builder.append(i, start_ts + i, None if key is None else key.encode(),
                       None if value is None else value.encode(), headers)
    return builder.build()


def text_rows(n: int, salt: str) -> list[Row]:
    """UTF-8 keys and values, with a null key, an empty key, a tombstone, an empty value, headers
    (one with a null value) and a value holding DumpLogSegments' own separator."""
    rows: list[Row] = []
    for i in range(n):
        key = None if i == 1 else "" if i == 4 else f"ключ-{salt}-{i}"
        value = None if i == 2 else "" if i == 5 else f"значение {salt} {i} ✓ payload: {i}"
        headers = [("trace-id", f"{salt}{i}".encode()), ("ünï", None)] if i % 3 == 0 else []
        rows.append((key, value, headers))
    return rows


def end_txn(log: Log, producer_id: int, epoch: int, *, commit: bool, coordinator_epoch: int, ts: int) -> int:
    marker = build_end_txn_marker_batch(commit=commit, producer_id=producer_id, producer_epoch=epoch,
                                        coordinator_epoch=coordinator_epoch, timestamp=ts)
    return log.append_as_leader(marker, leader_epoch=2, origin=AppendOrigin.COORDINATOR).first_offset


def abort(log: Log, producer_id: int, epoch: int, first_offset: int, last_stable_offset: int | None, ts: int) -> None:
    """An ABORT marker; the append path writes its .txnindex entry, which must be the one Kafka's
    producer state writes (checked here, then decoded by DumpLogSegments below)."""
    marker = end_txn(log, producer_id, epoch, commit=False, coordinator_epoch=6, ts=ts)
    lso = marker + 1 if last_stable_offset is None else last_stable_offset
    assert log.active_segment.txn_index.all_aborted_txns()[-1] == AbortedTxn(producer_id, first_offset, marker, lso)


def write_plain(root: Path, clock: FakeClock) -> None:
    log = open_log(root, "plain-0", clock)
    ts = NOW
    for n, codec in enumerate(CODECS * 2):
        log.append_as_leader(batch(text_rows(6, f"{codec.name[:2]}{n}"), start_ts=ts, codec=codec), leader_epoch=n // 5)
        ts += 10
    disorder = BatchBuilder(compression=CompressionType.LZ4)  # max timestamp on the first record
    for i, stamp in enumerate((ts + 5, ts, ts + 1)):
        disorder.append(i, stamp, f"k{i}".encode(), f"unordered {i}".encode())
    log.append_as_leader(disorder.build(), leader_epoch=1)
    idempotent = dict(producer_id=1000, producer_epoch=2)
    log.append_as_leader(batch(text_rows(3, "idem"), start_ts=ts + 20, base_sequence=0, **idempotent), leader_epoch=1)
    log.append_as_leader(batch(text_rows(2, "idem"), start_ts=ts + 30, codec=CompressionType.ZSTD, base_sequence=3,
                               **idempotent), leader_epoch=1)
    log.append_as_leader(batch(text_rows(4, "wrap"), start_ts=ts + 40, codec=CompressionType.SNAPPY,
                               producer_id=1001, producer_epoch=0, base_sequence=2**31 - 2), leader_epoch=1)
    write_transactions(log, ts + 100)
    log.close()


def write_transactions(log: Log, ts: int) -> None:
    """Producer 2000 commits around an abort of producer 2001 (whose LSO is 2000's first offset),
    then 2001 aborts again alone, its data compressed."""
    committing = dict(producer_id=2000, producer_epoch=0, is_transactional=True)
    first_2000 = log.append_as_leader(batch(text_rows(2, "c"), start_ts=ts, base_sequence=0, **committing),
                                      leader_epoch=2).first_offset
    first_2001 = log.append_as_leader(batch(text_rows(2, "a"), start_ts=ts + 1, codec=CompressionType.GZIP,
                                            producer_id=2001, producer_epoch=3, base_sequence=0,
                                            is_transactional=True), leader_epoch=2).first_offset
    log.append_as_leader(batch(text_rows(1, "c2"), start_ts=ts + 2, base_sequence=2, **committing), leader_epoch=2)
    abort(log, 2001, 3, first_2001, first_2000, ts + 3)
    end_txn(log, 2000, 0, commit=True, coordinator_epoch=5, ts=ts + 4)
    again = log.append_as_leader(batch(text_rows(3, "a2"), start_ts=ts + 5, codec=CompressionType.ZSTD,
                                       producer_id=2001, producer_epoch=4, base_sequence=0, is_transactional=True),
                                 leader_epoch=2).first_offset
    abort(log, 2001, 4, again, None, ts + 6)


def write_append_time(root: Path, clock: FakeClock) -> None:
    log = open_log(root, "append-time-0", clock, **{"message.timestamp.type": "LogAppendTime"})
    for n, codec in enumerate(CODECS):
        clock.advance(7)
        log.append_as_leader(batch(text_rows(3, f"lat{n}"), start_ts=NOW - 5000, codec=codec))
    log.close()


def cleaner_for(log: Log, clock: FakeClock) -> LogCleaner:
    broker = BrokerConfig.from_properties({"log.dirs": str(log.dir.parent), "log.cleaner.dedupe.buffer.size": "24000"})
    return LogCleaner(broker, [log.dir.parent], lambda: [(log.topic_partition, log)], clock)


def clean_twice(log: Log, clock: FakeClock) -> None:
    """A clean, then a forced full recopy (still before the delete horizon): the second pass finds
    COMMIT markers whose data the first removed and stamps them with a delete horizon."""
    log.update_high_watermark(log.log_end_offset)
    cleaner = cleaner_for(log, clock)
    first = cleaner.run_once()
    assert first is not None and first.error is None
    clock.advance(1000)
    cleaner.manager.update_checkpoints(log.dir.parent, log.topic_partition, 0)
    second = cleaner.clean_now(log.topic_partition, force=True)
    assert second is not None and second.error is None


def write_compacted(root: Path, clock: FakeClock) -> None:
    """Every batch indexed (``index.interval.bytes`` 1) and timestamps rising batch by batch, so the
    empty batches the cleaner keeps carry the segment's max timestamp when indexed."""
    log = open_log(root, "compacted-0", clock, **{"cleanup.policy": "compact", "index.interval.bytes": "1"})
    stamps = iter(range(NOW - 10_000, NOW, 10))
    for round_ in range(2):
        for n, codec in enumerate(CODECS):
            rows: list[Row] = [(f"k{n}-{i}", f"r{round_} значение {i}", [("h", b"1")] if i else []) for i in range(4)]
            log.append_as_leader(batch(rows, start_ts=next(stamps), codec=codec))
    log.append_as_leader(batch([("k0-0", None, []), ("k0-1", "alive", []), ("k0-2", None, [])], start_ts=next(stamps),
                               codec=CompressionType.ZSTD))
    log.append_as_leader(batch([("k1-0", "idempotent", [])], start_ts=next(stamps), producer_id=3000, producer_epoch=0,
                               base_sequence=0))
    log.append_as_leader(batch([("k1-0", "overwritten", [])], start_ts=next(stamps), codec=CompressionType.GZIP))
    aborted = log.append_as_leader(batch([("k2-0", "aborted", [])], start_ts=next(stamps), producer_id=3001,
                                         producer_epoch=0, base_sequence=0, is_transactional=True)).first_offset
    abort(log, 3001, 0, aborted, None, next(stamps))
    committed = dict(producer_id=3002, producer_epoch=0)
    log.append_as_leader(batch([("k3-0", "committed", [])], start_ts=next(stamps), base_sequence=0,
                               is_transactional=True, **committed))
    end_txn(log, 3002, 0, commit=True, coordinator_epoch=7, ts=next(stamps))
    log.append_as_leader(batch([("k3-0", "after", [])], start_ts=next(stamps), codec=CompressionType.SNAPPY,
                               base_sequence=1, **committed))
    log.roll()
    log.append_as_leader(batch([("k4-0", "active", [])], start_ts=next(stamps), codec=CompressionType.LZ4))
    clean_twice(log, clock)
    log.close()


def legacy(log: Log, magic: int, codec: int, keys: list[str], value: str | None, *, ts: int,
           log_append_time: int | None = None) -> None:
    """One v0/v1 message set appended as a follower; ``value`` None writes tombstones."""
    start = log.log_end_offset
    messages = [(start + i, ts + i, k.encode(), None if value is None else f"{value}-{i}".encode())
                for i, k in enumerate(keys)]
    stamp = {} if log_append_time is None else {"timestamp_type": TimestampType.LOG_APPEND_TIME,
                                                "log_append_time": log_append_time}
    log.append_as_follower(build_legacy_batch(messages, magic=magic, compression=codec, **stamp))


def write_legacy(root: Path, clock: FakeClock) -> None:
    """v0 and v1 in every legacy codec; keys overwritten so that some wrappers are rewritten
    (some of their messages dropped) and some kept; tombstones; legacy data left in
    the active segment too."""
    log = open_log(root, "legacy-0", clock, **{"cleanup.policy": "compact", "segment.bytes": "1200"})
    ts = NOW - 20_000
    for magic in (0, 1):
        for n, codec in enumerate(LEGACY_CODECS):
            legacy(log, magic, codec, [f"m{magic}-{n}", "shared", f"gone-{n % 2}"], f"v{magic}{codec.name}", ts=ts)
            ts += 10
    legacy(log, 1, CompressionType.GZIP, ["appended", "gone-0"], "lat", ts=ts, log_append_time=ts + 500)
    legacy(log, 1, CompressionType.NONE, ["gone-1"], None, ts=ts + 1)
    legacy(log, 0, CompressionType.NONE, ["tomb-v0"], None, ts=ts + 2)
    log.roll()
    legacy(log, 1, CompressionType.SNAPPY, ["active", "shared"], "active", ts=ts + 3)
    legacy(log, 0, CompressionType.LZ4, ["active-v0"], "active", ts=ts + 4)
    log.update_high_watermark(log.log_end_offset)
    result = cleaner_for(log, clock).run_once()
    assert result is not None and result.error is None
    log.close()


def break_copies(root: Path) -> tuple[Path, Path]:
    """Copies of plain-0's first segment made wrong on purpose: a ``.log`` with one bit of a
    record's value flipped (in the first, uncompressed batch), and an ``.index`` whose first entry
    points at position 0 instead of its batch."""
    source = root / "plain-0" / "00000000000000000000.log"
    data = bytearray(source.read_bytes())
    _, first = next(iter_batches(data))
    assert first.compression is CompressionType.NONE
    data[bytes(data).index("значение".encode(), 0, first.size_in_bytes)] ^= 0x01  # still UTF-8: з -> ѷ
    bad_crc = root / "broken-crc-0" / source.name
    bad_crc.parent.mkdir()
    bad_crc.write_bytes(data)
    bad_index = root / "broken-index-0" / "00000000000000000000.index"
    bad_index.parent.mkdir()
    shutil.copy(source, bad_index.with_suffix(".log"))
    entries = bytearray(source.with_suffix(".index").read_bytes())
    entries[4:8] = (0).to_bytes(4, "big")
    bad_index.write_bytes(entries)
    return bad_crc, bad_index


@dataclass(frozen=True)
class Corpus:
    root: Path
    bad_crc: Path
    bad_index: Path

    def files(self, *dirs: str, suffixes: tuple[str, ...] = SEGMENT_SUFFIXES) -> list[Path]:
        """The segment files of ``dirs`` (the four good dirs by default), sorted by dir then name."""
        return [f for d in dirs or DIRS for f in sorted((self.root / d).iterdir()) if f.suffix in suffixes]


@dataclass(frozen=True)
class Dumps:
    deep: ParsedDump  # Kafka 4.3, --deep-iteration --print-data-log, every file and the broken copies
    verify: ParsedDump  # Kafka 4.3, --verify-index-only, every .index and .timeindex
    sanity: ParsedDump  # Kafka 4.3, --index-sanity-check, every .index and .timeindex
    legacy_3_9: ParsedDump  # Kafka 3.9, --deep-iteration --print-data-log, legacy-0


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Corpus:
    root = tmp_path_factory.mktemp("dump-corpus")
    for write in (write_plain, write_append_time, write_compacted, write_legacy):
        write(root, FakeClock(NOW))
    return Corpus(root, *break_copies(root))


@pytest.fixture(scope="module")
def dumps(kafka4: KafkaDistribution, kafka3: KafkaDistribution, corpus: Corpus,
          tmp_path_factory: pytest.TempPathFactory) -> Dumps:
    """Four JVMs, two at a time (the machine has two cores); each run must exit 0."""
    work = tmp_path_factory.mktemp("dump-work")
    indexes = corpus.files(suffixes=INDEX_SUFFIXES)
    deep_options = ("--deep-iteration", "--print-data-log")
    calls = [(kafka4, [*corpus.files(), corpus.bad_crc, corpus.bad_index], deep_options),
             (kafka3, corpus.files("legacy-0"), deep_options),
             (kafka4, indexes, ("--verify-index-only",)),
             (kafka4, indexes, ("--index-sanity-check",))]

    def run(call: tuple[KafkaDistribution, list[Path], tuple[str, ...]]) -> ParsedDump:
        return dump_log_segments(call[0], call[1], *call[2], work_dir=work).check().parsed()

    with ThreadPoolExecutor(max_workers=2) as pool:
        deep, legacy_3_9, verify, sanity = pool.map(run, calls)
    return Dumps(deep, verify, sanity, legacy_3_9)


# --- what tidelog reads from the same files, in DumpLogSegments' terms ----------------------------

def our_batches(log_file: Path) -> list[DumpedBatch]:
    """Every batch of ``log_file`` as tidelog reads it, in the fields DumpLogSegments prints."""
    data = log_file.read_bytes()
    legacy_crcs = kafka_python_legacy_crcs(data)
    return [our_batch(position, b, legacy_crcs) for position, b in iter_batches(data)]


LegacyCrcs = dict[int, tuple[bool, int]]  # offset -> (CRC valid, CRC) of a v0/v1 message


def our_batch(position: int, b: FileBatch, legacy_crcs: LegacyCrcs) -> DumpedBatch:
    common = dict(last_offset=b.last_offset, position=position, timestamp_type=TIMESTAMP_TYPE_NAMES[b.timestamp_type],
                  max_timestamp=b.max_timestamp, size=b.size_in_bytes, magic=b.magic,
                  compression=b.compression.name.lower(), crc=b.crc, is_valid=b.is_valid())
    records = tuple(our_record(b, r, legacy_crcs) for r in b.records())
    if b.magic < 2:
        return DumpedBatch(**common, records=records)  # type: ignore[arg-type]
    return DumpedBatch(**common, base_offset=b.base_offset, count=b.records_count,  # type: ignore[arg-type]
                       base_sequence=b.base_sequence, last_sequence=b.last_sequence, producer_id=b.producer_id,
                       producer_epoch=b.producer_epoch, partition_leader_epoch=b.partition_leader_epoch,
                       is_transactional=b.is_transactional, is_control=b.is_control,
                       delete_horizon_ms=b.delete_horizon_ms, records=records)


def our_record(b: FileBatch, r: Record, legacy_crcs: LegacyCrcs) -> DumpedRecord:
    fields = dict(offset=r.offset, timestamp_type=TIMESTAMP_TYPE_NAMES[b.timestamp_type], timestamp=r.timestamp,
                  key_size=-1 if r.key is None else len(r.key), value_size=-1 if r.value is None else len(r.value))
    if b.magic < 2:
        valid, crc = legacy_crcs[r.offset]
        return DumpedRecord(**fields, legacy_valid=valid, legacy_crc=crc,  # type: ignore[arg-type]
                            key=text(r.key), payload=text(r.value))
    sequence = -1 if b.base_sequence == -1 else increment_sequence(b.base_sequence, r.offset - b.base_offset)
    header_keys = tuple(k for k, _ in r.headers)
    if not b.is_control:
        return DumpedRecord(**fields, sequence=sequence, header_keys=header_keys,  # type: ignore[arg-type]
                            key=text(r.key), payload=text(r.value))
    marker = control_record_type(r.key)
    return DumpedRecord(**fields, sequence=sequence, header_keys=header_keys, end_txn_marker=marker.name,  # type: ignore[arg-type]
                        coordinator_epoch=EndTransactionMarker.decode(r.value).coordinator_epoch)


def text(data: bytes | None) -> str | None:
    return None if data is None else data.decode("utf-8")


def kafka_python_legacy_crcs(data: bytes) -> LegacyCrcs:
    """Whether the CRC of each v0/v1 message (inner messages of wrappers too) checks, and the CRC,
    as kafka-python reads them: tidelog keeps inner messages private, and DumpLogSegments prints them."""
    crcs, records = {}, MemoryRecords(data)
    while records.has_next():
        found = records.next_batch()
        if found.magic < 2:
            crcs.update((r.offset, (r.validate_crc(), r.checksum)) for r in found)
    return crcs


def log_files(parsed: ParsedDump) -> dict[str, list[DumpedBatch]]:
    return {path: list(f.batches) for path, f in parsed.files.items() if path.endswith(".log")}


def our_gaps(log_file: Path, *, from_minus_one: bool) -> set[tuple[int, int]]:
    """(offset, next offset) wherever the records of ``log_file`` skip offsets, as DumpLogSegments
    counts: Kafka 4 from -1, Kafka 3.9 from the file's first record."""
    offsets = [r.offset for _, b in iter_batches(log_file.read_bytes()) for r in b.records()]
    pairs = zip([-1] + offsets, offsets) if from_minus_one else zip(offsets, offsets[1:])
    return {(a, b) for a, b in pairs if b != a + 1}


def our_index(path: Path) -> list[DumpedIndexEntry]:
    index = OffsetIndex(path, int(path.stem), writable=False)
    try:
        return [DumpedIndexEntry(e.offset, e.position) for e in map(index.entry, range(index.entries))]
    finally:
        index.close()


def our_time_index(path: Path) -> list[DumpedTimeIndexEntry]:
    index = TimeIndex(path, int(path.stem), writable=False)
    try:
        return [DumpedTimeIndexEntry(e.timestamp, e.offset) for e in map(index.entry, range(index.entries))]
    finally:
        index.close()


def our_aborted_txns(path: Path) -> list[DumpedAbortedTxn]:
    index = TransactionIndex(path, int(path.stem))
    try:
        return [DumpedAbortedTxn(0, t.producer_id, t.first_offset, t.last_offset, t.last_stable_offset)
                for t in index.all_aborted_txns()]
    finally:
        index.close()


def empty_batch_time_entries(corpus: Corpus) -> dict[str, set[tuple[int, int]]]:
    """time index path -> (index timestamp, -1) for each entry at the last offset of an empty batch
    with that max timestamp: what DumpLogSegments reports as a mismatch (see the module docstring)."""
    out: dict[str, set[tuple[int, int]]] = {}
    for path in corpus.files(suffixes=(".timeindex",)):
        empty = {(b.last_offset, b.max_timestamp) for _, b in iter_batches(path.with_suffix(".log").read_bytes())
                 if b.magic == 2 and b.records_count == 0}
        found = {(e.timestamp, -1) for e in our_time_index(path) if (e.offset, e.timestamp) in empty}
        if found:
            out[str(path)] = found
    return out


# --- the tests -------------------------------------------------------------------------------------

def test_kafka_decodes_every_batch_and_record_as_we_do(corpus: Corpus, dumps: Dumps) -> None:
    deep = dumps.deep
    assert deep.unparsed == () and deep.problems.other == () and deep.problems.ignored_files == ()
    logs = corpus.files(suffixes=(".log",))
    assert sorted(log_files(deep)) == sorted(map(str, [*logs, corpus.bad_crc]))
    for log_file in logs:
        dumped = deep.file(log_file)
        assert dumped.start_offset == int(log_file.stem) and dumped.trailing_invalid_bytes == 0
        ours = our_batches(log_file)
        assert [b.position for b in dumped.batches] == [b.position for b in ours], log_file
        for kafka, we in zip(dumped.batches, ours):
            assert kafka.is_valid, f"{log_file} @{kafka.position}: Kafka says the CRC is wrong"
            assert kafka == we, f"{log_file} @{kafka.position}"


def test_the_segments_hold_every_kind_of_batch_and_record(corpus: Corpus, dumps: Dumps) -> None:
    """The comparison above covers what issue 7 lists (so a change in the writers cannot thin it out)."""
    batches = [b for path in corpus.files(suffixes=(".log",)) for b in dumps.deep.file(path).batches]
    records = [r for b in batches for r in b.records]
    v2 = [b for b in batches if b.magic == 2]
    assert {b.compression for b in v2} == {c.name.lower() for c in CODECS}
    assert {(b.magic, b.compression) for b in batches if b.magic < 2} == {
        (m, c.name.lower()) for m in (0, 1) for c in LEGACY_CODECS}
    assert {r.timestamp_type for r in records} == {"CreateTime", "LogAppendTime", "NoTimestampType"}
    assert any(r.header_keys == ("trace-id", "ünï") for r in records)
    assert any(r.key_size == -1 for r in records) and any(r.key_size == 0 for r in records)
    assert any(r.value_size == -1 and r.payload is None for r in records if r.end_txn_marker is None)
    assert any(r.payload is not None and " payload: " in r.payload for r in records)
    assert any(b.base_sequence == 2**31 - 2 and b.last_sequence == 1 for b in v2)  # wraps past Int.MAX
    assert {b.partition_leader_epoch for b in v2} >= {0, 1, 2}
    assert {r.end_txn_marker for r in records} >= {"COMMIT", "ABORT"}
    assert any(b.delete_horizon_ms == NOW + 1000 + DELETE_RETENTION_MS for b in v2 if b.is_control)
    assert any(b.delete_horizon_ms == NOW + DELETE_RETENTION_MS for b in v2 if not b.is_control)
    assert any(b.count == 0 and b.producer_id >= 0 for b in v2)  # an empty batch of a producer
    assert sum(len(dumps.deep.file(p).aborted_txns) for p in corpus.files(suffixes=(".txnindex",))) >= 3
    assert len(corpus.files("plain-0", suffixes=(".log",))) >= 3


def test_kafka_reads_our_indexes_as_we_do(corpus: Corpus, dumps: Dumps) -> None:
    deep = dumps.deep
    for path in corpus.files(suffixes=(".index",)):
        assert list(deep.file(path).index_entries) == our_index(path), path
        assert deep.file(path).empty == (our_index(path) == []), path
    for path in corpus.files(suffixes=(".timeindex",)):
        assert list(deep.file(path).time_index_entries) == our_time_index(path), path
    txn_indexes = corpus.files(suffixes=(".txnindex",))
    assert txn_indexes
    for path in txn_indexes:
        assert list(deep.file(path).aborted_txns) == our_aborted_txns(path), path
    sparse = [p for p in corpus.files("plain-0", suffixes=(".index",)) if len(our_index(p)) >= 2]
    assert len(sparse) >= 2


def test_kafka_finds_no_index_entry_off_its_batch(corpus: Corpus, dumps: Dumps) -> None:
    """``--verify-index-only``: every offset-index entry points at the batch whose last offset it
    names, every time-index entry at a batch of that max timestamp, in order; only entries on
    empty batches are reported (see the module docstring). The deep dump checks the same."""
    expected = empty_batch_time_entries(corpus)
    assert expected, "the cleaned segments index an empty batch"
    for parsed in (dumps.verify, dumps.deep):
        problems = parsed.problems
        assert parsed.unparsed == () and problems.other == ()
        assert set(problems.index_mismatches) <= {str(corpus.bad_index)} and problems.offsets_not_found == ()
        assert problems.out_of_order_timestamps == {}
        assert {path: set(pairs) for path, pairs in problems.time_index_mismatches.items()} == expected
    verify = dumps.verify
    assert verify.problems.index_mismatches == {}
    assert list(verify.files) == list(map(str, corpus.files(suffixes=INDEX_SUFFIXES)))
    assert all(not f.index_entries and not f.time_index_entries for f in verify.files.values())


def test_every_index_passes_kafkas_sanity_check(corpus: Corpus, dumps: Dumps) -> None:
    sanity = dumps.sanity
    assert sanity.unparsed == () and sanity.problems.other == () and not sanity.problems.index_problems
    assert list(sanity.files) == list(map(str, corpus.files(suffixes=INDEX_SUFFIXES)))
    for path in corpus.files(suffixes=INDEX_SUFFIXES):
        dumped = sanity.file(path)
        skipped_as_empty = path.suffix == ".index" and our_index(path) == []  # Kafka checks no empty .index
        assert dumped.passed_sanity_check != skipped_as_empty and dumped.empty == skipped_as_empty, path


def test_kafka_sees_offset_gaps_exactly_where_we_left_them(corpus: Corpus, dumps: Dumps) -> None:
    reported = {path: set(pairs) for path, pairs in dumps.deep.problems.non_consecutive_offsets.items()}
    logs = [*corpus.files(suffixes=(".log",)), corpus.bad_crc]
    expected = {str(p): our_gaps(p, from_minus_one=True) for p in logs}
    assert reported == {path: gaps for path, gaps in expected.items() if gaps}
    assert any(gap[0] >= 0 for gaps in reported.values() for gap in gaps), "cleaning left gaps"


def test_kafka_3_9_reads_the_legacy_segments_our_cleaner_rewrote(corpus: Corpus, dumps: Dumps) -> None:
    three = dumps.legacy_3_9
    assert three.unparsed == () and three.problems.other == () and not three.problems.index_problems
    assert list(three.files) == list(map(str, corpus.files("legacy-0")))
    logs = corpus.files("legacy-0", suffixes=(".log",))
    for log_file in logs:
        assert list(three.file(log_file).batches) == our_batches(log_file), log_file
        assert set(three.problems.non_consecutive_offsets.get(str(log_file), ())) == our_gaps(log_file,
                                                                                             from_minus_one=False)
    for path in corpus.files("legacy-0", suffixes=(".index",)):
        assert list(three.file(path).index_entries) == our_index(path), path
    for path in corpus.files("legacy-0", suffixes=(".timeindex",)):
        assert list(three.file(path).time_index_entries) == our_time_index(path), path
    cleaned = [b for b in three.file(logs[0]).batches if b.magic < 2]
    assert {b.magic for b in cleaned} == {0, 1} and {b.compression for b in cleaned} > {"none"}


def test_kafka_4_still_reads_legacy_segments_and_prints_them_as_3_9_does(corpus: Corpus, dumps: Dumps) -> None:
    """Kafka 4 dropped writing message formats v0/v1 (KIP-724), not reading them: its
    DumpLogSegments decodes them like 3.9 (whose "crc: <n>}" typo the parser absorbs). Only the
    gap report differs: Kafka 4 counts from -1."""
    for path in corpus.files("legacy-0"):
        assert dumps.deep.file(path) == dumps.legacy_3_9.file(path), path
    cleaned = corpus.files("legacy-0", suffixes=(".log",))[0]
    assert {b.magic for b in dumps.deep.file(cleaned).batches} == {0, 1}


def test_a_flipped_byte_is_reported_and_the_comparison_sees_it(corpus: Corpus, dumps: Dumps) -> None:
    """The checks above can fail: one flipped bit in a record's value makes Kafka print
    ``isvalid: false`` and another payload; one index entry moved makes it report a mismatch."""
    good = corpus.root / "plain-0" / corpus.bad_crc.name
    kafka, ours, original = (dumps.deep.file(corpus.bad_crc).batches[0], our_batches(corpus.bad_crc)[0],
                             our_batches(good)[0])
    assert kafka.is_valid is False and ours.is_valid is False and original.is_valid is True
    assert kafka == ours, "both read the flipped value the same way"
    assert kafka.crc == original.crc and kafka != original
    changed = [(k.payload, o.payload) for k, o in zip(kafka.records, original.records) if k != o]
    assert changed == [("ѷначение NO0 0 ✓ payload: 0", "значение NO0 0 ✓ payload: 0")]
    assert dumps.deep.file(corpus.bad_crc).batches[1:] == tuple(our_batches(good)[1:])
    first_entry, first_batch = our_index(corpus.bad_index)[0], original
    assert dumps.deep.problems.index_mismatches == {
        str(corpus.bad_index): ((first_entry.offset, first_batch.last_offset),)}
    assert first_entry.offset != first_batch.last_offset


def test_the_parser_keeps_what_it_does_not_understand() -> None:
    parsed = parse_dump("Dumping /x/00000000000000000000.log\nLog starting offset: 0\nsomething new\n",
                        "java.lang.IllegalStateException: boom\n\tat Foo\n")
    assert parsed.unparsed == ("/x/00000000000000000000.log: something new",)
    assert parsed.problems.other == ("java.lang.IllegalStateException: boom", "\tat Foo")


def test_tidelog_dump_prints_what_kafka_prints(kafka4: KafkaDistribution, corpus: Corpus, dumps: Dumps,
                                               tmp_path: Path) -> None:
    """``tidelog dump --deep --print-data`` over the v2 dirs, parsed as Kafka's output is, equals
    Kafka's dump file by file: batches, records with their sequence, transaction markers, index
    entries, aborted transactions; and the producer snapshots equal a Kafka run over them. (The
    legacy dir is left out: tidelog does not print a v0/v1 record's own CRC.)"""
    v2 = corpus.files("plain-0", "append-time-0", "compacted-0")
    snapshots = corpus.files("plain-0", "append-time-0", "compacted-0", suffixes=(".snapshot",))
    assert snapshots, "the corpus rolls segments, so Log wrote producer snapshots"
    code, out, err = run_cli(corpus.root, "dump", "--print-data", *map(str, [*v2, *snapshots]))
    assert code == 0, err
    ours = parse_dump(out.decode(), "")
    assert ours.unparsed == () and ours.problems.other == ()
    kafka_snapshots = dump_log_segments(kafka4, snapshots, work_dir=tmp_path).check().parsed()
    assert any(kafka_snapshots.file(path).producer_entries for path in snapshots)
    for path in v2:
        assert ours.file(path) == dumps.deep.file(path), path
    for path in snapshots:
        assert ours.file(path) == kafka_snapshots.file(path), path
    markers = [r.end_txn_marker for path in v2 for r in ours.file(path).records if r.end_txn_marker]
    assert {"COMMIT", "ABORT"} <= set(markers)
