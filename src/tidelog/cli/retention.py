"""``tidelog retention run`` and ``tidelog explain``: one retention pass now (or a dry run), and
per partition what the next pass would delete and why or why not. Both print the plans
:mod:`tidelog.retention` returns, so what is explained is exactly what the task does."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict

import click

from tidelog.cli.context import open_manager
from tidelog.cli.tables import echo_json
from tidelog.remote.expiration import REMOTE_NOTHING, REMOTE_SUMMARY
from tidelog.retention import RetentionPlan, format_bytes


@click.group()
def retention() -> None:
    """Run retention (delete cleanup policy) now."""


@retention.command()
@click.option("--topic", help="Only this topic.")
@click.option("--dry-run", is_flag=True, help="Say what would be deleted; change nothing.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_context
def run(ctx: click.Context, topic: str | None, dry_run: bool, as_json: bool) -> None:
    """One retention pass over every partition (of --topic), printing what was deleted and why.
    Tiered partitions (remote.storage.enable) also get remote retention: retention.ms,
    retention.bytes (both tiers) and the log start offset delete remote segments.

    Deleted segments are renamed .deleted at once and their files removed after
    file.delete.delay.ms by `tidelog serve`, or at the next start-up."""
    with open_manager(ctx, read_only=dry_run) as manager:
        plans = manager.run_retention(topic, dry_run=dry_run)
    if as_json:
        echo_json([p.to_json() for p in plans])
        return
    for plan in plans:
        if plan.segments or _remote_deletes(plan):
            click.echo("\n".join(plan.summary()))
    click.echo(_totals(plans, dry_run))


def _remote_deletes(plan: RetentionPlan) -> bool:
    """Whether the plan's note from remote retention says it deletes remote segments."""
    return any(n.startswith(REMOTE_SUMMARY) and not n.startswith(REMOTE_NOTHING) for n in plan.notes)


@click.command()
@click.argument("topic", required=False)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_context
def explain(ctx: click.Context, topic: str | None, as_json: bool) -> None:
    """For each partition (of TOPIC): what the next retention pass would delete and why, or why
    not; for compacted partitions also what the cleaner would clean, or why not and when; for
    tiered partitions both tiers' ranges, what waits to be copied and why, and what remote
    retention (retention.* over both tiers, the log start offset) would delete next and why."""
    with open_manager(ctx, read_only=True) as manager:
        plans = manager.explain_retention(topic)  # asks the remote tier first, for tiered logs
        cleaning = {}
        if manager.cleaner is not None:  # only compacted partitions: explaining reads segment headers
            cleaning = {str(tp): manager.cleaner.manager.explain(tp) for tp in manager.live_partitions(topic)
                        if manager.partition_config(tp).compact}
        remote = manager.remote_tier
        tiered = {str(row.topic_partition): row for row in remote.status(topic)} if remote is not None else {}
    if as_json:
        out = []
        for p in plans:
            item = p.to_json()
            explained = cleaning.get(str(p.topic_partition))
            if explained is not None:
                item["cleaning"] = explained.to_json()
            row = tiered.get(str(p.topic_partition))
            if row is not None:
                item["tiered"] = {**asdict(row), "topic_partition": str(row.topic_partition)}
            out.append(item)
        echo_json(out)
        return
    for plan in plans:
        click.echo("\n".join(plan.summary()))
        row = tiered.get(str(plan.topic_partition))
        if row is not None and remote is not None:
            click.echo("  " + row.summary(remote.task_interval_ms))
        explained = cleaning.get(str(plan.topic_partition))
        if explained is not None:
            click.echo("\n".join("  cleaner: " + line if i == 0 else "  " + line
                                 for i, line in enumerate(explained.summary())))


def _totals(plans: Sequence[RetentionPlan], dry_run: bool) -> str:
    segments = sum(len(p.segments) for p in plans)
    size = sum(p.total_bytes for p in plans)
    touched = sum(1 for p in plans if p.segments)
    verb = "would delete" if dry_run else "deleted"
    return (f"retention {verb} {segments} segment(s), {format_bytes(size)}, from {touched} of "
            f"{len(plans)} partition(s)")
