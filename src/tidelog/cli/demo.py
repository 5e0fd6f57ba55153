"""``tidelog demo``: append records in every codec to topic ``demo`` (created if missing), read
them back and verify the partition's files; everything through the log manager, which owns (and
locks) the log dirs like any other command."""

from __future__ import annotations

import click

from tidelog.cli.consume import iter_records
from tidelog.cli.context import open_manager
from tidelog.clock import SYSTEM_CLOCK
from tidelog.manager.manager import LogManager
from tidelog.records import BatchBuilder, CompressionType
from tidelog.storage import files
from tidelog.storage.verify import verify_paths
from tidelog.topic_partition import TopicPartition

DEMO_PARTITION = TopicPartition("demo", 0)


@click.command()
@click.option("--records", default=1000, show_default=True, help="Records to append (in batches of 100).")
@click.pass_context
def demo(ctx: click.Context, records: int) -> None:
    """Append records to partition demo-0 in every codec, read them back, verify the files."""
    with open_manager(ctx) as manager:
        if not manager.has_topic(DEMO_PARTITION.topic):
            manager.create_topic(DEMO_PARTITION.topic, 1)
        start = manager.offsets(DEMO_PARTITION).log_end_offset
        _append(manager, records)
        read = sum(1 for _ in iter_records(manager, DEMO_PARTITION, start))
        info = manager.partition_info(DEMO_PARTITION)
        dir, segments = files.partition_dir(info.log_dir, DEMO_PARTITION), info.segments
    report = verify_paths([dir])
    click.echo(f"appended {records} records to {dir} (offsets {start}..{start + records - 1}); "
               f"read back {read}; {segments} segment(s); "
               f"verify: {'OK' if report.ok else report.problems}")


def _append(manager: LogManager, records: int) -> None:
    codecs = list(CompressionType)
    now = SYSTEM_CLOCK.milliseconds()
    for batch_no, first in enumerate(range(0, records, 100)):
        builder = BatchBuilder(compression=codecs[batch_no % len(codecs)])
        for i in range(first, min(first + 100, records)):
            builder.append(i - first, now, f"key-{i % 50}".encode(), f"value {i}".encode())
        manager.append(DEMO_PARTITION, builder.build())
