"""The server's own figures (issue 5): memory per idle connection, and produce latency at half of
the maximum produce rate, against a ``tidelog serve`` process (bench_kafka_wire.TidelogServe).

* ``server_idle_connections``: the RSS growth of ``tidelog serve`` holding 1,000 client
  connections (100 with ``--quick``), each answered one ApiVersions request and then idle.
  Growth = RSS with them held minus RSS after one warm-up connection came and went, before the
  first of them connects (kernel socket buffers are not in any process's RSS). Figure =
  connections held per 200 MB at the measured cost (higher is better), so the target "1,000 idle
  connections in < 200 MB" is ``at_least 1000``; MB and KB per connection are in the details.
  Baseline: the same for a bare asyncio streams server in its own process (the least an asyncio
  server can hold a connection with: a StreamReader/Writer pair and a task each), answering the
  same request with a bare frame. The server must still answer a new connection while holding them.
* ``server_produce_latency``: confluent-kafka (librdkafka), acks=1, 100-byte values, one
  partition. First its maximum rate (everything queued, then flushed); then records paced at 50%
  of that rate for a few seconds, each record's latency taken from librdkafka's own
  ``Message.latency()`` (produce() call to delivery report). Figure: the p99, in ms. Baseline, when
  Kafka can run here (bench_kafka.kafka_missing): a Kafka broker's p99 under the same paced load
  at the same rate, after the same max-rate run (its JIT warm-up). Latencies are lower-is-better:
  the ratio ours/Kafka is good below 1. No target (the issue asks for the figure).
"""

from __future__ import annotations

import math
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.bench_kafka import BROKER_OVERRIDES, KAFKA, kafka_missing, new_broker
from bench.bench_kafka_wire import TidelogServe, create_topics, encode_request
from bench.bench_storage import MIB, Row, Settings, Target, scratch_dir

IDLE_BUDGET_BYTES = 200 * MIB
IDLE_TARGET_CONNECTIONS = 1000
VALUE_SIZE = 100
PACED_SECONDS = (5.0, 2.0)  # full, quick
# one producer configuration for both phases (librdkafka's defaults but acks; acks=1 also keeps
# idempotence, which needs acks=all, off), so the paced phase runs at half of what this very client reached
PRODUCER = {"acks": 1, "linger.ms": 5, "compression.type": "none",
            "queue.buffering.max.messages": 2_000_000}
_SIZE = struct.Struct(">i")


# --- idle connections ---------------------------------------------------------------------------

def status_bytes(pid: int, field: str) -> int:
    """A memory figure of ``pid`` from /proc/<pid>/status (``VmRSS``, ``VmHWM``), in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} for pid {pid}")


def answered_connection(port: int) -> socket.socket:
    """A connection that sent one ApiVersions and read its answer (the server now holds its state)."""
    from kafka.protocol.metadata import ApiVersionsRequest

    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    request = ApiVersionsRequest(client_software_name="tidelog-bench", client_software_version="1")
    sock.sendall(encode_request(request, 3, 1))
    read_exactly(sock, _SIZE.unpack(read_exactly(sock, _SIZE.size))[0])
    return sock


def read_exactly(sock: socket.socket, n: int) -> bytes:
    """``n`` bytes from ``sock``, received at most 1 MiB at a time (``recv(n)`` allocates ``n``)."""
    chunks = []
    while n:
        chunk = sock.recv(min(n, MIB))
        if not chunk:
            raise RuntimeError("tidelog serve closed a benchmark connection")
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


_BARE_SERVER = """
import asyncio, struct, sys

async def serve(reader, writer):
    try:
        while True:
            (size,) = struct.unpack(">i", await reader.readexactly(4))
            frame = await reader.readexactly(size)
            writer.write(struct.pack(">i", 4) + frame[4:8])  # the correlation id, nothing else
            await writer.drain()
    except (ConnectionError, asyncio.IncompleteReadError):
        writer.close()

async def main():
    server = await asyncio.start_server(serve, "127.0.0.1", 0, backlog=1024)
    print(server.sockets[0].getsockname()[1], flush=True)
    await server.serve_forever()

