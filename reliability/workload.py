"""A seeded stream of client steps against one running broker, through kafka-python (acks=-1).

Topics (created once by :meth:`Workload.create_topics`):

* ``durable``: ``flush.messages=1`` (every append fsynced before the acknowledgement) and
  ``preallocate=true`` (a crash leaves zeros after the last batch);
* ``paged``: the default flush policy (acknowledged once in the page cache);
* ``retained``: small ``retention.bytes``; DeleteRecords and config changes move its log start;
* ``compacted``: ``cleanup.policy=compact`` at any dirty ratio, 1 KiB segments, a small keyspace
  with overwrites and tombstones (``delete.retention.ms`` short, so tombstones go too);
* ``ephemeral-<epoch>-<n>``: created, written and deleted within an epoch.

Every step tells the :class:`~reliability.ledger.Ledger` what was sent, acknowledged, observed.
A step that fails because the broker died ends the epoch (:class:`BrokerGone`); what was in flight
stays of unknown fate. Steps bias toward a *focus* (the kill trigger's event) so the event happens.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient, NewTopic

from reliability.ledger import TP, Ledger, Read, Record, Violation

PARTITIONS = 2
TOPICS: dict[str, dict[str, str]] = {
    "durable": {"flush.messages": "1", "preallocate": "true"},
    "paged": {},
    "retained": {"retention.bytes": "8192"},
    "compacted": {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01", "segment.bytes": "1024",
                  "delete.retention.ms": "300", "min.compaction.lag.ms": "0"},
}
KEYS = 24  # per compacted partition: enough overwrites for every clean to remove something
CLIENT_TIMEOUT_MS = 4000
READ_TIMEOUT_S = 8.0

logging.getLogger("kafka").setLevel(logging.CRITICAL)  # a killed broker makes kafka-python log every retry


class BrokerGone(RuntimeError):
    """The broker stopped answering (killed): the epoch is over."""


class ReadIncomplete(RuntimeError):
    """A read did not reach the end offset in time; nothing is learnt from it."""


@dataclass
class Clients:
    """kafka-python clients bound to one broker start."""

    producer: KafkaProducer
    consumer: KafkaConsumer
    admin: KafkaAdminClient

    @classmethod
    def connect(cls, bootstrap: str) -> Clients:
        common = {"bootstrap_servers": bootstrap, "request_timeout_ms": CLIENT_TIMEOUT_MS,
                  "reconnect_backoff_ms": 20, "reconnect_backoff_max_ms": 200}
        producer = KafkaProducer(acks="all", enable_idempotence=False, retries=1, linger_ms=2,
                                 max_in_flight_requests_per_connection=1, delivery_timeout_ms=CLIENT_TIMEOUT_MS + 1000,
                                 **common)
        consumer = KafkaConsumer(group_id=None, enable_auto_commit=False, auto_offset_reset="earliest",
                                 fetch_max_wait_ms=50, **common)
        admin = KafkaAdminClient(**common)
        return cls(producer, consumer, admin)

    def close(self) -> None:
        for close in (lambda: self.producer.close(timeout=0), lambda: self.consumer.close(), self.admin.close):
            try:
                close()
            except Exception:  # noqa: BLE001 - a dead broker makes any close complain; nothing to keep
                pass


class Workload:
    """Steps drawn from an epoch's own ``random.Random``; ``alive()`` says whether the broker runs."""

    def __init__(self, ledger: Ledger, alive: Callable[[], bool]) -> None:
        self.ledger = ledger
        self.alive = alive
        self.sequence = 0
        self.client_errors = 0
        self.last_errors: list[str] = []
        self.events: list[str] = []  # client operations answered: "delete-records", "topic-deleted", "config-altered"
        self.steps = 0
        self.violations: list[Violation] = []  # found by reads during the epochs

    # --- setup -------------------------------------------------------------------------------------

    def create_topics(self, clients: Clients) -> None:
        clients.admin.create_topics([NewTopic(name, PARTITIONS, 1, topic_configs=configs)
                                     for name, configs in TOPICS.items()])
        for name in TOPICS:
            for p in range(PARTITIONS):
                self.ledger.add_partition((name, p), compacted=name == "compacted", may_lose_head=name == "retained")

    # --- the epoch loop ---------------------------------------------------------------------------

    def run(self, clients: Clients, rng: random.Random, focus: str, until: Callable[[], bool], epoch: int) -> None:
        """Run steps until ``until()`` or the broker dies (then :class:`BrokerGone` is swallowed)."""
        steps = {"produce": self.produce, "overwrite": self.overwrite, "read": self.read_and_check,
                 "delete-records": self.delete_records, "retention-config": self.change_retention,
                 "topic-cycle": self.topic_cycle}
        weights = _weights(focus)
        names = list(weights)
        n = 0
        while not until():
            name = rng.choices(names, [weights[k] for k in names])[0]
            try:
                steps[name](clients, rng, f"{epoch}-{n}")  # type: ignore[operator]
            except BrokerGone:
                return
            except Exception as e:  # noqa: BLE001 - a client error while the broker lives is counted, not fatal
                if not self.alive():
                    return
                self.client_errors += 1
                self.last_errors = (self.last_errors + [f"{name}: {e!r}"[:300]])[-5:]
            n += 1
            self.steps += 1

    # --- steps -------------------------------------------------------------------------------------

    def produce(self, clients: Clients, rng: random.Random, tag: str) -> None:
        topic = rng.choice(["durable", "paged", "retained"])
        tp = (topic, rng.randrange(PARTITIONS))
        self._send(clients, [(tp, None, self._value(tp, rng.randrange(20, 400))) for _ in range(rng.randint(1, 12))])

    def overwrite(self, clients: Clients, rng: random.Random, tag: str) -> None:
        tp = ("compacted", rng.randrange(PARTITIONS))
        sends = []
        for _ in range(rng.randint(4, 30)):
            key = b"k%d" % rng.randrange(KEYS)
            sends.append((tp, key, None if rng.random() < 0.15 else self._value(tp, rng.randrange(10, 120))))
        self._send(clients, sends)

    def read_and_check(self, clients: Clients, rng: random.Random, tag: str) -> None:
        tp = rng.choice(sorted(self.ledger.partitions))
        read = read_partition(clients, tp, self.alive)
        self.violations.extend(self.ledger.check(read))
        self.ledger.observe(read)

    def delete_records(self, clients: Clients, rng: random.Random, tag: str) -> None:
        tp = ("retained", rng.randrange(PARTITIONS))
        part = self.ledger.partitions[tp]
        top = max(part.acked, default=-1) + 1
        if top <= part.start_floor:
            return
        target = rng.randint(part.start_floor, top)
        result = self._guard(lambda: clients.admin.delete_records({TopicPartition(*tp): target}))
        low = _low_watermark(result, tp)
        self.ledger.start_at_least(tp, target if low is None else low)
        self.events.append("delete-records")

    def change_retention(self, clients: Clients, rng: random.Random, tag: str) -> None:
        configs = {"retention.bytes": str(rng.choice([4096, 8192, 16384, -1])),
                   "retention.ms": str(rng.choice([1500, 5000, 600000, -1]))}
        resource = ConfigResource(ConfigResourceType.TOPIC, "retained", configs=configs)
        self._guard(lambda: clients.admin.alter_configs([resource]))
        self.events.append("config-altered")

    def topic_cycle(self, clients: Clients, rng: random.Random, tag: str) -> None:
        """Create a topic, write to it, delete it: once DeleteTopics is answered it must never return."""
        name = f"ephemeral-{tag}"
        self._guard(lambda: clients.admin.create_topics([NewTopic(name, 2, 1, topic_configs={"segment.bytes": "1024"})]))
        for p in range(2):
            self.ledger.add_partition((name, p), compacted=False, may_lose_head=False)
        self._send(clients, [((name, rng.randrange(2)), None, self._value((name, 0), 300)) for _ in range(rng.randint(3, 20))])
        self.ledger.deleting.add(name)
        self._guard(lambda: clients.admin.delete_topics([name]))
        self.ledger.topic_deleted(name)
        self.events.append("topic-deleted")

    # --- plumbing ------------------------------------------------------------------------------------

    def _value(self, tp: TP, size: int) -> bytes:
        self.sequence += 1
        head = f"{tp[0]}/{tp[1]}/{self.sequence}/".encode()
        return head + b"." * max(0, size - len(head))

    def _send(self, clients: Clients, sends: list[tuple[TP, bytes | None, bytes | None]]) -> None:
        """Send in order, then wait for every acknowledgement; acknowledged offsets go to the ledger."""
        futures = []
        for tp, key, value in sends:
            record = Record(key, value)
            self.ledger.sending(tp, record)
            futures.append((tp, record, self._guard(
                lambda tp=tp, key=key, value=value: clients.producer.send(tp[0], value=value, key=key, partition=tp[1]))))
        deadline = time.monotonic() + CLIENT_TIMEOUT_MS / 1000 + 2
        failed = []
        for tp, record, future in futures:
            try:  # each future on its own: kafka-python's flush() can raise while batches complete
                metadata = future.get(timeout=max(0.0, deadline - time.monotonic()))
            except Exception as e:  # noqa: BLE001 - any failure leaves the record of unknown fate
                failed.append(f"{tp}: {e!r}")
                continue
            self.ledger.acknowledged(tp, metadata.offset, record)
        if failed:
            if not self.alive():
                raise BrokerGone()
            raise RuntimeError(f"{len(failed)} send(s) failed while the broker lives: {failed[:3]}")

    def _guard(self, call: Callable[[], object]) -> object:
        try:
            return call()
        except Exception:
            if not self.alive():
                raise BrokerGone() from None
            raise


