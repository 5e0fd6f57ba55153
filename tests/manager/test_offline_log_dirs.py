"""Disk faults take a log dir offline, the other dirs keep serving, and the dir comes back when a
probe passes (:mod:`tidelog.manager.log_dir_failure`).

Faults are injected through the file-operation seam (``tidelog.storage.fileops``) on real files;
time is a FakeClock, the probe runs on the FakeScheduler. Every test counts the faults it fired
(``TIDELOG_FAULT_FIGURES``: when set, the module's total is appended to that file as JSON).
"""

from __future__ import annotations

import errno
import json
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from manager_helpers import Opener, batch, read_offsets, recovery_points, registry, tp

from tidelog.errors import LogDirOfflineError, StorageError
from tidelog.manager import LogManager
from tidelog.manager.log_dir_failure import PROBE_FILE, ProbeBackoff
from tidelog.manager.recovery import RecoveryJob, recover_partition
from tidelog.manager.topic_copies import TOPIC_COPY_FILE, read_topic_copy, write_topic_copy
from tidelog.manager.topics import REGISTRY_FILE
from tidelog.storage import fileops
from tidelog.storage.fileops import FaultRule, FaultStats, FileOp, WRITE_OPS
from tidelog.storage.metadata import has_clean_shutdown
from tidelog.storage.verify import verify_paths

FIRED: dict[str, int] = {}


@pytest.fixture(scope="module", autouse=True)
def _fault_figures() -> Iterator[None]:
    yield
    target = os.environ.get("TIDELOG_FAULT_FIGURES")
    if target:
        with open(target, "a") as out:
            out.write(json.dumps({"module": __name__, "faults_fired": sum(FIRED.values()), "tests": FIRED}) + "\n")


@contextmanager
def faults(request: pytest.FixtureRequest, *rules: FaultRule) -> Iterator[FaultStats]:
    with fileops.inject(*rules) as stats:
        try:
            yield stats
        finally:
            FIRED[request.node.name] = FIRED.get(request.node.name, 0) + stats.fired


def under(log_dir: Path) -> str:
    return f"{log_dir}/*"


@pytest.fixture
def two(broker: Opener, log_dirs: list[Path]) -> tuple[LogManager, Path, Path]:
    """A manager on two dirs with topic ``t``: partition 0 in the first dir, 1 in the second."""
    manager = broker.open(log_dirs[:2])
    manager.create_topic("t", 2)
    assert manager.log(tp("t", 0)).dir.parent == log_dirs[0]
    assert manager.log(tp("t", 1)).dir.parent == log_dirs[1]
    return manager, log_dirs[0], log_dirs[1]


def acknowledged(manager: LogManager, partition: int, count: int) -> list[int]:
    """Append ``count`` one-record batches; the offsets acknowledged."""
    return [manager.append(tp("t", partition), batch()).first_offset for _ in range(count)]


def test_enospc_on_append_takes_only_its_dir_offline(request: pytest.FixtureRequest, two) -> None:
    manager, bad, good = two
    before = acknowledged(manager, 0, 3)
    with faults(request, FaultRule(frozenset({FileOp.WRITE}), under(bad), error=errno.ENOSPC)) as stats:
        with pytest.raises(LogDirOfflineError) as failed:
            manager.append(tp("t", 0), batch())
        assert failed.value.error_code == 56
        assert str(bad) in str(failed.value) and "ENOSPC" in str(failed.value)
        assert acknowledged(manager, 1, 2) == [0, 1]  # the other dir keeps serving
        with pytest.raises(LogDirOfflineError):
            manager.append(tp("t", 0), batch())  # refused before any write: nothing more fired
        assert stats.fired == 1
    [offline] = manager.offline_log_dirs()
    assert (offline.path, offline.errno, offline.operation) == (bad, errno.ENOSPC, "append of t-0")
    assert offline.failed_path is not None and offline.failed_path.endswith(".log")
    description = manager.describe_topic("t")
    assert [p.topic_partition for p in description.partitions] == [tp("t", 1)]
    assert [o.topic_partition for o in description.offline] == [tp("t", 0)]
    bad_info, good_info = manager.log_dirs()
    assert bad_info.offline == offline and not bad_info.partitions
    assert good_info.offline is None and len(good_info.partitions) == 1
    assert before == [0, 1, 2]


