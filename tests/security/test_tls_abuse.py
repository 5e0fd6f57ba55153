"""TLS with bad certificates, against a real ``tidelog serve`` on an SSL listener: an expired
server certificate and a wrong host name fail the client's verification; with
``ssl.client.auth=required``, an expired client certificate, a self-signed one and one of
another CA are refused (no certificate and another CA's: tests/server/test_security_tls.py).
After each refusal the listener keeps serving good clients."""

from __future__ import annotations

import socket
import ssl
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from kafka.protocol.metadata import MetadataResponse

import server_samples as samples
from abuse_helpers import Served
from security_helpers import Pki, client_context, make_pki
from server_helpers import TIMEOUT_S, RawClient, api_versions

_CA_CONFIG = """[ca]
default_ca = backdated
[backdated]
database = index.txt
new_certs_dir = .
serial = serial
default_md = sha256
policy = anything
copy_extensions = copy
[anything]
commonName = supplied
"""


def _openssl(cwd: Path, *args: str | Path) -> None:
    subprocess.run(["openssl", *map(str, args)], check=True, capture_output=True, timeout=30, cwd=cwd)


def expired(directory: Path, name: str, ca_key: Path, ca_cert: Path, *extensions: str) -> tuple[Path, Path]:
    """A key and a certificate signed by the CA, valid for one day in January 2020 only
    (``openssl ca`` with explicit dates: ``req -days`` cannot go backwards)."""
    work = directory / f"{name}-ca"
    work.mkdir()
    (work / "ca.cnf").write_text(_CA_CONFIG)
    (work / "index.txt").write_text("")
    (work / "serial").write_text("01\n")
    key, csr, cert = directory / f"{name}.key", work / f"{name}.csr", directory / f"{name}.pem"
    added = [arg for ext in extensions for arg in ("-addext", ext)]
    _openssl(work, "req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", key, "-out", csr, "-subj", f"/CN={name}", *added)
    _openssl(work, "ca", "-batch", "-config", "ca.cnf", "-cert", ca_cert, "-keyfile", ca_key, "-in", csr,
             "-out", cert, "-startdate", "20200101000000Z", "-enddate", "20200102000000Z", "-notext")
    return key, cert


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    return make_pki(tmp_path / "pki")


def _tls(served: Served, context: ssl.SSLContext, host: str = "localhost") -> RawClient:
    sock = socket.create_connection(("127.0.0.1", served.port), timeout=TIMEOUT_S)
    return RawClient(context.wrap_socket(sock, server_hostname=host))


def _refused(served: Served, context: ssl.SSLContext) -> bool:
    """The handshake or the first exchange after it fails (TLS 1.3 reports a refused client
    certificate only when the client next reads)."""
    try:
        client = _tls(served, context)
    except (ssl.SSLError, ConnectionError):
        return True
    try:
        api_versions(client)
    except (ssl.SSLError, ConnectionError):
        return True
    finally:
        client.close()
    return False


def _serves(served: Served, context: ssl.SSLContext) -> bool:
    client = _tls(served, context)
    try:
        return client.call(samples.metadata(), MetadataResponse, 12).brokers[0].port == served.port
    finally:
        client.close()


def _ssl_props(keystore: Path, **extra: str) -> dict[str, str]:
    return {"listeners": "SSL://127.0.0.1:0", "ssl.keystore.type": "PEM", "ssl.keystore.location": str(keystore),
            **extra}


def test_an_expired_server_certificate_and_a_wrong_host_name_fail_verification(
        serve: Callable[..., Served], pki: Pki, tmp_path: Path) -> None:
    key, cert = expired(tmp_path / "pki", "expired-server", pki.ca.with_suffix(".key"), pki.ca,
                        "subjectAltName=DNS:localhost,IP:127.0.0.1")
    keystore = tmp_path / "pki" / "expired-keystore.pem"
    keystore.write_bytes(key.read_bytes() + cert.read_bytes())
    served = serve(**_ssl_props(keystore))
    with pytest.raises(ssl.SSLCertVerificationError, match="expired"):
        _tls(served, client_context(pki.ca))
    served.stop()
    served = serve(tmp_path / "data2", **_ssl_props(pki.server_keystore))
    with pytest.raises(ssl.SSLCertVerificationError, match="match|mismatch"):
        _tls(served, client_context(pki.ca), host="broker.example.com")
    assert _serves(served, client_context(pki.ca))


def test_required_client_auth_refuses_expired_self_signed_and_foreign_certificates(
        serve: Callable[..., Served], pki: Pki, tmp_path: Path) -> None:
    directory = tmp_path / "pki"
    stale = expired(directory, "stale-client", pki.ca.with_suffix(".key"), pki.ca, "basicConstraints=critical,CA:FALSE")
    own_key, own_cert = directory / "self.key", directory / "self.pem"
    _openssl(directory, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", own_key, "-out", own_cert, "-days", "2", "-subj", "/CN=client")
    served = serve(**_ssl_props(pki.server_keystore, **{
        "ssl.client.auth": "required", "ssl.truststore.type": "PEM", "ssl.truststore.location": str(pki.ca)}))
    for cert in (stale, (own_key, own_cert), (pki.stranger_key, pki.stranger_cert), None):
        assert _refused(served, client_context(pki.ca, cert)), cert
    assert _serves(served, client_context(pki.ca, (pki.client_key, pki.client_cert)))
    assert served.alive()
