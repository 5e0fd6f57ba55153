"""Compaction across both tiers of a tiered log (beyond Kafka, which refuses tiered compacted topics).

A compacted tiered log keeps its oldest segments only in the remote store. Kafka's cleaner cleans
every segment from the log start to the end of the dirty section each pass; here the remote tier
is cleaned in the same pass, against the same offset map, by the same engine
(:mod:`.remote_view` lets it read remote segments):

1. **Map.** When the dirty section starts below the local log start offset, the offset map is
   built over a :class:`~.remote_view.TierView` of the remote segments below the local start
   followed by the local segments (each remote one downloaded in turn); otherwise over the local
   log as before.
2. **Remote tier.** Every finished remote segment starting below the map's end is grouped
   (:func:`~.clean.group_segments_by_size`, index sizes estimated from the ``.log`` size and
   ``index.interval.bytes``: no I/O) and each group cleaned by the engine's ``clean_group`` into
   the workspace. A group of one segment whose cleaned ``.log`` is byte-identical to the source
   is kept as it is (nothing uploaded). Any other result is staged as a new remote segment with a
   fresh id (COPY_SEGMENT_STARTED, then Kafka's file set: ``.log``, ``.index``, ``.timeindex``,
   ``.txnindex`` when non-empty, the last source segment's producer snapshot and leader-epoch
   checkpoint, whose offsets it ends at). The offsets of each group are kept whole: the new
   segment spans the group's first start offset to its last end offset, with the group's leader
   epochs, even when every record was removed (an empty ``.log``, as Kafka keeps empty cleaned
   segments locally), so the remote ranges stay contiguous and the highest remote offset is
   unchanged.
   An engine with ``clean_remote_groups`` (the Spark engine's tiered pass,
   :mod:`tidelog.spark.remote_compaction`) takes this step over: each group's replacement is first
   recorded COPY_SEGMENT_STARTED under a fresh id (:func:`reserved_segment`), then the engine
   cleans every group and uploads each changed one under its id through :func:`stage_cleaned`
   (the same upload step), on hosts that read and write the store, not the log dir.
3. **Switch.** After the fence (:meth:`TieredPass._check_unchanged`: the metadata read again;
   the replaced segments must still be FINISHED and the staged ones STARTED, else the pass gives
   up), one :meth:`~tidelog.remote.metadata_log.RemotePartitionMetadata.swap` event moves
   the replaced segments to DELETE_SEGMENT_STARTED and the staged ones to FINISHED: a reader of
   the metadata sees the old set or the new one, never a mix. No reader lists the replaced
   segments any more, and their objects stay ``file.delete.delay.ms`` from the swap's time (read
   from the store, so a restart changes nothing), so a reader mid-read finishes: the cleanups of
   the copy pass, the remote expiration and the next remote clean
   (:func:`~tidelog.remote.copy.clean_unreferenced`) delete them once it is over.
4. **Local tier.** Cleaned as before; for a tiered log the local groups never mix segments the
   remote tier holds with segments it does not (:func:`~.clean.split_groups_at`), or the copy
   pass would copy a merged segment overlapping remote ones.

With ``remote.log.copy.disable=true`` the remote data is read-only (Kafka uploads nothing more):
steps 1 to 3 are skipped and the pass cleans the local tier alone; replaced segments already
waiting are still deleted, as remote retention still deletes.

Both tiers see the same decisions (same map, same round: time, delete horizon, producers), so a
segment both local and remote is cleaned alike in each, and the records the two tiers keep are the
records an untiered log keeps. The pass holds the partition's ``task_lock`` from the start of the
pass to its end (a copy or a remote expiration of the partition waits; the copy pass's cleanup of
STARTED segments never runs beside a staged one). An error (an abort included) before the switch
deletes what was staged (best effort; what remains is STARTED, and cleanup deletes it).

Cost per pass: every remote segment below the map's end is downloaded once (twice for the ones in
the dirty section: map and rewrite); uploads only for groups that changed; one metadata event per
staged segment plus one swap. Disk: one source segment plus one cleaned group in the workspace.
"""

from __future__ import annotations

import filecmp
import logging
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

