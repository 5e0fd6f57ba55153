"""The broker's memory under hostile requests: the peak RSS growth of a
``tidelog serve`` process (bench_kafka_wire.TidelogServe) while one request of a kind an attacker
can send costs it the most. Not tests: the figures are measured and printed, nothing asserts on
them (tests/server/test_memory_soak.py holds the generous-margin soak assertions).

Peak RSS is the kernel's high-water mark (``VmHWM`` of /proc/<pid>/status), reset just before the
attack by writing 5 to /proc/<pid>/clear_refs, so the figure is ``VmHWM after - VmRSS at the
reset``: the most the attack added at any instant, not what was left afterwards.

* ``server_fetch_memory``: four partitions of ~20 MiB each (2 MiB with ``--quick``), then one
  527-byte-class Fetch naming each partition 8 times with ``max_bytes`` and every
  ``partition_max_bytes`` at 2^31-1, read back by a raw socket that counts the response's bytes.
  Kafka answers it with each partition once and at most ``fetch.max.bytes`` (55 MiB) of records.
  Figure: MB of peak RSS growth (lower is better); baseline: the response's size in MB, the least a
  broker that holds the response needs, so a ratio near 1 is the bound kept.
* ``server_partial_requests_memory``: N connections (8; 3 with ``--quick``) each send a size prefix
  of ``socket.request.max.bytes`` (100 MiB) and then body bytes as fast as the broker reads them,
  never completing the frame. Without a global cap each pins what it sent; with
  ``queued.max.request.bytes`` (200 MiB by default) the broker stops reading beyond it. Figure: MB
  of peak RSS growth (lower is better); baseline: that budget in MB (a ratio at or under ~1 is the
  bound kept); the details say whether a fresh client was still answered meanwhile.

* ``server_decompression_memory``: six connections each send, at once, a Produce of one
  gzip batch of ~306 KB whose single record inflates to 300 MiB (100 MiB with ``--quick``): a valid
  batch Kafka stores. tidelog decompresses at most what ``max.message.bytes`` allows the batch
  uncompressed, under the ``tidelog.produce.decompression.memory.bytes`` budget (64 MiB), and
  answers MESSAGE_TOO_LARGE. Figure: MB of peak RSS growth (lower is better); baseline: that budget
  in MB; the details hold the answers' error codes and how long they took.

Run alone: ``python -m bench.run --only server_fetch_memory --only server_partial_requests_memory
--only server_decompression_memory``.
"""

from __future__ import annotations

import select
import socket
import struct
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.bench_kafka_wire import TidelogServe, encode_request
from bench.bench_server import answered_connection, read_exactly, status_bytes
from bench.bench_storage import MIB, Row, Settings, scratch_dir
from tidelog.storage.config import BROKER_CONFIGS

FETCH_PARTITIONS = 4
FETCH_REPEATS = 8  # times each partition is named in the hostile Fetch
FETCH_PARTITION_MIB = (20, 2)  # full, quick
FETCH_MAX_BYTES: int = BROKER_CONFIGS["fetch.max.bytes"].default  # what the broker should cap at (Kafka's too)
INT32_MAX = 2**31 - 1
BATCH_RECORDS, VALUE_SIZE = 900, 1024  # ~0.9 MiB batches, under max.message.bytes
PARTIAL_CONNECTIONS = (8, 3)  # full, quick
REQUEST_MAX_BYTES: int = BROKER_CONFIGS["socket.request.max.bytes"].default  # the size prefix each connection sends
QUEUED_MAX_REQUEST_BYTES: int = BROKER_CONFIGS["queued.max.request.bytes"].default  # where the broker stops reading
STALL_S = 2.0  # a connection whose bytes the broker has not taken for this long is stalled (backpressure)
_SIZE = struct.Struct(">i")


# --- RSS of the serve process ----------------------------------------------------------------------

