"""Text checkpoint files: offsets per partition (log dir root) and leader epochs (partition dir).

Format (Kafka's ``CheckpointFile``; UTF-8, every line ends with ``\\n``)::

    line 1        <version>                   decimal int32, must be 0 for every file here
    line 2        <count>                     decimal int32, number of entry lines that follow
    lines 3..     <entry>                     fields separated by one space when written;
                                              read by splitting on runs of whitespace

    entry of an offset checkpoint             <topic> <partition> <offset>
        topic       topic name (no whitespace)
        partition   decimal int32
        offset      decimal int64
    entry of leader-epoch-checkpoint          <epoch> <start offset>
        epoch       decimal int32 >= 0, ascending from line to line
        start offset decimal int64 >= 0, first offset written in that epoch

Example ``cleaner-offset-checkpoint`` (first dirty offset of two partitions)::

    0
    2
    orders 3 1520
    orders 0 977

Reading (same rules as Kafka): an empty file, or one holding only the version line, has no
entries; a version other than the expected one, a line that does not parse, or an entry count
different from line 2 raises :class:`~tidelog.errors.CheckpointError` naming the file, the line
number, the offending text and what was expected. Numbers are Java-style decimal integers
(optional sign, ASCII digits, no spaces) and must fit their Java type. Lines end at ``\\n``,
``\\r`` or ``\\r\\n``, as Java's ``readLine`` sees them.

Writing goes through :func:`tidelog.storage.atomic.write_atomically` (``.tmp``, fsync, rename,
fsync dir). The file is created empty when the checkpoint object is constructed, as Kafka does.

Entry order: Kafka writes offset checkpoints in Java ``HashMap`` order, i.e. unspecified. We
write them sorted by (topic, partition) so that our files are deterministic; **readers must not
depend on the order of any offset checkpoint**. Leader-epoch entries are written in the order
given, which :class:`LeaderEpochCache` keeps ascending.

Files: ``recovery-point-offset-checkpoint``, ``log-start-offset-checkpoint``,
``replication-offset-checkpoint`` and ``cleaner-offset-checkpoint`` in each log dir root;
``leader-epoch-checkpoint`` in each partition dir (see shared/reference/kafka-storage.md §1.13).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar

from tidelog.errors import CheckpointError, StorageError
from tidelog.records.varint import INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN
from tidelog.storage.atomic import read_file, write_atomically
from tidelog.storage import fileops
from tidelog.topic_partition import TopicPartition

RECOVERY_POINT_CHECKPOINT_FILE = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT_FILE = "log-start-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT_FILE = "replication-offset-checkpoint"
CLEANER_OFFSET_CHECKPOINT_FILE = "cleaner-offset-checkpoint"
LEADER_EPOCH_CHECKPOINT_FILE = "leader-epoch-checkpoint"

CHECKPOINT_VERSION = 0

_JAVA_INTEGER = re.compile(r"[+-]?[0-9]+")
_JAVA_WHITESPACE = re.compile(r"[ \t\n\x0b\f\r]+")
_LINE_BREAK = re.compile(r"\r\n|\r|\n")

T = TypeVar("T")


@dataclass(frozen=True, slots=True, order=True)
class EpochEntry:
    """One line of ``leader-epoch-checkpoint``: ``epoch`` starts at ``start_offset``."""

    epoch: int
    start_offset: int


@dataclass(frozen=True, slots=True)
class EntryFormat(Generic[T]):
    """How one entry type is written to and parsed from a checkpoint line.

    ``parse`` gets the whitespace-split fields and returns None when they do not form an entry;
    ``shape`` describes a valid line for error messages.
    """

    shape: str
    format: Callable[[T], str]
    parse: Callable[[list[str]], T | None]


# --- pure text codec -----------------------------------------------------------------------

def parse_java_int(text: str, lo: int = INT64_MIN, hi: int = INT64_MAX) -> int | None:
    """``Integer.parseInt``/``Long.parseLong`` semantics: the int, or None if malformed or out of [lo, hi]."""
    if text.isascii() and text.isdigit():  # the common case, without the regex (10k-entry checkpoints)
        value = int(text)
    elif _JAVA_INTEGER.fullmatch(text):
        value = int(text)
    else:
        return None
    return value if lo <= value <= hi else None


def split_lines(text: str) -> list[str]:
    """Lines as Java's ``BufferedReader.readLine`` returns them (no terminators, no final empty line)."""
    if not text:
        return []
    lines = text.split("\n") if "\r" not in text else _LINE_BREAK.split(text)  # the regex only when needed
    if lines[-1] == "":
        lines.pop()
    return lines


