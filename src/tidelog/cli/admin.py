"""``tidelog delete-records`` and ``tidelog log-dirs`` (kafka-delete-records, kafka-log-dirs)."""

from __future__ import annotations

from typing import Any

import click

from tidelog.cli.context import open_manager
from tidelog.cli.remote_options import bootstrap_option, check_remote_usage
from tidelog.cli.tables import echo_json, echo_table
from tidelog.retention import format_bytes
from tidelog.topic_partition import TopicPartition


@click.command("delete-records")
@click.argument("topic")
@click.option("--partition", type=int, required=True, help="The partition.")
@click.option("--offset", type=int, required=True, help="New log start offset (-1: the high watermark).")
@bootstrap_option
@click.pass_context
def delete_records(ctx: click.Context, topic: str, partition: int, offset: int, bootstrap_server: str | None) -> None:
    """Delete records of TOPIC's PARTITION below OFFSET (moves the log start offset; segments wholly
    below it go at the next retention pass). With --bootstrap-server: the broker's DeleteRecords."""
    if bootstrap_server is not None:
        from tidelog.cli import remote_admin

        check_remote_usage(ctx)
        low_watermark = remote_admin.delete_records(bootstrap_server, topic, partition, offset)
    else:
        with open_manager(ctx) as manager:
            low_watermark = manager.delete_records(TopicPartition(topic, partition), offset)
    click.echo(f"partition: {topic}-{partition}\tlow_watermark: {low_watermark}")


@click.command("log-dirs")
@click.option("--topic", help="Only this topic's partitions.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@bootstrap_option
@click.pass_context
def log_dirs(ctx: click.Context, topic: str | None, as_json: bool, bootstrap_server: str | None) -> None:
    """Sizes, segment counts and offsets of every partition, per log dir; set-aside dirs and why.
    With --bootstrap-server: the broker's DescribeLogDirs (sizes only), offline dirs marked.

    JSON keys are kafka-log-dirs' (logDir, partition, size) and, where it has none, the names of
    Kafka's Log gauges that `tidelog metrics` serves (numLogSegments, logStartOffset, logEndOffset)."""
    if bootstrap_server is not None:
        from tidelog.cli import remote_admin

        check_remote_usage(ctx)
        _show_log_dirs(remote_admin.describe_log_dirs(bootstrap_server, topic), as_json)
        return
    with open_manager(ctx, read_only=True) as manager:
        infos = manager.log_dirs()
    documents = []
    for info in infos:
        partitions = [p for p in info.partitions if topic is None or p.topic_partition.topic == topic]
        documents.append({
            "logDir": str(info.path),
            "size": sum(p.size for p in partitions),
            "partitions": [{"partition": str(p.topic_partition), "size": p.size, "numLogSegments": p.segments,
                            "logStartOffset": p.log_start_offset, "logEndOffset": p.log_end_offset,
                            "highWatermark": p.high_watermark} for p in partitions],
            "setAside": [{"path": str(a.path), "reason": a.reason} for a in info.set_aside],
            "offline": None if info.offline is None else info.offline.describe(),
        })
    _show_log_dirs(documents, as_json)


def _show_log_dirs(documents: list[dict[str, Any]], as_json: bool) -> None:
    if as_json:
        echo_json(documents)
        return
    for document in documents:
        if document["offline"] is not None:
            click.echo(f"Log dir {document['logDir']}: OFFLINE ({document['offline']})")
            continue
        click.echo(f"Log dir {document['logDir']}: {format_bytes(document['size'])} in "
                   f"{len(document['partitions'])} partition(s)")
        rows = [{**p, "size": format_bytes(p["size"])} for p in document["partitions"]]
        if rows:
            echo_table(rows, ("partition", "size", "numLogSegments", "logStartOffset", "logEndOffset", "highWatermark"))
        for aside in document["setAside"]:
            click.echo(f"  set aside: {aside['path']}: {aside['reason']}")
