"""``tidelog metrics``: a stopped log dir's metrics in the Prometheus text format, under the names
``tidelog serve`` serves at ``/metrics`` (docs/metrics.md).

The dirs are opened read-only (a running broker's lock refuses it: scrape the broker instead),
and the families are :class:`~tidelog.manager.metrics.LogManagerCollector`'s and the recovery
collector's, rendered by ``prometheus_client``. Where a running broker reports what its last
cleaner selection and retention passes recorded (per-partition dirty ratio and reason codes, the
cleaner's max dirty percent), a stopped dir has had no pass: those figures are computed once here,
by the functions behind ``tidelog explain`` (so the reason codes are the ones its ``--json``
shows as "reason"). In-memory state of a broker (quarantine, clean times, thread stats) does not
survive it: those gauges read 0.
"""

from __future__ import annotations

from collections.abc import Iterator

import click
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from tidelog.cleaner.manager import PartitionSelection
from tidelog.cleaner.plan import CleaningExplanation
from tidelog.cli.context import log_dirs, open_manager
from tidelog.errors import StorageError
from tidelog.manager import LogManager
from tidelog.manager.metrics import LogManagerCollector, RecoveryProgress, RecoveryProgressCollector, StoppedDirFigures
from tidelog.topic_partition import TopicPartition


@click.command("metrics")
@click.option("--prefix", "prefixes", multiple=True, metavar="NAME",
              help="Only the families whose name starts with NAME (repeatable), e.g. kafka_log_log_.")
@click.pass_context
def metrics(ctx: click.Context, prefixes: tuple[str, ...]) -> None:
    """Print the metrics of the stopped log dirs in the Prometheus text format: Kafka's Log,
    LogManager, LogCleaner and ReplicaManager gauges and tidelog's own (dirty ratio, cleaner and
    retention reason codes as `tidelog explain --json` shows them, recovery)."""
    missing = [str(path) for path in log_dirs(ctx) if not path.is_dir()]
    if missing:  # a stopped dir is read, never created (a mistyped --data-dir must not look empty)
        raise StorageError(f"no such log dir: {', '.join(missing)}", path=missing[0])
    progress = RecoveryProgress()
    with open_manager(ctx, read_only=True, on_progress=progress.on_progress) as manager:
        progress.complete()
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Only(prefixes, LogManagerCollector(manager, stopped_dir_figures(manager)),
                                RecoveryProgressCollector(progress)))
        text = generate_latest(registry).decode()
    click.echo(text, nl=False)


def stopped_dir_figures(manager: LogManager) -> StoppedDirFigures:
    """The per-partition figures a broker's passes would have recorded, computed once now: each
    partition's retention reason (:meth:`LogManager.explain_retention`), each compacted one's
    dirty ratio and cleaner reason (the cleaner's explain), and the max dirty percent over the
    compacted logs a selection pass would weigh (non-empty, idle). Reads segment metadata of
    every log once."""
    retention = {plan.topic_partition: plan.reason for plan in manager.explain_retention()}
    cleaning: dict[TopicPartition, PartitionSelection] = {}
    weighed: list[CleaningExplanation] = []
    if manager.cleaner is not None:
        for explained in manager.cleaner.manager.explain_all():
            if not explained.compacted:
                continue
            cleaning[explained.topic_partition] = PartitionSelection(explained.dirty_ratio, explained.reason)
            if explained.total_bytes > 0 and explained.state is None:
                weighed.append(explained)
    top = max((e.dirty_ratio for e in weighed), default=0.0)
    return StoppedDirFigures(cleaning, retention, float(int(100 * top)))


class _Only(Collector):
    """The families of ``collectors`` whose name starts with one of ``prefixes`` (all without any)."""

    def __init__(self, prefixes: tuple[str, ...], *collectors: Collector) -> None:
        self._prefixes = prefixes
        self._collectors = collectors

    def collect(self) -> Iterator[Metric]:
        for collector in self._collectors:
            yield from (m for m in collector.collect() if not self._prefixes or m.name.startswith(self._prefixes))