def format_checkpoint(entries: Iterable[T], entry_format: EntryFormat[T], version: int = CHECKPOINT_VERSION) -> str:
    """The full text of a checkpoint file holding ``entries`` in the given order."""
    body = [entry_format.format(entry) for entry in entries]
    return "".join(f"{line}\n" for line in (str(version), str(len(body)), *body))


def parse_checkpoint(
    text: str, entry_format: EntryFormat[T], path: Path | None = None, version: int = CHECKPOINT_VERSION
) -> list[T]:
    """Entries of a checkpoint file's text; raises :class:`CheckpointError` on any deviation."""
    lines = split_lines(text)
    if not lines:
        return []
    _check_version(lines[0], version, path)
    if len(lines) == 1:
        return []
    expected = _parse_count(lines[1], path)
    entries = [_parse_entry(line, number, entry_format, path) for number, line in enumerate(lines[2:], start=3)]
    if len(entries) != expected:
        raise CheckpointError(
            f"expected {expected} entries (line 2) but found {len(entries)}",
            path=path, line_number=2, line=lines[1],
        )
    return entries


def _check_version(line: str, version: int, path: Path | None) -> None:
    found = parse_java_int(line, INT32_MIN, INT32_MAX)
    if found is None:
        raise CheckpointError(
            f"malformed version line: expected the integer {version}", path=path, line_number=1, line=line
        )
    if found != version:
        raise CheckpointError(
            f"unrecognised checkpoint version {found}, expected {version}", path=path, line_number=1, line=line
        )


def _parse_count(line: str, path: Path | None) -> int:
    count = parse_java_int(line, 0, INT32_MAX)
    if count is None:
        raise CheckpointError(
            "malformed entry-count line: expected a non-negative integer", path=path, line_number=2, line=line
        )
    return count


def _parse_entry(line: str, number: int, entry_format: EntryFormat[T], path: Path | None) -> T:
    entry = entry_format.parse(_JAVA_WHITESPACE.split(line))
    if entry is None:
        raise CheckpointError(
            f"malformed checkpoint line: expected {entry_format.shape}", path=path, line_number=number, line=line
        )
    return entry


# --- entry formats -------------------------------------------------------------------------

def _format_offset_entry(entry: tuple[TopicPartition, int]) -> str:
    tp, offset = entry
    if not tp.topic or _JAVA_WHITESPACE.search(tp.topic):
        raise CheckpointError("topic name cannot be written to a checkpoint (empty or has whitespace)", topic=tp.topic)
    _check_range("partition", tp.partition, INT32_MIN, INT32_MAX)
    _check_range("offset", offset, INT64_MIN, INT64_MAX)
    return f"{tp.topic} {tp.partition} {offset}"


def _parse_offset_entry(fields: list[str]) -> tuple[TopicPartition, int] | None:
    if len(fields) != 3 or not fields[0]:
        return None
    partition = parse_java_int(fields[1], INT32_MIN, INT32_MAX)
    offset = parse_java_int(fields[2])
    if partition is None or offset is None:
        return None
    return TopicPartition(fields[0], partition), offset


def _format_epoch_entry(entry: EpochEntry) -> str:
    _check_range("epoch", entry.epoch, 0, INT32_MAX)
    _check_range("start offset", entry.start_offset, 0, INT64_MAX)
    return f"{entry.epoch} {entry.start_offset}"


def _parse_epoch_entry(fields: list[str]) -> EpochEntry | None:
    if len(fields) != 2:
        return None
    epoch = parse_java_int(fields[0], 0, INT32_MAX)
    start_offset = parse_java_int(fields[1], 0, INT64_MAX)
    if epoch is None or start_offset is None:
        return None
    return EpochEntry(epoch, start_offset)


def _check_range(what: str, value: int, lo: int, hi: int) -> None:
    if not lo <= value <= hi:
        raise CheckpointError(f"{what} {value} is outside what the checkpoint holds, [{lo}, {hi}]", value=value)


OFFSET_ENTRY_FORMAT: EntryFormat[tuple[TopicPartition, int]] = EntryFormat(
    "'<topic> <partition> <offset>'", _format_offset_entry, _parse_offset_entry
)
EPOCH_ENTRY_FORMAT: EntryFormat[EpochEntry] = EntryFormat(
    "'<epoch> <start offset>', both >= 0", _format_epoch_entry, _parse_epoch_entry
)


