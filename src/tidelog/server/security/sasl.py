"""SASL authentication of one connection, as Kafka's ``SaslServerAuthenticator`` does it.

States, in order (KIP-43 handshake, KIP-152 SaslAuthenticate)::

    HANDSHAKE_OR_VERSIONS  ApiVersions (once) or SaslHandshake
    HANDSHAKE              SaslHandshake
    AUTHENTICATE           SaslAuthenticate requests (handshake v1), or raw size-prefixed SASL
                           tokens answered with raw size-prefixed tokens (handshake v0)
    COMPLETE               every request goes to KafkaApis

Before COMPLETE, anything else closes the connection without an answer: a request of another
API (Kafka's IllegalSaslStateException "Unexpected Kafka request of type X during SASL
handshake"), a second ApiVersions, a frame larger than ``sasl.server.max.receive.size``, a frame
that does not parse. A mechanism the listener does not enable is answered with
UNSUPPORTED_SASL_MECHANISM and the enabled list, then the connection is closed; a failed exchange
is answered with SASL_AUTHENTICATION_FAILED and its message (v1), then closed. (Kafka answers a
request of another API during AUTHENTICATE with that API's error response before closing; tidelog
just closes.)

Sessions do not expire (``SessionLifetimeMs`` 0: no KIP-368 re-authentication), so once
authenticated, SaslHandshake and SaslAuthenticate answer ILLEGAL_SASL_STATE, as they do on a
listener without SASL (:func:`handle_sasl_handshake`, :func:`handle_sasl_authenticate`).

The exchange itself (:class:`~.plain.PlainServer`, :class:`~.scram.ScramServer`) runs in the
server's thread pool: it reads the credentials file and PBKDF2 costs milliseconds.
"""

from __future__ import annotations

import enum
import logging
import re
import struct
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from kafka.protocol.sasl import SaslAuthenticateResponse, SaslHandshakeResponse

from tidelog.server import codec
from tidelog.server.api_versions import api_versions_response
from tidelog.server.codec import Request, decode_request, peek_header
from tidelog.server.errors import ErrorCode, MalformedRequestError, SaslAuthenticationError, UnsupportedRequestError
from tidelog.server.security.credentials import PLAIN, CredentialsFile, PlainCredential
from tidelog.server.security.plain import PlainServer
from tidelog.server.security.scram import MECHANISMS as SCRAM_MECHANISMS, ScramCredential, ScramServer

log = logging.getLogger(__name__)
SUPPORTED_MECHANISMS = (PLAIN, *SCRAM_MECHANISMS)
_SIZE = struct.Struct(">i")


class MechanismServer(Protocol):
    """The server side of one exchange of one mechanism."""

    complete: bool
    username: str | None

    def evaluate(self, token: bytes) -> bytes: ...


@dataclass(frozen=True, slots=True)
class SaslSettings:
    """What every connection of one SASL listener shares."""

    mechanisms: tuple[str, ...]
    credentials: CredentialsFile
    secret: bytes  # derives the stand-in SCRAM salts of unknown users; random per server start
    max_receive_size: int

    def mechanism_server(self, mechanism: str) -> MechanismServer:
        if mechanism == PLAIN:
            return PlainServer(self._plain)
        return ScramServer(SCRAM_MECHANISMS[mechanism], lambda user: self._scram(user, mechanism), self.secret)

    def _plain(self, user: str) -> PlainCredential | None:
        found = self.credentials.lookup(user, PLAIN)
        return found if isinstance(found, PlainCredential) else None

    def _scram(self, user: str, mechanism: str) -> ScramCredential | None:
        found = self.credentials.lookup(user, mechanism)
        return found if isinstance(found, ScramCredential) else None


class SaslState(enum.Enum):
    HANDSHAKE_OR_VERSIONS = "handshake or versions"
    HANDSHAKE = "handshake"
    AUTHENTICATE = "authenticate"
    COMPLETE = "complete"


@dataclass(frozen=True, slots=True)
class AuthStep:
    """What to do with one frame received before authentication completed."""

    response: bytes | None
    close: bool = False


_CLOSE = AuthStep(None, close=True)
Run = Callable[..., Awaitable[Any]]


