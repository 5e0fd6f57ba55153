"""Offline verification of segment files: what ``tidelog verify`` reports.

Checks, per ``.log``: every batch parses and passes its CRC and size check; offsets increase
from batch to batch and never fall below the segment's base offset or beyond its relative
range; no partial batch at the tail. Per ``.index``: length a multiple of 8, entries increasing,
each entry's position is a batch boundary whose batch ends at or after the entry's offset.
Per ``.timeindex``: length a multiple of 12, timestamps and offsets non-decreasing, offsets
within the segment. Nothing is modified; every problem names the file and byte position.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tidelog.errors import CorruptRecordError, TidelogError
from tidelog.records.layout import OFFSET_INDEX_ENTRY, TIME_INDEX_ENTRY
from tidelog.storage import files
from tidelog.storage.file_records import FileRecords

_INT32_MAX = 2**31 - 1


@dataclass(frozen=True, slots=True)
class Problem:
    path: Path
    position: int | None
    message: str

    def __str__(self) -> str:
        where = f" at byte {self.position}" if self.position is not None else ""
        return f"{self.path}{where}: {self.message}"


@dataclass(slots=True)
class SegmentSummary:
    """What a verified ``.log`` holds (for reports)."""

    path: Path
    batches: int = 0
    records: int = 0
    first_offset: int | None = None
    last_offset: int | None = None
    valid_bytes: int = 0
    batch_starts: dict[int, tuple[int, int]] = field(default_factory=dict)  # position -> (base, last offset)


@dataclass(slots=True)
class VerifyReport:
    files_checked: int = 0
    problems: list[Problem] = field(default_factory=list)
    segments: list[SegmentSummary] = field(default_factory=list)
    # Each .log is scanned once, whether its own check or its index's check comes first.
    _scanned: dict[Path, tuple[SegmentSummary, list[Problem]]] = field(default_factory=dict, repr=False)

    def scan(self, log_path: Path) -> tuple[SegmentSummary, list[Problem]]:
        if log_path not in self._scanned:
            problems: list[Problem] = []
            self._scanned[log_path] = (verify_log_file(log_path, problems), problems)
        return self._scanned[log_path]

    @property
    def ok(self) -> bool:
        return not self.problems


def verify_paths(paths: list[Path], on_progress: Callable[[int, int], None] | None = None) -> VerifyReport:
    """Verify files, partition dirs or whole data dirs (recursively). ``on_progress(done, total)``
    is called after each file with the bytes of the files checked so far and in all."""
    report = VerifyReport()
    found = [file for path in paths for file in _segment_files(path)]
    total = sum(_size(file) for file in found)
    done = 0
    for file in found:
        _verify_file(file, report)
        done += _size(file)
        if on_progress is not None:
            on_progress(done, total)
    return report


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:  # reported by the check itself
        return 0


def _segment_files(path: Path) -> Iterator[Path]:
    if path.is_file():
        yield path
        return
    if not path.exists():
        raise TidelogError("no such file or directory", path=path)
    for file in sorted(path.rglob("*")):
        if file.is_file() and file.name.endswith((files.LOG_SUFFIX, files.INDEX_SUFFIX, files.TIME_INDEX_SUFFIX)):
            if not _BROKER_WORK_DIRS.intersection(file.relative_to(path).parts[:-1]):
                yield file


# A broker's working dirs inside a log dir that hold no partition: the remote tier's index cache
# (``<start>_<uuid>.index``, Kafka's names) and the remote cleaner's downloads.
_BROKER_WORK_DIRS = frozenset({"remote-log-index-cache", "remote-log-cleaner"})


def _verify_file(path: Path, report: VerifyReport) -> None:
    report.files_checked += 1
    try:
        if path.name.endswith(files.LOG_SUFFIX):
            summary, problems = report.scan(path)
            report.segments.append(summary)
            report.problems.extend(problems)
        elif path.name.endswith(files.INDEX_SUFFIX):
            log_path = files.log_file(path.parent, files.offset_from_file_name(path.name))
            segment = report.scan(log_path)[0] if log_path.exists() else None
            verify_offset_index(path, report.problems, segment)
        elif path.name.endswith(files.TIME_INDEX_SUFFIX):
            verify_time_index(path, report.problems)
        else:
            report.problems.append(Problem(path, None, "not a segment or index file"))
    except (OSError, TidelogError) as e:
        report.problems.append(Problem(path, None, str(e)))


def verify_log_file(path: Path, problems: list[Problem]) -> SegmentSummary:
    base = files.offset_from_file_name(path.name)
    summary = SegmentSummary(path)
    records = FileRecords.open(path, file_already_exists=True)
    previous_last = base - 1
    try:
        for position, batch in records.batches():
            _check_batch(path, position, batch, base, previous_last, problems)
            previous_last = max(previous_last, batch.last_offset)
            _summarise(summary, position, batch)
    except CorruptRecordError as e:
        problems.append(Problem(path, e.context.get("position"), e.message))
    finally:
        records.close()
    if summary.valid_bytes < records.size_in_bytes:
        problems.append(Problem(
            path, summary.valid_bytes,
            f"{records.size_in_bytes - summary.valid_bytes} bytes after the last complete batch (partial or invalid batch)",
        ))
    return summary


def _check_batch(path: Path, position: int, batch, base: int, previous_last: int, problems: list[Problem]) -> None:
    if not batch.is_valid():
        problems.append(Problem(path, position, f"batch at offset {batch.base_offset} fails its CRC check "
                                                f"(stored {batch.crc}, computed {batch.compute_crc()})"))
    if batch.base_offset <= previous_last:
        problems.append(Problem(path, position, f"offsets go backwards: batch base offset {batch.base_offset} "
                                                f"after last offset {previous_last}"))
    if not 0 <= batch.last_offset - base <= _INT32_MAX:
        problems.append(Problem(path, position, f"last offset {batch.last_offset} is outside the segment's "
                                                f"relative range from base offset {base}"))


def _summarise(summary: SegmentSummary, position: int, batch) -> None:
    summary.batches += 1
    summary.records += batch.records_count if batch.magic >= 2 else 1
    if summary.first_offset is None:
        summary.first_offset = batch.base_offset
    summary.last_offset = batch.last_offset
    summary.valid_bytes = position + batch.size_in_bytes
    summary.batch_starts[position] = (batch.base_offset, batch.last_offset)


def verify_offset_index(path: Path, problems: list[Problem], segment: SegmentSummary | None = None) -> None:
    """Check ``path`` against its segment's batches (``segment``; scanned here when not given)."""
    data = path.read_bytes()
    base = files.offset_from_file_name(path.name)
    size = OFFSET_INDEX_ENTRY.size
    if len(data) % size:
        problems.append(Problem(path, None, f"length {len(data)} is not a multiple of the {size}-byte entry size"))
    segment = segment or _segment_of(path, base)
    previous = base - 1
    for i, (relative, position) in enumerate(OFFSET_INDEX_ENTRY.iter_unpack(data[: len(data) // size * size])):
        if relative == 0 and position == 0 and i > 0:
            break  # preallocated zeros of a segment that was never closed
        offset = base + relative
        if relative < 0 or (i > 0 and offset <= previous):
            problems.append(Problem(path, i * OFFSET_INDEX_ENTRY.size, f"entry {i} offset {offset} does not increase"))
        previous = offset
        if segment is not None and segment.last_offset is not None:
            _check_index_target(path, i, offset, position, segment.batch_starts, segment.last_offset, problems)


def _check_index_target(
    path: Path, i: int, offset: int, position: int, starts: dict[int, tuple[int, int]], segment_last: int,
    problems: list[Problem],
) -> None:
    """A lookup of ``offset`` starts scanning at ``position``: the batch there must not begin
    after ``offset`` (or the batch holding it would be skipped)."""
    batch = starts.get(position)
    if batch is None:
        problems.append(Problem(path, i * OFFSET_INDEX_ENTRY.size, f"entry {i} (offset {offset}) points to byte {position}, not a batch start"))
    elif batch[0] > offset:
        problems.append(Problem(path, i * OFFSET_INDEX_ENTRY.size, f"entry {i} (offset {offset}) points to a batch starting at offset {batch[0]}"))
    elif offset > segment_last:
        problems.append(Problem(path, i * OFFSET_INDEX_ENTRY.size, f"entry {i} offset {offset} is past the segment's last offset {segment_last}"))


def _segment_of(index_path: Path, base: int) -> SegmentSummary | None:
    log_path = files.log_file(index_path.parent, base)
    return verify_log_file(log_path, []) if log_path.exists() else None


def verify_time_index(path: Path, problems: list[Problem]) -> None:
    data = path.read_bytes()
    base = files.offset_from_file_name(path.name)
    size = TIME_INDEX_ENTRY.size
    if len(data) % size:
        problems.append(Problem(path, None, f"length {len(data)} is not a multiple of the {size}-byte entry size"))
    previous_ts, previous_offset = -1, base
    for i, (timestamp, relative) in enumerate(TIME_INDEX_ENTRY.iter_unpack(data[: len(data) // size * size])):
        if timestamp == 0 and relative == 0 and i > 0:
            break  # preallocated zeros
        if timestamp < previous_ts or base + relative < previous_offset:
            problems.append(Problem(path, i * size, f"entry {i} ({timestamp}, offset {base + relative}) goes backwards"))
        previous_ts, previous_offset = timestamp, base + relative
