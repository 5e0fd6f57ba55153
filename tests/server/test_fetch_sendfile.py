"""Fetch records sent by sendfile on plaintext listeners: the same bytes as a copy through Python,
the fallback (TLS, uvloop, a file system refusing sendfile) the same bytes again, and no
descriptor of a fetched range kept once its response is sent, dropped or cut off (a client that
leaves mid-response, one that stops reading until the idle expiry, a long poll reading again)."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import ssl
import struct
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import uvloop
from kafka.protocol.consumer import FetchRequest, FetchResponse
from kafka.protocol.producer import ProduceResponse

import server_samples as samples
from security_helpers import Pki, client_context, make_pki
from server_helpers import TIMEOUT_S, Broker, RawClient, api_versions, wait_until
from tests.fd_helpers import descriptors_under
from tidelog.records import iter_batches
from tidelog.server import file_send
from tidelog.server.connection import WRITE_CHUNK
from tidelog.server.fetch_response import PartitionResponse, encode_fetch_response
from tidelog.server.file_send import send_slice, uses_fallback
from tidelog.storage.fetch_info import FetchIsolation
from tidelog.storage import file_slice
from tidelog.storage.file_slice import FileSlice
from tidelog.topic_partition import TopicPartition

INT32_MAX = 2**31 - 1


@pytest.fixture(autouse=True)
def every_range_a_slice(monkeypatch: pytest.MonkeyPatch) -> None:
    """Slices from one byte on, so small test partitions take the sendfile path (the default
    minimum is tested on its own)."""
    monkeypatch.setattr(file_slice, "MIN_SLICE_BYTES", 1)


@pytest.fixture(autouse=True)
def no_slice_left_to_the_collector(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every slice is closed by the path that owns it: none reaches its finalizer still open (the
    finalizer's close is a backstop for reads dropped mid-thread by a cancellation, not a path)."""
    dropped_open: list[str] = []
    real = FileSlice.__del__

    def finalizer(self: FileSlice) -> None:
        if not self.closed:
            dropped_open.append(repr(self))
        real(self)

    monkeypatch.setattr(FileSlice, "__del__", finalizer)
    yield
    assert dropped_open == []


@pytest.fixture
def sendfile_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The byte counts ``os.sendfile`` was asked for (a spy: every call still goes to the kernel)."""
    calls: list[int] = []
    real = os.sendfile

    def spy(out_fd: int, in_fd: int, offset: int | None, count: int) -> int:
        calls.append(count)
        return real(out_fd, in_fd, offset, count)

    monkeypatch.setattr(os, "sendfile", spy)
    return calls


def _refuse(*args: object) -> int:
    raise OSError(22, "Invalid argument")


@pytest.fixture
def refusing_sendfile(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """``os.sendfile`` failing as on a file system without it (EINVAL): the fallback's trigger."""
    calls: list[int] = []

    def refuse(out_fd: int, in_fd: int, offset: int | None, count: int) -> int:
        calls.append(count)
        raise OSError(22, "Invalid argument")

    monkeypatch.setattr(os, "sendfile", refuse)
    return calls


def _produce(client: RawClient, topic: str, values: list[bytes], partition: int = 0) -> None:
    response = client.call(samples.produce(topic, partition, samples.record_batch(*values)), ProduceResponse, 9)
    assert response.responses[0].partition_responses[0].error_code == 0


def _fetch_raw(client: RawClient, topic: str, offset: int = 0, **limits: int) -> bytes:
    """The records of partition 0 in a Fetch v12 answer, as sent."""
    limits = {"max_bytes": INT32_MAX, "partition_max_bytes": INT32_MAX, **limits}
    response = client.call(samples.fetch(topic, offset, **limits), FetchResponse, 12)
    part = response.responses[0].partitions[0]
    assert part.error_code == 0
    return part.records or b""


def _stored(broker: Broker, topic: str, offset: int, max_bytes: int = INT32_MAX) -> bytes:
    """What a fetch of the same range reads as bytes from the log (the copy path's source)."""
    info = broker.manager.read(TopicPartition(topic, 0), offset, max_bytes, FetchIsolation.HIGH_WATERMARK)
    assert isinstance(info.records, bytes)
    return info.records


def _data_descriptors(broker: Broker) -> list[str]:
    """The descriptors on segment ``.log`` files (what slices hold; an append may open an index)."""
    return [t for t in descriptors_under(broker.manager.log_dir_paths()[0]) if ".log" in t]


