"""``tidelog offsets TOPIC``: offsets by time, like kafka-get-offsets (``GetOffsetShell``).

``--time`` is Kafka's ListOffsets query: ``-1``/``latest`` (the high watermark), ``-2``/``earliest``
(the log start offset), ``-3``/``max-timestamp`` (the record with the largest timestamp),
``-4``/``earliest-local`` (as earliest: tidelog has no tiered storage), ``-5``/``latest-tiered``
(never found here), or a timestamp in ms (the first record whose timestamp is >= it).

Output: ``topic:partition:offset`` per partition, in partition order (GetOffsetShell sorts
``topic-partition`` strings, so ``t-10`` comes before ``t-2`` there); as GetOffsetShell, a
partition where nothing matches is left out. ``--json``: one object per line with the record's
timestamp (-1 for the special queries) and leader epoch too.
"""

from __future__ import annotations

import click
import orjson

from tidelog.cli.context import open_manager
from tidelog.storage.log import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIERED_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
)
from tidelog.topic_partition import TopicPartition

TIME_NAMES = {"latest": LATEST_TIMESTAMP, "earliest": EARLIEST_TIMESTAMP, "max-timestamp": MAX_TIMESTAMP,
              "earliest-local": EARLIEST_LOCAL_TIMESTAMP, "latest-tiered": LATEST_TIERED_TIMESTAMP}
SPECIAL_TIMES = frozenset(TIME_NAMES.values())


def parse_time(text: str) -> int:
    """``--time``: a name, one of Kafka's negative codes, or a non-negative timestamp in ms."""
    if text in TIME_NAMES:
        return TIME_NAMES[text]
    try:
        value = int(text)
    except ValueError:
        value = None
    if value is None or (value < 0 and value not in SPECIAL_TIMES):
        raise click.BadParameter(
            f"malformed time {text!r}: use -1 or latest, -2 or earliest, -3 or max-timestamp, -4 or earliest-local, "
            "-5 or latest-tiered, or a timestamp in ms", param_hint="--time")
    return value


@click.command()
@click.argument("topic")
@click.option("--partition", type=click.IntRange(min=0), help="Only this partition.")
@click.option("--time", "time_text", default="latest", show_default=True,
              help="-1/latest, -2/earliest, -3/max-timestamp, -4/earliest-local, -5/latest-tiered, or ms.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per partition.")
@click.pass_context
def offsets(ctx: click.Context, topic: str, partition: int | None, time_text: str, as_json: bool) -> None:
    """Print TOPIC's offsets for a time (like kafka-get-offsets): topic:partition:offset."""
    timestamp = parse_time(time_text)
    with open_manager(ctx, read_only=True) as manager:
        partitions = manager.partitions(topic) if partition is None else [partition]
        for p in partitions:
            found = manager.list_offsets(TopicPartition(topic, p), timestamp)
            if found is None or found.offset < 0:
                continue
            if as_json:
                click.echo(orjson.dumps({"topic": topic, "partition": p, "offset": found.offset,
                                         "timestamp": found.timestamp, "leaderEpoch": found.leader_epoch}).decode())
            else:
                click.echo(f"{topic}:{p}:{found.offset}")
