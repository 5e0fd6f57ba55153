"""Kill points of the remote tier's copy: the process dies at every store operation of a copy
pass (each object PUT, each metadata event or snapshot PUT, each DELETE of a cleanup), before
the operation or just after it, and a new process resumes.

Method (in-process, the store's view only): a :class:`KillingStore` wraps a real store and
raises :class:`Killed` (a ``BaseException``, so no ``except Exception`` cleanup of the copy
runs, as after SIGKILL) at its Nth mutating operation; a counting run gives N's range. After
the kill, a *new process's view* loads the partition's metadata from the same store and checks:

- every COPY_SEGMENT_FINISHED segment is whole: every object present, each the size of its
  local file, the ``.log``'s bytes equal to the local ``.log``'s (a reader never sees a partial
  segment, whatever the kill point);
- then :func:`clean_unreferenced` and a copy pass: every sealed local segment is remote exactly
  once (contiguous offsets, no two segments for one), no STARTED or DELETE_STARTED segment is
  left, and the store holds exactly the objects of the finished segments (no orphan).

The same method covers remote retention (an expiration of two of three segments: its
DELETE_SEGMENT_STARTED and DELETE_SEGMENT_FINISHED events, each object DELETE, snapshots and
pruning, and the log start offset checkpoint before them): after a kill the checkpointed log start
offset is covered by whole FINISHED segments, and a restart deletes exactly the expired segments
with no orphan; and the deletion of a partition's remote data (topic deletion, delete on disable):
after a kill at any write past the pending-deletion object, the next process empties the store.

A kill leaves the page cache and the store as they were, which an in-process exception models
for the store; the local log is only read by a copy. ``file://`` runs every point (fast);
one case runs a sample of the points against the S3 server.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tidelog.remote.copy import clean_unreferenced, copy_log
from tidelog.remote.metadata import RemoteFileKind, RemoteLogSegmentState, TopicIdPartition, object_key
from tidelog.remote.metadata_log import RemotePartitionMetadata
from tidelog.remote.store import ArrowRemoteStore, RemoteStore
from tidelog.storage import files
from tidelog.storage.log import Log
from tidelog.testing import FakeClock
from tidelog.topic_partition import TopicPartition

sys.path.append(str(Path(__file__).parent.parent / "remote"))  # the copy tests' helpers
from copy_helpers import make_log  # noqa: E402 - needs the path above
from remote_helpers import expire  # noqa: E402 - needs the path above

TIP = TopicIdPartition("Zx3vYqS2QmK0b1c2d3e4fA", TopicPartition("orders", 2))
SNAPSHOT_INTERVAL = 2  # small, so that snapshot writes and pruning deletes are kill points too
MUTATING = ("put", "put_file", "delete", "delete_prefix")


class Killed(BaseException):
    """The process died here."""


class KillingStore:
    """A :class:`RemoteStore` that counts mutating operations and dies at number ``kill_at``
    (``when``: ``before`` the operation, or ``after`` it completed). ``kill_at=None`` counts."""

    def __init__(self, inner: RemoteStore, kill_at: int | None = None, when: str = "before") -> None:
        self.inner, self.uri = inner, inner.uri
        self.kill_at, self.when = kill_at, when
        self.ops: list[tuple[str, str]] = []

    def _mutate(self, operation: str, key: str, run: Callable[[], Any]) -> Any:
        number = len(self.ops)
        self.ops.append((operation, key))
        if number == self.kill_at and self.when == "before":
            raise Killed(f"killed before {operation} {key}")
        result = run()
        if number == self.kill_at:
            raise Killed(f"killed after {operation} {key}")
        return result

    def put(self, key: str, data: Any) -> None:
        self._mutate("put", key, lambda: self.inner.put(key, data))

    def put_file(self, key: str, path: Any, **kwargs: Any) -> None:
        self._mutate("put_file", key, lambda: self.inner.put_file(key, path, **kwargs))

    def delete(self, key: str) -> None:
        self._mutate("delete", key, lambda: self.inner.delete(key))

    def delete_prefix(self, prefix: str) -> None:
        self._mutate("delete_prefix", prefix, lambda: self.inner.delete_prefix(prefix))

    def get(self, key: str) -> bytes:
        return self.inner.get(key)

    def get_range(self, key: str, start: int, length: int) -> bytes:
        return self.inner.get_range(key, start, length)

    def size(self, key: str) -> int:
        return self.inner.size(key)

    def list(self, prefix: str = "") -> list[Any]:
        return self.inner.list(prefix)


def _load(store: RemoteStore) -> RemotePartitionMetadata:
    return RemotePartitionMetadata.load(store, TIP, clock=FakeClock(), broker_id=1, snapshot_interval=SNAPSHOT_INTERVAL)


def _pass(log: Log, store: RemoteStore) -> None:
    """What a broker does per pass: load (once per process), clean, copy."""
    copy_log(log, store, _load(store), epochs=log.leader_epoch_cache.entries)


def _local(log: Log, base: int, next_base: int) -> dict[RemoteFileKind, Path]:
    d = log.dir
    return {RemoteFileKind.SEGMENT: files.log_file(d, base), RemoteFileKind.OFFSET_INDEX: files.offset_index_file(d, base),
            RemoteFileKind.TIME_INDEX: files.time_index_file(d, base),
            RemoteFileKind.TRANSACTION_INDEX: files.transaction_index_file(d, base),
            RemoteFileKind.PRODUCER_SNAPSHOT: files.producer_snapshot_file(d, next_base)}


def check_finished_whole(log: Log, store: RemoteStore, metadata: RemotePartitionMetadata) -> None:
    sizes = {i.key: i.size for i in store.list()}
    for segment in metadata.finished_segments():
        for kind, path in _local(log, segment.start_offset, segment.end_offset + 1).items():
            key = object_key(segment, kind)
            if kind is RemoteFileKind.TRANSACTION_INDEX and segment.txn_idx_empty:
                assert key not in sizes
                continue
            assert sizes.get(key) == path.stat().st_size, f"finished segment {segment.id}: {key} partial or missing"
        assert object_key(segment, RemoteFileKind.LEADER_EPOCH) in sizes
        log_key = object_key(segment, RemoteFileKind.SEGMENT)
        assert store.get(log_key) == files.log_file(log.dir, segment.start_offset).read_bytes()


def check_resumed(log: Log, store: RemoteStore) -> None:
    metadata = _load(store)
    clean_unreferenced(store, metadata)
    copy_log(log, store, metadata, epochs=log.leader_epoch_cache.entries)
    fresh = _load(store)
    check_finished_whole(log, store, fresh)
    assert fresh.unreferenced() == [] and all(s.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED
                                              for s in fresh.segments())
    bases = [s.base_offset for s in log.segments]
    assert [(s.start_offset, s.end_offset + 1) for s in fresh.finished_segments()] == list(zip(bases, bases[1:]))
    expected = {object_key(s, k) for s in fresh.finished_segments() for k in RemoteFileKind
                if not (k is RemoteFileKind.TRANSACTION_INDEX and s.txn_idx_empty)}
    assert {i.key for i in store.list() if "/metadata/" not in i.key} == expected, "orphan objects"


def run_point(log: Log, store: RemoteStore, kill_at: int, when: str) -> None:
    killing = KillingStore(store, kill_at, when)
    with pytest.raises(Killed):
        _pass(log, killing)
    check_finished_whole(log, store, _load(store))
    check_resumed(log, store)


def counted_ops(log: Log, store: RemoteStore) -> list[tuple[str, str]]:
    counting = KillingStore(store)
    _pass(log, counting)
    return counting.ops


@pytest.fixture
def log(tmp_path: Path) -> Iterator[Log]:
    opened = make_log(tmp_path / "orders-2", 3, epochs=(0, 1, 1), aborted_in=(1,))
    yield opened
    opened.close()


def _file_store(root: Callable[[], Path], name: str) -> ArrowRemoteStore:
    """A file:// store in a new dir of ``kill_root`` (tmpfs where there is one: fsync is free)."""
    return ArrowRemoteStore((root() / name).as_uri())


