"""Loading a partition dir after a clean or unclean stop (Kafka's ``LogLoader``).

Phases, in order (kafka-storage.md §3.7.7 and §3.9), one function each:

1. **Temporary files.** ``*.deleted`` files are removed. ``*.cleaned`` files are cleaner output
   that never reached ``.swap``: removed, and so is every ``*.swap`` at or above the lowest
   ``.cleaned`` base offset (an incomplete split). Remaining ``.log.swap`` segments are complete
   cleaner output: the files they replace (any non-swap file whose base offset lies in
   [lowest swap base, highest swap next offset)) are removed and the swaps renamed into place.
   A crash at any step of the cleaner's ``.cleaned`` → ``.swap`` → swap-in protocol therefore
   reloads to either the original segments or the fully cleaned ones, never a mix.
2. **Segment files.** An index file without its ``.log`` is an orphan and is removed. Each
   ``.log`` is opened; a missing or insane index (checked in O(1)) has its segment rebuilt.
3. **Recovery** after an unclean stop: every segment from the one holding the recovery point to
   the end is re-validated batch by batch (CRC, size); the first invalid or partial batch and
   everything after it is truncated, and segments after a truncated one are deleted. After a
   clean stop only the active segment's tail is checked (from its last index entry: complete
   batches, CRCs, ending at the file's end), and the segment recovered if it is not whole: the
   next append would otherwise land after bytes no reader can pass (Kafka trusts the marker).
4. **Offsets.** A log whose end is below the log-start-offset checkpoint is emptied; an empty
   dir gets one empty segment at that offset; the recovery point is the log end after a clean
   stop, else ``min(checkpoint, log end)`` — recovery itself does not advance it.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from pathlib import Path

from tidelog.clock import Clock
from tidelog.errors import CorruptIndexError, InvalidOffsetError
from tidelog.storage import fileops, files
from tidelog.storage.log_config import SegmentConfig
from tidelog.storage.segment import LogSegment
from tidelog.storage.segments import LogSegments

log = logging.getLogger(__name__)

SegmentRecovered = Callable[[list[tuple[int, int]]], None]  # gets (epoch, start offset) pairs


@dataclass(frozen=True, slots=True)
class LoadedLog:
    segments: LogSegments
    log_start_offset: int
    recovery_point: int
    next_offset: int
    had_clean_shutdown: bool
    truncated_bytes: int
    # The dir's file names as listed before loading: the snapshots among them are still there
    # (loading creates and removes segment files only), for the producer state.
    dir_names: list[str]


@dataclass(frozen=True, slots=True)
class LoadParams:
    dir: Path
    config: SegmentConfig
    clock: Clock
    log_start_offset_checkpoint: int
    recovery_point_checkpoint: int
    had_clean_shutdown: bool
    draw_jitter: Callable[[], int] = lambda: 0  # each opened segment's segment.jitter.ms draw
    # Unclean, but another process already recovered the files: skip phase 3 and keep the
    # recovery point at the checkpoint, exactly as after recovering here.
    recovered_elsewhere: bool = False
    on_segment_recovered: SegmentRecovered | None = None
    # A tiered log (remote.storage.enable): its log start offset is the checkpoint's, even below
    # the first local segment (Kafka's LogLoader; the records between are the remote tier's).
    remote_log_enabled: bool = False


def load_log(params: LoadParams) -> LoadedLog:
    """Run every phase on ``params.dir`` and return the opened segments and offsets."""
    names = os.listdir(params.dir)
    if any(name.endswith(files.TEMPORARY_SUFFIXES) for name in names):
        complete_swaps_and_remove_temporary_files(params)
        names = os.listdir(params.dir)
    recovered: set[int] = set()
    segments = load_segment_files(params, names, recovered)
    truncated, next_offset = 0, None
    if not params.had_clean_shutdown and not params.recovered_elsewhere:
        truncated = recover_from(segments, params, recovered)
    elif params.had_clean_shutdown and segments.last is not None and segments.last.base_offset not in recovered:
        truncated, next_offset = check_active_tail(segments.last, params)
    return _settle_offsets(segments, params, truncated, names, next_offset)


# --- phase 1 -----------------------------------------------------------------------------------

def complete_swaps_and_remove_temporary_files(params: LoadParams) -> None:
    names = sorted(os.listdir(params.dir))
    min_cleaned = min(
        (files.offset_from_file_name(n) for n in names if n.endswith(files.CLEANED_SUFFIX)), default=None
    )
    for name in names:
        path = params.dir / name
        if name.endswith((files.DELETED_SUFFIX, files.CLEANED_SUFFIX)):
            fileops.unlink(path, missing_ok=True)
        elif name.endswith(files.SWAP_SUFFIX) and min_cleaned is not None:
            if files.offset_from_file_name(name) >= min_cleaned:
                log.info("removing %s: swap of an incomplete split", path)
                fileops.unlink(path, missing_ok=True)
    _install_swap_segments(params)


def _install_swap_segments(params: LoadParams) -> None:
    swap_logs = sorted(params.dir.glob(f"*{files.LOG_SUFFIX}{files.SWAP_SUFFIX}"))
    if swap_logs:
        _remove_replaced_files(params, [files.offset_from_file_name(p.name) for p in swap_logs])
    # Every *.swap file, not only those of a .log.swap: a crash inside the final rename of a
    # segment (its .log already renamed) leaves index swaps that belong in place (Kafka renames
    # all of them too).
    for path in list(params.dir.glob(f"*{files.SWAP_SUFFIX}")):
        fileops.rename(path, path.with_name(files.strip_temporary_suffix(path.name)))


def _remove_replaced_files(params: LoadParams, bases: list[int]) -> None:
    ends = [_swap_next_offset(params, base) for base in bases]
    low, high = min(bases), max(ends)
    for path in list(params.dir.iterdir()):
        if path.name.endswith(files.SWAP_SUFFIX) or not path.name[:1].isdigit():
            continue
        if low <= files.offset_from_file_name(path.name) < high:
            log.info("removing %s: replaced by a swap segment", path)
            fileops.unlink(path)


def _swap_next_offset(params: LoadParams, base: int) -> int:
    segment = LogSegment.open(
        params.dir, base, params.config, params.clock, file_already_exists=True, file_suffix=files.SWAP_SUFFIX
    )
    try:
        if not segment.has_index_files():
            segment.recover()
        return segment.read_next_offset()
    finally:
        segment.close_handlers()


# --- phase 2 -----------------------------------------------------------------------------------

def load_segment_files(params: LoadParams, listing: list[str], recovered: set[int]) -> LogSegments:
    """Open every segment among the dir's file names ``listing``; ``recovered`` collects the base
    offsets of those rebuilt here."""
    segments = LogSegments()
    names = set(listing)
    for name in sorted(names):
        if not name[:1].isdigit():
            continue
        base = files.offset_from_file_name(name)
        if _is_index_file(name):
            if files.segment_file_name(base, files.LOG_SUFFIX) not in names:
                log.info("removing orphan index file %s", params.dir / name)
                fileops.unlink(params.dir / name, missing_ok=True)
        elif name.endswith(files.LOG_SUFFIX):
            segments.add(_open_segment(params, base, recovered, names))
    return segments


def _is_index_file(name: str) -> bool:
    return name.endswith((files.INDEX_SUFFIX, files.TIME_INDEX_SUFFIX, files.TXN_INDEX_SUFFIX))


def _open_segment(params: LoadParams, base: int, recovered: set[int], names: AbstractSet[str]) -> LogSegment:
    segment = LogSegment.open(
        params.dir, base, params.config, params.clock,
        file_already_exists=True, rolling_jitter_ms=params.draw_jitter(),
    )
    try:
        segment.sanity_check(names)
    except (FileNotFoundError, CorruptIndexError) as e:
        log.warning("rebuilding indexes of %s: %s", segment.log.path, e)
        if _recover_segment(segment, params) == 0:
            recovered.add(base)  # valid to its end: phase 3 need not scan it again
    return segment


# --- phase 3 -----------------------------------------------------------------------------------

def recover_from(segments: LogSegments, params: LoadParams, already_recovered: AbstractSet[int] = frozenset()) -> int:
    """Re-validate segments from the recovery point on, except those ``already_recovered`` whole
    (with nothing truncated) while loading; returns the bytes truncated."""
    start = segments.floor(params.recovery_point_checkpoint) or segments.first
    if start is None:
        return 0
    truncated_total = 0
    for segment in segments.values_between(start.base_offset, 2**63 - 1):
        if segment.base_offset in already_recovered:
            continue
        truncated = _recover_segment(segment, params)
        truncated_total += truncated
        if truncated > 0:
            _delete_segments_after(segments, segment)
            break
    return truncated_total


def _recover_segment(segment: LogSegment, params: LoadParams) -> int:
    try:
        result = segment.recover()
    except InvalidOffsetError as e:
        # Only an out-of-order offset in the data (Kafka's InvalidOffsetException) empties the
        # segment. Recovery itself truncates at a batch whose offsets go back, so this is a last
        # defence. Anything else (an I/O error, an index too small for the data after
        # segment.index.bytes was lowered) fails the load, as in Kafka: never delete data for it.
        log.warning("recovery of %s failed (%s); truncating it to its base offset", segment.log.path, e)
        return segment.truncate_to(segment.base_offset)
    if params.on_segment_recovered is not None:
        params.on_segment_recovered(result.epoch_starts)
    return result.truncated_bytes


def check_active_tail(active: LogSegment, params: LoadParams) -> tuple[int, int]:
    """After a clean stop nothing is recovered, yet the next append goes after the active
    segment's last byte: unless that is the end of a complete, valid batch (the check reads from
    the last index entry on), the segment is recovered, so no record is ever written, and
    acknowledged, after bytes a reader cannot get past. Returns the bytes truncated and the
    log's next offset."""
    tail = active.check_tail()
    if tail.whole:
        return 0, tail.next_offset
    if tail.valid_end > active.size:
        found = f"its last offset-index entry points at byte {tail.valid_end}, past its {active.size} bytes"
    else:
        found = f"valid batches end at byte {tail.valid_end} of {active.size}"
    log.warning("%s: %s although the log was shut down cleanly (a torn, cut or overwritten tail); "
                "recovering the segment", active.log.path, found)
    return _recover_segment(active, params), active.read_next_offset()


