"""The server's own broker keys, read from :class:`~tidelog.storage.config.BrokerConfig`.

``BrokerConfig`` types and validates these keys (defaults included); this module parses the
listener syntax as Kafka does:

* ``listeners``: comma-separated ``NAME://host:port`` (default ``PLAINTEXT://127.0.0.1:9092``: a
  fresh install listens on loopback only). An empty host binds every interface; ``[::1]`` is an
  IPv6 literal; port 0 takes a free port. Each name maps to its security protocol through
  ``listener.security.protocol.map`` (by default a name is its protocol): PLAINTEXT, SSL,
  SASL_PLAINTEXT or SASL_SSL. A TLS listener reads the ``ssl.*`` keys (:mod:`.security.tls`), a
  SASL listener ``sasl.enabled.mechanisms`` (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512; Kafka's default,
  GSSAPI, is refused), each overridable per listener as ``listener.name.<name>.<key>``.
* ``advertised.listeners``: what Metadata tells clients to connect to, per listener name
  (default: the listener itself, with its bound port when it was 0).
* ``socket.request.max.bytes`` (default 104857600): a request whose size prefix is larger
  closes the connection before anything is allocated for it; before a SASL client has
  authenticated, ``sasl.server.max.receive.size`` (default 524288) is the limit.
* ``queued.max.request.bytes`` (tidelog's default 209715200, 200 MiB; Kafka's is -1, unbounded):
  the bytes of request frames being received or handled at once, over every connection. A frame
  larger than 64 KiB reserves its declared size when its size prefix arrives; beyond the budget the
  connection's body is not read (TCP pushes back on the client) until earlier frames are done. It
  must be at least ``socket.request.max.bytes`` when set (Kafka's rule), and is raised to it when not
  set; 0 or less is unbounded. See :mod:`.memory_pool`.
* ``fetch.max.bytes`` (default 57671680, 55 MiB): most bytes of records in one Fetch response.
* ``tidelog.produce.decompression.memory.bytes`` (tidelog only, default 67108864, 64 MiB): the
  decompressed records that Produce validation may hold at once, over every connection. A Produce
  with compressed batches reserves, before any is decompressed, what its largest topic's
  ``max.message.bytes`` allows one batch uncompressed (capped at the whole budget); see
  :mod:`.produce`.
* ``tidelog.server.event.loop`` (tidelog only, default ``uvloop``): the event loop the server's
  connections run on, ``uvloop`` (libuv's, from the uvloop package) or Python's own ``asyncio`` loop;
  the same protocol and behaviour on either. See :class:`~tidelog.server.server.ServerThread`.
* ``connections.max.idle.ms`` (default 600000): a connection with no request for that long is
  closed (a request being handled, such as a long poll, keeps it busy, not idle); negative: never.
* ``max.connections`` (broker-wide, and per listener as ``listener.name.<name>.max.connections``),
  ``max.connections.per.ip`` and ``max.connections.per.ip.overrides`` (``host:count,...``, a host
  name is resolved here): all default to Int.MAX. A new connection beyond any of them is closed
  as soon as it is accepted. (Kafka's acceptor instead stops accepting while the broker-wide or
  listener limit is reached, so the client waits in the listen backlog; here it sees a closed
  connection and reconnects after its backoff. Per IP, Kafka closes too.) ``max.connections.per.ip``
  may be 0 only with overrides, as Kafka requires.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass

from tidelog.errors import ConfigError
from tidelog.server.security.tls import TlsSettings, listener_value
from tidelog.storage.config import BROKER_CONFIGS, BrokerConfig

# the key table's defaults (storage.config), for a ServerConfig built without a BrokerConfig
DEFAULT_SOCKET_REQUEST_MAX_BYTES: int = BROKER_CONFIGS["socket.request.max.bytes"].default
DEFAULT_SASL_MAX_RECEIVE_SIZE: int = BROKER_CONFIGS["sasl.server.max.receive.size"].default
DEFAULT_CONNECTIONS_MAX_IDLE_MS: int = BROKER_CONFIGS["connections.max.idle.ms"].default
DEFAULT_QUEUED_MAX_REQUEST_BYTES: int = BROKER_CONFIGS["queued.max.request.bytes"].default
DEFAULT_FETCH_MAX_BYTES: int = BROKER_CONFIGS["fetch.max.bytes"].default
DEFAULT_DECOMPRESSION_MEMORY_BYTES: int = BROKER_CONFIGS["tidelog.produce.decompression.memory.bytes"].default
DEFAULT_EVENT_LOOP: str = BROKER_CONFIGS["tidelog.server.event.loop"].default
UNLIMITED_CONNECTIONS = 2147483647  # Kafka's Int.MaxValue default of the max.connections keys
SUPPORTED_PROTOCOLS = frozenset({"PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"})
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One ``NAME://host:port`` entry; ``host`` is empty for every interface."""

    listener_name: str
    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.listener_name}://{host}:{self.port}"