def test_the_copy_pass_reaches_every_kind_of_store_operation(kill_root: Callable[[], Path], log: Log) -> None:
    ops = counted_ops(log, _file_store(kill_root, "counting"))
    kinds = {op for op, _ in ops}
    assert kinds == {"put", "put_file", "delete"}  # events, objects, snapshot pruning
    assert sum(1 for op, key in ops if op == "put_file") == 3 * 4 + 1  # .log .index .timeindex .snapshot + 1 txn
    assert any(key.endswith(".snapshot.json") for _, key in ops)


@pytest.mark.parametrize("when", ["before", "after"])
def test_every_kill_point_of_a_copy_publishes_nothing_partial_and_resumes(kill_root: Callable[[], Path], log: Log,
                                                                          when: str) -> None:
    total = len(counted_ops(log, _file_store(kill_root, "counting")))
    for n in range(total):
        run_point(log, _file_store(kill_root, f"store-{when}-{n}"), n, when)


def test_a_kill_mid_cleanup_is_cleaned_again(kill_root: Callable[[], Path], log: Log) -> None:
    store = _file_store(kill_root, "store")
    failing = KillingStore(store, 3)  # dies during the first segment's uploads: it stays STARTED
    with pytest.raises(Killed):
        _pass(log, failing)
    cleanup_ops = KillingStore(store)
    clean_unreferenced(cleanup_ops, _load(cleanup_ops))
    for n in range(len(cleanup_ops.ops)):  # every point of a cleanup that itself dies
        fresh = _file_store(kill_root, f"again-{n}")
        with pytest.raises(Killed):
            _pass(log, KillingStore(fresh, 3))
        dying = KillingStore(fresh, n)
        with pytest.raises(Killed):
            clean_unreferenced(dying, _load(dying))
        check_finished_whole(log, fresh, _load(fresh))
        check_resumed(log, fresh)


