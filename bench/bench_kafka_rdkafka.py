"""librdkafka's transfers of the side-by-side produce and fetch benchmark (``kafka_produce_fetch``,
bench/bench_kafka_wire.py runs them in its rounds): a ``confluent_kafka.Producer`` and ``Consumer``
at their defaults, so the rows read as "what a stock librdkafka client gets from each broker".

* :func:`rdkafka_produce`: only ``bootstrap.servers`` is set (librdkafka's defaults: acks=all,
  ``linger.ms`` 5, no compression, no idempotence); :data:`RD_VALUE_SIZE`-byte values, no key, to
  partition 0 of a one-partition topic, then ``flush()``. Every delivery report is checked: no
  error, offsets 0..N-1 in order.
* :func:`rdkafka_fetch`: ``group.id`` (required by the client; nothing is committed),
  ``enable.auto.commit=false``, ``auto.offset.reset=earliest``, partition 0 assigned with no
  committed offset, so it reads from the log start; ``consume()`` until it holds the N records,
  each checked (no error, offsets consecutive from 0), bytes counted from the values. The
  consumer's start (OffsetFetch, then ListOffsets about 0.1 s later: librdkafka's own pacing)
  is inside the clock, on both brokers alike.

Connecting and the first metadata request happen before the clock starts (``list_topics``), on
both brokers alike. What the rows mean and the checks across brokers: bench/README.md, "Against Kafka".
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from bench.bench_kafka import NotTheSameWork
from bench.bench_kafka_wire import STALL_TIMEOUT_S, Transfer, stalled
from bench.bench_storage import seconds_of

RD_VALUE_SIZE = 1_000  # 1 KB records
RD_CONSUME_BATCH = 10_000  # messages per Consumer.consume call at most (a binding argument, not a client setting)
PRODUCER_CONFIG: dict[str, Any] = {}  # librdkafka's defaults: nothing beyond bootstrap.servers
CONSUMER_CONFIG = {"enable.auto.commit": False, "auto.offset.reset": "earliest"}  # plus group.id, required


def rdkafka_value(seed: int = 11) -> bytes:
    """The value every librdkafka record carries: :data:`RD_VALUE_SIZE` random bytes."""
    return np.random.default_rng(seed).bytes(RD_VALUE_SIZE)


def rdkafka_produce(bootstrap: str, topic: str, count: int, value: bytes) -> Transfer:
    """Time ``count`` ``Producer.produce`` of ``value`` (no key) to partition 0, then ``flush``;
    fails (``NotTheSameWork``) unless every delivery report came back without an error and the
    records landed at offsets 0..count-1 in order."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, **PRODUCER_CONFIG})
    producer.list_topics(topic, timeout=STALL_TIMEOUT_S)
    reports: list[Any] = []  # the offset of each delivered record, or its error
    seconds = seconds_of(lambda: _produce_all(producer, topic, count, value, reports))
    failed = [report for report in reports if not isinstance(report, int)]
    if failed:
        raise NotTheSameWork(f"librdkafka produce to {topic}: {len(failed)} delivery errors, the first {failed[0]}")
    if reports != list(range(count)):
        raise NotTheSameWork(f"librdkafka's records of {topic} did not land at offsets 0..{count - 1} "
                             f"({len(reports)} delivery reports)")
    return Transfer(seconds, count, count * len(value), reports[-1] + 1)


def _produce_all(producer: Any, topic: str, count: int, value: bytes, reports: list[Any]) -> None:
    def delivered(error: Any, message: Any) -> None:
        reports.append(message.offset() if error is None else error)

    for _ in range(count):
        while True:
            try:
                producer.produce(topic, value, partition=0, on_delivery=delivered)
                break
            except BufferError:  # the client's queue is full (100,000 messages by default): let it drain
                producer.poll(0.01)
        producer.poll(0)
    left = producer.flush(STALL_TIMEOUT_S)
    if left:
        raise NotTheSameWork(f"librdkafka produce to {topic}: {left} records still unsent after "
                             f"{STALL_TIMEOUT_S:.0f} s")


def rdkafka_fetch(bootstrap: str, topic: str, count: int) -> Transfer:
    """Time a ``Consumer`` (partition 0 assigned at its beginning, so no committed offset is asked
    of a group coordinator) consuming until it holds ``count`` records; the log end offset (high
    watermark) is asked of the broker afterwards."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"tidelog-bench-{topic}", **CONSUMER_CONFIG})
    partition = TopicPartition(topic, 0)
    try:
        consumer.list_topics(topic, timeout=STALL_TIMEOUT_S)
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        got = [0, 0]  # records, value bytes
        seconds = seconds_of(lambda: _consume_all(consumer, topic, count, got))
        _, end = consumer.get_watermark_offsets(partition, timeout=STALL_TIMEOUT_S)
    finally:
        consumer.close()
    return Transfer(seconds, got[0], got[1], end)


def _consume_all(consumer: Any, topic: str, count: int, got: list[int]) -> None:
    deadline = time.monotonic() + STALL_TIMEOUT_S
    while got[0] < count:
        # consume() waits until it holds num_messages or the timeout passes: never ask for more than are left
        messages = consumer.consume(num_messages=min(RD_CONSUME_BATCH, count - got[0]), timeout=0.5)
        if not messages:
            stalled(deadline, f"librdkafka consumer of {topic} at {got[0]} of {count} records")
            continue
        for message in messages:
            error = message.error()
            if error is not None and (error.fatal() or not error.retriable()):
                raise NotTheSameWork(f"librdkafka consumer of {topic} at {got[0]} records: {error}")
        messages = [message for message in messages if message.error() is None]  # retriable errors: go on
        if not messages:
            continue
        first, last = messages[0].offset(), messages[-1].offset()
        if first != got[0] or last != got[0] + len(messages) - 1:  # offsets only rise within a partition
            raise NotTheSameWork(f"librdkafka consumer of {topic}: offsets {first}..{last} for "
                                 f"{len(messages)} records, expected from {got[0]}")
        got[0] += len(messages)
        got[1] += sum(len(message.value()) for message in messages)
        deadline = time.monotonic() + STALL_TIMEOUT_S
