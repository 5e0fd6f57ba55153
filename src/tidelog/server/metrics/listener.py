"""``metrics.listener``: where ``tidelog serve`` serves its Prometheus endpoint.

``http://host:port`` (``[::1]`` for an IPv6 literal; port 0 takes a free port), or empty (the
default) for no endpoint. The host is required, so binding every interface is always written out
(``http://0.0.0.0:9644``). Anything else (another scheme, no port, a path, a port out of range)
is a :class:`~tidelog.errors.ConfigError` naming the key.
"""

from __future__ import annotations

from dataclasses import dataclass

from tidelog.errors import ConfigError

KEY = "metrics.listener"


@dataclass(frozen=True, slots=True)
class MetricsListener:
    """The address the endpoint binds."""

    host: str
    port: int


def parse_metrics_listener(value: str) -> MetricsListener | None:
    """The listener ``value`` names, or None when it is empty (no endpoint)."""
    text = value.strip()
    if not text:
        return None
    scheme, sep, rest = text.partition("://")
    if not sep or scheme.lower() != "http":
        raise ConfigError(f"{text!r} is not http://host:port (the endpoint serves plain HTTP only)", config=KEY)
    if "/" in rest or "?" in rest or "#" in rest:
        raise ConfigError(f"{text!r} has a path: the endpoint always serves /metrics; give http://host:port",
                          config=KEY)
    host, colon, port_text = rest.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise ConfigError(f"{text!r}: an IPv6 address is written in brackets, http://[::1]:port", config=KEY)
    if not colon or not host:
        raise ConfigError(f"{text!r} is not http://host:port (host and port are both required)", config=KEY)
    if not port_text.isdigit() or int(port_text) > 65535:
        raise ConfigError(f"{text!r}: port {port_text!r} is not a number from 0 to 65535", config=KEY)
    return MetricsListener(host, int(port_text))
