"""A real S3-compatible object store on loopback: SeaweedFS's ``weed server -s3`` in one process.

``WeedS3Server(work_dir)`` picks free 127.0.0.1 ports for the master, volume, filer and S3 servers
(HTTP and gRPC each), writes an S3 identity file (one access key and secret with admin rights: a
request signed with another secret gets a real ``403 SignatureDoesNotMatch``), starts ``weed``
with its data under ``work_dir`` and returns once S3 answers ``/healthz`` and the master assigns
a file id (a volume server is registered, so the first PUT does not race the cluster forming).
``stop()`` sends SIGTERM to the process group, waits :data:`STOP_TIMEOUT_S`, then SIGKILLs it;
afterwards nothing of the group is left.

Cost: ``start()`` takes ~7 s on 2 shared cores (mostly the master waiting before it assigns);
``stop()`` ~15 s unless given a shorter bound. The running server holds ~165 MiB of RSS; buckets
are cheap (20 buckets of one small object each: < 2 MiB on disk). Volumes are capped at 64 MiB
(``-master.volumeSizeLimitMB``) and their count follows free disk (``-volume.max=0``), so a bucket
per test never runs out of volume slots.

Not part of the installed package: tests import it from the repository root.
"""

from __future__ import annotations

import atexit
import json
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from kafka_oracle.broker import free_port, stop_process_group
from object_store_oracle.weed_build import weed_binary

START_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 20.0
START_ATTEMPTS = 3
VOLUME_SIZE_LIMIT_MB = 64
_BIND_FAILURE = ("address already in use", "bind: ")
_COMPONENTS = ("master", "volume", "filer", "s3")

_RUNNING: set[WeedS3Server] = set()


@atexit.register
def _kill_leftovers() -> None:
    # a test session that dies must not leave weed holding ports and files
    for server in list(_RUNNING):
        server.stop(timeout_s=0.0)


class ObjectStoreError(RuntimeError):
    """weed did not start or stop; the message carries the tail of its log."""


@dataclass(frozen=True, slots=True)
class S3Credentials:
    """What a client needs: endpoint URL (``http://127.0.0.1:<port>``), keys and region."""

    endpoint_url: str
    access_key: str
    secret_key: str
    region: str


