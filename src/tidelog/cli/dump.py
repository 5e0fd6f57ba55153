"""``tidelog dump FILE...``: print segment, index, producer-snapshot and transaction-index files
like kafka-dump-log (Kafka's ``DumpLogSegments``).

Text lines are kafka-dump-log's, field for field, so the two tools' output can be compared (and
parsed alike: ``kafka_oracle/dump.py``)::

    Dumping <path>
    Log starting offset: <n>                                          .log
    baseOffset: .. lastOffset: .. count: .. baseSequence: .. lastSequence: .. producerId: ..
      producerEpoch: .. partitionLeaderEpoch: .. isTransactional: .. isControl: ..
      deleteHorizonMs: OptionalLong[<ms>]|OptionalLong.empty position: .. <TimestampType>: <max>
      size: .. magic: 2 compresscodec: .. crc: .. isvalid: ..
    offset: <last> position: .. <TimestampType>: .. size: .. magic: 0|1 compresscodec: .. crc: ..
      isvalid: ..                                                     a v0/v1 entry
    | offset: .. <TimestampType>: .. keySize: .. valueSize: .. sequence: .. headerKeys: [k1,k2]
      [endTxnMarker: COMMIT|ABORT coordinatorEpoch: ..] [controlType: <TYPE>(<id>)]
      [key: ..] [payload: ..]                                         --deep / --print-data
    offset: .. position: ..                                           .index
    timestamp: .. offset: ..                                          .timeindex
    version: 0 producerId: .. firstOffset: .. lastOffset: .. lastStableOffset: ..   .txnindex
    producerId: .. producerEpoch: .. coordinatorEpoch: .. currentTxnFirstOffset: OptionalLong[..]
      lastTimestamp: .. [firstSequence: .. lastSequence: .. lastOffset: .. offsetDelta: ..
      timestamp: ..]                                                  .snapshot (producer state)

A record's ``sequence`` is its batch's base sequence plus its offset delta, wrapping past
2^31-1 as producers do (-1 without a producer). ``--json`` prints one object per line, each with
the ``file`` it comes from; each file starts with ``{"kind": "file", ...}``. A file that cannot be
read (a corrupt snapshot) prints a ``problem`` and the next files are dumped. Keys and payloads
that are not UTF-8 print as ``0x`` and their hex (Kafka prints replacement characters).
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click

from tidelog.cli.progress import progress_bar
from tidelog.errors import TidelogError
from tidelog.records import NO_SEQUENCE, FileBatch
from tidelog.records.batch import increment_sequence
from tidelog.records.control import ControlRecordType, EndTransactionMarker, control_record_type
from tidelog.records.layout import OFFSET_INDEX_ENTRY, TIME_INDEX_ENTRY
from tidelog.storage import files
from tidelog.storage.file_records import FileRecords
from tidelog.storage.producer_snapshot import SnapshotEntry, read_snapshot
from tidelog.storage.producer_state import decrement_sequence
from tidelog.storage.verify import Problem, verify_offset_index, verify_time_index
from tidelog.storage.txn_index import CURRENT_VERSION, TransactionIndex

LARGE = 64 << 20  # bytes of a .log; smaller dumps finish before a bar helps
SUFFIXES = (files.LOG_SUFFIX, files.INDEX_SUFFIX, files.TIME_INDEX_SUFFIX, files.TXN_INDEX_SUFFIX,
            files.PRODUCER_SNAPSHOT_SUFFIX)


@click.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path, exists=True, dir_okay=False))
@click.option("--deep", "deep", is_flag=True, help="Print every record, not just batch headers (--deep-iteration).")
@click.option("--print-data", is_flag=True, help="Include keys and values (implies --deep).")
@click.option("--verify-index", is_flag=True, help="Check index entries against the .log instead of printing them.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line, each naming its file.")
def dump(paths: tuple[Path, ...], deep: bool, print_data: bool, verify_index: bool, as_json: bool) -> None:
    """Dump .log, .index, .timeindex, .txnindex and .snapshot files."""
    deep = deep or print_data
    for path in paths:
        _check_kind(path)
    for path in paths:
        size = path.stat().st_size
        click.echo(json.dumps({"kind": "file", "file": str(path), "size": size}) if as_json else f"Dumping {path}")
        with progress_bar(f"dumping {path.name}", in_bytes=True, threshold=LARGE) as on_progress:
            for item in _dump_file(path, deep, print_data, verify_index):
                click.echo(json.dumps({**item, "file": str(path)}) if as_json else _text(item, print_data))
                if on_progress is not None and item.get("kind") == "batch":
                    on_progress(item["position"] + item["size"], size)


def _check_kind(path: Path) -> None:
    if not files.strip_temporary_suffix(path.name).endswith(SUFFIXES):
        raise click.UsageError(f"{path}: not a .log, .index, .timeindex, .txnindex or .snapshot file")


def _dump_file(path: Path, deep: bool, print_data: bool, verify_index: bool) -> Iterator[dict[str, Any]]:
    name = files.strip_temporary_suffix(path.name)
    try:
        if name.endswith(files.LOG_SUFFIX):
            yield from _dump_log(path, deep, print_data)
        elif name.endswith((files.INDEX_SUFFIX, files.TIME_INDEX_SUFFIX)) and verify_index:
            yield from _verify_index(path, name)
        elif name.endswith(files.INDEX_SUFFIX):
            yield from _dump_entries(path, OFFSET_INDEX_ENTRY, lambda base, e: {"offset": base + e[0], "position": e[1]},
                                     say_empty=True)
        elif name.endswith(files.TIME_INDEX_SUFFIX):
            yield from _dump_entries(path, TIME_INDEX_ENTRY, lambda base, e: {"timestamp": e[0], "offset": base + e[1]})
        elif name.endswith(files.TXN_INDEX_SUFFIX):
            yield from _dump_txn_index(path)
        else:
            yield from _dump_snapshot(path)
    except TidelogError as e:  # as kafka-dump-log: say what failed, go on with the next file
        yield {"kind": "problem", "message": str(e)}


def _dump_log(path: Path, deep: bool, print_data: bool) -> Iterator[dict[str, Any]]:
    records = FileRecords.open(path, file_already_exists=True)
    try:
        yield {"kind": "header", "log_starting_offset": files.offset_from_file_name(path.name)}
        for position, batch in records.batches():
            yield _batch_item(position, batch)
            if deep:
                for record in batch.records():
                    yield _record_item(batch, record, print_data)
    finally:
        records.close()


def _batch_item(position: int, batch: FileBatch) -> dict[str, Any]:
    return {
        "kind": "batch", "baseOffset": batch.base_offset, "lastOffset": batch.last_offset,
        "count": batch.records_count if batch.magic >= 2 else None,
        "baseSequence": batch.base_sequence, "lastSequence": batch.last_sequence,
        "producerId": batch.producer_id, "producerEpoch": batch.producer_epoch,
        "partitionLeaderEpoch": batch.partition_leader_epoch, "isTransactional": batch.is_transactional,
        "isControl": batch.is_control, "deleteHorizonMs": batch.delete_horizon_ms, "position": position,
        "timestampType": _timestamp_type(batch), "maxTimestamp": batch.max_timestamp,
        "size": batch.size_in_bytes, "magic": batch.magic, "compresscodec": batch.compression.name.lower(),
        "crc": batch.crc, "isvalid": batch.is_valid(),
    }


def _timestamp_type(batch: FileBatch) -> str:
    return "LogAppendTime" if int(batch.timestamp_type) == 1 else "CreateTime"


def _record_item(batch: FileBatch, record: Any, print_data: bool) -> dict[str, Any]:
    item: dict[str, Any] = {
        "kind": "record", "offset": record.offset, "timestamp": record.timestamp,
        "timestampType": _timestamp_type(batch), "magic": batch.magic,
        "keySize": -1 if record.key is None else len(record.key),
        "valueSize": -1 if record.value is None else len(record.value),
    }
    if batch.magic >= 2:
        item["sequence"] = record_sequence(batch.base_sequence, record.offset - batch.base_offset)
        item["headerKeys"] = [h[0] for h in record.headers]
    if batch.is_control:
        item.update(_control_fields(record))
    elif print_data:
        item["key"] = _text_or_hex(record.key)
        item["payload"] = _text_or_hex(record.value)
    return item


def record_sequence(base_sequence: int, offset_delta: int) -> int:
    """The base sequence plus the delta, wrapping past 2^31-1 to 0; -1 (no sequence) stays -1."""
    return NO_SEQUENCE if base_sequence == NO_SEQUENCE else increment_sequence(base_sequence, offset_delta)


def _control_fields(record: Any) -> dict[str, Any]:
    """``endTxnMarker`` and ``coordinatorEpoch`` of a COMMIT/ABORT record, else ``controlType``."""
    try:
        control_type = control_record_type(record.key)
        if control_type in (ControlRecordType.ABORT, ControlRecordType.COMMIT):
            marker = EndTransactionMarker.decode(record.value)
            return {"endTxnMarker": control_type.name, "coordinatorEpoch": marker.coordinator_epoch}
        return {"controlType": f"{control_type.name}({int(control_type)})"}
    except TidelogError as e:
        return {"controlType": f"unreadable ({e})"}


def _text_or_hex(data: bytes | None) -> str | None:
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return "0x" + data.hex()


def _dump_entries(path: Path, layout: struct.Struct, render: Any, say_empty: bool = False) -> Iterator[dict[str, Any]]:
    """The entries of an index file; ``say_empty``: one ``empty`` item when there is none
    (kafka-dump-log says so of an offset index)."""
    base = files.offset_from_file_name(path.name)
    data = path.read_bytes()
    size = layout.size
    found = False
    for i, entry in enumerate(layout.iter_unpack(data[: len(data) // size * size])):
        if i > 0 and entry == (0, 0):
            break  # preallocated tail of an index that was never trimmed
        found = True
        yield {"kind": "entry", **render(base, entry)}
    if say_empty and not found:
        yield {"kind": "empty", "message": f"{path} is empty."}


def _dump_txn_index(path: Path) -> Iterator[dict[str, Any]]:
    index = TransactionIndex(path, files.offset_from_file_name(path.name))
    try:
        for txn in index.all_aborted_txns():
            yield {"kind": "aborted_txn", "version": CURRENT_VERSION, "producerId": txn.producer_id,
                   "firstOffset": txn.first_offset,
                   "lastOffset": txn.last_offset, "lastStableOffset": txn.last_stable_offset}
    finally:
        index.close()


def _dump_snapshot(path: Path) -> Iterator[dict[str, Any]]:
    for entry in read_snapshot(path):
        yield _producer_item(entry)


def _producer_item(e: SnapshotEntry) -> dict[str, Any]:
    """One producer of a snapshot as Kafka's ``ProducerStateEntry`` shows it: the last batch's
    fields only when it has one (a last offset >= 0); its first sequence is derived."""
    item: dict[str, Any] = {
        "kind": "producer", "producerId": e.producer_id, "producerEpoch": e.producer_epoch,
        "coordinatorEpoch": e.coordinator_epoch,
        "currentTxnFirstOffset": e.current_txn_first_offset if e.current_txn_first_offset >= 0 else None,
        "lastTimestamp": e.timestamp,
    }
    if e.last_offset >= 0:
        item.update({"firstSequence": decrement_sequence(e.last_sequence, e.offset_delta), "lastSequence": e.last_sequence,
                     "lastOffset": e.last_offset, "offsetDelta": e.offset_delta, "timestamp": e.timestamp})
    return item


def _verify_index(path: Path, name: str) -> Iterator[dict[str, Any]]:
    problems: list[Problem] = []
    if name.endswith(files.INDEX_SUFFIX):
        verify_offset_index(path, problems)
    else:
        verify_time_index(path, problems)
    for problem in problems:
        yield {"kind": "problem", "position": problem.position, "message": problem.message}
    if not problems:
        yield {"kind": "ok", "message": "index is consistent with its log"}


def _text(item: dict[str, Any], print_data: bool) -> str:
    """kafka-dump-log's line for ``item`` (module doc)."""
    kind = item["kind"]
    if kind == "header":
        return f"Log starting offset: {item['log_starting_offset']}"
    if kind == "batch":
        return _batch_text(item)
    if kind == "record":
        return _record_text(item)
    if kind == "empty":
        return str(item["message"])
    if kind == "producer":
        fields = {k: v for k, v in item.items() if k != "kind"}
        fields["currentTxnFirstOffset"] = _optional_long(fields["currentTxnFirstOffset"])
        return _pairs(fields)
    return _pairs({k: v for k, v in item.items() if k != "kind"})


