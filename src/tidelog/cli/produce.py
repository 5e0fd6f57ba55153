"""``tidelog produce TOPIC``: records from stdin into a topic, like kafka-console-producer.

How input becomes batches (what Kafka's producer does, in one process):

1. stdin is read in chunks of whole lines (:func:`iter_line_chunks`); each chunk is parsed into
   record columns (:mod:`tidelog.cli.record_io`);
2. :class:`~tidelog.partitioner.DefaultPartitioner` gives every record its partition (``--partition``,
   the record's own ``partition``, murmur2 of its key, or the sticky partition) and its place in
   an open batch of that partition; a batch is sealed at ``--batch-size`` records or before it would
   pass the topic's ``max.message.bytes``;
3. the chunk's records are encoded in one kernel call, grouped by batch; a batch whose records
   span chunks is the concatenation of its pieces;
4. every sealed batch is compressed if asked and appended whole, as one producer batch, to a
   :class:`ProduceTarget`: ``LogManager.append`` locally, or one Produce request (acks=-1) to the
   partition's leader with ``--bootstrap-server`` (:mod:`tidelog.cli.remote_produce`): the same
   batches either way, so the same offsets, summary and errors. At the end of input, and when
   stdin stays idle for ``LINGER_SECONDS`` (Kafka's console producer lingers 1 s), every open
   batch is sealed and appended.

**Errors** keep a simple contract: *every record of the lines before line L is written, and
nothing from line L on*, where L is the bad line (bad JSON, no key separator, bad field) or the
first line of a batch the log refused (a record over ``max.message.bytes``, a keyless record on
a compacted topic, a timestamp out of bounds); the message names the line and how many records
were written. Only if writing the records before L fails too is the count all that is known.
Ctrl-C while waiting for input writes the records of the lines read so far, then stops.

Output: one line per partition written, ``topic-partition first..last (N records)``, then a
total; ``--json`` prints one object instead.
"""

from __future__ import annotations

import gc
import random
import select
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO, Any, Protocol

import click
import numpy as np
import orjson

from tidelog.cli.context import open_manager
from tidelog.clock import SYSTEM_CLOCK, Clock
from tidelog.cli.record_io import (
    BASE64,
    UTF8,
    InputProblem,
    ParsedRecords,
    binary,
    encode_records,
    parse_json_chunk,
    parse_text_lines,
    split_lines,
)
from tidelog.cli.remote_options import bootstrap_option, check_remote_usage
from tidelog.errors import RecordInputError, RecordTooLargeError, TidelogError, UnknownTopicOrPartitionError
from tidelog.manager import LogManager
from tidelog.partitioner import DefaultPartitioner, murmur2_keys
from tidelog.records import RECORD_BATCH_OVERHEAD, CompressionType, compress, encode_v2_batch
from tidelog.records.builder import batch_attributes
from tidelog.records.record import TimestampType, decode_records, encode_record, record_tuple
from tidelog.topic_partition import TopicPartition

DEFAULT_BATCH_SIZE = 200  # kafka-console-producer's --batch-size
CHUNK_BYTES = 1 << 20
LINGER_SECONDS = 1.0
IDLE = None  # what iter_line_chunks yields when stdin has nothing to read for LINGER_SECONDS


# --- reading stdin -----------------------------------------------------------------------------

def iter_line_chunks(stream: IO[bytes], chunk_bytes: int = CHUNK_BYTES,
                     linger_seconds: float = LINGER_SECONDS) -> Iterator[bytes | None]:
    """Runs of whole lines of ``stream``, about ``chunk_bytes`` each, without their last newline
    (a chunk of n newlines holds n + 1 lines), and :data:`IDLE` (once per quiet spell) when
    nothing arrives for ``linger_seconds``. A last line without a newline counts."""
    read = getattr(stream, "read1", stream.read)
    partial: list[bytes] = []  # the start of a line not ended yet (a list: a long line costs linear time)
    idle_reported = False
    while True:
        if not idle_reported and not _readable(stream, linger_seconds):
            idle_reported = True
            yield IDLE
        data, eof = _read_chunk(stream, read, chunk_bytes)
        idle_reported = False
        end = data.rfind(b"\n")
        if end < 0:
            partial.append(data)
        else:
            yield b"".join((*partial, data[:end])) if partial else data[:end]
            partial = [data[end + 1:]]
        if eof:
            rest = b"".join(partial)
            if rest:
                yield rest
            return


