"""Deleting all of a partition's remote data: a tiered topic deleted (Kafka's
``stopPartitions(deleteRemoteLog=true)``), or ``remote.storage.enable`` turned off with
``remote.log.delete.on.disable=true`` (Kafka's ``ConfigHandler``).

Crash safety. Before the change that calls for it is committed (the topic registry's delete, the
topic's new config), a *pending deletion* object is written to the store::

    tidelog-remote-deletions/<topic>-<topicId>.json   {"version": 0, "topic", "topic_id", "partitions", "reason"}

Then, per partition, readers first stop seeing its segments (one metadata event moving every
FINISHED segment to DELETE_SEGMENT_STARTED, when this process has the partition's metadata), and
every object under ``<topic>-<topicId>/<partition>/`` goes (segments and metadata log; idempotent).
The pending object is deleted last. A crash or an outage anywhere leaves the pending object, and
the next process with the remote tier finds it (:func:`list_pending`: one LIST of
``tidelog-remote-deletions/`` per process, and again after a failure) and finishes the deletion,
or drops the object when the change it was written for did not commit (the caller decides: it
knows the registry). Everything is addressed by topic id: a topic re-created under the same name
has another prefix, and the caller passes only metadata cached for the pending topic id.
Kafka resumes none of this after a crash.

Thread-safety: functions without shared state; the partition's ``task_lock`` is held while its
data goes, so no copy, expiration or compaction of it runs meanwhile.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tidelog.remote.errors import RemoteMetadataError, RemoteStorageError
from tidelog.remote.metadata import TopicIdPartition, partition_prefix
from tidelog.remote.metadata_log import RemotePartitionMetadata
from tidelog.remote.store import RemoteStore
from tidelog.topic_partition import TopicPartition

__all__ = ["PENDING_PREFIX", "REMOTE_DISABLED", "TOPIC_DELETED", "PendingDeletion", "delete_partition_data",
           "finish_pending", "list_pending", "record_pending"]

logger = logging.getLogger(__name__)

PENDING_PREFIX = "tidelog-remote-deletions/"
TOPIC_DELETED = "topic deleted"
REMOTE_DISABLED = "remote.storage.enable turned off with remote.log.delete.on.disable=true"
_REASONS = (TOPIC_DELETED, REMOTE_DISABLED)
_VERSION = 0


@dataclass(frozen=True, slots=True)
class PendingDeletion:
    """The remote data of ``partitions`` partitions of a topic (by name and id) that must go, and why."""

    topic: str
    topic_id: str
    partitions: int
    reason: str

    @property
    def key(self) -> str:
        return f"{PENDING_PREFIX}{self.topic}-{self.topic_id}.json"

    def partition(self, number: int) -> TopicIdPartition:
        return TopicIdPartition(self.topic_id, TopicPartition(self.topic, number))

    def encode(self) -> bytes:
        return json.dumps({"version": _VERSION, "topic": self.topic, "topic_id": self.topic_id,
                           "partitions": self.partitions, "reason": self.reason}, sort_keys=True).encode()

    @classmethod
    def decode(cls, data: bytes, *, key: str, uri: str) -> PendingDeletion:
        """Raises :class:`RemoteMetadataError` naming ``key`` for anything but a version-0 object of this shape."""
        try:
            content: Any = json.loads(data)
            if not isinstance(content, dict) or content.get("version") != _VERSION:
                raise ValueError(f"unknown version {content.get('version') if isinstance(content, dict) else None!r}")
            found = cls(str(content["topic"]), str(content["topic_id"]), int(content["partitions"]),
                        str(content["reason"]))
            found.partition(0)  # checks the topic id
        except (ValueError, KeyError, TypeError) as e:
            raise RemoteMetadataError(f"pending remote deletion object unreadable: {e}", key=key, uri=uri) from e
        if found.reason not in _REASONS or found.partitions < 0:
            raise RemoteMetadataError(f"pending remote deletion object has bad content: {content}", key=key, uri=uri)
        return found


def record_pending(store: RemoteStore, pending: PendingDeletion) -> None:
    """Write the pending-deletion object (one PUT). Raises ``RemoteStorageError``."""
    store.put(pending.key, pending.encode())


def list_pending(store: RemoteStore) -> list[PendingDeletion]:
    """Every pending deletion the store holds: one LIST and a GET per object. An unreadable object
    is logged and skipped (never guessed at); a store failure raises ``RemoteStorageError``."""
    found = []
    for info in store.list(PENDING_PREFIX):
        try:
            found.append(PendingDeletion.decode(store.get(info.key), key=info.key, uri=store.uri))
        except RemoteMetadataError as e:
            logger.error("skipping a pending remote deletion: %s", e)
    return found


def delete_partition_data(store: RemoteStore, tip: TopicIdPartition,
                          metadata: RemotePartitionMetadata | None = None) -> None:
    """Delete every remote object of ``tip`` (module docstring). With ``metadata`` (the writer's
    cached copy), readers first stop seeing its segments (one event), under its ``task_lock``, and
    the copy is retired after: any later change through it fails, so a task that held it writes
    nothing into the emptied prefix. Costs the event PUT, then one LIST and a DELETE per object.
    Raises ``RemoteStorageError``; calling it again finishes the job."""
    if metadata is None:
        store.delete_prefix(partition_prefix(tip))
        return
    with metadata.task_lock:
        finished = metadata.finished_segments()
        if finished:
            metadata.swap(finished, [])
        store.delete_prefix(partition_prefix(tip))
        metadata.store = _RetiredStore(metadata.store, str(tip.topic_partition))
    logger.info("deleted the remote data of %s (%d segment(s))", tip.topic_partition, len(finished))


def finish_pending(store: RemoteStore, pending: PendingDeletion,
                   metadata_of: Callable[[TopicIdPartition], RemotePartitionMetadata | None]) -> None:
    """Delete every partition's data (:func:`delete_partition_data`, with ``metadata_of``'s cached
    metadata or None), then the pending object. Raises the first ``RemoteStorageError``."""
    for number in range(pending.partitions):
        tip = pending.partition(number)
        delete_partition_data(store, tip, metadata_of(tip))
    store.delete(pending.key)
    logger.info("remote data of topic %s (%s) deleted: %s", pending.topic, pending.topic_id, pending.reason)


class _RetiredStore:
    """The store of a partition's metadata whose remote data was deleted: reads pass through,
    every write fails (a stale holder must not write into the emptied prefix)."""

    def __init__(self, inner: RemoteStore, partition: str) -> None:
        self._inner, self.uri, self._partition = inner, inner.uri, partition

    def _refuse(self, operation: str, key: str) -> None:
        raise RemoteStorageError("the partition's remote data was deleted: this metadata is retired",
                                 operation=operation, key=key, partition=self._partition, uri=self.uri)

    def put(self, key: str, data: Any) -> None:
        self._refuse("put", key)

    def put_file(self, key: str, path: Any, **kwargs: Any) -> None:
        self._refuse("put_file", key)

    def delete(self, key: str) -> None:
        self._refuse("delete", key)

    def delete_prefix(self, prefix: str) -> None:
        self._refuse("delete_prefix", prefix)

    def get(self, key: str) -> bytes:
        return self._inner.get(key)

    def get_range(self, key: str, start: int, length: int) -> bytes:
        return self._inner.get_range(key, start, length)

    def size(self, key: str) -> int:
        return self._inner.size(key)

    def list(self, prefix: str = "") -> list[Any]:
        return self._inner.list(prefix)
