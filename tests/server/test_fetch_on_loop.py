"""Where a Fetch's read runs: on the event loop when every log's lock is free (no thread-pool
hop), on the pool when a writer holds one (the loop never waits for it: other connections are
answered meanwhile), always on the pool for read_committed, TLS and many-partition fetches; and a
failure met on the loop is handed to the pool's read, reported once and never masked."""

from __future__ import annotations

import asyncio
import errno
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from kafka.protocol.consumer import FetchRequest, FetchResponse
from kafka.protocol.producer import ProduceResponse

import server_samples as samples
from server_helpers import Broker, api_versions, wait_until
from tests.lock_helpers import held_by_another_thread
from tidelog.server import fetch
from tidelog.server.errors import ErrorCode
from tidelog.storage import file_slice, fileops
from tidelog.storage.fetch_info import FetchIsolation
from tidelog.storage.fileops import FaultRule, FileOp
from tidelog.topic_partition import TopicPartition

INT32_MAX = 2**31 - 1


@pytest.fixture(autouse=True)
def every_range_a_slice(monkeypatch: pytest.MonkeyPatch) -> None:
    """Slices from one byte on, so small test partitions qualify for a read on the loop."""
    monkeypatch.setattr(file_slice, "MIN_SLICE_BYTES", 1)


def _on_an_event_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[tuple[bool, bool]]:
    """Every ``read_partitions`` call: (asked to run on the loop, ran on an event loop thread)."""
    calls: list[tuple[bool, bool]] = []
    real = fetch.read_partitions

    def spy(*args: Any, **kwargs: Any) -> Any:
        calls.append((bool(kwargs.get("on_loop", args[5] if len(args) > 5 else False)), _on_an_event_loop()))
        return real(*args, **kwargs)

    monkeypatch.setattr(fetch, "read_partitions", spy)
    return calls


ON_LOOP, ON_POOL = (True, True), (False, False)


def _produce(broker: Broker, topic: str, partition: int = 0, count: int = 3) -> None:
    client = broker.connect()
    for i in range(count):
        request = samples.produce(topic, partition, samples.record_batch(b"v%d" % i * 100))
        response = client.call(request, ProduceResponse, 9)
        assert response.responses[0].partition_responses[0].error_code == 0
    client.close()


def _stored(broker: Broker, topic: str, offset: int = 0, partition: int = 0) -> bytes:
    info = broker.manager.read(TopicPartition(topic, partition), offset, INT32_MAX, FetchIsolation.HIGH_WATERMARK)
    assert isinstance(info.records, bytes)
    return info.records


def _partition(response: Any) -> Any:
    return response.responses[0].partitions[0]


def test_a_fetch_of_free_logs_is_read_once_on_the_event_loop(broker: Broker, reads: list[tuple[bool, bool]]) -> None:
    broker.manager.create_topic("t", 1)
    _produce(broker, "t")
    client = broker.connect()
    for offset in (0, 1, 2):
        got = _partition(client.call(samples.fetch("t", offset, max_bytes=INT32_MAX), FetchResponse, 12))
        assert (got.error_code, got.high_watermark, got.records) == (0, 3, _stored(broker, "t", offset))
    assert reads == [ON_LOOP] * 3


@pytest.fixture
def writer_holding_the_log(broker: Broker) -> Iterator[threading.Event]:
    """A thread holding t-0's lock (as an append or roll does) until the event it yields is set."""
    broker.manager.create_topic("t", 1)
    _produce(broker, "t")
    with held_by_another_thread(broker.manager.log(TopicPartition("t", 0)).lock) as release:
        yield release


def test_a_fetch_of_a_log_a_writer_holds_is_read_on_the_pool_and_the_loop_keeps_serving(
        broker: Broker, reads: list[tuple[bool, bool]], writer_holding_the_log: threading.Event) -> None:
    client, other = broker.connect(), broker.connect()
    client.send(samples.fetch("t", 0, max_bytes=INT32_MAX), 12)
    wait_until(lambda: reads == [ON_POOL])  # the loop did not wait: it sent the read to the pool
    for _ in range(3):  # and answers other connections while the pool's read waits for the writer
        assert api_versions(other).error_code == 0
    writer_holding_the_log.set()
    got = _partition(client.receive(FetchResponse, 12))
    assert (got.error_code, got.records) == (0, _stored(broker, "t"))
    assert _partition(client.call(samples.fetch("t", 0, max_bytes=INT32_MAX), FetchResponse, 12)).records
    assert reads == [ON_POOL, ON_LOOP]  # the writer gone, back on the loop


