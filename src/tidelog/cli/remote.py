"""``--bootstrap-server``: the commands that read or change data, through a running broker.

With ``--bootstrap-server HOST:PORT`` (or ``TIDELOG_BOOTSTRAP_SERVER``), ``produce``, ``consume``,
``topics``, ``configs`` and ``delete-records`` talk Kafka's protocol to a broker (``tidelog
serve`` or a real Kafka broker) through kafka-python instead of opening the log dir, so they work
while ``tidelog serve`` holds its lock. ``--data-dir`` is then not used; ``--config`` and
``--override`` (which configure a local log dir) are a usage error.

Clients: one :class:`RemoteClient` per command wraps kafka-python's ``KafkaAdminClient`` (metadata,
topics, configs, offsets, delete-records) and raw Produce requests; ``consume`` uses a
``KafkaConsumer`` with no group. The first connection must succeed within
``BOOTSTRAP_TIMEOUT_MS``: an unreachable broker is a clear error, never a hang.

The option itself is in :mod:`tidelog.cli.remote_options` (importing kafka-python costs a
quarter second: only a remote command pays it).

Errors: every Kafka error a broker answers becomes the :mod:`tidelog.errors` class carrying the
same Kafka code (UNKNOWN_TOPIC_OR_PARTITION -> UnknownTopicOrPartitionError, ...) or, for codes
tidelog has no class for, :class:`BrokerError`; the message is the broker's, with the topic or
partition and Kafka's error name as context. Exit codes are the local mode's.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import click
import kafka.errors as kafka_errors
from kafka import KafkaAdminClient, KafkaConsumer

from tidelog import errors as tidelog_errors
from tidelog.errors import TidelogError, UnknownTopicOrPartitionError

BOOTSTRAP_TIMEOUT_MS = 5_000  # the first connection; an unreachable broker fails this fast
REQUEST_TIMEOUT_MS = 30_000  # any one request (kafka-python's and Kafka's default)
CLIENT_ID = "tidelog-cli"


class BrokerError(TidelogError):
    """A Kafka error the broker answered that tidelog has no error class for; ``error_code`` is
    the broker's code."""


class BrokerUnreachableError(TidelogError):
    """No broker answered at the bootstrap address (or a connection broke and did not come back)."""


# --- errors ---------------------------------------------------------------------------------------

@functools.cache
def _classes_by_code() -> dict[int, type[TidelogError]]:
    """tidelog's error class for each Kafka code it has one for (the most general one first)."""
    found: dict[int, type[TidelogError]] = {}
    for value in vars(tidelog_errors).values():
        if isinstance(value, type) and issubclass(value, TidelogError) and value is not TidelogError:
            code = value.error_code
            if code not in found or issubclass(found[code], value):
                found[code] = value
    found.pop(-1, None)
    return found


def kafka_error_name(code: int) -> str:
    """Kafka's name of ``code`` (``UNKNOWN_TOPIC_OR_PARTITION``)."""
    return str(getattr(kafka_errors.for_code(code), "message", f"ERROR_{code}"))


def broker_error(code: int, message: str | None, **context: Any) -> TidelogError:
    """The typed error for Kafka error ``code`` answered with ``message`` (see module doc)."""
    name = kafka_error_name(code)
    text = message or getattr(kafka_errors.for_code(code), "description", "") or name
    cls = _classes_by_code().get(code)
    if cls is None:
        error = BrokerError(text, **context, kafka_error=name)
        error.error_code = code
        return error
    return cls(text, **context, kafka_error=name)


def from_kafka_exception(error: kafka_errors.KafkaError, **context: Any) -> TidelogError:
    """A kafka-python exception as a typed tidelog error (broker errors keep their code)."""
    code = getattr(error, "errno", None)
    if isinstance(code, int) and isinstance(error, kafka_errors.BrokerResponseError):
        detail = str(error.args[0]) if error.args else None
        return broker_error(code, detail, **context)
    if isinstance(error, (kafka_errors.KafkaTimeoutError, kafka_errors.KafkaConnectionError,
                          kafka_errors.NoBrokersAvailable)):
        return BrokerUnreachableError(f"no answer from the broker: {error}", **context)
    return BrokerError(f"the Kafka client failed: {error}", **context)


def check(code: int, message: str | None = None, **context: Any) -> None:
    """Raise :func:`broker_error` unless ``code`` is 0."""
    if code:
        raise broker_error(code, message, **context)


@contextmanager
def kafka_errors_mapped(**context: Any) -> Iterator[None]:
    """Within the block, kafka-python exceptions become typed tidelog errors with ``context``."""
    try:
        yield
    except kafka_errors.KafkaError as e:
        raise from_kafka_exception(e, **context) from e


