"""SASL/PLAIN (RFC 4616) as Kafka's ``PlainSaslServer`` answers it.

One client message, ``authzid NUL authcid NUL password`` (UTF-8); the server answers an empty
token or fails with Kafka's messages. A wrong password and an unknown user fail alike, with
"Authentication failed: Invalid username or password", and take the same time: an unknown user
is checked against a stand-in credential of the same cost.
"""

from __future__ import annotations

from collections.abc import Callable

from tidelog.server.errors import SaslAuthenticationError
from tidelog.server.security.credentials import DEFAULT_ITERATIONS, PlainCredential, new_plain_credential

# checked in place of an unknown user's credential; matches no password a client can send (empty ones fail first)
_STAND_IN = new_plain_credential("", DEFAULT_ITERATIONS)


class PlainServer:
    """The server side of one PLAIN exchange. :meth:`evaluate` may call ``lookup`` (which may read a
    file) and costs a PBKDF2: call it off the event loop."""

    def __init__(self, lookup: Callable[[str], PlainCredential | None]) -> None:
        self._lookup = lookup
        self.complete = False
        self.username: str | None = None

    def evaluate(self, token: bytes) -> bytes:
        """An empty token when ``token`` names a user and its password, else
        :class:`SaslAuthenticationError` with the text the client is told."""
        try:
            tokens = token.decode().split("\0")
        except UnicodeDecodeError:
            tokens = []
        if len(tokens) != 3:
            raise SaslAuthenticationError(f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(tokens)}")
        authzid, username, password = tokens
        if not username:
            raise SaslAuthenticationError("Authentication failed: username not specified")
        if not password:
            raise SaslAuthenticationError("Authentication failed: password not specified")
        credential = self._lookup(username)
        known = credential is not None
        if not (credential or _STAND_IN).matches(password) or not known:
            raise SaslAuthenticationError("Authentication failed: Invalid username or password")
        if authzid and authzid != username:
            raise SaslAuthenticationError("Authentication failed: Client requested an authorization id that is "
                                          "different from username")
        self.complete, self.username = True, username
        return b""