def _batch_text(item: dict[str, Any]) -> str:
    tail = {"position": item["position"], item["timestampType"]: item["maxTimestamp"], "size": item["size"],
            "magic": item["magic"], "compresscodec": item["compresscodec"], "crc": item["crc"],
            "isvalid": item["isvalid"]}
    if item["magic"] < 2:
        return _pairs({"offset": item["lastOffset"], **tail})
    head = {k: item[k] for k in ("baseOffset", "lastOffset", "count", "baseSequence", "lastSequence", "producerId",
                                 "producerEpoch", "partitionLeaderEpoch", "isTransactional", "isControl")}
    return _pairs({**head, "deleteHorizonMs": _optional_long(item["deleteHorizonMs"]), **tail})


def _record_text(item: dict[str, Any]) -> str:
    fields: dict[str, Any] = {"offset": item["offset"], item["timestampType"]: item["timestamp"],
                              "keySize": item["keySize"], "valueSize": item["valueSize"]}
    if "sequence" in item:
        fields["sequence"] = item["sequence"]
        fields["headerKeys"] = "[" + ",".join(item["headerKeys"]) + "]"
    for name in ("endTxnMarker", "coordinatorEpoch", "controlType"):
        if name in item:
            fields[name] = item[name]
    for name in ("key", "payload"):  # data records with --print-data; null ones are not printed
        if item.get(name) is not None:
            fields[name] = item[name]
    return "| " + _pairs(fields)


def _optional_long(value: int | None) -> str:
    """Java's ``OptionalLong.toString``."""
    return "OptionalLong.empty" if value is None else f"OptionalLong[{value}]"


def _pairs(fields: dict[str, Any]) -> str:
    def show(v: Any) -> str:
        if isinstance(v, bool):
            return str(v).lower()
        return "null" if v is None else str(v)
    return " ".join(f"{k}: {show(v)}" for k, v in fields.items())
