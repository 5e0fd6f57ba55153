"""The copy of a topic's registry entry kept in each of its partition dirs (``tidelog-topic.json``).

The topic registry (:mod:`.topics`) is one file per log dir; with one log dir, one damaged or
deleted file would leave nothing saying that a topic is compacted or keeps its records forever,
and a broker falling back to the defaults would delete them. So every partition dir also holds
its topic's entry, as Kafka keeps the topic id next to each partition in ``partition.metadata``
(a Kafka broker loading the dir ignores the file: its loader reads only segment, index and
snapshot suffixes, the checkpoint and ``partition.metadata``)::

    {"version": 0, "epoch": 12, "topic": "orders", "topic_id": "<22-char Kafka Uuid>",
     "partitions": 3, "configs": {"cleanup.policy": "compact"}}
    (+ "configs_unconfirmed": true while nobody vouched for the configs)

``epoch`` is the registry epoch that last changed the entry. The registry is written first (it
stays the commit point), then the copies; at start-up the newer of a topic's registry entry and
its partitions' copies wins (a copy newer than the registry means the registry was lost or is
stale), and stale copies are rewritten. Each copy is written atomically.

Checking a copy costs one small read and a byte comparison (the expected bytes are the same for
every partition of a topic); only a copy that differs is parsed.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import MappingProxyType

from tidelog.errors import CheckpointError
from tidelog.manager.topics import REGISTRY_VERSION, TopicRecord, decode_topic_entry
from tidelog.storage.atomic import read_file, write_atomically

TOPIC_COPY_FILE = "tidelog-topic.json"


def topic_copy_file(partition_dir: Path) -> Path:
    return partition_dir / TOPIC_COPY_FILE


def encode_topic_copy(record: TopicRecord) -> bytes:
    content: dict[str, object] = {"version": REGISTRY_VERSION, "epoch": record.epoch, "topic": record.name,
                                  "topic_id": record.topic_id, "partitions": record.partitions,
                                  "configs": dict(sorted(record.configs.items()))}
    if record.unconfirmed:
        content["configs_unconfirmed"] = True
    return json.dumps(content, separators=(",", ":")).encode("utf-8")


def decode_topic_copy(data: bytes, path: Path) -> TopicRecord:
    """Parse one copy; :class:`CheckpointError` naming the file and what is wrong."""
    try:
        content = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise CheckpointError(f"topic copy is not JSON: {e}", path=path) from e
    if not isinstance(content, dict) or content.get("version") != REGISTRY_VERSION:
        raise CheckpointError(f"topic copy has an unknown version (expected {REGISTRY_VERSION})", path=path)
    name, epoch = content.get("topic"), content.get("epoch")
    if not isinstance(name, str) or not isinstance(epoch, int) or isinstance(epoch, bool):
        raise CheckpointError("topic copy lacks a topic name or an int epoch", path=path)
    record = decode_topic_entry(name, content, path, epoch)
    return record.replace(assignments=MappingProxyType({}))


def copy_matches(partition_dir: Path, expected: bytes) -> bool:
    """Whether the copy holds exactly ``expected``: one read, no parse, no ``Path`` built (start-up
    checks every partition)."""
    try:
        with open(os.path.join(partition_dir, TOPIC_COPY_FILE), "rb") as f:
            return f.read(len(expected) + 1) == expected
    except OSError:
        return False


def read_topic_copy(partition_dir: Path) -> TopicRecord | None:
    """The copy in ``partition_dir``; None when there is none. Raises :class:`CheckpointError`
    (damaged) or :class:`StorageError` (unreadable)."""
    path = topic_copy_file(partition_dir)
    if not path.exists():
        return None
    return decode_topic_copy(read_file(path, "topic copy"), path)


def write_topic_copy(partition_dir: Path, record: TopicRecord) -> None:
    """Replace the copy atomically and durably (two fsyncs). :class:`StorageError` on a disk fault."""
    write_atomically(topic_copy_file(partition_dir), encode_topic_copy(record))

