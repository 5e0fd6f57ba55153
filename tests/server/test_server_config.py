"""The server's broker keys: listeners, advertised listeners, socket.request.max.bytes."""

from __future__ import annotations

import pytest

from tidelog.errors import ConfigError
from tidelog.server.config import Endpoint, ServerConfig, parse_endpoints
from tidelog.storage.config import BrokerConfig


def config(**props: str) -> ServerConfig:
    return ServerConfig.from_broker(BrokerConfig.from_properties({"log.dirs": "/tmp/x", **props}))


def test_defaults_listen_on_loopback_9092() -> None:
    default = config()
    assert default.listeners == (Endpoint("PLAINTEXT", "127.0.0.1", 9092),)
    assert (default.advertised, default.socket_request_max_bytes) == ((), 104857600)
    # a ServerConfig built in code has the key table's defaults (security: none listed is PLAINTEXT)
    assert ServerConfig(security=default.security) == default


def test_listeners_and_advertised_listeners_parse_as_kafka_writes_them() -> None:
    parsed = config(**{"listeners": "PLAINTEXT://:9092, INTERNAL://[::1]:0",
                       "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:PLAINTEXT",
                       "advertised.listeners": "PLAINTEXT://broker.example:19092",
                       "socket.request.max.bytes": "1024"})
    assert parsed.listeners == (Endpoint("PLAINTEXT", "", 9092), Endpoint("INTERNAL", "::1", 0))
    assert parsed.advertised_for("PLAINTEXT") == Endpoint("PLAINTEXT", "broker.example", 19092)
    assert parsed.advertised_for("INTERNAL") is None
    assert parsed.socket_request_max_bytes == 1024
    assert str(parsed.listeners[1]) == "INTERNAL://[::1]:0"


@pytest.mark.parametrize("props", [
    {"listeners": "PLAINTEXT://localhost"},
    {"listeners": "localhost:9092"},
    {"listeners": "PLAINTEXT://:99999"},
    {"listeners": "PLAINTEXT://:1,PLAINTEXT://:2"},
    {"listeners": "SSL://:9093", "ssl.keystore.type": "JKS", "ssl.keystore.location": "/k.jks"},  # PEM only
    {"listeners": "SASL_PLAINTEXT://:9093", "sasl.enabled.mechanisms": "GSSAPI"},  # no Kerberos
    {"listeners": "X://:9093", "listener.security.protocol.map": "X:KERBEROS"},
    {"listeners": ""},
    {"advertised.listeners": "OTHER://h:1"},
    {"socket.request.max.bytes": "0"},
    {"socket.request.max.bytes": "lots"},
])
def test_bad_values_are_refused_naming_the_key(props: dict[str, str]) -> None:
    with pytest.raises(ConfigError) as raised:
        config(**props)
    assert getattr(raised.value, "config", None) in props


def test_parse_endpoints_skips_empty_items() -> None:
    assert parse_endpoints("PLAINTEXT://h:1,,", "listeners") == [Endpoint("PLAINTEXT", "h", 1)]