def _delete_segments_after(segments: LogSegments, segment: LogSegment) -> None:
    for later in segments.values_between(segment.base_offset + 1, 2**63 - 1):
        if later.base_offset > segment.base_offset:
            log.warning("deleting %s: it follows a truncated segment", later.log.path)
            segments.remove(later.base_offset)
            later.delete_files()


# --- phase 4 -----------------------------------------------------------------------------------

def _settle_offsets(segments: LogSegments, params: LoadParams, truncated: int, names: list[str],
                    next_offset: int | None = None) -> LoadedLog:
    """``next_offset``: the log's, when phase 3 or the tail check already read it."""
    if next_offset is None:
        next_offset = _next_offset(segments)
    if segments and next_offset < params.log_start_offset_checkpoint:
        log.warning(
            "log end %d of %s is below the log start offset checkpoint %d: removing all segments",
            next_offset, params.dir, params.log_start_offset_checkpoint,
        )
        for segment in segments.snapshot():
            segment.delete_files()
        segments.clear()
    if not segments:
        empty = LogSegment.open(
            params.dir, params.log_start_offset_checkpoint, params.config, params.clock,
            rolling_jitter_ms=params.draw_jitter(),
        )
        empty.offset_index, empty.time_index  # Kafka creates the active segment's index files at load
        segments.add(empty)
        next_offset = params.log_start_offset_checkpoint
    _release_inactive_indexes(segments, params.config.max_index_size)
    recovery_point = next_offset if params.had_clean_shutdown else min(params.recovery_point_checkpoint, next_offset)
    first_base = segments.first.base_offset  # type: ignore[union-attr]
    start = params.log_start_offset_checkpoint
    return LoadedLog(
        segments, start if params.remote_log_enabled else max(start, first_base), recovery_point, next_offset,
        params.had_clean_shutdown, truncated, names,
    )


def _next_offset(segments: LogSegments) -> int:
    active = segments.last
    return active.read_next_offset() if active is not None else 0


def _release_inactive_indexes(segments: LogSegments, max_index_size: int) -> None:
    """Unmap every index and close every ``.log`` descriptor the load opened; the active segment's
    indexes grow back to ``segment.index.bytes`` when first used."""
    active = segments.last
    for segment in segments.snapshot():
        if segment is not active:
            segment.release_indexes()
            segment.log.close()
    if active is not None:
        active.defer_index_resize(max_index_size)
