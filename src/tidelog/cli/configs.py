"""``tidelog configs``: describe and alter a topic's configs (kafka-configs --entity-type topics).

Both subcommands take ``--bootstrap-server`` to go through a broker (DescribeConfigs,
IncrementalAlterConfigs: :mod:`tidelog.cli.remote_admin`), with the same output.
"""

from __future__ import annotations

import click

from tidelog.cli.context import open_manager
from tidelog.cli.remote_options import bootstrap_option, check_remote_usage
from tidelog.cli.tables import echo_json, echo_table, parse_key_values
from tidelog.storage.config import ConfigSource, describe as describe_config


@click.group()
def configs() -> None:
    """Describe and alter topic configs."""


@configs.command()
@click.argument("topic")
@click.option("--all", "show_all", is_flag=True, help="Every config with its source, not only the overrides.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@bootstrap_option
@click.pass_context
def describe(ctx: click.Context, topic: str, show_all: bool, as_json: bool, bootstrap_server: str | None) -> None:
    """Show TOPIC's config overrides (with --all: every effective value and where it comes from)."""
    if bootstrap_server is not None:
        from tidelog.cli import remote_admin

        check_remote_usage(ctx)
        rows = remote_admin.describe_configs(bootstrap_server, topic)
    else:
        with open_manager(ctx, read_only=True) as manager:
            entries = describe_config(manager.topic_config(topic), manager.broker)
        rows = [{"Name": e.name, "Value": e.value, "Source": str(e.source),
                 "Synonyms": ", ".join(f"{s.source}:{s.name}={s.value}" for s in e.synonyms)} for e in entries]
    if not show_all:
        rows = [row for row in rows if row["Source"] == ConfigSource.TOPIC_CONFIG]
    if as_json:
        echo_json({"topic": topic, "configs": rows})
        return
    click.echo(f"{'All' if show_all else 'Dynamic'} configs for topic {topic} are:")
    if rows:
        echo_table(rows, ("Name", "Value", "Source", "Synonyms") if show_all else ("Name", "Value"))


@configs.command()
@click.argument("topic")
@click.option("--set", "to_set", multiple=True, metavar="KEY=VALUE", help="Set an override; repeatable.")
@click.option("--delete", "to_delete", multiple=True, metavar="KEY", help="Remove an override; repeatable.")
@bootstrap_option
@click.pass_context
def alter(ctx: click.Context, topic: str, to_set: tuple[str, ...], to_delete: tuple[str, ...],
          bootstrap_server: str | None) -> None:
    """Set and/or remove TOPIC's overrides; all are validated before any is written."""
    if not to_set and not to_delete:
        raise click.UsageError("nothing to alter: give --set KEY=VALUE and/or --delete KEY")
    changes = parse_key_values(to_set, "--set")
    if bootstrap_server is not None:
        from tidelog.cli import remote_admin

        check_remote_usage(ctx)
        remote_admin.alter_configs(bootstrap_server, topic, changes, to_delete)
    else:
        with open_manager(ctx) as manager:
            manager.alter_topic_config(topic, changes, to_delete)
    click.echo(f"Completed updating config for topic {topic}.")
