"""Side-by-side produce and fetch through the wire: ``tidelog serve`` against a Kafka broker, same
clients (section 3 of the Kafka benchmarks; bench/bench_kafka.py has the rest and registers it).

What each row covers, the warm-up and the same-work checks: bench/README.md, "Against Kafka".
"""

from __future__ import annotations

import os
import re
import signal
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bench.bench_kafka import (
    BROKER_OVERRIDES, KAFKA, PRODUCE_FETCH_ROWS, NotTheSameWork, kafka_missing, load_average, new_broker,
    skipped_rows,
)
from bench.bench_storage import MIB, Row, Settings, Target, median, now_ms, scratch_dir, seconds_of
from tidelog.records.scan import walk_batch_headers


# --- 3. produce and fetch through the wire -------------------------------------------------------
# Both brokers run side by side, as processes of their own; the same two clients talk to each.

PF_VALUE_SIZE = 100
PF_BATCH_RECORDS = 500  # records per pre-encoded batch of the lean client
PF_POOL_BATCHES = 16  # distinct pre-encoded batches, sent over and over (the broker assigns offsets)
PF_IN_FLIGHT = 8  # lean produce requests in flight on one connection
PF_FETCH_BYTES = MIB  # fetch max bytes and partition max bytes, both clients
PRODUCE_VERSION, FETCH_VERSION = 9, 12  # served by both brokers; Fetch v12 still names topics
PRODUCER_SETTINGS = {"acks": 1, "linger_ms": 5, "batch_size": 256 * 1024,
                     "max_request_size": PF_FETCH_BYTES}
CONSUMER_SETTINGS = {"group_id": None, "enable_auto_commit": False, "auto_offset_reset": "earliest",
                     "fetch_max_bytes": PF_FETCH_BYTES, "max_partition_fetch_bytes": PF_FETCH_BYTES,
                     "max_poll_records": 10_000}
PF_ROUNDS = (5, 2)  # timed rounds (full, --quick), after the warm-up round
PF_TARGET = Target("ratio", 1.0, ">= 1.0x Kafka")  # the rows whose client can push a broker
PF_TARGETED_ROWS = ("kafka_produce_lean", "kafka_fetch_lean", "kafka_produce_librdkafka", "kafka_fetch_librdkafka")
SERVE_START_TIMEOUT_S = 60.0
STALL_TIMEOUT_S = 60.0  # a transfer that makes no progress for this long fails the benchmark
_BANNER = re.compile(r"listening on PLAINTEXT://127\.0\.0\.1:(\d+)")
_INT32 = struct.Struct(">i")


class TidelogServe:
    """``tidelog serve`` as its own process (``python -m tidelog.cli.main``), listening on a
    loopback port the OS picks (read from its "listening on" banner on stderr, kept in a file)."""

    def __init__(self, data_dir: Path, stderr_path: Path, overrides: dict[str, str]) -> None:
        self.data_dir, self.stderr_path, self.overrides = data_dir, stderr_path, overrides
        self.bootstrap_servers = ""
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        options = [item for key, value in {**self.overrides, "listeners": "PLAINTEXT://127.0.0.1:0"}.items()
                   for item in ("--override", f"{key}={value}")]
        with open(self.stderr_path, "wb") as stderr:
            self._process = subprocess.Popen(
                [sys.executable, "-m", "tidelog.cli.main", "--data-dir", str(self.data_dir), *options, "serve"],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=stderr)
        deadline = time.monotonic() + SERVE_START_TIMEOUT_S
        while (match := _BANNER.search(self.stderr_path.read_text(errors="replace"))) is None:
            if self._process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"tidelog serve did not start:\n{self.stderr_path.read_text(errors='replace')}")
            time.sleep(0.05)
        self.bootstrap_servers = f"127.0.0.1:{match[1]}"

    @property
    def port(self) -> int:
        return int(self.bootstrap_servers.rsplit(":", 1)[1])

    @property
    def pid(self) -> int:
        assert self._process is not None, "not started"
        return self._process.pid

    def stop(self) -> None:
        """SIGTERM, as an operator stops it: a clean shutdown (exit status 0) or an error."""
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        if process.wait(timeout=60) != 0:
            raise RuntimeError(f"tidelog serve exited with {process.returncode}:\n"
                               f"{self.stderr_path.read_text(errors='replace')[-2000:]}")

    def kill(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.kill()
            self._process.wait()
        self._process = None


@dataclass(frozen=True, slots=True)
class Transfer:
    """One timed produce or fetch: records and bytes moved, and the log end offset seen."""

    seconds: float
    records: int
    bytes: int
    log_end_offset: int

    @property
    def records_per_s(self) -> float:
        return self.records / self.seconds


def create_topics(bootstrap: str, topics: Sequence[str]) -> None:
    """Create one-partition topics through a running broker (either kind), as a client would."""
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="tidelog-bench")
    try:
        admin.create_topics([NewTopic(topic, 1, 1) for topic in topics])
    finally:
        admin.close()


