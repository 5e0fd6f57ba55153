"""SASL listeners (``SASL_PLAINTEXT://``): kafka-python produces and consumes with PLAIN,
SCRAM-SHA-256 and SCRAM-SHA-512; wrong credentials, unknown users, other mechanisms and requests
before authentication are refused as Kafka refuses them; users added while the broker runs work
at once."""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.net.sasl.scram import ScramClient
from kafka.protocol.metadata import MetadataResponse
from kafka.protocol.sasl import SaslHandshakeResponse

import server_samples as samples
from security_helpers import SecureBroker, add_user, authenticate, handshake, start_secure_broker
from server_helpers import TIMEOUT_S, api_versions
from tidelog.server import codec
from tidelog.topic_partition import TopicPartition as TidelogTp

SASL_MECHANISMS = "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512"
PLAIN_FAILURE = "Authentication failed: Invalid username or password"


@pytest.fixture
def sasl_broker(tmp_path: Path) -> Iterator[Callable[..., SecureBroker]]:
    started: list[SecureBroker] = []

    def start(**props: object) -> SecureBroker:
        props = {"listeners": "SASL_PLAINTEXT://127.0.0.1:0", "sasl.enabled.mechanisms": SASL_MECHANISMS, **props}
        broker = start_secure_broker(tmp_path / "data", **props)
        started.append(broker)
        return broker

    yield start
    for broker in started:
        broker.stop()


@pytest.fixture
def broker(sasl_broker: Callable[..., SecureBroker], tmp_path: Path) -> SecureBroker:
    add_user(tmp_path / "data", "alice", "alice-secret", "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
    return sasl_broker()


def _sasl(mechanism: str, user: str = "alice", password: str = "alice-secret") -> dict[str, object]:
    return {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": mechanism, "sasl_plain_username": user,
            "sasl_plain_password": password}


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_kafka_python_produces_and_consumes_after_authenticating(broker: SecureBroker, mechanism: str) -> None:
    broker.manager.create_topic("t", 1)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=0, **_sasl(mechanism))
    offsets = [producer.send("t", value=b"v%d" % i).get(TIMEOUT_S).offset for i in range(3)]
    producer.close()
    assert offsets == [0, 1, 2]
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=None, auto_offset_reset="earliest",
                             enable_auto_commit=False, **_sasl(mechanism))
    consumer.assign([TopicPartition("t", 0)])
    got: list[bytes] = []
    while len(got) < 3:
        batches = consumer.poll(timeout_ms=int(TIMEOUT_S * 1000))
        assert batches, "no records"
        got += [r.value for records in batches.values() for r in records]
    consumer.close()
    assert got == [b"v0", b"v1", b"v2"]


def _plain_token(user: str, password: str, authzid: str = "") -> bytes:
    return f"{authzid}\0{user}\0{password}".encode()


@pytest.mark.parametrize(("user", "password"), [("alice", "wrong"), ("mallory", "alice-secret")])
def test_plain_wrong_password_and_unknown_user_fail_alike_and_close(broker: SecureBroker, user: str,
                                                                    password: str) -> None:
    client = broker.raw()
    assert api_versions(client).error_code == 0
    assert handshake(client, "PLAIN").error_code == 0
    failed = authenticate(client, _plain_token(user, password))
    assert (failed.error_code, failed.error_message) == (58, PLAIN_FAILURE)  # SASL_AUTHENTICATION_FAILED
    assert client.closed_by_server()


def _scram_failure(broker: SecureBroker, mechanism: str, user: str, password: str) -> tuple[int, str | None]:
    """Run kafka-python's own SCRAM client to the end; the final answer's error."""
    client = broker.raw()
    assert handshake(client, mechanism).error_code == 0
    scram = ScramClient(user, password, mechanism)
    first = authenticate(client, scram.first_message())
    assert first.error_code == 0
    scram.process_server_first_message(first.auth_bytes)
    final = authenticate(client, scram.final_message())
    assert client.closed_by_server()
    return final.error_code, final.error_message


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_wrong_password_and_unknown_user_are_indistinguishable(broker: SecureBroker, mechanism: str) -> None:
    expected = (58, f"Authentication failed during authentication due to invalid credentials with SASL mechanism "
                    f"{mechanism}")
    assert _scram_failure(broker, mechanism, "alice", "wrong") == expected
    assert _scram_failure(broker, mechanism, "nobody", "wrong") == expected


def test_scram_server_proves_it_knows_the_key(broker: SecureBroker) -> None:
    client = broker.raw()
    assert handshake(client, "SCRAM-SHA-256").error_code == 0
    scram = ScramClient("alice", "alice-secret", "SCRAM-SHA-256")
    first = authenticate(client, scram.first_message())
    scram.process_server_first_message(first.auth_bytes)
    final = authenticate(client, scram.final_message())
    assert (final.error_code, final.session_lifetime_ms) == (0, 0)
    scram.process_server_final_message(final.auth_bytes)  # raises when the server signature is wrong
    response = client.call(samples.metadata(), MetadataResponse, 12)
    assert response.brokers[0].port == broker.port