def test_read_committed_tls_and_many_partition_fetches_are_read_on_the_pool(
        broker: Broker, reads: list[tuple[bool, bool]], monkeypatch: pytest.MonkeyPatch) -> None:
    broker.manager.create_topic("t", fetch.LOOP_READ_MAX_PARTITIONS + 1)
    _produce(broker, "t")
    client = broker.connect()
    got = _partition(client.call(samples.fetch("t", 0, isolation_level=1, max_bytes=INT32_MAX), FetchResponse, 12))
    assert (got.error_code, got.records) == (0, _stored(broker, "t"))
    assert reads == [ON_POOL]

    F = FetchRequest.FetchTopic

    def of_partitions(count: int) -> Any:
        request = samples.fetch("t", 0, max_bytes=INT32_MAX)
        request.topics = [F(topic="t", partitions=[F.FetchPartition(
            partition=p, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1, log_start_offset=-1,
            partition_max_bytes=INT32_MAX) for p in range(count)])]
        return request

    reads.clear()
    for count in (fetch.LOOP_READ_MAX_PARTITIONS, fetch.LOOP_READ_MAX_PARTITIONS + 1):
        response = client.call(of_partitions(count), FetchResponse, 12)
        assert [p.error_code for p in response.responses[0].partitions] == [0] * count
    assert reads == [ON_LOOP, ON_POOL]

    reads.clear()
    monkeypatch.setattr(fetch, "zero_copy", lambda ctx, conn: False)  # as on a TLS listener: bytes
    assert _partition(client.call(samples.fetch("t", 0, max_bytes=INT32_MAX), FetchResponse, 12)).records
    assert reads == [ON_POOL]


def test_an_out_of_range_offset_met_on_the_loop_is_answered_by_the_pool(
        broker: Broker, reads: list[tuple[bool, bool]]) -> None:
    broker.manager.create_topic("t", 1)
    _produce(broker, "t")
    client = broker.connect()
    got = _partition(client.call(samples.fetch("t", 99), FetchResponse, 12))
    assert got.error_code == ErrorCode.OFFSET_OUT_OF_RANGE
    assert reads == [ON_LOOP, ON_POOL]


def test_a_read_fault_met_on_the_loop_is_reported_once_by_the_pool_not_masked_by_a_second_read(
        broker: Broker, reads: list[tuple[bool, bool]], monkeypatch: pytest.MonkeyPatch) -> None:
    broker.manager.create_topic("t", 2)
    _produce(broker, "t", partition=1)
    _produce(broker, "t", partition=0)
    reported: list[tuple[str, bool]] = []
    real_report = broker.manager.report_read_error

    def report(tp: TopicPartition, operation: str, error: BaseException) -> bool:
        reported.append((str(tp), _on_an_event_loop()))
        return real_report(tp, operation, error)

    monkeypatch.setattr(broker.manager, "report_read_error", report)
    client = broker.connect()
    F = FetchRequest.FetchTopic
    request = samples.fetch("t", 0, max_bytes=INT32_MAX)
    request.topics = [F(topic="t", partitions=[F.FetchPartition(
        partition=p, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1, log_start_offset=-1,
        partition_max_bytes=INT32_MAX) for p in (1, 0)])]  # t-1 is read, then t-0 fails
    data = broker.manager.log_dir_paths()[0]
    once = FaultRule(frozenset({FileOp.READ}), f"{data}/t-0/*.log", error=errno.EIO, times=1)
    with fileops.inject(once) as stats:
        response = client.call(request, FetchResponse, 12)
        assert stats.fired == 1
    got = {p.partition_index: p for p in response.responses[0].partitions}
    assert got[0].error_code == ErrorCode.KAFKA_STORAGE_ERROR, "a fault a second read would not meet is answered"
    assert (got[1].error_code, got[1].records) == (0, _stored(broker, "t", 0, 1))
    assert reads == [ON_LOOP, ON_POOL] and reported == [("t-0", False)]
    assert _partition(client.call(samples.fetch("t", 0, max_bytes=INT32_MAX), FetchResponse, 12)).error_code == 0