def stalled(deadline: float, what: str) -> None:
    """Fail the benchmark when ``deadline`` (monotonic seconds) has passed without progress."""
    if time.monotonic() > deadline:
        raise NotTheSameWork(f"{what}: no progress in {STALL_TIMEOUT_S:.0f} s")


# kafka-python's own producer and consumer

def python_produce(bootstrap: str, topic: str, count: int) -> Transfer:
    """Time ``count`` ``KafkaProducer.send`` of a 100-byte value to partition 0, then ``flush``
    (every record acknowledged); connecting and fetching metadata are before the clock starts."""
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, client_id="tidelog-bench", **PRODUCER_SETTINGS)
    try:
        producer.partitions_for(topic)
        futures: list[Any] = []
        seconds = seconds_of(lambda: _send_all(producer, topic, count, futures))
        offsets = [future.get(timeout=0).offset for future in futures]  # raises a failed send's error
    finally:
        producer.close()
    if offsets != list(range(count)):
        raise NotTheSameWork(f"kafka-python's records of {topic} did not land at offsets 0..{count - 1}")
    return Transfer(seconds, count, count * PF_VALUE_SIZE, offsets[-1] + 1)


def _send_all(producer: Any, topic: str, count: int, futures: list[Any]) -> None:
    value = bytes(PF_VALUE_SIZE)
    futures.extend(producer.send(topic, value, partition=0) for _ in range(count))
    producer.flush(timeout=STALL_TIMEOUT_S)


def python_fetch(bootstrap: str, topic: str, count: int) -> Transfer:
    """Time a ``KafkaConsumer`` (no group, partition 0 assigned, from the beginning) polling until it
    has ``count`` records; the log end offset is asked for afterwards."""
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KafkaTp

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, client_id="tidelog-bench", **CONSUMER_SETTINGS)
    partition = KafkaTp(topic, 0)
    try:
        consumer.assign([partition])
        got: list[int] = [0, 0]
        seconds = seconds_of(lambda: _poll_all(consumer, count, got))
        end = consumer.end_offsets([partition])[partition]
    finally:
        consumer.close()
    return Transfer(seconds, got[0], got[1], end)


def _poll_all(consumer: Any, count: int, got: list[int]) -> None:
    deadline = time.monotonic() + STALL_TIMEOUT_S
    while got[0] < count:
        for records in consumer.poll(timeout_ms=500).values():
            got[0] += len(records)
            got[1] += sum(len(record.value) for record in records)
            deadline = time.monotonic() + STALL_TIMEOUT_S
        stalled(deadline, f"kafka-python consumer at {got[0]} of {count} records")


# the lean client: pre-encoded requests on a raw socket

class WireClient:
    """One blocking connection speaking Kafka's protocol with kafka-python's message classes."""

    def __init__(self, bootstrap: str) -> None:
        host, _, port = bootstrap.rpartition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=STALL_TIMEOUT_S)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._reader = self.sock.makefile("rb", buffering=4 * MIB)

    def read_frame(self) -> bytes:
        """The next response (header and body, without the size prefix)."""
        head = self._reader.read(_INT32.size)
        if len(head) < _INT32.size:
            raise ConnectionError("the broker closed the connection")
        (size,) = _INT32.unpack(head)
        return self._reader.read(size)

    def close(self) -> None:
        self._reader.close()
        self.sock.close()


def encode_request(request: Any, version: int, correlation_id: int) -> bytes:
    request.API_VERSION = version
    request.with_header(correlation_id=correlation_id, client_id="tidelog-bench")
    return bytes(request.encode(header=True, framed=True))


def produce_frames(topic: str, batches: Sequence[bytes]) -> list[bytes]:
    """One framed Produce request (acks=1) per batch."""
    from kafka.protocol.producer import ProduceRequest

    data = ProduceRequest.TopicProduceData
    return [encode_request(ProduceRequest(transactional_id=None, acks=1, timeout_ms=30_000, topic_data=[
        data(name=topic, partition_data=[data.PartitionProduceData(index=0, records=batch)])]), PRODUCE_VERSION, i)
        for i, batch in enumerate(batches)]


