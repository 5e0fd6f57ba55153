"""One ``tidelog serve`` subprocess over one data dir: start, SIGKILL, clean stop, recovery time.

The broker is configured so that everything a crash can interrupt happens within seconds:
small segments (many rolls), a cleaner that wakes every 100 ms and cleans at any dirty ratio,
retention checked every 200 ms, ``.deleted`` files removed after 100 ms, no initial task delay,
checkpoints at Kafka's default intervals (what a client was answered must not wait for them),
and no topic auto-creation (a topic comes back only if tidelog brings it back). It listens on a
free loopback port, learnt from the banner ``tidelog serve`` prints once it answers requests.
stderr (``-v``: INFO logs) goes to ``serve.log`` next to the data dir and to :attr:`lines`,
which the kill triggers watch.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from kafka.protocol.metadata import MetadataRequest, MetadataResponse

BROKER_OVERRIDES: dict[str, str] = {
    "listeners": "PLAINTEXT://127.0.0.1:0",
    "auto.create.topics.enable": "false",
    "log.initial.task.delay.ms": "0",
    "log.retention.check.interval.ms": "200",
    "log.segment.delete.delay.ms": "100",
    "log.cleaner.backoff.ms": "100",
    "log.cleaner.dedupe.buffer.size": str(1 << 20),
    "log.segment.bytes": "4096",
    "log.index.interval.bytes": "256",
    "log.index.size.max.bytes": "4096",
}
START_TIMEOUT_S = 60.0
_BANNER = re.compile(r"listening on PLAINTEXT://127\.0\.0\.1:(\d+)")


class BrokerDied(RuntimeError):
    """``tidelog serve`` exited before printing its banner (the log tail says why)."""


@dataclass
class ServeProcess:
    """``tidelog serve`` over ``data_dir``; ``env`` adds to the inherited environment (PYTHONPATH
    picks the code under test; TIDELOG_FAULTS arms kill points)."""

    data_dir: Path
    overrides: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    port: int = 0
    lines: list[tuple[float, str]] = field(default_factory=list)  # (monotonic time, stderr line)
    _process: subprocess.Popen[str] | None = None
    _reader: threading.Thread | None = None
    _killing: bool = False

    @property
    def log_path(self) -> Path:
        return self.data_dir.parent / "serve.log"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        """False from the moment :meth:`kill` decides to kill (a client error racing the signal is
        the kill's, not the broker's)."""
        return self._process is not None and not self._killing and self._process.poll() is None

    def start(self, extra_env: dict[str, str] | None = None) -> None:
        """Spawn the broker and return once it listens (its banner names the port)."""
        args = [sys.executable, "-m", "tidelog.cli.main", "--data-dir", str(self.data_dir), "-v"]
        for key, value in {**BROKER_OVERRIDES, **self.overrides}.items():
            args += ["--override", f"{key}={value}"]
        env = {**os.environ, **self.env, **(extra_env or {})}
        self._killing = False
        self._process = subprocess.Popen(args + ["serve"], stderr=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                         text=True, env=env)
        ready = threading.Event()
        self._reader = threading.Thread(target=self._read_stderr, args=(self._process, ready), daemon=True)
        self._reader.start()
        if not ready.wait(START_TIMEOUT_S) or not self.port:
            self.kill()
            raise BrokerDied(f"tidelog serve did not start; last lines:\n{self.tail()}")

    def _read_stderr(self, process: subprocess.Popen[str], ready: threading.Event) -> None:
        assert process.stderr is not None
        with open(self.log_path, "a") as log:
            log.write(f"--- start pid {process.pid}\n")
            for line in process.stderr:
                log.write(line)
                self.lines.append((time.monotonic(), line.rstrip("\n")))
                match = _BANNER.search(line)
                if match and not ready.is_set():
                    self.port = int(match.group(1))
                    ready.set()
        ready.set()  # exited: start() reports it

    def kill(self) -> float:
        """SIGKILL; returns the monotonic time of the kill."""
        when = time.monotonic()
        self._killing = True
        if self._process is not None and self._process.poll() is None:
            self._process.send_signal(signal.SIGKILL)
        self._join()
        return when

    def stop(self, timeout_s: float = 60.0) -> int:
        """SIGTERM and wait: the manager shuts down cleanly. Returns the exit code."""
        assert self._process is not None
        self._process.send_signal(signal.SIGTERM)
        try:
            code = self._process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            raise
        self._join()
        return code

    def _join(self) -> None:
        if self._process is not None:
            self._process.wait()
        if self._reader is not None:
            self._reader.join(5)

    def exit_code(self) -> int | None:
        return None if self._process is None else self._process.poll()

    def cpu_seconds(self) -> float:
        """User + system CPU the running broker has used so far (from ``/proc``; 0 if unknown)."""
        if self._process is None:
            return 0.0
        try:
            fields = Path(f"/proc/{self._process.pid}/stat").read_text().rpartition(")")[2].split()
        except OSError:
            return 0.0
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def tail(self, n: int = 30) -> str:
        return "\n".join(line for _, line in self.lines[-n:])

    def answers_metadata(self, timeout_s: float = 10.0) -> bool:
        """One Metadata request (v1, all topics) answered on a fresh connection."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=timeout_s) as sock:
                request = MetadataRequest[1](topics=None)
                request.API_VERSION = 1
                request.with_header(correlation_id=1, client_id="crash-harness")
                sock.sendall(bytes(request.encode(header=True, framed=True)))
                size = struct.unpack(">i", _exactly(sock, 4))[0]
                MetadataResponse[1].decode(_exactly(sock, size), header=True)
                return True
        except OSError:
            return False


def _exactly(sock: socket.socket, n: int) -> bytes:
    chunks = []
    while n:
        chunk = sock.recv(n)
        if not chunk:
            raise ConnectionError("broker closed the connection")
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)
