"""``tidelog serve`` against hostile input, as an attacker would send it: a Metadata request whose
topic name runs past its frame, and compressed batches that inflate far beyond their size."""

from __future__ import annotations

import re
import struct
from pathlib import Path

from kafka.protocol.admin import CreateTopicsResponse
from kafka.protocol.metadata import MetadataResponse
from kafka.protocol.producer import ProduceResponse

import server_samples as samples
from bench.bench_memory import gzip_record_bomb
from server_helpers import serve
from tidelog.server.errors import ErrorCode

MIB = 1 << 20


def _framed(request: object, version: int) -> bytes:
    request.with_header(correlation_id=1, client_id="attacker")  # type: ignore[attr-defined]
    request.API_VERSION = version  # type: ignore[attr-defined]
    return bytes(request.encode(header=True, framed=True))  # type: ignore[attr-defined]


def test_a_metadata_request_whose_topic_name_runs_past_its_frame_creates_nothing(tmp_path: Path) -> None:
    with serve(data=tmp_path / "data") as served:
        frame = _framed(samples.metadata("abcdefghijklmnop", auto_create=True), 1)  # v1 auto-creates
        cut = frame[4:frame.index(b"abcdefghijklmnop") + 3]  # the name declares 16 bytes, "abc" follows
        attacker = served.connect()
        attacker.send_bytes(struct.pack(">i", len(cut)) + cut)
        assert attacker.closed_by_server()
        listing = served.connect().call(_all_topics(), MetadataResponse, 12)
        assert [t.name for t in listing.topics] == []
    assert not any((tmp_path / "data").glob("abc*")), "no partition dir was created"


def _all_topics() -> object:
    request = samples.metadata()
    request.topics = None  # null: every topic
    return request


def _peak_rss_mib(pid: int) -> int:
    """The process's resident-set high-water mark (VmHWM), in MiB."""
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"VmHWM:\s+(\d+) kB", status).group(1)) // 1024  # type: ignore[union-attr]


def test_concurrent_decompression_bombs_are_refused_as_too_large_holding_little_memory(tmp_path: Path) -> None:
    bomb = gzip_record_bomb(100 * MIB)  # ~100 KB that inflate to 100 MiB: a valid batch Kafka would store
    assert len(bomb) < 120_000
    with serve(data=tmp_path / "data") as served:
        pid = served.process.pid
        served.connect().call(samples.create_topics("t"), CreateTopicsResponse, 7)
        served.connect().call(samples.produce("t", records=samples.record_batch(b"warm", codec_id=1)),
                              ProduceResponse, 9)
        before = _peak_rss_mib(pid)
        attackers = [served.connect() for _ in range(6)]
        for attacker in attackers:  # all six are in flight before the first answer is read
            attacker.send(samples.produce("t", records=bomb), 9)
        answers = [a.receive(ProduceResponse, 9).responses[0].partition_responses[0] for a in attackers]
        grown = _peak_rss_mib(pid) - before
        assert [a.error_code for a in answers] == [ErrorCode.MESSAGE_TOO_LARGE] * 6
        assert "max.message.bytes 1048588" in answers[0].error_message
        after = served.connect().call(samples.produce("t", records=samples.record_batch(b"next")), ProduceResponse, 9)
        assert after.responses[0].partition_responses[0].base_offset == 1, "no bomb was stored"
    assert grown < 64, f"the broker's peak RSS grew by {grown} MiB"
