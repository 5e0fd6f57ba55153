"""``tidelog consume TOPIC``: print records up to the high watermark, like kafka-console-consumer.

There is no follow mode: the command prints what the partitions hold when it starts and exits,
then reports ``Processed a total of N messages`` on stderr, as the console consumer does.

Where it starts (kafka-console-consumer's rules, with ``auto.offset.reset`` = ``latest`` unless
``--from-beginning``):

* default: the latest offset, the high watermark: nothing already written is printed;
* ``--from-beginning``: the log start offset of every partition;
* ``--offset N`` (needs ``--partition``; also ``earliest``/``latest``): N; an offset outside
  [log start offset, log end offset] is reset to the latest offset, as the console consumer's
  ``auto.offset.reset=latest`` does, with a note on stderr;
* ``--timestamp MS``: the first offset whose record timestamp is >= MS (ListOffsets by time); a
  partition with no such record starts at the latest offset.

Without ``--partition`` every partition is read, one after the other in partition order
(Kafka interleaves partitions in no set order). Control batches (transaction markers) are
skipped, as consumers do; every batch's CRC is checked (``check.crcs``).

``--isolation-level`` (the console consumer's option): ``read_uncommitted`` (the default) prints
every data record up to the high watermark; ``read_committed`` stops at the last stable offset
and skips the records of aborted transactions, found in the segments' ``.txnindex`` as a broker
answers a read_committed fetch (:mod:`tidelog.storage.read_committed`); "latest" is then the
last stable offset. On a tiered topic, offsets below the local log start are read from the
remote tier through the manager's remote-read door (ranged reads, cached indexes), and
``--timestamp`` searches the remote segments there too. Output formats are in
:mod:`tidelog.cli.record_io`; a record the format cannot show (invalid UTF-8 in JSON) stops the
command with an error naming its offset, after the records before it were printed.

With ``--bootstrap-server`` the records come from a broker instead
(:mod:`tidelog.cli.remote_consume`): the same start rules (ListOffsets; by timestamp with
``offsets_for_times``), the same end (each partition's high watermark when the command started),
the same output.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Iterator
from typing import IO

import click

from tidelog.cli.context import open_manager
from tidelog.cli.record_io import BASE64, UTF8, RecordTuple, binary, format_json, format_text
from tidelog.cli.remote_options import bootstrap_option, check_remote_usage
from tidelog.errors import OffsetMovedToTieredStorageError, TidelogError
from tidelog.manager import LogManager, PartitionOffsets
from tidelog.records import iter_batches
from tidelog.records.record import TimestampType
from tidelog.storage.fetch_info import FetchIsolation
from tidelog.storage.read_committed import AbortedBatchFilter
from tidelog.topic_partition import TopicPartition

FETCH_MAX_BYTES = 1 << 20  # per read, as a consumer's max.partition.fetch.bytes
TIMESTAMP_TYPE_NAMES = {TimestampType.NO_TIMESTAMP: "NoTimestampType", TimestampType.CREATE_TIME: "CreateTime",
                        TimestampType.LOG_APPEND_TIME: "LogAppendTime"}
READ_UNCOMMITTED, READ_COMMITTED = "read_uncommitted", "read_committed"  # the console consumer's names


def start_offset(manager: LogManager, tp: TopicPartition, *, from_beginning: bool = False, offset: str | None = None,
                 timestamp: int | None = None, committed: bool = False) -> tuple[int, str | None]:
    """Where to start reading ``tp`` and, when the request was reset, a note saying why.
    ``committed``: read_committed, whose latest offset is the last stable offset."""
    now = manager.offsets(tp)
    latest = end_offset(now, committed)
    if from_beginning or offset == "earliest":
        return now.log_start_offset, None
    if timestamp is not None:
        found = manager.list_offsets(tp, timestamp)
        return (found.offset, None) if found is not None else (latest, None)
    if offset is None or offset == "latest":
        return latest, None
    return checked_offset(int(offset), now.log_start_offset, now.log_end_offset, latest, str(tp))


def end_offset(offsets: PartitionOffsets, committed: bool) -> int:
    """Where a read stops: the last stable offset for read_committed, else the high watermark."""
    return offsets.last_stable_offset if committed else offsets.high_watermark


def checked_offset(wanted: int, log_start: int, log_end: int, latest: int, tp: str) -> tuple[int, str | None]:
    """``wanted`` when it is in [log_start, log_end]; else ``latest``, with a note saying why."""
    if log_start <= wanted <= log_end:
        return wanted, None
    return latest, (
        f"offset {wanted} is out of range [{log_start}, {log_end}] for {tp}: "
        f"starting at the latest offset {latest} (auto.offset.reset=latest, as kafka-console-consumer)")


def iter_records(manager: LogManager, tp: TopicPartition, start: int, committed: bool = False
                 ) -> Iterator[tuple[str, RecordTuple]]:
    """``(timestamp type name, (offset, timestamp, key, value, headers))`` of every data record of
    ``tp`` from ``start`` up to the high watermark (``committed``: the last stable offset, aborted
    transactions skipped) as it was when the iteration began."""
    end = end_offset(manager.offsets(tp), committed)
    isolation = FetchIsolation.TXN_COMMITTED if committed else FetchIsolation.HIGH_WATERMARK
    aborted = AbortedBatchFilter(manager.aborted_transactions(tp, start, end)) if committed else None
    offset = start
    while offset < end:
        batches = [batch for _, batch in iter_batches(_read(manager, tp, offset, isolation))]
        if not batches:
            return
        for batch in batches:
            if batch.next_offset <= offset:
                continue
            batch.ensure_valid()
            skipped = aborted is not None and aborted.skips(batch)
            if not batch.is_control and not skipped:
                kind = TIMESTAMP_TYPE_NAMES[batch.timestamp_type]
                for record in _tuples(batch):
                    if offset <= record[0] < end:
                        yield kind, record
            offset = batch.next_offset


def _read(manager: LogManager, tp: TopicPartition, offset: int, isolation: FetchIsolation) -> bytes:
    """Up to FETCH_MAX_BYTES of batches from ``offset``: from the local log, or from the remote tier
    when only it holds the offset (the broker's door, on its remote reader threads)."""
    try:
        return manager.read(tp, offset, FETCH_MAX_BYTES, isolation).records
    except OffsetMovedToTieredStorageError:  # raised again by fetch_remote without a remote tier
        return manager.fetch_remote(tp, offset, FETCH_MAX_BYTES, isolation).result().records


def _tuples(batch: object) -> Iterator[RecordTuple]:
    record_tuples = getattr(batch, "record_tuples", None)
    if record_tuples is not None:
        return record_tuples()  # type: ignore[no-any-return]
    return ((r.offset, r.timestamp, r.key, r.value, r.headers) for r in batch.records())  # type: ignore[attr-defined]


def _check_start_options(partition: int | None, from_beginning: bool, offset: str | None,
                         timestamp: int | None) -> None:
    if sum((from_beginning, offset is not None, timestamp is not None)) > 1:
        raise click.UsageError("--from-beginning, --offset and --timestamp cannot be specified together")
    if offset is not None and partition is None:
        raise click.UsageError("The partition is required when offset is specified.")
    if offset is not None and offset not in ("earliest", "latest") and not (offset.isdigit()):
        raise click.BadParameter(f"expected a non-negative offset, 'earliest' or 'latest', got {offset!r}",
                                 param_hint="--offset")


def _write(out: IO[bytes], lines: list[bytes]) -> bool:
    """Write; False when the reader went away (``consume | head``)."""
    try:
        out.write(b"".join(lines))
        return True
    except BrokenPipeError:
        _silence_stdout()
        return False


def _silence_stdout() -> None:
    """After EPIPE, point stdout at /dev/null so the interpreter's final flush does not fail."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


@click.command()
@click.argument("topic")
@click.option("--partition", type=click.IntRange(min=0), help="Read only this partition.")
@click.option("--from-beginning", is_flag=True, help="Start at the log start offset.")
@click.option("--offset", help="Start at this offset (or earliest/latest); needs --partition.")
@click.option("--timestamp", type=click.IntRange(min=0), metavar="MS",
              help="Start at the first record with a timestamp >= MS.")
@click.option("--max-messages", type=click.IntRange(min=0), help="Stop after this many records.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help="text: each value on its own line; json: one record object per line.")
@click.option("--encoding", type=click.Choice([UTF8, BASE64]), default=UTF8, show_default=True,
              help="How keys and values are shown: UTF-8 text, or base64 (for binary data).")
@click.option("--isolation-level", type=click.Choice([READ_UNCOMMITTED, READ_COMMITTED]), default=READ_UNCOMMITTED,
              show_default=True, help="read_committed: stop at the last stable offset and skip aborted transactions.")
@bootstrap_option
@click.pass_context
def consume(ctx: click.Context, topic: str, partition: int | None, from_beginning: bool, offset: str | None,
            timestamp: int | None, max_messages: int | None, fmt: str, encoding: str, isolation_level: str,
            bootstrap_server: str | None) -> None:
    """Print the records of TOPIC up to its high watermark (like kafka-console-consumer)."""
    _check_start_options(partition, from_beginning, offset, timestamp)
    out = binary(sys.stdout)
    printer = RecordPrinter(out, topic, fmt, encoding, max_messages)
    committed = isolation_level == READ_COMMITTED
    if bootstrap_server is not None:
        from tidelog.cli.remote_consume import consume_remote  # kafka-python loads only when used

        check_remote_usage(ctx)
        consume_remote(bootstrap_server, topic, partition, printer, from_beginning=from_beginning, offset=offset,
                       timestamp=timestamp, committed=committed)
    else:
        with open_manager(ctx, read_only=True) as manager:
            _consume_local(manager, topic, partition, printer, from_beginning, offset, timestamp, committed)
    out.flush()
    click.echo(f"Processed a total of {printer.count} messages", err=True)


def _consume_local(manager: LogManager, topic: str, partition: int | None, printer: RecordPrinter,
                   from_beginning: bool, offset: str | None, timestamp: int | None, committed: bool) -> None:
    partitions = manager.partitions(topic) if partition is None else [partition]
    tps = [TopicPartition(topic, p) for p in partitions]
    for tp in tps:  # every partition is live before anything is printed
        manager.offsets(tp)
    for tp in tps:
        start, note = start_offset(manager, tp, from_beginning=from_beginning, offset=offset, timestamp=timestamp,
                                   committed=committed)
        if note:
            click.echo(f"note: {note}", err=True)
        if not printer.print_partition(tp.partition, iter_records(manager, tp, start, committed)):
            break


class RecordPrinter:
    """Prints records in the chosen format, counting them, up to ``limit`` in all. Not thread-safe."""

    def __init__(self, out: IO[bytes], topic: str, fmt: str, encoding: str, limit: int | None) -> None:
        self.out, self.topic, self.fmt, self.encoding, self.limit = out, topic, fmt, encoding, limit
        self.count = 0

    def print_partition(self, partition: int, records: Iterable[tuple[str, RecordTuple]]) -> bool:
        """Print one partition's ``(timestamp type name, record)`` pairs; whether to go on (False
        once the limit is reached or the reader went away)."""
        self.count, more = _print_partition(self.out, self.topic, partition, records, self.fmt, self.encoding,
                                            self.count, self.limit)
        return more


def _print_partition(out: IO[bytes], topic: str, partition: int, records: Iterable[tuple[str, RecordTuple]],
                     fmt: str, encoding: str, count: int, limit: int | None) -> tuple[int, bool]:
    """Print one partition's records; ``(records printed so far, whether to go on)``."""
    lines: list[bytes] = []
    try:
        for kind, record in records:
            if limit is not None and count >= limit:
                break
            lines.append(format_json(topic, partition, kind, record, encoding) if fmt == "json"
                         else format_text(record, encoding))
            count += 1
            if len(lines) >= 1000:
                if not _write(out, lines):
                    return count, False
                lines = []
    except TidelogError:
        _write(out, lines)  # the records before the one that failed are printed too
        raise
    if not _write(out, lines):
        return count, False
    return count, limit is None or count < limit
