"""Kafka's ``DumpLogSegments`` (kafka-dump-log.sh) run on files, as the reader nobody here wrote,
and its text output parsed back into typed rows.

:func:`dump_log_segments` runs the tool once over many files (one JVM, ~1 s a start);
:meth:`DumpOutput.parsed` (or :func:`parse_dump`) turns what it printed into a :class:`ParsedDump`.

What the tool prints (Kafka 4.x ``org.apache.kafka.tools.DumpLogSegments``; 3.9's Scala twin prints
the same lines, with the differences noted) and what the parser makes of it::

    stdout                                                          parsed into
    Dumping <path>                                                  a new DumpedFile (the path as given)
    Log starting offset: <n>                                        DumpedFile.start_offset
    baseOffset: .. lastOffset: .. count: .. baseSequence: ..        DumpedBatch (magic 2)
      lastSequence: .. producerId: .. producerEpoch: ..
      partitionLeaderEpoch: .. isTransactional: .. isControl: ..
      deleteHorizonMs: OptionalLong[<ms>]|OptionalLong.empty
      position: .. <TimestampType>: <max> size: .. magic: ..
      compresscodec: .. crc: <unsigned> isvalid: true|false
    offset: <last> position: .. <TimestampType>: .. size: ..        DumpedBatch (magic 0/1: no v2 fields)
    | offset: .. <TimestampType>: .. keySize: .. valueSize: ..       DumpedRecord (--deep-iteration)
      [sequence: .. headerKeys: [k1,k2]]                              v2 only
      [isValid: .. crc: ..]                                           v0/v1 only (3.9 prints "crc: <n>}")
      [endTxnMarker: COMMIT|ABORT coordinatorEpoch: ..]               control records
      [controlType: <TYPE>(<id>)]                                     other control records
      [key: <text>] [payload: <text>]                                 --print-data-log, data records only
    Found <n> invalid bytes at the end of <name>                    DumpedFile.trailing_invalid_bytes
    offset: <o> position: <p>             (in a .index)             DumpedIndexEntry
    timestamp: <t> offset: <o>            (in a .timeindex)         DumpedTimeIndexEntry
    version: .. producerId: .. firstOffset: .. lastOffset: ..       DumpedAbortedTxn (.txnindex)
      lastStableOffset: ..
    producerId: .. producerEpoch: .. coordinatorEpoch: ..          DumpedProducerEntry (.snapshot)
      currentTxnFirstOffset: OptionalLong[<n>]|OptionalLong.empty
      lastTimestamp: .. [firstSequence: .. lastSequence: ..
      lastOffset: .. offsetDelta: .. timestamp: ..]                  (the last batch, when there is one)
    <path> is empty.                                                DumpedFile.empty (.index with no entry)
    <path> passed sanity check.                                     DumpedFile.passed_sanity_check

    stderr (printed after all files)                                DumpProblems
    Mismatches in :<abs path> / "  Index offset: i, log offset: l"  index_mismatches
    Found timestamp mismatch in :<abs path>                          time_index_mismatches
      / "  Index timestamp: i, log timestamp: l"
    Found out of order timestamp in :<abs path>                      out_of_order_timestamps
      / "  Index timestamp: i, Previously indexed timestamp: p"
    The following indexed offsets are not found in the log.          offsets_not_found (no path printed)
      / "Indexed offset: i, found log offset: l"
    Non-consecutive offsets in <abs path> / "  a is followed by b"   non_consecutive_offsets
    Ignoring unknown file <path>                                     ignored_files
    anything else (an exception's message and stack trace)           other

Every stdout line the parser does not recognise lands in :attr:`ParsedDump.unparsed`, so a test
can assert that it understood everything Kafka said. Keys and payloads are the text Kafka's
``StringDecoder`` made of the bytes (UTF-8); a record's key is cut from the line by its
``keySize`` in UTF-8 bytes, so keys and payloads may contain spaces or " payload: ". Lines of
``--skip-record-metadata`` and KRaft snapshots are not parsed (``unparsed``).
"""

from __future__ import annotations

import re
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from kafka_oracle.jars import HERE, KafkaDistribution