def lean_batches(seed: int) -> list[bytes]:
    """:data:`PF_POOL_BATCHES` distinct batches of :data:`PF_BATCH_RECORDS` keyless 100-byte values."""
    from tidelog.records import build_batch

    rng = np.random.default_rng(seed)
    return [build_batch([(None, rng.bytes(PF_VALUE_SIZE)) for _ in range(PF_BATCH_RECORDS)], timestamp=now_ms())
            for _ in range(PF_POOL_BATCHES)]


def lean_produce(bootstrap: str, topic: str, batches: Sequence[bytes], requests: int) -> Transfer:
    """Time ``requests`` Produce requests of the pool's batches, :data:`PF_IN_FLIGHT` in flight,
    until the last response is read; the responses are decoded and checked after the clock stops."""
    from kafka.protocol.producer import ProduceResponse

    frames = produce_frames(topic, batches)
    client = WireClient(bootstrap)
    try:
        responses: list[bytes] = []
        seconds = seconds_of(lambda: _pipeline(client, frames, requests, responses))
    finally:
        client.close()
    base_offsets = []
    for frame in responses:
        partition = ProduceResponse[PRODUCE_VERSION].decode(frame, header=True).responses[0].partition_responses[0]
        if partition.error_code != 0:
            raise NotTheSameWork(f"lean produce to {topic} failed with error code {partition.error_code}")
        base_offsets.append(partition.base_offset)
    if base_offsets != list(range(0, requests * PF_BATCH_RECORDS, PF_BATCH_RECORDS)):
        raise NotTheSameWork(f"lean produce to {topic}: batches did not land one after the other")
    sent = sum(len(batches[i % len(batches)]) for i in range(requests))
    return Transfer(seconds, requests * PF_BATCH_RECORDS, sent, requests * PF_BATCH_RECORDS)


def _pipeline(client: WireClient, frames: Sequence[bytes], requests: int, responses: list[bytes]) -> None:
    sent = 0
    while len(responses) < requests:
        while sent < requests and sent - len(responses) < PF_IN_FLIGHT:
            client.sock.sendall(frames[sent % len(frames)])
            sent += 1
        responses.append(client.read_frame())


def lean_fetch(bootstrap: str, topic: str, end_offset: int) -> Transfer:
    """Time Fetch requests of :data:`PF_FETCH_BYTES` from offset 0 until ``end_offset``, one at a
    time (the next offset comes from the last whole batch returned), records and bytes counted
    from the batch headers."""
    client = WireClient(bootstrap)
    try:
        state = [0, 0, 0, -1]  # next offset, records, batch bytes, high watermark
        seconds = seconds_of(lambda: _fetch_until(client, topic, end_offset, state))
    finally:
        client.close()
    return Transfer(seconds, state[1], state[2], state[3])


def _fetch_until(client: WireClient, topic: str, end_offset: int, state: list[int]) -> None:
    from kafka.protocol.consumer import FetchRequest, FetchResponse

    fetch = FetchRequest.FetchTopic
    deadline = time.monotonic() + STALL_TIMEOUT_S
    while state[0] < end_offset:
        request = FetchRequest(replica_id=-1, max_wait_ms=500, min_bytes=1, max_bytes=PF_FETCH_BYTES, isolation_level=0,
                               session_id=0, session_epoch=-1, topics=[fetch(topic=topic, partitions=[
                                   fetch.FetchPartition(partition=0, current_leader_epoch=-1, fetch_offset=state[0],
                                                        last_fetched_epoch=-1, log_start_offset=-1,
                                                        partition_max_bytes=PF_FETCH_BYTES)])],
                               forgotten_topics_data=[], rack_id="")
        client.sock.sendall(encode_request(request, FETCH_VERSION, 0))
        partition = FetchResponse[FETCH_VERSION].decode(client.read_frame(), header=True).responses[0].partitions[0]
        if partition.error_code != 0:
            raise NotTheSameWork(f"lean fetch of {topic} at offset {state[0]}: error code {partition.error_code}")
        state[3] = partition.high_watermark
        if _count_batches(partition.records or b"", state):
            deadline = time.monotonic() + STALL_TIMEOUT_S
        stalled(deadline, f"lean fetch of {topic} at offset {state[0]} of {end_offset}")


