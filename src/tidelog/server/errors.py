"""Kafka error codes the server answers with, and the one place tidelog's typed errors become them.

Codes are those of Kafka's ``org.apache.kafka.common.protocol.Errors``. Every
:class:`~tidelog.errors.TidelogError` carries its own ``error_code`` (see :mod:`tidelog.errors`);
anything else that escapes a handler is a bug and answers UNKNOWN_SERVER_ERROR.
"""

from __future__ import annotations

import logging
from enum import IntEnum

from tidelog.errors import TidelogError

log = logging.getLogger(__name__)


class ErrorCode(IntEnum):
    """The Kafka error codes this server sends."""

    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    LEADER_NOT_AVAILABLE = 5
    MESSAGE_TOO_LARGE = 10
    OFFSET_METADATA_TOO_LARGE = 12
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    INVALID_TOPIC_EXCEPTION = 17
    RECORD_LIST_TOO_LARGE = 18
    NOT_ENOUGH_REPLICAS = 19
    INVALID_REQUIRED_ACKS = 21
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    UNSUPPORTED_SASL_MECHANISM = 33
    ILLEGAL_SASL_STATE = 34
    UNSUPPORTED_VERSION = 35
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_REPLICATION_FACTOR = 38
    INVALID_REPLICA_ASSIGNMENT = 39
    INVALID_CONFIG = 40
    INVALID_REQUEST = 42
    POLICY_VIOLATION = 44
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    INVALID_PRODUCER_EPOCH = 47
    INVALID_TXN_STATE = 48
    INVALID_PRODUCER_ID_MAPPING = 49
    INVALID_TRANSACTION_TIMEOUT = 50
    CONCURRENT_TRANSACTIONS = 51
    TRANSACTION_COORDINATOR_FENCED = 52
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
    OPERATION_NOT_ATTEMPTED = 55
    KAFKA_STORAGE_ERROR = 56
    SASL_AUTHENTICATION_FAILED = 58
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    FETCH_SESSION_ID_NOT_FOUND = 70
    MEMBER_ID_REQUIRED = 79
    GROUP_MAX_SIZE_REACHED = 81
    FENCED_INSTANCE_ID = 82
    INVALID_RECORD = 87
    UNSTABLE_OFFSET_COMMIT = 88
    PRODUCER_FENCED = 90
    UNKNOWN_TOPIC_ID = 100
    TRANSACTIONAL_ID_NOT_FOUND = 105
    TRANSACTION_ABORTABLE = 120


class MalformedRequestError(TidelogError):
    """A request frame whose bytes do not parse (Kafka closes the connection: InvalidRequestException)."""

    error_code = ErrorCode.INVALID_REQUEST


class UnsupportedRequestError(TidelogError):
    """An API key this server does not serve, or a version outside its advertised range (Kafka
    closes the connection, except for ApiVersions)."""

    error_code = ErrorCode.UNSUPPORTED_VERSION


class NotEnoughReplicasError(TidelogError):
    """An acks=-1 produce to a partition whose ``min.insync.replicas`` is above 1: this broker is
    its only in-sync replica (Kafka NOT_ENOUGH_REPLICAS)."""

    error_code = ErrorCode.NOT_ENOUGH_REPLICAS


class InvalidReplicationFactorError(TidelogError):
    """A replication factor this single broker cannot give (Kafka INVALID_REPLICATION_FACTOR)."""

    error_code = ErrorCode.INVALID_REPLICATION_FACTOR


class InvalidReplicaAssignmentError(TidelogError):
    """A manual assignment naming another broker, or partitions not numbered 0..N-1 (Kafka
    INVALID_REPLICA_ASSIGNMENT)."""

    error_code = ErrorCode.INVALID_REPLICA_ASSIGNMENT


class CoordinatorNotAvailableError(TidelogError):
    """No group coordinator serves the request (Kafka COORDINATOR_NOT_AVAILABLE)."""

    error_code = ErrorCode.COORDINATOR_NOT_AVAILABLE


class SaslAuthenticationError(TidelogError):
    """A SASL exchange that failed: wrong credentials, an unknown user, or a malformed token.
    Its message is what the client is told, so it never says which of these it was (Kafka
    SASL_AUTHENTICATION_FAILED)."""

    error_code = ErrorCode.SASL_AUTHENTICATION_FAILED


def error_code(error: BaseException) -> int:
    """Kafka's code for ``error``: a tidelog error's own code, whatever it is (this module's enum
    lists only the codes the server sends itself); KAFKA_STORAGE_ERROR for an ``OSError`` a log
    read let through (a disk fault, as the manager's read-fault accounting counts it); else
    UNKNOWN_SERVER_ERROR (logged, with its traceback: only a bug gets here)."""
    if isinstance(error, TidelogError):
        return int(error.error_code)
    if isinstance(error, OSError):
        return ErrorCode.KAFKA_STORAGE_ERROR
    log.error("unexpected error while handling a request", exc_info=error)
    return ErrorCode.UNKNOWN_SERVER_ERROR


def error_message(error: BaseException) -> str:
    """The text sent in a response's ``error_message`` field."""
    if isinstance(error, TidelogError):
        return str(error)
    return f"{type(error).__name__}: {error}"


def record_errors(error: BaseException) -> list[tuple[int, str | None]]:
    """``(batch index, message)`` pairs of an InvalidRecordError's individual records (Produce v8+)."""
    found = getattr(error, "record_errors", None) or []
    return [(int(index), None if reason is None else str(reason)) for index, reason in found]
