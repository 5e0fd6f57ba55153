"""The credentials file: the SASL users of a broker, managed by ``tidelog users``.

It is ``tidelog-credentials.json`` in the broker's first log dir: a *file*, as Kafka ignores
files in a log dir's root but refuses directories that are not partitions. Mode 0600, replaced
atomically (:func:`~tidelog.storage.atomic.write_atomically`, the new content staged in a 0600
``.tmp``). Per user and mechanism it keeps what checking a password needs, never the password::

    {"version": 1,
     "users": {"alice": {
        "SCRAM-SHA-256": {"salt": b64, "iterations": 4096, "stored_key": b64, "server_key": b64},
        "SCRAM-SHA-512": {...same fields...},
        "PLAIN":         {"salt": b64, "iterations": 4096, "hash": b64}}}}

A SCRAM entry is Kafka's ``ScramCredential`` (KIP-84, as ``kafka-configs --add-config
'SCRAM-SHA-256=[password=...]'`` stores it). A PLAIN entry is ``PBKDF2-HMAC-SHA512(password,
salt, iterations)``, compared in constant time (Kafka's PLAIN keeps clear passwords in its JAAS
file; tidelog does not).

The server reads the file through :class:`CredentialsFile`, which re-reads it when its inode,
size or modification time changed (one ``stat`` per authentication): ``tidelog users add`` takes
effect for the next connection, without a restart. A file that no longer parses keeps the last
good users (logged); a missing file means no users.
"""

from __future__ import annotations

import base64
import binascii
import fcntl
import hashlib
import hmac
import json
import logging
import os
import secrets
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tidelog.errors import ConfigError
from tidelog.server.security.scram import MAX_ITERATIONS, MECHANISMS as SCRAM_MECHANISMS, MIN_ITERATIONS
from tidelog.server.security.scram import ScramCredential, new_credential
from tidelog.storage.atomic import write_atomically
from tidelog.storage.files import temporary_write_path

log = logging.getLogger(__name__)
CREDENTIALS_FILE = "tidelog-credentials.json"
PLAIN = "PLAIN"
MECHANISMS = (PLAIN, *SCRAM_MECHANISMS)
DEFAULT_ITERATIONS = MIN_ITERATIONS  # Kafka's default for SCRAM credentials
_PLAIN_HASH = "sha512"
_SALT_BYTES = 32
_FORMAT_VERSION = 1


@dataclass(frozen=True, slots=True)
class PlainCredential:
    """A salted PBKDF2-HMAC-SHA512 of a PLAIN password."""

    salt: bytes
    iterations: int
    hash: bytes

    def matches(self, password: str) -> bool:
        """True when ``password`` is the one stored; constant time in the comparison, and costs
        ``iterations`` HMACs whatever the outcome."""
        computed = hashlib.pbkdf2_hmac(_PLAIN_HASH, password.encode(), self.salt, self.iterations)
        return hmac.compare_digest(computed, self.hash)


Credential = PlainCredential | ScramCredential
Users = dict[str, dict[str, Credential]]  # user name -> mechanism -> credential


def new_plain_credential(password: str, iterations: int, salt: bytes | None = None) -> PlainCredential:
    salt = secrets.token_bytes(_SALT_BYTES) if salt is None else salt
    return PlainCredential(salt, iterations, hashlib.pbkdf2_hmac(_PLAIN_HASH, password.encode(), salt, iterations))


def new_user_credential(mechanism: str, password: str, iterations: int = DEFAULT_ITERATIONS) -> Credential:
    """A fresh credential of ``password`` for ``mechanism``; :class:`ConfigError` for an unknown
    mechanism or an iteration count outside Kafka's range (4096..16384)."""
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise ConfigError(f"iterations must be between {MIN_ITERATIONS} and {MAX_ITERATIONS}", iterations=iterations)
    if mechanism == PLAIN:
        return new_plain_credential(password, iterations)
    if mechanism in SCRAM_MECHANISMS:
        return new_credential(SCRAM_MECHANISMS[mechanism], password, iterations)
    raise ConfigError(f"unknown SASL mechanism {mechanism} (known: {', '.join(MECHANISMS)})", mechanism=mechanism)


def credentials_path(log_dir: Path) -> Path:
    return log_dir / CREDENTIALS_FILE


# --- reading and writing ------------------------------------------------------------------------

