"""``tidelog dump FILE...``: print segment, index and checkpoint-free files like kafka-dump-log.

Lines follow kafka-dump-log's wording (``baseOffset: … lastOffset: … count: …``) so operators can
compare the two tools' output; ``--json`` emits one JSON object per batch, record or entry.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click

from tidelog.cli.progress import progress_bar
from tidelog.records import FileBatch
from tidelog.storage import files
from tidelog.storage.file_records import FileRecords
from tidelog.storage.verify import Problem, verify_offset_index, verify_time_index
from tidelog.storage.txn_index import TransactionIndex

LARGE = 64 << 20  # bytes of a .log; smaller dumps finish before a bar helps


@click.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path, exists=True, dir_okay=False))
@click.option("--deep", "deep", is_flag=True, help="Print every record, not just batch headers (--deep-iteration).")
@click.option("--print-data", is_flag=True, help="Include keys and values (implies --deep).")
@click.option("--verify-index", is_flag=True, help="Check index entries against the .log instead of printing them.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
def dump(paths: tuple[Path, ...], deep: bool, print_data: bool, verify_index: bool, as_json: bool) -> None:
    """Dump .log, .index, .timeindex and .txnindex files."""
    deep = deep or print_data
    for path in paths:
        if not as_json:
            click.echo(f"Dumping {path}")
        size = path.stat().st_size
        with progress_bar(f"dumping {path.name}", in_bytes=True, threshold=LARGE) as on_progress:
            for item in _dump_file(path, deep, print_data, verify_index):
                click.echo(json.dumps(item) if as_json else _text(item))
                if on_progress is not None and item.get("kind") == "batch":
                    on_progress(item["position"] + item["size"], size)


def _dump_file(path: Path, deep: bool, print_data: bool, verify_index: bool) -> Iterator[dict[str, Any]]:
    name = files.strip_temporary_suffix(path.name)
    if name.endswith(files.LOG_SUFFIX):
        yield from _dump_log(path, deep, print_data)
    elif name.endswith((files.INDEX_SUFFIX, files.TIME_INDEX_SUFFIX)) and verify_index:
        yield from _verify_index(path, name)
    elif name.endswith(files.INDEX_SUFFIX):
        yield from _dump_entries(path, ">ii", lambda base, e: {"offset": base + e[0], "position": e[1]})
    elif name.endswith(files.TIME_INDEX_SUFFIX):
        yield from _dump_entries(path, ">qi", lambda base, e: {"timestamp": e[0], "offset": base + e[1]})
    elif name.endswith(files.TXN_INDEX_SUFFIX):
        yield from _dump_txn_index(path)
    else:
        raise click.UsageError(f"{path}: not a .log, .index, .timeindex or .txnindex file")


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
        "timestampType": _timestamp_type(batch),
        "keySize": -1 if record.key is None else len(record.key),
        "valueSize": -1 if record.value is None else len(record.value),
        "headerKeys": [h[0] for h in record.headers],
    }
    if print_data:
        item["key"] = _text_or_hex(record.key)
        item["payload"] = _text_or_hex(record.value)
    return item


def _text_or_hex(data: bytes | None) -> str | None:
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return "0x" + data.hex()


def _dump_entries(path: Path, layout: str, render: Any) -> Iterator[dict[str, Any]]:
    base = files.offset_from_file_name(path.name)
    data = path.read_bytes()
    size = struct.calcsize(layout)
    for i, entry in enumerate(struct.iter_unpack(layout, data[: len(data) // size * size])):
        if i > 0 and entry == (0, 0):
            break  # preallocated tail of an index that was never trimmed
        yield {"kind": "entry", **render(base, entry)}


def _dump_txn_index(path: Path) -> Iterator[dict[str, Any]]:
    index = TransactionIndex(path, files.offset_from_file_name(path.name))
    try:
        for txn in index.all_aborted_txns():
            yield {"kind": "aborted_txn", "producerId": txn.producer_id, "firstOffset": txn.first_offset,
                   "lastOffset": txn.last_offset, "lastStableOffset": txn.last_stable_offset}
    finally:
        index.close()


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


def _text(item: dict[str, Any]) -> str:
    kind = item["kind"]
    if kind == "header":
        return f"Log starting offset: {item['log_starting_offset']}"
    if kind == "record":
        fields = {k: v for k, v in item.items() if k not in ("kind", "timestampType", "timestamp")}
        return f"| offset: {fields.pop('offset')} {item['timestampType']}: {item['timestamp']} " + _pairs(fields)
    if kind == "batch":
        fields = {k: v for k, v in item.items() if k not in ("kind", "timestampType", "maxTimestamp")}
        fields[item["timestampType"]] = item["maxTimestamp"]
        return _pairs(fields)
    return _pairs({k: v for k, v in item.items() if k != "kind"})


def _pairs(fields: dict[str, Any]) -> str:
    def show(v: Any) -> str:
        if isinstance(v, bool):
            return str(v).lower()
        return "null" if v is None else str(v)
    return " ".join(f"{k}: {show(v)}" for k, v in fields.items())