from tidelog.errors import LogCleaningAbortedError, TidelogError
from tidelog.cleaner.clean import group_segments_by_size
from tidelog.cleaner.remote_view import WORKSPACE_DIR, RemoteSegment, TierView, Workspace
from tidelog.cleaner.retain import CleaningRound
from tidelog.cleaner.stats import CleanerStats
from tidelog.cleaner.transactions import CleanedTransactionMetadata
from tidelog.remote.metadata import (
    RemoteFileKind,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    object_key,
)
from tidelog.remote.copy import clean_unreferenced, delete_remote_segment, new_segment_metadata, upload_objects
from tidelog.remote.metadata_log import RemotePartitionMetadata
from tidelog.remote.segment_files import pin_segment_files
from tidelog.remote.store import RemoteStore
from tidelog.storage import fileops, files
from tidelog.storage.atomic import write_file
from tidelog.storage.log import Log
from tidelog.storage.segment import LogSegment
from tidelog.topic_partition import TopicPartition

logger = logging.getLogger(__name__)

RemotePartition = tuple[RemoteStore, RemotePartitionMetadata]
RemoteSource = Callable[[TopicPartition, Log, bool], "RemotePartition | None"]
"""``source(tp, log, load)``: the store and remote metadata of a tiered log (loaded if needed when
``load``; else only what is already loaded, without I/O), None when the log is not tiered or there
is no remote tier."""

Span = tuple[int, int, int]  # (start offset, end offset inclusive, bytes) of a remote-only segment


def remote_only_spans(log: Log, metadata: RemotePartitionMetadata | None) -> list[Span]:
    """The finished remote segments wholly below the local log start offset (held only
    remotely), as spans, for the dirty ratio. From cached metadata: no I/O."""
    if metadata is None:
        return []
    local_start = log.local_log_start_offset
    return [(m.start_offset, m.end_offset, m.segment_size_in_bytes) for m in metadata.finished_segments()
            if m.end_offset < local_start]


@dataclass(slots=True)
class _Staged:
    old: list[RemoteLogSegmentMetadata]
    new: RemoteLogSegmentMetadata


