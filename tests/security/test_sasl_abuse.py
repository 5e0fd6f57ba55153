"""Unauthenticated and wrongly authenticated clients of a SASL listener.

Against a real ``tidelog serve``: every API key sent before authentication completes closes the
connection without an answer, at each step of the exchange. Unknown users and wrong passwords are
indistinguishable: same error code and message (tests/server/test_security_sasl.py), and for SCRAM
a server-first message of the same shape (a stable stand-in salt of the same length, the default
iteration count) — Kafka's ScramSaslServer instead fails an unknown user at the first message.

No timing difference: proven structurally here (the unknown-user path runs the same key derivation
and the same HMACs, counted call by call) and measured by the soak test (CPU time of each path).
"""

from __future__ import annotations

import base64
import hashlib
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kafka.net.sasl.scram import ScramClient

import server_samples as samples
from abuse_helpers import Served, start_serve, tidelog
from security_helpers import authenticate, handshake
from server_helpers import RawClient, api_versions
from tidelog.errors import TidelogError
from tidelog.server import codec
from tidelog.server.security.credentials import DEFAULT_ITERATIONS, new_plain_credential, new_user_credential
from tidelog.server.security.plain import PlainServer
from tidelog.server.security.scram import MECHANISMS, ScramMechanism, ScramServer

EXPECTED_AT = {  # what each step of the exchange accepts; anything else closes the connection
    "first": {codec.API_VERSIONS, codec.SASL_HANDSHAKE},
    "after ApiVersions": {codec.SASL_HANDSHAKE},
    "after the handshake": {codec.SASL_AUTHENTICATE},
}


@pytest.fixture(scope="module")
def sasl_served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """One SASL_PLAINTEXT ``tidelog serve`` for the module (user alice added by ``tidelog users add``)."""
    data = tmp_path_factory.mktemp("sasl") / "data"
    added = tidelog("users", "add", "alice", "--password-stdin", data=data, input="alice-secret\n")
    assert added.returncode == 0, added.stderr
    served = start_serve(data, listeners="SASL_PLAINTEXT://127.0.0.1:0",
                         **{"sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256"})
    yield served
    served.stop()


def _sample(api_key: int) -> tuple[Any, int]:
    spec = codec.SUPPORTED_APIS[api_key]
    return samples.sample(api_key, spec.max_version), spec.max_version


def _silently_closed(client: RawClient) -> bool:
    """Closed without a byte of answer."""
    try:
        return client.sock.recv(65536) == b""
    except ConnectionResetError:
        return True


@pytest.mark.parametrize("step", ["first", "after ApiVersions", "after the handshake"])
def test_every_api_before_authentication_closes_the_connection_unanswered(sasl_served: Served, step: str) -> None:
    refused = sorted(set(codec.SUPPORTED_APIS) - EXPECTED_AT[step])
    for api_key in [*refused, 99]:
        client = sasl_served.raw()
        if step != "first":
            assert api_versions(client).error_code == 0
        if step == "after the handshake":
            assert handshake(client, "PLAIN").error_code == 0
        if api_key == 99:
            client.send_bytes(b"\x00\x00\x00\x0a\x00\x63\x00\x00\x00\x00\x00\x01\xff\xff")
        else:
            client.send(*_sample(api_key))
        assert _silently_closed(client), (step, api_key)
        client.close()
    client = sasl_served.raw()  # and the listener still authenticates
    assert handshake(client, "PLAIN").error_code == 0
    assert authenticate(client, b"\0alice\0alice-secret").error_code == 0


def _server_first(served: Served, user: str) -> dict[str, str]:
    client = served.raw()
    assert handshake(client, "SCRAM-SHA-256").error_code == 0
    first = authenticate(client, ScramClient(user, "whatever", "SCRAM-SHA-256").first_message())
    client.close()
    assert first.error_code == 0
    return dict(part.split("=", 1) for part in first.auth_bytes.decode().split(","))


def test_scram_server_first_message_does_not_reveal_whether_the_user_exists(sasl_served: Served) -> None:
    alice, nobody, nobody_again, other = (_server_first(sasl_served, user) for user in
                                          ("alice", "nobody", "nobody", "someone-else"))
    assert {k: len(v) for k, v in alice.items() if k != "r"} == {k: len(v) for k, v in nobody.items() if k != "r"}
    assert alice["i"] == nobody["i"] == str(DEFAULT_ITERATIONS)
    assert len(base64.b64decode(nobody["s"])) == len(base64.b64decode(alice["s"])) == 32
    assert nobody["s"] == nobody_again["s"] != other["s"]  # stable per name, as a stored salt is
    assert _server_first(sasl_served, "alice")["s"] == alice["s"]