def _count_batches(records: bytes, state: list[int]) -> bool:
    """Count the whole v2 batches of a fetched ``records`` from the wanted offset on into ``state``
    (a partial batch at the end is dropped, as clients drop it); whether any was counted."""
    batches = walk_batch_headers(records).batches
    wanted = batches["last_offset"] >= state[0]
    if not wanted.any():
        return False
    state[0] = int(batches["last_offset"][wanted][-1]) + 1
    state[1] += int(batches["records_count"][wanted].sum())
    state[2] += int(batches["size"][wanted].sum())
    return True


# one round on one broker, the rounds alternating, the rows

@dataclass(frozen=True, slots=True)
class ProduceFetchSizes:
    """Records per transfer: kafka-python's, the lean client's (whole pre-encoded batches) and
    librdkafka's (1 KB records)."""

    python_records: int
    lean_requests: int
    rdkafka_records: int

    @property
    def lean_records(self) -> int:
        return self.lean_requests * PF_BATCH_RECORDS


def produce_fetch_round(bootstrap: str, number: int, sizes: ProduceFetchSizes,
                        batches: Sequence[bytes]) -> dict[str, Transfer]:
    """The six transfers of one round on one broker, each client on a topic of its own (made up front)."""
    from bench.bench_kafka_rdkafka import rdkafka_fetch, rdkafka_produce, rdkafka_value

    python_topic, lean_topic, rdkafka_topic = round_topics(number)
    produced = python_produce(bootstrap, python_topic, sizes.python_records)
    fetched = python_fetch(bootstrap, python_topic, sizes.python_records)
    lean_produced = lean_produce(bootstrap, lean_topic, batches, sizes.lean_requests)
    lean_fetched = lean_fetch(bootstrap, lean_topic, lean_produced.log_end_offset)
    rd_produced = rdkafka_produce(bootstrap, rdkafka_topic, sizes.rdkafka_records, rdkafka_value())
    rd_fetched = rdkafka_fetch(bootstrap, rdkafka_topic, sizes.rdkafka_records)
    return dict(zip(PRODUCE_FETCH_ROWS, (produced, fetched, lean_produced, lean_fetched, rd_produced, rd_fetched)))


def round_topics(number: int) -> tuple[str, str, str]:
    """The topics of round ``number`` (0: the warm-up): kafka-python's, the lean client's, librdkafka's."""
    return f"bench-pf-python-{number}", f"bench-pf-lean-{number}", f"bench-pf-librdkafka-{number}"


def check_same_transfers(kafka: dict[str, Transfer], ours: dict[str, Transfer], sizes: ProduceFetchSizes) -> None:
    """Both logs end at the offset of the records produced, and every fetch read back exactly the
    records (and bytes: values, or for the lean client whole batches) that were produced."""
    problems = []
    for side, runs in (("Kafka", kafka), ("tidelog", ours)):
        for produce, fetch, records in (("kafka_produce", "kafka_fetch", sizes.python_records),
                                        ("kafka_produce_lean", "kafka_fetch_lean", sizes.lean_records),
                                        ("kafka_produce_librdkafka", "kafka_fetch_librdkafka", sizes.rdkafka_records)):
            made, read = runs[produce], runs[fetch]
            if not made.records == read.records == records or made.bytes != read.bytes:
                problems.append(f"{side} {fetch}: {read.records} records / {read.bytes} bytes read of "
                                f"{made.records} / {made.bytes} produced (expected {records} records)")
            if not made.log_end_offset == read.log_end_offset == records:
                problems.append(f"{side} {fetch}: log ends at {read.log_end_offset}, expected {records}")
    if problems:
        raise NotTheSameWork("produce/fetch did different work: " + "; ".join(problems))


def bench_kafka_produce_fetch(settings: Settings) -> list[Row]:
    missing = kafka_missing()
    if missing is not None:
        return skipped_rows(PRODUCE_FETCH_ROWS, "records/s", missing)
    with scratch_dir(settings.work_dir / "kafka-produce-fetch") as root:
        return _produce_fetch_rows(settings, root)


