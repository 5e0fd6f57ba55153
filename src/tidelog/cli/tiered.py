"""``tidelog tiered status`` and ``tidelog tiered copy``: the remote tier of tiered topics
(``remote.storage.enable``), with the broker's ``remote.log.storage.*`` settings (``--override`` or
``--config``). ``status`` shows per partition the local and remote ranges and bytes, the copy lag
and the last error; ``copy`` runs one copy pass now, as ``tidelog serve`` does every
``remote.log.manager.task.interval.ms``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

import click

from tidelog.cli.context import open_manager
from tidelog.cli.tables import echo_json, echo_table
from tidelog.errors import ConfigError
from tidelog.manager import LogManager
from tidelog.manager.remote_tier import RemoteTier, TieredPartitionStatus
from tidelog.retention import format_bytes

COLUMNS = ("partition", "log start", "local start", "log end", "remote up to", "remote segments", "remote bytes",
           "copy lag", "last error")


@click.group()
def tiered() -> None:
    """The remote tier of tiered topics (remote.storage.enable)."""


@tiered.command()
@click.argument("topic", required=False)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_context
def status(ctx: click.Context, topic: str | None, as_json: bool) -> None:
    """Per tiered partition (of TOPIC): local and remote ranges and bytes, copy lag, last error."""
    with open_manager(ctx, read_only=True) as manager:
        remote = _remote_tier(manager)
        remote.refresh(topic)
        rows = remote.status(topic)
    _print(rows, as_json)


@tiered.command()
@click.option("--topic", help="Only this topic.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_context
def copy(ctx: click.Context, topic: str | None, as_json: bool) -> None:
    """One copy pass now: every sealed segment of each tiered partition (of --topic) that the
    remote tier does not hold yet, below the last stable offset; then the status."""
    with open_manager(ctx) as manager:
        remote = _remote_tier(manager)
        copied = remote.copy_pass(topic)
        rows = remote.status(topic)
    if not as_json:
        click.echo(f"copied {sum(copied.values())} segment(s) from {len(copied)} tiered partition(s)")
    _print(rows, as_json)


def _remote_tier(manager: LogManager) -> RemoteTier:
    if manager.remote_tier is None:
        raise ConfigError("the remote tier is off: set remote.log.storage.system.enable=true and "
                          "remote.log.storage.uri (e.g. --override remote.log.storage.uri=file:///path)",
                          config="remote.log.storage.system.enable")
    return manager.remote_tier


def _print(rows: Sequence[TieredPartitionStatus], as_json: bool) -> None:
    if as_json:
        echo_json([_json(row) for row in rows])
        return
    echo_table([_row(row) for row in rows], COLUMNS, title="tiered partitions")


def _json(row: TieredPartitionStatus) -> dict[str, Any]:
    out = asdict(row)
    out["topic_partition"] = str(row.topic_partition)
    return out


def _row(row: TieredPartitionStatus) -> dict[str, Any]:
    return {
        "partition": str(row.topic_partition), "log start": row.log_start_offset,
        "local start": row.local_log_start_offset, "log end": row.log_end_offset,
        "remote up to": row.highest_remote_offset if row.highest_remote_offset >= 0 else "-",
        "remote segments": row.remote_segments, "remote bytes": format_bytes(row.remote_bytes),
        "copy lag": f"{row.copy_lag_segments} ({format_bytes(row.copy_lag_bytes)})"
                    + ("" if row.copy_enabled else ", copy disabled"),
        "last error": row.last_error or "",
    }