def _settled(broker: Broker) -> list[str]:
    """The ``.log`` descriptors once no response is being sent: the segments' own, one each (a
    client holds its response a moment before the server's send returns and closes the slices)."""
    wait_until(lambda: len(set(held := _data_descriptors(broker))) == len(held))
    return _data_descriptors(broker)


def _no_descriptor_left(broker: Broker, before: list[str]) -> None:
    wait_until(lambda: _data_descriptors(broker) == before)


def _warmed(broker: Broker, topic: str) -> list[str]:
    """The data dir's descriptors once a fetch opened the segment files and indexes reads use."""
    client = broker.connect()
    _fetch_raw(client, topic, 0, max_bytes=1)
    client.close()
    wait_until(lambda: broker.server.connection_count == 0)
    return _settled(broker)


def test_fetched_records_go_by_sendfile_and_are_the_stored_bytes(broker: Broker, sendfile_calls: list[int]) -> None:
    broker.manager.create_topic("t", 2)
    client = broker.connect()
    for i in range(30):
        _produce(client, "t", [b"v%d-" % i + b"x" * 3000] * 5)
    _produce(client, "t", [b"other"], partition=1)
    for offset in (0, 7, 149):
        assert _fetch_raw(client, "t", offset) == _stored(broker, "t", offset)
    assert sum(sendfile_calls) >= 3 * 3000 * 5
    # limits cut the slice where they cut the bytes (mid-batch), and KIP-74's first whole batch
    assert _fetch_raw(client, "t", 10, partition_max_bytes=5000) == _stored(broker, "t", 10, 5000)
    whole = _fetch_raw(client, "t", 10, partition_max_bytes=1)
    assert whole == _stored(broker, "t", 10, 1) and len([b for _, b in iter_batches(whole)]) == 1
    # both partitions in one response: two slices after their headers
    F = FetchRequest.FetchTopic
    request = samples.fetch("t", 0)
    request.topics = [F(topic="t", partitions=[F.FetchPartition(
        partition=p, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1, log_start_offset=-1,
        partition_max_bytes=INT32_MAX) for p in (1, 0)])]
    request.max_bytes = INT32_MAX
    response = client.call(request, FetchResponse, 12)
    got = {p.partition_index: p.records for p in response.responses[0].partitions}
    assert got[0] == _stored(broker, "t", 0) and [r.value for _, b in iter_batches(got[1]) for r in b.records()] \
        == [b"other"]
    assert api_versions(client).error_code == 0