asyncio.run(main())
"""


def _hold(port: int, pid: int, count: int) -> tuple[int, int]:
    """RSS of ``pid`` before and while holding ``count`` answered connections to ``port``."""
    answered_connection(port).close()  # warm-up: the first request's imports and caches
    time.sleep(0.2)  # lets the server drop the warm-up connection
    before = status_bytes(pid, "VmRSS")
    held: list[socket.socket] = []
    try:
        held.extend(answered_connection(port) for _ in range(count))
        after = status_bytes(pid, "VmRSS")
        answered_connection(port).close()  # still serving
    finally:
        for sock in held:
            sock.close()
    return before, after


def _bare_asyncio(count: int) -> tuple[int, int]:
    process = subprocess.Popen([sys.executable, "-c", _BARE_SERVER], stdin=subprocess.DEVNULL,
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        assert process.stdout is not None
        port = int(process.stdout.readline())
        return _hold(port, process.pid, count)
    finally:
        process.kill()
        process.wait()


def bench_server_idle_connections(settings: Settings) -> list[Row]:
    count = settings.pick(IDLE_TARGET_CONNECTIONS, 100)
    with scratch_dir(settings.work_dir / "server-idle") as root:
        serve = TidelogServe(root / "data", root / "serve.stderr", {})
        serve.start()
        try:
            ours = _hold(serve.port, serve.pid, count)
            serve.stop()
        finally:
            serve.kill()
    return [_idle_row(count, ours, _bare_asyncio(count))]


def _idle_row(count: int, ours: tuple[int, int], bare: tuple[int, int]) -> Row:
    growth, bare_growth = max(ours[1] - ours[0], 1), max(bare[1] - bare[0], 1)
    details = {"connections": count, "rss_before_mb": ours[0] / MIB, "rss_after_mb": ours[1] / MIB,
               "growth_mb": growth / MIB, "kb_per_connection": growth / 1024 / count,
               "bare_asyncio_growth_mb": bare_growth / MIB, "bare_asyncio_kb_per_connection": bare_growth / 1024 / count}
    label = (f"{count:,} idle connections: RSS +{growth / MIB:.1f} MB ({growth / 1024 / count:.1f} KB each; "
             f"{ours[0] / MIB:.0f} MB before)")
    return Row("server_idle_connections", label, count * IDLE_BUDGET_BYTES / growth, "conn/200 MB",
               count * IDLE_BUDGET_BYTES / bare_growth,
               f"bare asyncio streams server: {bare_growth / 1024 / count:.1f} KB each",
               Target("at_least", IDLE_TARGET_CONNECTIONS, "1,000 idle connections in < 200 MB"), details)


# --- produce latency at half the maximum rate ------------------------------------------------------

def _max_rate(bootstrap: str, topic: str, count: int) -> float:
    """Records/s of ``count`` 100-byte records queued at once, then flushed (every one acknowledged)."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, **PRODUCER})
    producer.list_topics(topic, timeout=30)
    failed: list[Any] = []
    value = bytes(VALUE_SIZE)
    began = time.perf_counter()
    for _ in range(count):
        producer.produce(topic, value, partition=0, on_delivery=lambda e, m: e is not None and failed.append(e))
        producer.poll(0)
    if producer.flush(60) or failed:
        raise RuntimeError(f"max-rate produce to {bootstrap} failed: {failed[:1] or 'records left unsent'}")
    return count / (time.perf_counter() - began)


