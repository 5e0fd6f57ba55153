"""SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677) as Kafka serves them (KIP-84).

What is stored per user and mechanism (Kafka's ``ScramCredential``), never the password::

    SaltedPassword = PBKDF2-HMAC-H(password as UTF-8, salt, iterations)
    StoredKey      = H(HMAC(SaltedPassword, "Client Key"))
    ServerKey      = HMAC(SaltedPassword, "Server Key")

The exchange, two SaslAuthenticate round trips::

    client-first   n,[a=<authzid>],n=<saslname>,r=<client nonce>[,<ext>=<value>...]
    server-first   r=<client nonce><server nonce>,s=<base64 salt>,i=<iterations>
    client-final   c=<base64 gs2 header>,r=<same nonce>[,...],p=<base64 ClientProof>
    server-final   v=<base64 HMAC(ServerKey, AuthMessage)>

    AuthMessage = client-first-bare "," server-first "," client-final-without-proof

The server checks ``H(ClientProof XOR HMAC(StoredKey, AuthMessage)) == StoredKey`` in constant
time. Every failure raises :class:`SaslAuthenticationError` with one message (Kafka's text for a
``SaslException``), whatever went wrong. An unknown user gets a server-first message too, with a
salt derived from a per-server secret (RFC 5802 section 9's advice; Kafka itself fails at the
first message), and fails at the proof like a wrong password: the two are indistinguishable.
Only the ``n`` channel-binding flag is accepted (Kafka's), and ``tokenauth`` (delegation tokens,
which tidelog does not have) fails.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass

from tidelog.server.errors import SaslAuthenticationError

MIN_ITERATIONS = 4096  # Kafka's ScramMechanism.minIterations, both mechanisms
MAX_ITERATIONS = 16384  # Kafka's ScramMechanism.maxIterations
_SALT_BYTES = 32
_SASLNAME = re.compile(r"(?:[^=,]|=2C|=3D)+")
_CLIENT_FIRST = re.compile(r"(?P<gs2>n,(?:a=(?P<authzid>[^,]*))?,)"
                           r"(?P<bare>n=(?P<saslname>[^,]*),r=(?P<nonce>[\x21-\x2b\x2d-\x7e]+)(?P<ext>(?:,[^,]*)*))")


@dataclass(frozen=True, slots=True)
class ScramMechanism:
    """One SCRAM mechanism: its SASL name and its hash (a :mod:`hashlib` name)."""

    name: str
    hash_name: str

    def hash(self, data: bytes) -> bytes:
        return hashlib.new(self.hash_name, data).digest()

    def hmac(self, key: bytes, message: bytes) -> bytes:
        return hmac.digest(key, message, self.hash_name)

    def salted_password(self, password: str, salt: bytes, iterations: int) -> bytes:
        """RFC 5802's Hi(): PBKDF2 with this mechanism's HMAC (costs ``iterations`` HMACs)."""
        return hashlib.pbkdf2_hmac(self.hash_name, password.encode(), salt, iterations)


MECHANISMS: dict[str, ScramMechanism] = {m.name: m for m in (
    ScramMechanism("SCRAM-SHA-256", "sha256"),
    ScramMechanism("SCRAM-SHA-512", "sha512"),
)}


@dataclass(frozen=True, slots=True)
class ScramCredential:
    """What the broker keeps of one user's password for one SCRAM mechanism."""

    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes


def new_credential(mechanism: ScramMechanism, password: str, iterations: int,
                   salt: bytes | None = None) -> ScramCredential:
    """The credential of ``password`` (a fresh random salt unless given); costs ``iterations`` HMACs."""
    salt = secrets.token_bytes(_SALT_BYTES) if salt is None else salt
    salted = mechanism.salted_password(password, salt, iterations)
    stored_key = mechanism.hash(mechanism.hmac(salted, b"Client Key"))
    return ScramCredential(salt, iterations, stored_key, mechanism.hmac(salted, b"Server Key"))


def sasl_name(username: str) -> str:
    """``username`` as it travels in a SCRAM message (``,`` and ``=`` escaped)."""
    return username.replace("=", "=3D").replace(",", "=2C")


