"""The sink's staged-write requests sent to a real Kafka broker: Kafka closes the connection on
API keys it does not know, and the sink says the broker is not tidelog serve, naming it."""

from __future__ import annotations

import pytest
from kafka_oracle import KafkaBroker

from tidelog.server.staged_api import AbortStagedJobRequest
from tidelog.spark.broker_commit import BrokerStagedFile, NotTidelogError, abort_through_broker

pytestmark = pytest.mark.xdist_group("kafka_broker")
KEY = "job-" + "0" * 32


def test_a_kafka_broker_is_named_as_not_tidelog_serve(kafka_broker: KafkaBroker) -> None:
    address = kafka_broker.bootstrap_servers
    with pytest.raises(NotTidelogError, match=f"the broker at {address} is not tidelog serve"):
        abort_through_broker(address, KEY)
    staged = BrokerStagedFile(address, KEY, "part-00000-attempt-0-task-1.batches")
    staged.write(b"x" * 100)
    with pytest.raises(NotTidelogError, match=f"the broker at {address} is not tidelog serve"):
        staged.close()
    assert AbortStagedJobRequest.API_KEY >= 32000  # far from any Kafka API key
