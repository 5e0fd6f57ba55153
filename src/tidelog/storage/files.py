"""File and directory names inside a log dir: the one place that builds them.

Layout (Kafka's, see shared/reference/kafka-storage.md §1.1)::

    <log.dir>/<topic>-<partition>/00000000000000000042.log        segment data
                                  00000000000000000042.index      offset index
                                  00000000000000000042.timeindex  time index
                                  00000000000000000042.txnindex   aborted-transaction index
                                  00000000000000000042.snapshot   producer-state snapshot
    temporary suffixes appended after those: .deleted, .cleaned, .swap
    <log.dir>/<topic>-<partition>.<32 hex>-delete/   partition scheduled for deletion
                                       ...-future/   replica being moved here
                                       ...-stray/    replica not assigned to this broker
    <log.dir>/meta.properties                        identity of the log dir
    <any small file>.tmp                             scratch file of an atomic replacement

The base offset of a file is the decimal number before the first ``.`` of its name, written
as 20 digits with leading zeros.
"""

from __future__ import annotations

import re
import uuid
from pathlib import Path

from tidelog.errors import InvalidLogDirNameError, InvalidLogFileNameError
from tidelog.topic_partition import TopicPartition

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
TXN_INDEX_SUFFIX = ".txnindex"
PRODUCER_SNAPSHOT_SUFFIX = ".snapshot"

DELETED_SUFFIX = ".deleted"
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"

DELETE_DIR_SUFFIX = "-delete"
FUTURE_DIR_SUFFIX = "-future"
STRAY_DIR_SUFFIX = "-stray"

# Kafka's name for the scratch file of an atomic write: the target name plus ".tmp".
TEMPORARY_WRITE_SUFFIX = ".tmp"

META_PROPERTIES_FILE = "meta.properties"

SEGMENT_FILE_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)
TEMPORARY_SUFFIXES = (DELETED_SUFFIX, CLEANED_SUFFIX, SWAP_SUFFIX)

# Kafka truncates the topic part so that a -delete/-stray dir name stays within 255 characters.
MAX_DIR_NAME_LENGTH = 255

_OFFSET_DIGITS = 20
_PARTITION_DIR = re.compile(r"^(?P<topic>.+)-(?P<partition>\d+)$")


def filename_prefix_from_offset(offset: int) -> str:
    """The 20-digit, zero-padded decimal name Kafka gives a segment with this base offset.

    A negative offset is a caller's bug (offsets are checked where they enter): ValueError.
    """
    if offset < 0:
        raise ValueError(f"base offset must be >= 0, got {offset}")
    return str(offset).zfill(_OFFSET_DIGITS)  # a quarter of the nested format spec's cost (6 names per partition load)


def offset_from_file_name(name: str) -> int:
    """The base offset encoded in a segment, index or snapshot file name (digits before the first '.').

    Raises :class:`InvalidLogFileNameError` naming the file when the name has no such digits.
    """
    prefix = name.split(".", 1)[0]
    if not (prefix.isascii() and prefix.isdigit()):  # str.isdigit alone accepts "²", which int() refuses
        raise InvalidLogFileNameError("file name does not start with a base offset", file=name)
    return int(prefix)


def segment_file_name(base_offset: int, suffix: str, temporary_suffix: str = "") -> str:
    """Name of one of a segment's files, e.g. ``segment_file_name(42, LOG_SUFFIX)``."""
    return f"{filename_prefix_from_offset(base_offset)}{suffix}{temporary_suffix}"


def segment_file(dir: Path, base_offset: int, suffix: str, temporary_suffix: str = "") -> Path:
    """Path of one of a segment's files, e.g. ``segment_file(d, 42, LOG_SUFFIX, SWAP_SUFFIX)``."""
    return dir / segment_file_name(base_offset, suffix, temporary_suffix)


def log_file(dir: Path, base_offset: int, temporary_suffix: str = "") -> Path:
    return segment_file(dir, base_offset, LOG_SUFFIX, temporary_suffix)


def offset_index_file(dir: Path, base_offset: int, temporary_suffix: str = "") -> Path:
    return segment_file(dir, base_offset, INDEX_SUFFIX, temporary_suffix)


def time_index_file(dir: Path, base_offset: int, temporary_suffix: str = "") -> Path:
    return segment_file(dir, base_offset, TIME_INDEX_SUFFIX, temporary_suffix)


def transaction_index_file(dir: Path, base_offset: int, temporary_suffix: str = "") -> Path:
    return segment_file(dir, base_offset, TXN_INDEX_SUFFIX, temporary_suffix)


def producer_snapshot_file(dir: Path, offset: int) -> Path:
    return segment_file(dir, offset, PRODUCER_SNAPSHOT_SUFFIX)


def with_temporary_suffix(path: Path, temporary_suffix: str) -> Path:
    """``x.log`` → ``x.log.deleted``; an existing temporary suffix is replaced first."""
    return path.with_name(strip_temporary_suffix(path.name) + temporary_suffix)


def strip_temporary_suffix(name: str) -> str:
    for suffix in TEMPORARY_SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def temporary_write_path(path: Path) -> Path:
    """``<path>.tmp``: where an atomic write stages the new content."""
    return path.with_name(path.name + TEMPORARY_WRITE_SUFFIX)


def meta_properties_file(log_dir: Path) -> Path:
    return log_dir / META_PROPERTIES_FILE


def partition_dir(log_dir: Path, tp: TopicPartition) -> Path:
    return log_dir / partition_dir_name(tp)


def partition_dir_name(tp: TopicPartition) -> str:
    return f"{tp.topic}-{tp.partition}"


def log_delete_dir_name(tp: TopicPartition) -> str:
    """``topic-partition.<32 hex>-delete``, topic shortened so the name fits in 255 characters."""
    return _renamed_dir_name(tp, DELETE_DIR_SUFFIX)


def log_stray_dir_name(tp: TopicPartition) -> str:
    return _renamed_dir_name(tp, STRAY_DIR_SUFFIX)


def log_future_dir_name(tp: TopicPartition) -> str:
    return f"{partition_dir_name(tp)}.{uuid.uuid4().hex}{FUTURE_DIR_SUFFIX}"


def _renamed_dir_name(tp: TopicPartition, suffix: str) -> str:
    tail = f"-{tp.partition}.{uuid.uuid4().hex}{suffix}"
    topic = tp.topic[: max(0, MAX_DIR_NAME_LENGTH - len(tail))]
    return topic + tail


def parse_topic_partition_name(dir_name: str) -> TopicPartition:
    """Parse a partition dir name, including ``-delete``/``-future``/``-stray`` forms.

    Raises :class:`InvalidLogDirNameError` naming the dir when it is not of Kafka's shape.
    """
    if not dir_name:
        raise InvalidLogDirNameError("empty partition dir name", dir=dir_name)
    name = dir_name
    if is_renamed_partition_dir(name):
        dot = name.rfind(".")
        if dot < 0:
            raise InvalidLogDirNameError("renamed partition dir lacks '.<id>'", dir=dir_name)
        name = name[:dot]
    match = _PARTITION_DIR.match(name)
    if match is None:
        raise InvalidLogDirNameError(
            "partition dir name must be '<topic>-<partition>' with a numeric partition", dir=dir_name
        )
    return TopicPartition(match["topic"], int(match["partition"]))


def is_renamed_partition_dir(dir_name: str) -> bool:
    return dir_name.endswith((DELETE_DIR_SUFFIX, FUTURE_DIR_SUFFIX, STRAY_DIR_SUFFIX))
