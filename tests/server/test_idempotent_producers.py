"""Idempotent producers end to end: InitProducerId, a retried batch written once, fencing and
sequence errors on the wire, producer ids unique across restarts;
kafka-python, confluent-kafka (every codec) and aiokafka with idempotence on; a librdkafka
idempotent producer across a killed and a cleanly stopped ``tidelog serve``."""

from __future__ import annotations

import asyncio
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from aiokafka import AIOKafkaProducer
from confluent_kafka import KafkaError, Message, Producer
from kafka import KafkaProducer
from kafka.protocol.producer import InitProducerIdRequest, InitProducerIdResponse, ProduceRequest, ProduceResponse
from test_clients import log_records

from server_helpers import TIMEOUT_S, Broker, start_broker
from tidelog.manager import LogManager
from tidelog.records.builder import BatchBuilder
from tidelog.server import ServerThread
from tidelog.server.producer_id_manager import PRODUCER_ID_BLOCK_SIZE, PRODUCER_IDS_FILE
from tidelog.storage.config import BrokerConfig
from tidelog.topic_partition import TopicPartition

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def _init_producer_id(broker: Broker, transactional_id: str | None = None, version: int = 4) -> tuple[int, int, int]:
    client = broker.connect()
    try:
        r = client.call(InitProducerIdRequest(transactional_id=transactional_id, transaction_timeout_ms=60000),
                        InitProducerIdResponse, version)
    finally:
        client.close()
    return r.error_code, r.producer_id, r.producer_epoch


def _idempotent_batch(pid: int, epoch: int, seq: int, count: int = 3, transactional: bool = False) -> bytes:
    b = BatchBuilder(producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=transactional)
    for i in range(count):
        b.append(i, 1_700_000_000_000, b"k", b"seq-%d" % (seq + i))
    return b.build()


def _produce_raw(client: object, topic: str, records: bytes) -> tuple[int, int]:
    P = ProduceRequest
    request = P(transactional_id=None, acks=-1, timeout_ms=5000, topic_data=[P.TopicProduceData(
        name=topic, partition_data=[P.TopicProduceData.PartitionProduceData(index=0, records=records)])])
    part = client.call(request, ProduceResponse, 9).responses[0].partition_responses[0]  # type: ignore[attr-defined]
    return part.error_code, part.base_offset


def test_retried_batch_is_written_once_with_the_same_offset(broker: Broker) -> None:
    broker.manager.create_topic("raw", 1)
    error, pid, epoch = _init_producer_id(broker)
    assert (error, epoch) == (0, 0) and pid >= 0
    client = broker.connect()
    try:
        assert _produce_raw(client, "raw", _idempotent_batch(pid, 0, 0)) == (0, 0)
        assert _produce_raw(client, "raw", _idempotent_batch(pid, 0, 3)) == (0, 3)
        assert _produce_raw(client, "raw", _idempotent_batch(pid, 0, 0)) == (0, 0)  # the retry: NONE, offset 0
        assert _produce_raw(client, "raw", _idempotent_batch(pid, 0, 9)) == (45, -1)  # OUT_OF_ORDER_SEQUENCE_NUMBER
        assert _produce_raw(client, "raw", _idempotent_batch(pid, 1, 0)) == (0, 6)  # epoch bumped by the client
        assert _produce_raw(client, "raw", _idempotent_batch(pid, 0, 6)) == (47, -1)  # INVALID_PRODUCER_EPOCH
        # a transactional batch needs the request's transactional id: TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        assert _produce_raw(client, "raw", _idempotent_batch(pid, 1, 3, transactional=True))[0] == 53
    finally:
        client.close()
    values = [v for _, _, _, v in log_records(broker.manager, "raw", 0)]
    assert values == [b"seq-%d" % i for i in range(6)] + [b"seq-0", b"seq-1", b"seq-2"]


def test_producer_ids_are_unique_across_restarts(tmp_path: Path,
                                                 restartable: list[tuple[LogManager, ServerThread]]) -> None:
    seen = []
    for _ in range(2):
        manager, thread = start_broker(tmp_path / "data")
        restartable.append((manager, thread))
        broker = Broker(manager, thread.server, thread.server.bound[0].port)
        seen += [_init_producer_id(broker, version=v)[1] for v in (0, 3, 5)]
        thread.stop()
        manager.shutdown()
        restartable.clear()
    assert len(set(seen)) == 6 and seen[3] >= PRODUCER_ID_BLOCK_SIZE  # the first block is never reused
    assert f"next.block.start={2 * PRODUCER_ID_BLOCK_SIZE}" in (tmp_path / "data" / PRODUCER_IDS_FILE).read_text()


