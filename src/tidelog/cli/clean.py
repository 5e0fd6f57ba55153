"""``tidelog clean run``: one cleaning pass now, over every compacted partition (of a topic, or one
partition), or with ``--dry-run`` what it would remove; ``tidelog clean status``: the cleaner's
gauges and its quarantined partitions.

Without ``--force`` a partition is cleaned only if the cleaner would choose it (dirty ratio above
``min.cleanable.dirty.ratio``, or overdue by ``max.compaction.lag.ms``); ``--force`` cleans whatever
is cleanable (the part below the first uncleanable offset) whatever the ratio.

``--engine spark`` runs the dedupe and the rewrite as Spark jobs (``--master``, default the
tidelog-only broker config ``tidelog.cleaner.spark.master``, itself ``local[2]``); the default is the
broker's ``tidelog.cleaner.engine`` (``in-process``). Both engines write the same bytes; Spark
needs the ``spark`` extra (pyspark, pyarrow), imported only when chosen. For a tiered compacted
topic (the remote tier configured with ``--override remote.log.storage.*``/``rsm.config.*``) the
executors read and write the remote tier in the store and never open the data dir
(:mod:`tidelog.spark.remote_compaction`), so ``--master spark://…`` works on a cluster whose
workers do not see it.
"""

from __future__ import annotations

import sys
from typing import Any

import click

from tidelog.cleaner.log_cleaner import CleaningResult, DryRunReport, LogCleaner
from tidelog.cleaner.stats import CleanerStats
from tidelog.cli.context import open_manager
from tidelog.cli.tables import echo_json, echo_table
from tidelog.cleaner.log_cleaner import ENGINE_IN_PROCESS
from tidelog.errors import ConfigError, TidelogError
from tidelog.manager.manager import LogManager
from tidelog.retention import format_bytes
from tidelog.spark.engine import ENGINE_SPARK
from tidelog.topic_partition import TopicPartition


@click.group()
def clean() -> None:
    """Run the log cleaner (compact cleanup policy) now, or show its state."""


@clean.command()
@click.option("--topic", help="Only this topic.")
@click.option("--partition", type=int, help="Only this partition (needs --topic).")
@click.option("--force", is_flag=True, help="Clean even below min.cleanable.dirty.ratio.")
@click.option("--dry-run", is_flag=True, help="Say what would be removed; change nothing.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--engine", type=click.Choice([ENGINE_IN_PROCESS, ENGINE_SPARK]),
              help="Where to dedupe and rewrite (default: tidelog.cleaner.engine, in-process).")
@click.option("--master", help="Spark master URL for --engine spark (default: tidelog.cleaner.spark.master, "
                               "local[2]).")
@click.pass_context
def run(ctx: click.Context, topic: str | None, partition: int | None, force: bool, dry_run: bool,
        as_json: bool, engine: str | None, master: str | None) -> None:
    """Clean every compacted partition (of --topic / --partition) once, printing what went.
    Exits 1 when a partition could not be cleaned (the others still are)."""
    if partition is not None and topic is None:
        raise click.UsageError("--partition needs --topic")
    broker = ctx.find_root().obj["broker"]
    if master is not None and (engine or broker.tidelog_cleaner_engine) != ENGINE_SPARK:
        raise click.UsageError("--master needs --engine spark")
    with open_manager(ctx) as manager:
        cleaner = _cleaner(manager)
        if engine is not None or master is not None:
            cleaner.use_engine(engine or broker.tidelog_cleaner_engine, master=master)
        rows = []
        for tp in manager.live_partitions(topic):
            if partition is not None and tp.partition != partition:
                continue
            config = manager.partition_config(tp)
            if not config.compact:
                rows.append(_row(tp, "skipped", f"not compacted (cleanup.policy={','.join(sorted(config.cleanup_policy)) or 'none'})"))
                continue
            try:
                if dry_run:
                    rows.append(_dry_run_row(tp, cleaner.dry_run(tp), cleaner))
                else:
                    rows.append(_result_row(tp, cleaner.clean_now(tp, force=force), cleaner))
            except TidelogError as e:  # its stats or its segments cannot be read: this partition only
                rows.append(_row(tp, "failed", str(e)))
    if as_json:
        echo_json(rows)
    else:
        for row in rows:
            click.echo(f"{row['topic_partition']}: {row['outcome']}: {row['detail']}")
    if any(row["outcome"] == "failed" for row in rows):
        sys.exit(1)  # as `verify`: scripts notice a partition that could not be cleaned


