"""The log cleaner service: cleaner threads, the shared I/O throttle, metrics (Kafka's ``LogCleaner``).

Each of ``log.cleaner.threads`` threads loops (kafka-storage.md §3.7.1): take the filthiest
compacted log (:meth:`CleanerManager.grab_filthiest_compacted_log`), clean it, then run the
retention pass over every compacted log not busy elsewhere (Kafka's order: compacted logs get
their time, size and log-start-offset retention from here, not from the log manager's task); if
nothing was cleaned, sleep ``log.cleaner.backoff.ms``; then forget quarantine entries of
partitions that no longer exist. :meth:`LogCleaner.run_once` is one such iteration, on demand (the
CLI and tests drive it; the threads call it too).

The engine that dedupes and rewrites (:func:`cleaning_engine`) is the tidelog-only broker config
``tidelog.cleaner.engine``: ``in-process`` (default: numba kernels in the cleaner threads), or an
engine injected by whoever starts the cleaner as an :data:`EngineFactory` under its name (``tidelog
serve`` and the CLI hand over ``spark``, :mod:`tidelog.spark.engine`; same bytes). This layer knows
only the in-process engine, so it never imports a front door.

Failures never stop a thread (beyond Kafka: its thread dies on an unexpected error and counts in
``DeadThreadCount``): an aborted clean just stops; any other error quarantines that partition with
the error recorded (see :class:`CleanerManager`), and the thread goes on with the others.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from tidelog import retention
from tidelog.clock import Clock
from tidelog.cleaner.clean import Cleaner, CleanerBuffers, CleaningEngine, InProcessEngine
from tidelog.cleaner.manager import CleanerManager
from tidelog.cleaner.plan import LogToClean
from tidelog.cleaner.quarantine import PHASE_CLEANING, PHASE_RETENTION
from tidelog.cleaner.remote_clean import RemoteCleaning, RemoteSource
from tidelog.cleaner.stats import CleanerStats
from tidelog.cleaner.throttler import Throttler
from tidelog.errors import ConfigError, LogCleaningAbortedError, LogCleaningError
from tidelog.storage.config import BrokerConfig
from tidelog.storage.log import Log
from tidelog.topic_partition import TopicPartition

logger = logging.getLogger(__name__)

LogsSource = Callable[[], Iterable[tuple[TopicPartition, Log]]]

ENGINE_IN_PROCESS = "in-process"  # the default value of tidelog.cleaner.engine

EngineFactory = Callable[[CleanerBuffers, Throttler | None, str], CleaningEngine]
"""Builds one cleaner thread's engine from its buffers, the shared throttle and the engine's master
URL (``tidelog.cleaner.spark.master``, or ``tidelog clean run --master``); raises ConfigError when
the engine cannot run here."""

NO_ENGINES: Mapping[str, EngineFactory] = MappingProxyType({})


def cleaning_engine(name: str, buffers: CleanerBuffers, throttler: Throttler | None = None, *,
                    master: str = "local[2]", engines: Mapping[str, EngineFactory] = NO_ENGINES) -> CleaningEngine:
    """A new engine ``name`` (``tidelog.cleaner.engine``): in-process, or one of ``engines`` on
    ``master``. ConfigError naming the key for a name not among them, or from the factory."""
    if name == ENGINE_IN_PROCESS:
        return InProcessEngine(buffers, throttler)
    factory = engines.get(name)
    if factory is None:
        known = " or ".join([ENGINE_IN_PROCESS, *engines])
        raise ConfigError(f"unknown cleaner engine {name!r} ({known})", config="tidelog.cleaner.engine")
    return factory(buffers, throttler, master)


@dataclass(frozen=True, slots=True)
class CleaningResult:
    """What one clean of one log did (``tidelog clean run`` prints these)."""

    topic_partition: TopicPartition
    first_dirty_offset: int
    end_offset: int
    stats: CleanerStats | None
    error: str | None = None
    aborted: bool = False


class _CleanerThread:
    """One cleaner: its own offset map and buffers (Kafka's CleanerThread), run by a thread or
    called directly."""

    def __init__(self, index: int, owner: LogCleaner) -> None:
        self.index = index
        self.name = f"tidelog-log-cleaner-thread-{index}"
        self._owner = owner
        self.engine = cleaning_engine(owner.broker.tidelog_cleaner_engine, owner.buffers, owner.throttler,
                                      master=owner.broker.tidelog_cleaner_spark_master, engines=owner.engines)
        self.last_stats: CleanerStats | None = None
        self.thread: threading.Thread | None = None
        self._current: Log | None = None  # the log being cleaned (one at a time)
        self._end = -1  # its checkpointed progress: the first dirty offset after the last pass
        self.cleaner = Cleaner(
            self.engine, owner.clock, check_done=owner.manager.check_cleaning_aborted,
            on_pass_done=self._pass_done, producer_id_expiration_ms=owner.broker.producer_id_expiration_ms,
            name=self.name, remote=owner.remote,
        )

    def use_engine(self, engine: CleaningEngine) -> None:
        self.engine = self.cleaner.engine = engine

    def _pass_done(self, tp: TopicPartition, end_offset: int) -> None:
        """Between passes of a multi-pass clean: checkpoint the progress, so an abort or a crash
        later in the clean keeps what is already done."""
        self._end = end_offset
        if self._current is not None:
            self._owner.manager.update_checkpoints(self._current.dir.parent, tp, end_offset)

    def clean_log(self, to_clean: LogToClean) -> CleaningResult:
        """Clean one log already marked in progress; always leaves the in-progress state."""
        tp, lg = to_clean.topic_partition, to_clean.log
        start = to_clean.first_dirty_offset
        self._current, self._end = lg, start
        try:
            self._end, stats = self.cleaner.clean(to_clean)
            self.last_stats = stats
            return CleaningResult(tp, start, self._end, stats)
        except LogCleaningAbortedError:
            return CleaningResult(tp, start, self._end, None, aborted=True)
        except Exception as e:  # noqa: BLE001 - one bad partition never stops the cleaner
            self._owner.quarantine(tp, lg, e)
            return CleaningResult(tp, start, self._end, None, error=str(e))
        finally:
            self._current = None
            self._owner.manager.done_cleaning(tp, lg.dir.parent, self._end)


class LogCleaner:
    """Owns the cleaner threads and the :class:`CleanerManager` (states, checkpoints, quarantine).
    ``engines``: the engines other than in-process that ``tidelog.cleaner.engine`` may name.
    ``remote``: the remote tier's store and metadata of a tiered log (:mod:`.remote_clean`);
    with it, tiered compacted logs are cleaned across both tiers."""

    def __init__(self, broker: BrokerConfig, log_dirs: Sequence[Path], logs: LogsSource, clock: Clock,
                 *, manager: CleanerManager | None = None, engines: Mapping[str, EngineFactory] = NO_ENGINES,
                 remote: RemoteSource | None = None) -> None:
        self.broker = broker
        self.engines = engines
        self.clock = clock
        self._logs = logs
        self.remote = None if remote is None else RemoteCleaning(remote)
        self.manager = manager or CleanerManager(
            list(log_dirs), logs, clock, remote_spans=None if self.remote is None else self.remote.spans,
            remote_load=None if self.remote is None else self.remote.load)
        self.buffers = CleanerBuffers.for_thread(broker)
        self.throttler = Throttler(broker.log_cleaner_io_max_bytes_per_second, clock)
        self._threads = [_CleanerThread(i, self) for i in range(max(1, broker.log_cleaner_threads))]
        self._stop = threading.Event()
        self._started = False
        self.dead_threads = 0
        # each compacted partition's retention reason code from the last retention pass of the
        # cleaner threads (retention.RetentionPlan.reason); replaced whole: read without a lock
        self.retention_reasons: Mapping[TopicPartition, str] = MappingProxyType({})

    def use_engine(self, name: str, *, master: str | None = None) -> None:
        """Clean with engine ``name`` from now on (``tidelog clean run --engine``), ``master``
        defaulting to ``tidelog.cleaner.spark.master``; not while the threads run."""
        if self._started:
            raise LogCleaningError("cannot change the cleaner engine while the cleaner threads run")
        for worker in self._threads:
            worker.use_engine(cleaning_engine(name, self.buffers, self.throttler, engines=self.engines,
                                              master=master or self.broker.tidelog_cleaner_spark_master))

    # --- lifecycle ------------------------------------------------------------------------------

    def startup(self) -> None:
        """Start ``log.cleaner.threads`` threads (none when it is 0)."""
        if self._started or self.broker.log_cleaner_threads == 0:
            return
        self._started = True
        for worker in self._threads:
            worker.thread = threading.Thread(target=self._run, args=(worker,), name=worker.name, daemon=True)
            worker.thread.start()

    def shutdown(self) -> None:
        """Stop the threads; a clean in progress is aborted at its next chunk (nothing half done is
        installed: the swap protocol either completes or never starts)."""
        self._stop.set()
        self.manager.abort_all()
        for worker in self._threads:
            if worker.thread is not None:
                worker.thread.join()
        self._started = False

    def _run(self, worker: _CleanerThread) -> None:
        backoff_s = self.broker.log_cleaner_backoff_ms / 1000
        while not self._stop.is_set():
            try:
                cleaned = self.run_once(worker.index)
            except Exception:  # noqa: BLE001 - the loop itself must survive anything
                logger.exception("%s: unexpected error", worker.name)
                cleaned = None
            if cleaned is None:
                self._stop.wait(backoff_s)

    # --- one iteration, on demand ---------------------------------------------------------------

    def run_once(self, thread_index: int = 0) -> CleaningResult | None:
        """Clean the filthiest log (if any is cleanable), then the retention pass over compacted
        logs, then quarantine upkeep. Returns what was cleaned, or None."""
        worker = self._threads[thread_index]
        result = None
        if self.remote is not None:
            self.remote.load(list(self._logs()))
        to_clean = self.manager.grab_filthiest_compacted_log()
        if to_clean is not None:
            result = worker.clean_log(to_clean)
        self.delete_old_segments_of_compacted_logs()
        self.manager.maintain_uncleanable()
        return result

    def delete_old_segments_of_compacted_logs(self) -> list[retention.RetentionPlan]:
        """Retention for compacted logs (``compact,delete`` gets time and size retention; every
        compacted log gets the log-start-offset pass), each marked busy while it runs."""
        deletable = self.manager.deletable_logs()
        plans = []
        now = self.clock.milliseconds()
        try:
            for tp, lg in deletable:
                try:
                    plans.append(retention.delete_old_segments(lg, now))
                except Exception as e:  # noqa: BLE001 - quarantine this one, go on with the rest
                    self.quarantine(tp, lg, e, phase=PHASE_RETENTION)
                else:
                    self.manager.clear_uncleanable(tp, PHASE_RETENTION)
        finally:
            self.manager.done_deleting([tp for tp, _ in deletable])
        live = {tp for tp, _ in self._logs()}  # a busy partition keeps its previous reason
        self.retention_reasons = retention.merged_reasons(self.retention_reasons, plans, live)
        return plans

    def clean_now(self, tp: TopicPartition, *, force: bool = False) -> CleaningResult | None:
        """Clean one partition now (``tidelog clean run``): with ``force`` whatever the dirty
        ratio, else only when it is a candidate. None when nothing is cleanable or it is busy."""
        if self.remote is not None:
            self.remote.load(pair for pair in self._logs() if pair[0] == tp)
        to_clean = self.manager.grab_for_cleaning(tp, force=force)
        if to_clean is None:
            return None
        return self._threads[0].clean_log(to_clean)

    def dry_run(self, tp: TopicPartition) -> DryRunReport | None:
        """What one pass over ``tp`` would remove, computed without writing anything."""
        to_clean = self.manager.grab_for_cleaning(tp, force=True)
        if to_clean is None:
            return None
        try:
            stats = self._threads[0].cleaner.measure_pass(to_clean.log, tp, to_clean.first_dirty_offset,
                                                          to_clean.first_uncleanable_offset)
            return DryRunReport(tp, to_clean.first_dirty_offset, to_clean.first_uncleanable_offset, stats)
        finally:
            self.manager.done_cleaning(tp, to_clean.log.dir.parent, None)

    # --- helpers ---------------------------------------------------------------------------------

    def quarantine(self, tp: TopicPartition, lg: Log, error: BaseException, phase: str = PHASE_CLEANING) -> None:
        wrapped = error if isinstance(error, LogCleaningError) else LogCleaningError(
            f"{phase} failed: {error}", topic_partition=str(tp))
        if wrapped is not error:
            wrapped.__cause__ = error
        logger.warning("%s: quarantined by the cleaner (%s): %s", tp, phase, error)
        self.manager.mark_uncleanable(tp, lg.dir.parent, wrapped, phase=phase)

    # --- metrics ----------------------------------------------------------------------------------

    def metrics(self) -> dict[str, float]:
        """Kafka's LogCleaner and LogCleanerManager gauges (per log dir ones keyed by dir)."""
        stats = [w.last_stats for w in self._threads if w.last_stats is not None]
        read = sum(s.bytes_read for s in stats)
        written = sum(s.bytes_written for s in stats)
        out: dict[str, float] = {
            "max-buffer-utilization-percent": max((100 * s.buffer_utilization for s in stats), default=0.0),
            "cleaner-recopy-percent": 100.0 * written / read if read else 0.0,
            "max-clean-time-secs": max((s.elapsed_secs for s in stats), default=0.0),
            "max-compaction-delay-secs": self.manager.max_compaction_delay_ms / 1000,
            "DeadThreadCount": float(self._dead_thread_count()),
            "max-dirty-percent": self.manager.max_dirty_percent,
            "time-since-last-run-ms": float(self.manager.time_since_last_run_ms),
        }
        for log_dir in self.manager.log_dirs:
            out[f"uncleanable-partitions-count[{log_dir}]"] = float(self.manager.uncleanable_partitions_count(log_dir))
            out[f"uncleanable-bytes[{log_dir}]"] = float(self.manager.uncleanable_bytes(log_dir))
        return out

    def _dead_thread_count(self) -> int:
        if not self._started:
            return 0
        return sum(1 for w in self._threads if w.thread is not None and not w.thread.is_alive())


@dataclass(frozen=True, slots=True)
class DryRunReport:
    """What ``tidelog clean run --dry-run`` reports for one partition (first pass only when the
    offset map would fill)."""

    topic_partition: TopicPartition
    first_dirty_offset: int
    first_uncleanable_offset: int
    stats: CleanerStats