def test_kafka_python_idempotent_producer_writes_each_record_once(broker: Broker) -> None:
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, enable_idempotence=True, linger_ms=2)
    futures = [producer.send("kp", b"v%d" % i, partition=0) for i in range(200)]
    offsets = [f.get(TIMEOUT_S).offset for f in futures]
    producer.close()
    assert offsets == list(range(200))
    assert [v for _, _, _, v in log_records(broker.manager, "kp", 0)] == [b"v%d" % i for i in range(200)]
    assert list(broker.manager.log(TopicPartition("kp", 0)).producer_state.active_producers) != []


def test_librdkafka_idempotent_producer_every_codec(broker: Broker) -> None:
    errors: list[KafkaError] = []
    for codec in CODECS:
        producer = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "linger.ms": 1,
                             "compression.type": codec})
        for i in range(100):
            producer.produce(f"ck-{codec}", value=b"%s-%d" % (codec.encode(), i), partition=0,
                             on_delivery=lambda e, m: errors.append(e) if e else None)
        assert producer.flush(TIMEOUT_S) == 0
        assert [v for _, _, _, v in log_records(broker.manager, f"ck-{codec}", 0)] == [
            b"%s-%d" % (codec.encode(), i) for i in range(100)]
    assert errors == []


def test_aiokafka_idempotent_producer_writes_each_record_once(broker: Broker) -> None:
    async def produce() -> list[int]:
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, enable_idempotence=True)
        await producer.start()
        try:
            sent = [await producer.send("ak", b"v%d" % i, partition=0) for i in range(100)]
            return [(await f).offset for f in sent]
        finally:
            await producer.stop()
    assert asyncio.run(asyncio.wait_for(produce(), 6 * TIMEOUT_S)) == list(range(100))
    assert [v for _, _, _, v in log_records(broker.manager, "ak", 0)] == [b"v%d" % i for i in range(100)]


# --- across restarts of a real `tidelog serve` ---------------------------------------------------

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _serve(data: Path, port: int) -> subprocess.Popen[str]:
    process = subprocess.Popen([sys.executable, "-m", "tidelog.cli.main", "--data-dir", str(data),
                                "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}", "serve"],
                               stderr=subprocess.PIPE, text=True)
    assert process.stderr is not None
    # A start after a SIGKILL may log index rebuilds first (an untrimmed time index, as Kafka does).
    before: list[str] = []
    for line in iter(process.stderr.readline, ""):
        if re.search(r"listening on PLAINTEXT://127\.0\.0\.1:\d+", line):
            return process
        before.append(line)
    process.kill()
    process.wait()
    raise AssertionError(f"tidelog serve exited without its banner: {''.join(before)}")


def test_librdkafka_idempotent_producer_survives_kill_and_clean_restart(tmp_path: Path) -> None:
    """Records stream in while the broker is killed (-9) and restarted, then stopped cleanly and
    restarted: every record arrives exactly once, in order (no duplicate from a retry of a batch
    that was written before the kill, no gap)."""
    data, port = tmp_path / "data", _free_port()
    process = _serve(data, port)
    failures: list[KafkaError] = []
    producer = Producer({"bootstrap.servers": f"127.0.0.1:{port}", "enable.idempotence": True, "linger.ms": 5,
                         "message.timeout.ms": 60000, "retry.backoff.ms": 50, "reconnect.backoff.max.ms": 200})
    stop = threading.Event()
    sent = 0

    def on_delivery(error: KafkaError | None, _: Message) -> None:
        if error is not None:
            failures.append(error)

    def send() -> None:
        nonlocal sent
        while not stop.is_set():
            producer.produce("restarts", value=b"%06d" % sent, partition=0, on_delivery=on_delivery)
            sent += 1
            producer.poll(0.002)  # about 400 records a second

    sender = threading.Thread(target=send)
    sender.start()
    try:
        for how in ("kill", "term"):
            time.sleep(0.5)
            process.send_signal(signal.SIGKILL if how == "kill" else signal.SIGTERM)
            process.wait(timeout=60)
            time.sleep(0.3)
            process = _serve(data, port)
        time.sleep(0.5)
    finally:
        stop.set()
        sender.join()
    try:
        assert producer.flush(3 * TIMEOUT_S) == 0
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0
    finally:
        if process.poll() is None:  # a failed assertion above: the test stops what it started
            process.kill()
            process.wait()
    assert failures == []
    with LogManager.open(BrokerConfig.from_properties({}), [data]) as manager:
        values = [v for _, _, _, v in log_records(manager, "restarts", 0)]
    assert sent > 100 and values == [b"%06d" % i for i in range(sent)]