@clean.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_context
def status(ctx: click.Context, as_json: bool) -> None:
    """The cleaner's gauges (Kafka's LogCleaner metrics) and its quarantined partitions."""
    with open_manager(ctx) as manager:
        cleaner = _cleaner(manager)
        metrics = cleaner.metrics()
        quarantined = [q.to_json() for q in cleaner.manager.quarantined()]
    if as_json:
        echo_json({"metrics": metrics, "quarantined": quarantined})
        return
    echo_table([{"metric": k, "value": f"{v:g}"} for k, v in metrics.items()], ["metric", "value"])
    if quarantined:
        echo_table(quarantined, list(quarantined[0].keys()))
    else:
        click.echo("no quarantined partitions")


def _cleaner(manager: LogManager) -> LogCleaner:
    if manager.cleaner is None:
        raise ConfigError("the log cleaner is disabled (log.cleaner.enable=false)", config="log.cleaner.enable")
    return manager.cleaner


def _row(tp: TopicPartition, outcome: str, detail: str, **extra: Any) -> dict[str, Any]:
    return {"topic_partition": str(tp), "outcome": outcome, "detail": detail, **extra}


def _why_not(tp: TopicPartition, cleaner: LogCleaner) -> str:
    return cleaner.manager.explain(tp).headline


def _result_row(tp: TopicPartition, result: CleaningResult | None, cleaner: LogCleaner) -> dict[str, Any]:
    if result is None:
        return _row(tp, "not cleaned", _why_not(tp, cleaner))
    if result.error is not None:
        return _row(tp, "failed", result.error)
    if result.aborted or result.stats is None:
        return _row(tp, "aborted", f"stopped at offset {result.end_offset}")
    detail = f"offsets [{result.first_dirty_offset}, {result.end_offset}) cleaned; " + _stats_text(result.stats, "removed")
    return _row(tp, "cleaned", detail, first_dirty_offset=result.first_dirty_offset, end_offset=result.end_offset,
                **_stats_json(result.stats))


def _dry_run_row(tp: TopicPartition, report: DryRunReport | None, cleaner: LogCleaner) -> dict[str, Any]:
    if report is None:
        return _row(tp, "nothing to clean", _why_not(tp, cleaner))
    detail = (f"offsets [{report.first_dirty_offset}, {report.first_uncleanable_offset}) would be cleaned; "
              + _stats_text(report.stats, "would remove"))
    return _row(tp, "dry run", detail, first_dirty_offset=report.first_dirty_offset,
                first_uncleanable_offset=report.first_uncleanable_offset, **_stats_json(report.stats))


def _stats_text(stats: CleanerStats, verb: str) -> str:
    gone_records = stats.messages_read - stats.messages_written
    gone_bytes = stats.bytes_read - stats.bytes_written
    return (f"{verb} {gone_records} of {stats.messages_read} records, {format_bytes(gone_bytes)} of "
            f"{format_bytes(stats.bytes_read)} ({stats.invalid_messages_read} keyless), {stats.passes} pass(es)")


def _stats_json(stats: CleanerStats) -> dict[str, Any]:
    return {"records_read": stats.messages_read, "records_kept": stats.messages_written,
            "bytes_read": stats.bytes_read, "bytes_kept": stats.bytes_written,
            "keyless_records": stats.invalid_messages_read, "passes": stats.passes}