def format_epoch_checkpoint(entries: Iterable[EpochEntry]) -> str:
    """The version-0 ``leader-epoch-checkpoint`` text of ``entries`` in the given order (what a
    partition dir's file holds; the remote tier uploads it beside each segment). Pure;
    :class:`CheckpointError` for an epoch or offset outside what the file holds."""
    return format_checkpoint(entries, EPOCH_ENTRY_FORMAT)



# --- files ---------------------------------------------------------------------------------

class CheckpointFile(Generic[T]):
    """One checkpoint file on disk: created empty if missing, read whole, replaced atomically.

    Not thread-safe: each file has one owner (LogManager, cleaner manager, or the partition's
    log) that serializes its reads and writes.
    """

    def __init__(self, path: Path, entry_format: EntryFormat[T], version: int = CHECKPOINT_VERSION) -> None:
        self.path = path
        self._format = entry_format
        self._version = version
        _create_if_missing(path)

    def read_entries(self) -> list[T]:
        return read_checkpoint(self.path, self._format, self._version)

    def write_entries(self, entries: Iterable[T]) -> None:
        text = format_checkpoint(entries, self._format, self._version)
        write_atomically(self.path, text.encode("utf-8"))


def read_checkpoint(path: Path, entry_format: EntryFormat[T], version: int = CHECKPOINT_VERSION) -> list[T]:
    """The entries of the checkpoint file ``path``, read whole; unlike :class:`CheckpointFile`,
    a missing file is not created (for readers that write nothing). :class:`StorageError` when it
    cannot be read, :class:`CheckpointError` when it does not parse."""
    data = read_file(path, "checkpoint file")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise CheckpointError("checkpoint file is not valid UTF-8", path=path, position=e.start) from e
    return parse_checkpoint(text, entry_format, path, version)


def _create_if_missing(path: Path) -> None:
    try:
        fileops.touch(path)
    except OSError as e:
        raise StorageError("cannot create checkpoint file", path=path, operation="create") from e


class OffsetCheckpointFile:
    """``topic partition offset`` checkpoint: recovery points, log start offsets, high watermarks,
    first dirty offsets. A partition listed twice keeps its last value (as Kafka's map does)."""

    def __init__(self, path: Path) -> None:
        self._file = CheckpointFile(path, OFFSET_ENTRY_FORMAT)

    @property
    def path(self) -> Path:
        return self._file.path

    def read(self) -> dict[TopicPartition, int]:
        return dict(self._file.read_entries())

    def write(self, entries: Mapping[TopicPartition, int]) -> None:
        """Replace the file with ``entries``, sorted by (topic, partition). Two fsyncs."""
        self._file.write_entries(sorted(entries.items()))


class LeaderEpochCheckpointFile:
    """``leader-epoch-checkpoint`` of one partition dir: ``epoch start_offset`` lines."""

    def __init__(self, path: Path) -> None:
        self._file = CheckpointFile(path, EPOCH_ENTRY_FORMAT)

    @property
    def path(self) -> Path:
        return self._file.path

    def read(self) -> list[EpochEntry]:
        return self._file.read_entries()

    def write(self, entries: Sequence[EpochEntry]) -> None:
        """Replace the file with ``entries`` in the given order. Two fsyncs."""
        self._file.write_entries(entries)

    def write_if_dir_exists(self, entries: Sequence[EpochEntry]) -> bool:
        """Like :meth:`write`, but a no-op returning False when the partition dir is gone
        (an asynchronous flush racing a partition deletion, as in Kafka's ``writeIfDirExists``)."""
        if not self.path.parent.is_dir():
            return False
        self.write(entries)
        return True


# --- leader epoch cache ----------------------------------------------------------------------