DUMP_TIMEOUT_S = 300.0
# Keys and payloads are decoded as UTF-8 by Kafka's StringDecoder; print them as UTF-8 whatever the
# locale (JDK 17 reads file.encoding, JDK 18+ stdout.encoding).
_UTF8_OUTPUT = ("-Dfile.encoding=UTF-8", "-Dstdout.encoding=UTF-8", "-Dstderr.encoding=UTF-8")
# A run lasts a second or two: the C1 compiler alone costs ~40% less CPU than tiered C2 (measured
# on a 2-core machine: 1.4 s against 2.4 s for one dump of a few small segments).
_SHORT_LIVED = ("-XX:TieredStopAtLevel=1",)


@dataclass(frozen=True)
class DumpOutput:
    command: list[str]
    returncode: int
    stdout: str
    stderr: str

    def check(self) -> DumpOutput:
        """This output, or an AssertionError quoting Kafka's complaint when the tool failed."""
        if self.returncode != 0:
            raise AssertionError(f"DumpLogSegments exited {self.returncode}:\n{self.stderr[-4000:]}\n{self.stdout[-2000:]}")
        return self

    def parsed(self) -> ParsedDump:
        """What the tool printed, as typed rows (see the module docstring); never raises."""
        return parse_dump(self.stdout, self.stderr)


def dump_main_class(distribution: KafkaDistribution) -> str:
    # moved from core (Scala) to the tools module (Java) in Kafka 4
    return "org.apache.kafka.tools.DumpLogSegments" if distribution.line >= 4 else "kafka.tools.DumpLogSegments"


def dump_log_segments(distribution: KafkaDistribution, files: Sequence[Path], *options: str,
                      work_dir: Path | None = None) -> DumpOutput:
    """Run DumpLogSegments once over ``files`` (one JVM for all: ~1 s a start) with ``options``
    such as ``--deep-iteration``, ``--print-data-log``, ``--verify-index-only``, ``--index-sanity-check``.
    Kafka's own log4j files (server.log, log-cleaner.log) go to ``work_dir``; without one, to a
    temporary dir removed afterwards (never next to the dumped files, where a broker or tidelog
    would later find them in a partition dir)."""
    if work_dir is not None:
        return _run_dump(distribution, files, options, work_dir)
    with tempfile.TemporaryDirectory(prefix="kafka-dump-") as logs_dir:
        return _run_dump(distribution, files, options, Path(logs_dir))


def _run_dump(distribution: KafkaDistribution, files: Sequence[Path], options: Sequence[str],
              logs_dir: Path) -> DumpOutput:
    logging = (f"-Dlog4j2.configurationFile={HERE / 'log4j2.properties'}" if distribution.line >= 4
               else f"-Dlog4j.configuration=file:{HERE / 'log4j.properties'}")
    command = distribution.java_command(
        dump_main_class(distribution), *options, "--files", ",".join(str(f) for f in files),
        jvm_options=(logging, f"-Dkafka.logs.dir={logs_dir}", *_UTF8_OUTPUT, *_SHORT_LIVED))
    done = subprocess.run(command, capture_output=True, encoding="utf-8", errors="replace", timeout=DUMP_TIMEOUT_S)
    return DumpOutput(command, done.returncode, done.stdout, done.stderr)


# --- parsed rows ----------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class DumpedRecord:
    """One ``| offset: ...`` line of ``--deep-iteration``. ``sequence``/``header_keys`` exist for
    magic 2 only, ``legacy_valid``/``legacy_crc`` for magic 0/1 only; ``key``/``payload`` are None
    when the record has none (or ``--print-data-log`` was not given, or it is a control record)."""

    offset: int
    timestamp_type: str  # "CreateTime", "LogAppendTime" or "NoTimestampType" (the batch's)
    timestamp: int
    key_size: int  # -1: null key
    value_size: int  # -1: null value (a tombstone)
    sequence: int | None = None
    header_keys: tuple[str, ...] | None = None
    legacy_valid: bool | None = None
    legacy_crc: int | None = None
    end_txn_marker: str | None = None  # "COMMIT" or "ABORT"
    coordinator_epoch: int | None = None
    control_type: str | None = None  # other control records: "<TYPE>(<id>)"
    key: str | None = None
    payload: str | None = None