@dataclass(frozen=True, slots=True)
class ListenerSecurity:
    """How one listener secures its connections: TLS settings when its protocol is SSL or
    SASL_SSL, SASL mechanisms when it is SASL_PLAINTEXT or SASL_SSL."""

    listener_name: str
    protocol: str = "PLAINTEXT"
    tls: TlsSettings | None = None
    sasl_mechanisms: tuple[str, ...] = ()

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")


@dataclass(frozen=True, slots=True)
class ServerConfig:
    """What the server needs beyond the log manager's configuration. A listener without a
    :class:`ListenerSecurity` entry is PLAINTEXT."""

    listeners: tuple[Endpoint, ...] = (Endpoint("PLAINTEXT", "127.0.0.1", 9092),)
    advertised: tuple[Endpoint, ...] = ()
    socket_request_max_bytes: int = DEFAULT_SOCKET_REQUEST_MAX_BYTES
    security: tuple[ListenerSecurity, ...] = ()
    sasl_max_receive_size: int = DEFAULT_SASL_MAX_RECEIVE_SIZE
    connections_max_idle_ms: int = DEFAULT_CONNECTIONS_MAX_IDLE_MS
    max_connections: int = UNLIMITED_CONNECTIONS
    listener_max_connections: tuple[tuple[str, int], ...] = ()  # (listener name, limit) where one is set
    max_connections_per_ip: int = UNLIMITED_CONNECTIONS
    max_connections_per_ip_overrides: tuple[tuple[str, int], ...] = ()  # (IP address, limit)
    queued_max_request_bytes: int = DEFAULT_QUEUED_MAX_REQUEST_BYTES  # <= 0: unbounded
    fetch_max_bytes: int = DEFAULT_FETCH_MAX_BYTES
    decompression_memory_bytes: int = DEFAULT_DECOMPRESSION_MEMORY_BYTES
    event_loop: str = DEFAULT_EVENT_LOOP  # tidelog.server.event.loop: asyncio or uvloop

    @classmethod
    def from_broker(cls, broker: BrokerConfig) -> ServerConfig:
        """Parse the server keys of ``broker``; :class:`ConfigError` names the key at fault."""
        listeners = parse_endpoints(broker.listeners, "listeners")
        if not listeners:
            raise ConfigError("listeners must name at least one listener", config="listeners")
        protocols = _protocol_map(broker.listener_security_protocol_map)
        security = tuple(_listener_security(broker, e, protocols.get(e.listener_name, e.listener_name))
                         for e in listeners)
        advertised = parse_endpoints(broker.advertised_listeners, "advertised.listeners")
        names = {e.listener_name for e in listeners}
        for endpoint in advertised:
            if endpoint.listener_name not in names:
                raise ConfigError(f"advertised listener {endpoint} names no listener", config="advertised.listeners")
        per_ip = broker.get("max.connections.per.ip")
        overrides = _ip_overrides(broker.get("max.connections.per.ip.overrides"))
        if per_ip == 0 and not overrides:
            raise ConfigError("max.connections.per.ip can be set to zero only if max.connections.per.ip.overrides "
                              "is set", config="max.connections.per.ip")
        return cls(tuple(listeners), tuple(advertised), broker.socket_request_max_bytes, security,
                   broker.get("sasl.server.max.receive.size"), broker.get("connections.max.idle.ms"),
                   broker.get("max.connections"), _listener_limits(broker, listeners), per_ip, overrides,
                   _queued_max_request_bytes(broker), broker.get("fetch.max.bytes"),
                   broker.get("tidelog.produce.decompression.memory.bytes"), broker.get("tidelog.server.event.loop"))

    def listener_limit(self, listener_name: str) -> int:
        """Most connections ``listener_name`` may hold at once (Int.MAX when none is set)."""
        return next((n for name, n in self.listener_max_connections if name == listener_name), UNLIMITED_CONNECTIONS)

    def ip_limit(self, address: str) -> int:
        """Most connections one client IP ``address`` may hold at once."""
        return next((n for ip, n in self.max_connections_per_ip_overrides if ip == address),
                    self.max_connections_per_ip)

    def advertised_for(self, listener_name: str) -> Endpoint | None:
        """The advertised endpoint of ``listener_name``, when one is configured."""
        return next((e for e in self.advertised if e.listener_name == listener_name), None)

    def security_for(self, listener_name: str) -> ListenerSecurity:
        """How ``listener_name`` is secured (PLAINTEXT when nothing says otherwise)."""
        found = next((s for s in self.security if s.listener_name == listener_name), None)
        return found if found is not None else ListenerSecurity(listener_name)