# --- the same work on both paths, call by call ------------------------------------------------

@pytest.fixture
def pbkdf2_calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str, int, int]]]:
    """Every PBKDF2 run while the test runs: (hash, salt length, iterations)."""
    calls: list[tuple[str, int, int]] = []
    real = hashlib.pbkdf2_hmac

    def counted(name: str, password: bytes, salt: bytes, iterations: int, *rest: Any) -> bytes:
        calls.append((name, len(salt), iterations))
        return real(name, password, salt, iterations, *rest)

    monkeypatch.setattr(hashlib, "pbkdf2_hmac", counted)
    yield calls


def test_plain_unknown_user_runs_the_same_key_derivation_as_a_wrong_password(
        pbkdf2_calls: list[tuple[str, int, int]]) -> None:
    stored = new_plain_credential("alice-secret", DEFAULT_ITERATIONS)
    pbkdf2_calls.clear()
    runs = {}
    for user in ("alice", "nobody"):
        server = PlainServer(lambda name: stored if name == "alice" else None)
        with pytest.raises(TidelogError, match="Invalid username or password"):
            server.evaluate(b"\0" + user.encode() + b"\0wrong")
        runs[user], pbkdf2_calls[:] = list(pbkdf2_calls), []
    assert runs["alice"] == runs["nobody"] == [("sha512", 32, DEFAULT_ITERATIONS)]


def _scram_attempt(user: str, stored: Any, mechanism: str = "SCRAM-SHA-256") -> None:
    server = ScramServer(MECHANISMS[mechanism], lambda name: stored if name == "alice" else None, b"k" * 32)
    client = ScramClient(user, "wrong", mechanism)
    client.process_server_first_message(server.evaluate(client.first_message()))
    with pytest.raises(TidelogError, match="invalid credentials"):
        server.evaluate(client.final_message())


@pytest.mark.parametrize("mechanism", sorted(MECHANISMS))
def test_scram_unknown_user_runs_the_same_hmacs_as_a_wrong_password(monkeypatch: pytest.MonkeyPatch,
                                                                    mechanism: str) -> None:
    stored = new_user_credential(mechanism, "alice-secret")
    calls: list[tuple[str, int]] = []
    for name in ("hmac", "hash"):
        real = getattr(ScramMechanism, name)
        monkeypatch.setattr(ScramMechanism, name, lambda self, *args, _n=name, _r=real: (
            calls.append((_n, len(args[0]))), _r(self, *args))[1])
    runs = {}
    for user in ("alice", "nobody"):
        _scram_attempt(user, stored, mechanism)
        runs[user], calls[:] = list(calls), []
    assert runs["alice"] == runs["nobody"]
    assert [name for name, _ in runs["alice"]] == ["hmac", "hash"]  # the proof check: one HMAC, one hash


def _cpu_per_attempt(attempt: Callable[[], None], rounds: int) -> float:
    started = time.process_time()
    for _ in range(rounds):
        attempt()
    return (time.process_time() - started) / rounds


@pytest.mark.soak
def test_wrong_password_and_unknown_user_take_the_same_cpu_time_soak() -> None:
    plain = new_plain_credential("alice-secret", DEFAULT_ITERATIONS)
    scram = new_user_credential("SCRAM-SHA-256", "alice-secret")

    def plain_attempt(user: str) -> Callable[[], None]:
        def run() -> None:
            with pytest.raises(TidelogError):
                PlainServer(lambda name: plain if name == "alice" else None).evaluate(
                    b"\0" + user.encode() + b"\0wrong")
        return run

    for label, wrong, unknown in (
            ("PLAIN", plain_attempt("alice"), plain_attempt("nobody")),
            ("SCRAM-SHA-256", lambda: _scram_attempt("alice", scram), lambda: _scram_attempt("nobody", scram))):
        times = {"wrong password": [], "unknown user": []}  # type: dict[str, list[float]]
        for _ in range(5):  # interleaved, so load changes hit both alike
            times["wrong password"].append(_cpu_per_attempt(wrong, 60))
            times["unknown user"].append(_cpu_per_attempt(unknown, 60))
        medians = {k: sorted(v)[2] for k, v in times.items()}
        ratio = medians["unknown user"] / medians["wrong password"]
        print(f"{label}: wrong password {medians['wrong password'] * 1e6:.0f} us, unknown user "
              f"{medians['unknown user'] * 1e6:.0f} us of CPU per attempt, ratio {ratio:.3f}")
        assert 0.8 < ratio < 1.25, (label, medians)