def test_probe_backs_off_while_failing_then_reopens_with_every_acknowledged_record(
        request: pytest.FixtureRequest, broker: Opener, two) -> None:
    manager, bad, _ = two
    manager.startup()
    before = acknowledged(manager, 0, 5)
    rule = FaultRule(WRITE_OPS, under(bad), error=errno.EIO)
    with faults(request, rule):
        with pytest.raises(LogDirOfflineError):
            manager.append(tp("t", 0), batch())
        broker.clock.advance(1_000)  # first probe: fails
        broker.clock.advance(1_000)  # backoff doubled: not yet
        [offline] = manager.offline_log_dirs()
        assert offline.probes == 1 and offline.backoff_ms == 2_000 and "Input/output error" in offline.last_probe_error
        broker.clock.advance(1_000)  # second probe: fails again
        assert manager.offline_log_dirs()[0].probes == 2
    assert not (bad / PROBE_FILE).exists()
    broker.clock.advance(4_000)  # the fault is gone: the next probe passes
    assert manager.offline_log_dirs() == []
    lg = manager.log(tp("t", 0))
    assert read_offsets(lg) == before and lg.high_watermark == 5
    assert manager.append(tp("t", 0), batch()).first_offset == 5  # the failed append was never acknowledged


def test_partial_batch_of_a_full_disk_is_cut_off_when_the_dir_comes_back(
        request: pytest.FixtureRequest, broker: Opener, two) -> None:
    manager, bad, _ = two
    before = acknowledged(manager, 0, 4)
    segment = manager.log(tp("t", 0)).active_segment.log.path
    with faults(request, FaultRule(frozenset({FileOp.WRITE}), under(bad), error=errno.ENOSPC)):
        with pytest.raises(LogDirOfflineError):
            manager.append(tp("t", 0), batch(3))
    with open(segment, "ab") as torn:  # what the disk took of the batch before it was full
        torn.write(batch(3)[:40])
    assert manager.probe_offline_dirs() == []  # not due before its backoff
    broker.clock.advance(1_000)
    assert manager.probe_offline_dirs() == [bad]
    lg = manager.log(tp("t", 0))
    assert read_offsets(lg) == before and lg.log_end_offset == 4
    assert verify_paths([lg.dir]).ok
    assert manager.append(tp("t", 0), batch()).first_offset == 4


def test_eio_on_fsync_in_the_flusher_takes_the_dir_offline_and_the_task_survives(
        request: pytest.FixtureRequest, broker: Opener, log_dirs: list[Path]) -> None:
    manager = broker.open(log_dirs[:2], {"log.flush.interval.ms": "100", "log.segment.bytes": "200"})
    manager.create_topic("t", 2)
    manager.startup()
    for partition in (0, 1):
        acknowledged(manager, partition, 6)  # several segments each: the flusher has work
    with faults(request, FaultRule(frozenset({FileOp.FSYNC}), under(log_dirs[0]), error=errno.EIO)) as stats:
        broker.clock.advance(30_000)  # flusher, checkpoints, retention: none raises
        assert stats.fired >= 1
        assert [d.path for d in manager.offline_log_dirs()] == [log_dirs[0]]
        assert manager.log(tp("t", 1)).recovery_point > 0  # the healthy dir was flushed
        assert tp("t", 1) in recovery_points(log_dirs[1])
        broker.clock.advance(30_000)
        # every periodic task still scheduled: the manager's 6, and each log's producer-id expiration check
        assert broker.scheduler.pending() == 6 + 2


def test_checkpoint_write_failure_takes_the_dir_offline(request: pytest.FixtureRequest, two) -> None:
    manager, bad, good = two
    acknowledged(manager, 0, 2)
    acknowledged(manager, 1, 2)
    manager.flush_dirty_logs()
    with faults(request, FaultRule(frozenset({FileOp.OPEN}), f"{bad}/recovery-point-offset-checkpoint*",
                                   error=errno.EROFS)):
        manager.checkpoint_recovery_points()
    [offline] = manager.offline_log_dirs()
    assert offline.path == bad and offline.errno == errno.EROFS
    assert "recovery-point-offset-checkpoint" in offline.operation
    manager.checkpoint_recovery_points()  # the offline dir is skipped, the other written
    assert tp("t", 1) in recovery_points(good)