def _read_chunk(stream: IO[bytes], read: Any, chunk_bytes: int) -> tuple[bytes, bool]:
    """Up to ``chunk_bytes``: what one read returns, plus more while more is ready at once."""
    parts: list[bytes] = []
    size = 0
    while size < chunk_bytes:
        data = read(chunk_bytes - size)
        if not data:
            return b"".join(parts), True
        parts.append(data)
        size += len(data)
        if not _readable(stream, 0):
            break
    return b"".join(parts), False


def _readable(stream: IO[bytes], timeout: float) -> bool:
    """Whether a read would not block (True for streams select cannot watch: files, memory).
    Bytes a buffered reader already holds are not seen: the caller then only flushes early."""
    try:
        ready, _, _ = select.select([stream], [], [], timeout)
        return bool(ready)
    except (OSError, ValueError, TypeError, AttributeError):
        return True


# --- batches in the making -----------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class _Piece:
    """Encoded records of one batch from one chunk: ``data`` holds them back to back, ``ends`` the
    byte after each, ``lines`` and ``timestamps`` one entry per record, in input order."""

    data: bytes
    lines: np.ndarray
    ends: np.ndarray
    timestamps: np.ndarray

    def before(self, line: int) -> _Piece | None:
        """The records from lines before ``line`` (None when there are none)."""
        keep = int(np.searchsorted(self.lines, line))
        if keep == 0:
            return None
        if keep == len(self.lines):
            return self
        return _Piece(self.data[:int(self.ends[keep - 1])], self.lines[:keep], self.ends[:keep], self.timestamps[:keep])


@dataclass(slots=True)
class _Batch:
    """The records of one producer batch, collected piece by piece."""

    partition: int
    pieces: list[_Piece] = field(default_factory=list)

    @property
    def count(self) -> int:
        return sum(len(piece.lines) for piece in self.pieces)

    @property
    def first_line(self) -> int:
        return int(self.pieces[0].lines[0])

    @property
    def last_line(self) -> int:
        return int(self.pieces[-1].lines[-1])

    def lines(self) -> np.ndarray:
        return np.concatenate([piece.lines for piece in self.pieces])

    def before(self, line: int) -> _Batch | None:
        pieces = [kept for piece in self.pieces if (kept := piece.before(line)) is not None]
        return _Batch(self.partition, pieces) if pieces else None

    def encode(self, codec: CompressionType) -> bytes:
        """The v2 producer batch (base offset 0, no producer id, CreateTime)."""
        area = b"".join(piece.data for piece in self.pieces)
        count = self.count
        if codec is not CompressionType.NONE:
            area = compress(codec, area)
        return encode_v2_batch(
            base_offset=0, partition_leader_epoch=-1,
            attributes=batch_attributes(codec, TimestampType.CREATE_TIME, False, False, False),
            last_offset_delta=count - 1, base_timestamp=int(self.pieces[0].timestamps[0]),
            max_timestamp=max(int(piece.timestamps.max()) for piece in self.pieces),
            producer_id=-1, producer_epoch=-1, base_sequence=-1, records_count=count, records_area=area)

    def halves(self) -> tuple[_Batch, _Batch]:
        """Two batches of the first and second half of the records (rare path: decodes and
        re-encodes, as Kafka's producer splits a batch the broker found too large)."""
        area = b"".join(piece.data for piece in self.pieces)
        records = list(decode_records(area, self.count, 0, int(self.pieces[0].timestamps[0]), None, record_tuple))
        lines = self.lines()
        middle = len(records) // 2
        return (self._rebuilt(records[:middle], lines[:middle]), self._rebuilt(records[middle:], lines[middle:]))

    def _rebuilt(self, records: list[Any], lines: np.ndarray) -> _Batch:
        base = records[0][1]
        encoded = [encode_record(delta, timestamp - base, key, value, headers)
                   for delta, (_, timestamp, key, value, headers) in enumerate(records)]
        ends = np.cumsum([len(record) for record in encoded], dtype=np.int64)
        stamps = np.asarray([record[1] for record in records], np.int64)
        return _Batch(self.partition, [_Piece(b"".join(encoded), lines, ends, stamps)])


# --- the producer --------------------------------------------------------------------------------

@dataclass(slots=True)
class PartitionWritten:
    """What one partition received: offsets ``first..last``, ``records`` in ``batches``."""

    first_offset: int
    last_offset: int
    records: int
    batches: int


@dataclass(frozen=True, slots=True)
class ProduceOptions:
    """``tidelog produce`` options. ``partition`` None: records are partitioned (see module doc)."""

    partition: int | None = None
    format: str = "text"
    key_separator: bytes | None = None
    compression: CompressionType = CompressionType.NONE
    batch_size: int = DEFAULT_BATCH_SIZE
    encoding: str = UTF8


