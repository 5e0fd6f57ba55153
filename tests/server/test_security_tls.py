"""TLS listeners (``SSL://``, ``SASL_SSL://``) with PEM keys made in the test by ``openssl``:
kafka-python over TLS; client certificates required, and clients without one, or with one from
another CA, or trusting another CA, refused while the server keeps serving; SCRAM over TLS; keys
in the file, or inline in the config; Java keystores and bad files refused at start."""

from __future__ import annotations

import ssl
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.protocol.metadata import MetadataResponse

import server_samples as samples
from security_helpers import Pki, SecureBroker, add_user, client_context, make_pki, start_secure_broker
from server_helpers import TIMEOUT_S, api_versions
from tidelog.errors import ConfigError


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture
def tls_broker(tmp_path: Path, pki: Pki) -> Iterator[Callable[..., SecureBroker]]:
    started: list[SecureBroker] = []

    def start(**props: object) -> SecureBroker:
        props = {"listeners": "SSL://127.0.0.1:0", "ssl.keystore.type": "PEM",
                 "ssl.keystore.location": str(pki.server_keystore), **props}
        set_props = {k: v for k, v in props.items() if v is not None}  # None: unset a default of this fixture
        broker = start_secure_broker(tmp_path / "data", **set_props)
        started.append(broker)
        return broker

    yield start
    for broker in started:
        broker.stop()


def _round_trip(broker: SecureBroker, **config: object) -> list[bytes]:
    broker.manager.create_topic("t", 1)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=0, **config)
    assert [producer.send("t", value=b"v%d" % i).get(TIMEOUT_S).offset for i in range(3)] == [0, 1, 2]
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=None, auto_offset_reset="earliest",
                             enable_auto_commit=False, **config)
    consumer.assign([TopicPartition("t", 0)])
    got: list[bytes] = []
    while len(got) < 3:
        batches = consumer.poll(timeout_ms=int(TIMEOUT_S * 1000))
        assert batches, "no records"
        got += [r.value for records in batches.values() for r in records]
    consumer.close()
    return got


def test_kafka_python_produces_and_consumes_over_tls(tls_broker: Callable[..., SecureBroker], pki: Pki) -> None:
    broker = tls_broker()
    assert _round_trip(broker, security_protocol="SSL", ssl_cafile=str(pki.ca)) == [b"v0", b"v1", b"v2"]


def _refused(broker: SecureBroker, context: ssl.SSLContext) -> bool:
    """True when the TLS handshake, or the first exchange after it, fails (TLS 1.3 reports a
    refused client certificate only when the client next reads)."""
    try:
        client = broker.raw(context)
    except (ssl.SSLError, ConnectionError):
        return True
    try:
        api_versions(client)
    except (ssl.SSLError, ConnectionError):
        return True
    finally:
        client.close()
    return False


def test_required_client_certificates_refuse_clients_without_a_good_one(tls_broker: Callable[..., SecureBroker],
                                                                        pki: Pki) -> None:
    broker = tls_broker(**{"ssl.client.auth": "required", "ssl.truststore.type": "PEM",
                           "ssl.truststore.location": str(pki.ca)})
    assert _refused(broker, client_context(pki.ca))  # no certificate
    assert _refused(broker, client_context(pki.ca, (pki.stranger_key, pki.stranger_cert)))  # another CA's
    assert not _refused(broker, client_context(pki.ca, (pki.client_key, pki.client_cert)))
    assert _round_trip(broker, security_protocol="SSL", ssl_cafile=str(pki.ca), ssl_certfile=str(pki.client_cert),
                       ssl_keyfile=str(pki.client_key)) == [b"v0", b"v1", b"v2"]


def test_requested_client_certificates_are_optional(tls_broker: Callable[..., SecureBroker], pki: Pki) -> None:
    broker = tls_broker(**{"ssl.client.auth": "requested", "ssl.truststore.type": "PEM",
                           "ssl.truststore.location": str(pki.ca)})
    assert not _refused(broker, client_context(pki.ca))
    assert _refused(broker, client_context(pki.ca, (pki.stranger_key, pki.stranger_cert)))  # sent, so checked


def test_a_client_trusting_another_ca_fails_and_the_server_keeps_serving(tls_broker: Callable[..., SecureBroker],
                                                                         pki: Pki) -> None:
    broker = tls_broker()
    with pytest.raises(ssl.SSLCertVerificationError):
        broker.raw(client_context(pki.other_ca))
    plain = broker.raw()  # no TLS at all on a TLS listener
    plain.send(samples.metadata(), 12)
    assert plain.closed_by_server()
    client = broker.raw(client_context(pki.ca))
    assert client.call(samples.metadata(), MetadataResponse, 12).brokers[0].port == broker.port


def test_inline_pem_keys_and_truststore(tls_broker: Callable[..., SecureBroker], pki: Pki) -> None:
    """Kafka's ssl.keystore.key / certificate.chain / truststore.certificates, line breaks lost as
    when pasted into a properties value."""
    def one_line(path: Path) -> str:
        return " ".join(path.read_text().split("\n"))

    broker = tls_broker(**{"ssl.keystore.location": None, "ssl.keystore.key": one_line(pki.server_key),
                           "ssl.keystore.certificate.chain": one_line(pki.server_cert), "ssl.client.auth": "required",
                           "ssl.truststore.type": "PEM", "ssl.truststore.certificates": one_line(pki.ca)})
    assert not _refused(broker, client_context(pki.ca, (pki.client_key, pki.client_cert)))
    assert _refused(broker, client_context(pki.ca))


def test_scram_over_tls(tls_broker: Callable[..., SecureBroker], pki: Pki, tmp_path: Path) -> None:
    add_user(tmp_path / "data", "alice", "alice-secret", "SCRAM-SHA-512")
    broker = tls_broker(listeners="SASL_SSL://127.0.0.1:0", **{"sasl.enabled.mechanisms": "SCRAM-SHA-512"})
    assert _round_trip(broker, security_protocol="SASL_SSL", ssl_cafile=str(pki.ca), sasl_mechanism="SCRAM-SHA-512",
                       sasl_plain_username="alice", sasl_plain_password="alice-secret") == [b"v0", b"v1", b"v2"]


def test_listener_prefixed_keys_win(tls_broker: Callable[..., SecureBroker], pki: Pki) -> None:
    broker = tls_broker(listeners="SECURE://127.0.0.1:0", **{
        "listener.security.protocol.map": "SECURE:SSL", "ssl.keystore.location": "/nonexistent.pem",
        "listener.name.secure.ssl.keystore.location": str(pki.server_keystore)})
    assert not _refused(broker, client_context(pki.ca))


@pytest.mark.parametrize(("props", "key"), [
    ({"ssl.keystore.type": "JKS"}, "ssl.keystore.type"),
    ({"ssl.keystore.location": "/nonexistent/keystore.pem"}, "ssl.keystore.location"),
    ({"ssl.keystore.location": None}, "ssl.keystore.location"),
    ({"ssl.client.auth": "required"}, "ssl.client.auth"),
])
def test_bad_tls_settings_fail_at_start_naming_the_key(tls_broker: Callable[..., SecureBroker],
                                                       props: dict[str, object], key: str) -> None:
    with pytest.raises(ConfigError) as raised:
        tls_broker(**props)
    assert raised.value.context["config"] == key