class TieredPass:
    """One cleaning pass's remote side for one partition (module docstring). Holds the
    partition's ``task_lock`` from :meth:`open` to :meth:`close`. Not thread-safe."""

    def __init__(self, tp: TopicPartition, log: Log, store: RemoteStore, metadata: RemotePartitionMetadata) -> None:
        self.tp = tp
        self.log = log
        self.store = store
        self.metadata = metadata
        metadata.task_lock.acquire()
        try:
            self._clean_orphans()
            root = log.dir.parent / WORKSPACE_DIR / log.dir.name
            self.workspace = Workspace(root, store, log.config, log.clock)
        except BaseException:
            metadata.task_lock.release()
            raise
        self.remote = [RemoteSegment(m, self.workspace) for m in metadata.finished_segments()]
        self.highest_remote = max(metadata.highest_offset(), log.highest_offset_in_remote_storage)
        self._staged: list[_Staged] = []
        self._swap_tried = False

    def close(self) -> None:
        """Remove the workspace and release the ``task_lock``."""
        try:
            self.workspace.close()
        finally:
            self.metadata.task_lock.release()

    def _clean_orphans(self) -> None:
        """Delete STARTED segments (a crashed copy or clean: no other task runs while the lock is
        held) and DELETE_STARTED ones whose ``file.delete.delay.ms`` from their swap is over."""
        clean_unreferenced(self.store, self.metadata, now_ms=self.log.clock.milliseconds(),
                           delete_delay_ms=self.log.config.file_delete_delay_ms)

    # --- the map -------------------------------------------------------------------------------

    def map_source(self, first_dirty: int) -> Log | TierView:
        """What the offset map reads: the local log, or, when the dirty section starts below the
        local log start offset, the remote segments below it followed by the local segments."""
        local_start = self.log.local_log_start_offset
        below = [s for s in self.remote if s.base_offset < local_start]
        if first_dirty >= local_start or not below:
            return self.log
        remote_end = below[-1].metadata.end_offset + 1
        local = self.log.segments
        following = [s for i, s in enumerate(local)
                     if (local[i + 1].base_offset if i + 1 < len(local) else self.log.log_end_offset + 1) > remote_end]
        return TierView(self.log, [*below, *following], self.workspace.out)

    # --- the remote tier -------------------------------------------------------------------------

    def clean_remote(self, engine: object, round: CleaningRound, legacy_horizon: int, stats: CleanerStats,
                     end_offset: int, check_done: Callable[[TopicPartition], None]) -> int:
        """Clean every remote segment starting below ``end_offset`` with ``engine`` (its
        ``clean_remote_groups`` when it has one, else its ``clean_group`` per group here), stage
        what changed and switch in one swap; returns the number of segments replaced. An
        exception before the switch deletes what was staged; one caused by another writer's
        change is raised as the fence's :class:`LogCleaningAbortedError`."""
        tp = self.log.topic_partition
        segments = [s for s in self.remote if s.base_offset < end_offset]
        if not segments:
            return 0
        view = TierView(self.log, segments, self.workspace.out)
        txn = CleanedTransactionMetadata([], lambda _: None)
        try:
            groups = group_remote(segments, self.log, round.upper_bound_offset)
            on_engine = getattr(engine, "clean_remote_groups", None)
            if on_engine is not None:
                self._clean_on_engine(on_engine, view, groups, round, legacy_horizon, stats, check_done)
            else:
                for group in groups:
                    check_done(tp)
                    cleaned = engine.clean_group(view, group, round, txn, legacy_horizon, stats,  # type: ignore[attr-defined]
                                                 check_done)
                    self._stage(group, cleaned)
            check_done(tp)
            return self._switch()
        except Exception as e:
            gave_up = self._gave_up(e, [s.metadata for s in segments])
            self._abandon_staged()
            if gave_up is not None:
                raise gave_up from e
            raise

    def _gave_up(self, error: Exception, cleaning: list[RemoteLogSegmentMetadata]) -> LogCleaningAbortedError | None:
        """Why the pass failed, when another writer changed the segments it was cleaning (an
        object read failed because retention deleted its segment meanwhile): the fence's abort,
        else None (the failure stands; also when the metadata cannot be read again)."""
        if isinstance(error, LogCleaningAbortedError) or self._swap_tried:
            return None  # a swap whose answer was lost may have landed: its own change, not another's
        try:
            self._check_unchanged(cleaning)
        except LogCleaningAbortedError as e:
            return e
        except Exception as e:  # noqa: BLE001 - the pass's own error is what the caller sees
            logger.debug("%s: remote metadata not re-read after a failed pass: %s", self.tp, e)
        return None

    def _stage(self, group: Sequence[RemoteSegment], cleaned: LogSegment) -> None:
        """Upload ``cleaned`` as the replacement of ``group`` (STARTED), unless it is the single
        source segment unchanged. The workspace's output is emptied either way."""
        try:
            if len(group) == 1 and self._same_bytes(group[0], cleaned):
                return
            cleaned.change_file_suffixes(files.CLEANED_SUFFIX, "")
            cleaned.close_handlers()
            self.workspace.release()
            staged = self._upload(group, cleaned.base_offset)
            self._staged.append(_Staged([s.metadata for s in group], staged))
        finally:
            cleaned.delete_files()
            for path in self.workspace.out.iterdir():
                fileops.unlink(path)

    def _same_bytes(self, source: RemoteSegment, cleaned: LogSegment) -> bool:
        if cleaned.size != source.size:
            return False
        original = self.workspace.materialize(source).log.path
        return filecmp.cmp(original, cleaned.log.path, shallow=False)

    def _upload(self, group: Sequence[RemoteSegment], base: int) -> RemoteLogSegmentMetadata:
        """Stage the cleaned segment in ``workspace.out`` as a new remote segment
        (:func:`stage_cleaned`, recorded COPY_SEGMENT_STARTED by the metadata's ``begin_copy``)."""
        return stage_cleaned(self.store, self.workspace.out, base, [s.metadata for s in group],
                             self.metadata.begin_copy)

    def _clean_on_engine(self, clean_remote_groups: Callable[..., list[RemoteLogSegmentMetadata | None]],
                         view: TierView, groups: list[list[RemoteSegment]], round: CleaningRound,
                         legacy_horizon: int, stats: CleanerStats, check_done: Callable[[TopicPartition], None]) -> None:
        """The engine cleans and uploads every group itself (a Spark job whose executors read and
        write the store): each group's replacement is first reserved here, COPY_SEGMENT_STARTED
        under a fresh id (:func:`reserved_segment`), so cleanup finds whatever the engine
        uploaded if the pass dies; the engine returns per group the segment as uploaded under
        that id, or None when the group is a single segment left unchanged (its reservation is
        then deleted: nothing was uploaded)."""
        check_done(self.tp)
        for group in groups:
            metas = [s.metadata for s in group]
            self._staged.append(_Staged(metas, self.metadata.begin_copy(reserved_segment(metas))))
        reserved = [s.new for s in self._staged]
        results = clean_remote_groups(self.store, view, groups, reserved, round, legacy_horizon, stats, check_done)
        self._check_unchanged()  # before this pass writes again: the job may have run for long
        kept = []
        for staged, result in zip(list(self._staged), results, strict=True):
            if result is None:
                delete_remote_segment(self.store, self.metadata, staged.new)
            else:
                kept.append(_Staged(staged.old, result))
        self._staged = kept

    def _switch(self) -> int:
        if not self._staged:
            return 0
        self._check_unchanged()
        self._swap_tried = True
        old = [m for s in self._staged for m in s.old]
        self.metadata.swap(old, [s.new for s in self._staged])
        self._staged = []
        logger.info("%s: %d remote segment(s) replaced by their cleaned versions", self.log.topic_partition, len(old))
        return len(old)

    def _check_unchanged(self, cleaning: list[RemoteLogSegmentMetadata] | None = None) -> None:
        """The fence: the metadata is read again from the store, and every segment to replace
        must still be FINISHED and every staged one still COPY_SEGMENT_STARTED; otherwise
        another writer (retention, a copy or a clean that does not hold this process's
        ``task_lock``: another process) changed the partition meanwhile, and
        :class:`LogCleaningAbortedError` makes the pass give up (its caller deletes what it
        staged). Run before the swap, after an engine's job before the pass writes again, and
        after a failure (``cleaning``: every segment the pass was cleaning) to tell a change by
        another writer from a fault.
        The metadata log has one writer per partition (its events are numbered without a
        conditional PUT), so the fence catches a change made while this pass was not writing
        (the job, the time before the swap); two writers interleaving events are excluded by
        the data dir's lock, not by this check."""
        self.metadata.reload()
        finished, started = RemoteLogSegmentState.COPY_SEGMENT_FINISHED, RemoteLogSegmentState.COPY_SEGMENT_STARTED
        old = [m for s in self._staged for m in s.old] if cleaning is None else cleaning
        expected = [(m, finished) for m in old] + [(s.new, started) for s in self._staged]
        for segment, wanted in expected:
            current = self.metadata.segment(segment)
            if current is None or current.state != wanted:
                now = "gone" if current is None else current.state.name
                raise LogCleaningAbortedError(
                    f"remote segment {segment.start_offset}..{segment.end_offset} ({segment.id}) of {self.tp} changed "
                    f"while it was cleaned (now {now}, expected {wanted.name}): the clean of offsets "
                    f"{old[0].start_offset}..{old[-1].end_offset} gives up and deletes its uploads",
                    topic_partition=str(self.tp))

    def _abandon_staged(self) -> None:
        """Delete the staged segments still COPY_SEGMENT_STARTED, best effort (cleanup deletes
        what remains). The metadata is settled first: a swap whose answer was lost may have
        published them, and then they are the only segments of their offsets."""
        staged, self._staged = self._staged, []
        try:
            self.metadata.settle()
        except Exception as e:  # noqa: BLE001 - the pass's own error is what the caller sees
            logger.warning("%s: staged remote segments left to cleanup: %s", self.tp, e)
            return
        for s in staged:
            current = self.metadata.segment(s.new)
            if current is None or current.state != RemoteLogSegmentState.COPY_SEGMENT_STARTED:
                continue
            try:
                delete_remote_segment(self.store, self.metadata, current)
            except Exception as e:  # noqa: BLE001 - as above
                logger.warning("staged remote segment %s not deleted yet (cleanup retries): %s", s.new.id, e)