def test_kill_points_against_s3(object_store: object, bucket: str, log: Log) -> None:
    from test_copy_s3 import s3_store

    store = s3_store(object_store, bucket)
    total = len(counted_ops(log, store))
    for n in range(0, total, 3):
        store.delete_prefix("")
        run_point(log, store, n, "after" if n % 2 else "before")


# --- remote retention (expiration): dying before/after each write of an expiration ---------------

EXPIRE_NOW = 1_700_000_000_000 + 10_000
EXPIRE_MS = 8_500  # segments 0 and 1 (newest records at T0+~7 and T0+~1007) are past it, segment 2 is not


class Checkpoint:
    """The log start offset as a checkpoint file holds it: what a restart loads. ``kill`` dies
    ``before`` or ``after`` writing it."""

    def __init__(self, log: Log, kill: str | None = None) -> None:
        self.log, self.kill, self.durable = log, kill, log.log_start_offset

    def __call__(self) -> None:
        if self.kill == "before":
            raise Killed("killed before the log start offset checkpoint")
        self.durable = self.log.log_start_offset
        if self.kill == "after":
            raise Killed("killed after the log start offset checkpoint")


def _expiring_log(root: Path, store: RemoteStore) -> Log:
    """A log of 3 sealed segments, all copied, with a retention.ms under which the first two expire."""
    log = make_log(root / "orders-2", 3)
    copy_log(log, store, _load(store), epochs=log.leader_epoch_cache.entries)
    log.update_config(log.config.with_overrides({}, retention_ms=EXPIRE_MS))
    return log


def _expire(log: Log, store: RemoteStore, checkpoint: Callable[[], None]) -> None:
    expire(store, _load(store), log, now_ms=EXPIRE_NOW, checkpoint_log_start=checkpoint)


def check_expiration_resumed(log: Log, store: RemoteStore, durable_start: int) -> None:
    """After a kill: a reader finds every offset from the checkpointed log start on in a FINISHED
    segment that is whole; then a restart (the log reopened at the checkpointed start, reload,
    cleanup, a pass) leaves only segment 2, nothing unreferenced, and no orphan object."""
    fresh = _load(store)
    check_finished_whole(log, store, fresh)
    finished = fresh.finished_segments()
    assert finished and finished[0].start_offset <= durable_start, \
        f"log start {durable_start} below the first remote segment a reader finds ({finished[0].start_offset})"
    assert all(a.end_offset + 1 == b.start_offset for a, b in zip(finished, finished[1:]))
    config, dir = log.config, log.dir
    log.close()
    reopened = Log.open(dir, config, log_start_offset=durable_start, had_clean_shutdown=True)
    try:
        metadata = _load(store)
        clean_unreferenced(store, metadata)
        checkpoint = Checkpoint(reopened)
        expire(store, metadata, reopened, now_ms=EXPIRE_NOW, checkpoint_log_start=checkpoint)
        after = _load(store)
        assert [(s.start_offset, s.end_offset) for s in after.segments()] == [(40, 59)]
        assert after.unreferenced() == [] and checkpoint.durable == reopened.log_start_offset == 40
        [kept] = after.finished_segments()
        expected = {object_key(kept, k) for k in RemoteFileKind
                    if not (k is RemoteFileKind.TRANSACTION_INDEX and kept.txn_idx_empty)}
        assert {i.key for i in store.list() if "/metadata/" not in i.key} == expected, "orphan objects"
    finally:
        reopened.close()