@dataclass(frozen=True, slots=True)
class DumpedBatch:
    """One batch line. For magic 0/1 Kafka prints only the last offset: every v2-only field is None."""

    last_offset: int
    position: int
    timestamp_type: str
    max_timestamp: int
    size: int
    magic: int
    compression: str  # Kafka's CompressionType name: none, gzip, snappy, lz4, zstd
    crc: int  # unsigned, as stored
    is_valid: bool
    base_offset: int | None = None
    count: int | None = None
    base_sequence: int | None = None
    last_sequence: int | None = None
    producer_id: int | None = None
    producer_epoch: int | None = None
    partition_leader_epoch: int | None = None
    is_transactional: bool | None = None
    is_control: bool | None = None
    delete_horizon_ms: int | None = None  # None: OptionalLong.empty (or magic 0/1)
    records: tuple[DumpedRecord, ...] = ()


@dataclass(frozen=True, slots=True)
class DumpedIndexEntry:
    offset: int
    position: int


@dataclass(frozen=True, slots=True)
class DumpedTimeIndexEntry:
    timestamp: int
    offset: int


@dataclass(frozen=True, slots=True)
class DumpedAbortedTxn:
    version: int
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


@dataclass(frozen=True, slots=True)
class DumpedProducerEntry:
    """One producer of a ``.snapshot``; the batch fields are None when it has no data batch."""

    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    last_timestamp: int
    current_txn_first_offset: int | None = None
    first_sequence: int | None = None
    last_sequence: int | None = None
    last_offset: int | None = None
    offset_delta: int | None = None
    timestamp: int | None = None


@dataclass(frozen=True, slots=True)
class DumpedFile:
    """Everything printed under one ``Dumping <path>`` line."""

    path: str
    start_offset: int | None = None  # "Log starting offset" (.log files)
    batches: tuple[DumpedBatch, ...] = ()
    trailing_invalid_bytes: int = 0
    index_entries: tuple[DumpedIndexEntry, ...] = ()
    time_index_entries: tuple[DumpedTimeIndexEntry, ...] = ()
    aborted_txns: tuple[DumpedAbortedTxn, ...] = ()
    producer_entries: tuple[DumpedProducerEntry, ...] = ()
    empty: bool = False  # "<path> is empty." (an offset index without entries)
    passed_sanity_check: bool = False

    @property
    def records(self) -> list[DumpedRecord]:
        return [r for b in self.batches for r in b.records]


Pairs = tuple[tuple[int, int], ...]


@dataclass(frozen=True, slots=True)
class DumpProblems:
    """What the tool reported on stderr. Paths are absolute (Kafka's ``getAbsolutePath``)."""

    index_mismatches: dict[str, Pairs] = field(default_factory=dict)  # (index offset, last offset found there)
    time_index_mismatches: dict[str, Pairs] = field(default_factory=dict)  # (index ts, max record ts found)
    out_of_order_timestamps: dict[str, Pairs] = field(default_factory=dict)  # (index ts, previous index ts)
    offsets_not_found: Pairs = ()  # (indexed offset, log offset found or -1); Kafka names no file
    non_consecutive_offsets: dict[str, Pairs] = field(default_factory=dict)  # (offset, next offset)
    ignored_files: tuple[str, ...] = ()
    other: tuple[str, ...] = ()  # any other stderr line: an exception's message, its stack trace

    @property
    def index_problems(self) -> bool:
        """Whether any offset- or time-index check failed."""
        return bool(self.index_mismatches or self.time_index_mismatches or self.out_of_order_timestamps
                    or self.offsets_not_found)


@dataclass(frozen=True, slots=True)
class ParsedDump:
    files: dict[str, DumpedFile]  # by the path printed after "Dumping", in dump order
    problems: DumpProblems
    unparsed: tuple[str, ...]  # stdout lines the parser did not recognise (with their file)

    def file(self, path: Path | str) -> DumpedFile:
        """The dump of ``path``; KeyError naming the dumped paths when the tool printed none."""
        try:
            return self.files[str(path)]
        except KeyError:
            raise KeyError(f"{path} was not dumped; dumped: {list(self.files)}") from None