# --- the client -----------------------------------------------------------------------------------

class RemoteClient:
    """One command's connection to a broker: kafka-python's admin client, plus raw requests.

    Not thread-safe. Close it (or use :func:`connect`).
    """

    def __init__(self, bootstrap: str, admin: KafkaAdminClient) -> None:
        self.bootstrap = bootstrap
        self.admin = admin

    def close(self) -> None:
        self.admin.close()

    def topic_metadata(self, topic: str) -> dict[str, Any]:
        """The Metadata of ``topic`` (never auto-created); UnknownTopicOrPartitionError when the
        broker has no such topic, any other topic-level error as its typed error."""
        with kafka_errors_mapped(topic=topic):
            found = self.admin.describe_topics([topic])
        described = next((t for t in found if t["name"] == topic), None)
        if described is None:
            raise UnknownTopicOrPartitionError(f"the broker has no topic {topic!r}", topic=topic)
        if described["error_code"] == UnknownTopicOrPartitionError.error_code:
            raise UnknownTopicOrPartitionError(f"the broker has no topic {topic!r}", topic=topic,
                                               kafka_error=kafka_error_name(described["error_code"]))
        check(described["error_code"], None, topic=topic)
        return described

    def partitions(self, topic: str) -> list[int]:
        """``topic``'s partition ids, sorted."""
        return sorted(p["partition_index"] for p in self.topic_metadata(topic)["partitions"])

    def leaders(self, topic: str) -> dict[int, int]:
        """Partition id -> leader node id of ``topic``."""
        return {p["partition_index"]: p["leader_id"] for p in self.topic_metadata(topic)["partitions"]}

    def send(self, request: Any, node_id: int | None = None, **context: Any) -> Any:
        """Send a kafka-python request object to ``node_id`` (any broker when None) and return its
        response. kafka-python 3 has no public call for a raw request: this goes through the admin
        client's connection manager, as its own admin methods do (the one private door here)."""
        manager = self.admin._manager

        async def call() -> Any:
            return await manager.send(request, node_id=node_id)

        with kafka_errors_mapped(**context):
            return manager.run(call)

    def consumer(self, isolation_level: str = "read_uncommitted") -> KafkaConsumer:
        """A KafkaConsumer without a group (``assign`` only, nothing committed), reading CRC-checked
        records; ``read_uncommitted`` (the default, as ``tidelog consume``) includes aborted
        transactions, ``read_committed`` stops at the last stable offset and skips them."""
        with kafka_errors_mapped():
            return KafkaConsumer(bootstrap_servers=self.bootstrap, group_id=None, enable_auto_commit=False,
                                 client_id=CLIENT_ID, bootstrap_timeout_ms=BOOTSTRAP_TIMEOUT_MS,
                                 request_timeout_ms=REQUEST_TIMEOUT_MS, auto_offset_reset="none",
                                 isolation_level=isolation_level, check_crcs=True)


@contextmanager
def connect(bootstrap: str) -> Iterator[RemoteClient]:
    """A :class:`RemoteClient` bootstrapped from ``bootstrap`` (HOST:PORT), closed on exit;
    BrokerUnreachableError when no broker answers within ``BOOTSTRAP_TIMEOUT_MS``."""
    if not bootstrap or not bootstrap.strip():
        raise click.BadParameter("expected HOST:PORT", param_hint="--bootstrap-server")
    with _kafka_logs_quiet():
        yield from _connected(bootstrap)


def _connected(bootstrap: str) -> Iterator[RemoteClient]:
    try:
        admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id=CLIENT_ID,
                                 bootstrap_timeout_ms=BOOTSTRAP_TIMEOUT_MS, request_timeout_ms=REQUEST_TIMEOUT_MS)
    except (kafka_errors.KafkaError, ValueError) as e:
        raise BrokerUnreachableError(f"cannot reach a Kafka broker at {bootstrap} within "
                                     f"{BOOTSTRAP_TIMEOUT_MS // 1000} s: {e}", bootstrap_server=bootstrap) from e
    client = RemoteClient(bootstrap, admin)
    try:
        yield client
    finally:
        client.close()


@contextmanager
def _kafka_logs_quiet() -> Iterator[None]:
    """Silence kafka-python's own logging (every reconnect attempt is a WARNING or an ERROR) unless
    ``tidelog -v`` asked for logs: its failures reach the user as one error line instead."""
    logger = logging.getLogger("kafka")
    if logging.getLogger().isEnabledFor(logging.INFO):
        yield
        return
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(level)