def test_responses_below_the_slice_minimum_are_copied_and_above_it_sent(
        broker: Broker, sendfile_calls: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(file_slice, "MIN_SLICE_BYTES", 256 * 1024)
    broker.manager.create_topic("t", 1)
    client = broker.connect()
    for i in range(8):
        _produce(client, "t", [b"%d" % i + b"s" * 20_000] * 5)  # ~100 KB a batch
    assert _fetch_raw(client, "t", 0, partition_max_bytes=200_000) == _stored(broker, "t", 0, 200_000)
    assert sendfile_calls == []
    assert _fetch_raw(client, "t", 0, partition_max_bytes=500_000) == _stored(broker, "t", 0, 500_000)
    assert sum(sendfile_calls) >= 400_000


def test_the_fallback_sends_the_same_bytes(broker: Broker, refusing_sendfile: list[int]) -> None:
    broker.manager.create_topic("t", 1)
    client = broker.connect()
    for i in range(12):  # ~3 MiB: several chunks of the reused buffer
        _produce(client, "t", [b"%d" % i + b"y" * 50_000] * 5)
    stored = _stored(broker, "t", 0)
    assert len(stored) > 2 * WRITE_CHUNK
    for _ in range(3):
        assert _fetch_raw(client, "t", 0) == stored
        assert _fetch_raw(client, "t", 33) == _stored(broker, "t", 33)
    assert len(refusing_sendfile) == 1, "the connection keeps to the fallback after the first refusal"
    other = broker.connect()
    assert _fetch_raw(other, "t", 0) == stored
    assert len(refusing_sendfile) == 2, "each connection tries sendfile once"


def test_a_thousand_fetches_leave_no_descriptor_behind(broker: Broker, sendfile_calls: list[int]) -> None:
    broker.manager.create_topic("t", 3)
    client = broker.connect()
    for p in range(3):
        _produce(client, "t", [b"z" * 2000] * 3, partition=p)
    F = FetchRequest.FetchTopic
    request = samples.fetch("t", 0, max_bytes=INT32_MAX)
    request.topics = [F(topic="t", partitions=[F.FetchPartition(
        partition=p, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1, log_start_offset=-1,
        partition_max_bytes=INT32_MAX) for p in range(3)])]
    client.call(request, FetchResponse, 12)  # opens the segments' files and indexes the reads use
    before, process_before = _settled(broker), len(os.listdir("/proc/self/fd"))
    for _ in range(1000):
        response = client.call(request, FetchResponse, 12)
        assert all(p.records for p in response.responses[0].partitions)
    assert len(sendfile_calls) >= 3000
    _no_descriptor_left(broker, before)
    # the whole process too, given a moment: other tests' threads in this worker open and close their own
    wait_until(lambda: len(os.listdir("/proc/self/fd")) <= process_before + 2)  # (a thread pool may start a thread's pipe)
    assert len(os.listdir("/proc/self/fd")) <= process_before + 2


def test_long_polls_reading_again_close_what_they_read_first(broker: Broker) -> None:
    broker.manager.create_topic("t", 1)
    client, producer = broker.connect(), broker.connect()
    _produce(producer, "t", [b"first" * 100])
    _fetch_raw(client, "t")  # opens the segment's files and indexes the reads use
    before = _settled(broker)
    for round in range(5):
        # not enough bytes: the fetch waits, an append wakes it, it reads again, still short, and
        # answers at max_wait_ms with its second read
        client.send(samples.fetch("t", 0, min_bytes=10_000_000, max_wait_ms=300), 12)
        wait_until(lambda: broker.server.delayed_fetches == 1)
        _produce(producer, "t", [b"more%d" % round])
        response = client.receive(FetchResponse, 12)
        values = [r.value for _, b in iter_batches(response.responses[0].partitions[0].records) for r in b.records()]
        assert values[0] == b"first" * 100 and values[-1] == b"more%d" % round
    _no_descriptor_left(broker, before)


def _large_partition(broker: Broker, megabytes: int) -> None:
    broker.manager.create_topic("big", 1)
    client = broker.connect()
    for i in range(megabytes):
        _produce(client, "big", [b"%d" % i + b"b" * 200_000] * 5)
    client.close()


def _read_some_then_close(broker: Broker, how_much: int) -> None:
    client = broker.connect()
    client.send(samples.fetch("big", 0, max_bytes=INT32_MAX, partition_max_bytes=INT32_MAX), 12)
    got = 0
    while got < how_much:
        got += len(client.sock.recv(65536))
    client.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # reset at once
    client.close()


@pytest.mark.parametrize("fallback", [False, True], ids=["sendfile", "fallback"])
def test_a_client_leaving_mid_response_leaves_no_descriptor(make_broker: Callable[..., Broker],
                                                          monkeypatch: pytest.MonkeyPatch, fallback: bool) -> None:
    broker = make_broker()
    _large_partition(broker, 20)  # a 20 MB response
    if fallback:
        monkeypatch.setattr(os, "sendfile", _refuse)
    before = _warmed(broker, "big")
    for _ in range(3):
        _read_some_then_close(broker, 1 << 20)
    wait_until(lambda: broker.server.connection_count == 0)
    _no_descriptor_left(broker, before)
    client = broker.connect()
    assert len(_fetch_raw(client, "big", 0, max_bytes=1 << 20)) >= 1 << 20  # still serving


def test_a_client_that_stops_reading_is_closed_at_the_idle_limit(make_broker: Callable[..., Broker]) -> None:
    broker = make_broker(**{"connections.max.idle.ms": "600"})
    _large_partition(broker, 20)
    before = _warmed(broker, "big")
    client = broker.connect()
    client.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
    client.send(samples.fetch("big", 0, max_bytes=INT32_MAX, partition_max_bytes=INT32_MAX), 12)
    started = time.monotonic()
    wait_until(lambda: broker.server.connection_count == 1)
    wait_until(lambda: broker.server.connection_count == 0)  # no byte read: the sendfile piece times out
    assert time.monotonic() - started >= 0.5
    _no_descriptor_left(broker, before)
    assert client.closed_by_server()


def test_a_file_cut_short_under_a_response_aborts_the_connection_naming_it(
        broker: Broker, caplog: pytest.LogCaptureFixture) -> None:
    """The frame's size is sent before the records: a segment truncated underneath (here by hand,
    after the read) cannot be answered with fewer bytes, so the connection is aborted."""
    broker.manager.create_topic("t", 1)
    client = broker.connect()
    _produce(client, "t", [b"c" * 10_000] * 3)
    stored = _stored(broker, "t", 0)
    path = next(broker.manager.log_dir_paths()[0].glob("t-0/*.log"))
    real = file_send._sendfile_now

    def truncated_first(writer: asyncio.StreamWriter, part: FileSlice, *args: object) -> int:
        os.truncate(path, part.size - 100)
        return real(writer, part, *args)  # type: ignore[arg-type]

    with caplog.at_level(logging.WARNING, logger="tidelog.server.file_send"):
        file_send._sendfile_now = truncated_first  # type: ignore[assignment]
        try:
            client.send(samples.fetch("t", 0, max_bytes=INT32_MAX, partition_max_bytes=INT32_MAX), 12)
            received = b""
            try:
                while chunk := client.sock.recv(65536):
                    received += chunk
            except ConnectionResetError:
                pass
        finally:
            file_send._sendfile_now = real  # type: ignore[assignment]
    (size,) = struct.unpack(">i", received[:4])
    assert len(received) < 4 + size and len(stored) > 100
    assert any(str(path) in r.getMessage() and "100 bytes before" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("version", range(4, 13))
def test_a_response_of_slices_frames_the_bytes_kafka_python_would(version: int, tmp_path: Path) -> None:
    records = [os.urandom(n) for n in (300, 1, 70_000)]
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(b"".join(records))
    starts = [0, 300, 301]
    with open(path, "rb") as f:
        slices = [FileSlice.of(f.fileno(), start, len(r), path) for start, r in zip(starts, records, strict=True)]

    def topics(of: list[bytes] | list[FileSlice]) -> list[tuple[str, list[PartitionResponse]]]:
        return [("a", [PartitionResponse(0, 0, 9, 9, 0, None, of[0]), PartitionResponse(1, 3, -1, -1, -1, None, b""),
                       PartitionResponse(2, 0, 9, 9, 0, ((5, 6),), of[1])]),
                ("b", [PartitionResponse(0, 0, 9, 9, 0, (), of[2])])]

    framed = encode_fetch_response(version, 7, 0, 0, topics(slices))
    sent = b"".join(p.read() if isinstance(p, FileSlice) else p for p in framed.parts)
    assert sent == b"".join(encode_fetch_response(version, 7, 0, 0, topics(records)).parts)
    assert framed.size == len(sent) and sum(isinstance(p, FileSlice) for p in framed.parts) == 3
    framed.close()
    framed.close()
    assert all(s.closed for s in slices)


# --- send_slice on its own, over real transports: asyncio TCP, asyncio TLS, uvloop TCP -------------


class _Activity:
    def __init__(self) -> None:
        self.done_calls = 0

    def busy(self) -> None:
        pass

    def done(self) -> None:
        self.done_calls += 1


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def _sent_through(part: FileSlice, *, loop_factory: Callable[[], asyncio.AbstractEventLoop] = asyncio.new_event_loop,
                  pki: Pki | None = None, chunk: int = WRITE_CHUNK, sndbuf: int | None = None,
                  read_after_s: float = 0.0) -> tuple[bytes, bool, int]:
    """What a client receives when a server sends ``b"head"`` then ``part``; whether that
    connection fell back to the buffer; the activity count. ``sndbuf``: the server socket's send
    buffer; ``read_after_s``: how long the client waits before it reads (with a small send
    buffer, the server's writes then queue in its transport)."""
    server_tls = client_tls = None
    if pki is not None:
        server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        server_tls.load_cert_chain(str(pki.server_cert), str(pki.server_key))
        client_tls = client_context(pki.ca)
    outcome: dict[str, object] = {}
    activity = _Activity()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if sndbuf is not None:
            writer.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sndbuf)
        writer.write(b"head")
        await send_slice(writer, part, activity, chunk, TIMEOUT_S)
        await writer.drain()
        outcome["fallback"] = uses_fallback(writer)
        writer.close()

    async def run() -> bytes:
        server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=server_tls)
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client_tls,
                                                       server_hostname="localhost" if client_tls else None)
        await asyncio.sleep(read_after_s)
        data = await asyncio.wait_for(reader.read(), TIMEOUT_S)
        writer.close()
        server.close()
        await server.wait_closed()
        return data

    with asyncio.Runner(loop_factory=loop_factory) as runner:
        data = runner.run(run())
    return data, bool(outcome["fallback"]), activity.done_calls