def test_a_request_before_authentication_closes_the_connection(broker: SecureBroker) -> None:
    broker.manager.create_topic("t", 1)
    client = broker.raw()
    assert api_versions(client).error_code == 0
    client.send(samples.metadata("t"), 12)
    assert client.closed_by_server()
    client = broker.raw()
    assert handshake(client, "PLAIN").error_code == 0
    client.send(samples.produce("t", records=samples.record_batch(b"x")), 9)  # not SaslAuthenticate
    assert client.closed_by_server()
    assert broker.manager.log(TidelogTp("t", 0)).high_watermark == 0  # nothing appended


def test_a_second_api_versions_before_handshake_closes_the_connection(broker: SecureBroker) -> None:
    client = broker.raw()
    assert api_versions(client).error_code == 0
    client.send(samples.sample(codec.API_VERSIONS, 3), 3)
    assert client.closed_by_server()


def test_api_versions_before_authentication_lists_the_sasl_apis(broker: SecureBroker) -> None:
    keys = {k.api_key: (k.min_version, k.max_version) for k in api_versions(broker.raw()).api_keys}
    assert keys[codec.SASL_HANDSHAKE] == (0, 1) and keys[codec.SASL_AUTHENTICATE] == (0, 2)


def test_a_mechanism_not_enabled_is_refused_with_the_enabled_list(sasl_broker: Callable[..., SecureBroker]) -> None:
    broker = sasl_broker(**{"sasl.enabled.mechanisms": "SCRAM-SHA-512"})
    client = broker.raw()
    refused = handshake(client, "PLAIN")
    assert (refused.error_code, refused.mechanisms) == (33, ["SCRAM-SHA-512"])  # UNSUPPORTED_SASL_MECHANISM
    assert client.closed_by_server()


def test_handshake_v0_exchanges_raw_tokens(broker: SecureBroker) -> None:
    client = broker.raw()
    assert handshake(client, "PLAIN", version=0).error_code == 0
    token = _plain_token("alice", "alice-secret")
    client.send_bytes(struct.pack(">i", len(token)) + token)
    assert client._exactly(4) == b"\0\0\0\0"  # an empty server token, size-prefixed
    assert client.call(samples.metadata(), MetadataResponse, 12).brokers[0].port == broker.port
    bad = broker.raw()
    assert handshake(bad, "PLAIN", version=0).error_code == 0
    token = _plain_token("alice", "nope")
    bad.send_bytes(struct.pack(">i", len(token)) + token)
    assert bad.closed_by_server()  # v0 has no way to say why


def test_after_authentication_sasl_requests_answer_illegal_sasl_state(broker: SecureBroker) -> None:
    client = broker.raw()
    assert handshake(client, "PLAIN").error_code == 0
    assert authenticate(client, _plain_token("alice", "alice-secret")).error_code == 0
    assert client.call(samples.sample(codec.SASL_HANDSHAKE, 1), SaslHandshakeResponse, 1).error_code == 34
    again = authenticate(client, b"anything")
    assert (again.error_code, again.error_message) == (34, "SaslAuthenticate request received after successful "
                                                             "authentication")


def test_an_oversized_frame_before_authentication_closes_the_connection(sasl_broker: Callable[..., SecureBroker],
                                                                        tmp_path: Path) -> None:
    broker = sasl_broker(**{"sasl.server.max.receive.size": "64"})
    client = broker.raw()
    client.send_bytes(struct.pack(">i", 65) + b"\0" * 65)
    assert client.closed_by_server()


def test_users_added_while_the_broker_runs_authenticate_at_once(sasl_broker: Callable[..., SecureBroker],
                                                                tmp_path: Path) -> None:
    broker = sasl_broker()
    client = broker.raw()
    assert handshake(client, "PLAIN").error_code == 0
    assert authenticate(client, _plain_token("bob", "bob-secret")).error_code == 58
    add_user(tmp_path / "data", "bob", "bob-secret", "PLAIN")
    client = broker.raw()
    assert handshake(client, "PLAIN").error_code == 0
    assert authenticate(client, _plain_token("bob", "bob-secret")).error_code == 0


def test_plain_authorization_id_must_be_the_user(broker: SecureBroker) -> None:
    client = broker.raw()
    assert handshake(client, "PLAIN").error_code == 0
    failed = authenticate(client, _plain_token("alice", "alice-secret", authzid="admin"))
    assert (failed.error_code, failed.error_message) == (
        58, "Authentication failed: Client requested an authorization id that is different from username")
