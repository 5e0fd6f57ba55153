"""``tidelog topics``: create, alter, list, describe and delete topics (kafka-topics)."""

from __future__ import annotations

import click

from tidelog.cli.context import open_manager
from tidelog.cli.tables import echo_json, echo_table, parse_key_values
from tidelog.manager import PartitionInfo, TopicDescription
from tidelog.manager.topics import COLLISION_WARNING, has_collision_chars

PARTITION_COLUMNS = ("Topic", "Partition", "LogDir", "LogStartOffset", "HighWatermark", "LogEndOffset",
                     "Size", "Segments", "Status")


@click.group()
def topics() -> None:
    """Create, alter, list, describe and delete topics."""


@topics.command()
@click.argument("name")
@click.option("--partitions", type=int, default=None, help="Partition count (default: the broker's num.partitions).")
@click.option("--config", "configs", multiple=True, metavar="KEY=VALUE", help="A topic config override; repeatable.")
@click.pass_context
def create(ctx: click.Context, name: str, partitions: int | None, configs: tuple[str, ...]) -> None:
    """Create topic NAME."""
    overrides = parse_key_values(configs, "--config")
    with open_manager(ctx) as manager:
        count = partitions if partitions is not None else manager.broker.num_partitions
        if has_collision_chars(name):
            click.echo(COLLISION_WARNING, err=True)
        manager.create_topic(name, count, overrides)
    click.echo(f"Created topic {name}.")


@topics.command()
@click.argument("name")
@click.option("--partitions", type=int, required=True, help="The new, larger partition count.")
@click.pass_context
def alter(ctx: click.Context, name: str, partitions: int) -> None:
    """Add partitions to topic NAME."""
    with open_manager(ctx) as manager:
        manager.create_partitions(name, partitions)
    click.echo(f"Topic {name} now has {partitions} partitions.")


@topics.command("list")
@click.option("--json", "as_json", is_flag=True, help="A JSON array of names.")
@click.pass_context
def list_topics(ctx: click.Context, as_json: bool) -> None:
    """List topic names."""
    with open_manager(ctx) as manager:
        names = manager.topics()
    if as_json:
        echo_json(names)
    else:
        for name in names:
            click.echo(name)


@topics.command()
@click.argument("name", required=False)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_context
def describe(ctx: click.Context, name: str | None, as_json: bool) -> None:
    """Describe topic NAME (every topic when omitted): id, overrides and each partition's offsets."""
    with open_manager(ctx) as manager:
        descriptions = [manager.describe_topic(n) for n in ([name] if name else manager.topics())]
    if as_json:
        echo_json([_topic_json(d) for d in descriptions])
        return
    for description in descriptions:
        configs = ",".join(f"{k}={v}" for k, v in sorted(description.configs.items()))
        click.echo(f"Topic: {description.name}\tTopicId: {description.topic_id}\t"
                   f"PartitionCount: {description.partition_count}\tReplicationFactor: 1\tConfigs: {configs}")
        echo_table(_partition_rows(description), PARTITION_COLUMNS)


@topics.command()
@click.argument("name")
@click.pass_context
def delete(ctx: click.Context, name: str) -> None:
    """Delete topic NAME (its dirs are renamed -delete and removed after log.segment.delete.delay.ms)."""
    with open_manager(ctx) as manager:
        manager.delete_topic(name)
    click.echo(f"Deleted topic {name}.")


def _partition_rows(description: TopicDescription) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = [_partition_json(p) for p in description.partitions]
    for aside in description.offline:
        tp = aside.topic_partition
        rows.append({"Topic": description.name, "Partition": tp.partition if tp else None,
                     "LogDir": str(aside.path.parent), "Status": f"offline: {aside.reason}"})
    return sorted(rows, key=lambda r: r["Partition"] if isinstance(r["Partition"], int) else -1)


def _partition_json(p: PartitionInfo) -> dict[str, object]:
    return {
        "Topic": p.topic_partition.topic, "Partition": p.topic_partition.partition, "LogDir": str(p.log_dir),
        "LogStartOffset": p.log_start_offset, "HighWatermark": p.high_watermark, "LogEndOffset": p.log_end_offset,
        "Size": p.size, "Segments": p.segments, "Status": "online",
    }


def _topic_json(d: TopicDescription) -> dict[str, object]:
    return {
        "topic": d.name, "topic_id": d.topic_id, "partition_count": d.partition_count, "configs": dict(d.configs),
        "partitions": [
            {"partition": p.topic_partition.partition, "log_dir": str(p.log_dir),
             "log_start_offset": p.log_start_offset, "high_watermark": p.high_watermark,
             "log_end_offset": p.log_end_offset, "size": p.size, "segments": p.segments}
            for p in d.partitions
        ],
        "offline": [{"partition": a.topic_partition.partition if a.topic_partition else None,
                     "path": str(a.path), "reason": a.reason} for a in d.offline],
    }