def test_read_only_dir_new_partitions_go_to_the_others_and_it_catches_up_when_back(
        request: pytest.FixtureRequest, broker: Opener, two) -> None:
    manager, bad, good = two
    before = acknowledged(manager, 0, 2)
    with faults(request, FaultRule(WRITE_OPS, under(bad), error=errno.EROFS)):
        with pytest.raises(LogDirOfflineError):
            manager.append(tp("t", 0), batch())
        manager.create_topic("u", 3)  # placed in the online dir only; the registry written there
        assert {manager.log(tp("u", p)).dir.parent for p in range(3)} == {good}
        assert "u" not in registry(bad)["topics"] and "u" in registry(good)["topics"]
        manager.run_retention()
        manager.checkpoint_log_start_offsets()
        broker.clock.advance(1_000)
        assert manager.probe_offline_dirs() == []  # still read-only
    broker.clock.advance(2_000)
    assert manager.probe_offline_dirs() == [bad]
    assert registry(bad) == registry(good)  # its stale registry copy was rewritten
    assert read_offsets(manager.log(tp("t", 0))) == before


def test_every_dir_offline_refuses_topic_creation(request: pytest.FixtureRequest, broker: Opener,
                                                  log_dirs: list[Path]) -> None:
    manager = broker.open(log_dirs[:1])
    manager.create_topic("t", 1)
    with faults(request, FaultRule(WRITE_OPS, under(log_dirs[0]), error=errno.EROFS)):
        with pytest.raises(LogDirOfflineError):
            manager.append(tp("t", 0), batch())
        with pytest.raises(LogDirOfflineError, match="every log dir is offline"):
            manager.create_topic("u", 1)
    assert not manager.has_topic("u")


def test_retention_delete_failure_takes_the_dir_offline(request: pytest.FixtureRequest, broker: Opener,
                                                        log_dirs: list[Path]) -> None:
    manager = broker.open(log_dirs[:2], {"log.segment.bytes": "200", "log.retention.bytes": "200"})
    manager.create_topic("t", 2)
    acknowledged(manager, 0, 8)
    acknowledged(manager, 1, 8)
    with faults(request, FaultRule(frozenset({FileOp.RENAME}), f"{log_dirs[0]}/*.log", error=errno.EIO)):
        plans = manager.retention_task()
    assert [d.path for d in manager.offline_log_dirs()] == [log_dirs[0]]
    assert "retention of t-0" == manager.offline_log_dirs()[0].operation
    assert manager.log(tp("t", 1)).log_start_offset > 0 and len(plans) == 1  # t-0 failed, t-1 went on


def test_deleting_a_topic_while_its_dir_is_offline_finishes_when_the_dir_is_back(
        request: pytest.FixtureRequest, broker: Opener, two) -> None:
    manager, bad, good = two
    acknowledged(manager, 0, 1)
    with faults(request, FaultRule(WRITE_OPS, under(bad), error=errno.EIO)):
        with pytest.raises(LogDirOfflineError):
            manager.append(tp("t", 0), batch())
        manager.delete_topic("t")
    assert (bad / "t-0").is_dir()
    broker.clock.advance(1_000)
    assert manager.probe_offline_dirs() == [bad]
    assert not (bad / "t-0").exists() and manager.logs() == []
    assert [p.name for p in bad.iterdir() if p.name.startswith("t-0.")]  # renamed -delete, removed later


def test_shutdown_with_an_offline_dir_leaves_it_unclean_and_nothing_acknowledged_is_lost(
        request: pytest.FixtureRequest, broker: Opener, two, log_dirs: list[Path]) -> None:
    manager, bad, good = two
    before = acknowledged(manager, 0, 3)
    with faults(request, FaultRule(frozenset({FileOp.FSYNC}), under(bad), error=errno.EIO)):
        with pytest.raises(StorageError):
            manager.log(tp("t", 0)).flush()  # a direct caller: reported through the manager
        assert manager.report_storage_error(tp("t", 0), "flush", RuntimeError("not a disk fault")) is False
        with pytest.raises(StorageError) as failed:
            manager.log(tp("t", 0)).flush()
        assert manager.report_storage_error(tp("t", 0), "flush", failed.value) is True
        manager.shutdown()
    assert not has_clean_shutdown(bad) and has_clean_shutdown(good)
    reopened = broker.open(log_dirs[:2])
    assert read_offsets(reopened.log(tp("t", 0))) == before