def stage_cleaned(store: RemoteStore, out: Path, base: int, group: Sequence[RemoteLogSegmentMetadata],
                  begin: Callable[[RemoteLogSegmentMetadata], RemoteLogSegmentMetadata]) -> RemoteLogSegmentMetadata:
    """Upload the cleaned segment at ``base`` in ``out`` (files under their final names) as the
    replacement of the remote segments ``group``: the last one's producer snapshot written
    beside it, then ``begin(metadata)`` (a fresh id, the cleaned files' size, max timestamp and
    txn index, the group's offsets and leader epochs; ``begin`` records it
    COPY_SEGMENT_STARTED, or, on an executor, gives it the id the owner reserved), then each
    object of Kafka's file set as a copy uploads it (:func:`~tidelog.remote.copy.upload_objects`)
    with the last one's leader-epoch checkpoint. The one implementation of the step, in process
    and on Spark executors. Returns the segment as ``begin`` returned it."""
    last = group[-1]
    next_base = last.end_offset + 1
    write_file(files.producer_snapshot_file(out, next_base),
               store.get(object_key(last, RemoteFileKind.PRODUCER_SNAPSHOT)), sync=False,
               what="staged producer snapshot")
    epochs_text = store.get(object_key(last, RemoteFileKind.LEADER_EPOCH))
    tip = last.topic_id_partition
    with pin_segment_files(out, base, next_base, partition=str(tip.topic_partition)) as pinned:
        started = begin(new_segment_metadata(tip, pinned, merged_epochs(group)))
        upload_objects(store, started, pinned, epochs_text)
    return started


