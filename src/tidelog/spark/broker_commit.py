"""The sink's side of jobs staged through a live ``tidelog serve`` (the broker's side:
:mod:`tidelog.server.staged_writes`, :mod:`tidelog.manager.live_commit`).

Executors send each task's producer batches to the broker in chunks (:class:`BrokerStagedFile`,
``StageBatches``), encoded exactly as for a local staging dir (:mod:`tidelog.spark.staging`);
the driver then asks the broker to commit the job (:func:`commit_through_broker`,
``CommitStagedJob``) or to abort it (:func:`abort_through_broker`). Executors need to reach the
broker only, as Spark's Kafka sink does; nothing here touches a disk.

**Which broker**: ``kafka.bootstrap.servers`` (the first address that accepts a connection), or,
when ``path`` names a data dir owned by a running ``tidelog serve``, the PLAINTEXT listener it
left in :data:`~tidelog.server.staged_api.SERVE_ADDRESS_FILE` (:func:`serve_address`). Plain
connections only: a broker reachable only over TLS or SASL needs a PLAINTEXT listener for the sink.

**Retries**: a commit or abort whose connection breaks (a broker restarting completes the intent
at start-up, before it listens) is sent again on a new connection until
:data:`RETRY_TIMEOUT_S`; the commit is idempotent by job key (``already committed``). A broker
that accepts a connection and closes it on the request twice in a row, with no answer, is taken
for a Kafka broker (Kafka closes the connection on an API key it does not know): the error says
the broker at that address is not tidelog serve.

The connection, framing, bootstrap parsing and the unreachable/broken-connection errors are the
Spark side's one client (:mod:`tidelog.spark.broker_client`); this module adds the staged-write
requests, their retry policy and the staged file.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tidelog.errors import LogDirLockedError, StorageError, TidelogError
from tidelog.manager.staged_commit import CommitOutcome
from tidelog.server.staged_api import (
    SERVE_ADDRESS_FILE,
    AbortStagedJobRequest,
    AbortStagedJobResponse,
    CommitStagedJobRequest,
    CommitStagedJobResponse,
    StageBatchesRequest,
    StageBatchesResponse,
)
from tidelog.spark.broker_client import (
    CONNECT_TIMEOUT_S,
    BrokerClient,
    BrokerUnreachableError,
    ConnectionBrokenError,
)
from tidelog.storage.commit_log import StagedBatch
from tidelog.storage.lock import LogDirLock

CHUNK_BYTES = 4 << 20  # a StageBatches request's data: far below socket.request.max.bytes (100 MiB)
REQUEST_TIMEOUT_S = 300.0  # a commit of a large job appends and fsyncs every batch before answering
RETRY_TIMEOUT_S = 120.0  # how long a commit or abort keeps trying while the broker restarts
CLIENT_ID = "tidelog-spark-sink"


class NotTidelogError(TidelogError):
    """The broker answered Kafka's protocol but closed the connection on tidelog's own APIs."""


class BrokerRefusedError(StorageError):
    """The broker answered a staged-write request with an error."""


def serve_address(log_dirs: Sequence[str]) -> str | None:
    """``host:port`` of the PLAINTEXT listener of the ``tidelog serve`` that owns ``log_dirs``
    (its ``.lock`` held, its address file there); None when no process owns them or the owner
    left no address (another tidelog command, a Kafka broker: the caller's ownership check says
    so). LogDirLockedError when a broker left an address the sink cannot use (secured listeners
    only, an unreadable file)."""
    first = Path(log_dirs[0])
    try:
        LogDirLock.acquire(first).release()
        return None
    except LogDirLockedError as e:
        owned = e
    try:
        content = json.loads((first / SERVE_ADDRESS_FILE).read_bytes())
        if content["host"] == socket.gethostname() and not os.path.exists(f"/proc/{int(content['pid'])}"):
            return None  # left by a killed broker; the dir's owner now is another process (check_not_owned says)
        listeners = [item for item in content["listeners"] if item.get("security_protocol") == "PLAINTEXT"]
        if listeners:
            return f"{listeners[0]['host']}:{int(listeners[0]['port'])}"
        why = "it has no PLAINTEXT listener (the sink connects without TLS or SASL)"
    except FileNotFoundError:
        return None  # another tidelog command (a local commit): check_not_owned waits for it, then says
    except (OSError, ValueError, KeyError, TypeError) as e:
        why = f"its {SERVE_ADDRESS_FILE} is not readable ({e})"
    raise LogDirLockedError(
        f"the data dir is owned by a running process ({owned}), and the sink cannot write through it: {why}. "
        "Give option kafka.bootstrap.servers=<host:port of its PLAINTEXT listener>, or stop that process",
        log_dir=log_dirs[0])


def sink_client(bootstrap: str) -> BrokerClient:
    """A client of ``bootstrap`` for the staged-write requests (their timeout and client id)."""
    return BrokerClient(bootstrap, timeout_s=REQUEST_TIMEOUT_S, client_id=CLIENT_ID)


def staged_call(client: BrokerClient, request: Any) -> Any:
    """``request`` (a staged-write API, version 0) sent on ``client``'s bootstrap connection;
    its decoded response. The client's errors (see :meth:`BrokerClient.call`)."""
    return client.call(request, _RESPONSES[type(request)], 0)


