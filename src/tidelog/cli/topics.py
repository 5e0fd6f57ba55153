"""``tidelog topics``: create, alter, list, describe and delete topics (kafka-topics).

Each subcommand takes ``--bootstrap-server`` to go through a broker instead of the log dir
(:mod:`tidelog.cli.remote_admin`); the output is the same, except that ``describe`` cannot know a
remote partition's segment count (empty / null).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from tidelog.cli.context import open_manager
from tidelog.cli.remote_options import bootstrap_option, check_remote_usage
from tidelog.cli.tables import echo_json, echo_table, parse_key_values
from tidelog.manager import TopicDescription
from tidelog.manager.registry_sync import unconfirmed_note
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
@bootstrap_option
@click.pass_context
def create(ctx: click.Context, name: str, partitions: int | None, configs: tuple[str, ...],
           bootstrap_server: str | None) -> None:
    """Create topic NAME."""
    overrides = parse_key_values(configs, "--config")
    if bootstrap_server is not None:
        from tidelog.cli import remote_admin

        check_remote_usage(ctx)
        _warn_collision(name)
        remote_admin.create_topic(bootstrap_server, name, partitions, overrides)
    else:
        with open_manager(ctx) as manager:
            count = partitions if partitions is not None else manager.broker.num_partitions
            _warn_collision(name)
            manager.create_topic(name, count, overrides)
    click.echo(f"Created topic {name}.")


def _warn_collision(name: str) -> None:
    if has_collision_chars(name):
        click.echo(COLLISION_WARNING, err=True)


@topics.command()
@click.argument("name")
@click.option("--partitions", type=int, required=True, help="The new, larger partition count.")
@bootstrap_option
@click.pass_context
def alter(ctx: click.Context, name: str, partitions: int, bootstrap_server: str | None) -> None:
    """Add partitions to topic NAME."""
    if bootstrap_server is not None:
        from tidelog.cli import remote_admin

        check_remote_usage(ctx)
        remote_admin.create_partitions(bootstrap_server, name, partitions)
    else:
        with open_manager(ctx) as manager:
            manager.create_partitions(name, partitions)
    click.echo(f"Topic {name} now has {partitions} partitions.")


@topics.command("list")
@click.option("--json", "as_json", is_flag=True, help="A JSON array of names.")
@bootstrap_option
@click.pass_context
def list_topics(ctx: click.Context, as_json: bool, bootstrap_server: str | None) -> None:
    """List topic names."""
    if bootstrap_server is not None:
        from tidelog.cli import remote_admin

        check_remote_usage(ctx)
        names = remote_admin.list_topics(bootstrap_server)
    else:
        with open_manager(ctx, read_only=True) as manager:
            names = manager.topics()
    if as_json:
        echo_json(names)
    else:
        for name in names:
            click.echo(name)


@topics.command()
@click.argument("name", required=False)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@bootstrap_option
@click.pass_context
def describe(ctx: click.Context, name: str | None, as_json: bool, bootstrap_server: str | None) -> None:
    """Describe topic NAME (every topic when omitted): id, overrides and each partition's offsets."""
    if bootstrap_server is not None:
        from tidelog.cli import remote_admin

        check_remote_usage(ctx)
        documents = remote_admin.describe_topics(bootstrap_server, name)
    else:
        with open_manager(ctx, read_only=True) as manager:
            documents = [_topic_json(manager.describe_topic(n)) for n in ([name] if name else manager.topics())]
    if as_json:
        echo_json(documents)
        return
    for document in documents:
        configs = ",".join(f"{k}={v}" for k, v in sorted(document["configs"].items()))
        click.echo(f"Topic: {document['topic']}\tTopicId: {document['topic_id']}\t"
                   f"PartitionCount: {document['partition_count']}\tReplicationFactor: 1\tConfigs: {configs}")
        if document.get("configs_unconfirmed"):
            click.echo(f"WARNING: {unconfirmed_note(document['topic'])}")
        echo_table(_partition_rows(document), PARTITION_COLUMNS)


@topics.command("confirm-configs")
@click.argument("names", nargs=-1)
@click.option("--all", "every", is_flag=True, help="Every topic whose configs are unconfirmed.")
@click.pass_context
def confirm_configs(ctx: click.Context, names: tuple[str, ...], every: bool) -> None:
    """Vouch for the configs of topics NAMES whose registry entry was lost: retention and cleaning,
    paused until then, resume with the configs `topics describe` shows (set the right ones first
    with `tidelog configs alter`). Local log dir only."""
    if not names and not every:
        raise click.UsageError("name a topic, or pass --all")
    with open_manager(ctx) as manager:
        chosen = list(names) or [n for n in manager.topics() if manager.describe_topic(n).configs_unconfirmed]
        for name in chosen:
            configs = ",".join(f"{k}={v}" for k, v in sorted(manager.topic_overrides(name).items()))
            if manager.confirm_topic_configs(name):
                click.echo(f"Confirmed the configs of topic {name} ({configs or 'the broker defaults'}): "
                           "retention and cleaning resume.")
            else:
                click.echo(f"Topic {name}: its configs were not unconfirmed; nothing changed.")


@topics.command()
@click.argument("name")
@bootstrap_option
@click.pass_context
def delete(ctx: click.Context, name: str, bootstrap_server: str | None) -> None:
    """Delete topic NAME (its dirs are renamed -delete and removed after log.segment.delete.delay.ms)."""
    if bootstrap_server is not None:
        from tidelog.cli import remote_admin

        check_remote_usage(ctx)
        remote_admin.delete_topic(bootstrap_server, name)
    else:
        with open_manager(ctx) as manager:
            manager.delete_topic(name)
    click.echo(f"Deleted topic {name}.")


def _partition_rows(document: dict[str, Any]) -> list[dict[str, object]]:
    """The table rows of one ``describe --json`` document: online partitions, then offline ones, by partition."""
    name = document["topic"]
    rows: list[dict[str, object]] = [
        {"Topic": name, "Partition": p["partition"], "LogDir": p["log_dir"], "LogStartOffset": p["log_start_offset"],
         "HighWatermark": p["high_watermark"], "LogEndOffset": p["log_end_offset"], "Size": p["size"],
         "Segments": p["segments"], "Status": "online"}
        for p in document["partitions"]]
    for aside in document["offline"]:
        rows.append({"Topic": name, "Partition": aside["partition"],
                     "LogDir": str(Path(aside["path"]).parent) if aside["path"] else None,
                     "Status": f"offline: {aside['reason']}"})
    return sorted(rows, key=lambda r: r["Partition"] if isinstance(r["Partition"], int) else -1)


def _topic_json(d: TopicDescription) -> dict[str, object]:
    return {
        "topic": d.name, "topic_id": d.topic_id, "partition_count": d.partition_count, "configs": dict(d.configs),
        "configs_unconfirmed": d.configs_unconfirmed,
        "partitions": [
            {"partition": p.topic_partition.partition, "log_dir": str(p.log_dir),
             "log_start_offset": p.log_start_offset, "high_watermark": p.high_watermark,
             "log_end_offset": p.log_end_offset, "size": p.size, "segments": p.segments}
            for p in d.partitions
        ],
        "offline": [{"partition": a.topic_partition.partition if a.topic_partition else None,
                     "path": str(a.path), "reason": a.reason} for a in d.offline],
    }