def test_cleaner_enospc_on_its_scratch_files_quarantines_the_partition_only(
        request: pytest.FixtureRequest, broker: Opener, log_dirs: list[Path]) -> None:
    manager = broker.open(log_dirs[:1], {"log.cleaner.enable": "true", "log.cleaner.threads": "0",
                                         "log.segment.bytes": "300"})
    manager.create_topic("c", 1, {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01"})
    for _ in range(10):
        manager.append(tp("c", 0), batch(2))
    assert manager.cleaner is not None
    with faults(request, FaultRule(frozenset({FileOp.WRITE}), "*.cleaned", error=errno.ENOSPC)) as stats:
        result = manager.cleaner.clean_now(tp("c", 0), force=True)
        assert stats.fired >= 1
    assert result is not None and result.error is not None
    assert manager.offline_log_dirs() == []
    assert not list(manager.log(tp("c", 0)).dir.glob("*.cleaned"))
    assert manager.append(tp("c", 0), batch()).first_offset == 20


def test_cleaner_fault_in_the_swap_takes_the_dir_offline_and_recovery_keeps_every_key(
        request: pytest.FixtureRequest, broker: Opener, log_dirs: list[Path]) -> None:
    manager = broker.open(log_dirs[:1], {"log.cleaner.enable": "true", "log.cleaner.threads": "0",
                                         "log.segment.bytes": "300"})
    manager.create_topic("c", 1, {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01"})
    for _ in range(10):
        manager.append(tp("c", 0), batch(2))
    assert manager.cleaner is not None
    with faults(request, FaultRule(frozenset({FileOp.RENAME}), "*.swap", error=errno.EIO)) as stats:
        manager.cleaner.clean_now(tp("c", 0), force=True)
        assert stats.fired == 1
    [offline] = manager.offline_log_dirs()
    assert offline.operation == "cleaning of c-0"
    broker.clock.advance(1_000)
    assert manager.probe_offline_dirs() == [log_dirs[0]]
    lg = manager.log(tp("c", 0))
    assert lg.log_end_offset == 20 and read_offsets(lg)[-2:] == [18, 19]  # the newest value of each key
    assert verify_paths([lg.dir]).ok


def test_probe_backoff_rejects_nonsense() -> None:
    with pytest.raises(ValueError):
        ProbeBackoff(initial_ms=0)
    assert ProbeBackoff(100, 250).after(200) == 250


def test_concurrent_appends_while_a_dir_fails_lose_nothing_acknowledged(
        request: pytest.FixtureRequest, broker: Opener, log_dirs: list[Path]) -> None:
    manager = broker.open(log_dirs[:2], {"log.segment.bytes": "400"})  # rolls under way too
    manager.create_topic("t", 4)  # partitions 0 and 2 in the first dir, 1 and 3 in the second
    acked: dict[int, list[int]] = {p: [] for p in range(4)}
    refused: dict[int, int] = {p: 0 for p in range(4)}

    def produce(partition: int) -> None:
        for _ in range(40):
            try:
                acked[partition].append(manager.append(tp("t", partition), batch(2)).first_offset)
            except StorageError:
                refused[partition] += 1

    rule = FaultRule(frozenset({FileOp.WRITE, FileOp.FSYNC, FileOp.RENAME}), under(log_dirs[0]),
                     error=errno.ENOSPC, skip=25)
    with faults(request, rule):
        threads = [threading.Thread(target=produce, args=(p,)) for p in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert [d.path for d in manager.offline_log_dirs()] == [log_dirs[0]]
    assert refused[1] == refused[3] == 0 and len(acked[1]) == len(acked[3]) == 40
    assert refused[0] + refused[2] > 0
    broker.clock.advance(1_000)
    assert manager.probe_offline_dirs() == [log_dirs[0]]
    for partition in range(4):
        lg = manager.log(tp("t", partition))
        offsets = read_offsets(lg)
        assert offsets == list(range(lg.log_end_offset)), partition
        assert acked[partition] == [2 * i for i in range(len(acked[partition]))]  # no gap, no duplicate
        assert set(acked[partition]) <= set(offsets[::2]), partition  # every acknowledged batch is there


def test_a_dir_that_fails_at_start_up_starts_offline_and_loads_once_its_probe_passes(
        request: pytest.FixtureRequest, broker: Opener, log_dirs: list[Path]) -> None:
    first = broker.open(log_dirs[:2])
    first.create_topic("t", 2)
    before = {p: acknowledged(first, p, 3) for p in (0, 1)}
    first.shutdown()
    with faults(request, FaultRule(frozenset({FileOp.WRITE}), f"{log_dirs[1]}/.lock", error=errno.EIO, times=1)):
        manager = broker.open(log_dirs[:2])
    [offline] = manager.offline_log_dirs()
    assert offline.path == log_dirs[1] and offline.operation == "opening the log dir" and offline.errno == errno.EIO
    with pytest.raises(LogDirOfflineError):
        manager.append(tp("t", 1), batch())
    assert acknowledged(manager, 0, 1) == [3]  # the other dir serves
    manager.create_topic("u", 1)  # placed in the dir that opened
    assert manager.log(tp("u", 0)).dir.parent == log_dirs[0]
    broker.clock.advance(1_000)
    assert manager.probe_offline_dirs() == [log_dirs[1]]
    assert manager.offline_log_dirs() == [] and manager.set_aside() == []
    assert read_offsets(manager.log(tp("t", 1))) == before[1]
    assert manager.append(tp("t", 1), batch()).first_offset == 3
    assert registry(log_dirs[1]) == registry(log_dirs[0])
    manager.shutdown()
    assert has_clean_shutdown(log_dirs[0]) and has_clean_shutdown(log_dirs[1])


def test_start_up_fails_when_no_dir_can_be_opened(request: pytest.FixtureRequest, broker: Opener,
                                                  log_dirs: list[Path]) -> None:
    with faults(request, FaultRule(frozenset({FileOp.MKDIR}), "*/logs*", error=errno.EROFS)):
        with pytest.raises(StorageError, match="cannot create log dir"):
            broker.open(log_dirs[:2])


def test_enospc_while_a_partition_loads_takes_its_dir_offline_and_it_loads_once_space_is_freed(
        request: pytest.FixtureRequest, broker: Opener, log_dirs: list[Path]) -> None:
    first = broker.open(log_dirs[:2])
    first.create_topic("t", 2)
    before = {p: acknowledged(first, p, 3) for p in (0, 1)}
    first.shutdown()
    full = FaultRule(WRITE_OPS, f"{log_dirs[0]}/t-0/*", error=errno.ENOSPC)  # the first dir's disk is full
    with faults(request, full):
        manager = broker.open(log_dirs[:2])
        [offline] = manager.offline_log_dirs()
        assert (offline.path, offline.operation, offline.errno) == (log_dirs[0], "loading of t-0", errno.ENOSPC)
        assert not [s for s in manager.set_aside() if s.path.parent == log_dirs[0]]  # not set aside for good
        with pytest.raises(LogDirOfflineError):
            manager.append(tp("t", 0), batch())
        assert acknowledged(manager, 1, 1) == [3]  # the other dir serves
        broker.clock.advance(1_000)
        assert manager.probe_offline_dirs() == [] and manager.offline_log_dirs()[0].probes == 1
    broker.clock.advance(2_000)  # space freed: the next probe loads the dir
    assert manager.probe_offline_dirs() == [log_dirs[0]]
    assert manager.offline_log_dirs() == [] and manager.set_aside() == []
    assert read_offsets(manager.log(tp("t", 0))) == before[0]
    assert manager.append(tp("t", 0), batch()).first_offset == 3
    manager.shutdown()
    assert has_clean_shutdown(log_dirs[0]) and has_clean_shutdown(log_dirs[1])


def test_a_load_fault_on_the_data_itself_still_sets_only_the_partition_aside(
        request: pytest.FixtureRequest, broker: Opener, log_dirs: list[Path]) -> None:
    first = broker.open(log_dirs[:1])
    first.create_topic("t", 2)
    first.shutdown()
    with faults(request, FaultRule(WRITE_OPS, f"{log_dirs[0]}/t-0/*", error=errno.EISDIR)):
        manager = broker.open(log_dirs[:1])
    assert manager.offline_log_dirs() == []
    assert [s.topic_partition for s in manager.set_aside()] == [tp("t", 0)]
    assert manager.append(tp("t", 1), batch()).first_offset == 0


def test_a_recovery_worker_reports_the_errno_of_a_disk_fault(request: pytest.FixtureRequest, broker: Opener,
                                                             log_dirs: list[Path]) -> None:
    manager = broker.open(log_dirs[:1])
    manager.create_topic("t", 1)
    acknowledged(manager, 0, 3)
    path = manager.log(tp("t", 0)).dir
    job = RecoveryJob(tp("t", 0), path, manager.topic_config("t"), 0, 0)
    manager.shutdown()
    with faults(request, FaultRule(WRITE_OPS, f"{path}/*", error=errno.ENOSPC)):
        failure = recover_partition(job)
    assert failure is not None and failure.errno == errno.ENOSPC and "No space left" in str(failure.os_error())
    assert recover_partition(job) is None


CLEANER = {"log.cleaner.enable": "true", "log.cleaner.threads": "0", "log.segment.bytes": "300"}
COMPACT = {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01"}


def eio_on_lock(request: pytest.FixtureRequest, log_dir: Path):  # noqa: ANN201 - a context manager
    """``log_dir`` fails to open at start-up (it starts offline, loaded when its probe passes)."""
    return faults(request, FaultRule(frozenset({FileOp.WRITE}), f"{log_dir}/.lock", error=errno.EIO, times=1))


def test_a_dir_going_offline_stops_its_cleaning_and_resumes_it_when_back(
        request: pytest.FixtureRequest, broker: Opener, log_dirs: list[Path]) -> None:
    manager = broker.open(log_dirs[:1], CLEANER)
    manager.create_topic("c", 2, COMPACT)
    manager.create_topic("t", 1)
    for _ in range(10):
        for partition in (0, 1):
            manager.append(tp("c", partition), batch(2))
    assert manager.cleaner is not None
    cleaner = manager.cleaner.manager
    checkpoint = log_dirs[0] / "cleaner-offset-checkpoint"
    before = checkpoint.read_bytes()
    assert cleaner.grab_for_cleaning(tp("c", 0), force=True) is not None  # a cleaner thread is cleaning c-0
    with faults(request, FaultRule(frozenset({FileOp.WRITE}), under(log_dirs[0]), error=errno.ENOSPC)):
        with pytest.raises(LogDirOfflineError):
            manager.append(tp("t", 0), batch())
    assert cleaner.is_cleaning_aborted(tp("c", 0))  # the clean stops at its next chunk
    assert str(cleaner.state_of(tp("c", 1))) == "paused (1)"
    assert cleaner.log_dirs == []
    cleaner.done_cleaning(tp("c", 0), log_dirs[0], 20)  # the cleaner thread acknowledges
    assert checkpoint.read_bytes() == before  # nothing written into the failed dir
    broker.clock.advance(1_000)
    assert manager.probe_offline_dirs() == [log_dirs[0]]
    assert cleaner.state_of(tp("c", 0)) is None and cleaner.state_of(tp("c", 1)) is None
    assert [str(d) for d in cleaner.log_dirs] == [str(log_dirs[0].resolve())]
    result = manager.cleaner.clean_now(tp("c", 0), force=True)
    assert result is not None and result.error is None


def test_a_late_dir_that_holds_a_topic_being_cleaned_never_waits_for_the_cleaner_under_the_lock(
        request: pytest.FixtureRequest, broker: Opener, log_dirs: list[Path]) -> None:
    first = broker.open(log_dirs[:2], CLEANER)
    first.create_topic("c", 2, COMPACT)
    for _ in range(10):
        first.append(tp("c", 0), batch(2))
    first.shutdown()
    copy = read_topic_copy(log_dirs[1] / "c-1")  # the late dir's copy says: configs unconfirmed, newer
    assert copy is not None
    write_topic_copy(log_dirs[1] / "c-1", copy.replace(epoch=copy.epoch + 100, unconfirmed=True))
    with eio_on_lock(request, log_dirs[1]):
        manager = broker.open(log_dirs[:2], CLEANER)
    assert manager.cleaner is not None
    cleaner = manager.cleaner.manager
    assert cleaner.grab_for_cleaning(tp("c", 0), force=True) is not None  # a cleaner thread is cleaning c-0
    broker.clock.advance(1_000)
    probing = threading.Thread(target=manager.probe_offline_dirs)
    probing.start()
    for _ in range(500):
        if cleaner.is_cleaning_aborted(tp("c", 0)):
            break
        threading.Event().wait(0.01)
    # the cleaner thread's failure path needs the manager's lock, as creating a topic does
    other = threading.Thread(target=manager.create_topic, args=("other",))
    other.start()
    other.join(timeout=5)
    blocked = other.is_alive()
    cleaner.done_cleaning(tp("c", 0), log_dirs[0], None)  # the cleaner thread acknowledges
    probing.join(timeout=10)
    other.join(timeout=10)
    assert not blocked
    assert manager.offline_log_dirs() == [] and manager.describe_topic("c").configs_unconfirmed
    assert str(cleaner.state_of(tp("c", 0))) == "paused (1)" and str(cleaner.state_of(tp("c", 1))) == "paused (1)"
    assert str(log_dirs[1].resolve()) in [str(d) for d in cleaner.log_dirs]  # the late dir is cleaned too


def test_a_returning_dir_keeps_its_damaged_registry_aside(request: pytest.FixtureRequest, broker: Opener,
                                                          log_dirs: list[Path]) -> None:
    first = broker.open(log_dirs[:2])
    first.create_topic("t", 2)
    first.shutdown()
    damaged = os.urandom(300)
    (log_dirs[1] / REGISTRY_FILE).write_bytes(damaged)
    with eio_on_lock(request, log_dirs[1]):
        manager = broker.open(log_dirs[:2])
    broker.clock.advance(1_000)
    assert manager.probe_offline_dirs() == [log_dirs[1]]
    [kept] = log_dirs[1].glob(f"{REGISTRY_FILE}.damaged-*")
    assert kept.read_bytes() == damaged
    assert registry(log_dirs[1]) == registry(log_dirs[0])


def _second_dir_alone_saw_a_config_change(broker: Opener, log_dirs: list[Path]) -> int:
    """Topic t over the first two dirs; then retention.ms=-1 set while only the second is open,
    and its partition copy of t-1 lost. Returns the second dir's registry epoch."""
    first = broker.open(log_dirs[:2])
    first.create_topic("t", 2)
    first.shutdown()
    alone = broker.open(log_dirs[1:2])
    alone.alter_topic_config("t", {"retention.ms": "-1"})
    newer: int = registry(log_dirs[1])["epoch"]
    alone.shutdown()
    (log_dirs[1] / "t-1" / TOPIC_COPY_FILE).unlink()
    return newer


def test_a_returning_dir_whose_registry_is_newer_loses_no_config_and_no_epoch(
        request: pytest.FixtureRequest, broker: Opener, log_dirs: list[Path]) -> None:
    newer = _second_dir_alone_saw_a_config_change(broker, log_dirs)
    with eio_on_lock(request, log_dirs[1]):
        manager = broker.open(log_dirs[:2])
    assert manager.topic_overrides("t") == {}
    broker.clock.advance(1_000)
    assert manager.probe_offline_dirs() == [log_dirs[1]]
    assert manager.topic_overrides("t") == {"retention.ms": "-1"}
    assert manager.log(tp("t", 0)).config.retention_ms == -1
    assert registry(log_dirs[0]) == registry(log_dirs[1]) and registry(log_dirs[0])["epoch"] > newer


def test_partition_copies_of_a_dir_offline_during_a_config_change_catch_up_when_it_is_back(
        request: pytest.FixtureRequest, broker: Opener, two) -> None:
    manager, _, second = two
    manager.create_topic("u", 2)
    assert manager.log(tp("u", 1)).dir.parent == second
    with faults(request, FaultRule(frozenset({FileOp.WRITE}), under(second), error=errno.ENOSPC)):
        with pytest.raises(LogDirOfflineError):
            manager.append(tp("t", 1), batch())  # t-1 closed, u-1 kept open
    manager.alter_topic_config("t", {"retention.ms": "-1"})
    manager.alter_topic_config("u", {"retention.ms": "-1"})
    broker.clock.advance(1_000)
    assert manager.probe_offline_dirs() == [second]
    for name in ("t-1", "u-1"):
        copy = read_topic_copy(second / name)
        assert copy is not None and dict(copy.configs) == {"retention.ms": "-1"}, name


def test_a_registry_read_failing_on_the_disk_is_no_damage_its_dir_waits_offline_until_it_reads(
        request: pytest.FixtureRequest, broker: Opener, log_dirs: list[Path]) -> None:
    """EIO reading a registry copy says nothing of its content: it is not renamed aside as damaged
    (and its epoch and entries lost), its dir goes offline and joins once the copy reads."""
    newer = _second_dir_alone_saw_a_config_change(broker, log_dirs)
    copy = log_dirs[1] / REGISTRY_FILE
    kept = copy.read_bytes()
    with faults(request, FaultRule(frozenset({FileOp.READ}), str(copy), error=errno.EIO)):
        manager = broker.open(log_dirs[:2])
        [offline] = manager.offline_log_dirs()
        assert (offline.path, offline.operation, offline.errno) == (log_dirs[1], "reading the topic registry",
                                                                     errno.EIO)
        with pytest.raises(LogDirOfflineError):
            manager.append(tp("t", 1), batch())
        assert acknowledged(manager, 0, 1) == [0]  # the other dir serves
        broker.clock.advance(1_000)
        assert manager.probe_offline_dirs() == []  # the copy still does not read
    assert copy.read_bytes() == kept and not list(log_dirs[1].glob(f"{REGISTRY_FILE}.damaged-*"))
    broker.clock.advance(2_000)
    assert manager.probe_offline_dirs() == [log_dirs[1]]
    assert manager.topic_overrides("t") == {"retention.ms": "-1"}
    assert manager.log(tp("t", 0)).config.retention_ms == -1
    assert registry(log_dirs[0]) == registry(log_dirs[1]) and registry(log_dirs[0])["epoch"] > newer


def test_deleting_a_topic_whose_clean_a_dir_failure_aborted_waits_for_the_clean_to_stop(
        request: pytest.FixtureRequest, broker: Opener, log_dirs: list[Path]) -> None:
    """The dir's failure aborts the clean without waiting (ABORTED until the cleaner thread's next
    chunk); a deletion meanwhile waits for it like any other pause, and is not refused."""
    manager = broker.open(log_dirs[:2], CLEANER)
    manager.create_topic("c", 2, COMPACT)
    assert manager.log(tp("c", 0)).dir.parent == log_dirs[0]
    assert manager.cleaner is not None
    cleaner = manager.cleaner.manager
    for _ in range(5):
        manager.append(tp("c", 0), batch(2))
    assert cleaner.grab_for_cleaning(tp("c", 0), force=True) is not None  # a cleaner thread is cleaning c-0
    with faults(request, FaultRule(frozenset({FileOp.WRITE}), under(log_dirs[0]), error=errno.ENOSPC)):
        with pytest.raises(LogDirOfflineError):
            manager.append(tp("c", 0), batch())
    assert cleaner.is_cleaning_aborted(tp("c", 0))
    errors: list[BaseException] = []

    def delete() -> None:
        try:
            manager.delete_topic("c")
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    deleter = threading.Thread(target=delete, daemon=True)
    deleter.start()
    deleter.join(0.2)
    assert errors == [] and deleter.is_alive()  # waiting for the aborted clean
    cleaner.done_cleaning(tp("c", 0), log_dirs[0], None)  # the cleaner thread acknowledges
    deleter.join(5)
    assert errors == [] and not deleter.is_alive() and not manager.has_topic("c")
