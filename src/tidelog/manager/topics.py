"""Topic names and the topic registry: which topics exist, their ids, partition counts and overrides.

A Kafka broker learns its topics from the cluster metadata (the KRaft log), not from its log dirs.
tidelog has no controller, so it keeps that metadata itself, in one small JSON file at the root of
every log dir (``tidelog-topics.json``; a Kafka broker ignores files at the root, and only
*directories* there must be partition dirs)::

    {"version": 0, "epoch": 7,
     "topics": {"orders": {"topic_id": "<22-char Kafka Uuid>", "partitions": 3,
                           "configs": {"retention.ms": "60000"},
                           "assignments": {"0": "<directory.id>", "1": ..., "2": ...},
                           "epoch": 5}},          (the registry epoch that last changed the entry)
     "deleted_topic_ids": ["<Uuid>", ...]}

    A topic entry may also hold ``"configs_unconfirmed": true`` (below). Entries without an
    ``epoch`` (older files) take the registry's.

Why a registry and not just the partition dirs: it is the *commit point* of every topic change.
Creating a topic or adding partitions writes the registry first, then the partition dirs; a crash
in between is completed at the next start-up (missing dirs are created). Deleting a topic records
its id under ``deleted_topic_ids`` before its dirs are renamed ``-delete``; a crash in between is
completed at start-up (dirs whose ``partition.metadata`` carries a deleted id are renamed then),
so a deleted topic never comes back.

Every change is written to every log dir, each copy atomically (write, fsync, rename, fsync dir),
with ``epoch`` one higher than before; at start-up the copy with the highest epoch wins, so a crash
between two dirs' writes, or a dir that was offline during a change, resolves to the newest state.

A copy is never the only record of a topic's configs: each partition dir also holds its topic's
entry (:mod:`.topic_copies`), the newer of the two winning at start-up. A registry copy that does
not parse is renamed aside (``tidelog-topics.json.damaged-<ms>``), never overwritten, and the
registry is rewritten with an epoch above every epoch still readable (the damaged copy's, salvaged
from its first bytes, and the partition copies'), never a lower one. A copy whose read fails on
the disk (EIO) is no damage: it is left as it is and its log dir goes offline until it reads.

Partition dirs found on disk that neither the registry nor a partition copy knows (a data dir
written by Kafka, or both lost) are adopted: with the topic id and overrides Kafka's KRaft
metadata log gives them when it is there (:mod:`.kraft_metadata`), else Kafka's internal topics
with the configs Kafka creates them with, and any other with the defaults marked
``configs_unconfirmed``: its retention and cleaning are paused, loudly, until an operator runs
``tidelog topics confirm-configs`` (defaults nobody vouched for must never delete data).

``assignments`` names the log dir (its ``directory.id`` from ``meta.properties``) of each partition,
so that a partition whose dir is missing is recreated only when its log dir is open (an interrupted
create), and is reported as offline, never recreated empty elsewhere, when its log dir was left out
of ``log.dirs`` for one start.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from tidelog.errors import CheckpointError, InvalidTopicError, StorageError
from tidelog.records.varint import INT32_MAX
from tidelog.storage import fileops
from tidelog.storage.atomic import fsync_dir, read_file, write_atomically

log = logging.getLogger(__name__)

REGISTRY_FILE = "tidelog-topics.json"
REGISTRY_VERSION = 0
DAMAGED_SUFFIX = ".damaged-"
MAX_TOPIC_NAME_LENGTH = 249
_LEGAL_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]+")


# --- names ----------------------------------------------------------------------------------

def validate_topic_name(name: str) -> None:
    """Kafka's ``Topic.validate``: raise :class:`InvalidTopicError` with Kafka's wording."""
    if not name:
        raise InvalidTopicError("Topic name is illegal, it can't be empty", topic=name)
    if name in (".", ".."):
        raise InvalidTopicError('Topic name cannot be "." or ".."', topic=name)
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        raise InvalidTopicError(
            f"Topic name is illegal, it can't be longer than {MAX_TOPIC_NAME_LENGTH} characters, topic name: {name}",
            topic=name,
        )
    if not _LEGAL_TOPIC_NAME.fullmatch(name):
        raise InvalidTopicError(
            f'Topic name "{name}" is illegal, it contains a character other than ASCII alphanumerics, '
            "'.', '_' and '-'", topic=name,
        )


def has_collision_chars(name: str) -> bool:
    """Kafka metric names turn ``.`` into ``_``, so names differing only there collide."""
    return "." in name or "_" in name


def unify_collision_chars(name: str) -> str:
    return name.replace(".", "_")


COLLISION_WARNING = (
    "WARNING: Due to limitations in metric names, topics with a period ('.') or underscore ('_') "
    "could collide. To avoid issues it is best to use either, but not both."
)


def check_collision(name: str, existing: Sequence[str]) -> None:
    """Kafka refuses a topic whose name equals an existing one after ``.`` → ``_``."""
    unified = unify_collision_chars(name)
    for other in existing:
        if other != name and unify_collision_chars(other) == unified:
            raise InvalidTopicError(f"Topic '{name}' collides with existing topic: {other}", topic=name)


# --- registry -------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class TopicRecord:
    """What the registry knows of one topic. ``configs`` are the topic-level overrides as strings."""

    name: str
    topic_id: str
    partitions: int
    configs: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    assignments: Mapping[int, str] = field(default_factory=lambda: MappingProxyType({}))
    epoch: int = 0  # the registry epoch that last changed this entry (stamped by the manager's commit)
    unconfirmed: bool = False  # configs nobody vouches for: retention and cleaning hold until confirmed

    def to_json(self) -> dict[str, object]:
        content: dict[str, object] = {
            "topic_id": self.topic_id, "partitions": self.partitions, "configs": dict(self.configs),
            "assignments": {str(p): d for p, d in sorted(self.assignments.items())}, "epoch": self.epoch}
        if self.unconfirmed:
            content["configs_unconfirmed"] = True
        return content

    def same_content(self, other: TopicRecord) -> bool:
        """Equal but for the epoch stamp."""
        return self == other.replace(epoch=self.epoch)

    def replace(self, **changes: object) -> TopicRecord:
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class RegistryState:
    epoch: int = 0
    topics: Mapping[str, TopicRecord] = field(default_factory=lambda: MappingProxyType({}))
    deleted_topic_ids: frozenset[str] = frozenset()

    def encode(self) -> bytes:
        content = {
            "version": REGISTRY_VERSION,
            "epoch": self.epoch,
            "topics": {name: self.topics[name].to_json() for name in sorted(self.topics)},
            "deleted_topic_ids": sorted(self.deleted_topic_ids),
        }
        return json.dumps(content, indent=1).encode("utf-8")


def decode_registry(data: bytes, path: Path) -> RegistryState:
    """Parse one registry file; :class:`CheckpointError` naming the file and what is wrong."""
    try:
        content = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as e:  # RecursionError: nested too deep
        raise CheckpointError(f"topic registry is not JSON: {e}", path=path) from e
    if not isinstance(content, dict) or content.get("version") != REGISTRY_VERSION:
        raise CheckpointError(f"topic registry has an unknown version (expected {REGISTRY_VERSION})", path=path)
    epoch = content.get("epoch")
    topics = content.get("topics")
    deleted = content.get("deleted_topic_ids", [])
    if not isinstance(epoch, int) or not isinstance(topics, dict) or not isinstance(deleted, list):
        raise CheckpointError("topic registry lacks an int epoch, a topics object or a deleted_topic_ids list", path=path)
    records = {name: decode_topic_entry(name, entry, path, epoch) for name, entry in topics.items()}
    return RegistryState(epoch, MappingProxyType(records), frozenset(str(d) for d in deleted))


def decode_topic_entry(name: str, entry: object, path: Path, registry_epoch: int) -> TopicRecord:
    try:
        validate_topic_name(name)  # a name is a path component: "../x" would leave the log dir
    except InvalidTopicError as e:
        raise CheckpointError(f"topic registry names an illegal topic: {e.message}", path=path, topic=name) from e
    if not isinstance(entry, dict):
        raise CheckpointError("topic entry is not an object", path=path, topic=name)
    topic_id, partitions, configs = entry.get("topic_id"), entry.get("partitions"), entry.get("configs", {})
    assignments = entry.get("assignments", {})
    if (not isinstance(topic_id, str) or not isinstance(partitions, int) or not 1 <= partitions <= INT32_MAX
            or not isinstance(configs, dict) or not isinstance(assignments, dict)):
        raise CheckpointError("topic entry needs a topic_id string, partitions in [1, 2^31-1], and configs and "
                              "assignments objects", path=path, topic=name)
    try:
        placed = {int(p): str(d) for p, d in assignments.items()}
    except ValueError as e:
        raise CheckpointError("assignments keys must be partition numbers", path=path, topic=name) from e
    epoch = entry.get("epoch", registry_epoch)  # absent in copies written before per-topic epochs
    unconfirmed = entry.get("configs_unconfirmed", False)
    if not isinstance(epoch, int) or isinstance(epoch, bool) or not isinstance(unconfirmed, bool):
        raise CheckpointError("topic entry's epoch must be an int and configs_unconfirmed a bool",
                              path=path, topic=name)
    return TopicRecord(name, topic_id, partitions, MappingProxyType({str(k): str(v) for k, v in configs.items()}),
                       MappingProxyType(placed), epoch, unconfirmed)


def registry_file(log_dir: Path) -> Path:
    return log_dir / REGISTRY_FILE


@dataclass(frozen=True, slots=True)
class RegistryRead:
    """The newest registry copy, and the dirs whose copy is missing, unreadable or older (with why),
    which the manager rewrites.

    ``damaged``: the copies that do not parse and may hold more than ``state`` (their epoch,
    salvaged from the bytes when it can be, is not lower than the newest readable one's), with the
    epoch salvaged (None: none could be). ``floor_epoch``: the highest epoch any copy shows,
    readable or salvaged; the next registry written must be above it. ``unreadable``: the copies
    whose read failed on the disk (EIO ...), with the error: nothing is known of them, not even
    that they are damaged, so they are neither stale nor damaged (their dir must not be written
    until they read)."""

    state: RegistryState
    stale: Mapping[Path, str]
    damaged: Mapping[Path, int | None] = field(default_factory=lambda: MappingProxyType({}))
    floor_epoch: int = 0
    unreadable: Mapping[Path, StorageError] = field(default_factory=lambda: MappingProxyType({}))


def read_newest_registry(log_dirs: Sequence[Path]) -> RegistryRead:
    """The registry copy with the highest epoch among ``log_dirs`` (empty if none exists)."""
    copies: dict[Path, RegistryState] = {}
    stale: dict[Path, str] = {}
    salvaged: dict[Path, int | None] = {}
    unreadable: dict[Path, StorageError] = {}
    for log_dir in log_dirs:
        path = registry_file(log_dir)
        if not path.exists():
            stale[log_dir] = "missing"
            continue
        try:
            data = read_file(path, "topic registry")
        except StorageError as e:  # a disk fault, not damage: the copy may be whole
            log.warning("cannot read the topic registry: %s", e)
            unreadable[log_dir] = e
            continue
        try:
            copies[log_dir] = decode_registry(data, path)
        except CheckpointError as e:
            log.warning("unreadable topic registry: %s", e)
            stale[log_dir] = str(e)
            salvaged[log_dir] = salvage_epoch(data)
    newest = max(copies.values(), key=lambda state: state.epoch, default=RegistryState())
    for log_dir, state in copies.items():
        if state.epoch != newest.epoch:
            stale[log_dir] = f"epoch {state.epoch} is older than {newest.epoch}"
    damaged = {d: e for d, e in salvaged.items() if not copies or e is None or e >= newest.epoch}
    floor = max([newest.epoch, *(e for e in salvaged.values() if e is not None)])
    return RegistryRead(newest, MappingProxyType(stale), MappingProxyType(damaged), floor, MappingProxyType(unreadable))


_EPOCH = re.compile(rb'"epoch":\s*(\d{1,18})[,}\s]')


def salvage_epoch(data: bytes) -> int | None:
    """The registry epoch of a damaged copy, read from its bytes (it is the second key, so a copy
    cut short keeps it), or None."""
    found = _EPOCH.search(data[:256])
    return int(found.group(1)) if found else None


def keep_damaged_registry(log_dir: Path, now_ms: int) -> Path:
    """Rename an unreadable registry copy aside (``tidelog-topics.json.damaged-<ms>``, a file
    Kafka ignores) so that rewriting the registry never destroys what an operator may recover."""
    path = registry_file(log_dir)
    target = path.with_name(f"{REGISTRY_FILE}{DAMAGED_SUFFIX}{now_ms}")
    try:
        fileops.rename(path, target)
        fsync_dir(log_dir)
    except OSError as e:
        raise StorageError("cannot keep the damaged topic registry aside", path=path, operation="rename") from e
    return target


def write_registry(log_dirs: Sequence[Path], state: RegistryState) -> None:
    """Write ``state`` to every log dir, each copy atomically and durably."""
    data = state.encode()
    for log_dir in log_dirs:
        write_atomically(registry_file(log_dir), data)
