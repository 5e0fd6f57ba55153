"""Offline checks of what ``tidelog serve`` reads at start-up besides the segments, each finding
with what the broker will do with it (``tidelog verify``).

The segments themselves are :mod:`tidelog.storage.verify`'s; this module gets their summaries
(:class:`SegmentSummary`) and checks, without writing anything:

* per log dir: ``meta.properties``; the topic registry (unreadable, or missing while partition
  dirs are there) and the topics whose configs are unconfirmed; the recovery-point,
  log-start-offset, replication-offset (high watermark) and cleaner-offset checkpoints, each
  readable and each entry within its partition's log (a log start offset past the log end makes
  the broker delete every segment of the partition, as Kafka does);
* per partition dir: ``leader-epoch-checkpoint``, producer snapshots, ``partition.metadata`` (and
  its topic id against the registry), the topic copy ``tidelog-topic.json``, and offset holes
  between segments (a deleted middle segment), unless the topic is compacted, where the cleaner
  leaves such gaps.

Each finding's ``action`` is what the broker's start-up does, as the loading code in
:mod:`tidelog.manager.manager`, :mod:`tidelog.manager.log_dir` and :mod:`tidelog.storage.loader`
does it. ``problem`` is False for a finding worth knowing that is no damage (a Kafka data dir not
yet opened by tidelog has no registry).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from tidelog.errors import CheckpointError, CorruptSnapshotError, InvalidLogDirNameError, StorageError
from tidelog.manager.staged_commit import startup_findings
from tidelog.manager.log_dir import SKIPPED_DIRS
from tidelog.manager.topic_copies import TOPIC_COPY_FILE, read_topic_copy
from tidelog.manager.topics import REGISTRY_FILE, RegistryState, TopicRecord, decode_registry, salvage_epoch
from tidelog.storage import files
from tidelog.storage.atomic import read_file
from tidelog.storage.checkpoints import (
    CLEANER_OFFSET_CHECKPOINT_FILE,
    EPOCH_ENTRY_FORMAT,
    LEADER_EPOCH_CHECKPOINT_FILE,
    LOG_START_OFFSET_CHECKPOINT_FILE,
    OFFSET_ENTRY_FORMAT,
    RECOVERY_POINT_CHECKPOINT_FILE,
    REPLICATION_OFFSET_CHECKPOINT_FILE,
    read_checkpoint,
)
from tidelog.storage.metadata import PARTITION_METADATA_FILE, decode_partition_metadata, read_meta_properties
from tidelog.storage.producer_snapshot import read_snapshot
from tidelog.storage.verify import SegmentSummary
from tidelog.topic_partition import TopicPartition

ROOT_FILES = (files.META_PROPERTIES_FILE, REGISTRY_FILE, RECOVERY_POINT_CHECKPOINT_FILE,
              LOG_START_OFFSET_CHECKPOINT_FILE, REPLICATION_OFFSET_CHECKPOINT_FILE, CLEANER_OFFSET_CHECKPOINT_FILE)
CONFIRM = "tidelog topics confirm-configs"
SET_ASIDE = ("the broker sets the partition aside: it is not loaded or served (clients get KAFKA_STORAGE_ERROR) "
             "until the file is repaired or removed; the other partitions load")
# What start-up does with an unreadable root checkpoint (it counts as empty, with a warning).
UNREADABLE_CHECKPOINT = {
    RECOVERY_POINT_CHECKPOINT_FILE: "ignored: after an unclean stop every partition of the dir is recovered from "
                                    "offset 0 (slow, nothing lost); after a clean stop nothing changes",
    LOG_START_OFFSET_CHECKPOINT_FILE: "ignored: each partition's log start offset falls back to its first segment's "
                                      "base, so records removed by DeleteRecords above it are served again",
    REPLICATION_OFFSET_CHECKPOINT_FILE: "ignored: each high watermark starts at its log end (tidelog is the only "
                                        "replica), nothing is lost",
    CLEANER_OFFSET_CHECKPOINT_FILE: "ignored: every compacted partition of the dir is cleaned again from its log "
                                    "start offset",
}


@dataclass(frozen=True, slots=True)
class Finding:
    path: Path
    message: str
    action: str  # what the broker does with it at start-up
    problem: bool = True


@dataclass(frozen=True, slots=True)
class _Partition:
    """What the segment scan says of one partition dir."""

    tp: TopicPartition
    dir: Path
    first_base: int
    log_end: int
    holes: tuple[tuple[int, int], ...]  # [from, to) missing between two segments


def check_startup_files(paths: Iterable[Path], segments: Sequence[SegmentSummary]) -> list[Finding]:
    """Findings for the log dirs and partition dirs under ``paths`` (files are left to the segment
    checks). ``segments``: the summaries of the ``.log`` files scanned there."""
    partitions = _partitions(segments)
    findings: list[Finding] = []
    roots: set[Path] = set()
    for path in paths:
        if path.is_dir():
            roots.update(_log_dirs(path))
    for root in sorted(roots):
        findings.extend(_check_log_dir(root, partitions))
    for path in paths:  # a partition dir named alone, outside any log dir checked above
        if path.is_dir() and path.parent not in roots and path not in roots and _is_partition_dir(path):
            findings.extend(_check_partition(path, partitions.get(path), None))
    return findings


def _log_dirs(path: Path) -> Iterator[Path]:
    for candidate in (path, *path.rglob("*")):
        if candidate.is_dir() and any((candidate / name).is_file() for name in ROOT_FILES):
            yield candidate


def _is_partition_dir(path: Path) -> bool:
    if files.is_renamed_partition_dir(path.name) or path.name.endswith(files.DELETE_DIR_SUFFIX):
        return False
    try:
        files.parse_topic_partition_name(path.name)
    except InvalidLogDirNameError:
        return False
    return True


def _partitions(segments: Sequence[SegmentSummary]) -> dict[Path, _Partition]:
    by_dir: dict[Path, list[SegmentSummary]] = {}
    for summary in segments:
        by_dir.setdefault(summary.path.parent, []).append(summary)
    found = {}
    for dir, summaries in by_dir.items():
        if not _is_partition_dir(dir):
            continue
        ordered = sorted(summaries, key=lambda s: files.offset_from_file_name(s.path.name))
        holes, next_offset = [], None
        for summary in ordered:
            base = files.offset_from_file_name(summary.path.name)
            if next_offset is not None and base > next_offset:
                holes.append((next_offset, base))
            next_offset = base if summary.last_offset is None else summary.last_offset + 1
        first = files.offset_from_file_name(ordered[0].path.name)
        found[dir] = _Partition(files.parse_topic_partition_name(dir.name), dir, first, next_offset or 0,
                                tuple(holes))
    return found


# --- one log dir ------------------------------------------------------------------------------------

def _check_log_dir(root: Path, partitions: dict[Path, _Partition]) -> list[Finding]:
    findings = _check_meta(root)
    children = sorted(d for d in root.iterdir() if d.is_dir() and d.name not in SKIPPED_DIRS)
    dirs = [d for d in children if _is_partition_dir(d)]
    findings += [_other_dir(d) for d in children if d not in dirs]
    registry, registry_findings = _check_registry(root, dirs)
    findings += registry_findings
    for name, action in UNREADABLE_CHECKPOINT.items():
        findings += _check_offsets(root / name, action, partitions)
    for dir in dirs:
        tp = files.parse_topic_partition_name(dir.name)
        record = registry.topics.get(tp.topic) if registry else None
        findings += _check_partition(dir, partitions.get(dir), record)
        if registry is not None:
            findings += _check_registered(dir, tp, record, registry)
    if registry is not None:
        findings += _missing_partitions(root, dirs, registry)
    findings += [Finding(*found) for found in startup_findings(root)]  # Spark jobs in flight, staging
    return findings


def _other_dir(path: Path) -> Finding:
    if path.name.endswith(files.DELETE_DIR_SUFFIX):
        return Finding(path, "a deleted partition's dir", "the broker removes it after log.segment.delete.delay.ms",
                       problem=False)
    if files.is_renamed_partition_dir(path.name):
        return Finding(path, "a future or stray replica dir", "the broker sets it aside, not loaded (tidelog does not "
                       "move replicas between log dirs)", problem=False)
    return Finding(path, "not a partition dir name (<topic>-<partition>)",
                   "the broker sets it aside and loads the rest (Kafka refuses to start)")


def _check_registered(dir: Path, tp: TopicPartition, record: TopicRecord | None,
                      registry: RegistryState) -> list[Finding]:
    """What the broker's reconciliation with the registry does to this partition dir."""
    topic_id = _topic_id(dir)
    if topic_id is not None and topic_id in registry.deleted_topic_ids:
        return [Finding(dir, f"its topic id {topic_id} was deleted (an interrupted topic deletion)",
                        "the broker finishes the deletion: the dir is renamed -delete and removed", problem=False)]
    if record is not None and tp.partition >= record.partitions:
        return [Finding(dir, f"topic {tp.topic} has {record.partitions} partition(s) in the registry",
                        "the broker sets the dir aside as a stray, not served")]
    return []