class LeaderEpochCache:
    """In-memory leader epoch → start offset map of one partition, persisted to its checkpoint.

    Entries are ascending in both epoch and start offset. Rules (Kafka's ``LeaderEpochFileCache``):

    * :meth:`assign` adds ``(epoch, start)`` when the epoch differs from the latest one, or when it
      is the latest epoch with a *smaller* start offset. Before adding it removes, from the end,
      every entry whose epoch ≥ ``epoch`` or whose start ≥ ``start`` (so a lower epoch, as a
      follower replaying a diverged log would assign, truncates the entries after it). Assigning
      the latest epoch again with the same or a larger start offset changes nothing. A change is
      written to the checkpoint synchronously, so the file never lacks an epoch.
    * :meth:`truncate_from_start` and :meth:`truncate_from_end` change memory only; the caller
      calls :meth:`flush` (Kafka flushes those asynchronously).

    Loading from the checkpoint replays every entry through the assign rules without writing.
    Not thread-safe: callers hold the partition lock.
    """

    def __init__(self, checkpoint: LeaderEpochCheckpointFile | None = None) -> None:
        self._checkpoint = checkpoint
        self._entries: list[EpochEntry] = []
        # The last entry, kept as a plain attribute by every change: the leader's append asks
        # for it on each batch (a property read costs several times more).
        self.latest: EpochEntry | None = None
        for entry in checkpoint.read() if checkpoint is not None else ():
            self._assign(entry)
        # The entries as loaded through the assign rules (not necessarily the file's lines), so
        # flush() rewrites the file (two fsyncs) only after a change made since.
        self._persisted: list[EpochEntry] | None = list(self._entries) if checkpoint is not None else None

    @property
    def entries(self) -> list[EpochEntry]:
        """A copy of the entries, ascending."""
        return list(self._entries)

    @property
    def latest_entry(self) -> EpochEntry | None:
        return self.latest

    @property
    def latest_epoch(self) -> int | None:
        return self._entries[-1].epoch if self._entries else None

    @property
    def earliest_entry(self) -> EpochEntry | None:
        return self._entries[0] if self._entries else None

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that ``epoch`` starts at ``start_offset``; True (and checkpoint written) if changed.

        Raises ValueError for a negative epoch or offset: a caller's bug (callers skip batches
        with epoch -1, and the checkpoint parser rejects negative numbers).
        """
        changed = self._assign(EpochEntry(epoch, start_offset))
        if changed:
            self.flush()
        return changed

    def assign_recovered(self, epoch_starts: list[tuple[int, int]]) -> None:
        """Recovery's rule (Kafka's ``LogSegment.recover``) for the (epoch, start offset) pairs of
        a recovered segment: only an epoch newer than the latest starts an entry, so a recovered
        batch never cuts back a checkpointed later epoch."""
        for epoch, start_offset in epoch_starts:
            latest = self.latest_epoch
            if latest is None or epoch > latest:
                self.assign(epoch, start_offset)

    def epoch_for_offset(self, offset: int) -> int | None:
        """The epoch whose range holds ``offset``: the last entry starting at or before it."""
        found = None
        for entry in self._entries:
            if entry.start_offset > offset:
                break
            found = entry.epoch
        return found

    def truncate_from_start(self, start_offset: int) -> list[EpochEntry]:
        """Drop entries starting at or below ``start_offset``, keeping the last of them moved up to
        ``start_offset`` (the epoch still in force there). Returns the removed entries.

        E.g. (0,0),(1,5),(2,10) at 5 → (1,5),(2,10); (0,0),(1,7),(2,10) at 5 → (0,5),(1,7),(2,10).
        """
        cut = 0
        while cut < len(self._entries) and self._entries[cut].start_offset <= start_offset:
            cut += 1
        removed = self._entries[:cut]
        if removed:
            last = removed[-1]  # kept as it is when it already starts there (the common case at load)
            self._entries[:cut] = [last if last.start_offset == start_offset else EpochEntry(last.epoch, start_offset)]
            self.latest = self._entries[-1]
        return removed

    def truncate_from_end(self, end_offset: int) -> list[EpochEntry]:
        """Drop entries whose start offset is ≥ ``end_offset`` (no-op for a negative offset)."""
        if end_offset < 0:
            return []
        keep = len(self._entries)
        while keep > 0 and self._entries[keep - 1].start_offset >= end_offset:
            keep -= 1
        removed = self._entries[keep:]
        del self._entries[keep:]
        self.latest = self._entries[-1] if self._entries else None
        return removed

    def clear(self) -> None:
        """Forget every entry (memory only; :meth:`flush` to persist)."""
        self._entries.clear()
        self.latest = None

    def flush(self) -> None:
        """Write the entries to the checkpoint file if they changed since it was last read or
        written (no-op for a cache without one). Two fsyncs when it writes."""
        if self._checkpoint is not None and self._entries != self._persisted:
            self._checkpoint.write(self._entries)
            self._persisted = list(self._entries)

    def _assign(self, entry: EpochEntry) -> bool:
        if entry.epoch < 0 or entry.start_offset < 0:
            raise ValueError(f"invalid leader epoch entry {entry}: epoch and start offset must be >= 0")
        latest = self.latest
        if latest is not None and latest.epoch == entry.epoch and entry.start_offset >= latest.start_offset:
            return False
        while self._entries and (
            self._entries[-1].epoch >= entry.epoch or self._entries[-1].start_offset >= entry.start_offset
        ):
            self._entries.pop()
        self._entries.append(entry)
        self.latest = entry
        return True