@dataclass(frozen=True, slots=True)
class Appended:
    """What one append of a batch wrote: offsets ``first_offset..last_offset``, ``record_count`` records."""

    first_offset: int
    last_offset: int
    record_count: int


class ProduceTarget(Protocol):
    """Where :class:`ConsoleProducer` writes: a local LogManager or a broker."""

    def partition_count(self, topic: str) -> int:
        """How many partitions ``topic`` has (UnknownTopicOrPartitionError when there is no such topic)."""

    def max_message_bytes(self, topic: str) -> int:
        """``topic``'s ``max.message.bytes``."""

    def append(self, tp: TopicPartition, batch: bytes) -> Appended:
        """Append one v2 producer batch; a TidelogError when it is refused (RecordTooLargeError
        over ``max.message.bytes``; ``record_errors`` naming the records at fault when known)."""


class LocalTarget:
    """A :class:`ProduceTarget` over a LogManager the caller opened."""

    def __init__(self, manager: LogManager) -> None:
        self._manager = manager

    def partition_count(self, topic: str) -> int:
        return len(self._manager.partitions(topic))

    def max_message_bytes(self, topic: str) -> int:
        return self._manager.topic_config(topic).max_message_bytes

    def append(self, tp: TopicPartition, batch: bytes) -> Appended:
        info = self._manager.append(tp, batch)
        return Appended(info.first_offset, info.last_offset, info.record_count)


class _BatchRefused(Exception):
    """The log refused a batch: ``line`` is the culprit record's line when known."""

    def __init__(self, batch: _Batch, line: int, error: TidelogError) -> None:
        super().__init__(str(error))
        self.batch, self.line, self.error = batch, line, error