@pytest.fixture
def a_slice(tmp_path: Path) -> Iterator[tuple[FileSlice, bytes]]:
    path = tmp_path / "00000000000000000000.log"
    content = os.urandom(3 * WRITE_CHUNK + 12345)
    path.write_bytes(content)
    with open(path, "rb") as f:
        part = FileSlice.of(f.fileno(), 777, len(content) - 1000, path)
    yield part, content[777:777 + len(content) - 1000]
    part.close()


def test_send_slice_uses_sendfile_on_an_asyncio_tcp_transport(a_slice: tuple[FileSlice, bytes],
                                                              sendfile_calls: list[int]) -> None:
    part, expected = a_slice
    data, fallback, activity = _sent_through(part)
    assert data == b"head" + expected and not fallback
    assert sendfile_calls[0] == len(expected), "first all the socket takes at once"
    assert max(sendfile_calls[1:], default=0) <= WRITE_CHUNK, "then loop.sendfile pieces of at most WRITE_CHUNK"
    assert activity >= 1


def test_send_slice_falls_back_on_tls(a_slice: tuple[FileSlice, bytes], pki: Pki, sendfile_calls: list[int]) -> None:
    part, expected = a_slice
    data, fallback, _ = _sent_through(part, pki=pki)
    assert data == b"head" + expected and fallback and sendfile_calls == []