def peak_growth(pid: int, attack: Callable[[], dict[str, Any]]) -> tuple[int, int, dict[str, Any]]:
    """``(RSS before, peak RSS growth during attack(), attack's details)`` of ``pid``, in bytes."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")  # the high-water mark restarts from the current RSS
    before = status_bytes(pid, "VmRSS")
    details = attack()
    return before, status_bytes(pid, "VmHWM") - before, details


# --- filling partitions through the wire -----------------------------------------------------------

def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="tidelog-bench")
    try:
        admin.create_topics([NewTopic(topic, partitions, 1)])
    finally:
        admin.close()


def fill(port: int, topic: str, partitions: int, mib_each: int) -> None:
    """Produce about ``mib_each`` MiB to every partition (acks=1, one request at a time)."""
    from kafka.protocol.producer import ProduceRequest, ProduceResponse

    from tidelog.records import build_batch

    value = bytes(range(256)) * (VALUE_SIZE // 256)
    batch = build_batch([(None, value)] * BATCH_RECORDS, timestamp=int(time.time() * 1000))
    data = ProduceRequest.TopicProduceData
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        for i in range(partitions * max(1, mib_each * MIB // len(batch))):
            request = ProduceRequest(transactional_id=None, acks=1, timeout_ms=30_000, topic_data=[data(
                name=topic, partition_data=[data.PartitionProduceData(index=i % partitions, records=batch)])])
            sock.sendall(encode_request(request, 9, i))
            response = ProduceResponse[9].decode(_frame(sock), header=True)
            error = response.responses[0].partition_responses[0].error_code
            if error:
                raise RuntimeError(f"produce to {topic} failed with error {error}")


def _frame(sock: socket.socket) -> bytes:
    return read_exactly(sock, _SIZE.unpack(read_exactly(sock, _SIZE.size))[0])


# --- the hostile Fetch --------------------------------------------------------------------------

def hostile_fetch(topic: str, partitions: int, repeats: int, max_bytes: int = INT32_MAX) -> bytes:
    """A framed Fetch v12 naming each partition ``repeats`` times, every byte limit at ``max_bytes``."""
    from kafka.protocol.consumer import FetchRequest

    F = FetchRequest.FetchTopic
    parts = [F.FetchPartition(partition=p, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1,
                              log_start_offset=-1, partition_max_bytes=max_bytes)
             for _ in range(repeats) for p in range(partitions)]
    request = FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=max_bytes, isolation_level=0,
                           session_id=0, session_epoch=-1, topics=[F(topic=topic, partitions=parts)],
                           forgotten_topics_data=[], rack_id="")
    return encode_request(request, 12, 1)


def send_hostile_fetch(port: int, frame: bytes) -> dict[str, Any]:
    """Send ``frame`` and read its response without holding it (counted, then dropped)."""
    with socket.create_connection(("127.0.0.1", port), timeout=120) as sock:
        sock.sendall(frame)
        size = _SIZE.unpack(read_exactly(sock, _SIZE.size))[0]
        left = size
        while left:
            chunk = sock.recv(min(left, MIB))
            if not chunk:
                raise RuntimeError("tidelog serve closed the connection mid-response")
            left -= len(chunk)
    return {"request_bytes": len(frame), "response_bytes": size}


def fetch_attack(root: Path, overrides: dict[str, str], mib_each: int) -> tuple[int, int, dict[str, Any]]:
    """Start ``tidelog serve`` over ``root/data`` with ``overrides``, fill :data:`FETCH_PARTITIONS`
    partitions with ``mib_each`` MiB each, send the hostile Fetch: ``(RSS before, peak growth,
    details)``. Raises if the broker stops answering afterwards."""
    serve = TidelogServe(root / "data", root / "serve.stderr", overrides)
    serve.start()
    try:
        port = serve.port
        create_topic(serve.bootstrap_servers, "t", FETCH_PARTITIONS)
        fill(port, "t", FETCH_PARTITIONS, mib_each)
        frame = hostile_fetch("t", FETCH_PARTITIONS, FETCH_REPEATS)
        send_hostile_fetch(port, hostile_fetch("t", FETCH_PARTITIONS, 2, max_bytes=MIB))  # warm-up, small
        before, growth, details = peak_growth(serve.pid, lambda: send_hostile_fetch(port, frame))
        answered_connection(port).close()  # still serving
        serve.stop()
    finally:
        serve.kill()
    details.update(rss_before_mb=before / MIB, peak_growth_mb=growth / MIB, stored_mib=mib_each * FETCH_PARTITIONS)
    return before, growth, details


def bench_server_fetch_memory(settings: Settings) -> list[Row]:
    with scratch_dir(settings.work_dir / "server-fetch-memory") as root:
        before, growth, details = fetch_attack(root, {}, settings.pick(*FETCH_PARTITION_MIB))
    details["fetch_max_bytes"] = FETCH_MAX_BYTES
    label = (f"peak RSS growth of one {details['request_bytes']}-byte Fetch naming {FETCH_PARTITIONS} partitions "
             f"{FETCH_REPEATS}x each at max_bytes 2^31-1 (lower is better): response "
             f"{details['response_bytes'] / MIB:.1f} MiB, {before / MIB:.0f} MB before")
    # baseline: the response's own size, the least a broker holding it in memory needs (ratio ~1 is ideal)
    return [Row("server_fetch_memory", label, growth / MIB, "MB peak growth", details["response_bytes"] / MIB,
                "MB of the response (ratio: growth per response byte; lower is better)", None, details)]


# --- partially received requests --------------------------------------------------------------------

def trickle(port: int, connections: int, request_size: int = REQUEST_MAX_BYTES) -> dict[str, Any]:
    """Open ``connections`` connections, each sending a size prefix of ``request_size`` and then
    body bytes until the broker stops taking them for :data:`STALL_S` (or all but the last byte
    went); then check a fresh client is answered, and close them all."""
    chunk = b"\0" * MIB
    socks = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(connections)]
    sent = dict.fromkeys(range(connections), 0)
    try:
        for sock in socks:
            sock.sendall(_SIZE.pack(request_size))
            sock.setblocking(False)
        _send_until_stalled(socks, sent, chunk, request_size)
        answered = _fresh_client_answered(port)
    finally:
        for sock in socks:
            sock.close()
    return {"connections": connections, "sent_mib": sum(sent.values()) / MIB, "fresh_client_answered": answered}


def _send_until_stalled(socks: list[socket.socket], sent: dict[int, int], chunk: bytes, request_size: int) -> None:
    last_progress = dict.fromkeys(sent, time.monotonic())
    active = set(sent)
    while active:
        _, writable, _ = select.select([], [socks[i] for i in active], [], 0.1)
        now = time.monotonic()
        for i in list(active):
            sock = socks[i]
            if sock in writable:
                room = request_size - 1 - sent[i]
                try:
                    n = sock.send(chunk[:min(len(chunk), room)])
                except BlockingIOError:
                    n = 0
                if n:
                    sent[i] += n
                    last_progress[i] = now
            if sent[i] >= request_size - 1 or now - last_progress[i] > STALL_S:
                active.discard(i)


def _fresh_client_answered(port: int) -> bool:
    try:
        answered_connection(port).close()
        return True
    except (OSError, RuntimeError):
        return False


def partial_attack(root: Path, overrides: dict[str, str], connections: int,
                   request_size: int = REQUEST_MAX_BYTES) -> tuple[int, int, dict[str, Any]]:
    """Start ``tidelog serve`` over ``root/data`` with ``overrides`` and run :func:`trickle`:
    ``(RSS before, peak growth, details)``."""
    serve = TidelogServe(root / "data", root / "serve.stderr", overrides)
    serve.start()
    try:
        port = serve.port
        answered_connection(port).close()  # warm-up
        before, growth, details = peak_growth(serve.pid,
                                              lambda: trickle(port, connections, request_size))
        serve.stop()
    finally:
        serve.kill()
    details.update(rss_before_mb=before / MIB, peak_growth_mb=growth / MIB)
    return before, growth, details


def bench_server_partial_requests_memory(settings: Settings) -> list[Row]:
    connections = settings.pick(*PARTIAL_CONNECTIONS)
    with scratch_dir(settings.work_dir / "server-partial-memory") as root:
        before, growth, details = partial_attack(root, {}, connections)
    label = (f"peak RSS growth of {connections} connections each sending a {REQUEST_MAX_BYTES // MIB} MiB size "
             f"prefix then body bytes, never completing (lower is better): {details['sent_mib']:.0f} MiB "
             f"taken by the broker, fresh client answered: {details['fresh_client_answered']}; "
             f"{before / MIB:.0f} MB before")
    # baseline: the budget queued.max.request.bytes grants (its default; ratio <= ~1 is the bound kept)
    return [Row("server_partial_requests_memory", label, growth / MIB, "MB peak growth", QUEUED_MAX_REQUEST_BYTES / MIB,
                "MB of queued.max.request.bytes (ratio: growth per budget byte; lower is better)", None, details)]


# --- decompression bombs ------------------------------------------------------------------------------

BOMB_CONNECTIONS = 6
BOMB_MIB = (300, 100)  # full, quick: what each bomb's record inflates to
DECOMPRESSION_MEMORY_BYTES: int = BROKER_CONFIGS["tidelog.produce.decompression.memory.bytes"].default


def gzip_record_bomb(value_size: int, *, timestamp: int | None = None) -> bytes:
    """A CRC-valid gzip RecordBatch v2 of one record whose value is ``value_size`` zero bytes: a
    well-formed batch (Kafka stores it) of about ``value_size / 1000`` bytes on the wire. The
    stream is built 1 MiB at a time, so a 300 MiB bomb costs its builder a few MiB."""
    from tidelog.records import build_batch, write_crc
    from tidelog.records.batch import LENGTH_OFFSET, LOG_OVERHEAD, RECORD_BATCH_OVERHEAD
    from tidelog.records.varint import encode_varint

    ts = int(time.time() * 1000) if timestamp is None else timestamp
    fields = b"\x00" + encode_varint(0) + encode_varint(0) + encode_varint(-1) + encode_varint(value_size)
    body_size = len(fields) + value_size + 1  # + the header count varint (0)
    deflater = zlib.compressobj(6, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    parts = [deflater.compress(encode_varint(body_size) + fields)]
    chunk = bytes(1 << 20)
    for start in range(0, value_size, len(chunk)):
        parts.append(deflater.compress(chunk[:min(len(chunk), value_size - start)]))
    parts.append(deflater.compress(encode_varint(0)) + deflater.flush())
    area = b"".join(parts)
    header = bytearray(build_batch([(b"k", b"v")], compression=1, timestamp=ts)[:RECORD_BATCH_OVERHEAD])
    struct.pack_into(">i", header, LENGTH_OFFSET, RECORD_BATCH_OVERHEAD - LOG_OVERHEAD + len(area))
    batch = bytearray(header + area)
    write_crc(batch)
    return bytes(batch)


def send_bombs(port: int, frame: bytes, connections: int) -> dict[str, Any]:
    """Send ``frame`` (a Produce) on ``connections`` connections before reading any answer; then
    read every answer: their error codes and the seconds until the last came."""
    from kafka.protocol.producer import ProduceResponse

    socks = [socket.create_connection(("127.0.0.1", port), timeout=300) for _ in range(connections)]
    try:
        started = time.monotonic()
        for sock in socks:
            sock.sendall(frame)
        answers = [ProduceResponse[9].decode(_frame(sock), header=True) for sock in socks]
        seconds = time.monotonic() - started
    finally:
        for sock in socks:
            sock.close()
    codes = [a.responses[0].partition_responses[0].error_code for a in answers]
    return {"connections": connections, "request_bytes": len(frame), "error_codes": codes, "seconds": seconds}


def bomb_attack(root: Path, overrides: dict[str, str], inflated_mib: int) -> tuple[int, int, dict[str, Any]]:
    """Start ``tidelog serve`` over ``root/data`` with ``overrides`` and send :data:`BOMB_CONNECTIONS`
    concurrent bombs inflating to ``inflated_mib`` MiB each: ``(RSS before, peak growth, details)``."""
    from kafka.protocol.producer import ProduceRequest

    data = ProduceRequest.TopicProduceData
    bomb = gzip_record_bomb(inflated_mib * MIB)
    frame = encode_request(ProduceRequest(transactional_id=None, acks=1, timeout_ms=30_000, topic_data=[
        data(name="t", partition_data=[data.PartitionProduceData(index=0, records=bomb)])]), 9, 1)
    serve = TidelogServe(root / "data", root / "serve.stderr", overrides)
    serve.start()
    try:
        port = serve.port
        create_topic(serve.bootstrap_servers, "t", 1)
        fill(port, "t", 1, 1)  # warm-up: the append path has run once
        before, growth, details = peak_growth(serve.pid,
                                              lambda: send_bombs(port, frame, BOMB_CONNECTIONS))
        answered_connection(port).close()  # still serving
        serve.stop()
    finally:
        serve.kill()
    details.update(rss_before_mb=before / MIB, peak_growth_mb=growth / MIB, batch_bytes=len(bomb),
                   inflated_mib=inflated_mib)
    return before, growth, details


def bench_server_decompression_memory(settings: Settings) -> list[Row]:
    with scratch_dir(settings.work_dir / "server-decompression-memory") as root:
        before, growth, details = bomb_attack(root, {}, settings.pick(*BOMB_MIB))
    label = (f"peak RSS growth of {BOMB_CONNECTIONS} concurrent Produce requests of a {details['batch_bytes']}-byte "
             f"gzip batch inflating to {details['inflated_mib']} MiB (lower is better): answered "
             f"{sorted(set(details['error_codes']))} in {details['seconds']:.1f} s, {before / MIB:.0f} MB before")
    # baseline: the decompression budget (its default; ratio <= ~1 is the bound kept)
    return [Row("server_decompression_memory", label, growth / MIB, "MB peak growth", DECOMPRESSION_MEMORY_BYTES / MIB,
                "MB of tidelog.produce.decompression.memory.bytes (ratio: growth per budget byte; lower is better)",
                None, details)]


BENCHMARKS: dict[str, tuple[str, Callable[[Settings], list[Row]]]] = {
    "server_fetch_memory": ("peak RSS growth of tidelog serve answering one hostile Fetch",
                            bench_server_fetch_memory),
    "server_partial_requests_memory": ("peak RSS growth of tidelog serve under connections sending "
                                       "100 MiB frames they never finish",
                                       bench_server_partial_requests_memory),
    "server_decompression_memory": ("peak RSS growth of tidelog serve under six concurrent Produce requests of "
                                    "306 KB gzip batches inflating to 300 MiB",
                                    bench_server_decompression_memory),
}


if __name__ == "__main__":
    import sys

    quick = "--quick" in sys.argv
    work = Path(sys.argv[sys.argv.index("--work-dir") + 1]) if "--work-dir" in sys.argv else Path("bench/.work")
    work.mkdir(parents=True, exist_ok=True)
    names = [a for a in sys.argv[1:] if a in BENCHMARKS] or list(BENCHMARKS)
    for name in names:
        for row in BENCHMARKS[name][1](Settings(work, quick=quick)):
            print(f"{row.benchmark}: {row.figure:.1f} {row.unit} | {row.label} | {row.details}")
