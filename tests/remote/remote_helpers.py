"""Helpers shared by the remote tier's tests: segment metadata builders and a store wrapper
that fails chosen calls, as an outage or a lost answer would."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tidelog.remote.errors import RemoteResourceNotFoundError, RemoteStoreUnreachableError
from tidelog.remote.expiration import ExpirationPlan, carry_out, prepare_expiration
from tidelog.remote.metadata import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    TopicIdPartition,
)
from tidelog.remote.store import RemoteStore
from tidelog.topic_partition import TopicPartition

T0 = 1_700_000_000_000  # FakeClock's default start, ms
TOPIC_ID = "Zx3vYqS2QmK0b1c2d3e4fA"
TOPIC_ID_PARTITION = TopicIdPartition(TOPIC_ID, TopicPartition("orders", 2))


def segment_meta(start: int, end: int, *, tip: TopicIdPartition = TOPIC_ID_PARTITION, size: int = 1000,
                 epochs: dict[int, int] | None = None,
                 state: RemoteLogSegmentState = RemoteLogSegmentState.COPY_SEGMENT_STARTED,
                 segment_id: str | None = None) -> RemoteLogSegmentMetadata:
    """A segment of ``[start, end]`` with a fresh id (or ``segment_id``), one epoch from ``start``."""
    sid = RemoteLogSegmentId(tip, segment_id) if segment_id else RemoteLogSegmentId.generate(tip)
    return RemoteLogSegmentMetadata(sid, start, end, max_timestamp_ms=T0 + end, broker_id=1,
                                    event_timestamp_ms=T0, segment_size_in_bytes=size,
                                    segment_leader_epochs=tuple((epochs or {0: start}).items()), state=state)


class FlakyStore:
    """A :class:`RemoteStore` that delegates to ``inner`` but fails the calls ``fail`` picks.

    ``fail(operation, key)`` returns ``None`` to let the call through, ``"before"`` to fail it
    without doing it (an outage), ``"after"`` to do it and then fail (the answer was lost), or
    ``"missing"`` to answer that the object is not there (deleted behind the caller's back).
    """

    def __init__(self, inner: RemoteStore, fail: Callable[[str, str], str | None] | None = None) -> None:
        self.inner = inner
        self.uri = inner.uri
        self.fail = fail or (lambda operation, key: None)
        self.calls: list[tuple[str, str]] = []

    def _call(self, operation: str, key: str, run: Callable[[], Any]) -> Any:
        self.calls.append((operation, key))
        when = self.fail(operation, key)
        if when == "missing":
            raise RemoteResourceNotFoundError("injected missing object", operation=operation, key=key, uri=self.uri)
        if when == "before":
            raise RemoteStoreUnreachableError("injected outage", operation=operation, key=key, uri=self.uri)
        result = run()
        if when == "after":
            raise RemoteStoreUnreachableError("injected lost answer", operation=operation, key=key, uri=self.uri)
        return result

    def put(self, key: str, data: Any) -> None:
        self._call("put", key, lambda: self.inner.put(key, data))

    def put_file(self, key: str, path: Any, **options: Any) -> None:
        self._call("put_file", key, lambda: self.inner.put_file(key, path, **options))

    def get(self, key: str) -> bytes:
        return self._call("get", key, lambda: self.inner.get(key))

    def get_range(self, key: str, start: int, length: int) -> bytes:
        return self._call("get_range", key, lambda: self.inner.get_range(key, start, length))

    def size(self, key: str) -> int:
        return self._call("size", key, lambda: self.inner.size(key))

    def list(self, prefix: str = "") -> list[Any]:
        return self._call("list", prefix, lambda: self.inner.list(prefix))

    def delete(self, key: str) -> None:
        self._call("delete", key, lambda: self.inner.delete(key))

    def delete_prefix(self, prefix: str) -> None:
        self._call("delete_prefix", prefix, lambda: self.inner.delete_prefix(prefix))


def expire(store: RemoteStore, metadata: Any, log: Any, *, now_ms: int,
           checkpoint_log_start: Callable[[], None]) -> ExpirationPlan:
    """One partition's remote expiration composed as the manager's pass composes it
    (``manager/remote_retention.py``): :func:`prepare_expiration` under the partition's task lock,
    the log start checkpoint with the lock released (it must raise when it could not make the start
    durable: nothing is deleted then), then :func:`carry_out`."""
    plan = prepare_expiration(store, metadata, log, now_ms=now_ms)
    if plan.deletions:
        checkpoint_log_start()
        carry_out(store, metadata, plan)
    return plan