_RESPONSES: dict[type, Any] = {StageBatchesRequest: StageBatchesResponse, CommitStagedJobRequest: CommitStagedJobResponse,
                               AbortStagedJobRequest: AbortStagedJobResponse}


def call_with_retry(bootstrap: str, request: Any, what: str, retry_timeout_s: float = RETRY_TIMEOUT_S) -> Any:
    """``request``'s answer, sent again on a new connection while the broker is unreachable or
    drops the connection, for up to ``retry_timeout_s``; NotTidelogError when two fresh
    connections in a row are closed on it unanswered; BrokerRefusedError for an error answer
    (not retried: the driver's commit fails, and Spark's abort() rolls the job forward or back)."""
    deadline = time.monotonic() + retry_timeout_s
    closed_unanswered = 0
    delay = 0.2
    while True:
        client = sink_client(bootstrap)
        try:
            address = client.connect()
            return checked(staged_call(client, request), what, address)
        except ConnectionBrokenError as e:
            closed_unanswered += 1
            if closed_unanswered >= 2:
                raise not_tidelog(e.address, what) from e
            last: BrokerUnreachableError = e
        except BrokerUnreachableError as e:
            closed_unanswered = 0
            last = e
        finally:
            client.close()
        if time.monotonic() >= deadline:
            raise last
        time.sleep(delay)
        delay = min(2.0, delay * 2)


def not_tidelog(address: str, what: str) -> NotTidelogError:
    return NotTidelogError(
        f"the broker at {address} is not tidelog serve: it closed the connection on {what} (a tidelog API; a Kafka "
        "broker closes connections on API keys it does not know). format(\"tidelog\") writes through tidelog serve "
        "only; to write to a Kafka broker use format(\"kafka\")")


def checked(response: Any, what: str, address: str) -> Any:
    if response.error_code != 0:
        raise BrokerRefusedError(f"{what} refused by the broker at {address}: {response.error_message}")
    return response


class BrokerStagedFile:
    """A task attempt's staged file, sent to the broker in chunks of :data:`CHUNK_BYTES`
    (the same interface as :class:`~tidelog.storage.staging_dirs.StagedFile`)."""

    def __init__(self, bootstrap: str, job_key: str, name: str, chunk_bytes: int = CHUNK_BYTES) -> None:
        self.client = sink_client(bootstrap)
        self.job_key, self.name, self.chunk_bytes = job_key, name, chunk_bytes
        self.position = 0  # bytes written (sent or buffered)
        self._sent = 0
        self._buffer: list[bytes] = []
        self._buffered = 0

    def write(self, data: bytes) -> int:
        """Append ``data``; its position in the file."""
        position = self.position
        self._buffer.append(bytes(data))
        self._buffered += len(data)
        self.position += len(data)
        if self._buffered >= self.chunk_bytes:
            self._send(last=False)
        return position

    def close(self) -> bool:
        """Send the rest as the last chunk (the broker fsyncs the file); whether anything was written."""
        try:
            if self.position == 0:
                return False
            self._send(last=True)
            return True
        finally:
            self.client.close()

    def discard(self) -> None:
        """Stop sending (the job's abort or the broker's reclaim deletes what was sent)."""
        self.client.close()

    def _send(self, last: bool) -> None:
        data = b"".join(self._buffer)
        self._buffer, self._buffered = [], 0
        what = f"staging {self.name} of {self.job_key}"
        request = StageBatchesRequest(job_key=self.job_key, file_name=self.name, position=self._sent, data=data,
                                      last=last)
        try:
            response = staged_call(self.client, request)
        except ConnectionBrokenError:
            if self._sent:
                raise  # the broker went away mid-file: the task fails, Spark's retry stages anew
            # the first chunk: a broker going away, or a Kafka broker closing on an unknown key?
            # A second connection closed on the same request says Kafka; a refused one, gone.
            try:
                response = staged_call(self.client, request)
            except ConnectionBrokenError as e:
                raise NotTidelogError(
                    f"{not_tidelog(e.address, what)}; or its socket.request.max.bytes is below a chunk "
                    f"of the sink ({len(data) + 1024} bytes: raise it to at least {CHUNK_BYTES + (1 << 16)})") from e
        checked(response, what, self.client.last_address)
        self._sent += len(data)