class ConsoleProducer:
    """Writes records parsed from lines to one topic of a LogManager or a :class:`ProduceTarget`
    (see the module doc).

    Feed runs of lines with :meth:`send_lines` (line numbers continue across calls), call :meth:`flush`
    when input pauses, :meth:`close` at the end. Errors are raised as TidelogErrors that name the
    line, after the records of the lines before it were written; do not use the producer after
    one. Not thread-safe.
    """

    def __init__(self, target: LogManager | ProduceTarget, topic: str, options: ProduceOptions, *,
                 clock: Clock = SYSTEM_CLOCK, rng: random.Random | None = None) -> None:
        self._target = LocalTarget(target) if isinstance(target, LogManager) else target
        self._topic, self._options, self._clock = topic, options, clock
        self._partitions = self._target.partition_count(topic)
        if options.partition is not None and not 0 <= options.partition < self._partitions:
            raise UnknownTopicOrPartitionError(
                f"topic {topic!r} has no partition {options.partition} (it has {self._partitions})",
                topic_partition=f"{topic}-{options.partition}")
        max_bytes = max(1, self._target.max_message_bytes(topic) - RECORD_BATCH_OVERHEAD)
        self._partitioner = DefaultPartitioner(self._partitions, options.batch_size, max_bytes, rng=rng)
        self._open: dict[int, _Batch] = {}  # batch id -> records so far
        self._next_line = 1
        self._records_written = 0
        self.written: dict[int, PartitionWritten] = {}

    @property
    def records_written(self) -> int:
        return self._records_written

    @property
    def batches_written(self) -> int:
        return sum(w.batches for w in self.written.values())

    def send_lines(self, data: bytes) -> None:
        """Parse, partition and encode the lines of ``data`` (n newlines: n + 1 lines, the last
        one without its newline); append every batch they complete."""
        first, count = self._next_line, data.count(b"\n") + 1
        self._next_line += count
        parsed = self._parse(data, first, count)
        if len(parsed):
            sealed = self._accumulate(parsed)
            self._append_or_cut([self._open.pop(batch_id) for batch_id in sealed])
        if parsed.problem is not None:
            self._fail_on_input(parsed.problem)

    def flush(self) -> None:
        """Seal and append every open batch (input is idle, or ended)."""
        sealed = self._partitioner.seal_all()
        self._append_or_cut([self._open.pop(batch_id) for batch_id in sealed])

    close = flush

    # --- parse, partition, encode ----------------------------------------------------------------

    def _parse(self, data: bytes, first: int, count: int) -> ParsedRecords:
        now = self._clock.milliseconds()
        options = self._options
        if options.format == "json":
            return parse_json_chunk(data, first, now, self._partitions, options.encoding, line_count=count)
        return parse_text_lines(split_lines(data), first, now, options.key_separator, options.encoding)

    def _accumulate(self, parsed: ParsedRecords) -> list[int]:
        """Assign and encode the records; add them to their batches; the ids sealed, in order."""
        explicit = parsed.partitions
        default = 0 if self._partitions == 1 else self._options.partition
        if default is not None:
            explicit = np.where(explicit < 0, default, explicit)
        keyed = (explicit < 0) & (parsed.key_len >= 0)
        hashes = murmur2_keys(parsed.key_data, parsed.key_len) if keyed.any() else None
        assignment = self._partitioner.assign(explicit, parsed.key_len, hashes, parsed.timestamps, parsed.sizes())
        order = np.argsort(assignment.batch, kind="stable")
        data, ends = encode_records(parsed, assignment.offset_delta, assignment.timestamp_delta, order)
        batch_ids = assignment.batch[order]
        starts = np.flatnonzero(np.diff(batch_ids)) + 1
        bounds = np.concatenate(([0], starts, [len(order)]))
        for begin, end in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
            self._add_piece(int(batch_ids[begin]), int(assignment.partition[order[begin]]), data, ends,
                            parsed, order[begin:end], begin, end)
        return assignment.sealed.tolist()

    def _add_piece(self, batch_id: int, partition: int, data: bytes, ends: np.ndarray, parsed: ParsedRecords,
                   records: np.ndarray, begin: int, end: int) -> None:
        start = int(ends[begin - 1]) if begin else 0
        piece = _Piece(data[start:int(ends[end - 1])], parsed.lines[records], ends[begin:end] - start,
                       parsed.timestamps[records])
        self._open.setdefault(batch_id, _Batch(partition)).pieces.append(piece)

    # --- append, and the error contract ----------------------------------------------------------

    def _append_or_cut(self, batches: list[_Batch]) -> None:
        """Append ``batches`` in order; on a refusal, write what precedes its first line and raise."""
        for index, batch in enumerate(batches):
            try:
                self._append(batch)
            except _BatchRefused as refused:
                pending = batches[index + 1:] + list(self._open.values())
                self._fail_on_refusal(refused, pending)

    def _append(self, batch: _Batch) -> None:
        tp = TopicPartition(self._topic, batch.partition)
        try:
            info = self._target.append(tp, batch.encode(self._options.compression))
        except RecordTooLargeError as error:
            if batch.count == 1:
                raise _BatchRefused(batch, batch.first_line, error) from error
            for half in batch.halves():  # compression made it larger than the bound it was cut to
                self._append(half)
            return
        except TidelogError as error:
            raise _BatchRefused(batch, _culprit_line(batch, error), error) from error
        self._count(batch.partition, info)

    def _count(self, partition: int, info: Appended) -> None:
        written = self.written.get(partition)
        if written is None:
            self.written[partition] = PartitionWritten(info.first_offset, info.last_offset, info.record_count, 1)
        else:
            written.last_offset = info.last_offset
            written.records += info.record_count
            written.batches += 1
        self._records_written += info.record_count

    def _fail_on_input(self, problem: InputProblem) -> None:
        """A bad line: every open batch holds only earlier lines; write them all, then raise."""
        self._write_before(problem.line)
        raise RecordInputError(self._explain(problem.line, problem.line, problem.message))

    def _fail_on_refusal(self, refused: _BatchRefused, pending: list[_Batch]) -> None:
        cut = refused.batch.first_line
        self._open = {i: batch for i, batch in enumerate(pending)}
        self._write_before(cut)
        error, batch = refused.error, refused.batch
        where = (f"the record was refused: {error.message}" if batch.count == 1 else
                 f"the batch of lines {cut}..{batch.last_line} for partition {batch.partition} was refused: "
                 f"{error.message}")
        tp = f"{self._topic}-{batch.partition}"
        raise type(error)(self._explain(refused.line, cut, where), topic_partition=tp) from error

    def _write_before(self, line: int) -> None:
        """Append the records of lines before ``line`` from every open batch, in batch order."""
        kept = [part for batch in self._open.values() if (part := batch.before(line)) is not None]
        self._open = {}
        self._partitioner.seal_all()
        for batch in kept:
            try:
                self._append(batch)
            except _BatchRefused as again:
                raise type(again.error)(
                    f"line {again.line}: {again.error.message}; {self._records_written} record(s) were written "
                    f"(not all lines before line {line}: this batch of lines {again.batch.first_line}.."
                    f"{again.batch.last_line} was refused too)") from again.error

    def _explain(self, line: int, cut: int, message: str) -> str:
        return (f"line {line}: {message}; {self._records_written} record(s) from the lines before line {cut} "
                f"were written, none from line {cut} on")