def parse_dump(stdout: str, stderr: str) -> ParsedDump:
    """Parse DumpLogSegments' output (see the module docstring for the lines understood)."""
    files: dict[str, _FileRows] = {}
    unparsed: list[str] = []
    current: _FileRows | None = None
    for line in stdout.splitlines():
        if line.startswith("Dumping "):
            current = files.setdefault(line[len("Dumping "):], _FileRows(line[len("Dumping "):]))
        elif line.strip() and (current is None or not current.take(line)):
            unparsed.append(f"{current.path if current else '-'}: {line}")
    return ParsedDump({path: rows.freeze() for path, rows in files.items()}, _parse_problems(stderr), tuple(unparsed))


# --- stdout ---------------------------------------------------------------------------------------

_INT = r"-?\d+"
_BOOL = r"true|false"
_TS_TYPE = r"CreateTime|LogAppendTime|NoTimestampType"
_BATCH_TAIL = (rf" position: (?P<position>{_INT}) (?P<timestamp_type>{_TS_TYPE}): (?P<max_timestamp>{_INT})"
               rf" size: (?P<size>{_INT}) magic: (?P<magic>{_INT}) compresscodec: (?P<compression>\w+)"
               rf" crc: (?P<crc>{_INT}) isvalid: (?P<is_valid>{_BOOL})")
_V2_BATCH = re.compile(
    rf"baseOffset: (?P<base_offset>{_INT}) lastOffset: (?P<last_offset>{_INT}) count: (?P<count>{_INT})"
    rf" baseSequence: (?P<base_sequence>{_INT}) lastSequence: (?P<last_sequence>{_INT})"
    rf" producerId: (?P<producer_id>{_INT}) producerEpoch: (?P<producer_epoch>{_INT})"
    rf" partitionLeaderEpoch: (?P<partition_leader_epoch>{_INT}) isTransactional: (?P<is_transactional>{_BOOL})"
    rf" isControl: (?P<is_control>{_BOOL}) deleteHorizonMs: OptionalLong(?:\[(?P<delete_horizon_ms>{_INT})\]|\.empty)"
    + _BATCH_TAIL)
_LEGACY_BATCH = re.compile(rf"offset: (?P<last_offset>{_INT})" + _BATCH_TAIL)
_RECORD = re.compile(
    rf"\| offset: (?P<offset>{_INT}) (?P<timestamp_type>{_TS_TYPE}): (?P<timestamp>{_INT})"
    rf" keySize: (?P<key_size>{_INT}) valueSize: (?P<value_size>{_INT})"
    rf"(?: sequence: (?P<sequence>{_INT}) headerKeys: \[(?P<header_keys>[^\]]*)\])?"
    rf"(?: isValid: (?P<legacy_valid>{_BOOL}) crc: (?P<legacy_crc>\d+)\}}?)?"  # 3.9 prints a stray "}"
    rf"(?: endTxnMarker: (?P<end_txn_marker>\w+) coordinatorEpoch: (?P<coordinator_epoch>{_INT}))?"
    rf"(?: controlType: (?P<control_type>\w+\({_INT}\)))?"
    r"(?P<contents>.*)")
_TRAILING = re.compile(rf"Found (?P<n>{_INT}) invalid bytes at the end of .+")
_START = re.compile(rf"Log starting offset: (?P<n>{_INT})")
_INDEX_ENTRY = re.compile(rf"offset: (?P<offset>{_INT}) position: (?P<position>{_INT})")
_TIME_INDEX_ENTRY = re.compile(rf"timestamp: (?P<timestamp>{_INT}) offset: (?P<offset>{_INT})")
_ABORTED_TXN = re.compile(
    rf"version: (?P<version>{_INT}) producerId: (?P<producer_id>{_INT}) firstOffset: (?P<first_offset>{_INT})"
    rf" lastOffset: (?P<last_offset>{_INT}) lastStableOffset: (?P<last_stable_offset>{_INT})")

