"""``tidelog consume --bootstrap-server``: the records of a topic, read from a broker.

The local mode's rules (:mod:`tidelog.cli.consume`), through a kafka-python ``KafkaConsumer``
with no group (``assign`` and ``seek``: nothing is committed, no rebalance):

* every partition's log start offset and high watermark are asked once, when the command starts
  (ListOffsets earliest/latest); the records up to that high watermark are printed, then the
  command exits, as locally (records written meanwhile are not printed);
* the start is chosen as locally: ``--from-beginning``/``earliest``, ``latest`` (the default),
  ``--offset N`` (reset to the latest offset with a note when outside [start, end]), or
  ``--timestamp`` (``offsets_for_times``; the latest offset when no record is that recent);
* partitions are read one after the other in partition order; control batches are skipped and
  CRCs checked by the consumer, with the local mode's isolation level: read_uncommitted, or
  read_committed (ListOffsets latest then answers the last stable offset, where the read stops,
  and the consumer drops aborted transactions with the list each fetch answer carries).

A partition that yields nothing for ``STALL_TIMEOUT_S`` while records remain below its end is an
error naming it, never a hang.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import click
from kafka import KafkaConsumer
from kafka import TopicPartition as KafkaTopicPartition

from tidelog.cli.consume import READ_COMMITTED, READ_UNCOMMITTED, TIMESTAMP_TYPE_NAMES, RecordPrinter, checked_offset
from tidelog.cli.record_io import RecordTuple
from tidelog.cli.remote import BrokerError, REQUEST_TIMEOUT_MS, RemoteClient, connect, kafka_errors_mapped
from tidelog.errors import UnknownTopicOrPartitionError
from tidelog.records.record import TimestampType

POLL_TIMEOUT_MS = 500
STALL_TIMEOUT_S = REQUEST_TIMEOUT_MS / 1000
MAX_POLL_RECORDS = 10_000


def consume_remote(bootstrap: str, topic: str, partition: int | None, printer: RecordPrinter, *,
                   from_beginning: bool, offset: str | None, timestamp: int | None, committed: bool = False) -> None:
    """Print ``topic``'s records (every partition, or only ``partition``) from the broker at
    ``bootstrap`` with ``printer`` (see the module doc); ``committed``: read_committed."""
    with connect(bootstrap) as client:
        tps = [KafkaTopicPartition(topic, p) for p in _partitions(client, topic, partition)]
        consumer = client.consumer(READ_COMMITTED if committed else READ_UNCOMMITTED)
        try:
            with kafka_errors_mapped(topic=topic):
                earliest, latest = consumer.beginning_offsets(tps), consumer.end_offsets(tps)
            for tp in tps:
                start, note = _start(consumer, tp, earliest[tp], latest[tp], from_beginning, offset, timestamp)
                if note:
                    click.echo(f"note: {note}", err=True)
                if not printer.print_partition(tp.partition, _records(consumer, tp, start, latest[tp])):
                    break
        finally:
            consumer.close()


def _partitions(client: RemoteClient, topic: str, partition: int | None) -> list[int]:
    partitions = client.partitions(topic)
    if partition is None:
        return partitions
    if partition not in partitions:
        raise UnknownTopicOrPartitionError(f"topic {topic!r} has no partition {partition} (it has {len(partitions)})",
                                           topic_partition=f"{topic}-{partition}")
    return [partition]


def _start(consumer: KafkaConsumer, tp: KafkaTopicPartition, earliest: int, latest: int, from_beginning: bool,
           offset: str | None, timestamp: int | None) -> tuple[int, str | None]:
    """Where to start reading ``tp`` and, when the request was reset, why (the local rules)."""
    if from_beginning or offset == "earliest":
        return earliest, None
    if timestamp is not None:
        with kafka_errors_mapped(topic_partition=_name(tp)):
            found = consumer.offsets_for_times({tp: timestamp}).get(tp)
        return (found.offset, None) if found is not None else (latest, None)
    if offset is None or offset == "latest":
        return latest, None
    return checked_offset(int(offset), earliest, latest, latest, _name(tp))


def _records(consumer: KafkaConsumer, tp: KafkaTopicPartition, start: int,
             end: int) -> Iterator[tuple[str, RecordTuple]]:
    """``(timestamp type name, record)`` of ``tp``'s records in [start, end)."""
    if start >= end:
        return
    with kafka_errors_mapped(topic_partition=_name(tp)):
        consumer.assign([tp])
        consumer.seek(tp, start)
        position, last_progress = start, time.monotonic()
        while position < end:
            polled = consumer.poll(timeout_ms=POLL_TIMEOUT_MS, max_records=MAX_POLL_RECORDS).get(tp, [])
            for record in polled:
                if record.offset >= end:
                    return
                yield _kind(record), _tuple(record)
            new_position = consumer.position(tp)
            if new_position > position or polled:
                position, last_progress = max(new_position, position), time.monotonic()
            elif time.monotonic() - last_progress > STALL_TIMEOUT_S:
                raise BrokerError(f"no records came from the broker for {STALL_TIMEOUT_S:.0f} s at offset {position} "
                                  f"(the partition's end was {end})", topic_partition=_name(tp))


def _kind(record: Any) -> str:
    try:
        return TIMESTAMP_TYPE_NAMES[TimestampType(record.timestamp_type)]
    except ValueError:
        return TIMESTAMP_TYPE_NAMES[TimestampType.NO_TIMESTAMP]


def _tuple(record: Any) -> RecordTuple:
    headers = tuple((key, value) for key, value in (record.headers or ()))
    return record.offset, record.timestamp, record.key, record.value, headers


def _name(tp: KafkaTopicPartition) -> str:
    return f"{tp.topic}-{tp.partition}"