def _missing_partitions(root: Path, dirs: list[Path], registry: RegistryState) -> list[Finding]:
    """Registered partitions assigned to this log dir whose dir is missing (an interrupted create)."""
    try:
        meta = read_meta_properties(root)
    except (CheckpointError, StorageError):
        return []
    here = meta.directory_id if meta is not None else None
    present = {d.name for d in dirs}
    return [Finding(root / files.partition_dir_name(TopicPartition(name, p)), "registered here but missing",
                    "the broker creates it empty (an interrupted topic create; if its records were there, they "
                    "are gone)")
            for name, record in sorted(registry.topics.items()) for p, where in sorted(record.assignments.items())
            if here is not None and where == here and files.partition_dir_name(TopicPartition(name, p)) not in present]


def _topic_id(dir: Path) -> str | None:
    try:
        return decode_partition_metadata(read_file(dir / PARTITION_METADATA_FILE, "partition metadata")).topic_id
    except (CheckpointError, StorageError):
        return None


def _check_meta(root: Path) -> list[Finding]:
    try:
        read_meta_properties(root)
    except (CheckpointError, StorageError) as e:
        return [Finding(root / files.META_PROPERTIES_FILE, f"unreadable: {e}",
                        "the broker refuses to start on this log dir (Kafka too)")]
    return []