def reserved_segment(group: Sequence[RemoteLogSegmentMetadata]) -> RemoteLogSegmentMetadata:
    """A fresh id for the replacement of ``group`` (its offsets and leader epochs, size 0 until
    uploaded), to record COPY_SEGMENT_STARTED before an engine uploads under it: every object key
    depends only on the id and the start offset, so cleanup deletes what was uploaded."""
    first, last = group[0], group[-1]
    return RemoteLogSegmentMetadata(RemoteLogSegmentId.generate(first.topic_id_partition), first.start_offset,
                                    last.end_offset, last.max_timestamp_ms, -1, -1, 0, merged_epochs(group))


def group_remote(segments: Sequence[RemoteSegment], log: Log, first_uncleanable: int) -> list[list[RemoteSegment]]:
    """:func:`~.clean.group_segments_by_size` over remote segments, each index's entries
    estimated as ``size // index.interval.bytes + 1`` (an upper bound of what the index holds)."""
    interval = max(1, log.config.index_interval_bytes)
    sized = []
    for s in segments:
        entries = SimpleNamespace(entries=s.size // interval + 1)
        sized.append(SimpleNamespace(base_offset=s.base_offset, size=s.size, offset_index=entries, time_index=entries,
                                     segment=s))
    groups = group_segments_by_size(sized, log.config.segment_bytes, log.config.segment_index_bytes,  # type: ignore[arg-type]
                                    first_uncleanable)
    return [[g.segment for g in group] for group in groups]  # type: ignore[attr-defined]


def merged_epochs(segments: Iterable[RemoteLogSegmentMetadata]) -> tuple[tuple[int, int], ...]:
    """The leader epochs of consecutive segments as one segment's: each epoch once, at the first
    offset it starts in the group."""
    out: list[tuple[int, int]] = []
    for segment in segments:
        for epoch, offset in segment.segment_leader_epochs:
            if not out or epoch > out[-1][0]:
                out.append((epoch, offset))
    return tuple(out)


class RemoteCleaning:
    """What the cleaner threads share for tiered logs: the injected :data:`RemoteSource` and each
    tiered compacted log's remote-only spans as last loaded. Thread-safe (a lock for the spans)."""

    def __init__(self, source: RemoteSource) -> None:
        self._source = source
        self._lock = threading.Lock()
        self._spans: dict[TopicPartition, list[Span]] = {}

    def load(self, pairs: Iterable[tuple[TopicPartition, Log]]) -> None:
        """Thread-safe (its lock for the note). Note the remote-only spans of the tiered compacted
        logs among ``pairs`` whose remote data is not read-only, loading their
        remote metadata first where it is not loaded yet (a LIST and GETs each, once per
        process), for :meth:`spans`; a failure is logged and the log is weighed on its local
        bytes. Call it without the cleaner manager's lock: it does I/O, and reading the metadata
        may wait for a remote write of the partition."""
        for tp, log in pairs:
            if not (log.config.remote_copy_enabled and log.config.compact):
                continue
            try:
                found = self._source(tp, log, True)
            except TidelogError as e:
                logger.warning("%s: remote metadata not loaded for the cleaner: %s", tp, e)
                continue
            spans = remote_only_spans(log, found[1] if found is not None else None)
            with self._lock:
                self._spans[tp] = spans

    def spans(self, tp: TopicPartition, log: Log) -> list[Span]:
        """``log``'s remote-only spans as the last :meth:`load` noted them (for the dirty ratio;
        none when its remote data is read-only: the cleaner leaves it); no I/O, no metadata lock:
        the cleaner manager calls it under its own lock. Thread-safe (its lock)."""
        if not log.config.remote_copy_enabled:
            return []
        with self._lock:
            return list(self._spans.get(tp, ()))

    def open_pass(self, tp: TopicPartition, log: Log) -> TieredPass | None:
        """The remote side of a pass over ``log``, None when it is not tiered or its remote data
        is read-only (``remote.log.copy.disable``: nothing more is uploaded, cleaned segments
        included; the pass cleans the local tier alone). Loads the remote metadata if needed;
        takes the partition's ``task_lock`` until the pass closes, so it waits for a copy or an
        expiration of the partition in progress. Thread-safe; one pass per partition at a time
        (the cleaner manager's states see to it)."""
        if not log.config.remote_copy_enabled:
            return None
        found = self._source(tp, log, True)
        if found is None:
            return None
        store, metadata = found
        return TieredPass(tp, log, store, metadata)
