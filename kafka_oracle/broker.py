"""A real single-node Kafka broker (KRaft, combined broker + controller) on loopback.

``KafkaBroker(distribution, log_dir, work_dir)`` writes ``server.properties`` into ``work_dir``,
formats ``log_dir`` with Kafka's ``StorageTool`` on first start, starts ``kafka.Kafka`` and waits
for "Kafka Server started" in its ``server.log``. ``stop()`` is a clean shutdown (SIGTERM: Kafka
flushes, checkpoints and writes ``.kafka_cleanshutdown``); ``kill()`` is ``kill -9``. The
metadata log lives in ``log_dir`` (``__cluster_metadata-0``), as in a default Kafka install, so
the data dir is a real broker's data dir.

A KRaft broker learns its topics from the metadata log: to serve segments written elsewhere,
create the topic through the broker, stop it, replace the partition dir's files, start again.
"""

from __future__ import annotations

import atexit
import os
import random
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from types import TracebackType

from kafka_oracle.jars import HERE, KafkaDistribution

CLUSTER_ID = "dGlkZWxvZy1vcmFjbGUAAA"  # any 22-char base64 UUID; fixed so a re-format is harmless
NODE_ID = 1
START_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 60.0
READY_LINE = "Kafka Server started"

_RUNNING: set[subprocess.Popen[bytes]] = set()


@atexit.register
def _kill_leftovers() -> None:
    # a test session that dies must not leave a JVM holding ports and files
    for process in list(_RUNNING):
        if process.poll() is None:
            process.kill()


# Below Linux's ephemeral range (32768-60999): a port bind(0) hands out can be taken by any
# client's outgoing connection before the broker's JVM binds it.
_PORT_RANGE = (20000, 32000)
_BIND_FAILURE = ("Address already in use", "BindException")
START_ATTEMPTS = 3


def free_port(exclude: tuple[int, ...] = ()) -> int:
    """A loopback port nothing listens on now, outside the ephemeral range and ``exclude``."""
    for _ in range(1000):
        port = random.randrange(*_PORT_RANGE)
        if port in exclude:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise OSError(f"no free loopback port in {_PORT_RANGE}")