def commit_through_broker(bootstrap: str, job_key: str, staged: list[tuple[str, StagedBatch]],
                          query: str | None = None, batch: int | None = None) -> CommitOutcome:
    """Ask the broker to publish the job exactly once (see the module doc for retries)."""
    request = CommitStagedJobRequest(job_key=job_key, query_id=query, batch_id=-1 if batch is None else batch,
                                     batches=[CommitStagedJobRequest.StagedBatch(
                                         file_name=file, topic=b.topic, partition=b.partition, position=b.position,
                                         size=b.size, records=b.records, fingerprint=b.fingerprint,
                                         stamp_at_commit=b.stamp_at_commit) for file, b in staged])
    response = call_with_retry(bootstrap, request, f"the commit of {job_key}")
    return CommitOutcome(response.state, {f"{r.topic}-{r.partition}": (r.start, r.end) for r in response.ranges})


def abort_through_broker(bootstrap: str, job_key: str, query: str | None = None,
                         batch: int | None = None) -> CommitOutcome:
    """Spark's abort() of a job staged through the broker."""
    request = AbortStagedJobRequest(job_key=job_key, query_id=query, batch_id=-1 if batch is None else batch)
    response = call_with_retry(bootstrap, request, f"the abort of {job_key}")
    return CommitOutcome(response.state)


def broker_topic_specs(bootstrap: str, compression: Any, names: list[str] | None) -> dict[str, Any]:
    """The sink's :class:`~tidelog.spark.sink_options.TopicSpec` of ``names`` (every topic when
    None) from the broker: partition counts from Metadata, topic overrides from DescribeConfigs
    over Kafka's defaults. Unknown names are left out."""
    from kafka import KafkaAdminClient
    from kafka.admin import ConfigResource, ConfigResourceType
    from kafka.errors import KafkaError

    from tidelog.spark.sink_options import topic_spec
    from tidelog.storage.config import BrokerConfig

    with sink_client(bootstrap) as probe:  # fails at once, naming the address, when nothing listens there
        probe.connect()
    try:
        admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id=CLIENT_ID,
                                 request_timeout_ms=int(CONNECT_TIMEOUT_S * 3000))
    except KafkaError as e:
        raise BrokerUnreachableError(f"cannot reach the broker (kafka.bootstrap.servers={bootstrap}): {e}",
                                     bootstrap) from e
    try:
        wanted = names if names is not None else [t for t in admin.list_topics() if not t.startswith("__")]
        described = [d for d in admin.describe_topics(wanted) if d.get("error_code", 0) == 0] if wanted else []
        partitions = {d["name"]: len(d["partitions"]) for d in described}
        configs = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, t) for t in partitions]) \
            if partitions else {}
    except KafkaError as e:
        raise BrokerRefusedError(f"cannot describe topics {wanted} at the broker {bootstrap}: {e}") from e
    finally:
        admin.close()
    broker = BrokerConfig.from_properties({})
    return {name: topic_spec(name, count, broker.log_config(_overrides(configs, name)), compression)
            for name, count in partitions.items()}


def _overrides(configs: Any, topic: str) -> dict[str, str]:
    """The topic's non-default configs from kafka-python's describe_configs answer."""
    found: dict[str, str] = {}
    for resources in (configs.values() if isinstance(configs, dict) else []):
        entries = resources.get(topic) if isinstance(resources, dict) else None
        for key, entry in (entries or {}).items():
            value = entry.get("value") if isinstance(entry, dict) else entry
            if value is not None:
                found[key] = str(value)
    return found