def _paced_latencies(bootstrap: str, topic: str, rate: float, seconds: float) -> list[float]:
    """Produce at ``rate`` records/s for ``seconds``; each record's produce-to-delivery latency (s)."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, **PRODUCER})
    producer.list_topics(topic, timeout=30)
    latencies: list[float] = []
    failed: list[Any] = []

    def delivered(error: Any, message: Any) -> None:
        if error is not None:
            failed.append(error)
        else:
            latencies.append(message.latency())

    value, sent = bytes(VALUE_SIZE), 0
    began = time.perf_counter()
    while (elapsed := time.perf_counter() - began) < seconds:
        for _ in range(int(elapsed * rate) - sent):
            producer.produce(topic, value, partition=0, on_delivery=delivered)
            sent += 1
        producer.poll(0.0005)  # serves delivery reports; the pacing tick
    if producer.flush(60) or failed:
        raise RuntimeError(f"paced produce to {bootstrap} failed: {failed[:1] or 'records left unsent'}")
    return latencies


def _quantile_ms(latencies: list[float], quantile: float) -> float:
    """The nearest-rank ``quantile`` of ``latencies`` (seconds), in ms."""
    ordered = sorted(latencies)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(quantile * len(ordered)) - 1))] * 1000


def bench_server_produce_latency(settings: Settings) -> list[Row]:
    seconds = settings.pick(*PACED_SECONDS)
    with scratch_dir(settings.work_dir / "server-latency") as root:
        serve = TidelogServe(root / "tidelog-data", root / "serve.stderr", BROKER_OVERRIDES)
        serve.start()
        try:
            create_topics(serve.bootstrap_servers, ["max-rate", "paced"])
            max_rate = _max_rate(serve.bootstrap_servers, "max-rate", settings.pick(300_000, 30_000))
            ours = _paced_latencies(serve.bootstrap_servers, "paced", max_rate / 2, seconds)
            serve.stop()
        finally:
            serve.kill()
        kafka = _kafka_latencies(root, max_rate / 2, seconds, settings.pick(300_000, 30_000))
    return [_latency_row(max_rate, ours, kafka)]


def _kafka_latencies(root: Path, rate: float, seconds: float, warmup: int) -> tuple[float, list[float]] | str:
    """Kafka's max rate (which also warms its JIT up, as ours warmed our caches) and its latencies
    under the same paced load as ours; or why Kafka cannot run here."""
    missing = kafka_missing()
    if missing is not None:
        return missing
    broker = new_broker(root)
    try:
        broker.start()
        create_topics(broker.bootstrap_servers, ["max-rate", "paced"])
        max_rate = _max_rate(broker.bootstrap_servers, "max-rate", warmup)
        latencies = _paced_latencies(broker.bootstrap_servers, "paced", rate, seconds)
        broker.stop()
        return max_rate, latencies
    finally:
        broker.kill()


def _latency_row(max_rate: float, ours: list[float], kafka: tuple[float, list[float]] | str) -> Row:
    p99 = _quantile_ms(ours, 0.99)
    details: dict[str, Any] = {"max_records_per_s": max_rate, "paced_records_per_s": max_rate / 2,
                               "records": len(ours), "p50_ms": _quantile_ms(ours, 0.5), "p99_ms": p99}
    baseline, baseline_label = None, f"Kafka {KAFKA.version} p99, same rate"
    if isinstance(kafka, str):
        details["kafka_skipped"] = kafka
        baseline_label = f"Kafka skipped: {kafka}"
    else:
        kafka_max, latencies = kafka
        baseline = _quantile_ms(latencies, 0.99)
        details.update(kafka_max_records_per_s=kafka_max, kafka_p50_ms=_quantile_ms(latencies, 0.5),
                       kafka_p99_ms=baseline)
    label = (f"p99 produce latency (lower is better: ratio < 1 beats Kafka), librdkafka acks=1, "
             f"{VALUE_SIZE}-byte records at {max_rate / 2:,.0f}/s = 50% of our max {max_rate:,.0f}/s")
    return Row("server_produce_latency", label, p99, "ms p99", baseline, baseline_label, None, details)


BENCHMARKS: dict[str, tuple[str, Callable[[Settings], list[Row]]]] = {
    "server_idle_connections": ("RSS growth of tidelog serve holding 1,000 idle client connections",
                                bench_server_idle_connections),
    "server_produce_latency": ("p99 librdkafka produce latency at 50% of tidelog serve's max rate, vs Kafka",
                               bench_server_produce_latency),
}
