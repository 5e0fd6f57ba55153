"""Typed errors of the remote tier, under :class:`tidelog.errors.TidelogError`.

A store error carries ``operation`` (``put``, ``get_range`` ...), ``key`` (the object key,
relative to the store's prefix), ``uri`` (the store's location without credentials) and
``cause`` (the underlying message); ``__cause__`` is the original exception. The kind of
failure is the class, so a caller decides by ``except`` clause: a missing object
(:class:`RemoteResourceNotFoundError`, Kafka's ``RemoteResourceNotFoundException``; its
subclass :class:`RemoteBucketNotFoundError` when the bucket itself is missing), refused
credentials (:class:`RemoteAccessDeniedError`), a store that cannot be reached
(:class:`RemoteStoreUnreachableError`), a store answering that it failed or is overloaded
(:class:`RemoteStoreServerError`: HTTP 5xx, throttling), anything else
(:class:`RemoteStorageError`). ``retriable`` says whether retrying the same call later may
succeed (true for the unreachable and server errors).

Metadata errors name the metadata object's key; transition errors name the segment.
"""

from __future__ import annotations

from typing import Any, TypeVar

from tidelog.errors import TidelogError

E = TypeVar("E", bound=TidelogError)


class RemoteStorageError(TidelogError):
    """A remote store operation failed (Kafka's ``RemoteStorageException``). Context:
    ``operation``, ``key``, ``uri``, ``cause``."""

    retriable = False


class RemoteResourceNotFoundError(RemoteStorageError):
    """The object (or the bucket holding it) does not exist."""


class RemoteBucketNotFoundError(RemoteResourceNotFoundError):
    """The bucket (container) named by ``remote.log.storage.uri`` does not exist: nothing under
    it can be read or written until it is created."""


class RemoteAccessDeniedError(RemoteStorageError):
    """The store refused the credentials or the permission (HTTP 403, EACCES)."""


class RemoteStoreUnreachableError(RemoteStorageError):
    """The store could not be reached: connection refused, a timeout, no route to the host."""

    retriable = True


class RemoteStoreServerError(RemoteStorageError):
    """The store answered that it failed or is overloaded (HTTP 5xx, SlowDown, throttling)."""

    retriable = True


class RemoteMetadataError(RemoteStorageError):
    """A remote metadata object that does not parse, breaks the format, or is missing from the
    sequence (a gap). Context: ``key`` (the metadata object), ``uri``, and ``sequence`` when
    one is missing."""


class RemoteMetadataVersionError(RemoteMetadataError):
    """A remote metadata object written by a newer tidelog (its ``version`` is above the
    highest this one reads). Context: ``key``, ``version``, ``supported``."""


class RemoteSegmentStateError(TidelogError):
    """A remote segment state change that Kafka's ``RemoteLogSegmentState.isValidTransition``
    forbids, or one naming a segment the partition does not have. Context: ``segment_id``,
    ``from_state``, ``to_state``."""


def with_context(error: E, message: str | None = None, **context: Any) -> E:
    """A copy of ``error`` (same class, so same ``retriable``) with ``context`` added (existing
    keys kept) and, when given, another message; the caller raises it ``from error``."""
    merged = {**context, **error.context}
    return type(error)(error.message if message is None else message, **merged)