def _listener_security(broker: BrokerConfig, endpoint: Endpoint, protocol: str) -> ListenerSecurity:
    if protocol not in SUPPORTED_PROTOCOLS:
        raise ConfigError(f"listener {endpoint} uses security protocol {protocol}, which tidelog does not serve "
                          f"(it serves {', '.join(sorted(SUPPORTED_PROTOCOLS))})", config="listeners")
    name = endpoint.listener_name
    tls = TlsSettings.from_broker(broker, name) if protocol in ("SSL", "SASL_SSL") else None
    mechanisms: tuple[str, ...] = ()
    if protocol.startswith("SASL_"):
        mechanisms = tuple(listener_value(broker, name, "sasl.enabled.mechanisms"))
        unsupported = [m for m in mechanisms if m not in SASL_MECHANISMS]
        if unsupported or not mechanisms:
            raise ConfigError(f"listener {endpoint}: sasl.enabled.mechanisms must list some of "
                              f"{', '.join(SASL_MECHANISMS)} (tidelog does not serve "
                              f"{', '.join(unsupported) or 'none'})", config="sasl.enabled.mechanisms")
    return ListenerSecurity(name, protocol, tls, mechanisms)


def _queued_max_request_bytes(broker: BrokerConfig) -> int:
    """Kafka's rule: when bounded, at least one request of the largest size must fit."""
    largest = broker.socket_request_max_bytes
    if "queued.max.request.bytes" not in broker.explicit:
        return max(DEFAULT_QUEUED_MAX_REQUEST_BYTES, largest)
    queued: int = broker.get("queued.max.request.bytes")
    if 0 < queued < largest:
        raise ConfigError(f"queued.max.request.bytes must be larger or equal to socket.request.max.bytes "
                          f"({queued} < {largest})", config="queued.max.request.bytes")
    return queued


def _listener_limits(broker: BrokerConfig, listeners: list[Endpoint]) -> tuple[tuple[str, int], ...]:
    limits = []
    for endpoint in listeners:
        if f"listener.name.{endpoint.listener_name.lower()}.max.connections" in broker.unknown:
            limits.append((endpoint.listener_name, listener_value(broker, endpoint.listener_name, "max.connections")))
    return tuple(limits)


def _ip_overrides(text: str) -> tuple[tuple[str, int], ...]:
    """``host:count,...`` with each host resolved to its IP address (Kafka's InetAddress.getByName)."""
    overrides: dict[str, int] = {}
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        host, sep, count = item.rpartition(":")
        host = host.strip().removeprefix("[").removesuffix("]")
        if not sep or not host or not count.strip().isdigit():
            raise ConfigError(f"{item!r} is not host:count", config="max.connections.per.ip.overrides")
        try:
            address = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)[0][4][0]
        except OSError as e:
            raise ConfigError(f"cannot resolve {host!r}: {e}", config="max.connections.per.ip.overrides") from e
        overrides[str(address)] = int(count)
    return tuple(overrides.items())


def parse_endpoints(text: str, key: str) -> list[Endpoint]:
    """``NAME://host:port,...`` (Kafka's listener syntax); names must be unique."""
    endpoints: list[Endpoint] = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        endpoint = _parse_endpoint(item, key)
        if any(e.listener_name == endpoint.listener_name for e in endpoints):
            raise ConfigError(f"listener name {endpoint.listener_name} appears twice", config=key)
        endpoints.append(endpoint)
    return endpoints


def _parse_endpoint(item: str, key: str) -> Endpoint:
    name, sep, rest = item.partition("://")
    host, colon, port_text = rest.rpartition(":")
    if not sep or not colon or not name or not port_text.isdigit():
        raise ConfigError(f"{item!r} is not NAME://host:port", config=key)
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    port = int(port_text)
    if port > 65535:
        raise ConfigError(f"port {port} of {item!r} is out of range", config=key)
    return Endpoint(name.upper(), host, port)


def _protocol_map(text: str) -> dict[str, str]:
    mapping = {}
    for item in (part.strip() for part in text.split(",")):
        if item:
            name, sep, protocol = item.partition(":")
            if not sep:
                raise ConfigError(f"{item!r} is not NAME:PROTOCOL", config="listener.security.protocol.map")
            mapping[name.strip().upper()] = protocol.strip().upper()
    return mapping