def _expiration_ops(root: Path) -> list[tuple[str, str]]:
    store = ArrowRemoteStore((root / "store").as_uri())
    log = _expiring_log(root, store)
    counting = KillingStore(store)
    _expire(log, counting, Checkpoint(log))
    log.close()
    return counting.ops


def test_an_expiration_deletes_two_segments_with_events_and_deletes(kill_root: Callable[[], Path]) -> None:
    ops = _expiration_ops(kill_root())
    assert sum(1 for op, key in ops if op == "delete" and "/metadata/" not in key) == 2 * 6  # every object kind
    events = [key for op, key in ops if op == "put" and "/metadata/" in key and not key.endswith(".snapshot.json")]
    assert len(events) == 4  # DELETE_SEGMENT_STARTED and DELETE_SEGMENT_FINISHED of each


@pytest.mark.parametrize("when", ["before", "after"])
def test_every_kill_point_of_an_expiration_resumes(kill_root: Callable[[], Path], when: str) -> None:
    total = len(_expiration_ops(kill_root()))
    for n in range(total):
        root = kill_root()
        store = ArrowRemoteStore((root / "store").as_uri())
        log = _expiring_log(root, store)
        checkpoint = Checkpoint(log)
        with pytest.raises(Killed):
            _expire(log, KillingStore(store, n, when), checkpoint)
        assert checkpoint.durable == 40, "the log start offset is checkpointed before the first store write"
        check_expiration_resumed(log, store, checkpoint.durable)


@pytest.mark.parametrize("when", ["before", "after"])
def test_a_kill_at_the_log_start_checkpoint_of_an_expiration_resumes(kill_root: Callable[[], Path],
                                                                     when: str) -> None:
    root = kill_root()
    store = ArrowRemoteStore((root / "store").as_uri())
    log = _expiring_log(root, store)
    checkpoint = Checkpoint(log, kill=when)
    before = {i.key for i in store.list()}
    with pytest.raises(Killed):
        _expire(log, store, checkpoint)
    assert {i.key for i in store.list()} == before, "nothing deleted before the checkpoint"
    check_expiration_resumed(log, store, checkpoint.durable)


# --- deleting a partition's remote data (topic deletion, delete on disable) ----------------------

def _delete_data(store: RemoteStore, log: Log) -> None:
    """What a topic deletion does to the store: the pending object, then the partition's data."""
    from tidelog.remote.partition_delete import TOPIC_DELETED, PendingDeletion, finish_pending, record_pending
    pending = PendingDeletion(TIP.topic, TIP.topic_id, TIP.partition + 1, TOPIC_DELETED)
    record_pending(store, pending)
    metadata = _load(store)
    finish_pending(store, pending, lambda tip: metadata if tip == TIP else None)


@pytest.mark.parametrize("when", ["before", "after"])
def test_every_kill_point_of_a_remote_data_deletion_is_finished_by_the_next_process(
        kill_root: Callable[[], Path], log: Log, when: str) -> None:
    from tidelog.remote.partition_delete import finish_pending, list_pending
    counting = KillingStore(_file_store(kill_root, "counting"))
    _pass(log, counting.inner)
    counting.ops.clear()
    _delete_data(counting, log)
    assert [op for op, _ in counting.ops][0] == "put" and counting.ops[-1][0] == "delete"
    for n in range(len(counting.ops)):
        store = _file_store(kill_root, f"delete-{when}-{n}")
        _pass(log, store)
        with pytest.raises(Killed):
            _delete_data(KillingStore(store, n, when), log)
        pending = list_pending(store)
        if n == 0 and when == "before":  # died before the pending object landed: the change is refused
            assert pending == [] and len(_load(store).finished_segments()) == 3
            check_finished_whole(log, store, _load(store))
            continue
        for found in pending:  # the next process
            finish_pending(store, found, lambda tip: None)
        assert store.list() == [], "every object of the partition and the pending object are gone"
