"""A damaged active segment after a CLEAN shutdown, end to end: ``tidelog serve`` is stopped
cleanly (the clean-shutdown marker is written, so no recovery runs at the next start), the last
``.log`` of a partition is cut by 30 bytes, or gets 200 random bytes or 5,000 zero bytes
appended; the broker starts again and kafka-python produces 20 records to it. They must be
acknowledged right after the last whole batch, read back (no CRC error), and survive the next
start, also after a SIGKILL (whose recovery validates every batch).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from pathlib import Path

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic

from reliability.broker import ServeProcess
from tidelog.records import iter_batches

TIMEOUT_S = 30.0
DAMAGE: dict[str, Callable[[bytes], bytes]] = {
    "cut": lambda data: data[:-30],
    "garbage": lambda data: data + random.Random(19).randbytes(200),
    "zeros": lambda data: data + bytes(5000),
}


def _active_log(data_dir: Path, topic: str) -> Path:
    return max((data_dir / f"{topic}-0").glob("*.log"))


def _whole_records_before(original: bytes, damaged: bytes, base: int) -> int:
    """The offset after the last batch of ``original`` still whole and unchanged in ``damaged``."""
    end = base
    for position, batch in iter_batches(original):
        stop = position + batch.size_in_bytes
        if damaged[position:stop] != original[position:stop]:
            break
        end = batch.last_offset + 1
    return end


def _produce(bootstrap: str, topic: str, values: list[bytes]) -> list[int]:
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=0)
    try:
        return [producer.send(topic, value, partition=0).get(TIMEOUT_S).offset for value in values]
    finally:
        producer.close()


def _consume_all(bootstrap: str, topic: str, count: int) -> list[tuple[int, bytes]]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                             consumer_timeout_ms=3000)
    try:
        consumer.assign([TopicPartition(topic, 0)])
        consumer.seek_to_beginning()
        got: list[tuple[int, bytes]] = []
        deadline = time.monotonic() + TIMEOUT_S
        while len(got) < count and time.monotonic() < deadline:
            got.extend((message.offset, message.value) for message in consumer)
        return got
    finally:
        consumer.close()


def test_records_acknowledged_after_a_damaged_clean_tail_are_readable_and_kept(broker: ServeProcess) -> None:
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    admin.create_topics([NewTopic(kind, 1, 1) for kind in DAMAGE])
    admin.close()
    before = {kind: [b"%s-before-%d" % (kind.encode(), i) for i in range(12)] for kind in DAMAGE}
    for kind, values in before.items():
        assert _produce(broker.bootstrap, kind, values) == list(range(12))
    assert broker.stop() == 0

    kept: dict[str, int] = {}
    for kind, damage in DAMAGE.items():
        path = _active_log(broker.data_dir, kind)
        original = path.read_bytes()
        damaged = damage(original)
        path.write_bytes(damaged)
        kept[kind] = _whole_records_before(original, damaged, int(path.name.split(".")[0]))
        assert kept[kind] > 0
    broker.start()
    expected: dict[str, list[tuple[int, bytes]]] = {}
    for kind in DAMAGE:
        after = [b"%s-after-%d" % (kind.encode(), i) for i in range(20)]
        offsets = _produce(broker.bootstrap, kind, after)
        assert offsets == list(range(kept[kind], kept[kind] + 20)), kind
        expected[kind] = list(enumerate(before[kind][:kept[kind]])) + list(zip(offsets, after))
        assert _consume_all(broker.bootstrap, kind, len(expected[kind])) == expected[kind], kind
    assert any("although the log was shut down cleanly" in line for _, line in broker.lines)

    broker.kill()  # the next start recovers every segment after the recovery point, batch by batch
    broker.start()
    for kind in DAMAGE:
        assert _consume_all(broker.bootstrap, kind, len(expected[kind])) == expected[kind], kind