def _check_registry(root: Path, dirs: list[Path]) -> tuple[RegistryState | None, list[Finding]]:
    path = root / REGISTRY_FILE
    with_copy = [d for d in dirs if (d / TOPIC_COPY_FILE).is_file()]
    rebuilt = (f"the broker rebuilds it from the other log dirs' copies and from the topic copies in the partition "
               f"dirs ({len(with_copy)} of {len(dirs)} have one); topics with neither are adopted with Kafka's "
               f"metadata log configs when there is one, else with the defaults, retention and cleaning paused "
               f"until `{CONFIRM}`")
    if not path.exists():
        if not dirs:
            return None, []
        if not with_copy:
            return None, [Finding(path, "missing: no tidelog registry or topic copy here (a Kafka data dir not "
                                        "opened by tidelog yet, or both were lost)", rebuilt, problem=False)]
        return None, [Finding(path, "missing", rebuilt)]
    try:
        data = read_file(path, "topic registry")
    except StorageError as e:
        return None, [Finding(path, f"unreadable: {e}", "a disk fault, not damage: the broker leaves the file as it "
                              "is and keeps the log dir offline (KAFKA_STORAGE_ERROR) until it reads")]
    try:
        registry = decode_registry(data, path)
    except CheckpointError as e:
        epoch = salvage_epoch(data)
        kept = f"kept aside as {REGISTRY_FILE}.damaged-<ms> (never overwritten); " + rebuilt
        return None, [Finding(path, f"unreadable (epoch {'unknown' if epoch is None else epoch}): {e}", kept)]
    held = sorted(name for name, record in registry.topics.items() if record.unconfirmed)
    if not held:
        return registry, []
    return registry, [Finding(path, f"configs unconfirmed for topic(s) {', '.join(held)}",
                              f"retention and cleaning of these topics stay paused until `{CONFIRM}`")]


def _check_offsets(path: Path, unreadable: str, partitions: dict[Path, _Partition]) -> list[Finding]:
    if not path.is_file():
        return []
    try:
        entries = read_checkpoint(path, OFFSET_ENTRY_FORMAT)
    except (CheckpointError, StorageError) as e:
        return [Finding(path, f"unreadable: {e}", unreadable)]
    findings = []
    for tp, offset in entries:
        partition = partitions.get(path.parent / files.partition_dir_name(tp))
        if partition is not None and (found := _offset_finding(path, tp, offset, partition)) is not None:
            findings.append(found)
    return findings


def _offset_finding(path: Path, tp: TopicPartition, offset: int, p: _Partition) -> Finding | None:
    end = p.log_end
    if path.name == LOG_START_OFFSET_CHECKPOINT_FILE and offset > end:
        return Finding(path, f"{tp}: log start offset {offset} is past the log end {end}",
                       f"the broker deletes every segment of {tp} and restarts it empty at offset {offset} (as Kafka "
                       f"does): records [{p.first_base}, {end}) are lost")
    if path.name == RECOVERY_POINT_CHECKPOINT_FILE and offset > end:
        return Finding(path, f"{tp}: recovery point {offset} is past the log end {end}: records [{end}, {offset}) "
                             "that were flushed are gone", f"the broker carries on from the log end {end}")
    if path.name == REPLICATION_OFFSET_CHECKPOINT_FILE and offset > end:
        return Finding(path, f"{tp}: high watermark {offset} is past the log end {end}: acknowledged records "
                             f"[{end}, {offset}) are gone", f"the broker sets the high watermark to the log end {end}")
    if path.name == CLEANER_OFFSET_CHECKPOINT_FILE and not p.first_base <= offset <= end:
        return Finding(path, f"{tp}: cleaner offset {offset} is outside the log [{p.first_base}, {end}]",
                       f"the cleaner resets it to the log start offset and cleans {tp} again from there")
    return None