class SaslAuthenticator:
    """One connection's authentication. Event-loop only; ``run(fn, *args)`` runs blocking work
    (the exchange) in the server's thread pool."""

    def __init__(self, settings: SaslSettings, run: Run, peer: str) -> None:
        self._settings = settings
        self._run = run
        self._peer = peer
        self.state = SaslState.HANDSHAKE_OR_VERSIONS
        self._mechanism: MechanismServer | None = None
        self._raw_tokens = False
        self.principal: str | None = None

    @property
    def complete(self) -> bool:
        return self.state is SaslState.COMPLETE

    @property
    def max_receive_size(self) -> int:
        return self._settings.max_receive_size

    async def receive(self, frame: bytes) -> AuthStep:
        """Handle one frame (without its size prefix) received before authentication completed."""
        try:
            if self.state is SaslState.AUTHENTICATE:
                return await (self._raw_token(frame) if self._raw_tokens else self._authenticate(frame))
            return self._handshake(frame)
        except (MalformedRequestError, UnsupportedRequestError) as e:
            return self._refuse(str(e))
        except Exception:  # noqa: BLE001 - a bug must close this connection, not escape its task
            log.exception("%s: closing connection: failed during SASL authentication", self._peer)
            return _CLOSE

    def _refuse(self, reason: str) -> AuthStep:
        log.info("%s: failed authentication (%s); closing connection", self._peer, reason)
        return _CLOSE

    def _handshake(self, frame: bytes) -> AuthStep:
        api_key, _, _ = peek_header(frame)
        if api_key not in (codec.API_VERSIONS, codec.SASL_HANDSHAKE):
            return self._refuse(f"Unexpected Kafka request of type {_api_name(api_key)} during SASL handshake.")
        request = decode_request(frame)
        if api_key == codec.API_VERSIONS:
            if self.state is not SaslState.HANDSHAKE_OR_VERSIONS:
                return self._refuse("Unexpected ApiVersions request during SASL authentication")
            body, version = api_versions_response(request)
            if request.body is not None:
                self.state = SaslState.HANDSHAKE
            return AuthStep(codec.encode_response(request, body, version))
        return self._select_mechanism(request)

    def _select_mechanism(self, request: Request) -> AuthStep:
        mechanism = request.body.mechanism
        enabled = list(self._settings.mechanisms)
        if mechanism not in enabled:
            body = SaslHandshakeResponse(error_code=ErrorCode.UNSUPPORTED_SASL_MECHANISM, mechanisms=enabled)
            log.info("%s: failed authentication (Unsupported SASL mechanism %s); closing connection", self._peer,
                     mechanism)
            return AuthStep(codec.encode_response(request, body), close=True)
        self._mechanism = self._settings.mechanism_server(mechanism)
        self._raw_tokens = request.api_version == 0
        self.state = SaslState.AUTHENTICATE
        return AuthStep(codec.encode_response(request, SaslHandshakeResponse(error_code=ErrorCode.NONE,
                                                                             mechanisms=enabled)))

    async def _authenticate(self, frame: bytes) -> AuthStep:
        api_key, _, _ = peek_header(frame)
        if api_key != codec.SASL_AUTHENTICATE:
            return self._refuse(f"Unexpected Kafka request of type {_api_name(api_key)} during SASL authentication.")
        request = decode_request(frame)
        try:
            token = await self._evaluate(request.body.auth_bytes)
        except SaslAuthenticationError as e:
            log.info("%s: failed authentication (%s); closing connection", self._peer, e.message)
            body = SaslAuthenticateResponse(error_code=ErrorCode.SASL_AUTHENTICATION_FAILED, error_message=e.message,
                                            auth_bytes=b"", session_lifetime_ms=0)
            return AuthStep(codec.encode_response(request, body), close=True)
        body = SaslAuthenticateResponse(error_code=ErrorCode.NONE, error_message=None, auth_bytes=token,
                                        session_lifetime_ms=0)
        return AuthStep(codec.encode_response(request, body))

    async def _raw_token(self, frame: bytes) -> AuthStep:
        """Handshake v0: no Kafka header around tokens, and no way to tell the client why it failed."""
        try:
            token = await self._evaluate(frame)
        except SaslAuthenticationError as e:
            return self._refuse(e.message)
        return AuthStep(_SIZE.pack(len(token)) + token)

    async def _evaluate(self, token: bytes) -> bytes:
        mechanism = self._mechanism
        if mechanism is None:
            raise SaslAuthenticationError("no SASL mechanism selected")
        answer: bytes = await self._run(mechanism.evaluate, bytes(token))
        if mechanism.complete:
            self.state, self.principal = SaslState.COMPLETE, mechanism.username
            log.debug("%s: authenticated as User:%s", self._peer, self.principal)
        return answer


def _api_name(api_key: int) -> str:
    """Kafka's ApiKeys name (METADATA, PRODUCE ...) of an API this server knows."""
    spec = codec.SUPPORTED_APIS.get(api_key)
    if spec is None:
        return f"API key {api_key}"
    return re.sub(r"(?<!^)(?=[A-Z])", "_", spec.request.__name__.removesuffix("Request")).upper()


# --- KafkaApis' answers outside a SASL exchange ---------------------------------------------------

async def handle_sasl_handshake(ctx: object, conn: object, request: Request) -> Any:
    """After authentication, or on a listener without SASL: ILLEGAL_SASL_STATE (as Kafka's KafkaApis)."""
    return SaslHandshakeResponse(error_code=ErrorCode.ILLEGAL_SASL_STATE, mechanisms=[])


async def handle_sasl_authenticate(ctx: object, conn: object, request: Request) -> Any:
    """After authentication, or on a listener without SASL: ILLEGAL_SASL_STATE (as Kafka's KafkaApis)."""
    return SaslAuthenticateResponse(error_code=ErrorCode.ILLEGAL_SASL_STATE,
                                    error_message="SaslAuthenticate request received after successful authentication",
                                    auth_bytes=b"", session_lifetime_ms=0)