def _produce_fetch_rows(settings: Settings, root: Path) -> list[Row]:
    sizes = ProduceFetchSizes(settings.pick(100_000, 5_000), settings.pick(4_000, 100), settings.pick(200_000, 10_000))
    # Kafka's JIT needs millions of records to settle: see README
    warmup = ProduceFetchSizes(settings.pick(20_000, 2_000), settings.pick(6_000, 40), settings.pick(100_000, 5_000))
    rounds = settings.pick(*PF_ROUNDS)
    batches = lean_batches(seed=7)
    topics = [topic for number in range(rounds + 1) for topic in round_topics(number)]
    broker = new_broker(root)
    serve = TidelogServe(root / "tidelog-data", root / "tidelog-serve.stderr", BROKER_OVERRIDES)
    try:
        broker.start()
        serve.start()
        for bootstrap in (broker.bootstrap_servers, serve.bootstrap_servers):
            create_topics(bootstrap, topics)
        for bootstrap in (broker.bootstrap_servers, serve.bootstrap_servers):  # round 0: the warm-up
            produce_fetch_round(bootstrap, 0, warmup, batches)
        kafka_runs, our_runs, loads = _alternate(broker.bootstrap_servers, serve.bootstrap_servers, rounds,
                                                 sizes, batches)
        serve.stop()
        broker.stop()
    finally:
        serve.kill()
        broker.kill()
    return _produce_fetch_result(kafka_runs, our_runs, loads)


def _alternate(kafka: str, ours: str, rounds: int, sizes: ProduceFetchSizes,
               batches: Sequence[bytes]) -> tuple[list[dict[str, Transfer]], list[dict[str, Transfer]], list[Any]]:
    """Rounds 1..``rounds``, Kafka first in odd rounds, tidelog first in even ones. Each broker's
    round starts with no dirty page (``os.sync``): a round writes ~430 MB, and without it the
    kernel's background writeback of earlier rounds (past ``dirty_background_ratio``, ~2 GB here
    from the second round on) ran inside whichever broker's transfers came next."""
    kafka_runs, our_runs, loads = [], [], []
    for number in range(1, rounds + 1):
        for bootstrap in ((kafka, ours) if number % 2 else (ours, kafka)):
            os.sync()
            runs = kafka_runs if bootstrap == kafka else our_runs
            runs.append(produce_fetch_round(bootstrap, number, sizes, batches))
        loads.append(load_average())
        check_same_transfers(kafka_runs[-1], our_runs[-1], sizes)
    return kafka_runs, our_runs, loads


PF_LABELS = {
    "kafka_produce": "kafka-python KafkaProducer (acks=1, linger 5 ms, 256 KiB batches): {records:,} x 100 B",
    "kafka_fetch": "kafka-python KafkaConsumer (assign, from the start, 1 MiB fetches) of those records",
    "kafka_produce_lean": "lean client: pre-encoded 500-record batches, 8 Produce in flight: {records:,} x 100 B",
    "kafka_fetch_lean": "lean client: 1 MiB Fetch requests, one at a time, of those records",
    "kafka_produce_librdkafka": "confluent-kafka Producer at its defaults (acks=all, linger 5 ms): {records:,} x 1 KB",
    "kafka_fetch_librdkafka": "confluent-kafka Consumer at its defaults (assigned, from the start) of those records",
}


def _produce_fetch_result(kafka_runs: Sequence[dict[str, Transfer]], our_runs: Sequence[dict[str, Transfer]],
                          loads: Sequence[Any]) -> list[Row]:
    """One row per transfer: the medians of the rounds, every round's figures and ratio (ours over
    Kafka's in the same round) in the details."""
    from bench.bench_kafka_rdkafka import CONSUMER_CONFIG, PRODUCER_CONFIG

    rows = []
    for name in PRODUCE_FETCH_ROWS:
        ours = [run[name].records_per_s for run in our_runs]
        kafka = [run[name].records_per_s for run in kafka_runs]
        ratios = [mine / theirs for mine, theirs in zip(ours, kafka)]
        records = our_runs[0][name].records
        targeted = name in PF_TARGETED_ROWS
        details: dict[str, Any] = {
            "kafka_version": KAFKA.version, "records": records, "bytes": our_runs[0][name].bytes,
            "rounds": len(ours), "tidelog_first": [number % 2 == 0 for number in range(1, len(ours) + 1)],
            "tidelog_records_per_s": ours, "kafka_records_per_s": kafka, "round_ratios": ratios,
            "round_ratio_spread": [min(ratios), max(ratios)], "load_average_1m": list(loads)}
        if not targeted:
            details["goal"] = ">= 1.0x Kafka (client-bound: informational)"
        if name == "kafka_produce":
            details["producer_settings"] = PRODUCER_SETTINGS
        if name == "kafka_produce_librdkafka":
            details["producer_settings"] = PRODUCER_CONFIG or "librdkafka defaults"
        if name == "kafka_fetch_librdkafka":
            details["consumer_settings"] = CONSUMER_CONFIG
        rows.append(Row(name, PF_LABELS[name].format(records=records), median(ours), "records/s", median(kafka),
                        f"Kafka {KAFKA.version} broker, same client", PF_TARGET if targeted else None, details))
    return rows