_PRODUCER_ENTRY = re.compile(
    rf"producerId: (?P<producer_id>{_INT}) producerEpoch: (?P<producer_epoch>{_INT})"
    rf" coordinatorEpoch: (?P<coordinator_epoch>{_INT})"
    rf" currentTxnFirstOffset: OptionalLong(?:\[(?P<current_txn_first_offset>{_INT})\]|\.empty)"
    rf" lastTimestamp: (?P<last_timestamp>{_INT}) ?"
    rf"(?:firstSequence: (?P<first_sequence>{_INT}) lastSequence: (?P<last_sequence>{_INT})"
    rf" lastOffset: (?P<last_offset>{_INT}) offsetDelta: (?P<offset_delta>{_INT}) timestamp: (?P<timestamp>{_INT}))?")

_BOOL_FIELDS = {"is_valid", "is_transactional", "is_control", "legacy_valid"}
_TEXT_FIELDS = {"timestamp_type", "compression", "end_txn_marker", "control_type"}


def _typed(match: re.Match[str], skip: frozenset[str] = frozenset()) -> dict[str, object]:
    """The named groups of ``match`` that matched, as int, bool or str by field."""
    out: dict[str, object] = {}
    for name, text in match.groupdict().items():
        if text is None or name in skip:
            continue
        out[name] = (text == "true" if name in _BOOL_FIELDS else text if name in _TEXT_FIELDS else int(text))
    return out


