"""Helpers of the security tests: a broker on secured listeners, SASL users, a throwaway PKI made
with the ``openssl`` command (the ``cryptography`` package is not a dependency), and raw TLS and
SASL steps where exact bytes or errors matter."""

from __future__ import annotations

import socket
import ssl
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kafka.protocol.sasl import SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest
from kafka.protocol.sasl import SaslHandshakeResponse

from server_helpers import TIMEOUT_S, RawClient, event_loop_props
from tidelog.manager import LogManager
from tidelog.server import ServerConfig, ServerThread
from tidelog.server.security.credentials import credentials_path, load_credentials, new_user_credential
from tidelog.server.security.credentials import save_credentials
from tidelog.storage.config import BrokerConfig
from tidelog.testing import FakeClock, FakeScheduler


@dataclass
class SecureBroker:
    manager: LogManager
    thread: ServerThread
    port: int

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def raw(self, context: ssl.SSLContext | None = None) -> RawClient:
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=TIMEOUT_S)
        if context is not None:
            sock = context.wrap_socket(sock, server_hostname="localhost")
        return RawClient(sock)

    def stop(self) -> None:
        self.thread.stop()
        self.manager.shutdown()


def start_secure_broker(data: Path, **props: object) -> SecureBroker:
    """A broker whose ``listeners`` (one, port 0) and security keys come from ``props``."""
    broker = BrokerConfig.from_properties({"log.dirs": str(data), **event_loop_props(), **props})
    manager = LogManager.open(broker, scheduler=FakeScheduler(FakeClock()))
    thread = ServerThread(manager, ServerConfig.from_broker(broker), io_threads=2)
    try:
        thread.start()
    except BaseException:
        manager.shutdown()
        raise
    return SecureBroker(manager, thread, thread.server.bound[0].port)


def add_user(data: Path, name: str, password: str, *mechanisms: str) -> None:
    """What ``tidelog users add`` does, without the command."""
    data.mkdir(parents=True, exist_ok=True)
    path = credentials_path(data)
    users = load_credentials(path)
    users.setdefault(name, {}).update({m: new_user_credential(m, password) for m in mechanisms})
    save_credentials(path, users)


# --- SASL by hand ----------------------------------------------------------------------------------

def handshake(client: RawClient, mechanism: str, version: int = 1) -> Any:
    return client.call(SaslHandshakeRequest(mechanism=mechanism), SaslHandshakeResponse, version)


def authenticate(client: RawClient, token: bytes, version: int = 2) -> Any:
    return client.call(SaslAuthenticateRequest(auth_bytes=token), SaslAuthenticateResponse, version)


# --- a throwaway PKI ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Pki:
    """Two CAs; the server's key+chain (``server_keystore``, for ``ssl.keystore.location``) and a
    client's, signed by ``ca``; a client signed by ``other_ca`` only."""

    ca: Path
    other_ca: Path
    server_key: Path
    server_cert: Path
    server_keystore: Path
    client_key: Path
    client_cert: Path
    stranger_key: Path
    stranger_cert: Path


def _openssl(*args: str | Path) -> None:
    subprocess.run(["openssl", *map(str, args)], check=True, capture_output=True, timeout=30)


def _ca(directory: Path, name: str) -> tuple[Path, Path]:
    key, cert = directory / f"{name}.key", directory / f"{name}.pem"
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", key, "-out", cert, "-days", "2", "-subj", f"/CN={name}")
    return key, cert


def _signed(directory: Path, name: str, ca: tuple[Path, Path], *extensions: str) -> tuple[Path, Path]:
    key, cert = directory / f"{name}.key", directory / f"{name}.pem"
    added = [arg for ext in extensions for arg in ("-addext", ext)]
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", key, "-out", cert, "-days", "2", "-subj", f"/CN={name}", "-CA", ca[1], "-CAkey", ca[0],
             *added)
    return key, cert


def make_pki(directory: Path) -> Pki:
    directory.mkdir(parents=True, exist_ok=True)
    ca, other = _ca(directory, "test-ca"), _ca(directory, "other-ca")
    server = _signed(directory, "localhost", ca, "subjectAltName=DNS:localhost,IP:127.0.0.1",
                     "basicConstraints=critical,CA:FALSE")
    client = _signed(directory, "client", ca, "basicConstraints=critical,CA:FALSE")
    stranger = _signed(directory, "stranger", other, "basicConstraints=critical,CA:FALSE")
    keystore = directory / "server-keystore.pem"
    keystore.write_bytes(server[0].read_bytes() + server[1].read_bytes())
    return Pki(ca[1], other[1], server[0], server[1], keystore, client[0], client[1], stranger[0], stranger[1])


def client_context(cafile: Path, cert: tuple[Path, Path] | None = None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(cafile))
    if cert is not None:
        context.load_cert_chain(str(cert[1]), str(cert[0]))
    return context
