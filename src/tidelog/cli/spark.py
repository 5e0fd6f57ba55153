"""``tidelog spark``: Spark jobs over a data dir (needs the ``spark`` extra: pyspark, pyarrow).

``tidelog spark report [--master URL] [--png FILE] [--json]``: every partition's size, records,
timestamps, dirty ratio and what retention and the cleaner would do now
(:mod:`tidelog.spark.report`), as a table, JSON, and optionally a PNG chart. With the remote tier
on in the broker config (``remote.log.storage.system.enable``, ``remote.log.storage.uri``,
``rsm.config.*``), tiered partitions also show their remote tier (segments, bytes, offset range,
read from the store's metadata; the table adds those columns when any partition is tiered).
Read-only: it takes no lock, so it runs while ``tidelog serve`` owns the dir.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from tidelog.cli.context import log_dirs
from tidelog.cli.tables import echo_json, echo_table
from tidelog.storage.config import BrokerConfig

DEFAULT_MASTER = "local[2]"
_TABLE_COLUMNS = ("topic", "partition", "segments", "size_bytes", "records", "log_start_offset", "end_offset",
                  "oldest_timestamp", "cleanup_policy", "dirty_ratio", "cleanable", "deletable_segments",
                  "deletable_bytes")
_REMOTE_COLUMNS = ("remote_segments", "remote_bytes", "remote_start_offset", "remote_end_offset", "remote_error")


@click.group()
def spark() -> None:
    """Spark jobs over the data dir (reports; compaction is `tidelog clean run --engine spark`)."""


@spark.command()
@click.option("--master", default=DEFAULT_MASTER, show_default=True, help="Spark master URL.")
@click.option("--png", "png", type=click.Path(dir_okay=False, path_type=Path), help="Also write a chart here.")
@click.option("--json", "as_json", is_flag=True, help="One JSON document instead of a table.")
@click.pass_context
def report(ctx: click.Context, master: str, png: Path | None, as_json: bool) -> None:
    """Every partition: size, records, timestamps, dirty ratio, retention and cleaning eligibility;
    for tiered topics also the remote tier (segments, bytes, offsets) from the store's metadata."""
    try:
        from tidelog.spark.report import partition_report, plot_report
        from tidelog.spark.session import local_session
    except ImportError as e:
        raise click.ClickException(f"tidelog spark needs the spark extra (pip install 'tidelog[spark]'): {e}") from e
    broker: BrokerConfig = ctx.find_root().obj["broker"]
    session = local_session(master, app_name="tidelog spark report")
    session.sparkContext.setLogLevel("ERROR")
    rows = [_plain(r.asDict()) for r in partition_report(session, log_dirs(ctx), broker=broker)
            .orderBy("topic", "partition").collect()]
    if png is not None:
        plot_report(rows, png)
    if as_json:
        echo_json(rows)
    else:
        tiered = any(r["tiered"] for r in rows)
        echo_table([{**r, "dirty_ratio": None if r["dirty_ratio"] is None else f"{r['dirty_ratio']:.2f}"}
                    for r in rows], _TABLE_COLUMNS + (_REMOTE_COLUMNS if tiered else ()))
    if png is not None:
        click.echo(f"chart written to {png}", err=True)


def _plain(row: dict[str, Any]) -> dict[str, Any]:
    return {k: (v.isoformat() if hasattr(v, "isoformat") else v) for k, v in row.items()}
