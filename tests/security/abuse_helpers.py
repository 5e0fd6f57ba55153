"""Helpers of the abuse tests: a ``tidelog serve`` subprocess, its memory and descriptors, and
snapshots of the files around a log dir (to prove nothing was created outside it)."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from server_helpers import TIMEOUT_S, RawClient

_LISTENING = re.compile(r"listening on (\w+)://127\.0\.0\.1:(\d+)")


@dataclass
class Served:
    process: subprocess.Popen[str]
    data: Path
    ports: dict[str, int]  # listener name -> bound port

    @property
    def port(self) -> int:
        return next(iter(self.ports.values()))

    def raw(self, listener: str | None = None, source: str = "127.0.0.1") -> RawClient:
        port = self.ports[listener] if listener else self.port
        return RawClient(socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT_S,
                                                  source_address=(source, 0)))

    def rss_kib(self) -> int:
        """The server's resident memory (VmRSS), KiB."""
        status = Path(f"/proc/{self.process.pid}/status").read_text()
        return int(re.search(r"VmRSS:\s+(\d+) kB", status).group(1))  # type: ignore[union-attr]

    def open_fds(self) -> int:
        return len(os.listdir(f"/proc/{self.process.pid}/fd"))

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.process.stderr is not None:
            self.process.stderr.close()
        return self.process.returncode


def tidelog(*args: str, data: Path | None = None, umask: int | None = None, input: str | None = None,
            **props: object) -> subprocess.CompletedProcess[str]:
    """Run one ``tidelog`` command to completion."""
    return subprocess.run(_command(data, props, *args), input=input, capture_output=True, text=True,
                          timeout=120, preexec_fn=_umask(umask))


def start_serve(data: Path, umask: int | None = None, **props: object) -> Served:
    """``tidelog serve`` on loopback port(s) 0; returns once every listener is bound."""
    props.setdefault("listeners", "PLAINTEXT://127.0.0.1:0")
    expected = len(str(props["listeners"]).split(","))
    process = subprocess.Popen(_command(data, props, "serve"), stderr=subprocess.PIPE, text=True,
                               preexec_fn=_umask(umask))
    ports: dict[str, int] = {}
    lines = []
    assert process.stderr is not None
    while len(ports) < expected:
        line = process.stderr.readline()
        lines.append(line)
        if not line:
            process.wait(timeout=60)
            raise AssertionError(f"tidelog serve exited {process.returncode}: {''.join(lines)}")
        for name, port in _LISTENING.findall(line):
            ports[name] = int(port)
    _drain(process)
    return Served(process, data, ports)


def _drain(process: subprocess.Popen[str]) -> None:
    """Keep reading the server's stderr so its logging never blocks on a full pipe."""
    import threading

    def run() -> None:
        assert process.stderr is not None
        for _ in process.stderr:
            pass

    threading.Thread(target=run, daemon=True).start()


def _command(data: Path | None, props: dict[str, object], *args: str) -> list[str]:
    command = [sys.executable, "-m", "tidelog.cli.main"]
    if data is not None:
        command += ["--data-dir", str(data)]
    for key, value in props.items():
        command += ["--override", f"{key}={value}"]
    return [*command, *args]


def _umask(mask: int | None):  # type: ignore[no-untyped-def]
    return None if mask is None else (lambda: os.umask(mask))


def tree(root: Path) -> set[str]:
    """Every path under ``root``, relative to it (the filesystem state a test compares)."""
    return {str(p.relative_to(root)) for p in root.rglob("*")}