def stop_process_group(process: subprocess.Popen[bytes], timeout_s: float) -> None:
    """Stop a program started in a session of its own: SIGTERM to ``process``'s group, wait up to
    ``timeout_s`` for ``process``, then SIGKILL the whole group (a clean exit can still leave a
    child of it behind) and reap ``process``. Blocks up to ``timeout_s``."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()


class BrokerError(RuntimeError):
    """The broker did not format, start or stop; the message carries the tail of its log."""


class KafkaBroker:
    def __init__(self, distribution: KafkaDistribution, log_dir: Path, work_dir: Path, *,
                 overrides: Mapping[str, str] | None = None, heap: str = "768m") -> None:
        self.distribution = distribution
        self.log_dir = Path(log_dir)
        self.work_dir = Path(work_dir)
        self._pick_ports()
        self.overrides = dict(overrides or {})
        self.heap = heap
        self._process: subprocess.Popen[bytes] | None = None
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.properties_file = self.work_dir / "server.properties"

    # --- where things are ---------------------------------------------------------------------
    @property
    def bootstrap_servers(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def server_log(self) -> Path:
        return self.work_dir / "server.log"

    @property
    def cleaner_log(self) -> Path:
        return self.work_dir / "log-cleaner.log"

    def partition_dir(self, topic: str, partition: int = 0) -> Path:
        return self.log_dir / f"{topic}-{partition}"

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def properties(self) -> dict[str, str]:
        props = {
            "process.roles": "broker,controller",
            "node.id": str(NODE_ID),
            "controller.quorum.voters": f"{NODE_ID}@127.0.0.1:{self.controller_port}",
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name": "PLAINTEXT",
            "log.dirs": str(self.log_dir),
            "num.partitions": "1",
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
        }
        props.update(self.overrides)
        return props

    # --- lifecycle ----------------------------------------------------------------------------
    def write_properties(self) -> None:
        lines = [f"{key}={value}" for key, value in self.properties().items()]
        self.properties_file.write_text("\n".join(lines) + "\n")

    def format(self) -> None:
        """Kafka's ``StorageTool format`` on ``log_dir`` (skipped when already formatted)."""
        self.write_properties()
        if (self.log_dir / "meta.properties").exists():
            return
        command = self.distribution.java_command(
            "kafka.tools.StorageTool", "format", "-t", CLUSTER_ID, "-c", str(self.properties_file),
            jvm_options=self._logging_options())
        done = subprocess.run(command, capture_output=True, text=True, timeout=START_TIMEOUT_S)
        if done.returncode != 0:
            raise BrokerError(f"kafka-storage format of {self.log_dir} failed:\n{done.stdout}{done.stderr}")

    def start(self, timeout_s: float = START_TIMEOUT_S) -> None:
        """Start the broker and return once it serves (its log says so); format ``log_dir`` first.
        A port taken between choosing it and the JVM binding it is retried on new ports."""
        if self.running:
            raise BrokerError("the broker is already running")
        for attempt in range(1, START_ATTEMPTS + 1):
            log_start = self.server_log.stat().st_size if self.server_log.exists() else 0
            try:
                self._start_once(timeout_s, log_start)
                return
            except BrokerError:
                if attempt == START_ATTEMPTS or not any(m in self._log_since(log_start) for m in _BIND_FAILURE):
                    raise
                self._pick_ports()

    def _pick_ports(self) -> None:
        self.port = free_port()
        self.controller_port = free_port(exclude=(self.port,))

    def _start_once(self, timeout_s: float, log_start: int) -> None:
        self.format()
        command = self.distribution.java_command(
            "kafka.Kafka", str(self.properties_file),
            jvm_options=(f"-Xmx{self.heap}", f"-Xms{self.heap}", "-Djava.awt.headless=true",
                         *self._logging_options()))
        stdout = open(self.work_dir / "stdout.txt", "ab")  # noqa: SIM115 - the child owns it
        self._process = subprocess.Popen(command, stdout=stdout, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)
        stdout.close()
        _RUNNING.add(self._process)
        self.wait_for(lambda: READY_LINE in self._log_since(log_start), "the broker to start", timeout_s)

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> None:
        """Clean shutdown (SIGTERM): Kafka flushes, checkpoints and writes ``.kafka_cleanshutdown``."""
        process = self._process
        if process is None or process.poll() is not None:
            self._forget()
            return
        process.send_signal(signal.SIGTERM)
        try:
            code = process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired as exc:
            process.kill()
            process.wait()
            raise BrokerError(f"the broker did not stop within {timeout_s:.0f} s; killed") from exc
        finally:
            self._forget()
        if code not in (0, 143, -signal.SIGTERM):
            raise BrokerError(f"the broker exited with {code} on SIGTERM:\n{self.log_tail()}")

    def kill(self) -> None:
        """``kill -9``: no flush, no checkpoint, no clean-shutdown marker."""
        process = self._process
        if process is not None and process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        self._forget()

    def __enter__(self) -> KafkaBroker:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc_type is None:
            self.stop()
        else:
            self.kill()

    # --- waiting and logs ---------------------------------------------------------------------
    def wait_for(self, condition: Callable[[], bool], what: str, timeout_s: float,
                 poll_s: float = 0.1) -> None:
        """Poll ``condition`` until true; fail with the log's tail when it times out or the broker dies."""
        deadline = time.monotonic() + timeout_s
        while not condition():
            if self._process is not None and self._process.poll() is not None:
                code = self._process.returncode
                self._forget()
                raise BrokerError(f"the broker exited ({code}) while waiting for {what}:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                raise BrokerError(f"timed out after {timeout_s:.0f} s waiting for {what}:\n{self.log_tail()}")
            time.sleep(poll_s)

    def log_tail(self, lines: int = 30) -> str:
        """The last ``lines`` of the broker's logs, after its first ERROR/FATAL lines (a failed
        start logs its cause long before the shutdown lines that end the log)."""
        parts = []
        for path in (self.server_log, self.work_dir / "stdout.txt"):
            if path.exists():
                text = path.read_text(errors="replace").splitlines()
                errors = [line for line in text if " ERROR " in line or " FATAL " in line][:5]
                if errors:
                    parts.append(f"--- {path.name}: first errors\n" + "\n".join(errors))
                parts.append(f"--- {path.name}\n" + "\n".join(text[-lines:]))
        return "\n".join(parts) or "(no broker log)"

    def _log_since(self, offset: int) -> str:
        if not self.server_log.exists():
            return ""
        with open(self.server_log, "rb") as log:
            log.seek(offset)
            return log.read().decode(errors="replace")

    def _logging_options(self) -> tuple[str, ...]:
        logs = f"-Dkafka.logs.dir={self.work_dir}"
        if self.distribution.line >= 4:
            return (f"-Dlog4j2.configurationFile={HERE / 'log4j2.properties'}", logs)
        return (f"-Dlog4j.configuration=file:{HERE / 'log4j.properties'}", logs)

    def _forget(self) -> None:
        if self._process is not None:
            _RUNNING.discard(self._process)
        self._process = None
