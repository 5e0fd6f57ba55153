"""``tidelog serve`` against hostile input, as an attacker would send it: a Metadata request whose
topic name runs past its frame, and compressed batches that inflate far beyond their size."""

from __future__ import annotations

import re
import signal
import socket
import struct
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from kafka.protocol.metadata import MetadataResponse

import server_samples as samples
from server_helpers import TIMEOUT_S, RawClient


@contextmanager
def serve(data: Path, *overrides: str) -> Iterator[int]:
    """``tidelog serve`` on a free loopback port (yielded), stopped by SIGTERM afterwards."""
    args = [arg for override in ("listeners=PLAINTEXT://127.0.0.1:0", *overrides) for arg in ("--override", override)]
    process = subprocess.Popen([sys.executable, "-m", "tidelog.cli.main", "--data-dir", str(data), *args, "serve"],
                               stderr=subprocess.PIPE, text=True)
    try:
        assert process.stderr is not None
        banner = process.stderr.readline()
        match = re.search(r"listening on PLAINTEXT://127\.0\.0\.1:(\d+)", banner)
        assert match, banner
        yield int(match.group(1))
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0
    finally:
        if process.poll() is None:
            process.kill()


def _connect(port: int) -> RawClient:
    return RawClient(socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT_S))


def _framed(request: object, version: int) -> bytes:
    request.with_header(correlation_id=1, client_id="attacker")  # type: ignore[attr-defined]
    request.API_VERSION = version  # type: ignore[attr-defined]
    return bytes(request.encode(header=True, framed=True))  # type: ignore[attr-defined]


def test_a_metadata_request_whose_topic_name_runs_past_its_frame_creates_nothing(tmp_path: Path) -> None:
    with serve(tmp_path / "data") as port:
        frame = _framed(samples.metadata("abcdefghijklmnop", auto_create=True), 1)  # v1 auto-creates
        cut = frame[4:frame.index(b"abcdefghijklmnop") + 3]  # the name declares 16 bytes, "abc" follows
        attacker = _connect(port)
        attacker.send_bytes(struct.pack(">i", len(cut)) + cut)
        assert attacker.closed_by_server()
        listing = _connect(port).call(_all_topics(), MetadataResponse, 12)
        assert [t.name for t in listing.topics] == []
    assert not any((tmp_path / "data").glob("abc*")), "no partition dir was created"


def _all_topics() -> object:
    request = samples.metadata()
    request.topics = None  # null: every topic
    return request
