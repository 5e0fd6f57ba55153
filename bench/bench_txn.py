"""Transactional produce through the wire: ``tidelog serve`` against a Kafka broker, and what
transactions cost over an idempotent produce. Both rows use confluent-kafka's ``Producer``
(librdkafka: it encodes and batches in C, so it pushes a broker harder than kafka-python's producer).

* ``txn_produce``: records/s of a transactional producer committing every 1,000 records
  (``begin_transaction``, 1,000 ``produce`` of a 100-byte value to partition 0, ``commit_transaction``)
  through ``tidelog serve``, against the same producer through a Kafka 4.3 broker of the benchmark's
  own, both running side by side; rounds alternate which broker goes first, every transfer on a fresh
  topic; medians of the rounds. Target: ratio >= 0.8. Each round also runs the idempotent transfer
  below on both brokers, so the details give what committing costs on Kafka too.
* ``txn_produce_overhead``: through ``tidelog serve`` only, the same transactional transfer (figure)
  against the same producer without a ``transactional.id`` (idempotent, ``enable.idempotence``: the
  producer ids and sequences, no transactions) sending the same records and flushing once (baseline).
  The ratio is what committing every 1,000 records costs a producer; informational, with the ratio of
  every round in the details (its spread is the noise). With 1,000-record transactions the commit's
  round trips dominate, on Kafka too, so this ratio is well below 1.
* ``txn_nontxn_produce`` (a second row of the same benchmark, same broker and rounds): what the
  transaction machinery costs a produce that uses none: the idempotent transfer into a partition where
  another producer holds a transaction open (its first unstable offset pinned before the clock starts,
  committed after it stops), against the idempotent transfer into a partition that never saw a
  transaction. This is the reading of "should be within noise": ratio ~1, the spread in the details.

What each row covers and the same-work checks: bench/README.md, "transactions".
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from bench.bench_kafka import BROKER_OVERRIDES, KAFKA, NotTheSameWork, kafka_missing, load_average, new_broker, skipped_rows
from bench.bench_kafka_wire import PF_VALUE_SIZE, STALL_TIMEOUT_S, TidelogServe, create_topics
from bench.bench_storage import Row, Settings, Target, median, scratch_dir

TXN_RECORDS = 1_000  # records per transaction
TXN_RATIO_TARGET = 0.8
# (records per transfer, rounds), full and --quick; plus a warm-up transfer of each kind on each broker
TXN_SIZES = ((100_000, 5), (5_000, 2))
OVERHEAD_SIZES = ((100_000, 7), (5_000, 3))
WARMUP_RECORDS = (20_000, 2_000)
PRODUCER_CONFIG = {"linger.ms": 5, "acks": "all", "client.id": "tidelog-bench"}


@dataclass(frozen=True, slots=True)
class Produced:
    """One timed transfer: records acknowledged, transactions committed, the seconds it took, the
    partition's end offset afterwards (read_committed: the last stable offset) and the median time of
    one ``commit_transaction`` call (0 without transactions)."""

    seconds: float
    records: int
    transactions: int
    end_offset: int
    commit_seconds: float = 0.0

    @property
    def records_per_s(self) -> float:
        return self.records / self.seconds


class _Deliveries:
    """Delivery reports of one transfer: how many records were acknowledged, the first error."""

    def __init__(self) -> None:
        self.acknowledged = 0
        self.error: Any = None

    def __call__(self, error: Any, message: Any) -> None:
        if error is not None:
            self.error = self.error or error
        else:
            self.acknowledged += 1


def _producer(bootstrap: str, transactional_id: str | None) -> Any:
    from confluent_kafka import Producer

    config: dict[str, Any] = {"bootstrap.servers": bootstrap, **PRODUCER_CONFIG}
    if transactional_id is None:
        config["enable.idempotence"] = True
    else:
        config["transactional.id"] = transactional_id
    return Producer(config)


def _produce(producer: Any, topic: str, value: bytes, count: int, deliveries: _Deliveries) -> None:
    """``count`` ``produce`` calls, polling for delivery reports whenever the local queue is full."""
    for _ in range(count):
        while True:
            try:
                producer.produce(topic, value, partition=0, on_delivery=deliveries)
                break
            except BufferError:
                producer.poll(0.05)


def transactional_produce(bootstrap: str, topic: str, count: int, transactional_id: str) -> Produced:
    """Time ``count`` records in transactions of :data:`TXN_RECORDS`, each committed before the next
    begins (``commit_transaction`` waits for every record of it); ``init_transactions`` (finding the
    coordinator, the producer id) is before the clock starts."""
    producer = _producer(bootstrap, transactional_id)
    producer.init_transactions(STALL_TIMEOUT_S)
    deliveries, value = _Deliveries(), bytes(PF_VALUE_SIZE)
    transactions = -(-count // TXN_RECORDS)
    commits: list[float] = []

    def run() -> None:
        for number in range(transactions):
            producer.begin_transaction()
            _produce(producer, topic, value, min(TXN_RECORDS, count - number * TXN_RECORDS), deliveries)
            began = time.perf_counter()
            producer.commit_transaction(STALL_TIMEOUT_S)
            commits.append(time.perf_counter() - began)

    seconds = _seconds(run)
    producer.flush(STALL_TIMEOUT_S)
    produced = _checked(bootstrap, topic, seconds, count, transactions, deliveries)
    return replace(produced, commit_seconds=median(commits))


def idempotent_produce(bootstrap: str, topic: str, count: int, earlier: int = 0,
                       before_check: Callable[[], int] | None = None) -> Produced:
    """Time ``count`` records from an idempotent producer (no transactional id), then ``flush``
    (every record acknowledged); one record produced and flushed before the clock starts makes sure
    the producer id is there (librdkafka has no call that waits for it alone). ``earlier``: records
    already in the partition; ``before_check`` runs after the clock stops and before the end offset
    is checked, and returns the commit markers it added (it ends another producer's transaction)."""
    producer = _producer(bootstrap, None)
    deliveries, value = _Deliveries(), bytes(PF_VALUE_SIZE)
    producer.produce(topic, value, partition=0, on_delivery=deliveries)
    if producer.flush(STALL_TIMEOUT_S) or deliveries.acknowledged != 1:
        raise NotTheSameWork(f"idempotent produce to {topic} at {bootstrap}: the first record was not acknowledged "
                             f"in {STALL_TIMEOUT_S:.0f} s (error: {deliveries.error})")
    deliveries.acknowledged = 0

    def run() -> None:
        _produce(producer, topic, value, count, deliveries)
        if producer.flush(STALL_TIMEOUT_S):
            raise NotTheSameWork(f"idempotent produce to {topic}: records still queued after {STALL_TIMEOUT_S:.0f} s")

    seconds = _seconds(run)
    markers = before_check() if before_check is not None else 0
    produced = _checked(bootstrap, topic, seconds, count, markers, deliveries, earlier=earlier + 1)
    return replace(produced, transactions=0)


def idempotent_beside_open_transaction(bootstrap: str, topic: str, count: int, transactional_id: str) -> Produced:
    """:func:`idempotent_produce` into a partition where another producer holds a transaction open
    (one record produced in it before the clock starts, so the partition has an ongoing transaction
    and its last stable offset stays behind it), committed after the clock stops."""
    holder = _producer(bootstrap, transactional_id)
    holder.init_transactions(STALL_TIMEOUT_S)
    holder.begin_transaction()
    deliveries = _Deliveries()
    holder.produce(topic, bytes(PF_VALUE_SIZE), partition=0, on_delivery=deliveries)
    if holder.flush(STALL_TIMEOUT_S) or deliveries.acknowledged != 1:
        raise NotTheSameWork(f"transactional record to {topic} at {bootstrap} not acknowledged (error: {deliveries.error})")

    def commit() -> int:
        holder.commit_transaction(STALL_TIMEOUT_S)
        return 1

    return idempotent_produce(bootstrap, topic, count, earlier=1, before_check=commit)


def _seconds(action: Callable[[], None]) -> float:
    began = time.perf_counter()
    action()
    return time.perf_counter() - began


def _checked(bootstrap: str, topic: str, seconds: float, count: int, transactions: int,
             deliveries: _Deliveries, earlier: int = 0) -> Produced:
    """Every record acknowledged without error, and the partition's read_committed end offset is the
    ``earlier`` records produced before the clock started, plus the records, plus one commit marker
    per transaction."""
    if deliveries.error is not None or deliveries.acknowledged != count:
        raise NotTheSameWork(f"produce to {topic} at {bootstrap}: {deliveries.acknowledged} of {count} records "
                             f"acknowledged (first error: {deliveries.error})")
    end = committed_end_offset(bootstrap, topic)
    if end != earlier + count + transactions:
        raise NotTheSameWork(f"{topic} at {bootstrap} ends at {end} (read_committed), expected {earlier} + {count} "
                             f"records + {transactions} commit markers = {earlier + count + transactions}")
    return Produced(seconds, count, transactions, end)


def committed_end_offset(bootstrap: str, topic: str) -> int:
    """Partition 0's end offset as a read_committed consumer sees it (ListOffsets: the last stable offset)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "tidelog-bench-txn",
                         "isolation.level": "read_committed", "enable.auto.commit": False})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=STALL_TIMEOUT_S)[1]
    finally:
        consumer.close()


# --- txn_produce: tidelog serve vs Kafka ------------------------------------------------------------

def bench_txn_produce(settings: Settings) -> list[Row]:
    missing = kafka_missing()
    if missing is not None:
        return skipped_rows(["txn_produce"], "records/s", missing)
    with scratch_dir(settings.work_dir / "txn-produce") as root:
        return _txn_produce_rows(settings, root)


def _txn_produce_rows(settings: Settings, root: Path) -> list[Row]:
    records, rounds = settings.pick(*TXN_SIZES)
    topics = [topic for number in range(rounds + 1) for topic in _overhead_topics(number)]
    broker = new_broker(root)
    serve = TidelogServe(root / "tidelog-data", root / "tidelog-serve.stderr", BROKER_OVERRIDES)
    runs: dict[str, dict[str, list[Produced]]] = {side: {"txn": [], "idempotent": []} for side in ("kafka", "tidelog")}
    loads: list[Any] = []
    try:
        broker.start()
        serve.start()
        sides = {"kafka": broker.bootstrap_servers, "tidelog": serve.bootstrap_servers}
        for bootstrap in sides.values():
            create_topics(bootstrap, topics)
            warm_txn, warm_idem = _overhead_topics(0)
            transactional_produce(bootstrap, warm_txn, settings.pick(*WARMUP_RECORDS), "bench-txn-warmup")
            idempotent_produce(bootstrap, warm_idem, settings.pick(*WARMUP_RECORDS))
        for number in range(1, rounds + 1):
            txn_topic, idem_topic = _overhead_topics(number)
            for side in (("kafka", "tidelog") if number % 2 else ("tidelog", "kafka")):
                runs[side]["txn"].append(transactional_produce(sides[side], txn_topic, records, f"bench-txn-{number}"))
                runs[side]["idempotent"].append(idempotent_produce(sides[side], idem_topic, records))
            loads.append(load_average())
        serve.stop()
        broker.stop()
    finally:
        serve.kill()
        broker.kill()
    rates = {side: {kind: [r.records_per_s for r in produced] for kind, produced in kinds.items()}
             for side, kinds in runs.items()}
    ours, kafka = rates["tidelog"]["txn"], rates["kafka"]["txn"]
    details = {"kafka_version": KAFKA.version, "client": "confluent-kafka (librdkafka)", "records": records,
               "records_per_transaction": TXN_RECORDS, "transactions": runs["tidelog"]["txn"][0].transactions,
               "rounds": rounds, "tidelog_records_per_s": ours, "kafka_records_per_s": kafka,
               # the same producer without transactions, same rounds: what committing costs on each broker
               "tidelog_idempotent_records_per_s": rates["tidelog"]["idempotent"],
               "kafka_idempotent_records_per_s": rates["kafka"]["idempotent"],
               "tidelog_commit_ms": [r.commit_seconds * 1000 for r in runs["tidelog"]["txn"]],
               "kafka_commit_ms": [r.commit_seconds * 1000 for r in runs["kafka"]["txn"]],
               "tidelog_txn_over_idempotent": median(ours) / median(rates["tidelog"]["idempotent"]),
               "kafka_txn_over_idempotent": median(kafka) / median(rates["kafka"]["idempotent"]),
               "producer_config": PRODUCER_CONFIG, "load_average_1m": loads}
    return [Row("txn_produce", f"confluent-kafka transactional producer, commit every {TXN_RECORDS:,} records: "
                f"{records:,} x {PF_VALUE_SIZE} B", median(ours), "records/s", median(kafka),
                f"Kafka {KAFKA.version} broker, same client",
                Target("ratio", TXN_RATIO_TARGET, f">= {TXN_RATIO_TARGET}x Kafka"), details)]


# --- txn_produce_overhead: transactional vs idempotent, through tidelog ------------------------------

def bench_txn_produce_overhead(settings: Settings) -> list[Row]:
    with scratch_dir(settings.work_dir / "txn-overhead") as root:
        return _overhead_rows(settings, root)


def _overhead_rows(settings: Settings, root: Path) -> list[Row]:
    records, rounds = settings.pick(*OVERHEAD_SIZES)
    serve = TidelogServe(root / "tidelog-data", root / "tidelog-serve.stderr", BROKER_OVERRIDES)
    transactional: list[Produced] = []
    idempotent: list[Produced] = []
    beside: list[Produced] = []
    loads: list[Any] = []
    try:
        serve.start()
        bootstrap = serve.bootstrap_servers
        create_topics(bootstrap, [topic for number in range(rounds + 1)
                                  for topic in (*_overhead_topics(number), _beside_topic(number))])
        warm_txn, warm_idem = _overhead_topics(0)
        transactional_produce(bootstrap, warm_txn, settings.pick(*WARMUP_RECORDS), "bench-overhead-warmup")
        idempotent_produce(bootstrap, warm_idem, settings.pick(*WARMUP_RECORDS))
        idempotent_beside_open_transaction(bootstrap, _beside_topic(0), settings.pick(*WARMUP_RECORDS),
                                           "bench-beside-warmup")
        for number in range(1, rounds + 1):
            txn_topic, idem_topic = _overhead_topics(number)
            steps = [lambda: transactional.append(transactional_produce(bootstrap, txn_topic, records,
                                                                        f"bench-overhead-{number}")),
                     lambda: idempotent.append(idempotent_produce(bootstrap, idem_topic, records)),
                     lambda: beside.append(idempotent_beside_open_transaction(bootstrap, _beside_topic(number), records,
                                                                              f"bench-beside-{number}"))]
            for step in (steps if number % 2 else steps[::-1]):
                step()
            loads.append(load_average())
        serve.stop()
    finally:
        serve.kill()
    return [overhead_row(transactional, idempotent, records, loads), beside_row(beside, idempotent, records, loads)]


def _overhead_topics(number: int) -> tuple[str, str]:
    return f"bench-overhead-txn-{number}", f"bench-overhead-idem-{number}"


def _beside_topic(number: int) -> str:
    return f"bench-overhead-beside-{number}"


def beside_row(beside: Sequence[Produced], idempotent: Sequence[Produced], records: int, loads: Sequence[Any]) -> Row:
    figure, baseline = [r.records_per_s for r in beside], [r.records_per_s for r in idempotent]
    ratios = [f / b for f, b in zip(figure, baseline)]
    details = {"client": "confluent-kafka (librdkafka)", "records": records, "rounds": len(ratios),
               "beside_open_transaction_records_per_s": figure, "idempotent_records_per_s": baseline,
               "round_ratios": ratios, "ratio_spread": [min(ratios), max(ratios)], "producer_config": PRODUCER_CONFIG,
               "load_average_1m": list(loads)}
    return Row("txn_nontxn_produce", f"tidelog serve, idempotent producer into a partition where another producer's "
               f"transaction is open: {records:,} x {PF_VALUE_SIZE} B (round ratios {min(ratios):.2f}-{max(ratios):.2f})",
               median(figure), "records/s", median(baseline), "same producer, partition without transactions",
               None, details)


def overhead_row(transactional: Sequence[Produced], idempotent: Sequence[Produced], records: int,
                 loads: Sequence[Any]) -> Row:
    txn, idem = [r.records_per_s for r in transactional], [r.records_per_s for r in idempotent]
    ratios = [t / i for t, i in zip(txn, idem)]
    details = {"client": "confluent-kafka (librdkafka)", "records": records, "records_per_transaction": TXN_RECORDS,
               "rounds": len(ratios), "transactional_records_per_s": txn, "idempotent_records_per_s": idem,
               "round_ratios": ratios, "commit_ms": [r.commit_seconds * 1000 for r in transactional], "ratio_spread": [min(ratios), max(ratios)],
               "producer_config": PRODUCER_CONFIG, "load_average_1m": list(loads)}
    return Row("txn_produce_overhead", f"tidelog serve, transactional producer committing every {TXN_RECORDS:,} "
               f"records: {records:,} x {PF_VALUE_SIZE} B (round ratios {min(ratios):.2f}-{max(ratios):.2f})",
               median(txn), "records/s", median(idem), "same producer, idempotent, no transactional.id",
               None, details)


BENCHMARKS = {
    "txn_produce": (f"transactional produce (commit every {TXN_RECORDS:,}): tidelog serve vs a Kafka "
                    f"{KAFKA.version} broker, same producer", bench_txn_produce),
    "txn_produce_overhead": ("through tidelog serve: transactional vs idempotent produce; idempotent produce "
                             "beside an open transaction vs without",
                             bench_txn_produce_overhead),
}