def _username(saslname: str) -> str:
    return saslname.replace("=2C", ",").replace("=3D", "=")


@dataclass(frozen=True, slots=True)
class _ClientFirst:
    gs2_header: str
    bare: str
    username: str
    nonce: str


class ScramServer:
    """The server side of one SCRAM exchange (Kafka's ``ScramSaslServer``). Not thread-safe; each
    :meth:`evaluate` may call ``lookup`` (which may read a file: call it off the event loop)."""

    def __init__(self, mechanism: ScramMechanism, lookup: Callable[[str], ScramCredential | None],
                 secret: bytes) -> None:
        self._mechanism = mechanism
        self._lookup = lookup
        self._secret = secret
        self._first: _ClientFirst | None = None
        self._server_first = ""
        self._credential: ScramCredential | None = None
        self.complete = False
        self.username: str | None = None

    @property
    def failure_message(self) -> str:
        return ("Authentication failed during authentication due to invalid credentials with SASL mechanism "
                f"{self._mechanism.name}")

    def evaluate(self, token: bytes) -> bytes:
        """The server's answer to the client's next message; :class:`SaslAuthenticationError` when
        the exchange fails (the connection is then closed)."""
        try:
            if self._first is None:
                return self._server_first_message(token)
            if not self.complete and self._credential is not None:
                return self._server_final_message(token, self._first, self._credential)
        except (UnicodeDecodeError, ValueError, binascii.Error):
            pass
        self._credential = None
        raise SaslAuthenticationError(self.failure_message)

    def _server_first_message(self, token: bytes) -> bytes:
        match = _CLIENT_FIRST.fullmatch(token.decode())
        if match is None or not _SASLNAME.fullmatch(match["saslname"]) or _token_auth(match["ext"]):
            raise ValueError("malformed client-first message")
        username = _username(match["saslname"])
        if match["authzid"] and match["authzid"] != username:
            raise ValueError("authorization id differs from the user name")
        self._first = _ClientFirst(match["gs2"], match["bare"], username, match["nonce"])
        credential = self._lookup(username)
        if credential is None or not MIN_ITERATIONS <= credential.iterations <= MAX_ITERATIONS:
            credential = self._unknown_user(username)
        self._credential = credential
        nonce = match["nonce"] + secrets.token_urlsafe(24)
        self._server_first = f"r={nonce},s={base64.b64encode(credential.salt).decode()},i={credential.iterations}"
        return self._server_first.encode()

    def _unknown_user(self, username: str) -> ScramCredential:
        """A credential no password matches, with a salt that is the same for every attempt."""
        salt = hmac.digest(self._secret, f"{self._mechanism.name}\0{username}".encode(), "sha256")
        size = hashlib.new(self._mechanism.hash_name).digest_size
        return ScramCredential(salt, MIN_ITERATIONS, secrets.token_bytes(size), secrets.token_bytes(size))

    def _server_final_message(self, token: bytes, first: _ClientFirst, credential: ScramCredential) -> bytes:
        without_proof, sep, proof_text = token.decode().rpartition(",p=")
        fields = without_proof.split(",")
        if not sep or len(fields) < 2 or fields[0] != "c=" + base64.b64encode(first.gs2_header.encode()).decode():
            raise ValueError("malformed client-final message")
        if fields[1] != "r=" + self._server_first[2:self._server_first.index(",")]:
            raise ValueError("nonce mismatch")
        proof = base64.b64decode(proof_text, validate=True)
        auth_message = f"{first.bare},{self._server_first},{without_proof}".encode()
        signature = self._mechanism.hmac(credential.stored_key, auth_message)
        if len(proof) != len(signature):
            raise ValueError("proof of the wrong size")
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        if not hmac.compare_digest(self._mechanism.hash(client_key), credential.stored_key):
            raise ValueError("invalid proof")
        self.complete, self.username, self._credential = True, first.username, None
        return b"v=" + base64.b64encode(self._mechanism.hmac(credential.server_key, auth_message))


def _token_auth(extensions: str) -> bool:
    return any(item.strip() == "tokenauth=true" for item in extensions.split(",") if item)
