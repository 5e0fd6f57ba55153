"""``tidelog demo``: write and read a partition in the data dir (what ``make run`` does until the
log manager's service exists)."""

from __future__ import annotations

from pathlib import Path

import click

from tidelog.records import BatchBuilder, CompressionType, read_batch_at
from tidelog.scheduler import ThreadScheduler
from tidelog.storage import files
from tidelog.storage.config import BrokerConfig
from tidelog.storage.log import Log
from tidelog.storage.verify import verify_paths
from tidelog.clock import SYSTEM_CLOCK
from tidelog.topic_partition import TopicPartition

DEMO_PARTITION = TopicPartition("demo", 0)


@click.command()
@click.option("--records", default=1000, show_default=True, help="Records to append (in batches of 100).")
@click.pass_context
def demo(ctx: click.Context, records: int) -> None:
    """Append records to partition demo-0 in every codec, read them back, verify the files."""
    data_dir: Path = ctx.obj["data_dir"]
    broker: BrokerConfig = ctx.obj["broker"]
    dir = files.partition_dir(data_dir, DEMO_PARTITION)
    scheduler = ThreadScheduler()
    log = Log.open(dir, broker.log_config(), scheduler=scheduler, had_clean_shutdown=False,
                   topic_partition=DEMO_PARTITION)
    try:
        start = log.log_end_offset
        _append(log, records)
        log.update_high_watermark(log.log_end_offset)
        read = _read_back(log, start)
        log.flush()
    finally:
        log.close()
        scheduler.shutdown()
    report = verify_paths([dir])
    click.echo(f"appended {records} records to {dir} (offsets {start}..{start + records - 1}); "
               f"read back {read}; {log.num_segments} segment(s); "
               f"verify: {'OK' if report.ok else report.problems}")


def _append(log: Log, records: int) -> None:
    codecs = list(CompressionType)
    now = SYSTEM_CLOCK.milliseconds()
    for batch_no, first in enumerate(range(0, records, 100)):
        builder = BatchBuilder(compression=codecs[batch_no % len(codecs)])
        for i in range(first, min(first + 100, records)):
            builder.append(i - first, now, f"key-{i % 50}".encode(), f"value {i}".encode())
        log.append_as_leader(builder.build())


def _read_back(log: Log, start: int) -> int:
    count, offset = 0, start
    while offset < log.high_watermark:
        data = log.read(offset, 1 << 20).records
        position = 0
        while (batch := read_batch_at(data, position)) is not None:
            for record in batch.records():
                if record.offset >= offset:
                    count += 1
            offset = batch.next_offset
            position += batch.size_in_bytes
    return count