def load_credentials(path: Path) -> Users:
    """The users in ``path`` (none when it does not exist); :class:`ConfigError` naming the path
    when it does not parse."""
    try:
        text = path.read_bytes()
    except FileNotFoundError:
        return {}
    except OSError as e:
        raise ConfigError(f"cannot read the credentials file: {e.strerror}", path=path) from e
    try:
        return _decode(json.loads(text))
    except (ValueError, KeyError, TypeError, AttributeError, binascii.Error, RecursionError) as e:
        raise ConfigError(f"invalid credentials file: {type(e).__name__}: {e}", path=path) from e


def save_credentials(path: Path, users: Mapping[str, Mapping[str, Credential]]) -> None:
    """Replace ``path`` with ``users``, atomically, readable by its owner only (0600)."""
    data = json.dumps(_encode(users), indent=2, sort_keys=True).encode() + b"\n"
    tmp = temporary_write_path(path)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT, 0o600)  # write_atomically truncates it, keeping the mode
    try:
        os.fchmod(fd, 0o600)
    finally:
        os.close(fd)
    write_atomically(path, data)


@contextmanager
def locked(log_dir: Path) -> Iterator[None]:
    """Exclude other ``tidelog users`` commands on ``log_dir`` (flock on the directory itself, so
    no lock file is left behind and a running broker is not in the way) during a read-modify-write."""
    fd = os.open(log_dir, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _unb64(text: Any) -> bytes:
    return base64.b64decode(text, validate=True)


def _encode(users: Mapping[str, Mapping[str, Credential]]) -> dict[str, Any]:
    encoded: dict[str, Any] = {}
    for name, credentials in users.items():
        encoded[name] = {}
        for mechanism, c in credentials.items():
            if isinstance(c, PlainCredential):
                encoded[name][mechanism] = {"salt": _b64(c.salt), "iterations": c.iterations, "hash": _b64(c.hash)}
            else:
                encoded[name][mechanism] = {"salt": _b64(c.salt), "iterations": c.iterations,
                                            "stored_key": _b64(c.stored_key), "server_key": _b64(c.server_key)}
    return {"version": _FORMAT_VERSION, "users": encoded}


def _decode(document: Any) -> Users:
    if document.get("version") != _FORMAT_VERSION:
        raise ValueError(f"unknown version {document.get('version')!r} (expected {_FORMAT_VERSION})")
    users: Users = {}
    for name, credentials in document["users"].items():
        users[str(name)] = {m: _decode_credential(m, fields) for m, fields in credentials.items()}
    return users


def _decode_credential(mechanism: str, fields: Mapping[str, Any]) -> Credential:
    iterations = fields["iterations"]
    if not isinstance(iterations, int) or iterations < 1:
        raise ValueError(f"bad iteration count {iterations!r}")
    if mechanism == PLAIN:
        return PlainCredential(_unb64(fields["salt"]), iterations, _unb64(fields["hash"]))
    if mechanism in SCRAM_MECHANISMS:
        return ScramCredential(_unb64(fields["salt"]), iterations, _unb64(fields["stored_key"]),
                               _unb64(fields["server_key"]))
    raise ValueError(f"unknown mechanism {mechanism!r}")


# --- the server's view ---------------------------------------------------------------------------

class CredentialsFile:
    """The users of one credentials file, re-read when it changes. Thread-safe; :meth:`lookup`
    does a ``stat`` (and a read after a change): call it off the event loop."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._users: Users = {}
        self._seen: tuple[int, int, int] | None = None
        self.refresh(strict=True)

    def lookup(self, user: str, mechanism: str) -> Credential | None:
        """The credential of ``user`` for ``mechanism``, None when there is none."""
        self.refresh()
        with self._lock:
            return self._users.get(user, {}).get(mechanism)

    def refresh(self, *, strict: bool = False) -> None:
        """Re-read the file if it changed. ``strict``: raise :class:`ConfigError` when it does not
        parse (at start); otherwise keep the last good users and log the error."""
        try:
            st = os.stat(self.path)
            seen: tuple[int, int, int] | None = (st.st_ino, st.st_size, st.st_mtime_ns)
        except FileNotFoundError:
            seen = None
        with self._lock:
            if seen == self._seen and (seen is not None or not strict):
                return
            try:
                self._users = load_credentials(self.path)
            except ConfigError as e:
                if strict:
                    raise
                log.error("keeping the previous SASL users: %s", e)
            self._seen = seen