def _culprit_line(batch: _Batch, error: TidelogError) -> int:
    """The line of the first record the log named in ``record_errors``, else the batch's first line."""
    record_errors = getattr(error, "record_errors", None)
    if record_errors:
        index = record_errors[0][0]
        lines = batch.lines()
        if 0 <= index < len(lines):
            return int(lines[index])
    return batch.first_line


def run_producer(producer: ConsoleProducer, stream: IO[bytes], chunk_bytes: int = CHUNK_BYTES,
                 linger_seconds: float = LINGER_SECONDS) -> None:
    """Feed ``stream`` to ``producer`` until its end (or Ctrl-C, after writing what was read)."""
    gc_was_enabled = gc.isenabled()
    gc.disable()  # millions of short-lived objects and no cycles: collections only cost time
    try:
        for chunk in iter_line_chunks(stream, chunk_bytes, linger_seconds):
            if chunk is IDLE:
                producer.flush()
            else:
                producer.send_lines(chunk)
        producer.close()
    except KeyboardInterrupt:
        producer.close()
        raise
    finally:
        if gc_was_enabled:
            gc.enable()


# --- the command ---------------------------------------------------------------------------------

def _plural(count: int, one: str, many: str | None = None) -> str:
    return f"{count} {one if count == 1 else many or one + 's'}"


def render_summary(topic: str, producer: ConsoleProducer, as_json: bool) -> str:
    """Per-partition offset ranges and the totals (text lines, or one JSON object)."""
    parts = sorted(producer.written.items())
    if as_json:
        return orjson.dumps({
            "topic": topic, "records": producer.records_written, "batches": producer.batches_written,
            "partitions": [{"partition": p, "first_offset": w.first_offset, "last_offset": w.last_offset,
                            "records": w.records, "batches": w.batches} for p, w in parts],
        }).decode()
    lines = [f"{topic}-{p} {w.first_offset}..{w.last_offset} ({_plural(w.records, 'record')})" for p, w in parts]
    lines.append(f"{_plural(producer.records_written, 'record')} written in "
                 f"{_plural(producer.batches_written, 'batch', 'batches')}")
    return "\n".join(lines)


@click.command()
@click.argument("topic")
@click.option("--partition", type=click.IntRange(min=0), help="Write every record to this partition "
              "(a JSON record's own \"partition\" field wins). Default: Kafka's default partitioner.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help="text: one value per line (or key SEP value); json: one record object per line.")
@click.option("--key-separator", help="text: split each line into key and value at the first SEP.")
@click.option("--compression", type=click.Choice(["none", "gzip", "snappy", "lz4", "zstd"]), default="none",
              show_default=True, help="Compression codec of the batches.")
@click.option("--batch-size", type=click.IntRange(min=1), default=DEFAULT_BATCH_SIZE, show_default=True,
              help="Records per batch (a batch is also cut before it passes max.message.bytes).")
@click.option("--encoding", type=click.Choice([UTF8, BASE64]), default=UTF8, show_default=True,
              help="base64: keys, values (and JSON header values) are base64 and decoded first.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as one JSON object.")
@bootstrap_option
@click.pass_context
def produce(ctx: click.Context, topic: str, partition: int | None, fmt: str, key_separator: str | None,
            compression: str, batch_size: int, encoding: str, as_json: bool, bootstrap_server: str | None) -> None:
    """Write records read from stdin to TOPIC (like kafka-console-producer)."""
    if key_separator is not None and (fmt != "text" or key_separator == ""):
        raise click.BadParameter("needs --format text and a non-empty separator", param_hint="--key-separator")
    options = ProduceOptions(partition, fmt, None if key_separator is None else key_separator.encode(),
                             CompressionType.from_name(compression), batch_size, encoding)
    if bootstrap_server is not None:
        from tidelog.cli.remote_produce import remote_target  # kafka-python loads only when used

        check_remote_usage(ctx)
        with remote_target(bootstrap_server) as target:
            _produce(target, topic, options, as_json)
        return
    with open_manager(ctx) as manager:
        _produce(manager, topic, options, as_json)


def _produce(target: LogManager | ProduceTarget, topic: str, options: ProduceOptions, as_json: bool) -> None:
    producer = ConsoleProducer(target, topic, options)
    try:
        run_producer(producer, binary(sys.stdin))
    finally:
        click.echo(render_summary(topic, producer, as_json))