def read_partition(clients: Clients, tp: TP, alive: Callable[[], bool]) -> Read:
    """Every record of ``tp``: end offset first, then fetch from the earliest to it, then the
    earliest again (retention may have moved it during the read)."""
    consumer = clients.consumer
    ktp = TopicPartition(*tp)
    try:
        end = consumer.end_offsets([ktp])[ktp]
        consumer.assign([ktp])
        consumer.seek_to_beginning(ktp)
        records: dict[int, Record] = {}
        deadline = time.monotonic() + READ_TIMEOUT_S
        while consumer.position(ktp) < end:
            for batch in consumer.poll(timeout_ms=100, max_records=5000).values():
                for r in batch:
                    records[r.offset] = Record(r.key, r.value)
            if time.monotonic() > deadline:
                raise ReadIncomplete(f"{tp}: read reached {consumer.position(ktp)} of {end}")
        start = consumer.beginning_offsets([ktp])[ktp]
    except ReadIncomplete:
        raise
    except Exception:
        if not alive():
            raise BrokerGone() from None
        raise
    return Read(tp, start, end, {o: r for o, r in records.items() if o < end})


def _weights(focus: str) -> dict[str, float]:
    weights = {"produce": 6.0, "overwrite": 4.0, "read": 1.5, "delete-records": 0.5, "retention-config": 0.3,
               "topic-cycle": 0.3}
    boost = {"roll": ("produce", 3), "clean": ("overwrite", 4), "segment-delete": ("retention-config", 6),
             "topic-delete": ("topic-cycle", 20), "after-topic-deleted": ("topic-cycle", 20),
             "after-delete-records": ("delete-records", 20), "after-config-altered": ("retention-config", 20)}.get(focus)
    if boost:
        weights[boost[0]] *= boost[1]
    if focus == "segment-delete":
        weights["delete-records"] *= 6
    return weights


def _low_watermark(result: object, tp: TP) -> int | None:
    """kafka-python's DeleteRecords answer: ``{TopicPartition: {"low_watermark": n, ...}}`` (or
    the same as attributes); None when it says nothing usable."""
    if not isinstance(result, dict):
        return None
    entry = result.get(TopicPartition(*tp))
    if isinstance(entry, dict):
        value = entry.get("low_watermark")
    else:
        value = getattr(entry, "low_watermark", entry)
    return value if isinstance(value, int) else None
