"""Identity and shutdown files: ``partition.metadata``, ``meta.properties``, ``.kafka_cleanshutdown``.

``partition.metadata`` (partition dir; Kafka's ``PartitionMetadataFile``), exact bytes, UTF-8::

    version: 0\\n                           "version" ":" whitespace decimal int32 (>= 0 accepted)
    topic_id: <22 chars>                   "topic_id" ":" whitespace topic id; NO trailing newline

    Read: each line is split once on ``:\\s+``; the key must match; the all-zero id
    ``AAAAAAAAAAAAAAAAAAAAAA`` is invalid. Lines after the second are ignored.

Topic and directory ids are Kafka ``Uuid`` strings: the 16 bytes (most significant long first)
in URL-safe base64 without padding, always 22 characters.

``meta.properties`` (log dir root; Kafka's ``MetaProperties`` written by ``Properties.store``)::

    #\\n                                    empty comment
    #Thu Oct 24 12:00:00 UTC 2024\\n        java.util.Date.toString() of the write time (we write UTC)
    key=value\\n ...                       Java properties escaping, ISO-8859-1 with \\uXXXX escapes

    keys       version        0 (ZooKeeper era; the default when absent), 1 (KRaft), 2 (newer trunk)
               broker.id      v0 only, optional int32
               node.id        v1/v2, required int32
               cluster.id     required in v1, optional otherwise
               directory.id   optional Uuid string (required in v2)

    Keys are written sorted, as JDK 18+ ``Properties.store`` does (older JDKs used hash order;
    readers never depend on it). Unknown keys are ignored on read.

``.kafka_cleanshutdown`` (log dir root; Kafka's ``CleanShutdownFileHandler``)::

    {"version":0,"brokerEpoch":<int64>}    compact JSON, no newline; unknown fields ignored on read

    Only its existence means "clean shutdown": LogManager deletes it at start-up, before loading
    logs (we fsync the dir after that delete). Kafka versions before KIP-966's broker epoch
    (3.7, unverified) wrote it empty: an empty marker reads as broker epoch -1. Kafka writes it in
    place; we write it atomically (tmp + rename) so a crash can never leave a torn marker that
    would still count as clean.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from tidelog.errors import CheckpointError, ConfigError, InvalidUuidError, StorageError
from tidelog.records.varint import INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN
from tidelog.storage.atomic import fsync_dir, read_file, write_atomically
from tidelog.storage.checkpoints import parse_java_int, split_lines
from tidelog.storage import fileops
from tidelog.storage.files import META_PROPERTIES_FILE, meta_properties_file
from tidelog.storage.properties import format_properties, parse_properties

PARTITION_METADATA_FILE = "partition.metadata"
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"

PARTITION_METADATA_VERSION = 0
CLEAN_SHUTDOWN_VERSION = 0
ZERO_TOPIC_ID = "AAAAAAAAAAAAAAAAAAAAAA"  # Kafka Uuid.ZERO_UUID
_ONE_TOPIC_ID = "AAAAAAAAAAAAAAAAAAAAAQ"  # Kafka Uuid.ONE_UUID = METADATA_TOPIC_ID, reserved

_KEY_SEPARATOR = re.compile(r":[ \t\n\x0b\f\r]+")
_BASE64_URL = re.compile(r"[A-Za-z0-9_-]*={0,2}")


# --- Kafka Uuid strings --------------------------------------------------------------------

def uuid_to_topic_id(value: uuid.UUID) -> str:
    """Kafka's ``Uuid.toString()``: URL-safe base64 of the 16 bytes, no padding (22 chars)."""
    return base64.urlsafe_b64encode(value.bytes).rstrip(b"=").decode("ascii")


def topic_id_to_uuid(text: str) -> uuid.UUID:
    """Kafka's ``Uuid.fromString``; raises :class:`InvalidUuidError` unless it decodes to 16 bytes."""
    if len(text) > 24 or not _BASE64_URL.fullmatch(text):
        raise InvalidUuidError("not a URL-safe base64 Kafka Uuid", uuid=text)
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError) as e:
        raise InvalidUuidError("not a URL-safe base64 Kafka Uuid", uuid=text) from e
    if len(raw) != 16:
        raise InvalidUuidError(f"decodes to {len(raw)} bytes, a Kafka Uuid has 16", uuid=text)
    return uuid.UUID(bytes=raw)


def new_topic_id() -> str:
    """A random id as Kafka's ``Uuid.randomUuid``: never the reserved zero/one ids, never starting with '-'."""
    while True:
        candidate = uuid_to_topic_id(uuid.uuid4())
        if candidate not in (ZERO_TOPIC_ID, _ONE_TOPIC_ID) and not candidate.startswith("-"):
            return candidate


