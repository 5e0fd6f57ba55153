"""The messages of tidelog's own APIs for jobs staged through the broker (served by
:mod:`.staged_writes`, sent by :mod:`tidelog.spark.broker_commit`).

kafka-python message classes built from JSON schemas in :mod:`tidelog.server.schemas`, written
as Kafka writes its own, so they decode and encode like every other API (:mod:`.codec`). Their
keys are far above any Kafka API key (Kafka's run below 100), and ApiVersions never advertises
them: a Kafka client never sees them, and a client sending one to a Kafka broker gets its
connection closed (Kafka closes on an unknown key), which the sink reports as "not tidelog serve".

This module imports kafka-python only, so the sink's executors load nothing of the server.
"""

from __future__ import annotations

from kafka.protocol.api_message import ApiMessage

from tidelog.server import schemas

STAGE_BATCHES, COMMIT_STAGED_JOB, ABORT_STAGED_JOB = 32000, 32001, 32002
# A running tidelog serve's address, at the root of each of its log dirs (Kafka ignores files
# there): {"pid", "host", "listeners": [{"name", "host", "port", "security_protocol"}]} with the
# advertised host and port, and "metrics" (the Prometheus endpoint's URL) when metrics.listener is set. Written once it listens, removed when it stops; a killed broker leaves
# it behind, so a reader trusts it only while the dir's .lock is held.
SERVE_ADDRESS_FILE = "tidelog-serve.json"


class StageBatchesRequest(ApiMessage, load_json=schemas):
    pass


class StageBatchesResponse(ApiMessage, load_json=schemas):
    pass


class CommitStagedJobRequest(ApiMessage, load_json=schemas):
    pass


class CommitStagedJobResponse(ApiMessage, load_json=schemas):
    pass


class AbortStagedJobRequest(ApiMessage, load_json=schemas):
    pass


class AbortStagedJobResponse(ApiMessage, load_json=schemas):
    pass


# api key -> (request class, response class), all at version 0
MESSAGES = {
    STAGE_BATCHES: (StageBatchesRequest, StageBatchesResponse),
    COMMIT_STAGED_JOB: (CommitStagedJobRequest, CommitStagedJobResponse),
    ABORT_STAGED_JOB: (AbortStagedJobRequest, AbortStagedJobResponse),
}