class WeedS3Server:
    """One ``weed server -s3`` on loopback with its data in ``work_dir``; a context manager.

    Not thread-safe: one owner starts and stops it. ``start`` on a running server raises.
    """

    def __init__(self, work_dir: Path, *, access_key: str = "tidelog-test",
                 secret_key: str = "tidelog-test-secret", region: str = "us-east-1",
                 binary: Path | None = None) -> None:
        self.work_dir = Path(work_dir)
        self.access_key = access_key
        self.secret_key = secret_key
        self.region = region
        self._binary = binary
        self._process: subprocess.Popen[bytes] | None = None
        self._socket_dir: str | None = None
        self.ports: dict[str, int] = {}

    # --- where things are ---------------------------------------------------------------------
    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.ports['s3']}"

    @property
    def credentials(self) -> S3Credentials:
        return S3Credentials(self.endpoint_url, self.access_key, self.secret_key, self.region)

    @property
    def log_file(self) -> Path:
        return self.work_dir / "weed.log"

    @property
    def pid(self) -> int | None:
        """The weed process id (also its process group id) while started, else None."""
        return self._process.pid if self._process is not None else None

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    # --- lifecycle ----------------------------------------------------------------------------
    def start(self, timeout_s: float = START_TIMEOUT_S) -> S3Credentials:
        """Start weed and return once S3 serves; builds or finds the binary first (see weed_build).
        Ports taken between choosing and binding them are retried on new ports."""
        if self.running:
            raise ObjectStoreError("weed is already running")
        binary = self._binary or weed_binary()
        for attempt in range(1, START_ATTEMPTS + 1):
            log_start = self.log_file.stat().st_size if self.log_file.exists() else 0
            try:
                self._start_once(binary, timeout_s)
                return self.credentials
            except ObjectStoreError:
                self.stop(timeout_s=1.0)
                if attempt == START_ATTEMPTS or not self._bind_failed(log_start):
                    raise
        raise ObjectStoreError(f"START_ATTEMPTS is {START_ATTEMPTS}: no attempt made")

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> None:
        """SIGTERM to weed's process group, wait up to ``timeout_s``, then SIGKILL; idempotent.

        weed takes ~15 s to exit on SIGTERM (its filer retries flushing its metadata log after the
        volume server has gone). Afterwards no process of the group, no listener and no socket
        file is left (weed names its gRPC sockets ``/tmp/seaweedfs-<server>-grpc-<port>.sock``).
        """
        if self._process is not None:
            stop_process_group(self._process, timeout_s)
            self._process = None
        _RUNNING.discard(self)
        for name in _COMPONENTS:
            if f"{name}.grpc" in self.ports:
                Path(f"/tmp/seaweedfs-{name}-grpc-{self.ports[f'{name}.grpc']}.sock").unlink(missing_ok=True)
        if self._socket_dir is not None:
            shutil.rmtree(self._socket_dir, ignore_errors=True)
            self._socket_dir = None

    def __enter__(self) -> WeedS3Server:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def log_tail(self, lines: int = 30) -> str:
        if not self.log_file.exists():
            return "(no log)"
        return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])

    # --- internals ----------------------------------------------------------------------------
    def _start_once(self, binary: Path, timeout_s: float) -> None:
        self._pick_ports()
        data = self.work_dir / "data"
        data.mkdir(parents=True, exist_ok=True)
        # unix sockets need a short path (108 bytes); pytest's tmp paths can be longer
        self._socket_dir = tempfile.mkdtemp(prefix="weed-")
        log = open(self.log_file, "ab")  # noqa: SIM115 - the child owns it
        self._process = subprocess.Popen(
            [str(binary), *self._arguments(data, self._socket_dir)], cwd=self.work_dir, stdout=log,
            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        log.close()
        _RUNNING.add(self)
        self._wait_ready(timeout_s)

    def _pick_ports(self) -> None:
        taken: list[int] = []
        for name in _COMPONENTS:
            for key in (name, f"{name}.grpc"):
                taken.append(free_port(exclude=tuple(taken)))
                self.ports[key] = taken[-1]

    def _arguments(self, data: Path, socket_dir: str) -> list[str]:
        config = self.work_dir / "s3-identities.json"
        config.write_text(json.dumps({"identities": [{
            "name": "tidelog",
            "credentials": [{"accessKey": self.access_key, "secretKey": self.secret_key}],
            "actions": ["Admin", "Read", "List", "Tagging", "Write"]}]}))
        ports = [f"-{key.replace('.grpc', '.port.grpc')}={port}" if key.endswith(".grpc")
                 else f"-{key}.port={port}" for key, port in self.ports.items()]
        return [
            "server", "-ip=127.0.0.1", "-ip.bind=127.0.0.1", f"-dir={data}", "-s3", *ports,
            f"-s3.config={config}", "-s3.port.iceberg=0", "-s3.port.lance=0",
            f"-filer.localSocket={socket_dir}/filer.sock", f"-s3.localSocket={socket_dir}/s3.sock",
            "-volume.max=0", f"-master.volumeSizeLimitMB={VOLUME_SIZE_LIMIT_MB}",
            "-volume.preStopSeconds=0", "-master.telemetry=false",
            "-s3.autoCreateBucket=false",  # as S3: a PUT into a missing bucket is NoSuchBucket
        ]

    def _wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not (self._answers(f"{self.endpoint_url}/healthz")
                   and self._answers(f"http://127.0.0.1:{self.ports['master']}/dir/assign")):
            if self._process is None or self._process.poll() is not None:
                code = self._process.returncode if self._process is not None else None
                raise ObjectStoreError(f"weed exited with {code} while starting:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                raise ObjectStoreError(f"weed's S3 did not answer within {timeout_s:.0f} s:\n{self.log_tail()}")
            time.sleep(0.2)

    @staticmethod
    def _answers(url: str) -> bool:
        """True when ``url`` answers 200 (for /dir/assign: with a file id, not an error)."""
        try:
            with urllib.request.urlopen(url, timeout=2.0) as response:
                body = response.read()
        except (urllib.error.URLError, OSError):
            return False
        return b'"error"' not in body

    def _bind_failed(self, log_start: int) -> bool:
        with open(self.log_file, "rb") as log:
            log.seek(log_start)
            text = log.read().decode(errors="replace").lower()
        return any(marker in text for marker in _BIND_FAILURE)