# --- partition.metadata --------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class PartitionMetadata:
    version: int
    topic_id: str

    def encode(self) -> bytes:
        """The exact file content; validates the topic id first."""
        _check_topic_id(self.topic_id)
        return f"version: {self.version}\ntopic_id: {self.topic_id}".encode("utf-8")


def decode_partition_metadata(data: bytes, path: Path | None = None) -> PartitionMetadata:
    """Parse ``partition.metadata`` bytes; raises :class:`CheckpointError` naming path and line."""
    try:
        lines = split_lines(data.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise CheckpointError("partition metadata is not valid UTF-8", path=path, position=e.start) from e
    version_text = _metadata_value(lines, 0, "version", path)
    version = parse_java_int(version_text, INT32_MIN, INT32_MAX)
    if version is None:
        raise CheckpointError("malformed version: expected 'version: <int>'", path=path, line_number=1, line=lines[0])
    if version < PARTITION_METADATA_VERSION:
        raise CheckpointError(f"unrecognized partition metadata version {version}", path=path, line_number=1)
    topic_id = _metadata_value(lines, 1, "topic_id", path)
    try:
        _check_topic_id(topic_id)
    except InvalidUuidError as e:
        raise CheckpointError(f"invalid topic id: {e.message}", path=path, line_number=2, line=lines[1]) from e
    return PartitionMetadata(version, topic_id)


def _metadata_value(lines: list[str], index: int, key: str, path: Path | None) -> str:
    if index >= len(lines):
        raise CheckpointError(f"missing line '{key}: <value>'", path=path, line_number=index + 1)
    parts = _KEY_SEPARATOR.split(lines[index], maxsplit=1)
    if len(parts) != 2 or parts[0] != key:
        raise CheckpointError(
            f"malformed line: expected '{key}: <value>'", path=path, line_number=index + 1, line=lines[index]
        )
    return parts[1]


def _check_topic_id(topic_id: str) -> None:
    topic_id_to_uuid(topic_id)
    if topic_id == ZERO_TOPIC_ID:
        raise InvalidUuidError("the all-zero topic id is reserved", uuid=topic_id)


class PartitionMetadataFile:
    """``<partition dir>/partition.metadata``: the topic id of the partition, written once known."""

    def __init__(self, dir: Path) -> None:
        self.path = dir / PARTITION_METADATA_FILE

    def exists(self) -> bool:
        return self.path.is_file()

    def write(self, topic_id: str) -> None:
        """Write version 0 with ``topic_id`` atomically. Two fsyncs."""
        write_atomically(self.path, PartitionMetadata(PARTITION_METADATA_VERSION, topic_id).encode())

    def read(self) -> PartitionMetadata:
        return decode_partition_metadata(read_file(self.path, "partition metadata"), self.path)

    def delete(self) -> None:
        try:
            fileops.unlink(self.path, missing_ok=True)
        except OSError as e:
            raise StorageError("cannot delete partition metadata", path=self.path, operation="delete") from e


# --- meta.properties -----------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class MetaProperties:
    """Identity of a log dir. ``node_id`` is ``broker.id`` in version 0 and ``node.id`` after."""

    version: int
    node_id: int | None = None
    cluster_id: str | None = None
    directory_id: str | None = None

    def __post_init__(self) -> None:
        problem = _meta_problem(self)
        if problem is not None:
            raise CheckpointError(f"invalid meta.properties: {problem}", version=self.version)

    @classmethod
    def from_properties(cls, props: Mapping[str, str], path: Path | None = None) -> MetaProperties:
        """Build from parsed properties; raises :class:`CheckpointError` naming the file and key."""
        version = _meta_int(props, "version", path, default="0")
        if version not in (0, 1, 2):
            raise CheckpointError(f"unknown meta.properties version {version}", path=path)
        id_key = "broker.id" if version == 0 else "node.id"
        node_id = _meta_int(props, id_key, path) if id_key in props or version != 0 else None
        try:
            return cls(version, node_id, props.get("cluster.id"), props.get("directory.id"))
        except CheckpointError as e:
            raise CheckpointError(e.message, path=path) from e

    def to_properties(self) -> dict[str, str]:
        props = {"version": str(self.version)}
        if self.node_id is not None:
            props["broker.id" if self.version == 0 else "node.id"] = str(self.node_id)
        if self.cluster_id is not None:
            props["cluster.id"] = self.cluster_id
        if self.directory_id is not None:
            props["directory.id"] = self.directory_id
        return props


def _meta_problem(meta: MetaProperties) -> str | None:
    if meta.version not in (0, 1, 2):
        return f"unknown version {meta.version}"
    if meta.version >= 1 and meta.node_id is None:
        return f"version {meta.version} requires node.id"
    if meta.version == 1 and meta.cluster_id is None:
        return "version 1 requires cluster.id"
    if meta.version == 2 and meta.directory_id is None:
        return "version 2 requires directory.id"
    if meta.node_id is not None and not INT32_MIN <= meta.node_id <= INT32_MAX:
        return f"node id {meta.node_id} does not fit in an int32"
    return _directory_id_problem(meta.directory_id) if meta.directory_id is not None else None


def _directory_id_problem(text: str) -> str | None:
    try:
        topic_id_to_uuid(text)
    except InvalidUuidError as e:
        return f"directory.id is not a Kafka Uuid: {e.message}, got {text!r}"
    return None


def _meta_int(props: Mapping[str, str], key: str, path: Path | None, default: str | None = None) -> int:
    text = props.get(key, default)
    if text is None:
        raise CheckpointError(f"required property {key} is missing", path=path)
    value = parse_java_int(text.strip(), INT32_MIN, INT32_MAX)
    if value is None:
        raise CheckpointError(f"property {key} is not a base-10 int32", path=path, value=text)
    return value


def read_meta_properties(log_dir: Path) -> MetaProperties | None:
    """``<log_dir>/meta.properties``, or None when the file does not exist."""
    path = meta_properties_file(log_dir)
    if not path.exists():
        return None
    try:
        props = parse_properties(read_file(path, META_PROPERTIES_FILE).decode("latin-1"))
    except ConfigError as e:
        raise CheckpointError(e.message, path=path, **e.context) from e
    return MetaProperties.from_properties(props, path)


def write_meta_properties(log_dir: Path, meta: MetaProperties, now: float | None = None) -> None:
    """Write ``<log_dir>/meta.properties`` atomically; ``now`` (seconds) dates the comment line."""
    date = _java_date(time.time() if now is None else now)
    text = format_properties(meta.to_properties(), comments=("", date))
    write_atomically(meta_properties_file(log_dir), text.encode("latin-1"))


_DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


def _java_date(seconds: float) -> str:
    """``java.util.Date.toString()`` in UTC, locale-independent: ``Thu Oct 24 12:00:00 UTC 2024``."""
    t = time.gmtime(seconds)
    return (
        f"{_DAYS[t.tm_wday]} {_MONTHS[t.tm_mon - 1]} {t.tm_mday:02d} "
        f"{t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d} UTC {t.tm_year}"
    )


# --- .kafka_cleanshutdown ------------------------------------------------------------------

def clean_shutdown_file(log_dir: Path) -> Path:
    return log_dir / CLEAN_SHUTDOWN_FILE


def write_clean_shutdown(log_dir: Path, broker_epoch: int) -> None:
    """Write the marker ``{"version":0,"brokerEpoch":N}`` atomically and durably.

    A broker epoch outside int64 is a caller's bug (it comes from the broker's registration): ValueError.
    """
    if not INT64_MIN <= broker_epoch <= INT64_MAX:
        raise ValueError(f"broker epoch {broker_epoch} does not fit in an int64")
    payload = json.dumps({"version": CLEAN_SHUTDOWN_VERSION, "brokerEpoch": broker_epoch}, separators=(",", ":"))
    write_atomically(clean_shutdown_file(log_dir), payload.encode("utf-8"))


def has_clean_shutdown(log_dir: Path) -> bool:
    """Whether the marker exists: the only thing that decides "clean shutdown"."""
    return clean_shutdown_file(log_dir).exists()


def read_clean_shutdown(log_dir: Path) -> int | None:
    """Broker epoch in the marker; None if there is no marker; -1 for an empty (pre-3.7) marker."""
    path = clean_shutdown_file(log_dir)
    if not path.exists():
        return None
    return decode_clean_shutdown(read_file(path, "clean shutdown marker"), path)


def decode_clean_shutdown(data: bytes, path: Path | None = None) -> int:
    if not data.strip():
        return -1
    try:
        content = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as e:  # RecursionError: nested too deep
        raise CheckpointError("clean shutdown marker is not JSON", path=path) from e
    epoch = content.get("brokerEpoch") if isinstance(content, dict) else None
    if not isinstance(epoch, int) or isinstance(epoch, bool) or not INT64_MIN <= epoch <= INT64_MAX:
        raise CheckpointError('clean shutdown marker lacks an int64 "brokerEpoch"', path=path, content=content)
    return epoch


def delete_clean_shutdown(log_dir: Path) -> None:
    """Remove the marker if present (start-up does this before loading logs, KAFKA-10471)."""
    path = clean_shutdown_file(log_dir)
    try:
        fileops.unlink(path, missing_ok=True)
    except OSError as e:
        raise StorageError("cannot delete clean shutdown marker", path=path, operation="delete") from e
    fsync_dir(log_dir)  # a crash while loading logs must not resurrect the marker
