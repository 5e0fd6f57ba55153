"""Fixtures for interop with real Kafka (``kafka_oracle``): its jars, its tools and one broker.

* ``kafka4`` / ``kafka3``: the Kafka 4.x and 3.9 distributions, resolved from Maven Central on
  first use. Skipped, with the reason, only where ``java`` or ``mvn`` is missing; a Maven that
  cannot resolve fails the test, since the suite is meant to check against Kafka wherever it can.
* ``kafka_broker``: one running KRaft broker (Kafka 4.x) for the whole session, its data dir in
  a session tmp dir. Tests may stop, kill and restart it; each leaves it running (``running_broker``
  restarts it when a test left it down). Every test using it carries
  ``pytest.mark.xdist_group("kafka_broker")`` so xdist runs them on one worker, one broker.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from kafka_oracle import KAFKA_3, KAFKA_4, KafkaBroker, KafkaDistribution, KafkaToolMissing

# Short enough that tests see retention and cleaning within seconds, never sleeping on Kafka's defaults.
BROKER_OVERRIDES = {
    "log.initial.task.delay.ms": "0",          # default 30 s before the first retention/flush task
    "log.retention.check.interval.ms": "300",  # default 5 min
    "log.segment.delete.delay.ms": "200",      # file.delete.delay.ms: .deleted files go quickly
    "log.cleaner.backoff.ms": "200",           # default 15 s between cleaner attempts
    "log.cleaner.dedupe.buffer.size": str(16 * 1024 * 1024),
    "auto.create.topics.enable": "false",      # a typo in a test fails instead of creating a topic
    "transaction.state.log.num.partitions": "1",  # default 50: every restart and dir copy would carry them
}


def _distribution(distribution: KafkaDistribution) -> KafkaDistribution:
    try:
        distribution.classpath()
    except KafkaToolMissing as missing:
        pytest.skip(f"real Kafka interop needs Java and Maven: {missing}")
    return distribution


@pytest.fixture(scope="session")
def kafka4() -> KafkaDistribution:
    return _distribution(KAFKA_4)


@pytest.fixture(scope="session")
def kafka3() -> KafkaDistribution:
    return _distribution(KAFKA_3)


@pytest.fixture(scope="session")
def kafka_broker_session(kafka4: KafkaDistribution, tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    root = tmp_path_factory.mktemp("kafka_broker")
    broker = KafkaBroker(kafka4, root / "data", root / "work", overrides=BROKER_OVERRIDES)
    broker.start()
    try:
        yield broker
    finally:
        try:
            broker.stop()
        finally:
            broker.kill()


@pytest.fixture
def kafka_broker(kafka_broker_session: KafkaBroker) -> KafkaBroker:
    """The session's broker, started again if an earlier test left it stopped or killed."""
    if not kafka_broker_session.running:
        kafka_broker_session.start()
    return kafka_broker_session

