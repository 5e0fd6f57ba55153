"""The JSON objects of a partition's remote metadata log: events and snapshots.

Kafka keeps remote segment metadata as records of the ``__remote_log_metadata`` topic
(``RemoteLogSegmentMetadataRecord``, ``...UpdateRecord``, ``...SnapshotRecord``); tidelog keeps
the same facts as small JSON objects in the store itself, so that anything able to list the
bucket reads them without a broker. Every object is one JSON document (UTF-8, sorted keys)::

    event     <20-digit sequence>.json
      {"version": 1, "sequence": n, "type": "segment", "segment": SEGMENT}     a new segment (COPY_SEGMENT_STARTED)
      {"version": 1, "sequence": n, "type": "update", "segment_id": UUID,      a state change
       "state": 0..3, "event_timestamp_ms": t, "broker_id": b}
      {"version": 1, "sequence": n, "type": "swap", "removed": [UUID...],      removed -> DELETE_SEGMENT_STARTED and
       "added": [SEGMENT...], "event_timestamp_ms": t, "broker_id": b}          added -> COPY_SEGMENT_FINISHED, at once
    snapshot  <20-digit sequence>.snapshot.json
      {"version": 1, "sequence": n, "topic": s, "topic_id": UUID, "partition": p, "segments": [SEGMENT...]}
        the whole state after the events up to and including n
    SEGMENT = {"id": UUID, "start_offset", "end_offset", "max_timestamp_ms", "broker_id",
               "event_timestamp_ms", "segment_size_in_bytes", "segment_leader_epochs": [[epoch, first offset]...],
               "txn_idx_empty": bool, "state": 0..3}

A reader refuses a ``version`` above :data:`FORMAT_VERSION` (written by a newer tidelog) and
any object that does not parse as above; both errors name the object's key. Pure functions,
thread-safe.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from tidelog.remote.errors import RemoteMetadataError, RemoteMetadataVersionError
from tidelog.remote.metadata import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    TopicIdPartition,
)
from tidelog.storage.files import filename_prefix_from_offset
from tidelog.topic_partition import TopicPartition

FORMAT_VERSION = 1
EVENT_SUFFIX = ".json"
SNAPSHOT_SUFFIX = ".snapshot.json"


@dataclass(frozen=True, slots=True)
class SegmentAdded:
    """A new segment, in COPY_SEGMENT_STARTED (Kafka's ``RemoteLogSegmentMetadataRecord``)."""

    segment: RemoteLogSegmentMetadata


@dataclass(frozen=True, slots=True)
class SegmentUpdated:
    """A segment's state change (Kafka's ``RemoteLogSegmentMetadataUpdateRecord``)."""

    segment_id: str
    state: RemoteLogSegmentState
    event_timestamp_ms: int
    broker_id: int


@dataclass(frozen=True, slots=True)
class SegmentsSwapped:
    """In one step: ``removed`` (FINISHED) go to DELETE_SEGMENT_STARTED and ``added`` (uploaded,
    new or STARTED) become COPY_SEGMENT_FINISHED. No Kafka equivalent: compaction's switch."""

    removed: tuple[str, ...]
    added: tuple[RemoteLogSegmentMetadata, ...]
    event_timestamp_ms: int
    broker_id: int


Event = SegmentAdded | SegmentUpdated | SegmentsSwapped


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The partition's segments (not DELETE_SEGMENT_FINISHED ones) after event ``sequence``."""

    sequence: int
    topic_id_partition: TopicIdPartition
    segments: tuple[RemoteLogSegmentMetadata, ...]


def event_name(sequence: int) -> str:
    return filename_prefix_from_offset(sequence) + EVENT_SUFFIX


def snapshot_name(sequence: int) -> str:
    return filename_prefix_from_offset(sequence) + SNAPSHOT_SUFFIX


def parse_name(name: str) -> tuple[str, int] | None:
    """``("event" | "snapshot", sequence)`` for a metadata object's file name, ``None`` for any
    other name (left alone by readers)."""
    for kind, suffix in (("snapshot", SNAPSHOT_SUFFIX), ("event", EVENT_SUFFIX)):
        stem = name.removesuffix(suffix)
        if stem != name:
            return (kind, int(stem)) if len(stem) == 20 and stem.isdigit() else None
    return None


# --- encoding ---------------------------------------------------------------------------------

def encode_event(sequence: int, event: Event) -> bytes:
    body: dict[str, Any] = {"version": FORMAT_VERSION, "sequence": sequence}
    if isinstance(event, SegmentAdded):
        body.update(type="segment", segment=_segment_json(event.segment))
    elif isinstance(event, SegmentUpdated):
        body.update(type="update", segment_id=event.segment_id, state=int(event.state),
                    event_timestamp_ms=event.event_timestamp_ms, broker_id=event.broker_id)
    else:
        body.update(type="swap", removed=list(event.removed), added=[_segment_json(s) for s in event.added],
                    event_timestamp_ms=event.event_timestamp_ms, broker_id=event.broker_id)
    return orjson.dumps(body, option=orjson.OPT_SORT_KEYS)


def encode_snapshot(snapshot: Snapshot) -> bytes:
    tip = snapshot.topic_id_partition
    body = {"version": FORMAT_VERSION, "sequence": snapshot.sequence, "topic": tip.topic,
            "topic_id": tip.topic_id, "partition": tip.partition,
            "segments": [_segment_json(s) for s in snapshot.segments]}
    return orjson.dumps(body, option=orjson.OPT_SORT_KEYS)


def _segment_json(segment: RemoteLogSegmentMetadata) -> dict[str, Any]:
    return {"id": segment.id, "start_offset": segment.start_offset, "end_offset": segment.end_offset,
            "max_timestamp_ms": segment.max_timestamp_ms, "broker_id": segment.broker_id,
            "event_timestamp_ms": segment.event_timestamp_ms,
            "segment_size_in_bytes": segment.segment_size_in_bytes,
            "segment_leader_epochs": [list(pair) for pair in segment.segment_leader_epochs],
            "txn_idx_empty": segment.txn_idx_empty, "state": int(segment.state)}


# --- decoding ---------------------------------------------------------------------------------

def decode_event(data: bytes, *, key: str, uri: str, sequence: int, tip: TopicIdPartition) -> Event:
    """The event in ``data`` (the object ``key``, expected to hold ``sequence``); raises
    :class:`RemoteMetadataVersionError` or :class:`RemoteMetadataError` naming ``key``."""
    body = _document(data, key=key, uri=uri, sequence=sequence)
    try:
        return _event(body, tip)
    except (KeyError, TypeError, ValueError) as e:
        raise _corrupt(key, uri, e) from e


def decode_snapshot(data: bytes, *, key: str, uri: str, sequence: int, tip: TopicIdPartition) -> Snapshot:
    """The snapshot in ``data``; besides the errors of :func:`decode_event`, one naming a
    snapshot of another partition."""
    body = _document(data, key=key, uri=uri, sequence=sequence)
    try:
        found = TopicIdPartition(body["topic_id"], _topic_partition(body))
        segments = tuple(_segment(s, tip) for s in _list(body["segments"]))
    except (KeyError, TypeError, ValueError) as e:
        raise _corrupt(key, uri, e) from e
    if found != tip:
        raise RemoteMetadataError(f"snapshot of another partition ({found})", key=key, uri=uri, expected=str(tip))
    return Snapshot(sequence, tip, segments)


def _document(data: bytes, *, key: str, uri: str, sequence: int) -> dict[str, Any]:
    try:
        body = orjson.loads(data)
    except orjson.JSONDecodeError as e:
        raise _corrupt(key, uri, e) from e
    if not isinstance(body, dict) or type(body.get("version")) is not int or type(body.get("sequence")) is not int:
        raise RemoteMetadataError("corrupt remote metadata object: no integer version and sequence", key=key, uri=uri)
    if body["version"] > FORMAT_VERSION:
        raise RemoteMetadataVersionError(
            f"remote metadata written by a newer tidelog (format version {body['version']}, this one reads "
            f"up to {FORMAT_VERSION})", key=key, uri=uri, version=body["version"], supported=FORMAT_VERSION)
    if body["sequence"] != sequence:
        raise RemoteMetadataError(f"corrupt remote metadata object: holds sequence {body['sequence']}, named {sequence}",
                                  key=key, uri=uri)
    return body


def _corrupt(key: str, uri: str, cause: Exception) -> RemoteMetadataError:
    return RemoteMetadataError("corrupt remote metadata object", key=key, uri=uri, cause=f"{type(cause).__name__}: {cause}")


def _event(body: dict[str, Any], tip: TopicIdPartition) -> Event:
    kind = body["type"]
    if kind == "segment":
        return SegmentAdded(_segment(body["segment"], tip))
    stamp, broker = _int(body["event_timestamp_ms"]), _int(body["broker_id"])
    if kind == "update":
        return SegmentUpdated(_uuid(body["segment_id"], tip), RemoteLogSegmentState(_int(body["state"])), stamp, broker)
    if kind == "swap":
        removed = tuple(_uuid(u, tip) for u in _list(body["removed"]))
        added = tuple(_segment(s, tip) for s in _list(body["added"]))
        return SegmentsSwapped(removed, added, stamp, broker)
    raise ValueError(f"unknown event type {kind!r}")


def _segment(body: Any, tip: TopicIdPartition) -> RemoteLogSegmentMetadata:
    if not isinstance(body, dict):
        raise TypeError(f"a segment is an object, got {type(body).__name__}")
    epochs = tuple(_epoch_pair(p) for p in _list(body["segment_leader_epochs"]))
    if type(body["txn_idx_empty"]) is not bool:
        raise TypeError("txn_idx_empty must be a boolean")
    return RemoteLogSegmentMetadata(
        RemoteLogSegmentId(tip, _uuid(body["id"], tip)), _int(body["start_offset"]), _int(body["end_offset"]),
        _int(body["max_timestamp_ms"]), _int(body["broker_id"]), _int(body["event_timestamp_ms"]),
        _int(body["segment_size_in_bytes"]), epochs, body["txn_idx_empty"],
        RemoteLogSegmentState(_int(body["state"])))


def _epoch_pair(pair: Any) -> tuple[int, int]:
    if not isinstance(pair, list) or len(pair) != 2:
        raise TypeError(f"a leader epoch entry is [epoch, first offset], got {pair!r}")
    return _int(pair[0]), _int(pair[1])


def _topic_partition(body: dict[str, Any]) -> TopicPartition:
    if not isinstance(body["topic"], str):
        raise TypeError("topic must be a string")
    return TopicPartition(body["topic"], _int(body["partition"]))


def _uuid(value: Any, tip: TopicIdPartition) -> str:
    if not isinstance(value, str):
        raise TypeError(f"a segment id is a string, got {type(value).__name__}")
    return RemoteLogSegmentId(tip, value).id


def _int(value: Any) -> int:
    if type(value) is not int:
        raise TypeError(f"expected an integer, got {value!r}")
    return value


def _list(value: Any) -> list[Any]:
    if not isinstance(value, list):
        raise TypeError(f"expected a list, got {type(value).__name__}")
    return value