class _FileRows:
    """The rows of one ``Dumping`` section while they are read (private: frozen by :meth:`freeze`)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.fields: dict[str, object] = {}
        self.batches: list[tuple[DumpedBatch, list[DumpedRecord]]] = []
        self.index: list[DumpedIndexEntry] = []
        self.time_index: list[DumpedTimeIndexEntry] = []
        self.aborted: list[DumpedAbortedTxn] = []
        self.producers: list[DumpedProducerEntry] = []
        self._readers: tuple[Callable[[str], bool], ...] = (
            self._status, self._log_line, self._index_line, self._time_index_line, self._txn_line, self._snapshot_line)

    def take(self, line: str) -> bool:
        """Record ``line``; False when it is nothing this parser knows."""
        return any(read(line) for read in self._readers)

    def _status(self, line: str) -> bool:
        if line == f"{self.path} is empty.":
            self.fields["empty"] = True
        elif line == f"{self.path} passed sanity check.":
            self.fields["passed_sanity_check"] = True
        elif (start := _START.fullmatch(line)) is not None:
            self.fields["start_offset"] = int(start["n"])
        elif (trailing := _TRAILING.fullmatch(line)) is not None:
            self.fields["trailing_invalid_bytes"] = int(trailing["n"])
        else:
            return False
        return True

    def _log_line(self, line: str) -> bool:
        if not self.path.endswith(".log"):
            return False
        if line.startswith("| ") and self.batches:
            record = _record(line)
            if record is not None:
                self.batches[-1][1].append(record)
            return record is not None
        batch = _V2_BATCH.fullmatch(line) or _LEGACY_BATCH.fullmatch(line)
        if batch is not None:
            self.batches.append((DumpedBatch(**_typed(batch)), []))  # type: ignore[arg-type]
        return batch is not None

    def _index_line(self, line: str) -> bool:
        entry = _INDEX_ENTRY.fullmatch(line) if self.path.endswith(".index") else None
        if entry is not None:
            self.index.append(DumpedIndexEntry(int(entry["offset"]), int(entry["position"])))
        return entry is not None

    def _time_index_line(self, line: str) -> bool:
        entry = _TIME_INDEX_ENTRY.fullmatch(line) if self.path.endswith(".timeindex") else None
        if entry is not None:
            self.time_index.append(DumpedTimeIndexEntry(int(entry["timestamp"]), int(entry["offset"])))
        return entry is not None

    def _txn_line(self, line: str) -> bool:
        entry = _ABORTED_TXN.fullmatch(line) if self.path.endswith(".txnindex") else None
        if entry is not None:
            self.aborted.append(DumpedAbortedTxn(**_typed(entry)))  # type: ignore[arg-type]
        return entry is not None

    def _snapshot_line(self, line: str) -> bool:
        entry = _PRODUCER_ENTRY.fullmatch(line) if self.path.endswith(".snapshot") else None
        if entry is not None:
            self.producers.append(DumpedProducerEntry(**_typed(entry)))  # type: ignore[arg-type]
        return entry is not None

    def freeze(self) -> DumpedFile:
        batches = tuple(replace(batch, records=tuple(records)) for batch, records in self.batches)
        return DumpedFile(self.path, batches=batches, index_entries=tuple(self.index),  # type: ignore[arg-type]
                          time_index_entries=tuple(self.time_index), aborted_txns=tuple(self.aborted),
                          producer_entries=tuple(self.producers), **self.fields)


def _record(line: str) -> DumpedRecord | None:
    match = _RECORD.fullmatch(line)
    if match is None:
        return None
    fields = _typed(match, skip=frozenset({"header_keys", "contents"}))
    if match["header_keys"] is not None:
        fields["header_keys"] = tuple(match["header_keys"].split(",")) if match["header_keys"] else ()
    contents = _contents(match["contents"], int(match["key_size"]))
    if contents is None:
        return None
    fields["key"], fields["payload"] = contents
    return DumpedRecord(**fields)  # type: ignore[arg-type]


def _contents(text: str, key_size: int) -> tuple[str | None, str | None] | None:
    """(key, payload) from the `` key: K payload: V`` tail of a record line, None if malformed.
    The key is ``key_size`` UTF-8 bytes long; when its text is not (bytes StringDecoder replaced),
    the first " payload: " ends it."""
    key = None
    if text.startswith(" key: "):
        rest = text[len(" key: "):]
        raw = rest.encode("utf-8")
        try:
            key, text = raw[:key_size].decode("utf-8"), raw[key_size:].decode("utf-8")
        except UnicodeDecodeError:
            key, text = rest, ""
        if text and not text.startswith(" payload: "):
            key, sep, tail = rest.partition(" payload: ")
            text = sep + tail
    if text == "":
        return key, None
    return (key, text[len(" payload: "):]) if text.startswith(" payload: ") else None


# --- stderr ---------------------------------------------------------------------------------------

_PAIR_SECTIONS = (  # header prefix -> (DumpProblems field, pattern of its indented lines)
    ("Mismatches in :", "index_mismatches", re.compile(rf"  Index offset: ({_INT}), log offset: ({_INT})")),
    ("Found timestamp mismatch in :", "time_index_mismatches",
     re.compile(rf"  Index timestamp: ({_INT}), log timestamp: ({_INT})")),
    ("Found out of order timestamp in :", "out_of_order_timestamps",
     re.compile(rf"  Index timestamp: ({_INT}), Previously indexed timestamp: ({_INT})")),
    ("Non-consecutive offsets in ", "non_consecutive_offsets", re.compile(rf"  ({_INT}) is followed by ({_INT})")),
)
_NOT_FOUND_HEADER = "The following indexed offsets are not found in the log."
_NOT_FOUND = re.compile(rf"Indexed offset: ({_INT}), found log offset: ({_INT})")


def _parse_problems(stderr: str) -> DumpProblems:
    by_file: dict[str, dict[str, list[tuple[int, int]]]] = {name: {} for _, name, _ in _PAIR_SECTIONS}
    not_found: list[tuple[int, int]] = []
    ignored: list[str] = []
    other: list[str] = []
    section: tuple[re.Pattern[str], list[tuple[int, int]]] | None = None
    for line in stderr.splitlines():
        if section is not None and (pair := section[0].fullmatch(line)) is not None:
            section[1].append((int(pair[1]), int(pair[2])))
            continue
        section = None
        for prefix, name, pattern in _PAIR_SECTIONS:
            if line.startswith(prefix):
                section = (pattern, by_file[name].setdefault(line[len(prefix):], []))
                break
        else:
            if line == _NOT_FOUND_HEADER:
                section = (_NOT_FOUND, not_found)
            elif line.startswith("Ignoring unknown file "):
                ignored.append(line[len("Ignoring unknown file "):])
            elif line.strip():
                other.append(line)
    frozen = {name: {path: tuple(pairs) for path, pairs in files.items()} for name, files in by_file.items()}
    return DumpProblems(**frozen, offsets_not_found=tuple(not_found), ignored_files=tuple(ignored),
                        other=tuple(other))