# --- one partition dir ------------------------------------------------------------------------------

def _check_partition(dir: Path, partition: _Partition | None, record: TopicRecord | None) -> list[Finding]:
    findings = _check_temporary(dir) + _check_epochs(dir) + _check_snapshots(dir) + _check_topic_id(dir, record)
    copy, copy_findings = _check_copy(dir, record)
    findings += copy_findings
    known = [r for r in (record, copy) if r is not None]
    if partition is not None and not any("compact" in r.configs.get("cleanup.policy", "") for r in known):
        for start, end in partition.holes:  # the cleaner leaves such gaps in a compacted log
            findings.append(Finding(
                files.log_file(dir, end), f"offsets [{start}, {end}) are missing before this segment (a segment "
                f"deleted from the middle of the log?{'' if known else ' unless the topic is compacted'})",
                f"the broker serves {partition.tp} across the hole: consumers skip offsets [{start}, {end}) "
                "without an error", problem=bool(known)))
    return findings


def _check_temporary(dir: Path) -> list[Finding]:
    """Files a crash left mid-operation (the loader's first phase deals with them)."""
    actions = {files.DELETED_SUFFIX: "the broker removes it (a deletion that did not finish)",
               files.CLEANED_SUFFIX: "the broker removes it: a clean that never reached its swap is dropped",
               files.SWAP_SUFFIX: "the broker completes the cleaner's swap (or drops it with an unfinished clean)"}
    return [Finding(path, "left by an interrupted operation", action, problem=False)
            for path in sorted(dir.iterdir()) for suffix, action in actions.items() if path.name.endswith(suffix)]


def _check_epochs(dir: Path) -> list[Finding]:
    path = dir / LEADER_EPOCH_CHECKPOINT_FILE
    if not path.is_file():
        return []
    try:
        read_checkpoint(path, EPOCH_ENTRY_FORMAT)
    except (CheckpointError, StorageError) as e:
        return [Finding(path, f"unreadable: {e}", SET_ASIDE + " (Kafka takes the whole log dir offline)")]
    return []


def _check_snapshots(dir: Path) -> list[Finding]:
    findings = []
    for path in sorted(dir.glob("*" + files.PRODUCER_SNAPSHOT_SUFFIX)):
        try:
            read_snapshot(path)
        except (CorruptSnapshotError, StorageError, OSError) as e:
            findings.append(Finding(path, f"unreadable producer snapshot: {e}",
                                    "the broker deletes it and rebuilds the producer state from the segments "
                                    "(idempotent producers' history before the log start is forgotten)"))
    return findings


def _check_topic_id(dir: Path, record: TopicRecord | None) -> list[Finding]:
    path = dir / PARTITION_METADATA_FILE
    if not path.is_file():
        return []
    try:
        topic_id = decode_partition_metadata(read_file(path, "partition metadata"), path).topic_id
    except (CheckpointError, StorageError) as e:
        return [Finding(path, f"unreadable: {e}", "the broker warns and rewrites it with the registry's topic id")]
    if record is not None and topic_id != record.topic_id:
        return [Finding(path, f"topic id {topic_id} differs from the registry's {record.topic_id}",
                        "the broker sets the partition aside, not served (Kafka's InconsistentTopicIdException)")]
    return []


def _check_copy(dir: Path, record: TopicRecord | None) -> tuple[TopicRecord | None, list[Finding]]:
    path = dir / TOPIC_COPY_FILE
    try:
        copy = read_topic_copy(dir)
    except (CheckpointError, StorageError) as e:
        return None, [Finding(path, f"unreadable: {e}", "ignored; the broker rewrites it from the registry")]
    if copy is None:
        return None, []
    if record is None or copy.replace(assignments=record.assignments) == record:
        return copy, []
    if copy.epoch > record.epoch:
        return copy, [Finding(path, f"newer (epoch {copy.epoch}) than the registry's entry (epoch {record.epoch})",
                              f"the broker takes this copy's configs {dict(copy.configs)} and rewrites the registry",
                              problem=False)]
    return copy, [Finding(path, f"older (epoch {copy.epoch}) than the registry's entry (epoch {record.epoch})",
                          "the broker rewrites it from the registry", problem=False)]