def test_send_slice_on_uvloop_sends_what_the_socket_takes_then_falls_back(a_slice: tuple[FileSlice, bytes],
                                                                          sendfile_calls: list[int]) -> None:
    """uvloop has no loop.sendfile: the first step's os.sendfile, then the buffer for the rest."""
    part, expected = a_slice
    data, fallback, _ = _sent_through(part, loop_factory=uvloop.new_event_loop, chunk=100_000)
    assert data == b"head" + expected and not fallback and sendfile_calls[0] == len(expected)


@pytest.mark.parametrize("loop_factory", [uvloop.new_event_loop, asyncio.new_event_loop], ids=["uvloop", "asyncio"])
def test_the_fallback_waits_for_a_client_reading_slowly(a_slice: tuple[FileSlice, bytes], refusing_sendfile: list[int],
                                                         loop_factory: Callable[[], asyncio.AbstractEventLoop]) -> None:
    """A small send buffer and a client that reads late: the fallback's writes queue in the
    transport and it waits for them (its flow-control limits lowered for the wait, then restored)
    before refilling its buffer; every byte arrives in order."""
    part, expected = a_slice
    data, _, _ = _sent_through(part, loop_factory=loop_factory, chunk=100_000, sndbuf=16_384, read_after_s=0.3)
    assert data == b"head" + expected


def test_send_slice_falls_back_where_the_kernel_refuses(a_slice: tuple[FileSlice, bytes],
                                                        refusing_sendfile: list[int]) -> None:
    part, expected = a_slice
    data, fallback, _ = _sent_through(part, chunk=70_000)
    assert data == b"head" + expected and fallback and len(refusing_sendfile) == 1


def test_loop_sendfile_short_of_the_slice_aborts_naming_the_file(a_slice: tuple[FileSlice, bytes]) -> None:
    """The second step (loop.sendfile) meets the file's end before the slice's: ResponseCutShort,
    the connection aborted, a warning naming the file."""
    part, expected = a_slice
    os.truncate(part.path, part.position + len(expected) - 5000)
    outcome: dict[str, object] = {}

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        state = file_send._Connection()
        try:
            await file_send._sendfile(writer, part, 0, state, _Activity(), WRITE_CHUNK, TIMEOUT_S)
        except file_send.ResponseCutShort as e:
            outcome["error"] = str(e)
            outcome["closing"] = writer.transport.is_closing()

    async def run() -> bytes:
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        reader, writer = await asyncio.open_connection("127.0.0.1", server.sockets[0].getsockname()[1])
        data = b""
        try:
            while chunk := await asyncio.wait_for(reader.read(1 << 20), TIMEOUT_S):
                data += chunk
        except ConnectionResetError:
            pass
        writer.close()
        server.close()
        await server.wait_closed()
        return data

    data = asyncio.run(run())
    assert str(part.path) in str(outcome["error"]) and "5000 bytes before" in str(outcome["error"])
    assert outcome["closing"] is True
    assert expected.startswith(data) and len(data) <= len(expected) - 5000
