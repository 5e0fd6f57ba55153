"""Names in Kafka's RequestMetrics vocabulary: the ``request`` label (Kafka's ``ApiKeys`` names, with
a consumer's Fetch also counted as "FetchConsumer"), the ``error`` label (Kafka's ``Errors`` enum
names), and the error codes a response carries (Kafka's ``AbstractResponse.errorCounts``)."""

from __future__ import annotations

from typing import Any

from kafka.protocol.data_container import DataContainer

from tidelog.server.errors import ErrorCode
from tidelog.server.staged_api import ABORT_STAGED_JOB, COMMIT_STAGED_JOB, STAGE_BATCHES

# Kafka's ApiKeys names (org.apache.kafka.common.protocol.ApiKeys), by API key.
KAFKA_API_NAMES: dict[int, str] = {
    0: "Produce", 1: "Fetch", 2: "ListOffsets", 3: "Metadata", 8: "OffsetCommit", 9: "OffsetFetch",
    10: "FindCoordinator", 11: "JoinGroup", 12: "Heartbeat", 13: "LeaveGroup", 14: "SyncGroup",
    15: "DescribeGroups", 16: "ListGroups", 17: "SaslHandshake", 18: "ApiVersions", 19: "CreateTopics",
    20: "DeleteTopics", 21: "DeleteRecords", 22: "InitProducerId", 23: "OffsetForLeaderEpoch",
    24: "AddPartitionsToTxn", 25: "AddOffsetsToTxn", 26: "EndTxn", 27: "WriteTxnMarkers", 28: "TxnOffsetCommit",
    29: "DescribeAcls", 30: "CreateAcls", 31: "DeleteAcls", 32: "DescribeConfigs", 33: "AlterConfigs",
    34: "AlterReplicaLogDirs", 35: "DescribeLogDirs", 36: "SaslAuthenticate", 37: "CreatePartitions",
    38: "CreateDelegationToken", 39: "RenewDelegationToken", 40: "ExpireDelegationToken",
    41: "DescribeDelegationToken", 42: "DeleteGroups", 43: "ElectLeaders", 44: "IncrementalAlterConfigs",
    45: "AlterPartitionReassignments", 46: "ListPartitionReassignments", 47: "OffsetDelete",
    48: "DescribeClientQuotas", 49: "AlterClientQuotas", 50: "DescribeUserScramCredentials",
    51: "AlterUserScramCredentials", 60: "DescribeCluster", 61: "DescribeProducers",
    65: "DescribeTransactions", 66: "ListTransactions", 68: "ConsumerGroupHeartbeat",
    69: "ConsumerGroupDescribe", 75: "DescribeTopicPartitions",
}
# tidelog's own APIs (server.staged_api), named as their messages are.
TIDELOG_API_NAMES: dict[int, str] = {STAGE_BATCHES: "StageBatches", COMMIT_STAGED_JOB: "CommitStagedJob",
                                     ABORT_STAGED_JOB: "AbortStagedJob"}
FETCH_KEY = 1
CONSUMER_FETCH = "FetchConsumer"  # Kafka's RequestMetrics.consumerFetchMetricName
FOLLOWER_FETCH = "FetchFollower"  # ... followFetchMetricName (tidelog serves no followers)


def api_name(api_key: int) -> str:
    """The ``request`` label of an API key (its number as text for a key no table names)."""
    return KAFKA_API_NAMES.get(api_key) or TIDELOG_API_NAMES.get(api_key) or str(api_key)


def metric_names(api_key: int) -> tuple[str, ...]:
    """The request names a request is counted and timed under: a Fetch (from a consumer: tidelog
    has no followers) under "FetchConsumer" and "Fetch", as Kafka's RequestChannel does."""
    name = api_name(api_key)
    return (CONSUMER_FETCH, name) if api_key == FETCH_KEY else (name,)


# Kafka's Errors names of codes tidelog's errors carry beyond server.errors.ErrorCode.
MORE_ERROR_NAMES: dict[int, str] = {7: "REQUEST_TIMED_OUT", 32: "INVALID_TIMESTAMP", 76: "UNSUPPORTED_COMPRESSION_TYPE",
                                    109: "OFFSET_MOVED_TO_TIERED_STORAGE"}


def error_name(code: int) -> str:
    """Kafka's ``Errors`` name of an error code (kafka-python's table for codes tidelog never sends
    itself; the number as text for a code neither knows)."""
    try:
        return ErrorCode(code).name
    except ValueError:
        pass
    if code in MORE_ERROR_NAMES:
        return MORE_ERROR_NAMES[code]
    from kafka.errors import for_code  # the whole table, for a code tidelog's enum lacks

    found = for_code(code)
    message = getattr(found, "message", None)
    known = isinstance(message, str) and message != "UNKNOWN" and getattr(found, "errno", None) == code
    return message if known else str(code)  # type: ignore[return-value]


def response_error_codes(body: Any) -> list[int]:
    """Every ``error_code`` field of a response body, top level and nested (Kafka's
    ``errorCounts`` counts each occurrence, NONE included). O(fields of the response)."""
    codes: list[int] = []
    _walk(body, codes)
    return codes


def _walk(value: Any, codes: list[int]) -> None:
    if isinstance(value, list):
        for item in value:
            _walk(item, codes)
        return
    if not isinstance(value, DataContainer):
        return
    has_error, nested = _shape(value._struct)
    if has_error:
        code = getattr(value, "error_code", None)
        if isinstance(code, int):
            codes.append(code)
    for name in nested:
        item = getattr(value, name, None)
        if item is not None:
            _walk(item, codes)


_SHAPES: dict[int, tuple[bool, tuple[str, ...]]] = {}


def _shape(struct: Any) -> tuple[bool, tuple[str, ...]]:
    """Whether a message struct has an ``error_code`` field, and its struct-valued fields (the
    only ones worth descending into); computed once per struct."""
    found = _SHAPES.get(id(struct))
    if found is None:
        fields = struct._fields
        found = (any(f.name == "error_code" for f in fields),
                 tuple(f.name for f in fields if f.is_struct() or f.is_struct_array()))
        _SHAPES[id(struct)] = found
    return found
